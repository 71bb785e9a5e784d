// Echo scoring on /v1/completions through the official `openai` SDK (run by
// tests/test_server_echo.sh against `gptoss serve --model synthetic:tiny --api-key …
// --max-num-batched-tokens 16`, so long prompts are prefilled in chunks): every echoed prompt token
// after the first has its own logprob, max_tokens 0 scores the prompt alone, and the scores do not
// depend on what follows, on chunking, or on the prefix cache.
import OpenAI from 'openai';

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const MODEL = process.env.MODEL;
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });

const tests = [];
const test = (name, fn) => tests.push({ name, fn });
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}
function eq(a, b, msg) {
  if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, expected ${JSON.stringify(b)}`);
}
const LONG = 'The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill, '
  + 'and somewhere far away a train whistles twice before the evening rain begins to fall softly.';
const score = (prompt, extra = {}) =>
  client.completions.create({ model: MODEL, prompt, max_tokens: 0, echo: true, logprobs: 1, ...extra });

test('max_tokens 0 with echo: the prompt alone, every token scored', async () => {
  const r = await score(LONG);
  const c = r.choices[0];
  eq(c.text, LONG, 'text');
  eq(c.finish_reason, 'length', 'finish_reason');
  eq(r.usage.completion_tokens, 0, 'completion_tokens');
  const lp = c.logprobs;
  eq(lp.tokens.length, r.usage.prompt_tokens, 'one entry per prompt token');
  eq(lp.token_logprobs[0], null, 'the first token has nothing to predict it');
  for (let i = 1; i < lp.tokens.length; i++) {
    const x = lp.token_logprobs[i];
    assert(typeof x === 'number' && x <= 0 && x > -1e4, `token ${i}: ${x}`);
    assert(lp.top_logprobs[i][lp.tokens[i]] === x, `token ${i} is in its own top_logprobs`);
    assert(Object.keys(lp.top_logprobs[i]).length <= 2, `token ${i}: itself and at most 1 more`);
  }
  eq(lp.text_offset[0], 0, 'offsets start at 0');
});

test('the scores do not depend on what follows, nor on the prefix cache', async () => {
  const a = (await score(LONG)).choices[0].logprobs.token_logprobs;
  const b = (await score(LONG)).choices[0].logprobs.token_logprobs; // cached prompt, same rows
  const more = await score(`${LONG} Then silence.`);
  const c = more.choices[0].logprobs.token_logprobs;
  eq(JSON.stringify(b), JSON.stringify(a), 'a repeated request');
  // The longer prompt's first tokens are the same tokens, scored on the same context; the last
  // token of LONG may merge with what follows, so compare all but it.
  for (let i = 1; i < a.length - 1; i++)
    assert(Math.abs(c[i] - a[i]) < 1e-4, `token ${i}: ${c[i]} vs ${a[i]}`);
});

test('echo with generated tokens: the prompt part is the same, the rest follows', async () => {
  const only = (await score(LONG)).choices[0].logprobs;
  const r = await client.completions.create({
    model: MODEL, prompt: LONG, max_tokens: 3, ignore_eos: true, echo: true, logprobs: 1,
  });
  const lp = r.choices[0].logprobs;
  eq(lp.tokens.length, only.tokens.length + 3, 'prompt + 3');
  eq(JSON.stringify(lp.token_logprobs.slice(0, only.tokens.length)), JSON.stringify(only.token_logprobs), 'prompt scores');
  assert(r.choices[0].text.startsWith(LONG), 'text starts with the prompt');
  eq(r.usage.completion_tokens, 3, 'completion_tokens');
});

test('max_tokens 0: token-id prompts, a list of prompts, n, streaming', async () => {
  const r = await score([[13225, 2375, 13], 'Hello world'], { n: 2 });
  eq(r.choices.length, 4, 'choices');
  for (const c of r.choices) {
    assert(c.text.startsWith('Hello world'), `text ${c.text}`);
    eq(c.logprobs.tokens.length, c.text === 'Hello world' ? 2 : 3, 'entries');
    assert(c.logprobs.token_logprobs.slice(1).every((x) => typeof x === 'number'), 'all scored');
  }
  const stream = await score('Hello world', { stream: true, stream_options: { include_usage: true } });
  let text = '', usage, entries = 0;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.text;
      entries += c.logprobs?.tokens?.length ?? 0;
    }
  }
  eq(text, 'Hello world', 'streamed text');
  eq(entries, 2, 'streamed entries');
  eq(usage.completion_tokens, 0, 'streamed completion_tokens');
});

test('max_tokens 0 without echo is a 400 naming max_tokens', async () => {
  try {
    await client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 0 });
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, `${e}`);
    eq(e.param ?? e.error?.param, 'max_tokens', 'param');
    return;
  }
  throw new Error('accepted');
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
console.log(`server_echo: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
