/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the MPA frame codec (src/wire/mpa.c) and the MPA
 * negotiation (src/wire/negotiate.c).
 *
 * Every input is used twice:
 *  1. as a raw byte stream (the seeds of scripts/fuzz-seeds.sh are bare
 *     MPA frames from the captures): decoded with each expected kind, and
 *     fed to both roles under a few fixed policies, whole and byte by byte;
 *  2. as "8 configuration bytes + stream": the configuration picks the
 *     initiator and responder policies and the feeding piece sizes, the rest
 *     is fed to both roles in those pieces and compared with feeding it
 *     whole; then the two policies negotiate with each other, the Request
 *     and the Reply again fed in those pieces.
 * Invariants checked: a decoded frame re-encodes to the same bytes and
 * decodes equal; consumed <= len and never past the frame; the state, error
 * and Terminate fields are consistent; the outcome does not depend on how
 * the bytes were split; two sides that both complete agree.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uiwarp/wire.h"

#define ASSERT(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #c);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static bool frame_eq(const uiw_mpa_frame *a, const uiw_mpa_frame *b)
{
    return a->kind == b->kind && a->markers == b->markers && a->crc == b->crc &&
           a->reject == b->reject && a->enhanced == b->enhanced && a->res == b->res &&
           a->rev == b->rev && a->pd_len == b->pd_len && a->p2p == b->p2p && a->rtr == b->rtr &&
           a->ird == b->ird && a->ord == b->ord && a->ulp_pd_len == b->ulp_pd_len &&
           memcmp(a->ulp_pd, b->ulp_pd, a->ulp_pd_len) == 0;
}

static bool result_eq(const uiw_mpa_result *a, const uiw_mpa_result *b)
{
    return a->crc == b->crc && a->markers_rx == b->markers_rx && a->markers_tx == b->markers_tx &&
           a->rev == b->rev && a->enhanced == b->enhanced && a->ird == b->ird && a->ord == b->ord &&
           a->peer_ird == b->peer_ird && a->peer_ord == b->peer_ord && a->p2p == b->p2p &&
           a->rtr == b->rtr && a->send_rtr == b->send_rtr && a->await_rtr == b->await_rtr &&
           a->peer_pd_len == b->peer_pd_len && memcmp(a->peer_pd, b->peer_pd, a->peer_pd_len) == 0;
}

/* The codec on a prefix of the stream. */
static void check_codec(const uint8_t *data, size_t size)
{
    static uiw_mpa_frame f, g;
    static uint8_t out[UIW_MPA_MAX_FRAME];
    for (unsigned kind = 0; kind <= 2; kind++) {
        int rc = uiw_mpa_decode(data, size, kind, &f);
        ASSERT(rc == -EAGAIN || rc == -EPROTO || (rc >= UIW_MPA_HDR_LEN && (size_t)rc <= size));
        if (rc < 0)
            continue;
        ASSERT(rc <= UIW_MPA_MAX_FRAME);
        ASSERT(rc == UIW_MPA_HDR_LEN + f.pd_len);
        ASSERT(f.ulp_pd_len + (f.enhanced ? UIW_MPA_RFC6581_LEN : 0) == f.pd_len);
        ASSERT(kind == 0 || f.kind == kind);
        ASSERT(!f.enhanced || f.rev >= 2);
        ASSERT(f.ird <= UIW_MPA_IRD_ORD_MASK && f.ord <= UIW_MPA_IRD_ORD_MASK);
        /* encode(decode(x)) == x, and decodes equal */
        int el = uiw_mpa_encode(&f, out, sizeof(out));
        ASSERT(el == rc);
        ASSERT(memcmp(out, data, (size_t)rc) == 0);
        ASSERT(uiw_mpa_decode(out, (size_t)el, kind, &g) == el);
        ASSERT(frame_eq(&f, &g));
        /* every shorter prefix is incomplete (or already known bad), never
         * a frame */
        for (size_t l = 0; l < (size_t)rc; l += 1 + l / 4) {
            int pr = uiw_mpa_decode(data, l, kind, &g);
            ASSERT(pr == -EAGAIN);
        }
        /* a too-small buffer is refused, never overrun */
        ASSERT(uiw_mpa_encode(&f, out, (size_t)rc - 1) == -EMSGSIZE);
    }
}

typedef struct outcome {
    int start_rc;
    int rc;
    size_t consumed;
    uiw_mpa_neg n;
    uint8_t out[UIW_MPA_MAX_FRAME];
    size_t out_len;
} outcome;

/* Piece sizes from two configuration bytes: nibbles 0..14 give 1..15 bytes,
 * 15 gives 64. */
