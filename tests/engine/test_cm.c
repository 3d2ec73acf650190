/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager (src/engine/cm.c): TCP + MPA setup over 127.0.0.1
 * and ::1 with port-0 listeners, between two uiwarp endpoints of this
 * process and against raw TCP peers that write and check MPA frames and
 * FPDUs byte by byte with the wire core.
 *
 * Policies set through UIWARP_* environment variables (read once per
 * process by uiw_config) run in child processes: the program re-executes
 * itself with "--case NAME" and the variables set, and adds the child's
 * check counts to its own.
 *
 * Tests that need QPs (RTR on the wire, attach, flush on disconnect) run
 * when ibv_get_device_list finds a uiwarp device; otherwise they are
 * skipped with a note.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "cm_test.h"
#include "testutil.h"

extern char **environ;

#define EV_MS    5000 /* generous wait for an event that must come */
#define QUIET_MS 200  /* wait that proves nothing comes */

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static struct sockaddr_storage loop_addr(int fam, uint16_t port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    if (fam == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        a->sin6_addr = in6addr_loopback;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    return ss;
}

static uint16_t ss_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return ntohs(((const struct sockaddr_in *)ss)->sin_port);
}

static socklen_t ss_len(const struct sockaddr_storage *ss)
{
    return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Expect an event of the given type (and status) for conn (NULL: any). */
static bool expect_event(struct uiw_cm_channel *ch, struct uiw_cm_event *ev,
                         enum uiw_cm_event_type type, int status, struct uiw_conn *conn,
                         const char *what)
{
    int rc = eng_cm_next(ch, ev, EV_MS);
    tu_checks++;
    if (rc < 0 || ev->type != type || ev->status != status || (conn && ev->conn != conn)) {
        tu_failed++;
        fprintf(stderr, "%s: expected event %d status %d, got rc %d type %d status %d\n", what,
                (int)type, status, rc, rc ? -1 : (int)ev->type, rc ? 0 : ev->status);
        return false;
    }
    return true;
}

static bool no_event(struct uiw_cm_channel *ch, int ms)
{
    struct uiw_cm_event ev;
    int rc = eng_cm_next(ch, &ev, ms);
    if (rc == 0)
        fprintf(stderr, "unexpected event %d status %d\n", (int)ev.type, ev.status);
    return rc == -ETIMEDOUT;
}

static void fill_pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed * 31u + i * 7u + (i >> 8));
}

/* ---- raw TCP peers ---- */

static int raw_listen(int fam, uint16_t *port)
{
    struct sockaddr_storage a = loop_addr(fam, 0);
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    socklen_t l = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, ss_len(&a)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) < 0) {
        perror("raw_listen");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ss_port(&a);
    return fd;
}

static int raw_accept(int lfd, int ms)
{
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, ms) != 1)
        return -1;
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}

static int raw_connect(const struct sockaddr_storage *a)
{
    int fd = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)a, ss_len(a)) < 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* Read exactly n bytes within ms: n, or fewer on EOF/error/timeout (then
 * *why = 0 EOF, -errno, -ETIMEDOUT). */
static size_t read_n(int fd, void *buf, size_t n, int ms, int *why)
{
    size_t got = 0;
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    int dummy;
    if (!why)
        why = &dummy;
    *why = 1;
    while (got < n) {
        int64_t left = (int64_t)(end - eng_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) != 1) {
            *why = -ETIMEDOUT;
            return got;
        }
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r == 0) {
            *why = 0;
            return got;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            *why = -errno;
            return got;
        }
        got += (size_t)r;
    }
    return got;
}

/* Read one MPA frame (header, then PD_Length); its length or -1. */
static int read_frame(int fd, uint8_t *buf, int ms)
{
    if (read_n(fd, buf, UIW_MPA_HDR_LEN, ms, NULL) != UIW_MPA_HDR_LEN)
        return -1;
    size_t pd = (size_t)buf[18] << 8 | buf[19];
    if (pd > UIW_MPA_MAX_PD)
        return -1;
    if (read_n(fd, buf + UIW_MPA_HDR_LEN, pd, ms, NULL) != pd)
        return -1;
    return (int)(UIW_MPA_HDR_LEN + pd);
}

/* The end of the stream (EOF: 0, RST: -ECONNRESET) within ms, discarding
 * data; -ETIMEDOUT if it stays open. */
static int wait_close(int fd, int ms)
{
    uint8_t buf[512];
    for (;;) {
        int why;
        size_t n = read_n(fd, buf, sizeof(buf), ms, &why);
        if (why == 1 || (why == -ETIMEDOUT && n > 0))
            continue;
        return why;
    }
}

/* Nothing arrives within ms (and the stream is still open). */
static bool quiet(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 0;
}

static const uint8_t KEY_REQ[16] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
                                    'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e'};
static const uint8_t KEY_REP[16] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
                                    'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e'};

/* A raw frame: key, flags byte, rev, then (enhanced: S set in flags) the
 * two RFC 6581 words and the ULP private data. */
static size_t mk_frame(uint8_t *out, bool req, uint8_t flags, uint8_t rev, uint16_t irdw,
                       uint16_t ordw, const uint8_t *pd, uint16_t pd_len)
{
    size_t off = UIW_MPA_HDR_LEN;
    memcpy(out, req ? KEY_REQ : KEY_REP, 16);
    out[16] = flags;
    out[17] = rev;
    if (flags & UIW_MPA_FLAG_S) {
        out[off++] = (uint8_t)(irdw >> 8);
        out[off++] = (uint8_t)irdw;
        out[off++] = (uint8_t)(ordw >> 8);
        out[off++] = (uint8_t)ordw;
    }
    if (pd_len)
        memcpy(out + off, pd, pd_len);
    off += pd_len;
    out[18] = (uint8_t)((off - UIW_MPA_HDR_LEN) >> 8);
    out[19] = (uint8_t)(off - UIW_MPA_HDR_LEN);
    return off;
}

#define S UIW_MPA_FLAG_S

/* Parse the first FPDU of a post-MPA stream read from fd; fills *h (the
 * header as decoded) and returns the ULP payload length, or -1. */
static int read_fpdu(int fd, bool crc, uiw_hdr *h, uiw_term_cause *err, int ms)
{
    uiw_rx rx;
    uiw_rx_cfg cfg = {.crc = crc};
    uint8_t buf[256];
    size_t have = 0;
    int payload = -1;
    bool got_hdr = false;
    uiw_rx_init(&rx, &cfg);
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    for (;;) {
        int64_t left = (int64_t)(end - eng_now_ms());
        if (left <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) != 1)
            return -1;
        ssize_t r = recv(fd, buf + have, sizeof(buf) - have, 0);
        if (r <= 0)
            return -1;
        size_t len = have + (size_t)r, off = 0;
        while (off < len) {
            uiw_rx_event ev;
            size_t used = uiw_rx_feed(&rx, buf + off, len - off, &ev);
            off += used;
            if (ev.kind == UIW_RX_HDR) {
                *h = *ev.hdr;
                payload = (int)ev.payload_len;
                got_hdr = true;
            } else if (ev.kind == UIW_RX_END) {
                return got_hdr && ev.crc_ok ? payload : -1;
            } else if (ev.kind == UIW_RX_ERROR) {
                if (err)
                    *err = ev.cause;
                return -1;
            } else if (ev.kind == UIW_RX_NONE || used == 0) {
                break;
            }
        }
        have = 0; /* the parser keeps partial headers itself */
    }
}

/* Build one FPDU for hdr (no payload) into out; its length. */
static size_t mk_fpdu(const uiw_hdr *hdr, bool crc, uint8_t *out)
{
    uiw_tx tx;
    uiw_tx_cfg cfg = {.crc = crc, .max_fpdu = 1024};
    uiw_tx_msg m;
    static uiw_fpdu f;
    size_t n = 0;
    if (uiw_tx_init(&tx, &cfg) || uiw_tx_msg_init(&m, hdr, NULL, 0, 0) ||
        uiw_tx_next(&tx, &m, &f) != 1)
        return 0;
    for (int i = 0; i < f.iovcnt; i++) {
        memcpy(out + n, f.iov[i].iov_base, f.iov[i].iov_len);
        n += f.iov[i].iov_len;
    }
    return n;
}

static uiw_hdr rtr_write_hdr(void)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.tagged = true;
    h.last = true;
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = UIW_OP_WRITE;
    h.stag = 1;
    h.to = 0;
    return h;
}

static uiw_hdr rtr_read_hdr(void)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.last = true;
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.opcode = UIW_OP_READ_REQ;
    h.qn = UIW_QN_READ_REQ;
    h.msn = 1;
    h.u.rreq.sink_stag = 0;
    h.u.rreq.src_stag = 1;
    return h;
}

/* ---- QPs (need the engine's verbs) ---- */

static struct ibv_context *g_ctx;
static bool g_have_qps;

static void verbs_init(bool quiet_skip)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (list && n > 0)
        g_ctx = ibv_open_device(list[0]);
    if (list)
        ibv_free_device_list(list);
    g_have_qps = g_ctx != NULL;
    if (!g_have_qps && !quiet_skip)
        printf("test_cm: no uiwarp device: QP tests skipped\n");
}

