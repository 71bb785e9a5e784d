#!/usr/bin/env bash
# Headless Chromium (Debian's chromium, driven by puppeteer-core) against the server, without and
# with --api-key: the built-in chat page at /, and the openai SDK in a page from another origin
# (CORS). tests/node/browser_webui.mjs. Under CI (CI=true) a missing Chromium is a failure: setup.sh
# installs it, so its absence means the setup broke, not that the test does not apply.
# slow: not in `make asan`. These suites check what third-party clients make of the protocol, which
# a sanitizer does not change; the server's code paths they reach run under ASan in the C tests and
# test_server_openai.
# ctest-labels: slow
set -uo pipefail
source "$(dirname "$0")/node/server_harness.sh"
source "$SRC/tests/node/client_harness.sh"
need_node_modules puppeteer-core openai openai7
CHROMIUM=${CHROMIUM:-$(command -v chromium || true)}
if [ -z "$CHROMIUM" ]; then
    [ "${CI:-}" = true ] && fail "no chromium (scripts/setup.sh installs Debian's chromium)"
    echo "SKIP: no chromium (run scripts/setup.sh)"
    exit 77
fi
export CHROMIUM
run_client_suite browser_webui.mjs
