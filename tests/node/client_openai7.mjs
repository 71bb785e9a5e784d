// `openai` 7 (npm alias openai7; the server's own suite, server_openai_sdk.mjs, drives `openai` 6)
// against `gptoss serve --model synthetic:tiny` (run by tests/test_client_openai7.sh, without and
// with --api-key): its helpers (chat stream, runTools, responses.stream), the stored-response calls,
// models.retrieve, echo scoring and completions logprobs. Random weights: shapes, not words.
import OpenAI from 'openai7';
import { BASE, KEY, MODEL, SDK_KEY, test, assert, eq, rejects, run } from './check.mjs';

const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: SDK_KEY, maxRetries: 0, timeout: 120000 });

test('models.retrieve: the served model; another id is NotFoundError', async () => {
  const m = await client.models.retrieve(MODEL);
  eq(m.id, MODEL, 'id');
  eq(m.object, 'model', 'object');
  const e = await rejects(client.models.retrieve('no-such-model'), () => {}, 'unknown model');
  assert(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
});

test('chat.completions.stream helper: content events add up to the final completion', async () => {
  let deltas = '';
  let chunks = 0;
  const stream = client.chat.completions.stream({
    model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12,
    stream_options: { include_usage: true },
  });
  stream.on('content', (delta) => { deltas += delta; });
  stream.on('chunk', () => { chunks++; });
  const done = await stream.finalChatCompletion();
  eq(done.choices.length, 1, 'choices');
  const msg = done.choices[0].message;
  eq(msg.role, 'assistant', 'role');
  eq(msg.content ?? '', deltas, 'content equals the content events');
  assert(['stop', 'length'].includes(done.choices[0].finish_reason), `finish ${done.choices[0].finish_reason}`);
  assert(done.usage && done.usage.completion_tokens > 0 && done.usage.completion_tokens <= 12,
    `usage ${JSON.stringify(done.usage)}`);
  assert(chunks >= 2, `chunks ${chunks}`);
});

// The runner refuses an answer cut by the length limit, and the random model never ends by itself:
// its answers end on a stop string instead (any vowel, which some early token has; seeded).
test('chat.completions.runTools: the runner finishes (any call runs the tool)', async () => {
  let calls = 0;
  const runner = client.chat.completions.runTools({
    model: MODEL, messages: [{ role: 'user', content: 'Weather in Paris?' }], max_tokens: 64,
    stop: ['a', 'e', 'i', 'o'], seed: 3,
    tools: [{ type: 'function', function: {
      name: 'weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      function: async () => { calls++; return '21 C'; },
    } }],
  }, { maxChatCompletions: 3 });
  const content = await runner.finalContent();
  assert(content === null || typeof content === 'string', 'final content');
  const total = await runner.totalUsage();
  assert(total.completion_tokens > 0, 'usage');
  assert(calls <= 3, 'tool calls');
});

test('responses.stream helper: text deltas add up to the final response', async () => {
  let deltas = '';
  const events = [];
  const stream = client.responses.stream({ model: MODEL, input: 'Hello', max_output_tokens: 12 });
  stream.on('response.output_text.delta', (e) => { deltas += e.delta; });
  stream.on('event', (e) => events.push(e.type));
  const r = await stream.finalResponse();
  eq(events[0], 'response.created', 'first event');
  assert(['completed', 'incomplete'].includes(r.status), `status ${r.status}`);
  eq(r.output_text, deltas, 'output_text equals the text deltas');
  assert(r.id.startsWith('resp_'), `id ${r.id}`);
  assert(r.usage.output_tokens > 0 && r.usage.output_tokens <= 12, 'usage');
});

test('responses.retrieve and responses.delete of a stored response', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 8 });
  const got = await client.responses.retrieve(r.id);
  eq(got.id, r.id, 'id');
  eq(got.output_text, r.output_text, 'output_text');
  eq(JSON.stringify(got.output.map((o) => o.type)), JSON.stringify(r.output.map((o) => o.type)), 'items');
  await client.responses.delete(r.id);
  const e = await rejects(client.responses.retrieve(r.id), () => {}, 'retrieve after delete');
  assert(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
});

