#!/usr/bin/env bash
# Issue 15's speed figures in one device call (BUDGET_S=480 by default; a step that would not fit is
# skipped and says so):
#   1. `gptoss bench latency` 120b at 8k context, decode batch 64 and 256, bf16 and fp8 KV;
#   2. the served 8k/1k frontier for both dtypes: `gptoss serve --backend cuda --kv-cache-dtype D`
#      driven by `gptoss bench serve` at LEVELS (default 8,32,64), K=1 prompt per concurrency and 2
#      warm-ups a level (shortened from InferenceMAX's 10xC / 2xC to fit a lease), plus the KV
#      capacity each server reports at start. The plot is drawn afterwards, here or on the host
#      (`gptoss bench plot`).
# Needs .devcarry (scripts/device/prepare.sh) with the tokenizer in .devcarry/cache. Results:
# $OUT/fp8f-summary.md, lat-{bf16,fp8}.json, sweep-8k1k-{bf16,fp8}.json.
set -uo pipefail
out=${OUT:-/tmp/fp8f-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
G=.devcarry/bin/gptoss
sum="$out/fp8f-summary.md"
start=$(date +%s)
left() { echo $((${BUDGET_S:-480} - ($(date +%s) - start))); }
summary_header "$sum" "FP8 KV vs bf16: bench latency at 8k, served 8k/1k (issue 15)"
for kv in bf16 fp8; do
  timeout 150 $G bench latency --model synthetic:120b --batches 64,256 --context 8192 --prefill "" \
    --decode-steps 16 --kv-cache-dtype $kv --output-json "$out/lat-$kv.json" >"$out/logs/lat-$kv.log" 2>&1 ||
    { echo "- bench latency $kv at 64,256: exit $? ($(grep -m1 -iE 'cannot|memory|fail' "$out/logs/lat-$kv.log")); batch 64 alone" | tee -a "$sum";
      timeout 100 $G bench latency --model synthetic:120b --batches 64 --context 8192 --prefill "" \
        --decode-steps 16 --kv-cache-dtype $kv --output-json "$out/lat-$kv.json" >"$out/logs/lat-$kv-64.log" 2>&1; }
  grep -E "^\| synthetic" "$out/logs/lat-$kv.log" "$out/logs/lat-$kv-64.log" 2>/dev/null | sed "s/^[^|]*|/| $kv |/" | tee -a "$sum"
done
for kv in bf16 fp8; do
  [ "$(left)" -gt 90 ] || { echo "- served $kv: skipped ($(left) s left)" | tee -a "$sum"; continue; }
  $G serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
    --no-enable-prefix-caching --max-model-len 10240 --kv-cache-dtype $kv >"$out/logs/serve-$kv.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q "ready:" "$out/logs/serve-$kv.log" && break; sleep 1; done
  echo "- server $kv: $(grep -m1 -oE 'KV cache capacity [0-9]+ tokens[^)]*\)?' "$out/logs/serve-$kv.log")" | tee -a "$sum"
  levels="" reserve=0
  [ $kv = bf16 ] && reserve=120 # leave the fp8 server its turn
  for c in ${LEVELS:-8 32 64}; do
    # a level of C 8k prompts takes roughly 20 s + C/2 s here; stop before the budget
    [ "$(left)" -gt $((40 + c / 2 + reserve)) ] || { echo "  level $c skipped ($(left) s left)" | tee -a "$sum"; break; }
    levels="$levels${levels:+,}$c"
  done
  if [ -n "$levels" ]; then
    timeout $(($(left) - 10)) $G bench serve --url http://127.0.0.1:8000 --isl 8192 --osl 1024 --concurrency "$levels" \
      --prompts-per-concurrency 1 --num-warmups 2 --label "gptoss 120b 8k/1k $kv KV (H200, 1xC)" \
      --output-json "$out/sweep-8k1k-$kv.json" --no-progress >"$out/logs/bench-$kv.log" 2>&1
    echo "  levels $levels: exit $?" | tee -a "$sum"
    grep -E "Maximum request concurrency|Output token throughput|Total Token throughput|Median TPOT|Median TTFT|Failed requests" "$out/logs/bench-$kv.log" | sed 's/^/  /' | tee -a "$sum"
  fi
  kill -TERM $pid; wait $pid
done
echo "($(($(date +%s) - start)) s)" | tee -a "$sum"
