/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp against RNIC-like peers (rnic_peer.h: the irdma and cxgb4
 * personalities of ../shared/notes/rnic-mpa.md), as initiator and as
 * responder, on 127.0.0.1 with the peer's MSS at 1460 (TCP_MAXSEG).
 * uiwarp's side is a program on its librdmacm.so.1 / libibverbs.so.1 with
 * the default settings; the cases that need a UIWARP_* variable (each a
 * documented one) run in a child process with that variable alone.
 *
 * Every case prints a line "RESULT personality role case PASS|FAIL|KNOWN"
 * (the table of docs/PEERS.md §11).
 */
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include "rnic_peer.h"

#define EV_MS     5000
#define DATA_LEN  (256u * 1024)
#define NRECV     4
#define RECV_SLOT (128u * 1024)
#define BUF_LEN   (DATA_LEN + NRECV * RECV_SLOT)
#define IRD_ORD   8
#define RREAD_OFF (128u * 1024) /* the peer's Reads: above what the other operations use */

static const uint32_t sizes[] = {1, 1000, 4099, 70001}; /* the last: 49 FPDUs at MSS 1448 */
_Static_assert(1 + 1000 + 4099 + 70001 + 4 * 63 <= DATA_LEN - RREAD_OFF, "peer Read regions");

/* ------------------------------------------------------------------------
 * Cases and results
 * ---------------------------------------------------------------------- */

static char prog[256];
static const char *case_pers, *case_role, *case_name;
static unsigned long case_failed0;
static const char *case_known; /* non-NULL: a KNOWN failure, with its reason */

static void case_begin(const char *pers, const char *role, const char *name)
{
    case_pers = pers;
    case_role = role;
    case_name = name;
    case_known = NULL;
    case_failed0 = tu_failed;
    printf("-- %s / %s / %s\n", pers, role, name);
    fflush(stdout);
}

static void case_end(void)
{
    bool failed = tu_failed != case_failed0;
    if (failed && case_known) {
        tu_failed = case_failed0; /* reported, not counted */
        printf("RESULT %s %s %s KNOWN (%s)\n", case_pers, case_role, case_name, case_known);
    } else {
        printf("RESULT %s %s %s %s\n", case_pers, case_role, case_name, failed ? "FAIL" : "PASS");
    }
    fflush(stdout);
}

/* ------------------------------------------------------------------------
 * uiwarp's side: librdmacm and verbs, as an application uses them
 * ---------------------------------------------------------------------- */

struct uw {
    struct rdma_event_channel *ch;
    struct rdma_cm_id *lid, *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *buf;
    /* the last event */
    enum rdma_cm_event_type ev;
    int status;
    uint8_t pd_got[256];
    uint8_t pd_got_len;
    bool held;           /* an event uw_event(…, req) set aside */
    uint8_t req_pd[256]; /* the CONNECT_REQUEST's private data */
    uint8_t req_pd_len;
};

static bool uw_init(struct uw *u)
{
    memset(u, 0, sizeof(*u));
    u->ch = rdma_create_event_channel();
    u->buf = aligned_alloc(4096, BUF_LEN);
    if (!u->ch || !u->buf)
        return false;
    memset(u->buf, 0, BUF_LEN);
    fcntl(u->ch->fd, F_SETFL, fcntl(u->ch->fd, F_GETFL) | O_NONBLOCK);
    return true;
}

/* The next rdma_cm event within ms: true and u->ev/status set (a
 * CONNECT_REQUEST's id in *req). */
static bool uw_event(struct uw *u, int ms, struct rdma_cm_id **req)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    if (u->held && !req) {
        u->held = false;
        return true;
    }
    for (;;) {
        struct rdma_cm_event *e;
        if (!u->held && rdma_get_cm_event(u->ch, &e) == 0) {
            u->ev = e->event;
            u->status = e->status;
            u->pd_got_len = e->param.conn.private_data_len;
            if (u->pd_got_len && e->param.conn.private_data)
                memcpy(u->pd_got, e->param.conn.private_data, u->pd_got_len);
            bool other = req && e->event != RDMA_CM_EVENT_CONNECT_REQUEST;
            if (req)
                *req = other ? NULL : e->id;
            if (req && !other) {
                u->req_pd_len = u->pd_got_len;
                memcpy(u->req_pd, u->pd_got, u->pd_got_len);
            }
            rdma_ack_cm_event(e);
            if (other) { /* kept for the next uw_event without req */
                u->held = true;
                return false;
            }
            return true;
        }
        int64_t left = (int64_t)(end - eng_now_ms());
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = u->ch->fd, .events = POLLIN};
        poll(&p, 1, (int)left);
    }
}

static bool uw_expect(struct uw *u, enum rdma_cm_event_type want, int ms)
{
    if (!uw_event(u, ms, NULL)) {
        fprintf(stderr, "no rdma_cm event (wanted %s)\n", rdma_event_str(want));
        return false;
    }
    if (u->ev != want)
        fprintf(stderr, "rdma_cm event %s status %d, wanted %s\n", rdma_event_str(u->ev), u->status,
                rdma_event_str(want));
    return u->ev == want;
}

static int uw_post_recv(struct uw *u, unsigned slot)
{
    return eng_post_recv(u->id->qp, u->buf + DATA_LEN + slot * RECV_SLOT, RECV_SLOT, u->mr->lkey,
                         100 + slot);
}

/* PD, CQ, QP on id, the buffer registered, NRECV receives posted. */
static bool uw_qp(struct uw *u, struct rdma_cm_id *id)
{
    struct ibv_qp_init_attr a;
    u->id = id;
    u->pd = ibv_alloc_pd(id->verbs);
    u->cq = u->pd ? ibv_create_cq(id->verbs, 256, NULL, NULL, 0) : NULL;
    if (!u->cq)
        return false;
    memset(&a, 0, sizeof(a));
    a.send_cq = a.recv_cq = u->cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 64;
    a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, u->pd, &a))
        return false;
    u->mr = ibv_reg_mr(u->pd, u->buf, BUF_LEN, ENG_ACCESS_ALL);
    if (!u->mr)
        return false;
    for (unsigned i = 0; i < NRECV; i++)
        if (uw_post_recv(u, i))
            return false;
    return true;
}

