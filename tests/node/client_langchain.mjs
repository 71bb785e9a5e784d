// LangChain's OpenAI integration (`@langchain/openai`) against `gptoss serve --model synthetic:tiny`
// (run by tests/test_client_langchain.sh, without and with --api-key). Random weights: the checks
// are on the messages, chunks, usage and generations LangChain builds from our answers.
import { ChatOpenAI, OpenAI } from '@langchain/openai';
import { AIMessage, AIMessageChunk } from '@langchain/core/messages';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';
import { BASE, MODEL, SDK_KEY, test, assert, eq, run } from './check.mjs';

const configuration = { baseURL: `${BASE}/v1` };
const base = { model: MODEL, apiKey: SDK_KEY, configuration, maxRetries: 0, maxTokens: 12 };
const chat = new ChatOpenAI(base);
const responsesChat = new ChatOpenAI({ ...base, useResponsesApi: true });

function checkMessage(m, what, maxTokens = 12) {
  assert(m instanceof AIMessage, `${what}: an AIMessage`);
  eq(typeof m.content === 'string' || Array.isArray(m.content), true, `${what}: content`);
  const u = m.usage_metadata;
  assert(u && u.input_tokens > 0 && u.output_tokens > 0 && u.output_tokens <= maxTokens,
    `${what}: usage_metadata ${JSON.stringify(u)}`);
  eq(u.total_tokens, u.input_tokens + u.output_tokens, `${what}: total_tokens`);
}

const weather = tool(async ({ city }) => `${city}: 21 C`, {
  name: 'weather',
  description: 'The weather in a city',
  schema: z.object({ city: z.string() }),
});

for (const [api, model] of [['chat', chat], ['responses (useResponsesApi)', responsesChat]]) {
  test(`${api}: invoke`, async () => {
    const m = await model.invoke([['system', 'Be brief.'], ['human', 'Hello']]);
    checkMessage(m, 'invoke');
    assert(m.id, 'message id');
  });

  test(`${api}: stream (chunks concatenate to one message with usage)`, async () => {
    let full;
    let n = 0;
    for await (const c of await model.stream('Hello')) {
      assert(c instanceof AIMessageChunk, 'an AIMessageChunk');
      full = full ? full.concat(c) : c;
      n++;
    }
    assert(n >= 2, `chunks: ${n}`);
    const u = full.usage_metadata;
    assert(u && u.output_tokens > 0 && u.output_tokens <= 12, `usage ${JSON.stringify(u)}`);
  });

  test(`${api}: batch of three`, async () => {
    const out = await model.batch(['one', 'two', 'three']);
    eq(out.length, 3, 'answers');
    out.forEach((m, i) => checkMessage(m, `batch[${i}]`));
  });

  test(`${api}: bindTools (any tool call names the tool with parsed arguments)`, async () => {
    const m = await model.bindTools([weather]).invoke('Weather in Paris?');
    checkMessage(m, 'bindTools');
    for (const c of m.tool_calls ?? []) {
      eq(c.name, 'weather', 'tool name');
      eq(typeof c.args, 'object', 'parsed args');
    }
  });

  test(`${api}: a tool call and its result in the history`, async () => {
    const m = await model.bindTools([weather]).invoke([
      ['human', 'Weather in Paris?'],
      new AIMessage({ content: '', tool_calls: [{ id: 'call_w1', name: 'weather', args: { city: 'Paris' } }] }),
      { role: 'tool', content: 'Paris: 21 C', tool_call_id: 'call_w1' },
    ]);
    checkMessage(m, 'after the tool result');
  });

  // The chat path parses with the openai SDK's helper, which refuses an answer cut by the length
  // limit, so the answer is made to end on a stop string (a vowel: some early token has one). The
  // random model's text is not JSON (structured output is not wired into the sampler yet), so the
  // parse fails, in the SDK's JSON.parse (chat) or with includeRaw's parsed: null (responses):
  // what is checked is that the schema went out as the response format and a valid answer came
  // back. Once outputs are constrained, the parsed object must fit the schema.
  test(`${api}: withStructuredOutput (JSON schema response format)`, async () => {
    const schema = z.object({ name: z.string(), age: z.number() });
    const sent = [];
    const capture = async (url, init) => {
      sent.push(JSON.parse(init.body));
      return fetch(url, init);
    };
    const responses = model === responsesChat; // no stop strings there, and no length refusal
    const stopping = new ChatOpenAI({ ...base, maxTokens: responses ? 12 : 64, stop: ['a', 'e', 'i', 'o'],
      modelKwargs: { seed: 1 }, useResponsesApi: responses,
      configuration: { ...configuration, fetch: capture } });
    let out = null;
    try {
      out = await stopping.withStructuredOutput(schema, { name: 'person', includeRaw: true })
        .invoke('Make up a person.');
    } catch (e) {
      assert(e instanceof SyntaxError, `only a JSON parse error is expected, got ${e}`);
    }
    eq(sent.length, 1, 'requests');
    const fmt = responses ? sent[0].text?.format : sent[0].response_format?.json_schema;
    assert(fmt && fmt.name === 'person', `schema format sent: ${JSON.stringify(sent[0]).slice(0, 300)}`);
    eq(JSON.stringify(Object.keys(fmt.schema.properties)), '["name","age"]', 'schema properties');
    if (out) checkMessage(out.raw, 'raw', 64);
    if (out?.parsed != null) {
      eq(typeof out.parsed.name, 'string', 'parsed.name');
      eq(typeof out.parsed.age, 'number', 'parsed.age');
    }
  });
}

test('chat: withStructuredOutput through function calling', async () => {
  const schema = z.object({ city: z.string() });
  const out = await chat.withStructuredOutput(schema, { name: 'place', method: 'functionCalling',
    includeRaw: true }).invoke('Name a city.');
  checkMessage(out.raw, 'raw');
});

test('chat: logprobs come through in response_metadata', async () => {
  const m = await new ChatOpenAI({ ...base, logprobs: true, topLogprobs: 2 }).invoke('Hello');
  const lp = m.response_metadata.logprobs;
  assert(lp && Array.isArray(lp.content), `logprobs ${JSON.stringify(lp)?.slice(0, 200)}`);
  for (const e of lp.content) eq(typeof e.logprob, 'number', 'logprob');
});

// LangChain's completion model sends every prompt of generate() in one request: a prompt list.
test('OpenAI (completions): generate with two prompts', async () => {
  const llm = new OpenAI({ ...base, maxTokens: 6, modelKwargs: { ignore_eos: true } });
  const r = await llm.generate(['Hello', 'Goodbye']);
  eq(r.generations.length, 2, 'one generation list per prompt');
  for (const g of r.generations) {
    eq(g.length, 1, 'one generation');
    eq(typeof g[0].text, 'string', 'text');
    eq(g[0].generationInfo.finishReason, 'length', 'finishReason');
  }
  eq(r.llmOutput.tokenUsage.completionTokens, 12, 'completion tokens of both prompts');
});

test('OpenAI (completions): invoke and stream', async () => {
  const llm = new OpenAI({ ...base, maxTokens: 6, modelKwargs: { ignore_eos: true } });
  eq(typeof (await llm.invoke('Hello')), 'string', 'invoke');
  let text = '';
  let n = 0;
  for await (const piece of await llm.stream('Hello')) {
    text += piece;
    n++;
  }
  assert(n >= 1, 'streamed pieces');
  eq(typeof text, 'string', 'streamed text');
});

await run('client_langchain');
