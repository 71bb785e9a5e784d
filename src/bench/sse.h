/* An incremental server-sent-events reader: the body of a streaming OpenAI response arrives in
 * arbitrary pieces, and each complete event's data (its "data:" lines joined by "\n") is handed on
 * as soon as the blank line that ends it arrives. Lines end in LF, CRLF or CR; comment lines (":"
 * pings) and fields other than data are ignored, as the SSE specification says. Pure code, tested
 * byte by byte. */
#ifndef GPTOSS_BENCH_SSE_H
#define GPTOSS_BENCH_SSE_H

#include <stdbool.h>
#include <stddef.h>

typedef void (*sse_event_fn)(void *user, const char *data, size_t len);

typedef struct {
    char *line; /* the current, incomplete line */
    size_t line_len, line_cap;
    char *data; /* the data of the event being assembled */
    size_t data_len, data_cap;
    bool has_data;
    bool after_cr; /* the previous byte was a CR: a following LF belongs to the same line end */
} sse_parser;

void sse_init(sse_parser *s);
void sse_free(sse_parser *s);
/* Feeds body bytes; on_event gets every event completed by them (data NUL-terminated at len). */
void sse_feed(sse_parser *s, const char *data, size_t len, sse_event_fn on_event, void *user);
/* The body ended: an event still missing its blank line is dispatched (servers that end the stream
 * right after the last "data:" line lose nothing). */
void sse_finish(sse_parser *s, sse_event_fn on_event, void *user);

#endif
