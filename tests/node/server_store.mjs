// The responses store through the official `openai` SDK and plain fetch (run by
// tests/test_server_store.sh against `gptoss serve --model synthetic:tiny --api-key …
// --responses-store-size 4`): retrieve, delete, input items, previous_response_id, item_reference,
// store: false, eviction, and vLLM's 404 for a response that is not there.
import OpenAI from 'openai';

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const MODEL = process.env.MODEL;
const STORE_SIZE = Number(process.env.STORE_SIZE);
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, expected ${JSON.stringify(b)}`);
}
async function raw(method, path, body, key = KEY) {
  const headers = { 'Content-Type': 'application/json' };
  if (key) headers.Authorization = `Bearer ${key}`;
  const r = await fetch(`${BASE}${path}`, { method, headers, body: body && JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}
async function rejects(p, cls, what) {
  try {
    await p;
  } catch (e) {
    assert(e instanceof cls, `${what}: expected ${cls.name}, got ${e}`);
    return e;
  }
  throw new Error(`${what}: no error`);
}
const create = (extra) =>
  client.responses.create({ model: MODEL, input: 'Hi', max_output_tokens: 6, temperature: 0, ...extra });
// vLLM's answer for a response it does not have.
function isVllm404(r, id, param = 'response_id') {
  eq(r.status, 404, 'status');
  eq(r.body.error.message, `Response with id '${id}' not found.`, 'message');
  eq(r.body.error.type, 'invalid_request_error', 'type');
  eq(r.body.error.param, param, 'param');
  eq(r.body.error.code, 404, 'code');
}

test('a response is stored by default: retrieve gives it back, store: true', async () => {
  const r = await create();
  eq(r.store, true, 'store');
  const got = await client.responses.retrieve(r.id);
  eq(got.id, r.id, 'id');
  eq(JSON.stringify(got.output), JSON.stringify(r.output), 'output');
  eq(got.usage.output_tokens, r.usage.output_tokens, 'usage');
});

test('a streamed response is stored before response.completed reaches the client', async () => {
  const stream = await client.responses.create({
    model: MODEL, input: 'Hi', max_output_tokens: 5, stream: true,
  });
  let last;
  for await (const ev of stream) last = ev;
  assert(last.response, `last event ${last.type}`);
  const got = await client.responses.retrieve(last.response.id);
  eq(got.status, last.response.status, 'status');
  eq(JSON.stringify(got.output), JSON.stringify(last.response.output), 'output');
});

test('input_items lists the request input', async () => {
  const r = await create({ input: [{ role: 'user', content: 'one' }, { role: 'user', content: 'two' }] });
  const items = await client.responses.inputItems.list(r.id);
  const texts = items.data.map((i) => i.content);
  eq(JSON.stringify(texts), JSON.stringify(['one', 'two']), 'input items');
});

test('previous_response_id continues the stored conversation', async () => {
  const a = await create({ input: 'First question' });
  const b = await create({ input: 'Second question', previous_response_id: a.id });
  eq(b.previous_response_id, a.id, 'previous_response_id echoed');
  // The second prompt holds the first turn: more input tokens than the first turn and its output.
  assert(b.usage.input_tokens > a.usage.input_tokens + a.usage.output_tokens,
    `input tokens ${b.usage.input_tokens} vs ${a.usage.input_tokens} + ${a.usage.output_tokens}`);
  // Sent inline instead, the same conversation is the same prompt.
  const inline = await create({
    input: [{ role: 'user', content: 'First question' }, ...a.output, { role: 'user', content: 'Second question' }],
    store: false,
  });
  eq(inline.usage.input_tokens, b.usage.input_tokens, 'same prompt inline');
  const chain = await client.responses.inputItems.list(b.id);
  eq(chain.data.length, 1 + a.output.length + 1, 'the stored input holds the whole conversation');
});

test('item_reference: an output item by id (what the AI SDK sends)', async () => {
  const a = await create({ input: 'Tell me' });
  const refs = a.output.map((o) => ({ type: 'item_reference', id: o.id }));
  const byRef = await create({ input: [{ role: 'user', content: 'Tell me' }, ...refs, { role: 'user', content: 'More' }] });
  const inline = await create({ input: [{ role: 'user', content: 'Tell me' }, ...a.output, { role: 'user', content: 'More' }] });
  eq(byRef.usage.input_tokens, inline.usage.input_tokens, 'same prompt by reference');
  const r = await raw('POST', '/v1/responses', { model: MODEL, input: [{ type: 'item_reference', id: 'msg_nope' }] });
  eq(r.status, 404, 'unknown item');
  eq(r.body.error.param, 'input[0].id', 'param');
});

test('store: false keeps nothing and says so', async () => {
  const r = await create({ store: false });
  eq(r.store, false, 'store');
  isVllm404(await raw('GET', `/v1/responses/${r.id}`), r.id);
  const e = await rejects(create({ previous_response_id: r.id }), OpenAI.NotFoundError, 'previous');
  eq(e.error?.param ?? e.param, 'previous_response_id', 'param');
});

test('delete: the response is gone, a second delete is 404', async () => {
  const r = await create();
  const d = await client.responses.delete(r.id).catch((e) => e);
  // openai 6 returns void for delete; check the raw answer too.
  assert(!(d instanceof Error), `delete: ${d}`);
  await rejects(client.responses.retrieve(r.id), OpenAI.NotFoundError, 'retrieve after delete');
  isVllm404(await raw('DELETE', `/v1/responses/${r.id}`), r.id);
  const again = await create();
  const body = await raw('DELETE', `/v1/responses/${again.id}`);
  eq(body.status, 200, 'delete status');
  eq(JSON.stringify(body.body), JSON.stringify({ id: again.id, object: 'response.deleted', deleted: true }), 'delete body');
});

test(`eviction: only the last ${STORE_SIZE} responses stay`, async () => {
  const ids = [];
  for (let i = 0; i < STORE_SIZE + 2; i++) ids.push((await create({ max_output_tokens: 1 })).id);
  for (const [i, id] of ids.entries()) {
    const r = await raw('GET', `/v1/responses/${id}`);
    eq(r.status, i < 2 ? 404 : 200, `response ${i}`);
  }
  isVllm404(await raw('POST', '/v1/responses', { model: MODEL, input: 'x', previous_response_id: ids[0] }),
    ids[0], 'previous_response_id');
});

test('ids, methods and the key', async () => {
  const r = await raw('GET', '/v1/responses/notanid');
  eq(r.status, 400, 'a bad id');
  eq(r.body.error.param, 'response_id', 'param');
  const a = await create();
  eq((await raw('GET', `/v1/responses/${a.id}`, undefined, null)).status, 401, 'no key');
  eq((await raw('DELETE', `/v1/responses/${a.id}`, undefined, 'wrong')).status, 401, 'wrong key');
  eq((await raw('POST', `/v1/responses/${a.id}`)).status, 405, 'POST on a response');
  eq((await raw('GET', `/v1/responses/${a.id}/nothing`)).status, 404, 'unknown sub-path');
  const c = await raw('POST', `/v1/responses/${a.id}/cancel`);
  eq(c.status, 400, 'cancel of a finished, synchronous response');
  await rejects(client.responses.cancel(a.id), OpenAI.BadRequestError, 'SDK cancel');
  isVllm404(await raw('POST', '/v1/responses/resp_nope/cancel'), 'resp_nope');
});

async function poll(id) {
  for (let i = 0; i < 600; i++) {
    const r = await client.responses.retrieve(id);
    if (!['queued', 'in_progress'].includes(r.status)) return r;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`${id} still running after 60 s`);
}

test('background: answered at once as queued, polled to the end; cancel after the end is a 400', async () => {
  const r = await create({ background: true, max_output_tokens: 4 });
  eq(r.status, 'queued', 'status');
  eq(r.background, true, 'background');
  eq(r.output.length, 0, 'no output yet');
  const done = await poll(r.id);
  eq(done.status, 'incomplete', 'final status (max_output_tokens)');
  eq(done.usage.output_tokens, 4, 'output tokens');
  eq(done.background, true, 'background');
  const c = await raw('POST', `/v1/responses/${r.id}/cancel`);
  eq(c.status, 400, 'cancel after the end');
  // It continues like any stored response.
  const next = await create({ input: 'More', previous_response_id: r.id });
  eq(next.previous_response_id, r.id, 'previous_response_id');
});

test('background: cancel stops a running response', async () => {
  const r = await create({ background: true, max_output_tokens: 3000, ignore_eos: true });
  const c = await client.responses.cancel(r.id);
  eq(c.status, 'cancelled', 'cancel answer');
  const done = await poll(r.id);
  eq(done.status, 'cancelled', 'stored status');
  assert(done.usage.output_tokens < 3000, `stopped early: ${done.usage.output_tokens}`);
});

test('background: needs store, and no stream', async () => {
  const a = await raw('POST', '/v1/responses', { model: MODEL, input: 'x', background: true, store: false });
  eq(a.status, 400, 'store false');
  eq(a.body.error.param, 'background', 'param');
  const b = await raw('POST', '/v1/responses', { model: MODEL, input: 'x', background: true, stream: true });
  eq(b.status, 400, 'stream');
  eq(b.body.error.param, 'stream', 'param');
});

let passed = 0, failed = 0;
for (const t of tests) {
  try {
    await t.fn();
    console.log(`ok   ${t.name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${t.name}: ${e.stack || e}`);
    failed++;
  }
}
console.log(`server_store: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