/* A QP for the connection tests (eng_tqp_make with this file's access). */
static bool tqp_make(struct eng_tqp *t)
{
    return eng_tqp_make(g_ctx, t,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

/* A pair of channels and a port-0 listener on the loopback of fam. */
struct env {
    struct uiw_cm_channel *chs, *chc;
    struct uiw_listener *l;
    struct sockaddr_storage addr; /* where the listener is */
};

static bool env_up(struct env *e, int fam)
{
    memset(e, 0, sizeof(*e));
    e->chs = eng_cm_chan();
    e->chc = eng_cm_chan();
    struct sockaddr_storage a = loop_addr(fam, 0);
    int rc = uiw_cm_listen(NULL, (struct sockaddr *)&a, 16, e->chs, (void *)0x5e, &e->l);
    CHECK_EQ(rc, 0);
    if (rc)
        return false;
    CHECK_EQ(uiw_cm_listener_addr(e->l, &e->addr), 0);
    CHECK(ss_port(&e->addr) != 0);
    CHECK_EQ(e->addr.ss_family, fam);
    e->addr = loop_addr(fam, ss_port(&e->addr));
    return true;
}

static void env_down(struct env *e)
{
    uiw_cm_listener_destroy(e->l);
    uiw_cm_channel_destroy(e->chs);
    uiw_cm_channel_destroy(e->chc);
}

/* Connect from chc, get CONNECT_REQUEST on chs; returns the server conn. */
static struct uiw_conn *connect_req(struct env *e, struct ibv_qp *qp,
                                    const struct uiw_conn_param *p, struct uiw_conn **cc,
                                    struct uiw_cm_event *req)
{
    int rc = uiw_cm_connect(qp, NULL, (struct sockaddr *)&e->addr, p, e->chc, (void *)0xc1, cc);
    CHECK_EQ(rc, 0);
    if (rc)
        return NULL;
    if (!expect_event(e->chs, req, UIW_CM_CONNECT_REQUEST, 0, NULL, "connect_req"))
        return NULL;
    CHECK(req->listener == e->l);
    CHECK(req->user == (void *)0x5e);
    return req->conn;
}

/* ------------------------------------------------------------------------
 * Uiwarp <-> uiwarp, default policy
 * ---------------------------------------------------------------------- */

/* Private data both ways, byte-exact, IRD/ORD exchange, orderly close. */
static void t_pd_ird_ord(int fam)
{
    static const uint16_t lens[] = {0, 1, 252, 256, 300, 508};
    const unsigned nl = sizeof(lens) / sizeof(lens[0]);
    struct env e;
    if (!env_up(&e, fam))
        return;
    for (unsigned i = 0; i < nl; i++) {
        uint8_t pdc[UIW_MPA_MAX_PD], pds[UIW_MPA_MAX_PD];
        uint16_t lc = lens[i], ls = lens[(i + 2) % nl];
        fill_pattern(pdc, lc, i);
        fill_pattern(pds, ls, i + 100);
        struct uiw_conn_param pc = {
            .private_data = pdc, .private_data_len = lc, .ird = 5, .ord = 7};
        struct uiw_conn_param ps = {
            .private_data = pds, .private_data_len = ls, .ird = 3, .ord = 9};
        struct uiw_conn *cc = NULL, *sc;
        struct uiw_cm_event ev;
        sc = connect_req(&e, NULL, &pc, &cc, &ev);
        if (!sc)
            break;
        CHECK_EQ(ev.private_data_len, lc);
        CHECK_MEM(ev.private_data, pdc, lc);
        CHECK(ev.enhanced);
        CHECK_EQ(ev.mpa_rev, 2);
        CHECK_EQ(ev.peer_ird, 5);
        CHECK_EQ(ev.peer_ord, 7);
        CHECK(!ev.p2p);
        CHECK(!ev.crc);
        CHECK(!ev.markers_tx);
        CHECK_EQ(ss_port(&ev.local), ss_port(&e.addr));
        CHECK_EQ(ev.peer.ss_family, fam);

        CHECK_EQ(uiw_cm_accept(sc, NULL, &ps, (void *)0x5c), 0);
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "server established")) {
            CHECK(ev.user == (void *)0x5c);
            /* RFC 6581 §9.1: responder IRD = max(3, initiator ORD 7), ORD =
             * min(9, initiator IRD 5) */
            CHECK_EQ(ev.ird, 7);
            CHECK_EQ(ev.ord, 5);
            CHECK_EQ(ev.peer_ird, 5);
            CHECK_EQ(ev.peer_ord, 7);
            CHECK_EQ(ev.private_data_len, 0);
        }
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "client established")) {
            CHECK(ev.user == (void *)0xc1);
            CHECK_EQ(ev.private_data_len, ls);
            CHECK_MEM(ev.private_data, pds, ls);
            CHECK_EQ(ev.peer_ird, 7);
            CHECK_EQ(ev.peer_ord, 5);
            CHECK_EQ(ev.ird, 5); /* max(5, responder ORD 5) */
            CHECK_EQ(ev.ord, 7); /* min(7, responder IRD 7) */
            CHECK(!ev.crc);
            CHECK_EQ(ev.mpa_rev, 2);
            CHECK_EQ(ss_port(&ev.peer), ss_port(&e.addr));
        }
        /* orderly close from either side alternately */
        struct uiw_conn *closer = i & 1 ? sc : cc, *other = i & 1 ? cc : sc;
        struct uiw_cm_channel *chcl = i & 1 ? e.chs : e.chc, *cho = i & 1 ? e.chc : e.chs;
        CHECK_EQ(uiw_cm_disconnect(closer), 0);
        expect_event(cho, &ev, UIW_CM_DISCONNECTED, 0, other, "peer disconnected");
        expect_event(chcl, &ev, UIW_CM_DISCONNECTED, 0, closer, "closer disconnected");
        CHECK_EQ(uiw_cm_disconnect(closer), 0);
        CHECK_EQ(uiw_cm_disconnect(other), 0);
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    }
    env_down(&e);
}

/* Argument checks, limits, clamping, state errors. */
static void t_limits(void)
{
    struct env e;
    if (!env_up(&e, AF_INET))
        return;
    uint8_t pd[UIW_MPA_MAX_PD + 1];
    memset(pd, 0xab, sizeof(pd));
    struct uiw_conn *cc = NULL, *sc;
    struct uiw_conn_param p = {.private_data = pd, .private_data_len = 509};
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, &p, e.chc, NULL, &cc),
             -EMSGSIZE);
    p.private_data = NULL;
    p.private_data_len = 4;
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, &p, e.chc, NULL, &cc), -EINVAL);
    CHECK_EQ(uiw_cm_connect(NULL, NULL, NULL, NULL, e.chc, NULL, &cc), -EINVAL);
    struct sockaddr_storage s6 = loop_addr(AF_INET6, 0);
    CHECK_EQ(uiw_cm_connect(NULL, (struct sockaddr *)&s6, (struct sockaddr *)&e.addr, NULL, e.chc,
                            NULL, &cc),
             -EINVAL);
    struct sockaddr un = {.sa_family = AF_UNIX};
    CHECK_EQ(uiw_cm_connect(NULL, NULL, &un, NULL, e.chc, NULL, &cc), -EAFNOSUPPORT);
    CHECK_EQ(uiw_cm_accept(NULL, NULL, NULL, NULL), -EINVAL);
    CHECK_EQ(uiw_cm_disconnect(NULL), -EINVAL);
    CHECK_EQ(uiw_cm_get_event(NULL, NULL), -EINVAL);

    /* IRD/ORD clamped to the device limits; source address bound */
    struct sockaddr_storage src = loop_addr(AF_INET, 0);
    struct uiw_conn_param big = {.ird = 1000, .ord = 1000};
    struct uiw_cm_event ev;
    CHECK_EQ(uiw_cm_connect(NULL, (struct sockaddr *)&src, (struct sockaddr *)&e.addr, &big, e.chc,
                            NULL, &cc),
             0);
    CHECK_EQ(uiw_cm_disconnect(cc), -ENOTCONN);
    /* connect() chose the port and it was written back */
    CHECK(ss_port(&src) != 0);
    if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "clamp")) {
        sc = ev.conn;
        /* the addresses cm.c takes from accept4 and the listener instead of
         * asking the socket: exactly the initiator's and the listener's */
        CHECK_EQ(ev.peer.ss_family, AF_INET);
        CHECK_EQ(ss_port(&ev.peer), ss_port(&src));
        CHECK_EQ(((struct sockaddr_in *)&ev.peer)->sin_addr.s_addr,
                 ((struct sockaddr_in *)&src)->sin_addr.s_addr);
        CHECK_EQ(ev.local.ss_family, AF_INET);
        CHECK_EQ(ss_port(&ev.local), ss_port(&e.addr));
        CHECK_EQ(((struct sockaddr_in *)&ev.local)->sin_addr.s_addr,
                 ((struct sockaddr_in *)&e.addr)->sin_addr.s_addr);
        CHECK_EQ(ev.peer_ird, UIW_MAX_IRD);
        CHECK_EQ(ev.peer_ord, UIW_MAX_ORD);
        p.private_data = pd;
        p.private_data_len = 509;
        CHECK_EQ(uiw_cm_accept(sc, NULL, &p, NULL), -EMSGSIZE);
        CHECK_EQ(uiw_cm_disconnect(sc), -ENOTCONN);
        struct uiw_conn_param ps = {.ird = 1000, .ord = 1000};
        CHECK_EQ(uiw_cm_accept(sc, NULL, &ps, NULL), 0);
        CHECK_EQ(uiw_cm_accept(sc, NULL, &ps, NULL), -EINVAL);
        CHECK_EQ(uiw_cm_reject(sc, NULL, 0), -EINVAL);
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "clamp est")) {
            CHECK_EQ(ev.ird, UIW_MAX_IRD);
            CHECK_EQ(ev.ord, UIW_MAX_ORD);
        }
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "clamp est c")) {
            CHECK_EQ(ev.peer_ird, UIW_MAX_IRD);
            CHECK_EQ(ev.peer_ord, UIW_MAX_ORD);
            CHECK_EQ(ev.local.ss_family, AF_INET);
            CHECK_EQ(ss_port(&ev.local), ss_port(&src)); /* read once, at connect() */
            CHECK_EQ(ss_port(&ev.peer), ss_port(&e.addr));
        }
        struct sockaddr_storage la, pa;
        CHECK_EQ(uiw_cm_conn_addr(cc, &la, &pa), 0);
        CHECK_EQ(ss_port(&pa), ss_port(&e.addr));
        CHECK_EQ(ss_port(&la), ss_port(&ev.local));
        /* destroy without disconnect: abortive; the peer sees the RST */
        uiw_cm_conn_destroy(cc);
        expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, -ECONNRESET, sc, "abort seen");
        uiw_cm_conn_destroy(sc);
    }
    /* the channel fd is readable exactly while an event is queued */
    struct pollfd pf = {.fd = uiw_cm_channel_fd(e.chs), .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 0), 0);
    CHECK_EQ(uiw_cm_get_event(e.chs, &ev), -EAGAIN);
    env_down(&e);
}

static void t_reject(int fam)
{
    static const uint16_t lens[] = {0, 7, 252, 508};
    struct env e;
    if (!env_up(&e, fam))
        return;
    for (unsigned i = 0; i < 4; i++) {
        uint8_t pd[UIW_MPA_MAX_PD];
        fill_pattern(pd, lens[i], 40 + i);
        struct uiw_conn *cc = NULL, *sc;
        struct uiw_cm_event ev;
        struct uiw_conn_param pc = {.ird = 2, .ord = 3};
        sc = connect_req(&e, NULL, &pc, &cc, &ev);
        if (!sc)
            break;
        CHECK_EQ(uiw_cm_reject(sc, pd, lens[i]), 0);
        CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), -EINVAL);
        if (expect_event(e.chc, &ev, UIW_CM_REJECTED, -ECONNREFUSED, cc, "rejected")) {
            CHECK_EQ(ev.private_data_len, lens[i]);
            CHECK_MEM(ev.private_data, pd, lens[i]);
            CHECK(ev.enhanced);
            CHECK(ev.user == (void *)0xc1);
        }
        CHECK(no_event(e.chs, i ? 20 : QUIET_MS));
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    }
    env_down(&e);
}

static void t_unreachable(int fam)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uint16_t port;
    int fd = raw_listen(fam, &port); /* a port that was free, now closed */
    close(fd);
    struct sockaddr_storage a = loop_addr(fam, port);
    struct uiw_conn *c = NULL;
    struct uiw_cm_event ev;
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&a, NULL, ch, (void *)7, &c), 0);
    if (expect_event(ch, &ev, UIW_CM_UNREACHABLE, -ECONNREFUSED, c, "unreachable"))
        CHECK(ev.user == (void *)7);
    CHECK_EQ(uiw_cm_disconnect(c), 0); /* closed: nothing to do */
    uiw_cm_conn_destroy(c);
    uiw_cm_channel_destroy(ch);
}

/* Many connections at once through one listener. */
static void t_concurrent(int fam)
{
    enum { N = 12 };
    struct env e;
    if (!env_up(&e, fam))
        return;
    struct uiw_conn *cc[N], *sc[N] = {0};
    uint8_t pd[N][8];
    for (int i = 0; i < N; i++) {
        memset(pd[i], i, sizeof(pd[i]));
        struct uiw_conn_param p = {.private_data = pd[i], .private_data_len = 8};
        CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, &p, e.chc,
                                (void *)(intptr_t)(i + 1), &cc[i]),
                 0);
    }
    int nreq = 0, nest_s = 0, nest_c = 0;
    struct uiw_cm_event ev;
    /* the server sees CONNECT_REQUESTs and ESTABLISHEDs interleaved */
    while ((nreq < N || nest_s < nreq) && eng_cm_next(e.chs, &ev, EV_MS) == 0) {
        if (ev.type == UIW_CM_ESTABLISHED) {
            nest_s++;
            continue;
        }
        CHECK_EQ(ev.type, UIW_CM_CONNECT_REQUEST);
        CHECK_EQ(ev.private_data_len, 8);
        int idx = ev.private_data[0];
        CHECK(idx >= 0 && idx < N);
        if (idx < 0 || idx >= N)
            continue;
        /* echo the client's private data back */
        struct uiw_conn_param p = {.private_data = ev.private_data, .private_data_len = 8};
        sc[idx] = ev.conn;
        CHECK_EQ(uiw_cm_accept(ev.conn, NULL, &p, (void *)(intptr_t)(idx + 1)), 0);
        nreq++;
    }
    CHECK_EQ(nreq, N);
    while (nest_c < N && eng_cm_next(e.chc, &ev, EV_MS) == 0) {
        CHECK_EQ(ev.type, UIW_CM_ESTABLISHED);
        int idx = (int)(intptr_t)ev.user - 1;
        CHECK(idx >= 0 && idx < N && ev.conn == cc[idx]);
        CHECK(idx >= 0 && idx < N && ev.private_data[0] == idx);
        nest_c++;
    }
    CHECK_EQ(nest_s, N);
    CHECK_EQ(nest_c, N);
    for (int i = 0; i < N; i++)
        if (sc[i])
            CHECK_EQ(uiw_cm_disconnect(sc[i]), 0);
    int nd_s = 0, nd_c = 0;
    while (nd_c < nreq && eng_cm_next(e.chc, &ev, EV_MS) == 0)
        nd_c += ev.type == UIW_CM_DISCONNECTED && ev.status == 0;
    while (nd_s < nreq && eng_cm_next(e.chs, &ev, EV_MS) == 0)
        nd_s += ev.type == UIW_CM_DISCONNECTED && ev.status == 0;
    CHECK_EQ(nd_c, N);
    CHECK_EQ(nd_s, N);
    for (int i = 0; i < N; i++)
        uiw_cm_conn_destroy(cc[i]);
    for (int i = 0; i < N; i++)
        uiw_cm_conn_destroy(sc[i]);
    env_down(&e);
}

