/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC over the bytes as received (issue 12 item 6). With MPA CRC on, a
 * program thread keeps writing the very region that incoming RDMA Writes,
 * Sends and Read Responses are placed into. Such a write makes the placed
 * data undefined (verbs), but it must not make the CRC check fail: the CRC
 * is computed over what came off the wire, not over the destination after
 * placement (RFC 5044 §4.4; siw does the same). So: every transfer
 * completes successfully, no Terminate either way, no async event, both
 * QPs stay in RTS, and afterwards (writer stopped) a clean transfer of
 * each kind still verifies byte for byte.
 *
 * Also the cost side: with CRC off large payloads still go in place.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "dp_test.h"

#define BUFSZ (4u << 20)

static struct dp_ep A, B;
static uint8_t *a_src, *a_dst, *b_src, *b_dst;
static struct ibv_mr *a_src_mr, *a_dst_mr, *b_src_mr, *b_dst_mr;
static uint64_t wrid = 100;

/* The interfering program thread. Its stores are deliberately racy with the
 * engine's placement (that is the point); they are kept out of TSan's view
 * so that a TSan build checks the engine's own synchronization only. */
struct writer {
    pthread_t th;
    uint8_t *volatile target;
    volatile size_t len;
    atomic_bool stop;
    atomic_ulong passes;
};
static struct writer W;

__attribute__((no_sanitize("thread"), noinline)) static void scribble(uint8_t *p, size_t n,
                                                                      uint8_t v)
{
    volatile uint8_t *q = p;

    for (size_t i = 0; i < n; i += 61)
        q[i] = (uint8_t)(v + i);
}

static void *writer_main(void *arg)
{
    uint8_t v = 0;

    (void)arg;
    while (!atomic_load(&W.stop)) {
        scribble(W.target, W.len, v++);
        atomic_fetch_add(&W.passes, 1);
        if ((v & 15) == 0)
            sched_yield(); /* 2 CPUs: let the engine run too */
    }
    return NULL;
}

static void writer_start(uint8_t *target, size_t len)
{
    W.target = target;
    W.len = len;
    atomic_store(&W.stop, false);
    atomic_store(&W.passes, 0);
    CHECK_EQ(pthread_create(&W.th, NULL, writer_main, NULL), 0);
}

static unsigned long writer_stop(void)
{
    atomic_store(&W.stop, true);
    pthread_join(W.th, NULL);
    return atomic_load(&W.passes);
}

static void pair_up(bool crc)
{
    int acc = ENG_ACCESS_ALL;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    CHECK_EQ(dp_connect(&A, &B, crc, false, 16, 16, 16, 16), 0);
    a_src = dp_alloc(4096, BUFSZ);
    a_dst = dp_alloc(4096, BUFSZ);
    b_src = dp_alloc(4096, BUFSZ);
    b_dst = dp_alloc(4096, BUFSZ);
    a_src_mr = ibv_reg_mr(A.pd, a_src, BUFSZ, acc);
    a_dst_mr = ibv_reg_mr(A.pd, a_dst, BUFSZ, acc);
    b_src_mr = ibv_reg_mr(B.pd, b_src, BUFSZ, acc);
    b_dst_mr = ibv_reg_mr(B.pd, b_dst, BUFSZ, acc);
    CHECK(a_src_mr && a_dst_mr && b_src_mr && b_dst_mr);
}

static void pair_down(void)
{
    CHECK_EQ(ibv_dereg_mr(a_src_mr), 0);
    CHECK_EQ(ibv_dereg_mr(a_dst_mr), 0);
    CHECK_EQ(ibv_dereg_mr(b_src_mr), 0);
    CHECK_EQ(ibv_dereg_mr(b_dst_mr), 0);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(a_src);
    free(a_dst);
    free(b_src);
    free(b_dst);
}

enum { OP_WRITE, OP_SEND, OP_READ, OP_N };
static const char *const op_name[OP_N] = {"Write", "Send", "Read"};

