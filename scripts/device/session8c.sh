#!/usr/bin/env bash
# Session 8 (2026-12-03), call 3: the CUPTI timeline of the 120b decode step at batch 1 (bubble.sh)
# with main's defaults, with the early O (GPTOSS_EARLY_WEIGHTS=1) and with it and PDL: does the O
# kernel start before the attention ends, and what does it add after? Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/s8c-out}
mkdir -p "$out"
for v in ${VARIANTS:-"base=-" "o=GPTOSS_EARLY_WEIGHTS=1" "o_pdl=GPTOSS_EARLY_WEIGHTS=1+GPTOSS_PDL=1" "all_pdl=GPTOSS_EARLY_WEIGHTS=15+GPTOSS_PDL=1"}; do
  name=${v%%=*} envs=${v#*=}
  envargs=()
  [ "$envs" = - ] || IFS=+ read -r -a envargs <<<"$envs"
  echo "## $name ($envs)"
  env "${envargs[@]}" OUT="$out/$name" BATCHES=1 bash "$(dirname "$0")/bubble.sh" >/dev/null 2>&1
  head -8 "$out/$name/bubble-b1.md" | tail -3
  # one full layer and one sliding layer of the per-kernel table (positions 2..27)
  grep -E '^\| [0-9]+ \|' "$out/$name/bubble-b1.md" | sed -n 1,28p
  grep -E '^\| [0-9]+ \|' "$out/$name/bubble-b1.md" | tail -6
done
