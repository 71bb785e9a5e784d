// Hostile and malformed requests against the server, over raw sockets so every byte is ours
// (run by tests/test_server_bad_input.sh). Each case must get its expected status; after every batch
// the server must still answer a good request. Expectations for field values follow the OpenAI/vLLM
// rules the api layer implements (400 naming the field; 404 for an unknown model).
import net from 'node:net';

const HOST = '127.0.0.1';
const PORT = Number(process.env.PORT);
const IDLE = Number(process.env.IDLE_TIMEOUT || 2); // the server's --timeout-keep-alive
let passed = 0, failed = 0;
const failures = [];

// Sends raw bytes; resolves with {status, headers, body} of the first response, or status 0 when the
// server closed without one. `after` may keep writing (big bodies).
function raw(bytes, { timeout = 30000, after } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(PORT, HOST);
    let buf = Buffer.alloc(0), done = false;
    const finish = (r) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(r);
    };
    const timer = setTimeout(() => finish({ status: -1, body: 'client timeout' }), timeout);
    const parse = () => {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return null;
      const head = buf.subarray(0, end).toString('latin1');
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
      if (!m) return { status: -2, body: head };
      const status = Number(m[1]);
      const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
      const body = buf.subarray(end + 4);
      if (cl && body.length >= Number(cl[1])) return { status, head, body: body.subarray(0, Number(cl[1])).toString() };
      if (/\r\ntransfer-encoding: *chunked/i.test(head) && body.includes('0\r\n\r\n')) return { status, head, body: body.toString() };
      return null;
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const r = parse();
      if (r) finish(r);
    });
    sock.on('error', () => {});
    sock.on('close', () => {
      const r = parse();
      if (r) return finish(r);
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.toString('latin1'));
      finish({ status: m ? Number(m[1]) : 0, body: buf.toString() });
    });
    sock.on('connect', () => {
      sock.write(bytes);
      if (after) after(sock);
    });
  });
}

