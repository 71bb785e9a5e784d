#!/usr/bin/env bash
# How the synthetic 120b model routes a prefill step (~1.5 min): GPTOSS_MOE_COUNTS=1 makes the
# forward pass print, per layer of each eager step of >= 256 tokens, the touched experts, the largest
# count and the 64-token tiles by the tokens they hold (runner_forward.c). Prefill 1k and 8k; the
# per-layer lines of the first step of each, and their totals. Needs .devcarry. Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/counts-out "the synthetic 120b model's expert counts at prefill (GPTOSS_MOE_COUNTS=1)"
for n in 1024 8192; do
  GPTOSS_MOE_COUNTS=1 timeout 150 $bin/gptoss bench latency --model synthetic:120b --batches 1 \
    --prefill $n >"$out/logs/prefill-$n.log" 2>&1
  echo -e "\n## prefill $n $(t)" | tee -a "$sum"
  grep "^moe counts" "$out/logs/prefill-$n.log" | grep " T $n " | head -36 | tee -a "$sum"
  grep "^moe counts" "$out/logs/prefill-$n.log" | grep " T $n " | head -36 | awk '
    {for (i = 1; i <= NF; i++) if ($i == "touched") tt += $(i + 1)
     n++; a += $(NF - 6); b += $(NF - 4); c += $(NF - 2); d += $NF}
    END {printf "layers %d, touched %.1f a layer; tiles64 a layer: 1-16 %.1f, 17-32 %.1f, 33-48 %.1f, 49-64 %.1f\n", n, tt / n, a / n, b / n, c / n, d / n}' | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
