/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * MPA Request/Reply/Reject frames (src/wire/mpa.c) and the MPA negotiation
 * state machine (src/wire/negotiate.c): round trips, the real siw frames of
 * ../shared/siw-peer/pcaps, malformed frames, and every policy combination
 * with its exact outcome and Terminate cause.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "uiwarp/wire.h"

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
    size_t n = 0;
    while (hex[0] && hex[1] && n < cap) {
        unsigned v;
        if (sscanf(hex, "%2x", &v) != 1)
            break;
        out[n++] = (uint8_t)v;
        hex += 2;
    }
    return n;
}

static const uint8_t KEY_REQ[16] = "MPA ID Req Frame";
static const uint8_t KEY_REP[16] = "MPA ID Rep Frame";

/* Build a raw frame: key, flags, rev, pd_len, pd. */
static size_t raw_frame(uint8_t *out, bool req, uint8_t flags, uint8_t rev, const uint8_t *pd,
                        uint16_t pd_len)
{
    memcpy(out, req ? KEY_REQ : KEY_REP, 16);
    out[16] = flags;
    out[17] = rev;
    out[18] = (uint8_t)(pd_len >> 8);
    out[19] = (uint8_t)pd_len;
    if (pd_len)
        memcpy(out + 20, pd, pd_len);
    return 20u + pd_len;
}

/* Enhanced raw frame with IRD/ORD words (full 16-bit words incl. flags). */
static size_t raw_enh(uint8_t *out, bool req, uint8_t flags, uint8_t rev, uint16_t irdw,
                      uint16_t ordw, const uint8_t *ulp, uint16_t ulp_len)
{
    uint8_t pd[UIW_MPA_MAX_PD];
    pd[0] = (uint8_t)(irdw >> 8);
    pd[1] = (uint8_t)irdw;
    pd[2] = (uint8_t)(ordw >> 8);
    pd[3] = (uint8_t)ordw;
    if (ulp_len)
        memcpy(pd + 4, ulp, ulp_len);
    return raw_frame(out, req, flags | UIW_MPA_FLAG_S, rev, pd, (uint16_t)(4 + ulp_len));
}

static bool frame_eq(const uiw_mpa_frame *a, const uiw_mpa_frame *b)
{
    return a->kind == b->kind && a->markers == b->markers && a->crc == b->crc &&
           a->reject == b->reject && a->enhanced == b->enhanced && a->res == b->res &&
           a->rev == b->rev && a->pd_len == b->pd_len &&
           (!a->enhanced ||
            (a->p2p == b->p2p && a->rtr == b->rtr && a->ird == b->ird && a->ord == b->ord)) &&
           a->ulp_pd_len == b->ulp_pd_len && memcmp(a->ulp_pd, b->ulp_pd, a->ulp_pd_len) == 0;
}

static bool result_eq(const uiw_mpa_result *a, const uiw_mpa_result *b)
{
    return a->crc == b->crc && a->markers_rx == b->markers_rx && a->markers_tx == b->markers_tx &&
           a->rev == b->rev && a->enhanced == b->enhanced && a->ird == b->ird && a->ord == b->ord &&
           a->peer_ird == b->peer_ird && a->peer_ord == b->peer_ord && a->p2p == b->p2p &&
           a->rtr == b->rtr && a->send_rtr == b->send_rtr && a->await_rtr == b->await_rtr &&
           a->peer_pd_len == b->peer_pd_len && memcmp(a->peer_pd, b->peer_pd, a->peer_pd_len) == 0;
}

/* What one side ended with after being fed the peer's bytes. */
typedef struct outcome {
    int start_rc; /* initiator: start_initiator's return */
    int rc;       /* first negative feed return, else 0 */
    size_t consumed;
    uiw_mpa_neg n;
    uint8_t out[UIW_MPA_MAX_FRAME]; /* responder's Reply, initiator's Request */
    size_t out_len;
} outcome;

/* Feed in pieces: piece == 0 means all at once, else pieces of that size. */
static void feed_all(outcome *o, const uint8_t *in, size_t len, size_t piece)
{
    size_t off = 0;
    o->rc = 0;
    o->consumed = 0;
    while (off < len) {
        size_t take = piece ? piece : len;
        if (take > len - off)
            take = len - off;
        size_t olen = 0;
        uint8_t tmp[UIW_MPA_MAX_FRAME];
        int rc = uiw_mpa_neg_feed(&o->n, in + off, take, tmp, sizeof(tmp), &olen);
        if (rc < 0) {
            o->rc = rc;
            return;
        }
        if (olen) {
            memcpy(o->out, tmp, olen);
            o->out_len = olen;
        }
        o->consumed += (size_t)rc;
        if ((size_t)rc < take)
            return; /* the rest is not the frame's */
        off += take;
    }
}

static void run_responder(outcome *o, const uiw_mpa_policy *pol, const uint8_t *in, size_t len,
                          size_t piece)
{
    memset(o, 0, sizeof(*o));
    uiw_mpa_neg_start_responder(&o->n, pol);
    feed_all(o, in, len, piece);
}

static void run_initiator(outcome *o, const uiw_mpa_policy *pol, const uint8_t *in, size_t len,
                          size_t piece)
{
    memset(o, 0, sizeof(*o));
    o->start_rc = uiw_mpa_neg_start_initiator(&o->n, pol, o->out, sizeof(o->out));
    if (o->start_rc > 0)
        o->out_len = (size_t)o->start_rc;
    feed_all(o, in, len, piece);
}

/* A full conversation: initiator Request -> responder -> Reply -> initiator. */
typedef struct convo {
    outcome ini, rsp;
} convo;

static void converse(convo *c, const uiw_mpa_policy *ip, const uiw_mpa_policy *rp)
{
    uint8_t req[UIW_MPA_MAX_FRAME];
    memset(&c->ini, 0, sizeof(c->ini));
    c->ini.start_rc = uiw_mpa_neg_start_initiator(&c->ini.n, ip, req, sizeof(req));
    run_responder(&c->rsp, rp, req, c->ini.start_rc > 0 ? (size_t)c->ini.start_rc : 0, 0);
    if (c->ini.start_rc > 0) {
        memcpy(c->ini.out, req, (size_t)c->ini.start_rc);
        c->ini.out_len = (size_t)c->ini.start_rc;
    }
    feed_all(&c->ini, c->rsp.out, c->rsp.out_len, 0);
}

static uiw_mpa_policy pol_default(void)
{
    uiw_mpa_policy p;
    uiw_mpa_policy_default(&p);
    return p;
}

#define CHECK_TERM(n, code, send)                                                                  \
    do {                                                                                           \
        CHECK((n).term_valid);                                                                     \
        CHECK_EQ((n).term.layer, UIW_LAYER_LLP);                                                   \
        CHECK_EQ((n).term.etype, UIW_LLP_ET_MPA);                                                  \
        CHECK_EQ((n).term.ecode, (code));                                                          \
        CHECK_EQ((n).term_send, (send));                                                           \
    } while (0)

/* ------------------------------------------------------------------------
 * The real frames (tshark -T fields -e tcp.payload on the reference pcaps)
 * ---------------------------------------------------------------------- */

struct capframe {
    const char *name;
    const char *hex;
    uint8_t kind;
    bool crc;
    uint8_t rev;
    bool enhanced;
    uint16_t irdw, ordw; /* full words */
};

static const struct capframe capframes[] = {
    {"rping-default req", "4d504120494420526571204672616d651002000400010001", UIW_MPA_REQUEST,
     false, 2, true, 0x0001, 0x0001},
    {"rping-default rep", "4d504120494420526570204672616d651002000400010001", UIW_MPA_REPLY, false,
     2, true, 0x0001, 0x0001},
    {"rping-crc req", "4d504120494420526571204672616d655002000400010001", UIW_MPA_REQUEST, true, 2,
     true, 0x0001, 0x0001},
    {"rping-crc rep", "4d504120494420526570204672616d655002000400010001", UIW_MPA_REPLY, true, 2,
     true, 0x0001, 0x0001},
    {"rping-p2p req", "4d504120494420526571204672616d65100200048001c001", UIW_MPA_REQUEST, false, 2,
     true, 0x8001, 0xC001},
    {"rping-p2p rep", "4d504120494420526570204672616d651002000480018001", UIW_MPA_REPLY, false, 2,
     true, 0x8001, 0x8001},
    {"rping-p2p-readrtr req", "4d504120494420526571204672616d651002000480014001", UIW_MPA_REQUEST,
     false, 2, true, 0x8001, 0x4001},
    {"rping-p2p-readrtr rep", "4d504120494420526570204672616d651002000480014001", UIW_MPA_REPLY,
     false, 2, true, 0x8001, 0x4001},
    {"rping-rev1 req", "4d504120494420526571204672616d6500010000", UIW_MPA_REQUEST, false, 1, false,
     0, 0},
    {"rping-rev1 rep", "4d504120494420526570204672616d6500010000", UIW_MPA_REPLY, false, 1, false,
     0, 0},
    {"ib_read_bw req", "4d504120494420526571204672616d651002000400800080", UIW_MPA_REQUEST, false,
     2, true, 0x0080, 0x0080},
    {"ib_read_bw rep", "4d504120494420526570204672616d651002000400800080", UIW_MPA_REPLY, false, 2,
     true, 0x0080, 0x0080},
    {"ib_write_bw req", "4d504120494420526571204672616d651002000400000000", UIW_MPA_REQUEST, false,
     2, true, 0, 0},
    {"crc-ib_write_bw rep", "4d504120494420526570204672616d655002000400000000", UIW_MPA_REPLY, true,
     2, true, 0, 0},
};
#define NCAP (sizeof(capframes) / sizeof(capframes[0]))

