#!/usr/bin/env bash
# `gptoss bench latency` of one build under several environment variants, interleaved, in one
# device call, with a table of each variant against the first. VARIANTS is a space-separated list of
# NAME=ENV1=V1+ENV2=V2 (NAME=- for none; values may hold commas), e.g. VARIANTS="base=- pdl=GPTOSS_PDL=1".
# Knobs: MODEL=120b, BATCHES=1,8,64, ROUNDS=2, PREFILL (prompt lengths, none by default: the table
# then shows the prefill rows too), EXTRA (more bench arguments, e.g. "--kv-cache-dtype fp8"). Needs
# .devcarry (scripts/device/prepare.sh). BIN=PATH among a variant's settings runs that program
# instead, e.g. base=BIN=.devcarry/base/gptoss: the build of BASE=REV scripts/device/prepare.sh, held
# against this one in the same rounds.
set -uo pipefail
out=${OUT:-/tmp/var-out}
mkdir -p "$out/vlogs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin/gptoss
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in $VARIANTS; do
    name=${v%%=*} envs=${v#*=}
    envargs=() vbin=$bin
    [ "$envs" = - ] || IFS=+ read -r -a envargs <<<"$envs"
    for i in "${!envargs[@]}"; do
      case ${envargs[$i]} in BIN=*) vbin=${envargs[$i]#BIN=}; unset 'envargs[i]' ;; esac
    done
    timeout 150 env "${envargs[@]}" $vbin bench latency --model "synthetic:${MODEL:-120b}" \
      --batches "${BATCHES:-1,8,64}" --prefill "${PREFILL:-}" ${EXTRA:-} --output-json "$out/var-$name-$r.json" \
      >"$out/vlogs/var-$name-$r.log" 2>&1 || echo "variant $name round $r failed ($?)"
  done
done
python3 - "$out" "$VARIANTS" <<'PY'
import json, sys, glob, statistics
out, variants = sys.argv[1], sys.argv[2].split()
names = [v.split("=", 1)[0] for v in variants]
def load(n):
    runs = [json.load(open(p))["results"] for p in sorted(glob.glob(f"{out}/var-{n}-*.json"))]
    by = {}
    for res in runs:
        for l in res:
            if l["phase"] == "decode":
                by.setdefault(("decode", l["batch"]), []).append(l)
            elif l["phase"] == "prefill":
                by.setdefault(("prefill", l["context"]), []).append(l)
    return by
data = {n: load(n) for n in names}
base = names[0]
# spread: (max - min) / median of the rounds' tok/s ("-" with one round). Two processes of one build
# have differed by up to 14 % at padded decode batches (bench/NOTES.md, session 13): a ratio inside
# the spread says nothing.
print("| variant | phase | batch or prompt | tok/s (median) | ms/step | vs " + base + " | of roofline | spread |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for n in names:
    for (ph, b), ls in sorted(data[n].items()):
        ts = [l["tokens_per_s"] for l in ls]
        t = statistics.median(ts)
        tb = statistics.median(l["tokens_per_s"] for l in data[base].get((ph, b), ls))
        ms = statistics.median(l["seconds"] for l in ls) * 1e3
        rf = statistics.median(l["roofline_fraction"] for l in ls)
        sp = f"{100 * (max(ts) - min(ts)) / t:.1f}%" if len(ts) > 1 else "-"
        print(f"| {n} | {ph} | {b} | {t:.0f} | {ms:.3f} | {t/tb:.3f} | {100*rf:.1f}% | {sp} |")
PY
