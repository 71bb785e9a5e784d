#!/usr/bin/env bash
# The served figures of issues 13 and 14 in one call (~4 min): `gptoss serve --backend cuda` on
# synthetic:120b (the defaults of scripts/device/sweep.sh) driven by `gptoss bench serve` at 1k/1k:
#   1. concurrency 1, 10 prompts (1 warm-up): tokens/s per user (issue 13: >= 580) and the median
#      TTFT of a lone 1k prompt over HTTP (issue 14: <= 25 ms);
#   2. the frontier at C = LEVELS (default 4,16,64,256), K=1 prompt per concurrency and 8 warm-ups a
#      level (shortened from InferenceMAX's 10xC / 2xC to fit a lease).
# Needs .devcarry (scripts/device/prepare.sh) with the tokenizer. Results: $OUT/served-c1.json,
# $OUT/served-1k1k.json, $OUT/served-summary.md.
set -uo pipefail
out=${OUT:-/tmp/served-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
G=.devcarry/bin/gptoss
sum="$out/served-summary.md"
start=$(date +%s)
summary_header "$sum" "Served 1k/1k (issues 13, 14)"
"$G" serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
  --no-enable-prefix-caching --max-model-len 10240 >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q "ready:" "$out/serve.log" && break; sleep 1; done
grep -q "ready:" "$out/serve.log" || { tail -20 "$out/serve.log"; kill $pid; exit 1; }
keys="Maximum request concurrency|Output token throughput|Total Token throughput|Median TPOT|Median TTFT|P99 TTFT|Failed requests"
"$G" bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 --concurrency 1 --num-prompts 10 \
  --num-warmups 1 --label "gptoss 120b 1k/1k C=1 (H200)" --output-json "$out/served-c1.json" --no-progress 2>&1 |
  grep -E "$keys" | tee -a "$sum"
timeout 300 "$G" bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 --concurrency "${LEVELS:-4,16,64,256}" \
  --prompts-per-concurrency 1 --num-warmups 8 --label "gptoss 120b 1k/1k (H200, 1xC)" \
  --output-json "$out/served-1k1k.json" --no-progress 2>&1 | grep -E "$keys" | tee -a "$sum"
kill -TERM $pid; wait $pid
echo "($(($(date +%s) - start)) s)" | tee -a "$sum"