/* rping-p2p.pcap frame 8: the initiator's zero-length RDMA Write RTR that
 * follows its Request on the same stream (STag 1, TO 0, CRC field 0). */
static const char rtr_write_hex[] = "000ec14000000001000000000000000000000000";

static void test_capture_frames(void)
{
    for (size_t i = 0; i < NCAP; i++) {
        const struct capframe *c = &capframes[i];
        uint8_t in[64], out[64];
        size_t len = unhex(c->hex, in, sizeof(in));
        uiw_mpa_frame f;
        int rc = uiw_mpa_decode(in, len, 0, &f);
        CHECK_EQ(rc, (int)len);
        CHECK_EQ(f.kind, c->kind);
        CHECK_EQ(f.rev, c->rev);
        CHECK_EQ(f.crc, c->crc);
        CHECK(!f.markers);
        CHECK(!f.reject);
        CHECK_EQ(f.res, 0);
        CHECK_EQ(f.enhanced, c->enhanced);
        CHECK_EQ(f.pd_len, c->enhanced ? 4 : 0);
        CHECK_EQ(f.ulp_pd_len, 0);
        if (c->enhanced) {
            CHECK_EQ(f.ird, c->irdw & 0x3FFF);
            CHECK_EQ(f.ord, c->ordw & 0x3FFF);
            CHECK_EQ(f.p2p, (c->irdw & 0x8000) != 0);
            CHECK_EQ(!!(f.rtr & UIW_RTR_SEND), (c->irdw & 0x4000) != 0);
            CHECK_EQ(!!(f.rtr & UIW_RTR_WRITE), (c->ordw & 0x8000) != 0);
            CHECK_EQ(!!(f.rtr & UIW_RTR_READ), (c->ordw & 0x4000) != 0);
        }
        /* expected kind */
        CHECK_EQ(uiw_mpa_decode(in, len, c->kind, &f), (int)len);
        CHECK_EQ(uiw_mpa_decode(in, len, 3 - c->kind, &f), -EPROTO);
        /* byte-exact re-encode */
        CHECK_EQ(uiw_mpa_encode(&f, out, sizeof(out)), (int)len);
        CHECK_MEM(out, in, len);
    }
}

/* Our negotiation emits exactly the frames siw emitted. */
static void test_capture_bytes_exact(void)
{
    uint8_t want[64];
    size_t wl;
    outcome o;
    uiw_mpa_policy p = pol_default();

    /* rping initiator: IRD 1 / ORD 1, no CRC, no P2P */
    p.ird = 1;
    p.ord = 1;
    wl = unhex(capframes[0].hex, want, sizeof(want));
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, (int)wl);
    CHECK_MEM(o.out, want, wl);
    CHECK_EQ(o.n.state, UIW_MPA_S_WAIT_REP);

    /* crc variant: C in the Request */
    p.crc = UIW_CRC_REQUIRED;
    wl = unhex(capframes[2].hex, want, sizeof(want));
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, (int)wl);
    CHECK_MEM(o.out, want, wl);

    /* p2p variant: 0x8001 / 0xC001 */
    p = pol_default();
    p.ird = 1;
    p.ord = 1;
    p.p2p = true;
    p.rtr_offer = UIW_RTR_WRITE | UIW_RTR_READ;
    wl = unhex(capframes[4].hex, want, sizeof(want));
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, (int)wl);
    CHECK_MEM(o.out, want, wl);

    /* p2p-readrtr: 0x8001 / 0x4001 */
    p.rtr_offer = UIW_RTR_READ;
    wl = unhex(capframes[6].hex, want, sizeof(want));
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, (int)wl);
    CHECK_MEM(o.out, want, wl);

    /* Read RTR offered with ORD 0: we ask for ORD 1 (like siw) */
    p.ord = 0;
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, 24);
    CHECK_MEM(o.out, want, wl);

    /* rev1 variant: 20 bytes, no private data */
    p = pol_default();
    p.rev = 1;
    wl = unhex(capframes[8].hex, want, sizeof(want));
    run_initiator(&o, &p, NULL, 0, 0);
    CHECK_EQ(o.start_rc, (int)wl);
    CHECK_MEM(o.out, want, wl);

    /* Responder replies, byte for byte as siw's (rping server: 1/1). */
    struct {
        int req, rep;
    } pairs[] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}};
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        uint8_t req[64];
        size_t rl = unhex(capframes[pairs[i].req].hex, req, sizeof(req));
        wl = unhex(capframes[pairs[i].rep].hex, want, sizeof(want));
        p = pol_default();
        p.ird = 1;
        p.ord = 1;
        p.max_ird = 1;
        run_responder(&o, &p, req, rl, 0);
        CHECK_EQ(o.rc, 0);
        CHECK_EQ(o.consumed, rl);
        CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
        CHECK_EQ(o.out_len, wl);
        CHECK_MEM(o.out, want, wl);
        CHECK(o.n.result.await_rtr);
        CHECK(!o.n.result.send_rtr);
    }

    /* ib_read_bw: responder 128/128 answering 128/128 echoes it */
    {
        uint8_t req[64];
        size_t rl = unhex(capframes[10].hex, req, sizeof(req));
        wl = unhex(capframes[11].hex, want, sizeof(want));
        p = pol_default();
        p.ird = 128;
        p.ord = 128;
        run_responder(&o, &p, req, rl, 0);
        CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
        CHECK_EQ(o.out_len, wl);
        CHECK_MEM(o.out, want, wl);
        CHECK_EQ(o.n.result.ird, 128);
        CHECK_EQ(o.n.result.ord, 128);
    }
}

/* Our initiator against siw's captured Replies. */
static void test_capture_initiator(void)
{
    uint8_t rep[64];
    size_t rl;
    outcome o;
    uiw_mpa_policy p = pol_default();
    p.ird = 1;
    p.ord = 1;

    rl = unhex(capframes[1].hex, rep, sizeof(rep));
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.consumed, rl);
    CHECK(!o.n.result.crc);
    CHECK(!o.n.result.markers_rx);
    CHECK(!o.n.result.markers_tx);
    CHECK_EQ(o.n.result.rev, 2);
    CHECK(o.n.result.enhanced);
    CHECK_EQ(o.n.result.ird, 1);
    CHECK_EQ(o.n.result.ord, 1);
    CHECK_EQ(o.n.result.peer_ird, 1);
    CHECK_EQ(o.n.result.peer_ord, 1);
    CHECK(!o.n.result.p2p);
    CHECK(!o.n.result.send_rtr);
    CHECK(!o.n.result.await_rtr);
    CHECK(!o.n.term_valid);
    CHECK_EQ(o.n.error, 0);

    /* default policy (16/16) against the rping server's 1/1 reply */
    p = pol_default();
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.ird, 16); /* at least responder ORD 1: unchanged */
    CHECK_EQ(o.n.result.ord, 1);  /* at most responder IRD 1 */

    /* crc reply to a non-CRC Request (crc server echo): CRC on */
    p = pol_default();
    rl = unhex(capframes[3].hex, rep, sizeof(rep));
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(o.n.result.crc);

    /* p2p: Write chosen, we send the Write RTR first */
    p = pol_default();
    p.ird = p.ord = 1;
    p.p2p = true;
    rl = unhex(capframes[5].hex, rep, sizeof(rep));
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(o.n.result.p2p);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_WRITE);
    CHECK(o.n.result.send_rtr);
    CHECK(!o.n.result.await_rtr);

    /* p2p-readrtr reply: Read chosen */
    rl = unhex(capframes[7].hex, rep, sizeof(rep));
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_READ);
    CHECK_EQ(o.n.result.ord, 1);

    /* p2p-readrtr reply but we offered Write only: no match -> TERM 7 */
    p.rtr_offer = UIW_RTR_WRITE;
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.n.error, -EOPNOTSUPP);
    CHECK_EQ(o.consumed, rl); /* a well-formed frame: consumed, not an error return */
    CHECK_EQ(o.rc, 0);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, true);

    /* rev1 reply to our rev1 request */
    p = pol_default();
    p.rev = 1;
    rl = unhex(capframes[9].hex, rep, sizeof(rep));
    run_initiator(&o, &p, rep, rl, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rev, 1);
    CHECK(!o.n.result.enhanced);
    CHECK_EQ(o.n.result.ird, p.ird);
    CHECK_EQ(o.n.result.ord, p.ord);
    CHECK_EQ(o.n.result.peer_ird, 0);
}

