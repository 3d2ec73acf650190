/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Two processes over loopback TCP (uiw_cm_* connection, verbs data path):
 * the parent forks a server and a client (each opens its own uiw_lo
 * device; the parent never touches the engine) joined by a control
 * socketpair for addresses, keys and "go" messages. Both directions:
 *   client -> server: Sends of several sizes, a 1 MiB Write (checked by the
 *   server after the Send that follows it), Reads of the server's memory,
 *   Fetch-and-Add (every old value checked) and Compare-and-Swap (hit and
 *   miss) on a server word, checked by the server at the end;
 *   server -> client: Write + Send, Read.
 * Then an orderly disconnect: DISCONNECTED on both sides.
 *
 * Without options it runs three times: default policy, UIWARP_CRC=required
 * (CRC negotiated, checked on the QP) and CRC + markers. Options (for the
 * capture test, tests/test_engine_capture.sh):
 *   --once           one run with the environment as given
 *   --port-file F    the server writes its listening port to F
 *   --go-file F      the client connects only once F exists (30 s at most)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "testutil.h"

#define TMO_MS   20000
#define RUN_S    60
#define BUFSZ    (4u << 20)
#define OFF_WDST 0          /* peer's Write target (1 MiB) */
#define OFF_RSRC (1u << 20) /* source of the peer's Reads (1 MiB) */
#define OFF_RDST (2u << 20) /* sink of our Reads */
#define OFF_RECV (3u << 20) /* receives: NRECV slots of RSLOT bytes */
#define RSLOT    (128u * 1024)
#define NRECV    8
#define WLEN     (1u << 20)
#define WORD0    0x00000000FFFFFF00ull
#define NFA      100

static const char *port_file, *go_file;
static const char *role = "parent";

static bool same(const uint8_t *p, size_t n, uint32_t seed)
{
    long d = eng_diff(p, n, seed);

    if (d >= 0)
        fprintf(stderr, "%s: byte %ld of %zu differs (seed %u)\n", role, d, n, seed);
    return d < 0;
}

/* ------------------------------------------------------------------------
 * Control channel (SOCK_SEQPACKET socketpair)
 * ---------------------------------------------------------------------- */
struct msg {
    uint32_t type;
    uint32_t port;
    uint64_t addr, word;
    uint32_t rkey, pad;
};
enum { M_HELLO = 1, M_STEP, M_DONE };

static int ctl_send(int fd, uint32_t type, const struct msg *m0)
{
    struct msg m;
    if (m0)
        m = *m0;
    else
        memset(&m, 0, sizeof(m));
    m.type = type;
    return send(fd, &m, sizeof(m), MSG_NOSIGNAL) == (ssize_t)sizeof(m) ? 0 : -1;
}

