/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The data path against a misbehaving peer: one QP of ours on a socketpair,
 * the other end driven by the test with the wire core (hand-made FPDUs
 * written with uiw_tx / uiw_hdr_encode, our QP's output parsed with
 * uiw_rx_feed). For each Terminate class: the exact layer / type / code
 * and attached headers on the wire (RFC 5040 §4.8, §7; RFC 5041 §7;
 * RFC 5044 §8; RFC 7306 §8), the local completion and async event, and
 * that no byte outside the targeted region changed (guard bytes). Also:
 * Terminates received (RFC and siw layouts), the zero-length Read RTR to
 * STag 1, P2P RTR in both roles, EOF handling, and a mutation loop.
 */
#include <stdlib.h>

#include "dp_test.h"

#define G    256 /* guard bytes on each side of every region */
#define RLEN 4096

static struct dp_ep B;
static struct dp_raw P;
static uint8_t *mem;          /* G | region | G */
static struct ibv_mr *mr_all; /* region, every right */

static void put_be16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint8_t *region(void)
{
    return mem + G;
}

static bool guards_ok(void)
{
    return dp_all(mem, G, 0xA5) && dp_all(mem + G + RLEN, G, 0xA5);
}

/* Fresh QP B + raw peer; `mpa` NULL: CRC as given, IRD/ORD 4. */
static void setup(bool crc, const uiw_mpa_result *mpa, const struct dp_ep_opts *o)
{
    uiw_mpa_result m = mpa ? *mpa : dp_mpa(crc, false, 4, 4);

    dp_async_drain();
    CHECK_EQ(dp_ep_create(&B, o), 0);
    mem = dp_alloc(4096, 2 * G + RLEN);
    memset(mem, 0xA5, 2 * G + RLEN);
    mr_all = ibv_reg_mr(B.pd, region(), RLEN,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC);
    CHECK(mr_all != NULL);
    CHECK_EQ(dp_connect_raw(&B, &P, &m), 0);
}

static void teardown(void)
{
    dp_raw_fini(&P);
    CHECK_EQ(ibv_dereg_mr(mr_all), 0);
    dp_ep_destroy(&B);
    free(mem);
}

/* The image a Terminate must carry for a single-segment message: the
 * ULPDU_Length we sent, then the DDP header (+ RDMA header). */
static unsigned img_of(const uiw_hdr *h, unsigned payload, bool rreq, uint8_t *out)
{
    uint8_t tmp[128];
    int n = uiw_hdr_encode(h, tmp, sizeof(tmp));
    unsigned ddp = h->tagged ? UIW_HDR_TAGGED_LEN : UIW_HDR_UNTAGGED_LEN;

    put_be16(out, (unsigned)n + payload);
    memcpy(out + 2, tmp, ddp);
    if (rreq) {
        memcpy(out + 2 + ddp, tmp + ddp, UIW_RREQ_LEN);
        return 2 + ddp + UIW_RREQ_LEN;
    }
    return 2 + ddp;
}

/* Receive our QP's Terminate and check it. img NULL: no DDP header (M/D
 * clear); rreq: R with the RDMA header after the DDP header in img. */
static void expect_term(unsigned layer, unsigned etype, unsigned ecode, const uint8_t *img,
                        unsigned img_len)
{
    uiw_hdr h;
    int r = dp_raw_term(&P, &h, DP_TIMEOUT_MS);

    CHECK_EQ(r, 1);
    if (r != 1)
        return;
    /* RFC 5040 §4.8, §5.4: QN 2, MSN 1, MO 0, L */
    CHECK_EQ(h.qn, UIW_QN_TERMINATE);
    CHECK_EQ(h.msn, 1);
    CHECK_EQ(h.mo, 0);
    CHECK(h.last);
    CHECK_EQ(h.u.term.cause.layer, layer);
    CHECK_EQ(h.u.term.cause.etype, etype);
    CHECK_EQ(h.u.term.cause.ecode, ecode);
    CHECK(!h.u.term.siw_layout);
    if (!img) {
        CHECK(!h.u.term.hdr_mpa);
        CHECK(!h.u.term.hdr_ddp);
        CHECK(!h.u.term.hdr_rdma);
        return;
    }
    CHECK(h.u.term.hdr_mpa);
    CHECK(h.u.term.hdr_ddp);
    {
        unsigned ddp = (img[2] & 0x80) ? 16 : 20;
        CHECK_EQ(h.u.term.ddp_hdr_len, ddp);
        CHECK_MEM(h.u.term.ddp_hdr, img, ddp);
        CHECK_EQ(h.u.term.hdr_rdma, img_len > ddp);
        if (img_len > ddp) {
            CHECK_EQ(h.u.term.rdma_hdr_len, UIW_RREQ_LEN);
            CHECK_MEM(h.u.term.rdma_hdr, img + ddp, UIW_RREQ_LEN);
        }
    }
}

/* After a Terminate: B in ERR, the event, the socket half-closed. */
static void expect_dead(int async)
{
    uiw_hdr h;
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), async);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
    CHECK(to_uqp(B.qp)->term_sent);
    CHECK_EQ(dp_raw_recv(&P, &h, DP_TIMEOUT_MS, NULL), -1); /* EOF after the Terminate */
}

