/* Shared by the JSON compilers: the compile context and the building blocks of JSON text
 * (json_prims.c) that the schema compiler (json_schema.c) assembles. */
#ifndef GPTOSS_GRAMMAR_JSON_INTERNAL_H
#define GPTOSS_GRAMMAR_JSON_INTERNAL_H

#include "tokenizer/grammar/gr_build.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JC_NONE UINT32_MAX

typedef struct {
    const json_t *target;
    uint32_t rule;
} jc_memo;

typedef struct {
    gbuild b;
    int max_ws;
    /* Shared rules, made on first use (JC_NONE until then). */
    uint32_t ws_rule, string_rule, number_rule, integer_rule, value_rule;
    uint32_t object_rule, array_rule;
    size_t literal_bytes;
    const json_t *root;
    jc_memo *memo; /* $ref targets already compiled (or being compiled: recursion) */
    size_t nmemo, memo_cap;
    int depth;
} jctx;

void jc_init(jctx *c, const grammar_options *opts);
void jc_free(jctx *c);

/* Whitespace between two JSON tokens: from → to reading 0..max_ws blanks. */
void jc_ws(jctx *c, uint32_t from, uint32_t to);
/* Calls of the shared rules (string, number, integer, any value, any object, any array). */
void jc_call_string(jctx *c, uint32_t from, uint32_t to);
void jc_call_number(jctx *c, uint32_t from, uint32_t to);
void jc_call_integer(jctx *c, uint32_t from, uint32_t to);
void jc_call_value(jctx *c, uint32_t from, uint32_t to);
void jc_call_any_object(jctx *c, uint32_t from, uint32_t to);
void jc_call_any_array(jctx *c, uint32_t from, uint32_t to);
/* from → to reading exactly one of the n byte strings (a prefix trie, so no ambiguity). Counts
 * against GRAMMAR_MAX_ENUM and GRAMMAR_MAX_LITERAL_BYTES; what names the source in messages. */
int jc_literals(jctx *c, uint32_t from, uint32_t to, const char *const *s, const size_t *len,
                size_t n, const char *what);
/* The target of a local $ref ("#" or "#/a/b"), or NULL with the build failed. */
const json_t *jc_resolve(jctx *c, const char *ref, const char *path);
/* Checks every subschema of root, used or not (json_schema_lint.c); -1 with the build failed. */
int jc_lint(jctx *c, const json_t *root);
/* A JSON string whose content matches a pattern (search semantics) or a format by name. */
int jc_string_pattern(jctx *c, uint32_t from, uint32_t to, const char *pattern, const char *path);
int jc_string_format(jctx *c, uint32_t from, uint32_t to, const char *format, const char *path);

#endif
