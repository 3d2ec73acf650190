/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * FPDU receive parser and transmit segmenter (src/wire/rx.c, tx.c):
 *  - the RFC 5044 §4.4 annotated FPDU hex dumps (Figures 5 and 6) as
 *    vectors for both directions;
 *  - tx -> rx round trips of every opcode and many payload sizes under
 *    every max_fpdu x CRC x markers combination, byte for byte;
 *  - the same streams fed whole, byte by byte, split at every point, in
 *    random pieces and zero-copy style give the same events;
 *  - every malformation class gives its Terminate cause;
 *  - tx sizing, validation and iovec budget.
 * Input pieces are copied into exact-size heap buffers so that an ASan
 * build catches any read past the input.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "testutil.h"
#include "wire_testutil.h"
#include "uiwarp/wire.h"

/* ------------------------------------------------------------------------
 * Small helpers
 * ---------------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static void put_be16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static unsigned get_be16(const uint8_t *p)
{
    return (unsigned)p[0] << 8 | p[1];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* growable byte buffer */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            abort();
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void flatten(const uiw_fpdu *f, buf *b)
{
    size_t before = b->n;
    for (int i = 0; i < f->iovcnt; i++)
        buf_add(b, f->iov[i].iov_base, f->iov[i].iov_len);
    if (b->n - before != f->bytes)
        abort();
}

/* ------------------------------------------------------------------------
 * Normalized event lists
 * ---------------------------------------------------------------------- */

typedef struct rec {
    uint8_t kind;
    uint64_t fpdu_off;
    uint16_t ulpdu_len, hdr_len;
    uint32_t payload_len;
    uiw_hdr hdr;
    /* PAYLOAD, merged over consecutive offsets */
    uint32_t off, len;
    uint64_t data_off;
    size_t arena_at;
    /* END */
    bool crc_checked, crc_ok, pad_nonzero, marker_rsvd;
    uint32_t crc_recv, crc_calc, fpdu_bytes;
    uint16_t nmarkers;
    /* ERROR */
    uiw_term_cause cause;
    bool ulpdu_valid;
    uint64_t err_off, resume_off;
    uint8_t bad_hdr[UIW_TERM_MAX_DDP_HDR];
    uint8_t bad_hdr_len;
    const char *why;
} rec;

typedef struct reclist {
    rec *r;
    size_t n, cap;
    buf arena;         /* payload bytes, in order */
    unsigned long bad; /* invariant violations */
    const char *first_bad;
} reclist;

static void rl_free(reclist *l)
{
    free(l->r);
    free(l->arena.p);
    memset(l, 0, sizeof(*l));
}

static rec *rl_push(reclist *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->r = realloc(l->r, l->cap * sizeof(rec));
        if (!l->r)
            abort();
    }
    memset(&l->r[l->n], 0, sizeof(rec));
    return &l->r[l->n++];
}

#define BAD(l, msg)                                                                                \
    do {                                                                                           \
        if (!(l)->bad++)                                                                           \
            (l)->first_bad = (msg);                                                                \
    } while (0)

/* state of the feeder across pieces */
typedef struct feeder {
    uiw_rx rx;
    reclist *l;
    bool in_seg;
    uint32_t seg_payload, seg_done;
    bool dead;
    uiw_term_cause dead_cause;
    bool rewind; /* after some UIW_RX_FPDU events: uiw_rx_fpdu_rewind */
} feeder;

/* whole-FPDU fast path (cfg.fpdu_events): every feed_stream runs the slow
 * path and the fast path and compares the events field by field */
static unsigned long fast_fpdus, fast_rewinds, fast_streams, fast_diff;

static void on_event(feeder *f, const uiw_rx_event *ev, const uint8_t *piece, size_t plen);

/* A UIW_RX_FPDU event as the HDR, PAYLOAD (payload_len > 0) and END events
 * the slow path gives for it, each built from the FPDU event's fields; or,
 * when rewound, the HDR alone (the rest is fed again). Returns the bytes
 * given back. */
static size_t on_fpdu(feeder *f, const uiw_rx_event *ev, const uint8_t *piece, size_t plen)
{
    uiw_rx_event e;
    size_t back = 0;

    fast_fpdus++;
    if (!f->rx.cfg.fpdu_events || f->rx.cfg.markers)
        BAD(f->l, "FPDU event without fpdu_events or with markers");
    if (ev->cause.layer || ev->cause.etype || ev->cause.ecode || ev->why || ev->ulpdu_valid ||
        ev->err_off || ev->resume_off || ev->bad_hdr_len)
        BAD(f->l, "FPDU event with ERROR fields set");
    if (ev->len != ev->payload_len || ev->offset != 0 ||
        ev->data_off != ev->fpdu_off + UIW_MPA_LEN_FIELD + ev->hdr_len ||
        ev->fpdu_bytes != uiw_fpdu_len(ev->ulpdu_len) ||
        f->rx.stream_off != ev->fpdu_off + ev->fpdu_bytes)
        BAD(f->l, "FPDU event fields inconsistent");
    fpdu_as_event(ev, UIW_RX_HDR, &e);
    on_event(f, &e, piece, plen);
    if (f->rewind && (rnd() & 1)) {
        back = uiw_rx_fpdu_rewind(&f->rx);
        fast_rewinds++;
        if (back != ev->fpdu_bytes - UIW_MPA_LEN_FIELD - ev->hdr_len)
            BAD(f->l, "rewind gave back the wrong count");
        if (uiw_rx_fpdu_rewind(&f->rx) != 0)
            BAD(f->l, "second rewind not a no-op");
        return back;
    }
    if (ev->payload_len) {
        fpdu_as_event(ev, UIW_RX_PAYLOAD, &e);
        on_event(f, &e, piece, plen);
    }
    fpdu_as_event(ev, UIW_RX_END, &e);
    on_event(f, &e, piece, plen);
    return 0;
}

static void on_event(feeder *f, const uiw_rx_event *ev, const uint8_t *piece, size_t plen)
{
    reclist *l = f->l;
    rec *r;

    switch (ev->kind) {
    case UIW_RX_HDR:
        if (f->in_seg)
            BAD(l, "HDR inside a segment");
        f->in_seg = true;
        f->seg_payload = ev->payload_len;
        f->seg_done = 0;
        if ((uint32_t)ev->hdr_len + ev->payload_len != ev->ulpdu_len)
            BAD(l, "hdr_len + payload_len != ulpdu_len");
        r = rl_push(l);
        r->kind = ev->kind;
        r->fpdu_off = ev->fpdu_off;
        r->ulpdu_len = ev->ulpdu_len;
        r->hdr_len = ev->hdr_len;
        r->payload_len = ev->payload_len;
        r->hdr = *ev->hdr;
        r->nmarkers = ev->nmarkers;
        break;
    case UIW_RX_PAYLOAD:
        if (!f->in_seg)
            BAD(l, "PAYLOAD outside a segment");
        if (ev->len == 0)
            BAD(l, "empty PAYLOAD");
        if (ev->data < piece || ev->data + ev->len > piece + plen)
            BAD(l, "PAYLOAD outside the input");
        if (ev->offset != f->seg_done)
            BAD(l, "PAYLOAD offset not contiguous");
        if ((uint64_t)ev->offset + ev->len > f->seg_payload)
            BAD(l, "PAYLOAD beyond payload_len");
        if (f->rx.cfg.markers) {
            /* never spans a marker */
            for (uint64_t o = ev->data_off; o < ev->data_off + ev->len; o++)
                if (o % UIW_MARKER_INTERVAL < UIW_MARKER_LEN) {
                    BAD(l, "PAYLOAD contains marker bytes");
                    break;
                }
        }
        f->seg_done += ev->len;
        if (l->n && l->r[l->n - 1].kind == UIW_RX_PAYLOAD &&
            l->r[l->n - 1].off + l->r[l->n - 1].len == ev->offset) {
            r = &l->r[l->n - 1];
            r->len += ev->len;
        } else {
            r = rl_push(l);
            r->kind = ev->kind;
            r->off = ev->offset;
            r->len = ev->len;
            r->data_off = ev->data_off;
            r->arena_at = l->arena.n;
        }
        buf_add(&l->arena, ev->data, ev->len);
        break;
    case UIW_RX_END:
        if (!f->in_seg || f->seg_done != f->seg_payload)
            BAD(l, "END before all payload");
        f->in_seg = false;
        r = rl_push(l);
        r->kind = ev->kind;
        r->fpdu_off = ev->fpdu_off;
        r->ulpdu_len = ev->ulpdu_len;
        r->crc_checked = ev->crc_checked;
        r->crc_ok = ev->crc_ok;
        r->crc_recv = ev->crc_recv;
        r->crc_calc = ev->crc_calc;
        r->pad_nonzero = ev->pad_nonzero;
        r->marker_rsvd = ev->marker_rsvd;
        r->nmarkers = ev->nmarkers;
        r->fpdu_bytes = ev->fpdu_bytes;
        break;
    case UIW_RX_ERROR:
        r = rl_push(l);
        r->kind = ev->kind;
        r->fpdu_off = ev->fpdu_off;
        r->cause = ev->cause;
        r->ulpdu_valid = ev->ulpdu_valid;
        r->ulpdu_len = ev->ulpdu_len;
        r->err_off = ev->err_off;
        r->resume_off = ev->resume_off;
        r->crc_checked = ev->crc_checked;
        r->crc_recv = ev->crc_recv;
        r->crc_calc = ev->crc_calc;
        r->bad_hdr_len = ev->bad_hdr_len;
        memcpy(r->bad_hdr, ev->bad_hdr, sizeof(r->bad_hdr));
        r->why = ev->why;
        if (!ev->why)
            BAD(l, "ERROR without why");
        f->dead = true;
        f->dead_cause = ev->cause;
        break;
    default:
        BAD(l, "unknown event kind");
    }
}

/* Feed one piece (copied to an exact-size heap buffer). */
static void feed_piece(feeder *f, const uint8_t *src, size_t n)
{
    uint8_t *piece = malloc(n ? n : 1);
    size_t at = 0;
    uiw_rx_event ev;

    if (!piece)
        abort();
    memcpy(piece, src, n);
    while (!f->dead) {
        size_t used = uiw_rx_feed(&f->rx, piece + at, n - at, &ev);
        if (used > n - at) {
            BAD(f->l, "consumed more than given");
            break;
        }
        at += used;
        if (ev.kind == UIW_RX_NONE) {
            if (at != n)
                BAD(f->l, "NONE before all input consumed");
            break;
        }
        if (used == 0 && ev.kind != UIW_RX_ERROR)
            BAD(f->l, "event with nothing consumed");
        if (ev.kind == UIW_RX_FPDU) {
            size_t back = on_fpdu(f, &ev, piece, n);
            if (back > at)
                BAD(f->l, "rewind beyond the input");
            else
                at -= back;
        } else {
            on_event(f, &ev, piece, n);
            if (uiw_rx_fpdu_rewind(&f->rx) != 0)
                BAD(f->l, "rewind after a slow-path event");
        }
        if (at == n && ev.kind != UIW_RX_ERROR)
            break;
    }
    if (f->dead) {
        /* sticky: more input gives the same error, consumes nothing */
        size_t used = uiw_rx_feed(&f->rx, piece, n, &ev);
        if (used != 0 || ev.kind != UIW_RX_ERROR || ev.cause.layer != f->dead_cause.layer ||
            ev.cause.etype != f->dead_cause.etype || ev.cause.ecode != f->dead_cause.ecode)
            BAD(f->l, "error not sticky");
    }
    free(piece);
}

