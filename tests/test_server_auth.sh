#!/usr/bin/env bash
# The authentication matrix (issue 18): with --api-key, every route and unknown path, with every
# method, answers 401 without the key or with a wrong one, except /health; with the key nothing is
# 401. With --metrics-no-auth, /metrics (and only it) opens.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"

ROUTES=(/v1/completions /v1/chat/completions /v1/responses /v1/models /tokenize /detokenize /ping
    /version /metrics /health /nothing /v1/nothing)
METHODS=(GET HEAD POST PUT DELETE OPTIONS PATCH)
passed=0

# status METHOD PATH [curl args...]
status() {
    local method=$1 path=$2
    shift 2
    local how=(-X "$method" -H 'Content-Type: application/json' -d '{}')
    [ "$method" = HEAD ] && how=(-I)
    curl -s -o /dev/null -w '%{http_code}' --max-time 30 "${how[@]}" "$@" "$BASE$path"
}

# matrix OPEN_PATHS...: checks every route × method × {no key, wrong key, key}.
matrix() {
    local open=" $* "
    for path in "${ROUTES[@]}"; do
        for method in "${METHODS[@]}"; do
            local none wrong good
            none=$(status "$method" "$path")
            wrong=$(status "$method" "$path" -H 'Authorization: Bearer wrong')
            good=$(status "$method" "$path" -H 'Authorization: Bearer sekret')
            if [[ "$open" == *" $path "* ]]; then
                [ "$none" != 401 ] || fail "$method $path is open but answered 401 without the key"
            else
                [ "$none" = 401 ] || fail "$method $path without the key: $none, expected 401"
                [ "$wrong" = 401 ] || fail "$method $path with a wrong key: $wrong, expected 401"
            fi
            [ "$good" != 401 ] && [ "$good" != 000 ] ||
                fail "$method $path with the key: $good"
            passed=$((passed + 3))
        done
    done
}

start_server --api-key sekret --served-model-name tiny --max-model-len 4096
matrix /health
# The 401 is OpenAI's error shape, with the challenge header.
curl -s -D "$TMP/h" -o "$TMP/b" "$BASE/tokenize" -d '{"prompt":"hi"}'
grep -q '"type":"authentication_error"' "$TMP/b" || fail "401 body: $(cat "$TMP/b")"
grep -qi '^www-authenticate: Bearer' "$TMP/h" || fail "401 without WWW-Authenticate"
# A lower-case scheme is accepted (RFC 9110: the scheme is case-insensitive).
[ "$(status GET /version -H 'authorization: bearer sekret')" = 200 ] || fail "'bearer' refused"
passed=$((passed + 3))
stop_server

start_server --api-key sekret --metrics-no-auth --served-model-name tiny --max-model-len 4096
matrix /health /metrics
[ "$(status GET /metrics)" = 200 ] || fail "--metrics-no-auth: GET /metrics without the key"
passed=$((passed + 1))
stop_server
echo "test_server_auth: $passed passed, 0 failed"
