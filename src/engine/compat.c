/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * ABI compatibility exports of rdma-core 44's libibverbs.so.1 that are not
 * verbs of their own (the exact version nodes are in libibverbs.map):
 *
 *  - The IBVERBS_1.0 ABI of the core verbs. libibverbs 1.0 applications
 *    (2006) see different public structs: a device list of wrappers, and a
 *    context, PD, MR, CQ, SRQ, QP and AH each with an older layout ending
 *    in a pointer to the real object. Every 1.0 verb wraps the current one
 *    and keeps both objects linked (the real object's *_context points at
 *    its 1.0 wrapper, so events can be translated back), the 1.0 context's
 *    op table carries poll/notify/post wrappers that convert the old work
 *    request layouts. Same semantics as rdma-core's compat layer; the
 *    layouts are the historical ABI. Each is exported with
 *    a .symver directive (name@IBVERBS_1.0) next to the default
 *    name@@IBVERBS_1.1 implemented in device.c, mem.c, cq.c, qp.c, verbs.c.
 *  - ibv_register_driver@IBVERBS_1.1: a no-op kept only for old binaries
 *    (the provider interface is private).
 *  - The historical helpers other rdma-core libraries link against
 *    (librdmacm): kernel-ABI struct conversions and sysfs reading.
 *  - Import/unimport (objects shared through a uverbs command fd: there is
 *    none here) and ibv_resolve_eth_l2_from_gid (RoCE only).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/sa.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>

#include "engine.h"

#undef ibv_query_port
#undef ibv_reg_mr

/* ibv_NAME@IBVERBS_1.0 is uiw_NAME_1_0. A .symver directive rather than
 * gcc's symver attribute, which clang does not have (same result). */
#define SYMVER(impl, name_ver) __asm__(".symver " impl ", " name_ver)
#define COMPAT_1_0(name)       SYMVER("uiw_" #name "_1_0", "ibv_" #name "@IBVERBS_1.0")

/* The 1.0 verbs that call the current verb on the real object: params and
 * args are parenthesised lists of what follows the object, each with a
 * leading comma (or empty). */
#define ARGS(...) __VA_ARGS__
/* The real object of a 1.0 wrapper, NULL for none (the real verb then
 * refuses it with EINVAL: API misuse is an errno, never a crash). */
#define REAL(w, obj) ((w) ? (w)->obj : NULL)
#define COMPAT_1_0_FORWARD(ret, name, type, obj, params, args)                                     \
    COMPAT_1_0(name);                                                                              \
    ret uiw_##name##_1_0(struct type *w ARGS params)                                               \
    {                                                                                              \
        if (!w) {                                                                                  \
            errno = EINVAL;                                                                        \
            return _Generic((ret)0, int : EINVAL, default : (ret)0);                               \
        }                                                                                          \
        return ibv_##name(w->obj ARGS args);                                                       \
    }

/* The 1.0 destroy verbs: destroy the real object, then free the wrapper. */
#define COMPAT_1_0_DESTROY(name, type, obj)                                                        \
    COMPAT_1_0(name);                                                                              \
    int uiw_##name##_1_0(struct type *w)                                                           \
    {                                                                                              \
        int ret = w ? ibv_##name(w->obj) : EINVAL;                                                 \
                                                                                                   \
        if (!ret)                                                                                  \
            free(w);                                                                               \
        return ret;                                                                                \
    }

/* In a 1.0 create verb: allocate the wrapper w and create its real object
 * w->obj with `create`; return NULL from the verb if either fails (errno
 * ENOMEM, or as the real verb set it). */
