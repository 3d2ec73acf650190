/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What a demanding MPI program does, over uiwarp (run by
 * tests/rdmacm/test_libfabric_apps.sh with 4 and 2 ranks, --mca pml cm
 * --mca mtl ofi, the verbs;ofi_rxm provider and --mca osc pt2pt). Any
 * number of ranks >= 2; every pair of ranks talks. Every byte received is
 * compared with a pattern keyed by section, origin, target, iteration and
 * round; each buffer that differs counts as one mismatch (the first 20 of a
 * rank are described on stderr).
 *
 *   p2p      out of order: 64 messages to each peer (1 B .. 100 KiB: eager,
 *            rxm's segmented SAR and rendezvous), received by tag in the
 *            reverse order, half of them unexpected; MPI_ANY_SOURCE +
 *            MPI_ANY_TAG: 150 messages to each peer, all receives posted
 *            first, non-overtaking checked per source; MPI_Probe,
 *            MPI_Iprobe, MPI_Mprobe/MPI_Mrecv, MPI_Improbe of messages of
 *            unknown size; MPI_Sendrecv to every other rank (every pair,
 *            both ways) 0 B .. 1 MiB, MPI_Sendrecv_replace; a 16 MiB
 *            message around the ring.
 *   coll     MPI_Bcast (1 B .. 4 MiB, every root), MPI_Reduce,
 *            MPI_Allreduce (uint32 SUM 1 .. 1 Mi elements, in place, double
 *            MAX, uint64 BXOR, MAXLOC), MPI_Scan, MPI_Alltoall (1 .. 256 Ki
 *            uint32 per pair), MPI_Alltoallv (counts that differ per pair,
 *            zeros included, gaps left untouched), MPI_Allgather(v),
 *            MPI_Reduce_scatter(_block), two MPI_Iallreduce, MPI_Ibcast and
 *            MPI_Ibarrier outstanding together while point-to-point traffic
 *            runs, a split and a duplicated communicator.
 *   osc      for MPI_Win_allocate and MPI_Win_create: MPI_Put (8 B .. 256
 *            KiB), MPI_Get, MPI_Accumulate (MPI_SUM) between MPI_Win_fence;
 *            passive target: MPI_Win_lock/unlock (exclusive Put, shared
 *            Accumulate from every rank at once), MPI_Win_lock_all with
 *            MPI_Win_flush (Put then Get of the same bytes),
 *            MPI_Fetch_and_op (the values fetched from a counter are each
 *            value once), MPI_Compare_and_swap (one winner per slot).
 *   ssend    (only when asked) MPI_Issend that must not complete before its
 *            receive is posted, MPI_Ssend pairs: Open MPI 4.1's ofi MTL
 *            hangs in them on iWARP (docs/APPS.md "Open MPI beyond
 *            ping-pong"), as over tcp;ofi_rxm in the same tag layout.
 *
 * Usage: mpi_wide [-r ROUNDS] [p2p] [coll] [osc] [ssend] (default: p2p,
 * coll and osc, once; each round uses other patterns).
 * Exit 0 when every byte matched on every rank, 1 otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, nranks;
static long errors;
static unsigned round_no; /* the repetition of the whole run: every pattern depends on it */
static const char *section = "";

#define MISMATCH(...)                                                                              \
    do {                                                                                           \
        if (errors < 20) {                                                                         \
            fprintf(stderr, "rank %d: %s: ", rank, section);                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
        errors++;                                                                                  \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu B)\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

/* ----------------------------------------------------------------- patterns */

static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

/* A seed for one message: section, origin, target, iteration. */
static uint32_t seed(unsigned sec, int from, int to, unsigned iter)
{
    return mix(sec * 0x9e3779b1u ^ mix((uint32_t)from * 0x85ebca77u ^ (uint32_t)to * 0xc2b2ae3du) ^
               iter * 0x27d4eb2fu ^ round_no * 0x165667b1u);
}

static uint8_t pat(uint32_t s, size_t i)
{
    return (uint8_t)((uint32_t)i * 131u + (s >> ((i >> 6) & 15)) + (uint32_t)(i >> 12) * 7u);
}

static void fill(void *buf, size_t n, uint32_t s)
{
    uint8_t *b = buf;
    for (size_t i = 0; i < n; i++)
        b[i] = pat(s, i);
}

/* 0 when bytes [first, n) follow the pattern, else one mismatch is
 * counted. */
static int check_from(const void *buf, size_t first, size_t n, uint32_t s, const char *what,
                      int from, unsigned iter)
{
    const uint8_t *b = buf;
    for (size_t i = first; i < n; i++) {
        if (b[i] != pat(s, i)) {
            MISMATCH("%s from %d iter %u (%zu B): byte %zu is %02x, expected %02x", what, from,
                     iter, n, i, b[i], pat(s, i));
            return -1;
        }
    }
    return 0;
}

static int check(const void *buf, size_t n, uint32_t s, const char *what, int from, unsigned iter)
{
    return check_from(buf, 0, n, s, what, from, iter);
}

/* Elements of reductions: value of rank r, element i, iteration it. */
static uint32_t val32(int r, size_t i, unsigned it)
{
    return (uint32_t)i * 2654435761u + (uint32_t)r * 40503u + it * 977u + round_no * 7u + 1;
}

static uint64_t val64(int r, size_t i, unsigned it)
{
    return ((uint64_t)mix((uint32_t)(i + it * 7919u + round_no * 65537u)) << 29) ^
           ((uint64_t)r * 0x9e3779b97f4a7c15u) ^ i;
}

static double tnow(void)
{
    return MPI_Wtime();
}

/* ====================================================== point-to-point */

/* 64 messages to each peer, sizes from 1 B to 100 KiB (rxm's eager limit is
 * 16 KiB: some go by rendezvous), sent in order of k. The receives of odd k
 * are posted before anything is sent; those of even k after a barrier, in
 * the reverse order of k: those messages arrive unexpected and are matched
 * by tag against the queue of the ones that came before them. */
static void p2p_out_of_order(void)
{
    enum { M = 64 };
    section = "p2p out-of-order";
    int np = nranks - 1;
    size_t nmsg = (size_t)np * M;
    uint8_t **sb = xmalloc(nmsg * sizeof(*sb)), **rb = xmalloc(nmsg * sizeof(*rb));
    MPI_Request *srq = xmalloc(nmsg * sizeof(*srq)), *rrq = xmalloc(nmsg * sizeof(*rrq));
    MPI_Status *st = xmalloc(nmsg * sizeof(*st));

#define OOO_SIZE(k, from, to)                                                                      \
    ((k) % 16 == 5    ? (size_t)20000 + (size_t)(k)*1237u                                          \
     : (k) % 16 == 10 ? (size_t)100000 + (size_t)(from)*3u                                         \
                      : (size_t)1 + ((size_t)(k)*53u + (size_t)(from)*7u + (size_t)(to)) % 300u)
#define OOO_IDX(d, k) ((size_t)((d)-1) * M + (size_t)(k))

    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) { /* the sends */
            for (int k = 0; k < M; k++)
                for (int d = 1; d < nranks; d++) {
                    int to = (rank + nranks - d) % nranks;
                    size_t sz = OOO_SIZE(k, rank, to);
                    sb[OOO_IDX(d, k)] = xmalloc(sz);
                    fill(sb[OOO_IDX(d, k)], sz, seed(1, rank, to, (unsigned)k));
                    MPI_Isend(sb[OOO_IDX(d, k)], (int)sz, MPI_BYTE, to, 100 + k, MPI_COMM_WORLD,
                              &srq[OOO_IDX(d, k)]);
                }
            MPI_Barrier(MPI_COMM_WORLD);
            continue;
        }
        /* pass 0: odd k, pass 2: even k, highest first */
        for (int k = M - 1; k >= 0; k--) {
            if (k % 2 != (pass == 0))
                continue;
            for (int d = 1; d < nranks; d++) {
                int from = (rank + d) % nranks;
                size_t sz = OOO_SIZE(k, from, rank);
                uint8_t *b = rb[OOO_IDX(d, k)] = xmalloc(sz);
                memset(b, 0, sz);
                MPI_Irecv(b, (int)sz, MPI_BYTE, from, 100 + k, MPI_COMM_WORLD, &rrq[OOO_IDX(d, k)]);
            }
        }
    }
    MPI_Waitall((int)nmsg, rrq, st);
    MPI_Waitall((int)nmsg, srq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < M; k++) {
        for (int d = 1; d < nranks; d++) {
            int from = (rank + d) % nranks;
            size_t sz = OOO_SIZE(k, from, rank);
            const MPI_Status *s = &st[OOO_IDX(d, k)];
            int cnt = -1;
            MPI_Get_count(s, MPI_BYTE, &cnt);
            if (s->MPI_SOURCE != from || s->MPI_TAG != 100 + k || cnt != (int)sz)
                MISMATCH("message %d from %d: status source %d tag %d count %d", k, from,
                         s->MPI_SOURCE, s->MPI_TAG, cnt);
            check(rb[OOO_IDX(d, k)], sz, seed(1, from, rank, (unsigned)k), "message", from,
                  (unsigned)k);
        }
    }
#undef OOO_SIZE
#undef OOO_IDX
    for (size_t i = 0; i < nmsg; i++) {
        free(sb[i]);
        free(rb[i]);
    }
    free(sb);
    free(rb);
    free(srq);
    free(rrq);
    free(st);
}

/* MPI_ANY_SOURCE + MPI_ANY_TAG: every receive posted before any message is
 * sent; each message carries its origin and sequence number, and the
 * messages of one origin must match the receives in the order they were
 * sent (MPI's non-overtaking rule), whatever their tags. */
static void p2p_any(void)
{
    enum { M = 150, MAXSZ = 40000 };
    section = "p2p any-source/any-tag";
    int np = nranks - 1;
    size_t nmsg = (size_t)np * M;
    uint8_t *rb = xmalloc(nmsg * MAXSZ), *sb = xmalloc(nmsg * MAXSZ);
    MPI_Request *rq = xmalloc(2 * nmsg * sizeof(*rq));
    MPI_Status *st = xmalloc(2 * nmsg * sizeof(*st));
    unsigned *next = xmalloc((size_t)nranks * sizeof(*next));
    size_t n = 0;

#define ANY_SIZE(k, from, to)                                                                      \
    ((k) % 37 == 20 ? (size_t)MAXSZ - (size_t)(from)                                               \
                    : (size_t)8 + ((size_t)(k)*29u + (size_t)(from)*5u + (size_t)(to)) % 250u)
#define ANY_TAG(k, from) (((k)*7 + (from)*3) % 23)

    memset(rb, 0, nmsg * MAXSZ);
    for (size_t i = 0; i < nmsg; i++)
        MPI_Irecv(rb + i * MAXSZ, MAXSZ, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD,
                  &rq[n++]);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int k = 0; k < M; k++) {
        for (int d = 1; d < nranks; d++) {
            int to = (rank + d) % nranks;
            size_t sz = ANY_SIZE(k, rank, to);
            uint8_t *p = sb + ((size_t)(d - 1) * M + (size_t)k) * MAXSZ;
            fill(p, sz, seed(2, rank, to, (unsigned)k));
            uint32_t hdr[2] = {(uint32_t)rank, (uint32_t)k};
            memcpy(p, hdr, sizeof(hdr));
            MPI_Isend(p, (int)sz, MPI_BYTE, to, ANY_TAG(k, rank), MPI_COMM_WORLD, &rq[n++]);
        }
    }
    MPI_Waitall((int)n, rq, st);
    memset(next, 0, (size_t)nranks * sizeof(*next));
    for (size_t i = 0; i < nmsg; i++) {
        const uint8_t *p = rb + i * MAXSZ;
        uint32_t hdr[2];
        memcpy(hdr, p, sizeof(hdr));
        int from = st[i].MPI_SOURCE, cnt = -1;
        MPI_Get_count(&st[i], MPI_BYTE, &cnt);
        if (from < 0 || from >= nranks || from == rank || hdr[0] != (uint32_t)from) {
            MISMATCH("receive %zu: source %d, header says %u", i, from, hdr[0]);
            continue;
        }
        unsigned k = next[from]++;
        if (hdr[1] != k) {
            MISMATCH("receive %zu from %d: message %u where %u was next (overtaken)", i, from,
                     hdr[1], k);
            continue;
        }
        size_t sz = ANY_SIZE(k, from, rank);
        if (st[i].MPI_TAG != ANY_TAG((int)k, from) || cnt != (int)sz) {
            MISMATCH("message %u from %d: tag %d count %d, expected %d %zu", k, from, st[i].MPI_TAG,
                     cnt, ANY_TAG((int)k, from), sz);
            continue;
        }
        check_from(p, 8, sz, seed(2, from, rank, k), "message", from, k);
    }
    for (int r = 0; r < nranks; r++)
        if (r != rank && next[r] != M)
            MISMATCH("%u messages from %d, expected %d", next[r], r, M);
#undef ANY_SIZE
#undef ANY_TAG
    free(rb);
    free(sb);
    free(rq);
    free(st);
    free(next);
}

