#include "bench/http_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hp_init(http_parser *p) {
    memset(p, 0, sizeof *p);
    p->state = HP_STATUS;
    p->content_length = -1;
}

static long fail(http_parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static long fail(http_parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    p->state = HP_ERROR;
    return -1;
}

/* "HTTP/1.1 200 OK" */
static int status_line(http_parser *p, char *s) {
    if (strncmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ')
        return (int)fail(p, "not an HTTP/1.x status line: '%.60s'", s);
    p->http10 = s[7] == '0';
    char *end;
    errno = 0;
    long code = strtol(s + 9, &end, 10);
    if (errno || end != s + 12 || code < 100 || code > 999 || (*end && *end != ' '))
        return (int)fail(p, "bad status code in '%.60s'", s);
    p->status = (int)code;
    snprintf(p->reason, sizeof p->reason, "%s", *end ? end + 1 : "");
    p->keep_alive =
        !p->http10; /* the version's default, until a Connection header says otherwise */
    p->content_length = -1;
    p->chunked = false;
    return 0;
}

static bool has_token(const char *value, const char *token) {
    size_t n = strlen(token);
    for (const char *v = value; *v;) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *start = v;
        while (*v && *v != ',') v++;
        const char *end = v;
        while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
        if ((size_t)(end - start) == n && strncasecmp(start, token, n) == 0) return true;
    }
    return false;
}

static int header_line(http_parser *p, char *s) {
    char *colon = strchr(s, ':');
    if (!colon || colon == s) return (int)fail(p, "malformed header line '%.60s'", s);
    *colon = 0;
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    if (!strcasecmp(s, "Content-Length")) {
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (errno || end == v || n < 0) return (int)fail(p, "bad Content-Length '%.30s'", v);
        while (*end == ' ' || *end == '\t') end++;
        if (*end) return (int)fail(p, "bad Content-Length '%.30s'", v);
        p->content_length = n;
    } else if (!strcasecmp(s, "Transfer-Encoding")) {
        p->chunked = has_token(v, "chunked");
    } else if (!strcasecmp(s, "Connection")) {
        if (has_token(v, "close"))
            p->keep_alive = false;
        else if (has_token(v, "keep-alive"))
            p->keep_alive = true;
    }
    return 0;
}

/* The blank line after the headers: choose how the body is delimited. */
static void headers_done(http_parser *p) {
    if (p->status >= 100 && p->status < 200 && p->status != 101) {
        p->state = HP_STATUS; /* an interim response (100 Continue): the real one follows */
        return;
    }
    if (p->status == 204 || p->status == 304) {
        p->state = HP_DONE;
    } else if (p->chunked) {
        p->state = HP_CHUNK_SIZE;
    } else if (p->content_length >= 0) {
        p->remaining = p->content_length;
        p->state = p->remaining > 0 ? HP_BODY_LENGTH : HP_DONE;
    } else {
        p->state = HP_BODY_EOF;
        p->keep_alive = false; /* only the close can end this body */
    }
}

static int chunk_size_line(http_parser *p, char *s) {
    char *end;
    errno = 0;
    long long n = strtoll(s, &end, 16);
    if (errno || end == s || n < 0) return (int)fail(p, "bad chunk size '%.30s'", s);
    while (*end == ' ' || *end == '\t') end++;
    if (*end && *end != ';') return (int)fail(p, "bad chunk size '%.30s'", s);
    p->remaining = n;
    p->state = n > 0 ? HP_CHUNK_DATA : HP_TRAILERS;
    return 0;
}

/* Handles one complete line (without its CRLF) in the line-oriented states. */
static int on_line(http_parser *p) {
    char *s = p->line;
    s[p->line_len] = 0;
    p->line_len = 0;
    switch (p->state) {
    case HP_STATUS:
        if (!*s) return 0; /* tolerate a stray CRLF before the status line */
        if (status_line(p, s)) return -1;
        p->state = HP_HEADERS;
        return 0;
    case HP_HEADERS:
        if (!*s) {
            headers_done(p);
            return 0;
        }
        return header_line(p, s);
    case HP_CHUNK_SIZE:
        return chunk_size_line(p, s);
    case HP_CHUNK_CRLF:
        if (*s) return (int)fail(p, "missing CRLF after chunk data");
        p->state = HP_CHUNK_SIZE;
        return 0;
    case HP_TRAILERS:
        if (!*s) p->state = HP_DONE;
        return 0;
    default:
        return (int)fail(p, "internal: line in state %d", (int)p->state);
    }
}

long hp_feed(http_parser *p, const char *data, size_t len, hp_body_fn on_body, void *user) {
    size_t i = 0;
    if (p->state == HP_ERROR) return -1;
    while (i < len && p->state != HP_DONE) {
        if (p->state == HP_BODY_LENGTH || p->state == HP_CHUNK_DATA) {
            size_t n = len - i;
            if ((long long)n > p->remaining) n = (size_t)p->remaining;
            if (n > 0 && on_body) on_body(user, data + i, n);
            i += n;
            p->remaining -= (long long)n;
            if (p->remaining == 0) p->state = p->state == HP_BODY_LENGTH ? HP_DONE : HP_CHUNK_CRLF;
            continue;
        }
        if (p->state == HP_BODY_EOF) {
            if (on_body) on_body(user, data + i, len - i);
            i = len;
            continue;
        }
        /* Line-oriented states: collect up to LF (a CR before it is dropped). */
        char c = data[i++];
        if (c == '\n') {
            if (p->line_len > 0 && p->line[p->line_len - 1] == '\r') p->line_len--;
            if (on_line(p)) return -1;
        } else {
            if (p->line_len + 1 >= HP_LINE_MAX)
                return fail(p, "header or chunk line over %d bytes", HP_LINE_MAX);
            p->line[p->line_len++] = c;
        }
    }
    p->n_bytes += i;
    return (long)i;
}

int hp_eof(http_parser *p) {
    if (p->state == HP_BODY_EOF) {
        p->state = HP_DONE;
        return 0;
    }
    if (p->state == HP_DONE) return 0;
    if (p->state == HP_ERROR) return -1;
    if (p->n_bytes == 0) return (int)fail(p, "the server closed the connection without a response");
    return (int)fail(p, "the server closed the connection in the middle of the response (%s)",
                     p->state <= HP_HEADERS ? "headers" : "body");
}
