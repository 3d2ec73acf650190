/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp's librdmacm through the rdma_cm API of Debian's <rdma/rdma_cma.h>,
 * linked with uiwarp's librdmacm.so.1 and libibverbs.so.1: both ends of
 * every connection live in this process and talk over 127.0.0.1 or ::1
 * with port-0 listeners (tests run in parallel: never a fixed port).
 *
 * Covered: event channels (fd readable exactly while events wait,
 * O_NONBLOCK), ids, bind (port 0, EADDRINUSE, EADDRNOTAVAIL), address and
 * route resolution, listen (address and wildcard), connect/accept with
 * private data and IRD/ORD in rdma_cm's terms, reject with private data,
 * unreachable, a listener destroyed with a request pending, disconnect,
 * migration between channels and to synchronous mode, destroy waiting for
 * acknowledgements, rdma_getaddrinfo, the rdma_create_ep / rdma_get_request
 * synchronous flow with rdma_verbs.h, options, rdma_init_qp_attr, the
 * unsupported families, and data over the connections: Send/Recv, RDMA
 * Write, RDMA Read, and an RDMA Write as the very first message.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <malloc.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine/eng_test.h"
#include "testutil.h"

/* The device serving loopback connections: the first listed (docs/APPS.md).
 * Empty string if there is none. */
static const char *lo_dev_name(void)
{
    static char name[64];
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    name[0] = 0;
    if (l && n > 0)
        snprintf(name, sizeof(name), "%s", ibv_get_device_name(l[0]));
    if (l)
        ibv_free_device_list(l);
    return name;
}

/* The first IPv4 address of a running non-loopback interface, and the
 * interface's name; false if there is none. */
static bool host_ipv4(char *ip, size_t iplen, char *ifname, size_t iflen)
{
    struct ifaddrs *ifa0 = NULL;
    bool found = false;
    if (getifaddrs(&ifa0) < 0)
        return false;
    for (struct ifaddrs *ifa = ifa0; ifa && !found; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET ||
            (ifa->ifa_flags & IFF_LOOPBACK) || !(ifa->ifa_flags & IFF_RUNNING))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)ifa->ifa_addr)->sin_addr, ip, (socklen_t)iplen);
        snprintf(ifname, iflen, "%s", ifa->ifa_name);
        found = true;
    }
    freeifaddrs(ifa0);
    return found;
}

#define EV_MS    5000 /* an event that must come */
#define QUIET_MS 100  /* proves that nothing is there */
#define BUF_LEN  4096

/* ------------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------- */

static bool readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void mkaddr(struct sockaddr_storage *ss, int fam, const char *ip, uint16_t port)
{
    memset(ss, 0, sizeof(*ss));
    if (fam == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        inet_pton(AF_INET6, ip, &a->sin6_addr);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        inet_pton(AF_INET, ip, &a->sin_addr);
    }
}

