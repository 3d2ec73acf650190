/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Many QPs at once, over real loopback TCP connected with uiw_cm_*, between
 * two device contexts of this process (side A: initiators, side B:
 * responders):
 *  (a) 64 QP pairs, one thread each, all at the same time: every round
 *      both sides Send, Write and Read with varying sizes; every byte is
 *      checked (the Write's target once the Send that follows it arrived).
 *  (b) atomics on one shared 8-byte word from 8 QPs, 2 threads per QP
 *      (pipelined Fetch-and-Add, then Compare-and-Swap increments) and a
 *      local thread using __atomic on the same word: the final value is
 *      exact and the old values returned form exactly the range covered.
 *  (c) ibv_destroy_qp while large Writes/Sends stream (destroy the target
 *      QP; destroy the streaming QP while another thread polls its CQ):
 *      the surviving peer sees errors/flushes and goes to ERR, the CM
 *      reports DISCONNECTED, and the 64 pairs of (a) still work.
 *  (d) ibv_dereg_mr of a region a peer is streaming Writes into: after it
 *      returns nothing changes that memory, the target QP raises an access
 *      error and the writer's QP fails.
 * Every wait is bounded. Check counters are only touched by the main
 * thread (workers count their own failures).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "testutil.h"

#define NPAIRS  64
#define REG     (64u * 1024) /* one region of a pair buffer */
#define ROUNDS  8
#define WAIT_MS 20000

/* ------------------------------------------------------------------------
 * Sides and pairs
 * ---------------------------------------------------------------------- */
struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct uiw_cm_channel *ch;
};
static struct side A, B;
static struct uiw_listener *lis;
static uint16_t lis_port;

/* One endpoint of a pair: QP, its CQs, a buffer of 4 regions
 * [src | wdst (peer's Write target) | rdst (own Read sink) | recv]. */
struct ep {
    struct ibv_qp *qp;
    struct ibv_cq *scq, *rcq;
    struct uiw_conn *conn;
    uint8_t *buf;
    struct ibv_mr *mr;
};
struct pair {
    unsigned idx;
    struct ep a, b;
    bool up_a, up_b;
};

static int side_open(struct side *s)
{
    s->ctx = eng_open_lo(false);
    if (!s->ctx)
        return -1;
    s->pd = ibv_alloc_pd(s->ctx);
    s->ch = uiw_cm_channel_create();
    if (!s->pd || !s->ch)
        return -1;
    fcntl(uiw_cm_channel_fd(s->ch), F_SETFL, O_NONBLOCK);
    return 0;
}

static int ep_create(struct side *s, struct ep *e, unsigned sq, unsigned rq, unsigned cqe,
                     size_t buflen)
{
    struct ibv_qp_cap cap = {
        .max_send_wr = sq, .max_recv_wr = rq, .max_send_sge = 1, .max_recv_sge = 1};

    memset(e, 0, sizeof(*e));
    e->scq = ibv_create_cq(s->ctx, (int)cqe, NULL, NULL, 0);
    e->rcq = ibv_create_cq(s->ctx, (int)cqe, NULL, NULL, 0);
    if (!e->scq || !e->rcq)
        return -1;
    e->qp = eng_qp_init(s->pd, e->scq, e->rcq, NULL, cap, false, ENG_ACCESS_ALL, 0);
    if (!e->qp)
        return -1;
    if (buflen) {
        if (posix_memalign((void **)&e->buf, 4096, buflen))
            return -1;
        memset(e->buf, 0, buflen);
        e->mr = ibv_reg_mr(s->pd, e->buf, buflen, ENG_ACCESS_ALL);
        if (!e->mr)
            return -1;
    }
    return 0;
}

