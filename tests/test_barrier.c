/* The breakable barrier (base/barrier.h): rounds that nobody leaves early, a break that frees every
 * waiter (now and later) and names the first breaker, a reset, and bad sizes refused. */
#include "check.h"

#include "base/barrier.h"
#include "base/error.h"
#include "base/timeutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

enum { PARTIES = 4, ROUNDS = 2000 };

typedef struct {
    barrier *b;
    atomic_int *arrived; /* [ROUNDS] */
    int early;           /* rounds this thread left before every party had arrived */
    int failed;          /* barrier_wait calls that returned -1 */
    int rc_after_break;  /* break test: what the wait returned */
} party;

static void *rounds_thread(void *arg) {
    party *p = arg;
    for (int k = 0; k < ROUNDS; k++) {
        atomic_fetch_add(&p->arrived[k], 1);
        if (barrier_wait(p->b)) p->failed++;
        if (atomic_load(&p->arrived[k]) != PARTIES) p->early++;
    }
    return NULL;
}

static void *one_wait(void *arg) {
    party *p = arg;
    p->rc_after_break = barrier_wait(p->b);
    return NULL;
}

int main(void) {
    /* Rounds: PARTIES threads, ROUNDS barriers, nobody past round k before all arrived at it. */
    {
        barrier b;
        CHECK(barrier_init(&b, PARTIES) == 0, "init: %s", err_msg());
        static atomic_int arrived[ROUNDS];
        for (int k = 0; k < ROUNDS; k++) atomic_init(&arrived[k], 0);
        party ps[PARTIES];
        pthread_t th[PARTIES];
        for (int i = 0; i < PARTIES; i++) {
            memset(&ps[i], 0, sizeof ps[i]);
            ps[i].b = &b, ps[i].arrived = arrived;
            CHECK(pthread_create(&th[i], NULL, rounds_thread, &ps[i]) == 0, "pthread_create");
        }
        int early = 0, failed = 0;
        for (int i = 0; i < PARTIES; i++) {
            pthread_join(th[i], NULL);
            early += ps[i].early, failed += ps[i].failed;
        }
        CHECK(early == 0, "%d barrier exits before every party had arrived", early);
        CHECK(failed == 0, "%d waits failed on an unbroken barrier", failed);
        CHECK(barrier_breaker(&b) == -1, "a breaker named without a break");
        barrier_destroy(&b);
    }
    /* A break: PARTIES-1 threads waiting for a party that fails instead; all of them return -1
     * at once, later waits too, until the reset; then a whole round passes again. */
    {
        barrier b;
        CHECK(barrier_init(&b, PARTIES) == 0, "init: %s", err_msg());
        party ps[PARTIES - 1];
        pthread_t th[PARTIES - 1];
        for (int i = 0; i < PARTIES - 1; i++) {
            memset(&ps[i], 0, sizeof ps[i]);
            ps[i].b = &b, ps[i].rc_after_break = 99;
            CHECK(pthread_create(&th[i], NULL, one_wait, &ps[i]) == 0, "pthread_create");
        }
        usleep(50 * 1000); /* let them wait (a break before they arrive must fail them too) */
        const double t0 = now_seconds();
        barrier_break(&b, 2);
        barrier_break(&b, 3); /* a second breaker is not the first */
        for (int i = 0; i < PARTIES - 1; i++) {
            pthread_join(th[i], NULL);
            CHECK(ps[i].rc_after_break == -1, "waiter %d returned %d after the break", i,
                  ps[i].rc_after_break);
        }
        CHECK(now_seconds() - t0 < 2.0, "the waiters took %.1f s to leave a broken barrier",
              now_seconds() - t0);
        CHECK(barrier_breaker(&b) == 2, "first breaker %d, expected 2", barrier_breaker(&b));
        CHECK(barrier_wait(&b) == -1, "a wait on a broken barrier returned 0");
        barrier_reset(&b);
        CHECK(barrier_breaker(&b) == -1, "the reset kept the breaker");
        for (int i = 0; i < PARTIES - 1; i++) {
            ps[i].rc_after_break = 99;
            CHECK(pthread_create(&th[i], NULL, one_wait, &ps[i]) == 0, "pthread_create");
        }
        CHECK(barrier_wait(&b) == 0, "the round after the reset failed");
        for (int i = 0; i < PARTIES - 1; i++) {
            pthread_join(th[i], NULL);
            CHECK(ps[i].rc_after_break == 0, "waiter %d returned %d after the reset", i,
                  ps[i].rc_after_break);
        }
        barrier_destroy(&b);
    }
    /* One party never waits; no parties is refused with a message. */
    {
        barrier b;
        CHECK(barrier_init(&b, 1) == 0, "init 1: %s", err_msg());
        CHECK(barrier_wait(&b) == 0 && barrier_wait(&b) == 0, "a one-party barrier waited");
        barrier_destroy(&b);
        CHECK(barrier_init(&b, 0) == -1, "a barrier of 0 parties accepted");
        CHECK_MSG_HAS(err_msg(), "0 parties");
    }
    return check_report("test_barrier");
}
