#!/usr/bin/env bash
# Session 15's first call, ~6 min: (1) the FP8 cache's prefill on the wgmma kernel (prepared in
# session 14, the default since session 15): gpu_test_attention (its FP8 prefill cases run it) and
# the kernels alone (both kernels, both cache dtypes); (2) where the 120b step's GPU time goes now, per kernel name: prefill 1k
# (CUPTI over the whole run, kernel_share.py) and the graph-replayed decode steps at batch 64, 256
# and 1024 (bubble.py's by-name table). Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/probe-out "session 15 probe: FP8 wgmma prefill; the 120b step's kernels by name"
lib=$PWD/.devcarry/lib/libgptoss_trace.so
test_table
run_logged test_attention 200 $bin/gpu_test_attention
echo -e "\n## the kernels alone, bf16 and FP8 $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_attention --bench-prefill 2>&1 | grep -E "^\|" | tee -a "$sum"
echo -e "\n## prefill 1k, GPU time by kernel $(t)" | tee -a "$sum"
CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/logs/trace-p1k.csv" timeout 150 \
  $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 1024 >"$out/logs/trace-p1k.log" 2>&1 ||
  echo "trace p1k failed ($?)" | tee -a "$sum"
grep -E "^\| synthetic" "$out/logs/trace-p1k.log" | tail -2 | tee -a "$sum"
python3 scripts/device/kernel_share.py "$out/logs/trace-p1k.csv" 25 | tee -a "$sum"
gzip -f "$out/logs/trace-p1k.csv"
decode_by_kernel ${BATCHES:-64 256 1024}
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