static void ep_destroy(struct ep *e)
{
    if (e->conn)
        uiw_cm_conn_destroy(e->conn);
    if (e->qp)
        CHECK_EQ(ibv_destroy_qp(e->qp), 0);
    if (e->mr)
        CHECK_EQ(ibv_dereg_mr(e->mr), 0);
    if (e->scq)
        CHECK_EQ(ibv_destroy_cq(e->scq), 0);
    if (e->rcq)
        CHECK_EQ(ibv_destroy_cq(e->rcq), 0);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

static const char *ev_name(int t)
{
    static const char *n[] = {"?",           "CONNECT_REQUEST", "ESTABLISHED", "REJECTED",
                              "UNREACHABLE", "CONNECT_ERROR",   "DISCONNECTED"};
    return t >= 1 && t <= 6 ? n[t] : "?";
}

/* Connect n pairs at once: every A QP connects to the listener with its
 * index in the private data; B accepts each request with the matching QP.
 * Returns the number of pairs established on both sides. */
static unsigned connect_pairs(struct pair **p, unsigned n)
{
    struct sockaddr_in dst;
    unsigned est = 0, want = 2 * n;
    uint64_t end = eng_now_ms() + WAIT_MS;

    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_port = htons(lis_port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (unsigned i = 0; i < n; i++) {
        uint32_t id = htonl(i);
        struct uiw_conn_param cp = {
            .private_data = &id, .private_data_len = 4, .ird = 16, .ord = 16};
        int rc = uiw_cm_connect(p[i]->a.qp, NULL, (struct sockaddr *)&dst, &cp, A.ch, p[i],
                                &p[i]->a.conn);
        if (rc < 0) {
            fprintf(stderr, "uiw_cm_connect %u: %d\n", i, rc);
            want -= 2;
        }
    }
    while (est < want && eng_now_ms() < end) {
        struct pollfd pf[2] = {{.fd = uiw_cm_channel_fd(A.ch), .events = POLLIN},
                               {.fd = uiw_cm_channel_fd(B.ch), .events = POLLIN}};
        struct uiw_cm_event ev;
        poll(pf, 2, 100);
        while (uiw_cm_get_event(B.ch, &ev) == 0) {
            if (ev.type == UIW_CM_CONNECT_REQUEST && ev.private_data_len == 4) {
                uint32_t id;
                memcpy(&id, ev.private_data, 4);
                id = ntohl(id);
                struct uiw_conn_param cp = {.ird = 16, .ord = 16};
                if (id < n && !p[id]->b.conn &&
                    uiw_cm_accept(ev.conn, p[id]->b.qp, &cp, p[id]) == 0) {
                    p[id]->b.conn = ev.conn;
                } else {
                    fprintf(stderr, "cannot accept request %u\n", id);
                    uiw_cm_conn_destroy(ev.conn);
                }
            } else if (ev.type == UIW_CM_ESTABLISHED) {
                ((struct pair *)ev.user)->up_b = true;
                est++;
            } else {
                fprintf(stderr, "B: unexpected %s status %d\n", ev_name(ev.type), ev.status);
            }
        }
        while (uiw_cm_get_event(A.ch, &ev) == 0) {
            if (ev.type == UIW_CM_ESTABLISHED) {
                ((struct pair *)ev.user)->up_a = true;
                est++;
            } else {
                fprintf(stderr, "A: unexpected %s status %d\n", ev_name(ev.type), ev.status);
            }
        }
    }
    unsigned ok = 0;
    for (unsigned i = 0; i < n; i++)
        ok += p[i]->up_a && p[i]->up_b;
    return ok;
}

/* Next CM event on s within ms (0 or -ETIMEDOUT). */
static int cm_event(struct side *s, struct uiw_cm_event *ev, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    for (;;) {
        if (uiw_cm_get_event(s->ch, ev) == 0)
            return 0;
        if (eng_now_ms() >= end)
            return -ETIMEDOUT;
        struct pollfd pf = {.fd = uiw_cm_channel_fd(s->ch), .events = POLLIN};
        poll(&pf, 1, 50);
    }
}

static bool wait_state(struct ibv_qp *qp, enum ibv_qp_state want, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    while (eng_qp_state(qp) != want) {
        if (eng_now_ms() >= end)
            return false;
        eng_msleep(5);
    }
    return true;
}

static void async_drain(struct ibv_context *ctx)
{
    struct ibv_async_event ev;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    while (ibv_get_async_event(ctx, &ev) == 0)
        ibv_ack_async_event(&ev);
    fcntl(ctx->async_fd, F_SETFL, fl);
}

/* ------------------------------------------------------------------------
 * Posting helpers
 * ---------------------------------------------------------------------- */

/* ------------------------------------------------------------------------
 * (a) 64 pairs, concurrent Send / Write / Read in both directions
 * ---------------------------------------------------------------------- */
static struct pair pairs[NPAIRS];

struct worker {
    struct pair *p;
    unsigned rounds;
    uint32_t seed0;
    unsigned fails;
    unsigned ops;   /* completions seen with success */
    uint64_t bytes; /* bytes verified */
};

#define R_SRC(e)  ((e)->buf)
#define R_WDST(e) ((e)->buf + REG)
#define R_RDST(e) ((e)->buf + 2 * REG)
#define R_RECV(e) ((e)->buf + 3 * REG)

static void wfail(struct worker *w, const char *what, long v)
{
    if (w->fails++ < 5)
        fprintf(stderr, "pair %u: %s (%ld)\n", w->p->idx, what, v);
}

static void qp_sync(struct ibv_qp *qp)
{
    pthread_mutex_lock(&to_uqp(qp)->lock);
    pthread_mutex_unlock(&to_uqp(qp)->lock);
}

/* One side's three operations toward the peer: Write src -> peer wdst,
 * Read peer src -> rdst, Send src -> peer recv (after the Write, so its
 * arrival proves the Write was placed). */
static int post_three(struct ep *me, struct ep *peer, uint32_t len)
{
    uint64_t pb = (uintptr_t)peer->buf;
    int r = eng_post(me->qp, IBV_WR_RDMA_WRITE, R_SRC(me), len, me->mr->lkey, pb + REG,
                     peer->mr->rkey, 1, true);
    if (!r)
        r = eng_post(me->qp, IBV_WR_RDMA_READ, R_RDST(me), len, me->mr->lkey, pb, peer->mr->rkey, 2,
                     true);
    if (!r)
        r = eng_post(me->qp, IBV_WR_SEND, R_SRC(me), len, me->mr->lkey, 0, 0, 3, true);
    return r;
}

/* Poll until `want` completions arrived on cq (all must succeed). */
static void reap(struct worker *w, struct ibv_cq *cq, unsigned want, uint64_t end,
                 struct ibv_wc *out)
{
    unsigned got = 0;
    while (got < want) {
        struct ibv_wc wc[4];
        int n = ibv_poll_cq(cq, 4, wc);
        if (n < 0) {
            wfail(w, "ibv_poll_cq", n);
            return;
        }
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                wfail(w, ibv_wc_status_str(wc[i].status), (long)wc[i].wr_id);
            else
                w->ops++;
            if (out && got + (unsigned)i < want)
                out[got + (unsigned)i] = wc[i];
        }
        got += (unsigned)n;
        if (!n) {
            if (eng_now_ms() > end) {
                wfail(w, "timeout waiting for completions", (long)(want - got));
                return;
            }
            sched_yield();
        }
    }
}

static void *pair_worker(void *arg)
{
    static const uint32_t sizes[] = {1, 8, 1000, 4096, 65536, 17, 30001, 65536, 4095, 2};
    struct worker *w = arg;
    struct ep *a = &w->p->a, *b = &w->p->b;
    uint64_t end = eng_now_ms() + 60000;

    for (unsigned r = 0; r < w->rounds && w->fails == 0; r++) {
        uint32_t len = sizes[(r + w->p->idx) % (sizeof(sizes) / sizeof(sizes[0]))];
        uint32_t sa = w->seed0 + r * 4, sb = sa + 1;
        struct ibv_wc wa, wb;

        eng_fill(R_SRC(a), len, sa);
        eng_fill(R_SRC(b), len, sb);
        memset(R_WDST(a), 0, REG);
        memset(R_WDST(b), 0, REG);
        memset(R_RDST(a), 0, REG);
        memset(R_RDST(b), 0, REG);
        memset(R_RECV(a), 0, REG);
        memset(R_RECV(b), 0, REG);
        /* posting takes the QP locks after the buffers were written: the
         * progress threads that read them later are ordered after us */
        if (eng_post_recv(a->qp, R_RECV(a), REG, a->mr->lkey, 10 + r) ||
            eng_post_recv(b->qp, R_RECV(b), REG, b->mr->lkey, 10 + r)) {
            wfail(w, "post_recv", r);
            break;
        }
        if (post_three(a, b, len) || post_three(b, a, len)) {
            wfail(w, "post_send", r);
            break;
        }
        reap(w, a->scq, 3, end, NULL);
        reap(w, b->scq, 3, end, NULL);
        reap(w, a->rcq, 1, end, &wa);
        reap(w, b->rcq, 1, end, &wb);
        if (w->fails)
            break;
        if (wa.byte_len != len || wb.byte_len != len || wa.opcode != IBV_WC_RECV ||
            wb.opcode != IBV_WC_RECV)
            wfail(w, "receive completion length/opcode", (long)wa.byte_len);
        /* Send: the peer's pattern; Write: in wdst; Read: the peer's src */
        long e;
        if ((e = eng_diff(R_RECV(a), len, sb)) >= 0)
            wfail(w, "A: Send data", e);
        if ((e = eng_diff(R_RECV(b), len, sa)) >= 0)
            wfail(w, "B: Send data", e);
        if ((e = eng_diff(R_WDST(a), len, sb)) >= 0)
            wfail(w, "A: Write data", e);
        if ((e = eng_diff(R_WDST(b), len, sa)) >= 0)
            wfail(w, "B: Write data", e);
        if ((e = eng_diff(R_RDST(a), len, sb)) >= 0)
            wfail(w, "A: Read data", e);
        if ((e = eng_diff(R_RDST(b), len, sa)) >= 0)
            wfail(w, "B: Read data", e);
        /* nothing beyond len was touched */
        if (len < REG && (R_WDST(a)[len] || R_WDST(b)[len] || R_RDST(a)[len] || R_RDST(b)[len] ||
                          R_RECV(a)[len] || R_RECV(b)[len]))
            wfail(w, "byte after the message changed", len);
        w->bytes += 6ull * len;
        /* the peer's progress thread read our buffers under its QP lock
         * (Read Responses may go out after the last completion we saw):
         * order the next round's writes after that, for the sanitizers */
        qp_sync(a->qp);
        qp_sync(b->qp);
    }
    return NULL;
}

/* Run `rounds` rounds on pairs [first, first+n) concurrently. */
static void run_traffic(unsigned first, unsigned n, unsigned rounds, uint32_t seed, const char *tag)
{
    pthread_t th[NPAIRS];
    struct worker w[NPAIRS];
    uint64_t t0 = eng_now_ms(), bytes = 0;
    unsigned started = 0;

    for (unsigned i = 0; i < n; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].p = &pairs[first + i];
        w[i].rounds = rounds;
        w[i].seed0 = seed + (first + i) * 1000;
        if (pthread_create(&th[i], NULL, pair_worker, &w[i]) != 0)
            break;
        started++;
    }
    CHECK_EQ(started, n);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(w[i].fails, 0);
        CHECK_EQ(w[i].ops, rounds * 8); /* 3 + 3 sends, 2 receives per round */
        bytes += w[i].bytes;
    }
    printf("%s: %u pairs x %u rounds, %llu bytes verified, %llu ms\n", tag, n, rounds,
           (unsigned long long)bytes, (unsigned long long)(eng_now_ms() - t0));
}

