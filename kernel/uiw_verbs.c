/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The verbs objects of a uiwarp device (docs/KERNEL.md, phase 2): PD, CQ,
 * QP, SRQ and MR, as kernel consumers use them through the ib core, with the
 * userspace engine's rules (docs/ENGINE.md) where they apply.
 *
 * Connections and the data path are uiw_cm.c's (phase 3). Here:
 *   - A QP reaches RTS only through the CM, which attaches the stream
 *     (RDMAC verbs Idle -> RTS; the engine's rule): a consumer's move into
 *     RTS fails with -ENOTCONN.
 *   - post_send executes Fast Register (IB_WR_REG_MR) and Local Invalidate
 *     (IB_WR_LOCAL_INV) at once, in INIT and RTR as well (siw and the
 *     engine refuse every send WR before RTS; this is the one extension, so
 *     that a consumer can prepare its MRs); in RTS it queues Send, Send with
 *     Invalidate, RDMA Write and RDMA Read on the send queue ring for the
 *     CM's work item. Other opcodes: -ENOTCONN before RTS, -EOPNOTSUPP in
 *     RTS.
 *   - post_recv queues receives with their SGEs; post_srq_recv queues them
 *     on a shared receive queue, which the Sends of every QP on it take in
 *     posting order (uiw_srq_pop: the limit event); a post wakes the
 *     connections whose Send found it empty (srq->waiters).
 *
 * State machine: the IB verbs table for RC (the engine's, src/engine/qp.c)
 * plus iWARP's INIT -> RTS, with no required attributes (TCP provides the
 * path); an empty mask is a successful no-op (iw_cm's RTR/RTS masks are 0).
 * A new QP is in RESET.
 *
 * Flush: moving to ERR completes every send queue entry, then every queued
 * receive, with IB_WC_WR_FLUSH_ERR. In ERR, post_send and post_recv flush
 * each new WR at once, signalled or not (what ib_drain_qp relies on); a
 * malformed WR is still refused with -EINVAL. In RESET both fail with
 * -EINVAL. A failed local operation completes with its error status
 * (signalled or not), moves the QP to ERR and raises IB_EVENT_QP_ACCESS_ERR;
 * the WRs after it in the same list are flushed.
 *
 * Locks: qp->lock, then cq->lock, then the device's mr_lock; all taken with
 * interrupts off (consumers post from any context). Completion handlers
 * and events are called after the locks are released.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/random.h>
#include <linux/slab.h>

#include "uiw_dev.h"
#include "uiwarp/wire.h"

/* Takes one of the device's max objects of a kind, or -ENOMEM. */
static int obj_get(atomic_t *n, int max)
{
    if (atomic_inc_return(n) > max) {
        atomic_dec(n);
        return -ENOMEM;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * What to do once the locks are released
 * ---------------------------------------------------------------------- */

void uiw_after_add(struct uiw_cq **set, struct uiw_cq *cq)
{
    if (set[0] == cq || set[1] == cq)
        return;
    set[set[0] ? 1 : 0] = cq;
}

void uiw_after_run(struct uiw_qp *qp, struct uiw_after *af)
{
    int i;

    for (i = 0; i < 2; i++) {
        struct uiw_cq *cq = af->overflow[i];

        if (cq) {
            /* IB verbs: a CQ overrun is an asynchronous CQ error */
            struct ib_event ev = {
                .device = cq->base.device,
                .element.cq = &cq->base,
                .event = IB_EVENT_CQ_ERR,
            };

            pr_err_ratelimited("%s: CQ overrun (%u entries): completions lost\n",
                               dev_name(&cq->base.device->dev), cq->cap);
            if (cq->base.event_handler)
                cq->base.event_handler(&ev, cq->base.cq_context);
        }
    }
    for (i = 0; i < 2; i++) {
        struct uiw_cq *cq = af->notify[i];

        if (cq && cq->base.comp_handler)
            cq->base.comp_handler(&cq->base, cq->base.cq_context);
    }
    for (i = 0; i < 2; i++) {
        struct ib_event ev = {
            .device = qp->base.device,
            .element.qp = &qp->base,
            .event = af->qp_event[i],
        };

        if (af->qp_event[i] >= 0 && qp->base.event_handler)
            qp->base.event_handler(&ev, qp->base.qp_context);
    }
}

/* ------------------------------------------------------------------------
 * Protection domains
 * ---------------------------------------------------------------------- */

static int uiw_alloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
    if (udata)
        return -EOPNOTSUPP; /* no userspace provider: the library is that */
    return obj_get(&to_udev(pd->device)->npd, UIW_MAX_PD);
}

static int uiw_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata)
{
    atomic_dec(&to_udev(pd->device)->npd);
    return 0;
}

/* ------------------------------------------------------------------------
 * Completion queues: a ring of struct ib_wc
 * ---------------------------------------------------------------------- */

/* cq->lock held. Appends wc; sets *notify when the CQ was armed for it
 * (IB verbs: NEXT_COMP for any completion, SOLICITED for a solicited or an
 * unsuccessful one). -ENOSPC when the ring is full. */
int uiw_cq_push_locked(struct uiw_cq *cq, const struct ib_wc *wc, bool solicited, bool *notify)
{
    if (cq->count == cq->cap) {
        cq->overflow = true;
        return -ENOSPC;
    }
    cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
    cq->count++;
    if (cq->armed == IB_CQ_NEXT_COMP ||
        (cq->armed == IB_CQ_SOLICITED && (solicited || wc->status != IB_WC_SUCCESS))) {
        cq->armed = 0;
        *notify = true;
    }
    return 0;
}

/* A completion from a path that cannot refuse it (flush): on overrun it is
 * lost and the CQ reports IB_EVENT_CQ_ERR. */
void uiw_cq_add(struct uiw_cq *cq, const struct ib_wc *wc, struct uiw_after *af)
{
    unsigned long fl;
    bool notify = false;
    int rc;

    spin_lock_irqsave(&cq->lock, fl);
    rc = uiw_cq_push_locked(cq, wc, false, &notify);
    spin_unlock_irqrestore(&cq->lock, fl);
    if (rc)
        uiw_after_add(af->overflow, cq);
    if (notify)
        uiw_after_add(af->notify, cq);
}

static int uiw_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
                         struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibcq->device);
    struct uiw_cq *cq = to_ucq(ibcq);
    int rc;

    if (udata)
        return -EOPNOTSUPP;
    if (attr->flags)
        return -EOPNOTSUPP; /* no timestamps, no ignore-overrun */
    if (attr->cqe < 1 || attr->cqe > UIW_MAX_CQE ||
        attr->comp_vector >= ibcq->device->num_comp_vectors)
        return -EINVAL;
    rc = obj_get(&d->ncq, UIW_MAX_CQ);
    if (rc)
        return rc;
    cq->ring = kvcalloc(attr->cqe, sizeof(*cq->ring), GFP_KERNEL);
    if (!cq->ring) {
        atomic_dec(&d->ncq);
        return -ENOMEM;
    }
    spin_lock_init(&cq->lock);
    cq->cap = attr->cqe;
    ibcq->cqe = attr->cqe;
    return 0;
}

