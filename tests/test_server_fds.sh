#!/usr/bin/env bash
# Descriptor exhaustion (issue 18). Under `ulimit -n 64`, 150 idle connections exhaust the server's
# descriptors: accept() must pause instead of spinning (little CPU, the warning logged once), /health
# must still answer within 1 s during the attack (src/server/overflow.c; other requests get 503 with
# Retry-After), and once the connections close the server must answer /health within 1 s. With --max-connections 5 the
# server holds at most 5 connections (the rest wait in the listen queue) and recovers the same way.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
passed=0

# Every route answers again (not the 503 given at the limit) within 2 s: evhttp takes accepting
# back within its retry interval (100 ms) once descriptors are free.
recovered() {
    for _ in $(seq 1 20); do
        [ "$(curl -s --max-time 1 -o /dev/null -w '%{http_code}' "$BASE/v1/models")" = 200 ] && return 0
        sleep 0.1
    done
    return 1
}
cpu_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
sockets() { find "/proc/$SERVER_PID/fd" -lname 'socket:*' 2>/dev/null | wc -l; }

REAL_BIN=$BIN
cat >"$TMP/lowfd.sh" <<EOS
#!/usr/bin/env bash
ulimit -n 64 || exit 1
exec "$REAL_BIN" "\$@"
EOS
chmod +x "$TMP/lowfd.sh"
BIN="$TMP/lowfd.sh"
start_server --served-model-name tiny --max-model-len 4096 --timeout-keep-alive 60
BIN=$REAL_BIN

node "$SRC/tests/node/hold_connections.mjs" "$PORT" 150 6 >"$TMP/held" &
holder=$!
for _ in $(seq 1 300); do [ -s "$TMP/held" ] && break; sleep 0.1; done
sleep 0.5
t0=$(cpu_ticks)
sleep 2
t1=$(cpu_ticks)
ticks=$((t1 - t0))
hz=$(getconf CLK_TCK)
# A spinning accept loop burns a whole core (2 s = 2 * hz ticks); a paused one next to nothing.
[ "$ticks" -le $((hz / 2)) ] || fail "the server used $ticks ticks (hz $hz) in 2 s at the descriptor limit"
n_warn=$(grep -c "accept: Too many open files" "$SERVER_LOG")
grep -q "accept: Too many open files" "$SERVER_LOG" || fail "no accept warning at the descriptor limit"
# Once per pause: the holder's connections arrive over time while the overflow path turns surplus
# ones away, so with two event loops a pause can end and start again ("accepting connections
# again" between two warnings; a loaded CI box logged 2). A warning per accept attempt would be
# thousands in these 2 s.
[ "$n_warn" -le 3 ] || fail "the accept warning was logged $n_warn times, expected one per pause"
passed=$((passed + 3))
# During the attack: /health within 1 s (three probes), and a request to another route refused with
# 503, not left waiting in the listen queue.
for i in 1 2 3; do
    curl -sf --max-time 1 "$BASE/health" >/dev/null || fail "/health did not answer within 1 s during the attack (probe $i)"
done
code=$(curl -s --max-time 1 -o "$TMP/busy" -w '%{http_code}' "$BASE/v1/models")
[ "$code" = 503 ] || fail "/v1/models during the attack: status $code, expected 503"
grep -q '"error"' "$TMP/busy" || fail "the 503 during the attack is not an OpenAI error"
passed=$((passed + 2))
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
t0=$(date +%s%N)
curl -sf --max-time 1 "$BASE/health" >/dev/null || fail "/health did not answer within 1 s after the connections closed"
recovered || fail "other routes still refused 2 s after the connections closed"
passed=$((passed + 2))
stop_server

start_server --served-model-name tiny --max-model-len 4096 --max-connections 5 --timeout-keep-alive 60
base_sockets=$(sockets)
node "$SRC/tests/node/hold_connections.mjs" "$PORT" 20 6 >"$TMP/held2" &
holder=$!
for _ in $(seq 1 300); do [ -s "$TMP/held2" ] && break; sleep 0.1; done
sleep 0.5
# The overflow path (overflow.c) briefly holds one more socket while it drains an idle connection
# from the listen queue (at most 50 ms each), so one sample can read N + 1: the least of several
# samples counts what evhttp holds, which stays for the whole hold.
now=$(sockets)
for _ in $(seq 1 8); do
    sleep 0.15
    s=$(sockets)
    [ "$s" -lt "$now" ] && now=$s
done
[ $((now - base_sockets)) -le 5 ] || fail "--max-connections 5: the server holds $((now - base_sockets)) connections"
[ $((now - base_sockets)) -ge 3 ] || fail "--max-connections 5: only $((now - base_sockets)) connections accepted"
grep -q "accept: Too many open files" "$SERVER_LOG" || fail "--max-connections: no pause logged"
curl -sf --max-time 1 "$BASE/health" >/dev/null || fail "--max-connections: /health did not answer within 1 s while at the limit"
passed=$((passed + 4))
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
curl -sf --max-time 1 "$BASE/health" >/dev/null || fail "--max-connections: /health did not answer within 1 s after the connections closed"
recovered || fail "--max-connections: other routes still refused 2 s after the connections closed"
grep -q "accept: accepting connections again" "$SERVER_LOG" || fail "no resume logged"
passed=$((passed + 3))
stop_server
echo "test_server_fds: $passed passed, 0 failed"