typedef struct pieces {
    uint8_t seed[2];
    unsigned i;
} pieces;

static size_t next_piece(pieces *p)
{
    if (!p)
        return (size_t)-1; /* whole */
    uint8_t b = p->seed[(p->i / 2) % 2];
    unsigned nib = (p->i % 2) ? b >> 4 : b & 15;
    p->i++;
    return nib == 15 ? 64 : nib + 1;
}

static void feed(outcome *o, const uint8_t *in, size_t len, pieces *pc)
{
    size_t off = 0;
    o->rc = 0;
    o->consumed = 0;
    while (off < len) {
        size_t take = next_piece(pc);
        if (take > len - off)
            take = len - off;
        size_t olen = 12345;
        uint8_t tmp[UIW_MPA_MAX_FRAME];
        int rc = uiw_mpa_neg_feed(&o->n, in + off, take, tmp, sizeof(tmp), &olen);
        ASSERT(rc < 0 || (size_t)rc <= take);
        ASSERT(olen == 0 || (rc >= 0 && !o->n.initiator && olen <= sizeof(tmp)));
        ASSERT(olen == 0 || o->out_len == 0); /* one Reply, once */
        if (rc < 0) {
            ASSERT(olen == 0);
            o->rc = rc;
            return;
        }
        if (olen) {
            memcpy(o->out, tmp, olen);
            o->out_len = olen;
        }
        o->consumed += (size_t)rc;
        if ((size_t)rc < take) {
            /* the frame ended inside this piece; nothing more is taken */
            ASSERT(o->n.state != UIW_MPA_S_WAIT_REQ && o->n.state != UIW_MPA_S_WAIT_REP);
            size_t z = 7;
            ASSERT(uiw_mpa_neg_feed(&o->n, in + off + rc, take - (size_t)rc, tmp, sizeof(tmp),
                                    &z) == 0);
            ASSERT(z == 0);
            return;
        }
        off += take;
    }
}

static void check_state(const outcome *o, size_t len)
{
    const uiw_mpa_neg *n = &o->n;
    const uiw_mpa_result *r = &n->result;
    static uiw_mpa_frame f;
    ASSERT(o->consumed <= len);
    ASSERT(n->have <= UIW_MPA_MAX_FRAME);
    if (o->rc < 0) {
        ASSERT(n->state == UIW_MPA_S_FAILED);
        ASSERT(n->error == o->rc);
        ASSERT(o->out_len == 0);
        ASSERT(!n->term_send);
        return;
    }
    switch (n->state) {
    case UIW_MPA_S_WAIT_REQ:
    case UIW_MPA_S_WAIT_REP:
        ASSERT((n->state == UIW_MPA_S_WAIT_REP) == n->initiator);
        ASSERT(o->consumed == len);
        ASSERT(n->error == 0 && !n->term_valid && o->out_len == 0);
        ASSERT(n->have == o->consumed);
        break;
    case UIW_MPA_S_DONE:
        ASSERT(n->error == 0 && !n->term_valid && !n->term_send);
        ASSERT(n->have == o->consumed && n->have >= UIW_MPA_HDR_LEN);
        ASSERT(r->rtr == 0 || r->rtr == UIW_RTR_SEND || r->rtr == UIW_RTR_WRITE ||
               r->rtr == UIW_RTR_READ);
        ASSERT(r->p2p == (r->rtr != 0));
        ASSERT(!r->p2p || r->enhanced);
        ASSERT(r->rev == 1 || r->rev == 2);
        ASSERT(r->peer_pd_len == n->peer.ulp_pd_len);
        if (n->initiator) {
            ASSERT(r->send_rtr == r->p2p && !r->await_rtr);
            ASSERT(!r->p2p || (r->rtr & n->pol.rtr_offer));
            ASSERT(r->crc || n->pol.crc != UIW_CRC_REQUIRED);
            ASSERT(!r->markers_tx || n->pol.accept_markers);
            ASSERT(r->markers_rx == n->pol.markers);
        } else {
            ASSERT(r->await_rtr && !r->send_rtr);
            ASSERT(o->out_len >= UIW_MPA_HDR_LEN);
            ASSERT(uiw_mpa_decode(o->out, o->out_len, UIW_MPA_REPLY, &f) == (int)o->out_len);
            ASSERT(!f.reject && !f.res && f.crc == r->crc && f.markers == n->pol.markers);
            ASSERT(f.enhanced == r->enhanced && f.rev == r->rev);
            ASSERT(!r->p2p || (f.p2p && f.rtr == r->rtr && (r->rtr & n->pol.rtr_offer)));
            ASSERT(!r->markers_tx || n->pol.accept_markers);
        }
        break;
    case UIW_MPA_S_REJECTED:
        ASSERT(n->error < 0 && !n->term_send);
        ASSERT(n->have == o->consumed);
        if (n->initiator) {
            ASSERT(n->error == -ECONNREFUSED && n->peer.reject);
        } else {
            ASSERT(uiw_mpa_decode(o->out, o->out_len, UIW_MPA_REPLY, &f) == (int)o->out_len);
            ASSERT(f.reject && !f.markers && !f.res);
        }
        break;
    case UIW_MPA_S_FAILED:
        ASSERT(n->error < 0);
        ASSERT(o->out_len == 0);
        ASSERT(!n->term_send || (n->initiator && n->term_valid));
        if (n->term_send)
            ASSERT(n->term.ecode == UIW_MPA_EC_INSUFFICIENT_IRD ||
                   n->term.ecode == UIW_MPA_EC_NO_MATCHING_RTR);
        if (n->term_valid)
            ASSERT(n->term.layer == UIW_LAYER_LLP && n->term.etype == UIW_LLP_ET_MPA);
        break;
    default:
        ASSERT(0);
    }
    /* a completed frame is what was consumed, byte for byte (except the
     * short siw Reject, which is rebuilt without its S bit) */
    bool short_reject = n->initiator && n->peer.reject && !n->peer.enhanced &&
                        n->have >= UIW_MPA_HDR_LEN && (n->buf[16] & UIW_MPA_FLAG_S) &&
                        n->buf[17] >= 2;
    if (o->rc == 0 && n->state >= UIW_MPA_S_DONE && !short_reject) {
        static uint8_t enc[UIW_MPA_MAX_FRAME];
        int el = uiw_mpa_encode(&n->peer, enc, sizeof(enc));
        ASSERT(el == (int)n->have && memcmp(enc, n->buf, n->have) == 0);
    }
}

