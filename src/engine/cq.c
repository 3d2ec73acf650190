/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion queues and completion channels.
 *
 * A CQ is a ring of struct ibv_wc under cq->lock. Producers (the data path,
 * flushes) call uiw_cq_push with their QP's lock held; ibv_poll_cq pops and,
 * when the ring is empty, drives the attached QPs once (uiw_cq_drive,
 * progress.c) before looking again.
 *
 * A completion channel is a FIFO of CQs with an undelivered event plus a
 * local stream socket whose reading end is channel->fd; it holds one byte
 * while the FIFO is non-empty, so poll() works. ibv_get_cq_event blocks in
 * read() on it, exactly like rdma-core's read of the kernel's channel fd: a
 * non-blocking fd gives EAGAIN, and a signal interrupts it with EINTR unless
 * the handler has SA_RESTART (qperf's timers rely on that). The reader that
 * took the byte pops one event under the lock and puts the byte back if
 * more are queued. The library's own removals use MSG_DONTWAIT, so they
 * never block whatever the application did to the fd's flags.
 *
 * Notification (ibv_req_notify_cq) is one-shot, as in verbs: "all" fires on
 * the next completion, "solicited only" on the next completion of a
 * solicited message or the next completion in error (IB verbs request
 * completion notification semantics). A full CQ is an overrun: the
 * completion is lost, the CQ goes to error (no further completions),
 * IBV_EVENT_CQ_ERR is raised and ibv_poll_cq returns what it still holds,
 * then -EOVERFLOW.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"

/* Consecutive empty ibv_poll_cq calls of this thread after which each
 * further empty call yields the CPU (see uiw_op_poll_cq). */
#define UIW_POLL_SPIN 16

static atomic_int ncqs;
_Atomic uint64_t uiw_last_arm_ns;   /* engine.h */
_Atomic uint64_t uiw_last_yield_ns; /* engine.h */
static _Thread_local unsigned empty_polls;
static _Thread_local unsigned yields; /* of this thread's empty polls */

static struct uiw_comp_channel *to_uch(struct ibv_comp_channel *c)
{
    return (struct uiw_comp_channel *)c;
}

/* ------------------------------------------------------------------------
 * Completion channels
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct uiw_comp_channel *ch;
    int fds[2];

    if (!context) {
        errno = EINVAL;
        return NULL;
    }
    ch = uiw_zalloc(sizeof(*ch));
    if (!ch)
        return NULL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
        int e = errno;

        free(ch);
        errno = e;
        return NULL;
    }
    shutdown(fds[0], SHUT_WR);
    ch->ch.context = context;
    ch->ch.fd = fds[0];
    ch->ch.refcnt = 0;
    ch->wr_fd = fds[1];
    pthread_mutex_init(&ch->lock, NULL);
    pthread_mutex_init(&ch->drive_lock, NULL);
    return &ch->ch;
}

UIW_EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct uiw_comp_channel *ch = to_uch(channel);

    if (!channel)
        return EINVAL;
    pthread_mutex_lock(&ch->lock);
    if (ch->ch.refcnt) {
        pthread_mutex_unlock(&ch->lock);
        return EBUSY;
    }
    pthread_mutex_unlock(&ch->lock);
    close(ch->ch.fd);
    close(ch->wr_fd);
    pthread_mutex_destroy(&ch->lock);
    pthread_mutex_destroy(&ch->drive_lock);
    free(ch->pending);
    free(ch->cqs);
    free(ch);
    return 0;
}

/* ch->lock held */
static void chan_signal_locked(struct uiw_comp_channel *ch)
{
    static const char one = 1;
    ssize_t w = send(ch->wr_fd, &one, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
}

static void chan_unsignal_locked(struct uiw_comp_channel *ch)
{
    char b;
    /* A reader may hold the byte already: never wait for it. */
    ssize_t r = recv(ch->ch.fd, &b, 1, MSG_DONTWAIT);
    (void)r;
}

/* Queue a completion event for cq (cq->lock held; lock order cq -> channel). */
static void chan_post(struct uiw_comp_channel *ch, struct uiw_cq *cq)
{
    pthread_mutex_lock(&ch->lock);
    struct uiw_cq **pending = uiw_room(ch->pending, ch->npending, &ch->cap, 16, sizeof(*pending));
    if (!pending) {
        pthread_mutex_unlock(&ch->lock);
        uiw_log("completion event lost: out of memory");
        return;
    }
    ch->pending = pending;
    ch->pending[ch->npending++] = cq;
    if (ch->npending == 1) {
        if (ch->spinners)
            ch->byte_owed = true; /* a spinning waiter takes it (chan_spin_end) */
        else
            chan_signal_locked(ch);
    }
    pthread_mutex_unlock(&ch->lock);
}

/* Remove cq's undelivered events (destroy); returns events handed out. */
static uint32_t chan_purge(struct uiw_comp_channel *ch, struct uiw_cq *cq)
{
    unsigned j = 0;
    uint32_t reported;

    pthread_mutex_lock(&ch->lock);
    bool had = ch->npending > 0;
    for (unsigned i = 0; i < ch->npending; i++)
        if (ch->pending[i] != cq)
            ch->pending[j++] = ch->pending[i];
    ch->npending = j;
    if (had && !j) {
        if (ch->byte_owed)
            ch->byte_owed = false;
        else
            chan_unsignal_locked(ch);
    }
    reported = cq->comp_reported;
    pthread_mutex_unlock(&ch->lock);
    return reported;
}

/*
 * Waiting. A program that waits in ibv_get_cq_event for each message (qperf's
 * default mode, rping, fio, libfabric's verbs provider in its blocking
 * calls) would otherwise be woken by the progress thread, which itself was
 * woken (or spinning) for the socket: a thread hand-off per message on top
 * of the wake-up that TCP costs. While events come often (one handed out
 * within the last 2 x UIWARP_PROGRESS_SPIN_US), the waiting thread first
 * spins for up to UIWARP_PROGRESS_SPIN_US driving the channel's CQs itself
 * (uiw_cq_drive: the same receive processing ibv_poll_cq runs on an empty
 * CQ), with sched_yield between rounds, and takes the event its own
 * processing produced. Meanwhile the QPs' sockets are out of the progress
 * thread's EPOLLIN set (woken for the same data, it would otherwise take
 * it, often handed the CPU by the waiter's own sched_yield) and that thread
 * does not spin; when the spin ends they go back, and data that came in
 * the meantime is reported to it. Only when nothing came does the waiter
 * block in read(). Not spun on: a non-blocking channel fd (the caller
 * polled it and wants EAGAIN at once), and channels whose CQs hold more
 * than UIW_WAIT_SPIN_QPS QPs (the switch costs two epoll_ctl per QP).
 * A signal that arrives during the spin does not end the wait with EINTR
 * (the spin lasts at most UIWARP_PROGRESS_SPIN_US; a signal after it
 * interrupts the read() as before).
 */
atomic_uint uiw_event_spinners;
/* A waiter spins only when its channel's CQs have at most this many QPs
 * (it switches each QP's readiness from the progress thread to itself and
 * back, two epoll_ctl per QP and wait). */
#define UIW_WAIT_SPIN_QPS 4
atomic_ulong uiw_event_spin_hits;
atomic_uint uiw_test_spin_hold, uiw_test_spin_held;

static bool chan_ready(struct uiw_comp_channel *ch)
{
    bool r;

    pthread_mutex_lock(&ch->lock);
    r = ch->npending > 0;
    pthread_mutex_unlock(&ch->lock);
    return r;
}

/* One round of receive processing on the channel's CQs (none when another
 * waiter is doing it: give it the CPU). */
static void chan_drive(struct uiw_comp_channel *ch)
{
    if (pthread_mutex_trylock(&ch->drive_lock) != 0) {
        sched_yield();
        return;
    }
    for (unsigned i = 0; i < ch->ncqs; i++)
        uiw_cq_drive(ch->cqs[i], true, false);
    pthread_mutex_unlock(&ch->drive_lock);
}

/* The QPs of the channel's CQs, each once, with references: false if
 * there are more than UIW_WAIT_SPIN_QPS (or another waiter drives them). */
static bool chan_qps(struct uiw_comp_channel *ch, struct uiw_qp **qps, unsigned *n)
{
    struct uiw_qp *got[UIW_WAIT_SPIN_QPS];
    bool ok = true;

    *n = 0;
    if (pthread_mutex_trylock(&ch->drive_lock) != 0)
        return false;
    for (unsigned i = 0; ok && i < ch->ncqs; i++) {
        unsigned k = uiw_cq_qps_get(ch->cqs[i], got, UIW_WAIT_SPIN_QPS);

        if (k > UIW_WAIT_SPIN_QPS) {
            ok = false;
            break;
        }
        for (unsigned j = 0; j < k; j++) {
            bool dup = false;

            for (unsigned m = 0; m < *n; m++)
                dup |= qps[m] == got[j];
            if (dup || *n == UIW_WAIT_SPIN_QPS) {
                ok &= dup;
                uiw_qp_put(got[j]);
            } else {
                qps[(*n)++] = got[j];
            }
        }
    }
    pthread_mutex_unlock(&ch->drive_lock);
    if (!ok || !*n) {
        for (unsigned m = 0; m < *n; m++)
            uiw_qp_put(qps[m]);
        *n = 0;
        return false;
    }
    return true;
}

/* The first queued event (ch->lock held): returned through cq/ctx. */
static void chan_take_locked(struct uiw_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    struct uiw_cq *c = ch->pending[0];

    memmove(ch->pending, ch->pending + 1, (ch->npending - 1) * sizeof(*ch->pending));
    if (--ch->npending)
        chan_signal_locked(ch); /* more queued: the byte goes back */
    c->comp_reported++;
    atomic_store_explicit(&ch->last_event_ns, uiw_now_ns(), memory_order_relaxed);
    *cq = &c->ibcq;
    *cq_context = c->ibcq.cq_context;
}

/* A spinner stops. An event posted while any spinner was there came
 * without its byte (chan_post): the spinner takes it itself (true:
 * returned through cq/ctx), so that no reader waits for a byte that never
 * comes. Any spinner may take it: each leaves through here. */
static bool chan_spin_end(struct uiw_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    bool took = false;

    pthread_mutex_lock(&ch->lock);
    ch->spinners--;
    if (ch->byte_owed) {
        ch->byte_owed = false;
        if (ch->npending) {
            chan_take_locked(ch, cq, cq_context); /* sends the byte for the rest */
            took = true;
        }
    }
    pthread_mutex_unlock(&ch->lock);
    return took;
}

/* Spins (see above); true if it took the event itself (cq/ctx set, no
 * byte to read). */
static bool chan_spin(struct uiw_comp_channel *ch, struct ibv_cq **ecq, void **ectx)
{
    uint64_t spin = (uint64_t)uiw_config()->progress_spin_us * 1000u;
    uint64_t now, until;
    struct uiw_qp *qps[UIW_WAIT_SPIN_QPS];
    unsigned nqps;
    int fl;

    if (!spin)
        return false;
    now = uiw_now_ns();
    if (now - atomic_load_explicit(&ch->last_event_ns, memory_order_relaxed) >= 2 * spin)
        return false;
    fl = fcntl(ch->ch.fd, F_GETFL);
    if (fl < 0 || (fl & O_NONBLOCK))
        return false;
    if (!chan_qps(ch, qps, &nqps))
        return false;
    pthread_mutex_lock(&ch->lock);
    ch->spinners++;
    pthread_mutex_unlock(&ch->lock);
    /* the progress thread would be woken for the data we are about to read
     * (and, waking on this CPU, be given it by our sched_yield) */
    for (unsigned i = 0; i < nqps; i++)
        uiw_qp_rx_mute(qps[i], true);
    atomic_fetch_add_explicit(&uiw_event_spinners, 1, memory_order_relaxed);
    for (until = now + spin; !chan_ready(ch) && uiw_now_ns() < until;) {
        chan_drive(ch);
        if (chan_ready(ch)) {
            atomic_fetch_add_explicit(&uiw_event_spin_hits, 1, memory_order_relaxed);
            break;
        }
        sched_yield();
    }
    atomic_fetch_sub_explicit(&uiw_event_spinners, 1, memory_order_relaxed);
    /* back to the progress thread, which is told of data that came since */
    for (unsigned i = 0; i < nqps; i++) {
        uiw_qp_rx_mute(qps[i], false);
        uiw_qp_put(qps[i]);
    }
    if (atomic_load_explicit(&uiw_test_spin_hold, memory_order_relaxed)) {
        atomic_fetch_add(&uiw_test_spin_held, 1);
        while (atomic_load(&uiw_test_spin_hold))
            sched_yield();
    }
    return chan_spin_end(ch, ecq, ectx);
}

UIW_EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                                void **cq_context)
{
    struct uiw_comp_channel *ch = to_uch(channel);

    if (!channel || !cq || !cq_context) {
        errno = EINVAL;
        return -1;
    }
    /* about to wait: what this process left deferred goes out first
     * (transmit coalescing, qp_tx.c), not after the backstop's delay */
    uiw_tx_flush_deferred();
    if (chan_spin(ch, cq, cq_context))
        return 0; /* its own event, handed over without the byte */
    for (;;) {
        char b;
        ssize_t r = read(channel->fd, &b, 1);

        if (r < 0)
            return -1; /* EAGAIN (non-blocking fd) or EINTR, as the kernel's */
        if (r == 0) {
            errno = EIO;
            return -1;
        }
        pthread_mutex_lock(&ch->lock);
        if (ch->npending) {
            chan_take_locked(ch, cq, cq_context);
            pthread_mutex_unlock(&ch->lock);
            return 0;
        }
        /* The event was purged (its CQ destroyed) after the byte was sent. */
        pthread_mutex_unlock(&ch->lock);
    }
}

UIW_EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    if (!cq)
        return;
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_broadcast(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

/* ------------------------------------------------------------------------
 * Completion queues
 * ---------------------------------------------------------------------- */

/* The end of a CQ that no QP, channel or event refers to any more. */
static void cq_free(struct uiw_cq *cq)
{
    pthread_mutex_destroy(&cq->ibcq.mutex);
    pthread_cond_destroy(&cq->ibcq.cond);
    pthread_mutex_destroy(&cq->lock);
    pthread_cond_destroy(&cq->drive_cv);
    if (cq->drive_ep >= 0)
        close(cq->drive_ep);
    if (cq->ibcqx.start_poll) /* made by ibv_create_cq_ex (verbs_ex.c) */
        pthread_mutex_destroy(&cq->ex_lock);
    free(cq->ring);
    free(cq->qps);
    free(cq);
    atomic_fetch_sub(&ncqs, 1);
}

UIW_EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                        struct ibv_comp_channel *channel, int comp_vector)
{
    struct uiw_cq *cq;

    if (!context || cqe < 1 || cqe > UIW_MAX_CQE || comp_vector < 0 ||
        comp_vector >= context->num_comp_vectors) {
        errno = EINVAL;
        return NULL;
    }
    if (channel && channel->context != context) {
        errno = EINVAL;
        return NULL;
    }
    if (!uiw_count_take(&ncqs, UIW_MAX_CQ))
        return NULL;
    cq = calloc(1, sizeof(*cq));
    if (cq)
        cq->ring = calloc((size_t)cqe, sizeof(*cq->ring));
    if (!cq || !cq->ring) {
        if (cq)
            free(cq);
        atomic_fetch_sub(&ncqs, 1);
        errno = ENOMEM;
        return NULL;
    }
    cq->cap = (unsigned)cqe;
    cq->drive_ep = -1;
    pthread_cond_init(&cq->drive_cv, NULL);
    uiw_mutex_init_adaptive(&cq->lock);
    cq->ibcq.context = context;
    cq->ibcq.channel = channel;
    cq->ibcq.cq_context = cq_context;
    cq->ibcq.handle = 0;
    cq->ibcq.cqe = cqe;
    pthread_mutex_init(&cq->ibcq.mutex, NULL);
    pthread_cond_init(&cq->ibcq.cond, NULL);
    if (channel) {
        struct uiw_comp_channel *ch = to_uch(channel);

        struct uiw_cq **cqs;

        pthread_mutex_lock(&ch->drive_lock);
        cqs = uiw_room(ch->cqs, ch->ncqs, &ch->cqs_cap, 4, sizeof(*cqs));
        if (cqs) {
            ch->cqs = cqs;
            ch->cqs[ch->ncqs++] = cq;
        }
        pthread_mutex_unlock(&ch->drive_lock);
        if (!cqs) {
            cq_free(cq);
            errno = ENOMEM;
            return NULL;
        }
        pthread_mutex_lock(&ch->lock);
        channel->refcnt++;
        pthread_mutex_unlock(&ch->lock);
    }
    return &cq->ibcq;
}

UIW_EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    struct uiw_cq *cq = to_ucq(ibcq);
    struct uiw_context *ctx;
    uint32_t comp_reported = 0, async_reported;

    if (!cq)
        return EINVAL;
    ctx = to_uctx(ibcq->context);
    pthread_mutex_lock(&cq->lock);
    if (cq->nqps) {
        pthread_mutex_unlock(&cq->lock);
        return EBUSY;
    }
    pthread_mutex_unlock(&cq->lock);

    /* rdma-core: wait until every event handed out was acknowledged */
    if (ibcq->channel)
        comp_reported = chan_purge(to_uch(ibcq->channel), cq);
    uiw_async_purge(ctx, ibcq);
    pthread_mutex_lock(&ctx->async_lock);
    async_reported = cq->async_reported;
    pthread_mutex_unlock(&ctx->async_lock);
    pthread_mutex_lock(&ibcq->mutex);
    while (ibcq->comp_events_completed != comp_reported ||
           ibcq->async_events_completed != async_reported)
        pthread_cond_wait(&ibcq->cond, &ibcq->mutex);
    pthread_mutex_unlock(&ibcq->mutex);

    if (ibcq->channel) {
        struct uiw_comp_channel *ch = to_uch(ibcq->channel);

        pthread_mutex_lock(&ch->drive_lock); /* a waiter driving it is done */
        for (unsigned i = 0; i < ch->ncqs; i++)
            if (ch->cqs[i] == cq) {
                ch->cqs[i] = ch->cqs[--ch->ncqs];
                break;
            }
        pthread_mutex_unlock(&ch->drive_lock);
        pthread_mutex_lock(&ch->lock);
        ibcq->channel->refcnt--;
        pthread_mutex_unlock(&ch->lock);
    }
    cq_free(cq);
    return 0;
}

