/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Send queue processing and FPDU transmission (docs/ENGINE.md "Transmit").
 *
 * Work sources, served one message at a time (DDP segments of different
 * messages are never interleaved on the stream, so a receiver like siw,
 * which handles one tagged and one untagged message at once, is happy):
 *   - the RTR of an active P2P connection (first, before anything else);
 *   - the SQ, in order (RFC 5040 §5.5 rule 13), Reads and Atomics limited
 *     by the negotiated ORD (RFC 5040 §6.1), a fenced WR waiting until no
 *     Read/Atomic is outstanding;
 *   - the IRQ (Read and Atomic Responses, in the order the requests were
 *     delivered: RFC 5040 §5.5 rule 20, RFC 7306 §5.2.2 rule 8),
 *     alternating with the SQ message by message for fairness;
 *   - a Terminate (RFC 5040 §5.4): after it nothing else is sent.
 *
 * Each message is cut into FPDUs by the wire core (uiw_tx_next) whose
 * iovecs point into the registered buffers; the header/pad/CRC bytes are
 * copied into a per-batch arena so that up to IOV_MAX iovecs of many FPDUs
 * go out in one sendmsg(MSG_DONTWAIT|MSG_NOSIGNAL). A partial write is
 * remembered (the iovec array is advanced in place) and resumed when the
 * socket becomes writable (EPOLLOUT is armed only while blocked).
 *
 * Read Response payload comes from a local MR named by the peer: the MR is
 * looked up with IBV_ACCESS_REMOTE_READ (enforced, unlike siw) and held
 * (users count) only during one call; if bytes of it are still unsent when
 * the call returns they are copied into a spill buffer first, so that
 * ibv_dereg_mr never waits for the network and never lets a deregistered
 * region reach the wire.
 *
 * Completions (in order, RFC 5040 §5.5 rule 15): Send/Write when the last
 * byte of their last FPDU was accepted by TCP (as siw), Reads when the last
 * Read Response segment was placed, Atomics when the Atomic Response
 * arrived (qp_rx.c), Local Invalidate when executed in SQ order.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "dp_int.h"
#include "pcap_out.h"

#define TXB_IOV     1024 /* IOV_MAX on Linux */
#define TXB_FPDUS   256
#define TXB_ARENA   (32u * 1024)
#define TXB_BYTES   (1u << 20)    /* bytes per sendmsg batch */
#define TXB_VOL_MAX (256u * 1024) /* Read Response bytes per batch (spill bound) */
#define TXB_HELD    8
#define TX_COPY_MAX 256u /* payload pieces copied into the arena (append_fpdu) */
#define TXB_SPILLS  4
#define TXB_MM      64 /* sendmmsg messages per call (aligned sender) */
/* RFC 5044 §4.5: MPA does not offer a MULPDU below 128 octets when FPDUs
 * are already packed into the segment; the room a split FPDU needs then is
 * 128 + 6 (length field and CRC), rounded up to 4 */
#define SEG_MIN_ROOM 136u
#define SEG_REFRESH  64u /* batches between TCP_MAXSEG reads */
/* A sendmsg of the aligned sender ends (MSG_EOR) at the first segment
 * boundary past this many bytes (seg_piece): below a GSO buffer (64 KiB
 * less headers), so TCP's buffers are as many as before, and a grid that
 * TCP lost stays lost for one buffer at most */
#define SEG_PIECE 60000u
#define TX_BUDGET (16u << 20) /* bytes per call before yielding to other QPs */
/* Coalescing (docs/ENGINE.md "Transmit"): deferred work that makes
 * ibv_post_send transmit at once */
#define TX_DEFER_WRS 128u
/* a loopback TCP buffer (GSO 64 KiB): Open MPI over ofi_rxm sends 64 KiB
 * as four 16 KiB Sends, which at 16 KiB each went alone (MPI bandwidth
 * 0.76x btl tcp; 64 KiB: 0.97-1.0x) */
#define TX_DEFER_BYTES (64u * 1024)
/* ... with FPDUs aligned with segments (seg_room), where a batch ends
 * with MSG_EOR, so that TCP's next buffer starts with the next batch: a
 * whole batch (1 MiB), or each batch end costs a buffer (over a veth pair,
 * ib_send_bw -R -s 4096 against the batched sender: 0.85 with 16 KiB,
 * 1.15 with 64 KiB, 1.45 with 1 MiB; ib_write_bw -R -s 65536 0.88 with
 * 64 KiB, whose WRs then each went alone, 0.92-1.0 with 1 MiB) */
#define TX_DEFER_BYTES_SEG TXB_BYTES
#define TX_KICK_US         50u  /* the progress thread's backstop */
#define TX_KICK_MAX_US     400u /* ... after firings that found nothing to do */
/* posts that follow each other within the window and still go out at
 * once: a Write and the Send that announces it, a short burst */
#define TX_STREAK 3u

enum { MK_NONE = 0, MK_SQE, MK_IRQ, MK_TERM };
/* dp_tx.vol[]: what an iovec points into */
enum {
    VOL_NONE = 0, /* arena, spill, inline slot: ours */
    VOL_IRQ,      /* a Read Response source MR, held during one call only */
    VOL_SQ,       /* a Send/Write source MR, held by its SQE (uiw_sqe.mr) */
};
enum { SRC_NONE = 0, SRC_SQ, SRC_IRQ, SRC_RTR };

struct dp_fp {
    size_t end; /* batch offset just past this FPDU */
    uint8_t kind;
    unsigned arg;
};

/* A batch's staging (about 56 KiB): taken when the QP fills a batch,
 * given back when the batch is completely out, so that an idle QP holds
 * none (txb_get / txb_put). */
struct dp_txb {
    struct iovec iov[TXB_IOV];
    uint8_t vol[TXB_IOV]; /* VOL_*: points into an MR */
    struct dp_fp fp[TXB_FPDUS];
    uint8_t arena[TXB_ARENA];
    uiw_fpdu fpdu; /* the FPDU being built (fill_batch, queue_terminate) */
    /* FPDU/segment alignment (seg_room): batch offsets at which a TCP
     * segment ends early (a sendmsg with MSG_EOR ends there), and the
     * iovec that starts at each */
    size_t cut_end[TXB_FPDUS];
    int cut_iov[TXB_FPDUS];
    struct mmsghdr mm[TXB_MM];
};

struct dp_tx {
    /* the batch being written (its arrays in *b; no b: empty batch) */
    struct dp_txb *b;
    int niov, cur; /* cur: first iovec not completely sent */
    size_t total, sent;
    int nfp, fp_cur; /* fp_cur: first FPDU not completely sent */
    /* FPDU/segment alignment (seg_room; 0: off) */
    unsigned seg;      /* the TCP segment size (the MSS) */
    unsigned fpdu_max; /* the FPDU size otherwise (max_fpdu of dp_tx_attach) */
    unsigned refresh;  /* batches until TCP_MAXSEG is read again */
    bool fixed_fpdu;   /* UIWARP_MAX_FPDU: fpdu_max does not follow the MSS */
    bool nomerge;      /* the next iovec starts after a cut */
    size_t grid;       /* batch offset where the current segment grid starts */
    int ncut, cut_cur; /* cut_cur: first cut past `sent` */
    size_t arena_used;
    size_t vol_bytes;
    uint64_t wire_base; /* stream offset of the batch's first byte */
    uint8_t **spill;    /* copies of MR bytes still to send (spill_vol, revoke) */
    int nspill, spill_cap;
    uint8_t *term_buf; /* unsent rest of an FPDU cut by a Terminate */

    /* the message being segmented */
    uint8_t src;      /* SRC_* */
    uint8_t phase;    /* SQ: 0 the message, 1 its Immediate Data (Write with Imm),
                       * 2 the Immediate Data before it (Send with Imm) */
    uiw_hdr next_hdr; /* phase 2: the Send that follows */
    int next_nsgl;
    bool irq_read;    /* SRC_IRQ: a Read Response (payload from an MR) */
    bool irq_held;    /* ... whose MR is held in this call */
    unsigned sq_idx;  /* SRC_SQ: ring index */
    unsigned irq_pos; /* SRC_IRQ: ring index */
    uiw_tx_msg msg;
    struct iovec sgl[UIW_MAX_SGE];

    struct uiw_mr *held[TXB_HELD];
    int nheld;

    unsigned sq_started;  /* SQEs from sq_head that were started */
    unsigned irq_started; /* IRQ entries from irq_head that were started */
    bool last_irq;        /* fairness: the previous message came from the IRQ */
    uint8_t rtr;          /* P2P RTR still to send (enum uiw_rtr bit) */
    bool await;           /* responder: nothing before the first FPDU arrived */
    uint8_t wakes;        /* initiator: wake-ups still to send while the peer
                           * sends nothing (qp->first_hold, docs/INTEROP.md §1) */
    unsigned wake_ms;     /* the delay of the first one */
    bool term_queued;     /* a Terminate is in the batch: nothing else follows */
    bool term_out;        /* ... and was handed to TCP */
    bool shut;            /* SHUT_WR done */
    bool err_done;        /* ERR cleanup done */
    bool busy;            /* uiw_qp_tx_progress running (re-entry guard) */
    uint32_t atomic_id;
};

static struct dp_tx *TX(struct uiw_qp *qp)
{
    return qp->tx_state;
}

/* ------------------------------------------------------------------------
 * Helpers shared with qp_rx.c
 * ---------------------------------------------------------------------- */

void dp_orq_pop(struct uiw_qp *qp)
{
    if (!qp->orq_count)
        return;
    qp->orq_head = (qp->orq_head + 1) % UIW_MAX_ORD;
    qp->orq_count--;
}

void dp_sqe_finish(struct uiw_qp *qp, struct uiw_sqe *e, enum ibv_wc_status st)
{
    struct ibv_wc wc;

    uiw_sqe_put_mrs(e);
    e->state = SQE_DONE;
    e->status = (uint8_t)st;
    if (!(qp->sq_sig_all || (e->flags & IBV_SEND_SIGNALED)) && st == IBV_WC_SUCCESS)
        return;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = e->wr_id;
    wc.status = st;
    wc.opcode = dp_wc_opcode(e->opcode);
    wc.qp_num = qp->ibqp.qp_num;
    wc.byte_len =
        e->opcode == IBV_WR_LOCAL_INV || e->opcode == IBV_WR_BIND_MW ? 0 : (uint32_t)e->length;
    uiw_cq_push(qp->scq, &wc, false);
}

