#!/usr/bin/env bash
# Session 4 of 2026-12-01, call 2: the fixes after call 1 (FP8 decode's running max under the sink;
# gpu_test_masked_sampling's model shape), gpu_test_attention over several seeds (call 1's failing
# seed first), pending.sh's tests and the fused split merge, and racecheck over gpu_test_attention.
set -uo pipefail
out=${OUT:-/tmp/call2-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
sum="$out/call2-summary.md"
echo "# call 2, commit $(cat .devcarry/commit.txt)" >"$sum"
for seed in ${SEEDS:-}; do
  timeout 120 .devcarry/bin/gpu_test_attention --seed "$seed" >"$out/att-$seed.log" 2>&1
  echo "- gpu_test_attention --seed $seed: exit $? — $(grep -E 'checks passed|FAILED' "$out/att-$seed.log" | tail -1)" >>"$sum"
  grep -E "^decode fp8 bs=(16|32|64) full splits=1 " "$out/att-$seed.log" | head -3 | sed 's/^/  /' >>"$sum"
done
rm -f "$out"/att-*.log
OUT="$out/p" SKIP_MASKS=1 bash scripts/device/pending.sh >/dev/null 2>&1
cat "$out/p/pending-summary.md" >>"$sum"; mv "$out/p/logs.tgz" "$out/pending-logs.tgz"; rm -rf "$out/p"
OUT="$out/s" TOOLS=${TOOLS:-racecheck} TESTS=${TESTS:-gpu_test_attention} LIMIT=${LIMIT:-240} \
  bash scripts/device/sanitize.sh >/dev/null 2>&1
cat "$out/s/sanitize-summary.md" >>"$sum"; mv "$out/s/logs.tgz" "$out/sanitize-logs.tgz"; rm -rf "$out/s"
cat "$sum"
