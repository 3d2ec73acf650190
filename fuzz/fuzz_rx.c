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
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "uiwarp/wire.h"

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c))                                                                                  \
            __builtin_trap();                                                                      \
    } while (0)

typedef struct fz {
    uiw_rx rx;
    uint32_t max_ulpdu;
    bool in_seg;
    uint32_t seg_payload, seg_done;
    bool dead;
    uiw_term_cause cause;
    uint64_t fed; /* stream bytes consumed */
} fz;

static void check_event(fz *f, const uiw_rx_event *ev, const uint8_t *in, size_t len)
{
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
        check_event(f, &ev, in, n);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint16_t maxes[8] = {0, 64, 100, 128, 512, 1460, 9000, 65535};
    fz f;
    uiw_rx_cfg cfg;
    uint8_t c;
    uint64_t seed;
    size_t at = 0;

    if (size < 1)
        return 0;
    c = data[0];
    data++;
    size--;
    memset(&cfg, 0, sizeof(cfg));
    cfg.crc = c & 1;
    cfg.markers = (c >> 1) & 1;
    cfg.strict_pad = (c >> 2) & 1;
    cfg.max_ulpdu = maxes[c >> 5];
    memset(&f, 0, sizeof(f));
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
    return 0;
}
