#!/usr/bin/env bash
# Session 28, call 2 (~8 min): the new build (.devcarry/bin: 7b57e6f + the register-A MoE's 64-bit
# descriptor built once + the early down projection behind GPTOSS_MOE_DOWN_EARLY, off) against the
# head 7b57e6f (.devcarry/base).
#  (1) every GPU test binary of the new build (test_moe holds the early down projection to the
#      default launch's bits, and the register-A kernel to its reference), then test_moe and the
#      forward test again with GPTOSS_MOE_DOWN_EARLY=1 in the environment (graphs, every layer).
#  (2) ab.sh base -> new, 120b prefill 1k and 8k, three rounds, and the seeded generate (identical
#      expected: the descriptors' values do not change).
#      The change: in rs_mma_step the descriptor's 64 bits are built once (d0 = HI | lo) and each
#      MMA's as d0 + 2j, so ptxas stops re-setting the constant high word before each MMA: the
#      folded loop 191 -> 185 instructions a pair of steps, the other 223 -> 217 (UMOV 16 -> 10).
#      Prediction (written before the run): prefill 1k +0-2 %, 8k +0-1.5 % (3 % fewer
#      instructions in the loop that is 76 % of a 1k prefill; the uniform descriptors of session
#      27 bought twice their instruction share, these UMOVs are uniform-pipe and likely off the
#      MMA's critical path, so less). Decision: kept if nothing loses beyond the spread (no value
#      changes); otherwise reverted.
#  (3) the new build: default against GPTOSS_MOE_DOWN_EARLY=1 (the down projection's item decoded
#      and its first weights requested before the PDL wait, its blocks placed beside gate_up's
#      last ones), and with GPTOSS_ATTN_EARLY=1 too; 120b decode 1, 8, 64 and 20b 1, three rounds.
#      Premise: at one token gate_up is 360 blocks (4 experts x 90 row blocks) on 528 slots (4 an
#      SM), so ~170 of down's 360 blocks can be placed beside them as soon as they have all
#      started, decode their items and have their first 12 KB in flight before gate_up ends; today
#      down's ramp (the routing's dependent reads, then its first loads: ~2-3 µs of its ~10) waits
#      for gate_up's very end.
#      Prediction: 120b batch 1 +1.5-3.5 %, 8 +0.5-1.5 %, 64 0-0.5 %; 20b batch 1 +2-4 %. The
#      attention early launch on top: +0.5-1.5 % more at batch 1 (sessions 25-26: +0.6-1.7 %).
#      Decision: the early down projection becomes the only form at one token group (the switch
#      removed) if it gains beyond the spread at batch 1 on both models and loses beyond it
#      nowhere; otherwise it goes.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28c2 "session 28 call 2: the register-A descriptors built once; the early down projection"
gpu_tests_table
echo -e "\n## with GPTOSS_MOE_DOWN_EARLY=1 $(t)" | tee -a "$sum"
for tb in gpu_test_moe gpu_test_cuda_forward; do
  GPTOSS_MOE_DOWN_EARLY=1 timeout 240 $bin/$tb >"$out/logs/early-$tb.log" 2>&1
  echo "| $tb (early) | rc $? | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/early-$tb.log" | tail -1) |" | tee -a "$sum"
done
grep -E "FAILED|seed" "$out/logs/early-gpu_test_cuda_forward.log" | head -6 | tee -a "$sum"
echo -e "\n## ab base -> new: 120b prefill 1k, 8k (3 rounds) $(t)" | tee -a "$sum"
OUT=$out/ab MODELS=120b BATCHES= PREFILL=1024,8192 ROUNDS=3 SKIP_TESTS=1 LIMIT=200 \
  bash scripts/device/ab.sh 2>&1 | grep -vE "^==" | tee -a "$sum"
ROUNDS=3 decode_variants "default=- early=GPTOSS_MOE_DOWN_EARLY=1 both=GPTOSS_MOE_DOWN_EARLY=1+GPTOSS_ATTN_EARLY=1" \
  120b:1,8,64 20b:1
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests ab/logs v-* 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/ab/logs "$out"/v-* && mv /tmp/logs.tgz "$out/"
