/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Engine object layer through the verbs API: devices and context, queries,
 * async events, PD/CQ/QP/SRQ lifecycles, completion channels and
 * notification, the QP state machine, flush on ERR, CQ overrun, config.
 * Links uiwarp's libibverbs.so.1 (device names "uiw_*" prove it).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "testutil.h"

static struct ibv_context *ctx;
static struct ibv_device *lo_dev;

static bool fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void set_nonblock(int fd, bool on)
{
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* ------------------------------------------------------------------------ */

static void test_devices(void)
{
    int n = -1, n2 = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_device **list2 = ibv_get_device_list(&n2);

    CHECK(list != NULL);
    CHECK(n >= 1);
    CHECK_EQ(n, n2);
    for (int i = 0; list && i < n; i++) {
        struct ibv_device *d = list[i];
        const char *name = ibv_get_device_name(d);

        CHECK(strncmp(name, "uiw_", 4) == 0); /* ours, not rdma-core's */
        CHECK_EQ(d->node_type, IBV_NODE_RNIC);
        CHECK_EQ(d->transport_type, IBV_TRANSPORT_IWARP);
        CHECK(list2[i] == d); /* devices are stable */
        CHECK_EQ(ibv_get_device_index(d), (int)if_nametoindex(name + 4));
        if (strcmp(name, "uiw_lo") == 0)
            lo_dev = d;
    }
    CHECK(list && list[n] == NULL);
    CHECK(lo_dev != NULL);
    if (lo_dev) {
        /* loopback: GUID from the name bytes */
        uint64_t g = be64toh(ibv_get_device_guid(lo_dev));
        CHECK_EQ(g, 0x6c6f000000000000ull);
    }
    /* a device with a MAC: EUI-64 of it */
    for (int i = 0; list && i < n; i++) {
        if (list[i] == lo_dev)
            continue;
        struct ibv_context *c = ibv_open_device(list[i]);
        union ibv_gid gid;
        CHECK(c != NULL);
        if (!c)
            continue;
        CHECK_EQ(ibv_query_gid(c, 1, 0, &gid), 0);
        static const uint8_t zero[16];
        if (memcmp(gid.raw, zero, 6) != 0) {
            uint8_t b[8];
            uint64_t g = ibv_get_device_guid(list[i]);
            memcpy(b, &g, 8);
            CHECK_EQ(b[0], gid.raw[0] ^ 2);
            CHECK_EQ(b[1], gid.raw[1]);
            CHECK_EQ(b[2], gid.raw[2]);
            CHECK_EQ(b[3], 0xff);
            CHECK_EQ(b[4], 0xfe);
            CHECK_MEM(b + 5, gid.raw + 3, 3);
            CHECK_MEM(gid.raw + 6, zero, 10);
        }
        CHECK_EQ(ibv_close_device(c), 0);
    }
    ibv_free_device_list(list);
    ibv_free_device_list(list2);
}

static void test_context(void)
{
    struct verbs_context *v;

    ctx = ibv_open_device(lo_dev);
    CHECK(ctx != NULL);
    if (!ctx)
        exit(1);
    CHECK(ctx->device == lo_dev);
    CHECK(ctx->abi_compat == __VERBS_ABI_IS_EXTENDED);
    v = verbs_get_ctx(ctx);
    CHECK(v != NULL);
    CHECK_EQ(v->sz, sizeof(struct verbs_context));
    CHECK_EQ(ctx->num_comp_vectors, 1);
    /* every ibv_context_ops slot is set */
    {
        void *const *p = (void *const *)&ctx->ops;
        unsigned nslots = sizeof(ctx->ops) / sizeof(void *), null = 0;
        for (unsigned i = 0; i < nslots; i++)
            null += p[i] == NULL;
        CHECK_EQ(null, 0);
        CHECK_EQ(nslots, 32);
    }
    /* every verbs_context op is set (priv and the reserved word excepted) */
    {
        const char *base = (const char *)v;
        unsigned null = 0;
        for (size_t off = 0; off < offsetof(struct verbs_context, _ABI_placeholder3);
             off += sizeof(void *)) {
            void *p;
            if (off == offsetof(struct verbs_context, priv))
                continue;
            memcpy(&p, base + off, sizeof(p));
            null += p == NULL;
        }
        CHECK_EQ(null, 0);
        CHECK((void *)v->ABI_placeholder1 == (void *)v->ibv_create_flow);
        CHECK((void *)v->ABI_placeholder2 == (void *)v->ibv_destroy_flow);
    }
    /* unsupported extended verbs fail cleanly through the inline wrappers */
    {
        /* (ibv_create_cq_ex exists, verbs_ex.c; completion timestamps not) */
        struct ibv_cq_init_attr_ex cqa = {.cqe = 4,
                                          .wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
        errno = 0;
        CHECK(ibv_create_cq_ex(ctx, &cqa) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
        struct ibv_td_init_attr tda = {0};
        errno = 0;
        CHECK(ibv_alloc_td(ctx, &tda) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
        struct ibv_alloc_dm_attr dma = {.length = 64};
        errno = 0;
        CHECK(ibv_alloc_dm(ctx, &dma) == NULL);
        CHECK_EQ(errno, EOPNOTSUPP);
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        /* memory windows of both types (test_dp_mw uses them) */
        struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
        struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
        CHECK(mw1 && mw2);
        if (mw1 && mw2) {
            CHECK_EQ(mw1->type, IBV_MW_TYPE_1);
            CHECK_EQ(mw2->type, IBV_MW_TYPE_2);
            CHECK(mw1->pd == pd && mw1->context == ctx);
            CHECK(mw1->rkey != mw2->rkey && mw1->rkey > 1 && mw2->rkey > 1);
            CHECK_EQ(ibv_dealloc_pd(pd), EBUSY); /* the windows hold it */
            CHECK_EQ(ibv_dealloc_mw(mw1), 0);
            CHECK_EQ(ibv_dealloc_mw(mw2), 0);
        }
        CHECK_EQ(ibv_dealloc_pd(pd), 0);
    }
}

static void test_queries(void)
{
    struct ibv_device_attr a;
    struct ibv_device_attr_ex ax;
    struct ibv_port_attr pa;
    union ibv_gid gid;
    __be16 pkey;

    memset(&a, 0xAA, sizeof(a));
    CHECK_EQ(ibv_query_device(ctx, &a), 0);
    CHECK(a.node_guid == ibv_get_device_guid(lo_dev));
    CHECK_EQ(a.vendor_id, UIW_VENDOR_ID);
    CHECK_EQ(a.max_qp, UIW_MAX_QP);
    CHECK_EQ(a.max_qp_wr, UIW_MAX_QP_WR);
    CHECK_EQ(a.max_sge, UIW_MAX_SGE);
    CHECK_EQ(a.max_sge_rd, UIW_MAX_SGE_RD);
    CHECK_EQ(a.max_cq, UIW_MAX_CQ);
    CHECK_EQ(a.max_cqe, UIW_MAX_CQE);
    CHECK_EQ(a.max_mr, UIW_MAX_MR);
    CHECK_EQ(a.max_pd, UIW_MAX_PD);
    CHECK_EQ(a.max_qp_rd_atom, UIW_MAX_ORD);
    CHECK_EQ(a.max_qp_init_rd_atom, UIW_MAX_IRD);
    CHECK_EQ(a.atomic_cap, IBV_ATOMIC_HCA);
    CHECK_EQ(a.max_srq, UIW_MAX_SRQ);
    CHECK_EQ(a.max_srq_wr, UIW_MAX_SRQ_WR);
    CHECK_EQ(a.max_srq_sge, UIW_MAX_SGE);
    CHECK_EQ(a.max_mw, UIW_MAX_MR);
    CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
    CHECK(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
    CHECK_EQ(a.max_ah, 0);
    CHECK_EQ(a.max_pkeys, 1);
    CHECK_EQ(a.phys_port_cnt, 1);
    CHECK(a.device_cap_flags & IBV_DEVICE_CURR_QP_STATE_MOD);

    memset(&ax, 0xAA, sizeof(ax));
    CHECK_EQ(ibv_query_device_ex(ctx, NULL, &ax), 0);
    CHECK_MEM(&ax.orig_attr, &a, sizeof(a));
    CHECK_EQ(ax.comp_mask, 0);
    CHECK_EQ(ax.phys_port_cnt_ex, 1);
    struct ibv_query_device_ex_input in = {.comp_mask = 1};
    CHECK_EQ(ibv_query_device_ex(ctx, &in, &ax), EINVAL);

    memset(&pa, 0xAA, sizeof(pa));
    CHECK_EQ(ibv_query_port(ctx, 1, &pa), 0); /* inline: vctx->query_port */
    CHECK_EQ(pa.state, IBV_PORT_ACTIVE);      /* lo is up and running */
    CHECK_EQ(pa.active_mtu, IBV_MTU_4096);    /* lo: MTU 65536 */
    CHECK_EQ(pa.max_mtu, IBV_MTU_4096);
    CHECK_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
    CHECK_EQ(pa.gid_tbl_len, 1);
    CHECK_EQ(pa.pkey_tbl_len, 1);
    CHECK_EQ(pa.lid, 0);
    CHECK_EQ(pa.max_msg_sz, (uint32_t)UIW_MAX_MSG_SIZE);
    CHECK(pa.port_cap_flags & IBV_PORT_CM_SUP);
    CHECK_EQ(pa.phys_state, 5);
    CHECK_EQ(pa.port_cap_flags2, 0);
    CHECK_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
    CHECK_EQ(ibv_query_port(ctx, 0, &pa), EINVAL);
    /* the exported (compat) symbol: rdma-core's shorter struct */
    {
        struct ibv_port_attr pc;
        memset(&pc, 0xAA, sizeof(pc));
        CHECK_EQ((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)&pc), 0);
        CHECK_EQ(pc.state, IBV_PORT_ACTIVE);
        CHECK_EQ(pc.link_layer, IBV_LINK_LAYER_ETHERNET);
        CHECK_EQ(pc.port_cap_flags2, 0xAAAA); /* not written */
        memset(&pc, 0xAA, sizeof(pc));
        CHECK_EQ(ctx->ops._compat_query_port(ctx, 1, (struct _compat_ibv_port_attr *)&pc), 0);
        CHECK_EQ(pc.active_mtu, IBV_MTU_4096);
        struct ibv_device_attr da;
        CHECK_EQ(ctx->ops._compat_query_device(ctx, &da), 0);
        CHECK_EQ(da.max_qp, UIW_MAX_QP);
    }

    memset(&gid, 0xAA, sizeof(gid));
    CHECK_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
    static const uint8_t zero[16];
    CHECK_MEM(gid.raw, zero, 16); /* lo: MAC 00:00:00:00:00:00, rest zero */
    CHECK_EQ(ibv_query_gid(ctx, 1, 1, &gid), -1);
    CHECK_EQ(ibv_query_gid(ctx, 2, 0, &gid), -1);
    CHECK_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
    CHECK_EQ(be16toh(pkey), 0xffff);
    CHECK_EQ(ibv_query_pkey(ctx, 1, 1, &pkey), -1);
    CHECK_EQ(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)), 0);
}

/* ------------------------------------------------------------------------ */

struct getter {
    int ret;
    struct ibv_async_event ev;
    atomic_bool done;
};

static void *async_getter(void *arg)
{
    struct getter *g = arg;
    g->ret = ibv_get_async_event(ctx, &g->ev);
    atomic_store(&g->done, true);
    return NULL;
}

static void test_async(void)
{
    struct ibv_async_event ev;

    CHECK(!fd_readable(ctx->async_fd));
    set_nonblock(ctx->async_fd, true);
    errno = 0;
    CHECK_EQ(ibv_get_async_event(ctx, &ev), -1);
    CHECK_EQ(errno, EAGAIN);
    set_nonblock(ctx->async_fd, false);

    uiw_async_event(to_uctx(ctx), IBV_EVENT_PORT_ACTIVE, (void *)(uintptr_t)1);
    uiw_async_event(to_uctx(ctx), IBV_EVENT_DEVICE_FATAL, NULL);
    CHECK(fd_readable(ctx->async_fd));
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
    CHECK_EQ(ev.element.port_num, 1);
    ibv_ack_async_event(&ev);
    CHECK(fd_readable(ctx->async_fd));
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
    ibv_ack_async_event(&ev);
    CHECK(!fd_readable(ctx->async_fd));

    /* a blocked reader wakes up when an event is queued */
    struct getter g = {.ret = 99};
    pthread_t t;
    pthread_create(&t, NULL, async_getter, &g);
    eng_msleep(50);
    CHECK(!atomic_load(&g.done));
    uiw_async_event(to_uctx(ctx), IBV_EVENT_PORT_ERR, (void *)(uintptr_t)1);
    pthread_join(t, NULL);
    CHECK_EQ(g.ret, 0);
    CHECK_EQ(g.ev.event_type, IBV_EVENT_PORT_ERR);
    ibv_ack_async_event(&g.ev);
    CHECK(!fd_readable(ctx->async_fd));
}

/* ------------------------------------------------------------------------ */

/* An RC QP in RESET: 16 WRs and 2 SGEs each way. */
static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
                              struct ibv_srq *srq)
{
    struct ibv_qp_cap cap = {
        .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2};
    return eng_qp_create(pd, scq, rcq, srq, cap, false);
}

/* Give the QP a connected socket, as the CM does; returns the peer end. */
static int fake_connect(struct ibv_qp *ibqp)
{
    struct uiw_qp *qp = to_uqp(ibqp);
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return -1;
    pthread_mutex_lock(&qp->lock);
    qp->fd = sv[0];
    pthread_mutex_unlock(&qp->lock);
    return sv[1];
}

/* Take the socket away again (so that poll-driven progress finds none). */
static void fake_disconnect(struct ibv_qp *ibqp)
{
    struct uiw_qp *qp = to_uqp(ibqp);

    pthread_mutex_lock(&qp->lock);
    if (qp->fd >= 0)
        close(qp->fd);
    qp->fd = -1;
    pthread_mutex_unlock(&qp->lock);
}

static int modify_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
    struct ibv_qp_attr a = {.qp_state = s};
    return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static void test_pd_cq_lifecycle(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq;

    CHECK(pd && ch);
    CHECK(ch->context == ctx);
    CHECK(ch->fd >= 0);
    CHECK(fcntl(ch->fd, F_GETFD) & FD_CLOEXEC);
    CHECK(fcntl(ctx->async_fd, F_GETFD) & FD_CLOEXEC);

    errno = 0;
    CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, UIW_MAX_CQE + 1, NULL, NULL, 0) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 4, NULL, NULL, 1) == NULL); /* one comp vector */
    CHECK_EQ(errno, EINVAL);

    cq = ibv_create_cq(ctx, 8, (void *)0x1234, ch, 0);
    CHECK(cq != NULL);
    CHECK_EQ(cq->cqe, 8);
    CHECK(cq->channel == ch);
    CHECK(cq->cq_context == (void *)0x1234);
    CHECK_EQ(ch->refcnt, 1);
    CHECK_EQ(ibv_destroy_comp_channel(ch), EBUSY);

    /* a QP uses the CQ and the PD */
    struct ibv_qp *qp = make_qp(pd, cq, cq, NULL);
    CHECK(qp != NULL);
    CHECK_EQ(to_ucq(cq)->nqps, 1); /* same CQ twice: listed once */
    CHECK_EQ(ibv_destroy_cq(cq), EBUSY);
    CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
    CHECK_EQ(ibv_destroy_qp(qp), 0);
    CHECK_EQ(to_ucq(cq)->nqps, 0);

    /* resize */
    struct ibv_wc wc = {.wr_id = 1, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND};
    for (int i = 0; i < 6; i++) {
        wc.wr_id = 100 + i;
        uiw_cq_push(to_ucq(cq), &wc, false);
    }
    struct ibv_wc out[16];
    CHECK_EQ(ibv_poll_cq(cq, 2, out), 2); /* head moves: the ring wraps below */
    CHECK_EQ(out[0].wr_id, 100);
    CHECK_EQ(out[1].wr_id, 101);
    for (int i = 6; i < 10; i++) {
        wc.wr_id = 100 + i;
        uiw_cq_push(to_ucq(cq), &wc, false);
    }
    CHECK_EQ(ibv_resize_cq(cq, 7), EINVAL); /* 8 queued */
    CHECK_EQ(ibv_resize_cq(cq, 0), EINVAL);
    CHECK_EQ(ibv_resize_cq(cq, 20), 0);
    CHECK_EQ(cq->cqe, 20);
    CHECK_EQ(ibv_poll_cq(cq, 0, out), 0);
    CHECK_EQ(ibv_poll_cq(cq, 16, out), 8);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(out[i].wr_id, 102 + i);
    CHECK_EQ(ibv_poll_cq(cq, 16, out), 0);
    CHECK_EQ(ibv_resize_cq(cq, 3), 0);
    CHECK_EQ(cq->cqe, 3);

    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ch->refcnt, 0);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

