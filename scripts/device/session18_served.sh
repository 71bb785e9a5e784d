#!/usr/bin/env bash
# Session 18 (~9 min at C = 256, ~1.5 min at C = 4): the served 1k/1k frontier at InferenceMAX's
# settings (10 x C prompts, 2 x C warm-ups) at the levels session 17 did not run, one level a call
# (LEVEL=256 or LEVEL=4): `gptoss serve` as served_10xc starts it (max-num-seqs 256, 8,192 tokens a
# step, no prefix caching). Prediction (before the call): C = 256 ~13,000-13,500 total tokens/s per
# GPU at ~31 tokens/s per user (session 16's 13,330 at 1 x C prompts; the router change does not
# reach batch 256); C = 4 ~1,770 at ~230 (session 16's 1,721 at 226, +2-3 % from the router at 4
# tokens). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s18s-out "session 18: served 1k/1k at InferenceMAX settings, C = ${LEVEL:-256}"
served_10xc "${LEVEL:-256}"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
