/* JSON Schema → grammar: the subset OpenAI's strict mode documents.
 *
 * Supported: type (a name or a list of names: object, array, string, number, integer, boolean,
 * null), properties, required, additionalProperties (false, or absent: only the listed properties
 * are written), enum, const, anyOf, $ref to "#" or "#/..." (recursion included) with $defs or
 * definitions, items, minItems, maxItems, string pattern and format (date-time, date, time, email,
 * uuid, ipv4, hostname). Annotations (title, description, default, examples, $schema, $id,
 * $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword is refused with its name
 * and the path where it appears: a constraint we would silently drop is a promise we would break.
 *
 * Shape of the output: properties are written in the schema's order (JSON objects are unordered,
 * so any order validates), each optional one may be left out; between JSON tokens up to max_ws
 * blanks. Each schema node becomes a rule; a $ref target is compiled once and called wherever it
 * is referenced, which is what makes recursion work. A $ref chain that never reads a byte is
 * refused by gr_check; a recursion without a way out (a required property that contains itself)
 * is refused when it makes the root impossible, and pruned where it is one branch of several. */
#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/grammar/json_internal.h"

#include <stdlib.h>
#include <string.h>

static uint32_t compile_node(jctx *c, const json_t *s, const char *path);

static const char *const annotations[] = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$defs",   "definitions",
};
static const char *const keywords[] = {
    "type",   "properties", "required", "additionalProperties",
    "enum",   "const",      "anyOf",    "$ref",
    "items",  "minItems",   "maxItems", "pattern",
    "format",
};

static int in_list(const char *k, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(k, list[i]) == 0) return 1;
    return 0;
}
#define IN(k, list) in_list(k, list, sizeof list / sizeof list[0])

/* Keys of s other than annotations and `allowed`, or the first unsupported one. */
static int check_keywords(jctx *c, const json_t *s, const char *path, const char *only) {
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        (void)v;
        if (IN(k, annotations)) continue;
        if (!IN(k, keywords))
            return gb_fail(&c->b, "unsupported JSON Schema keyword '%s' at %s", k, path);
        if (only && strcmp(k, only) != 0)
            return gb_fail(&c->b, "'%s' beside '%s' is not supported at %s", k, only, path);
    }
    return 0;
}

/* Resolves a local reference: "#" or a JSON pointer "#/a/b~1c". */
const json_t *jc_resolve(jctx *c, const char *ref, const char *path) {
    if (ref[0] != '#') {
        gb_fail(&c->b, "only local $ref (\"#...\") is supported, got '%s' at %s", ref, path);
        return NULL;
    }
    const json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        gb_fail(&c->b, "$ref '%s' at %s: anchors are not supported", ref, path);
        return NULL;
    }
    while (*p == '/' && cur) {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            if (n + 1 >= sizeof key) {
                gb_fail(&c->b, "$ref '%.64s...' at %s: a name is too long", ref, path);
                return NULL;
            }
            key[n++] = ch;
        }
        key[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, key);
        } else if (json_is_array(cur)) {
            char *end;
            long i = strtol(key, &end, 10);
            cur = *key && !*end && i >= 0 ? json_array_get(cur, (size_t)i) : NULL;
        } else {
            cur = NULL;
        }
    }
    if (!cur) gb_fail(&c->b, "$ref '%s' at %s points at nothing", ref, path);
    return cur;
}

static uint32_t compile_ref(jctx *c, const json_t *s, const char *path) {
    if (check_keywords(c, s, path, "$ref")) return JC_NONE;
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return gb_fail(&c->b, "$ref must be a string at %s", path), JC_NONE;
    const json_t *t = jc_resolve(c, ref, path);
    if (!t) return JC_NONE;
    for (size_t i = 0; i < c->nmemo; i++)
        if (c->memo[i].target == t) return c->memo[i].rule;
    /* Remember the target's rule before compiling it, so a reference inside it (recursion) calls
     * the rule instead of compiling it again. */
    uint32_t r = gb_rule(&c->b, ref);
    if (c->nmemo == c->memo_cap) {
        c->memo_cap = c->memo_cap ? 2 * c->memo_cap : 16;
        c->memo = xrealloc(c->memo, c->memo_cap * sizeof *c->memo);
    }
    c->memo[c->nmemo++] = (jc_memo){t, r};
    uint32_t body = compile_node(c, t, ref);
    if (body != JC_NONE) gb_call(&c->b, c->b.rule_start[r], body, c->b.rule_end[r]);
    return c->b.failed ? JC_NONE : r;
}