/* ------------------------------------------------------------------------
 * (b) atomics on one shared word
 * ---------------------------------------------------------------------- */
#define AQPS   8
#define ATHR   2
#define NFA    1000
#define NCAS   100
#define AWIN   16
#define LOCALN 1000
#define ASTART 0xFFFFF000ull /* crosses the 32-bit boundary */

struct aqp {
    struct pair *p;
    uint64_t *res; /* [ATHR][NFA + NCAS] old values (A side, registered) */
    struct ibv_mr *mr;
    uint64_t raddr;
    uint32_t rkey;
    atomic_uint done[ATHR];
    atomic_uint fails;
};
struct athr {
    struct aqp *q;
    unsigned t;
    uint64_t end;
    unsigned cas_retries;
};

static void afail(struct aqp *q, const char *what, long v)
{
    if (atomic_fetch_add(&q->fails, 1) < 5)
        fprintf(stderr, "atomics pair %u: %s (%ld)\n", q->p->idx, what, v);
}

/* Reap completions of either thread of the QP; false on timeout. */
static bool apoll(struct athr *a)
{
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(a->q->p->a.scq, 8, wc);
    for (int i = 0; i < n; i++) {
        unsigned t = (unsigned)(wc[i].wr_id >> 32);
        if (wc[i].status != IBV_WC_SUCCESS)
            afail(a->q, ibv_wc_status_str(wc[i].status), (long)wc[i].wr_id);
        if (t < ATHR)
            atomic_fetch_add_explicit(&a->q->done[t], 1, memory_order_release);
        else
            afail(a->q, "bad wr_id", (long)wc[i].wr_id);
    }
    if (n == 0) {
        if (eng_now_ms() > a->end)
            return false;
        sched_yield();
    }
    return true;
}

