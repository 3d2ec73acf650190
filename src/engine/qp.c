/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * QP and SRQ objects, the QP state machine and flushing.
 *
 * State machine. The transitions and the attributes each may carry are the
 * IB verbs ones for RC (the table the kernel enforces for every verbs
 * provider); the IB path attributes (address vector, PSNs, MTU, timeouts,
 * destination QPN) are accepted where IB allows them and kept only for
 * ibv_query_qp, and none of them is required, because on iWARP the LLP
 * (TCP) provides the path. iWARP differences:
 *   - a QP reaches RTS when the CM attaches the connected socket
 *     (uiw_qp_attach_socket, RDMAC verbs Idle -> RTS); therefore INIT -> RTS
 *     is allowed too, and any move into RTS requires an attached socket
 *     (ENOTCONN otherwise);
 *   - SQE is entered only by the engine, never by ibv_modify_qp (as in IB);
 *   - a modify with an empty mask is a successful no-op (librdmacm issues
 *     those for iWARP QPs, whose CM-provided RTR/RTS attribute masks are 0).
 * A new QP is in RESET, as ibv_create_qp documents.
 *
 * Flush. Moving to ERR completes every queued SQ entry (with its opcode)
 * and every entry of the QP's own RQ (as IBV_WC_RECV) with
 * IBV_WC_WR_FLUSH_ERR, signalled or not, and raises
 * IBV_EVENT_QP_LAST_WQE_REACHED for a QP on an SRQ (whose entries stay in
 * the SRQ). While in ERR, ibv_post_send / ibv_post_recv complete new WRs at
 * once with IBV_WC_WR_FLUSH_ERR (verbs; this is what drain helpers rely
 * on); SQE does the same for the send queue.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <string.h>
#include <unistd.h>

#include "dp_int.h"
#include "pcap_out.h"

static atomic_int nqps, nsrqs;
static atomic_uint next_qpn = 16;

/* Every QP of the process, for uiw_qp_foreach (ibv_dereg_mr). */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uiw_qp *all_head;

static void all_add(struct uiw_qp *qp)
{
    pthread_mutex_lock(&all_lock);
    qp->all_prev = NULL;
    qp->all_next = all_head;
    if (all_head)
        all_head->all_prev = qp;
    all_head = qp;
    pthread_mutex_unlock(&all_lock);
}

static void all_del(struct uiw_qp *qp)
{
    pthread_mutex_lock(&all_lock);
    if (qp->all_prev)
        qp->all_prev->all_next = qp->all_next;
    else
        all_head = qp->all_next;
    if (qp->all_next)
        qp->all_next->all_prev = qp->all_prev;
    qp->all_prev = qp->all_next = NULL;
    pthread_mutex_unlock(&all_lock);
}

void uiw_qp_foreach(void (*fn)(struct uiw_qp *qp, void *arg), void *arg)
{
    pthread_mutex_lock(&all_lock);
    for (struct uiw_qp *qp = all_head; qp; qp = qp->all_next)
        fn(qp, arg);
    pthread_mutex_unlock(&all_lock);
}

struct uiw_qp *uiw_qp_by_num(struct ibv_context *ctx, uint32_t qp_num)
{
    struct uiw_qp *found = NULL;
    pthread_mutex_lock(&all_lock);
    for (struct uiw_qp *qp = all_head; qp; qp = qp->all_next) {
        if (qp->ibqp.qp_num == qp_num && qp->ibqp.context == ctx) {
            atomic_fetch_add(&qp->refs, 1);
            found = qp;
            break;
        }
    }
    pthread_mutex_unlock(&all_lock);
    return found;
}

/* ------------------------------------------------------------------------
 * References
 * ---------------------------------------------------------------------- */

void uiw_qp_get(struct uiw_qp *qp)
{
    atomic_fetch_add(&qp->refs, 1);
}

void uiw_qp_put(struct uiw_qp *qp)
{
    /* ibv_destroy_qp waits (on ibqp.cond) for the count to fall to 1 */
    if (atomic_fetch_sub(&qp->refs, 1) == 2) {
        pthread_mutex_lock(&qp->ibqp.mutex);
        pthread_cond_broadcast(&qp->ibqp.cond);
        pthread_mutex_unlock(&qp->ibqp.mutex);
    }
}

/* ------------------------------------------------------------------------
 * Flush
 * ---------------------------------------------------------------------- */

static void flush_one(struct uiw_qp *qp, struct uiw_cq *cq, uint64_t wr_id,
                      enum ibv_wc_opcode opcode)
{
    struct ibv_wc wc;

    memset(&wc, 0, sizeof(wc));
    wc.wr_id = wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = opcode;
    wc.qp_num = qp->ibqp.qp_num;
    uiw_cq_push(cq, &wc, false);
}

static void flush_sq_locked(struct uiw_qp *qp)
{
    for (unsigned i = 0; i < qp->sq_count; i++) {
        struct uiw_sqe *e = &qp->sq[(qp->sq_head + i) % qp->sq_cap];

        uiw_sqe_put_mrs(e);
        flush_one(qp, qp->scq, e->wr_id, dp_wc_opcode(e->opcode));
    }
    if (qp->sq_cap)
        qp->sq_head = (qp->sq_head + qp->sq_count) % qp->sq_cap;
    qp->sq_count = 0;
    qp->orq_count = 0;
    qp->irq_count = 0;
}

