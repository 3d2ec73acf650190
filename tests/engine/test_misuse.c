/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * API misuse (issue 12 item 8): every verbs entry point of the engine
 * (the exported ibv_* of device.c, verbs.c, verbs_ex.c, qp.c, cq.c, mem.c,
 * compat.c, private34.c, and the context ops the inline verbs dispatch to)
 * called with NULL and invalid arguments, in wrong QP states, with too many
 * SGEs, too much inline data, bad access flags, bad opcodes and lengths
 * that overflow: each call fails with an errno, never crashes (the test
 * runs under ASan/UBSan and TSan builds too). The values are rdma-core's
 * and siw's where they define one (EINVAL for invalid input, ENOMEM for a
 * full queue, ENOTCONN for a send on an unconnected QP as siw, EBUSY for a
 * destroy of an object still in use, EOPNOTSUPP for what iWARP lacks).
 *
 * Objects that were destroyed cannot be detected by rdma-core either
 * (their memory is freed): the table covers the detectable form, destroying
 * an object that is still in use.
 *
 * The table is data: one row per misuse, the call and the errno it must
 * give. Functions that return an int give the errno (rdma-core style,
 * positive) or -1 with errno set; the ones returning a pointer give NULL
 * with errno set.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eng_test.h"
#include "misuse.h"
#include "testutil.h"

/* the fixture */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_comp_channel *ch;
static struct ibv_qp *qp_init, *qp_reset, *qp_srq, *qp_err;
static struct ibv_srq *srq;
static struct ibv_mr *mr;
static uint8_t buf[4096];
static struct ibv_sge sge[32];
static struct ibv_device **devs;

#define RET(name, want, expr)                                                                      \
    static intptr_t name(void)                                                                     \
    {                                                                                              \
        return (intptr_t)(expr);                                                                   \
    }

/* ------------------------------------------------------------------------
 * Work request helpers
 * ---------------------------------------------------------------------- */

static struct ibv_send_wr swr(enum ibv_wr_opcode op, int nsge, struct ibv_sge *s, unsigned flags)
{
    struct ibv_send_wr w;
    memset(&w, 0, sizeof(w));
    w.wr_id = 1;
    w.opcode = op;
    w.sg_list = s;
    w.num_sge = nsge;
    w.send_flags = flags;
    return w;
}

static int post_send(struct ibv_qp *q, struct ibv_send_wr w)
{
    struct ibv_send_wr *bad = NULL;
    int r = ibv_post_send(q, &w, &bad);
    if (r && bad != NULL && bad->wr_id != 1)
        return -1000; /* bad_wr must name the failed WR */
    if (r && !bad)
        return -1001;
    return r;
}

static int post_recv(struct ibv_qp *q, int nsge, struct ibv_sge *s)
{
    struct ibv_recv_wr w, *bad = NULL;
    int r;
    memset(&w, 0, sizeof(w));
    w.wr_id = 1;
    w.sg_list = s;
    w.num_sge = nsge;
    r = ibv_post_recv(q, &w, &bad);
    if (r && bad != &w)
        return -1000;
    return r;
}

static int post_srq(int nsge, struct ibv_sge *s)
{
    struct ibv_recv_wr w, *bad = NULL;
    int r;
    memset(&w, 0, sizeof(w));
    w.wr_id = 1;
    w.sg_list = s;
    w.num_sge = nsge;
    r = ibv_post_srq_recv(srq, &w, &bad);
    if (r && bad != &w)
        return -1000;
    return r;
}

static int post_srq_many(void)
{
    /* more than the SRQ holds: ENOMEM on the first that does not fit */
    int r = 0;
    for (int i = 0; i < 100000 && !r; i++)
        r = post_srq(1, sge);
    return r;
}

static int modify_state(struct ibv_qp *q, enum ibv_qp_state s)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = s;
    return ibv_modify_qp(q, &a, IBV_QP_STATE);
}

static int modify_access(int acc)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_access_flags = acc;
    return ibv_modify_qp(qp_init, &a, IBV_QP_ACCESS_FLAGS);
}

static struct ibv_qp *create_qp(struct ibv_pd *p, struct ibv_cq *s, struct ibv_cq *r,
                                enum ibv_qp_type t, unsigned wr, unsigned nsge, unsigned inl)
{
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = s;
    ia.recv_cq = r;
    ia.qp_type = t;
    ia.cap.max_send_wr = wr;
    ia.cap.max_recv_wr = wr;
    ia.cap.max_send_sge = nsge;
    ia.cap.max_recv_sge = nsge;
    ia.cap.max_inline_data = inl;
    return ibv_create_qp(p, &ia);
}

static struct ibv_srq *create_srq(struct ibv_pd *p, unsigned wr, unsigned nsge)
{
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr = wr;
    sa.attr.max_sge = nsge;
    return ibv_create_srq(p, &sa);
}

static int modify_srq(struct ibv_srq *s, unsigned limit, int mask)
{
    struct ibv_srq_attr a;
    memset(&a, 0, sizeof(a));
    a.srq_limit = limit;
    a.max_wr = 1u << 30;
    return ibv_modify_srq(s, &a, mask);
}

static struct ibv_cq_ex *create_cq_ex(struct ibv_context *c, unsigned cqe, uint64_t wc_flags,
                                      uint32_t comp_mask)
{
    struct ibv_cq_init_attr_ex a;
    memset(&a, 0, sizeof(a));
    a.cqe = cqe;
    a.wc_flags = wc_flags;
    a.comp_mask = comp_mask;
    return ibv_create_cq_ex(c, &a);
}

