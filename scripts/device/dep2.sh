#!/usr/bin/env bash
# Issue 17's DEP2 (--data-parallel-size 2 --enable-expert-parallel) on one H200, in one call
# (~3 min): the ranks in lockstep on one GPU (GPTOSS_TP_ONE_GPU=1, set by the test when there is
# one GPU), and on two GPUs when the machine has them.
#   1. gpu_test_allreduce: the all-reduce and the gather DEP's collectives are made of (the
#      reduce-scatter is its all-reduce with a row range: its default path must still pass);
#   2. gpu_test_cuda_forward --dep: synthetic:20b:layers=2:seed=0, six sequences over two ranks'
#      sub-batches (one rank empty in some steps), three schedules, against one GPU (relL2, top-1
#      >= 99 % of the clear positions), and the flag's refusals;
#   3. bench latency synthetic:20b --data-parallel-size 2 with expert parallelism: that it runs end
#      to end and its JSON records "data_parallel_size" (with one GPU the ranks share it: not a
#      speed figure).
# Prints $OUT/dep2-summary.md. Needs .devcarry/bin/{gpu_test_allreduce,gpu_test_cuda_forward,gptoss}
# (bash scripts/device/prepare.sh); the device call: carry [".devcarry"], command
# `bash scripts/device/dep2.sh`.
set -uo pipefail
out=${OUT:-/tmp/dep2-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=32
export GPTOSS_AR_TIMEOUT_S=${GPTOSS_AR_TIMEOUT_S:-10} # a stuck collective fails with its report
bin=.devcarry/bin
sum="$out/dep2-summary.md"
ngpu=$(nvidia-smi --list-gpus | wc -l)
summary_header "$sum" "DEP2: data + expert parallel (issue 17)"
timeout 120 "$bin/gpu_test_allreduce" >"$out/logs/allreduce.log" 2>&1
echo "- gpu_test_allreduce: $(res $?) — $(tail -1 "$out/logs/allreduce.log")" | tee -a "$sum"
grep -E "FAIL|failed" "$out/logs/allreduce.log" | head -8 | sed 's/^/  /' | tee -a "$sum"
timeout 300 "$bin/gpu_test_cuda_forward" --dep >"$out/logs/forward-dep.log" 2>&1
echo "- gpu_test_cuda_forward --dep: $(res $?) — $(tail -1 "$out/logs/forward-dep.log")" | tee -a "$sum"
grep -E "DEP2 vs|\(g\)|FAIL|failed|timed out" "$out/logs/forward-dep.log" | head -16 |
  sed 's/^/  /' | tee -a "$sum"
[ "$ngpu" -ge 2 ] || export GPTOSS_TP_ONE_GPU=1
timeout 150 "$bin/gptoss" bench latency --model synthetic:20b --data-parallel-size 2 \
  --enable-expert-parallel --batches 1,8 --prefill 256 --context 256 --decode-steps 8 \
  --output-json "$out/latency-dep2.json" >"$out/logs/latency-dep2.log" 2>&1
echo "- bench latency --data-parallel-size 2: $(res $?)" | tee -a "$sum"
grep -E '^\| synthetic' "$out/logs/latency-dep2.log" | tee -a "$sum"
grep -o '"data_parallel_size": *[0-9]*' "$out/latency-dep2.json" 2>/dev/null | sed 's/^/  /' |
  tee -a "$sum"
grep -iE "error|failed|timed out" "$out/logs/latency-dep2.log" | head -3 | sed 's/^/  /' | tee -a "$sum"