static void flush_rq_locked(struct uiw_qp *qp)
{
    pthread_mutex_lock(&qp->rq_lock);
    qp->rq_open = false; /* later posts take qp->lock and are flushed there */
    for (unsigned i = 0; i < qp->rq_count; i++)
        flush_one(qp, qp->rcq, qp->rq[(qp->rq_head + i) % qp->rq_cap].wr_id, IBV_WC_RECV);
    if (qp->rq_cap)
        qp->rq_head = (qp->rq_head + qp->rq_count) % qp->rq_cap;
    qp->rq_count = 0;
    pthread_mutex_unlock(&qp->rq_lock);
}

void uiw_qp_to_error_locked(struct uiw_qp *qp)
{
    bool was_err = qp->state == IBV_QPS_ERR;

    qp->state = IBV_QPS_ERR;
    qp->ibqp.state = IBV_QPS_ERR;
    qp->st->qp_state = IBV_QPS_ERR;
    flush_sq_locked(qp);
    flush_rq_locked(qp);
    /* IB verbs: a QP on an SRQ reports that it will take no more WQEs */
    if (!was_err && qp->srq)
        uiw_async_event(qp->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, &qp->ibqp);
}

/* Back to RESET: queued work is discarded without completions. */
static void reset_locked(struct uiw_qp *qp)
{
    for (unsigned i = 0; i < qp->sq_count; i++)
        uiw_sqe_put_mrs(&qp->sq[(qp->sq_head + i) % qp->sq_cap]);
    qp->sq_head = qp->sq_count = 0;
    pthread_mutex_lock(&qp->rq_lock);
    qp->rq_open = false;
    qp->rq_head = qp->rq_count = 0;
    qp->rq_hold = false;
    pthread_mutex_unlock(&qp->rq_lock);
    if (qp->srq)
        uiw_srq_unhold(qp);
    qp->orq_head = qp->orq_count = 0;
    qp->irq_head = qp->irq_count = 0;
    memset(qp->tx_msn, 0, sizeof(qp->tx_msn));
    memset(qp->rx_msn, 0, sizeof(qp->rx_msn));
    qp->want_write = false;
    qp->term_sent = qp->term_received = false;
    memset(&qp->term, 0, sizeof(qp->term));
    qp->attr.qp_access_flags = 0;
    qp->attr.en_sqd_async_notify = 0;
    qp->rnr_retry_set = false;
    qp->state = IBV_QPS_RESET;
    qp->ibqp.state = IBV_QPS_RESET;
    qp->st->qp_state = IBV_QPS_RESET;
    qp->st->connected = 0;
}

/* ------------------------------------------------------------------------
 * State machine
 * ---------------------------------------------------------------------- */

static const char *state_str(enum ibv_qp_state s)
{
    static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};

    return (unsigned)s <= IBV_QPS_ERR ? n[s] : "UNKNOWN";
}

#define A(x) IBV_QP_##x
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

/* iWARP: the CM moves a QP into RTS (RTR -> RTS carries RNR_RETRY in IB),
 * so a program could never set the receiver-not-ready limit (qp_rx.c)
 * after connecting; INIT -> INIT and RTS -> RTS also take both values */
#define IWARP_RNR (A(RNR_RETRY) | A(MIN_RNR_TIMER))

struct transition {
    bool valid;
    unsigned allowed; /* attributes besides IBV_QP_STATE; none is required */
};

/* [current][next], RC (IB verbs QP state table) plus iWARP INIT -> RTS */
static const struct transition qp_table[IBV_QPS_ERR + 1][IBV_QPS_ERR + 1] =
    {
        [IBV_QPS_RESET] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_INIT] = {true, A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS)},
            },
        [IBV_QPS_INIT] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
                [IBV_QPS_INIT] = {true, A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS) | IWARP_RNR},
                [IBV_QPS_RTR] = {true, PATH_RTR},
                [IBV_QPS_RTS] = {true, (PATH_RTR | PATH_RTS) & ~A(CUR_STATE)},
            },
        [IBV_QPS_RTR] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
                [IBV_QPS_RTS] = {true, PATH_RTS},
            },
        [IBV_QPS_RTS] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
                [IBV_QPS_RTS] = {true, A(CUR_STATE) | A(ACCESS_FLAGS) | A(ALT_PATH) |
                                           A(PATH_MIG_STATE) | A(MIN_RNR_TIMER) | IWARP_RNR},
                [IBV_QPS_SQD] = {true, A(EN_SQD_ASYNC_NOTIFY)},
            },
        [IBV_QPS_SQD] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
                [IBV_QPS_RTS] = {true, A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) |
                                           A(MIN_RNR_TIMER) | A(PATH_MIG_STATE)},
                [IBV_QPS_SQD] = {true, A(PORT) | A(AV) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) |
                                           A(MAX_QP_RD_ATOMIC) | A(MAX_DEST_RD_ATOMIC) |
                                           A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX) |
                                           A(MIN_RNR_TIMER) | A(PATH_MIG_STATE)},
            },
        [IBV_QPS_SQE] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
                [IBV_QPS_RTS] = {true, A(CUR_STATE) | A(ACCESS_FLAGS)},
            },
        [IBV_QPS_ERR] =
            {
                [IBV_QPS_RESET] = {true, 0},
                [IBV_QPS_ERR] = {true, 0},
            },
};

#define QP_ACCESS                                                                                  \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

