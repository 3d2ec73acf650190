/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the data path's two directions share (as Linux siw's siw_qp.c):
 * attaching a connected socket to a QP, the socket's event dispatch
 * (readable -> qp_rx.c, writable -> qp_tx.c), the end of the stream (EOF,
 * RST), entering the error state, sending a Terminate (RFC 5040 §5.4), and
 * the mappings both directions use (work request -> completion opcode,
 * memory check -> Terminate code). qp_tx.c is the transmitter, qp_rx.c the
 * receiver; qp.c owns the QP object, its state machine and posting.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dp_int.h"

/* ------------------------------------------------------------------------
 * Per-thread staging (dp_int.h)
 * ---------------------------------------------------------------------- */

static struct {
    pthread_once_t once;
    bool ok;
    pthread_key_t key;
    pthread_mutex_t lock;
    struct dp_tl *head;
} tl = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};
static _Thread_local struct dp_tl *tl_mine;

static void tl_exit(void *arg)
{
    struct dp_tl *c = arg;

    pthread_mutex_lock(&tl.lock);
    if (c->prev)
        c->prev->next = c->next;
    else
        tl.head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&tl.lock);
    free(c->rx[0]);
    free(c->rx[1]);
    free(c->txb);
    free(c);
    tl_mine = NULL;
}

static void tl_init(void)
{
    tl.ok = pthread_key_create(&tl.key, tl_exit) == 0;
}

struct dp_tl *dp_tl(void)
{
    struct dp_tl *c = tl_mine;

    if (c)
        return c;
    pthread_once(&tl.once, tl_init);
    if (!tl.ok || !(c = calloc(1, sizeof(*c))))
        return NULL;
    if (pthread_setspecific(tl.key, c) != 0) {
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&tl.lock);
    c->next = tl.head;
    if (tl.head)
        tl.head->prev = c;
    tl.head = c;
    pthread_mutex_unlock(&tl.lock);
    tl_mine = c;
    return c;
}

/* ------------------------------------------------------------------------
 * Mappings
 * ---------------------------------------------------------------------- */

enum ibv_wc_opcode dp_wc_opcode(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
        return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return IBV_WC_FETCH_ADD;
    case IBV_WR_LOCAL_INV:
        return IBV_WC_LOCAL_INV;
    case IBV_WR_BIND_MW:
        return IBV_WC_BIND_MW;
    case IBV_WR_TSO:
        return IBV_WC_TSO;
    case IBV_WR_ATOMIC_WRITE:
        return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    default:
        return IBV_WC_SEND;
    }
}

/* RFC 5040 §4.8 Figure 9 Remote Protection codes */
uint8_t dp_prot_code(enum uiw_mem_err err)
{
    switch (err) {
    case UIW_MEM_BASE_BOUNDS:
        return UIW_RDMAP_EC_BASE_BOUNDS;
    case UIW_MEM_ACCESS:
        return UIW_RDMAP_EC_ACCESS_RIGHTS;
    case UIW_MEM_PD:
        return UIW_RDMAP_EC_STAG_NOT_ASSOC;
    case UIW_MEM_TO_WRAP:
        return UIW_RDMAP_EC_TO_WRAP;
    default:
        return UIW_RDMAP_EC_INVALID_STAG;
    }
}

/* ------------------------------------------------------------------------
 * Errors and Terminate
 * ---------------------------------------------------------------------- */

void dp_enter_error(struct uiw_qp *qp)
{
    dp_rx_error_cleanup(qp, IBV_WC_WR_FLUSH_ERR);
    if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET)
        uiw_qp_to_error_locked(qp);
    dp_tx_error_cleanup(qp);
}

