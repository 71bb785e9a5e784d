#!/usr/bin/env bash
# ~2 min: gpu_test_moe (the register-A form's prepared 16-row B boxes give its bits; the kernel kinds'
# comparison with the switch reset per kind), the experts alone at T = 1024 and 4096 ("tma rs" against
# "tma rs box16"), then bench latency at decode 1024 and prefill 1k, default against
# GPTOSS_MOE_RS_BOX16=1, one round. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/box16-out "the register-A form's B in 16-row boxes"
test_table
run_logged moe 150 $bin/gpu_test_moe
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_moe --bench --bench-t 1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E " rs" | tee -a "$sum"
echo -e "\n## bench latency $(t)" | tee -a "$sum"
OUT=$out MODEL=120b BATCHES=1024 PREFILL=1024 ROUNDS=${ROUNDS:-1} \
  VARIANTS="default=- box16=GPTOSS_MOE_RS_BOX16=1" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