static int uiw_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
    struct uiw_cq *cq = to_ucq(ibcq);

    kvfree(cq->ring);
    cq->ring = NULL;
    atomic_dec(&to_udev(ibcq->device)->ncq);
    return 0;
}

static int uiw_poll_cq(struct ib_cq *ibcq, int n, struct ib_wc *wc)
{
    struct uiw_cq *cq = to_ucq(ibcq);
    unsigned long fl;
    int i;

    spin_lock_irqsave(&cq->lock, fl);
    for (i = 0; i < n && cq->count; i++) {
        wc[i] = cq->ring[cq->head];
        cq->head = (cq->head + 1) % cq->cap;
        cq->count--;
    }
    spin_unlock_irqrestore(&cq->lock, fl);
    return i;
}

/* Arms the CQ for the next (solicited) completion. With
 * IB_CQ_REPORT_MISSED_EVENTS, 1 when completions are already waiting (the
 * caller polls again instead of sleeping), as ib_req_notify_cq documents. */
static int uiw_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
    struct uiw_cq *cq = to_ucq(ibcq);
    unsigned long fl;
    int rc = 0;

    spin_lock_irqsave(&cq->lock, fl);
    cq->armed = flags & IB_CQ_SOLICITED_MASK;
    if ((flags & IB_CQ_REPORT_MISSED_EVENTS) && cq->count)
        rc = 1;
    spin_unlock_irqrestore(&cq->lock, fl);
    return rc;
}

/* ------------------------------------------------------------------------
 * Queue pairs: the state machine
 * ---------------------------------------------------------------------- */

#define A(x) IB_QP_##x
#define PATH_RTR                                                                                   \
    (A(AV) | A(PATH_MTU) | A(DEST_QPN) | A(RQ_PSN) | A(MAX_DEST_RD_ATOMIC) | A(MIN_RNR_TIMER) |    \
     A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX))
#define PATH_RTS                                                                                   \
    (A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) | A(SQ_PSN) | A(MAX_QP_RD_ATOMIC) | A(CUR_STATE) |   \
     A(ALT_PATH) | A(ACCESS_FLAGS) | A(MIN_RNR_TIMER) | A(PATH_MIG_STATE))
#define KNOWN_MASK                                                                                 \
    (A(STATE) | A(CUR_STATE) | A(EN_SQD_ASYNC_NOTIFY) | A(ACCESS_FLAGS) | A(PKEY_INDEX) |          \
     A(PORT) | A(QKEY) | A(AV) | A(PATH_MTU) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) |          \
     A(RQ_PSN) | A(MAX_QP_RD_ATOMIC) | A(ALT_PATH) | A(MIN_RNR_TIMER) | A(SQ_PSN) |                \
     A(MAX_DEST_RD_ATOMIC) | A(PATH_MIG_STATE) | A(CAP) | A(DEST_QPN) | A(RATE_LIMIT))
/* the engine's receiver-not-ready limit attributes, also INIT -> INIT and
 * RTS -> RTS (on iWARP the CM, not the consumer, moves a QP into RTS) */
#define IWARP_RNR (A(RNR_RETRY) | A(MIN_RNR_TIMER))
#define QP_ACCESS                                                                                  \
    (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |                      \
     IB_ACCESS_REMOTE_ATOMIC)

struct uiw_transition {
    bool valid;
    u32 allowed; /* attributes besides IB_QP_STATE; none is required */
};

/* [current][next]: RC (IB verbs QP state table, the kernel's
 * ib_modify_qp_is_ok table too: no RESET -> ERR) plus iWARP INIT -> RTS */
static const struct uiw_transition qp_table[IB_QPS_ERR + 1][IB_QPS_ERR + 1] =
    {
        [IB_QPS_RESET] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_INIT] = {true, A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS)},
            },
        [IB_QPS_INIT] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
                [IB_QPS_INIT] = {true, A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS) | IWARP_RNR},
                /* rdma_cm adds IB_QP_PORT to iw_cm's masks */
                [IB_QPS_RTR] = {true, PATH_RTR | A(PORT)},
                [IB_QPS_RTS] = {true, ((PATH_RTR | PATH_RTS) & ~A(CUR_STATE)) | A(PORT)},
            },
        [IB_QPS_RTR] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
                [IB_QPS_RTS] = {true, PATH_RTS | A(PORT)},
            },
        [IB_QPS_RTS] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
                [IB_QPS_RTS] = {true, A(CUR_STATE) | A(ACCESS_FLAGS) | A(ALT_PATH) |
                                          A(PATH_MIG_STATE) | A(MIN_RNR_TIMER) | IWARP_RNR |
                                          A(PORT)},
                [IB_QPS_SQD] = {true, A(EN_SQD_ASYNC_NOTIFY)},
            },
        [IB_QPS_SQD] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
                [IB_QPS_RTS] = {true, A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) |
                                          A(MIN_RNR_TIMER) | A(PATH_MIG_STATE)},
                [IB_QPS_SQD] = {true, A(PORT) | A(AV) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) |
                                          A(MAX_QP_RD_ATOMIC) | A(MAX_DEST_RD_ATOMIC) |
                                          A(ALT_PATH) | A(ACCESS_FLAGS) |
                                          A(PKEY_INDEX) | A(MIN_RNR_TIMER) | A(PATH_MIG_STATE)},
            },
        [IB_QPS_SQE] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
                [IB_QPS_RTS] = {true, A(CUR_STATE) | A(ACCESS_FLAGS)},
            },
        [IB_QPS_ERR] =
            {
                [IB_QPS_RESET] = {true, 0},
                [IB_QPS_ERR] = {true, 0},
            },
};

