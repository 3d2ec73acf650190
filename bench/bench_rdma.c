/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RDMA over uiwarp beside raw TCP, both measured in the same run between
 * the same two processes over 127.0.0.1 (a forked server and client; one
 * RC queue pair on device uiw_lo through the engine's connection manager,
 * one TCP connection with TCP_NODELAY).
 *
 *  latency    ping-pong round trip: Send/Recv, and RDMA Write with the
 *             arrival seen by polling the last word of the target buffer;
 *             against a TCP ping-pong of the same size. Median and p99.
 *  bandwidth  Write, Read and Send streams with a window of WRs in flight
 *             (Reads: at most the negotiated ORD/IRD), until the receiver
 *             has everything; against one TCP stream (one send() per
 *             message). Median of the repetitions after one warm-up run.
 *
 * Method details (warm-up, CLOCK_MONOTONIC, data checks): src/demo/perf.h.
 * Prints markdown tables; ratios are uiwarp / TCP (latency: lower is
 * better for uiwarp; bandwidth: higher is better).
 *
 * usage: bench_rdma [-s SIZES] [-n ROUNDTRIPS] [-b BYTES] [-r REPS] [-R ROUNDS]
 *                   [-w WINDOW] [-S SPIN_US] [-P] [-L | -B] [-t TIMEOUT_MS]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

#define MAX_SIZES   64
#define MAX_BW_MSGS 16000 /* Send runs pre-post this many receives */

struct cfg {
    size_t sizes[MAX_SIZES];
    unsigned nsizes;
    unsigned lat_iters; /* round trips for sizes up to 64 KiB */
    uint64_t bw_bytes;  /* bytes per bandwidth repetition */
    unsigned reps;
    unsigned rounds; /* latency rounds alternating uiwarp and TCP */
    unsigned window;
    int timeout_ms;
    long spin_us;
    bool lat, bw;
};

static void usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [options]\n"
            "  -s SIZES  message sizes, comma-separated (8, 4k, 1M ...; multiples of 8, up to\n"
            "            64M), or 'all' for every power of two from 8 B to 4 MiB\n"
            "            (default 8,64,512,4k,16k,64k,256k,1M,4M)\n"
            "  -n N      latency round trips per size up to 64 KiB, after N/10 warm-up ones;\n"
            "            larger sizes scale down to N*64KiB/size, at least 50 (default 2000)\n"
            "  -b BYTES  bytes per bandwidth run (default 256M; 16 to 16000 messages)\n"
            "  -r N      bandwidth runs per size, after one warm-up run (default 5)\n"
            "  -R N      latency rounds alternating uiwarp and TCP (default 5)\n"
            "  -w N      WRs in flight in bandwidth runs (default 16, at most 128)\n"
            "  -L / -B   latency only / bandwidth only\n"
            "  -S US     busy-poll for at most US microseconds, then sleep until woken (CQ\n"
            "            completion channel / poll(2) on the socket); default: always spin\n"
            "  -P        do not pin the two processes to two different CPUs\n"
            "  -t MS     timeout of any single wait (default 10000)\n",
            argv0);
}

static int parse_sizes(struct cfg *c, const char *arg)
{
    c->nsizes = 0;
    if (strcmp(arg, "all") == 0) {
        for (size_t s = 8; s <= (4u << 20); s *= 2)
            c->sizes[c->nsizes++] = s;
        return 0;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", arg);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        size_t s = ru_parse_size(tok);
        if (s < 8 || s % 8 || s > (64u << 20) || c->nsizes == MAX_SIZES) {
            fprintf(stderr, "bench_rdma: bad size '%s' (a multiple of 8, 8 B to 64 MiB)\n", tok);
            return -1;
        }
        c->sizes[c->nsizes++] = s;
    }
    return c->nsizes ? 0 : -1;
}

static struct perf_opts opts_of(const struct cfg *c)
{
    size_t max = 8;
    for (unsigned i = 0; i < c->nsizes; i++)
        if (c->sizes[i] > max)
            max = c->sizes[i];
    struct perf_opts o = {.max_size = max,
                          .window = c->window,
                          .max_bw_iters = MAX_BW_MSGS,
                          .timeout_ms = c->timeout_ms};
    return o;
}