static void test_cq_overflow(void)
{
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    struct ibv_wc wc = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV}, out[8];
    struct ibv_async_event ev;

    CHECK(cq != NULL);
    for (int i = 0; i < 6; i++) {
        wc.wr_id = (uint64_t)i;
        uiw_cq_push(to_ucq(cq), &wc, false);
    }
    CHECK(to_ucq(cq)->overflow);
    CHECK(fd_readable(ctx->async_fd));
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
    CHECK(ev.element.cq == cq);
    ibv_ack_async_event(&ev);
    CHECK_EQ(cq->async_events_completed, 1);
    /* what was queued before the overrun is still delivered, then error */
    CHECK_EQ(ibv_poll_cq(cq, 8, out), 4);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(out[i].wr_id, i);
    CHECK(ibv_poll_cq(cq, 8, out) < 0);
    uiw_cq_push(to_ucq(cq), &wc, false); /* dropped: CQ in error */
    CHECK(ibv_poll_cq(cq, 8, out) < 0);
    CHECK_EQ(eng_async_drain(ctx, NULL), 0); /* one CQ_ERR only */
    CHECK_EQ(ibv_destroy_cq(cq), 0);
}

struct destroyer {
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_srq *srq;
    int ret;
    atomic_bool done;
};

static void *destroy_thread(void *arg)
{
    struct destroyer *d = arg;
    if (d->qp)
        d->ret = ibv_destroy_qp(d->qp);
    else if (d->srq)
        d->ret = ibv_destroy_srq(d->srq);
    else
        d->ret = ibv_destroy_cq(d->cq);
    atomic_store(&d->done, true);
    return NULL;
}