/* The captured initiator stream: Request then the RTR FPDU in one buffer. */
static void test_trailing_fpdu(void)
{
    uint8_t stream[128];
    size_t rl = unhex(capframes[4].hex, stream, sizeof(stream));
    size_t fl = unhex(rtr_write_hex, stream + rl, sizeof(stream) - rl);
    CHECK_EQ(fl, 20);
    uiw_mpa_policy p = pol_default();
    p.ird = p.ord = 1;
    for (size_t piece = 0; piece <= 30; piece++) {
        outcome o;
        run_responder(&o, &p, stream, rl + fl, piece);
        CHECK_EQ(o.rc, 0);
        CHECK_EQ(o.consumed, rl);
        CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
        CHECK_EQ(o.n.have, rl);
        CHECK(o.n.result.p2p);
        CHECK_EQ(o.n.result.rtr, UIW_RTR_WRITE);
        CHECK(o.n.result.await_rtr);
        /* further bytes are never taken */
        size_t olen = 7;
        CHECK_EQ(uiw_mpa_neg_feed(&o.n, stream + rl, fl, o.out, sizeof(o.out), &olen), 0);
        CHECK_EQ(olen, 0);
    }
    /* the initiator side: Reply followed by a (pretend) FPDU */
    size_t pl = unhex(capframes[5].hex, stream, sizeof(stream));
    memcpy(stream + pl, "\x00\x12trailing-fpdu-data", 20);
    outcome o;
    p.p2p = true;
    run_initiator(&o, &p, stream, pl + 20, 0);
    CHECK_EQ(o.consumed, pl);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    /* a 5-byte piece straddling the end of the frame */
    run_initiator(&o, &p, stream, pl + 20, 5);
    CHECK_EQ(o.consumed, pl);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
}

/* ------------------------------------------------------------------------
 * Codec round trips and malformed frames
 * ---------------------------------------------------------------------- */

static void test_roundtrip(void)
{
    static const uint8_t revs[] = {0, 1, 2, 3, 255};
    static const uint16_t vals[] = {0, 1, 127, 0x3FFE, 0x3FFF};
    static const uint16_t pds[] = {0, 1, 3, 4, 5, 255, 256, 507, 508, 511, 512};
    uint8_t buf[UIW_MPA_MAX_FRAME + 8], buf2[UIW_MPA_MAX_FRAME + 8];
    unsigned n = 0, bad = 0;
    for (unsigned kind = 1; kind <= 2; kind++)
        for (size_t ri = 0; ri < sizeof(revs); ri++)
            for (unsigned fl = 0; fl < 8; fl++) /* M C R */
                for (unsigned enh = 0; enh < 2; enh++)
                    for (unsigned a = 0; a < 2; a++)
                        for (unsigned rtr = 0; rtr < 8; rtr++)
                            for (size_t vi = 0; vi < 5; vi++)
                                for (size_t pi = 0; pi < sizeof(pds) / 2; pi++) {
                                    uint8_t rev = revs[ri];
                                    if (enh && rev < 2)
                                        continue;
                                    if (!enh && (a || rtr || vi))
                                        continue;
                                    uint16_t ulp = pds[pi];
                                    if (enh && ulp > 508)
                                        continue;
                                    uiw_mpa_frame f, g;
                                    memset(&f, 0, sizeof(f));
                                    f.kind = (uint8_t)kind;
                                    f.markers = fl & 1;
                                    f.crc = fl & 2;
                                    f.reject = fl & 4;
                                    f.enhanced = enh;
                                    f.rev = rev;
                                    f.res = (uint8_t)((vi + pi) & (rev >= 2 ? 0x0F : 0x1F));
                                    f.p2p = a;
                                    f.rtr = (uint8_t)rtr;
                                    f.ird = vals[vi];
                                    f.ord = vals[4 - vi];
                                    f.ulp_pd_len = ulp;
                                    for (unsigned k = 0; k < ulp; k++)
                                        f.ulp_pd[k] = (uint8_t)(k * 7 + kind);
                                    int len = uiw_mpa_encode(&f, buf, sizeof(buf));
                                    int want = 20 + (enh ? 4 : 0) + ulp;
                                    int dl = uiw_mpa_decode(buf, (size_t)len, 0, &g);
                                    f.pd_len = (uint16_t)(want - 20);
                                    int el = uiw_mpa_encode(&g, buf2, sizeof(buf2));
                                    n++;
                                    if (len != want || dl != want || !frame_eq(&f, &g) ||
                                        el != want || memcmp(buf, buf2, (size_t)want) != 0 ||
                                        buf[16] !=
                                            (uint8_t)((f.markers ? 0x80 : 0) | (f.crc ? 0x40 : 0) |
                                                      (f.reject ? 0x20 : 0) | (enh ? 0x10 : 0) |
                                                      f.res) ||
                                        buf[17] != rev || (buf[18] << 8 | buf[19]) != want - 20)
                                        bad++;
                                }
    CHECK(n > 10000);
    CHECK_EQ(bad, 0);

    /* The RFC 6581 words bit by bit. */
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = UIW_MPA_REQUEST;
    f.rev = 2;
    f.enhanced = true;
    f.p2p = true;
    f.rtr = UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ;
    f.ird = 0x1234;
    f.ord = 0x2345;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 24);
    CHECK_EQ(buf[16], 0x10);
    CHECK_EQ(buf[20], 0xD2); /* A B 01 0010 */
    CHECK_EQ(buf[21], 0x34);
    CHECK_EQ(buf[22], 0xE3); /* C D 10 0011 */
    CHECK_EQ(buf[23], 0x45);
    f.rtr = UIW_RTR_SEND;
    f.p2p = false;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 24);
    CHECK_EQ(buf[20], 0x52);
    CHECK_EQ(buf[22], 0x23);
}

static void test_encode_errors(void)
{
    uint8_t buf[UIW_MPA_MAX_FRAME];
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = UIW_MPA_REPLY;
    f.rev = 2;
    f.enhanced = true;
    CHECK_EQ(uiw_mpa_encode(&f, buf, 24), 24);
    CHECK_EQ(uiw_mpa_encode(&f, buf, 23), -EMSGSIZE);
    f.kind = 0;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.kind = 3;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.kind = UIW_MPA_REQUEST;
    f.rev = 1; /* S needs Rev >= 2 */
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.rev = 2;
    f.ird = 0x4000;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.ird = 0;
    f.ord = 0xFFFF;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.ord = 0;
    f.rtr = 8;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.rtr = 0;
    f.res = 0x10; /* that is S, not Res, at Rev 2 */
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.res = 0x80;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EINVAL);
    f.res = 0;
    f.ulp_pd_len = 509; /* 4 + 509 > 512 */
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EMSGSIZE);
    f.ulp_pd_len = 508;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 532);
    f.enhanced = false;
    f.ulp_pd_len = 512;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 532);
    f.ulp_pd_len = 513;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), -EMSGSIZE);
    /* Rev 1: 0x10 is Res */
    f.ulp_pd_len = 0;
    f.rev = 1;
    f.res = 0x18;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 20);
    CHECK_EQ(buf[16], 0x18);
    /* pd_len is computed, whatever the field says */
    f.pd_len = 99;
    CHECK_EQ(uiw_mpa_encode(&f, buf, sizeof(buf)), 20);
    CHECK_EQ(buf[19], 0);
}

/* Every strict prefix is -EAGAIN (decoded from an exact-size heap copy so
 * that ASan catches a read past len), the whole is the frame length. */
static void check_prefixes(const uint8_t *frame, size_t len, int want)
{
    unsigned bad = 0;
    for (size_t l = 0; l <= len; l++) {
        uint8_t *copy = malloc(l ? l : 1);
        memcpy(copy, frame, l);
        uiw_mpa_frame f;
        int rc = uiw_mpa_decode(l ? copy : NULL, l, 0, &f);
        int exp = l < len ? -EAGAIN : want;
        if (rc != exp)
            bad++;
        free(copy);
    }
    CHECK_EQ(bad, 0);
}

