#!/usr/bin/env bash
# The next session's first device call (~4 min), written in session 23: the two measurements that
# decide whether the cross-layer stream is worth building.
#  (1) gpu_test_attn_stream: the checks after session 23's stage-count fix (8 stages at three and
#      four tokens; unrun), then --bench: its last two columns are the ring alone (probe 5: QKV's
#      and O's rows streamed through the ring, each stage released as it lands, nothing computed).
#      Prediction (session 23, before any run): T = 1 ~22-24 µs on an H100 (the 3.0 µs launch, 53 MB
#      at ~2.6-2.8 TB/s), ~16-18 on an H200; above 28 (H100) the ring itself is the limit, and the
#      next form must ask for its rows differently (fewer, larger copies).
#  (2) scripts/device/layer_probe.sh: the layer probe's stream forms (session 21, never run: a
#      producer lane walks every phase of every layer, never waiting for a grid barrier), against
#      the launches and the persistent forms. Its prediction and decision are in layer_probe.sh.
# Needs .devcarry (scripts/device/prepare.sh, then gzip). Prints $OUT/summary.md.
set -uo pipefail
root=${OUT:-/tmp/s24c1}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 24 call 1: the ring alone, the layer probe's stream forms"
test_table
run_logged test_attn_stream 90 $bin/gpu_test_attn_stream
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
OUT=$root/probe timeout 360 bash scripts/device/layer_probe.sh
cat "$root/probe/summary.md" >>"$sum"
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
