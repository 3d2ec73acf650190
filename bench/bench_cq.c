/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Cost of an empty ibv_poll_cq on a CQ shared by N connected QPs
 * (docs/ENGINE.md "Threads, locks, progress", poll-driven progress): the
 * poll looks for work on the attached QPs; it must not cost more with more
 * QPs. QP pairs are connected over socket pairs with the engine's
 * uiw_qp_attach_socket (its static build), one side of each on the shared
 * CQ, the other on a second CQ. Prints N, ns per empty poll (median of
 * five runs of 20000 polls), and the spread.
 *
 * usage: bench_cq [N ...]   (default 1 4 16 100 1000 2000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
    struct ibv_qp_init_attr a;

    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return ibv_create_qp(pd, &a);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(struct ibv_context *ctx, unsigned n)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *shared = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *other = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp **qa = calloc(n, sizeof(*qa)), **qb = calloc(n, sizeof(*qb));
    uiw_mpa_result m;
    double t[5];
    unsigned made = 0;
    int rc = 0;

    if (!pd || !shared || !other || !qa || !qb) {
        fprintf(stderr, "bench_cq: out of resources\n");
        return 1;
    }
    memset(&m, 0, sizeof(m));
    m.rev = 2;
    m.enhanced = true;
    m.ird = m.ord = m.peer_ird = m.peer_ord = 1;
    for (; made < n; made++) {
        int sv[2];

        qa[made] = make_qp(pd, shared);
        qb[made] = make_qp(pd, other);
        if (!qa[made] || !qb[made] || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
            fprintf(stderr, "bench_cq: QP pair %u: %s\n", made, strerror(errno));
            rc = 1;
            break;
        }
        if (uiw_qp_attach_socket(to_uqp(qa[made]), sv[0], &m) < 0 ||
            uiw_qp_attach_socket(to_uqp(qb[made]), sv[1], &m) < 0) {
            fprintf(stderr, "bench_cq: attach %u failed\n", made);
            rc = 1;
            made++;
            break;
        }
    }
    if (!rc) {
        struct ibv_wc wc;
        const int polls = 20000;

        for (int i = 0; i < 1000; i++) /* warm up */
            (void)ibv_poll_cq(shared, 1, &wc);
        for (int r = 0; r < 5; r++) {
            double t0 = now_ns();
            for (int i = 0; i < polls; i++)
                if (ibv_poll_cq(shared, 1, &wc) != 0)
                    rc = 1;
            t[r] = (now_ns() - t0) / polls;
        }
        qsort(t, 5, sizeof(t[0]), cmp_d);
        printf("%6u QPs: %9.0f ns per empty ibv_poll_cq (min %.0f, max %.0f)%s\n", n, t[2], t[0],
               t[4], rc ? " (a poll found a completion)" : "");
    }
    for (unsigned i = 0; i < n; i++) {
        if (qa[i])
            ibv_destroy_qp(qa[i]);
        if (qb[i])
            ibv_destroy_qp(qb[i]);
    }
    free(qa);
    free(qb);
    ibv_destroy_cq(shared);
    ibv_destroy_cq(other);
    ibv_dealloc_pd(pd);
    return rc;
}

int main(int argc, char **argv)
{
    static const unsigned def[] = {1, 4, 16, 100, 1000, 2000};
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
    struct rlimit rl;
    int rc = 0;

    if (!ctx) {
        fprintf(stderr, "bench_cq: no device\n");
        return 1;
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            rc |= run(ctx, (unsigned)strtoul(argv[i], NULL, 10));
    } else {
        for (unsigned i = 0; i < sizeof(def) / sizeof(def[0]); i++)
            rc |= run(ctx, def[i]);
    }
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return rc;
}
