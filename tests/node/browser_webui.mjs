// Headless Chromium (Debian's `chromium`, driven by puppeteer-core) against `gptoss serve --model
// synthetic:tiny` (run by tests/test_browser.sh, without and with --api-key):
//  (a) the built-in chat page at /: the key prompt, a streamed answer, the request it sends
//      (reasoning effort, max tokens, key), live stats, the stop button, reasoning shown apart;
//  (b) a page from another origin (a static server on another port, here) calling the API directly
//      through the `openai` SDK (6 and 7, their ESM files served as they are), which needs CORS.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';
import { BASE, KEY, MODEL, test, assert, eq, api, run } from './check.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  headless: true,
});

// A fresh page that fails the test on any script error or console error (a CSP violation is one).
// Each page in its own browser context, so no page sees another's stored key.
async function newPage() {
  const page = await (await browser.createBrowserContext()).newPage();
  page.errors = [];
  page.on('response', (r) => { if (r.status() >= 400) page.errors.push(`HTTP ${r.status()} ${r.url()}`); });
  page.on('pageerror', (e) => page.errors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') page.errors.push(`console: ${m.text()}`); });
  return page;
}
function noErrors(page, allow = () => false) {
  const bad = page.errors.filter((e) => !allow(e));
  eq(bad.length, 0, `page errors: ${bad.join(' | ')}`);
}

// Opens the chat page, giving it the key when the server wants one.
async function openChat() {
  const page = await newPage();
  const r = await page.goto(`${BASE}/`, { waitUntil: 'load' });
  eq(r.status(), 200, 'GET /');
  if (KEY) {
    await page.waitForSelector('#key-form:not([hidden])', { timeout: 10000 });
    await page.type('#key', KEY);
    await page.click('#key-form button[type=submit]');
  }
  await page.waitForFunction((m) => document.getElementById('model').textContent === m,
    { timeout: 10000 }, MODEL);
  page.errors = []; // without the key, the page's first GET /v1/models was a 401, as it should be
  return page;
}

async function send(page, text) {
  await page.type('#prompt', text);
  await page.keyboard.press('Enter');
}

const lastAssistant = (page) => page.$eval('.msg.assistant:last-of-type', (m) => ({
  state: m.dataset.state,
  answer: m.querySelector('.answer').textContent,
  reasoning: m.querySelector('.reasoning-text').textContent,
  reasoningShown: !m.querySelector('details.reasoning').hidden,
  notes: [...m.querySelectorAll(':scope > .who, :scope > .error')].map((e) => e.textContent),
}));

test('page: / is the chat page with its security headers; /webui parts; --api-key does not hide it', async () => {
  const r = await fetch(`${BASE}/`);
  eq(r.status, 200, 'status');
  eq(r.headers.get('content-type'), 'text/html; charset=utf-8', 'content-type');
  eq(r.headers.get('x-content-type-options'), 'nosniff', 'nosniff');
  eq(r.headers.get('x-frame-options'), 'DENY', 'x-frame-options');
  const csp = r.headers.get('content-security-policy');
  assert(csp.includes("default-src 'none'") && csp.includes("script-src 'self'") &&
    csp.includes("connect-src 'self'") && !csp.includes('unsafe-inline'), `CSP ${csp}`);
  assert((await r.text()).includes('<script src="/webui/app.js"'), 'the page loads its script');
  const js = await fetch(`${BASE}/webui/app.js`);
  eq(js.headers.get('content-type'), 'text/javascript; charset=utf-8', 'app.js type');
  const css = await fetch(`${BASE}/webui/app.css`);
  eq(css.headers.get('content-type'), 'text/css; charset=utf-8', 'app.css type');
  eq((await fetch(`${BASE}/webui/nothing.js`)).status, 404, 'unknown part');
});

test('page: sends a message and renders the streamed answer with live stats', async () => {
  const page = await openChat();
  const sent = [];
  page.on('request', (q) => {
    if (q.url().endsWith('/v1/chat/completions')) sent.push({ body: JSON.parse(q.postData()), headers: q.headers() });
  });
  await page.select('#effort', 'high');
  await page.type('#max-tokens', '12');
  await send(page, 'Hello there');
  await page.waitForSelector('.msg.assistant[data-state=done]', { timeout: 60000 });
  const m = await lastAssistant(page);
  assert(m.answer.length > 0, 'an answer is shown');
  eq(await page.$eval('.msg.user .answer', (e) => e.textContent), 'Hello there', 'the user message');
  const stats = await page.$eval('#stats', (e) => e.textContent);
  const st = /^first token (\d+) ms · 12 tokens · ([\d.]+) tokens\/s$/.exec(stats);
  assert(st, `stats: ${stats}`);
  // The rate counts from the request, which is before the first token: at most 12 / TTFT (both as
  // shown, rounded: to 0.1 tokens/s and to the millisecond).
  const [ttft, rate] = [Number(st[1]), Number(st[2])];
  assert(rate > 0 && rate - 0.05 <= 12 / (Math.max(ttft - 0.5, 1) / 1000), `rate: ${stats}`);
  eq(sent.length, 1, 'one request');
  const { body, headers } = sent[0];
  eq(body.stream, true, 'stream');
  eq(body.reasoning_effort, 'high', 'reasoning_effort');
  eq(body.max_tokens, 12, 'max_tokens');
  eq(body.model, MODEL, 'model');
  eq(body.messages.at(-1).content, 'Hello there', 'message');
  eq(headers.authorization, KEY ? `Bearer ${KEY}` : undefined, 'authorization');
  // A second turn carries the first answer back.
  await send(page, 'More');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant[data-state=done]').length === 2,
    { timeout: 60000 });
  eq(sent[1].body.messages.length, 3, 'history: user, assistant, user');
  eq(sent[1].body.messages[1].content, m.answer, 'the first answer in the history');
  if (KEY) eq(await page.evaluate(() => localStorage.getItem('gptoss.apiKey')), KEY, 'key stored');
  noErrors(page);
  await page.browserContext().close();
});

