/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The context op tables and the small exported verbs.
 *
 * Applications compiled against rdma-core's <infiniband/verbs.h> call some
 * verbs as inline functions that jump through the context (PEERS.md §10):
 * ibv_post_send/recv, ibv_poll_cq, ibv_req_notify_cq, ibv_post_srq_recv via
 * struct ibv_context_ops, and the extended verbs via struct verbs_context,
 * whose slots they test for NULL (verbs_get_ctx_op). As rdma-core's
 * verbs_init_context does, every slot is filled: ours where implemented,
 * otherwise a stub failing with EOPNOTSUPP. The ABI placeholders mirror the
 * flow ops as rdma-core's set_lib_ops does.
 *
 * The exported verbs of devices, memory, CQs and QPs are in device.c,
 * mem.c, cq.c and qp.c; the extended CQ/QP/SRQ (ibv_create_cq_ex, the
 * ibv_wr_* builder) in verbs_ex.c; the IBVERBS_1.0 compat ABI and the
 * historical helpers in compat.c; the IBVERBS_PRIVATE_34 provider
 * interface (stubs, for Debian's provider libraries) in private34.c. Which name is exported at
 * which version is decided by libibverbs.map alone (UIW_EXPORT marks intent only).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ------------------------------------------------------------------------
 * Unsupported ops
 * ---------------------------------------------------------------------- */

static void *compat_stub(void)
{
    errno = EOPNOTSUPP;
    return NULL;
}

/*
 * The stubs: STUB_INT fails by returning EOPNOTSUPP, STUB_PTR by returning
 * NULL with errno set to EOPNOTSUPP. Their parameters are named (C17 wants
 * names in a definition) but never read.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STUB_INT(name, params)                                                                     \
    static int name params                                                                         \
    {                                                                                              \
        return EOPNOTSUPP;                                                                         \
    }
#define STUB_PTR(type, name, params)                                                               \
    static type *name params                                                                       \
    {                                                                                              \
        errno = EOPNOTSUPP;                                                                        \
        return NULL;                                                                               \
    }

STUB_INT(stub_advise_mr, (struct ibv_pd * pd, enum ibv_advise_mr_advice advice, uint32_t flags,
                          struct ibv_sge *sg, uint32_t n))
STUB_PTR(struct ibv_mr, stub_alloc_null_mr, (struct ibv_pd * pd))
STUB_INT(stub_read_counters, (struct ibv_counters * c, uint64_t *v, uint32_t n, uint32_t flags))
STUB_INT(stub_attach_counters_point_flow,
         (struct ibv_counters * c, struct ibv_counter_attach_attr *attr, struct ibv_flow *flow))
STUB_PTR(struct ibv_counters, stub_create_counters,
         (struct ibv_context * ctx, struct ibv_counters_init_attr *attr))
STUB_INT(stub_destroy_counters, (struct ibv_counters * c))
STUB_PTR(struct ibv_mr, stub_reg_dm_mr,
         (struct ibv_pd * pd, struct ibv_dm *dm, uint64_t off, size_t len, unsigned int access))
STUB_PTR(struct ibv_dm, stub_alloc_dm, (struct ibv_context * ctx, struct ibv_alloc_dm_attr *attr))
STUB_INT(stub_free_dm, (struct ibv_dm * dm))
STUB_INT(stub_modify_flow_action_esp,
         (struct ibv_flow_action * a, struct ibv_flow_action_esp_attr *attr))
STUB_INT(stub_destroy_flow_action, (struct ibv_flow_action * a))
STUB_PTR(struct ibv_flow_action, stub_create_flow_action_esp,
         (struct ibv_context * ctx, struct ibv_flow_action_esp_attr *attr))
STUB_INT(stub_modify_qp_rate_limit, (struct ibv_qp * qp, struct ibv_qp_rate_limit_attr *attr))
STUB_PTR(struct ibv_pd, stub_alloc_parent_domain,
         (struct ibv_context * ctx, struct ibv_parent_domain_init_attr *attr))
STUB_INT(stub_dealloc_td, (struct ibv_td * td))
STUB_PTR(struct ibv_td, stub_alloc_td, (struct ibv_context * ctx, struct ibv_td_init_attr *attr))
STUB_INT(stub_modify_cq, (struct ibv_cq * cq, struct ibv_modify_cq_attr *attr))
STUB_INT(stub_destroy_rwq_ind_table, (struct ibv_rwq_ind_table * t))
STUB_PTR(struct ibv_rwq_ind_table, stub_create_rwq_ind_table,
         (struct ibv_context * ctx, struct ibv_rwq_ind_table_init_attr *a))
STUB_INT(stub_destroy_wq, (struct ibv_wq * wq))
STUB_INT(stub_modify_wq, (struct ibv_wq * wq, struct ibv_wq_attr *attr))
STUB_PTR(struct ibv_wq, stub_create_wq, (struct ibv_context * ctx, struct ibv_wq_init_attr *attr))
STUB_INT(stub_query_rt_values, (struct ibv_context * ctx, struct ibv_values_ex *values))
STUB_INT(stub_destroy_flow, (struct ibv_flow * flow))
STUB_PTR(struct ibv_flow, stub_create_flow, (struct ibv_qp * qp, struct ibv_flow_attr *attr))
STUB_PTR(struct ibv_qp, stub_open_qp, (struct ibv_context * ctx, struct ibv_qp_open_attr *attr))
STUB_INT(stub_get_srq_num, (struct ibv_srq * srq, uint32_t *num))
STUB_PTR(struct ibv_xrcd, stub_open_xrcd,
         (struct ibv_context * ctx, struct ibv_xrcd_init_attr *attr))
STUB_INT(stub_close_xrcd, (struct ibv_xrcd * xrcd))

#undef STUB_PTR
#undef STUB_INT
#pragma GCC diagnostic pop

static int stub_post_srq_ops(struct ibv_srq *srq, struct ibv_ops_wr *op, struct ibv_ops_wr **bad)
{
    (void)srq;
    *bad = op;
    return EOPNOTSUPP;
}

void uiw_verbs_init_ops(struct uiw_context *ctx)
{
    struct verbs_context *v = &ctx->vctx;
    struct ibv_context_ops *o = &v->context.ops;

    o->_compat_query_device = ibv_query_device;
    o->_compat_query_port = ibv_query_port;
    o->_compat_alloc_pd = compat_stub;
    o->_compat_dealloc_pd = compat_stub;
    o->_compat_reg_mr = compat_stub;
    o->_compat_rereg_mr = compat_stub;
    o->_compat_dereg_mr = compat_stub;
    o->alloc_mw = uiw_op_alloc_mw;
    o->bind_mw = uiw_op_bind_mw;
    o->dealloc_mw = uiw_op_dealloc_mw;
    o->_compat_create_cq = compat_stub;
    o->poll_cq = uiw_op_poll_cq;
    o->req_notify_cq = uiw_op_req_notify_cq;
    o->_compat_cq_event = compat_stub;
    o->_compat_resize_cq = compat_stub;
    o->_compat_destroy_cq = compat_stub;
    o->_compat_create_srq = compat_stub;
    o->_compat_modify_srq = compat_stub;
    o->_compat_query_srq = compat_stub;
    o->_compat_destroy_srq = compat_stub;
    o->post_srq_recv = uiw_op_post_srq_recv;
    o->_compat_create_qp = compat_stub;
    o->_compat_query_qp = compat_stub;
    o->_compat_modify_qp = compat_stub;
    o->_compat_destroy_qp = compat_stub;
    o->post_send = uiw_op_post_send;
    o->post_recv = uiw_op_post_recv;
    o->_compat_create_ah = compat_stub;
    o->_compat_destroy_ah = compat_stub;
    o->_compat_attach_mcast = compat_stub;
    o->_compat_detach_mcast = compat_stub;
    o->_compat_async_event = compat_stub;

    v->query_port = uiw_op_query_port;
    v->advise_mr = stub_advise_mr;
    v->alloc_null_mr = stub_alloc_null_mr;
    v->read_counters = stub_read_counters;
    v->attach_counters_point_flow = stub_attach_counters_point_flow;
    v->create_counters = stub_create_counters;
    v->destroy_counters = stub_destroy_counters;
    v->reg_dm_mr = stub_reg_dm_mr;
    v->alloc_dm = stub_alloc_dm;
    v->free_dm = stub_free_dm;
    v->modify_flow_action_esp = stub_modify_flow_action_esp;
    v->destroy_flow_action = stub_destroy_flow_action;
    v->create_flow_action_esp = stub_create_flow_action_esp;
    v->modify_qp_rate_limit = stub_modify_qp_rate_limit;
    v->alloc_parent_domain = stub_alloc_parent_domain;
    v->dealloc_td = stub_dealloc_td;
    v->alloc_td = stub_alloc_td;
    v->modify_cq = stub_modify_cq;
    v->post_srq_ops = stub_post_srq_ops;
    v->destroy_rwq_ind_table = stub_destroy_rwq_ind_table;
    v->create_rwq_ind_table = stub_create_rwq_ind_table;
    v->destroy_wq = stub_destroy_wq;
    v->modify_wq = stub_modify_wq;
    v->create_wq = stub_create_wq;
    v->query_rt_values = stub_query_rt_values;
    v->create_cq_ex = uiw_op_create_cq_ex;
    v->priv = NULL; /* libibverbs-internal; never read by applications */
    v->query_device_ex = uiw_op_query_device_ex;
    v->ibv_destroy_flow = stub_destroy_flow;
    v->ABI_placeholder2 = (void (*)(void))v->ibv_destroy_flow;
    v->ibv_create_flow = stub_create_flow;
    v->ABI_placeholder1 = (void (*)(void))v->ibv_create_flow;
    v->open_qp = stub_open_qp;
    v->create_qp_ex = uiw_op_create_qp_ex;
    v->get_srq_num = stub_get_srq_num;
    v->create_srq_ex = uiw_op_create_srq_ex;
    v->open_xrcd = stub_open_xrcd;
    v->close_xrcd = stub_close_xrcd;
}