enum { FEED_WHOLE, FEED_BYTES, FEED_RANDOM, FEED_SPLIT, FEED_ZEROCOPY };

/* Zero-copy engine model: when the parser says payload is next, "recv"
 * straight into a destination buffer and feed that; else feed a small
 * staged chunk. Checks the room contract. */
static void feed_zerocopy(feeder *f, const uint8_t *s, size_t n)
{
    static uint8_t dest[70000];
    size_t at = 0;

    while (at < n && !f->dead) {
        uint32_t off = 0xFFFFFFFF;
        uint32_t room = uiw_rx_payload_room(&f->rx, &off);
        if (room) {
            uiw_rx_event ev;
            size_t k = room < n - at ? room : n - at;
            size_t used;
            if (off != f->seg_done || off + room > f->seg_payload)
                BAD(f->l, "payload_room offset/size wrong");
            k = k > 1 && (rnd() & 1) ? k - rnd() % k : k; /* sometimes a short recv */
            memcpy(dest + off, s + at, k);
            used = uiw_rx_feed(&f->rx, dest + off, k, &ev);
            if (used != k || ev.kind != UIW_RX_PAYLOAD || ev.data != dest + off || ev.len != k ||
                ev.offset != off)
                BAD(f->l, "payload_room contract broken");
            else
                on_event(f, &ev, dest + off, k);
            at += used ? used : k;
        } else {
            size_t k = 1 + rnd() % 37;
            if (k > n - at)
                k = n - at;
            feed_piece(f, s + at, k);
            at += k;
        }
    }
}

static bool rl_eq(const reclist *a, const reclist *b);

static void feed_stream1(const uiw_rx_cfg *cfg, const uint8_t *s, size_t n, int mode, size_t arg,
                         reclist *l, bool rewind)
{
    feeder f;

    memset(&f, 0, sizeof(f));
    memset(l, 0, sizeof(*l));
    f.l = l;
    f.rewind = rewind;
    uiw_rx_init(&f.rx, cfg);
    switch (mode) {
    case FEED_WHOLE:
        feed_piece(&f, s, n);
        break;
    case FEED_BYTES:
        for (size_t i = 0; i < n && !f.dead; i++)
            feed_piece(&f, s + i, 1);
        break;
    case FEED_RANDOM:
        for (size_t i = 0; i < n && !f.dead;) {
            size_t k = (rnd() & 3) == 0 ? 1 + rnd() % 7 : 1 + rnd() % 3000;
            if (k > n - i)
                k = n - i;
            feed_piece(&f, s + i, k);
            i += k;
        }
        break;
    case FEED_SPLIT:
        feed_piece(&f, s, arg);
        feed_piece(&f, s + arg, n - arg);
        break;
    case FEED_ZEROCOPY:
        feed_zerocopy(&f, s, n);
        break;
    }
    if (!f.dead && !uiw_rx_idle(&f.rx) && n && l->n && l->r[l->n - 1].kind == UIW_RX_END)
        BAD(l, "not idle after a complete stream");
}

/* Feed the stream through the slow path (the events in *l), then through
 * the whole-FPDU fast path, with and without rewinds: the three must give
 * the same events, field by field (rec_eq), and the same final state. */
static void feed_stream(const uiw_rx_cfg *cfg, const uint8_t *s, size_t n, int mode, size_t arg,
                        reclist *l)
{
    uiw_rx_cfg slow = *cfg, fast = *cfg;
    uint64_t seed = rng_state;

    slow.fpdu_events = false;
    fast.fpdu_events = true;
    feed_stream1(&slow, s, n, mode, arg, l, false);
    for (int rw = 0; rw < 2; rw++) {
        reclist lf;
        rng_state = seed; /* the same random pieces */
        feed_stream1(&fast, s, n, mode, arg, &lf, rw);
        fast_streams++;
        /* the slow path's own invariant findings (e.g. a truncated
         * stream is not idle) must be the fast path's too */
        if (lf.bad != l->bad || (lf.bad && strcmp(lf.first_bad, l->first_bad)) || !rl_eq(l, &lf)) {
            if (!fast_diff++)
                fprintf(stderr,
                        "fast path differs (mode %d arg %zu crc %d markers %d strict %d "
                        "rewind %d): %s\n",
                        mode, arg, cfg->crc, cfg->markers, cfg->strict_pad, rw,
                        lf.first_bad ? lf.first_bad : "events");
            BAD(l, "fast path differs from the slow path");
        }
        rl_free(&lf);
    }
}

static bool rec_eq(const reclist *a, size_t i, const reclist *b, size_t j)
{
    const rec *x = &a->r[i], *y = &b->r[j];
    if (x->kind != y->kind)
        return false;
    switch (x->kind) {
    case UIW_RX_HDR:
        return x->fpdu_off == y->fpdu_off && x->ulpdu_len == y->ulpdu_len &&
               x->hdr_len == y->hdr_len && x->payload_len == y->payload_len &&
               x->nmarkers == y->nmarkers && hdr_eq(&x->hdr, &y->hdr);
    case UIW_RX_PAYLOAD:
        return x->off == y->off && x->len == y->len && x->data_off == y->data_off &&
               memcmp(a->arena.p + x->arena_at, b->arena.p + y->arena_at, x->len) == 0;
    case UIW_RX_END:
        return x->fpdu_off == y->fpdu_off && x->ulpdu_len == y->ulpdu_len &&
               x->crc_checked == y->crc_checked && x->crc_ok == y->crc_ok &&
               x->crc_recv == y->crc_recv && x->crc_calc == y->crc_calc &&
               x->pad_nonzero == y->pad_nonzero && x->marker_rsvd == y->marker_rsvd &&
               x->nmarkers == y->nmarkers && x->fpdu_bytes == y->fpdu_bytes;
    case UIW_RX_ERROR:
        return x->fpdu_off == y->fpdu_off && x->cause.layer == y->cause.layer &&
               x->cause.etype == y->cause.etype && x->cause.ecode == y->cause.ecode &&
               x->ulpdu_valid == y->ulpdu_valid && x->ulpdu_len == y->ulpdu_len &&
               x->err_off == y->err_off && x->resume_off == y->resume_off &&
               x->crc_recv == y->crc_recv && x->crc_calc == y->crc_calc &&
               x->bad_hdr_len == y->bad_hdr_len &&
               memcmp(x->bad_hdr, y->bad_hdr, x->bad_hdr_len) == 0 && x->why == y->why;
    }
    return false;
}

static bool rl_eq(const reclist *a, const reclist *b)
{
    if (a->n != b->n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (!rec_eq(a, i, b, i))
            return false;
    return true;
}

/* ------------------------------------------------------------------------
 * RFC 5044 §4.4 Figures 5 and 6
 * ---------------------------------------------------------------------- */

/* Figure 5: first FPDU on the stream, so it starts with a marker. */
static const uint8_t fig5[] = {
    0x00, 0x00, 0x00, 0x00,                         /* Marker: Reserved, FPDUPTR */
    0x00, 0x2a,                                     /* ULPDU Length */
    0x41, 0x43,                                     /* DDP Control: Send, Last */
    0x00, 0x00, 0x00, 0x00,                         /* Reserved (no STag) */
    0x00, 0x00, 0x00, 0x00,                         /* Queue 0 */
    0x00, 0x00, 0x00, 0x01,                         /* MSN 1 */
    0x00, 0x00, 0x00, 0x00,                         /* MO 0 */
    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, /* 24 octets of zeros */
    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, /* */
    0x52, 0x23, 0x99, 0x83,                         /* CRC32c */
};

/* Figure 6: the FPDU at stream offset 0x1ec, marker at 0x200. */
static const uint8_t fig6[] = {
    0x00, 0x2a,                                     /* 01ec Length */
    0x41, 0x43,                                     /* 01ee DDP Control: Send, Last */
    0x00, 0x00, 0x00, 0x00,                         /* 01f0 Reserved */
    0x00, 0x00, 0x00, 0x00,                         /* 01f4 Queue 0 */
    0x00, 0x00, 0x00, 0x02,                         /* 01f8 MSN 2 */
    0x00, 0x00, 0x00, 0x00,                         /* 01fc MO 0 */
    0x00, 0x00, 0x00, 0x14,                         /* 0200 Marker: Reserved, FPDUPTR 0x14 */
    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, /* 0204 24 octets of zeros */
    0,    0,    0,    0,    0, 0, 0, 0, 0, 0, 0, 0, /* */
    0x84, 0x92, 0x58, 0x98,                         /* 021c CRC32c */
};

static uiw_hdr send_hdr(uint8_t opcode, uint32_t msn)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = opcode;
    h.last = true;
    h.qn = UIW_QN_SEND;
    h.msn = msn;
    return h;
}

/* Send msg through tx into b; returns number of FPDUs. */
static int tx_msg(uiw_tx *tx, const uiw_hdr *h, const struct iovec *sgl, int nsge, uint64_t total,
                  buf *b)
{
    uiw_tx_msg m;
    static uiw_fpdu f;
    int n = 0, r;

    if (uiw_tx_msg_init(&m, h, sgl, nsge, total) != 0)
        return -1;
    while ((r = uiw_tx_next(tx, &m, &f)) == 1) {
        flatten(&f, b);
        n++;
    }
    return r < 0 ? r : n;
}

