/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Send-side MR lifetime (issue 12 item 7). A Send/Write's iovecs point into
 * its source MR while they wait in the socket's queue (EAGAIN); the MR is
 * held by the WR until its last byte is handed to TCP. ibv_dereg_mr of
 * such an MR, followed by free() or munmap() of the buffer, must never let
 * the engine read the freed memory (ASan: heap-use-after-free; munmap:
 * EFAULT / SIGSEGV without ASan), and the outcome is defined:
 *   - ibv_dereg_mr returns 0 at once (it never waits for the network, as
 *     siw's dereg does not: the kernel keeps the pages pinned, we copy);
 *   - bytes already cut into FPDUs are sent intact (a copy taken by
 *     ibv_dereg_mr), so a WR whose message was wholly cut completes with
 *     IBV_WC_SUCCESS and its data arrives byte for byte;
 *   - a WR whose message still needed bytes of the MR completes with
 *     IBV_WC_LOC_PROT_ERR, a Terminate goes out, the QP goes to ERR; every
 *     byte that did arrive is the original data;
 *   - a WR not started yet fails the same way when it starts (the lkey is
 *     no longer valid).
 * The peer is a raw wire-core endpoint that does not read until told to.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "dp_test.h"

static struct dp_ep A;
static struct dp_raw P;

/* Payload bytes the peer saw per source (seed), and mismatches. */
#define NSEED 8
static uint64_t got[NSEED], bad;
static bool term_seen;
static uint32_t send_seed[64]; /* MSN -> seed of Sends */

static void pair_up(void)
{
    uiw_mpa_result m = dp_mpa(false, false, 16, 16);
    int small = 32 * 1024;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_connect_raw(&A, &P, &m), 0);
    /* a small socket buffer: the queue fills at once */
    setsockopt(to_uqp(A.qp)->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
    memset(got, 0, sizeof(got));
    bad = 0;
    term_seen = false;
    memset(send_seed, 0, sizeof(send_seed));
}

static void pair_down(void)
{
    dp_ep_destroy(&A);
    dp_raw_fini(&P);
}

static uint8_t *map(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p == MAP_FAILED ? NULL : p;
}

static void post(uint64_t id, enum ibv_wr_opcode op, uint8_t *buf, uint32_t len, struct ibv_mr *mr,
                 uint32_t seed)
{
    /* the peer finds the seed in the TO */
    CHECK_EQ(eng_post(A.qp, op, buf, len, mr->lkey, (uint64_t)seed << 32, 0x1234, id, true), 0);
}

/* Wait until the QP's transmission is blocked (socket full). */
static bool blocked(void)
{
    uint64_t end = dp_now_ms() + 5000;

    while (dp_now_ms() < end) {
        bool b;
        pthread_mutex_lock(&to_uqp(A.qp)->lock);
        b = to_uqp(A.qp)->want_write;
        pthread_mutex_unlock(&to_uqp(A.qp)->lock);
        if (b)
            return true;
        dp_msleep(5);
    }
    return false;
}

/* Deregister and free the buffer behind it; dereg must not wait long. */
static void dereg_free(struct ibv_mr *mr, uint8_t *buf, size_t len, bool mapped)
{
    uint64_t t0 = dp_now_ms();

    CHECK_EQ(ibv_dereg_mr(mr), 0);
    CHECK(dp_now_ms() - t0 < 2000);
    if (mapped)
        CHECK_EQ(munmap(buf, len), 0);
    else
        free(buf);
}

/* The peer reads everything now, checking each payload byte against the
 * pattern of its source, until EOF or 1.5 s of silence. */
static void drain(void)
{
    uint64_t quiet = dp_now_ms() + 1500;
    uiw_hdr h;
    bool in_seg = false;

    memset(&h, 0, sizeof(h));
    while (dp_now_ms() < quiet) {
        struct pollfd pf = {.fd = P.fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pf, 1, 100) <= 0)
            continue;
        n = recv(P.fd, P.buf, sizeof(P.buf), MSG_DONTWAIT);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                continue;
            break;
        }
        quiet = dp_now_ms() + 1500;
        for (size_t off = 0; off < (size_t)n;) {
            uiw_rx_event ev;
            size_t used = uiw_rx_feed(&P.rx, P.buf + off, (size_t)n - off, &ev);

            off += used;
            if (ev.kind == UIW_RX_HDR) {
                h = *ev.hdr;
                in_seg = true;
                if (!h.tagged && h.opcode == UIW_OP_TERMINATE)
                    term_seen = true;
            } else if (ev.kind == UIW_RX_PAYLOAD && in_seg) {
                uint32_t seed;
                uint64_t base;
                if (h.tagged) {
                    seed = (uint32_t)(h.to >> 32);
                    base = (h.to & 0xffffffffu) + ev.offset;
                } else {
                    seed = h.msn < 64 ? send_seed[h.msn] : 0;
                    base = (uint64_t)h.mo + ev.offset;
                }
                if (seed >= NSEED) {
                    bad++;
                    continue;
                }
                for (uint32_t i = 0; i < ev.len; i++)
                    if (ev.data[i] != eng_pat(seed, base + i))
                        bad++;
                got[seed] += ev.len;
            } else if (ev.kind == UIW_RX_END) {
                in_seg = false;
            } else if (ev.kind == UIW_RX_ERROR) {
                CHECK(!"peer parse error");
                return;
            } else if (!used) {
                break;
            }
        }
    }
}

