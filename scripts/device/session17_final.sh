#!/usr/bin/env bash
# Session 17, call 5 (~3 min): the forward test on the final test code — the whole binary on a fresh
# seed, then the two seeds its new rules were written for (2649030588438148102: batched vs alone;
# 12268047980063385605: the real-width near-ties). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17z-out "session 17 call 5: the forward test on the final code"
test_table
run_logged forward_full 240 $bin/gpu_test_cuda_forward
grep -hE "seed|summary" "$out/logs/forward_full.log" | head -6 | tee -a "$sum"
for S in 2649030588438148102 12268047980063385605; do
  run_logged "forward_$S" 200 $bin/gpu_test_cuda_forward --skip-tp --seed $S
  grep -hE "batch of 64 vs alone  |20b x 2 layers" "$out/logs/forward_$S.log" | head -6 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