static int type_is(const char *t, const json_t *v) {
    if (!t) return 0;
    if (strcmp(t, "object") == 0) return json_is_object(v);
    if (strcmp(t, "array") == 0) return json_is_array(v);
    if (strcmp(t, "string") == 0) return json_is_string(v);
    if (strcmp(t, "boolean") == 0) return json_is_boolean(v);
    if (strcmp(t, "null") == 0) return json_is_null(v);
    if (strcmp(t, "number") == 0) return json_is_number(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v));
    return 0;
}

/* Whether a value of an enum or const has one of the schema's types (all do without "type"). */
static int type_allows(const json_t *type, const json_t *v) {
    if (!type) return 1;
    if (json_is_string(type)) return type_is(json_string_value(type), v);
    for (size_t i = 0; i < json_array_size(type); i++)
        if (type_is(json_string_value(json_array_get(type, i)), v)) return 1;
    return 0;
}

/* enum and const: the values, written compactly, as literals. Beside them only "type" is allowed
 * (it drops the values of other types); other constraints (a pattern, ...) would have to be checked
 * against each value and are refused instead. */
static int compile_enum(jctx *c, uint32_t from, uint32_t to, const json_t *s, const json_t *vals,
                        int is_const, const char *path) {
    const char *k;
    json_t *kv;
    json_object_foreach((json_t *)s, k, kv) {
        (void)kv;
        if (strcmp(k, is_const ? "const" : "enum") && strcmp(k, "type") && !IN(k, annotations))
            return gb_fail(&c->b, "'%s' beside '%s' is not supported at %s", k,
                           is_const ? "const" : "enum", path);
    }
    const json_t *type = json_object_get(s, "type");
    size_t n = is_const ? 1 : json_array_size(vals);
    if (!is_const && (!json_is_array(vals) || n == 0))
        return gb_fail(&c->b, "enum must be a non-empty array at %s", path);
    if (n > GRAMMAR_MAX_ENUM)
        return gb_fail(&c->b, "enum at %s: %zu values are over the limit of %d", path, n,
                       GRAMMAR_MAX_ENUM);
    char **txt = xcalloc(n, sizeof *txt);
    size_t *len = xcalloc(n, sizeof *len);
    int rc = 0;
    size_t kept = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const json_t *v = is_const ? vals : json_array_get(vals, i);
        if (!type_allows(type, v)) continue;
        txt[kept] = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!txt[kept])
            rc = gb_fail(&c->b, "enum value %zu at %s cannot be written", i, path);
        else
            len[kept] = strlen(txt[kept]), kept++;
    }
    if (!rc && kept == 0)
        rc = gb_fail(&c->b, "no value of the %s at %s has the schema's type",
                     is_const ? "const" : "enum", path);
    if (!rc) rc = jc_literals(c, from, to, (const char *const *)txt, len, kept, path);
    for (size_t i = 0; i < n; i++) free(txt[i]);
    free(txt);
    free(len);
    return rc;
}