static void test_decode_errors(void)
{
    uint8_t fr[UIW_MPA_MAX_FRAME + 16], pd[600];
    uiw_mpa_frame f;
    size_t l;
    memset(pd, 0xA5, sizeof(pd));

    /* prefixes of valid frames */
    l = raw_enh(fr, true, 0, 2, 1, 1, pd, 100);
    check_prefixes(fr, l, (int)l);
    l = raw_frame(fr, false, 0, 1, pd, 512);
    check_prefixes(fr, l, (int)l);
    l = raw_frame(fr, true, 0, 1, NULL, 0);
    check_prefixes(fr, l, 20);

    /* a bad key fails at its first wrong byte */
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"G", 1, 0, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"MPA ID Rex", 10, 0, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"MPA ID Re", 9, 0, &f), -EAGAIN);
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"MPA ID Req", 10, UIW_MPA_REPLY, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"MPA ID Req", 10, UIW_MPA_REQUEST, &f), -EAGAIN);
    CHECK_EQ(uiw_mpa_decode((const uint8_t *)"mpa", 3, 0, &f), -EPROTO); /* case matters */
    l = raw_frame(fr, true, 0, 2, NULL, 0);
    fr[15] = 'E';
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode(fr, 15, 0, &f), -EAGAIN);
    CHECK_EQ(uiw_mpa_decode(fr, 16, 0, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode(NULL, 0, 0, &f), -EAGAIN);
    CHECK_EQ(uiw_mpa_decode(fr, l, 3, &f), -EINVAL);

    /* PD_Length > 512: fails as soon as the header is there */
    l = raw_frame(fr, true, 0, 1, pd, 512);
    fr[18] = 0x02;
    fr[19] = 0x01;
    CHECK_EQ(uiw_mpa_decode(fr, 20, 0, &f), -EPROTO);
    CHECK_EQ(uiw_mpa_decode(fr, 19, 0, &f), -EAGAIN);
    fr[18] = 0xFF;
    fr[19] = 0xFF;
    CHECK_EQ(uiw_mpa_decode(fr, 20, 0, &f), -EPROTO);

    /* S with PD_Length < 4 */
    for (uint16_t n = 0; n < 4; n++) {
        l = raw_frame(fr, n & 1, UIW_MPA_FLAG_S, 2, pd, n);
        CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), -EPROTO);
        CHECK_EQ(uiw_mpa_decode(fr, 20, 0, &f), -EPROTO);
    }
    /* ... but at Rev 1 that bit is Res: accepted, reported, not enhanced */
    l = raw_frame(fr, true, UIW_MPA_FLAG_S, 1, pd, 2);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 22);
    CHECK(!f.enhanced);
    CHECK_EQ(f.res, 0x10);
    CHECK_EQ(f.ulp_pd_len, 2);

    /* Res bits accepted and reported (siw GSO_EXP 0x08), all of them */
    l = raw_enh(fr, false, 0x08 | UIW_MPA_FLAG_C, 2, 1, 1, NULL, 0);
    CHECK_EQ(uiw_mpa_decode(fr, l, UIW_MPA_REPLY, &f), 24);
    CHECK_EQ(f.res, 0x08);
    CHECK(f.crc);
    CHECK(f.enhanced);
    l = raw_enh(fr, false, 0xFF, 2, 0xFFFF, 0xFFFF, NULL, 0);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 24);
    CHECK_EQ(f.res, 0x0F);
    CHECK(f.markers && f.crc && f.reject && f.enhanced && f.p2p);
    CHECK_EQ(f.rtr, UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ);
    CHECK_EQ(f.ird, 0x3FFF);
    CHECK_EQ(f.ord, 0x3FFF);
    /* B/C/D reported even without A */
    l = raw_enh(fr, true, 0, 2, 0x4005, 0xC006, NULL, 0);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 24);
    CHECK(!f.p2p);
    CHECK_EQ(f.rtr, UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ);
    CHECK_EQ(f.ird, 5);
    CHECK_EQ(f.ord, 6);
    /* enhanced ULP private data follows the words */
    l = raw_enh(fr, true, 0, 2, 3, 4, (const uint8_t *)"hello", 5);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 29);
    CHECK_EQ(f.pd_len, 9);
    CHECK_EQ(f.ulp_pd_len, 5);
    CHECK_MEM(f.ulp_pd, "hello", 5);
    /* S and a 512-byte PD: 508 bytes of ULP data */
    l = raw_enh(fr, true, 0, 2, 3, 4, pd, 508);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 532);
    CHECK_EQ(f.ulp_pd_len, 508);
    /* decoding stops at the frame */
    l = raw_frame(fr, false, 0, 1, pd, 3);
    memset(fr + l, 0x77, 10);
    CHECK_EQ(uiw_mpa_decode(fr, l + 10, 0, &f), 23);
    /* Rev values are the negotiation's business: decoded as is */
    l = raw_enh(fr, true, 0, 7, 1, 1, NULL, 0);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 24);
    CHECK_EQ(f.rev, 7);
    CHECK(f.enhanced);
    l = raw_frame(fr, true, 0, 0, NULL, 0);
    CHECK_EQ(uiw_mpa_decode(fr, l, 0, &f), 20);
    CHECK_EQ(f.rev, 0);
}

/* ------------------------------------------------------------------------
 * Negotiation
 * ---------------------------------------------------------------------- */

/* RFC 5044 §7.1.1 C: on when either asks, never refused. */
static void test_neg_crc(void)
{
    for (unsigned ic = 0; ic < 3; ic++)
        for (unsigned rc = 0; rc < 3; rc++) {
            uiw_mpa_policy ip = pol_default(), rp = pol_default();
            ip.crc = (uint8_t)ic;
            rp.crc = (uint8_t)rc;
            convo c;
            converse(&c, &ip, &rp);
            bool req_c = ic == UIW_CRC_REQUIRED;
            bool rep_c = req_c || rc == UIW_CRC_REQUIRED;
            CHECK_EQ(c.ini.out[16] & UIW_MPA_FLAG_C, req_c ? UIW_MPA_FLAG_C : 0);
            CHECK_EQ(c.rsp.out[16] & UIW_MPA_FLAG_C, rep_c ? UIW_MPA_FLAG_C : 0);
            CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
            CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
            CHECK_EQ(c.rsp.n.result.crc, rep_c);
            CHECK_EQ(c.ini.n.result.crc, rep_c);
            CHECK(!c.rsp.n.term_valid && !c.ini.n.term_valid);
        }

    /* Each responder policy against a peer C on / off. */
    for (unsigned rc = 0; rc < 3; rc++)
        for (unsigned pc = 0; pc < 2; pc++) {
            uint8_t req[32];
            size_t l = raw_enh(req, true, pc ? UIW_MPA_FLAG_C : 0, 2, 1, 1, NULL, 0);
            uiw_mpa_policy rp = pol_default();
            rp.crc = (uint8_t)rc;
            outcome o;
            run_responder(&o, &rp, req, l, 0);
            bool on = pc || rc == UIW_CRC_REQUIRED;
            CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
            CHECK_EQ(o.n.result.crc, on);
            CHECK_EQ(!!(o.out[16] & UIW_MPA_FLAG_C), on);
        }
    /* Each initiator policy against a Reply C on / off: CRC is on if either
     * frame has C; a REQUIRED initiator is not refused by a C=0 Reply. */
    for (unsigned ic = 0; ic < 3; ic++)
        for (unsigned pc = 0; pc < 2; pc++) {
            uint8_t rep[32];
            size_t l = raw_enh(rep, false, pc ? UIW_MPA_FLAG_C : 0, 2, 16, 16, NULL, 0);
            uiw_mpa_policy ip = pol_default();
            ip.crc = (uint8_t)ic;
            outcome o;
            run_initiator(&o, &ip, rep, l, 0);
            CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
            CHECK_EQ(o.n.result.crc, pc || ic == UIW_CRC_REQUIRED);
            CHECK_EQ(o.n.error, 0);
        }
}

/* RFC 5044 §7.1.1 M: per direction; a demand we cannot meet ends it. */
static void test_neg_markers(void)
{
    for (unsigned im = 0; im < 4; im++)
        for (unsigned rm = 0; rm < 4; rm++) {
            uiw_mpa_policy ip = pol_default(), rp = pol_default();
            ip.markers = im & 1;
            ip.accept_markers = im & 2;
            rp.markers = rm & 1;
            rp.accept_markers = rm & 2;
            convo c;
            converse(&c, &ip, &rp);
            CHECK_EQ(!!(c.ini.out[16] & UIW_MPA_FLAG_M), ip.markers);
            if (ip.markers && !rp.accept_markers) {
                /* responder cannot send markers: Reject, M cleared */
                CHECK_EQ(c.rsp.n.state, UIW_MPA_S_REJECTED);
                CHECK_EQ(c.rsp.n.error, -EOPNOTSUPP);
                CHECK(!c.rsp.n.term_valid);
                CHECK_EQ(c.rsp.out[16] & (UIW_MPA_FLAG_R | UIW_MPA_FLAG_M), UIW_MPA_FLAG_R);
                CHECK_EQ(c.rsp.out_len, 24);
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_REJECTED);
                CHECK_EQ(c.ini.n.error, -ECONNREFUSED);
                CHECK(!c.ini.n.term_valid);
            } else if (rp.markers && !ip.accept_markers) {
                CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
                CHECK_EQ(!!(c.rsp.out[16] & UIW_MPA_FLAG_M), 1);
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_FAILED);
                CHECK_EQ(c.ini.n.error, -EOPNOTSUPP);
                CHECK_EQ(c.ini.rc, 0);
                CHECK_TERM(c.ini.n, UIW_MPA_EC_INVALID_REQ, false);
            } else {
                CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
                CHECK_EQ(c.ini.n.result.markers_rx, ip.markers);
                CHECK_EQ(c.ini.n.result.markers_tx, rp.markers);
                CHECK_EQ(c.rsp.n.result.markers_rx, rp.markers);
                CHECK_EQ(c.rsp.n.result.markers_tx, ip.markers);
            }
        }
}