static void test_rfc_vectors(void)
{
    uiw_rx_cfg cfg = {.crc = true, .markers = true};
    reclist l;
    uint8_t zeros[464] = {0};

    /* The CRC covers the leading marker (RFC 5044 §4.4 rule 2) ... */
    CHECK_EQ(uiw_crc32c(fig5, sizeof(fig5) - 4), uiw_crc32c_get(fig5 + sizeof(fig5) - 4));
    /* ... and the marker inside the FPDU (§4.3). */
    CHECK_EQ(uiw_crc32c(fig6, sizeof(fig6) - 4), uiw_crc32c_get(fig6 + sizeof(fig6) - 4));

    /* Figure 5 parsed whole and byte by byte. */
    for (int mode = FEED_WHOLE; mode <= FEED_BYTES; mode++) {
        feed_stream(&cfg, fig5, sizeof(fig5), mode, 0, &l);
        CHECK_EQ(l.bad, 0);
        CHECK_EQ(l.n, 3);
        if (l.n == 3) {
            CHECK_EQ(l.r[0].kind, UIW_RX_HDR);
            CHECK_EQ(l.r[0].fpdu_off, 4);
            CHECK_EQ(l.r[0].ulpdu_len, 42);
            CHECK_EQ(l.r[0].hdr_len, 18);
            CHECK_EQ(l.r[0].payload_len, 24);
            CHECK(!l.r[0].hdr.tagged && l.r[0].hdr.last);
            CHECK_EQ(l.r[0].hdr.opcode, UIW_OP_SEND);
            CHECK_EQ(l.r[0].hdr.qn, 0);
            CHECK_EQ(l.r[0].hdr.msn, 1);
            CHECK_EQ(l.r[0].hdr.mo, 0);
            CHECK_EQ(l.r[1].kind, UIW_RX_PAYLOAD);
            CHECK_EQ(l.r[1].len, 24);
            CHECK_MEM(l.arena.p, zeros, 24);
            CHECK_EQ(l.r[2].kind, UIW_RX_END);
            CHECK(l.r[2].crc_checked && l.r[2].crc_ok);
            CHECK_EQ(l.r[2].crc_recv, 0x83992352u);
            CHECK_EQ(l.r[2].crc_calc, 0x83992352u);
            CHECK_EQ(l.r[2].nmarkers, 1);
            CHECK_EQ(l.r[2].fpdu_bytes, sizeof(fig5));
        }
        rl_free(&l);
    }

    /* Figure 5 produced by tx: Send/L, MSN 1, 24 zero bytes, first FPDU. */
    {
        uiw_tx tx;
        uiw_tx_cfg tc = {.crc = true, .markers = true, .max_fpdu = 1460};
        uiw_hdr h = send_hdr(UIW_OP_SEND, 1);
        struct iovec v = {zeros, 24};
        buf b = {0};
        CHECK_EQ(uiw_tx_init(&tx, &tc), 0);
        CHECK_EQ(tx_msg(&tx, &h, &v, 1, 24, &b), 1);
        CHECK_EQ(b.n, sizeof(fig5));
        if (b.n == sizeof(fig5))
            CHECK_MEM(b.p, fig5, sizeof(fig5));
        free(b.p);
    }

    /* Figure 6: the first FPDU (with the stream's first marker) is 492
     * octets, a Send/L MSN 1 to QN 0: ULPDU 482 = 18 + 464. */
    {
        uiw_tx tx;
        uiw_tx_cfg tc = {.crc = true, .markers = true, .max_fpdu = 9000};
        uiw_hdr h1 = send_hdr(UIW_OP_SEND, 1), h2 = send_hdr(UIW_OP_SEND, 2);
        struct iovec v1 = {zeros, 464}, v2 = {zeros, 24};
        buf b = {0};
        CHECK_EQ(uiw_tx_init(&tx, &tc), 0);
        CHECK_EQ(tx_msg(&tx, &h1, &v1, 1, 464, &b), 1);
        CHECK_EQ(b.n, 0x1ec);
        CHECK_EQ(tx_msg(&tx, &h2, &v2, 1, 24, &b), 1);
        CHECK_EQ(b.n, 0x1ec + sizeof(fig6));
        if (b.n == 0x1ec + sizeof(fig6))
            CHECK_MEM(b.p + 0x1ec, fig6, sizeof(fig6));

        /* and the parser agrees, in every 2-way split */
        for (size_t split = 0; split <= b.n; split += (split < 0x1e0 ? 37 : 1)) {
            feed_stream(&cfg, b.p, b.n, FEED_SPLIT, split, &l);
            CHECK_EQ(l.bad, 0);
            CHECK_EQ(l.n, 6);
            if (l.n == 6) {
                CHECK_EQ(l.r[3].kind, UIW_RX_HDR);
                CHECK_EQ(l.r[3].fpdu_off, 0x1ec);
                CHECK_EQ(l.r[3].hdr.msn, 2);
                CHECK_EQ(l.r[4].kind, UIW_RX_PAYLOAD);
                CHECK_EQ(l.r[4].len, 24);
                CHECK_EQ(l.r[4].data_off, 0x204);
                CHECK_EQ(l.r[5].kind, UIW_RX_END);
                CHECK(l.r[5].crc_ok);
                CHECK_EQ(l.r[5].crc_recv, 0x98589284u);
                CHECK_EQ(l.r[5].nmarkers, 1);
                CHECK_EQ(l.r[5].fpdu_bytes, sizeof(fig6));
            }
            rl_free(&l);
        }
        free(b.p);
    }
}

/* A Send siw 6.1 sent with CRC on (../shared/siw-peer/pcaps/crc-ib_write_bw.pcap,
 * first connection, initiator -> responder, MSN 4): 2 payload bytes and the
 * pad 00 40 -- non-zero pad from siw's short-FPDU path (PEERS.md §6), but
 * covered by a good CRC. RFC 5044 §4.1: the receiver ignores the pad. */
static const uint8_t siw_send_pad[] = {
    0x00, 0x14, 0x41, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x33, 0x00, 0x00, 0x40, 0xbf, 0xe0, 0xac, 0x94,
};

static void test_siw_vector(void)
{
    uiw_rx_cfg cfg = {.crc = true};
    reclist l;

    feed_stream(&cfg, siw_send_pad, sizeof(siw_send_pad), FEED_BYTES, 0, &l);
    CHECK_EQ(l.bad, 0);
    CHECK_EQ(l.n, 3);
    if (l.n == 3) {
        CHECK_EQ(l.r[0].hdr.opcode, UIW_OP_SEND);
        CHECK_EQ(l.r[0].hdr.msn, 4);
        CHECK_EQ(l.r[0].payload_len, 2);
        CHECK_EQ(l.arena.p[0], 0x33);
        CHECK(l.r[2].crc_ok && l.r[2].pad_nonzero);
        CHECK_EQ(l.r[2].crc_recv, 0x94ace0bfu);
    }
    rl_free(&l);
    cfg.strict_pad = true;
    feed_stream(&cfg, siw_send_pad, sizeof(siw_send_pad), FEED_WHOLE, 0, &l);
    CHECK(l.n == 3 && l.r[2].kind == UIW_RX_ERROR && l.r[2].cause.ecode == UIW_MPA_EC_MARKER);
    rl_free(&l);
}

/* ------------------------------------------------------------------------
 * Round trips
 * ---------------------------------------------------------------------- */

/* expected segment */
typedef struct xseg {
    uint64_t len_off; /* ULPDU_Length offset */
    uint32_t bytes;
    uint16_t ulpdu, nmarkers;
    uint32_t payload;
    uint32_t crc;
    uiw_hdr hdr;
    const uint8_t *data;
} xseg;

typedef struct xlist {
    xseg *s;
    size_t n, cap;
} xlist;

static void xl_push(xlist *x, const xseg *s)
{
    if (x->n == x->cap) {
        x->cap = x->cap ? 2 * x->cap : 1024;
        x->s = realloc(x->s, x->cap * sizeof(xseg));
        if (!x->s)
            abort();
    }
    x->s[x->n++] = *s;
}

/* where markers landed (content offset classes) */
enum { M_LEAD, M_HDR, M_HDR_END, M_PAYLOAD, M_PRE_CRC, M_CLASSES };
static unsigned long marker_class[M_CLASSES];

static void classify_markers(const uiw_fpdu *f, int hl)
{
    unsigned before = 0;
    uint64_t len_off = f->stream_off;
    if (f->stream_off % UIW_MARKER_INTERVAL == 0)
        len_off += UIW_MARKER_LEN;
    for (uint64_t p = f->stream_off; p < f->stream_off + f->bytes; p++) {
        uint64_t c;
        if (p % UIW_MARKER_INTERVAL)
            continue;
        if (p == f->stream_off) {
            marker_class[M_LEAD]++;
            before++;
            continue;
        }
        c = p - len_off - UIW_MARKER_LEN * (before - (len_off != f->stream_off ? 1 : 0));
        before++;
        if (c < 2u + (unsigned)hl)
            marker_class[M_HDR]++;
        else if (c == 2u + (unsigned)hl && f->payload)
            marker_class[M_HDR_END]++;
        else if (c < 2u + f->ulpdu_len)
            marker_class[M_PAYLOAD]++;
        else
            marker_class[M_PRE_CRC]++;
    }
}

/* Segment msg through tx, append to b, record expectations. */
static int tx_record(uiw_tx *tx, const uiw_hdr *h, const struct iovec *sgl, int nsge,
                     uint64_t total, const uint8_t *data, buf *b, xlist *x, unsigned long *bad)
{
    uiw_tx_msg m;
    static uiw_fpdu f;
    int r, n = 0;
    uint64_t done = 0;
    unsigned m4 = tx->cfg.max_fpdu & ~3u;

    if (uiw_tx_msg_init(&m, h, sgl, nsge, total) != 0)
        return -1;
    while ((r = uiw_tx_next(tx, &m, &f)) == 1) {
        xseg s;
        int hl;
        memset(&s, 0, sizeof(s));
        s.len_off = f.stream_off + (tx->cfg.markers && f.stream_off % 512 == 0 ? 4 : 0);
        s.bytes = (uint32_t)f.bytes;
        s.ulpdu = f.ulpdu_len;
        s.nmarkers = f.nmarkers;
        s.payload = f.payload;
        s.crc = f.crc;
        s.hdr = *h;
        s.hdr.last = f.last;
        if (h->tagged)
            s.hdr.to = h->to + done;
        else
            s.hdr.mo = h->mo + (uint32_t)done;
        s.data = data + done;
        xl_push(x, &s);
        hl = f.ulpdu_len - (int)f.payload;
        if (tx->cfg.markers)
            classify_markers(&f, hl);
        /* sizing rules */
        if (f.iovcnt > UIW_TX_MAX_IOV || f.iovcnt < 1)
            (*bad)++;
        if (!f.last && (f.payload % 4 || uiw_mpa_pad(f.ulpdu_len)))
            (*bad)++;
        if (!f.last && !uiw_op_hdr_only(h->opcode) && f.bytes != m4 && f.bytes != m4 - 4 &&
            f.iovcnt < UIW_TX_MAX_IOV - 8)
            (*bad)++;
        if (f.bytes > m4 && !uiw_op_hdr_only(h->opcode))
            (*bad)++;
        if (f.last != (done + f.payload == total))
            (*bad)++;
        if (f.bytes % 4 && tx->cfg.markers)
            (*bad)++;
        done += f.payload;
        flatten(&f, b);
        n++;
    }
    if (r < 0 || done != total)
        return -1;
    return n;
}