static void *atomic_worker(void *arg)
{
    struct athr *a = arg;
    struct aqp *q = a->q;
    uint64_t *slot = q->res + a->t * (NFA + NCAS);
    unsigned posted = 0;

    /* pipelined Fetch-and-Add 1 */
    while (atomic_load_explicit(&q->done[a->t], memory_order_acquire) < NFA) {
        if (posted < NFA && posted - atomic_load(&q->done[a->t]) < AWIN) {
            if (eng_post_atomic(q->p->a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, &slot[posted], q->mr->lkey,
                                q->raddr, q->rkey, 1, 0, (uint64_t)a->t << 32 | posted)) {
                afail(q, "post FetchAdd", posted);
                return NULL;
            }
            posted++;
        } else if (!apoll(a)) {
            afail(q, "timeout in FetchAdd phase", posted);
            return NULL;
        }
    }
    /* Compare-and-Swap increments, one at a time; a failed compare returns
     * the current value, which is the next guess */
    uint64_t guess = slot[NFA - 1] + 1;
    for (unsigned k = 0; k < NCAS; k++) {
        for (;;) {
            unsigned before = atomic_load_explicit(&q->done[a->t], memory_order_acquire);
            if (eng_post_atomic(q->p->a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, &slot[NFA + k], q->mr->lkey,
                                q->raddr, q->rkey, guess, guess + 1,
                                (uint64_t)a->t << 32 | (NFA + k))) {
                afail(q, "post CmpSwap", k);
                return NULL;
            }
            while (atomic_load_explicit(&q->done[a->t], memory_order_acquire) == before)
                if (!apoll(a)) {
                    afail(q, "timeout in CmpSwap phase", k);
                    return NULL;
                }
            uint64_t old = slot[NFA + k];
            if (old == guess) {
                guess++;
                break;
            }
            guess = old;
            a->cas_retries++;
        }
    }
    return NULL;
}

struct local_adder {
    uint64_t *word;
    uint64_t vals[LOCALN];
};