static void test_neg_revision(void)
{
    convo c;
    outcome o;
    uint8_t fr[64];
    size_t l;
    uiw_mpa_policy ip = pol_default(), rp = pol_default();

    /* rev 1 initiator, rev 2 responder: rev 1 reply, unenhanced */
    ip.rev = 1;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.ini.out_len, 20);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.rsp.out_len, 20);
    CHECK_EQ(c.rsp.out[17], 1);
    CHECK_EQ(c.rsp.out[16], 0);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.ini.n.result.rev, 1);
    CHECK_EQ(c.rsp.n.result.rev, 1);
    CHECK(!c.ini.n.result.enhanced && !c.rsp.n.result.enhanced);
    CHECK_EQ(c.rsp.n.result.ird, rp.ird);
    CHECK_EQ(c.rsp.n.result.ord, rp.ord);

    /* rev 2 (enhanced) initiator, rev-1-only responder: close, no Reply */
    ip.rev = 2;
    rp.rev = 1;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(c.rsp.n.error, -EPROTO);
    CHECK_EQ(c.rsp.rc, -EPROTO);
    CHECK_EQ(c.rsp.out_len, 0);
    CHECK_TERM(c.rsp.n, UIW_MPA_EC_INVALID_REQ, false);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_WAIT_REP);

    /* rev 1 both */
    ip.rev = 1;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.rsp.out[17], 1);

    /* unenhanced Rev 2 Request: unenhanced Rev 2 Reply (rev-1 policy: Rev 1) */
    l = raw_frame(fr, true, 0, 2, (const uint8_t *)"ab", 2);
    rp = pol_default();
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.out[17], 2);
    CHECK_EQ(o.out[16] & UIW_MPA_FLAG_S, 0);
    CHECK_EQ(o.out_len, 20);
    CHECK_EQ(o.n.result.peer_pd_len, 2);
    CHECK(!o.n.result.enhanced);
    rp.rev = 1;
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.out[17], 1);

    /* Rev 0 (RDMAC): cannot interoperate */
    rp = pol_default();
    l = raw_frame(fr, true, UIW_MPA_FLAG_M | UIW_MPA_FLAG_C, 0, NULL, 0);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);
    CHECK_EQ(o.out_len, 0);

    /* Rev 3 enhanced Request: answered with Rev 2 */
    l = raw_enh(fr, true, 0, 3, 1, 1, NULL, 0);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.out[17], 2);
    CHECK_EQ(o.out[16], UIW_MPA_FLAG_S);
    CHECK_EQ(o.n.result.rev, 2);
    CHECK(o.n.result.enhanced);
    /* Rev 255 unenhanced to a Rev 1 policy: Rev 1 */
    rp.rev = 1;
    l = raw_frame(fr, true, 0, 255, NULL, 0);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.out[17], 1);

    /* Rev 1 Request with the 0x10 bit: Res at Rev 1, its 4 bytes are ULP data */
    rp = pol_default();
    l = raw_frame(fr, true, 0x10, 1, (const uint8_t *)"\x00\x01\x00\x01", 4);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(!o.n.result.enhanced);
    CHECK_EQ(o.n.result.peer_pd_len, 4);
    CHECK_EQ(o.out_len, 20);
    CHECK_EQ(o.out[16], 0); /* Res is never echoed */

    /* Reply revisions at the initiator */
    ip = pol_default();
    for (unsigned rev = 0; rev < 5; rev++) {
        l = raw_enh(fr, false, 0, (uint8_t)rev, 16, 16, NULL, 0);
        run_initiator(&o, &ip, fr, l, 0);
        if (rev == 1 || rev == 2) {
            CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
            CHECK_EQ(o.n.result.rev, rev);
            /* at Rev 1 the S bit is Res: not enhanced, words are ULP data */
            CHECK_EQ(o.n.result.enhanced, rev == 2);
        } else {
            CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
            CHECK_EQ(o.rc, -EPROTO);
            CHECK_EQ(o.n.error, -EPROTO);
            CHECK_TERM(o.n, UIW_MPA_EC_INVALID_REQ, false);
        }
    }
    /* our Rev 1 Request, Rev 2 unenhanced Reply: Rev 1 in use */
    ip.rev = 1;
    l = raw_frame(fr, false, 0, 2, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rev, 1);
    /* our Rev 2 Request, Reply without S (lenient): IRD/ORD left to the ULP */
    ip = pol_default();
    ip.ird = 3;
    ip.ord = 5;
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(!o.n.result.enhanced);
    CHECK_EQ(o.n.result.ird, 3);
    CHECK_EQ(o.n.result.ord, 5);
    /* Reply with S to our Rev 1 Request: reported, not applied */
    ip.rev = 1;
    l = raw_enh(fr, false, 0, 2, 1, 1, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(!o.n.result.enhanced);
    CHECK_EQ(o.n.result.ird, 3);
    CHECK_EQ(o.n.result.ord, 5);
    CHECK_EQ(o.n.result.peer_ird, 1);
}

/* RFC 6581 §9.2: every offered set against every supported set. */
static void test_neg_rtr(void)
{
    static const uint8_t order[3] = {UIW_RTR_WRITE, UIW_RTR_READ, UIW_RTR_SEND};
    for (uint8_t offer = 1; offer < 8; offer++)
        for (uint8_t supp = 0; supp < 8; supp++) {
            uiw_mpa_policy ip = pol_default(), rp = pol_default();
            ip.p2p = true;
            ip.rtr_offer = offer;
            rp.rtr_offer = supp;
            convo c;
            converse(&c, &ip, &rp);
            CHECK(c.ini.start_rc == 24);
            CHECK_EQ(c.ini.out[20] & 0xC0, 0x80 | ((offer & UIW_RTR_SEND) ? 0x40 : 0));
            CHECK_EQ(c.ini.out[22] & 0xC0,
                     ((offer & UIW_RTR_WRITE) ? 0x80 : 0) | ((offer & UIW_RTR_READ) ? 0x40 : 0));
            uint8_t match = offer & supp, pick = 0;
            for (int k = 0; k < 3 && !pick; k++)
                if (match & order[k])
                    pick = order[k];
            for (int k = 0; k < 3 && !pick; k++)
                if (supp & order[k])
                    pick = order[k];
            if (!supp) {
                CHECK_EQ(c.rsp.n.state, UIW_MPA_S_REJECTED);
                CHECK_EQ(c.rsp.n.error, -EOPNOTSUPP);
                CHECK_TERM(c.rsp.n, UIW_MPA_EC_NO_MATCHING_RTR, false);
                CHECK(c.rsp.out[16] & UIW_MPA_FLAG_R);
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_REJECTED);
                CHECK_EQ(c.ini.n.error, -ECONNREFUSED);
                continue;
            }
            CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
            CHECK(c.rsp.n.result.p2p);
            CHECK_EQ(c.rsp.n.result.rtr, pick);
            CHECK(c.rsp.n.result.await_rtr);
            /* the Reply names exactly the chosen type, A mirrored */
            CHECK_EQ(c.rsp.out[20] & 0xC0, 0x80 | (pick == UIW_RTR_SEND ? 0x40 : 0));
            CHECK_EQ(c.rsp.out[22] & 0xC0,
                     (pick == UIW_RTR_WRITE ? 0x80 : 0) | (pick == UIW_RTR_READ ? 0x40 : 0));
            if (match) {
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
                CHECK_EQ(c.ini.n.result.rtr, pick);
                CHECK(c.ini.n.result.send_rtr);
                CHECK(c.ini.n.result.p2p);
                CHECK(!c.ini.n.term_valid);
            } else {
                CHECK_EQ(c.ini.n.state, UIW_MPA_S_FAILED);
                CHECK_EQ(c.ini.n.error, -EOPNOTSUPP);
                CHECK_TERM(c.ini.n, UIW_MPA_EC_NO_MATCHING_RTR, true);
            }
        }

    outcome o;
    uint8_t fr[64];
    size_t l;
    uiw_mpa_policy ip = pol_default(), rp = pol_default();

    /* A=1 with no type offered: the responder names one it supports */
    l = raw_enh(fr, true, 0, 2, 0x8001, 0x0001, NULL, 0);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_WRITE);
    /* B/C/D without A are ignored (RFC 6581 §9.2) */
    l = raw_enh(fr, true, 0, 2, 0x4001, 0xC001, NULL, 0);
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK(!o.n.result.p2p);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_NONE);
    CHECK_EQ(o.out[20] & 0xC0, 0);
    CHECK_EQ(o.out[22] & 0xC0, 0);

    /* Read RTR and IRD: initiator ORD 0 + Read only; a responder that can
     * raise its IRD to 1 does (RFC 6581 §9.1), one that cannot rejects */
    l = raw_enh(fr, true, 0, 2, 0x8004, 0x4000, NULL, 0);
    rp = pol_default();
    rp.ird = 0;
    rp.max_ird = 4;
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_READ);
    CHECK_EQ(o.n.result.ird, 1);
    CHECK_EQ(o.out[20] << 8 | o.out[21], 0x8001);
    rp.max_ird = 0;
    rp.rtr_offer = UIW_RTR_READ;
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_REJECTED);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, false);
    /* ... with Write also supported, Write is named instead */
    rp.rtr_offer = UIW_RTR_READ | UIW_RTR_WRITE;
    run_responder(&o, &rp, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_WRITE);

    /* initiator: Read named but responder IRD 0 (our ORD would be 0) */
    ip = pol_default();
    ip.p2p = true;
    ip.rtr_offer = UIW_RTR_READ;
    l = raw_enh(fr, false, 0, 2, 0x8000, 0x4001, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, true);
    CHECK_EQ(o.n.result.ord, 0);

    /* A not mirrored: TERM 7 both ways */
    ip = pol_default();
    ip.p2p = true;
    l = raw_enh(fr, false, 0, 2, 0x0010, 0x8010, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, true);
    CHECK(o.n.result.enhanced); /* the Terminate is framed with the result */
    ip.p2p = false;
    l = raw_enh(fr, false, 0, 2, 0x8010, 0x8010, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, true);
    /* p2p Request, unenhanced Reply */
    ip.p2p = true;
    l = raw_frame(fr, false, 0, 2, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_TERM(o.n, UIW_MPA_EC_NO_MATCHING_RTR, true);
    /* several types named: we pick ours in order Write, Read, Send */
    ip.rtr_offer = UIW_RTR_SEND | UIW_RTR_READ;
    l = raw_enh(fr, false, 0, 2, 0xC010, 0xC010, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_READ);
    ip.rtr_offer = UIW_RTR_SEND;
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.rtr, UIW_RTR_SEND);
}