static void sq_pop(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);

    qp->sq_head = (qp->sq_head + 1) % qp->sq_cap;
    qp->sq_count--;
    if (t && t->sq_started)
        t->sq_started--;
}

void dp_sq_complete(struct uiw_qp *qp)
{
    bool popped = false;

    while (qp->sq_count) {
        struct uiw_sqe *e = &qp->sq[qp->sq_head];

        if (e->state != SQE_DONE)
            break;
        dp_sqe_finish(qp, e, (enum ibv_wc_status)e->status);
        sq_pop(qp);
        popped = true;
    }
    /* IB verbs: SQD with notification reports the drained SQ once */
    if (popped && !qp->sq_count && qp->state == IBV_QPS_SQD && qp->attr.en_sqd_async_notify)
        uiw_async_event(qp->ctx, IBV_EVENT_SQ_DRAINED, &qp->ibqp);
}

void dp_sq_fail_upto(struct uiw_qp *qp, unsigned pos, enum ibv_wc_status st)
{
    for (unsigned i = 0; i < pos && qp->sq_count; i++) {
        struct uiw_sqe *e = &qp->sq[qp->sq_head];

        dp_sqe_finish(qp, e,
                      e->state == SQE_DONE ? (enum ibv_wc_status)e->status : IBV_WC_WR_FLUSH_ERR);
        sq_pop(qp);
    }
    if (qp->sq_count) {
        dp_sqe_finish(qp, &qp->sq[qp->sq_head], st);
        sq_pop(qp);
    }
}

/* ------------------------------------------------------------------------
 * The batch
 * ---------------------------------------------------------------------- */

static void release_held(struct dp_tx *t)
{
    for (int i = 0; i < t->nheld; i++)
        uiw_mr_put(t->held[i]);
    t->nheld = 0;
    t->irq_held = false;
}

/* Spare batch stagings shared by all QPs (a few: as many as QPs fill
 * batches at once), so that taking one is no malloc on the data path. */
