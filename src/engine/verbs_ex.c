/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The extended verbs that applications reach through struct verbs_context
 * (PEERS.md §10): ibv_create_cq_ex with the start/next/end_poll and
 * ibv_wc_read_* interface, ibv_create_qp_ex with the ibv_wr_* work request
 * builder (ibv_qp_to_qp_ex), ibv_create_srq_ex.
 *
 * CQ ex. The extended CQ is an ordinary CQ (struct ibv_cq is the prefix of
 * struct ibv_cq_ex, both are in a union at the start of struct uiw_cq), so
 * ibv_poll_cq works on it too. start_poll/next_poll pop one completion
 * into cq->ex_wc (with poll-driven progress when the ring is empty, as
 * ibv_poll_cq) and the read_* callbacks read it. As in rdma-core's
 * providers a successful start_poll holds a per-CQ lock until end_poll
 * (not with IBV_CREATE_CQ_ATTR_SINGLE_THREADED), so concurrent pollers of
 * one CQ do not mix their current entries; a start_poll that fails
 * (ENOENT: empty) holds nothing and must not be followed by end_poll.
 * The wc_flags of struct ibv_wc (IBV_WC_STANDARD_FLAGS) are supported;
 * timestamps, CVLAN, flow tag and TM info are not (EOPNOTSUPP).
 *
 * QP ex. A QP created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS gets a builder
 * (struct uiw_qpx). wr_start takes the builder's lock (serialising
 * builders on one QP; the QP lock itself is not held, so the progress
 * thread is never kept waiting); each wr_<op> starts a WR from qp->wr_id
 * and qp->wr_flags, the wr_set_* calls give it its data (inline data is
 * copied at once). wr_complete posts the batch as one ibv_send_wr chain
 * under qp->lock through uiw_qp_post_send_any_locked (same state handling
 * as ibv_post_send) after checking that all of it fits the send queue, so
 * a batch is posted whole or not at all; the first error of the batch
 * (EINVAL misuse, ENOMEM too many WRs, EOPNOTSUPP unsupported operation)
 * discards it and is wr_complete's return value. wr_abort discards.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* ------------------------------------------------------------------------
 * Extended CQ
 * ---------------------------------------------------------------------- */

#define UIW_CQ_EX_WC_FLAGS ((uint64_t)IBV_WC_STANDARD_FLAGS)

static struct uiw_cq *cqx_of(struct ibv_cq_ex *cx)
{
    return (struct uiw_cq *)(void *)cx;
}

static bool cqx_locked(const struct uiw_cq *cq)
{
    return !(cq->ex_create_flags & IBV_CREATE_CQ_ATTR_SINGLE_THREADED);
}

static int cqx_pop(struct uiw_cq *cq)
{
    int n = uiw_op_poll_cq(&cq->ibcq, 1, &cq->ex_wc);

    if (n == 1) {
        cq->ibcqx.status = cq->ex_wc.status;
        cq->ibcqx.wr_id = cq->ex_wc.wr_id;
        return 0;
    }
    return n == 0 ? ENOENT : -n; /* -EOVERFLOW: the CQ is in error */
}

static int cqx_start_poll(struct ibv_cq_ex *cx, struct ibv_poll_cq_attr *attr)
{
    struct uiw_cq *cq = cqx_of(cx);
    int ret;

    if (attr && attr->comp_mask)
        return EINVAL;
    uiw_cq_flush_tx(cq); /* coalesced WRs (qp_tx.c), as ibv_poll_cq */
    if (cqx_locked(cq))
        pthread_mutex_lock(&cq->ex_lock);
    ret = cqx_pop(cq);
    if (ret && cqx_locked(cq))
        pthread_mutex_unlock(&cq->ex_lock);
    return ret;
}

static int cqx_next_poll(struct ibv_cq_ex *cx)
{
    return cqx_pop(cqx_of(cx));
}

static void cqx_end_poll(struct ibv_cq_ex *cx)
{
    struct uiw_cq *cq = cqx_of(cx);

    if (cqx_locked(cq))
        pthread_mutex_unlock(&cq->ex_lock);
}

/* The read_* accessors: fields of the completion start_poll/next_poll
 * made current (imm_data and invalidated_rkey share the storage, as in
 * struct ibv_wc). */
#define CQX_READ(type, field)                                                                      \
    static type cqx_read_##field(struct ibv_cq_ex *cx)                                             \
    {                                                                                              \
        return cqx_of(cx)->ex_wc.field;                                                            \
    }
