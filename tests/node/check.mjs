// The small test runner the client suites share (client_*.mjs, browser_webui.mjs, grafana_check.mjs).
// Each suite registers cases with test(), then calls run().
export const BASE = process.env.BASE;
export const KEY = process.env.API_KEY || ''; // empty: the server runs without --api-key
export const MODEL = process.env.MODEL || 'tiny';
// SDKs insist on some key; the server ignores it when it runs without --api-key.
export const SDK_KEY = KEY || 'unused';

const cases = [];
export const test = (name, fn) => cases.push({ name, fn });

export function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
export function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, expected ${JSON.stringify(b)}`);
}
export async function rejects(promise, check, msg) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert(err, `${msg}: no error`);
  check(err);
  return err;
}

// A raw request to the server, with the key when there is one.
export async function api(method, path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (KEY) headers.Authorization = `Bearer ${KEY}`;
  const r = await fetch(`${BASE}${path}`, { method, headers, body: body && JSON.stringify(body) });
  const text = await r.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: r.status, json, text };
}

// With --api-key, every route but /health refuses a request without the key: checked once per
// suite so each run also proves the key is really required.
if (KEY) {
  test('--api-key: no key is a 401 (every route but /health)', async () => {
    for (const [m, p] of [['GET', '/v1/models'], ['POST', '/v1/chat/completions'],
      ['POST', '/v1/responses'], ['POST', '/v1/completions'], ['GET', '/metrics']]) {
      const r = await fetch(`${BASE}${p}`, { method: m });
      eq(r.status, 401, `${m} ${p}`);
    }
    eq((await fetch(`${BASE}/health`)).status, 200, '/health');
  });
}

// cleanup (optional) runs before the process exits, e.g. to close a browser.
export async function run(suite, cleanup) {
  let passed = 0, failed = 0;
  const t0 = Date.now();
  for (const c of cases) {
    const t = Date.now();
    try {
      await c.fn();
      console.log(`ok    ${c.name} (${Date.now() - t} ms)`);
      passed++;
    } catch (e) {
      console.log(`FAIL  ${c.name}: ${e.stack || e}`);
      failed++;
    }
  }
  if (cleanup) await cleanup();
  const mode = KEY ? 'with --api-key' : 'without --api-key';
  console.log(`${suite} (${mode}): ${passed} passed, ${failed} failed, ` +
    `${((Date.now() - t0) / 1000).toFixed(1)} s`);
  process.exit(failed ? 1 : 0);
}