static struct rdma_conn_param uw_param(const uint8_t *pd, uint8_t pd_len)
{
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof(cp));
    cp.initiator_depth = IRD_ORD;
    cp.responder_resources = IRD_ORD;
    cp.private_data = pd;
    cp.private_data_len = pd_len;
    return cp;
}

/* rdma_connect to 127.0.0.1:port (returns once the Request is under way). */
static bool uw_connect(struct uw *u, uint16_t port, const uint8_t *pd, uint8_t pd_len)
{
    struct sockaddr_in a = eng_loop4(port);
    struct rdma_cm_id *id;
    if (rdma_create_id(u->ch, &id, NULL, RDMA_PS_TCP))
        return false;
    u->id = id;
    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ||
        !uw_expect(u, RDMA_CM_EVENT_ADDR_RESOLVED, EV_MS) || rdma_resolve_route(id, 2000) ||
        !uw_expect(u, RDMA_CM_EVENT_ROUTE_RESOLVED, EV_MS) || !uw_qp(u, id))
        return false;
    struct rdma_conn_param cp = uw_param(pd, pd_len);
    return rdma_connect(id, &cp) == 0;
}

static bool uw_listen(struct uw *u, uint16_t *port)
{
    struct sockaddr_in a = eng_loop4(0);
    if (rdma_create_id(u->ch, &u->lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(u->lid, (struct sockaddr *)&a) || rdma_listen(u->lid, 8))
        return false;
    *port = ntohs(rdma_get_src_port(u->lid));
    return *port != 0;
}

static bool uw_accept(struct uw *u, struct rdma_cm_id *req, const uint8_t *pd, uint8_t pd_len)
{
    if (!uw_qp(u, req))
        return false;
    struct rdma_conn_param cp = uw_param(pd, pd_len);
    return rdma_accept(req, &cp) == 0;
}

/* One completion within EV_MS. */
static bool uw_wc(struct uw *u, struct ibv_wc *wc)
{
    return eng_poll_one(u->cq, wc, EV_MS) == 1;
}

static void uw_free(struct uw *u)
{
    if (u->id && u->id->qp)
        rdma_destroy_qp(u->id);
    if (u->mr)
        ibv_dereg_mr(u->mr);
    if (u->cq)
        ibv_destroy_cq(u->cq);
    if (u->pd)
        ibv_dealloc_pd(u->pd);
    if (u->id)
        rdma_destroy_id(u->id);
    if (u->lid)
        rdma_destroy_id(u->lid);
    if (u->ch)
        rdma_destroy_event_channel(u->ch);
    free(u->buf);
    memset(u, 0, sizeof(*u));
}

/* Orderly end: our disconnect, the peer reads to the end and closes, we
 * see DISCONNECTED. */
static void uw_down(struct uw *u, struct rnic *r)
{
    if (u->id && r->up) {
        uiw_hdr h;
        CHECK_EQ(rdma_disconnect(u->id), 0);
        int rc = rnic_serve(r, UIW_OP_TERMINATE, 3000, &h);
        CHECK_EQ(rc, -1); /* EOF, no Terminate */
        rnic_close(r);
        CHECK(uw_expect(u, RDMA_CM_EVENT_DISCONNECTED, EV_MS));
    }
    rnic_close(r);
    uw_free(u);
}

/* ------------------------------------------------------------------------
 * Connection set-up in both roles
 * ---------------------------------------------------------------------- */

/* uiwarp initiator, peer responder (listener lfd): up to `tries` TCP
 * connections accepted (uiwarp's revision 1 retry). 0 or the last rnic_accept
 * result. */
static int up_initiator(struct uw *u, struct rnic *r, int lfd, const uint8_t *pd, uint8_t pd_len,
                        const uint8_t *rpd, uint16_t rpd_len, int tries)
{
    uint16_t port = 0;
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int rc = -1;
    getsockname(lfd, (struct sockaddr *)&a, &al);
    port = ntohs(a.sin_port);
    if (!uw_connect(u, port, pd, pd_len))
        return -100;
    for (int i = 0; i < tries; i++) {
        rc = rnic_accept(r, lfd, EV_MS, rpd, rpd_len);
        if (rc != RNIC_RST)
            break;
    }
    return rc;
}

/* uiwarp responder (listening), peer initiator: the peer's Request, our
 * accept, its Reply handling and RTR; RNIC_RETRIED handled (a second
 * CONNECT_REQUEST is awaited). 0 when the peer is up. */
static int up_responder(struct uw *u, struct rnic *r, const uint8_t *pd, uint8_t pd_len,
                        const uint8_t *apd, uint8_t apd_len)
{
    uint16_t port = 0;
    if (!uw_listen(u, &port))
        return -100;
    if (rnic_connect_start(r, port, pd, pd_len) < 0)
        return -101;
    uint64_t end = eng_now_ms() + EV_MS;
    while (eng_now_ms() < end) {
        struct rdma_cm_id *req = NULL;
        if (uw_event(u, 0, &req) && req) {
            if (u->id) /* a second request: the first id is done */
                return -102;
            if (!uw_accept(u, req, apd, apd_len))
                return -103;
        }
        int rc = rnic_connect_step(r, port, pd, pd_len, 10);
        if (rc == RNIC_AGAIN || rc == RNIC_RETRIED)
            continue;
        return rc;
    }
    return -ETIMEDOUT;
}

/* ------------------------------------------------------------------------
 * Traffic, verified both ways
 * ---------------------------------------------------------------------- */

static void check_wc(struct uw *u, uint64_t wr_id, enum ibv_wc_opcode op)
{
    struct ibv_wc wc;
    CHECK(uw_wc(u, &wc));
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.wr_id, wr_id);
    CHECK_EQ(wc.opcode, op);
}