CQX_READ(enum ibv_wc_opcode, opcode)
CQX_READ(uint32_t, vendor_err)
CQX_READ(uint32_t, byte_len)
CQX_READ(__be32, imm_data)
CQX_READ(uint32_t, qp_num)
CQX_READ(uint32_t, src_qp)
CQX_READ(unsigned int, wc_flags)
CQX_READ(uint32_t, slid)
CQX_READ(uint8_t, sl)
CQX_READ(uint8_t, dlid_path_bits)

/* Never requested successfully (creation refuses those wc_flags); present
 * so a program that calls them anyway does not jump to NULL. */
static uint64_t cqx_read_u64_none(struct ibv_cq_ex *cx)
{
    (void)cx;
    return 0;
}

static uint16_t cqx_read_cvlan(struct ibv_cq_ex *cx)
{
    (void)cx;
    return 0;
}

static uint32_t cqx_read_flow_tag(struct ibv_cq_ex *cx)
{
    (void)cx;
    return 0;
}

static void cqx_read_tm_info(struct ibv_cq_ex *cx, struct ibv_wc_tm_info *tm)
{
    (void)cx;
    if (tm)
        memset(tm, 0, sizeof(*tm));
}

/* The extended CQ's members after its ibv_cq prefix (from comp_mask on). */
static const struct ibv_cq_ex cqx_ops = {
    .status = IBV_WC_SUCCESS,
    .start_poll = cqx_start_poll,
    .next_poll = cqx_next_poll,
    .end_poll = cqx_end_poll,
    .read_opcode = cqx_read_opcode,
    .read_vendor_err = cqx_read_vendor_err,
    .read_byte_len = cqx_read_byte_len,
    .read_imm_data = cqx_read_imm_data,
    .read_qp_num = cqx_read_qp_num,
    .read_src_qp = cqx_read_src_qp,
    .read_wc_flags = cqx_read_wc_flags,
    .read_slid = cqx_read_slid,
    .read_sl = cqx_read_sl,
    .read_dlid_path_bits = cqx_read_dlid_path_bits,
    .read_completion_ts = cqx_read_u64_none,
    .read_cvlan = cqx_read_cvlan,
    .read_flow_tag = cqx_read_flow_tag,
    .read_tm_info = cqx_read_tm_info,
    .read_completion_wallclock_ns = cqx_read_u64_none,
};

struct ibv_cq_ex *uiw_op_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *a)
{
    struct ibv_cq *ibcq;
    struct uiw_cq *cq;
    uint32_t flags = 0;

    if (!a ||
        (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))) {
        errno = EINVAL;
        return NULL;
    }
    if (a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS)
        flags = a->flags;
    /* no parent domains; overrun is always a CQ error here */
    if (((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && a->parent_domain) ||
        (flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED) ||
        (a->wc_flags & ~UIW_CQ_EX_WC_FLAGS)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (a->cqe > INT32_MAX || a->comp_vector > INT32_MAX) {
        errno = EINVAL;
        return NULL;
    }
    ibcq = ibv_create_cq(c, (int)a->cqe, a->cq_context, a->channel, (int)a->comp_vector);
    if (!ibcq)
        return NULL;
    cq = to_ucq(ibcq);
    pthread_mutex_init(&cq->ex_lock, NULL);
    cq->ex_create_flags = flags;

    /* the ibv_cq prefix is ibv_create_cq's; the rest is the poll API */
    struct ibv_cq_ex *x = &cq->ibcqx;
    const size_t off = offsetof(struct ibv_cq_ex, comp_mask);
    memcpy((char *)x + off, (const char *)&cqx_ops + off, sizeof(*x) - off);
    return x;
}

/* ------------------------------------------------------------------------
 * Extended QP: the ibv_wr_* builder
 * ---------------------------------------------------------------------- */

#define UIW_QP_EX_SEND_OPS                                                                         \
    ((uint64_t)(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |                   \
                IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |    \
                IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |          \
                IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV))

struct uiw_qpx {
    pthread_mutex_t lock;   /* held from wr_start to wr_complete / wr_abort */
    atomic_uintptr_t owner; /* the holder's thread_id(), 0 when free */
    /* WRs of the batch; the SGEs of WR i follow those of WRs 0..i-1 in
     * sge[]. An inline WR has one SGE whose addr is an offset into inl[]
     * (converted to a pointer by wr_complete: the arrays may move). The
     * arrays outlive a batch; b is the batch, zeroed at its start and end. */
    struct ibv_send_wr *wr;
    size_t wr_cap;
    struct ibv_sge *sge;
    size_t sge_cap;
    uint8_t *inl;
    size_t inl_cap;
    struct {
        int err;          /* first error of the batch */
        unsigned n;       /* WRs in wr[] */
        unsigned nsge;    /* SGEs in sge[] */
        size_t ninl;      /* bytes in inl[] */
        unsigned cur_sge; /* first SGE of the last WR */
        size_t cur_inl;   /* first inline byte of the last WR */
    } b;
};

static struct uiw_qp *qpx_qp(struct ibv_qp_ex *ix)
{
    return (struct uiw_qp *)(void *)ix;
}

/* A cheap identity of the calling thread: a thread-local's address. */
static uintptr_t thread_id(void)
{
    static _Thread_local char anchor;

    return (uintptr_t)&anchor;
}

/* Called by the thread between its wr_start and wr_complete / wr_abort. */
static bool qpx_owned(struct uiw_qpx *x)
{
    return atomic_load_explicit(&x->owner, memory_order_relaxed) == thread_id();
}

static void qpx_fail(struct uiw_qpx *x, int err)
{
    if (!x->b.err)
        x->b.err = err;
}

/* Room for `need` elements in the array p of *cap: the (possibly moved)
 * array, or NULL (p is then unchanged). */
static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 16;
    void *n;

    if (p && need <= *cap)
        return p;
    while (c < need)
        c *= 2;
    n = realloc(p, c * elem);
    if (n)
        *cap = c;
    return n;
}

