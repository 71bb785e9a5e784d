#!/usr/bin/env bash
# openai 7 (npm alias openai7) against the server, without and with --api-key: helpers, stored
# responses, models.retrieve, echo scoring, completions logprobs over 40 seeds.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules openai7
run_client_suite client_openai7.mjs
