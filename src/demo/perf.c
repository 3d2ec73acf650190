/* SPDX-License-Identifier: BSD-3-Clause */
/* Measurements shared by uiwarp-demo and bench_rdma; see perf.h. */
#include "perf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ACK_WR_ID  0xac4ull
#define DONE_WR_ID 0xd0e5ull

const char *perf_test_name(int t)
{
    switch (t) {
    case PT_LAT_SEND:
        return "Send ping-pong";
    case PT_LAT_WRITE:
        return "Write ping-pong";
    case PT_LAT_READ:
        return "Read round trip";
    case PT_LAT_TCP:
        return "TCP ping-pong";
    case PT_LAT_TCP_RR:
        return "TCP request/response";
    case PT_BW_SEND:
        return "Send stream";
    case PT_BW_WRITE:
        return "Write stream";
    case PT_BW_READ:
        return "Read stream";
    case PT_BW_TCP:
        return "TCP stream";
    }
    return "test";
}

/* Raw TCP round trips busy-poll up to 64 KiB; larger transfers sleep in
 * poll(2), which was faster and steadier for them on loopback (perf.h). */
static bool tcp_spin(size_t size)
{
    return size <= 65536;
}

static uint64_t stamp_of(uint32_t serial, uint64_t i)
{
    return (uint64_t)serial << 32 | (i + 1);
}

/* Time allowed for a bulk transfer of `bytes`: the usual timeout plus
 * 10 MB/s, far below anything working. */
static int bulk_timeout(const struct perf *p, uint64_t bytes)
{
    uint64_t ms = (uint64_t)p->o.timeout_ms + bytes / 10000;
    return ms > 600000 ? 600000 : (int)ms;
}

/* The first wrong byte seen in a test. */
struct vfail {
    bool failed;
    long off;
    uint64_t iter;
};
static void vf_note(struct vfail *v, long off, uint64_t iter)
{
    if (off >= 0 && !v->failed) {
        v->failed = true;
        v->off = off;
        v->iter = iter;
    }
}

/* ------------------------------------------------------------- set-up */
int perf_setup(struct perf *p, int ctl, bool server, const struct perf_opts *o)
{
    memset(p, 0, sizeof *p);
    p->ctl = ctl;
    p->server = server;
    p->tcp = -1;
    p->o = *o;
    p->my_seed = server ? PERF_SEED_SERVER : PERF_SEED_CLIENT;
    p->peer_seed = server ? PERF_SEED_CLIENT : PERF_SEED_SERVER;
    if (p->o.max_size < 8 || p->o.max_size % 8) {
        ru_err("buffer size %zu is not a multiple of 8", p->o.max_size);
        return -EINVAL;
    }
    unsigned depth = p->o.window < 16 ? 16 : p->o.window > 128 ? 128 : p->o.window;
    struct ru_params rp = {
        .sq_depth = 2 * p->o.window + 16,
        .rq_depth = p->o.max_bw_iters + 16,
        .ird = depth,
        .ord = depth,
        .timeout_ms = p->o.timeout_ms,
    };
    int rc = ru_open(&p->rc, &rp);
    if (rc < 0)
        return rc;

    struct ru_msg m = {0};
    if (server) {
        int lfd;
        if ((rc = ru_listen(&p->rc, &p->rdma_port)) < 0)
            return rc;
        if ((lfd = ru_tcp_listen(&p->tcp_port)) < 0)
            return lfd;
        m.type = PM_HELLO;
        m.a = p->rdma_port;
        m.b = p->tcp_port;
        if ((rc = ru_ctl_send(ctl, &m)) < 0 || (rc = ru_accept(&p->rc)) < 0) {
            close(lfd);
            return rc;
        }
        p->tcp = ru_tcp_accept(lfd, p->o.timeout_ms);
        close(lfd);
        if (p->tcp < 0)
            return p->tcp;
    } else {
        if ((rc = ru_ctl_expect(ctl, PM_HELLO, &m, p->o.timeout_ms)) < 0)
            return rc;
        p->rdma_port = (uint16_t)m.a;
        p->tcp_port = (uint16_t)m.b;
        if ((rc = ru_connect(&p->rc, p->rdma_port)) < 0)
            return rc;
        if ((p->tcp = ru_tcp_connect(p->tcp_port, p->o.timeout_ms)) < 0)
            return p->tcp;
    }

    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    p->src = ru_reg(&p->rc, p->o.max_size, acc);
    p->dst = ru_reg(&p->rc, p->o.max_size, acc);
    p->small = ru_reg(&p->rc, PERF_SMALL_SIZE, RU_ACCESS_ALL);
    if (!p->src || !p->dst || !p->small)
        return -ENOMEM;
    ru_fill(p->src->addr, p->o.max_size, p->my_seed);

    memset(&m, 0, sizeof m);
    m.type = PM_BUFS;
    m.a = (uintptr_t)p->src->addr;
    m.b = (uintptr_t)p->dst->addr;
    m.c = (uintptr_t)p->small->addr;
    m.d = (uint64_t)p->src->rkey | (uint64_t)p->dst->rkey << 32;
    m.e = p->small->rkey;
    m.f = p->o.max_size;
    if ((rc = ru_ctl_send(ctl, &m)) < 0)
        return rc;
    if ((rc = ru_ctl_expect(ctl, PM_BUFS, &m, p->o.timeout_ms)) < 0)
        return rc;
    p->peer_src = (struct ru_remote){m.a, (uint32_t)m.d, m.f};
    p->peer_dst = (struct ru_remote){m.b, (uint32_t)(m.d >> 32), m.f};
    p->peer_small = (struct ru_remote){m.c, (uint32_t)m.e, PERF_SMALL_SIZE};
    if (m.f != p->o.max_size) {
        ru_err("peer buffers are %llu bytes, ours %zu", (unsigned long long)m.f, p->o.max_size);
        return -EINVAL;
    }
    return 0;
}

