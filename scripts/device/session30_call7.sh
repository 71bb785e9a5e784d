#!/usr/bin/env bash
# Session 30, call 7 (~3 min; an H100 is fine; built at the head with the two scale lambdas as one): call 6's pair lost (the layer 76.9 -> 85.3 µs; its
# down in 4 chunks streamed at half the rate). Its other half alone against the same base (91be4f6):
# each chunk's scale words asked for while the chunk before is multiplied.
#  (1) the (h) checks (call 5's sums exactly: relL2 8.75e-3 / 1.79e-3); (2) the phases with the
#  experts' probes, base and new; (3) decode batch 1, the loop against both, 120b and 20b.
# Prediction (before the run): arithmetic alone routing + gate_up 24 -> 22.5-23.5, down 13.1 ->
# 12-12.8; whole: the layer 76.9 -> 75-76.5 µs; the step kernel +0.5-2 %. Rule: kept if the whole
# layer's mean drops and the 120b decode ratio does not fall; else removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c7 "session 30 call 7: the step kernel's scale prefetch alone against its base"
step_kernel_vs_base
finish_call