static bool have_ipv6_loopback(void)
{
    struct sockaddr_storage ss;
    mkaddr(&ss, AF_INET6, "::1", 0);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    bool ok = fd >= 0 && bind(fd, (struct sockaddr *)&ss, sizeof(struct sockaddr_in6)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* A port nobody listens on (bound once, then released). */
static uint16_t dead_port(int fam, const char *ip)
{
    struct sockaddr_storage ss;
    socklen_t l = sizeof(ss);
    mkaddr(&ss, fam, ip, 0);
    int fd = socket(fam, SOCK_STREAM, 0);
    uint16_t port = 0;
    if (fd >= 0 &&
        bind(fd, (struct sockaddr *)&ss,
             fam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) == 0 &&
        getsockname(fd, (struct sockaddr *)&ss, &l) == 0)
        port = ntohs(fam == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                     : ((struct sockaddr_in *)&ss)->sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* The next event on ch, which must be `want` (NULL and a failed check if
 * nothing comes within EV_MS). The caller acknowledges it. */
static struct rdma_cm_event *get_ev_at(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
                                       int line)
{
    struct rdma_cm_event *e = NULL;
    tu_checks++;
    if (!readable(ch->fd, EV_MS)) {
        tu_failed++;
        fprintf(stderr, "%s:%d: no event within %d ms (wanted %s)\n", __FILE__, line, EV_MS,
                rdma_event_str(want));
        return NULL;
    }
    if (rdma_get_cm_event(ch, &e) != 0) {
        tu_failed++;
        fprintf(stderr, "%s:%d: rdma_get_cm_event: %s\n", __FILE__, line, strerror(errno));
        return NULL;
    }
    if (e->event != want) {
        tu_failed++;
        fprintf(stderr, "%s:%d: got %s (status %d), wanted %s\n", __FILE__, line,
                rdma_event_str(e->event), e->status, rdma_event_str(want));
    }
    return e;
}
#define get_ev(ch, want) get_ev_at((ch), (want), __LINE__)

static void ack(struct rdma_cm_event *e)
{
    if (e)
        CHECK_EQ(rdma_ack_cm_event(e), 0);
}

/* Wait for one completion on cq (driving progress by polling). */
static bool wait_wc_at(struct ibv_cq *cq, struct ibv_wc *wc, int line)
{
    uint64_t end = eng_now_ms() + EV_MS;
    tu_checks++;
    while (eng_now_ms() < end) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n == 1) {
            if (wc->status != IBV_WC_SUCCESS) {
                tu_failed++;
                fprintf(stderr, "%s:%d: completion status %s (opcode %d)\n", __FILE__, line,
                        ibv_wc_status_str(wc->status), wc->opcode);
                return false;
            }
            return true;
        }
        if (n < 0)
            break;
    }
    tu_failed++;
    fprintf(stderr, "%s:%d: no completion within %d ms\n", __FILE__, line, EV_MS);
    return false;
}
#define wait_wc(cq, wc) wait_wc_at((cq), (wc), __LINE__)

static int post_recv(struct ibv_qp *qp, struct ibv_mr *mr, void *addr, uint32_t len, uint64_t id)
{
    return eng_post_recv(qp, addr, len, mr->lkey, id);
}

static int post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, struct ibv_mr *mr, void *addr,
                     uint32_t len, uint64_t raddr, uint32_t rkey, uint64_t id)
{
    return eng_post(qp, op, addr, len, mr->lkey, raddr, rkey, id, true);
}

/* Buffer advertisement carried in private data or a Send. */
struct adv {
    uint64_t addr;
    uint32_t rkey;
    char tag[20];
};

/* ------------------------------------------------------------------------
 * A connected pair: listener + client id + accepted id, each with a QP.
 * ---------------------------------------------------------------------- */
struct end {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_pd *pd; /* server: own PD; client: the id's default */
    struct ibv_cq *cq; /* server: own CQ; client: rdma_create_qp's */
    struct ibv_cq *scq, *rcq;
    uint8_t *buf;
    struct ibv_mr *mr;
};

struct pair {
    int fam;
    const char *ip;
    struct rdma_event_channel *lch;
    struct rdma_cm_id *lid;
    uint16_t port;
    struct end c, s;
    struct adv cadv, sadv; /* what each side advertised in private data */
    bool up;
    /* the client's retry had to take another port: its id shows the new
     * one from ESTABLISHED on (test_listen_late_port_taken) */
    bool port_moves;
    uint16_t seen_port; /* network order: the client port the server saw */
};

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

static void qp_caps(struct ibv_qp_init_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->cap.max_send_wr = 16;
    a->cap.max_recv_wr = 16;
    a->cap.max_send_sge = 1;
    a->cap.max_recv_sge = 1;
    a->qp_type = IBV_QPT_RC;
    a->sq_sig_all = 1;
}

/* Listener on ip (wildcard: the family's any address), port 0. */
/* An end's buffer (BUF_LEN, registered with ACCESS), four 256-byte receives
 * (wr_id first..first+3), and the advertisement of the buffer in adv, which
 * cp (zeroed) carries as private data. false if registration failed. */
static bool end_ready(struct end *e, uint64_t first, struct adv *adv, const char *tag,
                      struct rdma_conn_param *cp)
{
    e->buf = calloc(1, BUF_LEN);
    e->mr = ibv_reg_mr(e->pd, e->buf, BUF_LEN, ACCESS);
    CHECK(e->mr != NULL);
    if (!e->mr)
        return false;
    for (int i = 0; i < 4; i++)
        CHECK_EQ(post_recv(e->id->qp, e->mr, e->buf + 256 * i, 256, first + (uint64_t)i), 0);
    adv->addr = (uintptr_t)e->buf;
    adv->rkey = e->mr->rkey;
    snprintf(adv->tag, sizeof(adv->tag), "%s", tag);
    memset(cp, 0, sizeof(*cp));
    cp->private_data = adv;
    cp->private_data_len = sizeof(*adv);
    return true;
}

static bool listen_on(struct pair *p, int fam, const char *ip, bool wildcard)
{
    memset(p, 0, sizeof(*p));
    p->fam = fam;
    p->ip = ip;
    p->lch = rdma_create_event_channel();
    CHECK(p->lch != NULL);
    if (!p->lch)
        return false;
    CHECK_EQ(rdma_create_id(p->lch, &p->lid, p, RDMA_PS_TCP), 0);
    struct sockaddr_storage ss;
    mkaddr(&ss, fam, wildcard ? (fam == AF_INET6 ? "::" : "0.0.0.0") : ip, 0);
    CHECK_EQ(rdma_bind_addr(p->lid, (struct sockaddr *)&ss), 0);
    /* as the kernel: the wildcard and loopback addresses (cma_any_addr)
     * bind without a device; the connections' ids get one */
    CHECK(p->lid->verbs == NULL);
    CHECK(rdma_get_src_port(p->lid) != 0); /* port 0 got a real port at bind */
    CHECK_EQ(rdma_listen(p->lid, 8), 0);
    p->port = ntohs(rdma_get_src_port(p->lid));
    CHECK(p->port != 0);
    return p->port != 0;
}

/* Client: resolve, route, QP (default PD, CQs made by rdma_create_qp),
 * connect with private data advertising its buffer. */
static bool client_connect(struct pair *p, uint16_t port, uint8_t init_depth, uint8_t resp_res)
{
    struct end *c = &p->c;
    c->ch = rdma_create_event_channel();
    CHECK(c->ch != NULL);
    CHECK_EQ(rdma_create_id(c->ch, &c->id, p, RDMA_PS_TCP), 0);
    struct sockaddr_storage dst;
    mkaddr(&dst, p->fam, p->ip, port);
    CHECK_EQ(rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&dst, 2000), 0);
    struct rdma_cm_event *e = get_ev(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (!e)
        return false;
    CHECK(e->id == c->id);
    CHECK_EQ(e->status, 0);
    ack(e);
    CHECK(c->id->verbs != NULL);
    if (!c->id->verbs)
        return false;
    /* loopback: the first device, a non-loopback interface's when one runs */
    CHECK_STR(ibv_get_device_name(c->id->verbs->device), lo_dev_name());
    CHECK_EQ(c->id->verbs->device->transport_type, IBV_TRANSPORT_IWARP);
    CHECK(c->id->pd != NULL);
    CHECK_EQ(c->id->port_num, 1);
    /* unlike the kernel's rdma_cm, no port yet: connect() picks it
     * (docs/ENGINE.md "Source ports"); the address is there */
    CHECK_EQ(rdma_get_src_port(c->id), 0);
    CHECK_EQ(ntohs(rdma_get_dst_port(c->id)), port);
    CHECK_EQ(rdma_get_local_addr(c->id)->sa_family, p->fam);
    CHECK_EQ(rdma_get_peer_addr(c->id)->sa_family, p->fam);
    CHECK_EQ(rdma_resolve_route(c->id, 2000), 0);
    e = get_ev(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    if (!e)
        return false;
    ack(e);

    struct ibv_qp_init_attr qa;
    qp_caps(&qa);
    CHECK_EQ(rdma_create_qp(c->id, NULL, &qa), 0);
    if (!c->id->qp)
        return false;
    CHECK(c->id->send_cq != NULL && c->id->recv_cq != NULL);
    CHECK(c->id->send_cq_channel != NULL && c->id->recv_cq_channel != NULL);
    CHECK(qa.send_cq == c->id->send_cq && qa.recv_cq == c->id->recv_cq);
    CHECK(c->id->qp->pd == c->id->pd);
    c->pd = c->id->pd;
    c->scq = c->id->send_cq;
    c->rcq = c->id->recv_cq;
    struct rdma_conn_param cp;
    if (!end_ready(c, 100, &p->cadv, "hello-connect", &cp))
        return false;
    cp.initiator_depth = init_depth;
    cp.responder_resources = resp_res;
    cp.retry_count = 7;
    CHECK_EQ(rdma_connect(c->id, &cp), 0);
    CHECK(rdma_get_src_port(c->id) != 0); /* the port connect() picked */
    return true;
}

/* Server: take the request, check it, QP on its own PD/CQ, accept with
 * private data advertising its buffer. */
static bool server_accept(struct pair *p, uint8_t want_init_depth, uint8_t want_resp_res)
{
    struct rdma_cm_event *e = get_ev(p->lch, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (!e)
        return false;
    struct end *s = &p->s;
    s->ch = p->lch;
    s->id = e->id;
    CHECK(e->listen_id == p->lid);
    CHECK(s->id != p->lid);
    CHECK(s->id->channel == p->lch);
    CHECK(s->id->context == p->lid->context);
    CHECK(s->id->verbs != NULL);
    if (s->id->verbs) /* both ends of a loopback connection: the same device */
        CHECK_STR(ibv_get_device_name(s->id->verbs->device), lo_dev_name());
    CHECK_EQ(s->id->ps, RDMA_PS_TCP);
    CHECK_EQ(e->status, 0);
    CHECK_EQ(e->param.conn.private_data_len, sizeof(struct adv));
    if (e->param.conn.private_data_len == sizeof(struct adv)) {
        struct adv a;
        memcpy(&a, e->param.conn.private_data, sizeof(a));
        CHECK_STR(a.tag, "hello-connect");
        CHECK_EQ(a.rkey, p->cadv.rkey);
        CHECK_EQ(a.addr, p->cadv.addr);
    }
    /* the initiator's IRD is our initiator depth, its ORD our resources */
    CHECK_EQ(e->param.conn.initiator_depth, want_init_depth);
    CHECK_EQ(e->param.conn.responder_resources, want_resp_res);
    /* addresses: ours is the listener's port, the peer's the client's */
    CHECK_EQ(rdma_get_local_addr(s->id)->sa_family, p->fam);
    CHECK_EQ(ntohs(rdma_get_src_port(s->id)), p->port);
    p->seen_port = rdma_get_dst_port(s->id);
    if (!p->port_moves)
        CHECK_EQ(rdma_get_dst_port(s->id), rdma_get_src_port(p->c.id));
    ack(e);
    if (!s->id->verbs)
        return false;

    s->pd = ibv_alloc_pd(s->id->verbs);
    s->cq = ibv_create_cq(s->id->verbs, 64, NULL, NULL, 0);
    CHECK(s->pd && s->cq);
    struct ibv_qp_init_attr qa;
    qp_caps(&qa);
    qa.send_cq = qa.recv_cq = s->cq;
    CHECK_EQ(rdma_create_qp(s->id, s->pd, &qa), 0);
    if (!s->id->qp)
        return false;
    CHECK(s->id->send_cq == NULL); /* given CQs: none created */
    CHECK(s->id->pd == s->pd);
    s->scq = s->rcq = s->cq;
    struct rdma_conn_param cp;
    if (!end_ready(s, 200, &p->sadv, "hello-accept", &cp))
        return false;
    cp.initiator_depth = want_init_depth;
    cp.responder_resources = want_resp_res;
    CHECK_EQ(rdma_accept(s->id, &cp), 0);
    return true;
}

static bool established(struct pair *p)
{
    struct rdma_cm_event *e = get_ev(p->c.ch, RDMA_CM_EVENT_ESTABLISHED);
    if (!e)
        return false;
    CHECK(e->id == p->c.id);
    CHECK_EQ(e->status, 0);
    CHECK_EQ(e->param.conn.private_data_len, sizeof(struct adv));
    if (e->param.conn.private_data_len == sizeof(struct adv)) {
        struct adv a;
        memcpy(&a, e->param.conn.private_data, sizeof(a));
        CHECK_STR(a.tag, "hello-accept");
        CHECK_EQ(a.rkey, p->sadv.rkey);
    }
    CHECK(e->param.conn.initiator_depth >= 1);
    CHECK(e->param.conn.responder_resources >= 1);
    ack(e);
    e = get_ev(p->lch, RDMA_CM_EVENT_ESTABLISHED);
    if (!e)
        return false;
    CHECK(e->id == p->s.id);
    ack(e);
    p->up = true;
    return true;
}

static bool pair_up(struct pair *p, int fam, const char *ip, bool wildcard)
{
    if (!listen_on(p, fam, ip, wildcard))
        return false;
    if (!client_connect(p, p->port, 2, 3))
        return false;
    if (!server_accept(p, 3, 2))
        return false;
    return established(p);
}

static void end_free(struct end *e, bool own_cq)
{
    if (!e->id)
        return;
    rdma_destroy_qp(e->id);
    if (e->mr)
        ibv_dereg_mr(e->mr);
    if (own_cq && e->cq)
        ibv_destroy_cq(e->cq);
    if (own_cq && e->pd)
        ibv_dealloc_pd(e->pd);
    free(e->buf);
    CHECK_EQ(rdma_destroy_id(e->id), 0);
    e->id = NULL;
}

/* Orderly disconnect from the client; both ends see DISCONNECTED. */
static void pair_down(struct pair *p)
{
    if (p->up) {
        CHECK_EQ(rdma_disconnect(p->c.id), 0);
        struct rdma_cm_event *e = get_ev(p->c.ch, RDMA_CM_EVENT_DISCONNECTED);
        if (e)
            CHECK(e->id == p->c.id);
        ack(e);
        e = get_ev(p->lch, RDMA_CM_EVENT_DISCONNECTED);
        if (e)
            CHECK(e->id == p->s.id);
        ack(e);
        CHECK(!readable(p->c.ch->fd, 0));
    }
    end_free(&p->c, false);
    end_free(&p->s, true);
    if (p->lid)
        CHECK_EQ(rdma_destroy_id(p->lid), 0);
    if (p->c.ch)
        rdma_destroy_event_channel(p->c.ch);
    if (p->lch)
        rdma_destroy_event_channel(p->lch);
}

/* ------------------------------------------------------------------------
 * Data over a pair
 * ---------------------------------------------------------------------- */

static void data_exchange(struct pair *p)
{
    struct ibv_wc wc;
    struct end *c = &p->c, *s = &p->s;

    /* Send/Recv client -> server */
    memcpy(c->buf + 1024, "ping-from-client", 17);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_SEND, c->mr, c->buf + 1024, 17, 0, 0, 1), 0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    if (wait_wc(s->rcq, &wc)) {
        CHECK_EQ(wc.opcode, IBV_WC_RECV);
        CHECK_EQ(wc.byte_len, 17);
        CHECK_EQ(wc.wr_id, 200);
        CHECK_STR((char *)s->buf, "ping-from-client");
    }
    /* Send/Recv server -> client */
    memcpy(s->buf + 1024, "pong-from-server", 17);
    CHECK_EQ(post_send(s->id->qp, IBV_WR_SEND, s->mr, s->buf + 1024, 17, 0, 0, 2), 0);
    if (wait_wc(s->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    if (wait_wc(c->rcq, &wc)) {
        CHECK_EQ(wc.opcode, IBV_WC_RECV);
        CHECK_EQ(wc.wr_id, 100);
        CHECK_STR((char *)c->buf, "pong-from-server");
    }
    /* RDMA Write client -> server, then a Send: the Write is placed first */
    for (int i = 0; i < 512; i++)
        c->buf[2048 + i] = (uint8_t)(i * 7 + 1);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_RDMA_WRITE, c->mr, c->buf + 2048, 512, p->sadv.addr + 2048,
                       p->sadv.rkey, 3),
             0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_SEND, c->mr, c->buf + 1024, 17, 0, 0, 4), 0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    if (wait_wc(s->rcq, &wc))
        CHECK_MEM(s->buf + 2048, c->buf + 2048, 512);
    /* RDMA Read client <- server */
    for (int i = 0; i < 700; i++)
        s->buf[3000 + i % 1000] = (uint8_t)(i * 13 + 5);
    memset(c->buf + 3000, 0, 700);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_RDMA_READ, c->mr, c->buf + 3000, 700, p->sadv.addr + 3000,
                       p->sadv.rkey, 5),
             0);
    if (wait_wc(c->scq, &wc)) {
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
        CHECK_MEM(c->buf + 3000, s->buf + 3000, 700);
    }
}

