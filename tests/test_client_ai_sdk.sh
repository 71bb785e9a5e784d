#!/usr/bin/env bash
# The Vercel AI SDK (ai, @ai-sdk/openai) against the server, without and with --api-key.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules ai @ai-sdk/openai zod
run_client_suite client_ai_sdk.mjs
