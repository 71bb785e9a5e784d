#!/usr/bin/env bash
# Session 30, call 2 (~5 min; an H100 is fine): O's rows in slots in the attention stream kernel
# (GPTOSS_AS_O_SLOTS=1, attn_stream.cu: once phase 1's grid barrier has passed, the ring's bytes
# hold the block's 22 O rows packed, each with its own barrier, instead of 16 in stages of a QKV
# pair with the other 6 asked for only as phase 3 frees stages).
#  (1) gpu_test_attn_stream with the switch off and on, the forward test with it on;
#  (2) gpu_test_attn_stream --bench off and on (the whole kernel and its phases at T = 1-4);
#  (3) decode batch 1, off against on, 120b and 20b, three interleaved rounds.
# Prediction (before the run): the tests pass with the same bits (the same rows and sums). The
# kernel at T = 1: 33.6 -> 28.5-31 µs (the part after the attention's barrier, 8.7 µs, loses a DRAM
# latency of the last 6 rows: -> 4-6); T = 2 likewise; T = 3-4 unchanged (they do not fit: the ring
# path). 120b and 20b decode batch 1: +3-6 %. Rule: it becomes the default (the switch removed) if it
# gains beyond the spread at both models and loses nowhere; else it is removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c2 "session 30 call 2: O's rows in slots (GPTOSS_AS_O_SLOTS)"
test_table
run_logged attn_stream_off 200 $bin/gpu_test_attn_stream
run_logged attn_stream_on 200 env GPTOSS_AS_O_SLOTS=1 $bin/gpu_test_attn_stream
run_logged cuda_forward_on 300 env GPTOSS_AS_O_SLOTS=1 $bin/gpu_test_cuda_forward
grep -E "seed" "$out/logs/cuda_forward_on.log" | head -2 | tee -a "$sum"
for v in off on; do
  echo -e "\n## gpu_test_attn_stream --bench, O slots $v $(t)" | tee -a "$sum"
  e=GPTOSS_AS_O_SLOTS=0; [ $v = on ] && e=GPTOSS_AS_O_SLOTS=1
  timeout 200 env $e $bin/gpu_test_attn_stream --bench >"$out/logs/bench-$v.log" 2>&1
  grep -E "^\|" "$out/logs/bench-$v.log" | tee -a "$sum"
done
ROUNDS=3 decode_variants "off=- slots=GPTOSS_AS_O_SLOTS=1" 120b:1 20b:1
finish_call
