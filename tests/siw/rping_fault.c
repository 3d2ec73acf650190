// SPDX-License-Identifier: BSD-3-Clause
/*
 * rping_fault: an rping peer (rdmacm-utils' wire protocol) that hands out or
 * uses an invalid rkey, to provoke an RDMA Read or Write to an invalid STag
 * across the boundary between uiwarp and another iWARP stack (siw).
 *
 * rping's protocol: the client Sends {be64 addr, be32 rkey, be32 size} of
 * its source buffer; the server RDMA Reads it and Sends a 16-byte go-ahead;
 * the client Sends the same for its sink buffer; the server RDMA Writes it
 * and Sends a go-ahead.
 *
 *   -c (we are the client; the unmodified rping server accesses our memory)
 *      -m read : the first advertisement carries a bad rkey, so the peer's
 *                RDMA Read Request names an invalid STag: we must answer
 *                with Terminate RDMAP / Remote Protection / Invalid STag
 *                (RFC 5040 §7.4.1), raise IBV_EVENT_QP_ACCESS_ERR and flush.
 *      -m write: the Read succeeds, the second advertisement is bad, so the
 *                peer's RDMA Write names an invalid STag: Terminate DDP /
 *                Tagged Buffer / Invalid STag (RFC 5041 §7.2).
 *      In both cases our buffers and their guard bytes stay untouched.
 *   -s (we are the server; we access the unmodified rping client's memory)
 *      -m read : our RDMA Read uses a bad rkey: the peer's Terminate must
 *                complete the Read with IBV_WC_REM_ACCESS_ERR and raise
 *                IBV_EVENT_QP_FATAL.
 *      -m write: the Read (good rkey) succeeds and its data is rping's
 *                pattern; our RDMA Write then uses a bad rkey: the peer's
 *                Terminate raises IBV_EVENT_QP_FATAL and the next WR does
 *                not complete successfully.
 *
 * The engine logs the Terminate it receives with its raw bytes on stderr
 * ("uiwarp: qp N: Terminate received: ..."); tests/siw/interop.sh checks that
 * line too. Exit 0 when the expected outcome was observed, 1 otherwise.
 */

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct rping_info {
    uint64_t buf;
    uint32_t rkey;
    uint32_t size;
} __attribute__((packed));

#define GUARD      4096
#define GUARD_BYTE 0x5a
#define FILL_BYTE  0xa5

static int timeout_s = 30;
static const char *prog = "rping_fault";

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "%s: FAIL: ", prog);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    exit(1);
}

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "%s: ", prog);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    fflush(stdout);
    va_end(ap);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct peer {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *listen_id, *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    /* [guard | data | guard] each, registered over the data part only */
    uint8_t *area[3];
    struct ibv_mr *mr[3]; /* 0: recv/send info, 1: source, 2: sink */
    size_t size;
    bool got_async;
    enum ibv_event_type async;
};

static struct rdma_cm_event *cm_wait(struct peer *p, enum rdma_cm_event_type want)
{
    struct pollfd pfd = {.fd = p->ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;

    if (poll(&pfd, 1, timeout_s * 1000) != 1)
        fail("no rdma_cm event (waiting for %s)", rdma_event_str(want));
    if (rdma_get_cm_event(p->ch, &ev))
        fail("rdma_get_cm_event: %s", strerror(errno));
    if (ev->event != want)
        fail("rdma_cm event %s (status %d), expected %s", rdma_event_str(ev->event), ev->status,
             rdma_event_str(want));
    return ev;
}

static uint8_t *guarded(size_t size)
{
    uint8_t *a = malloc(size + 2 * GUARD);
    if (!a)
        fail("out of memory");
    memset(a, GUARD_BYTE, GUARD);
    memset(a + GUARD, FILL_BYTE, size);
    memset(a + GUARD + size, GUARD_BYTE, GUARD);
    return a + GUARD;
}

static void check_guards(struct peer *p)
{
    for (int i = 0; i < 3; i++) {
        size_t len = i ? p->size : sizeof(struct rping_info) * 2;
        const uint8_t *a = p->area[i];
        for (size_t k = 0; k < GUARD; k++)
            if (a[-1 - (long)k] != GUARD_BYTE || a[len + k] != GUARD_BYTE)
                fail("guard byte of buffer %d changed", i);
    }
}

static void setup_qp(struct peer *p, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr qa = {0};

    p->pd = ibv_alloc_pd(id->verbs);
    p->cq = p->pd ? ibv_create_cq(id->verbs, 16, NULL, NULL, 0) : NULL;
    if (!p->cq)
        fail("pd/cq: %s", strerror(errno));
    qa.send_cq = qa.recv_cq = p->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, p->pd, &qa))
        fail("rdma_create_qp: %s", strerror(errno));
    p->qp = id->qp;
    p->area[0] = guarded(sizeof(struct rping_info) * 2);
    p->area[1] = guarded(p->size);
    p->area[2] = guarded(p->size);
    p->mr[0] = ibv_reg_mr(p->pd, p->area[0], sizeof(struct rping_info) * 2, IBV_ACCESS_LOCAL_WRITE);
    for (int i = 1; i < 3; i++)
        p->mr[i] =
            ibv_reg_mr(p->pd, p->area[i], p->size,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    if (!p->mr[0] || !p->mr[1] || !p->mr[2])
        fail("ibv_reg_mr: %s", strerror(errno));
    int fl = fcntl(id->verbs->async_fd, F_GETFL);
    fcntl(id->verbs->async_fd, F_SETFL, fl | O_NONBLOCK);
}

