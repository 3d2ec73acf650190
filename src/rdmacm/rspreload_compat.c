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
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The next definition of name (libc's), looked up once into *slot. */
static void *next_fn(void **slot, const char *name)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, fn, __ATOMIC_RELAXED);
    }
    return fn;
}

typedef int (*accept4_fn)(int, struct sockaddr *, socklen_t *, int);

__attribute__((visibility("default"))) int accept4(int s, struct sockaddr *addr, socklen_t *len,
                                                   int flags)
{
    static void *next;
    accept4_fn fn = (accept4_fn)next_fn(&next, "accept4");
    if (!fn) {
        errno = ENOSYS;
        return -1;
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
    static void *next;
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
    ioctl_fn fn = (ioctl_fn)next_fn(&next, "ioctl");
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    return fn(fd, req, arg);
}

/* ------------------------------------------------------------------------
 * epoll over rsockets
 *
 * rdma-core 44's librspreload does not intercept epoll: epoll_ctl() on an
 * rsocket's placeholder (/dev/null) fails with EPERM, so event loops
 * (Python's asyncio, most servers) cannot wait on rsockets. Here such an
 * fd, when it is an rsocket (librspreload's getsockopt(SO_TYPE) answers
 * for it), is kept in a list of our own for that epoll instance; an
 * epoll_wait on an instance with such entries waits in poll() --
 * librspreload's, which hands rsockets to rpoll() and kernel fds to the
 * kernel -- on the epoll fd itself (readable when its kernel fds have
 * events) and the rsockets, then takes the kernel's events with a
 * zero-timeout epoll_wait and adds the rsockets'. Level-triggered:
 * EPOLLET is taken as level-triggered (asyncio and most loops use level);
 * EPOLLONESHOT disarms the entry until EPOLL_CTL_MOD. A closed rsocket
 * (poll says POLLNVAL) leaves the list, as a closed fd leaves an epoll
 * set. Instances without rsockets go straight to the kernel.
 * ---------------------------------------------------------------------- */

struct emu_ep {
    struct emu_ep *next;
    int epfd, fd;
    uint32_t events;
    epoll_data_t data;
    bool armed;
};

static pthread_mutex_t emu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct emu_ep *emu_list;
#define EMU_SMALL 64 /* poll entries kept on the stack by a wait */

/* librspreload answers SO_TYPE for its rsockets; a real /dev/null does not */
static bool is_rsocket(int fd)
{
    int type = 0;
    socklen_t l = sizeof(type);
    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l) == 0 && type == SOCK_STREAM;
}

static struct emu_ep **emu_find(int epfd, int fd)
{
    struct emu_ep **pp = &emu_list;
    while (*pp && !((*pp)->epfd == epfd && (*pp)->fd == fd))
        pp = &(*pp)->next;
    return pp;
}

/* a new epoll fd may reuse a closed one's number: forget that one's rsockets */
static void emu_forget_epfd(int epfd)
{
    pthread_mutex_lock(&emu_lock);
    for (struct emu_ep **pp = &emu_list; *pp;) {
        if ((*pp)->epfd == epfd) {
            struct emu_ep *e = *pp;
            *pp = e->next;
            free(e);
        } else {
            pp = &(*pp)->next;
        }
    }
    pthread_mutex_unlock(&emu_lock);
}

__attribute__((visibility("default"))) int epoll_create1(int flags)
{
    static void *next;
    int (*fn)(int) = (int (*)(int))next_fn(&next, "epoll_create1");
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    int fd = fn(flags);
    if (fd >= 0)
        emu_forget_epfd(fd);
    return fd;
}

__attribute__((visibility("default"))) int epoll_create(int size)
{
    if (size <= 0) {
        errno = EINVAL;
        return -1;
    }
    return epoll_create1(0);
}

