/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Helpers of the fault and hostile-peer suites (tests/faults/, see
 * docs/FAULTS.md): processes, network namespaces and nftables, and the two
 * rdma_cm programs every case runs in forked processes:
 *
 *   fl_server  a uiwarp server (librdmacm): accepts every request, gives
 *              each connection a 256 KiB region (Write / Read / atomics)
 *              and echoes every Send; reports its events on a control
 *              socket ("PORT n", "REQ", "EST", "DISC t=MS", "WCERR ...").
 *   fl_client  connects, then runs one operation type in a loop with every
 *              result verified; reports "UP", then "DONE" or "ERR ..." with
 *              the times (CLOCK_MONOTONIC ms, system-wide) at which the
 *              failed completion, the rdma_cm event and the async event
 *              came, or "HANG" when a bounded wait expired.
 *
 * The test process itself never opens a uiwarp device: it forks servers
 * and clients from a clean state, injects faults (signals, nft rules) and
 * reads /proc/PID for fd counts and RSS. Namespaces are made by unshare()
 * and held only by file descriptors of the test process: they and their
 * veth pairs vanish with it, whatever way it ends.
 */
#ifndef UIWARP_FAULTS_H
#define UIWARP_FAULTS_H

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine/eng_test.h"
#include "testutil.h"

#if defined(__SANITIZE_ADDRESS__)
#define FL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FL_ASAN 1
#endif
#endif
#ifndef FL_ASAN
#define FL_ASAN 0
#endif

#define FL_SKIP 77 /* ctest SKIP_RETURN_CODE */

#define FL_A_IP "10.77.0.1" /* server side (namespace A) */
#define FL_B_IP "10.77.0.2" /* client side (namespace B) */

/* Bounds of every wait (ms). */
#define FL_EV_MS   5000  /* an rdma_cm event or completion of a live peer */
#define FL_OP_MS   15000 /* one operation (covers a 1 s SIGSTOP, loss) */
#define FL_GONE_MS 5000  /* a killed peer (FIN / RST): error reported */
/* Dead peers (no FIN, no RST): UIWARP_PEER_TIMEOUT=3 in these tests; the
 * documented detection time is the timeout plus at most 2 s (docs/FAULTS.md);
 * the wait itself is bounded at twice that. */
#define FL_PEER_TIMEOUT_S 3
#define FL_DEAD_MS        ((FL_PEER_TIMEOUT_S + 2) * 1000)

static inline void fl_sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static uint64_t fl_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t fl_rand(void)
{
    fl_rng ^= fl_rng << 13;
    fl_rng ^= fl_rng >> 7;
    fl_rng ^= fl_rng << 17;
    return fl_rng;
}

/* ------------------------------------------------------------------------
 * /proc figures
 * ---------------------------------------------------------------------- */