/* One transfer of `len` bytes of kind op, A -> B (Read: B's b_src into A's
 * a_dst). Returns true when every completion was successful. */
static bool xfer(int op, uint32_t len)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_recv_wr rw, *rbad;
    struct ibv_sge s, r;
    struct ibv_wc wc;
    bool ok = true;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = ++wrid;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &s;
    wr.num_sge = 1;
    switch (op) {
    case OP_WRITE:
        s = (struct ibv_sge){(uintptr_t)a_src, len, a_src_mr->lkey};
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.rkey = b_dst_mr->rkey;
        wr.wr.rdma.remote_addr = (uintptr_t)b_dst;
        break;
    case OP_SEND:
        r = (struct ibv_sge){(uintptr_t)b_dst, len, b_dst_mr->lkey};
        memset(&rw, 0, sizeof(rw));
        rw.wr_id = wrid;
        rw.sg_list = &r;
        rw.num_sge = 1;
        CHECK_EQ(ibv_post_recv(B.qp, &rw, &rbad), 0);
        s = (struct ibv_sge){(uintptr_t)a_src, len, a_src_mr->lkey};
        wr.opcode = IBV_WR_SEND;
        break;
    default:
        s = (struct ibv_sge){(uintptr_t)a_dst, len, a_dst_mr->lkey};
        wr.opcode = IBV_WR_RDMA_READ;
        wr.wr.rdma.rkey = b_src_mr->rkey;
        wr.wr.rdma.remote_addr = (uintptr_t)b_src;
        break;
    }
    CHECK_EQ(ibv_post_send(A.qp, &wr, &bad), 0);
    if (dp_poll(A.scq, &wc, DP_TIMEOUT_MS) != 1) {
        CHECK(!"send completion timed out");
        return false;
    }
    CHECK_EQ(wc.wr_id, wrid);
    if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "%s %u: status %s\n", op_name[op], len, ibv_wc_status_str(wc.status));
        ok = false;
    }
    if (op == OP_SEND) {
        if (dp_poll(B.rcq, &wc, DP_TIMEOUT_MS) != 1) {
            CHECK(!"receive completion timed out");
            return false;
        }
        if (wc.status != IBV_WC_SUCCESS || wc.byte_len != len) {
            fprintf(stderr, "Send %u: receive status %s len %u\n", len,
                    ibv_wc_status_str(wc.status), wc.byte_len);
            ok = false;
        }
    }
    return ok;
}

/* A Write is complete at the sender when TCP took it: wait for B to have
 * placed it by a Send behind it (in order, RFC 5040 §5.5). */
static bool fence_b(void)
{
    return xfer(OP_SEND, 8);
}

static void no_errors(const char *what)
{
    bool clean = dp_state(A.qp) == IBV_QPS_RTS && dp_state(B.qp) == IBV_QPS_RTS &&
                 !to_uqp(A.qp)->term_sent && !to_uqp(A.qp)->term_received &&
                 !to_uqp(B.qp)->term_sent && !to_uqp(B.qp)->term_received;

    if (!clean)
        fprintf(stderr, "%s: QP states %d/%d, Terminate A sent %d recv %d, B sent %d recv %d\n",
                what, dp_state(A.qp), dp_state(B.qp), to_uqp(A.qp)->term_sent,
                to_uqp(A.qp)->term_received, to_uqp(B.qp)->term_sent, to_uqp(B.qp)->term_received);
    CHECK(clean);
    CHECK_EQ(dp_async_wait(A.qp, 1), -1);
    CHECK_EQ(dp_async_wait(B.qp, 1), -1);
}

/* The clean transfer after the interference: every kind, byte for byte. */
static void verify_clean(uint32_t len)
{
    eng_fill(a_src, len, len);
    memset(b_dst, 0, len);
    CHECK(xfer(OP_WRITE, len));
    CHECK(fence_b());
    dp_sync(B.qp);
    CHECK_EQ(eng_diff(b_dst, len, len), -1);

    eng_fill(a_src, len, len + 1);
    memset(b_dst, 0, len);
    CHECK(xfer(OP_SEND, len));
    dp_sync(B.qp);
    CHECK_EQ(eng_diff(b_dst, len, len + 1), -1);

    eng_fill(b_src, len, len + 2);
    memset(a_dst, 0, len);
    CHECK(xfer(OP_READ, len));
    dp_sync(A.qp);
    CHECK_EQ(eng_diff(a_dst, len, len + 2), -1);
}