static int ctl_recv(int fd, uint32_t type, struct msg *m)
{
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, TMO_MS) != 1 || recv(fd, m, sizeof(*m), 0) != (ssize_t)sizeof(*m) ||
        m->type != type) {
        fprintf(stderr, "%s: control message %u did not come\n", role, type);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Endpoint
 * ---------------------------------------------------------------------- */
struct ep {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct uiw_cm_channel *ch;
    struct uiw_listener *lis;
    struct uiw_conn *conn;
    uint8_t *buf;
    uint64_t *word;
    struct ibv_mr *mr, *wmr;
};

static int ep_open(struct ep *e)
{
    struct ibv_qp_cap cap = {
        .max_send_wr = 256, .max_recv_wr = 64, .max_send_sge = 2, .max_recv_sge = 1};

    e->ctx = eng_open_lo(false);
    if (!e->ctx)
        return -1;
    e->pd = ibv_alloc_pd(e->ctx);
    e->scq = ibv_create_cq(e->ctx, 512, NULL, NULL, 0);
    e->rcq = ibv_create_cq(e->ctx, 512, NULL, NULL, 0);
    if (!e->pd || !e->scq || !e->rcq)
        return -1;
    e->qp = eng_qp_init(e->pd, e->scq, e->rcq, NULL, cap, false, ENG_ACCESS_ALL, 0);
    if (!e->qp)
        return -1;
    if (posix_memalign((void **)&e->buf, 4096, BUFSZ) || posix_memalign((void **)&e->word, 64, 64))
        return -1;
    memset(e->buf, 0, BUFSZ);
    memset(e->word, 0, 64);
    e->mr = ibv_reg_mr(e->pd, e->buf, BUFSZ, ENG_ACCESS_ALL);
    e->wmr = ibv_reg_mr(e->pd, e->word, 64, ENG_ACCESS_ALL);
    e->ch = uiw_cm_channel_create();
    if (!e->mr || !e->wmr || !e->ch)
        return -1;
    fcntl(uiw_cm_channel_fd(e->ch), F_SETFL, O_NONBLOCK);
    return 0;
}

static void ep_close(struct ep *e)
{
    if (e->conn)
        uiw_cm_conn_destroy(e->conn);
    if (e->lis)
        uiw_cm_listener_destroy(e->lis);
    if (e->qp)
        CHECK_EQ(ibv_destroy_qp(e->qp), 0);
    if (e->mr)
        CHECK_EQ(ibv_dereg_mr(e->mr), 0);
    if (e->wmr)
        CHECK_EQ(ibv_dereg_mr(e->wmr), 0);
    if (e->scq)
        CHECK_EQ(ibv_destroy_cq(e->scq), 0);
    if (e->rcq)
        CHECK_EQ(ibv_destroy_cq(e->rcq), 0);
    if (e->pd)
        CHECK_EQ(ibv_dealloc_pd(e->pd), 0);
    if (e->ch)
        uiw_cm_channel_destroy(e->ch);
    if (e->ctx)
        CHECK_EQ(ibv_close_device(e->ctx), 0);
    free(e->buf);
    free(e->word);
}

static int cm_wait(struct ep *e, enum uiw_cm_event_type type, struct uiw_cm_event *ev)
{
    uint64_t end = eng_now_ms() + TMO_MS;
    while (eng_now_ms() < end) {
        if (uiw_cm_get_event(e->ch, ev) == 0) {
            if (ev->type == type)
                return 0;
            fprintf(stderr, "%s: CM event %d (status %d) instead of %d\n", role, (int)ev->type,
                    ev->status, (int)type);
            return -1;
        }
        struct pollfd pf = {.fd = uiw_cm_channel_fd(e->ch), .events = POLLIN};
        poll(&pf, 1, 100);
    }
    fprintf(stderr, "%s: timeout waiting for CM event %d\n", role, (int)type);
    return -1;
}

static int post_send(struct ep *e, enum ibv_wr_opcode op, uint32_t loff, uint32_t len,
                     uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
    return eng_post(e->qp, op, e->buf + loff, len, e->mr->lkey, raddr, rkey, wr_id, true);
}

static int post_atomic(struct ep *e, enum ibv_wr_opcode op, uint32_t loff, uint64_t raddr,
                       uint32_t rkey, uint64_t cmp_add, uint64_t swap, uint64_t wr_id)
{
    return eng_post_atomic(e->qp, op, e->buf + loff, e->mr->lkey, raddr, rkey, cmp_add, swap,
                           wr_id);
}

static int post_recv(struct ep *e, unsigned slot)
{
    return eng_post_recv(e->qp, e->buf + OFF_RECV + slot * RSLOT, RSLOT, e->mr->lkey, slot);
}

/* One completion on cq within the timeout; checks status, opcode, wr_id. */
static bool comp(struct ibv_cq *cq, enum ibv_wc_opcode op, uint64_t wr_id, struct ibv_wc *out)
{
    struct ibv_wc wc;
    uint64_t end = eng_now_ms() + TMO_MS;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && eng_now_ms() < end)
        ;
    if (n != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != op || wc.wr_id != wr_id) {
        fprintf(stderr,
                "%s: completion: n %d status %s opcode %d (want %d) wr_id %llu (want %llu)\n", role,
                n, n == 1 ? ibv_wc_status_str(wc.status) : "-", n == 1 ? (int)wc.opcode : -1,
                (int)op, n == 1 ? (unsigned long long)wc.wr_id : 0ull, (unsigned long long)wr_id);
        return false;
    }
    if (out)
        *out = wc;
    return true;
}

