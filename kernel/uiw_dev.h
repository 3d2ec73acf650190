/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ib_device and its verbs objects (uiw_dev.c: the device, its port and
 * queries; uiw_verbs.c: PD, CQ, QP, MR and posting). docs/KERNEL.md.
 */
#ifndef UIWARP_UIW_DEV_H
#define UIWARP_UIW_DEV_H

#include <linux/atomic.h>
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

/* A shared receive queue: a ring of posted receives (wr_id only until the
 * data path). */
struct uiw_srq {
    struct ib_srq base;
    spinlock_t lock;
    u64 *ring;
    u32 cap, head, count, max_sge;
    u32 limit; /* armed IB_SRQ_LIMIT (0: off); the data path raises the event */
};

struct uiw_qp {
    struct ib_qp base;
    spinlock_t lock; /* state, attr, the receive queue */
    enum ib_qp_state state;
    struct ib_qp_attr attr; /* what modify_qp set, for query_qp */
    struct ib_qp_cap cap;
    enum ib_sig_type sq_sig_type;
    u64 *rq; /* posted receives' wr_id (the data path will add the SGEs);
              * NULL on an SRQ */
    u32 rq_head, rq_count;
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
};

int uiw_verbs_dev_init(struct uiw_dev *d);
void uiw_verbs_dev_fini(struct uiw_dev *d);
extern const struct ib_device_ops uiw_verbs_ops;

#endif