/* The client's very first message is an RDMA Write (rkeys came in the
 * private data); the server answers with its own Write once it saw the
 * data: the passive side must be able to send after that first FPDU. */
static void write_first(struct pair *p)
{
    struct ibv_wc wc;
    struct end *c = &p->c, *s = &p->s;
    memset(c->buf + 3500, 0x5A, 64);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_RDMA_WRITE, c->mr, c->buf + 3500, 64, p->sadv.addr + 3500,
                       p->sadv.rkey, 11),
             0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    /* a Send behind it tells the server the data is there (in order) */
    CHECK_EQ(post_send(c->id->qp, IBV_WR_SEND, c->mr, c->buf + 1024, 8, 0, 0, 12), 0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    if (wait_wc(s->rcq, &wc))
        CHECK_EQ(s->buf[3563], 0x5A);
    /* now the server writes and sends back */
    memset(s->buf + 3600, 0xA5, 64);
    CHECK_EQ(post_send(s->id->qp, IBV_WR_RDMA_WRITE, s->mr, s->buf + 3600, 64, p->cadv.addr + 3600,
                       p->cadv.rkey, 13),
             0);
    if (wait_wc(s->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_RDMA_WRITE);
    CHECK_EQ(post_send(s->id->qp, IBV_WR_SEND, s->mr, s->buf + 1024, 8, 0, 0, 14), 0);
    if (wait_wc(s->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    if (wait_wc(c->rcq, &wc))
        CHECK_EQ(c->buf[3663], 0xA5);
}

/* ------------------------------------------------------------------------
 * Cases
 * ---------------------------------------------------------------------- */

static void test_connect(int fam, const char *ip, bool wildcard, bool write_first_case)
{
    struct pair p;
    if (pair_up(&p, fam, ip, wildcard)) {
        if (write_first_case)
            write_first(&p);
        else
            data_exchange(&p);
    }
    pair_down(&p);
}

/* The peer's last Send, then its close. DISCONNECTED follows the
 * completions before it (rdma_cm holds it back, at most 200 ms, while they
 * are not polled): a program that never polls still gets it, later, and
 * the completion is still in the CQ; destroying the QP then removes what
 * the CQ holds of it (the flushed receives). */
static void test_disconnect_after_completions(void)
{
    struct pair p;
    struct ibv_wc wc;
    if (!pair_up(&p, AF_INET, "127.0.0.1", false)) {
        pair_down(&p);
        return;
    }
    struct end *c = &p.c, *s = &p.s;
    memcpy(c->buf + 1024, "last-words", 11);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_SEND, c->mr, c->buf + 1024, 11, 0, 0, 21), 0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    CHECK_EQ(rdma_disconnect(c->id), 0);
    ack(get_ev(c->ch, RDMA_CM_EVENT_DISCONNECTED));
    uint64_t t0 = eng_now_ms();
    struct rdma_cm_event *e = get_ev(p.lch, RDMA_CM_EVENT_DISCONNECTED);
    uint64_t held = eng_now_ms() - t0;
    if (e)
        CHECK(e->id == s->id);
    ack(e);
    p.up = false;
    CHECK(held >= 100); /* held back: the Send's completion was not polled */
    if (wait_wc(s->rcq, &wc)) {
        CHECK_EQ(wc.opcode, IBV_WC_RECV);
        CHECK_EQ(wc.wr_id, 200);
        CHECK_EQ(wc.byte_len, 11);
        CHECK_STR((char *)s->buf, "last-words");
    }
    /* the other three receives were flushed; take one, destroy the QP */
    CHECK_EQ(ibv_poll_cq(s->rcq, 1, &wc), 1);
    CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    CHECK_EQ(wc.wr_id, 201);
    rdma_destroy_qp(s->id);
    CHECK_EQ(ibv_poll_cq(s->rcq, 1, &wc), 0); /* 202 and 203 went with it */
    pair_down(&p);
}

struct poller {
    struct ibv_cq *cq;
    /* held across each poll and the recording of its result: the poll
     * that takes the completion lets DISCONNECTED go, and the main thread
     * may see the event before this thread has stored got */
    pthread_mutex_t lock;
    atomic_int got; /* 1: the Send's completion was polled */
    atomic_int stop;
};

static void *poller_main(void *arg)
{
    struct poller *pl = arg;
    struct ibv_wc wc;
    while (!atomic_load(&pl->stop)) {
        pthread_mutex_lock(&pl->lock);
        if (ibv_poll_cq(pl->cq, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
            wc.opcode == IBV_WC_RECV)
            atomic_store(&pl->got, 1);
        pthread_mutex_unlock(&pl->lock);
        sched_yield(); /* let the main thread take the lock */
    }
    return NULL;
}

/* With a thread polling the CQ, the program sees the completion before
 * DISCONNECTED (libfabric's rxm closes the endpoint on DISCONNECTED). */
static void test_disconnect_polled_first(void)
{
    struct pair p;
    struct ibv_wc wc;
    if (!pair_up(&p, AF_INET, "127.0.0.1", false)) {
        pair_down(&p);
        return;
    }
    struct end *c = &p.c, *s = &p.s;
    struct poller pl = {.cq = s->rcq, .lock = PTHREAD_MUTEX_INITIALIZER};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, poller_main, &pl), 0);
    CHECK_EQ(post_send(c->id->qp, IBV_WR_SEND, c->mr, c->buf + 1024, 11, 0, 0, 31), 0);
    if (wait_wc(c->scq, &wc))
        CHECK_EQ(wc.opcode, IBV_WC_SEND);
    CHECK_EQ(rdma_disconnect(c->id), 0);
    ack(get_ev(c->ch, RDMA_CM_EVENT_DISCONNECTED));
    struct rdma_cm_event *e = get_ev(p.lch, RDMA_CM_EVENT_DISCONNECTED);
    pthread_mutex_lock(&pl.lock); /* a poll in progress has recorded its result */
    CHECK_EQ(atomic_load(&pl.got), 1);
    pthread_mutex_unlock(&pl.lock);
    ack(e);
    p.up = false;
    atomic_store(&pl.stop, 1);
    pthread_join(t, NULL);
    pair_down(&p);
}

static void test_reject(int fam, const char *ip)
{
    struct pair p;
    if (!listen_on(&p, fam, ip, false) || !client_connect(&p, p.port, 1, 1)) {
        pair_down(&p);
        return;
    }
    struct rdma_cm_event *e = get_ev(p.lch, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (e) {
        struct rdma_cm_id *sid = e->id;
        ack(e);
        static const char why[] = "not today, thank you";
        CHECK_EQ(rdma_reject(sid, why, sizeof(why)), 0);
        CHECK_EQ(rdma_accept(sid, NULL), -1); /* already rejected */
        e = get_ev(p.c.ch, RDMA_CM_EVENT_REJECTED);
        if (e) {
            CHECK(e->id == p.c.id);
            CHECK_EQ(e->status, -ECONNREFUSED);
            CHECK_EQ(e->param.conn.private_data_len, sizeof(why));
            if (e->param.conn.private_data_len == sizeof(why))
                CHECK_MEM(e->param.conn.private_data, why, sizeof(why));
        }
        ack(e);
        CHECK_EQ(rdma_destroy_id(sid), 0);
    }
    CHECK(!readable(p.lch->fd, QUIET_MS)); /* no further event */
    pair_down(&p);
}

static void test_unreachable(int fam, const char *ip)
{
    struct pair p;
    memset(&p, 0, sizeof(p));
    p.fam = fam;
    p.ip = ip;
    uint16_t port = dead_port(fam, ip);
    CHECK(port != 0);
    if (client_connect(&p, port, 1, 1)) {
        struct rdma_cm_event *e = get_ev(p.c.ch, RDMA_CM_EVENT_UNREACHABLE);
        if (e) {
            CHECK(e->id == p.c.id);
            CHECK_EQ(e->status, -ECONNREFUSED);
        }
        ack(e);
    }
    pair_down(&p);
}

/* One side of test_external_qp: a QP made with ibv_create_qp, not on the
 * id; it must be in INIT when created, as siw's. */
struct xend {
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char buf[64];
};

static bool xend_make(struct xend *x, struct ibv_context *ctx)
{
    memset(x, 0, sizeof(*x));
    x->pd = ibv_alloc_pd(ctx);
    x->cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(x->pd && x->cq);
    if (!x->pd || !x->cq)
        return false;
    struct ibv_qp_init_attr qa;
    qp_caps(&qa);
    qa.send_cq = qa.recv_cq = x->cq;
    x->qp = ibv_create_qp(x->pd, &qa);
    CHECK(x->qp != NULL);
    if (!x->qp)
        return false;
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    CHECK_EQ(ibv_query_qp(x->qp, &a, IBV_QP_STATE, &ia), 0);
    CHECK_EQ(a.qp_state, IBV_QPS_INIT);
    CHECK_EQ(x->qp->state, IBV_QPS_INIT);
    x->mr = ibv_reg_mr(x->pd, x->buf, sizeof(x->buf), ACCESS);
    CHECK(x->mr != NULL);
    return x->mr && post_recv(x->qp, x->mr, x->buf, sizeof(x->buf), 7) == 0;
}

static void xend_free(struct xend *x)
{
    if (x->qp)
        CHECK_EQ(ibv_destroy_qp(x->qp), 0);
    if (x->mr)
        ibv_dereg_mr(x->mr);
    if (x->cq)
        ibv_destroy_cq(x->cq);
    if (x->pd)
        ibv_dealloc_pd(x->pd);
}

/* Send from one external QP to the other; the receiver checks the bytes. */
static void xend_send(struct xend *from, struct xend *to, const char *msg)
{
    snprintf(from->buf, sizeof(from->buf), "%s", msg);
    CHECK_EQ(
        post_send(from->qp, IBV_WR_SEND, from->mr, from->buf, (uint32_t)strlen(msg) + 1, 0, 0, 8),
        0);
    struct ibv_wc wc;
    bool got_send = false, got_recv = false;
    for (int i = 0; i < 2; i++) {
        /* the two CQs in turn until each gave its completion */
        if (!got_send && wait_wc_at(from->cq, &wc, __LINE__)) {
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
            CHECK_EQ(wc.opcode, IBV_WC_SEND);
            got_send = true;
        }
        if (!got_recv && wait_wc_at(to->cq, &wc, __LINE__)) {
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
            CHECK_EQ(wc.opcode, IBV_WC_RECV);
            CHECK_EQ(wc.byte_len, strlen(msg) + 1);
            CHECK_STR(to->buf, msg);
            got_recv = true;
        }
    }
    CHECK(got_send && got_recv);
}

/* rdma_connect and rdma_accept with an external QP: no QP on the ids,
 * qp_num in the connection parameters (the kernel's iWARP CM finds the
 * QP by number). A number no QP of the device has: EINVAL. */
static void test_external_qp(void)
{
    struct pair p;
    if (!listen_on(&p, AF_INET, "127.0.0.1", false)) {
        pair_down(&p);
        return;
    }
    struct end *c = &p.c;
    c->ch = rdma_create_event_channel();
    CHECK_EQ(rdma_create_id(c->ch, &c->id, &p, RDMA_PS_TCP), 0);
    struct sockaddr_storage dst;
    mkaddr(&dst, AF_INET, "127.0.0.1", p.port);
    CHECK_EQ(rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&dst, 2000), 0);
    ack(get_ev(c->ch, RDMA_CM_EVENT_ADDR_RESOLVED));
    CHECK_EQ(rdma_resolve_route(c->id, 2000), 0);
    ack(get_ev(c->ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    struct xend cx, sx;
    memset(&sx, 0, sizeof(sx));
    if (!c->id->verbs || !xend_make(&cx, c->id->verbs)) {
        pair_down(&p);
        return;
    }
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.initiator_depth = cp.responder_resources = 1;
    cp.qp_num = 0xfffff0; /* nobody's */
    CHECK_EQ(rdma_connect(c->id, &cp), -1);
    CHECK_EQ(errno, EINVAL);
    cp.qp_num = cx.qp->qp_num;
    CHECK_EQ(rdma_connect(c->id, &cp), 0);
    CHECK(c->id->qp == NULL);

    struct rdma_cm_event *e = get_ev(p.lch, RDMA_CM_EVENT_CONNECT_REQUEST);
    if (e) {
        p.s.ch = p.lch;
        p.s.id = e->id;
        ack(e);
        if (p.s.id->verbs && xend_make(&sx, p.s.id->verbs)) {
            memset(&cp, 0, sizeof(cp));
            cp.initiator_depth = cp.responder_resources = 1;
            cp.qp_num = sx.qp->qp_num;
            CHECK_EQ(rdma_accept(p.s.id, &cp), 0);
            CHECK(p.s.id->qp == NULL);
            e = get_ev(c->ch, RDMA_CM_EVENT_ESTABLISHED);
            ack(e);
            struct rdma_cm_event *se = get_ev(p.lch, RDMA_CM_EVENT_ESTABLISHED);
            ack(se);
            if (e && se) {
                CHECK_EQ(cx.qp->state, IBV_QPS_RTS);
                CHECK_EQ(sx.qp->state, IBV_QPS_RTS);
                xend_send(&cx, &sx, "external, client to server");
                CHECK_EQ(post_recv(sx.qp, sx.mr, sx.buf, sizeof(sx.buf), 9), 0);
                xend_send(&sx, &cx, "external, server to client");
                CHECK_EQ(rdma_disconnect(c->id), 0);
                ack(get_ev(c->ch, RDMA_CM_EVENT_DISCONNECTED));
                ack(get_ev(p.lch, RDMA_CM_EVENT_DISCONNECTED));
            }
        }
    }
    CHECK_EQ(rdma_destroy_id(c->id), 0);
    c->id = NULL;
    if (p.s.id)
        CHECK_EQ(rdma_destroy_id(p.s.id), 0);
    p.s.id = NULL;
    xend_free(&cx);
    xend_free(&sx);
    pair_down(&p);
}

struct qp_destroyer {
    struct rdma_cm_id *id;
    atomic_int done;
};

static void *qp_destroyer_main(void *arg)
{
    struct qp_destroyer *d = arg;
    rdma_destroy_qp(d->id);
    atomic_store(&d->done, 1);
    return NULL;
}

/* A refused connect is tried again for UIWARP_RDMACM_RETRY_MS (1 s); a
 * QP destroyed meanwhile (ucmatose destroys its QPs right after the first
 * failure) must not wait for the retry's hold on it: rdma_destroy_qp
 * returns at once and the attempt ends as refused. Destroyed at several
 * points of the retry window; the destroy must end within 1 s. */
static void test_refused_qp_destroyed(void)
{
    for (int i = 0; i < 12; i++) {
        struct pair p;
        memset(&p, 0, sizeof(p));
        p.fam = AF_INET;
        p.ip = "127.0.0.1";
        uint16_t port = dead_port(AF_INET, "127.0.0.1");
        CHECK(port != 0);
        if (!client_connect(&p, port, 1, 1)) {
            pair_down(&p);
            return;
        }
        usleep((useconds_t)(i % 6) * 8000u); /* 0 .. 40 ms into the window */
        struct qp_destroyer d = {.id = p.c.id};
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, qp_destroyer_main, &d), 0);
        uint64_t t0 = eng_now_ms();
        while (!atomic_load(&d.done) && eng_now_ms() - t0 < 1000)
            usleep(1000);
        CHECK_EQ(atomic_load(&d.done), 1);
        if (!atomic_load(&d.done)) {
            fprintf(stderr, "rdma_destroy_qp still blocked after 1 s (run %d)\n", i);
            return; /* the thread holds the id: leave it */
        }
        pthread_join(t, NULL);
        CHECK(p.c.id->qp == NULL);
        struct rdma_cm_event *e = get_ev(p.c.ch, RDMA_CM_EVENT_UNREACHABLE);
        if (e) {
            CHECK(e->id == p.c.id);
            CHECK_EQ(e->status, -ECONNREFUSED);
        }
        ack(e);
        CHECK(!readable(p.c.ch->fd, 0)); /* one outcome only */
        pair_down(&p);
    }
}

/* A listener destroyed while a request waits: the initiator learns that
 * its connection failed, nothing is left behind. */
static void test_listener_gone(void)
{
    struct pair p;
    if (!listen_on(&p, AF_INET, "127.0.0.1", false) || !client_connect(&p, p.port, 1, 1)) {
        pair_down(&p);
        return;
    }
    CHECK(readable(p.lch->fd, EV_MS)); /* the request is queued */
    CHECK_EQ(rdma_destroy_id(p.lid), 0);
    p.lid = NULL;
    CHECK(!readable(p.lch->fd, 0)); /* and withdrawn with its listener */
    CHECK(readable(p.c.ch->fd, EV_MS));
    struct rdma_cm_event *e = NULL;
    if (rdma_get_cm_event(p.c.ch, &e) == 0) {
        CHECK(e->event == RDMA_CM_EVENT_CONNECT_ERROR || e->event == RDMA_CM_EVENT_REJECTED ||
              e->event == RDMA_CM_EVENT_UNREACHABLE);
        CHECK(e->status != 0);
        ack(e);
    }
    pair_down(&p);
}

struct destroyer {
    struct rdma_cm_id *id;
    atomic_int done;
    int rc;
};

static void *destroyer_main(void *arg)
{
    struct destroyer *d = arg;
    d->rc = rdma_destroy_id(d->id);
    atomic_store(&d->done, 1);
    return NULL;
}

/* The number of glibc malloc arenas (malloc_info lists one heap each). */
static int malloc_heaps(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int n = 0;
    if (!f)
        return -1;
    malloc_info(0, f);
    fclose(f);
    for (const char *p = buf; p && (p = strstr(p, "<heap nr=")) != NULL; p++)
        n++;
    free(buf);
    return n;
}

/* The router thread and the engine's progress thread map their malloc
 * arenas before rdma_create_event_channel returns, not at their first
 * allocation later: libfabric's memory monitor rewrites munmap and its kin
 * in place when the program opens its first domain, and the progress
 * thread inside munmap under its first free() then crashed (fi_pingpong -e
 * rdm, SIGSEGV in uiw-progress, about 1 run in 7 on a loaded host). Runs
 * first, before anything here starts a thread. */
static void test_thread_arenas(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* ASan's and TSan's malloc replaces glibc's: no arenas to count */
    printf("  skipped: a sanitizer's malloc, not glibc's\n");
    return;
#endif
    if (getenv("MALLOC_ARENA_MAX") || getenv("GLIBC_TUNABLES")) {
        printf("  skipped: malloc arenas configured in the environment\n");
        return;
    }
    int before = malloc_heaps();
    struct rdma_event_channel *ch = rdma_create_event_channel();
    int after = malloc_heaps();
    CHECK(ch != NULL);
    CHECK(before >= 1);
    /* one arena each for the router and the progress thread, at once */
    CHECK(after >= before + 2);
    if (after < before + 2)
        printf("  malloc arenas: %d before, %d after\n", before, after);
    if (ch)
        rdma_destroy_event_channel(ch);
}

static void test_channel_and_id_basics(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch != NULL);
    if (!ch)
        return;
    CHECK(ch->fd >= 0);
    CHECK(!readable(ch->fd, 0));
    struct rdma_cm_id *id = NULL;
    errno = 0;
    CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), -1);
    CHECK_EQ(errno, EOPNOTSUPP);
    CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_IB), -1);
    CHECK_EQ(rdma_create_id(ch, &id, (void *)0x1234, RDMA_PS_TCP), 0);
    if (!id)
        return;
    CHECK(id->channel == ch);
    CHECK(id->context == (void *)0x1234);
    CHECK(id->verbs == NULL);
    CHECK_EQ(id->qp_type, IBV_QPT_RC);
    CHECK_EQ(id->ps, RDMA_PS_TCP);

    /* non-blocking channel */
    int fl = fcntl(ch->fd, F_GETFL);
    CHECK(!(fl & O_NONBLOCK)); /* blocking by default, as rdma-core's */
    CHECK_EQ(fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK), 0);
    struct rdma_cm_event *e = NULL;
    errno = 0;
    CHECK_EQ(rdma_get_cm_event(ch, &e), -1);
    CHECK_EQ(errno, EAGAIN);

    /* state checks */
    CHECK_EQ(rdma_resolve_route(id, 100), -1);
    CHECK_EQ(rdma_connect(id, NULL), -1);
    CHECK_EQ(rdma_accept(id, NULL), -1);
    CHECK_EQ(rdma_disconnect(id), -1);
    CHECK_EQ(rdma_establish(id), -1);

    /* the fd is readable exactly while an event waits */
    struct sockaddr_storage dst;
    mkaddr(&dst, AF_INET, "127.0.0.1", 9);
    CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 100), 0);
    CHECK(readable(ch->fd, 0));
    CHECK_EQ(rdma_get_cm_event(ch, &e), 0);
    CHECK(!readable(ch->fd, 0));
    CHECK_EQ(e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK(e->id == id);
    CHECK(e->listen_id == NULL);
    CHECK_EQ(rdma_get_cm_event(ch, &e), -1); /* EAGAIN while the first is held */
    CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 100), -1); /* resolved */

    /* destroy waits for the event to be acknowledged */
    struct rdma_cm_event *held = NULL;
    CHECK_EQ(rdma_resolve_route(id, 100), 0);
    CHECK(readable(ch->fd, 0));
    CHECK_EQ(rdma_get_cm_event(ch, &held), 0);
    ack(e);
    struct destroyer d = {.id = id};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, destroyer_main, &d), 0);
    usleep(QUIET_MS * 1000);
    CHECK_EQ(atomic_load(&d.done), 0); /* still waiting for the ack */
    ack(held);
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&d.done), 1);
    CHECK_EQ(d.rc, 0);
    rdma_destroy_event_channel(ch);
}

