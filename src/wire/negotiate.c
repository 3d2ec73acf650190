/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The MPA startup negotiation (RFC 5044 §7.1, RFC 6581 §5-§10) as a pure
 * state machine: no I/O, no clock, no allocation. The caller moves bytes;
 * this file decides what to answer and what the connection will use.
 *
 * Rules implemented (each also cited where it is applied):
 *
 * Revision (RFC 5044 §7.1.1 Rev, RFC 6581 §6 Rev and §10).
 *   - We send Rev 2 with S (the RFC 6581 IRD/ORD words) or Rev 1 without.
 *   - Responder: Rev 0 (RDMAC, DDP/RDMAP version 0) cannot interoperate
 *     with our version-1 DDP/RDMAP (RFC 5044 Appendix C): close, no Reply.
 *     Rev 1 is always accepted (RFC 6581 §6 "MUST continue to accept") and
 *     answered with Rev 1. Rev 2 is answered with Rev 2 (Rev 1 if our
 *     policy is Rev 1). Rev > 2: RFC 6581 §6 asks for "two or higher" for
 *     the enhanced features and RFC 5044 Appendix C lets Request and Reply
 *     revisions differ, so we answer with the highest revision we speak
 *     (2) and let the initiator decide whether it can interoperate with it.
 *     (Linux siw instead drops such a Request without a Reply.)
 *   - Responder: an unenhanced Request (S=0) gets an unenhanced Reply and an
 *     enhanced one an enhanced Reply (RFC 6581 §10). An enhanced Request to a
 *     Rev-1-only policy is improperly formatted for us: close (RFC 6581 §10).
 *   - Initiator: a Reply with Rev 0 or Rev > 2 cannot interoperate: error
 *     (RFC 5044 §7.1.1). A Reply revision different from ours is otherwise
 *     accepted (Appendix C); the revision in use is the lower one.
 *
 * CRC (RFC 5044 §7.1.1 C, §4.4).
 *   C=1 in either frame means both sides generate and check CRCs; CRCs are
 *   off only when both frames carry C=0. So there is no way for a peer to
 *   refuse CRC: C=0 is a preference, never a refusal, and a side that
 *   requires CRC just sends C=1 and never needs to reject. For the same
 *   reason a side that prefers no CRC cannot decline the peer's C=1:
 *   UIW_CRC_OFF and UIW_CRC_OPTIONAL behave the same. The responder echoes
 *   the Request's C=1 (CRC is on anyway; a siw initiator with
 *   mpa_crc_required refuses a Reply without C).
 *
 * Markers (RFC 5044 §7.1.1 M): each side's M says it REQUIRES markers in
 *   the FPDUs it RECEIVES. Ours is pol.markers; the peer's M asks us to
 *   send them. A responder that cannot send markers rejects (R=1, as siw
 *   does); an initiator that cannot fails with LLP/MPA/code 4.
 *
 * IRD/ORD (RFC 6581 §9.1), only when both frames are enhanced.
 *   Responder: IRD := max(our IRD, initiator ORD) capped at max_ird;
 *   ORD := min(our ORD, initiator IRD); a ULP-required ORD (min_ord) above
 *   the initiator IRD rejects with the required ORD in the Reject's ORD
 *   (cause LLP/MPA/6). 0x3FFF from the initiator leaves the local value
 *   unchanged and is echoed as 0x3FFF; 0x3FFF in our own policy means the
 *   ULP negotiates that value itself and is sent as 0x3FFF.
 *   Initiator: IRD := max(our IRD, responder ORD), more than max_ird is
 *   LLP/MPA/6 with a Terminate; ORD := min(our ORD, responder IRD);
 *   0x3FFF from the responder leaves the local value unchanged.
 *   The peer's values are reported in every outcome, reject included.
 *
 * Peer-to-peer and RTR (RFC 6581 §9.2, §9.3, §5).
 *   Initiator: A=1 and one of B (Send), C (Write), D (Read) per offered
 *   type. Responder: mirrors A; picks one type the initiator offered and it
 *   supports, preferring Write, then Read, then Send (siw: Write, else
 *   Read, never Send); if none matches it names one it supports anyway
 *   (§9.2 "MUST set at least one"), and only a responder that supports no
 *   type at all rejects (LLP/MPA/7). Initiator: a Reply whose A differs
 *   from ours or that names no type we offered is LLP/MPA/7 with a
 *   Terminate. A Read RTR needs ORD >= 1 at the initiator and IRD >= 1 at
 *   the responder (§9.1 example); an initiator offering it asks for ORD >= 1
 *   itself (siw as responder does not raise its IRD).
 *
 * First FPDU (RFC 5044 §7.1.2 rule 4; RFC 6581 §5): the responder must
 *   receive one FPDU before sending any (await_rtr, set on every accept);
 *   a peer-to-peer initiator sends the RTR before anything else (send_rtr).
 */
