/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Event channels and events (see rdmacm_int.h for the design).
 *
 * An rdma_event_channel's fd is one end of a UNIX socket pair that holds
 * one byte exactly while the channel's queue is non-empty (`armed`):
 * poll/select/epoll on it are exact, O_NONBLOCK set by the application
 * makes rdma_get_cm_event return EAGAIN, and withdrawing events (destroy,
 * migrate) leaves no stale wake-up behind. A blocking rdma_get_cm_event
 * waits in read() on it, as rdma-core waits on its channel fd, so a
 * signal interrupts it (EINTR) exactly when it would interrupt rdma-core
 * (no SA_RESTART); the byte is then put back. The library itself only
 * uses recv(MSG_DONTWAIT) on it, which never blocks whatever the fd's
 * flags.
 *
 * Translation to rdma_cm's terms (the kernel's iWARP CM, drivers/infiniband
 * /core/cma.c, is the model): private data is passed unchanged (no CM
 * header); on CONNECT_REQUEST the initiator's IRD becomes our
 * initiator_depth and its ORD our responder_resources (what we may issue /
 * must serve); on ESTABLISHED both carry the negotiated values in use;
 * an MPA Reply that does not come in time is UNREACHABLE (-ETIMEDOUT), as
 * the kernel reports an iWARP connect timeout; REJECTED carries -ECONNREFUSED
 * and the Reject's private data; DISCONNECTED the engine's status.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdmacm_int.h"

pthread_mutex_t rcm_route_lock = PTHREAD_MUTEX_INITIALIZER;
struct uiw_cm_channel *rcm_uch;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_err;

/* ------------------------------------------------------------------------
 * Channel queues
 * ---------------------------------------------------------------------- */