static unsigned lat_iters(const struct cfg *c, size_t size)
{
    if (size <= 65536)
        return c->lat_iters;
    uint64_t n = (uint64_t)c->lat_iters * 65536 / size;
    return n < 50 ? 50 : (unsigned)n;
}

static unsigned bw_iters(const struct cfg *c, size_t size)
{
    uint64_t n = c->bw_bytes / size;
    return n < 16 ? 16 : n > MAX_BW_MSGS ? MAX_BW_MSGS : (unsigned)n;
}

static int server_main(int ctl, void *arg)
{
    struct perf p;
    struct perf_opts o = opts_of(arg);
    int rc = perf_setup(&p, ctl, true, &o);
    if (rc == 0)
        rc = perf_serve(&p, NULL);
    int rc2 = perf_teardown(&p);
    return rc ? rc : rc2;
}

static const char *wait_desc(const struct cfg *c)
{
    static char buf[200];
    const char *pin = ru_pin_cpus ? ", each pinned to its own CPU" : "";
    if (c->spin_us < 0)
        snprintf(buf, sizeof buf,
                 "both processes busy-poll%s (TCP: up to 64 KiB; larger TCP "
                 "transfers sleep in poll(2))",
                 pin);
    else
        snprintf(buf, sizeof buf,
                 "both processes busy-poll for up to %ld µs, then sleep until woken%s", c->spin_us,
                 pin);
    return buf;
}

static void fmt_lat(char *buf, size_t cap, const struct lat_result *r)
{
    snprintf(buf, cap, "%.1f / %.1f", r->med_us, r->p99_us);
}

