/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The orderly end of a connection must not turn into an RST that costs the
 * peer data (issue 16, rsockets: rstream saw ECONNRESET after the server's
 * rclose, and data lost at the end of a connection is what rstream -S all's
 * second connection then reports as a data verification failure).
 *
 * A sends, then rdma_disconnect (here uiw_cm_disconnect) and
 * ibv_destroy_qp, as rsockets' rclose does. Its WRs completed when their
 * bytes reached TCP: some of them sit in A's kernel send queue while B
 * has not read them. B, still reading, then sends something (rsockets: the
 * credit update of a reader catching up). Linux answers bytes that reach a
 * socket after close() with an RST (TCPAbortOnData), which also throws
 * away A's unsent send queue: B would never get data whose WRs completed
 * on A. ibv_destroy_qp after a disconnect therefore reads and discards
 * until the peer's FIN (bounded) before it closes.
 *
 * Deterministic: B's engine stops reading while a Send finds no receive
 * (receiver not ready, docs/ENGINE.md), so A's Writes fill B's receive
 * window and then A's send queue; B's late Send goes out while A is
 * destroyed; only then does B post the receive. B must find every byte of
 * every Write that completed on A, and see an orderly end (DISCONNECTED
 * with status 0, its own late Send completed successfully).
 */
#define DP_VIA_CM /* the connection manager sets the disconnect-then-destroy path */

#include <stdlib.h>

#include "dp_test.h"

#define CHUNK   (256u << 10)
#define NCHUNKS 64u /* 16 MiB: more than B's receive and A's send buffer */

struct destroyer {
    struct ibv_qp *qp;
    int rc;
    uint64_t ms; /* how long ibv_destroy_qp took */
};

static void *destroy_main(void *arg)
{
    struct destroyer *d = arg;
    uint64_t t0 = dp_now_ms();
    d->rc = ibv_destroy_qp(d->qp);
    d->ms = dp_now_ms() - t0;
    return NULL;
}

/* The next CM event of user within ms (earlier connections' are skipped). */
static int cm_event_of(void *user, struct uiw_cm_event *ev, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;
    for (;;) {
        struct pollfd p = {.fd = uiw_cm_channel_fd(dp_cm_ch), .events = POLLIN};
        int left = (int)(end - dp_now_ms());
        if (left <= 0 || poll(&p, 1, left) != 1)
            return -ETIMEDOUT;
        if (uiw_cm_get_event(dp_cm_ch, ev))
            continue;
        if (ev->user == user)
            return 0;
    }
}

static void test_disconnect_destroy_with_late_peer_send(void)
{
    struct dp_ep A, B;
    struct ibv_wc wc;
    struct uiw_cm_event ev;
    size_t len = (size_t)CHUNK * NCHUNKS;
    uint8_t *src = dp_alloc(4096, len), *dst = dp_alloc(4096, len);
    uint8_t msg[64], late[64], rbuf[64];
    struct ibv_mr *smr, *dmr, *amr, *bmr;
    unsigned completed = 0;
    pthread_t th;

    CHECK(src && dst);
    if (!src || !dst)
        return;
    dp_fill(src, len);
    memset(dst, 0, len);
    memset(msg, 0x11, sizeof(msg));
    memset(late, 0x22, sizeof(late));
    memset(rbuf, 0, sizeof(rbuf));
    CHECK_EQ(dp_ep_create(&A, &(struct dp_ep_opts){.sig_all = true}), 0);
    CHECK_EQ(dp_ep_create(&B, &(struct dp_ep_opts){.sig_all = true}), 0);
    CHECK_EQ(dp_connect(&A, &B, false, false, 4, 4, 4, 4), 0);
    struct uiw_conn *ca = dp_cm_conns[dp_cm_nconns - 2];

    smr = ibv_reg_mr(A.pd, src, len, IBV_ACCESS_LOCAL_WRITE);
    amr = ibv_reg_mr(A.pd, msg, sizeof(msg), IBV_ACCESS_LOCAL_WRITE);
    dmr = ibv_reg_mr(B.pd, dst, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    bmr = ibv_reg_mr(B.pd, late, sizeof(late), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = ibv_reg_mr(B.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    CHECK(smr && amr && dmr && bmr && rmr);
    if (!smr || !amr || !dmr || !bmr || !rmr)
        return;

    /* B has no receive: A's Send holds B's engine, which stops reading */
    CHECK_EQ(eng_post(A.qp, IBV_WR_SEND, msg, sizeof(msg), amr->lkey, 0, 0, 1, true), 0);
    for (unsigned i = 0; i < NCHUNKS; i++)
        CHECK_EQ(eng_post(A.qp, IBV_WR_RDMA_WRITE, src + (size_t)i * CHUNK, CHUNK, smr->lkey,
                          (uintptr_t)dst + (size_t)i * CHUNK, dmr->rkey, 100 + i, true),
                 0);
    /* what fits into B's receive window and A's send buffer completes */
    while (dp_poll(A.scq, &wc, completed ? 300 : 3000) == 1) {
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        if (wc.wr_id >= 100)
            completed = (unsigned)(wc.wr_id - 100) + 1;
    }
    printf("A: %u of %u Writes of %u KiB completed before the disconnect\n", completed, NCHUNKS,
           CHUNK >> 10);
    CHECK(completed > 0 && completed < NCHUNKS); /* the rest is stuck: B reads nothing */

    /* A ends: FIN after its data, then the QP goes away (a thread: with the
     * fix it waits for B's FIN) */
    CHECK_EQ(uiw_cm_disconnect(ca), 0);
    struct destroyer d = {.qp = A.qp};
    CHECK_EQ(pthread_create(&th, NULL, destroy_main, &d), 0);
    A.qp = NULL;
    dp_msleep(200); /* without the fix A's socket is closed by now */

    /* B, still reading, sends: it reaches A's socket after A's close() */
    CHECK_EQ(eng_post(B.qp, IBV_WR_SEND, late, sizeof(late), bmr->lkey, 0, 0, 7, true), 0);
    CHECK_EQ(dp_poll(B.scq, &wc, 5000), 1);
    CHECK_EQ(wc.wr_id, 7);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    dp_msleep(200);

    /* now B reads on: A's Send, then every Write, then A's FIN */
    CHECK_EQ(eng_post_recv(B.qp, rbuf, sizeof(rbuf), rmr->lkey, 9), 0);
    CHECK_EQ(dp_poll(B.rcq, &wc, 5000), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.byte_len, sizeof(msg));
    CHECK_MEM(rbuf, msg, sizeof(msg));
    CHECK_EQ(cm_event_of(&B, &ev, 5000), 0);
    CHECK_EQ(ev.type, UIW_CM_DISCONNECTED);
    CHECK_EQ(ev.status, 0); /* an orderly end, not ECONNRESET */
    dp_sync(B.qp);
    size_t have = 0;
    while (have < len && !memcmp(dst + have, src + have, CHUNK))
        have += CHUNK;
    printf("B: %zu of the %u completed Writes arrived\n", have / CHUNK, completed);
    CHECK(have >= (size_t)completed * CHUNK);

    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(d.rc, 0);
    printf("A: ibv_destroy_qp took %llu ms\n", (unsigned long long)d.ms);
    CHECK(d.ms < 2 * UIW_CLOSE_LINGER_MS);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(amr);
    dp_ep_destroy(&A);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(bmr);
    ibv_dereg_mr(rmr);
    dp_ep_destroy(&B);
    free(src);
    free(dst);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    test_disconnect_destroy_with_late_peer_send();
    dp_async_drain();
    TEST_MAIN_END();
}