int uiw_qp_modify_locked(struct uiw_qp *qp, struct ibv_qp_attr *attr, int mask_in)
{
    unsigned mask = (unsigned)mask_in;
    enum ibv_qp_state cur = qp->state, next;
    const struct transition *t;

    if (mask == 0)
        return 0;
    if (mask & ~(unsigned)KNOWN_MASK)
        return -EINVAL;
    if ((mask & A(CUR_STATE)) && attr->cur_qp_state != cur)
        return -EINVAL;
    next = (mask & A(STATE)) ? attr->qp_state : cur;
    if ((unsigned)next > IBV_QPS_ERR)
        return -EINVAL;
    t = &qp_table[cur][next];
    if (!t->valid || (mask & ~(t->allowed | A(STATE))))
        return -EINVAL;
    /* attribute values */
    if ((mask & A(ACCESS_FLAGS)) && (attr->qp_access_flags & ~(unsigned)QP_ACCESS))
        return -EINVAL;
    if ((mask & A(PORT)) && attr->port_num != 1)
        return -EINVAL;
    if ((mask & A(PKEY_INDEX)) && attr->pkey_index != 0)
        return -EINVAL;
    if ((mask & A(PATH_MTU)) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
        return -EINVAL;
    if ((mask & A(MAX_QP_RD_ATOMIC)) && attr->max_rd_atomic > UIW_MAX_ORD)
        return -EINVAL;
    if ((mask & A(MAX_DEST_RD_ATOMIC)) && attr->max_dest_rd_atomic > UIW_MAX_IRD)
        return -EINVAL;
    /* iWARP: RTS means a connected stream (RDMAC verbs; RFC 5040 §5) */
    if (next == IBV_QPS_RTS && cur != IBV_QPS_RTS && qp->fd < 0)
        return -ENOTCONN;

    /* apply */
    if (mask & A(ACCESS_FLAGS))
        qp->attr.qp_access_flags = attr->qp_access_flags;
    if (mask & A(PORT))
        qp->attr.port_num = attr->port_num;
    if (mask & A(PKEY_INDEX))
        qp->attr.pkey_index = attr->pkey_index;
    if (mask & A(PATH_MTU))
        qp->attr.path_mtu = attr->path_mtu;
    if (mask & A(AV))
        qp->attr.ah_attr = attr->ah_attr;
    if (mask & A(ALT_PATH)) {
        qp->attr.alt_ah_attr = attr->alt_ah_attr;
        qp->attr.alt_pkey_index = attr->alt_pkey_index;
        qp->attr.alt_port_num = attr->alt_port_num;
        qp->attr.alt_timeout = attr->alt_timeout;
    }
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
    if (mask & A(RNR_RETRY)) {
        qp->attr.rnr_retry = attr->rnr_retry;
        qp->rnr_retry_set = true; /* qp_rx.c: the receiver-not-ready limit */
    }
    if (mask & A(MIN_RNR_TIMER))
        qp->attr.min_rnr_timer = attr->min_rnr_timer;
    if (mask & A(MAX_QP_RD_ATOMIC)) {
        qp->attr.max_rd_atomic = attr->max_rd_atomic;
        qp->ord = attr->max_rd_atomic;
    }
    if (mask & A(MAX_DEST_RD_ATOMIC)) {
        qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
        qp->ird = attr->max_dest_rd_atomic;
    }
    if (mask & A(EN_SQD_ASYNC_NOTIFY))
        qp->attr.en_sqd_async_notify = attr->en_sqd_async_notify;

    if (next == cur) {
        /* attribute change only; ERR -> ERR: nothing is queued */
    } else if (next == IBV_QPS_ERR) {
        uiw_qp_to_error_locked(qp);
    } else if (next == IBV_QPS_RESET) {
        reset_locked(qp);
    } else {
        qp->state = next;
        qp->ibqp.state = next;
        qp->st->qp_state = next;
        pthread_mutex_lock(&qp->rq_lock);
        qp->rq_open = true;
        pthread_mutex_unlock(&qp->rq_lock);
        /* SQ drained already: report it now; otherwise the data path does
         * when the last outstanding send completes */
        if (next == IBV_QPS_SQD && qp->attr.en_sqd_async_notify && qp->sq_count == 0)
            uiw_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, &qp->ibqp);
    }
    uiw_dbg(2, "qp %u: %s -> %s (mask 0x%x)", qp->ibqp.qp_num, state_str(cur), state_str(qp->state),
            mask);
    return 0;
}
#undef A

/* ------------------------------------------------------------------------
 * Create / destroy / query / modify
 * ---------------------------------------------------------------------- */

static unsigned roundup_pow2(unsigned v)
{
    unsigned p = 1;

    while (p < v)
        p <<= 1;
    return p;
}

/* which: 0 for qp->scq, 1 for qp->rcq (a QP whose two CQs are one is on
 * that CQ's list once, as 0) */
static int cq_add_qp(struct uiw_cq *cq, struct uiw_qp *qp, unsigned which)
{
    pthread_mutex_lock(&cq->lock);
    struct uiw_qp **qps = uiw_room(cq->qps, cq->nqps, &cq->qps_cap, 4, sizeof(*qps));
    if (!qps) {
        pthread_mutex_unlock(&cq->lock);
        return -ENOMEM;
    }
    cq->qps = qps;
    qp->cq_slot[which] = cq->nqps;
    cq->qps[cq->nqps++] = qp;
    pthread_mutex_unlock(&cq->lock);
    return 0;
}

/* cq->lock held: take qp off cq->qps, moving the last entry into its slot */
static void cq_unlist_locked(struct uiw_cq *cq, struct uiw_qp *qp, unsigned which)
{
    unsigned i = qp->cq_slot[which];

    if (i >= cq->nqps || cq->qps[i] != qp)
        return; /* not on the list (a failed add) */
    struct uiw_qp *last = cq->qps[--cq->nqps];

    cq->qps[i] = last;
    last->cq_slot[last->scq == cq ? 0 : 1] = i;
}

