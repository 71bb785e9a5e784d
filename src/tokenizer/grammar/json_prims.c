/* The building blocks of JSON text as grammar fragments: bounded whitespace, strings, numbers,
 * any value, literal sets, and the string formats.
 *
 * Numbers are bounded to what a double carries (at most 16 integer digits, 16 fraction digits,
 * 2 exponent digits), so a validator reading them with JSON.parse sees the value that was meant
 * and a constrained number always ends. Strings accept every spelling JSON allows (any escape,
 * \uXXXX included) and any valid UTF-8. */
#include "tokenizer/grammar/json_internal.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "tokenizer/grammar/gr_charset.h"
#include "tokenizer/grammar/regex.h"

#include <stdlib.h>
#include <string.h>

void jc_init(jctx *c, const grammar_options *opts) {
    memset(c, 0, sizeof *c);
    gb_init(&c->b);
    grammar_options d;
    grammar_options_default(&d);
    c->max_ws = opts ? opts->max_ws : d.max_ws;
    if (c->max_ws < 0) c->max_ws = 0;
    if (c->max_ws > 64) c->max_ws = 64;
    c->ws_rule = c->string_rule = c->number_rule = c->integer_rule = JC_NONE;
    c->value_rule = c->object_rule = c->array_rule = JC_NONE;
}

void jc_free(jctx *c) {
    gb_free(&c->b);
    free(c->memo);
}

/* [ \t\n\r]{0,max_ws}: a chain whose every state may end. */
void jc_ws(jctx *c, uint32_t from, uint32_t to) {
    gbuild *b = &c->b;
    if (c->max_ws == 0) {
        gb_eps(b, from, to);
        return;
    }
    if (c->ws_rule == JC_NONE) {
        uint32_t r = c->ws_rule = gb_rule(b, "whitespace");
        uint32_t cur = b->rule_start[r];
        for (int i = 0; i < c->max_ws; i++) {
            uint32_t next = gb_state(b, r);
            gb_bytes(b, cur, ' ', ' ', next);
            gb_bytes(b, cur, '\t', '\n', next);
            gb_bytes(b, cur, '\r', '\r', next);
            gb_eps(b, cur, b->rule_end[r]);
            cur = next;
        }
        gb_eps(b, cur, b->rule_end[r]);
    }
    gb_call(b, from, c->ws_rule, to);
}

void jc_call_string(jctx *c, uint32_t from, uint32_t to) {
    gbuild *b = &c->b;
    if (c->string_rule == JC_NONE) {
        uint32_t r = c->string_rule = gb_rule(b, "string");
        uint32_t body = gb_state(b, r), esc = gb_state(b, r);
        gb_bytes(b, b->rule_start[r], '"', '"', body);
        cpset plain = {0};
        cpset_add(&plain, 0x20, 0x21);
        cpset_add(&plain, 0x23, 0x5B);
        cpset_add(&plain, 0x5D, CP_MAX);
        gb_charset(b, body, &plain, 0, body);
        cpset_free(&plain);
        gb_bytes(b, body, '\\', '\\', esc);
        static const char simple[] = "\"\\/bfnrt";
        for (const char *p = simple; *p; p++) gb_bytes(b, esc, (uint8_t)*p, (uint8_t)*p, body);
        uint32_t cur = gb_state(b, r);
        gb_bytes(b, esc, 'u', 'u', cur);
        for (int i = 0; i < 4; i++) {
            uint32_t next = i == 3 ? body : gb_state(b, r);
            gb_bytes(b, cur, '0', '9', next);
            gb_bytes(b, cur, 'a', 'f', next);
            gb_bytes(b, cur, 'A', 'F', next);
            cur = next;
        }
        gb_bytes(b, body, '"', '"', b->rule_end[r]);
    }
    gb_call(b, from, c->string_rule, to);
}

static uint32_t regex_rule(jctx *c, const char *name, const char *pattern) {
    gbuild *b = &c->b;
    uint32_t r = gb_rule(b, name);
    rx_build(b, b->rule_start[r], b->rule_end[r], pattern, strlen(pattern), 0, 0);
    return r;
}