static void test_bind(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;
    CHECK_EQ(rdma_create_id(ch, &a, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &b, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &d, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &e, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(ch, &f, NULL, RDMA_PS_TCP), 0);
    if (!a || !b || !c || !d || !e || !f)
        return;
    struct sockaddr_storage ss;

    mkaddr(&ss, AF_INET, "127.0.0.1", 0);
    CHECK_EQ(rdma_bind_addr(a, (struct sockaddr *)&ss), 0);
    uint16_t port = ntohs(rdma_get_src_port(a));
    CHECK(port != 0);
    CHECK(a->verbs == NULL); /* as the kernel: loopback binds as the wildcard */
    CHECK(a->pd == NULL);
    CHECK_EQ(rdma_bind_addr(a, (struct sockaddr *)&ss), -1); /* bound already */
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rdma_listen(a, 1), 0);
    CHECK_EQ(ntohs(rdma_get_src_port(a)), port);
    CHECK_EQ(rdma_listen(a, 1), -1);

    mkaddr(&ss, AF_INET, "127.0.0.1", port);
    errno = 0;
    CHECK_EQ(rdma_bind_addr(b, (struct sockaddr *)&ss), -1); /* a listens there */
    CHECK_EQ(errno, EADDRINUSE);

    mkaddr(&ss, AF_INET, "192.0.2.1", 0); /* TEST-NET-1: not ours */
    errno = 0;
    CHECK_EQ(rdma_bind_addr(c, (struct sockaddr *)&ss), -1);
    CHECK_EQ(errno, EADDRNOTAVAIL);

    mkaddr(&ss, AF_INET, "0.0.0.0", 0);
    CHECK_EQ(rdma_bind_addr(d, (struct sockaddr *)&ss), 0);
    CHECK(d->verbs == NULL);
    CHECK(rdma_get_src_port(d) != 0);

    mkaddr(&ss, AF_INET, "127.0.0.2", 0); /* all of 127/8 is loopback */
    CHECK_EQ(rdma_bind_addr(e, (struct sockaddr *)&ss), 0);
    CHECK(e->verbs == NULL);

    /* A host address binds to its interface's device, with the device's
     * default PD; one context per device. */
    char hip[64], hif[IF_NAMESIZE + 1], want[IF_NAMESIZE + 8];
    if (host_ipv4(hip, sizeof(hip), hif, sizeof(hif))) {
        struct rdma_cm_id *g = NULL, *h = NULL;
        CHECK_EQ(rdma_create_id(ch, &g, NULL, RDMA_PS_TCP), 0);
        CHECK_EQ(rdma_create_id(ch, &h, NULL, RDMA_PS_TCP), 0);
        mkaddr(&ss, AF_INET, hip, 0);
        CHECK_EQ(rdma_bind_addr(g, (struct sockaddr *)&ss), 0);
        CHECK_EQ(rdma_bind_addr(h, (struct sockaddr *)&ss), 0);
        CHECK(g->verbs != NULL && g->verbs == h->verbs);
        snprintf(want, sizeof(want), "uiw_%s", hif);
        if (g->verbs)
            CHECK_STR(ibv_get_device_name(g->verbs->device), want);
        CHECK_EQ(g->port_num, 1);
        CHECK(g->pd != NULL);
        /* that interface serves loopback unless an earlier one does */
        CHECK(strcmp(lo_dev_name(), "uiw_lo") != 0);
        rdma_destroy_id(g);
        rdma_destroy_id(h);
    } else {
        printf("  (no running non-loopback IPv4 interface: host address bind not tested)\n");
        CHECK_STR(lo_dev_name(), "uiw_lo");
    }

    memset(&ss, 0, sizeof(ss));
    ss.ss_family = 27; /* AF_IB */
    errno = 0;
    CHECK_EQ(rdma_bind_addr(f, (struct sockaddr *)&ss), -1);
    CHECK_EQ(errno, EAFNOSUPPORT);
    /* listen without bind: 0.0.0.0, any port, as the kernel does */
    CHECK_EQ(rdma_listen(f, 0), 0);
    CHECK(rdma_get_src_port(f) != 0);
    CHECK_EQ(rdma_get_local_addr(f)->sa_family, AF_INET);

    /* a non-synchronous listener cannot use rdma_get_request */
    struct rdma_cm_id *req = NULL;
    CHECK_EQ(rdma_get_request(a, &req), -1);
    CHECK_EQ(errno, EINVAL);

    struct rdma_cm_id *all[] = {a, b, c, d, e, f};
    for (unsigned i = 0; i < 6; i++)
        CHECK_EQ(rdma_destroy_id(all[i]), 0);
    CHECK(!readable(ch->fd, 0));
    rdma_destroy_event_channel(ch);
}

