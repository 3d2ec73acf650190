/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The drop-in ABI seen from a program built against rdma-core's headers:
 *  - ibv_query_device_ex / ibv_query_port through the verbs_context table;
 *  - ibv_create_cq_ex and polling with start/next/end_poll and the
 *    ibv_wc_read_* callbacks;
 *  - ibv_create_qp_ex + ibv_qp_to_qp_ex and the ibv_wr_* builder carrying
 *    real traffic (every supported operation) between two QPs of one
 *    process, connected over a socketpair (dp_test.h), batch errors,
 *    wr_abort;
 *  - unsupported extended verbs failing cleanly with EOPNOTSUPP;
 *  - the IBVERBS_1.0 compat ABI (dlvsym) with traffic through the 1.0 op
 *    table, and the historical / IBVERBS_PRIVATE_34 helpers;
 *  - Debian's ibv_devices and ibv_devinfo run against this library
 *    (LD_LIBRARY_PATH) and show uiw_lo as an iWARP device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <endian.h>
#include <libgen.h>
#include <limits.h>
#include <sys/wait.h>

#define DP_VIA_CM /* linked with libibverbs.so.1 (tests/engine/CMakeLists.txt) */
#include "dp_test.h"

#define BUF 4096

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

struct ex_ep {
    struct dp_ep e; /* e.qp, e.pd (dp_connect / dp_ep_destroy) */
    struct ibv_cq_ex *scqx, *rcqx;
    struct ibv_qp_ex *qpx;
};

static const uint64_t ALL_WC = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
                               IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID |
                               IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS;

static struct ibv_cq_ex *cq_ex(int cqe, uint64_t wc_flags)
{
    struct ibv_cq_init_attr_ex a;

    memset(&a, 0, sizeof(a));
    a.cqe = (uint32_t)cqe;
    a.wc_flags = wc_flags;
    a.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    a.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
    return ibv_create_cq_ex(dp_ctx, &a);
}

static int ex_ep_create(struct ex_ep *x, unsigned send_wr, int cqe)
{
    struct ibv_qp_init_attr_ex ia;

    memset(x, 0, sizeof(*x));
    x->e.pd = ibv_alloc_pd(dp_ctx);
    x->scqx = cq_ex(cqe, ALL_WC);
    x->rcqx = cq_ex(cqe, ALL_WC);
    if (!x->e.pd || !x->scqx || !x->rcqx)
        return -1;
    x->e.scq = ibv_cq_ex_to_cq(x->scqx);
    x->e.rcq = ibv_cq_ex_to_cq(x->rcqx);
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = x->e.scq;
    ia.recv_cq = x->e.rcq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = send_wr;
    ia.cap.max_recv_wr = 64;
    ia.cap.max_send_sge = 4;
    ia.cap.max_recv_sge = 4;
    ia.cap.max_inline_data = 64;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = x->e.pd;
    ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                        IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_RDMA_WRITE |
                        IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                        IBV_QP_EX_WITH_LOCAL_INV;
    x->e.qp = ibv_create_qp_ex(dp_ctx, &ia);
    if (!x->e.qp)
        return -1;
    x->qpx = ibv_qp_to_qp_ex(x->e.qp);
    if (!x->qpx)
        return -1;
    return eng_qp_to_init(x->e.qp, ENG_ACCESS_ALL, 0);
}

/* One completion through start_poll / end_poll (ENOENT retried). */
struct excomp {
    uint64_t wr_id;
    enum ibv_wc_status status;
    enum ibv_wc_opcode opcode;
    uint32_t byte_len, qp_num, src_qp, slid, vendor_err;
    unsigned wc_flags;
    __be32 imm;
    uint8_t sl, dlid_path_bits;
};

static void excomp_read(struct ibv_cq_ex *cq, struct excomp *c)
{
    c->wr_id = cq->wr_id;
    c->status = cq->status;
    c->opcode = ibv_wc_read_opcode(cq);
    c->byte_len = ibv_wc_read_byte_len(cq);
    c->qp_num = ibv_wc_read_qp_num(cq);
    c->src_qp = ibv_wc_read_src_qp(cq);
    c->slid = ibv_wc_read_slid(cq);
    c->sl = ibv_wc_read_sl(cq);
    c->dlid_path_bits = ibv_wc_read_dlid_path_bits(cq);
    c->wc_flags = ibv_wc_read_wc_flags(cq);
    c->imm = ibv_wc_read_imm_data(cq);
    c->vendor_err = ibv_wc_read_vendor_err(cq);
}

/* Up to n completions: the first with start_poll (retried until the
 * timeout while ENOENT), the rest with next_poll, then end_poll. */
static int expoll(struct ibv_cq_ex *cq, struct excomp *c, int n, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;
    struct ibv_poll_cq_attr pa = {.comp_mask = 0};
    int got = 0, ret;

    while (got < n && dp_now_ms() < end) {
        ret = ibv_start_poll(cq, &pa);
        if (ret == ENOENT) {
            dp_msleep(1);
            continue;
        }
        if (ret)
            return -ret;
        excomp_read(cq, &c[got++]);
        while (got < n && (ret = ibv_next_poll(cq)) == 0)
            excomp_read(cq, &c[got++]);
        ibv_end_poll(cq);
        if (ret && ret != ENOENT)
            return -ret;
    }
    return got;
}

static bool quiet_ex(struct ibv_cq_ex *cq, unsigned ms)
{
    struct excomp c;
    return expoll(cq, &c, 1, ms) == 0;
}

static void post_recvs(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf, int n, uint64_t id0)
{
    for (int i = 0; i < n; i++)
        CHECK_EQ(eng_post_recv(qp, buf + i * 256, 256, mr->lkey, id0 + (uint64_t)i), 0);
}

/* ------------------------------------------------------------------------
 * Device queries through the verbs_context table
 * ---------------------------------------------------------------------- */

static void test_query(void)
{
    struct ibv_device_attr_ex ex;
    struct ibv_device_attr a;
    struct ibv_port_attr pa;
    struct verbs_context *v = verbs_get_ctx(dp_ctx);

    CHECK(v != NULL);
    CHECK(verbs_get_ctx_op(dp_ctx, query_device_ex) != NULL);
    CHECK(verbs_get_ctx_op(dp_ctx, create_cq_ex) != NULL);
    CHECK(verbs_get_ctx_op(dp_ctx, create_qp_ex) != NULL);
    CHECK(verbs_get_ctx_op(dp_ctx, create_srq_ex) != NULL);
    CHECK(verbs_get_ctx_op(dp_ctx, query_port) != NULL);

    memset(&ex, 0xa5, sizeof(ex));
    CHECK_EQ(ibv_query_device_ex(dp_ctx, NULL, &ex), 0);
    CHECK_EQ(ibv_query_device(dp_ctx, &a), 0);
    CHECK_MEM(&ex.orig_attr, &a, sizeof(a));
    CHECK_EQ(ex.phys_port_cnt_ex, 1);
    CHECK_EQ(ex.device_cap_flags_ex, a.device_cap_flags);
    CHECK_EQ(ex.completion_timestamp_mask, 0);
    CHECK_EQ(ex.hca_core_clock, 0);
    CHECK_EQ(ex.odp_caps.general_caps, 0);
    CHECK_EQ(ex.tso_caps.max_tso, 0);
    CHECK_EQ(ex.max_dm_size, 0);
    CHECK_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
    CHECK_EQ(a.phys_port_cnt, 1);
    CHECK(a.max_qp_wr > 0 && a.max_sge > 0);
    {
        struct ibv_query_device_ex_input in = {.comp_mask = 1};
        CHECK_EQ(ibv_query_device_ex(dp_ctx, &in, &ex), EINVAL);
    }

    memset(&pa, 0, sizeof(pa));
    CHECK_EQ(ibv_query_port(dp_ctx, 1, &pa), 0); /* the macro: vctx->query_port */
    CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    CHECK_EQ(pa.gid_tbl_len, 1);
    CHECK(pa.state == IBV_PORT_ACTIVE || pa.state == IBV_PORT_DOWN);
    CHECK(ibv_query_port(dp_ctx, 2, &pa) != 0);
    CHECK_EQ(dp_ctx->device->transport_type, IBV_TRANSPORT_IWARP);
    CHECK_EQ(dp_ctx->device->node_type, IBV_NODE_RNIC);
    {
        struct ibv_values_ex vals = {.comp_mask = IBV_VALUES_MASK_RAW_CLOCK};
        CHECK_EQ(ibv_query_rt_values_ex(dp_ctx, &vals), EOPNOTSUPP);
    }
}

