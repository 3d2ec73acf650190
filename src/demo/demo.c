/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp-demo: RDMA over uiwarp between two processes on this machine.
 *
 * Forks a server and a client; they connect one RC queue pair over TCP
 * loopback with the engine's connection manager (the server listens on
 * port 0 and passes the port it got to the client), then the client
 *  1. exercises Send/Recv (both ways), RDMA Write, RDMA Read, Fetch-and-Add
 *     and Compare-and-Swap, every byte and every atomic value checked;
 *  2. measures round-trip latency (8 B, 4 KiB, 64 KiB) and streaming
 *     bandwidth (64 KiB, 1 MiB) of Send, Write and Read, beside raw TCP
 *     over another loopback connection between the same two processes,
 *     measured in the same run (method: src/demo/perf.h).
 * Exits non-zero if anything was wrong or failed.
 *
 * usage: uiwarp-demo [-q] [-P]   (-q: fewer iterations, for a quick check;
 *                                -P: do not pin the processes to two CPUs)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

enum { DT_SENDRECV = PT_USER, DT_WRITE, DT_READ, DT_ATOMIC };

#define SR_SIZE    4096
#define WR_SIZE    65536
#define RD_SIZE    65536
#define RD2_OFF    4099 /* an unaligned Read: remote offset, length */
#define RD2_LEN    3000
#define ATOMIC_V0  UINT64_C(0x0123456789abcdef)
#define ATOMIC_ADD UINT64_C(0x1111)
#define ATOMIC_SWP UINT64_C(0xfeedfacecafebeef)

static bool quick;

static struct perf_opts demo_opts(void)
{
    struct perf_opts o = {
        .max_size = 1 << 20, .window = 16, .max_bw_iters = 4096, .timeout_ms = 10000};
    return o;
}

/* ---------------------------------------------------------------- server */
static int server_user(struct perf *p, const struct ru_msg *cmd, struct ru_msg *res)
{
    uint8_t *dst = p->dst->addr;
    uint64_t *word = (uint64_t *)((uint8_t *)p->small->addr + PERF_SMALL_ATOMIC);
    struct ibv_wc wc;
    int rc;

    switch ((int)cmd->a) {
    case DT_SENDRECV:
        memset(dst, 0, SR_SIZE);
        if ((rc = ru_post_recv(&p->rc, p->dst, 0, SR_SIZE, 1)) < 0 || (rc = perf_ready(p)) < 0)
            return rc;
        if ((rc = ru_wait_cq(&p->rc, p->rc.rcq, &wc, p->o.timeout_ms, "the client's Send")) < 0)
            return rc;
        res->a = wc.byte_len;
        res->b = (uint64_t)ru_check(dst, SR_SIZE, p->peer_seed);
        res->c = wc.opcode;
        if (wc.byte_len != SR_SIZE || wc.opcode != IBV_WC_RECV || (long)res->b != -1)
            res->status = -EBADMSG;
        /* and one back (the client posted its receive before asking) */
        rc = ru_post_send(&p->rc, IBV_WR_SEND, p->src, 0, SR_SIZE, NULL, 0, 2, IBV_SEND_SIGNALED);
        if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "our Send")) < 0)
            return rc;
        return perf_wait_finish(p);

    case DT_WRITE:
        memset(dst, 0, WR_SIZE);
        if ((rc = ru_post_recv(&p->rc, p->small, PERF_SMALL_RECV, 64, 3)) < 0 ||
            (rc = perf_ready(p)) < 0)
            return rc;
        rc = ru_wait_cq(&p->rc, p->rc.rcq, &wc, p->o.timeout_ms, "the Send after the Write");
        if (rc < 0)
            return rc;
        /* The Send is delivered after the Write before it is placed. */
        res->b = (uint64_t)ru_check(dst, WR_SIZE, p->peer_seed);
        if ((long)res->b != -1)
            res->status = -EBADMSG;
        return perf_wait_finish(p);

    case DT_READ:
        if ((rc = perf_ready(p)) < 0)
            return rc;
        return perf_wait_finish(p); /* one-sided: this process makes no call */

    case DT_ATOMIC:
        __atomic_store_n(word, ATOMIC_V0, __ATOMIC_SEQ_CST);
        if ((rc = perf_ready(p)) < 0 || (rc = perf_wait_finish(p)) < 0)
            return rc;
        res->a = __atomic_load_n(word, __ATOMIC_SEQ_CST);
        if (res->a != ATOMIC_SWP)
            res->status = -EBADMSG;
        return 0;
    }
    ru_err("unknown demo test %llu", (unsigned long long)cmd->a);
    return -EINVAL;
}

