/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the FPDU receive parser (src/wire/rx.c).
 *
 * Input: one configuration byte, then the post-MPA byte stream.
 *   bit 0     CRC                      (as scripts/fuzz-seeds.sh writes it)
 *   bit 1     markers
 *   bit 2     strict_pad
 *   bits 3-4  pieces: 0 whole, 1 single bytes, 2 pseudo-random sizes,
 *             3 zero-copy style (payload_room-sized recvs into a buffer)
 *   bits 5-7  max_ulpdu: 0 (65535), 64, 100, 128, 512, 1460, 9000, 65535
 * Every piece is copied into an exact-size heap buffer, so ASan sees any
 * read outside the input. Invariants are checked with __builtin_trap().
 *
 * Each input runs three times: the slow path (HDR / PAYLOAD / END), the
 * whole-FPDU fast path (cfg.fpdu_events: UIW_RX_FPDU), and the fast path
 * with uiw_rx_fpdu_rewind after every other FPDU event (the engine's
 * receiver-not-ready hold). The three event sequences, normalized (an FPDU
 * event as its HDR, PAYLOAD, END; contiguous payload slices merged, their
 * bytes compared by CRC32C), must be identical field by field.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "uiwarp/wire.h"
#include "wire_testutil.h"

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

/* one normalized event */
typedef struct rec {
    uint8_t kind;
    uint64_t fpdu_off, data_off, err_off, resume_off;
    uint32_t payload_len, off, len, data_crc, crc_recv, crc_calc, fpdu_bytes;
    uint16_t ulpdu_len, hdr_len, nmarkers;
    bool crc_checked, crc_ok, pad_nonzero, marker_rsvd, ulpdu_valid;
    uiw_term_cause cause;
    const char *why;
    uint8_t bad_hdr[UIW_TERM_MAX_DDP_HDR], bad_hdr_len;
    uiw_hdr hdr;
} rec;

typedef struct rlog {
    rec *r;
    size_t n, cap;
} rlog;

typedef struct fz {
    uiw_rx rx;
    rlog *log;
    bool rewind;        /* rewind every other FPDU event */
    unsigned fpdu_seen; /* FPDU events so far */
    uint32_t max_ulpdu;
    bool in_seg;
    uint32_t seg_payload, seg_done;
    bool dead;
    uiw_term_cause cause;
    uint64_t fed; /* stream bytes consumed */
} fz;

static rec *log_push(rlog *l)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->r = realloc(l->r, l->cap * sizeof(rec));
        REQUIRE(l->r != NULL);
    }
    memset(&l->r[l->n], 0, sizeof(rec));
    return &l->r[l->n++];
}

static void log_event(rlog *l, const uiw_rx_event *ev)
{
    rec *r;

    if (ev->kind == UIW_RX_PAYLOAD && l->n && l->r[l->n - 1].kind == UIW_RX_PAYLOAD &&
        l->r[l->n - 1].off + l->r[l->n - 1].len == ev->offset) {
        r = &l->r[l->n - 1];
        r->len += ev->len;
        r->data_crc = uiw_crc32c_update(r->data_crc, ev->data, ev->len);
        return;
    }
    r = log_push(l);
    r->kind = ev->kind;
    switch (ev->kind) {
    case UIW_RX_HDR:
        r->fpdu_off = ev->fpdu_off;
        r->ulpdu_len = ev->ulpdu_len;
        r->hdr_len = ev->hdr_len;
        r->payload_len = ev->payload_len;
        r->nmarkers = ev->nmarkers;
        r->hdr = *ev->hdr;
        break;
    case UIW_RX_PAYLOAD:
        r->off = ev->offset;
        r->len = ev->len;
        r->data_off = ev->data_off;
        r->data_crc = uiw_crc32c_update(UIW_CRC32C_INIT, ev->data, ev->len);
        break;
    case UIW_RX_END:
        r->fpdu_off = ev->fpdu_off;
        r->ulpdu_len = ev->ulpdu_len;
        r->hdr_len = ev->hdr_len;
        r->payload_len = ev->payload_len;
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
        r->fpdu_off = ev->fpdu_off;
        r->ulpdu_len = ev->ulpdu_len;
        r->cause = ev->cause;
        r->why = ev->why;
        r->ulpdu_valid = ev->ulpdu_valid;
        r->err_off = ev->err_off;
        r->resume_off = ev->resume_off;
        r->crc_checked = ev->crc_checked;
        r->crc_ok = ev->crc_ok;
        r->crc_recv = ev->crc_recv;
        r->crc_calc = ev->crc_calc;
        r->fpdu_bytes = ev->fpdu_bytes;
        r->nmarkers = ev->nmarkers;
        REQUIRE(ev->bad_hdr_len <= UIW_TERM_MAX_DDP_HDR);
        r->bad_hdr_len = ev->bad_hdr_len;
        memcpy(r->bad_hdr, ev->bad_hdr, ev->bad_hdr_len);
        break;
    default:
        break;
    }
}

