#!/usr/bin/env bash
# Session 24, call 5 (~5 min): dense_mma (the QKV and O projections of 2-8 token steps on the
# tensor cores, fed by per-warp cp.async rings; GPTOSS_DENSE_MMA=1, off by default), never run.
#  (1) gpu_test_dense_mma: against gemv_bf16 at M = 1-8, both forms (8 and 4 warps), refusals;
#      then --bench: the 120b's O and QKV at M = 2, 4, 8 against cuBLASLt as the runner calls it;
#  (2) gpu_test_cuda_forward under GPTOSS_DENSE_MMA=1 (the model's numerics, its top-1 rules);
#  (3) bench latency with GPTOSS_DENSE_MMA=0 and =1 (same binary), 120b decode 1, 2, 4, 8 and 20b
#      decode 1, 4, 8, two interleaved rounds: tokens/s and the ratio.
# Prediction (before the run, H100): O alone at M = 8 ~17 -> 10-11 µs (cuBLASLt's split-K GEMM and
# its reduce, ~1.4 TB/s, against ~2.5 TB/s), QKV ~15 -> 12-13; the step +5-7 % at batch 2, +4-6 %
# at 4, +3-4 % at 8, batch 1 unchanged (the attention kernel there). Decision: every batch of 2-8
# at or above 1.00 beyond the spread -> on by default for 2-8 tokens.
set -uo pipefail
root=${OUT:-/tmp/s24c5}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 24 call 5: dense_mma"
test_table
run_logged test_dense_mma 120 $bin/gpu_test_dense_mma
echo -e "\n## gpu_test_dense_mma --bench $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_dense_mma --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
GPTOSS_DENSE_MMA=1 run_logged test_cuda_forward_dense 240 $bin/gpu_test_cuda_forward
g=.devcarry/bin/gptoss
mkdir -p "$root/lat"
for r in 1 2; do
  for D in 0 1; do
    GPTOSS_DENSE_MMA=$D timeout 120 $g bench latency --model synthetic:120b --batches 1,2,4,8 \
      --prefill "" --output-json "$root/lat/120b-d$D-r$r.json" >"$root/lat/120b-d$D-r$r.log" 2>&1 || echo "120b D=$D r$r failed"
    GPTOSS_DENSE_MMA=$D timeout 90 $g bench latency --model synthetic:20b --batches 1,4,8 \
      --prefill "" --output-json "$root/lat/20b-d$D-r$r.json" >"$root/lat/20b-d$D-r$r.log" 2>&1 || echo "20b D=$D r$r failed"
  done
done
python3 - "$root/lat" <<'PY' | tee -a "$sum"
import json, os, sys
d = sys.argv[1]
for m in ("120b", "20b"):
    tab = {}
    for D in (0, 1):
        for r in (1, 2):
            f = os.path.join(d, f"{m}-d{D}-r{r}.json")
            if not os.path.exists(f): continue
            for x in json.load(open(f))["results"]:
                if x["phase"] == "decode":
                    tab.setdefault((D, x["batch"]), []).append(x["tokens_per_s"])
    print(f"\n### {m} decode tokens/s, GPTOSS_DENSE_MMA=0 against =1 (each round)\n")
    print("| batch | 0 (cuBLASLt) | 1 (dense_mma) | 1 / 0 |")
    print("| ---: | --- | --- | ---: |")
    for b in sorted({b for (_, b) in tab}):
        a, c = tab.get((0, b), []), tab.get((1, b), [])
        if not a or not c: continue
        print(f"| {b} | {', '.join(f'{v:.0f}' for v in a)} | {', '.join(f'{v:.0f}' for v in c)} | "
              f"{(sum(c) / len(c)) / (sum(a) / len(a)):.3f} |")
PY
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