static int post_recv(uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
    return eng_post_recv(B.qp, addr, len, lkey, id);
}

static void expect_rwc(uint64_t id, enum ibv_wc_status st)
{
    struct ibv_wc wc;
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, id);
    CHECK_EQ(wc.status, st);
}

/* Strict RFC 5041 §7.1 check 2 on QP q: a Send that finds no posted
 * receive is terminated at once instead of being held until one is posted
 * (the receiver-not-ready default, docs/ENGINE.md). IB's rnr_retry 0 ("no
 * retry"), settable in RTS on uiwarp. */
static void set_strict_rnr(struct ibv_qp *q)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.rnr_retry = 0;
    CHECK_EQ(ibv_modify_qp(q, &a, IBV_QP_RNR_RETRY), 0);
}

static void write_hdr(uiw_hdr *h, uint32_t stag, uint64_t to)
{
    dp_hdr(h, true, UIW_OP_WRITE);
    h->stag = stag;
    h->to = to;
}

/* ------------------------------------------------------------------------ */

static void t_bad_crc(void)
{
    uiw_hdr h;
    uint8_t pay[100], *b = NULL;
    size_t n = 0;

    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(1, region(), 200, mr_all->lkey), 0);
    dp_fill(pay, sizeof(pay));
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    CHECK_EQ(dp_raw_build(&P, &h, pay, sizeof(pay), &b, &n), 0);
    b[n - 1] ^= 0x40; /* corrupt the CRC */
    CHECK_EQ(dp_write_all(P.fd, b, n), 0);
    free(b);
    /* RFC 5044 §8 code 2; LLP errors carry no headers (RFC 5040 Figure 10) */
    expect_term(UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC, NULL, 0);
    expect_rwc(1, IBV_WC_WR_FLUSH_ERR);
    expect_dead(IBV_EVENT_QP_FATAL);
    CHECK(guards_ok());
    teardown();
}

static void t_invalid_stag(bool crc)
{
    uiw_hdr h;
    uint8_t pay[64], img[64];
    unsigned il;

    setup(crc, NULL, NULL);
    write_hdr(&h, mr_all->rkey ^ 0x01000000u, (uintptr_t)region());
    dp_fill(pay, sizeof(pay));
    CHECK_EQ(dp_raw_send(&P, &h, pay, sizeof(pay)), 0);
    il = img_of(&h, sizeof(pay), false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();
}

static void t_bounds(void)
{
    uiw_hdr h;
    uint8_t pay[300], img[64];
    unsigned il;

    /* one segment crossing the end: nothing of it is placed */
    setup(true, NULL, NULL);
    write_hdr(&h, mr_all->rkey, (uintptr_t)region() + RLEN - 100);
    dp_fill(pay, 200);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 200), 0);
    il = img_of(&h, 200, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_BASE_BOUNDS, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();

    /* below the base */
    setup(false, NULL, NULL);
    write_hdr(&h, mr_all->rkey, (uintptr_t)region() - 8);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 16), 0);
    il = img_of(&h, 16, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_BASE_BOUNDS, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();

    /* TO + length wraps 2^64 (RFC 5041 §7.1 check 5) */
    setup(false, NULL, NULL);
    write_hdr(&h, mr_all->rkey, UINT64_MAX - 3);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 4), 0);
    il = img_of(&h, 4, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_TO_WRAP, img, il);
    teardown();

    /* a message in small FPDUs whose later segments leave the region: the
     * in-range ones are placed, nothing beyond the end */
    setup(false, NULL, NULL);
    P.tx.cfg.max_fpdu = 96;
    write_hdr(&h, mr_all->rkey, (uintptr_t)region() + RLEN - 150);
    dp_fill(pay, 300);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 300), 0);
    {
        uiw_hdr t;
        CHECK_EQ(dp_raw_term(&P, &t, DP_TIMEOUT_MS), 1);
        CHECK_EQ(t.u.term.cause.layer, UIW_LAYER_DDP);
        CHECK_EQ(t.u.term.cause.ecode, UIW_DDP_EC_T_BASE_BOUNDS);
        /* the attached header is the offending segment's (TO past the start) */
        CHECK(t.u.term.hdr_ddp);
    }
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    dp_sync(B.qp);
    CHECK(dp_all(mem, G + RLEN - 150, 0xA5));
    CHECK(dp_all(mem + G + RLEN, G, 0xA5));
    CHECK_MEM(region() + RLEN - 150, pay, 76); /* the first segment (96-20 bytes) */
    teardown();
}