UIW_EXPORT int ibv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
    struct uiw_cq *cq = to_ucq(ibcq);
    struct ibv_wc *ring;

    if (!cq || cqe < 1 || cqe > UIW_MAX_CQE)
        return EINVAL;
    ring = calloc((size_t)cqe, sizeof(*ring));
    if (!ring)
        return ENOMEM;
    pthread_mutex_lock(&cq->lock);
    if ((unsigned)cqe < cq->count) {
        pthread_mutex_unlock(&cq->lock);
        free(ring);
        return EINVAL;
    }
    for (unsigned i = 0; i < cq->count; i++)
        ring[i] = cq->ring[(cq->head + i) % cq->cap];
    free(cq->ring);
    cq->ring = ring;
    cq->head = 0;
    cq->cap = (unsigned)cqe;
    ibcq->cqe = cqe;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

void uiw_cq_push(struct uiw_cq *cq, const struct ibv_wc *wc, bool solicited)
{
    bool notify;

    pthread_mutex_lock(&cq->lock);
    if (cq->overflow) {
        pthread_mutex_unlock(&cq->lock);
        return;
    }
    if (cq->count == cq->cap) {
        /* RFC 5042 §6.4.6: only the streams using this CQ are affected */
        cq->overflow = true;
        uiw_log("CQ %p overrun (%u entries): completion of wr_id 0x%llx lost, CQ in error",
                (void *)cq, cq->cap, (unsigned long long)wc->wr_id);
        uiw_async_event(to_uctx(cq->ibcq.context), IBV_EVENT_CQ_ERR, &cq->ibcq);
        pthread_mutex_unlock(&cq->lock);
        return;
    }
    cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
    cq->count++;
    notify = cq->armed == UIW_CQ_ARM_ALL ||
             (cq->armed == UIW_CQ_ARM_SOLICITED && (solicited || wc->status != IBV_WC_SUCCESS));
    if (notify) {
        cq->armed = 0;
        if (cq->ibcq.channel)
            chan_post(to_uch(cq->ibcq.channel), cq);
    }
    pthread_mutex_unlock(&cq->lock);
}