static bool crc_in_use(struct ibv_qp *qp)
{
    bool crc;
    pthread_mutex_lock(&to_uqp(qp)->lock);
    crc = to_uqp(qp)->mpa.crc;
    pthread_mutex_unlock(&to_uqp(qp)->lock);
    return crc;
}

static void check_policy(struct ep *e)
{
    const char *c = getenv("UIWARP_CRC");
    if (c && strcmp(c, "required") == 0)
        CHECK(crc_in_use(e->qp));
    else if (!c || strcmp(c, "optional") == 0 || strcmp(c, "off") == 0)
        CHECK(!crc_in_use(e->qp)); /* both optional: nobody asks for it */
}

static const uint32_t send_sizes[] = {1, 100, 4096, 65536, RSLOT};
#define NSEND (sizeof(send_sizes) / sizeof(send_sizes[0]))

/* ------------------------------------------------------------------------
 * Server
 * ---------------------------------------------------------------------- */
/* Open the endpoint, the source of the peer's Reads filled with the
 * pattern rsrc_seed; false if it failed. */
static bool ep_start(struct ep *e, uint32_t rsrc_seed)
{
    memset(e, 0, sizeof(*e));
    CHECK_EQ(ep_open(e), 0);
    if (!e->mr)
        return false;
    eng_fill(e->buf + OFF_RSRC, 1u << 20, rsrc_seed);
    return true;
}

static void server(int ctl)
{
    struct ep e;
    struct uiw_cm_event ev;
    struct msg m, peer;
    struct ibv_wc wc;

    if (!ep_start(&e, 2))
        return;
    *e.word = WORD0;
    for (unsigned i = 0; i < NRECV; i++)
        CHECK_EQ(post_recv(&e, i), 0);
    struct sockaddr_in a;
    struct sockaddr_storage ss;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK_EQ(uiw_cm_listen(e.ctx, (struct sockaddr *)&a, 4, e.ch, NULL, &e.lis), 0);
    CHECK_EQ(uiw_cm_listener_addr(e.lis, &ss), 0);
    memset(&m, 0, sizeof(m));
    m.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    m.addr = (uintptr_t)e.buf;
    m.rkey = e.mr->rkey;
    m.word = (uintptr_t)e.word;
    m.pad = e.wmr->rkey;
    if (port_file) {
        FILE *f = fopen(port_file, "w");
        CHECK(f != NULL);
        if (f) {
            fprintf(f, "%u\n", m.port);
            fclose(f);
        }
    }
    CHECK_EQ(ctl_send(ctl, M_HELLO, &m), 0);
    CHECK_EQ(ctl_recv(ctl, M_HELLO, &peer), 0);

    CHECK_EQ(cm_wait(&e, UIW_CM_CONNECT_REQUEST, &ev), 0);
    if (ev.type != UIW_CM_CONNECT_REQUEST)
        goto out;
    e.conn = ev.conn;
    struct uiw_conn_param cp = {.ird = 16, .ord = 16};
    CHECK_EQ(uiw_cm_accept(e.conn, e.qp, &cp, NULL), 0);
    CHECK_EQ(cm_wait(&e, UIW_CM_ESTABLISHED, &ev), 0);
    check_policy(&e);

    /* 1. Sends of each size */
    for (unsigned i = 0; i < NSEND; i++) {
        CHECK(comp(e.rcq, IBV_WC_RECV, i, &wc));
        CHECK_EQ(wc.byte_len, send_sizes[i]);
        CHECK(same(e.buf + OFF_RECV + i * RSLOT, send_sizes[i], 10 + i));
        CHECK_EQ(post_recv(&e, i), 0);
    }
    /* 2. a 1 MiB Write, then a Send: the Write is placed */
    CHECK(comp(e.rcq, IBV_WC_RECV, NSEND, &wc));
    CHECK_EQ(wc.byte_len, 8);
    CHECK(same(e.buf + OFF_WDST, WLEN, 3));
    CHECK_EQ(post_recv(&e, NSEND), 0);
    /* 3./4. the client's Reads and atomics need nothing from us */
    CHECK_EQ(ctl_recv(ctl, M_STEP, &m), 0);
    CHECK_EQ(__atomic_load_n(e.word, __ATOMIC_SEQ_CST), WORD0 + 5ull * NFA + 1);
    CHECK(same(e.buf + OFF_RSRC, 1u << 20, 2)); /* Reads changed nothing */

    /* 5. our turn: Write into the client, then Send; Read from the client */
    eng_fill(e.buf, WLEN, 4);
    CHECK_EQ(post_send(&e, IBV_WR_RDMA_WRITE, 0, WLEN, peer.addr + OFF_WDST, peer.rkey, 1), 0);
    CHECK_EQ(post_send(&e, IBV_WR_SEND, OFF_RSRC, 4096, 0, 0, 2), 0);
    CHECK_EQ(
        post_send(&e, IBV_WR_RDMA_READ, OFF_RDST, 300000, peer.addr + OFF_RSRC + 1, peer.rkey, 3),
        0);
    CHECK(comp(e.scq, IBV_WC_RDMA_WRITE, 1, NULL));
    CHECK(comp(e.scq, IBV_WC_SEND, 2, NULL));
    CHECK(comp(e.scq, IBV_WC_RDMA_READ, 3, &wc));
    CHECK_EQ(wc.byte_len, 300000);
    {
        /* the client's OFF_RSRC holds pattern 5; we read from offset 1 */
        uint8_t *x = malloc(300001);
        eng_fill(x, 300001, 5);
        CHECK_MEM(e.buf + OFF_RDST, x + 1, 300000);
        free(x);
    }
    CHECK_EQ(ctl_send(ctl, M_STEP, NULL), 0);

    /* 6. the client disconnects */
    CHECK_EQ(cm_wait(&e, UIW_CM_DISCONNECTED, &ev), 0);
    CHECK_EQ(ev.status, 0);
    CHECK_EQ(ctl_recv(ctl, M_DONE, &m), 0);
out:
    ep_close(&e);
}