/* Connections destroyed at every stage while the progress thread works on
 * them (run under ASan/TSan: no leak, no race, no hang). */
static void t_churn(int fam)
{
    enum { N = 40 };
    struct env e;
    if (!env_up(&e, fam))
        return;
    struct uiw_conn *cc[N] = {0};
    struct uiw_cm_event ev;
    int nreq = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, NULL, e.chc, NULL, &cc[i]),
                 0);
        if (i % 4 == 0) { /* cancel at once, before TCP or MPA finished */
            uiw_cm_conn_destroy(cc[i]);
            cc[i] = NULL;
        }
        if (i % 4 == 1)
            usleep(200);
        /* serve what is there: accept, reject or drop alternately */
        while (eng_cm_next(e.chs, &ev, 0) == 0) {
            if (ev.type != UIW_CM_CONNECT_REQUEST) {
                continue;
            }
            nreq++;
            if (nreq % 3 == 0)
                uiw_cm_accept(ev.conn, NULL, NULL, NULL);
            else if (nreq % 3 == 1)
                uiw_cm_reject(ev.conn, "no", 2);
            uiw_cm_conn_destroy(ev.conn); /* the ESTABLISHED etc. go with it */
        }
        if (i % 4 == 2 && cc[i]) {
            uiw_cm_conn_destroy(cc[i]);
            cc[i] = NULL;
        }
    }
    usleep(20000);
    while (eng_cm_next(e.chs, &ev, 200) == 0) {
        if (ev.type == UIW_CM_CONNECT_REQUEST) {
            nreq++;
            uiw_cm_conn_destroy(ev.conn);
        }
    }
    for (int i = 0; i < N; i++)
        uiw_cm_conn_destroy(cc[i]);
    CHECK(nreq > 0);
    /* the channels hold nothing for destroyed connections */
    struct pollfd pf = {.fd = uiw_cm_channel_fd(e.chc), .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, 0), 0);
    env_down(&e);
}

/* A listener destroyed with a CONNECT_REQUEST nobody retrieved. */
static void t_listener_destroy(void)
{
    struct env e;
    if (!env_up(&e, AF_INET6))
        return;
    struct uiw_conn *cc = NULL;
    struct uiw_cm_event ev;
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, NULL, e.chc, NULL, &cc), 0);
    struct pollfd pf = {.fd = uiw_cm_channel_fd(e.chs), .events = POLLIN};
    CHECK_EQ(poll(&pf, 1, EV_MS), 1);
    /* and one still waiting for its Request */
    int raw = raw_connect(&e.addr);
    CHECK(raw >= 0);
    uiw_cm_listener_destroy(e.l);
    e.l = NULL;
    CHECK_EQ(poll(&pf, 1, 0), 0); /* the event went with its connection */
    CHECK_EQ(uiw_cm_get_event(e.chs, &ev), -EAGAIN);
    expect_event(e.chc, &ev, UIW_CM_CONNECT_ERROR, -ECONNRESET, cc, "listener gone");
    CHECK(wait_close(raw, EV_MS) <= 0);
    close(raw);
    uiw_cm_conn_destroy(cc);
    /* the port is free again (SO_REUSEADDR) */
    struct uiw_listener *l2 = NULL;
    CHECK_EQ(uiw_cm_listen(NULL, (struct sockaddr *)&e.addr, 4, e.chs, NULL, &l2), 0);
    uiw_cm_listener_destroy(l2);
    env_down(&e);
}

/* A wildcard IPv6 listener takes IPv4 too (dual stack). */
static void t_wildcard(void)
{
    struct uiw_cm_channel *chs = eng_cm_chan(), *chc = eng_cm_chan();
    struct sockaddr_in6 any;
    memset(&any, 0, sizeof(any));
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    struct uiw_listener *l = NULL;
    CHECK_EQ(uiw_cm_listen(NULL, (struct sockaddr *)&any, 0, chs, NULL, &l), 0);
    if (!l)
        return;
    struct sockaddr_storage a;
    uiw_cm_listener_addr(l, &a);
    for (int fam = 0; fam < 2; fam++) {
        struct sockaddr_storage d = loop_addr(fam ? AF_INET6 : AF_INET, ss_port(&a));
        struct uiw_conn *cc = NULL;
        struct uiw_cm_event ev;
        CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&d, NULL, chc, NULL, &cc), 0);
        if (expect_event(chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "wildcard")) {
            struct uiw_conn *sc = ev.conn;
            CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
            expect_event(chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "wildcard s");
            expect_event(chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "wildcard c");
            uiw_cm_conn_destroy(sc);
            expect_event(chc, &ev, UIW_CM_DISCONNECTED, -ECONNRESET, cc, "wildcard abort");
        }
        uiw_cm_conn_destroy(cc);
    }
    uiw_cm_listener_destroy(l);
    uiw_cm_channel_destroy(chs);
    uiw_cm_channel_destroy(chc);
}

/* ------------------------------------------------------------------------
 * Against raw peers, default policy
 * ---------------------------------------------------------------------- */

/* Our initiator against a raw responder that sends `reply`. Returns the
 * raw socket (the caller closes it) and the Request it received. */
static int raw_responder(int fam, const struct uiw_conn_param *p, struct ibv_qp *qp,
                         struct uiw_cm_channel *ch, struct uiw_conn **cc, uiw_mpa_frame *req)
{
    uint16_t port;
    int lfd = raw_listen(fam, &port);
    if (lfd < 0)
        return -1;
    struct sockaddr_storage a = loop_addr(fam, port);
    int rc = uiw_cm_connect(qp, NULL, (struct sockaddr *)&a, p, ch, NULL, cc);
    CHECK_EQ(rc, 0);
    int fd = rc ? -1 : raw_accept(lfd, EV_MS);
    close(lfd);
    CHECK(fd >= 0);
    if (fd < 0)
        return -1;
    uint8_t buf[UIW_MPA_MAX_FRAME];
    int n = read_frame(fd, buf, EV_MS);
    CHECK(n > 0);
    if (n > 0)
        CHECK_EQ(uiw_mpa_decode(buf, (size_t)n, UIW_MPA_REQUEST, req), n);
    /* the initiator sends nothing after its Request until the Reply */
    CHECK(quiet(fd, 20));
    return fd;
}

/* Our Request as the default policy sends it, and every bad Reply. */
static void t_raw_replies(int fam)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uiw_mpa_frame rq;
    struct uiw_conn *c = NULL;
    struct uiw_cm_event ev;
    uint8_t f[UIW_MPA_MAX_FRAME + 64];
    size_t n;
    uint8_t pd[3] = {1, 2, 3};
    struct uiw_conn_param p = {.private_data = pd, .private_data_len = 3, .ird = 4, .ord = 2};

    /* 1. the Request; then garbage: -EPROTO */
    int fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        CHECK_EQ(rq.rev, 2);
        CHECK(rq.enhanced);
        CHECK(!rq.crc);
        CHECK(!rq.markers);
        CHECK(!rq.reject);
        CHECK(!rq.p2p);
        CHECK_EQ(rq.rtr, 0);
        CHECK_EQ(rq.res, 0);
        CHECK_EQ(rq.ird, 4);
        CHECK_EQ(rq.ord, 2);
        CHECK_EQ(rq.ulp_pd_len, 3);
        CHECK_MEM(rq.ulp_pd, pd, 3);
        memset(f, 'x', 24);
        eng_send_all(fd, f, 24);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EPROTO, c, "garbage reply");
        CHECK(wait_close(fd, EV_MS) <= 0);
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 2. a Request key where the Reply belongs (Initiator/Initiator) */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
        eng_send_all(fd, f, n);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EPROTO, c, "wrong key");
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 3. revision 3 */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, false, 0, 3, 0, 0, NULL, 0);
        eng_send_all(fd, f, n);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EPROTO, c, "rev 3");
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 4. responder demands markers (M=1) we cannot send: no hang */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, false, S | UIW_MPA_FLAG_M, 2, 4, 2, NULL, 0);
        eng_send_all(fd, f, n);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EOPNOTSUPP, c, "markers refused");
        CHECK(wait_close(fd, EV_MS) <= 0); /* closed without a Terminate */
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 5. responder ORD above our max IRD: Terminate LLP/MPA/6, -ENOBUFS */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, false, S, 2, 4, 200, NULL, 0);
        eng_send_all(fd, f, n);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ENOBUFS, c, "insufficient IRD");
        uiw_hdr h;
        int pl = read_fpdu(fd, false, &h, NULL, EV_MS);
        CHECK_EQ(pl, 0);
        if (pl == 0) {
            CHECK_EQ(h.opcode, UIW_OP_TERMINATE);
            CHECK(!h.tagged);
            CHECK(h.last);
            CHECK_EQ(h.qn, UIW_QN_TERMINATE);
            CHECK_EQ(h.msn, 1);
            CHECK_EQ(h.mo, 0);
            CHECK_EQ(h.u.term.cause.layer, UIW_LAYER_LLP);
            CHECK_EQ(h.u.term.cause.etype, UIW_LLP_ET_MPA);
            CHECK_EQ(h.u.term.cause.ecode, UIW_MPA_EC_INSUFFICIENT_IRD);
        }
        CHECK_EQ(wait_close(fd, EV_MS), 0); /* then FIN */
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 6. A=1 in the Reply to a client-server Request: Terminate code 7 */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, false, S | UIW_MPA_FLAG_C, 2, UIW_MPA_IRD_A_P2P | 4,
                     UIW_MPA_ORD_C_WRITE0 | 2, NULL, 0);
        eng_send_all(fd, f, n);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EOPNOTSUPP, c, "unwanted p2p");
        uiw_hdr h;
        int pl = read_fpdu(fd, true, &h, NULL, EV_MS); /* C=1 in the Reply: CRC on */
        CHECK_EQ(pl, 0);
        if (pl == 0) {
            CHECK_EQ(h.opcode, UIW_OP_TERMINATE);
            CHECK_EQ(h.qn, UIW_QN_TERMINATE);
            CHECK_EQ(h.msn, 1);
            CHECK_EQ(h.u.term.cause.layer, UIW_LAYER_LLP);
            CHECK_EQ(h.u.term.cause.ecode, UIW_MPA_EC_NO_MATCHING_RTR);
        }
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 7. the responder closes instead of answering */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        close(fd);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ECONNRESET, c, "no reply, FIN");
        uiw_cm_conn_destroy(c);
    }
    /* 8. siw's short Reject (R and S, PD_Length 0): REJECTED */
    fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        n = mk_frame(f, false, UIW_MPA_FLAG_R, 2, 0, 0, NULL, 0);
        f[16] |= S;
        eng_send_all(fd, f, n);
        if (expect_event(ch, &ev, UIW_CM_REJECTED, -ECONNREFUSED, c, "siw reject"))
            CHECK_EQ(ev.private_data_len, 0);
        close(fd);
        uiw_cm_conn_destroy(c);
    }
    /* 9. a good Reply with C=1 (CRC on for both), Rev 1 (no S) in one
     * segment with FPDU bytes behind it: ESTABLISHED, the bytes are the
     * stream's (discarded without a QP); then the responder's FIN */
    for (int rev = 1; rev <= 2; rev++) {
        fd = raw_responder(fam, &p, NULL, ch, &c, &rq);
        if (fd < 0)
            continue;
        uint8_t rpd[5] = {9, 8, 7, 6, 5};
        n = mk_frame(f, false, (uint8_t)(UIW_MPA_FLAG_C | (rev == 2 ? S : 0)), (uint8_t)rev, 9, 3,
                     rpd, 5);
        uiw_hdr w = rtr_write_hdr();
        n += mk_fpdu(&w, true, f + n);
        eng_send_all(fd, f, n);
        if (expect_event(ch, &ev, UIW_CM_ESTABLISHED, 0, c, "good reply")) {
            CHECK(ev.crc);
            CHECK_EQ(ev.mpa_rev, rev);
            CHECK_EQ(ev.enhanced, rev == 2);
            CHECK_EQ(ev.private_data_len, 5);
            CHECK_MEM(ev.private_data, rpd, 5);
            if (rev == 2) {
                CHECK_EQ(ev.peer_ird, 9);
                CHECK_EQ(ev.peer_ord, 3);
                CHECK_EQ(ev.ird, 4);
                CHECK_EQ(ev.ord, 2);
            }
        }
        if (rev == 1) {
            shutdown(fd, SHUT_WR);
            expect_event(ch, &ev, UIW_CM_DISCONNECTED, 0, c, "peer FIN");
            CHECK_EQ(wait_close(fd, EV_MS), 0); /* answered with our FIN */
        } else {
            eng_rst_close(fd);
            fd = -1;
            expect_event(ch, &ev, UIW_CM_DISCONNECTED, -ECONNRESET, c, "peer RST");
        }
        if (fd >= 0)
            close(fd);
        uiw_cm_conn_destroy(c);
    }
    uiw_cm_channel_destroy(ch);
}

