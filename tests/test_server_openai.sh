#!/usr/bin/env bash
# The server against the official `openai` npm SDK (tests/node/server_openai_sdk.mjs).
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
[ -d "$SRC/tests/node/node_modules/openai" ] || { echo "SKIP: no openai SDK (run scripts/setup.sh)"; exit 77; }
start_server --api-key sekret --served-model-name tiny --max-model-len 4096
SEEDS=$([ "$SANITIZED" = 1 ] && echo 3 || echo 40) BASE=$BASE API_KEY=sekret MODEL=tiny node "$SRC/tests/node/server_openai_sdk.mjs" || fail "the SDK suite failed"
stop_server
