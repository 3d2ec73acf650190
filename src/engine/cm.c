/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connection manager: TCP + MPA connection establishment (RFC 5044 §7.1,
 * RFC 6581) for both sides, the P2P RTR hand-off to the data path, and
 * teardown. The negotiation itself is the wire core's uiw_mpa_neg_*; this
 * file moves its bytes over non-blocking sockets from the progress thread,
 * applies the timeouts and turns the outcomes into rdma_cm-like events.
 *
 * Design notes (see also engine.h, "Connections"):
 *  - The peer's MPA frame is read exactly (20-byte header, then PD_Length
 *    bytes), so whatever follows it stays in the socket for the data path.
 *  - Passive side: the Request is collected and checked with a trial
 *    negotiation (MPA-level refusals are answered without the ULP); the
 *    real negotiation runs again in uiw_cm_accept / uiw_cm_reject with the
 *    ULP's IRD/ORD and private data, since the Reply depends on them.
 *  - Timeouts use one struct uiw_timer per connection in the progress
 *    thread's timer heap (no fd): a fired timer is only acted on if it is
 *    still armed (timer_on, not re-armed meanwhile) and the state matches.
 *  - A connection the ULP never saw (no CONNECT_REQUEST queued: waiting for
 *    the Request, dropped, or refused by the MPA layer itself) belongs to
 *    its listener's list and is freed by cm.c on every path that ends it
 *    (passive_drop); one the ULP was given is the ULP's to destroy.
 *  - Every connection socket gets TCP keepalive and TCP_USER_TIMEOUT from
 *    UIWARP_PEER_TIMEOUT (set_sockopts), so a peer that vanished without
 *    FIN or RST ends in ETIMEDOUT: the data path then flushes the QP
 *    (IBV_EVENT_QP_FATAL) and reports DISCONNECTED.
 *  - Listeners survive descriptor exhaustion (listener_cb): a reserve fd
 *    accepts and resets the pending connection on EMFILE/ENFILE, and the
 *    listener is disarmed with back-off otherwise; the log is rate-limited.
 *  - `busy` counts operations running with the connection lock dropped
 *    (attach, abort, disconnect); destroy waits for it to reach zero.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "cm_int.h"
#include "iface/uiw_sys.h"

/* iface/uiw_cm.h restates these wire constants for librdmacm. */
_Static_assert(UIW_CM_PD_MAX == UIW_MPA_MAX_PD, "MPA private data limit");
_Static_assert(UIW_CM_IRD_ORD_AUTO == UIW_MPA_IRD_ORD_AUTO, "RFC 6581 IRD/ORD auto value");
_Static_assert(UIW_MPA_RFC6581_LEN == 4, "RFC 6581 IRD/ORD words");
#include "pcap_out.h"

#define DEFAULT_TIMEOUT_MS 10000u
#define BUSY_RETRY_MS      50u
#define ACCEPT_BACKOFF_MIN 10u   /* ms: listener disarmed after a resource failure */
#define ACCEPT_BACKOFF_MAX 1000u /* ms */
#define ACCEPT_LOG_NS      (5ull * 1000000000ull) /* at most one accept-failure line per 5 s */

static atomic_int conn_count; /* live struct uiw_conn objects */

/* Protects every listener's conns list and conn->listener/lnext. */
static pthread_mutex_t cm_list_lock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

/* Take c off its listener's list (cm_list_lock held; c->listener set and
 * the listener not dying, which empties the list itself). */
static void lconn_unlink(struct uiw_conn *c)
{
    *c->lpprev = c->lnext;
    if (c->lnext)
        c->lnext->lpprev = c->lpprev;
    c->lnext = NULL;
    c->lpprev = NULL;
}

static socklen_t sa_len(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static uint16_t sa_port(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)(const void *)sa)->sin6_port
                                     : ((const struct sockaddr_in *)(const void *)sa)->sin_port;
}

static unsigned cfg_timeout(void)
{
    unsigned t = uiw_config()->mpa_timeout_ms;
    return t ? t : DEFAULT_TIMEOUT_MS;
}

static uint16_t min_u16(unsigned a, unsigned b)
{
    return (uint16_t)(a < b ? a : b);
}

/* Every connection socket, active and passive. Dead peers (docs/ENGINE.md
 * "Dead peers"): with T = UIWARP_PEER_TIMEOUT seconds (default 30, 0 off),
 * TCP_USER_TIMEOUT T s bounds how long sent data may stay unacknowledged
 * (a sender), and keepalive (idle T/2 s, probes every max(1, T/10) s) finds
 * an idle receiver's peer gone in about T s: with TCP_USER_TIMEOUT set,
 * Linux ends a probing connection once T s passed since the last ACK and
 * does not count probes (tcp_keepalive_timer), so TCP_KEEPCNT is not set
 * (one system call less per connection). The kernel then fails the socket
 * with ETIMEDOUT. */
static void set_dead_peer(int fd, unsigned ms)
{
    int one = 1, zero = 0;
    if (ms == 0)
        ms = uiw_config()->peer_timeout_s * 1000u; /* at most 86400 s: no overflow */
    if (ms == 0 || ms == UIW_PEER_TIMEOUT_OFF) {
        unsigned none = 0;
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &zero, sizeof(zero));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &none, sizeof(none));
        return;
    }
    unsigned ut = ms;
    unsigned t = ms / 1000u; /* seconds, for keepalive's 1 s granularity */
    int idle = t / 2 ? (int)(t / 2) : 1, intvl = t / 10 ? (int)(t / 10) : 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut)) < 0)
        uiw_dbg(1, "cm: dead-peer socket options: %s", strerror(errno));
}

/* reuse: SO_REUSEADDR, for a bind() to a given port (a listener's, an
 * application's own source port); a port left to connect() (port 0 with
 * IP_BIND_ADDRESS_NO_PORT, or no bind) is chosen by inet_hash_connect,
 * which does not look at it: one system call less per connection. */
static void set_sockopts(int fd, unsigned peer_timeout_ms, bool reuse)
{
    int one = 1;
    if (reuse)
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    set_dead_peer(fd, peer_timeout_ms);
}

/* RDMA_OPTION_ID_TOS: the traffic class of the connection's packets
 * (RFC 2474), IP_TOS for IPv4, IPV6_TCLASS for IPv6. */
static void set_tos(int fd, int family, const struct uiw_conn_param *p)
{
    int v;

    if (!p || !p->tos_set)
        return;
    v = p->tos;
    if (setsockopt(fd, family == AF_INET6 ? IPPROTO_IPV6 : IPPROTO_IP,
                   family == AF_INET6 ? IPV6_TCLASS : IP_TOS, &v, sizeof(v)) < 0)
        uiw_dbg(1, "cm: TOS %d: %s", v, strerror(errno));
}

static void fill_addrs(struct uiw_conn *c)
{
    socklen_t l = sizeof(c->local);
    (void)getsockname(c->fd, (struct sockaddr *)&c->local, &l);
    l = sizeof(c->peer);
    (void)getpeername(c->fd, (struct sockaddr *)&c->peer, &l);
}

/* Write all of buf to a non-blocking socket. MPA frames are at most 532
 * bytes and go to a socket that has sent nothing before, so this
 * practically never waits; the poll only covers a full send buffer. */
static int send_all(int fd, const void *buf, size_t len, unsigned timeout_ms)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = send(fd, (const char *)buf + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int r = poll(&p, 1, (int)timeout_ms);
            if (r == 0)
                return -ETIMEDOUT;
            if (r < 0 && errno != EINTR)
                return -errno;
            continue;
        }
        return n < 0 ? -errno : -EIO;
    }
    return 0;
}

/* UIWARP_PCAP: the connection's capture handle, made on its first bytes
 * (NULL when capture is off). c->lock held. */
static struct uiw_cap *conn_cap(struct uiw_conn *c)
{
    if (!c->pcap_tried && c->fd >= 0) {
        c->pcap_tried = true;
        c->pcap = uiw_cap_conn(c->fd, c->active);
    }
    return c->pcap;
}

/* send_all on c's socket, captured. c->lock held. */
static int conn_send(struct uiw_conn *c, const void *buf, size_t len)
{
    int rc = send_all(c->fd, buf, len, c->timeout_ms);
    if (rc == 0)
        uiw_cap_bytes(conn_cap(c), true, buf, len);
    return rc;
}

/* The capture handle goes with the socket to qp before uiw_qp_attach_socket
 * (its data path captures from the first FPDU on: the attach may send the
 * RTR at once). The QP has no socket yet, so nothing of the data path reads
 * qp->pcap meanwhile; the attach's qp->lock orders the store before its
 * use. c->lock held. */
static void cap_give(struct uiw_conn *c, struct uiw_qp *qp)
{
    struct uiw_cap *cap = conn_cap(c);
    c->pcap = NULL;
    uiw_cap_close(qp->pcap, false); /* a previous connection's, if any */
    qp->pcap = cap;
}

/* The attach failed: the socket (and its capture) stay with c. */
static void cap_take_back(struct uiw_conn *c, struct uiw_qp *qp)
{
    c->pcap = qp->pcap;
    qp->pcap = NULL;
}

/* Abortive close without giving up the descriptor (the QP owns it): with
 * SO_LINGER 0, connect(AF_UNSPEC) makes TCP send RST (tcp_disconnect). */
static void abort_socket(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    struct sockaddr sa;
    if (fd < 0)
        return;
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    memset(&sa, 0, sizeof(sa));
    sa.sa_family = AF_UNSPEC;
    (void)connect(fd, &sa, sizeof(sa));
}

/* The TCP side of close() without closing the descriptor (the QP still
 * owns it): FIN when nothing received is left unread, else RST. */
static void shutdown_like_close(int fd)
{
    int unread = 0;
    if (fd < 0)
        return;
    if (ioctl(fd, FIONREAD, &unread) == 0 && unread == 0)
        (void)shutdown(fd, SHUT_WR);
    else
        abort_socket(fd);
}

