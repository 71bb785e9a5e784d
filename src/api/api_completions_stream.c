/* /v1/completions output: tokens → text, UTF-8-safe across chunks (tok_stream holds back a split
 * character until the token that completes it).
 *
 * Special tokens give no text (vLLM's skip_special_tokens, default true; false spells them out),
 * and a special token that stopped the output never does (an ordinary one from stop_token_ids
 * stays in the text, as in vLLM). A stop string is cut from the end of the text
 * (the engine reports its length in trim_bytes, and holds back the tokens that might start one, so
 * they all arrive in the last output).
 *
 * logprobs: {tokens, token_logprobs, top_logprobs, text_offset}, one entry per sampled token (a
 * hidden special token included, with its name as its text), so the arrays are as long as
 * completion_tokens but for tokens cut with a stop string; top_logprobs maps the text of each alternative (and of the sampled token, as OpenAI does)
 * to its logprob; text_offset counts characters from the start of the choice's text. With echo, the
 * prompt's tokens come first: the first with null logprobs (nothing predicts it), the others with
 * their own logprob given the tokens before them, which the engine computes for every prompt
 * position (vLLM's echo scoring), and in top_logprobs the prompt token and the top alternatives.
 * max_tokens 0 with echo (echo_only) scores the prompt alone: the one token the engine generates
 * is not shown, completion_tokens is 0 and finish_reason "length".
 * prompt_logprobs (vLLM): [null, {"id": {logprob, rank, decoded_token}}, ...] on the first chunk.
 */
#include "api/api_internal.h"

#include "base/xalloc.h"

#include <math.h>
#include <string.h>

typedef struct {
    tok_stream ts;
    bool started, finished, errored;
    size_t chars; /* characters of text so far (for text_offset) */
    hsb text;     /* the whole text (non-streaming) */
    json_t *lp;   /* {tokens, token_logprobs, top_logprobs, text_offset} (non-streaming) */
    json_t *prompt_lp;
    const char *finish_reason;
    json_t *stop_reason;
} cmpl_choice;

/* The engine's prompt rows of one prompt, kept from whichever of its outputs brought them. */
typedef struct {
    int32_t *ids;
    float *lps;
    float *own; /* [n]: each prompt token's own logprob (NaN: none), or NULL */
    int n, k;
} cmpl_rows;

struct api_cmpl_state {
    cmpl_choice *ch;
    cmpl_rows *rows; /* per prompt */
};

static json_t *lp_new(void) {
    return json_pack("{s[]s[]s[]s[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
}

int api_cmpl_stream_init(api_stream *s) {
    s->cmpl = xcalloc(1, sizeof *s->cmpl);
    s->cmpl->ch = xcalloc((size_t)s->n, sizeof *s->cmpl->ch);
    s->cmpl->rows = xcalloc((size_t)(s->n / s->n_per), sizeof *s->cmpl->rows);
    for (int i = 0; i < s->n; i++) {
        tok_stream_init(&s->cmpl->ch[i].ts);
        s->cmpl->ch[i].lp = lp_new();
    }
    return 0;
}

void api_cmpl_stream_free(api_stream *s) {
    if (!s->cmpl) return;
    for (int i = 0; i < s->n; i++) {
        cmpl_choice *c = &s->cmpl->ch[i];
        tok_stream_free(&c->ts);
        hsb_free(&c->text);
        json_decref(c->lp);
        json_decref(c->prompt_lp);
        json_decref(c->stop_reason);
    }
    free(s->cmpl->ch);
    for (int p = 0; p < s->n / s->n_per; p++)
        free(s->cmpl->rows[p].ids), free(s->cmpl->rows[p].lps), free(s->cmpl->rows[p].own);
    free(s->cmpl->rows);
    free(s->cmpl);
    s->cmpl = NULL;
}

static size_t count_chars(const char *t, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)t[i] & 0xC0) != 0x80;
    return c;
}

