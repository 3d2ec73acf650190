/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Soak benchmark (issue 12): mixed traffic on many QPs between two
 * processes over loopback through uiwarp (its librdmacm.so.1 and
 * libibverbs.so.1), with random faults, sampling errors, fds and RSS of
 * both processes into a CSV file. bench/soak.sh runs it and plots the CSV.
 *
 * The driver (this program without --server) starts the server (this
 * program with --server, exec'd, so a fresh process) and opens --qps
 * connections to it. Each connection runs, one operation at a time and
 * every result checked:
 *   RDMA Write of 4 KiB of a pattern into the server's region, RDMA Read of
 *   it back (compared), Fetch-and-Add and Compare-and-Swap on a server word
 *   (old values compared with the driver's count), a Send of 16..2048 bytes
 *   that the server checks and echoes (compared).
 * Faults, one every --fault-min..--fault-max seconds (default 2..6):
 *   kill     the server gets SIGKILL and is started again (every connection
 *            fails and reconnects)
 *   peer     the server destroys one connection's QP and id at once, with
 *            no disconnect, while the driver waits for its echo
 *   destroy  the driver destroys one connection's QP and id while an
 *            operation is in flight
 *   disconnect  the driver calls rdma_disconnect with an operation in flight
 * A connection that fails is torn down completely and reconnected 0.2 s
 * later. Completion errors after faults are expected and counted; a wrong
 * byte or value (verify_errors) or an operation stuck for 30 s (stalls) is
 * a failure.
 *
 * CSV columns: t_s, connected, ops, ops_per_s, wc_errors (completions in
 * error), lost (established connections ended by a CM event),
 * verify_errors, stalls, faults, kills, reconnects, client_fds,
 * client_rss_kb, server_fds, server_rss_kb.
 *
 * usage: bench_soak [--seconds S] [--qps N] [--csv FILE] [--sample S]
 *                   [--fault-min S] [--fault-max S] [--seed N]
 *        bench_soak --server           (started by the driver)
 * Exit status: 0 when verify_errors and stalls are 0.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define REGION     (64 * 1024) /* the server's region per connection */
#define ATOMIC_OFF (REGION - 8)
#define XFER       4096
#define NSLOTS     15 /* Write/Read offsets: 15 * 4 KiB below the atomic word */
#define MSG_MAX    2048
#define RQ_DEPTH   8
#define MAGIC_REQ  0x534f414bu
#define MAGIC_ECHO 0x4543484fu
#define FLAG_DIE   1u
#define STALL_S    30.0

struct msg_hdr {
    uint32_t magic, seq, len, flags;
};

struct priv {
    uint64_t addr;
    uint32_t rkey, len;
};

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static double rnd_unit(void)
{
    return (double)(rnd() >> 11) / 9007199254740992.0;
}

/* The bytes of (a, b): both sides compute them independently. */
static void pattern(uint8_t *p, size_t n, uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ b * 0xC2B2AE3D27D4EB4Full ^ 0x1234567u;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static void nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* An event copied out and acknowledged at once (an id may be destroyed
 * only when its events are acknowledged). */
struct ev {
    enum rdma_cm_event_type type;
    struct rdma_cm_id *id, *listen_id;
    int status;
    uint8_t priv[64];
    uint8_t priv_len;
};

static int next_event(struct rdma_event_channel *ch, struct ev *out)
{
    struct rdma_cm_event *e;

    if (rdma_get_cm_event(ch, &e))
        return -1;
    out->type = e->event;
    out->id = e->id;
    out->listen_id = e->listen_id;
    out->status = e->status;
    out->priv_len = 0;
    if (e->param.conn.private_data && e->param.conn.private_data_len) {
        size_t n = e->param.conn.private_data_len;
        if (n > sizeof(out->priv))
            n = sizeof(out->priv);
        memcpy(out->priv, e->param.conn.private_data, n);
        out->priv_len = (uint8_t)n;
    }
    rdma_ack_cm_event(e);
    return 0;
}

/* ========================================================================
 * Server
 * ====================================================================== */

struct sconn {
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *mem; /* region | RQ_DEPTH receive buffers | send buffer */
    struct sconn *next;
};

static struct sconn *sconns;

static uint8_t *s_recvbuf(struct sconn *c, unsigned i)
{
    return c->mem + REGION + (size_t)i * MSG_MAX;
}

static uint8_t *s_sendbuf(struct sconn *c)
{
    return c->mem + REGION + (size_t)RQ_DEPTH * MSG_MAX;
}

static int s_post_recv(struct sconn *c, unsigned i)
{
    struct ibv_sge sge = {(uintptr_t)s_recvbuf(c, i), MSG_MAX, c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;

    return ibv_post_recv(c->id->qp, &wr, &bad);
}

static void s_destroy(struct sconn *c)
{
    for (struct sconn **pp = &sconns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->id)
        rdma_destroy_id(c->id);
    if (c->mr)
        ibv_dereg_mr(c->mr);
    if (c->cq)
        ibv_destroy_cq(c->cq);
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    free(c->mem);
    free(c);
}

static struct sconn *s_find(struct rdma_cm_id *id)
{
    for (struct sconn *c = sconns; c; c = c->next)
        if (c->id == id)
            return c;
    return NULL;
}

static void s_accept(struct rdma_cm_id *id)
{
    struct sconn *c = calloc(1, sizeof(*c));
    size_t memlen = REGION + (size_t)(RQ_DEPTH + 1) * MSG_MAX;
    struct ibv_qp_init_attr qa;
    struct rdma_conn_param cp;
    struct priv pv;

    if (!c) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    c->id = id;
    c->next = sconns;
    sconns = c;
    c->mem = aligned_alloc(4096, memlen);
    c->pd = ibv_alloc_pd(id->verbs);
    c->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
    if (!c->mem || !c->pd || !c->cq)
        goto fail;
    memset(c->mem, 0, memlen);
    c->mr = ibv_reg_mr(c->pd, c->mem, memlen,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC);
    if (!c->mr)
        goto fail;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 16;
    qa.cap.max_recv_wr = RQ_DEPTH;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, c->pd, &qa))
        goto fail;
    for (unsigned i = 0; i < RQ_DEPTH; i++)
        if (s_post_recv(c, i))
            goto fail;
    pv.addr = (uintptr_t)c->mem;
    pv.rkey = c->mr->rkey;
    pv.len = REGION;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &pv;
    cp.private_data_len = sizeof(pv);
    cp.responder_resources = cp.initiator_depth = 8;
    if (rdma_accept(id, &cp))
        goto fail;
    return;
fail:
    rdma_reject(id, NULL, 0);
    s_destroy(c);
}

static void s_poll(struct sconn *c)
{
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(c->cq, 8, wc);

    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            s_destroy(c); /* the connection failed: release everything */
            return;
        }
        if (wc[i].opcode != IBV_WC_RECV)
            continue;
        uint8_t *m = s_recvbuf(c, (unsigned)wc[i].wr_id);
        struct msg_hdr h;
        memcpy(&h, m, sizeof(h));
        if (h.flags & FLAG_DIE) {
            s_destroy(c); /* no disconnect: the QP and id go at once */
            return;
        }
        uint8_t want[MSG_MAX];
        bool ok = h.magic == MAGIC_REQ && h.len >= sizeof(h) && h.len <= MSG_MAX &&
                  wc[i].byte_len == h.len;
        if (ok) {
            pattern(want, h.len - sizeof(h), h.seq, h.len);
            ok = memcmp(want, m + sizeof(h), h.len - sizeof(h)) == 0;
        }
        uint8_t *o = s_sendbuf(c);
        memcpy(o, m, ok ? h.len : sizeof(h));
        h.magic = ok ? MAGIC_ECHO : 0; /* 0: the server saw wrong bytes */
        memcpy(o, &h, sizeof(h));
        struct ibv_sge sge = {(uintptr_t)o, ok ? h.len : (uint32_t)sizeof(h), c->mr->lkey};
        struct ibv_send_wr wr = {.opcode = IBV_WR_SEND,
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .send_flags = IBV_SEND_SIGNALED},
                           *bad;
        if (s_post_recv(c, (unsigned)wc[i].wr_id) || ibv_post_send(c->id->qp, &wr, &bad)) {
            s_destroy(c);
            return;
        }
    }
}