#define NEW_WRAPPER(w, obj, create)                                                                \
    do {                                                                                           \
        (w) = uiw_zalloc(sizeof(*(w)));                                                            \
        if (!(w))                                                                                  \
            return NULL;                                                                           \
        (w)->obj = (create);                                                                       \
        if (!(w)->obj) {                                                                           \
            free(w);                                                                               \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------
 * IBVERBS_1.0 object layouts
 * ---------------------------------------------------------------------- */

struct ibv_context_1_0;
struct ibv_cq_1_0;
struct ibv_srq_1_0;
struct ibv_qp_1_0;

struct ibv_device_1_0 {
    void *obsolete_sysfs_dev;
    void *obsolete_sysfs_ibdev;
    struct ibv_device *real_device; /* was the driver pointer */
    struct _ibv_device_ops _ops;
};

struct ibv_pd_1_0 {
    struct ibv_context_1_0 *context;
    uint32_t handle;
    struct ibv_pd *real_pd;
};

struct ibv_mr_1_0 {
    struct ibv_context_1_0 *context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    uint32_t lkey;
    uint32_t rkey;
    struct ibv_mr *real_mr;
};

struct ibv_cq_1_0 {
    struct ibv_context_1_0 *context;
    void *cq_context;
    uint32_t handle;
    int cqe;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t comp_events_completed;
    uint32_t async_events_completed;
    struct ibv_cq *real_cq;
};

struct ibv_srq_1_0 {
    struct ibv_context_1_0 *context;
    void *srq_context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
    struct ibv_srq *real_srq;
};

struct ibv_qp_1_0 {
    struct ibv_context_1_0 *context;
    void *qp_context;
    struct ibv_pd_1_0 *pd;
    struct ibv_cq_1_0 *send_cq;
    struct ibv_cq_1_0 *recv_cq;
    struct ibv_srq_1_0 *srq;
    uint32_t handle;
    uint32_t qp_num;
    enum ibv_qp_state state;
    enum ibv_qp_type qp_type;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint32_t events_completed;
    struct ibv_qp *real_qp;
};

struct ibv_ah_1_0 {
    struct ibv_context_1_0 *context;
    struct ibv_pd_1_0 *pd;
    uint32_t handle;
    struct ibv_ah *real_ah;
};

struct ibv_qp_init_attr_1_0 {
    void *qp_context;
    struct ibv_cq_1_0 *send_cq;
    struct ibv_cq_1_0 *recv_cq;
    struct ibv_srq_1_0 *srq;
    struct ibv_qp_cap cap;
    enum ibv_qp_type qp_type;
    int sq_sig_all;
};

struct ibv_send_wr_1_0 {
    struct ibv_send_wr_1_0 *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
    enum ibv_wr_opcode opcode;
    int send_flags;
    uint32_t imm_data; /* network order */
    union {
        struct {
            uint64_t remote_addr;
            uint32_t rkey;
        } rdma;
        struct {
            uint64_t remote_addr;
            uint64_t compare_add;
            uint64_t swap;
            uint32_t rkey;
        } atomic;
        struct {
            struct ibv_ah_1_0 *ah;
            uint32_t remote_qpn;
            uint32_t remote_qkey;
        } ud;
    } wr;
};

struct ibv_recv_wr_1_0 {
    struct ibv_recv_wr_1_0 *next;
    uint64_t wr_id;
    struct ibv_sge *sg_list;
    int num_sge;
};

/* The 1.0 op table: 1.0 applications call the poll/notify/post slots
 * inline; the others were never called by applications. */
struct ibv_context_ops_1_0 {
    void *query_device, *query_port, *alloc_pd, *dealloc_pd, *reg_mr, *dereg_mr, *create_cq;
    int (*poll_cq)(struct ibv_cq_1_0 *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq_1_0 *cq, int solicited_only);
    void *cq_event, *resize_cq, *destroy_cq, *create_srq, *modify_srq, *query_srq, *destroy_srq;
    int (*post_srq_recv)(struct ibv_srq_1_0 *srq, struct ibv_recv_wr_1_0 *wr,
                         struct ibv_recv_wr_1_0 **bad);
    void *create_qp, *query_qp, *modify_qp, *destroy_qp;
    int (*post_send)(struct ibv_qp_1_0 *qp, struct ibv_send_wr_1_0 *wr,
                     struct ibv_send_wr_1_0 **bad);
    int (*post_recv)(struct ibv_qp_1_0 *qp, struct ibv_recv_wr_1_0 *wr,
                     struct ibv_recv_wr_1_0 **bad);
    void *create_ah, *destroy_ah, *attach_mcast, *detach_mcast;
};

struct ibv_context_1_0 {
    struct ibv_device_1_0 *device;
    struct ibv_context_ops_1_0 ops;
    int cmd_fd;
    int async_fd;
    int num_comp_vectors;
    struct ibv_context *real_context; /* was abi_compat */
};

/* Declarations of the compat implementations (their only names are the
 * versioned ones). */
struct ibv_device_1_0 **uiw_get_device_list_1_0(int *num);
void uiw_free_device_list_1_0(struct ibv_device_1_0 **list);
const char *uiw_get_device_name_1_0(struct ibv_device_1_0 *dev);
__be64 uiw_get_device_guid_1_0(struct ibv_device_1_0 *dev);
struct ibv_context_1_0 *uiw_open_device_1_0(struct ibv_device_1_0 *dev);
int uiw_close_device_1_0(struct ibv_context_1_0 *ctx);
int uiw_get_async_event_1_0(struct ibv_context_1_0 *ctx, struct ibv_async_event *ev);
void uiw_ack_async_event_1_0(struct ibv_async_event *ev);
int uiw_query_device_1_0(struct ibv_context_1_0 *ctx, struct ibv_device_attr *attr);
int uiw_query_port_1_0(struct ibv_context_1_0 *ctx, uint8_t port, struct ibv_port_attr *attr);
int uiw_query_gid_1_0(struct ibv_context_1_0 *ctx, uint8_t port, int index, union ibv_gid *gid);
int uiw_query_pkey_1_0(struct ibv_context_1_0 *ctx, uint8_t port, int index, __be16 *pkey);
struct ibv_pd_1_0 *uiw_alloc_pd_1_0(struct ibv_context_1_0 *ctx);
int uiw_dealloc_pd_1_0(struct ibv_pd_1_0 *pd);
struct ibv_mr_1_0 *uiw_reg_mr_1_0(struct ibv_pd_1_0 *pd, void *addr, size_t length, int access);
int uiw_dereg_mr_1_0(struct ibv_mr_1_0 *mr);
struct ibv_cq_1_0 *uiw_create_cq_1_0(struct ibv_context_1_0 *ctx, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector);
int uiw_resize_cq_1_0(struct ibv_cq_1_0 *cq, int cqe);
int uiw_destroy_cq_1_0(struct ibv_cq_1_0 *cq);
int uiw_get_cq_event_1_0(struct ibv_comp_channel *channel, struct ibv_cq_1_0 **cq,
                         void **cq_context);
void uiw_ack_cq_events_1_0(struct ibv_cq_1_0 *cq, unsigned int nevents);
struct ibv_srq_1_0 *uiw_create_srq_1_0(struct ibv_pd_1_0 *pd, struct ibv_srq_init_attr *init);
int uiw_modify_srq_1_0(struct ibv_srq_1_0 *srq, struct ibv_srq_attr *attr, int mask);
int uiw_query_srq_1_0(struct ibv_srq_1_0 *srq, struct ibv_srq_attr *attr);
int uiw_destroy_srq_1_0(struct ibv_srq_1_0 *srq);
struct ibv_qp_1_0 *uiw_create_qp_1_0(struct ibv_pd_1_0 *pd, struct ibv_qp_init_attr_1_0 *init);
int uiw_query_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask,
                     struct ibv_qp_init_attr_1_0 *init);
int uiw_modify_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask);
int uiw_destroy_qp_1_0(struct ibv_qp_1_0 *qp);
struct ibv_ah_1_0 *uiw_create_ah_1_0(struct ibv_pd_1_0 *pd, struct ibv_ah_attr *attr);
int uiw_destroy_ah_1_0(struct ibv_ah_1_0 *ah);
int uiw_attach_mcast_1_0(struct ibv_qp_1_0 *qp, union ibv_gid *gid, uint16_t lid);
int uiw_detach_mcast_1_0(struct ibv_qp_1_0 *qp, union ibv_gid *gid, uint16_t lid);
typedef struct ibv_device *(*uiw_driver_init_1_1)(const char *sysfs_path, int abi_version);
void uiw_register_driver_1_1(const char *name, uiw_driver_init_1_1 init);