static inline int fl_fd_count(pid_t pid)
{
    char path[64];
    int n = 0;
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* VmRSS in KiB, -1 if unknown. */
static inline long fl_rss_kb(pid_t pid)
{
    char path[64], line[256];
    long kb = -1;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* utime + stime of pid in ms. */
static inline long fl_cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

/* Wait (bounded) until pid has at most `want` fds; returns the last count. */
static inline int fl_fd_settle(pid_t pid, int want, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    int n;
    while ((n = fl_fd_count(pid)) > want && eng_now_ms() < end)
        fl_sleep_ms(20);
    return n;
}

/* ------------------------------------------------------------------------
 * Processes and the control channel (SOCK_SEQPACKET, text messages)
 * ---------------------------------------------------------------------- */

struct fl_proc {
    pid_t pid;
    int ctl;
};

typedef int (*fl_main_fn)(int ctl, void *arg);

/* Fork fn(ctl, arg) in network namespace nsfd (-1: the current one); the
 * child dies with the test process. */
static inline struct fl_proc fl_spawn(int nsfd, fl_main_fn fn, void *arg)
{
    struct fl_proc p = {-1, -1};
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return p;
    fflush(NULL);
    p.pid = fork();
    if (p.pid == 0) {
        close(sv[0]);
        int big = 16 << 20;
        if (setsockopt(sv[1], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) < 0)
            setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0) {
            perror("setns");
            _exit(120);
        }
        int rc = fn(sv[1], arg);
        fflush(NULL);
        _exit(rc);
    }
    close(sv[1]);
    p.ctl = sv[0];
    if (p.pid < 0)
        close(p.ctl), p.ctl = -1;
    return p;
}

static inline void fl_say(int ctl, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(buf) - 1)
        n = (int)sizeof(buf) - 1;
    /* Never blocks: a report the test is not reading yet must not stall
     * the server (fl_spawn gives the socket a large buffer; the tests read
     * the reports as they go). */
    (void)send(ctl, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Next message within ms: its length (buf NUL-terminated), 0 on timeout,
 * -1 on EOF (the process died). */
static inline int fl_hear(int ctl, char *buf, size_t cap, unsigned ms)
{
    struct pollfd pf = {.fd = ctl, .events = POLLIN};
    int r = poll(&pf, 1, (int)ms);
    if (r <= 0)
        return 0;
    ssize_t n = recv(ctl, buf, cap - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    return (int)n;
}

/* Wait for a message starting with `prefix` (others are printed and
 * dropped); its length, 0 on timeout, -1 on EOF. */
static inline int fl_expect(struct fl_proc *p, const char *prefix, char *buf, size_t cap,
                            unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    for (;;) {
        uint64_t now = eng_now_ms();
        if (now >= end)
            return 0;
        int n = fl_hear(p->ctl, buf, cap, (unsigned)(end - now));
        if (n <= 0)
            return n;
        if (strncmp(buf, prefix, strlen(prefix)) == 0)
            return n;
        if (getenv("FL_VERBOSE"))
            fprintf(stderr, "  [pid %d] %s\n", (int)p->pid, buf);
    }
}

/* Drop every pending message. */
static inline void fl_drain(struct fl_proc *p)
{
    char buf[512];
    while (fl_hear(p->ctl, buf, sizeof(buf), 0) > 0)
        ;
}

/* Reap within ms (SIGKILL after it); the exit status, 128+signal, or -1
 * when it had to be killed (a hang). */
static inline int fl_reap(struct fl_proc *p, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    int st = 0, rc = -1;
    if (p->pid <= 0)
        return -1;
    for (;;) {
        pid_t r = waitpid(p->pid, &st, WNOHANG);
        if (r == p->pid) {
            rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
        if (eng_now_ms() >= end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            rc = -1;
            break;
        }
        fl_sleep_ms(5);
    }
    if (p->ctl >= 0)
        close(p->ctl);
    p->ctl = -1;
    p->pid = -1;
    return rc;
}

/* Kill and reap. */
static inline void fl_kill(struct fl_proc *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGCONT);
        kill(p->pid, SIGKILL);
        fl_reap(p, 5000);
    }
}

/* ------------------------------------------------------------------------
 * Network namespaces, veth, nftables
 * ---------------------------------------------------------------------- */

struct fl_net {
    int root, a, b; /* namespace fds */
};

/* Run argv in namespace nsfd with `in` on its stdin (may be NULL); its exit
 * status, or -1. Bounded to 10 s. */
static inline int fl_run_in(int nsfd, const char *in, char *const argv[])
{
    int pfd[2];
    if (pipe(pfd) < 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0)
            _exit(120);
        dup2(pfd[0], 0);
        close(pfd[0]);
        close(pfd[1]);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(pfd[0]);
    if (in)
        (void)!write(pfd[1], in, strlen(in));
    close(pfd[1]);
    struct fl_proc p = {pid, -1};
    int rc = fl_reap(&p, 10000);
    if (rc != 0)
        fprintf(stderr, "faults: `%s %s %s...` exited %d\n", argv[0], argv[1] ? argv[1] : "",
                argv[1] && argv[2] ? argv[2] : "", rc);
    return rc;
}

static inline int fl_sh(int nsfd, const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    char *argv[] = {"sh", "-c", cmd, NULL};
    return fl_run_in(nsfd, NULL, argv);
}

/* Load an nft script in namespace nsfd. */
static inline int fl_nft(int nsfd, const char *script)
{
    char *argv[] = {"nft", "-f", "-", NULL};
    return fl_run_in(nsfd, script, argv);
}

static inline int fl_nft_flush(int nsfd)
{
    return fl_sh(nsfd, "nft flush ruleset");
}

static inline bool fl_have(const char *prog)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
    return system(cmd) == 0;
}

/* Skip (exit FL_SKIP) unless root; fail when a tool is missing. */
static inline void fl_need_root(const char *what)
{
    if (geteuid() != 0) {
        printf("SKIP: %s needs root (network namespaces, veth pairs, nftables)\n", what);
        fflush(stdout);
        exit(FL_SKIP);
    }
    if (!fl_have("ip") || !fl_have("nft")) {
        fprintf(stderr, "%s: `ip` and `nft` are needed (scripts/deps.sh test installs them)\n",
                what);
        exit(1);
    }
}

/* Two fresh namespaces A (FL_A_IP on veth fa) and B (FL_B_IP on fb),
 * joined by a veth pair, loopback up in both. With `second`, a second pair
 * fa2/fb2 (no addresses, rp_filter off) for the reordering path. */
static inline int fl_net_setup(struct fl_net *n, bool second)
{
    n->root = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (n->root < 0 || unshare(CLONE_NEWNET) < 0)
        return -errno;
    n->a = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (unshare(CLONE_NEWNET) < 0)
        return -errno;
    n->b = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (setns(n->root, CLONE_NEWNET) < 0 || n->a < 0 || n->b < 0)
        return -errno;
    /* The children inherit the fd of B (no CLOEXEC for them): peer netns. */
    int bfd = dup(n->b);
    int r = fl_sh(n->a,
                  "ip link set lo up && ip link add fa type veth peer name fb netns /proc/%d/fd/%d",
                  (int)getpid(), bfd);
    if (!r && second)
        r = fl_sh(n->a, "ip link add fa2 type veth peer name fb2 netns /proc/%d/fd/%d",
                  (int)getpid(), bfd);
    close(bfd);
    if (!r)
        r = fl_sh(n->a, "ip addr add " FL_A_IP "/24 dev fa && ip link set fa up");
    if (!r)
        r = fl_sh(n->b,
                  "ip link set lo up && ip addr add " FL_B_IP "/24 dev fb && ip link set fb up");
    if (!r && second) {
        r = fl_sh(n->a, "ip link set fa2 up && sysctl -qw net.ipv4.conf.all.rp_filter=0 "
                        "net.ipv4.conf.fa2.rp_filter=0");
        if (!r)
            r = fl_sh(n->b, "ip link set fb2 up && sysctl -qw net.ipv4.conf.all.rp_filter=0 "
                            "net.ipv4.conf.fb2.rp_filter=0");
    }
    return r ? -EIO : 0;
}

/* ------------------------------------------------------------------------
 * The uiwarp server
 * ---------------------------------------------------------------------- */

#define FL_SRV_BUF  (256u * 1024)     /* Write / Read region */
#define FL_WORDS    (FL_SRV_BUF - 64) /* two atomic words at the end */
#define FL_SLOT     4096
#define FL_NRECV    8
#define FL_SRV_MAXC 256

/* What a server advertises in its accept private data. */
struct fl_adv {
    uint64_t addr;
    uint32_t rkey;
    uint32_t magic;
};
#define FL_MAGIC 0x75697766u

struct fl_server_arg {
    const char *ip;          /* listen address */
    unsigned nofile;         /* RLIMIT_NOFILE, 0: as inherited */
    const char *stderr_path; /* NULL: inherited */
};

struct fl_sconn {
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    struct ibv_mr *mr, *rmr;
    uint8_t *buf, *rbuf;
    bool wcerr;
};

static struct ibv_pd *fl_srv_pd;

static inline void fl_sconn_free(struct fl_sconn *c)
{
    if (c->id && c->id->qp)
        rdma_destroy_qp(c->id);
    if (c->mr)
        ibv_dereg_mr(c->mr);
    if (c->rmr)
        ibv_dereg_mr(c->rmr);
    if (c->cq)
        ibv_destroy_cq(c->cq);
    free(c->buf);
    free(c->rbuf);
    if (c->id)
        rdma_destroy_id(c->id);
    memset(c, 0, sizeof(*c));
}

static inline int fl_post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *addr, uint32_t len,
                               uint64_t id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &sge, .num_sge = 1}, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