#include "uiw_port.h"
#include "uiwarp/wire.h"

#define AUTO    UIW_MPA_IRD_ORD_AUTO
#define RTR_ALL ((uint8_t)(UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ))

void uiw_mpa_policy_default(uiw_mpa_policy *pol)
{
    memset(pol, 0, sizeof(*pol));
    pol->rev = 2;                                  /* RFC 6581 words, as siw */
    pol->crc = UIW_CRC_OPTIONAL;                   /* siw default: C=0 */
    pol->markers = false;                          /* siw: no markers */
    pol->accept_markers = false;                   /* we do not send them */
    pol->p2p = false;                              /* client-server, no RTR */
    pol->rtr_offer = UIW_RTR_WRITE | UIW_RTR_READ; /* siw's set */
    pol->ird = UIW_MPA_DEFAULT_IRD;
    pol->ord = UIW_MPA_DEFAULT_ORD;
    pol->max_ird = UIW_MPA_DEFAULT_MAX_IRD;
}

static inline uint16_t min16(uint16_t a, uint16_t b)
{
    return a < b ? a : b;
}

static inline uint16_t max16(uint16_t a, uint16_t b)
{
    return a > b ? a : b;
}

/* Largest IRD we may set: max_ird, never below the configured IRD, and a
 * real 14-bit depth (0x3FFF is the "not negotiated" value). */
static uint16_t eff_max_ird(const uiw_mpa_policy *pol)
{
    uint16_t m = max16(pol->max_ird, pol->ird);
    return m >= AUTO ? AUTO - 1 : m;
}

/* One RTR type from a set: Write, then Read, then Send (RFC 6581 §9.2
 * leaves the choice open; this is siw's preference, Send last because it
 * needs a posted Receive at the responder). */
static uint8_t rtr_pick(uint8_t set)
{
    if (set & UIW_RTR_WRITE)
        return UIW_RTR_WRITE;
    if (set & UIW_RTR_READ)
        return UIW_RTR_READ;
    if (set & UIW_RTR_SEND)
        return UIW_RTR_SEND;
    return UIW_RTR_NONE;
}

/* The ORD the initiator puts in its Request: a Read RTR is an RDMA Read of
 * the initiator's, so it needs ORD >= 1 (RFC 6581 §9.1 lets the responder
 * raise its IRD for it, but siw as responder sets IRD = initiator ORD). */
static uint16_t request_ord(const uiw_mpa_policy *pol)
{
    if (pol->p2p && (pol->rtr_offer & UIW_RTR_READ) && pol->ord == 0)
        return 1;
    return pol->ord;
}

static int policy_check(const uiw_mpa_policy *pol, bool initiator)
{
    if (pol->rev != 1 && pol->rev != 2)
        return -EINVAL;
    if (pol->crc > UIW_CRC_REQUIRED)
        return -EINVAL;
    if (pol->ird > AUTO || pol->ord > AUTO || pol->min_ord >= AUTO)
        return -EINVAL;
    if (pol->ord != AUTO && pol->min_ord > pol->ord)
        return -EINVAL;
    if (pol->rtr_offer & ~RTR_ALL)
        return -EINVAL;
    if (pol->ulp_pd_len && !pol->ulp_pd)
        return -EINVAL;
    if (pol->ulp_pd_len > UIW_MPA_MAX_PD)
        return -EMSGSIZE;
    if (initiator) {
        /* RFC 6581 §9.2: peer-to-peer is an enhanced (Rev 2, S) feature and
         * needs at least one RTR type to offer. */
        if (pol->p2p && (pol->rev < 2 || !pol->rtr_offer))
            return -EINVAL;
        if (pol->rev >= 2 && pol->ulp_pd_len > UIW_MPA_MAX_PD - UIW_MPA_RFC6581_LEN)
            return -EMSGSIZE;
    }
    return 0;
}