static void test_comp_channel(void)
{
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, (void *)0x77, ch, 0);
    struct ibv_wc ok = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV};
    struct ibv_wc bad = {.status = IBV_WC_REM_ACCESS_ERR, .opcode = IBV_WC_SEND};
    struct ibv_cq *ecq;
    void *ectx;
    unsigned events = 0;

    CHECK(ch && cq);
    set_nonblock(ch->fd, true);
    /* not armed: no event */
    uiw_cq_push(to_ucq(cq), &ok, true);
    CHECK(!fd_readable(ch->fd));
    errno = 0;
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), -1);
    CHECK_EQ(errno, EAGAIN);

    /* armed for all: the next completion, once */
    /* arming a CQ on a channel is stamped (progress.c spins after it) */
    uint64_t t0 = uiw_now_ns();
    CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);
    CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);
    CHECK(atomic_load(&uiw_last_arm_ns) >= t0);
    uiw_cq_push(to_ucq(cq), &ok, false);
    CHECK(fd_readable(ch->fd));
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    events++;
    CHECK(ecq == cq);
    CHECK(ectx == (void *)0x77);
    CHECK(!fd_readable(ch->fd));
    uiw_cq_push(to_ucq(cq), &ok, false); /* one-shot: disarmed */
    CHECK(!fd_readable(ch->fd));

    /* solicited only: unsolicited successes do not fire, solicited does */
    CHECK_EQ(ibv_req_notify_cq(cq, 1), 0);
    uiw_cq_push(to_ucq(cq), &ok, false);
    uiw_cq_push(to_ucq(cq), &ok, false);
    CHECK(!fd_readable(ch->fd));
    uiw_cq_push(to_ucq(cq), &ok, true);
    CHECK(fd_readable(ch->fd));
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    events++;
    /* ... and so does a completion in error */
    CHECK_EQ(ibv_req_notify_cq(cq, 1), 0);
    uiw_cq_push(to_ucq(cq), &bad, false);
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    events++;
    /* all after solicited: all wins */
    CHECK_EQ(ibv_req_notify_cq(cq, 1), 0);
    CHECK_EQ(ibv_req_notify_cq(cq, 0), 0);
    uiw_cq_push(to_ucq(cq), &ok, false);
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    events++;
    CHECK_EQ(to_ucq(cq)->comp_reported, events);

    /* two CQs on one channel: events in order */
    struct ibv_cq *cq2 = ibv_create_cq(ctx, 4, (void *)0x88, ch, 0);
    CHECK_EQ(ch->refcnt, 2);
    ibv_req_notify_cq(cq2, 0);
    ibv_req_notify_cq(cq, 0);
    uiw_cq_push(to_ucq(cq2), &ok, false);
    uiw_cq_push(to_ucq(cq), &ok, false);
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    CHECK(ecq == cq2);
    CHECK(ectx == (void *)0x88);
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    CHECK(ecq == cq);
    events++;
    ibv_ack_cq_events(cq2, 1);
    /* an undelivered event of a destroyed CQ is dropped */
    ibv_req_notify_cq(cq2, 0);
    uiw_cq_push(to_ucq(cq2), &ok, false);
    CHECK(fd_readable(ch->fd));
    CHECK_EQ(ibv_destroy_cq(cq2), 0);
    CHECK(!fd_readable(ch->fd));
    /* a CQ without a channel has nobody to wake: not stamped */
    struct ibv_cq *cq3 = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    uint64_t stamp = atomic_load(&uiw_last_arm_ns);
    CHECK_EQ(ibv_req_notify_cq(cq3, 0), 0);
    CHECK_EQ(atomic_load(&uiw_last_arm_ns), stamp);
    CHECK_EQ(ibv_destroy_cq(cq3), 0);

    /* destroy waits until every delivered event was acknowledged */
    ibv_ack_cq_events(cq, events - 1);
    struct destroyer d = {.cq = cq, .ret = 99};
    pthread_t t;
    pthread_create(&t, NULL, destroy_thread, &d);
    eng_msleep(100);
    CHECK(!atomic_load(&d.done));
    ibv_ack_cq_events(cq, 1);
    pthread_join(t, NULL);
    CHECK_EQ(d.ret, 0);

    /* blocking ibv_get_cq_event wakes up */
    set_nonblock(ch->fd, false);
    cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
    ibv_req_notify_cq(cq, 0);
    uiw_cq_push(to_ucq(cq), &ok, false);
    CHECK_EQ(ibv_get_cq_event(ch, &ecq, &ectx), 0);
    CHECK(ecq == cq);
    ibv_ack_cq_events(cq, 1);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
}

/* A producer thread (as the data path) and a consumer using the classic
 * poll / arm / poll / wait pattern: nothing lost, nothing reordered. */
#define NPROD 20000

static void *producer(void *arg)
{
    struct ibv_cq *cq = arg;
    struct ibv_wc wc = {.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV};

    for (unsigned i = 0; i < NPROD; i++) {
        wc.wr_id = i;
        uiw_cq_push(to_ucq(cq), &wc, (i % 7) == 0);
        if (i % 1000 == 0)
            eng_msleep(1);
    }
    return NULL;
}

static void test_cq_threads(void)
{
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, NPROD, NULL, ch, 0);
    struct ibv_wc wc[64];
    unsigned next = 0, bad = 0, events = 0;
    pthread_t t;

    pthread_create(&t, NULL, producer, cq);
    while (next < NPROD) {
        int n = ibv_poll_cq(cq, 64, wc);
        if (n < 0)
            break;
        if (n == 0) {
            bad += ibv_req_notify_cq(cq, 0) != 0;
            n = ibv_poll_cq(cq, 64, wc);
            if (n == 0) {
                struct ibv_cq *ecq;
                void *ectx;
                if (ibv_get_cq_event(ch, &ecq, &ectx) == 0) {
                    ibv_ack_cq_events(ecq, 1);
                    events++;
                }
                continue;
            }
        }
        for (int i = 0; i < n; i++)
            bad += wc[i].wr_id != next++;
    }
    pthread_join(t, NULL);
    CHECK_EQ(next, NPROD);
    CHECK_EQ(bad, 0);
    CHECK(!to_ucq(cq)->overflow);
    /* an event armed at the end may be pending: consume it */
    set_nonblock(ch->fd, true);
    struct ibv_cq *ecq;
    void *ectx;
    while (ibv_get_cq_event(ch, &ecq, &ectx) == 0)
        ibv_ack_cq_events(ecq, 1);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    (void)events;
}

/* ------------------------------------------------------------------------ */

