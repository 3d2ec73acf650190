/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connection management under hostile peers and resource limits (issue 12,
 * items 1-3): every path that ends an incoming connection releases its
 * socket, timer and memory; descriptor exhaustion at accept does not make
 * the progress thread spin and heals by itself; resource failures come back
 * as the right errno.
 *
 * Raw TCP clients in this process write MPA Requests built with the wire
 * core (uiw_mpa_encode) to a uiwarp listener. Descriptors are counted in
 * /proc/self/fd and connection objects with uiw_cm_conn_count(); both must
 * return to their baseline after each storm.
 *
 * Cases that need their own process (an MPA timeout, a lowered
 * RLIMIT_NOFILE) re-execute this program with "--case NAME".
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "cm_test.h"
#include "testutil.h"

extern char **environ;

#define EV_MS    5000
#define QUIET_MS 200
#define STORM    300

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

/* Open descriptors of this process, the directory stream's own excluded.
 * The stream stays open (counted out) so that counting works when no
 * descriptor is left. */
static int count_fds(void)
{
    static DIR *d;
    int n = 0;
    if (!d)
        d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    rewinddir(d);
    while (readdir(d))
        n++;
    return n - 3; /* ".", ".." and the directory's own descriptor */
}

static bool expect_event(struct uiw_cm_channel *ch, struct uiw_cm_event *ev,
                         enum uiw_cm_event_type type, int status, const char *what)
{
    int rc = eng_cm_next(ch, ev, EV_MS);
    tu_checks++;
    if (rc < 0 || ev->type != type || ev->status != status) {
        tu_failed++;
        fprintf(stderr, "%s: expected event %d status %d, got rc %d type %d status %d\n", what,
                (int)type, status, rc, rc ? -1 : (int)ev->type, rc ? 0 : ev->status);
        return false;
    }
    return true;
}

static int raw_connect(uint16_t port)
{
    struct sockaddr_in a = eng_loop4(port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Read up to n bytes within ms; returns bytes read, *eof set on EOF/RST. */
static size_t read_some(int fd, uint8_t *buf, size_t n, int ms, bool *eof)
{
    size_t got = 0;
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    *eof = false;
    while (got < n) {
        int64_t left = (int64_t)(end - eng_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) != 1)
            break;
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *eof = true;
            break;
        }
        got += (size_t)r;
    }
    return got;
}

/* The peer ends the stream (FIN or RST) within ms. */
static bool closed_by_peer(int fd, int ms)
{
    uint8_t buf[256];
    bool eof = false;
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    while (!eof && eng_now_ms() < end)
        read_some(fd, buf, sizeof(buf), (int)(end - eng_now_ms()) + 1, &eof);
    return eof;
}

/* Read one MPA frame and decode it as a Reply. */
static bool read_reply(int fd, uiw_mpa_frame *f)
{
    uint8_t buf[UIW_MPA_MAX_FRAME];
    bool eof;
    if (read_some(fd, buf, UIW_MPA_HDR_LEN, EV_MS, &eof) != UIW_MPA_HDR_LEN)
        return false;
    size_t pd = (size_t)buf[18] << 8 | buf[19];
    if (pd > UIW_MPA_MAX_PD || read_some(fd, buf + UIW_MPA_HDR_LEN, pd, EV_MS, &eof) != pd)
        return false;
    return uiw_mpa_decode(buf, UIW_MPA_HDR_LEN + pd, UIW_MPA_REPLY, f) ==
           (int)(UIW_MPA_HDR_LEN + pd);
}

/* An MPA Request through the wire core. kind 0: Rev 2 asking for markers
 * (refused by the MPA layer: we cannot send them; the responder picks an
 * RTR of its own when none in common, RFC 6581 §9.2, so with the default
 * policy markers are what uiwarp rejects itself); 1: the same as Rev 1;
 * 2: an acceptable client-server Request. */
static size_t mk_request(uint8_t *out, int kind)
{
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = UIW_MPA_REQUEST;
    f.rev = kind == 1 ? 1 : 2;
    f.enhanced = kind != 1;
    f.ird = 4;
    f.ord = 4;
    if (kind < 2)
        f.markers = true;
    static const char pd[] = "hostile";
    memcpy(f.ulp_pd, pd, sizeof(pd));
    f.ulp_pd_len = sizeof(pd);
    int n = uiw_mpa_encode(&f, out, UIW_MPA_MAX_FRAME);
    return n > 0 ? (size_t)n : 0;
}

