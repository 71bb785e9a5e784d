// The quadratic request shapes of issue 18 against a live server (run by tests/test_server_linear.sh):
// one tool with 32k required properties, 32k chat tool-call ids, 32k responses call ids. Each must be
// answered (its prompt exceeds the context, so a 400 context_length_exceeded after the whole body was
// parsed and rendered) within BOUND_S, while /health, probed every 50 ms on fresh connections (spread
// over the event loops), never waits longer than HEALTH_S.
import { maxCallbackSeconds, probeHealth } from './loop_probe.mjs';

const BASE = process.env.BASE;
const BOUND_S = Number(process.env.BOUND_S || 5);
const HEALTH_S = Number(process.env.HEALTH_S || 1);
// The loop's own measure (gptoss:event_loop_max_callback_seconds): these bodies are parsed off the
// loops (src/server/offload.c), so no loop callback may take longer than this.
const LOOP_MS = Number(process.env.LOOP_MS || 50);
const N = 32768;
let failed = 0;

function bodies() {
  const req = Array.from({ length: N }, (_, i) => `p${i}`);
  const props = Object.fromEntries(req.map((p) => [p, { type: 'string' }]));
  const required = {
    model: 'tiny', max_tokens: 1,
    messages: [{ role: 'user', content: 'hi' }],
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: props, required: req } } }],
  };
  const calls = Array.from({ length: N }, (_, i) => ({ id: `c${i}`, type: 'function', function: { name: `f${i}`, arguments: '{}' } }));
  const chat = {
    model: 'tiny', max_tokens: 1,
    messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', tool_calls: calls },
      ...calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: `r${i}` }))],
  };
  const input = [{ role: 'user', content: 'hi' }];
  for (let i = 0; i < N; i++) input.push({ type: 'function_call', call_id: `c${i}`, name: `f${i}`, arguments: '{}' });
  for (let i = 0; i < N; i++) input.push({ type: 'function_call_output', call_id: `c${i}`, output: `r${i}` });
  return [
    ['32k required properties', '/v1/chat/completions', required],
    ['32k chat tool-call ids', '/v1/chat/completions', chat],
    ['32k responses call ids', '/v1/responses', { model: 'tiny', max_output_tokens: 1, input }],
  ];
}

for (const [name, path, body] of bodies()) {
  const health = probeHealth(BASE);
  const t0 = performance.now();
  const r = await fetch(`${BASE}${path}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  const dt = (performance.now() - t0) / 1000;
  const worst = await health.stop();
  const problems = [];
  if (r.status !== 400 || !text.includes('context_length_exceeded'))
    problems.push(`status ${r.status}: ${text.slice(0, 200)}`);
  if (dt > BOUND_S) problems.push(`answered after ${dt.toFixed(2)} s (bound ${BOUND_S} s)`);
  if (worst > HEALTH_S) problems.push(`/health waited ${worst.toFixed(2)} s (bound ${HEALTH_S} s)`);
  const loopMs = 1000 * (await maxCallbackSeconds(BASE));
  if (!(loopMs <= LOOP_MS)) problems.push(`an event loop was held ${loopMs.toFixed(1)} ms (bound ${LOOP_MS} ms)`);
  console.log(`${name}: ${JSON.stringify(body).length} bytes answered in ${dt.toFixed(2)} s, /health at worst ${worst.toFixed(3)} s, loop callbacks at most ${loopMs.toFixed(2)} ms`);
  if (problems.length) {
    failed++;
    console.log(`FAIL ${name}: ${problems.join('; ')}`);
  }
}
process.exit(failed ? 1 : 0);
