/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * QPs and SRQs on an id, as rdma-core's librdmacm creates them: the id's
 * PD (the device's default PD unless the application gave one), CQs with
 * their own completion channels when none are given (rdma_verbs.h's
 * rdma_get_send_comp / rdma_get_recv_comp wait on those), and the new QP
 * moved to INIT with the attributes rdma_init_qp_attr returns. The engine
 * takes it to RTS when the connection is attached.
 */
#include <stdlib.h>
#include <string.h>

#include "rdmacm_int.h"

/* What the kernel's iWARP CM grants a connected QP (iw_cm_init_qp_attr),
 * plus remote atomics, which uiwarp implements (RFC 7306). */
#define RCM_QP_ACCESS                                                                              \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

UIW_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
                                 int *qp_attr_mask)
{
    if (!id || !qp_attr || !qp_attr_mask || !id->verbs)
        return rcm_err(EINVAL);
    switch (qp_attr->qp_state) {
    case IBV_QPS_INIT:
        qp_attr->qp_access_flags = RCM_QP_ACCESS;
        qp_attr->port_num = id->port_num ? id->port_num : 1;
        qp_attr->pkey_index = 0;
        *qp_attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX;
        return 0;
    case IBV_QPS_RTR:
    case IBV_QPS_RTS:
        /* iWARP: the CM moves the QP when the connection is up; there is
         * nothing for the application to apply (an empty mask is a no-op
         * for uiwarp's ibv_modify_qp, as for the kernel's). */
        *qp_attr_mask = 0;
        return 0;
    default:
        return rcm_err(EINVAL);
    }
}

static void destroy_cqs(struct rdma_cm_id *id)
{
    if (id->recv_cq) {
        ibv_destroy_cq(id->recv_cq);
        if (id->send_cq == id->recv_cq)
            id->send_cq = NULL;
        id->recv_cq = NULL;
    }
    if (id->recv_cq_channel) {
        ibv_destroy_comp_channel(id->recv_cq_channel);
        if (id->send_cq_channel == id->recv_cq_channel)
            id->send_cq_channel = NULL;
        id->recv_cq_channel = NULL;
    }
    if (id->send_cq) {
        ibv_destroy_cq(id->send_cq);
        id->send_cq = NULL;
    }
    if (id->send_cq_channel) {
        ibv_destroy_comp_channel(id->send_cq_channel);
        id->send_cq_channel = NULL;
    }
}

static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
    if (recv_size) {
        id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
        if (id->recv_cq_channel)
            id->recv_cq = ibv_create_cq(id->verbs, (int)recv_size, id, id->recv_cq_channel, 0);
        if (!id->recv_cq)
            goto err;
    }
    if (send_size) {
        id->send_cq_channel = ibv_create_comp_channel(id->verbs);
        if (id->send_cq_channel)
            id->send_cq = ibv_create_cq(id->verbs, (int)send_size, id, id->send_cq_channel, 0);
        if (!id->send_cq)
            goto err;
    }
    return 0;
err:
    destroy_cqs(id);
    return -ENOMEM;
}

UIW_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
    if (!id || !attr || !id->verbs)
        return rcm_err(EINVAL);
    if (id->qp)
        return rcm_err(EINVAL);
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
        attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
        attr->pd = id->pd;
    } else if (attr->pd->context != id->verbs) {
        return rcm_err(EINVAL);
    }
    if (!attr->pd)
        return rcm_err(EINVAL);
    if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
        (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
        return rcm_err(EINVAL);

    int rc = create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
                        attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr);
    if (rc < 0)
        return rcm_err(-rc);
    if (!attr->send_cq)
        attr->send_cq = id->send_cq;
    if (!attr->recv_cq)
        attr->recv_cq = id->recv_cq;
    if (id->srq && !attr->srq)
        attr->srq = id->srq;

    struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
    if (!qp) {
        int e = errno ? errno : ENOMEM;
        destroy_cqs(id);
        return rcm_err(e);
    }
    struct ibv_qp_attr qa;
    int mask = 0;
    memset(&qa, 0, sizeof(qa));
    qa.qp_state = IBV_QPS_INIT;
    rc = rdma_init_qp_attr(id, &qa, &mask);
    if (rc == 0)
        rc = ibv_modify_qp(qp, &qa, mask);
    if (rc) {
        int e = rc > 0 ? rc : (errno ? errno : EINVAL);
        ibv_destroy_qp(qp);
        destroy_cqs(id);
        return rcm_err(e);
    }
    id->pd = qp->pd;
    id->qp = qp;
    return 0;
}

UIW_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
                              struct ibv_qp_init_attr *qp_init_attr)
{
    if (!id || !qp_init_attr)
        return rcm_err(EINVAL);
    struct ibv_qp_init_attr_ex ex;
    memset(&ex, 0, sizeof(ex));
    memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd ? pd : id->pd;
    int rc = rdma_create_qp_ex(id, &ex);
    /* the caller sees the CQs used and the capabilities granted */
    memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
    return rc;
}

UIW_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
    if (!id)
        return;
    if (id->qp) {
        struct rcm_id *x = to_rid(id);
        /* A refused connect waiting to be tried again holds the QP: end it
         * first, under the route lock so that it is not started meanwhile. */
        pthread_mutex_lock(&rcm_route_lock);
        if (x->conn_qp == id->qp) {
            if (x->retry_pending)
                rcm_retry_end(x);
            /* and an attempt under way that is refused later is not tried
             * again with it: its refusal is reported */
            x->conn_qp = NULL;
            x->conn_qp_gone = true;
        }
        pthread_mutex_unlock(&rcm_route_lock);
        ibv_destroy_qp(id->qp);
        id->qp = NULL;
    }
    destroy_cqs(id);
}

UIW_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
    if (!id || !attr || !id->verbs)
        return rcm_err(EINVAL);
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
        return rcm_err(EINVAL);
    if (attr->srq_type != IBV_SRQT_BASIC)
        return rcm_err(EOPNOTSUPP); /* no XRC over iWARP */
    if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
        attr->pd = id->pd;
        attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
    }
    if (!attr->pd)
        return rcm_err(EINVAL);
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof(sa));
    sa.srq_context = attr->srq_context;
    sa.attr = attr->attr;
    struct ibv_srq *srq = ibv_create_srq(attr->pd, &sa);
    if (!srq)
        return -1;
    attr->attr = sa.attr;
    if (!id->pd)
        id->pd = attr->pd;
    id->srq = srq;
    return 0;
}

UIW_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
                               struct ibv_srq_init_attr *attr)
{
    if (!id || !attr)
        return rcm_err(EINVAL);
    struct ibv_srq_init_attr_ex ex;
    memset(&ex, 0, sizeof(ex));
    memcpy(&ex, attr, sizeof(*attr));
    ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
    ex.srq_type = IBV_SRQT_BASIC;
    ex.pd = pd;
    int rc = rdma_create_srq_ex(id, &ex);
    memcpy(attr, &ex, sizeof(*attr));
    return rc;
}

UIW_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
    if (!id)
        return;
    if (id->srq) {
        ibv_destroy_srq(id->srq);
        id->srq = NULL;
    }
    destroy_cqs(id);
}
