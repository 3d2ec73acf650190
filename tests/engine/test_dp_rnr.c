/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receiver not ready (docs/ENGINE.md "Receiver not ready"): an untagged
 * message (Send, Send with SE / Invalidate, RFC 7306 Immediate Data) that
 * finds no posted receive is held (the receiving QP stops reading its
 * socket, TCP holds the sender) until a receive is posted, and the stream
 * is terminated as RFC 5041 §7.1 check 2 / §7.2 prescribe (DDP, untagged
 * buffer, 0x02 "invalid MSN - no buffer available") only when the limit
 * expires:
 *   - default settings: N messages posted before the receiver posts
 *     anything, then receives posted late, one by one: every message
 *     arrives in order, byte for byte, one completion each, no Terminate,
 *     both QPs stay in RTS (CRC on and off; RQ; two QPs on one SRQ);
 *   - head of line: RDMA Writes behind a held Send are not placed while it
 *     is held, and land intact after the receive is posted;
 *   - the limit from the QP's attributes (rnr_retry x min_rnr_timer, IB's
 *     encoding): the Terminate comes when it expires, the sender's WR
 *     fails with IBV_WC_REM_OP_ERR, both QPs go to ERR; rnr_retry 0 is
 *     strict (at once);
 *   - the default limit (5 s) against a raw peer: the exact Terminate;
 *   - UIWARP_RNR_HOLD_MS (child processes: the configuration is read once
 *     per process): 0 terminates at once, 300 ms terminates at 300 ms, and
 *     rnr_retry 7 set on a QP holds beyond it (no limit).
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "dp_test.h"

static uint64_t rnr_holds(struct ibv_qp *q)
{
    uint64_t v;
    pthread_mutex_lock(&to_uqp(q)->lock);
    v = to_uqp(q)->st->rnr_holds;
    pthread_mutex_unlock(&to_uqp(q)->lock);
    return v;
}

static bool term_sent(struct ibv_qp *q)
{
    bool v;
    pthread_mutex_lock(&to_uqp(q)->lock);
    v = to_uqp(q)->term_sent || to_uqp(q)->term_received;
    pthread_mutex_unlock(&to_uqp(q)->lock);
    return v;
}

static uiw_term_cause term_of(struct ibv_qp *q)
{
    uiw_term_cause c;
    pthread_mutex_lock(&to_uqp(q)->lock);
    c = to_uqp(q)->term;
    pthread_mutex_unlock(&to_uqp(q)->lock);
    return c;
}

static void set_rnr(struct ibv_qp *q, unsigned retry, unsigned timer)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.rnr_retry = (uint8_t)retry;
    a.min_rnr_timer = (uint8_t)timer;
    CHECK_EQ(ibv_modify_qp(q, &a, IBV_QP_RNR_RETRY | IBV_QP_MIN_RNR_TIMER), 0);
}

static int post_recv_on(struct ibv_qp *q, struct ibv_srq *srq, uint64_t id, void *addr,
                        uint32_t len, uint32_t lkey)
{
    return eng_post_recv_to(srq ? NULL : q, srq, addr, len, lkey, id);
}

