/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The peer killed with SIGKILL (docs/FAULTS.md): uiwarp server in network
 * namespace A, clients in B over a veth pair (faults.h).
 *
 *  - warm-up: one client per operation type runs to the end, every result
 *    verified;
 *  - the client killed at a random point of each operation type (Send,
 *    Write + Read-back, Read, Fetch-and-Add, Compare-and-Swap): the server
 *    reports DISCONNECTED within FL_GONE_MS and releases everything;
 *  - the server killed at a random point of each operation type: the client
 *    gets a failed completion and RDMA_CM_EVENT_DISCONNECTED within
 *    FL_GONE_MS;
 *  - the client killed during connect, the server killed during accept;
 *  - 100 rounds of "client killed during Send" and 100 of "client killed
 *    during connect": the server's fd count back to its baseline, RSS within
 *    a small margin of it.
 */
#include "faults.h"

static struct fl_net net;
static struct fl_proc srv;
static unsigned srv_port;
static uint64_t worst_gone_ms;

static struct fl_client_arg cli_arg(enum fl_op op, unsigned nops)
{
    struct fl_client_arg a = {.ip = FL_A_IP,
                              .port = srv_port,
                              .op = op,
                              .nops = nops,
                              .size = op == FL_SEND ? 4096 : 65536};
    return a;
}

static void warmup(void)
{
    char buf[512];
    for (int op = FL_SEND; op <= FL_CSWP; op++) {
        struct fl_client_arg a = cli_arg(op, 50);
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        int n = fl_expect(&c, "DONE", buf, sizeof(buf), 30000);
        CHECK(n > 0);
        if (n <= 0)
            fprintf(stderr, "warm-up %s: no DONE\n", fl_op_name[op]);
        CHECK_EQ(fl_reap(&c, 10000), 0);
    }
    fl_drain(&srv);
}

/* The server's DISC of the connection from client port `port` within ms
 * after t0; the delay or -1. */
static long srv_disc_after(uint64_t t0, unsigned port, unsigned ms)
{
    char buf[512], want[32];
    uint64_t end = eng_now_ms() + ms;
    snprintf(want, sizeof(want), " port=%u", port);
    while (eng_now_ms() < end) {
        if (fl_expect(&srv, "DISC", buf, sizeof(buf), (unsigned)(end - eng_now_ms())) <= 0)
            return -1;
        const char *p = strstr(buf, want);
        if (!p || p[strlen(want)] != 0) {
            if (getenv("FL_VERBOSE"))
                fprintf(stderr, "  (want%s) %s\n", want, buf);
            continue; /* another (earlier) connection */
        }
        const char *t = strstr(buf, " t=");
        uint64_t at = t ? strtoull(t + 3, NULL, 10) : eng_now_ms();
        return at > t0 ? (long)(at - t0) : 0;
    }
    return -1;
}

static void kill_client_during(enum fl_op op, int rounds, bool quiet)
{
    char buf[512];
    for (int r = 0; r < rounds; r++) {
        struct fl_client_arg a = cli_arg(op, 0);
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        int n = fl_expect(&c, "OP1", buf, sizeof(buf), FL_EV_MS * 2);
        CHECK(n > 0);
        if (n <= 0) {
            fprintf(stderr, "kill client %s: never ran (%s)\n", fl_op_name[op], buf);
            fl_kill(&c);
            continue;
        }
        const char *pp = strstr(buf, "port=");
        unsigned port = pp ? (unsigned)atoi(pp + 5) : 0;
        fl_sleep_ms((unsigned)(fl_rand() % 60));
        uint64_t t0 = eng_now_ms();
        kill(c.pid, SIGKILL);
        CHECK_EQ(fl_reap(&c, 5000), 128 + SIGKILL);
        long d = srv_disc_after(t0, port, FL_GONE_MS);
        CHECK(d >= 0);
        if (d < 0)
            fprintf(stderr, "kill client during %s: server saw no DISCONNECTED in %d ms\n",
                    fl_op_name[op], FL_GONE_MS);
        else if ((uint64_t)d > worst_gone_ms)
            worst_gone_ms = (uint64_t)d;
        if (!quiet && r == 0)
            printf("  client killed during %s: server DISCONNECTED after %ld ms\n", fl_op_name[op],
                   d);
    }
    fl_drain(&srv);
}

static void kill_server_during(enum fl_op op, int rounds)
{
    char buf[512];
    for (int r = 0; r < rounds; r++) {
        unsigned port;
        struct fl_server_arg sa = {.ip = FL_A_IP};
        struct fl_proc s = fl_server_start(net.a, &sa, &port);
        CHECK(port != 0);
        struct fl_client_arg a = cli_arg(op, 0);
        a.port = port;
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        int n = fl_expect(&c, "OP1", buf, sizeof(buf), FL_EV_MS * 2);
        CHECK(n > 0);
        fl_sleep_ms((unsigned)(fl_rand() % 60));
        uint64_t t0 = eng_now_ms();
        fl_kill(&s);
        n = fl_expect(&c, "ERR", buf, sizeof(buf), FL_GONE_MS + FL_EV_MS);
        CHECK(n > 0);
        struct fl_err e;
        if (n > 0 && fl_parse_err(buf, &e)) {
            CHECK(e.t_wc != 0); /* a failed completion (the op or a flush) */
            CHECK_STR(e.cm, "RDMA_CM_EVENT_DISCONNECTED");
            CHECK(e.t_wc && e.t_wc - t0 <= FL_GONE_MS);
            CHECK(e.t_cm && e.t_cm - t0 <= FL_GONE_MS);
            if (e.t_wc > t0 && e.t_wc - t0 > worst_gone_ms)
                worst_gone_ms = e.t_wc - t0;
            if (r == 0)
                printf("  server killed during %s: client %s after %llu ms, %s after %llu ms, "
                       "async %s\n",
                       fl_op_name[op], e.wc, (unsigned long long)(e.t_wc - t0), e.cm,
                       (unsigned long long)(e.t_cm ? e.t_cm - t0 : 0), e.as);
        } else {
            fprintf(stderr, "server killed during %s: client said \"%s\"\n", fl_op_name[op],
                    n > 0 ? buf : "(nothing)");
        }
        CHECK_EQ(fl_reap(&c, FL_EV_MS), 3);
    }
}

