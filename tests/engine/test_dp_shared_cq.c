/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * A CQ shared by many QPs (docs/ENGINE.md "Threads, locks, progress",
 * poll-driven progress): an empty ibv_poll_cq drives only the QPs whose
 * sockets have data, through the CQ's epoll set of their sockets.
 *   - 16 receiving QPs on one CQ: Sends of varied sizes from 16 peers, in
 *     rounds; every completion names the right QP and receive, every byte
 *     arrives; the CQ made its readiness set;
 *   - a thread polls the shared CQ without pause while receiving QPs are
 *     moved to RESET and destroyed one by one, with traffic on the others:
 *     nothing crashes (ASan/TSan builds run this too), the survivors keep
 *     receiving intact data;
 *   - a QP attached after the set was made is in it (its data arrives).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dp_test.h"

#define NQ   16
#define MAXB 8192

struct side {
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint8_t *buf;
    struct ibv_mr *mr;
};

static struct ibv_pd *rpd;
static struct ibv_cq *shared;
static struct side snd[NQ + 1], rcv[NQ + 1];
static bool alive[NQ + 1];
static atomic_bool stop;

static struct ibv_qp *mk_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
    struct ibv_qp_cap cap = {
        .max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1, .max_recv_sge = 1};
    return eng_qp_init(pd, cq, cq, NULL, cap, false, ENG_ACCESS_ALL, 0);
}

static void make_pair(unsigned i)
{
    int sv[2];
    uiw_mpa_result m = dp_mpa(i % 2 == 0, false, 4, 4);

    snd[i].pd = ibv_alloc_pd(dp_ctx);
    snd[i].cq = ibv_create_cq(dp_ctx, 256, NULL, NULL, 0);
    CHECK(snd[i].pd && snd[i].cq);
    snd[i].qp = mk_qp(snd[i].pd, snd[i].cq);
    rcv[i].qp = mk_qp(rpd, shared);
    CHECK(snd[i].qp && rcv[i].qp);
    snd[i].buf = malloc(MAXB);
    rcv[i].buf = malloc(MAXB * 4);
    CHECK(snd[i].buf && rcv[i].buf);
    snd[i].mr = ibv_reg_mr(snd[i].pd, snd[i].buf, MAXB, ENG_ACCESS_ALL);
    rcv[i].mr = ibv_reg_mr(rpd, rcv[i].buf, MAXB * 4, ENG_ACCESS_ALL);
    CHECK(snd[i].mr && rcv[i].mr);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(snd[i].qp), sv[0], &m), 0);
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(rcv[i].qp), sv[1], &m), 0);
    alive[i] = true;
}

static void free_pair(unsigned i, bool reset_first)
{
    if (reset_first) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_RESET};
        CHECK_EQ(ibv_modify_qp(rcv[i].qp, &a, IBV_QP_STATE), 0);
    }
    alive[i] = false;
    CHECK_EQ(ibv_destroy_qp(rcv[i].qp), 0);
    CHECK_EQ(ibv_destroy_qp(snd[i].qp), 0);
    ibv_dereg_mr(snd[i].mr);
    ibv_dereg_mr(rcv[i].mr);
    ibv_destroy_cq(snd[i].cq);
    ibv_dealloc_pd(snd[i].pd);
    free(snd[i].buf);
    free(rcv[i].buf);
}

/* One Send from every live pair i (size varies with round and i) into
 * receive slot 0 of rcv[i]; polls the shared CQ for all of them. */
static void round_trip(unsigned round)
{
    unsigned want = 0, got = 0;
    uint32_t len[NQ + 1];

    for (unsigned i = 0; i <= NQ; i++) {
        if (!alive[i])
            continue;
        len[i] = 1 + (uint32_t)((round * 977u + i * 131u) % MAXB);
        eng_fill(snd[i].buf, len[i], round * 100 + i);
        memset(rcv[i].buf, 0, MAXB);
        CHECK_EQ(eng_post_recv(rcv[i].qp, rcv[i].buf, MAXB, rcv[i].mr->lkey, 1000 + i), 0);
        CHECK_EQ(
            eng_post(snd[i].qp, IBV_WR_SEND, snd[i].buf, len[i], snd[i].mr->lkey, 0, 0, i, false),
            0);
        want++;
    }
    uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
    while (got < want && dp_now_ms() < end) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(shared, 8, wc);
        CHECK(n >= 0);
        for (int k = 0; k < n; k++) {
            unsigned i = (unsigned)(wc[k].wr_id - 1000);
            CHECK_EQ(wc[k].status, IBV_WC_SUCCESS);
            CHECK(i <= NQ && alive[i]);
            if (i > NQ || !alive[i])
                continue;
            CHECK_EQ(wc[k].qp_num, rcv[i].qp->qp_num);
            CHECK_EQ(wc[k].byte_len, len[i]);
            CHECK(memcmp(rcv[i].buf, snd[i].buf, len[i]) == 0);
            got++;
        }
    }
    CHECK_EQ(got, want);
}

static void *poller(void *arg)
{
    (void)arg;
    /* drives the shared CQ's QPs as an empty ibv_poll_cq does, without
     * taking the completions (they belong to the main thread's rounds) */
    while (!atomic_load(&stop))
        uiw_cq_drive(to_ucq(shared), false, true); /* owns the sockets, too */
    return NULL;
}

int main(void)
{
    pthread_t th;

    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    rpd = ibv_alloc_pd(dp_ctx);
    shared = ibv_create_cq(dp_ctx, 4096, NULL, NULL, 0);
    CHECK(rpd && shared);
    for (unsigned i = 0; i < NQ; i++)
        make_pair(i);
    for (unsigned r = 0; r < 20; r++)
        round_trip(r);
    {
        struct ibv_wc wc;
        /* two empty polls in a row: the second drives (and makes the set) */
        CHECK_EQ(ibv_poll_cq(shared, 1, &wc), 0);
        CHECK_EQ(ibv_poll_cq(shared, 1, &wc), 0);
    }
    pthread_mutex_lock(&to_ucq(shared)->lock);
    CHECK(to_ucq(shared)->drive_ep >= 0); /* 16 QPs: the readiness set */
    pthread_mutex_unlock(&to_ucq(shared)->lock);

    /* a QP attached after the set was made */
    make_pair(NQ);
    for (unsigned r = 20; r < 30; r++)
        round_trip(r);

    /* teardown under a busy driver */
    CHECK_EQ(pthread_create(&th, NULL, poller, NULL), 0);
    for (unsigned i = 0; i <= NQ; i++) {
        free_pair(i, i % 3 == 0);
        round_trip(100 + i);
    }
    atomic_store(&stop, true);
    pthread_join(th, NULL);
    CHECK_EQ(ibv_destroy_cq(shared), 0);
    ibv_dealloc_pd(rpd);
    TEST_MAIN_END();
}
