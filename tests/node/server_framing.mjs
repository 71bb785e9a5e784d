// Ambiguous HTTP/1.1 framing (RFC 9112 §6) over raw sockets (run by tests/test_server_framing.sh):
// each shape must get one 400 in OpenAI's error shape and the connection closed by the server; the
// request smuggled behind it (a GET /health after the body as the first header frames it) must never
// be answered. A control case checks that two well-framed pipelined requests get two answers, so
// "one answer" really means the second request was dropped.
import net from 'node:net';

const PORT = Number(process.env.PORT);
let passed = 0, failed = 0;

// Sends bytes; resolves {data, closed} once the server closes (closed: true) or after `wait` ms.
// `bytes` may be a list of parts, written 50 ms apart (separate reads on the server's side).
function exchange(bytes, wait = 5000) {
  return new Promise((resolve) => {
    const sock = net.connect(PORT, '127.0.0.1');
    let data = Buffer.alloc(0), done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data: data.toString('latin1'), closed });
    };
    const timer = setTimeout(() => finish(false), wait);
    sock.on('data', (d) => { data = Buffer.concat([data, d]); });
    sock.on('error', () => {});
    sock.on('close', () => finish(true));
    sock.on('connect', async () => {
      for (const part of Array.isArray(bytes) ? bytes : [bytes]) {
        sock.write(part);
        await new Promise((r) => setTimeout(r, 50));
      }
    });
  });
}

const SMUGGLED = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
const head = (lines) => `POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${lines}\r\n`;