static bool rec_eq(const rec *x, const rec *y)
{
    if (x->kind == UIW_RX_HDR && (y->kind != UIW_RX_HDR || !hdr_eq(&x->hdr, &y->hdr)))
        return false;
    /* everything else was zeroed, then set field by field */
    return x->kind == y->kind && x->fpdu_off == y->fpdu_off && x->data_off == y->data_off &&
           x->err_off == y->err_off && x->resume_off == y->resume_off &&
           x->payload_len == y->payload_len && x->off == y->off && x->len == y->len &&
           x->data_crc == y->data_crc && x->crc_recv == y->crc_recv && x->crc_calc == y->crc_calc &&
           x->fpdu_bytes == y->fpdu_bytes && x->ulpdu_len == y->ulpdu_len &&
           x->hdr_len == y->hdr_len && x->nmarkers == y->nmarkers &&
           x->crc_checked == y->crc_checked && x->crc_ok == y->crc_ok &&
           x->pad_nonzero == y->pad_nonzero && x->marker_rsvd == y->marker_rsvd &&
           x->ulpdu_valid == y->ulpdu_valid && x->cause.layer == y->cause.layer &&
           x->cause.etype == y->cause.etype && x->cause.ecode == y->cause.ecode &&
           x->why == y->why && x->bad_hdr_len == y->bad_hdr_len &&
           !memcmp(x->bad_hdr, y->bad_hdr, x->bad_hdr_len);
}

static void check_event(fz *f, const uiw_rx_event *ev, const uint8_t *in, size_t len)
{
    log_event(f->log, ev);
    switch (ev->kind) {
    case UIW_RX_HDR:
        REQUIRE(!f->in_seg);
        REQUIRE(ev->hdr != NULL);
        REQUIRE((uint32_t)ev->hdr_len + ev->payload_len == ev->ulpdu_len);
        REQUIRE(ev->ulpdu_len <= f->max_ulpdu);
        REQUIRE(ev->ulpdu_len >= 2);
        f->in_seg = true;
        f->seg_payload = ev->payload_len;
        f->seg_done = 0;
        break;
    case UIW_RX_PAYLOAD:
        REQUIRE(f->in_seg);
        REQUIRE(ev->len > 0);
        REQUIRE(ev->data >= in && ev->data + ev->len <= in + len);
        REQUIRE(ev->offset == f->seg_done);
        REQUIRE((uint64_t)ev->offset + ev->len <= f->seg_payload);
        if (f->rx.cfg.markers) {
            uint64_t first = ev->data_off, last = ev->data_off + ev->len - 1;
            /* no marker byte inside [first, last] */
            REQUIRE(first % UIW_MARKER_INTERVAL >= UIW_MARKER_LEN);
            REQUIRE(last / UIW_MARKER_INTERVAL == first / UIW_MARKER_INTERVAL);
        }
        f->seg_done += ev->len;
        break;
    case UIW_RX_END:
        REQUIRE(f->in_seg);
        REQUIRE(f->seg_done == f->seg_payload);
        REQUIRE(ev->payload_len == f->seg_payload);
        REQUIRE(ev->crc_ok);
        REQUIRE(ev->crc_checked == f->rx.cfg.crc);
        REQUIRE(!ev->pad_nonzero || !f->rx.cfg.strict_pad);
        REQUIRE(ev->fpdu_bytes % 4 == 0);
        REQUIRE(ev->fpdu_bytes >= uiw_fpdu_len(ev->ulpdu_len));
        f->in_seg = false;
        REQUIRE(uiw_rx_idle(&f->rx));
        break;
    case UIW_RX_ERROR:
        REQUIRE(ev->why != NULL);
        REQUIRE(ev->bad_hdr_len <= UIW_TERM_MAX_DDP_HDR);
        REQUIRE(ev->cause.layer <= UIW_LAYER_LLP);
        f->dead = true;
        f->cause = ev->cause;
        break;
    default:
        REQUIRE(0);
    }
}

