/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdma_getaddrinfo / rdma_freeaddrinfo: getaddrinfo(3) for rdma_cm. The
 * first address found becomes the source (RAI_PASSIVE) or destination;
 * a source from the hints is kept for active lookups. IB addressing
 * (AF_IB, ib_acm routes, ai_connect data) does not exist on iWARP.
 *
 * Failure is -1 with errno (the EAI_* code mapped to the nearest errno:
 * unknown name EADDRNOTAVAIL, temporary failure EAGAIN, bad flags or
 * service EINVAL, family EAFNOSUPPORT, memory ENOMEM, system: its errno).
 */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm_int.h"

static int eai_errno(int eai)
{
    switch (eai) {
    case EAI_SYSTEM:
        return errno ? errno : EIO;
    case EAI_MEMORY:
        return ENOMEM;
    case EAI_AGAIN:
        return EAGAIN;
    case EAI_FAMILY:
        return EAFNOSUPPORT;
    case EAI_BADFLAGS:
    case EAI_SERVICE:
    case EAI_SOCKTYPE:
        return EINVAL;
    default: /* EAI_NONAME, EAI_NODATA, EAI_FAIL, EAI_ADDRFAMILY */
        return EADDRNOTAVAIL;
    }
}

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src,
                     socklen_t len)
{
    *dst = malloc(len);
    if (!*dst)
        return ENOMEM;
    memcpy(*dst, src, len);
    *dst_len = len;
    return 0;
}

static int lookup(const char *node, const char *service, const struct rdma_addrinfo *h,
                  struct rdma_addrinfo *rai)
{
    struct addrinfo ah, *ai = NULL;
    memset(&ah, 0, sizeof(ah));
    if (h->ai_flags & RAI_PASSIVE)
        ah.ai_flags |= AI_PASSIVE;
    if (h->ai_flags & RAI_NUMERICHOST)
        ah.ai_flags |= AI_NUMERICHOST;
    ah.ai_family = h->ai_family;
    switch (h->ai_qp_type) {
    case IBV_QPT_UD:
        ah.ai_socktype = SOCK_DGRAM;
        break;
    case 0:
        break;
    default:
        ah.ai_socktype = SOCK_STREAM;
        break;
    }
    switch (h->ai_port_space) {
    case RDMA_PS_TCP:
        ah.ai_protocol = IPPROTO_TCP;
        break;
    case RDMA_PS_UDP:
    case RDMA_PS_IPOIB:
        ah.ai_protocol = IPPROTO_UDP;
        break;
    default:
        break;
    }
    int rc = getaddrinfo(node, service, &ah, &ai);
    if (rc)
        return eai_errno(rc);

    rai->ai_family = ai->ai_family;
    if (h->ai_qp_type)
        rai->ai_qp_type = h->ai_qp_type;
    else
        rai->ai_qp_type = ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
    if (h->ai_port_space)
        rai->ai_port_space = h->ai_port_space;
    else
        rai->ai_port_space = ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
    rc = 0;
    if (h->ai_flags & RAI_PASSIVE) {
        rai->ai_flags = RAI_PASSIVE;
        if (ai->ai_canonname && !(rai->ai_src_canonname = strdup(ai->ai_canonname)))
            rc = ENOMEM;
        if (!rc)
            rc = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
    } else {
        if (ai->ai_canonname && !(rai->ai_dst_canonname = strdup(ai->ai_canonname)))
            rc = ENOMEM;
        if (!rc)
            rc = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
    }
    freeaddrinfo(ai);
    return rc;
}

UIW_EXPORT int rdma_getaddrinfo(const char *node, const char *service,
                                const struct rdma_addrinfo *hints, struct rdma_addrinfo **res)
{
    static const struct rdma_addrinfo nohints;
    if (!res || (!node && !service && !hints))
        return rcm_err(EINVAL);
    const struct rdma_addrinfo *h = hints ? hints : &nohints;
    if (h->ai_family == AF_IB)
        return rcm_err(EAFNOSUPPORT);

    struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
    if (!rai)
        return rcm_err(ENOMEM);
    int rc = 0;
    if (node || service) {
        rc = lookup(node, service, h, rai);
    } else {
        rai->ai_flags = h->ai_flags;
        rai->ai_family = h->ai_family;
        rai->ai_qp_type = h->ai_qp_type;
        rai->ai_port_space = h->ai_port_space;
        if (h->ai_dst_len && h->ai_dst_addr)
            rc = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, h->ai_dst_addr, h->ai_dst_len);
    }
    if (!rc && !rai->ai_src_len && h->ai_src_len && h->ai_src_addr)
        rc = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, h->ai_src_addr, h->ai_src_len);
    if (rc) {
        rdma_freeaddrinfo(rai);
        return rcm_err(rc);
    }
    *res = rai;
    return 0;
}

UIW_EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
    while (res) {
        struct rdma_addrinfo *next = res->ai_next;
        free(res->ai_connect);
        free(res->ai_route);
        free(res->ai_src_canonname);
        free(res->ai_dst_canonname);
        free(res->ai_src_addr);
        free(res->ai_dst_addr);
        free(res);
        res = next;
    }
}
