# Sourced (after server_harness.sh) by the client-suite tests (tests/test_client_*.sh):
#   need_node_modules PKG...     the npm packages the suite imports (scripts/setup.sh installs them);
#                                missing: skipped (77) on a developer's machine, a failure under CI
#                                (CI=true), where setup.sh must have installed them
#   run_client_suite FILE.mjs [serve options...]
#                                runs tests/node/FILE twice, against a server without --api-key and
#                                one with it (then every route but /health needs the key)
need_node_modules() {
    for p in "$@"; do
        if [ ! -d "$SRC/tests/node/node_modules/$p" ]; then
            [ "${CI:-}" = true ] && fail "npm package $p is missing (scripts/setup.sh runs npm ci)"
            echo "SKIP: npm package $p is missing (run scripts/setup.sh)"
            exit 77
        fi
    done
}

run_client_suite() {
    local suite=$1 key
    shift
    for key in "" sekret; do
        start_server --served-model-name tiny --max-model-len 4096 ${key:+--api-key "$key"} "$@"
        BASE=$BASE API_KEY=$key MODEL=tiny SANITIZED=$SANITIZED node "$SRC/tests/node/$suite" ||
            fail "$suite failed ($([ -n "$key" ] && echo with || echo without) --api-key)"
        stop_server
    done
}