/* Fill hdr for opcode with recognizable values. */
static uiw_hdr make_hdr(unsigned op, uint32_t *msn, unsigned k)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = (uint8_t)op;
    h.last = true;
    switch (op) {
    case UIW_OP_WRITE:
    case UIW_OP_READ_RESP:
        h.tagged = true;
        h.stag = 0x1234500u + k;
        h.to = 0xFFFF000000000000ull + 0x1000ull * k + k; /* odd TO */
        return h;
    case UIW_OP_READ_REQ:
        h.qn = UIW_QN_READ_REQ;
        h.u.rreq.sink_stag = 0xA000 + k;
        h.u.rreq.sink_to = 0x1111222233334444ull + k;
        h.u.rreq.read_size = 4096 + k;
        h.u.rreq.src_stag = 0xB000 + k;
        h.u.rreq.src_to = 0x5555666677778888ull - k;
        break;
    case UIW_OP_TERMINATE:
        h.qn = UIW_QN_TERMINATE;
        h.u.term.cause.layer = UIW_LAYER_DDP;
        h.u.term.cause.etype = UIW_DDP_ET_UNTAGGED;
        h.u.term.cause.ecode = UIW_DDP_EC_U_INVALID_MSN_RANGE;
        h.u.term.hdr_mpa = true;
        h.u.term.hdr_ddp = true;
        h.u.term.ddp_hdr_len = 2 + UIW_HDR_UNTAGGED_LEN;
        for (int i = 0; i < h.u.term.ddp_hdr_len; i++)
            h.u.term.ddp_hdr[i] = (uint8_t)(i == 2 ? 0x41 : i * 7 + k);
        if (k & 1) {
            h.u.term.hdr_rdma = true;
            h.u.term.rdma_hdr_len = UIW_RREQ_LEN;
            for (int i = 0; i < UIW_RREQ_LEN; i++)
                h.u.term.rdma_hdr[i] = (uint8_t)(i * 3 + k);
        }
        break;
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        h.qn = UIW_QN_SEND;
        for (int i = 0; i < UIW_IMM_DATA_LEN; i++)
            h.u.imm[i] = (uint8_t)(0xC0 + i + k);
        break;
    case UIW_OP_ATOMIC_REQ:
        h.qn = UIW_QN_READ_REQ;
        h.u.atomic_req.aop = (k & 1) ? UIW_AOP_CMP_SWAP : UIW_AOP_FETCH_ADD;
        h.u.atomic_req.req_id = 77 + k;
        h.u.atomic_req.stag = 0xD00D;
        h.u.atomic_req.to = 0x8000 + 8 * k;
        h.u.atomic_req.add_swap = 0x0102030405060708ull;
        h.u.atomic_req.add_swap_mask = ~0ull;
        h.u.atomic_req.compare = k;
        h.u.atomic_req.compare_mask = ~0ull;
        break;
    case UIW_OP_ATOMIC_RESP:
        h.qn = UIW_QN_ATOMIC_RESP;
        h.u.atomic_resp.req_id = 77 + k;
        h.u.atomic_resp.orig_value = 0xFEEDFACECAFEBEEFull ^ k;
        break;
    case UIW_OP_SEND_INV:
    case UIW_OP_SEND_SE_INV:
        h.qn = UIW_QN_SEND;
        h.inv_stag = 0xABCD0000u + k;
        break;
    default:
        h.qn = UIW_QN_SEND;
        break;
    }
    h.msn = ++msn[h.qn];
    return h;
}

/* Split [data, data+total) into a gather list (some empty SGEs). */
static int make_sgl(struct iovec *v, int maxv, const uint8_t *data, size_t total)
{
    int n = 0;
    size_t at = 0;
    int want = 1 + (int)(rnd() % 6);

    if ((rnd() & 7) == 0 && n < maxv) {
        v[n].iov_base = NULL;
        v[n++].iov_len = 0;
    }
    while (at < total && n < maxv) {
        size_t k = total - at;
        if (n < want - 1 && k > 1)
            k = 1 + rnd() % (k < 9000 ? k : 9000);
        if (n == maxv - 1)
            k = total - at;
        v[n].iov_base = (void *)(data + at);
        v[n++].iov_len = k;
        at += k;
        if ((rnd() & 7) == 0 && n < maxv - 1) {
            v[n].iov_base = (void *)data;
            v[n++].iov_len = 0;
        }
    }
    return n;
}

static const unsigned sizes[] = {0, 1, 3, 4, 5, 511, 512, 513, 4095, 4096, 65537};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* Verify a parse against the expectations. Returns mismatches. */
static unsigned long verify(const reclist *l, const xlist *x, bool crc, size_t *nseg)
{
    unsigned long bad = 0;
    size_t i = 0, s = 0;

    for (s = 0; s < x->n; s++) {
        const xseg *e = &x->s[s];
        if (i >= l->n || l->r[i].kind != UIW_RX_HDR) {
            bad++;
            break;
        }
        if (l->r[i].fpdu_off != e->len_off || l->r[i].ulpdu_len != e->ulpdu ||
            l->r[i].payload_len != e->payload || !hdr_eq(&l->r[i].hdr, &e->hdr))
            bad++;
        i++;
        if (e->payload) {
            if (i >= l->n || l->r[i].kind != UIW_RX_PAYLOAD || l->r[i].len != e->payload ||
                l->r[i].off != 0 || memcmp(l->arena.p + l->r[i].arena_at, e->data, e->payload)) {
                bad++;
                break;
            }
            i++;
        }
        if (i >= l->n || l->r[i].kind != UIW_RX_END) {
            bad++;
            break;
        }
        if (l->r[i].fpdu_bytes != e->bytes || l->r[i].nmarkers != e->nmarkers ||
            l->r[i].crc_checked != crc || !l->r[i].crc_ok || l->r[i].pad_nonzero ||
            l->r[i].marker_rsvd || l->r[i].crc_recv != e->crc)
            bad++;
        i++;
    }
    if (i != l->n)
        bad++;
    *nseg = s;
    return bad;
}

static void test_roundtrip(void)
{
    static const uint16_t fpdus[] = {64, 1460, 9000, 65535};
    static const unsigned ops[] = {
        UIW_OP_WRITE,    UIW_OP_READ_REQ,    UIW_OP_READ_RESP,   UIW_OP_SEND,
        UIW_OP_SEND_INV, UIW_OP_SEND_SE,     UIW_OP_SEND_SE_INV, UIW_OP_TERMINATE,
        UIW_OP_IMM_DATA, UIW_OP_IMM_DATA_SE, UIW_OP_ATOMIC_REQ,  UIW_OP_ATOMIC_RESP,
    };
    size_t cap = 0;
    uint8_t *data;
    unsigned long total_segs = 0;

    for (size_t i = 0; i < NSIZES; i++)
        cap += sizes[i];
    cap = cap * 8 + 4096;
    data = malloc(cap);
    if (!data)
        abort();
    for (size_t i = 0; i < cap; i++)
        data[i] = (uint8_t)rnd();

    for (size_t fi = 0; fi < sizeof(fpdus) / sizeof(fpdus[0]); fi++)
        for (int crc = 0; crc < 2; crc++)
            for (int markers = 0; markers < 2; markers++) {
                uiw_tx tx;
                uiw_tx_cfg tc = {.crc = crc, .markers = markers, .max_fpdu = fpdus[fi]};
                uiw_rx_cfg rc = {.crc = crc, .markers = markers};
                buf b = {0};
                xlist x = {0};
                uint32_t msn[UIW_QN_COUNT] = {0};
                unsigned long txbad = 0, fails = 0;
                size_t dat = 0;
                unsigned k = 0;
                reclist l;
                size_t nseg;

                CHECK_EQ(uiw_tx_init(&tx, &tc), 0);
                /* a few odd-sized messages first so that later FPDUs start
                 * at varied offsets and markers land in every field */
                for (unsigned pre = 0; pre < 5 + fi; pre++) {
                    unsigned n = 1 + pre * 7 + (unsigned)fi;
                    uiw_hdr h = make_hdr(UIW_OP_SEND, msn, k++);
                    struct iovec v = {data, n};
                    if (tx_record(&tx, &h, &v, 1, n, data, &b, &x, &txbad) < 0)
                        fails++;
                }
                for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++)
                    for (size_t si = 0; si < NSIZES; si++) {
                        unsigned op = ops[oi];
                        unsigned n = sizes[si];
                        struct iovec v[16];
                        int nv;
                        uiw_hdr h;
                        if (uiw_op_hdr_only(op) && n)
                            continue;
                        h = make_hdr(op, msn, k++);
                        if (dat + n > cap)
                            dat = 0;
                        nv = make_sgl(v, 16, data + dat, n);
                        if (tx_record(&tx, &h, v, nv, n, data + dat, &b, &x, &txbad) < 0)
                            fails++;
                        dat += n;
                    }
                CHECK_EQ(fails, 0);
                CHECK_EQ(txbad, 0);

                feed_stream(&rc, b.p, b.n, FEED_WHOLE, 0, &l);
                CHECK_EQ(l.bad, 0);
                CHECK_EQ(verify(&l, &x, crc, &nseg), 0);
                CHECK_EQ(nseg, x.n);
                total_segs += x.n;
                {
                    reclist l2;
                    feed_stream(&rc, b.p, b.n, FEED_RANDOM, 0, &l2);
                    CHECK_EQ(l2.bad, 0);
                    CHECK(rl_eq(&l, &l2));
                    rl_free(&l2);
                    feed_stream(&rc, b.p, b.n, FEED_ZEROCOPY, 0, &l2);
                    CHECK_EQ(l2.bad, 0);
                    CHECK(rl_eq(&l, &l2));
                    rl_free(&l2);
                    if (fpdus[fi] == 64) {
                        feed_stream(&rc, b.p, b.n, FEED_BYTES, 0, &l2);
                        CHECK_EQ(l2.bad, 0);
                        CHECK(rl_eq(&l, &l2));
                        rl_free(&l2);
                    }
                }
                if (l.bad || verify(&l, &x, crc, &nseg))
                    fprintf(stderr, "roundtrip max_fpdu %u crc %d markers %d: %s\n", fpdus[fi], crc,
                            markers, l.first_bad ? l.first_bad : "mismatch");
                rl_free(&l);
                free(x.s);
                free(b.p);
            }
    /* markers were seen before a length field, inside a header, between a
     * header and its payload, inside payload and between pad and CRC */
    for (int c = 0; c < M_CLASSES; c++) {
        CHECK(marker_class[c] > 0);
        if (!marker_class[c])
            fprintf(stderr, "marker class %d never seen\n", c);
    }
    CHECK(total_segs > 10000);
    printf("round trips: %lu segments\n", total_segs);
    free(data);
}

/* ------------------------------------------------------------------------
 * Split invariance on one mixed stream (markers + CRC), incl. an error
 * ---------------------------------------------------------------------- */

static void build_mixed(buf *b, bool crc, bool markers)
{
    uiw_tx tx;
    uiw_tx_cfg tc = {.crc = crc, .markers = markers, .max_fpdu = 200};
    static uint8_t data[3000];
    uint32_t msn[UIW_QN_COUNT] = {0};
    unsigned k = 0;
    static const unsigned ops[] = {UIW_OP_SEND,       UIW_OP_WRITE,       UIW_OP_READ_REQ,
                                   UIW_OP_READ_RESP,  UIW_OP_SEND_SE_INV, UIW_OP_IMM_DATA,
                                   UIW_OP_ATOMIC_REQ, UIW_OP_ATOMIC_RESP, UIW_OP_TERMINATE};
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 13 + 5);
    uiw_tx_init(&tx, &tc);
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        uiw_hdr h = make_hdr(ops[i], msn, k++);
        unsigned n = uiw_op_hdr_only(ops[i]) ? 0 : 1 + (unsigned)(i * 97 % 700);
        struct iovec v[3] = {{data, n / 3}, {data + n / 3, n / 2}, {data + n / 3 + n / 2, 0}};
        v[2].iov_len = n - n / 3 - n / 2;
        tx_msg(&tx, &h, v, 3, n, b);
    }
}

