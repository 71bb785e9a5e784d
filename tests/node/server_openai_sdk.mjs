// The server driven by the official `openai` npm SDK (run by tests/test_server_openai.sh against
// `gptoss serve --model synthetic:tiny`). The tiny model has random weights, so its text is random:
// the checks are on shapes, counts, finish reasons and determinism (same seed, same text), and
// `ignore_eos` (a vLLM extension the SDK passes through) keeps lengths exact.
//
// Tests marked API need the api layer (src/api: chat and responses mapping, harmony). Until it is
// merged the server answers those routes with 501, and they are reported as skipped; once it lands
// they run and must pass.
import OpenAI from 'openai';

const BASE = process.env.BASE;
const KEY = process.env.API_KEY || 'sekret';
const MODEL = process.env.MODEL || 'tiny';
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });

const tests = [];
const test = (name, fn, opts = {}) => tests.push({ name, fn, api: !!opts.api });
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, expected ${JSON.stringify(b)}`);
}
async function collect(stream) {
  const out = [];
  for await (const ev of stream) out.push(ev);
  return out;
}
const FINISH = new Set(['stop', 'length', 'tool_calls']);

// ---------------------------------------------------------------- completions

test('models.list names the served model', async () => {
  const list = await client.models.list();
  eq(list.data.length, 1, 'models');
  eq(list.data[0].id, MODEL, 'model id');
  assert(list.data[0].max_model_len > 0, 'max_model_len');
});

test('models.retrieve gets the served model; an unknown one is NotFoundError', async () => {
  const m = await client.models.retrieve(MODEL);
  eq(m.id, MODEL, 'model id');
  eq(m.object, 'model', 'object');
  let err;
  try {
    await client.models.retrieve('no-such-model');
  } catch (e) {
    err = e;
  }
  assert(err instanceof OpenAI.NotFoundError, `expected NotFoundError, got ${err}`);
  eq(err.code, 'model_not_found', 'error code');
});

test('completions: not streamed', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 6, ignore_eos: true });
  eq(r.object, 'text_completion', 'object');
  eq(r.choices.length, 1, 'choices');
  eq(typeof r.choices[0].text, 'string', 'text');
  eq(r.choices[0].finish_reason, 'length', 'finish_reason');
  eq(r.usage.completion_tokens, 6, 'completion_tokens');
  eq(r.usage.total_tokens, r.usage.prompt_tokens + 6, 'total_tokens');
  assert(r.id.startsWith('cmpl-'), 'id');
});

test('completions: streamed, usage in the stream', async () => {
  const events = await collect(
    await client.completions.create({
      model: MODEL, prompt: 'Hello', max_tokens: 5, ignore_eos: true, stream: true,
      stream_options: { include_usage: true },
    }));
  const withChoices = events.filter((e) => e.choices.length > 0);
  assert(withChoices.length >= 2, `too few chunks: ${withChoices.length}`);
  eq(withChoices.at(-1).choices[0].finish_reason, 'length', 'last finish_reason');
  const usage = events.at(-1).usage;
  assert(usage, 'no usage chunk');
  eq(usage.completion_tokens, 5, 'usage.completion_tokens');
  assert(new Set(events.map((e) => e.id)).size === 1, 'one id across the stream');
});

test('completions: streamed text equals the same seed not streamed', async () => {
  const p = { model: MODEL, prompt: 'Once upon', max_tokens: 8, ignore_eos: true, seed: 7, temperature: 1 };
  const whole = await client.completions.create(p);
  const events = await collect(await client.completions.create({ ...p, stream: true }));
  eq(events.map((e) => e.choices[0]?.text ?? '').join(''), whole.choices[0].text, 'streamed text');
});

test('completions: n > 1', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 3, n: 3, ignore_eos: true });
  eq(r.choices.length, 3, 'choices');
  eq(r.choices.map((c) => c.index).sort().join(','), '0,1,2', 'indexes');
  eq(r.usage.completion_tokens, 9, 'completion_tokens');
});

test('completions: n > 1 streamed', async () => {
  const events = await collect(
    await client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 3, n: 2, ignore_eos: true, stream: true }));
  const finished = events.flatMap((e) => e.choices).filter((c) => c.finish_reason);
  eq(finished.map((c) => c.index).sort().join(','), '0,1', 'finished indexes');
});

test('completions: seed reproducibility', async () => {
  const p = { model: MODEL, prompt: 'The', max_tokens: 12, ignore_eos: true, temperature: 1, seed: 1234 };
  const a = await client.completions.create(p);
  const b = await client.completions.create(p);
  const c = await client.completions.create({ ...p, seed: 4321 });
  eq(a.choices[0].text, b.choices[0].text, 'same seed, same text');
  assert(a.choices[0].text !== c.choices[0].text, 'another seed gave the same 12 random tokens');
});

test('completions: stop string cuts the text where it first appears', async () => {
  const p = { model: MODEL, prompt: 'A', max_tokens: 24, ignore_eos: true, temperature: 1, seed: 99 };
  const full = (await client.completions.create(p)).choices[0].text;
  const cps = Array.from(full);
  assert(cps.length > 12, `text too short: ${JSON.stringify(full)}`);
  const stop = cps.slice(8, 11).join('');
  const r = await client.completions.create({ ...p, stop: [stop] });
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  eq(r.choices[0].text, full.slice(0, full.indexOf(stop)), 'text before the stop string');
});

test('completions: logprobs', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 4, ignore_eos: true, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert(lp, 'no logprobs');
  eq(lp.token_logprobs.length, 4, 'token_logprobs');
  eq(lp.tokens.length, 4, 'tokens');
  assert(lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0), 'logprobs <= 0');
  eq(lp.top_logprobs.length, 4, 'top_logprobs');
});

test('completions: token-id prompt', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: [200006, 1428, 200008], max_tokens: 2, ignore_eos: true });
  eq(r.usage.prompt_tokens, 3, 'prompt_tokens');
});

test('errors: 400, 401, 404 as SDK exceptions', async () => {
  let e = await client.completions.create({ model: MODEL, prompt: 'a', max_tokens: -1 }).catch((x) => x);
  assert(e instanceof OpenAI.BadRequestError, `negative max_tokens: ${e}`);
  assert(e.error && typeof e.error.message === 'string', 'error.message');
  e = await client.completions.create({ model: 'no-such-model', prompt: 'a' }).catch((x) => x);
  assert(e instanceof OpenAI.NotFoundError, `unknown model: ${e}`);
  const bad = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong', maxRetries: 0 });
  e = await bad.completions.create({ model: MODEL, prompt: 'a' }).catch((x) => x);
  assert(e instanceof OpenAI.AuthenticationError, `wrong key: ${e}`);
});

// ---------------------------------------------------------------- chat (API layer)

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

function checkMessage(m) {
  eq(m.role, 'assistant', 'role');
  assert(m.content === null || typeof m.content === 'string', 'content');
  // Both names of the reasoning field, or neither (vLLM renamed it; clients use both).
  assert(('reasoning' in m) === ('reasoning_content' in m), 'reasoning and reasoning_content together');
  if (m.reasoning != null) eq(m.reasoning, m.reasoning_content, 'reasoning == reasoning_content');
  for (const tc of m.tool_calls ?? []) {
    eq(tc.type, 'function', 'tool_call type');
    assert(typeof tc.id === 'string' && tc.id.length > 0, 'tool_call id');
    assert(typeof tc.function.name === 'string' && typeof tc.function.arguments === 'string', 'tool_call function');
  }
}

test('chat: not streamed', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }],
    max_tokens: 8, ignore_eos: true,
  });
  eq(r.object, 'chat.completion', 'object');
  assert(r.id.startsWith('chatcmpl-'), 'id');
  checkMessage(r.choices[0].message);
  assert(FINISH.has(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  assert(r.usage.prompt_tokens > 0 && r.usage.completion_tokens <= 8, 'usage');
}, { api: true });

test('chat: streamed, usage in the stream', async () => {
  const events = await collect(await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 6, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  }));
  eq(events[0].object, 'chat.completion.chunk', 'object');
  eq(events[0].choices[0].delta.role, 'assistant', 'first delta role');
  const last = events.filter((e) => e.choices.length > 0).at(-1);
  assert(FINISH.has(last.choices[0].finish_reason), 'final finish_reason');
  const usage = events.at(-1).usage;
  assert(usage && usage.completion_tokens <= 6 && usage.prompt_tokens > 0, 'usage chunk');
}, { api: true });

test('chat: n > 1 and seed reproducibility', async () => {
  const p = { model: MODEL, messages: [{ role: 'user', content: 'Pick a word' }], max_tokens: 6, ignore_eos: true,
    temperature: 1, seed: 5, n: 2 };
  const a = await client.chat.completions.create(p);
  const b = await client.chat.completions.create(p);
  eq(a.choices.length, 2, 'choices');
  eq(JSON.stringify(a.choices.map((c) => c.message)), JSON.stringify(b.choices.map((c) => c.message)), 'same seed');
}, { api: true });

test('completions: a list of prompts × n, not streamed and streamed (as LangChain sends them)', async () => {
  const body = { model: MODEL, prompt: ['Hello', [13225, 2375]], n: 2, max_tokens: 3, ignore_eos: true, echo: true };
  const r = await client.completions.create(body);
  eq(r.choices.length, 4, 'choices');
  r.choices.forEach((c, i) => {
    eq(c.index, i, 'index');
    eq(c.finish_reason, 'length', `finish_reason ${i}`);
    assert(c.text.startsWith(i < 2 ? 'Hello' : 'Hello world'), `choice ${i} echoes its prompt: ${c.text}`);
  });
  eq(r.usage.prompt_tokens, 3, 'prompt_tokens summed over the prompts');
  eq(r.usage.completion_tokens, 12, 'completion_tokens summed over the choices');
  const chunks = await collect(await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } }));
  const text = ['', '', '', ''];
  const finish = [null, null, null, null];
  for (const ch of chunks) for (const c of ch.choices) {
    text[c.index] += c.text;
    if (c.finish_reason) finish[c.index] = c.finish_reason;
  }
  eq(finish.join(), 'length,length,length,length', 'streamed finish reasons');
  text.forEach((t, i) => assert(t.startsWith(i < 2 ? 'Hello' : 'Hello world'), `streamed ${i}: ${t}`));
  const usage = chunks[chunks.length - 1].usage;
  eq(usage.prompt_tokens, 3, 'streamed prompt_tokens');
  eq(usage.completion_tokens, 12, 'streamed completion_tokens');
  // The same seed gives each prompt the text it gets alone.
  const alone = await client.completions.create({ model: MODEL, prompt: 'Hello', max_tokens: 5, seed: 7, ignore_eos: true });
  const both = await client.completions.create({ model: MODEL, prompt: ['Hi there', 'Hello'], max_tokens: 5, seed: 7, ignore_eos: true });
  eq(both.choices[1].text, alone.choices[0].text, 'prompt 1 with seed 7');
});

test('completions: logprobs arrays as long as completion_tokens over 40 seeds', async () => {
  // The tiny model's random weights sample special tokens now and then; with skip_special_tokens
  // (the default) they give no text but keep their logprobs entry, stop tokens included.
  // SEEDS: fewer under ASan (test_server_openai.sh), where a seed takes seconds.
  const seeds = Number(process.env.SEEDS || 40);
  let specials = 0;
  for (let seed = 0; seed < seeds; seed++) {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Hi', max_tokens: 24, temperature: 1, seed, logprobs: 1,
    });
    const lp = r.choices[0].logprobs;
    const n = r.usage.completion_tokens;
    for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
      eq(lp[k].length, n, `seed ${seed}: ${k} vs completion_tokens`);
    specials += lp.tokens.filter((t) => /^<\|[a-z_0-9]+\|>$/.test(t)).length;
  }
  if (seeds >= 40) assert(specials > 0, 'no special token sampled in 40 seeds: the check proved nothing');
});

test('chat: logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, ignore_eos: true, logprobs: true,
    top_logprobs: 2,
  });
  // logprobs.content covers the tokens of visible content only; the tiny model's random tokens may
  // not form a harmony final message, so the list can be empty, but it must be there and well-formed.
  const content = r.choices[0].logprobs?.content;
  assert(Array.isArray(content), 'logprobs.content');
  for (const t of content) {
    assert(typeof t.token === 'string' && t.logprob <= 0, 'token logprob');
    eq(t.top_logprobs.length, 2, 'top_logprobs');
  }
}, { api: true });

test('chat: stop and max_completion_tokens', async () => {
  const r = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Count' }], max_completion_tokens: 5, ignore_eos: true,
    stop: ['\n\n\n\n'],
  });
  assert(r.usage.completion_tokens <= 5, 'max_completion_tokens');
}, { api: true });

test('chat: tools round trip (assistant tool call and tool result rendered back)', async () => {
  const first = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [weatherTool],
    tool_choice: 'auto', max_tokens: 8, ignore_eos: true,
  });
  checkMessage(first.choices[0].message);
  if (first.choices[0].finish_reason === 'tool_calls') assert(first.choices[0].message.tool_calls.length > 0, 'calls');
  const r = await client.chat.completions.create({
    model: MODEL, tools: [weatherTool], max_tokens: 8, ignore_eos: true,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, reasoning: 'I should call the tool.',
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
    ],
  });
  checkMessage(r.choices[0].message);
  assert(r.usage.prompt_tokens > 20, 'the history was rendered into the prompt');
}, { api: true });

test('chat: reasoning_effort and include_reasoning', async () => {
  const hi = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Think' }], reasoning_effort: 'high', max_tokens: 4, ignore_eos: true,
  });
  const lo = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Think' }], reasoning_effort: 'low', max_tokens: 4, ignore_eos: true,
  });
  assert(hi.usage.prompt_tokens > 0 && lo.usage.prompt_tokens > 0, 'usage');
  const off = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Think' }], include_reasoning: false, max_tokens: 4, ignore_eos: true,
  });
  assert(off.choices[0].message.reasoning == null, 'include_reasoning: false drops reasoning');
  const e = await client.chat.completions.create({ model: MODEL, messages: [], max_tokens: 1 }).catch((x) => x);
  assert(e instanceof OpenAI.BadRequestError, 'empty messages is a 400');
}, { api: true });

// ---------------------------------------------------------------- responses (API layer)

const OUTPUT_TYPES = new Set(['reasoning', 'message', 'function_call']);

test('responses: not streamed', async () => {
  const r = await client.responses.create({
    model: MODEL, input: 'Hello', instructions: 'Be brief.', max_output_tokens: 8, reasoning: { effort: 'low' },
    tools: [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters }],
  });
  eq(r.object, 'response', 'object');
  assert(['completed', 'incomplete'].includes(r.status), `status ${r.status}`);
  for (const item of r.output) assert(OUTPUT_TYPES.has(item.type), `output item ${item.type}`);
  assert(r.usage.input_tokens > 0 && r.usage.output_tokens <= 8, 'usage');
}, { api: true });

test('responses: streaming events from response.created to response.completed', async () => {
  const events = await collect(await client.responses.create({
    model: MODEL, input: [{ role: 'user', content: 'Hello' }], max_output_tokens: 8, stream: true,
  }));
  const types = events.map((e) => e.type);
  eq(types[0], 'response.created', 'first event');
  assert(['response.completed', 'response.incomplete'].includes(types.at(-1)), `last event ${types.at(-1)}`);
  const seq = events.map((e) => e.sequence_number);
  assert(seq.every((n, i) => i === 0 || n > seq[i - 1]), 'sequence numbers increase');
  for (const e of events.filter((x) => x.type === 'response.output_item.added'))
    assert(OUTPUT_TYPES.has(e.item.type), `item ${e.item.type}`);
}, { api: true });

// ---------------------------------------------------------------- runner

const chatProbe = await fetch(`${BASE}/v1/chat/completions`, {
  method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 1 }),
});
const apiLayer = chatProbe.status !== 501;
let passed = 0, failed = 0, skipped = 0;
for (const t of tests) {
  if (t.api && !apiLayer) {
    console.log(`SKIP ${t.name} (needs the api layer, not merged in this build)`);
    skipped++;
    continue;
  }
  try {
    await t.fn();
    console.log(`ok   ${t.name}`);
    passed++;
  } catch (e) {
    console.log(`FAIL ${t.name}: ${e.stack || e}`);
    failed++;
  }
}
console.log(`server_openai_sdk: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