/* Historical exports without a public declaration any more. */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);

/* ------------------------------------------------------------------------
 * IBVERBS_1.0: devices and contexts
 * ---------------------------------------------------------------------- */

/* The 1.0 list: slot -1 keeps the real list, then one wrapper per device,
 * NULL-terminated. */
COMPAT_1_0(get_device_list);
struct ibv_device_1_0 **uiw_get_device_list_1_0(int *num)
{
    struct ibv_device **real;
    struct ibv_device_1_0 **l;
    int n = 0;

    real = ibv_get_device_list(&n);
    if (!real)
        return NULL;
    l = calloc((size_t)n + 2, sizeof(*l));
    if (!l)
        goto fail;
    l[0] = (struct ibv_device_1_0 *)(void *)real;
    for (int i = 0; i < n; i++) {
        l[i + 1] = calloc(1, sizeof(**l));
        if (!l[i + 1])
            goto fail;
        l[i + 1]->real_device = real[i];
    }
    if (num)
        *num = n;
    return l + 1;
fail:
    if (l)
        for (int i = 1; i <= n; i++)
            free(l[i]);
    free(l);
    ibv_free_device_list(real);
    errno = ENOMEM;
    return NULL;
}

COMPAT_1_0(free_device_list);
void uiw_free_device_list_1_0(struct ibv_device_1_0 **list)
{
    if (!list)
        return;
    for (struct ibv_device_1_0 **l = list; *l; l++)
        free(*l);
    ibv_free_device_list((struct ibv_device **)(void *)list[-1]);
    free(list - 1);
}

COMPAT_1_0_FORWARD(const char *, get_device_name, ibv_device_1_0, real_device, (), ())
COMPAT_1_0_FORWARD(__be64, get_device_guid, ibv_device_1_0, real_device, (), ())