/* ch->lock held: the queue became non-empty. */
static void wake_set(struct rcm_channel *ch)
{
    const char b = 1;
    if (ch->armed)
        return;
    while (send(ch->wr, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
    ch->armed = true;
}

/* ch->lock held: the queue became empty. */
static void wake_clear(struct rcm_channel *ch)
{
    char b;
    if (!ch->armed)
        return;
    /* A blocking reader may have taken the byte already: never wait. */
    while (recv(ch->pub.fd, &b, 1, MSG_DONTWAIT) < 0 && errno == EINTR)
        ;
    ch->armed = false;
}

/* ch->lock held. */
static void push_locked(struct rcm_channel *ch, struct rcm_qev *q)
{
    q->id->nqueued++;
    q->next = NULL;
    if (ch->tail) {
        ch->tail->next = q;
    } else {
        ch->head = q;
        wake_set(ch);
    }
    ch->tail = q;
}

/* ch->lock held. */
static struct rcm_qev *pop_locked(struct rcm_channel *ch)
{
    struct rcm_qev *q = ch->head;
    if (!q)
        return NULL;
    ch->head = q->next;
    if (!ch->head) {
        ch->tail = NULL;
        wake_clear(ch);
    }
    q->next = NULL;
    q->id->nqueued--;
    return q;
}

bool rcm_channel_pending(struct rcm_channel *ch)
{
    pthread_mutex_lock(&ch->lock);
    bool r = ch->head != NULL || ch->dead;
    pthread_mutex_unlock(&ch->lock);
    return r;
}

/* Free a queued event that will never be delivered. A CONNECT_REQUEST the
 * application never saw takes its engine connection along (the initiator
 * sees the TCP connection reset). */
static void qev_discard(struct rcm_qev *q)
{
    if (q->engine && q->uev.type == UIW_CM_CONNECT_REQUEST && q->uev.conn)
        uiw_cm_conn_destroy(q->uev.conn);
    free(q);
}

struct rcm_channel *rcm_channel_new(void)
{
    struct rcm_channel *ch = calloc(1, sizeof(*ch));
    if (!ch)
        return NULL;
    /* Blocking by default, like rdma-core's channel fd. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        free(ch);
        errno = e;
        return NULL;
    }
    (void)shutdown(sv[0], SHUT_WR);
    (void)shutdown(sv[1], SHUT_RD);
    ch->pub.fd = sv[0];
    ch->wr = sv[1];
    pthread_mutex_init(&ch->lock, NULL);
    return ch;
}

static void channel_release(struct rcm_channel *ch)
{
    close(ch->wr);
    pthread_mutex_destroy(&ch->lock);
    free(ch);
}

/* Destroyed channels are freed only after GRAVE_KEEP more were destroyed:
 * a program's event thread that loops back into rdma_get_cm_event while
 * main destroys the channel (rping does) finds it dead instead of freed
 * memory. */
#define GRAVE_KEEP 64
static pthread_mutex_t grave_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcm_channel *grave_head;
static unsigned grave_n;

static void channel_bury(struct rcm_channel *ch)
{
    struct rcm_channel *old = NULL;
    pthread_mutex_lock(&grave_lock);
    ch->grave = grave_head;
    grave_head = ch;
    if (++grave_n > GRAVE_KEEP) {
        struct rcm_channel **pp = &grave_head;
        while ((*pp)->grave)
            pp = &(*pp)->grave;
        old = *pp; /* the oldest */
        *pp = NULL;
        grave_n--;
    }
    pthread_mutex_unlock(&grave_lock);
    if (old)
        channel_release(old);
}

/* rdma_get_cm_event on a destroyed channel: what rdma-core's read() on the
 * closed fd amounts to for the threads that race with the destroy (rping's
 * event thread): a blocking channel stays blocked (a signal interrupts it:
 * EINTR), a non-blocking one fails with EBADF. ch->lock held; released. */
static int dead_channel_wait(struct rcm_channel *ch)
{
    bool nb = ch->dead_nonblock;
    pthread_mutex_unlock(&ch->lock);
    if (nb)
        return rcm_err(EBADF);
    pause();
    return rcm_err(EINTR);
}

void rcm_channel_free(struct rcm_channel *ch)
{
    if (!ch)
        return;
    pthread_mutex_lock(&ch->lock);
    struct rcm_qev *q;
    while ((q = pop_locked(ch)))
        qev_discard(q);
    int fl = fcntl(ch->pub.fd, F_GETFL);
    ch->dead_nonblock = fl >= 0 && (fl & O_NONBLOCK);
    close(ch->pub.fd);
    ch->dead = true;
    /* A thread still waiting in rdma_get_cm_event (rping's event thread
     * when main tears down) stays blocked, as with rdma-core on its closed
     * channel: its read() keeps the socket, whose other end stays open and
     * silent; a thread that comes back later finds the channel dead
     * (dead_channel_wait). The memory is kept a while (channel_bury). */
    pthread_mutex_unlock(&ch->lock);
    channel_bury(ch);
}

/* rcm_route_lock held (id->ch is stable under it). */
static void rcm_queue_local_locked(struct rcm_id *id, enum rdma_cm_event_type type, int status)
{
    struct rcm_qev *q = malloc(sizeof(*q));
    if (!q) {
        uiw_log("rdmacm: out of memory, event %s lost", rdma_event_str(type));
        return;
    }
    q->id = id;
    q->engine = false;
    q->type = type;
    q->status = status;
    struct rcm_channel *ch = id->ch;
    pthread_mutex_lock(&ch->lock);
    push_locked(ch, q);
    pthread_mutex_unlock(&ch->lock);
}

void rcm_queue_local(struct rcm_id *id, enum rdma_cm_event_type type, int status)
{
    pthread_mutex_lock(&rcm_route_lock);
    rcm_queue_local_locked(id, type, status);
    pthread_mutex_unlock(&rcm_route_lock);
}

/* Take id's events off ch, the others staying in order: the list of
 * id's, in order. ch->lock held. */
static struct rcm_qev *take_id_locked(struct rcm_channel *ch, struct rcm_id *id)
{
    struct rcm_qev *keep = NULL, **kt = &keep, *took = NULL, **tt = &took, *q;
    bool had = ch->head != NULL;
    if (!id->nqueued)
        return NULL; /* (a server destroying thousands of ids: no scans) */
    id->nqueued = 0;
    while ((q = ch->head)) {
        ch->head = q->next;
        q->next = NULL;
        if (q->id == id) {
            *tt = q;
            tt = &q->next;
        } else {
            *kt = q;
            kt = &q->next;
        }
    }
    ch->head = keep;
    ch->tail = NULL;
    for (q = keep; q; q = q->next)
        ch->tail = q;
    if (had && !ch->head)
        wake_clear(ch);
    return took;
}

void rcm_purge_id(struct rcm_id *id)
{
    struct rcm_channel *ch = id->ch;
    pthread_mutex_lock(&ch->lock);
    struct rcm_qev *drop = take_id_locked(ch, id), *q;
    pthread_mutex_unlock(&ch->lock);
    while (drop) {
        q = drop;
        drop = q->next;
        qev_discard(q);
    }
}

void rcm_move_events(struct rcm_id *id, struct rcm_channel *to)
{
    struct rcm_channel *from = id->ch;
    if (from == to)
        return;
    /* Both locks, in address order. */
    struct rcm_channel *a = from < to ? from : to, *b = from < to ? to : from;
    pthread_mutex_lock(&a->lock);
    pthread_mutex_lock(&b->lock);
    struct rcm_qev *move = take_id_locked(from, id), *q;
    while (move) {
        q = move;
        move = q->next;
        push_locked(to, q);
    }
    pthread_mutex_lock(&id->lock);
    id->ch = to;
    id->id.channel = &to->pub;
    pthread_mutex_unlock(&id->lock);
    pthread_mutex_unlock(&b->lock);
    pthread_mutex_unlock(&a->lock);
}

/* ------------------------------------------------------------------------
 * Refused connects tried again (rdmacm_int.h)
 * ---------------------------------------------------------------------- */

static struct rcm_id *retry_list; /* rcm_route_lock */

uint64_t rcm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* How long a refused connect is tried again (UIWARP_RDMACM_RETRY_MS). The
 * default covers a server that calls rdma_listen just after its client's
 * rdma_connect (qperf's bidirectional tests) on a loaded machine: 100 ms
 * was once too short with two busy CPUs. */
#define RETRY_MS_DEFAULT 1000
static unsigned retry_budget_ms(void)
{
    static int budget = -1;
    if (budget < 0) {
        const char *v = getenv("UIWARP_RDMACM_RETRY_MS");
        char *end = NULL;
        long b = v && *v ? strtol(v, &end, 10) : RETRY_MS_DEFAULT;
        budget = (end && *end) || b < 0 ? RETRY_MS_DEFAULT : (int)(b > 60000 ? 60000 : b);
    }
    return (unsigned)budget;
}

void rcm_retry_cancel(struct rcm_id *x)
{
    if (!x->retry_pending)
        return;
    for (struct rcm_id **pp = &retry_list; *pp; pp = &(*pp)->retry_next) {
        if (*pp == x) {
            *pp = x->retry_next;
            break;
        }
    }
    x->retry_pending = false;
    x->retry_next = NULL;
    if (x->conn_qp)
        uiw_cm_qp_release(x->conn_qp);
}

void rcm_retry_end(struct rcm_id *x)
{
    if (!x->retry_pending)
        return;
    rcm_retry_cancel(x);
    /* The next attempt would take a QP that ibv_destroy_qp is about to
     * wait for (every holder gone): it ends here as refused, instead of
     * the destroy waiting for ever on the retry's reference. */
    x->conn_qp = NULL;
    uiw_dbg(1, "rdmacm: QP destroyed, connection refused reported without trying again");
    rcm_queue_local_locked(x, x->retry_event, x->retry_status);
}

/* A refused connect for x: try again instead? Consumes q when it does.
 * Refused is a TCP RST to the SYN (UNREACHABLE, -ECONNREFUSED), or, within
 * the same budget, a connection closed before the MPA Reply (CONNECT_ERROR,
 * -ECONNRESET): what a forwarding proxy (qemu's slirp, docker-proxy) shows
 * when it accepts for a port where nothing listens yet and then closes. An
 * MPA Request is idempotent before its Reply (RFC 5044 §7.1.2), so trying
 * again is safe. */
static bool retry_refused(struct rcm_id *x, struct rcm_qev *q)
{
    if (!(q->uev.type == UIW_CM_UNREACHABLE && q->uev.status == -ECONNREFUSED) &&
        !(q->uev.type == UIW_CM_CONNECT_ERROR && q->uev.status == -ECONNRESET))
        return false;
    unsigned budget = retry_budget_ms();
    uint64_t now = rcm_now_ms();
    pthread_mutex_lock(&x->lock);
    bool ok = budget && x->state == RCM_CONNECTING && x->conn == q->uev.conn && !x->conn_qp_gone &&
              now - x->connect_ms < budget;
    if (ok)
        x->conn = NULL;
    pthread_mutex_unlock(&x->lock);
    if (!ok)
        return false;
    x->retry_event =
        q->uev.type == UIW_CM_UNREACHABLE ? RDMA_CM_EVENT_UNREACHABLE : RDMA_CM_EVENT_CONNECT_ERROR;
    x->retry_status = q->uev.status;
    if (x->conn_qp)
        uiw_cm_qp_hold(x->conn_qp);   /* kept alive until the next attempt... */
    uiw_cm_conn_destroy(q->uev.conn); /* ...as the connection lets go of it */
    free(q);
    x->retry_delay_ms = x->retry_delay_ms ? x->retry_delay_ms * 2 : 1;
    if (x->retry_delay_ms > 16)
        x->retry_delay_ms = 16;
    x->retry_due_ms = now + x->retry_delay_ms;
    x->retry_pending = true;
    x->retry_next = retry_list;
    retry_list = x;
    uiw_dbg(1, "rdmacm: connection refused, trying again in %u ms", x->retry_delay_ms);
    return true;
}

/* Start the due attempts; returns the poll timeout until the next one. */
static int run_retries(void)
{
    uint64_t now = rcm_now_ms();
    int timeout = -1;
    struct rcm_id **pp = &retry_list;
    while (*pp) {
        struct rcm_id *x = *pp;
        if (x->retry_due_ms > now) {
            uint64_t left = x->retry_due_ms - now;
            if (timeout < 0 || left < (uint64_t)timeout)
                timeout = (int)left;
            pp = &x->retry_next;
            continue;
        }
        *pp = x->retry_next;
        x->retry_next = NULL;
        x->retry_pending = false;
        struct uiw_conn *c = NULL;
        /* The first attempt's port (written back into conn_src, and the
         * id's, by rdma_connect): a refused connection leaves no TIME_WAIT.
         * connect() may have chosen a port that other sockets use towards
         * other peers, which bind() refuses: then a new one, which the id
         * learns with ESTABLISHED (translate, in the application's thread). */
        int rc = uiw_cm_connect(x->conn_qp, (struct sockaddr *)&x->conn_src,
                                (struct sockaddr *)&x->conn_dst, &x->conn_param, rcm_uch, x, &c);
        if (rc == -EADDRINUSE && x->conn_src_auto) {
            rcm_sa_set_port((struct sockaddr *)&x->conn_src, 0);
            rc = uiw_cm_connect(x->conn_qp, (struct sockaddr *)&x->conn_src,
                                (struct sockaddr *)&x->conn_dst, &x->conn_param, rcm_uch, x, &c);
        }
        if (x->conn_qp)
            uiw_cm_qp_release(x->conn_qp);
        pthread_mutex_lock(&x->lock);
        if (rc == 0)
            x->conn = c;
        pthread_mutex_unlock(&x->lock);
        if (rc < 0)
            rcm_queue_local_locked(x, RDMA_CM_EVENT_UNREACHABLE, rc);
    }
    return timeout;
}

/* ------------------------------------------------------------------------
 * DISCONNECTED after the completions it follows
 *
 * The data path reports the peer's close right after it completed what the
 * peer sent before it: the completions are in the CQ, DISCONNECTED follows
 * at once. On an RNIC the event takes the kernel's CM path and reaches the
 * program long after a CQ poller saw the completions, and programs rely on
 * that order: libfabric's rxm closes an endpoint when its connection
 * reports shutdown, and a message completed but not yet polled is lost (or,
 * where destroyed QPs leave completions in the CQ, handled with freed
 * state). So DISCONNECTED waits while the QP still has successful
 * completions nobody polled, for at most HOLD_MS: a program that polls
 * only after DISCONNECTED gets it that much later, once per connection.
 * ---------------------------------------------------------------------- */

#define HOLD_MS         200
#define HOLD_RECHECK_MS 1

static struct rcm_qev *held_head; /* rcm_route_lock */

/* rcm_route_lock held. Consumes q when it is held back. */
static bool hold_disconnected(struct rcm_qev *q)
{
    if (q->uev.type != UIW_CM_DISCONNECTED || !q->uev.conn || !uiw_cm_conn_unpolled(q->uev.conn))
        return false;
    q->due_ms = rcm_now_ms() + HOLD_MS;
    q->next = held_head;
    held_head = q;
    uiw_dbg(2, "rdmacm: DISCONNECTED held until the completions before it are polled");
    return true;
}

void rcm_held_cancel(struct rcm_id *x)
{
    for (struct rcm_qev **pp = &held_head; *pp;) {
        struct rcm_qev *q = *pp;
        if (q->id == x) {
            *pp = q->next;
            free(q);
        } else {
            pp = &q->next;
        }
    }
}

/* rcm_route_lock held. Delivers the held events that may go; returns the
 * poll timeout until the next check (-1: none held). */
static int run_held(void)
{
    uint64_t now = rcm_now_ms();
    bool left = false;
    for (struct rcm_qev **pp = &held_head; *pp;) {
        struct rcm_qev *q = *pp;
        struct rcm_id *x = q->id;
        pthread_mutex_lock(&x->lock);
        bool mine = x->conn == q->uev.conn;
        pthread_mutex_unlock(&x->lock);
        if (mine && now < q->due_ms && uiw_cm_conn_unpolled(q->uev.conn)) {
            left = true;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        if (!mine) {
            free(q);
            continue;
        }
        struct rcm_channel *ch = x->ch;
        pthread_mutex_lock(&ch->lock);
        push_locked(ch, q);
        pthread_mutex_unlock(&ch->lock);
    }
    return left ? HOLD_RECHECK_MS : -1;
}

/* ------------------------------------------------------------------------
 * The router: engine channel -> the channel of the event's id
 * ---------------------------------------------------------------------- */

/* rcm_route_lock held. */
static void route(struct rcm_qev *q)
{
    struct rcm_id *x = q->uev.user;
    q->engine = true;
    q->id = x;
    if (!x) {
        qev_discard(q);
        return;
    }
    if (retry_refused(x, q))
        return;
    if (q->uev.type != UIW_CM_CONNECT_REQUEST) {
        /* Only the id that owns the connection gets its events. */
        pthread_mutex_lock(&x->lock);
        bool mine = x->conn == q->uev.conn;
        pthread_mutex_unlock(&x->lock);
        if (!mine) {
            uiw_dbg(1, "rdmacm: dropping engine event %d for a connection without an id",
                    (int)q->uev.type);
            free(q);
            return;
        }
    }
    if (hold_disconnected(q))
        return;
    struct rcm_channel *ch = x->ch;
    pthread_mutex_lock(&ch->lock);
    push_locked(ch, q);
    pthread_mutex_unlock(&ch->lock);
}

/* The engine channel's sink (uiw_cm_channel_set_sink): the connection
 * setup events (CONNECT_REQUEST, ESTABLISHED, REJECTED) go straight from
 * the thread that raises them to the id's channel, as route() would put
 * them there, instead of waking the router, which wakes the application:
 * one thread hand-off per event instead of two (docs/PERFORMANCE.md,
 * 2026-11-27 (setup)). Only when no lock is in the way (trylock: the
 * caller holds engine locks that our lock holders may wait for) and the
 * router is not routing (it holds rcm_route_lock meanwhile), so the engine
 * queue being empty means no earlier event is still on its way. Refused
 * connects (tried again) and DISCONNECTED (held behind unpolled
 * completions) always go through the router. */
static bool route_direct(const struct uiw_cm_event *ev, void *arg)
{
    struct rcm_id *x = ev->user;
    struct rcm_qev *q;
    bool took = false;

    (void)arg;
    if (!x || (ev->type != UIW_CM_CONNECT_REQUEST && ev->type != UIW_CM_ESTABLISHED &&
               ev->type != UIW_CM_REJECTED))
        return false;
    if (pthread_mutex_trylock(&rcm_route_lock))
        return false;
    if (ev->type != UIW_CM_CONNECT_REQUEST) {
        /* only the id that owns the connection gets its events */
        if (pthread_mutex_trylock(&x->lock))
            goto out;
        bool mine = x->conn == ev->conn;
        pthread_mutex_unlock(&x->lock);
        if (!mine)
            goto out; /* the router drops it */
    }
    q = malloc(sizeof(*q));
    if (!q)
        goto out;
    struct rcm_channel *ch = x->ch;
    if (pthread_mutex_trylock(&ch->lock)) {
        free(q);
        goto out;
    }
    q->uev = *ev;
    q->engine = true;
    q->id = x;
    push_locked(ch, q);
    pthread_mutex_unlock(&ch->lock);
    took = true;
out:
    pthread_mutex_unlock(&rcm_route_lock);
    return took;
}

/* The router takes its glibc arena (mapped with mmap and munmap at a
 * thread's first malloc) before rcm_init returns, as the engine's progress
 * thread does (src/engine/progress.c, progress_main): libfabric rewrites
 * munmap and its kin in place when the program opens its first domain, and
 * a thread inside them meanwhile crashes. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
} router_start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void *router_main(void *arg)
{
    (void)arg;
    void *volatile warm = malloc(64);
    free(warm);
    pthread_mutex_lock(&router_start.lock);
    router_start.ready = true;
    pthread_cond_broadcast(&router_start.cond);
    pthread_mutex_unlock(&router_start.lock);
    int fd = uiw_cm_channel_fd(rcm_uch);
    int timeout = -1;
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        (void)poll(&p, 1, timeout);
        pthread_mutex_lock(&rcm_route_lock);
        for (;;) {
            struct rcm_qev *q = malloc(sizeof(*q));
            if (!q)
                break; /* retry on the next wake-up; the fd stays readable */
            if (uiw_cm_get_event(rcm_uch, &q->uev) != 0) {
                free(q);
                break;
            }
            route(q);
        }
        timeout = run_retries();
        int held = run_held();
        if (held >= 0 && (timeout < 0 || held < timeout))
            timeout = held;
        pthread_mutex_unlock(&rcm_route_lock);
    }
    return NULL;
}

static void warm_up(void *arg)
{
    (void)arg;
}

static void init_once_fn(void)
{
    rcm_uch = uiw_cm_channel_create();
    if (!rcm_uch) {
        init_err = -ENOMEM;
        return;
    }
    uiw_cm_channel_set_sink(rcm_uch, route_direct, NULL);
    int fd = uiw_cm_channel_fd(rcm_uch);
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        init_err = -errno;
        return;
    }
    /* The router takes no signal meant for the application. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    int rc = pthread_create(&t, &attr, router_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        init_err = -rc;
        return;
    }
    pthread_mutex_lock(&router_start.lock);
    while (!router_start.ready)
        pthread_cond_wait(&router_start.cond, &router_start.lock);
    pthread_mutex_unlock(&router_start.lock);
    /* Start the engine's progress thread now rather than in the first
     * rdma_listen / rdma_connect: servers that publish their port before
     * rdma_listen (qperf) otherwise leave a wide window in which the
     * client's connection is refused. */
    uint64_t tid;
    (void)uiw_progress_timer(0, warm_up, NULL, &tid);
}

int rcm_init(void)
{
    pthread_once(&init_once, init_once_fn);
    return init_err;
}

/* ------------------------------------------------------------------------
 * Public channel calls
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
    int rc = rcm_init();
    if (rc < 0) {
        errno = -rc;
        return NULL;
    }
    struct rcm_channel *ch = rcm_channel_new();
    return ch ? &ch->pub : NULL;
}

UIW_EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
    if (channel)
        rcm_channel_free(to_rch(channel));
}

/* ------------------------------------------------------------------------
 * Translation
 * ---------------------------------------------------------------------- */

static uint8_t u8_depth(uint16_t v, uint8_t dflt)
{
    if (v == UIW_CM_IRD_ORD_AUTO)
        return dflt;
    return (uint8_t)(v > 0xFE ? 0xFE : v);
}

static void set_pd(struct rcm_event *e, const struct uiw_cm_event *u)
{
    unsigned len = u->private_data_len;
    if (len > 0xFF) {
        /* rdma_conn_param.private_data_len is 8 bits */
        uiw_dbg(1, "rdmacm: peer private data truncated from %u to 255 bytes", len);
        len = 0xFF;
    }
    if (len) {
        memcpy(e->private_data, u->private_data, len);
        e->ev.param.conn.private_data = e->private_data;
    }
    e->ev.param.conn.private_data_len = (uint8_t)len;
}

static void set_state(struct rcm_id *x, enum rcm_state st)
{
    pthread_mutex_lock(&x->lock);
    if (x->state != RCM_DEAD)
        x->state = st;
    pthread_mutex_unlock(&x->lock);
}

/* CONNECT_REQUEST: a new id for the connection, on the listener's channel
 * (a synchronous listener's new ids are synchronous: their own channel).
 * Returns the event, or NULL when the connection had to be dropped. */
static struct rcm_event *conn_request(struct rcm_qev *q, struct rcm_event *e)
{
    struct rcm_id *l = q->id;
    const struct uiw_cm_event *u = &q->uev;
    struct sockaddr_storage local = u->local, peer = u->peer;
    rcm_sa_unmap(&local);
    rcm_sa_unmap(&peer);

    struct rcm_dev *dev = NULL;
    int rc = rcm_dev_for_addr((struct sockaddr *)&local, &dev);
    if (rc < 0) {
        uiw_log("rdmacm: no uiwarp device for an incoming connection's address (%d): dropped", rc);
        uiw_cm_conn_destroy(u->conn);
        return NULL;
    }
    struct rcm_id *n = NULL;
    rc = rcm_id_alloc(l->sync ? NULL : l->ch, l->id.context, l->id.ps, l->id.qp_type, &n);
    if (rc < 0) {
        uiw_log("rdmacm: cannot create an id for an incoming connection (%d): dropped", rc);
        uiw_cm_conn_destroy(u->conn);
        return NULL;
    }
    rcm_id_attach_dev(n, dev);
    memcpy(&n->id.route.addr.src_storage, &local, sizeof(local));
    memcpy(&n->id.route.addr.dst_storage, &peer, sizeof(peer));
    n->bound = true;
    n->conn = u->conn;
    n->state = RCM_REQ;
    /* The initiator's IRD bounds what we may issue (our ORD), its ORD is
     * what we should serve (our IRD). Unknown (MPA v1, or left to the ULP):
     * the device's maximum. */
    n->req_init_depth =
        u->enhanced ? u8_depth(u->peer_ird, dev->max_init_depth) : dev->max_init_depth;
    n->req_resp_res = u->enhanced ? u8_depth(u->peer_ord, dev->max_resp_res) : dev->max_resp_res;

    e->ev.id = &n->id;
    e->ev.listen_id = &l->id;
    e->ev.param.conn.initiator_depth = n->req_init_depth;
    e->ev.param.conn.responder_resources = n->req_resp_res;
    set_pd(e, u);
    return e;
}

/* Build the application's event for q (consumed). ch->lock held. */
static struct rcm_event *translate(struct rcm_qev *q)
{
    struct rcm_event *e = calloc(1, sizeof(*e));
    if (!e) {
        qev_discard(q);
        return NULL;
    }
    struct rcm_id *x = q->id;
    e->owner = x;
    e->ev.id = &x->id;
    if (!q->engine) {
        e->ev.event = q->type;
        e->ev.status = q->status;
        /* a repeated connect failed at once, or was ended (rcm_retry_end) */
        if (q->type == RDMA_CM_EVENT_UNREACHABLE || q->type == RDMA_CM_EVENT_CONNECT_ERROR)
            set_state(x, RCM_FAILED);
        free(q);
        return e;
    }
    const struct uiw_cm_event *u = &q->uev;
    e->ev.status = u->status;
    switch (u->type) {
    case UIW_CM_CONNECT_REQUEST:
        e->ev.event = RDMA_CM_EVENT_CONNECT_REQUEST;
        if (!conn_request(q, e)) {
            free(e);
            e = NULL;
        }
        break;
    case UIW_CM_ESTABLISHED:
        e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
        e->ev.param.conn.initiator_depth = u8_depth(u->ord, 0);
        e->ev.param.conn.responder_resources = u8_depth(u->ird, 0);
        set_pd(e, u);
        pthread_mutex_lock(&x->lock);
        if (x->conn_src_auto) { /* a retry may have had to take another port */
            struct sockaddr_storage l = u->local;
            rcm_sa_unmap(&l);
            if (l.ss_family == x->id.route.addr.src_addr.sa_family)
                rcm_sa_set_port(&x->id.route.addr.src_addr, rcm_sa_port((struct sockaddr *)&l));
        }
        pthread_mutex_unlock(&x->lock);
        set_state(x, RCM_CONNECTED);
        break;
    case UIW_CM_REJECTED:
        e->ev.event = RDMA_CM_EVENT_REJECTED;
        if (!e->ev.status)
            e->ev.status = -ECONNREFUSED;
        set_pd(e, u);
        set_state(x, RCM_REJECTED);
        /* as rdma-core: the QP of a rejected connection goes to ERR */
        if (x->id.qp) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            (void)ibv_modify_qp(x->id.qp, &a, IBV_QP_STATE);
        }
        break;
    case UIW_CM_UNREACHABLE:
        e->ev.event = RDMA_CM_EVENT_UNREACHABLE;
        set_state(x, RCM_FAILED);
        break;
    case UIW_CM_CONNECT_ERROR: {
        /* The kernel's iWARP CM reports a connect timeout as UNREACHABLE. */
        pthread_mutex_lock(&x->lock);
        bool active = x->state == RCM_CONNECTING;
        pthread_mutex_unlock(&x->lock);
        e->ev.event = active && u->status == -ETIMEDOUT ? RDMA_CM_EVENT_UNREACHABLE
                                                        : RDMA_CM_EVENT_CONNECT_ERROR;
        set_state(x, RCM_FAILED);
        break;
    }
    case UIW_CM_DISCONNECTED:
        e->ev.event = RDMA_CM_EVENT_DISCONNECTED;
        set_state(x, RCM_DISCONNECTED);
        break;
    default:
        free(e);
        e = NULL;
        break;
    }
    free(q);
    if (e && e->ev.status)
        uiw_dbg(1, "rdmacm: %s, status %d", rdma_event_str(e->ev.event), e->ev.status);
    return e;
}

