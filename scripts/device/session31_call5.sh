#!/usr/bin/env bash
# Session 31, call 5 (~3.5 min; any card: base and new in the same call): the step kernel's code made smaller.
#   base  dd4b0ca (the counted barrier; call 4: the layer 70.0 µs, 0.944 of the loop at 120b);
#   new   base + the expert loops in the folded form only (the unfolded instances gone: the table
#         is built only when every layer's scales fold) and the chunks' places walked by
#         increments instead of three integer divisions a chunk: 12,776 -> 11,959 SASS
#         instructions (~200 -> ~187 KB), phases 5 and 6 3,194 -> 2,822 and 2,336 -> 1,958.
# Why: call 4 put ~2.5-2.9 µs of fixed cost on each expert chunk against ~0.06-0.09 µs a k step,
# and calls 1 and 3 had 12-18 % of the samples at no_instruction, spread over the chunks'
# prologues; the kernel's ~200 KB of code walked once a layer may be more than an SM's instruction
# caches hold.
#  (1) the (h) checks of new (the same sums: the figures of call 2); (2) the phases with the
#      experts' probes of base and new; (3) decode batch 1, the loop and both step kernels, 120b and
#      20b, two interleaved rounds. (Not run in session 31: no machine; for the next session.)
# Prediction (before the run): (h) relL2 8.75e-3 / 1.79e-3. If the code's size is what costs:
# phases 5 + 6 whole 37.7 -> 34-36.5 µs, the layer 70.0 -> 66.5-69, 0.944 -> 0.95-0.99 of the loop;
# if not, within the spread (the divisions alone: ~0.1 µs a chunk). Rule: kept if the layer drops by
# more than 1 % (it also removes untested code); else kept only for that reason, noted as no gain.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c5 "session 31 call 5: the step kernel's code made smaller"
step_kernel_vs_base
finish_call
