/* The responses store: recent /v1/responses results kept in memory so that clients can continue a
 * conversation by id (previous_response_id), refer to one item of it (item_reference input items),
 * and GET or DELETE a response.
 *
 * Bounded three ways (flags --responses-store-size, --responses-store-bytes,
 * --responses-store-ttl): at most max_entries responses and about max_bytes of serialised JSON,
 * least recently used dropped first; a response unused (not stored, read or referred to) for ttl
 * seconds is dropped too. A response bigger than max_bytes on its own is not kept.
 *
 * One store per server, that is per served model; nothing is written to disk, so a restart forgets
 * everything. Thread-safe: the HTTP loop threads share it (one mutex; entries are kept as JSON text
 * and parsed by the caller outside the lock, so no jansson value is ever shared between threads). */
#ifndef GPTOSS_API_RESPONSE_STORE_H
#define GPTOSS_API_RESPONSE_STORE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct resp_store resp_store;

typedef struct {
    int max_entries;  /* > 0 */
    size_t max_bytes; /* > 0 */
    double ttl;       /* seconds of disuse before a response is dropped; <= 0: never */
} resp_store_limits;

resp_store *resp_store_new(const resp_store_limits *lim);
void resp_store_free(resp_store *st);

/* Keeps `response` (the response object as served) under id, with its conversation: `items` is an
 * array of the request's input items (previous conversation included, item references resolved)
 * followed by the response's output items; the first n_input of them are input. Replaces an entry
 * of the same id. Returns 0, or -1 when the entry alone is over max_bytes (nothing kept). */
int resp_store_put(resp_store *st, const char *id, const json_t *response, const json_t *items,
                   size_t n_input);
/* New references (parsed copies), NULL when the id is unknown, expired or evicted. Each marks the
 * entry used. */
json_t *resp_store_get(resp_store *st, const char *id);
json_t *resp_store_conversation(resp_store *st, const char *id); /* input + output items */
json_t *resp_store_input_items(resp_store *st, const char *id);  /* input items only */
/* An item by its id ("msg_…", "rs_…", "fc_…") from any stored conversation (the newest one that
 * holds it). */
json_t *resp_store_item(resp_store *st, const char *item_id);
/* False when the id is unknown. */
bool resp_store_delete(resp_store *st, const char *id);

typedef struct {
    int entries;
    size_t bytes;
} resp_store_stats;
resp_store_stats resp_store_stat(resp_store *st);

#endif
