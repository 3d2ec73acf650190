/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * DDP segment headers (RFC 5041 §4) with the RDMAP fields they carry
 * (RFC 5040 §4, RFC 7306 §4-6), and the Terminate Control word
 * (RFC 5040 §4.8). See wire.h for the rules; every check cites its RFC.
 *
 * All fields are big-endian ("network order") on the wire; the decoder
 * reads byte by byte, so input needs no alignment, and it never touches
 * in[len] or beyond.
 */
#include "uiw_port.h"
#include "uiw_be.h"
#include "uiwarp/wire.h"

/* ------------------------------------------------------------------------
 * Byte order helpers
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * DDP control + RDMAP control (RFC 5041 §4.1, RFC 5040 §4.1 Figure 3)
 *
 *   bit  0    T       0x8000
 *   bit  1    L       0x4000
 *   bits 2-5  Resrv   0x3C00
 *   bits 6-7  DV      0x0300
 *   bits 8-9  RV      0x00C0
 *   bits 10-11 Rsv    0x0030
 *   bits 12-15 Opcode 0x000F
 * ---------------------------------------------------------------------- */

#define CTRL_T           0x8000u
#define CTRL_L           0x4000u
#define CTRL_RESRV_SHIFT 10
#define CTRL_RESRV_MASK  0xFu
#define CTRL_DV_SHIFT    8
#define CTRL_RV_SHIFT    6
#define CTRL_RSV_SHIFT   4
#define CTRL_2BIT        0x3u
#define CTRL_OPCODE_MASK 0xFu

/* Offsets inside the untagged header (RFC 5041 §4.3 Figure 5). */
#define UT_OFF_RSVDULP 2
#define UT_OFF_QN      6
#define UT_OFF_MSN     10
#define UT_OFF_MO      14

/* Terminate Control word (RFC 5040 §4.8 Figure 8), RFC bit numbering with
 * bit 0 the most significant bit of the first byte. */
#define TERM_RFC_M 0x80u /* bit 16: byte 2, MSB */
#define TERM_RFC_D 0x40u /* bit 17 */
#define TERM_RFC_R 0x20u /* bit 18 */
/* siw's little-endian bitfield puts M/D/R in bits 0/1/2 of byte 2. */
#define TERM_SIW_M 0x01u
#define TERM_SIW_D 0x02u
#define TERM_SIW_R 0x04u

/* Per opcode: the T flag Figure 4 (RFC 5040 §4.1) / Figure 2 (RFC 7306
 * §4.1) requires, the untagged QN, and the RDMAP header length that follows
 * the DDP header (RFC 5040 §4.2 Figure 5, RFC 7306 §4.2 Figure 3). */
struct op_info {
    bool tagged;
    uint8_t qn;
    uint8_t rdmap_len; /* 0xFF: variable (Terminate) */
};

#define RDMAP_LEN_VARIABLE 0xFF

static const struct op_info op_table[UIW_OP_MAX + 1] = {
    [UIW_OP_WRITE] = {true, 0, 0},
    [UIW_OP_READ_REQ] = {false, UIW_QN_READ_REQ, UIW_RREQ_LEN},
    [UIW_OP_READ_RESP] = {true, 0, 0},
    [UIW_OP_SEND] = {false, UIW_QN_SEND, 0},
    [UIW_OP_SEND_INV] = {false, UIW_QN_SEND, 0},
    [UIW_OP_SEND_SE] = {false, UIW_QN_SEND, 0},
    [UIW_OP_SEND_SE_INV] = {false, UIW_QN_SEND, 0},
    [UIW_OP_TERMINATE] = {false, UIW_QN_TERMINATE, RDMAP_LEN_VARIABLE},
    [UIW_OP_IMM_DATA] = {false, UIW_QN_SEND, UIW_IMM_DATA_LEN},
    [UIW_OP_IMM_DATA_SE] = {false, UIW_QN_SEND, UIW_IMM_DATA_LEN},
    [UIW_OP_ATOMIC_REQ] = {false, UIW_QN_READ_REQ, UIW_ATOMIC_REQ_LEN},
    [UIW_OP_ATOMIC_RESP] = {false, UIW_QN_ATOMIC_RESP, UIW_ATOMIC_RESP_LEN},
};

