/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What one RDMA Read in flight at a time can reach over this TCP: a TCP
 * request/response loop between two processes on 127.0.0.1, the client
 * sending a request the size of a Read Request FPDU (52 bytes: MPA length,
 * DDP/RDMAP headers, CRC field) and the server answering with SIZE bytes,
 * the next request sent when the whole response is in. It is the TCP
 * round trip a requester with an ORD of 1 pays per Read whatever the
 * stack above TCP does (qperf's rc_rdma_read_bw asks rdma_cm for an
 * initiator depth of 1; docs/PERFORMANCE.md), beside a TCP stream of
 * SIZE-byte sends (what qperf's tcp_bw measures) in the same run.
 *
 * With -q 64 -s 64 -p it is a busy-polling 64-byte ping-pong, as
 * perftest's ib_send_lat -s 64 runs over uiwarp: the median, p99 and
 * p99.9 of the one-way times (half round trips) are this machine's floor
 * under that program's tail (docs/PERFORMANCE.md).
 *
 * usage: bench_tcp_rr [-s SIZE] [-q reqUEST] [-t SECONDS] [-p] [-r ROUNDS]
 *   -s  response size (default 4096), -q request size (default 52)
 *   -t  seconds per measurement (default 2)
 *   -p  busy-poll (MSG_DONTWAIT in a loop) instead of blocking calls; each
 *       side then needs a CPU of its own
 *   -r  rounds, each request/response then stream (default 3)
 * Prints per round: round trips/s, µs per round trip, the one-way median,
 * p99 and p99.9 (µs), MB/s of responses, the stream's MB/s and the ratio
 * request/response / stream.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES (1u << 24)

static size_t req = 52;

static bool busy;

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

    return x < y ? -1 : x > y;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int io_all(int fd, void *buf, size_t n, bool rx)
{
    uint8_t *p = buf;

    while (n) {
        ssize_t r = rx ? recv(fd, p, n, busy ? MSG_DONTWAIT : 0)
                       : send(fd, p, n, MSG_NOSIGNAL | (busy ? MSG_DONTWAIT : 0));
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static void nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* server: mode byte 'r' (request/response) or 's' (stream sink) per
 * connection, then serve until EOF */
static void serve(int lfd, size_t size)
{
    uint8_t *buf = calloc(1, size > req ? size : req);

    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        char mode;

        if (fd < 0)
            break;
        nodelay(fd);
        if (io_all(fd, &mode, 1, true)) {
            close(fd);
            continue;
        }
        if (mode == 'q')
            break;
        if (mode == 'r') {
            while (io_all(fd, buf, req, true) == 0 && io_all(fd, buf, size, false) == 0)
                ;
        } else {
            while (recv(fd, buf, size, 0) > 0)
                ;
        }
        close(fd);
    }
    free(buf);
}

static int dial(uint16_t port, char mode)
{
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        perror("connect");
        exit(1);
    }
    nodelay(fd);
    if (io_all(fd, &mode, 1, false))
        exit(1);
    return fd;
}

int main(int argc, char **argv)
{
    size_t size = 4096;
    double secs = 2;
    unsigned rounds = 3;
    int o;

    while ((o = getopt(argc, argv, "s:q:t:pr:h")) != -1) {
        switch (o) {
        case 'q':
            req = strtoul(optarg, NULL, 0);
            break;
        case 's':
            size = strtoul(optarg, NULL, 0);
            break;
        case 't':
            secs = atof(optarg);
            break;
        case 'p':
            busy = true;
            break;
        case 'r':
            rounds = (unsigned)atoi(optarg);
            break;
        default:
            fprintf(stderr, "usage: %s [-s SIZE] [-q REQUEST] [-t SECONDS] [-p] [-r ROUNDS]\n",
                    argv[0]);
            return o == 'h' ? 0 : 2;
        }
    }
    if (size < 1 || size > (64u << 20) || req < 1 || req > (64u << 20) || secs <= 0 || !rounds) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);

    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 4) ||
        getsockname(lfd, (struct sockaddr *)&a, &al)) {
        perror("listen");
        return 1;
    }
    uint16_t port = ntohs(a.sin_port);
    pid_t pid = fork();

    if (pid == 0) {
        serve(lfd, size);
        _exit(0);
    }
    close(lfd);

    uint8_t *buf = calloc(1, size > req ? size : req);
    uint32_t *rtt = malloc(MAX_SAMPLES * sizeof(*rtt));
    uint64_t span = (uint64_t)(secs * 1e9);

    if (!buf || !rtt)
        return 1;
    printf("| round | request | response | round trips/s | us per round trip | one-way median / "
           "p99 / p99.9, us | request/response MB/s | stream MB/s | ratio |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    for (unsigned r = 1; r <= rounds; r++) {
        int fd = dial(port, 'r');
        uint64_t n = 0, t0 = now_ns(), t = t0, prev = t0;

        do {
            if (io_all(fd, buf, req, false) || io_all(fd, buf, size, true))
                return 1;
            t = now_ns();
            if (n < MAX_SAMPLES)
                rtt[n] = (uint32_t)(t - prev > UINT32_MAX ? UINT32_MAX : t - prev);
            prev = t;
            n++;
        } while (t - t0 < span);
        size_t ns = n < MAX_SAMPLES ? n : MAX_SAMPLES;
        qsort(rtt, ns, sizeof(*rtt), cmp_u32);
        double med = rtt[ns / 2] / 2e3, p99 = rtt[ns * 99 / 100] / 2e3,
               p999 = rtt[ns * 999 / 1000] / 2e3;
        close(fd);
        double rr_s = (double)(t - t0) / 1e9;
        double rr_mbs = (double)n * (double)size / rr_s / 1e6;

        fd = dial(port, 's');
        uint64_t bytes = 0;
        t0 = now_ns();
        do {
            if (io_all(fd, buf, size, false))
                return 1;
            bytes += size;
        } while ((t = now_ns()) - t0 < span);
        close(fd);
        double st_mbs = (double)bytes / ((double)(t - t0) / 1e9) / 1e6;

        printf("| %u | %zu | %zu | %.0f | %.2f | %.2f / %.2f / %.2f | %.1f | %.1f | %.3f |\n", r,
               req, size, (double)n / rr_s, rr_s * 1e6 / (double)n, med, p99, p999, rr_mbs, st_mbs,
               rr_mbs / st_mbs);
        fflush(stdout);
    }
    int fd = dial(port, 'q');
    close(fd);
    waitpid(pid, NULL, 0);
    free(buf);
    free(rtt);
    return 0;
}
