/*
 * bench_wake: how long a thread woken from a blocking read waits for a CPU
 * when every CPU runs a thread that spins in user space.
 *
 * That is the position of uiwarp's progress thread under a program that
 * spins on memory (perftest's ib_write_lat: both processes' application
 * threads spin, so on a 2-CPU machine the thread that places the peer's
 * Write must take a CPU from a spinner). Its tail latency can be no better
 * than this machine's wake-up tail, whatever the library does, so
 * docs/PERFORMANCE.md reports the two side by side.
 *
 * One spinner per CPU the process may use; spinner 0 writes its clock to an
 * eventfd every 1 ms, a sleeping thread reads it and records how late it
 * ran. Three cases: CPUs idle (no spinners), spinners with the default
 * scheduling of the sleeper, spinners with the sleeper asking for a 100 us
 * slice (sched_setattr's sched_runtime for SCHED_OTHER, honoured by Linux
 * 6.12 and later; older kernels ignore it).
 *
 *   bench_wake [-n samples]     (default 3000, 1 ms apart per case)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* the kernel's struct sched_attr (glibc 2.36 does not declare it) */
struct wake_sched_attr {
    uint32_t size, sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
    uint32_t sched_util_min, sched_util_max;
};

static int efd;
static atomic_bool stop;
static unsigned nsamples = 3000;
static double *lat_us;
static unsigned nlat;
static uint64_t slice_ns; /* 0: default */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *sleeper(void *arg)
{
    uint64_t v;

    (void)arg;
    if (slice_ns) {
        struct wake_sched_attr a;

        memset(&a, 0, sizeof(a));
        a.size = sizeof(a);
        a.sched_runtime = slice_ns;
        if (syscall(SYS_sched_setattr, 0, &a, 0) < 0)
            fprintf(stderr, "bench_wake: sched_setattr: %s\n", strerror(errno));
    }
    while (read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
        uint64_t t = now_ns();

        if (v == 1) /* the end */
            break;
        if (nlat < nsamples && t >= v)
            lat_us[nlat++] = (double)(t - v) / 1000.0;
    }
    return NULL;
}

/* spinner 0 (or, without spinners, the main thread) is the waker */
static void wake_loop(void)
{
    uint64_t next = now_ns() + 1000000;

    for (unsigned n = 0; n < nsamples;) {
        uint64_t t = now_ns();

        if (t < next)
            continue;
        if (write(efd, &t, sizeof(t)) != (ssize_t)sizeof(t))
            break;
        next = t + 1000000;
        n++;
        /* the sleeper has read the value before the next one is written
         * (1 ms later), so eventfd's sum never mixes two clocks */
    }
    atomic_store(&stop, true);
}

static void *spinner(void *arg)
{
    if ((intptr_t)arg == 0)
        wake_loop();
    else
        while (!atomic_load_explicit(&stop, memory_order_relaxed))
            ;
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static int run_case(const char *name, unsigned nspin, uint64_t slice)
{
    pthread_t sl, sp[CPU_SETSIZE];
    uint64_t end = 1;

    nlat = 0;
    slice_ns = slice;
    atomic_store(&stop, false);
    if (pthread_create(&sl, NULL, sleeper, NULL))
        return -1;
    usleep(10000);
    if (nspin == 0) {
        wake_loop();
    } else {
        for (unsigned i = 0; i < nspin; i++)
            if (pthread_create(&sp[i], NULL, spinner, (void *)(intptr_t)i))
                return -1;
        for (unsigned i = 0; i < nspin; i++)
            pthread_join(sp[i], NULL);
    }
    usleep(5000); /* the last sample is read before the end marker */
    if (write(efd, &end, sizeof(end)) != (ssize_t)sizeof(end))
        return -1;
    pthread_join(sl, NULL);
    if (nlat == 0)
        return -1;
    qsort(lat_us, nlat, sizeof(double), cmp_double);
    printf("| %s | %u | %.1f | %.1f | %.1f | %.1f | %.1f |\n", name, nlat, lat_us[nlat / 2],
           lat_us[(size_t)nlat * 99 / 100], lat_us[(size_t)nlat * 999 / 1000], lat_us[nlat - 1],
           lat_us[nlat / 2] * 5);
    return 0;
}

int main(int argc, char **argv)
{
    cpu_set_t cpus;
    unsigned ncpu;
    int opt;

    while ((opt = getopt(argc, argv, "n:")) != -1) {
        if (opt == 'n' && atoi(optarg) > 0)
            nsamples = (unsigned)atoi(optarg);
        else {
            fprintf(stderr, "usage: bench_wake [-n samples]\n");
            return 2;
        }
    }
    if (sched_getaffinity(0, sizeof(cpus), &cpus) < 0) {
        perror("sched_getaffinity");
        return 1;
    }
    ncpu = (unsigned)CPU_COUNT(&cpus);
    efd = eventfd(0, EFD_CLOEXEC);
    lat_us = calloc(nsamples, sizeof(double));
    if (efd < 0 || !lat_us) {
        perror("bench_wake");
        return 1;
    }
    printf("wake-up latency of a thread blocked in read(eventfd), %u samples 1 ms apart, "
           "%u CPUs\n\n",
           nsamples, ncpu);
    printf("| case | samples | p50 us | p99 us | p99.9 us | max us | 5x p50 |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    if (run_case("CPUs idle", 0, 0) < 0 || run_case("a spinner per CPU", ncpu, 0) < 0 ||
        run_case("a spinner per CPU, sleeper's slice 100 us", ncpu, 100000) < 0) {
        fprintf(stderr, "bench_wake: a case failed\n");
        return 1;
    }
    free(lat_us);
    close(efd);
    return 0;
}