static void test_qp_create(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia;
    struct ibv_qp *qp;

    memset(&ia, 0, sizeof(ia));
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.cap.max_send_wr = 5;
    ia.cap.max_recv_wr = 9;
    ia.cap.max_send_sge = 3;
    ia.cap.max_recv_sge = 4;
    ia.cap.max_inline_data = 64;
    ia.sq_sig_all = 1;
    ia.qp_context = (void *)0x42;

    ia.qp_type = IBV_QPT_UD;
    errno = 0;
    CHECK(ibv_create_qp(pd, &ia) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    ia.qp_type = IBV_QPT_UC;
    errno = 0;
    CHECK(ibv_create_qp(pd, &ia) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);
    ia.qp_type = (enum ibv_qp_type)77;
    errno = 0;
    CHECK(ibv_create_qp(pd, &ia) == NULL);
    CHECK_EQ(errno, EINVAL);
    ia.qp_type = IBV_QPT_RC;
    struct ibv_qp_init_attr bad = ia;
    bad.cap.max_send_wr = UIW_MAX_QP_WR + 1;
    errno = 0;
    CHECK(ibv_create_qp(pd, &bad) == NULL);
    CHECK_EQ(errno, EINVAL);
    bad = ia;
    bad.cap.max_recv_sge = UIW_MAX_SGE + 1;
    CHECK(ibv_create_qp(pd, &bad) == NULL);
    bad = ia;
    bad.cap.max_inline_data = UIW_MAX_INLINE + 1;
    CHECK(ibv_create_qp(pd, &bad) == NULL);
    bad = ia;
    bad.send_cq = NULL;
    CHECK(ibv_create_qp(pd, &bad) == NULL);

    qp = ibv_create_qp(pd, &ia);
    CHECK(qp != NULL);
    /* rounded up and reported back */
    CHECK_EQ(ia.cap.max_send_wr, 8);
    CHECK_EQ(ia.cap.max_recv_wr, 16);
    CHECK_EQ(ia.cap.max_send_sge, 3);
    CHECK_EQ(ia.cap.max_recv_sge, 4);
    CHECK_EQ(ia.cap.max_inline_data, UIW_MAX_INLINE);
    /* as siw and cxgb4: a new iWARP QP is in INIT */
    CHECK_EQ(qp->state, IBV_QPS_INIT);
    CHECK_EQ(qp->qp_type, IBV_QPT_RC);
    CHECK(qp->context == ctx && qp->pd == pd && qp->send_cq == scq && qp->recv_cq == rcq);
    CHECK(qp->qp_context == (void *)0x42);
    CHECK(qp->srq == NULL);

    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    CHECK_EQ(ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_CAP, &qi), 0);
    CHECK_EQ(qa.qp_state, IBV_QPS_INIT);
    CHECK_EQ(qa.cap.max_send_wr, 8);
    CHECK_EQ(qa.port_num, 1);
    CHECK_EQ(qi.sq_sig_all, 1);
    CHECK(qi.send_cq == scq && qi.recv_cq == rcq && qi.qp_context == (void *)0x42);
    CHECK_EQ(qi.qp_type, IBV_QPT_RC);
    CHECK_EQ(qi.cap.max_recv_wr, 16);

    /* QP numbers are unique */
    struct ibv_qp *more[8];
    for (int i = 0; i < 8; i++) {
        more[i] = make_qp(pd, scq, rcq, NULL);
        CHECK(more[i] != NULL);
        CHECK(more[i]->qp_num != qp->qp_num);
        for (int j = 0; j < i; j++)
            CHECK(more[i]->qp_num != more[j]->qp_num);
        CHECK(more[i]->qp_num >= 2);
    }
    CHECK_EQ(to_ucq(scq)->nqps, 9);
    CHECK_EQ(to_ucq(rcq)->nqps, 9);
    for (int i = 0; i < 8; i++)
        CHECK_EQ(ibv_destroy_qp(more[i]), 0);

    /* Many QPs on two CQs, in every arrangement (send and receive CQ
     * apart, swapped, one CQ for both), destroyed in a scrambled order: a
     * destroy takes its QP off each CQ's list by its slot, moving the last
     * entry there (O(1)); after each one every remaining QP is listed once
     * per CQ, where its slot says */
    {
        enum { NQ = 40 };
        struct ibv_qp *q[NQ];
        struct ibv_cq *pairs[3][2] = {{scq, rcq}, {rcq, scq}, {scq, scq}};
        bool gone[NQ] = {false};
        unsigned want_s, want_r;

        for (int i = 0; i < NQ; i++) {
            q[i] = make_qp(pd, pairs[i % 3][0], pairs[i % 3][1], NULL);
            CHECK(q[i] != NULL);
        }
        /* (scq, rcq) and (rcq, scq): on both lists; (scq, scq): on scq's
         * once; qp, made above, is on both */
        want_s = 1 + NQ;
        want_r = 1 + (NQ / 3) * 2 + (NQ % 3 > 0) + (NQ % 3 > 1);
        CHECK_EQ(to_ucq(scq)->nqps, want_s);
        CHECK_EQ(to_ucq(rcq)->nqps, want_r);
        for (int k = 0; k < NQ; k++) {
            int i = (k * 17 + 5) % NQ; /* 17 is prime to 40: each once */

            CHECK(!gone[i]);
            CHECK_EQ(ibv_destroy_qp(q[i]), 0);
            gone[i] = true;
            if (i % 3 != 2)
                want_r--;
            want_s--;
            CHECK_EQ(to_ucq(scq)->nqps, want_s);
            CHECK_EQ(to_ucq(rcq)->nqps, want_r);
            for (int j = 0; j < NQ; j++) {
                if (gone[j])
                    continue;
                struct uiw_qp *u = to_uqp(q[j]);
                struct uiw_cq *sc = to_ucq(pairs[j % 3][0]), *rc = to_ucq(pairs[j % 3][1]);
                unsigned n = 0;

                CHECK(u->cq_slot[0] < sc->nqps && sc->qps[u->cq_slot[0]] == u);
                if (rc != sc)
                    CHECK(u->cq_slot[1] < rc->nqps && rc->qps[u->cq_slot[1]] == u);
                for (unsigned m = 0; m < sc->nqps; m++)
                    n += sc->qps[m] == u;
                CHECK_EQ(n, 1);
            }
        }
        CHECK_EQ(to_ucq(scq)->nqps, 1);
        CHECK_EQ(to_ucq(rcq)->nqps, 1);
    }

    /* extended create, basic form */
    struct ibv_qp_init_attr_ex iax;
    memset(&iax, 0, sizeof(iax));
    iax.send_cq = scq;
    iax.recv_cq = rcq;
    iax.cap.max_send_wr = 2;
    iax.cap.max_recv_wr = 2;
    iax.qp_type = IBV_QPT_RC;
    iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    iax.pd = pd;
    struct ibv_qp *qx = ibv_create_qp_ex(ctx, &iax);
    CHECK(qx != NULL);
    CHECK_EQ(iax.cap.max_send_wr, 2);
    CHECK_EQ(ibv_destroy_qp(qx), 0);
    /* the ibv_wr_* API exists (verbs_ex.c), memory windows do not */
    iax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    iax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW;
    errno = 0;
    CHECK(ibv_create_qp_ex(ctx, &iax) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);

    CHECK_EQ(ibv_destroy_qp(qp), 0);
    CHECK_EQ(to_ucq(scq)->nqps, 0);
    CHECK_EQ(ibv_destroy_cq(scq), 0);
    CHECK_EQ(ibv_destroy_cq(rcq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* Put a fresh QP (in INIT, as siw's) into state s through RESET, as a
 * program written for IB does. Returns the peer socket end if the QP had
 * to be connected, else -1. */
static int reach(struct ibv_qp *qp, enum ibv_qp_state s)
{
    int peer = -1;

    switch (s) {
    case IBV_QPS_RESET:
        if (qp->state != IBV_QPS_RESET)
            CHECK_EQ(modify_state(qp, IBV_QPS_RESET), 0);
        break;
    case IBV_QPS_INIT:
        reach(qp, IBV_QPS_RESET);
        CHECK_EQ(modify_state(qp, IBV_QPS_INIT), 0);
        break;
    case IBV_QPS_RTR:
        reach(qp, IBV_QPS_INIT);
        CHECK_EQ(modify_state(qp, IBV_QPS_RTR), 0);
        break;
    case IBV_QPS_RTS:
        reach(qp, IBV_QPS_RTR);
        peer = fake_connect(qp);
        CHECK_EQ(modify_state(qp, IBV_QPS_RTS), 0);
        break;
    case IBV_QPS_SQD:
        peer = reach(qp, IBV_QPS_RTS);
        CHECK_EQ(modify_state(qp, IBV_QPS_SQD), 0);
        break;
    case IBV_QPS_SQE: /* only the engine enters SQE */
        peer = reach(qp, IBV_QPS_RTS);
        pthread_mutex_lock(&to_uqp(qp)->lock);
        to_uqp(qp)->state = IBV_QPS_SQE;
        qp->state = IBV_QPS_SQE;
        pthread_mutex_unlock(&to_uqp(qp)->lock);
        break;
    case IBV_QPS_ERR:
        reach(qp, IBV_QPS_INIT);
        CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
        break;
    default:
        break;
    }
    CHECK_EQ(qp->state, s);
    return peer;
}

static void test_qp_state_machine(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    /* legal[cur][next] with IBV_QP_STATE alone (IB RC table + iWARP INIT->RTS) */
    static const bool legal[7][7] = {
        /*            RESET  INIT   RTR    RTS    SQD    SQE    ERR */
        /* RESET */ {true, true, false, false, false, false, false},
        /* INIT  */ {true, true, true, true, false, false, true},
        /* RTR   */ {true, false, false, true, false, false, true},
        /* RTS   */ {true, false, false, true, true, false, true},
        /* SQD   */ {true, false, false, true, true, false, true},
        /* SQE   */ {true, false, false, true, false, false, true},
        /* ERR   */ {true, false, false, false, false, false, true},
    };
    unsigned legal_ok = 0, illegal_ok = 0;

    for (int cur = IBV_QPS_RESET; cur <= IBV_QPS_ERR; cur++) {
        for (int next = IBV_QPS_RESET; next <= IBV_QPS_ERR; next++) {
            struct ibv_qp *qp = make_qp(pd, cq, cq, NULL);
            int peer = reach(qp, (enum ibv_qp_state)cur);
            /* moving into RTS needs the connection */
            if (next == IBV_QPS_RTS && peer < 0)
                peer = fake_connect(qp);
            int ret = modify_state(qp, (enum ibv_qp_state)next);
            if (legal[cur][next]) {
                if (ret == 0 && qp->state == (enum ibv_qp_state)next)
                    legal_ok++;
                else
                    fprintf(stderr, "legal %d -> %d failed: %d\n", cur, next, ret);
            } else {
                if (ret == EINVAL && qp->state == (enum ibv_qp_state)cur)
                    illegal_ok++;
                else
                    fprintf(stderr, "illegal %d -> %d: %d\n", cur, next, ret);
            }
            struct ibv_qp_attr qa;
            struct ibv_qp_init_attr qi;
            ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi);
            CHECK_EQ(qa.qp_state, qp->state);
            fake_disconnect(qp);
            if (peer >= 0)
                close(peer);
            CHECK_EQ(ibv_destroy_qp(qp), 0);
        }
    }
    CHECK_EQ(legal_ok, 23);
    CHECK_EQ(illegal_ok, 26);
    /* flushes of the empty queues produced nothing */
    struct ibv_wc wc[4];
    CHECK_EQ(ibv_poll_cq(cq, 4, wc), 0);

    struct ibv_qp *qp = make_qp(pd, cq, cq, NULL);
    struct ibv_qp_attr a;
    /* a new QP is in INIT; INIT -> INIT takes what RESET -> INIT takes, so
     * programs written for a QP created in RESET still work */
    CHECK_EQ(qp->state, IBV_QPS_INIT);
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK_EQ(
        ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
    CHECK_EQ(qp->state, IBV_QPS_INIT);
    reach(qp, IBV_QPS_RESET);
    /* empty mask: no-op in any state (librdmacm does this for iWARP) */
    CHECK_EQ(ibv_modify_qp(qp, &a, 0), 0);
    CHECK_EQ(qp->state, IBV_QPS_RESET);
    /* RESET -> INIT with the IB-required attributes; bad values refused */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 2;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT), EINVAL);
    a.port_num = 1;
    a.pkey_index = 1;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX), EINVAL);
    a.pkey_index = 0;
    a.qp_access_flags = IBV_ACCESS_MW_BIND;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS), EINVAL);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    /* attributes not allowed in this transition */
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV), EINVAL);
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_CAP), EINVAL);
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | (1 << 30)), EINVAL);
    CHECK_EQ(qp->state, IBV_QPS_RESET);
    CHECK_EQ(
        ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        0);
    CHECK_EQ(qp->state, IBV_QPS_INIT);
    /* INIT -> INIT: attributes only (mask without IBV_QP_STATE) */
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), 0);
    /* INIT -> RTR with IB path attributes (accepted, kept for query) */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_2048;
    a.dest_qp_num = 0x123;
    a.rq_psn = 77;
    a.max_dest_rd_atomic = UIW_MAX_IRD + 1;
    a.min_rnr_timer = 12;
    int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    CHECK_EQ(ibv_modify_qp(qp, &a, rtr_mask), EINVAL); /* IRD above the limit */
    a.max_dest_rd_atomic = 8;
    CHECK_EQ(ibv_modify_qp(qp, &a, rtr_mask | IBV_QP_SQ_PSN), EINVAL); /* SQ_PSN: RTS only */
    CHECK_EQ(ibv_modify_qp(qp, &a, rtr_mask), 0);
    CHECK_EQ(qp->state, IBV_QPS_RTR);
    /* RTR -> RTR does not exist */
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), EINVAL);
    /* RTR -> RTS: not connected */
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 5;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                   IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    CHECK_EQ(ibv_modify_qp(qp, &a, rts_mask), ENOTCONN);
    CHECK_EQ(qp->state, IBV_QPS_RTR);
    int peer = fake_connect(qp);
    a.cur_qp_state = IBV_QPS_INIT; /* wrong */
    CHECK_EQ(ibv_modify_qp(qp, &a, rts_mask | IBV_QP_CUR_STATE), EINVAL);
    a.cur_qp_state = IBV_QPS_RTR;
    CHECK_EQ(ibv_modify_qp(qp, &a, rts_mask | IBV_QP_CUR_STATE), 0);
    CHECK_EQ(qp->state, IBV_QPS_RTS);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    CHECK_EQ(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi), 0);
    CHECK_EQ(qa.qp_state, IBV_QPS_RTS);
    CHECK_EQ(qa.path_mtu, IBV_MTU_2048);
    CHECK_EQ(qa.dest_qp_num, 0x123);
    CHECK_EQ(qa.rq_psn, 77);
    CHECK_EQ(qa.sq_psn, 5);
    CHECK_EQ(qa.max_rd_atomic, 4);
    CHECK_EQ(qa.max_dest_rd_atomic, 8);
    CHECK_EQ(qa.qp_access_flags,
             IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    CHECK_EQ(to_uqp(qp)->ord, 4);
    CHECK_EQ(to_uqp(qp)->ird, 8);
    /* RTS -> RTS: attributes only; MAX_QP_RD_ATOMIC is not one of them */
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_ACCESS_FLAGS), 0);
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_MAX_QP_RD_ATOMIC), EINVAL);
    /* RTS -> SQD with notification: the SQ is empty, SQ_DRAINED at once */
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 1;
    CHECK_EQ(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
    struct ibv_async_event ev;
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_SQ_DRAINED);
    CHECK(ev.element.qp == qp);
    ibv_ack_async_event(&ev);
    CHECK_EQ(qp->events_completed, 1);
    /* SQD -> RTS */
    CHECK_EQ(modify_state(qp, IBV_QPS_RTS), 0);
    /* application ERR on a connected QP: the peer sees the end of stream */
    CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
    char b;
    CHECK_EQ(read(peer, &b, 1), 0);
    /* RESET releases the socket */
    CHECK_EQ(modify_state(qp, IBV_QPS_RESET), 0);
    CHECK_EQ(to_uqp(qp)->fd, -1);
    close(peer);
    CHECK_EQ(ibv_destroy_qp(qp), 0);
    CHECK_EQ(eng_async_drain(ctx, NULL), 0);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ------------------------------------------------------------------------ */