test('page: the stop button aborts the request, and the server counts an abort', async () => {
  const aborts = async () => {
    const m = /vllm:request_success_total\{[^}]*finished_reason="abort"\} (\d+)/.exec((await api('GET', '/metrics')).text);
    return Number(m[1]);
  };
  const before = await aborts();
  const page = await openChat();
  await page.type('#max-tokens', '3000');
  await send(page, 'Tell me a long story');
  await page.waitForSelector('#stop:not([disabled])');
  await new Promise((r) => setTimeout(r, 300));
  await page.click('#stop');
  await page.waitForSelector('.msg.assistant[data-state=stopped]', { timeout: 10000 });
  eq(await page.$eval('#send', (b) => b.disabled), false, 'send is enabled again');
  let after = before;
  for (let i = 0; i < 200 && after === before; i++) { // up to 20 s: a busy engine notices later
    await new Promise((r) => setTimeout(r, 100));
    after = await aborts();
  }
  eq(after, before + 1, 'aborted requests on /metrics');
  noErrors(page);
  await page.browserContext().close();
});

// The tiny model's random tokens never open harmony's analysis channel, so no real answer has
// reasoning: this case answers the page's request with a stream in the server's own chunk format
// (reasoning under both names, as api_chat_stream.c sends it) to check how the page renders it.
test('page: reasoning deltas render apart from the answer (scripted stream)', async () => {
  const page = await openChat();
  await page.setRequestInterception(true);
  const chunk = (delta, extra = {}) => `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk',
    created: 1, model: MODEL, choices: [{ index: 0, delta, logprobs: null, finish_reason: null, ...extra }] })}\n\n`;
  const reasoning = (t) => chunk({ reasoning: t, reasoning_content: t });
  page.on('request', (q) => {
    if (!q.url().endsWith('/v1/chat/completions')) return q.continue();
    q.respond({ status: 200, contentType: 'text/event-stream', body: chunk({ role: 'assistant', content: '' }) +
      reasoning('The user ') + reasoning('says hi.') + chunk({ content: 'Hello' }) + chunk({ content: ', friend!' }) +
      chunk({}, { finish_reason: 'stop' }) +
      `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk', created: 1, model: MODEL,
        choices: [], usage: { prompt_tokens: 9, completion_tokens: 5, total_tokens: 14 } })}\n\n` +
      'data: [DONE]\n\n' });
  });
  await send(page, 'hi');
  await page.waitForSelector('.msg.assistant[data-state=done]', { timeout: 10000 });
  const m = await lastAssistant(page);
  eq(m.reasoning, 'The user says hi.', 'reasoning, once (not both names)');
  assert(m.reasoningShown, 'the reasoning block is shown');
  eq(m.answer, 'Hello, friend!', 'answer');
  assert(m.notes.includes('finish: stop'), `notes ${m.notes}`);
  const stats = await page.$eval('#stats', (e) => e.textContent);
  assert(/^first token \d+ ms · 5 tokens/.test(stats), `stats use the usage chunk: ${stats}`);
  noErrors(page);
  await page.browserContext().close();
});

