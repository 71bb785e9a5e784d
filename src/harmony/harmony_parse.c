/* The streaming harmony parser's state machine (see harmony_parse.h for the events and the salvage
 * rules).
 *
 *   EXPECT_START --<|start|>--> HEADER --<|message|>--> CONTENT --<|end|>/<|return|>/<|call|>-->
 * EXPECT_START
 *
 * A header is collected as text (specials spelled out) and parsed whole at <|message|>, since its
 * words can come in any order and split across tokens arbitrarily. Content is streamed: each
 * ordinary token's bytes go out at once, except an unfinished UTF-8 character at the end, which
 * waits for the next token. */
#include "harmony/harmony_parse.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_utf8.h"

#include <string.h>

enum { S_EXPECT_START, S_HEADER, S_CONTENT, S_DONE };

const char *harmony_kind_name(harmony_kind k) {
    switch (k) {
    case HARMONY_KIND_REASONING:
        return "reasoning";
    case HARMONY_KIND_FINAL:
        return "final";
    case HARMONY_KIND_PREAMBLE:
        return "preamble";
    case HARMONY_KIND_TOOL_CALL:
        return "tool_call";
    case HARMONY_KIND_BUILTIN_CALL:
        return "builtin_call";
    case HARMONY_KIND_TOOL_RESULT:
        return "tool_result";
    case HARMONY_KIND_OTHER:
        return "other";
    }
    return "?";
}

const char *harmony_end_name(harmony_end_reason r) {
    switch (r) {
    case HARMONY_END_END:
        return "end";
    case HARMONY_END_RETURN:
        return "return";
    case HARMONY_END_CALL:
        return "call";
    case HARMONY_END_IMPLICIT:
        return "implicit";
    case HARMONY_END_TRUNCATED:
        return "truncated";
    }
    return "?";
}

void harmony_parser_init(harmony_parser *p, const harmony_parser_config *cfg) {
    memset(p, 0, sizeof *p);
    p->cfg = *cfg;
    if (cfg->after_assistant_start) {
        p->state = S_HEADER;
        p->role_known = true;
        p->role = HARMONY_ROLE_ASSISTANT;
    } else {
        p->state = S_EXPECT_START;
    }
}

void harmony_parser_free(harmony_parser *p) {
    hsb_free(&p->header);
    hsb_free(&p->pending);
    hsb_free(&p->out);
    hsb_free(&p->fields);
}

static void emit(harmony_parser *p, harmony_event_kind kind, const char *text, size_t len,
                 harmony_end_reason end) {
    harmony_event ev = {kind, p->n_messages - 1, &p->hdr, text, len, end};
    if (p->cfg.on_event) p->cfg.on_event(p->cfg.event_ctx, &ev);
}

static void emit_text(harmony_parser *p, const char *text, size_t len) {
    if (len) emit(p, HARMONY_EV_CONTENT, text, len, HARMONY_END_END);
}

/* Starts collecting a header. role_known: the role is given (after <|start|>assistant in the
 * prompt, or carried over when the model skipped "<|end|><|start|>assistant"). */
static void begin_header(harmony_parser *p, bool role_known, harmony_role role, bool implicit) {
    p->state = S_HEADER;
    p->implicit = implicit;
    p->role_known = role_known;
    p->role = role;
    hsb_clear(&p->header);
}

static void open_message(harmony_parser *p) {
    p->n_messages++;
    p->state = S_CONTENT;
    emit(p, HARMONY_EV_MESSAGE_START, NULL, 0, HARMONY_END_END);
}

/* Sends content bytes out, holding back an unfinished character (all of it when `final`). */
static void content_bytes(harmony_parser *p, const char *b, size_t n, bool final) {
    hsb_addn(&p->pending, b, n);
    hsb_clear(&p->out);
    size_t used = harmony_utf8_clean(p->pending.s, p->pending.len, final, &p->out);
    memmove(p->pending.s, p->pending.s + used, p->pending.len - used);
    p->pending.len -= used;
    emit_text(p, p->out.s, p->out.len);
}

static void close_message(harmony_parser *p, harmony_end_reason why) {
    content_bytes(p, NULL, 0, true);
    emit(p, HARMONY_EV_MESSAGE_END, NULL, 0, why);
    p->state = S_EXPECT_START;
    hsb_clear(&p->fields);
    memset(&p->hdr, 0, sizeof p->hdr);
}

static void trim_end(hsb *b) {
    while (b->len && strchr(" \t\r\n\f\v", b->s[b->len - 1])) b->len--;
}

/* A header that will not get its <|message|>: the words after the role and channel are the content.
 * close_why: how it ends now, or -1 to keep the message open and stream on (a header too long to be
 * one). Whitespace alone is not a message, nor is a header cut off by the end of the output. */