static int server_main(int ctl, void *arg)
{
    (void)arg;
    struct perf p;
    struct perf_opts o = demo_opts();
    int rc = perf_setup(&p, ctl, true, &o);
    if (rc == 0)
        rc = perf_serve(&p, server_user);
    int rc2 = perf_teardown(&p);
    return rc ? rc : rc2;
}

/* ---------------------------------------------------------------- client */
static int failures;

static void verdict(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(bool ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    if (!ok)
        failures++;
}

static int demo_sendrecv(struct perf *p)
{
    uint8_t *dst = p->dst->addr;
    struct ibv_wc wc;
    struct ru_msg res;
    int rc;
    memset(dst, 0, SR_SIZE);
    if ((rc = ru_post_recv(&p->rc, p->dst, 0, SR_SIZE, 10)) < 0 ||
        (rc = perf_begin(p, DT_SENDRECV, SR_SIZE, 1, 0, 0)) < 0)
        return rc;
    rc = ru_post_send(&p->rc, IBV_WR_SEND, p->src, 0, SR_SIZE, NULL, 0, 11, IBV_SEND_SIGNALED);
    if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "our Send")) < 0)
        return rc;
    if ((rc = ru_wait_cq(&p->rc, p->rc.rcq, &wc, p->o.timeout_ms, "the server's Send")) < 0)
        return rc;
    long bad = ru_check(dst, SR_SIZE, p->peer_seed);
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    verdict(res.status == 0, "Send/Recv         4 KiB client -> server: %llu bytes received, %s",
            (unsigned long long)res.a, (long)res.b == -1 ? "every byte as sent" : "DATA DIFFER");
    verdict(wc.byte_len == SR_SIZE && wc.opcode == IBV_WC_RECV && bad == -1,
            "Send/Recv         4 KiB server -> client: %u bytes received, %s", wc.byte_len,
            bad == -1 ? "every byte as sent" : "DATA DIFFER");
    return 0;
}

static int demo_write(struct perf *p)
{
    struct ibv_wc wc;
    struct ru_msg res;
    int rc;
    if ((rc = perf_begin(p, DT_WRITE, WR_SIZE, 1, 0, 0)) < 0)
        return rc;
    rc = ru_post_send(&p->rc, IBV_WR_RDMA_WRITE, p->src, 0, WR_SIZE, &p->peer_dst, 0, 20,
                      IBV_SEND_SIGNALED);
    if (rc < 0)
        return rc;
    uint64_t v = WR_SIZE;
    memcpy((uint8_t *)p->small->addr + PERF_SMALL_SEND, &v, 8);
    rc = ru_post_send(&p->rc, IBV_WR_SEND, p->small, PERF_SMALL_SEND, 8, NULL, 0, 21,
                      IBV_SEND_SIGNALED);
    if (rc < 0)
        return rc;
    for (int k = 0; k < 2; k++)
        if ((rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "the Write and Send")) < 0)
            return rc;
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    verdict(res.status == 0, "RDMA Write       64 KiB into the server's memory (then a Send): %s",
            res.status == 0 ? "the server found every byte in place" : "DATA DIFFER at the server");
    return 0;
}

static int demo_read(struct perf *p)
{
    uint8_t *dst = p->dst->addr;
    struct ibv_wc wc;
    struct ru_msg res;
    int rc;
    memset(dst, 0, RD_SIZE);
    if ((rc = perf_begin(p, DT_READ, RD_SIZE, 1, 0, 0)) < 0)
        return rc;
    rc = ru_post_send(&p->rc, IBV_WR_RDMA_READ, p->dst, 0, RD_SIZE, &p->peer_src, 0, 30,
                      IBV_SEND_SIGNALED);
    if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "the Read")) < 0)
        return rc;
    long bad = ru_check(dst, RD_SIZE, p->peer_seed);
    /* an unaligned one: RD2_LEN bytes from remote offset RD2_OFF to local offset 5 */
    memset(dst, 0, RD2_LEN + 16);
    rc = ru_post_send(&p->rc, IBV_WR_RDMA_READ, p->dst, 5, RD2_LEN, &p->peer_src, RD2_OFF, 31,
                      IBV_SEND_SIGNALED);
    if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "the Read")) < 0)
        return rc;
    bool ok2 = true;
    for (size_t j = 0; j < RD2_LEN + 16; j++) {
        uint8_t want = (j >= 5 && j < 5 + RD2_LEN) ? ru_pat(p->peer_seed, RD2_OFF + j - 5) : 0;
        if (dst[j] != want)
            ok2 = false;
    }
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    verdict(bad == -1 && res.status == 0, "RDMA Read        64 KiB of the server's memory: %s",
            bad == -1 ? "every byte as the server has it" : "DATA DIFFER");
    verdict(ok2, "RDMA Read      %u bytes at remote offset %u to local offset 5: %s", RD2_LEN,
            RD2_OFF, ok2 ? "exact, nothing written outside" : "DATA DIFFER");
    return 0;
}

