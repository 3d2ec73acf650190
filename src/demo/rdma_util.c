/* SPDX-License-Identifier: BSD-3-Clause */
/* Shared helpers of uiwarp-demo and bench_rdma; see rdma_util.h. */
#include "rdma_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

const char *ru_role = "uiwarp";
uint64_t ru_spin_ns = UINT64_MAX;
bool ru_pin_cpus = true;

void ru_err(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "%s: error: %s\n", ru_role, line);
    fflush(stderr);
}

int ru_ms_left(uint64_t deadline)
{
    uint64_t now = ru_now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 0x7fffffff ? 0x7fffffff : (int)ms;
}

static int set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return -errno;
    return 0;
}

/* ------------------------------------------------------------- patterns */
void ru_fill(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = ru_pat(seed, i);
}

long ru_check(const void *buf, size_t len, uint32_t seed)
{
    const uint8_t *p = buf;
    for (size_t i = 0; i < len; i++)
        if (p[i] != ru_pat(seed, i))
            return (long)i;
    return -1;
}

void ru_stamp(void *buf, size_t len, uint64_t stamp)
{
    memcpy(buf, &stamp, 8);
    memcpy((uint8_t *)buf + len - 8, &stamp, 8);
}

void ru_unstamp(void *buf, size_t len, uint32_t seed)
{
    uint8_t *p = buf;
    for (size_t i = 0; i < 8 && i < len; i++) {
        p[i] = ru_pat(seed, i);
        p[len - 1 - i] = ru_pat(seed, len - 1 - i);
    }
}

uint64_t ru_tail_stamp(const volatile void *buf, size_t len)
{
    /* Placement is in stream order, so the tail word is written last; read
     * it as one 8-byte load (the buffer and sizes are 8-byte aligned). */
    return *(const volatile uint64_t *)((const volatile uint8_t *)buf + len - 8);
}

long ru_check_stamped(const void *buf, size_t len, uint32_t seed, uint64_t stamp)
{
    const uint8_t *p = buf;
    long bad = ru_check_stamps(buf, len, stamp);
    if (bad >= 0)
        return bad;
    for (size_t i = 8; i + 8 < len; i++)
        if (p[i] != ru_pat(seed, i))
            return (long)i;
    return -1;
}

/* -------------------------------------------------------------- control */
int ru_ctl_send(int fd, const struct ru_msg *m)
{
    const uint8_t *p = (const uint8_t *)m;
    size_t done = 0;
    while (done < sizeof *m) {
        ssize_t n = send(fd, p + done, sizeof *m - done, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            ru_err("control channel: send: %s (peer process gone?)", strerror(e));
            return -e;
        }
        done += (size_t)n;
    }
    return 0;
}

int ru_ctl_recv(int fd, struct ru_msg *m, int timeout_ms)
{
    uint8_t *p = (uint8_t *)m;
    size_t done = 0;
    uint64_t deadline = ru_deadline(timeout_ms);
    while (done < sizeof *m) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, ru_ms_left(deadline));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0) {
            ru_err("timeout after %d ms waiting for the peer process on the control channel",
                   timeout_ms);
            return -ETIMEDOUT;
        }
        ssize_t n = recv(fd, p + done, sizeof *m - done, MSG_DONTWAIT);
        if (n == 0) {
            ru_err("control channel closed: the peer process exited");
            return -EPIPE;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            int e = errno;
            ru_err("control channel: recv: %s", strerror(e));
            return -e;
        }
        done += (size_t)n;
    }
    return 0;
}

int ru_ctl_expect(int fd, uint32_t type, struct ru_msg *m, int timeout_ms)
{
    int rc = ru_ctl_recv(fd, m, timeout_ms);
    if (rc < 0)
        return rc;
    if (m->type != type) {
        ru_err("control channel: expected message %u, got %u", type, m->type);
        return -EPROTO;
    }
    return 0;
}

