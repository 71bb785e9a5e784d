#!/usr/bin/env bash
# GPU test binaries (and their --bench modes) under environment variants, in one device call: for
# an experiment behind a measurement switch, run the tests with the switch forced each way and put the
# benchmark tables side by side. RUNS is a space-separated list of BIN[:ARGS]@ENV1=V1+ENV2=V2 (ARGS with
# commas for spaces; @- for no environment), e.g.
#   RUNS="gpu_test_moe@GPTOSS_MOE_WGMMA=0 gpu_test_moe:--bench@GPTOSS_MOE_WGMMA=0"
# Logs to $OUT/elogs; a PASS/FAIL line per run, and the benchmark rows (lines starting with '|').
# Needs .devcarry (scripts/device/prepare.sh). LIMIT: seconds per run (default 200).
set -uo pipefail
out=${OUT:-/tmp/env-out}
mkdir -p "$out/elogs"
source "$(dirname "$0")/env.sh"
summary=""
for r in $RUNS; do
  spec=${r%%@*} envs=${r#*@}
  bin=${spec%%:*} args=""
  [ "$spec" = "$bin" ] || args=${spec#*:}
  args=${args//,/ }
  envargs=()
  [ "$envs" = - ] || IFS=+ read -r -a envargs <<<"$envs"
  log="$out/elogs/$(echo "$bin$args-$envs" | tr -c 'A-Za-z0-9._-' _ | cut -c1-120).log"
  # shellcheck disable=SC2086
  if timeout "${LIMIT:-200}" env "${envargs[@]}" ".devcarry/bin/$bin" $args >"$log" 2>&1; then s=PASS; else s="FAIL($?)"; fi
  summary+="$bin $args [$envs]: $s"$'\n'
  if [ -n "$args" ]; then echo "== $bin $args [$envs]"; grep -E '^\|' "$log" | grep -v -- '---' || tail -3 "$log"; fi
done
echo "== runs"
printf '%s' "$summary"
