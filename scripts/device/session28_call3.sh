#!/usr/bin/env bash
# Session 28, call 3 (~6 min): the head as it lands plus one candidate, then the closing figures.
#   new  = .devcarry/bin: the head + the register-A MoE's lo0 through a shuffle (ptxas then forms
#          the first step's descriptors by 64-bit adds as the second's: the folded loop 185 -> 179
#          instructions a pair of steps, the other 217 -> 211; the same values);
#   base = .devcarry/base: the head.
#  (1) every GPU test binary of the new build.
#  (2) ab.sh base -> new: 120b prefill 1k and 8k, three rounds; the seeded generate (identical
#      expected). Prediction (before the run): 1k +0-2 %, 8k +0-1 % (call 2: 3 % fewer
#      instructions bought 2.1 % at 1k, 0.1 % at 8k). Decision: kept if nothing loses beyond the
#      spread (no value changes), else reverted.
#  (3) roofline_and_latency (the closing figures, new build) and the batch-1 step by kernel.
#  (4) if time is left: one user served 1k/1k (issue 13's served figure).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28c3 "session 28 call 3: the head's GPU tests, the descriptors' low word, closing figures"
gpu_tests_table
echo -e "\n## ab base -> new: 120b prefill 1k, 8k (3 rounds) $(t)" | tee -a "$sum"
OUT=$out/ab MODELS=120b BATCHES= PREFILL=1024,8192 ROUNDS=3 SKIP_TESTS=1 LIMIT=200 \
  bash scripts/device/ab.sh 2>&1 | grep -vE "^==" | tee -a "$sum"
python3 - "$out/ab" <<'PY' | tee -a "$sum"
import json, glob, sys
for b in ("base", "new"):
    rows = []
    for f in sorted(glob.glob(f"{sys.argv[1]}/lat-120b-{b}-*.json")):
        d = json.load(open(f))
        rows.append(" ".join(f"{r['context']}:{r['tokens_per_s']:.0f}" for r in d["results"] if r["phase"] == "prefill"))
    print(f"{b} rounds: " + " | ".join(rows))
PY
rm -f "$out"/ab/gen-*.json
roofline_and_latency
decode_by_kernel 1
SERVE_LIMIT=150 served_10xc 1
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests ab/logs 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/ab/logs && mv /tmp/logs.tgz "$out/"