#define TXB_SPARES 8
static struct {
    pthread_mutex_t lock;
    struct dp_txb *spare[TXB_SPARES];
    int n;
} txb_cache = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* ... and in front of them one per thread (dp_tl), without a lock (as
 * qp_rx.c's staging): a ping-pong's every post took the shared lock
 * twice. */
static bool txb_get(struct dp_tx *t)
{
    if (t->b)
        return true;
    struct dp_tl *c = dp_tl();

    if (c && c->txb) {
        t->b = c->txb;
        c->txb = NULL;
        return true;
    }
    pthread_mutex_lock(&txb_cache.lock);
    if (txb_cache.n)
        t->b = txb_cache.spare[--txb_cache.n];
    pthread_mutex_unlock(&txb_cache.lock);
    if (!t->b)
        t->b = malloc(sizeof(*t->b));
    return t->b != NULL;
}

/* Only with the batch empty (niov 0: nothing points into the arena). */
static void txb_put(struct dp_tx *t)
{
    struct dp_txb *b = t->b;

    if (!b)
        return;
    t->b = NULL;
    struct dp_tl *c = dp_tl();

    if (c && !c->txb) {
        c->txb = b;
        return;
    }
    pthread_mutex_lock(&txb_cache.lock);
    if (txb_cache.n < TXB_SPARES) {
        txb_cache.spare[txb_cache.n++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&txb_cache.lock);
    free(b);
}

static void batch_reset(struct uiw_qp *qp, struct dp_tx *t)
{
    t->niov = t->cur = 0;
    t->total = t->sent = 0;
    t->nfp = t->fp_cur = 0;
    t->grid = 0;
    t->ncut = t->cut_cur = 0;
    t->nomerge = false;
    t->arena_used = 0;
    t->vol_bytes = 0;
    t->wire_base = qp->tx.stream_off;
    for (int i = 0; i < t->nspill; i++)
        free(t->spill[i]);
    t->nspill = 0;
    free(t->term_buf);
    t->term_buf = NULL;
}

static bool batch_room(const struct dp_tx *t)
{
    if (t->niov + UIW_TX_MAX_IOV > TXB_IOV || t->nfp >= TXB_FPDUS ||
        t->arena_used + UIW_TX_SCRATCH > TXB_ARENA || t->total >= TXB_BYTES)
        return false;
    if (t->src == SRC_IRQ && t->irq_read && t->vol_bytes >= TXB_VOL_MAX)
        return false;
    return true;
}

static void push_iov(struct dp_tx *t, const uint8_t *p, size_t n, uint8_t vol)
{
    if (!n)
        return;
    if (t->niov > 0 && !t->nomerge && t->b->vol[t->niov - 1] == vol &&
        (const uint8_t *)t->b->iov[t->niov - 1].iov_base + t->b->iov[t->niov - 1].iov_len == p) {
        t->b->iov[t->niov - 1].iov_len += n;
        return;
    }
    t->b->iov[t->niov].iov_base = (void *)p;
    t->b->iov[t->niov].iov_len = n;
    t->b->vol[t->niov] = vol;
    t->niov++;
    t->nomerge = false;
}

/* The FPDU of `bytes` just appended ends here in the batch. */
static void mark_fpdu(struct dp_tx *t, size_t bytes, uint8_t kind, unsigned arg)
{
    t->total += bytes;
    t->b->fp[t->nfp].end = t->total;
    t->b->fp[t->nfp].kind = kind;
    t->b->fp[t->nfp].arg = arg;
    t->nfp++;
}

/* Move t->b->fpdu into the batch: scratch bytes (length, header, markers, pad,
 * CRC) are copied into the arena, payload iovecs are kept. */
static void append_fpdu(struct dp_tx *t, uint8_t kind, unsigned arg, uint8_t vol)
{
    const uiw_fpdu *f = &t->b->fpdu;
    uintptr_t sb = (uintptr_t)f->scratch, se = sb + sizeof(f->scratch);

    for (int i = 0; i < f->iovcnt; i++) {
        const uint8_t *p = f->iov[i].iov_base;
        size_t n = f->iov[i].iov_len;

        /* header bytes always, and a small payload piece while the arena
         * has room for it and the rest of this FPDU's scratch: the batch of
         * small messages is then one iovec, which the kernel copies faster
         * than two per FPDU, and nothing of it points into an MR */
        if (((uintptr_t)p >= sb && (uintptr_t)p < se) ||
            (n <= TX_COPY_MAX && t->arena_used + n + UIW_TX_SCRATCH <= TXB_ARENA)) {
            uint8_t *d = t->b->arena + t->arena_used;
            memcpy(d, p, n);
            t->arena_used += n;
            push_iov(t, d, n, VOL_NONE);
        } else {
            push_iov(t, p, n, vol);
            if (vol == VOL_IRQ)
                t->vol_bytes += n;
        }
    }
    mark_fpdu(t, f->bytes, kind, arg);
}

/* An FPDU uiw_tx_whole laid out in the arena (n bytes at arena_used). */
static void append_whole(struct dp_tx *t, size_t n, uint8_t kind, unsigned arg)
{
    uint8_t *d = t->b->arena + t->arena_used;

    t->arena_used += n;
    push_iov(t, d, n, VOL_NONE);
    mark_fpdu(t, n, kind, arg);
}

/* The FPDU just built: whole (its length) or in t->b->fpdu. */
static void add_fpdu(struct dp_tx *t, int whole, uint8_t kind, unsigned arg, uint8_t vol)
{
    if (whole > 0)
        append_whole(t, (size_t)whole, kind, arg);
    else
        append_fpdu(t, kind, arg, vol);
}

/* Does unsent iovec i point into what `sel` selects: kind `vol`, and when
 * lo < hi, overlapping [lo, hi)? */
static bool vol_match(const struct dp_tx *t, int i, uint8_t vol, uintptr_t lo, uintptr_t hi)
{
    uintptr_t b = (uintptr_t)t->b->iov[i].iov_base;

    if (t->b->vol[i] != vol)
        return false;
    return lo >= hi || (b < hi && b + t->b->iov[i].iov_len > lo);
}

/* Copy the unsent bytes of iovecs that point into MRs (kind vol, within
 * [lo, hi) when lo < hi) into a spill buffer, so the MRs can be released. */
static bool spill_range(struct dp_tx *t, uint8_t vol, uintptr_t lo, uintptr_t hi)
{
    size_t need = 0, off = 0;
    uint8_t *buf;

    for (int i = t->cur; i < t->niov; i++)
        if (vol_match(t, i, vol, lo, hi))
            need += t->b->iov[i].iov_len;
    if (!need)
        return true;
    if (t->nspill == t->spill_cap) {
        int cap = t->spill_cap ? 2 * t->spill_cap : TXB_SPILLS;
        uint8_t **s = realloc(t->spill, (size_t)cap * sizeof(*s));
        if (!s)
            return false;
        t->spill = s;
        t->spill_cap = cap;
    }
    buf = malloc(need);
    if (!buf)
        return false;
    for (int i = t->cur; i < t->niov; i++) {
        if (!vol_match(t, i, vol, lo, hi))
            continue;
        memcpy(buf + off, t->b->iov[i].iov_base, t->b->iov[i].iov_len);
        t->b->iov[i].iov_base = buf + off;
        t->b->vol[i] = VOL_NONE;
        off += t->b->iov[i].iov_len;
    }
    t->spill[t->nspill++] = buf;
    return true;
}

/* Read Response sources: copied at the end of each call (see the top). */
static bool spill_vol(struct dp_tx *t)
{
    return spill_range(t, VOL_IRQ, 0, 0);
}

static void fire(struct uiw_qp *qp, struct dp_tx *t, const struct dp_fp *f)
{
    switch (f->kind) {
    case MK_SQE: {
        struct uiw_sqe *e = &qp->sq[f->arg];
        if (e->state == SQE_SENDING) {
            e->state = SQE_DONE;
            e->status = IBV_WC_SUCCESS;
        }
        /* its last byte is in TCP's hands: nothing reads its MRs now */
        uiw_sqe_put_mrs(e);
        break;
    }
    case MK_IRQ:
        /* the response left: its IRD credit is free again (RFC 5040 §6.1) */
        if (qp->irq_count) {
            qp->irq_head = (qp->irq_head + 1) % UIW_MAX_IRD;
            qp->irq_count--;
        }
        if (t->irq_started)
            t->irq_started--;
        break;
    case MK_TERM:
        t->term_out = true;
        break;
    default:
        break;
    }
}

/*
 * FPDU/TCP segment alignment (RFC 5044 Appendix A.1: every TCP segment
 * starts with an FPDU, several FPDUs may share a segment if each lies
 * wholly inside it; what RNICs place at line rate: docs/ENGINE.md
 * "Transmit"). On a link that is not loopback (seg = the connected
 * socket's MSS, dp_align_seg), the batch is laid out on a grid of
 * seg-byte segments, and TCP made to cut its segments on that grid:
 *   - Linux cuts the bytes of a sendmsg into MSS-sized segments (and GSO/TSO
 *     super-segments into MSS-sized ones) from where they start, and appends
 *     a sendmsg's bytes to the last unsent segment unless that one ended a
 *     sendmsg with MSG_EOR. So every sendmsg here ends with MSG_EOR, and
 *     the grid restarts at each sendmsg's first byte.
 *   - An FPDU is at most the room left in its segment (RFC 5044 §4.5:
 *     "MULPDU MAY be reduced accordingly"): full-size FPDUs (the MSS rounded
 *     down to 4) fill one segment each, and after a message's short last
 *     FPDU the next message's first FPDU fills the rest of that segment, so
 *     a bulk transfer is one grid and one sendmsg per batch, as before.
 *   - When less than SEG_MIN_ROOM is left (§4.5: no MULPDU below 128) the
 *     next FPDU is built full-size; if it does not fit it starts the next
 *     segment: a cut, where a sendmsg ends early and the grid restarts.
 *     Small messages (packed several per segment) end a segment this way.
 *   - A small message (seg_small) is never cut to the room left: packed
 *     whole, or a cut before it. A large one fills the room after the
 *     previous message with its first FPDU: starting the next segment
 *     instead (every FPDU of a 64 KiB Write would start one, 98% now) cost
 *     38% of ib_write_bw 64 KiB's bandwidth over a veth (0.62x the batched
 *     sender against 1.10x, 3 rounds; docs/PERFORMANCE.md).
 *     The sendmsgs of one batch go in one sendmmsg call (each with
 *     MSG_EOR in its own msg_flags), so a batch stays one system call.
 * A partial write (socket full) that stopped inside a segment is resumed
 * up to that segment's end alone, with MSG_EOR: appended to the unsent
 * tail it completes the segment; if TCP had sent the tail meanwhile, one
 * segment is short and the grid is back at the next.
 */

/* The message about to be segmented is small (at most TX_COPY_MAX payload
 * bytes, one FPDU): it is not cut to the room left in a segment but packed
 * whole (RFC 5044 Appendix A.1), starting the next segment when it does
 * not fit (seg_cut). Cut in two, it would cost a second header and CRC
 * for a few hundred bytes, and the second FPDU would not start a segment.
 * Larger messages fill the room with their first FPDU (§4.5, "a dynamic
 * MULPDU"): the segments stay full, so a batch stays one TCP buffer (1000-
 * byte Sends packed whole instead: 530 segments for 500 Sends, not 392). */
static bool seg_small(const struct uiw_qp *qp, const struct dp_tx *t)
{
    const uiw_tx_msg *m = &t->msg;

    if (m->started || !m->hl0 || qp->tx.cfg.markers || m->total > TX_COPY_MAX)
        return false;
    return uiw_fpdu_len(m->hl0 + (unsigned)m->total) <= (t->fpdu_max & ~3u);
}

/* The room left in the current segment, and the next FPDU's size limit
 * (qp->tx.cfg.max_fpdu, which the wire core reads per FPDU) from it.
 * SIZE_MAX: no FPDU is packed in the segment yet. */
static size_t seg_room(struct uiw_qp *qp, struct dp_tx *t)
{
    size_t fill = (t->total - t->grid) % t->seg, room = t->seg - fill;
    unsigned m = t->fpdu_max;

    if (fill && room >= SEG_MIN_ROOM && room < m && !seg_small(qp, t))
        m = (unsigned)room;
    qp->tx.cfg.max_fpdu = (uint16_t)m;
    return fill ? room : SIZE_MAX;
}

/* The FPDU just built does not fit in the room left: the segment ends
 * before it (its sendmsg ends there with MSG_EOR), the grid restarts. */
static void seg_cut(struct dp_tx *t)
{
    t->b->cut_end[t->ncut] = t->total;
    t->b->cut_iov[t->ncut] = t->niov;
    t->ncut++;
    t->grid = t->total;
    t->nomerge = true;
}

/* seg_piece: a long run of FPDUs that tile the grid (a bulk transfer) is
 * not one sendmsg but one per SEG_PIECE bytes or so, cut where a segment
 * and an FPDU both end. TCP cuts a buffer at multiples of the MSS it has
 * when it builds or sends it, and that MSS shrinks while its segments carry
 * SACK blocks (RFC 2018; RFC 5044 §5.1: "Changes in EMSS due to varying
 * TCP options"): 12 bytes less with one block, so the rest of the buffer
 * leaves the grid by 12 bytes per segment cut. A sendmsg of 1 MiB kept
 * that up to its end (ib_read_bw -R 64 KiB over a veth with loss: 139
 * segments in a row that did not start with an FPDU, after one SACK); a
 * new sendmsg with MSG_EOR is a new buffer on the grid. */

/* The MSS can change (path MTU discovery, RFC 5044 §4.5 "If the TCP
 * implementation needs to adjust EMSS ..."): read again now and then. */
static void seg_refresh(struct uiw_qp *qp, struct dp_tx *t)
{
    unsigned mss;

    if (!t->seg || t->refresh--)
        return;
    t->refresh = SEG_REFRESH;
    mss = dp_align_seg(qp->fd);
    if (!mss || mss == t->seg)
        return;
    if (!t->fixed_fpdu)
        t->fpdu_max = (mss & ~3u) < UIW_TX_MIN_FPDU ? UIW_TX_MIN_FPDU : mss & ~3u;
    if (t->fpdu_max > mss)
        return; /* keep the old grid: FPDUs larger than the MSS cross segments anyway */
    t->seg = mss;
}

/* n bytes of the batch went to TCP (iov: what was handed over, for the
 * capture) */
static void sent_bytes(struct uiw_qp *qp, struct dp_tx *t, const struct iovec *iov, int iovcnt,
                       size_t n)
{
    if (n && iov && qp->pcap)
        uiw_cap_data(qp->pcap, true, iov, iovcnt, n);
    t->sent += n;
    while (n > 0) {
        struct iovec *v = &t->b->iov[t->cur];
        if (n >= v->iov_len) {
            n -= v->iov_len;
            t->cur++;
        } else {
            v->iov_base = (uint8_t *)v->iov_base + n;
            v->iov_len -= n;
            n = 0;
        }
    }
    while (t->fp_cur < t->nfp && t->b->fp[t->fp_cur].end <= t->sent)
        fire(qp, t, &t->b->fp[t->fp_cur++]);
}

/* One sendmsg of the unsent bytes, at most `allow` of them (SIZE_MAX: all).
 * 1: sent something, or -errno. */
static int send_one(struct uiw_qp *qp, struct dp_tx *t, size_t allow, int flags)
{
    struct msghdr mh;
    ssize_t n;
    size_t cut_len = 0;
    int cut = -1;

    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = &t->b->iov[t->cur];
    mh.msg_iovlen = (size_t)(t->niov - t->cur);
    if (allow != SIZE_MAX) {
        /* send no further than `allow` bytes: shorten one iovec for this
         * call */
        size_t acc = 0;
        for (int i = t->cur; i < t->niov; i++) {
            if (acc + t->b->iov[i].iov_len >= allow) {
                cut = i;
                cut_len = t->b->iov[i].iov_len;
                t->b->iov[i].iov_len = allow - acc;
                mh.msg_iovlen = (size_t)(i - t->cur + 1);
                break;
            }
            acc += t->b->iov[i].iov_len;
        }
    }
    do
        n = sendmsg(qp->fd, &mh, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n > 0 && qp->pcap)
        uiw_cap_data(qp->pcap, true, mh.msg_iov, (int)mh.msg_iovlen, (size_t)n);
    if (cut >= 0)
        t->b->iov[cut].iov_len = cut_len;
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    qp->st->tx_sends++;
    sent_bytes(qp, t, NULL, 0, (size_t)n);
    return 1;
}

/* The aligned sender: the unsent bytes up to the batch's end as one
 * sendmsg per cut (seg_cut), each ending with MSG_EOR, in one sendmmsg.
 * 1: sent something, or -errno. */
static int seg_send(struct uiw_qp *qp, struct dp_tx *t)
{
    size_t base, next, off;
    int k = 0, c, first, r;

    while (t->cut_cur < t->ncut && t->b->cut_end[t->cut_cur] <= t->sent)
        t->cut_cur++;
    base = t->cut_cur ? t->b->cut_end[t->cut_cur - 1] : 0;
    next = t->cut_cur < t->ncut ? t->b->cut_end[t->cut_cur] : t->total;
    off = (t->sent - base) % t->seg;
    if (off && t->sent + (t->seg - off) < next) /* a partial write's segment */
        return send_one(qp, t, t->seg - off, MSG_EOR);
    first = t->cur;
    for (c = t->cut_cur; k < TXB_MM && first < t->niov; c++, k++) {
        int end = c < t->ncut ? t->b->cut_iov[c] : t->niov;
        struct msghdr *mh = &t->b->mm[k].msg_hdr;

        memset(mh, 0, sizeof(*mh));
        mh->msg_iov = &t->b->iov[first];
        mh->msg_iovlen = (size_t)(end - first);
        mh->msg_flags = MSG_EOR; /* per message (Linux >= 4.11) */
        first = end;
    }
    do
        r = sendmmsg(qp->fd, t->b->mm, (unsigned)k, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    qp->st->tx_sends++;
    for (int i = 0; i < r; i++) {
        struct msghdr *mh = &t->b->mm[i].msg_hdr;
        size_t len = 0, n = t->b->mm[i].msg_len;

        for (size_t j = 0; j < mh->msg_iovlen; j++)
            len += mh->msg_iov[j].iov_len;
        sent_bytes(qp, t, mh->msg_iov, (int)mh->msg_iovlen, n);
        if (n < len)
            break; /* the socket is full: sendmmsg stopped here */
    }
    return 1;
}

/* sendmsg until the batch is out (0), the socket is full (-EAGAIN) or
 * broken (-errno). */
static int batch_send(struct uiw_qp *qp, struct dp_tx *t)
{
    while (t->cur < t->niov) {
        int r = t->seg ? seg_send(qp, t) : send_one(qp, t, SIZE_MAX, 0);

        if (r < 0)
            return r;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Starting messages
 * ---------------------------------------------------------------------- */

/* Gather list of a Send/Write: inline slot or the SGEs (lkey checked for
 * local read, RFC 5042 §5: every access is checked). The MRs stay held by
 * the SQE until its last byte was handed to TCP (fire) or it ends
 * otherwise (dp_sqe_finish, flush, reset): the batch's iovecs point into
 * them across EAGAIN, and ibv_dereg_mr must not let the program free the
 * memory under them (uiw_tx_revoke_mr). */
static enum ibv_wc_status local_sgl(struct uiw_qp *qp, struct uiw_sqe *e, struct iovec *sgl, int *n)
{
    int k = 0;

    if (e->inline_data) {
        sgl[0].iov_base = e->inline_data;
        sgl[0].iov_len = (size_t)e->length;
        *n = e->length ? 1 : 0;
        return IBV_WC_SUCCESS;
    }
    for (int i = 0; i < e->num_sge; i++) {
        enum uiw_mem_err err;
        uint8_t *addr;
        struct uiw_mr *mr;

        if (!e->sge[i].length)
            continue;
        mr = uiw_sge_get(qp->pd, &e->sge[i], 0, &addr, &err);
        if (!mr) {
            uiw_sqe_put_mrs(e);
            return IBV_WC_LOC_PROT_ERR;
        }
        e->mr[e->nmr++] = mr;
        sgl[k].iov_base = addr;
        sgl[k].iov_len = e->sge[i].length;
        k++;
    }
    *n = k;
    return IBV_WC_SUCCESS;
}

/* The local buffers a Read Response / Atomic Response will be written to
 * (verbs: IBV_ACCESS_LOCAL_WRITE). Checked again at placement. */
static enum ibv_wc_status local_sink_ok(struct uiw_qp *qp, const struct uiw_sqe *e)
{
    for (int i = 0; i < e->num_sge; i++) {
        enum uiw_mem_err err;
        uint8_t *addr;
        struct uiw_mr *mr = uiw_sge_get(qp->pd, &e->sge[i], IBV_ACCESS_LOCAL_WRITE, &addr, &err);

        if (!mr)
            return IBV_WC_LOC_PROT_ERR;
        uiw_mr_put(mr);
    }
    return IBV_WC_SUCCESS;
}

/* Local checks of an SQE before anything of it is sent. */
static enum ibv_wc_status sqe_check(struct uiw_qp *qp, struct uiw_sqe *e, struct iovec *sgl,
                                    int *nsgl)
{
    enum ibv_wc_status st;

    switch (e->opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        /* RFC 5041 §5.2: a message is shorter than 2^32; verbs max_msg_sz */
        if (e->length > UIW_MAX_MSG_SIZE)
            return IBV_WC_LOC_LEN_ERR;
        if ((e->opcode == IBV_WR_RDMA_WRITE || e->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) &&
            e->length && e->remote_addr > UINT64_MAX - (e->length - 1))
            return IBV_WC_LOC_LEN_ERR;      /* TO would wrap (RFC 5041 §7.1) */
        return local_sgl(qp, e, sgl, nsgl); /* last: holds the MRs on success */
    case IBV_WR_RDMA_READ:
        st = local_sink_ok(qp, e);
        if (st)
            return st;
        if (e->length > UIW_MAX_MSG_SIZE)
            return IBV_WC_LOC_LEN_ERR;
        if (e->length && ((e->num_sge && e->sge[0].addr > UINT64_MAX - (e->length - 1)) ||
                          e->remote_addr > UINT64_MAX - (e->length - 1)))
            return IBV_WC_LOC_LEN_ERR;
        if (!dp_ord(qp))
            return IBV_WC_LOC_QP_OP_ERR; /* no Read credit negotiated */
        return IBV_WC_SUCCESS;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        /* RFC 7306 §5.1: a 64-bit operation; the original value comes back */
        if (e->length != 8)
            return IBV_WC_LOC_LEN_ERR;
        st = local_sink_ok(qp, e);
        if (st)
            return st;
        if (!dp_ord(qp))
            return IBV_WC_LOC_QP_OP_ERR;
        return IBV_WC_SUCCESS;
    case IBV_WR_LOCAL_INV:
    case IBV_WR_BIND_MW: /* checked when executed (uiw_mw_bind) */
        return IBV_WC_SUCCESS;
    default:
        return IBV_WC_LOC_QP_OP_ERR;
    }
}

/* A local error on the SQE at pos: it completes with st after the ones
 * before it, and a Terminate goes out instead of it (RFC 5040 §7.1 case 1:
 * Local Catastrophic, no headers). */
static void sqe_fail(struct uiw_qp *qp, unsigned pos, enum ibv_wc_status st)
{
    uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, UIW_RDMAP_EC_UNSPECIFIED};

    uiw_log("qp %u: local error on wr_id 0x%llx: %s", qp->ibqp.qp_num,
            (unsigned long long)qp->sq[(qp->sq_head + pos) % qp->sq_cap].wr_id,
            ibv_wc_status_str(st));
    dp_sq_fail_upto(qp, pos, st);
    uiw_qp_terminate_locked(qp, c, NULL, 0, DP_NO_ASYNC);
}

static bool orq_full(struct uiw_qp *qp)
{
    return qp->orq_count >= dp_ord(qp) || qp->orq_count >= UIW_MAX_ORD;
}

static struct uiw_orqe *orq_push(struct uiw_qp *qp)
{
    struct uiw_orqe *o = &qp->orq[(qp->orq_head + qp->orq_count) % UIW_MAX_ORD];

    memset(o, 0, sizeof(*o));
    qp->orq_count++;
    return o;
}

/* The SQE e at pos is a local operation (Local Invalidate, Bind MW),
 * executed in SQ order with the result r: done (1), or on failure wait for
 * what was built before it (0) or complete it with the status fail (-1),
 * as start_sqe returns. */
static int local_op_done(struct uiw_qp *qp, struct dp_tx *t, struct uiw_sqe *e, unsigned pos, int r,
                         enum ibv_wc_status fail)
{
    if (r) {
        if (t->niov)
            return 0;
        sqe_fail(qp, pos, fail);
        return -1;
    }
    e->state = SQE_DONE;
    e->status = IBV_WC_SUCCESS;
    t->sq_started++;
    return 1;
}

/* Start the SQE at position t->sq_started. 1: started (or a local
 * operation executed), 0: must wait, -1: failed (QP in error). */
static int start_sqe(struct uiw_qp *qp, struct dp_tx *t)
{
    unsigned pos = t->sq_started;
    unsigned idx = (qp->sq_head + pos) % qp->sq_cap;
    struct uiw_sqe *e = &qp->sq[idx];
    bool se = e->flags & IBV_SEND_SOLICITED;
    enum ibv_wc_status st;
    int nsgl = 0, r;
    uiw_hdr h;

    /* IB verbs fence: wait for every outstanding Read/Atomic */
    if ((e->flags & IBV_SEND_FENCE) && qp->orq_count)
        return 0;
    if (e->opcode == IBV_WR_RDMA_READ || e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
        e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
        if (dp_ord(qp) && orq_full(qp))
            return 0; /* RFC 5040 §6.1: never more than ORD outstanding */
        if (!dp_orq_ready(qp)) {
            if (t->niov)
                return 0;
            uiw_log("qp %u: no memory for the ORQ", qp->ibqp.qp_num);
            sqe_fail(qp, pos, IBV_WC_LOC_QP_OP_ERR);
            return -1;
        }
    }

    st = sqe_check(qp, e, t->sgl, &nsgl);
    if (st) {
        /* let what was built before it go out and complete first */
        if (t->niov)
            return 0;
        sqe_fail(qp, pos, st);
        return -1;
    }

    switch (e->opcode) {
    case IBV_WR_SEND:
        /* RFC 5040 §5.3 */
        uiw_hdr_init_untagged(&h, se ? UIW_OP_SEND_SE : UIW_OP_SEND, UIW_QN_SEND,
                              ++qp->tx_msn[UIW_QN_SEND]);
        break;
    case IBV_WR_SEND_WITH_IMM:
        /* uiwarp's Send with Immediate (docs/ENGINE.md): an Immediate
         * Data message tagged "attached" (RFC 7306 §4.3), then the Send,
         * which carries the SE; the peer makes them one receive. */
        uiw_hdr_init_untagged(&h, UIW_OP_IMM_DATA, UIW_QN_SEND, ++qp->tx_msn[UIW_QN_SEND]);
        memcpy(h.u.imm, &e->imm_or_inv, 4);
        memcpy(h.u.imm + 4, UIW_IMM_ATTACH_TAG, 4);
        uiw_hdr_init_untagged(&t->next_hdr, se ? UIW_OP_SEND_SE : UIW_OP_SEND, UIW_QN_SEND,
                              ++qp->tx_msn[UIW_QN_SEND]);
        t->next_nsgl = nsgl;
        nsgl = 0;
        break;
    case IBV_WR_SEND_WITH_INV:
        uiw_hdr_init_untagged(&h, se ? UIW_OP_SEND_SE_INV : UIW_OP_SEND_INV, UIW_QN_SEND,
                              ++qp->tx_msn[UIW_QN_SEND]);
        h.inv_stag = e->imm_or_inv; /* RFC 5040 §4.1 Invalidate STag */
        break;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
        uiw_hdr_init(&h, true, UIW_OP_WRITE); /* RFC 5040 §5.1 */
        h.stag = e->rkey;
        h.to = e->remote_addr;
        break;
    case IBV_WR_RDMA_READ: {
        /* RFC 5040 §4.4, §5.2.1: Read Request on QN 1; the response is
         * placed by us into the SGE list, addressed by the first SGE */
        struct uiw_orqe *o = orq_push(qp);
        o->sqe = e;
        o->sink_stag = e->num_sge ? e->sge[0].lkey : 0;
        o->sink_to = e->num_sge ? e->sge[0].addr : 0;
        o->size = (uint32_t)e->length;
        o->msn = ++qp->tx_msn[UIW_QN_READ_REQ];
        uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, o->msn);
        h.u.rreq.sink_stag = o->sink_stag;
        h.u.rreq.sink_to = o->sink_to;
        h.u.rreq.read_size = o->size;
        h.u.rreq.src_stag = e->rkey;
        h.u.rreq.src_to = e->remote_addr;
        nsgl = 0;
        break;
    }
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_CMP_AND_SWP: {
        /* RFC 7306 §5.2.1: Atomic Request on QN 1 (shares ORD/IRD) */
        struct uiw_orqe *o = orq_push(qp);
        uiw_atomic_req *a = &h.u.atomic_req;
        o->sqe = e;
        o->atomic = true;
        o->size = 8;
        o->req_id = ++t->atomic_id;
        o->msn = ++qp->tx_msn[UIW_QN_READ_REQ];
        uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, o->msn);
        a->req_id = o->req_id;
        a->stag = e->rkey;
        a->to = e->remote_addr;
        if (e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            /* RFC 7306 §5.1.1: Add Mask 0 = one 64-bit add; Figure 5 and
             * §5.2.1: Compare Data 0, Compare Mask all ones for FetchAdd */
            a->aop = UIW_AOP_FETCH_ADD;
            a->add_swap = e->compare_add;
            a->add_swap_mask = 0;
            a->compare = 0;
            a->compare_mask = UINT64_MAX;
        } else {
            /* RFC 7306 §5.1.2 with all-ones masks: verbs CmpSwap (swap the
             * whole word if it equals compare_add) */
            a->aop = UIW_AOP_CMP_SWAP;
            a->add_swap = e->swap;
            a->add_swap_mask = UINT64_MAX;
            a->compare = e->compare_add;
            a->compare_mask = UINT64_MAX;
        }
        nsgl = 0;
        break;
    }
    case IBV_WR_LOCAL_INV:
        /* executed in SQ order; verbs: failure is a local protection error */
        r = uiw_stag_invalidate(qp->pd, e->imm_or_inv);
        return local_op_done(qp, t, e, pos, r, IBV_WC_LOC_PROT_ERR);
    case IBV_WR_BIND_MW:
        /* executed in SQ order, like Local Invalidate (IB verbs: a failed
         * bind completes with IBV_WC_MW_BIND_ERR) */
        r = uiw_mw_bind(qp->pd, e->bind_mw, e->rkey, e->bind_mr, e->remote_addr, e->length,
                        e->bind_access);
        return local_op_done(qp, t, e, pos, r, IBV_WC_MW_BIND_ERR);
    default:
        return -1; /* refused at post time */
    }

    r = uiw_tx_msg_init(&t->msg, &h, t->sgl, nsgl,
                        (e->opcode == IBV_WR_RDMA_READ || e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                         e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                         e->opcode == IBV_WR_SEND_WITH_IMM)
                            ? 0
                            : e->length);
    if (r < 0) {
        /* sqe_check covers what uiw_tx_msg_init refuses: cannot happen */
        uiw_log("qp %u: cannot segment wr_id 0x%llx: %d", qp->ibqp.qp_num,
                (unsigned long long)e->wr_id, r);
        sqe_fail(qp, pos, IBV_WC_LOC_LEN_ERR);
        return -1;
    }
    e->state = (e->opcode == IBV_WR_RDMA_READ || e->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                e->opcode == IBV_WR_ATOMIC_CMP_AND_SWP)
                   ? SQE_WAIT_RESP
                   : SQE_SENDING;
    t->src = SRC_SQ;
    t->phase = e->opcode == IBV_WR_SEND_WITH_IMM ? 2 : 0;
    t->sq_idx = idx;
    t->sq_started++;
    return 1;
}

/* The Immediate Data message that follows a Write/Send with Imm
 * (RFC 7306 §6.2: 8 bytes; here the 4 bytes of imm_data, then zeros). */
static void start_imm(struct uiw_qp *qp, struct dp_tx *t, const struct uiw_sqe *e)
{
    uiw_hdr h;

    uiw_hdr_init_untagged(&h,
                          (e->flags & IBV_SEND_SOLICITED) ? UIW_OP_IMM_DATA_SE : UIW_OP_IMM_DATA,
                          UIW_QN_SEND, ++qp->tx_msn[UIW_QN_SEND]);
    memcpy(h.u.imm, &e->imm_or_inv, 4);
    (void)uiw_tx_msg_init(&t->msg, &h, NULL, 0, 0);
    t->phase = 1;
}

static void irq_fail(struct uiw_qp *qp, const struct uiw_irqe *e, enum uiw_mem_err err)
{
    uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, dp_prot_code(err)};
    uint8_t img[UIW_TERM_HDR_IMAGE_MAX];
    uiw_hdr h;
    unsigned n;

    uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, e->msn);
    h.u.rreq = e->rreq;
    h.u.rreq.sink_to += e->sent;
    h.u.rreq.src_to += e->sent;
    h.u.rreq.read_size -= (uint32_t)e->sent;
    n = uiw_term_hdr_image(&h, UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN, true, img);
    uiw_qp_terminate_locked(qp, c, img, n, IBV_EVENT_QP_ACCESS_ERR);
}

