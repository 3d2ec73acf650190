/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The module's load-time self-test of the wire core (src/wire): CRC32C
 * through the kernel's crc32c library, MPA frames and a whole negotiation,
 * DDP/RDMAP header round trips, the receive parser on valid FPDUs (built by
 * the transmit segmenter, with CRC and markers, fed whole and byte by byte)
 * and on malformed ones (the Terminate cause each must give). It checks
 * that the core behaves in the kernel as in userspace, where tests/ checks
 * it in depth; it is not a second copy of those tests.
 *
 * Built into the module (kernel/) and, unchanged, as the userspace test
 * test_kmod_selftest (uiw_kmod.h).
 */
#include "uiw_port.h"
#include "uiw_kmod.h"
#include "uiwarp/wire.h"

struct st {
    struct uiw_selftest_result *res;
};

#define CHECK(st, cond)                                                                            \
    do {                                                                                           \
        if (cond) {                                                                                \
            (st)->res->passed++;                                                                   \
        } else {                                                                                   \
            (st)->res->failed++;                                                                   \
            uiw_st_err("uiwarp: self-test: %s:%d: %s\n", __func__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------
 * CRC32C: RFC 3720 Appendix B.4 (also RFC 7143 A.4), the CRC bytes in wire
 * order, which RFC 5044 §4.4 uses unchanged.
 * ---------------------------------------------------------------------- */

static const uint8_t b4_scsi_read[48] = {
    0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

static void crc_vector(struct st *st, const uint8_t *buf, size_t len, const uint8_t wire[4])
{
    uint8_t out[4];
    uint32_t crc = uiw_crc32c(buf, len);
    size_t cut;

    uiw_crc32c_put(out, crc);
    CHECK(st, memcmp(out, wire, 4) == 0);
    CHECK(st, uiw_crc32c_get(wire) == crc);
    /* incremental: any split gives the same value */
    for (cut = 0; cut <= len; cut += 7) {
        uint32_t s = uiw_crc32c_update(UIW_CRC32C_INIT, buf, cut);

        s = uiw_crc32c_update(s, buf + cut, len - cut);
        CHECK(st, uiw_crc32c_final(s) == crc);
    }
}

static void test_crc(struct st *st)
{
    static const uint8_t zeros_crc[4] = {0xaa, 0x36, 0x91, 0x8a};
    static const uint8_t ones_crc[4] = {0x43, 0xab, 0xa8, 0x62};
    static const uint8_t inc_crc[4] = {0x4e, 0x79, 0xdd, 0x46};
    static const uint8_t dec_crc[4] = {0x5c, 0xdb, 0x3f, 0x11};
    static const uint8_t scsi_crc[4] = {0x56, 0x3a, 0x96, 0xd9};
    uint8_t buf[32];
    unsigned i;

    memset(buf, 0, sizeof(buf));
    crc_vector(st, buf, sizeof(buf), zeros_crc);
    memset(buf, 0xff, sizeof(buf));
    crc_vector(st, buf, sizeof(buf), ones_crc);
    for (i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    crc_vector(st, buf, sizeof(buf), inc_crc);
    for (i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    crc_vector(st, buf, sizeof(buf), dec_crc);
    crc_vector(st, b4_scsi_read, sizeof(b4_scsi_read), scsi_crc);
    /* the conventional CRC-32C check value */
    CHECK(st, uiw_crc32c("123456789", 9) == 0xE3069283u);
    CHECK(st, uiw_crc32c(buf, 0) == 0);
}

/* ------------------------------------------------------------------------
 * MPA (RFC 5044 §7.1, RFC 6581 §9)
 * ---------------------------------------------------------------------- */

static void test_mpa_frames(struct st *st, uiw_mpa_frame *f, uiw_mpa_frame *g)
{
    /* a Rev 2 Request with the RFC 6581 words IRD 1 / ORD 1, as siw sends
     * for rping: key, flags S (0x10), rev 2, PD_Length 4, IRD, ORD */
    static const uint8_t want[24] = {'M', 'P', 'A', ' ', 'I',  'D',  ' ',  'R', 'e', 'q', ' ', 'F',
                                     'r', 'a', 'm', 'e', 0x10, 0x02, 0x00, 4,   0,   1,   0,   1};
    uint8_t out[64];
    int n;

    memset(f, 0, sizeof(*f));
    f->kind = UIW_MPA_REQUEST;
    f->rev = 2;
    f->enhanced = true;
    f->ird = 1;
    f->ord = 1;
    n = uiw_mpa_encode(f, out, sizeof(out));
    CHECK(st, n == 24);
    CHECK(st, n == 24 && memcmp(out, want, 24) == 0);
    n = uiw_mpa_decode(want, sizeof(want), UIW_MPA_REQUEST, g);
    CHECK(st, n == 24);
    CHECK(st, g->kind == UIW_MPA_REQUEST && g->rev == 2 && g->enhanced && !g->crc && !g->markers &&
                  g->ird == 1 && g->ord == 1 && g->pd_len == 4);
    /* every prefix is incomplete, never an error */
    CHECK(st, uiw_mpa_decode(want, 23, UIW_MPA_REQUEST, g) == -EAGAIN);
    CHECK(st, uiw_mpa_decode(want, 5, 0, g) == -EAGAIN);
    /* a Reply key where a Request is expected, a corrupted key */
    memcpy(out, want, sizeof(want));
    memcpy(out + 7, "Rep", 3);
    CHECK(st, uiw_mpa_decode(out, 24, UIW_MPA_REQUEST, g) == -EPROTO);
    CHECK(st, uiw_mpa_decode(out, 24, UIW_MPA_REPLY, g) == 24 && g->kind == UIW_MPA_REPLY);
    out[0] = 'X';
    CHECK(st, uiw_mpa_decode(out, 24, 0, g) == -EPROTO);
    /* PD_Length over 512 (RFC 5044 §7.1) */
    memcpy(out, want, sizeof(want));
    out[18] = 0x02;
    out[19] = 0x01;
    CHECK(st, uiw_mpa_decode(out, 24, 0, g) == -EPROTO);
}

struct neg_bufs { /* off the stack: kernel stacks are small */
    uiw_mpa_neg ini, rsp;
    uint8_t req[UIW_MPA_MAX_FRAME], rep[UIW_MPA_MAX_FRAME];
};

/* Initiator and responder with the given CRC policies; returns the
 * initiator's result.crc, or -1 when the exchange did not complete. */
static int negotiate(struct st *st, struct neg_bufs *nb, unsigned ini_crc, unsigned rsp_crc)
{
    uiw_mpa_neg *ini = &nb->ini, *rsp = &nb->rsp;
    uint8_t *req = nb->req, *rep = nb->rep;
    uiw_mpa_policy pi, pr;
    size_t rep_len = 0, i;
    int n, used;

    uiw_mpa_policy_default(&pi);
    uiw_mpa_policy_default(&pr);
    pi.crc = (uint8_t)ini_crc;
    pr.crc = (uint8_t)rsp_crc;
    pi.ird = 1;
    pi.ord = 1;
    n = uiw_mpa_neg_start_initiator(ini, &pi, req, UIW_MPA_MAX_FRAME);
    CHECK(st, n == 24);
    if (n != 24)
        return -1;
    uiw_mpa_neg_start_responder(rsp, &pr);
    /* the Request in two pieces, the Reply byte by byte */
    used = uiw_mpa_neg_feed(rsp, req, 10, rep, UIW_MPA_MAX_FRAME, &rep_len);
    CHECK(st, used == 10 && rsp->state == UIW_MPA_S_WAIT_REQ);
    used = uiw_mpa_neg_feed(rsp, req + 10, (size_t)n - 10, rep, UIW_MPA_MAX_FRAME, &rep_len);
    CHECK(st, used == n - 10 && rsp->state == UIW_MPA_S_DONE && rep_len == 24);
    for (i = 0; i < rep_len; i++) {
        size_t none = 0;

        used = uiw_mpa_neg_feed(ini, rep + i, 1, NULL, 0, &none);
        if (used != 1)
            break;
    }
    CHECK(st, i == rep_len && ini->state == UIW_MPA_S_DONE);
    if (ini->state != UIW_MPA_S_DONE || rsp->state != UIW_MPA_S_DONE)
        return -1;
    CHECK(st, ini->result.rev == 2 && rsp->result.rev == 2);
    CHECK(st, ini->result.enhanced && rsp->result.enhanced);
    CHECK(st, ini->result.crc == rsp->result.crc);
    CHECK(st, !ini->result.markers_rx && !ini->result.markers_tx);
    CHECK(st, !ini->result.send_rtr && rsp->result.await_rtr);
    return ini->result.crc;
}

static void test_mpa(struct st *st)
{
    uiw_mpa_frame *f = uiw_st_zalloc(sizeof(*f));
    uiw_mpa_frame *g = uiw_st_zalloc(sizeof(*g));
    struct neg_bufs *nb = uiw_st_zalloc(sizeof(*nb));

    CHECK(st, f && g && nb);
    if (f && g && nb) {
        test_mpa_frames(st, f, g);
        /* RFC 5044 §7.1.1 C: C=1 from either side turns CRC on */
        CHECK(st, negotiate(st, nb, UIW_CRC_OPTIONAL, UIW_CRC_OPTIONAL) == 0);
        CHECK(st, negotiate(st, nb, UIW_CRC_REQUIRED, UIW_CRC_OPTIONAL) == 1);
        CHECK(st, negotiate(st, nb, UIW_CRC_OFF, UIW_CRC_REQUIRED) == 1);
    }
    uiw_st_free(f);
    uiw_st_free(g);
    uiw_st_free(nb);
}

/* ------------------------------------------------------------------------
 * DDP/RDMAP headers (RFC 5041 §4, RFC 5040 §4, RFC 7306 §5, §6)
 * ---------------------------------------------------------------------- */

/* encode, decode, encode again: same length and bytes */
static void hdr_round_trip(struct st *st, const uiw_hdr *h, int want_len, uiw_hdr *d)
{
    uiw_hdr prefix;
    uint8_t a[UIW_RX_HDRBUF], b[UIW_RX_HDRBUF];
    uiw_term_cause cause;
    int n, m;

    n = uiw_hdr_encode(h, a, sizeof(a));
    CHECK(st, n == want_len);
    if (n != want_len)
        return;
    m = uiw_hdr_decode(a, (size_t)n, d, &cause);
    CHECK(st, m == n);
    CHECK(st, d->tagged == h->tagged && d->last == h->last && d->opcode == h->opcode);
    CHECK(st, h->tagged ? d->stag == h->stag && d->to == h->to
                        : d->qn == h->qn && d->msn == h->msn && d->mo == h->mo);
    m = uiw_hdr_encode(d, b, sizeof(b));
    CHECK(st, m == n && memcmp(a, b, (size_t)n) == 0);
    /* a prefix asks for more (decoded into its own struct: decode zeroes it) */
    CHECK(st, uiw_hdr_decode(a, (size_t)n - 1, &prefix, &cause) == -EAGAIN);
}

static void test_hdr(struct st *st)
{
    static const uint8_t write_ctrl[2] = {0xc1, 0x40}; /* T L DV=1, RV=1 opcode 0 */
    uint8_t out[UIW_RX_HDRBUF];
    uiw_term_cause cause;
    uiw_hdr h, d;

    uiw_hdr_init(&h, true, UIW_OP_WRITE);
    h.stag = 0x12345678;
    h.to = 0x0102030405060708ull;
    hdr_round_trip(st, &h, UIW_HDR_TAGGED_LEN, &d);
    CHECK(st, uiw_hdr_encode(&h, out, sizeof(out)) == 14 && memcmp(out, write_ctrl, 2) == 0 &&
                  out[2] == 0x12 && out[5] == 0x78 && out[6] == 0x01 && out[13] == 0x08);

    uiw_hdr_init(&h, true, UIW_OP_READ_RESP);
    h.last = false;
    h.stag = 0xfeedbeef;
    h.to = 4096;
    hdr_round_trip(st, &h, UIW_HDR_TAGGED_LEN, &d);

    uiw_hdr_init_untagged(&h, UIW_OP_SEND_INV, UIW_QN_SEND, 7);
    h.inv_stag = 0xabcdef01;
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN, &d);
    CHECK(st, d.inv_stag == 0xabcdef01);

    uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, 3);
    h.u.rreq.sink_stag = 0x11;
    h.u.rreq.sink_to = 0x2222;
    h.u.rreq.read_size = 65536;
    h.u.rreq.src_stag = 0x33;
    h.u.rreq.src_to = 0x4444;
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN, &d);
    CHECK(st,
          d.u.rreq.read_size == 65536 && d.u.rreq.src_to == 0x4444 && d.u.rreq.sink_stag == 0x11);

    uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, 1);
    h.u.atomic_req.aop = UIW_AOP_CMP_SWAP;
    h.u.atomic_req.req_id = 9;
    h.u.atomic_req.stag = 0x55;
    h.u.atomic_req.to = 0x1000;
    h.u.atomic_req.add_swap = 0x0123456789abcdefull;
    h.u.atomic_req.compare = 42;
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_REQ_LEN, &d);
    CHECK(st, d.u.atomic_req.add_swap == 0x0123456789abcdefull && d.u.atomic_req.compare == 42);

    uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_RESP, UIW_QN_ATOMIC_RESP, 1);
    h.u.atomic_resp.req_id = 9;
    h.u.atomic_resp.orig_value = 77;
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_RESP_LEN, &d);

    uiw_hdr_init_untagged(&h, UIW_OP_IMM_DATA, UIW_QN_SEND, 2);
    memcpy(h.u.imm, "12345678", 8);
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN + UIW_IMM_DATA_LEN, &d);

    /* a Terminate without attachments: DDP/untagged/invalid QN */
    uiw_hdr_init_untagged(&h, UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1);
    h.u.term.cause.layer = UIW_LAYER_DDP;
    h.u.term.cause.etype = UIW_DDP_ET_UNTAGGED;
    h.u.term.cause.ecode = UIW_DDP_EC_U_INVALID_QN;
    hdr_round_trip(st, &h, UIW_HDR_UNTAGGED_LEN + UIW_TERM_CTRL_LEN, &d);
    CHECK(st, d.u.term.cause.layer == UIW_LAYER_DDP &&
                  d.u.term.cause.etype == UIW_DDP_ET_UNTAGGED &&
                  d.u.term.cause.ecode == UIW_DDP_EC_U_INVALID_QN);

    /* what the encoder refuses: a Send on the Read Request queue, a Write
     * without T */
    uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_READ_REQ, 1);
    CHECK(st, uiw_hdr_encode(&h, out, sizeof(out)) == -EINVAL);
    uiw_hdr_init(&h, false, UIW_OP_WRITE);
    CHECK(st, uiw_hdr_encode(&h, out, sizeof(out)) == -EINVAL);

    /* what the decoder rejects, with the cause (RFC 5041 §7.2, RFC 5040 §7.2) */
    uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_SEND, 1);
    CHECK(st, uiw_hdr_encode(&h, out, sizeof(out)) == UIW_HDR_UNTAGGED_LEN);
    out[0] &= (uint8_t)~0x03; /* DV 0 */
    CHECK(st, uiw_hdr_decode(out, UIW_HDR_UNTAGGED_LEN, &d, &cause) == -EPROTO &&
                  cause.layer == UIW_LAYER_DDP && cause.etype == UIW_DDP_ET_UNTAGGED &&
                  cause.ecode == UIW_DDP_EC_U_INVALID_VERSION);
    CHECK(st, uiw_hdr_len(true, UIW_OP_SEND) == -EPROTO);
    CHECK(st, uiw_hdr_len(false, 0xC) == -EPROTO);
}

