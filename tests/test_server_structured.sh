#!/usr/bin/env bash
# Structured output end to end (issue 16): 1,000 constrained requests (chat, responses, completions;
# JSON schemas, json_object, regex, choice, strict tools, tool_choice) against the random tiny
# model, every answer checked by ajv, RegExp or comparison (tests/node/server_structured.mjs).
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
[ -d "$SRC/tests/node/node_modules/ajv" ] || { echo "SKIP: no ajv (run scripts/setup.sh)"; exit 77; }
# OpenMP threads that sleep instead of spinning at barriers: on a shared 2-core box spinning
# doubled the server's CPU time per token (54 vs 26 s for 150 requests).
export OMP_WAIT_POLICY=passive
start_server --max-model-len 4096
N=$([ "$SANITIZED" = 1 ] && echo 100 || echo 1000) BASE=$BASE SRC=$SRC node "$SRC/tests/node/server_structured.mjs" || fail "structured outputs"
stop_server