static void salvage_header(harmony_parser *p, int close_why) {
    hsb content = {0};
    harmony_parse_header(p->header.s, p->header.len, p->role_known, p->role, &p->fields, &p->hdr,
                         &content);
    if (close_why >= 0) trim_end(&content);
    hsb_clear(&p->header);
    bool cut = close_why == HARMONY_END_TRUNCATED;
    if (content.len == 0 && (!p->hdr.channel || cut) && close_why >= 0) {
        p->state = S_EXPECT_START;
        hsb_free(&content);
        return;
    }
    p->hdr.malformed = true;
    open_message(p);
    content_bytes(p, content.s, content.len, false);
    hsb_free(&content);
    if (close_why >= 0) close_message(p, (harmony_end_reason)close_why);
}

static harmony_end_reason end_reason(int32_t token) {
    return token == HARMONY_TOK_RETURN ? HARMONY_END_RETURN
           : token == HARMONY_TOK_CALL ? HARMONY_END_CALL
                                       : HARMONY_END_END;
}

static void header_append(harmony_parser *p, const char *b, size_t n) {
    hsb_addn(&p->header, b, n);
    if (p->header.len > HARMONY_MAX_HEADER) salvage_header(p, -1);
}

static void feed_header(harmony_parser *p, int32_t token, const char *bytes, size_t n) {
    switch (token) {
    case HARMONY_TOK_MESSAGE:
        harmony_parse_header(p->header.s, p->header.len, p->role_known, p->role, &p->fields,
                             &p->hdr, NULL);
        hsb_clear(&p->header);
        if (p->implicit) p->hdr.malformed = true;
        open_message(p);
        return;
    case HARMONY_TOK_END:
    case HARMONY_TOK_RETURN:
    case HARMONY_TOK_CALL:
        salvage_header(p, (int)end_reason(token));
        return;
    case HARMONY_TOK_START:
        salvage_header(p, HARMONY_END_IMPLICIT);
        begin_header(p, false, HARMONY_ROLE_ASSISTANT, false);
        return;
    case HARMONY_TOK_CHANNEL:
    case HARMONY_TOK_CONSTRAIN: {
        const char *name = harmony_special_name(token);
        header_append(p, name, strlen(name));
        return;
    }
    default:
        if (bytes)
            header_append(p, bytes, n);
        else
            header_append(p, HARMONY_REPLACEMENT, strlen(HARMONY_REPLACEMENT));
    }
}

static void feed_content(harmony_parser *p, int32_t token, const char *bytes, size_t n) {
    switch (token) {
    case HARMONY_TOK_END:
    case HARMONY_TOK_RETURN:
    case HARMONY_TOK_CALL:
        close_message(p, end_reason(token));
        return;
    case HARMONY_TOK_START:
        close_message(p, HARMONY_END_IMPLICIT);
        begin_header(p, false, HARMONY_ROLE_ASSISTANT, false);
        return;
    case HARMONY_TOK_CHANNEL: {
        /* The model skipped "<|end|><|start|>assistant" and went straight to the next header. */
        harmony_role role = p->hdr.role;
        close_message(p, HARMONY_END_IMPLICIT);
        begin_header(p, true, role, true);
        feed_header(p, token, NULL, 0);
        return;
    }
    case HARMONY_TOK_MESSAGE:
    case HARMONY_TOK_CONSTRAIN:
        p->n_ignored++;
        return;
    default:
        if (bytes) {
            content_bytes(p, bytes, n, false);
        } else {
            content_bytes(p, NULL, 0, true); /* an unknown id breaks any unfinished character */
            emit_text(p, HARMONY_REPLACEMENT, strlen(HARMONY_REPLACEMENT));
        }
    }
}

void harmony_parser_feed(harmony_parser *p, int32_t token) {
    bool structural = harmony_special_name(token) != NULL;
    if (p->state == S_DONE || (!structural && harmony_is_special(token))) {
        p->n_ignored++; /* <|endoftext|>, <|reserved_*|>, or anything after finish */
        return;
    }
    const char *bytes = NULL;
    size_t n = 0;
    if (!structural && p->cfg.token_bytes) bytes = p->cfg.token_bytes(p->cfg.token_ctx, token, &n);

    switch (p->state) {
    case S_EXPECT_START:
        if (token == HARMONY_TOK_START) {
            begin_header(p, false, HARMONY_ROLE_ASSISTANT, false);
        } else if (harmony_is_terminator(token)) {
            p->n_ignored++;
        } else {
            /* Anything else means a message began without its <|start|>assistant. */
            begin_header(p, true, HARMONY_ROLE_ASSISTANT, true);
            feed_header(p, token, bytes, n);
        }
        break;
    case S_HEADER:
        feed_header(p, token, bytes, n);
        break;
    case S_CONTENT:
        feed_content(p, token, bytes, n);
        break;
    }
}

void harmony_parser_finish(harmony_parser *p) {
    if (p->state == S_HEADER) salvage_header(p, HARMONY_END_TRUNCATED);
    if (p->state == S_CONTENT) close_message(p, HARMONY_END_TRUNCATED);
    p->state = S_DONE;
}