/* Look the current Read Response's source up again (a later call, or the
 * first FPDU): the whole requested range, REMOTE_READ. */
static bool irq_hold(struct uiw_qp *qp, struct dp_tx *t)
{
    struct uiw_irqe *e = &qp->irq[t->irq_pos];
    enum uiw_mem_err err;
    uint8_t *addr;
    struct uiw_mr *mr;

    if (!e->rreq.read_size) {
        t->irq_held = true;
        return true;
    }
    if (t->nheld == TXB_HELD)
        return false;
    mr = uiw_mr_get(qp->pd, e->rreq.src_stag, e->rreq.src_to, e->rreq.read_size,
                    IBV_ACCESS_REMOTE_READ, &addr, &err);
    if (!mr) {
        /* deregistered or invalidated while being read */
        irq_fail(qp, e, err);
        return false;
    }
    t->held[t->nheld++] = mr;
    t->sgl[0].iov_base = addr;
    t->sgl[0].iov_len = e->rreq.read_size;
    t->irq_held = true;
    return true;
}

static int serve_irq(struct uiw_qp *qp, struct dp_tx *t)
{
    unsigned pos = (qp->irq_head + t->irq_started) % UIW_MAX_IRD;
    struct uiw_irqe *e = &qp->irq[pos];
    uiw_hdr h;
    int r;

    t->irq_pos = pos;
    if (e->opcode == UIW_OP_READ_REQ) {
        /* RFC 5040 §5.2.2: tagged, to the requester's sink STag/TO */
        if (e->rreq.read_size && t->nheld == TXB_HELD)
            return 0;
        uiw_hdr_init(&h, true, UIW_OP_READ_RESP);
        h.stag = e->rreq.sink_stag;
        h.to = e->rreq.sink_to;
        e->sent = 0;
        t->irq_read = true;
        t->irq_held = false;
        if (!irq_hold(qp, t))
            return -1;
        r = uiw_tx_msg_init(&t->msg, &h, t->sgl, e->rreq.read_size ? 1 : 0, e->rreq.read_size);
    } else {
        /* RFC 7306 §5.2.2: Atomic Response on QN 3 */
        uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_RESP, UIW_QN_ATOMIC_RESP,
                              ++qp->tx_msn[UIW_QN_ATOMIC_RESP]);
        h.u.atomic_resp = e->aresp;
        t->irq_read = false;
        r = uiw_tx_msg_init(&t->msg, &h, NULL, 0, 0);
    }
    if (r < 0) {
        /* checked on delivery (qp_rx.c); cannot happen */
        uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, 0};
        uiw_qp_terminate_locked(qp, c, NULL, 0, IBV_EVENT_QP_FATAL);
        return -1;
    }
    t->src = SRC_IRQ;
    t->irq_started++;
    return 1;
}

