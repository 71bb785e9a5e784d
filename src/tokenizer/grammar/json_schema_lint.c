/* Checking a whole schema before compiling it.
 *
 * The compiler reads only the parts of a schema that shape the output it will allow: the keywords
 * of the types it writes, the $defs that are referenced. A malformed keyword elsewhere ("pattern":
 * "(a" beside "type": "integer", a type name misspelt in an unused $def) would slip through, and the
 * same schema would then be refused by a validator (ajv) or by OpenAI. So every subschema reachable
 * through properties, additionalProperties, items, anyOf, $defs and definitions is checked first:
 * known keywords only, each with a well-formed value, patterns that compile, known formats. */
#include "tokenizer/grammar/json_internal.h"
#include "tokenizer/grammar/regex.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {"object",  "array",   "string", "number",
                                         "integer", "boolean", "null"};
static const char *const known_formats[] = {"date", "time",     "date-time", "email",
                                            "uuid", "hostname", "ipv4"};

static int known(const char *s, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s, list[i]) == 0) return 1;
    return 0;
}

static int unique_strings(jctx *c, const json_t *a, const char *kw, const char *path) {
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *s = json_string_value(json_array_get(a, i));
        if (!s) return gb_fail(&c->b, "%s must hold strings at %s", kw, path);
        for (size_t j = 0; j < i; j++)
            if (strcmp(s, json_string_value(json_array_get(a, j))) == 0)
                return gb_fail(&c->b, "%s lists '%s' twice at %s", kw, s, path);
    }
    return 0;
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Enum values must differ: each is written canonically (keys sorted), the texts sorted, and
 * neighbours compared. Bounded by GRAMMAR_MAX_ENUM (checked again when compiled). */
static int unique_values(jctx *c, const json_t *a, const char *path) {
    size_t n = json_array_size(a);
    if (n > GRAMMAR_MAX_ENUM)
        return gb_fail(&c->b, "enum at %s: %zu values are over the limit of %d", path, n,
                       GRAMMAR_MAX_ENUM);
    char **t = xcalloc(n, sizeof *t);
    int rc = 0;
    for (size_t i = 0; i < n; i++)
        t[i] = json_dumps(json_array_get(a, i), JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
    for (size_t i = 0; i < n && !rc; i++)
        if (!t[i]) rc = gb_fail(&c->b, "enum value %zu at %s cannot be written", i, path);
    if (!rc) qsort(t, n, sizeof *t, str_cmp);
    for (size_t i = 1; i < n && !rc; i++)
        if (strcmp(t[i], t[i - 1]) == 0)
            rc = gb_fail(&c->b, "enum lists %.64s twice at %s", t[i], path);
    for (size_t i = 0; i < n; i++) free(t[i]);
    free(t);
    return rc;
}

static int lint(jctx *c, const json_t *s, const char *path, int depth);

static int lint_sub(jctx *c, const json_t *s, const char *path, const char *kw, const char *key,
                    int depth) {
    char *p = key ? xasprintf("%s/%s/%s", path, kw, key) : xasprintf("%s/%s", path, kw);
    int rc = lint(c, s, p, depth + 1);
    free(p);
    return rc;
}

static int lint_map(jctx *c, const json_t *m, const char *path, const char *kw, int depth) {
    if (!json_is_object(m)) return gb_fail(&c->b, "%s must be an object at %s", kw, path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)m, k, v) {
        if (lint_sub(c, v, path, kw, k, depth)) return -1;
    }
    return 0;
}

static int count(jctx *c, const json_t *v, const char *kw, const char *path) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return gb_fail(&c->b, "%s must be a non-negative integer at %s", kw, path);
    return 0;
}