/* The message is its RDMAP header and nothing more: RFC 5040 Figure 5 and
 * RFC 7306 Figure 3 allow no ULP payload; every header "immediately follows
 * the DDP header" (RFC 5040 §4.4, §4.8; RFC 7306 §5.2.1, §5.2.2, §6.2), so
 * the message is one DDP segment with L set and MO 0. */
static bool op_hdr_only(unsigned opcode)
{
    return opcode <= UIW_OP_MAX && op_table[opcode].rdmap_len != 0;
}

/* RFC 7306 §5.2.1 Figure 5 / §10.1: defined atomic operation codes. */
static bool aop_defined(unsigned aop)
{
    return aop == UIW_AOP_FETCH_ADD || aop == UIW_AOP_CMP_SWAP;
}

/* RFC 5040 §4.1 (RV 01b and 00b valid), RFC 7306 §4.1 (01b only for the
 * extension opcodes). See the rule in wire.h. */
static bool rv_valid(unsigned rv, unsigned opcode)
{
    if (rv == UIW_RDMAP_VERSION)
        return true;
    return rv == UIW_RDMAP_VERSION_RDMAC && opcode <= UIW_OP_TERMINATE;
}

int uiw_hdr_len(bool tagged, unsigned opcode)
{
    if (opcode > UIW_OP_MAX || op_table[opcode].tagged != tagged)
        return -EPROTO;
    if (tagged)
        return UIW_HDR_TAGGED_LEN;
    if (op_table[opcode].rdmap_len == RDMAP_LEN_VARIABLE)
        return -EPROTO;
    return UIW_HDR_UNTAGGED_LEN + op_table[opcode].rdmap_len;
}

/* ------------------------------------------------------------------------
 * Terminate Control word
 * ---------------------------------------------------------------------- */

void uiw_term_ctrl_encode(const uiw_term *t, uint8_t out[4])
{
    uint8_t l = t->cause.layer & 0xFu, e = t->cause.etype & 0xFu;

    if (t->siw_layout) {
        /* Linux siw, little-endian bitfield (PEERS.md §5) */
        out[0] = (uint8_t)(e << 4 | l);
        out[2] = (uint8_t)((t->hdr_mpa ? TERM_SIW_M : 0) | (t->hdr_ddp ? TERM_SIW_D : 0) |
                           (t->hdr_rdma ? TERM_SIW_R : 0));
    } else {
        /* RFC 5040 §4.8 Figure 8; the 13 reserved bits are sent as zero */
        out[0] = (uint8_t)(l << 4 | e);
        out[2] = (uint8_t)((t->hdr_mpa ? TERM_RFC_M : 0) | (t->hdr_ddp ? TERM_RFC_D : 0) |
                           (t->hdr_rdma ? TERM_RFC_R : 0));
    }
    out[1] = t->cause.ecode;
    out[3] = 0;
}

void uiw_term_ctrl_decode(const uint8_t in[4], uiw_term *t)
{
    /* RFC 5040 §4.8: reserved bits are ignored on receive */
    t->cause.layer = in[0] >> 4;
    t->cause.etype = in[0] & 0xFu;
    t->cause.ecode = in[1];
    t->hdr_mpa = (in[2] & TERM_RFC_M) != 0;
    t->hdr_ddp = (in[2] & TERM_RFC_D) != 0;
    t->hdr_rdma = (in[2] & TERM_RFC_R) != 0;
    memcpy(t->raw_ctrl, in, UIW_TERM_CTRL_LEN);
    t->siw_layout = false;
}

void uiw_term_ctrl_decode_siw(const uint8_t in[4], uiw_term *t)
{
    t->cause.layer = in[0] & 0xFu;
    t->cause.etype = in[0] >> 4;
    t->cause.ecode = in[1];
    t->hdr_mpa = (in[2] & TERM_SIW_M) != 0;
    t->hdr_ddp = (in[2] & TERM_SIW_D) != 0;
    t->hdr_rdma = (in[2] & TERM_SIW_R) != 0;
    memcpy(t->raw_ctrl, in, UIW_TERM_CTRL_LEN);
    t->siw_layout = true;
}

/* Is layer/etype/ecode registered (RFC 6580 §3.1-3.3 as extended by
 * RFC 6581 §11)? Error types registered with "ALL" accept any code. */