static void set_term(uiw_mpa_neg *n, uint8_t ecode, bool send)
{
    n->term_valid = true;
    n->term_send = send;
    n->term.layer = UIW_LAYER_LLP;
    n->term.etype = UIW_LLP_ET_MPA;
    n->term.ecode = ecode;
}

/* The peer's frame is not one we can use: RFC 5044 §7.1.2 rules 2, 3 and 5
 * say close the TCP connection; RFC 5044 §8 code 4 is the error reported
 * ("the TCP connection MUST be immediately closed", so no Terminate). */
static int fail_proto(uiw_mpa_neg *n, const char *why)
{
    n->state = UIW_MPA_S_FAILED;
    n->error = -EPROTO;
    n->why = why;
    set_term(n, UIW_MPA_EC_INVALID_REQ, false);
    return -EPROTO;
}

static void copy_peer_pd(uiw_mpa_result *r, const uiw_mpa_frame *f)
{
    r->peer_pd_len = f->ulp_pd_len;
    memcpy(r->peer_pd, f->ulp_pd, f->ulp_pd_len);
}

int uiw_mpa_neg_start_initiator(uiw_mpa_neg *n, const uiw_mpa_policy *pol, uint8_t *out, size_t cap)
{
    if (!n || !pol)
        return -EINVAL;
    memset(n, 0, sizeof(*n));
    n->initiator = true;
    int rc = policy_check(pol, true);
    if (rc < 0)
        return rc;
    n->pol = *pol;

    uiw_mpa_frame f;
    memset(&f, 0, offsetof(uiw_mpa_frame, ulp_pd));
    f.kind = UIW_MPA_REQUEST; /* RFC 5044 §7.1.2 rule 1 */
    f.markers = pol->markers;
    f.crc = pol->crc == UIW_CRC_REQUIRED;
    f.rev = pol->rev;
    /* RFC 6581 §10: the enhanced format only when enhanced features are
     * wanted; Rev 2 in our policy means "negotiate IRD/ORD" (siw always
     * does). */
    f.enhanced = pol->rev >= 2;
    if (f.enhanced) {
        f.ird = pol->ird;
        f.ord = request_ord(pol);
        /* RFC 6581 §9.2: A=1 and one flag per supported RTR type; B, C, D
         * MUST be 0 when A is 0. */
        f.p2p = pol->p2p;
        f.rtr = pol->p2p ? pol->rtr_offer : 0;
    }
    f.ulp_pd_len = pol->ulp_pd_len;
    if (pol->ulp_pd_len)
        memcpy(f.ulp_pd, pol->ulp_pd, pol->ulp_pd_len);
    rc = uiw_mpa_encode(&f, out, cap);
    if (rc < 0)
        return rc;
    n->state = UIW_MPA_S_WAIT_REP;
    return rc;
}

void uiw_mpa_neg_start_responder(uiw_mpa_neg *n, const uiw_mpa_policy *pol)
{
    if (!n)
        return;
    memset(n, 0, sizeof(*n));
    n->initiator = false;
    if (!pol || policy_check(pol, false) < 0) {
        n->state = UIW_MPA_S_FAILED;
        n->error = -EINVAL;
        n->why = "invalid policy";
        return;
    }
    n->pol = *pol;
    n->state = UIW_MPA_S_WAIT_REQ; /* RFC 5044 §7.1.2 rule 2 */
}

