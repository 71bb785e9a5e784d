#!/usr/bin/env bash
# The MoE small kernel with fewer ALU-pipe instructions (issue 13/14), against its base, in one call
# (~6 min): the SASS opcode counts of its NTP=1 gate_up kernel (cuobjdump), gpu_test_moe and
# gpu_test_cuda_forward (new build), the experts alone (gpu_test_moe --bench), then
# scripts/device/ab.sh (seeded generate identical, bench latency 120b base vs new interleaved).
# Needs .devcarry from `BASE=REV bash scripts/device/prepare.sh`. Prints $OUT/alu-summary.md.
set -uo pipefail
out=${OUT:-/tmp/alu-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/alu-summary.md"
summary_header "$sum" "MoE small kernel, ALU-pipe diet (base $(cat .devcarry/base/commit.txt))"
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump /usr/local/cuda-*/bin/cuobjdump 2>/dev/null | head -1)
for b in base bin; do
  f=.devcarry/$b/gptoss
  [ -n "$cuobjdump" ] || break
  echo "## SASS of moe_small_kernel<1,0,true> ($b): opcode counts" | tee -a "$sum"
  "$cuobjdump" -sass -fun '_Z16moe_small_kernelILi1ELi0ELb1EEv8moe_args' "$f" 2>/dev/null |
    grep -oE '^\s+/\*[0-9a-f]{4,}\*/\s+(@!?U?P[0-9T]\s+)?[A-Z0-9_.]+' | awk '{print $NF}' |
    sort | uniq -c | sort -rn | head -14 | tr '\n' ';' | tee -a "$sum"
  echo | tee -a "$sum"
done
timeout 200 "$bin/gpu_test_moe" >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
timeout 150 "$bin/gpu_test_cuda_forward" --skip-tp >"$out/logs/forward.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/moe.log" "$out/logs/forward.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
timeout 200 "$bin/gpu_test_moe" --bench >"$out/logs/moe-bench.log" 2>&1
echo "## experts alone (new)" | tee -a "$sum"
grep -E "^\| (case|---)|moe experts 120b T=[0-9]+ (small|large wgmma)" "$out/logs/moe-bench.log" | tee -a "$sum"
echo "## seeded generate and bench latency, base vs new" | tee -a "$sum"
OUT="$out/ab" SKIP_TESTS=1 MODELS=120b BATCHES=${BATCHES:-1,8,64,256} PREFILL=${PREFILL:-1024,8192} \
  bash scripts/device/ab.sh 2>&1 | grep -vE "^NVIDIA|^new " | tee -a "$sum"
cp "$out"/ab/lat-*.json "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs ab 2>/dev/null && rm -rf "$out/logs" "$out/ab"