int perf_teardown(struct perf *p)
{
    int rc = 0;
    if (!p->server && p->ctl >= 0) {
        struct ru_msg m = {.type = PM_QUIT};
        ru_ctl_send(p->ctl, &m);
    }
    if (p->rc.conn)
        rc = ru_disconnect(&p->rc, !p->server, 3000);
    ru_dereg(p->src);
    ru_dereg(p->dst);
    ru_dereg(p->small);
    p->src = p->dst = p->small = NULL;
    if (p->tcp >= 0)
        close(p->tcp);
    p->tcp = -1;
    ru_close(&p->rc);
    return rc;
}

/* ----------------------------------------------------------- protocol */
int perf_begin(struct perf *p, int test, uint64_t size, uint64_t iters, uint64_t warmup,
               uint64_t extra)
{
    struct ru_msg m = {.type = PM_TEST,
                       .a = (uint64_t)test,
                       .b = size,
                       .c = iters,
                       .d = warmup,
                       .e = extra,
                       .f = p->serial};
    int rc = ru_ctl_send(p->ctl, &m);
    if (rc < 0)
        return rc;
    rc = ru_ctl_recv(p->ctl, &m, bulk_timeout(p, size));
    if (rc < 0)
        return rc;
    if (m.type == PM_RESULT) { /* the server refused or failed to prepare */
        ru_err("%s: the server failed to prepare (%s)", perf_test_name(test), strerror(-m.status));
        return m.status ? m.status : -EPROTO;
    }
    if (m.type != PM_READY) {
        ru_err("control channel: expected READY, got %u", m.type);
        return -EPROTO;
    }
    return 0;
}

int perf_end(struct perf *p, struct ru_msg *res)
{
    struct ru_msg m = {.type = PM_FINISH};
    int rc = ru_ctl_send(p->ctl, &m);
    if (rc < 0)
        return rc;
    return ru_ctl_expect(p->ctl, PM_RESULT, res, bulk_timeout(p, p->o.max_size) + 60000);
}

int perf_ready(struct perf *p)
{
    struct ru_msg m = {.type = PM_READY};
    return ru_ctl_send(p->ctl, &m);
}

int perf_wait_finish(struct perf *p)
{
    struct ru_msg m;
    int t = p->o.timeout_ms * 6 > 120000 ? p->o.timeout_ms * 6 : 120000;
    return ru_ctl_expect(p->ctl, PM_FINISH, &m, t);
}

/* ------------------------------------------------------- shared pieces */
/* Spin until the tail word of buf is st (an RDMA Write landed), polling
 * the send CQ meanwhile: that reaps our own Write completions and drives
 * the engine's receive processing (poll-driven progress). */