static inline int fl_sconn_setup(struct fl_sconn *c, struct rdma_cm_id *id)
{
    c->id = id;
    if (!fl_srv_pd)
        fl_srv_pd = ibv_alloc_pd(id->verbs);
    c->cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
    if (posix_memalign((void **)&c->buf, 4096, FL_SRV_BUF) ||
        posix_memalign((void **)&c->rbuf, 4096, 2 * FL_NRECV * FL_SLOT))
        return -ENOMEM;
    memset(c->buf, 0, FL_SRV_BUF);
    if (!fl_srv_pd || !c->cq)
        return -ENOMEM;
    c->mr = ibv_reg_mr(fl_srv_pd, c->buf, FL_SRV_BUF,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC);
    c->rmr = ibv_reg_mr(fl_srv_pd, c->rbuf, 2 * FL_NRECV * FL_SLOT, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr || !c->rmr)
        return -ENOMEM;
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.cap.max_send_wr = 32;
    qa.cap.max_recv_wr = FL_NRECV;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.send_cq = qa.recv_cq = c->cq;
    if (rdma_create_qp(id, fl_srv_pd, &qa))
        return -errno;
    for (unsigned i = 0; i < FL_NRECV; i++)
        if (fl_post_recv(id->qp, c->rmr, c->rbuf + i * FL_SLOT, FL_SLOT, i))
            return -EIO;
    struct fl_adv adv = {(uintptr_t)c->buf, c->mr->rkey, FL_MAGIC};
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &adv;
    cp.private_data_len = sizeof(adv);
    cp.initiator_depth = 4;
    cp.responder_resources = 4;
    return rdma_accept(id, &cp) ? -errno : 0;
}

