#!/usr/bin/env bash
# Session 24, call 4 (~5 min): the down projection's K splits measured at every batch of the small
# path, to set the rule (moe_experts.cu down_splits_for) from data. The kernel table (call 1, H100,
# batch 8) has down at 54.7 µs against gate_up's 95.6 for twice the bytes: 28 touched experts make
# ~1,270 blocks, 2.4 waves of the 528 resident, run as 3. The rule splits K only while one wave
# holds the blocks (S = 2 at batch 1, 1 from batch 2).
#  (1) gpu_test_moe with GPTOSS_MOE_DOWN_SPLITS=5 (every small-path case at five splits) and
#      gpu_test_cuda_forward with =4 (the norms read k·S slots a token);
#  (2) bench latency, decode only, 120b at batches 1-64 and 20b at 1-32, with the rule (0) and
#      forced S = 1-5, two interleaved rounds; the table: tokens/s (mean of the rounds) and each
#      S against the rule.
# Prediction (before the run, H100): batch 8 S = 2 +3-5 % (down ~55 -> ~45 µs of a ~212 µs layer);
# batch 4 S = 2-3 +3-6 %; batch 2 S = 2-3 within ±2 %; batch 1 S = 2 (the rule) best or within 1 %;
# 32-64 within ±2 % of the rule. If the table says so, the rule becomes a per-batch choice from it.
set -uo pipefail
root=${OUT:-/tmp/s24c4}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 24 call 4: the down projection's K splits"
test_table
GPTOSS_MOE_DOWN_SPLITS=5 run_logged test_moe_s5 150 $bin/gpu_test_moe
GPTOSS_MOE_DOWN_SPLITS=4 run_logged test_cuda_forward_s4 200 $bin/gpu_test_cuda_forward
g=.devcarry/bin/gptoss
mkdir -p "$root/lat"
for r in 1 2; do
  for S in 0 1 2 3 4 5; do
    GPTOSS_MOE_DOWN_SPLITS=$S timeout 120 $g bench latency --model synthetic:120b --batches 1,2,4,8,16,32,64 \
      --prefill "" --output-json "$root/lat/120b-s$S-r$r.json" >"$root/lat/120b-s$S-r$r.log" 2>&1 || echo "120b S=$S r$r failed"
    GPTOSS_MOE_DOWN_SPLITS=$S timeout 90 $g bench latency --model synthetic:20b --batches 1,2,4,8,16,32 \
      --prefill "" --output-json "$root/lat/20b-s$S-r$r.json" >"$root/lat/20b-s$S-r$r.log" 2>&1 || echo "20b S=$S r$r failed"
  done
done
python3 - "$root/lat" <<'PY' | tee -a "$sum"
import json, glob, os, sys
d = sys.argv[1]
for m in ("120b", "20b"):
    tab = {}
    for S in range(6):
        for r in (1, 2):
            f = os.path.join(d, f"{m}-s{S}-r{r}.json")
            if not os.path.exists(f): continue
            for x in json.load(open(f))["results"]:
                if x["phase"] == "decode":
                    tab.setdefault((S, x["batch"]), []).append(x["tokens_per_s"])
    batches = sorted({b for (_, b) in tab})
    print(f"\n### {m} decode tokens/s (mean of rounds), S forced against the rule (S = 0)\n")
    print("| batch | rule | " + " | ".join(f"S={S}" for S in range(1, 6)) + " |")
    print("| ---: | ---: |" + " ---: |" * 5)
    for b in batches:
        base = tab.get((0, b))
        bm = sum(base) / len(base) if base else 0
        cells = []
        for S in range(1, 6):
            v = tab.get((S, b))
            if not v or not bm: cells.append("-"); continue
            mv = sum(v) / len(v)
            cells.append(f"{mv:.0f} ({mv / bm:.3f})")
        spread = (max(base) - min(base)) / bm if base and bm else 0
        print(f"| {b} | {bm:.0f} (±{spread * 50:.1f} %) | " + " | ".join(cells) + " |")
PY
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
