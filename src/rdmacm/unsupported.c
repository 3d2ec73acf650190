/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Parts of librdmacm's ABI that have no meaning over uiwarp's iWARP, kept
 * so that programs linking them load and fail cleanly (-1 with errno):
 *  - multicast (UD only; iWARP is connected TCP): ENOSYS;
 *  - ECE (RDMACM_1.3, InfiniBand's enhanced connection establishment):
 *    EOPNOTSUPP;
 *  - rsockets (sockets over RDMA, rsocket.h): ENOSYS.
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

/* ------------------------------------------------------------------------
 * rsockets
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rsocket(int domain, int type, int protocol)
{
    (void)domain, (void)type, (void)protocol;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)socket, (void)addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rlisten(int socket, int backlog)
{
    (void)socket, (void)backlog;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    (void)socket, (void)addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    (void)socket, (void)addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rshutdown(int socket, int how)
{
    (void)socket, (void)how;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rclose(int socket)
{
    (void)socket;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
    (void)socket, (void)buf, (void)len, (void)flags;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
                             struct sockaddr *src_addr, socklen_t *addrlen)
{
    (void)socket, (void)buf, (void)len, (void)flags, (void)src_addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
    (void)socket, (void)msg, (void)flags;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
    (void)socket, (void)buf, (void)len, (void)flags;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
                           const struct sockaddr *dest_addr, socklen_t addrlen)
{
    (void)socket, (void)buf, (void)len, (void)flags, (void)dest_addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
    (void)socket, (void)msg, (void)flags;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
    (void)socket, (void)buf, (void)count;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
    (void)socket, (void)iov, (void)iovcnt;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
    (void)socket, (void)buf, (void)count;
    return rcm_err(ENOSYS);
}

UIW_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
    (void)socket, (void)iov, (void)iovcnt;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    (void)fds, (void)nfds, (void)timeout;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
                       struct timeval *timeout)
{
    (void)nfds, (void)readfds, (void)writefds, (void)exceptfds, (void)timeout;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    (void)socket, (void)addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    (void)socket, (void)addr, (void)addrlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
    (void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
    (void)socket, (void)level, (void)optname, (void)optval, (void)optlen;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int rfcntl(int socket, int cmd, ...)
{
    (void)socket, (void)cmd;
    return rcm_err(ENOSYS);
}

UIW_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
    (void)socket, (void)buf, (void)len, (void)prot, (void)flags, (void)offset;
    return rcm_err(ENOSYS);
}

UIW_EXPORT int riounmap(int socket, void *buf, size_t len)
{
    (void)socket, (void)buf, (void)len;
    return rcm_err(ENOSYS);
}

UIW_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
    (void)socket, (void)buf, (void)count, (void)offset, (void)flags;
    errno = ENOSYS;
    return (size_t)-1; /* as rdma-core's riowrite on failure */
}
