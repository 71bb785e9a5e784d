#!/usr/bin/env bash
# Issue 16 on the GPU machine, in one call: structured output's constrained rows sampled on the
# device (GPTOSS_GPU_MASKS=1, src/backend/cuda/runner_masked.c) against the host path.
#   1. gpu_test_sampling (the mask kernel against step_mask_apply, bit for bit, and sampling the
#      masked rows as sampler.c does) and gpu_test_masked_sampling (the engine on the CUDA backend:
#      host path vs device path, same tokens, every output in its grammar; eager and graphs);
#   2. `gptoss bench latency` decode at batch 1, 8, 64 (1k context): unconstrained, constrained on
#      the host path, constrained on the device path. The target (issue 16): 64 constrained
#      sequences at >= 95 % of the unconstrained tokens/s.
# Prints a short table at the end (also $OUT/structured-summary.md). Files back: the summary and
# the three latency JSONs. Needs .devcarry (bash scripts/device/prepare.sh here), then the device
# call with carry [".devcarry"] and `bash scripts/device/structured.sh`. Knobs: LAT_MODEL
# (synthetic:120b), BATCHES (1,8,64), LAT_STEPS (16), SKIP_TESTS=1.
set -uo pipefail
out=${OUT:-/tmp/structured-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/structured-summary.md"
model=${LAT_MODEL:-synthetic:120b}
batches=${BATCHES:-1,8,64}
steps=${LAT_STEPS:-16}
{
  echo "# Constrained sampling on the device (issue 16)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "commit $(cat .devcarry/commit.txt 2>/dev/null)"
} | tee "$sum"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "## GPU tests" | tee -a "$sum"
  for t in gpu_test_sampling gpu_test_masked_sampling; do
    timeout 200 "$bin/$t" >"$out/logs/$t.log" 2>&1
    rc=$?
    case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
    echo "- $t: $r ($(grep -E 'checks passed|FAILED|failed' "$out/logs/$t.log" | tail -1))" | tee -a "$sum"
    grep -E '^(masks|eager|graphs|sampling):' "$out/logs/$t.log" | sed 's/^/  /' | tee -a "$sum"
  done
fi
echo "## bench latency, $model, decode at 1k context" | tee -a "$sum"
lat() { # NAME ENV ARGS...
  local name=$1 env=$2
  shift 2
  env $env "$bin/gptoss" bench latency --model "$model" --batches "$batches" --context 1024 \
    --decode-steps "$steps" --warmup 3 --prefill 1 --output-json "$out/lat-$name.json" "$@" \
    >"$out/logs/lat-$name.log" 2>&1 || echo "($name: exit $?)" | tee -a "$sum"
}
lat plain GPTOSS_GPU_MASKS=0
lat host GPTOSS_GPU_MASKS=0 --constrained
lat device GPTOSS_GPU_MASKS=1 --constrained
python3 - "$out" <<'EOF' | tee -a "$sum"
import json, sys, os
out = sys.argv[1]
runs = {}
for name in ("plain", "host", "device"):
    p = os.path.join(out, f"lat-{name}.json")
    if os.path.exists(p):
        runs[name] = {r["batch"]: r["tokens_per_s"] for r in json.load(open(p))["results"]
                      if r["phase"].startswith("decode")}
print("| batch | unconstrained tok/s | constrained, host | share | constrained, device | share |")
print("| ---: | ---: | ---: | ---: | ---: | ---: |")
for b in sorted(runs.get("plain", {})):
    p = runs["plain"][b]
    h = runs.get("host", {}).get(b, float("nan"))
    d = runs.get("device", {}).get(b, float("nan"))
    print(f"| {b} | {p:.0f} | {h:.0f} | {100*h/p:.1f} % | {d:.0f} | {100*d/p:.1f} % |")
EOF
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