if (KEY) {
  test('page: a wrong key is refused and asked for again', async () => {
    const page = await newPage();
    await page.goto(`${BASE}/`);
    await page.waitForSelector('#key-form:not([hidden])');
    await page.type('#key', 'wrong');
    await page.click('#key-form button[type=submit]');
    await page.waitForFunction(() => document.getElementById('key-error').textContent.includes('refused'));
    // The 401 of /v1/models is logged by Chromium as a failed resource load.
    noErrors(page, (e) => e.includes('401'));
    await page.browserContext().close();
  });
}

// ---------------------------------------------------------------- (b) another origin

// A static server on another port: the test page and the SDKs' ESM files, as they are in
// node_modules (no bundling: they import each other by relative paths).
const roots = { '/openai6/': path.join(here, 'node_modules/openai/'), '/openai7/': path.join(here, 'node_modules/openai7/') };
const crossPage = `<!doctype html><meta charset="utf-8"><title>cross-origin</title><link rel="icon" href="data:,">
<script type="module">
  const params = new URLSearchParams(location.search);
  const { default: OpenAI } = await import(params.get('sdk') + 'index.mjs');
  const client = new OpenAI({ baseURL: params.get('base') + '/v1', apiKey: params.get('key') || 'unused',
    dangerouslyAllowBrowser: true, maxRetries: 0 });
  const model = params.get('model');
  const out = {};
  try {
    out.models = (await client.models.list()).data.map((m) => m.id);
    const c = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6 });
    out.chat = { object: c.object, finish: c.choices[0].finish_reason, tokens: c.usage.completion_tokens };
    let n = 0;
    const s = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 6,
      stream: true, stream_options: { include_usage: true } });
    let usage = null;
    for await (const ch of s) { n++; if (ch.usage) usage = ch.usage; }
    out.stream = { chunks: n, tokens: usage && usage.completion_tokens };
    const r = await client.responses.create({ model, input: 'Hi', max_output_tokens: 6 });
    out.responses = { object: r.object, status: r.status, text: typeof r.output_text };
  } catch (e) {
    out.error = String(e && e.message || e);
  }
  window.result = out;
</script>`;
const origin = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  if (url.pathname === '/') {
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    return res.end(crossPage);
  }
  const root = Object.keys(roots).find((p) => url.pathname.startsWith(p));
  const file = root && path.join(roots[root], path.normalize(url.pathname.slice(root.length)));
  if (!file || !file.startsWith(roots[root]) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.writeHead(404);
    return res.end();
  }
  res.writeHead(200, { 'Content-Type': file.endsWith('js') ? 'text/javascript' : 'application/octet-stream' });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => origin.listen(0, '127.0.0.1', r));
// "localhost" vs the server's 127.0.0.1: another origin (another port too), so every call is CORS.
const ORIGIN = `http://localhost:${origin.address().port}`;

for (const sdk of ['openai6', 'openai7']) {
  test(`another origin: the ${sdk} SDK in the browser calls the API (CORS)`, async () => {
    const page = await newPage();
    const q = new URLSearchParams({ sdk: `/${sdk}/`, base: BASE, key: KEY, model: MODEL });
    await page.goto(`${ORIGIN}/?${q}`);
    await page.waitForFunction(() => window.result, { timeout: 120000 });
    const out = await page.evaluate(() => window.result);
    eq(out.error, undefined, 'no error');
    eq(JSON.stringify(out.models), JSON.stringify([MODEL]), 'models');
    eq(out.chat.object, 'chat.completion', 'chat object');
    eq(out.chat.tokens, 6, 'chat tokens');
    assert(out.stream.chunks >= 2 && out.stream.tokens === 6, `stream ${JSON.stringify(out.stream)}`);
    eq(out.responses.object, 'response', 'responses object');
    noErrors(page);
    await page.browserContext().close();
  });
}

await run('browser_webui', async () => {
  await browser.close();
  origin.close();
});