static void t_access(void)
{
    uiw_hdr h;
    uint8_t pay[32], img[64];
    unsigned il;
    struct ibv_mr *lw;

    /* Write into a region registered without REMOTE_WRITE */
    setup(true, NULL, NULL);
    lw = ibv_reg_mr(B.pd, region(), RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    write_hdr(&h, lw->rkey, (uintptr_t)region());
    CHECK_EQ(dp_raw_send(&P, &h, pay, sizeof(pay)), 0);
    il = img_of(&h, sizeof(pay), false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    CHECK_EQ(ibv_dereg_mr(lw), 0);
    teardown();

    /* Read from a region registered without REMOTE_READ (enforced, unlike
     * siw): RDMAP Remote Protection / access rights, D and R */
    setup(true, NULL, NULL);
    lw = ibv_reg_mr(B.pd, region(), RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 1);
    h.u.rreq.sink_stag = 0x1234;
    h.u.rreq.sink_to = 0x10000;
    h.u.rreq.read_size = 100;
    h.u.rreq.src_stag = lw->rkey;
    h.u.rreq.src_to = (uintptr_t)region();
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, true, img);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_ACCESS_RIGHTS, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK_EQ(ibv_dereg_mr(lw), 0);
    teardown();

    /* Atomic on a region without REMOTE_ATOMIC: D only (RFC 7306 §8.1) */
    setup(true, NULL, NULL);
    lw = ibv_reg_mr(B.pd, region(), RLEN,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    dp_hdr_u(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, 1);
    h.u.atomic_req.aop = UIW_AOP_FETCH_ADD;
    h.u.atomic_req.req_id = 9;
    h.u.atomic_req.stag = lw->rkey;
    h.u.atomic_req.to = (uintptr_t)region();
    h.u.atomic_req.add_swap = 1;
    h.u.atomic_req.compare_mask = UINT64_MAX;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, false, img);
    put_be16(img, UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_REQ_LEN);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_ACCESS_RIGHTS, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    CHECK_EQ(ibv_dereg_mr(lw), 0);
    teardown();
}

static void t_untagged(void)
{
    uiw_hdr h;
    uint8_t pay[150], img[64];
    unsigned il;

    /* no posted receive: RFC 5041 §7.2 "invalid MSN - no buffer", at once
     * in strict mode (set explicitly: by default the message waits for a
     * receive; test_dp_rnr.c covers that and the Terminate at its limit) */
    setup(false, NULL, NULL);
    set_strict_rnr(B.qp);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 10), 0);
    il = img_of(&h, 10, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_NOBUF, img, il);
    expect_dead(IBV_EVENT_QP_REQ_ERR);
    teardown();

    /* MSN out of range */
    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(5, region(), 200, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 3);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 10), 0);
    il = img_of(&h, 10, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE, img, il);
    expect_rwc(5, IBV_WC_WR_FLUSH_ERR);
    expect_dead(IBV_EVENT_QP_REQ_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();

    /* MO not 0 on a new message */
    setup(false, NULL, NULL);
    CHECK_EQ(post_recv(5, region(), 200, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    h.mo = 8;
    CHECK_EQ(dp_raw_send(&P, &h, pay, 10), 0);
    il = img_of(&h, 10, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO, img, il);
    teardown();

    /* longer than the receive: message too long, LOC_LEN_ERR, nothing
     * placed past the buffer */
    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(6, region(), 100, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    dp_fill(pay, sizeof(pay));
    CHECK_EQ(dp_raw_send(&P, &h, pay, sizeof(pay)), 0);
    il = img_of(&h, sizeof(pay), false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG, img, il);
    expect_rwc(6, IBV_WC_LOC_LEN_ERR);
    expect_dead(IBV_EVENT_QP_REQ_ERR);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();

    /* a second segment that does not continue the message (MO jump):
     * two 64-byte FPDUs of 40 bytes, the second one's MO patched */
    setup(false, NULL, NULL);
    CHECK_EQ(post_recv(7, region(), 300, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    P.tx.cfg.max_fpdu = 64;
    {
        uint8_t *b = NULL;
        size_t n = 0;
        CHECK_EQ(dp_raw_build(&P, &h, pay, 80, &b, &n), 0);
        CHECK_EQ(n, 128);
        b[64 + 19] = 44; /* MO (FPDU bytes 16..19) 40 -> 44 */
        CHECK_EQ(dp_write_all(P.fd, b, n), 0);
        free(b);
    }
    h.mo = 44;
    il = img_of(&h, 40, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO, img, il);
    expect_rwc(7, IBV_WC_WR_FLUSH_ERR);
    dp_sync(B.qp);
    CHECK(dp_all(region() + 40, RLEN - 40 + G, 0xA5));
    teardown();
}

/* The same checks with the receives on an SRQ: the receive taken from the
 * SRQ gets the specific status, an empty SRQ is "no buffer". */
static void t_srq(void)
{
    struct dp_ep_opts o = {.srq = true};
    uiw_hdr h;
    uint8_t pay[200], img[64];
    unsigned il;

    setup(true, NULL, &o);
    CHECK_EQ(eng_post_srq_recv(B.srq, region(), 100, mr_all->lkey, 51), 0);
    CHECK_EQ(eng_post_srq_recv(B.srq, region(), 100, mr_all->lkey, 52), 0);
    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    dp_fill(pay, sizeof(pay));
    CHECK_EQ(dp_raw_send(&P, &h, pay, 60), 0);
    expect_rwc(51, IBV_WC_SUCCESS);
    h.msn = 2;
    CHECK_EQ(dp_raw_send(&P, &h, pay, 101), 0);
    il = img_of(&h, 101, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG, img, il);
    expect_rwc(52, IBV_WC_LOC_LEN_ERR);
    dp_sync(B.qp);
    CHECK_MEM(region(), pay, 60);
    CHECK(dp_all(region() + 60, RLEN - 60 + G, 0xA5));
    teardown();

    /* empty SRQ, strict mode set explicitly (default: held, test_dp_rnr.c) */
    setup(false, NULL, &o);
    set_strict_rnr(B.qp);
    dp_hdr_u(&h, UIW_OP_SEND_SE, 0, 1);
    CHECK_EQ(dp_raw_send(&P, &h, pay, 1), 0);
    il = img_of(&h, 1, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_NOBUF, img, il);
    teardown();
}

static void t_ird(void)
{
    uiw_hdr h;
    uint8_t *b = NULL, img[64];
    size_t n = 0;
    unsigned il;
    uiw_mpa_result m = dp_mpa(true, false, 2, 2);

    setup(true, &m, NULL);
    for (uint32_t i = 1; i <= 3; i++) {
        dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, i);
        h.u.rreq.sink_stag = 0x100 + i;
        h.u.rreq.sink_to = 0;
        h.u.rreq.read_size = 64;
        h.u.rreq.src_stag = mr_all->rkey;
        h.u.rreq.src_to = (uintptr_t)region();
        CHECK_EQ(dp_raw_build(&P, &h, NULL, 0, &b, &n), 0);
    }
    CHECK_EQ(dp_write_all(P.fd, b, n), 0); /* one write: B sees all three at once */
    free(b);
    il = img_of(&h, 0, true, img);
    /* RFC 5040 §6.1 / PEERS.md §8: IRD exceeded */
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_CATASTROPHIC_STREAM, img, il);
    expect_dead(IBV_EVENT_QP_FATAL);
    teardown();
}

static void t_invalidated(void)
{
    uiw_hdr h;
    uint8_t pay[16], img[64];
    unsigned il;
    struct ibv_wc wc;

    /* Send with Invalidate, then a Write to the invalidated STag */
    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(8, region(), 64, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND_INV, 0, 1);
    h.inv_stag = mr_all->rkey;
    CHECK_EQ(dp_raw_send(&P, &h, pay, sizeof(pay)), 0);
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.wc_flags, IBV_WC_WITH_INV);
    CHECK_EQ(wc.invalidated_rkey, mr_all->rkey);
    CHECK_EQ(wc.byte_len, sizeof(pay));
    write_hdr(&h, mr_all->rkey, (uintptr_t)region() + 100);
    CHECK_EQ(dp_raw_send(&P, &h, pay, sizeof(pay)), 0);
    il = img_of(&h, sizeof(pay), false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    CHECK(dp_all(region() + 16, RLEN - 16 + G, 0xA5));
    teardown();

    /* Local Invalidate by B itself, then a Read of it */
    setup(false, NULL, NULL);
    {
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 3;
        wr.opcode = IBV_WR_LOCAL_INV;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.invalidate_rkey = mr_all->rkey;
        CHECK_EQ(ibv_post_send(B.qp, &wr, &bad), 0);
        CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.opcode, IBV_WC_LOCAL_INV);
    }
    dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 1);
    h.u.rreq.sink_stag = 5;
    h.u.rreq.read_size = 8;
    h.u.rreq.src_stag = mr_all->rkey;
    h.u.rreq.src_to = (uintptr_t)region();
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, true, img);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_INVALID_STAG, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    teardown();

    /* Send with Invalidate of an unknown STag: RFC 5040 §7.2 items 4-5 */
    setup(false, NULL, NULL);
    CHECK_EQ(post_recv(9, region(), 64, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_SEND_SE_INV, 0, 1);
    h.inv_stag = mr_all->rkey ^ 0x10000000u;
    CHECK_EQ(dp_raw_send(&P, &h, pay, 4), 0);
    il = img_of(&h, 4, false, img);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_INVALID_STAG, img, il);
    expect_rwc(9, IBV_WC_REM_INV_REQ_ERR);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    teardown();
}

