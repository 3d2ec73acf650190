/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rsockets against a hostile peer: a raw rdma_cm client that speaks the
 * rsocket wire protocol itself (written here from docs/RSOCKETS.md, not
 * with the library's code: the 40-byte connection private data, RDMA
 * Writes into the granted buffer, 4-byte messages with the op in bits
 * 31..29) and then lies.
 *
 *  1. legit: an empty data message (which rsockets never send; it must
 *     not end an rrecv with 0, the end of the stream), then 16 bytes
 *     written into the server's first grant and announced by a data
 *     message: rrecv returns exactly them;
 *  2. a data message announcing more bytes than the server granted and has
 *     not read back (it would make rrecv return stale buffer bytes): the
 *     next rrecv fails with EPROTO and the client sees the connection
 *     closed;
 *  3. more data messages than the server's credits (each announcing one
 *     byte it did write): what the credits allowed may be read, then
 *     EPROTO as well.
 * Each case is a connection of its own to one rsocket listener.
 */
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* The rsocket wire format (docs/RSOCKETS.md "Protocol"). */
struct wire_sge {
    uint64_t addr;
    uint32_t key;
    uint32_t length;
};
struct wire_conn {
    uint8_t version;
    uint8_t flags;
    uint16_t credits; /* network order */
    uint8_t reserved[3];
    uint8_t target_iomap_size;
    struct wire_sge target_sgl; /* network order */
    struct wire_sge data_buf;   /* network order */
};
_Static_assert(sizeof(struct wire_conn) == 40, "40 bytes on the wire");
#define MSG_DATA 0u
static uint32_t wire_msg(uint32_t op, uint32_t data)
{
    return (op << 29) | (data & 0x1fffffffu); /* sender's byte order */
}

#define RQ     16 /* the listener's RDMA_RQSIZE, so the server's credits */
#define NRECV  64
#define REGION (1u << 16)

enum { LEGIT_ONLY, TOO_LONG, TOO_MANY };

struct raw {
    int kase;
    uint16_t port;
    /* main <-> client steps */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int step;     /* client: 1 empty message sent, 2 legit sent, 3 lie sent */
    bool go_data; /* main: the empty message did not end the stream */
    bool go_lie;  /* main: read the legit bytes, lie now */
    bool closed;  /* client saw DISCONNECTED */
    bool ok;      /* client: every verb call worked */
    uint32_t srv_credits, srv_grant;
};

/* Set one of r's flags under its lock and wake the waiters. */
static void set_flag(struct raw *r, bool *flag)
{
    pthread_mutex_lock(&r->mu);
    *flag = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void set_step(struct raw *r, int step)
{
    pthread_mutex_lock(&r->mu);
    r->step = step;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static bool wait_flag(struct raw *r, bool *flag, int *step, int want)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += 10;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (rc == 0 && (flag ? !*flag : *step < want))
        rc = pthread_cond_timedwait(&r->cv, &r->mu, &t);
    bool got = flag ? *flag : *step >= want;
    pthread_mutex_unlock(&r->mu);
    return got;
}

static bool wait_wc(struct ibv_cq *cq, unsigned n)
{
    struct ibv_wc wc[16];
    unsigned got = 0;
    for (int spins = 0; got < n && spins < 2000000; spins++) {
        int k = ibv_poll_cq(cq, 16, wc);
        for (int i = 0; i < k; i++) {
            if (wc[i].opcode == IBV_WC_RECV)
                continue; /* the server's grants */
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "raw client: completion status %d\n", wc[i].status);
                return false;
            }
            got++;
        }
        if (!k)
            usleep(10);
    }
    return got == n;
}

static bool post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len,
                      uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned flags)
{
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED | flags},
                       *bad;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad) == 0;
}