static void close_abort(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    if (fd < 0)
        return;
    (void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* Discard whatever is readable, so that close() sends FIN rather than RST
 * (a Terminate sent just before must reach the peer). */
static void drain_quietly(int fd)
{
    char buf[1024];
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
}

/* MPA policy from uiw_config() with the ULP's values. */
static void make_policy(uiw_mpa_policy *pol, unsigned ird, unsigned ord, const uint8_t *pd,
                        uint16_t pd_len)
{
    const struct uiw_config *cfg = uiw_config();
    uiw_mpa_policy_default(pol);
    pol->rev = cfg->mpa_rev == 1 ? 1 : 2;
    pol->crc = cfg->crc <= UIW_CRC_REQUIRED ? cfg->crc : UIW_CRC_OPTIONAL;
    pol->markers = cfg->markers;
    pol->accept_markers = cfg->markers;
    pol->p2p = cfg->p2p;
    pol->rtr_offer = cfg->rtr & (UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ);
    pol->ird = min_u16(ird, UIW_MAX_IRD);
    pol->ord = min_u16(ord, UIW_MAX_ORD);
    pol->max_ird = UIW_MAX_IRD;
    pol->min_ord = 0; /* clamp, as siw */
    pol->ulp_pd = pd_len ? pd : NULL;
    pol->ulp_pd_len = pd_len;
}

/* Bytes of the peer's frame to have: the header, then header + PD_Length
 * (the decoders have rejected PD_Length > 512 by then). */
static size_t frame_want(const struct uiw_conn *c)
{
    return uiw_mpa_frame_want(c->m->rbuf, c->rhave);
}

/* Read at most room bytes of the peer into c->m->rbuf. Returns the count read
 * (> 0, captured), 0 when the peer closed, -EAGAIN when nothing is there
 * yet, or another negative errno. c->lock held. */
static ssize_t rbuf_recv(struct uiw_conn *c, size_t room)
{
    for (;;) {
        ssize_t n = recv(c->fd, c->m->rbuf + c->rhave, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        if (n > 0)
            uiw_cap_bytes(conn_cap(c), false, c->m->rbuf + c->rhave, (size_t)n);
        return n;
    }
}

/* Read more of the peer's MPA frame, never past it (the bytes after it
 * are the QP's). As rbuf_recv. c->lock held. */
static ssize_t frame_recv(struct uiw_conn *c)
{
    return rbuf_recv(c, frame_want(c) - c->rhave);
}

/* ------------------------------------------------------------------------
 * Connection objects
 * ---------------------------------------------------------------------- */

static void conn_timer_cb(void *obj);

/* NULL with *err set (-ENOMEM, or the progress thread's start error). */
static struct uiw_conn *conn_new(struct uiw_context *ctx, struct uiw_cm_channel *ch, void *user,
                                 bool active, int *err)
{
    struct uiw_conn *c = calloc(1, sizeof(*c));
    if (c)
        c->m = calloc(1, sizeof(*c->m));
    if (!c || !c->m) {
        free(c);
        *err = -ENOMEM;
        return NULL;
    }
    *err = uiw_timer_init(&c->timer, conn_timer_cb, c);
    if (*err) {
        free(c->m);
        free(c);
        return NULL;
    }
    atomic_fetch_add(&conn_count, 1);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->idle, NULL);
    atomic_init(&c->refs, 1);
    c->fd = -1;
    c->ctx = ctx;
    c->ch = ch;
    c->user = user;
    c->active = active;
    c->timeout_ms = cfg_timeout();
    return c;
}

static void conn_get(struct uiw_conn *c)
{
    atomic_fetch_add(&c->refs, 1);
}

static void conn_put(struct uiw_conn *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    uiw_timer_fini(&c->timer); /* no lock held: may wait for its callback */
    uiw_cap_close(c->pcap, false);
    if (c->fd >= 0)
        close(c->fd);
    pthread_cond_destroy(&c->idle);
    pthread_mutex_destroy(&c->lock);
    free(c->m);
    free(c);
    atomic_fetch_sub(&conn_count, 1);
}

/* ESTABLISHED was posted (it took the negotiated values from c->m): the
 * negotiation's memory goes back to malloc for the next setup. c->lock
 * held. */
static void conn_mpa_done(struct uiw_conn *c)
{
    free(c->m);
    c->m = NULL;
}

/* Drop c->lock and then, when release (passive_drop's answer, drain's),
 * the reference that must go after unlocking. */
static void conn_unlock_put(struct uiw_conn *c, bool release)
{
    pthread_mutex_unlock(&c->lock);
    if (release)
        conn_put(c);
}

int uiw_cm_conn_count(void)
{
    return atomic_load(&conn_count);
}

/* c->lock held. */
static void busy_enter(struct uiw_conn *c)
{
    c->busy++;
}

static void busy_leave(struct uiw_conn *c)
{
    if (--c->busy == 0)
        pthread_cond_broadcast(&c->idle);
}

static void wait_idle(struct uiw_conn *c)
{
    while (c->busy)
        pthread_cond_wait(&c->idle, &c->lock);
}

/* c->lock held. */
static void timer_arm(struct uiw_conn *c, unsigned ms)
{
    c->timer_on = true;
    uiw_timer_arm(&c->timer, ms);
}

static void timer_disarm(struct uiw_conn *c)
{
    c->timer_on = false;
    uiw_timer_disarm(&c->timer);
}

/* Give up cm.c's socket: unregister and close. c->lock held; on a user
 * thread only when the fd is not registered or its registration cannot
 * fire (the responder's one-shot after the Request), else progress thread
 * only (a running callback would wait for c->lock). */
static void conn_close_fd(struct uiw_conn *c, bool abortive)
{
    if (c->fd < 0)
        return;
    uiw_cap_close(c->pcap, abortive);
    c->pcap = NULL;
    if (c->fd_reg) {
        uiw_progress_del(c->fd);
        c->fd_reg = false;
    }
    if (abortive)
        close_abort(c->fd);
    else {
        drain_quietly(c->fd);
        close(c->fd);
    }
    c->fd = -1;
}

/* ------------------------------------------------------------------------
 * Events
 * ---------------------------------------------------------------------- */

static void ev_init(struct uiw_cm_event *ev, const struct uiw_conn *c, enum uiw_cm_event_type type,
                    int status)
{
    memset(ev, 0, offsetof(struct uiw_cm_event, private_data));
    ev->type = type;
    ev->status = status;
    ev->conn = (struct uiw_conn *)c;
    ev->user = c->user;
    ev->local = c->local;
    ev->peer = c->peer;
}

static void ev_set_pd(struct uiw_cm_event *ev, const uint8_t *pd, uint16_t len)
{
    ev->private_data_len = len;
    if (len)
        memcpy(ev->private_data, pd, len);
}

/* Fill the negotiated values (and, active side, the peer's private data). */
static void ev_from_result(struct uiw_cm_event *ev, const struct uiw_conn *c)
{
    const uiw_mpa_result *r = &c->m->neg.result;
    ev->enhanced = c->active ? c->m->neg.peer.enhanced : c->m->req.enhanced;
    ev->peer_ird = r->peer_ird;
    ev->peer_ord = r->peer_ord;
    ev->mpa_rev = r->rev;
    ev->crc = r->crc;
    ev->markers_rx = r->markers_rx;
    ev->markers_tx = r->markers_tx;
    ev->p2p = r->p2p;
    ev->rtr = r->rtr;
    ev->ird = r->ird;
    ev->ord = r->ord;
    if (c->active)
        ev_set_pd(ev, r->peer_pd, r->peer_pd_len);
}

/* c->lock held. */
static void post(struct uiw_conn *c, enum uiw_cm_event_type type, int status)
{
    struct uiw_cm_event *ev = malloc(sizeof(*ev));
    if (!ev) {
        uiw_log("cm: out of memory, event %d lost", (int)type);
        return;
    }
    ev_init(ev, c, type, status);
    ev->private_data_len = 0;
    if (type == UIW_CM_ESTABLISHED || type == UIW_CM_REJECTED)
        ev_from_result(ev, c);
    (void)uiw_cm_queue(c->ch, ev);
    free(ev);
}

/* 0, or -ENOMEM: nothing was queued (the caller drops the connection,
 * the initiator sees a reset, the ULP nothing). c->lock held. */
static int post_connect_request(struct uiw_conn *c)
{
    struct uiw_cm_event *ev = malloc(sizeof(*ev));
    const uiw_mpa_frame *f = &c->m->req;
    int rc;
    if (!ev) {
        uiw_log("cm: out of memory, incoming connection reset");
        return -ENOMEM;
    }
    ev_init(ev, c, UIW_CM_CONNECT_REQUEST, 0);
    pthread_mutex_lock(&cm_list_lock);
    ev->listener = c->listener;
    pthread_mutex_unlock(&cm_list_lock);
    ev->enhanced = f->enhanced;
    ev->peer_ird = f->enhanced ? f->ird : 0;
    ev->peer_ord = f->enhanced ? f->ord : 0;
    ev->mpa_rev = f->rev;
    ev->crc = f->crc;
    ev->markers_tx = f->markers;
    ev->p2p = f->enhanced && f->p2p;
    ev->rtr = ev->p2p ? f->rtr : 0;
    ev_set_pd(ev, f->ulp_pd, f->ulp_pd_len);
    rc = uiw_cm_queue(c->ch, ev);
    free(ev);
    if (rc == 0)
        c->posted = true;
    return rc;
}

/* ------------------------------------------------------------------------
 * Terminate for a failed Reply check (RFC 6581 §9.1 code 6, §9.2 code 7)
 * ---------------------------------------------------------------------- */

static void send_terminate(struct uiw_conn *c, const uiw_mpa_neg *n)
{
    int fd = c->fd;
    uiw_hdr h;
    uiw_tx tx;
    uiw_tx_msg m;
    uiw_tx_cfg cfg = {.crc = n->result.crc, .markers = n->result.markers_tx, .max_fpdu = 1024};
    memset(&h, 0, sizeof(h));
    h.tagged = false;
    h.last = true;
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = UIW_OP_TERMINATE;
    h.qn = UIW_QN_TERMINATE;
    h.msn = 1; /* the first message on QN 2 */
    h.mo = 0;
    h.u.term.cause = n->term;
    uiw_fpdu *f = malloc(sizeof(*f));
    if (!f)
        return;
    if (uiw_tx_init(&tx, &cfg) == 0 && uiw_tx_msg_init(&m, &h, NULL, 0, 0) == 0 &&
        uiw_tx_next(&tx, &m, f) == 1) {
        struct msghdr mh;
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov = f->iov;
        mh.msg_iovlen = (size_t)f->iovcnt;
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0)
            uiw_cap_data(conn_cap(c), true, f->iov, f->iovcnt, (size_t)w);
        if (w != (ssize_t)f->bytes)
            uiw_dbg(1, "cm: Terminate not sent completely");
    }
    free(f);
}

/* ------------------------------------------------------------------------
 * Active side
 * ---------------------------------------------------------------------- */

/* The active side's socket into c->fd, with the connection's options
 * (c->param) and bound to src when given; with port 0 the address only,
 * connect() picks the port (without bind()'s search for a port no socket
 * holds; rdmacm's rdma_resolve_addr leaves the port to us). 0 or -errno. */
static int active_socket(struct uiw_conn *c, const struct sockaddr *src)
{
    int one = 1, e,
        fd = uiw_kernel_socket(c->peer.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    set_sockopts(fd, c->param.peer_timeout_ms, src && sa_port(src));
    set_tos(fd, c->peer.ss_family, &c->param);
    if (src && !sa_port(src))
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (src && bind(fd, src, sa_len(src)) < 0) {
        e = -errno;
        close(fd);
        return e;
    }
    c->fd = fd;
    return 0;
}

/* Setup failed: close our socket, report. c->lock held, progress thread. */
static void active_fail(struct uiw_conn *c, enum uiw_cm_event_type type, int status, bool abortive)
{
    if (c->rev1_tried && type == UIW_CM_UNREACHABLE) {
        /* the revision 1 retry found nobody: what the application sees is
         * the reset of its connection */
        type = UIW_CM_CONNECT_ERROR;
        status = -ECONNRESET;
    }
    timer_disarm(c);
    conn_close_fd(c, abortive);
    c->state = UIW_CS_CLOSED;
    post(c, type, status);
}

static void conn_io_cb(void *obj, uint32_t events);

/* The Reply was accepted: attach the QP (the data path sends the RTR first
 * when P2P), then ESTABLISHED. c->lock held, progress thread. */
static void active_done(struct uiw_conn *c)
{
    uiw_mpa_result res = c->m->neg.result;
    timer_disarm(c);
    if (!c->qp) {
        if (c->had_qp) {
            active_fail(c, UIW_CM_CONNECT_ERROR, -ENODEV, true);
            return;
        }
        /* MPA only: keep reading (and discarding) to see the peer's FIN. */
        c->state = UIW_CS_ESTABLISHED;
        post(c, UIW_CM_ESTABLISHED, 0);
        conn_mpa_done(c);
        return;
    }
    struct uiw_qp *qp = c->qp;
    int fd = c->fd;
    c->state = UIW_CS_ACCEPTING; /* attaching */
    busy_enter(c);
    /* Our registration of the socket goes to the QP with it (attach turns
     * it into the data path's by EPOLL_CTL_MOD): no DEL and ADD. It is ours
     * again if the attach fails. */
    bool reg = c->fd_reg;
    c->fd_reg = false;
    struct sockaddr_storage local = c->local, peer = c->peer;
    cap_give(c, qp);
    pthread_mutex_unlock(&c->lock);
    /* The data path sends a wake-up FPDU a moment later if the peer has not
     * spoken: Linux siw's responder sends its Reply before it installs the
     * callback that reads FPDUs, and data arriving in between is not
     * noticed until more data comes (docs/INTEROP.md §1). Nothing is held;
     * ESTABLISHED is not delayed. */
    int rc =
        uiw_qp_attach_socket_hold(qp, fd, &res, uiw_config()->first_fpdu_hold_ms, &local, &peer);
    pthread_mutex_lock(&c->lock);
    busy_leave(c);
    if (rc == 0) {
        c->attached = true;
        c->fd = -1; /* the QP's now */
    } else {
        cap_take_back(c, qp);
        c->fd_reg = reg;
    }
    if (c->state == UIW_CS_DEAD)
        return;
    if (rc < 0) {
        uiw_log("cm: attaching the QP failed: %d", rc);
        active_fail(c, UIW_CM_CONNECT_ERROR, rc, true);
        return;
    }
    if (c->state != UIW_CS_ACCEPTING) /* closed meanwhile (QP destroyed) */
        return;
    c->state = UIW_CS_ESTABLISHED;
    post(c, UIW_CM_ESTABLISHED, 0);
    conn_mpa_done(c);
    if (c->early_close) {
        c->state = UIW_CS_CLOSED;
        post(c, UIW_CM_DISCONNECTED, c->early_err);
    }
}

/*
 * Revision 1 fallback (docs/ENGINE.md "MPA revision 1 fallback"). An RNIC
 * that runs MPA revision 1 (Chelsio's cxgb4 when so configured) answers a
 * revision 2 Request with a TCP reset, and RNIC initiators then try once
 * more at revision 1 (notes/rnic-mpa.md); so do we, when the reset comes
 * before any byte of a Reply: a new TCP connection to the same peer from
 * the same address, the same private data and IRD/ORD, at revision 1
 * (hence no RFC 6581 words and no peer-to-peer mode). Once per connection;
 * UIWARP_MPA_REV1_FALLBACK=0 turns it off. True if the retry is under way.
 * c->lock held, progress thread.
 */
static bool active_rev1_retry(struct uiw_conn *c)
{
    const struct uiw_config *cfg = uiw_config();
    struct sockaddr_storage src = c->local;
    uiw_mpa_policy pol;
    int rc;

    if (c->rev1_tried || !cfg->mpa_rev1_fallback || cfg->mpa_rev != 2 || c->rhave ||
        c->state != UIW_CS_WAIT_REP)
        return false;
    c->rev1_tried = true;
    memset(&c->local, 0, sizeof(c->local)); /* the new socket's, read once connected */
    make_policy(&pol, c->param.ird, c->param.ord, c->m->pd, c->pd_len);
    pol.rev = 1;
    pol.p2p = false;
    pol.rtr_offer = 0;
    rc = uiw_mpa_neg_start_initiator(&c->m->neg, &pol, c->m->txframe, sizeof(c->m->txframe));
    if (rc < 0)
        return false;
    c->txframe_len = (uint16_t)rc;
    uiw_log("cm: the peer reset our MPA revision 2 Request: trying revision 1");
    timer_disarm(c);
    if (c->fd_reg) {
        uiw_progress_del(c->fd); /* our own callback: returns at once */
        c->fd_reg = false;
    }
    close(c->fd);
    c->fd = -1;
    c->rhave = 0;
    /* the same address (the first connection's), a port of its own */
    if (src.ss_family == AF_INET)
        ((struct sockaddr_in *)&src)->sin_port = 0;
    else if (src.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&src)->sin6_port = 0;
    if (active_socket(c, src.ss_family ? (struct sockaddr *)&src : NULL) < 0) {
        active_fail(c, UIW_CM_CONNECT_ERROR, -ECONNRESET, false);
        return true;
    }
    c->state = UIW_CS_CONNECTING;
    if (connect(c->fd, (struct sockaddr *)&c->peer, sa_len((struct sockaddr *)&c->peer)) < 0 &&
        errno != EINPROGRESS) {
        active_fail(c, UIW_CM_CONNECT_ERROR, -ECONNRESET, false);
        return true;
    }
    rc = uiw_progress_add(c->fd, EPOLLOUT, conn_io_cb, c);
    if (rc < 0) {
        active_fail(c, UIW_CM_CONNECT_ERROR, rc, true);
        return true;
    }
    c->fd_reg = true;
    return true;
}

/* Read the Reply exactly and feed it to the negotiation. c->lock held. */
static void active_read(struct uiw_conn *c)
{
    for (;;) {
        ssize_t n = frame_recv(c);
        if (n == -EAGAIN)
            return;
        if (n == -ECONNRESET && active_rev1_retry(c))
            return;
        if (n < 0) {
            active_fail(c, UIW_CM_CONNECT_ERROR, (int)n, true);
            return;
        }
        if (n == 0) {
            active_fail(c, UIW_CM_CONNECT_ERROR, -ECONNRESET, false);
            return;
        }
        size_t olen = 0;
        int rc = uiw_mpa_neg_feed(&c->m->neg, c->m->rbuf + c->rhave, (size_t)n, NULL, 0, &olen);
        c->rhave = (uint16_t)(c->rhave + n);
        if (rc < 0 && c->m->neg.state != UIW_MPA_S_FAILED) {
            active_fail(c, UIW_CM_CONNECT_ERROR, -EPROTO, true);
            return;
        }
        switch (c->m->neg.state) {
        case UIW_MPA_S_WAIT_REP:
            continue;
        case UIW_MPA_S_DONE:
            active_done(c);
            return;
        case UIW_MPA_S_REJECTED:
            uiw_dbg(1, "cm: connection rejected: %s", c->m->neg.why ? c->m->neg.why : "");
            active_fail(c, UIW_CM_REJECTED, -ECONNREFUSED, false);
            return;
        default:
            uiw_dbg(1, "cm: MPA Reply refused: %s (%d)", c->m->neg.why ? c->m->neg.why : "",
                    c->m->neg.error);
            if (c->m->neg.term_valid && c->m->neg.term_send)
                send_terminate(c, &c->m->neg);
            active_fail(c, UIW_CM_CONNECT_ERROR, c->m->neg.error ? c->m->neg.error : -EPROTO,
                        false);
            return;
        }
    }
}

/* TCP connect finished (EPOLLOUT). c->lock held. */
static void active_connected(struct uiw_conn *c)
{
    /* A connected socket has a peer; a failed or unfinished one has not,
     * and only then is SO_ERROR asked (one system call less per
     * connection: the error of a connection that got as far as
     * ESTABLISHED is its recv's). */
    socklen_t l = sizeof(c->peer);
    if (getpeername(c->fd, (struct sockaddr *)&c->peer, &l) < 0) {
        int err = 0;
        l = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
            err = errno;
        if (err)
            active_fail(c, UIW_CM_UNREACHABLE, -err, false);
        return; /* else still connecting */
    }
    if (!c->local.ss_family) { /* uiw_cm_connect read it when connect() chose the port */
        l = sizeof(c->local);
        (void)getsockname(c->fd, (struct sockaddr *)&c->local, &l);
    }
    int rc = conn_send(c, c->m->txframe, c->txframe_len);
    if (rc < 0) {
        active_fail(c, UIW_CM_CONNECT_ERROR, rc, true);
        return;
    }
    c->state = UIW_CS_WAIT_REP;
    timer_arm(c, c->timeout_ms); /* RFC 5044 §7.1.2 rule 10 */
    /* Level-triggered: a Reply already there is reported at once, so no
     * read here (it found nothing nearly always: one recv per connection). */
    rc = uiw_progress_mod(c->fd, EPOLLIN, conn_io_cb, c);
    if (rc < 0) {
        active_fail(c, UIW_CM_CONNECT_ERROR, rc, true);
        return;
    }
}

/* ------------------------------------------------------------------------
 * Passive side
 * ---------------------------------------------------------------------- */

/* End a connection the ULP never saw (no CONNECT_REQUEST queued): close
 * the socket (RST when abortive) and take it off its listener's list.
 * c->lock held, progress thread. Returns true when the caller must drop
 * the listener's reference (after unlocking); false when the listener is
 * being destroyed (it frees c). */
static bool passive_drop_how(struct uiw_conn *c, const char *why, bool abortive)
{
    uiw_dbg(1, "cm: dropping incoming connection: %s", why);
    timer_disarm(c);
    conn_close_fd(c, abortive);
    c->state = UIW_CS_CLOSED;
    bool owned = false;
    pthread_mutex_lock(&cm_list_lock);
    struct uiw_listener *l = c->listener;
    if (l && !l->dying) {
        lconn_unlink(c);
        owned = true;
        c->listener = NULL;
    }
    pthread_mutex_unlock(&cm_list_lock);
    return owned;
}

static bool passive_drop(struct uiw_conn *c, const char *why)
{
    return passive_drop_how(c, why, false);
}

/* The Request is complete; drained: the read that completed it left the
 * socket's receive queue empty. c->lock held, progress thread. */
static bool passive_request(struct uiw_conn *c, bool drained)
{
    char b;
    /* siw's strict check: the initiator sends nothing after its Request
     * until our Reply (RFC 5044 §7.1.2). Bytes read with the Request were
     * refused by passive_read; later ones by uiw_cm_accept's peek. */
    if (!drained && recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0)
        return passive_drop(c, "bytes after the MPA Request");
    /* Trial negotiation: MPA-level refusals (markers, no RTR type) are
     * answered with a Reject without the ULP; malformed Requests close. */
    uiw_mpa_policy pol;
    uint8_t out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;
    make_policy(&pol, UIW_MPA_DEFAULT_IRD, UIW_MPA_DEFAULT_ORD, NULL, 0);
    uiw_mpa_neg_start_responder(&c->m->neg, &pol);
    (void)uiw_mpa_neg_feed(&c->m->neg, c->m->rbuf, c->rhave, out, sizeof(out), &olen);
    if (c->m->neg.state == UIW_MPA_S_REJECTED && olen) {
        uiw_dbg(1, "cm: rejecting incoming connection: %s", c->m->neg.why ? c->m->neg.why : "");
        if (conn_send(c, out, olen) < 0)
            return passive_drop(c, "cannot send the Reject");
        (void)shutdown(c->fd, SHUT_WR);
        /* watched for the initiator's close (drain): level-triggered again */
        if (uiw_progress_mod(c->fd, EPOLLIN, conn_io_cb, c) < 0)
            return passive_drop(c, "cannot watch the socket");
        c->state = UIW_CS_REJECTED;
        timer_arm(c, c->timeout_ms);
        return false;
    }
    if (c->m->neg.state != UIW_MPA_S_DONE) {
        /* An enhanced (revision 2) Request to our revision 1 policy: RFC
         * 6581 §10 has us close; a reset, as RNICs answer it, is what makes
         * an RNIC initiator try again at revision 1 (docs/ENGINE.md "MPA
         * revision 1 fallback") */
        bool newer = pol.rev == 1 && c->m->neg.peer.enhanced;
        return passive_drop_how(c, c->m->neg.why ? c->m->neg.why : "unusable MPA Request", newer);
    }
    timer_disarm(c);
    /* The ULP decides; the socket stays quiet meanwhile (accept peeks): its
     * one-shot registration fired for this read and stays disarmed, still
     * registered (fd_reg) for uiw_cm_accept's attach to take over. */
    c->state = UIW_CS_REQ_RCVD;
    if (post_connect_request(c) < 0)
        return passive_drop_how(c, "out of memory for its CONNECT_REQUEST", true);
    return false;
}

/* Read the Request. Nothing may follow it before our Reply, so this reads
 * as much as the buffer holds (one recv for the whole Request instead of
 * the header, the rest and a peek) and refuses whatever lies past the
 * frame. c->lock held. Returns as passive_drop. */
static bool passive_read(struct uiw_conn *c)
{
    for (;;) {
        size_t room = sizeof(c->m->rbuf) - c->rhave;
        ssize_t n = rbuf_recv(c, room);
        if (n == -EAGAIN) {
            /* the rest of the Request is to come: arm the one-shot again */
            if (uiw_progress_mod(c->fd, EPOLLIN | EPOLLONESHOT, conn_io_cb, c) < 0)
                return passive_drop(c, "cannot re-arm the socket");
            return false;
        }
        if (n < 0)
            return passive_drop(c, "socket error");
        if (n == 0)
            return passive_drop(c, "peer closed before its MPA Request");
        c->rhave = (uint16_t)(c->rhave + n);
        size_t want = frame_want(c);
        int rc = uiw_mpa_decode(c->m->rbuf, c->rhave < want ? c->rhave : want, UIW_MPA_REQUEST,
                                &c->m->req);
        if (rc == -EAGAIN) {
            if (c->rhave == sizeof(c->m->rbuf))
                return passive_drop(c, "malformed MPA Request");
            continue;
        }
        if (rc < 0)
            return passive_drop(c, "malformed MPA Request");
        if (c->rhave > want)
            return passive_drop(c, "bytes after the MPA Request");
        /* a TCP recv that did not fill its buffer took all there was */
        return passive_request(c, (size_t)n < room);
    }
}

/* ------------------------------------------------------------------------
 * Sockets cm.c keeps after MPA (no QP) or for the close handshake
 * ---------------------------------------------------------------------- */

/* Read and discard until EAGAIN; on EOF/error finish the close. c->lock
 * held, progress thread. Returns as passive_drop (a connection refused by
 * the MPA layer itself is freed here). */
static bool drain(struct uiw_conn *c)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n > 0) {
            uiw_cap_bytes(conn_cap(c), false, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return false;
        int err = n == 0 ? 0 : -errno;
        uint8_t st = c->state;
        if (!c->active && !c->posted)
            return passive_drop(c, "initiator closed after our Reject");
        timer_disarm(c);
        if (st == UIW_CS_ESTABLISHED)
            (void)shutdown(c->fd, SHUT_WR); /* answer the peer's FIN */
        conn_close_fd(c, false);
        c->state = UIW_CS_CLOSED;
        if (st == UIW_CS_ESTABLISHED || st == UIW_CS_DISCONNECTING)
            post(c, UIW_CM_DISCONNECTED, err);
        return false;
    }
}

static void conn_io_cb(void *obj, uint32_t events)
{
    struct uiw_conn *c = obj;
    bool release = false;
    (void)events;
    pthread_mutex_lock(&c->lock);
    switch (c->state) {
    case UIW_CS_CONNECTING:
        active_connected(c);
        break;
    case UIW_CS_WAIT_REP:
        active_read(c);
        break;
    case UIW_CS_WAIT_REQ:
        release = passive_read(c);
        break;
    case UIW_CS_ESTABLISHED:
    case UIW_CS_DISCONNECTING:
    case UIW_CS_REJECTED:
        if (c->fd >= 0 && !c->attached)
            release = drain(c);
        break;
    default:
        break;
    }
    conn_unlock_put(c, release);
}

/* ------------------------------------------------------------------------
 * Aborting an attached connection (timeouts)
 * ---------------------------------------------------------------------- */

/* RST the QP's socket and move the QP to ERR. c->lock held; it is dropped
 * and re-taken (busy). */
static void abort_attached(struct uiw_conn *c)
{
    struct uiw_qp *qp = c->qp;
    if (!qp || !c->attached)
        return;
    busy_enter(c);
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_lock(&qp->lock);
    abort_socket(qp->fd);
    if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET)
        uiw_qp_to_error_locked(qp);
    pthread_mutex_unlock(&qp->lock);
    pthread_mutex_lock(&c->lock);
    busy_leave(c);
}