/* A raw initiator: connect to e->addr, send bytes. */
static int raw_initiator(struct env *e, const uint8_t *req, size_t n)
{
    int fd = raw_connect(&e->addr);
    CHECK(fd >= 0);
    if (fd >= 0 && n)
        eng_send_all(fd, req, n);
    return fd;
}

/* Our responder with the default policy against raw Requests. */
static void t_raw_requests(int fam)
{
    struct env e;
    if (!env_up(&e, fam))
        return;
    uint8_t f[UIW_MPA_MAX_FRAME + 64], r[UIW_MPA_MAX_FRAME];
    uiw_mpa_frame rp;
    struct uiw_cm_event ev;
    size_t n;
    int fd;

    /* 1. M=1: we cannot send markers: Reject (R=1) without the ULP, FIN */
    n = mk_frame(f, true, S | UIW_MPA_FLAG_M, 2, 4, 4, NULL, 0);
    fd = raw_initiator(&e, f, n);
    int rn = read_frame(fd, r, EV_MS);
    CHECK(rn > 0);
    if (rn > 0 && uiw_mpa_decode(r, (size_t)rn, UIW_MPA_REPLY, &rp) == rn) {
        CHECK(rp.reject);
        CHECK(!rp.markers);
    }
    CHECK_EQ(wait_close(fd, EV_MS), 0);
    close(fd);
    CHECK(no_event(e.chs, QUIET_MS));

    /* 2. garbage, a Reply key, a truncated Request: closed, no event */
    memset(f, 'z', 40);
    fd = raw_initiator(&e, f, 40);
    CHECK(wait_close(fd, EV_MS) <= 0);
    close(fd);
    n = mk_frame(f, false, S, 2, 1, 1, NULL, 0);
    fd = raw_initiator(&e, f, n);
    CHECK(wait_close(fd, EV_MS) <= 0);
    close(fd);
    n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
    fd = raw_initiator(&e, f, 10);
    shutdown(fd, SHUT_WR);
    CHECK(wait_close(fd, EV_MS) <= 0);
    close(fd);
    /* PD_Length over 512 */
    n = mk_frame(f, true, 0, 2, 0, 0, NULL, 0);
    f[18] = 0x02;
    f[19] = 0x01;
    fd = raw_initiator(&e, f, n);
    CHECK(wait_close(fd, EV_MS) <= 0);
    close(fd);
    /* 3. bytes right behind the Request (siw's strict check): dropped */
    n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
    memset(f + n, 0, 8);
    fd = raw_initiator(&e, f, n + 8);
    CHECK(wait_close(fd, EV_MS) <= 0);
    close(fd);
    CHECK(no_event(e.chs, QUIET_MS));

    /* 4. C=1 is echoed, Rev 1 is answered with Rev 1 */
    for (int rev = 1; rev <= 2; rev++) {
        uint8_t pd[4] = {0xde, 0xad, 0xbe, 0xef};
        n = mk_frame(f, true, (uint8_t)(UIW_MPA_FLAG_C | (rev == 2 ? S : 0)), (uint8_t)rev, 6, 5,
                     pd, 4);
        fd = raw_initiator(&e, f, n);
        if (!expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "raw request")) {
            close(fd);
            continue;
        }
        struct uiw_conn *sc = ev.conn;
        CHECK(ev.crc);
        CHECK_EQ(ev.mpa_rev, rev);
        CHECK_EQ(ev.enhanced, rev == 2);
        CHECK_EQ(ev.peer_ird, rev == 2 ? 6 : 0);
        CHECK_EQ(ev.peer_ord, rev == 2 ? 5 : 0);
        CHECK_EQ(ev.private_data_len, 4);
        CHECK_MEM(ev.private_data, pd, 4);
        uint8_t rpd[UIW_MPA_MAX_PD];
        uint16_t rl = rev == 2 ? 508 : 512;
        fill_pattern(rpd, rl, 77);
        struct uiw_conn_param p = {.private_data = rpd, .private_data_len = rl, .ird = 2, .ord = 8};
        CHECK_EQ(uiw_cm_accept(sc, NULL, &p, NULL), 0);
        rn = read_frame(fd, r, EV_MS);
        CHECK(rn > 0);
        if (rn > 0 && uiw_mpa_decode(r, (size_t)rn, UIW_MPA_REPLY, &rp) == rn) {
            CHECK(!rp.reject);
            CHECK(rp.crc);
            CHECK_EQ(rp.rev, rev);
            CHECK_EQ(rp.enhanced, rev == 2);
            CHECK_EQ(rp.ulp_pd_len, rl);
            CHECK_MEM(rp.ulp_pd, rpd, rl);
            if (rev == 2) {
                CHECK_EQ(rp.ird, 5); /* max(2, initiator ORD 5) */
                CHECK_EQ(rp.ord, 6); /* min(8, initiator IRD 6) */
            }
        }
        expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "raw est");
        /* the responder sends nothing before the initiator's first FPDU */
        CHECK(quiet(fd, 50));
        if (rev == 1) {
            /* the initiator's FPDUs then its FIN: DISCONNECTED, our FIN */
            uiw_hdr w = rtr_write_hdr();
            n = mk_fpdu(&w, true, f);
            eng_send_all(fd, f, n);
            shutdown(fd, SHUT_WR);
            expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, 0, sc, "raw FIN");
            CHECK_EQ(wait_close(fd, EV_MS), 0);
            close(fd);
            uiw_cm_conn_destroy(sc);
        } else {
            /* destroy while connected: the peer sees RST */
            uiw_cm_conn_destroy(sc);
            CHECK_EQ(wait_close(fd, EV_MS), -ECONNRESET);
            close(fd);
        }
    }

    /* 5. bytes from the initiator while the ULP decides: accept -EPROTO;
     * the initiator gone: -ECONNRESET */
    for (int k = 0; k < 2; k++) {
        n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
        fd = raw_initiator(&e, f, n);
        if (!expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "early")) {
            close(fd);
            continue;
        }
        if (k == 0)
            eng_send_all(fd, f, 4);
        else
            shutdown(fd, SHUT_WR);
        usleep(50000);
        CHECK_EQ(uiw_cm_accept(ev.conn, NULL, NULL, NULL), k == 0 ? -EPROTO : -ECONNRESET);
        CHECK(wait_close(fd, EV_MS) <= 0);
        close(fd);
        uiw_cm_conn_destroy(ev.conn);
    }

    /* 6. a Request in pieces, 30 ms apart (the header cut, then the
     * private data cut): the responder's one-shot registration is armed
     * again after each partial read; the Request arrives whole, nothing
     * before; the Reply, then the initiator's close: DISCONNECTED */
    {
        uint8_t pd[100];
        fill_pattern(pd, sizeof(pd), 91);
        n = mk_frame(f, true, S, 2, 3, 4, pd, sizeof(pd));
        const size_t cut[] = {0, 7, 20, 61, n};
        fd = raw_initiator(&e, f, 0);
        for (unsigned i = 0; fd >= 0 && i + 1 < sizeof(cut) / sizeof(cut[0]); i++) {
            if (i)
                CHECK(no_event(e.chs, 30));
            eng_send_all(fd, f + cut[i], cut[i + 1] - cut[i]);
        }
        if (fd >= 0 && expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "pieces")) {
            struct uiw_conn *sc = ev.conn;
            CHECK_EQ(ev.peer_ird, 3);
            CHECK_EQ(ev.peer_ord, 4);
            CHECK_EQ(ev.private_data_len, sizeof(pd));
            CHECK_MEM(ev.private_data, pd, sizeof(pd));
            CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
            int rn6 = read_frame(fd, r, EV_MS);
            CHECK(rn6 > 0);
            if (rn6 > 0 && uiw_mpa_decode(r, (size_t)rn6, UIW_MPA_REPLY, &rp) == rn6)
                CHECK(!rp.reject);
            expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "pieces est");
            shutdown(fd, SHUT_WR);
            expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, 0, sc, "pieces FIN");
            CHECK_EQ(wait_close(fd, EV_MS), 0);
            uiw_cm_conn_destroy(sc);
        }
        if (fd >= 0)
            close(fd);
    }
    env_down(&e);
}

/* ------------------------------------------------------------------------
 * With QPs (the engine's data path)
 * ---------------------------------------------------------------------- */

/* A Send from one connected QP to the other arrives intact: the FPDU stream
 * starts exactly after the MPA frames. */
