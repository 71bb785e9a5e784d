#!/usr/bin/env bash
# Session 8 (2026-12-03), closing call (~9 min at most): main as it lands. The closing bench latency (120b decode
# 1/8/64/256/1024 and prefill 1k/8k, 20b decode 1/8/64) beside `gptoss roofline`, gpu_test_allreduce,
# the whole forward test (teacher-forced, engine, real width, TP2/TP4/EP in lockstep, DEP2 in
# lockstep, the fixtures), and every other GPU test while the budget lasts. Needs .devcarry
# (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/s8f-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
export GPTOSS_AR_TIMEOUT_S=10 CUDA_DEVICE_MAX_CONNECTIONS=32
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
budget=${BUDGET_S:-490}
t() { echo "($(($(date +%s) - start)) s)"; }
left() { echo $((budget - ($(date +%s) - start))); }
summary_header "$sum" "Session 8, closing call: main as it lands"
run_test() { # NAME LIMIT ARGS...
  local name=$1 lim=$2; shift 2
  timeout "$lim" $bin/$name "$@" >"$out/logs/$name$*.log" 2>&1
  local rc=$?
  echo "| $name $* | $(res $rc) | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/$name$*.log" | tail -1) | $(t) |" | tee -a "$sum"
  grep -E 'FAILED|failed' "$out/logs/$name$*.log" | head -4 | sed 's/^/    /' | tee -a "$sum"
}
echo -e "\n## bench latency (defaults) $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches ${CLOSE_BATCHES:-1,8,64,256,1024} --prefill "${CLOSE_PREFILL-1024,8192}" \
  --output-json "$out/latency-120b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
timeout 60 $bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
{ for b in 1 8 64 256 1024; do $bin/gptoss roofline --model 120b --batch $b --context 1024; done
  $bin/gptoss roofline --model 20b --batch 1 --context 1024; } >"$out/roofline.txt" 2>&1
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_test gpu_test_allreduce 60
# the forward test in three parts, so that each gives its result even if the budget cuts the last
for part in ${FWD_PARTS:---skip-tp --tp --dep}; do
  l=$(left)
  [ $l -gt 60 ] || { echo "| gpu_test_cuda_forward $part | not run | | $(t) |" | tee -a "$sum"; continue; }
  run_test gpu_test_cuda_forward $((l - 10)) $part
  grep -E "^summary:|TP[0-9] vs TP1|EP[0-9] vs TP1|DEP2 vs TP1|timed out" "$out/logs/gpu_test_cuda_forward$part.log" | head -8 | sed 's/^/    /' | tee -a "$sum"
done
for t in $(ls $bin/gpu_test_* | grep -vE "cuda_forward|allreduce"); do
  name=$(basename "$t")
  [ "$(left)" -lt 40 ] && { echo "| $name | not run | | $(t) |" | tee -a "$sum"; continue; }
  run_test "$name" 35
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