static void test_getaddrinfo(void)
{
    struct rdma_addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    CHECK_EQ(rdma_getaddrinfo(NULL, "7471", &hints, &res), 0);
    if (res) {
        CHECK(res->ai_flags & RAI_PASSIVE);
        CHECK(res->ai_src_addr != NULL);
        CHECK(res->ai_dst_addr == NULL);
        CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
        CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
        if (res->ai_src_addr) {
            CHECK(res->ai_src_addr->sa_family == AF_INET ||
                  res->ai_src_addr->sa_family == AF_INET6);
            CHECK_EQ(res->ai_src_len, res->ai_src_addr->sa_family == AF_INET6
                                          ? sizeof(struct sockaddr_in6)
                                          : sizeof(struct sockaddr_in));
            CHECK_EQ(ntohs(((struct sockaddr_in *)res->ai_src_addr)->sin_port), 7471);
        }
        rdma_freeaddrinfo(res);
    }

    res = NULL;
    CHECK_EQ(rdma_getaddrinfo("127.0.0.1", "4791", NULL, &res), 0);
    if (res) {
        CHECK_EQ(res->ai_family, AF_INET);
        CHECK(res->ai_dst_addr != NULL);
        CHECK(res->ai_src_addr == NULL);
        CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_in));
        CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
        CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
        if (res->ai_dst_addr) {
            struct sockaddr_in *a = (struct sockaddr_in *)res->ai_dst_addr;
            CHECK_EQ(ntohs(a->sin_port), 4791);
            CHECK_EQ(ntohl(a->sin_addr.s_addr), 0x7f000001);
        }
        rdma_freeaddrinfo(res);
    }

    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = RAI_NUMERICHOST;
    hints.ai_family = AF_INET6;
    hints.ai_port_space = RDMA_PS_TCP;
    struct sockaddr_storage src;
    mkaddr(&src, AF_INET6, "::1", 0);
    hints.ai_src_addr = (struct sockaddr *)&src;
    hints.ai_src_len = sizeof(struct sockaddr_in6);
    res = NULL;
    CHECK_EQ(rdma_getaddrinfo("::1", "18515", &hints, &res), 0);
    if (res) {
        CHECK_EQ(res->ai_family, AF_INET6);
        CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_in6));
        CHECK(res->ai_src_addr != NULL); /* the hints' source is kept */
        CHECK_EQ(res->ai_src_len, sizeof(struct sockaddr_in6));
        rdma_freeaddrinfo(res);
    }

    res = NULL;
    CHECK_EQ(rdma_getaddrinfo("localhost", "1", &hints, &res), -1); /* not numeric */
    CHECK(errno != 0);
    CHECK_EQ(rdma_getaddrinfo("no-such-host.invalid", "1", NULL, &res), -1);
    CHECK(errno != 0);
    CHECK_EQ(rdma_getaddrinfo(NULL, NULL, NULL, &res), -1);
    CHECK_EQ(errno, EINVAL);

    /* no node, no service: the hints' addresses */
    memset(&hints, 0, sizeof(hints));
    struct sockaddr_storage dst;
    mkaddr(&dst, AF_INET, "127.0.0.1", 1234);
    hints.ai_dst_addr = (struct sockaddr *)&dst;
    hints.ai_dst_len = sizeof(struct sockaddr_in);
    hints.ai_port_space = RDMA_PS_TCP;
    res = NULL;
    CHECK_EQ(rdma_getaddrinfo(NULL, NULL, &hints, &res), 0);
    if (res) {
        CHECK(res->ai_dst_addr && res->ai_dst_addr != hints.ai_dst_addr);
        CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_in));
        rdma_freeaddrinfo(res);
    }
}