static void xfer(struct eng_tqp *from, struct eng_tqp *to, const char *msg)
{
    static char sbuf[64], rbuf[64];
    size_t len = strlen(msg) + 1;
    struct ibv_mr *smr = ibv_reg_mr(from->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = ibv_reg_mr(to->pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
    CHECK(smr && rmr);
    if (smr && rmr) {
        memcpy(sbuf, msg, len);
        memset(rbuf, 0, sizeof(rbuf));
        struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = 64, .lkey = rmr->lkey};
        struct ibv_recv_wr rw = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *rbad;
        struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = (uint32_t)len, .lkey = smr->lkey};
        struct ibv_send_wr sw = {.wr_id = 2,
                                 .sg_list = &ss,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED},
                           *sbad;
        CHECK_EQ(ibv_post_recv(to->qp, &rw, &rbad), 0);
        CHECK_EQ(ibv_post_send(from->qp, &sw, &sbad), 0);
        struct ibv_wc wc;
        CHECK_EQ(eng_poll_one(from->cq, &wc, EV_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.wr_id, 2);
        CHECK_EQ(eng_poll_one(to->cq, &wc, EV_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.wr_id, 1);
        CHECK_EQ(wc.byte_len, len);
        CHECK_STR(rbuf, msg);
    }
    if (smr)
        ibv_dereg_mr(smr);
    if (rmr)
        ibv_dereg_mr(rmr);
}

/* uiwarp <-> uiwarp with QPs under the process policy: ESTABLISHED on both
 * sides with the QPs in RTS, then an orderly close that flushes. */
static void t_qp_pair(int fam, bool expect_p2p)
{
    if (!g_have_qps)
        return;
    struct eng_tqp a, b;
    if (!tqp_make(&a) || !tqp_make(&b)) {
        CHECK(!"QP setup");
        eng_tqp_free(&a);
        eng_tqp_free(&b);
        return;
    }
    struct env e;
    if (!env_up(&e, fam))
        return;
    struct uiw_conn *cc = NULL, *sc;
    struct uiw_cm_event ev;
    struct uiw_conn_param p = {.ird = 4, .ord = 4};
    sc = connect_req(&e, a.qp, &p, &cc, &ev);
    if (sc) {
        CHECK_EQ(ev.p2p, expect_p2p);
        CHECK_EQ(uiw_cm_accept(sc, b.qp, &p, NULL), 0);
        /* the same QP cannot serve two connections */
        struct uiw_conn *c2 = NULL;
        CHECK_EQ(uiw_cm_connect(a.qp, NULL, (struct sockaddr *)&e.addr, &p, e.chc, NULL, &c2),
                 -EBUSY);
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "qp est c")) {
            CHECK_EQ(ev.p2p, expect_p2p);
            CHECK_EQ(eng_qp_state(a.qp), IBV_QPS_RTS);
        }
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "qp est s")) {
            CHECK_EQ(ev.p2p, expect_p2p);
            CHECK_EQ(eng_qp_state(b.qp), IBV_QPS_RTS);
        }
        /* the initiator speaks first (RFC 5044 §7.1.2 rule 4), then the
         * responder may */
        xfer(&a, &b, "hello from the initiator");
        xfer(&b, &a, "and back");
        /* a posted receive is flushed by the close */
        static uint8_t buf[64];
        struct ibv_mr *mr = ibv_reg_mr(b.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
        CHECK(mr != NULL);
        if (mr) {
            struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
            struct ibv_recv_wr wr = {.wr_id = 99, .sg_list = &sge, .num_sge = 1}, *bad;
            CHECK_EQ(ibv_post_recv(b.qp, &wr, &bad), 0);
        }
        CHECK_EQ(uiw_cm_disconnect(cc), 0);
        expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, 0, sc, "qp disc s");
        expect_event(e.chc, &ev, UIW_CM_DISCONNECTED, 0, cc, "qp disc c");
        CHECK_EQ(eng_qp_state(a.qp), IBV_QPS_ERR);
        CHECK_EQ(eng_qp_state(b.qp), IBV_QPS_ERR);
        struct ibv_wc wc;
        int got = 0;
        for (int i = 0; i < 200 && got == 0; i++) {
            got = ibv_poll_cq(b.cq, 1, &wc);
            if (!got)
                usleep(5000);
        }
        CHECK_EQ(got, 1);
        if (got == 1) {
            CHECK_EQ(wc.wr_id, 99);
            CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        }
        /* the MR before its PD (ibv_dealloc_pd refuses a PD in use);
         * rdma_cm's order: QP first, then the connection */
        if (mr)
            CHECK_EQ(ibv_dereg_mr(mr), 0);
        eng_tqp_free(&a);
        eng_tqp_free(&b);
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    } else {
        eng_tqp_free(&a);
        eng_tqp_free(&b);
    }
    env_down(&e);
}

/* Aborts with a QP attached: destroying the connection (QP alive) moves
 * the QP to ERR and ends the stream the way close() does, as Linux siw's
 * destroy does: FIN, as everything received was read (RST only when bytes
 * are left unread); destroying the QP first (connection up) reports
 * DISCONNECTED and closes the same way. */
static void t_qp_abort(int fam)
{
    if (!g_have_qps)
        return;
    struct env e;
    if (!env_up(&e, fam))
        return;
    for (int k = 0; k < 2; k++) {
        struct eng_tqp b;
        if (!tqp_make(&b)) {
            CHECK(!"QP setup");
            eng_tqp_free(&b);
            break;
        }
        uint8_t f[64];
        size_t n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
        int fd = raw_initiator(&e, f, n);
        struct uiw_cm_event ev;
        if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "abort req")) {
            struct uiw_conn *sc = ev.conn;
            CHECK_EQ(uiw_cm_accept(sc, b.qp, NULL, NULL), 0);
            uint8_t r[UIW_MPA_MAX_FRAME];
            CHECK(read_frame(fd, r, EV_MS) > 0);
            expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "abort est");
            CHECK_EQ(eng_qp_state(b.qp), IBV_QPS_RTS);
            if (k == 0) {
                uiw_cm_conn_destroy(sc);
                CHECK_EQ(wait_close(fd, EV_MS), 0);
                CHECK_EQ(eng_qp_state(b.qp), IBV_QPS_ERR);
                eng_tqp_free(&b);
            } else {
                eng_tqp_free(&b);
                expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, -ECONNABORTED, sc, "qp gone");
                CHECK_EQ(wait_close(fd, EV_MS), 0);
                CHECK_EQ(uiw_cm_disconnect(sc), 0);
                uiw_cm_conn_destroy(sc);
            }
        } else {
            eng_tqp_free(&b);
        }
        close(fd);
    }
    env_down(&e);
}

/* Our P2P responder (any policy: a responder honours A=1) against a raw
 * initiator: nothing is sent before the RTR, ESTABLISHED only after it;
 * a Read RTR is answered with a zero-length Read Response. */
static void t_qp_p2p_responder(int fam, uint8_t rtr)
{
    if (!g_have_qps)
        return;
    struct eng_tqp b;
    if (!tqp_make(&b)) {
        CHECK(!"QP setup");
        eng_tqp_free(&b);
        return;
    }
    struct env e;
    if (!env_up(&e, fam))
        return;
    uint8_t f[256], r[UIW_MPA_MAX_FRAME];
    uint16_t ordw =
        (uint16_t)((rtr == UIW_RTR_READ ? UIW_MPA_ORD_D_READ0 : UIW_MPA_ORD_C_WRITE0) | 1);
    size_t n = mk_frame(f, true, S, 2, UIW_MPA_IRD_A_P2P | 2, ordw, NULL, 0);
    int fd = raw_initiator(&e, f, n);
    struct uiw_cm_event ev;
    if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "p2p req")) {
        struct uiw_conn *sc = ev.conn;
        CHECK(ev.p2p);
        CHECK_EQ(ev.rtr, rtr);
        struct uiw_conn_param p = {.ird = 1, .ord = 1};
        CHECK_EQ(uiw_cm_accept(sc, NULL, &p, NULL), -EINVAL); /* P2P needs a QP */
        CHECK_EQ(uiw_cm_accept(sc, b.qp, &p, NULL), 0);
        int rn = read_frame(fd, r, EV_MS);
        uiw_mpa_frame rp;
        CHECK(rn > 0);
        if (rn > 0 && uiw_mpa_decode(r, (size_t)rn, UIW_MPA_REPLY, &rp) == rn) {
            CHECK(rp.p2p);
            CHECK_EQ(rp.rtr, rtr);
        }
        CHECK(quiet(fd, QUIET_MS)); /* RFC 5044 §7.1.2 rule 4 */
        CHECK(no_event(e.chs, 20)); /* no ESTABLISHED before the RTR */
        uiw_hdr h = rtr == UIW_RTR_READ ? rtr_read_hdr() : rtr_write_hdr();
        n = mk_fpdu(&h, false, f);
        eng_send_all(fd, f, n);
        expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "p2p est");
        if (rtr == UIW_RTR_READ) {
            uiw_hdr rr;
            int pl = read_fpdu(fd, false, &rr, NULL, EV_MS);
            CHECK_EQ(pl, 0);
            CHECK_EQ(rr.opcode, UIW_OP_READ_RESP);
            CHECK(rr.tagged);
            CHECK(rr.last);
            CHECK_EQ(rr.stag, 0);
            CHECK_EQ(rr.to, 0);
        }
        CHECK(quiet(fd, 50));
        eng_tqp_free(&b);
        uiw_cm_conn_destroy(sc);
    } else {
        eng_tqp_free(&b);
    }
    close(fd);
    env_down(&e);
}

/* Our P2P initiator (UIWARP_P2P=1, UIWARP_RTR=rtr_env) against a raw
 * responder choosing `pick`: the RTR is the first FPDU, byte-checked; a
 * pick we did not offer is a Terminate LLP/MPA/7. */
static void t_qp_p2p_initiator(int fam, uint8_t offered, uint8_t pick)
{
    if (!g_have_qps)
        return;
    struct eng_tqp a;
    if (!tqp_make(&a)) {
        CHECK(!"QP setup");
        eng_tqp_free(&a);
        return;
    }
    struct uiw_cm_channel *ch = eng_cm_chan();
    struct uiw_conn *c = NULL;
    uiw_mpa_frame rq;
    struct uiw_cm_event ev;
    struct uiw_conn_param p = {.ird = 2, .ord = 2};
    int fd = raw_responder(fam, &p, a.qp, ch, &c, &rq);
    if (fd >= 0) {
        CHECK(rq.p2p);
        CHECK_EQ(rq.rtr, offered);
        uint16_t ordw =
            (uint16_t)((pick == UIW_RTR_READ ? UIW_MPA_ORD_D_READ0 : UIW_MPA_ORD_C_WRITE0) | 2);
        uint8_t f[64];
        size_t n = mk_frame(f, false, S, 2, UIW_MPA_IRD_A_P2P | 2, ordw, NULL, 0);
        eng_send_all(fd, f, n);
        uiw_hdr h;
        if (!(offered & pick)) {
            expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -EOPNOTSUPP, c, "no matching rtr");
            int pl = read_fpdu(fd, false, &h, NULL, EV_MS);
            CHECK_EQ(pl, 0);
            CHECK_EQ(h.opcode, UIW_OP_TERMINATE);
            CHECK_EQ(h.u.term.cause.ecode, UIW_MPA_EC_NO_MATCHING_RTR);
        } else {
            int pl = read_fpdu(fd, false, &h, NULL, EV_MS);
            CHECK_EQ(pl, 0);
            if (pick == UIW_RTR_WRITE) {
                CHECK_EQ(h.opcode, UIW_OP_WRITE);
                CHECK(h.tagged);
                CHECK(h.last);
                CHECK_EQ(h.stag, 1);
                CHECK_EQ(h.to, 0);
            } else {
                CHECK_EQ(h.opcode, UIW_OP_READ_REQ);
                CHECK(!h.tagged);
                CHECK_EQ(h.qn, UIW_QN_READ_REQ);
                CHECK_EQ(h.msn, 1);
                CHECK_EQ(h.mo, 0);
                CHECK_EQ(h.u.rreq.sink_stag, 0);
                CHECK_EQ(h.u.rreq.sink_to, 0);
                CHECK_EQ(h.u.rreq.src_stag, 1);
                CHECK_EQ(h.u.rreq.src_to, 0);
                CHECK_EQ(h.u.rreq.read_size, 0);
                /* answer it as a responder would */
                uiw_hdr resp = rtr_write_hdr();
                resp.opcode = UIW_OP_READ_RESP;
                resp.stag = 0;
                n = mk_fpdu(&resp, false, f);
                eng_send_all(fd, f, n);
            }
            if (expect_event(ch, &ev, UIW_CM_ESTABLISHED, 0, c, "p2p init est")) {
                CHECK(ev.p2p);
                CHECK_EQ(ev.rtr, pick);
            }
            if (pick == UIW_RTR_WRITE) {
                /* the responder stays silent: the wake-up (docs/INTEROP.md
                 * §1), the RTR's form again, after the default 20 ms */
                int pl2 = read_fpdu(fd, false, &h, NULL, EV_MS);
                CHECK_EQ(pl2, 0);
                CHECK_EQ(h.opcode, UIW_OP_WRITE);
                CHECK_EQ(h.stag, 1);
            }
            CHECK(quiet(fd, 50)); /* nothing but the RTR (and a wake-up) */
            CHECK_EQ(eng_qp_state(a.qp), IBV_QPS_RTS);
        }
        close(fd);
    }
    eng_tqp_free(&a);
    uiw_cm_conn_destroy(c);
    uiw_cm_channel_destroy(ch);
}