/* A UIW_RX_FPDU event: checked as its HDR, PAYLOAD and END would be, or
 * (f->rewind, every other one) as its HDR, then rewound. Returns the bytes
 * given back. */
static size_t fpdu_event(fz *f, const uiw_rx_event *ev, const uint8_t *in, size_t len)
{
    uiw_rx_event e;
    size_t back;

    REQUIRE(f->rx.cfg.fpdu_events && !f->rx.cfg.markers);
    REQUIRE(!ev->why && !ev->ulpdu_valid && !ev->bad_hdr_len && !ev->err_off && !ev->resume_off &&
            !ev->cause.layer && !ev->cause.etype && !ev->cause.ecode);
    REQUIRE(ev->len == ev->payload_len && ev->offset == 0);
    REQUIRE(ev->data >= in && ev->data + ev->len <= in + len);
    REQUIRE(ev->data_off == ev->fpdu_off + UIW_MPA_LEN_FIELD + ev->hdr_len);
    REQUIRE(ev->fpdu_bytes == uiw_fpdu_len(ev->ulpdu_len));
    REQUIRE(ev->fpdu_off + ev->fpdu_bytes == f->rx.stream_off);
    fpdu_as_event(ev, UIW_RX_HDR, &e);
    check_event(f, &e, in, len);
    if (f->rewind && (f->fpdu_seen++ & 1)) {
        back = uiw_rx_fpdu_rewind(&f->rx);
        REQUIRE(back == ev->fpdu_bytes - UIW_MPA_LEN_FIELD - ev->hdr_len);
        REQUIRE(uiw_rx_fpdu_rewind(&f->rx) == 0);
        REQUIRE(f->rx.stream_off == f->fed - back);
        f->fed -= back;
        return back;
    }
    if (ev->payload_len) {
        fpdu_as_event(ev, UIW_RX_PAYLOAD, &e);
        check_event(f, &e, in, len);
    }
    fpdu_as_event(ev, UIW_RX_END, &e);
    check_event(f, &e, in, len);
    return 0;
}

static void feed(fz *f, const uint8_t *src, size_t n)
{
    uint8_t *in = malloc(n ? n : 1);
    size_t at = 0;
    uiw_rx_event ev;

    REQUIRE(in != NULL);
    memcpy(in, src, n);
    while (!f->dead) {
        size_t used = uiw_rx_feed(&f->rx, in + at, n - at, &ev);
        REQUIRE(used <= n - at);
        at += used;
        f->fed += used;
        REQUIRE(f->rx.stream_off == f->fed);
        if (ev.kind == UIW_RX_NONE) {
            REQUIRE(at == n);
            break;
        }
        REQUIRE(used > 0 || ev.kind == UIW_RX_ERROR);
        if (ev.kind == UIW_RX_FPDU) {
            at -= fpdu_event(f, &ev, in, n);
        } else {
            check_event(f, &ev, in, n);
            REQUIRE(uiw_rx_fpdu_rewind(&f->rx) == 0); /* only right after FPDU */
        }
        if (at == n && ev.kind != UIW_RX_ERROR)
            break;
    }
    if (f->dead) {
        /* sticky */
        size_t used = uiw_rx_feed(&f->rx, in, n, &ev);
        REQUIRE(used == 0 && ev.kind == UIW_RX_ERROR);
        REQUIRE(ev.cause.layer == f->cause.layer && ev.cause.etype == f->cause.etype &&
                ev.cause.ecode == f->cause.ecode);
        REQUIRE(uiw_rx_payload_room(&f->rx, NULL) == 0);
        REQUIRE(!uiw_rx_idle(&f->rx));
    }
    free(in);
}

