// Large request bodies against a live server (run by tests/test_server_stall.sh, issue 18): each is
// answered in full although its work outlasts --timeout-keep-alive (2 s), no event loop is held
// longer than BOUND_MS of CPU time by any callback (the server's own measure,
// gptoss:event_loop_max_callback_seconds on /metrics), and /health, probed every 50 ms on fresh
// connections, answers within HEALTH_S throughout.
import { maxCallbackSeconds, probeHealth } from './loop_probe.mjs';

const BASE = process.env.BASE;
const MB = Number(process.env.MB || 8);
const BOUND_MS = Number(process.env.BOUND_MS || 50);
const HEALTH_S = Number(process.env.HEALTH_S || 1);
let failed = 0;

const text = 'hello world, '.repeat(Math.floor((MB << 20) / 13));
const ids = Array.from({ length: Math.floor((MB << 20) / 7) }, (_, i) => 1000 + (i % 50000));
const CASES = [
  ['/tokenize', { prompt: text }, 200, (j) => j.count > 0 && j.tokens.length === j.count],
  ['/detokenize', { tokens: ids }, 200, (j) => typeof j.prompt === 'string' && j.prompt.length > ids.length],
  ['/v1/chat/completions', { model: 'tiny', max_tokens: 1, messages: [{ role: 'user', content: text }] }, 400,
    (j) => j.error.code === 'context_length_exceeded'],
  ['/v1/completions', { model: 'tiny', max_tokens: 1, prompt: text }, 400, (j) => j.error.code === 'context_length_exceeded'],
  ['/v1/responses', { model: 'tiny', max_output_tokens: 1, input: text }, 400, (j) => j.error.code === 'context_length_exceeded'],
];


if (!Number.isFinite(await maxCallbackSeconds(BASE))) {
  console.log('FAIL: /metrics has no gptoss:event_loop_max_callback_seconds');
  process.exit(1);
}
for (const [path, body, want, check] of CASES) {
  const health = probeHealth(BASE);
  const payload = JSON.stringify(body);
  const t0 = performance.now();
  let status = 0, answer = '';
  try {
    const r = await fetch(`${BASE}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: payload });
    status = r.status;
    answer = await r.text();
  } catch (e) {
    answer = `no answer: ${e.cause ? e.cause.code || e.cause : e}`;
  }
  const dt = (performance.now() - t0) / 1000;
  const worst = await health.stop();
  const problems = [];
  let ok = false;
  try { ok = check(JSON.parse(answer)); } catch { ok = false; }
  if (status !== want || !ok) problems.push(`status ${status}, answer ${answer.slice(0, 160)}`);
  if (worst > HEALTH_S) problems.push(`/health waited ${worst.toFixed(2)} s (bound ${HEALTH_S} s)`);
  const cb = await maxCallbackSeconds(BASE);
  if (cb * 1000 > BOUND_MS) problems.push(`an event loop was held ${(cb * 1000).toFixed(1)} ms (bound ${BOUND_MS} ms)`);
  console.log(`${path}: ${(payload.length / 1048576).toFixed(1)} MB answered ${status} (${answer.length} bytes) in ${dt.toFixed(2)} s; /health at worst ${worst.toFixed(3)} s; loop callbacks at most ${(cb * 1000).toFixed(2)} ms`);
  if (problems.length) {
    failed++;
    console.log(`FAIL ${path}: ${problems.join('; ')}`);
  }
}
process.exit(failed ? 1 : 0);