static int poll_cq_1_0(struct ibv_cq_1_0 *cq, int n, struct ibv_wc *wc)
{
    struct ibv_cq *r = cq->real_cq;

    return r->context->ops.poll_cq(r, n, wc);
}

static int req_notify_cq_1_0(struct ibv_cq_1_0 *cq, int solicited_only)
{
    struct ibv_cq *r = cq->real_cq;

    return r->context->ops.req_notify_cq(r, solicited_only);
}

/* The 1.0 receive WR has the current one's fields in another struct:
 * convert the chain (on the heap: a chain can be long). */
static struct ibv_recv_wr *recv_wrs_1_0(struct ibv_recv_wr_1_0 *wr, unsigned *n)
{
    struct ibv_recv_wr *out;
    unsigned k = 0;

    for (struct ibv_recv_wr_1_0 *w = wr; w; w = w->next)
        k++;
    *n = k;
    if (!k)
        return NULL;
    out = calloc(k, sizeof(*out));
    if (!out)
        return NULL;
    k = 0;
    for (struct ibv_recv_wr_1_0 *w = wr; w; w = w->next, k++) {
        out[k].wr_id = w->wr_id;
        out[k].sg_list = w->sg_list;
        out[k].num_sge = w->num_sge;
        out[k].next = w->next ? &out[k + 1] : NULL;
    }
    return out;
}

/* The 1.0 WR that corresponds to the real one at index bad - out. */
static void *bad_1_0(void *first, size_t next_off, const void *out, size_t elem, const void *bad)
{
    size_t idx = ((const char *)bad - (const char *)out) / elem;
    char *w = first;

    while (idx-- && w)
        w = *(char **)(w + next_off);
    return w;
}

/* Receives posted through the 1.0 ABI: converted to the current WR list and
 * handed to the QP's (qp) or SRQ's (srq) post op; *bad maps back. */
static int post_recvs_1_0(struct ibv_qp *qp, struct ibv_srq *srq, struct ibv_recv_wr_1_0 *wr,
                          struct ibv_recv_wr_1_0 **bad)
{
    struct ibv_recv_wr *out, *rbad = NULL;
    unsigned n;
    int ret;

    out = recv_wrs_1_0(wr, &n);
    if (n && !out) {
        if (bad)
            *bad = wr;
        return ENOMEM;
    }
    if (!n)
        return 0;
    ret = qp ? qp->context->ops.post_recv(qp, out, &rbad)
             : srq->context->ops.post_srq_recv(srq, out, &rbad);
    if (ret && rbad && bad)
        *bad = bad_1_0(wr, offsetof(struct ibv_recv_wr_1_0, next), out, sizeof(*out), rbad);
    free(out);
    return ret;
}

static int post_recv_1_0(struct ibv_qp_1_0 *qp, struct ibv_recv_wr_1_0 *wr,
                         struct ibv_recv_wr_1_0 **bad)
{
    return post_recvs_1_0(qp->real_qp, NULL, wr, bad);
}

static int post_srq_recv_1_0(struct ibv_srq_1_0 *srq, struct ibv_recv_wr_1_0 *wr,
                             struct ibv_recv_wr_1_0 **bad)
{
    return post_recvs_1_0(NULL, srq->real_srq, wr, bad);
}

static int post_send_1_0(struct ibv_qp_1_0 *qp, struct ibv_send_wr_1_0 *wr,
                         struct ibv_send_wr_1_0 **bad)
{
    struct ibv_qp *r = qp->real_qp;
    struct ibv_send_wr *out, *rbad = NULL;
    unsigned n = 0, k = 0;
    int ret;

    for (struct ibv_send_wr_1_0 *w = wr; w; w = w->next)
        n++;
    if (!n)
        return 0;
    out = calloc(n, sizeof(*out));
    if (!out) {
        if (bad)
            *bad = wr;
        return ENOMEM;
    }
    for (struct ibv_send_wr_1_0 *w = wr; w; w = w->next, k++) {
        struct ibv_send_wr *o = &out[k];

        o->wr_id = w->wr_id;
        o->next = w->next ? &out[k + 1] : NULL;
        o->sg_list = w->sg_list;
        o->num_sge = w->num_sge;
        o->opcode = w->opcode;
        o->send_flags = (unsigned)w->send_flags;
        o->imm_data = w->imm_data;
        if (qp->qp_type == IBV_QPT_UD) {
            o->wr.ud.ah = w->wr.ud.ah ? w->wr.ud.ah->real_ah : NULL;
            o->wr.ud.remote_qpn = w->wr.ud.remote_qpn;
            o->wr.ud.remote_qkey = w->wr.ud.remote_qkey;
        } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            o->wr.atomic.remote_addr = w->wr.atomic.remote_addr;
            o->wr.atomic.compare_add = w->wr.atomic.compare_add;
            o->wr.atomic.swap = w->wr.atomic.swap;
            o->wr.atomic.rkey = w->wr.atomic.rkey;
        } else {
            o->wr.rdma.remote_addr = w->wr.rdma.remote_addr;
            o->wr.rdma.rkey = w->wr.rdma.rkey;
        }
    }
    ret = r->context->ops.post_send(r, out, &rbad);
    if (ret && rbad && bad)
        *bad = bad_1_0(wr, offsetof(struct ibv_send_wr_1_0, next), out, sizeof(*out), rbad);
    free(out);
    return ret;
}

