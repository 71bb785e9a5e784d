/* Logprob entries. A token's text is its bytes made valid UTF-8 (a token that holds half of a
 * character shows U+FFFD; `bytes` in chat entries gives the exact bytes, as OpenAI does). */
#include "api/api_internal.h"

#include "base/xalloc.h"
#include "tokenizer/tok_utf8.h"

#include <string.h>

char *api_token_text(const tokenizer *tok, int32_t id, size_t *len) {
    size_t n = 0;
    const char *b = tokenizer_token_bytes(tok, id, &n);
    if (!b) n = 0;
    char *s = xmalloc(3 * n + 1);
    *len = utf8_repair((const unsigned char *)b, n, (unsigned char *)s);
    s[*len] = 0;
    return s;
}

static json_t *entry(const tokenizer *tok, int32_t id, float lp) {
    size_t n = 0, tl;
    const char *b = tokenizer_token_bytes(tok, id, &n);
    if (!b) n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    char *text = api_token_text(tok, id, &tl);
    json_t *e = json_object();
    json_object_set_new(e, "token", api_jstr(text, tl));
    json_object_set_new(e, "logprob", api_jlogprob(lp));
    json_object_set_new(e, "bytes", bytes);
    free(text);
    return e;
}

json_t *api_chat_logprob(const tokenizer *tok, const engine_output *o, int i, int top) {
    json_t *e = entry(tok, o->tokens[i], o->logprobs ? o->logprobs[i] : 0.0f);
    json_t *tops = json_array();
    int k = top < o->top_k ? top : o->top_k;
    for (int j = 0; j < k && o->top_ids; j++) {
        int32_t id = o->top_ids[(size_t)i * o->top_k + j];
        if (id < 0) continue; /* fewer candidates than asked for */
        json_array_append_new(tops, entry(tok, id, o->top_logprobs[(size_t)i * o->top_k + j]));
    }
    json_object_set_new(e, "top_logprobs", tops);
    return e;
}
