#!/usr/bin/env bash
# Session 25, call 8 (~2 min): where the MoE kernels' warps wait (call 5 said both are latency-
# bound: <1.2 eligible warps a scheduler, an issue every ~1.7-1.8 cycles): the stall reasons per
# issued instruction of moe_wgmma_rs's gate_up at T = 1024 and moe_small's down at T = 8, for the
# next session's kernel work. No prediction to test: a measurement to read.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25ncu2 "session 25 call 8: stall reasons of the MoE kernels"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for kts in moe_wgmma_rs_kernel:1024:10 moe_small_kernel:8:11; do
  IFS=: read -r k T skip <<<"$kts"
  echo -e "\n## $k, T = $T (launch $skip) $(t)" | tee -a "$sum"
  timeout 100 "$ncu" --clock-control none -k "regex:$k" --launch-skip "$skip" --launch-count 1 \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,smsp__cycles_active.avg" \
    $bin/gpu_test_moe --bench --bench-t "$T" >"$out/logs/ncu2-$k.txt" 2>&1 || echo "ncu $k failed ($?)" | tee -a "$sum"
  grep -E "  void |stalled|inst_executed|cycles_active" "$out/logs/ncu2-$k.txt" | awk '$NF+0 >= 0.05 || /void|inst_executed|cycles_active/' | head -40 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" logs && rm -rf "$out/logs" && mv /tmp/logs.tgz "$out/"