static struct ibv_qp *create_qp_ex(uint32_t comp_mask, uint64_t send_ops)
{
    struct ibv_qp_init_attr_ex a;
    memset(&a, 0, sizeof(a));
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.comp_mask = comp_mask;
    a.pd = (comp_mask & IBV_QP_INIT_ATTR_PD) ? pd : NULL;
    a.send_ops_flags = send_ops;
    return ibv_create_qp_ex(ctx, &a);
}

static int query_device_ex(uint32_t comp_mask)
{
    struct ibv_query_device_ex_input in = {.comp_mask = comp_mask};
    struct ibv_device_attr_ex a;
    return ibv_query_device_ex(ctx, &in, &a);
}

static int poll_neg(void)
{
    struct ibv_wc wc[1];
    return ibv_poll_cq(cq, -1, wc);
}

static int get_async_nonblock_empty(void)
{
    /* nothing queued on a non-blocking fd: -1 EAGAIN */
    struct ibv_async_event ev;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    int r;
    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    r = ibv_get_async_event(ctx, &ev);
    fcntl(ctx->async_fd, F_SETFL, fl);
    return r;
}

static int get_cq_event_nonblock_empty(void)
{
    struct ibv_cq *c;
    void *cc;
    int fl = fcntl(ch->fd, F_GETFL);
    int r;
    fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    r = ibv_get_cq_event(ch, &c, &cc);
    fcntl(ch->fd, F_SETFL, fl);
    return r;
}

static struct ibv_mr *reg(struct ibv_pd *p, void *a, size_t n, int acc)
{
    return ibv_reg_mr(p, a, n, acc);
}

static uint8_t inl_big[1024];

/* ------------------------------------------------------------------------
 * The rows
 * ---------------------------------------------------------------------- */

/* device.c */
RET(dev_name_null, EINVAL, ibv_get_device_name(NULL))
RET(dev_index_null, EINVAL, ibv_get_device_index(NULL))
RET(open_device_null, EINVAL, ibv_open_device(NULL))
RET(close_device_null, EINVAL, ibv_close_device(NULL))
RET(query_device_null_ctx, EINVAL, ({
        struct ibv_device_attr da;
        ibv_query_device(NULL, &da);
    }))
RET(query_device_null_attr, EINVAL, ibv_query_device(ctx, NULL))
RET(query_port_bad_port, EINVAL, ({
        struct ibv_port_attr pa;
        ibv_query_port(ctx, 7, &pa);
    }))
RET(query_gid_null, EINVAL, ibv_query_gid(ctx, 1, 0, NULL))
RET(query_gid_null_ctx, EINVAL, ({
        union ibv_gid g;
        ibv_query_gid(NULL, 1, 0, &g);
    }))
RET(query_gid_ex_null_ctx, EINVAL, ({
        struct ibv_gid_entry e;
        ibv_query_gid_ex(NULL, 1, 0, &e, 0);
    }))
RET(query_gid_bad_index, EINVAL, ({
        union ibv_gid g;
        ibv_query_gid(ctx, 1, 99, &g);
    }))
RET(query_gid_ex_null, EINVAL, ibv_query_gid_ex(ctx, 1, 0, NULL, 0))
RET(query_gid_ex_flags, EINVAL, ({
        struct ibv_gid_entry e;
        ibv_query_gid_ex(ctx, 1, 0, &e, 1);
    }))
RET(query_gid_table_null, EINVAL, ibv_query_gid_table(ctx, NULL, 4, 0))
RET(query_pkey_null, EINVAL, ibv_query_pkey(ctx, 1, 0, NULL))
RET(query_pkey_bad_index, EINVAL, ({
        __be16 k;
        ibv_query_pkey(ctx, 1, 99, &k);
    }))
RET(pkey_index_bad, EINVAL, ibv_get_pkey_index(ctx, 9, 0))
RET(get_async_null_ctx, EINVAL, ({
        struct ibv_async_event ev;
        ibv_get_async_event(NULL, &ev);
    }))
RET(get_async_null_ev, EINVAL, ibv_get_async_event(ctx, NULL))
RET(get_async_empty, EAGAIN, get_async_nonblock_empty())
RET(query_device_ex_mask, EINVAL, query_device_ex(1))

/* mem.c */
RET(alloc_pd_null, EINVAL, ibv_alloc_pd(NULL))
RET(dealloc_pd_null, EINVAL, ibv_dealloc_pd(NULL))
RET(dealloc_pd_busy, EBUSY, ibv_dealloc_pd(pd))
RET(reg_mr_null_pd, EINVAL, reg(NULL, buf, sizeof(buf), 0))
RET(reg_mr_null_addr, EINVAL, reg(pd, NULL, sizeof(buf), 0))
RET(reg_mr_zero_len, EINVAL, reg(pd, buf, 0, 0))
RET(reg_mr_wrap, EINVAL, reg(pd, (void *)(UINTPTR_MAX - 16), 4096, 0))
RET(reg_mr_bad_access, EINVAL, reg(pd, buf, sizeof(buf), 1 << 15))
/* verbs: remote write/atomic need local write */
RET(reg_mr_rw_no_lw, EINVAL, reg(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE))
RET(reg_mr_atomic_no_lw, EINVAL, reg(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_ATOMIC))
RET(reg_mr_iova_null_pd, EINVAL, ibv_reg_mr_iova(NULL, buf, sizeof(buf), 0, 0))
RET(reg_mr_iova2_wrap, EINVAL,
    ibv_reg_mr_iova2(pd, buf, sizeof(buf), UINT64_MAX - 8, IBV_ACCESS_LOCAL_WRITE))