static int run_server(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *lid;
    struct sockaddr_in a = {.sin_family = AF_INET};

    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(lid, (struct sockaddr *)&a) || rdma_listen(lid, 256)) {
        perror("bench_soak server: listen");
        return 1;
    }
    printf("PORT %u\n", ntohs(rdma_get_src_port(lid)));
    fflush(stdout);
    nonblock(ch->fd);
    while (!stop_flag) {
        struct ev e;
        bool busy = false;

        while (next_event(ch, &e) == 0) {
            busy = true;
            if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
                s_accept(e.id);
            } else if (e.type != RDMA_CM_EVENT_ESTABLISHED) {
                struct sconn *c = s_find(e.id);
                if (c)
                    s_destroy(c); /* DISCONNECTED, errors: release everything */
            }
        }
        for (struct sconn *c = sconns, *next; c; c = next) {
            next = c->next;
            s_poll(c);
        }
        if (!busy)
            nap_us(100);
    }
    while (sconns)
        s_destroy(sconns);
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(ch);
    return 0;
}

/* ========================================================================
 * Driver
 * ====================================================================== */

enum cstate { C_DOWN, C_CONNECTING, C_UP };
enum step { S_WRITE, S_READ, S_FADD, S_CSWAP, S_SEND, S_NSTEPS };

