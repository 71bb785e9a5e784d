/* Background responses in flight, by response id, so that POST /v1/responses/{id}/cancel reaches
 * the engine request from whichever loop thread it arrives on (the request itself lives on the loop
 * that accepted it). A small map under its own lock: the owning loop adds the entry when it submits
 * the request and removes it when the request is freed; cancel only reads it and calls
 * engine_abort, which is thread-safe. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    char *id; /* the map's key */
    uint64_t engine_id;
    int n_requests;
} bg_entry;

void background_init(server *s) {
    pthread_mutex_init(&s->bg_mu, NULL);
}

/* After the loops are gone (their requests removed their entries; anything left is freed). */
void background_free(server *s) {
    strmap *m = &s->bg;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) {
            bg_entry *e = m->slots[i].value;
            free(e->id);
            free(e);
        }
    strmap_free(m);
    pthread_mutex_destroy(&s->bg_mu);
}

void background_add(server *s, const char *id, uint64_t engine_id, int n_requests) {
    bg_entry *e = xcalloc(1, sizeof *e);
    e->id = xstrdup(id);
    e->engine_id = engine_id;
    e->n_requests = n_requests;
    pthread_mutex_lock(&s->bg_mu);
    strmap_put(&s->bg, e->id, e); /* ids are unique: never a replacement */
    pthread_mutex_unlock(&s->bg_mu);
}

void background_remove(server *s, const char *id) {
    pthread_mutex_lock(&s->bg_mu);
    void **v = strmap_find(&s->bg, id);
    bg_entry *e = v ? *v : NULL;
    if (e) strmap_del(&s->bg, id);
    pthread_mutex_unlock(&s->bg_mu);
    if (e) free(e->id), free(e);
}

bool background_cancel(server *s, const char *id) {
    pthread_mutex_lock(&s->bg_mu);
    void **v = strmap_find(&s->bg, id);
    bg_entry *e = v ? *v : NULL;
    if (e)
        for (int p = 0; p < e->n_requests; p++) engine_abort(s->eng, e->engine_id + (uint64_t)p);
    pthread_mutex_unlock(&s->bg_mu);
    return e != NULL;
}