static int compile_object(jctx *c, uint32_t from, uint32_t to, const json_t *s, const char *path) {
    gbuild *b = &c->b;
    uint32_t r = b->state_rule[from];
    const json_t *props = json_object_get(s, "properties");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *req = json_object_get(s, "required");
    if (props && !json_is_object(props))
        return gb_fail(b, "properties must be an object at %s", path);
    if (req && !json_is_array(req)) return gb_fail(b, "required must be an array at %s", path);
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *name = json_string_value(json_array_get(req, i));
        if (!name) return gb_fail(b, "required holds a non-string at %s", path);
        if (!json_object_get(props, name))
            return gb_fail(b, "required property '%s' is not in properties at %s", name, path);
    }
    if (addl && !json_is_false(addl)) {
        if (props && json_object_size(props))
            return gb_fail(b, "additionalProperties other than false is not supported at %s", path);
        jc_call_any_object(c, from, to);
        return 0;
    }
    if (!props && !addl) {
        jc_call_any_object(c, from, to);
        return 0;
    }
    size_t n = props ? json_object_size(props) : 0;
    if (n > GRAMMAR_MAX_PROPERTIES)
        return gb_fail(b, "%zu properties at %s are over the limit of %d", n, path,
                       GRAMMAR_MAX_PROPERTIES);
    /* A_i: nothing written yet; B_i: something written (the next property needs a comma). */
    uint32_t open = gb_state(b, r), A = gb_state(b, r), B = gb_state(b, r);
    gb_bytes(b, from, '{', '{', open);
    jc_ws(c, open, A);
    const char *name;
    json_t *sub;
    json_object_foreach((json_t *)props, name, sub) {
        if (b->failed) return -1;
        int required = 0;
        for (size_t i = 0; i < json_array_size(req); i++)
            if (strcmp(json_string_value(json_array_get(req, i)), name) == 0) required = 1;
        char *sub_path = xasprintf("%s/properties/%s", path, name);
        uint32_t value_rule = compile_node(c, sub, sub_path);
        free(sub_path);
        if (value_rule == JC_NONE) return -1;
        json_t *jname = json_string(name);
        char *key = json_dumps(jname, JSON_ENCODE_ANY);
        json_decref(jname);
        uint32_t A2 = gb_state(b, r), B2 = gb_state(b, r);
        /* key ws : ws value ws, entered from A directly and from B after a comma */
        uint32_t kv = gb_state(b, r), comma = gb_state(b, r);
        gb_eps(b, A, kv);
        gb_bytes(b, B, ',', ',', comma);
        jc_ws(c, comma, kv);
        uint32_t k1 = gb_state(b, r), k2 = gb_state(b, r), k3 = gb_state(b, r);
        uint32_t k4 = gb_state(b, r), v = gb_state(b, r);
        gb_literal(b, kv, key, strlen(key), k1);
        free(key);
        jc_ws(c, k1, k2);
        gb_bytes(b, k2, ':', ':', k3);
        jc_ws(c, k3, k4);
        gb_call(b, k4, value_rule, v);
        jc_ws(c, v, B2);
        if (!required) {
            gb_eps(b, A, A2);
            gb_eps(b, B, B2);
        }
        A = A2;
        B = B2;
    }
    gb_bytes(b, A, '}', '}', to);
    gb_bytes(b, B, '}', '}', to);
    return b->failed ? -1 : 0;
}

static int count_kw(jctx *c, const json_t *s, const char *kw, long *out, const char *path) {
    const json_t *v = json_object_get(s, kw);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return gb_fail(&c->b, "%s must be a non-negative integer at %s", kw, path);
    if (json_integer_value(v) > GRAMMAR_MAX_ITEMS_COUNT)
        return gb_fail(&c->b, "%s %lld at %s is over the limit of %d", kw,
                       (long long)json_integer_value(v), path, GRAMMAR_MAX_ITEMS_COUNT);
    *out = (long)json_integer_value(v);
    return 0;
}