struct cconn {
    int idx;
    enum cstate state;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *mem; /* write src | read dst | atomic result | send msg | recv msg */
    uint64_t raddr;
    uint32_t rkey;
    enum step step;
    bool busy, die_next;
    int waiting; /* completions the current step still needs */
    uint32_t seq, slot, msg_len;
    uint64_t ctr;
    double op_start, retry_at;
};

static struct cconn *conns;
static int nqps = 64;
static struct rdma_event_channel *cch;
static struct sockaddr_in server_addr;
static pid_t server_pid = -1;
static unsigned long n_ops, n_wc_err, n_lost, n_verify_err, n_stalls, n_faults, n_kills, n_reconn,
    n_fault_kind[4];

#define C_MEMLEN (2 * XFER + 8 + 2 * MSG_MAX)
static uint8_t *c_wsrc(struct cconn *c)
{
    return c->mem;
}
static uint8_t *c_rdst(struct cconn *c)
{
    return c->mem + XFER;
}
static uint8_t *c_atom(struct cconn *c)
{
    return c->mem + 2 * XFER;
}
static uint8_t *c_smsg(struct cconn *c)
{
    return c->mem + 2 * XFER + 8;
}
static uint8_t *c_rmsg(struct cconn *c)
{
    return c->mem + 2 * XFER + 8 + MSG_MAX;
}

static void c_teardown(struct cconn *c)
{
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->id)
        rdma_destroy_id(c->id);
    if (c->mr)
        ibv_dereg_mr(c->mr);
    if (c->cq)
        ibv_destroy_cq(c->cq);
    if (c->pd)
        ibv_dealloc_pd(c->pd);
    free(c->mem);
    int idx = c->idx;
    memset(c, 0, sizeof(*c));
    c->idx = idx;
    c->state = C_DOWN;
    c->retry_at = now_s() + 0.2;
}

static void c_start_connect(struct cconn *c)
{
    if (rdma_create_id(cch, &c->id, c, RDMA_PS_TCP) ||
        rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&server_addr, 2000)) {
        c_teardown(c);
        return;
    }
    c->state = C_CONNECTING;
}

static int c_post_recv(struct cconn *c)
{
    struct ibv_sge sge = {(uintptr_t)c_rmsg(c), MSG_MAX, c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;

    return ibv_post_recv(c->id->qp, &wr, &bad);
}

/* ADDR_RESOLVED: resources, then the route. */
static int c_setup(struct cconn *c)
{
    struct ibv_qp_init_attr qa;

    c->mem = aligned_alloc(4096, (C_MEMLEN + 4095) / 4096 * 4096);
    c->pd = ibv_alloc_pd(c->id->verbs);
    c->cq = ibv_create_cq(c->id->verbs, 64, NULL, NULL, 0);
    if (!c->mem || !c->pd || !c->cq)
        return -1;
    c->mr = ibv_reg_mr(c->pd, c->mem, C_MEMLEN, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr)
        return -1;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 16;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(c->id, c->pd, &qa) || c_post_recv(c))
        return -1;
    return rdma_resolve_route(c->id, 2000);
}

