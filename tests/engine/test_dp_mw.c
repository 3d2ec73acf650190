/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory windows (RFC 5040 §2.1; verbs ibv_alloc_mw, ibv_bind_mw and
 * IBV_WR_BIND_MW): a peer reaches exactly the window's range with exactly
 * its rights, through its rkey only; a type 2 window is invalidated by the
 * peer's Send with Invalidate and by Local Invalidate; type 1 windows are
 * rebound and unbound with ibv_bind_mw; bind errors complete with
 * IBV_WC_MW_BIND_ERR; a region with a bound window is not deregistered.
 */
#include <stdlib.h>
#include <string.h>

#include "dp_test.h"

#define BUF  65536
#define WOFF 4096 /* the window: [WOFF, WOFF + WLEN) of B's region */
#define WLEN 8192

static struct dp_ep A, B;
static uint8_t *abuf, *bbuf;
static struct ibv_mr *amr, *bmr;

static void pair(unsigned bmr_access)
{
    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    amr = ibv_reg_mr(A.pd, abuf, BUF, ENG_ACCESS_ALL);
    bmr = ibv_reg_mr(B.pd, bbuf, BUF, bmr_access);
    CHECK(amr && bmr);
    CHECK_EQ(dp_connect(&A, &B, false, false, 16, 16, 16, 16), 0);
}

static void unpair(void)
{
    ibv_dereg_mr(amr);
    ibv_dereg_mr(bmr);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    dp_async_drain();
}

/* Post one WR on qp and wait for its completion: its status. */
static int post_wait(struct dp_ep *e, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    struct ibv_wc wc;

    wr->send_flags |= IBV_SEND_SIGNALED;
    if (ibv_post_send(e->qp, wr, &bad))
        return -1;
    if (dp_poll(e->scq, &wc, DP_TIMEOUT_MS) != 1)
        return -2;
    CHECK_EQ(wc.wr_id, wr->wr_id);
    if (wr->opcode == IBV_WR_BIND_MW && wc.status == IBV_WC_SUCCESS)
        CHECK_EQ(wc.opcode, IBV_WC_BIND_MW);
    return wc.status;
}

/* A Write completes at A when TCP took it: B has placed it once a Send
 * behind it arrived (in order, RFC 5040 §5.5). */
static void fence(void)
{
    struct ibv_recv_wr rw = {.wr_id = 77}, *rbad;
    struct ibv_send_wr wr = {.wr_id = 78, .opcode = IBV_WR_SEND};
    struct ibv_wc wc;

    CHECK_EQ(ibv_post_recv(B.qp, &rw, &rbad), 0);
    CHECK_EQ(post_wait(&A, &wr), IBV_WC_SUCCESS);
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    dp_sync(B.qp);
}

/* A refused remote access: B terminates (access error), its memory stays. */
static void refused(uint8_t fill)
{
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_ACCESS_ERR);
    dp_sync(B.qp);
    CHECK(dp_all(bbuf, BUF, fill));
}

/* A's RDMA Write or Read of len bytes at B's tagged offset to via rkey. */
static int rdma(enum ibv_wr_opcode op, uint32_t rkey, uint64_t to, uint32_t len)
{
    struct ibv_sge s = {(uintptr_t)abuf, len, amr->lkey};
    struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = op};

    wr.wr.rdma.remote_addr = to;
    wr.wr.rdma.rkey = rkey;
    return post_wait(&A, &wr);
}

static int bind2(struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, uint64_t addr, uint64_t len,
                 unsigned acc)
{
    struct ibv_send_wr wr = {.wr_id = 99, .opcode = IBV_WR_BIND_MW};

    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = addr;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = acc;
    return post_wait(&B, &wr);
}

/* A new pair whose B has a type 2 window bound by a work request to
 * [WOFF, WOFF + WLEN) of its region with rights acc: the window, or NULL
 * (the pair is gone then). *rk: its rkey, *w: the range's start. */
static struct ibv_mw *window2(unsigned acc, uint32_t *rk, uint64_t *w)
{
    pair(ENG_ACCESS_ALL | IBV_ACCESS_MW_BIND);
    struct ibv_mw *mw = ibv_alloc_mw(B.pd, IBV_MW_TYPE_2);
    CHECK(mw != NULL);
    if (!mw) {
        unpair();
        return NULL;
    }
    *rk = ibv_inc_rkey(mw->rkey);
    *w = (uintptr_t)bbuf + WOFF;
    CHECK_EQ(bind2(mw, *rk, bmr, *w, WLEN, acc), IBV_WC_SUCCESS);
    CHECK_EQ(mw->rkey, *rk);
    return mw;
}

