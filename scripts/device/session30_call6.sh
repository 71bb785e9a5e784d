#!/usr/bin/env bash
# Session 30, call 6 (~4 min; an H100 is fine): two changes to the step kernel's experts against
# its base (91be4f6: call 5's rolled loop): (a) each matrix's chunking chosen for its busiest
# warp (down in 4 chunks of 12 k steps: 36 steps for the busiest warp of a block with 6 tiles,
# against 46 in 2 chunks of 23), (b) each chunk's scale words asked for while the chunk before is
# multiplied (the arithmetic-alone probe waited an L2 round trip a chunk before its first step).
#  (1) the (h) checks; (2) the phases with the experts' probes, base and new; (3) decode batch 1,
#  the loop against both step kernels, 120b and 20b, two interleaved rounds.
# Prediction (before the run): (h) passes (down's sums grouped in 4 chunks: relL2 near call 5's).
# Arithmetic alone: down 13.3 -> 10-11.5 µs, routing + gate_up 23.4 -> 21-22.5; whole: down 13.3 ->
# 10.5-12, gate_up 26.7 -> 25-26.5, the layer 75.9 -> 72-74.5; the step kernel 0.915 -> 0.94-0.97
# of the loop. Rule: each change stays only as part of the pair if the layer drops by more than 2 %
# against the base; the step kernel stays off by default unless it beats the loop beyond the spread
# at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c6 "session 30 call 6: the step kernel's chunking per matrix and scale prefetch against its base"
step_kernel_vs_base
finish_call