/* Messages of sizes the receiver does not know: MPI_Probe, MPI_Iprobe,
 * MPI_Mprobe + MPI_Mrecv, MPI_Improbe, from the previous rank (k % 4 picks
 * which). Sizes up to 900 B, and every sixth message large: 70 KiB for
 * Probe/Iprobe, which rxm sends in segments (SAR, 16 KiB .. 128 KiB), but
 * 200 KiB (rendezvous) for Mprobe/Improbe: libfabric 1.17's rxm loses the
 * later segments of a SAR message claimed by FI_PEEK|FI_CLAIM (the claim
 * takes only the first segment; the others stay in the unexpected queue
 * under the same tag). It fails the same over tcp;ofi_rxm with
 * FI_OFI_RXM_ENABLE_PASSTHRU=0 FI_OFI_RXM_ENABLE_DYN_RBUF=0, the rxm path
 * verbs uses, without uiwarp: docs/APPS.md. */
static void p2p_probe(void)
{
    enum { P = 24 };
    section = "p2p probe";
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    uint8_t *sb[P];
    MPI_Request rq[P];

#define PROBE_SIZE(k, r)                                                                           \
    ((k) % 6 == 4 ? ((k) % 4 >= 2 ? (size_t)200000 : (size_t)70000) + (size_t)(r)                  \
                  : (size_t)((k)*97 + (r)) % 900)

    for (int k = 0; k < P; k++) {
        size_t sz = PROBE_SIZE(k, rank);
        sb[k] = xmalloc(sz);
        fill(sb[k], sz, seed(3, rank, to, (unsigned)k));
        MPI_Isend(sb[k], (int)sz, MPI_BYTE, to, 1000 + k, MPI_COMM_WORLD, &rq[k]);
    }
    for (int k = 0; k < P; k++) {
        MPI_Status st;
        MPI_Message msg = MPI_MESSAGE_NULL;
        int flag = 0, how = k % 4;
        if (how == 0) {
            MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        } else if (how == 1) {
            while (!flag)
                MPI_Iprobe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        } else if (how == 2) {
            MPI_Mprobe(MPI_ANY_SOURCE, 1000 + k, MPI_COMM_WORLD, &msg, &st);
        } else {
            while (!flag)
                MPI_Improbe(from, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &msg, &st);
        }
        int cnt = -1;
        MPI_Get_count(&st, MPI_BYTE, &cnt);
        size_t sz = PROBE_SIZE(k, from);
        if (st.MPI_SOURCE != from || st.MPI_TAG != 1000 + k || cnt != (int)sz) {
            MISMATCH("probe %d: source %d tag %d count %d, expected %d %d %zu", k, st.MPI_SOURCE,
                     st.MPI_TAG, cnt, from, 1000 + k, sz);
            if (cnt < 0 || st.MPI_SOURCE < 0)
                MPI_Abort(MPI_COMM_WORLD, 1);
        }
        uint8_t *b = xmalloc((size_t)cnt);
        memset(b, 0, (size_t)cnt);
        MPI_Status rst;
        if (how >= 2)
            MPI_Mrecv(b, cnt, MPI_BYTE, &msg, &rst);
        else
            MPI_Recv(b, cnt, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &rst);
        if ((size_t)cnt == sz)
            check(b, sz, seed(3, from, rank, (unsigned)k), "probed message", from, (unsigned)k);
        free(b);
    }
#undef PROBE_SIZE
    MPI_Waitall(P, rq, MPI_STATUSES_IGNORE);
    for (int k = 0; k < P; k++)
        free(sb[k]);
}