test('responses: store: false keeps nothing (retrieve is NotFoundError)', async () => {
  const r = await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 4, store: false });
  const e = await rejects(client.responses.retrieve(r.id), () => {}, 'retrieve');
  assert(e instanceof OpenAI.NotFoundError, `NotFoundError, got ${e}`);
});

test('responses: previous_response_id continues a stored response', async () => {
  const first = await client.responses.create({ model: MODEL, input: 'Hello', max_output_tokens: 8 });
  const second = await client.responses.create({ model: MODEL, input: 'And then?', max_output_tokens: 8,
    previous_response_id: first.id });
  eq(second.previous_response_id, first.id, 'previous_response_id');
  assert(second.usage.input_tokens > first.usage.input_tokens, 'the first turn is in the prompt');
});

// Echo scoring (lm-eval-harness and friends): the prompt's own logprobs, no generation.
test('completions: echo scoring with max_tokens 0', async () => {
  const prompt = 'The capital of France is Paris.';
  const r = await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 1, max_tokens: 0 });
  const c = r.choices[0];
  eq(c.text, prompt, 'the text is the prompt');
  eq(r.usage.completion_tokens, 0, 'completion_tokens');
  const lp = c.logprobs;
  eq(lp.tokens.length, r.usage.prompt_tokens, 'an entry per prompt token');
  eq(lp.token_logprobs[0], null, 'the first token has no logprob');
  for (let i = 1; i < lp.token_logprobs.length; i++)
    assert(typeof lp.token_logprobs[i] === 'number' && lp.token_logprobs[i] <= 0,
      `token_logprobs[${i}] = ${lp.token_logprobs[i]}`);
});

test('completions: echo with generation gives every prompt token its own logprob', async () => {
  const prompt = 'Scoring every token of this prompt.';
  const r = await client.completions.create({ model: MODEL, prompt, echo: true, logprobs: 0, max_tokens: 2,
    ignore_eos: true });
  const lp = r.choices[0].logprobs;
  eq(lp.tokens.length, r.usage.prompt_tokens + 2, 'entries: prompt + completion');
  for (let i = 1; i < lp.token_logprobs.length; i++)
    eq(typeof lp.token_logprobs[i], 'number', `token_logprobs[${i}]`);
});

// Every sampled token has its logprob entry (a special token hidden by skip_special_tokens too),
// so the arrays line up with completion_tokens, whatever the seed makes the model write. 40 seeds
// in the run with --api-key; the run without repeats the first 8 (the key changes nothing here,
// and 40 seeds cost half a minute on a busy 2-core machine).
test(`completions: logprobs arrays as long as completion_tokens over ${KEY ? 40 : 8} seeds`, async () => {
  const seeds = Array.from({ length: process.env.SANITIZED === '1' ? 4 : KEY ? 40 : 8 }, (_, i) => i + 1);
  for (let i = 0; i < seeds.length; i += 8) { // 8 at a time: the engine batches them
    await Promise.all(seeds.slice(i, i + 8).map(async (seed) => {
      const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8,
        logprobs: 2, seed, temperature: 1 });
      const lp = r.choices[0].logprobs;
      const n = r.usage.completion_tokens;
      for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset'])
        eq(lp[k].length, n, `seed ${seed}: ${k}.length vs completion_tokens`);
    }));
  }
});

test('errors: a bad request is BadRequestError with the parameter named', async () => {
  const e = await rejects(client.chat.completions.create({ model: MODEL, messages: [], max_tokens: 4 }),
    () => {}, 'empty messages');
  assert(e instanceof OpenAI.BadRequestError, `BadRequestError, got ${e}`);
});

if (KEY) {
  test('--api-key: a wrong key is AuthenticationError', async () => {
    const bad = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong', maxRetries: 0 });
    const e = await rejects(bad.models.list(), () => {}, 'wrong key');
    assert(e instanceof OpenAI.AuthenticationError, `AuthenticationError, got ${e}`);
  });
}

await run('client_openai7');