__attribute__((visibility("default"))) int epoll_ctl(int epfd, int op, int fd,
                                                     struct epoll_event *ev)
{
    static void *next;
    int (*fn)(int, int, int, struct epoll_event *) =
        (int (*)(int, int, int, struct epoll_event *))next_fn(&next, "epoll_ctl");
    if (!fn) {
        errno = ENOSYS;
        return -1;
    }
    int r = fn(epfd, op, fd, ev);
    if (r == 0 || errno != EPERM)
        return r;
    if (!is_rsocket(fd)) {
        errno = EPERM; /* the kernel's answer, not the probe's */
        return r;
    }
    pthread_mutex_lock(&emu_lock);
    struct emu_ep **pp = emu_find(epfd, fd);
    r = 0;
    if (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) {
        if (!ev) {
            errno = EFAULT;
            r = -1;
        } else if (op == EPOLL_CTL_ADD && *pp) {
            errno = EEXIST;
            r = -1;
        } else if (op == EPOLL_CTL_MOD && !*pp) {
            errno = ENOENT;
            r = -1;
        } else {
            struct emu_ep *e = *pp ? *pp : calloc(1, sizeof(*e));
            if (!e) {
                errno = ENOMEM;
                r = -1;
            } else {
                if (!*pp) {
                    e->epfd = epfd;
                    e->fd = fd;
                    e->next = emu_list;
                    emu_list = e;
                }
                e->events = ev->events;
                e->data = ev->data;
                e->armed = true;
            }
        }
    } else if (op == EPOLL_CTL_DEL) {
        if (!*pp) {
            errno = ENOENT;
            r = -1;
        } else {
            struct emu_ep *e = *pp;
            *pp = e->next;
            free(e);
        }
    } else {
        errno = EINVAL;
        r = -1;
    }
    pthread_mutex_unlock(&emu_lock);
    return r;
}

static short ev_to_poll(uint32_t ev)
{
    short p = 0;
    if (ev & EPOLLIN)
        p |= POLLIN;
    if (ev & EPOLLOUT)
        p |= POLLOUT;
    if (ev & EPOLLPRI)
        p |= POLLPRI;
    if (ev & EPOLLRDHUP)
        p |= POLLRDHUP;
    return p;
}

static uint32_t poll_to_ev(short p)
{
    uint32_t ev = 0;
    if (p & POLLIN)
        ev |= EPOLLIN;
    if (p & POLLOUT)
        ev |= EPOLLOUT;
    if (p & POLLPRI)
        ev |= EPOLLPRI;
    if (p & POLLRDHUP)
        ev |= EPOLLRDHUP;
    if (p & POLLERR)
        ev |= EPOLLERR;
    if (p & POLLHUP)
        ev |= EPOLLHUP;
    return ev;
}

typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);
static void *next_epoll_wait;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The wait for an instance with rsockets; -2: it has none (use the kernel's). */
static int emu_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
    epoll_wait_fn kwait = (epoll_wait_fn)next_fn(&next_epoll_wait, "epoll_wait");
    if (!kwait) {
        errno = ENOSYS;
        return -1;
    }
    if (max <= 0 || !evs) {
        errno = EINVAL;
        return -1;
    }
    int64_t end = timeout >= 0 ? mono_ms() + timeout : -1;
    for (;;) {
        pthread_mutex_lock(&emu_lock);
        int n = 0;
        for (struct emu_ep *e = emu_list; e; e = e->next)
            n += e->epfd == epfd;
        if (!n) {
            pthread_mutex_unlock(&emu_lock);
            return -2;
        }
        /* an event loop's rsockets fit on the stack; more on the heap */
        struct pollfd pf_small[EMU_SMALL];
        struct emu_ep *who_small[EMU_SMALL];
        struct pollfd *pf = pf_small;
        struct emu_ep **who = who_small;
        if (n + 1 > EMU_SMALL) {
            pf = calloc((size_t)n + 1, sizeof(*pf));
            who = calloc((size_t)n + 1, sizeof(*who));
            if (!pf || !who) {
                pthread_mutex_unlock(&emu_lock);
                free(pf);
                free(who);
                errno = ENOMEM;
                return -1;
            }
        }
        pf[0] = (struct pollfd){.fd = epfd, .events = POLLIN};
        int k = 1;
        for (struct emu_ep *e = emu_list; e; e = e->next)
            if (e->epfd == epfd) {
                /* a disarmed (EPOLLONESHOT) entry is still watched for
                 * nothing, so that a close shows as POLLNVAL */
                pf[k] =
                    (struct pollfd){.fd = e->fd, .events = e->armed ? ev_to_poll(e->events) : 0};
                who[k++] = e;
            }
        pthread_mutex_unlock(&emu_lock);

        int left = timeout < 0 ? -1 : (int)(end - mono_ms() > 0 ? end - mono_ms() : 0);
        int r = poll(pf, (nfds_t)k, left); /* librspreload's: rsockets and kernel fds */
        if (r < 0) {
            int e = errno;
            if (pf != pf_small) {
                free(pf);
                free(who);
            }
            errno = e;
            return -1;
        }
        int got = 0;
        pthread_mutex_lock(&emu_lock);
        for (int i = 1; i < k; i++) {
            /* the entry may have gone meanwhile (EPOLL_CTL_DEL elsewhere) */
            struct emu_ep **pp = emu_find(epfd, pf[i].fd);
            if (!*pp || *pp != who[i])
                continue;
            struct emu_ep *e = *pp;
            if (pf[i].revents & POLLNVAL) { /* closed */
                *pp = e->next;
                free(e);
                continue;
            }
            uint32_t ev = poll_to_ev(pf[i].revents) & (e->events | EPOLLERR | EPOLLHUP);
            if (!ev || !e->armed || got == max)
                continue;
            evs[got].events = ev;
            evs[got].data = e->data;
            got++;
            if (e->events & EPOLLONESHOT)
                e->armed = false;
        }
        pthread_mutex_unlock(&emu_lock);
        if (got < max && (pf[0].revents & POLLIN)) {
            int kr = kwait(epfd, evs + got, max - got, 0);
            if (kr > 0)
                got += kr;
        }
        if (pf != pf_small) {
            free(pf);
            free(who);
        }
        if (got || (timeout >= 0 && mono_ms() >= end))
            return got;
    }
}

__attribute__((visibility("default"))) int epoll_wait(int epfd, struct epoll_event *evs, int max,
                                                      int timeout)
{
    int r = emu_wait(epfd, evs, max, timeout);
    if (r != -2)
        return r;
    return ((epoll_wait_fn)next_fn(&next_epoll_wait, "epoll_wait"))(epfd, evs, max, timeout);
}

__attribute__((visibility("default"))) int epoll_pwait(int epfd, struct epoll_event *evs, int max,
                                                       int timeout, const sigset_t *sigmask)
{
    static void *next;
    int (*fn)(int, struct epoll_event *, int, int, const sigset_t *) =
        (int (*)(int, struct epoll_event *, int, int, const sigset_t *))next_fn(&next,
                                                                                "epoll_pwait");
    pthread_mutex_lock(&emu_lock);
    bool mine = false;
    for (struct emu_ep *e = emu_list; e && !mine; e = e->next)
        mine = e->epfd == epfd;
    pthread_mutex_unlock(&emu_lock);
    if (!mine || !fn)
        return fn ? fn(epfd, evs, max, timeout, sigmask) : (errno = ENOSYS, -1);
    /* not atomic with the wait, as the kernel's is: a signal that comes
     * between the mask change and poll() waits for the next event */
    sigset_t old;
    if (sigmask)
        pthread_sigmask(SIG_SETMASK, sigmask, &old);
    int r = emu_wait(epfd, evs, max, timeout);
    int e = errno;
    if (sigmask)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    if (r == -2)
        r = fn(epfd, evs, max, timeout, sigmask);
    return r;
}