/* Responder: the Request is complete and well formed; build the Reply. */
static int respond(uiw_mpa_neg *n, uint8_t *out, size_t cap, size_t *out_len)
{
    const uiw_mpa_policy *pol = &n->pol;
    const uiw_mpa_frame *rq = &n->peer;
    uiw_mpa_result *r = &n->result;

    /* RFC 5044 §7.1.1 Rev / Appendix C: Rev 0 is the RDMAC protocol with
     * DDP/RDMAP version 0, which we do not speak. */
    if (rq->rev == 0)
        return fail_proto(n, "MPA Rev 0 (RDMAC) request: cannot interoperate");
    /* RFC 6581 §10: a responder without enhanced setup MUST close on an
     * enhanced request. */
    if (rq->enhanced && pol->rev < 2)
        return fail_proto(n, "enhanced (S) request but the policy is Rev 1");

    uiw_mpa_frame rp;
    memset(&rp, 0, offsetof(uiw_mpa_frame, ulp_pd));
    rp.kind = UIW_MPA_REPLY;
    /* Revision: Rev 1 gets Rev 1 (RFC 6581 §6, §10); otherwise the highest
     * we speak, never above what we were asked for. */
    rp.rev = rq->rev == 1 ? 1 : pol->rev;
    rp.enhanced = rq->enhanced; /* RFC 6581 §10 */
    /* RFC 5044 §7.1.1 C: either side's C=1 turns CRC on for both; echo it
     * so the Reply states what is in use. */
    rp.crc = rq->crc || pol->crc == UIW_CRC_REQUIRED;
    /* RFC 5044 §7.1.1 M: ours asks the initiator to mark what it sends. */
    rp.markers = pol->markers;

    r->rev = rp.rev;
    r->crc = rp.crc;
    r->markers_rx = pol->markers;
    r->markers_tx = rq->markers;
    r->enhanced = rq->enhanced;
    copy_peer_pd(r, rq);

    int reason = 0; /* negative errno when we reject */
    const char *why = NULL;
    /* A Request demanding markers we cannot send: reject (RFC 5044 §7.1.2
     * rule 2 allows a Reject for unacceptable parameters; siw does this). */
    if (rq->markers && !pol->accept_markers) {
        reason = -EOPNOTSUPP;
        why = "initiator requires markers (M=1) and we cannot send them";
    }

    uint16_t ird = pol->ird, ord = pol->ord, ird_field = 0, ord_field = 0;
    uint8_t rtr = UIW_RTR_NONE;
    if (rq->enhanced) {
        uint16_t i_ird = rq->ird, i_ord = rq->ord;
        uint16_t maxi = eff_max_ird(pol);
        bool ird_fixed;
        r->peer_ird = i_ird;
        r->peer_ord = i_ord;
        /* RFC 6581 §9.1 responder IRD: at least the initiator ORD, within
         * what we can support. Initiator ORD 0x3FFF: "leaving its local
         * endpoint IRD value unchanged and setting the IRD to 0x3FFF". */
        if (i_ord == AUTO) {
            ird = pol->ird;
            ird_field = AUTO;
            ird_fixed = true;
        } else if (pol->ird == AUTO) {
            ird = AUTO; /* our ULP negotiates its IRD itself */
            ird_field = AUTO;
            ird_fixed = true;
        } else {
            ird = min16(max16(pol->ird, i_ord), maxi);
            ird_field = ird;
            ird_fixed = false;
        }
        /* RFC 6581 §9.2: mirror A; B/C/D are ignored when A is 0. */
        if (rq->p2p) {
            uint8_t usable = pol->rtr_offer;
            /* A Read RTR is an inbound RDMA Read: it needs IRD >= 1, which
             * we may raise to (RFC 6581 §9.1 example). */
            if (ird == 0 && (ird_fixed || maxi < 1))
                usable &= (uint8_t)~UIW_RTR_READ;
            rtr = rtr_pick(rq->rtr & usable);
            /* None offered that we support: RFC 6581 §9.2 "MUST set at
             * least one RTR indication type option it supports"; the
             * initiator then decides (it sends LLP/MPA/7). */
            if (rtr == UIW_RTR_NONE)
                rtr = rtr_pick(usable);
            if (rtr == UIW_RTR_NONE && !reason) {
                reason = -EOPNOTSUPP;
                why = "peer-to-peer request but no RTR type supported";
                set_term(n, UIW_MPA_EC_NO_MATCHING_RTR, false);
            }
            if (rtr == UIW_RTR_READ && ird == 0) {
                ird = 1;
                ird_field = 1;
            }
        }
        /* RFC 6581 §9.1 responder ORD: at most the initiator IRD.
         * Initiator IRD 0x3FFF: ORD unchanged, 0x3FFF in the Reply. */
        if (i_ird == AUTO) {
            ord = pol->ord;
            ord_field = AUTO;
        } else if (pol->ord == AUTO) {
            ord = AUTO;
            ord_field = AUTO;
        } else {
            ord = min16(pol->ord, i_ird);
            ord_field = ord;
            /* "MAY reject the connection request if the initiator IRD is
             * not sufficient for the ULP-required ORD and specify the
             * required ORD in the MPA Reject Frame responder ORD" */
            if (pol->min_ord > i_ird && !reason) {
                reason = -ENOBUFS;
                why = "initiator IRD below the ORD our ULP requires";
                ord_field = pol->min_ord;
                set_term(n, UIW_MPA_EC_INSUFFICIENT_IRD, false);
            }
        }
        rp.ird = ird_field;
        rp.ord = ord_field;
        rp.p2p = rq->p2p;
        rp.rtr = rtr;
    }
    r->ird = ird;
    r->ord = ord;
    r->p2p = rq->enhanced && rq->p2p;
    r->rtr = r->p2p ? rtr : UIW_RTR_NONE;

    /* The ULP's own decision on the Private Data (RFC 5044 §7.1.2 rule 2, 6),
     * after the MPA-level checks above. */
    if (!reason && pol->responder_rejects) {
        reason = -ECONNREFUSED;
        why = "rejected by the ULP";
    }
    if (reason) {
        /* RFC 5044 §7.1.2 rule 2: Reply with R=1, then exit MPA leaving TCP
         * open. The initiator exits MPA too (rule 3), so no Terminate can
         * follow: the cause (if any) is reported with term_send = false. */
        rp.reject = true;
        rp.markers = false;
        if (reason == -ECONNREFUSED && pol->ulp_pd_len) {
            rp.ulp_pd_len = pol->ulp_pd_len;
            memcpy(rp.ulp_pd, pol->ulp_pd, pol->ulp_pd_len);
        }
    } else if (pol->ulp_pd_len) {
        rp.ulp_pd_len = pol->ulp_pd_len;
        memcpy(rp.ulp_pd, pol->ulp_pd, pol->ulp_pd_len);
    }
    int len = uiw_mpa_encode(&rp, out, cap);
    if (len < 0) {
        /* Only the ULP's private data can make this fail: more than
         * 512 - 4 bytes with an enhanced Reply (RFC 6581 §9). */
        n->state = UIW_MPA_S_FAILED;
        n->error = len;
        n->why = "our private data does not fit the Reply";
        n->term_valid = false;
        return len;
    }
    *out_len = (size_t)len;
    if (reason) {
        n->state = UIW_MPA_S_REJECTED;
        n->error = reason;
        n->why = why;
        return 0;
    }
    /* RFC 5044 §7.1.2 rule 4: receive one FPDU before sending any; with
     * peer-to-peer that FPDU is the RTR (RFC 6581 §5). */
    r->await_rtr = true;
    r->send_rtr = false;
    n->state = UIW_MPA_S_DONE;
    return 0;
}

