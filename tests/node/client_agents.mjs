// The OpenAI Agents SDK (`@openai/agents`) against `gptoss serve --model synthetic:tiny` (run by
// tests/test_client_agents.sh, without and with --api-key), on both of its model classes: the
// Responses model and the Chat Completions model. Random weights: the checks are on the run's
// shape (final output, response ids, history, usage), not on the words.
import { Agent, run, tool, user, setTracingDisabled, OpenAIResponsesModel,
  OpenAIChatCompletionsModel } from '@openai/agents';
import OpenAI from 'openai7';
import { BASE, MODEL, SDK_KEY, test, assert, eq, run as runSuite } from './check.mjs';

setTracingDisabled(true); // traces would go to api.openai.com
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: SDK_KEY, maxRetries: 0 });

// strict: false. The SDK marks tools strict by default, and the server now enforces strict
// arguments (structured outputs): the random model then writes the tool's JSON for real, and its
// strings rarely close within a turn's token budget, while the vowel stop strings below would end
// the arguments' JSON early (stop strings match message bodies only, never harmony headers, but an
// argument body is one). Strict enforcement is tested by test_server_structured
// (1,000 requests checked by ajv); here the SDK's tool loop is what is under test.
const weather = tool({
  name: 'weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'],
    additionalProperties: true },
  strict: false,
  execute: async (input) => `${typeof input === 'string' ? input : input?.city}: 21 C`,
});

// The SDK takes a Responses answer cut by max_output_tokens ("incomplete") as a failed run, and the
// random model never ends by itself: the run's answers end on a stop string (a vLLM extension our
// Responses API takes too), any vowel, which some early token has; the seed keeps it repeatable.
function agentFor(model, extra = {}) {
  return new Agent({ name: 'tester', instructions: 'Answer briefly.', model,
    modelSettings: { maxTokens: 64, providerData: { stop: ['a', 'e', 'i', 'o'], seed: 3 } }, ...extra });
}

function checkRun(r, what) {
  eq(typeof r.finalOutput, 'string', `${what}: finalOutput`);
  assert(r.rawResponses.length >= 1, `${what}: raw responses`);
  const u = r.state.usage;
  assert(u.requests >= 1 && u.inputTokens > 0 && u.outputTokens > 0, `${what}: usage ${JSON.stringify(u)}`);
}

for (const [name, model] of [
  ['Responses model', new OpenAIResponsesModel(client, MODEL)],
  ['Chat Completions model', new OpenAIChatCompletionsModel(client, MODEL)],
]) {
  test(`${name}: run`, async () => {
    checkRun(await run(agentFor(model), 'Hello'), 'run');
  });

  test(`${name}: run, streamed`, async () => {
    const r = await run(agentFor(model), 'Hello', { stream: true });
    let events = 0;
    for await (const _ of r) events++;
    await r.completed;
    assert(events >= 2, `events: ${events}`);
    checkRun(r, 'streamed');
  });

  test(`${name}: an agent with a tool`, async () => {
    checkRun(await run(agentFor(model, { tools: [weather] }), 'Weather in Paris?'), 'tools');
  });

  test(`${name}: second turn from the first turn's history`, async () => {
    const agent = agentFor(model);
    const first = await run(agent, 'Hello');
    checkRun(await run(agent, [...first.history, user('And then?')]), 'second turn');
  });
}

// previousResponseId: the server continues from the response it stored.
test('Responses model: second turn with previousResponseId', async () => {
  const agent = agentFor(new OpenAIResponsesModel(client, MODEL));
  const first = await run(agent, 'Hello');
  assert(first.lastResponseId?.startsWith('resp_'), `lastResponseId ${first.lastResponseId}`);
  const second = await run(agent, 'And then?', { previousResponseId: first.lastResponseId });
  checkRun(second, 'second turn');
  assert(second.lastResponseId !== first.lastResponseId, 'a new response');
});

// Chat Completions has no server-side state: the SDK ignores previousResponseId on this model (with
// a warning) and the run must still work from the input it was given.
test('Chat Completions model: previousResponseId is ignored by the SDK, the run still works', async () => {
  const agent = agentFor(new OpenAIChatCompletionsModel(client, MODEL));
  const first = await run(agent, 'Hello');
  checkRun(await run(agent, 'And then?', { previousResponseId: first.lastResponseId ?? 'resp_none' }),
    'second turn');
});

await runSuite('client_agents');
