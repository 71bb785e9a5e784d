#!/usr/bin/env bash
# The OpenAI Agents SDK (@openai/agents) against the server, without and with --api-key.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules @openai/agents openai7 zod
run_client_suite client_agents.mjs