/* Initiator: the Reply is complete and well formed; validate it. */
static int check_reply(uiw_mpa_neg *n)
{
    const uiw_mpa_policy *pol = &n->pol;
    const uiw_mpa_frame *rp = &n->peer;
    uiw_mpa_result *r = &n->result;
    bool sent_crc = pol->crc == UIW_CRC_REQUIRED;
    bool sent_enh = pol->rev >= 2;
    uint16_t sent_ord = sent_enh ? request_ord(pol) : pol->ord;

    /* RFC 6581 §9.1: pass the responder's IRD/ORD to the ULP for both
     * Accept and Reject; RFC 5044 §7.1.2 rule 3: and its Private Data. */
    copy_peer_pd(r, rp);
    if (rp->enhanced) {
        r->peer_ird = rp->ird;
        r->peer_ord = rp->ord;
    }
    /* RFC 5044 §7.1.2 rule 3: R=1 means exit MPA, TCP left open. */
    if (rp->reject) {
        n->state = UIW_MPA_S_REJECTED;
        n->error = -ECONNREFUSED;
        n->why = "rejected by the responder (R=1)";
        return 0;
    }
    /* RFC 5044 §7.1.1 Rev: we interoperate with Rev 1 and 2 only. */
    if (rp->rev == 0 || rp->rev > 2)
        return fail_proto(n, "Reply revision we cannot interoperate with");

    r->rev = rp->rev < pol->rev ? rp->rev : pol->rev;
    r->crc = sent_crc || rp->crc; /* RFC 5044 §7.1.1 C */
    r->markers_rx = pol->markers; /* our M: the responder marks its FPDUs */
    r->markers_tx = rp->markers;  /* its M: we must mark ours */
    /* RFC 6581 §10: enhanced only if both frames are; a Reply that dropped
     * S (or added it unasked) is accepted, and IRD/ORD stay the ULP's. */
    r->enhanced = sent_enh && rp->enhanced;
    r->ird = pol->ird;
    r->ord = sent_ord;
    r->send_rtr = false;
    r->await_rtr = false;

    if (rp->markers && !pol->accept_markers) {
        n->state = UIW_MPA_S_FAILED;
        n->error = -EOPNOTSUPP;
        n->why = "responder requires markers (M=1) and we cannot send them";
        /* Not a malformed frame, but not one we can accept: code 4, and
         * the connection is closed without a Terminate (RFC 5044 §8). */
        set_term(n, UIW_MPA_EC_INVALID_REQ, false);
        return 0;
    }

    if (r->enhanced) {
        uint16_t r_ird = rp->ird, r_ord = rp->ord;
        /* RFC 6581 §9.1: "set its IRD at least to the responder ORD and
         * its ORD at most to the responder IRD"; 0x3FFF leaves the local
         * value unchanged. */
        if (r_ird != AUTO && sent_ord != AUTO)
            r->ord = min16(sent_ord, r_ird);
        if (r_ord != AUTO && pol->ird != AUTO) {
            uint16_t need = max16(pol->ird, r_ord);
            if (need > eff_max_ird(pol)) {
                /* "it MUST send a TERM message ... Layer 2, Error Type 0,
                 * Error Code 6" */
                n->state = UIW_MPA_S_FAILED;
                n->error = -ENOBUFS;
                n->why = "responder ORD exceeds the IRD we can support";
                set_term(n, UIW_MPA_EC_INSUFFICIENT_IRD, true);
                return 0;
            }
            r->ird = need;
        }
    }

    /* RFC 6581 §9.2: the responder MUST mirror A; with A=1 we MUST send one
     * of the RTR types it names, else TERM LLP/MPA/7. */
    bool want_p2p = pol->p2p;
    bool got_p2p = r->enhanced && rp->p2p;
    if (want_p2p || got_p2p) {
        uint8_t usable = pol->rtr_offer;
        if (r->ord == 0)
            usable &= (uint8_t)~UIW_RTR_READ; /* a Read RTR needs ORD >= 1 */
        uint8_t rtr = want_p2p && got_p2p ? rtr_pick(rp->rtr & usable) : UIW_RTR_NONE;
        if (rtr == UIW_RTR_NONE) {
            n->state = UIW_MPA_S_FAILED;
            n->error = -EOPNOTSUPP;
            n->why = !got_p2p    ? "responder did not accept peer-to-peer (A=0)"
                     : !want_p2p ? "responder set A=1 for a client-server request"
                                 : "no RTR type in the Reply that we can send";
            set_term(n, UIW_MPA_EC_NO_MATCHING_RTR, true);
            return 0;
        }
        r->p2p = true;
        r->rtr = rtr;
        r->send_rtr = true; /* RFC 6581 §5: the RTR goes first */
    }
    n->state = UIW_MPA_S_DONE;
    return 0;
}

