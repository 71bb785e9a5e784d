/* A reusable barrier for a fixed number of threads that can be broken: when one party fails, every
 * party waiting now or arriving later returns -1 instead of waiting for good, until the barrier is
 * reset. Tensor parallelism's lockstep mode (backend/cuda/tp_backend.c) meets its launch threads
 * here at every collective; a rank whose enqueue fails breaks it so that the others fail too.
 * (pthread_barrier_t cannot be broken.) */
#ifndef GPTOSS_BASE_BARRIER_H
#define GPTOSS_BASE_BARRIER_H

#include <pthread.h>
#include <stdbool.h>

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, arrived;
    unsigned gen; /* rounds completed */
    bool broken;
    int first_breaker; /* the id given to the first barrier_break since the reset, -1 if none */
} barrier;

/* n parties (n >= 1). 0, or -1 with an error set. */
int barrier_init(barrier *b, int n);
void barrier_destroy(barrier *b);

/* Waits until all n parties have called it (0), or until the barrier is broken (-1: by another
 * party now, or before this call). */
int barrier_wait(barrier *b);

/* Breaks the barrier on behalf of party `who` (recorded if it is the first since the reset) and
 * wakes every waiter. */
void barrier_break(barrier *b, int who);

/* Unbroken again, nobody arrived, no breaker. Only while no party is inside barrier_wait. */
void barrier_reset(barrier *b);

/* The first breaker since the reset, or -1. */
int barrier_breaker(barrier *b);

#endif
