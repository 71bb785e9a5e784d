#!/usr/bin/env bash
# Session 21, first device call (~8 min): (1) the layer probe with its two stream forms
# (scripts/device/layer_probe.sh holds the prediction and the decision rule); (2) every GPU test
# binary on the code head (the last full run was session 20's call 3 at 6ca4b60; 33dfbdd's review
# mend and env.sh's tokenizer unpacking have not run on the GPU since), within what is left of 520 s.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
root=${OUT:-/tmp/s21c1}
mkdir -p "$root"
OUT=$root/probe bash scripts/device/layer_probe.sh
source "$(dirname "$0")/env.sh"
device_script "$root/tests" "every GPU test binary on the head"
TEST_LIMIT=${TEST_LIMIT:-120} OUT=$out/logs timeout 380 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
tail -n 20 "$out/logs/gpu_tests.log" | tee -a "$sum"
cat "$root/probe/summary.md" "$sum" >"$root/summary.md"
tar czf "$root/logs.tgz" -C "$root" probe/logs tests/logs 2>/dev/null