void jc_call_number(jctx *c, uint32_t from, uint32_t to) {
    if (c->number_rule == JC_NONE)
        c->number_rule = regex_rule(
            c, "number", "-?(0|[1-9][0-9]{0,15})(\\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?");
    gb_call(&c->b, from, c->number_rule, to);
}

void jc_call_integer(jctx *c, uint32_t from, uint32_t to) {
    if (c->integer_rule == JC_NONE)
        c->integer_rule = regex_rule(c, "integer", "-?(0|[1-9][0-9]{0,15})");
    gb_call(&c->b, from, c->integer_rule, to);
}

/* { ws (string ws : ws value ws (, ws string ws : ws value ws)*)? } */
void jc_call_any_object(jctx *c, uint32_t from, uint32_t to) {
    gbuild *b = &c->b;
    if (c->object_rule == JC_NONE) {
        uint32_t r = c->object_rule = gb_rule(b, "object");
#define S() gb_state(b, r)
        uint32_t open = S(), first = S(), k1 = S(), k2 = S(), k3 = S(), v1 = S(), more = S(),
                 comma = S(), end = b->rule_end[r];
        gb_bytes(b, b->rule_start[r], '{', '{', open);
        jc_ws(c, open, first);
        gb_bytes(b, first, '}', '}', end);
        jc_call_string(c, first, k1);
        jc_ws(c, k1, k2);
        gb_bytes(b, k2, ':', ':', k3);
        uint32_t k4 = S();
        jc_ws(c, k3, k4);
        jc_call_value(c, k4, v1);
        jc_ws(c, v1, more);
        gb_bytes(b, more, '}', '}', end);
        gb_bytes(b, more, ',', ',', comma);
        uint32_t next = S();
        jc_ws(c, comma, next);
        jc_call_string(c, next, k1);
#undef S
    }
    gb_call(b, from, c->object_rule, to);
}

/* [ ws (value ws (, ws value ws)*)? ] */
void jc_call_any_array(jctx *c, uint32_t from, uint32_t to) {
    gbuild *b = &c->b;
    if (c->array_rule == JC_NONE) {
        uint32_t r = c->array_rule = gb_rule(b, "array");
        uint32_t open = gb_state(b, r), first = gb_state(b, r), v = gb_state(b, r);
        uint32_t more = gb_state(b, r), comma = gb_state(b, r), end = b->rule_end[r];
        gb_bytes(b, b->rule_start[r], '[', '[', open);
        jc_ws(c, open, first);
        gb_bytes(b, first, ']', ']', end);
        jc_call_value(c, first, v);
        jc_ws(c, v, more);
        gb_bytes(b, more, ']', ']', end);
        gb_bytes(b, more, ',', ',', comma);
        uint32_t item = gb_state(b, r); /* after a comma a value must come, not ']' */
        jc_ws(c, comma, item);
        jc_call_value(c, item, v);
    }
    gb_call(b, from, c->array_rule, to);
}

void jc_call_value(jctx *c, uint32_t from, uint32_t to) {
    gbuild *b = &c->b;
    if (c->value_rule == JC_NONE) {
        uint32_t r = c->value_rule = gb_rule(b, "value");
        uint32_t s = b->rule_start[r], e = b->rule_end[r];
        jc_call_any_object(c, s, e);
        jc_call_any_array(c, s, e);
        jc_call_string(c, s, e);
        jc_call_number(c, s, e);
        gb_literal(b, s, "true", 4, e);
        gb_literal(b, s, "false", 5, e);
        gb_literal(b, s, "null", 4, e);
    }
    gb_call(b, from, c->value_rule, to);
}

/* Literals as a prefix trie: sorted, each one branches off the previous one's path where they
 * differ, so every state has at most one edge per byte. */
typedef struct {
    const char *s;
    size_t n;
} lit;

static int lit_cmp(const void *a, const void *b) {
    const lit *x = a, *y = b;
    size_t m = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, m);
    if (c) return c;
    return x->n < y->n ? -1 : x->n > y->n;
}

