#!/usr/bin/env bash
# The server's routes with curl: health, models, version, tokenize/detokenize, completions (plain and
# streamed), the metric names, and the 404/405/401/413 answers; then a SIGTERM drain.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"

passed=0
# expect STATUS DESCRIPTION curl-args... : the body lands in $TMP/body
expect() {
    local want=$1 what=$2
    shift 2
    local got
    got=$(curl -s -o "$TMP/body" -w '%{http_code}' --max-time 60 "$@")
    [ "$got" = "$want" ] || fail "$what: status $got, expected $want; body: $(head -c 400 "$TMP/body")"
    passed=$((passed + 1))
}
body_has() {
    grep -q -- "$1" "$TMP/body" || fail "$2: body lacks '$1': $(head -c 400 "$TMP/body")"
    passed=$((passed + 1))
}
json() { node -e "const b=JSON.parse(require('fs').readFileSync('$TMP/body','utf8')); process.stdout.write(String($1))"; }

start_server --api-key sekret --served-model-name tiny --max-model-len 4096
AUTH=(-H "Authorization: Bearer sekret")

expect 200 "health" "$BASE/health"
body_has '"status":"ok"' "health"
expect 200 "version" "${AUTH[@]}" "$BASE/version"
body_has '"version"' "version"

expect 200 "models" "${AUTH[@]}" "$BASE/v1/models"
[ "$(json 'b.data[0].id')" = tiny ] || fail "models: id"
[ "$(json 'b.data[0].max_model_len')" = 4096 ] || fail "models: max_model_len"
[ "$(json 'b.object')" = list ] || fail "models: object"
# GET /v1/models/{id}: the same object as in the list; an unknown id is OpenAI's 404.
cp "$TMP/body" "$TMP/list"
expect 200 "models/tiny" "${AUTH[@]}" "$BASE/v1/models/tiny"
node -e "const f=require('fs'),l=JSON.parse(f.readFileSync('$TMP/list')),m=JSON.parse(f.readFileSync('$TMP/body'));
  if (JSON.stringify(l.data[0]) !== JSON.stringify(m)) throw new Error('differs: ' + JSON.stringify(m))" ||
    fail "models/tiny is not the list's object"
[ "$(json 'b.object + b.id + b.owned_by + b.permission[0].object')" = modeltinygptossmodel_permission ] ||
    fail "models/tiny: $(cat "$TMP/body")"
expect 404 "models/unknown" "${AUTH[@]}" "$BASE/v1/models/gpt-5"
[ "$(json 'b.error.code + " " + b.error.param + " " + b.error.type')" = \
    "model_not_found model invalid_request_error" ] || fail "models/unknown: $(cat "$TMP/body")"
body_has 'The model `gpt-5` does not exist.' "models/unknown message"
expect 404 "models/ (no id) is no route" "${AUTH[@]}" "$BASE/v1/models/"
body_has 'no route for /v1/models/' "models/ message"
expect 401 "models/tiny needs the key" "$BASE/v1/models/tiny"
expect 405 "POST models/tiny" "${AUTH[@]}" -d '{}' "$BASE/v1/models/tiny"

expect 200 "tokenize" "${AUTH[@]}" -d '{"prompt":"Hello world"}' "$BASE/tokenize"
[ "$(json 'b.tokens.join(",")')" = "13225,2375" ] || fail "tokenize: tokens $(cat "$TMP/body")"
[ "$(json 'b.count')" = 2 ] || fail "tokenize: count"
[ "$(json 'b.max_model_len')" = 4096 ] || fail "tokenize: max_model_len"
expect 200 "detokenize" "${AUTH[@]}" -d '{"tokens":[13225,2375]}' "$BASE/detokenize"
[ "$(json 'b.prompt')" = "Hello world" ] || fail "detokenize: $(cat "$TMP/body")"
expect 400 "detokenize: id out of range" "${AUTH[@]}" -d '{"tokens":[-1]}' "$BASE/detokenize"
expect 400 "tokenize: prompt not a string" "${AUTH[@]}" -d '{"prompt":5}' "$BASE/tokenize"

# Completions, not streamed: the tiny model's tokens are random, so only shapes and counts are checked.
expect 200 "completions" "${AUTH[@]}" -H 'Content-Type: application/json' \
    -d '{"model":"tiny","prompt":"Hello","max_tokens":5,"ignore_eos":true}' "$BASE/v1/completions"
