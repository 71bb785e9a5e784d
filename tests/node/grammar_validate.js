// Validates constrained outputs against their JSON Schemas with ajv (test_grammar.c writes them).
// Input: a JSON-lines file of {case, schema, output}; each output must parse as JSON and validate.
// Exit 1 (listing the failures) when any does not.
"use strict";
const fs = require("fs");
const Ajv = require("ajv");
const addFormats = require("ajv-formats");

const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
const lines = fs.readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.length);
const compiled = new Map();
let bad = 0;
for (const line of lines) {
  const { case: idx, schema, output } = JSON.parse(line);
  let validate = compiled.get(idx);
  if (!validate) {
    try {
      validate = ajv.compile(schema);
    } catch (e) {
      console.error(`case ${idx}: ajv refuses the schema (${e.message}): ${JSON.stringify(schema)}`);
      bad++;
      continue;
    }
    compiled.set(idx, validate);
  }
  let value;
  try {
    value = JSON.parse(output);
  } catch (e) {
    console.error(`case ${idx}: not JSON (${e.message}): ${output}`);
    bad++;
    continue;
  }
  if (!validate(value)) {
    console.error(`case ${idx}: invalid: ${ajv.errorsText(validate.errors)}: ${output}`);
    bad++;
  }
}
console.log(`ajv: ${lines.length - bad} of ${lines.length} outputs valid (${compiled.size} schemas)`);
process.exit(bad ? 1 : 0);
