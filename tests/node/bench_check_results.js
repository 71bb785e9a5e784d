// Checks a `gptoss bench serve` results file against what the mock server saw (tests/node/
// bench_mock_server.js /stats; "-" for a real server: then only the client's own sums and no timing
// are checked). Usage:
//   node bench_check_results.js RESULTS.json STATS.json '{"itlMs":4,"ttftMs":20,"isl":64,"osl":32,
//        "tokensPerChunk":1,"warmupsPerC":2,"promptsPerC":10,"chat":false}'
// Exits 1 with one line per problem.
'use strict';
const fs = require('fs');
const [resultsPath, statsPath, cfgText] = process.argv.slice(2);
const results = JSON.parse(fs.readFileSync(resultsPath, 'utf8'));
const stats = statsPath === '-' ? null : JSON.parse(fs.readFileSync(statsPath, 'utf8'));
const cfg = JSON.parse(cfgText);
const problems = [];
const fail = (m) => problems.push(m);

// vLLM's result keys (vllm/benchmarks/serve.py: main_async + benchmark(), with
// --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 90,99) ...
const VLLM = ['date', 'backend', 'label', 'model_id', 'num_prompts', 'request_rate', 'burstiness', 'max_concurrency',
    'duration', 'completed', 'failed', 'total_input_tokens', 'total_output_tokens', 'request_throughput',
    'request_goodput', 'output_throughput', 'total_token_throughput', 'max_output_tokens_per_s',
    'max_concurrent_requests'];
for (const m of ['ttft', 'tpot', 'itl', 'e2el'])
    for (const s of ['mean', 'median', 'std', 'p90', 'p99']) VLLM.push(`${s}_${m}_ms`);
// ... and ours, documented in src/bench/metrics_stats.c.
const OURS = ['isl', 'osl', 'random_range_ratio', 'num_warmups', 'seed', 'base_url', 'num_gpus', 'tput_per_gpu',
    'output_tput_per_gpu', 'input_tput_per_gpu', 'median_intvty', 'client_cpu_seconds', 'short_outputs',
    'expected_input_tokens', 'expected_output_tokens'];
const REQUIRED = ['max_concurrency', 'num_prompts', 'completed', 'failed', 'total_input_tokens', 'total_output_tokens',
    'request_throughput', 'output_throughput', 'total_token_throughput', 'duration', 'num_gpus', 'isl', 'osl',
    'client_cpu_seconds'];
for (const m of ['ttft', 'tpot', 'itl', 'e2el'])
    for (const s of ['mean', 'median', 'p90', 'p99']) REQUIRED.push(`${s}_${m}_ms`);

if (!Array.isArray(results) || results.length !== cfg.concurrency.length)
    fail(`expected an array of ${cfg.concurrency.length} results, got ${JSON.stringify(results).slice(0, 200)}`);

