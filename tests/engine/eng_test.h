/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine test fixture, shared by every engine test (directly, or
 * through dp_test.h for the data path tests), tests/rdmacm/test_rdmacm*.c
 * and tests/faults/faults.h (as "engine/eng_test.h"; no engine internals
 * here): clocks, the uiw_lo device, RC QPs created (RESET) or moved to
 * INIT, QP state queries, async event draining, one-SGE post helpers,
 * completion polling with a timeout, byte patterns, a case in a child
 * process, and the socket helpers of the tests that play a raw TCP peer.
 * The uiw_cm helpers are in cm_test.h.
 */
#ifndef UIWARP_ENG_TEST_H
#define UIWARP_ENG_TEST_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

#define ENG_ACCESS_ALL                                                                             \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

static inline uint64_t eng_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static inline void eng_msleep(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The uiw_lo device opened; with any_fallback the first device when there
 * is no uiw_lo. NULL if none. */
static inline struct ibv_context *eng_open_lo(bool any_fallback)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *c = NULL;

    for (int i = 0; list && i < n && !c; i++)
        if (strcmp(ibv_get_device_name(list[i]), "uiw_lo") == 0)
            c = ibv_open_device(list[i]);
    if (!c && any_fallback && list && n > 0)
        c = ibv_open_device(list[0]);
    if (list)
        ibv_free_device_list(list);
    return c;
}

/* An RC QP on scq/rcq (and srq, may be NULL) with the capabilities cap, in
 * RESET; NULL with errno set if ibv_create_qp failed. */
static inline struct ibv_qp *eng_qp_create(struct ibv_pd *pd, struct ibv_cq *scq,
                                           struct ibv_cq *rcq, struct ibv_srq *srq,
                                           struct ibv_qp_cap cap, bool sig_all)
{
    struct ibv_qp_init_attr ia;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.srq = srq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = sig_all;
    ia.cap = cap;
    return ibv_create_qp(pd, &ia);
}

/* Move a QP to INIT (port 1, the given access flags; extra_mask is added
 * to the modify mask): ibv_modify_qp's result. */
static inline int eng_qp_to_init(struct ibv_qp *qp, int access, int extra_mask)
{
    struct ibv_qp_attr a;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | extra_mask);
}

/* eng_qp_create moved to INIT with eng_qp_to_init. NULL if a step failed
 * (a created QP is destroyed). */
static inline struct ibv_qp *eng_qp_init(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                                         struct ibv_srq *srq, struct ibv_qp_cap cap, bool sig_all,
                                         int access, int extra_mask)
{
    struct ibv_qp *qp = eng_qp_create(pd, scq, rcq, srq, cap, sig_all);

    if (!qp)
        return NULL;
    if (eng_qp_to_init(qp, access, extra_mask)) {
        ibv_destroy_qp(qp);
        return NULL;
    }
    return qp;
}

/* Fetch and ack every queued async event of ctx (any object), the
 * descriptor made non-blocking meanwhile: how many, the last in *last
 * (may be NULL). */
static inline int eng_async_drain(struct ibv_context *ctx, struct ibv_async_event *last)
{
    struct ibv_async_event ev;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    int n = 0;

    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    while (ibv_get_async_event(ctx, &ev) == 0) {
        if (last)
            *last = ev;
        ibv_ack_async_event(&ev);
        n++;
    }
    fcntl(ctx->async_fd, F_SETFL, fl);
    return n;
}

/* Wait up to ms for an async event about qp (not a CQ, SRQ or last-WQE
 * event) on ctx, the descriptor made non-blocking meanwhile; returns its
 * type or -1. Other events are dropped. */
static inline int eng_async_wait(struct ibv_context *ctx, struct ibv_qp *qp, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    int got = -1;

    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    while (got < 0 && eng_now_ms() < end) {
        struct ibv_async_event ev;
        if (ibv_get_async_event(ctx, &ev) == 0) {
            bool mine = ev.element.qp == qp && ev.event_type != IBV_EVENT_CQ_ERR &&
                        ev.event_type != IBV_EVENT_SRQ_ERR &&
                        ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED &&
                        ev.event_type != IBV_EVENT_QP_LAST_WQE_REACHED;
            if (mine)
                got = (int)ev.event_type;
            ibv_ack_async_event(&ev);
        } else {
            struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
            poll(&p, 1, 10);
        }
    }
    fcntl(ctx->async_fd, F_SETFL, fl);
    return got;
}

/* A PD, a 64-entry CQ and an RC QP on it (16 WRs, 1 SGE each way, moved to
 * INIT with the given access flags): what the CM tests connect. */
struct eng_tqp {
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
};

/* false if a step failed (what was made stays in t for eng_tqp_free). */
static inline bool eng_tqp_make(struct ibv_context *ctx, struct eng_tqp *t, int access)
{
    memset(t, 0, sizeof(*t));
    t->pd = ibv_alloc_pd(ctx);
    t->cq = t->pd ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : NULL;
    if (!t->cq)
        return false;
    struct ibv_qp_cap cap = {
        .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1};
    t->qp = eng_qp_init(t->pd, t->cq, t->cq, NULL, cap, false, access, IBV_QP_PKEY_INDEX);
    return t->qp != NULL;
}

