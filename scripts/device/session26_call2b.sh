#!/usr/bin/env bash
# Session 26, call 2b: call 2's comparison again (its one bench run per build asked for decode
# batches up to 1024 and an 8k prefill at once, whose KV cache does not fit an H100 beside the
# weights: every run failed). Decode and prefill as separate runs, base and new interleaved,
# three rounds each (120b and 20b decode, 120b prefill). The prediction is call 2's (session26_call2.sh).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s26c2b "session 26 call 2b: the 9-operation MXFP4 layout against its base"
echo -e "\n## decode, base against new $(t)" | tee -a "$sum"
OUT=$out/ab1 SKIP_TESTS=1 SKIP_GEN=1 MODELS="120b 20b" ROUNDS=3 BATCHES=1,8,64,256,1024 PREFILL= LIMIT=200 \
  bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
echo -e "\n## lone prefill, base against new $(t)" | tee -a "$sum"
OUT=$out/ab2 SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b ROUNDS=3 BATCHES= PREFILL=1024,8192 LIMIT=200 \
  bash scripts/device/ab.sh 2>&1 | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs ab1 ab2 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/ab1 "$out"/ab2 && mv /tmp/logs.tgz "$out/"