/* --------------------------------------------------------- two processes */
int ru_run_pair(int (*server)(int ctl, void *arg), int (*client)(int ctl, void *arg), void *arg,
                int timeout_s)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        ru_err("socketpair: %s", strerror(errno));
        return -errno;
    }
    signal(SIGPIPE, SIG_IGN);
    fflush(stdout);
    fflush(stderr);
    pid_t pid[2];
    const char *names[2] = {"server", "client"};
    /* two different CPUs: busy-polling processes must not share one */
    int cpu[2] = {-1, -1};
    cpu_set_t allowed;
    if (ru_pin_cpus && sched_getaffinity(0, sizeof allowed, &allowed) == 0 &&
        CPU_COUNT(&allowed) >= 2) {
        for (int i = 0, k = 1; i < CPU_SETSIZE && k >= 0; i++)
            if (CPU_ISSET(i, &allowed))
                cpu[k--] = i; /* client: the first, server: the second */
    }
    for (int k = 0; k < 2; k++) {
        pid[k] = fork();
        if (pid[k] < 0) {
            ru_err("fork: %s", strerror(errno));
            if (k == 1) {
                kill(pid[0], SIGKILL);
                waitpid(pid[0], NULL, 0);
            }
            close(sv[0]);
            close(sv[1]);
            return -EAGAIN;
        }
        if (pid[k] == 0) {
            ru_role = names[k];
            if (cpu[k] >= 0) {
                cpu_set_t one;
                CPU_ZERO(&one);
                CPU_SET(cpu[k], &one);
                if (sched_setaffinity(0, sizeof one, &one) < 0)
                    ru_err("sched_setaffinity(CPU %d): %s", cpu[k], strerror(errno));
            }
            close(sv[1 - k]);
            int rc = (k == 0 ? server : client)(sv[k], arg);
            fflush(stdout);
            fflush(stderr);
            /* _exit: nothing of the parent's (atexit, stdio) runs twice. */
            _exit(rc == 0 ? 0 : 1);
        }
    }
    close(sv[0]);
    close(sv[1]);

    int status[2] = {-1, -1};
    bool alive[2] = {true, true};
    uint64_t deadline = ru_deadline(timeout_s * 1000);
    while (alive[0] || alive[1]) {
        for (int k = 0; k < 2; k++) {
            if (!alive[k])
                continue;
            int st;
            pid_t r = waitpid(pid[k], &st, WNOHANG);
            if (r == pid[k]) {
                alive[k] = false;
                if (WIFEXITED(st))
                    status[k] = WEXITSTATUS(st);
                else if (WIFSIGNALED(st)) {
                    fprintf(stderr, "uiwarp: the %s process died with signal %d (%s)\n", names[k],
                            WTERMSIG(st), strsignal(WTERMSIG(st)));
                    status[k] = 128 + WTERMSIG(st);
                }
            }
        }
        if (!alive[0] && !alive[1])
            break;
        /* once one is gone, the other has 15 s more to finish */
        if (alive[0] != alive[1] && deadline > ru_deadline(15000))
            deadline = ru_deadline(15000);
        if (ru_now_ns() >= deadline) {
            for (int k = 0; k < 2; k++) {
                if (!alive[k])
                    continue;
                fprintf(stderr, "uiwarp: the %s process did not finish in time: killing it\n",
                        names[k]);
                kill(pid[k], SIGKILL);
                waitpid(pid[k], NULL, 0);
                alive[k] = false;
                status[k] = 124;
            }
            break;
        }
        usleep(10000);
    }
    return status[0] == 0 && status[1] == 0 ? 0 : -EIO;
}