static void test_splits(void)
{
    for (int variant = 0; variant < 4; variant++) {
        bool crc = variant & 1, markers = variant & 2;
        uiw_rx_cfg rc = {.crc = crc, .markers = markers};
        buf b = {0};
        reclist whole, l;
        unsigned long diff = 0, bad = 0;

        build_mixed(&b, crc, markers);
        feed_stream(&rc, b.p, b.n, FEED_WHOLE, 0, &whole);
        CHECK_EQ(whole.bad, 0);
        CHECK(whole.n > 30);
        CHECK_EQ(whole.r[whole.n - 1].kind, UIW_RX_END);

        feed_stream(&rc, b.p, b.n, FEED_BYTES, 0, &l);
        CHECK_EQ(l.bad, 0);
        CHECK(rl_eq(&whole, &l));
        rl_free(&l);
        for (int t = 0; t < 20; t++) {
            feed_stream(&rc, b.p, b.n, FEED_RANDOM, 0, &l);
            bad += l.bad;
            diff += !rl_eq(&whole, &l);
            rl_free(&l);
        }
        for (size_t split = 0; split <= b.n; split++) {
            feed_stream(&rc, b.p, b.n, FEED_SPLIT, split, &l);
            bad += l.bad;
            diff += !rl_eq(&whole, &l);
            rl_free(&l);
        }
        CHECK_EQ(bad, 0);
        CHECK_EQ(diff, 0);
        rl_free(&whole);

        /* the same with a corruption near the end: identical ERROR */
        {
            size_t at = b.n - 40;
            reclist e;
            b.p[at] ^= 0x10;
            feed_stream(&rc, b.p, b.n, FEED_WHOLE, 0, &e);
            CHECK_EQ(e.bad, 0);
            CHECK(e.n > 0);
            bad = diff = 0;
            feed_stream(&rc, b.p, b.n, FEED_BYTES, 0, &l);
            bad += l.bad;
            diff += !rl_eq(&e, &l);
            rl_free(&l);
            for (size_t split = 0; split <= b.n; split += 3) {
                feed_stream(&rc, b.p, b.n, FEED_SPLIT, split, &l);
                bad += l.bad;
                diff += !rl_eq(&e, &l);
                rl_free(&l);
            }
            CHECK_EQ(bad, 0);
            CHECK_EQ(diff, 0);
            rl_free(&e);
        }
        free(b.p);
    }
}

/* ------------------------------------------------------------------------
 * Malformations
 * ---------------------------------------------------------------------- */

/* Raw FPDU without markers: length, ulpdu, pad (pad_byte), CRC. */
static size_t mk_raw(uint8_t *out, const uint8_t *ulpdu, size_t ulen, bool crc, uint8_t pad_byte)
{
    unsigned pad = uiw_mpa_pad((unsigned)ulen);
    put_be16(out, (unsigned)ulen);
    memcpy(out + 2, ulpdu, ulen);
    memset(out + 2 + ulen, pad_byte, pad);
    uiw_crc32c_put(out + 2 + ulen + pad, crc ? uiw_crc32c(out, 2 + ulen + pad) : 0);
    return 2 + ulen + pad + 4;
}

/* Parse s (whole and byte by byte, which must agree) and return the last
 * record; the stream must end in ERROR with the given cause. */
static void expect_cause(const char *name, const uiw_rx_cfg *cfg, const uint8_t *s, size_t n,
                         unsigned layer, unsigned etype, unsigned ecode, rec *out)
{
    reclist a, b;
    feed_stream(cfg, s, n, FEED_WHOLE, 0, &a);
    feed_stream(cfg, s, n, FEED_BYTES, 0, &b);
    CHECK_EQ(a.bad, 0);
    CHECK_EQ(b.bad, 0);
    CHECK(rl_eq(&a, &b));
    CHECK(a.n > 0);
    if (a.n) {
        const rec *r = &a.r[a.n - 1];
        bool ok = r->kind == UIW_RX_ERROR && r->cause.layer == layer && r->cause.etype == etype &&
                  r->cause.ecode == ecode;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  %s: got kind %u cause %u/%u/0x%02x (%s), want %u/%u/0x%02x\n", name,
                    r->kind, r->cause.layer, r->cause.etype, r->cause.ecode, r->why ? r->why : "-",
                    layer, etype, ecode);
        if (out)
            *out = *r;
    }
    rl_free(&a);
    rl_free(&b);
}

static void expect_ok(const char *name, const uiw_rx_cfg *cfg, const uint8_t *s, size_t n, rec *end)
{
    reclist a;
    feed_stream(cfg, s, n, FEED_WHOLE, 0, &a);
    CHECK_EQ(a.bad, 0);
    CHECK(a.n > 0 && a.r[a.n - 1].kind == UIW_RX_END);
    if (!(a.n > 0 && a.r[a.n - 1].kind == UIW_RX_END))
        fprintf(stderr, "  %s: no END (last kind %u, %s)\n", name, a.n ? a.r[a.n - 1].kind : 0,
                a.n && a.r[a.n - 1].why ? a.r[a.n - 1].why : "-");
    if (end && a.n)
        *end = a.r[a.n - 1];
    rl_free(&a);
}

#define LLP      UIW_LAYER_LLP, UIW_LLP_ET_MPA
#define DDP_U    UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED
#define RDMAP_OP UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP

static size_t enc(const uiw_hdr *h, uint8_t *out)
{
    int n = uiw_hdr_encode(h, out, 80);
    if (n < 0)
        abort();
    return (size_t)n;
}

static void test_malformed(void)
{
    uint8_t u[256], s[512];
    size_t hl, n;
    uint32_t msn[UIW_QN_COUNT] = {0};
    rec r;

    for (int crc = 0; crc < 2; crc++) {
        uiw_rx_cfg cfg = {.crc = crc};
        uiw_hdr send = make_hdr(UIW_OP_SEND, msn, 1);
        uiw_hdr write = make_hdr(UIW_OP_WRITE, msn, 2);
        uiw_hdr rreq = make_hdr(UIW_OP_READ_REQ, msn, 3);
        uiw_hdr term = make_hdr(UIW_OP_TERMINATE, msn, 5);

        /* baseline: a good Send with 10 bytes payload */
        hl = enc(&send, u);
        memset(u + hl, 0xA5, 10);
        n = mk_raw(s, u, hl + 10, crc, 0);
        expect_ok("good send", &cfg, s, n, &r);
        CHECK_EQ(r.crc_checked, crc);

        /* ULPDU_Length too small for the header (and < 2) */
        n = mk_raw(s, u, 10, crc, 0);
        expect_cause("send ulpdu 10", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, &r);
        CHECK_EQ(r.bad_hdr_len, 12);
        CHECK_MEM(r.bad_hdr + 2, u, 10);
        CHECK(r.ulpdu_valid && r.ulpdu_len == 10);
        hl = enc(&write, u);
        n = mk_raw(s, u, 13, crc, 0);
        expect_cause("write ulpdu 13", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, NULL);
        n = mk_raw(s, u, 1, crc, 0);
        expect_cause("ulpdu 1", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, &r);
        CHECK_EQ(r.err_off, 2); /* decided at the length field */
        n = mk_raw(s, u, 0, crc, 0);
        expect_cause("ulpdu 0", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, NULL);

        /* ULPDU_Length above max_ulpdu: reported at the length field */
        {
            uiw_rx_cfg small = cfg;
            small.max_ulpdu = 100;
            hl = enc(&send, u);
            memset(u + hl, 1, 200);
            n = mk_raw(s, u, hl + 82, crc, 0);
            expect_ok("ulpdu == max", &small, s, n, NULL);
            n = mk_raw(s, u, hl + 83, crc, 0);
            expect_cause("ulpdu > max", &small, s, n, LLP, UIW_MPA_EC_MARKER, &r);
            CHECK_EQ(r.err_off, 2);
            CHECK_EQ(r.bad_hdr_len, 2);
        }

        /* DDP version (RFC 5041 §7.2) */
        hl = enc(&send, u);
        u[0] = (uint8_t)((u[0] & ~0x03) | 0x02);
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("untagged DV 2", &cfg, s, n, DDP_U, UIW_DDP_EC_U_INVALID_VERSION, &r);
        CHECK_EQ(r.bad_hdr_len, 20);
        CHECK_MEM(r.bad_hdr + 2, u, 18);
        CHECK_EQ(r.bad_hdr[0], 0);
        CHECK_EQ(r.bad_hdr[1], 18);
        hl = enc(&write, u);
        u[0] = (uint8_t)(u[0] & ~0x03);
        n = mk_raw(s, u, hl + 4, crc, 0);
        expect_cause("tagged DV 0", &cfg, s, n, UIW_LAYER_DDP, UIW_DDP_ET_TAGGED,
                     UIW_DDP_EC_T_INVALID_VERSION, &r);
        CHECK_EQ(r.bad_hdr_len, 16);

        /* RDMAP version (RFC 5040 §7.2) */
        hl = enc(&send, u);
        u[1] = (uint8_t)((u[1] & ~0xC0) | 0x80);
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("RV 2", &cfg, s, n, RDMAP_OP, UIW_RDMAP_EC_INVALID_VERSION, NULL);

        /* reserved opcode */
        hl = enc(&send, u);
        u[1] = (uint8_t)((u[1] & 0xF0) | 0x0C);
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("opcode 0xC", &cfg, s, n, RDMAP_OP, UIW_RDMAP_EC_UNEXPECTED_OPCODE, NULL);

        /* T flag / opcode mismatch, both ways */
        hl = enc(&send, u);
        u[0] |= 0x80;
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("tagged Send", &cfg, s, n, RDMAP_OP, UIW_RDMAP_EC_UNEXPECTED_OPCODE, NULL);
        hl = enc(&send, u);
        u[1] = (uint8_t)((u[1] & 0xF0) | UIW_OP_WRITE); /* QN 0 */
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("untagged Write", &cfg, s, n, RDMAP_OP, UIW_RDMAP_EC_UNEXPECTED_OPCODE, NULL);

        /* untagged QN invalid */
        hl = enc(&send, u);
        put_be32(u + 6, 7);
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("QN 7", &cfg, s, n, DDP_U, UIW_DDP_EC_U_INVALID_QN, NULL);
        put_be32(u + 6, 0xFFFFFFFF);
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("QN ~0", &cfg, s, n, DDP_U, UIW_DDP_EC_U_INVALID_QN, NULL);

        /* Read Request: exact length */
        hl = enc(&rreq, u);
        CHECK_EQ(hl, 18 + 28);
        n = mk_raw(s, u, hl, crc, 0);
        expect_ok("rreq", &cfg, s, n, NULL);
        memset(u + hl, 0, 8);
        n = mk_raw(s, u, hl + 4, crc, 0);
        expect_cause("rreq with payload", &cfg, s, n, DDP_U, UIW_DDP_EC_U_MSG_TOO_LONG, NULL);
        n = mk_raw(s, u, hl + 1, crc, 0);
        expect_cause("rreq +1", &cfg, s, n, DDP_U, UIW_DDP_EC_U_MSG_TOO_LONG, NULL);
        n = mk_raw(s, u, hl - 4, crc, 0);
        expect_cause("rreq short", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, NULL);
        u[0] &= (uint8_t)~0x40; /* no L */
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("rreq without L", &cfg, s, n, DDP_U, UIW_DDP_EC_U_MSG_TOO_LONG, NULL);
        u[0] |= 0x40;
        put_be32(u + 14, 4); /* MO 4 */
        n = mk_raw(s, u, hl, crc, 0);
        expect_cause("rreq MO 4", &cfg, s, n, DDP_U, UIW_DDP_EC_U_INVALID_MO, NULL);

        /* Immediate Data: exactly 8 bytes (RFC 7306 §6.3) */
        {
            uiw_hdr imm = make_hdr(UIW_OP_IMM_DATA, msn, 9);
            hl = enc(&imm, u);
            n = mk_raw(s, u, hl, crc, 0);
            expect_ok("imm", &cfg, s, n, NULL);
            u[hl] = 0;
            n = mk_raw(s, u, hl + 1, crc, 0);
            expect_cause("imm 9 bytes", &cfg, s, n, DDP_U, UIW_DDP_EC_U_MSG_TOO_LONG, NULL);
            n = mk_raw(s, u, hl - 1, crc, 0);
            expect_cause("imm 7 bytes", &cfg, s, n, LLP, UIW_MPA_EC_MARKER, NULL);
        }

        /* Terminate: up to UIW_TERM_MAX_ULPDU, not more */
        hl = enc(&term, u);
        CHECK_EQ(hl, UIW_TERM_MAX_ULPDU);
        n = mk_raw(s, u, hl, crc, 0);
        expect_ok("terminate 70", &cfg, s, n, NULL);
        memset(u + hl, 0, 16);
        n = mk_raw(s, u, hl + 4, crc, 0);
        expect_cause("terminate 74", &cfg, s, n, DDP_U, UIW_DDP_EC_U_MSG_TOO_LONG, &r);
        CHECK_EQ(r.bad_hdr_len, 20);

        /* non-zero pad: accepted and flagged; an error with strict_pad */
        hl = enc(&send, u);
        memset(u + hl, 0x5A, 3);
        n = mk_raw(s, u, hl + 3, crc, 0xEE);
        expect_ok("nonzero pad", &cfg, s, n, &r);
        CHECK(r.pad_nonzero);
        {
            uiw_rx_cfg strict = cfg;
            strict.strict_pad = true;
            expect_cause("nonzero pad strict", &strict, s, n, LLP, UIW_MPA_EC_MARKER, NULL);
            n = mk_raw(s, u, hl + 3, crc, 0);
            expect_ok("zero pad strict", &strict, s, n, &r);
            CHECK(!r.pad_nonzero);
        }

        /* CRC: flipped payload bit, flipped CRC byte */
        hl = enc(&send, u);
        memset(u + hl, 0x11, 33);
        n = mk_raw(s, u, hl + 33, crc, 0);
        s[2 + hl + 20] ^= 0x04;
        if (crc) {
            expect_cause("payload bit", &cfg, s, n, LLP, UIW_MPA_EC_CRC, &r);
            CHECK(r.crc_recv != r.crc_calc);
            CHECK_EQ(r.err_off, n);
        } else {
            expect_ok("payload bit, no CRC", &cfg, s, n, NULL);
        }
        s[2 + hl + 20] ^= 0x04;
        s[n - 2] ^= 0xFF;
        if (crc)
            expect_cause("crc byte", &cfg, s, n, LLP, UIW_MPA_EC_CRC, NULL);
        else
            expect_ok("crc byte, no CRC", &cfg, s, n, NULL);

        /* CRC wins over a header error inside the same FPDU; with a good
         * CRC the header error comes once the CRC is checked */
        if (crc) {
            hl = enc(&send, u);
            u[0] = (uint8_t)(u[0] & ~0x03);
            n = mk_raw(s, u, hl + 0, crc, 0);
            s[n - 1] ^= 1;
            expect_cause("DV 0 + bad CRC", &cfg, s, n, LLP, UIW_MPA_EC_CRC, NULL);
            s[n - 1] ^= 1;
            expect_cause("DV 0 + good CRC", &cfg, s, n, DDP_U, UIW_DDP_EC_U_INVALID_VERSION, &r);
            CHECK_EQ(r.err_off, 2 + 18); /* found at the header */
        }

        /* events stop at the bad FPDU; the good one before still reports */
        {
            size_t n1;
            reclist l;
            hl = enc(&send, u);
            memset(u + hl, 3, 5);
            n1 = mk_raw(s, u, hl + 5, crc, 0);
            put_be32(u + 6, 9);
            n = n1 + mk_raw(s + n1, u, hl + 5, crc, 0);
            memcpy(s + n, s, n1); /* a good one after: never reported */
            n += n1;
            feed_stream(&cfg, s, n, FEED_WHOLE, 0, &l);
            CHECK_EQ(l.bad, 0);
            CHECK_EQ(l.n, 4); /* HDR PAYLOAD END ERROR */
            if (l.n == 4) {
                CHECK_EQ(l.r[2].kind, UIW_RX_END);
                CHECK_EQ(l.r[3].kind, UIW_RX_ERROR);
                CHECK_EQ(l.r[3].fpdu_off, n1);
                CHECK_EQ(l.r[3].cause.ecode, UIW_DDP_EC_U_INVALID_QN);
                CHECK_EQ(l.r[3].resume_off, 2 * n1);
            }
            rl_free(&l);
        }
    }
}

