/* An incremental HTTP/1.1 response parser for the benchmark client.
 *
 * Bytes arrive in whatever pieces the socket gives; the parser keeps its state between calls and
 * hands the decoded body (chunked transfer encoding removed) to a callback as soon as it has it,
 * because the benchmark times every streamed token at the moment its bytes arrive. It understands
 * exactly what a streaming OpenAI server sends: a status line, headers (Content-Length,
 * Transfer-Encoding: chunked, Connection), then a body delimited by length, by chunks or by the end
 * of the connection. Interim 1xx responses are skipped. No pipelining: the bytes after the end of
 * one message are not consumed and the caller treats them as a protocol error. Pure code, no I/O,
 * so it is tested byte by byte. */
#ifndef GPTOSS_BENCH_HTTP_PARSE_H
#define GPTOSS_BENCH_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

enum { HP_LINE_MAX = 8192 };

typedef enum {
    HP_STATUS,      /* reading the status line */
    HP_HEADERS,     /* reading header lines */
    HP_BODY_LENGTH, /* Content-Length body */
    HP_CHUNK_SIZE,  /* the hex size line of a chunk */
    HP_CHUNK_DATA,  /* inside a chunk */
    HP_CHUNK_CRLF,  /* the CRLF after a chunk's data */
    HP_TRAILERS,    /* trailer lines after the last chunk */
    HP_BODY_EOF,    /* body runs to the end of the connection */
    HP_DONE,
    HP_ERROR
} hp_state;

typedef void (*hp_body_fn)(void *user, const char *data, size_t len);

typedef struct {
    hp_state state;
    int status;
    char reason[96];
    long long content_length; /* -1 when absent */
    bool chunked;
    bool keep_alive; /* the connection may carry another request after this response */
    bool http10;
    long long remaining; /* body or chunk bytes still to come */
    char line[HP_LINE_MAX];
    size_t line_len;
    size_t n_bytes; /* bytes seen so far, for "closed before any response" */
    char error[160];
} http_parser;

/* Ready for the next response (the client never sends HEAD, so every response may have a body). */
void hp_init(http_parser *p);

/* Consumes bytes until the message ends or the data runs out; body bytes go to on_body. Returns the
 * number of bytes consumed (less than len only when the message ended inside the data), or -1 on a
 * malformed message (p->error says why). */
long hp_feed(http_parser *p, const char *data, size_t len, hp_body_fn on_body, void *user);

/* The connection was closed: ends a body delimited by the close (returns 0), or returns -1 with
 * p->error set when the message was incomplete. */
int hp_eof(http_parser *p);

static inline bool hp_done(const http_parser *p) {
    return p->state == HP_DONE;
}

#endif