/* --------------------------------------------------------------- RDMA */
int ru_open(struct ru_conn *c, const struct ru_params *p)
{
    memset(c, 0, sizeof *c);
    c->sq_depth = p->sq_depth;
    c->rq_depth = p->rq_depth;
    c->ird = p->ird;
    c->ord = p->ord;
    c->timeout_ms = p->timeout_ms;

    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        ru_err("ibv_get_device_list: %s", strerror(errno));
        return -ENODEV;
    }
    struct ibv_device *dev = NULL;
    for (int i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), RU_DEVICE) == 0)
            dev = list[i];
    if (!dev) {
        char names[256] = "";
        for (int i = 0; i < n; i++) {
            strncat(names, " ", sizeof names - strlen(names) - 1);
            strncat(names, ibv_get_device_name(list[i]), sizeof names - strlen(names) - 1);
        }
        ru_err("no device %s among %d (%s ): is uiwarp's build/lib/libibverbs.so.1 the one "
               "loaded (ldd)?",
               RU_DEVICE, n, n ? names : " none");
        ibv_free_device_list(list);
        return -ENODEV;
    }
    c->ctx = ibv_open_device(dev);
    ibv_free_device_list(list);
    if (!c->ctx) {
        ru_err("ibv_open_device(%s): %s", RU_DEVICE, strerror(errno));
        return -ENODEV;
    }
    if (!(c->pd = ibv_alloc_pd(c->ctx))) {
        ru_err("ibv_alloc_pd: %s", strerror(errno));
        return -ENOMEM;
    }
    if (!(c->scc = ibv_create_comp_channel(c->ctx)) ||
        !(c->rcc = ibv_create_comp_channel(c->ctx))) {
        ru_err("ibv_create_comp_channel: %s", strerror(errno));
        return -ENOMEM;
    }
    set_nonblock(c->scc->fd);
    set_nonblock(c->rcc->fd);
    c->scq = ibv_create_cq(c->ctx, (int)(2 * c->sq_depth + 16), NULL, c->scc, 0);
    c->rcq = ibv_create_cq(c->ctx, (int)(c->rq_depth + 16), NULL, c->rcc, 0);
    if (!c->scq || !c->rcq) {
        ru_err("ibv_create_cq: %s", strerror(errno));
        return -ENOMEM;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = c->scq,
        .recv_cq = c->rcq,
        .cap = {.max_send_wr = c->sq_depth,
                .max_recv_wr = c->rq_depth,
                .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 0,
    };
    if (!(c->qp = ibv_create_qp(c->pd, &qa))) {
        ru_err("ibv_create_qp(RC, %u/%u WRs): %s", c->sq_depth, c->rq_depth, strerror(errno));
        return -ENOMEM;
    }
    /* RESET -> INIT with the remote access rights, as librdmacm does
     * before connecting; the CM moves it to RTS once connected. */
    struct ibv_qp_attr at = {
        .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = RU_ACCESS_ALL};
    int rc = ibv_modify_qp(c->qp, &at,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) {
        ru_err("ibv_modify_qp(INIT): %s", strerror(rc));
        return -rc;
    }
    if (!(c->cm = uiw_cm_channel_create())) {
        ru_err("uiw_cm_channel_create failed");
        return -ENOMEM;
    }
    set_nonblock(uiw_cm_channel_fd(c->cm));
    return 0;
}

static const char *cm_name(int t)
{
    switch (t) {
    case UIW_CM_CONNECT_REQUEST:
        return "CONNECT_REQUEST";
    case UIW_CM_ESTABLISHED:
        return "ESTABLISHED";
    case UIW_CM_REJECTED:
        return "REJECTED";
    case UIW_CM_UNREACHABLE:
        return "UNREACHABLE";
    case UIW_CM_CONNECT_ERROR:
        return "CONNECT_ERROR";
    case UIW_CM_DISCONNECTED:
        return "DISCONNECTED";
    }
    return "unknown event";
}

/* Wait for the next CM event, at most timeout_ms; expect `want`. */
static int cm_expect(struct ru_conn *c, enum uiw_cm_event_type want, struct uiw_cm_event *ev,
                     int timeout_ms)
{
    uint64_t deadline = ru_deadline(timeout_ms);
    for (;;) {
        int rc = uiw_cm_get_event(c->cm, ev);
        if (rc >= 0)
            break;
        if (rc != -EAGAIN && rc != -EINTR) {
            ru_err("uiw_cm_get_event: %s", strerror(-rc));
            return rc;
        }
        struct pollfd pfd = {.fd = uiw_cm_channel_fd(c->cm), .events = POLLIN};
        int left = ru_ms_left(deadline);
        if (left == 0 || poll(&pfd, 1, left) == 0) {
            ru_err("timeout after %d ms waiting for connection event %s", timeout_ms,
                   cm_name(want));
            return -ETIMEDOUT;
        }
    }
    if (ev->type != want) {
        ru_err("connection: expected %s, got %s (status %d: %s)", cm_name(want), cm_name(ev->type),
               ev->status, ev->status ? strerror(-ev->status) : "none");
        return ev->status ? ev->status : -EPROTO;
    }
    return 0;
}