static void *local_worker(void *arg)
{
    struct local_adder *l = arg;
    for (unsigned i = 0; i < LOCALN; i++) {
        l->vals[i] = __atomic_fetch_add(l->word, 1, __ATOMIC_SEQ_CST);
        if (i % 64 == 0)
            sched_yield();
    }
    return NULL;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static void test_atomics(void)
{
    static struct aqp q[AQPS];
    static struct athr th[AQPS][ATHR];
    static struct local_adder loc;
    pthread_t tid[AQPS][ATHR], ltid;
    uint64_t *word;
    struct ibv_mr *wmr;
    uint64_t t0 = eng_now_ms();
    const size_t rlen = ATHR * (NFA + NCAS) * sizeof(uint64_t);

    CHECK_EQ(posix_memalign((void **)&word, 64, 64), 0);
    *word = ASTART;
    wmr = ibv_reg_mr(B.pd, word, 64, ENG_ACCESS_ALL);
    CHECK(wmr != NULL);
    if (!wmr)
        return;
    for (unsigned i = 0; i < AQPS; i++) {
        q[i].p = &pairs[i];
        CHECK_EQ(posix_memalign((void **)&q[i].res, 4096, rlen), 0);
        memset(q[i].res, 0xEE, rlen);
        q[i].mr = ibv_reg_mr(A.pd, q[i].res, rlen, ENG_ACCESS_ALL);
        CHECK(q[i].mr != NULL);
        q[i].raddr = (uintptr_t)word;
        q[i].rkey = wmr->rkey;
    }
    loc.word = word;
    for (unsigned i = 0; i < AQPS; i++)
        for (unsigned t = 0; t < ATHR; t++) {
            th[i][t] = (struct athr){.q = &q[i], .t = t, .end = eng_now_ms() + 60000};
            CHECK_EQ(pthread_create(&tid[i][t], NULL, atomic_worker, &th[i][t]), 0);
        }
    CHECK_EQ(pthread_create(&ltid, NULL, local_worker, &loc), 0);
    pthread_join(ltid, NULL);
    unsigned retries = 0;
    for (unsigned i = 0; i < AQPS; i++)
        for (unsigned t = 0; t < ATHR; t++) {
            pthread_join(tid[i][t], NULL);
            retries += th[i][t].cas_retries;
        }

    const uint64_t total = (uint64_t)AQPS * ATHR * (NFA + NCAS) + LOCALN;
    CHECK_EQ(__atomic_load_n(word, __ATOMIC_SEQ_CST), ASTART + total);
    /* every increment returned a distinct old value: together exactly
     * [ASTART, ASTART + total) */
    uint64_t *all = malloc(total * sizeof(uint64_t));
    size_t k = 0;
    for (unsigned i = 0; i < AQPS; i++) {
        CHECK_EQ(atomic_load(&q[i].fails), 0);
        for (unsigned t = 0; t < ATHR; t++)
            CHECK_EQ(atomic_load(&q[i].done[t]), NFA + NCAS + th[i][t].cas_retries);
        for (size_t j = 0; j < ATHR * (NFA + NCAS); j++)
            all[k++] = q[i].res[j];
    }
    for (unsigned j = 0; j < LOCALN; j++)
        all[k++] = loc.vals[j];
    CHECK_EQ(k, total);
    qsort(all, k, sizeof(uint64_t), cmp_u64);
    size_t bad = 0;
    for (size_t j = 0; j < k; j++)
        if (all[j] != ASTART + j)
            bad++;
    CHECK_EQ(bad, 0);
    free(all);
    printf("atomics: %u QPs x %u threads x (%u FetchAdd + %u CmpSwap) + %u local = %llu, "
           "%u CmpSwap retries, %llu ms\n",
           AQPS, ATHR, NFA, NCAS, LOCALN, (unsigned long long)total, retries,
           (unsigned long long)(eng_now_ms() - t0));
    for (unsigned i = 0; i < AQPS; i++) {
        CHECK_EQ(ibv_dereg_mr(q[i].mr), 0);
        free(q[i].res);
    }
    CHECK_EQ(ibv_dereg_mr(wmr), 0);
    free(word);
}

/* ------------------------------------------------------------------------
 * (c), (d): streaming into a pair that is torn down underneath
 * ---------------------------------------------------------------------- */
#define SBIG     (1u << 20) /* Write size */
#define SSEND    4096
#define SMAXSEND 100 /* Sends per stream (the target posts more receives) */
#define SRECVS   256
#define SWIN     32

struct streamer {
    struct ep *e;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t wlen;
    bool sends;
    atomic_bool stop_post, stop_poll, posting_stopped;
    /* results (read after join) */
    unsigned posted, ok, errs, first_err;
    atomic_uint ok_live;
    bool drained;
};

static void *stream_worker(void *arg)
{
    struct streamer *s = arg;
    unsigned sends = 0, outstanding = 0;
    uint64_t end = eng_now_ms() + 30000;

    while (!atomic_load(&s->stop_poll) && eng_now_ms() < end) {
        bool post_more = !atomic_load(&s->stop_post) && s->errs == 0;
        if (!post_more)
            atomic_store(&s->posting_stopped, true);
        if (post_more && outstanding < SWIN) {
            bool send = s->sends && sends < SMAXSEND && s->posted % 4 == 3;
            int r = send ? eng_post(s->e->qp, IBV_WR_SEND, s->e->buf, SSEND, s->e->mr->lkey, 0, 0,
                                    s->posted, true)
                         : eng_post(s->e->qp, IBV_WR_RDMA_WRITE, s->e->buf, s->wlen, s->e->mr->lkey,
                                    s->raddr, s->rkey, s->posted, true);
            if (r == 0) {
                s->posted++;
                outstanding++;
                sends += send;
                continue;
            }
            /* a QP in ERR flushes at once; anything else stops posting */
            atomic_store(&s->stop_post, true);
        }
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(s->e->scq, 16, wc);
        for (int i = 0; i < n; i++) {
            outstanding--;
            if (wc[i].status == IBV_WC_SUCCESS) {
                s->ok++;
                atomic_fetch_add(&s->ok_live, 1);
            } else if (s->errs++ == 0) {
                s->first_err = wc[i].status;
            }
        }
        if (n == 0) {
            if (!post_more && outstanding == 0 && s->errs)
                break; /* everything came back */
            sched_yield();
        }
    }
    atomic_store(&s->posting_stopped, true);
    s->drained = outstanding == 0;
    return NULL;
}

/* A fresh pair for a streaming test. */
static bool stream_pair(struct pair *p, unsigned idx)
{
    struct pair *pp = p;
    memset(p, 0, sizeof(*p));
    p->idx = idx;
    if (ep_create(&A, &p->a, 64, 16, 256, SBIG) || ep_create(&B, &p->b, 64, SRECVS, 512, SBIG))
        return false;
    eng_fill(p->a.buf, SBIG, 0x1234);
    for (unsigned i = 0; i < SRECVS; i++)
        if (eng_post_recv(p->b.qp, p->b.buf, SBIG, p->b.mr->lkey, i))
            return false;
    /* connect_pairs uses the index in the private data: connect as #0 */
    return connect_pairs(&pp, 1) == 1;
}

static bool wait_ok(struct streamer *s, unsigned n, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    while (atomic_load(&s->ok_live) < n && eng_now_ms() < end)
        eng_msleep(1);
    return atomic_load(&s->ok_live) >= n;
}

/* Start a streamer thread on A's QP of p (Writes of wlen bytes to
 * raddr/rkey, with or without Sends) and wait until 20 WRs completed. */
static void stream_start(struct streamer *s, pthread_t *th, struct pair *p, uint64_t raddr,
                         uint32_t rkey, size_t wlen, bool sends)
{
    memset(s, 0, sizeof(*s));
    s->e = &p->a;
    s->raddr = raddr;
    s->rkey = rkey;
    s->wlen = wlen;
    s->sends = sends;
    CHECK_EQ(pthread_create(th, NULL, stream_worker, s), 0);
    CHECK(wait_ok(s, 20, WAIT_MS));
}

/* Expect DISCONNECTED for conn on side s; other events are reported. */
static bool expect_disconnected(struct side *s, struct uiw_conn *conn, int *status)
{
    struct uiw_cm_event ev;
    uint64_t end = eng_now_ms() + WAIT_MS;
    while (eng_now_ms() < end) {
        if (cm_event(s, &ev, 200) < 0)
            continue;
        if (ev.type == UIW_CM_DISCONNECTED && ev.conn == conn) {
            *status = ev.status;
            return true;
        }
        fprintf(stderr, "unexpected %s status %d\n", ev_name(ev.type), ev.status);
    }
    return false;
}

/* c1: B's QP is destroyed while A streams Writes and Sends into it. */
static void test_destroy_target(void)
{
    struct pair p;
    struct streamer s;
    pthread_t th;
    int st = 0;
    uint64_t t0 = eng_now_ms();

    CHECK(stream_pair(&p, 1000));
    stream_start(&s, &th, &p, (uintptr_t)p.b.buf, p.b.mr->rkey, SBIG, true);
    /* destroy while the stream runs (the SQ is full, data in the socket) */
    struct uiw_conn *cb = p.b.conn;
    CHECK_EQ(ibv_destroy_qp(p.b.qp), 0);
    p.b.qp = NULL;
    CHECK(wait_state(p.a.qp, IBV_QPS_ERR, WAIT_MS));
    pthread_join(th, NULL);
    CHECK(s.errs > 0); /* the stream failed... */
    CHECK(s.drained);  /* ...and every WR came back */
    CHECK(s.first_err == IBV_WC_WR_FLUSH_ERR || s.first_err == IBV_WC_REM_ACCESS_ERR ||
          s.first_err == IBV_WC_RETRY_EXC_ERR || s.first_err == IBV_WC_FATAL_ERR ||
          s.first_err == IBV_WC_GENERAL_ERR || s.first_err == IBV_WC_REM_OP_ERR);
    CHECK_EQ(s.ok + s.errs, s.posted);
    /* CM: B's side reports the QP destroyed, A's the reset */
    CHECK(expect_disconnected(&B, cb, &st));
    CHECK_EQ(st, -ECONNABORTED);
    CHECK(expect_disconnected(&A, p.a.conn, &st)); /* FIN or RST: any status */
    /* a post after the failure is flushed, not lost */
    CHECK_EQ(eng_post(p.a.qp, IBV_WR_SEND, p.a.buf, 8, p.a.mr->lkey, 0, 0, 777, true), 0);
    {
        struct ibv_wc wc;
        uint64_t end = eng_now_ms() + WAIT_MS;
        int n = 0;
        while ((n = ibv_poll_cq(p.a.scq, 1, &wc)) == 0 && eng_now_ms() < end)
            eng_msleep(1);
        CHECK_EQ(n, 1);
        CHECK_EQ(wc.wr_id, 777);
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    }
    printf("destroy target QP: %u WRs posted, %u ok, %u failed (first: %s), %llu ms\n", s.posted,
           s.ok, s.errs, ibv_wc_status_str((enum ibv_wc_status)s.first_err),
           (unsigned long long)(eng_now_ms() - t0));
    ep_destroy(&p.a);
    ep_destroy(&p.b);
    async_drain(A.ctx);
    async_drain(B.ctx);
}

/* c2: A's QP is destroyed with large WRs in flight while another thread
 * keeps polling its send CQ; B's posted receives are flushed. */
static void test_destroy_streaming(void)
{
    struct pair p;
    struct streamer s;
    pthread_t th;
    int st = 0;
    uint64_t t0 = eng_now_ms();

    CHECK(stream_pair(&p, 1001));
    stream_start(&s, &th, &p, (uintptr_t)p.b.buf, p.b.mr->rkey, SBIG, true);
    atomic_store(&s.stop_post, true);
    {
        uint64_t end = eng_now_ms() + WAIT_MS;
        while (!atomic_load(&s.posting_stopped) && eng_now_ms() < end)
            sched_yield();
        CHECK(atomic_load(&s.posting_stopped));
    }
    struct uiw_conn *ca = p.a.conn;
    CHECK_EQ(ibv_destroy_qp(p.a.qp), 0); /* the streamer still polls p.a.scq */
    p.a.qp = NULL;
    /* B: a receive completes in error (flushed), the QP is in ERR */
    unsigned recv_ok = 0, recv_flush = 0, recv_other = 0;
    uint64_t end = eng_now_ms() + WAIT_MS;
    while (recv_flush == 0 && recv_other == 0 && eng_now_ms() < end) {
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(p.b.rcq, 16, wc);
        for (int i = 0; i < n; i++) {
            if (wc[i].status == IBV_WC_SUCCESS)
                recv_ok++;
            else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                recv_flush++;
            else
                recv_other++;
        }
        if (!n)
            eng_msleep(1);
    }
    CHECK(recv_flush > 0);
    CHECK_EQ(recv_other, 0);
    CHECK(wait_state(p.b.qp, IBV_QPS_ERR, WAIT_MS));
    /* every remaining receive is flushed: SRECVS in all */
    end = eng_now_ms() + WAIT_MS;
    while (recv_ok + recv_flush + recv_other < SRECVS && eng_now_ms() < end) {
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(p.b.rcq, 16, wc);
        for (int i = 0; i < n; i++)
            if (wc[i].status == IBV_WC_SUCCESS)
                recv_ok++;
            else if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                recv_flush++;
            else
                recv_other++;
        if (!n)
            eng_msleep(1);
    }
    CHECK_EQ(recv_ok + recv_flush, SRECVS);
    CHECK(recv_ok <= SMAXSEND);
    /* the received Sends carried the right bytes */
    CHECK(eng_diff(p.b.buf, SSEND, 0x1234) < 0 || recv_ok == 0);
    atomic_store(&s.stop_poll, true);
    pthread_join(th, NULL);
    CHECK(expect_disconnected(&A, ca, &st));
    CHECK_EQ(st, -ECONNABORTED);
    CHECK(expect_disconnected(&B, p.b.conn, &st));
    printf("destroy streaming QP: %u WRs posted, %u completed before, B: %u received, %u "
           "flushed, %llu ms\n",
           s.posted, s.ok, recv_ok, recv_flush, (unsigned long long)(eng_now_ms() - t0));
    ep_destroy(&p.a);
    ep_destroy(&p.b);
    async_drain(A.ctx);
    async_drain(B.ctx);
}

/* d: B deregisters the region A streams Writes into. */
static void test_dereg_streaming(void)
{
    struct pair p;
    struct streamer s;
    pthread_t th;
    uint64_t t0 = eng_now_ms();
    uint8_t *target = NULL;
    struct ibv_mr *tmr;

    CHECK(stream_pair(&p, 1002));
    CHECK_EQ(posix_memalign((void **)&target, 4096, SBIG), 0);
    memset(target, 0, SBIG);
    tmr = ibv_reg_mr(B.pd, target, SBIG, ENG_ACCESS_ALL);
    CHECK(tmr != NULL);
    if (!tmr)
        return;
    async_drain(B.ctx);
    stream_start(&s, &th, &p, (uintptr_t)target, tmr->rkey, 256 * 1024, false);
    CHECK_EQ(ibv_dereg_mr(tmr), 0);
    /* from here on the memory is ours again: nothing may change it */
    memset(target, 0x5A, SBIG);
    eng_msleep(300);
    size_t changed = 0;
    for (size_t i = 0; i < SBIG; i++)
        changed += target[i] != 0x5A;
    CHECK_EQ(changed, 0);
    /* the target QP detected the invalid STag, the writer failed */
    CHECK_EQ(eng_async_wait(B.ctx, p.b.qp, WAIT_MS), IBV_EVENT_QP_ACCESS_ERR);
    CHECK(wait_state(p.b.qp, IBV_QPS_ERR, WAIT_MS));
    CHECK(wait_state(p.a.qp, IBV_QPS_ERR, WAIT_MS));
    pthread_join(th, NULL);
    CHECK(s.errs > 0);
    CHECK(s.drained);
    CHECK_EQ(s.ok + s.errs, s.posted);
    eng_msleep(100);
    changed = 0;
    for (size_t i = 0; i < SBIG; i++)
        changed += target[i] != 0x5A;
    CHECK_EQ(changed, 0);
    printf("dereg under streaming Writes: %u WRs posted, %u ok, %u failed (first: %s), %llu ms\n",
           s.posted, s.ok, s.errs, ibv_wc_status_str((enum ibv_wc_status)s.first_err),
           (unsigned long long)(eng_now_ms() - t0));
    ep_destroy(&p.a);
    ep_destroy(&p.b);
    async_drain(A.ctx);
    async_drain(B.ctx);
    free(target);
}

int main(void)
{
    uint64_t t0 = eng_now_ms();
    struct pair *pp[NPAIRS];

    if (side_open(&A) || side_open(&B)) {
        fprintf(stderr, "cannot open two uiw_lo contexts\n");
        CHECK(0);
        TEST_MAIN_END();
    }
    {
        struct sockaddr_in a;
        struct sockaddr_storage ss;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        CHECK_EQ(uiw_cm_listen(B.ctx, (struct sockaddr *)&a, 128, B.ch, NULL, &lis), 0);
        CHECK_EQ(uiw_cm_listener_addr(lis, &ss), 0);
        lis_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        CHECK(lis_port != 0);
    }

    /* (a) */
    unsigned made = 0;
    for (unsigned i = 0; i < NPAIRS; i++) {
        pairs[i].idx = i;
        if (ep_create(&A, &pairs[i].a, 64, 16, 256, 4 * REG) ||
            ep_create(&B, &pairs[i].b, 64, 16, 256, 4 * REG))
            break;
        pp[i] = &pairs[i];
        made++;
    }
    CHECK_EQ(made, NPAIRS);
    uint64_t tc = eng_now_ms();
    unsigned up = connect_pairs(pp, made);
    CHECK_EQ(up, NPAIRS);
    printf("connected %u pairs in %llu ms\n", up, (unsigned long long)(eng_now_ms() - tc));
    if (up != NPAIRS)
        goto out;
    run_traffic(0, NPAIRS, ROUNDS, 1, "64 QPs Send/Write/Read");

    /* (b) */
    test_atomics();

    /* (c), (d) */
    test_destroy_target();
    test_destroy_streaming();
    test_dereg_streaming();

    /* the 64 pairs were not disturbed */
    for (unsigned i = 0; i < NPAIRS; i++) {
        CHECK_EQ(eng_qp_state(pairs[i].a.qp), IBV_QPS_RTS);
        CHECK_EQ(eng_qp_state(pairs[i].b.qp), IBV_QPS_RTS);
    }
    run_traffic(0, NPAIRS, 3, 99, "64 QPs again after the teardown tests");

    /* orderly disconnect of all 64 at once: DISCONNECTED on both sides */
    {
        unsigned da = 0, db = 0, bad = 0;
        for (unsigned i = 0; i < NPAIRS; i++)
            CHECK_EQ(uiw_cm_disconnect(pairs[i].a.conn), 0);
        uint64_t end = eng_now_ms() + WAIT_MS;
        while ((da < NPAIRS || db < NPAIRS) && eng_now_ms() < end) {
            struct uiw_cm_event ev;
            struct pollfd pf[2] = {{.fd = uiw_cm_channel_fd(A.ch), .events = POLLIN},
                                   {.fd = uiw_cm_channel_fd(B.ch), .events = POLLIN}};
            poll(pf, 2, 100);
            while (uiw_cm_get_event(A.ch, &ev) == 0) {
                if (ev.type == UIW_CM_DISCONNECTED && ev.status == 0)
                    da++;
                else
                    bad++;
            }
            while (uiw_cm_get_event(B.ch, &ev) == 0) {
                if (ev.type == UIW_CM_DISCONNECTED && ev.status == 0)
                    db++;
                else
                    bad++;
            }
        }
        CHECK_EQ(da, NPAIRS);
        CHECK_EQ(db, NPAIRS);
        CHECK_EQ(bad, 0);
        for (unsigned i = 0; i < NPAIRS; i++) {
            CHECK_EQ(eng_qp_state(pairs[i].a.qp), IBV_QPS_ERR);
            CHECK_EQ(eng_qp_state(pairs[i].b.qp), IBV_QPS_ERR);
        }
    }

out:
    for (unsigned i = 0; i < made; i++) {
        ep_destroy(&pairs[i].a);
        ep_destroy(&pairs[i].b);
    }
    uiw_cm_listener_destroy(lis);
    async_drain(A.ctx);
    async_drain(B.ctx);
    uiw_cm_channel_destroy(A.ch);
    uiw_cm_channel_destroy(B.ch);
    CHECK_EQ(ibv_dealloc_pd(A.pd), 0);
    CHECK_EQ(ibv_dealloc_pd(B.pd), 0);
    CHECK_EQ(ibv_close_device(A.ctx), 0);
    CHECK_EQ(ibv_close_device(B.ctx), 0);
    printf("total %llu ms\n", (unsigned long long)(eng_now_ms() - t0));
    TEST_MAIN_END();
}
