/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Completion events posted while a thread spins in ibv_get_cq_event come
 * without the channel's byte: the spinner takes the first itself when it
 * stops (cq.c chan_post, chan_spin_end; docs/ENGINE.md "Waiting"). The
 * two paths around it that ordinary traffic reaches only by chance, with
 * the spinner held at the moment that matters (uiw_test_spin_hold):
 *   1. two events queued while it spins: it returns the first, and the
 *      second gets its byte, so the next wait returns it (none lost);
 *   2. the owed event's CQ destroyed before the spinner stops: nothing is
 *      returned for it, the spinner blocks, and the next event (another
 *      CQ's) reaches it through the byte.
 * Two receive CQs (of QPs B1 and B2) share one channel; A1 and A2 send to
 * them. After each part no channel byte is left behind. Payloads checked.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dp_test.h"

#define MSG 64

static struct dp_ep A1, A2, B1, B2;
static struct ibv_comp_channel *ch;
static uint8_t abuf[2][MSG], bbuf[2][MSG];
static struct ibv_mr *amr[2], *bmr[2];

static void fill(uint8_t *p, unsigned tag)
{
    for (unsigned i = 0; i < MSG; i++)
        p[i] = (uint8_t)(tag * 37u + i * 11u + 3u);
}

static int post_recv(struct dp_ep *e, int k)
{
    struct ibv_sge sge = {.addr = (uintptr_t)bbuf[k], .length = MSG, .lkey = bmr[k]->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)k, .sg_list = &sge, .num_sge = 1}, *bad;

    return ibv_post_recv(e->qp, &wr, &bad);
}