/* Type 2: bound by a work request, reached only in range and with its
 * rights, invalidated by the peer's Send with Invalidate. */
static void type2(void)
{
    uint32_t rk;
    uint64_t w;
    struct ibv_mw *mw = window2(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &rk, &w);
    if (!mw)
        return;
    /* Write and Read through it, at both ends of the range */
    memset(bbuf, 0, BUF);
    eng_fill(abuf, WLEN, 1);
    CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, rk, w, WLEN), IBV_WC_SUCCESS);
    fence();
    CHECK_EQ(eng_diff(bbuf + WOFF, WLEN, 1), -1);
    CHECK(dp_all(bbuf, WOFF, 0) && dp_all(bbuf + WOFF + WLEN, BUF - WOFF - WLEN, 0));
    memset(abuf, 0, BUF);
    CHECK_EQ(rdma(IBV_WR_RDMA_READ, rk, w + WLEN - 100, 100), IBV_WC_SUCCESS);
    CHECK_MEM(abuf, bbuf + WOFF + WLEN - 100, 100);
    /* the region cannot go while the window is bound to it */
    CHECK_EQ(ibv_dereg_mr(bmr), EBUSY);
    /* a window is no lkey */
    {
        struct ibv_sge s = {w, 16, rk};
        struct ibv_send_wr wr = {.wr_id = 5, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND};
        struct ibv_recv_wr rw = {.wr_id = 6}, *rbad;
        CHECK_EQ(ibv_post_recv(A.qp, &rw, &rbad), 0);
        CHECK_EQ(post_wait(&B, &wr), IBV_WC_LOC_PROT_ERR);
    }
    /* (that local error ended B's QP; the rest on a new pair) */
    CHECK_EQ(ibv_dealloc_mw(mw), 0);
    unpair();

    if (!(mw = window2(IBV_ACCESS_REMOTE_WRITE, &rk, &w)))
        return;
    /* bound twice without an invalidation: refused */
    CHECK_EQ(bind2(mw, ibv_inc_rkey(rk), bmr, w, WLEN, IBV_ACCESS_REMOTE_WRITE),
             IBV_WC_MW_BIND_ERR);
    CHECK_EQ(ibv_dealloc_mw(mw), 0);
    unpair();

    /* the peer invalidates it with Send with Invalidate; then it is gone */
    if (!(mw = window2(IBV_ACCESS_REMOTE_WRITE, &rk, &w)))
        return;
    {
        struct ibv_recv_wr rw = {.wr_id = 8}, *rbad;
        struct ibv_send_wr wr = {.wr_id = 9, .opcode = IBV_WR_SEND_WITH_INV};
        struct ibv_wc wc;
        wr.invalidate_rkey = rk;
        CHECK_EQ(ibv_post_recv(B.qp, &rw, &rbad), 0);
        CHECK_EQ(post_wait(&A, &wr), IBV_WC_SUCCESS);
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK(wc.wc_flags & IBV_WC_WITH_INV);
        CHECK_EQ(wc.invalidated_rkey, rk);
    }
    /* invalid now: it can be bound again with the next key ... */
    uint32_t rk2 = ibv_inc_rkey(rk);
    CHECK_EQ(bind2(mw, rk2, bmr, w, 64, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
    CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, rk2, w, 64), IBV_WC_SUCCESS);
    fence();
    /* ... and the old key reaches nothing: a Write through it is refused
     * by B (Terminate) and B's memory stays */
    memset(bbuf, 0x5A, BUF);
    eng_fill(abuf, 64, 3);
    (void)rdma(IBV_WR_RDMA_WRITE, rk, w, 64);
    refused(0x5A);
    CHECK_EQ(ibv_dealloc_mw(mw), 0);
    CHECK_EQ(ibv_dereg_mr(bmr), 0);
    bmr = NULL;
    unpair();
}

/* Out of range and without the right: refused, memory untouched. */
static void type2_limits(void)
{
    for (int k = 0; k < 2; k++) {
        uint32_t rk;
        uint64_t w;
        struct ibv_mw *mw = window2(IBV_ACCESS_REMOTE_READ, &rk, &w);
        if (!mw)
            return;
        memset(bbuf, 0x3C, BUF);
        eng_fill(abuf, 256, 4);
        if (k == 0) /* a byte past the end: the Read fails */
            CHECK(rdma(IBV_WR_RDMA_READ, rk, w + WLEN - 255, 256) != IBV_WC_SUCCESS);
        else /* a Write through a read-only window */
            (void)rdma(IBV_WR_RDMA_WRITE, rk, w, 256);
        refused(0x3C);
        CHECK_EQ(ibv_dealloc_mw(mw), 0);
        unpair();
    }
}

