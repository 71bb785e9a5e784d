#!/usr/bin/env bash
# One device call that holds a change against its base: the GPU tests of the new build, the same seeded
# `generate --prompts-file` run with both builds (identical JSON expected for a change that must not
# alter outputs), and `gptoss bench latency` of both builds, interleaved (base, new, base, new per
# model) so that clock drift hits both, with a table of the ratio new / base at every line.
# Needs .devcarry (scripts/device/prepare.sh) with the base build's program in .devcarry/base/gptoss
# (BASE=REV bash scripts/device/prepare.sh puts it there).
# Knobs: SKIP_TESTS=1, SKIP_GEN=1, MODELS="120b 20b", BATCHES=1,8,64,256,1024, PREFILL=1024 (either may
# be set empty: none of those lines; decode batches and an 8k prefill do not fit one run on an H100), ROUNDS=1,
# GEN_MODEL=synthetic:20b:layers=4, NEW_BIN and BASE_BIN (the two programs; default .devcarry/bin/gptoss and
# .devcarry/base/gptoss: a third build can be held against either).
set -uo pipefail
out=${OUT:-/tmp/ab-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
new=${NEW_BIN:-.devcarry/bin/gptoss} base=${BASE_BIN:-.devcarry/base/gptoss}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
# a program's build label: commit.txt beside it, else the one above it (.devcarry/bin's)
label() { d=$(dirname "$1"); cat "$d/commit.txt" 2>/dev/null || cat "$d/../commit.txt" 2>/dev/null || echo "?"; }
echo "new $(label "$new") base $(label "$base")" | tee -a "$out/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== GPU tests (new build)"
  OUT="$out/logs" bash scripts/device/gpu_tests.sh test 2>&1 | sed -n '/^== tests/,$p'
fi
[ "${SKIP_GEN:-0}" = 1 ] || {
echo "== seeded generate, base vs new (${GEN_MODEL:-synthetic:20b:layers=4})"
for b in base new; do
  bin=$base; [ $b = new ] && bin=$new
  timeout 240 $bin generate --backend cuda --model "${GEN_MODEL:-synthetic:20b:layers=4}" \
    --prompts-file bench/prompts/seeded-ab.jsonl >"$out/gen-$b.json" 2>"$out/logs/gen-$b.log" || echo "generate $b failed ($?)"
done
if [ -s "$out/gen-new.json" ] && cmp -s "$out/gen-base.json" "$out/gen-new.json"; then
  echo "generate: identical ($(wc -l <"$out/gen-new.json") requests, $(md5sum <"$out/gen-new.json" | cut -c1-12))"
else
  echo "generate: DIFFERENT"; diff <(head -c 2000 "$out/gen-base.json") <(head -c 2000 "$out/gen-new.json") | head -8
fi
}
# 120b decode at 1024 sequences needs ~83 GB of KV cache beside 65 GB of weights: on a card under
# 100 GiB (an H100) that batch is dropped with a note instead of failing every run (session 27).
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
for m in ${MODELS:-120b 20b}; do
  batches=${BATCHES-1,8,64,256,1024}
  if [ "$m" = 120b ] && [ "${mem_mib:-0}" -lt 102400 ] && [[ ",$batches," == *",1024,"* ]]; then
    batches=$(echo ",$batches," | sed 's/,1024,/,/; s/^,//; s/,$//')
    echo "note: 120b decode 1024 does not fit this card (${mem_mib} MiB): dropped"
  fi
  [ -z "$batches" ] && [ -z "${PREFILL-1024}" ] && continue
  for r in $(seq 1 "${ROUNDS:-1}"); do
    for b in base new; do
      bin=$base; [ $b = new ] && bin=$new
      timeout "${LIMIT:-200}" $bin bench latency --model "synthetic:$m" --batches "$batches" \
        --prefill "${PREFILL-1024}" --output-json "$out/lat-$m-$b-$r.json" >"$out/logs/lat-$m-$b-$r.log" 2>&1 \
        || echo "bench $m $b failed ($?)"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, glob, os, statistics
out = sys.argv[1]
def lines(path):
    d = json.load(open(path))
    return {(l["phase"], l["batch"], l["context"]): l for l in d["results"] if l["phase"] != "fill"}
# The spread of each side (max - min over its rounds, of the median) is printed beside the ratio:
# the device tool brings back only a few files, so the per-round JSON may never reach the session.
def spread(v):
    return f"{100 * (max(v) - min(v)) / statistics.median(v):.1f}%" if len(v) > 1 else "-"
print("| model | phase | batch | ctx | base tok/s | new tok/s | new/base | spreads base / new | of roofline (new) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for m in sorted({os.path.basename(p).split("-")[1] for p in glob.glob(out + "/lat-*-new-*.json")}):
    runs = {b: [lines(p) for p in sorted(glob.glob(f"{out}/lat-{m}-{b}-*.json"))] for b in ("base", "new")}
    if not runs["base"] or not runs["new"]: continue
    for k, l in runs["new"][0].items():
        vb = [r[k]["tokens_per_s"] for r in runs["base"] if k in r]
        vn = [r[k]["tokens_per_s"] for r in runs["new"] if k in r]
        tb, tn = statistics.median(vb), statistics.median(vn)
        print(f"| {m} | {k[0]} | {k[1]} | {k[2]} | {tb:.0f} | {tn:.0f} | {tn/tb:.3f} | "
              f"{spread(vb)} / {spread(vn)} | {100*l['roofline_fraction']:.1f}% |")
PY
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
