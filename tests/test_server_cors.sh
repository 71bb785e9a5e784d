#!/usr/bin/env bash
# CORS as vLLM serves it (issue 12): preflights answered without the API key, Access-Control-Allow-
# Origin on every response to an allowed Origin (the 401 and streams included), nothing for an
# origin that is not allowed, and vLLM's --allowed-origins/-methods/-headers and --allow-credentials.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
passed=0

# req ARGS... : runs curl, headers into $TMP/h (lower-cased), body into $TMP/b; prints the status.
req() {
    curl -s -D "$TMP/h.raw" -o "$TMP/b" -w '%{http_code}' --max-time 60 "$@"
    tr -d '\r' <"$TMP/h.raw" | tr 'A-Z' 'a-z' >"$TMP/h"
}
# has_header 'name: value' : the exact (lower-cased) header line is in the last response.
has_header() { grep -qxF "$1" "$TMP/h"; }
no_header() { ! grep -q "^$1:" "$TMP/h"; }
check() {
    local what=$1
    shift
    "$@" || fail "$what (headers: $(tr '\n' '|' <"$TMP/h") body: $(head -c 300 "$TMP/b"))"
    passed=$((passed + 1))
}
preflight() {
    req -X OPTIONS "$BASE$1" -H "Origin: $2" -H "Access-Control-Request-Method: $3" "${@:4}"
}

# --- defaults (all origins, methods and headers), with --api-key
start_server --api-key sekret --served-model-name tiny --max-model-len 4096
st=$(preflight /v1/chat/completions https://app.example POST \
    -H 'Access-Control-Request-Headers: authorization, content-type, x-stainless-os')
check "default preflight without the key: $st" [ "$st" = 200 ]
check "preflight: allow-origin *" has_header 'access-control-allow-origin: *'
check "preflight: all methods" has_header \
    'access-control-allow-methods: delete, get, head, options, patch, post, put'
check "preflight: the asked headers allowed" has_header \
    'access-control-allow-headers: authorization, content-type, x-stainless-os'
check "preflight: max-age" has_header 'access-control-max-age: 600'
check "preflight: no credentials by default" no_header access-control-allow-credentials
# A preflight on a path that does not exist is still only about CORS (Starlette answers it too).
st=$(preflight /v1/nothing https://app.example GET)
check "preflight on an unknown path: $st" [ "$st" = 200 ]
# An OPTIONS that is not a preflight (no Access-Control-Request-Method) is an ordinary request:
# it still needs the key, and then is not a method of the route.
st=$(req -X OPTIONS "$BASE/v1/models" -H 'Origin: https://app.example')
check "OPTIONS without Access-Control-Request-Method needs the key: $st" [ "$st" = 401 ]
st=$(req -X OPTIONS "$BASE/v1/models" -H 'Origin: https://app.example' \
    -H 'Authorization: Bearer sekret')
check "OPTIONS with the key, not a preflight: $st" [ "$st" = 405 ]

# Simple and actual requests carry the header, the 401 included, so a page can read the error.
st=$(req "$BASE/v1/models" -H 'Origin: https://app.example' -H 'Authorization: Bearer sekret')
check "GET /v1/models with Origin: $st" [ "$st" = 200 ]
check "GET: allow-origin *" has_header 'access-control-allow-origin: *'
grep -q '"object":"list"' "$TMP/b" || fail "GET /v1/models body: $(cat "$TMP/b")"
st=$(req "$BASE/v1/models" -H 'Origin: https://app.example')
check "without the key: 401 ($st)" [ "$st" = 401 ]
check "the 401 carries allow-origin" has_header 'access-control-allow-origin: *'
st=$(req "$BASE/v1/completions" -H 'Origin: https://app.example' -H 'Authorization: Bearer sekret' \
    -H 'Content-Type: application/json' \
    -d '{"model":"tiny","prompt":"hi","max_tokens":2,"stream":true}')
check "a stream with Origin: $st" [ "$st" = 200 ]
check "the stream carries allow-origin" has_header 'access-control-allow-origin: *'
grep -q '^data: \[DONE\]' "$TMP/b" || fail "stream body: $(cat "$TMP/b")"
# No Origin, no CORS headers (a same-origin or non-browser client).
st=$(req "$BASE/health")
check "no Origin: no allow-origin ($st)" no_header access-control-allow-origin
stop_server

# --- a list of origins, methods and headers, with credentials
start_server --api-key sekret --served-model-name tiny --max-model-len 4096 \
    --allowed-origins '["https://a.example", "http://localhost:3000"]' \
    --allowed-methods '["GET", "POST"]' --allowed-headers '["Authorization"]' --allow-credentials
st=$(preflight /v1/completions https://a.example POST \
    -H 'Access-Control-Request-Headers: Authorization, Content-Type')
check "allowed origin preflight: $st" [ "$st" = 200 ]
check "the origin is echoed" has_header 'access-control-allow-origin: https://a.example'
check "vary: origin" has_header 'vary: origin'
check "credentials" has_header 'access-control-allow-credentials: true'
check "the configured methods" has_header 'access-control-allow-methods: get, post'
check "the configured headers with the safelisted ones" has_header \
    'access-control-allow-headers: accept, accept-language, content-language, content-type, authorization'
st=$(preflight /v1/completions https://evil.example POST)
check "disallowed origin preflight: 400 ($st)" [ "$st" = 400 ]
check "disallowed origin: no allow-origin" no_header access-control-allow-origin
grep -q '"param":"Origin"' "$TMP/b" || fail "the refusal names Origin: $(cat "$TMP/b")"
st=$(preflight /v1/completions https://a.example DELETE)
check "disallowed method preflight: 400 ($st)" [ "$st" = 400 ]
grep -q '"param":"Access-Control-Request-Method"' "$TMP/b" || fail "method: $(cat "$TMP/b")"
st=$(preflight /v1/completions https://a.example POST -H 'Access-Control-Request-Headers: X-Secret')
check "disallowed header preflight: 400 ($st)" [ "$st" = 400 ]
grep -q "header 'X-Secret' is not allowed" "$TMP/b" || fail "header: $(cat "$TMP/b")"
st=$(req "$BASE/v1/models" -H 'Origin: http://localhost:3000' -H 'Authorization: Bearer sekret')
check "allowed origin GET: $st" [ "$st" = 200 ]
check "GET echoes the origin" has_header 'access-control-allow-origin: http://localhost:3000'
check "GET credentials" has_header 'access-control-allow-credentials: true'
# A disallowed origin is still served; the browser withholds the answer from the page.
st=$(req "$BASE/v1/models" -H 'Origin: https://evil.example' -H 'Authorization: Bearer sekret')
check "disallowed origin GET is served: $st" [ "$st" = 200 ]
check "disallowed origin GET: no allow-origin" no_header access-control-allow-origin
stop_server

# --- bad flags are refused at start, naming the flag
for bad in 'https://a.example' '["ok", 3]' '[""]' '{"a": 1}'; do
    out=$("$BIN" serve --model synthetic:tiny --allowed-origins "$bad" 2>&1)
    rc=$?
    [ "$rc" = 2 ] || fail "--allowed-origins '$bad': exit $rc, expected 2 ($out)"
    grep -q 'option --allowed-origins' <<<"$out" || fail "--allowed-origins '$bad': $out"
    passed=$((passed + 1))
done
echo "test_server_cors: $passed passed, 0 failed"