static int demo_atomic(struct perf *p)
{
    uint64_t *r = (uint64_t *)((uint8_t *)p->small->addr + PERF_SMALL_RESULT);
    struct ibv_wc wc;
    struct ru_msg res;
    int rc;
    memset(r, 0, 32);
    if ((rc = perf_begin(p, DT_ATOMIC, 8, 1, 0, 0)) < 0)
        return rc;
    rc = ru_post_atomic(&p->rc, IBV_WR_ATOMIC_FETCH_AND_ADD, p->small, PERF_SMALL_RESULT,
                        &p->peer_small, PERF_SMALL_ATOMIC, ATOMIC_ADD, 0, 40);
    if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "Fetch-and-Add")) < 0)
        return rc;
    rc = ru_post_atomic(&p->rc, IBV_WR_ATOMIC_CMP_AND_SWP, p->small, PERF_SMALL_RESULT + 8,
                        &p->peer_small, PERF_SMALL_ATOMIC, ATOMIC_V0 + ATOMIC_ADD, ATOMIC_SWP, 41);
    if (rc < 0 ||
        (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "Compare-and-Swap")) < 0)
        return rc;
    rc = ru_post_atomic(&p->rc, IBV_WR_ATOMIC_CMP_AND_SWP, p->small, PERF_SMALL_RESULT + 16,
                        &p->peer_small, PERF_SMALL_ATOMIC, ATOMIC_V0, 0, 42);
    if (rc < 0 ||
        (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "Compare-and-Swap")) < 0)
        return rc;
    rc = ru_post_send(&p->rc, IBV_WR_RDMA_READ, p->small, PERF_SMALL_RESULT + 24, 8, &p->peer_small,
                      PERF_SMALL_ATOMIC, 43, IBV_SEND_SIGNALED);
    if (rc < 0 || (rc = ru_wait_cq(&p->rc, p->rc.scq, &wc, p->o.timeout_ms, "the Read")) < 0)
        return rc;
    if ((rc = perf_end(p, &res)) < 0)
        return rc;
    verdict(r[0] == ATOMIC_V0,
            "Fetch-and-Add    +0x%" PRIx64 " on 0x%016" PRIx64 ": fetched 0x%016" PRIx64,
            ATOMIC_ADD, ATOMIC_V0, r[0]);
    verdict(r[1] == ATOMIC_V0 + ATOMIC_ADD,
            "Compare-and-Swap 0x%016" PRIx64 " -> 0x%016" PRIx64 ": fetched 0x%016" PRIx64
            " (equal: swapped)",
            ATOMIC_V0 + ATOMIC_ADD, ATOMIC_SWP, r[1]);
    verdict(r[2] == ATOMIC_SWP,
            "Compare-and-Swap with a stale compare value: fetched 0x%016" PRIx64
            " (not equal: left alone)",
            r[2]);
    verdict(r[3] == ATOMIC_SWP && res.a == ATOMIC_SWP,
            "the word afterwards: 0x%016" PRIx64 " by RDMA Read, 0x%016" PRIx64
            " in the server's memory",
            r[3], res.a);
    return 0;
}

/* ------------------------------------------------------------ measuring */
static const size_t lat_sizes[] = {8, 4096, 65536};
static const size_t bw_sizes[] = {65536, 1 << 20};
static const int lat_tests[] = {PT_LAT_SEND, PT_LAT_WRITE, PT_LAT_READ, PT_LAT_TCP, PT_LAT_TCP_RR};
static const int bw_tests[] = {PT_BW_SEND, PT_BW_WRITE, PT_BW_READ, PT_BW_TCP};

#define NLS (sizeof lat_sizes / sizeof *lat_sizes)
#define NBS (sizeof bw_sizes / sizeof *bw_sizes)