static void cq_del_qp(struct uiw_cq *cq, struct uiw_qp *qp, unsigned which)
{
    pthread_mutex_lock(&qp->lock); /* qp->fd; order qp -> cq */
    pthread_mutex_lock(&cq->lock);
    cq_unlist_locked(cq, qp, which);
    /* out of the CQ's readiness set; a poll that took the QP from it
     * before is done with it when drivers is 0 (progress.c) */
    if (cq->drive_ep >= 0) {
        if (qp->fd >= 0)
            (void)epoll_ctl(cq->drive_ep, EPOLL_CTL_DEL, qp->fd, NULL);
        while (cq->drivers)
            pthread_cond_wait(&cq->drive_cv, &cq->lock);
    }
    pthread_mutex_unlock(&cq->lock);
    pthread_mutex_unlock(&qp->lock);
}

static void qp_free(struct uiw_qp *qp)
{
    for (unsigned i = 0; qp->sq && i < qp->sq_cap; i++)
        uiw_sqe_put_mrs(&qp->sq[i]);
    uiw_qpx_free(qp);
    free(qp->sq);
    free(qp->rq);
    free(qp->inline_buf);
    free(qp->orq);
    free(qp->irq);
    uiw_stat_free(qp->st, qp->st_owner);
    free(qp);
}

UIW_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *ibpd, struct ibv_qp_init_attr *init)
{
    struct uiw_qp *qp;
    struct ibv_qp_cap *cap;
    int err = EINVAL;

    if (!ibpd || !init || !init->send_cq || !init->recv_cq)
        goto fail;
    switch (init->qp_type) {
    case IBV_QPT_RC:
        break;
    case IBV_QPT_UC:
    case IBV_QPT_UD:
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_XRC_SEND:
    case IBV_QPT_XRC_RECV:
    case IBV_QPT_DRIVER:
        err = EOPNOTSUPP; /* as siw: RC only */
        goto fail;
    default:
        goto fail;
    }
    cap = &init->cap;
    if (init->send_cq->context != ibpd->context || init->recv_cq->context != ibpd->context ||
        (init->srq && init->srq->context != ibpd->context))
        goto fail;
    if (cap->max_send_wr > UIW_MAX_QP_WR || cap->max_send_sge > UIW_MAX_SGE ||
        cap->max_inline_data > UIW_MAX_INLINE)
        goto fail;
    if (!init->srq && (cap->max_recv_wr > UIW_MAX_QP_WR || cap->max_recv_sge > UIW_MAX_SGE))
        goto fail;
    if (!uiw_count_take(&nqps, UIW_MAX_QP)) {
        err = ENOMEM;
        goto fail;
    }
    err = ENOMEM;
    qp = calloc(1, sizeof(*qp));
    if (!qp)
        goto fail_count;
    qp->sq_cap = roundup_pow2(cap->max_send_wr ? cap->max_send_wr : 1);
    qp->rq_cap = init->srq ? 0 : roundup_pow2(cap->max_recv_wr ? cap->max_recv_wr : 1);
    qp->sq = calloc(qp->sq_cap, sizeof(*qp->sq));
    qp->rq = qp->rq_cap ? calloc(qp->rq_cap, sizeof(*qp->rq)) : NULL;
    /* Inline data up to UIW_MAX_INLINE is granted whatever was asked (as siw
     * does with its limit): rdma_xclient posts IBV_SEND_INLINE on a QP
     * created with max_inline_data 0. A provider may return larger caps. */
    qp->inline_buf = calloc(qp->sq_cap, UIW_MAX_INLINE);
    /* qp->orq, qp->irq: when first needed (dp_orq_ready, dp_irq_ready) */
    qp->st = uiw_stat_alloc(&qp->st_owner);
    if (!qp->sq || (qp->rq_cap && !qp->rq) || !qp->inline_buf || !qp->st)
        goto fail_free;

    qp->cap.max_send_wr = qp->sq_cap;
    qp->cap.max_recv_wr = qp->rq_cap;
    qp->cap.max_send_sge = cap->max_send_sge ? cap->max_send_sge : 1;
    qp->cap.max_recv_sge = init->srq ? 0 : (cap->max_recv_sge ? cap->max_recv_sge : 1);
    qp->cap.max_inline_data = UIW_MAX_INLINE;

    qp->ctx = to_uctx(ibpd->context);
    qp->pd = to_upd(ibpd);
    qp->scq = to_ucq(init->send_cq);
    qp->rcq = to_ucq(init->recv_cq);
    qp->srq = init->srq ? to_usrq(init->srq) : NULL;
    uiw_mutex_init_adaptive(&qp->lock);
    pthread_mutex_init(&qp->rq_lock, NULL);
    atomic_init(&qp->refs, 1);
    /* As siw and cxgb4: an iWARP QP is in INIT when created (siw has one
     * IDLE state for RESET and INIT; docs/PEERS.md §1).
     * Programs' RESET -> INIT is then INIT -> INIT, which takes the same
     * attributes; posted receives are accepted from the start. */
    qp->state = IBV_QPS_INIT;
    qp->rq_open = true;
    qp->sq_sig_all = init->sq_sig_all != 0;
    qp->fd = -1;
    qp->ord = UIW_MPA_DEFAULT_ORD;
    qp->ird = UIW_MPA_DEFAULT_IRD;
    qp->attr.port_num = 1;
    qp->attr.path_mtu = IBV_MTU_1024;
    qp->attr.max_rd_atomic = (uint8_t)qp->ord;
    qp->attr.max_dest_rd_atomic = (uint8_t)qp->ird;

    struct ibv_qp *q = &qp->ibqp;
    q->context = ibpd->context;
    q->qp_context = init->qp_context;
    q->pd = ibpd;
    q->send_cq = init->send_cq;
    q->recv_cq = init->recv_cq;
    q->srq = init->srq;
    do {
        q->qp_num = atomic_fetch_add(&next_qpn, 1) & 0xffffff; /* 24-bit, as in IB */
    } while (q->qp_num < 2);
    q->handle = q->qp_num;
    q->state = IBV_QPS_INIT;
    q->qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->mutex, NULL);
    pthread_cond_init(&q->cond, NULL);
    qp->st->qp_num = q->qp_num;
    qp->st->qp_state = IBV_QPS_INIT;
    snprintf(qp->st->dev, sizeof(qp->st->dev), "%s", ibpd->context->device->name);
    uiw_stat_publish(qp->st);

    if (cq_add_qp(qp->scq, qp, 0))
        goto fail_locks;
    if (qp->rcq != qp->scq && cq_add_qp(qp->rcq, qp, 1)) {
        cq_del_qp(qp->scq, qp, 0);
        goto fail_locks;
    }
    atomic_fetch_add(&qp->pd->refs, 1);
    if (qp->srq)
        atomic_fetch_add(&qp->srq->refs, 1);
    *cap = qp->cap;
    all_add(qp);
    uiw_dbg(2, "created qp %u sq %u rq %u", q->qp_num, qp->sq_cap, qp->rq_cap);
    return q;

