#!/usr/bin/env bash
# Session 40, call 3 (~3 min; an H200 if one is lent: every figure since session 23 is an H100's and
# the acceptance of issue 13 is an H200's). Prepared as call 2 (SLIM=all TRACE=1; the default path is
# the head's). No trial: the head's figures beside the roofline, and the step by kernel at batch 1
# and 8 (what the next change should aim at on this card). No prediction to test; for the record,
# session 20's last H200 figures were 120b 374 / 1,296 / 3,362 and 20b 528.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s40c3 "session 40 call 3: the head's figures and the step by kernel"
roofline_and_latency
before 70 && decode_by_kernel 1 8
finish_call