/* qp->lock held. Every queued receive completes with IB_WC_WR_FLUSH_ERR;
 * the send queue holds nothing (local operations execute at post). A QP
 * on an SRQ raises IB_EVENT_QP_LAST_WQE_REACHED instead (IB verbs: the
 * SRQ's receives stay for the other QPs). */
static int wc_opcode(enum ib_wr_opcode op);

void uiw_qp_error_locked(struct uiw_qp *qp, struct uiw_after *af)
{
    struct uiw_cq *rcq = to_ucq(qp->base.recv_cq);

    struct uiw_cq *scq = to_ucq(qp->base.send_cq);

    qp->state = IB_QPS_ERR;
    /* the send queue in order (sent or not: nothing more will complete
     * them), then the receives */
    while (qp->sq_count) {
        struct uiw_sqe *e = &qp->sq[qp->sq_head];
        struct ib_wc wc = {
            .wr_id = e->wr_id,
            .status = e->err_status ? e->err_status : IB_WC_WR_FLUSH_ERR,
            .opcode = wc_opcode(e->opcode),
            .qp = &qp->base,
        };

        qp->sq_head = (qp->sq_head + 1) % qp->cap.max_send_wr;
        qp->sq_count--;
        uiw_cq_add(scq, &wc, af);
    }
    qp->sq_sent = 0;
    qp->sq_gen++;
    if (qp->ep)
        uiw_cm_qp_kick(qp);
    if (qp->base.srq)
        uiw_after_qp_event(af, IB_EVENT_QP_LAST_WQE_REACHED);
    while (qp->rq_count) {
        struct ib_wc wc = {
            .wr_id = qp->rq[qp->rq_head].wr_id,
            .status = IB_WC_WR_FLUSH_ERR,
            .opcode = IB_WC_RECV,
            .qp = &qp->base,
        };

        qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
        qp->rq_count--;
        uiw_cq_add(rcq, &wc, af);
    }
}

static int qp_modify_locked(struct uiw_qp *qp, const struct ib_qp_attr *attr, int mask_in,
                            struct uiw_after *af)
{
    u32 mask = (u32)mask_in;
    enum ib_qp_state cur = qp->state, next;
    const struct uiw_transition *t;

    if (mask == 0)
        return 0;
    if (mask & ~(u32)KNOWN_MASK)
        return -EINVAL;
    if ((mask & A(CUR_STATE)) && attr->cur_qp_state != cur)
        return -EINVAL;
    next = (mask & A(STATE)) ? attr->qp_state : cur;
    if ((unsigned int)next > IB_QPS_ERR)
        return -EINVAL;
    t = &qp_table[cur][next];
    if (!t->valid || (mask & ~(t->allowed | A(STATE))))
        return -EINVAL;
    if ((mask & A(ACCESS_FLAGS)) && (attr->qp_access_flags & ~QP_ACCESS))
        return -EINVAL;
    if ((mask & A(PORT)) && attr->port_num != 1)
        return -EINVAL;
    if ((mask & A(PKEY_INDEX)) && attr->pkey_index != 0)
        return -EINVAL;
    if ((mask & A(PATH_MTU)) && (attr->path_mtu < IB_MTU_256 || attr->path_mtu > IB_MTU_4096))
        return -EINVAL;
    /* RFC 6581 §9.1: ORD/IRD within what the device negotiates */
    if ((mask & A(MAX_QP_RD_ATOMIC)) && attr->max_rd_atomic > UIW_MPA_DEFAULT_ORD)
        return -EINVAL;
    if ((mask & A(MAX_DEST_RD_ATOMIC)) && attr->max_dest_rd_atomic > UIW_MPA_DEFAULT_IRD)
        return -EINVAL;
    /* iWARP: RTS means a connected stream (RDMAC verbs; RFC 5040 §5); the
     * CM (uiw_cm.c) moves the QP there when it attaches the stream */
    if (next == IB_QPS_RTS && cur != IB_QPS_RTS)
        return -ENOTCONN;

    /* apply (the address vectors are not kept: TCP provides the path) */
    if (mask & A(ACCESS_FLAGS))
        qp->attr.qp_access_flags = attr->qp_access_flags;
    if (mask & A(PKEY_INDEX))
        qp->attr.pkey_index = attr->pkey_index;
    if (mask & A(PATH_MTU))
        qp->attr.path_mtu = attr->path_mtu;
    if (mask & A(PATH_MIG_STATE))
        qp->attr.path_mig_state = attr->path_mig_state;
    if (mask & A(DEST_QPN))
        qp->attr.dest_qp_num = attr->dest_qp_num;
    if (mask & A(RQ_PSN))
        qp->attr.rq_psn = attr->rq_psn;
    if (mask & A(SQ_PSN))
        qp->attr.sq_psn = attr->sq_psn;
    if (mask & A(TIMEOUT))
        qp->attr.timeout = attr->timeout;
    if (mask & A(RETRY_CNT))
        qp->attr.retry_cnt = attr->retry_cnt;
    if (mask & A(RNR_RETRY))
        qp->attr.rnr_retry = attr->rnr_retry;
    if (mask & A(MIN_RNR_TIMER))
        qp->attr.min_rnr_timer = attr->min_rnr_timer;
    if (mask & A(MAX_QP_RD_ATOMIC))
        qp->attr.max_rd_atomic = attr->max_rd_atomic;
    if (mask & A(MAX_DEST_RD_ATOMIC))
        qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & A(EN_SQD_ASYNC_NOTIFY))
        qp->attr.en_sqd_async_notify = attr->en_sqd_async_notify;

    if (next == cur) {
        /* attributes only; ERR -> ERR: nothing is queued */
    } else if (next == IB_QPS_ERR) {
        uiw_qp_error_locked(qp, af);
    } else if (next == IB_QPS_RESET) {
        /* IB verbs: RESET empties the queues without completions */
        qp->rq_head = qp->rq_count = 0;
        qp->sq_head = qp->sq_count = qp->sq_sent = 0;
        qp->sq_gen++;
        qp->state = IB_QPS_RESET;
    } else {
        qp->state = next;
        /* RTS -> SQD with a connection: iw_cm's graceful disconnect (the
         * queued sends go out, then the FIN) */
        if (next == IB_QPS_SQD && qp->ep)
            uiw_cm_qp_kick(qp);
    }
    return 0;
}