/* Bind errors: a region without IBV_ACCESS_MW_BIND, a range outside the
 * region, remote write on a region without local write. */
static void bind_errors(void)
{
    static const struct {
        unsigned mr_access, acc;
        uint64_t off, len;
    } c[] = {
        {ENG_ACCESS_ALL, IBV_ACCESS_REMOTE_WRITE, 0, 64},
        {ENG_ACCESS_ALL | IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_WRITE, BUF - 32, 64},
        {IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND, IBV_ACCESS_REMOTE_WRITE, 0, 64},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        pair(c[i].mr_access);
        struct ibv_mw *mw = ibv_alloc_mw(B.pd, IBV_MW_TYPE_2);
        CHECK(mw != NULL);
        if (mw) {
            CHECK_EQ(bind2(mw, ibv_inc_rkey(mw->rkey), bmr, (uintptr_t)bbuf + c[i].off, c[i].len,
                           c[i].acc),
                     IBV_WC_MW_BIND_ERR);
            CHECK_EQ(ibv_dealloc_mw(mw), 0);
        }
        unpair();
    }
}

/* Type 1: ibv_bind_mw (a new rkey each time), rebinding, unbinding. */
static void type1(void)
{
    pair(ENG_ACCESS_ALL | IBV_ACCESS_MW_BIND);
    struct ibv_mw *mw = ibv_alloc_mw(B.pd, IBV_MW_TYPE_1);
    CHECK(mw != NULL);
    if (!mw)
        return unpair();
    struct ibv_mw_bind b = {.wr_id = 31, .send_flags = IBV_SEND_SIGNALED};
    struct ibv_wc wc;
    uint32_t before = mw->rkey;
    b.bind_info.mr = bmr;
    b.bind_info.addr = (uintptr_t)bbuf;
    b.bind_info.length = 1024;
    b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK_EQ(ibv_bind_mw(B.qp, mw, &b), 0);
    CHECK(mw->rkey != before);
    CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 31);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.opcode, IBV_WC_BIND_MW);
    uint32_t first = mw->rkey;
    memset(bbuf, 0, BUF);
    eng_fill(abuf, 1024, 5);
    CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, first, (uintptr_t)bbuf, 1024), IBV_WC_SUCCESS);
    fence();
    CHECK_EQ(eng_diff(bbuf, 1024, 5), -1);
    /* rebound elsewhere with a new rkey */
    b.wr_id = 32;
    b.bind_info.addr = (uintptr_t)bbuf + 2048;
    CHECK_EQ(ibv_bind_mw(B.qp, mw, &b), 0);
    CHECK(mw->rkey != first);
    CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    eng_fill(abuf, 1024, 6);
    CHECK_EQ(rdma(IBV_WR_RDMA_WRITE, mw->rkey, (uintptr_t)bbuf + 2048, 1024), IBV_WC_SUCCESS);
    fence();
    CHECK_EQ(eng_diff(bbuf + 2048, 1024, 6), -1);
    /* unbound: the region may go, once the window is deallocated */
    b.wr_id = 33;
    b.bind_info.mr = NULL;
    b.bind_info.addr = 0;
    b.bind_info.length = 0;
    CHECK_EQ(ibv_bind_mw(B.qp, mw, &b), 0);
    CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    /* a type 1 bind through ibv_bind_mw only; type 2 windows refuse it */
    struct ibv_mw *mw2 = ibv_alloc_mw(B.pd, IBV_MW_TYPE_2);
    CHECK(mw2 != NULL);
    if (mw2) {
        CHECK_EQ(ibv_bind_mw(B.qp, mw2, &b), EINVAL);
        CHECK_EQ(ibv_dealloc_mw(mw2), 0);
    }
    /* the old rkey reaches nothing now */
    memset(bbuf, 0x77, BUF);
    (void)rdma(IBV_WR_RDMA_WRITE, first, (uintptr_t)bbuf, 64);
    refused(0x77);
    CHECK_EQ(ibv_dealloc_mw(mw), 0);
    unpair();
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    abuf = dp_alloc(4096, BUF);
    bbuf = dp_alloc(4096, BUF);
    if (!dp_ctx || !abuf || !bbuf)
        return 1;
    type2();
    type2_limits();
    bind_errors();
    type1();
    TEST_MAIN_END();
}