static bool cause_defined(unsigned layer, unsigned etype, unsigned ecode)
{
    switch (layer) {
    case UIW_LAYER_RDMAP:
        switch (etype) {
        case UIW_RDMAP_ET_CATASTROPHIC:
            return true;
        case UIW_RDMAP_ET_REMOTE_PROT:
            return ecode <= UIW_RDMAP_EC_TO_WRAP || ecode == UIW_RDMAP_EC_CANT_INVALIDATE ||
                   ecode == UIW_RDMAP_EC_UNSPECIFIED_OTHER;
        case UIW_RDMAP_ET_REMOTE_OP:
            return (ecode >= UIW_RDMAP_EC_INVALID_VERSION &&
                    ecode <= UIW_RDMAP_EC_CANT_INVALIDATE) ||
                   ecode == UIW_RDMAP_EC_UNSPECIFIED_OTHER;
        default:
            return false;
        }
    case UIW_LAYER_DDP:
        switch (etype) {
        case UIW_DDP_ET_CATASTROPHIC:
            return ecode == UIW_DDP_EC_CATASTROPHIC;
        case UIW_DDP_ET_TAGGED:
            return ecode <= UIW_DDP_EC_T_INVALID_VERSION;
        case UIW_DDP_ET_UNTAGGED:
            return ecode >= UIW_DDP_EC_U_INVALID_QN && ecode <= UIW_DDP_EC_U_INVALID_VERSION;
        case UIW_DDP_ET_RSVD:
            return true;
        default:
            return false;
        }
    case UIW_LAYER_LLP:
        return (etype == UIW_LLP_ET_MPA || etype == UIW_LLP_ET_RNIC) &&
               ecode >= UIW_MPA_EC_TCP_CLOSED && ecode <= UIW_MPA_EC_NO_MATCHING_RTR;
    default:
        return false;
    }
}

bool uiw_term_ctrl_looks_siw(const uint8_t in[4])
{
    /* Reserved bits: the RFC layout has M/D/R in 0xE0 of byte 2, so 0x1F
     * of byte 2 and all of byte 3 are zero; siw's has them in 0x07, so
     * 0xF8 of byte 2 and byte 3 are zero. */
    bool rfc_flags_ok = (in[2] & 0x1Fu) == 0 && in[3] == 0;
    bool siw_flags_ok = (in[2] & 0xF8u) == 0 && in[3] == 0;
    bool rfc_ok = rfc_flags_ok && cause_defined(in[0] >> 4, in[0] & 0xFu, in[1]);
    bool siw_ok = siw_flags_ok && cause_defined(in[0] & 0xFu, in[0] >> 4, in[1]);

    if (rfc_ok != siw_ok)
        return siw_ok;
    if (rfc_ok)
        return false; /* ambiguous: the RFC wins */
    /* Neither reading is a registered cause: go by where the flags are. */
    return siw_flags_ok && !rfc_flags_ok;
}

/* Attachment layout check shared by the encoder and uiw_term_encoded_len
 * (RFC 5040 §4.8, see the uiw_term comment in wire.h). Returns the length
 * of the Terminate header after the untagged DDP header, or -EINVAL. */
static int term_body_len(const uiw_term *t)
{
    unsigned ddp_want = 0;

    if (t->hdr_ddp) {
        /* DDP Segment Length + the terminated header, sized by its T bit */
        if (t->ddp_hdr_len < UIW_TERM_DDP_SEGLEN_LEN + 1)
            return -EINVAL;
        ddp_want = UIW_TERM_DDP_SEGLEN_LEN + ((t->ddp_hdr[UIW_TERM_DDP_SEGLEN_LEN] & 0x80u)
                                                  ? UIW_HDR_TAGGED_LEN
                                                  : UIW_HDR_UNTAGGED_LEN);
    } else if (t->hdr_mpa) {
        ddp_want = UIW_TERM_DDP_SEGLEN_LEN;
    }
    if (t->ddp_hdr_len != ddp_want)
        return -EINVAL;
    if (t->rdma_hdr_len != (t->hdr_rdma ? UIW_RREQ_LEN : 0))
        return -EINVAL;
    if (t->cause.layer > 0xFu || t->cause.etype > 0xFu)
        return -EINVAL;
    return (int)(UIW_TERM_CTRL_LEN + ddp_want + t->rdma_hdr_len);
}

int uiw_term_encoded_len(const uiw_term *t)
{
    int n;

    if (!t)
        return -EINVAL;
    n = term_body_len(t);
    return n < 0 ? n : UIW_HDR_UNTAGGED_LEN + n;
}

