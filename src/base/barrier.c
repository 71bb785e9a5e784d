/* The breakable barrier of barrier.h: a generation count under a mutex. The last party to arrive
 * starts the next generation and wakes the others; a waiter leaves when the generation it arrived
 * in has ended (0) or the barrier is broken while that generation is still open (-1). */
#include "base/barrier.h"
#include "base/error.h"

int barrier_init(barrier *b, int n) {
    if (n < 1) return err_set("barrier: %d parties", n);
    if (pthread_mutex_init(&b->mu, NULL)) return err_set("barrier: cannot create its mutex");
    if (pthread_cond_init(&b->cv, NULL)) {
        pthread_mutex_destroy(&b->mu);
        return err_set("barrier: cannot create its condition");
    }
    b->n = n, b->arrived = 0, b->gen = 0, b->broken = false, b->first_breaker = -1;
    return 0;
}

void barrier_destroy(barrier *b) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}

int barrier_wait(barrier *b) {
    pthread_mutex_lock(&b->mu);
    if (b->broken) {
        pthread_mutex_unlock(&b->mu);
        return -1;
    }
    const unsigned gen = b->gen;
    if (++b->arrived == b->n) {
        b->arrived = 0, b->gen++;
        pthread_cond_broadcast(&b->cv);
    } else {
        while (gen == b->gen && !b->broken) pthread_cond_wait(&b->cv, &b->mu);
    }
    const int rc = gen == b->gen ? -1 : 0; /* the generation did not end: broken */
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void barrier_break(barrier *b, int who) {
    pthread_mutex_lock(&b->mu);
    if (!b->broken) b->first_breaker = who;
    b->broken = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

void barrier_reset(barrier *b) {
    pthread_mutex_lock(&b->mu);
    b->broken = false, b->arrived = 0, b->first_breaker = -1;
    pthread_mutex_unlock(&b->mu);
}

int barrier_breaker(barrier *b) {
    pthread_mutex_lock(&b->mu);
    const int who = b->first_breaker;
    pthread_mutex_unlock(&b->mu);
    return who;
}
