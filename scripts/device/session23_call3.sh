#!/usr/bin/env bash
# Session 23, closing call (~6 min): every GPU test binary with the attention stream kernel on by
# default at one token (attn_stream_mode: mode 2, the norm inside); 120b decode at batch 1 and 2 and
# 20b at 1, the default against GPTOSS_ATTN_STREAM=0 (two interleaved rounds); `gptoss roofline`
# beside `gptoss bench latency` (120b decode 1, 8, 64; 20b decode 1). Needs .devcarry. Prints
# $OUT/summary.md.
# Prediction (before the run): the default +3-5 % at batch 1 over =0 (call 2 on an H100: attn2
# +4.3 %), batch 2 equal within the spread (the default is the launches there); every test passes.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s23c3}" "session 23 call 3: the attention stream kernel by default at one token"
test_table
TEST_LIMIT=${TEST_LIMIT:-120} OUT=$out/logs/tests timeout 300 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
grep -E "^gpu_test_[a-z_]+: " "$out/logs/gpu_tests.log" | tee -a "$sum"
for f in "$out"/logs/tests/gpu_test_*.log; do
  echo "| $(basename "$f" .log) | $(grep -E 'checks (passed|FAILED)|checks? failed|SKIP' "$f" | tail -1) |" >>"$sum"
done
V="default=- off=GPTOSS_ATTN_STREAM=0"
ROUNDS=2 decode_variants "$V" 120b:1,2
ROUNDS=2 decode_variants "$V" 20b:1
echo -e "\n## roofline and bench latency $(t)" | tee -a "$sum"
for rb in 120b:1 120b:8 120b:64 20b:1; do
  $bin/gptoss roofline --model ${rb%%:*} --batch ${rb##*:} --context 1024 | grep -E "^bound" | sed "s/^/${rb} /" | tee -a "$sum"
done
for m in 120b:1,8,64 20b:1; do
  timeout 100 $bin/gptoss bench latency --model synthetic:${m%%:*} --batches ${m##*:} --prefill "" \
    --output-json "$out/latency-${m%%:*}.json" >"$out/logs/lat-${m%%:*}.log" 2>&1
  grep -E "^\| synthetic" "$out/logs/lat-${m%%:*}.log" | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