static void t_atomic(void)
{
    uiw_hdr h, r;
    uint8_t img[64];
    unsigned il;
    uint64_t v = 0x1122334455667788ull, w;

    /* misaligned target: RFC 7306 §8.2, memory not modified */
    setup(true, NULL, NULL);
    memcpy(region() + 4, &v, 8);
    dp_hdr_u(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, 1);
    h.u.atomic_req.aop = UIW_AOP_CMP_SWAP;
    h.u.atomic_req.req_id = 77;
    h.u.atomic_req.stag = mr_all->rkey;
    h.u.atomic_req.to = (uintptr_t)region() + 4;
    h.u.atomic_req.add_swap = 0;
    h.u.atomic_req.add_swap_mask = UINT64_MAX;
    h.u.atomic_req.compare = v;
    h.u.atomic_req.compare_mask = UINT64_MAX;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, false, img);
    put_be16(img, UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_REQ_LEN);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_CATASTROPHIC_STREAM, img, il);
    expect_dead(IBV_EVENT_QP_FATAL);
    memcpy(&w, region() + 4, 8);
    CHECK_EQ(w, v);
    teardown();

    /* masked FetchAdd (RFC 7306 §5.1.1): two 32-bit fields, carries cut
     * at bit 31 and 63; masked CmpSwap swaps only the masked bits */
    setup(false, NULL, NULL);
    v = 0x00000001FFFFFFFFull;
    memcpy(region(), &v, 8);
    dp_hdr_u(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, 1);
    h.u.atomic_req.aop = UIW_AOP_FETCH_ADD;
    h.u.atomic_req.req_id = 1;
    h.u.atomic_req.stag = mr_all->rkey;
    h.u.atomic_req.to = (uintptr_t)region();
    h.u.atomic_req.add_swap = 0x0000000100000001ull;
    h.u.atomic_req.add_swap_mask = 0x8000000080000000ull;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(r.opcode, UIW_OP_ATOMIC_RESP);
    CHECK_EQ(r.qn, UIW_QN_ATOMIC_RESP);
    CHECK_EQ(r.msn, 1);
    CHECK_EQ(r.u.atomic_resp.req_id, 1);
    CHECK_EQ(r.u.atomic_resp.orig_value, v);
    dp_sync(B.qp);
    memcpy(&w, region(), 8);
    CHECK_EQ(w, 0x0000000200000000ull);
    h.msn = 2;
    h.u.atomic_req.aop = UIW_AOP_CMP_SWAP;
    h.u.atomic_req.req_id = 2;
    h.u.atomic_req.compare = 0xFFFF0000FFFF0000ull; /* compare the high 32 bits only */
    h.u.atomic_req.compare_mask = 0xFFFFFFFF00000000ull;
    h.u.atomic_req.add_swap = 0xAAAAAAAAAAAAAAAAull;
    h.u.atomic_req.add_swap_mask = 0x00000000FFFF0000ull;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0); /* high bits 0x00000002 != 0xFFFF0000: no swap */
    CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(r.u.atomic_resp.orig_value, 0x0000000200000000ull);
    h.msn = 3;
    h.u.atomic_req.req_id = 3;
    h.u.atomic_req.compare = 0x00000002DEADBEEFull;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(r.msn, 3);
    dp_sync(B.qp);
    memcpy(&w, region(), 8);
    CHECK_EQ(w, 0x00000002AAAA0000ull);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    teardown();
}

