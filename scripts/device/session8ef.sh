#!/usr/bin/env bash
# Session 8 (2026-12-03): calls 5 and the closing call in one device call (the device was scarce):
# session8e.sh (the early down projection, ncu counters), then session8f.sh (main as it lands: the
# closing bench beside the roofline and every GPU test) in the time left. Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/s8ef-out}
start=$(date +%s)
OUT="$out/e" bash "$(dirname "$0")/session8e.sh"
used=$(($(date +%s) - start))
OUT="$out/f" BUDGET_S=$((${TOTAL_S:-560} - used)) bash "$(dirname "$0")/session8f.sh"