/* A TCP connection from family fam to the loopback address and port:
 * whether it was accepted. */
static bool tcp_reaches(int fam, uint16_t port_be)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool ok;

    memset(&ss, 0, sizeof(ss));
    if (fam == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = port_be;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    } else {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = port_be;
        a->sin6_addr = in6addr_loopback;
        len = sizeof(*a);
    }
    ok = fd >= 0 && connect(fd, (struct sockaddr *)&ss, len) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* RDMA_OPTION_ID_AFONLY: an IPv6 wildcard listener takes IPv4 connections
 * too, unless AFONLY is set (IPV6_V6ONLY), as with the kernel's rdma_cm. */
static void test_afonly(void)
{
    for (int afonly = 0; afonly <= 1; afonly++) {
        struct rdma_event_channel *ch = rdma_create_event_channel();
        struct rdma_cm_id *id = NULL;
        struct sockaddr_in6 any = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
        CHECK(ch != NULL);
        CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
        if (!id)
            return;
        CHECK_EQ(
            rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &afonly, sizeof(afonly)), 0);
        CHECK_EQ(rdma_bind_addr(id, (struct sockaddr *)&any), 0);
        CHECK_EQ(rdma_listen(id, 4), 0);
        uint16_t port = rdma_get_src_port(id);
        CHECK(port != 0);
        CHECK(tcp_reaches(AF_INET6, port));
        CHECK_EQ(tcp_reaches(AF_INET, port), !afonly);
        CHECK_EQ(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(ch);
    }
}

static void test_options_and_misc(void)
{
    struct rdma_event_channel *ch = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
    if (!id)
        return;
    uint8_t tos = 0x10;
    int one = 1, zero = 0;
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)), 0);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &one, sizeof(one)), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof(one)), 0);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &zero, sizeof(zero)), 0);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof(one)), 0);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, 1), -1);
    CHECK_EQ(errno, EINVAL);
    /* the connection's dead-peer timeout (docs/ENGINE.md "Dead peers") */
    uint8_t ackt = 18, big = 32;
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ackt, 1), 0);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &big, 1), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &one, sizeof(one)),
             -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &tos, 1), -1);
    CHECK_EQ(errno, ENOSYS);

    /* rdma_init_qp_attr needs a device */
    struct ibv_qp_attr qa;
    int mask = -1;
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), -1);
    CHECK_EQ(rdma_notify(id, IBV_EVENT_COMM_EST), -1);
    /* a bind to 127.0.0.1 attaches none (as the kernel); resolving an
     * address does */
    struct sockaddr_storage ss;
    mkaddr(&ss, AF_INET, "127.0.0.1", 0);
    CHECK_EQ(rdma_bind_addr(id, (struct sockaddr *)&ss), 0);
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), -1);
    mkaddr(&ss, AF_INET, "127.0.0.1", 9);
    CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, 100), 0);
    struct rdma_cm_event *rev = get_ev(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (rev)
        ack(rev);
    CHECK(id->verbs != NULL);
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), 0);
    CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX);
    CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
    CHECK(qa.qp_access_flags & IBV_ACCESS_REMOTE_READ);
    CHECK_EQ(qa.port_num, 1);
    qa.qp_state = IBV_QPS_RTR;
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), 0);
    CHECK_EQ(mask, 0);
    qa.qp_state = IBV_QPS_RTS;
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), 0);
    CHECK_EQ(mask, 0);
    qa.qp_state = IBV_QPS_SQD;
    CHECK_EQ(rdma_init_qp_attr(id, &qa, &mask), -1);
    CHECK_EQ(rdma_notify(id, IBV_EVENT_COMM_EST), 0);

    /* QP on a bound id: default PD, CQs with channels, QP in INIT */
    struct ibv_qp_init_attr ia;
    qp_caps(&ia);
    CHECK_EQ(rdma_create_qp(id, NULL, &ia), 0);
    if (id->qp) {
        struct ibv_qp_attr got;
        struct ibv_qp_init_attr gi;
        CHECK_EQ(ibv_query_qp(id->qp, &got, IBV_QP_STATE, &gi), 0);
        CHECK_EQ(got.qp_state, IBV_QPS_INIT);
        CHECK_EQ(rdma_create_qp(id, NULL, &ia), -1); /* one QP per id */
        rdma_destroy_qp(id);
        CHECK(id->qp == NULL && id->send_cq == NULL && id->recv_cq == NULL);
        CHECK(id->send_cq_channel == NULL && id->recv_cq_channel == NULL);
    }
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    CHECK_EQ(rdma_create_srq(id, NULL, &sa), 0);
    CHECK(id->srq != NULL);
    rdma_destroy_srq(id);
    CHECK(id->srq == NULL);

    /* no multicast or ECE over iWARP: clean failures */
    CHECK_EQ(rdma_join_multicast(id, (struct sockaddr *)&ss, NULL), -1);
    CHECK_EQ(errno, ENOSYS);
    CHECK_EQ(rdma_leave_multicast(id, (struct sockaddr *)&ss), -1);
    CHECK_EQ(errno, ENOSYS);
    struct rdma_cm_join_mc_attr_ex mc;
    memset(&mc, 0, sizeof(mc));
    CHECK_EQ(rdma_join_multicast_ex(id, &mc, NULL), -1);
    CHECK_EQ(errno, ENOSYS);
    struct ibv_ece ece;
    memset(&ece, 0, sizeof(ece));
    CHECK_EQ(rdma_set_local_ece(id, &ece), -1);
    CHECK_EQ(errno, EOPNOTSUPP);
    CHECK_EQ(rdma_get_remote_ece(id, &ece), -1);
    CHECK_EQ(errno, EOPNOTSUPP);
    CHECK_EQ(rdma_reject_ece(id, NULL, 0), -1);
    CHECK_EQ(errno, EOPNOTSUPP);
    /* rsockets work (test_rsocket moves data and maps buffers); a mapping
     * needs a connection */
    int rsfd = rsocket(AF_INET, SOCK_STREAM, 0);
    CHECK(rsfd >= 0);
    CHECK_EQ(riomap(rsfd, &ece, sizeof(ece), PROT_WRITE, 0, -1), (off_t)-1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rclose(rsfd), 0);
    CHECK_EQ(rpoll(NULL, 0, 0), 0);

    CHECK_STR(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
    CHECK_STR(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    CHECK_STR(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT");

    /* devices: the contexts ids use */
    int n = 0;
    struct ibv_context **list = rdma_get_devices(&n);
    CHECK(list != NULL && n >= 1);
    bool found = false;
    for (int i = 0; list && i < n; i++) {
        CHECK(list[i] != NULL);
        if (list[i] == id->verbs)
            found = true;
    }
    CHECK(list && list[n] == NULL);
    CHECK(found);
    rdma_free_devices(list);

    CHECK_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch);
}

static void test_migrate(void)
{
    struct rdma_event_channel *ch1 = rdma_create_event_channel();
    struct rdma_event_channel *ch2 = rdma_create_event_channel();
    struct rdma_cm_id *id = NULL;
    CHECK_EQ(rdma_create_id(ch1, &id, NULL, RDMA_PS_TCP), 0);
    if (!id)
        return;
    struct sockaddr_storage dst;
    mkaddr(&dst, AF_INET, "127.0.0.1", 9);
    CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 100), 0);
    CHECK(readable(ch1->fd, 0));
    CHECK_EQ(rdma_migrate_id(id, ch2), 0);
    CHECK(id->channel == ch2);
    CHECK(!readable(ch1->fd, 0)); /* the event moved along */
    struct rdma_cm_event *e = get_ev(ch2, RDMA_CM_EVENT_ADDR_RESOLVED);
    if (e)
        CHECK(e->id == id);
    ack(e);
    /* to synchronous mode: calls now block and leave id->event */
    CHECK_EQ(rdma_migrate_id(id, NULL), 0);
    CHECK(id->channel != ch2 && id->channel != NULL);
    CHECK_EQ(rdma_resolve_route(id, 100), 0);
    CHECK(id->event != NULL);
    if (id->event)
        CHECK_EQ(id->event->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
    CHECK(!readable(ch2->fd, 0));
    CHECK_EQ(rdma_migrate_id(id, NULL), -1); /* synchronous already */
    CHECK_EQ(rdma_destroy_id(id), 0);
    rdma_destroy_event_channel(ch1);
    rdma_destroy_event_channel(ch2);
}

/* ------------------------------------------------------------------------
 * Synchronous endpoints (rdma_create_ep / rdma_get_request / rdma_verbs.h)
 * ---------------------------------------------------------------------- */
struct ep_server {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint16_t port; /* 0 until listening; 0xFFFF on failure */
    bool reject;   /* reject instead of accepting */
    int failures;
};

static const char REJECT_PD[] = "sync-reject";

static void ep_publish(struct ep_server *s, uint16_t port)
{
    pthread_mutex_lock(&s->lock);
    s->port = port;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

#define EP_FAIL(s, what)                                                                           \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: ep server: %s: %s\n", __FILE__, __LINE__, what, strerror(errno));  \
        (s)->failures++;                                                                           \
    } while (0)

