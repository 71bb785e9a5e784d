#!/usr/bin/env bash
# Session 31, call 4 (~4.5 min; an H100 is fine): down's chunks in halves, and the head's figures.
#   base  ea44716 (= c7c77d1's source: the counted barrier; the layer 70.3-71.0 µs, 0.951 of the
#         loop);
#   new   base + down's chunks in two halves of their k steps on two warps (call 3's probes: down
#         whole 12.5 µs = its arithmetic alone 12.5 against its stream alone 8.2; a block's 10-12
#         chunks on 8 warps leave the busiest warp 2 chunks where most have 1).
#  (1) the (h) checks of new (down's sums are grouped anew: relL2 moves a little, top-1 stays);
#  (2) the phases with the experts' probes of base and new; (3) decode batch 1, the loop against
#      both step kernels, 120b and 20b, two interleaved rounds; (4) roofline and bench latency at
#      the head (120b 1, 8, 64; 20b 1) for the closing table.
# The default path's kernels at the head are 9bf774a's (call 2 ran every GPU test there): since
# then only step_kernel.cu (off by default) changed, and tma_ring.cuh back to its bytes.
# Prediction (before the run): down whole 12.5 -> 9.5-10.5 µs, its arithmetic alone 12.5 -> 9-10;
# the layer 70.3 -> 67.5-68.5; the step kernel 0.951 -> 0.97-0.985 of the loop (120b batch 1).
# Rule: kept if the layer drops by more than 2 %; else reverted. Still off by default unless it
# beats the loop beyond the spread at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c4 "session 31 call 4: down in half chunks; the head's figures"
step_kernel_vs_base
roofline_and_latency
finish_call