/* Linux siw rejects an enhanced Request (M=1, say) by echoing the Request's
 * flags with R set and PD_Length 0, S still set (PEERS.md §2: "R flag set, M
 * cleared, pd_len 0"). Strictly that is malformed (RFC 6581 §6: S means the
 * Private Data begins with the 4 IRD/ORD bytes), but its meaning is plain:
 * be lenient and take it as a Reject without IRD/ORD words. True when buf
 * holds a complete Reply header of that shape. */
static bool short_reject_hdr(const uint8_t *buf, size_t have)
{
    uiw_mpa_frame f;
    if (have < UIW_MPA_HDR_LEN)
        return false;
    unsigned pd_len = (unsigned)buf[18] << 8 | buf[19];
    if (!(buf[16] & UIW_MPA_FLAG_R) || !(buf[16] & UIW_MPA_FLAG_S) || buf[17] < 2 ||
        pd_len >= UIW_MPA_RFC6581_LEN)
        return false;
    /* Same header with S cleared must be a well-formed Reply (key check). */
    uint8_t hdr[UIW_MPA_HDR_LEN];
    memcpy(hdr, buf, UIW_MPA_HDR_LEN);
    hdr[16] &= (uint8_t)~UIW_MPA_FLAG_S;
    hdr[18] = hdr[19] = 0;
    return uiw_mpa_decode(hdr, UIW_MPA_HDR_LEN, UIW_MPA_REPLY, &f) == UIW_MPA_HDR_LEN;
}

