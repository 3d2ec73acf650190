/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Poll ownership (src/engine/qp_dp.c, docs/ENGINE.md "Poll-driven
 * progress"): a thread that keeps polling a CQ reads the sockets of its
 * QPs itself, and the progress thread stops listening to them until the
 * poller has left them alone for UIWARP_POLL_OWN_US.
 *   - a busy poller owns its QP (UIW_MUTE_POLL) and receives Sends byte
 *     for byte, one completion each, while it owns it;
 *   - when it stops polling, the QP is given back (the bit clears by
 *     itself) and the progress thread serves the peer's RDMA Reads and
 *     delivers Sends: a Read posted right after the poller stopped (before
 *     the hand-back) completes with the right bytes, and a Send that comes
 *     while the program waits on its completion channel's fd with poll(2)
 *     (not in ibv_get_cq_event) raises the event: arming the CQ gave the
 *     socket back at once, and polls of the armed CQ do not take it again;
 *   - many rounds of poll / stop / Read, each verified;
 *   - an owning poller reads each Send with one read: a short read took
 *     all the socket had, and the next poll asks poll(2) (qp_rx.c);
 *   - the peer's Send followed at once by its FIN: the owning poller gets
 *     the Send, then the EOF (the short read must not hide the FIN);
 *   - a QP destroyed while it is owned leaves no trace (sanitizers);
 *   - UIWARP_POLL_OWN_US=0 (child process): never owned, same traffic.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "dp_test.h"

#define MSG  256u
#define RLEN 4096u

static struct dp_ep A, B;
static uint8_t *abuf, *bbuf, *aread, *bread;
static struct ibv_mr *amr, *bmr, *armr, *brmr;
static bool own_on = true;

static bool owned(struct ibv_qp *qp)
{
    bool o;

    pthread_mutex_lock(&to_uqp(qp)->lock);
    o = (to_uqp(qp)->rx_muted & UIW_MUTE_POLL) != 0;
    pthread_mutex_unlock(&to_uqp(qp)->lock);
    return o;
}

/* Poll A's receive CQ, empty, until A owns its QP (or 100 polls when
 * ownership is off): a busy poller. */
static void spin_a(void)
{
    struct ibv_wc wc;

    for (unsigned i = 0; i < 100000; i++) {
        CHECK_EQ(ibv_poll_cq(A.rcq, 1, &wc), 0);
        if (own_on ? owned(A.qp) : i >= 100)
            return;
    }
    CHECK(!"A never owned its QP");
}

static void setup(void)
{
    struct dp_ep_opts oa = {.channel = true};

    CHECK_EQ(dp_ep_create(&A, &oa), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    abuf = dp_alloc(4096, MSG);
    bbuf = dp_alloc(4096, MSG);
    aread = dp_alloc(4096, RLEN);
    bread = dp_alloc(4096, RLEN);
    amr = ibv_reg_mr(A.pd, abuf, MSG, IBV_ACCESS_LOCAL_WRITE);
    bmr = ibv_reg_mr(B.pd, bbuf, MSG, IBV_ACCESS_LOCAL_WRITE);
    armr = ibv_reg_mr(A.pd, aread, RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    brmr = ibv_reg_mr(B.pd, bread, RLEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(amr && bmr && armr && brmr);
    CHECK_EQ(dp_connect(&A, &B, false, false, 16, 16, 16, 16), 0);
}

/* B sends one message to A, whose receive is posted. */
static void send_b(unsigned seed)
{
    eng_fill(bbuf, MSG, seed);
    CHECK_EQ(eng_post(B.qp, IBV_WR_SEND, bbuf, MSG, bmr->lkey, 0, 0, seed, true), 0);
}

static void check_recv(struct ibv_wc *wc, unsigned seed)
{
    CHECK_EQ(wc->status, IBV_WC_SUCCESS);
    CHECK_EQ(wc->opcode, IBV_WC_RECV);
    CHECK_EQ(wc->byte_len, MSG);
    CHECK_EQ(eng_diff(abuf, MSG, seed), -1);
}

static void reap_b_send(void)
{
    struct ibv_wc wc;

    CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
}

/* B reads A's buffer (seed) while A makes no call; the completion is
 * B's, and only A's progress thread can answer. */
static uint64_t read_b(unsigned seed)
{
    struct ibv_wc wc;
    uint64_t t0;

    eng_fill(aread, RLEN, seed);
    memset(bread, 0, RLEN);
    t0 = dp_now_ms();
    CHECK_EQ(eng_post(B.qp, IBV_WR_RDMA_READ, bread, RLEN, brmr->lkey, (uintptr_t)aread, armr->rkey,
                      1000 + seed, true),
             0);
    CHECK_EQ(dp_poll(B.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
    CHECK_EQ(eng_diff(bread, RLEN, seed), -1);
    return dp_now_ms() - t0;
}

static void run(void)
{
    struct ibv_wc wc;
    uint64_t worst = 0;

    setup();

    /* a busy poller owns the QP and takes its Sends itself */
    uint64_t zc0, cp0, rd0, zc1, cp1, rd1;
    uiw_qp_rx_stats(to_uqp(A.qp), &zc0, &cp0, &rd0);
    for (unsigned i = 0; i < 50; i++) {
        CHECK_EQ(eng_post_recv(A.qp, abuf, MSG, amr->lkey, 10 + i), 0);
        spin_a();
        CHECK_EQ(owned(A.qp), own_on);
        send_b(10 + i);
        CHECK_EQ(dp_poll(A.rcq, &wc, DP_TIMEOUT_MS), 1);
        check_recv(&wc, 10 + i);
        CHECK_EQ(wc.wr_id, 10 + i);
        reap_b_send();
    }
    uiw_qp_rx_stats(to_uqp(A.qp), &zc1, &cp1, &rd1);
    printf("  50 Sends to an owning poller: %llu reads\n", (unsigned long long)(rd1 - rd0));
    /* one per Send (plus a few Sends split by TCP); two each before */
    if (own_on)
        CHECK(rd1 - rd0 <= 60);

    /* it stops polling: the QP is given back by itself */
    {
        uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
        while (owned(A.qp) && dp_now_ms() < end)
            dp_msleep(1);
        CHECK(!owned(A.qp));
    }

    /* a Read right after the poller stopped, before the hand-back: the
     * progress thread answers once it has the socket again */
    for (unsigned i = 0; i < 100; i++) {
        uint64_t t;

        spin_a();
        t = read_b(100 + i);
        if (t > worst)
            worst = t;
    }
    printf("  100 Reads posted right after A stopped polling: slowest %llu ms\n",
           (unsigned long long)worst);

    /* A polls, then waits on its completion channel's fd with poll(2):
     * the Send's event comes from the progress thread */
    for (unsigned i = 0; i < 20; i++) {
        struct pollfd pfd = {.fd = A.ch->fd, .events = POLLIN};
        struct ibv_cq *ecq;
        void *ectx;

        CHECK_EQ(eng_post_recv(A.qp, abuf, MSG, amr->lkey, 300 + i), 0);
        spin_a();
        CHECK_EQ(ibv_req_notify_cq(A.rcq, 0), 0);
        /* the arm gave the socket back (not the dead man's switch, up to
         * 4 x UIWARP_POLL_OWN_US later), and polls of the armed CQ do not
         * take it again: the event can only come from the progress thread */
        CHECK(!owned(A.qp));
        for (unsigned k = 0; k < 100; k++)
            CHECK_EQ(ibv_poll_cq(A.rcq, 1, &wc), 0);
        CHECK(!owned(A.qp));
        send_b(300 + i);
        CHECK_EQ(poll(&pfd, 1, DP_TIMEOUT_MS), 1);
        CHECK_EQ(ibv_get_cq_event(A.ch, &ecq, &ectx), 0);
        CHECK(ecq == A.rcq);
        ibv_ack_cq_events(A.rcq, 1);
        CHECK_EQ(dp_poll(A.rcq, &wc, DP_TIMEOUT_MS), 1);
        check_recv(&wc, 300 + i);
        reap_b_send();
    }

    /* destroyed while owned */
    spin_a();
    CHECK_EQ(owned(A.qp), own_on);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);

    /* B's Send, then at once B's FIN: A, still polling, gets the Send with
     * a short read and must still see the EOF after it */
    {
        uint64_t end;
        bool got = false;

        CHECK_EQ(eng_post_recv(A.qp, abuf, MSG, amr->lkey, 900), 0);
        spin_a();
        send_b(900);
        reap_b_send(); /* the Send is on the wire */
        CHECK_EQ(shutdown(to_uqp(B.qp)->fd, SHUT_WR), 0);
        end = dp_now_ms() + DP_TIMEOUT_MS;
        while (dp_now_ms() < end) {
            int n = ibv_poll_cq(A.rcq, 1, &wc);

            CHECK(n >= 0);
            if (n == 1 && !got) {
                check_recv(&wc, 900);
                CHECK_EQ(wc.wr_id, 900);
                got = true;
            }
            if (got && dp_state(A.qp) == IBV_QPS_ERR)
                break;
        }
        CHECK(got);
        CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
    }
    ibv_dereg_mr(amr);
    ibv_dereg_mr(bmr);
    ibv_dereg_mr(armr);
    ibv_dereg_mr(brmr);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(abuf);
    free(bbuf);
    free(aread);
    free(bread);
}

int main(int argc, char **argv)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        own_on = false; /* the only case: UIWARP_POLL_OWN_US=0 */
        run();
        dprintf(3, "%lu %lu\n", (unsigned long)tu_checks, (unsigned long)tu_failed);
        return 0;
    }
    run();
    eng_run_case_env(argv[0], "off", "UIWARP_POLL_OWN_", "UIWARP_POLL_OWN_US=0");
    TEST_MAIN_END();
}
