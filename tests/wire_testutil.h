/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers shared by the wire core's tests.
 */
#ifndef UIWARP_WIRE_TESTUTIL_H
#define UIWARP_WIRE_TESTUTIL_H

#include <stdbool.h>
#include <string.h>

#include "uiwarp/wire.h"

static inline bool term_eq(const uiw_term *a, const uiw_term *b)
{
    return a->cause.layer == b->cause.layer && a->cause.etype == b->cause.etype &&
           a->cause.ecode == b->cause.ecode && a->hdr_ddp == b->hdr_ddp &&
           a->hdr_rdma == b->hdr_rdma && a->hdr_mpa == b->hdr_mpa &&
           a->ddp_hdr_len == b->ddp_hdr_len && a->rdma_hdr_len == b->rdma_hdr_len &&
           memcmp(a->ddp_hdr, b->ddp_hdr, a->ddp_hdr_len) == 0 &&
           memcmp(a->rdma_hdr, b->rdma_hdr, a->rdma_hdr_len) == 0 && a->siw_layout == b->siw_layout;
}

/* Field-by-field comparison of what the wire carries for this opcode. */
static inline bool hdr_eq(const uiw_hdr *a, const uiw_hdr *b)
{
    if (a->tagged != b->tagged || a->last != b->last || a->ddp_rsvd != b->ddp_rsvd ||
        a->ddp_version != b->ddp_version || a->rdmap_version != b->rdmap_version ||
        a->rdmap_rsvd != b->rdmap_rsvd || a->opcode != b->opcode)
        return false;
    if (a->tagged)
        return a->stag == b->stag && a->to == b->to;
    if (a->inv_stag != b->inv_stag || a->qn != b->qn || a->msn != b->msn || a->mo != b->mo)
        return false;
    switch (a->opcode) {
    case UIW_OP_READ_REQ:
        return a->u.rreq.sink_stag == b->u.rreq.sink_stag &&
               a->u.rreq.sink_to == b->u.rreq.sink_to &&
               a->u.rreq.read_size == b->u.rreq.read_size &&
               a->u.rreq.src_stag == b->u.rreq.src_stag && a->u.rreq.src_to == b->u.rreq.src_to;
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        return memcmp(a->u.imm, b->u.imm, UIW_IMM_DATA_LEN) == 0;
    case UIW_OP_ATOMIC_REQ: {
        const uiw_atomic_req *x = &a->u.atomic_req, *y = &b->u.atomic_req;
        return x->aop == y->aop && x->req_id == y->req_id && x->stag == y->stag && x->to == y->to &&
               x->add_swap == y->add_swap && x->add_swap_mask == y->add_swap_mask &&
               x->compare == y->compare && x->compare_mask == y->compare_mask;
    }
    case UIW_OP_ATOMIC_RESP:
        return a->u.atomic_resp.req_id == b->u.atomic_resp.req_id &&
               a->u.atomic_resp.orig_value == b->u.atomic_resp.orig_value;
    case UIW_OP_TERMINATE:
        return term_eq(&a->u.term, &b->u.term);
    default:
        return true;
    }
}

/* The event the slow path gives, for kind UIW_RX_HDR, UIW_RX_PAYLOAD or
 * UIW_RX_END, for the FPDU a UIW_RX_FPDU event ev delivered whole: the
 * fields of that kind copied from ev, every other field zero. */
static inline void fpdu_as_event(const uiw_rx_event *ev, uint8_t kind, uiw_rx_event *e)
{
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    if (kind == UIW_RX_PAYLOAD) {
        e->data = ev->data;
        e->len = ev->len;
        e->offset = ev->offset;
        e->data_off = ev->data_off;
        return;
    }
    e->fpdu_off = ev->fpdu_off;
    e->ulpdu_len = ev->ulpdu_len;
    e->hdr_len = ev->hdr_len;
    e->payload_len = ev->payload_len;
    e->nmarkers = ev->nmarkers;
    if (kind == UIW_RX_HDR) {
        e->hdr = ev->hdr;
        return;
    }
    e->crc_checked = ev->crc_checked;
    e->crc_ok = ev->crc_ok;
    e->crc_recv = ev->crc_recv;
    e->crc_calc = ev->crc_calc;
    e->pad_nonzero = ev->pad_nonzero;
    e->marker_rsvd = ev->marker_rsvd;
    e->fpdu_bytes = ev->fpdu_bytes;
}

#endif