static void t_read_requests(void)
{
    uiw_hdr h, r;
    uint8_t img[64];
    unsigned il;

    /* zero-length Read to STag 1 (the siw RTR form) is served */
    setup(true, NULL, NULL);
    dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 1);
    h.u.rreq.sink_stag = 0x4321;
    h.u.rreq.sink_to = 0;
    h.u.rreq.read_size = 0;
    h.u.rreq.src_stag = 1;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
    CHECK(r.tagged);
    CHECK_EQ(r.opcode, UIW_OP_READ_RESP);
    CHECK_EQ(r.stag, 0x4321);
    CHECK_EQ(r.to, 0);
    CHECK(r.last);
    CHECK_EQ(P.pay_len, 0);
    /* a real one: its data, in the requested place */
    dp_fill(region(), RLEN);
    dp_sync(B.qp);
    h.msn = 2;
    h.u.rreq.sink_to = 0x7000;
    h.u.rreq.read_size = 3000;
    h.u.rreq.src_stag = mr_all->rkey;
    h.u.rreq.src_to = (uintptr_t)region() + 1000;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(r.stag, 0x4321);
    CHECK_EQ(r.to, 0x7000);
    CHECK_EQ(P.pay_len, 3000);
    CHECK_MEM(P.pay, region() + 1000, 3000);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    /* source out of bounds: D and R */
    h.msn = 3;
    h.u.rreq.src_to = (uintptr_t)region() + RLEN - 10;
    h.u.rreq.read_size = 11;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, true, img);
    expect_term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_BASE_BOUNDS, img, il);
    expect_dead(IBV_EVENT_QP_ACCESS_ERR);
    teardown();

    /* a Read Request with the wrong MSN */
    setup(false, NULL, NULL);
    dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 2);
    h.u.rreq.src_stag = 1;
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    il = img_of(&h, 0, false, img); /* DDP errors: no RDMA header (RFC 5040 Figure 10) */
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE, img, il);
    teardown();

    /* a Read Response nobody asked for */
    setup(false, NULL, NULL);
    dp_hdr(&h, true, UIW_OP_READ_RESP);
    h.stag = mr_all->rkey;
    h.to = (uintptr_t)region();
    CHECK_EQ(dp_raw_send(&P, &h, img, 8), 0);
    il = img_of(&h, 8, false, img);
    expect_term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG, img, il);
    CHECK(dp_all(mem, 2 * G + RLEN, 0xA5));
    teardown();
}

/* Write the FPDU of a Send with MSN 1 and len payload bytes, raw: its
 * opcode replaced by `opcode` (>= 0: what the wire core would not encode),
 * only the first `keep` bytes of it (0: all). */