const CASES = [
  ['two different Content-Length', head('Content-Length: 2\r\nContent-Length: 35\r\n') + '{}' + SMUGGLED],
  ['two equal Content-Length', head('Content-Length: 2\r\nContent-Length: 2\r\n') + '{}' + SMUGGLED],
  ['Content-Length +2', head('Content-Length: +2\r\n') + '{}' + SMUGGLED],
  ['Content-Length -0', head('Content-Length: -0\r\n') + SMUGGLED],
  ['Content-Length 2,2', head('Content-Length: 2,2\r\n') + '{}' + SMUGGLED],
  ['Content-Length with Transfer-Encoding',
    head('Content-Length: 2\r\nTransfer-Encoding: chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n' + SMUGGLED],
  ['Transfer-Encoding gzip', head('Transfer-Encoding: gzip\r\n') + '{}' + SMUGGLED],
  ['Transfer-Encoding gzip, chunked', head('Transfer-Encoding: gzip, chunked\r\n') + '2\r\n{}\r\n0\r\n\r\n' + SMUGGLED],
  ['two Transfer-Encoding', head('Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n') +
    '2\r\n{}\r\n0\r\n\r\n' + SMUGGLED],
  ['space before the colon (Transfer-Encoding)',
    head('Transfer-Encoding : chunked\r\nContent-Length: 16\r\n') + '2\r\n{}\r\n0\r\n\r\n' + SMUGGLED],
  ['tab before the colon (Content-Length)', head('Content-Length\t: 2\r\n') + '{}' + SMUGGLED],
  ['obs-fold continuing Transfer-Encoding',
    head('Transfer-Encoding: chunked\r\n identity\r\n') + '2\r\n{}\r\n0\r\n\r\n' + SMUGGLED],
  // A fold of an ordinary field parses like a value with a space in it: only the raw bytes show it.
  ['obs-fold (space) of an ordinary field', head('X-A: a\r\n b\r\nContent-Length: 2\r\n') + '{}' + SMUGGLED],
  ['obs-fold (tab) of an ordinary field', head('Content-Length: 2\r\nX-A: a\r\n\tb\r\n') + '{}' + SMUGGLED],
  ['obs-fold split over reads (line end, then the fold)',
    ['POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-A: a\r', '\n',
      ' b\r\nContent-Length: 2\r\n\r\n{}' + SMUGGLED]],
  ['obs-fold in the second pipelined request',
    head('Content-Length: 2\r\n') + '{}' + 'GET /health HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n' + SMUGGLED, 1],
];

function count(s, re) { return (s.match(re) || []).length; }

for (const [name, bytes, skip = 0] of CASES) {
  const r = await exchange(bytes);
  // `skip` well-framed answers come first (a pipelined request before the bad one).
  const statuses = [...r.data.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => Number(m[1])).slice(skip);
  const last = r.data.lastIndexOf('HTTP/1.1 ');
  const body = r.data.slice(r.data.indexOf('\r\n\r\n', last) + 4);
  let shape = false;
  try { shape = typeof JSON.parse(body).error.message === 'string'; } catch { shape = false; }
  const problems = [];
  if (statuses[0] !== 400) problems.push(`status ${statuses[0]}`);
  if (statuses.length !== 1) problems.push(`${statuses.length} responses (the smuggled request was answered)`);
  if (!r.closed) problems.push('the connection stayed open');
  // Also the shapes evhttp refuses itself (wire.c rewrites its HTML pages).
  if (!shape) problems.push(`not an OpenAI error body: ${body.slice(0, 120)}`);
  if (problems.length) {
    failed++;
    console.log(`FAIL ${name}: ${problems.join('; ')}\n  ${JSON.stringify(r.data.slice(0, 300))}`);
  } else {
    passed++;
  }
}

// Control: two well-framed pipelined requests on one connection get two answers (a 400 for the
// empty tokenize body, then the health check).
{
  const r = await exchange(head('Content-Length: 2\r\n') + '{}' + SMUGGLED, 1500);
  const n = count(r.data, /HTTP\/1\.1 \d{3}/g);
  if (n === 2) passed++;
  else {
    failed++;
    console.log(`FAIL control: ${n} answers to two pipelined requests: ${JSON.stringify(r.data.slice(0, 300))}`);
  }
}

// Limits evhttp enforces itself: each answer is an OpenAI JSON error, and the connection closes.
const SIZE_CASES = [
  ['head one byte over --max-header-bytes (16384)', 431,
    `GET /health HTTP/1.1\r\nHost: x\r\nX: ${'a'.repeat(16347)}\r\n\r\n`],
  ['request line of 20000 bytes', 431, `GET /${'a'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`],
  ['Content-Length over --max-request-bytes', 413,
    head(`Content-Length: ${(32 << 20) + 1}\r\n`) + 'a'.repeat((32 << 20) + 1)],
  ['chunked body over --max-request-bytes', 413,
    head('Transfer-Encoding: chunked\r\n') + `100000\r\n${'a'.repeat(0x100000)}\r\n`.repeat(33) + '0\r\n\r\n'],
  ['malformed request line', 400, 'GET\r\n\r\n'],
  // The page comes after an answer still in the output buffer (pipelining): it is found at the end.
  ['Content-Length over --max-request-bytes after a pipelined request', 413,
    SMUGGLED + head(`Content-Length: ${(32 << 20) + 1}\r\n`) + 'a'.repeat((32 << 20) + 1), 1],
];
for (const [name, want, bytes, skip = 0] of SIZE_CASES) {
  const r = await exchange(bytes, 20000);
  const at = skip ? r.data.lastIndexOf('HTTP/1.1 ') : 0;
  const status = Number((r.data.slice(at).match(/^HTTP\/1\.1 (\d{3})/) || [])[1]);
  const body = r.data.slice(r.data.indexOf('\r\n\r\n', at) + 4);
  let msg = null;
  try { msg = JSON.parse(body).error.message; } catch { msg = null; }
  const problems = [];
  if (status !== want) problems.push(`status ${status}, expected ${want}`);
  if (typeof msg !== 'string') problems.push(`not an OpenAI error body: ${body.slice(0, 120)}`);
  if (!/\r\ncontent-type: application\/json/i.test(r.data)) problems.push('not application/json');
  if (!r.closed) problems.push('the connection stayed open');
  if (problems.length) {
    failed++;
    console.log(`FAIL ${name}: ${problems.join('; ')}\n  ${JSON.stringify(r.data.slice(0, 300))}`);
  } else {
    passed++;
  }
}

console.log(`server_framing: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
