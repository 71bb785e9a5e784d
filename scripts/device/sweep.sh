#!/usr/bin/env bash
# On the GPU machine: serve synthetic:120b with the CUDA backend and sweep it with `gptoss bench serve`
# (server and client on the same machine), 1k/1k and 8k/1k. Shortened for a lease: K prompts per
# concurrency level (InferenceMAX uses 10) and one warm-up per level. Results: $OUT/sweep-*.json.
# Needs .devcarry from scripts/device/prepare.sh (binaries, libraries, the tokenizer in .devcarry/cache).
set -uo pipefail
out=${OUT:-/tmp/sweep-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
G=.devcarry/bin/gptoss
MODEL=${MODEL:-synthetic:120b}
K=${K:-2}
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
# SERVE_ARGS adds to (or overrides) the server's options, e.g. "--target-tpot-ms 25" or
# "--preset balanced"; TAG names the result files (sweep-1k1k$TAG.json).
# shellcheck disable=SC2086
"$G" serve --model "$MODEL" --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
  --no-enable-prefix-caching --max-model-len 10240 ${SERVE_ARGS:-} >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "ready:" "$out/serve.log" && break; sleep 1; done
grep -q "ready:" "$out/serve.log" || { tail -20 "$out/serve.log"; kill $pid; exit 1; }
run() { # label isl osl levels
  "$G" bench serve --url http://127.0.0.1:8000 --isl "$2" --osl "$3" --concurrency "$4" \
    --prompts-per-concurrency "$K" --warmups-per-concurrency 1 --label "gptoss $1 (H200, K=$K)" \
    --output-json "$out/sweep-$1${TAG:-}.json" --no-progress 2>&1 | grep -E "Maximum request concurrency|Output token throughput|Total Token throughput|Median TPOT|Median TTFT|Failed requests|Successful" 
}
run 1k1k 1024 1024 "${LEVELS_1K:-1,8,64,256}"
[ "${LEVELS_8K:-1,8,32}" = none ] || run 8k1k 8192 1024 "${LEVELS_8K:-1,8,32}"
kill -TERM $pid; wait $pid
tail -5 "$out/serve.log"
