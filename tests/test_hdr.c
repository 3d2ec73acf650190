/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DDP/RDMAP header codec (RFC 5041 §4, RFC 5040 §4, RFC 7306 §4-6), the
 * Terminate Control word in the RFC and siw layouts (RFC 5040 §4.8, notes
 * §2.4), the decode error causes, truncation, and the names.
 *
 * Every decode of a truncated or crafted image runs on a heap copy of
 * exactly the given length, so an ASan build catches any read past len.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "testutil.h"
#include "wire_testutil.h"
#include "uiwarp/wire.h"

/* ------------------------------------------------------------------------
 * helpers
 * ---------------------------------------------------------------------- */

static int decode_exact(const uint8_t *img, size_t len, uiw_hdr *h, uiw_term_cause *c)
{
    uint8_t *copy = malloc(len ? len : 1);
    int rc;

    if (len)
        memcpy(copy, img, len);
    rc = uiw_hdr_decode(len ? copy : NULL, len, h, c);
    free(copy);
    return rc;
}

/* Full round trip of one message:
 *  encode -> expected length (and bytes, when known);
 *  -EMSGSIZE for every smaller capacity;
 *  decode -> same fields; encode(decoded) -> same bytes;
 *  decode of every shorter prefix -> -EAGAIN (exact-size heap copies);
 *  decode with trailing payload -> same length. */
static void roundtrip(const char *what, const uiw_hdr *h, const uint8_t *expect, size_t explen)
{
    uint8_t out[256], again[256], big[300];
    uiw_hdr d, d2;
    uiw_term_cause c;
    int n, rc;
    unsigned long bad = 0;

    memset(out, 0xEE, sizeof(out));
    n = uiw_hdr_encode(h, out, sizeof(out));
    CHECK_EQ(n, (long long)explen);
    if (n != (int)explen) {
        fprintf(stderr, "  roundtrip(%s): encode gave %d\n", what, n);
        return;
    }
    if (expect) {
        CHECK_MEM(out, expect, explen);
        if (memcmp(out, expect, explen) != 0)
            fprintf(stderr, "  roundtrip(%s): bytes differ\n", what);
    }
    for (size_t cap = 0; cap < explen; cap++)
        if (uiw_hdr_encode(h, again, cap) != -EMSGSIZE)
            bad++;
    CHECK_EQ(bad, 0);
    if (h->opcode != UIW_OP_TERMINATE)
        CHECK_EQ(uiw_hdr_len(h->tagged, h->opcode), (long long)explen);
    else
        CHECK_EQ(uiw_term_encoded_len(&h->u.term), (long long)explen);

    rc = decode_exact(out, explen, &d, &c);
    CHECK_EQ(rc, (long long)explen);
    CHECK(hdr_eq(h, &d));
    if (!hdr_eq(h, &d))
        fprintf(stderr, "  roundtrip(%s): decoded fields differ\n", what);

    memset(again, 0x55, sizeof(again));
    CHECK_EQ(uiw_hdr_encode(&d, again, explen), (long long)explen);
    CHECK_MEM(again, out, explen);

    bad = 0;
    for (size_t k = 0; k < explen; k++)
        if (decode_exact(out, k, &d2, &c) != -EAGAIN)
            bad++;
    CHECK_EQ(bad, 0);
    if (bad)
        fprintf(stderr, "  roundtrip(%s): a truncation did not give -EAGAIN\n", what);

    memcpy(big, out, explen);
    memset(big + explen, 0xA5, 17);
    CHECK_EQ(decode_exact(big, explen + 17, &d2, &c), (long long)explen);
    CHECK(hdr_eq(h, &d2));
}

static uiw_hdr base(bool tagged, bool last, unsigned opcode)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.tagged = tagged;
    h.last = last;
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = (uint8_t)opcode;
    return h;
}

static uiw_hdr untagged(unsigned opcode, uint32_t qn, uint32_t msn, uint32_t mo, bool last)
{
    uiw_hdr h = base(false, last, opcode);
    h.qn = qn;
    h.msn = msn;
    h.mo = mo;
    return h;
}

/* The decode of img must fail with exactly (layer, etype, ecode), and
 * every prefix must give either -EAGAIN or that same verdict, the verdict
 * once given never going back to -EAGAIN. first_at: the shortest prefix
 * that already fails (0: not checked). */
static void expect_cause(const char *what, const uint8_t *img, size_t len, unsigned layer,
                         unsigned etype, unsigned ecode, size_t first_at)
{
    uiw_hdr h;
    uiw_term_cause c;
    int rc = decode_exact(img, len, &h, &c);
    bool ok = rc == -EPROTO && c.layer == layer && c.etype == etype && c.ecode == ecode;
    size_t first = 0;
    bool seen = false, monotonic = true;

    CHECK(ok);
    if (!ok)
        fprintf(stderr, "  expect_cause(%s): rc %d cause %u/%u/0x%02x, want %u/%u/0x%02x\n", what,
                rc, c.layer, c.etype, c.ecode, layer, etype, ecode);
    for (size_t k = 0; k <= len; k++) {
        uiw_term_cause ck;
        int r = decode_exact(img, k, &h, &ck);
        if (r == -EPROTO) {
            if (ck.layer != layer || ck.etype != etype || ck.ecode != ecode)
                monotonic = false;
            if (!seen)
                first = k;
            seen = true;
        } else if (r != -EAGAIN || seen) {
            monotonic = false;
        }
    }
    CHECK(monotonic);
    if (!monotonic)
        fprintf(stderr, "  expect_cause(%s): verdict changes with the prefix length\n", what);
    if (first_at) {
        CHECK_EQ(first, (long long)first_at);
    }
    /* NULL cause is allowed */
    CHECK_EQ(uiw_hdr_decode(img, len, &h, NULL), -EPROTO);
}

/* ------------------------------------------------------------------------
 * known control words and byte images
 * ---------------------------------------------------------------------- */

static void test_ctrl_words(void)
{
    /* siw's values (PEERS.md §4), which follow RFC 5040 §4.1 Figure 3 */
    static const struct {
        bool tagged, last;
        unsigned op;
        uint16_t word;
    } w[] = {
        {true, true, UIW_OP_WRITE, 0xC140},
        {false, true, UIW_OP_READ_REQ, 0x4141},
        {true, true, UIW_OP_READ_RESP, 0xC142},
        {false, true, UIW_OP_SEND, 0x4143},
        {false, true, UIW_OP_SEND_INV, 0x4144},
        {false, true, UIW_OP_SEND_SE, 0x4145},
        {false, true, UIW_OP_SEND_SE_INV, 0x4146},
        {false, true, UIW_OP_TERMINATE, 0x4147},
        /* non-last segments clear 0x4000 */
        {true, false, UIW_OP_WRITE, 0x8140},
        {true, false, UIW_OP_READ_RESP, 0x8142},
        {false, false, UIW_OP_SEND, 0x0143},
        {false, false, UIW_OP_SEND_SE_INV, 0x0146},
        /* RFC 7306 opcodes */
        {false, true, UIW_OP_IMM_DATA, 0x4148},
        {false, true, UIW_OP_IMM_DATA_SE, 0x4149},
        {false, true, UIW_OP_ATOMIC_REQ, 0x414A},
        {false, true, UIW_OP_ATOMIC_RESP, 0x414B},
    };
    static const uint32_t qn_of[] = {0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 1, 3};

    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        uiw_hdr h = base(w[i].tagged, w[i].last, w[i].op);
        uint8_t out[128];
        h.qn = qn_of[w[i].op];
        int n = uiw_hdr_encode(&h, out, sizeof(out));
        CHECK(n > 0);
        CHECK_EQ((unsigned)out[0] << 8 | out[1], w[i].word);
    }
}