static int spin_stamp(struct perf *p, const uint8_t *buf, size_t size, uint64_t st,
                      unsigned *reaped, uint64_t deadline, uint64_t iter)
{
    struct ibv_wc wc[16];
    struct ru_idle idle = {0};
    while (ru_tail_stamp(buf, size) != st) {
        int k = ru_poll_some(p->rc.scq, wc, 16);
        if (k < 0)
            return k;
        *reaped += (unsigned)k;
        /* no completion to sleep on: spin, then yield the CPU */
        if (ru_idle(NULL, &idle, deadline) < 0) {
            ru_err("timeout waiting for the peer's RDMA Write of iteration %llu (%zu bytes) to "
                   "land in memory",
                   (unsigned long long)iter, size);
            return -ETIMEDOUT;
        }
    }
    return 0;
}

/* Reap send completions until *reaped reaches want. */
static int reap_to(struct perf *p, unsigned *reaped, unsigned want, const char *what)
{
    struct ibv_wc wc[16];
    while (*reaped < want) {
        unsigned n = want - *reaped > 16 ? 16 : want - *reaped;
        int k = ru_poll_n(p->rc.scq, wc, (int)n, ru_deadline(p->o.timeout_ms), what);
        if (k < 0)
            return k;
        *reaped += (unsigned)k;
    }
    return 0;
}

/* A latency message's check: in full (the pattern and the stamps) when
 * full, else the stamps only. */
static long lat_check(const struct perf *p, const uint8_t *dst, size_t size, uint64_t st, bool full)
{
    return full ? ru_check_stamped(dst, size, p->peer_seed, st) : ru_check_stamps(dst, size, st);
}

/* A replying loop's reply i: once the previous reply (prev) is reaped (its
 * bytes are out), stamp src with st and post it (op to remote). */
static int lat_reply(struct perf *p, unsigned *reaped, uint64_t i, const char *prev, uint8_t *src,
                     size_t size, uint64_t st, enum ibv_wr_opcode op,
                     const struct ru_remote *remote)
{
    int rc = reap_to(p, reaped, (unsigned)i, prev);
    if (rc < 0)
        return rc;
    ru_stamp(src, size, st);
    return ru_post_send(&p->rc, op, p->src, 0, size, remote, 0, i, IBV_SEND_SIGNALED);
}

/* The end of a replying loop: reap the last reply (what), then put the
 * pattern back in src. */
static int lat_last_reply(struct perf *p, unsigned *reaped, uint64_t n, const char *what,
                          uint8_t *src, size_t size)
{
    int rc = reap_to(p, reaped, (unsigned)n, what);
    if (rc < 0)
        return rc;
    ru_unstamp(src, size, p->my_seed);
    return 0;
}

/* Post `iters` signaled WRs of `op` (src -> peer dst for Write/Send, peer
 * src -> dst for Read) keeping at most `window` in flight; return when all
 * completed. */
static int windowed(struct perf *p, enum ibv_wr_opcode op, size_t size, unsigned iters,
                    unsigned window)
{
    struct ibv_wc wc[64];
    unsigned posted = 0, done = 0;
    struct ru_idle idle = {0};
    uint64_t deadline = ru_deadline(p->o.timeout_ms);
    while (done < iters) {
        while (posted < iters && posted - done < window) {
            int rc;
            if (op == IBV_WR_RDMA_READ)
                rc = ru_post_send(&p->rc, op, p->dst, 0, size, &p->peer_src, 0, posted,
                                  IBV_SEND_SIGNALED);
            else
                rc = ru_post_send(&p->rc, op, p->src, 0, size,
                                  op == IBV_WR_SEND ? NULL : &p->peer_dst, 0, posted,
                                  IBV_SEND_SIGNALED);
            if (rc < 0)
                return rc;
            posted++;
        }
        int k = ru_poll_some(p->rc.scq, wc, 64);
        if (k < 0)
            return k;
        if (k > 0) {
            done += (unsigned)k;
            deadline = ru_deadline(p->o.timeout_ms);
            ru_idle_reset(&idle);
        } else if ((k = ru_idle(p->rc.scq, &idle, deadline)) < 0) {
            if (k == -ETIMEDOUT)
                ru_err("timeout: no completion for %d ms (%u of %u done, %u posted, %zu bytes "
                       "each)",
                       p->o.timeout_ms, done, iters, posted, size);
            return k;
        }
    }
    return 0;
}

/* Wait for the 8-byte ack/done Send in the small buffer's receive slot,
 * reaping send completions meanwhile. */
