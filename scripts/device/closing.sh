#!/usr/bin/env bash
# A session's closing call (~9.5 min at most): issue 17's one-GPU TP checks (scripts/device/tp.sh),
# then every other GPU test binary carried in .devcarry, each under TEST_LIMIT seconds, skipping any
# that would start after BUDGET_S seconds (the forward pass first; ONLY="a b" runs just those) (the device's 10-minute limit). gpu_test_cuda_forward runs
# with --skip-tp (tp.sh ran its TP part). Prints $OUT/closing-summary.md; logs in $OUT/logs.tgz.
# Needs .devcarry (bash scripts/device/prepare.sh); carry [".devcarry"], command
# `bash scripts/device/closing.sh`. SKIP_TP=1 skips the TP part.
set -uo pipefail
out=${OUT:-/tmp/closing-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
start=$(date +%s)
sum="$out/closing-summary.md"
summary_header "$sum" "GPU tests"
if [ "${SKIP_TP:-0}" != 1 ]; then
  AR_BENCH=${AR_BENCH:-0} OUT="$out/tp" bash scripts/device/tp.sh >/dev/null 2>&1
  cat "$out/tp/tp-summary.md" >>"$sum"
  cp "$out"/tp/*.json "$out/" 2>/dev/null
  mv "$out/tp/logs" "$out/logs/tp" 2>/dev/null
fi
echo -e "\n| test | result | s | checks |\n| --- | --- | ---: | --- |" >>"$sum"
# the whole forward pass first: it covers the most
for t in .devcarry/bin/gpu_test_cuda_forward $(ls .devcarry/bin/gpu_test_* | grep -v cuda_forward); do
  name=$(basename "$t")
  [ -n "${ONLY:-}" ] && ! [[ " $ONLY " == *" $name "* ]] && continue
  [ "$name" = gpu_test_allreduce ] && [ "${SKIP_TP:-0}" != 1 ] && continue
  used=$(($(date +%s) - start))
  if [ $((used + ${TEST_LIMIT:-150})) -gt "${BUDGET_S:-560}" ]; then
    echo "| $name | not run ($used s used) | | |" >>"$sum"
    continue
  fi
  args=""
  [ "$name" = gpu_test_cuda_forward ] && args="--skip-tp"
  t0=$(date +%s)
  timeout "${TEST_LIMIT:-150}" "$t" $args >"$out/logs/$name.log" 2>&1
  r=$(res $?)
  echo "| $name $args | $r | $(($(date +%s) - t0)) | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/$name.log" | tail -1) |" >>"$sum"
  grep -E 'FAILED|failed' "$out/logs/$name.log" | head -4 | sed 's/^/    /' >>"$sum"
done
cat "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs" "$out/tp"
