// The Vercel AI SDK (`ai` + `@ai-sdk/openai`) against `gptoss serve --model synthetic:tiny` (run by
// tests/test_client_ai_sdk.sh, without and with --api-key). The model's weights are random, so the
// checks are on what the SDK makes of the protocol (text, finish reasons, usage, ids, tool calls in
// the history), never on the words.
import { generateText, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { BASE, MODEL, SDK_KEY, test, assert, eq, run } from './check.mjs';

const openai = createOpenAI({ baseURL: `${BASE}/v1`, apiKey: SDK_KEY });
const FINISH = new Set(['stop', 'length', 'tool-calls']);
const common = { maxOutputTokens: 12, maxRetries: 0 };

function checkResult(r, idPrefix) {
  eq(typeof r.text, 'string', 'text');
  assert(FINISH.has(r.finishReason), `finishReason ${r.finishReason}`);
  assert(r.usage.inputTokens > 0, `inputTokens ${r.usage.inputTokens}`);
  assert(r.usage.outputTokens > 0 && r.usage.outputTokens <= 12, `outputTokens ${r.usage.outputTokens}`);
  assert(r.response.id.startsWith(idPrefix), `response id ${r.response.id}`);
  eq(r.response.modelId, MODEL, 'modelId');
}

async function checkStream(s, idPrefix) {
  let streamed = '';
  for await (const t of s.textStream) streamed += t;
  eq(await s.text, streamed, 'text equals the streamed pieces');
  const finish = await s.finishReason;
  assert(FINISH.has(finish), `finishReason ${finish}`);
  const usage = await s.usage;
  assert(usage.outputTokens > 0 && usage.outputTokens <= 12, `outputTokens ${usage.outputTokens}`);
  const response = await s.response;
  assert(response.id.startsWith(idPrefix), `response id ${response.id}`);
}

const weather = tool({
  description: 'The weather in a city',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, celsius: 21 }),
});

// A finished tool round, as the SDK keeps it in its history after it ran the tool.
const toolHistory = [
  { role: 'user', content: 'What is the weather in Paris?' },
  { role: 'assistant', content: [
    { type: 'tool-call', toolCallId: 'call_weather1', toolName: 'weather', input: { city: 'Paris' } }] },
  { role: 'tool', content: [
    { type: 'tool-result', toolCallId: 'call_weather1', toolName: 'weather',
      output: { type: 'json', value: { city: 'Paris', celsius: 21 } } }] },
];

for (const [api, model, idPrefix] of [['chat', openai.chat(MODEL), 'chatcmpl-'],
  ['responses', openai.responses(MODEL), 'resp_']]) {
  test(`${api}: generateText`, async () => {
    checkResult(await generateText({ model, prompt: 'Hello', ...common }), idPrefix);
  });

  test(`${api}: generateText with a system message, temperature and topP`, async () => {
    const r = await generateText({ model, system: 'Be brief.', prompt: 'Hello', temperature: 0.7,
      topP: 0.9, ...common });
    checkResult(r, idPrefix);
  });

  test(`${api}: streamText`, async () => {
    await checkStream(streamText({ model, prompt: 'Hello', ...common }), idPrefix);
  });

  test(`${api}: tools offered (the tool schema is accepted; any call names the tool)`, async () => {
    const r = await generateText({ model, prompt: 'Weather in Paris?', tools: { weather }, ...common });
    checkResult(r, idPrefix);
    for (const c of r.toolCalls) eq(c.toolName, 'weather', 'tool name');
  });

  test(`${api}: tools, streamed`, async () => {
    await checkStream(streamText({ model, prompt: 'Weather in Paris?', tools: { weather }, ...common }),
      idPrefix);
  });

  test(`${api}: a tool call and its result in the history`, async () => {
    const r = await generateText({ model, messages: toolHistory, tools: { weather }, ...common });
    checkResult(r, idPrefix);
  });
}

test('chat: multi-turn (the first answer goes back as an assistant message)', async () => {
  const model = openai.chat(MODEL);
  const messages = [{ role: 'user', content: 'Hello' }];
  const first = await generateText({ model, messages, ...common });
  messages.push(...first.response.messages, { role: 'user', content: 'And then?' });
  checkResult(await generateText({ model, messages, ...common }), 'chatcmpl-');
});

// The provider's defaults for the Responses API (store: true): the second turn refers to the first
// turn's output items by id ({type: "item_reference"}), which needs the server's response store.
test('responses: multi-turn with the defaults (item_reference to the stored output items)', async () => {
  const sent = [];
  const capturing = createOpenAI({ baseURL: `${BASE}/v1`, apiKey: SDK_KEY, fetch: async (url, init) => {
    sent.push(JSON.parse(init.body));
    return fetch(url, init);
  } });
  const model = capturing(MODEL); // the default provider call is the Responses API
  const messages = [{ role: 'user', content: 'Hello' }];
  const first = await generateText({ model, messages, ...common });
  const ids = first.response.messages.flatMap((m) => m.content)
    .map((p) => p.providerOptions?.openai?.itemId).filter(Boolean);
  assert(ids.length > 0, 'the first answer has output item ids');
  messages.push(...first.response.messages, { role: 'user', content: 'And then?' });
  checkResult(await generateText({ model, messages, ...common }), 'resp_');
  const refs = sent[1].input.filter((i) => i.type === 'item_reference').map((i) => i.id);
  eq(JSON.stringify(refs), JSON.stringify(ids), 'the second request refers to the first answer\'s items');
});

test('responses: multi-turn with store: false (whole items sent back)', async () => {
  const model = openai.responses(MODEL);
  const providerOptions = { openai: { store: false } };
  const messages = [{ role: 'user', content: 'Hello' }];
  const first = await generateText({ model, messages, providerOptions, ...common });
  messages.push(...first.response.messages, { role: 'user', content: 'And then?' });
  checkResult(await generateText({ model, messages, providerOptions, ...common }), 'resp_');
});

test('responses: previousResponseId (provider option previous_response_id)', async () => {
  const model = openai.responses(MODEL);
  const first = await generateText({ model, prompt: 'Hello', ...common });
  const r = await generateText({ model, prompt: 'And then?', ...common,
    providerOptions: { openai: { previousResponseId: first.response.id } } });
  checkResult(r, 'resp_');
});

await run('client_ai_sdk');