static void test_race(void)
{
    static const uint32_t sizes[] = {16, 4096, 65536, BUFSZ};
    uint64_t zc, cp, rd;

    pair_up(true);
    eng_fill(a_src, BUFSZ, 7);
    eng_fill(b_src, BUFSZ, 8);
    for (int op = 0; op < OP_N; op++) {
        /* the region the transfers land in, on the receiving side */
        uint8_t *target = op == OP_READ ? a_dst : b_dst;
        unsigned ok = 0, n = 0;
        unsigned long passes;
        uint64_t t0 = dp_now_ms();

        writer_start(target, BUFSZ);
        for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
            unsigned reps = sizes[si] >= BUFSZ ? 6 : 40;
            for (unsigned i = 0; i < reps; i++) {
                n++;
                ok += xfer(op, sizes[si]);
                if (op == OP_WRITE && i % 8 == 7)
                    ok += fence_b(), n++;
            }
        }
        /* on a loaded machine the writer may not have run yet: the race
         * needs at least one of its passes during transfers */
        while (atomic_load(&W.passes) == 0 && dp_now_ms() - t0 < DP_TIMEOUT_MS) {
            n++;
            ok += xfer(op, 4096);
        }
        if (op == OP_WRITE)
            ok += fence_b(), n++;
        passes = writer_stop();
        printf("crc race: %s: %u/%u transfers ok while the target was written (%lu passes), "
               "%llu ms\n",
               op_name[op], ok, n, passes, (unsigned long long)(dp_now_ms() - t0));
        CHECK_EQ(ok, n);
        CHECK(passes > 0);
        no_errors(op_name[op]);
    }
    uiw_qp_rx_stats(to_uqp(B.qp), &zc, &cp, &rd);
    printf("crc race: B received %llu bytes in place, %llu through staging\n",
           (unsigned long long)zc, (unsigned long long)cp);
    CHECK_EQ(zc, 0); /* CRC on: never in place */
    verify_clean(BUFSZ);
    verify_clean(4096);
    verify_clean(13);
    no_errors("after");
    pair_down();
}

/* CRC off keeps zero-copy placement for large payloads. */
static void test_crc_off_in_place(void)
{
    uint64_t zc, cp, rd;

    pair_up(false);
    verify_clean(BUFSZ);
    uiw_qp_rx_stats(to_uqp(B.qp), &zc, &cp, &rd);
    printf("crc off: B received %llu bytes in place, %llu through staging\n",
           (unsigned long long)zc, (unsigned long long)cp);
    CHECK(zc >= (uint64_t)BUFSZ);
    no_errors("crc off");
    pair_down();
}

/* Throughput with CRC on and off (informational: the cost of staging). */
static void measure(void)
{
    for (int crc = 1; crc >= 0; crc--) {
        pair_up(crc);
        for (int op = 0; op < OP_N; op++) {
            uint64_t t0 = dp_now_ms(), ms;
            unsigned n = 16;

            for (unsigned i = 0; i < n; i++)
                CHECK(xfer(op, BUFSZ));
            if (op == OP_WRITE)
                CHECK(fence_b());
            ms = dp_now_ms() - t0;
            printf("measure: crc=%d %s %u x 4 MiB: %llu ms = %.0f MB/s\n", crc, op_name[op], n,
                   (unsigned long long)ms, ms ? (double)n * BUFSZ / 1e3 / (double)ms : 0.0);
        }
        pair_down();
    }
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    test_race();
    test_crc_off_in_place();
    if (!getenv("UIWARP_DP_QUICK"))
        measure();
    ibv_close_device(dp_ctx);
    TEST_MAIN_END();
}