static int post_wr(struct ibv_qp *q, uint64_t id, enum ibv_wr_opcode op, unsigned flags, void *addr,
                   uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm_or_inv)
{
    struct ibv_sge s = {(uintptr_t)addr, len, lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.sg_list = len ? &s : NULL;
    wr.num_sge = len ? 1 : 0;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (op == IBV_WR_SEND_WITH_INV)
        wr.invalidate_rkey = imm_or_inv;
    else
        wr.imm_data = htonl(imm_or_inv);
    return ibv_post_send(q, &wr, &bad);
}

/* ------------------------------------------------------------------------
 * Late receives, default settings
 * ---------------------------------------------------------------------- */

#define LATE_N 24
static const uint32_t late_size[LATE_N] = {0, 1,   100,   1500, 4096, 9000,  65536,  200000,
                                           7, 333, 4095,  4097, 8192, 16384, 131072, 24000,
                                           1, 0,   50000, 3000, 999,  70000, 12,     262144};

/* Message i's kind: 0 Send, 1 Send with SE, 2 Write with Immediate (an
 * RFC 7306 Immediate Data that consumes the receive), 3 Send with
 * Invalidate. */
static int late_kind(unsigned i)
{
    if (i % 7 == 5)
        return 2;
    if (i == 10)
        return 3;
    return i % 3 == 1 ? 1 : 0;
}

static void t_late(bool crc)
{
    struct dp_ep A, B;
    struct dp_ep_opts oa = {.sig_all = true};
    uint64_t off[LATE_N + 1], total;
    uint8_t *src, *dst, *wdst, *inv;
    struct ibv_mr *smr, *dmr, *wmr, *imr;
    struct ibv_wc wc;
    const uint32_t wlen = 5000; /* Write with Immediate payload */

    printf("late receives, RQ, CRC %s\n", crc ? "on" : "off");
    dp_async_drain();
    CHECK_EQ(dp_ep_create(&A, &oa), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    off[0] = 0;
    for (unsigned i = 0; i < LATE_N; i++)
        off[i + 1] = off[i] + late_size[i] + 64;
    total = off[LATE_N];
    src = dp_alloc(4096, total);
    dst = dp_alloc(4096, total);
    wdst = dp_alloc(4096, (size_t)wlen * LATE_N);
    inv = dp_alloc(4096, 4096);
    eng_fill(src, total, 11);
    memset(dst, 0, total);
    memset(wdst, 0, (size_t)wlen * LATE_N);
    smr = ibv_reg_mr(A.pd, src, total, IBV_ACCESS_LOCAL_WRITE);
    dmr = ibv_reg_mr(B.pd, dst, total, IBV_ACCESS_LOCAL_WRITE);
    wmr = ibv_reg_mr(B.pd, wdst, (size_t)wlen * LATE_N,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    imr = ibv_reg_mr(B.pd, inv, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(smr && dmr && wmr && imr);
    CHECK_EQ(dp_connect(&A, &B, crc, false, 4, 4, 4, 4), 0);

    /* every message is posted before the receiver posts anything */
    for (unsigned i = 0; i < LATE_N; i++) {
        int k = late_kind(i);
        int rc;
        if (k == 2)
            rc = post_wr(A.qp, i, IBV_WR_RDMA_WRITE_WITH_IMM, 0, src + off[i], wlen, smr->lkey,
                         (uintptr_t)wdst + (uint64_t)i * wlen, wmr->rkey, 0x1000 + i);
        else if (k == 3)
            rc = post_wr(A.qp, i, IBV_WR_SEND_WITH_INV, 0, src + off[i], late_size[i], smr->lkey, 0,
                         0, imr->rkey);
        else
            rc = post_wr(A.qp, i, IBV_WR_SEND, k == 1 ? IBV_SEND_SOLICITED : 0, src + off[i],
                         late_size[i], smr->lkey, 0, 0, 0);
        CHECK_EQ(rc, 0);
    }
    dp_msleep(200);
    /* held: nothing completed, nothing terminated */
    CHECK(dp_quiet(B.rcq, 1));
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK(!term_sent(A.qp) && !term_sent(B.qp));
    CHECK(rnr_holds(B.qp) >= 1);

    /* receives one by one, the first ones slowly */
    for (unsigned i = 0; i < LATE_N; i++) {
        CHECK_EQ(post_recv_on(B.qp, NULL, 100 + i, dst + off[i], late_size[i] + 64, dmr->lkey), 0);
        dp_msleep(i < 6 ? 40 : 3);
    }
    for (unsigned i = 0; i < LATE_N; i++) {
        int k = late_kind(i);
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 100 + i);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        if (k == 2) {
            CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
            CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
            CHECK_EQ(ntohl(wc.imm_data), 0x1000 + i);
        } else {
            CHECK_EQ(wc.opcode, IBV_WC_RECV);
            CHECK_EQ(wc.byte_len, late_size[i]);
            if (k == 3) {
                CHECK(wc.wc_flags & IBV_WC_WITH_INV);
                CHECK_EQ(wc.invalidated_rkey, imr->rkey);
            }
        }
    }
    CHECK(dp_quiet(B.rcq, 1)); /* one completion per message */
    for (unsigned i = 0; i < LATE_N; i++) {
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, i);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    }
    dp_sync(B.qp);
    for (unsigned i = 0; i < LATE_N; i++) {
        if (late_kind(i) == 2) {
            CHECK_MEM(wdst + (uint64_t)i * wlen, src + off[i], wlen);
            CHECK(dp_all(dst + off[i], late_size[i] + 64, 0));
        } else {
            CHECK_MEM(dst + off[i], src + off[i], late_size[i]);
            CHECK(dp_all(dst + off[i] + late_size[i], 64, 0));
        }
    }
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK(!term_sent(A.qp) && !term_sent(B.qp));
    printf("  %llu holds\n", (unsigned long long)rnr_holds(B.qp));
    CHECK(rnr_holds(B.qp) >= 2);
    CHECK_EQ(rnr_holds(A.qp), 0);

    CHECK_EQ(ibv_dereg_mr(dmr), 0);
    CHECK_EQ(ibv_dereg_mr(wmr), 0);
    CHECK_EQ(ibv_dereg_mr(imr), 0);
    CHECK_EQ(ibv_dereg_mr(smr), 0);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    free(dst);
    free(wdst);
    free(inv);
}

/* Two QPs on one SRQ, both holding: each receive posted to the SRQ wakes
 * them; every message of each sender arrives in its order. */
#define SRQ_N    12
#define SRQ_SLOT 70000u
static void t_late_srq(bool crc)
{
    struct dp_ep A1, A2, B;
    struct dp_ep_opts oa = {.sig_all = true}, ob = {.srq = true};
    struct ibv_qp *B2;
    struct ibv_qp_cap cap = {.max_send_wr = 64,
                             .max_recv_wr = 0,
                             .max_send_sge = 2,
                             .max_recv_sge = 0,
                             .max_inline_data = 0};
    uint8_t *src1, *src2, *dst;
    struct ibv_mr *m1, *m2, *dm;
    unsigned next[2] = {0, 0};
    struct ibv_wc wc;
    int sv[2];
    uiw_mpa_result m = dp_mpa(crc, false, 4, 4);

    printf("late receives, two QPs on one SRQ, CRC %s\n", crc ? "on" : "off");
    dp_async_drain();
    CHECK_EQ(dp_ep_create(&A1, &oa), 0);
    CHECK_EQ(dp_ep_create(&A2, &oa), 0);
    CHECK_EQ(dp_ep_create(&B, &ob), 0);
    B2 = eng_qp_init(B.pd, B.scq, B.rcq, B.srq, cap, false, ENG_ACCESS_ALL, 0);
    CHECK(B2 != NULL);
    src1 = dp_alloc(4096, (size_t)SRQ_SLOT * SRQ_N);
    src2 = dp_alloc(4096, (size_t)SRQ_SLOT * SRQ_N);
    dst = dp_alloc(4096, (size_t)SRQ_SLOT * 2 * SRQ_N);
    eng_fill(src1, (size_t)SRQ_SLOT * SRQ_N, 21);
    eng_fill(src2, (size_t)SRQ_SLOT * SRQ_N, 22);
    memset(dst, 0, (size_t)SRQ_SLOT * 2 * SRQ_N);
    m1 = ibv_reg_mr(A1.pd, src1, (size_t)SRQ_SLOT * SRQ_N, IBV_ACCESS_LOCAL_WRITE);
    m2 = ibv_reg_mr(A2.pd, src2, (size_t)SRQ_SLOT * SRQ_N, IBV_ACCESS_LOCAL_WRITE);
    dm = ibv_reg_mr(B.pd, dst, (size_t)SRQ_SLOT * 2 * SRQ_N, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m1 && m2 && dm);
    CHECK_EQ(dp_connect(&A1, &B, crc, false, 4, 4, 4, 4), 0);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(A2.qp), sv[0], &m), 0);
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(B2), sv[1], &m), 0);

    for (unsigned i = 0; i < SRQ_N; i++) {
        uint32_t len = (uint32_t)(i * 5813u % SRQ_SLOT);
        CHECK_EQ(
            post_wr(A1.qp, i, IBV_WR_SEND, 0, src1 + (size_t)i * SRQ_SLOT, len, m1->lkey, 0, 0, 0),
            0);
        len = (uint32_t)((i * 7919u + 3) % SRQ_SLOT);
        CHECK_EQ(
            post_wr(A2.qp, i, IBV_WR_SEND, 0, src2 + (size_t)i * SRQ_SLOT, len, m2->lkey, 0, 0, 0),
            0);
    }
    dp_msleep(200);
    CHECK(dp_quiet(B.rcq, 1));
    CHECK(rnr_holds(B.qp) >= 1);
    CHECK(rnr_holds(B2) >= 1);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B2), IBV_QPS_RTS);
    for (unsigned k = 0; k < 2 * SRQ_N; k++) {
        CHECK_EQ(post_recv_on(NULL, B.srq, k, dst + (size_t)k * SRQ_SLOT, SRQ_SLOT, dm->lkey), 0);
        dp_msleep(k < 6 ? 30 : 3);
    }
    for (unsigned k = 0; k < 2 * SRQ_N; k++) {
        unsigned which, i;
        uint32_t len;
        const uint8_t *exp;
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK(wc.wr_id < 2 * SRQ_N);
        which = wc.qp_num == B2->qp_num;
        CHECK(which || wc.qp_num == B.qp->qp_num);
        i = next[which]++;
        CHECK(i < SRQ_N);
        if (i >= SRQ_N || wc.wr_id >= 2 * SRQ_N)
            continue;
        len = which ? (uint32_t)((i * 7919u + 3) % SRQ_SLOT) : (uint32_t)(i * 5813u % SRQ_SLOT);
        exp = (which ? src2 : src1) + (size_t)i * SRQ_SLOT;
        CHECK_EQ(wc.byte_len, len);
        dp_sync(which ? B2 : B.qp);
        CHECK_MEM(dst + wc.wr_id * SRQ_SLOT, exp, len);
    }
    CHECK_EQ(next[0], SRQ_N);
    CHECK_EQ(next[1], SRQ_N);
    CHECK(dp_quiet(B.rcq, 1));
    for (unsigned i = 0; i < SRQ_N; i++) {
        CHECK_EQ(dp_poll(A1.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(dp_poll(A2.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    }
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B2), IBV_QPS_RTS);
    CHECK(!term_sent(B.qp) && !term_sent(B2));
    printf("  %llu + %llu holds\n", (unsigned long long)rnr_holds(B.qp),
           (unsigned long long)rnr_holds(B2));

    CHECK_EQ(ibv_dereg_mr(dm), 0);
    CHECK_EQ(ibv_dereg_mr(m1), 0);
    CHECK_EQ(ibv_dereg_mr(m2), 0);
    dp_ep_destroy(&A1);
    dp_ep_destroy(&A2);
    CHECK_EQ(ibv_destroy_qp(B2), 0);
    dp_ep_destroy(&B);
    free(src1);
    free(src2);
    free(dst);
}

/* ------------------------------------------------------------------------
 * Head of line: Writes behind a held Send
 * ---------------------------------------------------------------------- */

static void t_writes_behind(bool crc)
{
    struct dp_ep A, B;
    struct dp_ep_opts oa = {.sig_all = true};
    const size_t wl = 32768, nw = 8;
    uint8_t *src, *wdst, *rb;
    struct ibv_mr *smr, *wmr, *rmr;
    struct ibv_wc wc;

    printf("writes behind a held Send, CRC %s\n", crc ? "on" : "off");
    dp_async_drain();
    CHECK_EQ(dp_ep_create(&A, &oa), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    src = dp_alloc(4096, wl * nw + 200);
    wdst = dp_alloc(4096, wl * nw);
    rb = dp_alloc(4096, 4096);
    eng_fill(src, wl * nw + 200, 31);
    memset(wdst, 0, wl * nw);
    memset(rb, 0, 4096);
    smr = ibv_reg_mr(A.pd, src, wl * nw + 200, IBV_ACCESS_LOCAL_WRITE);
    wmr = ibv_reg_mr(B.pd, wdst, wl * nw, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    rmr = ibv_reg_mr(B.pd, rb, 4096, IBV_ACCESS_LOCAL_WRITE);
    CHECK(smr && wmr && rmr);
    CHECK_EQ(dp_connect(&A, &B, crc, false, 4, 4, 4, 4), 0);

    CHECK_EQ(post_wr(A.qp, 1, IBV_WR_SEND, 0, src + wl * nw, 100, smr->lkey, 0, 0, 0), 0);
    for (size_t i = 0; i < nw; i++)
        CHECK_EQ(post_wr(A.qp, 10 + i, IBV_WR_RDMA_WRITE, 0, src + i * wl, (uint32_t)wl, smr->lkey,
                         (uintptr_t)wdst + i * wl, wmr->rkey, 0),
                 0);
    CHECK_EQ(post_wr(A.qp, 2, IBV_WR_SEND, 0, src + wl * nw + 100, 100, smr->lkey, 0, 0, 0), 0);
    dp_msleep(200);
    /* the Send is held, the Writes behind it wait with it (not placed) */
    dp_sync(B.qp);
    CHECK(dp_all(wdst, wl * nw, 0));
    CHECK(dp_quiet(B.rcq, 1));
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK(rnr_holds(B.qp) >= 1);

    CHECK_EQ(post_recv_on(B.qp, NULL, 1, rb, 100, rmr->lkey), 0);
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.byte_len, 100);
    dp_sync(B.qp);
    CHECK_MEM(rb, src + wl * nw, 100);
    /* the second Send (after the Writes) holds in turn */
    CHECK_EQ(post_recv_on(B.qp, NULL, 2, rb + 200, 100, rmr->lkey), 0);
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 2);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    dp_sync(B.qp);
    CHECK_MEM(rb + 200, src + wl * nw + 100, 100);
    /* placed in order before the second Send completed */
    CHECK_MEM(wdst, src, wl * nw);
    for (unsigned i = 0; i < 2 + nw; i++) {
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    }
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    CHECK(!term_sent(A.qp) && !term_sent(B.qp));

    CHECK_EQ(ibv_dereg_mr(wmr), 0);
    CHECK_EQ(ibv_dereg_mr(rmr), 0);
    CHECK_EQ(ibv_dereg_mr(smr), 0);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    free(wdst);
    free(rb);
}

/* ------------------------------------------------------------------------
 * The limit
 * ---------------------------------------------------------------------- */

/* A receiver that never posts: A's large Send stays outstanding (the socket
 * is full) until B's Terminate fails it. Returns the ms it took, or 0. B's
 * limit comes from (retry, timer) unless retry < 0. After its Terminate B
 * reads and discards what follows, and loopback TCP buffers megabytes, so a
 * 4 MiB Send could be handed to TCP whole before the Terminate reached A
 * and complete with success (a sender's completion means its buffer may be
 * used again; seen in CI, with rnr_retry 0 and with a 300 ms hold): the
 * Send is 64 MiB, about 15 ms of loopback TCP after the Terminate, far
 * longer than the Terminate takes to arrive. */
static uint64_t never_posts(int retry, unsigned timer, uint64_t min_ms, uint64_t max_ms)
{
    struct dp_ep A, B;
    const size_t len = 64u << 20;
    uint8_t *src;
    struct ibv_mr *smr;
    struct ibv_wc wc;
    uint64_t t0, dt = 0;
    uiw_term_cause c;

    dp_async_drain();
    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    src = dp_alloc(4096, len);
    eng_fill(src, len, 41);
    smr = ibv_reg_mr(A.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
    CHECK(smr != NULL);
    CHECK_EQ(dp_connect(&A, &B, true, false, 4, 4, 4, 4), 0);
    if (retry >= 0)
        set_rnr(B.qp, (unsigned)retry, timer);
    t0 = dp_now_ms();
    CHECK_EQ(
        post_wr(A.qp, 7, IBV_WR_SEND, IBV_SEND_SIGNALED, src, (uint32_t)len, smr->lkey, 0, 0, 0),
        0);
    CHECK_EQ(dp_poll(A.scq, &wc, max_ms + DP_TIMEOUT_MS), 1);
    dt = dp_now_ms() - t0;
    CHECK_EQ(wc.wr_id, 7);
    /* RFC 5041 §7.2 untagged buffer error: the sender's WR fails */
    CHECK_EQ(wc.status, IBV_WC_REM_OP_ERR);
    printf("  Terminate after %llu ms (limit expected in [%llu, %llu])\n", (unsigned long long)dt,
           (unsigned long long)min_ms, (unsigned long long)max_ms);
    CHECK(dt >= min_ms);
    CHECK(dt <= max_ms);
    for (uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
         (dp_state(A.qp) != IBV_QPS_ERR || dp_state(B.qp) != IBV_QPS_ERR) && dp_now_ms() < end;)
        dp_msleep(2);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_REQ_ERR);
    /* the Terminate as before: DDP, untagged buffer, invalid MSN - no buffer */
    c = term_of(A.qp);
    CHECK(to_uqp(A.qp)->term_received);
    CHECK_EQ(c.layer, UIW_LAYER_DDP);
    CHECK_EQ(c.etype, UIW_DDP_ET_UNTAGGED);
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MSN_NOBUF);
    c = term_of(B.qp);
    CHECK(to_uqp(B.qp)->term_sent);
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MSN_NOBUF);
    CHECK_EQ(rnr_holds(B.qp), min_ms ? 1 : 0);
    CHECK_EQ(ibv_dereg_mr(smr), 0);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    return dt;
}