/* The P2P RTR (RFC 6581 §9, siw's forms: PEERS.md §3), before any FPDU. */
static void start_rtr(struct uiw_qp *qp, struct dp_tx *t)
{
    uiw_hdr h;

    if (t->rtr & UIW_RTR_WRITE) {
        uiw_hdr_init(&h, true, UIW_OP_WRITE);
        h.stag = 1; /* siw: Chelsio refuses STag 0 */
        h.to = 0;
    } else if (t->rtr & UIW_RTR_READ) {
        struct uiw_orqe *o = orq_push(qp);
        o->sqe = NULL; /* internal: consumed without completion */
        o->msn = ++qp->tx_msn[UIW_QN_READ_REQ];
        uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, o->msn);
        h.u.rreq.src_stag = 1;
    } else {
        uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_SEND, ++qp->tx_msn[UIW_QN_SEND]);
    }
    (void)uiw_tx_msg_init(&t->msg, &h, NULL, 0, 0);
    t->rtr = 0;
    t->src = SRC_RTR;
}

static bool sq_startable(struct uiw_qp *qp, struct dp_tx *t)
{
    return qp->state == IBV_QPS_RTS && t->sq_started < qp->sq_count &&
           qp->sq[(qp->sq_head + t->sq_started) % qp->sq_cap].state == SQE_NEW;
}

/* Whether pick_next() could start anything (no side effects): nothing
 * after a queued Terminate, the RTR first, then nothing while the first
 * FPDU awaits the peer's (RFC 5044 §7.1.2 rule 4). */
static bool tx_startable(struct uiw_qp *qp, struct dp_tx *t)
{
    if (t->term_queued)
        return false;
    if (t->rtr)
        return true;
    return !t->await && (qp->irq_count > t->irq_started || sq_startable(qp, t));
}

/* Set up the next message. 1: something to segment (or a local operation
 * done), 0: nothing now, -1: error (QP in ERR). */
static int pick_next(struct uiw_qp *qp, struct dp_tx *t)
{
    bool irq, sq, irq_first;

    if (!tx_startable(qp, t))
        return 0;
    if (t->rtr) {
        start_rtr(qp, t);
        return 1;
    }
    irq = qp->irq_count > t->irq_started;
    sq = sq_startable(qp, t);
    /* alternate message by message; either one may have to wait (SQ:
     * fence, ORD; IRQ: source MRs held in this call), then the other goes */
    irq_first = irq && (!sq || !t->last_irq);
    for (int pass = 0; pass < 2; pass++) {
        int r;

        if ((pass == 0) == irq_first) {
            if (!irq)
                continue;
            r = serve_irq(qp, t);
            if (r > 0)
                t->last_irq = true;
        } else {
            if (!sq)
                continue;
            r = start_sqe(qp, t);
            if (r > 0)
                t->last_irq = false;
        }
        if (r)
            return r;
    }
    return 0;
}

/* Live counters (include/uiwarp/stat.h): the FPDU just built. */
static void count_fpdu(struct uiw_qp *qp, const struct dp_tx *t, uint32_t payload, bool last)
{
    struct uiw_stat_dir_counters *c = &qp->st->tx;
    unsigned op = t->msg.hdr.opcode & (UIW_STAT_NOPS - 1);

    c->fpdus++;
    c->bytes[op] += payload;
    if (last)
        c->msgs[op]++;
}

