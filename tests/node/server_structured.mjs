// Structured output end to end (issue 16): constrained requests of every kind against a server
// running the random-weight tiny model, whose unconstrained output is noise. Every answer must be
// in its constraint: JSON parsed and validated by ajv, regex outputs matched by JavaScript's RegExp,
// choices compared. Schemas and regexes come from tests/test_grammar_cases.h (the grammar's own
// cases); requests mix chat (response_format, vLLM fields, strict tools, tool_choice), responses
// (text.format) and completions (structured_outputs and the older guided_* names), temperature 0
// and 1. thinking_token_budget 0 (or a few tokens) makes the model answer at once.
// A bias towards the closing tokens (" } ] , and <|return|>) keeps the random model's strings and
// numbers short; it changes which valid output comes out, never whether it is valid.
// Env: BASE, N (requests, default 1000), CONC (parallel requests, default 24).
import fs from "node:fs";
import http from "node:http";
import { createRequire } from "node:module";
const require = createRequire(import.meta.url);
const Ajv = require("ajv");
const addFormats = require("ajv-formats");

const BASE = process.env.BASE;
const N = +(process.env.N || 1000);
const CONC = +(process.env.CONC || 24);
const SRC = process.env.SRC;

// C string literals of an array in the cases header → JS strings (adjacent literals joined).
function cArray(text, name) {
  const start = text.indexOf(name + "[] = {");
  const body = text.slice(text.indexOf("{", start) + 1, text.indexOf("};", start)).replace(/\/\*[\s\S]*?\*\//g, "");
  const out = [];
  let cur = null;
  for (let i = 0; i < body.length; i++) {
    if (body[i] === '"') {
      let j = i + 1;
      while (body[j] !== '"') j += body[j] === "\\" ? 2 : 1;
      cur = (cur || "") + body.slice(i + 1, j);
      i = j;
    } else if (body[i] === ",") {
      if (cur !== null) out.push(JSON.parse('"' + cur + '"'));
      cur = null;
    }
  }
  if (cur !== null) out.push(JSON.parse('"' + cur + '"'));
  return out;
}

const header = fs.readFileSync(`${SRC}/tests/test_grammar_cases.h`, "utf8");
const schemas = cArray(header, "schema_cases").map((s) => JSON.parse(s));
const regexes = cArray(header, "regex_cases_ecma");
const choices = [["yes", "no"], ["red", "green", "blue", "gr\u00fcn"], ["a \"quoted\" one", "\u7eff", "x"]];
if (schemas.length < 30) throw new Error(`only ${schemas.length} schemas parsed from the cases`);

const closed = schemas.map((s, i) => [JSON.stringify(s), i]).filter(([t]) => !/"(string|number|integer)"|"pattern"|"format"/.test(t) && !/"items":\{[^}]*\}\}?$/.test(t)).map(([, i]) => i);
if (closed.length < 3) throw new Error("too few schemas without free strings");
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const validators = schemas.map((s) => ajv.compile(s));
const otherSchema = ajv.compile({ type: "object", properties: { q: { type: "integer" } }, required: ["q"], additionalProperties: false });
const pickSchema = ajv.compile({ type: "object", properties: { v: { type: "array", items: { enum: ["a", "b", "\u00e9"] }, maxItems: 3 } }, required: ["v"], additionalProperties: false });

let seed = 12345; // mulberry32: a fixed sequence of requests
const rnd = (n) => {
  let t = (seed = (seed + 0x6d2b79f5) | 0);
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) % n;
};

// Bias on '"', '}', ']', ',', '"}' (and <|return|>, which closes a number at the top level); ']' and
// '}' above ',' so free-form JSON (json_object) closes its containers (at ',' = ']' one in 54 ran past
// max_tokens), and '"' well above ']' and '}', which strings may hold: at temperature 0 the random
// model repeats its argmax, and with ']' at 14 it wrote ']' inside a string until max_tokens. Not on
// <|return|> when the request has reasoning: the analysis message is never masked, and a random
// model that ends its turn there gives no answer at all (so would an unconstrained one).
const BIAS = { 1: 16, 92: 14, 60: 10, 11: 6, 18583: 16 };
const BIAS_RETURN = { ...BIAS, 200002: 14 };
// Constraints that end by themselves (no number open at the top level), for requests with reasoning.
const selfEnding = schemas.map((s, i) => [s, i]).filter(([s]) => s.type === "object" || s.type === "array" || "enum" in s || "const" in s).map(([, i]) => i);
const unboundedRegex = new Set(regexes.map((r, i) => [r, i]).filter(([r]) => r.includes("[0-9]*")).map(([, i]) => i));
const messages = [{ role: "user", content: "Answer in the requested format." }];

