#!/usr/bin/env bash
# Session 31, call 1 (~7 min; an H100 is fine): the step kernel, three builds:
#   base  b4a32a2 (session 30's head: the rolled loop, a warp-uniform exit after every k step);
#   base2 e1ef45a = base +
#         (a) a full trip of four k steps has no exit: its 4 shuffles and 12 shared loads issue
#             together (the SASS of the base ran each step as its own chain — shuffle, loads,
#             dequantisation, MMAs — the next step's loads waiting for the branch);
#         (b) each warp asks for its next chunk's scale words while it multiplies this one (their
#             L2 round trip off the chain between chunks; 160 B of spills, 6 words a chunk);
#         (c) the tiles' biases behind an mbarrier only a gate_up epilogue waits on (no block sync
#             after their DRAM loads: session 30's ncu put 3.9 % of the stall samples there);
#   new   base2 + grid barriers in two L2 round trips (grid_barrier_counted: a release reduction and
#         an acquire poll, against grid_barrier_with's ~5 round trips on the last block's chain:
#         generation read, fence, add, reset, fence, advance). Six a layer; session 30's ncu put
#         36 % of the stall samples at barriers.
#  (1) the (h) checks of new; (2) the phases with the experts' probes of all three; (3) decode
#      batch 1: the loop and the three step kernels, 120b and 20b, two interleaved rounds;
#  (4) ncu's source counters on new's kernel whole (where its warps wait now), if time is left.
# Prediction (before the run): (h) figures equal session 30's (relL2 8.75e-3 20b, 1.79e-3 120b:
# the same sums in the same order in all three). base2: arithmetic alone, routing + gate_up 23.4 µs
# -> 16-20, down 13.3 -> 9-12; the layer 75.9 -> 69-73 µs; the step kernel against the loop 0.915
# -> 0.95-1.00 (120b batch 1). new: each of the five barriers a layer 0.5-1.5 µs shorter: the layer
# -> 63-70 µs, the step kernel 1.00-1.10 of the loop. Rule: each step is kept if its layer time
# drops by more than 2 % against its predecessor; else it is reverted. The default flips only if
# the step kernel beats the loop beyond the spread at both models (then every GPU test runs before
# that commit, in the next call).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c1 "session 31 call 1: the step kernel's expert loop and grid barrier, three builds"
step_kernel_vs_base
if [ $(($(date +%s) - start)) -lt 400 ]; then
  ncu_step_kernel whole 900 40
fi
finish_call