static void *raw_client(void *arg)
{
    struct raw *r = arg;
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    struct rdma_cm_event *e = NULL;
    uint8_t *mem = calloc(1, REGION);
    bool ok = ch && mem && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0;
    struct sockaddr_in dst = {.sin_family = AF_INET,
                              .sin_port = htons(r->port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ok = ok && rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
         rdma_get_cm_event(ch, &e) == 0 && e->event == RDMA_CM_EVENT_ADDR_RESOLVED;
    if (e)
        rdma_ack_cm_event(e);
    e = NULL;
    ok = ok && rdma_resolve_route(id, 2000) == 0 && rdma_get_cm_event(ch, &e) == 0 &&
         e->event == RDMA_CM_EVENT_ROUTE_RESOLVED;
    if (e)
        rdma_ack_cm_event(e);
    e = NULL;
    struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 256,
                                          .max_recv_wr = NRECV,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1,
                                          .max_inline_data = 64},
                                  .qp_type = IBV_QPT_RC};
    ok = ok && rdma_create_qp(id, NULL, &qa) == 0;
    struct ibv_mr *mr =
        ok ? ibv_reg_mr(id->pd, mem, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
           : NULL;
    ok = ok && mr;
    /* layout: [0, 64) our target SGL (2 entries), [4096, 4096 + NRECV*4)
     * receive slots, [8192, 8192 + 32768) our data buffer, then what we
     * send from */
    uint8_t *tx = mem + 8192 + 32768;
    for (unsigned i = 0; ok && i < NRECV; i++) {
        struct ibv_sge sge = {
            .addr = (uintptr_t)(mem + 4096 + 4 * i), .length = 4, .lkey = mr->lkey};
        struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
        ok = ibv_post_recv(id->qp, &wr, &bad) == 0;
    }
    struct wire_conn c = {.version = 1, .credits = htobe16(NRECV)};
    if (ok) {
        c.target_sgl.addr = htobe64((uintptr_t)mem);
        c.target_sgl.key = htobe32(mr->rkey);
        c.target_sgl.length = htobe32(2);
        c.data_buf.addr = htobe64((uintptr_t)(mem + 8192));
        c.data_buf.key = htobe32(mr->rkey);
        c.data_buf.length = htobe32(16384);
    }
    struct rdma_conn_param cp = {.private_data = &c,
                                 .private_data_len = sizeof(c),
                                 .initiator_depth = 1,
                                 .responder_resources = 1,
                                 .flow_control = 1,
                                 .retry_count = 7,
                                 .rnr_retry_count = 7};
    ok = ok && rdma_connect(id, &cp) == 0 && rdma_get_cm_event(ch, &e) == 0 &&
         e->event == RDMA_CM_EVENT_ESTABLISHED && e->param.conn.private_data_len >= sizeof(c);
    struct wire_conn s = {0};
    if (ok)
        memcpy(&s, e->param.conn.private_data, sizeof(s));
    if (e)
        rdma_ack_cm_event(e);
    e = NULL;
    uint64_t raddr = be64toh(s.data_buf.addr);
    uint32_t rkey = be32toh(s.data_buf.key);
    r->srv_credits = be16toh(s.credits);
    r->srv_grant = be32toh(s.data_buf.length);
    ok = ok && s.version == 1 && r->srv_credits == RQ && r->srv_grant >= 1024;

    /* 1: an empty data message (rsockets never send one: it must not
     * read as the end of the stream), then 16 bytes written and announced.
     * tx: the 16 bytes at 0, case 3's bytes at 256, messages from 1024 */
    memcpy(tx, "0123456789abcdef", 16);
    uint32_t *m = (uint32_t *)(tx + 1024);
    m[0] = wire_msg(MSG_DATA, 0);
    m[1] = wire_msg(MSG_DATA, 16);
    ok = ok && post_send(id->qp, IBV_WR_SEND, &m[0], 4, mr->lkey, 0, 0, IBV_SEND_INLINE) &&
         wait_wc(id->send_cq, 1);
    r->ok = ok;
    set_step(r, 1);
    ok = ok && wait_flag(r, &r->go_data, NULL, 0) &&
         post_send(id->qp, IBV_WR_RDMA_WRITE, tx, 16, mr->lkey, raddr, rkey, 0) &&
         post_send(id->qp, IBV_WR_SEND, &m[1], 4, mr->lkey, 0, 0, IBV_SEND_INLINE) &&
         wait_wc(id->send_cq, 2);
    m += 2;
    r->ok = ok;
    set_step(r, 2);
    if (r->kase == LEGIT_ONLY || !ok || !wait_flag(r, &r->go_lie, NULL, 0))
        goto out;

    if (r->kase == TOO_LONG) {
        /* 2: a message announcing one byte more than the server's whole
         * receive buffer (two grants): more than it can have written */
        *m = wire_msg(MSG_DATA, 2 * r->srv_grant + 1);
        ok = post_send(id->qp, IBV_WR_SEND, m, 4, mr->lkey, 0, 0, IBV_SEND_INLINE) &&
             wait_wc(id->send_cq, 1);
    } else {
        /* 3: RQ + 2 bytes written, then a data message for each: the
         * server allowed RQ + 2 messages in all (the empty one gave its
         * credit back at once, the read of the 16 bytes one more with its
         * grant), this is RQ + 4 */
        memset(tx + 256, 'x', RQ + 2);
        ok = post_send(id->qp, IBV_WR_RDMA_WRITE, tx + 256, RQ + 2, mr->lkey, raddr + 16, rkey, 0);
        for (unsigned i = 0; ok && i < RQ + 2; i++) {
            m[1 + i] = wire_msg(MSG_DATA, 1); /* one 'x' each */
            ok = post_send(id->qp, IBV_WR_SEND, &m[1 + i], 4, mr->lkey, 0, 0, IBV_SEND_INLINE);
        }
        ok = ok && wait_wc(id->send_cq, RQ + 3);
    }
    r->ok = ok;
    set_step(r, 3);
    /* the server closes the connection */
    while (ok && rdma_get_cm_event(ch, &e) == 0) {
        enum rdma_cm_event_type t = e->event;
        rdma_ack_cm_event(e);
        if (t == RDMA_CM_EVENT_DISCONNECTED) {
            set_flag(r, &r->closed);
            break;
        }
    }
out:
    if (id) {
        rdma_disconnect(id);
        if (id->qp)
            rdma_destroy_qp(id);
        if (mr)
            ibv_dereg_mr(mr);
        rdma_destroy_id(id);
    }
    if (ch)
        rdma_destroy_event_channel(ch);
    free(mem);
    return NULL;
}

static void run(int lfd, uint16_t port, int kase)
{
    struct raw r = {.kase = kase, .port = port};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raw_client, &r), 0);
    int fd = raccept(lfd, NULL, NULL);
    CHECK(fd >= 0);
    CHECK(wait_flag(&r, NULL, &r.step, 1));
    CHECK(r.ok);
    /* the empty message alone has arrived: nothing to read, not the end */
    usleep(200 * 1000);
    char buf[64];
    errno = 0;
    CHECK_EQ(rrecv(fd, buf, sizeof(buf), MSG_DONTWAIT), -1);
    CHECK_EQ(errno, EAGAIN);
    set_flag(&r, &r.go_data);
    CHECK(wait_flag(&r, NULL, &r.step, 2));
    CHECK(r.ok);
    CHECK_EQ(r.srv_credits, RQ);
    memset(buf, 0, sizeof(buf));
    CHECK_EQ(rrecv(fd, buf, sizeof(buf), 0), 16);
    CHECK(memcmp(buf, "0123456789abcdef", 16) == 0);
    if (kase != LEGIT_ONLY) {
        set_flag(&r, &r.go_lie);
        CHECK(wait_flag(&r, NULL, &r.step, 3));
        CHECK(r.ok);
        /* all of it in the server's CQ before it reads again: a read in
         * between would give credits back, and a new limit with them */
        usleep(500 * 1000);
        /* what came within the rules first (case 3: the RQ bytes the
         * credits allowed, perhaps not all of them: the violation may be
         * seen first), then the failure, never stale bytes */
        size_t total = 0;
        ssize_t n;
        for (;;) {
            memset(buf, 0, sizeof(buf));
            errno = 0;
            n = rrecv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                break;
            for (ssize_t i = 0; i < n; i++)
                CHECK_EQ(buf[i], 'x');
            total += (size_t)n;
            if (total > RQ)
                break;
        }
        CHECK_EQ(n, -1);
        CHECK_EQ(errno, EPROTO);
        CHECK(kase == TOO_MANY ? total <= RQ : total == 0);
        errno = 0;
        CHECK_EQ(rsend(fd, "y", 1, 0), -1); /* the socket failed as a whole */
        CHECK_EQ(errno, EPROTO);
        CHECK(wait_flag(&r, &r.closed, NULL, 0)); /* and the peer was told */
    }
    CHECK_EQ(rclose(fd), 0);
    pthread_join(t, NULL);
    pthread_cond_destroy(&r.cv);
    pthread_mutex_destroy(&r.mu);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int lfd = rsocket(AF_INET, SOCK_STREAM, 0);
    CHECK(lfd >= 0);
    if (lfd < 0)
        return 1;
    int v = RQ;
    CHECK_EQ(rsetsockopt(lfd, SOL_RDMA, RDMA_RQSIZE, &v, sizeof(v)), 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    CHECK_EQ(rbind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    CHECK_EQ(rlisten(lfd, 4), 0);
    CHECK_EQ(rgetsockname(lfd, (struct sockaddr *)&a, &al), 0);
    uint16_t port = ntohs(a.sin_port);
    printf("legit data from a raw peer\n");
    run(lfd, port, LEGIT_ONLY);
    printf("a data message announcing more than the grant\n");
    run(lfd, port, TOO_LONG);
    printf("more data messages than the credits\n");
    run(lfd, port, TOO_MANY);
    CHECK_EQ(rclose(lfd), 0);
    TEST_MAIN_END();
}
