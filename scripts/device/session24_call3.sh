#!/usr/bin/env bash
# Session 24, call 3 (~4 min): the attention kernel with two QKV pairs (and two O rows) a ring stage
# (32971ca) against its base (ef32369: one a stage), after call 2's ring-alone finding (H100: bulk
# copies deliver ~2.5-2.85 TB/s at 8 KB, ~2.9-3.0 at 16-32 KB; the kernel's 5.76 KB QKV copies ran
# its ring alone at 2.57).
#  (1) gpu_test_attn_stream (both stage forms) and gpu_test_cuda_forward (the default path);
#  (2) gpu_test_attn_stream --bench: "stream" (two a stage) against "one pair a stage", same run;
#  (3) scripts/device/ab.sh: the same seeded generate with both builds (identical JSON expected:
#      every row's sum is computed in the same order), bench latency 120b and 20b at batch 1 and 8,
#      two interleaved rounds.
# Prediction (before the run, H100): ring alone T = 1 20.6 -> 18-19 µs; the kernel 33.6 -> 31-32;
# the step at batch 1 +2-3 % (120b and 20b); batch 8 unchanged (the launches there).
# Needs .devcarry with .devcarry/base (BASE=ef32369 bash scripts/device/prepare.sh).
set -uo pipefail
root=${OUT:-/tmp/s24c3}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 24 call 3: two pairs a ring stage"
test_table
run_logged test_attn_stream 90 $bin/gpu_test_attn_stream
run_logged test_cuda_forward 240 $bin/gpu_test_cuda_forward
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
echo -e "\n## ab.sh (base $(cat .devcarry/base/commit.txt)) $(t)" | tee -a "$sum"
OUT=$root/ab SKIP_TESTS=1 MODELS="120b 20b" BATCHES=1,8 PREFILL=1024 ROUNDS=2 timeout 330 \
  bash scripts/device/ab.sh 2>&1 | tail -n 30 | tee -a "$sum"
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