static void write_send_raw(const void *pay, size_t len, int opcode, size_t keep)
{
    uiw_hdr h;
    uint8_t *b = NULL;
    size_t n = 0;

    dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
    CHECK_EQ(dp_raw_build(&P, &h, pay, len, &b, &n), 0);
    if (opcode >= 0)
        b[3] = (uint8_t)((b[3] & 0xF0) | opcode);
    CHECK_EQ(dp_write_all(P.fd, b, keep ? keep : n), 0);
    free(b);
}

/* Receive our QP's Terminate and check its cause only. */
static void expect_term_cause(unsigned layer, unsigned etype, unsigned ecode)
{
    uiw_hdr t;

    CHECK_EQ(dp_raw_term(&P, &t, DP_TIMEOUT_MS), 1);
    CHECK_EQ(t.u.term.cause.layer, layer);
    CHECK_EQ(t.u.term.cause.etype, etype);
    CHECK_EQ(t.u.term.cause.ecode, ecode);
}

/* Malformed bytes that only the parser sees. */
static void t_parser(void)
{
    uiw_hdr h;

    /* undefined opcode 0xC (RFC 5040 §7.2, RFC 6580 §3.4) */
    setup(false, NULL, NULL);
    write_send_raw(NULL, 0, 0x0C, 0);
    expect_term_cause(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    expect_dead(IBV_EVENT_QP_REQ_ERR);
    teardown();

    /* Immediate Data must be exactly 8 bytes (RFC 7306 §6.3): a Send of 12
     * bytes relabelled as Immediate Data carries 4 bytes too many */
    setup(false, NULL, NULL);
    CHECK_EQ(post_recv(55, region(), 64, mr_all->lkey), 0);
    write_send_raw(region(), 12, UIW_OP_IMM_DATA, 0);
    expect_term_cause(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG);
    expect_rwc(55, IBV_WC_WR_FLUSH_ERR);
    teardown();
    /* ... and exactly 8 is fine: a receive with immediate data */
    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(56, region(), 64, mr_all->lkey), 0);
    dp_hdr_u(&h, UIW_OP_IMM_DATA_SE, 0, 1);
    memcpy(h.u.imm, "\x01\x02\x03\x04\0\0\0\0", 8);
    CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
    {
        struct ibv_wc wc;
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 56);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.opcode, IBV_WC_RECV); /* not after a Write */
        CHECK_EQ(wc.wc_flags, IBV_WC_WITH_IMM);
        CHECK_EQ(wc.byte_len, 0);
        CHECK_MEM(&wc.imm_data, "\x01\x02\x03\x04", 4);
    }
    teardown();

    /* ULPDU_Length 1 (RFC 5044 §8 code 3) */
    setup(true, NULL, NULL);
    {
        uint8_t bad[8] = {0, 1, 0x41, 0x43, 0, 0, 0, 0};
        CHECK_EQ(dp_write_all(P.fd, bad, sizeof(bad)), 0);
    }
    expect_term(UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_MARKER, NULL, 0);
    expect_dead(IBV_EVENT_QP_FATAL);
    teardown();
}

/* Terminates we receive: the WR they name, the rest flushed, the event. */
static void t_received(void)
{
    for (int siw = 0; siw < 2; siw++) {
        struct ibv_send_wr rd, snd, *bad;
        struct ibv_sge s;
        struct ibv_wc wc;
        struct ibv_mr *m;
        uint8_t *buf = calloc(1, 8192);
        uiw_hdr req, t;

        setup(true, NULL, NULL);
        m = ibv_reg_mr(B.pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE);
        s = (struct ibv_sge){(uintptr_t)buf, 4096, m->lkey};
        memset(&rd, 0, sizeof(rd));
        rd.wr_id = 21;
        rd.opcode = IBV_WR_RDMA_READ;
        rd.send_flags = IBV_SEND_SIGNALED;
        rd.sg_list = &s;
        rd.num_sge = 1;
        rd.wr.rdma.rkey = 0xabcdef01;
        rd.wr.rdma.remote_addr = 0x1000;
        snd = rd;
        snd.wr_id = 22;
        snd.opcode = IBV_WR_SEND;
        rd.next = &snd;
        CHECK_EQ(ibv_post_send(B.qp, &rd, &bad), 0);
        CHECK_EQ(dp_raw_recv(&P, &req, DP_TIMEOUT_MS, NULL), 1);
        CHECK_EQ(req.opcode, UIW_OP_READ_REQ);
        CHECK_EQ(req.msn, 1);
        CHECK_EQ(req.u.rreq.read_size, 4096);
        CHECK_EQ(req.u.rreq.src_stag, 0xabcdef01);
        CHECK_EQ(req.u.rreq.sink_stag, m->lkey);
        CHECK_EQ(req.u.rreq.sink_to, (uintptr_t)buf);
        {
            uiw_hdr x; /* the Send is not fenced: it went out at once */
            CHECK_EQ(dp_raw_recv(&P, &x, DP_TIMEOUT_MS, NULL), 1);
            CHECK_EQ(x.opcode, UIW_OP_SEND);
        }

        dp_hdr_u(&t, UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1);
        if (!siw) {
            /* RFC layout, RDMAP / Remote Protection / access rights with the
             * Read Request's DDP and RDMA headers */
            uint8_t img[64];
            unsigned il = img_of(&req, 0, true, img);
            t.u.term.cause = (uiw_term_cause){UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT,
                                              UIW_RDMAP_EC_ACCESS_RIGHTS};
            t.u.term.hdr_mpa = t.u.term.hdr_ddp = t.u.term.hdr_rdma = true;
            t.u.term.ddp_hdr_len = 20;
            memcpy(t.u.term.ddp_hdr, img, 20);
            t.u.term.rdma_hdr_len = UIW_RREQ_LEN;
            memcpy(t.u.term.rdma_hdr, img + 20, il - 20);
        } else {
            /* siw's bit layout (PEERS.md §5), DDP / tagged / base-bounds, no
             * headers: the oldest outstanding WR (the Read) takes it */
            t.u.term.cause =
                (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_BASE_BOUNDS};
            t.u.term.siw_layout = true;
        }
        CHECK_EQ(dp_raw_send(&P, &t, NULL, 0), 0);
        CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 21);
        CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
        CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 22);
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_FATAL);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
        CHECK(to_uqp(B.qp)->term_received);
        CHECK_EQ(to_uqp(B.qp)->term.layer, siw ? UIW_LAYER_DDP : UIW_LAYER_RDMAP);
        {
            uiw_hdr x; /* no Terminate back, just the end of the stream */
            CHECK_EQ(dp_raw_recv(&P, &x, DP_TIMEOUT_MS, NULL), -1);
        }
        CHECK(dp_all(buf, 8192, 0));
        CHECK_EQ(ibv_dereg_mr(m), 0);
        free(buf);
        teardown();
    }
}

