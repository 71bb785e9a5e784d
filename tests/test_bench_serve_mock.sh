#!/usr/bin/env bash
# gptoss bench serve against a mock OpenAI server (tests/node/bench_mock_server.js) whose timing is
# known: a sweep 1→64 with no failure, vLLM's key names, exact token counts (ignore_eos: output =
# the requested lengths; input = the prompt lengths the server received), TPOT ≈ the mock's
# inter-token delay, keep-alive reuse; then bundled chunks (a stream interval: ITL is per chunk, TPOT
# per token), a server without usage, the chat endpoint, injected failures (exit 1, the first error
# printed) and an unreachable server.
set -uo pipefail
BIN=${1:?usage: $0 path/to/gptoss [source dir]}
SRC=${2:-$(cd "$(dirname "$0")/.." && pwd)}
command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
TMP=$(mktemp -d)
MOCK_PID=
cleanup() {
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}

# start_mock [mock options...]: sets MOCK_PID and URL
start_mock() {
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null && wait "$MOCK_PID" 2>/dev/null
    MOCK_PID=
    local port= attempt rc why=
    # Up to three tries of up to 60 s each: under a loaded CI machine (the ASan build runs tests in
    # parallel) node itself can take several seconds to start, and once a CI run saw it exit at
    # start with no output at all; a mock that died is retried and its exit status reported.
    for attempt in 1 2 3; do
        node "$SRC/tests/node/bench_mock_server.js" "$@" >"$TMP/mock.log" 2>&1 &
        MOCK_PID=$!
        for _ in $(seq 1 1200); do
            grep -q "^listening [0-9]" "$TMP/mock.log" 2>/dev/null && break
            kill -0 "$MOCK_PID" 2>/dev/null || break
            sleep 0.05
        done
        port=$(awk '/^listening [0-9]/ {print $2}' "$TMP/mock.log")
        [ -n "$port" ] && break
        kill "$MOCK_PID" 2>/dev/null
        wait "$MOCK_PID" 2>/dev/null
        rc=$?
        why="$why [try $attempt: exit status $rc, output: $(cat "$TMP/mock.log")]"
        MOCK_PID=
        echo "note: the mock server did not start on try $attempt (exit status $rc); retrying" >&2
    done
    [ -n "$port" ] || fail "the mock server did not start:$why"
    URL="http://127.0.0.1:$port"
}
stats() { curl -s "$URL/stats" >"$TMP/stats.json" || fail "GET /stats"; }
check() { node "$SRC/tests/node/bench_check_results.js" "$1" "$TMP/stats.json" "$2" || fail "$3"; }

# 1. The InferenceMAX sweep 1→64 (10·C prompts, 2·C warm-ups), model from GET /v1/models.
start_mock --ttft-ms 20 --itl-ms 4
"$BIN" bench serve --url "$URL" --isl 64 --osl 32 --concurrency 1,2,4,8,16,32,64 --num-gpus 2 \
    --output-json "$TMP/sweep.json" --no-progress >"$TMP/sweep.out" 2>&1 || { rc=$?; cat "$TMP/sweep.out"; fail "sweep exit $rc"; }
grep -q "============ Serving Benchmark Result ============" "$TMP/sweep.out" || fail "no vLLM-style result block"
grep -q "^Failed requests: *0 " "$TMP/sweep.out" || fail "no 'Failed requests: 0' line"
stats
check "$TMP/sweep.json" '{"concurrency":[1,2,4,8,16,32,64],"itlMs":4,"ttftMs":20,"isl":64,"osl":32,"tokensPerChunk":1,
    "warmupsPerC":2,"promptsPerC":10,"numGpus":2,"model":"mock-model","checkReuse":true}' "sweep 1..64"

# 2. Four tokens per chunk (a server's --stream-interval 4): ITL is one sample per chunk, TPOT per token.
start_mock --ttft-ms 20 --itl-ms 4 --tokens-per-chunk 4
"$BIN" bench serve --url "$URL/v1" --model m --isl 32 --osl 32 --concurrency 4 --num-prompts 16 --num-warmups 2 \
    --output-json "$TMP/chunk.json" --no-progress >"$TMP/chunk.out" 2>&1 || { cat "$TMP/chunk.out"; fail "chunked run"; }
