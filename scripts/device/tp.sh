#!/usr/bin/env bash
# Issue 17 on one H200, in one call (~4 min): the tensor-parallel code with its ranks in lockstep on
# one GPU (GPTOSS_TP_ONE_GPU=1), and on two GPUs when the machine has them.
#   1. gpu_test_allreduce: the one-shot all-reduce + residual + RMSNorm and the logits gather,
#      virtual 2 and 4 ranks (and real peers with 2 GPUs), eager and in graphs, and the NCCL path
#      (one rank on GPU 0; both GPUs with 2); then --bench (with two GPUs, NCCL's path of the same
#      message beside ours, and the GPTOSS_AR_NCCL_MIN_TOKENS it suggests);
#   2. gpu_test_cuda_forward --tp: synthetic:120b:layers=2 under TP2 and TP4 against TP1;
#   3. bench latency synthetic:120b, decode 1 and 64 at 1k context, TP1 and TP2 (with one GPU the two
#      ranks share it: a check that it runs, not a speed figure).
# Prints $OUT/tp-summary.md. Needs .devcarry (bash scripts/device/prepare.sh); the device call:
# carry [".devcarry"], command `bash scripts/device/tp.sh`. AR_BENCH=0 skips the all-reduce timings.
set -uo pipefail
out=${OUT:-/tmp/tp-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=32 # ranks sharing a GPU: their streams on distinct queues
export GPTOSS_AR_TIMEOUT_S=${GPTOSS_AR_TIMEOUT_S:-10} # a stuck collective fails with its report
bin=.devcarry/bin
sum="$out/tp-summary.md"
ngpu=$(nvidia-smi --list-gpus | wc -l)
summary_header "$sum" "Tensor parallelism (issue 17)"
timeout 120 "$bin/gpu_test_allreduce" >"$out/logs/allreduce.log" 2>&1
echo "- gpu_test_allreduce: $(res $?) — $(tail -1 "$out/logs/allreduce.log")" | tee -a "$sum"
grep -E "FAIL|failed" "$out/logs/allreduce.log" | head -8 | sed 's/^/  /' | tee -a "$sum"
if [ "${AR_BENCH:-1}" = 1 ]; then
  timeout 120 "$bin/gpu_test_allreduce" --bench >"$out/logs/allreduce-bench.log" 2>&1
  grep -E '^\||ranks|suggested|SKIP' "$out/logs/allreduce-bench.log" | tee -a "$sum"
fi
timeout 200 "$bin/gpu_test_cuda_forward" --tp >"$out/logs/forward-tp.log" 2>&1
echo "- gpu_test_cuda_forward --tp: $(res $?) — $(tail -1 "$out/logs/forward-tp.log")" | tee -a "$sum"
grep -E "TP[0-9] vs TP1|FAIL|failed|tensor parallel|timed out" "$out/logs/forward-tp.log" | head -12 |
  sed 's/^/  /' | tee -a "$sum"
[ "$ngpu" -ge 2 ] || export GPTOSS_TP_ONE_GPU=1
for tp in 1 2; do
  timeout 120 "$bin/gptoss" bench latency --model synthetic:120b -tp "$tp" --batches 1,64 \
    --prefill 1024 --context 1024 --decode-steps 16 --output-json "$out/latency-tp$tp.json" \
    >"$out/logs/latency-tp$tp.log" 2>&1
  echo "- bench latency -tp $tp: $(res $?)" | tee -a "$sum"
  grep -E '^\| synthetic' "$out/logs/latency-tp$tp.log" | tee -a "$sum"
  grep -iE "error|failed|timed out" "$out/logs/latency-tp$tp.log" | head -3 | sed 's/^/  /' | tee -a "$sum"
done
# Two GPUs: TP2 again with NCCL for steps of 64 tokens or more (the prefill and decode 64; decode 1
# stays on the one-shot kernel), graphs included: the whole forward pass through the NCCL path.
if [ "$ngpu" -ge 2 ]; then
  GPTOSS_AR_NCCL_MIN_TOKENS=64 timeout 120 "$bin/gptoss" bench latency --model synthetic:120b -tp 2 \
    --batches 1,64 --prefill 1024 --context 1024 --decode-steps 16 \
    --output-json "$out/latency-tp2-nccl64.json" >"$out/logs/latency-tp2-nccl64.log" 2>&1
  echo "- bench latency -tp 2, GPTOSS_AR_NCCL_MIN_TOKENS=64: $(res $?)" | tee -a "$sum"
  grep -E '^\| synthetic|through NCCL' "$out/logs/latency-tp2-nccl64.log" | tee -a "$sum"
  grep -iE "error|failed|timed out|NCCL WARN" "$out/logs/latency-tp2-nccl64.log" | head -3 |
    sed 's/^/  /' | tee -a "$sum"
fi