static void addr_str(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, cap, "%s:%u", ip, port);
}

/* ESTABLISHED: addresses, and the IRD/ORD in use after negotiation. */
static void established(struct ru_conn *c, const struct uiw_cm_event *ev)
{
    if (ev->ird)
        c->ird = ev->ird;
    if (ev->ord)
        c->ord = ev->ord;
    /* RFC 6581 words as the peer sent them; 0x3FFF: left to the ULP */
    c->peer_ird = ev->enhanced && ev->peer_ird != 0x3FFF ? ev->peer_ird : 0;
    c->peer_ord = ev->enhanced && ev->peer_ord != 0x3FFF ? ev->peer_ord : 0;
    char l[64], p[64];
    addr_str(&ev->local, l, sizeof l);
    addr_str(&ev->peer, p, sizeof p);
    snprintf(c->desc, sizeof c->desc, "%s <-> %s", l, p);
}

int ru_listen(struct ru_conn *c, uint16_t *port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = uiw_cm_listen(c->ctx, (struct sockaddr *)&a, 4, c->cm, c, &c->lis);
    if (rc < 0) {
        ru_err("uiw_cm_listen(127.0.0.1:0): %s", strerror(-rc));
        return rc;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    rc = uiw_cm_listener_addr(c->lis, &ss);
    if (rc < 0 || ss.ss_family != AF_INET || ((struct sockaddr_in *)&ss)->sin_port == 0) {
        ru_err("uiw_cm_listener_addr: %s", rc < 0 ? strerror(-rc) : "no port assigned");
        return rc < 0 ? rc : -EADDRNOTAVAIL;
    }
    *port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int ru_accept(struct ru_conn *c)
{
    struct uiw_cm_event ev;
    int rc = cm_expect(c, UIW_CM_CONNECT_REQUEST, &ev, c->timeout_ms);
    if (rc < 0)
        return rc;
    c->conn = ev.conn;
    struct uiw_conn_param p = {.ird = (uint16_t)c->ird, .ord = (uint16_t)c->ord};
    rc = uiw_cm_accept(c->conn, c->qp, &p, c);
    if (rc < 0) {
        ru_err("uiw_cm_accept: %s", strerror(-rc));
        return rc;
    }
    rc = cm_expect(c, UIW_CM_ESTABLISHED, &ev, c->timeout_ms);
    if (rc < 0)
        return rc;
    established(c, &ev);
    return 0;
}

int ru_connect(struct ru_conn *c, uint16_t port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct uiw_conn_param p = {.ird = (uint16_t)c->ird, .ord = (uint16_t)c->ord};
    int rc = uiw_cm_connect(c->qp, NULL, (struct sockaddr *)&a, &p, c->cm, c, &c->conn);
    if (rc < 0) {
        ru_err("uiw_cm_connect(127.0.0.1:%u): %s", port, strerror(-rc));
        return rc;
    }
    struct uiw_cm_event ev;
    rc = cm_expect(c, UIW_CM_ESTABLISHED, &ev, c->timeout_ms);
    if (rc < 0)
        return rc;
    established(c, &ev);
    return 0;
}

int ru_disconnect(struct ru_conn *c, bool initiate, int timeout_ms)
{
    if (!c->conn)
        return 0;
    if (initiate) {
        int rc = uiw_cm_disconnect(c->conn);
        if (rc < 0) {
            ru_err("uiw_cm_disconnect: %s", strerror(-rc));
            return rc;
        }
    }
    struct uiw_cm_event ev;
    return cm_expect(c, UIW_CM_DISCONNECTED, &ev, timeout_ms);
}

void ru_close(struct ru_conn *c)
{
    if (c->conn)
        uiw_cm_conn_destroy(c->conn);
    if (c->lis)
        uiw_cm_listener_destroy(c->lis);
    if (c->qp && ibv_destroy_qp(c->qp))
        ru_err("ibv_destroy_qp: %s", strerror(errno));
    if (c->scq && ibv_destroy_cq(c->scq))
        ru_err("ibv_destroy_cq: %s", strerror(errno));
    if (c->rcq && ibv_destroy_cq(c->rcq))
        ru_err("ibv_destroy_cq: %s", strerror(errno));
    if (c->scc && ibv_destroy_comp_channel(c->scc))
        ru_err("ibv_destroy_comp_channel: %s", strerror(errno));
    if (c->rcc && ibv_destroy_comp_channel(c->rcc))
        ru_err("ibv_destroy_comp_channel: %s", strerror(errno));
    if (c->pd && ibv_dealloc_pd(c->pd))
        ru_err("ibv_dealloc_pd: %s", strerror(errno));
    if (c->cm)
        uiw_cm_channel_destroy(c->cm);
    if (c->ctx && ibv_close_device(c->ctx))
        ru_err("ibv_close_device: %s", strerror(errno));
    memset(c, 0, sizeof *c);
}

struct ibv_mr *ru_reg(struct ru_conn *c, size_t len, int access)
{
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, len ? len : 8)) {
        ru_err("out of memory (%zu bytes)", len);
        return NULL;
    }
    memset(buf, 0, len);
    struct ibv_mr *mr = ibv_reg_mr(c->pd, buf, len, access);
    if (!mr) {
        ru_err("ibv_reg_mr(%zu bytes, access 0x%x): %s", len, (unsigned)access, strerror(errno));
        free(buf);
    }
    return mr;
}