static void fill_batch(struct uiw_qp *qp, struct dp_tx *t)
{
    if (!txb_get(t)) {
        uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, 0};
        uiw_log("qp %u: no memory for a transmit batch", qp->ibqp.qp_num);
        uiw_qp_terminate_locked(qp, c, NULL, 0, IBV_EVENT_QP_FATAL);
        return;
    }
    seg_refresh(qp, t);
    while (batch_room(t)) {
        uint8_t kind = MK_NONE;
        unsigned arg = 0;
        uint8_t vol;
        size_t room = SIZE_MAX;
        int r, whole;

        if (t->src == SRC_NONE) {
            if (pick_next(qp, t) <= 0)
                return;
            continue;
        }
        if (t->src == SRC_IRQ && t->irq_read && !t->irq_held && !irq_hold(qp, t))
            return;
        if (t->src == SRC_SQ && t->phase == 0 && qp->sq[t->sq_idx].revoked) {
            /* the rest of this message was to come from a deregistered
             * MR: what was cut goes out first, then the WR fails */
            if (t->niov)
                return;
            t->src = SRC_NONE;
            sqe_fail(qp, dp_sq_pos(qp, &qp->sq[t->sq_idx]), IBV_WC_LOC_PROT_ERR);
            return;
        }
        if (t->src == SRC_IRQ && t->irq_read)
            vol = VOL_IRQ;
        else if (t->src == SRC_SQ && t->phase == 0 && !qp->sq[t->sq_idx].inline_data)
            vol = VOL_SQ;
        else
            vol = VOL_NONE;
        if (t->seg) {
            room = seg_room(qp, t); /* uiw_tx_whole and uiw_tx_next keep to it */
            if (room == SIZE_MAX && t->total - t->grid >= SEG_PIECE)
                seg_cut(t); /* seg_piece */
        }
        /* a small message whole, copied into the arena beside the
         * headers (docs/ENGINE.md "Transmit"): one piece, no iovec into
         * an MR, and a fraction of the general segmenter's work */
        whole = 0;
        if (t->msg.total <= TX_COPY_MAX && !t->msg.started)
            whole = uiw_tx_whole(&qp->tx, &t->msg, t->b->arena + t->arena_used,
                                 TXB_ARENA - t->arena_used);
        if (whole > 0) {
            count_fpdu(qp, t, (uint32_t)t->msg.total, true);
            /* a Read Response copied whole into the arena needs its source
             * MR no longer: let it go now, so that a batch answers every
             * small Read Request that came instead of TXB_HELD of them
             * (ib_read_bw -s 64 answered 7.5 per sendmsg) */
            if (t->src == SRC_IRQ && t->irq_read && t->irq_held &&
                qp->irq[t->irq_pos].rreq.read_size && t->nheld > 0) {
                uiw_mr_put(t->held[--t->nheld]);
                t->irq_held = false;
            }
        } else {
            r = uiw_tx_next(&qp->tx, &t->msg, &t->b->fpdu);
            if (r <= 0) {
                uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, 0};
                uiw_log("qp %u: segmentation failed: %d", qp->ibqp.qp_num, r);
                t->src = SRC_NONE;
                uiw_qp_terminate_locked(qp, c, NULL, 0, IBV_EVENT_QP_FATAL);
                return;
            }
            count_fpdu(qp, t, t->b->fpdu.payload, t->b->fpdu.last);
        }
        if ((whole > 0 ? (size_t)whole : t->b->fpdu.bytes) > room)
            seg_cut(t); /* it starts the next segment */
        if (t->src == SRC_IRQ && t->irq_read)
            qp->irq[t->irq_pos].sent = t->msg.done;
        if (whole <= 0 && !t->b->fpdu.last) {
            append_fpdu(t, MK_NONE, 0, vol);
            continue;
        }
        /* the message's last FPDU */
        switch (t->src) {
        case SRC_SQ: {
            struct uiw_sqe *e = &qp->sq[t->sq_idx];
            bool imm = e->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && t->phase == 0;
            if (t->phase == 2) {
                /* the attached Immediate Data is out: now the Send */
                add_fpdu(t, whole, MK_NONE, 0, vol);
                (void)uiw_tx_msg_init(&t->msg, &t->next_hdr, t->sgl, t->next_nsgl, e->length);
                t->phase = 0;
                continue;
            }
            if (e->state == SQE_SENDING && !imm) {
                kind = MK_SQE;
                arg = t->sq_idx;
            }
            add_fpdu(t, whole, kind, arg, vol);
            if (imm)
                start_imm(qp, t, e);
            else
                t->src = SRC_NONE;
            continue;
        }
        case SRC_IRQ:
            kind = MK_IRQ;
            break;
        default:
            break;
        }
        add_fpdu(t, whole, kind, arg, vol);
        t->src = SRC_NONE;
    }
}

/* ------------------------------------------------------------------------
 * Terminate (RFC 5040 §4.8, §5.4, §7)
 * ---------------------------------------------------------------------- */

/* Put the Terminate in place of everything not yet handed to TCP: a
 * partially sent FPDU must be finished (framing), its rest is copied since
 * the buffers behind it are about to be flushed. */
static void queue_terminate(struct uiw_qp *qp, struct dp_tx *t, const uiw_hdr *h)
{
    size_t keep_end = t->sent, tail, off = 0;
    uint64_t base;
    uint8_t *buf = NULL;
    int r;

    if (!txb_get(t)) { /* no batch (then nothing is partly sent) and no memory */
        uiw_log("qp %u: no memory for the Terminate", qp->ibqp.qp_num);
        t->term_queued = true; /* the stream is broken: just close */
        t->term_out = true;
        return;
    }

    if (t->cur < t->niov && t->fp_cur < t->nfp) {
        size_t start = t->fp_cur ? t->b->fp[t->fp_cur - 1].end : 0;
        if (t->sent > start)
            keep_end = t->b->fp[t->fp_cur].end;
    }
    tail = keep_end - t->sent;
    if (tail) {
        buf = malloc(tail);
        if (!buf) {
            uiw_log("qp %u: no memory for the Terminate", qp->ibqp.qp_num);
            t->term_queued = true; /* the stream is broken: just close */
            t->term_out = true;
            return;
        }
        for (int i = t->cur; i < t->niov && off < tail; i++) {
            size_t n = t->b->iov[i].iov_len < tail - off ? t->b->iov[i].iov_len : tail - off;
            memcpy(buf + off, t->b->iov[i].iov_base, n);
            off += n;
        }
    }
    base = t->wire_base + t->sent;
    release_held(t);
    batch_reset(qp, t);
    t->src = SRC_NONE;
    t->wire_base = base;
    t->term_buf = buf;
    if (tail) {
        push_iov(t, buf, tail, VOL_NONE);
        t->total = tail;
        t->b->fp[0].end = tail;
        t->b->fp[0].kind = MK_NONE;
        t->nfp = 1;
    }
    /* the wire core's stream offset must be the wire's (markers) */
    qp->tx.stream_off = base + tail;
    t->term_queued = true;
    r = uiw_tx_msg_init(&t->msg, h, NULL, 0, 0);
    if (r == 0)
        r = uiw_tx_next(&qp->tx, &t->msg, &t->b->fpdu);
    if (r != 1) {
        uiw_log("qp %u: cannot build the Terminate: %d", qp->ibqp.qp_num, r);
        return;
    }
    count_fpdu(qp, t, t->b->fpdu.payload, t->b->fpdu.last);
    qp->st->term_sent++;
    append_fpdu(t, MK_TERM, 0, VOL_NONE);
}

void dp_tx_queue_terminate(struct uiw_qp *qp, const uiw_hdr *h)
{
    struct dp_tx *t = TX(qp);

    if (t && qp->fd >= 0 && !t->shut)
        queue_terminate(qp, t, h);
}

/* ------------------------------------------------------------------------
 * Progress
 * ---------------------------------------------------------------------- */

void dp_tx_error_cleanup(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);

    if (!t || t->err_done)
        return;
    t->err_done = true;
    if (!t->term_queued) {
        /* nothing more goes out: the flushed buffers must not be read */
        release_held(t);
        batch_reset(qp, t);
    }
    t->src = SRC_NONE;
    t->sq_started = 0;
    t->irq_started = 0;
    t->rtr = 0;
    t->await = false;
    t->wakes = 0;
}

void dp_tx_release_await(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);

    if (t)
        t->await = false;
}

/* ------------------------------------------------------------------------
 * Coalescing
 *
 * One sendmsg per work request costs a trip through the TCP stack per WR
 * (with TCP_NODELAY, one segment each). A WR posted within
 * UIWARP_TX_COALESCE_US of the previous ibv_post_send on the QP, when
 * TX_STREAK posts came so before it (a program streaming WRs one call at
 * a time, as perftest does), is queued instead, and
 * goes out with the ones after it in one sendmsg, when the first of these
 * comes: TX_DEFER_WRS WRs or TX_DEFER_BYTES bytes queued (then this post
 * transmits), the program polls or arms a CQ of the QP (uiw_cq_flush_tx),
 * or the backstop fires.
 * A WR posted after a pause (a lone request, a ping-pong's next message)
 * is transmitted by the posting call as before.
 *
 * The backstop: one timerfd per process, in the progress thread's epoll
 * set, and the list of QPs holding deferred WRs. The first deferral while
 * it is not armed arms it for TX_KICK_US; it is never disarmed (the
 * program usually flushes first: the firing then finds an empty list), so
 * a streaming program costs the progress thread at most one wake-up per
 * TX_KICK_US, and an arming is one timerfd_settime, no wake-up.
 * ---------------------------------------------------------------------- */

static struct {
    pthread_once_t once;
    int tfd; /* -1: no backstop, so no coalescing */
    pthread_mutex_t lock;
    struct uiw_qp *head; /* deferred QPs: tx_defer_prev/next, under lock */
    atomic_uint listed;  /* their number (read without the lock) */
    bool armed;
    unsigned kick_us; /* the next arming's delay: TX_KICK_US .. TX_KICK_MAX_US */
} bs = {
    .once = PTHREAD_ONCE_INIT, .tfd = -1, .lock = PTHREAD_MUTEX_INITIALIZER, .kick_us = TX_KICK_US};

static void bs_fire(void *obj, uint32_t events);

static void bs_init(void)
{
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);

    if (fd < 0)
        return;
    if (uiw_progress_add(fd, EPOLLIN, bs_fire, NULL) < 0) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&bs.lock);
    bs.tfd = fd;
    pthread_mutex_unlock(&bs.lock);
}