static int uiw_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
                         struct ib_udata *udata)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    struct uiw_after af = AFTER_INIT;
    unsigned long fl;
    int rc;

    if (udata)
        return -EOPNOTSUPP;
    spin_lock_irqsave(&qp->lock, fl);
    rc = qp_modify_locked(qp, attr, mask, &af);
    spin_unlock_irqrestore(&qp->lock, fl);
    uiw_after_run(qp, &af);
    return rc;
}

static int uiw_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
                        struct ib_qp_init_attr *init)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    unsigned long fl;

    spin_lock_irqsave(&qp->lock, fl);
    *attr = qp->attr;
    attr->qp_state = attr->cur_qp_state = qp->state;
    attr->cap = qp->cap;
    spin_unlock_irqrestore(&qp->lock, fl);
    memset(init, 0, sizeof(*init));
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = qp->cap;
    init->sq_sig_type = qp->sq_sig_type;
    init->qp_type = IB_QPT_RC;
    init->port_num = 1;
    return 0;
}

static int uiw_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init, struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibqp->device);
    struct uiw_qp *qp = to_uqp(ibqp);
    struct ib_qp_cap *c = &init->cap;
    u32 qpn;
    int rc;

    if (udata)
        return -EOPNOTSUPP;
    if (init->qp_type != IB_QPT_RC)
        return -EOPNOTSUPP; /* iWARP is reliable connected only */
    if (init->create_flags)
        return -EOPNOTSUPP;
    if (!init->send_cq || !init->recv_cq)
        return -EINVAL;
    if (c->max_send_wr > UIW_MAX_QP_WR || c->max_recv_wr > UIW_MAX_QP_WR ||
        c->max_send_sge > UIW_MAX_SGE || c->max_recv_sge > UIW_MAX_SGE ||
        c->max_inline_data > UIW_MAX_INLINE)
        return -EINVAL;
    rc = obj_get(&d->nqp, UIW_MAX_QP);
    if (rc)
        return rc;
    kref_init(&qp->ref);
    init_completion(&qp->freed);
    /* the queues' real sizes go back to the consumer, as for ibv_create_qp */
    c->max_send_wr = max(c->max_send_wr, 1u);
    c->max_send_sge = max(c->max_send_sge, 1u);
    if (init->srq) {
        c->max_recv_wr = c->max_recv_sge = 0; /* receives go to the SRQ */
    } else {
        c->max_recv_wr = max(c->max_recv_wr, 1u);
        c->max_recv_sge = max(c->max_recv_sge, 1u);
        qp->rq = kvcalloc(c->max_recv_wr, sizeof(*qp->rq), GFP_KERNEL);
        if (!qp->rq) {
            rc = -ENOMEM;
            goto err;
        }
    }
    qp->sq = kvcalloc(c->max_send_wr, sizeof(*qp->sq), GFP_KERNEL);
    if (!qp->sq) {
        rc = -ENOMEM;
        goto err;
    }
    qp->cap = *c;
    spin_lock_init(&qp->lock);
    qp->state = IB_QPS_RESET;
    qp->sq_sig_type = init->sq_sig_type;
    qp->attr.port_num = 1;
    qp->attr.path_mtu = IB_MTU_4096;
    rc = xa_alloc_cyclic(&d->qps, &qpn, qp, XA_LIMIT(UIW_FIRST_QPN, 0xffffff), &d->next_qpn,
                         GFP_KERNEL);
    if (rc < 0)
        goto err;
    ibqp->qp_num = qpn;
    return 0;
err:
    kvfree(qp->rq);
    kvfree(qp->sq);
    qp->rq = NULL;
    qp->sq = NULL;
    atomic_dec(&d->nqp);
    return rc;
}

static void qp_release(struct kref *k)
{
    complete(&container_of(k, struct uiw_qp, ref)->freed);
}

void uiw_qp_put(struct uiw_qp *qp)
{
    kref_put(&qp->ref, qp_release);
}

/* iw_cm's get_qp / add_ref / rem_ref hold the QP across a connection; the
 * ib core frees its memory when destroy_qp returns, so that waits for
 * them (iw_cm drops its reference when the connection closes: the
 * connection is closed first). */
static int uiw_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibqp->device);
    struct uiw_qp *qp = to_uqp(ibqp);

    xa_erase(&d->qps, ibqp->qp_num);
    uiw_cm_qp_detach(qp);
    uiw_qp_put(qp);
    wait_for_completion(&qp->freed);
    kvfree(qp->rq);
    kvfree(qp->sq);
    qp->rq = NULL;
    qp->sq = NULL;
    atomic_dec(&d->nqp);
    return 0;
}

/* ------------------------------------------------------------------------
 * Memory regions. STags (RFC 5040 §2.1, RFC 5042 §6.1.1: hard to guess):
 * the upper 24 bits are a random index into the device's MR table, the
 * lower 8 bits the consumer's key (ib_update_fast_reg_key / ib_inc_rkey
 * change it at each Fast Register); lkey == rkey == the STag. Index 0 is
 * never used, so STags 0 and 1 never name an MR (siw's RTR is a zero-length
 * Write to STag 1; Chelsio refuses STag 0), as in the engine.
 * ---------------------------------------------------------------------- */

static int stag_alloc(struct uiw_dev *d, struct uiw_mr *mr)
{
    int i, rc;

    for (i = 0; i < 64; i++) {
        u32 r = get_random_u32();
        u32 idx = r >> 8;

        if (!idx)
            continue;
        rc = xa_insert(&d->mrs, idx, mr, GFP_KERNEL);
        if (rc == -EBUSY)
            continue;
        if (rc)
            return rc;
        mr->stag = r;
        mr->base.lkey = mr->base.rkey = r;
        return 0;
    }
    return -ENOMEM; /* at most 4096 of 2^24 indexes are taken */
}

static struct uiw_mr *mr_new(struct ib_pd *pd, int access, u32 max_pages)
{
    struct uiw_dev *d = to_udev(pd->device);
    struct uiw_mr *mr;
    int rc;

