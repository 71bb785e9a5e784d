#!/usr/bin/env bash
# Session 18, call 4 (~4 min): the GPU tests that hold the router's final code (router_mma, gemv,
# moe, and the forward test with its TP checks), then this session's head against session 17's
# (.devcarry/base, BASE=3030f03): 120b decode at batch 1, 2, 4, 8, 16 and 20b at 1, 4, 16,
# interleaved, two rounds. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s18c4-out "session 18 call 4: the router's final code; against session 17's head"
echo "base $(cat .devcarry/base/commit.txt)" | tee -a "$sum"
test_table
for b in router_mma gemv moe; do run_logged "$b" 200 $bin/gpu_test_$b; done
run_logged forward 300 $bin/gpu_test_cuda_forward
grep -E "seed" "$out/logs/forward.log" | head -2 | tee -a "$sum"
for m in 120b:1,2,4,8,16 20b:1,4,16; do
  echo -e "\n## ${m%%:*} decode ${m##*:}: session 17, session 18 $(t)" | tee -a "$sum"
  OUT=$out/v-${m%%:*} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} \
    VARIANTS="s17=BIN=.devcarry/base/gptoss s18=-" bash scripts/device/variants.sh | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v-120b v-20b 2>/dev/null && rm -rf "$out/logs" "$out"/v-*