/* RFC 6581 §9.1 arithmetic. */
static void test_neg_ird_ord(void)
{
    struct {
        uint16_t i_ird, i_ord, i_max;            /* initiator policy */
        uint16_t r_ird, r_ord, r_max, r_min;     /* responder policy */
        uint16_t rep_ird, rep_ord;               /* Reply fields */
        uint16_t ri_ird, ri_ord, rr_ird, rr_ord; /* results: initiator, responder */
    } t[] = {
        /* responder raises IRD to the initiator ORD, clamps ORD to its IRD */
        {4, 8, 0, 2, 16, 32, 0, 8, 4, 4, 8, 8, 4},
        /* ... within max_ird: initiator ORD follows the responder IRD */
        {4, 8, 0, 2, 16, 6, 0, 6, 4, 4, 6, 6, 4},
        /* max_ird below ird: no raising at all */
        {4, 8, 0, 2, 16, 0, 0, 2, 4, 4, 2, 2, 4},
        /* responder already deeper than asked */
        {1, 1, 0, 64, 64, 128, 0, 64, 1, 1, 1, 64, 1},
        /* zeroes */
        {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        /* initiator IRD 0x3FFF: responder ORD unchanged, 0x3FFF back;
         * initiator IRD unchanged */
        {0x3FFF, 8, 0, 2, 16, 32, 0, 8, 0x3FFF, 0x3FFF, 8, 8, 16},
        /* initiator ORD 0x3FFF: responder IRD unchanged, 0x3FFF back;
         * initiator ORD unchanged */
        {4, 0x3FFF, 0, 2, 16, 32, 0, 0x3FFF, 4, 4, 0x3FFF, 2, 4},
        /* both */
        {0x3FFF, 0x3FFF, 0, 2, 16, 32, 0, 0x3FFF, 0x3FFF, 0x3FFF, 0x3FFF, 2, 16},
        /* responder policy 0x3FFF: it opts out, 0x3FFF sent */
        {4, 8, 0, 0x3FFF, 0x3FFF, 0, 0, 0x3FFF, 0x3FFF, 4, 8, 0x3FFF, 0x3FFF},
        /* min_ord met exactly */
        {4, 8, 0, 2, 16, 32, 4, 8, 4, 4, 8, 8, 4},
        /* 14-bit extremes */
        {0x3FFE, 0x3FFE, 0, 1, 0x3FFE, 0x3FFF, 0, 0x3FFE, 0x3FFE, 0x3FFE, 0x3FFE, 0x3FFE, 0x3FFE},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uiw_mpa_policy ip = pol_default(), rp = pol_default();
        ip.ird = t[i].i_ird;
        ip.ord = t[i].i_ord;
        ip.max_ird = t[i].i_max;
        rp.ird = t[i].r_ird;
        rp.ord = t[i].r_ord;
        rp.max_ird = t[i].r_max;
        rp.min_ord = t[i].r_min;
        convo c;
        converse(&c, &ip, &rp);
        CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
        CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
        CHECK_EQ(c.rsp.out[20] << 8 | c.rsp.out[21], t[i].rep_ird);
        CHECK_EQ(c.rsp.out[22] << 8 | c.rsp.out[23], t[i].rep_ord);
        CHECK_EQ(c.ini.n.result.ird, t[i].ri_ird);
        CHECK_EQ(c.ini.n.result.ord, t[i].ri_ord);
        CHECK_EQ(c.rsp.n.result.ird, t[i].rr_ird);
        CHECK_EQ(c.rsp.n.result.ord, t[i].rr_ord);
        /* the peer's raw values are passed up */
        CHECK_EQ(c.rsp.n.result.peer_ird, t[i].i_ird);
        CHECK_EQ(c.rsp.n.result.peer_ord, t[i].i_ord);
        CHECK_EQ(c.ini.n.result.peer_ird, t[i].rep_ird);
        CHECK_EQ(c.ini.n.result.peer_ord, t[i].rep_ord);
        /* RFC 6581 §9.1 invariants where both values are real depths */
        if (t[i].rep_ird != 0x3FFF && t[i].i_ord != 0x3FFF)
            CHECK(c.ini.n.result.ord <= c.rsp.n.result.ird);
        if (t[i].rep_ord != 0x3FFF && t[i].i_ird != 0x3FFF)
            CHECK(c.rsp.n.result.ord <= c.ini.n.result.ird);
    }

    /* responder requires ORD 8, initiator IRD 4: Reject with 8 in its ORD */
    uiw_mpa_policy ip = pol_default(), rp = pol_default();
    ip.ird = 4;
    ip.ord = 2;
    rp.ird = 2;
    rp.ord = 16;
    rp.min_ord = 8;
    convo c;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(c.rsp.n.error, -ENOBUFS);
    CHECK_TERM(c.rsp.n, UIW_MPA_EC_INSUFFICIENT_IRD, false);
    CHECK_EQ(c.rsp.out_len, 24);
    CHECK_EQ(c.rsp.out[16], UIW_MPA_FLAG_R | UIW_MPA_FLAG_S);
    CHECK_EQ(c.rsp.out[22] << 8 | c.rsp.out[23], 8);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(c.ini.n.error, -ECONNREFUSED);
    CHECK_EQ(c.ini.n.result.peer_ord, 8); /* the ULP learns what is needed */
    CHECK_EQ(c.ini.n.result.peer_ird, 2);
    /* min_ord does not apply when the initiator leaves IRD to the ULP */
    ip.ird = 0x3FFF;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.rsp.n.result.ord, 16);

    /* initiator: responder ORD above what we can raise our IRD to */
    outcome o;
    uint8_t fr[64];
    size_t l;
    ip = pol_default(); /* ird 16, max 128 */
    l = raw_enh(fr, false, 0, 2, 16, 128, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.ird, 128);
    l = raw_enh(fr, false, 0, 2, 16, 129, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.n.error, -ENOBUFS);
    CHECK_EQ(o.rc, 0);
    CHECK_EQ(o.consumed, l);
    CHECK_TERM(o.n, UIW_MPA_EC_INSUFFICIENT_IRD, true);
    CHECK_EQ(o.n.result.peer_ord, 129);
    ip.max_ird = 0; /* cannot raise at all */
    l = raw_enh(fr, false, 0, 2, 16, 17, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_TERM(o.n, UIW_MPA_EC_INSUFFICIENT_IRD, true);
    l = raw_enh(fr, false, 0, 2, 16, 16, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    /* responder ORD 0x3FFF: our IRD unchanged, never insufficient */
    l = raw_enh(fr, false, 0, 2, 0x3FFF, 0x3FFF, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.ird, 16);
    CHECK_EQ(o.n.result.ord, 16);
    /* the flag bits are not part of the depth */
    l = raw_enh(fr, false, 0, 2, 0x4000 | 3, 0xC000 | 2, NULL, 0);
    run_initiator(&o, &ip, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.result.ord, 3);
    CHECK_EQ(o.n.result.peer_ord, 2);
}

static void test_neg_private_data(void)
{
    static const uint8_t ipd[] = "client hello";
    static const uint8_t rpd[] = "server says hi";
    static const uint8_t nope[] = "go away";
    uiw_mpa_policy ip = pol_default(), rp = pol_default();
    ip.ulp_pd = ipd;
    ip.ulp_pd_len = sizeof(ipd);
    rp.ulp_pd = rpd;
    rp.ulp_pd_len = sizeof(rpd);
    convo c;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.ini.start_rc, 24 + (int)sizeof(ipd));
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.rsp.n.result.peer_pd_len, sizeof(ipd));
    CHECK_MEM(c.rsp.n.result.peer_pd, ipd, sizeof(ipd));
    CHECK_EQ(c.ini.n.result.peer_pd_len, sizeof(rpd));
    CHECK_MEM(c.ini.n.result.peer_pd, rpd, sizeof(rpd));

    /* ULP reject with private data (RFC 5044 §7.1.2 rule 2) */
    rp.ulp_pd = nope;
    rp.ulp_pd_len = sizeof(nope);
    rp.responder_rejects = true;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(c.rsp.n.error, -ECONNREFUSED);
    CHECK(!c.rsp.n.term_valid);
    CHECK_EQ(c.rsp.out_len, 24 + sizeof(nope));
    CHECK_EQ(c.rsp.out[16], UIW_MPA_FLAG_R | UIW_MPA_FLAG_S);
    CHECK_MEM(c.rsp.out + 24, nope, sizeof(nope));
    CHECK_EQ(c.rsp.n.result.peer_pd_len, sizeof(ipd)); /* the ULP saw it */
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(c.ini.n.error, -ECONNREFUSED);
    CHECK(!c.ini.n.term_valid);
    CHECK_EQ(c.ini.n.result.peer_pd_len, sizeof(nope));
    CHECK_MEM(c.ini.n.result.peer_pd, nope, sizeof(nope));
    CHECK_EQ(c.ini.n.result.peer_ird, 16);
    CHECK_EQ(c.ini.n.result.peer_ord, 16);
    CHECK_EQ(c.ini.consumed, c.rsp.out_len);
    /* Rev 1 reject: no words */
    ip.rev = 1;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.out_len, 20 + sizeof(nope));
    CHECK_EQ(c.rsp.out[16], UIW_MPA_FLAG_R);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_REJECTED);
    CHECK_MEM(c.ini.n.result.peer_pd, nope, sizeof(nope));
    /* MPA-level rejects take precedence over the ULP's and carry no ULP data */
    ip = pol_default();
    ip.markers = true;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(c.rsp.n.error, -EOPNOTSUPP);
    CHECK_EQ(c.rsp.out_len, 24);

    /* 508 bytes of ULP data fit a Rev 2 frame, 509 do not */
    static uint8_t big[512];
    memset(big, 'x', sizeof(big));
    ip = pol_default();
    ip.ulp_pd = big;
    ip.ulp_pd_len = 508;
    rp = pol_default();
    rp.ulp_pd = big;
    rp.ulp_pd_len = 508;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.ini.start_rc, 532);
    CHECK_EQ(c.ini.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.ini.n.result.peer_pd_len, 508);
    ip.ulp_pd_len = 509;
    outcome o;
    run_initiator(&o, &ip, NULL, 0, 0);
    CHECK_EQ(o.start_rc, -EMSGSIZE);
    ip.rev = 1;
    ip.ulp_pd_len = 512;
    run_initiator(&o, &ip, NULL, 0, 0);
    CHECK_EQ(o.start_rc, 532);
    /* responder with 509 bytes: fine for a Rev 1 Reply, too big for Rev 2 */
    rp.ulp_pd_len = 509;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(c.rsp.out_len, 529);
    ip.rev = 2;
    ip.ulp_pd_len = 0;
    converse(&c, &ip, &rp);
    CHECK_EQ(c.rsp.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(c.rsp.rc, -EMSGSIZE);
    CHECK_EQ(c.rsp.out_len, 0);
}

