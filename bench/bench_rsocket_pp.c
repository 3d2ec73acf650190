/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rsocket ping-pong in one thread (issue 16): both ends of one connection
 * over 127.0.0.1 in this process, driven alternately with MSG_DONTWAIT, so
 * that the work per round trip is close to deterministic and can be counted
 * with callgrind (bench/bench_rsocket_insns.sh): each side rsends SIZE bytes
 * and the other rrecvs them until it has all, ITERS times each way. A
 * receive that finds nothing yet (EAGAIN) is a spin turn, counted and
 * printed, as is the wall time per one-way transfer (meaningless under
 * valgrind). EMPTY further rrecv calls at the end find nothing: their cost
 * is the cost of a spin turn, which the script subtracts.
 *
 * Usage: bench_rsocket_pp SIZE ITERS [PORT [EMPTY]], run through
 * `uiwarp run` (uiwarp's librdmacm.so.1 is linked directly anyway).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int lfd, sfd = -1;
static long spins;

static void *acc(void *a)
{
    (void)a;
    sfd = raccept(lfd, NULL, NULL);
    return NULL;
}

static void xfer(int from, int to, char *buf, int size)
{
    int off = 0;
    while (off < size) {
        ssize_t r = rsend(from, buf + off, (size_t)(size - off), MSG_DONTWAIT);
        if (r > 0)
            off += (int)r;
        else if (errno != EAGAIN) {
            perror("rsend");
            exit(1);
        }
    }
    off = 0;
    while (off < size) {
        ssize_t r = rrecv(to, buf + off, (size_t)(size - off), MSG_DONTWAIT);
        if (r > 0) {
            off += (int)r;
        } else if (r == 0 || errno != EAGAIN) {
            perror("rrecv");
            exit(1);
        } else {
            spins++;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s SIZE ITERS [PORT [EMPTY]]\n", argv[0]);
        return 2;
    }
    int size = atoi(argv[1]), iters = atoi(argv[2]);
    int port = argc > 3 ? atoi(argv[3]) : 23999, empty = argc > 4 ? atoi(argv[4]) : 0;
    char *buf = calloc(1, (size_t)(size > 0 ? size : 1));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int one = 1, bs = 1 << 19; /* rstream's socket buffers */
    lfd = rsocket(AF_INET, SOCK_STREAM, 0);
    rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (!buf || size <= 0 || rbind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || rlisten(lfd, 1)) {
        perror("listen");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, acc, NULL);
    int cfd = rsocket(AF_INET, SOCK_STREAM, 0);
    rsetsockopt(cfd, SOL_SOCKET, SO_SNDBUF, &bs, sizeof(bs));
    rsetsockopt(cfd, SOL_SOCKET, SO_RCVBUF, &bs, sizeof(bs));
    if (rconnect(cfd, (struct sockaddr *)&sa, sizeof(sa))) {
        perror("rconnect");
        return 1;
    }
    pthread_join(t, NULL);
    if (sfd < 0) {
        perror("raccept");
        return 1;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < iters; i++) {
        xfer(cfd, sfd, buf, size);
        xfer(sfd, cfd, buf, size);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us =
        ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e3 / iters / 2;
    for (int i = 0; i < empty; i++)
        if (rrecv(i & 1 ? cfd : sfd, buf, (size_t)size, MSG_DONTWAIT) >= 0 || errno != EAGAIN) {
            perror("empty rrecv");
            return 1;
        }
    printf("size %d iters %d spins %ld spins/rt %.2f one-way %.2f us\n", size, iters, spins,
           (double)spins / iters, us);
    rshutdown(cfd, SHUT_RDWR);
    rshutdown(sfd, SHUT_RDWR);
    rclose(cfd);
    rclose(sfd);
    rclose(lfd);
    free(buf);
    return 0;
}
