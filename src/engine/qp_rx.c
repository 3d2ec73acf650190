/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Receive processing and placement (docs/ENGINE.md "Receive and
 * placement"), the Read/Atomic responder, Terminate reception.
 *
 * The byte stream of a QP's socket goes through the wire core's FPDU
 * parser (uiw_rx_feed: framing, markers, CRC, DDP/RDMAP header checks);
 * this file adds everything that needs the QP:
 *   - tagged segments (RFC 5041 §5.1.1, §7.1): a Write is checked against
 *     the STag table (valid, PD, IBV_ACCESS_REMOTE_WRITE, bounds, no TO
 *     wrap) for the whole segment at its header, and again for every piece
 *     placed (the MR is held only across one copy/readv, so ibv_dereg_mr
 *     never waits for the network); a Read Response must continue the
 *     oldest outstanding Read (ORQ head: sink STag, TO = sink TO + bytes so
 *     far, total length; RFC 5040 §5.2.2) and is scattered into the Read's
 *     local SGEs (IBV_ACCESS_LOCAL_WRITE);
 *   - untagged segments (RFC 5041 §5.1.2, §7.1): QN 0 messages (Sends,
 *     Immediate Data) need MSN = last + 1, MO = bytes so far, a posted
 *     receive (RQ or SRQ) long enough; QN 1 (Read / Atomic Requests) MSN
 *     and the IRD; QN 3 (Atomic Responses) MSN and the ORQ head;
 *   - zero copy (CRC off only): while the parser is inside a payload
 *     whose destination is known, at least zcopy_min bytes long, the
 *     socket is read with readv straight into the destination (plus the
 *     staging buffer for whatever follows) and the parser is fed the
 *     destination bytes. With CRC on, everything goes through the staging
 *     buffer: the CRC is computed over the bytes as received, which a
 *     concurrent local write to the destination cannot change (rx_read);
 *   - header-only messages act at their END, after the CRC (RFC 5040 §5.5
 *     rules 12 and 17, RFC 7306 §5.4 rule 3: processed once Delivered);
 *   - errors: a check that fails dooms the segment (nothing more of it is
 *     placed, RFC 5041 §7.1) and the Terminate goes out at its END, so that
 *     with CRC on a corrupted header is reported as a CRC error (RFC 5044
 *     §4.4 checks the CRC first); parser errors go out at once;
 *   - receiver not ready (docs/ENGINE.md): a QN 0 message (Send, Send with
 *     Invalidate / SE, Immediate Data) whose first segment finds no posted
 *     receive (RFC 5041 §7.1 check 2) is held: the parser stops right
 *     after its header (the bytes that follow stay in staging, r->off), the
 *     socket is no longer read, so TCP flow control holds the peer, which
 *     sees nothing but backpressure. ibv_post_recv / ibv_post_srq_recv
 *     arm qp->rnr_kick; its callback (or ibv_poll_cq's poll-driven
 *     progress) takes the receive and resumes exactly where the parser
 *     stopped. When the limit expires (rnr_limit_ms: the QP's
 *     rnr_retry x min_rnr_timer, else UIWARP_RNR_HOLD_MS, default 5 s;
 *     0 = at once) the segment is doomed with the Terminate RFC 5041 §7.2
 *     prescribes (DDP, untagged buffer, 0x02 invalid MSN - no buffer),
 *     sent at its END as before. Everything behind the held message on
 *     the stream (Writes, Read Requests and Responses, Terminates) waits
 *     with it.
 * Every offset is computed in 64 bits from 32-bit (MO, lengths) or checked
 * 64-bit (TO) quantities; nothing is written outside a region that
 * uiw_mr_get / uiw_sge_get returned for exactly that range and right.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dp_int.h"
#include "pcap_out.h"

#define RX_BUF (64u * 1024)
/* With CRC everything comes through staging (rx_read): a larger buffer
 * takes several full-size FPDUs per read */
#define RX_BUF_CRC (256u * 1024)
#define RX_BUDGET  (256u << 10) /* bytes per call before the fd is re-armed */
#define RX_IOV     (UIW_MAX_SGE + 1)
/* Staging bytes read together with a payload read in place: the pad, CRC,
 * a marker and the next FPDU's header, and not much of its payload (which
 * the next readv should put in place too). */
#define RX_ZC_TAIL 256
/* After a segment with at least this much payload (and UIWARP_ZCOPY_MIN),
 * a read at an FPDU boundary takes only RX_ZC_TAIL bytes into staging: the
 * header, so that the next readv puts the payload in place. Otherwise a
 * full staging read would swallow most of each large FPDU and leave the
 * in-place path only remainders below UIWARP_ZCOPY_MIN (almost nothing
 * placed in place; docs/ENGINE.md "Receive and placement"). Small segments
 * keep the full read: many per call. */
#define RX_BIG_SEG 1024u
/* A short read ends the read loop (rx_progress) only up to this size: a
 * ping-pong's messages; a stream's large reads go on reading (what comes
 * next is mostly there by then, and the caller's loop would yield first:
 * qperf rc_bw 64 KiB in event mode lost a fifth) */
#define RX_SHORT_MAX (16 * 1024)
/* After a segment of at least RX_STICKY_SEG, reads stay header-only
 * across up to RX_SMALL_RUN - 1 small segments. */
#define RX_STICKY_SEG (16u * 1024)
#define RX_SMALL_RUN  4

enum { SEG_NONE = 0, SEG_WRITE, SEG_RRESP, SEG_SEND, SEG_CTRL };

struct dp_rx {
    uint8_t *buf; /* staging */
    size_t cap, len, off;

    /* the segment between HDR and END */
    uiw_hdr hdr;
    uint16_t ulpdu_len;
    uint32_t payload_len;
    uint8_t kind; /* SEG_* */
    bool active;
    bool doomed; /* a check failed: place nothing more, Terminate at END */
    uiw_term_cause cause;
    bool cause_rreq;    /* attach the Read Request header too */
    uint8_t rqe_status; /* for the receive in progress (0: flush) */
    uint8_t sqe_status; /* for the Read whose sink failed */
    bool zc;            /* feeding bytes readv put in place already */
    bool big;           /* large segments lately: read headers alone */
    uint8_t small_run;  /* small segments after a very large one (big stays) */
    uint64_t seg_base;  /* message offset of the segment's payload */

    /* the QN 0 message in progress */
    bool msg_active, msg_srq;
    bool msg_rtr; /* the message takes no receive: the P2P RTR, or (with
                   * msg_attach) the Immediate Data of a Send with Imm */
    bool msg_attach;
    bool imm_pending; /* an attached Immediate Data arrived: its Send is next */
    uint32_t imm_val; /* ... and its value (network order, as imm_data) */
    struct uiw_rqe rqe;
    uint32_t msg_msn;
    uint64_t msg_len;
    uint8_t msg_op;

    /* receiver not ready: the header in r->hdr waits for a receive */
    bool held;
    uint64_t hold_deadline_ns; /* UINT64_MAX: no limit */

    uint64_t rr_placed; /* Read Response bytes of the ORQ head so far */
    bool last_write;    /* the last QN 0-relevant message was a Write */
    bool got_first;
    bool dead;     /* parse and discard (Terminate, ERR) */
    bool eof;      /* EOF/error reported */
    bool drained;  /* the last read found the socket empty (EAGAIN) */
    bool err_done; /* ERR cleanup done */
    /* statistics (UIWARP_DEBUG >= 1 logs them when the QP goes away) */
    uint64_t st_zc, st_copy, st_reads;
};

static struct dp_rx *RX(struct uiw_qp *qp)
{
    return qp->rx_state;
}

/* A single-segment message (Read Request, Atomic Request or Response: L
 * and MO 0, enforced by the header decoder) in sequence on its queue after
 * MSN last (the wire core's sequencer; RFC 5041 §7.1 check 3). */
static bool useq_next(uint32_t last, const uiw_hdr *h)
{
    const uiw_useq seq = {.next_msn = last + 1};
    uiw_term_cause c;

    return uiw_useq_check(&seq, h, &c);
}

static void doom(struct dp_rx *r, unsigned layer, unsigned etype, unsigned ecode)
{
    if (r->doomed)
        return;
    r->doomed = true;
    r->cause.layer = (uint8_t)layer;
    r->cause.etype = (uint8_t)etype;
    r->cause.ecode = (uint8_t)ecode;
}

/* RFC 5041 §7.2 tagged codes. The DDP layer has no "access rights" code:
 * a region that does not allow the placement fails check 2 ("The STag has
 * an associated buffer that allows Placement"), reported as Invalid STag
 * (as siw does, PEERS.md §9). */
static uint8_t ddp_tagged_code(enum uiw_mem_err err)
{
    switch (err) {
    case UIW_MEM_BASE_BOUNDS:
        return UIW_DDP_EC_T_BASE_BOUNDS;
    case UIW_MEM_PD:
        return UIW_DDP_EC_T_STAG_NOT_ASSOC;
    case UIW_MEM_TO_WRAP:
        return UIW_DDP_EC_T_TO_WRAP;
    default:
        return UIW_DDP_EC_T_INVALID_STAG;
    }
}

/* The async event for an error we detected (IB verbs: access violation,
 * invalid request, or fatal). */
static enum ibv_event_type cause_async(uiw_term_cause c)
{
    if (c.layer == UIW_LAYER_RDMAP && c.etype == UIW_RDMAP_ET_REMOTE_PROT)
        return IBV_EVENT_QP_ACCESS_ERR;
    if (c.layer == UIW_LAYER_DDP && c.etype == UIW_DDP_ET_TAGGED)
        return c.ecode == UIW_DDP_EC_T_INVALID_VERSION ? IBV_EVENT_QP_REQ_ERR
                                                       : IBV_EVENT_QP_ACCESS_ERR;
    if (c.layer == UIW_LAYER_DDP && c.etype == UIW_DDP_ET_UNTAGGED)
        return IBV_EVENT_QP_REQ_ERR;
    if (c.layer == UIW_LAYER_RDMAP && c.etype == UIW_RDMAP_ET_REMOTE_OP &&
        (c.ecode == UIW_RDMAP_EC_INVALID_VERSION || c.ecode == UIW_RDMAP_EC_UNEXPECTED_OPCODE ||
         c.ecode == UIW_RDMAP_EC_UNSPECIFIED_OTHER || c.ecode == UIW_RDMAP_EC_CANT_INVALIDATE))
        return IBV_EVENT_QP_REQ_ERR;
    return IBV_EVENT_QP_FATAL;
}

/* The status of our outstanding WR a received Terminate names. */
static enum ibv_wc_status term_status(uiw_term_cause c)
{
    switch (c.layer) {
    case UIW_LAYER_RDMAP:
        if (c.etype == UIW_RDMAP_ET_REMOTE_PROT)
            return IBV_WC_REM_ACCESS_ERR;
        if (c.etype == UIW_RDMAP_ET_REMOTE_OP &&
            (c.ecode == UIW_RDMAP_EC_INVALID_VERSION || c.ecode == UIW_RDMAP_EC_UNEXPECTED_OPCODE ||
             c.ecode == UIW_RDMAP_EC_UNSPECIFIED_OTHER || c.ecode == UIW_RDMAP_EC_CANT_INVALIDATE))
            return IBV_WC_REM_INV_REQ_ERR;
        return IBV_WC_REM_OP_ERR;
    case UIW_LAYER_DDP:
        if (c.etype == UIW_DDP_ET_TAGGED)
            return c.ecode == UIW_DDP_EC_T_INVALID_VERSION ? IBV_WC_REM_INV_REQ_ERR
                                                           : IBV_WC_REM_ACCESS_ERR;
        if (c.etype == UIW_DDP_ET_UNTAGGED)
            return c.ecode == UIW_DDP_EC_U_INVALID_MSN_NOBUF ? IBV_WC_REM_OP_ERR
                                                             : IBV_WC_REM_INV_REQ_ERR;
        return IBV_WC_REM_OP_ERR;
    default:
        return IBV_WC_REM_OP_ERR;
    }
}

/* Complete the QN 0 message in progress (its receive is the RQ head, or
 * was taken from the SRQ). */
static void msg_complete(struct uiw_qp *qp, struct dp_rx *r, enum ibv_wc_status st,
                         const struct ibv_wc *tmpl, bool solicited)
{
    struct ibv_wc wc;

    if (tmpl)
        wc = *tmpl;
    else
        memset(&wc, 0, sizeof(wc));
    wc.wr_id = r->rqe.wr_id;
    wc.status = st;
    if (!tmpl)
        wc.opcode = IBV_WC_RECV;
    wc.qp_num = qp->ibqp.qp_num;
    /* The entry leaves the RQ before its completion is visible: a program
     * reposting on that completion must find the room (ibv_post_recv does
     * not wait for qp->lock) */
    if (!r->msg_srq) {
        pthread_mutex_lock(&qp->rq_lock);
        if (qp->rq_count) {
            qp->rq_head = (qp->rq_head + 1) % qp->rq_cap;
            qp->rq_count--;
        }
        pthread_mutex_unlock(&qp->rq_lock);
    }
    uiw_cq_push(qp->rcq, &wc, solicited && st == IBV_WC_SUCCESS);
    r->msg_active = false;
}

/* ------------------------------------------------------------------------
 * Placement
 * ---------------------------------------------------------------------- */

/* Map `len` bytes at message offset moff of a local SGE list (LOCAL_WRITE)
 * into iovecs, each held (mrs). Returns the count (covering *cov bytes, less
 * than len only when max was reached) or -1. */
static int sge_map(struct uiw_qp *qp, const struct ibv_sge *sges, int nsge, uint64_t moff,
                   uint32_t len, struct iovec *iov, struct uiw_mr **mrs, int max, uint32_t *cov)
{
    uint64_t skip = moff;
    uint32_t got = 0;
    int k = 0;

    for (int i = 0; i < nsge && got < len && k < max; i++) {
        uint64_t slen = sges[i].length;
        struct ibv_sge s;
        enum uiw_mem_err err;
        uint8_t *addr;
        struct uiw_mr *mr;
        uint32_t take;

        if (skip >= slen) {
            skip -= slen;
            continue;
        }
        take = (uint32_t)(slen - skip < (uint64_t)(len - got) ? slen - skip : len - got);
        s.addr = sges[i].addr + skip;
        s.length = take;
        s.lkey = sges[i].lkey;
        if (s.addr < sges[i].addr) /* wraps */
            goto fail;
        mr = uiw_sge_get(qp->pd, &s, IBV_ACCESS_LOCAL_WRITE, &addr, &err);
        if (!mr)
            goto fail;
        iov[k].iov_base = addr;
        iov[k].iov_len = take;
        mrs[k] = mr;
        k++;
        got += take;
        skip = 0;
    }
    if (got < len && k < max)
        goto fail; /* past the end of the list (cannot happen: checked at HDR) */
    *cov = got;
    return k;
fail:
    for (int i = 0; i < k; i++)
        uiw_mr_put(mrs[i]);
    return -1;
}

/* Destination of `len` bytes at payload offset `off` of the current
 * segment; -1 with the segment doomed if it fails the checks. */
static int seg_map(struct uiw_qp *qp, struct dp_rx *r, uint32_t off, uint32_t len,
                   struct iovec *iov, struct uiw_mr **mrs, int max, uint32_t *cov)
{
    enum uiw_mem_err err;
    uint8_t *addr;
    struct uiw_mr *mr;
    int k;

    if (!len || (uint64_t)off + len > r->payload_len)
        return 0;
    switch (r->kind) {
    case SEG_WRITE:
        /* RFC 5041 §7.1 tagged checks, again for this piece (the region
         * may have been invalidated or deregistered since the header) */
        if (r->hdr.to > UINT64_MAX - off) {
            doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_TO_WRAP);
            return -1;
        }
        mr = uiw_mr_get(qp->pd, r->hdr.stag, r->hdr.to + off, len, IBV_ACCESS_REMOTE_WRITE, &addr,
                        &err);
        if (!mr) {
            doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, ddp_tagged_code(err));
            return -1;
        }
        iov[0].iov_base = addr;
        iov[0].iov_len = len;
        mrs[0] = mr;
        *cov = len;
        return 1;
    case SEG_RRESP: {
        struct uiw_orqe *o = dp_orq_head(qp);
        if (!o || !o->sqe) {
            doom(r, UIW_LAYER_DDP, UIW_DDP_ET_CATASTROPHIC, UIW_DDP_EC_CATASTROPHIC);
            return -1;
        }
        k = sge_map(qp, o->sqe->sge, o->sqe->num_sge, r->seg_base + off, len, iov, mrs, max, cov);
        if (k < 0) {
            /* our own sink is not writable (any more): local fault */
            r->sqe_status = IBV_WC_LOC_PROT_ERR;
            doom(r, UIW_LAYER_DDP, UIW_DDP_ET_CATASTROPHIC, UIW_DDP_EC_CATASTROPHIC);
        }
        return k;
    }
    case SEG_SEND:
        if (!r->msg_active || r->msg_rtr)
            return 0;
        k = sge_map(qp, r->rqe.sge, r->rqe.num_sge, r->seg_base + off, len, iov, mrs, max, cov);
        if (k < 0) {
            r->rqe_status = IBV_WC_LOC_PROT_ERR;
            doom(r, UIW_LAYER_DDP, UIW_DDP_ET_CATASTROPHIC, UIW_DDP_EC_CATASTROPHIC);
        }
        return k;
    default:
        return 0;
    }
}