static void post_recv(struct peer *p)
{
    struct ibv_sge sge = {(uintptr_t)p->area[0], sizeof(struct rping_info), p->mr[0]->lkey};
    struct ibv_recv_wr wr = {.wr_id = 100, .sg_list = &sge, .num_sge = 1}, *bad;

    if (ibv_post_recv(p->qp, &wr, &bad))
        fail("ibv_post_recv: %s", strerror(errno));
}

static void post_send(struct peer *p, enum ibv_wr_opcode op, uint64_t wr_id, void *buf,
                      uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
    struct ibv_sge sge = {(uintptr_t)buf, len, lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;

    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(p->qp, &wr, &bad))
        fail("ibv_post_send(%d): %s", op, strerror(errno));
}

/* Send an rping advertisement of buffer i with the given rkey. */
static void send_info(struct peer *p, int i, uint32_t rkey)
{
    struct rping_info *info = (struct rping_info *)(p->area[0] + sizeof(struct rping_info));

    info->buf = htobe64((uintptr_t)p->area[i]);
    info->rkey = htobe32(rkey);
    info->size = htobe32((uint32_t)p->size);
    post_send(p, IBV_WR_SEND, 200 + (uint64_t)i, info, sizeof(*info), p->mr[0]->lkey, 0, 0);
}

static void poll_async(struct peer *p)
{
    struct ibv_async_event ev;

    while (ibv_get_async_event(p->id->verbs, &ev) == 0) {
        note("async event: %s", ibv_event_type_str(ev.event_type));
        if (!p->got_async) {
            p->got_async = true;
            p->async = ev.event_type;
        }
        ibv_ack_async_event(&ev);
    }
}

/* Next completion (or a failure after the timeout). */
static struct ibv_wc next_wc(struct peer *p)
{
    double end = now() + timeout_s;
    struct ibv_wc wc;

    while (now() < end) {
        int n = ibv_poll_cq(p->cq, 1, &wc);
        if (n < 0)
            fail("ibv_poll_cq: %d", n);
        if (n == 1) {
            note("completion wr_id %llu opcode %d status %s byte_len %u",
                 (unsigned long long)wc.wr_id, wc.opcode, ibv_wc_status_str(wc.status),
                 wc.byte_len);
            return wc;
        }
        poll_async(p);
        usleep(1000);
    }
    fail("no completion within %d s", timeout_s);
}

/* The next completion with this wr_id, skipping successful Send ones. */
static struct ibv_wc wait_wr(struct peer *p, uint64_t wr_id)
{
    for (;;) {
        struct ibv_wc wc = next_wc(p);
        if (wc.wr_id == wr_id)
            return wc;
        if (wc.status != IBV_WC_SUCCESS)
            fail("wr %llu failed (%s) while waiting for wr %llu", (unsigned long long)wc.wr_id,
                 ibv_wc_status_str(wc.status), (unsigned long long)wr_id);
    }
}

static void wait_async(struct peer *p, enum ibv_event_type want)
{
    double end = now() + timeout_s;

    while (!p->got_async && now() < end) {
        poll_async(p);
        usleep(2000);
    }
    if (!p->got_async)
        fail("no async event within %d s (expected %s)", timeout_s, ibv_event_type_str(want));
    if (p->async != want)
        fail("async event %s, expected %s", ibv_event_type_str(p->async), ibv_event_type_str(want));
}

