#!/usr/bin/env bash
# The OpenAI Agents SDK (@openai/agents) against the server, without and with --api-key.
# slow: not in `make asan`. These suites check what third-party clients make of the protocol, which
# a sanitizer does not change; the server's code paths they reach run under ASan in the C tests and
# test_server_openai.
# ctest-labels: slow
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules @openai/agents openai7 zod
run_client_suite client_agents.mjs