static void put_sqe(struct ibv_qp *ibqp, uint64_t wr_id, enum ibv_wr_opcode op)
{
    struct uiw_qp *qp = to_uqp(ibqp);

    pthread_mutex_lock(&qp->lock);
    struct uiw_sqe *e = &qp->sq[(qp->sq_head + qp->sq_count) % qp->sq_cap];
    memset(e, 0, sizeof(*e));
    e->wr_id = wr_id;
    e->opcode = op;
    qp->sq_count++;
    pthread_mutex_unlock(&qp->lock);
}

static void put_rqe(struct ibv_qp *ibqp, uint64_t wr_id)
{
    struct uiw_qp *qp = to_uqp(ibqp);

    pthread_mutex_lock(&qp->lock);
    struct uiw_rqe *e = &qp->rq[(qp->rq_head + qp->rq_count) % qp->rq_cap];
    memset(e, 0, sizeof(*e));
    e->wr_id = wr_id;
    qp->rq_count++;
    pthread_mutex_unlock(&qp->lock);
}

static void test_flush(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *scq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_cq *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp *qp = make_qp(pd, scq, rcq, NULL);
    static const struct {
        enum ibv_wr_opcode wr;
        enum ibv_wc_opcode wc;
    } ops[] = {
        {IBV_WR_SEND, IBV_WC_SEND},
        {IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE},
        {IBV_WR_RDMA_READ, IBV_WC_RDMA_READ},
        {IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WC_FETCH_ADD},
        {IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WC_COMP_SWAP},
        {IBV_WR_LOCAL_INV, IBV_WC_LOCAL_INV},
        {IBV_WR_SEND_WITH_IMM, IBV_WC_SEND},
        {IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WC_RDMA_WRITE},
        {IBV_WR_SEND_WITH_INV, IBV_WC_SEND},
    };
    const int nops = (int)(sizeof(ops) / sizeof(ops[0]));
    struct ibv_wc wc[32];
    struct ibv_send_wr swr, *sbad = NULL;
    struct ibv_recv_wr rwr, *rbad = NULL;

    memset(&swr, 0, sizeof(swr));
    memset(&rwr, 0, sizeof(rwr));
    /* posting outside the allowed states */
    reach(qp, IBV_QPS_RESET);
    swr.wr_id = 1;
    CHECK_EQ(ibv_post_send(qp, &swr, &sbad), EINVAL); /* RESET */
    CHECK(sbad == &swr);
    CHECK_EQ(ibv_post_recv(qp, &rwr, &rbad), EINVAL); /* RESET */
    CHECK(rbad == &rwr);
    reach(qp, IBV_QPS_INIT);
    sbad = NULL;
    CHECK_EQ(ibv_post_send(qp, &swr, &sbad), ENOTCONN); /* INIT */
    CHECK(sbad == &swr);

    int peer = reach(qp, IBV_QPS_RTS);
    CHECK(peer >= 0);
    /* queued work: SQ (the ring wraps: 16 slots, head moved) and RQ */
    pthread_mutex_lock(&to_uqp(qp)->lock);
    to_uqp(qp)->sq_head = 12;
    to_uqp(qp)->rq_head = 14;
    pthread_mutex_unlock(&to_uqp(qp)->lock);
    for (int i = 0; i < nops; i++)
        put_sqe(qp, 1000 + (uint64_t)i, ops[i].wr);
    for (int i = 0; i < 5; i++)
        put_rqe(qp, 2000 + (uint64_t)i);
    fake_disconnect(qp);

    /* to ERR: every entry flushed, in order, with its opcode */
    CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
    CHECK_EQ(ibv_poll_cq(scq, 32, wc), nops);
    for (int i = 0; i < nops; i++) {
        CHECK_EQ(wc[i].wr_id, 1000 + i);
        CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
        CHECK_EQ(wc[i].opcode, ops[i].wc);
        CHECK_EQ(wc[i].qp_num, qp->qp_num);
    }
    CHECK_EQ(ibv_poll_cq(rcq, 32, wc), 5);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(wc[i].wr_id, 2000 + i);
        CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
        CHECK_EQ(wc[i].opcode, IBV_WC_RECV);
        CHECK_EQ(wc[i].qp_num, qp->qp_num);
    }
    CHECK_EQ(to_uqp(qp)->sq_count, 0);
    CHECK_EQ(to_uqp(qp)->rq_count, 0);
    /* ERR -> ERR: nothing more */
    CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
    CHECK_EQ(ibv_poll_cq(scq, 32, wc), 0);
    CHECK_EQ(ibv_poll_cq(rcq, 32, wc), 0);

    /* posting in ERR completes at once with FLUSH_ERR (signalled or not) */
    struct ibv_send_wr s2[3];
    memset(s2, 0, sizeof(s2));
    s2[0].wr_id = 31;
    s2[0].opcode = IBV_WR_RDMA_READ;
    s2[0].next = &s2[1];
    s2[1].wr_id = 32;
    s2[1].opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    s2[1].send_flags = IBV_SEND_SIGNALED;
    s2[1].next = &s2[2];
    s2[2].wr_id = 33;
    s2[2].opcode = IBV_WR_SEND;
    sbad = NULL;
    CHECK_EQ(ibv_post_send(qp, s2, &sbad), 0);
    CHECK(sbad == NULL);
    CHECK_EQ(ibv_poll_cq(scq, 32, wc), 3);
    CHECK_EQ(wc[0].wr_id, 31);
    CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_READ);
    CHECK_EQ(wc[1].wr_id, 32);
    CHECK_EQ(wc[1].opcode, IBV_WC_COMP_SWAP);
    CHECK_EQ(wc[2].wr_id, 33);
    CHECK_EQ(wc[2].opcode, IBV_WC_SEND);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    struct ibv_recv_wr r2[2];
    memset(r2, 0, sizeof(r2));
    r2[0].wr_id = 41;
    r2[0].next = &r2[1];
    r2[1].wr_id = 42;
    CHECK_EQ(ibv_post_recv(qp, r2, &rbad), 0);
    CHECK_EQ(ibv_poll_cq(rcq, 32, wc), 2);
    CHECK_EQ(wc[0].wr_id, 41);
    CHECK_EQ(wc[1].wr_id, 42);
    CHECK_EQ(wc[1].opcode, IBV_WC_RECV);
    CHECK_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);

    /* SQE: the send queue flushes new WRs, the receive queue still works */
    struct ibv_qp *q2 = make_qp(pd, scq, rcq, NULL);
    reach(q2, IBV_QPS_SQE);
    fake_disconnect(q2);
    swr.wr_id = 51;
    swr.opcode = IBV_WR_RDMA_WRITE;
    CHECK_EQ(ibv_post_send(q2, &swr, &sbad), 0);
    CHECK_EQ(ibv_poll_cq(scq, 32, wc), 1);
    CHECK_EQ(wc[0].wr_id, 51);
    CHECK_EQ(wc[0].opcode, IBV_WC_RDMA_WRITE);
    CHECK_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
    /* RESET discards queued work without completions */
    put_sqe(q2, 61, IBV_WR_SEND);
    put_rqe(q2, 62);
    CHECK_EQ(modify_state(q2, IBV_QPS_RESET), 0);
    CHECK_EQ(to_uqp(q2)->sq_count, 0);
    CHECK_EQ(to_uqp(q2)->rq_count, 0);
    CHECK_EQ(ibv_poll_cq(scq, 32, wc), 0);
    CHECK_EQ(ibv_poll_cq(rcq, 32, wc), 0);

    /* destroy_qp generates no completions */
    reach(q2, IBV_QPS_INIT);
    put_rqe(q2, 71);
    CHECK_EQ(ibv_destroy_qp(q2), 0);
    CHECK_EQ(ibv_poll_cq(rcq, 32, wc), 0);

    CHECK_EQ(ibv_destroy_qp(qp), 0);
    close(peer);
    CHECK_EQ(eng_async_drain(ctx, NULL), 0);
    CHECK_EQ(ibv_destroy_cq(scq), 0);
    CHECK_EQ(ibv_destroy_cq(rcq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ------------------------------------------------------------------------ */

static void test_srq(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_srq_init_attr si;
    struct ibv_srq_attr sa;
    struct ibv_srq *srq;
    struct ibv_async_event ev;

    memset(&si, 0, sizeof(si));
    si.attr.max_wr = UIW_MAX_SRQ_WR + 1;
    si.attr.max_sge = 2;
    errno = 0;
    CHECK(ibv_create_srq(pd, &si) == NULL);
    CHECK_EQ(errno, EINVAL);
    si.attr.max_wr = 8;
    si.attr.max_sge = UIW_MAX_SGE + 1;
    CHECK(ibv_create_srq(pd, &si) == NULL);
    si.attr.max_sge = 2;
    si.attr.srq_limit = 5; /* ignored at creation */
    si.srq_context = (void *)0x99;
    srq = ibv_create_srq(pd, &si);
    CHECK(srq != NULL);
    CHECK_EQ(si.attr.max_wr, 8);
    CHECK_EQ(si.attr.max_sge, 2);
    CHECK(srq->srq_context == (void *)0x99);
    CHECK(srq->pd == pd && srq->context == ctx);
    CHECK_EQ(ibv_query_srq(srq, &sa), 0);
    CHECK_EQ(sa.max_wr, 8);
    CHECK_EQ(sa.srq_limit, 0);
    CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);

    /* posting: up to the capacity, SGE count checked */
    static char buf[64];
    struct ibv_sge sge[3] = {
        {(uintptr_t)buf, 10, 0x100}, {(uintptr_t)buf, 20, 0x100}, {(uintptr_t)buf, 30, 0x100}};
    struct ibv_recv_wr wr[9], *bad = NULL;
    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < 9; i++) {
        wr[i].wr_id = 500 + (uint64_t)i;
        wr[i].sg_list = sge;
        wr[i].num_sge = 2;
        wr[i].next = i < 8 ? &wr[i + 1] : NULL;
    }
    wr[3].num_sge = 3;
    CHECK_EQ(ibv_post_srq_recv(srq, wr, &bad), EINVAL);
    CHECK(bad == &wr[3]);
    wr[3].num_sge = 1;
    CHECK_EQ(ibv_post_srq_recv(srq, &wr[3], &bad), ENOMEM); /* 3 queued + 6 > 8 */
    CHECK(bad == &wr[8]);
    CHECK_EQ(to_usrq(srq)->count, 8);

    /* limit: above the capacity refused; armed, fires once below it */
    sa.srq_limit = 9;
    CHECK_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), EINVAL);
    sa.srq_limit = 6;
    CHECK_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
    CHECK_EQ(ibv_query_srq(srq, &sa), 0);
    CHECK_EQ(sa.srq_limit, 6);
    struct uiw_rqe e;
    CHECK(uiw_srq_take(to_usrq(srq), &e, NULL)); /* 7 left */
    CHECK_EQ(e.wr_id, 500);
    CHECK_EQ(e.num_sge, 2);
    CHECK_EQ(e.length, 30);
    CHECK(!fd_readable(ctx->async_fd));
    CHECK(uiw_srq_take(to_usrq(srq), &e, NULL)); /* 6 left: not below */
    CHECK_EQ(e.wr_id, 501);
    CHECK(!fd_readable(ctx->async_fd));
    CHECK(uiw_srq_take(to_usrq(srq), &e, NULL)); /* 5 left: below */
    CHECK_EQ(e.wr_id, 502);
    CHECK(fd_readable(ctx->async_fd));
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    CHECK(ev.element.srq == srq);
    ibv_ack_async_event(&ev);
    CHECK_EQ(ibv_query_srq(srq, &sa), 0);
    CHECK_EQ(sa.srq_limit, 0); /* disarmed */
    CHECK(uiw_srq_take(to_usrq(srq), &e, NULL));
    CHECK_EQ(e.wr_id, 503);
    CHECK_EQ(e.length, 10);
    CHECK(!fd_readable(ctx->async_fd));

    /* resize keeps the queued entries in order */
    sa.max_wr = 2;
    CHECK_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR), EINVAL); /* 4 queued */
    sa.max_wr = 32;
    CHECK_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_MAX_WR), 0);
    CHECK_EQ(ibv_query_srq(srq, &sa), 0);
    CHECK_EQ(sa.max_wr, 32);
    CHECK_EQ(ibv_modify_srq(srq, &sa, 1 << 5), EINVAL);
    for (int i = 4; i < 8; i++) {
        CHECK(uiw_srq_take(to_usrq(srq), &e, NULL));
        CHECK_EQ(e.wr_id, 500 + i);
    }
    CHECK(!uiw_srq_take(to_usrq(srq), &e, NULL));

    /* a QP on the SRQ */
    struct ibv_qp *qp = make_qp(pd, cq, cq, srq);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    CHECK(qp != NULL);
    CHECK(qp->srq == srq);
    ibv_query_qp(qp, &qa, 0, &qi);
    CHECK_EQ(qi.cap.max_recv_wr, 0);
    CHECK(qi.srq == srq);
    CHECK_EQ(ibv_destroy_srq(srq), EBUSY);
    reach(qp, IBV_QPS_INIT);
    struct ibv_recv_wr rw = {.wr_id = 1};
    CHECK_EQ(ibv_post_recv(qp, &rw, &bad), EINVAL); /* receives go to the SRQ */
    /* ERR: LAST_WQE_REACHED, the SRQ keeps its entries */
    wr[0].next = NULL;
    CHECK_EQ(ibv_post_srq_recv(srq, wr, &bad), 0);
    CHECK_EQ(modify_state(qp, IBV_QPS_ERR), 0);
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    CHECK(ev.element.qp == qp);
    ibv_ack_async_event(&ev);
    CHECK_EQ(to_usrq(srq)->count, 1);
    struct ibv_wc wc[4];
    CHECK_EQ(ibv_poll_cq(cq, 4, wc), 0);
    CHECK_EQ(ibv_destroy_qp(qp), 0);

    /* SRQ destroy waits for the ack of a delivered event */
    sa.srq_limit = 1;
    CHECK_EQ(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT), 0);
    CHECK(uiw_srq_take(to_usrq(srq), &e, NULL));
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
    struct destroyer d = {.srq = srq, .ret = 99};
    pthread_t t;
    pthread_create(&t, NULL, destroy_thread, &d);
    eng_msleep(100);
    CHECK(!atomic_load(&d.done));
    ibv_ack_async_event(&ev);
    pthread_join(t, NULL);
    CHECK_EQ(d.ret, 0);

    /* extended create, basic form */
    struct ibv_srq_init_attr_ex sx;
    memset(&sx, 0, sizeof(sx));
    sx.attr.max_wr = 4;
    sx.attr.max_sge = 1;
    sx.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
    sx.srq_type = IBV_SRQT_BASIC;
    sx.pd = pd;
    srq = ibv_create_srq_ex(ctx, &sx);
    CHECK(srq != NULL);
    CHECK_EQ(ibv_destroy_srq(srq), 0);
    sx.srq_type = IBV_SRQT_XRC;
    errno = 0;
    CHECK(ibv_create_srq_ex(ctx, &sx) == NULL);
    CHECK_EQ(errno, EOPNOTSUPP);

    CHECK_EQ(eng_async_drain(ctx, NULL), 0);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* Async event accounting: destroy waits for acks, drops undelivered ones. */
