#!/usr/bin/env bash
# Strict HTTP/1.1 framing (issue 18, tests/node/server_framing.mjs): every ambiguous shape gets a
# 400 with the connection closed, nothing smuggled behind it is answered, and the server stays
# healthy.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
start_server --served-model-name tiny --max-model-len 4096 --timeout-keep-alive 10
PORT=$PORT node "$SRC/tests/node/server_framing.mjs" || fail "the framing suite failed"
curl -sf "$BASE/health" >/dev/null || fail "the server is not healthy after the suite"
stop_server
