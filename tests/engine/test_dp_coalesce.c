/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Transmit coalescing (docs/ENGINE.md "Transmit"): a work request posted
 * within UIWARP_TX_COALESCE_US of the previous ibv_post_send on the QP goes
 * out with the ones after it in one sendmsg; a request posted after a pause
 * goes out from its own post.
 *   - default settings: a stream of small RDMA Writes and Sends, one post
 *     each, arrives byte for byte and in order, one completion per
 *     signaled WR, nothing left deferred once the CQ was polled;
 *   - a lone request is handed to TCP by its ibv_post_send (counted before
 *     the call returns), also right after a stream, and so is a short
 *     burst (two Writes and a Send);
 *   - ibv_poll_cq and ibv_req_notify_cq on the QP's CQ hand over what was
 *     deferred, before they return;
 *   - the backstop: WRs posted back to back and then left alone (no poll,
 *     no further post) reach the peer by the progress thread;
 *   - UIWARP_TX_COALESCE_US=1000 (child process; the configuration is read
 *     once): a stream of 256 Writes takes at most 3 + 256 / 128 + 2
 *     sendmsg calls; ibv_get_cq_event hands over what was deferred before it
 *     waits; UIWARP_TX_COALESCE_US=0: exactly one sendmsg per post.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dp_test.h"

#define NW  256u /* Writes in a stream */
#define WSZ 64u

static struct dp_ep A, B;
static uint8_t *src, *dst, *rbuf;
static struct ibv_mr *smr, *dmr, *rmr;

static uint64_t sends_of(struct ibv_qp *q)
{
    uint64_t v;
    pthread_mutex_lock(&to_uqp(q)->lock);
    v = to_uqp(q)->st->tx_sends;
    pthread_mutex_unlock(&to_uqp(q)->lock);
    return v;
}

static bool deferred(struct ibv_qp *q)
{
    bool v;
    pthread_mutex_lock(&to_uqp(q)->lock);
    v = to_uqp(q)->tx_deferred || to_uqp(q)->tx_defer_wrs;
    pthread_mutex_unlock(&to_uqp(q)->lock);
    return v;
}

static void setup(void)
{
    struct dp_ep_opts o = {.send_wr = 512, .recv_wr = 64};

    src = dp_alloc(64, NW * WSZ);
    dst = dp_alloc(64, NW * WSZ);
    rbuf = dp_alloc(64, 4096);
    CHECK(src && dst && rbuf);
    CHECK_EQ(dp_ep_create(&A, &o), 0);
    CHECK_EQ(dp_ep_create(&B, &o), 0);
    smr = ibv_reg_mr(A.pd, src, NW * WSZ, ENG_ACCESS_ALL);
    dmr = ibv_reg_mr(B.pd, dst, NW * WSZ, ENG_ACCESS_ALL);
    rmr = ibv_reg_mr(B.pd, rbuf, 4096, ENG_ACCESS_ALL);
    CHECK(smr && dmr && rmr);
    CHECK_EQ(dp_connect(&A, &B, true, false, 16, 16, 16, 16), 0);
}

static void teardown(void)
{
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(rmr);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    free(dst);
    free(rbuf);
}

/* A Send of `len` bytes of src after the Writes: its receive completion at
 * B means every Write before it was placed (RDMAP ordering, RFC 5040 §5.5). */
static void post_marker(uint64_t id, uint32_t len, bool signaled)
{
    CHECK_EQ(eng_post_recv(B.qp, rbuf, 4096, rmr->lkey, id), 0);
    CHECK_EQ(eng_post(A.qp, IBV_WR_SEND, src, len, smr->lkey, 0, 0, id, signaled), 0);
}

static void wait_marker(uint64_t id, uint32_t len)
{
    struct ibv_wc wc;
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.wr_id, id);
    CHECK_EQ(wc.byte_len, len);
    CHECK(memcmp(rbuf, src, len) == 0);
}

/* NW Writes of WSZ bytes, one post each, every 64th and the last signaled;
 * then a Send. Returns the sendmsg calls they took. */
/* How long stream()'s posting took: the backstop (every 50 us) may send
 * what waits that often meanwhile, so bounds on sendmsg calls allow one per
 * 50 us of posting (a slow build, TSan, or a loaded machine posts slower). */
static uint64_t post_us;

static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static uint64_t stream(uint32_t seed)
{
    uint64_t before = sends_of(A.qp);
    unsigned signaled = 0;
    struct ibv_wc wc;

    eng_fill(src, NW * WSZ, seed);
    memset(dst, 0, NW * WSZ);
    uint64_t t0 = mono_us();
    for (unsigned i = 0; i < NW; i++) {
        bool sig = i % 64 == 63 || i == NW - 1;
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + i * WSZ, WSZ, smr->lkey,
                          (uintptr_t)dst + i * WSZ, dmr->rkey, i, sig),
                 0);
        signaled += sig;
    }
    post_marker(9000 + seed, 100, true);
    post_us = mono_us() - t0;
    for (unsigned i = 0; i < signaled; i++) {
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
        CHECK_EQ(wc.wr_id, i == signaled - 1 ? NW - 1 : i * 64 + 63);
    }
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 9000 + seed);
    CHECK_EQ(wc.opcode, IBV_WC_SEND);
    wait_marker(9000 + seed, 100);
    CHECK(memcmp(dst, src, NW * WSZ) == 0);
    CHECK(!deferred(A.qp));
    CHECK(dp_quiet(A.scq, 0));
    return sends_of(A.qp) - before;
}