static void t_eof(void)
{
    uiw_hdr h;

    /* clean close between FPDUs: flush, no fatal event */
    setup(false, NULL, NULL);
    CHECK_EQ(post_recv(31, region(), 64, mr_all->lkey), 0);
    shutdown(P.fd, SHUT_WR);
    expect_rwc(31, IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
    CHECK_EQ(dp_async_wait(B.qp, 200), -1);
    CHECK_EQ(dp_raw_recv(&P, &h, DP_TIMEOUT_MS, NULL), -1); /* B answered the FIN */
    teardown();

    /* close in the middle of an FPDU: fatal */
    setup(true, NULL, NULL);
    CHECK_EQ(post_recv(32, region(), 64, mr_all->lkey), 0);
    write_send_raw(region(), 40, -1, 32); /* half of 2 + 18 + 40 + CRC 4 bytes */
    shutdown(P.fd, SHUT_WR);
    expect_rwc(32, IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_FATAL);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
    teardown();
}

/* P2P RTR (RFC 6581 §9; siw's forms, PEERS.md §3). */
static void t_rtr(void)
{
    static const uint8_t types[] = {UIW_RTR_WRITE, UIW_RTR_READ, UIW_RTR_SEND};

    /* responder: nothing goes out before the RTR; the RTR is consumed */
    for (unsigned i = 0; i < 3; i++) {
        uiw_mpa_result m = dp_mpa(true, false, 4, 4);
        struct ibv_send_wr wr, *bad;
        struct ibv_sge s;
        struct ibv_wc wc;
        uiw_hdr h, r;

        m.p2p = true;
        m.rtr = types[i];
        m.await_rtr = true;
        setup(true, &m, NULL);
        CHECK_EQ(post_recv(41, region(), 64, mr_all->lkey), 0);
        memcpy(region() + 1000, "hello", 5);
        s = (struct ibv_sge){(uintptr_t)region() + 1000, 5, mr_all->lkey};
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 42;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &s;
        wr.num_sge = 1;
        CHECK_EQ(ibv_post_send(B.qp, &wr, &bad), 0);
        CHECK_EQ(dp_raw_recv(&P, &r, 200, NULL), 0); /* held back */
        if (types[i] == UIW_RTR_WRITE) {
            write_hdr(&h, 1, 0);
            CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
        } else if (types[i] == UIW_RTR_READ) {
            dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 1);
            h.u.rreq.src_stag = 1;
            CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
            CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
            CHECK(r.tagged && r.opcode == UIW_OP_READ_RESP && r.stag == 0 && r.last);
        } else {
            dp_hdr_u(&h, UIW_OP_SEND, 0, 1);
            CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
        }
        CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
        CHECK(!r.tagged && r.opcode == UIW_OP_SEND && r.msn == 1);
        CHECK_EQ(P.pay_len, 5);
        CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 42);
        /* the RTR consumed no receive: the next Send fills 41 */
        dp_hdr_u(&h, UIW_OP_SEND, 0, types[i] == UIW_RTR_SEND ? 2 : 1);
        CHECK_EQ(dp_raw_send(&P, &h, "abc", 3), 0);
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 41);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.byte_len, 3);
        CHECK(dp_quiet(B.rcq, 20));
        CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
        teardown();
    }

    /* initiator: the RTR is the first FPDU, produces no completion */
    for (unsigned i = 0; i < 3; i++) {
        uiw_mpa_result m = dp_mpa(false, false, 4, 4);
        struct ibv_send_wr wr, *bad;
        struct ibv_wc wc;
        uiw_hdr h, r;

        m.p2p = true;
        m.rtr = types[i];
        m.send_rtr = true;
        setup(false, &m, NULL);
        CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
        if (types[i] == UIW_RTR_WRITE) {
            CHECK(r.tagged && r.opcode == UIW_OP_WRITE && r.stag == 1 && r.to == 0 && r.last);
        } else if (types[i] == UIW_RTR_READ) {
            CHECK(!r.tagged && r.opcode == UIW_OP_READ_REQ && r.msn == 1);
            CHECK_EQ(r.u.rreq.src_stag, 1);
            CHECK_EQ(r.u.rreq.read_size, 0);
            CHECK_EQ(r.u.rreq.sink_stag, 0);
        } else {
            CHECK(!r.tagged && r.opcode == UIW_OP_SEND && r.msn == 1);
        }
        CHECK_EQ(P.pay_len, 0);
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 43;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        CHECK_EQ(ibv_post_send(B.qp, &wr, &bad), 0);
        CHECK_EQ(dp_raw_recv(&P, &r, DP_TIMEOUT_MS, NULL), 1);
        CHECK(r.opcode == UIW_OP_SEND && r.msn == (types[i] == UIW_RTR_SEND ? 2u : 1u));
        if (types[i] == UIW_RTR_READ) {
            dp_hdr(&h, true, UIW_OP_READ_RESP);
            CHECK_EQ(dp_raw_send(&P, &h, NULL, 0), 0);
        }
        CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 43);
        CHECK(dp_quiet(B.scq, 50));
        pthread_mutex_lock(&to_uqp(B.qp)->lock);
        CHECK_EQ(to_uqp(B.qp)->orq_count, 0);
        pthread_mutex_unlock(&to_uqp(B.qp)->lock);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
        teardown();
    }
}

