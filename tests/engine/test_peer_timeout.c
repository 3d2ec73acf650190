/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Dead peers (issue 12 item 5, docs/ENGINE.md "Dead peers"): two uiwarp
 * endpoints of this process in two network namespaces joined by a veth
 * pair, a connected QP pair with verified data, then nftables drops all
 * traffic in one namespace (no FIN, no RST: a vanished host). The client
 * keeps sending (a sender: TCP_USER_TIMEOUT), the server only waits with a
 * receive posted (an idle receiver: keepalive). Each side must see, within
 * the documented time: the QP in ERR, its receive flushed with
 * IBV_WC_WR_FLUSH_ERR (and the stuck send completed in error),
 * IBV_EVENT_QP_FATAL, and DISCONNECTED with -ETIMEDOUT.
 *
 * Two cases run at once in child processes (UIWARP_PEER_TIMEOUT is read
 * once per process): "short" with UIWARP_PEER_TIMEOUT=3 (detection in 3-8 s
 * expected, 10 s allowed), and "default" with the variable unset (30 s:
 * detection within 45 s; the only long case, about 32 s).
 *
 * Needs root (network namespaces, nftables); otherwise it says so and
 * exits 77 (ctest: skipped). Namespaces are created and deleted here.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "cm_test.h"
#include "testutil.h"

extern char **environ;

#define EV_MS 5000

static char nsA[32], nsB[32], ifA[16], ifB[16];
static int subnet;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int st = system(cmd);
    if (st != 0)
        fprintf(stderr, "test_peer_timeout: `%s` failed (%d)\n", cmd, st);
    return st;
}

static void names(const char *tag, int parent)
{
    snprintf(nsA, sizeof(nsA), "uiwpt%d%sA", parent, tag);
    snprintf(nsB, sizeof(nsB), "uiwpt%d%sB", parent, tag);
    snprintf(ifA, sizeof(ifA), "pt%d%.1sA", parent % 1000000, tag);
    snprintf(ifB, sizeof(ifB), "pt%d%.1sB", parent % 1000000, tag);
}

static void net_down(void)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", nsA,
             nsB);
    int st = system(cmd); /* the veth pair goes with its namespaces */
    (void)st;
}

static bool net_up(void)
{
    net_down();
    return sh("ip netns add %s", nsA) == 0 && sh("ip netns add %s", nsB) == 0 &&
           /* made inside the namespaces: never in the host's for a moment,
            * where programs of tests running beside this one list devices */
           sh("ip -n %s link add %s type veth peer name %s netns %s", nsA, ifA, ifB, nsB) == 0 &&
           sh("ip -n %s addr add 10.%d.0.1/24 dev %s", nsA, subnet, ifA) == 0 &&
           sh("ip -n %s addr add 10.%d.0.2/24 dev %s", nsB, subnet, ifB) == 0 &&
           sh("ip -n %s link set %s up", nsA, ifA) == 0 &&
           sh("ip -n %s link set %s up", nsB, ifB) == 0 &&
           sh("ip -n %s link set lo up", nsA) == 0 && sh("ip -n %s link set lo up", nsB) == 0;
}

/* Everything in and out of namespace A dropped: a peer gone silent. */
static bool net_drop(void)
{
    return sh("ip netns exec %s nft 'add table inet uiwdrop; "
              "add chain inet uiwdrop i { type filter hook input priority 0 ; policy drop ; }; "
              "add chain inet uiwdrop o { type filter hook output priority 0 ; policy drop ; }'",
              nsA) == 0;
}

static bool enter_ns(const char *ns)
{
    char path[128];
    snprintf(path, sizeof(path), "/run/netns/%s", ns);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc == 0;
}

