#!/usr/bin/env bash
# Session 27, call 1 (~8 min): three builds of one head, held against each other.
#   base = 2bb2df4 (the MXFP4 layout before, .devcarry/base),
#   l9   = 2bb2df4 with -DGPTOSS_MXFP4_LAYOUT9=ON (.devcarry/l9),
#   new  = l9 (as the only layout: the option and the old code removed, the rotate written as two
#          shifts, the same SASS) plus the warp index through a shuffle in the register-A MoE kernel and the prefill
#          attention kernel (.devcarry/bin: their MMA descriptors in uniform registers; no R2UR in
#          the k loops: rs 197 -> 191 a pair of steps, attention 609 -> 599 a tile), and the
#          small MoE kernel's k loop without bounded loads (its matrices padded) and unrolled by
#          two batches: no zeroing and no register copies, 464 -> 423 instructions a batch of
#          six steps at one token group, 525 -> 471 at two (-8.8 / -10.3 %), registers <= 118.
#  (1) ab.sh base -> l9: 120b decode 1, 8, 64, 256, 1024, 120b prefill 1k, 8k; 3 rounds; 20b 1, 64, 1024.
#      Prediction (session 26, session26_call2.sh): decode 256, 1024 and prefill 1k +4-7 %,
#      prefill 8k +2-5 %, decode 1-64 0 to +2 %. Decision (written in session 26): the layout
#      becomes the only one if nothing loses beyond the spread and something gains beyond it;
#      otherwise it goes.
#  (2) ab.sh l9 -> new: the seeded generate (identical expected: the same MMAs, the same bits),
#      120b decode 1, 8, 64, 256, 1024, 120b prefill 1k, 8k; 3 rounds; 20b 1, 64, 1024.
#      Prediction, the small kernel (decode 1-256): where it is issue-bound, decode 256 +3-7 %,
#      64 +1-4 %; 8 0-3 % (its warps wait on loads), 1 0-1 %. Decision: kept if nothing loses
#      beyond the spread (no bits change).
#      Prediction, the uniform descriptors: the folded loop is
#      197 -> 191 instructions a pair of steps (-3 %) and the R2UR latency before each MMA group
#      goes: decode 1024 and prefill 1k +1-4 %, prefill 8k +1-3 % (the attention's share ~0.2 %),
#      20b decode 1024 +1-3 %.
#      Decision: kept if nothing loses beyond the spread (it changes no bits and removes
#      instructions).
#  (3) the new build, the small kernel's register batch at 8 k steps instead of 6
#      (GPTOSS_MOE_SMALL_U=8: 16 loads of 16 B in flight a lane instead of 12, 104-124 registers,
#      no spills): 120b decode 1, 8, 64, 256, two rounds. Prediction: batch 1-8, where the warps
#      wait on their loads, +1-4 %; 64-256 0-2 %. Decision: 8 becomes the default if it gains
#      beyond the spread somewhere and loses nowhere; else the switch goes.
#  Order as run (the budget is short: a start was taken back mid-run): every GPU test binary of the
#  new build first (the small kernel's loads changed); base -> new at 120b, three rounds (decode
#  1-1024, prefill 1k and 8k: the sum of the predictions above); then (1) and (3) and (2), two
#  rounds, decode only; then the experts alone (gpu_test_moe --bench).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s27c1 "session 27 call 1: the 9-operation layout, then uniform descriptors"
gpu_tests_table
echo -e "\n## base -> new $(t)" | tee -a "$sum"
OUT=$out/ab0 SKIP_TESTS=1 MODELS=120b ROUNDS=3 \
  BATCHES=1,8,64,256,1024 PREFILL= LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
OUT=$out/ab0p SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=3 \
  BATCHES= PREFILL=1024,8192 LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
echo -e "\n## base -> l9 $(t)" | tee -a "$sum"
OUT=$out/ab1 NEW_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=2 \
  BATCHES=1,8,64,256,1024 PREFILL= LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
ROUNDS=2 decode_variants "u6=- u8=GPTOSS_MOE_SMALL_U=8" 120b:1,8,64,256
echo -e "\n## l9 -> new $(t)" | tee -a "$sum"
OUT=$out/ab2 BASE_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=2 \
  BATCHES=1,8,64,256,1024 PREFILL= LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
echo -e "\n## experts alone (gpu_test_moe --bench, new) $(t)" | tee -a "$sum"
timeout 60 $bin/gpu_test_moe --bench >"$out/logs/moe-bench.log" 2>&1
grep -E "^\|" "$out/logs/moe-bench.log" | head -40 | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests v-* ab0 ab0p ab1 ab2 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/v-* "$out"/ab0 "$out"/ab0p "$out"/ab1 "$out"/ab2 && mv /tmp/logs.tgz "$out/"