static void c_post_step(struct cconn *c)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;

    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr_id = c->step;
    sge.lkey = c->mr->lkey;
    c->waiting = 1;
    switch (c->step) {
    case S_WRITE:
        c->slot = (uint32_t)(rnd() % NSLOTS);
        pattern(c_wsrc(c), XFER, (uint64_t)c->idx << 32 | c->seq, 1);
        sge.addr = (uintptr_t)c_wsrc(c);
        sge.length = XFER;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.wr.rdma.remote_addr = c->raddr + (uint64_t)c->slot * XFER;
        wr.wr.rdma.rkey = c->rkey;
        break;
    case S_READ:
        memset(c_rdst(c), 0, XFER);
        sge.addr = (uintptr_t)c_rdst(c);
        sge.length = XFER;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = c->raddr + (uint64_t)c->slot * XFER;
        wr.wr.rdma.rkey = c->rkey;
        break;
    case S_FADD:
    case S_CSWAP:
        sge.addr = (uintptr_t)c_atom(c);
        sge.length = 8;
        wr.opcode = c->step == S_FADD ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.remote_addr = c->raddr + ATOMIC_OFF;
        wr.wr.atomic.rkey = c->rkey;
        wr.wr.atomic.compare_add = c->step == S_FADD ? 1 : c->ctr;
        wr.wr.atomic.swap = c->ctr + 1;
        break;
    default: {
        struct msg_hdr h = {MAGIC_REQ, c->seq, 0, c->die_next ? FLAG_DIE : 0};
        h.len = (uint32_t)(sizeof(h) + rnd() % (MSG_MAX - sizeof(h) + 1));
        c->msg_len = h.len;
        memcpy(c_smsg(c), &h, sizeof(h));
        pattern(c_smsg(c) + sizeof(h), h.len - sizeof(h), h.seq, h.len);
        sge.addr = (uintptr_t)c_smsg(c);
        sge.length = h.len;
        wr.opcode = IBV_WR_SEND;
        c->waiting = 2; /* our Send and the echo */
        break;
    }
    }
    c->busy = true;
    c->op_start = now_s();
    if (ibv_post_send(c->id->qp, &wr, &bad)) {
        n_wc_err++;
        c_teardown(c);
    }
}

/* A completion of the current step: verify and advance. */
static void c_complete(struct cconn *c, const struct ibv_wc *wc)
{
    bool ok = true;

    if (wc->opcode == IBV_WC_RECV) {
        struct msg_hdr h;
        memcpy(&h, c_rmsg(c), sizeof(h));
        ok = h.magic == MAGIC_ECHO && h.seq == c->seq && h.len == c->msg_len &&
             wc->byte_len == c->msg_len &&
             memcmp(c_rmsg(c) + sizeof(h), c_smsg(c) + sizeof(h), h.len - sizeof(h)) == 0;
        if (c_post_recv(c)) {
            n_wc_err++;
            c_teardown(c);
            return;
        }
    } else if (c->step == S_READ) {
        ok = memcmp(c_rdst(c), c_wsrc(c), XFER) == 0;
    } else if (c->step == S_FADD || c->step == S_CSWAP) {
        uint64_t old;
        memcpy(&old, c_atom(c), 8);
        ok = old == c->ctr;
        c->ctr++;
    }
    if (!ok) {
        n_verify_err++;
        fprintf(stderr, "bench_soak: qp %d step %d seq %u: wrong data\n", c->idx, c->step, c->seq);
    }
    if (--c->waiting > 0)
        return;
    n_ops++;
    c->busy = false;
    if (++c->step == S_NSTEPS) {
        c->step = S_WRITE;
        c->seq++;
    }
}

static void c_poll(struct cconn *c)
{
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(c->cq, 8, wc);

    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            n_wc_err++;
            c_teardown(c);
            return;
        }
        c_complete(c, &wc[i]);
    }
}

static void c_event(const struct ev *e)
{
    struct cconn *c = e->id ? e->id->context : NULL;

    if (!c || c->id != e->id)
        return;
    switch (e->type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (c_setup(c))
            c_teardown(c);
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
        struct rdma_conn_param cp;
        memset(&cp, 0, sizeof(cp));
        cp.responder_resources = cp.initiator_depth = 8;
        cp.retry_count = 7;
        if (rdma_connect(c->id, &cp))
            c_teardown(c);
        break;
    }
    case RDMA_CM_EVENT_ESTABLISHED: {
        struct priv pv;
        if (e->priv_len < sizeof(pv)) {
            c_teardown(c);
            break;
        }
        memcpy(&pv, e->priv, sizeof(pv));
        c->raddr = pv.addr;
        c->rkey = pv.rkey;
        c->state = C_UP;
        c->step = S_WRITE;
        c->ctr = 0; /* the server's region is new and zeroed */
        n_reconn++;
        break;
    }
    default: /* errors, rejects, DISCONNECTED */
        n_lost += c->state == C_UP;
        c_teardown(c);
        break;
    }
}

static long count_fds(pid_t pid)
{
    char path[64];
    long n = 0;
    DIR *d;
    struct dirent *de;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    d = opendir(path);
    if (!d)
        return -1;
    while ((de = readdir(d)))
        n += de->d_name[0] != '.';
    closedir(d);
    return n - (pid == getpid()); /* the directory's own fd */
}

