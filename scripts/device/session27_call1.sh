#!/usr/bin/env bash
# Session 27, call 1 (~8 min): three builds of one head, held against each other.
#   base = 2bb2df4 (the MXFP4 layout before, .devcarry/base),
#   l9   = 2bb2df4 with -DGPTOSS_MXFP4_LAYOUT9=ON (.devcarry/l9),
#   new  = l9 plus the register-A kernel's warp index through a shuffle (.devcarry/bin: its B
#          descriptors in uniform registers; no R2UR in the k loop).
#  (1) ab.sh base -> l9: 120b and 20b decode 1, 8, 64, 256, 1024; 120b prefill 1k, 8k; 3 rounds.
#      Prediction (session 26, session26_call2.sh): decode 256, 1024 and prefill 1k +4-7 %,
#      prefill 8k +2-5 %, decode 1-64 0 to +2 %. Decision (written in session 26): the layout
#      becomes the only one if nothing loses beyond the spread and something gains beyond it;
#      otherwise it goes.
#  (2) ab.sh l9 -> new: the seeded generate (identical expected: the same MMAs, the same bits),
#      120b and 20b decode 1024, 120b prefill 1k, 8k; 3 rounds. Prediction: the folded loop is
#      197 -> 191 instructions a pair of steps (-3 %) and the R2UR latency before each MMA group
#      goes: decode 1024 and prefill 1k +1-4 %, prefill 8k +1-3 %, 20b decode 1024 +1-3 %.
#      Decision: kept if nothing loses beyond the spread (it changes no bits and removes
#      instructions).
#  (3) every GPU test binary of the new build; (4) the experts alone (gpu_test_moe --bench).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s27c1 "session 27 call 1: the 9-operation layout, then uniform descriptors"
echo -e "\n## base -> l9 $(t)" | tee -a "$sum"
OUT=$out/ab1 NEW_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 SKIP_GEN=1 MODELS="120b 20b" ROUNDS=3 \
  BATCHES=1,8,64,256,1024 PREFILL= LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
OUT=$out/ab1p NEW_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=3 \
  BATCHES= PREFILL=1024,8192 LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
echo -e "\n## l9 -> new $(t)" | tee -a "$sum"
OUT=$out/ab2 BASE_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 MODELS="120b 20b" ROUNDS=3 \
  BATCHES=1024 PREFILL= LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
OUT=$out/ab2p BASE_BIN=.devcarry/l9/gptoss SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=3 \
  BATCHES= PREFILL=1024,8192 LIMIT=200 bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
gpu_tests_table
echo -e "\n## experts alone (gpu_test_moe --bench, new) $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_moe --bench >"$out/logs/moe-bench.log" 2>&1
grep -E "^\|" "$out/logs/moe-bench.log" | head -40 | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests ab1 ab1p ab2 ab2p 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/ab1 "$out"/ab1p "$out"/ab2 "$out"/ab2p && mv /tmp/logs.tgz "$out/"
