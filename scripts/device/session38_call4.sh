#!/usr/bin/env bash
# Session 38, call 4 (~4-5 min; any card): the head after calls 1-3 (the trials removed,
# route_sums' early form the kernel). Prepare with
#   SLIM=all TRACE=1 bash scripts/device/prepare.sh
# Every GPU test program (no prediction: all pass, as at call 1's build and call 3's), roofline and
# bench latency, the loop by kernel at batch 1 and 8 (CUPTI). Prediction: route_sums ~4.2 µs a
# launch as in call 3, 120b batch 1 355-362 tok/s on an H100.
set -uo pipefail
source "$(dirname "$0")/env.sh"
before() { [ $(($(date +%s) - start)) -lt "$1" ]; }
device_script /tmp/s38c4 "session 38 call 4: every GPU test at the head, roofline, latency, by kernel"
gpu_tests_table
before 420 && roofline_and_latency
before 470 && decode_by_kernel 1 8
finish_call
