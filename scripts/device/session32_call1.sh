#!/usr/bin/env bash
# Session 32, call 1 (~6 min; any card: base and new in the same call).
# (a) Session 31's call 5, not run then: the step kernel's code made smaller (2b91a8a + 1f6e47f:
#     the expert loops in the folded form only, the chunks' places walked by increments; 12,776 ->
#     11,959 SASS instructions), base dd4b0ca (call 4: the layer 70.0 µs, 0.944 of the loop).
#     Prediction: (h) relL2 8.75e-3 / 1.79e-3. If the code's size is what costs: phases 5 + 6 whole
#     37.7 -> 34-36.5 µs, the layer 70.0 -> 66.5-69; else within the spread. Rule: kept either way
#     (it removes untested code); a gain only if the layer drops by more than 1 %.
# (b) New: the blocks' probe (step_kernel_set_block_probe; bench modes 3 and 4): every block's
#     arrival at each phase's grid barrier. Why: every phase of the step kernel ends at its slowest
#     block, and each SM gets a fixed share of the expert tiles (gate_up 10-11 tiles, down 5-6). The
#     stream alone of routing + gate_up is 22.4 µs for 34.5 MB (1.5 TB/s) where the ring alone
#     reaches 3.0-3.1 TB/s (session 25).
#     Prediction: in phase 5 (stream alone and whole) the median block arrives at ~16-18 µs and
#     the last at ~21-25 (the last 3-7 µs after the median), the same few SMs most often last.
#     Rule for what comes next: last - median >= 3 µs in phases 5-6 -> the expert tiles handed out
#     at run time (work taken from a shared counter) instead of fixed shares; < 1.5 µs -> the
#     stream is uniformly slow: look at the ring's depth and the copies' order instead.
# (c) ncu's source counters on the new build's kernel whole (launch 900), cut by phase with the
#     hot loops apart (sass_phases.py --loops): where a chunk's fixed cost goes.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s32c1 "session 32 call 1: smaller step kernel code; the blocks' arrivals; ncu by phase"
step_kernel_vs_base
ncu_step_kernel whole 900 20
if [ -f "$out/sass-whole.csv.gz" ]; then
  echo -e "\n## sass_phases --loops (whole)" | tee -a "$sum"
  python3 scripts/device/sass_phases.py "$out/sass-whole.csv.gz" --loops --top 4 2>&1 | tee -a "$sum"
fi
finish_call