static void keep_rows(cmpl_rows *st, const engine_output *o) {
    if (st->ids || o->n_prompt_rows <= 0 || o->prompt_k <= 0 || !o->prompt_top_ids) return;
    size_t n = (size_t)o->n_prompt_rows * (size_t)o->prompt_k;
    st->ids = xmalloc(n * sizeof *st->ids);
    st->lps = xmalloc(n * sizeof *st->lps);
    memcpy(st->ids, o->prompt_top_ids, n * sizeof *st->ids);
    memcpy(st->lps, o->prompt_top_logprobs, n * sizeof *st->lps);
    st->n = o->n_prompt_rows;
    st->k = o->prompt_k;
    if (o->prompt_logprobs) {
        st->own = xmalloc((size_t)st->n * sizeof *st->own);
        memcpy(st->own, o->prompt_logprobs, (size_t)st->n * sizeof *st->own);
    }
}

static void dict_set(const tokenizer *tok, json_t *dict, int32_t id, float lp) {
    size_t n;
    char *t = api_token_text(tok, id, &n);
    json_object_setn_new(dict, t, n, api_jlogprob(lp));
    free(t);
}

static void lp_add(const tokenizer *tok, json_t *lp, int32_t id, json_t *logprob, json_t *top,
                   size_t offset) {
    size_t n;
    char *t = api_token_text(tok, id, &n);
    json_array_append_new(json_object_get(lp, "tokens"), api_jstr(t, n));
    json_array_append_new(json_object_get(lp, "token_logprobs"), logprob);
    json_array_append_new(json_object_get(lp, "top_logprobs"), top);
    json_array_append_new(json_object_get(lp, "text_offset"), json_integer((json_int_t)offset));
    free(t);
}

/* The echoed prompt's entries. */
static void echo_logprobs(api_stream *s, const api_prompt *pr, const cmpl_rows *st, json_t *lp) {
    size_t off = 0;
    for (int q = 0; q < pr->n; q++) {
        json_t *logprob = json_null(), *top = json_null();
        if (q > 0 && st->ids && q - 1 < st->n) {
            const int32_t *ids = st->ids + (size_t)(q - 1) * st->k;
            const float *lps = st->lps + (size_t)(q - 1) * st->k;
            top = json_object();
            /* The token's own logprob; a backend that gave none leaves the top-K search below. */
            float own = st->own ? st->own[q - 1] : NAN;
            if (!isnan(own)) {
                json_decref(logprob);
                logprob = api_jlogprob(own);
                dict_set(s->tok, top, pr->ids[q], own);
            }
            for (int j = 0; j < st->k; j++) {
                if (ids[j] < 0) continue;
                if (ids[j] == pr->ids[q]) {
                    if (isnan(own)) {
                        json_decref(logprob);
                        logprob = api_jlogprob(lps[j]);
                    }
                    dict_set(s->tok, top, ids[j], lps[j]);
                } else if (j < s->opts.top_logprobs) {
                    dict_set(s->tok, top, ids[j], lps[j]);
                }
            }
        }
        lp_add(s->tok, lp, pr->ids[q], logprob, top, off);
        size_t n;
        char *t = api_token_text(s->tok, pr->ids[q], &n);
        off += count_chars(t, n);
        free(t);
    }
}

/* vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}}, ...]. */
static json_t *prompt_logprobs_json(api_stream *s, const cmpl_rows *st) {
    if (!st->ids) return json_null();
    json_t *a = json_array();
    json_array_append_new(a, json_null());
    int k = s->opts.prompt_logprobs < st->k ? s->opts.prompt_logprobs : st->k;
    for (int r = 0; r < st->n; r++) {
        json_t *row = json_object();
        for (int j = 0; j < k; j++) {
            int32_t id = st->ids[(size_t)r * st->k + j];
            if (id < 0) continue;
            char key[16];
            snprintf(key, sizeof key, "%d", id);
            size_t n;
            char *t = api_token_text(s->tok, id, &n);
            json_object_set_new(row, key,
                                json_pack("{sosiso}", "logprob",
                                          api_jlogprob(st->lps[(size_t)r * st->k + j]), "rank",
                                          j + 1, "decoded_token", api_jstr(t, n)));
            free(t);
        }
        json_array_append_new(a, row);
    }
    return a;
}