static void test_write_and_read_response(void)
{
    /* RDMA Write, last segment (RFC 5040 Appendix A.1) */
    static const uint8_t write_img[] = {0xC1, 0x40, 0x11, 0x22, 0x33, 0x44, 0x01,
                                        0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    uiw_hdr h = base(true, true, UIW_OP_WRITE);
    h.stag = 0x11223344u;
    h.to = 0x0102030405060708ull;
    roundtrip("write last", &h, write_img, sizeof(write_img));

    h.last = false;
    h.stag = 0xFFFFFFFFu;
    h.to = 0xFFFFFFFFFFFFFFFFull;
    static const uint8_t write_mid[] = {0x81, 0x40, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    roundtrip("write middle", &h, write_mid, sizeof(write_mid));

    /* RDMA Read Response (Appendix A.3) */
    static const uint8_t rresp_img[] = {0xC1, 0x42, 0x00, 0x00, 0x01, 0x00, 0x00,
                                        0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00};
    h = base(true, true, UIW_OP_READ_RESP);
    h.stag = 0x100;
    h.to = 0x1000;
    roundtrip("read response", &h, rresp_img, sizeof(rresp_img));
    h.last = false;
    roundtrip("read response middle", &h, NULL, UIW_HDR_TAGGED_LEN);
}

static void test_read_request(void)
{
    /* RFC 5040 §4.4 / Appendix A.2, as siw's zero-length Read RTR would
     * look with real values */
    static const uint8_t img[] = {
        0x41, 0x41,                                     /* ctrl */
        0x00, 0x00, 0x00, 0x00,                         /* reserved */
        0x00, 0x00, 0x00, 0x01,                         /* QN 1 */
        0x00, 0x00, 0x00, 0x07,                         /* MSN 7 */
        0x00, 0x00, 0x00, 0x00,                         /* MO 0 */
        0xAA, 0xBB, 0xCC, 0xDD,                         /* sink STag */
        0x00, 0x00, 0x7F, 0xFF, 0x12, 0x34, 0x50, 0x00, /* sink TO */
        0x00, 0x10, 0x00, 0x00,                         /* size 1 MiB */
        0x00, 0x00, 0x00, 0x01,                         /* source STag 1 */
        0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, /* source TO */
    };
    uiw_hdr h = untagged(UIW_OP_READ_REQ, UIW_QN_READ_REQ, 7, 0, true);
    h.u.rreq.sink_stag = 0xAABBCCDDu;
    h.u.rreq.sink_to = 0x00007FFF12345000ull;
    h.u.rreq.read_size = 1u << 20;
    h.u.rreq.src_stag = 1;
    h.u.rreq.src_to = 0x8000000000000008ull;
    CHECK_EQ(sizeof(img), UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN);
    roundtrip("read request", &h, img, sizeof(img));
}

static void test_sends(void)
{
    /* RFC 5044 §4.4 Figure 5: the ULPDU of the annotated FPDU is a Send
     * with L to QN 0, MSN 1, MO 0 and 24 bytes of payload */
    static const uint8_t rfc5044_fig5[] = {0x41, 0x43, 0, 0, 0, 0, 0, 0, 0,
                                           0,    0,    0, 0, 1, 0, 0, 0, 0};
    uiw_hdr h = untagged(UIW_OP_SEND, 0, 1, 0, true);
    roundtrip("send (RFC 5044 Figure 5)", &h, rfc5044_fig5, sizeof(rfc5044_fig5));

    /* a middle segment */
    static const uint8_t send_mid[] = {
        0x01, 0x43,             /* Send, not last */
        0,    0,    0,    0,    /* reserved */
        0,    0,    0,    0,    /* QN 0 */
        0,    0,    0,    5,    /* MSN 5 */
        0,    0,    0x05, 0x94, /* MO 1428 */
    };
    h = untagged(UIW_OP_SEND, 0, 5, 1428, false);
    roundtrip("send middle", &h, send_mid, sizeof(send_mid));

    /* Send with Invalidate: RsvdULP[8:39] is the Invalidate STag
     * (RFC 5040 §4.1, Appendix A.5) */
    static const uint8_t inv[] = {0x41, 0x44, 0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0,
                                  0,    0,    0,    0,    2,    0,    0, 0, 0};
    h = untagged(UIW_OP_SEND_INV, 0, 2, 0, true);
    h.inv_stag = 0xDEADBEEFu;
    roundtrip("send with invalidate", &h, inv, sizeof(inv));

    static const uint8_t se[] = {0x41, 0x45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0};
    h = untagged(UIW_OP_SEND_SE, 0, 3, 0, true);
    roundtrip("send with SE", &h, se, sizeof(se));

    static const uint8_t seinv[] = {0x41, 0x46, 0x00, 0x01, 0x02, 0x03, 0,    0,    0,
                                    0,    0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x10, 0x00};
    h = untagged(UIW_OP_SEND_SE_INV, 0, 0xFFFFFFFFu, 0x1000, true);
    h.inv_stag = 0x00010203u;
    roundtrip("send with SE and invalidate", &h, seinv, sizeof(seinv));
}

static void test_immediate(void)
{
    /* RFC 7306 §6.2, Appendix A.3 */
    static const uint8_t img[] = {0x41, 0x48, 0, 0, 0, 0, 0, 0, 0, 0, 0,    0,    0,
                                  9,    0,    0, 0, 0, 1, 2, 3, 4, 5, 0xFD, 0xFE, 0xFF};
    uiw_hdr h = untagged(UIW_OP_IMM_DATA, 0, 9, 0, true);
    memcpy(h.u.imm, "\x01\x02\x03\x04\x05\xfd\xfe\xff", 8);
    CHECK_EQ(sizeof(img), UIW_HDR_UNTAGGED_LEN + UIW_IMM_DATA_LEN);
    roundtrip("immediate data", &h, img, sizeof(img));

    uint8_t se[sizeof(img)];
    memcpy(se, img, sizeof(img));
    se[1] = 0x49;
    h.opcode = UIW_OP_IMM_DATA_SE;
    roundtrip("immediate data with SE", &h, se, sizeof(se));
}

static void test_atomics(void)
{
    /* RFC 7306 §5.2.1 Figure 4, Appendix A.1: FetchAdd */
    static const uint8_t fadd[] = {
        0x41, 0x4A, 0,    0,    0,    0,    0,    0,    0,
        1,    0,    0,    0,    4,    0,    0,    0,    0, /* DDP: QN 1, MSN 4, MO 0 */
        0,    0,    0,    0,                               /* reserved + AOpCode 0 (FetchAdd) */
        0x00, 0x00, 0x00, 0x2A,                            /* request id */
        0x00, 0x00, 0x12, 0x00,                            /* remote STag */
        0,    0,    0,    0,    0,    0,    0x10, 0x08,    /* remote TO */
        0,    0,    0,    0,    0,    0,    0,    1,       /* add data */
        0,    0,    0,    0,    0,    0,    0,    0,       /* add mask */
        0,    0,    0,    0,    0,    0,    0,    0,       /* compare data (N/A) */
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,    /* compare mask (N/A) */
    };
    CHECK_EQ(sizeof(fadd), UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_REQ_LEN);
    uiw_hdr h = untagged(UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, 4, 0, true);
    h.u.atomic_req.aop = UIW_AOP_FETCH_ADD;
    h.u.atomic_req.req_id = 42;
    h.u.atomic_req.stag = 0x1200;
    h.u.atomic_req.to = 0x1008;
    h.u.atomic_req.add_swap = 1;
    h.u.atomic_req.add_swap_mask = 0;
    h.u.atomic_req.compare = 0;
    h.u.atomic_req.compare_mask = ~0ull;
    roundtrip("atomic FetchAdd", &h, fadd, sizeof(fadd));

    /* CmpSwap */
    uint8_t cswap[sizeof(fadd)];
    memcpy(cswap, fadd, sizeof(fadd));
    cswap[21] = 0x02;
    for (int i = 0; i < 8; i++) {
        cswap[38 + i] = (uint8_t)(0xA0 + i); /* swap data */
        cswap[46 + i] = 0xFF;                /* swap mask */
        cswap[54 + i] = (uint8_t)(0xB0 + i); /* compare data */
        cswap[62 + i] = 0x0F;                /* compare mask */
    }
    h.u.atomic_req.aop = UIW_AOP_CMP_SWAP;
    h.u.atomic_req.add_swap = 0xA0A1A2A3A4A5A6A7ull;
    h.u.atomic_req.add_swap_mask = ~0ull;
    h.u.atomic_req.compare = 0xB0B1B2B3B4B5B6B7ull;
    h.u.atomic_req.compare_mask = 0x0F0F0F0F0F0F0F0Full;
    roundtrip("atomic CmpSwap", &h, cswap, sizeof(cswap));

    /* The 28 reserved bits before AOpCode are ignored on receive */
    uint8_t rsvd[sizeof(cswap)];
    memcpy(rsvd, cswap, sizeof(cswap));
    rsvd[18] = 0xFF;
    rsvd[19] = 0xFF;
    rsvd[20] = 0xFF;
    rsvd[21] = 0xF2;
    uiw_hdr d;
    CHECK_EQ(decode_exact(rsvd, sizeof(rsvd), &d, NULL), sizeof(rsvd));
    CHECK(hdr_eq(&h, &d));

    /* RFC 7306 §5.2.2 Figure 6, Appendix A.2: Atomic Response on QN 3 */
    static const uint8_t resp[] = {
        0x41, 0x4B, 0, 0,    0,    0,    0,    0,    0,    3,    0,    0,    0,    4,    0,
        0,    0,    0, 0x00, 0x00, 0x00, 0x2A, 0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10,
    };
    CHECK_EQ(sizeof(resp), UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_RESP_LEN);
    h = untagged(UIW_OP_ATOMIC_RESP, UIW_QN_ATOMIC_RESP, 4, 0, true);
    h.u.atomic_resp.req_id = 42;
    h.u.atomic_resp.orig_value = 0xFEDCBA9876543210ull;
    roundtrip("atomic response", &h, resp, sizeof(resp));
}

/* ------------------------------------------------------------------------
 * Terminate
 * ---------------------------------------------------------------------- */

static uiw_hdr term(unsigned layer, unsigned etype, unsigned ecode)
{
    uiw_hdr h = untagged(UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1, 0, true);
    h.u.term.cause.layer = (uint8_t)layer;
    h.u.term.cause.etype = (uint8_t)etype;
    h.u.term.cause.ecode = (uint8_t)ecode;
    return h;
}

static const uint8_t term_ddp_hdr[] = {0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0};

static void test_terminate(void)
{
    uint8_t img[128];

    /* (a) nothing attached: LLP / MPA / CRC error (RFC 5044 §8 code 2) */
    uiw_hdr h = term(UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC);
    memcpy(img, term_ddp_hdr, 18);
    memcpy(img + 18, "\x20\x02\x00\x00", 4);
    roundtrip("terminate, bare", &h, img, 22);

    /* (b) DDP error with the terminated tagged header (M, D): a Write whose
     * STag is invalid. DDP Segment Length 0x0020, then 14 header bytes. */
    static const uint8_t bad_write[16] = {0x00, 0x20, 0xC1, 0x40, 0x00, 0x00, 0x99, 0x01,
                                          0,    0,    0,    0,    0,    0,    0x20, 0x00};
    h = term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG);
    h.u.term.hdr_mpa = h.u.term.hdr_ddp = true;
    h.u.term.ddp_hdr_len = 16;
    memcpy(h.u.term.ddp_hdr, bad_write, 16);
    memcpy(img + 18, "\x11\x00\xC0\x00", 4);
    memcpy(img + 22, bad_write, 16);
    roundtrip("terminate, tagged DDP header", &h, img, 38);

    /* (c) DDP untagged error with the 18-byte header: invalid MSN */
    static const uint8_t bad_send[20] = {0x00, 0x30, 0x41, 0x43, 0, 0, 0, 0, 0, 0,
                                         0,    0,    0,    0,    0, 9, 0, 0, 0, 0};
    h = term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE);
    h.u.term.hdr_mpa = h.u.term.hdr_ddp = true;
    h.u.term.ddp_hdr_len = 20;
    memcpy(h.u.term.ddp_hdr, bad_send, 20);
    memcpy(img + 18, "\x12\x03\xC0\x00", 4);
    memcpy(img + 22, bad_send, 20);
    roundtrip("terminate, untagged DDP header", &h, img, 42);

    /* (d) Remote protection error on a Read Request: M, D, R, 48 bytes
     * attached as siw sends them (PEERS.md §9) */
    static const uint8_t bad_rreq[48] = {
        0x00, 0x2E, 0x41, 0x41, 0, 0, 0, 0, 0, 0, 0, 1,    0, 0, 0,    3,    0, 0, 0, 0, 0, 0, 0, 5,
        0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0x66, 0x66, 0, 0, 0, 0, 0, 0, 0, 0,
    };
    h = term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_INVALID_STAG);
    h.u.term.hdr_mpa = h.u.term.hdr_ddp = h.u.term.hdr_rdma = true;
    h.u.term.ddp_hdr_len = 20;
    memcpy(h.u.term.ddp_hdr, bad_rreq, 20);
    h.u.term.rdma_hdr_len = UIW_RREQ_LEN;
    memcpy(h.u.term.rdma_hdr, bad_rreq + 20, 28);
    memcpy(img + 18, "\x01\x00\xE0\x00", 4);
    memcpy(img + 22, bad_rreq, 48);
    CHECK_EQ(22 + 48, UIW_TERM_MAX_ULPDU);
    roundtrip("terminate, DDP + RDMA headers", &h, img, 70);

    /* (e) R only: the Read Request header straight after the control word */
    h.u.term.hdr_mpa = h.u.term.hdr_ddp = false;
    h.u.term.ddp_hdr_len = 0;
    memcpy(img + 18, "\x01\x00\x20\x00", 4);
    memcpy(img + 22, bad_rreq + 20, 28);
    roundtrip("terminate, RDMA header only", &h, img, 50);

    /* (f) M only: the DDP Segment Length alone */
    h = term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_CATASTROPHIC_STREAM);
    h.u.term.hdr_mpa = true;
    h.u.term.ddp_hdr_len = 2;
    h.u.term.ddp_hdr[0] = 0x01;
    h.u.term.ddp_hdr[1] = 0x02;
    memcpy(img + 18, "\x02\x07\x80\x00\x01\x02", 6);
    roundtrip("terminate, segment length only", &h, img, 24);

    /* (g) siw's layout on encode and decode: DDP/untagged/invalid QN with
     * M and D is 21 01 03 00 (layer in the low nibble, flags in bits 0-1) */
    h = term(UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_QN);
    h.u.term.hdr_mpa = h.u.term.hdr_ddp = true;
    h.u.term.ddp_hdr_len = 20;
    memcpy(h.u.term.ddp_hdr, bad_send, 20);
    h.u.term.siw_layout = true;
    memcpy(img + 18, "\x21\x01\x03\x00", 4);
    memcpy(img + 22, bad_send, 20);
    roundtrip("terminate, siw layout", &h, img, 42);
    uiw_hdr d;
    CHECK_EQ(decode_exact(img, 42, &d, NULL), 42);
    CHECK(d.u.term.siw_layout);
    CHECK_MEM(d.u.term.raw_ctrl, "\x21\x01\x03\x00", 4);
    CHECK_EQ(d.u.term.cause.layer, UIW_LAYER_DDP);
    CHECK_EQ(d.u.term.cause.etype, UIW_DDP_ET_UNTAGGED);
    CHECK_EQ(d.u.term.cause.ecode, UIW_DDP_EC_U_INVALID_QN);

    /* siw's catastrophic TERM (RDMAP/catastrophic/0xFF, no header) */
    h = term(UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, 0xFF);
    memcpy(img + 18, "\x00\xFF\x00\x00", 4);
    roundtrip("terminate, catastrophic", &h, img, 22);

    /* Terminate reserved bits are ignored on receive (RFC 5040 §4.8) */
    memcpy(img + 18, "\x20\x02\x1F\xFF", 4);
    CHECK_EQ(decode_exact(img, 22, &d, NULL), 22);
    CHECK_EQ(d.u.term.cause.layer, 2);
    CHECK_EQ(d.u.term.cause.ecode, 2);
    CHECK(!d.u.term.hdr_mpa && !d.u.term.hdr_ddp && !d.u.term.hdr_rdma);
    CHECK(!d.u.term.siw_layout);

    /* A sender that zero-fills absent fields (RFC 5040 §7.1 case 1): the
     * header ends after the control word; the rest is left to the caller */
    memcpy(img + 18, "\x00\x00\x00\x00", 4);
    memset(img + 22, 0, 48);
    CHECK_EQ(decode_exact(img, 70, &d, NULL), 22);

    /* encoder consistency checks (-EINVAL) */
    h = term(UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, 0);
    uint8_t out[128];
    h.u.term.hdr_ddp = true; /* D without the header */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    CHECK_EQ(uiw_term_encoded_len(&h.u.term), -EINVAL);
    h.u.term.ddp_hdr_len = 20; /* 20 bytes but the header says tagged */
    memcpy(h.u.term.ddp_hdr, bad_write, 16);
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h.u.term.ddp_hdr_len = 16;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), 38);
    h.u.term.hdr_rdma = true; /* R without the header */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h.u.term.hdr_rdma = false;
    h.u.term.rdma_hdr_len = 28; /* header without R */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h.u.term.rdma_hdr_len = 0;
    h.u.term.hdr_ddp = h.u.term.hdr_mpa = false; /* bytes without flags */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h.u.term.ddp_hdr_len = 0;
    h.u.term.cause.layer = 0x10; /* wider than 4 bits */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    CHECK_EQ(uiw_term_encoded_len(NULL), -EINVAL);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_TERMINATE), -EPROTO);
}

