/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A raw iWARP peer on the wire core, after the MPA exchange: it writes
 * FPDUs built by the transmit segmenter (uiw_tx) and parses the other
 * side's stream with the receive parser (uiw_rx), message by message.
 * Used by the data path tests (dp_test.h: the other end of a socketpair
 * attached to an engine QP) and the RNIC personality peers (tests/rnic,
 * over TCP), which watch every FPDU through on_fpdu. Wire core and sockets
 * only: no engine internals.
 */
#ifndef UIWARP_RAW_PEER_H
#define UIWARP_RAW_PEER_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "uiwarp/wire.h"
#include "engine/eng_test.h"

/* ------------------------------------------------------------------------
 * The raw peer
 * ---------------------------------------------------------------------- */

struct dp_raw {
    int fd;
    uiw_tx tx;
    uiw_rx rx;
    uint32_t msn[UIW_QN_COUNT];
    uint8_t buf[1 << 16];
    size_t len, off;
    /* the message being collected by dp_raw_recv */
    uint8_t *pay;
    size_t pay_len, pay_cap;
    bool eof;
    /* optional: sees every UIW_RX_HDR and UIW_RX_END event of dp_raw_recv
     * (per-FPDU rules of a peer that checks what it receives) */
    void (*on_fpdu)(void *arg, const uiw_rx_event *ev);
    void *on_fpdu_arg;
};

/* n bytes at p all equal v */
static inline bool dp_all(const uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return false;
    return true;
}

static inline void dp_raw_init(struct dp_raw *p, int fd, bool crc, bool markers, unsigned max_fpdu)
{
    uiw_tx_cfg tc;
    uiw_rx_cfg rc;

    memset(p, 0, sizeof(*p));
    p->fd = fd;
    memset(&tc, 0, sizeof(tc));
    tc.crc = crc;
    tc.markers = markers;
    tc.max_fpdu = (uint16_t)(max_fpdu ? max_fpdu : 65528);
    uiw_tx_init(&p->tx, &tc);
    memset(&rc, 0, sizeof(rc));
    rc.crc = crc;
    rc.markers = markers;
    uiw_rx_init(&p->rx, &rc);
}

static inline void dp_raw_fini(struct dp_raw *p)
{
    free(p->pay);
    p->pay = NULL;
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
}

static inline int dp_write_all(int fd, const void *buf, size_t n)
{
    const uint8_t *b = buf;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                struct pollfd pf = {.fd = fd, .events = POLLOUT};
                poll(&pf, 1, 100);
                continue;
            }
            return -errno;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Segment a message (hdr + payload) into FPDU bytes, appended to *out. */
static inline int dp_raw_build(struct dp_raw *p, const uiw_hdr *h, const void *pay, size_t len,
                               uint8_t **out, size_t *out_len)
{
    uiw_tx_msg m;
    uiw_fpdu *f = malloc(sizeof(*f));
    struct iovec v = {(void *)(uintptr_t)pay, len};
    int r = uiw_tx_msg_init(&m, h, &v, len ? 1 : 0, len);

    if (!f)
        return -ENOMEM;
    while (r == 0 && (r = uiw_tx_next(&p->tx, &m, f)) == 1) {
        *out = realloc(*out, *out_len + f->bytes);
        for (int i = 0; i < f->iovcnt; i++) {
            memcpy(*out + *out_len, f->iov[i].iov_base, f->iov[i].iov_len);
            *out_len += f->iov[i].iov_len;
        }
        if (f->last)
            break;
        r = 0;
    }
    free(f);
    return r < 0 ? r : 0;
}

static inline int dp_raw_send(struct dp_raw *p, const uiw_hdr *h, const void *pay, size_t len)
{
    uint8_t *b = NULL;
    size_t n = 0;
    int r = dp_raw_build(p, h, pay, len, &b, &n);
    if (!r)
        r = dp_write_all(p->fd, b, n);
    free(b);
    return r;
}

/* The wire core's header initialisers (L set, current versions). */
static inline void dp_hdr(uiw_hdr *h, bool tagged, unsigned opcode)
{
    uiw_hdr_init(h, tagged, opcode);
}

static inline void dp_hdr_u(uiw_hdr *h, unsigned opcode, unsigned qn, uint32_t msn)
{
    uiw_hdr_init_untagged(h, opcode, qn, msn);
}

/* Receive the next complete message from our QP: its first segment's
 * header in *h (with L of the last segment), the payload in p->pay.
 * 1: got one, 0: timeout, -1: EOF, -2: parse error (*ev set). */
static inline int dp_raw_recv(struct dp_raw *p, uiw_hdr *h, unsigned ms, uiw_rx_event *err)
{
    uint64_t end = eng_now_ms() + ms;
    bool have_hdr = false;

    memset(h, 0, sizeof(*h)); /* defined on every return, not only on 1 */
    p->pay_len = 0;
    for (;;) {
        while (p->off < p->len) {
            uiw_rx_event ev;
            size_t used = uiw_rx_feed(&p->rx, p->buf + p->off, p->len - p->off, &ev);
            p->off += used;
            if (p->on_fpdu && (ev.kind == UIW_RX_HDR || ev.kind == UIW_RX_END))
                p->on_fpdu(p->on_fpdu_arg, &ev);
            if (ev.kind == UIW_RX_HDR) {
                if (!have_hdr)
                    *h = *ev.hdr;
                have_hdr = true;
                h->last = ev.hdr->last;
            } else if (ev.kind == UIW_RX_PAYLOAD) {
                if (p->pay_len + ev.len > p->pay_cap) {
                    p->pay_cap = (p->pay_len + ev.len) * 2;
                    p->pay = realloc(p->pay, p->pay_cap);
                }
                memcpy(p->pay + p->pay_len, ev.data, ev.len);
                p->pay_len += ev.len;
            } else if (ev.kind == UIW_RX_END) {
                if (h->last)
                    return 1;
            } else if (ev.kind == UIW_RX_ERROR) {
                if (err)
                    *err = ev;
                return -2;
            } else if (!used) {
                break;
            }
        }
        p->off = p->len = 0;
        {
            struct pollfd pf = {.fd = p->fd, .events = POLLIN};
            int64_t left = (int64_t)end - (int64_t)eng_now_ms();
            ssize_t n;
            if (left <= 0)
                return 0;
            if (poll(&pf, 1, (int)(left > 100 ? 100 : left)) <= 0)
                continue;
            n = recv(p->fd, p->buf, sizeof(p->buf), MSG_DONTWAIT);
            if (n == 0) {
                p->eof = true;
                return -1;
            }
            if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                p->eof = true;
                return -1;
            }
            p->len = (size_t)n;
        }
    }
}

/* Receive until a Terminate arrives (skipping other messages). */
static inline int dp_raw_term(struct dp_raw *p, uiw_hdr *h, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    for (;;) {
        int64_t left = (int64_t)end - (int64_t)eng_now_ms();
        int r;
        if (left <= 0)
            return 0;
        r = dp_raw_recv(p, h, (unsigned)left, NULL);
        if (r != 1)
            return r;
        if (!h->tagged && h->opcode == UIW_OP_TERMINATE)
            return 1;
    }
}

#endif