static struct rping_info recv_info(struct peer *p)
{
    struct ibv_wc wc = wait_wr(p, 100);
    struct rping_info info;

    if (wc.status != IBV_WC_SUCCESS || wc.byte_len != sizeof(info))
        fail("receive: %s, %u bytes", ibv_wc_status_str(wc.status), wc.byte_len);
    memcpy(&info, p->area[0], sizeof(info));
    info.buf = be64toh(info.buf);
    info.rkey = be32toh(info.rkey);
    info.size = be32toh(info.size);
    note("peer advertised addr 0x%llx rkey 0x%08x size %u", (unsigned long long)info.buf, info.rkey,
         info.size);
    return info;
}

static void resolve(const char *addr, const char *port, struct addrinfo **res, bool passive)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = passive ? AI_PASSIVE : 0};
    int rc = getaddrinfo(addr, port, &hints, res);
    if (rc)
        fail("getaddrinfo %s:%s: %s", addr, port, gai_strerror(rc));
}

static void run_client(struct peer *p, const char *addr, const char *port, bool bad_read)
{
    struct addrinfo *ai;
    struct rdma_conn_param cp = {.initiator_depth = 1, .responder_resources = 1, .retry_count = 7};

    resolve(addr, port, &ai, false);
    if (rdma_create_id(p->ch, &p->id, NULL, RDMA_PS_TCP) ||
        rdma_resolve_addr(p->id, NULL, ai->ai_addr, 2000))
        fail("resolve_addr: %s", strerror(errno));
    freeaddrinfo(ai);
    rdma_ack_cm_event(cm_wait(p, RDMA_CM_EVENT_ADDR_RESOLVED));
    if (rdma_resolve_route(p->id, 2000))
        fail("resolve_route: %s", strerror(errno));
    rdma_ack_cm_event(cm_wait(p, RDMA_CM_EVENT_ROUTE_RESOLVED));
    setup_qp(p, p->id);
    post_recv(p);
    if (rdma_connect(p->id, &cp))
        fail("rdma_connect: %s", strerror(errno));
    rdma_ack_cm_event(cm_wait(p, RDMA_CM_EVENT_ESTABLISHED));
    note("connected");

    const uint32_t bad = p->mr[1]->rkey ^ 0x5a5a5a00u;
    if (bad_read) {
        send_info(p, 1, bad);
    } else {
        memset(p->area[1], 0, p->size);
        snprintf((char *)p->area[1], p->size, "rdma-ping-0: rping_fault source buffer");
        send_info(p, 1, p->mr[1]->rkey);
        (void)recv_info(p); /* the go-ahead after the peer's Read */
        post_recv(p);
        send_info(p, 2, p->mr[2]->rkey ^ 0x5a5a5a00u);
    }
    /* We detect the peer's access to an invalid STag: RFC 5040 §7.4.1 /
     * RFC 5041 §7.2, local QP to error with an access error event. */
    wait_async(p, IBV_EVENT_QP_ACCESS_ERR);
    struct ibv_wc wc = wait_wr(p, 100);
    if (wc.status != IBV_WC_WR_FLUSH_ERR)
        fail("posted receive completed with %s, expected flush", ibv_wc_status_str(wc.status));
    for (size_t k = 0; k < p->size; k++)
        if (p->area[2][k] != FILL_BYTE)
            fail("sink buffer byte %zu was written through the invalid rkey", k);
    if (bad_read)
        for (size_t k = 0; k < p->size; k++)
            if (p->area[1][k] != FILL_BYTE)
                fail("source buffer byte %zu changed", k);
}