/* bs.lock held */
static void bs_arm_locked(void)
{
    struct itimerspec it = {.it_value = {.tv_nsec = (long)bs.kick_us * 1000}};

    if (!bs.armed && timerfd_settime(bs.tfd, 0, &it, NULL) == 0)
        bs.armed = true;
}

static void cq_deferred(struct uiw_qp *qp, int d)
{
    atomic_fetch_add_explicit(&qp->scq->tx_deferred, (unsigned)d, memory_order_relaxed);
    if (qp->rcq && qp->rcq != qp->scq)
        atomic_fetch_add_explicit(&qp->rcq->tx_deferred, (unsigned)d, memory_order_relaxed);
}

/* qp->lock held: nothing of the QP is deferred any more */
static void tx_undefer(struct uiw_qp *qp)
{
    qp->tx_defer_wrs = 0;
    qp->tx_defer_bytes = 0;
    if (!qp->tx_deferred)
        return;
    qp->tx_deferred = false;
    cq_deferred(qp, -1);
    pthread_mutex_lock(&bs.lock);
    if (qp->tx_defer_prev)
        qp->tx_defer_prev->tx_defer_next = qp->tx_defer_next;
    else
        bs.head = qp->tx_defer_next;
    if (qp->tx_defer_next)
        qp->tx_defer_next->tx_defer_prev = qp->tx_defer_prev;
    qp->tx_defer_prev = qp->tx_defer_next = NULL;
    atomic_fetch_sub_explicit(&bs.listed, 1, memory_order_relaxed);
    pthread_mutex_unlock(&bs.lock);
}

void dp_tx_undefer(struct uiw_qp *qp)
{
    tx_undefer(qp);
}

/* After posting wrs WRs of bytes payload bytes: whether to leave them to
 * a later transmitter call. */
static bool tx_defer(struct uiw_qp *qp, unsigned wrs, uint64_t bytes, uint64_t *now)
{
    unsigned win = uiw_config()->tx_coalesce_ns;
    uint64_t gap;

    qp->tx_defer_wrs += wrs;
    qp->tx_defer_bytes += bytes;
    if (!win || !TX(qp) || qp->fd < 0 || qp->state != IBV_QPS_RTS)
        return false;
    *now = uiw_now_ns();
    gap = *now - qp->tx_post_ns;
    /* a pause ends a burst; a post delayed a little (by the backstop
     * holding the QP lock, say) goes out at once but does not */
    if (gap >= 4 * (uint64_t)win)
        qp->tx_streak = 0;
    else if (qp->tx_streak < TX_STREAK)
        qp->tx_streak++;
    if (gap >= win || qp->tx_streak < TX_STREAK)
        return false;
    if (qp->tx_defer_wrs >= TX_DEFER_WRS ||
        qp->tx_defer_bytes >= (TX(qp)->seg ? TX_DEFER_BYTES_SEG : TX_DEFER_BYTES))
        return false;
    pthread_once(&bs.once, bs_init);
    if (bs.tfd < 0)
        return false;
    if (!qp->tx_deferred) {
        qp->tx_deferred = true;
        cq_deferred(qp, 1);
        pthread_mutex_lock(&bs.lock);
        qp->tx_defer_prev = NULL;
        qp->tx_defer_next = bs.head;
        if (bs.head)
            bs.head->tx_defer_prev = qp;
        bs.head = qp;
        atomic_fetch_add_explicit(&bs.listed, 1, memory_order_relaxed);
        bs_arm_locked();
        pthread_mutex_unlock(&bs.lock);
    }
    return true;
}

/* Transmit what the programs left deferred. It never waits for a QP lock:
 * the holder is the program posting (it comes back) or a transmitter
 * already; such a QP is tried again at the backstop's next firing. */
static bool flush_listed(void)
{
    bool did = false;

    struct uiw_qp *qps[64];
    unsigned n = 0;

    pthread_mutex_lock(&bs.lock);
    for (struct uiw_qp *q = bs.head; q && n < 64; q = q->tx_defer_next) {
        uiw_qp_get(q); /* listed: not past ibv_destroy_qp's wait for references */
        qps[n++] = q;
    }
    pthread_mutex_unlock(&bs.lock);
    for (unsigned i = 0; i < n; i++) {
        struct uiw_qp *qp = qps[i];

        if (pthread_mutex_trylock(&qp->lock) == 0) {
            if (qp->tx_deferred) {
                did = true;
                if (qp->fd >= 0)
                    uiw_qp_tx_progress(qp);
                else
                    tx_undefer(qp);
            }
            pthread_mutex_unlock(&qp->lock);
        }
        uiw_qp_put(qp);
    }
    return did;
}

/* The backstop fired (progress thread). A firing that finds nothing to do
 * (the program flushed: it polls) lengthens the next delay, up to
 * TX_KICK_MAX_US, so that a program streaming and polling is not
 * interrupted every TX_KICK_US (the progress thread, woken on the poster's
 * CPU where the timer was armed, preempts it: ib_write_bw -s 64 1.2 ->
 * 2.0 M messages/s without); one that transmits goes back to TX_KICK_US. */
static void bs_fire(void *obj, uint32_t events)
{
    uint64_t v;
    int fd;

    (void)obj;
    (void)events;
    /* bs.tfd under the lock: it was set before the arming that made this
     * firing, and the lock orders the two threads (the kernel's timer does
     * not, as far as a race checker can see) */
    pthread_mutex_lock(&bs.lock);
    fd = bs.tfd;
    bs.armed = false;
    pthread_mutex_unlock(&bs.lock);
    if (fd < 0 || (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN))
        return;
    bool did = flush_listed();

    pthread_mutex_lock(&bs.lock);
    if (did)
        bs.kick_us = TX_KICK_US;
    else if (bs.kick_us < TX_KICK_MAX_US)
        bs.kick_us = bs.kick_us * 2 < TX_KICK_MAX_US ? bs.kick_us * 2 : TX_KICK_MAX_US;
    if (bs.head)
        bs_arm_locked();
    pthread_mutex_unlock(&bs.lock);
}

void uiw_tx_flush_deferred(void)
{
    if (atomic_load_explicit(&bs.listed, memory_order_relaxed))
        (void)flush_listed();
}

/* ------------------------------------------------------------------------
 * The initiator's guard against siw's first-FPDU race (docs/INTEROP.md §1)
 *
 * Linux siw's responder sends its MPA Reply before it installs the socket
 * callback that reads FPDUs; bytes arriving in between are not looked at
 * until more bytes arrive. Nothing is held: the RTR (peer-to-peer, RFC
 * 6581 §9) and the ULP's messages go at once. hold_ms after the attach
 * (about when the Reply arrived), if no whole FPDU came from the peer yet,
 * a wake-up goes: one more zero-length RDMA Write in the Write RTR's form
 * (STag 1, TO 0), which RFC 5041 §7.1 leaves unvalidated ("The STag and TO
 * fields MUST NOT be checked for a zero-length Tagged DDP Message") and
 * every responder already takes as the Write RTR; its arrival wakes siw's
 * callback, which then reads everything. A second one goes 10 hold_ms
 * later if the peer is still silent (a slower siw), then none.
 *  - With the Write RTR a P2P responder sends nothing before it has taken
 *    the RTR, and often nothing for a while after: a silent peer gets the
 *    two empty FPDUs, and its first message is not delayed.
 *  - With the Read RTR (what irdma and cxgb4 responders pick, and uiwarp
 *    with UIWARP_RTR=read) the responder answers the zero-length Read
 *    Request with a zero-length Read Response (RFC 5040 §5.2.1), so only a
 *    responder that missed the RTR is ever sent a wake-up: an RNIC, which
 *    takes the RTR in hardware, gets none.
 *  - Client-server (no RTR: the first FPDU is the ULP's) only when we sent
 *    something the peer may have missed: a connection on which our side
 *    had sent nothing by then gets none (our first FPDU, later, finds siw
 *    watching), and the wake-up never is the stream's first FPDU (RFC 5044
 *    §7.1.2: the responder waits for the initiator's first).
 * Until stop 35 (2026-11-28) the Read RTR and client-server held their first FPDU's
 * trailer (pad, CRC) hold_ms instead, which delayed every such
 * connection's first messages by hold_ms, RNICs included.
 * ---------------------------------------------------------------------- */

#define WAKE_COUNT  2  /* wake-ups at most */
#define WAKE_FACTOR 10 /* the second one's delay, in hold_ms */

void dp_tx_hold_first(struct uiw_qp *qp, unsigned hold_ms)
{
    struct dp_tx *t = TX(qp);

    if (!t || !hold_ms)
        return;
    t->wakes = WAKE_COUNT;
    t->wake_ms = hold_ms;
    uiw_timer_arm(&qp->first_hold, hold_ms);
    uiw_dbg(1, "qp %u: a wake-up in %u ms unless the peer sends", qp->ibqp.qp_num, hold_ms);
}

/* The timer: a wake-up while the peer is silent (with the Read RTR: it has
 * not answered the RTR). qp->lock held. */
static void wake_peer(struct uiw_qp *qp, struct dp_tx *t)
{
    if (!t->wakes)
        return;
    if (dp_rx_got_first(qp) || qp->state != IBV_QPS_RTS || t->term_queued || t->shut ||
        (!qp->mpa.p2p && t->wire_base + t->sent == 0)) {
        /* the peer spoke, the QP is done, or (client-server) we sent
         * nothing it could have missed */
        t->wakes = 0;
        return;
    }
    t->wakes--;
    /* the Write RTR's form, next between messages; an RTR that has not gone
     * yet (a full socket) wakes the peer itself */
    if (!t->rtr)
        t->rtr = UIW_RTR_WRITE;
    uiw_dbg(1, "qp %u: no FPDU from the peer yet: a wake-up (zero-length Write)", qp->ibqp.qp_num);
    if (t->wakes)
        uiw_timer_arm(&qp->first_hold, t->wake_ms * WAKE_FACTOR);
    uiw_qp_tx_progress(qp);
}

void dp_hold_timer_cb(void *obj)
{
    struct uiw_qp *qp = obj;
    struct dp_tx *t;

    pthread_mutex_lock(&qp->lock);
    t = TX(qp);
    if (qp->fd >= 0 && t && !uiw_timer_pending(&qp->first_hold))
        wake_peer(qp, t);
    pthread_mutex_unlock(&qp->lock);
}