/* ------------------------------------------------------------------------
 * Strings
 * ---------------------------------------------------------------------- */

UIW_EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const s[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };

    if ((unsigned)status < sizeof(s) / sizeof(s[0]) && s[status])
        return s[status];
    return "unknown";
}

UIW_EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const s[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };

    if ((unsigned)event < sizeof(s) / sizeof(s[0]) && s[event])
        return s[event];
    return "unknown";
}

UIW_EXPORT const char *ibv_node_type_str(enum ibv_node_type node_type)
{
    static const char *const s[] = {
        [IBV_NODE_CA] = "InfiniBand channel adapter",
        [IBV_NODE_SWITCH] = "InfiniBand switch",
        [IBV_NODE_ROUTER] = "InfiniBand router",
        [IBV_NODE_RNIC] = "iWARP NIC",
        [IBV_NODE_USNIC] = "usNIC",
        [IBV_NODE_USNIC_UDP] = "usNIC UDP",
        [IBV_NODE_UNSPECIFIED] = "unspecified",
    };

    /* IBV_NODE_UNKNOWN (-1) falls outside the table as a large unsigned */
    if ((unsigned)node_type < sizeof(s) / sizeof(s[0]) && s[node_type])
        return s[node_type];
    return "unknown";
}

UIW_EXPORT const char *ibv_port_state_str(enum ibv_port_state port_state)
{
    static const char *const s[] = {
        [IBV_PORT_NOP] = "PORT_NOP",       [IBV_PORT_DOWN] = "PORT_DOWN",
        [IBV_PORT_INIT] = "PORT_INIT",     [IBV_PORT_ARMED] = "PORT_ARMED",
        [IBV_PORT_ACTIVE] = "PORT_ACTIVE", [IBV_PORT_ACTIVE_DEFER] = "PORT_ACTIVE_DEFER",
    };

    if ((unsigned)port_state < sizeof(s) / sizeof(s[0]) && s[port_state])
        return s[port_state];
    return "unknown";
}