/* Echo every Send back (from the second half of rbuf); report errors. */
static inline void fl_sconn_poll(int ctl, struct fl_sconn *c)
{
    struct ibv_wc wc[8];
    int n = ibv_poll_cq(c->cq, 8, wc);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            if (!c->wcerr)
                fl_say(ctl, "WCERR %s t=%llu", ibv_wc_status_str(wc[i].status),
                       (unsigned long long)eng_now_ms());
            c->wcerr = true;
            continue;
        }
        if (!(wc[i].opcode & IBV_WC_RECV))
            continue;
        unsigned slot = (unsigned)wc[i].wr_id;
        uint8_t *src = c->rbuf + slot * FL_SLOT, *dst = c->rbuf + (FL_NRECV + slot) * FL_SLOT;
        memcpy(dst, src, wc[i].byte_len);
        struct ibv_sge sge = {(uintptr_t)dst, wc[i].byte_len, c->rmr->lkey};
        struct ibv_send_wr wr = {.wr_id = 1000 + slot,
                                 .sg_list = &sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED};
        struct ibv_send_wr *bad;
        if (ibv_post_send(c->id->qp, &wr, &bad) ||
            fl_post_recv(c->id->qp, c->rmr, src, FL_SLOT, slot))
            c->wcerr = true;
    }
}