static int lint_keyword(jctx *c, const char *k, const json_t *v, const char *path, int depth) {
    gbuild *b = &c->b;
    if (strcmp(k, "type") == 0) {
        if (json_is_string(v)) {
            if (!known(json_string_value(v), type_names, 7))
                return gb_fail(b, "unknown type '%s' at %s", json_string_value(v), path);
            return 0;
        }
        if (!json_is_array(v) || json_array_size(v) == 0)
            return gb_fail(b, "type must be a name or a non-empty list at %s", path);
        if (unique_strings(c, v, "type", path)) return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!known(json_string_value(json_array_get(v, i)), type_names, 7))
                return gb_fail(b, "unknown type '%s' at %s",
                               json_string_value(json_array_get(v, i)), path);
        return 0;
    }
    if (strcmp(k, "properties") == 0 || strcmp(k, "$defs") == 0 || strcmp(k, "definitions") == 0)
        return lint_map(c, v, path, k, depth);
    if (strcmp(k, "required") == 0) {
        if (!json_is_array(v)) return gb_fail(b, "required must be an array at %s", path);
        return unique_strings(c, v, "required", path);
    }
    if (strcmp(k, "additionalProperties") == 0)
        return json_is_boolean(v) ? 0 : lint_sub(c, v, path, k, NULL, depth);
    if (strcmp(k, "items") == 0) return lint_sub(c, v, path, k, NULL, depth);
    if (strcmp(k, "anyOf") == 0) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return gb_fail(b, "anyOf must be a non-empty array at %s", path);
        for (size_t i = 0; i < json_array_size(v); i++) {
            char key[24];
            snprintf(key, sizeof key, "%zu", i);
            if (lint_sub(c, json_array_get(v, i), path, k, key, depth)) return -1;
        }
        return 0;
    }
    if (strcmp(k, "enum") == 0) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return gb_fail(b, "enum must be a non-empty array at %s", path);
        return unique_values(c, v, path);
    }
    if (strcmp(k, "$ref") == 0) {
        if (!json_is_string(v)) return gb_fail(b, "$ref must be a string at %s", path);
        /* Follow a chain of bare references: one that comes back is a loop without progress. */
        const json_t *t = v;
        for (int hops = 0; json_is_string(t); hops++) {
            if (hops > 64) return gb_fail(b, "$ref loop without progress at %s", path);
            const json_t *target = jc_resolve(c, json_string_value(t), path);
            if (!target) return -1;
            t = json_object_get(target, "$ref");
        }
        return 0;
    }
    if (strcmp(k, "minItems") == 0 || strcmp(k, "maxItems") == 0) return count(c, v, k, path);
    if (strcmp(k, "format") == 0) {
        if (!json_is_string(v) || !known(json_string_value(v), known_formats, 7))
            return gb_fail(b, "unsupported string format '%s' at %s",
                           json_is_string(v) ? json_string_value(v) : "(not a string)", path);
        return 0;
    }
    if (strcmp(k, "pattern") == 0) {
        if (!json_is_string(v)) return gb_fail(b, "pattern must be a string at %s", path);
        /* Compiled into a scratch builder only to see that it compiles. */
        gbuild scratch;
        gb_init(&scratch);
        uint32_t r = gb_rule(&scratch, "pattern");
        const char *p = json_string_value(v);
        int rc = rx_build(&scratch, scratch.rule_start[r], scratch.rule_end[r], p, strlen(p), 1, 1);
        gb_free(&scratch);
        if (rc) {
            char *msg = xstrdup(err_msg());
            gb_fail(b, "%s (pattern at %s)", msg, path);
            free(msg);
            return -1;
        }
    }
    return 0;
}

/* Keywords this compiler knows (anything else is refused); annotations are ignored. */
static const char *const all_keywords[] = {
    "type",        "properties", "required",    "additionalProperties",
    "enum",        "const",      "anyOf",       "$ref",
    "items",       "minItems",   "maxItems",    "pattern",
    "format",      "title",      "description", "default",
    "examples",    "$schema",    "$id",         "$comment",
    "deprecated",  "readOnly",   "writeOnly",   "$defs",
    "definitions",
};

static int lint(jctx *c, const json_t *s, const char *path, int depth) {
    if (json_is_true(s)) return 0;
    if (!json_is_object(s)) return gb_fail(&c->b, "a schema must be an object or true at %s", path);
    if (depth > GRAMMAR_MAX_SCHEMA_DEPTH)
        return gb_fail(&c->b, "schema nested deeper than %d at %s", GRAMMAR_MAX_SCHEMA_DEPTH, path);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (!known(k, all_keywords, sizeof all_keywords / sizeof all_keywords[0]))
            return gb_fail(&c->b, "unsupported JSON Schema keyword '%s' at %s", k, path);
        if (lint_keyword(c, k, v, path, depth)) return -1;
    }
    if (json_object_get(s, "enum") && json_object_get(s, "const"))
        return gb_fail(&c->b, "'const' beside 'enum' is not supported at %s", path);
    return 0;
}

int jc_lint(jctx *c, const json_t *root) {
    return lint(c, root, "#", 0);
}
