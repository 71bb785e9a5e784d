/* Listening sockets and event-loop threads.
 *
 * Each loop has its own socket bound with SO_REUSEPORT to the same address, so the kernel spreads
 * new connections evenly over the loops (a single shared socket would let whichever loop wakes
 * first accept a whole burst). No thread per connection: a loop serves thousands of them. */
#include "server/server_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/xalloc.h"

#include <errno.h>
#include <event2/thread.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Binds one listening socket; *port may be 0 (the kernel picks, and *port gets it). */
static evutil_socket_t listen_on(const char *host, int *port) {
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", *port);
    int gai = getaddrinfo(host, portstr, &hints, &res);
    if (gai != 0) {
        err_set("--host %s: %s", host, gai_strerror(gai));
        return -1;
    }
    evutil_socket_t fd = -1;
    int last_errno = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
            last_errno = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        err_set("cannot listen on %s:%d: %s", host, *port, strerror(last_errno));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (*port == 0 && getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        *port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

uint64_t loop_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void loop_note_cpu(srv_loop *l, uint64_t start_ns) {
    uint64_t d = loop_cpu_ns() - start_ns;
    if (d > atomic_load(&l->max_cb_ns)) atomic_store(&l->max_cb_ns, d);
}

/* Every request's routing is timed: the longest is the loop's worst stall (see max_cb_ns). */
static void router_timed(struct evhttp_request *req, void *arg) {
    uint64_t t0 = loop_cpu_ns();
    router_handle(req, arg);
    loop_note_cpu(arg, t0);
}

static void setup_http(srv_loop *l) {
    const server_options *o = &l->srv->opt;
    struct evhttp *h = l->http;
    evhttp_set_gencb(h, router_timed, l);
    /* evhttp refuses a larger body from its Content-Length (or as chunks arrive) with 413 before
     * buffering it; lingering close lets the client read that answer instead of a reset. */
    evhttp_set_max_body_size(h, (ev_ssize_t)o->max_request_bytes);
    evhttp_set_max_headers_size(h, (ev_ssize_t)o->max_header_bytes);
    evhttp_set_flags(h, EVHTTP_SERVER_LINGERING_CLOSE);
    /* Read/write inactivity timeout: an idle keep-alive connection, a client that stalls in the
     * middle of its request (slowloris) or stops reading a response is dropped after it. Reading is
     * off while a request is being answered, so long generations are not cut. */
    evhttp_set_timeout(h, o->idle_timeout);
    evhttp_set_allowed_methods(h, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
                                      EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                      EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(h, "application/json");
}

int loops_create(server *s) {
    /* Before any base exists: makes event_active() from the engine and main threads safe. */
    if (evthread_use_pthreads() != 0) return err_set("libevent: no pthreads support");
    s->n_loops = s->opt.n_loops > 0 ? s->opt.n_loops : 1;
    s->loops = xcalloc((size_t)s->n_loops, sizeof *s->loops);
    s->port = s->opt.port;
    for (int i = 0; i < s->n_loops; i++) {
        srv_loop *l = &s->loops[i];
        l->srv = s;
        l->index = i;
        l->listen_fd = -1;
        pthread_mutex_init(&l->mu, NULL);
    }
    for (int i = 0; i < s->n_loops; i++) {
        srv_loop *l = &s->loops[i];
        l->listen_fd = listen_on(s->opt.host, &s->port);
        if (l->listen_fd < 0) return -1;
        l->base = event_base_new();
        l->http = l->base ? evhttp_new(l->base) : NULL;
        if (!l->http) return err_set("libevent: cannot create an event loop");
        setup_http(l);
        l->bound = evhttp_accept_socket_with_handle(l->http, l->listen_fd);
        if (!l->bound) return err_set("libevent: cannot accept on the listening socket");
        if (admission_setup(l) != 0) return err_set("libevent: cannot set up accepting");
        l->wake = event_new(l->base, -1, EV_PERSIST, handover_wake, l);
        if (i == 0 && s->opt.stats_interval > 0) {
            l->stats_timer = event_new(l->base, -1, EV_PERSIST, stats_log_tick, s);
            double iv = s->opt.stats_interval;
            struct timeval tv = {(time_t)iv, (suseconds_t)((iv - (double)(time_t)iv) * 1e6)};
            event_add(l->stats_timer, &tv);
        }
    }
    return 0;
}

static void *loop_main(void *arg) {
    srv_loop *l = arg;
    /* NO_EXIT_ON_EMPTY: after the listener is closed during a drain the loop may briefly have no
     * events, and must still wait for the main thread's EXIT. */
    event_base_loop(l->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

int loops_start(server *s) {
    for (int i = 0; i < s->n_loops; i++) {
        srv_loop *l = &s->loops[i];
        if (pthread_create(&l->thread, NULL, loop_main, l) != 0)
            return err_set("cannot start a loop thread");
        l->thread_started = true;
    }
    return 0;
}

void loops_command(server *s, int cmd) {
    for (int i = 0; i < s->n_loops; i++) {
        srv_loop *l = &s->loops[i];
        pthread_mutex_lock(&l->mu);
        l->commands |= cmd;
        pthread_mutex_unlock(&l->mu);
        if (l->wake) event_active(l->wake, EV_READ, 0);
    }
}

void loops_join(server *s) {
    for (int i = 0; i < s->n_loops; i++)
        if (s->loops[i].thread_started) {
            pthread_join(s->loops[i].thread, NULL);
            s->loops[i].thread_started = false;
        }
}

/* After loops_join and after the engine stopped: nothing runs on the loops any more. */
void loops_free(server *s) {
    for (int i = 0; i < s->n_loops; i++) {
        srv_loop *l = &s->loops[i];
        handover_discard(l);
        offload_discard(l);
        generate_free_all(l);
        if (l->stats_timer) event_free(l->stats_timer);
        admission_teardown(l);
        wire_free(l);
        body_drain_free_all(l);
        if (l->wake) event_free(l->wake);
        if (l->http)
            evhttp_free(l->http); /* closes its connections and the listener */
        else if (l->listen_fd >= 0)
            close(l->listen_fd);
        if (l->base) event_base_free(l->base);
        pthread_mutex_destroy(&l->mu);
    }
    free(s->loops);
    s->loops = NULL;
    s->n_loops = 0;
}