static int measure(struct perf *p)
{
    struct lat_result lat[NLS][5];
    struct bw_result bw[NBS][4];
    char sz[32], g1[24], g2[24];
    int rc;
    unsigned reps = quick ? 3 : 5;
    uint64_t bw_bytes = quick ? (32u << 20) : (128u << 20);

    for (size_t s = 0; s < NLS; s++) {
        unsigned iters = lat_sizes[s] <= 4096 ? 5000 : 2000;
        if (quick)
            iters /= 10;
        if ((rc = perf_lat_set(p, lat_tests, 5, lat_sizes[s], iters, iters / 10, 5, lat[s])) < 0)
            return rc;
    }
    for (size_t s = 0; s < NBS; s++) {
        unsigned iters = (unsigned)(bw_bytes / bw_sizes[s]);
        if ((rc = perf_bw_set(p, bw_tests, 4, bw_sizes[s], iters, reps, bw[s])) < 0)
            return rc;
    }

    printf("\nLatency: one round trip, microseconds, median / p99 of %u (8 B, 4 KiB) and %u "
           "(64 KiB) round trips\nafter warm-up, in %u rounds alternating uiwarp and TCP; both "
           "processes busy-poll (CQ /\nnon-blocking socket), each on its own CPU. Same size both "
           "ways, except Read, compared with\na TCP 16-byte request answered by the data.\n\n",
           lat[0][0].iters, lat[NLS - 1][0].iters, lat[0][0].rounds);
    printf("  %-6s %-8s %19s  %19s  %10s\n", "op", "size", "uiwarp", "raw TCP", "uiwarp/TCP");
    static const char *lat_names[] = {"Send", "Write", "Read"};
    for (size_t t = 0; t < 3; t++) {
        for (size_t s = 0; s < NLS; s++) {
            const struct lat_result *u = &lat[s][t], *k = &lat[s][t == 2 ? 4 : 3];
            printf("  %-6s %-8s %8.1f / %8.1f  %8.1f / %8.1f  %9.2fx\n", lat_names[t],
                   ru_size_str(lat_sizes[s], sz, sizeof sz), u->med_us, u->p99_us, k->med_us,
                   k->p99_us, u->med_us / k->med_us);
        }
    }
    printf("\nBandwidth: GB/s (1e9 bytes/s), median of %u runs after a warm-up run, alternating "
           "uiwarp and TCP;\na run ends when the receiver has all of %llu MiB. uiwarp keeps %u WRs "
           "in flight (Read: %u),\npolling the CQ; TCP is one stream, one send() per message, "
           "sleeping in poll(2).\n\n",
           reps, (unsigned long long)(bw_bytes >> 20), bw[0][0].window, bw[0][2].window);
    printf("  %-6s %-8s %8s  %8s  %10s\n", "op", "size", "uiwarp", "raw TCP", "uiwarp/TCP");
    static const char *bw_names[] = {"Send", "Write", "Read"};
    for (size_t t = 0; t < 3; t++)
        for (size_t s = 0; s < NBS; s++)
            printf("  %-6s %-8s %8s  %8s  %9.2fx\n", bw_names[t],
                   ru_size_str(bw_sizes[s], sz, sizeof sz),
                   ru_gbps_str(bw[s][t].gbps, g1, sizeof g1),
                   ru_gbps_str(bw[s][3].gbps, g2, sizeof g2), bw[s][t].gbps / bw[s][3].gbps);
    return 0;
}

static int client_main(int ctl, void *arg)
{
    (void)arg;
    struct perf p;
    struct perf_opts o = demo_opts();
    uint64_t t0 = ru_now_ns();
    int rc = perf_setup(&p, ctl, false, &o);
    if (rc == 0) {
        printf("Connected: one RC queue pair on %s, %s (the server listened on port 0 and "
               "was given %u)\n"
               "and a raw TCP connection (TCP_NODELAY) on port %u between the same two "
               "processes.\n\n",
               RU_DEVICE, p.rc.desc, p.rdma_port, p.tcp_port);
        fflush(stdout);
        if ((rc = demo_sendrecv(&p)) == 0 && (rc = demo_write(&p)) == 0 &&
            (rc = demo_read(&p)) == 0 && (rc = demo_atomic(&p)) == 0)
            rc = measure(&p);
    }
    if (rc == -EBADMSG) { /* a measurement found wrong data (printed) */
        failures++;
        rc = 0;
    }
    int rc2 = perf_teardown(&p);
    if (rc2 < 0)
        ru_err("disconnect did not complete cleanly");
    printf("\n");
    if (rc == 0 && rc2 == 0 && failures == 0)
        printf("uiwarp-demo: all data verified, %.1f s\n", (double)(ru_now_ns() - t0) / 1e9);
    else if (failures)
        printf("uiwarp-demo: FAILED: %d wrong result%s (see above)\n", failures,
               failures == 1 ? "" : "s");
    else
        printf("uiwarp-demo: FAILED: an error (see above)\n");
    fflush(stdout);
    return rc < 0 || rc2 < 0 || failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-q") == 0)
            quick = true;
        else if (strcmp(argv[i], "-P") == 0)
            ru_pin_cpus = false;
        else {
            fprintf(stderr, "usage: %s [-q]\n  -q  fewer iterations (a quick check)\n", argv[0]);
            return strcmp(argv[i], "-h") && strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("uiwarp-demo: a server and a client process, RDMA over uiwarp's userspace iWARP "
           "(TCP loopback)\n");
    int rc = ru_run_pair(server_main, client_main, NULL, quick ? 60 : 90);
    if (rc != 0)
        fprintf(stderr, "uiwarp-demo: failed (see the messages above)\n");
    return rc == 0 ? 0 : 1;
}