/* A receive completion of len bytes; returns its slot's data (re-posted). */
static const uint8_t *recv_wc(struct uw *u, uint32_t len)
{
    struct ibv_wc wc;
    if (!uw_wc(u, &wc)) {
        CHECK(!"receive completion");
        return NULL;
    }
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    CHECK_EQ(wc.opcode, IBV_WC_RECV);
    CHECK_EQ(wc.byte_len, len);
    if (wc.wr_id < 100 || wc.wr_id >= 100 + NRECV)
        return NULL;
    unsigned slot = (unsigned)(wc.wr_id - 100);
    CHECK_EQ(uw_post_recv(u, slot), 0);
    return u->buf + DATA_LEN + slot * RECV_SLOT;
}

static void traffic(struct uw *u, struct rnic *r)
{
    struct ibv_qp *qp = u->id->qp;
    uint8_t *tmp = malloc(DATA_LEN);
    uiw_hdr h;
    uint32_t seed = 1;
    size_t rread_off = 0;

    unsigned long failed0 = tu_failed;
    /* one size after another, stopping at the first failure */
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]) && tu_failed == failed0 && r->up; i++) {
        uint32_t n = sizes[i];
        const uint8_t *got;

        /* uiwarp Send -> peer */
        eng_fill(u->buf, n, ++seed);
        CHECK_EQ(eng_post(qp, IBV_WR_SEND, u->buf, n, u->mr->lkey, 0, 0, 1, true), 0);
        CHECK_EQ(rnic_serve(r, -1, EV_MS, &h), 1);
        CHECK_EQ(r->raw.pay_len, n);
        CHECK_EQ(eng_diff(r->raw.pay, r->raw.pay_len, seed), -1);
        check_wc(u, 1, IBV_WC_SEND);

        /* peer Send -> uiwarp */
        eng_fill(tmp, n, ++seed);
        CHECK_EQ(rnic_send(r, tmp, n), 0);
        got = recv_wc(u, n);
        CHECK(got && eng_diff(got, n, seed) == -1);

        /* uiwarp RDMA Write -> the peer's region */
        eng_fill(u->buf, n, ++seed);
        memset(r->mem, 0, n + 16);
        CHECK_EQ(eng_post(qp, IBV_WR_RDMA_WRITE, u->buf, n, u->mr->lkey, RNIC_TO_BASE + 8,
                          RNIC_STAG, 2, true),
                 0);
        CHECK_EQ(rnic_serve(r, UIW_OP_WRITE, EV_MS, &h), 1);
        CHECK_EQ(eng_diff(r->mem + 8, n, seed), -1);
        CHECK(dp_all(r->mem, 8, 0) && dp_all(r->mem + 8 + n, 8, 0));
        check_wc(u, 2, IBV_WC_RDMA_WRITE);

        /* uiwarp RDMA Read <- the peer's region (Read Responses) */
        eng_fill(r->mem + 4, n, ++seed);
        memset(u->buf, 0, n + 16);
        CHECK_EQ(eng_post(qp, IBV_WR_RDMA_READ, u->buf, n, u->mr->lkey, RNIC_TO_BASE + 4, RNIC_STAG,
                          3, true),
                 0);
        CHECK_EQ(rnic_serve(r, UIW_OP_READ_REQ, EV_MS, &h), 1);
        CHECK_EQ(h.u.rreq.read_size, n);
        check_wc(u, 3, IBV_WC_RDMA_READ);
        CHECK_EQ(eng_diff(u->buf, n, seed), -1);
        CHECK(dp_all(u->buf + n, 16, 0));

        /* peer RDMA Write -> uiwarp's buffer, then a Send to say so */
        eng_fill(tmp, n, ++seed);
        memset(u->buf, 0, n + 16);
        CHECK_EQ(rnic_write(r, u->mr->rkey, (uintptr_t)(u->buf + 16), tmp, n), 0);
        CHECK_EQ(rnic_send(r, "W", 1), 0);
        got = recv_wc(u, 1);
        CHECK(got && got[0] == 'W');
        CHECK_EQ(eng_diff(u->buf + 16, n, seed), -1);
        CHECK(dp_all(u->buf, 16, 0));

        /* peer RDMA Read <- uiwarp's buffer (uiwarp's Read Responses),
         * from a region of its own each time: nothing on uiwarp's side
         * completes when its progress thread has sent the Read Response,
         * so the program never writes that memory again (for TSan) */
        uint8_t *src = u->buf + RREAD_OFF + rread_off;
        rread_off += (n + 63) & ~63u;
        eng_fill(src, n, ++seed);
        memset(r->mem, 0, n + 16);
        CHECK_EQ(rnic_read(r, u->mr->rkey, (uintptr_t)src, n, 0), 0);
        CHECK_EQ(rnic_serve(r, UIW_OP_READ_RESP, EV_MS, &h), 1);
        CHECK_EQ(eng_diff(r->mem, n, seed), -1);
        CHECK(dp_all(r->mem + n, 16, 0));
    }
    CHECK(r->up);
    free(tmp);
}

/* The peer's rules held on everything uiwarp sent. */
static void rules_held(struct rnic *r)
{
    printf("  %s saw %u FPDUs, largest %u bytes, MSS %u; violations: fpdu>mss %u, stag0 %u, "
           "rreq0-src0 %u, rtr %u, trailing %u, seq %u, term-form %u\n",
           r->p->name, r->fpdus, r->max_fpdu, r->mss, r->v.fpdu_mss, r->v.stag0, r->v.rreq0_src0,
           r->v.rtr, r->v.trailing, r->v.seq, r->v.term_form);
    CHECK(r->fpdus > 0);
    CHECK(r->max_fpdu <= r->mss);
    CHECK(r->mss <= RNIC_MSS);
    CHECK_EQ(r->v.fpdu_mss, 0);
    CHECK_EQ(r->v.stag0, 0);
    CHECK_EQ(r->v.rreq0_src0, 0);
    CHECK_EQ(r->v.rtr, 0);
    CHECK_EQ(r->v.trailing, 0);
    CHECK_EQ(r->v.seq, 0);
    CHECK_EQ(r->v.term_form, 0);
    CHECK(!r->term_sent && !r->term_got);
}