function post(path, body, extra = '') {
  const b = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return Buffer.concat([
    Buffer.from(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n` +
      `Content-Length: ${b.length}\r\n${extra}\r\n`),
    b,
  ]);
}
const completions = (body) => post('/v1/completions', body);

async function check(name, req, want, opts) {
  const r = await raw(req, opts);
  const ok = Array.isArray(want) ? want.includes(r.status) : r.status === want;
  // A 4xx/5xx answer with a body from our router must be OpenAI's error shape.
  let shapeOk = true;
  if (ok && r.status >= 400 && r.status !== 413 && r.body && r.body.startsWith('{')) {
    try {
      const e = JSON.parse(r.body).error;
      shapeOk = e && typeof e.message === 'string' && typeof e.type === 'string';
    } catch {
      shapeOk = false;
    }
  }
  if (ok && shapeOk) passed++;
  else {
    failed++;
    failures.push(`${name}: status ${r.status}, expected ${want}; ${String(r.body).slice(0, 200)}`);
  }
}

async function batch(title, cases, parallel = 16) {
  for (let i = 0; i < cases.length; i += parallel)
    await Promise.all(cases.slice(i, i + parallel).map((c) => check(...c)));
  // The server is still up and serving.
  await check(`${title}: good request after the batch`,
    completions('{"prompt":"Hello","max_tokens":2,"ignore_eos":true}'), 200);
  console.log(`${title}: ${cases.length} cases`);
}

// Seeded garbage, so a failure reproduces.
let seed = 12345;
const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
const garbage = (n) => Buffer.from(Array.from({ length: n }, () => Math.floor(rnd() * 256)));

// ---------------------------------------------------------------- broken JSON
const good = '{"model":"tiny","prompt":"hello","max_tokens":3,"ignore_eos":true}';
{
  const cases = [];
  for (let i = 0; i < good.length; i++) cases.push([`prefix ${i}`, completions(good.slice(0, i)), 400]);
  const broken = ['{', '}', '[', ']', '{"prompt":}', '{"prompt":"a",}', '{"prompt" "a"}', 'nul', 'true', 'false',
    'null', '"str"', '123', '-0', '[]', '[{"prompt":"a"}]', "{'prompt':'a'}", '{"prompt":"\\x41"}', '{"prompt":"a"}}',
    '{"prompt":"a"} {"prompt":"b"}', '{prompt:"a"}', '{"prompt":"a\u0001"}', '{"prompt":NaN}', '{"max_tokens":Infinity}',
    '{"prompt":"a","max_tokens":0x10}', '{"prompt":"a","max_tokens":01}', '{"prompt":"a",,"n":1}', '\u0000',
    '{"prompt":"a"}\u0000', ' ', '{"a":1,"a":2,'];
  for (const b of broken) cases.push([`broken ${JSON.stringify(b)}`, completions(b), 400]);
  for (let i = 0; i < 30; i++) cases.push([`garbage ${i}`, completions(garbage(1 + Math.floor(rnd() * 300))), 400]);
  await batch('broken JSON', cases);
}

// ---------------------------------------------------------------- wrong types and values
{
  // Literal JSON text of each bad value, so numbers JavaScript cannot hold travel exactly.
  const bad = {
    prompt: ['{}', 'true', '5', '[]', '[-1]', '["a",1]', '[1.5]', 'null', '[300000]', '""'],
    max_tokens: ['"5"', '-1', '1.5', '{}', '[]', 'true', '1e20', '-1e20', '9223372036854775807',
      '-9223372036854775808', '2147483648'],
    temperature: ['"hot"', '-1', '{}', '[]', 'true', '1e300'],
    top_p: ['-0.5', '1.5', '"x"', '{}', '0'],
    n: ['0', '-1', '"2"', '1000000', '{}', '1099511627776'],
    stream: ['"yes"', '1', '{}', '[]'],
    stream_options: ['"x"', '5', '[]', '{"include_usage":"yes"}'],
    seed: ['"1"', '1.5', '{}', '[]'],
    stop: ['5', '{}', '[1]', '[""]', '[[]]'],
    logprobs: ['-1', '"2"', '100', '{}'],
    top_k: ['"1"', '{}', '-5'],
    presence_penalty: ['5', '-5', '"x"'],
    frequency_penalty: ['5', '"x"', '[]'],
    repetition_penalty: ['-1', '0', '"x"'],
    min_p: ['-1', '2', '"x"'],
    ignore_eos: ['"true"', '1'],
    model: ['5', '{}', '[]'],
  };
  const cases = [];
  for (const [field, values] of Object.entries(bad))
    for (const lit of values) {
      const fields = { prompt: '"hi"', max_tokens: '2', ignore_eos: 'true', [field]: lit };
      const body = '{' + Object.entries(fields).map(([k, v]) => `"${k}":${v}`).join(',') + '}';
      cases.push([`${field} = ${lit}`, completions(body), 400]);
    }
  cases.push(['unknown model', completions('{"model":"gpt-7","prompt":"hi"}'), 404]);
  cases.push(['huge token id', completions('{"prompt":[2147483647]}'), 400]);
  cases.push(['token id over int64', completions('{"prompt":[99999999999999999999]}'), 400]);
  cases.push(['prompt over the model length', completions(JSON.stringify({ prompt: Array(5000).fill(13225) })), 400]);
  await batch('wrong types and values', cases);
}

// ---------------------------------------------------------------- deep nesting
{
  const deep = (n, open, close) => open.repeat(n) + close.repeat(n);
  const cases = [
    ['[ x 100000', completions(deep(100000, '[', ']')), 400],
    ['{"a": x 5000', completions('{"prompt":"a","x":' + deep(5000, '{"a":', '}').replace(/:}/, ':1}') + '}'), 400],
    ['prompt nested 10000', completions('{"prompt":' + deep(10000, '[', ']') + '}'), 400],
    ['unclosed [ x 1000000', completions('['.repeat(1000000)), 400],
  ];
  await batch('deep nesting', cases, 4);
}

// ---------------------------------------------------------------- invalid UTF-8
{
  const utf8 = [
    [0xff], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x80], [0xf4, 0x90, 0x80, 0x80],
    [0xfe, 0xfe, 0xff, 0xff],
  ];
  const cases = [];
  for (const b of utf8) {
    cases.push([`bad UTF-8 in prompt ${b}`, completions(Buffer.concat([Buffer.from('{"prompt":"a'), Buffer.from(b), Buffer.from('"}')])), 400]);
    cases.push([`bad UTF-8 in a key ${b}`, completions(Buffer.concat([Buffer.from('{"prompt":"a","'), Buffer.from(b), Buffer.from('":1}')])), 400]);
    cases.push([`bad UTF-8 in tokenize ${b}`, post('/tokenize', Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from(b), Buffer.from('"}')])), 400]);
  }
  cases.push(['lone surrogate escape', completions('{"prompt":"\\ud800"}'), 400]);
  await batch('invalid UTF-8', cases);
}

// ---------------------------------------------------------------- routes and methods
{
  const req = (line) => Buffer.from(`${line}\r\nHost: x\r\nConnection: close\r\n\r\n`);
  const cases = [
    ['GET / (the chat page)', req('GET / HTTP/1.1'), 200],
    ['GET /webui/../etc/passwd', req('GET /webui/../etc/passwd HTTP/1.1'), [400, 404]],
    ['GET /webui/app.js/', req('GET /webui/app.js/ HTTP/1.1'), 404],
    ['GET /v1', req('GET /v1 HTTP/1.1'), 404],
    ['POST /v1/completion', post('/v1/completion', good), 404],
    ['POST /v1/completions/', post('/v1/completions/', good), 404],
    ['GET /admin', req('GET /admin HTTP/1.1'), 404],
    ['GET /../etc/passwd', req('GET /../etc/passwd HTTP/1.1'), [400, 404]],
    ['GET /v1/models/x', req('GET /v1/models/x HTTP/1.1'), 404],
    ['GET /v1/completions', req('GET /v1/completions HTTP/1.1'), 405],
    ['PUT /v1/completions', req('PUT /v1/completions HTTP/1.1'), 405],
    ['DELETE /v1/chat/completions', req('DELETE /v1/chat/completions HTTP/1.1'), 405],
    ['PATCH /v1/responses', req('PATCH /v1/responses HTTP/1.1'), 405],
    ['POST /health', post('/health', '{}'), 405],
    ['POST /metrics', post('/metrics', '{}'), 405],
    ['GET /tokenize', req('GET /tokenize HTTP/1.1'), 405],
    ['OPTIONS /v1/models', req('OPTIONS /v1/models HTTP/1.1'), 405],
    ['method BREW', req('BREW /v1/completions HTTP/1.1'), [400, 405, 501]],
    ['HTTP/9.9', req('GET /health HTTP/9.9'), [400, 505]],
    ['no version', req('GET /health'), [0, 400]],
    ['binary request line', Buffer.concat([garbage(40), Buffer.from('\r\n\r\n')]), [0, 400]],
    ['empty line then close', Buffer.from('\r\n\r\n'), [0, 400]],
    ['GET with a body is fine', Buffer.from('GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 3\r\n\r\nabc'), 200],
    ['query string ignored', req('GET /health?x=1 HTTP/1.1'), 200],
    ['absolute URI', req('GET http://x/health HTTP/1.1'), 200],
  ];
  await batch('routes and methods', cases);
}

// ---------------------------------------------------------------- header floods
{
  const many = Array.from({ length: 1000 }, (_, i) => `X-Flood-${i}: ${'v'.repeat(80)}\r\n`).join('');
  // Past --max-header-bytes evhttp (libevent 2.1) answers 413 itself and closes at once: it has no
  // lingering close for headers, only for bodies. Whatever the client has sent beyond what was read
  // is then unread, so the kernel resets the connection, and a reset that overtakes the answer
  // destroys it on the client's side: status 0. Usually the answer wins; on a loaded machine it did
  // not (CI, 2026-11-30). Both outcomes are accepted here; the server must stay healthy either way
  // (checked after the batch).
  const cases = [
    ['1000 headers', Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\n${many}Connection: close\r\n\r\n`), [0, 400, 413, 431]],
    ['one 1 MB header', Buffer.from(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(1 << 20)}\r\n\r\n`), [0, 400, 413, 431]],
    ['100 KB URI', Buffer.from(`GET /${'a'.repeat(100000)} HTTP/1.1\r\nHost: x\r\n\r\n`), [0, 400, 413, 414, 431]],
    ['headers without end', Buffer.from(`GET /health HTTP/1.1\r\n${'X: y\r\n'.repeat(10000)}`), [0, 400, 413, 431]],
    ['header without colon', Buffer.from('GET /health HTTP/1.1\r\nHost x\r\nConnection: close\r\n\r\n'), [200, 400]],
  ];
  await batch('header floods', cases, 5);
}

// ---------------------------------------------------------------- big bodies
{
  const hundredMB = 100 << 20;
  const cases = [
    // Refused from Content-Length without buffering. evhttp's lingering close then discards what
    // the client still sends and answers 413 at its end (closing at once would make the kernel
    // reset the connection and lose the answer); a client that never sends it is dropped by the
    // idle timeout.
    ['100 MB Content-Length, body never sent', Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${hundredMB}\r\n\r\n{"prompt":`), [0, 413],
      { timeout: (IDLE + 5) * 1000 }],
    ['100 MB body streamed', Buffer.from(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${hundredMB}\r\n\r\n`), 413,
      { after: (s) => { const chunk = Buffer.alloc(1 << 20, 0x20); let n = 0; const pump = () => { while (n < 100 && s.write(chunk)) n++; if (n < 100) s.once('drain', () => { n++; pump(); }); }; pump(); } }],
    // Chunked: evhttp's lingering close drains only the chunk it is reading, then answers 413 and
    // closes while later chunks are still arriving; the server reads the rest from a duplicate of
    // the descriptor (src/server/body_drain.c), so the client reads the 413 instead of a reset
    // (status 0, seen in CI in session 39 before that).
    ['40 MB chunked', Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n'), 413,
      { after: (s) => { const c = Buffer.concat([Buffer.from('100000\r\n'), Buffer.alloc(0x100000, 0x20), Buffer.from('\r\n')]); let n = 0; const pump = () => { while (n < 40 && s.write(c)) n++; if (n < 40) s.once('drain', () => { n++; pump(); }); }; pump(); } }],
    ['Content-Length overflow', Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n'), [0, 400, 413],
      { timeout: (IDLE + 5) * 1000 }],
    ['negative Content-Length', Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n'), [400, 413]],
    ['Content-Length larger than the body, then close', Buffer.from('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"prompt"'), [0, -1, 400],
      { timeout: 1000, after: (s) => s.end() }],
  ];
  await batch('big bodies', cases, 1);
}

// ---------------------------------------------------------------- slowloris
{
  // 50 connections that send half a request and stall. They must not delay a good request, and the
  // server must drop them after its idle timeout.
  const t0 = Date.now();
  const stalled = Array.from({ length: 50 }, (_, i) => new Promise((resolve) => {
    const s = net.connect(PORT, HOST, () => s.write(i % 2 ? 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le' :
      'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"prompt":'));
    s.on('error', () => {});
    s.on('close', () => resolve(Date.now() - t0));
    setTimeout(() => { s.destroy(); resolve(-1); }, (IDLE + 10) * 1000);
  }));
  const g0 = Date.now();
  await check('good request while 50 connections stall', completions('{"prompt":"Hello","max_tokens":2,"ignore_eos":true}'), 200);
  const goodMs = Date.now() - g0;
  if (goodMs > 5000) { failed++; failures.push(`good request took ${goodMs} ms while others stalled`); } else passed++;
  const closedAfter = await Promise.all(stalled);
  const dropped = closedAfter.filter((ms) => ms >= 0 && ms < (IDLE + 5) * 1000).length;
  if (dropped === 50) passed++;
  else { failed++; failures.push(`only ${dropped}/50 stalled connections were dropped within ${IDLE + 5} s`); }
  await batch('slowloris', []);
}

for (const f of failures) console.log(`FAIL ${f}`);
console.log(`server_bad_input: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
