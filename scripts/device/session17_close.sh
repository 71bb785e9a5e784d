#!/usr/bin/env bash
# Session 17, call 2 (~8 min): every GPU test binary on the final code, then the hoisted loads
# (call 1's, less the small MoE kernel's epilogue prefetch that made both MoE kernels ~1.5 us
# slower, plus the RoPE kernel's bias requested into L1 before its wait) against the base build
# (.devcarry/base): the batch-1 step by kernel (CUPTI) of each, then 120b decode at batch 1 and 8
# and 20b at batch 1, interleaved, two rounds. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17c-out "session 17 call 2: GPU tests; the hoisted loads against the base"
echo "base $(cat .devcarry/base/commit.txt)" | tee -a "$sum"
gpu_tests_table
decode_by_kernel 1
mv "$out/bubble-b1.md" "$out/bubble-b1-new.md"
newbin=$bin
bin=$PWD/.devcarry/base-bin
mkdir -p "$bin" && cp .devcarry/base/gptoss "$bin/gptoss"
echo -e "\n(the base build:)" | tee -a "$sum"
decode_by_kernel 1
mv "$out/bubble-b1.md" "$out/bubble-b1-base.md"
bin=$newbin
for m in 120b:1,8 20b:1; do
  echo -e "\n## ${m%%:*} decode ${m##*:}: base, new $(t)" | tee -a "$sum"
  OUT=$out/v-${m%%:*} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} \
    VARIANTS="base=BIN=.devcarry/base/gptoss new=-" bash scripts/device/variants.sh | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs tests 2>/dev/null && rm -rf "$out/logs" "$out/tests" "$out"/v-*/vlogs