static long rss_kb(pid_t pid)
{
    char path[64];
    long size, res;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static const char *self_exe;

/* Start the server; its port arrives on a pipe. */
static int start_server(void)
{
    int p[2];
    char line[64];
    size_t got = 0;

    if (pipe2(p, O_CLOEXEC))
        return -1;
    server_pid = fork();
    if (server_pid < 0)
        return -1;
    if (server_pid == 0) {
        dup2(p[1], 1);
        execl(self_exe, self_exe, "--server", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    double end = now_s() + 20;
    while (got < sizeof(line) - 1 && now_s() < end) {
        struct pollfd pf = {p[0], POLLIN, 0};
        if (poll(&pf, 1, 200) <= 0)
            continue;
        ssize_t r = read(p[0], line + got, sizeof(line) - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        line[got] = 0;
        if (strchr(line, '\n'))
            break;
    }
    close(p[0]);
    unsigned port;
    line[got] = 0;
    if (sscanf(line, "PORT %u", &port) != 1) {
        fprintf(stderr, "bench_soak: the server did not start\n");
        return -1;
    }
    server_addr.sin_port = htons((uint16_t)port);
    return 0;
}

static void fault(void)
{
    double r = rnd_unit();
    int kind = r < 0.15 ? 0 : r < 0.45 ? 1 : r < 0.75 ? 2 : 3;
    struct cconn *pick = NULL;

    if (kind) {
        int start = (int)(rnd() % (unsigned)nqps);
        for (int i = 0; i < nqps && !pick; i++) {
            struct cconn *c = &conns[(start + i) % nqps];
            if (c->state == C_UP && (kind == 1 || c->busy))
                pick = c;
        }
        if (!pick)
            return;
    }
    n_faults++;
    n_fault_kind[kind]++;
    switch (kind) {
    case 0:
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        n_kills++;
        if (start_server()) {
            stop_flag = 2;
            return;
        }
        break;
    case 1:
        pick->die_next = true; /* on its next Send the server destroys it */
        break;
    case 2:
        c_teardown(pick); /* QP and id destroyed with an operation in flight */
        break;
    case 3:
        rdma_disconnect(pick->id); /* orderly close, operation in flight */
        break;
    }
}

struct sample {
    double t;
    int connected;
    long cfds, crss, sfds, srss;
};

static int run_driver(double seconds, const char *csv, double sample_s, double fmin, double fmax)
{
    FILE *out = csv ? fopen(csv, "w") : stdout;
    struct sample first = {0}, last = {0}, max = {0};
    bool have_first = false;
    int ret = 0;

    if (!out) {
        perror(csv);
        return 1;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    server_addr.sin_family = AF_INET;
    server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (start_server())
        return 1;
    cch = rdma_create_event_channel();
    if (!cch) {
        perror("rdma_create_event_channel");
        return 1;
    }
    nonblock(cch->fd);
    conns = calloc((size_t)nqps, sizeof(*conns));
    for (int i = 0; i < nqps; i++)
        conns[i].idx = i;
    fprintf(out, "t_s,connected,ops,ops_per_s,wc_errors,lost,verify_errors,stalls,faults,kills,"
                 "reconnects,client_fds,client_rss_kb,server_fds,server_rss_kb\n");

    double t0 = now_s(), next_sample = t0 + sample_s;
    double next_fault = t0 + 10 + fmin + (fmax - fmin) * rnd_unit(); /* 10 s warm-up */
    unsigned long ops_at_sample = 0;
    while (!stop_flag && now_s() - t0 < seconds) {
        struct ev e;
        bool busy = false;
        double t = now_s();

        while (next_event(cch, &e) == 0) {
            busy = true;
            c_event(&e);
        }
        for (int i = 0; i < nqps; i++) {
            struct cconn *c = &conns[i];
            if (c->state == C_DOWN && t >= c->retry_at) {
                c_start_connect(c);
            } else if (c->state == C_UP) {
                if (!c->busy) {
                    c_post_step(c);
                    busy = true;
                    if (c->state != C_UP)
                        continue;
                }
                unsigned long before = n_ops;
                c_poll(c);
                busy |= n_ops != before;
                if (c->state == C_UP && c->busy && t - c->op_start > STALL_S) {
                    n_stalls++;
                    fprintf(stderr, "bench_soak: qp %d step %d stuck for %.0f s\n", c->idx, c->step,
                            t - c->op_start);
                    c_teardown(c);
                }
            }
        }
        if (t >= next_fault) {
            fault();
            next_fault = t + fmin + (fmax - fmin) * rnd_unit();
        }
        if (t >= next_sample) {
            struct sample s = {t - t0,
                               0,
                               count_fds(getpid()),
                               rss_kb(getpid()),
                               count_fds(server_pid),
                               rss_kb(server_pid)};
            for (int i = 0; i < nqps; i++)
                s.connected += conns[i].state == C_UP;
            fprintf(out, "%.1f,%d,%lu,%.0f,%lu,%lu,%lu,%lu,%lu,%lu,%lu,%ld,%ld,%ld,%ld\n", s.t,
                    s.connected, n_ops, (double)(n_ops - ops_at_sample) / sample_s, n_wc_err,
                    n_lost, n_verify_err, n_stalls, n_faults, n_kills, n_reconn, s.cfds, s.crss,
                    s.sfds, s.srss);
            fflush(out);
            ops_at_sample = n_ops;
            next_sample += sample_s;
            /* fd and RSS comparisons: samples with every connection up,
             * after a 30 s warm-up */
            if (s.connected == nqps && s.t >= 30) {
                if (!have_first)
                    first = s, have_first = true;
                last = s;
                if (s.cfds > max.cfds)
                    max.cfds = s.cfds;
                if (s.crss > max.crss)
                    max.crss = s.crss;
            }
        }
        if (!busy)
            nap_us(50);
    }
    double dur = now_s() - t0;
    for (int i = 0; i < nqps; i++)
        if (conns[i].state != C_DOWN)
            c_teardown(&conns[i]);
    long fds_after = count_fds(getpid());
    kill(server_pid, SIGTERM);
    int st = 0;
    waitpid(server_pid, &st, 0);
    rdma_destroy_event_channel(cch);
    if (out != stdout)
        fclose(out);
    printf("duration %.0f s, %d QPs: %lu operations (%.0f/s), %lu faults (kill %lu, peer destroy "
           "%lu, local destroy %lu, disconnect %lu), %lu connections made\n",
           dur, nqps, n_ops, (double)n_ops / dur, n_faults, n_fault_kind[0], n_fault_kind[1],
           n_fault_kind[2], n_fault_kind[3], n_reconn);
    printf("after faults: %lu completions in error, %lu connections lost (CM event); verify "
           "errors %lu; stalls %lu\n",
           n_wc_err, n_lost, n_verify_err, n_stalls);
    if (have_first)
        printf("all %d connected: client fds %ld at %.0f s, %ld at %.0f s (max %ld); client RSS "
               "%ld KiB at %.0f s, %ld KiB at %.0f s (max %ld)\n",
               nqps, first.cfds, first.t, last.cfds, last.t, max.cfds, first.crss, first.t,
               last.crss, last.t, max.crss);
    printf("client fds after tearing everything down: %ld; server exit status %d\n", fds_after,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    if (n_verify_err || n_stalls || stop_flag == 2)
        ret = 1;
    return ret;
}

int main(int argc, char **argv)
{
    double seconds = 180, sample_s = 2, fmin = 2, fmax = 6;
    const char *csv = NULL;
    uint64_t seed = (uint64_t)time(NULL);

    self_exe = "/proc/self/exe";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--server"))
            return run_server();
        if (!v)
            goto usage;
        if (!strcmp(a, "--seconds"))
            seconds = atof(v);
        else if (!strcmp(a, "--qps"))
            nqps = atoi(v);
        else if (!strcmp(a, "--csv"))
            csv = v;
        else if (!strcmp(a, "--sample"))
            sample_s = atof(v);
        else if (!strcmp(a, "--fault-min"))
            fmin = atof(v);
        else if (!strcmp(a, "--fault-max"))
            fmax = atof(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 0);
        else
            goto usage;
        i++;
    }
    if (seconds <= 0 || nqps < 1 || nqps > 4096 || sample_s <= 0 || fmin <= 0 || fmax < fmin)
        goto usage;
    rng_state ^= seed * 0xD1B54A32D192ED03ull;
    if (!rng_state)
        rng_state = 1;
    printf("seed %llu\n", (unsigned long long)seed);
    return run_driver(seconds, csv, sample_s, fmin, fmax);
usage:
    fprintf(stderr, "usage: bench_soak [--seconds S] [--qps N] [--csv FILE] [--sample S] "
                    "[--fault-min S] [--fault-max S] [--seed N]\n");
    return 2;
}