static int run(struct perf *p, const struct cfg *c)
{
    char sz[32], a[40], b[40], t[40];
    int rc;

    if (c->lat) {
        printf("\n## Latency: round trip, µs (median / p99)\n\n"
               "%u round trips per size up to 64 KiB (fewer above, at least 50), after 10%% "
               "more for warm-up,\nin %u rounds alternating uiwarp and TCP; %s.\n\n",
               c->lat_iters, c->rounds, wait_desc(c));
        printf("| size | round trips | Send | Write (polling) | TCP ping-pong | Send / TCP | "
               "Write / TCP |\n|---:|---:|---:|---:|---:|---:|---:|\n");
        fflush(stdout);
        for (unsigned i = 0; i < c->nsizes; i++) {
            size_t s = c->sizes[i];
            unsigned n = lat_iters(c, s);
            static const int tests[] = {PT_LAT_SEND, PT_LAT_WRITE, PT_LAT_TCP};
            struct lat_result lr[3];
            if ((rc = perf_lat_set(p, tests, 3, s, n, n / 10, c->rounds, lr)) < 0)
                return rc;
            struct lat_result rs = lr[0], rw = lr[1], rt = lr[2];
            fmt_lat(a, sizeof a, &rs);
            fmt_lat(b, sizeof b, &rw);
            fmt_lat(t, sizeof t, &rt);
            printf("| %s | %u | %s | %s | %s | %.2f | %.2f |\n", ru_size_str(s, sz, sizeof sz), n,
                   a, b, t, rs.med_us / rt.med_us, rw.med_us / rt.med_us);
            fflush(stdout);
        }
    }
    if (c->bw) {
        unsigned rwin = c->window;
        if (p->rc.ord && rwin > p->rc.ord)
            rwin = p->rc.ord;
        if (p->rc.peer_ird && rwin > p->rc.peer_ird)
            rwin = p->rc.peer_ird;
        printf("\n## Bandwidth: GB/s (1e9 bytes/s)\n\n"
               "Median of %u runs (after a warm-up run), alternating uiwarp and TCP; a run moves "
               "%llu MiB\n(16 to %u messages) and ends when the receiver has all of it. uiwarp: "
               "%u WRs in flight\n(Read: %u), polling the CQ%s; TCP: one stream, one send() per "
               "message, "
               "sleeping in poll(2).\n\n",
               c->reps, (unsigned long long)(c->bw_bytes >> 20), MAX_BW_MSGS, c->window, rwin,
               ru_pin_cpus ? ", each process pinned to its own CPU" : "");
        printf("| size | messages | Write | Read | Send | TCP stream | Write / TCP | Read / TCP | "
               "Send / TCP |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
        fflush(stdout);
        for (unsigned i = 0; i < c->nsizes; i++) {
            size_t s = c->sizes[i];
            unsigned n = bw_iters(c, s);
            static const int tests[] = {PT_BW_WRITE, PT_BW_READ, PT_BW_SEND, PT_BW_TCP};
            struct bw_result br[4];
            if ((rc = perf_bw_set(p, tests, 4, s, n, c->reps, br)) < 0)
                return rc;
            struct bw_result w = br[0], r = br[1], snd = br[2], tcp = br[3];
            char g[4][24];
            printf("| %s | %u | %s | %s | %s | %s | %.2f | %.2f | %.2f |\n",
                   ru_size_str(s, sz, sizeof sz), n, ru_gbps_str(w.gbps, g[0], sizeof g[0]),
                   ru_gbps_str(r.gbps, g[1], sizeof g[1]), ru_gbps_str(snd.gbps, g[2], sizeof g[2]),
                   ru_gbps_str(tcp.gbps, g[3], sizeof g[3]), w.gbps / tcp.gbps, r.gbps / tcp.gbps,
                   snd.gbps / tcp.gbps);
            fflush(stdout);
        }
    }
    return 0;
}

static int client_main(int ctl, void *arg)
{
    const struct cfg *c = arg;
    struct perf p;
    struct perf_opts o = opts_of(c);
    uint64_t t0 = ru_now_ns();
    int rc = perf_setup(&p, ctl, false, &o);
    if (rc == 0) {
        printf(
            "# bench_rdma: uiwarp RDMA vs raw TCP over 127.0.0.1\n\n"
            "Two processes on %ld CPUs; RC queue pair on %s (%s); raw TCP on port %u with "
            "TCP_NODELAY.\nEvery message size's data is checked byte for byte (src/demo/perf.h); "
            "ratios are uiwarp / TCP.\n",
            sysconf(_SC_NPROCESSORS_ONLN), RU_DEVICE, p.rc.desc, p.tcp_port);
        rc = run(&p, c);
    }
    int rc2 = perf_teardown(&p);
    if (rc == 0 && rc2 == 0)
        printf("\nAll data verified; %.1f s.\n", (double)(ru_now_ns() - t0) / 1e9);
    else
        printf("\nbench_rdma: FAILED (see the errors above)\n");
    fflush(stdout);
    return rc < 0 || rc2 < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    struct cfg c = {
        .lat_iters = 2000,
        .bw_bytes = 256u << 20,
        .reps = 5,
        .rounds = 5,
        .window = 16,
        .timeout_ms = 10000,
        .spin_us = -1,
        .lat = true,
        .bw = true,
    };
    parse_sizes(&c, "8,64,512,4k,16k,64k,256k,1M,4M");
    int opt;
    while ((opt = getopt(argc, argv, "s:n:b:r:R:w:t:S:PLBh")) != -1) {
        switch (opt) {
        case 's':
            if (parse_sizes(&c, optarg) < 0)
                return 2;
            break;
        case 'n':
            c.lat_iters = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'b':
            c.bw_bytes = ru_parse_size(optarg);
            break;
        case 'r':
            c.reps = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'R':
            c.rounds = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 'w':
            c.window = (unsigned)strtoul(optarg, NULL, 0);
            break;
        case 't':
            c.timeout_ms = (int)strtol(optarg, NULL, 0);
            break;
        case 'S':
            c.spin_us = strtol(optarg, NULL, 0);
            break;
        case 'P':
            ru_pin_cpus = false;
            break;
        case 'L':
            c.bw = false;
            break;
        case 'B':
            c.lat = false;
            break;
        case 'h':
            usage(stdout, argv[0]);
            return 0;
        default:
            usage(stderr, argv[0]);
            return 2;
        }
    }
    if (optind < argc || !c.lat_iters || !c.bw_bytes || !c.reps || !c.rounds || !c.window ||
        c.window > 128 || c.timeout_ms <= 0 || (!c.lat && !c.bw)) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (c.spin_us >= 0)
        ru_spin_ns = (uint64_t)c.spin_us * 1000;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* generous: the run's own waits are bounded by -t */
    int rc = ru_run_pair(server_main, client_main, &c, 900);
    return rc == 0 ? 0 : 1;
}