void ru_dereg(struct ibv_mr *mr)
{
    if (!mr)
        return;
    void *buf = mr->addr;
    if (ibv_dereg_mr(mr))
        ru_err("ibv_dereg_mr: %s", strerror(errno));
    else
        free(buf);
}

static const char *op_name(enum ibv_wr_opcode op)
{
    switch (op) {
    case IBV_WR_SEND:
        return "Send";
    case IBV_WR_RDMA_WRITE:
        return "RDMA Write";
    case IBV_WR_RDMA_READ:
        return "RDMA Read";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        return "Fetch-and-Add";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
        return "Compare-and-Swap";
    default:
        return "WR";
    }
}

static int post(struct ru_conn *c, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(c->qp, wr, &bad);
    if (rc) {
        ru_err("ibv_post_send(%s, %u bytes): %s", op_name(wr->opcode),
               wr->num_sge ? wr->sg_list[0].length : 0, strerror(rc > 0 ? rc : -rc));
        return rc > 0 ? -rc : rc;
    }
    return 0;
}

int ru_post_send(struct ru_conn *c, enum ibv_wr_opcode op, struct ibv_mr *mr, size_t off,
                 size_t len, const struct ru_remote *rem, uint64_t roff, uint64_t wr_id,
                 unsigned flags)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)mr->addr + off, .length = (uint32_t)len, .lkey = mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = wr_id,
        .sg_list = &sge,
        .num_sge = len ? 1 : 0,
        .opcode = op,
        .send_flags = flags,
    };
    if (rem) {
        wr.wr.rdma.remote_addr = rem->addr + roff;
        wr.wr.rdma.rkey = rem->rkey;
    }
    return post(c, &wr);
}

int ru_post_atomic(struct ru_conn *c, enum ibv_wr_opcode op, struct ibv_mr *mr, size_t off,
                   const struct ru_remote *rem, uint64_t roff, uint64_t compare_add, uint64_t swap,
                   uint64_t wr_id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)mr->addr + off, .length = 8, .lkey = mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = wr_id,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = op,
        .send_flags = IBV_SEND_SIGNALED,
    };
    wr.wr.atomic.remote_addr = rem->addr + roff;
    wr.wr.atomic.rkey = rem->rkey;
    wr.wr.atomic.compare_add = compare_add;
    wr.wr.atomic.swap = swap;
    return post(c, &wr);
}

int ru_post_recv(struct ru_conn *c, struct ibv_mr *mr, size_t off, size_t len, uint64_t wr_id)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)mr->addr + off, .length = (uint32_t)len, .lkey = mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
    int rc = ibv_post_recv(c->qp, &wr, &bad);
    if (rc) {
        ru_err("ibv_post_recv(%zu bytes): %s", len, strerror(rc > 0 ? rc : -rc));
        return rc > 0 ? -rc : rc;
    }
    return 0;
}

