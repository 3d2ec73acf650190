/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ib_device and its verbs objects (uiw_dev.c: the device, its port and
 * queries; uiw_verbs.c: PD, CQ, QP, MR and posting). docs/KERNEL.md.
 */
#ifndef UIWARP_UIW_DEV_H
#define UIWARP_UIW_DEV_H

#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/netdevice.h>
#include <linux/spinlock.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

/* Limits query_device reports and the verbs enforce. */
#define UIW_MAX_PD       1024
#define UIW_MAX_CQ       1024
#define UIW_MAX_CQE      4096
#define UIW_MAX_QP       1024
#define UIW_MAX_QP_WR    1024
#define UIW_MAX_SGE      6
#define UIW_MAX_MR       4096
#define UIW_MAX_SRQ      1024
#define UIW_MAX_SRQ_WR   4096
#define UIW_MAX_FR_PAGES 256 /* max_fast_reg_page_list_len */
#define UIW_MAX_INLINE   256 /* as the userspace engine (src/engine/engine.h) */
#define UIW_FIRST_QPN    16  /* as the engine: QPNs 0 and 1 mean IB's special QPs */

struct uiw_dev {
    struct ib_device ibdev;
    struct net_device *netdev;
    struct list_head list; /* uiw_devs */
    bool port_active;      /* the state last dispatched (uiw_port_event) */
    /* STag index (the STag's upper 24 bits) -> struct uiw_mr */
    struct xarray mrs;
    spinlock_t mr_lock; /* an MR's stag and valid flag */
    /* QPN -> struct uiw_qp (the later iw_cm get_qp) */
    struct xarray qps;
    u32 next_qpn;
    /* live objects, checked at removal (docs/KERNEL.md) */
    atomic_t npd, ncq, nqp, nmr, nsrq;
};

static inline struct uiw_dev *to_udev(struct ib_device *ibdev)
{
    return container_of(ibdev, struct uiw_dev, ibdev);
}

struct uiw_pd {
    struct ib_pd base;
};

struct uiw_cq {
    struct ib_cq base;
    spinlock_t lock;
    struct ib_wc *ring;
    u32 cap, head, count;
    u8 armed; /* 0, IB_CQ_SOLICITED or IB_CQ_NEXT_COMP */
    bool overflow;
};

/* A shared receive queue: a ring of posted receives with their SGEs. */
struct uiw_rqe;

struct uiw_srq {
    struct ib_srq base;
    spinlock_t lock;
    struct uiw_rqe *ring; /* posted receives, taken by the Sends of any QP on it */
    u32 cap, head, count, max_sge;
    u32 limit; /* armed IB_SRQ_LIMIT (0: off); the data path raises the event */
    /* connections (uiw_cm.c's endpoints, by their srq_node) whose Send found
     * the ring empty; post_srq_recv wakes them (uiw_cm_srq_wake_locked).
     * Each holds a reference on its endpoint while listed. */
    struct list_head waiters;
};

/* The data path (uiw_cm.c): the oldest receive of the SRQ into *out;
 * false when it is empty. Raises IB_EVENT_SRQ_LIMIT_REACHED (and disarms
 * the limit) when fewer than the limit remain. When it is empty and wait
 * is not NULL and on no list, wait joins srq->waiters (under the lock that
 * found the ring empty, so no post can be missed) and *queued is set.
 * Process context. */
bool uiw_srq_pop(struct uiw_srq *srq, struct uiw_rqe *out, struct list_head *wait, bool *queued);

/* A send WR as the data path keeps it (uiw_cm.c) */
struct uiw_sqe {
    u64 wr_id;
    u8 opcode; /* enum ib_wr_opcode */
    bool signaled;
    bool done; /* sent (Send, Write) or answered (Read): completes in order */
    bool solicited;
    u8 err_status; /* enum ib_wc_status its flush reports (0: flushed) */
    u32 num_sge;
    struct ib_sge sge[UIW_MAX_SGE];
    u64 raddr;
    u32 rkey;
    u32 inv_rkey;
    __be32 imm;            /* SEND_WITH_IMM, RDMA_WRITE_WITH_IMM: ex.imm_data */
    u64 compare_add, swap; /* atomics */
};