/* Terminate Control word codecs and the layout heuristic */
static void test_term_ctrl(void)
{
    uiw_term t;
    uint8_t out[4];

    /* PEERS.md §5: layer 2, etype 1, ecode 0x33, M */
    memset(&t, 0, sizeof(t));
    t.cause.layer = 2;
    t.cause.etype = 1;
    t.cause.ecode = 0x33;
    t.hdr_mpa = true;
    uiw_term_ctrl_encode(&t, out);
    CHECK_MEM(out, "\x21\x33\x80\x00", 4); /* RFC 5040 Figure 8 */
    t.siw_layout = true;
    uiw_term_ctrl_encode(&t, out);
    CHECK_MEM(out, "\x12\x33\x01\x00", 4); /* siw on little-endian */

    memset(&t, 0xAB, sizeof(t));
    uiw_term_ctrl_decode_siw((const uint8_t *)"\x12\x33\x01\x00", &t);
    CHECK_EQ(t.cause.layer, 2);
    CHECK_EQ(t.cause.etype, 1);
    CHECK_EQ(t.cause.ecode, 0x33);
    CHECK(t.hdr_mpa && !t.hdr_ddp && !t.hdr_rdma && t.siw_layout);
    CHECK_MEM(t.raw_ctrl, "\x12\x33\x01\x00", 4);
    CHECK_EQ(t.ddp_hdr_len, 0xAB); /* attachment fields untouched */

    uiw_term_ctrl_decode((const uint8_t *)"\x21\x33\x80\x00", &t);
    CHECK_EQ(t.cause.layer, 2);
    CHECK_EQ(t.cause.etype, 1);
    CHECK_EQ(t.cause.ecode, 0x33);
    CHECK(t.hdr_mpa && !t.hdr_ddp && !t.hdr_rdma && !t.siw_layout);

    /* each flag bit alone, both layouts */
    static const struct {
        uint8_t rfc, siw;
        bool m, d, r;
    } f[] = {{0x80, 0x01, true, false, false},
             {0x40, 0x02, false, true, false},
             {0x20, 0x04, false, false, true},
             {0xE0, 0x07, true, true, true}};
    for (size_t i = 0; i < 4; i++) {
        uint8_t a[4] = {0x12, 0x03, f[i].rfc, 0}, b[4] = {0x21, 0x03, f[i].siw, 0};
        uiw_term_ctrl_decode(a, &t);
        CHECK(t.hdr_mpa == f[i].m && t.hdr_ddp == f[i].d && t.hdr_rdma == f[i].r);
        CHECK(t.cause.layer == 1 && t.cause.etype == 2 && t.cause.ecode == 3);
        uiw_term_ctrl_decode_siw(b, &t);
        CHECK(t.hdr_mpa == f[i].m && t.hdr_ddp == f[i].d && t.hdr_rdma == f[i].r);
        CHECK(t.cause.layer == 1 && t.cause.etype == 2 && t.cause.ecode == 3);
        CHECK(!uiw_term_ctrl_looks_siw(a));
        CHECK(uiw_term_ctrl_looks_siw(b));
    }

    /* The heuristic over every registered cause: RFC-layout words never
     * look like siw; siw-layout words always do when they carry a flag, and
     * without flags unless the RFC reading is also registered. */
    static const struct {
        unsigned l, e;
        unsigned lo, hi; /* ecode range */
        unsigned extra;  /* one more code, 0 = none */
    } reg[] = {
        {0, 0, 0x00, 0x00, 0xFF}, {0, 1, 0x00, 0x04, 0x09}, {0, 1, 0xFF, 0xFF, 0},
        {0, 2, 0x05, 0x09, 0xFF}, {1, 0, 0x00, 0x00, 0},    {1, 1, 0x00, 0x04, 0},
        {1, 2, 0x01, 0x06, 0},    {1, 3, 0x00, 0x00, 0x42}, {2, 0, 0x01, 0x07, 0},
        {2, 3, 0x01, 0x07, 0}, /* MPA codes under type 3, as irdma and cxgb4 send them */
    };
    static const uint8_t rfc_flags[] = {0x00, 0x80, 0xC0, 0xE0, 0x20};
    static const uint8_t siw_flags[] = {0x00, 0x01, 0x03, 0x07, 0x04};
    unsigned long rfc_wrong = 0, siw_wrong = 0, ambiguous = 0, total = 0;
    for (size_t i = 0; i < sizeof(reg) / sizeof(reg[0]); i++) {
        for (unsigned ec = reg[i].lo; ec <= reg[i].hi + 1; ec++) {
            unsigned code = ec <= reg[i].hi ? ec : reg[i].extra;
            if (ec > reg[i].hi && !reg[i].extra)
                break;
            for (size_t k = 0; k < sizeof(rfc_flags); k++) {
                uint8_t a[4] = {(uint8_t)(reg[i].l << 4 | reg[i].e), (uint8_t)code, rfc_flags[k],
                                0};
                uint8_t b[4] = {(uint8_t)(reg[i].e << 4 | reg[i].l), (uint8_t)code, siw_flags[k],
                                0};
                total++;
                if (uiw_term_ctrl_looks_siw(a))
                    rfc_wrong++;
                if (!uiw_term_ctrl_looks_siw(b)) {
                    if (siw_flags[k] != 0)
                        siw_wrong++;
                    else
                        ambiguous++;
                }
            }
        }
    }
    CHECK_EQ(rfc_wrong, 0);
    CHECK_EQ(siw_wrong, 0);
    CHECK(ambiguous > 0 && ambiguous < total / 5);

    /* An RNIC's MPA CRC error Terminate (irdma, cxgb4: 0x23/0x02, no
     * headers): the RFC layout, an MPA CRC error under error type 3 */
    {
        const uint8_t rnic[4] = {0x23, 0x02, 0x00, 0x00};
        CHECK(!uiw_term_ctrl_looks_siw(rnic));
        uiw_term_ctrl_decode(rnic, &t);
        CHECK(t.cause.layer == UIW_LAYER_LLP && t.cause.etype == UIW_LLP_ET_RNIC &&
              t.cause.ecode == UIW_MPA_EC_CRC);
        CHECK(!t.hdr_mpa && !t.hdr_ddp && !t.hdr_rdma);
        CHECK_STR(uiw_term_ecode_name(UIW_LAYER_LLP, UIW_LLP_ET_RNIC, UIW_MPA_EC_CRC),
                  uiw_term_ecode_name(UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC));
    }

    /* the documented ambiguous case, and two unambiguous siw ones */
    CHECK(!uiw_term_ctrl_looks_siw((const uint8_t *)"\x20\x06\x00\x00"));
    CHECK(uiw_term_ctrl_looks_siw((const uint8_t *)"\x02\x02\x00\x00")); /* LLP/MPA/CRC */
    CHECK(uiw_term_ctrl_looks_siw((const uint8_t *)"\x12\x33\x01\x00")); /* notes example */
    CHECK(!uiw_term_ctrl_looks_siw((const uint8_t *)"\x20\x02\x00\x00"));
    /* garbage with flags in both places: RFC */
    CHECK(!uiw_term_ctrl_looks_siw((const uint8_t *)"\xFF\xFF\xFF\xFF"));

    /* decode picks siw's layout for a siw TERM: LLP/MPA/CRC = 02 02 00 00 */
    uint8_t img[22];
    memcpy(img, term_ddp_hdr, 18);
    memcpy(img + 18, "\x02\x02\x00\x00", 4);
    uiw_hdr d;
    CHECK_EQ(decode_exact(img, 22, &d, NULL), 22);
    CHECK(d.u.term.siw_layout);
    CHECK_EQ(d.u.term.cause.layer, UIW_LAYER_LLP);
    CHECK_EQ(d.u.term.cause.etype, UIW_LLP_ET_MPA);
    CHECK_EQ(d.u.term.cause.ecode, UIW_MPA_EC_CRC);
}