static void same(const outcome *a, const outcome *b)
{
    ASSERT(a->rc == b->rc);
    if (a->rc == 0)
        ASSERT(a->consumed == b->consumed);
    ASSERT(a->n.state == b->n.state && a->n.error == b->n.error);
    ASSERT(a->n.term_valid == b->n.term_valid && a->n.term_send == b->n.term_send);
    ASSERT(!a->n.term_valid || a->n.term.ecode == b->n.term.ecode);
    ASSERT(a->out_len == b->out_len && memcmp(a->out, b->out, a->out_len) == 0);
    ASSERT(result_eq(&a->n.result, &b->n.result));
}

static void run(outcome *o, bool initiator, const uiw_mpa_policy *pol, const uint8_t *in,
                size_t len, pieces *pc)
{
    memset(o, 0, sizeof(*o));
    if (initiator) {
        o->start_rc = uiw_mpa_neg_start_initiator(&o->n, pol, o->out, sizeof(o->out));
        if (o->start_rc < 0)
            return;
        o->out_len = 0; /* out now collects nothing for the initiator */
    } else {
        uiw_mpa_neg_start_responder(&o->n, pol);
        if (o->n.state == UIW_MPA_S_FAILED) {
            o->start_rc = o->n.error;
            return;
        }
    }
    feed(o, in, len, pc);
    check_state(o, len);
}

static uint8_t pd_src[UIW_MPA_MAX_PD];

static const uint16_t depth[8] = {0, 1, 2, 3, 16, 128, 0x3FFE, 0x3FFF};

