/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Parts of librdmacm's ABI that have no meaning over uiwarp's iWARP, kept
 * so that programs linking them load and fail cleanly (-1 with errno):
 *  - multicast (UD only; iWARP is connected TCP): ENOSYS;
 *  - ECE (RDMACM_1.3, InfiniBand's enhanced connection establishment):
 *    EOPNOTSUPP.
 */
#include <rdma/rsocket.h>

#include "rdmacm_int.h"

/* ------------------------------------------------------------------------
 * Multicast
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
    (void)id, (void)addr, (void)context;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id,
                                      struct rdma_cm_join_mc_attr_ex *mc_join_attr, void *context)
{
    (void)id, (void)mc_join_attr, (void)context;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
    (void)id, (void)addr;
    return rcm_err(ENOSYS);
}

/* ------------------------------------------------------------------------
 * ECE
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    (void)id, (void)ece;
    return rcm_err(EOPNOTSUPP);
}

UIW_EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
    (void)id, (void)ece;
    return rcm_err(EOPNOTSUPP);
}

UIW_EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data,
                               uint8_t private_data_len)
{
    (void)id, (void)private_data, (void)private_data_len;
    return rcm_err(EOPNOTSUPP);
}