/* ------------------------------------------------------------------------
 * Receive parser (RFC 5044 §4, §8; RFC 5041 §7) fed by the segmenter
 * ---------------------------------------------------------------------- */

#define ST_PAYLOAD 2048
#define ST_STREAM  4096

struct rx_sum {
    unsigned hdrs, ends, crc_ok, errors;
    uint8_t last_opcode;
    uint64_t base; /* the segment's TO or MO: where its payload goes */
    uiw_term_cause cause;
    size_t payload_len;
    uint8_t payload[ST_PAYLOAD];
};

/* Feed len bytes in pieces of at most chunk bytes. */
static void rx_run(uiw_rx *rx, const uiw_rx_cfg *cfg, const uint8_t *in, size_t len, size_t chunk,
                   struct rx_sum *s)
{
    uiw_rx_event ev;

    memset(s, 0, sizeof(*s));
    uiw_rx_init(rx, cfg);
    while (len > 0) {
        size_t give = len < chunk ? len : chunk;
        size_t n = uiw_rx_feed(rx, in, give, &ev);

        in += n;
        len -= n;
        switch (ev.kind) {
        case UIW_RX_HDR:
            s->hdrs++;
            s->last_opcode = ev.hdr->opcode;
            s->base = ev.hdr->tagged ? ev.hdr->to : ev.hdr->mo;
            break;
        case UIW_RX_PAYLOAD:
            /* in order and within the buffer, else not counted */
            if (s->base + ev.offset == s->payload_len && s->payload_len + ev.len <= ST_PAYLOAD) {
                memcpy(s->payload + s->payload_len, ev.data, ev.len);
                s->payload_len += ev.len;
            }
            break;
        case UIW_RX_END:
            s->ends++;
            s->crc_ok += ev.crc_ok;
            break;
        case UIW_RX_ERROR:
            s->errors++;
            s->cause = ev.cause;
            return;
        default:
            if (n == 0 && give > 0)
                return; /* no progress: a parser bug, seen as no END */
        }
    }
}