static json_t *choice_json(const api_stream *s, int index, const char *text, size_t n, json_t *lp,
                           const cmpl_choice *c) {
    json_t *ch = json_pack("{siso}", "index", index, "text", api_jstr(text, n));
    json_object_set_new(ch, "logprobs", s->opts.logprobs ? json_incref(lp) : json_null());
    json_object_set_new(ch, "finish_reason",
                        c->finished ? json_string(c->finish_reason) : json_null());
    json_object_set(ch, "stop_reason", c->finished ? c->stop_reason : json_null());
    return ch;
}

static json_t *envelope(const api_stream *s, json_t *choices) {
    json_t *b = json_pack("{sssssIssso}", "id", s->id, "object", "text_completion", "created",
                          (json_int_t)s->created, "model", s->model, "choices", choices);
    return b;
}

/* echo_only: the request asked for no tokens (max_tokens 0); the engine generated one to get the
 * prompt through. The output without it. */
static const engine_output *without_tokens(const engine_output *o, engine_output *tmp) {
    *tmp = *o;
    tmp->n_tokens = 0;
    tmp->tokens = NULL;
    tmp->logprobs = tmp->top_logprobs = NULL;
    tmp->top_ids = NULL;
    tmp->top_k = 0;
    tmp->trim_bytes = 0;
    tmp->stop_token = -1;
    tmp->stop_string = -1;
    tmp->completion_tokens = 0;
    if (o->finished && o->finish_reason && strcmp(o->finish_reason, "abort") != 0 &&
        strcmp(o->finish_reason, "error") != 0)
        tmp->finish_reason = "length";
    return tmp;
}