static void policy_from(uiw_mpa_policy *p, uint8_t a, uint8_t b, uint8_t c)
{
    uiw_mpa_policy_default(p);
    p->rev = (uint8_t)(1 + (a & 1));
    p->crc = (uint8_t)((a >> 1) & 3); /* 3 is invalid on purpose */
    p->markers = a & 0x08;
    p->accept_markers = a & 0x10;
    p->p2p = a & 0x20;
    p->responder_rejects = a & 0x40;
    p->rtr_offer = b & 7;
    p->ird = depth[(b >> 3) & 7];
    p->ord = depth[(b >> 6) | ((c & 1) << 2)];
    p->max_ird = depth[(c >> 1) & 7];
    p->min_ord = (c >> 4) & 3 ? depth[(c >> 4) & 3] : 0;
    if (a & 0x80) {
        p->ulp_pd = pd_src;
        p->ulp_pd_len = (uint16_t)((c >> 6) == 3 ? 508 + (b & 7) : (c >> 6) * 37);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static outcome a, b, ini, rsp;
    if (size > 2048)
        return 0;
    for (size_t i = 0; i < sizeof(pd_src); i++)
        pd_src[i] = (uint8_t)(i ^ 0x5A);

    /* 1. raw stream */
    check_codec(data, size);
    static uiw_mpa_policy fixed[4];
    uiw_mpa_policy_default(&fixed[0]);
    uiw_mpa_policy_default(&fixed[1]);
    fixed[1].crc = UIW_CRC_REQUIRED;
    fixed[1].p2p = true;
    fixed[1].ird = fixed[1].ord = 1;
    uiw_mpa_policy_default(&fixed[2]);
    fixed[2].rev = 1;
    fixed[2].markers = fixed[2].accept_markers = true;
    uiw_mpa_policy_default(&fixed[3]);
    fixed[3].min_ord = 4;
    fixed[3].max_ird = 0;
    fixed[3].rtr_offer = UIW_RTR_READ;
    for (int p = 0; p < 4; p++)
        for (int role = 0; role < 2; role++) {
            pieces ones = {{0, 0}, 0}; /* nibble 0: 1 byte at a time */
            run(&a, role, &fixed[p], data, size, NULL);
            run(&b, role, &fixed[p], data, size, &ones);
            same(&a, &b);
        }

    /* 2. configuration + stream */
    if (size < 8)
        return 0;
    const uint8_t *cfg = data;
    const uint8_t *s = data + 8;
    size_t sl = size - 8;
    check_codec(s, sl);
    uiw_mpa_policy ip, rp;
    policy_from(&ip, cfg[0], cfg[1], cfg[2]);
    policy_from(&rp, cfg[3], cfg[4], cfg[5]);
    for (int role = 0; role < 2; role++) {
        pieces pc = {{cfg[6], cfg[7]}, 0};
        const uiw_mpa_policy *pol = role ? &ip : &rp;
        run(&a, role, pol, s, sl, NULL);
        run(&b, role, pol, s, sl, &pc);
        same(&a, &b);
    }

    /* the two policies negotiate with each other */
    uint8_t req[UIW_MPA_MAX_FRAME];
    memset(&ini, 0, sizeof(ini));
    int ql = uiw_mpa_neg_start_initiator(&ini.n, &ip, req, sizeof(req));
    ASSERT(ql < 0 || (ql >= UIW_MPA_HDR_LEN && ql <= UIW_MPA_MAX_FRAME));
    if (ql < 0)
        return 0;
    ASSERT(ini.n.state == UIW_MPA_S_WAIT_REP);
    check_codec(req, (size_t)ql);
    pieces pc = {{cfg[7], cfg[6]}, 0};
    run(&rsp, false, &rp, req, (size_t)ql, &pc);
    if (rsp.start_rc < 0)
        return 0;
    /* the Request is well formed: the responder never fails on its form
     * except for the revision/enhancement rules */
    ASSERT(rsp.n.state != UIW_MPA_S_WAIT_REQ);
    ASSERT(rsp.n.state != UIW_MPA_S_FAILED || rsp.rc == -EPROTO || rsp.rc == -EMSGSIZE);
    if (rsp.n.state == UIW_MPA_S_FAILED)
        return 0;
    check_codec(rsp.out, rsp.out_len);
    feed(&ini, rsp.out, rsp.out_len, &pc);
    check_state(&ini, rsp.out_len);
    ASSERT(ini.rc == 0 && ini.consumed == rsp.out_len);
    ASSERT((rsp.n.state == UIW_MPA_S_REJECTED) == (ini.n.state == UIW_MPA_S_REJECTED));
    if (rsp.n.state == UIW_MPA_S_DONE && ini.n.state == UIW_MPA_S_DONE) {
        const uiw_mpa_result *i = &ini.n.result, *r = &rsp.n.result;
        ASSERT(i->crc == r->crc);
        ASSERT(i->crc == (ip.crc == UIW_CRC_REQUIRED || rp.crc == UIW_CRC_REQUIRED));
        ASSERT(i->markers_rx == r->markers_tx && i->markers_tx == r->markers_rx);
        ASSERT(i->rev == r->rev && i->enhanced == r->enhanced);
        ASSERT(i->p2p == r->p2p && i->rtr == r->rtr);
        ASSERT(r->peer_pd_len == ip.ulp_pd_len && i->peer_pd_len == rp.ulp_pd_len);
        if (i->enhanced) {
            const uint16_t A = UIW_MPA_IRD_ORD_AUTO;
            if (i->ord != A && r->ird != A)
                ASSERT(i->ord <= r->ird);
            if (r->ord != A && i->ird != A)
                ASSERT(r->ord <= i->ird);
        }
    }
    return 0;
}
