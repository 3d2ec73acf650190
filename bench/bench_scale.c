/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Scale benchmark (issue 13): N rdma_cm connections between two processes
 * on 127.0.0.1 through uiwarp (its librdmacm.so.1 and libibverbs.so.1),
 * beside the same program structure over plain TCP sockets.
 *
 * The client (this program) starts a server (this program with --server,
 * exec'd, so a fresh process) for each protocol and N. Each side has one
 * PD, one CQ shared by all its QPs (with one completion channel) and one
 * memory region holding every connection's buffers, all allocated and
 * touched before the baseline is taken.
 *   setup     the client opens N connections (at most --window connects
 *             outstanding), each with its own QP; private data carries
 *             each side's buffer address and rkey
 *   round     on every QP at once, the client does a 4 KiB RDMA Write
 *             into the server's slot then a 64-byte Send; the server, on
 *             the Send's completion, checks every byte of both and answers
 *             with the same into the client's slot, which the client
 *             checks. TCP: 4 KiB + 64 B each way on every socket, checked.
 *   teardown  the client disconnects everything; both sides destroy their
 *             QPs and ids (TCP: close) and count their fds again.
 * Figures per side (client | server): CPU µs per connection during setup
 * (getrusage, the whole process), resident KiB per connection after setup
 * (idle) and after the round (/proc/self/statm against the baseline; each
 * run's client is a process of its own, as is its server), fds
 * per connection (/proc/self/fd), and whether the fds are back at the
 * baseline after teardown (uiwarp: with the CQ, its channel, the MR and
 * the PD destroyed too, as the CQ makes an fd of its own when first polled;
 * BENCH_SCALE_LSFD=1 lists the fds when they are not).
 * The ratio row: TCP's setup time / uiwarp's (above 1: uiwarp is faster),
 * uiwarp's round time / TCP's, uiwarp's CPU per connection / TCP's.
 *
 * tcp+3 (-p tcpx) is the TCP program again with the three messages an
 * iWARP connection adds to TCP's handshake (the MPA Request and Reply, 40
 * bytes each as uiwarp sends them here, and the 20-byte RTR), at most
 * WINDOW outstanding as uiwarp's connects: the protocol's own cost on this
 * machine, without uiwarp's code; its ratio row compares uiwarp with it.
 *
 * usage: bench_scale [-n N[,N...]] [-w WINDOW] [-p rdma|tcp|tcpx|both|all] [-S] [--check]
 *   -n  connection counts (default 1000)
 *   -w  outstanding connects on the client (default 256)
 *   -p  protocols: both = rdma and tcp; all (the default) adds tcp+3
 *   -S  a fresh client source address per run (127.0.0.2, .3, ...): the
 *       TIME_WAIT sockets of earlier runs (28k ephemeral ports, 60 s) would
 *       take the ports otherwise; each N prints how many there are
 *   -W  before each run, wait (up to 70 s) for fewer than 1000 TIME_WAIT
 *       sockets: ports bound explicitly and now in TIME_WAIT are refused
 *       to connect()'s port choice too, whatever the address
 *   --check  exit 1 unless every byte checked out and the fds came back
 *            (for CI; prints the same table)
 * RLIMIT_NOFILE is raised to the hard limit (as root, to fs.nr_open).
 * Exit status: 0 when every run verified and came back to its fd baseline.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define WR_SIZE  4096 /* the RDMA Write (TCP: the first part) */
#define MSG_SIZE 64   /* the Send (TCP: the second part) */
#define TCP_MSG  (WR_SIZE + MSG_SIZE)

/* One connection's slice of a side's region. */
struct slot {
    uint8_t src[WR_SIZE];   /* what this side writes to the peer */
    uint8_t dst[WR_SIZE];   /* where the peer writes */
    uint8_t sbuf[MSG_SIZE]; /* what this side sends */
    uint8_t rbuf[MSG_SIZE]; /* where the peer's Send lands */
};

struct pdata {     /* connect / accept private data */
    uint64_t addr; /* the sender's slot dst */
    uint32_t rkey;
    uint32_t idx;
};

struct conn {
    struct rdma_cm_id *id;
    uint64_t raddr;
    uint32_t rkey;
    bool established, got, disconnected;
    int fd;       /* TCP */
    unsigned off; /* TCP: bytes received */
};

static const char *self_exe;
/* -S: the client's source address for this run (127.0.0.2, .3, ...), so
 * that the TIME_WAIT sockets of earlier runs do not take its ports; 0: the
 * kernel's choice (127.0.0.1). */
static struct sockaddr_in src_addr;

/* TCP sockets in TIME_WAIT on the machine (/proc/net/sockstat), -1 if
 * unknown. */
static long time_wait(void)
{
    char line[256];
    long tw = -1;
    FILE *f = fopen("/proc/net/sockstat", "r");

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        char *p = strstr(line, " tw ");
        if (!strncmp(line, "TCP:", 4) && p)
            tw = strtol(p + 4, NULL, 10);
    }
    fclose(f);
    return tw;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static long rss_kb(void)
{
    long size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own fd */
}

/* BENCH_SCALE_LSFD set: list the fds (to find one that did not come back). */
static void lsfd(void)
{
    char cmd[64];

    if (!getenv("BENCH_SCALE_LSFD"))
        return;
    snprintf(cmd, sizeof(cmd), "ls -l /proc/%d/fd >&2", (int)getpid());
    if (system(cmd) != 0)
        fprintf(stderr, "bench_scale: %s failed\n", cmd);
}

/* fds come back asynchronously (the progress thread closes sockets):
 * wait up to 3 s for the baseline. */
static long fds_settle(long base)
{
    long n = count_fds();

    for (int i = 0; i < 300 && n != base; i++) {
        usleep(10000);
        n = count_fds();
    }
    if (n != base) {
        fprintf(stderr, "bench_scale: pid %d: %ld fds after teardown, %ld before\n", (int)getpid(),
                n, base);
        lsfd();
    }
    return n;
}

static void raise_nofile(void)
{
    struct rlimit rl;
    long nr_open = 0;
    FILE *f = fopen("/proc/sys/fs/nr_open", "r");

    if (f) {
        if (fscanf(f, "%ld", &nr_open) != 1)
            nr_open = 0;
        fclose(f);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    if (nr_open > (long)rl.rlim_max) {
        struct rlimit up = {(rlim_t)nr_open, (rlim_t)nr_open};
        if (!setrlimit(RLIMIT_NOFILE, &up))
            return;
    }
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

/* The byte pattern of connection i, direction dir (0: client to server),
 * part (0: the write, 1: the send), offset k. */
static uint8_t pat(unsigned i, int dir, int part, unsigned k)
{
    uint32_t x = i * 2654435761u ^ (uint32_t)(dir * 0x9e37 + part * 0x51ed) ^ k * 40503u;
    return (uint8_t)(x ^ x >> 11 ^ x >> 19);
}

static void fill(struct slot *s, unsigned i, int dir)
{
    for (unsigned k = 0; k < WR_SIZE; k++)
        s->src[k] = pat(i, dir, 0, k);
    for (unsigned k = 0; k < MSG_SIZE; k++)
        s->sbuf[k] = pat(i, dir, 1, k);
}

static bool check(const uint8_t *wr, const uint8_t *msg, unsigned i, int dir)
{
    for (unsigned k = 0; k < WR_SIZE; k++)
        if (wr[k] != pat(i, dir, 0, k))
            return false;
    for (unsigned k = 0; k < MSG_SIZE; k++)
        if (msg[k] != pat(i, dir, 1, k))
            return false;
    return true;
}

/* What a server reports on its stdout (a pipe to the client). */
struct srv_report {
    double setup_cpu_us; /* per connection */
    double rss_idle_kb, rss_round_kb, fds_per;
    unsigned bad;
    bool fds_back;
};

/* ------------------------------------------------------------------------
 * rdma_cm
 * ---------------------------------------------------------------------- */
struct side {
    unsigned n;
    struct rdma_event_channel *ch;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *cc;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    struct slot *slots;
    struct conn *c;
    unsigned bad, done;
    long fds_pre; /* before the PD, CQ, channel, MR: fds back after side_free */
};

static int side_setup(struct side *s, struct ibv_context *verbs, int dir)
{
    size_t len = (size_t)s->n * sizeof(struct slot);

    if (!verbs) { /* the first device (librdmacm keeps its contexts open) */
        struct ibv_context **l = rdma_get_devices(NULL);
        verbs = l ? l[0] : NULL;
        if (l)
            rdma_free_devices(l);
        if (!verbs) {
            fprintf(stderr, "bench_scale: no RDMA device\n");
            return -1;
        }
    }
    s->fds_pre = count_fds();

    s->verbs = verbs;
    s->pd = ibv_alloc_pd(verbs);
    s->cc = ibv_create_comp_channel(verbs);
    s->cq = s->cc ? ibv_create_cq(verbs, (int)(3 * s->n + 16), NULL, s->cc, 0) : NULL;
    s->slots = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (!s->pd || !s->cq || !s->slots) {
        fprintf(stderr, "bench_scale: PD/CQ/memory: %s\n", strerror(errno));
        return -1;
    }
    memset(s->slots, 0, len);
    for (unsigned i = 0; i < s->n; i++)
        fill(&s->slots[i], i, dir);
    s->mr = ibv_reg_mr(s->pd, s->slots, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!s->mr || ibv_req_notify_cq(s->cq, 0)) {
        fprintf(stderr, "bench_scale: MR: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int make_qp(struct side *s, struct rdma_cm_id *id, unsigned i)
{
    struct ibv_qp_init_attr qa;
    struct ibv_sge sge = {(uintptr_t)s->slots[i].rbuf, MSG_SIZE, s->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;

    memset(&qa, 0, sizeof(qa));
    qa.send_cq = qa.recv_cq = s->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 2;
    qa.cap.max_recv_wr = 1;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, s->pd, &qa)) {
        fprintf(stderr, "bench_scale: rdma_create_qp %u: %s\n", i, strerror(errno));
        return -1;
    }
    if (ibv_post_recv(id->qp, &wr, &bad)) {
        fprintf(stderr, "bench_scale: post_recv %u failed\n", i);
        return -1;
    }
    return 0;
}

/* RDMA Write of slot i's src to the peer, then the Send (both signaled). */
static int post_pair(struct side *s, unsigned i)
{
    struct conn *c = &s->c[i];
    struct ibv_sge wsge = {(uintptr_t)s->slots[i].src, WR_SIZE, s->mr->lkey};
    struct ibv_sge ssge = {(uintptr_t)s->slots[i].sbuf, MSG_SIZE, s->mr->lkey};
    struct ibv_send_wr sw, ww, *bad;

    memset(&ww, 0, sizeof(ww));
    memset(&sw, 0, sizeof(sw));
    ww.wr_id = UINT64_MAX;
    ww.opcode = IBV_WR_RDMA_WRITE;
    ww.sg_list = &wsge;
    ww.num_sge = 1;
    ww.send_flags = IBV_SEND_SIGNALED;
    ww.wr.rdma.remote_addr = c->raddr;
    ww.wr.rdma.rkey = c->rkey;
    ww.next = &sw;
    sw.wr_id = UINT64_MAX;
    sw.opcode = IBV_WR_SEND;
    sw.sg_list = &ssge;
    sw.num_sge = 1;
    sw.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(c->id->qp, &ww, &bad)) {
        fprintf(stderr, "bench_scale: post_send %u failed\n", i);
        return -1;
    }
    return 0;
}

/* Reap the CQ; on each receive check slot i (dir: the peer's direction)
 * and, on the server, answer. Returns -1 on a completion error. */
static int reap(struct side *s, int peer_dir, bool answer)
{
    struct ibv_wc wc[64];
    int n;

    while ((n = ibv_poll_cq(s->cq, 64, wc)) > 0) {
        for (int k = 0; k < n; k++) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "bench_scale: completion error %s (wr_id %llu)\n",
                        ibv_wc_status_str(wc[k].status), (unsigned long long)wc[k].wr_id);
                s->bad++;
                return -1;
            }
            if (wc[k].opcode != IBV_WC_RECV)
                continue;
            unsigned i = (unsigned)wc[k].wr_id;
            if (i >= s->n || s->c[i].got) {
                s->bad++;
                continue;
            }
            s->c[i].got = true;
            s->done++;
            if (wc[k].byte_len != MSG_SIZE ||
                !check(s->slots[i].dst, s->slots[i].rbuf, i, peer_dir))
                s->bad++;
            if (answer && post_pair(s, i))
                return -1;
        }
    }
    return n < 0 ? -1 : 0;
}

/* Wait for a completion-channel event or a CM event (or timeout ms). */
static void wait_events(struct side *s, int ms)
{
    struct pollfd p[2] = {{s->ch->fd, POLLIN, 0}, {s->cc->fd, POLLIN, 0}};

    if (poll(p, 2, ms) > 0 && (p[1].revents & POLLIN)) {
        struct ibv_cq *cq;
        void *ctx;
        if (!ibv_get_cq_event(s->cc, &cq, &ctx)) {
            ibv_ack_cq_events(cq, 1);
            ibv_req_notify_cq(cq, 0);
        }
    }
}

static void side_free(struct side *s)
{
    if (s->mr)
        ibv_dereg_mr(s->mr);
    if (s->cq)
        ibv_destroy_cq(s->cq);
    if (s->cc)
        ibv_destroy_comp_channel(s->cc);
    if (s->pd)
        ibv_dealloc_pd(s->pd);
    free(s->slots);
    free(s->c);
}

static void set_nonblock(int fd)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static int rdma_server(unsigned n)
{
    struct side s = {.n = n};
    struct rdma_cm_id *lid;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct srv_report r = {0};
    unsigned est = 0, gone = 0;
    double cpu0 = 0;
    long rss0, fds0;
    bool started = false;

    s.c = calloc(n, sizeof(*s.c));
    s.ch = rdma_create_event_channel();
    if (!s.c || !s.ch || rdma_create_id(s.ch, &lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(lid, (struct sockaddr *)&a) || rdma_listen(lid, 4096)) {
        perror("bench_scale server: listen");
        return 1;
    }
    if (side_setup(&s, lid->verbs, 1))
        return 1;
    set_nonblock(s.ch->fd);
    rss0 = rss_kb();
    fds0 = count_fds();
    printf("%u\n", ntohs(rdma_get_src_port(lid)));
    fflush(stdout);

    while (gone < n) {
        struct rdma_cm_event *e;

        if (rdma_get_cm_event(s.ch, &e)) {
            if (errno != EAGAIN) {
                perror("bench_scale server: rdma_get_cm_event");
                return 1;
            }
            if (reap(&s, 0, true))
                return 1;
            wait_events(&s, 1000);
            continue;
        }
        struct rdma_cm_id *id = e->id;
        enum rdma_cm_event_type t = e->event;
        struct pdata pd = {0};

        if (t == RDMA_CM_EVENT_CONNECT_REQUEST && e->param.conn.private_data_len >= sizeof(pd))
            memcpy(&pd, e->param.conn.private_data, sizeof(pd));
        rdma_ack_cm_event(e);
        switch (t) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: {
            struct rdma_conn_param cp;
            struct pdata mine;
            unsigned i = pd.idx;

            if (!started) {
                started = true;
                cpu0 = cpu_us();
            }
            if (i >= n || s.c[i].id) {
                fprintf(stderr, "bench_scale server: bad connection index %u\n", i);
                return 1;
            }
            s.c[i].id = id;
            s.c[i].raddr = pd.addr;
            s.c[i].rkey = pd.rkey;
            id->context = &s.c[i];
            if (make_qp(&s, id, i))
                return 1;
            mine.addr = (uintptr_t)s.slots[i].dst;
            mine.rkey = s.mr->rkey;
            mine.idx = i;
            memset(&cp, 0, sizeof(cp));
            cp.private_data = &mine;
            cp.private_data_len = sizeof(mine);
            cp.responder_resources = cp.initiator_depth = 1;
            if (rdma_accept(id, &cp)) {
                perror("bench_scale server: rdma_accept");
                return 1;
            }
            break;
        }
        case RDMA_CM_EVENT_ESTABLISHED:
            if (++est == n) {
                r.setup_cpu_us = (cpu_us() - cpu0) / n;
                r.rss_idle_kb = (double)(rss_kb() - rss0) / n;
                r.fds_per = (double)(count_fds() - fds0) / n;
            }
            break;
        case RDMA_CM_EVENT_DISCONNECTED: {
            struct conn *c = id->context;
            if (!c->disconnected) {
                c->disconnected = true;
                if (gone == 0)
                    r.rss_round_kb = (double)(rss_kb() - rss0) / n;
                rdma_destroy_qp(id);
                rdma_destroy_id(id);
                gone++;
            }
            break;
        }
        default:
            fprintf(stderr, "bench_scale server: event %s (%d)\n", rdma_event_str(t), t);
            return 1;
        }
    }
    r.bad = s.bad + (s.done != n);
    side_free(&s);
    r.fds_back = fds_settle(s.fds_pre) == s.fds_pre;
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(s.ch);
    printf("%.1f %.2f %.2f %.3f %u %d\n", r.setup_cpu_us, r.rss_idle_kb, r.rss_round_kb, r.fds_per,
           r.bad, r.fds_back);
    return 0;
}

/* Client-side figures of one run. */
struct cli_report {
    double setup_s, cpu_us, rss_idle_kb, rss_round_kb, fds_per, round_s;
    unsigned bad;
    bool fds_back;
};

static int rdma_client(unsigned n, unsigned window, const struct sockaddr_in *srv,
                       struct cli_report *r)
{
    struct side s = {.n = n};
    struct rdma_cm_id *probe;
    struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned next = 0, outstanding = 0, est = 0, gone = 0;
    long rss0, fds0;
    double t0, cpu0;

    s.c = calloc(n, sizeof(*s.c));
    s.ch = rdma_create_event_channel();
    /* A bound id gives the device context (kept to the end: a constant). */
    if (!s.c || !s.ch || rdma_create_id(s.ch, &probe, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(probe, (struct sockaddr *)&lo)) {
        perror("bench_scale: client setup");
        return -1;
    }
    if (side_setup(&s, probe->verbs, 0))
        return -1;
    rss0 = rss_kb();
    fds0 = count_fds();
    lsfd();
    t0 = now_s();
    cpu0 = cpu_us();
    while (est < n) {
        struct rdma_cm_event *e;

        while (next < n && outstanding < window) {
            struct rdma_cm_id *id;
            if (rdma_create_id(s.ch, &id, &s.c[next], RDMA_PS_TCP) ||
                rdma_resolve_addr(id,
                                  src_addr.sin_addr.s_addr ? (struct sockaddr *)&src_addr : NULL,
                                  (struct sockaddr *)srv, 2000)) {
                fprintf(stderr, "bench_scale: connection %u: create/resolve: %s\n", next,
                        strerror(errno));
                return -1;
            }
            s.c[next].id = id;
            next++;
            outstanding++;
        }
        if (rdma_get_cm_event(s.ch, &e)) {
            perror("bench_scale: rdma_get_cm_event");
            return -1;
        }
        struct rdma_cm_id *id = e->id;
        struct conn *c = id->context;
        unsigned i = (unsigned)(c - s.c);
        enum rdma_cm_event_type t = e->event;
        int status = e->status;
        struct pdata pd = {0};

        if (t == RDMA_CM_EVENT_ESTABLISHED && e->param.conn.private_data_len >= sizeof(pd))
            memcpy(&pd, e->param.conn.private_data, sizeof(pd));
        rdma_ack_cm_event(e);
        if (t == RDMA_CM_EVENT_ADDR_RESOLVED) {
            if (make_qp(&s, id, i) || rdma_resolve_route(id, 2000)) {
                fprintf(stderr, "bench_scale: connection %u: resolve route: %s\n", i,
                        strerror(errno));
                return -1;
            }
        } else if (t == RDMA_CM_EVENT_ROUTE_RESOLVED) {
            struct rdma_conn_param cp;
            struct pdata mine = {(uintptr_t)s.slots[i].dst, s.mr->rkey, i};

            memset(&cp, 0, sizeof(cp));
            cp.private_data = &mine;
            cp.private_data_len = sizeof(mine);
            cp.responder_resources = cp.initiator_depth = 1;
            if (rdma_connect(id, &cp)) {
                fprintf(stderr, "bench_scale: connection %u: rdma_connect: %s\n", i,
                        strerror(errno));
                return -1;
            }
        } else if (t == RDMA_CM_EVENT_ESTABLISHED) {
            if (pd.idx != i) {
                fprintf(stderr, "bench_scale: connection %u: bad private data\n", i);
                return -1;
            }
            c->raddr = pd.addr;
            c->rkey = pd.rkey;
            c->established = true;
            est++;
            outstanding--;
        } else {
            fprintf(stderr, "bench_scale: connection %u: event %s status %d\n", i,
                    rdma_event_str(t), status);
            return -1;
        }
    }
    r->setup_s = now_s() - t0;
    r->cpu_us = (cpu_us() - cpu0) / n;
    r->rss_idle_kb = (double)(rss_kb() - rss0) / n;
    r->fds_per = (double)(count_fds() - fds0) / n;

    /* The round. */
    t0 = now_s();
    for (unsigned i = 0; i < n; i++)
        if (post_pair(&s, i))
            return -1;
    while (s.done < n) {
        if (reap(&s, 1, false))
            break;
        if (s.done < n)
            wait_events(&s, 1000);
        if (now_s() - t0 > 120) {
            fprintf(stderr, "bench_scale: round stalled at %u of %u\n", s.done, n);
            break;
        }
    }
    r->round_s = now_s() - t0;
    reap(&s, 1, false);
    r->rss_round_kb = (double)(rss_kb() - rss0) / n;
    r->bad = s.bad + (s.done != n);

    /* Teardown. */
    for (unsigned i = 0; i < n; i++)
        if (rdma_disconnect(s.c[i].id))
            fprintf(stderr, "bench_scale: connection %u: rdma_disconnect: %s\n", i,
                    strerror(errno));
    while (gone < n) {
        struct rdma_cm_event *e;

        if (rdma_get_cm_event(s.ch, &e)) {
            perror("bench_scale: rdma_get_cm_event");
            return -1;
        }
        struct rdma_cm_id *id = e->id;
        enum rdma_cm_event_type t = e->event;
        rdma_ack_cm_event(e);
        if (t != RDMA_CM_EVENT_DISCONNECTED) {
            fprintf(stderr, "bench_scale: teardown: event %s\n", rdma_event_str(t));
            continue;
        }
        struct conn *c = id->context;
        if (!c->disconnected) {
            c->disconnected = true;
            rdma_destroy_qp(id);
            rdma_destroy_id(id);
            gone++;
        }
    }
    side_free(&s);
    r->fds_back = fds_settle(s.fds_pre) == s.fds_pre;
    rdma_destroy_id(probe);
    rdma_destroy_event_channel(s.ch);
    return 0;
}

/* ------------------------------------------------------------------------
 * TCP, the same structure
 * ---------------------------------------------------------------------- */

/* Read what is there on c (slot i) into dst then rbuf. Returns 1 when the
 * whole message is in, 0 for more to come, -1 at EOF or error. */
static int tcp_read(struct slot *sl, struct conn *c)
{
    while (c->off < TCP_MSG) {
        uint8_t *p = c->off < WR_SIZE ? sl->dst + c->off : sl->rbuf + (c->off - WR_SIZE);
        size_t want = c->off < WR_SIZE ? WR_SIZE - c->off : TCP_MSG - c->off;
        ssize_t k = read(c->fd, p, want);

        if (k > 0)
            c->off += (unsigned)k;
        else if (k < 0 && errno == EAGAIN)
            return 0;
        else
            return -1;
    }
    return 1;
}

static int tcp_write(struct slot *sl, int fd)
{
    struct iovec iov[2] = {{sl->src, WR_SIZE}, {sl->sbuf, MSG_SIZE}};
    size_t left = TCP_MSG;

    while (left) {
        ssize_t k = writev(fd, iov, 2);
        if (k < 0 && errno == EAGAIN) {
            struct pollfd p = {fd, POLLOUT, 0};
            poll(&p, 1, 1000);
            continue;
        }
        if (k <= 0)
            return -1;
        left -= (size_t)k;
        for (int j = 0; j < 2 && k > 0; j++) {
            size_t d = (size_t)k < iov[j].iov_len ? (size_t)k : iov[j].iov_len;
            iov[j].iov_base = (uint8_t *)iov[j].iov_base + d;
            iov[j].iov_len -= d;
            k -= (ssize_t)d;
        }
    }
    return 0;
}

static struct slot *tcp_slots(unsigned n, int dir)
{
    struct slot *sl = aligned_alloc(4096, ((size_t)n * sizeof(*sl) + 4095) & ~(size_t)4095);

    if (!sl)
        return NULL;
    memset(sl, 0, (size_t)n * sizeof(*sl));
    for (unsigned i = 0; i < n; i++)
        fill(&sl[i], i, dir);
    return sl;
}

/* tcp+3: the same TCP program with the three messages an iWARP connection
 * adds to TCP's handshake, sized as uiwarp sends them (the MPA Request and
 * Reply with this program's private data, the zero-length RDMA Write that
 * is the RTR): what the protocol itself costs on this machine, without
 * uiwarp's code (-p all; issue 13's setup target is relative to plain TCP). */
#define X3_REQ 40
#define X3_REP 40
#define X3_RTR 20

static uint8_t x3_byte(unsigned i, unsigned k, int which)
{
    return (uint8_t)(i * 7u + k * 3u + (unsigned)which * 101u);
}

/* Read the rest of a want-byte message on c; 1 when whole (checked), 0 for
 * more to come, -1 at EOF, error or a wrong byte. */
static int x3_read(struct conn *c, unsigned i, unsigned want, int which)
{
    uint8_t b[X3_REQ];

    while (c->off < want) {
        ssize_t k = read(c->fd, b, want - c->off);
        if (k < 0 && errno == EAGAIN)
            return 0;
        if (k <= 0)
            return -1;
        for (ssize_t j = 0; j < k; j++)
            if (b[j] != x3_byte(i, c->off + (unsigned)j, which))
                return -1;
        c->off += (unsigned)k;
    }
    c->off = 0;
    return 1;
}

static int x3_write(int fd, unsigned i, unsigned len, int which)
{
    uint8_t b[X3_REQ];

    for (unsigned k = 0; k < len; k++)
        b[k] = x3_byte(i, k, which);
    return write(fd, b, len) == (ssize_t)len ? 0 : -1;
}

/* tcp+3 server setup: accept and answer until every connection has sent
 * its RTR. phase per connection: 0 Request due, 1 RTR due, 2 done. */
static int x3_accept_all(int lfd, int ep, struct conn *c, unsigned n, double *cpu0)
{
    uint8_t *ph = calloc(n, 1);
    unsigned accepted = 0, est = 0;
    struct epoll_event lev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};

    if (!ph || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &lev))
        return -1;
    set_nonblock(lfd);
    while (est < n) {
        struct epoll_event ev[64];
        int k = epoll_wait(ep, ev, 64, 5000);

        if (k <= 0) {
            fprintf(stderr, "bench_scale tcp+3 server: stalled (%u of %u)\n", est, n);
            free(ph);
            return -1;
        }
        for (int j = 0; j < k; j++) {
            unsigned i = ev[j].data.u32;

            if (i == UINT32_MAX) {
                int fd;
                while (accepted < n &&
                       (fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
                    struct epoll_event cev = {.events = EPOLLIN, .data.u32 = accepted};
                    if (accepted == 0)
                        *cpu0 = cpu_us();
                    c[accepted].fd = fd;
                    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &cev)) {
                        free(ph);
                        return -1;
                    }
                    accepted++;
                }
                continue;
            }
            if (ph[i] == 2)
                continue; /* the round's data, read after the setup */
            int st = x3_read(&c[i], i, ph[i] ? X3_RTR : X3_REQ, ph[i] ? 2 : 0);
            if (st < 0 || (st == 1 && !ph[i] && x3_write(c[i].fd, i, X3_REP, 1))) {
                fprintf(stderr, "bench_scale tcp+3 server: connection %u failed\n", i);
                free(ph);
                return -1;
            }
            if (st == 1 && ++ph[i] == 2)
                est++;
        }
    }
    epoll_ctl(ep, EPOLL_CTL_DEL, lfd, NULL);
    free(ph);
    return 0;
}