/* The final byte of an RDMA Write message is made visible last.
 * Programs poll it to learn that a Write arrived (ib_write_lat, rdma-core's
 * riostream, the eager RDMA protocols of MPI libraries): RNICs write in
 * order. memcpy and the kernel's copy into a readv destination may store
 * the bytes of one copy in any order (x86 fast strings, "rep movsb"), so
 * that byte never goes with the rest: readv stops one byte short of it
 * (rx_read) and place() stores it alone with a release store (x86 keeps
 * a string's stores ahead of every later store). */
static bool write_end(const struct dp_rx *r, uint32_t off, uint32_t len)
{
    return r->kind == SEG_WRITE && r->hdr.last && len > 1 && (uint64_t)off + len == r->payload_len;
}

static void place_bytes(struct uiw_qp *qp, struct dp_rx *r, uint32_t off, const uint8_t *data,
                        uint32_t len, bool release);

/* Copy a payload slice that came through the staging buffer. */
static void place(struct uiw_qp *qp, struct dp_rx *r, uint32_t off, const uint8_t *data,
                  uint32_t len)
{
    if (write_end(r, off, len)) {
        place_bytes(qp, r, off, data, len - 1, false);
        place_bytes(qp, r, off + len - 1, data + len - 1, 1, true);
        return;
    }
    place_bytes(qp, r, off, data, len, false);
}

