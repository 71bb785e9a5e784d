#!/usr/bin/env bash
# Issue 18: bodies up to several MB (tokenising one takes seconds) are worked on off the event loops
# (src/server/offload.c), so /health stays responsive, no loop callback takes more than 50 ms of CPU
# time, and --timeout-keep-alive 2 does not cut a request whose answer is still being produced
# (tests/node/server_stall.mjs). Under the sanitizers the bodies are smaller and the bounds looser.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
start_server --served-model-name tiny --max-model-len 4096 --timeout-keep-alive 2
# The loop bound is CPU time (sharp); /health is wall time on a shared machine (loose).
if [ "$SANITIZED" = 1 ]; then mb=2 bound=250 health=10; else mb=8 bound=50 health=5; fi
BASE=$BASE MB=$mb BOUND_MS=$bound HEALTH_S=$health node "$SRC/tests/node/server_stall.mjs" ||
    fail "a large body stalled a loop, was cut, or was answered wrongly"
stop_server
echo "test_server_stall: passed"