RET(dereg_mr_null, EINVAL, ibv_dereg_mr(NULL))
RET(rereg_mr_null, EOPNOTSUPP, ibv_rereg_mr(NULL, 0, NULL, NULL, 0, 0) ? errno : 0)
RET(dmabuf_mr, EOPNOTSUPP, ibv_reg_dmabuf_mr(pd, 0, 4096, 0, -1, 0))

/* cq.c */
RET(create_cq_null_ctx, EINVAL, ibv_create_cq(NULL, 4, NULL, NULL, 0))
RET(create_cq_zero, EINVAL, ibv_create_cq(ctx, 0, NULL, NULL, 0))
RET(create_cq_neg, EINVAL, ibv_create_cq(ctx, -5, NULL, NULL, 0))
RET(create_cq_huge, EINVAL, ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0))
RET(create_cq_bad_vector, EINVAL, ibv_create_cq(ctx, 4, NULL, NULL, 99))
RET(destroy_cq_null, EINVAL, ibv_destroy_cq(NULL))
RET(destroy_cq_busy, EBUSY, ibv_destroy_cq(cq))
RET(resize_cq_null, EINVAL, ibv_resize_cq(NULL, 4))
RET(resize_cq_zero, EINVAL, ibv_resize_cq(cq, 0))
RET(resize_cq_huge, EINVAL, ibv_resize_cq(cq, 1 << 30))
RET(create_channel_null, EINVAL, ibv_create_comp_channel(NULL))
RET(destroy_channel_null, EINVAL, ibv_destroy_comp_channel(NULL))
RET(destroy_channel_busy, EBUSY, ibv_destroy_comp_channel(ch))
RET(get_cq_event_null, EINVAL, ({
        struct ibv_cq *c;
        void *cc;
        ibv_get_cq_event(NULL, &c, &cc);
    }))
RET(get_cq_event_null_out, EINVAL, ibv_get_cq_event(ch, NULL, NULL))
RET(get_cq_event_empty, EAGAIN, get_cq_event_nonblock_empty())
RET(poll_cq_negative, EINVAL, -poll_neg())
RET(poll_cq_null_wc, EINVAL, -ibv_poll_cq(cq, 1, NULL))
RET(notify_cq_bad, 0, ibv_req_notify_cq(cq, 7)) /* an int boolean */
RET(create_cq_ex_null, EINVAL, ibv_create_cq_ex(ctx, NULL))
RET(create_cq_ex_zero, EINVAL, create_cq_ex(ctx, 0, 0, 0))
RET(create_cq_ex_flags, EOPNOTSUPP, create_cq_ex(ctx, 4, 1ull << 40, 0))
RET(create_cq_ex_mask, EINVAL, create_cq_ex(ctx, 4, 0, 1u << 20))

/* qp.c */
RET(create_qp_null_pd, EINVAL, create_qp(NULL, cq, cq, IBV_QPT_RC, 4, 1, 0))
RET(create_qp_null_attr, EINVAL, ibv_create_qp(pd, NULL))
RET(create_qp_null_cq, EINVAL, create_qp(pd, NULL, cq, IBV_QPT_RC, 4, 1, 0))
RET(create_qp_ud, EOPNOTSUPP, create_qp(pd, cq, cq, IBV_QPT_UD, 4, 1, 0))
RET(create_qp_bad_type, EINVAL, create_qp(pd, cq, cq, (enum ibv_qp_type)77, 4, 1, 0))
RET(create_qp_many_wr, EINVAL, create_qp(pd, cq, cq, IBV_QPT_RC, 1u << 30, 1, 0))
RET(create_qp_many_sge, EINVAL, create_qp(pd, cq, cq, IBV_QPT_RC, 4, 1000, 0))
RET(create_qp_big_inline, EINVAL, create_qp(pd, cq, cq, IBV_QPT_RC, 4, 1, 1u << 20))
RET(destroy_qp_null, EINVAL, ibv_destroy_qp(NULL))
RET(query_qp_null, EINVAL, ({
        struct ibv_qp_attr qa;
        struct ibv_qp_init_attr qia;
        ibv_query_qp(NULL, &qa, 0, &qia);
    }))
RET(query_qp_null_attr, EINVAL, ibv_query_qp(qp_init, NULL, 0, NULL))
RET(modify_qp_null, EINVAL, ({
        struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(NULL, &qa, IBV_QP_STATE);
    }))
RET(modify_qp_null_attr, EINVAL, ibv_modify_qp(qp_init, NULL, IBV_QP_STATE))
RET(modify_qp_bad_state, EINVAL, modify_state(qp_init, (enum ibv_qp_state)42))
RET(modify_qp_init_to_sqd, EINVAL, modify_state(qp_init, IBV_QPS_SQD))
RET(modify_qp_reset_to_rts, EINVAL, modify_state(qp_reset, IBV_QPS_RTS))
RET(modify_qp_bad_access, EINVAL, modify_access(1 << 27))
RET(create_srq_null_pd, EINVAL, create_srq(NULL, 4, 1))
RET(create_srq_null_attr, EINVAL, ibv_create_srq(pd, NULL))
RET(create_srq_zero_wr, EINVAL, create_srq(pd, 0, 1))
RET(create_srq_many_wr, EINVAL, create_srq(pd, 1u << 30, 1))
RET(create_srq_many_sge, EINVAL, create_srq(pd, 4, 1000))
RET(destroy_srq_null, EINVAL, ibv_destroy_srq(NULL))
RET(destroy_srq_busy, EBUSY, ibv_destroy_srq(srq))
RET(modify_srq_null, EINVAL, modify_srq(NULL, 1, IBV_SRQ_LIMIT))
RET(modify_srq_null_attr, EINVAL, ibv_modify_srq(srq, NULL, IBV_SRQ_LIMIT))
RET(modify_srq_limit_too_big, EINVAL, modify_srq(srq, 1u << 20, IBV_SRQ_LIMIT))
RET(modify_srq_bad_mask, EINVAL, modify_srq(srq, 1, 1 << 10))
RET(query_srq_null, EINVAL, ({
        struct ibv_srq_attr sa;
        ibv_query_srq(NULL, &sa);
    }))