static void conn_timer_cb(void *obj)
{
    struct uiw_conn *c = obj;
    bool release = false;
    pthread_mutex_lock(&c->lock);
    /* disarmed, or re-armed for a later deadline, since it fired */
    if (!c->timer_on || uiw_timer_pending(&c->timer)) {
        pthread_mutex_unlock(&c->lock);
        return;
    }
    c->timer_on = false;
    if (c->busy && c->state != UIW_CS_DEAD) {
        /* an attach or abort is running without the lock: look again soon */
        timer_arm(c, BUSY_RETRY_MS);
        pthread_mutex_unlock(&c->lock);
        return;
    }
    switch (c->state) {
    case UIW_CS_WAIT_REQ: /* RFC 5044 §7.1.2 rule 8; siw drops silently */
        release = passive_drop(c, "no MPA Request within the timeout");
        break;
    case UIW_CS_WAIT_REP:
        uiw_dbg(1, "cm: no MPA Reply within %u ms", c->timeout_ms);
        active_fail(c, UIW_CM_CONNECT_ERROR, -ETIMEDOUT, true);
        break;
    case UIW_CS_WAIT_RTR:
        uiw_dbg(1, "cm: no RTR within %u ms", c->timeout_ms);
        c->state = UIW_CS_CLOSED;
        abort_attached(c);
        if (c->state != UIW_CS_DEAD)
            post(c, UIW_CM_CONNECT_ERROR, -ETIMEDOUT);
        break;
    case UIW_CS_DISCONNECTING:
        c->state = UIW_CS_CLOSED;
        if (c->attached)
            abort_attached(c);
        else
            conn_close_fd(c, true);
        if (c->state != UIW_CS_DEAD)
            post(c, UIW_CM_DISCONNECTED, -ETIMEDOUT);
        break;
    case UIW_CS_REJECTED:
        if (!c->active && !c->posted) {
            release = passive_drop_how(c, "initiator kept the connection after our Reject", true);
            break;
        }
        conn_close_fd(c, true);
        c->state = UIW_CS_CLOSED;
        break;
    default:
        break;
    }
    conn_unlock_put(c, release);
}