static void run_server(struct peer *p, const char *addr, const char *port, bool bad_read)
{
    struct addrinfo *ai;
    struct rdma_cm_event *ev;
    struct rdma_conn_param cp = {.initiator_depth = 1, .responder_resources = 1};

    resolve(addr, port, &ai, true);
    if (rdma_create_id(p->ch, &p->listen_id, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(p->listen_id, ai->ai_addr) || rdma_listen(p->listen_id, 1))
        fail("listen: %s", strerror(errno));
    freeaddrinfo(ai);
    note("listening");
    ev = cm_wait(p, RDMA_CM_EVENT_CONNECT_REQUEST);
    p->id = ev->id;
    rdma_ack_cm_event(ev);
    setup_qp(p, p->id);
    post_recv(p);
    if (rdma_accept(p->id, &cp))
        fail("rdma_accept: %s", strerror(errno));
    rdma_ack_cm_event(cm_wait(p, RDMA_CM_EVENT_ESTABLISHED));
    note("connected");

    struct rping_info info = recv_info(p);
    uint32_t len = info.size < p->size ? info.size : (uint32_t)p->size;
    struct ibv_wc wc;

    if (bad_read) {
        post_send(p, IBV_WR_RDMA_READ, 1, p->area[1], len, p->mr[1]->lkey, info.buf,
                  info.rkey ^ 0x5a5a5a00u);
        wc = wait_wr(p, 1);
        if (wc.status != IBV_WC_REM_ACCESS_ERR)
            fail("RDMA Read with a bad rkey completed with %s, expected %s",
                 ibv_wc_status_str(wc.status), ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
        wait_async(p, IBV_EVENT_QP_FATAL);
        for (size_t k = 0; k < p->size; k++)
            if (p->area[1][k] != FILL_BYTE)
                fail("read sink byte %zu changed by a failed Read", k);
    } else {
        post_recv(p);
        post_send(p, IBV_WR_RDMA_READ, 1, p->area[1], len, p->mr[1]->lkey, info.buf, info.rkey);
        wc = wait_wr(p, 1);
        if (wc.status != IBV_WC_SUCCESS)
            fail("RDMA Read with a good rkey: %s", ibv_wc_status_str(wc.status));
        if (memcmp(p->area[1], "rdma-ping-", 10) != 0)
            fail("RDMA Read data is not rping's pattern: \"%.16s\"", (char *)p->area[1]);
        note("read %u bytes: \"%.24s...\"", len, (char *)p->area[1]);
        send_info(p, 1, p->mr[1]->rkey); /* the go-ahead */
        info = recv_info(p);
        memset(p->area[2], 'W', p->size);
        post_send(p, IBV_WR_RDMA_WRITE, 2, p->area[2], len, p->mr[2]->lkey, info.buf,
                  info.rkey ^ 0x5a5a5a00u);
        wait_async(p, IBV_EVENT_QP_FATAL);
        /* the Write may have completed before the Terminate came back; a
         * WR posted now must not succeed */
        send_info(p, 1, p->mr[1]->rkey);
        for (;;) {
            wc = next_wc(p);
            if (wc.wr_id == 201)
                break;
        }
        if (wc.status == IBV_WC_SUCCESS)
            fail("a Send after the peer's Terminate succeeded");
    }
}

int main(int argc, char **argv)
{
    const char *addr = NULL, *port = "7174", *mode = "read";
    bool server = false, client = false;
    struct peer p = {.size = 1000};
    int c;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while ((c = getopt(argc, argv, "sca:p:m:S:t:")) != -1) {
        switch (c) {
        case 's':
            server = true;
            break;
        case 'c':
            client = true;
            break;
        case 'a':
            addr = optarg;
            break;
        case 'p':
            port = optarg;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'S':
            p.size = strtoul(optarg, NULL, 0);
            break;
        case 't':
            timeout_s = atoi(optarg);
            break;
        default:
            goto usage;
        }
    }
    if (server == client || !addr || (strcmp(mode, "read") && strcmp(mode, "write")) ||
        p.size < 64 || p.size > (1u << 24))
        goto usage;
    p.ch = rdma_create_event_channel();
    if (!p.ch)
        fail("rdma_create_event_channel: %s", strerror(errno));
    if (server)
        run_server(&p, addr, port, !strcmp(mode, "read"));
    else
        run_client(&p, addr, port, !strcmp(mode, "read"));
    check_guards(&p);
    note("PASS: %s %s: expected error outcome observed, guard bytes intact",
         server ? "server" : "client", mode);
    /* teardown: the QP is in error; release everything */
    rdma_disconnect(p.id);
    rdma_destroy_qp(p.id);
    for (int i = 0; i < 3; i++) {
        ibv_dereg_mr(p.mr[i]);
        free(p.area[i] - GUARD);
    }
    ibv_destroy_cq(p.cq);
    ibv_dealloc_pd(p.pd);
    rdma_destroy_id(p.id);
    if (p.listen_id)
        rdma_destroy_id(p.listen_id);
    rdma_destroy_event_channel(p.ch);
    return 0;
usage:
    fprintf(stderr, "usage: %s -s|-c -a ADDR [-p PORT] -m read|write [-S SIZE] [-t SEC]\n", prog);
    return 2;
}