/* Start a WR of the batch; NULL (error recorded) if it cannot be. */
static struct ibv_send_wr *qpx_new(struct ibv_qp_ex *ix, enum ibv_wr_opcode op)
{
    struct uiw_qp *qp = qpx_qp(ix);
    struct uiw_qpx *x = qp->qpx;
    struct ibv_send_wr *w;

    if (!qpx_owned(x) || x->b.err)
        return NULL;
    if (x->b.n >= qp->cap.max_send_wr) {
        qpx_fail(x, ENOMEM); /* more than the send queue can ever hold */
        return NULL;
    }
    w = grow(x->wr, &x->wr_cap, (size_t)x->b.n + 1, sizeof(*x->wr));
    if (!w) {
        qpx_fail(x, ENOMEM);
        return NULL;
    }
    x->wr = w;
    w = &x->wr[x->b.n++];
    memset(w, 0, sizeof(*w));
    w->wr_id = ix->wr_id;
    w->opcode = op;
    /* inline comes from wr_set_inline_data*, not from the flag */
    w->send_flags = ix->wr_flags & ~(unsigned)IBV_SEND_INLINE;
    x->b.cur_sge = x->b.nsge;
    x->b.cur_inl = x->b.ninl;
    return w;
}

/* The WR the wr_set_* calls apply to: the last one, with its data reset. */
static struct ibv_send_wr *qpx_cur(struct ibv_qp_ex *ix)
{
    struct uiw_qpx *x = qpx_qp(ix)->qpx;
    struct ibv_send_wr *w;

    if (!qpx_owned(x) || x->b.err)
        return NULL;
    if (!x->b.n) {
        qpx_fail(x, EINVAL); /* no wr_<op> before it */
        return NULL;
    }
    w = &x->wr[x->b.n - 1];
    x->b.nsge = x->b.cur_sge;
    x->b.ninl = x->b.cur_inl;
    w->num_sge = 0;
    w->send_flags &= ~(unsigned)IBV_SEND_INLINE;
    return w;
}

static void qpx_rdma(struct ibv_qp_ex *ix, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr)
{
    struct ibv_send_wr *w = qpx_new(ix, op);

    if (w) {
        w->wr.rdma.rkey = rkey;
        w->wr.rdma.remote_addr = addr;
    }
}

static void qpx_rdma_write(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr)
{
    qpx_rdma(ix, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void qpx_rdma_write_imm(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr, __be32 imm)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_RDMA_WRITE_WITH_IMM);

    if (w) {
        w->wr.rdma.rkey = rkey;
        w->wr.rdma.remote_addr = addr;
        w->imm_data = imm;
    }
}

static void qpx_rdma_read(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr)
{
    qpx_rdma(ix, IBV_WR_RDMA_READ, rkey, addr);
}

static void qpx_send(struct ibv_qp_ex *ix)
{
    qpx_new(ix, IBV_WR_SEND);
}