static int comp(uint64_t id, enum ibv_wc_status *st)
{
    struct ibv_wc wc;

    if (dp_poll(A.scq, &wc, DP_TIMEOUT_MS) != 1)
        return -1;
    CHECK_EQ(wc.wr_id, id);
    *st = wc.status;
    return 0;
}

/* Two messages wholly cut into FPDUs but not sent (socket full) when their
 * MRs are deregistered and freed / unmapped: they still arrive intact. */
static void test_cut_then_freed(void)
{
    enum { SZ = 192 * 1024 };
    uint8_t *b0 = map(SZ), *b1 = map(SZ), *b2 = malloc(SZ);
    struct ibv_mr *m0, *m1, *m2;
    struct ibv_send_wr wr[3], *bad_wr;
    struct ibv_sge s[3];
    enum ibv_wc_status st;

    pair_up();
    eng_fill(b0, SZ, 1);
    eng_fill(b1, SZ, 2);
    eng_fill(b2, SZ, 3);
    m0 = ibv_reg_mr(A.pd, b0, SZ, 0);
    m1 = ibv_reg_mr(A.pd, b1, SZ, 0);
    m2 = ibv_reg_mr(A.pd, b2, SZ, 0);
    CHECK(m0 && m1 && m2);
    /* one post: one batch cuts all three (3 x 192 KiB < the 1 MiB batch) */
    for (int i = 0; i < 3; i++) {
        struct ibv_mr *m = i == 0 ? m0 : i == 1 ? m1 : m2;
        uint8_t *b = i == 0 ? b0 : i == 1 ? b1 : b2;
        s[i] = (struct ibv_sge){(uintptr_t)b, SZ, m->lkey};
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id = 10 + (uint64_t)i;
        wr[i].opcode = i == 1 ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].sg_list = &s[i];
        wr[i].num_sge = 1;
        wr[i].wr.rdma.rkey = 0x1234;
        wr[i].wr.rdma.remote_addr = (uint64_t)(i + 1) << 32;
        wr[i].next = i < 2 ? &wr[i + 1] : NULL;
    }
    send_seed[1] = 2;
    CHECK_EQ(ibv_post_send(A.qp, wr, &bad_wr), 0);
    CHECK(blocked());
    dereg_free(m1, b1, SZ, true);
    dereg_free(m2, b2, SZ, false);
    drain();
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(comp(10 + (uint64_t)i, &st), 0);
        CHECK_EQ(st, IBV_WC_SUCCESS);
        CHECK_EQ(got[i + 1], SZ);
    }
    CHECK_EQ(bad, 0);
    CHECK(!term_seen);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    printf("cut then freed: %llu + %llu + %llu bytes arrived intact\n", (unsigned long long)got[1],
           (unsigned long long)got[2], (unsigned long long)got[3]);
    CHECK_EQ(ibv_dereg_mr(m0), 0);
    munmap(b0, SZ);
    pair_down();
}

/* A large Write whose rest was still to be read from the MR: it fails with
 * a local protection error, a Terminate follows what was cut, every byte
 * that arrived is original. `mapped`: munmap, else free. */