/* Default settings. */
static void defaults(void)
{
    struct ibv_wc wc;
    uint64_t s, n;

    setup();
    n = stream(1);
    printf("  default: %u Writes + 1 Send in %llu sendmsg calls\n", NW, (unsigned long long)n);
    CHECK(n >= 1 && n <= NW + 1);

    /* a lone request goes out from its own post, also right after a stream */
    for (unsigned i = 0; i < 3; i++) {
        dp_msleep(2);
        s = sends_of(A.qp);
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src, WSZ, smr->lkey, (uintptr_t)dst, dmr->rkey,
                          77, true),
                 0);
        CHECK_EQ(sends_of(A.qp), s + 1);
        CHECK(!deferred(A.qp));
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    }

    /* a short burst (a Write and the Send that announces it, three posts)
     * also goes out from its own posts */
    dp_msleep(2);
    s = sends_of(A.qp);
    CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src, WSZ, smr->lkey, (uintptr_t)dst, dmr->rkey, 78,
                      false),
             0);
    CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + WSZ, WSZ, smr->lkey, (uintptr_t)dst + WSZ,
                      dmr->rkey, 79, false),
             0);
    post_marker(80, 32, false);
    CHECK_EQ(sends_of(A.qp), s + 3);
    CHECK(!deferred(A.qp));
    wait_marker(80, 32);

    /* ibv_poll_cq hands over what was deferred before it returns */
    for (unsigned i = 0; i < 16; i++)
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + i * WSZ, WSZ, smr->lkey,
                          (uintptr_t)dst + i * WSZ, dmr->rkey, 100 + i, false),
                 0);
    (void)ibv_poll_cq(A.scq, 1, &wc);
    CHECK(!deferred(A.qp));
    /* ibv_req_notify_cq too */
    for (unsigned i = 0; i < 16; i++)
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + i * WSZ, WSZ, smr->lkey,
                          (uintptr_t)dst + i * WSZ, dmr->rkey, 200 + i, false),
                 0);
    CHECK_EQ(ibv_req_notify_cq(A.scq, 0), 0);
    CHECK(!deferred(A.qp));
    post_marker(300, 64, false);
    wait_marker(300, 64);
    (void)ibv_poll_cq(A.scq, 1, &wc);
    CHECK(dp_quiet(A.scq, 0));

    /* the backstop: WRs posted back to back, then A is left alone; B
     * polls only its own CQ */
    for (unsigned round = 0; round < 20; round++) {
        uint64_t t0 = dp_now_ms();
        eng_fill(src, 4 * WSZ, 400 + round);
        for (unsigned i = 0; i < 3; i++)
            CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + i * WSZ, WSZ, smr->lkey,
                              (uintptr_t)dst + i * WSZ, dmr->rkey, 500 + i, false),
                     0);
        post_marker(600 + round, 64, false);
        wait_marker(600 + round, 64);
        CHECK(memcmp(dst, src, 3 * WSZ) == 0);
        CHECK(dp_now_ms() - t0 < 2000);
    }
    CHECK(!deferred(A.qp));
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    teardown();
}

/* Child processes: the configuration is read once per process. */
static void case_wide(void)
{
    uint64_t n;

    setup();
    n = stream(2);
    printf("  UIWARP_TX_COALESCE_US=1000: %u Writes + 1 Send in %llu sendmsg calls, posted in "
           "%llu us\n",
           NW, (unsigned long long)n, (unsigned long long)post_us);
    /* a burst's first three posts go out at once, then one call per 128
     * WRs, plus what the backstop sent while the posting went on */
    CHECK(n <= 3 + NW / 128 + 2 + post_us / 50);
    CHECK(n < NW / 4); /* whatever the speed: far fewer calls than posts */

    /* ibv_get_cq_event hands over what the process deferred before it
     * waits (here it does not wait: a non-blocking channel with nothing) */
    {
        struct ibv_comp_channel *ch = ibv_create_comp_channel(dp_ctx);
        struct ibv_cq *ecq = NULL;
        void *ectx = NULL;

        CHECK(ch != NULL);
        if (ch) {
            CHECK_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
            for (unsigned i = 0; i < 5; i++)
                CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + i * WSZ, WSZ, smr->lkey,
                                  (uintptr_t)dst + i * WSZ, dmr->rkey, 900 + i, false),
                         0);
            CHECK(deferred(A.qp)); /* the fourth and fifth, within 1000 us */
            CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), -1);
            CHECK_EQ(errno, EAGAIN);
            CHECK(!deferred(A.qp));
            CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
        }
        post_marker(950, 16, false);
        wait_marker(950, 16);
    }
    teardown();
}

static void case_off(void)
{
    uint64_t s;

    setup();
    CHECK_EQ(stream(3), NW + 1);
    s = sends_of(A.qp);
    for (unsigned i = 0; i < 8; i++) {
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src, WSZ, smr->lkey, (uintptr_t)dst, dmr->rkey,
                          700 + i, false),
                 0);
        CHECK_EQ(sends_of(A.qp), s + i + 1);
    }
    post_marker(800, 32, false);
    wait_marker(800, 32);
    teardown();
}

int main(int argc, char **argv)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        if (strcmp(argv[2], "wide") == 0)
            case_wide();
        else if (strcmp(argv[2], "off") == 0)
            case_off();
        dprintf(3, "%lu %lu\n", (unsigned long)tu_checks, (unsigned long)tu_failed);
        return 0;
    }
    defaults();
    eng_run_case_env(argv[0], "wide", "UIWARP_TX_", "UIWARP_TX_COALESCE_US=1000");
    eng_run_case_env(argv[0], "off", "UIWARP_TX_", "UIWARP_TX_COALESCE_US=0");
    TEST_MAIN_END();
}