static int compile_array(jctx *c, uint32_t from, uint32_t to, const json_t *s, const char *path) {
    gbuild *b = &c->b;
    uint32_t r = b->state_rule[from];
    long lo = 0, hi = -1;
    if (count_kw(c, s, "minItems", &lo, path) || count_kw(c, s, "maxItems", &hi, path)) return -1;
    if (hi >= 0 && hi < lo) return gb_fail(b, "maxItems < minItems at %s", path);
    const json_t *items = json_object_get(s, "items");
    uint32_t item = JC_NONE;
    if (items) {
        char *sub_path = xasprintf("%s/items", path);
        item = compile_node(c, items, sub_path);
        free(sub_path);
        if (item == JC_NONE) return -1;
    }
    uint32_t open = gb_state(b, r), first = gb_state(b, r);
    gb_bytes(b, from, '[', '[', open);
    jc_ws(c, open, first);
    if (lo == 0) gb_bytes(b, first, ']', ']', to);
    if (hi == 0) return 0;
    /* Unrolled: copy k (1-based) of the item; after copy k the array may close when k >= lo. */
    long copies = hi < 0 ? (lo > 1 ? lo : 1) : hi;
    uint32_t cur = first;
    for (long k = 1; k <= copies && !b->failed; k++) {
        uint32_t in = cur;
        if (k > 1) {
            uint32_t comma = gb_state(b, r);
            in = gb_state(b, r);
            gb_bytes(b, cur, ',', ',', comma);
            jc_ws(c, comma, in);
        }
        uint32_t v = gb_state(b, r), after = gb_state(b, r);
        if (item == JC_NONE)
            jc_call_value(c, in, v);
        else
            gb_call(b, in, item, v);
        jc_ws(c, v, after);
        if (k >= lo) gb_bytes(b, after, ']', ']', to);
        if (hi < 0 && k == copies) {
            /* Unbounded: more items, each after a comma, loop back to `after`. */
            uint32_t comma = gb_state(b, r), in2 = gb_state(b, r), v2 = gb_state(b, r);
            gb_bytes(b, after, ',', ',', comma);
            jc_ws(c, comma, in2);
            if (item == JC_NONE)
                jc_call_value(c, in2, v2);
            else
                gb_call(b, in2, item, v2);
            jc_ws(c, v2, after);
        }
        cur = after;
    }
    return b->failed ? -1 : 0;
}

static int compile_type(jctx *c, uint32_t from, uint32_t to, const json_t *s, const char *type,
                        const char *path) {
    gbuild *b = &c->b;
    if (strcmp(type, "object") == 0) return compile_object(c, from, to, s, path);
    if (strcmp(type, "array") == 0) return compile_array(c, from, to, s, path);
    if (strcmp(type, "number") == 0)
        jc_call_number(c, from, to);
    else if (strcmp(type, "integer") == 0)
        jc_call_integer(c, from, to);
    else if (strcmp(type, "boolean") == 0) {
        gb_literal(b, from, "true", 4, to);
        gb_literal(b, from, "false", 5, to);
    } else if (strcmp(type, "null") == 0) {
        gb_literal(b, from, "null", 4, to);
    } else if (strcmp(type, "string") == 0) {
        const char *pattern = json_string_value(json_object_get(s, "pattern"));
        const char *format = json_string_value(json_object_get(s, "format"));
        if (json_object_get(s, "pattern") && !pattern)
            return gb_fail(b, "pattern must be a string at %s", path);
        if (json_object_get(s, "format") && !format)
            return gb_fail(b, "format must be a string at %s", path);
        if (pattern && format)
            return gb_fail(b, "pattern together with format is not supported at %s", path);
        if (pattern) return jc_string_pattern(c, from, to, pattern, path);
        if (format) return jc_string_format(c, from, to, format, path);
        jc_call_string(c, from, to);
    } else {
        return gb_fail(b, "unknown type '%s' at %s", type, path);
    }
    return 0;
}

