# Sourced by tests/test_server_*.sh: starts `gptoss serve --model synthetic:tiny` on a free loopback
# port (--port 0; the port is read from the log), and stops it at the end (SIGTERM, then the exit
# code must be 0: a clean drain, and under ASan no leak).
#   start_server [serve options...]   sets SERVER_PID, PORT, BASE, SERVER_LOG
#   stop_server                       SIGTERM, wait, fail unless it exited 0
#   server_rss_kb                     the server's VmRSS in kB
# Needs the tokenizer that scripts/setup.sh installs; without it the test is skipped (exit 77).

BIN=${1:?usage: $0 path/to/gptoss [source dir]}
SRC=${2:-$(cd "$(dirname "$0")/.." && pwd)}
TMP=$(mktemp -d)
SERVER_PID=
cache=${GPTOSS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gptoss}
if [ ! -s "$cache/tokenizer/tokenizer.json" ]; then
    echo "SKIP: no tokenizer in $cache (run scripts/setup.sh)"
    exit 77
fi

cleanup_server() {
    if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -KILL "$SERVER_PID" 2>/dev/null
        wait "$SERVER_PID" 2>/dev/null
    fi
    rm -rf "$TMP"
}
trap cleanup_server EXIT

fail() {
    echo "FAIL: $*"
    if [ -n "${SERVER_LOG:-}" ] && [ -f "$SERVER_LOG" ]; then
        echo "--- server log (last 40 lines)"
        tail -40 "$SERVER_LOG"
    fi
    exit 1
}

start_server() {
    SERVER_LOG="$TMP/server.$RANDOM.log"
    # The stats line every second, so tests see it; ASan builds are slower: generous waits.
    "$BIN" serve --model synthetic:tiny --host 127.0.0.1 --port 0 --stats-interval 1 "$@" >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 600); do
        if grep -q "ready: http" "$SERVER_LOG"; then break; fi
        kill -0 "$SERVER_PID" 2>/dev/null || fail "the server exited while starting"
        sleep 0.1
    done
    grep -q "ready: http" "$SERVER_LOG" || fail "the server did not become ready in 60 s"
    PORT=$(grep -o 'listening on http://[^ ]*' "$SERVER_LOG" | head -1 | sed 's/.*://')
    BASE="http://127.0.0.1:$PORT"
}

stop_server() {
    kill -TERM "$SERVER_PID"
    local rc=0
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=
    [ "$rc" -eq 0 ] || fail "the server exited with $rc after SIGTERM"
    grep -q "stopped" "$SERVER_LOG" || fail "no clean stop in the log"
}

server_rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status"; }

# Under ASan/UBSan the server is several times slower: suites scale their work with this.
# (Not `nm | grep -q`: under pipefail grep's early exit can kill nm with SIGPIPE and turn the match
# into a failure. That made CI run the ASan server with the full-size load and fail on time.)
sanitizer_marks=$(nm -an "$BIN" 2>/dev/null; ldd "$BIN" 2>/dev/null)
if grep -qE '__asan_init|libasan' <<<"$sanitizer_marks"; then
    SANITIZED=1
else
    SANITIZED=0
fi