/* Synchronous sends. Each rank MPI_Issend's to the next one, which posts its
 * receive only after a "go" message: until then the Issend must not
 * complete. Then MPI_Ssend between pairs. */
static void p2p_ssend(void)
{
    static const size_t sizes[] = {1, 1000, 65536, 2u << 20};
    section = "p2p ssend";
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    size_t max = 2u << 20;
    uint8_t *sb = xmalloc(max), *rb = xmalloc(max);

    for (unsigned it = 0; it < sizeof(sizes) / sizeof(sizes[0]); it++) {
        size_t sz = sizes[it];
        MPI_Request rq, go_rq;
        char go = 'g', got = 0;
        int done = 0;
        fill(sb, sz, seed(4, rank, to, it));
        MPI_Issend(sb, (int)sz, MPI_BYTE, to, 7, MPI_COMM_WORLD, &rq);
        double t0 = tnow();
        while (tnow() - t0 < 0.02 && !done)
            MPI_Test(&rq, &done, MPI_STATUS_IGNORE);
        if (done)
            MISMATCH("MPI_Issend of %zu B to %d completed before the receive was posted", sz, to);
        MPI_Isend(&go, 1, MPI_CHAR, to, 8, MPI_COMM_WORLD, &go_rq);
        MPI_Recv(&got, 1, MPI_CHAR, from, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        memset(rb, 0, sz);
        MPI_Recv(rb, (int)sz, MPI_BYTE, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(rb, sz, seed(4, from, rank, it), "issend", from, it);
        if (!done)
            MPI_Wait(&rq, MPI_STATUS_IGNORE);
        MPI_Wait(&go_rq, MPI_STATUS_IGNORE);
    }
    /* blocking MPI_Ssend between pairs (0,1), (2,3), ...; an odd last rank
     * pairs with 0 in a second round */
    for (int round = 0; round < 2; round++) {
        int peer;
        if (round == 0)
            peer = (rank ^ 1) < nranks ? rank ^ 1 : -1;
        else
            peer = (nranks % 2 == 1) ? (rank == 0 ? nranks - 1 : rank == nranks - 1 ? 0 : -1) : -1;
        if (peer < 0)
            continue;
        for (unsigned it = 0; it < sizeof(sizes) / sizeof(sizes[0]); it++) {
            size_t sz = sizes[it];
            fill(sb, sz, seed(5, rank, peer, it));
            memset(rb, 0, sz);
            if (rank < peer) {
                MPI_Ssend(sb, (int)sz, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
                MPI_Recv(rb, (int)sz, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(rb, (int)sz, MPI_BYTE, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Ssend(sb, (int)sz, MPI_BYTE, peer, 9, MPI_COMM_WORLD);
            }
            check(rb, sz, seed(5, peer, rank, it), "ssend", peer, it);
        }
    }
    free(sb);
    free(rb);
}

/* MPI_Sendrecv with every shift (every pair of ranks, both ways), sizes
 * 0 B .. 1 MiB; MPI_Sendrecv_replace; one 16 MiB message around the ring. */
static void p2p_rings(size_t big)
{
    static const size_t sizes[] = {0, 1, 4096, 65537, 1u << 20};
    section = "p2p sendrecv";
    size_t max = 1u << 20;
    uint8_t *sb = xmalloc(max), *rb = xmalloc(max);
    unsigned it = 0;

    for (int shift = 1; shift < nranks; shift++) {
        int to = (rank + shift) % nranks, from = (rank + nranks - shift) % nranks;
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++, it++) {
            size_t sz = sizes[s];
            MPI_Status st;
            int cnt = -1;
            fill(sb, sz, seed(6, rank, to, it));
            memset(rb, 0, max);
            MPI_Sendrecv(sb, (int)sz, MPI_BYTE, to, 11, rb, (int)max, MPI_BYTE, from, 11,
                         MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_BYTE, &cnt);
            if (cnt != (int)sz)
                MISMATCH("sendrecv from %d: %d B, expected %zu", from, cnt, sz);
            check(rb, sz, seed(6, from, rank, it), "sendrecv", from, it);
        }
    }
    section = "p2p sendrecv_replace";
    {
        int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
        size_t sz = 256u << 10;
        fill(sb, sz, seed(7, rank, to, 0));
        MPI_Sendrecv_replace(sb, (int)sz, MPI_BYTE, to, 12, from, 12, MPI_COMM_WORLD,
                             MPI_STATUS_IGNORE);
        check(sb, sz, seed(7, from, rank, 0), "sendrecv_replace", from, 0);
    }
    free(sb);
    free(rb);

    section = "p2p big";
    if (big) {
        int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
        uint8_t *bs = xmalloc(big), *br = xmalloc(big);
        fill(bs, big, seed(8, rank, to, 0));
        memset(br, 0, big);
        MPI_Sendrecv(bs, (int)big, MPI_BYTE, to, 13, br, (int)big, MPI_BYTE, from, 13,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        check(br, big, seed(8, from, rank, 0), "big message", from, 0);
        free(bs);
        free(br);
    }
}

/* ========================================================== collectives */

static void coll_bcast(void)
{
    static const size_t sizes[] = {1, 3, 1000, 65536, 1u << 20, 4u << 20};
    section = "coll bcast";
    uint8_t *b = xmalloc(4u << 20);
    for (unsigned it = 0; it < sizeof(sizes) / sizeof(sizes[0]) * 2; it++) {
        size_t sz = sizes[it / 2];
        int root = (int)(it % (unsigned)nranks);
        if (rank == root)
            fill(b, sz, seed(20, root, 0, it));
        else
            memset(b, 0, sz);
        MPI_Bcast(b, (int)sz, MPI_BYTE, root, MPI_COMM_WORLD);
        check(b, sz, seed(20, root, 0, it), "bcast", root, it);
    }
    free(b);
}

static const size_t red_counts[] = {1, 17, 4096, 65536, 1u << 20};
#define NRED (sizeof(red_counts) / sizeof(red_counts[0]))

static int check_sum32(const uint32_t *out, size_t n, size_t first, unsigned it, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < nranks; r++)
            want += val32(r, first + i, it);
        if (out[i] != want) {
            MISMATCH("%s %zu elements iter %u: [%zu] = %u, expected %u", what, n, it, first + i,
                     out[i], want);
            return -1;
        }
    }
    return 0;
}

static void coll_reduce(void)
{
    size_t max = red_counts[NRED - 1];
    uint32_t *in = xmalloc(max * 4), *out = xmalloc(max * 4);
    section = "coll reduce";
    for (unsigned it = 0; it < NRED; it++) {
        size_t n = red_counts[it];
        int root = (int)((it + 1) % (unsigned)nranks);
        for (size_t i = 0; i < n; i++)
            in[i] = val32(rank, i, it);
        memset(out, 0xab, n * 4);
        MPI_Reduce(in, out, (int)n, MPI_UINT32_T, MPI_SUM, root, MPI_COMM_WORLD);
        if (rank == root)
            check_sum32(out, n, 0, it, "reduce SUM");
    }
    section = "coll allreduce";
    for (unsigned it = 0; it < NRED; it++) {
        size_t n = red_counts[it];
        for (size_t i = 0; i < n; i++)
            in[i] = val32(rank, i, it + 100);
        memset(out, 0xab, n * 4);
        MPI_Allreduce(in, out, (int)n, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        check_sum32(out, n, 0, it + 100, "allreduce SUM");
    }
    /* in place */
    {
        size_t n = 100000;
        for (size_t i = 0; i < n; i++)
            out[i] = val32(rank, i, 200);
        MPI_Allreduce(MPI_IN_PLACE, out, (int)n, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        check_sum32(out, n, 0, 200, "allreduce SUM in place");
    }
    /* double MAX, int64 BXOR, MAXLOC */
    {
        size_t n = 8192;
        double *d = xmalloc(n * sizeof(*d)), *dout = xmalloc(n * sizeof(*dout));
        uint64_t *x = xmalloc(n * 8), *xout = xmalloc(n * 8);
        struct {
            int v, r;
        } loc[64], locout[64];
        for (size_t i = 0; i < n; i++) {
            d[i] = (double)((int)(val32(rank, i, 300) % 20001u) - 10000) / 8.0;
            x[i] = val64(rank, i, 301);
        }
        for (int i = 0; i < 64; i++) {
            loc[i].v = (int)(val32(rank, (size_t)i, 302) % 1000u);
            loc[i].r = rank;
        }
        MPI_Allreduce(d, dout, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(x, xout, (int)n, MPI_UINT64_T, MPI_BXOR, MPI_COMM_WORLD);
        MPI_Allreduce(loc, locout, 64, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
        for (size_t i = 0; i < n; i++) {
            double wd = -1e300;
            uint64_t wx = 0;
            for (int r = 0; r < nranks; r++) {
                double v = (double)((int)(val32(r, i, 300) % 20001u) - 10000) / 8.0;
                if (v > wd)
                    wd = v;
                wx ^= val64(r, i, 301);
            }
            if (dout[i] != wd) {
                MISMATCH("allreduce MAX [%zu] = %g, expected %g", i, dout[i], wd);
                break;
            }
            if (xout[i] != wx) {
                MISMATCH("allreduce BXOR [%zu] = %llx, expected %llx", i,
                         (unsigned long long)xout[i], (unsigned long long)wx);
                break;
            }
        }
        for (int i = 0; i < 64; i++) {
            int wv = -1, wr = -1;
            for (int r = 0; r < nranks; r++) {
                int v = (int)(val32(r, (size_t)i, 302) % 1000u);
                if (v > wv) { /* MAXLOC: the lowest rank among equal values */
                    wv = v;
                    wr = r;
                }
            }
            if (locout[i].v != wv || locout[i].r != wr) {
                MISMATCH("allreduce MAXLOC [%d] = (%d, %d), expected (%d, %d)", i, locout[i].v,
                         locout[i].r, wv, wr);
                break;
            }
        }
        free(d);
        free(dout);
        free(x);
        free(xout);
    }
    /* MPI_Scan: prefix sums */
    section = "coll scan";
    {
        size_t n = 50000;
        for (size_t i = 0; i < n; i++)
            in[i] = val32(rank, i, 400);
        MPI_Scan(in, out, (int)n, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        for (size_t i = 0; i < n; i++) {
            uint32_t want = 0;
            for (int r = 0; r <= rank; r++)
                want += val32(r, i, 400);
            if (out[i] != want) {
                MISMATCH("scan [%zu] = %u, expected %u", i, out[i], want);
                break;
            }
        }
    }
    free(in);
    free(out);
}

/* element i of the block that rank s sends to rank d */
static uint32_t a2a(int s, int d, size_t i, unsigned it)
{
    return mix((uint32_t)s * 1000003u + (uint32_t)d * 7919u + it * 104729u + round_no * 31u) +
           (uint32_t)i;
}

static void coll_alltoall(void)
{
    static const size_t counts[] = {1, 100, 16384, 262144};
    section = "coll alltoall";
    size_t max = counts[3] * (size_t)nranks;
    uint32_t *sb = xmalloc(max * 4), *rb = xmalloc(max * 4);
    for (unsigned it = 0; it < 4; it++) {
        size_t c = counts[it];
        for (int d = 0; d < nranks; d++)
            for (size_t i = 0; i < c; i++)
                sb[(size_t)d * c + i] = a2a(rank, d, i, it);
        memset(rb, 0, c * (size_t)nranks * 4);
        MPI_Alltoall(sb, (int)c, MPI_UINT32_T, rb, (int)c, MPI_UINT32_T, MPI_COMM_WORLD);
        for (int s = 0; s < nranks; s++)
            for (size_t i = 0; i < c; i++)
                if (rb[(size_t)s * c + i] != a2a(s, rank, i, it)) {
                    MISMATCH("alltoall %zu per pair: from %d [%zu] = %u, expected %u", c, s, i,
                             rb[(size_t)s * c + i], a2a(s, rank, i, it));
                    s = nranks;
                    break;
                }
    }
    free(sb);
    free(rb);

    /* alltoallv: counts differ per pair, some are 0; 3 elements of gap after
     * each block on both sides, which must stay untouched */
    section = "coll alltoallv";
    static const size_t bases[] = {1, 1000, 100000};
    for (unsigned it = 0; it < 3; it++) {
        size_t base = bases[it];
        int *sc = xmalloc((size_t)nranks * sizeof(int)),
            *sd = xmalloc((size_t)nranks * sizeof(int));
        int *rc = xmalloc((size_t)nranks * sizeof(int)),
            *rd = xmalloc((size_t)nranks * sizeof(int));
#define A2AV_COUNT(s, d) ((int)(base * (size_t)(((s) + 2 * (d) + (int)it) % 4)))
        int stot = 0, rtot = 0;
        for (int p = 0; p < nranks; p++) {
            sc[p] = A2AV_COUNT(rank, p);
            sd[p] = stot;
            stot += sc[p] + 3;
            rc[p] = A2AV_COUNT(p, rank);
            rd[p] = rtot;
            rtot += rc[p] + 3;
        }
        uint32_t *s = xmalloc((size_t)stot * 4), *r = xmalloc((size_t)rtot * 4);
        for (int p = 0; p < nranks; p++)
            for (int i = 0; i < sc[p] + 3; i++)
                s[sd[p] + i] = i < sc[p] ? a2a(rank, p, (size_t)i, it + 10) : 0xdeadbeefu;
        for (int i = 0; i < rtot; i++)
            r[i] = 0x5a5a5a5au;
        MPI_Alltoallv(s, sc, sd, MPI_UINT32_T, r, rc, rd, MPI_UINT32_T, MPI_COMM_WORLD);
        for (int p = 0; p < nranks; p++)
            for (int i = 0; i < rc[p] + 3; i++) {
                uint32_t want = i < rc[p] ? a2a(p, rank, (size_t)i, it + 10) : 0x5a5a5a5au;
                if (r[rd[p] + i] != want) {
                    MISMATCH("alltoallv base %zu: from %d [%d] = %08x, expected %08x", base, p, i,
                             r[rd[p] + i], want);
                    p = nranks;
                    break;
                }
            }
#undef A2AV_COUNT
        free(s);
        free(r);
        free(sc);
        free(sd);
        free(rc);
        free(rd);
    }
}

static void coll_allgather(void)
{
    static const size_t counts[] = {1, 33, 8192, 262144};
    section = "coll allgather";
    size_t max = counts[3] * (size_t)nranks;
    uint32_t *sb = xmalloc(counts[3] * 4), *rb = xmalloc(max * 4);
    for (unsigned it = 0; it < 4; it++) {
        size_t c = counts[it];
        for (size_t i = 0; i < c; i++)
            sb[i] = a2a(rank, -1, i, it + 20);
        memset(rb, 0, c * (size_t)nranks * 4);
        MPI_Allgather(sb, (int)c, MPI_UINT32_T, rb, (int)c, MPI_UINT32_T, MPI_COMM_WORLD);
        for (int s = 0; s < nranks; s++)
            for (size_t i = 0; i < c; i++)
                if (rb[(size_t)s * c + i] != a2a(s, -1, i, it + 20)) {
                    MISMATCH("allgather %zu: from %d [%zu] = %u", c, s, i, rb[(size_t)s * c + i]);
                    s = nranks;
                    break;
                }
    }
    /* allgatherv: rank r contributes (r + 1) * 5000 elements */
    section = "coll allgatherv";
    {
        int *rc = xmalloc((size_t)nranks * sizeof(int)),
            *rd = xmalloc((size_t)nranks * sizeof(int));
        int tot = 0;
        for (int p = 0; p < nranks; p++) {
            rc[p] = (p + 1) * 5000;
            rd[p] = tot;
            tot += rc[p];
        }
        for (int i = 0; i < rc[rank]; i++)
            sb[i] = a2a(rank, -2, (size_t)i, 30);
        memset(rb, 0, (size_t)tot * 4);
        MPI_Allgatherv(sb, rc[rank], MPI_UINT32_T, rb, rc, rd, MPI_UINT32_T, MPI_COMM_WORLD);
        for (int p = 0; p < nranks; p++)
            for (int i = 0; i < rc[p]; i++)
                if (rb[rd[p] + i] != a2a(p, -2, (size_t)i, 30)) {
                    MISMATCH("allgatherv from %d [%d] = %u", p, i, rb[rd[p] + i]);
                    p = nranks;
                    break;
                }
        free(rc);
        free(rd);
    }
    free(sb);
    free(rb);
}

static void coll_reduce_scatter(void)
{
    section = "coll reduce_scatter";
    static const size_t bases[] = {1, 777, 200000};
    int *rc = xmalloc((size_t)nranks * sizeof(int));
    for (unsigned it = 0; it < 3; it++) {
        size_t tot = 0, first = 0;
        for (int p = 0; p < nranks; p++) {
            rc[p] = (int)(bases[it] + (size_t)p * (bases[it] / 3 + 1));
            if (p < rank)
                first += (size_t)rc[p];
            tot += (size_t)rc[p];
        }
        uint32_t *in = xmalloc(tot * 4), *out = xmalloc((size_t)rc[rank] * 4);
        for (size_t i = 0; i < tot; i++)
            in[i] = val32(rank, i, it + 500);
        memset(out, 0, (size_t)rc[rank] * 4);
        MPI_Reduce_scatter(in, out, rc, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        check_sum32(out, (size_t)rc[rank], first, it + 500, "reduce_scatter SUM");
        free(in);
        free(out);
    }
    section = "coll reduce_scatter_block";
    {
        size_t c = 65536;
        uint32_t *in = xmalloc(c * (size_t)nranks * 4), *out = xmalloc(c * 4);
        for (size_t i = 0; i < c * (size_t)nranks; i++)
            in[i] = val32(rank, i, 600);
        MPI_Reduce_scatter_block(in, out, (int)c, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD);
        check_sum32(out, c, c * (size_t)rank, 600, "reduce_scatter_block SUM");
        free(in);
        free(out);
    }
    free(rc);
}

/* Nonblocking collectives outstanding together (two MPI_Iallreduce, one
 * MPI_Ibcast, one MPI_Ibarrier) while point-to-point messages go around the
 * ring; completed with MPI_Test/MPI_Waitall. */
static void coll_nonblocking(void)
{
    section = "coll nonblocking";
    size_t n1 = 262144, n2 = 1000, nb = 1u << 20;
    uint32_t *in1 = xmalloc(n1 * 4), *out1 = xmalloc(n1 * 4);
    uint32_t *in2 = xmalloc(n2 * 4), *out2 = xmalloc(n2 * 4);
    uint8_t *bb = xmalloc(nb), *ps = xmalloc(65536), *pr = xmalloc(65536);
    MPI_Request rq[4];
    int to = (rank + 1) % nranks, from = (rank + nranks - 1) % nranks;
    for (size_t i = 0; i < n1; i++)
        in1[i] = val32(rank, i, 700);
    for (size_t i = 0; i < n2; i++)
        in2[i] = val32(rank, i, 701);
    if (rank == nranks - 1)
        fill(bb, nb, seed(21, rank, 0, 0));
    else
        memset(bb, 0, nb);
    MPI_Iallreduce(in1, out1, (int)n1, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD, &rq[0]);
    MPI_Ibcast(bb, (int)nb, MPI_BYTE, nranks - 1, MPI_COMM_WORLD, &rq[1]);
    MPI_Iallreduce(in2, out2, (int)n2, MPI_UINT32_T, MPI_SUM, MPI_COMM_WORLD, &rq[2]);
    MPI_Ibarrier(MPI_COMM_WORLD, &rq[3]);
    for (unsigned k = 0; k < 16; k++) {
        int flag;
        size_t sz = 1 + k * 4000;
        fill(ps, sz, seed(22, rank, to, k));
        MPI_Sendrecv(ps, (int)sz, MPI_BYTE, to, 40, pr, 65536, MPI_BYTE, from, 40, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        check(pr, sz, seed(22, from, rank, k), "sendrecv beside collectives", from, k);
        MPI_Testall(4, rq, &flag, MPI_STATUSES_IGNORE);
    }
    MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
    check_sum32(out1, n1, 0, 700, "iallreduce SUM");
    check_sum32(out2, n2, 0, 701, "iallreduce SUM (second)");
    check(bb, nb, seed(21, nranks - 1, 0, 0), "ibcast", nranks - 1, 0);
    free(in1);
    free(out1);
    free(in2);
    free(out2);
    free(bb);
    free(ps);
    free(pr);
}

/* A split (even/odd ranks, reversed order) and a duplicated communicator. */
static void coll_comms(void)
{
    section = "coll split/dup";
    MPI_Comm sub, dup;
    int srank, ssize;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &sub);
    MPI_Comm_rank(sub, &srank);
    MPI_Comm_size(sub, &ssize);
    int want_size = (nranks + 1 - rank % 2) / 2;
    if (ssize != want_size)
        MISMATCH("split: size %d, expected %d", ssize, want_size);
    uint64_t mine = (uint64_t)(rank + 1) * 1000003u, sum = 0, want = 0;
    for (int r = rank % 2; r < nranks; r += 2)
        want += (uint64_t)(r + 1) * 1000003u;
    MPI_Allreduce(&mine, &sum, 1, MPI_UINT64_T, MPI_SUM, sub);
    if (sum != want)
        MISMATCH("split allreduce: %llu, expected %llu", (unsigned long long)sum,
                 (unsigned long long)want);
    /* root 0 of the split is the highest rank of the colour */
    uint8_t b[5000];
    int top = nranks - 1 - ((nranks - 1) % 2 != rank % 2);
    if (srank == 0)
        fill(b, sizeof(b), seed(23, rank, 0, 0));
    MPI_Bcast(b, sizeof(b), MPI_BYTE, 0, sub);
    check(b, sizeof(b), seed(23, top, 0, 0), "split bcast", top, 0);
    MPI_Comm_free(&sub);

    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    uint32_t v[300], out[300];
    for (size_t i = 0; i < 300; i++)
        v[i] = val32(rank, i, 800);
    MPI_Allreduce(v, out, 300, MPI_UINT32_T, MPI_SUM, dup);
    check_sum32(out, 300, 0, 800, "dup allreduce SUM");
    MPI_Comm_free(&dup);
}

/* ============================================================ one-sided */

/* Window layout (bytes, disp_unit 1): a slot per origin for Puts, the
 * target's own bytes for Gets, uint64 arrays for Accumulate, a counter for
 * Fetch_and_op, int64 slots for Compare_and_swap. */
enum {
    SLOT = 256 << 10,
    ACCN = 4096,
    CASN = 64,
    FOPS = 96,
};

struct layout {
    size_t slots, own, acc, acc2, cnt, cas, size;
};

static struct layout win_layout(void)
{
    struct layout l;
    l.slots = 0;
    l.own = (size_t)nranks * SLOT;
    l.acc = l.own + SLOT;
    l.acc2 = l.acc + ACCN * 8;
    l.cnt = l.acc2 + ACCN * 8;
    l.cas = l.cnt + 64;
    l.size = l.cas + CASN * 8;
    return l;
}

static void osc_fence(MPI_Win win, uint8_t *base, const struct layout *L, unsigned fl)
{
    static const size_t sizes[] = {8, 4096, SLOT};
    uint8_t *src = xmalloc(SLOT * (size_t)nranks), *dst = xmalloc(SLOT * (size_t)nranks);

    section = fl ? "osc create fence put" : "osc allocate fence put";
    MPI_Win_fence(0, win);
    for (unsigned it = 0; it < 3; it++) {
        size_t sz = sizes[it];
        for (int t = 0; t < nranks; t++) {
            uint8_t *p = src + (size_t)t * SLOT;
            fill(p, sz, seed(30 + fl, rank, t, it));
            MPI_Put(p, (int)sz, MPI_BYTE, t, (MPI_Aint)(L->slots + (size_t)rank * SLOT), (int)sz,
                    MPI_BYTE, win);
        }
        MPI_Win_fence(0, win);
        for (int o = 0; o < nranks; o++)
            check(base + L->slots + (size_t)o * SLOT, sz, seed(30 + fl, o, rank, it), "put", o, it);
        MPI_Win_fence(0, win);
    }

    section = fl ? "osc create fence get" : "osc allocate fence get";
    memset(dst, 0, SLOT * (size_t)nranks);
    for (int t = 0; t < nranks; t++)
        MPI_Get(dst + (size_t)t * SLOT, SLOT, MPI_BYTE, t, (MPI_Aint)L->own, SLOT, MPI_BYTE, win);
    /* small Gets at odd offsets */
    uint8_t small[3][16];
    memset(small, 0, sizeof(small));
    int t1 = (rank + 1) % nranks;
    MPI_Get(small[0], 1, MPI_BYTE, t1, (MPI_Aint)(L->own + 13), 1, MPI_BYTE, win);
    MPI_Get(small[1], 7, MPI_BYTE, t1, (MPI_Aint)(L->own + SLOT - 7), 7, MPI_BYTE, win);
    MPI_Get(small[2], 16, MPI_BYTE, t1, (MPI_Aint)(L->own + 4097), 16, MPI_BYTE, win);
    MPI_Win_fence(0, win);
    for (int t = 0; t < nranks; t++)
        check(dst + (size_t)t * SLOT, SLOT, seed(29, t, 0, 0), "get", t, 0);
    {
        uint8_t want[3][16];
        for (int i = 0; i < 16; i++) {
            want[0][i] = pat(seed(29, t1, 0, 0), 13 + (size_t)i);
            want[1][i] = pat(seed(29, t1, 0, 0), SLOT - 7 + (size_t)i);
            want[2][i] = pat(seed(29, t1, 0, 0), 4097 + (size_t)i);
        }
        if (memcmp(small[0], want[0], 1) || memcmp(small[1], want[1], 7) ||
            memcmp(small[2], want[2], 16))
            MISMATCH("small gets from %d differ", t1);
    }

    section = fl ? "osc create fence accumulate" : "osc allocate fence accumulate";
    uint64_t *acc = (uint64_t *)(void *)(base + L->acc);
    memset(acc, 0, ACCN * 8);
    MPI_Win_fence(0, win);
    uint64_t *v = xmalloc((size_t)nranks * ACCN * 8);
    for (unsigned it = 0; it < 2; it++)
        for (int t = 0; t < nranks; t++) {
            uint64_t *p = v + (size_t)t * ACCN;
            for (size_t i = 0; i < ACCN; i++)
                p[i] = val64(rank, i, it * 64 + (unsigned)t + 40 * fl);
            MPI_Accumulate(p, ACCN, MPI_UINT64_T, t, (MPI_Aint)L->acc, ACCN, MPI_UINT64_T, MPI_SUM,
                           win);
            MPI_Win_fence(0, win); /* v is reused */
        }
    for (size_t i = 0; i < ACCN; i++) {
        uint64_t want = 0;
        for (int o = 0; o < nranks; o++)
            for (unsigned it = 0; it < 2; it++)
                want += val64(o, i, it * 64 + (unsigned)rank + 40 * fl);
        if (acc[i] != want) {
            MISMATCH("accumulate [%zu] = %llx, expected %llx", i, (unsigned long long)acc[i],
                     (unsigned long long)want);
            break;
        }
    }
    MPI_Win_fence(0, win);
    free(v);
    free(src);
    free(dst);
}

static void osc_passive(MPI_Win win, uint8_t *base, const struct layout *L, unsigned fl)
{
    uint8_t *src = xmalloc(SLOT), *dst = xmalloc(SLOT);

    /* exclusive lock, Put, unlock, to every target in turn */
    section = fl ? "osc create lock put" : "osc allocate lock put";
    for (int d = 0; d < nranks; d++) {
        int t = (rank + d) % nranks;
        size_t sz = 4096 + (size_t)rank * 100 + (size_t)d;
        fill(src, sz, seed(32 + fl, rank, t, 0));
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
        MPI_Put(src, (int)sz, MPI_BYTE, t, (MPI_Aint)(L->slots + (size_t)rank * SLOT), (int)sz,
                MPI_BYTE, win);
        MPI_Win_unlock(t, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
    for (int o = 0; o < nranks; o++) {
        int d = (rank - o + nranks) % nranks;
        check(base + L->slots + (size_t)o * SLOT, 4096 + (size_t)o * 100 + (size_t)d,
              seed(32 + fl, o, rank, 0), "locked put", o, 0);
    }
    /* the counters of the next steps start at known values */
    memset(base + L->acc2, 0, ACCN * 8);
    memset(base + L->cnt, 0, 64);
    for (int i = 0; i < CASN; i++) {
        int64_t m1 = -1;
        memcpy(base + L->cas + (size_t)i * 8, &m1, 8);
    }
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);

    /* shared locks: every rank accumulates into every target at once */
    section = fl ? "osc create lock accumulate" : "osc allocate lock accumulate";
    {
        uint64_t *v = xmalloc(ACCN * 8);
        for (int d = 0; d < nranks; d++) {
            int t = (rank + d) % nranks;
            for (size_t i = 0; i < ACCN; i++)
                v[i] = val64(rank, i, 900 + (unsigned)t);
            MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
            MPI_Accumulate(v, ACCN, MPI_UINT64_T, t, (MPI_Aint)L->acc2, ACCN, MPI_UINT64_T, MPI_SUM,
                           win);
            MPI_Win_unlock(t, win);
        }
        free(v);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
        const uint64_t *a = (const uint64_t *)(const void *)(base + L->acc2);
        for (size_t i = 0; i < ACCN; i++) {
            uint64_t want = 0;
            for (int o = 0; o < nranks; o++)
                want += val64(o, i, 900 + (unsigned)rank);
            if (a[i] != want) {
                MISMATCH("locked accumulate [%zu] = %llx, expected %llx", i,
                         (unsigned long long)a[i], (unsigned long long)want);
                break;
            }
        }
        MPI_Win_unlock(rank, win);
    }

    /* lock_all: Put, flush, Get of the same bytes, flush */
    section = fl ? "osc create lock_all flush" : "osc allocate lock_all flush";
    MPI_Win_lock_all(0, win);
    for (int d = 0; d < nranks; d++) {
        int t = (rank + d) % nranks;
        size_t sz = d % 2 ? 100 + (size_t)d : SLOT - (size_t)d;
        fill(src, sz, seed(34 + fl, rank, t, 1));
        memset(dst, 0, sz);
        MPI_Put(src, (int)sz, MPI_BYTE, t, (MPI_Aint)(L->slots + (size_t)rank * SLOT), (int)sz,
                MPI_BYTE, win);
        MPI_Win_flush(t, win);
        MPI_Get(dst, (int)sz, MPI_BYTE, t, (MPI_Aint)(L->slots + (size_t)rank * SLOT), (int)sz,
                MPI_BYTE, win);
        MPI_Win_flush(t, win);
        check(dst, sz, seed(34 + fl, rank, t, 1), "get after put+flush", t, 1);
    }

    /* Fetch_and_op: FOPS increments of the counter of each target, spread
     * over the ranks; every value fetched from a target's counter is
     * fetched once */
    section = fl ? "osc create fetch_and_op" : "osc allocate fetch_and_op";
    uint64_t *fetched = xmalloc((size_t)nranks * FOPS * sizeof(uint64_t));
    int per = FOPS / nranks; /* ops per origin per target */
    {
        uint64_t one = 1;
        for (int j = 0; j < per; j++)
            for (int d = 0; d < nranks; d++) {
                int t = (rank + d) % nranks;
                MPI_Fetch_and_op(&one, &fetched[(size_t)t * (size_t)per + (size_t)j], MPI_UINT64_T,
                                 t, (MPI_Aint)L->cnt, MPI_SUM, win);
                MPI_Win_flush(t, win);
            }
    }
    /* Compare_and_swap: every rank tries to take every slot; one wins each */
    section = fl ? "osc create compare_and_swap" : "osc allocate compare_and_swap";
    int64_t got[CASN];
    for (int k = 0; k < CASN; k++) {
        int s = (k + rank * 7) % CASN, t = s % nranks;
        int64_t mine = rank, expect = -1;
        MPI_Compare_and_swap(&mine, &expect, &got[s], MPI_INT64_T, t,
                             (MPI_Aint)(L->cas + (size_t)s * 8), win);
        MPI_Win_flush(t, win);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);

    /* fetch_and_op: the counter, read with MPI_NO_OP, and the values */
    section = fl ? "osc create fetch_and_op" : "osc allocate fetch_and_op";
    {
        uint64_t total = (uint64_t)per * (uint64_t)nranks, now = 0, dummy = 0;
        int t = (rank + 1) % nranks;
        MPI_Win_lock(MPI_LOCK_SHARED, t, 0, win);
        MPI_Fetch_and_op(&dummy, &now, MPI_UINT64_T, t, (MPI_Aint)L->cnt, MPI_NO_OP, win);
        MPI_Win_unlock(t, win);
        if (now != total)
            MISMATCH("counter of %d is %llu after %llu increments", t, (unsigned long long)now,
                     (unsigned long long)total);
        uint64_t *all =
            rank == 0 ? xmalloc((size_t)nranks * nranks * per * sizeof(uint64_t)) : NULL;
        MPI_Gather(fetched, nranks * per, MPI_UINT64_T, all, nranks * per, MPI_UINT64_T, 0,
                   MPI_COMM_WORLD);
        if (rank == 0) {
            uint8_t *seen = xmalloc(total);
            for (int tt = 0; tt < nranks; tt++) {
                memset(seen, 0, total);
                for (int o = 0; o < nranks; o++)
                    for (int j = 0; j < per; j++) {
                        uint64_t x =
                            all[((size_t)o * nranks + (size_t)tt) * (size_t)per + (size_t)j];
                        if (x >= total || seen[x]++) {
                            MISMATCH("target %d: rank %d fetched %llu (out of range or twice)", tt,
                                     o, (unsigned long long)x);
                            o = nranks;
                            break;
                        }
                        /* one origin's fetches from one target increase */
                        if (j > 0 && x <= all[((size_t)o * nranks + (size_t)tt) * (size_t)per +
                                              (size_t)j - 1]) {
                            MISMATCH("target %d: rank %d fetched %llu after a larger value", tt, o,
                                     (unsigned long long)x);
                            o = nranks;
                            break;
                        }
                    }
            }
            free(seen);
            free(all);
        }
    }
    free(fetched);

    section = fl ? "osc create compare_and_swap" : "osc allocate compare_and_swap";
    {
        int won[CASN], winner[CASN], nwon[CASN];
        for (int s = 0; s < CASN; s++) {
            won[s] = got[s] == -1;
            winner[s] = won[s] ? rank : -1;
            if (!won[s] && (got[s] < 0 || got[s] >= nranks || got[s] == rank))
                MISMATCH("slot %d: compare_and_swap returned %lld", s, (long long)got[s]);
        }
        MPI_Allreduce(won, nwon, CASN, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, winner, CASN, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win);
        for (int s = 0; s < CASN; s++) {
            if (nwon[s] != 1) {
                MISMATCH("slot %d won %d times", s, nwon[s]);
                continue;
            }
            if (!won[s] && got[s] != winner[s])
                MISMATCH("slot %d: lost to %lld, but %d won", s, (long long)got[s], winner[s]);
            if (s % nranks == rank) {
                int64_t v;
                memcpy(&v, base + L->cas + (size_t)s * 8, 8);
                if (v != winner[s])
                    MISMATCH("slot %d holds %lld, winner %d", s, (long long)v, winner[s]);
            }
        }
        MPI_Win_unlock(rank, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    free(src);
    free(dst);
}

static size_t big_size = 16u << 20;

static void p2p_rings_step(void)
{
    p2p_rings(big_size);
}

static void osc(int create);

static void osc_allocate(void)
{
    osc(0);
}

static void osc_create(void)
{
    osc(1);
}

static void osc(int create)
{
    struct layout L = win_layout();
    uint8_t *base = NULL;
    MPI_Win win;
    unsigned fl = create ? 1 : 0;

    if (create) {
        base = xmalloc(L.size);
        MPI_Win_create(base, (MPI_Aint)L.size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    } else {
        MPI_Win_allocate((MPI_Aint)L.size, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    }
    /* the window's own bytes, read by the others' Gets */
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    memset(base, 0, L.size);
    fill(base + L.own, SLOT, seed(29, rank, 0, 0));
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);

    osc_fence(win, base, &L, fl);
    osc_passive(win, base, &L, fl);

    MPI_Win_free(&win);
    if (create)
        free(base);
}

/* ================================================================== main */

int main(int argc, char **argv)
{
    int do_p2p = 0, do_coll = 0, do_osc = 0, do_ssend = 0;
    unsigned rounds = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "p2p"))
            do_p2p = 1;
        else if (!strcmp(argv[i], "coll"))
            do_coll = 1;
        else if (!strcmp(argv[i], "osc"))
            do_osc = 1;
        else if (!strcmp(argv[i], "ssend"))
            do_ssend = 1;
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = (unsigned)strtoul(argv[++i], NULL, 0);
        else {
            if (rank == 0)
                fprintf(stderr, "usage: mpi_wide [-r ROUNDS] [p2p] [coll] [osc] [ssend]\n");
            MPI_Finalize();
            return 2;
        }
    }
    if (!do_p2p && !do_coll && !do_osc && !do_ssend)
        do_p2p = do_coll = do_osc = 1;
    if (nranks < 2) {
        if (rank == 0)
            fprintf(stderr, "needs at least 2 ranks\n");
        MPI_Finalize();
        return 2;
    }

    struct {
        const char *name;
        int on;
        void (*fn)(void);
    } steps[] = {
        {"p2p out-of-order", do_p2p, p2p_out_of_order},
        {"p2p any-source/any-tag", do_p2p, p2p_any},
        {"p2p probe", do_p2p, p2p_probe},
        {"p2p ssend", do_ssend, p2p_ssend},
        {"p2p sendrecv + 16 MiB", do_p2p, p2p_rings_step},
        {"coll bcast", do_coll, coll_bcast},
        {"coll reduce/allreduce/scan", do_coll, coll_reduce},
        {"coll alltoall(v)", do_coll, coll_alltoall},
        {"coll allgather(v)", do_coll, coll_allgather},
        {"coll reduce_scatter", do_coll, coll_reduce_scatter},
        {"coll nonblocking", do_coll, coll_nonblocking},
        {"coll split/dup", do_coll, coll_comms},
        {"osc win_allocate", do_osc, osc_allocate},
        {"osc win_create", do_osc, osc_create},
    };
    double t_all = tnow();
    for (round_no = 0; round_no < rounds; round_no++) {
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
            if (!steps[i].on)
                continue;
            long before = errors;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = tnow();
            steps[i].fn();
            long mine = errors - before, sum = 0;
            MPI_Reduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0 && (sum || round_no == 0 || round_no + 1 == rounds))
                printf("round %u %-28s %s (%.2f s, %ld mismatches)\n", round_no + 1, steps[i].name,
                       sum ? "FAIL" : "ok", tnow() - t0, sum);
            fflush(stdout);
        }
    }

    long all = 0;
    MPI_Allreduce(&errors, &all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%s: %ld mismatches (%d ranks, %u rounds, %.1f s)\n", all ? "FAIL" : "OK", all,
               nranks, rounds, tnow() - t_all);
    MPI_Finalize();
    return all ? 1 : 0;
}