/* Wait until the descriptor and connection counts are back at base. */
static bool back_to_base(int base_fd, int base_conn, int ms, int *fds, int *conns)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    for (;;) {
        *fds = count_fds();
        *conns = uiw_cm_conn_count();
        if ((*fds == base_fd && *conns == base_conn) || eng_now_ms() > end)
            return *fds == base_fd && *conns == base_conn;
        eng_msleep(10);
    }
}

struct srv {
    struct uiw_cm_channel *ch;
    struct uiw_listener *l;
    uint16_t port;
    int base_fd, base_conn;
};

static bool srv_up(struct srv *s)
{
    memset(s, 0, sizeof(*s));
    s->ch = eng_cm_chan();
    struct sockaddr_in a = eng_loop4(0);
    struct sockaddr_storage b;
    CHECK(s->ch != NULL);
    int rc = uiw_cm_listen(NULL, (struct sockaddr *)&a, 1024, s->ch, NULL, &s->l);
    CHECK_EQ(rc, 0);
    if (rc)
        return false;
    uiw_cm_listener_addr(s->l, &b);
    s->port = ntohs(((struct sockaddr_in *)&b)->sin_port);
    s->base_fd = count_fds();
    s->base_conn = uiw_cm_conn_count();
    return true;
}

static void srv_down(struct srv *s)
{
    uiw_cm_listener_destroy(s->l);
    uiw_cm_channel_destroy(s->ch);
}

static void check_base(struct srv *s, const char *what, int peak)
{
    int fds, conns;
    bool ok = back_to_base(s->base_fd, s->base_conn, 10000, &fds, &conns);
    printf("test_cm_limits: %s: fds %d before, %d at the peak, %d after; connections %d -> %d\n",
           what, s->base_fd, peak, fds, s->base_conn, conns);
    CHECK(ok);
    CHECK_EQ(fds, s->base_fd);
    CHECK_EQ(conns, s->base_conn);
}

static bool no_event(struct uiw_cm_channel *ch, int ms)
{
    struct uiw_cm_event ev;
    int rc = eng_cm_next(ch, &ev, ms);
    if (rc == 0)
        fprintf(stderr, "unexpected event %d status %d\n", (int)ev.type, ev.status);
    return rc == -ETIMEDOUT;
}

/* ------------------------------------------------------------------------
 * QPs (a legitimate client with verified data)
 * ---------------------------------------------------------------------- */

static struct ibv_context *g_ctx;

/* A QP for the connection tests (eng_tqp_make with this file's access). */
static bool tqp_make(struct eng_tqp *t)
{
    return eng_tqp_make(g_ctx, t, ENG_ACCESS_ALL);
}

/* A uiwarp client connects with a QP, the server accepts with a QP, and
 * 64 KiB sent each way arrive intact. Everything is torn down again. */
