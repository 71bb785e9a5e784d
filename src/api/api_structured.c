/* Structured output: the request fields that constrain what the model may write, compiled into the
 * engine's constraint (engine/constraint.h) on the HTTP thread, never on the engine's.
 *
 * Fields (one answer format per request; a second one is a 400 naming both):
 *   chat        response_format {type: json_object | json_schema, json_schema: {schema}}
 *   responses   text.format {type: json_object | json_schema, schema}
 *   all three   vLLM's structured_outputs {json | regex | choice | json_object} and the older
 *               top-level guided_json, guided_regex, guided_choice (vLLM removed these in 0.12 but
 *               clients still send them)
 *   chat, resp. tools with strict: true (arguments constrained to their `parameters` schema);
 *               tool_choice "required" or a named function (the header is constrained to
 *               `to=functions.NAME` and the arguments to its schema, strict or not);
 *               thinking_token_budget: reasoning tokens allowed before the answer. Named after
 *               vLLM's per-request field of that name (SGLang's `thinking_budget` is only a chat
 *               template hint, not a cap); 0 means no reasoning at all.
 *
 * Chat and responses (harmony): the analysis channel stays free; the answer format applies to the
 * final channel's message, a tool's schema to its call's message after <|constrain|>json. The
 * headers of the turn are constrained to the messages the request allows. Completions (no harmony):
 * the whole output is the grammar. JSON whitespace is bounded by the grammar (grammar_options), so
 * a constrained output always ends. */
#include "api/api_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "engine/constraint.h"
#include "harmony/harmony_special.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_CHOICES = GRAMMAR_MAX_ENUM };

/* A JSON schema (object, or a string holding one) at `param` → grammar; 400 naming param. */
static grammar *compile_schema(const json_t *schema, const char *param, api_error *err) {
    char *owned = NULL;
    const char *text;
    size_t len;
    if (json_is_string(schema)) {
        text = json_string_value(schema);
        len = json_string_length(schema);
    } else if (json_is_object(schema) || json_is_boolean(schema)) {
        owned = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        text = owned ? owned : "";
        len = strlen(text);
    } else {
        api_error_set(err, 400, NULL, param,
                      "Invalid type for '%s': expected a JSON Schema object, but got %s", param,
                      api_json_type_name(schema));
        return NULL;
    }
    grammar *g = grammar_compile_json_schema(text, len, NULL);
    free(owned);
    if (!g) api_error_set(err, 400, NULL, param, "Invalid schema for '%s': %s", param, err_msg());
    return g;
}

static grammar *compile_regex(const json_t *v, const char *param, api_error *err) {
    if (!json_is_string(v)) {
        api_error_set(err, 400, NULL, param, "Invalid type for '%s': expected a string, but got %s",
                      param, api_json_type_name(v));
        return NULL;
    }
    grammar *g = grammar_compile_regex(json_string_value(v), json_string_length(v));
    if (!g) api_error_set(err, 400, NULL, param, "Invalid regex for '%s': %s", param, err_msg());
    return g;
}

static grammar *compile_choice(const json_t *v, const char *param, api_error *err) {
    size_t n = json_is_array(v) ? json_array_size(v) : 0;
    if (n == 0 || n > MAX_CHOICES) {
        api_error_set(err, 400, NULL, param,
                      "Invalid value for '%s': expected an array of 1 to %d strings", param,
                      MAX_CHOICES);
        return NULL;
    }
    const char **s = xmalloc(n * sizeof *s);
    size_t *lens = xmalloc(n * sizeof *lens);
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(v, i);
        if (!json_is_string(c)) {
            api_error_set(err, 400, NULL, param, "Invalid type for '%s[%zu]': expected a string",
                          param, i);
            free(s), free(lens);
            return NULL;
        }
        s[i] = json_string_value(c), lens[i] = json_string_length(c);
    }
    grammar *g = grammar_compile_choice(s, lens, n);
    free(s), free(lens);
    if (!g) api_error_set(err, 400, NULL, param, "Invalid value for '%s': %s", param, err_msg());
    return g;
}

/* JSON mode: any JSON object (what OpenAI's json_object promises). */
static grammar *json_object_grammar(void) {
    static const char any_object[] = "{\"type\":\"object\"}";
    return grammar_compile_json_schema(any_object, sizeof any_object - 1, NULL);
}