static void place_bytes(struct uiw_qp *qp, struct dp_rx *r, uint32_t off, const uint8_t *data,
                        uint32_t len, bool release)
{
    struct iovec iov[RX_IOV];
    struct uiw_mr *mrs[RX_IOV];

    while (len && !r->doomed) {
        uint32_t cov = 0;
        int n = seg_map(qp, r, off, len, iov, mrs, RX_IOV, &cov);

        if (n <= 0)
            return;
        for (int i = 0; i < n; i++) {
            if (release && iov[i].iov_len == 1)
                __atomic_store_n((uint8_t *)iov[i].iov_base, *data, __ATOMIC_RELEASE);
            else
                memcpy(iov[i].iov_base, data, iov[i].iov_len);
            data += iov[i].iov_len;
            uiw_mr_put(mrs[i]);
        }
        r->st_copy += cov;
        qp->st->rx_copied += cov;
        off += cov;
        len -= cov;
    }
}

/* ------------------------------------------------------------------------
 * Segment headers
 * ---------------------------------------------------------------------- */

static void hdr_write(struct uiw_qp *qp, struct dp_rx *r)
{
    enum uiw_mem_err err;
    uint8_t *addr;
    struct uiw_mr *mr;

    r->kind = SEG_WRITE;
    /* RFC 5041 §7.1: zero-length tagged segments are not validated (the
     * P2P RTR is a zero-length Write to STag 1) */
    if (!r->payload_len)
        return;
    mr = uiw_mr_get(qp->pd, r->hdr.stag, r->hdr.to, r->payload_len, IBV_ACCESS_REMOTE_WRITE, &addr,
                    &err);
    if (!mr) {
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, ddp_tagged_code(err));
        return;
    }
    uiw_mr_put(mr);
}

static void hdr_rresp(struct uiw_qp *qp, struct dp_rx *r)
{
    struct uiw_orqe *o = dp_orq_head(qp);

    r->kind = SEG_RRESP;
    r->seg_base = r->rr_placed;
    /* RFC 5040 §5.2.2: it answers the oldest outstanding Read (responses
     * come in request order, RFC 5040 §5.5 rule 20, RFC 7306 §7) */
    if (!o || o->atomic) {
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG);
        return;
    }
    if (r->payload_len > o->size - r->rr_placed ||
        (r->hdr.last && r->rr_placed + r->payload_len != o->size)) {
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_BASE_BOUNDS);
        return;
    }
    if (!r->payload_len)
        return; /* RFC 5041 §7.1: STag/TO of a zero-length segment unchecked */
    /* the Data Sink validates STag, TO and length (RFC 5040 §5.2.2) on
     * every segment (siw checks the first only) */
    if (r->hdr.stag != o->sink_stag)
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG);
    else if (r->hdr.to != o->sink_to + r->rr_placed)
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_BASE_BOUNDS);
}

/* The next posted receive. wait: if there is none, ask the next post to
 * kick us (qp->rq_hold / the SRQ's hold list, set under the lock the
 * poster takes, so no post can slip in between unnoticed). */
static bool take_rqe(struct uiw_qp *qp, struct dp_rx *r, bool wait)
{
    if (qp->srq) {
        if (!uiw_srq_take(qp->srq, &r->rqe, wait ? qp : NULL))
            return false;
        r->msg_srq = true;
        return true;
    }
    /* rq_lock: ibv_post_recv appends without qp->lock */
    pthread_mutex_lock(&qp->rq_lock);
    if (!qp->rq_count) {
        if (wait)
            qp->rq_hold = true;
        pthread_mutex_unlock(&qp->rq_lock);
        return false;
    }
    r->rqe = qp->rq[qp->rq_head]; /* stays queued until it completes */
    pthread_mutex_unlock(&qp->rq_lock);
    r->msg_srq = false;
    return true;
}

/* ------------------------------------------------------------------------
 * Receiver not ready
 * ---------------------------------------------------------------------- */

/* IB's RNR NAK timer field (IBTA Vol. 1 Table 45, the encoding of
 * min_rnr_timer), in microseconds: 0 is the longest, 655.36 ms. */
static const uint32_t rnr_timer_us[32] = {
    655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
    480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
    20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};

/* How long a message may wait for a receive, in ms (UIW_RNR_UNLIMITED: no
 * limit, 0: Terminate at once). A program that set rnr_retry with
 * ibv_modify_qp gets IB's meaning: 7 retries forever, else the time an IB
 * requester keeps retrying, rnr_retry waits of min_rnr_timer each (so
 * rnr_retry 0 is the strict RFC behaviour); otherwise UIWARP_RNR_HOLD_MS. */
static unsigned rnr_limit_ms(const struct uiw_qp *qp)
{
    uint64_t us;

    if (!qp->rnr_retry_set)
        return uiw_config()->rnr_hold_ms;
    if (qp->attr.rnr_retry >= 7)
        return UIW_RNR_UNLIMITED;
    us = (uint64_t)qp->attr.rnr_retry * rnr_timer_us[qp->attr.min_rnr_timer & 31];
    return (unsigned)((us + 999) / 1000);
}

/* Not (or no longer) waiting: drop the kick requests and the limit. */
static void rnr_unhold(struct uiw_qp *qp, struct dp_rx *r)
{
    r->held = false;
    if (qp->srq) {
        uiw_srq_unhold(qp);
    } else {
        pthread_mutex_lock(&qp->rq_lock);
        qp->rq_hold = false;
        pthread_mutex_unlock(&qp->rq_lock);
    }
    uiw_timer_disarm(&qp->rnr_limit);
}

/* The header of a new QN 0 message found no receive: hold it, or doom it
 * (limit 0). */