void uiw_qp_terminate_locked(struct uiw_qp *qp, uiw_term_cause cause, const uint8_t *bad_hdr,
                             unsigned bad_hdr_len, enum ibv_event_type async)
{
    uiw_hdr h;

    /* RFC 5040 §7.1 rule 4: only the first error is reported; nothing is
     * sent after a Terminate (§5.4) or once the stream is being closed */
    if (qp->term_sent || qp->term_received || qp->state == IBV_QPS_ERR ||
        qp->state == IBV_QPS_RESET)
        return;
    qp->term_sent = true;
    qp->term = cause;
    uiw_log("qp %u: sending Terminate %s / %s / %s", qp->ibqp.qp_num,
            uiw_term_layer_name(cause.layer), uiw_term_etype_name(cause.layer, cause.etype),
            uiw_term_ecode_name(cause.layer, cause.etype, cause.ecode));

    /* RFC 5040 §4.8, §5.4: untagged, QN 2, first (and only) message on
     * it: MSN 1, MO 0 */
    uiw_hdr_init_untagged(&h, UIW_OP_TERMINATE, UIW_QN_TERMINATE, ++qp->tx_msn[UIW_QN_TERMINATE]);
    uiw_term_attach(&h.u.term, cause, bad_hdr, bad_hdr_len);
    dp_tx_queue_terminate(qp, &h);
    dp_enter_error(qp);
    if (async != DP_NO_ASYNC)
        uiw_async_event(qp->ctx, async, &qp->ibqp);
    uiw_qp_tx_progress(qp);
}

/* ------------------------------------------------------------------------
 * Socket events and the end of the stream
 * ---------------------------------------------------------------------- */

void dp_arm(struct uiw_qp *qp)
{
    uint32_t ev =
        (qp->rx_muted ? 0u : EPOLLIN | EPOLLRDHUP) | EPOLLET | (qp->want_write ? EPOLLOUT : 0u);

    if (qp->fd < 0)
        return;
    /* owned by a busy poller and nothing to wait for: out of epoll
     * altogether (uiw_progress_park; "Poll ownership" below). A waiter's
     * mute (UIW_MUTE_WAITER) only takes EPOLLIN off: it comes and goes with
     * every wait, and a DEL and ADD per wait cost qperf's rc_lat 1-3 us. */
    if (qp->rx_muted == UIW_MUTE_POLL && !qp->want_write && uiw_progress_park(qp->fd) == 0)
        return;
    (void)uiw_progress_mod(qp->fd, ev, dp_event_cb, qp);
}

/* A waiter spinning in ibv_get_cq_event takes the socket (mute) or gives
 * it back before it blocks (also from a busy poller: whoever blocks next
 * must have the progress thread behind it). */
void uiw_qp_rx_mute(struct uiw_qp *qp, bool mute)
{
    uint8_t m;

    pthread_mutex_lock(&qp->lock);
    m = mute ? (uint8_t)(qp->rx_muted | UIW_MUTE_WAITER) : 0;
    if (qp->rx_muted != m) {
        qp->rx_muted = m;
        dp_arm(qp);
    }
    pthread_mutex_unlock(&qp->lock);
}

