/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * epoll over rsockets, for test_rspreload_apps.sh: a plain socket program
 * (no RDMA headers) run as `uiwarp run --rsockets rspreload_epoll`, so
 * that librspreload turns its TCP sockets into rsockets and
 * libuiwarp-rspreload.so's epoll emulation (src/rdmacm/rspreload_compat.c)
 * is what epoll_ctl/epoll_wait meet. One process, one listener, one
 * connection, one epoll set mixing rsockets and a kernel pipe:
 *
 *  - the listener in the set reports the connection request (EPOLLIN);
 *  - EEXIST for a second ADD, ENOENT for MOD/DEL of an fd not in the set,
 *    EPERM still for a real /dev/null;
 *  - EPOLLONESHOT: one report, then none until EPOLL_CTL_MOD re-arms it;
 *  - EPOLLOUT on a connected socket; the data of each event as given;
 *  - a kernel pipe in the same set reports beside the rsockets;
 *  - DEL removes; a closed rsocket leaves the set (no more reports);
 *  - a set of 70 idle rsockets and a pipe (beyond the wait's stack array).
 *
 * Its sockets must be rsockets: librspreload hands the program an open
 * /dev/null as each rsocket's fd (a plain TCP socket, after a fallback,
 * would be "socket:[...]"), checked in /proc/self/fd.
 *
 * Prints "rspreload_epoll: N checks, 0 failed" and exits 0 on success.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

static int checks, failed;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(c)) {                                                                                \
            failed++;                                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s (errno %d %s)\n", __FILE__, __LINE__, #c,     \
                    errno, strerror(errno));                                                       \
        }                                                                                          \
    } while (0)

static struct sockaddr_in addr;

/* librspreload's placeholder for an rsocket is an open /dev/null */
static int is_placeholder(int fd)
{
    char path[64], target[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    if (n < 0)
        return 0;
    target[n] = 0;
    return strcmp(target, "/dev/null") == 0;
}

static void *connector(void *arg)
{
    int *out = arg;
    int c = socket(AF_INET, SOCK_STREAM, 0);
    *out = connect(c, (struct sockaddr *)&addr, sizeof(addr)) == 0 ? c : -1;
    return NULL;
}

/* wait for events; returns how many, each in ev[] */
static int wait_ev(int ep, struct epoll_event *ev, int max, int ms)
{
    return epoll_wait(ep, ev, max, ms);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: rspreload_epoll PORT\n");
        return 2;
    }
    addr = (struct sockaddr_in){.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)atoi(argv[1])),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct epoll_event ev, out[8];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    CHECK(ep >= 0);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    CHECK(l >= 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    CHECK(bind(l, (struct sockaddr *)&addr, sizeof(addr)) == 0);
    CHECK(listen(l, 4) == 0);

    /* a real /dev/null is refused as the kernel refuses it */
    int dn = open("/dev/null", O_RDONLY);
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 99};
    errno = 0;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, dn, &ev) == -1 && errno == EPERM);
    close(dn);

    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 1};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == 0);
    errno = 0;
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, l, &ev) == -1 && errno == EEXIST);
    /* nothing yet */
    CHECK(wait_ev(ep, out, 8, 50) == 0);

    int c = -1;
    pthread_t t;
    pthread_create(&t, NULL, connector, &c);
    int n = wait_ev(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 1 && (out[0].events & EPOLLIN));
    int a = accept(l, NULL, NULL);
    CHECK(a >= 0);
    pthread_join(t, NULL);
    CHECK(c >= 0);
    CHECK(is_placeholder(l) && is_placeholder(a) && is_placeholder(c)); /* rsockets */

    /* a kernel pipe beside the rsockets */
    int p[2];
    CHECK(pipe(p) == 0);
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 7};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0);

    /* one-shot: reported once, then not until re-armed */
    ev = (struct epoll_event){.events = EPOLLIN | EPOLLONESHOT, .data.u64 = 2};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) == 0);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, l, NULL) == 0);
    errno = 0;
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, l, NULL) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, l, &ev) == -1 && errno == ENOENT);
    CHECK(send(c, "hello", 5, 0) == 5);
    n = wait_ev(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 2 && (out[0].events & EPOLLIN));
    CHECK(wait_ev(ep, out, 8, 100) == 0); /* disarmed, data still unread */
    ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 3};
    CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev) == 0);
    n = wait_ev(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 3);
    char buf[16];
    CHECK(recv(a, buf, sizeof(buf), 0) == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK(wait_ev(ep, out, 8, 100) == 0); /* level-triggered: nothing left */

    /* the pipe and a writable rsocket in one wait */
    CHECK(write(p[1], "z", 1) == 1);
    ev = (struct epoll_event){.events = EPOLLOUT, .data.u64 = 4};
    CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) == 0);
    n = wait_ev(ep, out, 8, 5000);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        if (out[i].data.u64 == 7 && (out[i].events & EPOLLIN))
            seen |= 1;
        if (out[i].data.u64 == 4 && (out[i].events & EPOLLOUT))
            seen |= 2;
    }
    CHECK(n == 2 && seen == 3);
    /* maxevents 1: one at a time, nothing lost */
    n = wait_ev(ep, out, 1, 5000);
    CHECK(n == 1);
    CHECK(read(p[0], buf, 1) == 1);
    CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL) == 0);
    CHECK(wait_ev(ep, out, 8, 100) == 0);

    /* a set larger than the wait keeps on its stack (64): 70 idle
     * rsockets beside the pipe; only the pipe reports */
    {
        int ep2 = epoll_create1(0), idle[70], ok = 1;
        for (int i = 0; i < 70; i++) {
            idle[i] = socket(AF_INET, SOCK_STREAM, 0);
            ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 100u + (unsigned)i};
            ok &= idle[i] >= 0 && epoll_ctl(ep2, EPOLL_CTL_ADD, idle[i], &ev) == 0;
        }
        CHECK(ok);
        ev = (struct epoll_event){.events = EPOLLIN, .data.u64 = 7};
        CHECK(epoll_ctl(ep2, EPOLL_CTL_ADD, p[0], &ev) == 0);
        CHECK(wait_ev(ep2, out, 8, 50) == 0);
        CHECK(write(p[1], "y", 1) == 1);
        n = wait_ev(ep2, out, 8, 5000);
        CHECK(n == 1 && out[0].data.u64 == 7);
        CHECK(read(p[0], buf, 1) == 1);
        for (int i = 0; i < 70; i++)
            close(idle[i]);
        close(ep2);
    }

    /* the peer closes: the other end reports end of stream (readable) */
    close(c);
    n = wait_ev(ep, out, 8, 5000);
    CHECK(n == 1 && out[0].data.u64 == 3 && (out[0].events & (EPOLLIN | EPOLLHUP)));
    CHECK(recv(a, buf, sizeof(buf), 0) == 0);
    /* a closed rsocket leaves the set */
    close(a);
    CHECK(wait_ev(ep, out, 8, 100) == 0);
    errno = 0;
    CHECK(epoll_wait(ep, out, 0, 0) == -1 && errno == EINVAL);

    close(p[0]);
    close(p[1]);
    close(l);
    close(ep);
    printf("rspreload_epoll: %d checks, %d failed\n", checks, failed);
    return failed ? 1 : 0;
}