RET(query_srq_null_attr, EINVAL, ibv_query_srq(srq, NULL))

/* posting (context ops) */
RET(send_null_wr, EINVAL, ({
        struct ibv_send_wr *bad;
        ibv_post_send(qp_err, NULL, &bad);
    }))
RET(send_reset_state, EINVAL, post_send(qp_reset, swr(IBV_WR_SEND, 1, sge, 0)))
RET(send_init_state, ENOTCONN, post_send(qp_init, swr(IBV_WR_SEND, 1, sge, 0)))
RET(recv_null_wr, EINVAL, ({
        struct ibv_recv_wr *bad;
        ibv_post_recv(qp_init, NULL, &bad);
    }))
RET(recv_reset_state, EINVAL, post_recv(qp_reset, 1, sge))
RET(recv_null_sgl, EINVAL, post_recv(qp_init, 1, NULL))
RET(recv_neg_sge, EINVAL, post_recv(qp_init, -1, sge))
RET(recv_many_sge, EINVAL, post_recv(qp_init, 32, sge))
RET(recv_on_srq_qp, EINVAL, post_recv(qp_srq, 1, sge))
RET(srq_null_wr, EINVAL, ({
        struct ibv_recv_wr *bad;
        ibv_post_srq_recv(srq, NULL, &bad);
    }))
RET(srq_null_sgl, EINVAL, post_srq(1, NULL))
RET(srq_neg_sge, EINVAL, post_srq(-3, sge))
RET(srq_many_sge, EINVAL, post_srq(32, sge))
RET(send_null_bad, EINVAL, ({
        struct ibv_send_wr w = swr(IBV_WR_SEND, -1, sge, 0);
        ibv_post_send(qp_err, &w, NULL);
    }))
RET(recv_null_bad, EINVAL, ({
        struct ibv_recv_wr w = {.wr_id = 1, .sg_list = NULL, .num_sge = 1};
        ibv_post_recv(qp_init, &w, NULL);
    }))
RET(srq_null_bad, EINVAL, ({
        struct ibv_recv_wr w = {.wr_id = 1, .sg_list = NULL, .num_sge = 1};
        ibv_post_srq_recv(srq, &w, NULL);
    }))
RET(srq_full, ENOMEM, post_srq_many())
RET(qp_ex_null, EINVAL, ibv_qp_to_qp_ex(NULL) ? 0 : errno)
RET(create_qp_ex_no_pd, EINVAL, create_qp_ex(0, 0))
RET(create_qp_ex_bad_ops, EOPNOTSUPP,
    create_qp_ex(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, 1ull << 40))

/* verbs.c: what iWARP (siw) does not have */
RET(create_ah_null, EOPNOTSUPP, ibv_create_ah(pd, NULL))
RET(destroy_ah_null, EINVAL, ibv_destroy_ah(NULL))
RET(attach_mcast, EOPNOTSUPP, ibv_attach_mcast(qp_init, NULL, 0))
RET(detach_mcast, EOPNOTSUPP, ibv_detach_mcast(qp_init, NULL, 0))
RET(query_ece, EOPNOTSUPP, ibv_query_ece(qp_init, NULL))
RET(set_ece, EOPNOTSUPP, ibv_set_ece(qp_init, NULL))
RET(init_ah_from_wc, EOPNOTSUPP, ibv_init_ah_from_wc(ctx, 1, NULL, NULL, NULL))
RET(ah_from_wc, EOPNOTSUPP, ibv_create_ah_from_wc(pd, NULL, NULL, 1))
RET(alloc_mw_bad_type, EINVAL, ibv_alloc_mw(pd, (enum ibv_mw_type)9))
RET(alloc_td, EOPNOTSUPP, ibv_alloc_td(ctx, NULL))
RET(open_xrcd, EOPNOTSUPP, ibv_open_xrcd(ctx, NULL))
RET(create_wq, EOPNOTSUPP, ibv_create_wq(ctx, NULL))
RET(create_flow, EOPNOTSUPP, ibv_create_flow(qp_init, NULL))
RET(alloc_dm, EOPNOTSUPP, ibv_alloc_dm(ctx, NULL))
RET(str_bad_status, 0, strlen(ibv_wc_status_str((enum ibv_wc_status)999)) ? 0 : 1)
RET(str_bad_event, 0, strlen(ibv_event_type_str((enum ibv_event_type)999)) ? 0 : 1)
RET(str_bad_node, 0, strlen(ibv_node_type_str((enum ibv_node_type)999)) ? 0 : 1)
RET(str_bad_port, 0, strlen(ibv_port_state_str((enum ibv_port_state)999)) ? 0 : 1)