COMPAT_1_0(open_device);
struct ibv_context_1_0 *uiw_open_device_1_0(struct ibv_device_1_0 *dev)
{
    struct ibv_context_1_0 *ctx;

    NEW_WRAPPER(ctx, real_context, ibv_open_device(REAL(dev, real_device)));
    ctx->device = dev;
    ctx->cmd_fd = ctx->real_context->cmd_fd;
    ctx->async_fd = ctx->real_context->async_fd;
    ctx->num_comp_vectors = ctx->real_context->num_comp_vectors;
    ctx->ops.poll_cq = poll_cq_1_0;
    ctx->ops.req_notify_cq = req_notify_cq_1_0;
    ctx->ops.post_send = post_send_1_0;
    ctx->ops.post_recv = post_recv_1_0;
    ctx->ops.post_srq_recv = post_srq_recv_1_0;
    return ctx;
}

COMPAT_1_0_DESTROY(close_device, ibv_context_1_0, real_context)

/* Events name the 1.0 wrappers (each real object's *_context). */
COMPAT_1_0(get_async_event);
int uiw_get_async_event_1_0(struct ibv_context_1_0 *ctx, struct ibv_async_event *ev)
{
    int ret = ibv_get_async_event(REAL(ctx, real_context), ev);

    if (ret)
        return ret;
    switch (uiw_event_obj(ev->event_type)) {
    case UIW_EV_CQ:
        ev->element.cq = ev->element.cq->cq_context;
        break;
    case UIW_EV_QP:
        ev->element.qp = ev->element.qp->qp_context;
        break;
    case UIW_EV_SRQ:
        ev->element.srq = ev->element.srq->srq_context;
        break;
    case UIW_EV_NONE:
    case UIW_EV_WQ: /* no 1.0 wrapper: left as it is */
        break;
    }
    return 0;
}

COMPAT_1_0(ack_async_event);
void uiw_ack_async_event_1_0(struct ibv_async_event *ev)
{
    struct ibv_async_event real;

    if (!ev)
        return;
    real = *ev;

    switch (uiw_event_obj(ev->event_type)) {
    case UIW_EV_CQ:
        real.element.cq = ((struct ibv_cq_1_0 *)(void *)ev->element.cq)->real_cq;
        break;
    case UIW_EV_QP:
        real.element.qp = ((struct ibv_qp_1_0 *)(void *)ev->element.qp)->real_qp;
        break;
    case UIW_EV_SRQ:
        real.element.srq = ((struct ibv_srq_1_0 *)(void *)ev->element.srq)->real_srq;
        break;
    case UIW_EV_NONE:
    case UIW_EV_WQ: /* no 1.0 wrapper: left as it is */
        break;
    }
    ibv_ack_async_event(&real);
}

COMPAT_1_0_FORWARD(int, query_device, ibv_context_1_0, real_context,
                   (, struct ibv_device_attr *attr), (, attr))

/* The 1.0 struct ibv_port_attr ended with phys_state: write no further. */
COMPAT_1_0(query_port);
int uiw_query_port_1_0(struct ibv_context_1_0 *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    if (!ctx || !attr)
        return EINVAL;
    return uiw_op_query_port(ctx->real_context, port, attr,
                             offsetof(struct ibv_port_attr, link_layer));
}

COMPAT_1_0_FORWARD(int, query_gid, ibv_context_1_0, real_context,
                   (, uint8_t port, int index, union ibv_gid *gid), (, port, index, gid))
COMPAT_1_0_FORWARD(int, query_pkey, ibv_context_1_0, real_context,
                   (, uint8_t port, int index, __be16 *pkey), (, port, index, pkey))

/* ------------------------------------------------------------------------
 * IBVERBS_1.0: PDs, MRs, CQs
 * ---------------------------------------------------------------------- */