/* A posted receive */
struct uiw_rqe {
    u64 wr_id;
    u32 num_sge;
    struct ib_sge sge[UIW_MAX_SGE];
};

struct uiw_ep;

struct uiw_qp {
    struct ib_qp base;
    spinlock_t lock; /* state, attr, the queues, ep */
    enum ib_qp_state state;
    struct ib_qp_attr attr; /* what modify_qp set, for query_qp */
    struct ib_qp_cap cap;
    enum ib_sig_type sq_sig_type;
    struct uiw_rqe *rq; /* posted receives; NULL on an SRQ */
    u32 rq_head, rq_count;
    /* the send queue (data WRs, RTS): entries stay from post until their
     * completion, in order; the first sq_sent of them are on the wire */
    struct uiw_sqe *sq;
    u32 sq_head, sq_count, sq_sent;
    u32 sq_gen;        /* bumped when the queue is flushed */
    struct uiw_ep *ep; /* the connection (uiw_cm.c), when attached */
    /* iw_cm's references (iw_add_ref/iw_rem_ref) and the QP's own:
     * destroy_qp waits until the last one is gone */
    struct kref ref;
    struct completion freed;
};

struct uiw_mr {
    struct ib_mr base;
    u32 stag;   /* current STag (fast registration changes its key byte) */
    bool valid; /* RFC 5040 §2: an STag is valid or invalid; mr_lock */
    int access;
    u64 *pages; /* IB_MR_TYPE_MEM_REG: map_mr_sg's page addresses */
    u32 npages, max_pages;
    /* the registration (Fast Register copies pages in), read while valid */
    u64 *reg_pages;
    u32 reg_npages, page_size;
    u64 iova, length;
    u32 fbo, reg_fbo; /* offset of iova in the first page (map, registration) */
};

static inline struct uiw_cq *to_ucq(struct ib_cq *c)
{
    return container_of(c, struct uiw_cq, base);
}

static inline struct uiw_qp *to_uqp(struct ib_qp *q)
{
    return container_of(q, struct uiw_qp, base);
}

static inline struct uiw_mr *to_umr(struct ib_mr *m)
{
    return container_of(m, struct uiw_mr, base);
}

/* What to do once the locks are released (uiw_verbs.c) */
struct uiw_after {
    struct uiw_cq *notify[2]; /* completion handlers to call */
    struct uiw_cq *overflow[2];
    int qp_event[2]; /* enum ib_event_type, in order; -1: none */
};

#define AFTER_INIT                                                                                 \
    {                                                                                              \
        .qp_event = { -1, -1 }                                                                     \
    }

static inline void uiw_after_qp_event(struct uiw_after *af, enum ib_event_type e)
{
    af->qp_event[af->qp_event[0] < 0 ? 0 : 1] = e;
}
void uiw_after_add(struct uiw_cq **set, struct uiw_cq *cq);
void uiw_after_run(struct uiw_qp *qp, struct uiw_after *af);
int uiw_cq_push_locked(struct uiw_cq *cq, const struct ib_wc *wc, bool solicited, bool *notify);
void uiw_cq_add(struct uiw_cq *cq, const struct ib_wc *wc, struct uiw_after *af);
void uiw_qp_error_locked(struct uiw_qp *qp, struct uiw_after *af);
void uiw_qp_put(struct uiw_qp *qp);

/* uiw_cm.c: the iw_cm callbacks and the data path */
int uiw_cm_init(void);
void uiw_cm_exit(void);
extern const struct ib_device_ops uiw_cm_ops;
/* qp->lock held: the QP entered SQD (graceful close) or ERR (abort) or has
 * new send work; the connection's work item takes it from there */
void uiw_cm_qp_kick(struct uiw_qp *qp);
/* destroy_qp: the connection lets go of the QP (process context) */
void uiw_cm_qp_detach(struct uiw_qp *qp);
/* srq->lock held (any context): every connection waiting on the SRQ runs
 * its work item again and leaves the list (its reference goes with it) */
void uiw_cm_srq_wake_locked(struct uiw_srq *srq);

int uiw_verbs_dev_init(struct uiw_dev *d);
void uiw_verbs_dev_fini(struct uiw_dev *d);
extern const struct ib_device_ops uiw_verbs_ops;

#endif