    rc = obj_get(&d->nmr, UIW_MAX_MR);
    if (rc)
        return ERR_PTR(rc);
    mr = kzalloc(sizeof(*mr), GFP_KERNEL);
    if (!mr) {
        rc = -ENOMEM;
        goto err;
    }
    mr->access = access;
    if (max_pages) {
        mr->pages = kcalloc(max_pages, sizeof(u64), GFP_KERNEL);
        mr->reg_pages = kcalloc(max_pages, sizeof(u64), GFP_KERNEL);
        if (!mr->pages || !mr->reg_pages) {
            rc = -ENOMEM;
            goto err;
        }
        mr->max_pages = max_pages;
    }
    rc = stag_alloc(d, mr);
    if (rc)
        goto err;
    return mr;
err:
    if (mr) {
        kfree(mr->pages);
        kfree(mr->reg_pages);
        kfree(mr);
    }
    atomic_dec(&d->nmr);
    return ERR_PTR(rc);
}

/* All of kernel memory (no DMA device: addresses are kernel virtual), valid
 * from the start. ib_alloc_pd asks for one (local write, and remote rights
 * only with IB_PD_UNSAFE_GLOBAL_RKEY) since the device has no local DMA
 * lkey. */
static struct ib_mr *uiw_get_dma_mr(struct ib_pd *pd, int access)
{
    struct uiw_mr *mr = mr_new(pd, access, 0);

    if (IS_ERR(mr))
        return ERR_CAST(mr);
    mr->iova = 0;
    mr->length = U64_MAX;
    mr->valid = true;
    return &mr->base;
}

/* Userspace registrations are the userspace library's (no udata here).
 * The ib core counts a device as a kernel verbs provider, which clients
 * such as rdma_cm require, only when reg_user_mr is among its ops. */
static struct ib_mr *uiw_reg_user_mr(struct ib_pd *pd, u64 start, u64 length, u64 iova, int access,
                                     struct ib_udata *udata)
{
    return ERR_PTR(-EOPNOTSUPP);
}

/* A fast-register MR: invalid until an IB_WR_REG_MR names it. */
static struct ib_mr *uiw_alloc_mr(struct ib_pd *pd, enum ib_mr_type type, u32 max_num_sg)
{
    struct uiw_mr *mr;

    if (type != IB_MR_TYPE_MEM_REG)
        return ERR_PTR(-EOPNOTSUPP); /* no SG gaps, no integrity */
    if (max_num_sg < 1 || max_num_sg > UIW_MAX_FR_PAGES)
        return ERR_PTR(-EINVAL);
    mr = mr_new(pd, 0, max_num_sg);
    if (IS_ERR(mr))
        return ERR_CAST(mr);
    return &mr->base;
}

static int uiw_set_page(struct ib_mr *ibmr, u64 addr)
{
    struct uiw_mr *mr = to_umr(ibmr);

    if (mr->npages == mr->max_pages)
        return -ENOMEM;
    mr->pages[mr->npages++] = addr;
    return 0;
}

/* The page list for the next Fast Register. It may be rebuilt while the MR
 * is still valid (rdma_rw maps before posting Local Invalidate + Fast
 * Register in one list): the registration keeps its own copy.
 * ib_sg_to_pages sets the MR's iova and length. */
static int uiw_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int n, unsigned int *off)
{
    struct uiw_mr *mr = to_umr(ibmr);

    int rc;

    mr->npages = 0;
    rc = ib_sg_to_pages(ibmr, sg, n, off, uiw_set_page);
    if (rc > 0 && ibmr->page_size)
        mr->fbo = ibmr->iova & (ibmr->page_size - 1);
    return rc;
}

static int uiw_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibmr->device);
    struct uiw_mr *mr = to_umr(ibmr);
    unsigned long fl;

    /* lookups (do_local_inv, and the datapath to come) run under mr_lock:
     * once erased under it, nobody holds a pointer to the MR */
    spin_lock_irqsave(&d->mr_lock, fl);
    xa_erase(&d->mrs, mr->stag >> 8);
    spin_unlock_irqrestore(&d->mr_lock, fl);
    kfree(mr->pages);
    kfree(mr->reg_pages);
    kfree(mr);
    atomic_dec(&d->nmr);
    return 0;
}

/* IB_WR_REG_MR, executed at post. A failure is IB's Memory Management
 * Operation Error (IB_WC_MW_BIND_ERR). */
static enum ib_wc_status do_reg_mr(struct uiw_qp *qp, const struct ib_reg_wr *r)
{
    struct uiw_dev *d = to_udev(qp->base.device);
    enum ib_wc_status st = IB_WC_SUCCESS;
    struct uiw_mr *mr;
    unsigned long fl;

    if (!r->mr || r->mr->device != qp->base.device || r->mr->type != IB_MR_TYPE_MEM_REG)
        return IB_WC_MW_BIND_ERR;
    mr = to_umr(r->mr);
    /* RFC 5040 §2.1: an STag is used only by QPs of its PD */
    if (r->mr->pd != qp->base.pd)
        return IB_WC_MW_BIND_ERR;
    /* IB verbs: remote write or atomic rights need local write */
    if ((r->access & (IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_ATOMIC)) &&
        !(r->access & IB_ACCESS_LOCAL_WRITE))
        return IB_WC_MW_BIND_ERR;
    spin_lock_irqsave(&d->mr_lock, fl);
    if ((r->key >> 8) != (mr->stag >> 8) || mr->valid || !mr->npages) {
        /* another MR's index, already valid (IB: invalidate first), or
         * nothing mapped */
        st = IB_WC_MW_BIND_ERR;
    } else {
        /* the page list stays the consumer's (a later Fast Register may
         * reuse it, as with a hardware descriptor list) */
        memcpy(mr->reg_pages, mr->pages, mr->npages * sizeof(u64));
        mr->reg_npages = mr->npages;
        mr->reg_fbo = mr->fbo;
        mr->page_size = r->mr->page_size;
        mr->iova = r->mr->iova;
        mr->length = r->mr->length;
        mr->access = r->access;
        mr->stag = r->key;
        r->mr->lkey = r->mr->rkey = r->key;
        mr->valid = true;
    }
    spin_unlock_irqrestore(&d->mr_lock, fl);
    return st;
}

