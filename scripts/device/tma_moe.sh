#!/usr/bin/env bash
# The TMA-fed MoE kernel (moe_wgmma_tma.cu, GPTOSS_MOE_WGMMA=4) against the default (3), ~7 min:
# gpu_test_moe (every large kernel, tma's bits against ws's), the forward test with =4, the experts
# alone at T = 256 … 16384, ncu of the T = 1024 tma gate_up kernel, then bench latency interleaved
# (decode 256 and 1024, prefill 1k and 8k). Needs .devcarry (scripts/device/prepare.sh).
# Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/tma-out}
mkdir -p "$out/logs" "$out/ncu"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "The TMA-fed MoE kernel (GPTOSS_MOE_WGMMA=4) against the default"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_logged moe 150 $bin/gpu_test_moe
ok=$?
grep -E "tma|differ" "$out/logs/moe.log" | sort | uniq -c | head -8 | tee -a "$sum"
run_logged forward_tma 200 env GPTOSS_MOE_WGMMA=4 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t ${TS:-256,1024,4096,16384} >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "wgmma" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
k=moe_wgmma_tma_kernel
echo -e "\n## ncu $k, T = 1024, 64-token tiles $(t)" | tee -a "$sum"
timeout 150 "$ncu" --clock-control none -k "regex:^$k\$" --launch-skip 24 --launch-count 2 --set full \
  --import-source no -o "$out/ncu/$k" -f $bin/gpu_test_moe --bench --bench-t 1024 >"$out/logs/ncu-$k.log" 2>&1 ||
  echo "ncu $k failed ($?)" | tee -a "$sum"
if [ -f "$out/ncu/$k.ncu-rep" ]; then
  "$ncu" -i "$out/ncu/$k.ncu-rep" --page details >"$out/ncu/$k-details.txt" 2>&1
  "$ncu" -i "$out/ncu/$k.ncu-rep" --page source --print-source sass --csv >"$out/ncu/$k-sass.csv" 2>&1
  grep -E "^  [a-z_]+<|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Eligible Warps|Registers Per" \
    "$out/ncu/$k-details.txt" | tee -a "$sum"
  gzip -f "$out/ncu/$k-sass.csv"
  rm -f "$out/ncu/$k.ncu-rep"
fi
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${TMA_BATCHES:-256,1024} PREFILL=${TMA_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="default=- tma=GPTOSS_MOE_WGMMA=4" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
