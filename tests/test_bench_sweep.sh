#!/usr/bin/env bash
# gptoss bench sweep: the in-process sweep on the CPU backend with the tiny synthetic model — every
# request finishes with exactly the tokens it asked for, the JSON has the same keys as bench serve's —
# and a backend missing from the build is refused with a clear message.
set -uo pipefail
BIN=${1:?usage: $0 path/to/gptoss [source dir]}
SRC=${2:-$(cd "$(dirname "$0")/.." && pwd)}
command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
# One OpenMP thread: on a small shared CI box, spinning OpenMP workers against the engine thread make
# the timing (and the test's run time) erratic; the tiny model needs no parallelism.
export OMP_NUM_THREADS=1

"$BIN" bench sweep --model synthetic:tiny --isl 24 --osl 8 --concurrency 1,4 --prompts-per-concurrency 5 \
    --warmups-per-concurrency 1 --output-json "$TMP/s.json" --no-progress >"$TMP/out" 2>&1 || { rc=$?; cat "$TMP/out"; fail "sweep exit $rc"; }
grep -q "============ Serving Benchmark Result ============" "$TMP/out" || fail "no result block"
node - "$TMP/s.json" "$SRC/tests/node/bench_check_results.js" <<'EOF' || fail "sweep results"
const r = JSON.parse(require('fs').readFileSync(process.argv[2], 'utf8'));
const bad = (m) => { console.error('FAIL: ' + m); process.exit(1); };
if (!Array.isArray(r) || r.length !== 2) bad('two levels expected');
r.forEach((x, k) => {
    const C = [1, 4][k], n = 5 * C;
    if (x.max_concurrency !== C || x.num_prompts !== n || x.completed !== n || x.failed !== 0) bad(`level ${C}: ${JSON.stringify(x)}`);
    // ignore_eos: every request got exactly max_tokens (never fewer: short_outputs; never more: the engine
    // stops at max_tokens), and the sums match what was asked.
    if (x.short_outputs !== 0) bad(`level ${C}: ${x.short_outputs} requests came back short`);
    if (x.total_output_tokens !== x.expected_output_tokens || x.total_input_tokens !== x.expected_input_tokens)
        bad(`level ${C}: tokens ${x.total_input_tokens}/${x.total_output_tokens}, asked ${x.expected_input_tokens}/${x.expected_output_tokens}`);
    if (x.total_output_tokens < n * 6 || x.total_output_tokens > n * 8) bad(`level ${C}: output ${x.total_output_tokens}`);
    if (x.total_input_tokens < n * 19 || x.total_input_tokens > n * 24) bad(`level ${C}: input ${x.total_input_tokens}`);
    if (!(x.median_tpot_ms > 0 && x.median_ttft_ms > 0 && x.mean_itl_ms > 0 && x.median_e2el_ms > x.median_ttft_ms)) bad(`level ${C}: timings`);
    if (x.backend !== 'gptoss-engine' || x.model_id !== 'synthetic:tiny' || x.base_url !== null) bad(`level ${C}: meta`);
    for (const k of ['mean_ttft_ms', 'p99_tpot_ms', 'p90_itl_ms', 'median_e2el_ms', 'total_token_throughput', 'duration'])
        if (typeof x[k] !== 'number') bad(`level ${C}: ${k}`);
});
console.log('ok: sweep JSON');
EOF

# A backend that is not in this build.
out=$("$BIN" bench sweep --model synthetic:tiny --backend nosuch --concurrency 1 2>&1)
[ $? = 2 ] && grep -q "unknown backend" <<<"$out" || fail "unknown backend: $out"
help=$("$BIN" bench sweep --help)
grep -q cuda <<<"$help" || fail "help"
out=$("$BIN" bench sweep --model synthetic:nope --concurrency 1 --isl 4 --osl 2 2>&1)
[ $? = 1 ] && grep -q "nope" <<<"$out" || fail "bad preset: $out"
echo "ok: bench sweep"
