/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Kernel sockets for uiwarp's own use (the engine's TCP connections and
 * listeners, librdmacm's address reservations and route look-ups).
 *
 * A program may run with a library that interposes socket() and hands the
 * call to the rsocket API: rdma-core's librspreload.so
 * (docs/RSOCKETS.md). rdma-core's librdmacm never creates sockets, but
 * uiwarp's rsockets run over TCP sockets of uiwarp's own, and a socket()
 * made while connecting an rsocket would be turned into another rsocket,
 * which connects with another socket() ... until the process runs out of
 * fds. So uiwarp asks the kernel directly. The other socket calls may go
 * through such a library: it passes fds it did not create through to libc.
 */
#ifndef UIWARP_IFACE_UIW_SYS_H
#define UIWARP_IFACE_UIW_SYS_H

#include <sys/syscall.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
#include <sys/socket.h>
#endif

static inline int uiw_kernel_socket(int domain, int type, int protocol)
{
#if defined(__SANITIZE_THREAD__)
    /* ThreadSanitizer orders I/O on the sockets it saw created (libc's
     * socket(), which it intercepts); a socket it never saw made its
     * reports false (test_multi: a Write placed after the peer's memset,
     * ordered only through the connection). TSan builds never run under
     * librspreload. */
    return socket(domain, type, protocol);
#else
    return (int)syscall(SYS_socket, domain, type, protocol);
#endif
}

#endif