static int check_wc(const struct ibv_wc *wc, int n)
{
    for (int i = 0; i < n; i++) {
        if (wc[i].status != IBV_WC_SUCCESS) {
            ru_err("completion with status %s (%d), opcode %d, wr_id %llu, vendor_err 0x%x",
                   ibv_wc_status_str(wc[i].status), (int)wc[i].status, (int)wc[i].opcode,
                   (unsigned long long)wc[i].wr_id, wc[i].vendor_err);
            return -EIO;
        }
    }
    return 0;
}

int ru_idle(struct ibv_cq *cq, struct ru_idle *s, uint64_t deadline)
{
    uint64_t now = ru_now_ns();
    if (now >= deadline)
        return -ETIMEDOUT;
    if (!s->since) {
        s->since = now;
        return 0;
    }
    if (now - s->since < ru_spin_ns)
        return 0;
    if (!cq || !cq->channel) {
        sched_yield();
        return 0;
    }
    if (!s->armed) {
        int rc = ibv_req_notify_cq(cq, 0);
        if (rc) {
            ru_err("ibv_req_notify_cq: %s", strerror(rc > 0 ? rc : -rc));
            return -EIO;
        }
        s->armed = true;
        return 0; /* the caller polls once more: a completion may have come before arming */
    }
    struct pollfd pfd = {.fd = cq->channel->fd, .events = POLLIN};
    if (poll(&pfd, 1, ru_ms_left(deadline)) > 0) {
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) == 0) {
            ibv_ack_cq_events(ev_cq, 1);
            s->armed = false;
        }
    }
    return 0;
}

int ru_poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, uint64_t deadline, const char *what)
{
    int got = 0;
    struct ru_idle idle = {0};
    while (got < n) {
        int k = ibv_poll_cq(cq, n - got, wc + got);
        if (k < 0) {
            ru_err("ibv_poll_cq: %d (waiting for %s)", k, what);
            return -EIO;
        }
        if (k > 0) {
            if (check_wc(wc + got, k) < 0) {
                ru_err("... while waiting for %s", what);
                return -EIO;
            }
            got += k;
            ru_idle_reset(&idle);
            continue;
        }
        int rc = ru_idle(cq, &idle, deadline);
        if (rc == -ETIMEDOUT)
            ru_err("timeout waiting for %s (%d of %d completions)", what, got, n);
        if (rc < 0)
            return rc;
    }
    return n;
}

int ru_poll_some(struct ibv_cq *cq, struct ibv_wc *wc, int max)
{
    int k = ibv_poll_cq(cq, max, wc);
    if (k < 0) {
        ru_err("ibv_poll_cq: %d", k);
        return -EIO;
    }
    if (check_wc(wc, k) < 0)
        return -EIO;
    return k;
}

int ru_wait_cq(struct ru_conn *c, struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms,
               const char *what)
{
    (void)c; /* the channel is cq->channel */
    uint64_t deadline = ru_deadline(timeout_ms);
    for (;;) {
        int k = ru_poll_some(cq, wc, 1);
        if (k != 0)
            return k;
        int rc = ibv_req_notify_cq(cq, 0);
        if (rc) {
            ru_err("ibv_req_notify_cq: %s", strerror(rc > 0 ? rc : -rc));
            return -EIO;
        }
        /* A completion may have landed between the poll and the arming. */
        k = ru_poll_some(cq, wc, 1);
        if (k != 0)
            return k;
        struct pollfd pfd = {.fd = cq->channel->fd, .events = POLLIN};
        int left = ru_ms_left(deadline);
        int r = left ? poll(&pfd, 1, left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            ru_err("timeout after %d ms waiting for %s (completion channel)", timeout_ms, what);
            return -ETIMEDOUT;
        }
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(cq->channel, &ev_cq, &ev_ctx) == 0)
            ibv_ack_cq_events(ev_cq, 1);
    }
}

/* ---------------------------------------------------------------- TCP */
static int tcp_opts(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        return -errno;
    return set_nonblock(fd);
}