stats
check "$TMP/chunk.json" '{"concurrency":[4],"itlMs":4,"ttftMs":20,"isl":32,"osl":32,"tokensPerChunk":4,
    "numWarmups":2,"numPrompts":16,"model":"m"}' "four tokens per chunk"

# 3. A server that sends no usage chunk: output tokens are the chunks counted.
start_mock --ttft-ms 10 --itl-ms 3 --no-usage
"$BIN" bench serve --url "$URL" --model m --isl 16 --osl 24 --concurrency 3 --num-prompts 9 \
    --output-json "$TMP/nousage.json" --no-progress >"$TMP/nousage.out" 2>&1 || { cat "$TMP/nousage.out"; fail "no usage"; }
stats
check "$TMP/nousage.json" '{"concurrency":[3],"itlMs":3,"ttftMs":10,"isl":16,"osl":24,"tokensPerChunk":1,
    "warmupsPerC":2,"numPrompts":9}' "no usage chunk"

# 4. The chat endpoint (text prompts; the mock counts words as its prompt tokens and reports them).
start_mock --ttft-ms 10 --itl-ms 3
"$BIN" bench serve --url "$URL" --endpoint chat --isl 40 --osl 16 --concurrency 2 --num-prompts 6 \
    --output-json "$TMP/chat.json" --no-progress >"$TMP/chat.out" 2>&1 || { cat "$TMP/chat.out"; fail "chat"; }
stats
check "$TMP/chat.json" '{"concurrency":[2],"itlMs":3,"ttftMs":10,"isl":40,"osl":16,"tokensPerChunk":1,
    "warmupsPerC":2,"numPrompts":6,"chat":true}' "chat endpoint"

# 5. Failures are counted and reported, never silent: exit 1, the count and the first error.
start_mock --ttft-ms 5 --itl-ms 1 --fail-every 5
"$BIN" bench serve --url "$URL" --model m --isl 8 --osl 8 --concurrency 4 --num-prompts 20 --num-warmups 0 \
    --output-json "$TMP/fail.json" --no-progress >"$TMP/fail.out" 2>&1
rc=$?
[ "$rc" = 1 ] || { cat "$TMP/fail.out"; fail "injected failures: exit $rc, expected 1"; }
grep -q "FAILED: 4 of 20 requests failed; the first error: HTTP 500: .*injected failure" "$TMP/fail.out" ||
    { cat "$TMP/fail.out"; fail "no failure report"; }
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1]))[0];
    if (r.failed !== 4 || r.completed !== 16) { console.error(r); process.exit(1); }' "$TMP/fail.json" ||
    fail "failed/completed in the JSON"

# 6. Connections the server closes: after every third response with Connection: close (not reused),
#    and silently after every fifth (the keep-alive race: the next request must be resent).
start_mock --ttft-ms 5 --itl-ms 1 --close-every 3 --drop-every 5
"$BIN" bench serve --url "$URL" --model m --isl 8 --osl 8 --concurrency 1,4,4,8 --prompts-per-concurrency 4 \
    --output-json "$TMP/close.json" --no-progress >"$TMP/close.out" 2>&1 || { cat "$TMP/close.out"; fail "closing server"; }
stats
check "$TMP/close.json" '{"concurrency":[1,4,4,8],"isl":8,"osl":8,"warmupsPerC":2,"promptsPerC":4}' \
    "a server that closes connections"

# 7. Nothing listening: a clear error, exit 1.
kill "$MOCK_PID" && wait "$MOCK_PID" 2>/dev/null
MOCK_PID=
"$BIN" bench serve --url "$URL" --model m --isl 8 --osl 8 --concurrency 2 --no-progress >"$TMP/down.out" 2>&1
rc=$?
[ "$rc" = 1 ] || fail "unreachable server: exit $rc"
grep -q "every warm-up request failed.*127.0.0.1" "$TMP/down.out" || { cat "$TMP/down.out"; fail "unreachable: message"; }

# 8. Bad options.
"$BIN" bench serve --isl 8 >/dev/null 2>&1
[ $? = 2 ] || fail "missing --url must exit 2"
"$BIN" bench serve --url "$URL" --concurrency 4,x >/dev/null 2>&1
[ $? = 2 ] || fail "bad --concurrency must exit 2"
"$BIN" bench serve --url https://x >/dev/null 2>&1
[ $? = 1 ] || fail "https must be refused"
echo "ok: bench serve against the mock server"