/* Markers: wrong pointers, reserved bits, precedence. */
static void fix_crc_at(uint8_t *s, size_t begin, size_t crc_at)
{
    uiw_crc32c_put(s + crc_at, uiw_crc32c(s + begin, crc_at - begin));
}

static void test_markers(void)
{
    uiw_tx tx;
    uiw_tx_cfg tc = {.crc = true, .markers = true, .max_fpdu = 1460};
    static uint8_t data[2000];
    uiw_hdr h = send_hdr(UIW_OP_SEND, 1);
    struct iovec v = {data, 1000};
    buf b = {0};
    uint32_t fpdu_len;
    rec r;

    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i ^ 0x3C);
    /* one 1000-byte Send: FPDU 0 = [marker@0][len@4]...[marker@512]... */
    CHECK_EQ(uiw_tx_init(&tx, &tc), 0);
    CHECK_EQ(tx_msg(&tx, &h, &v, 1, 1000, &b), 1);
    fpdu_len = (uint32_t)b.n;
    /* markers at 0, 512 and 1024: 4 + (2 + 18 + 1000 + pad 0) + 4 * 2 + 4 */
    CHECK_EQ(fpdu_len, 4 + 1020 + 8 + 4);
    CHECK_EQ(b.p[512 + 3], (512 - 4) & 0xFF);
    CHECK_EQ(b.p[512 + 2], (512 - 4) >> 8);

    for (int crc = 0; crc < 2; crc++) {
        uiw_rx_cfg cfg = {.crc = crc, .markers = true};
        uint8_t *s = malloc(b.n);
        memcpy(s, b.p, b.n);
        expect_ok("marker stream", &cfg, s, b.n, &r);
        CHECK_EQ(r.nmarkers, 3);

        /* low two bits of FPDUPTR are ignored (RFC 5044 §4.2) */
        s[512 + 3] |= 3;
        if (crc)
            fix_crc_at(s, 0, b.n - 4);
        expect_ok("FPDUPTR low bits", &cfg, s, b.n, NULL);
        /* RESERVED is ignored, flagged */
        s[512] = 0x80;
        if (crc)
            fix_crc_at(s, 0, b.n - 4);
        expect_ok("marker reserved", &cfg, s, b.n, &r);
        CHECK(r.marker_rsvd);
        memcpy(s, b.p, b.n);

        /* wrong FPDUPTR inside the FPDU */
        s[512 + 3] ^= 0x10;
        if (crc) {
            /* CRC not fixed: the CRC error wins (RFC 5044 §8 code 3) */
            expect_cause("marker ptr, bad CRC", &cfg, s, b.n, LLP, UIW_MPA_EC_CRC, NULL);
            fix_crc_at(s, 0, b.n - 4);
            expect_cause("marker ptr", &cfg, s, b.n, LLP, UIW_MPA_EC_MARKER, &r);
            CHECK_EQ(r.err_off, 516);
            CHECK_EQ(r.resume_off, b.n);
        } else {
            expect_cause("marker ptr", &cfg, s, b.n, LLP, UIW_MPA_EC_MARKER, &r);
            CHECK_EQ(r.err_off, 516);
        }
        memcpy(s, b.p, b.n);

        /* non-zero FPDUPTR in a marker between FPDUs (the first one) */
        s[3] = 0x10;
        if (crc)
            fix_crc_at(s, 0, b.n - 4);
        expect_cause("between marker", &cfg, s, b.n, LLP, UIW_MPA_EC_MARKER, &r);
        CHECK_EQ(r.err_off, 4);
        CHECK_EQ(r.fpdu_off, 4);
        CHECK(!r.ulpdu_valid);
        free(s);
    }

    /* Resuming after an error with uiw_rx_init_at (a diagnostic tool's
     * move): the events after resume_off are those of the clean stream. */
    for (int crc = 0; crc < 2; crc++) {
        uiw_rx_cfg cfg = {.crc = crc, .markers = true};
        buf mb = {0};
        reclist clean, bad, rest;
        size_t k = 0, first_tail = 0;
        build_mixed(&mb, crc, true);
        feed_stream(&cfg, mb.p, mb.n, FEED_WHOLE, 0, &clean);
        /* corrupt the DDP version of the 4th FPDU (3 records per FPDU at
         * least: find its HDR) */
        for (size_t i = 0, h = 0; i < clean.n; i++)
            if (clean.r[i].kind == UIW_RX_HDR && ++h == 4)
                k = i;
        mb.p[clean.r[k].fpdu_off + 2] ^= 0x03;
        if (crc) { /* keep the CRC right so the DDP error is what shows */
            size_t e = k;
            uint64_t begin = clean.r[k].fpdu_off;
            while (clean.r[e].kind != UIW_RX_END)
                e++;
            if (begin % UIW_MARKER_INTERVAL == UIW_MARKER_LEN)
                begin -= UIW_MARKER_LEN; /* its leading marker */
            fix_crc_at(mb.p, begin, begin + clean.r[e].fpdu_bytes - 4);
        }
        feed_stream(&cfg, mb.p, mb.n, FEED_WHOLE, 0, &bad);
        CHECK(bad.n > 0 && bad.r[bad.n - 1].kind == UIW_RX_ERROR);
        if (bad.n && bad.r[bad.n - 1].kind == UIW_RX_ERROR) {
            const rec *e = &bad.r[bad.n - 1];
            feeder f;
            CHECK_EQ(e->cause.layer, UIW_LAYER_DDP);
            CHECK_EQ(e->fpdu_off, clean.r[k].fpdu_off);
            for (size_t i = 0; i < clean.n; i++)
                if (clean.r[i].kind == UIW_RX_END && clean.r[i].fpdu_off == clean.r[k].fpdu_off)
                    first_tail = i + 1;
            memset(&f, 0, sizeof(f));
            memset(&rest, 0, sizeof(rest));
            f.l = &rest;
            uiw_rx_init_at(&f.rx, &cfg, e->resume_off);
            feed_piece(&f, mb.p + e->resume_off, mb.n - e->resume_off);
            CHECK_EQ(rest.bad, 0);
            CHECK_EQ(rest.n, clean.n - first_tail);
            if (rest.n == clean.n - first_tail) {
                unsigned long diff = 0;
                for (size_t i = 0; i < rest.n; i++)
                    diff += !rec_eq(&rest, i, &clean, first_tail + i);
                CHECK_EQ(diff, 0);
            }
            rl_free(&rest);
        }
        rl_free(&clean);
        rl_free(&bad);
        free(mb.p);
    }

    /* Markers interpreted without being negotiated, and vice versa, fail. */
    {
        uiw_rx_cfg cfg = {.crc = true, .markers = false};
        reclist l;
        feed_stream(&cfg, b.p, b.n, FEED_WHOLE, 0, &l);
        CHECK(l.n > 0 && l.r[l.n - 1].kind == UIW_RX_ERROR);
        rl_free(&l);
    }
    free(b.p);

    /* A marker right after the pad, before the CRC, is covered by the CRC
     * (RFC 5044 §4.4 rule 1), and a marker right after a CRC belongs to the
     * next FPDU (rule 2). Find such streams by sweeping a prefix size. */
    {
        unsigned pre_crc = 0, after_crc = 0;
        for (unsigned pre = 1; pre < 600 && (!pre_crc || !after_crc); pre++) {
            uiw_tx t2;
            uiw_tx_cfg c2 = {.crc = true, .markers = true, .max_fpdu = 9000};
            uiw_hdr h1 = send_hdr(UIW_OP_SEND, 1), h2 = send_hdr(UIW_OP_SEND, 2);
            struct iovec v1 = {data, pre}, v2 = {data, 100};
            uiw_rx_cfg rc = {.crc = true, .markers = true};
            buf bb = {0};
            reclist l;
            uiw_tx_init(&t2, &c2);
            tx_msg(&t2, &h1, &v1, 1, pre, &bb);
            tx_msg(&t2, &h2, &v2, 1, 100, &bb);
            /* marker at 512 */
            if (bb.n > 520) {
                size_t first = bb.n; /* end of FPDU 1 */
                uiw_tx t3;
                buf b1 = {0};
                uiw_tx_init(&t3, &c2);
                tx_msg(&t3, &h1, &v1, 1, pre, &b1);
                first = b1.n;
                free(b1.p);
                if (first == 512 + 4 + 4)
                    pre_crc++; /* ..pad][marker@512][CRC@516] */
                if (first == 512)
                    after_crc++; /* ..CRC][marker@512][len@516] */
                if (first == 512 + 4 + 4 || first == 512) {
                    feed_stream(&rc, bb.p, bb.n, FEED_BYTES, 0, &l);
                    CHECK_EQ(l.bad, 0);
                    CHECK(l.n == 6 && l.r[2].kind == UIW_RX_END && l.r[5].kind == UIW_RX_END);
                    if (l.n == 6) {
                        CHECK(l.r[2].crc_ok && l.r[5].crc_ok);
                        CHECK_EQ(l.r[2].nmarkers, first == 512 ? 1 : 2);
                        CHECK_EQ(l.r[5].nmarkers, first == 512 ? 1 : 0);
                        CHECK_EQ(l.r[3].fpdu_off, first == 512 ? 516 : first);
                    }
                    rl_free(&l);
                }
            }
            free(bb.p);
        }
        CHECK(pre_crc > 0);
        CHECK(after_crc > 0);
    }
}