const lo = (L) => Math.max(1, Math.trunc(L * 0.8));
let cursor = 0; // into stats.requests: each level sends its warm-ups, then its measured requests
const close = (a, b, what) => { if (!(Math.abs(a - b) <= 1e-6 * Math.abs(b))) fail(`${what}: ${a} vs ${b}`); };
const near = (v, lo, hi, what) => { if (!(v >= lo && v <= hi)) fail(`${what} = ${v}, expected in [${lo}, ${hi}]`); };
results.forEach((r, k) => {
    const C = cfg.concurrency[k], where = `concurrency ${C}`;
    for (const key of REQUIRED) if (!(key in r)) fail(`${where}: key ${key} missing`);
    for (const key of Object.keys(r))
        if (!VLLM.includes(key) && !OURS.includes(key)) fail(`${where}: unknown key ${key} (not vLLM's, not ours)`);
    const n = cfg.promptsPerC ? cfg.promptsPerC * C : cfg.numPrompts;
    const w = cfg.warmupsPerC !== undefined ? cfg.warmupsPerC * C : cfg.numWarmups;
    if (r.max_concurrency !== C) fail(`${where}: max_concurrency ${r.max_concurrency}`);
    if (r.num_prompts !== n || r.completed !== n || r.failed !== 0)
        fail(`${where}: num_prompts ${r.num_prompts} completed ${r.completed} failed ${r.failed}, expected ${n}/${n}/0`);
    // ignore_eos with token-id prompts: what came back equals what was sent, token for token.
    if (!cfg.chat && r.total_input_tokens !== r.expected_input_tokens)
        fail(`${where}: total_input_tokens ${r.total_input_tokens}, prompts sent held ${r.expected_input_tokens}`);
    if (r.total_output_tokens !== r.expected_output_tokens)
        fail(`${where}: total_output_tokens ${r.total_output_tokens}, max_tokens asked ${r.expected_output_tokens}`);
    if (r.short_outputs !== 0) fail(`${where}: ${r.short_outputs} short outputs`);
    if (!stats) return;
    const measured = stats.requests.slice(cursor + w, cursor + w + n);
    cursor += w + n;
    if (measured.length !== n) fail(`${where}: the mock saw ${measured.length} measured requests, expected ${n}`);
    const sumIn = measured.reduce((a, q) => a + q.prompt_len, 0), sumOut = measured.reduce((a, q) => a + q.max_tokens, 0);
    if (r.total_input_tokens !== sumIn) fail(`${where}: total_input_tokens ${r.total_input_tokens}, the mock got ${sumIn}`);
    if (r.total_output_tokens !== sumOut)
        fail(`${where}: total_output_tokens ${r.total_output_tokens}, requested ${sumOut} (ignore_eos: must be equal)`);
    for (const q of measured) {
        if (!cfg.chat && (q.prompt_len < lo(cfg.isl) || q.prompt_len > cfg.isl)) fail(`${where}: prompt length ${q.prompt_len}`);
        if (q.max_tokens < lo(cfg.osl) || q.max_tokens > cfg.osl) fail(`${where}: max_tokens ${q.max_tokens}`);
    }
    if (cfg.itlMs !== undefined) {
        // Timing, from the mock's schedule: first token after ttftMs, then one token every itlMs.
        const itl = cfg.itlMs, chunkMs = itl * cfg.tokensPerChunk;
        // TPOT = (E2EL - TTFT) / (n - 1): when the first chunk carries k tokens, k - 1 of them fall inside
        // TTFT, so TPOT is itl * (n - k) / (n - 1) — vLLM's definition, kept as it is.
        const per = cfg.tokensPerChunk, nMin = lo(cfg.osl);
        near(r.median_tpot_ms, 0.9 * itl * (nMin - per) / (nMin - 1), 2.5 * itl + 2, `${where}: median TPOT (ms)`);
        // ITL: one sample per chunk. The mean (the chunks' span over their gaps) must sit near the
        // mock's chunk time; the median only below it: at high concurrency on a loaded machine the
        // client may read several chunks in one read, each a sample with a gap of 0 (seen under
        // ASan at 64 streams: median 0), which the median shows and the mean absorbs.
        near(r.mean_itl_ms, 0.5 * chunkMs, 2.5 * chunkMs + 3, `${where}: mean ITL (ms), one sample per chunk`);
        near(r.median_itl_ms, 0, 2.5 * chunkMs + 3, `${where}: median ITL (ms), one sample per chunk`);
        const firstChunk = cfg.ttftMs + (cfg.tokensPerChunk - 1) * itl;
        near(r.median_ttft_ms, 0.95 * firstChunk, firstChunk + 150, `${where}: median TTFT (ms)`);
        const meanOut = sumOut / n;
        near(r.mean_e2el_ms, cfg.ttftMs + (meanOut - 1) * itl * 0.9, cfg.ttftMs + (meanOut - 1) * itl * 2.5 + 150,
            `${where}: mean E2EL (ms)`);
        close(r.median_intvty, 1000 / r.median_tpot_ms, `${where}: interactivity = 1000 / median TPOT`);
    }
    near(r.max_concurrent_requests, 1, C, `${where}: peak concurrent requests`);
    near(r.output_throughput * r.duration, sumOut - 0.5, sumOut + 0.5, `${where}: output throughput x duration`);
    if (!(r.client_cpu_seconds >= 0 && r.client_cpu_seconds < r.duration)) fail(`${where}: client CPU ${r.client_cpu_seconds}`);
    if (r.num_gpus !== (cfg.numGpus || 1)) fail(`${where}: num_gpus ${r.num_gpus}`);
    close(r.tput_per_gpu, r.total_token_throughput / r.num_gpus, `${where}: tput_per_gpu`);
    if (cfg.model && r.model_id !== cfg.model) fail(`${where}: model_id ${r.model_id}`);
});
if (stats && cursor !== stats.requests.length) fail(`the mock saw ${stats.requests.length} requests, the results account for ${cursor}`);
if (stats && stats.errors.length) fail(`the mock refused requests: ${stats.errors.slice(0, 3).join('; ')}`);
const maxC = Math.max(...cfg.concurrency);
if (stats && cfg.checkReuse) {
    // Keep-alive: one connection per stream in flight, reused across requests and levels.
    if (stats.connections > maxC + 2) fail(`${stats.connections} TCP connections for at most ${maxC} streams (no reuse?)`);
    if (stats.maxInflight !== maxC) fail(`the mock saw at most ${stats.maxInflight} streams at once, expected ${maxC}`);
}
if (problems.length) {
    for (const p of problems) console.error('FAIL: ' + p);
    process.exit(1);
}
console.log(`ok: ${results.length} levels` + (stats ? `, ${cursor} requests, ${stats.connections} connections` : ''));