/* ------------------------------------------------------------------------
 * Listeners
 * ---------------------------------------------------------------------- */

/*
 * Descriptor exhaustion. The listening socket is level-triggered: while a
 * connection is pending, every epoll_wait returns it, and an accept4 that
 * fails with EMFILE leaves it pending, so the progress thread would spin
 * (the issue 12 measurement: 9.4 s of CPU in 10 s). The remedies (as libuv
 * and nginx do):
 *  - EMFILE / ENFILE: one reserve descriptor (process-wide, /dev/null) is
 *    closed, the pending connection accepted and reset (its initiator gets
 *    a clean connection failure), the reserve reopened; repeated while
 *    connections are pending, so the backlog empties and the listener goes
 *    quiet. A later accept succeeds by itself once descriptors are free.
 *  - ENOBUFS / ENOMEM, or no reserve: the listener is disarmed and re-armed
 *    by a timer with back-off (10 ms doubling to 1 s, reset by a successful
 *    accept); pending connections wait in the backlog meanwhile.
 * The failure is logged at most once per 5 s with the count since.
 * Only the progress thread touches reserve_fd after uiw_cm_listen opened it.
 */
static int reserve_fd = -1;
static pthread_once_t reserve_once = PTHREAD_ONCE_INIT;
static uint64_t accept_log_ns;
static unsigned long accept_fail_count, accept_shed_count, accept_evict_count;