/* IB_WR_LOCAL_INV, executed at post: the STag must name a fast-register MR
 * of the QP's PD, key included. Invalidating an invalid STag succeeds (as
 * the engine and siw). Unlike the engine's userspace rule, an MR without
 * remote rights may be invalidated: kernel consumers (rdma_rw on iWARP)
 * fast-register local-write-only MRs as Read sinks and invalidate them. */
static enum ib_wc_status do_local_inv(struct uiw_qp *qp, u32 stag)
{
    struct uiw_dev *d = to_udev(qp->base.device);
    enum ib_wc_status st = IB_WC_SUCCESS;
    struct uiw_mr *mr;
    unsigned long fl;

    spin_lock_irqsave(&d->mr_lock, fl);
    mr = xa_load(&d->mrs, stag >> 8);
    if (!mr || mr->stag != stag || mr->base.pd != qp->base.pd ||
        mr->base.type != IB_MR_TYPE_MEM_REG)
        st = IB_WC_LOC_PROT_ERR;
    else
        mr->valid = false;
    spin_unlock_irqrestore(&d->mr_lock, fl);
    return st;
}

/* ------------------------------------------------------------------------
 * Posting
 * ---------------------------------------------------------------------- */

static int wc_opcode(enum ib_wr_opcode op)
{
    switch (op) {
    case IB_WR_SEND:
    case IB_WR_SEND_WITH_IMM:
    case IB_WR_SEND_WITH_INV:
        return IB_WC_SEND;
    case IB_WR_RDMA_WRITE:
    case IB_WR_RDMA_WRITE_WITH_IMM:
        return IB_WC_RDMA_WRITE;
    case IB_WR_RDMA_READ:
    case IB_WR_RDMA_READ_WITH_INV:
        return IB_WC_RDMA_READ;
    case IB_WR_ATOMIC_CMP_AND_SWP:
        return IB_WC_COMP_SWAP;
    case IB_WR_ATOMIC_FETCH_AND_ADD:
        return IB_WC_FETCH_ADD;
    case IB_WR_LOCAL_INV:
        return IB_WC_LOCAL_INV;
    case IB_WR_REG_MR:
        return IB_WC_REG_MR;
    default:
        return -1; /* not an operation of this device */
    }
}

static bool send_wr_ok(const struct uiw_qp *qp, const struct ib_send_wr *wr)
{
    if (wc_opcode(wr->opcode) < 0)
        return false;
    return wr->num_sge >= 0 && (u32)wr->num_sge <= qp->cap.max_send_sge &&
           (!wr->num_sge || wr->sg_list);
}

static int uiw_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
                         const struct ib_send_wr **bad)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    struct uiw_cq *scq = to_ucq(ibqp->send_cq);
    struct uiw_after af = AFTER_INIT;
    unsigned long fl;
    int rc = 0;

    spin_lock_irqsave(&qp->lock, fl);
    for (; wr; wr = wr->next) {
        struct ib_wc wc = {.wr_id = wr->wr_id, .qp = ibqp, .opcode = wc_opcode(wr->opcode)};
        bool sig, notify = false;

        if (!send_wr_ok(qp, wr) || qp->state == IB_QPS_RESET) {
            rc = -EINVAL;
            break;
        }
        if (qp->state == IB_QPS_ERR || qp->state == IB_QPS_SQE) {
            /* verbs: the send queue is in error, new WRs are flushed */
            wc.status = IB_WC_WR_FLUSH_ERR;
            uiw_cq_add(scq, &wc, &af);
            continue;
        }
        sig = (wr->send_flags & IB_SEND_SIGNALED) || qp->sq_sig_type == IB_SIGNAL_ALL_WR;
        if (wr->opcode != IB_WR_REG_MR && wr->opcode != IB_WR_LOCAL_INV) {
            struct uiw_sqe *e;

            /* the data path: only in RTS, i.e. connected (uiw_cm.c) */
            if (qp->state != IB_QPS_RTS) {
                rc = -ENOTCONN;
                break;
            }
            if (wr->opcode != IB_WR_SEND && wr->opcode != IB_WR_SEND_WITH_INV &&
                wr->opcode != IB_WR_SEND_WITH_IMM && wr->opcode != IB_WR_RDMA_WRITE &&
                wr->opcode != IB_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IB_WR_RDMA_READ &&
                wr->opcode != IB_WR_RDMA_READ_WITH_INV && wr->opcode != IB_WR_ATOMIC_CMP_AND_SWP &&
                wr->opcode != IB_WR_ATOMIC_FETCH_AND_ADD) {
                rc = -EOPNOTSUPP; /* masked atomics */
                break;
            }
            /* an atomic's original value: one 8-byte SGE */
            if ((wr->opcode == IB_WR_ATOMIC_CMP_AND_SWP ||
                 wr->opcode == IB_WR_ATOMIC_FETCH_AND_ADD) &&
                (wr->num_sge != 1 || wr->sg_list[0].length != 8)) {
                rc = -EINVAL;
                break;
            }
            /* an RDMA Read Request names one sink STag (RFC 5040 §4.4) */
            if ((wr->opcode == IB_WR_RDMA_READ || wr->opcode == IB_WR_RDMA_READ_WITH_INV) &&
                wr->num_sge > 1) {
                rc = -EINVAL;
                break;
            }
            if (qp->sq_count == qp->cap.max_send_wr) {
                rc = -ENOMEM;
                break;
            }
            e = &qp->sq[(qp->sq_head + qp->sq_count) % qp->cap.max_send_wr];
            memset(e, 0, sizeof(*e));
            e->wr_id = wr->wr_id;
            e->opcode = wr->opcode;
            e->signaled = sig;
            e->solicited = !!(wr->send_flags & IB_SEND_SOLICITED);
            e->num_sge = wr->num_sge;
            if (wr->num_sge)
                memcpy(e->sge, wr->sg_list, wr->num_sge * sizeof(*e->sge));
            if (wr->opcode == IB_WR_RDMA_WRITE || wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM ||
                wr->opcode == IB_WR_RDMA_READ || wr->opcode == IB_WR_RDMA_READ_WITH_INV) {
                e->raddr = rdma_wr(wr)->remote_addr;
                e->rkey = rdma_wr(wr)->rkey;
            }
            if (wr->opcode == IB_WR_SEND_WITH_IMM || wr->opcode == IB_WR_RDMA_WRITE_WITH_IMM)
                e->imm = wr->ex.imm_data;
            if (wr->opcode == IB_WR_ATOMIC_CMP_AND_SWP ||
                wr->opcode == IB_WR_ATOMIC_FETCH_AND_ADD) {
                e->raddr = atomic_wr(wr)->remote_addr;
                e->rkey = atomic_wr(wr)->rkey;
                e->compare_add = atomic_wr(wr)->compare_add;
                e->swap = atomic_wr(wr)->swap;
            }
            if (wr->opcode == IB_WR_SEND_WITH_INV || wr->opcode == IB_WR_RDMA_READ_WITH_INV)
                e->inv_rkey = wr->ex.invalidate_rkey;
            qp->sq_count++;
            uiw_cm_qp_kick(qp);
            continue;
        }
        spin_lock(&scq->lock);
        /* a failure completes even unsignalled: room first, as for a full
         * send queue */
        if (scq->count == scq->cap) {
            spin_unlock(&scq->lock);
            rc = -ENOMEM;
            break;
        }
        if (wr->opcode == IB_WR_REG_MR)
            wc.status = do_reg_mr(qp, reg_wr(wr));
        else
            wc.status = do_local_inv(qp, wr->ex.invalidate_rkey);
        if (sig || wc.status != IB_WC_SUCCESS)
            uiw_cq_push_locked(scq, &wc, false, &notify);
        spin_unlock(&scq->lock);
        if (notify)
            uiw_after_add(af.notify, scq);
        if (wc.status != IB_WC_SUCCESS) {
            pr_debug("qp %u: %s failed: status %d\n", ibqp->qp_num,
                     wr->opcode == IB_WR_REG_MR ? "REG_MR" : "LOCAL_INV", wc.status);
            uiw_after_qp_event(&af, IB_EVENT_QP_ACCESS_ERR);
            uiw_qp_error_locked(qp, &af);
        }
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    if (rc)
        *bad = wr;
    uiw_after_run(qp, &af);
    return rc;
}