/* ------------------------------------------------------------------------
 * decode errors
 * ---------------------------------------------------------------------- */

static size_t encode_ok(const uiw_hdr *h, uint8_t *out)
{
    int n = uiw_hdr_encode(h, out, 128);
    CHECK(n > 0);
    return n > 0 ? (size_t)n : 0;
}

static void set_ctrl(uint8_t *img, uint16_t ctrl)
{
    img[0] = (uint8_t)(ctrl >> 8);
    img[1] = (uint8_t)ctrl;
}

static void test_decode_errors(void)
{
    uint8_t img[128];
    size_t n;
    uiw_hdr h;

    /* DDP version != 1 (RFC 5041 §4.1, §7.2): found with the control
     * field alone */
    for (unsigned dv = 0; dv < 4; dv++) {
        if (dv == 1)
            continue;
        h = base(true, true, UIW_OP_WRITE);
        n = encode_ok(&h, img);
        img[0] = (uint8_t)((img[0] & ~0x03u) | dv);
        expect_cause("DDP version, tagged", img, n, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED,
                     UIW_DDP_EC_T_INVALID_VERSION, 2);
        h = untagged(UIW_OP_SEND, 0, 1, 0, true);
        n = encode_ok(&h, img);
        img[0] = (uint8_t)((img[0] & ~0x03u) | dv);
        expect_cause("DDP version, untagged", img, n, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                     UIW_DDP_EC_U_INVALID_VERSION, 2);
    }
    /* DDP version wins over everything else in the control field */
    memset(img, 0, 18);
    set_ctrl(img, 0x42FF); /* DV 2, RV 3, opcode 0xF */
    expect_cause("DDP version first", img, 18, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                 UIW_DDP_EC_U_INVALID_VERSION, 2);

    /* RDMAP version 10b / 11b (RFC 5040 §4.1, §7.2) */
    for (unsigned rv = 2; rv < 4; rv++) {
        h = untagged(UIW_OP_SEND, 0, 1, 0, true);
        n = encode_ok(&h, img);
        img[1] = (uint8_t)((img[1] & ~0xC0u) | rv << 6);
        expect_cause("RDMAP version", img, n, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_INVALID_VERSION, 2);
        h = base(true, true, UIW_OP_READ_RESP);
        n = encode_ok(&h, img);
        img[1] = (uint8_t)((img[1] & ~0xC0u) | rv << 6);
        expect_cause("RDMAP version, tagged", img, n, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_INVALID_VERSION, 2);
    }
    /* RV 00b: valid for RFC 5040 opcodes (decoded, reported), invalid for
     * RFC 7306 ones */
    h = untagged(UIW_OP_SEND, 0, 1, 0, true);
    h.rdmap_version = UIW_RDMAP_VERSION_RDMAC;
    static const uint8_t rdmac_send[] = {0x41, 0x03, 0, 0, 0, 0, 0, 0, 0,
                                         0,    0,    0, 0, 1, 0, 0, 0, 0};
    roundtrip("RDMAC (RV 00b) send", &h, rdmac_send, sizeof(rdmac_send));
    h = base(true, true, UIW_OP_WRITE);
    h.rdmap_version = UIW_RDMAP_VERSION_RDMAC;
    roundtrip("RDMAC (RV 00b) write", &h, NULL, UIW_HDR_TAGGED_LEN);
    for (unsigned op = UIW_OP_IMM_DATA; op <= UIW_OP_ATOMIC_RESP; op++) {
        static const uint32_t qn[] = {0, 0, 1, 3};
        h = untagged(op, qn[op - UIW_OP_IMM_DATA], 1, 0, true);
        n = encode_ok(&h, img);
        img[1] &= 0x3F;
        expect_cause("RV 00b with an RFC 7306 opcode", img, n, UIW_LAYER_RDMAP,
                     UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_INVALID_VERSION, 2);
    }
    /* RV 00b with an undefined opcode: version (RDMAC has no such opcode
     * either, and the version is checked first) */
    memset(img, 0, 18);
    set_ctrl(img, 0x410C);
    expect_cause("RV 00b, opcode 0xC", img, 18, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                 UIW_RDMAP_EC_INVALID_VERSION, 2);

    /* Undefined opcodes 0xC-0xF (RFC 5040 §7.2, RFC 6580 §3.4) */
    for (unsigned op = 0xC; op <= 0xF; op++) {
        memset(img, 0, sizeof(img));
        set_ctrl(img, (uint16_t)(0x4140 | op));
        expect_cause("undefined opcode, untagged", img, 30, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_UNEXPECTED_OPCODE, 2);
        set_ctrl(img, (uint16_t)(0xC140 | op));
        expect_cause("undefined opcode, tagged", img, 14, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_UNEXPECTED_OPCODE, 2);
    }

    /* T flag against RFC 5040 Figure 4 / RFC 7306 Figure 2 */
    for (unsigned op = 0; op <= UIW_OP_MAX; op++) {
        bool should_tag = op == UIW_OP_WRITE || op == UIW_OP_READ_RESP;
        memset(img, 0, sizeof(img));
        set_ctrl(img, (uint16_t)((should_tag ? 0x0000 : 0x8000) | 0x4140 | op));
        expect_cause("T/opcode mismatch", img, 80, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_UNEXPECTED_OPCODE, 2);
        CHECK_EQ(uiw_hdr_len(!should_tag, op), -EPROTO);
    }

    /* Header-only messages without L: longer than their buffer */
    static const struct {
        unsigned op;
        uint32_t qn;
    } ho[] = {{UIW_OP_READ_REQ, 1},    {UIW_OP_TERMINATE, 2},  {UIW_OP_IMM_DATA, 0},
              {UIW_OP_IMM_DATA_SE, 0}, {UIW_OP_ATOMIC_REQ, 1}, {UIW_OP_ATOMIC_RESP, 3}};
    for (size_t i = 0; i < sizeof(ho) / sizeof(ho[0]); i++) {
        h = untagged(ho[i].op, ho[i].qn, 1, 0, true);
        n = encode_ok(&h, img);
        img[0] &= (uint8_t)~0x40u;
        expect_cause("header-only without L", img, n, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                     UIW_DDP_EC_U_MSG_TOO_LONG, 2);
        /* ... and with MO != 0 */
        n = encode_ok(&h, img);
        img[17] = 0x04;
        expect_cause("header-only with MO", img, n, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                     UIW_DDP_EC_U_INVALID_MO, 18);
        /* a Send may have any MO and no L */
    }
    h = untagged(UIW_OP_SEND_SE, 0, 1, 0x10000, false);
    roundtrip("send middle, large MO", &h, NULL, UIW_HDR_UNTAGGED_LEN);

    /* QN not the opcode's (RFC 5041 §7.1 (1)); found once the QN word is in */
    static const uint32_t bad_qns[] = {0, 1, 2, 3, 4, 0x100, 0xFFFFFFFFu};
    for (unsigned op = 0; op <= UIW_OP_MAX; op++) {
        if (op == UIW_OP_WRITE || op == UIW_OP_READ_RESP)
            continue;
        static const uint32_t qn_of[] = {0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 1, 3};
        for (size_t k = 0; k < sizeof(bad_qns) / sizeof(bad_qns[0]); k++) {
            if (bad_qns[k] == qn_of[op])
                continue;
            h = untagged(op, qn_of[op], 1, 0, true);
            n = encode_ok(&h, img);
            img[6] = (uint8_t)(bad_qns[k] >> 24);
            img[7] = (uint8_t)(bad_qns[k] >> 16);
            img[8] = (uint8_t)(bad_qns[k] >> 8);
            img[9] = (uint8_t)bad_qns[k];
            expect_cause("wrong QN", img, n, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                         UIW_DDP_EC_U_INVALID_QN, 10);
        }
    }

    /* Atomic Request with an AOpCode other than FetchAdd / CmpSwap
     * (RFC 7306 §5.2.1 (4)); found once the AOpCode byte is in */
    for (unsigned aop = 0; aop < 16; aop++) {
        if (aop == UIW_AOP_FETCH_ADD || aop == UIW_AOP_CMP_SWAP)
            continue;
        h = untagged(UIW_OP_ATOMIC_REQ, 1, 1, 0, true);
        n = encode_ok(&h, img);
        img[21] = (uint8_t)aop;
        expect_cause("undefined AOpCode", img, n, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                     UIW_RDMAP_EC_UNSPECIFIED_OTHER, 22);
    }

    /* Reserved fields are not checked: DDP Resrv, RDMAP Rsv, the RsvdULP
     * word of a plain Send. The values come back and re-encode. */
    h = untagged(UIW_OP_SEND, 0, 1, 0, true);
    h.ddp_rsvd = 0xF;
    h.rdmap_rsvd = 0x3;
    h.inv_stag = 0x12345678u;
    static const uint8_t rsvd_img[] = {0x7D, 0x73, 0x12, 0x34, 0x56, 0x78, 0, 0, 0,
                                       0,    0,    0,    0,    1,    0,    0, 0, 0};
    roundtrip("reserved bits set", &h, rsvd_img, sizeof(rsvd_img));
    h = base(true, false, UIW_OP_WRITE);
    h.ddp_rsvd = 0x5;
    h.rdmap_rsvd = 0x1;
    roundtrip("tagged reserved bits", &h, NULL, UIW_HDR_TAGGED_LEN);

    /* Arguments */
    CHECK_EQ(uiw_hdr_decode(img, 18, NULL, NULL), -EINVAL);
    CHECK_EQ(uiw_hdr_decode(NULL, 5, &h, NULL), -EINVAL);
    CHECK_EQ(uiw_hdr_decode(NULL, 0, &h, NULL), -EAGAIN);
}