/* ------------------------------------------------------------------------
 * The initiator's guard against siw's first-FPDU race (docs/INTEROP.md §1)
 * ---------------------------------------------------------------------- */

/* Bytes of the FPDU whose MPA length field starts at p (RFC 5044 §4.1:
 * length, ULPDU, pad to 4, CRC). */
static size_t fpdu_len(const uint8_t *p)
{
    size_t l = 2 + ((size_t)p[0] << 8 | p[1]);
    return l + (4 - l % 4) % 4 + 4;
}

/* Our QP connecting to a raw responder on 127.0.0.1 (raw_responder, IRD
 * and ORD 2), with sbuf (filled from seed) registered to Send from: what
 * t_first_hold and t_first_wake start from. false if any step failed
 * (checked); raw_rig_down undoes what was made either way. */
struct raw_rig {
    struct eng_tqp a;
    struct ibv_mr *mr;
    struct uiw_cm_channel *ch;
    struct uiw_conn *c;
    uiw_mpa_frame rq;
    int fd;
};

static bool raw_rig_up(struct raw_rig *r, uint8_t *sbuf, size_t len, unsigned seed)
{
    memset(r, 0, sizeof(*r));
    r->fd = -1;
    if (!tqp_make(&r->a)) {
        CHECK(!"QP setup");
        return false;
    }
    eng_fill(sbuf, len, seed);
    r->mr = ibv_reg_mr(r->a.pd, sbuf, len, IBV_ACCESS_LOCAL_WRITE);
    r->ch = eng_cm_chan();
    struct uiw_conn_param p = {.ird = 2, .ord = 2};
    r->fd = r->mr ? raw_responder(AF_INET, &p, r->a.qp, r->ch, &r->c, &r->rq) : -1;
    CHECK(r->fd >= 0);
    return r->fd >= 0;
}

static void raw_rig_down(struct raw_rig *r)
{
    if (r->fd >= 0)
        close(r->fd);
    if (r->mr)
        ibv_dereg_mr(r->mr); /* before the PD goes (EBUSY while an MR holds it) */
    eng_tqp_free(&r->a);
    uiw_cm_conn_destroy(r->c);
    if (r->ch)
        uiw_cm_channel_destroy(r->ch);
}

/* Read one whole FPDU (length field first); its length, 0 on timeout. */
static size_t read_whole_fpdu(int fd, uint8_t *buf, size_t room, int ms)
{
    if (read_n(fd, buf, 2, ms, NULL) != 2)
        return 0;
    size_t n = fpdu_len(buf);
    if (n < 2 || n > room || read_n(fd, buf + 2, n - 2, ms, NULL) != n - 2)
        return 0;
    return n;
}

/* Whether buf holds exactly one FPDU, with no payload and a good trailer;
 * its header in *h. */
static bool one_empty_fpdu(const uint8_t *buf, size_t n, uiw_hdr *h)
{
    uiw_rx rx;
    uiw_rx_cfg cfg = {.crc = false};
    uiw_rx_init(&rx, &cfg);
    size_t off = 0;
    int hdrs = 0;
    bool end = false;
    while (off < n) {
        uiw_rx_event e;
        size_t used = uiw_rx_feed(&rx, buf + off, n - off, &e);
        off += used;
        if (e.kind == UIW_RX_HDR && e.payload_len == 0) {
            *h = *e.hdr;
            hdrs++;
        } else if (e.kind == UIW_RX_END) {
            end = e.crc_ok;
        } else if (e.kind != UIW_RX_HDR || used == 0) {
            return false; /* payload, an error, or no progress */
        }
    }
    return hdrs == 1 && end;
}

/* Whether buf holds exactly one zero-length RDMA Write to STag 1, TO 0
 * (the Write RTR's form, and the wake-up's). */
static bool is_zero_write(const uint8_t *buf, size_t n)
{
    uiw_hdr h;
    return one_empty_fpdu(buf, n, &h) && h.opcode == UIW_OP_WRITE && h.stag == 1 && h.to == 0;
}

/* Whether buf holds exactly one zero-length RDMA Read Request, source STag
 * 1, MSN 1 (the Read RTR: start_rtr). */
static bool is_zero_read(const uint8_t *buf, size_t n)
{
    uiw_hdr h;
    return one_empty_fpdu(buf, n, &h) && h.opcode == UIW_OP_READ_REQ && h.u.rreq.read_size == 0 &&
           h.u.rreq.src_stag == 1 && h.msn == 1;
}

/* Our initiator against a raw responder (docs/INTEROP.md §1): P2P with the
 * Write RTR (the default), P2P with the Read RTR (rtr READ; what irdma and
 * cxgb4 responders pick) or client-server (rtr 0). Nothing is held: the RTR
 * and the Send posted right after ESTABLISHED arrive at once; while the
 * responder sends nothing, a wake-up (a zero-length Write, the Write RTR's
 * form) comes hold_ms after the Reply, and a second one 10 hold_ms later
 * (SILENT). ANSWER_LATE: the responder speaks after the first wake-up (a
 * zero-length Write of its own; with the Read RTR, its Read Response): no
 * second one. ANSWER_RTR (Read RTR): the responder answers the RTR at once,
 * as an RNIC does: no wake-up at all. NOTHING_SENT (client-server): our
 * side sends nothing, so the peer missed nothing: no wake-up. hold_ms 0:
 * none. */
enum { SILENT, ANSWER_LATE, ANSWER_RTR, NOTHING_SENT };
enum { CS = 0, WRITE_RTR = 1, READ_RTR = 2 };

static void t_first_wake(int rtr, unsigned hold_ms, int answer)
{
    static uint8_t sbuf[100];
    uint8_t f[64], buf[512];
    struct raw_rig r;
    bool read_rtr = rtr == READ_RTR;
    if (raw_rig_up(&r, sbuf, sizeof(sbuf), 78)) {
        struct uiw_cm_event ev;
        CHECK_EQ(r.rq.p2p, rtr != CS);
        size_t n = rtr == CS ? mk_frame(f, false, S, 2, 2, 2, NULL, 0)
                             : mk_frame(f, false, S, 2, UIW_MPA_IRD_A_P2P | 2,
                                        (read_rtr ? UIW_MPA_ORD_D_READ0 : UIW_MPA_ORD_C_WRITE0) | 2,
                                        NULL, 0);
        uint64_t t0 = eng_now_ms();
        eng_send_all(r.fd, f, n);
        bool est = expect_event(r.ch, &ev, UIW_CM_ESTABLISHED, 0, r.c, "wake: est");
        struct ibv_wc wc;
        uint64_t t_rtr = t0;
        if (answer == NOTHING_SENT) {
            CHECK(rtr == CS);
            /* nothing from our side: nothing the peer could have missed,
             * no wake-up; then a Send, at once */
            CHECK(quiet(r.fd, (int)(hold_ms * 11 + 300)));
            t0 = eng_now_ms();
        }
        CHECK_EQ(eng_post(r.a.qp, IBV_WR_SEND, sbuf, sizeof(sbuf), r.mr->lkey, 0, 0, 6, true), 0);
        /* the RTR, then the Send, whole, not held */
        size_t r1 = 1;
        if (rtr != CS) {
            r1 = est ? read_whole_fpdu(r.fd, buf, sizeof(buf), EV_MS) : 0;
            CHECK(r1 && (read_rtr ? is_zero_read(buf, r1) : is_zero_write(buf, r1)));
            t_rtr = eng_now_ms();
        }
        size_t r2 = est && r1 ? read_whole_fpdu(r.fd, buf, sizeof(buf), EV_MS) : 0;
        uint64_t t_send = eng_now_ms();
        CHECK(r2 == 2 + 18 + sizeof(sbuf) + 4); /* len, hdr, payload, CRC (no pad) */
        CHECK(r2 > 24 && memcmp(buf + 20, sbuf, sizeof(sbuf)) == 0);
        if (hold_ms >= 100)
            CHECK(t_send - t0 < hold_ms / 2); /* nothing waited for the timer */
        CHECK_EQ(eng_poll_one(r.a.cq, &wc, EV_MS), 1);
        CHECK_EQ(wc.wr_id, 6);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        /* the responder's answer: a zero-length Write, or the Read RTR's
         * Read Response (to the Read Request's sink STag, 0) */
        uiw_hdr h;
        uiw_hdr_init(&h, true, read_rtr ? UIW_OP_READ_RESP : UIW_OP_WRITE);
        h.stag = read_rtr ? 0 : 1;
        h.to = 0;
        if (answer == ANSWER_RTR) {
            CHECK(read_rtr);
            if (hold_ms >= 100)
                CHECK(t_rtr - t0 < hold_ms / 2);
            size_t m = mk_fpdu(&h, false, buf);
            CHECK(m > 0);
            eng_send_all(r.fd, buf, m);
            CHECK(quiet(r.fd, (int)(hold_ms * 11 + 300))); /* no wake-up */
        } else if (!hold_ms || answer == NOTHING_SENT) {
            CHECK(quiet(r.fd, (int)(hold_ms * 11 + 200))); /* no wake-up */
        } else {
            /* the first wake-up, hold_ms after the Reply at the earliest */
            size_t w = read_whole_fpdu(r.fd, buf, sizeof(buf), (int)hold_ms + EV_MS);
            uint64_t t_w = eng_now_ms();
            CHECK(w && is_zero_write(buf, w));
            CHECK(t_w - t0 >= hold_ms);
            if (answer == ANSWER_LATE) {
                /* the peer speaks: no second wake-up */
                size_t m = mk_fpdu(&h, false, buf);
                CHECK(m > 0);
                eng_send_all(r.fd, buf, m);
                CHECK(quiet(r.fd, (int)(hold_ms * 11 + 300)));
            } else {
                /* still silent: the second, 10 hold_ms later, then none */
                w = read_whole_fpdu(r.fd, buf, sizeof(buf), (int)(hold_ms * 10) + EV_MS);
                uint64_t t_w2 = eng_now_ms();
                CHECK(w && is_zero_write(buf, w));
                CHECK(t_w2 - t_w >= hold_ms * 10 - hold_ms / 2);
                CHECK(quiet(r.fd, (int)(hold_ms * 10 + 300)));
            }
        }
        CHECK_EQ(ibv_poll_cq(r.a.cq, 1, &wc), 0); /* the RTR, wake-ups complete nothing */
        CHECK_EQ(eng_qp_state(r.a.qp), IBV_QPS_RTS);
    }
    raw_rig_down(&r);
}

/* ------------------------------------------------------------------------
 * Policies from the environment (child processes)
 * ---------------------------------------------------------------------- */

