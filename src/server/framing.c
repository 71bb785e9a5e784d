/* Strict message framing (RFC 9112 §6): a request whose body length could be read two ways is
 * refused with 400 and the connection closed, because a proxy in front of us may have framed it the
 * other way, and whatever we took as the next request would then be a smuggled one.
 *
 * Where: evhttp (libevent 2.1) parses the head itself and offers no hook between the head and the
 * body for server requests (the new-request callback arrived in 2.2), so the check runs on the
 * parsed head as the first thing the router does. That is early enough: evhttp stops reading the
 * connection while a request is being answered, and the Connection: close we answer with makes it
 * drop whatever it has buffered, so no byte after the refused request is ever taken as a request.
 * evhttp keeps repeated fields as separate entries and keeps whitespace before a colon in the field
 * name, so duplicates, odd values and bad names are all visible here. Not visible: obs-fold (evhttp
 * joins a folded line to the field before it with one space, exactly like a value that contains a
 * space); wire.c finds it in the raw bytes, and the router asks it first. */
#include "server/server_internal.h"

#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 §5.6.2 tchar. */
static bool is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!is_tchar((unsigned char)*s)) return false;
    return true;
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

bool framing_check(struct evhttp_request *req, char *why, size_t why_len) {
    const struct evkeyvalq *h = evhttp_request_get_input_headers(req);
    int n_cl = 0, n_te = 0;
    const struct evkeyval *kv;
    for (kv = h->tqh_first; kv; kv = kv->next.tqe_next) {
        if (!is_token(kv->key)) {
            snprintf(why, why_len,
                     "invalid header field name '%.40s' (RFC 9112: no whitespace "
                     "before the colon)",
                     kv->key);
            return false;
        }
        if (!strcasecmp(kv->key, "Content-Length")) {
            if (++n_cl > 1) {
                snprintf(why, why_len, "more than one Content-Length header");
                return false;
            }
            if (!all_digits(kv->value)) {
                snprintf(why, why_len, "invalid Content-Length '%.40s' (digits only)", kv->value);
                return false;
            }
        } else if (!strcasecmp(kv->key, "Transfer-Encoding")) {
            if (++n_te > 1) {
                snprintf(why, why_len, "more than one Transfer-Encoding header");
                return false;
            }
            /* The only coding evhttp decodes; anything else would leave the body's end unknown. */
            if (strcasecmp(kv->value, "chunked") != 0) {
                snprintf(why, why_len,
                         "unsupported Transfer-Encoding '%.40s' (only 'chunked' is accepted)",
                         kv->value);
                return false;
            }
        }
    }
    if (n_cl && n_te) {
        snprintf(why, why_len, "Content-Length together with Transfer-Encoding");
        return false;
    }
    return true;
}