static int wait_small_recv(struct perf *p, uint64_t deadline, unsigned *reaped, const char *what)
{
    struct ibv_wc wc[16];
    struct ru_idle idle = {0};
    for (;;) {
        int k = ru_poll_some(p->rc.rcq, wc, 1);
        if (k < 0)
            return k;
        if (k == 1) {
            if (wc[0].byte_len != 8) {
                ru_err("%s: %u bytes received, 8 expected", what, wc[0].byte_len);
                return -EBADMSG;
            }
            return 0;
        }
        if (reaped) {
            k = ru_poll_some(p->rc.scq, wc, 16);
            if (k < 0)
                return k;
            *reaped += (unsigned)k;
        }
        if ((k = ru_idle(p->rc.rcq, &idle, deadline)) < 0) {
            if (k == -ETIMEDOUT)
                ru_err("timeout waiting for %s", what);
            return k;
        }
    }
}

static int post_small_send(struct perf *p, uint64_t value, uint64_t wr_id)
{
    memcpy((uint8_t *)p->small->addr + PERF_SMALL_SEND, &value, 8);
    return ru_post_send(&p->rc, IBV_WR_SEND, p->small, PERF_SMALL_SEND, 8, NULL, 0, wr_id,
                        IBV_SEND_SIGNALED);
}

