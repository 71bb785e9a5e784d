#!/usr/bin/env bash
# Long run of the HTTP fuzzer (tests/node/http_fuzz.mjs) against `gptoss serve --model synthetic:tiny`:
#   scripts/fuzz_http.sh [requests] [build dir] [report.json]
# (defaults: 1000000, build-asan, fuzz-report.json). Build the sanitized server first:
#   cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGPTOSS_SANITIZE=ON -DGPTOSS_CUDA=OFF
#   cmake --build build-asan --target gptoss
# For the long runs, an optimised sanitized build whose CPU-model dot products skip ASan's load
# checks (everything else instrumented; src/backend/cpu/ops.c says why) and LIGHT=1 (mostly
# one-token generations, tests/node/http_fuzz.mjs) run ~123 requests/s on 2 cores against ~9
# (then the sampler, instrumented, and the fuzzer itself are most of the time):
#   cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPTOSS_SANITIZE=ON \
#         -DGPTOSS_SANITIZE_MATH=OFF -DGPTOSS_CUDA=OFF
#   LIGHT=1 scripts/fuzz_http.sh 1000000 build-fuzz
# A request unanswered after HANG_S seconds (600) counts as a hang: on a loaded machine a sanitized
# build can take minutes for a long prompt. Prints progress every 60 s; at the end the fuzzer's report (statuses, hangs, failures, RSS samples)
# is in the report file, the server log beside it (.log), and this script fails on any finding:
# a failed check, a sanitizer report, or a server that does not drain and exit 0.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=${1:-1000000}
bin=${2:-$root/build-asan}/gptoss
report=${3:-fuzz-report.json}
log=${report%.json}.log
key=fuzz-key
"$bin" serve --model synthetic:tiny --served-model-name tiny --max-model-len 256 \
    --max-request-bytes 65536 --api-key "$key" --host 127.0.0.1 --port 0 --stats-interval 60 >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "ready: http" "$log" && break; sleep 0.1; done
port=$(grep -o 'listening on http://[^ ]*' "$log" | head -1 | sed 's/.*://')
[ -n "$port" ] || { echo "the server did not start"; kill "$pid"; exit 1; }
PORT=$port N=$n CONC=${CONC:-8} SEED=${SEED:-1} LIGHT=${LIGHT:-0} SERVER_PID=$pid API_KEY=$key MAX_BODY=65536 \
    HANG_S=${HANG_S:-600} PROGRESS_S=60 REPORT=$report node "$root/tests/node/http_fuzz.mjs"
rc=$?
kill -TERM "$pid"
wait "$pid"
src=$?
[ "$src" -eq 0 ] || { echo "the server exited with $src"; rc=1; }
if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$log"; then
    echo "sanitizer reports:"
    grep -E "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$log" | head
    rc=1
fi
exit $rc