fail_locks:
    pthread_mutex_destroy(&qp->lock);
    pthread_mutex_destroy(&qp->rq_lock);
    pthread_mutex_destroy(&q->mutex);
    pthread_cond_destroy(&q->cond);
fail_free:
    qp_free(qp);
fail_count:
    atomic_fetch_sub(&nqps, 1);
fail:
    errno = err;
    return NULL;
}

/* After rdma_disconnect (our FIN is out): read and discard until the
 * peer's FIN (or an error, or UIW_CLOSE_LINGER_MS), then the caller
 * closes. A socket closed with bytes unread, or one that receives bytes
 * after close() (the kernel's orphan in FIN_WAIT1/2: TCPAbortOnData),
 * answers with an RST, and the RST also discards what is still in our own
 * send queue: data the peer was promised (its WRs completed here when
 * their bytes reached TCP) is lost, and the peer sees ECONNRESET. The peer
 * keeps sending until it reads our FIN (rsockets: credit updates while
 * its reader catches up), and its engine answers the FIN as soon as it
 * reads it (cm.c uiw_cm_llp_closed), so the wait is normally the time the
 * peer needs to read what we sent. */
static void close_after_peer_fin(int fd)
{
    uint64_t end = uiw_now_ns() + (uint64_t)UIW_CLOSE_LINGER_MS * 1000000u;
    char b[4096];

    for (;;) {
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        uint64_t now;
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};

        if (n > 0)
            continue;
        if (n == 0)
            return; /* the peer's FIN: nothing more comes */
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return; /* reset or broken: nothing to protect */
        now = uiw_now_ns();
        if (now >= end) {
            uiw_dbg(1, "socket %d: no FIN from the peer within %u ms of our disconnect", fd,
                    UIW_CLOSE_LINGER_MS);
            return;
        }
        (void)poll(&p, 1, (int)((end - now + 999999u) / 1000000u));
    }
}

UIW_EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    bool rnr_timers, drain;
    int fd;

    if (!qp)
        return EINVAL;
    /* 0. the connection, if any, lets go of the QP (and its reference) */
    uiw_cm_qp_destroyed(qp);
    /* 1. no new poll-driven progress */
    cq_del_qp(qp->scq, qp, 0);
    if (qp->rcq != qp->scq)
        cq_del_qp(qp->rcq, qp, 1);
    /* 2. no progress-thread callbacks */
    pthread_mutex_lock(&qp->lock);
    fd = qp->fd;
    rnr_timers = qp->rnr_timers;
    dp_tx_undefer(qp); /* off the backstop's list before the wait (3.) */
    dp_rx_unown(qp);   /* and off the poll owners' list */
    pthread_mutex_unlock(&qp->lock);
    if (fd >= 0)
        uiw_progress_del(fd);
    /* 2b. no receiver-not-ready kicks: off the SRQ's hold list, timers
     * finished (waits for a running callback; no lock held) */
    if (qp->srq)
        uiw_srq_unhold(qp);
    if (rnr_timers) {
        uiw_timer_fini(&qp->rnr_kick);
        uiw_timer_fini(&qp->rnr_limit);
        uiw_timer_fini(&qp->first_hold);
    }
    /* 3. every other holder is gone */
    pthread_mutex_lock(&ibqp->mutex);
    while (atomic_load(&qp->refs) > 1)
        pthread_cond_wait(&ibqp->cond, &ibqp->mutex);
    pthread_mutex_unlock(&ibqp->mutex);
    /* 4. the data path's private state, then the socket */
    all_del(qp);
    uiw_qp_dp_free(qp);
    pthread_mutex_lock(&qp->lock);
    fd = qp->fd;
    qp->fd = -1;
    uiw_cap_close(qp->pcap, false);
    qp->pcap = NULL;
    drain = qp->close_drain;
    pthread_mutex_unlock(&qp->lock);
    if (fd >= 0) {
        if (drain) /* no callbacks any more (2.): nobody else reads it */
            close_after_peer_fin(fd);
        close(fd);
    }
    /* 4b. no completion of this QP is polled after it is gone */
    uiw_cq_clean(qp->scq, ibqp->qp_num, qp->scq == qp->rcq && qp->srq);
    if (qp->rcq != qp->scq)
        uiw_cq_clean(qp->rcq, ibqp->qp_num, qp->srq != NULL);
    /* 5. rdma-core: wait until every async event handed out was acked */
    uiw_async_settle(qp->ctx, ibqp, &qp->async_reported, &ibqp->mutex, &ibqp->cond,
                     &ibqp->events_completed);

    atomic_fetch_sub(&qp->pd->refs, 1);
    if (qp->srq)
        atomic_fetch_sub(&qp->srq->refs, 1);
    uiw_dbg(2, "destroyed qp %u", ibqp->qp_num);
    pthread_mutex_destroy(&qp->lock);
    pthread_mutex_destroy(&qp->rq_lock);
    pthread_mutex_destroy(&ibqp->mutex);
    pthread_cond_destroy(&ibqp->cond);
    qp_free(qp);
    atomic_fetch_sub(&nqps, 1);
    return 0;
}