COMPAT_1_0(alloc_pd);
struct ibv_pd_1_0 *uiw_alloc_pd_1_0(struct ibv_context_1_0 *ctx)
{
    struct ibv_pd_1_0 *pd;

    NEW_WRAPPER(pd, real_pd, ibv_alloc_pd(REAL(ctx, real_context)));
    pd->context = ctx;
    pd->handle = pd->real_pd->handle;
    return pd;
}

COMPAT_1_0_DESTROY(dealloc_pd, ibv_pd_1_0, real_pd)

COMPAT_1_0(reg_mr);
struct ibv_mr_1_0 *uiw_reg_mr_1_0(struct ibv_pd_1_0 *pd, void *addr, size_t length, int access)
{
    struct ibv_mr_1_0 *mr;

    NEW_WRAPPER(mr, real_mr, ibv_reg_mr(REAL(pd, real_pd), addr, length, access));
    mr->context = pd->context;
    mr->pd = pd;
    mr->handle = mr->real_mr->handle;
    mr->lkey = mr->real_mr->lkey;
    mr->rkey = mr->real_mr->rkey;
    return mr;
}

COMPAT_1_0_DESTROY(dereg_mr, ibv_mr_1_0, real_mr)

COMPAT_1_0(create_cq);
struct ibv_cq_1_0 *uiw_create_cq_1_0(struct ibv_context_1_0 *ctx, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector)
{
    struct ibv_cq_1_0 *cq;

    NEW_WRAPPER(cq, real_cq, ibv_create_cq(REAL(ctx, real_context), cqe, cq, channel, comp_vector));
    cq->context = ctx;
    cq->cq_context = cq_context;
    cq->cqe = cq->real_cq->cqe;
    return cq;
}

COMPAT_1_0(resize_cq);
int uiw_resize_cq_1_0(struct ibv_cq_1_0 *cq, int cqe)
{
    int ret = ibv_resize_cq(REAL(cq, real_cq), cqe);

    if (!ret)
        cq->cqe = cq->real_cq->cqe;
    return ret;
}

COMPAT_1_0_DESTROY(destroy_cq, ibv_cq_1_0, real_cq)

COMPAT_1_0(get_cq_event);
int uiw_get_cq_event_1_0(struct ibv_comp_channel *channel, struct ibv_cq_1_0 **cq,
                         void **cq_context)
{
    struct ibv_cq *real;
    void *wrapper;
    int ret;

    if (!cq || !cq_context) {
        errno = EINVAL;
        return -1;
    }
    ret = ibv_get_cq_event(channel, &real, &wrapper);
    if (ret)
        return ret;
    *cq = wrapper;
    *cq_context = (*cq)->cq_context;
    return 0;
}

COMPAT_1_0(ack_cq_events);
void uiw_ack_cq_events_1_0(struct ibv_cq_1_0 *cq, unsigned int nevents)
{
    ibv_ack_cq_events(REAL(cq, real_cq), nevents);
}

/* ------------------------------------------------------------------------
 * IBVERBS_1.0: SRQs, QPs, AHs, multicast
 * ---------------------------------------------------------------------- */

COMPAT_1_0(create_srq);
struct ibv_srq_1_0 *uiw_create_srq_1_0(struct ibv_pd_1_0 *pd, struct ibv_srq_init_attr *init)
{
    struct ibv_srq_1_0 *srq;
    void *user_ctx = init ? init->srq_context : NULL;

    NEW_WRAPPER(srq, real_srq, ibv_create_srq(REAL(pd, real_pd), init));
    srq->context = pd->context;
    srq->srq_context = user_ctx;
    srq->pd = pd;
    srq->handle = srq->real_srq->handle;
    srq->real_srq->srq_context = srq;
    return srq;
}

COMPAT_1_0_FORWARD(int, modify_srq, ibv_srq_1_0, real_srq, (, struct ibv_srq_attr *attr, int mask),
                   (, attr, mask))
COMPAT_1_0_FORWARD(int, query_srq, ibv_srq_1_0, real_srq, (, struct ibv_srq_attr *attr), (, attr))
COMPAT_1_0_DESTROY(destroy_srq, ibv_srq_1_0, real_srq)

COMPAT_1_0(create_qp);
struct ibv_qp_1_0 *uiw_create_qp_1_0(struct ibv_pd_1_0 *pd, struct ibv_qp_init_attr_1_0 *init)
{
    struct ibv_qp_1_0 *qp;
    struct ibv_qp_init_attr real;