/* ------------------------------------------------------------------------
 * Encode
 * ---------------------------------------------------------------------- */

static int encode_body(const uiw_hdr *h, uint8_t *p)
{
    switch (h->opcode) {
    case UIW_OP_READ_REQ: {
        /* RFC 5040 §4.4 Figure 6 */
        const uiw_rreq *r = &h->u.rreq;
        uiw_put_be32(p, r->sink_stag);
        uiw_put_be64(p + 4, r->sink_to);
        uiw_put_be32(p + 12, r->read_size);
        uiw_put_be32(p + 16, r->src_stag);
        uiw_put_be64(p + 20, r->src_to);
        return UIW_RREQ_LEN;
    }
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        /* RFC 7306 §6.2 Figure 7 */
        memcpy(p, h->u.imm, UIW_IMM_DATA_LEN);
        return UIW_IMM_DATA_LEN;
    case UIW_OP_ATOMIC_REQ: {
        /* RFC 7306 §5.2.1 Figure 4: 28 reserved bits (zero), AOpCode(4) */
        const uiw_atomic_req *a = &h->u.atomic_req;
        uiw_put_be32(p, a->aop);
        uiw_put_be32(p + 4, a->req_id);
        uiw_put_be32(p + 8, a->stag);
        uiw_put_be64(p + 12, a->to);
        uiw_put_be64(p + 20, a->add_swap);
        uiw_put_be64(p + 28, a->add_swap_mask);
        uiw_put_be64(p + 36, a->compare);
        uiw_put_be64(p + 44, a->compare_mask);
        return UIW_ATOMIC_REQ_LEN;
    }
    case UIW_OP_ATOMIC_RESP:
        /* RFC 7306 §5.2.2 Figure 6 */
        uiw_put_be32(p, h->u.atomic_resp.req_id);
        uiw_put_be64(p + 4, h->u.atomic_resp.orig_value);
        return UIW_ATOMIC_RESP_LEN;
    case UIW_OP_TERMINATE: {
        /* RFC 5040 §4.8 Figure 7 */
        const uiw_term *t = &h->u.term;
        uiw_term_ctrl_encode(t, p);
        p += UIW_TERM_CTRL_LEN;
        memcpy(p, t->ddp_hdr, t->ddp_hdr_len);
        p += t->ddp_hdr_len;
        memcpy(p, t->rdma_hdr, t->rdma_hdr_len);
        return UIW_TERM_CTRL_LEN + t->ddp_hdr_len + t->rdma_hdr_len;
    }
    default:
        return 0;
    }
}

int uiw_hdr_encode(const uiw_hdr *h, uint8_t *out, size_t cap)
{
    unsigned op;
    int need;
    uint16_t ctrl;

    if (!h || (!out && cap))
        return -EINVAL;
    op = h->opcode;
    /* Field widths (RFC 5041 §4.1, RFC 5040 §4.1) */
    if (op > CTRL_OPCODE_MASK || h->ddp_rsvd > CTRL_RESRV_MASK || h->ddp_version > CTRL_2BIT ||
        h->rdmap_version > CTRL_2BIT || h->rdmap_rsvd > CTRL_2BIT)
        return -EINVAL;
    /* Refuse what a receiver must reject (the uiw_hdr_decode checks) */
    if (h->ddp_version != UIW_DDP_VERSION || op > UIW_OP_MAX || !rv_valid(h->rdmap_version, op) ||
        op_table[op].tagged != h->tagged)
        return -EINVAL;
    if (!h->tagged) {
        if (h->qn != op_table[op].qn)
            return -EINVAL;
        if (op_hdr_only(op) && (!h->last || h->mo != 0))
            return -EINVAL;
        if (op == UIW_OP_ATOMIC_REQ && !aop_defined(h->u.atomic_req.aop))
            return -EINVAL;
    }
    if (op == UIW_OP_TERMINATE)
        need = uiw_term_encoded_len(&h->u.term);
    else
        need = uiw_hdr_len(h->tagged, op);
    if (need < 0)
        return need;
    if (cap < (size_t)need)
        return -EMSGSIZE;

    ctrl = (uint16_t)((h->tagged ? CTRL_T : 0) | (h->last ? CTRL_L : 0) |
                      (unsigned)h->ddp_rsvd << CTRL_RESRV_SHIFT |
                      (unsigned)h->ddp_version << CTRL_DV_SHIFT |
                      (unsigned)h->rdmap_version << CTRL_RV_SHIFT |
                      (unsigned)h->rdmap_rsvd << CTRL_RSV_SHIFT | op);
    uiw_put_be16(out, ctrl);
    if (h->tagged) {
        /* RFC 5041 §4.2 Figure 4 */
        uiw_put_be32(out + 2, h->stag);
        uiw_put_be64(out + 6, h->to);
        return UIW_HDR_TAGGED_LEN;
    }
    /* RFC 5041 §4.3 Figure 5; RsvdULP[8:39] carries the Invalidate STag
     * (RFC 5040 §4.1) */
    uiw_put_be32(out + UT_OFF_RSVDULP, h->inv_stag);
    uiw_put_be32(out + UT_OFF_QN, h->qn);
    uiw_put_be32(out + UT_OFF_MSN, h->msn);
    uiw_put_be32(out + UT_OFF_MO, h->mo);
    return UIW_HDR_UNTAGGED_LEN + encode_body(h, out + UIW_HDR_UNTAGGED_LEN);
}