[ "$(json 'b.object')" = text_completion ] || fail "completions: object"
[ "$(json 'b.usage.completion_tokens')" = 5 ] || fail "completions: completion_tokens"
[ "$(json 'b.usage.prompt_tokens')" = 1 ] || fail "completions: prompt_tokens"
[ "$(json 'b.choices[0].finish_reason')" = length ] || fail "completions: finish_reason"
[ "$(json 'b.id.startsWith("cmpl-")')" = true ] || fail "completions: id"

# Token-id prompt.
expect 200 "completions: token ids" "${AUTH[@]}" -d '{"prompt":[200006,1428],"max_tokens":2,"ignore_eos":true}' \
    "$BASE/v1/completions"
[ "$(json 'b.usage.prompt_tokens')" = 2 ] || fail "completions: token-id prompt_tokens"

# Streamed: SSE events, usage chunk, [DONE].
expect 200 "completions: stream" "${AUTH[@]}" -N \
    -d '{"prompt":"Hello","max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}' \
    "$BASE/v1/completions"
[ "$(grep -c '^data: {' "$TMP/body")" -ge 3 ] || fail "stream: too few events: $(cat "$TMP/body")"
grep -q '^data: \[DONE\]' "$TMP/body" || fail "stream: no [DONE]"
grep -q '"usage":{"prompt_tokens":1,"completion_tokens":4' "$TMP/body" || fail "stream: usage chunk"
curl -s -D "$TMP/headers" -o /dev/null "${AUTH[@]}" -d '{"prompt":"Hi","max_tokens":1,"stream":true}' "$BASE/v1/completions"
grep -qi '^content-type: text/event-stream' "$TMP/headers" || fail "stream: content type"

# Metrics: vLLM's names with the model_name label.
expect 200 "metrics" "${AUTH[@]}" "$BASE/metrics"
for name in 'vllm:num_requests_running{model_name="tiny"}' 'vllm:num_requests_waiting{' 'vllm:kv_cache_usage_perc{' \
    'vllm:prompt_tokens_total{' 'vllm:generation_tokens_total{' 'vllm:prefix_cache_queries_total{' \
    'vllm:prefix_cache_hits_total{' 'vllm:num_preemptions_total{' \
    'vllm:request_success_total{model_name="tiny",finished_reason="length"}' \
    'vllm:time_to_first_token_seconds_bucket{' 'vllm:inter_token_latency_seconds_bucket{' \
    'vllm:e2e_request_latency_seconds_count{' 'vllm:request_queue_time_seconds_sum{' \
    '# TYPE vllm:generation_tokens counter' '# TYPE vllm:e2e_request_latency_seconds histogram'; do
    body_has "$name" "metrics"
done
gen=$(grep '^vllm:generation_tokens_total' "$TMP/body" | awk '{print $2}')
[ "$gen" -ge 12 ] || fail "metrics: generation_tokens_total = $gen"

# Errors, in OpenAI's shape.
expect 404 "unknown route" "${AUTH[@]}" "$BASE/v2/nothing"
body_has '"error"' "404 body"
expect 405 "GET on a POST route" "${AUTH[@]}" "$BASE/v1/completions"
expect 405 "DELETE on a GET route" -X DELETE "$BASE/health"
expect 401 "no key" -d '{"prompt":"a"}' "$BASE/v1/completions"
body_has '"type":"authentication_error"' "401 body"
expect 401 "wrong key" -H "Authorization: Bearer nope" -d '{"prompt":"a"}' "$BASE/v1/completions"
expect 401 "models need the key too" "$BASE/v1/models"
expect 401 "metrics need the key (without --metrics-no-auth)" "$BASE/metrics"
expect 400 "malformed JSON" "${AUTH[@]}" -d '{"prompt":' "$BASE/v1/completions"
body_has '"message"' "400 body"
expect 400 "negative max_tokens" "${AUTH[@]}" -d '{"prompt":"a","max_tokens":-1}' "$BASE/v1/completions"
expect 404 "unknown model" "${AUTH[@]}" -d '{"model":"gpt-5","prompt":"a"}' "$BASE/v1/completions"
head -c $((40 << 20)) /dev/zero >"$TMP/big"
expect 413 "40 MB body" "${AUTH[@]}" --data-binary @"$TMP/big" "$BASE/v1/completions"
expect 200 "health after the errors" "$BASE/health"

# The periodic stats line (every second in tests) appeared while requests ran.
grep -q "Avg prompt throughput: .* tokens/s, Avg generation throughput: .* Running: .* reqs, Waiting: .* reqs, GPU KV cache usage: .*%, Prefix cache hit rate: .*%" "$SERVER_LOG" ||
    { sleep 1.5; grep -q "Avg generation throughput" "$SERVER_LOG"; } || fail "no stats log line"