/* The attribute mapping: rnr_retry x min_rnr_timer (IB encoding). */
static void t_limit_attr(void)
{
    printf("limit from rnr_retry 1 x min_rnr_timer 31 (491.52 ms)\n");
    never_posts(1, 31, 480, 15000);
    printf("limit from rnr_retry 3 x min_rnr_timer 0 (3 x 655.36 ms)\n");
    never_posts(3, 0, 1950, 20000);
    printf("rnr_retry 0: strict, Terminate at once\n");
    never_posts(0, 14, 0, 3000);
}

/* A raw peer (hand-made FPDUs) sends one Send to B, which has no receive:
 * the exact Terminate of RFC 5041 §7.2 after ms_min. */
static void raw_no_receive(const uiw_mpa_result *mpa, uint64_t ms_min, uint64_t ms_max,
                           unsigned holds)
{
    struct dp_ep B;
    struct dp_raw P;
    uiw_hdr h, t;
    uint8_t pay[64], img[64], enc[64];
    uint64_t t0, dt;
    int n;

    dp_async_drain();
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    CHECK_EQ(dp_connect_raw(&B, &P, mpa), 0);
    dp_fill(pay, sizeof(pay));
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    t0 = dp_now_ms();
    CHECK_EQ(dp_raw_send(&P, &h, pay, 10), 0);
    CHECK_EQ(dp_raw_term(&P, &t, (unsigned)ms_max + DP_TIMEOUT_MS), 1);
    dt = dp_now_ms() - t0;
    printf("  Terminate after %llu ms (expected in [%llu, %llu])\n", (unsigned long long)dt,
           (unsigned long long)ms_min, (unsigned long long)ms_max);
    CHECK(dt >= ms_min);
    CHECK(dt <= ms_max);
    CHECK_EQ(t.qn, UIW_QN_TERMINATE);
    CHECK_EQ(t.u.term.cause.layer, UIW_LAYER_DDP);
    CHECK_EQ(t.u.term.cause.etype, UIW_DDP_ET_UNTAGGED);
    CHECK_EQ(t.u.term.cause.ecode, UIW_DDP_EC_U_INVALID_MSN_NOBUF);
    /* the terminated segment's length and DDP header (RFC 5040 §4.8) */
    n = uiw_hdr_encode(&h, enc, sizeof(enc));
    CHECK(n > 0);
    img[0] = (uint8_t)((n + 10) >> 8);
    img[1] = (uint8_t)(n + 10);
    memcpy(img + 2, enc, UIW_HDR_UNTAGGED_LEN);
    CHECK(t.u.term.hdr_ddp);
    CHECK_EQ(t.u.term.ddp_hdr_len, 2 + UIW_HDR_UNTAGGED_LEN);
    CHECK_MEM(t.u.term.ddp_hdr, img, 2 + UIW_HDR_UNTAGGED_LEN);
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_REQ_ERR);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
    CHECK_EQ(rnr_holds(B.qp), holds);
    dp_raw_fini(&P);
    dp_ep_destroy(&B);
}

