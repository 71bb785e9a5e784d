#!/usr/bin/env bash
# Where prefill 1k's GPU time goes, per kernel (CUPTI, scripts/device/kernel_share.py), under the
# build's defaults and under each GPTOSS_MOE_WGMMA value in $KINDS (default "5"), ~1 min each; plus
# the experts alone at T = 1024 for the cross-check. Needs .devcarry (scripts/device/prepare.sh).
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/share-out "Prefill 1k's kernels (CUPTI): the defaults against GPTOSS_MOE_WGMMA=${KINDS:-5}"
lib=$PWD/.devcarry/lib/libgptoss_trace.so
for v in default ${KINDS:-5}; do
  echo -e "\n## kernel shares, prefill ${P:-1024}, $v" | tee -a "$sum"
  envs=()
  [ "$v" = default ] || envs=(GPTOSS_MOE_WGMMA=$v)
  env "${envs[@]}" CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/logs/trace-$v.csv" timeout 150 \
    $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill "${P:-1024}" >"$out/logs/trace-$v.log" 2>&1 ||
    echo "trace $v failed ($?)" | tee -a "$sum"
  grep -E "^\| synthetic|prefill" "$out/logs/trace-$v.log" | tail -2 | tee -a "$sum"
  python3 scripts/device/kernel_share.py "$out/logs/trace-$v.csv" 12 | tee -a "$sum"
  gzip -f "$out/logs/trace-$v.csv"
done
echo -e "\n## experts alone, T = 1024" | tee -a "$sum"
timeout 100 $bin/gpu_test_moe --bench --bench-t 1024 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "wgmma" | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
