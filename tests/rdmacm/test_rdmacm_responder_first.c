/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The passive side sends first. ucmatose (its server sends first), perftest's
 * ib_write_lat -R and many request/notify ULPs do this; over Linux siw it
 * works because siw's responder sends at once when peer-to-peer mode is off.
 * RFC 5044 §7.1.2 rule 4 makes the responder wait for the initiator's first
 * FPDU, and RFC 6581's RTR, which uiwarp's initiators send by default
 * (UIWARP_P2P=1), is what lifts that wait: with the default policy the
 * server accepts and sends at once, and the client must receive within 5 s
 * without having sent anything.
 */
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/eng_test.h"
#include "testutil.h"

#define WAIT_MS 5000

/* One successful completion within WAIT_MS. */
static bool wait_cq(struct ibv_cq *cq, struct ibv_wc *wc)
{
    return eng_poll_one(cq, wc, WAIT_MS) == 1 && wc->status == IBV_WC_SUCCESS;
}

struct server {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int port; /* 0 until listening, -1 on failure */
    bool sent, got_reply;
};

static void publish(struct server *s, int port)
{
    pthread_mutex_lock(&s->lock);
    s->port = port;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

static struct ibv_qp_init_attr qp_attr(void)
{
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof(a));
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.sq_sig_all = 1;
    return a;
}

static void *server_main(void *arg)
{
    struct server *s = arg;
    struct rdma_addrinfo hints, *res = NULL;
    struct rdma_cm_id *lid = NULL, *id = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
    hints.ai_port_space = RDMA_PS_TCP;
    struct ibv_qp_init_attr a = qp_attr();
    if (rdma_getaddrinfo("127.0.0.1", "0", &hints, &res) || rdma_create_ep(&lid, res, NULL, &a) ||
        rdma_listen(lid, 0)) {
        publish(s, -1);
        return NULL;
    }
    rdma_freeaddrinfo(res);
    publish(s, ntohs(rdma_get_src_port(lid)));
    char buf[64] = "hello from the passive side";
    char rbuf[64];
    struct ibv_wc wc;
    if (rdma_get_request(lid, &id) == 0) {
        struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
        struct ibv_mr *rmr = rdma_reg_msgs(id, rbuf, sizeof(rbuf));
        if (mr && rmr && rdma_post_recv(id, NULL, rbuf, sizeof(rbuf), rmr) == 0 &&
            rdma_accept(id, NULL) == 0 && rdma_post_send(id, NULL, buf, 28, mr, 0) == 0) {
            s->sent = wait_cq(id->send_cq, &wc);
            s->got_reply = wait_cq(id->recv_cq, &wc) && strcmp(rbuf, "thanks") == 0;
        }
        if (mr)
            rdma_dereg_mr(mr);
        if (rmr)
            rdma_dereg_mr(rmr);
        rdma_destroy_ep(id);
    }
    rdma_destroy_ep(lid);
    return NULL;
}

static void run_case(const char *label)
{
    struct server s = {.port = 0};
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, server_main, &s), 0);
    pthread_mutex_lock(&s.lock);
    while (!s.port)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
    CHECK(s.port > 0);
    bool received = false;
    if (s.port > 0) {
        char service[16], buf[64] = "", reply[8] = "thanks";
        snprintf(service, sizeof(service), "%d", s.port);
        struct rdma_addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof(hints));
        hints.ai_port_space = RDMA_PS_TCP;
        struct rdma_cm_id *id = NULL;
        struct ibv_qp_init_attr a = qp_attr();
        CHECK_EQ(rdma_getaddrinfo("127.0.0.1", service, &hints, &res), 0);
        CHECK_EQ(rdma_create_ep(&id, res, NULL, &a), 0);
        rdma_freeaddrinfo(res);
        if (id) {
            struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
            struct ibv_mr *smr = rdma_reg_msgs(id, reply, sizeof(reply));
            struct ibv_wc wc;
            CHECK_EQ(rdma_post_recv(id, NULL, buf, sizeof(buf), mr), 0);
            CHECK_EQ(rdma_connect(id, NULL), 0);
            received = wait_cq(id->recv_cq, &wc);
            if (received)
                CHECK_STR(buf, "hello from the passive side");
            CHECK_EQ(rdma_post_send(id, NULL, reply, sizeof(reply), smr, 0), 0);
            (void)wait_cq(id->send_cq, &wc);
            rdma_dereg_mr(mr);
            rdma_dereg_mr(smr);
            rdma_destroy_ep(id);
        }
    }
    pthread_join(t, NULL);
    printf("%s: server's first Send %s, client %s it, server %s the reply\n", label,
           s.sent ? "completed" : "did NOT complete", received ? "received" : "did NOT receive",
           s.got_reply ? "got" : "did NOT get");
    CHECK(s.sent);
    CHECK(received);
    CHECK(s.got_reply);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    char label[64];
    const char *p2p = getenv("UIWARP_P2P");
    snprintf(label, sizeof(label), "UIWARP_P2P=%s", p2p ? p2p : "(default)");
    run_case(label);
    TEST_MAIN_END();
}
