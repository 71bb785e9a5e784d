#!/usr/bin/env bash
# Hundreds of malformed and hostile requests (tests/node/server_bad_input.mjs): each gets the right
# status, and the server answers a good request after every batch and drains cleanly at the end.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
start_server --served-model-name tiny --max-model-len 4096 --timeout-keep-alive 2
PORT=$PORT IDLE_TIMEOUT=2 node "$SRC/tests/node/server_bad_input.mjs" || fail "the bad-input suite failed"
curl -sf "$BASE/health" >/dev/null || fail "the server is not healthy after the suite"
stop_server
