/* The responses store (see response_store.h): a doubly linked LRU list of entries, most recently
 * used first, and two hash maps, response id → entry and item id → item. Since every use moves an
 * entry to the front and stamps it, the list is also ordered by last use, so expiry only ever
 * looks at the tail. */
#include "api/response_store.h"

#include "base/strmap.h"
#include "base/timeutil.h"
#include "base/xalloc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct rs_entry rs_entry;

typedef struct {
    char *id; /* NULL for an item without one */
    char *text;
    size_t len;
    rs_entry *owner;
} rs_item;

struct rs_entry {
    char *id;
    char *response;
    size_t response_len;
    rs_item *items;
    size_t n_items, n_input;
    size_t bytes;
    double last_used;
    rs_entry *prev, *next;
};

struct resp_store {
    pthread_mutex_t mu;
    resp_store_limits lim;
    strmap by_id;   /* id → rs_entry (keys are the entries' own ids) */
    strmap by_item; /* item id → rs_item of the newest entry holding it */
    rs_entry *head, *tail;
    int n;
    size_t bytes;
};

resp_store *resp_store_new(const resp_store_limits *lim) {
    resp_store *st = xcalloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    st->lim = *lim;
    if (st->lim.max_entries < 1) st->lim.max_entries = 1;
    return st;
}

static void entry_free(rs_entry *e) {
    for (size_t i = 0; i < e->n_items; i++) free(e->items[i].id), free(e->items[i].text);
    free(e->items);
    free(e->response);
    free(e->id);
    free(e);
}