static void test_encode_rejects(void)
{
    uint8_t out[128];
    uiw_hdr h;

    CHECK_EQ(uiw_hdr_encode(NULL, out, sizeof(out)), -EINVAL);
    h = base(true, true, UIW_OP_WRITE);
    CHECK_EQ(uiw_hdr_encode(&h, NULL, 14), -EINVAL);
    CHECK_EQ(uiw_hdr_encode(&h, NULL, 0), -EMSGSIZE);

    h.ddp_version = 0;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h.ddp_version = 4;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, UIW_OP_WRITE);
    h.rdmap_version = 2;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, UIW_OP_WRITE);
    h.ddp_rsvd = 0x10;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, UIW_OP_WRITE);
    h.rdmap_rsvd = 4;
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, 0xC);
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, 0x1F);
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = base(true, true, UIW_OP_SEND); /* Send with T */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_WRITE, 0, 1, 0, true); /* Write without T */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_READ_REQ, 0, 1, 0, true); /* wrong QN */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_READ_REQ, 1, 1, 0, false); /* no L */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_READ_REQ, 1, 1, 4, true); /* MO */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_ATOMIC_REQ, 1, 1, 0, true);
    h.u.atomic_req.aop = 1; /* reserved AOpCode */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
    h = untagged(UIW_OP_IMM_DATA, 0, 1, 0, true);
    h.rdmap_version = 0; /* RFC 7306 requires 01b */
    CHECK_EQ(uiw_hdr_encode(&h, out, sizeof(out)), -EINVAL);
}