static struct sockaddr_in addr4(int host, uint16_t port)
{
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    char ip[32];
    snprintf(ip, sizeof(ip), "10.%d.0.%d", subnet, host);
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static bool expect_event(struct uiw_cm_channel *ch, enum uiw_cm_event_type type,
                         struct uiw_cm_event *ev, const char *what)
{
    int rc = eng_cm_next(ch, ev, EV_MS);
    tu_checks++;
    if (rc < 0 || ev->type != type || ev->status != 0) {
        tu_failed++;
        fprintf(stderr, "%s: expected event %d, got rc %d type %d status %d\n", what, (int)type, rc,
                rc ? -1 : (int)ev->type, rc ? 0 : ev->status);
        return false;
    }
    return true;
}

struct side {
    const char *name;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *buf;
    struct uiw_cm_channel *ch;
    struct uiw_conn *conn;
    /* outcome */
    uint64_t t_disc, t_fatal, t_flush;
    int disc_status;
    int flushed_recv, failed_send;
};

enum { BUF = 8 << 20, SMALL = 4096 };

static struct ibv_context *g_ctx;

static bool side_make(struct side *s, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->name = name;
    s->buf = malloc(BUF);
    s->pd = ibv_alloc_pd(g_ctx);
    s->cq = s->pd ? ibv_create_cq(g_ctx, 64, NULL, NULL, 0) : NULL;
    s->ch = eng_cm_chan();
    if (!s->buf || !s->cq || !s->ch)
        return false;
    s->mr = ibv_reg_mr(s->pd, s->buf, BUF, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_qp_cap cap = {
        .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1};
    s->qp = eng_qp_init(s->pd, s->cq, s->cq, NULL, cap, false, ENG_ACCESS_ALL, IBV_QP_PKEY_INDEX);
    return s->mr && s->qp;
}

static void side_free(struct side *s)
{
    if (s->qp)
        ibv_destroy_qp(s->qp);
    if (s->conn)
        uiw_cm_conn_destroy(s->conn);
    if (s->mr)
        ibv_dereg_mr(s->mr);
    if (s->cq)
        ibv_destroy_cq(s->cq);
    if (s->pd)
        ibv_dealloc_pd(s->pd);
    if (s->ch)
        uiw_cm_channel_destroy(s->ch);
    free(s->buf);
}

static int post_recv(struct side *s, uint64_t id, uint32_t off, uint32_t len)
{
    return eng_post_recv(s->qp, s->buf + off, len, s->mr->lkey, id);
}

static int post_send(struct side *s, uint64_t id, uint32_t len)
{
    return eng_post(s->qp, IBV_WR_SEND, s->buf, len, s->mr->lkey, 0, 0, id, true);
}

/* Collect completions, async events and CM events until both sides saw
 * everything or the deadline passed. */
static void watch(struct side *sd[2], uint64_t t0, uint64_t limit_ms)
{
    int afd = g_ctx->async_fd;
    fcntl(afd, F_SETFL, fcntl(afd, F_GETFL) | O_NONBLOCK);
    for (;;) {
        uint64_t now = eng_now_ms();
        bool done = true;
        for (int i = 0; i < 2; i++)
            done &= sd[i]->t_disc && sd[i]->t_fatal && sd[i]->t_flush;
        if (done || now - t0 > limit_ms)
            return;
        struct pollfd p[3] = {{.fd = afd, .events = POLLIN},
                              {.fd = uiw_cm_channel_fd(sd[0]->ch), .events = POLLIN},
                              {.fd = uiw_cm_channel_fd(sd[1]->ch), .events = POLLIN}};
        poll(p, 3, 20);
        struct ibv_async_event ae;
        while (ibv_get_async_event(g_ctx, &ae) == 0) {
            for (int i = 0; i < 2; i++)
                if (ae.event_type == IBV_EVENT_QP_FATAL && ae.element.qp == sd[i]->qp &&
                    !sd[i]->t_fatal)
                    sd[i]->t_fatal = eng_now_ms();
            ibv_ack_async_event(&ae);
        }
        for (int i = 0; i < 2; i++) {
            struct uiw_cm_event ev;
            while (uiw_cm_get_event(sd[i]->ch, &ev) == 0) {
                if (ev.type == UIW_CM_DISCONNECTED && !sd[i]->t_disc) {
                    sd[i]->t_disc = eng_now_ms();
                    sd[i]->disc_status = ev.status;
                } else {
                    fprintf(stderr, "%s: unexpected event %d status %d\n", sd[i]->name,
                            (int)ev.type, ev.status);
                }
            }
            struct ibv_wc wc;
            while (ibv_poll_cq(sd[i]->cq, 1, &wc) == 1) {
                if (wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id >= 100 && wc.wr_id < 200)
                    sd[i]->flushed_recv++;
                else if (wc.wr_id >= 200 && wc.status != IBV_WC_SUCCESS)
                    sd[i]->failed_send++;
                if (wc.status != IBV_WC_SUCCESS && !sd[i]->t_flush)
                    sd[i]->t_flush = eng_now_ms();
            }
        }
    }
}

static void run_case(const char *tag, int parent, unsigned expect_s, unsigned limit_s)
{
    names(tag, parent);
    if (!net_up()) {
        CHECK(!"namespaces and veth set up");
        net_down();
        return;
    }
    g_ctx = eng_open_lo(true);
    CHECK(g_ctx != NULL);
    struct side cl, sv;
    bool ok =
        g_ctx && side_make(&cl, "client (sender)") && side_make(&sv, "server (idle receiver)");
    CHECK(ok);
    struct uiw_listener *l = NULL;
    struct uiw_cm_event ev;
    int orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (!ok)
        goto out;
    /* the server in A, the client in B (a socket keeps its namespace) */
    CHECK(enter_ns(nsA));
    struct sockaddr_in la = addr4(1, 0), sa;
    CHECK_EQ(uiw_cm_listen(NULL, (struct sockaddr *)&la, 16, sv.ch, NULL, &l), 0);
    struct sockaddr_storage bound;
    if (!l)
        goto out;
    uiw_cm_listener_addr(l, &bound);
    sa = addr4(1, ntohs(((struct sockaddr_in *)&bound)->sin_port));
    CHECK(enter_ns(nsB));
    struct uiw_conn_param p = {.ird = 4, .ord = 4};
    CHECK_EQ(uiw_cm_connect(cl.qp, NULL, (struct sockaddr *)&sa, &p, cl.ch, NULL, &cl.conn), 0);
    CHECK_EQ(setns(orig, CLONE_NEWNET), 0);
    if (!cl.conn || eng_cm_next(sv.ch, &ev, EV_MS) != 0 || ev.type != UIW_CM_CONNECT_REQUEST) {
        CHECK(!"CONNECT_REQUEST");
        goto out;
    }
    sv.conn = ev.conn;
    CHECK_EQ(uiw_cm_accept(sv.conn, sv.qp, &p, NULL), 0);
    if (!expect_event(cl.ch, UIW_CM_ESTABLISHED, &ev, "client established"))
        goto out;
    /* verified data before the cut */
    struct ibv_wc wc;
    eng_fill(cl.buf, SMALL, 5);
    CHECK_EQ(post_recv(&sv, 1, 0, SMALL), 0);
    CHECK_EQ(post_send(&cl, 2, SMALL), 0);
    CHECK(eng_poll_one(cl.cq, &wc, EV_MS) == 1 && wc.status == IBV_WC_SUCCESS);
    CHECK(eng_poll_one(sv.cq, &wc, EV_MS) == 1 && wc.status == IBV_WC_SUCCESS &&
          wc.byte_len == SMALL);
    CHECK_EQ(eng_diff(sv.buf, SMALL, 5), -1);
    expect_event(sv.ch, UIW_CM_ESTABLISHED, &ev, "server established");
    /* receives that only a flush can complete */
    CHECK_EQ(post_recv(&sv, 100, 0, SMALL), 0);
    CHECK_EQ(post_recv(&cl, 101, 0, SMALL), 0);

    CHECK(net_drop());
    uint64_t t0 = eng_now_ms();
    /* the client keeps sending: 8 MiB cannot leave before the cut is
     * noticed, so its socket holds unacknowledged data */
    CHECK_EQ(post_send(&cl, 200, BUF), 0);
    CHECK_EQ(post_send(&cl, 201, SMALL), 0);
    struct side *sd[2] = {&cl, &sv};
    watch(sd, t0, (uint64_t)limit_s * 1000u + 2000u);
    for (int i = 0; i < 2; i++) {
        struct side *s = sd[i];
        double td = s->t_disc ? (double)(s->t_disc - t0) / 1000.0 : -1.0;
        printf("test_peer_timeout: %s: UIWARP_PEER_TIMEOUT=%u: %s: DISCONNECTED %d after %.2f s, "
               "QP_FATAL after %.2f s, first error completion after %.2f s, %d receive(s) "
               "flushed, %d send(s) failed\n",
               tag, expect_s, s->name, s->disc_status, td,
               s->t_fatal ? (double)(s->t_fatal - t0) / 1000.0 : -1.0,
               s->t_flush ? (double)(s->t_flush - t0) / 1000.0 : -1.0, s->flushed_recv,
               s->failed_send);
        CHECK(s->t_disc != 0);
        CHECK_EQ(s->disc_status, -ETIMEDOUT);
        CHECK(s->t_fatal != 0);
        CHECK_EQ(s->flushed_recv, 1);
        CHECK_EQ(eng_qp_state(s->qp), IBV_QPS_ERR);
        /* not before the timeout can have run out, not much after */
        CHECK(s->t_disc == 0 || s->t_disc - t0 >= (uint64_t)expect_s * 1000u / 2);
        CHECK(s->t_disc == 0 || s->t_disc - t0 <= (uint64_t)limit_s * 1000u);
    }
    CHECK(cl.failed_send >= 1); /* the 8 MiB Send did not complete */
out:
    if (orig >= 0) {
        (void)setns(orig, CLONE_NEWNET);
        close(orig);
    }
    side_free(&cl);
    side_free(&sv);
    if (l)
        uiw_cm_listener_destroy(l);
    if (g_ctx)
        ibv_close_device(g_ctx);
    net_down();
}

static void run_child(const char *tag, const char *envvar, pid_t *pid, int *pfd)
{
    char *envp[256];
    int k = 0;
    for (char **e = environ; *e && k < 240; e++)
        if (strncmp(*e, "UIWARP_PEER_TIMEOUT=", 20) != 0)
            envp[k++] = *e;
    if (envvar)
        envp[k++] = (char *)envvar;
    envp[k] = NULL;
    int p[2];
    *pid = -1;
    if (pipe(p) < 0)
        return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addclose(&fa, p[0]);
    posix_spawn_file_actions_adddup2(&fa, p[1], 3);
    char ppid[16];
    snprintf(ppid, sizeof(ppid), "%d", (int)getpid());
    char *argv[] = {(char *)"test_peer_timeout", (char *)"--case", (char *)tag, ppid, NULL};
    if (posix_spawn(pid, "/proc/self/exe", &fa, NULL, argv, envp) != 0)
        *pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    *pfd = p[0];
}

static void reap(const char *tag, pid_t pid, int pfd)
{
    char buf[128] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof(buf) - 1 && (r = read(pfd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)r;
    close(pfd);
    int st = 0;
    if (pid > 0)
        waitpid(pid, &st, 0);
    names(tag, (int)getpid());
    net_down(); /* in case the child died half-way */
    unsigned long ch = 0, fa = 0;
    if (pid <= 0 || sscanf(buf, "%lu %lu", &ch, &fa) != 2 || !WIFEXITED(st)) {
        fprintf(stderr, "case %s: crashed or no result (status 0x%x)\n", tag, st);
        tu_checks++;
        tu_failed++;
        return;
    }
    printf("test_peer_timeout: case %s: %lu checks, %lu failed\n", tag, ch, fa);
    tu_checks += ch;
    tu_failed += fa;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 4 && strcmp(argv[1], "--case") == 0) {
        int parent = atoi(argv[3]);
        bool shrt = strcmp(argv[2], "short") == 0;
        subnet = 100 + (parent % 50) * 2 + (shrt ? 0 : 1);
        if (shrt)
            run_case("short", parent, 3, 10);
        else
            run_case("default", parent, 30, 45);
        dprintf(3, "%lu %lu\n", tu_checks, tu_failed);
        return tu_failed ? 1 : 0;
    }
    if (geteuid() != 0) {
        printf("test_peer_timeout: SKIPPED: needs root for network namespaces and nftables\n");
        return 77;
    }
    if (system("command -v nft >/dev/null && command -v ip >/dev/null") != 0) {
        printf("test_peer_timeout: SKIPPED: ip or nft not installed\n");
        return 77;
    }
    pid_t p1, p2;
    int f1 = -1, f2 = -1;
    run_child("short", "UIWARP_PEER_TIMEOUT=3", &p1, &f1);
    run_child("default", NULL, &p2, &f2); /* the default: 30 s */
    if (f1 >= 0)
        reap("short", p1, f1);
    if (f2 >= 0)
        reap("default", p2, f2);
    TEST_MAIN_END();
}