int api_cmpl_stream_feed(api_stream *s, const engine_output *o, char **out, size_t *out_len) {
    cmpl_choice *c = &s->cmpl->ch[o->index];
    if (c->finished) return 0;
    engine_output tmp;
    if (s->opts.echo_only) o = without_tokens(o, &tmp);
    /* Which prompt: choices are numbered prompt × n + sample. */
    int p = o->index / s->n_per;
    const api_prompt *pr = p < s->opts.n_prompts ? &s->opts.prompts[p] : NULL;
    cmpl_rows *rows_p = &s->cmpl->rows[p];
    keep_rows(rows_p, o);
    hsb text = {0};
    json_t *lp = lp_new();
    bool first = !c->started;
    if (first) {
        c->started = true;
        if (s->echo && pr) {
            hsb_addn(&text, pr->text ? pr->text : "", pr->text ? pr->text_len : 0);
            if (s->opts.logprobs) echo_logprobs(s, pr, rows_p, lp);
        }
        if (s->opts.prompt_logprobs > 0) c->prompt_lp = prompt_logprobs_json(s, rows_p);
    }
    /* Tokens of this output with an entry (index into o), to drop trimmed ones afterwards. */
    int *rows = xmalloc(((size_t)o->n_tokens + 1) * sizeof *rows);
    int n_rows = 0;
    for (int i = 0; i < o->n_tokens; i++) {
        int32_t id = o->tokens[i];
        bool special = tokenizer_is_special(s->tok, id);
        bool is_stop = o->finished && i == o->n_tokens - 1 && id == o->stop_token;
        /* vLLM: the output contains a stop token unless it is a special token. A hidden token
         * still has its logprobs entry (at the current offset, adding no text): it was sampled
         * and is counted in completion_tokens, and clients line the arrays up with that. */
        bool hidden = special && (is_stop || s->opts.skip_special_tokens);
        const char *t;
        size_t n;
        size_t offset = c->chars + count_chars(text.s ? text.s : "", text.len);
        if (!hidden) {
            if (tok_stream_push(s->tok, &c->ts, id, &t, &n) != 0) continue;
            hsb_addn(&text, t, n);
        }
        if (s->opts.logprobs) {
            json_t *top = json_object();
            dict_set(s->tok, top, id, o->logprobs ? o->logprobs[i] : 0);
            int k = s->opts.top_logprobs < o->top_k ? s->opts.top_logprobs : o->top_k;
            for (int j = 0; j < k && o->top_ids; j++) {
                int32_t alt = o->top_ids[(size_t)i * o->top_k + j];
                if (alt >= 0) dict_set(s->tok, top, alt, o->top_logprobs[(size_t)i * o->top_k + j]);
            }
            lp_add(s->tok, lp, id, api_jlogprob(o->logprobs ? o->logprobs[i] : 0), top, offset);
        }
        rows[n_rows++] = i;
    }
    if (o->finished) {
        const char *t;
        size_t n;
        tok_stream_flush(&c->ts, &t, &n);
        hsb_addn(&text, t, n);
        if (o->trim_bytes > 0) {
            api_trim_utf8(text.s, &text.len, (size_t)o->trim_bytes);
            if (text.s) text.s[text.len] = 0;
            int drop = api_tokens_in_tail(s->tok, o->tokens, o->n_tokens, o->trim_bytes);
            int keep = n_rows;
            while (keep > 0 && rows[keep - 1] >= o->n_tokens - drop) keep--;
            static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs",
                                               "text_offset"};
            for (int k = 0; s->opts.logprobs && k < 4; k++) {
                json_t *a = json_object_get(lp, keys[k]);
                for (int r = keep; r < n_rows; r++) json_array_remove(a, json_array_size(a) - 1);
            }
        }
        c->finished = true;
        c->finish_reason = o->finish_reason ? o->finish_reason : "stop";
        c->errored = !strcmp(c->finish_reason, "error");
        c->stop_reason = api_stop_reason(s, o);
        s->n_finished++;
        api_stream_count(s, o);
    }
    free(rows);
    c->chars += count_chars(text.s ? text.s : "", text.len);
    if (s->stream) {
        if (c->errored) {
            api_out_sse(out, out_len, json_pack("{so}", "error", api_engine_error_json()));
        } else if (text.len || json_array_size(json_object_get(lp, "tokens")) || first ||
                   c->finished) {
            json_t *ch = choice_json(s, o->index, text.s, text.len, lp, c);
            if (first && c->prompt_lp) json_object_set(ch, "prompt_logprobs", c->prompt_lp);
            json_t *chunk = envelope(s, json_pack("[o]", ch));
            if (s->include_usage) json_object_set_new(chunk, "usage", json_null());
            api_out_sse(out, out_len, chunk);
        }
    } else {
        hsb_addn(&c->text, text.s ? text.s : "", text.len);
        static const char *const keys[] = {"tokens", "token_logprobs", "top_logprobs",
                                           "text_offset"};
        for (int k = 0; k < 4; k++)
            json_array_extend(json_object_get(c->lp, keys[k]), json_object_get(lp, keys[k]));
    }
    hsb_free(&text);
    json_decref(lp);
    if (s->n_finished < s->n) return 0;
    if (s->stream) {
        if (s->include_usage) {
            json_t *u = envelope(s, json_array());
            json_object_set_new(u, "usage", api_usage_json(s, false));
            api_out_sse(out, out_len, u);
        }
        api_out_add(out, out_len, "data: [DONE]\n\n", 14);
    } else {
        bool failed = false;
        for (int i = 0; i < s->n; i++) failed = failed || s->cmpl->ch[i].errored;
        if (failed) {
            s->status = 500;
            api_out_json(out, out_len, json_pack("{so}", "error", api_engine_error_json()));
        } else {
            json_t *choices = json_array();
            for (int i = 0; i < s->n; i++) {
                cmpl_choice *ci = &s->cmpl->ch[i];
                json_t *ch = choice_json(s, i, ci->text.s, ci->text.len, ci->lp, ci);
                if (s->opts.prompt_logprobs > 0)
                    json_object_set(ch, "prompt_logprobs",
                                    ci->prompt_lp ? ci->prompt_lp : json_null());
                json_array_append_new(choices, ch);
            }
            json_t *body = envelope(s, choices);
            json_object_set_new(body, "usage", api_usage_json(s, false));
            api_out_json(out, out_len, body);
        }
    }
    s->done = true;
    return 1;
}