/* ------------------------------------------------------------------------
 * Poll ownership (docs/ENGINE.md "Poll-driven progress")
 *
 * A program that busy-polls a CQ (perftest, libfabric's progress, MPI)
 * reads its QPs' sockets itself (uiw_cq_drive). If the progress thread
 * also sleeps in epoll on them, every segment that arrives wakes it: on the
 * sender's CPU, in its sendmsg, the wake-up of a thread on another CPU (an
 * IPI; on a VM an exit), for data the poller mostly reads first
 * (ib_send_bw -s 64: 0.85-0.92 M messages/s before, 1.25-1.28 M with
 * ownership alone). So a thread that keeps
 * polling (UIW_POLL_SPIN empty polls in a row, cq.c) owns the sockets it
 * drives: they leave the progress thread's EPOLLIN (UIW_MUTE_POLL). It gives
 * them back when it has not driven them for UIWARP_POLL_OWN_US. Putting
 * EPOLLIN back reports data that came meanwhile, so a program that stops
 * polling (to compute, or to block elsewhere) has its Read Requests,
 * Atomics and Sends served by the progress thread shortly after. A thread
 * that blocks in ibv_get_cq_event gives them back at once
 * (uiw_qp_rx_mute).
 *
 * Who looks: the pollers themselves while any polls, the progress thread
 * when none does. A poller that drives an owned QP looks at the whole
 * owned list once per half UIWARP_POLL_OWN_US (own_check: a trylock per
 * QP, as the progress thread would), and keeps a timer in the progress
 * thread's epoll set at least UIWARP_POLL_OWN_US ahead, pushing it to 4x
 * when it comes closer: a dead man's switch (uiw_progress_deadman), one
 * timerfd_settime per 3x UIWARP_POLL_OWN_US of polling and no wake-up.
 * It fires only when no poller has looked for that long; the progress
 * thread then looks, and sets it for the QPs still owned. So what a
 * stopped poller owned goes back at most 4x UIWARP_POLL_OWN_US (800 us)
 * after its last poll, at once if another thread polls (2x with the
 * periodic timer before), and the progress thread is not woken while
 * programs poll: with a timer in its heap every UIWARP_POLL_OWN_US, each
 * firing took a CPU from a spinning program on a machine whose CPUs all
 * spin (ib_send_lat -s 64: p99 21-26 us against a typical 4; 12.7-13.3
 * with the switch; pushing it at every look instead, a timerfd_settime per
 * 100 us, cost 0.3-0.6 us of average latency: on a VM a timer reprogram
 * is an exit; docs/PERFORMANCE.md).
 * ---------------------------------------------------------------------- */

static struct {
    pthread_once_t once;
    bool ok; /* the progress thread's dead man's switch is ours: ownership possible */
    pthread_mutex_t lock;
    struct uiw_qp *head;            /* rx_own_prev/next, under lock */
    _Atomic uint64_t next_check_ns; /* when a poller looks next (0: none owned) */
    uint64_t switch_ns;             /* when the switch fires, as a poller set it */
} own = {.once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER};

static void own_fire(void);

static void own_init(void)
{
    bool ok = uiw_progress_deadman(own_fire) == 0;

    pthread_mutex_lock(&own.lock);
    own.ok = ok;
    pthread_mutex_unlock(&own.lock);
}

/* own.lock held (and the QP's lock, or the QP cannot go away: it is
 * listed, and ibv_destroy_qp unlinks it under own.lock) */
static void own_unlink_locked(struct uiw_qp *qp)
{
    if (qp->rx_own_prev)
        qp->rx_own_prev->rx_own_next = qp->rx_own_next;
    else
        own.head = qp->rx_own_next;
    if (qp->rx_own_next)
        qp->rx_own_next->rx_own_prev = qp->rx_own_prev;
    qp->rx_own_prev = qp->rx_own_next = NULL;
    qp->rx_owned_listed = false;
    if (!own.head)
        atomic_store_explicit(&own.next_check_ns, 0, memory_order_relaxed);
}

/* own.lock held: give back what was not driven for UIWARP_POLL_OWN_US.
 * Lock order is qp -> own, so only a trylock here: a QP whose lock is busy
 * is being driven (or is about to be), and is looked at again next time.
 * Returns the time until the next QP would be due (hold if none). */
static uint64_t own_scan_locked(uint64_t hold)
{
    uint64_t next = hold;
    struct uiw_qp *q, *nx;

    for (q = own.head; q; q = nx) {
        nx = q->rx_own_next;
        if (pthread_mutex_trylock(&q->lock) != 0)
            continue;
        uint64_t now = uiw_now_ns(); /* after the lock: rx_owned_ns is not later */
        uint64_t idle = now - q->rx_owned_ns;

        if (!(q->rx_muted & UIW_MUTE_POLL) || idle >= hold) {
            q->rx_muted &= (uint8_t)~UIW_MUTE_POLL;
            own_unlink_locked(q);
            dp_arm(q); /* reports what came meanwhile */
        } else if (hold - idle < next) {
            next = hold - idle;
        }
        pthread_mutex_unlock(&q->lock);
    }
    return next;
}

/* A poller's look (qp->lock of the QP it drives held: a trylock of that
 * one fails, and it is fresh anyway) */