/* ------------------------------------------------------------------------
 * Getting and acknowledging events
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
    if (!channel || !event)
        return rcm_err(EINVAL);
    struct rcm_channel *ch = to_rch(channel);
    for (;;) {
        pthread_mutex_lock(&ch->lock);
        if (ch->dead)
            return dead_channel_wait(ch);
        struct rcm_qev *q;
        struct rcm_event *e = NULL;
        while (!e && (q = pop_locked(ch)))
            e = translate(q);
        if (e) {
            struct rcm_id *o = e->owner;
            pthread_mutex_lock(&o->lock);
            o->ev_reported++;
            pthread_mutex_unlock(&o->lock);
            pthread_mutex_unlock(&ch->lock);
            *event = &e->ev;
            return 0;
        }
        int fd = ch->pub.fd;
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK)) {
            pthread_mutex_unlock(&ch->lock);
            return rcm_err(EAGAIN);
        }
        /* Our own descriptor of the socket: a destroy that closes the
         * channel's fd right now neither makes our read() fail nor lets it
         * read whatever file gets that number next. */
        int wfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (wfd < 0) {
            int e = errno;
            pthread_mutex_unlock(&ch->lock);
            return rcm_err(e);
        }
        ch->waiters++;
        pthread_mutex_unlock(&ch->lock);
        /* Block in read() as rdma-core does on its channel fd, so a signal
         * interrupts the wait exactly as there: EINTR unless the handler
         * has SA_RESTART. The byte read is put back at once (the queue
         * decides, under the lock, who gets which event). */
        char b;
        ssize_t n = read(wfd, &b, 1);
        int err = errno;
        close(wfd);
        pthread_mutex_lock(&ch->lock);
        ch->waiters--;
        if (ch->dead) { /* destroyed while we waited: a signal woke us */
            pthread_mutex_unlock(&ch->lock);
            return rcm_err(n < 0 && err == EINTR ? EINTR : EBADF);
        }
        if (n == 1) {
            /* We took the byte: what is left decides (writers hold the
             * lock, so there is at most one). */
            int avail = 0;
            ch->armed = ioctl(fd, FIONREAD, &avail) == 0 && avail > 0;
            if (ch->head)
                wake_set(ch);
        }
        pthread_mutex_unlock(&ch->lock);
        if (n < 0 && err != EAGAIN && err != EWOULDBLOCK)
            return rcm_err(err);
    }
}

