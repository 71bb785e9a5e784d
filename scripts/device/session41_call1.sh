#!/usr/bin/env bash
# Session 41, call 1 (~8-9 min; an H200 if one is lent). Not run in session 41 (no device was
# lent: every start refused): the next session's first call. Prepare with SLIM=all TRACE=1
# bash scripts/device/prepare.sh. One device trial (off by default), one host-only question, every
# GPU test at the head, the head's figures.
# 1. GPTOSS_MOE_TAIL_SPLIT=1 (moe_plan.tail_split, moe_small.cuh's small_begin_tail): the down
#    projection's items run whole in the full waves of resident blocks and only the last partial
#    wave's are split over K (two slots). Why: at 8 tokens down has 28.4 x 45 = 1,278 blocks for
#    528 resident slots (H100: 4 an SM), 2.42 waves; a block streams ~98 KB in ~18 µs, so the
#    last 0.42 wave runs ~18 µs with most SMs idle (52 µs measured = 3 x 17.8; gate_up's 4.84
#    waves: 92 = 5 x 18). Splitting every item (S = 2) doubled each block's ~3.4 µs start and
#    measured +0.2 % (session 24).
#    Where it splits (expected touched experts, 528 slots): 120b at 4 tokens (698 items: 170 left
#    after a wave), 8 (1,278: 222), 64 (4,986: 234); not at 2 (356 items, under one wave, as the
#    rule splits them today: not at all) nor anywhere for 20b (E = 32: at 8 and 64 tokens ~384-399
#    items are left, more than half the slots, so f = 1).
#    Prediction: down at batch 8 52 -> 45-48 µs a launch (CUPTI); 120b decode 4 +1 to +2.5 %,
#    8 +1.5 to +3 %, 64 +0.5 to +1.5 %, 2 within +-0.5 % (the slots' zeros and sums cost ~0);
#    20b 8 and 64 within +-0.5 %.
#    Rule (written before the run): the default (the switch then removed) if 120b batch 8 gains
#    more than the rounds' spread, no batch loses more than its spread, gpu_test_moe (which runs
#    the tail plans whatever the switch) and the forward test with the switch on pass; else the
#    trial is removed.
# 2. GPTOSS_ATTN_STREAM=2 at 2 and 4 tokens (attn_stream with the attention norm inside; the router
#    then is router_mma). Session 23 measured the kernel's first form there: -0.2 to -2.6 % at 2
#    tokens, -7 to -12 % at 4, so the default takes it at one token only; the kernel has gained
#    since (sessions 24-38). Prediction: 2 tokens +0 to +3 %, 4 tokens -3 to +1 %. Rule: the default
#    at a token count where both 120b and 20b gain more than the spread; else nothing changes.
# 3. Every GPU test program at the head, and the head's figures (on an H200: also the step by
#    kernel at 1, 8, 64 and issue 14's rows).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s41c1 "session 41 call 1: the down projection's tail split, attn_stream at 2-4 tokens, every GPU test"
ROUNDS=3 decode_variants "base=- tail=GPTOSS_MOE_TAIL_SPLIT=1" 120b:2,4,8,64 20b:8,64
ROUNDS=3 decode_variants "base=- as2=GPTOSS_ATTN_STREAM=2" 120b:2,4 20b:2,4
test_table
run_logged moe 240 $bin/gpu_test_moe
grep -E "tail|FAILED" "$out/logs/moe.log" | head -8 | tee -a "$sum"
GPTOSS_MOE_TAIL_SPLIT=1 run_logged forward_tail 150 $bin/gpu_test_cuda_forward --skip-tp
grep -E "^summary|FAILED" "$out/logs/forward_tail.log" | head -8 | tee -a "$sum"
echo -e "\n## experts alone, default and tail split $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_moe --bench --bench-t 2,8,64 >"$out/logs/moe-bench.log" 2>&1
grep -E "moe experts" "$out/logs/moe-bench.log" | tee -a "$sum"
decode_by_kernel 8
mv "$out/bubble-b8.md" "$out/bubble-b8-base.md"
GPTOSS_MOE_TAIL_SPLIT=1 decode_by_kernel 8
mv "$out/bubble-b8.md" "$out/bubble-b8-tail.md"
roofline_and_latency
before 230 && TEST_LIMIT=150 gpu_tests_table
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  if before 470; then decode_by_kernel 1 64; fi
  # issue 14's rows on the H200 (decode 256 and 1024 do not fit an H100 beside the 120b weights)
  if before 480; then
    echo -e "\n## issue 14: 120b decode 256, 1024, prefill 1k, 8k $(t)" | tee -a "$sum"
    for rb in 120b:256 120b:1024; do
      $bin/gptoss roofline --model ${rb%%:*} --batch ${rb##*:} --context 1024 | grep -E "^bound" | sed "s/^/${rb} /" | tee -a "$sum"
    done
    timeout 100 $bin/gptoss bench latency --model synthetic:120b --batches 256,1024 --prefill 1024,8192 \
      --output-json "$out/latency-120b-large.json" >"$out/logs/lat-120b-large.log" 2>&1
    grep -E "^\| synthetic" "$out/logs/lat-120b-large.log" | tee -a "$sum"
  fi
fi
finish_call