/* ------------------------------------------------------------------------
 * Client
 * ---------------------------------------------------------------------- */
static void client(int ctl)
{
    struct ep e;
    struct uiw_cm_event ev;
    struct msg m, srv;
    struct ibv_wc wc;

    if (!ep_start(&e, 5))
        return;
    CHECK_EQ(post_recv(&e, 0), 0);
    CHECK_EQ(ctl_recv(ctl, M_HELLO, &srv), 0);
    memset(&m, 0, sizeof(m));
    m.addr = (uintptr_t)e.buf;
    m.rkey = e.mr->rkey;
    CHECK_EQ(ctl_send(ctl, M_HELLO, &m), 0);
    if (go_file) {
        uint64_t end = eng_now_ms() + 30000;
        struct stat st;
        while (stat(go_file, &st) != 0 && eng_now_ms() < end)
            usleep(10000);
        CHECK_EQ(stat(go_file, &st), 0);
    }

    struct sockaddr_in dst;
    memset(&dst, 0, sizeof(dst));
    dst.sin_family = AF_INET;
    dst.sin_port = htons((uint16_t)srv.port);
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct uiw_conn_param cp = {.ird = 16, .ord = 16};
    CHECK_EQ(uiw_cm_connect(e.qp, NULL, (struct sockaddr *)&dst, &cp, e.ch, NULL, &e.conn), 0);
    CHECK_EQ(cm_wait(&e, UIW_CM_ESTABLISHED, &ev), 0);
    if (ev.type != UIW_CM_ESTABLISHED)
        goto out;
    check_policy(&e);

    /* 1. Sends */
    uint32_t off = 0;
    for (unsigned i = 0; i < NSEND; i++) {
        eng_fill(e.buf + OFF_RDST + off, send_sizes[i], 10 + i);
        CHECK_EQ(post_send(&e, IBV_WR_SEND, OFF_RDST + off, send_sizes[i], 0, 0, 100 + i), 0);
        off += send_sizes[i];
    }
    for (unsigned i = 0; i < NSEND; i++)
        CHECK(comp(e.scq, IBV_WC_SEND, 100 + i, NULL));

    /* 2. Write 1 MiB, then Send 8 bytes */
    eng_fill(e.buf + OFF_WDST, WLEN, 3);
    CHECK_EQ(post_send(&e, IBV_WR_RDMA_WRITE, OFF_WDST, WLEN, srv.addr + OFF_WDST, srv.rkey, 200),
             0);
    CHECK_EQ(post_send(&e, IBV_WR_SEND, OFF_WDST, 8, 0, 0, 201), 0);
    CHECK(comp(e.scq, IBV_WC_RDMA_WRITE, 200, NULL));
    CHECK(comp(e.scq, IBV_WC_SEND, 201, NULL));
    memset(e.buf + OFF_WDST, 0, WLEN); /* the server's Write lands here later */

    /* 3. Reads: all of the server's source, and an odd piece of it */
    memset(e.buf + OFF_RDST, 0, 1u << 20);
    CHECK_EQ(
        post_send(&e, IBV_WR_RDMA_READ, OFF_RDST, 1u << 20, srv.addr + OFF_RSRC, srv.rkey, 300), 0);
    CHECK(comp(e.scq, IBV_WC_RDMA_READ, 300, &wc));
    CHECK_EQ(wc.byte_len, 1u << 20);
    CHECK(same(e.buf + OFF_RDST, 1u << 20, 2));
    memset(e.buf + OFF_RDST, 0, 1u << 20);
    CHECK_EQ(post_send(&e, IBV_WR_RDMA_READ, OFF_RDST + 3, 777, srv.addr + OFF_RSRC + 5000,
                       srv.rkey, 301),
             0);
    CHECK(comp(e.scq, IBV_WC_RDMA_READ, 301, NULL));
    {
        uint8_t *x = malloc(1u << 20);
        eng_fill(x, 1u << 20, 2);
        CHECK_MEM(e.buf + OFF_RDST + 3, x + 5000, 777);
        CHECK(e.buf[OFF_RDST + 2] == 0 && e.buf[OFF_RDST + 3 + 777] == 0);
        free(x);
    }

    /* 4. atomics on the server's word: NFA x FetchAdd 5 (pipelined), then
     * a Compare-and-Swap that misses and one that hits */
    uint64_t *res = (uint64_t *)(e.buf + OFF_RDST);
    for (unsigned i = 0; i < NFA; i++)
        CHECK_EQ(post_atomic(&e, IBV_WR_ATOMIC_FETCH_AND_ADD, OFF_RDST + 8 * i, srv.word, srv.pad,
                             5, 0, 400 + i),
                 0);
    for (unsigned i = 0; i < NFA; i++)
        CHECK(comp(e.scq, IBV_WC_FETCH_ADD, 400 + i, &wc));
    unsigned bad = 0;
    for (unsigned i = 0; i < NFA; i++)
        bad += res[i] != WORD0 + 5ull * i;
    CHECK_EQ(bad, 0);
    uint64_t cur = WORD0 + 5ull * NFA;
    CHECK_EQ(
        post_atomic(&e, IBV_WR_ATOMIC_CMP_AND_SWP, OFF_RDST, srv.word, srv.pad, cur + 1, 0, 500),
        0);
    CHECK(comp(e.scq, IBV_WC_COMP_SWAP, 500, NULL));
    CHECK_EQ(res[0], cur); /* miss: the word is returned, unchanged */
    CHECK_EQ(
        post_atomic(&e, IBV_WR_ATOMIC_CMP_AND_SWP, OFF_RDST, srv.word, srv.pad, cur, cur + 1, 501),
        0);
    CHECK(comp(e.scq, IBV_WC_COMP_SWAP, 501, NULL));
    CHECK_EQ(res[0], cur); /* hit */
    CHECK_EQ(ctl_send(ctl, M_STEP, NULL), 0);

    /* 5. the server's Write + Send, and its Read of our source */
    CHECK(comp(e.rcq, IBV_WC_RECV, 0, &wc));
    CHECK_EQ(wc.byte_len, 4096);
    CHECK(same(e.buf + OFF_RECV, 4096, 2));
    CHECK(same(e.buf + OFF_WDST, WLEN, 4));
    CHECK_EQ(ctl_recv(ctl, M_STEP, &m), 0);

    /* 6. orderly disconnect */
    CHECK_EQ(uiw_cm_disconnect(e.conn), 0);
    CHECK_EQ(cm_wait(&e, UIW_CM_DISCONNECTED, &ev), 0);
    CHECK_EQ(ev.status, 0);
    CHECK_EQ(ctl_send(ctl, M_DONE, NULL), 0);
out:
    ep_close(&e);
}