static void test_qp_events(void)
{
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
    struct ibv_qp *qp = make_qp(pd, cq, cq, NULL);
    struct ibv_async_event ev;

    uiw_async_event(to_uctx(ctx), IBV_EVENT_QP_FATAL, qp);
    uiw_async_event(to_uctx(ctx), IBV_EVENT_QP_ACCESS_ERR, qp);
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    CHECK_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
    CHECK(ev.element.qp == qp);
    /* the second (undelivered) is dropped by destroy; the first must be acked */
    struct destroyer d = {.qp = qp, .ret = 99};
    pthread_t t;
    pthread_create(&t, NULL, destroy_thread, &d);
    eng_msleep(100);
    CHECK(!atomic_load(&d.done));
    ibv_ack_async_event(&ev);
    pthread_join(t, NULL);
    CHECK_EQ(d.ret, 0);
    CHECK(!fd_readable(ctx->async_fd));

    /* references: destroy waits for other holders (e.g. poll-driven progress) */
    qp = make_qp(pd, cq, cq, NULL);
    uiw_qp_get(to_uqp(qp));
    struct destroyer d2 = {.qp = qp, .ret = 99};
    pthread_create(&t, NULL, destroy_thread, &d2);
    {
        /* destroy takes the QP off the CQ first, then waits for our
         * reference (however slowly the thread gets to run here) */
        unsigned nqps = 1;
        for (int i = 0; i < 1000 && nqps; i++) {
            eng_msleep(10);
            pthread_mutex_lock(&to_ucq(cq)->lock);
            nqps = to_ucq(cq)->nqps;
            pthread_mutex_unlock(&to_ucq(cq)->lock);
        }
        CHECK_EQ(nqps, 0); /* off the CQ */
    }
    eng_msleep(50);
    CHECK(!atomic_load(&d2.done)); /* but still waiting */
    uiw_qp_put(to_uqp(qp));
    pthread_join(t, NULL);
    CHECK_EQ(d2.ret, 0);

    /* CQ async events are waited for as well */
    uiw_async_event(to_uctx(ctx), IBV_EVENT_CQ_ERR, cq);
    CHECK_EQ(ibv_get_async_event(ctx, &ev), 0);
    struct destroyer d3 = {.cq = cq, .ret = 99};
    pthread_create(&t, NULL, destroy_thread, &d3);
    eng_msleep(100);
    CHECK(!atomic_load(&d3.done));
    ibv_ack_async_event(&ev);
    pthread_join(t, NULL);
    CHECK_EQ(d3.ret, 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
}

/* ------------------------------------------------------------------------ */

static void test_strings(void)
{
    CHECK_STR(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
    CHECK_STR(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
    CHECK_STR(ibv_wc_status_str((enum ibv_wc_status)999), "unknown");
    CHECK_STR(ibv_event_type_str(IBV_EVENT_SRQ_LIMIT_REACHED), "SRQ limit reached");
    CHECK_STR(ibv_event_type_str((enum ibv_event_type) - 1), "unknown");
    CHECK_STR(ibv_node_type_str(IBV_NODE_RNIC), "iWARP NIC");
    CHECK_STR(ibv_port_state_str(IBV_PORT_ACTIVE), "PORT_ACTIVE");
    CHECK_EQ(ibv_fork_init(), 0);
    CHECK_EQ(ibv_rate_to_mult(IBV_RATE_10_GBPS), 4);
    CHECK_EQ(ibv_rate_to_mbps(IBV_RATE_25_GBPS), 25781);
}

/* ------------------------------------------------------------------------
 * Configuration: a child process with UIWARP_* set
 * ---------------------------------------------------------------------- */

static int config_child(void)
{
    const struct uiw_config *c = uiw_config();
    printf("rev=%u crc=%u markers=%d p2p=%d rtr=%u timeout=%u fpdu=%u zcopy=%u debug=%d spin=%u\n",
           c->mpa_rev, c->crc, c->markers, c->p2p, c->rtr, c->mpa_timeout_ms, c->max_fpdu,
           c->zcopy_min, c->debug, c->progress_spin_us);
    return 0;
}

static void timer_fired(void *arg)
{
    atomic_store((atomic_int *)arg, 1);
}

/* The nice value of the thread named uiw-progress (field 19 of its stat),
 * or 99 if there is none. */
static int progress_thread_nice(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int nice = 99;

    if (!d)
        return 99;
    while ((e = readdir(d))) {
        char path[300], buf[512];
        FILE *f;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        f = fopen(path, "r");
        if (!f)
            continue;
        bool ours = fgets(buf, sizeof(buf), f) && strcmp(buf, "uiw-progress\n") == 0;
        fclose(f);
        if (!ours)
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        f = fopen(path, "r");
        if (f && fgets(buf, sizeof(buf), f)) {
            /* after "(comm)": state is field 3, nice field 19 */
            char *p = strrchr(buf, ')');
            int field = 2;
            for (; p && *p && field < 19; p++)
                if (*p == ' ')
                    field++;
            if (p)
                nice = atoi(p);
        }
        if (f)
            fclose(f);
    }
    closedir(d);
    return nice;
}

/* The configured nice value and the progress thread's, once it runs;
 * unprivileged: as root, become nobody first (no CAP_SYS_NICE) */
static int nice_child(bool unprivileged)
{
    const struct uiw_config *c;
    atomic_int fired = 0;

    if (unprivileged && geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        return 1;
    c = uiw_config();
    if (uiw_progress_timer(0, timer_fired, &fired, NULL) != 0)
        return 1;
    while (!atomic_load(&fired))
        usleep(1000);
    if (c->progress_nice_set)
        printf("nice=%d thread=%d\n", c->progress_nice, progress_thread_nice());
    else
        printf("nice=off thread=%d\n", progress_thread_nice());
    return 0;
}

/* Could this process give a thread nice -20? (CAP_SYS_NICE or RLIMIT_NICE) */
static bool may_lower_nice(void)
{
    pid_t pid = fork();
    int st;

    if (pid == 0)
        _exit(setpriority(PRIO_PROCESS, 0, -20) == 0 ? 0 : 1);
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void run_child(const char *mode, const char *const *env, char *out, size_t outsz, char *err,
                      size_t errsz)
{
    int po[2], pe[2];
    pid_t pid;

    CHECK_EQ(pipe(po), 0);
    CHECK_EQ(pipe(pe), 0);
    pid = fork();
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        clearenv();
        for (int i = 0; env[i]; i++)
            putenv((char *)env[i]);
        execl("/proc/self/exe", "test_objects", mode, (char *)NULL);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    ssize_t n = read(po[0], out, outsz - 1);
    out[n > 0 ? n : 0] = 0;
    size_t have = 0;
    for (;;) {
        ssize_t r = read(pe[0], err + have, errsz - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    err[have] = 0;
    close(po[0]);
    close(pe[0]);
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void run_config(const char *const *env, char *out, size_t outsz, char *err, size_t errsz)
{
    run_child("--config-child", env, out, outsz, err, errsz);
}

/* One --nice-child run: the configured value and the thread's actual one;
 * stderr empty, or naming the bad value */
static void check_nice(const char *const *env, const char *cfg, int thread, bool bad_value)
{
    char out[256], err[1024], want[64];

    run_child("--nice-child", env, out, sizeof(out), err, sizeof(err));
    snprintf(want, sizeof(want), "nice=%s thread=%d\n", cfg, thread);
    CHECK_STR(out, want);
    if (bad_value)
        CHECK(strstr(err, "uiwarp: ignoring UIWARP_PROGRESS_NICE=\"-21\"") != NULL);
    else
        CHECK_STR(err, "");
}

/* UIWARP_PROGRESS_NICE: the progress thread's nice value (default: the
 * process's; a lower value when permitted) */
static void test_progress_nice(void)
{
    static const char *const none[] = {NULL};
    static const char *const five[] = {"UIWARP_PROGRESS_NICE=5", NULL};
    static const char *const m20[] = {"UIWARP_PROGRESS_NICE=-20", NULL};
    static const char *const off[] = {"UIWARP_PROGRESS_NICE=off", NULL};
    static const char *const bad[] = {"UIWARP_PROGRESS_NICE=-21", NULL};
    int base = getpriority(PRIO_PROCESS, 0);
    int best = may_lower_nice() ? -20 : base;

    check_nice(none, "off", base, false);
    check_nice(m20, "-20", best, false);
    check_nice(five, "5", base > 5 ? base : 5, false); /* a higher value is always allowed */
    check_nice(off, "off", base, false);
    check_nice(bad, "off", base, true);

    /* not permitted: the thread keeps the process's value, said at debug level */
    if (geteuid() == 0) {
        static const char *const m20dbg[] = {"UIWARP_PROGRESS_NICE=-20", "UIWARP_DEBUG=1", NULL};
        char out[256], err[1024], want[128];

        run_child("--nice-child-nobody", m20dbg, out, sizeof(out), err, sizeof(err));
        snprintf(want, sizeof(want), "nice=-20 thread=%d\n", base);
        CHECK_STR(out, want);
        snprintf(want, sizeof(want),
                 "uiwarp: progress thread: nice -20: Permission denied (kept %d)\n", base);
        CHECK(strstr(err, want) != NULL);
    }
}

static void test_config(void)
{
    char out[512], err[4096];
    static const char *const none[] = {NULL};
    static const char *const good[] = {"UIWARP_MPA_REV=1",
                                       "UIWARP_CRC=required",
                                       "UIWARP_MARKERS=1",
                                       "UIWARP_P2P=0",
                                       "UIWARP_RTR=send, write",
                                       "UIWARP_MPA_TIMEOUT_MS=500",
                                       "UIWARP_MAX_FPDU=1460",
                                       "UIWARP_ZCOPY_MIN=0",
                                       "UIWARP_DEBUG=0",
                                       "UIWARP_PROGRESS_SPIN_US=0",
                                       NULL};
    static const char *const bad[] = {"UIWARP_MPA_REV=3",
                                      "UIWARP_CRC=maybe",
                                      "UIWARP_MARKERS=yes",
                                      "UIWARP_P2P=2",
                                      "UIWARP_RTR=write,fast",
                                      "UIWARP_MPA_TIMEOUT_MS=0",
                                      "UIWARP_MAX_FPDU=10",
                                      "UIWARP_ZCOPY_MIN=-5",
                                      "UIWARP_DEBUG=9",
                                      "UIWARP_PROGRESS_SPIN_US=100001",
                                      NULL};

    run_config(none, out, sizeof(out), err, sizeof(err));
    CHECK_STR(
        out,
        "rev=2 crc=1 markers=0 p2p=1 rtr=6 timeout=10000 fpdu=0 zcopy=4096 debug=0 spin=200\n");
    CHECK_STR(err, "");
    run_config(good, out, sizeof(out), err, sizeof(err));
    CHECK_STR(out,
              "rev=1 crc=2 markers=1 p2p=0 rtr=3 timeout=500 fpdu=1460 zcopy=0 debug=0 spin=0\n");
    CHECK_STR(err, "");
    /* MPA revision 1 has no RTR (RFC 6581 §4): client-server, said only
     * when P2P was asked for explicitly */
    static const char *const rev1[] = {"UIWARP_MPA_REV=1", NULL};
    run_config(rev1, out, sizeof(out), err, sizeof(err));
    CHECK_STR(
        out,
        "rev=1 crc=1 markers=0 p2p=0 rtr=6 timeout=10000 fpdu=0 zcopy=4096 debug=0 spin=200\n");
    CHECK_STR(err, "");
    static const char *const rev1p2p[] = {"UIWARP_MPA_REV=1", "UIWARP_P2P=1", NULL};
    run_config(rev1p2p, out, sizeof(out), err, sizeof(err));
    CHECK_STR(
        out,
        "rev=1 crc=1 markers=0 p2p=0 rtr=6 timeout=10000 fpdu=0 zcopy=4096 debug=0 spin=200\n");
    CHECK_STR(err, "uiwarp: UIWARP_P2P=1 needs MPA revision 2; UIWARP_MPA_REV=1 connects "
                   "client-server\n");
    run_config(bad, out, sizeof(out), err, sizeof(err));
    CHECK_STR(
        out,
        "rev=2 crc=1 markers=0 p2p=1 rtr=6 timeout=10000 fpdu=0 zcopy=4096 debug=0 spin=200\n");
    static const char *const names[] = {"UIWARP_MPA_REV",  "UIWARP_CRC",
                                        "UIWARP_MARKERS",  "UIWARP_P2P",
                                        "UIWARP_RTR",      "UIWARP_MPA_TIMEOUT_MS",
                                        "UIWARP_MAX_FPDU", "UIWARP_ZCOPY_MIN",
                                        "UIWARP_DEBUG",    "UIWARP_PROGRESS_SPIN_US"};
    for (unsigned i = 0; i < 10; i++) {
        char want[64];
        snprintf(want, sizeof(want), "uiwarp: ignoring %s=", names[i]);
        CHECK(strstr(err, want) != NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--config-child") == 0)
        return config_child();
    if (argc > 1 && strcmp(argv[1], "--nice-child") == 0)
        return nice_child(false);
    if (argc > 1 && strcmp(argv[1], "--nice-child-nobody") == 0)
        return nice_child(true);
    test_devices();
    test_context();
    test_queries();
    test_async();
    test_pd_cq_lifecycle();
    test_cq_overflow();
    test_comp_channel();
    test_cq_threads();
    test_qp_create();
    test_qp_state_machine();
    test_flush();
    test_srq();
    test_qp_events();
    test_strings();
    test_config();
    test_progress_nice();
    CHECK_EQ(eng_async_drain(ctx, NULL), 0);
    CHECK_EQ(ibv_close_device(ctx), 0);
    TEST_MAIN_END();
}