static void reserve_open(void)
{
    reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void accept_log(int err)
{
    uint64_t now = uiw_now_ns();
    accept_fail_count++;
    if (accept_log_ns && now - accept_log_ns < ACCEPT_LOG_NS)
        return;
    accept_log_ns = now ? now : 1;
    uiw_log("cm: accept: %s (%lu failures, %lu new connections reset, %lu waiting for their MPA "
            "Request closed to make room so far; next report in 5 s at the earliest)",
            strerror(err), accept_fail_count, accept_shed_count, accept_evict_count);
}

static void listener_cb(void *obj, uint32_t events);

static void listener_rearm(void *obj)
{
    struct uiw_listener *l = obj;
    (void)uiw_progress_mod(l->fd, EPOLLIN, listener_cb, l);
}

/* Stop watching l->fd for a while (progress thread). */
static void listener_backoff(struct uiw_listener *l)
{
    l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : ACCEPT_BACKOFF_MIN;
    if (l->backoff_ms > ACCEPT_BACKOFF_MAX)
        l->backoff_ms = ACCEPT_BACKOFF_MAX;
    if (uiw_progress_mod(l->fd, 0, listener_cb, l) == 0)
        uiw_timer_arm(&l->timer, l->backoff_ms);
    else {
        struct timespec ts = {0, (long)l->backoff_ms * 1000000L};
        nanosleep(&ts, NULL); /* cannot disarm: at least do not spin */
    }
}

/* At the descriptor limit, the oldest connection of this listener still
 * waiting for its MPA Request after 200 ms (silent or trickling: what a
 * flood is made of; a legitimate initiator sends its Request at once, and
 * the age keeps a busy progress thread from evicting one whose Request it
 * has not read yet) is closed to make room for the new one, so that silent connections cannot keep
 * clients out until the MPA timeout frees them. Progress thread, no lock held. True if one was
 * closed. Lock order elsewhere is c->lock -> cm_list_lock, hence the trylock. */
#define EVICT_MIN_AGE_NS (200ull * 1000 * 1000)
static bool evict_waiting(struct uiw_listener *l)
{
    struct uiw_conn *victim = NULL;
    uint64_t now = uiw_now_ns();
    pthread_mutex_lock(&cm_list_lock);
    for (struct uiw_conn *c = l->conns; c; c = c->lnext) {
        /* the list is newest first: the last candidate is the oldest */
        if (pthread_mutex_trylock(&c->lock) != 0)
            continue;
        if (c->state == UIW_CS_WAIT_REQ && !c->busy && c->fd >= 0 &&
            now - c->born_ns >= EVICT_MIN_AGE_NS) {
            if (victim)
                pthread_mutex_unlock(&victim->lock);
            victim = c;
        } else {
            pthread_mutex_unlock(&c->lock);
        }
    }
    if (victim)
        conn_get(victim);
    pthread_mutex_unlock(&cm_list_lock);
    if (!victim)
        return false;
    bool release = passive_drop_how(
        victim, "descriptor limit: the oldest connection without an MPA Request makes room", true);
    conn_unlock_put(victim, release);
    conn_put(victim);
    accept_evict_count++;
    return true;
}

/* accept4 failed with err for want of a resource. True: try again now. */
static bool listener_exhausted(struct uiw_listener *l, int err)
{
    accept_log(err);
    if ((err == EMFILE || err == ENFILE) && evict_waiting(l))
        return true;
    if ((err == EMFILE || err == ENFILE) && reserve_fd >= 0) {
        close(reserve_fd);
        reserve_fd = -1;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int e = fd < 0 ? errno : 0;
        if (fd >= 0) {
            close_abort(fd);
            accept_shed_count++;
        }
        reserve_open();
        if (fd >= 0 && reserve_fd >= 0)
            return true;
        if (e == EAGAIN || e == EWOULDBLOCK)
            return false; /* the backlog is empty */
    } else if (err == EMFILE || err == ENFILE) {
        reserve_open(); /* lost earlier: try to get it back */
    }
    listener_backoff(l);
    return false;
}

static void listener_cb(void *obj, uint32_t events)
{
    struct uiw_listener *l = obj;
    (void)events;
    for (unsigned n = 0;; n++) {
        if (n == 1024) {
            /* let other sockets and timers run; the level-triggered
             * listener reports the rest at once */
            return;
        }
        struct sockaddr_storage peer;
        socklen_t plen = sizeof(peer);
        int fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int e = errno;
            if (e == EINTR || e == ECONNABORTED)
                continue;
            if (e == EAGAIN || e == EWOULDBLOCK)
                return;
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                if (listener_exhausted(l, e))
                    continue;
                return;
            }
            /* Linux passes pending network errors of the new connection
             * (ENETDOWN, EPROTO, EHOSTUNREACH...): that one is gone, the
             * next may work; anything else: back off rather than spin. */
            accept_log(e);
            if (e == ENETDOWN || e == EPROTO || e == ENOPROTOOPT || e == EHOSTDOWN || e == ENONET ||
                e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH || e == EPERM)
                continue;
            listener_backoff(l);
            return;
        }
        l->backoff_ms = 0;
        int err = 0;
        struct uiw_conn *c = conn_new(l->ctx, l->ch, l->user, false, &err);
        if (!c) {
            /* invisible to the ULP; the initiator gets a reset */
            accept_log(-err);
            close_abort(fd);
            accept_shed_count++;
            continue;
        }
        c->fd = fd;
        c->born_ns = uiw_now_ns(); /* its socket options: the listener's */
        /* The peer from accept4, the local address from a listener bound
         * to one IPv4 address (a wildcard one asks the socket): no
         * getpeername and, mostly, no getsockname per connection. */
        memcpy(&c->peer, &peer, plen < sizeof(peer) ? plen : sizeof(peer));
        if (l->addr.ss_family == AF_INET &&
            ((const struct sockaddr_in *)&l->addr)->sin_addr.s_addr != htonl(INADDR_ANY))
            c->local = l->addr;
        else {
            socklen_t ll = sizeof(c->local);
            (void)getsockname(fd, (struct sockaddr *)&c->local, &ll);
        }
        c->state = UIW_CS_WAIT_REQ;
        pthread_mutex_lock(&cm_list_lock);
        c->listener = l;
        c->lnext = l->conns;
        if (c->lnext)
            c->lnext->lpprev = &c->lnext;
        c->lpprev = &l->conns;
        l->conns = c;
        pthread_mutex_unlock(&cm_list_lock);
        pthread_mutex_lock(&c->lock);
        /* One-shot: the event that brings the Request disarms it, so the
         * socket stays quiet while the ULP decides without an EPOLL_CTL_DEL,
         * and the QP's attach turns it into its own by one MOD (no ADD);
         * a Request that comes in pieces re-arms it (passive_read). */
        int rc = uiw_progress_add(fd, EPOLLIN | EPOLLONESHOT, conn_io_cb, c);
        if (rc == 0) {
            c->fd_reg = true;
            timer_arm(c, c->timeout_ms);
            pthread_mutex_unlock(&c->lock);
            continue;
        }
        accept_log(-rc);
        bool owned = passive_drop_how(c, "cannot register with the progress thread", true);
        pthread_mutex_unlock(&c->lock);
        if (owned)
            conn_put(c);
    }
}