UIW_EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask,
                            struct ibv_qp_init_attr *init_attr)
{
    struct uiw_qp *qp = to_uqp(ibqp);

    (void)attr_mask; /* everything is cheap: fill it all */
    if (!qp || !attr || !init_attr)
        return EINVAL;
    pthread_mutex_lock(&qp->lock);
    *attr = qp->attr;
    attr->qp_state = qp->state;
    attr->cur_qp_state = qp->state;
    attr->cap = qp->cap;
    attr->max_rd_atomic = (uint8_t)(qp->ord > 255 ? 255 : qp->ord);
    attr->max_dest_rd_atomic = (uint8_t)(qp->ird > 255 ? 255 : qp->ird);
    attr->sq_draining = qp->state == IBV_QPS_SQD && qp->sq_count > 0;
    memset(init_attr, 0, sizeof(*init_attr));
    init_attr->qp_context = ibqp->qp_context;
    init_attr->send_cq = ibqp->send_cq;
    init_attr->recv_cq = ibqp->recv_cq;
    init_attr->srq = ibqp->srq;
    init_attr->cap = qp->cap;
    init_attr->qp_type = IBV_QPT_RC;
    init_attr->sq_sig_all = qp->sq_sig_all;
    pthread_mutex_unlock(&qp->lock);
    return 0;
}

UIW_EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    int release_fd = -1, ret;

    if (!qp || !attr)
        return EINVAL;
    pthread_mutex_lock(&qp->lock);
    ret = uiw_qp_modify_locked(qp, attr, attr_mask);
    if (!ret && (attr_mask & IBV_QP_STATE) && qp->fd >= 0) {
        if (attr->qp_state == IBV_QPS_ERR) {
            /* the stream is over: the peer sees the close, the progress
             * thread the end of the socket */
            shutdown(qp->fd, SHUT_RDWR);
        } else if (attr->qp_state == IBV_QPS_RESET) {
            shutdown(qp->fd, SHUT_RDWR);
            uiw_cq_drive_del(qp->scq, qp);
            if (qp->rcq != qp->scq)
                uiw_cq_drive_del(qp->rcq, qp);
            dp_tx_undefer(qp);
            dp_rx_unown(qp);
            release_fd = qp->fd;
            qp->fd = -1;
            uiw_cap_close(qp->pcap, false);
            qp->pcap = NULL;
        }
    }
    pthread_mutex_unlock(&qp->lock);
    if (release_fd >= 0) {
        /* RESET: the stream is gone; a new connection attaches afresh */
        uiw_progress_del(release_fd);
        uiw_qp_dp_free(qp);
        close(release_fd);
    }
    return -ret;
}

/* ------------------------------------------------------------------------
 * Posting (context ops)
 * ---------------------------------------------------------------------- */

int uiw_op_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    struct ibv_send_wr *dummy;
    int ret;

    if (!bad)
        bad = &dummy; /* misuse: still an errno, not a crash */
    pthread_mutex_lock(&qp->lock);
    ret = uiw_qp_post_send_any_locked(qp, wr, bad);
    pthread_mutex_unlock(&qp->lock);
    return ret;
}

/* The form of a send WR, checked by every post path (qp_tx.c in RTS, the
 * flush below): a supported opcode and a usable SGE list. */
bool dp_send_wr_form_ok(const struct uiw_qp *qp, const struct ibv_send_wr *wr)
{
    switch (wr->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW:
        break;
    default:
        return false;
    }
    if (wr->opcode == IBV_WR_BIND_MW && (!wr->bind_mw.mw || wr->num_sge))
        return false; /* a bind names a window and carries no data */
    return wr->num_sge >= 0 && (unsigned)wr->num_sge <= qp->cap.max_send_sge &&
           wr->num_sge <= UIW_MAX_SGE && (!wr->num_sge || wr->sg_list);
}

/* The checks ibv_post_send makes on a WR in RTS (qp_tx.c), for one that is
 * flushed at once. */
static bool send_wr_ok(const struct uiw_qp *qp, const struct ibv_send_wr *wr)
{
    uint64_t len = 0;

    if (!dp_send_wr_form_ok(qp, wr))
        return false;
    for (int i = 0; i < wr->num_sge; i++)
        len += wr->sg_list[i].length;
    return !(wr->send_flags & IBV_SEND_INLINE) || wr->opcode == IBV_WR_RDMA_READ ||
           wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
           wr->opcode == IBV_WR_LOCAL_INV || wr->opcode == IBV_WR_BIND_MW || len <= UIW_MAX_INLINE;
}

/* Also the ibv_wr_* API's wr_complete (verbs_ex.c), which holds the lock. */
int uiw_qp_post_send_any_locked(struct uiw_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int ret = 0;

    switch (qp->state) {
    case IBV_QPS_RTS:
        ret = -uiw_qp_post_send_locked(qp, wr, bad);
        break;
    case IBV_QPS_ERR:
    case IBV_QPS_SQE:
        /* verbs: the send queue is in error, new WRs are flushed at once;
         * a malformed one is still refused (as in RTS) */
        for (; wr; wr = wr->next) {
            if (!send_wr_ok(qp, wr)) {
                ret = EINVAL;
                *bad = wr;
                break;
            }
            flush_one(qp, qp->scq, wr->wr_id, dp_wc_opcode(wr->opcode));
        }
        break;
    case IBV_QPS_RESET:
        ret = EINVAL;
        *bad = wr;
        break;
    default:
        ret = ENOTCONN; /* as siw: sends only on a connected QP */
        *bad = wr;
        break;
    }
    return ret;
}