void uiw_cq_clean(struct uiw_cq *cq, uint32_t qp_num, bool keep_recv)
{
    unsigned kept = 0, dropped = 0;

    pthread_mutex_lock(&cq->lock);
    for (unsigned i = 0; i < cq->count; i++) {
        const struct ibv_wc *wc = &cq->ring[(cq->head + i) % cq->cap];

        if (wc->qp_num == qp_num && !(keep_recv && (wc->opcode & IBV_WC_RECV))) {
            dropped++;
            continue;
        }
        if (dropped) /* compact towards the head, keeping the order */
            cq->ring[(cq->head + kept) % cq->cap] = *wc;
        kept++;
    }
    cq->count = kept;
    pthread_mutex_unlock(&cq->lock);
    if (dropped)
        uiw_dbg(2, "cq %p: %u completions of destroyed qp %u removed", (void *)cq, dropped, qp_num);
}

bool uiw_cq_holds_success(struct uiw_cq *cq, uint32_t qp_num)
{
    bool found = false;

    pthread_mutex_lock(&cq->lock);
    for (unsigned i = 0; i < cq->count && !found; i++) {
        const struct ibv_wc *wc = &cq->ring[(cq->head + i) % cq->cap];

        found = wc->qp_num == qp_num && wc->status == IBV_WC_SUCCESS;
    }
    pthread_mutex_unlock(&cq->lock);
    return found;
}