static void rnr_hold(struct uiw_qp *qp, struct dp_rx *r)
{
    unsigned ms = rnr_limit_ms(qp);

    if (!ms) {
        rnr_unhold(qp, r);
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_NOBUF);
        return;
    }
    r->held = true;
    qp->st->rnr_holds++;
    if (ms == UIW_RNR_UNLIMITED) {
        r->hold_deadline_ns = UINT64_MAX;
    } else {
        r->hold_deadline_ns = uiw_now_ns() + (uint64_t)ms * 1000000u;
        uiw_timer_arm(&qp->rnr_limit, ms);
    }
    uiw_dbg(2, "qp %u: MSN %u finds no receive: holding (limit %d ms)", qp->ibqp.qp_num, r->hdr.msn,
            ms == UIW_RNR_UNLIMITED ? -1 : (int)ms);
}

/* RFC 5041 §7.1 check 4: MO + length within the buffer */
static void send_check_len(struct dp_rx *r)
{
    if (!r->msg_rtr && r->payload_len > r->rqe.length - r->msg_len) {
        r->rqe_status = IBV_WC_LOC_LEN_ERR;
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG);
    }
}

/* A held message: continue if a receive was posted, or with the
 * Terminate once the limit expired. False: still held. */
static bool rnr_resume(struct uiw_qp *qp, struct dp_rx *r)
{
    if (take_rqe(qp, r, true)) {
        rnr_unhold(qp, r);
        r->msg_active = true;
        send_check_len(r);
        return true;
    }
    if (uiw_now_ns() < r->hold_deadline_ns)
        return false;
    rnr_unhold(qp, r);
    uiw_log("qp %u: MSN %u found no posted receive within the receiver-not-ready limit",
            qp->ibqp.qp_num, r->hdr.msn);
    /* RFC 5041 §7.1 check 2, §7.2: Terminate at the segment's END */
    doom(r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_NOBUF);
    return true;
}

static void hdr_send(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_hdr *h = &r->hdr;

    r->kind = SEG_SEND;
    r->seg_base = h->mo;
    /* RFC 5041 §5.1.2, §5.2, §7.1 checks 3 and 5 (the wire core's
     * sequencer, which `uiwarp dump` checks traces with): a new message has
     * the next MSN of QN 0 and starts at MO 0; its further segments carry
     * its MSN and opcode at contiguous offsets */
    const uiw_useq seq = {.next_msn = qp->rx_msn[UIW_QN_SEND] + 1,
                          .open = r->msg_active,
                          .msn = r->msg_msn,
                          .opcode = r->msg_op,
                          .mo_next = (uint32_t)r->msg_len};
    uiw_term_cause c;
    if (!uiw_useq_check(&seq, h, &c)) {
        doom(r, c.layer, c.etype, c.ecode);
        return;
    }
    if (r->msg_active && r->msg_len > UINT32_MAX) { /* MO is 32 bits */
        doom(r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO);
        return;
    }
    if (!r->msg_active) {
        r->msg_msn = h->msn;
        r->msg_len = 0;
        r->msg_op = h->opcode;
        r->msg_rtr = false;
        r->msg_attach = false;
        /* uiwarp's Send with Immediate (docs/ENGINE.md): the tagged
         * Immediate Data before the Send takes no receive; the Send that
         * follows completes with it */
        if ((h->opcode == UIW_OP_IMM_DATA || h->opcode == UIW_OP_IMM_DATA_SE) &&
            uiw_imm_is_attached(h->u.imm) && !r->imm_pending) {
            r->msg_active = true;
            r->msg_rtr = true;
            r->msg_attach = true;
            return;
        }
        if (r->imm_pending && h->opcode != UIW_OP_SEND && h->opcode != UIW_OP_SEND_SE) {
            /* an attached immediate must be followed by its Send */
            doom(r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_UNEXPECTED_OPCODE);
            return;
        }
        /* a zero-length Send as the P2P RTR consumes no receive */
        if (!r->got_first && qp->mpa.p2p && qp->mpa.await_rtr && (qp->mpa.rtr & UIW_RTR_SEND) &&
            h->opcode == UIW_OP_SEND && h->last && !r->payload_len) {
            r->msg_active = true;
            r->msg_rtr = true;
            return;
        }
        /* RFC 5041 §7.1 check 2: a buffer for this QN/MSN (none: wait
         * for one, "Receiver not ready" above) */
        if (!take_rqe(qp, r, true)) {
            rnr_hold(qp, r);
            return;
        }
        r->msg_active = true;
    }
    send_check_len(r);
}

static void on_hdr(struct uiw_qp *qp, struct dp_rx *r, const uiw_rx_event *ev)
{
    r->hdr = *ev->hdr;
    r->ulpdu_len = ev->ulpdu_len;
    r->payload_len = ev->payload_len;
    r->active = true;
    r->doomed = false;
    r->held = false;
    r->cause_rreq = false;
    r->rqe_status = 0;
    r->sqe_status = 0;
    r->seg_base = 0;
    r->kind = SEG_NONE;
    if (r->dead)
        return;
    if (r->hdr.tagged) {
        if (r->hdr.opcode == UIW_OP_WRITE)
            hdr_write(qp, r);
        else
            hdr_rresp(qp, r);
    } else if (r->hdr.qn == UIW_QN_SEND) {
        hdr_send(qp, r);
    } else {
        r->kind = SEG_CTRL; /* header-only: handled at END */
    }
    {
        /* A few small segments between very large ones (rsockets: each
         * Write followed by its 4-byte Send; a ULP's header Send before its
         * data) keep the header-only reads: a full staging read after the
         * small one would swallow most of the next large payload (rstream
         * 64 KiB: 97% copied, not placed). RX_SMALL_RUN small ones in a row
         * end it. Moderately large ones (RX_BIG_SEG..RX_STICKY_SEG) do not
         * carry over small ones: there a full read of many segments at once
         * costs less than two reads per segment. */
        uint32_t zmin = uiw_config()->zcopy_min;
        /* ... large enough that after a header-only read (RX_ZC_TAIL bytes,
         * some of them payload) the rest still goes in place: otherwise
         * that read is a syscall for nothing (qperf rc_rdma_read_bw 4 KiB:
         * 256 bytes, then the other 3860 through staging anyway) */
        bool seg_big = r->kind != SEG_CTRL &&
                       r->payload_len >= (zmin > RX_BIG_SEG ? zmin : RX_BIG_SEG) + RX_ZC_TAIL;
        if (seg_big) {
            r->big = true;
            r->small_run = r->payload_len >= RX_STICKY_SEG ? 0 : RX_SMALL_RUN;
        } else if (!r->big || ++r->small_run >= RX_SMALL_RUN) {
            r->big = false;
            r->small_run = RX_SMALL_RUN;
        }
    }
}

/* ------------------------------------------------------------------------
 * Message ends
 * ---------------------------------------------------------------------- */

/* A doomed segment: specific completions, then the Terminate. */
static void seg_terminate(struct uiw_qp *qp, struct dp_rx *r)
{
    uint8_t img[UIW_TERM_HDR_IMAGE_MAX];
    unsigned n = uiw_term_hdr_image(&r->hdr, r->ulpdu_len, r->cause_rreq, img);

    if (r->rqe_status && r->msg_active && !r->msg_rtr)
        msg_complete(qp, r, (enum ibv_wc_status)r->rqe_status, NULL, false);
    if (r->sqe_status && r->kind == SEG_RRESP) {
        struct uiw_orqe *o = dp_orq_head(qp);
        if (o && o->sqe)
            dp_sq_fail_upto(qp, dp_sq_pos(qp, o->sqe), (enum ibv_wc_status)r->sqe_status);
    }
    uiw_qp_terminate_locked(qp, r->cause, img, n, cause_async(r->cause));
}

static void end_rresp(struct uiw_qp *qp, struct dp_rx *r)
{
    struct uiw_orqe *o = dp_orq_head(qp);
    struct uiw_sqe *e;

    r->rr_placed += r->payload_len;
    if (!r->hdr.last || !o)
        return;
    /* RFC 5040 §5.5 rule 19: the Read completes with its last response
     * segment placed (the length was checked at the header) */
    e = o->sqe;
    dp_orq_pop(qp);
    r->rr_placed = 0;
    if (e) {
        e->state = SQE_DONE;
        e->status = IBV_WC_SUCCESS;
    }
    dp_sq_complete(qp);
}