static void test_hdr_len(void)
{
    CHECK_EQ(uiw_hdr_len(true, UIW_OP_WRITE), 14);
    CHECK_EQ(uiw_hdr_len(true, UIW_OP_READ_RESP), 14);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_READ_REQ), 46);
    for (unsigned op = UIW_OP_SEND; op <= UIW_OP_SEND_SE_INV; op++)
        CHECK_EQ(uiw_hdr_len(false, op), 18);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_IMM_DATA), 26);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_IMM_DATA_SE), 26);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_ATOMIC_REQ), 70);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_ATOMIC_RESP), 30);
    CHECK_EQ(uiw_hdr_len(false, UIW_OP_TERMINATE), -EPROTO);
    for (unsigned op = 0xC; op < 0x20; op++) {
        CHECK_EQ(uiw_hdr_len(false, op), -EPROTO);
        CHECK_EQ(uiw_hdr_len(true, op), -EPROTO);
    }
    CHECK_EQ(UIW_HDR_MAX_LEN, 70);
    CHECK_EQ(UIW_TERM_MAX_ULPDU, 70);
    /* our op table agrees with the rx/tx section's header-only list */
    for (unsigned op = 0; op < 16; op++) {
        bool expect = op == UIW_OP_READ_REQ || op == UIW_OP_TERMINATE ||
                      (op >= UIW_OP_IMM_DATA && op <= UIW_OP_ATOMIC_RESP);
        CHECK(uiw_op_hdr_only(op) == expect);
    }
}

/* ------------------------------------------------------------------------
 * names
 * ---------------------------------------------------------------------- */

