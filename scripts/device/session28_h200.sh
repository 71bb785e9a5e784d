#!/usr/bin/env bash
# Session 28, an H200 if one comes (~3 min; the 120b decode at 1024 sequences needs ~148 GB): the
# head's figures beside the roofline on the card the issues' acceptance figures are for, and the
# register-A kernel's decode 1024 (last measured in session 20).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28h "session 28: the head on an H200"
roofline_and_latency
echo -e "\n## 120b decode 256, 1024 $(t)" | tee -a "$sum"
timeout 150 $bin/gptoss bench latency --model synthetic:120b --batches 256,1024 --prefill 1024 \
  --output-json "$out/latency-120b-1024.json" >"$out/logs/lat-1024.log" 2>&1
grep -E "^\| synthetic" "$out/logs/lat-1024.log" | tee -a "$sum"
for b in 256 1024; do $bin/gptoss roofline --model 120b --batch $b --context 1024 | grep -E "^bound" | sed "s/^/120b:$b /" | tee -a "$sum"; done
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" logs && rm -rf "$out"/logs && mv /tmp/logs.tgz "$out/"