/* UIWARP_MPA_TIMEOUT_MS=300 */
static void c_timeout(void)
{
    for (int fam = AF_INET; fam; fam = fam == AF_INET ? AF_INET6 : 0) {
        struct uiw_cm_channel *ch = eng_cm_chan();
        uint16_t port;
        int lfd = raw_listen(fam, &port);
        struct sockaddr_storage a = loop_addr(fam, port);
        struct uiw_conn *c = NULL;
        struct uiw_cm_event ev;
        uint64_t t0 = eng_now_ms();
        CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&a, NULL, ch, NULL, &c), 0);
        int fd = raw_accept(lfd, EV_MS); /* and never answer */
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ETIMEDOUT, c, "mpa timeout");
        uint64_t dt = eng_now_ms() - t0;
        CHECK(dt >= 280 && dt < 3000);
        CHECK(wait_close(fd, EV_MS) <= 0);
        close(fd);
        close(lfd);
        uiw_cm_conn_destroy(c);

        /* responder: no (or a partial) Request within the timeout: closed
         * silently */
        struct env e;
        if (env_up(&e, fam)) {
            for (int k = 0; k < 2; k++) {
                t0 = eng_now_ms();
                fd = raw_connect(&e.addr);
                if (k)
                    eng_send_all(fd, KEY_REQ, 10);
                CHECK(wait_close(fd, EV_MS) <= 0);
                dt = eng_now_ms() - t0;
                CHECK(dt >= 280 && dt < 3000);
                close(fd);
            }
            CHECK(no_event(e.chs, 20));
            /* disconnect whose FIN is never answered: DISCONNECTED anyway */
            uint8_t f[64];
            size_t n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
            fd = raw_initiator(&e, f, n);
            if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "req")) {
                struct uiw_conn *sc = ev.conn;
                CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
                expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "est");
                CHECK_EQ(uiw_cm_disconnect(sc), 0);
                expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, -ETIMEDOUT, sc, "disc timeout");
                uiw_cm_conn_destroy(sc);
            }
            close(fd);
            /* P2P responder: no RTR within the timeout */
            struct eng_tqp b = {0};
            if (g_have_qps && tqp_make(&b)) {
                n = mk_frame(f, true, S, 2, UIW_MPA_IRD_A_P2P | 1, UIW_MPA_ORD_C_WRITE0 | 1, NULL,
                             0);
                fd = raw_initiator(&e, f, n);
                if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "rtr req")) {
                    struct uiw_conn *sc = ev.conn;
                    CHECK_EQ(uiw_cm_accept(sc, b.qp, NULL, NULL), 0);
                    uint8_t r[UIW_MPA_MAX_FRAME];
                    CHECK(read_frame(fd, r, EV_MS) > 0);
                    t0 = eng_now_ms();
                    expect_event(e.chs, &ev, UIW_CM_CONNECT_ERROR, -ETIMEDOUT, sc, "no rtr");
                    dt = eng_now_ms() - t0;
                    CHECK(dt >= 200 && dt < 3000);
                    CHECK_EQ(wait_close(fd, EV_MS), -ECONNRESET);
                    CHECK_EQ(eng_qp_state(b.qp), IBV_QPS_ERR);
                    uiw_cm_conn_destroy(sc);
                }
                close(fd);
            }
            eng_tqp_free(&b);
            env_down(&e);
        }
        uiw_cm_channel_destroy(ch);
    }
}

/* We connect (on fam, over ch) to a raw responder that answers with a
 * Reply of `flags` (Rev 2, IRD/ORD 1); the next event must be `type` with
 * `status` (true: it is in *ev). *req: our Request. */
static bool raw_reply(int fam, struct uiw_cm_channel *ch, uint8_t flags, uiw_mpa_frame *req,
                      enum uiw_cm_event_type type, int status, struct uiw_cm_event *ev,
                      const char *what)
{
    struct uiw_conn *c = NULL;
    uint8_t f[UIW_MPA_MAX_FRAME];
    bool ok;
    int fd = raw_responder(fam, NULL, NULL, ch, &c, req);

    if (fd < 0)
        return false;
    eng_send_all(fd, f, mk_frame(f, false, flags, 2, 1, 1, NULL, 0));
    ok = expect_event(ch, ev, type, status, c, what);
    close(fd);
    uiw_cm_conn_destroy(c);
    return ok;
}

/* UIWARP_CRC=required: we ask (C=1); a peer's C=0 cannot refuse it. */
static void c_crc_required(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uiw_mpa_frame rq;
    struct uiw_cm_event ev;
    uint8_t f[UIW_MPA_MAX_FRAME];
    int fd;
    memset(&rq, 0, sizeof(rq));
    if (raw_reply(AF_INET, ch, S /* C=0 */, &rq, UIW_CM_ESTABLISHED, 0, &ev, "crc est"))
        CHECK(ev.crc);
    CHECK(rq.crc);
    uiw_cm_channel_destroy(ch);
    /* responder: a C=0 Request gets a C=1 Reply */
    struct env e;
    if (!env_up(&e, AF_INET6))
        return;
    size_t n = mk_frame(f, true, S, 2, 1, 1, NULL, 0);
    fd = raw_initiator(&e, f, n);
    if (expect_event(e.chs, &ev, UIW_CM_CONNECT_REQUEST, 0, NULL, "crc req")) {
        CHECK(!ev.crc);
        struct uiw_conn *sc = ev.conn;
        CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
        uint8_t r[UIW_MPA_MAX_FRAME];
        uiw_mpa_frame rp;
        int rn = read_frame(fd, r, EV_MS);
        CHECK(rn > 0 && uiw_mpa_decode(r, (size_t)rn, UIW_MPA_REPLY, &rp) == rn && rp.crc);
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "crc est s"))
            CHECK(ev.crc);
        uiw_cm_conn_destroy(sc);
    }
    close(fd);
    /* uiwarp <-> uiwarp */
    struct uiw_conn *cc = NULL;
    struct uiw_conn *sc = connect_req(&e, NULL, NULL, &cc, &ev);
    if (sc) {
        CHECK(ev.crc);
        CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "crc pair"))
            CHECK(ev.crc);
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "crc pair s"))
            CHECK(ev.crc);
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    }
    env_down(&e);
    t_qp_pair(AF_INET6, false);
}

/* UIWARP_CRC=off: the peer's C=1 still turns CRC on (RFC 5044 §7.1.1). */
static void c_crc_off(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uiw_mpa_frame rq;
    struct uiw_cm_event ev;
    if (raw_reply(AF_INET6, ch, S | UIW_MPA_FLAG_C, &rq, UIW_CM_ESTABLISHED, 0, &ev,
                  "crc off est")) {
        CHECK(!rq.crc);
        CHECK(ev.crc);
    }
    uiw_cm_channel_destroy(ch);
}

/* UIWARP_MARKERS=1: we ask for markers (M=1) and can send them. */
static void c_markers(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uiw_mpa_frame rq;
    struct uiw_cm_event ev;
    /* a responder that cannot mark (siw) rejects: REJECTED, no hang */
    memset(&rq, 0, sizeof(rq));
    raw_reply(AF_INET, ch, S | UIW_MPA_FLAG_R, &rq, UIW_CM_REJECTED, -ECONNREFUSED, &ev,
              "markers rejected");
    CHECK(rq.markers);
    /* one that accepts without marking itself */
    if (raw_reply(AF_INET, ch, S, &rq, UIW_CM_ESTABLISHED, 0, &ev, "markers est")) {
        CHECK(ev.markers_rx);
        CHECK(!ev.markers_tx);
    }
    uiw_cm_channel_destroy(ch);
    /* uiwarp <-> uiwarp: markers both ways */
    struct env e;
    if (!env_up(&e, AF_INET))
        return;
    struct uiw_conn *cc = NULL;
    struct uiw_conn *sc = connect_req(&e, NULL, NULL, &cc, &ev);
    if (sc) {
        CHECK(ev.markers_tx);
        CHECK_EQ(uiw_cm_accept(sc, NULL, NULL, NULL), 0);
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "markers pair")) {
            CHECK(ev.markers_rx);
            CHECK(ev.markers_tx);
        }
        if (expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "markers pair s")) {
            CHECK(ev.markers_rx);
            CHECK(ev.markers_tx);
        }
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    }
    env_down(&e);
    t_qp_pair(AF_INET6, false);
}

/* UIWARP_MPA_REV=1: plain RFC 5044 (no IRD/ORD words, 512 bytes of
 * private data). */
static void c_rev1(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uiw_mpa_frame rq;
    struct uiw_conn *c = NULL;
    struct uiw_cm_event ev;
    uint8_t pd[UIW_MPA_MAX_PD + 1];
    fill_pattern(pd, sizeof(pd), 3);
    struct uiw_conn_param p = {.private_data = pd, .private_data_len = 512};
    int fd = raw_responder(AF_INET, &p, NULL, ch, &c, &rq);
    if (fd >= 0) {
        CHECK_EQ(rq.rev, 1);
        CHECK(!rq.enhanced);
        CHECK_EQ(rq.ulp_pd_len, 512);
        CHECK_MEM(rq.ulp_pd, pd, 512);
        close(fd);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ECONNRESET, c, "rev1 closed");
        uiw_cm_conn_destroy(c);
    }
    uiw_cm_channel_destroy(ch);
    struct env e;
    if (!env_up(&e, AF_INET6))
        return;
    /* an enhanced revision 2 Request is answered with a reset, on which RNIC
     * initiators (and ours) try revision 1 */
    int raw = raw_connect(&e.addr);
    CHECK(raw >= 0);
    if (raw >= 0) {
        uint8_t f[64];
        size_t fl = mk_frame(f, true, S, 2, 4, 4, NULL, 0);
        eng_send_all(raw, f, fl);
        CHECK_EQ(wait_close(raw, EV_MS), -ECONNRESET);
        close(raw);
    }
    p.private_data_len = 513;
    struct uiw_conn *cc = NULL;
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&e.addr, &p, e.chc, NULL, &cc),
             -EMSGSIZE);
    p.private_data_len = 512;
    struct uiw_conn *sc = connect_req(&e, NULL, &p, &cc, &ev);
    if (sc) {
        CHECK(!ev.enhanced);
        CHECK_EQ(ev.mpa_rev, 1);
        CHECK_EQ(ev.private_data_len, 512);
        CHECK_MEM(ev.private_data, pd, 512);
        struct uiw_conn_param ps = {.private_data = pd + 1, .private_data_len = 512};
        CHECK_EQ(uiw_cm_accept(sc, NULL, &ps, NULL), 0);
        if (expect_event(e.chc, &ev, UIW_CM_ESTABLISHED, 0, cc, "rev1 pair")) {
            CHECK_EQ(ev.mpa_rev, 1);
            CHECK(!ev.enhanced);
            CHECK_EQ(ev.private_data_len, 512);
            CHECK_MEM(ev.private_data, pd + 1, 512);
        }
        expect_event(e.chs, &ev, UIW_CM_ESTABLISHED, 0, sc, "rev1 pair s");
        CHECK_EQ(uiw_cm_disconnect(sc), 0);
        expect_event(e.chc, &ev, UIW_CM_DISCONNECTED, 0, cc, "rev1 disc c");
        expect_event(e.chs, &ev, UIW_CM_DISCONNECTED, 0, sc, "rev1 disc s");
        uiw_cm_conn_destroy(cc);
        uiw_cm_conn_destroy(sc);
    }
    env_down(&e);
    t_qp_pair(AF_INET, false);
}

/* UIWARP_P2P=1 UIWARP_RTR=write (write,read for the pair) */
static void c_p2p_write(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    struct uiw_conn *c = NULL;
    struct sockaddr_storage a = loop_addr(AF_INET, 9);
    CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&a, NULL, ch, NULL, &c), -EINVAL);
    uiw_cm_channel_destroy(ch);
    t_qp_p2p_initiator(AF_INET, UIW_RTR_WRITE, UIW_RTR_WRITE);
    t_qp_p2p_initiator(AF_INET6, UIW_RTR_WRITE, UIW_RTR_READ);
    t_qp_pair(AF_INET, true);
}

static void c_p2p_read(void)
{
    t_qp_p2p_initiator(AF_INET6, UIW_RTR_READ, UIW_RTR_READ);
    t_qp_p2p_initiator(AF_INET, UIW_RTR_READ, UIW_RTR_WRITE);
    t_qp_pair(AF_INET6, true);
}

/* No UIWARP_FIRST_FPDU_HOLD_MS: the default, 20 ms (docs/INTEROP.md §1):
 * wake-ups while the peer is silent (with the Read RTR: until it answers
 * the RTR; client-server: only after we sent something), nothing held. */
