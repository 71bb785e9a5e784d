#!/usr/bin/env bash
# gptoss bench plot: a well-formed SVG holding one line per results file (a marker per level with its
# hover text), the Pareto envelope through exactly the non-dominated points, the roofline, and the
# anchors that match the GPU and the workload (H200 1k/1k by default); errors name the file.
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

# Two configurations at 1k/1k: (concurrency, median TPOT ms, total tok/s, GPUs).
node -e '
const fs = require("fs");
const lvl = (label, c, tpot, tput, gpus) => ({label, max_concurrency: c, median_tpot_ms: tpot, total_token_throughput: tput,
    output_throughput: tput / 2, num_gpus: gpus, isl: 1024, osl: 1024, random_range_ratio: 0.8, completed: 10 * c, failed: 0});
fs.writeFileSync(process.argv[1], JSON.stringify([lvl("ours <TP1>", 1, 4, 450, 1), lvl("ours <TP1>", 4, 5, 1400, 1),
    lvl("ours <TP1>", 16, 8, 3500, 1), lvl("ours <TP1>", 64, 16, 7000, 1), lvl("ours <TP1>", 256, 40, 11000, 1)]));
// TP2: throughput is divided by num_gpus on the chart.
fs.writeFileSync(process.argv[2], JSON.stringify([lvl("other & co", 1, 5, 760, 2), lvl("other & co", 8, 7, 4000, 2),
    lvl("other & co", 64, 20, 12000, 2)]));
' "$TMP/a.json" "$TMP/b.json" || fail "writing the inputs"

"$BIN" bench plot "$TMP/a.json" "$TMP/b.json" --out "$TMP/f.svg" --roofline-model 120b \
    --anchors "$SRC/bench/anchors" --title 'Test <chart> & "quotes"' 2>"$TMP/err" || fail "plot: $(cat "$TMP/err")"
grep -q "wrote .*2 series, 8 points" "$TMP/err" || fail "plot summary: $(cat "$TMP/err")"

node - "$TMP/f.svg" <<'EOF' || fail "the SVG"
const svg = require('fs').readFileSync(process.argv[2], 'utf8');
const bad = (m) => { console.error('FAIL: ' + m); process.exit(1); };
// Well-formed XML: every tag closed in order, attributes quoted, text free of raw < and bare &.
const stack = [];
const re = /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|<\?xml[^>]*\?>/g;
let last = 0, m;
while ((m = re.exec(svg))) {
    const text = svg.slice(last, m.index);
    if (/[<>]/.test(text) || /&(?!(amp|lt|gt|quot|apos);)/.test(text)) bad('bad text before offset ' + m.index + ': ' + text.slice(0, 80));
    last = re.lastIndex;
    if (!m[2]) continue;
    if (m[1]) { if (stack.pop() !== m[2]) bad('mismatched </' + m[2] + '> at ' + m.index); }
    else if (!m[4]) stack.push(m[2]);
}
if (stack.length || svg.slice(last).trim()) bad('unclosed: ' + stack.join(',') + ' / trailing: ' + svg.slice(last, last + 80));
if (!/^<\?xml[^>]*\?>\s*<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/.test(svg)) bad('no svg root');
if (!svg.includes('Test &lt;chart&gt; &amp; &quot;quotes&quot;')) bad('title not escaped');
// One line per file, with a hover title per level (TP2 throughput halved per GPU: 12000 / 2 = 6000).
for (const s of ['ours &lt;TP1&gt;, concurrency 256: 11000 tok/s/GPU at 25.0 tok/s/user',
                 'other &amp; co, concurrency 64: 6000 tok/s/GPU at 50.0 tok/s/user'])
    if (!svg.includes(s)) bad('missing point ' + s);