int ru_tcp_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ru_err("socket: %s", strerror(errno));
        return -errno;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 4) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        int e = errno;
        ru_err("tcp listen on 127.0.0.1:0: %s", strerror(e));
        close(fd);
        return -e;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

int ru_tcp_accept(int lfd, int timeout_ms)
{
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    if (poll(&pfd, 1, timeout_ms) <= 0) {
        ru_err("timeout after %d ms waiting for the raw TCP connection", timeout_ms);
        return -ETIMEDOUT;
    }
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        ru_err("accept: %s", strerror(errno));
        return -errno;
    }
    int rc = tcp_opts(fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

int ru_tcp_connect(uint16_t port, int timeout_ms)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) {
        int e = errno;
        ru_err("tcp connect to 127.0.0.1:%u: %s", port, strerror(e));
        close(fd);
        return -e;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof err;
    if (poll(&pfd, 1, timeout_ms) <= 0) {
        ru_err("timeout after %d ms connecting raw TCP to 127.0.0.1:%u", timeout_ms, port);
        close(fd);
        return -ETIMEDOUT;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0 || err) {
        ru_err("tcp connect to 127.0.0.1:%u: %s", port, strerror(err ? err : errno));
        close(fd);
        return -ECONNREFUSED;
    }
    int rc = tcp_opts(fd);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

static int tcp_io(int fd, void *buf, size_t len, bool spin, uint64_t deadline, bool tx)
{
    uint8_t *p = buf;
    size_t done = 0;
    uint64_t since = 0;
    while (done < len) {
        ssize_t n = tx ? send(fd, p + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                       : recv(fd, p + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            since = 0;
            continue;
        }
        if (n == 0) {
            ru_err("raw TCP: connection closed by the peer");
            return -EPIPE;
        }
        if (errno != EAGAIN && errno != EINTR) {
            int e = errno;
            ru_err("raw TCP %s: %s", tx ? "send" : "recv", strerror(e));
            return -e;
        }
        uint64_t now = ru_now_ns();
        if (now >= deadline)
            goto timeout;
        if (!since)
            since = now;
        if (spin && now - since < ru_spin_ns)
            continue;
        struct pollfd pfd = {.fd = fd, .events = tx ? POLLOUT : POLLIN};
        poll(&pfd, 1, ru_ms_left(deadline));
    }
    return 0;
timeout:
    ru_err("timeout on raw TCP %s (%zu of %zu bytes)", tx ? "send" : "recv", done, len);
    return -ETIMEDOUT;
}

int ru_tcp_send_all(int fd, const void *buf, size_t len, bool spin, uint64_t deadline)
{
    return tcp_io(fd, (void *)buf, len, spin, deadline, true);
}

int ru_tcp_recv_all(int fd, void *buf, size_t len, bool spin, uint64_t deadline)
{
    return tcp_io(fd, buf, len, spin, deadline, false);
}

/* -------------------------------------------------------------- stats */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

double ru_percentile(uint64_t *samples, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(samples, n, sizeof *samples, cmp_u64);
    /* nearest rank */
    size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
    if (rank < 1)
        rank = 1;
    if (rank > n)
        rank = n;
    return (double)samples[rank - 1];
}

const char *ru_gbps_str(double gbps, char *buf, size_t cap)
{
    snprintf(buf, cap, gbps >= 0.1 ? "%.2f" : "%.3g", gbps);
    return buf;
}

const char *ru_size_str(size_t size, char *buf, size_t cap)
{
    if (size >= (1u << 20) && size % (1u << 20) == 0)
        snprintf(buf, cap, "%zu MiB", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, cap, "%zu KiB", size >> 10);
    else
        snprintf(buf, cap, "%zu B", size);
    return buf;
}

size_t ru_parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    char unit = (char)tolower((unsigned char)*end);
    unsigned shift = 0;
    if (unit == 'k')
        shift = 10;
    else if (unit == 'm')
        shift = 20;
    else if (unit == 'g')
        shift = 30;
    if (shift)
        end++;
    if (strcasecmp(end, "ib") == 0 || strcasecmp(end, "b") == 0)
        end += strlen(end);
    if (*end)
        return 0;
    return (size_t)(v << shift);
}