/* ------------------------------------------------------------------------
 * Parent
 * ---------------------------------------------------------------------- */
struct counts {
    unsigned long checks, failed;
};

static pid_t spawn(void (*fn)(int), int ctl, int other_ctl, int res_fd, const char *name,
                   const char *crc, const char *markers)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    role = name;
    tu_checks = tu_failed = 0; /* the parent's counts are not ours */
    close(other_ctl);
    if (crc)
        setenv("UIWARP_CRC", crc, 1);
    if (markers)
        setenv("UIWARP_MARKERS", markers, 1);
    fn(ctl);
    struct counts c = {tu_checks, tu_failed};
    if (write(res_fd, &c, sizeof(c)) != (ssize_t)sizeof(c))
        _exit(3);
    printf("%s: %lu checks, %lu failed\n", name, tu_checks, tu_failed);
    fflush(stdout);
    _exit(tu_failed ? 1 : 0);
}

/* One server/client run. Returns true if both finished in time. */
static bool run(const char *crc, const char *markers)
{
    int sv[2], res[2];
    uint64_t t0 = eng_now_ms();

    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0 || pipe(res) < 0) {
        CHECK(0);
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t ps = spawn(server, sv[0], sv[1], res[1], "server", crc, markers);
    pid_t pc = spawn(client, sv[1], sv[0], res[1], "client", crc, markers);
    close(sv[0]);
    close(sv[1]);
    close(res[1]);
    CHECK(ps > 0 && pc > 0);

    int left = (ps > 0) + (pc > 0), st;
    bool ok = true;
    uint64_t end = eng_now_ms() + RUN_S * 1000ull;
    while (left > 0) {
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            left--;
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
            if (!WIFEXITED(st))
                fprintf(stderr, "%s died (signal %d)\n", w == ps ? "server" : "client",
                        WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        } else if (eng_now_ms() > end) {
            fprintf(stderr, "run did not finish within %d s: killing it\n", RUN_S);
            kill(ps, SIGKILL);
            kill(pc, SIGKILL);
            ok = false;
            CHECK(0);
            while (left > 0 && waitpid(-1, &st, 0) > 0)
                left--;
        } else {
            usleep(5000);
        }
    }
    struct counts c;
    unsigned got = 0;
    while (read(res[0], &c, sizeof(c)) == (ssize_t)sizeof(c)) {
        tu_checks += c.checks;
        tu_failed += c.failed;
        got++;
    }
    close(res[0]);
    CHECK_EQ(got, 2);
    printf("run (UIWARP_CRC=%s UIWARP_MARKERS=%s): %llu ms\n", crc ? crc : getenv("UIWARP_CRC") ?: "-",
           markers ? markers : getenv("UIWARP_MARKERS") ?: "-",
           (unsigned long long)(eng_now_ms() - t0));
    return ok;
}

int main(int argc, char **argv)
{
    bool once = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--once") == 0)
            once = true;
        else if (strcmp(argv[i], "--port-file") == 0 && i + 1 < argc)
            port_file = argv[++i];
        else if (strcmp(argv[i], "--go-file") == 0 && i + 1 < argc)
            go_file = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--once] [--port-file FILE] [--go-file FILE]\n", argv[0]);
            return 2;
        }
    }
    if (once) {
        run(NULL, NULL);
    } else {
        run("optional", "0");
        run("required", "0");
        run("required", "1");
    }
    TEST_MAIN_END();
}