UIW_EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
    if (!event)
        return rcm_err(EINVAL);
    struct rcm_event *e = (struct rcm_event *)event;
    struct rcm_id *o = e->owner;
    pthread_mutex_lock(&o->lock);
    o->ev_acked++;
    pthread_cond_broadcast(&o->cond);
    pthread_mutex_unlock(&o->lock);
    free(e);
    return 0;
}

int rcm_complete(struct rcm_id *x)
{
    if (!x->sync)
        return 0;
    if (x->id.event) {
        rdma_ack_cm_event(x->id.event);
        x->id.event = NULL;
    }
    if (rdma_get_cm_event(x->id.channel, &x->id.event) < 0)
        return -1;
    int st = x->id.event->status;
    if (!st)
        return 0;
    if (x->id.event->event == RDMA_CM_EVENT_REJECTED)
        return rcm_err(ECONNREFUSED);
    return rcm_err(st < 0 ? -st : st);
}

UIW_EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
#define EVENT_NAME(e) [e] = #e
    static const char *const s[] = {
        EVENT_NAME(RDMA_CM_EVENT_ADDR_RESOLVED),   EVENT_NAME(RDMA_CM_EVENT_ADDR_ERROR),
        EVENT_NAME(RDMA_CM_EVENT_ROUTE_RESOLVED),  EVENT_NAME(RDMA_CM_EVENT_ROUTE_ERROR),
        EVENT_NAME(RDMA_CM_EVENT_CONNECT_REQUEST), EVENT_NAME(RDMA_CM_EVENT_CONNECT_RESPONSE),
        EVENT_NAME(RDMA_CM_EVENT_CONNECT_ERROR),   EVENT_NAME(RDMA_CM_EVENT_UNREACHABLE),
        EVENT_NAME(RDMA_CM_EVENT_REJECTED),        EVENT_NAME(RDMA_CM_EVENT_ESTABLISHED),
        EVENT_NAME(RDMA_CM_EVENT_DISCONNECTED),    EVENT_NAME(RDMA_CM_EVENT_DEVICE_REMOVAL),
        EVENT_NAME(RDMA_CM_EVENT_MULTICAST_JOIN),  EVENT_NAME(RDMA_CM_EVENT_MULTICAST_ERROR),
        EVENT_NAME(RDMA_CM_EVENT_ADDR_CHANGE),     EVENT_NAME(RDMA_CM_EVENT_TIMEWAIT_EXIT),
    };
#undef EVENT_NAME

    if ((unsigned)event < sizeof(s) / sizeof(s[0]) && s[event])
        return s[event];
    return "UNKNOWN EVENT";
}
