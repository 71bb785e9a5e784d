#!/usr/bin/env bash
# Session 26, call 2 (~8 min): the 9-operation MXFP4 layout (moe_dequant.cuh's place_codes, the
# repack's new bit positions) held against its base (the head before it) in one call.
#  (1) every GPU test binary of the new build (test_moe decodes every repacked word on the host);
#  (2) scripts/device/ab.sh: a seeded generate with both builds (identical output expected: the
#      dequantised values are exact either way), then `gptoss bench latency` 120b, base and new
#      interleaved, two rounds: decode 1, 8, 64, 256, 1024 and a lone prefill of 1k and 8k;
#  (3) the large path at 8 pairs an expert (GPTOSS_MOE_LARGE_AVG=8: decode 256 on the register-A
#      wgmma kernel instead of the small one; never measured below 16 pairs), new build;
#  (4) the experts alone (gpu_test_moe --bench), new build.
# Prediction (written before the run). SASS (scripts/sass/disasm.sh): the k loops are 7.5-8.6 %
# shorter (rs 214 -> 198 instructions a pair of steps; small NTP 1 513 -> 464, NTP 2 572 -> 525 a
# batch of six). Where the MoE kernel issues as fast as it can: decode 256 (small, NTP 2) +4-7 %,
# decode 1024 and the 1k prefill (rs) +4-7 %, prefill 8k +2-5 % (more of it is attention and
# dense GEMMs); decode 1-64 0 to +2 % (bound by latency and DRAM). Decision: the layout stays if
# the tests pass, generate is identical and nothing loses beyond the spread; if it gains nowhere
# it goes too (the repack's layout is not worth changing for nothing).
# As run (call 2), step (2)'s bench lines failed: decode batches up to 1024 and an 8k prefill in one
# run need more KV cache than an H100 holds beside the weights. session26_call2b.sh splits them.
# Needs .devcarry from BASE=<head before the change> bash scripts/device/prepare.sh, then gzip.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s26c2 "session 26 call 2: the 9-operation MXFP4 layout against its base"
gpu_tests_table
echo -e "\n## base against new $(t)" | tee -a "$sum"
OUT=$out/ab SKIP_TESTS=1 MODELS=120b ROUNDS=2 BATCHES=1,8,64,256,1024 PREFILL=1024,8192 LIMIT=260 \
  bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
VTAG=-large ROUNDS=2 decode_variants "default=- large8=GPTOSS_MOE_LARGE_AVG=8" 120b:256
echo -e "\n## experts alone (gpu_test_moe --bench, new) $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_moe --bench >"$out/logs/moe-bench.log" 2>&1
grep -E "^\|" "$out/logs/moe-bench.log" | head -40 | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests v-* ab 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/v-* "$out"/ab && mv /tmp/logs.tgz "$out/"
