/* Open addressing with linear probing over a seeded XXH3 hash; grows by doubling at 3/4 load. */
#include "base/strmap.h"

#include "base/rng.h"
#include "base/xalloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

/* One random value per process (time and pid mixed; keys only need to be unpredictable to a
 * remote client, not cryptographically secret), then a different seed for every map. */
static uint64_t next_seed(void) {
    static _Atomic uint64_t counter;
    static _Atomic uint64_t base;
    uint64_t b = atomic_load(&base);
    if (!b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t mono = (uint64_t)clock();
        b = splitmix64((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
                       ((uint64_t)getpid() << 16) ^ mono) |
            1;
        uint64_t zero = 0;
        if (!atomic_compare_exchange_strong(&base, &zero, b)) b = zero;
    }
    return rng_hash2(b, atomic_fetch_add(&counter, 1));
}

static void insert_slot(strmap_slot *slots, size_t cap, strmap_slot s) {
    size_t i = (size_t)s.hash & (cap - 1);
    while (slots[i].key) i = (i + 1) & (cap - 1);
    slots[i] = s;
}

static void grow(strmap *m) {
    size_t cap = m->cap ? 2 * m->cap : 16;
    strmap_slot *slots = xcalloc(cap, sizeof *slots);
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key) insert_slot(slots, cap, m->slots[i]);
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
}

static strmap_slot *find_slot(const strmap *m, const char *key, size_t len, uint64_t h) {
    if (!m->cap) return NULL;
    for (size_t i = (size_t)h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        strmap_slot *s = &m->slots[i];
        if (!s->key) return NULL;
        if (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0) return s;
    }
}

void strmap_put(strmap *m, const char *key, void *value) {
    if (!m->seed) m->seed = next_seed();
    size_t len = strlen(key);
    uint64_t h = XXH3_64bits_withSeed(key, len, m->seed);
    strmap_slot *s = find_slot(m, key, len, h);
    if (s) {
        s->value = value;
        return;
    }
    if ((m->n + 1) * 4 > m->cap * 3) grow(m);
    insert_slot(m->slots, m->cap, (strmap_slot){key, len, h, value});
    m->n++;
}

void **strmap_find(const strmap *m, const char *key) {
    if (!m->cap) return NULL;
    size_t len = strlen(key);
    strmap_slot *s = find_slot(m, key, len, XXH3_64bits_withSeed(key, len, m->seed));
    return s ? &s->value : NULL;
}

/* Backward-shift deletion: no tombstones, so a long-lived map with churn (the response store) keeps
 * its probe sequences as short as its load says. Each later entry of the run moves into the hole
 * unless its home slot lies cyclically in (hole, entry], where it must stay to remain findable. */
bool strmap_del(strmap *m, const char *key) {
    if (!m->cap) return false;
    size_t len = strlen(key);
    strmap_slot *s = find_slot(m, key, len, XXH3_64bits_withSeed(key, len, m->seed));
    if (!s) return false;
    const size_t mask = m->cap - 1;
    size_t hole = (size_t)(s - m->slots), j = hole;
    for (;;) {
        m->slots[hole].key = NULL;
        for (;;) {
            j = (j + 1) & mask;
            if (!m->slots[j].key) {
                m->n--;
                return true;
            }
            size_t home = (size_t)m->slots[j].hash & mask;
            bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
            if (!stays) break;
        }
        m->slots[hole] = m->slots[j];
        hole = j;
    }
}

void strmap_free(strmap *m) {
    free(m->slots);
    *m = (strmap){0};
}