    if (!pd || !init || !init->send_cq || !init->recv_cq) {
        errno = EINVAL;
        return NULL;
    }
    qp = uiw_zalloc(sizeof(*qp));
    if (!qp)
        return NULL;
    memset(&real, 0, sizeof(real));
    real.qp_context = qp;
    real.send_cq = init->send_cq->real_cq;
    real.recv_cq = init->recv_cq->real_cq;
    real.srq = init->srq ? init->srq->real_srq : NULL;
    real.cap = init->cap;
    real.qp_type = init->qp_type;
    real.sq_sig_all = init->sq_sig_all;
    struct ibv_qp *rq = ibv_create_qp(pd->real_pd, &real);
    if (!rq) {
        free(qp);
        return NULL;
    }
    *qp = (struct ibv_qp_1_0){
        .context = pd->context,
        .qp_context = init->qp_context,
        .pd = pd,
        .send_cq = init->send_cq,
        .recv_cq = init->recv_cq,
        .srq = init->srq,
        .handle = rq->handle,
        .qp_num = rq->qp_num,
        .state = rq->state,
        .qp_type = init->qp_type,
        .real_qp = rq,
    };
    init->cap = real.cap;
    return qp;
}

COMPAT_1_0(query_qp);
int uiw_query_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask,
                     struct ibv_qp_init_attr_1_0 *init)
{
    struct ibv_qp_init_attr real;
    int ret;

    if (!qp || !init)
        return EINVAL;
    ret = ibv_query_qp(qp->real_qp, attr, mask, &real);
    if (ret)
        return ret;
    init->qp_context = qp->qp_context;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->cap = real.cap;
    init->qp_type = real.qp_type;
    init->sq_sig_all = real.sq_sig_all;
    return 0;
}

COMPAT_1_0(modify_qp);
int uiw_modify_qp_1_0(struct ibv_qp_1_0 *qp, struct ibv_qp_attr *attr, int mask)
{
    int ret = ibv_modify_qp(REAL(qp, real_qp), attr, mask);

    if (!ret)
        qp->state = qp->real_qp->state;
    return ret;
}

COMPAT_1_0_DESTROY(destroy_qp, ibv_qp_1_0, real_qp)

COMPAT_1_0(create_ah);
struct ibv_ah_1_0 *uiw_create_ah_1_0(struct ibv_pd_1_0 *pd, struct ibv_ah_attr *attr)
{
    struct ibv_ah_1_0 *ah;

    NEW_WRAPPER(ah, real_ah, ibv_create_ah(REAL(pd, real_pd), attr));
    ah->context = pd->context;
    ah->pd = pd;
    ah->handle = ah->real_ah->handle;
    return ah;
}

COMPAT_1_0_DESTROY(destroy_ah, ibv_ah_1_0, real_ah)

COMPAT_1_0_FORWARD(int, attach_mcast, ibv_qp_1_0, real_qp, (, union ibv_gid *gid, uint16_t lid),
                   (, gid, lid))
COMPAT_1_0_FORWARD(int, detach_mcast, ibv_qp_1_0, real_qp, (, union ibv_gid *gid, uint16_t lid),
                   (, gid, lid))

/* Old libfabric usNIC providers call it to silence a warning; drivers are
 * private since rdma-core 13. */
SYMVER("uiw_register_driver_1_1", "ibv_register_driver@IBVERBS_1.1");
void uiw_register_driver_1_1(const char *name, uiw_driver_init_1_1 init)
{
    (void)name, (void)init;
}

/* ------------------------------------------------------------------------
 * Historical helpers: sysfs, kernel ABI structs
 * ---------------------------------------------------------------------- */

static char sysfs_path[PATH_MAX];

/* The sysfs root: $SYSFS_PATH without trailing slashes, else /sys. */
static void sysfs_path_init(void)
{
    const char *env = getenv("SYSFS_PATH");
    size_t n;

    if (!env || !*env || strlen(env) >= sizeof(sysfs_path))
        env = "/sys";
    n = strlen(env);
    while (n > 1 && env[n - 1] == '/')
        n--;
    memcpy(sysfs_path, env, n);
    sysfs_path[n] = '\0';
}

