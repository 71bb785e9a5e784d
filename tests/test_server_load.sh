#!/usr/bin/env bash
# Concurrent streaming clients against the tiny model (tests/node/server_load.mjs): all complete,
# RSS stays flat across rounds, and clients that hang up get their KV blocks returned.
# CLIENTS (default 500; 100 under ASan), ROUNDS (3), MAX_TOKENS (2) tune it; the issue's full figure
# is CLIENTS=2000. The CPU backend bounds the run: about 80-100 generated tokens/s on two cores
# whatever the batch (the 201088-row unembedding and the sampler dominate, not the HTTP side), so
# each round costs about CLIENTS * MAX_TOKENS / 80 seconds.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
if [ "$SANITIZED" = 1 ]; then clients=${CLIENTS:-100}; else clients=${CLIENTS:-500}; fi
# Enough descriptors for both ends of every connection.
ulimit -n $((clients * 2 + 1024)) 2>/dev/null || ulimit -n "$(ulimit -Hn)"
start_server --served-model-name tiny --max-model-len 4096 --max-num-seqs 256
PORT=$PORT SERVER_PID=$SERVER_PID CLIENTS=$clients ROUNDS=${ROUNDS:-3} MAX_TOKENS=${MAX_TOKENS:-2} \
    node "$SRC/tests/node/server_load.mjs" || fail "the load suite failed"
stop_server