/* The arguments listen and connect share: an IP address, a channel and
 * somewhere to put the result. */
static int cm_args(const struct sockaddr *sa, const struct uiw_cm_channel *ch, const void *out)
{
    if (!sa || !ch || !out)
        return -EINVAL;
    return sa->sa_family == AF_INET || sa->sa_family == AF_INET6 ? 0 : -EAFNOSUPPORT;
}

UIW_EXPORT int uiw_cm_listen(struct ibv_context *ibctx, const struct sockaddr *addr, int backlog,
                             struct uiw_cm_channel *ch, void *user, struct uiw_listener **out)
{
    return uiw_cm_listen_af(ibctx, addr, backlog, -1, ch, user, out);
}

UIW_EXPORT int uiw_cm_listen_af(struct ibv_context *ibctx, const struct sockaddr *addr, int backlog,
                                int v6only, struct uiw_cm_channel *ch, void *user,
                                struct uiw_listener **out)
{
    struct uiw_context *ctx = ibctx ? to_uctx(ibctx) : NULL;
    int rc = cm_args(addr, ch, out);

    if (rc)
        return rc;
    struct uiw_listener *l = calloc(1, sizeof(*l));
    if (!l)
        return -ENOMEM;
    l->fd = uiw_kernel_socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        int e = -errno;
        free(l);
        return e;
    }
    /* TCP_NODELAY, keepalive and TCP_USER_TIMEOUT: Linux copies them to
     * every accepted socket, which then needs no calls of its own */
    set_sockopts(l->fd, 0, true);
    if (v6only >= 0 && addr->sa_family == AF_INET6)
        (void)setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
    socklen_t len = sizeof(l->addr);
    /* The TCP backlog is not the program's: the progress thread accepts
     * every connection at once and runs its MPA exchange, so what waits
     * for the program (rdma_accept) are CONNECT_REQUEST events, not TCP
     * connections. A small TCP backlog (programs pass 0, 1 or 10) only
     * drops the SYNs of a burst, each then retried a second later
     * (cmtime -c 1000 with 128: connect 1.46 s, the slowest 1.41 s). The
     * kernel caps it at net.core.somaxconn. */
    (void)backlog;
    if (bind(l->fd, addr, sa_len(addr)) < 0 || listen(l->fd, 65535) < 0 ||
        getsockname(l->fd, (struct sockaddr *)&l->addr, &len) < 0)
        rc = -errno;
    l->ch = ch;
    l->ctx = ctx;
    l->user = user;
    if (rc == 0)
        rc = uiw_timer_init(&l->timer, listener_rearm, l);
    if (rc == 0) {
        pthread_once(&reserve_once, reserve_open);
        rc = uiw_progress_add(l->fd, EPOLLIN, listener_cb, l);
        if (rc < 0)
            uiw_timer_fini(&l->timer);
    }
    if (rc < 0) {
        close(l->fd);
        free(l);
        return rc;
    }
    l->reg = true;
    *out = l;
    return 0;
}

UIW_EXPORT int uiw_cm_listener_addr(const struct uiw_listener *l, struct sockaddr_storage *addr)
{
    if (!l || !addr)
        return -EINVAL;
    *addr = l->addr;
    return 0;
}

static void conn_kill(struct uiw_conn *c);

UIW_EXPORT void uiw_cm_listener_destroy(struct uiw_listener *l)
{
    if (!l)
        return;
    /* the timer first: its callback re-arms the fd; a listener callback
     * still running cannot arm it any more (arm after fini is ignored) */
    uiw_timer_fini(&l->timer);
    if (l->reg)
        uiw_progress_del(l->fd);
    pthread_mutex_lock(&cm_list_lock);
    l->dying = true;
    struct uiw_conn *list = l->conns;
    l->conns = NULL;
    for (struct uiw_conn *c = list; c; c = c->lnext)
        c->listener = NULL;
    pthread_mutex_unlock(&cm_list_lock);
    while (list) {
        struct uiw_conn *c = list;
        list = c->lnext;
        c->lnext = NULL;
        /* Not yet handed to the ULP: ours to destroy. */
        if (uiw_cm_claim_unpopped(c->ch, c))
            conn_kill(c);
    }
    close(l->fd);
    free(l);
}

/* ------------------------------------------------------------------------
 * Active connect
 * ---------------------------------------------------------------------- */

/* Give the QP to c (qp->conn) with a reference. */
static int conn_take_qp(struct uiw_conn *c, struct uiw_qp *qp)
{
    pthread_mutex_lock(&qp->lock);
    if (qp->conn) {
        pthread_mutex_unlock(&qp->lock);
        return -EBUSY;
    }
    qp->conn = c;
    pthread_mutex_unlock(&qp->lock);
    uiw_qp_get(qp);
    return 0;
}

/* Undo conn_take_qp. No c->lock held. */
static void conn_drop_qp(struct uiw_conn *c, struct uiw_qp *qp)
{
    pthread_mutex_lock(&qp->lock);
    if (qp->conn == c)
        qp->conn = NULL;
    pthread_mutex_unlock(&qp->lock);
    uiw_qp_put(qp);
}

UIW_EXPORT int uiw_cm_connect(struct ibv_qp *ibqp, struct sockaddr *src, const struct sockaddr *dst,
                              const struct uiw_conn_param *p, struct uiw_cm_channel *ch, void *user,
                              struct uiw_conn **out)
{
    struct uiw_qp *qp = ibqp ? to_uqp(ibqp) : NULL;
    int rc0 = cm_args(dst, ch, out);

    if (rc0)
        return rc0;
    if (src && src->sa_family != dst->sa_family)
        return -EINVAL;
    const struct uiw_config *cfg = uiw_config();
    uint16_t pd_len = p ? p->private_data_len : 0;
    if (pd_len && !p->private_data)
        return -EINVAL;
    if (pd_len > UIW_CM_MAX_PD(cfg->mpa_rev == 1 ? 1 : 2))
        return -EMSGSIZE;
    if (!qp && cfg->p2p)
        return -EINVAL; /* nobody to send the RTR */

    int rc = 0;
    struct uiw_conn *c = conn_new(qp ? qp->ctx : NULL, ch, user, true, &rc);
    if (!c)
        return rc;
    if (pd_len)
        memcpy(c->m->pd, p->private_data, pd_len);
    c->pd_len = pd_len;
    unsigned ird = p ? p->ird : UIW_MPA_DEFAULT_IRD, ord = p ? p->ord : UIW_MPA_DEFAULT_ORD;
    uiw_mpa_policy pol;
    make_policy(&pol, ird, ord, c->m->pd, pd_len);
    rc = uiw_mpa_neg_start_initiator(&c->m->neg, &pol, c->m->txframe, sizeof(c->m->txframe));
    if (rc < 0) {
        conn_put(c);
        return rc;
    }
    c->txframe_len = (uint16_t)rc;
    if (p)
        c->param = *p;
    c->param.before_events = NULL; /* this call's (a revision 1 retry is not one) */
    c->param.private_data = NULL;
    c->param.private_data_len = pd_len;
    c->param.ird = (uint16_t)ird;
    c->param.ord = (uint16_t)ord;

    if (qp) {
        rc = conn_take_qp(c, qp);
        if (rc < 0) {
            conn_put(c);
            return rc;
        }
        c->qp = qp;
        c->had_qp = true;
    }
    memcpy(&c->peer, dst, sa_len(dst));
    rc = active_socket(c, src);
    if (rc < 0)
        goto fail;

    /* c is nobody else's until it posts an event or registers its socket
     * below: connect() (on loopback the whole handshake runs in it) and
     * getsockname need no lock, and run before p->before_events. */
    int cerr = connect(c->fd, dst, sa_len(dst)) < 0 && errno != EINPROGRESS ? errno : 0;
    if (!cerr && src && !sa_port(src)) {
        /* the port connect() chose, for the caller (rdma_get_src_port) */
        struct sockaddr_storage l;
        socklen_t ll = sizeof(l);

        if (getsockname(c->fd, (struct sockaddr *)&l, &ll) == 0 && l.ss_family == src->sa_family) {
            memcpy(src, &l, sa_len(src));
            c->local = l; /* final once connect() has begun: not asked again */
        }
    }
    if (p && p->before_events)
        p->before_events(user, c);
    pthread_mutex_lock(&c->lock);
    c->state = UIW_CS_CONNECTING;
    if (cerr) {
        fill_addrs(c);
        c->state = UIW_CS_CLOSED;
        close(c->fd);
        c->fd = -1;
        post(c, UIW_CM_UNREACHABLE, -cerr);
        pthread_mutex_unlock(&c->lock);
        *out = c;
        return 0;
    }
    /* On loopback connect() has run the whole handshake: the Request goes
     * from this thread and the progress thread waits for the Reply only,
     * instead of being woken for EPOLLOUT first (a wake-up less per
     * connection, docs/PERFORMANCE.md 2026-11-28 "stop 32"). Elsewhere the
     * socket has no peer yet and EPOLLOUT brings active_connected. */
    bool sent = false;
    socklen_t pl = sizeof(c->peer);
    if (getpeername(c->fd, (struct sockaddr *)&c->peer, &pl) == 0) {
        if (!c->local.ss_family) {
            socklen_t ll = sizeof(c->local);
            (void)getsockname(c->fd, (struct sockaddr *)&c->local, &ll);
        }
        rc = conn_send(c, c->m->txframe, c->txframe_len);
        if (rc < 0) {
            c->state = UIW_CS_CLOSED;
            close_abort(c->fd);
            c->fd = -1;
            post(c, UIW_CM_CONNECT_ERROR, rc);
            pthread_mutex_unlock(&c->lock);
            *out = c;
            return 0;
        }
        c->state = UIW_CS_WAIT_REP;
        sent = true;
    }
    c->fd_reg = true; /* before the first callback can run */
    pthread_mutex_unlock(&c->lock);
    /* level-triggered: a Reply already there is reported at once */
    rc = uiw_progress_add(c->fd, sent ? EPOLLIN : EPOLLOUT, conn_io_cb, c);
    if (rc < 0) {
        c->fd_reg = false; /* nothing can have run */
        goto fail;
    }
    if (sent) {
        pthread_mutex_lock(&c->lock);
        if (c->state == UIW_CS_WAIT_REP) /* no Reply yet */
            timer_arm(c, c->timeout_ms); /* RFC 5044 §7.1.2 rule 10 */
        pthread_mutex_unlock(&c->lock);
    }
    *out = c;
    return 0;

fail:
    if (c->qp)
        conn_drop_qp(c, c->qp);
    c->qp = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    conn_put(c);
    return rc;
}