/* --------------------------------------------------------------- server */
static int serve_test(struct perf *p, const struct ru_msg *cmd, struct ru_msg *res)
{
    int test = (int)cmd->a;
    size_t size = cmd->b;
    uint64_t n = cmd->c;
    uint32_t ser = (uint32_t)cmd->f;
    uint8_t *src = p->src->addr, *dst = p->dst->addr;
    struct vfail vf = {0};
    struct ibv_wc wc[64];
    int rc = 0;
    unsigned reaped = 0;

    if (size < 8 || size % 8 || size > p->o.max_size || n == 0 ||
        (test == PT_BW_SEND && n > p->o.max_bw_iters)) {
        ru_err("%s: bad parameters (size %zu, %llu iterations)", perf_test_name(test), size,
               (unsigned long long)n);
        return -EINVAL;
    }

    /* prepare */
    switch (test) {
    case PT_LAT_SEND:
        memset(dst, 0, size);
        rc = ru_post_recv(&p->rc, p->dst, 0, size, 0);
        break;
    case PT_LAT_WRITE:
    case PT_BW_TCP:
        memset(dst, 0, size);
        break;
    case PT_BW_WRITE:
        memset(dst, 0, size);
        rc = ru_post_recv(&p->rc, p->small, PERF_SMALL_RECV, 64, DONE_WR_ID);
        break;
    case PT_BW_SEND:
        memset(dst, 0, size);
        for (uint64_t i = 0; i < n && rc == 0; i++)
            rc = ru_post_recv(&p->rc, p->dst, 0, size, i);
        break;
    case PT_LAT_READ:
    case PT_LAT_TCP:
    case PT_LAT_TCP_RR:
    case PT_BW_READ:
        break;
    default:
        ru_err("unknown test %d", test);
        return -EINVAL;
    }
    if (rc < 0)
        return rc;
    if ((rc = perf_ready(p)) < 0)
        return rc;

    /* run */
    switch (test) {
    case PT_LAT_SEND:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t st = stamp_of(ser, i);
            uint64_t deadline = ru_deadline(p->o.timeout_ms);
            if ((rc = ru_poll_n(p->rc.rcq, wc, 1, deadline, "the client's Send")) < 0)
                return rc;
            if (wc[0].byte_len != size)
                vf_note(&vf, (long)wc[0].byte_len, i);
            bool full = i == 0 || i == n - 1;
            vf_note(&vf, lat_check(p, dst, size, st, full), i);
            if (i + 1 < n) {
                if (i + 1 == n - 1)
                    memset(dst, 0, size);
                if ((rc = ru_post_recv(&p->rc, p->dst, 0, size, i + 1)) < 0)
                    return rc;
            }
            /* the previous reply's bytes must be out before restamping */
            if ((rc = lat_reply(p, &reaped, i, "the previous Send reply", src, size, st,
                                IBV_WR_SEND, NULL)) < 0)
                return rc;
        }
        if ((rc = lat_last_reply(p, &reaped, n, "the last Send reply", src, size)) < 0)
            return rc;
        break;

    case PT_LAT_WRITE:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t st = stamp_of(ser, i);
            rc = spin_stamp(p, dst, size, st, &reaped, ru_deadline(p->o.timeout_ms), i);
            if (rc < 0)
                return rc;
            bool full = i == 0 || i == n - 1;
            vf_note(&vf, lat_check(p, dst, size, st, full), i);
            if (i + 1 == n - 1)
                memset(dst, 0, size);
            if ((rc = lat_reply(p, &reaped, i, "the previous Write reply", src, size, st,
                                IBV_WR_RDMA_WRITE, &p->peer_dst)) < 0)
                return rc;
        }
        if ((rc = lat_last_reply(p, &reaped, n, "the last Write reply", src, size)) < 0)
            return rc;
        break;

    case PT_LAT_TCP:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t st = stamp_of(ser, i);
            bool full = i == 0 || i == n - 1;
            if (full)
                memset(dst, 0, size);
            if ((rc = ru_tcp_recv_all(p->tcp, dst, size, tcp_spin(size),
                                      ru_deadline(p->o.timeout_ms))) < 0)
                return rc;
            vf_note(&vf, lat_check(p, dst, size, st, full), i);
            ru_stamp(src, size, st);
            if ((rc = ru_tcp_send_all(p->tcp, src, size, tcp_spin(size),
                                      ru_deadline(p->o.timeout_ms))) < 0)
                return rc;
        }
        ru_unstamp(src, size, p->my_seed);
        break;

    case PT_LAT_TCP_RR:
        for (uint64_t i = 0; i < n; i++) {
            uint64_t req[2];
            if ((rc = ru_tcp_recv_all(p->tcp, req, sizeof req, true,
                                      ru_deadline(p->o.timeout_ms))) < 0)
                return rc;
            if (req[0] != size || req[1] != stamp_of(ser, i))
                vf_note(&vf, 0, i);
            if ((rc = ru_tcp_send_all(p->tcp, src, size, tcp_spin(size),
                                      ru_deadline(p->o.timeout_ms))) < 0)
                return rc;
        }
        break;

    case PT_BW_SEND: {
        uint64_t got = 0;
        struct ru_idle idle = {0};
        uint64_t deadline = ru_deadline(p->o.timeout_ms);
        while (got < n) {
            int k = ru_poll_some(p->rc.rcq, wc, 64);
            if (k < 0)
                return k;
            for (int j = 0; j < k; j++)
                if (wc[j].byte_len != size)
                    vf_note(&vf, (long)wc[j].byte_len, got + (uint64_t)j);
            if (k > 0) {
                got += (uint64_t)k;
                deadline = ru_deadline(p->o.timeout_ms);
                ru_idle_reset(&idle);
            } else if ((k = ru_idle(p->rc.rcq, &idle, deadline)) < 0) {
                if (k == -ETIMEDOUT)
                    ru_err("timeout: %llu of %llu Sends received", (unsigned long long)got,
                           (unsigned long long)n);
                return k;
            }
        }
        if ((rc = post_small_send(p, n, ACK_WR_ID)) < 0 ||
            (rc = reap_to(p, &reaped, 1, "the ack Send")) < 0)
            return rc;
        vf_note(&vf, ru_check(dst, size, p->peer_seed), n - 1);
        break;
    }

    case PT_BW_WRITE:
        rc = wait_small_recv(p, ru_deadline(bulk_timeout(p, n * size)), NULL,
                             "the Send that follows the Writes");
        if (rc < 0)
            return rc;
        if ((rc = post_small_send(p, n, ACK_WR_ID)) < 0 ||
            (rc = reap_to(p, &reaped, 1, "the ack Send")) < 0)
            return rc;
        vf_note(&vf, ru_check(dst, size, p->peer_seed), n - 1);
        break;

    case PT_BW_TCP: {
        uint64_t deadline = ru_deadline(bulk_timeout(p, n * size));
        for (uint64_t i = 0; i < n; i++)
            if ((rc = ru_tcp_recv_all(p->tcp, dst, size, false, deadline)) < 0)
                return rc;
        uint8_t ack = 1;
        if ((rc = ru_tcp_send_all(p->tcp, &ack, 1, false, deadline)) < 0)
            return rc;
        vf_note(&vf, ru_check(dst, size, p->peer_seed), n - 1);
        break;
    }

    case PT_LAT_READ:
    case PT_BW_READ:
        break; /* one-sided: nothing to do here */
    }

    if ((rc = perf_wait_finish(p)) < 0)
        return rc;
    if (vf.failed) {
        res->status = -EBADMSG;
        res->a = (uint64_t)vf.off;
        res->b = vf.iter;
    }
    return 0;
}