static bool cause_is(const uiw_term_cause *c, unsigned layer, unsigned etype, unsigned ecode)
{
    return c->layer == layer && c->etype == etype && c->ecode == ecode;
}

struct rx_bufs {
    uiw_rx rx;
    uiw_tx tx;
    uiw_tx_msg msg;
    uiw_fpdu fpdu;
    struct rx_sum sum;
    uint8_t payload[ST_PAYLOAD];
    uint8_t stream[ST_STREAM];
};

/* A Send of plen bytes as one contiguous FPDU; returns its length. */
static int one_send(struct rx_bufs *b, bool crc, size_t plen)
{
    uiw_tx_cfg tc = {.crc = crc, .markers = false, .max_fpdu = 4096};
    struct iovec sg = {.iov_base = b->payload, .iov_len = plen};
    uiw_hdr h;

    uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_SEND, 1);
    if (uiw_tx_init(&b->tx, &tc) || uiw_tx_msg_init(&b->msg, &h, &sg, 1, plen))
        return -EINVAL;
    return uiw_tx_whole(&b->tx, &b->msg, b->stream, sizeof(b->stream));
}

static void test_rx_valid(struct st *st, struct rx_bufs *b)
{
    uiw_rx_cfg rc = {.crc = true};
    uiw_tx_cfg tc = {.crc = true, .markers = true, .max_fpdu = 256};
    struct iovec sg[2] = {{.iov_base = b->payload, .iov_len = 600},
                          {.iov_base = b->payload + 600, .iov_len = 401}};
    size_t len = 0, chunk;
    unsigned fpdus = 0;
    uiw_hdr h;
    int n, i;

    /* one Send with CRC, fed whole, then byte by byte */
    n = one_send(b, true, 100);
    CHECK(st, n == (int)uiw_fpdu_len(UIW_HDR_UNTAGGED_LEN + 100));
    if (n <= 0)
        return;
    for (chunk = 1; chunk <= ST_STREAM; chunk += ST_STREAM - 1) {
        rx_run(&b->rx, &rc, b->stream, (size_t)n, chunk, &b->sum);
        CHECK(st, b->sum.hdrs == 1 && b->sum.ends == 1 && b->sum.crc_ok == 1 && !b->sum.errors);
        CHECK(st, b->sum.last_opcode == UIW_OP_SEND && b->sum.payload_len == 100 &&
                      memcmp(b->sum.payload, b->payload, 100) == 0);
        CHECK(st, uiw_rx_idle(&b->rx));
    }

    /* a 1001-byte RDMA Write from two pieces in 256-byte FPDUs with CRC and
     * markers (RFC 5044 §4.3): the segmenter's iovecs laid end to end */
    uiw_hdr_init(&h, true, UIW_OP_WRITE);
    h.stag = 0x100;
    h.to = 0;
    CHECK(st, uiw_tx_init(&b->tx, &tc) == 0);
    CHECK(st, uiw_tx_msg_init(&b->msg, &h, sg, 2, 1001) == 0);
    while ((n = uiw_tx_next(&b->tx, &b->msg, &b->fpdu)) == 1) {
        fpdus++;
        for (i = 0; i < b->fpdu.iovcnt; i++) {
            if (len + b->fpdu.iov[i].iov_len > sizeof(b->stream)) {
                n = -EMSGSIZE;
                break;
            }
            memcpy(b->stream + len, b->fpdu.iov[i].iov_base, b->fpdu.iov[i].iov_len);
            len += b->fpdu.iov[i].iov_len;
        }
        if (n < 0)
            break;
    }
    CHECK(st, n == 0 && fpdus >= 5 && len % 4 == 0);
    rc.markers = true;
    for (chunk = 3; chunk <= ST_STREAM; chunk += ST_STREAM - 3) {
        rx_run(&b->rx, &rc, b->stream, len, chunk, &b->sum);
        CHECK(st, b->sum.hdrs == fpdus && b->sum.ends == fpdus && b->sum.crc_ok == fpdus);
        CHECK(st, !b->sum.errors && b->sum.last_opcode == UIW_OP_WRITE);
        CHECK(st, b->sum.payload_len == 1001 && memcmp(b->sum.payload, b->payload, 1001) == 0);
    }
}