/* ------------------------------------------------------------------------
 * UIWARP_RNR_HOLD_MS (a child process each)
 * ---------------------------------------------------------------------- */

static void env_strict(void)
{
    uiw_mpa_result m = dp_mpa(true, false, 4, 4);
    printf("UIWARP_RNR_HOLD_MS=0: Terminate at once\n");
    raw_no_receive(&m, 0, 3000, 0);
}

static void env_300(void)
{
    printf("UIWARP_RNR_HOLD_MS=300\n");
    never_posts(-1, 0, 290, 15000);

    /* rnr_retry 7 on the QP (IB: retry forever) overrides the variable */
    {
        struct dp_ep A, B;
        struct dp_ep_opts oa = {.sig_all = true};
        uint8_t *buf = dp_alloc(4096, 8192);
        struct ibv_mr *sm, *rm;
        struct ibv_wc wc;

        printf("  rnr_retry 7: no limit\n");
        dp_async_drain();
        CHECK_EQ(dp_ep_create(&A, &oa), 0);
        CHECK_EQ(dp_ep_create(&B, NULL), 0);
        eng_fill(buf, 4096, 51);
        memset(buf + 4096, 0, 4096);
        sm = ibv_reg_mr(A.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
        rm = ibv_reg_mr(B.pd, buf + 4096, 4096, IBV_ACCESS_LOCAL_WRITE);
        CHECK(sm && rm);
        CHECK_EQ(dp_connect(&A, &B, false, false, 4, 4, 4, 4), 0);
        set_rnr(B.qp, 7, 1);
        CHECK_EQ(post_wr(A.qp, 1, IBV_WR_SEND, 0, buf, 4096, sm->lkey, 0, 0, 0), 0);
        dp_msleep(1200);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
        CHECK(!term_sent(B.qp));
        CHECK_EQ(rnr_holds(B.qp), 1);
        CHECK_EQ(post_recv_on(B.qp, NULL, 9, buf + 4096, 4096, rm->lkey), 0);
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.byte_len, 4096);
        dp_sync(B.qp);
        CHECK_MEM(buf + 4096, buf, 4096);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
        CHECK_EQ(ibv_dereg_mr(rm), 0);
        CHECK_EQ(ibv_dereg_mr(sm), 0);
        dp_ep_destroy(&A);
        dp_ep_destroy(&B);
        free(buf);
    }
}