static void own_check(uint64_t now, uint64_t hold)
{
    uint64_t due = atomic_load_explicit(&own.next_check_ns, memory_order_relaxed);

    if (!due || now < due || pthread_mutex_trylock(&own.lock) != 0)
        return;
    if (own.head) {
        (void)own_scan_locked(hold);
        if (own.head) {
            atomic_store_explicit(&own.next_check_ns, now + hold / 2, memory_order_relaxed);
            /* pushed only when it would fire within a hold, by four: a
             * timerfd_settime reprograms the CPU's timer (on a VM an exit),
             * and one per look (every 100 us) cost a ping-pong 0.3 us on
             * average */
            if (own.switch_ns < now + hold) {
                own.switch_ns = now + 4 * hold;
                uiw_progress_deadman_arm(4 * hold);
            }
        }
    }
    pthread_mutex_unlock(&own.lock);
}

void uiw_qp_poll_own(struct uiw_qp *qp, bool take)
{
    unsigned us = uiw_config()->poll_own_us;
    uint64_t now, hold = (uint64_t)us * 1000u;

    if (qp->rx_muted & UIW_MUTE_POLL) { /* any poll keeps it */
        now = uiw_now_ns();
        qp->rx_owned_ns = now;
        own_check(now, hold);
        return;
    }
    if (!take || !us || qp->fd < 0 || qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
        return;
    now = uiw_now_ns();
    qp->rx_owned_ns = now;
    pthread_once(&own.once, own_init);
    pthread_mutex_lock(&own.lock);
    if (!own.ok) {
        pthread_mutex_unlock(&own.lock);
        return;
    }
    if (!qp->rx_owned_listed) {
        qp->rx_own_prev = NULL;
        qp->rx_own_next = own.head;
        if (own.head)
            own.head->rx_own_prev = qp;
        else /* the first owned QP: looks start, the switch is set */
            atomic_store_explicit(&own.next_check_ns, now + hold / 2, memory_order_relaxed);
        own.head = qp;
        qp->rx_owned_listed = true;
        own.switch_ns = now + hold + hold / 2;
        uiw_progress_deadman_arm(hold + hold / 2);
    }
    pthread_mutex_unlock(&own.lock);
    qp->rx_muted |= UIW_MUTE_POLL;
    dp_arm(qp);
}

/* cq was armed with a channel: the program is about to sleep until its
 * event, in ibv_get_cq_event or in poll(2), epoll or select on the
 * channel's fd, and only the progress thread can raise it. The sockets of
 * cq's QPs that a poller owns go back to it now. Before, only a wait in
 * ibv_get_cq_event gave them back: a program that spun on ibv_poll_cq,
 * armed and slept in poll(2) (rsockets' blocking calls) waited for the
 * dead man's switch, 58-134 us per message (rstream -T b, 64 bytes,
 * against 6 us nonblocking). Taken under own.lock with a reference, given
 * back under the QP's lock (order qp -> own). */
void uiw_cq_unown(struct uiw_cq *cq)
{
    struct uiw_qp *qs[16];
    unsigned n;

    do {
        struct uiw_qp *q;

        if (!atomic_load_explicit(&own.next_check_ns, memory_order_relaxed))
            return; /* nothing owned */
        n = 0;
        pthread_mutex_lock(&own.lock);
        for (q = own.head; q && n < sizeof(qs) / sizeof(qs[0]); q = q->rx_own_next)
            if (q->rcq == cq || q->scq == cq) {
                uiw_qp_get(q);
                qs[n++] = q;
            }
        pthread_mutex_unlock(&own.lock);
        for (unsigned i = 0; i < n; i++) {
            q = qs[i];
            pthread_mutex_lock(&q->lock);
            bool owned = q->rx_muted & UIW_MUTE_POLL;
            dp_rx_unown(q); /* off the list, owned or not */
            if (owned)
                dp_arm(q); /* reports what came meanwhile */
            pthread_mutex_unlock(&q->lock);
            uiw_qp_put(q);
        }
    } while (n == sizeof(qs) / sizeof(qs[0]));
}

void dp_rx_unown(struct uiw_qp *qp)
{
    qp->rx_muted &= (uint8_t)~UIW_MUTE_POLL;
    if (!qp->rx_owned_listed)
        return;
    pthread_mutex_lock(&own.lock);
    if (qp->rx_owned_listed)
        own_unlink_locked(qp);
    pthread_mutex_unlock(&own.lock);
}

/* The switch fired: no poller looked for 1.5 UIWARP_POLL_OWN_US (or the
 * progress thread set it for the next QP due). */
static void own_fire(void)
{
    uint64_t hold = (uint64_t)uiw_config()->poll_own_us * 1000u, next;

    pthread_mutex_lock(&own.lock);
    next = own_scan_locked(hold);
    if (next < 10000u)
        next = 10000u;
    own.switch_ns = uiw_now_ns() + next;
    if (own.head)
        uiw_progress_deadman_arm(next);
    pthread_mutex_unlock(&own.lock);
}

void uiw_qp_llp_closed_locked(struct uiw_qp *qp, int err)
{
    bool clean;

    if (!dp_rx_eof(qp, err, &clean))
        return; /* reported already */
    if (qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET) {
        if (!clean)
            uiw_log("qp %u: connection lost (%d)", qp->ibqp.qp_num, err);
        dp_enter_error(qp);
        if (!clean && !qp->term_sent && !qp->term_received)
            uiw_async_event(qp->ctx, IBV_EVENT_QP_FATAL, &qp->ibqp);
    } else {
        dp_rx_error_cleanup(qp, IBV_WC_WR_FLUSH_ERR);
        dp_tx_error_cleanup(qp);
    }
    if (qp->conn)
        uiw_cm_llp_closed(qp->conn, err);
    else if (qp->fd >= 0)
        (void)shutdown(qp->fd, SHUT_WR); /* no CM: answer the FIN ourselves */
}

void dp_rnr_timer_cb(void *obj)
{
    dp_event_cb(obj, 0);
}

/* The QP's socket reported events (epoll, edge-triggered), or a
 * receiver-not-ready timer fired (events 0): readable, hung up or a timer
 * -> the receive path, which transmits when it is done (a receive may have
 * freed room in the IRQ, a Terminate may be queued); writable only -> the
 * transmitter. */
void dp_event_cb(void *obj, uint32_t events)
{
    struct uiw_qp *qp = obj;

    if (events & (EPOLLIN | EPOLLRDHUP))
        uiw_progress_data_seen();
    pthread_mutex_lock(&qp->lock);
    if (qp->fd >= 0) {
        if (events == EPOLLOUT)
            uiw_qp_tx_progress(qp);
        else
            uiw_qp_rx_event(qp, events);
    }
    pthread_mutex_unlock(&qp->lock);
}

/* ------------------------------------------------------------------------
 * Attach / free
 * ---------------------------------------------------------------------- */

void uiw_qp_dp_free(struct uiw_qp *qp)
{
    dp_tx_free(qp);
    dp_rx_free(qp);
}

/* The TCP segment size FPDUs are aligned with (0: none; qp_tx.c
 * seg_room): the connected socket's MSS (TCP_MAXSEG: the peer's MSS option
 * and the path MTU, less TCP options such as timestamps) on a link that is
 * not loopback, with UIWARP_FPDU_ALIGN. */
/* The socket's MSS, 0 when it has none (not TCP: tests on socket pairs). */
static unsigned sock_mss(int fd)
{
    int mss = 0;
    socklen_t l = sizeof(mss);

    if (getsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l) < 0 || mss <= 0)
        return 0;
    return (unsigned)mss;
}

