#!/usr/bin/env bash
# Session 16, calls 4 and 5 (~4 min). Call 4: the loads at the top (form 1), measured slower
# everywhere (more requests in flight per warp, lower DRAM efficiency). Call 5: a scan of where
# the loads go — after 2 (form 2), 4 (3) or 5 (4) of the batch's 6 steps — around ptxas's
# placement (the default, after ~3.5): is ptxas's the best? Call 4: the MoE small path's next-batch loads pinned at the top of each batch
# (GPTOSS_MOE_EARLY_LOADS=1, moe_small.cuh's sched_fence). The SASS (scripts/sass/disasm.sh) shows
# ptxas issuing them after ~3.5 of the batch's 6 steps, so a warp has ~2.5-8.5 steps in flight
# instead of the 6-12 the source intends (and it moved the ring forms' loads of call 1 to the end
# of their loops: those measured a drained ring, not a ring). Prediction, written before the run:
# the experts alone −3-8 % at T = 1-64 where the stream is the bound, less at T = 256; 120b decode
# +2-5 % at batch 8-64. gpu_test_moe (the same bits, against the CPU reference), the forward test
# with it on; the experts alone at T = 1, 8, 64, 256; bench latency 120b decode 1, 8, 64, 256
# interleaved (ROUNDS, 2). Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/early-out "MoE small path: next-batch loads pinned early (GPTOSS_MOE_EARLY_LOADS=1)"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
GPTOSS_MOE_EARLY_LOADS=${FORWARD_FORM:-4} run_logged forward_early 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | grep -v stage-16B | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS=${VARIANTS:-"base=- at2=GPTOSS_MOE_EARLY_LOADS=2 at4=GPTOSS_MOE_EARLY_LOADS=3 at5=GPTOSS_MOE_EARLY_LOADS=4"} \
  bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