/* ------------------------------------------------------------------------
 * Accept / reject
 * ---------------------------------------------------------------------- */

/* Register cm.c's socket (c->fd) with the progress thread from a user
 * thread, without holding c->lock (a callback may run at once; fd_reg is
 * set first so that it can unregister the socket itself). busy held. */
static void watch_fd(struct uiw_conn *c)
{
    pthread_mutex_lock(&c->lock);
    int fd = c->fd;
    bool had = c->fd_reg; /* the responder's one-shot, disarmed since the Request */
    c->fd_reg = fd >= 0;
    pthread_mutex_unlock(&c->lock);
    if (fd < 0)
        return;
    int rc = had ? uiw_progress_mod(fd, EPOLLIN, conn_io_cb, c)
                 : uiw_progress_add(fd, EPOLLIN, conn_io_cb, c);
    if (rc < 0) {
        pthread_mutex_lock(&c->lock);
        c->fd_reg = had; /* a failed MOD leaves it registered */
        uiw_log("cm: cannot watch the socket: %d", rc);
        pthread_mutex_unlock(&c->lock);
    }
}

/* Begin accept/reject: REQ_RCVD -> ACCEPTING with busy held. */
static int passive_begin(struct uiw_conn *c, uint16_t pd_len, const void *pd)
{
    if (!c || (pd_len && !pd))
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    if (c->state != UIW_CS_REQ_RCVD || c->active) {
        pthread_mutex_unlock(&c->lock);
        return -EINVAL;
    }
    /* The Reply is enhanced exactly when the Request was (RFC 6581 §10). */
    if (pd_len > UIW_CM_MAX_PD(c->m->req.enhanced ? 2 : 1)) {
        pthread_mutex_unlock(&c->lock);
        return -EMSGSIZE;
    }
    c->state = UIW_CS_ACCEPTING;
    busy_enter(c);
    if (pd_len)
        memcpy(c->m->pd, pd, pd_len);
    c->pd_len = pd_len;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* End of a failed accept/reject: close the socket, report nothing. */
static int passive_abort(struct uiw_conn *c, int err, bool abortive)
{
    pthread_mutex_lock(&c->lock);
    /* registered but disarmed (one-shot, fired for the Request): its
     * callback cannot run, so unregistering here cannot wait for it */
    conn_close_fd(c, abortive);
    if (c->state != UIW_CS_DEAD)
        c->state = UIW_CS_CLOSED;
    busy_leave(c);
    pthread_mutex_unlock(&c->lock);
    return err;
}

/* Anything from the initiator before our Reply is a protocol error. */
static int peek_quiet(int fd)
{
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0)
        return -EPROTO;
    if (n == 0)
        return -ECONNRESET;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return 0;
    return -errno;
}

