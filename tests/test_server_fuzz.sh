#!/usr/bin/env bash
# Smoke run of the grammar-aware HTTP fuzzer (tests/node/http_fuzz.mjs, issue 18): a few hundred
# requests over every route, with control-token names in the text fields, broken framing and missing
# keys. Every answer must be 200/400/401/404/413/429 with a well-formed body, none may hang, the
# server's log must hold no sanitizer report, and it must still drain and exit 0 afterwards. The long
# runs (bench/results/fuzz-*.md) use the same script with N in the hundreds of thousands.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
key=fuzz-key
start_server --served-model-name tiny --max-model-len 256 --max-request-bytes 65536 --api-key "$key"
if [ "$SANITIZED" = 1 ]; then n=150; else n=400; fi
PORT=$PORT N=$n CONC=4 SEED=${FUZZ_SEED:-7} SERVER_PID=$SERVER_PID API_KEY=$key MAX_BODY=65536 \
    HANG_S=120 node "$SRC/tests/node/http_fuzz.mjs" || fail "the fuzzer found a problem"
curl -sf "$BASE/health" >/dev/null || fail "the server is not healthy after the fuzzer"
if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$SERVER_LOG"; then
    fail "sanitizer report in the server log"
fi
stop_server
echo "test_server_fuzz: passed"