static void test_rx_malformed(struct st *st, struct rx_bufs *b)
{
    uiw_rx_cfg crc_on = {.crc = true}, crc_off = {.crc = false};
    int n = one_send(b, true, 40);

    CHECK(st, n > 0);
    if (n <= 0)
        return;
    /* a CRC bit flipped: LLP/MPA/CRC error (RFC 5044 §8 code 2) */
    b->stream[n - 1] ^= 0x01;
    rx_run(&b->rx, &crc_on, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 &&
                  cause_is(&b->sum.cause, UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC));
    /* a payload bit flipped: the same */
    b->stream[n - 1] ^= 0x01;
    b->stream[30] ^= 0x80;
    rx_run(&b->rx, &crc_on, b->stream, (size_t)n, 1, &b->sum);
    CHECK(st, b->sum.errors == 1 && b->sum.ends == 0 &&
                  cause_is(&b->sum.cause, UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC));

    /* CRC off from here: errors are reported as soon as seen */
    n = one_send(b, false, 40);
    CHECK(st, n > 0);
    if (n <= 0)
        return;
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.ends == 1 && !b->sum.errors);
    /* ULPDU_Length 1 (RFC 5044 §8 code 3) */
    b->stream[0] = 0;
    b->stream[1] = 1;
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 &&
                  cause_is(&b->sum.cause, UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_MARKER));
    /* DDP version 0 (RFC 5041 §7.2) */
    n = one_send(b, false, 40);
    b->stream[2] &= (uint8_t)~0x03;
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 && cause_is(&b->sum.cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                                             UIW_DDP_EC_U_INVALID_VERSION));
    /* reserved opcode 0xC (RFC 5040 §7.2) */
    n = one_send(b, false, 40);
    b->stream[3] = (uint8_t)((b->stream[3] & 0xf0) | 0xc);
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 && cause_is(&b->sum.cause, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                                             UIW_RDMAP_EC_UNEXPECTED_OPCODE));
    /* a Send on QN 1 (RFC 5041 §7.1 (1)); QN is bytes 8..11 of the FPDU */
    n = one_send(b, false, 40);
    b->stream[11] = 1;
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 && cause_is(&b->sum.cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                                             UIW_DDP_EC_U_INVALID_QN));
    /* a tagged Send (T set; RFC 5040 §4.1 Figure 4) */
    n = one_send(b, false, 40);
    b->stream[2] |= 0x80;
    rx_run(&b->rx, &crc_off, b->stream, (size_t)n, ST_STREAM, &b->sum);
    CHECK(st, b->sum.errors == 1 && cause_is(&b->sum.cause, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                                             UIW_RDMAP_EC_UNEXPECTED_OPCODE));
}

static void test_rx(struct st *st)
{
    struct rx_bufs *b = uiw_st_zalloc(sizeof(*b));
    unsigned i;

    CHECK(st, b != NULL);
    if (!b)
        return;
    for (i = 0; i < ST_PAYLOAD; i++)
        b->payload[i] = (uint8_t)(i * 7 + 3);
    test_rx_valid(st, b);
    test_rx_malformed(st, b);
    uiw_st_free(b);
}

int uiw_selftest_run(struct uiw_selftest_result *res)
{
    struct st st = {.res = res};

    res->passed = 0;
    res->failed = 0;
    test_crc(&st);
    test_mpa(&st);
    test_hdr(&st);
    test_rx(&st);
    return 0;
}