static void pd_pattern(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 7);
}

/* ------------------------------------------------------------------------
 * The cases
 * ---------------------------------------------------------------------- */

/* uiwarp initiator (defaults) against a responder personality: revision 2,
 * CRC, P2P with the RTR the personality picks, private data both ways,
 * then the traffic and the rules. */
static void c_initiator(const struct rnic_pers *p)
{
    struct uw u;
    struct rnic *r = rnic_new(p, false);
    uint16_t port = 0;
    int lfd = rnic_listen(p, &port);
    uint8_t pd[40], rpd[24];
    pd_pattern(pd, sizeof(pd), 3);
    pd_pattern(rpd, sizeof(rpd), 9);

    case_begin(p->name, "uiwarp-initiator", "connect");
    CHECK(uw_init(&u));
    CHECK_EQ(up_initiator(&u, r, lfd, pd, sizeof(pd), rpd, sizeof(rpd), 1), 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(u.pd_got_len, sizeof(rpd));
    CHECK_MEM(u.pd_got, rpd, sizeof(rpd));
    CHECK_EQ(r->peer.ulp_pd_len, sizeof(pd));
    CHECK_MEM(r->peer.ulp_pd, pd, sizeof(pd));
    CHECK_EQ(r->rev, 2);
    CHECK(r->peer.enhanced && r->peer.p2p);
    /* uiwarp offers Write and Read (UIWARP_RTR default) */
    CHECK_EQ(r->peer.rtr, UIW_RTR_WRITE | UIW_RTR_READ);
    CHECK_EQ(r->resets, 0);
    /* irdma picks Read (§1.4); cxgb4 negotiates Write, replies Read (§2.3) */
    CHECK_EQ(r->rtr, p->kind == RNIC_IRDMA ? UIW_RTR_READ : UIW_RTR_WRITE);
    CHECK(r->rtr_seen);
    printf("  revision %u, CRC on, RTR %s received as the first FPDU\n", r->rev,
           r->rtr == UIW_RTR_READ ? "read" : "write");
    case_end();

    case_begin(p->name, "uiwarp-initiator", "send-write-read");
    traffic(&u, r);
    rules_held(r);
    case_end();

    case_begin(p->name, "uiwarp-initiator", "disconnect");
    uw_down(&u, r);
    case_end();
    close(lfd);
    rnic_free(r);
}

/* uiwarp responder (defaults) against an initiator personality. */
static void c_responder(const struct rnic_pers *p)
{
    struct uw u;
    struct rnic *r = rnic_new(p, true);
    uint8_t pd[36], apd[20];
    pd_pattern(pd, sizeof(pd), 5);
    pd_pattern(apd, sizeof(apd), 11);

    case_begin(p->name, "uiwarp-responder", "connect");
    CHECK(uw_init(&u));
    int rc = up_responder(&u, r, pd, sizeof(pd), apd, sizeof(apd));
    CHECK_EQ(rc, 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(r->peer.ulp_pd_len, sizeof(apd));
    CHECK_MEM(r->peer.ulp_pd, apd, sizeof(apd));
    CHECK_EQ(u.req_pd_len, sizeof(pd));
    CHECK_MEM(u.req_pd, pd, sizeof(pd));
    CHECK_EQ(r->rev, 2);
    CHECK(r->peer.enhanced && r->peer.p2p);
    /* irdma offered Write and Read, uiwarp picks Write; cxgb4 offered Read */
    CHECK_EQ(r->peer.rtr, p->kind == RNIC_IRDMA ? UIW_RTR_WRITE : UIW_RTR_READ);
    CHECK_EQ(r->conns, 1);
    printf("  revision %u, CRC on, RTR %s sent as %s\n", r->rev,
           r->rtr == UIW_RTR_READ ? "read" : "write",
           r->rtr == UIW_RTR_WRITE ? "a zero-length Write to STag 0 (irdma, §1.5)"
                                   : "a zero-length Read Request");
    case_end();

    case_begin(p->name, "uiwarp-responder", "send-write-read");
    traffic(&u, r);
    rules_held(r);
    case_end();

    case_begin(p->name, "uiwarp-responder", "disconnect");
    uw_down(&u, r);
    case_end();
    rnic_free(r);
}

/* Connect with default settings in the given role; true when up. */
static bool connect_role(struct uw *u, struct rnic **rp, const struct rnic_pers *p,
                         bool uw_initiates, int *lfd)
{
    *lfd = -1;
    CHECK(uw_init(u));
    if (uw_initiates) {
        uint16_t port = 0;
        *rp = rnic_new(p, false);
        *lfd = rnic_listen(p, &port);
        if (up_initiator(u, *rp, *lfd, NULL, 0, NULL, 0, 1) != 0)
            return false;
    } else {
        *rp = rnic_new(p, true);
        if (up_responder(u, *rp, NULL, 0, NULL, 0) != 0)
            return false;
    }
    return uw_expect(u, RDMA_CM_EVENT_ESTABLISHED, EV_MS);
}

/* Everything of a case gone: uiwarp's side, the peer, its listener. */
static void conn_free(struct uw *u, struct rnic *r, int lfd)
{
    rnic_free(r); /* the peer's socket first: uiwarp's QP then goes at once */
    uw_free(u);
    if (lfd >= 0)
        close(lfd);
}

/* After a Terminate either way: uiwarp's QP in ERR, its receives flushed,
 * the async event `ev`, DISCONNECTED. */
static void uw_after_term(struct uw *u, int ev)
{
    struct ibv_wc wc;
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    CHECK_EQ(eng_async_wait(u->id->verbs, u->id->qp, EV_MS), ev);
    for (unsigned i = 0; i < NRECV; i++) {
        CHECK(uw_wc(u, &wc));
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        CHECK(wc.wr_id >= 100 && wc.wr_id < 100 + NRECV);
    }
    CHECK_EQ(ibv_query_qp(u->id->qp, &qa, IBV_QP_STATE, &qi), 0);
    CHECK_EQ(qa.qp_state, IBV_QPS_ERR);
    /* a Send posted now is flushed as well */
    int rc = eng_post(u->id->qp, IBV_WR_SEND, u->buf, 8, u->mr->lkey, 0, 0, 9, true);
    if (rc == 0) {
        CHECK(uw_wc(u, &wc));
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    }
    CHECK(uw_expect(u, RDMA_CM_EVENT_DISCONNECTED, EV_MS));
}

/* The peer terminates with an MPA-layer cause as RNICs code it: layer 2,
 * error type 3 (notes §1.6, §2.6), CRC error (0x23 0x02). */
static void c_term_from_peer(const struct rnic_pers *p, bool uw_initiates)
{
    struct uw u;
    struct rnic *r;
    int lfd;
    case_begin(p->name, uw_initiates ? "uiwarp-initiator" : "uiwarp-responder",
               "terminate-from-peer-0x23");
    if (connect_role(&u, &r, p, uw_initiates, &lfd)) {
        CHECK_EQ(rnic_send_term(r, RNIC_TERM_MPA(UIW_MPA_EC_CRC), NULL, 0), 0);
        uw_after_term(&u, IBV_EVENT_QP_FATAL);
        /* uiwarp answers nothing and closes (RFC 5040 §5.4) */
        uiw_hdr h;
        CHECK_EQ(rnic_serve(r, UIW_OP_TERMINATE, 3000, &h), -1);
    } else {
        CHECK(!"connected");
    }
    conn_free(&u, r, lfd);
    case_end();
}

/* The peer breaks a rule uiwarp checks: an RDMA Write to an STag it never
 * had (RFC 5041 §7.2: DDP / tagged / invalid STag, M and D with the
 * header) or a Read beyond the region (RFC 5040 §7.4.1: RDMAP / remote
 * protection / base or bounds, with the Read Request's header, R). The
 * peer decodes the Terminate; irdma also checks its form (notes §1.6). */
static void c_term_to_peer(const struct rnic_pers *p, bool uw_initiates, bool read)
{
    struct uw u;
    struct rnic *r;
    int lfd;
    uiw_hdr h;
    case_begin(p->name, uw_initiates ? "uiwarp-initiator" : "uiwarp-responder",
               read ? "terminate-to-peer-read-bounds" : "terminate-to-peer-write-stag");
    if (connect_role(&u, &r, p, uw_initiates, &lfd)) {
        uint32_t bad = u.mr->rkey ^ 0x00a5a500u;
        uint8_t pay[64];
        memset(pay, 0x5a, sizeof(pay));
        if (read)
            CHECK_EQ(rnic_read(r, u.mr->rkey, (uintptr_t)u.buf + BUF_LEN - 8, 64, 0), 0);
        else
            CHECK_EQ(rnic_write(r, bad, (uintptr_t)u.buf, pay, sizeof(pay)), 0);
        CHECK_EQ(rnic_serve(r, UIW_OP_TERMINATE, EV_MS, &h), 1);
        const uiw_term *t = &h.u.term;
        printf("  Terminate received by %s: %s / %s / %s, M%d D%d R%d, MSN %u\n", p->name,
               uiw_term_layer_name(t->cause.layer),
               uiw_term_etype_name(t->cause.layer, t->cause.etype),
               uiw_term_ecode_name(t->cause.layer, t->cause.etype, t->cause.ecode), t->hdr_mpa,
               t->hdr_ddp, t->hdr_rdma, h.msn);
        CHECK(!t->siw_layout);
        CHECK(rnic_term_form_ok(&h));
        CHECK_EQ(r->v.term_form, 0);
        if (read) {
            CHECK_EQ(t->cause.layer, UIW_LAYER_RDMAP);
            CHECK_EQ(t->cause.etype, UIW_RDMAP_ET_REMOTE_PROT);
            CHECK_EQ(t->cause.ecode, UIW_RDMAP_EC_BASE_BOUNDS);
            CHECK(t->hdr_mpa && t->hdr_ddp && t->hdr_rdma);
            uint32_t qn, msn;
            CHECK(uiw_term_untagged_qn_msn(t, &qn, &msn));
            CHECK_EQ(qn, UIW_QN_READ_REQ);
            CHECK_EQ(msn, r->msn[UIW_QN_READ_REQ] - 1);
        } else {
            CHECK_EQ(t->cause.layer, UIW_LAYER_DDP);
            CHECK_EQ(t->cause.etype, UIW_DDP_ET_TAGGED);
            CHECK_EQ(t->cause.ecode, UIW_DDP_EC_T_INVALID_STAG);
            CHECK(t->hdr_mpa && t->hdr_ddp && !t->hdr_rdma);
            /* the attached DDP header is the Write's: STag at bytes 4..7 */
            CHECK_EQ(t->ddp_hdr_len, 2 + UIW_HDR_TAGGED_LEN);
            CHECK_EQ((uint32_t)t->ddp_hdr[4] << 24 | (uint32_t)t->ddp_hdr[5] << 16 |
                         (uint32_t)t->ddp_hdr[6] << 8 | t->ddp_hdr[7],
                     bad);
        }
        uw_after_term(&u, IBV_EVENT_QP_ACCESS_ERR);
        CHECK(dp_all(u.buf, 64, 0));
    } else {
        CHECK(!"connected");
    }
    conn_free(&u, r, lfd);
    case_end();
}

/* cxgb4 refuses a tagged segment with STag 0, even zero-length (notes
 * §2.5, §4 item 10): a ULP's zero-length Write with rkey 0 ends the
 * connection with a Terminate, the QP goes to ERR. */
static void c_cxgb4_stag0(bool uw_initiates)
{
    struct uw u;
    struct rnic *r;
    int lfd;
    uiw_hdr h;
    case_begin("cxgb4", uw_initiates ? "uiwarp-initiator" : "uiwarp-responder",
               "stag0-write-refused");
    if (connect_role(&u, &r, &RNIC_P_CXGB4, uw_initiates, &lfd)) {
        CHECK_EQ(eng_post(u.id->qp, IBV_WR_RDMA_WRITE, u.buf, 0, u.mr->lkey, 0, 0, 5, true), 0);
        CHECK_EQ(rnic_serve(r, UIW_OP_WRITE, EV_MS, &h), -2);
        CHECK_EQ(r->v.stag0, 1);
        CHECK(r->term_sent);
        CHECK_EQ(r->sent_cause.layer, UIW_LAYER_DDP);
        CHECK_EQ(r->sent_cause.etype, UIW_DDP_ET_TAGGED);
        /* the Write itself completed before the Terminate came */
        struct ibv_wc wc;
        CHECK(uw_wc(&u, &wc));
        CHECK_EQ(wc.wr_id, 5);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        uw_after_term(&u, IBV_EVENT_QP_FATAL);
    } else {
        CHECK(!"connected");
    }
    conn_free(&u, r, lfd);
    case_end();
}

/* Private data limits of cxgb4 (PD_Length ≤ 256 with the RFC 6581 words,
 * notes §2.3): 251 bytes pass at revision 2; 253 (257 with the words) make
 * it abort, and uiwarp's revision 1 retry (253 bytes, no words) passes. */
static void c_cxgb4_pd(uint8_t len)
{
    struct uw u;
    struct rnic *r = rnic_new(&RNIC_P_CXGB4, false);
    uint16_t port = 0;
    int lfd = rnic_listen(&RNIC_P_CXGB4, &port);
    uint8_t pd[255];
    char name[64];
    snprintf(name, sizeof(name), "private-data-%u", len);
    pd_pattern(pd, len, 1);
    case_begin("cxgb4", "uiwarp-initiator", name);
    CHECK(uw_init(&u));
    CHECK_EQ(up_initiator(&u, r, lfd, pd, len, NULL, 0, 2), 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(r->peer.ulp_pd_len, len);
    CHECK_MEM(r->peer.ulp_pd, pd, len);
    bool over = len + UIW_MPA_RFC6581_LEN > 256;
    CHECK_EQ(r->resets, over ? 1 : 0);
    CHECK_EQ(r->conns, over ? 2 : 1);
    CHECK_EQ(r->rev, over ? 1 : 2);
    printf("  %u bytes: %s\n", len,
           over ? "revision 2 Request reset (PD_Length 257 > 256), revision 1 retry accepted"
                : "accepted at revision 2");
    /* one Send each way proves the stream */
    eng_fill(u.buf, 100, 77);
    CHECK_EQ(eng_post(u.id->qp, IBV_WR_SEND, u.buf, 100, u.mr->lkey, 0, 0, 1, true), 0);
    uiw_hdr h;
    CHECK_EQ(rnic_serve(r, -1, EV_MS, &h), 1);
    CHECK_EQ(eng_diff(r->raw.pay, r->raw.pay_len, 77), -1);
    check_wc(&u, 1, IBV_WC_SEND);
    uw_down(&u, r);
    close(lfd);
    rnic_free(r);
    case_end();
}

/* The same limit on the Reply (notes §2.4): a uiwarp ULP accepting with
 * 253 bytes of private data (257 with the words) makes cxgb4's initiator
 * abort; uiwarp, waiting for the RTR, reports the connection as failed.
 * No uiwarp setting avoids it: the ULP must keep its private data ≤ 251
 * bytes (notes §4 item 8: at 252, PD_Length 256 passes the check but
 * cxgb4's u8 plen truncates it to 0, which the model does not reproduce);
 * 251 passes. */
static void c_cxgb4_pd_accept(uint8_t len)
{
    struct uw u;
    struct rnic *r = rnic_new(&RNIC_P_CXGB4, true);
    uint8_t apd[255];
    char name[64];
    bool over = len + UIW_MPA_RFC6581_LEN > 256;
    snprintf(name, sizeof(name), "accept-private-data-%u", len);
    pd_pattern(apd, len, 4);
    case_begin("cxgb4", "uiwarp-responder", name);
    CHECK(uw_init(&u));
    int rc = up_responder(&u, r, NULL, 0, apd, len);
    if (over) {
        CHECK_EQ(rc, RNIC_RST);
        CHECK_EQ(r->resets, 1);
        CHECK(uw_event(&u, EV_MS, NULL));
        CHECK_EQ(u.ev, RDMA_CM_EVENT_CONNECT_ERROR);
        printf("  %u bytes: the Reply's PD_Length 257 > 256, cxgb4 aborts; uiwarp reports %s "
               "(%d)\n",
               len, rdma_event_str(u.ev), u.status);
    } else {
        CHECK_EQ(rc, 0);
        CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
        CHECK_EQ(r->peer.ulp_pd_len, len);
        CHECK_MEM(r->peer.ulp_pd, apd, len);
        printf("  %u bytes: accepted\n", len);
    }
    if (!over)
        uw_down(&u, r);
    conn_free(&u, r, -1);
    case_end();
}

/* uiwarp initiator (defaults) against cxgb4 with mpa_rev=1: the revision 2
 * Request is reset (notes §2.3), uiwarp tries revision 1 once
 * (UIWARP_MPA_REV1_FALLBACK default, docs/ENGINE.md), client-server. */
static void c_rev1_fallback(void)
{
    struct uw u;
    const struct rnic_pers *p = &RNIC_P_CXGB4_REV1;
    struct rnic *r = rnic_new(p, false);
    uint16_t port = 0;
    int lfd = rnic_listen(p, &port);
    uint8_t pd[16];
    pd_pattern(pd, sizeof(pd), 2);
    case_begin(p->name, "uiwarp-initiator", "rev2-reset-rev1-retry");
    CHECK(uw_init(&u));
    CHECK_EQ(up_initiator(&u, r, lfd, pd, sizeof(pd), NULL, 0, 2), 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(r->resets, 1);
    CHECK_EQ(r->conns, 2);
    CHECK_EQ(r->frames_rev[2], 1);
    CHECK_EQ(r->frames_rev[1], 1);
    CHECK_EQ(r->rev, 1);
    CHECK(!r->p2p);
    CHECK_EQ(r->peer.ulp_pd_len, sizeof(pd));
    CHECK_MEM(r->peer.ulp_pd, pd, sizeof(pd));
    case_end();
    case_begin(p->name, "uiwarp-initiator", "send-write-read");
    traffic(&u, r);
    rules_held(r);
    uw_down(&u, r);
    case_end();
    close(lfd);
    rnic_free(r);
}

/* A revision 1 RNIC initiator (cxgb4 mpa_rev=1) against uiwarp's default
 * responder: answered at revision 1 (docs/ENGINE.md), the RNIC's Read RTR
 * (sent in revision 1 too, notes §2.4) served. */
static void c_rev1_initiator(const struct rnic_pers *p, const char *name)
{
    struct uw u;
    struct rnic *r = rnic_new(p, true);
    case_begin(p->name, "uiwarp-responder", name);
    CHECK(uw_init(&u));
    CHECK_EQ(up_responder(&u, r, NULL, 0, NULL, 0), 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(r->rev, 1);
    CHECK_EQ(r->rtr, UIW_RTR_READ); /* sent, and its Read Response came */
    printf("  %u connection(s), %u reset by uiwarp; revision 1, Read RTR answered\n", r->conns,
           r->conns - 1);
    traffic(&u, r);
    rules_held(r);
    uw_down(&u, r);
    rnic_free(r);
    case_end();
}

/* ------------------------------------------------------------------------
 * Cases with a documented UIWARP_* variable, each in a child process
 * ---------------------------------------------------------------------- */

/* UIWARP_MPA_REV=1 responder: an RNIC's revision 2 Request is reset, the
 * RNIC retries at revision 1 (irdma §1.3, cxgb4 §2.7), which passes. */
static void k_rev1_responder(void)
{
    c_rev1_initiator(&RNIC_P_IRDMA, "UIWARP_MPA_REV=1:rev2-reset-rnic-retries-rev1");
    c_rev1_initiator(&RNIC_P_CXGB4, "UIWARP_MPA_REV=1:rev2-reset-rnic-retries-rev1");
}

/* UIWARP_P2P=0 initiator against irdma: the revision 2 Request without A
 * is reset (notes §1.3), uiwarp falls back to revision 1 (no A there), and
 * irdma, which adopts the initiator's revision, accepts it. */
static void k_irdma_no_p2p(void)
{
    struct uw u;
    struct rnic *r = rnic_new(&RNIC_P_IRDMA, false);
    uint16_t port = 0;
    int lfd = rnic_listen(r->p, &port);
    case_begin("irdma", "uiwarp-initiator", "UIWARP_P2P=0:no-A-reset-then-rev1");
    CHECK(uw_init(&u));
    CHECK_EQ(up_initiator(&u, r, lfd, NULL, 0, NULL, 0, 2), 0);
    CHECK(uw_expect(&u, RDMA_CM_EVENT_ESTABLISHED, EV_MS));
    CHECK_EQ(r->resets, 1);
    CHECK_EQ(r->frames_rev[2], 1);
    CHECK_EQ(r->rev, 1);
    traffic(&u, r);
    rules_held(r);
    uw_down(&u, r);
    close(lfd);
    rnic_free(r);
    case_end();
}

/* UIWARP_P2P=0 UIWARP_MPA_REV1_FALLBACK=0: irdma resets every Request
 * without A; the application sees the connection fail (after librdmacm's
 * tries within UIWARP_RDMACM_RETRY_MS, default 1 s). */
static void k_irdma_no_p2p_nofallback(void)
{
    struct uw u;
    struct rnic *r = rnic_new(&RNIC_P_IRDMA, false);
    uint16_t port = 0;
    int lfd = rnic_listen(r->p, &port);
    case_begin("irdma", "uiwarp-initiator", "UIWARP_P2P=0+FALLBACK=0:no-A-reset-reported");
    CHECK(uw_init(&u));
    CHECK(uw_connect(&u, port, NULL, 0));
    bool ended = false;
    uint64_t end = eng_now_ms() + 4000;
    while (!ended && eng_now_ms() < end) {
        int rc = rnic_accept(r, lfd, 200, NULL, 0);
        CHECK(rc == RNIC_RST || rc == -ETIMEDOUT);
        if (uw_event(&u, 0, NULL)) {
            ended = true;
            CHECK_EQ(u.ev, RDMA_CM_EVENT_CONNECT_ERROR);
            CHECK_EQ(u.status, -ECONNRESET);
        }
    }
    CHECK(ended);
    CHECK(r->resets >= 1);
    CHECK_EQ(r->frames_rev[1], 0); /* never revision 1 */
    printf("  %u Requests, all revision 2 without A, all reset\n", r->resets);
    uw_free(&u);
    close(lfd);
    rnic_free(r);
    case_end();
}

/* UIWARP_MAX_FPDU=8192 above irdma's MSS: irdma's "bad fpdu len" (notes
 * §1.7), a Terminate 0x23 / 0x02, uiwarp's QP in ERR. The rule itself,
 * proven to fire. */
static void k_irdma_fpdu_mss(void)
{
    struct uw u;
    struct rnic *r;
    int lfd;
    uiw_hdr h;
    case_begin("irdma", "uiwarp-initiator", "UIWARP_MAX_FPDU=8192:fpdu-over-mss-terminated");
    if (connect_role(&u, &r, &RNIC_P_IRDMA, true, &lfd)) {
        eng_fill(u.buf, 20000, 5);
        CHECK_EQ(eng_post(u.id->qp, IBV_WR_SEND, u.buf, 20000, u.mr->lkey, 0, 0, 1, true), 0);
        CHECK_EQ(rnic_serve(r, -1, EV_MS, &h), -2);
        CHECK(r->v.fpdu_mss >= 1);
        CHECK(r->max_fpdu > r->mss);
        CHECK(r->term_sent);
        CHECK_EQ(r->sent_cause.layer, UIW_LAYER_LLP);
        CHECK_EQ(r->sent_cause.etype, UIW_LLP_ET_RNIC);
        CHECK_EQ(r->sent_cause.ecode, UIW_MPA_EC_CRC);
        printf("  FPDUs up to %u bytes over MSS %u: Terminate 0x23 0x02 sent\n", r->max_fpdu,
               r->mss);
        struct ibv_wc wc;
        CHECK(uw_wc(&u, &wc)); /* the Send: done locally, or flushed */
        CHECK_EQ(wc.wr_id, 1);
        uw_after_term(&u, IBV_EVENT_QP_FATAL);
    } else {
        CHECK(!"connected");
    }
    conn_free(&u, r, lfd);
    case_end();
}

/* UIWARP_RTR=write responder against cxgb4's initiator, which offers only
 * Read (notes §4 item 2): uiwarp names Write anyway, cxgb4 sends "RTR
 * mismatch" Terminate 0x23 / 0x07 (§2.4) and no RTR. */
static void k_cxgb4_rtr_mismatch(void)
{
    struct uw u;
    struct rnic *r = rnic_new(&RNIC_P_CXGB4, true);
    case_begin("cxgb4", "uiwarp-responder", "UIWARP_RTR=write:rtr-mismatch-terminate");
    CHECK(uw_init(&u));
    CHECK_EQ(up_responder(&u, r, NULL, 0, NULL, 0), -EPROTO);
    CHECK(r->term_sent);
    CHECK_EQ(r->sent_cause.ecode, UIW_MPA_EC_NO_MATCHING_RTR);
    CHECK_EQ(r->rtr, UIW_RTR_WRITE);
    /* uiwarp reports a failed connection, never ESTABLISHED (the
     * Terminate came in place of the RTR) */
    CHECK(uw_event(&u, EV_MS, NULL));
    CHECK_EQ(u.ev, RDMA_CM_EVENT_CONNECT_ERROR);
    CHECK_EQ(u.status, -EPROTO);
    printf("  uiwarp reported %s (status %d)\n", rdma_event_str(u.ev), u.status);
    rnic_close(r);
    uw_free(&u);
    rnic_free(r);
    case_end();
}

struct kcase {
    const char *name;
    void (*fn)(void);
    const char *env[2];
};
static const struct kcase kcases[] = {
    {"rev1_responder", k_rev1_responder, {"UIWARP_MPA_REV=1"}},
    {"irdma_no_p2p", k_irdma_no_p2p, {"UIWARP_P2P=0"}},
    {"irdma_no_p2p_nofallback",
     k_irdma_no_p2p_nofallback,
     {"UIWARP_P2P=0", "UIWARP_MPA_REV1_FALLBACK=0"}},
    {"irdma_fpdu_mss", k_irdma_fpdu_mss, {"UIWARP_MAX_FPDU=8192"}},
    {"cxgb4_rtr_mismatch", k_cxgb4_rtr_mismatch, {"UIWARP_RTR=write"}},
};

/* A variable of the environment the cases keep: not UIWARP_*, or the
 * debug level, or the reference folder. */
static bool env_kept(const char *e)
{
    return strncmp(e, "UIWARP_", 7) != 0 || strncmp(e, "UIWARP_DEBUG=", 13) == 0 ||
           strncmp(e, "UIWARP_SHARED=", 14) == 0;
}

static void run_kcase(const struct kcase *k)
{
    extern char **environ;
    char *envp[256];
    int n = 0;
    for (char **e = environ; *e && n < 250; e++)
        if (env_kept(*e))
            envp[n++] = *e; /* the case's variables only */
    for (int i = 0; i < 2 && k->env[i]; i++)
        envp[n++] = (char *)k->env[i];
    envp[n] = NULL;
    fflush(stdout);
    eng_run_case(prog, k->name, envp);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    snprintf(prog, sizeof(prog), "%s", argv[0]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--case") == 0) {
        for (size_t i = 0; i < sizeof(kcases) / sizeof(kcases[0]); i++)
            if (strcmp(kcases[i].name, argv[2]) == 0)
                kcases[i].fn();
        dprintf(3, "%lu %lu\n", tu_checks, tu_failed);
        return tu_failed ? 1 : 0;
    }
    uint64_t t0 = eng_now_ms();
    /* the defaults: no UIWARP_* variable but the debug level */
    for (bool again = true; again;) {
        extern char **environ;
        again = false;
        for (char **e = environ; *e; e++) {
            if (!env_kept(*e)) {
                char v[128];
                snprintf(v, sizeof(v), "%s", *e);
                if (strchr(v, '='))
                    *strchr(v, '=') = 0;
                unsetenv(v);
                again = true;
                break;
            }
        }
    }
    c_initiator(&RNIC_P_IRDMA);
    c_responder(&RNIC_P_IRDMA);
    c_initiator(&RNIC_P_CXGB4);
    c_responder(&RNIC_P_CXGB4);
    for (int role = 0; role < 2; role++) {
        c_term_from_peer(&RNIC_P_IRDMA, role == 0);
        c_term_from_peer(&RNIC_P_CXGB4, role == 0);
        c_term_to_peer(&RNIC_P_IRDMA, role == 0, false);
        c_term_to_peer(&RNIC_P_CXGB4, role == 0, true);
        c_cxgb4_stag0(role == 0);
    }
    c_cxgb4_pd(251);
    c_cxgb4_pd(253);
    c_cxgb4_pd_accept(251);
    c_cxgb4_pd_accept(253);
    c_rev1_fallback();
    c_rev1_initiator(&RNIC_P_CXGB4_REV1, "rev1-request-answered-rev1");
    for (size_t i = 0; i < sizeof(kcases) / sizeof(kcases[0]); i++)
        run_kcase(&kcases[i]);
    printf("%s: %.1f s\n", prog, (double)(eng_now_ms() - t0) / 1000.0);
    TEST_MAIN_END();
}
