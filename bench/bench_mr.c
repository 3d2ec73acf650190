/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory registration and STag lookup cost of the engine (src/engine/mem.c):
 *
 *   reg+dereg   ibv_reg_mr + ibv_dereg_mr pairs per second of a 4 KiB buffer
 *               in a PD that holds LIVE other MRs (default 1000)
 *   lookup hit  ns per uiw_mr_get + uiw_mr_put of a live STag (the receive
 *               path's check of every tagged segment), STags taken in a
 *               shuffled order so that it is not one hot entry
 *   lookup miss ns per uiw_mr_get of a random STag that names no MR
 *
 * Best of three runs of about 0.2 s each.
 *
 * usage: bench_mr [live-MRs]   (default 1000)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint32_t rnd32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static volatile uintptr_t sink;

int main(int argc, char **argv)
{
    unsigned live = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 0) : 1000;
    struct ibv_device **l;
    struct ibv_context *ctx = NULL;
    struct ibv_pd *pd;
    int n;

    if (live < 1 || live > 1000000) {
        fprintf(stderr, "usage: bench_mr [live-MRs 1..1000000]\n");
        return 2;
    }
    l = ibv_get_device_list(&n);
    for (int i = 0; l && i < n && !ctx; i++)
        if (strcmp(ibv_get_device_name(l[i]), "uiw_lo") == 0)
            ctx = ibv_open_device(l[i]);
    ibv_free_device_list(l);
    if (!ctx || !(pd = ibv_alloc_pd(ctx))) {
        fprintf(stderr, "bench_mr: no uiw_lo device\n");
        return 1;
    }
    static char buf[4096];
    struct ibv_mr **mrs = calloc(live, sizeof(*mrs));
    uint32_t *stags = calloc(live, sizeof(*stags));
    for (unsigned i = 0; i < live; i++) {
        mrs[i] = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (!mrs[i]) {
            fprintf(stderr, "bench_mr: reg_mr %u: %s\n", i, strerror(errno));
            return 1;
        }
        stags[i] = mrs[i]->rkey;
    }
    for (unsigned i = live - 1; i > 0; i--) { /* shuffle */
        unsigned j = rnd32() % (i + 1);
        uint32_t t = stags[i];
        stags[i] = stags[j], stags[j] = t;
    }

    double best_reg = 0, best_hit = 1e9, best_miss = 1e9;
    for (int run = 0; run < 3; run++) {
        unsigned long k = 0;
        double t0 = now(), t;
        do {
            for (int j = 0; j < 256; j++, k++) {
                struct ibv_mr *m = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
                if (!m || ibv_dereg_mr(m)) {
                    fprintf(stderr, "bench_mr: reg/dereg failed\n");
                    return 1;
                }
            }
        } while ((t = now() - t0) < 0.2);
        if (k / t > best_reg)
            best_reg = k / t;

        k = 0;
        t0 = now();
        do {
            for (int j = 0; j < 4096; j++, k++) {
                uint8_t *addr;
                enum uiw_mem_err e;
                struct uiw_mr *m = uiw_mr_get(to_upd(pd), stags[k % live], (uintptr_t)buf, 64,
                                              IBV_ACCESS_REMOTE_WRITE, &addr, &e);
                if (!m) {
                    fprintf(stderr, "bench_mr: lookup of a live STag failed\n");
                    return 1;
                }
                sink += (uintptr_t)addr;
                uiw_mr_put(m);
            }
        } while ((t = now() - t0) < 0.2);
        if (t / k * 1e9 < best_hit)
            best_hit = t / k * 1e9;

        k = 0;
        unsigned long found = 0;
        t0 = now();
        do {
            for (int j = 0; j < 4096; j++, k++) {
                uint8_t *addr;
                enum uiw_mem_err e;
                struct uiw_mr *m =
                    uiw_mr_get(to_upd(pd), rnd32(), 0, 64, IBV_ACCESS_REMOTE_WRITE, &addr, &e);
                found += m != NULL;
                uiw_mr_put(m);
            }
        } while ((t = now() - t0) < 0.2);
        if (t / k * 1e9 < best_miss)
            best_miss = t / k * 1e9;
        sink += found;
    }
    printf("live MRs %u: reg+dereg %.0f pairs/s (%.2f us per pair), lookup hit %.1f ns, "
           "lookup miss %.1f ns\n",
           live, best_reg, 1e6 / best_reg, best_hit, best_miss);
    for (unsigned i = 0; i < live; i++)
        ibv_dereg_mr(mrs[i]);
    free(mrs);
    free(stags);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    return 0;
}