/* One run over the input: pass 0 the slow path, 1 the fast path, 2 the
 * fast path with rewinds. */
static void run(const uint8_t *data, size_t size, uint8_t c, int pass, rlog *log)
{
    static const uint16_t maxes[8] = {0, 64, 100, 128, 512, 1460, 9000, 65535};
    fz f;
    uiw_rx_cfg cfg;
    uint64_t seed;
    size_t at = 0;

    memset(&cfg, 0, sizeof(cfg));
    cfg.crc = c & 1;
    cfg.markers = (c >> 1) & 1;
    cfg.strict_pad = (c >> 2) & 1;
    cfg.max_ulpdu = maxes[c >> 5];
    cfg.fpdu_events = pass > 0;
    memset(&f, 0, sizeof(f));
    f.log = log;
    f.rewind = pass == 2;
    f.max_ulpdu = cfg.max_ulpdu ? cfg.max_ulpdu : 65535;
    uiw_rx_init(&f.rx, &cfg);
    REQUIRE(uiw_rx_idle(&f.rx));
    seed = 0x9E3779B97F4A7C15ull ^ size;

    switch ((c >> 3) & 3) {
    case 0:
        feed(&f, data, size);
        break;
    case 1:
        for (; at < size && !f.dead; at++)
            feed(&f, data + at, 1);
        break;
    case 2:
        while (at < size && !f.dead) {
            size_t k;
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            k = 1 + (size_t)(seed >> 40) % ((seed & 1) ? 7 : 1500);
            if (k > size - at)
                k = size - at;
            feed(&f, data + at, k);
            at += k;
        }
        break;
    case 3:
        while (at < size && !f.dead) {
            uint32_t off = 0;
            uint32_t room = uiw_rx_payload_room(&f.rx, &off);
            if (room) {
                /* "recv" straight into the destination, then feed it */
                static uint8_t dest[65536];
                uiw_rx_event ev;
                size_t k = room < size - at ? room : size - at;
                size_t used;
                REQUIRE(off == f.seg_done && (uint64_t)off + room <= f.seg_payload);
                memcpy(dest + off, data + at, k);
                used = uiw_rx_feed(&f.rx, dest + off, k, &ev);
                REQUIRE(used == k && ev.kind == UIW_RX_PAYLOAD && ev.data == dest + off &&
                        ev.len == k && ev.offset == off);
                f.fed += used;
                check_event(&f, &ev, dest + off, k);
                at += k;
            } else {
                size_t k = 1 + (size_t)(data[at] % 29);
                if (k > size - at)
                    k = size - at;
                feed(&f, data + at, k);
                at += k;
            }
        }
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rlog logs[3];
    uint8_t c;

    if (size < 1)
        return 0;
    c = data[0];
    memset(logs, 0, sizeof(logs));
    for (int pass = 0; pass < 3; pass++)
        run(data + 1, size - 1, c, pass, &logs[pass]);
    for (int pass = 1; pass < 3; pass++) {
        REQUIRE(logs[pass].n == logs[0].n);
        for (size_t i = 0; i < logs[0].n; i++)
            REQUIRE(rec_eq(&logs[0].r[i], &logs[pass].r[i]));
    }
    for (int pass = 0; pass < 3; pass++)
        free(logs[pass].r);
    return 0;
}
