#!/usr/bin/env bash
# Echo scoring over HTTP (tests/node/server_echo.mjs) with an API key, prefilling in chunks of 16
# tokens so that a prompt row at a chunk's end (which predicts the next chunk's first token) is
# exercised.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
[ -d "$SRC/tests/node/node_modules/openai" ] || { echo "SKIP: no openai SDK (run scripts/setup.sh)"; exit 77; }
start_server --api-key sekret --served-model-name tiny --max-model-len 4096 --max-num-batched-tokens 16
BASE=$BASE API_KEY=sekret MODEL=tiny node "$SRC/tests/node/server_echo.mjs" || fail "the echo suite failed"
code=$(curl -s -o /dev/null -w '%{http_code}' "$BASE/v1/completions" -d '{"prompt":"x","max_tokens":0,"echo":true}')
[ "$code" = 401 ] || fail "no key: $code"
stop_server
echo "PASS"