/* Client killed at a random point of its connection setup. */
static void kill_client_connecting(int rounds)
{
    char buf[512];
    for (int r = 0; r < rounds; r++) {
        struct fl_client_arg a = cli_arg(FL_SEND, 0);
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        int n = fl_expect(&c, "CONNECTING", buf, sizeof(buf), FL_EV_MS * 2);
        CHECK(n > 0);
        unsigned us = (unsigned)(fl_rand() % 3000);
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
        kill(c.pid, SIGKILL);
        CHECK_EQ(fl_reap(&c, 5000), 128 + SIGKILL);
        fl_drain(&srv); /* the server's reports must not pile up */
    }
}

/* Server killed right after it got the request (while it sets up and
 * accepts): the client ends with an error event, never a hang. */
static void kill_server_accepting(int rounds)
{
    char buf[512];
    int hung = 0;
    for (int r = 0; r < rounds; r++) {
        unsigned port;
        struct fl_server_arg sa = {.ip = FL_A_IP};
        struct fl_proc s = fl_server_start(net.a, &sa, &port);
        struct fl_client_arg a = cli_arg(FL_SEND, 20);
        a.port = port;
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        int n = fl_expect(&s, "REQ", buf, sizeof(buf), FL_EV_MS * 2);
        CHECK(n > 0);
        unsigned us = (unsigned)(fl_rand() % 2000);
        struct timespec ts = {0, (long)us * 1000};
        nanosleep(&ts, NULL);
        fl_kill(&s);
        /* connect fails (exit 3), or it got up and its first op fails (3),
         * or, killed after the accept went out, runs... never: the server
         * is gone, so a DONE is impossible. 4 = a bounded wait expired. */
        int rc = fl_reap(&c, FL_EV_MS * 3);
        if (rc != 3)
            fprintf(stderr, "server killed during accept (%u us): client exit %d\n", us, rc);
        CHECK_EQ(rc, 3);
        hung += rc == 4 || rc == -1;
    }
    printf("  server killed during accept: %d rounds, %d hung\n", rounds, hung);
}

int main(void)
{
    int setup = fl_suite_start("test_faults_kill", false, &net, &srv, &srv_port);
    if (setup)
        return setup;
    if (!srv_port)
        TEST_MAIN_END();

    warmup();
    printf("warm-up done (every op type verified)\n");
    for (int op = FL_SEND; op <= FL_CSWP; op++)
        kill_client_during(op, 3, false);
    for (int op = FL_SEND; op <= FL_CSWP; op++)
        kill_server_during(op, 2);
    kill_client_connecting(10);
    kill_server_accepting(10);
    CHECK(fl_fd_settle(srv.pid, 0, 300) >= 0);

    /* 100 rounds: fds and RSS back to the baseline */
    kill_client_during(FL_SEND, 10, true);
    kill_client_connecting(10);
    int fd0 = fl_fd_settle(srv.pid, 0, 2000);
    fd0 = fl_fd_count(srv.pid);
    long rss0 = fl_rss_kb(srv.pid);
    uint64_t t0 = eng_now_ms();
    kill_client_during(FL_SEND, 100, true);
    int fd1 = fl_fd_settle(srv.pid, fd0, FL_EV_MS);
    long rss1 = fl_rss_kb(srv.pid);
    printf("100 rounds client killed during Send (%llu ms): server fds %d -> %d, RSS %ld -> %ld "
           "KiB\n",
           (unsigned long long)(eng_now_ms() - t0), fd0, fd1, rss0, rss1);
    CHECK_EQ(fd1, fd0);
    t0 = eng_now_ms();
    kill_client_connecting(100);
    int fd2 = fl_fd_settle(srv.pid, fd0, FL_EV_MS);
    long rss2 = fl_rss_kb(srv.pid);
    printf("100 rounds client killed during connect (%llu ms): server fds %d -> %d, RSS %ld -> "
           "%ld KiB\n",
           (unsigned long long)(eng_now_ms() - t0), fd0, fd2, rss0, rss2);
    CHECK_EQ(fd2, fd0);
    /* RSS: a small margin for allocator noise; not under ASan, whose
     * allocator keeps freed memory in quarantine. */
    if (FL_ASAN) {
        printf("(ASan build: RSS not checked, the allocator keeps freed memory)\n");
    } else {
        CHECK(rss1 - rss0 <= 4 * 1024);
        CHECK(rss2 - rss0 <= 4 * 1024);
    }
    /* still serving */
    {
        char buf[512];
        struct fl_client_arg a = cli_arg(FL_WRITE, 20);
        struct fl_proc c = fl_spawn(net.b, fl_client, &a);
        CHECK(fl_expect(&c, "DONE", buf, sizeof(buf), 20000) > 0);
        CHECK_EQ(fl_reap(&c, 10000), 0);
    }
    printf("worst detection of a killed peer: %llu ms (bound %d ms)\n",
           (unsigned long long)worst_gone_ms, FL_GONE_MS);
    fl_server_stop(&srv);
    TEST_MAIN_END();
}
