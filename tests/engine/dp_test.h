/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers of the data path tests (test_datapath.c, test_dp_*.c): two QPs
 * of the uiw_lo device connected over a socketpair with
 * uiw_qp_attach_socket and a synthetic MPA result (no CM), completion
 * polling with timeouts, async events, and a raw peer (tests/raw_peer.h:
 * the wire core's uiw_tx / uiw_rx) attached to the other end.
 */
#ifndef UIWARP_DP_TEST_H
#define UIWARP_DP_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "raw_peer.h"
#include "testutil.h"

#define DP_TIMEOUT_MS 20000

static struct ibv_context *dp_ctx;

static inline uint64_t dp_now_ms(void)
{
    return eng_now_ms();
}

static inline void dp_msleep(unsigned ms)
{
    eng_msleep(ms);
}

static uint64_t dp_rng = 0x243F6A8885A308D3ull;
static inline uint64_t dp_rnd(void)
{
    dp_rng ^= dp_rng << 13;
    dp_rng ^= dp_rng >> 7;
    dp_rng ^= dp_rng << 17;
    return dp_rng;
}

static inline void dp_fill(uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v = dp_rnd();
        memcpy(p + i, &v, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)dp_rnd();
}

/* aligned_alloc wants a size that is a multiple of the alignment (C17) */
static inline void *dp_alloc(size_t align, size_t size)
{
    return aligned_alloc(align, (size + align - 1) / align * align);
}

static inline struct ibv_context *dp_open(void)
{
    return eng_open_lo(true);
}

/* One side: PD, CQs, QP. */
struct dp_ep {
    struct ibv_pd *pd;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct ibv_srq *srq;
    struct ibv_comp_channel *ch;
};

struct dp_ep_opts {
    bool sig_all;
    bool srq;
    bool channel;
    unsigned send_wr, recv_wr;
};

static inline int dp_ep_create(struct dp_ep *e, const struct dp_ep_opts *o)
{
    struct ibv_qp_cap cap = {.max_send_wr = o && o->send_wr ? o->send_wr : 256,
                             .max_recv_wr = o && o->recv_wr ? o->recv_wr : 256,
                             .max_send_sge = 6,
                             .max_recv_sge = 6,
                             .max_inline_data = 256};

    memset(e, 0, sizeof(*e));
    e->pd = ibv_alloc_pd(dp_ctx);
    if (!e->pd)
        return -1;
    if (o && o->channel)
        e->ch = ibv_create_comp_channel(dp_ctx);
    e->scq = ibv_create_cq(dp_ctx, 4096, NULL, NULL, 0);
    e->rcq = ibv_create_cq(dp_ctx, 4096, NULL, e->ch, 0);
    if (!e->scq || !e->rcq)
        return -1;
    if (o && o->srq) {
        struct ibv_srq_init_attr sa;
        memset(&sa, 0, sizeof(sa));
        sa.attr.max_wr = 256;
        sa.attr.max_sge = 6;
        e->srq = ibv_create_srq(e->pd, &sa);
        if (!e->srq)
            return -1;
    }
    e->qp = eng_qp_init(e->pd, e->scq, e->rcq, e->srq, cap, o && o->sig_all, ENG_ACCESS_ALL, 0);
    return e->qp ? 0 : -1;
}

/* Drop every queued async event (of any object). */
static inline void dp_async_drain(void)
{
    eng_async_drain(dp_ctx, NULL);
}

/* Wait for an async event about qp; returns its type or -1. Other events
 * are dropped. */
static inline int dp_async_wait(struct ibv_qp *qp, unsigned ms)
{
    return eng_async_wait(dp_ctx, qp, ms);
}

static inline void dp_ep_destroy(struct dp_ep *e)
{
    if (e->qp)
        CHECK_EQ(ibv_destroy_qp(e->qp), 0);
    dp_async_drain();
    if (e->srq)
        CHECK_EQ(ibv_destroy_srq(e->srq), 0);
    if (e->scq)
        CHECK_EQ(ibv_destroy_cq(e->scq), 0);
    if (e->rcq)
        CHECK_EQ(ibv_destroy_cq(e->rcq), 0);
    if (e->ch)
        CHECK_EQ(ibv_destroy_comp_channel(e->ch), 0);
    if (e->pd)
        CHECK_EQ(ibv_dealloc_pd(e->pd), 0);
    memset(e, 0, sizeof(*e));
}

static inline uiw_mpa_result dp_mpa(bool crc, bool markers, uint16_t ird, uint16_t ord)
{
    uiw_mpa_result m;
    memset(&m, 0, sizeof(m));
    m.crc = crc;
    m.markers_rx = m.markers_tx = markers;
    m.rev = 2;
    m.enhanced = true;
    m.ird = ird;
    m.ord = ord;
    m.peer_ird = ord;
    m.peer_ord = ird;
    return m;
}

#ifdef DP_VIA_CM
/* For a test linked with libibverbs.so.1 itself (test_abi), which exports
 * only the engine's narrow interface: connect over 127.0.0.1 with the
 * engine's connection manager. MPA options are the process's (UIWARP_CRC,
 * UIWARP_MARKERS): crc and markers are not used. The connections live
 * until their QPs are destroyed. */
static struct uiw_cm_channel *dp_cm_ch;
static struct uiw_conn *dp_cm_conns[256];
static unsigned dp_cm_nconns;

static void dp_cm_cleanup(void)
{
    for (unsigned i = 0; i < dp_cm_nconns; i++)
        uiw_cm_conn_destroy(dp_cm_conns[i]);
    dp_cm_nconns = 0;
    if (dp_cm_ch)
        uiw_cm_channel_destroy(dp_cm_ch);
    dp_cm_ch = NULL;
}

static inline void dp_cm_keep(struct uiw_conn *c)
{
    if (c && dp_cm_nconns < sizeof(dp_cm_conns) / sizeof(dp_cm_conns[0]))
        dp_cm_conns[dp_cm_nconns++] = c;
}

static inline int dp_connect(struct dp_ep *a, struct dp_ep *b, bool crc, bool markers,
                             uint16_t ird_a, uint16_t ord_a, uint16_t ird_b, uint16_t ord_b)
{
    struct uiw_cm_channel *ch;
    struct uiw_listener *l = NULL;
    struct uiw_conn *ca = NULL;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct sockaddr_storage bound;
    struct uiw_conn_param pa = {.ird = ird_a, .ord = ord_a}, pb = {.ird = ird_b, .ord = ord_b};
    struct uiw_cm_event ev;
    int rc, established = 0;

    (void)crc;
    (void)markers;
    if (!dp_cm_ch) {
        if (!(dp_cm_ch = uiw_cm_channel_create()))
            return -ENOMEM;
        atexit(dp_cm_cleanup); /* the connections end with the program */
    }
    ch = dp_cm_ch;
    rc = uiw_cm_listen(NULL, (struct sockaddr *)&sa, 1, ch, NULL, &l);
    if (!rc)
        rc = uiw_cm_listener_addr(l, &bound);
    if (!rc)
        rc = uiw_cm_connect(a->qp, NULL, (struct sockaddr *)&bound, &pa, ch, a, &ca);
    if (!rc)
        dp_cm_keep(ca);
    while (!rc && established < 2) {
        struct pollfd pfd = {.fd = uiw_cm_channel_fd(ch), .events = POLLIN};
        if (poll(&pfd, 1, DP_TIMEOUT_MS) != 1) {
            rc = -ETIMEDOUT;
            break;
        }
        rc = uiw_cm_get_event(ch, &ev);
        if (rc)
            break;
        if (ev.type == UIW_CM_CONNECT_REQUEST && ev.listener == l) {
            dp_cm_keep(ev.conn);
            rc = uiw_cm_accept(ev.conn, b->qp, &pb, b);
        } else if (ev.user != a && ev.user != b)
            continue; /* an earlier connection's (DISCONNECTED) */
        else if (ev.type == UIW_CM_ESTABLISHED)
            established++;
        else
            rc = ev.status ? ev.status : -EPROTO;
    }
    if (l)
        uiw_cm_listener_destroy(l);
    return rc;
}
#else
/* Connect two QPs over a socketpair. */
static inline int dp_connect(struct dp_ep *a, struct dp_ep *b, bool crc, bool markers,
                             uint16_t ird_a, uint16_t ord_a, uint16_t ird_b, uint16_t ord_b)
{
    int sv[2];
    uiw_mpa_result ma = dp_mpa(crc, markers, ird_a, ord_a), mb = dp_mpa(crc, markers, ird_b, ord_b);

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    if (uiw_qp_attach_socket(to_uqp(a->qp), sv[0], &ma) < 0) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (uiw_qp_attach_socket(to_uqp(b->qp), sv[1], &mb) < 0) {
        close(sv[1]);
        return -1;
    }
    return 0;
}
#endif

/* Poll one completion (poll-driven progress happens inside). */
static inline int dp_poll(struct ibv_cq *cq, struct ibv_wc *wc, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;

    for (unsigned i = 0;; i++) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n)
            return n;
        if (dp_now_ms() > end)
            return 0;
        if (i > 64) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

/* No completion shows up within ms. */
static inline bool dp_quiet(struct ibv_cq *cq, unsigned ms)
{
    struct ibv_wc wc;
    return dp_poll(cq, &wc, ms) == 0;
}

/* Happens-before with whatever the progress thread did under the QP's lock
 * (for sanitizers: the memory we check was written under it). */
static inline void dp_sync(struct ibv_qp *qp)
{
    pthread_mutex_lock(&to_uqp(qp)->lock);
    pthread_mutex_unlock(&to_uqp(qp)->lock);
}

static inline enum ibv_qp_state dp_state(struct ibv_qp *qp)
{
    enum ibv_qp_state s;
    pthread_mutex_lock(&to_uqp(qp)->lock);
    s = to_uqp(qp)->state;
    pthread_mutex_unlock(&to_uqp(qp)->lock);
    return s;
}

/* Our QP (attached to one end of a socketpair) and a raw peer on the other. */
static inline int dp_connect_raw(struct dp_ep *a, struct dp_raw *p, const uiw_mpa_result *m)
{
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -errno;
    dp_raw_init(p, sv[1], m->crc, m->markers_tx, 0);
    if (uiw_qp_attach_socket(to_uqp(a->qp), sv[0], m) < 0) {
        close(sv[0]);
        return -1;
    }
    return 0;
}

#endif