/* Random damage to a valid stream never touches memory outside the
 * region (CRC off, so damaged headers are acted upon). */
static void t_mutations(void)
{
    unsigned iters = getenv("UIWARP_DP_QUICK") ? 100 : 400, terms = 0, alive = 0;

    for (unsigned it = 0; it < iters; it++) {
        uint8_t *b = NULL, pay[600];
        size_t n = 0;
        uiw_hdr h;
        bool markers = it % 5 == 4;
        uiw_mpa_result m = dp_mpa(false, markers, 4, 4);

        setup(false, &m, NULL);
        P.tx.cfg.max_fpdu = (uint16_t)(64 + dp_rnd() % 300);
        for (int i = 0; i < 4; i++)
            CHECK_EQ(
                post_recv(100 + (uint64_t)i, region() + 1024u * (unsigned)i, 1000, mr_all->lkey),
                0);
        dp_fill(pay, sizeof(pay));
        for (uint32_t k = 1; k <= 4; k++) {
            write_hdr(&h, mr_all->rkey, (uintptr_t)region() + dp_rnd() % (RLEN - 600));
            dp_raw_build(&P, &h, pay, dp_rnd() % 600, &b, &n);
            dp_hdr_u(&h, k & 1 ? UIW_OP_SEND : UIW_OP_SEND_SE, 0, k);
            dp_raw_build(&P, &h, pay, dp_rnd() % 1000 > 600 ? 600 : dp_rnd() % 600, &b, &n);
            dp_hdr_u(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, k);
            h.u.rreq.read_size = (uint32_t)(dp_rnd() % 512);
            h.u.rreq.src_stag = mr_all->rkey;
            h.u.rreq.src_to = (uintptr_t)region() + dp_rnd() % (RLEN - 512);
            dp_raw_build(&P, &h, NULL, 0, &b, &n);
        }
        for (unsigned f = 0, nf = 1 + (unsigned)(dp_rnd() % 3); f < nf && n; f++) {
            size_t at = (size_t)(dp_rnd() % n);
            b[at] ^= (uint8_t)(1u << (dp_rnd() % 8));
        }
        (void)dp_write_all(P.fd, b, n);
        free(b);
        shutdown(P.fd, SHUT_WR);
        {
            uiw_hdr x;
            int r;
            do
                r = dp_raw_recv(&P, &x, DP_TIMEOUT_MS, NULL);
            while (r == 1 && !(!x.tagged && x.opcode == UIW_OP_TERMINATE));
            if (r == 1)
                terms++;
        }
        /* wait until B is done with the stream */
        for (uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
             dp_state(B.qp) != IBV_QPS_ERR && dp_now_ms() < end;)
            dp_msleep(1);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
        dp_sync(B.qp);
        CHECK(guards_ok());
        alive++;
        teardown();
    }
    printf("mutations: %u streams, %u answered with a Terminate, guards intact\n", alive, terms);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    t_bad_crc();
    t_invalid_stag(false);
    t_invalid_stag(true);
    t_bounds();
    t_access();
    t_untagged();
    t_srq();
    t_ird();
    t_invalidated();
    t_atomic();
    t_read_requests();
    t_parser();
    t_received();
    t_eof();
    t_rtr();
    t_mutations();
    ibv_close_device(dp_ctx);
    TEST_MAIN_END();
}
