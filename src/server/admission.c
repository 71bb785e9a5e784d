/* Admission of connections: what happens when the process runs out of file descriptors, and
 * --max-connections.
 *
 * At RLIMIT_NOFILE, accept() fails with EMFILE while the connection stays in the listen queue, so
 * the listening socket stays readable: a loop that only logs and returns is called again at once
 * (a busy loop, and a log line per call). Instead the listener is switched off for a moment and
 * retried from a timer; the warning is logged once per episode and its end once too. Connections
 * wait meanwhile in the kernel's listen queue, and are taken as soon as descriptors are free again.
 *
 * --max-connections uses the same path: the soft descriptor limit is set, once the server is ready
 * and every descriptor it needs for itself is open, to those plus N, so that connection N + 1 meets
 * EMFILE. The kernel then does the counting: evhttp (libevent 2.1) tells nobody when it closes a
 * connection, so a count of our own could not be kept exact. */
#include "server/server_internal.h"

#include "base/log.h"

#include <dirent.h>
#include <errno.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* How long the listener stays off after EMFILE/ENFILE before it tries again. */
static const struct timeval RETRY = {0, 100000};

void admission_raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= rl.rlim_max) return;
    rlim_t want = rl.rlim_max;
    rl.rlim_cur = want;
    /* An unlimited hard limit may still be above the kernel's nr_open: then keep what we have. */
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        log_warn("cannot raise the open-file limit to %llu: %s", (unsigned long long)want,
                 strerror(errno));
}

/* The descriptor limit that leaves exactly n numbers free: a new descriptor always takes the lowest
 * free number, and the limit bounds numbers, not counts (a high one inherited from the parent, like
 * bash's 255, stays open above it). -1 when /proc/self/fd cannot be read. */
static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

static long limit_for_free(long n) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    size_t cap = 1024, count = 0;
    long *open_fds = malloc(cap * sizeof *open_fds);
    struct dirent *e;
    while (open_fds && (e = readdir(d))) {
        char *end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || fd == dirfd(d)) continue;
        if (count == cap) {
            long *more = realloc(open_fds, 2 * cap * sizeof *open_fds);
            if (!more) break;
            open_fds = more;
            cap *= 2;
        }
        open_fds[count++] = fd;
    }
    closedir(d);
    if (!open_fds) return -1;
    qsort(open_fds, count, sizeof *open_fds, cmp_long);
    long fd = 0;
    size_t i = 0;
    for (long free_seen = 0;; fd++) {
        while (i < count && open_fds[i] < fd) i++;
        if (!(i < count && open_fds[i] == fd) && ++free_seen == n) break;
    }
    free(open_fds);
    return fd + 1;
}

void admission_limit_connections(int max_connections) {
    if (max_connections <= 0) return;
    long want = limit_for_free(max_connections);
    if (want < 0) {
        log_warn("--max-connections: cannot list /proc/self/fd; no limit applied");
        return;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    if ((rlim_t)want > rl.rlim_max) {
        log_warn("--max-connections %d: above the open-file limit %llu; that limit applies",
                 max_connections, (unsigned long long)rl.rlim_max);
        return;
    }
    rl.rlim_cur = (rlim_t)want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log_warn("--max-connections: cannot set the open-file limit: %s", strerror(errno));
    }
}

static void retry_cb(evutil_socket_t fd, short what, void *arg) {
    srv_loop *l = arg;
    if (!l->bound) return;
    overflow_enable(l, false);
    evconnlistener_enable(evhttp_bound_socket_get_listener(l->bound));
}

/* The listener's error callback gets evhttp's argument, not ours: the loop is found by its event
 * base (the loops register here before they start; --api-server-threads is at most 64). */
enum { MAX_LOOPS = 64 };
static srv_loop *loop_of_base[MAX_LOOPS];

srv_loop *admission_loop_of(struct event_base *base) {
    for (int i = 0; i < MAX_LOOPS; i++)
        if (loop_of_base[i] && loop_of_base[i]->base == base) return loop_of_base[i];
    return NULL;
}

/* libevent calls this for accept errors it does not retry itself (EMFILE, ENFILE, ENOBUFS, ...). */
static void accept_error_cb(struct evconnlistener *lev, void *unused) {
    int e = EVUTIL_SOCKET_ERROR();
    srv_loop *l = admission_loop_of(evconnlistener_get_base(lev));
    if (!l) return;
    evconnlistener_disable(lev);
    evtimer_add(l->accept_retry, &RETRY);
    overflow_enable(l, true);
    if (!atomic_exchange(&l->srv->accept_paused, true)) {
        struct rlimit rl = {0};
        getrlimit(RLIMIT_NOFILE, &rl);
        log_warn("accept: %s (open-file limit %llu): new connections wait until some close",
                 strerror(e), (unsigned long long)rl.rlim_cur);
    }
}

/* evhttp asks for the bufferevent of each accepted connection: the moment to say that accepting
 * works again. The bufferevent is the one evhttp makes by default. */
static struct bufferevent *new_conn_cb(struct event_base *base, void *arg) {
    srv_loop *l = arg;
    if (atomic_load(&l->srv->accept_paused) && atomic_exchange(&l->srv->accept_paused, false))
        log_info("accept: accepting connections again");
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev) wire_attach(bev);
    return bev;
}

int admission_setup(srv_loop *l) {
    if (l->index < 0 || l->index >= MAX_LOOPS) return -1;
    loop_of_base[l->index] = l;
    l->accept_retry = evtimer_new(l->base, retry_cb, l);
    if (!l->accept_retry) return -1;
    evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(l->bound), accept_error_cb);
    evhttp_set_bevcb(l->http, new_conn_cb, l);
    return overflow_setup(l);
}

void admission_teardown(srv_loop *l) {
    if (l->index >= 0 && l->index < MAX_LOOPS && loop_of_base[l->index] == l)
        loop_of_base[l->index] = NULL;
    if (l->accept_retry) event_free(l->accept_retry);
    l->accept_retry = NULL;
    overflow_teardown(l);
}
