/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libuiwarp-rspreload.so: what rdma-core 44's librspreload.so (Debian 12's
 * librdmacm1) leaves out, for socket programs run over uiwarp's rsockets
 * (docs/RSOCKETS.md). `uiwarp run` preloads it after librspreload.so.
 *
 * librspreload hands the application a placeholder fd (an open /dev/null)
 * for each rsocket and intercepts the socket calls to translate it. It does
 * not intercept accept4(), which glibc programs use for accept (Python's
 * socket.accept: accept4(fd, ..., SOCK_CLOEXEC)); the kernel then sees the
 * placeholder and fails with ENOTSOCK. Here accept4 tries the next
 * definition (libc's, or a librspreload that has one) and, on ENOTSOCK,
 * accepts through accept() -- librspreload's, which maps rsockets -- and
 * applies the flags with fcntl(), as later rdma-core versions do.
 * FD_CLOEXEC is set on the rsocket's own fd; the placeholder keeps its
 * flags (a /dev/null fd left open across exec).
 *
 * Nor does it intercept ioctl(FIONBIO), with which Python's
 * setblocking()/settimeout() switch a socket's O_NONBLOCK: the placeholder
 * took the flag and the rsocket stayed blocking (a recv on a nonblocking
 * socket with no data waited instead of failing with EAGAIN). Here FIONBIO
 * becomes fcntl(F_SETFL) with O_NONBLOCK, the same flag for a kernel fd,
 * and what librspreload hands to rfcntl() for an rsocket.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

__attribute__((visibility("default"))) int accept4(int s, struct sockaddr *addr, socklen_t *len,
                                                   int flags)
{
    static accept4_fn next;
    accept4_fn fn = __atomic_load_n(&next, __ATOMIC_RELAXED);
    if (!fn) {
        fn = (accept4_fn)dlsym(RTLD_NEXT, "accept4");
        if (!fn) {
            errno = ENOSYS;
            return -1;
        }
        __atomic_store_n(&next, fn, __ATOMIC_RELAXED);
    }
    int fd = fn(s, addr, len, flags);
    if (fd >= 0 || errno != ENOTSOCK)
        return fd;
    fd = accept(s, addr, len); /* librspreload's: an rsocket's placeholder */
    if (fd < 0)
        return fd;
    if (flags & SOCK_NONBLOCK) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
    }
    if (flags & SOCK_CLOEXEC)
        (void)fcntl(fd, F_SETFD, FD_CLOEXEC); /* best effort, see above */
    return fd;
}

typedef int (*ioctl_fn)(int, unsigned long, ...);

__attribute__((visibility("default"))) int ioctl(int fd, unsigned long req, ...)
{
    static ioctl_fn next;
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (req == FIONBIO && arg) {
        int on = *(const int *)arg;
        int fl = fcntl(fd, F_GETFL); /* librspreload's: an rsocket's flags */
        if (fl < 0)
            return -1;
        return fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
    }
    ioctl_fn fn = __atomic_load_n(&next, __ATOMIC_RELAXED);
    if (!fn) {
        fn = (ioctl_fn)dlsym(RTLD_NEXT, "ioctl");
        if (!fn) {
            errno = ENOSYS;
            return -1;
        }
        __atomic_store_n(&next, fn, __ATOMIC_RELAXED);
    }
    return fn(fd, req, arg);
}