// One request: [path, body, kind of check, the constraint]
function makeRequest(i) {
  const temperature = i % 2;
  const pick = rnd(20);
  let s = rnd(schemas.length), r = rnd(regexes.length);
  const c = rnd(choices.length);
  const budget = pick < 14 && rnd(4) === 0 ? 2 : 0;
  if (budget) {
    s = selfEnding[s % selfEnding.length];
    if (unboundedRegex.has(r)) r = (r + 1) % regexes.length;
  }
  const common = { model: "synthetic:tiny", temperature, seed: i, logit_bias: budget ? BIAS : BIAS_RETURN };
  const chat = { ...common, messages, max_tokens: 400, thinking_token_budget: budget };
  if (pick < 6)
    return ["/v1/chat/completions", { ...chat, response_format: { type: "json_schema", json_schema: { name: "out", strict: true, schema: schemas[s] } } }, "schema", s];
  if (pick < 7) return ["/v1/chat/completions", { ...chat, response_format: { type: "json_object" } }, "object"];
  if (pick < 8) return ["/v1/chat/completions", { ...chat, structured_outputs: { regex: regexes[r] } }, "regex", r];
  if (pick < 9) return ["/v1/chat/completions", { ...chat, guided_choice: choices[c] }, "choice", c];
  if (pick < 11) {
    const named = rnd(2) === 0;
    const tools = [
      { type: "function", function: { name: "other", parameters: { type: "object", properties: { q: { type: "integer" } }, required: ["q"], additionalProperties: false }, strict: true } },
      { type: "function", function: { name: "act", description: "does it", parameters: schemas[s], strict: true } },
    ];
    const tool_choice = named ? { type: "function", function: { name: "act" } } : "required";
    return ["/v1/chat/completions", { ...chat, tools, tool_choice }, named ? "tool:act" : "tool", s];
  }
  if (pick < 12) { // responses: a strict tool that tool_choice names (arguments are an enum array)
    const tools = [{ type: "function", name: "pick", parameters: { type: "object", properties: { v: { type: "array", items: { enum: ["a", "b", "\u00e9"] }, maxItems: 3 } }, required: ["v"], additionalProperties: false }, strict: true }];
    return ["/v1/responses", { model: "synthetic:tiny", temperature, seed: i, input: "Call it.", max_output_tokens: 300, thinking_token_budget: budget, tools, tool_choice: { type: "function", name: "pick" } }, "tool:pick", -1];
  }
  if (pick < 14) {
    const body = { ...common, input: "Answer in the requested format.", max_output_tokens: 400, thinking_token_budget: budget };
    // /v1/responses applies no logit_bias: its schemas are those a random model finishes unaided
    // (no free strings or numbers)
    const rs = closed[rnd(closed.length)];
    return ["/v1/responses", { ...body, text: { format: { type: "json_schema", name: "out", schema: schemas[rs] } } }, "schema", rs];
  }
  const comp = { ...common, prompt: "The answer:", max_tokens: 300 };
  if (pick < 16) return ["/v1/completions", { ...comp, structured_outputs: { json: schemas[s] } }, "schema", s];
  if (pick < 17) return ["/v1/completions", { ...comp, guided_json: JSON.stringify(schemas[s]) }, "schema", s];
  if (pick < 18) return ["/v1/completions", { ...comp, guided_regex: regexes[r] }, "regex", r];
  if (pick < 19) return ["/v1/completions", { ...comp, structured_outputs: { choice: choices[c] } }, "choice", c];
  return ["/v1/completions", { ...comp, structured_outputs: { regex: regexes[r] } }, "regex", r];
}

// The answer text (or the tool call) of a response.
function answerOf(path, j) {
  if (path === "/v1/completions") return { text: j.choices[0].text, finish: j.choices[0].finish_reason };
  if (path === "/v1/chat/completions") {
    const m = j.choices[0].message;
    if (m.tool_calls && m.tool_calls.length) return { call: m.tool_calls[0].function, finish: j.choices[0].finish_reason };
    return { text: m.content, finish: j.choices[0].finish_reason };
  }
  const fc = j.output.find((o) => o.type === "function_call");
  if (fc) return { call: { name: fc.name, arguments: fc.arguments }, finish: j.status };
  const msg = j.output.find((o) => o.type === "message");
  return { text: msg ? msg.content.map((c) => c.text).join("") : null, finish: j.status };
}