static void qpx_send_imm(struct ibv_qp_ex *ix, __be32 imm)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_SEND_WITH_IMM);

    if (w)
        w->imm_data = imm;
}

static void qpx_send_inv(struct ibv_qp_ex *ix, uint32_t rkey)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_SEND_WITH_INV);

    if (w)
        w->invalidate_rkey = rkey;
}

static void qpx_local_inv(struct ibv_qp_ex *ix, uint32_t rkey)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_LOCAL_INV);

    if (w)
        w->invalidate_rkey = rkey;
}

static void qpx_atomic_cmp_swp(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr, uint64_t compare,
                               uint64_t swap)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_ATOMIC_CMP_AND_SWP);

    if (w) {
        w->wr.atomic.rkey = rkey;
        w->wr.atomic.remote_addr = addr;
        w->wr.atomic.compare_add = compare;
        w->wr.atomic.swap = swap;
    }
}

static void qpx_atomic_fetch_add(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr, uint64_t add)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_ATOMIC_FETCH_AND_ADD);

    if (w) {
        w->wr.atomic.rkey = rkey;
        w->wr.atomic.remote_addr = addr;
        w->wr.atomic.compare_add = add;
    }
}

/* Operations this device does not have: the batch fails with EOPNOTSUPP. */
static void qpx_unsupported(struct ibv_qp_ex *ix)
{
    struct uiw_qpx *x = qpx_qp(ix)->qpx;

    if (qpx_owned(x))
        qpx_fail(x, EOPNOTSUPP);
}

static void qpx_bind_mw(struct ibv_qp_ex *ix, struct ibv_mw *mw, uint32_t rkey,
                        const struct ibv_mw_bind_info *info)
{
    struct ibv_send_wr *w = qpx_new(ix, IBV_WR_BIND_MW);

    if (w) {
        w->bind_mw.mw = mw;
        w->bind_mw.rkey = rkey;
        if (info)
            w->bind_mw.bind_info = *info;
    }
}

static void qpx_send_tso(struct ibv_qp_ex *ix, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    (void)hdr, (void)hdr_sz, (void)mss;
    qpx_unsupported(ix);
}

static void qpx_set_ud_addr(struct ibv_qp_ex *ix, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
    (void)ah, (void)qpn, (void)qkey;
    qpx_unsupported(ix);
}

static void qpx_set_xrc_srqn(struct ibv_qp_ex *ix, uint32_t srqn)
{
    (void)srqn;
    qpx_unsupported(ix);
}

static void qpx_atomic_write(struct ibv_qp_ex *ix, uint32_t rkey, uint64_t addr, const void *v)
{
    (void)rkey, (void)addr, (void)v;
    qpx_unsupported(ix);
}

static void qpx_set_sge_list(struct ibv_qp_ex *ix, size_t num, const struct ibv_sge *list)
{
    struct uiw_qp *qp = qpx_qp(ix);
    struct uiw_qpx *x = qp->qpx;
    struct ibv_send_wr *w = qpx_cur(ix);
    struct ibv_sge *sge;

    if (!w)
        return;
    if (num > qp->cap.max_send_sge || (num && !list)) {
        qpx_fail(x, EINVAL);
        return;
    }
    sge = grow(x->sge, &x->sge_cap, (size_t)x->b.nsge + num, sizeof(*x->sge));
    if (!sge) {
        qpx_fail(x, ENOMEM);
        return;
    }
    x->sge = sge;
    if (num)
        memcpy(&x->sge[x->b.nsge], list, num * sizeof(*list));
    x->b.nsge += (unsigned)num;
    w->num_sge = (int)num;
}

static void qpx_set_sge(struct ibv_qp_ex *ix, uint32_t lkey, uint64_t addr, uint32_t length)
{
    struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};

    qpx_set_sge_list(ix, 1, &s);
}