static void legit_client(struct srv *s, const char *what)
{
    enum { LEN = 65536 };
    struct eng_tqp a, b = {0}; /* b is freed even when making a failed */
    if (!g_ctx) {
        printf("test_cm_limits: no uiwarp device: %s skipped\n", what);
        return;
    }
    bool ok = tqp_make(&a) && tqp_make(&b);
    CHECK(ok);
    struct uiw_cm_channel *chc = eng_cm_chan();
    uint8_t *sbuf = malloc(LEN), *rbuf = malloc(LEN);
    struct ibv_mr *smr = NULL, *rmr = NULL;
    struct uiw_conn *cc = NULL, *sc = NULL;
    struct uiw_cm_event ev;
    struct sockaddr_in dst = eng_loop4(s->port);
    struct uiw_conn_param p = {.ird = 4, .ord = 4};
    if (!ok || !chc || !sbuf || !rbuf)
        goto out;
    CHECK_EQ(uiw_cm_connect(a.qp, NULL, (struct sockaddr *)&dst, &p, chc, NULL, &cc), 0);
    if (!cc || !expect_event(s->ch, &ev, UIW_CM_CONNECT_REQUEST, 0, what))
        goto out;
    sc = ev.conn;
    CHECK_EQ(uiw_cm_accept(sc, b.qp, &p, NULL), 0);
    if (!expect_event(chc, &ev, UIW_CM_ESTABLISHED, 0, what))
        goto out;
    smr = ibv_reg_mr(a.pd, sbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
    rmr = ibv_reg_mr(b.pd, rbuf, LEN, IBV_ACCESS_LOCAL_WRITE);
    CHECK(smr && rmr);
    if (!smr || !rmr)
        goto out;
    eng_fill(sbuf, LEN, 12);
    memset(rbuf, 0, LEN);
    struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = LEN, .lkey = rmr->lkey};
    struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
    struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = LEN, .lkey = smr->lkey};
    struct ibv_send_wr sw = {.wr_id = 2,
                             .sg_list = &ss,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *sbad;
    CHECK_EQ(ibv_post_recv(b.qp, &rw, &rbad), 0);
    CHECK_EQ(ibv_post_send(a.qp, &sw, &sbad), 0);
    struct ibv_wc wc;
    CHECK_EQ(eng_poll_one(a.cq, &wc, EV_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(eng_poll_one(b.cq, &wc, EV_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.byte_len, LEN);
    CHECK_EQ(eng_diff(rbuf, LEN, 12), -1);
    printf("test_cm_limits: %s: 64 KiB verified\n", what);
    CHECK_EQ(uiw_cm_disconnect(cc), 0);
    expect_event(chc, &ev, UIW_CM_DISCONNECTED, 0, what);
    /* the server's ESTABLISHED (P2P: after the RTR) and DISCONNECTED */
    for (int i = 0; i < 2; i++)
        if (eng_cm_next(s->ch, &ev, EV_MS) == 0)
            CHECK(ev.type == UIW_CM_ESTABLISHED || ev.type == UIW_CM_DISCONNECTED);
out:
    if (smr)
        ibv_dereg_mr(smr);
    if (rmr)
        ibv_dereg_mr(rmr);
    eng_tqp_free(&a);
    eng_tqp_free(&b);
    if (cc)
        uiw_cm_conn_destroy(cc);
    if (sc)
        uiw_cm_conn_destroy(sc);
    if (chc)
        uiw_cm_channel_destroy(chc);
    free(sbuf);
    free(rbuf);
}

/* ------------------------------------------------------------------------
 * Storms (default configuration, this process)
 * ---------------------------------------------------------------------- */

/* 300 Requests uiwarp rejects itself (markers asked, Rev 2 and Rev 1): each
 * gets a Reject and a FIN, the ULP sees nothing, nothing stays behind. */
static void t_reject_storm(struct srv *s)
{
    uint8_t req[UIW_MPA_MAX_FRAME];
    int peak = s->base_fd, rejects = 0;
    for (int i = 0; i < STORM; i++) {
        size_t n = mk_request(req, i % 2);
        int fd = raw_connect(s->port);
        if (fd < 0 || eng_send_all(fd, req, n) < 0) {
            CHECK(!"connect/write");
            if (fd >= 0)
                close(fd);
            continue;
        }
        uiw_mpa_frame rep;
        if (read_reply(fd, &rep) && rep.reject)
            rejects++;
        CHECK(closed_by_peer(fd, EV_MS));
        int f = count_fds();
        if (f > peak)
            peak = f;
        close(fd);
    }
    CHECK_EQ(rejects, STORM);
    CHECK(no_event(s->ch, QUIET_MS));
    check_base(s, "300 Requests rejected by uiwarp", peak);
}

/* Garbage instead of a Request: closed without a word. */
static void t_garbage_storm(struct srv *s)
{
    uint8_t junk[64];
    int peak = s->base_fd;
    for (int i = 0; i < STORM; i++) {
        memset(junk, 'z' + (i & 3), sizeof(junk));
        int fd = raw_connect(s->port);
        if (fd < 0) {
            CHECK(!"connect");
            continue;
        }
        CHECK_EQ(eng_send_all(fd, junk, 20 + (size_t)(i % 40)), 0);
        CHECK(closed_by_peer(fd, EV_MS));
        int f = count_fds();
        if (f > peak)
            peak = f;
        close(fd);
    }
    CHECK(no_event(s->ch, QUIET_MS));
    check_base(s, "300 garbage Requests", peak);
}

/* Peers that go away before their Request is complete: nothing, half a
 * Request, an RST. */
static void t_early_close_storm(struct srv *s)
{
    uint8_t req[UIW_MPA_MAX_FRAME];
    size_t n = mk_request(req, 2);
    int peak = s->base_fd;
    for (int i = 0; i < STORM; i++) {
        int fd = raw_connect(s->port);
        if (fd < 0) {
            CHECK(!"connect");
            continue;
        }
        if (i % 3 == 1)
            CHECK_EQ(eng_send_all(fd, req, n / 2), 0);
        int f = count_fds();
        if (f > peak)
            peak = f;
        if (i % 3 == 2)
            eng_rst_close(fd);
        else
            close(fd);
    }
    CHECK(no_event(s->ch, QUIET_MS));
    check_base(s, "300 early closes", peak);
}

/* Bytes glued to the Request in the same write (the responder's one recv
 * takes them with it): refused before any CONNECT_REQUEST (RFC 5044
 * §7.1.2: nothing follows the Request before our Reply), the connection
 * closed, no fd left. */
static void t_request_glued(struct srv *s)
{
    uint8_t req[UIW_MPA_MAX_FRAME + 8];
    size_t n = mk_request(req, 2);
    int peak = s->base_fd;
    for (int i = 0; i < 50; i++) {
        size_t extra = 1 + (size_t)(i % 8);
        memset(req + n, 'x', extra);
        int fd = raw_connect(s->port);
        if (fd < 0) {
            CHECK(!"connect");
            continue;
        }
        CHECK_EQ(eng_send_all(fd, req, n + extra), 0);
        CHECK(closed_by_peer(fd, EV_MS));
        int f = count_fds();
        if (f > peak)
            peak = f;
        close(fd);
    }
    CHECK(no_event(s->ch, QUIET_MS));
    check_base(s, "50 Requests with bytes glued after them", peak);
}

/* The application rejects (then destroys, as rdma_reject + rdma_destroy_id). */
static void t_app_reject(struct srv *s)
{
    uint8_t req[UIW_MPA_MAX_FRAME];
    size_t n = mk_request(req, 2);
    int peak = s->base_fd, rejects = 0;
    for (int i = 0; i < 100; i++) {
        int fd = raw_connect(s->port);
        struct uiw_cm_event ev;
        if (fd < 0 || eng_send_all(fd, req, n) < 0) {
            CHECK(!"connect/write");
            if (fd >= 0)
                close(fd);
            continue;
        }
        if (expect_event(s->ch, &ev, UIW_CM_CONNECT_REQUEST, 0, "app reject")) {
            CHECK_EQ(uiw_cm_reject(ev.conn, "no", 2), 0);
            uiw_mpa_frame rep;
            if (read_reply(fd, &rep) && rep.reject && rep.ulp_pd_len == 2)
                rejects++;
            if (i % 2) /* destroyed before or after the initiator closed */
                CHECK(closed_by_peer(fd, EV_MS));
            uiw_cm_conn_destroy(ev.conn);
        }
        int f = count_fds();
        if (f > peak)
            peak = f;
        close(fd);
    }
    CHECK_EQ(rejects, 100);
    check_base(s, "100 Requests rejected by the application", peak);
}

/* uiw_cm_accept fails: bytes before our Reply (-EPROTO), initiator gone
 * (-ECONNRESET). The ULP destroys the connection. */
static void t_accept_fails(struct srv *s)
{
    uint8_t req[UIW_MPA_MAX_FRAME];
    size_t n = mk_request(req, 2);
    int peak = s->base_fd;
    for (int i = 0; i < 100; i++) {
        int fd = raw_connect(s->port);
        struct uiw_cm_event ev;
        if (fd < 0 || eng_send_all(fd, req, n) < 0) {
            CHECK(!"connect/write");
            if (fd >= 0)
                close(fd);
            continue;
        }
        if (!expect_event(s->ch, &ev, UIW_CM_CONNECT_REQUEST, 0, "accept fails")) {
            close(fd);
            continue;
        }
        if (i % 2) {
            CHECK_EQ(eng_send_all(fd, "early!!!", 8), 0);
        } else {
            shutdown(fd, SHUT_WR);
        }
        eng_msleep(2); /* loopback: delivered by now */
        int rc = uiw_cm_accept(ev.conn, NULL, NULL, NULL);
        CHECK_EQ(rc, i % 2 ? -EPROTO : -ECONNRESET);
        CHECK(closed_by_peer(fd, EV_MS));
        uiw_cm_conn_destroy(ev.conn);
        int f = count_fds();
        if (f > peak)
            peak = f;
        close(fd);
    }
    CHECK(no_event(s->ch, QUIET_MS));
    check_base(s, "100 failed accepts", peak);
}

/* Destroying the listener with Rejected and half-open connections on it. */
static void t_listener_teardown(void)
{
    int base_fd = count_fds(), base_conn = uiw_cm_conn_count();
    struct srv s;
    if (!srv_up(&s))
        return;
    uint8_t req[UIW_MPA_MAX_FRAME];
    int fds[40];
    for (int i = 0; i < 40; i++) {
        fds[i] = raw_connect(s.port);
        size_t n = mk_request(req, i % 2 ? 0 : 2);
        if (fds[i] >= 0 && i % 4 < 2)
            (void)eng_send_all(fds[i], req, n);
    }
    eng_msleep(200); /* 10 CONNECT_REQUESTs queued, never retrieved: the listener frees them */
    srv_down(&s);
    for (int i = 0; i < 40; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    int f, c;
    CHECK(back_to_base(base_fd, base_conn, 5000, &f, &c));
    printf("test_cm_limits: listener destroyed with 40 pending: fds %d -> %d, connections %d -> "
           "%d\n",
           base_fd, f, base_conn, c);
}

/* socket() fails at connect: EMFILE, not ENOMEM; nothing left behind. */
static void t_connect_emfile(void)
{
    struct rlimit old, lim;
    struct eng_tqp q;
    if (!g_ctx || !tqp_make(&q)) { /* the default policy is P2P: needs a QP */
        printf("test_cm_limits: no uiwarp device: connect under EMFILE skipped\n");
        return;
    }
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
    int base_conn = uiw_cm_conn_count();
    struct uiw_cm_channel *ch = eng_cm_chan();
    int fill[512], nfill = 0;
    int top = 0;
    for (int fd = 0; fd < 4096; fd++)
        if (fcntl(fd, F_GETFD) >= 0)
            top = fd;
    lim = old;
    lim.rlim_cur = (rlim_t)top + 64;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
    while (nfill < 512) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            CHECK_EQ(errno, EMFILE);
            break;
        }
        fill[nfill++] = fd;
    }
    struct sockaddr_in dst = eng_loop4(9); /* never reached */
    struct uiw_conn *c = NULL;
    int rc = uiw_cm_connect(q.qp, NULL, (struct sockaddr *)&dst, NULL, ch, NULL, &c);
    printf("test_cm_limits: uiw_cm_connect with no descriptor left: %d (%s)\n", rc, strerror(-rc));
    CHECK_EQ(rc, -EMFILE);
    CHECK(c == NULL);
    CHECK_EQ(uiw_cm_conn_count(), base_conn);
    /* a listener cannot be made either, and says why */
    struct uiw_listener *l = NULL;
    struct sockaddr_in any = eng_loop4(0);
    CHECK_EQ(uiw_cm_listen(NULL, (struct sockaddr *)&any, 16, ch, NULL, &l), -EMFILE);
    for (int i = 0; i < nfill; i++)
        close(fill[i]);
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
    CHECK(no_event(ch, QUIET_MS));
    uiw_cm_channel_destroy(ch);
    /* the QP is free for another connection: nothing kept it */
    CHECK_EQ(eng_qp_state(q.qp), IBV_QPS_INIT);
    eng_tqp_free(&q);
}

/* The dead-peer socket options of both sides (docs/ENGINE.md "Dead
 * peers"): the default (UIWARP_PEER_TIMEOUT unset: 30 s), a connection's
 * own value (uiw_conn_param.peer_timeout_ms, set by rdma_set_option
 * RDMA_OPTION_ID_ACK_TIMEOUT) and off. */
static void check_opts(struct ibv_qp *qp, unsigned ut, int idle, int intvl, const char *what)
{
    int fd = to_uqp(qp)->fd, ka = -1, v = -1;
    unsigned u = 1;
    socklen_t l = sizeof(int);
    CHECK(fd >= 0);
    getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &ka, &l);
    l = sizeof(u);
    getsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &u, &l);
    printf("test_cm_limits: %s: keepalive %d, TCP_USER_TIMEOUT %u ms\n", what, ka, u);
    CHECK_EQ(ka, ut ? 1 : 0);
    CHECK_EQ(u, ut);
    if (!ut)
        return;
    l = sizeof(v);
    getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &l);
    CHECK_EQ(v, idle);
    getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &v, &l);
    CHECK_EQ(v, intvl);
    /* TCP_KEEPCNT is not set: with TCP_USER_TIMEOUT Linux ends a probing
     * connection by time, not by the number of probes */
}