static void *ep_server_main(void *arg)
{
    struct ep_server *s = arg;
    struct rdma_addrinfo hints, *res = NULL;
    struct rdma_cm_id *lid = NULL, *id = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
    hints.ai_port_space = RDMA_PS_TCP;
    if (rdma_getaddrinfo("127.0.0.1", "0", &hints, &res)) {
        EP_FAIL(s, "rdma_getaddrinfo");
        ep_publish(s, 0xFFFF);
        return NULL;
    }
    struct ibv_qp_init_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 1;
    int rc = rdma_create_ep(&lid, res, NULL, &attr);
    rdma_freeaddrinfo(res);
    if (rc || rdma_listen(lid, 0)) {
        EP_FAIL(s, "rdma_create_ep/rdma_listen");
        ep_publish(s, 0xFFFF);
        return NULL;
    }
    ep_publish(s, ntohs(rdma_get_src_port(lid)));
    if (rdma_get_request(lid, &id)) {
        EP_FAIL(s, "rdma_get_request");
        goto out;
    }
    if (!id->qp || !id->event || id->event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        EP_FAIL(s, "request id without QP or event");
        goto out;
    }
    if (s->reject) {
        if (rdma_reject(id, REJECT_PD, sizeof(REJECT_PD)))
            EP_FAIL(s, "rdma_reject");
        goto out;
    }
    char buf[64];
    struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
    struct ibv_wc wc;
    if (!mr || rdma_post_recv(id, NULL, buf, sizeof(buf), mr) || rdma_accept(id, NULL)) {
        EP_FAIL(s, "reg/post_recv/accept");
        goto out;
    }
    if (rdma_get_recv_comp(id, &wc) != 1 || wc.status != IBV_WC_SUCCESS ||
        strcmp(buf, "sync-ping") != 0) {
        EP_FAIL(s, "receiving the ping");
        goto out;
    }
    strcpy(buf, "sync-pong");
    if (rdma_post_send(id, NULL, buf, 10, mr, 0) || rdma_get_send_comp(id, &wc) != 1 ||
        wc.status != IBV_WC_SUCCESS) {
        EP_FAIL(s, "sending the pong");
        goto out;
    }
    if (rdma_disconnect(id)) /* blocks until DISCONNECTED */
        EP_FAIL(s, "rdma_disconnect");
    rdma_dereg_mr(mr);
out:
    if (id)
        rdma_destroy_ep(id);
    rdma_destroy_ep(lid);
    return NULL;
}