static void qpx_set_inline_data_list(struct ibv_qp_ex *ix, size_t num,
                                     const struct ibv_data_buf *bufs)
{
    struct uiw_qp *qp = qpx_qp(ix);
    struct uiw_qpx *x = qp->qpx;
    struct ibv_send_wr *w = qpx_cur(ix);
    size_t total = 0;
    struct ibv_sge *sge;
    uint8_t *inl;

    if (!w)
        return;
    if (num && !bufs) {
        qpx_fail(x, EINVAL);
        return;
    }
    for (size_t i = 0; i < num; i++) {
        if (bufs[i].length && !bufs[i].addr) {
            qpx_fail(x, EINVAL);
            return;
        }
        total += bufs[i].length;
        if (total > qp->cap.max_inline_data) {
            qpx_fail(x, EINVAL); /* as ibv_post_send: longer than max_inline_data */
            return;
        }
    }
    /* verbs: inline data is for Sends and Writes */
    if (w->opcode != IBV_WR_SEND && w->opcode != IBV_WR_SEND_WITH_IMM &&
        w->opcode != IBV_WR_SEND_WITH_INV && w->opcode != IBV_WR_RDMA_WRITE &&
        w->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) {
        qpx_fail(x, EINVAL);
        return;
    }
    inl = grow(x->inl, &x->inl_cap, x->b.ninl + total, 1);
    if (inl)
        x->inl = inl;
    sge = grow(x->sge, &x->sge_cap, (size_t)x->b.nsge + 1, sizeof(*x->sge));
    if (sge)
        x->sge = sge;
    if (!inl || !sge) {
        qpx_fail(x, ENOMEM);
        return;
    }
    /* copied now: the caller may reuse its buffers when this returns */
    for (size_t i = 0; i < num; i++) {
        if (bufs[i].length)
            memcpy(x->inl + x->b.ninl, bufs[i].addr, bufs[i].length);
        x->b.ninl += bufs[i].length;
    }
    x->sge[x->b.nsge].addr = x->b.cur_inl; /* an offset until wr_complete */
    x->sge[x->b.nsge].length = (uint32_t)total;
    x->sge[x->b.nsge].lkey = 0;
    x->b.nsge++;
    w->num_sge = 1;
    w->send_flags |= IBV_SEND_INLINE;
}

static void qpx_set_inline_data(struct ibv_qp_ex *ix, void *addr, size_t length)
{
    struct ibv_data_buf b = {.addr = addr, .length = length};

    qpx_set_inline_data_list(ix, 1, &b);
}

static void qpx_reset(struct uiw_qpx *x)
{
    memset(&x->b, 0, sizeof(x->b));
}

static void qpx_start(struct ibv_qp_ex *ix)
{
    struct uiw_qpx *x = qpx_qp(ix)->qpx;

    /* a second wr_start by the lock holder restarts its batch */
    if (!qpx_owned(x)) {
        pthread_mutex_lock(&x->lock);
        atomic_store_explicit(&x->owner, thread_id(), memory_order_relaxed);
    }
    qpx_reset(x);
}

static void qpx_close(struct uiw_qpx *x)
{
    qpx_reset(x);
    atomic_store_explicit(&x->owner, 0, memory_order_relaxed);
    pthread_mutex_unlock(&x->lock);
}

static int qpx_complete(struct ibv_qp_ex *ix)
{
    struct uiw_qp *qp = qpx_qp(ix);
    struct uiw_qpx *x = qp->qpx;
    struct ibv_send_wr *bad = NULL;
    unsigned s = 0;
    int ret;

    if (!qpx_owned(x))
        return EINVAL; /* no wr_start */
    ret = x->b.err;
    if (ret || !x->b.n) {
        qpx_close(x);
        return ret;
    }
    /* link the chain now that the arrays stay put */
    for (unsigned i = 0; i < x->b.n; i++) {
        struct ibv_send_wr *w = &x->wr[i];

        w->next = i + 1 < x->b.n ? &x->wr[i + 1] : NULL;
        w->sg_list = w->num_sge ? &x->sge[s] : NULL;
        if (w->send_flags & IBV_SEND_INLINE)
            x->sge[s].addr = (uint64_t)(uintptr_t)(x->inl + x->sge[s].addr);
        s += (unsigned)w->num_sge;
    }
    pthread_mutex_lock(&qp->lock);
    if (qp->state == IBV_QPS_RTS && qp->sq_count + x->b.n > qp->sq_cap)
        ret = ENOMEM; /* all or nothing */
    else
        ret = uiw_qp_post_send_any_locked(qp, x->wr, &bad);
    pthread_mutex_unlock(&qp->lock);
    if (ret && bad && bad != x->wr)
        uiw_log("qp %u: ibv_wr_complete: WR %u of %u refused (%d) after the others were posted",
                qp->ibqp.qp_num, (unsigned)(bad - x->wr), x->b.n, ret);
    qpx_close(x);
    return ret;
}

static void qpx_abort(struct ibv_qp_ex *ix)
{
    struct uiw_qpx *x = qpx_qp(ix)->qpx;

    if (qpx_owned(x))
        qpx_close(x);
}