static void t_dead_peer_opts(struct srv *s)
{
    static const struct {
        unsigned cli_ms, srv_ms; /* uiw_conn_param.peer_timeout_ms */
        unsigned cli_ut, srv_ut; /* expected TCP_USER_TIMEOUT */
        int cli_idle, cli_intvl, srv_idle, srv_intvl;
    } v[] = {
        {0, 0, 30000, 30000, 15, 3, 15, 3},
        {5000, 1000, 5000, 1000, 2, 1, 1, 1},
        {UIW_PEER_TIMEOUT_OFF, 90000, 0, 90000, 0, 0, 45, 9},
    };
    if (!g_ctx)
        return;
    for (unsigned i = 0; i < 3; i++) {
        struct eng_tqp a, b;
        struct uiw_cm_event ev;
        struct uiw_conn *cc = NULL;
        struct uiw_cm_channel *chc = eng_cm_chan();
        struct sockaddr_in dst = eng_loop4(s->port);
        struct uiw_conn_param pc = {.ird = 4, .ord = 4, .peer_timeout_ms = v[i].cli_ms};
        struct uiw_conn_param ps = {.ird = 4, .ord = 4, .peer_timeout_ms = v[i].srv_ms};
        CHECK(tqp_make(&a) && tqp_make(&b));
        CHECK_EQ(uiw_cm_connect(a.qp, NULL, (struct sockaddr *)&dst, &pc, chc, NULL, &cc), 0);
        if (expect_event(s->ch, &ev, UIW_CM_CONNECT_REQUEST, 0, "opts")) {
            CHECK_EQ(uiw_cm_accept(ev.conn, b.qp, &ps, NULL), 0);
            struct uiw_conn *sc = ev.conn;
            if (expect_event(chc, &ev, UIW_CM_ESTABLISHED, 0, "opts")) {
                check_opts(a.qp, v[i].cli_ut, v[i].cli_idle, v[i].cli_intvl, "initiator");
                check_opts(b.qp, v[i].srv_ut, v[i].srv_idle, v[i].srv_intvl, "responder");
                /* P2P: the server's ESTABLISHED comes with the RTR */
                expect_event(s->ch, &ev, UIW_CM_ESTABLISHED, 0, "opts s");
                CHECK_EQ(uiw_cm_disconnect(cc), 0);
                expect_event(chc, &ev, UIW_CM_DISCONNECTED, 0, "opts c");
                expect_event(s->ch, &ev, UIW_CM_DISCONNECTED, 0, "opts s");
            }
            eng_tqp_free(&a);
            eng_tqp_free(&b);
            uiw_cm_conn_destroy(sc);
        } else {
            eng_tqp_free(&a);
            eng_tqp_free(&b);
        }
        if (cc)
            uiw_cm_conn_destroy(cc);
        uiw_cm_channel_destroy(chc);
    }
    check_base(s, "dead-peer socket options", s->base_fd);
}

