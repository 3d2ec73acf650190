/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Data path internals shared by qp_tx.c and qp_rx.c (not part of the
 * engine-wide API in engine.h).
 */
#ifndef UIWARP_DP_INT_H
#define UIWARP_DP_INT_H

#include "engine.h"

/* "no async event" for uiw_qp_terminate_locked (enum ibv_event_type has no
 * such value; errors reported through a completion raise none). */
#define DP_NO_ASYNC ((enum ibv_event_type) - 1)

/* uiw_sqe.state */
enum dp_sqe_state {
    SQE_NEW = 0,   /* posted, not started */
    SQE_SENDING,   /* being segmented / waiting for its last byte to reach TCP */
    SQE_WAIT_RESP, /* Read / Atomic Request sent, response outstanding */
    SQE_DONE,      /* finished; uiw_sqe.status holds the result */
};

/* A DDP header image for a Terminate attachment: the 2-byte DDP Segment
 * Length (the ULPDU_Length it came with), the 14/18-byte DDP header and,
 * for a Read Request, the 28-byte RDMA header (RFC 5040 §4.8). */
#define DP_MAX_FPDU_8 65528u /* 65535 rounded down to a multiple of 8 */
/* FPDUs are kept aligned with TCP segments (UIWARP_FPDU_ALIGN, qp_tx.c) on
 * links whose MSS is at most this: Ethernet, jumbo frames included, not
 * loopback (MSS 65483), where nothing places FPDUs from segments */
#define DP_ALIGN_MAX_MSS 16384u

/* qp_dp.c: one staging buffer of each kind per thread, taken and given
 * back without a lock (qp_rx.c's staging, qp_tx.c's batch), in front of
 * the shared spares. NULL when it cannot be had (no memory); its contents
 * are freed when the thread exits. The list of them is global, so that
 * what a thread holds stays reachable (leak checkers). */
struct dp_tl {
    uint8_t *rx[2]; /* qp_rx.c: RX_BUF, RX_BUF_CRC */
    void *txb;      /* qp_tx.c: a struct dp_txb */
    struct dp_tl *prev, *next;
};
struct dp_tl *dp_tl(void);

/* qp_dp.c: shared by both directions */
unsigned dp_align_seg(int fd);
enum ibv_wc_opcode dp_wc_opcode(enum ibv_wr_opcode op);
uint8_t dp_prot_code(enum uiw_mem_err err);
/* qp.c: a send WR's opcode and SGE list are usable */
bool dp_send_wr_form_ok(const struct uiw_qp *qp, const struct ibv_send_wr *wr);

/* ORQ / IRQ rings have UIW_MAX_ORD / UIW_MAX_IRD entries; the negotiated
 * depths (qp->ord / qp->ird) limit their use. They are allocated when first
 * needed (a QP that never reads holds none): dp_orq_ready before an ORQ
 * push, dp_irq_ready before an IRQ push, under the QP's lock; false: no
 * memory. With no ring the count is 0 and nothing reads it. */
static inline bool dp_orq_ready(struct uiw_qp *qp)
{
    if (!qp->orq)
        qp->orq = calloc(UIW_MAX_ORD, sizeof(*qp->orq));
    return qp->orq != NULL;
}
static inline bool dp_irq_ready(struct uiw_qp *qp)
{
    if (!qp->irq)
        qp->irq = calloc(UIW_MAX_IRD, sizeof(*qp->irq));
    return qp->irq != NULL;
}
static inline unsigned dp_ord(const struct uiw_qp *qp)
{
    return qp->ord < UIW_MAX_ORD ? qp->ord : UIW_MAX_ORD;
}
static inline unsigned dp_ird(const struct uiw_qp *qp)
{
    return qp->ird < UIW_MAX_IRD ? qp->ird : UIW_MAX_IRD;
}
static inline struct uiw_orqe *dp_orq_head(struct uiw_qp *qp)
{
    return qp->orq_count ? &qp->orq[qp->orq_head % UIW_MAX_ORD] : NULL;
}
void dp_orq_pop(struct uiw_qp *qp);
/* Position of an SQE relative to sq_head. */
static inline unsigned dp_sq_pos(const struct uiw_qp *qp, const struct uiw_sqe *e)
{
    return ((unsigned)(e - qp->sq) + qp->sq_cap - qp->sq_head) % qp->sq_cap;
}

/* qp_tx.c */
int dp_tx_attach(struct uiw_qp *qp, unsigned max_fpdu, unsigned seg);
void dp_tx_free(struct uiw_qp *qp);
/* Complete finished SQEs from the head, in order (RFC 5040 §5.5 rule 15). */
void dp_sq_complete(struct uiw_qp *qp);
/* Complete the first `pos` SQEs (finished ones as they are, others with
 * IBV_WC_WR_FLUSH_ERR) and the one at `pos` with `st`. */
void dp_sq_fail_upto(struct uiw_qp *qp, unsigned pos, enum ibv_wc_status st);
/* Complete one SQE now (CQE if signalled or failed). */
void dp_sqe_finish(struct uiw_qp *qp, struct uiw_sqe *e, enum ibv_wc_status st);
/* The responder may send (first FPDU received). */
void dp_tx_release_await(struct uiw_qp *qp);
/* The initiator's guard against siw's first-FPDU race (docs/INTEROP.md
 * §1), hold_ms after the attach (uiw_qp_attach_socket_hold; qp->first_hold
 * is initialised): wake-up FPDUs while the peer has sent nothing (nothing
 * held). */
void dp_tx_hold_first(struct uiw_qp *qp, unsigned hold_ms);
/* qp->first_hold's callback: a wake-up. */
void dp_hold_timer_cb(void *obj);
/* A whole FPDU came from the peer (qp->lock held). */
bool dp_rx_got_first(struct uiw_qp *qp);
/* Drop all transmit work (QP in ERR), keeping a Terminate in flight. */
void dp_tx_error_cleanup(struct uiw_qp *qp);
/* Re-arm the socket's epoll registration (EPOLLOUT while blocked). */
void dp_arm(struct uiw_qp *qp);
/* Off the coalescing backstop's list, nothing deferred (qp->lock held;
 * ibv_destroy_qp before it waits for the QP's references). */
void dp_tx_undefer(struct uiw_qp *qp);
/* qp->lock held: off the poll owners' list (qp_dp.c "Poll ownership"),
 * before the socket goes */
void dp_rx_unown(struct uiw_qp *qp);
/* Enter ERR after a protocol event: flush (qp.c), drop transmit/receive
 * state. */
void dp_enter_error(struct uiw_qp *qp);
/* qp_tx.c: put a Terminate (h) in place of everything not yet sent */
void dp_tx_queue_terminate(struct uiw_qp *qp, const uiw_hdr *h);

/* qp_rx.c */
int dp_rx_attach(struct uiw_qp *qp);
void dp_rx_free(struct uiw_qp *qp);
/* Drop receive state (QP in ERR): the message in progress of an SRQ is
 * completed with IBV_WC_WR_FLUSH_ERR (its RQE is ours), unless st says
 * otherwise. */
void dp_rx_error_cleanup(struct uiw_qp *qp, enum ibv_wc_status st);
/* qp_rx.c: the stream ended (err 0: EOF); false if that was reported
 * already; *clean: nothing was cut short */
bool dp_rx_eof(struct uiw_qp *qp, int err, bool *clean);
void dp_event_cb(void *obj, uint32_t events);
/* The receiver-not-ready timers' callback (qp->rnr_kick, qp->rnr_limit). */
void dp_rnr_timer_cb(void *obj);

#endif