static int uiw_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
                         const struct ib_recv_wr **bad)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    struct uiw_after af = AFTER_INIT;
    unsigned long fl;
    int rc = 0;

    if (ibqp->srq) {
        *bad = wr;
        return -EINVAL; /* receives go to the SRQ */
    }
    spin_lock_irqsave(&qp->lock, fl);
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || (u32)wr->num_sge > qp->cap.max_recv_sge ||
            (wr->num_sge && !wr->sg_list) || qp->state == IB_QPS_RESET) {
            rc = -EINVAL;
            break;
        }
        if (qp->state == IB_QPS_ERR) {
            struct ib_wc wc = {
                .wr_id = wr->wr_id,
                .status = IB_WC_WR_FLUSH_ERR,
                .opcode = IB_WC_RECV,
                .qp = ibqp,
            };

            uiw_cq_add(to_ucq(ibqp->recv_cq), &wc, &af);
            continue;
        }
        if (qp->rq_count == qp->cap.max_recv_wr) {
            rc = -ENOMEM;
            break;
        }
        {
            struct uiw_rqe *e = &qp->rq[(qp->rq_head + qp->rq_count) % qp->cap.max_recv_wr];

            e->wr_id = wr->wr_id;
            e->num_sge = wr->num_sge;
            if (wr->num_sge)
                memcpy(e->sge, wr->sg_list, wr->num_sge * sizeof(*e->sge));
        }
        qp->rq_count++;
        if (qp->ep)
            uiw_cm_qp_kick(qp); /* a Send may wait for it */
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    if (rc)
        *bad = wr;
    uiw_after_run(qp, &af);
    return rc;
}

/* ------------------------------------------------------------------------
 * Shared receive queues (as the engine's: resizable, a limit to arm)
 * ---------------------------------------------------------------------- */

static struct uiw_srq *to_usrq(struct ib_srq *s)
{
    return container_of(s, struct uiw_srq, base);
}

static int uiw_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
                          struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibsrq->device);
    struct uiw_srq *srq = to_usrq(ibsrq);
    struct ib_srq_attr *a = &init->attr;
    int rc;

    if (udata)
        return -EOPNOTSUPP;
    if (init->srq_type != IB_SRQT_BASIC)
        return -EOPNOTSUPP; /* no XRC, no tag matching */
    if (a->max_wr < 1 || a->max_wr > UIW_MAX_SRQ_WR || a->max_sge > UIW_MAX_SGE ||
        a->srq_limit > a->max_wr)
        return -EINVAL;
    rc = obj_get(&d->nsrq, UIW_MAX_SRQ);
    if (rc)
        return rc;
    srq->ring = kvcalloc(a->max_wr, sizeof(*srq->ring), GFP_KERNEL);
    if (!srq->ring) {
        atomic_dec(&d->nsrq);
        return -ENOMEM;
    }
    spin_lock_init(&srq->lock);
    INIT_LIST_HEAD(&srq->waiters);
    srq->cap = a->max_wr;
    srq->max_sge = max(a->max_sge, 1u);
    srq->limit = a->srq_limit;
    a->max_sge = srq->max_sge;
    return 0;
}

/* IB_SRQ_MAX_WR resizes (never below what is queued), IB_SRQ_LIMIT arms
 * the limit (at most the size). */
static int uiw_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
                          enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    struct uiw_rqe *ring = NULL, *old = NULL;
    unsigned long fl;
    u32 cap, i;
    int rc = 0;

    if (udata || (mask & ~(IB_SRQ_MAX_WR | IB_SRQ_LIMIT)))
        return -EINVAL;
    if (mask & IB_SRQ_MAX_WR) {
        if (attr->max_wr < 1 || attr->max_wr > UIW_MAX_SRQ_WR)
            return -EINVAL;
        ring = kvcalloc(attr->max_wr, sizeof(*ring), GFP_KERNEL);
        if (!ring)
            return -ENOMEM;
    }
    spin_lock_irqsave(&srq->lock, fl);
    cap = ring ? attr->max_wr : srq->cap;
    if ((ring && attr->max_wr < srq->count) || ((mask & IB_SRQ_LIMIT) && attr->srq_limit > cap)) {
        rc = -EINVAL;
        old = ring;
        goto out;
    }
    if (ring) {
        for (i = 0; i < srq->count; i++)
            ring[i] = srq->ring[(srq->head + i) % srq->cap];
        old = srq->ring;
        srq->ring = ring;
        srq->head = 0;
        srq->cap = attr->max_wr;
    }
    if (mask & IB_SRQ_LIMIT)
        srq->limit = attr->srq_limit;