static inline void eng_tqp_free(struct eng_tqp *t)
{
    if (t->qp)
        ibv_destroy_qp(t->qp);
    if (t->cq)
        ibv_destroy_cq(t->cq);
    if (t->pd)
        ibv_dealloc_pd(t->pd);
    memset(t, 0, sizeof(*t));
}

/* Post one work request with one SGE {laddr, len, lkey}: a Send or RDMA
 * operation (raddr/rkey for Write and Read), signaled or not. */
static inline int eng_post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *laddr, uint32_t len,
                           uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t wr_id,
                           bool signaled)
{
    struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = len, .lkey = lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &wr, &bad);
}

/* Post a signaled atomic (8 bytes at laddr receive the original value). */
static inline int eng_post_atomic(struct ibv_qp *qp, enum ibv_wr_opcode op, void *laddr,
                                  uint32_t lkey, uint64_t raddr, uint32_t rkey, uint64_t cmp_add,
                                  uint64_t swap, uint64_t wr_id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)laddr, .length = 8, .lkey = lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.atomic.remote_addr = raddr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = cmp_add;
    wr.wr.atomic.swap = swap;
    return ibv_post_send(qp, &wr, &bad);
}

/* Post one receive of one SGE, to qp's receive queue or, with qp NULL, to
 * srq. */
static inline int eng_post_recv_to(struct ibv_qp *qp, struct ibv_srq *srq, void *addr, uint32_t len,
                                   uint32_t lkey, uint64_t wr_id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    return qp ? ibv_post_recv(qp, &wr, &bad) : ibv_post_srq_recv(srq, &wr, &bad);
}

static inline int eng_post_recv(struct ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey,
                                uint64_t wr_id)
{
    return eng_post_recv_to(qp, NULL, addr, len, lkey, wr_id);
}

static inline int eng_post_srq_recv(struct ibv_srq *srq, void *addr, uint32_t len, uint32_t lkey,
                                    uint64_t wr_id)
{
    return eng_post_recv_to(NULL, srq, addr, len, lkey, wr_id);
}

/* The QP's state as ibv_query_qp reports it, or -1. */
static inline enum ibv_qp_state eng_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
        return (enum ibv_qp_state) - 1;
    return a.qp_state;
}

/* One completion within ms (polled every millisecond): ibv_poll_cq's
 * result, 0 at the deadline. */
static inline int eng_poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n != 0 || eng_now_ms() > end)
            return n;
        usleep(1000);
    }
}

/* Send all n bytes on a socket (no SIGPIPE): 0, or -1. */
static inline int eng_send_all(int fd, const void *buf, size_t n)
{
    size_t off = 0;
    while (off < n) {
        ssize_t w = send(fd, (const char *)buf + off, n - off, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}

/* 127.0.0.1:port */
static inline struct sockaddr_in eng_loop4(uint16_t port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

/* Close a socket with an RST (SO_LINGER 0). */
static inline void eng_rst_close(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* Run this executable again as `prog --case name` with environment envp,
 * its descriptor 3 a pipe on which the case writes "CHECKS FAILED" (within
 * 120 s), and add those counts to this process's; a case that crashed or
 * gave no result counts as one failed check. */
static inline void eng_run_case(const char *prog, const char *name, char **envp)
{
    int pfd[2];
    if (pipe(pfd) < 0) {
        CHECK(!"pipe");
        return;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (pfd[0] != 3)
        posix_spawn_file_actions_addclose(&fa, pfd[0]);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 3);
    char *argv[] = {(char *)prog, (char *)"--case", (char *)name, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc) {
        close(pfd[0]);
        CHECK(!"posix_spawn");
        return;
    }
    char buf[128] = {0};
    size_t n = 0;
    uint64_t end = eng_now_ms() + 120000;
    while (n < sizeof(buf) - 1) {
        int64_t left = (int64_t)(end - eng_now_ms());
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t r = read(pfd[0], buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = 0;
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    unsigned long ch = 0, fa_ = 0;
    if (sscanf(buf, "%lu %lu", &ch, &fa_) != 2 || !WIFEXITED(st)) {
        fprintf(stderr, "case %s: crashed or no result (status 0x%x)\n", name, st);
        tu_checks++;
        tu_failed++;
        return;
    }
    printf("%s: case %s: %lu checks, %lu failed\n", prog, name, ch, fa_);
    tu_checks += ch;
    tu_failed += fa_;
}

/* Run a case in a fresh process (the configuration is read once per
 * process): this environment without the variables starting with `drop`,
 * plus `var` ("NAME=value"). */
static inline void eng_run_case_env(const char *prog, const char *name, const char *drop,
                                    const char *var)
{
    extern char **environ;
    char *envp[256];
    int k = 0;

    for (char **e = environ; *e && k < 250; e++)
        if (strncmp(*e, drop, strlen(drop)) != 0)
            envp[k++] = *e;
    envp[k++] = (char *)var;
    envp[k] = NULL;
    eng_run_case(prog, name, envp);
}

/* Byte i of the test pattern `seed`. */
static inline uint8_t eng_pat(uint32_t seed, uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(seed + 1) * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return (uint8_t)(x >> 32);
}

static inline void eng_fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = eng_pat(seed, i);
}

/* -1 when p holds the pattern, else the first differing offset. */
static inline long eng_diff(const uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != eng_pat(seed, i))
            return (long)i;
    return -1;
}

#endif