static void unlink_entry(resp_store *st, rs_entry *e) {
    if (e->prev)
        e->prev->next = e->next;
    else
        st->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(resp_store *st, rs_entry *e) {
    e->prev = NULL;
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
}

/* Drops e from the list and both maps (an item id that a newer entry took over stays with it). */
static void remove_entry(resp_store *st, rs_entry *e) {
    for (size_t i = 0; i < e->n_items; i++) {
        rs_item *it = &e->items[i];
        if (!it->id) continue;
        void **v = strmap_find(&st->by_item, it->id);
        if (v && *v == it) strmap_del(&st->by_item, it->id);
    }
    strmap_del(&st->by_id, e->id);
    unlink_entry(st, e);
    st->n--;
    st->bytes -= e->bytes;
    entry_free(e);
}

static void expire(resp_store *st, double now) {
    if (st->lim.ttl <= 0) return;
    while (st->tail && now - st->tail->last_used > st->lim.ttl) remove_entry(st, st->tail);
}

static void touch(resp_store *st, rs_entry *e, double now) {
    e->last_used = now;
    unlink_entry(st, e);
    push_front(st, e);
}

void resp_store_free(resp_store *st) {
    if (!st) return;
    while (st->head) {
        rs_entry *e = st->head;
        st->head = e->next;
        entry_free(e);
    }
    strmap_free(&st->by_id);
    strmap_free(&st->by_item);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static char *dump(const json_t *v, size_t *len) {
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    *len = s ? strlen(s) : 0;
    return s;
}

/* The entry, serialised outside the lock. */
static rs_entry *entry_new(const char *id, const json_t *response, const json_t *items,
                           size_t n_input) {
    rs_entry *e = xcalloc(1, sizeof *e);
    e->id = xstrdup(id);
    e->response = dump(response, &e->response_len);
    size_t n = json_is_array(items) ? json_array_size(items) : 0;
    e->items = xcalloc(n ? n : 1, sizeof *e->items);
    e->n_items = n;
    e->n_input = n_input < n ? n_input : n;
    /* The bookkeeping counts too, so that many tiny responses cannot outgrow the byte bound. */
    e->bytes = sizeof *e + strlen(id) + 1 + e->response_len + 1 + n * sizeof *e->items;
    for (size_t i = 0; i < n; i++) {
        const json_t *item = json_array_get(items, i);
        rs_item *it = &e->items[i];
        it->owner = e;
        it->text = dump(item, &it->len);
        const json_t *iid = json_object_get(item, "id");
        if (json_is_string(iid) && json_string_length(iid) > 0)
            it->id = xstrdup(json_string_value(iid));
        e->bytes += it->len + 1 + (it->id ? strlen(it->id) + 1 : 0);
    }
    return e;
}

int resp_store_put(resp_store *st, const char *id, const json_t *response, const json_t *items,
                   size_t n_input) {
    rs_entry *e = entry_new(id, response, items, n_input);
    double now = now_seconds();
    pthread_mutex_lock(&st->mu);
    void **old = strmap_find(&st->by_id, id);
    if (old) remove_entry(st, *old);
    if (!e->response || e->bytes > st->lim.max_bytes) {
        pthread_mutex_unlock(&st->mu);
        entry_free(e);
        return -1;
    }
    e->last_used = now;
    push_front(st, e);
    st->n++;
    st->bytes += e->bytes;
    strmap_put(&st->by_id, e->id, e);
    for (size_t i = 0; i < e->n_items; i++) {
        rs_item *it = &e->items[i];
        if (!it->id) continue;
        /* Delete first: a replaced value would keep the older entry's key string, freed with it. */
        strmap_del(&st->by_item, it->id);
        strmap_put(&st->by_item, it->id, it);
    }
    expire(st, now);
    while (st->tail && st->tail != e &&
           (st->n > st->lim.max_entries || st->bytes > st->lim.max_bytes))
        remove_entry(st, st->tail);
    pthread_mutex_unlock(&st->mu);
    return 0;
}

enum { GET_RESPONSE, GET_CONVERSATION, GET_INPUT };

/* Copies the wanted text under the lock ("[a,b,…]" for item lists); parsed by the caller. */
static char *copy_text(const rs_entry *e, int what, size_t *len) {
    if (what == GET_RESPONSE) {
        *len = e->response_len;
        char *s = xmalloc(e->response_len + 1);
        memcpy(s, e->response, e->response_len + 1);
        return s;
    }
    size_t n = what == GET_INPUT ? e->n_input : e->n_items, total = 2;
    for (size_t i = 0; i < n; i++) total += e->items[i].len + 1;
    char *s = xmalloc(total + 1), *at = s;
    *at++ = '[';
    for (size_t i = 0; i < n; i++) {
        if (i) *at++ = ',';
        memcpy(at, e->items[i].text, e->items[i].len);
        at += e->items[i].len;
    }
    *at++ = ']';
    *at = 0;
    *len = (size_t)(at - s);
    return s;
}

static json_t *parse_text(char *s, size_t len) {
    if (!s) return NULL;
    json_t *v = json_loadb(s, len, JSON_DECODE_ANY, NULL);
    free(s);
    return v;
}

static json_t *get(resp_store *st, const char *id, int what) {
    double now = now_seconds();
    char *s = NULL;
    size_t len = 0;
    pthread_mutex_lock(&st->mu);
    expire(st, now);
    void **v = strmap_find(&st->by_id, id);
    if (v) {
        rs_entry *e = *v;
        touch(st, e, now);
        s = copy_text(e, what, &len);
    }
    pthread_mutex_unlock(&st->mu);
    return parse_text(s, len);
}

json_t *resp_store_get(resp_store *st, const char *id) {
    return get(st, id, GET_RESPONSE);
}

json_t *resp_store_conversation(resp_store *st, const char *id) {
    return get(st, id, GET_CONVERSATION);
}

json_t *resp_store_input_items(resp_store *st, const char *id) {
    return get(st, id, GET_INPUT);
}

json_t *resp_store_item(resp_store *st, const char *item_id) {
    double now = now_seconds();
    char *s = NULL;
    size_t len = 0;
    pthread_mutex_lock(&st->mu);
    expire(st, now);
    void **v = strmap_find(&st->by_item, item_id);
    if (v) {
        rs_item *it = *v;
        touch(st, it->owner, now);
        s = xmalloc(it->len + 1);
        memcpy(s, it->text, it->len + 1);
        len = it->len;
    }
    pthread_mutex_unlock(&st->mu);
    return parse_text(s, len);
}

bool resp_store_delete(resp_store *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    expire(st, now_seconds());
    void **v = strmap_find(&st->by_id, id);
    bool found = v != NULL;
    if (found) remove_entry(st, *v);
    pthread_mutex_unlock(&st->mu);
    return found;
}

resp_store_stats resp_store_stat(resp_store *st) {
    pthread_mutex_lock(&st->mu);
    resp_store_stats s = {st->n, st->bytes};
    pthread_mutex_unlock(&st->mu);
    return s;
}
