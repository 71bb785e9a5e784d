#!/usr/bin/env bash
# Session 31, an H200 (needs_h200: the 120b decode at 1024 sequences needs ~148 GB; ~5 min): the
# head's figures beside the roofline on the card the issues' acceptance figures are for.
#  (1) roofline and bench latency: 120b decode 1, 8, 64; 20b decode 1;
#  (2) 120b decode 256 and 1024 with a 1k prefill, and an 8k prefill (issue 14);
#  (3) the step kernel (off by default) against the loop at 120b batch 1, one round;
#  (4) served 1k/1k at concurrency 1, 10 prompts: tokens/s per user (issue 13: >= 580) and the
#      median TTFT of a lone 1k prompt (issue 14: <= 25 ms).
# The head's default path differs from session 30's in attn_stream's counted grid barrier (H100:
# 120b decode 1 +2.8 %, 20b +2.1 %). No H200 figure since session 5 (120b decode 1 351, 8 1,241, 64
# 3,255, 256 8,570, 1024 14,128; prefill 1k 16,841, 8k 24,458; C = 1 351 tok/s per user, TTFT 64.8
# ms); the H100's at this head (call 4): 120b decode 1 342-345, 8 1,065, 64 2,908; 20b 1 486.
# Expected on the H200 (more bandwidth, the same SMs): decode 1 ~370-400, 8 ~1,200-1,400, 64
# ~3,300-3,800, prefill 1k ~30-36k, 8k ~40-46k, decode 1024 ~16-19k; the step kernel ~0.95 of the
# loop.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31h "session 31: the head on an H200"
roofline_and_latency
echo -e "\n## 120b decode 256, 1024 and prefill 1k $(t)" | tee -a "$sum"
timeout 200 $bin/gptoss bench latency --model synthetic:120b --batches 256,1024 --prefill 1024 \
  --output-json "$out/latency-120b-1024.json" >"$out/logs/lat-1024.log" 2>&1
grep -E "^\| synthetic" "$out/logs/lat-1024.log" | tee -a "$sum"
echo -e "\n## 120b prefill 8k $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 8192 \
  --output-json "$out/latency-120b-8k.json" >"$out/logs/lat-8k.log" 2>&1
grep -E "^\| synthetic" "$out/logs/lat-8k.log" | tee -a "$sum"
for b in 256 1024; do $bin/gptoss roofline --model 120b --batch $b --context 1024 | grep -E "^bound" | sed "s/^/120b:$b /" | tee -a "$sum"; done
ROUNDS=1 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1" 120b:1
echo -e "\n## served 1k/1k, concurrency 1 $(t)" | tee -a "$sum"
[ -f .devcarry/cache/tokenizer/tokenizer.json.gz ] && gunzip -kf .devcarry/cache/tokenizer/tokenizer.json.gz
$bin/gptoss serve --model synthetic:120b --backend cuda --port 8000 --max-num-seqs 256 --max-num-batched-tokens 8192 \
  --no-enable-prefix-caching --max-model-len 10240 >"$out/logs/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q "ready:" "$out/logs/serve.log" && break; sleep 1; done
keys="Maximum request concurrency|Output token throughput|Median TPOT|Median TTFT|P99 TTFT|Failed requests"
timeout 150 $bin/gptoss bench serve --url http://127.0.0.1:8000 --isl 1024 --osl 1024 --concurrency 1 --num-prompts 10 \
  --num-warmups 1 --label "gptoss 120b 1k/1k C=1 (H200)" --output-json "$out/served-c1.json" --no-progress 2>&1 |
  grep -E "$keys" | tee -a "$sum"
kill -TERM $pid; wait $pid
finish_call