int perf_serve(struct perf *p, perf_user_fn user)
{
    for (;;) {
        struct ru_msg m, res;
        int rc = ru_ctl_recv(p->ctl, &m, 300000);
        if (rc < 0)
            return rc;
        if (m.type == PM_QUIT)
            return 0;
        if (m.type != PM_TEST) {
            ru_err("control channel: unexpected message %u", m.type);
            return -EPROTO;
        }
        memset(&res, 0, sizeof res);
        res.type = PM_RESULT;
        if (m.a >= PT_USER && user)
            rc = user(p, &m, &res);
        else
            rc = serve_test(p, &m, &res);
        if (rc < 0) {
            /* tell the client (it may be waiting for READY or RESULT), then stop */
            res.status = rc;
            ru_ctl_send(p->ctl, &res);
            return rc;
        }
        if ((rc = ru_ctl_send(p->ctl, &res)) < 0)
            return rc;
        if (res.status == -EBADMSG)
            ru_err("%s: received data differ at byte %lld of message %llu",
                   perf_test_name((int)m.a), (long long)res.a, (unsigned long long)res.b);
    }
}

/* --------------------------------------------------------------- client */
static int report_result(const struct perf *p, int test, size_t size, const struct ru_msg *res,
                         const struct vfail *vf)
{
    (void)p;
    char sz[32];
    ru_size_str(size, sz, sizeof sz);
    int rc = 0;
    if (vf->failed) {
        ru_err("%s %s: data received by the client differ at byte %ld of message %llu",
               perf_test_name(test), sz, vf->off, (unsigned long long)vf->iter);
        rc = -EBADMSG;
    }
    if (res->status == -EBADMSG) {
        ru_err("%s %s: data received by the server differ at byte %lld of message %llu",
               perf_test_name(test), sz, (long long)res->a, (unsigned long long)res->b);
        rc = -EBADMSG;
    } else if (res->status < 0) {
        ru_err("%s %s: the server failed (%s)", perf_test_name(test), sz, strerror(-res->status));
        rc = res->status;
    }
    return rc;
}

/* One latency run: warmup + iters round trips; the timed ones go to
 * samples[0..iters). */
static int lat_run(struct perf *p, int test, size_t size, unsigned iters, unsigned warmup,
                   uint64_t *samples)
{
    uint64_t n = (uint64_t)iters + warmup;
    uint8_t *src = p->src->addr, *dst = p->dst->addr;
    uint32_t ser = ++p->serial;
    struct vfail vf = {0};
    struct ibv_wc wc[4];
    unsigned reaped = 0;
    int rc;

    memset(dst, 0, size);
    if ((rc = perf_begin(p, test, size, n, warmup, 0)) < 0)
        return rc;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t st = stamp_of(ser, i), t0 = 0, t1 = 0;
        uint64_t deadline = ru_deadline(p->o.timeout_ms);
        bool full = i == 0 || i == n - 1;
        long off = -1;
        switch (test) {
        case PT_LAT_SEND:
            ru_stamp(src, size, st);
            if (full)
                memset(dst, 0, size);
            t0 = ru_now_ns();
            if ((rc = ru_post_recv(&p->rc, p->dst, 0, size, i)) < 0 ||
                (rc = ru_post_send(&p->rc, IBV_WR_SEND, p->src, 0, size, NULL, 0, i,
                                   IBV_SEND_SIGNALED)) < 0 ||
                (rc = ru_poll_n(p->rc.rcq, wc, 1, deadline, "the server's Send reply")) < 0)
                return rc;
            t1 = ru_now_ns();
            if (wc[0].byte_len != size)
                vf_note(&vf, (long)wc[0].byte_len, i);
            if ((rc = reap_to(p, &reaped, (unsigned)i + 1, "the Send completion")) < 0)
                return rc;
            off = lat_check(p, dst, size, st, full);
            break;
        case PT_LAT_WRITE:
            ru_stamp(src, size, st);
            t0 = ru_now_ns();
            rc = ru_post_send(&p->rc, IBV_WR_RDMA_WRITE, p->src, 0, size, &p->peer_dst, 0, i,
                              IBV_SEND_SIGNALED);
            if (rc < 0 || (rc = spin_stamp(p, dst, size, st, &reaped, deadline, i)) < 0)
                return rc;
            t1 = ru_now_ns();
            if ((rc = reap_to(p, &reaped, (unsigned)i + 1, "the Write completion")) < 0)
                return rc;
            off = lat_check(p, dst, size, st, full);
            if (i + 1 == n - 1)
                memset(dst, 0, size);
            break;
        case PT_LAT_READ:
            if (full)
                memset(dst, 0, size);
            t0 = ru_now_ns();
            rc = ru_post_send(&p->rc, IBV_WR_RDMA_READ, p->dst, 0, size, &p->peer_src, 0, i,
                              IBV_SEND_SIGNALED);
            if (rc < 0 || (rc = ru_poll_n(p->rc.scq, wc, 1, deadline, "the RDMA Read")) < 0)
                return rc;
            t1 = ru_now_ns();
            if (full)
                off = ru_check(dst, size, p->peer_seed);
            break;
        case PT_LAT_TCP:
            ru_stamp(src, size, st);
            if (full)
                memset(dst, 0, size);
            t0 = ru_now_ns();
            if ((rc = ru_tcp_send_all(p->tcp, src, size, tcp_spin(size), deadline)) < 0 ||
                (rc = ru_tcp_recv_all(p->tcp, dst, size, tcp_spin(size), deadline)) < 0)
                return rc;
            t1 = ru_now_ns();
            off = lat_check(p, dst, size, st, full);
            break;
        case PT_LAT_TCP_RR: {
            uint64_t req[2] = {size, st};
            if (full)
                memset(dst, 0, size);
            t0 = ru_now_ns();
            if ((rc = ru_tcp_send_all(p->tcp, req, sizeof req, true, deadline)) < 0 ||
                (rc = ru_tcp_recv_all(p->tcp, dst, size, tcp_spin(size), deadline)) < 0)
                return rc;
            t1 = ru_now_ns();
            if (full)
                off = ru_check(dst, size, p->peer_seed);
            break;
        }
        default:
            ru_err("not a latency test: %d", test);
            return -EINVAL;
        }
        vf_note(&vf, off, i);
        if (i >= warmup)
            samples[i - warmup] = t1 - t0;
    }
    if (test == PT_LAT_SEND || test == PT_LAT_WRITE || test == PT_LAT_TCP)
        ru_unstamp(src, size, p->my_seed);

    struct ru_msg res;
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    return report_result(p, test, size, &res, &vf);
}