static void test_names(void)
{
    static const char *const ops[] = {
        "RDMA Write",
        "RDMA Read Request",
        "RDMA Read Response",
        "Send",
        "Send with Invalidate",
        "Send with SE",
        "Send with SE and Invalidate",
        "Terminate",
        "Immediate Data",
        "Immediate Data with SE",
        "Atomic Request",
        "Atomic Response",
    };
    for (unsigned op = 0; op <= UIW_OP_MAX; op++)
        CHECK_STR(uiw_opcode_name(op), ops[op]);
    CHECK_STR(uiw_opcode_name(0xC), "unknown(0x0c)");
    CHECK_STR(uiw_opcode_name(0xD), "unknown(0x0d)");
    CHECK_STR(uiw_opcode_name(0xE), "unknown(0x0e)");
    CHECK_STR(uiw_opcode_name(0xF), "reserved (experimental)");
    CHECK_STR(uiw_opcode_name(0x1234), "unknown(0x1234)");

    CHECK_STR(uiw_term_layer_name(0), "RDMAP");
    CHECK_STR(uiw_term_layer_name(1), "DDP");
    CHECK_STR(uiw_term_layer_name(2), "LLP");
    CHECK_STR(uiw_term_layer_name(3), "unknown(0x03)");
    CHECK_STR(uiw_term_layer_name(15), "unknown(0x0f)");

    CHECK_STR(uiw_term_etype_name(0, 0), "local catastrophic");
    CHECK_STR(uiw_term_etype_name(0, 1), "remote protection");
    CHECK_STR(uiw_term_etype_name(0, 2), "remote operation");
    CHECK_STR(uiw_term_etype_name(0, 3), "unknown(0x03)");
    CHECK_STR(uiw_term_etype_name(1, 0), "local catastrophic");
    CHECK_STR(uiw_term_etype_name(1, 1), "tagged buffer");
    CHECK_STR(uiw_term_etype_name(1, 2), "untagged buffer");
    CHECK_STR(uiw_term_etype_name(1, 3), "reserved for the LLP");
    CHECK_STR(uiw_term_etype_name(1, 4), "unknown(0x04)");
    CHECK_STR(uiw_term_etype_name(2, 0), "MPA");
    CHECK_STR(uiw_term_etype_name(2, 1), "unknown(0x01)");
    CHECK_STR(uiw_term_etype_name(7, 0), "unknown(0x00)");

    /* RDMAP (RFC 5040 Figure 9) */
    CHECK_STR(uiw_term_ecode_name(0, 0, 0x00), "none");
    CHECK_STR(uiw_term_ecode_name(0, 0, 0xFF), "none");
    static const struct {
        unsigned l, e, c;
        const char *name;
    } codes[] = {
        {0, 1, 0x00, "invalid STag"},
        {0, 1, 0x01, "base or bounds violation"},
        {0, 1, 0x02, "access rights violation"},
        {0, 1, 0x03, "STag not associated with RDMAP stream"},
        {0, 1, 0x04, "TO wrap"},
        {0, 1, 0x09, "STag cannot be invalidated"},
        {0, 1, 0xFF, "unspecified error"},
        {0, 2, 0x05, "invalid RDMAP version"},
        {0, 2, 0x06, "unexpected opcode"},
        {0, 2, 0x07, "catastrophic error, localized to RDMAP stream"},
        {0, 2, 0x08, "catastrophic error, global"},
        {0, 2, 0x09, "STag cannot be invalidated"},
        {0, 2, 0xFF, "unspecified error"},
        /* DDP (RFC 5041 §7.2) */
        {1, 0, 0x00, "local catastrophic"},
        {1, 1, 0x00, "invalid STag"},
        {1, 1, 0x01, "base or bounds violation"},
        {1, 1, 0x02, "STag not associated with DDP stream"},
        {1, 1, 0x03, "TO wrap"},
        {1, 1, 0x04, "invalid DDP version"},
        {1, 2, 0x01, "invalid QN"},
        {1, 2, 0x02, "invalid MSN - no buffer available"},
        {1, 2, 0x03, "invalid MSN - MSN range is not valid"},
        {1, 2, 0x04, "invalid MO"},
        {1, 2, 0x05, "DDP message too long for available buffer"},
        {1, 2, 0x06, "invalid DDP version"},
        {1, 3, 0x00, "LLP-defined"},
        {1, 3, 0x77, "LLP-defined"},
        /* MPA (RFC 5044 §8, RFC 6581 §8) */
        {2, 0, 0x01, "TCP connection closed, terminated, or lost"},
        {2, 0, 0x02, "MPA CRC error"},
        {2, 0, 0x03, "MPA marker and ULPDU length field mismatch"},
        {2, 0, 0x04, "invalid MPA request or reply frame"},
        {2, 0, 0x05, "local catastrophic error"},
        {2, 0, 0x06, "insufficient IRD resources"},
        {2, 0, 0x07, "no matching RTR option"},
        /* undefined */
        {0, 1, 0x05, "unknown(0x05)"},
        {0, 1, 0x0A, "unknown(0x0a)"},
        {0, 2, 0x00, "unknown(0x00)"},
        {0, 2, 0x04, "unknown(0x04)"},
        {0, 2, 0x0A, "unknown(0x0a)"},
        {0, 3, 0x01, "unknown(0x01)"},
        {1, 0, 0x01, "unknown(0x01)"},
        {1, 1, 0x05, "unknown(0x05)"},
        {1, 2, 0x00, "unknown(0x00)"},
        {1, 2, 0x07, "unknown(0x07)"},
        {1, 4, 0x00, "unknown(0x00)"},
        {2, 0, 0x00, "unknown(0x00)"},
        {2, 0, 0x08, "unknown(0x08)"},
        {2, 0, 0xFF, "unknown(0xff)"},
        {2, 1, 0x02, "unknown(0x02)"},
        {3, 0, 0x02, "unknown(0x02)"},
    };
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
        CHECK_STR(uiw_term_ecode_name(codes[i].l, codes[i].e, codes[i].c), codes[i].name);

    /* every (layer, etype, ecode) gives a non-empty name */
    unsigned long empty = 0;
    for (unsigned l = 0; l < 16; l++)
        for (unsigned e = 0; e < 16; e++) {
            if (!uiw_term_etype_name(l, e)[0])
                empty++;
            for (unsigned c = 0; c < 256; c++)
                if (!uiw_term_ecode_name(l, e, c)[0])
                    empty++;
        }
    CHECK_EQ(empty, 0);

    /* several unknown names stay valid at once (up to 8) */
    const char *a = uiw_opcode_name(0xC), *b = uiw_term_layer_name(9), *c = uiw_opcode_name(0xD);
    CHECK_STR(a, "unknown(0x0c)");
    CHECK_STR(b, "unknown(0x09)");
    CHECK_STR(c, "unknown(0x0d)");
}

/* The unknown-name buffers are per thread. */
static void *name_thread(void *arg)
{
    const char **out = arg;
    *out = uiw_opcode_name(0xE);
    return NULL;
}

static void test_names_threads(void)
{
    const char *mine = uiw_opcode_name(0xC), *theirs = NULL;
    pthread_t t;

    CHECK_EQ(pthread_create(&t, NULL, name_thread, &theirs), 0);
    pthread_join(t, NULL);
    CHECK(theirs != NULL && theirs != mine);
    CHECK_STR(mine, "unknown(0x0c)");
}

/* Header initialisers, the Terminate's header image and attachments
 * (RFC 5040 §4.8), and the MPA frame length (RFC 5044 §7.1). */
