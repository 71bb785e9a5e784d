#!/usr/bin/env bash
# examples/grafana/gptoss.json against a real /metrics scrape (tests/node/grafana_check.mjs): every
# queried metric and label exists, every exported metric has a panel. Without and with --api-key
# (the scrape then carries the key).
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
export DASHBOARD="$SRC/examples/grafana/gptoss.json"
run_client_suite grafana_check.mjs