void uiw_qpx_free(struct uiw_qp *qp)
{
    struct uiw_qpx *x = qp->qpx;

    if (!x)
        return;
    pthread_mutex_destroy(&x->lock);
    free(x->wr);
    free(x->sge);
    free(x->inl);
    free(x);
    qp->qpx = NULL;
}

/* The extended QP's members after its ibv_qp prefix (from comp_mask on). */
static const struct ibv_qp_ex qpx_ops = {
    .wr_atomic_cmp_swp = qpx_atomic_cmp_swp,
    .wr_atomic_fetch_add = qpx_atomic_fetch_add,
    .wr_bind_mw = qpx_bind_mw,
    .wr_local_inv = qpx_local_inv,
    .wr_rdma_read = qpx_rdma_read,
    .wr_rdma_write = qpx_rdma_write,
    .wr_rdma_write_imm = qpx_rdma_write_imm,
    .wr_send = qpx_send,
    .wr_send_imm = qpx_send_imm,
    .wr_send_inv = qpx_send_inv,
    .wr_send_tso = qpx_send_tso,
    .wr_set_ud_addr = qpx_set_ud_addr,
    .wr_set_xrc_srqn = qpx_set_xrc_srqn,
    .wr_set_inline_data = qpx_set_inline_data,
    .wr_set_inline_data_list = qpx_set_inline_data_list,
    .wr_set_sge = qpx_set_sge,
    .wr_set_sge_list = qpx_set_sge_list,
    .wr_start = qpx_start,
    .wr_complete = qpx_complete,
    .wr_abort = qpx_abort,
    .wr_atomic_write = qpx_atomic_write,
};

static int qpx_init(struct uiw_qp *qp)
{
    struct uiw_qpx *x = calloc(1, sizeof(*x));
    struct ibv_qp_ex *ix = &qp->ibqpx;

    if (!x)
        return ENOMEM;
    pthread_mutex_init(&x->lock, NULL);
    qp->qpx = x;
    const size_t off = offsetof(struct ibv_qp_ex, comp_mask);
    memcpy((char *)ix + off, (const char *)&qpx_ops + off, sizeof(*ix) - off);
    return 0;
}

struct ibv_qp *uiw_op_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
    const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                           IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                           IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH |
                           IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    struct ibv_qp *ibqp;
    int err;

    if (!a || (a->comp_mask & ~known)) {
        errno = EINVAL;
        return NULL;
    }
    /* no XRC, TSO, RSS / indirection tables, QP creation flags */
    if ((a->comp_mask & (IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER |
                         IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH)) ||
        ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) ||
        ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
         (a->send_ops_flags & ~UIW_QP_EX_SEND_OPS))) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || a->pd->context != c) {
        errno = EINVAL;
        return NULL;
    }
    /* struct ibv_qp_init_attr is a prefix of ibv_qp_init_attr_ex */
    ibqp = ibv_create_qp(a->pd, (struct ibv_qp_init_attr *)a);
    if (!ibqp || !(a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
        return ibqp;
    err = qpx_init(to_uqp(ibqp));
    if (err) {
        ibv_destroy_qp(ibqp);
        errno = err;
        return NULL;
    }
    return ibqp;
}

/* Only QPs created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, as in rdma-core. */
UIW_EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *ibqp)
{
    struct uiw_qp *qp = to_uqp(ibqp);

    if (!qp) {
        errno = EINVAL;
        return NULL;
    }
    return qp->qpx ? &qp->ibqpx : NULL;
}

/* ------------------------------------------------------------------------
 * Extended SRQ: the basic kind only
 * ---------------------------------------------------------------------- */

struct ibv_srq *uiw_op_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *a)
{
    const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                           IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    struct ibv_srq_init_attr init;
    struct ibv_srq *srq;

    if (!a || (a->comp_mask & ~known)) {
        errno = EINVAL;
        return NULL;
    }
    /* XRC and tag-matching SRQs are not supported; a CQ only goes with them */
    if ((a->comp_mask & (IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_TM)) ||
        ((a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && a->srq_type != IBV_SRQT_BASIC)) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !a->pd || a->pd->context != c) {
        errno = EINVAL;
        return NULL;
    }
    init.srq_context = a->srq_context;
    init.attr = a->attr;
    srq = ibv_create_srq(a->pd, &init);
    if (srq)
        a->attr = init.attr;
    return srq;
}