/* The timer heap: many timers, fired in deadline order, disarm and re-arm. */
static unsigned long fired_order[64];
static int fired_n;
static pthread_mutex_t fired_lock = PTHREAD_MUTEX_INITIALIZER;

static void tcb(void *obj)
{
    pthread_mutex_lock(&fired_lock);
    if (fired_n < 64)
        fired_order[fired_n++] = (unsigned long)(uintptr_t)obj;
    pthread_mutex_unlock(&fired_lock);
}

static void t_timer_heap(void)
{
    static struct uiw_timer t[40];
    for (unsigned i = 0; i < 40; i++)
        CHECK_EQ(uiw_timer_init(&t[i], tcb, (void *)(uintptr_t)i), 0);
    /* deadlines 300 + 7*((i*17) % 40) ms: a scrambled order */
    for (unsigned i = 0; i < 40; i++)
        uiw_timer_arm(&t[i], 300 + 7 * ((i * 17) % 40));
    for (unsigned i = 0; i < 40; i += 4)
        uiw_timer_disarm(&t[i]);  /* 10 never fire */
    uiw_timer_arm(&t[1], 100000); /* moved far out: does not fire */
    CHECK(uiw_timer_pending(&t[1]));
    CHECK(!uiw_timer_pending(&t[0]));
    eng_msleep(900);
    pthread_mutex_lock(&fired_lock);
    int n = fired_n;
    bool ordered = true;
    for (int i = 1; i < n; i++)
        ordered &= (fired_order[i - 1] * 17) % 40 <= (fired_order[i] * 17) % 40;
    pthread_mutex_unlock(&fired_lock);
    CHECK_EQ(n, 29);
    CHECK(ordered);
    for (unsigned i = 0; i < 40; i++)
        uiw_timer_fini(&t[i]);
    uiw_timer_arm(&t[2], 0); /* after fini: ignored */
    eng_msleep(50);
    CHECK_EQ(fired_n, 29);
}