/* A k -> B k, payload tagged; its send completion reaped */
static int send_tag(int k, unsigned tag)
{
    struct dp_ep *a = k ? &A2 : &A1;
    struct ibv_sge sge = {.addr = (uintptr_t)abuf[k], .length = MSG, .lkey = amr[k]->lkey};
    struct ibv_send_wr wr = {.wr_id = tag,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    struct ibv_wc wc;

    fill(abuf[k], tag);
    if (ibv_post_send(a->qp, &wr, &bad))
        return -1;
    return dp_poll(a->scq, &wc, DP_TIMEOUT_MS) == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

/* The waiter: takes `want` events on the shared channel, and for each the
 * receive completion behind it (checked against the tag expected for that
 * CQ), reposting the receive. */
struct waiter {
    unsigned want;
    struct ibv_cq *got[4];
    unsigned n;
    unsigned tag[2]; /* the tag next expected on B1's, B2's CQ */
    bool bad;
    atomic_bool done;
};

static void *waiter_run(void *arg)
{
    struct waiter *w = arg;

    while (w->n < w->want && !w->bad) {
        struct ibv_cq *cq;
        void *ctx;
        struct ibv_wc wc;
        uint8_t want[MSG];
        int k;

        if (ibv_get_cq_event(ch, &cq, &ctx) != 0) {
            w->bad = true;
            break;
        }
        ibv_ack_cq_events(cq, 1);
        w->got[w->n++] = cq;
        k = cq == B1.rcq ? 0 : cq == B2.rcq ? 1 : -1;
        if (k < 0 || ibv_req_notify_cq(cq, 0) != 0 || ibv_poll_cq(cq, 1, &wc) != 1 ||
            wc.status != IBV_WC_SUCCESS || wc.byte_len != MSG) {
            w->bad = true;
            break;
        }
        fill(want, w->tag[k]);
        if (memcmp(bbuf[k], want, MSG) != 0 || post_recv(k ? &B2 : &B1, k)) {
            w->bad = true;
            break;
        }
        w->tag[k]++;
    }
    atomic_store(&w->done, true);
    return NULL;
}

/* true once cond holds, false after ms */
static bool wait_for(atomic_bool *flag, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;

    while (!atomic_load(flag) && dp_now_ms() < end)
        usleep(1000);
    return atomic_load(flag);
}

static bool wait_held(unsigned n, unsigned ms)
{
    uint64_t end = dp_now_ms() + ms;

    while (atomic_load(&uiw_test_spin_held) < n && dp_now_ms() < end)
        usleep(200);
    return atomic_load(&uiw_test_spin_held) >= n;
}

static bool byte_left(void)
{
    struct pollfd pf = {.fd = ch->fd, .events = POLLIN};

    return poll(&pf, 1, 0) != 0;
}

/* Starts the waiter and holds it in its second wait: the first message
 * (B1's, tagged first_tag) reaches it by the byte, its next wait then
 * spins (an event came just now) and is held (uiw_test_spin_hold). The
 * last event before (the previous part's) is made old enough first that
 * the first wait does not spin (2 x UIWARP_PROGRESS_SPIN_US, 400 us by
 * default). */
static void start_held(struct waiter *w, pthread_t *t, unsigned first_tag)
{
    unsigned held0 = atomic_load(&uiw_test_spin_held);

    usleep(20 * 1000);
    atomic_store(&uiw_test_spin_hold, 1);
    pthread_create(t, NULL, waiter_run, w);
    CHECK_EQ(send_tag(0, first_tag), 0);
    CHECK(wait_held(held0 + 1, 5000));
    CHECK_EQ(w->n, 1u);
}

/* The waiter took all it wants within 5 s (else the test ends: it would
 * block for ever), and is joined. */
static void join_done(struct waiter *w, pthread_t t, const char *lost)
{
    if (!wait_for(&w->done, 5000)) {
        printf("FAIL: %s (%u of %u taken)\n", lost, w->n, w->want);
        fflush(stdout);
        _exit(1);
    }
    pthread_join(t, NULL);
    CHECK(!w->bad);
    CHECK_EQ(w->n, w->want);
}

/* Part 1: two events queued while the waiter spins. */
static void two_owed(void)
{
    struct waiter w = {.want = 3, .tag = {100, 200}};
    pthread_t t;

    start_held(&w, &t, 100);
    /* both events are posted by the progress thread while it is held */
    CHECK_EQ(send_tag(0, 101), 0);
    CHECK_EQ(send_tag(1, 200), 0);
    usleep(100 * 1000);
    CHECK(!byte_left()); /* owed to the spinner: no byte yet */
    atomic_store(&uiw_test_spin_hold, 0);
    join_done(&w, t, "an event was lost");
    CHECK(w.got[0] == B1.rcq);
    CHECK((w.got[1] == B1.rcq && w.got[2] == B2.rcq) || (w.got[1] == B2.rcq && w.got[2] == B1.rcq));
    CHECK(!byte_left());
}

/* Part 2: the owed event's CQ destroyed before the spinner stops. */
static void owed_purged(void)
{
    struct waiter w = {.want = 2, .tag = {300, 0}};
    pthread_t t;

    start_held(&w, &t, 300);
    /* B2's event is owed to the held spinner; then B2 and its CQ go */
    CHECK_EQ(send_tag(1, 999), 0);
    usleep(100 * 1000);
    CHECK(!byte_left());
    CHECK_EQ(ibv_destroy_qp(B2.qp), 0);
    B2.qp = NULL;
    CHECK_EQ(ibv_destroy_cq(B2.rcq), 0);
    B2.rcq = NULL;
    atomic_store(&uiw_test_spin_hold, 0);
    /* nothing for it: the waiter blocks */
    usleep(100 * 1000);
    CHECK_EQ(w.n, 1u);
    CHECK(!atomic_load(&w.done));
    CHECK(!byte_left());
    /* the next event, B1's, comes through the byte */
    CHECK_EQ(send_tag(0, 301), 0);
    join_done(&w, t, "the waiter missed B1's event after the purge");
    CHECK(w.got[0] == B1.rcq && w.got[1] == B1.rcq);
    CHECK(!byte_left());
}

/* B with its receive CQ on the shared channel */
static int ep_on_channel(struct dp_ep *e)
{
    struct ibv_qp_cap cap = {
        .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1};

    memset(e, 0, sizeof(*e));
    e->pd = ibv_alloc_pd(dp_ctx);
    e->scq = ibv_create_cq(dp_ctx, 16, NULL, NULL, 0);
    e->rcq = ibv_create_cq(dp_ctx, 16, NULL, ch, 0);
    if (!e->pd || !e->scq || !e->rcq)
        return -1;
    e->qp = eng_qp_init(e->pd, e->scq, e->rcq, NULL, cap, false, ENG_ACCESS_ALL, 0);
    return e->qp ? 0 : -1;
}

int main(void)
{
    struct dp_ep_opts o = {.send_wr = 16, .recv_wr = 16};

    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    ch = ibv_create_comp_channel(dp_ctx);
    CHECK(ch != NULL);
    CHECK_EQ(dp_ep_create(&A1, &o), 0);
    CHECK_EQ(dp_ep_create(&A2, &o), 0);
    CHECK_EQ(ep_on_channel(&B1), 0);
    CHECK_EQ(ep_on_channel(&B2), 0);
    amr[0] = ibv_reg_mr(A1.pd, abuf[0], MSG, ENG_ACCESS_ALL);
    amr[1] = ibv_reg_mr(A2.pd, abuf[1], MSG, ENG_ACCESS_ALL);
    bmr[0] = ibv_reg_mr(B1.pd, bbuf[0], MSG, ENG_ACCESS_ALL);
    bmr[1] = ibv_reg_mr(B2.pd, bbuf[1], MSG, ENG_ACCESS_ALL);
    CHECK(amr[0] && amr[1] && bmr[0] && bmr[1]);
    CHECK_EQ(dp_connect(&A1, &B1, false, false, 4, 4, 4, 4), 0);
    CHECK_EQ(dp_connect(&A2, &B2, false, false, 4, 4, 4, 4), 0);
    CHECK_EQ(post_recv(&B1, 0), 0);
    CHECK_EQ(post_recv(&B2, 1), 0);
    CHECK_EQ(ibv_req_notify_cq(B1.rcq, 0), 0);
    CHECK_EQ(ibv_req_notify_cq(B2.rcq, 0), 0);

    two_owed();
    owed_purged();

    ibv_dereg_mr(amr[0]);
    ibv_dereg_mr(amr[1]);
    ibv_dereg_mr(bmr[0]);
    ibv_dereg_mr(bmr[1]);
    dp_ep_destroy(&A1);
    dp_ep_destroy(&A2);
    dp_ep_destroy(&B1);
    dp_ep_destroy(&B2);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    TEST_MAIN_END();
}
