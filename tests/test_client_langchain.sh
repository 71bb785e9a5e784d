#!/usr/bin/env bash
# LangChain (@langchain/openai) against the server, without and with --api-key.
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules @langchain/openai @langchain/core zod
run_client_suite client_langchain.mjs
