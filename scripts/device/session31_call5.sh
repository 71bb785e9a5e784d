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
#      20b, one round (the device time left was short).
# Prediction (before the run): (h) relL2 8.75e-3 / 1.79e-3. If the code's size is what costs:
# phases 5 + 6 whole 37.7 -> 34-36.5 µs, the layer 70.0 -> 66.5-69, 0.944 -> 0.95-0.99 of the loop;
# if not, within the spread (the divisions alone: ~0.1 µs a chunk). Rule: kept if the layer drops by
# more than 1 % (it also removes untested code); else kept only for that reason, noted as no gain.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c5 "session 31 call 5: the step kernel's code made smaller"
# Short of device time (BUDGET seconds for the script): the (h) checks and the phases first, the
# decode rows only if they fit.
test_table
run_logged step_kernel 120 $bin/gpu_test_cuda_forward --step-kernel
grep -E "step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
step_kernel_phases base new
if [ $(($(date +%s) - start + 80)) -lt "${BUDGET:-400}" ]; then
  ROUNDS=1 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
fi
finish_call