/* ------------------------------------------------------------------------
 * Transmit segmenter rules
 * ---------------------------------------------------------------------- */

static void test_tx(void)
{
    static uint8_t data[70000];
    static uiw_fpdu f;
    uiw_tx tx;
    uiw_tx_msg m;
    uiw_tx_cfg tc = {.crc = false, .markers = false, .max_fpdu = 1448};
    uint32_t msn[UIW_QN_COUNT] = {0};
    uiw_hdr w = make_hdr(UIW_OP_WRITE, msn, 0), sd = make_hdr(UIW_OP_SEND, msn, 0);
    struct iovec v = {data, 5000};

    /* config validation */
    {
        uiw_tx_cfg bad = tc;
        bad.max_fpdu = 63;
        CHECK_EQ(uiw_tx_init(&tx, &bad), -EINVAL);
        bad.max_fpdu = 64;
        CHECK_EQ(uiw_tx_init(&tx, &bad), 0);
        tx.cfg.max_fpdu = 10;
        CHECK_EQ(uiw_tx_msg_init(&m, &sd, &v, 1, 5000), 0);
        CHECK_EQ(uiw_tx_next(&tx, &m, &f), -EINVAL);
    }

    /* siw sizing (PEERS.md §7): MSS 1448 -> Write 1428, Send 1424 per FPDU */
    CHECK_EQ(uiw_tx_init(&tx, &tc), 0);
    CHECK_EQ(uiw_tx_msg_init(&m, &w, &v, 1, 5000), 0);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK_EQ(f.payload, 1428);
    CHECK_EQ(f.bytes, 1448);
    CHECK(!f.last);
    CHECK_EQ(f.ulpdu_len, 14 + 1428);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK_EQ(f.payload, 1428);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK(f.last);
    CHECK_EQ(f.payload, 5000 - 3 * 1428);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 0);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 0);
    CHECK_EQ(uiw_tx_msg_init(&m, &sd, &v, 1, 5000), 0);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK_EQ(f.payload, 1424);
    CHECK_EQ(f.bytes, 1448);

    /* odd max_fpdu is rounded down to a multiple of 4 */
    tx.cfg.max_fpdu = 1451;
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK_EQ(f.bytes, 1448);

    /* zero-length message: one FPDU with L; header-only: one FPDU */
    CHECK_EQ(uiw_tx_msg_init(&m, &w, NULL, 0, 0), 0);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
    CHECK(f.last);
    CHECK_EQ(f.payload, 0);
    CHECK_EQ(f.ulpdu_len, 14);
    CHECK_EQ(f.bytes, 2 + 14 + 0 + 4);
    CHECK_EQ(uiw_tx_next(&tx, &m, &f), 0);
    {
        uiw_hdr a = make_hdr(UIW_OP_ATOMIC_REQ, msn, 1);
        tx.cfg.max_fpdu = 64;
        CHECK_EQ(uiw_tx_msg_init(&m, &a, NULL, 0, 0), 0);
        CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
        CHECK(f.last);
        CHECK_EQ(f.ulpdu_len, 18 + 52);
        CHECK_EQ(f.bytes, 2 + 70 + 0 + 4); /* above max_fpdu 64: still one FPDU */
        CHECK_EQ(uiw_tx_next(&tx, &m, &f), 0);
        tx.cfg.max_fpdu = 1448;
    }

    /* message validation */
    {
        struct iovec two[2] = {{data, 10}, {NULL, 5}};
        struct iovec huge = {data, (size_t)1 << 32};
        uiw_hdr x = sd;
        CHECK_EQ(uiw_tx_msg_init(&m, &sd, &v, 1, 4999), -EINVAL);
        CHECK_EQ(uiw_tx_msg_init(&m, &sd, two, 2, 15), -EINVAL);
        CHECK_EQ(uiw_tx_msg_init(&m, &sd, &v, -1, 0), -EINVAL);
        CHECK_EQ(uiw_tx_msg_init(&m, &sd, &huge, 1, (uint64_t)1 << 32), -EINVAL);
        x.tagged = true;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x = make_hdr(UIW_OP_READ_REQ, msn, 1);
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x = sd;
        x.opcode = 0xC;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, NULL, 0, 0), -EINVAL);
        x = w;
        x.to = UINT64_MAX - 10;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x.to = UINT64_MAX - 4999;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), 0);
        x = sd;
        x.mo = UINT32_MAX - 100;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x = sd;
        x.qn = UIW_QN_READ_REQ; /* what the encoder refuses */
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x = sd;
        x.ddp_version = 0;
        CHECK_EQ(uiw_tx_msg_init(&m, &x, &v, 1, 5000), -EINVAL);
        x = make_hdr(UIW_OP_READ_REQ, msn, 1);
        x.last = false; /* the segmenter sets L on a header-only message */
        CHECK_EQ(uiw_tx_msg_init(&m, &x, NULL, 0, 0), 0);
        CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
        CHECK(f.last);
        CHECK_EQ(f.ulpdu_len, 18 + 28);
    }

    /* Many tiny SGEs: the iovec budget ends FPDUs early, payload stays a
     * multiple of 4, nothing overflows, the data survives. */
    for (int markers = 0; markers < 2; markers++) {
        static struct iovec many[3000];
        static uint8_t scattered[3000 * 6], flat[3000 * 6];
        uiw_tx_cfg big = {.crc = true, .markers = markers, .max_fpdu = 65535};
        uiw_rx_cfg rc = {.crc = true, .markers = markers};
        buf b = {0};
        xlist x = {0};
        unsigned long txbad = 0;
        size_t total = 0, nseg;
        reclist l;
        int nf;
        /* non-contiguous pieces (a 1-byte gap each), flat copy expected */
        for (int i = 0; i < 3000; i++) {
            many[i].iov_base = scattered + 6 * i;
            many[i].iov_len = 1 + (size_t)(i % 5);
            for (size_t j = 0; j < many[i].iov_len; j++)
                scattered[6 * i + j] = flat[total + j] = (uint8_t)(i * 7 + j);
            total += many[i].iov_len;
        }
        CHECK_EQ(uiw_tx_init(&tx, &big), 0);
        nf = tx_record(&tx, &w, many, 3000, total, flat, &b, &x, &txbad);
        CHECK(nf > (int)(3000 / UIW_TX_MAX_IOV));
        CHECK_EQ(txbad, 0);
        for (size_t i = 0; i + 1 < x.n; i++)
            CHECK_EQ(x.s[i].payload % 4, 0);
        feed_stream(&rc, b.p, b.n, FEED_RANDOM, 0, &l);
        CHECK_EQ(l.bad, 0);
        CHECK_EQ(verify(&l, &x, true, &nseg), 0);
        rl_free(&l);
        free(x.s);
        free(b.p);
    }

    /* Max-size FPDUs with markers (128 markers in one FPDU) */
    {
        uiw_tx_cfg big = {.crc = true, .markers = true, .max_fpdu = 65535};
        struct iovec one = {data, 65537};
        CHECK_EQ(uiw_tx_init(&tx, &big), 0);
        CHECK_EQ(uiw_tx_msg_init(&m, &w, &one, 1, 65537), 0);
        CHECK_EQ(uiw_tx_next(&tx, &m, &f), 1);
        CHECK_EQ(f.bytes, 65532);
        CHECK_EQ(f.nmarkers, 128);
        CHECK(f.iovcnt <= UIW_TX_MAX_IOV);
        CHECK_EQ(f.payload % 4, 0);
    }
}