static void c_first_hold_default(void)
{
    CHECK_EQ(uiw_config()->first_fpdu_hold_ms, 20);
    if (uiw_config()->p2p) {
        t_first_wake(WRITE_RTR, 20, SILENT);
        t_first_wake(WRITE_RTR, 20, ANSWER_LATE);
        t_first_wake(READ_RTR, 20, SILENT);
        t_first_wake(READ_RTR, 20, ANSWER_LATE);
        t_first_wake(READ_RTR, 20, ANSWER_RTR);
    } else {
        t_first_wake(CS, 20, SILENT);
        t_first_wake(CS, 20, ANSWER_LATE);
        t_first_wake(CS, 20, NOTHING_SENT);
    }
}

/* A long hold (the wake-up's delay): the timing checked from both sides. */
static void c_first_hold_long(void)
{
    if (uiw_config()->p2p) {
        CHECK_EQ(uiw_config()->first_fpdu_hold_ms, 100);
        t_first_wake(WRITE_RTR, 100, ANSWER_LATE);
        t_first_wake(READ_RTR, 100, ANSWER_RTR);
    } else {
        CHECK_EQ(uiw_config()->first_fpdu_hold_ms, 400);
        t_first_wake(CS, 400, ANSWER_LATE);
    }
}

/* UIWARP_FIRST_FPDU_HOLD_MS=0: nothing held, no wake-up. */
static void c_first_hold_off(void)
{
    CHECK_EQ(uiw_config()->first_fpdu_hold_ms, 0);
    if (uiw_config()->p2p) {
        t_first_wake(WRITE_RTR, 0, SILENT);
        t_first_wake(READ_RTR, 0, SILENT);
    } else {
        t_first_wake(CS, 0, SILENT);
    }
}

struct child_case {
    const char *name;
    void (*fn)(void);
    const char *env[4];
};

/* Reset fd (RST: SO_LINGER 0, close). */
static void raw_reset(int fd)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
}

/* Accept the initiator's next connection on lfd and read its Request. */
static int raw_take_request(int lfd, uiw_mpa_frame *rq)
{
    uint8_t buf[UIW_MPA_MAX_FRAME];
    int fd = raw_accept(lfd, EV_MS), n;
    CHECK(fd >= 0);
    if (fd < 0)
        return -1;
    n = read_frame(fd, buf, EV_MS);
    CHECK(n > 0);
    if (n <= 0 || uiw_mpa_decode(buf, (size_t)n, UIW_MPA_REQUEST, rq) != n) {
        CHECK(false);
        close(fd);
        return -1;
    }
    return fd;
}

/* Connect to the raw listener lfd, whose peer answers `tries` Requests
 * (revision 2, then 1) each with a reset (fin: a FIN): the attempt ends in
 * CONNECT_ERROR -ECONNRESET, and no further connection comes. */
static void rev1_ends(struct uiw_cm_channel *ch, int lfd, const struct sockaddr_storage *a,
                      const struct uiw_conn_param *p, int tries, bool fin, const char *what)
{
    struct uiw_conn *c = NULL;
    struct uiw_cm_event ev;
    uiw_mpa_frame rq;

    CHECK_EQ(uiw_cm_connect(NULL, NULL, (const struct sockaddr *)a, p, ch, NULL, &c), 0);
    for (int i = 0; i < tries; i++) {
        int fd = raw_take_request(lfd, &rq);
        if (fd < 0)
            continue;
        CHECK_EQ(rq.rev, i ? 1 : 2);
        if (fin)
            close(fd);
        else
            raw_reset(fd);
    }
    expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ECONNRESET, c, what);
    CHECK(raw_accept(lfd, 300) < 0);
    uiw_cm_conn_destroy(c);
}

/* MPA revision 1 fallback (docs/ENGINE.md): a peer that resets our
 * revision 2 Request gets one more connection at revision 1, with the
 * same private data; a reset of that one, or a FIN instead of a Reply,
 * ends the attempt. QP: a QP to attach (P2P: revision 1 has no RTR). */
static void rev1_fallback(struct ibv_qp *qp)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    struct uiw_conn *c = NULL;
    struct uiw_cm_event ev;
    uiw_mpa_frame rq;
    uint8_t pd[3] = {9, 8, 7}, rpd[2] = {5, 6}, f[UIW_MPA_MAX_FRAME];
    struct uiw_conn_param p = {.private_data = pd, .private_data_len = 3, .ird = 4, .ord = 2};
    uint16_t port;
    int lfd = raw_listen(AF_INET, &port), fd;
    struct sockaddr_storage a = loop_addr(AF_INET, port);

    if (lfd < 0)
        return;
    /* 1. reset at revision 2, a Reply at revision 1: ESTABLISHED at rev 1 */
    CHECK_EQ(uiw_cm_connect(qp, NULL, (struct sockaddr *)&a, &p, ch, NULL, &c), 0);
    fd = raw_take_request(lfd, &rq);
    if (fd >= 0) {
        CHECK_EQ(rq.rev, 2);
        CHECK(rq.enhanced);
        raw_reset(fd);
    }
    fd = raw_take_request(lfd, &rq);
    if (fd >= 0) {
        CHECK_EQ(rq.rev, 1);
        CHECK(!rq.enhanced);
        CHECK(!rq.p2p);
        CHECK_EQ(rq.ulp_pd_len, 3);
        CHECK_MEM(rq.ulp_pd, pd, 3);
        size_t n = mk_frame(f, false, 0, 1, 0, 0, rpd, 2);
        eng_send_all(fd, f, n);
        if (expect_event(ch, &ev, UIW_CM_ESTABLISHED, 0, c, "rev1 fallback")) {
            CHECK_EQ(ev.mpa_rev, 1);
            CHECK(!ev.enhanced);
            CHECK(!ev.p2p);
            CHECK_EQ(ev.private_data_len, 2);
            CHECK_MEM(ev.private_data, rpd, 2);
            if (qp) {
                CHECK_EQ(eng_qp_state(qp), IBV_QPS_RTS);
                CHECK(quiet(fd, 100)); /* no RTR, no wake-up (client-server) */
            }
        }
        close(fd);
    }
    uiw_cm_conn_destroy(c);
    /* 2. both reset: the reset is reported, and there is no third try */
    if (!qp) {
        rev1_ends(ch, lfd, &a, &p, 2, false, "rev1 reset too");
        /* 3. a FIN instead of a Reply is no reason to retry */
        rev1_ends(ch, lfd, &a, &p, 1, true, "FIN: no retry");
        /* 4. the peer gone before the retry: the reset is reported */
        CHECK_EQ(uiw_cm_connect(NULL, NULL, (struct sockaddr *)&a, &p, ch, NULL, &c), 0);
        fd = raw_take_request(lfd, &rq);
        close(lfd);
        lfd = -1;
        if (fd >= 0)
            raw_reset(fd);
        expect_event(ch, &ev, UIW_CM_CONNECT_ERROR, -ECONNRESET, c, "retry refused");
        uiw_cm_conn_destroy(c);
    }
    if (lfd >= 0)
        close(lfd);
    uiw_cm_channel_destroy(ch);
}

static void c_rev1_fallback(void)
{
    CHECK(uiw_config()->mpa_rev1_fallback);
    rev1_fallback(NULL);
}

/* P2P, with a QP: the retry is client-server, the QP attached without RTR. */
static void c_rev1_fallback_p2p(void)
{
    struct eng_tqp t;
    if (!g_have_qps)
        return;
    if (tqp_make(&t))
        rev1_fallback(t.qp);
    eng_tqp_free(&t);
}

/* UIWARP_MPA_REV1_FALLBACK=0: the reset is reported, no second connection. */
static void c_rev1_fallback_off(void)
{
    struct uiw_cm_channel *ch = eng_cm_chan();
    uint16_t port;
    int lfd = raw_listen(AF_INET, &port);
    struct sockaddr_storage a = loop_addr(AF_INET, port);

    CHECK(!uiw_config()->mpa_rev1_fallback);
    if (lfd < 0)
        return;
    rev1_ends(ch, lfd, &a, NULL, 1, false, "fallback off");
    close(lfd);
    uiw_cm_channel_destroy(ch);
}

static const struct child_case cases[] = {
    {"timeout", c_timeout, {"UIWARP_MPA_TIMEOUT_MS=300"}},
    {"crc_required", c_crc_required, {"UIWARP_CRC=required"}},
    {"crc_off", c_crc_off, {"UIWARP_CRC=off"}},
    {"markers", c_markers, {"UIWARP_MARKERS=1"}},
    {"rev1", c_rev1, {"UIWARP_MPA_REV=1"}},
    {"rev1_fallback", c_rev1_fallback, {NULL}},
    {"rev1_fallback_p2p", c_rev1_fallback_p2p, {"UIWARP_P2P=1"}},
    {"rev1_fallback_off", c_rev1_fallback_off, {"UIWARP_MPA_REV1_FALLBACK=0"}},
    {"p2p_write", c_p2p_write, {"UIWARP_P2P=1", "UIWARP_RTR=write"}},
    {"p2p_read", c_p2p_read, {"UIWARP_P2P=1", "UIWARP_RTR=read"}},
    {"first_hold_p2p", c_first_hold_default, {"UIWARP_P2P=1"}},
    {"first_hold_cs", c_first_hold_default, {NULL}},
    {"first_hold_long_p2p", c_first_hold_long, {"UIWARP_P2P=1", "UIWARP_FIRST_FPDU_HOLD_MS=100"}},
    {"first_hold_long_cs", c_first_hold_long, {"UIWARP_FIRST_FPDU_HOLD_MS=400"}},
    {"first_hold_off", c_first_hold_off, {"UIWARP_P2P=1", "UIWARP_FIRST_FPDU_HOLD_MS=0"}},
    {"first_hold_off_cs", c_first_hold_off, {"UIWARP_FIRST_FPDU_HOLD_MS=0"}},
};

/* Run a case in a fresh process with its environment; add its counts. */
static void run_child(const struct child_case *cc)
{
    char *envp[256];
    int k = 0;
    for (char **e = environ; *e && k < 240; e++) {
        if (strncmp(*e, "UIWARP_", 7) == 0 && strncmp(*e, "UIWARP_SHARED", 13) &&
            strncmp(*e, "UIWARP_DEBUG", 12))
            continue; /* the case's policy only */
        envp[k++] = *e;
    }
    /* The cases are written for client-server unless they ask for P2P
     * (the engine's default is P2P, see config.c). */
    bool sets_p2p = false;
    for (int i = 0; i < 4 && cc->env[i]; i++) {
        envp[k++] = (char *)cc->env[i];
        sets_p2p |= strncmp(cc->env[i], "UIWARP_P2P=", 11) == 0;
    }
    if (!sets_p2p)
        envp[k++] = (char *)"UIWARP_P2P=0";
    envp[k] = NULL;
    eng_run_case("test_cm", cc->name, envp);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        verbs_init(true);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            if (strcmp(cases[i].name, argv[2]) == 0)
                cases[i].fn();
        if (g_ctx)
            ibv_close_device(g_ctx);
        dprintf(3, "%lu %lu\n", tu_checks, tu_failed);
        return tu_failed ? 1 : 0;
    }
    /* In-process tests exercise the client-server model (MPA-only
     * connections without a QP are refused in P2P mode); P2P has its own
     * child cases. */
    setenv("UIWARP_P2P", "0", 1);
    verbs_init(false);
    for (int fam = AF_INET; fam; fam = fam == AF_INET ? AF_INET6 : 0) {
        t_pd_ird_ord(fam);
        t_reject(fam);
        t_unreachable(fam);
        t_concurrent(fam);
        t_raw_replies(fam);
        t_raw_requests(fam);
        t_qp_pair(fam, false);
        t_qp_abort(fam);
        t_qp_p2p_responder(fam, UIW_RTR_WRITE);
        t_qp_p2p_responder(fam, UIW_RTR_READ);
    }
    t_limits();
    t_churn(AF_INET);
    t_churn(AF_INET6);
    t_listener_destroy();
    t_wildcard();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        run_child(&cases[i]);
    if (g_ctx)
        ibv_close_device(g_ctx);
    TEST_MAIN_END();
}