static void end_send(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_hdr *h = &r->hdr;
    struct ibv_wc wc;
    bool solicited = false;
    enum ibv_wc_status st = IBV_WC_SUCCESS;

    r->msg_len += r->payload_len;
    if (!h->last)
        return;
    qp->rx_msn[UIW_QN_SEND] = r->msg_msn;
    if (r->msg_attach) {
        memcpy(&r->imm_val, h->u.imm, sizeof(r->imm_val));
        r->imm_pending = true;
        r->msg_attach = false;
    }
    if (r->msg_rtr) {
        r->msg_active = false;
        r->msg_rtr = false;
        return;
    }
    memset(&wc, 0, sizeof(wc));
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = (uint32_t)r->msg_len;
    if (r->imm_pending) { /* the Send of a Send with Immediate */
        wc.wc_flags = IBV_WC_WITH_IMM;
        wc.imm_data = r->imm_val;
        r->imm_pending = false;
    }
    switch (h->opcode) {
    case UIW_OP_SEND_SE:
        solicited = true;
        break;
    case UIW_OP_SEND_SE_INV:
        solicited = true;
        /* fall through */
    case UIW_OP_SEND_INV: {
        /* RFC 5040 §5.3, §7.2 items 4-5: invalidate the STag, which must
         * be associated with this stream */
        int rc = uiw_stag_invalidate(qp->pd, h->inv_stag);
        if (rc) {
            uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT,
                                UIW_RDMAP_EC_INVALID_STAG};
            uint8_t img[UIW_TERM_HDR_IMAGE_MAX];
            unsigned n = uiw_term_hdr_image(h, r->ulpdu_len, false, img);

            if (rc == -EACCES) {
                c.ecode = UIW_RDMAP_EC_CANT_INVALIDATE; /* other PD: not this stream's */
            } else if (rc == -EINVAL) {
                c.etype = UIW_RDMAP_ET_REMOTE_OP;
                c.ecode = UIW_RDMAP_EC_CANT_INVALIDATE;
            }
            msg_complete(qp, r, IBV_WC_REM_INV_REQ_ERR, NULL, false);
            uiw_qp_terminate_locked(qp, c, img, n, cause_async(c));
            return;
        }
        wc.wc_flags = IBV_WC_WITH_INV;
        wc.invalidated_rkey = h->inv_stag;
        break;
    }
    case UIW_OP_IMM_DATA_SE:
        solicited = true;
        /* fall through */
    case UIW_OP_IMM_DATA:
        /* RFC 7306 §6: after a Write it completes the Write with Imm; on
         * its own (or after a Send) it is a receive with immediate data */
        wc.opcode = r->last_write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        wc.wc_flags = IBV_WC_WITH_IMM;
        memcpy(&wc.imm_data, h->u.imm, sizeof(wc.imm_data));
        wc.byte_len = 0;
        break;
    default:
        break;
    }
    r->last_write = false;
    msg_complete(qp, r, st, &wc, solicited);
}

/* Terminate for an error on an incoming header-only message. */
static void ctrl_fail(struct uiw_qp *qp, struct dp_rx *r, unsigned layer, unsigned etype,
                      unsigned ecode, bool rreq)
{
    doom(r, layer, etype, ecode);
    r->cause_rreq = rreq;
    seg_terminate(qp, r);
}

static struct uiw_irqe *irq_push(struct uiw_qp *qp)
{
    struct uiw_irqe *e = &qp->irq[(qp->irq_head + qp->irq_count) % UIW_MAX_IRD];

    memset(e, 0, sizeof(*e));
    qp->irq_count++;
    return e;
}

/* A request on QN 1 (Read Request, or Atomic Request sharing its MSNs and
 * IRD: RFC 7306 §5.2) in sequence (RFC 5041 §7.1 check 5) and within IRD
 * (RFC 5040 §6.1; PEERS.md §8, as siw)? If not, the Terminate (rreq: it
 * attaches the RDMAP header too) and false. */
static bool qn1_admit(struct uiw_qp *qp, struct dp_rx *r, bool rreq)
{
    if (!useq_next(qp->rx_msn[UIW_QN_READ_REQ], &r->hdr)) {
        ctrl_fail(qp, r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE, rreq);
        return false;
    }
    if (qp->irq_count >= dp_ird(qp)) {
        ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_CATASTROPHIC_STREAM,
                  rreq);
        return false;
    }
    if (!dp_irq_ready(qp)) {
        uiw_log("qp %u: no memory for the IRQ", qp->ibqp.qp_num);
        ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP, UIW_RDMAP_EC_CATASTROPHIC_STREAM,
                  rreq);
        return false;
    }
    uiw_progress_responder_seen();
    return true;
}

static void end_rreq(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_hdr *h = &r->hdr;
    const uiw_rreq *q = &h->u.rreq;
    struct uiw_irqe *e;

    if (!qn1_admit(qp, r, true))
        return;
    /* RFC 5040 §5.2.1, §7.2: a non-zero-length Read validates its source
     * (REMOTE_READ enforced); a zero-length one validates nothing */
    if (q->read_size) {
        enum uiw_mem_err err;
        uint8_t *addr;
        struct uiw_mr *mr = uiw_mr_get(qp->pd, q->src_stag, q->src_to, q->read_size,
                                       IBV_ACCESS_REMOTE_READ, &addr, &err);
        if (!mr)
            return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, dp_prot_code(err),
                             true);
        uiw_mr_put(mr);
        /* our response's TO must not wrap either (RFC 5041 §7.1) */
        if (q->sink_to > UINT64_MAX - (q->read_size - 1))
            return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, UIW_RDMAP_EC_TO_WRAP,
                             true);
    }
    qp->rx_msn[UIW_QN_READ_REQ] = h->msn;
    e = irq_push(qp);
    e->opcode = UIW_OP_READ_REQ;
    e->rreq = *q;
    e->msn = h->msn;
}

/* RFC 7306 §5.1.1 masked FetchAdd: a bit set in the mask is the most
 * significant bit of a field, its carry-out is dropped. The fields are
 * added without carries crossing masked bits, the masked bits get their
 * sum bit back. */
static uint64_t masked_add(uint64_t v, uint64_t add, uint64_t mask)
{
    return ((v & ~mask) + (add & ~mask)) ^ ((v ^ add) & mask);
}

/* Execute an Atomic Request on the 8-byte aligned word (RFC 7306 §5.1,
 * §5.3: atomic with respect to every QP of the process). */