/* *drive: the CQ is empty, and the previous poll returned nothing either */
/* *own: the CQ is not armed with a channel. An armed CQ's program may be
 * about to sleep until the event, which only the progress thread raises:
 * its poller does not take the sockets (uiw_cq_unown gave them back). */
static int cq_pop(struct uiw_cq *cq, int n, struct ibv_wc *wc, bool *overflow, bool *drive,
                  bool *own)
{
    unsigned k;

    pthread_mutex_lock(&cq->lock);
    k = cq->count < (unsigned)n ? cq->count : (unsigned)n;
    for (unsigned i = 0; i < k; i++)
        wc[i] = cq->ring[(cq->head + i) % cq->cap];
    cq->head = (cq->head + k) % cq->cap;
    cq->count -= k;
    *overflow = cq->overflow;
    *drive = k == 0 && !cq->last_poll_got;
    *own = !(cq->armed && cq->ibcq.channel);
    cq->last_poll_got = k > 0;
    pthread_mutex_unlock(&cq->lock);
    return (int)k;
}

int uiw_op_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct uiw_cq *cq = to_ucq(ibcq);
    bool overflow, drive, own;
    int got;

    if (n < 0 || (n > 0 && !wc))
        return -EINVAL;
    if (n == 0)
        return 0;
    uiw_cq_flush_tx(cq);
    got = cq_pop(cq, n, wc, &overflow, &drive, &own);
    if (got == 0 && !overflow) {
        /* Poll-driven progress: receive processing on the attached QPs,
         * but not right after a poll that returned completions. A program
         * that polls until the CQ is empty, then reposts its receives
         * (fio), must see the empty CQ, as with an RNIC whose placement
         * runs beside it; otherwise it would place the peer's next Sends
         * itself, consuming receives it cannot replace, and iWARP has no
         * RNR retry (RFC 5041 §7.1 check 2: a Send without a receive is a
         * fatal Terminate). */
        if (drive) {
            /* a thread that keeps polling owns the sockets it reads */
            if (uiw_cq_drive(cq, false, own && empty_polls >= UIW_POLL_SPIN))
                got = cq_pop(cq, n, wc, &overflow, &drive, &own);
        }
        /* A thread polling in a loop that keeps finding nothing lets the
         * other runnable threads have the CPU: the progress thread (which
         * alone serves Read and Atomic Requests when the application polls
         * another CQ or none, RFC 5040 §5.2.2, RFC 7306 §5.2.2) and, on the
         * same host, the peer. Without this it waits for the end of the
         * poller's time slice (milliseconds) and a requester's whole ORD
         * window of Reads/Atomics is answered once per slice. */
        if (got == 0 && ++empty_polls > UIW_POLL_SPIN) {
            empty_polls = UIW_POLL_SPIN;
            /* a yielding poller: the progress thread may spin beside it
             * (progress.c "Spinning"); the time of every 32nd yield is
             * close enough (a yield takes about a microsecond) */
            if ((yields++ & 31) == 0)
                atomic_store_explicit(&uiw_last_yield_ns, uiw_now_ns(), memory_order_relaxed);
            sched_yield();
        }
    }
    if (got > 0)
        empty_polls = 0;
    if (got == 0 && overflow)
        return -EOVERFLOW;
    return got;
}

int uiw_op_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
    struct uiw_cq *cq = to_ucq(ibcq);

    uiw_cq_flush_tx(cq);
    if (cq->ibcq.channel)
        uiw_cq_unown(cq); /* the event must come from the progress thread */
    pthread_mutex_lock(&cq->lock);
    if (cq->ibcq.channel)
        atomic_store_explicit(&uiw_last_arm_ns, uiw_now_ns(), memory_order_relaxed);
    if (!solicited_only)
        cq->armed = UIW_CQ_ARM_ALL;
    else if (cq->armed != UIW_CQ_ARM_ALL)
        cq->armed = UIW_CQ_ARM_SOLICITED;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}