static inline int fl_server(int ctl, void *argp)
{
    const struct fl_server_arg *a = argp;
    static struct fl_sconn conns[FL_SRV_MAXC];
    struct rdma_event_channel *ch;
    struct rdma_cm_id *lid;

    if (a->stderr_path) {
        int fd = open(a->stderr_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            dup2(fd, 2), close(fd);
    }
    if (a->nofile) {
        struct rlimit rl = {a->nofile, a->nofile};
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    ch = rdma_create_event_channel();
    if (!ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP))
        return 10;
    fcntl(ch->fd, F_SETFL, O_NONBLOCK);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    inet_pton(AF_INET, a->ip, &sin.sin_addr);
    if (rdma_bind_addr(lid, (struct sockaddr *)&sin) || rdma_listen(lid, 128))
        return 11;
    fl_say(ctl, "PORT %u", ntohs(rdma_get_src_port(lid)));

    for (;;) {
        struct pollfd pf[2] = {{.fd = ch->fd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
        poll(pf, 2, 1);
        if (pf[1].revents) {
            char buf[64];
            ssize_t n = recv(ctl, buf, sizeof(buf) - 1, MSG_DONTWAIT);
            if (n <= 0 || (n >= 4 && memcmp(buf, "QUIT", 4) == 0))
                break;
        }
        struct rdma_cm_event *e;
        while (rdma_get_cm_event(ch, &e) == 0) {
            enum rdma_cm_event_type t = e->event;
            struct rdma_cm_id *id = e->id;
            struct fl_sconn *c = id->context;
            int st = e->status;
            rdma_ack_cm_event(e);
            if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
                int i = 0;
                while (i < FL_SRV_MAXC && conns[i].id)
                    i++;
                fl_say(ctl, "REQ t=%llu port=%u", (unsigned long long)eng_now_ms(),
                       ntohs(rdma_get_dst_port(id)));
                if (i == FL_SRV_MAXC) {
                    rdma_reject(id, NULL, 0);
                    rdma_destroy_id(id);
                    continue;
                }
                id->context = &conns[i];
                int r = fl_sconn_setup(&conns[i], id);
                if (r) {
                    fl_say(ctl, "ACCEPTFAIL %d", r);
                    fl_sconn_free(&conns[i]);
                }
                continue;
            }
            if (id == lid || !c) {
                fl_say(ctl, "LISTENEV %s %d", rdma_event_str(t), st);
                continue;
            }
            if (t == RDMA_CM_EVENT_ESTABLISHED) {
                fl_say(ctl, "EST t=%llu", (unsigned long long)eng_now_ms());
                continue;
            }
            /* DISCONNECTED, CONNECT_ERROR, UNREACHABLE, REJECTED, ...: the
             * connection is over; release everything. */
            fl_sconn_poll(ctl, c);
            fl_say(ctl, "DISC %s st=%d t=%llu port=%u", rdma_event_str(t), st,
                   (unsigned long long)eng_now_ms(), ntohs(rdma_get_dst_port(id)));
            fl_sconn_free(c);
        }
        for (int i = 0; i < FL_SRV_MAXC; i++)
            if (conns[i].id && conns[i].id->qp)
                fl_sconn_poll(ctl, &conns[i]);
    }
    for (int i = 0; i < FL_SRV_MAXC; i++)
        if (conns[i].id)
            fl_sconn_free(&conns[i]);
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(ch);
    return 0;
}

/* Start a server in nsfd; its port in *port (0 on failure). */
static inline struct fl_proc fl_server_start(int nsfd, struct fl_server_arg *a, unsigned *port)
{
    char buf[128];
    struct fl_proc p = fl_spawn(nsfd, fl_server, a);
    *port = 0;
    if (p.pid > 0 && fl_expect(&p, "PORT ", buf, sizeof(buf), FL_EV_MS) > 0)
        *port = (unsigned)atoi(buf + 5);
    return p;
}

/* The start of a suite (fl_need_root: no root, exit FL_SKIP): dead-peer
 * detection at 3 s, SIGPIPE ignored, the random stream seeded, the
 * namespaces set up (second: the second veth pair too) and one server
 * started in namespace A (*port 0 if it did not come up, one failed
 * check). 0, or 1 when the namespaces could not be set up (said). */
static inline int fl_suite_start(const char *what, bool second, struct fl_net *net,
                                 struct fl_proc *srv, unsigned *port)
{
    fl_need_root(what);
    setenv("UIWARP_PEER_TIMEOUT", "3", 1);
    signal(SIGPIPE, SIG_IGN);
    fl_rng ^= (uint64_t)getpid() << 17 ^ eng_now_ms();
    if (fl_net_setup(net, second)) {
        fprintf(stderr, "network namespace setup failed\n");
        return 1;
    }
    struct fl_server_arg sa = {.ip = FL_A_IP};
    *srv = fl_server_start(net->a, &sa, port);
    CHECK(*port != 0);
    return 0;
}

static inline void fl_server_stop(struct fl_proc *p)
{
    if (p->pid <= 0)
        return;
    fl_say(p->ctl, "QUIT");
    int rc = fl_reap(p, 10000);
    CHECK_EQ(rc, 0);
}

/* ------------------------------------------------------------------------
 * The client
 * ---------------------------------------------------------------------- */

/* FL_STREAM: batches of 8 Writes with no Read in between (fills the
 * peer's TCP window when it stops reading), one Read-back check at the end. */
enum fl_op { FL_SEND, FL_WRITE, FL_READ, FL_FADD, FL_CSWP, FL_IDLE, FL_STREAM, FL_NOPS };
static const char *const fl_op_name[FL_NOPS] = {"Send",    "Write", "Read",  "FetchAdd",
                                                "CmpSwap", "idle",  "stream"};

struct fl_client_arg {
    const char *ip;
    unsigned port;
    enum fl_op op;
    unsigned nops;    /* operations to run (0: until an error) */
    unsigned size;    /* bytes per Send / Write / Read */
    unsigned op_ms;   /* bound of one operation */
    unsigned conn_ms; /* bound of the connection setup */
};

struct fl_cli {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_mr *mr;
    uint8_t *buf; /* [0, 256K): local data, [256K, 256K + 8): atomic result */
    struct fl_adv adv;
    uint64_t t_wc, t_cm, t_async;
    char wc_status[48], cm_event[48], async_event[48];
};

#define FL_CLI_BUF (2 * FL_SRV_BUF)

/* Look at the rdma_cm channel and the async fd without waiting. */
static inline void fl_cli_watch(struct fl_cli *c)
{
    struct rdma_cm_event *e;
    while (rdma_get_cm_event(c->ch, &e) == 0) {
        if (!c->t_cm) {
            c->t_cm = eng_now_ms();
            snprintf(c->cm_event, sizeof(c->cm_event), "%s", rdma_event_str(e->event));
        }
        rdma_ack_cm_event(e);
    }
    struct ibv_async_event ae;
    if (c->id && c->id->verbs) {
        struct pollfd pf = {.fd = c->id->verbs->async_fd, .events = POLLIN};
        while (poll(&pf, 1, 0) == 1 && ibv_get_async_event(c->id->verbs, &ae) == 0) {
            if (!c->t_async) {
                c->t_async = eng_now_ms();
                snprintf(c->async_event, sizeof(c->async_event), "%s",
                         ibv_event_type_str(ae.event_type));
            }
            ibv_ack_async_event(&ae);
        }
    }
}

/* Wait for n successful completions on the send CQ (or a Recv on the
 * receive CQ when recv). 0: ok; 1: an error was seen (recorded); 2: bound. */
static inline int fl_cli_wait(struct fl_cli *c, struct ibv_cq *cq, int n, unsigned ms)
{
    uint64_t end = eng_now_ms() + ms;
    while (n > 0) {
        struct ibv_wc wc;
        int r = ibv_poll_cq(cq, 1, &wc);
        if (r == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                if (!c->t_wc) {
                    c->t_wc = eng_now_ms();
                    snprintf(c->wc_status, sizeof(c->wc_status), "%s",
                             ibv_wc_status_str(wc.status));
                }
                return 1;
            }
            n--;
            continue;
        }
        fl_cli_watch(c);
        if (c->t_cm || c->t_async)
            return 1;
        if (eng_now_ms() >= end)
            return 2;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static inline int fl_cli_post(struct fl_cli *c, enum ibv_wr_opcode op, uint64_t laddr, uint32_t len,
                              uint64_t raddr, uint64_t cmp, uint64_t swp)
{
    struct ibv_sge sge = {.addr = laddr, .length = len, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad;
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
        wr.wr.atomic.remote_addr = raddr;
        wr.wr.atomic.rkey = c->adv.rkey;
        wr.wr.atomic.compare_add = cmp;
        wr.wr.atomic.swap = swp;
    } else {
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = c->adv.rkey;
    }
    return ibv_post_send(c->id->qp, &wr, &bad);
}

/* Next rdma_cm event within ms: its type, or -1. */
static inline int fl_cli_event(struct fl_cli *c, unsigned ms, struct fl_adv *adv)
{
    struct pollfd pf = {.fd = c->ch->fd, .events = POLLIN};
    struct rdma_cm_event *e;
    if (poll(&pf, 1, (int)ms) != 1 || rdma_get_cm_event(c->ch, &e))
        return -1;
    int t = e->event;
    if (adv && e->param.conn.private_data_len >= sizeof(*adv))
        memcpy(adv, e->param.conn.private_data, sizeof(*adv));
    rdma_ack_cm_event(e);
    return t;
}

static inline void fl_cli_report_err(int ctl, struct fl_cli *c, const char *what)
{
    /* After the first sign, wait (bounded) for the others: the completion,
     * the rdma_cm event and the async event. */
    uint64_t end = eng_now_ms() + FL_EV_MS, grace = 0;
    while ((!c->t_wc || !c->t_cm || !c->t_async) && eng_now_ms() < end) {
        /* the async event (not raised for every kind of end) gets 300 ms
         * more once the completion and the rdma_cm event are in */
        if (c->t_wc && c->t_cm) {
            if (!grace)
                grace = eng_now_ms() + 300;
            else if (eng_now_ms() >= grace)
                break;
        }
        struct ibv_wc wc;
        if (c->id && c->id->qp) {
            if (ibv_poll_cq(c->id->send_cq, 1, &wc) == 1 ||
                ibv_poll_cq(c->id->recv_cq, 1, &wc) == 1) {
                if (wc.status != IBV_WC_SUCCESS && !c->t_wc) {
                    c->t_wc = eng_now_ms();
                    snprintf(c->wc_status, sizeof(c->wc_status), "%s",
                             ibv_wc_status_str(wc.status));
                }
                continue;
            }
        }
        fl_cli_watch(c);
        fl_sleep_ms(2);
    }
    fl_say(ctl, "ERR %s wc=%s@%llu cm=%s@%llu async=%s@%llu", what, c->t_wc ? c->wc_status : "-",
           (unsigned long long)c->t_wc, c->t_cm ? c->cm_event : "-", (unsigned long long)c->t_cm,
           c->t_async ? c->async_event : "-", (unsigned long long)c->t_async);
}

static inline int fl_client(int ctl, void *argp)
{
    const struct fl_client_arg *a = argp;
    struct fl_cli cc, *c = &cc;
    unsigned conn_ms = a->conn_ms ? a->conn_ms : FL_EV_MS;
    unsigned op_ms = a->op_ms ? a->op_ms : FL_OP_MS;
    unsigned size = a->size ? a->size : 4096;

    memset(c, 0, sizeof(*c));
    c->ch = rdma_create_event_channel();
    if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP))
        return 10;
    fcntl(c->ch->fd, F_SETFL, O_NONBLOCK);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)a->port)};
    inet_pton(AF_INET, a->ip, &sin.sin_addr);
    int t;
    if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sin, 2000) ||
        (t = fl_cli_event(c, conn_ms, NULL)) != RDMA_CM_EVENT_ADDR_RESOLVED ||
        rdma_resolve_route(c->id, 2000) ||
        (t = fl_cli_event(c, conn_ms, NULL)) != RDMA_CM_EVENT_ROUTE_RESOLVED) {
        fl_say(ctl, "ERR resolve");
        return 3;
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.cap.max_send_wr = 32;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    if (rdma_create_qp(c->id, NULL, &qa) || posix_memalign((void **)&c->buf, 4096, FL_CLI_BUF))
        return 11;
    c->mr = ibv_reg_mr(c->id->pd, c->buf, FL_CLI_BUF, IBV_ACCESS_LOCAL_WRITE);
    if (!c->mr)
        return 12;
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.initiator_depth = 4;
    cp.responder_resources = 4;
    for (unsigned i = 0; i < 4; i++)
        fl_post_recv(c->id->qp, c->mr, c->buf + FL_SRV_BUF + 4096 + i * FL_SLOT, FL_SLOT, i);
    fl_say(ctl, "CONNECTING t=%llu", (unsigned long long)eng_now_ms());
    if (rdma_connect(c->id, &cp)) {
        fl_say(ctl, "ERR connect %d", errno);
        return 3;
    }
    t = fl_cli_event(c, conn_ms, &c->adv);
    if (t != RDMA_CM_EVENT_ESTABLISHED || c->adv.magic != FL_MAGIC) {
        fl_say(ctl, "ERR connect-event %s", t < 0 ? "none" : rdma_event_str(t));
        return t < 0 ? 4 : 3;
    }
    fl_say(ctl, "UP t=%llu", (unsigned long long)eng_now_ms());

    uint64_t raddr = c->adv.addr, word = c->adv.addr + FL_WORDS;
    uint64_t *res = (uint64_t *)(c->buf + FL_SRV_BUF);
    uint8_t *echo = c->buf + FL_SRV_BUF + 4096;
    unsigned echo_slot = 0;
    int w = 0;
    if (size > FL_SRV_BUF / 2)
        size = FL_SRV_BUF / 2;
    if (a->op == FL_READ) { /* the region Reads will return */
        eng_fill(c->buf, FL_SRV_BUF / 2, 777);
        if (fl_cli_post(c, IBV_WR_RDMA_WRITE, (uintptr_t)c->buf, FL_SRV_BUF / 2, raddr, 0, 0) ||
            (w = fl_cli_wait(c, c->id->send_cq, 1, op_ms)))
            goto out;
    }
    if (a->op == FL_IDLE)
        fl_say(ctl, "OP1 t=%llu port=%u", (unsigned long long)eng_now_ms(),
               ntohs(rdma_get_src_port(c->id)));
    for (unsigned i = 0; !a->nops || i < a->nops; i++) {
        uint32_t seed = i * 7919u + 1;
        uint64_t lo = (uintptr_t)c->buf;
        switch (a->op) {
        case FL_SEND:
            if (size > FL_SLOT)
                size = FL_SLOT;
            eng_fill(c->buf, size, seed);
            if (fl_cli_post(c, IBV_WR_SEND, lo, size, 0, 0, 0) ||
                (w = fl_cli_wait(c, c->id->send_cq, 1, op_ms)) ||
                (w = fl_cli_wait(c, c->id->recv_cq, 1, op_ms)))
                goto out;
            if (eng_diff(echo + echo_slot * FL_SLOT, size, seed) >= 0) {
                fl_say(ctl, "BAD echo %u", i);
                return 5;
            }
            fl_post_recv(c->id->qp, c->mr, echo + echo_slot * FL_SLOT, FL_SLOT, echo_slot);
            echo_slot = (echo_slot + 1) % 4;
            break;
        case FL_WRITE: { /* Write, then Read it back and compare */
            uint64_t off = (i * (uint64_t)size) % (FL_SRV_BUF / 2);
            if (off + size > FL_SRV_BUF / 2)
                off = 0;
            eng_fill(c->buf, size, seed);
            memset(c->buf + FL_SRV_BUF / 2, 0, size);
            if (fl_cli_post(c, IBV_WR_RDMA_WRITE, lo, size, raddr + off, 0, 0) ||
                fl_cli_post(c, IBV_WR_RDMA_READ, lo + FL_SRV_BUF / 2, size, raddr + off, 0, 0) ||
                (w = fl_cli_wait(c, c->id->send_cq, 2, op_ms)))
                goto out;
            if (eng_diff(c->buf + FL_SRV_BUF / 2, size, seed) >= 0) {
                fl_say(ctl, "BAD write %u", i);
                return 5;
            }
            break;
        }
        case FL_READ:
            memset(c->buf + FL_SRV_BUF / 2, 0, size);
            if (fl_cli_post(c, IBV_WR_RDMA_READ, lo + FL_SRV_BUF / 2, size, raddr, 0, 0) ||
                (w = fl_cli_wait(c, c->id->send_cq, 1, op_ms)))
                goto out;
            if (eng_diff(c->buf + FL_SRV_BUF / 2, size, 777) >= 0) {
                fl_say(ctl, "BAD read %u", i);
                return 5;
            }
            break;
        case FL_FADD:
            *res = ~0ull;
            if (fl_cli_post(c, IBV_WR_ATOMIC_FETCH_AND_ADD, (uintptr_t)res, 8, word, 1, 0) ||
                (w = fl_cli_wait(c, c->id->send_cq, 1, op_ms)))
                goto out;
            if (*res != i) {
                fl_say(ctl, "BAD fadd %u got %llu", i, (unsigned long long)*res);
                return 5;
            }
            break;
        case FL_CSWP:
            *res = ~0ull;
            if (fl_cli_post(c, IBV_WR_ATOMIC_CMP_AND_SWP, (uintptr_t)res, 8, word + 8, i, i + 1) ||
                (w = fl_cli_wait(c, c->id->send_cq, 1, op_ms)))
                goto out;
            if (*res != i) {
                fl_say(ctl, "BAD cswp %u got %llu", i, (unsigned long long)*res);
                return 5;
            }
            break;
        case FL_STREAM: {
            unsigned chunk = FL_SRV_BUF / 16;
            for (unsigned k = 0; k < 8; k++)
                if (fl_cli_post(c, IBV_WR_RDMA_WRITE, lo + k * chunk, chunk, raddr + k * chunk, 0,
                                0))
                    goto out;
            if ((w = fl_cli_wait(c, c->id->send_cq, 8, op_ms)))
                goto out;
            if (a->nops && i + 1 == a->nops) {
                eng_fill(c->buf, chunk, seed);
                memset(c->buf + FL_SRV_BUF / 2, 0, chunk);
                if (fl_cli_post(c, IBV_WR_RDMA_WRITE, lo, chunk, raddr, 0, 0) ||
                    fl_cli_post(c, IBV_WR_RDMA_READ, lo + FL_SRV_BUF / 2, chunk, raddr, 0, 0) ||
                    (w = fl_cli_wait(c, c->id->send_cq, 2, op_ms)))
                    goto out;
                if (eng_diff(c->buf + FL_SRV_BUF / 2, chunk, seed) >= 0) {
                    fl_say(ctl, "BAD stream %u", i);
                    return 5;
                }
            }
            break;
        }
        default: /* idle: a posted receive, nothing sent */
            w = fl_cli_wait(c, c->id->recv_cq, 1, op_ms);
            goto out;
        }
        if (i == 0)
            fl_say(ctl, "OP1 t=%llu port=%u", (unsigned long long)eng_now_ms(),
                   ntohs(rdma_get_src_port(c->id)));
    }
    fl_say(ctl, "DONE t=%llu", (unsigned long long)eng_now_ms());
    rdma_disconnect(c->id);
    return 0;
out:
    if (w == 2) {
        fl_say(ctl, "HANG %s", fl_op_name[a->op]);
        return 4;
    }
    fl_cli_report_err(ctl, c, fl_op_name[a->op]);
    return 3;
}

/* Parse "ERR what wc=S@T cm=E@T async=A@T" into its times (0: absent). */
struct fl_err {
    char wc[48], cm[48], as[48];
    uint64_t t_wc, t_cm, t_as;
};
static inline bool fl_parse_err(const char *m, struct fl_err *e)
{
    unsigned long long a = 0, b = 0, c = 0;
    memset(e, 0, sizeof(*e));
    const char *p = strstr(m, " wc=");
    if (!p || sscanf(p, " wc=%47[^@]@%llu cm=%47[^@]@%llu async=%47[^@]@%llu", e->wc, &a, e->cm, &b,
                     e->as, &c) != 6)
        return false;
    e->t_wc = a;
    e->t_cm = b;
    e->t_as = c;
    return true;
}

#endif
