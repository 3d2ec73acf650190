/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Open MPI over uiwarp (run by tests/rdmacm/test_libfabric_apps.sh with
 * --mca pml cm --mca mtl ofi and the verbs;ofi_rxm provider). Two ranks:
 *
 *   pingpong   sizes 1 B .. 4 MiB (powers of two and their neighbours):
 *              rank 0 sends a pattern keyed by size and iteration, rank 1
 *              checks every byte and sends back its complement, which rank 0
 *              checks byte for byte.
 *   bandwidth  a window of MPI_Isend/MPI_Irecv of 64 KiB and 1 MiB, every
 *              message checked, the rate printed (not asserted).
 *   allreduce  MPI_SUM over uint32 counts 1 .. 1 Mi elements (4 MiB), every
 *              element compared with the expected sum; also MPI_MAX on
 *              doubles.
 *
 * Exit 0 when every byte matched on both ranks, 1 otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static long errors;

static uint8_t pat(size_t i, size_t size, unsigned iter, int who)
{
    return (uint8_t)(i * 131u + size * 7u + iter * 29u + (unsigned)who * 101u + (i >> 8));
}

static void fill(uint8_t *b, size_t n, unsigned iter, int who)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(i, n, iter, who);
}

static void check(const uint8_t *b, size_t n, unsigned iter, int who, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != pat(i, n, iter, who)) {
            if (errors < 10)
                fprintf(stderr, "rank %d: %s size %zu iter %u: byte %zu is %02x, expected %02x\n",
                        rank, what, n, iter, i, b[i], pat(i, n, iter, who));
            errors++;
            return;
        }
    }
}

static void pingpong(uint8_t *buf, size_t max)
{
    unsigned iter = 0;
    int peer = 1 - rank;

    for (size_t base = 1; base <= max; base *= 2) {
        size_t sizes[3] = {base - 1, base, base + 1};
        for (int k = 0; k < 3; k++) {
            size_t n = sizes[k];
            if (n == 0 || n > max)
                continue;
            for (int rep = 0; rep < 3; rep++, iter++) {
                if (rank == 0) {
                    fill(buf, n, iter, 0);
                    MPI_Send(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                    memset(buf, 0, n);
                    MPI_Recv(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    check(buf, n, iter, 1, "pong");
                } else {
                    memset(buf, 0, n);
                    MPI_Status st;
                    MPI_Recv(buf, (int)n, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st);
                    int cnt = -1;
                    MPI_Get_count(&st, MPI_BYTE, &cnt);
                    if ((size_t)cnt != n) {
                        fprintf(stderr, "rank 1: received %d bytes, expected %zu\n", cnt, n);
                        errors++;
                    }
                    check(buf, n, iter, 0, "ping");
                    fill(buf, n, iter, 1);
                    MPI_Send(buf, (int)n, MPI_BYTE, peer, 2, MPI_COMM_WORLD);
                }
            }
        }
    }
    if (rank == 0)
        printf("pingpong: %u round trips, 1 B .. %zu B\n", iter, max);
}

static void bandwidth(size_t n, int window, int rounds)
{
    uint8_t *b = malloc(n * (size_t)window);
    MPI_Request *rq = malloc(sizeof(*rq) * (size_t)window);
    if (!b || !rq) {
        errors++;
        free(b);
        free(rq);
        return;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        for (int w = 0; w < window; w++) {
            uint8_t *p = b + (size_t)w * n;
            unsigned iter = (unsigned)(r * window + w) + 1000u;
            if (rank == 0) {
                fill(p, n, iter, 0);
                MPI_Isend(p, (int)n, MPI_BYTE, 1, 3, MPI_COMM_WORLD, &rq[w]);
            } else {
                memset(p, 0, n);
                MPI_Irecv(p, (int)n, MPI_BYTE, 0, 3, MPI_COMM_WORLD, &rq[w]);
            }
        }
        MPI_Waitall(window, rq, MPI_STATUSES_IGNORE);
        if (rank == 1)
            for (int w = 0; w < window; w++)
                check(b + (size_t)w * n, n, (unsigned)(r * window + w) + 1000u, 0, "bw");
        /* rank 1 acknowledges the window: rank 0 reuses its buffers */
        char ack = 0;
        if (rank == 0)
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        else
            MPI_Send(&ack, 1, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    }
    double dt = MPI_Wtime() - t0;
    if (rank == 0)
        printf("bandwidth: %zu B x %d x %d: %.1f MB/s\n", n, window, rounds,
               (double)n * window * rounds / dt / 1e6);
    free(b);
    free(rq);
}

static void allreduce(size_t max_elems)
{
    uint32_t *in = malloc(max_elems * sizeof(*in));
    uint32_t *out = malloc(max_elems * sizeof(*out));
    double *din = malloc(4096 * sizeof(*din)), *dout = malloc(4096 * sizeof(*dout));
    unsigned calls = 0;
    if (!in || !out || !din || !dout) {
        errors++;
        goto out;
    }
    for (size_t n = 1; n <= max_elems; n *= 4) {
        for (size_t i = 0; i < n; i++)
            in[i] = (uint32_t)(i * 2654435761u + (unsigned)rank * 40503u + n);
        memset(out, 0xAB, n * sizeof(*out));
        MPI_Allreduce(in, out, (int)n, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        calls++;
        for (size_t i = 0; i < n; i++) {
            uint32_t want = 0;
            for (int r = 0; r < nranks; r++)
                want += (uint32_t)(i * 2654435761u + (unsigned)r * 40503u + n);
            if (out[i] != want) {
                if (errors < 10)
                    fprintf(stderr, "rank %d: allreduce %zu elements: [%zu] = %u, expected %u\n",
                            rank, n, i, out[i], want);
                errors++;
                break;
            }
        }
    }
    for (size_t i = 0; i < 4096; i++)
        din[i] = (double)i * (rank + 1) - 17.5 * rank;
    MPI_Allreduce(din, dout, 4096, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    calls++;
    for (size_t i = 0; i < 4096; i++) {
        double want = -1e300;
        for (int r = 0; r < nranks; r++) {
            double v = (double)i * (r + 1) - 17.5 * r;
            if (v > want)
                want = v;
        }
        if (dout[i] != want) {
            fprintf(stderr, "rank %d: allreduce MAX [%zu] = %g, expected %g\n", rank, i, dout[i],
                    want);
            errors++;
            break;
        }
    }
    if (rank == 0)
        printf("allreduce: %u calls, 1 .. %zu uint32 (SUM) and 4096 double (MAX)\n", calls,
               max_elems);
out:
    free(in);
    free(out);
    free(din);
    free(dout);
}

int main(int argc, char **argv)
{
    size_t max = 4u << 20;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (argc > 1)
        max = strtoul(argv[1], NULL, 0);
    if (nranks != 2) {
        if (rank == 0)
            fprintf(stderr, "needs exactly 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    uint8_t *buf = malloc(max + 1);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    pingpong(buf, max);
    bandwidth(64 << 10, 16, 8);
    bandwidth(1 << 20, 4, 4);
    allreduce(max / 4);
    free(buf);

    long all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %ld mismatches\n", all ? "FAIL" : "OK", all);
    MPI_Finalize();
    return all ? 1 : 0;
}