int perf_lat_set(struct perf *p, const int *tests, unsigned ntests, size_t size, unsigned iters,
                 unsigned warmup, unsigned rounds, struct lat_result *r)
{
    if (size < 8 || size % 8 || size > p->o.max_size || iters == 0 || ntests == 0) {
        ru_err("latency: bad size %zu or iteration count %u", size, iters);
        return -EINVAL;
    }
    if (rounds == 0)
        rounds = 1;
    if (rounds > iters)
        rounds = iters;
    uint64_t *samples = calloc((size_t)ntests * iters, sizeof *samples);
    if (!samples)
        return -ENOMEM;
    int rc = 0;
    for (unsigned k = 0; k < rounds && rc == 0; k++) {
        unsigned lo = (unsigned)((uint64_t)iters * k / rounds);
        unsigned hi = (unsigned)((uint64_t)iters * (k + 1) / rounds);
        unsigned w = k == 0 ? warmup : warmup / rounds;
        /* rotate the order from round to round */
        for (unsigned j = 0; j < ntests && rc == 0; j++) {
            unsigned t = (j + k) % ntests;
            rc = lat_run(p, tests[t], size, hi - lo, w, samples + (size_t)t * iters + lo);
        }
    }
    for (unsigned t = 0; t < ntests && rc == 0; t++) {
        uint64_t *s = samples + (size_t)t * iters;
        r[t].iters = iters;
        r[t].rounds = rounds;
        r[t].med_us = ru_percentile(s, iters, 50) / 1000.0;
        r[t].p99_us = ru_percentile(s, iters, 99) / 1000.0;
        r[t].min_us = (double)s[0] / 1000.0;
    }
    free(samples);
    return rc;
}