static unsigned align_seg_of(unsigned mss)
{
    if (!uiw_config()->fpdu_align || !mss)
        return 0; /* off, or not TCP */
    return mss <= DP_ALIGN_MAX_MSS ? mss : 0;
}

unsigned dp_align_seg(int fd)
{
    return uiw_config()->fpdu_align ? align_seg_of(sock_mss(fd)) : 0;
}

static unsigned pick_max_fpdu(int fd, unsigned *seg)
{
    unsigned mf = uiw_config()->max_fpdu, mss = sock_mss(fd); /* one getsockopt */

    *seg = align_seg_of(mss);
    if (!mf) {
        /* one FPDU per TCP segment, like siw (docs/PEERS.md §7): the MSS
         * rounded down to a multiple of 8; when FPDUs are aligned with
         * segments, to 4 (FPDUs are multiples of 4, RFC 5044 §4.1), so that
         * full FPDUs tile the segments exactly (RFC 5044 §4.5: MULPDU =
         * EMSS - 6 - EMSS mod 4). Above DP_ALIGN_MAX_MSS (a link no NIC
         * segments: loopback, whose MSS reads 32741-65483) the largest
         * FPDU: FPDUs of the MSS, about 32 KiB there, made a receiver that
         * reads large payloads in place slower (ib_send_lat -s 65536
         * typical 12.6 us against 9.3 with the largest FPDU or 9.2 with 16
         * KiB ones; docs/PERFORMANCE.md "stop 34"; cause not found). */
        if (mss > DP_ALIGN_MAX_MSS)
            mf = DP_MAX_FPDU_8;
        else if (mss)
            mf = mss & (*seg ? ~3u : ~7u);
        else
            mf = DP_MAX_FPDU_8; /* not TCP (tests on socketpairs) */
    }
    if (mf > DP_MAX_FPDU_8)
        mf = DP_MAX_FPDU_8;
    if (mf < UIW_TX_MIN_FPDU)
        mf = UIW_TX_MIN_FPDU;
    if (mf > *seg)
        *seg = 0; /* UIWARP_MAX_FPDU above the MSS: FPDUs cross segments anyway */
    return mf;
}

