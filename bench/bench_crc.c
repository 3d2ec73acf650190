/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC32C throughput (uiw_crc32c, ISA-L underneath) beside memcpy on the
 * same buffers, for 64 B, 1 KiB, 64 KiB and 1 MiB.
 *
 * Each size works on a pool of buffers that fits the last-level cache
 * (4 MiB, or one buffer for 1 MiB), walking through it so that small sizes
 * are not just one hot cache line. For each size and operation the
 * iteration count is calibrated to run about 0.1 s, then the best of three
 * runs is reported: the whole program takes about 3 s.
 *
 * usage: bench_crc [seconds-per-measurement]   (default 0.1)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uiwarp/wire.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Called through a volatile pointer so that the copies cannot be folded. */
static void *(*volatile copy_fn)(void *, const void *, size_t) = memcpy;
static volatile uint32_t sink;

#define POOL_BYTES ((size_t)4 << 20)

struct work {
    uint8_t *src, *dst;
    size_t size, nbufs;
};

static void run_crc(const struct work *w, unsigned long iters)
{
    uint32_t acc = 0;
    size_t b = 0;
    for (unsigned long i = 0; i < iters; i++) {
        acc ^= uiw_crc32c(w->src + b * w->size, w->size);
        if (++b == w->nbufs)
            b = 0;
    }
    sink = acc;
}

static void run_copy(const struct work *w, unsigned long iters)
{
    size_t b = 0;
    for (unsigned long i = 0; i < iters; i++) {
        copy_fn(w->dst + b * w->size, w->src + b * w->size, w->size);
        if (++b == w->nbufs)
            b = 0;
    }
    sink = w->dst[0];
}

/* GB/s (1e9 bytes per second), best of 3 runs of about `secs` each. */
static double measure(void (*fn)(const struct work *, unsigned long), const struct work *w,
                      double secs)
{
    unsigned long iters = 16;
    double t, best = 0;

    /* calibrate: grow until one run takes at least secs / 8 */
    for (;;) {
        double t0 = now();
        fn(w, iters);
        t = now() - t0;
        if (t >= secs / 8 || iters > (1ul << 40))
            break;
        iters *= 2;
    }
    iters = (unsigned long)((double)iters * (secs / (t > 0 ? t : 1e-9)));
    if (iters < 1)
        iters = 1;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        fn(w, iters);
        t = now() - t0;
        double gbs = (double)iters * (double)w->size / t / 1e9;
        if (gbs > best)
            best = gbs;
    }
    return best;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {64, 1024, 64 * 1024, 1024 * 1024};
    double secs = argc > 1 ? atof(argv[1]) : 0.1;
    uint8_t *src = aligned_alloc(4096, POOL_BYTES), *dst = aligned_alloc(4096, POOL_BYTES);

    if (!src || !dst || secs <= 0) {
        fprintf(stderr, "usage: %s [seconds-per-measurement > 0]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < POOL_BYTES; i++)
        src[i] = (uint8_t)(i * 2654435761u >> 13);
    memset(dst, 0, POOL_BYTES);

    /* sanity: the path we time is the real CRC32C */
    if (uiw_crc32c("123456789", 9) != 0xE3069283u) {
        fprintf(stderr, "CRC32C self-check failed\n");
        return 1;
    }

    printf("%-8s %12s %12s %8s\n", "size", "crc32c GB/s", "memcpy GB/s", "ratio");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        struct work w = {src, dst, sizes[i], POOL_BYTES / sizes[i]};
        if (w.size >= ((size_t)1 << 20))
            w.nbufs = 1;
        double crc = measure(run_crc, &w, secs);
        double cpy = measure(run_copy, &w, secs);
        char label[32];
        if (w.size >= 1024 * 1024)
            snprintf(label, sizeof(label), "%zu MiB", w.size >> 20);
        else if (w.size >= 1024)
            snprintf(label, sizeof(label), "%zu KiB", w.size >> 10);
        else
            snprintf(label, sizeof(label), "%zu B", w.size);
        printf("%-8s %12.2f %12.2f %8.2f\n", label, crc, cpy, crc / cpy);
    }
    free(src);
    free(dst);
    return 0;
}