/* ------------------------------------------------------------------------
 * Fork: nothing is pinned or mapped by a device, so nothing to protect.
 * ---------------------------------------------------------------------- */

UIW_EXPORT int ibv_fork_init(void)
{
    return 0;
}

UIW_EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    return IBV_FORK_UNNEEDED;
}

UIW_EXPORT int ibv_dontfork_range(void *base, size_t size)
{
    (void)base, (void)size;
    return 0;
}

UIW_EXPORT int ibv_dofork_range(void *base, size_t size)
{
    (void)base, (void)size;
    return 0;
}

/* ------------------------------------------------------------------------
 * Rates (pure conversions of the IB rate enum)
 * ---------------------------------------------------------------------- */

static const struct {
    enum ibv_rate rate;
    int mbps;
} rates[] = {
    {IBV_RATE_2_5_GBPS, 2500},   {IBV_RATE_5_GBPS, 5000},       {IBV_RATE_10_GBPS, 10000},
    {IBV_RATE_20_GBPS, 20000},   {IBV_RATE_30_GBPS, 30000},     {IBV_RATE_40_GBPS, 40000},
    {IBV_RATE_60_GBPS, 60000},   {IBV_RATE_80_GBPS, 80000},     {IBV_RATE_120_GBPS, 120000},
    {IBV_RATE_14_GBPS, 14062},   {IBV_RATE_56_GBPS, 56250},     {IBV_RATE_112_GBPS, 112500},
    {IBV_RATE_168_GBPS, 168750}, {IBV_RATE_25_GBPS, 25781},     {IBV_RATE_100_GBPS, 103125},
    {IBV_RATE_200_GBPS, 206250}, {IBV_RATE_300_GBPS, 309375},   {IBV_RATE_28_GBPS, 28125},
    {IBV_RATE_50_GBPS, 53125},   {IBV_RATE_400_GBPS, 425000},   {IBV_RATE_600_GBPS, 637500},
    {IBV_RATE_800_GBPS, 850000}, {IBV_RATE_1200_GBPS, 1275000},
};
#define NRATES (sizeof(rates) / sizeof(rates[0]))
#define NMULT  9 /* the first entries are multiples of 2.5 Gb/s */