/* tcp+3 client: take one Reply (or wait for the next) and answer it with
 * the RTR. Returns the number of connections completed, -1 on error. */
static int x3_replies(int ep, struct conn *c)
{
    struct epoll_event ev[64];
    int k = epoll_wait(ep, ev, 64, 5000), got = 0;

    if (k <= 0) {
        fprintf(stderr, "bench_scale tcp+3: no Reply in 5 s\n");
        return -1;
    }
    for (int j = 0; j < k; j++) {
        unsigned i = ev[j].data.u32;

        if (c[i].established)
            continue;
        int st = x3_read(&c[i], i, X3_REP, 1);
        if (st < 0 || (st == 1 && x3_write(c[i].fd, i, X3_RTR, 2)))
            return -1;
        if (st == 1) {
            c[i].established = true;
            got++;
        }
    }
    return got;
}

static int tcp_server(unsigned n, bool x3)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    struct conn *c = calloc(n, sizeof(*c));
    struct slot *sl = tcp_slots(n, 1);
    struct srv_report r = {0};
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ep = epoll_create1(EPOLL_CLOEXEC);
    unsigned done = 0, gone = 0;
    long rss0, fds0;
    double cpu0 = 0;

    if (!c || !sl || lfd < 0 || ep < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) ||
        listen(lfd, 4096) || getsockname(lfd, (struct sockaddr *)&a, &al)) {
        perror("bench_scale tcp server");
        return 1;
    }
    if (x3) { /* accepted sockets inherit it, as uiwarp's listener's */
        int one = 1;
        (void)setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    rss0 = rss_kb();
    fds0 = count_fds();
    printf("%u\n", ntohs(a.sin_port));
    fflush(stdout);
    if (x3 && x3_accept_all(lfd, ep, c, n, &cpu0)) {
        perror("bench_scale tcp+3 server");
        return 1;
    }
    for (unsigned i = 0; !x3 && i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};

        c[i].fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (i == 0)
            cpu0 = cpu_us();
        if (c[i].fd < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev)) {
            perror("bench_scale tcp server: accept");
            return 1;
        }
    }
    r.setup_cpu_us = (cpu_us() - cpu0) / n;
    r.rss_idle_kb = (double)(rss_kb() - rss0) / n;
    r.fds_per = (double)(count_fds() - fds0) / n;
    while (gone < n) {
        struct epoll_event ev[64];
        int k = epoll_wait(ep, ev, 64, 5000);

        if (k <= 0) {
            fprintf(stderr, "bench_scale tcp server: stalled (%u of %u)\n", done, n);
            return 1;
        }
        for (int j = 0; j < k; j++) {
            unsigned i = ev[j].data.u32;
            int st = c[i].off < TCP_MSG ? tcp_read(&sl[i], &c[i]) : -1;

            if (st == 1) {
                done++;
                if (!check(sl[i].dst, sl[i].rbuf, i, 0))
                    r.bad++;
                if (tcp_write(&sl[i], c[i].fd))
                    r.bad++;
            } else if (st < 0) {
                /* EOF after the message: the client is done with it. */
                char b;
                if (c[i].off == TCP_MSG && read(c[i].fd, &b, 1) > 0)
                    r.bad++;
                if (gone == 0)
                    r.rss_round_kb = (double)(rss_kb() - rss0) / n;
                epoll_ctl(ep, EPOLL_CTL_DEL, c[i].fd, NULL);
                close(c[i].fd);
                gone++;
            }
        }
    }
    r.bad += done != n;
    r.fds_back = fds_settle(fds0) == fds0;
    printf("%.1f %.2f %.2f %.3f %u %d\n", r.setup_cpu_us, r.rss_idle_kb, r.rss_round_kb, r.fds_per,
           r.bad, r.fds_back);
    close(ep);
    close(lfd);
    free(sl);
    free(c);
    return 0;
}