/* sends on a QP in RTS-less states are checked above; here the WR checks
 * of the engine's own post path on a QP in ERR (flushed at once) */
RET(send_err_bad_opcode, EINVAL, post_send(qp_err, swr((enum ibv_wr_opcode)77, 1, sge, 0)))
RET(send_err_neg_sge, EINVAL, post_send(qp_err, swr(IBV_WR_SEND, -1, sge, 0)))
RET(send_err_many_sge, EINVAL, post_send(qp_err, swr(IBV_WR_SEND, 32, sge, 0)))
RET(send_err_null_sgl, EINVAL, post_send(qp_err, swr(IBV_WR_SEND, 1, NULL, 0)))
RET(send_err_big_inline, EINVAL, ({
        struct ibv_sge s = {(uintptr_t)inl_big, sizeof(inl_big), 0};
        post_send(qp_err, swr(IBV_WR_SEND, 1, &s, IBV_SEND_INLINE));
    }))

/* compat.c: the IBVERBS_1.0 ABI (old binaries), NULL objects */
static void *v10(const char *name)
{
    void *f = dlvsym(RTLD_DEFAULT, name, "IBVERBS_1.0");
    CHECK(f != NULL);
    return f;
}
typedef int (*fn_int_p)(void *);
typedef void *(*fn_ptr_p)(void *);
#define V10_INT1(name) ((fn_int_p)v10("ibv_" #name))(NULL)
#define V10_PTR1(name) ((fn_ptr_p)v10("ibv_" #name))(NULL)
RET(c10_get_device_name, EINVAL, V10_PTR1(get_device_name))
RET(c10_get_device_guid, EINVAL,
    ((uint64_t(*)(void *))v10("ibv_get_device_guid"))(NULL) ? 1 : errno)
RET(c10_free_device_list, 0, (((void (*)(void *))v10("ibv_free_device_list"))(NULL), 0))
RET(c10_open_device, ENODEV, V10_PTR1(open_device))
RET(c10_close_device, EINVAL, V10_INT1(close_device))
RET(c10_get_async_event, EINVAL, ({
        struct ibv_async_event ev;
        ((int (*)(void *, void *))v10("ibv_get_async_event"))(NULL, &ev);
    }))
RET(c10_ack_async_event, 0, (((void (*)(void *))v10("ibv_ack_async_event"))(NULL), 0))
RET(c10_query_device, EINVAL, ({
        struct ibv_device_attr da;
        ((int (*)(void *, void *))v10("ibv_query_device"))(NULL, &da);
    }))
RET(c10_query_port, EINVAL, ({
        struct ibv_port_attr pa;
        ((int (*)(void *, uint8_t, void *))v10("ibv_query_port"))(NULL, 1, &pa);
    }))
RET(c10_query_gid, EINVAL, ({
        union ibv_gid g;
        ((int (*)(void *, uint8_t, int, void *))v10("ibv_query_gid"))(NULL, 1, 0, &g);
    }))
RET(c10_query_pkey, EINVAL, ({
        __be16 k;
        ((int (*)(void *, uint8_t, int, void *))v10("ibv_query_pkey"))(NULL, 1, 0, &k);
    }))
RET(c10_alloc_pd, EINVAL, V10_PTR1(alloc_pd))
RET(c10_dealloc_pd, EINVAL, V10_INT1(dealloc_pd))
RET(c10_reg_mr, EINVAL,
    ((void *(*)(void *, void *, size_t, int))v10("ibv_reg_mr"))(NULL, buf, sizeof(buf), 0))
RET(c10_dereg_mr, EINVAL, V10_INT1(dereg_mr))
RET(c10_create_cq, EINVAL,
    ((void *(*)(void *, int, void *, void *, int))v10("ibv_create_cq"))(NULL, 4, NULL, NULL, 0))
RET(c10_resize_cq, EINVAL, ((int (*)(void *, int))v10("ibv_resize_cq"))(NULL, 4))
RET(c10_destroy_cq, EINVAL, V10_INT1(destroy_cq))
RET(c10_get_cq_event, EINVAL,
    ((int (*)(void *, void *, void *))v10("ibv_get_cq_event"))(ch, NULL, NULL))
RET(c10_ack_cq_events, 0, (((void (*)(void *, unsigned))v10("ibv_ack_cq_events"))(NULL, 1), 0))
RET(c10_create_srq, EINVAL, ((void *(*)(void *, void *))v10("ibv_create_srq"))(NULL, NULL))
RET(c10_modify_srq, EINVAL, ({
        struct ibv_srq_attr sa = {.srq_limit = 1};
        ((int (*)(void *, void *, int))v10("ibv_modify_srq"))(NULL, &sa, IBV_SRQ_LIMIT);
    }))
RET(c10_query_srq, EINVAL, ({
        struct ibv_srq_attr sa;
        ((int (*)(void *, void *))v10("ibv_query_srq"))(NULL, &sa);
    }))
RET(c10_destroy_srq, EINVAL, V10_INT1(destroy_srq))
RET(c10_create_qp, EINVAL, ((void *(*)(void *, void *))v10("ibv_create_qp"))(NULL, NULL))
RET(c10_query_qp, EINVAL, ({
        struct ibv_qp_attr qa;
        ((int (*)(void *, void *, int, void *))v10("ibv_query_qp"))(NULL, &qa, 0, NULL);
    }))
RET(c10_modify_qp, EINVAL, ({
        struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
        ((int (*)(void *, void *, int))v10("ibv_modify_qp"))(NULL, &qa, IBV_QP_STATE);
    }))