static void test_mid_message(bool mapped)
{
    enum { SZ = 8u << 20 };
    uint8_t *b = mapped ? map(SZ) : malloc(SZ);
    struct ibv_mr *m;
    enum ibv_wc_status st;

    pair_up();
    eng_fill(b, SZ, 4);
    m = ibv_reg_mr(A.pd, b, SZ, 0);
    CHECK(m != NULL);
    post(20, IBV_WR_RDMA_WRITE, b, SZ, m, 4);
    CHECK(blocked());
    dereg_free(m, b, SZ, mapped);
    drain();
    CHECK_EQ(comp(20, &st), 0);
    CHECK_EQ(st, IBV_WC_LOC_PROT_ERR);
    CHECK(got[4] > 0 && got[4] < SZ);
    CHECK_EQ(bad, 0);
    CHECK(term_seen);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
    printf("mid message (%s): %llu of %u bytes sent intact, then %s and a Terminate\n",
           mapped ? "munmap" : "free", (unsigned long long)got[4], SZ,
           ibv_wc_status_str(IBV_WC_LOC_PROT_ERR));
    dp_async_drain();
    pair_down();
}

/* A WR queued behind a blocked one, not started when its MR goes: the
 * first completes, the second fails at its start. */
static void test_not_started(void)
{
    enum { SZ0 = 4u << 20, SZ1 = 64 * 1024 };
    uint8_t *b0 = map(SZ0), *b1 = map(SZ1);
    struct ibv_mr *m0, *m1;
    enum ibv_wc_status st;

    pair_up();
    eng_fill(b0, SZ0, 5);
    eng_fill(b1, SZ1, 6);
    m0 = ibv_reg_mr(A.pd, b0, SZ0, 0);
    m1 = ibv_reg_mr(A.pd, b1, SZ1, 0);
    CHECK(m0 && m1);
    post(30, IBV_WR_RDMA_WRITE, b0, SZ0, m0, 5);
    CHECK(blocked());
    send_seed[1] = 6;
    post(31, IBV_WR_SEND, b1, SZ1, m1, 6);
    dereg_free(m1, b1, SZ1, true);
    drain();
    CHECK_EQ(comp(30, &st), 0);
    CHECK_EQ(st, IBV_WC_SUCCESS);
    CHECK_EQ(comp(31, &st), 0);
    CHECK_EQ(st, IBV_WC_LOC_PROT_ERR);
    CHECK_EQ(got[5], SZ0);
    CHECK_EQ(got[6], 0);
    CHECK_EQ(bad, 0);
    CHECK(term_seen);
    CHECK_EQ(ibv_dereg_mr(m0), 0);
    munmap(b0, SZ0);
    dp_async_drain();
    pair_down();
}

/* Rounds with the dereg at different moments after the post: dereg never
 * waits and never lets freed bytes out; either outcome is defined. */
static void test_random_moments(void)
{
    unsigned ok = 0, failed = 0;

    for (int it = 0; it < 8; it++) {
        /* 1 MiB: cut whole into one batch; 3 MiB: not */
        size_t SZ = (it & 1) ? 3u << 20 : 1u << 20;
        uint8_t *b = map(SZ);
        struct ibv_mr *m;
        enum ibv_wc_status st;

        pair_up();
        eng_fill(b, SZ, 7);
        m = ibv_reg_mr(A.pd, b, SZ, 0);
        post(40, IBV_WR_RDMA_WRITE, b, SZ, m, 7);
        dp_msleep((unsigned)(it * 3));
        dereg_free(m, b, SZ, true);
        drain();
        CHECK_EQ(comp(40, &st), 0);
        CHECK(st == IBV_WC_SUCCESS || st == IBV_WC_LOC_PROT_ERR);
        if (st == IBV_WC_SUCCESS) {
            ok++;
            CHECK_EQ(got[7], SZ);
        } else {
            failed++;
            CHECK(term_seen);
        }
        CHECK_EQ(bad, 0);
        dp_async_drain();
        pair_down();
    }
    printf("random moments: %u completed intact, %u failed cleanly\n", ok, failed);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    test_cut_then_freed();
    test_mid_message(true);
    test_mid_message(false);
    test_not_started();
    test_random_moments();
    ibv_close_device(dp_ctx);
    TEST_MAIN_END();
}