int uiw_mpa_neg_feed(uiw_mpa_neg *n, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                     size_t *out_len)
{
    if (out_len)
        *out_len = 0;
    if (!n || (!in && len))
        return -EINVAL;
    switch (n->state) {
    case UIW_MPA_S_WAIT_REQ:
    case UIW_MPA_S_WAIT_REP:
        break;
    case UIW_MPA_S_DONE:
    case UIW_MPA_S_REJECTED:
    case UIW_MPA_S_FAILED:
        return 0; /* what follows the frame is not ours */
    default:
        return -EINVAL;
    }
    if (!n->initiator) {
        /* Room for any Reply we may build: header, RFC 6581 words, ULP data. */
        size_t need = UIW_MPA_HDR_LEN + UIW_MPA_RFC6581_LEN + n->pol.ulp_pd_len;
        if (need > UIW_MPA_MAX_FRAME)
            need = UIW_MPA_MAX_FRAME;
        if (!out || !out_len || cap < need)
            return -EMSGSIZE;
    }
    unsigned expect = n->initiator ? UIW_MPA_REPLY : UIW_MPA_REQUEST;
    size_t used = 0;
    int rc = -EAGAIN;
    while (used < len) {
        /* Take only the frame's bytes: the header first, then exactly
         * PD_Length more. The decoder has validated PD_Length <= 512 before
         * it is used here, so buf never overflows. */
        size_t target = UIW_MPA_HDR_LEN;
        if (n->have >= UIW_MPA_HDR_LEN)
            target += (size_t)n->buf[18] << 8 | n->buf[19];
        size_t take = target - n->have;
        if (take > len - used)
            take = len - used;
        memcpy(n->buf + n->have, in + used, take);
        n->have = (uint16_t)(n->have + take);
        used += take;
        rc = uiw_mpa_decode(n->buf, n->have, expect, &n->peer);
        if (rc == -EPROTO && n->initiator && short_reject_hdr(n->buf, n->have)) {
            size_t total = UIW_MPA_HDR_LEN + ((size_t)n->buf[18] << 8 | n->buf[19]);
            rc = n->have < total ? -EAGAIN : 1;
        }
        if (rc != -EAGAIN)
            break;
    }
    if (rc == -EAGAIN)
        return (int)used;
    if (rc == 1) {
        /* the siw short Reject: report it as a Reject, no IRD/ORD words,
         * whatever (< 4) bytes it carried as private data */
        uiw_mpa_frame *f = &n->peer;
        memset(f, 0, offsetof(uiw_mpa_frame, ulp_pd));
        f->kind = UIW_MPA_REPLY;
        f->markers = n->buf[16] & UIW_MPA_FLAG_M;
        f->crc = n->buf[16] & UIW_MPA_FLAG_C;
        f->reject = true;
        f->res = n->buf[16] & UIW_MPA_FLAG_RES;
        f->rev = n->buf[17];
        f->pd_len = f->ulp_pd_len = (uint16_t)(n->have - UIW_MPA_HDR_LEN);
        memcpy(f->ulp_pd, n->buf + UIW_MPA_HDR_LEN, f->ulp_pd_len);
        rc = check_reply(n);
        return rc < 0 ? rc : (int)used;
    }
    if (rc < 0) {
        /* RFC 5044 §7.1.2 rules 5 and 8: a key of the wrong kind is an
         * Initiator/Initiator (or Responder/Responder) startup. */
        uiw_mpa_frame any;
        bool other_key = uiw_mpa_decode(n->buf, n->have, 0, &any) != -EPROTO;
        if (other_key)
            return fail_proto(n, n->initiator ? "Request key where a Reply was expected"
                                              : "Reply key where a Request was expected");
        return fail_proto(n, "malformed MPA frame (key, PD_Length or S)");
    }
    if (n->initiator)
        rc = check_reply(n);
    else
        rc = respond(n, out, cap, out_len);
    return rc < 0 ? rc : (int)used;
}