RET(c10_destroy_qp, EINVAL, V10_INT1(destroy_qp))
RET(c10_create_ah, EOPNOTSUPP, ((void *(*)(void *, void *))v10("ibv_create_ah"))(NULL, NULL))
RET(c10_destroy_ah, EINVAL, V10_INT1(destroy_ah))
RET(c10_attach_mcast, EINVAL,
    ((int (*)(void *, void *, uint16_t))v10("ibv_attach_mcast"))(NULL, NULL, 0))
RET(c10_detach_mcast, EINVAL,
    ((int (*)(void *, void *, uint16_t))v10("ibv_detach_mcast"))(NULL, NULL, 0))

/* private34.c: the provider interface (stubs; arguments never read) */
RET(p34_cmd_stub, EOPNOTSUPP, ((int (*)(void *))dlsym(RTLD_DEFAULT, "ibv_cmd_dereg_mr"))(NULL))
RET(p34_gid_type_null_ctx, EINVAL, ({
        int t;
        ((int (*)(void *, uint8_t, unsigned, int *))dlsym(RTLD_DEFAULT, "ibv_query_gid_type"))(
            NULL, 1, 0, &t);
    }))
RET(p34_gid_type_null_out, EINVAL,
    ((int (*)(void *, uint8_t, unsigned, int *))dlsym(RTLD_DEFAULT, "ibv_query_gid_type"))(ctx, 1,
                                                                                           0, NULL))
RET(p34_alloc_context, EOPNOTSUPP,
    ((void *(*)(void *, int, size_t, void *, uint32_t))
         dlsym(RTLD_DEFAULT, "_verbs_init_and_alloc_context"))(NULL, -1, 0, NULL, 0))