UIW_EXPORT int uiw_cm_accept(struct uiw_conn *c, struct ibv_qp *ibqp,
                             const struct uiw_conn_param *p, void *user)
{
    struct uiw_qp *qp = ibqp ? to_uqp(ibqp) : NULL;

    uint16_t pd_len = p ? p->private_data_len : 0;
    int rc = passive_begin(c, pd_len, p ? p->private_data : NULL);
    if (rc < 0)
        return rc;
    bool p2p = c->m->req.enhanced && c->m->req.p2p;
    if (!qp && p2p) {
        pthread_mutex_lock(&c->lock);
        c->state = UIW_CS_REQ_RCVD;
        busy_leave(c);
        pthread_mutex_unlock(&c->lock);
        return -EINVAL; /* the RTR needs a QP */
    }
    if (qp) {
        rc = conn_take_qp(c, qp);
        if (rc < 0) {
            pthread_mutex_lock(&c->lock);
            c->state = UIW_CS_REQ_RCVD;
            busy_leave(c);
            pthread_mutex_unlock(&c->lock);
            return rc;
        }
        pthread_mutex_lock(&c->lock);
        c->qp = qp;
        c->had_qp = true;
        c->ctx = qp->ctx;
        pthread_mutex_unlock(&c->lock);
    }
    rc = peek_quiet(c->fd);
    if (rc < 0)
        return passive_abort(c, rc, true);
    if (p && p->peer_timeout_ms)
        set_dead_peer(c->fd, p->peer_timeout_ms); /* the ULP's, instead of the listener's */
    set_tos(c->fd, c->local.ss_family, p);

    uiw_mpa_policy pol;
    uint8_t out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;
    make_policy(&pol, p ? p->ird : UIW_MPA_DEFAULT_IRD, p ? p->ord : UIW_MPA_DEFAULT_ORD, c->m->pd,
                c->pd_len);
    uiw_mpa_neg_start_responder(&c->m->neg, &pol);
    (void)uiw_mpa_neg_feed(&c->m->neg, c->m->rbuf, c->rhave, out, sizeof(out), &olen);
    if (c->m->neg.state == UIW_MPA_S_REJECTED && olen) {
        /* The ULP's values made the MPA layer refuse (e.g. a Read RTR and
         * IRD 0): the initiator gets the Reject, the caller the reason. */
        uiw_log("cm: accept refused by the MPA negotiation: %s",
                c->m->neg.why ? c->m->neg.why : "");
        (void)conn_send(c, out, olen);
        return passive_abort(c, c->m->neg.error ? c->m->neg.error : -ECONNREFUSED, false);
    }
    if (c->m->neg.state != UIW_MPA_S_DONE)
        return passive_abort(c, c->m->neg.error ? c->m->neg.error : -EPROTO, true);
    rc = conn_send(c, out, olen);
    if (rc < 0)
        return passive_abort(c, rc, true);

    pthread_mutex_lock(&c->lock);
    c->user = user;
    if (!qp) {
        /* MPA only: watch the socket for the peer's FIN. */
        c->state = UIW_CS_ESTABLISHED;
        post(c, UIW_CM_ESTABLISHED, 0);
        conn_mpa_done(c);
        pthread_mutex_unlock(&c->lock);
        watch_fd(c);
        pthread_mutex_lock(&c->lock);
        busy_leave(c);
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    /* With P2P, ESTABLISHED comes with the first FPDU (uiw_cm_first_fpdu),
     * which may arrive as soon as the socket is attached. */
    if (p2p) {
        c->state = UIW_CS_WAIT_RTR;
        timer_arm(c, c->timeout_ms);
    }
    int fd = c->fd;
    uiw_mpa_result res = c->m->neg.result;
    struct sockaddr_storage local = c->local, peer = c->peer;
    cap_give(c, qp);
    pthread_mutex_unlock(&c->lock);

    /* our socket: non-blocking, TCP_NODELAY; its addresses known */
    rc = uiw_qp_attach_socket_hold(qp, fd, &res, 0, &local, &peer);

    pthread_mutex_lock(&c->lock);
    if (rc < 0)
        cap_take_back(c, qp);
    if (rc < 0) {
        uiw_log("cm: attaching the QP failed: %d", rc);
        timer_disarm(c);
        conn_close_fd(c, true);
        if (c->state != UIW_CS_DEAD)
            c->state = UIW_CS_CLOSED;
        busy_leave(c);
        pthread_mutex_unlock(&c->lock);
        return rc;
    }
    c->attached = true;
    c->fd = -1;        /* the QP's now */
    c->fd_reg = false; /* and so is the registration (attach's MOD) */
    if (c->state == UIW_CS_ACCEPTING) {
        c->state = UIW_CS_ESTABLISHED;
        post(c, UIW_CM_ESTABLISHED, 0);
        conn_mpa_done(c);
        if (c->early_close) {
            c->state = UIW_CS_CLOSED;
            post(c, UIW_CM_DISCONNECTED, c->early_err);
        }
    }
    busy_leave(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

UIW_EXPORT int uiw_cm_reject(struct uiw_conn *c, const void *pd, uint16_t pd_len)
{
    int rc = passive_begin(c, pd_len, pd);
    if (rc < 0)
        return rc;
    uiw_mpa_policy pol;
    uint8_t out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;
    make_policy(&pol, UIW_MPA_DEFAULT_IRD, UIW_MPA_DEFAULT_ORD, c->m->pd, c->pd_len);
    pol.responder_rejects = true;
    uiw_mpa_neg_start_responder(&c->m->neg, &pol);
    (void)uiw_mpa_neg_feed(&c->m->neg, c->m->rbuf, c->rhave, out, sizeof(out), &olen);
    if (c->m->neg.state != UIW_MPA_S_REJECTED || !olen)
        return passive_abort(c, c->m->neg.error ? c->m->neg.error : -EPROTO, true);
    rc = conn_send(c, out, olen);
    if (rc < 0)
        return passive_abort(c, rc, true);
    /* RFC 5044 §7.1.2 rule 2 leaves TCP open for the ULP; we close it as
     * siw does: FIN now, the descriptor once the initiator has closed. */
    (void)shutdown(c->fd, SHUT_WR);
    pthread_mutex_lock(&c->lock);
    bool watch = c->state != UIW_CS_DEAD;
    if (watch) {
        c->state = UIW_CS_REJECTED;
        timer_arm(c, c->timeout_ms);
    }
    pthread_mutex_unlock(&c->lock);
    if (watch)
        watch_fd(c);
    pthread_mutex_lock(&c->lock);
    busy_leave(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* ------------------------------------------------------------------------
 * Teardown
 * ---------------------------------------------------------------------- */

UIW_EXPORT int uiw_cm_disconnect(struct uiw_conn *c)
{
    if (!c)
        return -EINVAL;
    pthread_mutex_lock(&c->lock);
    switch (c->state) {
    case UIW_CS_CLOSED:
    case UIW_CS_DISCONNECTING:
    case UIW_CS_REJECTED:
        pthread_mutex_unlock(&c->lock);
        return 0;
    case UIW_CS_ESTABLISHED:
    case UIW_CS_WAIT_RTR:
        break;
    default:
        pthread_mutex_unlock(&c->lock);
        return -ENOTCONN;
    }
    c->state = UIW_CS_DISCONNECTING;
    timer_arm(c, c->timeout_ms);
    if (!c->attached) {
        /* MPA only: our socket, already watched by drain(). */
        (void)shutdown(c->fd, SHUT_WR);
        pthread_mutex_unlock(&c->lock);
        return 0;
    }
    struct uiw_qp *qp = c->qp;
    busy_enter(c);
    pthread_mutex_unlock(&c->lock);
    if (qp) {
        pthread_mutex_lock(&qp->lock);
        /* no first-FPDU wake-up after the FIN */
        uiw_qp_tx_end_wakes_locked(qp);
        if (qp->fd >= 0)
            (void)shutdown(qp->fd, SHUT_WR);
        /* Flush: the QP sends nothing after our FIN. The data path reports
         * the peer's FIN through uiw_qp_llp_closed_locked. */
        if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET)
            uiw_qp_to_error_locked(qp);
        pthread_mutex_unlock(&qp->lock);
    }
    pthread_mutex_lock(&c->lock);
    busy_leave(c);
    pthread_mutex_unlock(&c->lock);
    return 0;
}

/* Destroy c (the ULP's destroy, or a listener's for a connection the ULP
 * never saw). No locks held. */
static void conn_kill(struct uiw_conn *c)
{
    pthread_mutex_lock(&c->lock);
    uint8_t prev = c->state;
    c->state = UIW_CS_DEAD; /* callbacks that get the lock from now on do nothing */
    wait_idle(c);
    bool fd_reg = c->fd_reg, attached = c->attached;
    struct uiw_qp *qp = c->qp;
    c->fd_reg = false;
    c->timer_on = false;
    c->qp = NULL;
    pthread_mutex_unlock(&c->lock);

    if (fd_reg)
        uiw_progress_del(c->fd);
    uiw_timer_fini(&c->timer); /* waits for a running callback (it finds DEAD) */

    pthread_mutex_lock(&cm_list_lock);
    struct uiw_listener *l = c->listener;
    if (l) {
        lconn_unlink(c);
        c->listener = NULL;
    }
    pthread_mutex_unlock(&cm_list_lock);
    (void)uiw_cm_purge(c->ch, c);

    bool up = prev == UIW_CS_ESTABLISHED || prev == UIW_CS_WAIT_RTR || prev == UIW_CS_ACCEPTING ||
              prev == UIW_CS_DISCONNECTING;
    if (qp) {
        pthread_mutex_lock(&qp->lock);
        if (qp->conn == c)
            qp->conn = NULL;
        if (attached && up) {
            /* like close(): FIN, or RST if received bytes are unread */
            if (prev != UIW_CS_DISCONNECTING)
                shutdown_like_close(qp->fd);
            if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET)
                uiw_qp_to_error_locked(qp);
        }
        pthread_mutex_unlock(&qp->lock);
        uiw_qp_put(qp);
    }
    if (c->fd >= 0) {
        bool graceful =
            prev == UIW_CS_CLOSED || prev == UIW_CS_REJECTED || prev == UIW_CS_DISCONNECTING;
        if (graceful)
            close(c->fd);
        else
            close_abort(c->fd);
        c->fd = -1;
    }
    conn_put(c);
}

UIW_EXPORT void uiw_cm_conn_destroy(struct uiw_conn *c)
{
    if (c)
        conn_kill(c);
}

int uiw_cm_conn_addr(const struct uiw_conn *c, struct sockaddr_storage *local,
                     struct sockaddr_storage *peer)
{
    if (!c)
        return -EINVAL;
    if (local)
        *local = c->local;
    if (peer)
        *peer = c->peer;
    return 0;
}

/* ------------------------------------------------------------------------
 * Hooks for the data path and the QP objects
 * ---------------------------------------------------------------------- */

void uiw_cm_first_fpdu(struct uiw_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    if (c->state == UIW_CS_WAIT_RTR) {
        timer_disarm(c);
        c->state = UIW_CS_ESTABLISHED;
        post(c, UIW_CM_ESTABLISHED, 0);
        conn_mpa_done(c);
    }
    pthread_mutex_unlock(&c->lock);
}

void uiw_cm_llp_closed(struct uiw_conn *c, int err)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    /* qp->lock is held by the caller: c->qp->fd is stable. */
    int fd = c->qp ? c->qp->fd : -1;
    switch (c->state) {
    case UIW_CS_ESTABLISHED:
        if (fd >= 0)
            (void)shutdown(fd, SHUT_WR); /* answer the peer's FIN */
        timer_disarm(c);
        c->state = UIW_CS_CLOSED;
        post(c, UIW_CM_DISCONNECTED, err);
        break;
    case UIW_CS_DISCONNECTING:
        timer_disarm(c);
        c->state = UIW_CS_CLOSED;
        post(c, UIW_CM_DISCONNECTED, err);
        break;
    case UIW_CS_WAIT_RTR:
        if (fd >= 0)
            (void)shutdown(fd, SHUT_WR);
        timer_disarm(c);
        c->state = UIW_CS_CLOSED;
        post(c, UIW_CM_CONNECT_ERROR, err ? err : -ECONNRESET);
        break;
    case UIW_CS_ACCEPTING: /* still attaching: reported right after ESTABLISHED */
        if (fd >= 0)
            (void)shutdown(fd, SHUT_WR);
        c->early_close = true;
        c->early_err = err;
        break;
    default:
        break;
    }
    pthread_mutex_unlock(&c->lock);
}

void uiw_cm_qp_destroyed(struct uiw_qp *qp)
{
    if (!qp)
        return;
    pthread_mutex_lock(&qp->lock);
    struct uiw_conn *c = qp->conn;
    if (c)
        conn_get(c);
    pthread_mutex_unlock(&qp->lock);
    if (!c)
        return;

    pthread_mutex_lock(&c->lock);
    wait_idle(c);
    if (c->qp != qp || c->state == UIW_CS_DEAD) {
        pthread_mutex_unlock(&c->lock);
        conn_put(c);
        return;
    }
    c->qp = NULL;
    uint8_t st = c->state;
    enum uiw_cm_event_type ev = 0;
    int status = 0;
    if (st == UIW_CS_ESTABLISHED || st == UIW_CS_DISCONNECTING) {
        ev = UIW_CM_DISCONNECTED;
        status = st == UIW_CS_DISCONNECTING ? 0 : -ECONNABORTED;
    } else if (st == UIW_CS_WAIT_RTR) {
        ev = UIW_CM_CONNECT_ERROR;
        status = -ENODEV;
    }
    if (ev) {
        timer_disarm(c);
        c->state = UIW_CS_CLOSED;
    }
    busy_enter(c);
    pthread_mutex_unlock(&c->lock);

    pthread_mutex_lock(&qp->lock);
    if (qp->conn == c)
        qp->conn = NULL;
    /* After rdma_disconnect (our FIN is out) ibv_destroy_qp discards what
     * the peer still sends until its FIN arrives (qp.c close_after_peer_fin,
     * bounded), and only then closes, so that the orderly end is not turned
     * into an RST that can cost the peer data it has not read yet
     * (rsockets' close: disconnect, then destroy, while the peer still sends
     * credit updates). A QP destroyed before any disconnect keeps the rule
     * below. */
    if (st == UIW_CS_DISCONNECTING)
        qp->close_drain = true;
    /* The QP closes the socket with a plain close(), as Linux siw's QP
     * destroy does (sock_release): FIN when everything received was read,
     * RST when bytes are left unread (the kernel's rule). An RST right
     * after our last message makes the peer fail its own in-flight work
     * (siw completes it with a local QP error), which perftest's last
     * handshake runs into (docs/INTEROP.md). */
    pthread_mutex_unlock(&qp->lock);
    uiw_qp_put(qp);

    pthread_mutex_lock(&c->lock);
    busy_leave(c);
    if (ev && c->state != UIW_CS_DEAD)
        post(c, ev, status);
    pthread_mutex_unlock(&c->lock);
    conn_put(c);
}

UIW_EXPORT struct ibv_qp *uiw_cm_qp_by_num(struct ibv_context *ctx, uint32_t qp_num)
{
    struct uiw_qp *qp = ctx ? uiw_qp_by_num(ctx, qp_num) : NULL;

    return qp ? &qp->ibqp : NULL;
}

UIW_EXPORT void uiw_cm_qp_hold(struct ibv_qp *qp)
{
    uiw_qp_get(to_uqp(qp));
}

UIW_EXPORT void uiw_cm_qp_release(struct ibv_qp *qp)
{
    uiw_qp_put(to_uqp(qp));
}

UIW_EXPORT bool uiw_cm_conn_unpolled(struct uiw_conn *c)
{
    struct uiw_qp *qp;
    bool r;

    pthread_mutex_lock(&c->lock);
    qp = c->qp; /* attached: alive (ibv_destroy_qp detaches it first) */
    if (qp)
        uiw_qp_get(qp);
    pthread_mutex_unlock(&c->lock);
    if (!qp)
        return false;
    r = uiw_cq_holds_success(qp->scq, qp->ibqp.qp_num) ||
        (qp->rcq != qp->scq && uiw_cq_holds_success(qp->rcq, qp->ibqp.qp_num));
    uiw_qp_put(qp);
    return r;
}