static void test_ep_sync(bool reject)
{
    struct ep_server s = {.reject = reject};
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.cond, NULL);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, ep_server_main, &s), 0);
    pthread_mutex_lock(&s.lock);
    while (!s.port)
        pthread_cond_wait(&s.cond, &s.lock);
    pthread_mutex_unlock(&s.lock);
    CHECK(s.port != 0xFFFF);
    if (s.port == 0xFFFF) {
        pthread_join(t, NULL);
        return;
    }
    char service[8];
    snprintf(service, sizeof(service), "%u", s.port);
    struct rdma_addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_port_space = RDMA_PS_TCP;
    CHECK_EQ(rdma_getaddrinfo("127.0.0.1", service, &hints, &res), 0);
    struct ibv_qp_init_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
    attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
    attr.sq_sig_all = 1;
    struct rdma_cm_id *id = NULL;
    CHECK_EQ(rdma_create_ep(&id, res, NULL, &attr), 0);
    rdma_freeaddrinfo(res);
    if (!id) {
        pthread_join(t, NULL);
        return;
    }
    CHECK(id->qp != NULL && id->send_cq && id->recv_cq && id->pd);
    CHECK(attr.send_cq == id->send_cq); /* the QP's attributes come back */
    char buf[64];
    struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));
    CHECK(mr != NULL);
    CHECK_EQ(rdma_post_recv(id, NULL, buf + 32, 32, mr), 0);
    if (reject) {
        errno = 0;
        CHECK_EQ(rdma_connect(id, NULL), -1);
        CHECK_EQ(errno, ECONNREFUSED);
        CHECK(id->event != NULL);
        if (id->event) {
            CHECK_EQ(id->event->event, RDMA_CM_EVENT_REJECTED);
            CHECK_EQ(id->event->param.conn.private_data_len, sizeof(REJECT_PD));
            if (id->event->param.conn.private_data)
                CHECK_STR(id->event->param.conn.private_data, REJECT_PD);
        }
    } else {
        CHECK_EQ(rdma_connect(id, NULL), 0);
        CHECK(id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED);
        strcpy(buf, "sync-ping");
        struct ibv_wc wc;
        CHECK_EQ(rdma_post_send(id, NULL, buf, 10, mr, 0), 0);
        CHECK_EQ(rdma_get_send_comp(id, &wc), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(rdma_get_recv_comp(id, &wc), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_STR(buf + 32, "sync-pong");
        CHECK_EQ(rdma_disconnect(id), 0);
        CHECK(id->event && id->event->event == RDMA_CM_EVENT_DISCONNECTED);
    }
    if (mr)
        rdma_dereg_mr(mr);
    rdma_destroy_ep(id);
    pthread_join(t, NULL);
    CHECK_EQ(s.failures, 0);
}

/* Synchronous failure: connecting to nobody. */
static void test_sync_unreachable(void)
{
    struct rdma_cm_id *id = NULL;
    CHECK_EQ(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
    if (!id)
        return;
    CHECK(id->channel != NULL); /* a private channel, as rdma-core */
    struct sockaddr_storage dst;
    mkaddr(&dst, AF_INET, "127.0.0.1", dead_port(AF_INET, "127.0.0.1"));
    CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
    CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK_EQ(rdma_resolve_route(id, 2000), 0);
    struct ibv_qp_init_attr qa;
    qp_caps(&qa);
    CHECK_EQ(rdma_create_qp(id, NULL, &qa), 0);
    errno = 0;
    CHECK_EQ(rdma_connect(id, NULL), -1);
    CHECK_EQ(errno, ECONNREFUSED);
    CHECK(id->event && id->event->event == RDMA_CM_EVENT_UNREACHABLE);
    rdma_destroy_qp(id);
    CHECK_EQ(rdma_destroy_id(id), 0);
}

/* rdma_resolve_addr with a source address (libfabric's verbs provider and
 * rdma_create_ep pass the local one): with port 0 the address is the
 * connection's and no port is reserved before rdma_connect, so that no
 * bind() port search runs (docs/ENGINE.md "Source ports"); a port asked
 * for is reserved at once; an address that is not ours fails as a bind
 * would. */
static void test_resolve_src(void)
{
    struct rdma_event_channel *lch = rdma_create_event_channel(),
                              *cch = rdma_create_event_channel();
    struct rdma_cm_id *lid = NULL, *c = NULL, *d = NULL, *f = NULL;
    CHECK(lch && cch);
    if (!lch || !cch)
        return;
    CHECK_EQ(rdma_create_id(lch, &lid, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(cch, &c, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(cch, &d, NULL, RDMA_PS_TCP), 0);
    CHECK_EQ(rdma_create_id(cch, &f, NULL, RDMA_PS_TCP), 0);
    if (!lid || !c || !d || !f)
        return;
    struct sockaddr_storage ss, src, dst;
    mkaddr(&ss, AF_INET, "0.0.0.0", 0);
    CHECK_EQ(rdma_bind_addr(lid, (struct sockaddr *)&ss), 0);
    CHECK_EQ(rdma_listen(lid, 8), 0);
    uint16_t port = ntohs(rdma_get_src_port(lid));
    mkaddr(&dst, AF_INET, "127.0.0.1", port);

    /* port 0: the address, no port until the connect */
    mkaddr(&src, AF_INET, "127.0.0.3", 0);
    CHECK_EQ(rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000), 0);
    ack(get_ev(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
    CHECK_EQ(rdma_get_src_port(c), 0);
    const struct sockaddr_in *la = (const struct sockaddr_in *)rdma_get_local_addr(c);
    CHECK_EQ(la->sin_family, AF_INET);
    CHECK_EQ(ntohl(la->sin_addr.s_addr), 0x7f000003u);
    CHECK_EQ(rdma_resolve_route(c, 2000), 0);
    ack(get_ev(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
    struct ibv_qp_init_attr qa;
    qp_caps(&qa);
    CHECK_EQ(rdma_create_qp(c, NULL, &qa), 0);
    CHECK_EQ(rdma_connect(c, NULL), 0);
    uint16_t cport = ntohs(rdma_get_src_port(c));
    CHECK(cport != 0); /* connect() picked it */
    struct rdma_cm_event *e = get_ev(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
    struct rdma_cm_id *s = e ? e->id : NULL;
    if (s) {
        const struct sockaddr_in *pa = (const struct sockaddr_in *)rdma_get_peer_addr(s);
        CHECK_EQ(ntohl(pa->sin_addr.s_addr), 0x7f000003u); /* from the address asked for */
        CHECK_EQ(ntohs(rdma_get_dst_port(s)), cport);
    }
    ack(e);
    if (s) {
        qp_caps(&qa);
        CHECK_EQ(rdma_create_qp(s, NULL, &qa), 0);
        CHECK_EQ(rdma_accept(s, NULL), 0);
        ack(get_ev(lch, RDMA_CM_EVENT_ESTABLISHED));
    }
    ack(get_ev(cch, RDMA_CM_EVENT_ESTABLISHED));

    /* a port asked for: reserved by the resolution, as a bind */
    uint16_t want = dead_port(AF_INET, "127.0.0.3");
    mkaddr(&src, AF_INET, "127.0.0.3", want);
    CHECK_EQ(rdma_resolve_addr(d, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000), 0);
    ack(get_ev(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
    CHECK_EQ(ntohs(rdma_get_src_port(d)), want);
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    errno = 0;
    CHECK_EQ(bind(probe, (struct sockaddr *)&src, sizeof(struct sockaddr_in)), -1);
    CHECK_EQ(errno, EADDRINUSE);
    close(probe);

    /* not our address: refused at once, as a bind */
    mkaddr(&src, AF_INET, "192.0.2.1", 0); /* TEST-NET-1 */
    errno = 0;
    CHECK_EQ(rdma_resolve_addr(f, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000), -1);
    CHECK_EQ(errno, EADDRNOTAVAIL);

    CHECK_EQ(rdma_disconnect(c), 0);
    ack(get_ev(cch, RDMA_CM_EVENT_DISCONNECTED));
    if (s) {
        ack(get_ev(lch, RDMA_CM_EVENT_DISCONNECTED));
        rdma_destroy_qp(s);
        CHECK_EQ(rdma_destroy_id(s), 0);
    }
    rdma_destroy_qp(c);
    CHECK_EQ(rdma_destroy_id(c), 0);
    CHECK_EQ(rdma_destroy_id(d), 0);
    CHECK_EQ(rdma_destroy_id(f), 0);
    CHECK_EQ(rdma_destroy_id(lid), 0);
    rdma_destroy_event_channel(cch);
    rdma_destroy_event_channel(lch);
}

/* An IPv4 client reaches an IPv6 wildcard listener (dual stack): the new
 * id's addresses are plain IPv4. */
static void test_dual_stack(void)
{
    struct pair p;
    if (listen_on(&p, AF_INET6, "::1", true)) {
        p.fam = AF_INET;
        p.ip = "127.0.0.1";
        if (client_connect(&p, p.port, 2, 3) && server_accept(&p, 3, 2) && established(&p))
            data_exchange(&p);
    }
    pair_down(&p);
}

/* A server that publishes its port before rdma_listen (as qperf does):
 * the refused first attempt is repeated and the connection succeeds.
 * take_port: something else takes the refused attempt's port before the
 * retry (connect() may choose a port other sockets share, which bind()
 * then refuses; a listener here): the retry takes a new port, and the
 * client's id reports it once ESTABLISHED. */
static void test_listen_late(bool take_port)
{
    struct pair p;
    memset(&p, 0, sizeof(p));
    p.fam = AF_INET;
    p.ip = "127.0.0.1";
    /* the retry reuses the refused attempt's port unless something holds
     * it (take_port, or another program on this host meanwhile: tests run
     * in parallel); the id learns a new one at ESTABLISHED (checked below) */
    p.port_moves = true;
    p.lch = rdma_create_event_channel();
    CHECK_EQ(rdma_create_id(p.lch, &p.lid, &p, RDMA_PS_TCP), 0);
    struct sockaddr_storage ss;
    mkaddr(&ss, AF_INET, "0.0.0.0", 0);
    CHECK_EQ(rdma_bind_addr(p.lid, (struct sockaddr *)&ss), 0);
    p.port = ntohs(rdma_get_src_port(p.lid));
    if (client_connect(&p, p.port, 2, 3)) {
        uint16_t first = rdma_get_src_port(p.c.id);
        int squat = -1;
        usleep(5000); /* the first SYN meets no listener */
        if (take_port) {
            struct sockaddr_storage a;
            mkaddr(&a, AF_INET, "127.0.0.1", ntohs(first));
            squat = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            CHECK(squat >= 0);
            int brc = -1; /* a retry's socket may hold the port for a moment */
            for (int i = 0; i < 200 && brc != 0; i++)
                if ((brc = bind(squat, (struct sockaddr *)&a, sizeof(struct sockaddr_in))) != 0) {
                    CHECK_EQ(errno, EADDRINUSE);
                    usleep(1000);
                }
            if (brc == 0) {
                CHECK_EQ(listen(squat, 1), 0);
            } else {
                /* another program (a test running beside this one) took
                 * the port meanwhile: the retry cannot have it either, but
                 * whether that holds until then is not ours to know */
                printf("  listen_late: port %u held by someone else; not squatted\n", ntohs(first));
                close(squat);
                squat = -1;
            }
        }
        CHECK_EQ(rdma_listen(p.lid, 8), 0);
        if (server_accept(&p, 3, 2) && established(&p)) {
            if (take_port && squat >= 0)
                CHECK(p.seen_port != first);
            else if (!take_port && p.seen_port != first)
                printf("  listen_late: port %u taken meanwhile by someone else; the retry "
                       "used %u\n",
                       ntohs(first), ntohs(p.seen_port));
            CHECK_EQ(rdma_get_src_port(p.c.id), p.seen_port);
            data_exchange(&p);
        }
        if (squat >= 0)
            close(squat);
    }
    pair_down(&p);
}

/* A blocking rdma_get_cm_event and signals: EINTR from a handler without
 * SA_RESTART, a restarted wait with it (as a read() on rdma-core's fd). */
static atomic_int got_sig; /* lock-free: async-signal-safe */
static void on_sig(int s)
{
    (void)s;
    atomic_store(&got_sig, 1);
}

/* Wait up to EV_MS for *flag to become 1 (signals may be delivered late,
 * e.g. under ThreadSanitizer). */
static bool wait_flag(atomic_int *flag)
{
    uint64_t end = eng_now_ms() + EV_MS;
    while (!atomic_load(flag) && eng_now_ms() < end)
        usleep(1000);
    return atomic_load(flag) != 0;
}

struct waiter {
    struct rdma_event_channel *ch;
    atomic_int done;
    int rc, err;
    struct rdma_cm_event *e;
};

static void *waiter_main(void *arg)
{
    struct waiter *w = arg;
    errno = 0;
    w->rc = rdma_get_cm_event(w->ch, &w->e);
    w->err = errno;
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_signals(void)
{
    for (int restart = 0; restart < 2; restart++) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sig;
        sa.sa_flags = restart ? SA_RESTART : 0;
        sigaction(SIGUSR1, &sa, &old);
        struct waiter w = {.ch = rdma_create_event_channel()};
        struct rdma_cm_id *id = NULL;
        CHECK_EQ(rdma_create_id(w.ch, &id, NULL, RDMA_PS_TCP), 0);
        pthread_t t;
        atomic_store(&got_sig, 0);
        CHECK_EQ(pthread_create(&t, NULL, waiter_main, &w), 0);
        usleep(QUIET_MS * 1000);
        pthread_kill(t, SIGUSR1);
        if (!restart) {
            CHECK(wait_flag(&got_sig));
            CHECK(wait_flag(&w.done));
            CHECK_EQ(w.rc, -1);
            CHECK_EQ(w.err, EINTR);
        } else {
            usleep(QUIET_MS * 1000);
            CHECK_EQ(atomic_load(&w.done), 0); /* still waiting */
            struct sockaddr_storage dst;
            mkaddr(&dst, AF_INET, "127.0.0.1", 9);
            CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 100), 0);
        }
        pthread_join(t, NULL);
        if (restart) {
            CHECK(atomic_load(&got_sig)); /* the handler ran, the wait went on */
            CHECK_EQ(w.rc, 0);
            if (w.rc == 0) {
                CHECK_EQ(w.e->event, RDMA_CM_EVENT_ADDR_RESOLVED);
                ack(w.e);
            }
        }
        CHECK(!readable(w.ch->fd, 0));
        CHECK_EQ(rdma_destroy_id(id), 0);
        rdma_destroy_event_channel(w.ch);
        sigaction(SIGUSR1, &old, NULL);
    }
}

/* A channel destroyed while (or before) a thread waits on it, as rping's
 * event thread does at exit: the waiter stays blocked, as on rdma-core's
 * closed fd, until a signal (EINTR); a non-blocking channel says EBADF.
 * (The memory is kept a while by the library, so the late call is safe.) */
static void test_destroyed_channel(void)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sig;
    sigaction(SIGUSR1, &sa, &old);
    struct waiter w = {.ch = rdma_create_event_channel()};
    pthread_t t;
    atomic_store(&got_sig, 0);
    CHECK_EQ(pthread_create(&t, NULL, waiter_main, &w), 0);
    usleep(QUIET_MS * 1000);
    rdma_destroy_event_channel(w.ch);
    usleep(QUIET_MS * 1000);
    CHECK_EQ(atomic_load(&w.done), 0); /* still blocked, no EBADF */
    pthread_kill(t, SIGUSR1);
    CHECK(wait_flag(&w.done));
    pthread_join(t, NULL);
    CHECK_EQ(w.rc, -1);
    CHECK_EQ(w.err, EINTR);
    sigaction(SIGUSR1, &old, NULL);

    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK_EQ(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
    rdma_destroy_event_channel(ch);
    struct rdma_cm_event *e = NULL;
    CHECK_EQ(rdma_get_cm_event(ch, &e), -1);
    CHECK_EQ(errno, EBADF);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("uiwarp's threads take their malloc arenas before the first call returns\n");
    test_thread_arenas();
    bool v6 = have_ipv6_loopback();
    printf("basics\n");
    test_channel_and_id_basics();
    printf("bind\n");
    test_bind();
    printf("getaddrinfo\n");
    test_getaddrinfo();
    printf("options, QP attributes, unsupported calls, devices\n");
    test_afonly();
    test_options_and_misc();
    printf("migrate\n");
    test_migrate();
    printf("signals during a blocking rdma_get_cm_event\n");
    test_signals();
    printf("a channel destroyed under a waiting thread\n");
    test_destroyed_channel();
    printf("connect 127.0.0.1 (address listener), data\n");
    test_connect(AF_INET, "127.0.0.1", false, false);
    printf("DISCONNECTED after the completions before it\n");
    test_disconnect_after_completions();
    test_disconnect_polled_first();
    printf("connect 127.0.0.1 (wildcard listener), data\n");
    test_connect(AF_INET, "127.0.0.1", true, false);
    printf("reject 127.0.0.1\n");
    test_reject(AF_INET, "127.0.0.1");
    printf("unreachable 127.0.0.1\n");
    test_unreachable(AF_INET, "127.0.0.1");
    printf("external QPs (qp_num, no QP on the ids), created in INIT\n");
    test_external_qp();
    printf("refused connect, QP destroyed while it is tried again\n");
    test_refused_qp_destroyed();
    printf("listener destroyed with a request pending\n");
    test_listener_gone();
    printf("listener that listens only after the client connected\n");
    test_listen_late(false);
    test_listen_late(true);
    printf("synchronous endpoints\n");
    test_ep_sync(false);
    printf("synchronous endpoints, rejected\n");
    test_ep_sync(true);
    printf("synchronous unreachable\n");
    test_sync_unreachable();
    printf("rdma_resolve_addr with a source address\n");
    test_resolve_src();
    if (v6) {
        printf("connect ::1 (address listener), data\n");
        test_connect(AF_INET6, "::1", false, false);
        printf("connect ::1 (wildcard listener), data\n");
        test_connect(AF_INET6, "::1", true, false);
        printf("reject ::1\n");
        test_reject(AF_INET6, "::1");
        printf("unreachable ::1\n");
        test_unreachable(AF_INET6, "::1");
        printf("IPv4 client, IPv6 wildcard listener\n");
        test_dual_stack();
    } else {
        printf("no ::1 on this host: IPv6 cases skipped\n");
    }
    printf("RDMA Write as the first message (passive side answers)\n");
    test_connect(AF_INET, "127.0.0.1", false, true);
    TEST_MAIN_END();
}