void uiw_qp_tx_end_wakes_locked(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);

    if (!t || !t->wakes)
        return;
    t->wakes = 0;
    uiw_timer_disarm(&qp->first_hold);
    uiw_dbg(2, "qp %u: no more wake-ups (disconnect)", qp->ibqp.qp_num);
}

int uiw_qp_tx_progress(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);
    int ret = 0;
    bool blocked = false, yielded = false;
    size_t budget = TX_BUDGET;

    tx_undefer(qp);
    if (!t || qp->fd < 0 || t->busy)
        return 0;
    t->busy = true;
    if (qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
        dp_tx_error_cleanup(qp);
    for (;;) {
        if (t->cur < t->niov) {
            int r = batch_send(qp, t);
            if (r == -EAGAIN) {
                blocked = true;
                break;
            }
            if (r < 0) {
                ret = r;
                break;
            }
            continue;
        }
        if (t->term_queued || qp->state == IBV_QPS_ERR || qp->state == IBV_QPS_RESET)
            break;
        if (t->total >= budget) {
            /* let other QPs run; the socket is writable and did not hit
             * EAGAIN, so no new EPOLLOUT edge would come by itself: the
             * MOD below reports it again */
            blocked = yielded = true;
            break;
        }
        budget -= t->total;
        release_held(t);
        /* nothing to start (a poll's flush, a call after a receive): leave
         * the staging cache and its lock alone */
        if (t->src == SRC_NONE && !tx_startable(qp, t))
            break;
        batch_reset(qp, t);
        fill_batch(qp, t);
        if (!t->niov)
            break;
    }
    /* bytes of Read Response sources still queued: copy them, so the MRs
     * are held only during this call */
    if (t->nheld) {
        if (spill_vol(t))
            release_held(t);
        else
            uiw_log("qp %u: spill failed, source MR stays held", qp->ibqp.qp_num);
    }
    t->irq_held = false;
    if (t->b && t->cur >= t->niov && !t->nheld) {
        /* all out: the staging goes back (the next call starts with a
         * reset batch anyway) */
        batch_reset(qp, t);
        txb_put(t);
    }
    if (blocked != qp->want_write || yielded) {
        qp->want_write = blocked;
        dp_arm(qp);
    }
    t->busy = false;

    if (t->term_out && !t->shut) {
        /* RFC 5040 §6.2.1: graceful LLP teardown after the Terminate */
        t->shut = true;
        (void)shutdown(qp->fd, SHUT_WR);
        if (qp->conn)
            uiw_cm_llp_closed(qp->conn, -EPROTO);
    }
    if (ret < 0 && ret != -EAGAIN)
        uiw_qp_llp_closed_locked(qp, ret);
    dp_sq_complete(qp);
    return ret;
}

/* ------------------------------------------------------------------------
 * Deregistration of a source MR while its WR is queued
 * ---------------------------------------------------------------------- */

static void revoke_qp(struct uiw_qp *qp, void *arg)
{
    struct uiw_mr *mr = arg;
    struct dp_tx *t;
    bool held = false;

    if (qp->pd != mr->pd)
        return; /* uiw_sge_get hands out MRs of the QP's PD only */
    pthread_mutex_lock(&qp->lock);
    for (unsigned i = 0; i < qp->sq_count && !held; i++) {
        const struct uiw_sqe *e = &qp->sq[(qp->sq_head + i) % qp->sq_cap];
        for (unsigned k = 0; k < e->nmr; k++)
            held |= e->mr[k] == mr;
    }
    if (!held) {
        pthread_mutex_unlock(&qp->lock);
        return;
    }
    t = TX(qp);
    /* bytes of it already cut into FPDUs go out from a copy (a partly sent
     * FPDU must be finished anyway: MPA framing, RFC 5044 §4) */
    if (t && !spill_range(t, VOL_SQ, (uintptr_t)mr->base, (uintptr_t)mr->base + mr->length)) {
        uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, UIW_RDMAP_EC_UNSPECIFIED};
        uiw_log("qp %u: no memory to keep a deregistered MR's queued bytes", qp->ibqp.qp_num);
        /* the flush releases every SQE's MRs */
        uiw_qp_terminate_locked(qp, c, NULL, 0, IBV_EVENT_QP_FATAL);
        if (qp->state != IBV_QPS_ERR)
            uiw_qp_to_error_locked(qp);
    }
    for (unsigned i = 0; i < qp->sq_count; i++) {
        unsigned idx = (qp->sq_head + i) % qp->sq_cap;
        struct uiw_sqe *e = &qp->sq[idx];

        for (unsigned k = 0; k < e->nmr; k++) {
            if (e->mr[k] != mr)
                continue;
            uiw_mr_put(mr);
            e->mr[k] = NULL;
            /* the message being cut still needs bytes from it */
            if (t && t->src == SRC_SQ && t->sq_idx == idx && t->phase != 1)
                e->revoked = true;
        }
    }
    uiw_dbg(1, "qp %u: released deregistered stag 0x%08x from queued work", qp->ibqp.qp_num,
            mr->stag);
    /* a blocked QP may now fail its WR; the socket may stay full for long */
    uiw_qp_tx_progress(qp);
    pthread_mutex_unlock(&qp->lock);
}

void uiw_tx_revoke_mr(struct uiw_mr *mr)
{
    uiw_qp_foreach(revoke_qp, mr);
}

/* ------------------------------------------------------------------------
 * Posting
 * ---------------------------------------------------------------------- */

int uiw_qp_post_send_locked(struct uiw_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int ret = 0;
    unsigned posted = 0;
    uint64_t bytes = 0;

    for (; wr; wr = wr->next) {
        struct uiw_sqe *e;
        unsigned idx;
        uint64_t len = 0;
        bool inl;

        if (!dp_send_wr_form_ok(qp, wr)) {
            ret = -EINVAL;
            break;
        }
        if (qp->sq_count >= qp->sq_cap) {
            ret = -ENOMEM;
            break;
        }
        for (int i = 0; i < wr->num_sge; i++)
            len += wr->sg_list[i].length;
        /* verbs: inline data for Send and Write only (copied now, the
         * lkeys are not checked) */
        inl = (wr->send_flags & IBV_SEND_INLINE) &&
              (wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_INV ||
               wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE ||
               wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM);
        if (inl &&
            (len > (uint64_t)qp->cap.max_inline_data || len > UIW_MAX_INLINE || !qp->inline_buf)) {
            ret = -EINVAL;
            break;
        }
        idx = (qp->sq_head + qp->sq_count) % qp->sq_cap;
        e = &qp->sq[idx];
        memset(e, 0, sizeof(*e));
        e->wr_id = wr->wr_id;
        e->opcode = wr->opcode;
        e->flags = wr->send_flags;
        if (wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV)
            e->imm_or_inv = wr->invalidate_rkey;
        else
            e->imm_or_inv = wr->imm_data;
        if (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
            e->remote_addr = wr->wr.atomic.remote_addr;
            e->rkey = wr->wr.atomic.rkey;
            e->compare_add = wr->wr.atomic.compare_add;
            e->swap = wr->wr.atomic.swap;
        } else {
            e->remote_addr = wr->wr.rdma.remote_addr;
            e->rkey = wr->wr.rdma.rkey;
        }
        e->num_sge = wr->num_sge;
        for (int i = 0; i < wr->num_sge; i++)
            e->sge[i] = wr->sg_list[i];
        e->length = len;
        if (wr->opcode == IBV_WR_BIND_MW) {
            e->bind_mw = wr->bind_mw.mw;
            e->rkey = wr->bind_mw.rkey;
            e->bind_mr = wr->bind_mw.bind_info.mr;
            e->remote_addr = wr->bind_mw.bind_info.addr;
            e->length = wr->bind_mw.bind_info.length;
            e->bind_access = wr->bind_mw.bind_info.mw_access_flags;
        }
        e->immediate_pending =
            wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
        if (inl) {
            uint8_t *slot = qp->inline_buf + (size_t)idx * UIW_MAX_INLINE;
            size_t off = 0;
            for (int i = 0; i < wr->num_sge; i++) {
                memcpy(slot + off, (const void *)(uintptr_t)wr->sg_list[i].addr,
                       wr->sg_list[i].length);
                off += wr->sg_list[i].length;
            }
            e->inline_data = slot;
        }
        e->state = SQE_NEW;
        e->status = IBV_WC_SUCCESS;
        qp->sq_count++;
        posted++;
        bytes += len;
    }
    if (ret)
        *bad = wr;
    if (posted) {
        uint64_t now = 0;

        /* a deferring post returns right away: its clock reading serves
         * (one clock_gettime per streamed post, not two: 10% of
         * ib_send_bw -s 64's sender) */
        if (!tx_defer(qp, posted, bytes, &now)) {
            uiw_qp_tx_progress(qp);
            now = uiw_now_ns();
        }
        qp->tx_post_ns = now;
    }
    return ret;
}

/* ------------------------------------------------------------------------
 * Attach / free
 * ---------------------------------------------------------------------- */

int dp_tx_attach(struct uiw_qp *qp, unsigned max_fpdu, unsigned seg)
{
    struct dp_tx *t = TX(qp);
    uiw_tx_cfg cfg;
    int r;

    if (!t) {
        t = calloc(1, sizeof(*t));
        if (!t)
            return -ENOMEM;
        qp->tx_state = t;
    } else {
        release_held(t);
        batch_reset(qp, t);
        txb_put(t);
        free(t->spill);
        memset(t, 0, sizeof(*t));
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.crc = qp->mpa.crc;
    cfg.markers = qp->mpa.markers_tx;
    cfg.max_fpdu = (uint16_t)max_fpdu;
    r = uiw_tx_init(&qp->tx, &cfg);
    if (r)
        return r;
    t->rtr = qp->mpa.send_rtr ? qp->mpa.rtr : 0;
    if ((t->rtr & UIW_RTR_READ) && !(t->rtr & UIW_RTR_WRITE) && !dp_orq_ready(qp))
        return -ENOMEM; /* start_rtr's Read Request */
    t->await = qp->mpa.await_rtr;
    t->wire_base = 0;
    t->seg = seg;
    t->fpdu_max = max_fpdu;
    t->fixed_fpdu = uiw_config()->max_fpdu != 0;
    t->refresh = SEG_REFRESH;
    return 0;
}

void dp_tx_free(struct uiw_qp *qp)
{
    struct dp_tx *t = TX(qp);

    tx_undefer(qp);
    if (!t)
        return;
    release_held(t);
    batch_reset(qp, t);
    txb_put(t);
    free(t->spill);
    free(t);
    qp->tx_state = NULL;
}