/* uiw_tx_whole lays out exactly the bytes uiw_tx_next describes, for every
 * opcode that has a single-FPDU form, with and without CRC, payloads of 0
 * to 256 bytes in up to 3 pieces, at varying stream offsets, and advances
 * the stream and the message the same way; it declines (0, nothing
 * changed) with markers, when more than one FPDU is needed, when the room
 * given is too small, and for a started message. */
static void test_tx_whole(void)
{
    static const unsigned ops[] = {
        UIW_OP_WRITE,    UIW_OP_READ_RESP,  UIW_OP_SEND,        UIW_OP_SEND_SE,  UIW_OP_SEND_INV,
        UIW_OP_READ_REQ, UIW_OP_ATOMIC_REQ, UIW_OP_ATOMIC_RESP, UIW_OP_IMM_DATA, UIW_OP_TERMINATE};
    static uiw_fpdu f;
    uint8_t src[256], out[600];
    unsigned checked = 0;

    for (unsigned k = 0; k < 256; k++)
        src[k] = (uint8_t)(k * 13 + 5);
    for (int crc = 0; crc <= 1; crc++) {
        for (unsigned oi = 0; oi < sizeof(ops) / sizeof(ops[0]); oi++) {
            for (unsigned len = 0; len <= 256; len += (len < 8 ? 1 : 29)) {
                uint32_t msn[UIW_QN_COUNT] = {0};
                uiw_hdr h = make_hdr(ops[oi], msn, len);
                bool hdr_only = uiw_op_hdr_only(ops[oi]) || ops[oi] == UIW_OP_TERMINATE;
                uint32_t total = hdr_only ? 0 : len;
                struct iovec sgl[3];
                int nsge = 0;
                uiw_tx_cfg cfg = {.crc = crc, .max_fpdu = 1460};
                uiw_tx a, b;
                uiw_tx_msg ma, mb;
                buf ref = {0};
                int r, n;

                if (hdr_only && len)
                    continue;
                /* up to three pieces (one empty) */
                if (total) {
                    unsigned c1 = total / 3;
                    sgl[nsge++] = (struct iovec){src, c1};
                    sgl[nsge++] = (struct iovec){src + c1, 0};
                    sgl[nsge++] = (struct iovec){src + c1, total - c1};
                }
                CHECK_EQ(uiw_tx_init(&a, &cfg), 0);
                CHECK_EQ(uiw_tx_init(&b, &cfg), 0);
                a.stream_off = b.stream_off = 1000 + len; /* no markers: any offset */
                if (uiw_tx_msg_init(&ma, &h, sgl, nsge, total) != 0)
                    continue; /* opcode without such a message */
                CHECK_EQ(uiw_tx_msg_init(&mb, &h, sgl, nsge, total), 0);
                n = 0;
                while ((r = uiw_tx_next(&a, &ma, &f)) == 1) {
                    flatten(&f, &ref);
                    n++;
                }
                CHECK_EQ(r, 0);
                CHECK_EQ(n, 1);
                r = uiw_tx_whole(&b, &mb, out, sizeof(out));
                CHECK_EQ((size_t)r, ref.n);
                if (r > 0 && (size_t)r == ref.n)
                    CHECK_MEM(out, ref.p, ref.n);
                CHECK_EQ(b.stream_off, a.stream_off);
                CHECK(mb.started);
                CHECK_EQ(mb.done, total);
                CHECK_EQ(uiw_tx_next(&b, &mb, &f), 0); /* nothing left */
                /* too little room: declined, nothing changed */
                if (r > 0) {
                    uiw_tx_msg mc;
                    uint64_t off = b.stream_off;
                    CHECK_EQ(uiw_tx_msg_init(&mc, &h, sgl, nsge, total), 0);
                    CHECK_EQ(uiw_tx_whole(&b, &mc, out, (size_t)r - 1), 0);
                    CHECK_EQ(b.stream_off, off);
                    CHECK(!mc.started);
                    /* ... and started: declined */
                    CHECK_EQ(uiw_tx_next(&b, &mc, &f), 1);
                    CHECK_EQ(uiw_tx_whole(&b, &mc, out, sizeof(out)), 0);
                }
                free(ref.p);
                checked++;
            }
        }
    }
    CHECK(checked > 100);

    /* markers, and a message needing two FPDUs: declined */
    {
        uint32_t msn[UIW_QN_COUNT] = {0};
        uiw_hdr h = make_hdr(UIW_OP_SEND, msn, 1);
        struct iovec one = {src, 200};
        uiw_tx_cfg mk = {.crc = true, .markers = true, .max_fpdu = 1460};
        uiw_tx_cfg small = {.crc = true, .max_fpdu = 128};
        uiw_tx t;
        uiw_tx_msg m;

        CHECK_EQ(uiw_tx_init(&t, &mk), 0);
        CHECK_EQ(uiw_tx_msg_init(&m, &h, &one, 1, 200), 0);
        CHECK_EQ(uiw_tx_whole(&t, &m, out, sizeof(out)), 0);
        CHECK_EQ(t.stream_off, 0);
        CHECK_EQ(uiw_tx_init(&t, &small), 0);
        CHECK_EQ(uiw_tx_msg_init(&m, &h, &one, 1, 200), 0);
        CHECK_EQ(uiw_tx_whole(&t, &m, out, sizeof(out)), 0);
        CHECK(!m.started);
        CHECK_EQ(uiw_tx_next(&t, &m, &f), 1); /* the general path cuts it */
        CHECK(!f.last);
    }
    printf("  uiw_tx_whole: %u messages byte-identical to uiw_tx_next\n", checked);
}

/* ------------------------------------------------------------------------
 * Whole-FPDU fast path against the slow path
 * ---------------------------------------------------------------------- */

/* FPDU start offsets of a markerless stream (-1 terminated in out). */
static size_t fpdu_starts(const uint8_t *s, size_t n, size_t *out, size_t cap)
{
    size_t k = 0, at = 0;
    while (at + 2 <= n && k + 1 < cap) {
        out[k++] = at;
        at += uiw_fpdu_len(get_be16(s + at));
    }
    out[k] = n;
    return k;
}

/* Re-seal the FPDU at [b, e): its CRC over the bytes as they are now. */
static void reseal(uint8_t *s, size_t b, size_t e)
{
    if (e >= b + 8)
        uiw_crc32c_put(s + e - 4, uiw_crc32c(s + b, e - b - 4));
}

static void test_fast_path(void)
{
    static const uint16_t maxes[] = {0, 64, 100};
    unsigned long before = fast_fpdus, streams = fast_streams;

    for (int crc = 0; crc < 2; crc++) {
        uiw_rx_cfg rc = {.crc = crc};
        buf b = {0};
        size_t st[512], nf;
        uint8_t *m;

        build_mixed(&b, crc, false);
        /* header-only and zero-payload FPDUs at the end: an RTR-like
         * zero-length Write and Send */
        {
            uiw_tx tx;
            uiw_tx_cfg tc = {.crc = crc, .max_fpdu = 200};
            uint32_t msn[UIW_QN_COUNT] = {0};
            uiw_hdr w = make_hdr(UIW_OP_WRITE, msn, 1), sd = make_hdr(UIW_OP_SEND, msn, 2);
            uiw_tx_init(&tx, &tc);
            tx_msg(&tx, &w, NULL, 0, 0, &b);
            tx_msg(&tx, &sd, NULL, 0, 0, &b);
        }
        nf = fpdu_starts(b.p, b.n, st, 512);
        CHECK(nf > 10);
        m = malloc(b.n);
        if (!m)
            abort();
        for (size_t mi = 0; mi < sizeof(maxes) / sizeof(maxes[0]); mi++)
            for (int strict = 0; strict < 2; strict++) {
                reclist l;
                rc.max_ulpdu = maxes[mi];
                rc.strict_pad = strict;
                /* clean; then non-zero pad in every FPDU (siw) */
                for (int padv = 0; padv < 2; padv++) {
                    memcpy(m, b.p, b.n);
                    for (size_t i = 0; padv && i < nf; i++) {
                        unsigned ul = get_be16(m + st[i]);
                        memset(m + st[i] + 2 + ul, 0xA5, uiw_mpa_pad(ul));
                        reseal(m, st[i], st[i + 1]);
                    }
                    feed_stream(&rc, m, b.n, FEED_WHOLE, 0, &l);
                    CHECK_EQ(l.bad, 0);
                    rl_free(&l);
                    feed_stream(&rc, m, b.n, FEED_RANDOM, 0, &l);
                    CHECK_EQ(l.bad, 0);
                    rl_free(&l);
                    /* every truncation and every two-piece split */
                    for (size_t cut = 0; cut <= b.n; cut++) {
                        feed_stream(&rc, m, cut, FEED_WHOLE, 0, &l); /* may end mid-FPDU */
                        rl_free(&l);
                        feed_stream(&rc, m, b.n, FEED_SPLIT, cut, &l);
                        CHECK_EQ(l.bad, 0);
                        rl_free(&l);
                    }
                }
                /* one corrupted byte at every position, with the CRC left
                 * alone (a CRC error) or re-sealed (the header, length and
                 * pad checks behind it) */
                for (size_t at = 0; at < b.n; at++)
                    for (int sealed = 0; sealed < 1 + crc; sealed++) {
                        size_t f = 0;
                        uint8_t x = (uint8_t)(1u << (rnd() % 8));
                        memcpy(m, b.p, b.n);
                        if (rnd() % 4 == 0)
                            x = (uint8_t)(1 + rnd() % 255);
                        m[at] ^= x;
                        while (f + 1 < nf && st[f + 1] <= at)
                            f++;
                        if (sealed)
                            reseal(m, st[f], st[f + 1]);
                        /* a corrupted length may leave the stream
                         * mid-FPDU ("not idle"); differences are counted
                         * in fast_diff */
                        feed_stream(&rc, m, b.n, FEED_WHOLE, 0, &l);
                        CHECK(!l.bad || !strcmp(l.first_bad, "not idle after a complete stream"));
                        rl_free(&l);
                        feed_stream(&rc, m, b.n, (at & 1) ? FEED_RANDOM : FEED_SPLIT, at, &l);
                        CHECK(!l.bad || !strcmp(l.first_bad, "not idle after a complete stream"));
                        rl_free(&l);
                    }
            }
        free(m);
        free(b.p);
    }
    CHECK(fast_fpdus - before > 1000);
    printf("fast path: %lu streams compared, %lu FPDU events, %lu rewinds\n",
           fast_streams - streams, fast_fpdus - before, fast_rewinds);
}

int main(void)
{
    test_rfc_vectors();
    test_siw_vector();
    test_tx();
    test_malformed();
    test_markers();
    test_splits();
    test_roundtrip();
    test_tx_whole();
    test_fast_path();
    /* every feed_stream above compared the fast path with the slow one */
    CHECK_EQ(fast_diff, 0);
    CHECK(fast_rewinds > 100);
    printf("fast path overall: %lu streams, %lu FPDU events, %lu rewinds, %lu differences\n",
           fast_streams, fast_fpdus, fast_rewinds, fast_diff);
    TEST_MAIN_END();
}
