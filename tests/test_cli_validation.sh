#!/usr/bin/env bash
# Hostile and mistaken command lines (issue 18): each exits non-zero (2) before any work, with one
# line that names the option or the problem, and a hint to see --help.
set -uo pipefail
BIN=${1:?usage: $0 path/to/gptoss [source dir]}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
passed=0

# refused WHAT FRAGMENT command-args...
refused() {
    local what=$1 frag=$2
    shift 2
    local rc=0
    timeout 30 "$BIN" "$@" >"$TMP/out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "$what: exit code $rc, expected 2: $(head -3 "$TMP/out")"
    [ "$(wc -l <"$TMP/out")" -eq 1 ] || fail "$what: $(wc -l <"$TMP/out") lines: $(head -5 "$TMP/out")"
    grep -qF -- "$frag" "$TMP/out" || fail "$what: no '$frag' in: $(cat "$TMP/out")"
    grep -qF -- "--help" "$TMP/out" || fail "$what: no hint to see --help: $(cat "$TMP/out")"
    passed=$((passed + 1))
}

M=(--model synthetic:tiny)
refused "generate --max-tokens 0" "--max-tokens" generate "${M[@]}" --prompt-ids 1 --max-tokens 0
refused "generate --logprobs 1000" "--logprobs" generate "${M[@]}" --prompt-ids 1 --logprobs 1000
refused "generate --prompt-logprobs 21" "--prompt-logprobs" generate "${M[@]}" --prompt-ids 1 --prompt-logprobs 21
refused "generate --prompt-ids 1,2," "--prompt-ids" generate "${M[@]}" --prompt-ids 1,2,
refused "generate --prompt-ids 1,,2" "--prompt-ids" generate "${M[@]}" --prompt-ids 1,,2
refused "generate --prompt-ids and --prompt" "one prompt" generate "${M[@]}" --prompt-ids 1 --prompt hi
refused "generate --chat and --prompts-file" "one prompt" generate "${M[@]}" --chat hi --prompts-file x.jsonl
refused "generate --prompt twice" "one prompt" generate "${M[@]}" --prompt a --prompt b
refused "generate unknown option" "unknown option '--frobnicate'" generate "${M[@]}" --frobnicate
refused "generate without a prompt" "--model and a prompt" generate "${M[@]}"
refused "serve --served-model-name ''" "--served-model-name" serve "${M[@]}" --served-model-name ''
refused "serve --api-key ''" "--api-key" serve "${M[@]}" --api-key ''
refused "serve unknown option" "unknown option '--no-such-flag'" serve "${M[@]}" --no-such-flag
refused "serve --port 70000" "--port" serve "${M[@]}" --port 70000
echo "test_cli_validation: $passed passed, 0 failed"