/* Run fn in a child process with UIWARP_RNR_HOLD_MS=val (the parent has not
 * touched the engine yet: the child reads its own configuration). */
static void in_child(const char *val, void (*fn)(void))
{
    int st = 0;
    pid_t pid;

    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setenv("UIWARP_RNR_HOLD_MS", val, 1);
        dp_ctx = dp_open();
        CHECK(dp_ctx != NULL);
        if (dp_ctx) {
            fn();
            ibv_close_device(dp_ctx);
        }
        printf("child UIWARP_RNR_HOLD_MS=%s: %lu checks, %lu failed\n", val, tu_checks, tu_failed);
        fflush(stdout);
        _exit(tu_failed ? 1 : 0);
    }
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
    uiw_mpa_result m = dp_mpa(false, false, 4, 4);

    /* the variable's cases first, in children forked before this process
     * starts the engine (no progress thread yet) */
    unsetenv("UIWARP_RNR_HOLD_MS");
    in_child("0", env_strict);
    in_child("300", env_300);

    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    t_late(true);
    t_late(false);
    t_late_srq(true);
    t_late_srq(false);
    t_writes_behind(true);
    t_writes_behind(false);
    t_limit_attr();
    printf("default limit (5 s), raw peer\n");
    raw_no_receive(&m, 4900, 25000, 1);
    ibv_close_device(dp_ctx);
    TEST_MAIN_END();
}