/* The answer format, from whichever field gave it; *g stays NULL when none did. Records the field
 * in `from` to refuse a second one. */
typedef struct {
    grammar *g;
    const char *from;
} answer;

static int set_answer(answer *a, grammar *g, const char *param, api_error *err) {
    if (!g) return -1;
    if (a->g) {
        grammar_free(g);
        api_error_set(err, 400, NULL, param,
                      "Invalid value for '%s': '%s' already sets the output format; give one",
                      param, a->from);
        return -1;
    }
    a->g = g;
    a->from = param;
    return 0;
}

static bool present(const json_t *v) {
    return v && !json_is_null(v);
}

/* vLLM's fields, new and old. */
static int parse_vllm(const json_t *root, answer *a, api_error *err) {
    const json_t *so = json_object_get(root, "structured_outputs");
    if (present(so)) {
        if (!json_is_object(so)) {
            api_error_set(err, 400, NULL, "structured_outputs",
                          "Invalid type for 'structured_outputs': expected an object");
            return -1;
        }
        static const char *const unsupported[] = {"grammar", "structural_tag", NULL};
        for (int i = 0; unsupported[i]; i++)
            if (present(json_object_get(so, unsupported[i]))) {
                char p[64];
                snprintf(p, sizeof p, "structured_outputs.%s", unsupported[i]);
                api_error_set(err, 400, NULL, p,
                              "'%s' is not supported (json, regex and choice are)", p);
                return -1;
            }
        const json_t *v;
        if (present(v = json_object_get(so, "json")) &&
            set_answer(a, compile_schema(v, "structured_outputs.json", err),
                       "structured_outputs.json", err) < 0)
            return -1;
        if (present(v = json_object_get(so, "regex")) &&
            set_answer(a, compile_regex(v, "structured_outputs.regex", err),
                       "structured_outputs.regex", err) < 0)
            return -1;
        if (present(v = json_object_get(so, "choice")) &&
            set_answer(a, compile_choice(v, "structured_outputs.choice", err),
                       "structured_outputs.choice", err) < 0)
            return -1;
        if (json_is_true(json_object_get(so, "json_object")) &&
            set_answer(a, json_object_grammar(), "structured_outputs.json_object", err) < 0)
            return -1;
    }
    const json_t *v;
    if (present(v = json_object_get(root, "guided_json")) &&
        set_answer(a, compile_schema(v, "guided_json", err), "guided_json", err) < 0)
        return -1;
    if (present(v = json_object_get(root, "guided_regex")) &&
        set_answer(a, compile_regex(v, "guided_regex", err), "guided_regex", err) < 0)
        return -1;
    if (present(v = json_object_get(root, "guided_choice")) &&
        set_answer(a, compile_choice(v, "guided_choice", err), "guided_choice", err) < 0)
        return -1;
    if (present(json_object_get(root, "guided_grammar"))) {
        api_error_set(err, 400, NULL, "guided_grammar", "'guided_grammar' is not supported");
        return -1;
    }
    return 0;
}

/* OpenAI's answer format: chat's response_format, responses' text.format (shapes checked by the
 * endpoint's parser already). */
