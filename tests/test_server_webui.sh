#!/usr/bin/env bash
# The built-in chat page's routes: / and /webui/{app.js,app.css} answer without the API key (a
# browser's navigation sends none; the page asks for the key itself), with their content types and
# security headers; every other route still wants the key; --no-webui removes the page (404, or 401
# first under --api-key, like any unknown path). What the page does is test_browser's.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
passed=0

# check EXPECTED METHOD PATH [curl args...]
check() {
    local want=$1 method=$2 path=$3
    shift 3
    local how=(-X "$method")
    [ "$method" = HEAD ] && how=(-I)
    local got
    got=$(curl -s -D "$TMP/h" -o "$TMP/b" -w '%{http_code}' --max-time 30 "${how[@]}" "$@" "$BASE$path")
    [ "$got" = "$want" ] || fail "$method $path $*: $got, expected $want"
    passed=$((passed + 1))
}
header() { grep -qi "^$1: $2"$'\r'"\?$" "$TMP/h" || fail "$3: no '$1: $2' in $(cat "$TMP/h")"; }

start_server --api-key sekret --served-model-name tiny --max-model-len 4096
check 200 GET /
header content-type 'text/html; charset=utf-8' /
header x-content-type-options nosniff /
header x-frame-options DENY /
grep -qi "^content-security-policy: default-src 'none'; script-src 'self'" "$TMP/h" || fail "CSP: $(cat "$TMP/h")"
grep -q '<title>gptoss</title>' "$TMP/b" || fail "/ is not the page"
check 200 HEAD /
check 200 GET /webui/app.js
header content-type 'text/javascript; charset=utf-8' /webui/app.js
grep -q "fetch('/v1/chat/completions'" "$TMP/b" || fail "app.js is not the page's script"
check 200 GET /webui/app.css
header content-type 'text/css; charset=utf-8' /webui/app.css
check 404 GET /webui/other.js
check 401 GET /webui/ # not a part of the page: an unknown path
check 405 POST /
check 401 GET /v1/models
check 401 GET /index.html
stop_server

start_server --no-webui --served-model-name tiny --max-model-len 4096
check 404 GET /
check 404 GET /webui/app.js
check 200 GET /v1/models
stop_server

start_server --no-webui --api-key sekret --served-model-name tiny --max-model-len 4096
check 401 GET /
check 404 GET / -H 'Authorization: Bearer sekret'
check 401 GET /webui/app.js
stop_server
echo "test_server_webui: $passed passed, 0 failed"
