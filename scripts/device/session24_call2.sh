#!/usr/bin/env bash
# Session 24, call 2 (~1 min): why the layer probe's stream form (call 1, H100: 57.6 µs a layer,
# 1.87 TB/s, against the kernels' 76.7-79.1) still runs at well under the card's bandwidth when its
# weight stream never waits for a barrier. Two ring-alone measurements (nothing computed, each
# stage released as it lands):
#  (1) gpu_test_attn_stream --bench's last two columns (probe 5: QKV's and O's rows, the attention
#      kernel's ring; call 1 measured them but the table dropped them);
#  (2) gpu_test_layer_probe --bench's new last table: the ring alone at copy sizes 2-32 KB and ring
#      sizes 96/192 KB, and the card's plain streaming read of the same 3.9 GB.
# Prediction (before the run, H100): plain loads ~3.0-3.2 TB/s; the ring alone at 8 KB copies and
# 192 KB within 10 % of them (the ring's ~138 KB in flight an SM is ~4x what Little's law asks).
# Decision: ring alone >= 90 % of plain loads -> the stream form's time is the phases'
# dependencies (the consumers), and the next step is the consumer side; ring alone well below
# plain loads at the probe's copy sizes but near it at larger ones -> the next form copies larger
# contiguous pieces (a block owns a contiguous row range of each matrix).
set -uo pipefail
root=${OUT:-/tmp/s24c2}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 24 call 2: the ring alone"
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 100 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
echo -e "\n## gpu_test_layer_probe --bench $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_layer_probe --bench 2>&1 | grep -E '^\||^A batch|^The ring|checks' | tee -a "$sum"
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