/* ------------------------------------------------------------------------
 * Decode
 * ---------------------------------------------------------------------- */

static int fail(uiw_term_cause *cause, unsigned layer, unsigned etype, unsigned ecode)
{
    if (cause) {
        cause->layer = (uint8_t)layer;
        cause->etype = (uint8_t)etype;
        cause->ecode = (uint8_t)ecode;
    }
    return -EPROTO;
}

#define FAIL_RDMAP_OP(ec) fail(cause, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, (ec))
#define FAIL_UNTAGGED(ec) fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, (ec))

/* Terminate header after the untagged DDP header: p/len cover only what
 * follows the DDP header. Returns its length or -EAGAIN. */
static int decode_term(const uint8_t *p, size_t len, uiw_term *t)
{
    size_t off = UIW_TERM_CTRL_LEN;
    size_t ddp_len = 0;

    if (len < UIW_TERM_CTRL_LEN)
        return -EAGAIN;
    /* siw's bitfield layout or the RFC's (wire.h, PEERS.md §5) */
    if (uiw_term_ctrl_looks_siw(p))
        uiw_term_ctrl_decode_siw(p, t);
    else
        uiw_term_ctrl_decode(p, t);

    /* RFC 5040 §4.8: DDP Segment Length if M or D, the terminated DDP
     * header if D (112 or 144 bits by its own T flag), then the terminated
     * RDMA header if R. */
    if (t->hdr_ddp) {
        if (len < off + UIW_TERM_DDP_SEGLEN_LEN + 1)
            return -EAGAIN;
        ddp_len = UIW_TERM_DDP_SEGLEN_LEN + ((p[off + UIW_TERM_DDP_SEGLEN_LEN] & 0x80u)
                                                 ? UIW_HDR_TAGGED_LEN
                                                 : UIW_HDR_UNTAGGED_LEN);
    } else if (t->hdr_mpa) {
        ddp_len = UIW_TERM_DDP_SEGLEN_LEN;
    }
    if (len < off + ddp_len)
        return -EAGAIN;
    memcpy(t->ddp_hdr, p + off, ddp_len);
    t->ddp_hdr_len = (uint8_t)ddp_len;
    off += ddp_len;
    if (t->hdr_rdma) {
        if (len < off + UIW_RREQ_LEN)
            return -EAGAIN;
        memcpy(t->rdma_hdr, p + off, UIW_RREQ_LEN);
        t->rdma_hdr_len = UIW_RREQ_LEN;
        off += UIW_RREQ_LEN;
    }
    return (int)off;
}