static const struct row rows[] = {
    ROW(K_PTR, EINVAL, dev_name_null),
    ROW(K_NEG, EINVAL, dev_index_null),
    ROW(K_PTR, ENODEV, open_device_null),
    ROW(K_RET, EINVAL, close_device_null),
    ROW(K_RET, EINVAL, query_device_null_ctx),
    ROW(K_RET, EINVAL, query_device_null_attr),
    ROW(K_RET, EINVAL, query_port_bad_port),
    ROW(K_NEG, EINVAL, query_gid_null),
    ROW(K_NEG, EINVAL, query_gid_null_ctx),
    ROW(K_RET, EINVAL, query_gid_ex_null_ctx),
    ROW(K_NEG, EINVAL, query_gid_bad_index),
    ROW(K_RET, EINVAL, query_gid_ex_null),
    ROW(K_RET, EINVAL, query_gid_ex_flags),
    ROW(K_RET, -EINVAL, query_gid_table_null),
    ROW(K_NEG, EINVAL, query_pkey_null),
    ROW(K_NEG, EINVAL, query_pkey_bad_index),
    ROW(K_NEG, EINVAL, pkey_index_bad),
    ROW(K_NEG, EINVAL, get_async_null_ctx),
    ROW(K_NEG, EINVAL, get_async_null_ev),
    ROW(K_NEG, EAGAIN, get_async_empty),
    ROW(K_RET, EINVAL, query_device_ex_mask),
    ROW(K_PTR, EINVAL, alloc_pd_null),
    ROW(K_RET, EINVAL, dealloc_pd_null),
    ROW(K_RET, EBUSY, dealloc_pd_busy),
    ROW(K_PTR, EINVAL, reg_mr_null_pd),
    ROW(K_PTR, EFAULT, reg_mr_null_addr),
    ROW(K_PTR, EINVAL, reg_mr_zero_len),
    ROW(K_PTR, EINVAL, reg_mr_wrap),
    ROW(K_PTR, EINVAL, reg_mr_bad_access),
    ROW(K_PTR, EINVAL, reg_mr_rw_no_lw),
    ROW(K_PTR, EINVAL, reg_mr_atomic_no_lw),
    ROW(K_PTR, EINVAL, reg_mr_iova_null_pd),
    ROW(K_PTR, EINVAL, reg_mr_iova2_wrap),
    ROW(K_RET, EINVAL, dereg_mr_null),
    ROW(K_RET, EOPNOTSUPP, rereg_mr_null),
    ROW(K_PTR, EOPNOTSUPP, dmabuf_mr),
    ROW(K_PTR, EINVAL, create_cq_null_ctx),
    ROW(K_PTR, EINVAL, create_cq_zero),
    ROW(K_PTR, EINVAL, create_cq_neg),
    ROW(K_PTR, EINVAL, create_cq_huge),
    ROW(K_PTR, EINVAL, create_cq_bad_vector),
    ROW(K_RET, EINVAL, destroy_cq_null),
    ROW(K_RET, EBUSY, destroy_cq_busy),
    ROW(K_RET, EINVAL, resize_cq_null),
    ROW(K_RET, EINVAL, resize_cq_zero),
    ROW(K_RET, EINVAL, resize_cq_huge),
    ROW(K_PTR, EINVAL, create_channel_null),
    ROW(K_RET, EINVAL, destroy_channel_null),
    ROW(K_RET, EBUSY, destroy_channel_busy),
    ROW(K_NEG, EINVAL, get_cq_event_null),
    ROW(K_NEG, EINVAL, get_cq_event_null_out),
    ROW(K_NEG, EAGAIN, get_cq_event_empty),
    ROW(K_RET, EINVAL, poll_cq_negative),
    ROW(K_RET, EINVAL, poll_cq_null_wc),
    ROW(K_RET, 0, notify_cq_bad),
    ROW(K_PTR, EINVAL, create_cq_ex_null),
    ROW(K_PTR, EINVAL, create_cq_ex_zero),
    ROW(K_PTR, EOPNOTSUPP, create_cq_ex_flags),
    ROW(K_PTR, EINVAL, create_cq_ex_mask),
    ROW(K_PTR, EINVAL, create_qp_null_pd),
    ROW(K_PTR, EINVAL, create_qp_null_attr),
    ROW(K_PTR, EINVAL, create_qp_null_cq),
    ROW(K_PTR, EOPNOTSUPP, create_qp_ud),
    ROW(K_PTR, EINVAL, create_qp_bad_type),
    ROW(K_PTR, EINVAL, create_qp_many_wr),
    ROW(K_PTR, EINVAL, create_qp_many_sge),
    ROW(K_PTR, EINVAL, create_qp_big_inline),
    ROW(K_RET, EINVAL, destroy_qp_null),
    ROW(K_RET, EINVAL, query_qp_null),
    ROW(K_RET, EINVAL, query_qp_null_attr),
    ROW(K_RET, EINVAL, modify_qp_null),
    ROW(K_RET, EINVAL, modify_qp_null_attr),
    ROW(K_RET, EINVAL, modify_qp_bad_state),
    ROW(K_RET, EINVAL, modify_qp_init_to_sqd),
    ROW(K_RET, EINVAL, modify_qp_reset_to_rts),
    ROW(K_RET, EINVAL, modify_qp_bad_access),
    ROW(K_PTR, EINVAL, create_srq_null_pd),
    ROW(K_PTR, EINVAL, create_srq_null_attr),
    ROW(K_PTR, EINVAL, create_srq_zero_wr),
    ROW(K_PTR, EINVAL, create_srq_many_wr),
    ROW(K_PTR, EINVAL, create_srq_many_sge),
    ROW(K_RET, EINVAL, destroy_srq_null),
    ROW(K_RET, EBUSY, destroy_srq_busy),
    ROW(K_RET, EINVAL, modify_srq_null),
    ROW(K_RET, EINVAL, modify_srq_null_attr),
    ROW(K_RET, EINVAL, modify_srq_limit_too_big),
    ROW(K_RET, EINVAL, modify_srq_bad_mask),
    ROW(K_RET, EINVAL, query_srq_null),
    ROW(K_RET, EINVAL, query_srq_null_attr),
    ROW(K_RET, 0, send_null_wr),
    ROW(K_RET, EINVAL, send_reset_state),
    ROW(K_RET, ENOTCONN, send_init_state),
    ROW(K_RET, 0, recv_null_wr),
    ROW(K_RET, EINVAL, recv_reset_state),
    ROW(K_RET, EINVAL, recv_null_sgl),
    ROW(K_RET, EINVAL, recv_neg_sge),
    ROW(K_RET, EINVAL, recv_many_sge),
    ROW(K_RET, EINVAL, recv_on_srq_qp),
    ROW(K_RET, 0, srq_null_wr),
    ROW(K_RET, EINVAL, srq_null_sgl),
    ROW(K_RET, EINVAL, srq_neg_sge),
    ROW(K_RET, EINVAL, srq_many_sge),
    ROW(K_RET, EINVAL, send_null_bad),
    ROW(K_RET, EINVAL, recv_null_bad),
    ROW(K_RET, EINVAL, srq_null_bad),
    ROW(K_RET, ENOMEM, srq_full),
    ROW(K_RET, EINVAL, qp_ex_null),
    ROW(K_PTR, EINVAL, create_qp_ex_no_pd),
    ROW(K_PTR, EOPNOTSUPP, create_qp_ex_bad_ops),
    ROW(K_PTR, EOPNOTSUPP, create_ah_null),
    ROW(K_RET, EOPNOTSUPP, destroy_ah_null),
    ROW(K_RET, EOPNOTSUPP, attach_mcast),
    ROW(K_RET, EOPNOTSUPP, detach_mcast),
    ROW(K_RET, EOPNOTSUPP, query_ece),
    ROW(K_RET, EOPNOTSUPP, set_ece),
    ROW(K_NEG, EOPNOTSUPP, init_ah_from_wc),
    ROW(K_PTR, EOPNOTSUPP, ah_from_wc),
    ROW(K_PTR, EINVAL, alloc_mw_bad_type),
    ROW(K_PTR, EOPNOTSUPP, alloc_td),
    ROW(K_PTR, EOPNOTSUPP, open_xrcd),
    ROW(K_PTR, EOPNOTSUPP, create_wq),
    ROW(K_PTR, EOPNOTSUPP, create_flow),
    ROW(K_PTR, EOPNOTSUPP, alloc_dm),
    ROW(K_RET, 0, str_bad_status),
    ROW(K_RET, 0, str_bad_event),
    ROW(K_RET, 0, str_bad_node),
    ROW(K_RET, 0, str_bad_port),
    ROW(K_RET, EINVAL, send_err_bad_opcode),
    ROW(K_RET, EINVAL, send_err_neg_sge),
    ROW(K_RET, EINVAL, send_err_many_sge),
    ROW(K_RET, EINVAL, send_err_null_sgl),
    ROW(K_RET, EINVAL, send_err_big_inline),
    ROW(K_PTR, EINVAL, c10_get_device_name),
    ROW(K_RET, EINVAL, c10_get_device_guid),
    ROW(K_RET, 0, c10_free_device_list),
    ROW(K_PTR, ENODEV, c10_open_device),
    ROW(K_RET, EINVAL, c10_close_device),
    ROW(K_NEG, EINVAL, c10_get_async_event),
    ROW(K_RET, 0, c10_ack_async_event),
    ROW(K_RET, EINVAL, c10_query_device),
    ROW(K_RET, EINVAL, c10_query_port),
    ROW(K_RET, EINVAL, c10_query_gid),
    ROW(K_RET, EINVAL, c10_query_pkey),
    ROW(K_PTR, EINVAL, c10_alloc_pd),
    ROW(K_RET, EINVAL, c10_dealloc_pd),
    ROW(K_PTR, EINVAL, c10_reg_mr),
    ROW(K_RET, EINVAL, c10_dereg_mr),
    ROW(K_PTR, EINVAL, c10_create_cq),
    ROW(K_RET, EINVAL, c10_resize_cq),
    ROW(K_RET, EINVAL, c10_destroy_cq),
    ROW(K_NEG, EINVAL, c10_get_cq_event),
    ROW(K_RET, 0, c10_ack_cq_events),
    ROW(K_PTR, EINVAL, c10_create_srq),
    ROW(K_RET, EINVAL, c10_modify_srq),
    ROW(K_RET, EINVAL, c10_query_srq),
    ROW(K_RET, EINVAL, c10_destroy_srq),
    ROW(K_PTR, EINVAL, c10_create_qp),
    ROW(K_RET, EINVAL, c10_query_qp),
    ROW(K_RET, EINVAL, c10_modify_qp),
    ROW(K_RET, EINVAL, c10_destroy_qp),
    ROW(K_PTR, EOPNOTSUPP, c10_create_ah),
    ROW(K_RET, EINVAL, c10_destroy_ah),
    ROW(K_RET, EINVAL, c10_attach_mcast),
    ROW(K_RET, EINVAL, c10_detach_mcast),
    ROW(K_RET, EOPNOTSUPP, p34_cmd_stub),
    ROW(K_NEG, EINVAL, p34_gid_type_null_ctx),
    ROW(K_NEG, EINVAL, p34_gid_type_null_out),
    ROW(K_PTR, EOPNOTSUPP, p34_alloc_context),
};