static uint64_t atomic_exec(uint64_t *p, const uiw_atomic_req *a)
{
    uint64_t old = __atomic_load_n(p, __ATOMIC_SEQ_CST), nv;

    if (a->aop == UIW_AOP_FETCH_ADD) {
        if (!a->add_swap_mask)
            return __atomic_fetch_add(p, a->add_swap, __ATOMIC_SEQ_CST);
        do
            nv = masked_add(old, a->add_swap, a->add_swap_mask);
        while (
            !__atomic_compare_exchange_n(p, &old, nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
        return old;
    }
    /* CmpSwap: swap the masked bits if the masked compare matches;
     * otherwise memory is unchanged */
    for (;;) {
        if ((a->compare ^ old) & a->compare_mask)
            return old;
        nv = (old & ~a->add_swap_mask) | (a->add_swap & a->add_swap_mask);
        if (__atomic_compare_exchange_n(p, &old, nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return old;
    }
}

static void end_areq(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_hdr *h = &r->hdr;
    const uiw_atomic_req *a = &h->u.atomic_req;
    enum uiw_mem_err err;
    uint8_t *addr;
    struct uiw_mr *mr;
    struct uiw_irqe *e;
    uint64_t orig;

    /* RFC 7306 §5.2: QN 1, shared MSNs and IRD with Read Requests; errors
     * attach the DDP header only (§8.1 case 2) */
    if (!qn1_admit(qp, r, false))
        return;
    mr = uiw_mr_get(qp->pd, a->stag, a->to, 8, IBV_ACCESS_REMOTE_ATOMIC, &addr, &err);
    if (!mr)
        return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, dp_prot_code(err),
                         false);
    /* RFC 7306 §8.2: a target not 64-bit aligned is a Remote Operation
     * Error, catastrophic for the stream; memory is not modified */
    if ((uintptr_t)addr & 7u) {
        uiw_mr_put(mr);
        return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                         UIW_RDMAP_EC_CATASTROPHIC_STREAM, false);
    }
    orig = atomic_exec((uint64_t *)(void *)addr, a);
    uiw_mr_put(mr);
    qp->rx_msn[UIW_QN_READ_REQ] = h->msn;
    e = irq_push(qp);
    e->opcode = UIW_OP_ATOMIC_REQ;
    e->aresp.req_id = a->req_id;
    e->aresp.orig_value = orig;
    e->msn = h->msn;
}

static void end_aresp(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_hdr *h = &r->hdr;
    struct uiw_orqe *o = dp_orq_head(qp);
    struct iovec iov[RX_IOV];
    struct uiw_mr *mrs[RX_IOV];
    struct uiw_sqe *e;
    uint64_t v = h->u.atomic_resp.orig_value;
    const uint8_t *src = (const uint8_t *)&v;
    uint32_t cov = 0;
    int n;

    /* RFC 7306 §5.2.2: QN 3, MSNs in order, answering the oldest Atomic */
    if (!useq_next(qp->rx_msn[UIW_QN_ATOMIC_RESP], h))
        return ctrl_fail(qp, r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE,
                         false);
    if (!o)
        return ctrl_fail(qp, r, UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_NOBUF,
                         false);
    if (!o->atomic)
        return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                         UIW_RDMAP_EC_UNEXPECTED_OPCODE, false);
    if (h->u.atomic_resp.req_id != o->req_id)
        return ctrl_fail(qp, r, UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                         UIW_RDMAP_EC_UNSPECIFIED_OTHER, false);
    e = o->sqe;
    /* the original value, as a native 64-bit word, into the local SGEs */
    n = sge_map(qp, e->sge, e->num_sge, 0, 8, iov, mrs, RX_IOV, &cov);
    if (n < 0 || cov != 8) {
        if (n > 0)
            for (int i = 0; i < n; i++)
                uiw_mr_put(mrs[i]);
        r->sqe_status = 0;
        dp_sq_fail_upto(qp, dp_sq_pos(qp, e), IBV_WC_LOC_PROT_ERR);
        return ctrl_fail(qp, r, UIW_LAYER_DDP, UIW_DDP_ET_CATASTROPHIC, UIW_DDP_EC_CATASTROPHIC,
                         false);
    }
    for (int i = 0; i < n; i++) {
        memcpy(iov[i].iov_base, src, iov[i].iov_len);
        src += iov[i].iov_len;
        uiw_mr_put(mrs[i]);
    }
    qp->rx_msn[UIW_QN_ATOMIC_RESP] = h->msn;
    dp_orq_pop(qp);
    e->state = SQE_DONE;
    e->status = IBV_WC_SUCCESS;
    dp_sq_complete(qp);
}

static void hexdump(char *out, size_t cap, const uint8_t *p, unsigned n)
{
    size_t o = 0;

    out[0] = 0;
    for (unsigned i = 0; i < n && o + 4 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%02x", i ? " " : "", p[i]);
}

/* RFC 5040 §5.4, §6.2.1: the peer terminated the stream. */
static void end_term(struct uiw_qp *qp, struct dp_rx *r)
{
    const uiw_term *tm = &r->hdr.u.term;
    char ddp[3 * UIW_TERM_MAX_DDP_HDR + 1], rdma[3 * UIW_TERM_MAX_RDMA_HDR + 1];
    enum ibv_wc_status st = term_status(tm->cause);
    int pos = -1;

    hexdump(ddp, sizeof(ddp), tm->ddp_hdr, tm->ddp_hdr_len);
    hexdump(rdma, sizeof(rdma), tm->rdma_hdr, tm->rdma_hdr_len);
    uiw_log("qp %u: Terminate received: %s / %s / %s (control %02x %02x %02x %02x, %s layout, "
            "M%d D%d R%d, MSN %u) ddp [%s] rdma [%s]",
            qp->ibqp.qp_num, uiw_term_layer_name(tm->cause.layer),
            uiw_term_etype_name(tm->cause.layer, tm->cause.etype),
            uiw_term_ecode_name(tm->cause.layer, tm->cause.etype, tm->cause.ecode), tm->raw_ctrl[0],
            tm->raw_ctrl[1], tm->raw_ctrl[2], tm->raw_ctrl[3], tm->siw_layout ? "siw" : "RFC",
            tm->hdr_mpa, tm->hdr_ddp, tm->hdr_rdma, r->hdr.msn, ddp, rdma);
    qp->term_received = true;
    qp->st->term_received++;
    qp->term = tm->cause;
    qp->rx_msn[UIW_QN_TERMINATE] = r->hdr.msn;

    /* The WR it is about: a Read/Atomic named by its QN 1 MSN in the
     * terminated DDP header, else the oldest outstanding one. */
    dp_sq_complete(qp);
    uint32_t qn, msn;
    if (uiw_term_untagged_qn_msn(tm, &qn, &msn)) {
        for (unsigned i = 0; qn == UIW_QN_READ_REQ && i < qp->orq_count; i++) {
            const struct uiw_orqe *o = &qp->orq[(qp->orq_head + i) % UIW_MAX_ORD];
            if (o->msn == msn && o->sqe) {
                pos = (int)dp_sq_pos(qp, o->sqe);
                break;
            }
        }
    }
    if (pos < 0 && qp->sq_count)
        pos = 0;
    if (pos >= 0)
        dp_sq_fail_upto(qp, (unsigned)pos, st);
    dp_enter_error(qp);
    uiw_async_event(qp->ctx, IBV_EVENT_QP_FATAL, &qp->ibqp);
    /* RFC 5040 §5.4: we may stop sending; close our direction */
    if (qp->fd >= 0)
        (void)shutdown(qp->fd, SHUT_WR);
    if (qp->conn)
        uiw_cm_llp_closed(qp->conn, -EPROTO);
}

static void on_end(struct uiw_qp *qp, struct dp_rx *r)
{
    if (!r->active)
        return;
    r->active = false;
    if (r->dead || r->kind == SEG_NONE)
        return;
    if (r->doomed) {
        seg_terminate(qp, r);
        return;
    }
    if (!r->got_first) {
        bool rtr_write = qp->mpa.p2p && qp->mpa.await_rtr && r->kind == SEG_WRITE;
        bool term = r->kind == SEG_CTRL && r->hdr.opcode == UIW_OP_TERMINATE;

        r->got_first = true;
        if (qp->mpa.await_rtr) {
            /* RFC 5044 §7.1.2 rule 4: we may send from now on */
            dp_tx_release_await(qp);
            /* A Terminate in place of the RTR (RFC 6581 §9.2: the
             * initiator found no matching RTR type, code 7; cxgb4's "RTR
             * mismatch", notes/rnic-mpa.md §2.4) ends a connection that
             * never was established: end_term reports it as a connect
             * error (uiw_cm_llp_closed in WAIT_RTR), not ESTABLISHED then
             * DISCONNECTED. */
            if (qp->conn && !term)
                uiw_cm_first_fpdu(qp->conn);
        }
        if (rtr_write)
            return;
    }
    switch (r->kind) {
    case SEG_WRITE:
        if (r->hdr.last)
            r->last_write = true;
        break;
    case SEG_RRESP:
        end_rresp(qp, r);
        break;
    case SEG_SEND:
        end_send(qp, r);
        break;
    case SEG_CTRL:
        switch (r->hdr.opcode) {
        case UIW_OP_READ_REQ:
            end_rreq(qp, r);
            break;
        case UIW_OP_ATOMIC_REQ:
            end_areq(qp, r);
            break;
        case UIW_OP_ATOMIC_RESP:
            end_aresp(qp, r);
            break;
        case UIW_OP_TERMINATE:
            end_term(qp, r);
            break;
        default:
            break;
        }
        break;
    default:
        break;
    }
}

static void on_error(struct uiw_qp *qp, struct dp_rx *r, const uiw_rx_event *ev)
{
    bool was_dead = r->dead;

    r->active = false;
    r->dead = true;
    if (was_dead)
        return;
    uiw_log("qp %u: receive error at stream offset %llu: %s", qp->ibqp.qp_num,
            (unsigned long long)ev->err_off, ev->why ? ev->why : "?");
    /* RFC 5044 §8 / RFC 5041 §7 / RFC 5040 §7: the parser's cause and the
     * offending header */
    uiw_qp_terminate_locked(qp, ev->cause, ev->bad_hdr, ev->bad_hdr_len, cause_async(ev->cause));
}

/* live counters (include/uiwarp/stat.h), at each segment's header */
static void count_hdr(struct uiw_qp *qp, const uiw_rx_event *ev)
{
    struct uiw_stat_dir_counters *c = &qp->st->rx;
    unsigned op = ev->hdr->opcode & (UIW_STAT_NOPS - 1);

    c->fpdus++;
    c->bytes[op] += ev->payload_len;
    if (ev->hdr->last)
        c->msgs[op]++;
}

/* A whole FPDU in one event (the parser's fast path, UIW_RX_FPDU): what
 * its HDR, PAYLOAD and END events do in feed()'s loop, in one dispatch,
 * stopping where that loop would stop. A header that is held (receiver
 * not ready) rewinds the parser to just after it, so that the payload,
 * pad and CRC wait in staging exactly as after a HDR event. Returns the
 * bytes given back to the stream. */
static size_t on_fpdu(struct uiw_qp *qp, struct dp_rx *r, const uiw_rx_event *ev)
{
    count_hdr(qp, ev);
    on_hdr(qp, r, ev);
    if (r->held)
        return uiw_rx_fpdu_rewind(&qp->rx);
    if (r->dead)
        return 0; /* nothing more is acted on */
    if (ev->len && r->active && !r->doomed && !r->zc)
        place(qp, r, ev->offset, ev->data, ev->len);
    if (r->dead || r->held)
        return 0;
    on_end(qp, r);
    return 0;
}

static void on_event(struct uiw_qp *qp, struct dp_rx *r, const uiw_rx_event *ev)
{
    switch (ev->kind) {
    case UIW_RX_HDR:
        count_hdr(qp, ev);
        on_hdr(qp, r, ev);
        break;
    case UIW_RX_PAYLOAD:
        if (r->active && !r->dead && !r->doomed && !r->zc)
            place(qp, r, ev->offset, ev->data, ev->len);
        break;
    case UIW_RX_END:
        on_end(qp, r);
        break;
    case UIW_RX_ERROR:
        if (ev->crc_checked && !ev->crc_ok)
            qp->st->crc_errors++;
        on_error(qp, r, ev);
        break;
    default:
        break;
    }
}

/* Feed bytes to the parser and act on every event; stops after a header
 * that is held (receiver not ready). Returns the bytes consumed. */
static size_t feed(struct uiw_qp *qp, struct dp_rx *r, const uint8_t *p, size_t n)
{
    size_t total = 0;

    while (n && !r->dead && !r->held) {
        uiw_rx_event ev;
        size_t used = uiw_rx_feed(&qp->rx, p, n, &ev);

        if (ev.kind == UIW_RX_FPDU) /* held: the FPDU's tail goes back */
            used -= on_fpdu(qp, r, &ev);
        else if (ev.kind != UIW_RX_NONE)
            on_event(qp, r, &ev);
        else if (!used)
            break;
        p += used;
        n -= used;
        total += used;
    }
    return total;
}

/* ------------------------------------------------------------------------
 * Socket reading
 * ---------------------------------------------------------------------- */

/* Staging buffers (r->cap bytes: RX_BUF or RX_BUF_CRC) are taken for a
 * read and given back when everything in them was fed, so that an idle QP
 * holds none; a few spares are shared by all QPs, so that taking one is no
 * malloc on the data path. */
#define RX_SPARES 8
static struct {
    pthread_mutex_t lock;
    uint8_t *spare[2][RX_SPARES]; /* [0]: RX_BUF, [1]: RX_BUF_CRC */
    int n[2];
} rx_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ... and in front of them one per thread and size (dp_tl): a thread that
 * reads one QP after another (a poller, the progress thread) would
 * otherwise take the shared lock twice per read, and the application's
 * and the progress thread's reads would pass its cache line back and
 * forth. */
static bool rx_buf_get(struct dp_rx *r)
{
    int k = r->cap == RX_BUF_CRC;

    if (r->buf)
        return true;
    struct dp_tl *c = dp_tl();

    if (c && c->rx[k]) {
        r->buf = c->rx[k];
        c->rx[k] = NULL;
        return true;
    }
    pthread_mutex_lock(&rx_cache.lock);
    if (rx_cache.n[k])
        r->buf = rx_cache.spare[k][--rx_cache.n[k]];
    pthread_mutex_unlock(&rx_cache.lock);
    if (!r->buf)
        r->buf = malloc(r->cap);
    return r->buf != NULL;
}

static void rx_buf_put(struct dp_rx *r)
{
    uint8_t *b = r->buf;
    int k = r->cap == RX_BUF_CRC;

    if (!b)
        return;
    r->buf = NULL;
    r->off = r->len = 0;
    struct dp_tl *c = dp_tl();

    if (c && !c->rx[k]) {
        c->rx[k] = b;
        return;
    }
    pthread_mutex_lock(&rx_cache.lock);
    if (rx_cache.n[k] < RX_SPARES) {
        rx_cache.spare[k][rx_cache.n[k]++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&rx_cache.lock);
    free(b);
}

/* One read: readv into the destination when possible, else recv into the
 * staging buffer. Returns bytes, 0 at EOF, or -errno; *all: the read took
 * less than it asked for (so the socket held no more at that moment) and
 * at most RX_SHORT_MAX bytes. */
static ssize_t rx_read(struct uiw_qp *qp, struct dp_rx *r, bool *all)
{
    uint32_t poff = 0, room;
    size_t want;
    ssize_t n;

    *all = false;
    if (!rx_buf_get(r))
        return -ENOMEM;

    room = r->dead ? 0 : uiw_rx_payload_room(&qp->rx, &poff);
    if (write_end(r, poff, room))
        room--; /* the message's last byte comes through staging: write_end() */
    /* With CRC on, never in place: the CRC must cover the bytes as they
     * came off the wire (RFC 5044 §4.4), and a program may write its own
     * buffer at any moment (the placed data is then undefined, but the
     * stream must survive). A CRC computed over the destination after a
     * readv could see such a write and kill the connection; the staging
     * buffer is ours alone, so the parser hashes it and place() copies. */
    if (room && r->active && !r->doomed && !qp->rx.cfg.crc && room >= uiw_config()->zcopy_min) {
        struct iovec iov[RX_IOV + 1];
        struct uiw_mr *mrs[RX_IOV];
        uint32_t cov = 0;
        int k = seg_map(qp, r, poff, room, iov, mrs, RX_IOV, &cov);

        if (k > 0) {
            iov[k].iov_base = r->buf;
            iov[k].iov_len = RX_ZC_TAIL < r->cap ? RX_ZC_TAIL : r->cap;
            n = readv(qp->fd, iov, k + 1);
            r->st_reads++;
            *all = n > 0 && (size_t)n < (size_t)cov + iov[k].iov_len && n <= RX_SHORT_MAX;
            if (n > 0 && qp->pcap) /* before the bytes are used (or overwritten) */
                uiw_cap_data(qp->pcap, false, iov, k + 1, (size_t)n);
            if (n > 0) {
                size_t left = (size_t)n < cov ? (size_t)n : cov;
                r->st_zc += left;
                qp->st->rx_in_place += left;
                /* the parser sees the bytes where they already are */
                r->zc = true;
                for (int i = 0; i < k && left; i++) {
                    size_t c = iov[i].iov_len < left ? iov[i].iov_len : left;
                    feed(qp, r, iov[i].iov_base, c);
                    left -= c;
                }
                r->zc = false;
                if ((size_t)n > cov) {
                    r->len = (size_t)n - cov;
                    r->off = 0;
                }
            }
            for (int i = 0; i < k; i++)
                uiw_mr_put(mrs[i]);
            return n < 0 ? -errno : n;
        }
    }
    /* after a large segment: this one's rest (below UIWARP_ZCOPY_MIN, or
     * none) and the next header only, so that its payload goes in place */
    want = r->cap;
    if (r->big && !r->dead && !qp->rx.cfg.crc && (size_t)room + RX_ZC_TAIL < want)
        want = (size_t)room + RX_ZC_TAIL;
    n = recv(qp->fd, r->buf, want, MSG_DONTWAIT);
    r->st_reads++;
    *all = n > 0 && (size_t)n < want && n <= RX_SHORT_MAX;
    if (n > 0 && qp->pcap)
        uiw_cap_bytes(qp->pcap, false, r->buf, (size_t)n);
    if (n > 0) {
        r->len = (size_t)n;
        r->off = 0;
    }
    return n < 0 ? -errno : n;
}

void dp_rx_error_cleanup(struct uiw_qp *qp, enum ibv_wc_status st)
{
    struct dp_rx *r = RX(qp);

    if (!r || r->err_done)
        return;
    r->err_done = true;
    if (r->held)
        rnr_unhold(qp, r);
    r->dead = true;
    r->active = false;
    /* a receive taken from the SRQ is ours to complete; an RQ entry is
     * still queued and flushed by qp.c */
    if (r->msg_active && r->msg_srq && !r->msg_rtr) {
        struct ibv_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = r->rqe.wr_id;
        wc.status = st;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = qp->ibqp.qp_num;
        uiw_cq_push(qp->rcq, &wc, false);
    }
    r->msg_active = false;
    r->rr_placed = 0;
}

/* short_ok: a short read may end the call (see below) */
static int rx_progress(struct uiw_qp *qp, size_t budget, bool short_ok)
{
    struct dp_rx *r = RX(qp);
    bool all = false;

    if (!r || qp->fd < 0)
        return 0;
    if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
        dp_rx_error_cleanup(qp, IBV_WC_WR_FLUSH_ERR);
    while (!r->eof && qp->fd >= 0) {
        ssize_t n;

        /* receiver not ready: the socket stays unread (TCP holds the peer)
         * until a receive is posted or the limit expires */
        if (r->held && !rnr_resume(qp, r))
            break;
        if (r->off < r->len) {
            size_t off = r->off, len = r->len, used = 0;
            r->off = r->len = 0;
            if (!r->dead)
                used = feed(qp, r, r->buf + off, len - off);
            if (r->held) { /* the rest waits in staging, exactly as it was */
                r->off = off + used;
                r->len = len;
            }
            continue;
        }
        if (!budget) {
            /* let other QPs run: with EPOLLET a MOD reports the fd again
             * (to the progress thread, or to the CQ readiness set of the
             * thread that polls it, qp_dp.c "Poll ownership") */
            dp_arm(qp);
            if (qp->rx_muted & UIW_MUTE_POLL) {
                uiw_cq_drive_again(qp->rcq, qp);
                if (qp->scq != qp->rcq)
                    uiw_cq_drive_again(qp->scq, qp);
            }
            break;
        }
        /* A short read took everything the socket had: the next read
         * would find nothing but EOF (one recv per message saved on a
         * ping-pong). short_ok says who reports what comes next. A thread
         * that polls or waits with the socket out of the progress thread's
         * EPOLLIN (rx_muted): its next round asks poll(2) (rx_idle), which
         * reports data and EOF alike, and giving the socket back re-arms
         * epoll, which reports both. The progress thread, on an event
         * without EPOLLRDHUP: every later arrival, data or FIN, queues the
         * edge-triggered event again. Otherwise (a FIN reported with the
         * data, a timer) reads go on to EAGAIN or EOF. Only between
         * FPDUs (inside one, the rest is on its way: the peer's sendmsg is
         * still copying) and after small reads (RX_SHORT_MAX). */
        if (all && short_ok && uiw_rx_idle(&qp->rx)) {
            r->drained = true;
            break;
        }
        n = rx_read(qp, r, &all);
        if (n > 0) {
            r->drained = false;
            budget = (size_t)n < budget ? budget - (size_t)n : 0;
            continue;
        }
        if (n == -EINTR)
            continue;
        if (n == -EAGAIN || n == -EWOULDBLOCK) {
            r->drained = true;
            break;
        }
        uiw_qp_llp_closed_locked(qp, (int)n);
        break;
    }
    if (r->off >= r->len) /* all fed (nothing held in staging) */
        rx_buf_put(r);
    uiw_qp_tx_progress(qp);
    return 0;
}

bool dp_rx_got_first(struct uiw_qp *qp)
{
    struct dp_rx *r = RX(qp);

    return r && r->got_first;
}

int uiw_qp_rx_progress(struct uiw_qp *qp)
{
    return rx_progress(qp, RX_BUDGET, qp->rx_muted != 0);
}

int uiw_qp_rx_event(struct uiw_qp *qp, uint32_t events)
{
    bool edge = (events & EPOLLIN) && !(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));

    return rx_progress(qp, RX_BUDGET, edge || qp->rx_muted != 0);
}

/* A busy poller's empty polls: when the last read drained the socket and
 * nothing waits in staging, ask poll(2) first. It reads the socket's state
 * without its lock; recv(2) takes the lock (contending with the peer's
 * sendmsg, which on loopback delivers into this very socket) and the
 * staging buffer from the shared pool, only to find nothing. Errors and
 * EOF make poll report the socket, and recv then sees them. True if there
 * is nothing to read. */
static bool rx_idle(struct uiw_qp *qp, const struct dp_rx *r)
{
    if (r && r->drained && qp->fd >= 0 && r->off >= r->len && !r->held && !r->eof &&
        qp->state != IBV_QPS_ERR && qp->state != IBV_QPS_RESET) {
        struct pollfd p = {.fd = qp->fd, .events = POLLIN};

        return poll(&p, 1, 0) == 0;
    }
    return false;
}

/* From ibv_poll_cq on an empty CQ: one read at most (the progress thread,
 * re-armed, does the rest), so that the poller gets back to its program
 * instead of becoming the receive engine while the peer keeps sending. */
int uiw_qp_rx_poll(struct uiw_qp *qp)
{
    if (rx_idle(qp, RX(qp)))
        return 0;
    /* a poller that owns the socket (qp_dp.c "Poll ownership") is the
     * only one reading it: as much as the progress thread would */
    rx_progress(qp, (qp->rx_muted & UIW_MUTE_POLL) ? RX_BUDGET : 1, qp->rx_muted != 0);
    return 1;
}

/* From a thread spinning in ibv_get_cq_event (cq.c "Waiting"), which has
 * the socket to itself: everything there is, asking poll(2) first as a
 * poller does (qperf's rc_rdma_read_bw: 7 to 8 empty recv per Read). */
int uiw_qp_rx_wait_drive(struct uiw_qp *qp)
{
    if (rx_idle(qp, RX(qp))) {
        /* the waiter also pushes what the socket would not take yet, as
         * a read would after it (qperf rc_bw 64 KiB: the sender waits
         * here for its completions while its Sends queue) */
        uiw_qp_tx_progress(qp);
        return 0;
    }
    rx_progress(qp, RX_BUDGET, qp->rx_muted != 0);
    return 1;
}

void uiw_qp_rx_stats(struct uiw_qp *qp, uint64_t *in_place, uint64_t *copied, uint64_t *reads)
{
    struct dp_rx *r;

    pthread_mutex_lock(&qp->lock);
    r = RX(qp);
    *in_place = r ? r->st_zc : 0;
    *copied = r ? r->st_copy : 0;
    *reads = r ? r->st_reads : 0;
    pthread_mutex_unlock(&qp->lock);
}

bool dp_rx_eof(struct uiw_qp *qp, int err, bool *clean)
{
    struct dp_rx *r = RX(qp);

    if (!r) {
        *clean = err == 0;
        return true;
    }
    if (r->eof)
        return false;
    r->eof = true;
    *clean = err == 0 && uiw_rx_idle(&qp->rx) && !r->msg_active;
    return true;
}

int dp_rx_attach(struct uiw_qp *qp)
{
    struct dp_rx *r = RX(qp);
    uiw_rx_cfg cfg;

    size_t want = qp->mpa.crc ? RX_BUF_CRC : RX_BUF;

    if (!r) {
        r = calloc(1, sizeof(*r));
        if (!r)
            return -ENOMEM;
        qp->rx_state = r;
    } else {
        rx_buf_put(r);
        memset(r, 0, sizeof(*r));
    }
    r->cap = want; /* r->buf: when a read needs it (rx_buf_get) */
    memset(&cfg, 0, sizeof(cfg));
    cfg.crc = qp->mpa.crc;
    cfg.markers = qp->mpa.markers_rx;
    cfg.fpdu_events = true; /* small FPDUs in one event: on_fpdu */
    uiw_rx_init(&qp->rx, &cfg);
    return 0;
}

void dp_rx_free(struct uiw_qp *qp)
{
    struct dp_rx *r = RX(qp);

    if (!r)
        return;
    uiw_dbg(1, "qp %u: received %llu bytes in place, %llu copied, %llu reads", qp->ibqp.qp_num,
            (unsigned long long)r->st_zc, (unsigned long long)r->st_copy,
            (unsigned long long)r->st_reads);
    rx_buf_put(r);
    free(r);
    qp->rx_state = NULL;
}