function check(kind, idx, a) {
  if (kind.startsWith("tool")) {
    if (!a.call) return "no tool call";
    const want = kind.split(":")[1];
    if (want && a.call.name !== want) return `called ${a.call.name}, not ${want}`;
    let v;
    try { v = JSON.parse(a.call.arguments); } catch (e) { return `arguments not JSON: ${a.call.arguments}`; }
    const val = a.call.name === "act" ? validators[idx] : a.call.name === "pick" ? pickSchema : otherSchema;
    return val(v) ? null : `arguments invalid (${ajv.errorsText(val.errors)}): ${a.call.arguments}`;
  }
  if (a.text == null) return `no answer (finish ${a.finish})`;
  if (kind === "choice") return choices[idx].includes(a.text) ? null : `not a choice: ${JSON.stringify(a.text)}`;
  if (kind === "regex") return new RegExp(`^(?:${regexes[idx]})$`, "u").test(a.text) ? null : `regex ${regexes[idx]} does not match ${JSON.stringify(a.text)}`;
  let v;
  try { v = JSON.parse(a.text); } catch (e) { return `not JSON (${e.message}): ${JSON.stringify(a.text)}`; }
  if (kind === "object") return v !== null && typeof v === "object" && !Array.isArray(v) ? null : "not an object";
  return validators[idx](v) ? null : `invalid (${ajv.errorsText(validators[idx].errors)}): ${a.text}`;
}

// POST without a client-side timeout (fetch gives up on headers after 300 s; on a loaded 2-core
// box a long answer can take that long).
function post(path, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const u = new URL(BASE + path);
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: "POST", headers: { "content-type": "application/json", "content-length": Buffer.byteLength(data) } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (text += c));
      res.on("end", () => {
        try { resolve({ status: res.statusCode, json: JSON.parse(text) }); } catch (e) { reject(new Error(`${path}: not JSON: ${text.slice(0, 200)}`)); }
      });
    });
    req.on("error", reject);
    req.end(data);
  });
}

const counts = {};
const slowest = [];
let completionTokens = 0;
const failures = [];
let next = 0;
async function worker() {
  while (next < N) {
    const i = next++;
    const [path, body, kind, idx] = makeRequest(i);
    const key = `${path} ${kind}`;
    counts[key] = (counts[key] || 0) + 1;
    const t = Date.now();
    const res = await post(path, body);
    const j = res.json;
    const used = j.usage ? j.usage.completion_tokens ?? j.usage.output_tokens ?? 0 : 0;
    completionTokens += used;
    slowest.push([Date.now() - t, used, `#${i} ${key}`]);
    if (res.status !== 200) { failures.push(`#${i} ${key}: HTTP ${res.status} ${JSON.stringify(j)}`); continue; }
    const err = check(kind, idx, answerOf(path, j));
    if (err) failures.push(`#${i} ${key} (case ${idx}, t=${body.temperature}): ${err}`);
  }
}

// Refusals first: a bad schema, regex or choice is a 400 naming the field.
const bad = [
  ["/v1/chat/completions", { model: "synthetic:tiny", messages, response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "object", properties: { a: { type: "string", maxLength: 3 } } } } } }, "response_format.json_schema.schema"],
  ["/v1/completions", { model: "synthetic:tiny", prompt: "x", guided_regex: "(a" }, "guided_regex"],
  ["/v1/completions", { model: "synthetic:tiny", prompt: "x", structured_outputs: { choice: [] } }, "structured_outputs.choice"],
  ["/v1/completions", { model: "synthetic:tiny", prompt: "x", structured_outputs: { json: { type: "string" } }, guided_regex: "a" }, "guided_regex"],
  ["/v1/responses", { model: "synthetic:tiny", input: "x", text: { format: { type: "json_schema", name: "x", schema: { $ref: "#/$defs/a", $defs: { a: { $ref: "#/$defs/a" } } } } } }, "text.format.schema"],
  ["/v1/chat/completions", { model: "synthetic:tiny", messages, tools: [{ type: "function", function: { name: "f", parameters: { type: "object", patternProperties: { x: {} } }, strict: true } }] }, "tools[0].function.parameters"],
  ["/v1/chat/completions", { model: "synthetic:tiny", messages, thinking_token_budget: -1 }, "thinking_token_budget"],
  ["/v1/completions", { model: "synthetic:tiny", prompt: "x", thinking_token_budget: 3 }, "thinking_token_budget"],
];
for (const [path, body, param] of bad) {
  const res = await post(path, body);
  const j = res.json;
  if (res.status !== 400 || j.error.param !== param) failures.push(`refusal ${param}: HTTP ${res.status} ${JSON.stringify(j)}`);
}

const t0 = Date.now();
await Promise.all(Array.from({ length: CONC }, worker));
console.log(`${N} constrained requests in ${((Date.now() - t0) / 1000).toFixed(1)} s over ${schemas.length} schemas, ${regexes.length} regexes, ${choices.length} choices; ${completionTokens} tokens generated`);
for (const [k, v] of Object.entries(counts).sort()) console.log(`  ${k}: ${v}`);
slowest.sort((a, b) => b[0] - a[0]);
console.log("slowest: " + slowest.slice(0, 3).map(([ms, n, what]) => `${what} ${n} tokens ${(ms / 1000).toFixed(1)} s`).join("; "));
if (failures.length) {
  console.log(`${failures.length} FAILED:`);
  for (const f of failures.slice(0, 30)) console.log("  " + f);
  process.exit(1);
}
console.log("all valid");