const char *ibv_get_sysfs_path(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;

    pthread_once(&once, sysfs_path_init);
    return sysfs_path;
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
    char path[PATH_MAX];
    ssize_t len;
    int fd;

    if (!dir || !file || !buf || !size) {
        errno = EINVAL;
        return -1;
    }
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, file) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    len = read(fd, buf, size);
    close(fd);
    if (len < 0)
        return -1;
    if (len == 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)len == size)
        buf[len - 1] = '\0'; /* truncated: keep a terminated string */
    else if (buf[len - 1] == '\n')
        buf[len - 1] = '\0';
    else
        buf[len] = '\0';
    return (int)len;
}

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
    memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid.raw));
    dst->grh.flow_label = src->grh.flow_label;
    dst->grh.sgid_index = src->grh.sgid_index;
    dst->grh.hop_limit = src->grh.hop_limit;
    dst->grh.traffic_class = src->grh.traffic_class;
    dst->dlid = src->dlid;
    dst->sl = src->sl;
    dst->src_path_bits = src->src_path_bits;
    dst->static_rate = src->static_rate;
    dst->is_global = src->is_global;
    dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
    dst->qp_state = (enum ibv_qp_state)src->qp_state;
    dst->cur_qp_state = (enum ibv_qp_state)src->cur_qp_state;
    dst->path_mtu = (enum ibv_mtu)src->path_mtu;
    dst->path_mig_state = (enum ibv_mig_state)src->path_mig_state;
    dst->qkey = src->qkey;
    dst->rq_psn = src->rq_psn;
    dst->sq_psn = src->sq_psn;
    dst->dest_qp_num = src->dest_qp_num;
    dst->qp_access_flags = (int)src->qp_access_flags;
    dst->cap.max_send_wr = src->max_send_wr;
    dst->cap.max_recv_wr = src->max_recv_wr;
    dst->cap.max_send_sge = src->max_send_sge;
    dst->cap.max_recv_sge = src->max_recv_sge;
    dst->cap.max_inline_data = src->max_inline_data;
    ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
    ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
    dst->pkey_index = src->pkey_index;
    dst->alt_pkey_index = src->alt_pkey_index;
    dst->en_sqd_async_notify = src->en_sqd_async_notify;
    dst->sq_draining = src->sq_draining;
    dst->max_rd_atomic = src->max_rd_atomic;
    dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
    dst->min_rnr_timer = src->min_rnr_timer;
    dst->port_num = src->port_num;
    dst->timeout = src->timeout;
    dst->retry_cnt = src->retry_cnt;
    dst->rnr_retry = src->rnr_retry;
    dst->alt_port_num = src->alt_port_num;
    dst->alt_timeout = src->alt_timeout;
}

/* The fields struct ibv_sa_path_rec and the kernel's ib_user_path_rec
 * share with the same meaning (both directions copy them as they are). */
#define PATH_REC_SCALARS(X)                                                                        \
    X(dlid)                                                                                        \
    X(slid)                                                                                        \
    X(flow_label)                                                                                  \
    X(pkey) X(hop_limit) X(traffic_class) X(numb_path) X(sl) X(mtu_selector) X(rate_selector)      \
        X(rate) X(packet_life_time_selector) X(packet_life_time) X(preference)
#define PATH_REC_COPY(f) dst->f = src->f;

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
    memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid.raw));
    memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid.raw));
    PATH_REC_SCALARS(PATH_REC_COPY)
    dst->raw_traffic = (int)src->raw_traffic;
    dst->reversible = (int)src->reversible;
    dst->mtu = (uint8_t)src->mtu;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
    memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
    memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
    PATH_REC_SCALARS(PATH_REC_COPY)
    dst->raw_traffic = (uint32_t)src->raw_traffic;
    dst->reversible = (uint32_t)src->reversible;
    dst->mtu = src->mtu;
}

/* ------------------------------------------------------------------------
 * Not available: shared objects (no uverbs command fd), RoCE L2 resolution
 * ---------------------------------------------------------------------- */

struct ibv_context *ibv_import_device(int cmd_fd)
{
    (void)cmd_fd;
    errno = EOPNOTSUPP;
    return NULL;
}

/* Importing an object shared by another process through the uverbs
 * command fd: never possible here, so nothing can have been imported and
 * unimporting does nothing. */
#define NO_IMPORT(obj, parent_type, parent)                                                        \
    struct ibv_##obj *ibv_import_##obj(parent_type *parent, uint32_t handle)                       \
    {                                                                                              \
        (void)parent, (void)handle;                                                                \
        errno = EOPNOTSUPP;                                                                        \
        return NULL;                                                                               \
    }                                                                                              \
    void ibv_unimport_##obj(struct ibv_##obj *obj)                                                 \
    {                                                                                              \
        (void)obj;                                                                                 \
    }

NO_IMPORT(pd, struct ibv_context, context)
NO_IMPORT(mr, struct ibv_pd, pd)
NO_IMPORT(dm, struct ibv_context, context)

/* Resolves a RoCE GID to the Ethernet next hop: iWARP has no use for it
 * (TCP does the routing). */
int ibv_resolve_eth_l2_from_gid(struct ibv_context *context, struct ibv_ah_attr *attr,
                                uint8_t eth_mac[ETHERNET_LL_SIZE], uint16_t *vid)
{
    (void)context, (void)attr, (void)eth_mac, (void)vid;
    errno = EOPNOTSUPP;
    return EOPNOTSUPP;
}