static void setup(void)
{
    struct ibv_qp_cap cap = {.max_send_wr = 8,
                             .max_recv_wr = 8,
                             .max_send_sge = 2,
                             .max_recv_sge = 2,
                             .max_inline_data = 64};
    int n = 0;

    devs = ibv_get_device_list(&n);
    ctx = eng_open_lo(true);
    CHECK(ctx != NULL);
    pd = ibv_alloc_pd(ctx);
    ch = ibv_create_comp_channel(ctx);
    cq = ibv_create_cq(ctx, 64, NULL, ch, 0);
    srq = create_srq(pd, 16, 2);
    mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    CHECK(pd && ch && cq && srq && mr);
    for (size_t i = 0; i < sizeof(sge) / sizeof(sge[0]); i++)
        sge[i] = (struct ibv_sge){(uintptr_t)buf, 16, mr->lkey};
    qp_init = eng_qp_init(pd, cq, cq, NULL, cap, false, ENG_ACCESS_ALL, 0);
    qp_srq = eng_qp_init(pd, cq, cq, srq, cap, false, ENG_ACCESS_ALL, 0);
    qp_err = eng_qp_init(pd, cq, cq, NULL, cap, false, ENG_ACCESS_ALL, 0);
    qp_reset = create_qp(pd, cq, cq, IBV_QPT_RC, 8, 2, 0);
    CHECK(qp_init && qp_srq && qp_err && qp_reset);
    CHECK_EQ(modify_state(qp_err, IBV_QPS_ERR), 0);
    /* a new QP is in INIT (as siw's): RESET is reached by modify_qp */
    CHECK_EQ(qp_reset->state, IBV_QPS_INIT);
    CHECK_EQ(modify_state(qp_reset, IBV_QPS_RESET), 0);
}

static void teardown(void)
{
    struct ibv_wc wc[16];

    while (ibv_poll_cq(cq, 16, wc) > 0)
        ;
    CHECK_EQ(ibv_destroy_qp(qp_init), 0);
    CHECK_EQ(ibv_destroy_qp(qp_srq), 0);
    CHECK_EQ(ibv_destroy_qp(qp_err), 0);
    CHECK_EQ(ibv_destroy_qp(qp_reset), 0);
    CHECK_EQ(ibv_destroy_srq(srq), 0);
    CHECK_EQ(ibv_destroy_cq(cq), 0);
    CHECK_EQ(ibv_destroy_comp_channel(ch), 0);
    CHECK_EQ(ibv_dereg_mr(mr), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
    {
        /* drain async events (QP_LAST_WQE_REACHED of qp_srq...) */
        struct ibv_async_event ev;
        int fl = fcntl(ctx->async_fd, F_GETFL);
        fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
        while (ibv_get_async_event(ctx, &ev) == 0)
            ibv_ack_async_event(&ev);
    }
    CHECK_EQ(ibv_close_device(ctx), 0);
    ibv_free_device_list(devs);
}

int main(void)
{
    unsigned n = sizeof(rows) / sizeof(rows[0]);

    setup();
    if (!ctx)
        TEST_MAIN_END();
    if (misuse_fork_diag(rows, n))
        return 0;
    misuse_run(rows, n, "misuse");
    teardown();
    TEST_MAIN_END();
}
