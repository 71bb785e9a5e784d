// Checks examples/grafana/gptoss.json against a real scrape of /metrics (run by
// tests/test_grafana_dashboard.sh against `gptoss serve --model synthetic:tiny`):
//  - every metric a panel or variable queries is a sample name on /metrics (a renamed metric or a
//    typo would leave a panel silently empty);
//  - every label the queries select or group by, or a legend names, is on that metric's samples;
//  - histogram_quantile reads _bucket series; counters are read through rate();
//  - every metric family the server exports is on some panel (a new metric gets a panel);
//  - the JSON is a dashboard Grafana imports: unique panel ids, a grid position each, the
//    datasource variable everywhere.
import fs from 'node:fs';
import { BASE, api, test, assert, eq, run } from './check.mjs';

const dash = JSON.parse(fs.readFileSync(process.env.DASHBOARD, 'utf8'));
const METRIC = /\b(?:vllm|gptoss):[A-Za-z0-9_:]+/g;

// The exposition format: "# TYPE name kind" lines and "name{labels} value" samples.
function parseScrape(text) {
  const samples = new Map(); // name -> Set of label names
  const types = new Map(); // family -> kind
  for (const line of text.split('\n')) {
    const t = /^# TYPE (\S+) (\S+)/.exec(line);
    if (t) types.set(t[1], t[2]);
    if (!line || line.startsWith('#')) continue;
    const m = /^([^{\s]+)(?:\{(.*)\})?\s+\S+$/.exec(line);
    assert(m, `unparsable sample line: ${line}`);
    const labels = samples.get(m[1]) ?? new Set();
    for (const l of (m[2] ?? '').matchAll(/([A-Za-z_][A-Za-z0-9_]*)="/g)) labels.add(l[1]);
    samples.set(m[1], labels);
  }
  return { samples, types };
}

const panels = dash.panels.filter((p) => p.type !== 'row');
const queries = [
  ...panels.flatMap((p) => p.targets.map((t) => ({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr,
    legend: t.legendFormat ?? '' }))),
  ...dash.templating.list.filter((v) => v.type === 'query')
    .map((v) => ({ where: `variable ${v.name}`, expr: v.query.query ?? v.query, legend: '' })),
];

// Traffic first, so the scrape is one of a server that has served (the names exist either way).
for (const prompt of ['Hello', 'Hello again']) {
  const r = await api('POST', '/v1/completions', { model: process.env.MODEL, prompt, max_tokens: 4 });
  eq(r.status, 200, 'a completion');
}
const scrape = await api('GET', '/metrics');
eq(scrape.status, 200, 'GET /metrics');
const { samples, types } = parseScrape(scrape.text);

test('every queried metric is a sample name on /metrics', () => {
  const missing = [];
  for (const q of queries)
    for (const name of q.expr.match(METRIC) ?? []) if (!samples.has(name)) missing.push(`${q.where}: ${name}`);
  eq(missing.length, 0, `missing: ${missing.join('; ')}`);
  assert(queries.length >= 20, `queries: ${queries.length}`);
});

test('every label a query selects, groups by or names in its legend is on its metrics', () => {
  const bad = [];
  for (const q of queries) {
    const names = q.expr.match(METRIC) ?? [];
    const used = new Set([
      ...[...q.expr.matchAll(/([A-Za-z_][A-Za-z0-9_]*)\s*=~?\s*"/g)].map((m) => m[1]),
      ...[...q.expr.matchAll(/\bby\s*\(([^)]*)\)/g)].flatMap((m) => m[1].split(',').map((s) => s.trim())),
      ...[...q.legend.matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((m) => m[1]),
    ]);
    // label_values(metric, label) names a label too.
    const lv = /label_values\([^,]+,\s*(\w+)\)/.exec(q.expr);
    if (lv) used.add(lv[1]);
    for (const l of used)
      for (const n of names) if (!samples.get(n)?.has(l)) bad.push(`${q.where}: ${n} has no label ${l}`);
  }
  eq(bad.length, 0, bad.join('; '));
});

test('histogram_quantile reads buckets; counters go through rate()', () => {
  const bad = [];
  for (const q of queries) {
    for (const m of q.expr.matchAll(/histogram_quantile\([^,]+,\s*sum by \(le\) \(rate\(([^{[]+)/g))
      if (!m[1].endsWith('_bucket')) bad.push(`${q.where}: histogram_quantile over ${m[1]}`);
    if (/histogram_quantile/.test(q.expr) && !/by \(le\)/.test(q.expr)) bad.push(`${q.where}: no "by (le)"`);
    for (const name of q.expr.match(METRIC) ?? []) {
      const family = name.replace(/_(total|bucket|sum|count)$/, '');
      const kind = types.get(family) ?? types.get(name);
      if ((kind === 'counter' || kind === 'histogram') && !q.expr.includes(`rate(${name}`))
        bad.push(`${q.where}: ${name} (${kind}) read without rate()`);
    }
  }
  eq(bad.length, 0, bad.join('; '));
});

test('every metric family on /metrics has a panel', () => {
  const queried = new Set(queries.flatMap((q) => q.expr.match(METRIC) ?? [])
    .map((n) => n.replace(/_(bucket|sum|count)$/, '').replace(/_total$/, '')));
  const unshown = [...types.keys()].filter((f) => !queried.has(f) && !queried.has(f.replace(/_total$/, '')));
  eq(unshown.length, 0, `families without a panel: ${unshown.join(', ')}`);
});

test('the panels of vLLM\'s dashboard are there, and the JSON is importable', () => {
  const titles = panels.map((p) => p.title.toLowerCase());
  for (const want of ['e2e request latency', 'time to first token', 'inter-token latency', 'token throughput',
    'scheduler state', 'kv cache usage', 'preemptions', 'prefix cache hit rate', 'queue time'])
    assert(titles.some((t) => t.includes(want)), `no "${want}" panel`);
  eq(new Set(dash.panels.map((p) => p.id)).size, dash.panels.length, 'unique panel ids');
  for (const p of dash.panels) {
    const g = p.gridPos;
    assert(g && g.w > 0 && g.h > 0 && g.x + g.w <= 24, `panel ${p.id} gridPos`);
  }
  for (const p of panels) {
    eq(p.datasource.uid, '${datasource}', `panel "${p.title}" datasource`);
    for (const t of p.targets) eq(t.datasource.uid, '${datasource}', `panel "${p.title}" target datasource`);
    assert(p.targets.every((t) => t.expr.includes('model_name="$model_name"')), `panel "${p.title}" filters by model`);
  }
  assert(dash.templating.list.some((v) => v.name === 'model_name'), 'a model_name variable');
  assert(BASE, 'BASE');
});

await run('grafana_check');