/* ------------------------------------------------------------------------
 * Creation checks of the extended objects
 * ---------------------------------------------------------------------- */

static void test_create_checks(void)
{
    struct ibv_cq_init_attr_ex ca;
    struct ibv_qp_init_attr_ex qa;
    struct ibv_cq_ex *cq;
    struct ibv_pd *pd = ibv_alloc_pd(dp_ctx);
    struct ibv_cq *bcq = ibv_create_cq(dp_ctx, 16, NULL, NULL, 0);
    struct excomp c;

    CHECK(pd && bcq);
    /* CQ: unsupported completion fields, flags, parent domain; bad mask */
    const uint64_t bad_wc[] = {IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, IBV_WC_EX_WITH_CVLAN,
                               IBV_WC_EX_WITH_FLOW_TAG, IBV_WC_EX_WITH_TM_INFO,
                               IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};
    for (size_t i = 0; i < sizeof(bad_wc) / sizeof(bad_wc[0]); i++) {
        errno = 0;
        CHECK(cq_ex(16, IBV_WC_EX_WITH_BYTE_LEN | bad_wc[i]) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
    }
    memset(&ca, 0, sizeof(ca));
    ca.cqe = 16;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    errno = 0;
    CHECK(ibv_create_cq_ex(dp_ctx, &ca) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    ca.flags = 0;
    ca.parent_domain = pd;
    errno = 0;
    CHECK(ibv_create_cq_ex(dp_ctx, &ca) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    ca.comp_mask = 1u << 7;
    errno = 0;
    CHECK(ibv_create_cq_ex(dp_ctx, &ca) == NULL);
    CHECK_EQ(errno, EINVAL);

    /* an empty CQ: ENOENT, and no end_poll owed (a locked CQ this time) */
    memset(&ca, 0, sizeof(ca));
    ca.cqe = 16;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
    cq = ibv_create_cq_ex(dp_ctx, &ca);
    CHECK(cq != NULL);
    if (cq) {
        struct ibv_poll_cq_attr pa = {.comp_mask = 0};
        CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT);
        CHECK_EQ(ibv_start_poll(cq, &pa), ENOENT); /* would deadlock if ENOENT kept the lock */
        pa.comp_mask = 1;
        CHECK_EQ(ibv_start_poll(cq, &pa), EINVAL);
        CHECK_EQ(expoll(cq, &c, 1, 10), 0);
        CHECK(cq->read_completion_ts != NULL && cq->read_cvlan != NULL);
        CHECK_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
    }

    /* QP: unsupported features, missing PD */
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = bcq;
    qa.recv_cq = bcq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qa.pd = pd;
    const uint64_t bad_ops[] = {IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_TSO,
                                IBV_QP_EX_WITH_ATOMIC_WRITE};
    for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
        qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        qa.send_ops_flags = IBV_QP_EX_WITH_SEND | bad_ops[i];
        errno = 0;
        CHECK(ibv_create_qp_ex(dp_ctx, &qa) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
    }
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    qa.create_flags = IBV_QP_CREATE_SCATTER_FCS;
    errno = 0;
    CHECK(ibv_create_qp_ex(dp_ctx, &qa) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    qa.create_flags = 0;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
    errno = 0;
    CHECK(ibv_create_qp_ex(dp_ctx, &qa) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    qa.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; /* no PD */
    errno = 0;
    CHECK(ibv_create_qp_ex(dp_ctx, &qa) == NULL);
    CHECK_EQ(errno, EINVAL);
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.qp_type = IBV_QPT_UD;
    errno = 0;
    CHECK(ibv_create_qp_ex(dp_ctx, &qa) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    qa.qp_type = IBV_QPT_RC;

    /* CREATE_FLAGS with no flags is fine; without SEND_OPS_FLAGS: no qp_ex */
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    struct ibv_qp *qp = ibv_create_qp_ex(dp_ctx, &qa);
    CHECK(qp != NULL);
    if (qp) {
        CHECK(ibv_qp_to_qp_ex(qp) == NULL);
        CHECK_EQ(ibv_destroy_qp(qp), 0);
    }
    qa.comp_mask = IBV_QP_INIT_ATTR_PD; /* the inline wrapper's ibv_create_qp path */
    qp = ibv_create_qp_ex(dp_ctx, &qa);
    CHECK(qp != NULL);
    if (qp) {
        CHECK(ibv_qp_to_qp_ex(qp) == NULL);
        CHECK_EQ(ibv_destroy_qp(qp), 0);
    }
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qp = ibv_create_qp_ex(dp_ctx, &qa);
    CHECK(qp != NULL);
    if (qp) {
        struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
        CHECK(x != NULL);
        CHECK(x && &x->qp_base == qp);
        CHECK(x && x->wr_bind_mw && x->wr_send_tso && x->wr_set_ud_addr && x->wr_set_xrc_srqn &&
              x->wr_atomic_write);
        CHECK_EQ(qa.cap.max_send_wr, 4); /* written back as by ibv_create_qp */
        CHECK_EQ(ibv_destroy_qp(qp), 0);
    }

    /* SRQ ex: basic works, XRC / TM do not */
    {
        struct ibv_srq_init_attr_ex sa;
        struct ibv_srq *srq;

        memset(&sa, 0, sizeof(sa));
        sa.attr.max_wr = 8;
        sa.attr.max_sge = 1;
        sa.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
        sa.srq_type = IBV_SRQT_BASIC;
        sa.pd = pd;
        srq = ibv_create_srq_ex(dp_ctx, &sa);
        CHECK(srq != NULL);
        if (srq)
            CHECK_EQ(ibv_destroy_srq(srq), 0);
        sa.srq_type = IBV_SRQT_XRC;
        errno = 0;
        CHECK(ibv_create_srq_ex(dp_ctx, &sa) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
        sa.srq_type = IBV_SRQT_TM;
        errno = 0;
        CHECK(ibv_create_srq_ex(dp_ctx, &sa) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
    }
    CHECK_EQ(ibv_destroy_cq(bcq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ------------------------------------------------------------------------
 * The ibv_wr_* API with traffic
 * ---------------------------------------------------------------------- */

static void test_wr_traffic(void)
{
    struct ex_ep A, B;
    uint8_t *abuf = dp_alloc(64, BUF), *bbuf = dp_alloc(64, BUF), *brecv = dp_alloc(64, BUF);
    uint64_t *acnt = dp_alloc(8, 64), *bcnt = dp_alloc(8, 64);
    struct ibv_mr *amr, *bmr, *brmr, *acmr, *bcmr, *binv, *ainv;
    uint8_t *binvbuf = dp_alloc(64, 256), *ainvbuf = dp_alloc(64, 256);
    struct excomp c[16];
    const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                    IBV_ACCESS_REMOTE_ATOMIC;

    CHECK_EQ(ex_ep_create(&A, 64, 1024), 0);
    CHECK_EQ(ex_ep_create(&B, 64, 1024), 0);
    if (!A.qpx || !B.qpx)
        return;
    amr = ibv_reg_mr(A.e.pd, abuf, BUF, acc);
    acmr = ibv_reg_mr(A.e.pd, acnt, 64, acc);
    ainv = ibv_reg_mr(A.e.pd, ainvbuf, 256, acc);
    bmr = ibv_reg_mr(B.e.pd, bbuf, BUF, acc);
    brmr = ibv_reg_mr(B.e.pd, brecv, BUF, acc);
    bcmr = ibv_reg_mr(B.e.pd, bcnt, 64, acc);
    binv = ibv_reg_mr(B.e.pd, binvbuf, 256, acc);
    CHECK(amr && acmr && ainv && bmr && brmr && bcmr && binv);
    CHECK_EQ(dp_connect(&A.e, &B.e, true, false, 16, 16, 16, 16), 0);

    dp_fill(abuf, BUF);
    dp_fill(bbuf, BUF);
    memset(acnt, 0, 64);
    bcnt[0] = 1000;
    bcnt[1] = 77;
    post_recvs(B.e.qp, brmr, brecv, 8, 100);

    /* one batch of every supported operation */
    struct ibv_qp_ex *q = A.qpx;
    ibv_wr_start(q);
    q->wr_id = 1;
    q->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(q);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 100);

    q->wr_id = 2;
    ibv_wr_send_imm(q, htobe32(0x11223344));
    char inl[] = "inline payload";
    ibv_wr_set_inline_data(q, inl, sizeof(inl));
    memset(inl, 'X', sizeof(inl) - 1); /* copied at the call */

    q->wr_id = 3;
    ibv_wr_rdma_write(q, bmr->rkey, (uintptr_t)bbuf + 1000);
    struct ibv_sge two[2] = {{(uintptr_t)abuf + 200, 300, amr->lkey},
                             {(uintptr_t)abuf + 600, 212, amr->lkey}};
    ibv_wr_set_sge_list(q, 2, two);

    q->wr_id = 4;
    ibv_wr_rdma_write_imm(q, bmr->rkey, (uintptr_t)bbuf + 2000, htobe32(0xcafe));
    struct ibv_data_buf db[2] = {{abuf + 3000, 10}, {abuf + 3100, 20}};
    ibv_wr_set_inline_data_list(q, 2, db);

    q->wr_id = 5;
    ibv_wr_rdma_read(q, bmr->rkey, (uintptr_t)bbuf + 3000);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf + 3500, 500);

    q->wr_id = 6;
    ibv_wr_atomic_fetch_add(q, bcmr->rkey, (uintptr_t)&bcnt[0], 5);
    ibv_wr_set_sge(q, acmr->lkey, (uintptr_t)&acnt[0], 8);

    q->wr_id = 7;
    ibv_wr_atomic_cmp_swp(q, bcmr->rkey, (uintptr_t)&bcnt[1], 77, 99);
    ibv_wr_set_sge(q, acmr->lkey, (uintptr_t)&acnt[1], 8);

    q->wr_id = 8;
    ibv_wr_send_inv(q, binv->rkey);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 0);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf + 50, 20); /* replaces the SGE */

    q->wr_id = 9;
    ibv_wr_local_inv(q, ainv->rkey);
    CHECK_EQ(ibv_wr_complete(q), 0);

    static const enum ibv_wc_opcode want_op[] = {
        IBV_WC_SEND,      IBV_WC_SEND,      IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
        IBV_WC_FETCH_ADD, IBV_WC_COMP_SWAP, IBV_WC_SEND,       IBV_WC_LOCAL_INV};
    CHECK_EQ(expoll(A.scqx, c, 9, DP_TIMEOUT_MS), 9);
    for (int i = 0; i < 9; i++) {
        CHECK_EQ(c[i].wr_id, (uint64_t)i + 1);
        CHECK_EQ(c[i].status, IBV_WC_SUCCESS);
        CHECK_EQ(c[i].opcode, want_op[i]);
        CHECK_EQ(c[i].qp_num, A.e.qp->qp_num);
    }
    dp_sync(A.e.qp);
    dp_sync(B.e.qp);
    CHECK_MEM(bbuf + 1000, abuf + 200, 300);
    CHECK_MEM(bbuf + 1300, abuf + 600, 212);
    CHECK_MEM(bbuf + 2000, abuf + 3000, 10);
    CHECK_MEM(bbuf + 2010, abuf + 3100, 20);
    CHECK_MEM(abuf + 3500, bbuf + 3000, 500);
    CHECK_EQ(acnt[0], 1000);
    CHECK_EQ(bcnt[0], 1005);
    CHECK_EQ(acnt[1], 77);
    CHECK_EQ(bcnt[1], 99);

    /* B: Send (100), Send+Imm (one receive, one completion with the
     * immediate), Write+Imm (one), Send+Inv */
    int n = expoll(B.rcqx, c, 4, DP_TIMEOUT_MS);
    CHECK_EQ(n, 4);
    CHECK(quiet_ex(B.rcqx, 50));
    if (n == 4) {
        CHECK_EQ(c[0].wr_id, 100);
        CHECK_EQ(c[0].opcode, IBV_WC_RECV);
        CHECK_EQ(c[0].byte_len, 100);
        CHECK_EQ(c[0].wc_flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV), 0);
        CHECK_EQ(c[0].qp_num, B.e.qp->qp_num);
        CHECK_MEM(brecv, abuf, 100);
        CHECK_EQ(c[1].opcode, IBV_WC_RECV);
        CHECK_EQ(c[1].byte_len, sizeof(inl));
        CHECK(c[1].wc_flags & IBV_WC_WITH_IMM);
        CHECK_EQ(c[1].imm, htobe32(0x11223344));
        CHECK_MEM(brecv + 256, "inline payload", sizeof(inl));
        CHECK_EQ(c[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        CHECK(c[2].wc_flags & IBV_WC_WITH_IMM);
        CHECK_EQ(c[2].imm, htobe32(0xcafe));
        CHECK_EQ(c[3].opcode, IBV_WC_RECV);
        CHECK(c[3].wc_flags & IBV_WC_WITH_INV);
        CHECK_EQ(c[3].imm, binv->rkey); /* invalidated_rkey shares imm_data */
        CHECK_EQ(c[3].byte_len, 20);
        CHECK_MEM(brecv + 3 * 256, abuf + 50, 20);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ(c[i].status, IBV_WC_SUCCESS);
            CHECK_EQ(c[i].wr_id, 100u + (unsigned)i);
            CHECK_EQ(c[i].src_qp, 0);
            CHECK_EQ(c[i].slid, 0);
            CHECK_EQ(c[i].sl, 0);
            CHECK_EQ(c[i].dlid_path_bits, 0);
            CHECK_EQ(c[i].vendor_err, 0);
        }
    }

    /* unsignaled WRs complete silently; an ibv_cq_ex is also an ibv_cq */
    ibv_wr_start(q);
    q->wr_id = 20;
    q->wr_flags = 0;
    ibv_wr_rdma_write(q, bmr->rkey, (uintptr_t)bbuf);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 64);
    q->wr_id = 21;
    q->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE;
    ibv_wr_rdma_read(q, bmr->rkey, (uintptr_t)bbuf);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf + 64, 64);
    CHECK_EQ(ibv_wr_complete(q), 0);
    {
        struct ibv_wc wc;
        CHECK_EQ(dp_poll(A.e.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 21);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
        dp_sync(A.e.qp);
        CHECK_MEM(abuf + 64, abuf, 64);
    }

    /* wr_abort: nothing is posted */
    ibv_wr_start(q);
    q->wr_id = 30;
    q->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(q);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 8);
    ibv_wr_abort(q);
    CHECK(quiet_ex(A.scqx, 50));
    CHECK(quiet_ex(B.rcqx, 50));

    /* batch errors: the whole batch is dropped, the error returned */
    ibv_wr_start(q); /* a data setter before any operation */
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 8);
    q->wr_id = 31;
    ibv_wr_send(q);
    CHECK_EQ(ibv_wr_complete(q), EINVAL);
    ibv_wr_start(q); /* more SGEs than max_send_sge (4) */
    ibv_wr_send(q);
    struct ibv_sge five[5];
    for (int i = 0; i < 5; i++)
        five[i] = (struct ibv_sge){(uintptr_t)abuf, 1, amr->lkey};
    ibv_wr_set_sge_list(q, 5, five);
    CHECK_EQ(ibv_wr_complete(q), EINVAL);
    ibv_wr_start(q); /* inline data over max_inline_data */
    ibv_wr_send(q);
    ibv_wr_set_inline_data(q, abuf, 4000);
    CHECK_EQ(ibv_wr_complete(q), EINVAL);
    ibv_wr_start(q); /* inline data on a Read */
    ibv_wr_rdma_read(q, bmr->rkey, (uintptr_t)bbuf);
    ibv_wr_set_inline_data(q, abuf, 8);
    CHECK_EQ(ibv_wr_complete(q), EINVAL);
    ibv_wr_start(q); /* a bind without a window */
    ibv_wr_bind_mw(q, NULL, 0, NULL);
    CHECK_EQ(ibv_wr_complete(q), EINVAL);
    ibv_wr_start(q);
    ibv_wr_send(q);
    ibv_wr_set_ud_addr(q, NULL, 1, 2);
    CHECK_EQ(ibv_wr_complete(q), EOPNOTSUPP);
    ibv_wr_start(q); /* more WRs than the send queue holds */
    q->wr_flags = IBV_SEND_SIGNALED;
    for (unsigned i = 0; i < 100; i++) { /* max_send_wr is 64 */
        q->wr_id = 1000 + i;
        ibv_wr_send(q);
    }
    CHECK_EQ(ibv_wr_complete(q), ENOMEM);
    CHECK_EQ(ibv_wr_complete(q), EINVAL); /* no wr_start */
    ibv_wr_start(q);                      /* an empty batch */
    CHECK_EQ(ibv_wr_complete(q), 0);
    CHECK(quiet_ex(A.scqx, 50));
    CHECK(quiet_ex(B.rcqx, 50));

    /* still in working order: a second batch after the failed ones, and a
     * second wr_start by the same thread restarting its batch */
    ibv_wr_start(q);
    q->wr_id = 40;
    ibv_wr_send(q);
    ibv_wr_start(q);
    q->wr_id = 41;
    q->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
    ibv_wr_send(q);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf + 1, 33);
    CHECK_EQ(ibv_wr_complete(q), 0);
    CHECK_EQ(expoll(A.scqx, c, 1, DP_TIMEOUT_MS), 1);
    CHECK_EQ(c[0].wr_id, 41);
    CHECK_EQ(c[0].status, IBV_WC_SUCCESS);
    n = expoll(B.rcqx, c, 1, DP_TIMEOUT_MS);
    CHECK_EQ(n, 1);
    CHECK_EQ(c[0].byte_len, 33);
    CHECK_MEM(brecv + 4 * 256, abuf + 1, 33);
    CHECK(quiet_ex(A.scqx, 50)); /* WR 40 was dropped by the restart */
    CHECK(quiet_ex(B.rcqx, 50));

    /* B's STag was invalidated by the Send with Invalidate: a Read of it
     * fails (B answers with a Terminate, both QPs go to ERR) */
    ibv_wr_start(q);
    q->wr_id = 50;
    q->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(q, binv->rkey, (uintptr_t)binvbuf);
    ibv_wr_set_sge(q, amr->lkey, (uintptr_t)abuf, 16);
    CHECK_EQ(ibv_wr_complete(q), 0);
    CHECK_EQ(expoll(A.scqx, c, 1, DP_TIMEOUT_MS), 1);
    CHECK_EQ(c[0].wr_id, 50);
    CHECK(c[0].status != IBV_WC_SUCCESS);
    for (uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
         dp_state(A.e.qp) != IBV_QPS_ERR && dp_now_ms() < end;)
        dp_msleep(1);
    CHECK_EQ(dp_state(A.e.qp), IBV_QPS_ERR);
    dp_async_drain();

    /* the QP is in error now: wr_complete flushes like ibv_post_send */
    ibv_wr_start(q);
    q->wr_id = 60;
    ibv_wr_send(q);
    CHECK_EQ(ibv_wr_complete(q), 0);
    CHECK_EQ(expoll(A.scqx, c, 1, DP_TIMEOUT_MS), 1);
    CHECK_EQ(c[0].wr_id, 60);
    CHECK_EQ(c[0].status, IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(c[0].opcode, IBV_WC_SEND);
    CHECK(quiet_ex(A.scqx, 50));

    CHECK_EQ(ibv_destroy_qp(A.e.qp), 0);
    CHECK_EQ(ibv_destroy_qp(B.e.qp), 0);
    A.e.qp = B.e.qp = NULL;
    dp_async_drain();
    struct ibv_mr *mrs[] = {amr, acmr, ainv, bmr, brmr, bcmr, binv};
    for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
        if (mrs[i])
            CHECK_EQ(ibv_dereg_mr(mrs[i]), 0);
    dp_ep_destroy(&A.e);
    dp_ep_destroy(&B.e);
    free(abuf);
    free(bbuf);
    free(brecv);
    free(acnt);
    free(bcnt);
    free(binvbuf);
    free(ainvbuf);
}

/* ------------------------------------------------------------------------
 * Concurrent builders on one QP are serialised by wr_start
 * ---------------------------------------------------------------------- */

#define MT_THREADS 3
#define MT_BATCHES 200

struct mt_arg {
    struct ibv_qp_ex *q;
    struct ibv_mr *mr, *rmr;
    uint8_t *buf, *rbuf;
    unsigned id;
    unsigned enomem, failed; /* counted here: CHECK is not thread-safe */
};

static void *mt_builder(void *p)
{
    struct mt_arg *a = p;

    for (unsigned i = 0; i < MT_BATCHES; i++) {
        int ret;
        do {
            ibv_wr_start(a->q);
            a->q->wr_id = (uint64_t)a->id << 32 | i;
            a->q->wr_flags = IBV_SEND_SIGNALED;
            ibv_wr_rdma_write(a->q, a->rmr->rkey, (uintptr_t)a->rbuf + a->id * 64);
            ibv_wr_set_sge(a->q, a->mr->lkey, (uintptr_t)a->buf + a->id * 64, 64);
            ibv_wr_rdma_write(a->q, a->rmr->rkey, (uintptr_t)a->rbuf + a->id * 64 + 512);
            ibv_wr_set_inline_data(a->q, a->buf + a->id * 64, 8);
            ret = ibv_wr_complete(a->q);
            if (ret == ENOMEM) { /* the send queue is full for now */
                a->enomem++;
                sched_yield();
            }
        } while (ret == ENOMEM);
        a->failed += ret != 0;
    }
    return NULL;
}

static void test_wr_threads(void)
{
    struct ex_ep A, B;
    uint8_t *abuf = dp_alloc(64, BUF), *bbuf = dp_alloc(64, BUF);
    pthread_t th[MT_THREADS];
    struct mt_arg args[MT_THREADS];
    unsigned next[MT_THREADS] = {0}, got = 0;
    const int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

    /* room for every completion: the poller may start late */
    CHECK_EQ(ex_ep_create(&A, 16, 2 * MT_THREADS * MT_BATCHES), 0);
    CHECK_EQ(ex_ep_create(&B, 16, 64), 0);
    struct ibv_mr *amr = ibv_reg_mr(A.e.pd, abuf, BUF, acc);
    struct ibv_mr *bmr = ibv_reg_mr(B.e.pd, bbuf, BUF, acc);
    CHECK(amr && bmr && A.qpx);
    if (!amr || !bmr || !A.qpx)
        return;
    CHECK_EQ(dp_connect(&A.e, &B.e, false, false, 16, 16, 16, 16), 0);
    dp_fill(abuf, BUF);
    for (unsigned t = 0; t < MT_THREADS; t++) {
        args[t] = (struct mt_arg){A.qpx, amr, bmr, abuf, bbuf, t, 0, 0};
        CHECK_EQ(pthread_create(&th[t], NULL, mt_builder, &args[t]), 0);
    }
    /* each thread's WRs complete in its own order, two per batch */
    uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
    while (got < 2 * MT_THREADS * MT_BATCHES && dp_now_ms() < end) {
        struct excomp c[32];
        int n = expoll(A.scqx, c, 32, 10);
        for (int i = 0; i < n; i++) {
            unsigned t = (unsigned)(c[i].wr_id >> 32), b = (unsigned)c[i].wr_id;
            CHECK_EQ(c[i].status, IBV_WC_SUCCESS);
            CHECK(t < MT_THREADS);
            if (t < MT_THREADS) {
                CHECK_EQ(b, next[t] / 2);
                next[t]++;
            }
        }
        got += n > 0 ? (unsigned)n : 0;
    }
    for (unsigned t = 0; t < MT_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK_EQ(args[t].failed, 0);
    }
    CHECK_EQ(got, 2 * MT_THREADS * MT_BATCHES);
    dp_sync(B.e.qp);
    for (unsigned t = 0; t < MT_THREADS; t++) {
        CHECK_MEM(bbuf + t * 64, abuf + t * 64, 64);
        CHECK_MEM(bbuf + t * 64 + 512, abuf + t * 64, 8);
    }
    CHECK_EQ(ibv_destroy_qp(A.e.qp), 0);
    CHECK_EQ(ibv_destroy_qp(B.e.qp), 0);
    A.e.qp = B.e.qp = NULL;
    CHECK_EQ(ibv_dereg_mr(amr), 0);
    CHECK_EQ(ibv_dereg_mr(bmr), 0);
    dp_ep_destroy(&A.e);
    dp_ep_destroy(&B.e);
    free(abuf);
    free(bbuf);
}

/* ------------------------------------------------------------------------
 * Unsupported verbs fail cleanly
 * ---------------------------------------------------------------------- */

static void test_unsupported(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(dp_ctx);
    struct ibv_cq *cq = ibv_create_cq(dp_ctx, 8, NULL, NULL, 0);
    struct ibv_qp_cap cap = {
        .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1};
    struct ibv_qp *qp;
    uint8_t buf[64];

    CHECK(pd && cq);
    qp = eng_qp_create(pd, cq, cq, NULL, cap, false);
    CHECK(qp != NULL);

#define CHECK_NULL_ERRNO(expr, err)                                                                \
    do {                                                                                           \
        errno = 0;                                                                                 \
        CHECK((expr) == NULL);                                                                     \
        CHECK_EQ(errno, (err));                                                                    \
    } while (0)

    CHECK_NULL_ERRNO(ibv_alloc_mw(pd, (enum ibv_mw_type)9), EINVAL);
    {
        struct ibv_alloc_dm_attr a = {.length = 64};
        CHECK_NULL_ERRNO(ibv_alloc_dm(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_counters_init_attr a = {0};
        CHECK_NULL_ERRNO(ibv_create_counters(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_td_init_attr a = {0};
        CHECK_NULL_ERRNO(ibv_alloc_td(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_parent_domain_init_attr a = {.pd = pd};
        CHECK_NULL_ERRNO(ibv_alloc_parent_domain(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_wq_init_attr a;
        memset(&a, 0, sizeof(a));
        a.wq_type = IBV_WQT_RQ;
        a.pd = pd;
        a.cq = cq;
        CHECK_NULL_ERRNO(ibv_create_wq(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_rwq_ind_table_init_attr a = {0};
        CHECK_NULL_ERRNO(ibv_create_rwq_ind_table(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_xrcd_init_attr a = {0};
        CHECK_NULL_ERRNO(ibv_open_xrcd(dp_ctx, &a), EOPNOTSUPP);
    }
    {
        struct ibv_qp_open_attr a = {0};
        CHECK_NULL_ERRNO(ibv_open_qp(dp_ctx, &a), EOPNOTSUPP);
    }
    if (qp) {
        struct ibv_flow_attr fa;
        memset(&fa, 0, sizeof(fa));
        fa.size = sizeof(fa);
        CHECK_NULL_ERRNO(ibv_create_flow(qp, &fa), EOPNOTSUPP);
        struct ibv_ece ece;
        memset(&ece, 0, sizeof(ece));
        CHECK_EQ(ibv_query_ece(qp, &ece), EOPNOTSUPP);
        CHECK_EQ(ibv_set_ece(qp, &ece), EOPNOTSUPP);
        struct ibv_qp_rate_limit_attr rl = {0};
        CHECK_EQ(ibv_modify_qp_rate_limit(qp, &rl), EOPNOTSUPP);
    }
    {
        struct ibv_modify_cq_attr a = {.attr_mask = IBV_CQ_ATTR_MODERATE};
        CHECK_EQ(ibv_modify_cq(cq, &a), EOPNOTSUPP);
    }
    {
        struct ibv_sge s = {(uintptr_t)buf, sizeof(buf), 0};
        CHECK_EQ(ibv_advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &s, 1), EOPNOTSUPP);
    }
    CHECK_NULL_ERRNO(ibv_alloc_null_mr(pd), EOPNOTSUPP);
    CHECK_NULL_ERRNO(ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, IBV_ACCESS_LOCAL_WRITE), EOPNOTSUPP);
    CHECK_NULL_ERRNO(ibv_import_device(-1), EOPNOTSUPP);
    CHECK_NULL_ERRNO(ibv_import_pd(dp_ctx, 1), EOPNOTSUPP);
    CHECK_NULL_ERRNO(ibv_import_mr(pd, 1), EOPNOTSUPP);
    CHECK_NULL_ERRNO(ibv_import_dm(dp_ctx, 1), EOPNOTSUPP);
    {
        struct ibv_ah_attr ah;
        memset(&ah, 0, sizeof(ah));
        ah.port_num = 1;
        CHECK_NULL_ERRNO(ibv_create_ah(pd, &ah), EOPNOTSUPP);
        uint8_t mac[6];
        uint16_t vid;
        CHECK(ibv_resolve_eth_l2_from_gid(dp_ctx, &ah, mac, &vid) != 0);
    }
    CHECK_EQ(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
    if (qp)
        CHECK_EQ(ibv_destroy_qp(qp), 0);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ------------------------------------------------------------------------
 * IBVERBS_1.0 compat ABI (the historical layouts, as 1.0 programs see them)
 * ---------------------------------------------------------------------- */

struct t10_device {
    void *sysfs_dev, *sysfs_ibdev;
    struct ibv_device *real_device;
    struct _ibv_device_ops ops;
};
struct t10_context;
struct t10_cq {
    struct t10_context *context;
    void *cq_context;
    uint32_t handle;
    int cqe;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t comp_events_completed, async_events_completed;
    struct ibv_cq *real_cq;
};
struct t10_pd {
    struct t10_context *context;
    uint32_t handle;
    struct ibv_pd *real_pd;
};
struct t10_mr {
    struct t10_context *context;
    struct t10_pd *pd;
    uint32_t handle, lkey, rkey;
    struct ibv_mr *real_mr;
};
struct t10_qp {
    struct t10_context *context;
    void *qp_context;
    struct t10_pd *pd;
    struct t10_cq *send_cq, *recv_cq;
    void *srq;
    uint32_t handle, qp_num;
    enum ibv_qp_state state;
    enum ibv_qp_type qp_type;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
    struct ibv_qp *real_qp;
};
struct t10_qp_init_attr {
    void *qp_context;
    struct t10_cq *send_cq, *recv_cq;
    void *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type qp_type;
    int sq_sig_all;
};
struct t10_send_wr {
    struct t10_send_wr *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
    enum ibv_wr_opcode opcode;
    int send_flags;
    uint32_t imm_data;
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr, compare_add, swap;
            uint32_t rkey;
        } atomic;
        struct {
            void *ah;
            uint32_t remote_qpn, remote_qkey;
        } ud;
    } wr;
};
struct t10_recv_wr {
    struct t10_recv_wr *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
};
struct t10_context {
    struct t10_device *device;
    struct {
        void *p0[7];
        int (*poll_cq)(struct t10_cq *cq, int n, struct ibv_wc *wc);
        int (*req_notify_cq)(struct t10_cq *cq, int solicited_only);
        void *p1[7];
        int (*post_srq_recv)(void *srq, struct t10_recv_wr *wr, struct t10_recv_wr **bad);
        void *p2[4];
        int (*post_send)(struct t10_qp *qp, struct t10_send_wr *wr, struct t10_send_wr **bad);
        int (*post_recv)(struct t10_qp *qp, struct t10_recv_wr *wr, struct t10_recv_wr **bad);
        void *p3[4];
    } ops;
    int cmd_fd, async_fd, num_comp_vectors;
    struct ibv_context *real_context;
};

#define V10(type, name) ((type)dlvsym(RTLD_DEFAULT, #name, "IBVERBS_1.0"))

static int poll10(struct t10_cq *cq, struct ibv_wc *wc, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;
    int n;

    while ((n = cq->context->ops.poll_cq(cq, 1, wc)) == 0 && dp_now_ms() < end)
        dp_msleep(1);
    return n;
}

static void test_compat_1_0(void)
{
    struct t10_device **(*get_list)(int *) =
        V10(struct t10_device * *(*)(int *), ibv_get_device_list);
    void (*free_list)(struct t10_device **) =
        V10(void (*)(struct t10_device **), ibv_free_device_list);
    const char *(*get_name)(struct t10_device *) =
        V10(const char *(*)(struct t10_device *), ibv_get_device_name);
    __be64 (*get_guid)(struct t10_device *) =
        V10(__be64(*)(struct t10_device *), ibv_get_device_guid);
    struct t10_context *(*open_dev)(struct t10_device *) =
        V10(struct t10_context * (*)(struct t10_device *), ibv_open_device);
    int (*close_dev)(struct t10_context *) = V10(int (*)(struct t10_context *), ibv_close_device);
    int (*query_dev)(struct t10_context *, struct ibv_device_attr *) =
        V10(int (*)(struct t10_context *, struct ibv_device_attr *), ibv_query_device);
    int (*query_port)(struct t10_context *, uint8_t, struct ibv_port_attr *) =
        V10(int (*)(struct t10_context *, uint8_t, struct ibv_port_attr *), ibv_query_port);
    struct t10_pd *(*alloc_pd)(struct t10_context *) =
        V10(struct t10_pd * (*)(struct t10_context *), ibv_alloc_pd);
    int (*dealloc_pd)(struct t10_pd *) = V10(int (*)(struct t10_pd *), ibv_dealloc_pd);
    struct t10_mr *(*reg_mr)(struct t10_pd *, void *, size_t, int) =
        V10(struct t10_mr * (*)(struct t10_pd *, void *, size_t, int), ibv_reg_mr);
    int (*dereg_mr)(struct t10_mr *) = V10(int (*)(struct t10_mr *), ibv_dereg_mr);
    struct t10_cq *(*create_cq)(struct t10_context *, int, void *, struct ibv_comp_channel *, int) =
        V10(struct t10_cq * (*)(struct t10_context *, int, void *, struct ibv_comp_channel *, int),
            ibv_create_cq);
    int (*destroy_cq)(struct t10_cq *) = V10(int (*)(struct t10_cq *), ibv_destroy_cq);
    int (*get_cq_event)(struct ibv_comp_channel *, struct t10_cq **, void **) =
        V10(int (*)(struct ibv_comp_channel *, struct t10_cq **, void **), ibv_get_cq_event);
    void (*ack_cq)(struct t10_cq *, unsigned) =
        V10(void (*)(struct t10_cq *, unsigned), ibv_ack_cq_events);
    struct t10_qp *(*create_qp)(struct t10_pd *, struct t10_qp_init_attr *) =
        V10(struct t10_qp * (*)(struct t10_pd *, struct t10_qp_init_attr *), ibv_create_qp);
    int (*query_qp)(struct t10_qp *, struct ibv_qp_attr *, int, struct t10_qp_init_attr *) =
        V10(int (*)(struct t10_qp *, struct ibv_qp_attr *, int, struct t10_qp_init_attr *),
            ibv_query_qp);
    int (*modify_qp)(struct t10_qp *, struct ibv_qp_attr *, int) =
        V10(int (*)(struct t10_qp *, struct ibv_qp_attr *, int), ibv_modify_qp);
    int (*destroy_qp)(struct t10_qp *) = V10(int (*)(struct t10_qp *), ibv_destroy_qp);

    CHECK(get_list && free_list && get_name && get_guid && open_dev && close_dev && query_dev &&
          query_port && alloc_pd && dealloc_pd && reg_mr && dereg_mr && create_cq && destroy_cq &&
          get_cq_event && ack_cq && create_qp && query_qp && modify_qp && destroy_qp);
    /* every 1.0 compat symbol is there, distinct from the default one */
    static const char *const names[] = {
        "ibv_ack_async_event",  "ibv_ack_cq_events",   "ibv_alloc_pd",     "ibv_attach_mcast",
        "ibv_close_device",     "ibv_create_ah",       "ibv_create_cq",    "ibv_create_qp",
        "ibv_create_srq",       "ibv_dealloc_pd",      "ibv_dereg_mr",     "ibv_destroy_ah",
        "ibv_destroy_cq",       "ibv_destroy_qp",      "ibv_destroy_srq",  "ibv_detach_mcast",
        "ibv_free_device_list", "ibv_get_async_event", "ibv_get_cq_event", "ibv_get_device_guid",
        "ibv_get_device_list",  "ibv_get_device_name", "ibv_modify_qp",    "ibv_modify_srq",
        "ibv_open_device",      "ibv_query_device",    "ibv_query_gid",    "ibv_query_pkey",
        "ibv_query_port",       "ibv_query_qp",        "ibv_query_srq",    "ibv_reg_mr",
        "ibv_resize_cq"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        void *old = dlvsym(RTLD_DEFAULT, names[i], "IBVERBS_1.0");
        void *cur = dlvsym(RTLD_DEFAULT, names[i], "IBVERBS_1.1");
        CHECK(old != NULL && cur != NULL && old != cur);
    }
    CHECK(dlvsym(RTLD_DEFAULT, "ibv_register_driver", "IBVERBS_1.1") != NULL);
    if (!get_list || !open_dev || !create_qp || !modify_qp || !close_dev || !free_list)
        return;

    int n = 0;
    struct t10_device **list = get_list(&n), *lo = NULL;
    CHECK(list != NULL && n > 0);
    for (int i = 0; list && i < n; i++)
        if (strcmp(get_name(list[i]), "uiw_lo") == 0)
            lo = list[i];
    CHECK(lo != NULL);
    if (!lo) {
        free_list(list);
        return;
    }
    CHECK_EQ(get_guid(lo), ibv_get_device_guid(lo->real_device));
    struct t10_context *ctx = open_dev(lo);
    CHECK(ctx != NULL);
    if (!ctx) {
        free_list(list);
        return;
    }
    CHECK(ctx->device == lo);
    CHECK_EQ(ctx->async_fd, ctx->real_context->async_fd);
    struct ibv_device_attr da;
    CHECK_EQ(query_dev(ctx, &da), 0);
    CHECK_EQ(da.phys_port_cnt, 1);
    struct {
        struct ibv_port_attr pa;
        uint8_t canary[16];
    } pp;
    memset(&pp, 0xee, sizeof(pp));
    CHECK_EQ(query_port(ctx, 1, &pp.pa), 0);
    CHECK_EQ(pp.pa.gid_tbl_len, 1);
    CHECK_EQ(((uint8_t *)&pp.pa)[offsetof(struct ibv_port_attr, link_layer)], 0xee); /* 1.0 size */

    /* two 1.0 QPs with traffic through the 1.0 op table */
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx->real_context);
    struct t10_pd *pd = alloc_pd(ctx);
    uint8_t *sbuf = dp_alloc(64, 256), *rbuf = dp_alloc(64, 256);
    struct t10_mr *smr = pd ? reg_mr(pd, sbuf, 256, IBV_ACCESS_LOCAL_WRITE) : NULL;
    struct t10_mr *rmr = pd ? reg_mr(pd, rbuf, 256, IBV_ACCESS_LOCAL_WRITE) : NULL;
    int cq_user = 42;
    struct t10_cq *cq = create_cq(ctx, 32, &cq_user, ch, 0);
    struct t10_qp *qa = NULL, *qb = NULL;
    CHECK(ch && pd && smr && rmr && cq);
    if (!(ch && pd && smr && rmr && cq))
        goto out;
    CHECK_EQ(smr->lkey, smr->real_mr->lkey);
    CHECK(cq->context == ctx && cq->cq_context == &cq_user);
    struct t10_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.sq_sig_all = 1;
    ia.qp_context = &cq_user;
    qa = create_qp(pd, &ia);
    qb = create_qp(pd, &ia);
    CHECK(qa && qb);
    if (!qa || !qb)
        goto out;
    CHECK_EQ(qa->qp_num, qa->real_qp->qp_num);
    CHECK(qa->send_cq == cq && qa->pd == pd && qa->qp_context == &cq_user);
    struct ibv_qp_attr at;
    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    CHECK_EQ(modify_qp(qa, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    CHECK_EQ(modify_qp(qb, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
    {
        struct t10_qp_init_attr qi;
        memset(&qi, 0, sizeof(qi));
        CHECK_EQ(query_qp(qa, &at, IBV_QP_STATE, &qi), 0);
        CHECK_EQ(at.qp_state, IBV_QPS_INIT);
        CHECK(qi.send_cq == cq && qi.recv_cq == cq && qi.srq == NULL && qi.qp_context == &cq_user);
    }
    {
        struct dp_ep ea = {.qp = qa->real_qp}, eb = {.qp = qb->real_qp};
        CHECK_EQ(dp_connect(&ea, &eb, false, false, 4, 4, 4, 4), 0);
    }
    struct ibv_sge rs = {(uintptr_t)rbuf, 256, rmr->lkey};
    struct t10_recv_wr rw = {.wr_id = 7, .sg_list = &rs, .num_sge = 1}, *rbad = NULL;
    CHECK_EQ(ctx->ops.post_recv(qb, &rw, &rbad), 0);
    dp_fill(sbuf, 256);
    struct ibv_sge ss = {(uintptr_t)sbuf, 200, smr->lkey};
    struct t10_send_wr sw, *sbad = NULL;
    memset(&sw, 0, sizeof(sw));
    sw.wr_id = 9;
    sw.sg_list = &ss;
    sw.num_sge = 1;
    sw.opcode = IBV_WR_SEND;
    sw.send_flags = IBV_SEND_SIGNALED;
    CHECK_EQ(ctx->ops.req_notify_cq(cq, 0), 0);
    CHECK_EQ(ctx->ops.post_send(qa, &sw, &sbad), 0);
    struct ibv_wc wc[2];
    int got = 0;
    uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
    while (got < 2 && dp_now_ms() < end)
        got += poll10(cq, &wc[got], 100) > 0;
    CHECK_EQ(got, 2);
    for (int i = 0; i < got; i++) {
        CHECK_EQ(wc[i].status, IBV_WC_SUCCESS);
        if (wc[i].wr_id == 7) {
            CHECK_EQ(wc[i].byte_len, 200);
            CHECK_EQ(wc[i].qp_num, qb->qp_num);
        } else {
            CHECK_EQ(wc[i].wr_id, 9);
        }
    }
    CHECK_MEM(rbuf, sbuf, 200);
    {
        /* the completion event names the 1.0 CQ and its context */
        struct t10_cq *ecq = NULL;
        void *ectx = NULL;
        CHECK_EQ(get_cq_event(ch, &ecq, &ectx), 0);
        CHECK(ecq == cq);
        CHECK(ectx == &cq_user);
        ack_cq(cq, 1);
    }
    /* a bad WR is reported as the 1.0 WR */
    {
        rbad = NULL;
        CHECK_EQ(ctx->ops.post_recv(qb, &rw, &rbad), 0);
        struct t10_send_wr w2[2];
        memset(w2, 0, sizeof(w2));
        w2[0] = sw;
        w2[0].next = &w2[1];
        w2[1] = sw;
        w2[1].num_sge = 99;
        sbad = NULL;
        CHECK(ctx->ops.post_send(qa, w2, &sbad) != 0);
        CHECK(sbad == &w2[1]);
        got = 0; /* w2[0] went: its send and receive complete */
        end = dp_now_ms() + DP_TIMEOUT_MS;
        while (got < 2 && dp_now_ms() < end)
            got += poll10(cq, &wc[got], 100) > 0;
        CHECK_EQ(got, 2);
    }
out:
    if (qa)
        CHECK_EQ(destroy_qp(qa), 0);
    if (qb)
        CHECK_EQ(destroy_qp(qb), 0);
    if (cq)
        CHECK_EQ(destroy_cq(cq), 0);
    if (smr)
        CHECK_EQ(dereg_mr(smr), 0);
    if (rmr)
        CHECK_EQ(dereg_mr(rmr), 0);
    if (pd)
        CHECK_EQ(dealloc_pd(pd), 0);
    if (ch)
        CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    CHECK_EQ(close_dev(ctx), 0);
    free_list(list);
    free(sbuf);
    free(rbuf);
}

/* ------------------------------------------------------------------------
 * Historical helpers and IBVERBS_PRIVATE_34
 * ---------------------------------------------------------------------- */

const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                       int *type);
int ibv_cmd_alloc_pd(void);
void verbs_register_driver_34(const void *ops);

static void test_helpers(void)
{
    char buf[64], dir[] = "/tmp/uiw_abi_XXXXXX", path[128];
    int type = -1;

    CHECK_STR(ibv_get_sysfs_path(), "/sys");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof(path), "%s/f", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("board-42\n", f);
        fclose(f);
    }
    CHECK_EQ(ibv_read_sysfs_file(dir, "f", buf, sizeof(buf)), 9);
    CHECK_STR(buf, "board-42");
    CHECK_EQ(ibv_read_sysfs_file(dir, "f", buf, 4), 4);
    CHECK_STR(buf, "boa");
    CHECK_EQ(ibv_read_sysfs_file(dir, "none", buf, sizeof(buf)), -1);
    unlink(path);
    rmdir(dir);

    CHECK_EQ(ibv_query_gid_type(dp_ctx, 1, 0, &type), 0);
    CHECK_EQ(type, 0); /* IB / RoCE v1: what iWARP reports */
    type = -1;
    CHECK_EQ(ibv_query_gid_type(dp_ctx, 1, 5, &type), 0); /* empty entry */
    CHECK_EQ(type, 0);
    CHECK_EQ(ibv_cmd_alloc_pd(), EOPNOTSUPP);
    verbs_register_driver_34(NULL); /* a provider constructor: ignored */
}

/* ------------------------------------------------------------------------
 * Debian's ibv_devices / ibv_devinfo against this library
 * ---------------------------------------------------------------------- */

/* Run argv with LD_LIBRARY_PATH=libdir; its stdout (and stderr) in out. */
static int run(const char *libdir, char *const argv[], char *out, size_t cap)
{
    int p[2];
    size_t len = 0;
    int st;
    pid_t pid;

    if (pipe(p) < 0)
        return -1;
    pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[0]);
        close(p[1]);
        setenv("LD_LIBRARY_PATH", libdir, 1);
        /* a sanitizer build of the library needs its runtime first */
        void *rt = dlsym(RTLD_DEFAULT, "__asan_init");
        Dl_info ai;
        if (!rt)
            rt = dlsym(RTLD_DEFAULT, "__tsan_init");
        if (rt && dladdr(rt, &ai) && ai.dli_fname) {
            setenv("LD_PRELOAD", ai.dli_fname, 1);
            setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    for (;;) {
        ssize_t r = read(p[0], out + len, cap - 1 - len);
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len == cap - 1)
            break;
    }
    out[len] = '\0';
    close(p[0]);
    if (waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_debian_tools(void)
{
    Dl_info info;
    char libdir[PATH_MAX], *out = malloc(1 << 16);

    CHECK(out != NULL);
    CHECK(dladdr((void *)ibv_open_device, &info) != 0 && info.dli_fname);
    if (!out || !info.dli_fname)
        return;
    char path[PATH_MAX];
    if (!realpath(info.dli_fname, path))
        snprintf(path, sizeof(path), "%s", info.dli_fname);
    snprintf(libdir, sizeof(libdir), "%s", dirname(path));

    if (access("/usr/bin/ibv_devices", X_OK) == 0) {
        char *const argv[] = {"/usr/bin/ibv_devices", NULL};
        CHECK_EQ(run(libdir, argv, out, 1 << 16), 0);
        CHECK(strstr(out, "uiw_lo") != NULL);
        if (!strstr(out, "uiw_lo"))
            fprintf(stderr, "ibv_devices printed:\n%s\n", out);
    } else {
        printf("SKIP: /usr/bin/ibv_devices not installed\n");
    }
    if (access("/usr/bin/ibv_devinfo", X_OK) == 0) {
        char *const argv[] = {"/usr/bin/ibv_devinfo", "-v", "-d", "uiw_lo", NULL};
        CHECK_EQ(run(libdir, argv, out, 1 << 16), 0);
        bool ok = strstr(out, "hca_id:\tuiw_lo") && strstr(out, "transport:\t\t\tiWARP (1)") &&
                  strstr(out, "link_layer:\t\tEthernet") && strstr(out, "max_qp_wr:") &&
                  strstr(out, "atomic_cap:\t\t\tATOMIC_HCA");
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "ibv_devinfo printed:\n%s\n", out);
        char *const argv2[] = {"/usr/bin/ibv_devinfo", "-l", NULL};
        CHECK_EQ(run(libdir, argv2, out, 1 << 16), 0);
        CHECK(strstr(out, "uiw_lo") != NULL);
    } else {
        printf("SKIP: /usr/bin/ibv_devinfo not installed\n");
    }
    free(out);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    CHECK_STR(ibv_get_device_name(dp_ctx->device), "uiw_lo");
    test_query();
    test_create_checks();
    test_wr_traffic();
    test_wr_threads();
    test_unsupported();
    test_compat_1_0();
    test_helpers();
    CHECK_EQ(ibv_close_device(dp_ctx), 0);
    test_debian_tools();
    TEST_MAIN_END();
}
