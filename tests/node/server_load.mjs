// Load and leak test (run by tests/test_server_load.sh): CLIENTS concurrent streaming completions,
// ROUNDS times; every stream must complete with exactly MAX_TOKENS tokens, [DONE] and its usage
// chunk. After each round the server must be idle again (no running request, KV usage 0) and its RSS
// must stay flat across rounds. Then a disconnect test: clients that hang up mid-stream must have
// their requests aborted and their KV blocks returned at once.
import http from 'node:http';
import fs from 'node:fs';

const PORT = Number(process.env.PORT);
const PID = Number(process.env.SERVER_PID);
const CLIENTS = Number(process.env.CLIENTS || 500);
const ROUNDS = Number(process.env.ROUNDS || 3);
const MAX_TOKENS = Number(process.env.MAX_TOKENS || 2);
const DISCONNECTS = Number(process.env.DISCONNECTS || 20);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
let passed = 0, failed = 0;
const ok = (cond, msg) => {
  if (cond) passed++;
  else {
    failed++;
    console.log(`FAIL ${msg}`);
  }
};

function rssKb() {
  const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${PID}/status`, 'utf8'));
  return Number(m[1]);
}

async function metrics() {
  const text = await (await fetch(`http://127.0.0.1:${PORT}/metrics`)).text();
  const get = (name) => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm').exec(text)?.[1]);
  return {
    running: get('vllm:num_requests_running'), waiting: get('vllm:num_requests_waiting'),
    kv: get('vllm:kv_cache_usage_perc'),
    aborted: Number(/^vllm:request_success_total\{[^}]*finished_reason="abort"\} (\S+)$/m.exec(text)?.[1]),
  };
}

async function waitIdle(ms) {
  const end = Date.now() + ms;
  let m;
  do {
    m = await metrics();
    if (m.running === 0 && m.waiting === 0 && m.kv === 0) return m;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < end);
  return m;
}

// One streaming request; resolves with {tokens, done, usage, error}. With hangUpAfter, the client
// destroys its socket after that many events.
function stream(i, maxTokens, hangUpAfter = 0) {
  return new Promise((resolve) => {
    const body = JSON.stringify({ prompt: `Request ${i}`, max_tokens: maxTokens, ignore_eos: true, stream: true,
      stream_options: { include_usage: true } });
    const res = { tokens: 0, events: 0, done: false, usage: null, finish: null, error: null };
    const req = http.request({ host: '127.0.0.1', port: PORT, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (r) => {
      if (r.statusCode !== 200) res.error = `status ${r.statusCode}`;
      let buf = '';
      r.setEncoding('utf8');
      r.on('data', (d) => {
        buf += d;
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, k);
          buf = buf.slice(k + 2);
          if (!ev.startsWith('data: ')) continue;
          if (ev === 'data: [DONE]') { res.done = true; continue; }
          const j = JSON.parse(ev.slice(6));
          res.events++;
          if (j.usage) res.usage = j.usage;
          for (const c of j.choices) if (c.finish_reason) res.finish = c.finish_reason;
          if (hangUpAfter && res.events >= hangUpAfter) {
            res.hungUpAt = Date.now();
            req.destroy();
            resolve(res);
            return;
          }
        }
      });
      r.on('end', () => resolve(res));
      r.on('error', (e) => { res.error = res.error || String(e); resolve(res); });
    });
    req.on('error', (e) => { res.error = res.error || String(e); resolve(res); });
    req.end(body);
  });
}

const rss = [rssKb()];
console.log(`load: ${CLIENTS} concurrent streaming clients x ${ROUNDS} rounds, ${MAX_TOKENS} tokens each; RSS at start ${rss[0]} kB`);
for (let round = 1; round <= ROUNDS; round++) {
  const t0 = Date.now();
  const results = await Promise.all(Array.from({ length: CLIENTS }, (_, i) => stream(round * 100000 + i, MAX_TOKENS)));
  const secs = (Date.now() - t0) / 1000;
  const errors = results.filter((r) => r.error);
  const bad = results.filter((r) => !r.error && (!r.done || r.finish !== 'length' || r.usage?.completion_tokens !== MAX_TOKENS));
  ok(errors.length === 0, `round ${round}: ${errors.length} errors, e.g. ${errors[0]?.error}`);
  ok(bad.length === 0, `round ${round}: ${bad.length} incomplete streams, e.g. ${JSON.stringify(bad[0])}`);
  const m = await waitIdle(10000);
  ok(m.running === 0 && m.waiting === 0 && m.kv === 0, `round ${round}: not idle after the round: ${JSON.stringify(m)}`);
  rss.push(rssKb());
  console.log(`round ${round}: ${CLIENTS} streams in ${secs.toFixed(1)} s (${(CLIENTS * MAX_TOKENS / secs).toFixed(0)} tokens/s), ` +
    `${errors.length} errors, ${bad.length} incomplete; RSS ${rss.at(-1)} kB`);
}
// Flat: after the first round (allocator arenas and the KV pool's pages warm up) RSS may not grow by
// more than 10% or 16 MB across the remaining rounds.
if (ROUNDS >= 2) {
  const growth = rss.at(-1) - rss[1];
  ok(growth <= Math.max(16384, rss[1] * 0.1), `RSS grew by ${growth} kB from round 1 to round ${ROUNDS}: ${rss.join(' ')}`);
  console.log(`RSS kB by round: ${rss.join(' ')} (growth after round 1: ${growth} kB)`);
}

// Disconnects: long generations, the clients hang up after 3 events; the server must be idle with
// every KV block back within a second or two of the last hang-up (an abort takes effect at the
// engine's next step, and one step of the CPU backend takes up to a second at full batch).
{
  const before = await metrics();
  const results = await Promise.all(Array.from({ length: DISCONNECTS }, (_, i) => stream(900000 + i, 4000, 3)));
  ok(results.every((r) => r.events >= 3 && !r.done), 'disconnect: every client got events before hanging up');
  const lastHangUp = Math.max(...results.map((r) => r.hungUpAt || 0));
  const m = await waitIdle(10000);
  const secs = (Date.now() - lastHangUp) / 1000;
  ok(m.running === 0 && m.waiting === 0, `disconnect: requests still running: ${JSON.stringify(m)}`);
  ok(m.kv === 0, `disconnect: KV blocks not returned: kv_cache_usage_perc ${m.kv}`);
  ok(m.aborted - before.aborted === DISCONNECTS, `disconnect: ${m.aborted - before.aborted} aborted, expected ${DISCONNECTS}`);
  console.log(`disconnect: ${DISCONNECTS} clients hung up mid-stream; running 0 and KV usage ${m.kv} ` +
    `${secs.toFixed(2)} s after the last hang-up`);
}

agent.destroy();
console.log(`server_load: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
