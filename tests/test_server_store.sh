#!/usr/bin/env bash
# The responses store over HTTP (tests/node/server_store.mjs: retrieve, delete, input items,
# previous_response_id, item_reference, background with polling and cancel), with an API key and a
# store small enough that eviction is seen; then a server with the store off answers
# previous_response_id with a 400 that names the flag and claims to store nothing; last, a
# background response running at SIGTERM is aborted by the drain.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
[ -d "$SRC/tests/node/node_modules/openai" ] || { echo "SKIP: no openai SDK (run scripts/setup.sh)"; exit 77; }
start_server --api-key sekret --served-model-name tiny --max-model-len 4096 --responses-store-size 4
BASE=$BASE API_KEY=sekret MODEL=tiny STORE_SIZE=4 node "$SRC/tests/node/server_store.mjs" || fail "the store suite failed"
stop_server

start_server --responses-store-size 0
out=$(curl -s "$BASE/v1/responses" -d '{"input":"x","max_output_tokens":2}')
grep -q '"store":false' <<<"$out" || fail "store off: the response claims to be stored: $out"
id=$(grep -o '"id":"resp_[^"]*"' <<<"$out" | head -1 | cut -d'"' -f4)
code=$(curl -s -o "$TMP/get" -w '%{http_code}' "$BASE/v1/responses/$id")
[ "$code" = 404 ] || fail "store off: GET gave $code"
out=$(curl -s "$BASE/v1/responses" -d "{\"input\":\"x\",\"previous_response_id\":\"$id\"}")
grep -q 'responses-store-size' <<<"$out" || fail "store off: previous_response_id: $out"
# A background response still running at SIGTERM: the drain aborts it after --shutdown-timeout and
# the server exits cleanly (no leak under ASan).
stop_server
start_server --shutdown-timeout 1
out=$(curl -s "$BASE/v1/responses" -d '{"input":"x","max_output_tokens":3000,"ignore_eos":true,"background":true}')
grep -q '"status":"queued"' <<<"$out" || fail "background: $out"
stop_server
echo "PASS"