out:
    spin_unlock_irqrestore(&srq->lock, fl);
    kvfree(old);
    return rc;
}

static int uiw_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    unsigned long fl;

    spin_lock_irqsave(&srq->lock, fl);
    attr->max_wr = srq->cap;
    attr->max_sge = srq->max_sge;
    attr->srq_limit = srq->limit;
    spin_unlock_irqrestore(&srq->lock, fl);
    return 0;
}

bool uiw_srq_pop(struct uiw_srq *srq, struct uiw_rqe *out, struct list_head *wait, bool *queued)
{
    bool got = false, limit = false;
    unsigned long fl;

    spin_lock_irqsave(&srq->lock, fl);
    if (!srq->ring || !srq->count) {
        if (wait && list_empty(wait)) {
            list_add_tail(wait, &srq->waiters);
            *queued = true;
        }
    } else {
        *out = srq->ring[srq->head];
        srq->head = (srq->head + 1) % srq->cap;
        srq->count--;
        got = true;
        /* the limit event once, when fewer than the limit are left; the
         * ULP arms it again with modify_srq (IB_SRQ_LIMIT) */
        if (srq->limit && srq->count < srq->limit) {
            srq->limit = 0;
            limit = true;
        }
    }
    spin_unlock_irqrestore(&srq->lock, fl);
    if (limit && srq->base.event_handler) {
        struct ib_event ev = {
            .device = srq->base.device,
            .element.srq = &srq->base,
            .event = IB_EVENT_SRQ_LIMIT_REACHED,
        };

        srq->base.event_handler(&ev, srq->base.srq_context);
    }
    return got;
}

static int uiw_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    unsigned long fl;

    /* the core refuses to destroy an SRQ that QPs still use, and a QP's
     * connection leaves the list when it lets go of the QP; anything
     * listed all the same is woken (and so unlisted), never left pointing
     * here */
    spin_lock_irqsave(&srq->lock, fl);
    WARN_ON_ONCE(!list_empty(&srq->waiters));
    uiw_cm_srq_wake_locked(srq);
    spin_unlock_irqrestore(&srq->lock, fl);
    kvfree(srq->ring);
    srq->ring = NULL;
    atomic_dec(&to_udev(ibsrq->device)->nsrq);
    return 0;
}

static int uiw_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
                             const struct ib_recv_wr **bad)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    unsigned long fl;
    int rc = 0;

    spin_lock_irqsave(&srq->lock, fl);
    for (; wr; wr = wr->next) {
        if (wr->num_sge < 0 || (u32)wr->num_sge > srq->max_sge || (wr->num_sge && !wr->sg_list)) {
            rc = -EINVAL;
            break;
        }
        if (srq->count == srq->cap) {
            rc = -ENOMEM;
            break;
        }
        {
            struct uiw_rqe *e = &srq->ring[(srq->head + srq->count) % srq->cap];

            e->wr_id = wr->wr_id;
            e->num_sge = wr->num_sge;
            if (wr->num_sge)
                memcpy(e->sge, wr->sg_list, wr->num_sge * sizeof(*e->sge));
        }
        srq->count++;
    }
    /* a Send waiting on an empty SRQ ("receiver not ready") names no QP
     * of its own to kick: the connections that found it empty are listed */
    if (srq->count)
        uiw_cm_srq_wake_locked(srq);
    spin_unlock_irqrestore(&srq->lock, fl);
    if (rc)
        *bad = wr;
    return rc;
}

int uiw_verbs_dev_init(struct uiw_dev *d)
{
    xa_init(&d->mrs);
    xa_init_flags(&d->qps, XA_FLAGS_ALLOC);
    spin_lock_init(&d->mr_lock);
    d->next_qpn = UIW_FIRST_QPN;
    return 0;
}

/* At the device's removal: the core destroyed every object before (its
 * restrack complains otherwise); these counts say what the driver saw. */
void uiw_verbs_dev_fini(struct uiw_dev *d)
{
    int pd = atomic_read(&d->npd), cq = atomic_read(&d->ncq), qp = atomic_read(&d->nqp),
        mr = atomic_read(&d->nmr);

    if (pd || cq || qp || mr)
        pr_err("%s: objects left at removal: pd %d cq %d qp %d mr %d\n", dev_name(&d->ibdev.dev),
               pd, cq, qp, mr);
    xa_destroy(&d->mrs);
    xa_destroy(&d->qps);
}

const struct ib_device_ops uiw_verbs_ops = {
    .alloc_pd = uiw_alloc_pd,
    .dealloc_pd = uiw_dealloc_pd,
    .create_cq = uiw_create_cq,
    .destroy_cq = uiw_destroy_cq,
    .poll_cq = uiw_poll_cq,
    .req_notify_cq = uiw_req_notify_cq,
    .create_qp = uiw_create_qp,
    .modify_qp = uiw_modify_qp,
    .query_qp = uiw_query_qp,
    .destroy_qp = uiw_destroy_qp,
    .post_send = uiw_post_send,
    .post_recv = uiw_post_recv,
    .get_dma_mr = uiw_get_dma_mr,
    .reg_user_mr = uiw_reg_user_mr,
    .alloc_mr = uiw_alloc_mr,
    .map_mr_sg = uiw_map_mr_sg,
    .dereg_mr = uiw_dereg_mr,
    .create_srq = uiw_create_srq,
    .modify_srq = uiw_modify_srq,
    .query_srq = uiw_query_srq,
    .destroy_srq = uiw_destroy_srq,
    .post_srq_recv = uiw_post_srq_recv,
    INIT_RDMA_OBJ_SIZE(ib_pd, uiw_pd, base),
    INIT_RDMA_OBJ_SIZE(ib_cq, uiw_cq, base),
    INIT_RDMA_OBJ_SIZE(ib_qp, uiw_qp, base),
    INIT_RDMA_OBJ_SIZE(ib_srq, uiw_srq, base),
};