static int parse_openai_format(const json_t *root, api_kind kind, answer *a, api_error *err) {
    const json_t *f;
    const char *path;
    if (kind == API_CHAT) {
        f = json_object_get(root, "response_format");
        path = "response_format";
    } else {
        const json_t *text = json_object_get(root, "text");
        f = json_is_object(text) ? json_object_get(text, "format") : NULL;
        path = "text.format";
    }
    if (!json_is_object(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!type || !strcmp(type, "text")) return 0;
    char p[64];
    snprintf(p, sizeof p, "%s.type", path);
    if (!strcmp(type, "json_object")) return set_answer(a, json_object_grammar(), p, err);
    const json_t *def = kind == API_CHAT ? json_object_get(f, "json_schema") : f;
    const json_t *schema = json_is_object(def) ? json_object_get(def, "schema") : NULL;
    snprintf(p, sizeof p, "%s%s.schema", path, kind == API_CHAT ? ".json_schema" : "");
    if (!present(schema)) return set_answer(a, json_object_grammar(), p, err);
    return set_answer(a, compile_schema(schema, p, err), p, err);
}

/* ---- harmony: the messages the turn may hold ---- */

typedef struct {
    const tokenizer *tok;
    ivec v;
} heads;

static void h_special(heads *h, int32_t id) {
    ivec_push(&h->v, id);
}

static void h_text(heads *h, const char *s) {
    tokenizer_encode_ordinary(h->tok, s, strlen(s), &h->v);
}

static int add_msg(engine_constraint *c, heads *h, constraint_body body, grammar *g, int32_t close,
                   api_error *err) {
    int rc = constraint_add_message(c, h->v.v, (int)h->v.len, body, g, close);
    h->v.len = 0;
    if (rc < 0) api_error_set(err, 400, NULL, "tools", "%s", err_msg());
    return rc;
}

typedef struct {
    const char *name;
    const json_t *params;
    bool strict;
    char path[64]; /* of its parameters, for errors */
} tool_def;

/* Function tools with their name, parameters and strict flag (shapes checked by the endpoint). */
static int list_tools(const json_t *root, api_kind kind, tool_def **out, api_error *err) {
    const json_t *tools = json_object_get(root, "tools");
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    tool_def *d = xcalloc(n ? n : 1, sizeof *d);
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tools, i);
        const char *type = json_string_value(json_object_get(t, "type"));
        if (type && strcmp(type, "function")) continue;
        const json_t *fn = kind == API_CHAT ? json_object_get(t, "function") : t;
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) continue;
        d[k].name = name;
        d[k].params = json_object_get(fn, "parameters");
        const json_t *strict = json_object_get(fn, "strict");
        if (present(strict) && !json_is_boolean(strict)) {
            api_error_set(err, 400, NULL, "tools",
                          "Invalid type for 'tools[%zu]%s.strict': expected a boolean", i,
                          kind == API_CHAT ? ".function" : "");
            free(d);
            return -1;
        }
        d[k].strict = json_is_true(strict);
        snprintf(d[k].path, sizeof d[k].path, "tools[%zu]%s.parameters", i,
                 kind == API_CHAT ? ".function" : "");
        k++;
    }
    *out = d;
    return k;
}

/* tool_choice: 0 none, 1 auto, 2 required, 3 named (*named set). */
static int tool_mode(const json_t *root, api_kind kind, const char **named) {
    const json_t *c = json_object_get(root, "tool_choice");
    *named = NULL;
    if (json_is_string(c)) {
        const char *s = json_string_value(c);
        return !strcmp(s, "none") ? 0 : !strcmp(s, "required") ? 2 : 1;
    }
    if (json_is_object(c)) {
        const char *type = json_string_value(json_object_get(c, "type"));
        if (type && strcmp(type, "function")) return 1; /* a built-in tool: not enforced */
        const json_t *fn = kind == API_CHAT ? json_object_get(c, "function") : c;
        *named = json_string_value(json_object_get(fn, "name"));
        return *named ? 3 : 1;
    }
    return 1;
}

/* A tool's arguments grammar: its schema (no parameters: any object). A strict tool's schema must
 * compile (400 otherwise); a non-strict tool that tool_choice forces falls back to any object when
 * its schema uses what the grammar does not support: it never promised more. */
static grammar *tool_grammar(const tool_def *t, api_error *err) {
    if (!present(t->params)) return json_object_grammar();
    grammar *g = compile_schema(t->params, t->path, err);
    if (!g && !t->strict) {
        memset(err, 0, sizeof *err);
        g = json_object_grammar();
    }
    return g;
}

