#!/usr/bin/env bash
# Session 17, call 4 (~8 min): the forward test with the final router-gap excusal (gap < 1e-2, at
# least 5 of 11 rows left) on call 3's three seeds and two fresh ones; then the served 1k/1k point
# at C = 128 with InferenceMAX's settings (call 3's script, LEVELS=128). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17f-out "session 17 call 4: the forward test's router-gap excusal at 1e-2"
test_table
for S in 12268047980063385605 7271119250326059773 9628026347155089174 random1 random2; do
  args=(--skip-tp); case $S in random*) ;; *) args+=(--seed $S) ;; esac
  run_logged "forward_$S" 200 $bin/gpu_test_cuda_forward "${args[@]}"
  grep -hE "seed|20b x 2 layers" "$out/logs/forward_$S.log" | head -8 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs-tests.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
[ -f .devcarry/bin/gptoss ] || exit 0
mkdir -p "$out/logs"
[ -f .devcarry/cache/tokenizer/tokenizer.json.gz ] && gunzip -kf .devcarry/cache/tokenizer/tokenizer.json.gz
G=$bin/gptoss
echo -e "\n## served 1k/1k, C = ${LEVELS:-128}, 10 x C prompts, 2 x C warm-ups $(t)" | tee -a "$sum"
"$G" serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
  --no-enable-prefix-caching --max-model-len 10240 >"$out/logs/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q "ready:" "$out/logs/serve.log" && break; sleep 1; done
keys="Maximum request concurrency|Output token throughput|Median TPOT|Median TTFT|P99 TTFT|Failed requests|Successful"
timeout ${SERVE_LIMIT:-420} "$G" bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 \
  --concurrency "${LEVELS:-128}" --prompts-per-concurrency 10 --warmups-per-concurrency 2 \
  --label "gptoss 120b 1k/1k (H200, 10xC)" --output-json "$out/served-1k1k-10xC.json" --no-progress 2>&1 |
  grep -E "$keys" | tee -a "$sum"
kill -TERM $pid; wait $pid
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
