/* The harmony side of a chat or responses output: one choice's sampled tokens → message events.
 *
 * Each engine output is fed whole; what the parser reports for it is collected (START, TEXT, END
 * events with the text in one buffer) so the caller can turn it into one SSE chunk, or into typed
 * events, after a last adjustment: when the engine stopped on a stop string, the string (and what
 * followed it in the same token) is cut from the end of the text here. The engine holds back every
 * token that might begin a stop string, so those bytes all arrive in the final output.
 *
 * Each token is also attributed to the message whose content it is part of (or none: header
 * tokens, terminators), which decides whose logprobs it carries and counts reasoning tokens. */
#include "api/api_internal.h"

#include "base/xalloc.h"
#include "harmony/harmony_special.h"

#include <string.h>

static const char *token_bytes(void *ctx, int32_t id, size_t *len) {
    return tokenizer_token_bytes(ctx, id, len);
}

static hout_event *push_event(api_hout *h, hout_ev_kind kind, const harmony_event *ev) {
    if (h->n_ev == h->cap_ev) {
        h->cap_ev = h->cap_ev ? 2 * h->cap_ev : 16;
        h->ev = xrealloc(h->ev, h->cap_ev * sizeof *h->ev);
    }
    hout_event *e = &h->ev[h->n_ev++];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->mkind = ev->header->kind;
    e->msg = ev->message;
    return e;
}

static void on_event(void *ctx, const harmony_event *ev) {
    api_hout *h = ctx;
    switch (ev->kind) {
    case HARMONY_EV_MESSAGE_START: {
        hout_event *e = push_event(h, HOUT_START, ev);
        e->name_off = h->text.len;
        const char *fn = ev->header->function ? ev->header->function : "";
        hsb_addn(&h->text, fn, strlen(fn) + 1); /* NUL-terminated in place */
        h->open_kind = (int)ev->header->kind;
        break;
    }
    case HARMONY_EV_CONTENT: {
        /* Consecutive text of one message is merged into one event. */
        if (h->n_ev && h->ev[h->n_ev - 1].kind == HOUT_TEXT &&
            h->ev[h->n_ev - 1].msg == ev->message &&
            h->ev[h->n_ev - 1].off + h->ev[h->n_ev - 1].len == h->text.len) {
            h->ev[h->n_ev - 1].len += ev->len;
        } else {
            hout_event *e = push_event(h, HOUT_TEXT, ev);
            e->off = h->text.len;
            e->len = ev->len;
        }
        hsb_addn(&h->text, ev->text, ev->len);
        break;
    }
    case HARMONY_EV_MESSAGE_END:
        push_event(h, HOUT_END, ev)->end = ev->end;
        h->open_kind = -1;
        break;
    }
}

void hout_init(api_hout *h, const tokenizer *tok) {
    memset(h, 0, sizeof *h);
    h->tok = tok;
    h->open_kind = -1;
    harmony_parser_config cfg = {
        .token_bytes = token_bytes,
        .token_ctx = (void *)tok,
        .on_event = on_event,
        .event_ctx = h,
        .after_assistant_start = true, /* the prompt ended with <|start|>assistant */
    };
    harmony_parser_init(&h->p, &cfg);
}

void hout_free(api_hout *h) {
    harmony_parser_free(&h->p);
    free(h->ev);
    hsb_free(&h->text);
    free(h->tok_kind);
    memset(h, 0, sizeof *h);
}

size_t api_trim_utf8(char *s, size_t *len, size_t bytes) {
    size_t cut = bytes < *len ? bytes : *len;
    size_t keep = *len - cut;
    /* Never leave the first bytes of a character whose tail was cut. */
    while (keep > 0 && keep < *len && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--;
    *len = keep;
    return bytes - cut;
}

int api_tokens_in_tail(const tokenizer *tok, const int32_t *tokens, int n, int trim_bytes) {
    int dropped = 0;
    size_t covered = 0;
    for (int i = n - 1; i >= 0; i--) {
        size_t len = 0;
        if (!tokenizer_is_special(tok, tokens[i])) tokenizer_token_bytes(tok, tokens[i], &len);
        if (covered + len > (size_t)trim_bytes) break;
        covered += len;
        dropped++;
    }
    return dropped;
}

/* Cuts `bytes` from the end of the feed's text: from the last TEXT events backwards. */
static void trim_events(api_hout *h, size_t bytes) {
    for (size_t i = h->n_ev; i-- > 0 && bytes > 0;) {
        hout_event *e = &h->ev[i];
        if (e->kind != HOUT_TEXT) continue;
        size_t len = e->len;
        size_t left = api_trim_utf8(h->text.s + e->off, &len, bytes);
        bytes = left;
        e->len = len;
    }
}

void hout_feed(api_hout *h, const int32_t *tokens, int n, bool finished, int trim_bytes) {
    h->n_ev = 0;
    hsb_clear(&h->text);
    if ((size_t)n > h->cap_tok) {
        h->cap_tok = (size_t)n;
        h->tok_kind = xrealloc(h->tok_kind, h->cap_tok * sizeof *h->tok_kind);
    }
    h->n_tok = n;
    for (int i = 0; i < n; i++) {
        /* A token belongs to the message whose content is open when it arrives, unless it is one
         * of the format's special tokens (a terminator, or the start of the next header). */
        bool content = h->open_kind >= 0 && !tokenizer_is_special(h->tok, tokens[i]);
        h->tok_kind[i] = content ? h->open_kind : -1;
        if (h->open_kind == HARMONY_KIND_REASONING) h->reasoning_tokens++;
        harmony_parser_feed(&h->p, tokens[i]);
    }
    if (finished && !h->finished) {
        h->finished = true;
        harmony_parser_finish(&h->p);
        if (trim_bytes > 0) {
            trim_events(h, (size_t)trim_bytes);
            h->n_tok -= api_tokens_in_tail(h->tok, tokens, n, trim_bytes);
        }
    }
}