/* The schema's body from `from` to `to` (states of the current rule). */
static int compile_body(jctx *c, uint32_t from, uint32_t to, const json_t *s, const char *path) {
    gbuild *b = &c->b;
    if (json_object_get(s, "enum"))
        return compile_enum(c, from, to, s, json_object_get(s, "enum"), 0, path);
    if (json_object_get(s, "const"))
        return compile_enum(c, from, to, s, json_object_get(s, "const"), 1, path);
    const json_t *any = json_object_get(s, "anyOf");
    if (any) {
        if (check_keywords(c, s, path, "anyOf")) return -1;
        if (!json_is_array(any) || json_array_size(any) == 0)
            return gb_fail(b, "anyOf must be a non-empty array at %s", path);
        for (size_t i = 0; i < json_array_size(any) && !b->failed; i++) {
            char *sub_path = xasprintf("%s/anyOf/%zu", path, i);
            uint32_t alt = compile_node(c, json_array_get(any, i), sub_path);
            free(sub_path);
            if (alt == JC_NONE) return -1;
            gb_call(b, from, alt, to);
        }
        return b->failed ? -1 : 0;
    }
    const json_t *type = json_object_get(s, "type");
    if (json_is_string(type)) return compile_type(c, from, to, s, json_string_value(type), path);
    if (json_is_array(type)) {
        if (json_array_size(type) == 0) return gb_fail(b, "type is an empty list at %s", path);
        for (size_t i = 0; i < json_array_size(type); i++) {
            const char *t = json_string_value(json_array_get(type, i));
            if (!t) return gb_fail(b, "type must name types at %s", path);
            if (compile_type(c, from, to, s, t, path)) return -1;
        }
        return 0;
    }
    if (type) return gb_fail(b, "type must be a string or a list at %s", path);
    /* No type: the keywords say which kinds of value are meant (each applies only to its own
     * kind, so writing only those kinds, each with its keywords, is valid). None: any value. */
    int object = json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
                 json_object_get(s, "required");
    int array = json_object_get(s, "items") || json_object_get(s, "minItems") ||
                json_object_get(s, "maxItems");
    int string = json_object_get(s, "pattern") || json_object_get(s, "format");
    if (!object && !array && !string) {
        jc_call_value(c, from, to); /* {}: any JSON value */
        return 0;
    }
    if (object && compile_object(c, from, to, s, path)) return -1;
    if (array && compile_array(c, from, to, s, path)) return -1;
    if (string && compile_type(c, from, to, s, "string", path)) return -1;
    return 0;
}

static uint32_t compile_node(jctx *c, const json_t *s, const char *path) {
    gbuild *b = &c->b;
    if (b->failed) return JC_NONE;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        uint32_t r = gb_rule(b, path);
        jc_call_value(c, b->rule_start[r], b->rule_end[r]);
        return r;
    }
    if (!json_is_object(s)) {
        gb_fail(b, "a schema must be an object or true at %s", path);
        return JC_NONE;
    }
    if (c->depth >= GRAMMAR_MAX_SCHEMA_DEPTH) {
        gb_fail(b, "schema nested deeper than %d at %s", GRAMMAR_MAX_SCHEMA_DEPTH, path);
        return JC_NONE;
    }
    c->depth++;
    uint32_t r = JC_NONE;
    if (json_object_get(s, "$ref")) {
        r = compile_ref(c, s, path);
    } else if (!check_keywords(c, s, path, NULL)) {
        r = gb_rule(b, path);
        if (compile_body(c, b->rule_start[r], b->rule_end[r], s, path)) r = JC_NONE;
    }
    c->depth--;
    return b->failed ? JC_NONE : r;
}

static grammar *finish(jctx *c, uint32_t root) {
    grammar *g = root == JC_NONE || c->b.failed ? NULL : gb_finish(&c->b, root);
    jc_free(c);
    return g;
}

grammar *grammar_compile_json_schema(const char *schema, size_t len, const grammar_options *opts) {
    if (len > GRAMMAR_MAX_SCHEMA_BYTES) {
        err_set("schema of %zu bytes is over the limit of %d", len, GRAMMAR_MAX_SCHEMA_BYTES);
        return NULL;
    }
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) {
        err_set("schema is not JSON: %s (line %d)", je.text, je.line);
        return NULL;
    }
    jctx c;
    jc_init(&c, opts);
    c.root = root;
    grammar *g = finish(&c, jc_lint(&c, root) ? JC_NONE : compile_node(&c, root, "#"));
    json_decref(root);
    return g;
}

grammar *grammar_compile_json_any(const grammar_options *opts) {
    jctx c;
    jc_init(&c, opts);
    uint32_t r = gb_rule(&c.b, "#");
    jc_call_value(&c, c.b.rule_start[r], c.b.rule_end[r]);
    return finish(&c, r);
}