int jc_literals(jctx *c, uint32_t from, uint32_t to, const char *const *s, const size_t *len,
                size_t n, const char *what) {
    gbuild *b = &c->b;
    if (n > GRAMMAR_MAX_ENUM)
        return gb_fail(b, "%s: %zu values are over the limit of %d", what, n, GRAMMAR_MAX_ENUM);
    size_t maxlen = 0;
    lit *v = xmalloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        v[i] = (lit){s[i], len[i]};
        c->literal_bytes += len[i];
        if (len[i] > maxlen) maxlen = len[i];
    }
    if (c->literal_bytes > GRAMMAR_MAX_LITERAL_BYTES) {
        free(v);
        return gb_fail(b, "%s: literals over the limit of %d bytes in all", what,
                       GRAMMAR_MAX_LITERAL_BYTES);
    }
    qsort(v, n, sizeof *v, lit_cmp);
    uint32_t *path = xmalloc((maxlen + 1) * sizeof *path);
    uint32_t rule = b->state_rule[from];
    path[0] = from;
    size_t prev_n = 0;
    for (size_t i = 0; i < n && !b->failed; i++) {
        size_t l = 0;
        if (i > 0) {
            if (lit_cmp(&v[i], &v[i - 1]) == 0) continue; /* a repeated value */
            while (l < prev_n && l < v[i].n && v[i].s[l] == v[i - 1].s[l]) l++;
        }
        for (size_t k = l; k < v[i].n && !b->failed; k++) {
            path[k + 1] = gb_state(b, rule);
            gb_bytes(b, path[k], (uint8_t)v[i].s[k], (uint8_t)v[i].s[k], path[k + 1]);
        }
        gb_eps(b, path[v[i].n], to);
        prev_n = v[i].n;
    }
    free(path);
    free(v);
    return b->failed ? -1 : 0;
}

int jc_string_pattern(jctx *c, uint32_t from, uint32_t to, const char *pattern, const char *path) {
    gbuild *b = &c->b;
    uint32_t r = b->state_rule[from];
    uint32_t a = gb_state(b, r), z = gb_state(b, r);
    gb_bytes(b, from, '"', '"', a);
    gb_bytes(b, z, '"', '"', to);
    if (rx_build(b, a, z, pattern, strlen(pattern), 1, 1)) {
        err_prefix("pattern at %s", path);
        return -1;
    }
    return 0;
}

/* Formats as patterns over the string's content. Each accepts a subset of what the format allows
 * (e.g. days 29-31 only in the months that always have them), so every output is valid. */
static const char *const formats[][2] = {
    {"date", "[0-9]{4}-(((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8]))|((0[13-9]|1[0-2])-(29|30))|"
             "((0[13578]|1[02])-31))"},
    {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):"
             "[0-5][0-9])"},
    {"date-time",
     "[0-9]{4}-(((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8]))|((0[13-9]|1[0-2])-(29|30))|"
     "((0[13578]|1[02])-31))T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01]"
     "[0-9]|2[0-3]):[0-5][0-9])"},
    {"email", "[a-zA-Z0-9_+-]{1,32}(\\.[a-zA-Z0-9_+-]{1,32}){0,3}@([a-zA-Z0-9]([a-zA-Z0-9-]{0,30}"
              "[a-zA-Z0-9])?\\.){1,3}[a-zA-Z]{2,16}"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-"
             "9]|[1-9]?[0-9])"},
    {"hostname", "[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?(\\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,30}["
                 "a-zA-Z0-9])?){0,3}"},
};

int jc_string_format(jctx *c, uint32_t from, uint32_t to, const char *format, const char *path) {
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        if (strcmp(format, formats[i][0]) != 0) continue;
        gbuild *b = &c->b;
        uint32_t r = b->state_rule[from];
        uint32_t a = gb_state(b, r), z = gb_state(b, r);
        gb_bytes(b, from, '"', '"', a);
        gb_bytes(b, z, '"', '"', to);
        return rx_build(b, a, z, formats[i][1], strlen(formats[i][1]), 1, 0);
    }
    return gb_fail(&c->b, "unsupported string format '%s' at %s", format, path);
}