/* ------------------------------------------------------------------------
 * Child cases
 * ---------------------------------------------------------------------- */

/* UIWARP_MPA_TIMEOUT_MS=300: silent initiators, and initiators that keep
 * the connection open after our Reject, are closed and freed by the
 * server on its own. */
static void c_timeout(void)
{
    struct srv s;
    if (!srv_up(&s))
        return;
    enum { SILENT = 100, HELD = 50 };
    int fds[SILENT + HELD], peak = s.base_fd;
    uint8_t req[UIW_MPA_MAX_FRAME];
    for (int i = 0; i < SILENT + HELD; i++) {
        fds[i] = raw_connect(s.port);
        CHECK(fds[i] >= 0);
        if (fds[i] >= 0 && i >= SILENT) {
            size_t n = mk_request(req, 0);
            CHECK_EQ(eng_send_all(fds[i], req, n), 0);
            uiw_mpa_frame rep;
            CHECK(read_reply(fds[i], &rep) && rep.reject);
        }
    }
    int f = count_fds();
    if (f > peak)
        peak = f;
    int closed = 0;
    for (int i = 0; i < SILENT + HELD; i++)
        if (fds[i] >= 0 && closed_by_peer(fds[i], 5000))
            closed++;
    CHECK_EQ(closed, SILENT + HELD);
    int fdn, cn;
    CHECK(back_to_base(s.base_fd + SILENT + HELD, s.base_conn, 5000, &fdn, &cn));
    printf("test_cm_limits: timeout: %d silent + %d held after Reject: fds %d -> %d (peak) -> %d "
           "(our %d client sockets still open), connections %d -> %d\n",
           SILENT, HELD, s.base_fd, peak, fdn, SILENT + HELD, s.base_conn, cn);
    for (int i = 0; i < SILENT + HELD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    CHECK(no_event(s.ch, QUIET_MS));
    check_base(&s, "timeout", peak);
    srv_down(&s);
}

/* The stat file of the thread named uiw-progress, opened (the caller keeps
 * it: no descriptor may be left when it is read), or -1. */
static int progress_stat_open(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int found = -1;
    if (!d)
        return -1;
    while (found < 0 && (e = readdir(d))) {
        char path[300], buf[1024];
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
        if (n > 0) {
            buf[n] = 0;
            if (strstr(buf, "(uiw-progress)")) {
                found = fd;
                continue;
            }
        }
        close(fd);
    }
    closedir(d);
    return found;
}

/* CPU time (utime + stime, clock ticks) from a thread's stat file. */
static long thread_ticks(int fd)
{
    char buf[1024];
    ssize_t n = fd >= 0 ? pread(fd, buf, sizeof(buf) - 1, 0) : -1;
    unsigned long ut = 0, st = 0;
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    /* after ") ": state(3) ... utime(14) stime(15) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

/* Lines of f (from offset 0) containing s. */
static int count_lines(int fd, const char *s)
{
    char buf[8192];
    int lines = 0;
    ssize_t n;
    size_t keep = 0;
    lseek(fd, 0, SEEK_SET);
    while ((n = read(fd, buf + keep, sizeof(buf) - 1 - keep)) > 0) {
        size_t len = keep + (size_t)n;
        buf[len] = 0;
        char *p = buf, *nl;
        while ((nl = memchr(p, '\n', len - (size_t)(p - buf)))) {
            *nl = 0;
            if (strstr(p, s))
                lines++;
            p = nl + 1;
        }
        keep = len - (size_t)(p - buf);
        if (keep >= sizeof(buf) / 2)
            keep = 0;
        memmove(buf, p, keep);
    }
    return lines;
}

/* RLIMIT_NOFILE 256 and a flood of 600 silent connections from another
 * process: the listener runs out of descriptors. The progress thread must
 * stay (nearly) idle, the log quiet, and once the flood is gone a
 * legitimate client is served. */
static void c_emfile(void)
{
    enum { FLOOD = 600 };
    struct srv s;
    g_ctx = eng_open_lo(true);
    if (!srv_up(&s))
        return;
    int statfd = progress_stat_open();
    CHECK(statfd >= 0);
    count_fds(); /* its directory stream stays open */
    s.base_fd = count_fds();
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    struct rlimit low = lim;
    low.rlim_cur = 256;
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
    /* our log goes to a file we can count */
    char tmpl[] = "/tmp/uiw_emfile_XXXXXX";
    int logfd = mkstemp(tmpl);
    CHECK(logfd >= 0);
    unlink(tmpl);
    int saved_err = dup(2);
    dup2(logfd, 2);
    int go[2], ready[2];
    CHECK_EQ(pipe(go), 0);
    CHECK_EQ(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        /* the flooder: raw syscalls only */
        struct rlimit hi = lim;
        hi.rlim_cur = hi.rlim_max < 4096 ? hi.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &hi);
        struct sockaddr_in a = eng_loop4(s.port);
        int made = 0, fl[FLOOD];
        for (int i = 0; i < FLOOD; i++) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            if (fd < 0)
                break;
            if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EINPROGRESS)
                fl[made++] = fd;
        }
        char b = (char)(made >= FLOOD ? 1 : 0);
        (void)!write(ready[1], &b, 1);
        (void)!read(go[0], &b, 1);
        /* how the server treated each: still open (accepted, waiting for
         * the Request) or reset (shed at EMFILE) */
        int counts[3] = {0, 0, 0};
        for (int i = 0; i < made; i++) {
            char x;
            ssize_t r = recv(fl[i], &x, 1, MSG_DONTWAIT);
            counts[r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0
                   : r < 0 && errno == ECONNRESET                     ? 1
                                                                      : 2]++;
        }
        (void)!write(ready[1], counts, sizeof(counts));
        _exit(0); /* closes every flood socket */
    }
    char b = 0;
    CHECK(pid > 0 && read(ready[0], &b, 1) == 1 && b == 1);
    eng_msleep(1500); /* the server takes what it can, then hits EMFILE */
    int fds_full = count_fds();
    uint64_t t0 = eng_now_ms();
    long c0 = thread_ticks(statfd);
    eng_msleep(2000);
    long c1 = thread_ticks(statfd);
    uint64_t t1 = eng_now_ms();
    int log_lines = count_lines(logfd, "cm: accept:");
    double cpu = (double)(c1 - c0) * 1000.0 / (double)sysconf(_SC_CLK_TCK) / (double)(t1 - t0);
    /* the flood ends */
    (void)!write(go[1], &b, 1);
    int counts[3] = {-1, -1, -1};
    CHECK_EQ(read(ready[0], counts, sizeof(counts)), (ssize_t)sizeof(counts));
    int st;
    waitpid(pid, &st, 0);
    dup2(saved_err, 2);
    close(saved_err);
    printf("test_cm_limits: emfile: RLIMIT_NOFILE 256, %d flood connections: server fds %d "
           "(baseline %d), progress thread CPU %.1f%% of %llu ms, %d accept log lines\n",
           FLOOD, fds_full, s.base_fd, cpu * 100.0, (unsigned long long)(t1 - t0), log_lines);
    CHECK(c0 >= 0 && c1 >= 0);
    CHECK(fds_full >= 240); /* the limit was reached */
    CHECK(cpu < 0.20);
    CHECK(log_lines >= 1 && log_lines <= 3);
    printf("test_cm_limits: emfile: the flood's connections: %d open, %d reset, %d other\n",
           counts[0], counts[1], counts[2]);
    /* what could not be accepted got a clean failure */
    CHECK_EQ(counts[0] + counts[1], FLOOD);
    CHECK(counts[1] >= FLOOD - 256);
    close(logfd);
    close(go[0]);
    close(go[1]);
    close(ready[0]);
    close(ready[1]);
    /* the flood's connections end (EOF on each): back to the baseline */
    int fdn, cn;
    CHECK(back_to_base(s.base_fd, s.base_conn, 15000, &fdn, &cn));
    printf("test_cm_limits: emfile: after the flood: fds %d, connections %d -> %d\n", fdn,
           s.base_conn, cn);
    /* still under the lowered limit: a legitimate client is served */
    legit_client(&s, "emfile: client after the flood");
    check_base(&s, "emfile", fds_full);
    srv_down(&s);
    setrlimit(RLIMIT_NOFILE, &lim);
    close(statfd);
    if (g_ctx)
        ibv_close_device(g_ctx);
}