static void test_term_helpers(void)
{
    uiw_hdr h;
    uint8_t img[UIW_TERM_HDR_IMAGE_MAX], enc[64];
    uiw_term t;
    uint32_t qn = 0, msn = 0;

    uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_SEND, 7);
    CHECK(!h.tagged && h.last);
    CHECK_EQ(h.ddp_version, UIW_DDP_VERSION);
    CHECK_EQ(h.rdmap_version, UIW_RDMAP_VERSION);
    CHECK_EQ(h.opcode, UIW_OP_SEND);
    CHECK_EQ(h.qn, UIW_QN_SEND);
    CHECK_EQ(h.msn, 7);
    CHECK_EQ(h.mo, 0);
    /* image: DDP Segment Length, then the 18-byte untagged header exactly
     * as the encoder writes it */
    CHECK_EQ(uiw_term_hdr_image(&h, 1234, true, img),
             UIW_TERM_DDP_SEGLEN_LEN + UIW_HDR_UNTAGGED_LEN);
    CHECK_EQ(img[0], 1234 >> 8);
    CHECK_EQ(img[1], 1234 & 0xff);
    CHECK_EQ(uiw_hdr_encode(&h, enc, sizeof(enc)), UIW_HDR_UNTAGGED_LEN);
    CHECK_MEM(img + 2, enc, UIW_HDR_UNTAGGED_LEN);
    /* a Read Request adds its RDMA header when asked */
    uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 3);
    h.u.rreq.sink_stag = 0x11223344;
    h.u.rreq.read_size = 4096;
    h.u.rreq.src_stag = 0x55667788;
    CHECK_EQ(uiw_term_hdr_image(&h, 46, true, img), 2 + UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN);
    CHECK_EQ(uiw_term_hdr_image(&h, 46, false, img), 2 + UIW_HDR_UNTAGGED_LEN);
    CHECK_EQ(uiw_term_hdr_image(&h, 46, true, img), 48);
    /* attach: an RDMAP error on it carries M, D and R ... */
    uiw_term_cause rp = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_INVALID_STAG};
    uiw_term_attach(&t, rp, img, 48);
    CHECK(t.hdr_mpa && t.hdr_ddp && t.hdr_rdma);
    CHECK_EQ(t.ddp_hdr_len, 20);
    CHECK_EQ(t.rdma_hdr_len, UIW_RREQ_LEN);
    CHECK_MEM(t.ddp_hdr, img, 20);
    CHECK_MEM(t.rdma_hdr, img + 20, UIW_RREQ_LEN);
    CHECK(uiw_term_untagged_qn_msn(&t, &qn, &msn));
    CHECK_EQ(qn, UIW_QN_READ_REQ);
    CHECK_EQ(msn, 3);
    /* ... a DDP error M and D only, an LLP error nothing */
    uiw_term_cause dd = {UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE};
    uiw_term_attach(&t, dd, img, 20);
    CHECK(t.hdr_mpa && t.hdr_ddp && !t.hdr_rdma);
    uiw_term_cause llp = {UIW_LAYER_LLP, 0, 0};
    uiw_term_attach(&t, llp, img, 48);
    CHECK(!t.hdr_mpa && !t.hdr_ddp && !t.hdr_rdma);
    CHECK(!uiw_term_untagged_qn_msn(&t, &qn, &msn));
    /* a Local Catastrophic error (RDMAP type 0) nothing either */
    uiw_term_cause cat = {UIW_LAYER_RDMAP, 0, 0};
    uiw_term_attach(&t, cat, img, 48);
    CHECK(!t.hdr_mpa && !t.hdr_ddp);
    /* only 2 bytes: M without D */
    uiw_term_attach(&t, dd, img, 2);
    CHECK(t.hdr_mpa && !t.hdr_ddp);
    CHECK_EQ(t.ddp_hdr_len, 2);
    /* a tagged image: D with the 14-byte header; no QN/MSN */
    uiw_hdr_init(&h, true, UIW_OP_WRITE);
    h.stag = 0x1234;
    h.to = 99;
    CHECK_EQ(uiw_term_hdr_image(&h, 100, true, img), 2 + UIW_HDR_TAGGED_LEN);
    uiw_term_attach(&t, rp, img, 2 + UIW_HDR_TAGGED_LEN);
    CHECK(t.hdr_ddp && !t.hdr_rdma);
    CHECK_EQ(t.ddp_hdr_len, 2 + UIW_HDR_TAGGED_LEN);
    CHECK(!uiw_term_untagged_qn_msn(&t, &qn, &msn));
    /* a Terminate is never reported on */
    uiw_hdr_init_untagged(&h, UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1);
    CHECK_EQ(uiw_term_hdr_image(&h, 30, true, img), 0);

    /* MPA: the header first, then header + PD_Length (clamped) */
    uint8_t mpa[UIW_MPA_HDR_LEN] = {0};
    CHECK_EQ(uiw_mpa_frame_want(mpa, 0), UIW_MPA_HDR_LEN);
    CHECK_EQ(uiw_mpa_frame_want(mpa, 19), UIW_MPA_HDR_LEN);
    mpa[18] = 0x01;
    mpa[19] = 0x02;
    CHECK_EQ(uiw_mpa_frame_want(mpa, 20), UIW_MPA_HDR_LEN + 0x102);
    mpa[18] = 0xff;
    CHECK_EQ(uiw_mpa_frame_want(mpa, 20), UIW_MPA_HDR_LEN + UIW_MPA_MAX_PD);
}

/* The untagged queue sequencer (RFC 5041 §5.1.2, §5.2, §7.1): every rule
 * with the Terminate cause it gives, and the state it keeps. */
static void test_useq(void)
{
    uiw_useq q;
    uiw_hdr h;
    uiw_term_cause c;

    uiw_useq_init(&q);
    CHECK_EQ(q.next_msn, 1);
    CHECK(!q.open);
    /* a first segment of MSN 1 without L, 100 bytes */
    uiw_hdr_init_untagged(&h, UIW_OP_SEND, 0, 1);
    h.last = false;
    CHECK(uiw_useq_check(&q, &h, &c));
    uiw_useq_accept(&q, &h, 100);
    CHECK(q.open);
    CHECK_EQ(q.msn, 1);
    CHECK_EQ(q.mo_next, 100);
    /* continuation: wrong MO */
    h.mo = 99;
    CHECK(!uiw_useq_check(&q, &h, &c));
    CHECK_EQ(c.layer, UIW_LAYER_DDP);
    CHECK_EQ(c.etype, UIW_DDP_ET_UNTAGGED);
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MO);
    /* wrong MSN (checked first) */
    h.msn = 2;
    CHECK(!uiw_useq_check(&q, &h, &c));
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MSN_RANGE);
    /* other opcode */
    h.msn = 1;
    h.mo = 100;
    h.opcode = UIW_OP_SEND_SE;
    CHECK(!uiw_useq_check(&q, &h, &c));
    CHECK_EQ(c.layer, UIW_LAYER_RDMAP);
    CHECK_EQ(c.etype, UIW_RDMAP_ET_REMOTE_OP);
    CHECK_EQ(c.ecode, UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    /* the right last segment ends the message */
    h.opcode = UIW_OP_SEND;
    h.last = true;
    CHECK(uiw_useq_check(&q, &h, &c));
    uiw_useq_accept(&q, &h, 50);
    CHECK(!q.open);
    CHECK_EQ(q.next_msn, 2);
    /* a new message must have MSN 2 and MO 0 */
    uiw_hdr_init_untagged(&h, UIW_OP_SEND, 0, 3);
    CHECK(!uiw_useq_check(&q, &h, &c));
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MSN_RANGE);
    h.msn = 2;
    h.mo = 8;
    CHECK(!uiw_useq_check(&q, &h, &c));
    CHECK_EQ(c.ecode, UIW_DDP_EC_U_INVALID_MO);
    h.mo = 0;
    CHECK(uiw_useq_check(&q, &h, &c));
    /* MSN wraps modulo 2^32 */
    q.next_msn = 0xffffffffu;
    h.msn = 0xffffffffu;
    CHECK(uiw_useq_check(&q, &h, &c));
    uiw_useq_accept(&q, &h, 0);
    CHECK_EQ(q.next_msn, 0);
}

int main(void)
{
    test_ctrl_words();
    test_write_and_read_response();
    test_read_request();
    test_sends();
    test_immediate();
    test_atomics();
    test_terminate();
    test_term_ctrl();
    test_decode_errors();
    test_encode_rejects();
    test_hdr_len();
    test_names();
    test_names_threads();
    test_term_helpers();
    test_useq();
    TEST_MAIN_END();
}