/* Receiver not ready (qp_rx.c): the receive path waits for a receive and
 * one was just posted (or a post failed: kicking costs one wake-up).
 * rq_lock held. */
static void rq_kick_locked(struct uiw_qp *qp)
{
    if (qp->rq_hold && qp->rq_count) {
        qp->rq_hold = false;
        uiw_timer_arm(&qp->rnr_kick, 0);
    }
}

/* ------------------------------------------------------------------------
 * Receive queues: the QP's own and the shared ones (SRQ)
 * ---------------------------------------------------------------------- */

/* qp->rq_lock held (qp->lock need not be) */
/* Append a list of receive WRs to a ring (the QP's RQ or an SRQ): 0, or
 * -EINVAL / -ENOMEM with *bad at the first WR not taken. */
static int ring_post(struct uiw_rqe *ring, unsigned cap, unsigned head, unsigned *count,
                     unsigned max_sge, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int ret = 0;

    for (; wr; wr = wr->next) {
        struct uiw_rqe *e;
        uint64_t len = 0;

        if (wr->num_sge < 0 || (unsigned)wr->num_sge > max_sge || wr->num_sge > UIW_MAX_SGE ||
            (wr->num_sge && !wr->sg_list)) {
            ret = -EINVAL;
            break;
        }
        if (*count >= cap) {
            ret = -ENOMEM;
            break;
        }
        e = &ring[(head + *count) % cap];
        e->wr_id = wr->wr_id;
        e->num_sge = wr->num_sge;
        for (int i = 0; i < wr->num_sge; i++) {
            e->sge[i] = wr->sg_list[i];
            len += wr->sg_list[i].length;
        }
        e->length = len;
        (*count)++;
    }
    if (ret && bad)
        *bad = wr;
    return ret;
}

/* qp->rq_lock held (qp->lock need not be) */
int uiw_qp_post_recv_locked(struct uiw_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    if (qp->srq) {
        *bad = wr;
        return -EINVAL;
    }
    return ring_post(qp->rq, qp->rq_cap, qp->rq_head, &qp->rq_count, qp->cap.max_recv_sge, wr, bad);
}

int uiw_op_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    struct ibv_recv_wr *dummy;
    int ret = 0;

    if (!bad)
        bad = &dummy; /* misuse: still an errno, not a crash */
    if (qp->srq) {
        *bad = wr;
        return EINVAL; /* receives go to the SRQ */
    }
    /* Usual case: append under rq_lock only. The receive path holds
     * qp->lock while it drains the socket; a poster waiting for it would
     * see its receive arrive after the peer's next Send, which then has to
     * wait for it (receiver not ready, qp_rx.c) or, in strict mode, gets
     * a fatal Terminate (RFC 5041 §7.1 check 2, error type 0x2 code 0x02,
     * "Invalid MSN - no buffer available"). */
    pthread_mutex_lock(&qp->rq_lock);
    if (qp->rq_open) {
        ret = -uiw_qp_post_recv_locked(qp, wr, bad);
        rq_kick_locked(qp);
        pthread_mutex_unlock(&qp->rq_lock);
        return ret;
    }
    pthread_mutex_unlock(&qp->rq_lock);
    pthread_mutex_lock(&qp->lock);
    switch (qp->state) {
    case IBV_QPS_RESET:
        ret = EINVAL;
        *bad = wr;
        break;
    case IBV_QPS_ERR:
        for (; wr; wr = wr->next)
            flush_one(qp, qp->rcq, wr->wr_id, IBV_WC_RECV);
        break;
    default:
        pthread_mutex_lock(&qp->rq_lock);
        ret = -uiw_qp_post_recv_locked(qp, wr, bad);
        rq_kick_locked(qp);
        pthread_mutex_unlock(&qp->rq_lock);
        break;
    }
    pthread_mutex_unlock(&qp->lock);
    return ret;
}

int uiw_op_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    int ret = 0;

    pthread_mutex_lock(&srq->lock);
    ret = -ring_post(srq->ring, srq->cap, srq->head, &srq->count, srq->max_sge, wr, bad);
    /* receiver not ready: every QP waiting for a receive gets a look */
    while (srq->count && srq->hold_head) {
        struct uiw_qp *q = srq->hold_head;

        srq->hold_head = q->srq_hold_next;
        if (srq->hold_head)
            srq->hold_head->srq_hold_prev = NULL;
        q->srq_hold_next = q->srq_hold_prev = NULL;
        q->srq_holding = false;
        uiw_timer_arm(&q->rnr_kick, 0);
    }
    pthread_mutex_unlock(&srq->lock);
    return ret;
}

/* ------------------------------------------------------------------------
 * Shared receive queues
 * ---------------------------------------------------------------------- */

static struct uiw_rqe *srq_ring_alloc(unsigned n)
{
    return calloc(n, sizeof(struct uiw_rqe));
}