static unsigned depth(uint16_t negotiated, unsigned current, unsigned max)
{
    /* RFC 6581 §9.1: 0x3FFF leaves it to the ULP (the QP's attribute) */
    unsigned v = negotiated == UIW_MPA_IRD_ORD_AUTO ? current : negotiated;
    return v > max ? max : v;
}

static int attach(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa, unsigned hold_ms,
                  bool cm_socket, const struct sockaddr_storage *local,
                  const struct sockaddr_storage *peer);

int uiw_qp_attach_socket(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa)
{
    return attach(qp, fd, mpa, 0, false, NULL, NULL);
}

int uiw_qp_attach_socket_hold(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa,
                              unsigned hold_ms, const struct sockaddr_storage *local,
                              const struct sockaddr_storage *peer)
{
    return attach(qp, fd, mpa, hold_ms, true, local, peer);
}

/* cm_socket: cm.c's own socket, non-blocking with TCP_NODELAY from its
 * creation (or the listener's), so neither is set again: two system calls
 * less per connection and side. */
static int attach(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa, unsigned hold_ms,
                  bool cm_socket, const struct sockaddr_storage *local,
                  const struct sockaddr_storage *peer)
{
    struct ibv_qp_attr attr;
    unsigned max_fpdu, seg;
    int one = 1, fl, r;

    if (!qp || fd < 0 || !mpa)
        return -EINVAL;
    if (!cm_socket) {
        fl = fcntl(fd, F_GETFL);
        if (fl < 0 || (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0))
            return -errno;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* siw: no Nagle */
    }
    max_fpdu = pick_max_fpdu(fd, &seg);

    pthread_mutex_lock(&qp->lock);
    if (qp->fd >= 0) {
        r = -EBUSY;
        goto out;
    }
    if (qp->state != IBV_QPS_RESET && qp->state != IBV_QPS_INIT && qp->state != IBV_QPS_RTR) {
        r = -EINVAL;
        goto out;
    }
    qp->mpa = *mpa;
    qp->ord = depth(mpa->ord, qp->ord, UIW_MAX_ORD);
    qp->ird = depth(mpa->ird, qp->ird, UIW_MAX_IRD);
    memset(qp->tx_msn, 0, sizeof(qp->tx_msn));
    memset(qp->rx_msn, 0, sizeof(qp->rx_msn));
    qp->orq_head = qp->orq_count = 0;
    qp->irq_head = qp->irq_count = 0;
    qp->term_sent = qp->term_received = false;
    qp->want_write = false;
    r = dp_tx_attach(qp, max_fpdu, seg);
    if (!r)
        r = dp_rx_attach(qp);
    if (!r && !qp->rnr_timers) {
        /* receiver not ready (qp_rx.c): the kick and the limit; the
         * first-FPDU hold (qp_tx.c) */
        r = uiw_timer_init(&qp->rnr_kick, dp_rnr_timer_cb, qp);
        if (!r) {
            r = uiw_timer_init(&qp->rnr_limit, dp_rnr_timer_cb, qp);
            if (r)
                uiw_timer_fini(&qp->rnr_kick);
        }
        if (!r) {
            r = uiw_timer_init(&qp->first_hold, dp_hold_timer_cb, qp);
            if (r) {
                uiw_timer_fini(&qp->rnr_kick);
                uiw_timer_fini(&qp->rnr_limit);
            }
        }
        qp->rnr_timers = !r;
    }
    if (r)
        goto out;

    /* RDMAC verbs Idle -> RTS (qp.c allows INIT -> RTS with a socket) */
    qp->fd = fd;
    memset(&attr, 0, sizeof(attr));
    if (qp->state == IBV_QPS_RESET) {
        attr.qp_state = IBV_QPS_INIT;
        r = uiw_qp_modify_locked(qp, &attr, IBV_QP_STATE);
    }
    if (!r) {
        attr.qp_state = IBV_QPS_RTS;
        r = uiw_qp_modify_locked(qp, &attr, IBV_QP_STATE);
    }
    if (r) {
        qp->fd = -1;
        goto out;
    }
    /* cm.c hands over its own registration of the socket (the initiator's,
     * through which the Reply was read; the responder's one-shot, which
     * brought the Request): one EPOLL_CTL_MOD instead of a DEL and an ADD
     * (docs/PERFORMANCE.md, 2026-11-27 (setup3)). A caller's own socket
     * is not registered: added. */
    r = cm_socket ? uiw_progress_mod(fd, EPOLLIN | EPOLLRDHUP | EPOLLET, dp_event_cb, qp) : -ENOENT;
    if (r == -ENOENT)
        r = uiw_progress_add(fd, EPOLLIN | EPOLLRDHUP | EPOLLET, dp_event_cb, qp);
    if (r) {
        uiw_qp_to_error_locked(qp);
        qp->fd = -1;
        goto out;
    }
    uiw_cq_drive_add(qp->scq, qp);
    if (qp->rcq != qp->scq)
        uiw_cq_drive_add(qp->rcq, qp);
    uiw_stat_connected(qp, !mpa->await_rtr, local,
                       peer); /* a responder always awaits the first FPDU */
    uiw_dbg(1, "qp %u: attached fd %d crc %d markers %d/%d max_fpdu %u ird %u ord %u%s%s",
            qp->ibqp.qp_num, fd, mpa->crc, mpa->markers_rx, mpa->markers_tx, max_fpdu, qp->ird,
            qp->ord, mpa->send_rtr ? " send-rtr" : "", mpa->await_rtr ? " await-rtr" : "");
    if (hold_ms)
        dp_tx_hold_first(qp, hold_ms);
    /* The RTR goes out now. Bytes already waiting are reported by the
     * registration just made: an EPOLLET ADD or MOD polls the socket and
     * queues it if readable (ep_insert / ep_modify), so cm.c's sockets are
     * not read here (a recv that found nothing on both sides of nearly
     * every connection, and a staging buffer taken and given back); a
     * caller's own socket is, as before. */
    if (cm_socket)
        uiw_qp_tx_progress(qp);
    else
        uiw_qp_rx_progress(qp);
out:
    pthread_mutex_unlock(&qp->lock);
    return r;
}