passed=$((passed + 1))

stop_server
passed=$((passed + 1))

# A full waiting queue answers 429: one sequence runs, one may wait, the rest are refused.
start_server --max-num-seqs 1 --max-waiting-requests 1 --max-model-len 4096 --shutdown-timeout 0 \
    --timeout-keep-alive 1
pids=()
for i in 1 2 3 4 5 6; do
    curl -s -o /dev/null -w '%{http_code}\n' --max-time 60 \
        -d '{"prompt":"Hello","max_tokens":40,"ignore_eos":true}' "$BASE/v1/completions" >>"$TMP/codes" &
    pids+=($!)
done
wait "${pids[@]}"
grep -q 429 "$TMP/codes" || fail "no 429 with --max-waiting-requests 1: $(sort "$TMP/codes" | uniq -c | tr '\n' ' ')"
grep -q 200 "$TMP/codes" || fail "no request succeeded with --max-waiting-requests 1"
passed=$((passed + 1))

# A stream that waits in the queue longer than --timeout-keep-alive (1 s here) for its first token
# is not an idle connection: it must not be cut. A long stream holds the only slot until its client
# hangs up after 2.5 s (whatever the machine's speed); then the queued one runs and must finish.
curl -sN --max-time 120 -d '{"prompt":"Hi","max_tokens":4000,"ignore_eos":true,"stream":true}' \
    "$BASE/v1/completions" >"$TMP/first" &
first=$!
# The queued request must come second: wait for the first one's tokens (it holds the slot).
for _ in $(seq 1 300); do [ -s "$TMP/first" ] && break; sleep 0.1; done
[ -s "$TMP/first" ] || fail "keep-alive: the first stream produced nothing in 30 s"
t0=$(date +%s%N)
curl -sN --max-time 120 -d '{"prompt":"Hi","max_tokens":2,"ignore_eos":true,"stream":true}' \
    "$BASE/v1/completions" >"$TMP/queued" &
queued=$!
sleep 2.5
kill "$first" 2>/dev/null
wait "$first" 2>/dev/null
wait "$queued"
waited=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
grep -q '^data: \[DONE\]' "$TMP/queued" && grep -q '"finish_reason":"length"' "$TMP/queued" ||
    fail "keep-alive: a stream queued for ${waited} s was cut: $(tail -c 300 "$TMP/queued")"
awk -v w="$waited" 'BEGIN { exit !(w > 2) }' || fail "keep-alive: the queued stream finished after ${waited} s, before the first was gone"
passed=$((passed + 2))

stop_server

# SIGTERM drains: a short request in flight finishes normally, a long one is aborted when
# --shutdown-timeout runs out but still gets a proper end ([DONE]), and the exit code is 0.
start_server --max-model-len 4096 --shutdown-timeout $([ "$SANITIZED" = 1 ] && echo 15 || echo 3) \
    --served-model-name openai/gpt-oss-tiny
# A model id with '/' in it, percent-encoded (as SDKs send it) or not.
expect 200 "models/{id} with %2F" "$BASE/v1/models/openai%2Fgpt-oss-tiny"
[ "$(json 'b.id')" = openai/gpt-oss-tiny ] || fail "models/%2F: $(cat "$TMP/body")"
expect 200 "models/{id} with /" "$BASE/v1/models/openai/gpt-oss-tiny"
expect 404 "models/{id}: a prefix of the name is not the name" "$BASE/v1/models/openai"
curl -sN --max-time 60 -d '{"prompt":"Hi","max_tokens":4000,"ignore_eos":true,"stream":true}' \
    "$BASE/v1/completions" >"$TMP/long" &
long=$!
sleep 0.5
curl -s --max-time 60 -d '{"prompt":"Hi","max_tokens":3,"ignore_eos":true}' "$BASE/v1/completions" >"$TMP/short" &
short=$!
sleep 0.2
stop_server
wait $long $short
grep -q '"finish_reason":"abort"' "$TMP/long" || fail "drain: the long request was not aborted: $(tail -c 300 "$TMP/long")"
grep -q '^data: \[DONE\]' "$TMP/long" || fail "drain: the aborted stream did not end with [DONE]"
grep -q '"finish_reason":"length"' "$TMP/short" || fail "drain: the short request did not finish: $(cat "$TMP/short")"
grep -q "draining" "$SERVER_LOG" || fail "drain: no drain in the log"
passed=$((passed + 4))
echo "test_server_basic: $passed passed, 0 failed"