int perf_lat(struct perf *p, int test, size_t size, unsigned iters, unsigned warmup,
             struct lat_result *r)
{
    return perf_lat_set(p, &test, 1, size, iters, warmup, 1, r);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The WRs a bandwidth test keeps in flight. */
static unsigned bw_window(const struct perf *p, int test)
{
    unsigned window = p->o.window;
    if (test == PT_BW_READ) {
        /* Reads in flight are limited by our ORD and the peer's IRD. */
        unsigned lim = p->rc.ord;
        if (p->rc.peer_ird && p->rc.peer_ird < lim)
            lim = p->rc.peer_ird;
        if (lim && window > lim)
            window = lim;
    }
    return test == PT_BW_TCP ? 0 : window;
}

/* One bandwidth run of `iters` messages; *gbps its result. */
static int bw_run(struct perf *p, int test, size_t size, unsigned iters, unsigned rep, double *gbps)
{
    unsigned window = bw_window(p, test);
    uint8_t *dst = p->dst->addr;
    int rc = 0;
    struct vfail vf = {0};
    unsigned reaped = 0;
    ++p->serial;
    if (test == PT_BW_READ)
        memset(dst, 0, size);
    if ((rc = perf_begin(p, test, size, iters, 0, rep)) < 0)
        return rc;
    if ((test == PT_BW_SEND || test == PT_BW_WRITE) &&
        (rc = ru_post_recv(&p->rc, p->small, PERF_SMALL_RECV, 64, ACK_WR_ID)) < 0)
        return rc;
    uint64_t t0 = ru_now_ns(), t1;
    uint64_t bulk_deadline = ru_deadline(bulk_timeout(p, (uint64_t)iters * size));
    switch (test) {
    case PT_BW_WRITE:
    case PT_BW_SEND:
        rc =
            windowed(p, test == PT_BW_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_SEND, size, iters, window);
        if (rc < 0)
            return rc;
        /* After Writes, a Send: delivered only once the Writes are
         * placed (RFC 5040 §5.5 ordering); the server answers it. */
        if (test == PT_BW_WRITE && (rc = post_small_send(p, iters, DONE_WR_ID)) < 0)
            return rc;
        if ((rc = wait_small_recv(p, bulk_deadline, &reaped, "the server's ack")) < 0)
            return rc;
        t1 = ru_now_ns();
        if (test == PT_BW_WRITE && (rc = reap_to(p, &reaped, 1, "the done Send")) < 0)
            return rc;
        break;
    case PT_BW_READ:
        if ((rc = windowed(p, IBV_WR_RDMA_READ, size, iters, window)) < 0)
            return rc;
        t1 = ru_now_ns();
        vf_note(&vf, ru_check(dst, size, p->peer_seed), iters - 1);
        break;
    case PT_BW_TCP: {
        for (unsigned i = 0; i < iters; i++)
            if ((rc = ru_tcp_send_all(p->tcp, p->src->addr, size, false, bulk_deadline)) < 0)
                return rc;
        uint8_t ack;
        if ((rc = ru_tcp_recv_all(p->tcp, &ack, 1, false, bulk_deadline)) < 0)
            return rc;
        t1 = ru_now_ns();
        break;
    }
    default:
        ru_err("not a bandwidth test: %d", test);
        return -EINVAL;
    }
    struct ru_msg res;
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    if ((rc = report_result(p, test, size, &res, &vf)) < 0)
        return rc;
    *gbps = (double)iters * (double)size / (double)(t1 - t0); /* bytes/ns = GB/s */
    return 0;
}

int perf_bw_set(struct perf *p, const int *tests, unsigned ntests, size_t size, unsigned iters,
                unsigned reps, struct bw_result *r)
{
    if (size < 8 || size % 8 || size > p->o.max_size || iters == 0 || reps == 0 || ntests == 0) {
        ru_err("bandwidth: bad size %zu, iteration count %u or repetitions %u", size, iters, reps);
        return -EINVAL;
    }
    if (iters > p->o.max_bw_iters)
        iters = p->o.max_bw_iters;
    double *g = calloc((size_t)ntests * reps, sizeof *g), warm;
    if (!g)
        return -ENOMEM;
    int rc = 0;
    /* one warm-up run of each, then the runs alternate between the tests */
    for (unsigned t = 0; t < ntests && rc == 0; t++)
        rc = bw_run(p, tests[t], size, iters, 0, &warm);
    for (unsigned k = 0; k < reps && rc == 0; k++)
        for (unsigned j = 0; j < ntests && rc == 0; j++) {
            unsigned t = (j + k) % ntests;
            rc = bw_run(p, tests[t], size, iters, k + 1, &g[(size_t)t * reps + k]);
        }
    for (unsigned t = 0; t < ntests && rc == 0; t++) {
        double *v = g + (size_t)t * reps;
        qsort(v, reps, sizeof *v, cmp_double);
        r[t].gbps = reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
        r[t].min_gbps = v[0];
        r[t].max_gbps = v[reps - 1];
        r[t].iters = iters;
        r[t].reps = reps;
        r[t].window = bw_window(p, tests[t]);
    }
    free(g);
    return rc;
}

int perf_bw(struct perf *p, int test, size_t size, unsigned iters, unsigned reps,
            struct bw_result *r)
{
    return perf_bw_set(p, &test, 1, size, iters, reps, r);
}