static void test_neg_keys_and_malformed(void)
{
    outcome o;
    uint8_t fr[UIW_MPA_MAX_FRAME + 8];
    size_t l;
    uiw_mpa_policy p = pol_default();

    /* initiator receives a Request (Initiator/Initiator, RFC 5044 §7.1.2 rule 8) */
    l = raw_enh(fr, true, 0, 2, 1, 1, NULL, 0);
    run_initiator(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);
    CHECK_TERM(o.n, UIW_MPA_EC_INVALID_REQ, false);
    CHECK(strstr(o.n.why, "Request key") != NULL);
    /* ... noticed at byte 10, before the rest arrives */
    run_initiator(&o, &p, fr, 10, 1);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    /* responder receives a Reply */
    l = raw_enh(fr, false, 0, 2, 1, 1, NULL, 0);
    run_responder(&o, &p, fr, l, 1);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);
    CHECK_EQ(o.out_len, 0);
    CHECK_TERM(o.n, UIW_MPA_EC_INVALID_REQ, false);
    /* not MPA at all: fails on the first byte */
    run_responder(&o, &p, (const uint8_t *)"GET / HTTP/1.1\r\n\r\n", 18, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);
    CHECK(strstr(o.n.why, "malformed") != NULL);
    run_initiator(&o, &p, (const uint8_t *)"\x00\x0e\xc1\x40", 4, 1);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.n.error, -EPROTO);
    /* PD_Length 513 */
    l = raw_frame(fr, false, 0, 1, NULL, 0);
    fr[18] = 2;
    fr[19] = 1;
    run_initiator(&o, &p, fr, 20, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_TERM(o.n, UIW_MPA_EC_INVALID_REQ, false);
    /* S with PD_Length 2 in a Request */
    l = raw_frame(fr, true, UIW_MPA_FLAG_S, 2, (const uint8_t *)"xx", 2);
    run_responder(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);

    /* R in a Request is not checked (RFC 5044 §7.1.1) */
    l = raw_enh(fr, true, UIW_MPA_FLAG_R, 2, 1, 1, NULL, 0);
    run_responder(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.out[16], UIW_MPA_FLAG_S);
    /* Res bits in a Request are accepted and never echoed (siw GSO_EXP) */
    l = raw_enh(fr, true, 0x08, 2, 1, 1, NULL, 0);
    run_responder(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);
    CHECK_EQ(o.n.peer.res, 0x08);
    CHECK_EQ(o.out[16], UIW_MPA_FLAG_S);
    l = raw_enh(fr, false, 0x0F, 2, 16, 16, NULL, 0);
    run_initiator(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_DONE);

    /* siw's Reject of an enhanced Request: R|S, PD_Length 0 (deviation from
     * RFC 6581 §6, accepted as a Reject) */
    l = raw_frame(fr, false, UIW_MPA_FLAG_R | UIW_MPA_FLAG_S, 2, NULL, 0);
    for (size_t piece = 0; piece < 3; piece++) {
        run_initiator(&o, &p, fr, l, piece);
        CHECK_EQ(o.n.state, UIW_MPA_S_REJECTED);
        CHECK_EQ(o.n.error, -ECONNREFUSED);
        CHECK_EQ(o.consumed, 20);
        CHECK_EQ(o.n.result.peer_pd_len, 0);
    }
    l = raw_frame(fr, false, UIW_MPA_FLAG_R | UIW_MPA_FLAG_S | UIW_MPA_FLAG_C, 2,
                  (const uint8_t *)"abc", 3);
    memcpy(fr + l, "tail", 4);
    run_initiator(&o, &p, fr, l + 4, 1);
    CHECK_EQ(o.n.state, UIW_MPA_S_REJECTED);
    CHECK_EQ(o.consumed, 23);
    CHECK_EQ(o.n.result.peer_pd_len, 3);
    /* ... but S with PD_Length < 4 and no R stays malformed */
    l = raw_frame(fr, false, UIW_MPA_FLAG_S, 2, NULL, 0);
    run_initiator(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(o.rc, -EPROTO);
    /* ... and a Request of that shape is malformed for the responder */
    l = raw_frame(fr, true, UIW_MPA_FLAG_R | UIW_MPA_FLAG_S, 2, NULL, 0);
    run_responder(&o, &p, fr, l, 0);
    CHECK_EQ(o.n.state, UIW_MPA_S_FAILED);
}

static void test_neg_api(void)
{
    uiw_mpa_neg n;
    uint8_t buf[UIW_MPA_MAX_FRAME];
    size_t olen = 99;
    uiw_mpa_policy p = pol_default();

    memset(&n, 0, sizeof(n));
    CHECK_EQ(uiw_mpa_neg_feed(&n, buf, 1, buf, sizeof(buf), &olen), -EINVAL); /* IDLE */
    CHECK_EQ(olen, 0);
    CHECK_EQ(uiw_mpa_neg_feed(NULL, buf, 1, buf, sizeof(buf), &olen), -EINVAL);

    /* policy validation */
    p.rev = 3;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p.rev = 0;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p = pol_default();
    p.crc = 3;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p = pol_default();
    p.ird = 0x4000;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p = pol_default();
    p.p2p = true;
    p.rev = 1;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p.rev = 2;
    p.rtr_offer = 0;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p.rtr_offer = 0x08;
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p = pol_default();
    p.ulp_pd_len = 4; /* NULL data */
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    p = pol_default();
    p.min_ord = 17; /* above ord */
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, sizeof(buf)), -EINVAL);
    uiw_mpa_neg_start_responder(&n, &p);
    CHECK_EQ(n.state, UIW_MPA_S_FAILED);
    CHECK_EQ(n.error, -EINVAL);
    CHECK_EQ(uiw_mpa_neg_feed(&n, buf, 1, buf, sizeof(buf), &olen), 0);
    p = pol_default();
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, 23), -EMSGSIZE);
    CHECK_EQ(uiw_mpa_neg_start_initiator(&n, &p, buf, 24), 24);
    CHECK_EQ(n.state, UIW_MPA_S_WAIT_REP);
    CHECK(n.initiator);
    /* the initiator needs no output buffer */
    uint8_t rep[32];
    size_t rl = raw_enh(rep, false, 0, 2, 16, 16, NULL, 0);
    CHECK_EQ(uiw_mpa_neg_feed(&n, rep, rl, NULL, 0, NULL), (int)rl);
    CHECK_EQ(n.state, UIW_MPA_S_DONE);
    CHECK_EQ(uiw_mpa_neg_feed(&n, rep, rl, NULL, 0, NULL), 0);

    /* responder: output too small -> -EMSGSIZE, nothing consumed */
    uint8_t req[32];
    size_t ql = raw_enh(req, true, 0, 2, 1, 1, NULL, 0);
    uiw_mpa_neg_start_responder(&n, &p);
    CHECK_EQ(n.state, UIW_MPA_S_WAIT_REQ);
    CHECK(!n.initiator);
    CHECK_EQ(uiw_mpa_neg_feed(&n, req, ql, buf, 23, &olen), -EMSGSIZE);
    CHECK_EQ(uiw_mpa_neg_feed(&n, req, ql, NULL, 100, &olen), -EMSGSIZE);
    CHECK_EQ(n.state, UIW_MPA_S_WAIT_REQ);
    CHECK_EQ(n.have, 0);
    CHECK_EQ(uiw_mpa_neg_feed(&n, req, 0, buf, 24, &olen), 0);
    CHECK_EQ(uiw_mpa_neg_feed(&n, req, 10, buf, 24, &olen), 10);
    CHECK_EQ(olen, 0);
    CHECK_EQ(n.state, UIW_MPA_S_WAIT_REQ);
    CHECK_EQ(uiw_mpa_neg_feed(&n, req + 10, ql - 10, buf, 24, &olen), (int)ql - 10);
    CHECK_EQ(olen, 24);
    CHECK_EQ(n.state, UIW_MPA_S_DONE);

    /* defaults */
    uiw_mpa_policy d;
    memset(&d, 0xFF, sizeof(d));
    uiw_mpa_policy_default(&d);
    CHECK_EQ(d.rev, 2);
    CHECK_EQ(d.crc, UIW_CRC_OPTIONAL);
    CHECK(!d.markers && !d.accept_markers && !d.p2p && !d.responder_rejects);
    CHECK_EQ(d.rtr_offer, UIW_RTR_WRITE | UIW_RTR_READ);
    CHECK_EQ(d.min_ord, 0);
    CHECK(d.ulp_pd == NULL && d.ulp_pd_len == 0);
}