static int build_messages(const json_t *root, api_kind kind, const tokenizer *tok, grammar *final,
                          int budget, engine_constraint **out, api_error *err) {
    tool_def *tools = NULL;
    const char *named = NULL;
    const int mode = tool_mode(root, kind, &named);
    const int n_tools = list_tools(root, kind, &tools, err);
    if (n_tools < 0) {
        grammar_free(final);
        return -1;
    }
    bool strict_any = false;
    for (int i = 0; i < n_tools; i++) strict_any |= tools[i].strict;
    const bool forced = n_tools > 0 && (mode == 2 || mode == 3);
    if (!final && budget < 0 && !forced && !(strict_any && mode != 0)) {
        free(tools);
        return 0; /* nothing to enforce */
    }
    /* Only a constrained turn lists its tools as headers (requests without one keep no limit). */
    if (mode != 0 && n_tools > CONSTRAINT_MAX_MESSAGES - 3) {
        api_error_set(err, 400, NULL, "tools",
                      "Invalid value for 'tools': structured output takes at most %d tools",
                      CONSTRAINT_MAX_MESSAGES - 3);
        free(tools);
        grammar_free(final);
        return -1;
    }
    if (forced && mode == 3) {
        bool found = false;
        for (int i = 0; i < n_tools; i++) found |= !strcmp(tools[i].name, named);
        if (!found) {
            api_error_set(err, 400, NULL, "tool_choice",
                          "Invalid value for 'tool_choice': the function '%.64s' is not among the "
                          "tools",
                          named);
            free(tools);
            grammar_free(final);
            return -1;
        }
    }
    heads h = {tok, {0}};
    h_special(&h, HARMONY_TOK_START);
    h_text(&h, "assistant");
    engine_constraint *c = constraint_new_messages(HARMONY_TOK_END, h.v.v, (int)h.v.len);
    h.v.len = 0;
    constraint_set_reasoning_budget(c, budget);
    int rc = 0;
    h_special(&h, HARMONY_TOK_CHANNEL), h_text(&h, "analysis"), h_special(&h, HARMONY_TOK_MESSAGE);
    rc = add_msg(c, &h, CONSTRAINT_REASONING, NULL, HARMONY_TOK_END, err);
    if (rc == 0 && !forced) {
        h_special(&h, HARMONY_TOK_CHANNEL), h_text(&h, "final"), h_special(&h, HARMONY_TOK_MESSAGE);
        rc = add_msg(c, &h, final ? CONSTRAINT_GRAMMAR : CONSTRAINT_FREE, final, HARMONY_TOK_RETURN,
                     err);
        final = NULL;
        if (rc == 0 && n_tools > 0 && mode != 0) { /* a preamble before a call */
            h_special(&h, HARMONY_TOK_CHANNEL), h_text(&h, "commentary"),
                h_special(&h, HARMONY_TOK_MESSAGE);
            rc = add_msg(c, &h, CONSTRAINT_FREE, NULL, HARMONY_TOK_END, err);
        }
    }
    grammar_free(final);
    for (int i = 0; rc == 0 && mode != 0 && i < n_tools; i++) {
        if (mode == 3 && strcmp(tools[i].name, named)) continue;
        grammar *g = NULL;
        if (tools[i].strict || forced) {
            g = tool_grammar(&tools[i], err);
            if (!g) {
                rc = -1;
                break;
            }
        }
        char text[128];
        snprintf(text, sizeof text, "commentary to=functions.%s ", tools[i].name);
        h_special(&h, HARMONY_TOK_CHANNEL), h_text(&h, text), h_special(&h, HARMONY_TOK_CONSTRAIN),
            h_text(&h, "json"), h_special(&h, HARMONY_TOK_MESSAGE);
        rc = add_msg(c, &h, g ? CONSTRAINT_GRAMMAR : CONSTRAINT_FREE, g, HARMONY_TOK_CALL, err);
    }
    ivec_free(&h.v);
    free(tools);
    if (rc < 0) {
        constraint_unref(c);
        return -1;
    }
    *out = c;
    return 0;
}

int api_structured_parse(const json_t *root, api_kind kind, const tokenizer *tok, api_call *call,
                         api_error *err) {
    answer a = {0};
    if (kind != API_COMPLETIONS && parse_openai_format(root, kind, &a, err) < 0) return -1;
    if (parse_vllm(root, &a, err) < 0) {
        grammar_free(a.g);
        return -1;
    }
    long long budget = -1;
    if (kind != API_COMPLETIONS) {
        if (api_get_int(root, "thinking_token_budget", "thinking_token_budget", 0, 1 << 30, &budget,
                        err) < 0) {
            grammar_free(a.g);
            return -1;
        }
    } else if (present(json_object_get(root, "thinking_token_budget"))) {
        api_error_set(err, 400, NULL, "thinking_token_budget",
                      "'thinking_token_budget' applies to chat and responses only (completions "
                      "have no reasoning channel)");
        grammar_free(a.g);
        return -1;
    }
    if (kind == API_COMPLETIONS) {
        if (a.g) call->req.constraint = constraint_new_root(a.g);
        return 0;
    }
    return build_messages(root, kind, tok, a.g, (int)budget, &call->req.constraint, err);
}