UIW_EXPORT int ibv_rate_to_mult(enum ibv_rate rate)
{
    for (unsigned i = 0; i < NMULT; i++)
        if (rates[i].rate == rate)
            return rates[i].mbps / 2500;
    return -1;
}

UIW_EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
    for (unsigned i = 0; i < NMULT; i++)
        if (rates[i].mbps == mult * 2500)
            return rates[i].rate;
    return IBV_RATE_MAX;
}

UIW_EXPORT int ibv_rate_to_mbps(enum ibv_rate rate)
{
    for (unsigned i = 0; i < NRATES; i++)
        if (rates[i].rate == rate)
            return rates[i].mbps;
    return -1;
}

UIW_EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
    for (unsigned i = 0; i < NRATES; i++)
        if (rates[i].mbps == mbps)
            return rates[i].rate;
    return IBV_RATE_MAX;
}

/* ------------------------------------------------------------------------
 * Not for iWARP / not supported
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    (void)pd, (void)attr;
    errno = EOPNOTSUPP; /* no address handles: RC over TCP only */
    return NULL;
}

UIW_EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    (void)ah;
    return EOPNOTSUPP;
}

UIW_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
                                   struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
    (void)context, (void)port_num, (void)wc, (void)grh, (void)ah_attr;
    errno = EOPNOTSUPP;
    return -1;
}

UIW_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc,
                                                struct ibv_grh *grh, uint8_t port_num)
{
    (void)pd, (void)wc, (void)grh, (void)port_num;
    errno = EOPNOTSUPP;
    return NULL;
}

UIW_EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}

UIW_EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
    (void)qp, (void)gid, (void)lid;
    return EOPNOTSUPP;
}

UIW_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp, (void)ece;
    return EOPNOTSUPP;
}

UIW_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    (void)qp, (void)ece;
    return EOPNOTSUPP;
}

UIW_EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                            uint64_t iova, int fd, int access)
{
    (void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
    errno = EOPNOTSUPP;
    return NULL;
}

/* Placement is a CPU copy whose stores other threads may observe in any
 * order: no in-order guarantee is made. */
UIW_EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
    (void)qp, (void)op, (void)flags;
    return 0;
}
