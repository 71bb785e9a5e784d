#!/usr/bin/env bash
# Session 16, call 6 (~2 min): the small path at 8 tokens a pass (NTP 1) up to 64 pairs an expert
# (GPTOSS_MOE_NTP1_MAX_AVG=64) against the default (NTP 2 above 3 pairs: T > 96 at 120b). At T = 64
# NTP 1 streams at ~85 % of 4.2 TB/s, NTP 2 at T = 256 at ~70 %; with 8-token passes an expert with
# 9-16 tokens re-reads its tile for a second pass, from L2 if it is still there. Prediction: a gain
# only if the second passes hit L2: T = 256 −0-15 % on the experts alone, decode 256 0.95-1.10.
# The experts alone at T = 128, 256 under both; bench latency 120b decode 128, 256 interleaved.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/ntp-out "MoE small path: NTP 1 up to 64 pairs an expert against the default"
for v in default ntp1; do
  env=(); [ $v = ntp1 ] && env=(GPTOSS_MOE_NTP1_MAX_AVG=64)
  echo -e "\n## experts alone, $v $(t)" | tee -a "$sum"
  env "${env[@]}" timeout 120 $bin/gpu_test_moe --bench --bench-t 128,256 2>&1 | grep -E "^\| moe experts.*small.*host" | tee -a "$sum"
done
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=128,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="default=- ntp1=GPTOSS_MOE_NTP1_MAX_AVG=64" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
