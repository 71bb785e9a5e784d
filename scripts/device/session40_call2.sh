#!/usr/bin/env bash
# Session 40, call 2 (~6-7 min; any card). Prepare with SLIM=all TRACE=1 bash scripts/device/prepare.sh
# Two host-only trials of the one-token layer's kernel boundaries, off by default (the device code
# of every kernel unchanged), then every GPU test at the head and the latency figures.
# 1. GPTOSS_CARVEOUT=100 (carveout.h): route_sums' and the small MoE kernels' preferred shared-
#    memory carveout set to the largest, attn_stream's. If the driver gives the short kernels a
#    smaller carveout, each SM reconfigures L1/shared memory twice a layer. ncu's launch statistics
#    say first which carveout each kernel gets (the "Shared Memory Configuration Size").
#    Prediction: if the sizes differ by default, -0.5 to -1 µs a transition: 120b batch 1 +1 to
#    +2.5 %; if they are already equal, inside the spread.
# 2. GPTOSS_AS_COOP=0: attn_stream launched without the cooperative attribute (its fixed cost 3.0
#    µs in a graph, session 23; session 4 measured -1 µs without the attribute on the fused MoE).
#    Prediction: attn_stream -0.5 to -1 µs a launch, 120b batch 1 +0.7 to +1.5 %.
# Rule for each: the default if it gains more than the rounds' spread at 120b batch 1, with no
# loss at 20b, and the forward test passes with it; else removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s40c2 "session 40 call 2: the carveout and the non-cooperative attention launch (host-only trials); every GPU test at the head"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in base c100; do
  env_v=""; [ $v = c100 ] && env_v="GPTOSS_CARVEOUT=100"
  env $env_v timeout 120 "$ncu" --clock-control none -k "regex:attn_stream|route_sums|moe_small" \
    --launch-skip 20 --launch-count 4 --section LaunchStats \
    $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/logs/ncu-$v.txt" 2>&1 || echo "ncu $v failed ($?)" | tee -a "$sum"
  echo -e "\n## ncu launch statistics, $v $(t)" | tee -a "$sum"
  grep -E "^  [a-z_]+.*\(|Shared Memory Configuration Size|Dynamic Shared Memory Per Block|Static Shared Memory Per Block" "$out/logs/ncu-$v.txt" | head -24 | tee -a "$sum"
done
ROUNDS=3 decode_variants "base=- c100=GPTOSS_CARVEOUT=100 nocoop=GPTOSS_AS_COOP=0 both=GPTOSS_CARVEOUT=100+GPTOSS_AS_COOP=0" 120b:1 20b:1
if before 200; then
  GPTOSS_CARVEOUT=100 GPTOSS_AS_COOP=0 decode_by_kernel 1
  mv "$out/bubble-b1.md" "$out/bubble-b1-both.md"
fi
test_table
if before 260; then
  GPTOSS_CARVEOUT=100 GPTOSS_AS_COOP=0 run_logged forward_both 100 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "^summary|FAILED" "$out/logs/forward_both.log" | head -8 | tee -a "$sum"
fi
before 330 && TEST_LIMIT=150 gpu_tests_table
before 480 && roofline_and_latency
finish_call