UIW_EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *ibpd, struct ibv_srq_init_attr *init)
{
    struct uiw_srq *srq;

    if (!ibpd || !init || init->attr.max_wr < 1 || init->attr.max_wr > UIW_MAX_SRQ_WR ||
        init->attr.max_sge > UIW_MAX_SGE) {
        errno = EINVAL;
        return NULL;
    }
    if (!uiw_count_take(&nsrqs, UIW_MAX_SRQ))
        return NULL;
    srq = calloc(1, sizeof(*srq));
    if (srq)
        srq->ring = srq_ring_alloc(init->attr.max_wr);
    if (!srq || !srq->ring) {
        free(srq);
        atomic_fetch_sub(&nsrqs, 1);
        errno = ENOMEM;
        return NULL;
    }
    srq->pd = to_upd(ibpd);
    pthread_mutex_init(&srq->lock, NULL);
    srq->cap = init->attr.max_wr;
    srq->max_sge = init->attr.max_sge ? init->attr.max_sge : 1;
    srq->limit = 0; /* ibv_create_srq ignores srq_limit */
    srq->ctx = to_uctx(ibpd->context);
    atomic_init(&srq->refs, 0);
    srq->ibsrq.context = ibpd->context;
    srq->ibsrq.srq_context = init->srq_context;
    srq->ibsrq.pd = ibpd;
    pthread_mutex_init(&srq->ibsrq.mutex, NULL);
    pthread_cond_init(&srq->ibsrq.cond, NULL);
    init->attr.max_wr = srq->cap;
    init->attr.max_sge = srq->max_sge;
    atomic_fetch_add(&srq->pd->refs, 1);
    return &srq->ibsrq;
}

UIW_EXPORT int ibv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
    struct uiw_srq *srq = to_usrq(ibsrq);
    struct uiw_rqe *ring = NULL;
    int ret = 0;

    if (!srq || !attr || (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)))
        return EINVAL;
    if (mask & IBV_SRQ_MAX_WR) {
        if (attr->max_wr < 1 || attr->max_wr > UIW_MAX_SRQ_WR)
            return EINVAL;
        ring = srq_ring_alloc(attr->max_wr);
        if (!ring)
            return ENOMEM;
    }
    pthread_mutex_lock(&srq->lock);
    unsigned cap = ring ? attr->max_wr : srq->cap;
    if ((ring && attr->max_wr < srq->count) || ((mask & IBV_SRQ_LIMIT) && attr->srq_limit > cap)) {
        ret = EINVAL;
        goto out;
    }
    if (ring) {
        for (unsigned i = 0; i < srq->count; i++)
            ring[i] = srq->ring[(srq->head + i) % srq->cap];
        free(srq->ring);
        srq->ring = ring;
        srq->head = 0;
        srq->cap = attr->max_wr;
        ring = NULL;
    }
    /* arm: IBV_EVENT_SRQ_LIMIT_REACHED once the count drops below it */
    if (mask & IBV_SRQ_LIMIT)
        srq->limit = attr->srq_limit;
out:
    pthread_mutex_unlock(&srq->lock);
    free(ring);
    return ret;
}

UIW_EXPORT int ibv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    struct uiw_srq *srq = to_usrq(ibsrq);

    if (!srq || !attr)
        return EINVAL;
    pthread_mutex_lock(&srq->lock);
    attr->max_wr = srq->cap;
    attr->max_sge = srq->max_sge;
    attr->srq_limit = srq->limit;
    pthread_mutex_unlock(&srq->lock);
    return 0;
}

UIW_EXPORT int ibv_destroy_srq(struct ibv_srq *ibsrq)
{
    struct uiw_srq *srq = to_usrq(ibsrq);

    if (!srq)
        return EINVAL;
    if (atomic_load(&srq->refs) > 0)
        return EBUSY;
    uiw_async_settle(srq->ctx, ibsrq, &srq->async_reported, &ibsrq->mutex, &ibsrq->cond,
                     &ibsrq->events_completed);
    atomic_fetch_sub(&srq->pd->refs, 1);
    pthread_mutex_destroy(&srq->lock);
    pthread_mutex_destroy(&ibsrq->mutex);
    pthread_cond_destroy(&ibsrq->cond);
    free(srq->ring);
    free(srq);
    atomic_fetch_sub(&nsrqs, 1);
    return 0;
}

void uiw_srq_unhold(struct uiw_qp *qp)
{
    struct uiw_srq *srq = qp->srq;

    if (!srq)
        return;
    pthread_mutex_lock(&srq->lock);
    if (qp->srq_holding) {
        if (qp->srq_hold_prev)
            qp->srq_hold_prev->srq_hold_next = qp->srq_hold_next;
        else
            srq->hold_head = qp->srq_hold_next;
        if (qp->srq_hold_next)
            qp->srq_hold_next->srq_hold_prev = qp->srq_hold_prev;
        qp->srq_hold_next = qp->srq_hold_prev = NULL;
        qp->srq_holding = false;
    }
    pthread_mutex_unlock(&srq->lock);
}

bool uiw_srq_take(struct uiw_srq *srq, struct uiw_rqe *out, struct uiw_qp *waiter)
{
    bool got = false;

    pthread_mutex_lock(&srq->lock);
    if (!srq->count && waiter && !waiter->srq_holding) {
        waiter->srq_holding = true;
        waiter->srq_hold_prev = NULL;
        waiter->srq_hold_next = srq->hold_head;
        if (srq->hold_head)
            srq->hold_head->srq_hold_prev = waiter;
        srq->hold_head = waiter;
    }
    if (srq->count) {
        *out = srq->ring[srq->head];
        srq->head = (srq->head + 1) % srq->cap;
        srq->count--;
        got = true;
        if (srq->limit && srq->count < srq->limit) {
            srq->limit = 0; /* one event per arming */
            uiw_async_event(srq->ctx, IBV_EVENT_SRQ_LIMIT_REACHED, &srq->ibsrq);
        }
    }
    pthread_mutex_unlock(&srq->lock);
    return got;
}