static int tcp_client(unsigned n, const struct sockaddr_in *srv, struct cli_report *r, bool x3,
                      unsigned window)
{
    struct conn *c = calloc(n, sizeof(*c));
    struct slot *sl = tcp_slots(n, 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    unsigned done = 0, pending = 0;
    long rss0, fds0;
    double t0, cpu0;

    if (!c || !sl || ep < 0)
        return -1;
    rss0 = rss_kb();
    fds0 = count_fds();
    t0 = now_s();
    cpu0 = cpu_us();
    for (unsigned i = 0; i < n; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};

        c[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c[i].fd >= 0 && src_addr.sin_addr.s_addr) {
            /* the port is chosen at connect (no bind-time port search) */
            int one = 1;
            (void)setsockopt(c[i].fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
            (void)bind(c[i].fd, (const struct sockaddr *)&src_addr, sizeof(src_addr));
        }
        if (c[i].fd < 0 || connect(c[i].fd, (const struct sockaddr *)srv, sizeof(*srv)) ||
            epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev)) {
            fprintf(stderr, "bench_scale tcp: connection %u: %s\n", i, strerror(errno));
            return -1;
        }
        set_nonblock(c[i].fd);
        if (x3) {
            int one = 1;
            (void)setsockopt(c[i].fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            if (x3_write(c[i].fd, i, X3_REQ, 0))
                return -1;
            pending++;
        }
        while (x3 && pending >= window) {
            int got = x3_replies(ep, c);
            if (got < 0)
                return -1;
            pending -= (unsigned)got;
        }
    }
    while (pending) {
        int got = x3_replies(ep, c);
        if (got < 0)
            return -1;
        pending -= (unsigned)got;
    }
    r->setup_s = now_s() - t0;
    r->cpu_us = (cpu_us() - cpu0) / n;
    r->rss_idle_kb = (double)(rss_kb() - rss0) / n;
    r->fds_per = (double)(count_fds() - fds0) / n;

    t0 = now_s();
    for (unsigned i = 0; i < n; i++)
        if (tcp_write(&sl[i], c[i].fd))
            return -1;
    while (done < n) {
        struct epoll_event ev[64];
        int k = epoll_wait(ep, ev, 64, 5000);

        if (k <= 0) {
            fprintf(stderr, "bench_scale tcp: round stalled at %u of %u\n", done, n);
            break;
        }
        for (int j = 0; j < k; j++) {
            unsigned i = ev[j].data.u32;
            int st = c[i].off < TCP_MSG ? tcp_read(&sl[i], &c[i]) : 0;

            if (st == 1) {
                done++;
                if (!check(sl[i].dst, sl[i].rbuf, i, 1))
                    r->bad++;
            } else if (st < 0) {
                r->bad++;
                epoll_ctl(ep, EPOLL_CTL_DEL, c[i].fd, NULL);
            }
        }
    }
    r->round_s = now_s() - t0;
    r->rss_round_kb = (double)(rss_kb() - rss0) / n;
    r->bad += done != n;
    for (unsigned i = 0; i < n; i++)
        close(c[i].fd);
    r->fds_back = fds_settle(fds0) == fds0;
    close(ep);
    free(c);
    free(sl);
    return 0;
}

/* ------------------------------------------------------------------------
 * Driver
 * ---------------------------------------------------------------------- */

/* -W: wait (at most 70 s) for the TIME_WAIT sockets of earlier runs to
 * go below 1000, so that every run starts alike. */
static void wait_tw(void)
{
    for (int i = 0; i < 700 && time_wait() >= 1000; i++)
        usleep(100000);
}
struct run {
    struct cli_report c;
    struct srv_report s;
    bool ok;
};

static pid_t start_server(const char *proto, unsigned n, FILE **out, unsigned *port)
{
    int p[2];
    char nb[16];
    pid_t pid;

    if (pipe(p))
        return -1;
    snprintf(nb, sizeof(nb), "%u", n);
    pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execl(self_exe, self_exe, "--server", proto, nb, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    *out = fdopen(p[0], "r");
    if (!*out || fscanf(*out, "%u", port) != 1) {
        fprintf(stderr, "bench_scale: the %s server did not start\n", proto);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

static bool run_one(const char *proto, unsigned n, unsigned window, struct run *out)
{
    struct sockaddr_in srv = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    unsigned port;
    FILE *f;
    int st, rc;
    pid_t pid = start_server(proto, n, &f, &port);

    memset(out, 0, sizeof(*out));
    if (pid < 0)
        return false;
    srv.sin_port = htons((uint16_t)port);
    rc = strcmp(proto, "rdma") ? tcp_client(n, &srv, &out->c, !strcmp(proto, "tcpx"), window)
                               : rdma_client(n, window, &srv, &out->c);
    if (rc) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fclose(f);
        return false;
    }
    int fb = 0;
    if (fscanf(f, "%lf %lf %lf %lf %u %d", &out->s.setup_cpu_us, &out->s.rss_idle_kb,
               &out->s.rss_round_kb, &out->s.fds_per, &out->s.bad, &fb) != 6) {
        fprintf(stderr, "bench_scale: no report from the %s server\n", proto);
        kill(pid, SIGKILL);
        out->s.bad = 1;
    }
    out->s.fds_back = fb;
    fclose(f);
    waitpid(pid, &st, 0);
    out->ok = !out->c.bad && !out->s.bad && out->c.fds_back && out->s.fds_back && WIFEXITED(st) &&
              WEXITSTATUS(st) == 0;
    return out->ok;
}

/* run_one in a process of its own (forked before this process touched
 * any RDMA state), so that every run's RSS starts from a fresh heap: in one
 * process, a later run reused what an earlier one freed (a client figure
 * of 6 KiB per QP at N=19900 after N=10000). */
static bool run_fresh(const char *proto, unsigned n, unsigned window, struct run *out)
{
    int p[2], st;
    ssize_t got;
    pid_t pid;

    memset(out, 0, sizeof(*out));
    fflush(stdout);
    if (pipe2(p, O_CLOEXEC))
        return false;
    pid = fork();
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return false;
    }
    if (pid == 0) {
        struct run r;
        close(p[0]);
        run_one(proto, n, window, &r);
        fflush(stdout);
        _exit(write(p[1], &r, sizeof(r)) == (ssize_t)sizeof(r) ? 0 : 1);
    }
    close(p[1]);
    got = read(p[0], out, sizeof(*out));
    close(p[0]);
    waitpid(pid, &st, 0);
    if (got != (ssize_t)sizeof(*out)) {
        memset(out, 0, sizeof(*out));
        return false;
    }
    return out->ok;
}

static void print_row(const char *proto, unsigned n, const struct run *r)
{
    printf("%7u | %-6s | %9.0f | %6.1f %6.1f | %7.2f %7.2f | %7.2f %7.2f | %5.2f %5.2f | %8.1f | "
           "%-3s | "
           "%s %s\n",
           n, proto, r->c.setup_s > 0 ? n / r->c.setup_s : 0, r->c.cpu_us, r->s.setup_cpu_us,
           r->c.rss_idle_kb, r->s.rss_idle_kb, r->c.rss_round_kb, r->s.rss_round_kb, r->c.fds_per,
           r->s.fds_per, r->c.round_s * 1e3, r->ok ? "yes" : "NO", r->c.fds_back ? "yes" : "no",
           r->s.fds_back ? "yes" : "no");
}

/* One protocol's run for N, its row printed; false if it failed its checks.
 * -W waits for TIME_WAIT sockets first; -S gives it a fresh source address. */
static bool run_proto(const char *proto, const char *label, unsigned n, unsigned window,
                      bool tw_wait, bool fresh_src, unsigned *runs, struct run *out)
{
    bool ok;

    if (tw_wait)
        wait_tw();
    if (fresh_src) {
        src_addr.sin_family = AF_INET;
        src_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (*runs)++ % 250);
    }
    ok = run_fresh(proto, n, window, out);
    print_row(label, n, out);
    return ok;
}

int main(int argc, char **argv)
{
    unsigned ns[32], nn = 0, window = 256, runs = 0;
    bool fresh_src = false, tw_wait = false, do_rdma = true, do_tcp = true, do_tcpx = true,
         check_mode = false, all_ok = true;

    self_exe = "/proc/self/exe";
    raise_nofile();
    if (argc == 4 && !strcmp(argv[1], "--server")) {
        unsigned n = (unsigned)strtoul(argv[3], NULL, 10);
        return strcmp(argv[2], "rdma") ? tcp_server(n, !strcmp(argv[2], "tcpx")) : rdma_server(n);
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            char *p = argv[++i];
            while (*p && nn < 32) {
                ns[nn++] = (unsigned)strtoul(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
            window = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "-p") && i + 1 < argc) {
            i++;
            bool all = !strcmp(argv[i], "all"), both = !strcmp(argv[i], "both");
            do_rdma = all || both || !strcmp(argv[i], "rdma");
            do_tcp = all || both || !strcmp(argv[i], "tcp");
            do_tcpx = all || !strcmp(argv[i], "tcpx");
        } else if (!strcmp(argv[i], "-S")) {
            fresh_src = true;
        } else if (!strcmp(argv[i], "-W")) {
            tw_wait = true;
        } else if (!strcmp(argv[i], "--check")) {
            check_mode = true;
        } else {
            fprintf(stderr,
                    "usage: bench_scale [-n N[,N...]] [-w WINDOW] [-p rdma|tcp|tcpx|both|all] "
                    "[-S] [-W] [--check]\n");
            return 2;
        }
    }
    if (!nn)
        ns[nn++] = 1000;
    if (!window)
        window = 1;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    printf("# RLIMIT_NOFILE %llu; per side: client server\n", (unsigned long long)rl.rlim_cur);
    printf("#     N | proto  |  setup/s  | CPU us/conn   | RSS KiB/conn idle | RSS KiB/conn "
           "round | fds/conn    | round ms | ok  | fds back\n");
    for (unsigned k = 0; k < nn; k++) {
        unsigned n = ns[k];
        struct run rr, tr, xr;

        if (!n)
            continue;
        printf("# N=%u: %ld TCP sockets in TIME_WAIT before the runs\n", n, time_wait());
        if (do_rdma)
            all_ok &= run_proto("rdma", "uiwarp", n, window, tw_wait, fresh_src, &runs, &rr);
        if (do_tcp)
            all_ok &= run_proto("tcp", "tcp", n, window, tw_wait, fresh_src, &runs, &tr);
        if (do_tcpx)
            all_ok &= run_proto("tcpx", "tcp+3", n, window, tw_wait, fresh_src, &runs, &xr);
        if (do_rdma && do_tcpx && rr.c.setup_s > 0 && xr.c.setup_s > 0)
            printf("%7u | ratio uiwarp/tcp+3: setup rate %.2fx, CPU/conn %.1fx (client) %.1fx "
                   "(server)\n",
                   n, xr.c.setup_s / rr.c.setup_s, xr.c.cpu_us > 0 ? rr.c.cpu_us / xr.c.cpu_us : 0,
                   xr.s.setup_cpu_us > 0 ? rr.s.setup_cpu_us / xr.s.setup_cpu_us : 0);
        if (do_rdma && do_tcp && rr.c.setup_s > 0 && tr.c.setup_s > 0 && tr.c.round_s > 0)
            printf("%7u | ratio uiwarp/tcp: setup rate %.2fx, round time %.2fx, CPU/conn %.1fx "
                   "(client) %.1fx (server)\n",
                   n, tr.c.setup_s / rr.c.setup_s, rr.c.round_s / tr.c.round_s,
                   tr.c.cpu_us > 0 ? rr.c.cpu_us / tr.c.cpu_us : 0,
                   tr.s.setup_cpu_us > 0 ? rr.s.setup_cpu_us / tr.s.setup_cpu_us : 0);
        fflush(stdout);
    }
    if (check_mode && !all_ok)
        fprintf(stderr, "bench_scale: a run failed its checks\n");
    return all_ok ? 0 : 1;
}