const polylines = [...svg.matchAll(/<polyline [^>]*stroke="([^"]+)"[^>]*points="([^"]+)"/g)].map(p => ({color: p[1], n: p[2].split(' ').length}));
const series = polylines.filter(p => p.color === '#1f77b4' || p.color === '#d62728');
if (series.length !== 2 || series[0].n !== 5 || series[1].n !== 3) bad('series lines: ' + JSON.stringify(series));
// Pareto envelope: ours 256, ours 64, ours 16, other 8 (142.9, 2000), ours 4, ours 1 — other 64 and 1 are dominated.
const env = polylines.filter(p => p.color === '#ff7f0e');
if (env.length !== 1 || env[0].n !== 6) bad('envelope: ' + JSON.stringify(env));
if (!svg.includes('Pareto envelope')) bad('no envelope legend');
// The roofline: 13 batch sizes (1 .. 4096), the legend, B labels.
const roof = polylines.filter(p => p.color === '#111111');
if (roof.length !== 1 || roof[0].n !== 13 || !svg.includes('Roofline 120b TP1') || !svg.includes('>B=64<')) bad('roofline: ' + JSON.stringify(roof));
// Its ends against performance-anchors.md §5: batch 1 near the bandwidth ceiling at 4.2 TB/s (5.05 GB a
// step: about 830 tokens/s), and the large-batch end at the compute ceiling for total tokens (A9: about
// 74.5k tok/s/GPU at 790 TFLOP/s and 1k context).
const roofAt = (b) => { const m = svg.match(new RegExp('roofline B=' + b + ': (\\d+) tok/s/user, (\\d+) tok/s/GPU')); return m ? [+m[1], +m[2]] : null; };
const r1 = roofAt(1), r4096 = roofAt(4096);
if (!r1 || r1[0] < 780 || r1[0] > 860) bad('roofline at B=1: ' + r1);
if (!r4096 || r4096[1] < 70000 || r4096[1] > 76000) bad('roofline at B=4096: ' + r4096);
// Anchors: H200 at 1k/1k only — the vLLM launch frontier (7 points), issue #40838, the TRT-LLM ceiling.
if (!svg.includes('vLLM 0.10.2 H200, InferenceMAX launch')) bad('no vLLM H200 anchor series');
if ((svg.match(/vLLM 0\.10\.2 H200 TP[^:]*: \d+ tok\/s\/GPU/g) || []).length !== 7) bad('vLLM launch anchors: expected 7');
if (!svg.includes('Source: vLLM blog')) bad('anchor source missing from the hover text');
if (!svg.includes('TRT-LLM H200 TP1 offline max, 1024/1024') || svg.includes('8192/1024')) bad('TRT-LLM ceiling (1k/1k only)');
if (svg.includes('H100')) bad('H100 anchors drawn without --anchor-gpu');
console.log('ok: svg well-formed, ' + polylines.length + ' lines');
EOF

# The output-throughput chart, no anchors, linear axes.
"$BIN" bench plot "$TMP/a.json" --out "$TMP/o.svg" --y output --anchors none --linear 2>/dev/null || fail "plot --y output"
grep -q "Output token throughput per GPU" "$TMP/o.svg" || fail "output axis label"
grep -q "ours &lt;TP1&gt;, concurrency 256: 5500 tok/s/GPU" "$TMP/o.svg" || fail "output throughput point"

# Errors name what is wrong.
"$BIN" bench plot "$TMP/missing.json" --out "$TMP/x.svg" 2>"$TMP/err"
[ $? = 1 ] && grep -q "missing.json" "$TMP/err" || fail "a missing file: $(cat "$TMP/err")"
echo '{"points": 3}' >"$TMP/bad-anchors.json"
"$BIN" bench plot "$TMP/a.json" --out "$TMP/x.svg" --anchors "$TMP/bad-anchors.json" 2>"$TMP/err"
[ $? = 1 ] && grep -q "points" "$TMP/err" || fail "bad anchors: $(cat "$TMP/err")"
"$BIN" bench plot "$TMP/a.json" 2>/dev/null
[ $? = 2 ] || fail "--out is required"
echo "ok: bench plot"
