/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Endpoints: rdma_create_ep / rdma_destroy_ep / rdma_get_request, the
 * synchronous convenience layer of rdma_cma.h. Endpoint ids have no event
 * channel: every call blocks until its outcome (rcm_complete), and a
 * passive endpoint's connection requests come as synchronous ids with the
 * QP the listener was given the attributes for.
 */
#include <stdlib.h>
#include <string.h>

#include "rdmacm_int.h"

UIW_EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
                              struct ibv_qp_init_attr *qp_init_attr)
{
    if (!id || !res)
        return rcm_err(EINVAL);
    int rc = rcm_init();
    if (rc < 0)
        return rcm_err(-rc);
    if (res->ai_port_space && res->ai_port_space != RDMA_PS_TCP)
        return rcm_err(EOPNOTSUPP);
    if (res->ai_qp_type && res->ai_qp_type != IBV_QPT_RC)
        return rcm_err(EOPNOTSUPP);
    struct rcm_id *x;
    rc = rcm_id_alloc(NULL, NULL, RDMA_PS_TCP, IBV_QPT_RC, &x);
    if (rc < 0)
        return rcm_err(-rc);
    struct rdma_cm_id *cm = &x->id;

    if (res->ai_flags & RAI_PASSIVE) {
        if (!res->ai_src_addr) {
            rc = rcm_err(EINVAL);
            goto err;
        }
        rc = rdma_bind_addr(cm, res->ai_src_addr);
        if (rc)
            goto err;
        if (pd)
            cm->pd = pd;
        if (qp_init_attr) {
            x->qp_init_attr = malloc(sizeof(*qp_init_attr));
            if (!x->qp_init_attr) {
                rc = rcm_err(ENOMEM);
                goto err;
            }
            *x->qp_init_attr = *qp_init_attr;
            x->qp_init_attr->qp_type = IBV_QPT_RC;
        }
        *id = cm;
        return 0;
    }

    if (!res->ai_dst_addr) {
        rc = rcm_err(EINVAL);
        goto err;
    }
    rc = rdma_resolve_addr(cm, res->ai_src_addr, res->ai_dst_addr, 2000);
    if (rc)
        goto err;
    rc = rdma_resolve_route(cm, 2000);
    if (rc)
        goto err;
    if (qp_init_attr) {
        qp_init_attr->qp_type = IBV_QPT_RC;
        rc = rdma_create_qp(cm, pd, qp_init_attr);
        if (rc)
            goto err;
    }
    *id = cm;
    return 0;

err : {
    int e = errno;
    rdma_destroy_ep(cm);
    errno = e;
    return -1;
}
}

UIW_EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
    if (!id)
        return;
    if (id->qp)
        rdma_destroy_qp(id);
    if (id->srq)
        rdma_destroy_srq(id);
    rdma_destroy_id(id); /* frees the saved QP attributes too */
}

UIW_EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
    if (!listen || !id)
        return rcm_err(EINVAL);
    struct rcm_id *l = to_rid(listen);
    if (!l->sync)
        return rcm_err(EINVAL);
    if (listen->event) {
        rdma_ack_cm_event(listen->event);
        listen->event = NULL;
    }
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(listen->channel, &ev) < 0)
        return -1;
    int err = 0;
    if (ev->status)
        err = ev->status < 0 ? -ev->status : ev->status;
    else if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
        err = EINVAL;
    if (!err && l->qp_init_attr) {
        struct ibv_qp_init_attr attr = *l->qp_init_attr;
        if (rdma_create_qp(ev->id, listen->pd, &attr))
            err = errno ? errno : ENOMEM;
    }
    if (err) {
        listen->event = ev; /* acknowledged by the next call or destroy */
        return rcm_err(err);
    }
    *id = ev->id;
    ev->id->event = ev;
    return 0;
}
