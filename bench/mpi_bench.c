/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two-rank MPI latency and bandwidth, run by bench/bench_apps.sh twice in
 * the same run: over uiwarp (Open MPI's cm PML, ofi MTL, libfabric's
 * verbs;ofi_rxm provider) and over Open MPI's own TCP transport (ob1 PML,
 * tcp BTL). Built with mpicc by the script (not part of the CMake build).
 *
 *   lat SIZE US     half the round trip of a ping-pong (median of 5 runs)
 *   bw SIZE MB/s    a window of 16 MPI_Isend, acknowledged by one message
 *
 * Every received message is checked (first, middle and last byte), so a
 * transport that loses or reorders data does not produce a figure.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 16

static int rank;
static long bad;

static void mark(uint8_t *b, size_t n, unsigned i)
{
    b[0] = b[n / 2] = b[n - 1] = (uint8_t)(i * 13u + 1u);
}

static void check(const uint8_t *b, size_t n, unsigned i)
{
    uint8_t v = (uint8_t)(i * 13u + 1u);

    if (b[0] != v || b[n / 2] != v || b[n - 1] != v)
        bad++;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void lat(size_t n, unsigned iters)
{
    uint8_t *b = malloc(n);
    double t[5];

    memset(b, 0, n);
    for (int r = 0; r < 5; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (unsigned i = 0; i < iters; i++) {
            if (rank == 0) {
                mark(b, n, i);
                MPI_Send(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(b, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                check(b, n, i + 1);
            } else {
                MPI_Recv(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                check(b, n, i);
                mark(b, n, i + 1);
                MPI_Send(b, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        t[r] = (MPI_Wtime() - t0) * 1e6 / iters / 2;
    }
    qsort(t, 5, sizeof(t[0]), cmp_d);
    if (rank == 0)
        printf("lat %zu %.2f\n", n, t[2]);
    free(b);
}

static void bw(size_t n, unsigned iters)
{
    uint8_t *b = malloc(n * WINDOW);
    MPI_Request rq[WINDOW];
    uint8_t ack = 0;
    double t[3];

    memset(b, 0, n * WINDOW);
    for (int r = 0; r < 3; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (unsigned i = 0; i < iters; i++) {
            for (unsigned w = 0; w < WINDOW; w++) {
                uint8_t *p = b + (size_t)w * n;
                if (rank == 0) {
                    mark(p, n, i * WINDOW + w);
                    MPI_Isend(p, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &rq[w]);
                } else {
                    MPI_Irecv(p, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &rq[w]);
                }
            }
            MPI_Waitall(WINDOW, rq, MPI_STATUSES_IGNORE);
            if (rank == 0) {
                MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                for (unsigned w = 0; w < WINDOW; w++)
                    check(b + (size_t)w * n, n, i * WINDOW + w);
                MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        t[r] = (double)n * WINDOW * iters / (MPI_Wtime() - t0) / 1e6;
    }
    qsort(t, 3, sizeof(t[0]), cmp_d);
    if (rank == 0)
        printf("bw %zu %.0f\n", n, t[1]);
    free(b);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    long all = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    lat(1, quick ? 500 : 5000);
    lat(4096, quick ? 500 : 5000);
    bw(65536, quick ? 20 : 200);
    bw(1048576, quick ? 4 : 30);
    MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %ld bad messages\n", all ? "FAIL" : "OK", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
