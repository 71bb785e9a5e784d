/* Tool descriptions for the system and developer messages (internal to src/harmony/harmony_*).
 *
 * gpt-oss was trained to read tools as a TypeScript-like namespace, not as JSON Schema:
 *
 *   ## functions
 *
 *   namespace functions {
 *
 *   // Gets the weather.
 *   type get_weather = (_: {
 *   location: string,
 *   unit?: "c" | "f", // default: c
 *   }) => any;
 *
 *   } // namespace functions
 *
 * These functions turn a schema into that text, reproducing the reference renderer's output byte
 * for byte (its quirks included: they are what the model saw in training). */
#ifndef GPTOSS_HARMONY_TOOLS_H
#define GPTOSS_HARMONY_TOOLS_H

#include "harmony/harmony_render.h"
#include "harmony/harmony_strbuf.h"

#include <jansson.h>

/* Appends "# Tools" and one "## NAME" part per namespace, in byte order of the names (the reference
 * keeps namespaces in a sorted map), parts separated by blank lines. */
void harmony_tools_section(hsb *out, const harmony_namespace *const *ns, size_t n);

/* Appends the TypeScript-like type of a JSON Schema; `indent` prefixes the lines of nested objects.
 */
void harmony_schema_to_ts(hsb *out, const json_t *schema, const char *indent);

/* Appends v as compact JSON the way serde_json prints a value (the reference writes `default:`
 * values so): no spaces, keys in insertion order, lower-case \u escapes, non-ASCII as is, and reals
 * in their shortest round-trip form with ".0" on whole numbers (10.0, 0.1, 1e21). */
void harmony_json_compact(hsb *out, const json_t *v);

/* The built-in tool namespaces of the system message. The browser tools' schemas are parsed into
 * `schemas`, which harmony_builtin_free releases. */
typedef struct {
    harmony_namespace ns;
    harmony_tool tools[3];
    json_t *schemas[3];
} harmony_builtin;

int harmony_builtin_browser(harmony_builtin *b);
void harmony_builtin_python(harmony_builtin *b);
void harmony_builtin_free(harmony_builtin *b);

#endif