struct child_case {
    const char *name;
    void (*fn)(void);
    const char *env[4];
};

static const struct child_case cases[] = {
    {"timeout", c_timeout, {"UIWARP_MPA_TIMEOUT_MS=300"}},
    {"emfile", c_emfile, {NULL}},
};

static void run_child(const struct child_case *cc)
{
    char *envp[256];
    int k = 0;
    for (char **e = environ; *e && k < 240; e++)
        if (strncmp(*e, "UIWARP_", 7) != 0 || strncmp(*e, "UIWARP_DEBUG", 12) == 0)
            envp[k++] = *e;
    for (int i = 0; i < 4 && cc->env[i]; i++)
        envp[k++] = (char *)cc->env[i];
    envp[k] = NULL;
    eng_run_case("test_cm_limits", cc->name, envp);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            if (strcmp(cases[i].name, argv[2]) == 0)
                cases[i].fn();
        dprintf(3, "%lu %lu\n", tu_checks, tu_failed);
        return tu_failed ? 1 : 0;
    }
    g_ctx = eng_open_lo(true);
    struct srv s;
    if (srv_up(&s)) {
        t_reject_storm(&s);
        t_garbage_storm(&s);
        t_early_close_storm(&s);
        t_request_glued(&s);
        t_app_reject(&s);
        t_accept_fails(&s);
        legit_client(&s, "client after the storms");
        t_dead_peer_opts(&s);
        check_base(&s, "after the storms", s.base_fd);
        srv_down(&s);
    }
    t_listener_teardown();
    t_connect_emfile();
    t_timer_heap();
    if (g_ctx)
        ibv_close_device(g_ctx);
    g_ctx = NULL;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_child(&cases[i]);
    TEST_MAIN_END();
}