/* Whole == 1-byte pieces == every other piece size, for many scenarios. */
static void same_outcome(const outcome *a, const outcome *b, unsigned *bad)
{
    /* (on a negative return the bytes consumed by earlier pieces differ) */
    if (a->rc != b->rc || (a->rc == 0 && a->consumed != b->consumed) || a->n.state != b->n.state ||
        a->n.error != b->n.error || a->n.term_valid != b->n.term_valid ||
        a->n.term_send != b->n.term_send || a->n.term.ecode != b->n.term.ecode ||
        a->out_len != b->out_len || memcmp(a->out, b->out, a->out_len) != 0 ||
        !result_eq(&a->n.result, &b->n.result))
        (*bad)++;
}

static void test_pieces(void)
{
    static uint8_t frames[20][UIW_MPA_MAX_FRAME + 32];
    size_t lens[20];
    unsigned nf = 0;
    static uint8_t pd[600];
    for (unsigned i = 0; i < sizeof(pd); i++)
        pd[i] = (uint8_t)(i * 31);
    for (size_t i = 0; i < NCAP; i++, nf++)
        lens[nf] = unhex(capframes[i].hex, frames[nf], sizeof(frames[0]));
    lens[nf] = raw_enh(frames[nf], true, UIW_MPA_FLAG_M, 2, 3, 4, pd, 300), nf++;
    lens[nf] = raw_frame(frames[nf], true, 0, 1, pd, 512), nf++;
    lens[nf] = raw_frame(frames[nf], false, UIW_MPA_FLAG_R | UIW_MPA_FLAG_S, 2, pd, 2), nf++;
    lens[nf] = raw_enh(frames[nf], false, UIW_MPA_FLAG_R, 2, 5, 7, pd, 508), nf++;
    /* trailing bytes after every frame: the start of the FPDU stream */
    for (unsigned i = 0; i < nf; i++) {
        memset(frames[i] + lens[i], 0xEE, 16);
        lens[i] += 16;
    }
    uiw_mpa_policy pols[4];
    pols[0] = pol_default();
    pols[1] = pol_default();
    pols[1].crc = UIW_CRC_REQUIRED;
    pols[1].p2p = true;
    pols[1].ulp_pd = pd;
    pols[1].ulp_pd_len = 100;
    pols[2] = pol_default();
    pols[2].rev = 1;
    pols[2].accept_markers = true;
    pols[3] = pol_default();
    pols[3].responder_rejects = true;
    pols[3].min_ord = 2;
    static const size_t sizes[] = {1, 2, 3, 7, 19, 20, 21, 23, 24, 25, 64, 531, 532, 533};
    unsigned bad = 0, runs = 0, trail_bad = 0;
    for (unsigned i = 0; i < nf; i++)
        for (unsigned pi = 0; pi < 4; pi++)
            for (int role = 0; role < 2; role++) {
                static outcome whole, part;
                if (role)
                    run_initiator(&whole, &pols[pi], frames[i], lens[i], 0);
                else
                    run_responder(&whole, &pols[pi], frames[i], lens[i], 0);
                for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                    if (role)
                        run_initiator(&part, &pols[pi], frames[i], lens[i], sizes[s]);
                    else
                        run_responder(&part, &pols[pi], frames[i], lens[i], sizes[s]);
                    same_outcome(&whole, &part, &bad);
                    runs++;
                }
                /* a complete frame is consumed exactly, the 16 bytes are not */
                if (whole.rc == 0 && whole.consumed + 16 != lens[i])
                    trail_bad++;
            }
    CHECK(runs > 1000);
    CHECK_EQ(bad, 0);
    CHECK_EQ(trail_bad, 0);
}

/* Every policy pair end to end: the two sides agree on what they use. */
static void test_matrix(void)
{
    unsigned combos = 0, bad = 0, done = 0;
    for (unsigned a = 0; a < 2 * 3 * 4 * 2 * 3; a++)
        for (unsigned b = 0; b < 2 * 3 * 4 * 4; b++) {
            uiw_mpa_policy ip = pol_default(), rp = pol_default();
            unsigned x = a;
            ip.rev = (uint8_t)(1 + x % 2), x /= 2;
            ip.crc = (uint8_t)(x % 3), x /= 3;
            ip.markers = x & 1, ip.accept_markers = x & 2, x /= 4;
            ip.p2p = ip.rev == 2 && (x % 2), x /= 2;
            ip.rtr_offer = (uint8_t)(1 + x % 3 * 3); /* 1, 4, 7 */
            ip.ird = (uint16_t)(a % 5);
            ip.ord = (uint16_t)(a % 7);
            x = b;
            rp.rev = (uint8_t)(1 + x % 2), x /= 2;
            rp.crc = (uint8_t)(x % 3), x /= 3;
            rp.markers = x & 1, rp.accept_markers = x & 2, x /= 4;
            rp.rtr_offer = (uint8_t)(x % 4 * 2); /* 0, 2, 4, 6 */
            rp.ird = (uint16_t)(b % 3);
            rp.max_ird = (uint16_t)(b % 11);
            rp.ord = (uint16_t)(b % 4);
            convo c;
            converse(&c, &ip, &rp);
            combos++;
            if (c.ini.start_rc <= 0) {
                bad++;
                continue;
            }
            /* consistency whatever the outcome */
            if (c.rsp.n.state == UIW_MPA_S_DONE || c.rsp.n.state == UIW_MPA_S_REJECTED) {
                if (c.rsp.out_len < 20 || c.ini.consumed != c.rsp.out_len)
                    bad++;
                if ((c.rsp.n.state == UIW_MPA_S_REJECTED) != (c.ini.n.state == UIW_MPA_S_REJECTED))
                    bad++;
            } else if (c.rsp.n.state != UIW_MPA_S_FAILED || c.rsp.out_len != 0) {
                bad++;
            }
            if (c.rsp.n.state == UIW_MPA_S_DONE && c.ini.n.state == UIW_MPA_S_DONE) {
                const uiw_mpa_result *i = &c.ini.n.result, *r = &c.rsp.n.result;
                done++;
                if (i->crc != r->crc || i->markers_rx != r->markers_tx ||
                    i->markers_tx != r->markers_rx || i->rev != r->rev ||
                    i->enhanced != r->enhanced || i->p2p != r->p2p || i->rtr != r->rtr ||
                    !i->send_rtr != !i->p2p || !r->await_rtr || r->send_rtr || i->await_rtr)
                    bad++;
                if (i->enhanced && (i->ord > r->ird || r->ord > i->ird))
                    bad++;
                if (i->crc != (ip.crc == UIW_CRC_REQUIRED || rp.crc == UIW_CRC_REQUIRED))
                    bad++;
                if (i->p2p && (!(i->rtr & ip.rtr_offer) || !(r->rtr & rp.rtr_offer)))
                    bad++;
            }
            if (c.ini.n.state == UIW_MPA_S_FAILED && c.ini.n.term_send &&
                (!c.ini.n.term_valid || c.ini.n.term.ecode < 6))
                bad++;
        }
    CHECK(combos > 10000);
    CHECK(done > 1000);
    CHECK_EQ(bad, 0);
}

int main(void)
{
    test_capture_frames();
    test_capture_bytes_exact();
    test_capture_initiator();
    test_trailing_fpdu();
    test_roundtrip();
    test_encode_errors();
    test_decode_errors();
    test_neg_crc();
    test_neg_markers();
    test_neg_revision();
    test_neg_rtr();
    test_neg_ird_ord();
    test_neg_private_data();
    test_neg_keys_and_malformed();
    test_neg_api();
    test_pieces();
    test_matrix();
    TEST_MAIN_END();
}