int uiw_hdr_decode(const uint8_t *in, size_t len, uiw_hdr *h, uiw_term_cause *cause)
{
    uint16_t ctrl;
    unsigned op;
    const struct op_info *oi;
    const uint8_t *p;
    size_t body;
    int n;

    if (!h || (!in && len))
        return -EINVAL;
    memset(h, 0, sizeof(*h));
    if (cause)
        memset(cause, 0, sizeof(*cause));
    if (len < 2)
        return -EAGAIN;

    /* DDP control + RDMAP control (RFC 5041 §4.1, RFC 5040 §4.1) */
    ctrl = uiw_get_be16(in);
    h->tagged = (ctrl & CTRL_T) != 0;
    h->last = (ctrl & CTRL_L) != 0;
    h->ddp_rsvd = (uint8_t)(ctrl >> CTRL_RESRV_SHIFT & CTRL_RESRV_MASK);
    h->ddp_version = (uint8_t)(ctrl >> CTRL_DV_SHIFT & CTRL_2BIT);
    h->rdmap_version = (uint8_t)(ctrl >> CTRL_RV_SHIFT & CTRL_2BIT);
    h->rdmap_rsvd = (uint8_t)(ctrl >> CTRL_RSV_SHIFT & CTRL_2BIT);
    h->opcode = (uint8_t)(ctrl & CTRL_OPCODE_MASK);
    op = h->opcode;

    /* RFC 5041 §4.1: DV MUST be one; §7.2 error numbers by buffer model */
    if (h->ddp_version != UIW_DDP_VERSION)
        return h->tagged
                   ? fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_VERSION)
                   : FAIL_UNTAGGED(UIW_DDP_EC_U_INVALID_VERSION);
    /* RFC 5040 §7.2 (3) "The RDMA Version MUST be valid" (§4.1: 01b and
     * 00b; RFC 7306 §4.1: 01b for its opcodes). A version we cannot read
     * makes the opcode meaningless, so it is checked first. */
    if (!rv_valid(h->rdmap_version, op))
        return FAIL_RDMAP_OP(UIW_RDMAP_EC_INVALID_VERSION);
    /* RFC 5040 §7.2 (2) "The RDMA OpCode MUST be valid": 0xC-0xF are not
     * defined (RFC 6580 §3.4, RFC 7306 §10) */
    if (op > UIW_OP_MAX)
        return FAIL_RDMAP_OP(UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    oi = &op_table[op];
    /* RFC 5040 §4.1 Figure 4 / RFC 7306 §4.1 Figure 2 fix T for each
     * opcode ("MUST be used"); DDP accepts either model, so the mismatch is
     * seen by RDMAP as an opcode it did not expect on this buffer model. */
    if (oi->tagged != h->tagged)
        return FAIL_RDMAP_OP(UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    /* A header-only message is exactly one segment (op_hdr_only): without
     * L the message goes on past the one-header untagged buffer. */
    if (op_hdr_only(op) && !h->last)
        return FAIL_UNTAGGED(UIW_DDP_EC_U_MSG_TOO_LONG);

    if (h->tagged) {
        /* RFC 5041 §4.2 Figure 4 */
        if (len < UIW_HDR_TAGGED_LEN)
            return -EAGAIN;
        h->stag = uiw_get_be32(in + 2);
        h->to = uiw_get_be64(in + 6);
        return UIW_HDR_TAGGED_LEN;
    }

    /* RFC 5041 §4.3 Figure 5 */
    if (len < UT_OFF_QN + 4)
        return -EAGAIN;
    h->inv_stag = uiw_get_be32(in + UT_OFF_RSVDULP);
    h->qn = uiw_get_be32(in + UT_OFF_QN);
    /* RFC 5041 §7.1 (1) "The QN is valid for this stream": each opcode has
     * exactly one queue (RFC 5040 Figure 4, RFC 7306 Figure 2) */
    if (h->qn != oi->qn)
        return FAIL_UNTAGGED(UIW_DDP_EC_U_INVALID_QN);
    if (len < UIW_HDR_UNTAGGED_LEN)
        return -EAGAIN;
    h->msn = uiw_get_be32(in + UT_OFF_MSN);
    h->mo = uiw_get_be32(in + UT_OFF_MO);
    /* RFC 5041 §7.1 (3): the one-header buffer has only offset 0 */
    if (op_hdr_only(op) && h->mo != 0)
        return FAIL_UNTAGGED(UIW_DDP_EC_U_INVALID_MO);
    if (!op_hdr_only(op))
        return UIW_HDR_UNTAGGED_LEN;

    p = in + UIW_HDR_UNTAGGED_LEN;
    body = len - UIW_HDR_UNTAGGED_LEN;
    if (op == UIW_OP_TERMINATE) {
        n = decode_term(p, body, &h->u.term);
        return n < 0 ? n : UIW_HDR_UNTAGGED_LEN + n;
    }
    if (op == UIW_OP_ATOMIC_REQ && body >= 4) {
        /* RFC 7306 §5.2.1: 28 reserved bits (ignored), AOpCode(4).
         * Item 4: an unsupported AOpCode MUST surface an error; no Terminate
         * code is defined for it (RFC 7306 §8, RFC 6580 §3.1), so it is the
         * Remote Operation Error "Unspecified Error". */
        h->u.atomic_req.aop = p[3] & 0xFu;
        if (!aop_defined(h->u.atomic_req.aop))
            return FAIL_RDMAP_OP(UIW_RDMAP_EC_UNSPECIFIED_OTHER);
    }
    if (body < oi->rdmap_len)
        return -EAGAIN;
    switch (op) {
    case UIW_OP_READ_REQ: {
        /* RFC 5040 §4.4 Figure 6 */
        uiw_rreq *r = &h->u.rreq;
        r->sink_stag = uiw_get_be32(p);
        r->sink_to = uiw_get_be64(p + 4);
        r->read_size = uiw_get_be32(p + 12);
        r->src_stag = uiw_get_be32(p + 16);
        r->src_to = uiw_get_be64(p + 20);
        break;
    }
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        /* RFC 7306 §6.2 Figure 7 */
        memcpy(h->u.imm, p, UIW_IMM_DATA_LEN);
        break;
    case UIW_OP_ATOMIC_REQ: {
        /* RFC 7306 §5.2.1 Figure 4 */
        uiw_atomic_req *a = &h->u.atomic_req;
        a->req_id = uiw_get_be32(p + 4);
        a->stag = uiw_get_be32(p + 8);
        a->to = uiw_get_be64(p + 12);
        a->add_swap = uiw_get_be64(p + 20);
        a->add_swap_mask = uiw_get_be64(p + 28);
        a->compare = uiw_get_be64(p + 36);
        a->compare_mask = uiw_get_be64(p + 44);
        break;
    }
    case UIW_OP_ATOMIC_RESP:
        /* RFC 7306 §5.2.2 Figure 6 */
        h->u.atomic_resp.req_id = uiw_get_be32(p);
        h->u.atomic_resp.orig_value = uiw_get_be64(p + 4);
        break;
    default:
        break;
    }
    return UIW_HDR_UNTAGGED_LEN + oi->rdmap_len;
}

void uiw_hdr_init(uiw_hdr *h, bool tagged, unsigned opcode)
{
    memset(h, 0, sizeof(*h));
    h->tagged = tagged;
    h->last = true;
    h->ddp_version = UIW_DDP_VERSION;
    h->rdmap_version = UIW_RDMAP_VERSION;
    h->opcode = (uint8_t)opcode;
}

void uiw_hdr_init_untagged(uiw_hdr *h, unsigned opcode, unsigned qn, uint32_t msn)
{
    uiw_hdr_init(h, false, opcode);
    h->qn = qn;
    h->msn = msn;
    h->mo = 0;
}

unsigned uiw_term_hdr_image(const uiw_hdr *h, unsigned ulpdu_len, bool with_rreq, uint8_t *out)
{
    uint8_t tmp[UIW_RX_HDRBUF];
    unsigned ddp = h->tagged ? UIW_HDR_TAGGED_LEN : UIW_HDR_UNTAGGED_LEN;
    unsigned n;
    int r;

    if (h->opcode == UIW_OP_TERMINATE)
        return 0;
    r = uiw_hdr_encode(h, tmp, sizeof(tmp));
    if (r < (int)ddp)
        return 0;
    /* RFC 5040 §4.8: DDP Segment Length, then the terminated DDP header */
    out[0] = (uint8_t)(ulpdu_len >> 8);
    out[1] = (uint8_t)ulpdu_len;
    memcpy(out + UIW_TERM_DDP_SEGLEN_LEN, tmp, ddp);
    n = UIW_TERM_DDP_SEGLEN_LEN + ddp;
    /* ... and the Read Request header (R) for errors on a Read Request */
    if (with_rreq && !h->tagged && h->opcode == UIW_OP_READ_REQ &&
        r >= (int)(UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN)) {
        memcpy(out + n, tmp + UIW_HDR_UNTAGGED_LEN, UIW_RREQ_LEN);
        n += UIW_RREQ_LEN;
    }
    return n;
}

void uiw_term_attach(uiw_term *tm, uiw_term_cause c, const uint8_t *bad, unsigned len)
{
    unsigned ddp;

    memset(tm, 0, sizeof(*tm));
    tm->cause = c;
    /* RFC 5040 §4.8 Figure 10: LLP errors and a Local Catastrophic Error
     * (RDMAP error type 0) attach nothing */
    if (c.layer == UIW_LAYER_LLP || (c.layer == UIW_LAYER_RDMAP && c.etype == 0) || !bad ||
        len < UIW_TERM_DDP_SEGLEN_LEN)
        return;
    tm->hdr_mpa = true; /* M: the DDP Segment Length is valid */
    ddp = len > UIW_TERM_DDP_SEGLEN_LEN && (bad[UIW_TERM_DDP_SEGLEN_LEN] & 0x80)
              ? UIW_HDR_TAGGED_LEN
              : UIW_HDR_UNTAGGED_LEN;
    if (len < UIW_TERM_DDP_SEGLEN_LEN + ddp) {
        tm->ddp_hdr_len = UIW_TERM_DDP_SEGLEN_LEN;
        memcpy(tm->ddp_hdr, bad, UIW_TERM_DDP_SEGLEN_LEN);
        return;
    }
    tm->hdr_ddp = true; /* D */
    tm->ddp_hdr_len = (uint8_t)(UIW_TERM_DDP_SEGLEN_LEN + ddp);
    memcpy(tm->ddp_hdr, bad, tm->ddp_hdr_len);
    /* R: RDMAP errors on a Read Request (bad images of 48 bytes) */
    if (c.layer == UIW_LAYER_RDMAP && len >= (unsigned)tm->ddp_hdr_len + UIW_RREQ_LEN) {
        tm->hdr_rdma = true;
        tm->rdma_hdr_len = UIW_RREQ_LEN;
        memcpy(tm->rdma_hdr, bad + tm->ddp_hdr_len, UIW_RREQ_LEN);
    }
}

bool uiw_term_untagged_qn_msn(const uiw_term *t, uint32_t *qn, uint32_t *msn)
{
    const uint8_t *d = t->ddp_hdr + UIW_TERM_DDP_SEGLEN_LEN;

    if (!t->hdr_ddp || t->ddp_hdr_len != UIW_TERM_DDP_SEGLEN_LEN + UIW_HDR_UNTAGGED_LEN ||
        (d[0] & 0x80))
        return false;
    /* RFC 5041 §4.3: ctrl(2) rsvd/inv(4) QN(4) MSN(4) MO(4) */
    *qn = uiw_get_be32(d + 6);
    *msn = uiw_get_be32(d + 10);
    return true;
}

void uiw_useq_init(uiw_useq *q)
{
    memset(q, 0, sizeof(*q));
    q->next_msn = 1; /* RFC 5041 §5.1.2: the initial MSN is 1 */
}

static bool useq_fail(uiw_term_cause *cause, unsigned layer, unsigned etype, unsigned ecode)
{
    cause->layer = (uint8_t)layer;
    cause->etype = (uint8_t)etype;
    cause->ecode = (uint8_t)ecode;
    return false;
}

bool uiw_useq_check(const uiw_useq *q, const uiw_hdr *h, uiw_term_cause *cause)
{
    if (!q->open) {
        /* RFC 5041 §7.1 check 3 (MSN range) and §5.1.2 (+1 per message) */
        if (h->msn != q->next_msn)
            return useq_fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED,
                             UIW_DDP_EC_U_INVALID_MSN_RANGE);
        /* RFC 5041 §7.1 check 5: a message starts at MO 0 */
        if (h->mo != 0)
            return useq_fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO);
        return true;
    }
    /* RFC 5041 §5.1.2: segments of one message carry its MSN ... */
    if (h->msn != q->msn)
        return useq_fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE);
    /* ... and one RDMAP message has one opcode (RFC 5040 §5.1) ... */
    if (h->opcode != q->opcode)
        return useq_fail(cause, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                         UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    /* ... at contiguous offsets (RFC 5041 §5.2) */
    if (h->mo != q->mo_next)
        return useq_fail(cause, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO);
    return true;
}

void uiw_useq_accept(uiw_useq *q, const uiw_hdr *h, uint32_t payload_len)
{
    q->open = true;
    q->msn = h->msn;
    q->opcode = h->opcode;
    q->mo_next = h->mo + payload_len;
    if (h->last) {
        q->open = false;
        q->next_msn = h->msn + 1;
    }
}
