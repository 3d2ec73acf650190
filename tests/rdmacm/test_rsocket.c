/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rsockets (<rdma/rsocket.h>) over uiwarp: a server and a client rsocket in
 * this process, on 127.0.0.1 (and ::1 where it exists), each sending 16 MiB
 * to the other in random-sized chunks at the same time; every byte
 * received is compared with what the peer sent.
 *
 *  - blocking: per socket one thread sends (rsend) while another receives
 *    (rrecv), both blocking;
 *  - nonblocking: per socket one thread with O_NONBLOCK (rfcntl) drives
 *    both directions from rpoll(POLLIN | POLLOUT), taking EAGAIN.
 *
 * Then the client shuts its sending side (rshutdown SHUT_WR): the server
 * reads end of stream (0), and both close. Before the transfer, the calls
 * librspreload.so makes for socket programs: getsockname with a length
 * alone, TCP_INFO, TCP_MAXSEG, FD_CLOEXEC.
 *
 * riomap / riowrite: mapping limits (RDMA_IOMAPSIZE, its wire rounding,
 * ENOMEM when the peer offers no more), a mapping unknown to the writer
 * until the mapper's next send (EINVAL), 64 KiB written straight into the
 * peer's mapped buffer and 1000 bytes into a second mapping at its own
 * address (offset -1), checked byte for byte once a message sent after
 * them arrives; a write stops at a mapping's end; riounmap.
 *
 * Keepalive: with SO_KEEPALIVE and TCP_KEEPIDLE 1 s an idle connection
 * carries data segments (the zero-length RDMA Writes, seen in the TCP
 * sockets' tcpi_data_segs_out) and stays usable; without, it stays silent.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rsocket.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/tcp.h> /* tcpi_data_segs_out (glibc's tcp_info is older) */
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/eng_test.h"

#define XFER      (16u << 20)
#define MAX_CHUNK (256u << 10)

struct side {
    int fd;
    const uint8_t *out; /* XFER bytes to send */
    uint8_t *in;        /* XFER bytes received */
    uint32_t seed;      /* chunk sizes */
    size_t sent, got;
    int send_err, recv_err; /* errno of a failed call, else 0 */
    int eagain;             /* nonblocking: EAGAIN seen (sends or receives) */
};

/* A chunk size: mostly up to 64 KiB, some tiny, some up to MAX_CHUNK. */
static size_t chunk(uint32_t *seed, size_t left)
{
    uint32_t r = (uint32_t)rand_r(seed);
    size_t n;
    switch (r % 4) {
    case 0:
        n = 1 + (size_t)(r >> 8) % 64;
        break;
    case 1:
        n = 1 + (size_t)(r >> 8) % MAX_CHUNK;
        break;
    default:
        n = 1 + (size_t)(r >> 8) % 65536;
    }
    return n < left ? n : left;
}

static void *send_all(void *arg)
{
    struct side *s = arg;
    uint32_t seed = s->seed;
    while (s->sent < XFER) {
        ssize_t n = rsend(s->fd, s->out + s->sent, chunk(&seed, XFER - s->sent), 0);
        if (n <= 0) {
            s->send_err = n < 0 ? errno : EPIPE;
            break;
        }
        s->sent += (size_t)n;
    }
    return NULL;
}

static void *recv_all(void *arg)
{
    struct side *s = arg;
    uint32_t seed = s->seed ^ 0x5a5a5a5au;
    while (s->got < XFER) {
        ssize_t n = rrecv(s->fd, s->in + s->got, chunk(&seed, XFER - s->got), 0);
        if (n <= 0) {
            s->recv_err = n < 0 ? errno : ECONNRESET;
            break;
        }
        s->got += (size_t)n;
    }
    return NULL;
}

/* Blocking: a sender and a receiver thread on the socket. */
static void *run_blocking(void *arg)
{
    pthread_t t;
    pthread_create(&t, NULL, send_all, arg);
    recv_all(arg);
    pthread_join(t, NULL);
    return NULL;
}

/* Nonblocking: one thread, rpoll, both directions. */
static void *run_nonblocking(void *arg)
{
    struct side *s = arg;
    uint32_t sseed = s->seed, rseed = s->seed ^ 0x5a5a5a5au;
    int fl = rfcntl(s->fd, F_GETFL);
    if (fl < 0 || rfcntl(s->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        s->send_err = s->recv_err = errno;
        return NULL;
    }
    size_t want_s = 0, want_r = 0; /* a chunk retried after EAGAIN keeps its size */
    uint64_t start = eng_now_ms();
    while ((s->sent < XFER || s->got < XFER) && eng_now_ms() - start < 120000) {
        struct pollfd pf = {.fd = s->fd, .events = 0};
        if (s->sent < XFER)
            pf.events |= POLLOUT;
        if (s->got < XFER)
            pf.events |= POLLIN;
        int pr = rpoll(&pf, 1, 1000);
        if (pr < 0) {
            s->send_err = s->recv_err = errno;
            return NULL;
        }
        if (pf.revents & (POLLERR | POLLNVAL)) {
            s->send_err = s->recv_err = EIO;
            return NULL;
        }
        if (s->sent < XFER) {
            if (!want_s)
                want_s = chunk(&sseed, XFER - s->sent);
            ssize_t n = rsend(s->fd, s->out + s->sent, want_s, 0);
            if (n > 0) {
                s->sent += (size_t)n;
                want_s = 0;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                s->eagain = 1;
            } else {
                s->send_err = n < 0 ? errno : EPIPE;
                return NULL;
            }
        }
        if (s->got < XFER) {
            if (!want_r)
                want_r = chunk(&rseed, XFER - s->got);
            ssize_t n = rrecv(s->fd, s->in + s->got, want_r, 0);
            if (n > 0) {
                s->got += (size_t)n;
                want_r = 0;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                s->eagain = 1;
            } else {
                s->recv_err = n < 0 ? errno : ECONNRESET;
                return NULL;
            }
        }
    }
    rfcntl(s->fd, F_SETFL, fl);
    return NULL;
}

struct listener {
    int lfd, fd, err;
};

static void *accept_one(void *arg)
{
    struct listener *l = arg;
    l->fd = raccept(l->lfd, NULL, NULL);
    l->err = l->fd < 0 ? errno : 0;
    return NULL;
}

/* What librspreload.so and the socket programs behind it ask of a
 * listening and a connected rsocket (docs/RSOCKETS.md). */
static void check_socket_calls(int lfd, int cfd, int family)
{
    socklen_t want = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    /* the length alone (librspreload's fallback to TCP learns the family so) */
    socklen_t len = 0;
    CHECK_EQ(rgetsockname(cfd, NULL, &len), 0);
    CHECK_EQ(len, want);
    len = 0;
    CHECK_EQ(rgetpeername(cfd, NULL, &len), 0);
    CHECK_EQ(len, want);
    len = sizeof(struct sockaddr_in);
    CHECK_EQ(rgetsockname(cfd, NULL, &len), -1);
    CHECK_EQ(errno, EFAULT);

    /* TCP_INFO (iperf3): the state; as much as fits */
    struct tcp_info ti;
    memset(&ti, 0xff, sizeof(ti));
    len = sizeof(ti);
    CHECK_EQ(rgetsockopt(cfd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
    /* glibc's struct tcp_info (what rsocket.c fills) ends there; the
     * kernel's is longer */
    CHECK(len >= offsetof(struct tcp_info, tcpi_total_retrans) + 4 && len <= sizeof(ti));
    CHECK_EQ(ti.tcpi_state, 1); /* TCP_ESTABLISHED (<netinet/tcp.h>, not with linux/tcp.h) */
    CHECK_EQ(ti.tcpi_total_retrans, 0);
    len = 1;
    CHECK_EQ(rgetsockopt(lfd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
    CHECK_EQ(len, 1);
    CHECK_EQ(ti.tcpi_state, 10); /* TCP_LISTEN */
    /* TCP_MAXSEG: a size a TCP MSS can be (iperf3 warns of "nonsense") */
    int v = 0;
    len = sizeof(v);
    CHECK_EQ(rgetsockopt(cfd, IPPROTO_TCP, TCP_MAXSEG, &v, &len), 0);
    CHECK(v > 0 && v < 65536);

    /* FD_CLOEXEC (accept4's SOCK_CLOEXEC through librspreload) */
    CHECK_EQ(rfcntl(cfd, F_SETFD, 0), 0);
    CHECK_EQ(rfcntl(cfd, F_GETFD), 0);
    CHECK_EQ(rfcntl(cfd, F_SETFD, FD_CLOEXEC), 0);
    CHECK_EQ(rfcntl(cfd, F_GETFD), FD_CLOEXEC);
}

static void run_case(int family, bool nonblocking, const uint8_t *a2b, const uint8_t *b2a,
                     uint8_t *ina, uint8_t *inb)
{
    const char *name = family == AF_INET6 ? "::1" : "127.0.0.1";
    printf("case %s %s\n", name, nonblocking ? "nonblocking (rpoll)" : "blocking");
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_addr = in6addr_loopback;
        sl = sizeof(*s6);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof(*s4);
    }
    struct listener l = {.lfd = rsocket(family, SOCK_STREAM, 0), .fd = -1};
    CHECK(l.lfd >= 0);
    CHECK_EQ(rbind(l.lfd, (struct sockaddr *)&ss, sl), 0);
    CHECK_EQ(rlisten(l.lfd, 4), 0);
    socklen_t nl = sizeof(ss);
    CHECK_EQ(rgetsockname(l.lfd, (struct sockaddr *)&ss, &nl), 0);
    CHECK(((struct sockaddr_in *)&ss)->sin_port != 0);

    pthread_t at;
    pthread_create(&at, NULL, accept_one, &l);
    int cfd = rsocket(family, SOCK_STREAM, 0);
    CHECK(cfd >= 0);
    CHECK_EQ(rconnect(cfd, (struct sockaddr *)&ss, sl), 0);
    pthread_join(at, NULL);
    CHECK(l.fd >= 0);
    CHECK_EQ(l.err, 0);
    if (cfd < 0 || l.fd < 0) {
        rclose(l.lfd);
        return;
    }
    struct sockaddr_storage peer;
    socklen_t pl = sizeof(peer);
    CHECK_EQ(rgetpeername(cfd, (struct sockaddr *)&peer, &pl), 0);
    CHECK_EQ(peer.ss_family, family);
    check_socket_calls(l.lfd, cfd, family);

    memset(ina, 0, XFER);
    memset(inb, 0, XFER);
    struct side a = {.fd = cfd, .out = a2b, .in = ina, .seed = 1};
    struct side b = {.fd = l.fd, .out = b2a, .in = inb, .seed = 2};
    void *(*fn)(void *) = nonblocking ? run_nonblocking : run_blocking;
    uint64_t t0 = eng_now_ms();
    pthread_t ta, tb;
    pthread_create(&ta, NULL, fn, &a);
    pthread_create(&tb, NULL, fn, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    uint64_t ms = eng_now_ms() - t0;
    printf("  %u bytes each way in %llu ms\n", XFER, (unsigned long long)ms);
    CHECK_EQ(a.send_err, 0);
    CHECK_EQ(a.recv_err, 0);
    CHECK_EQ(b.send_err, 0);
    CHECK_EQ(b.recv_err, 0);
    CHECK_EQ(a.sent, XFER);
    CHECK_EQ(b.sent, XFER);
    CHECK_EQ(a.got, XFER);
    CHECK_EQ(b.got, XFER);
    CHECK_MEM(inb, a2b, XFER); /* client -> server */
    CHECK_MEM(ina, b2a, XFER); /* server -> client */
    if (nonblocking)
        CHECK(a.eagain || b.eagain); /* the nonblocking paths were taken */

    /* end of stream: the client stops sending; the server reads 0 */
    CHECK_EQ(rshutdown(cfd, SHUT_WR), 0);
    char c;
    errno = EAGAIN;
    CHECK_EQ(rrecv(l.fd, &c, 1, 0), 0);
    CHECK_EQ(errno, 0); /* not a stale EAGAIN: rstream loops on one */
    CHECK_EQ(rclose(l.fd), 0);
    CHECK_EQ(rclose(cfd), 0);
    CHECK_EQ(rclose(l.lfd), 0);
}

/* A connected pair on 127.0.0.1; the listener gets lopt (level, name, v)
 * before listening and the client copt before connecting. */
struct pair {
    int lfd, sfd, cfd;
};

static bool connect_pair(struct pair *p, int lopt, int lval, int copt, int cval)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct listener l = {.lfd = rsocket(AF_INET, SOCK_STREAM, 0), .fd = -1};
    p->lfd = l.lfd;
    p->cfd = rsocket(AF_INET, SOCK_STREAM, 0);
    CHECK(l.lfd >= 0 && p->cfd >= 0);
    if (lopt)
        CHECK_EQ(rsetsockopt(l.lfd, SOL_RDMA, lopt, &lval, sizeof(lval)), 0);
    if (copt)
        CHECK_EQ(rsetsockopt(p->cfd, SOL_RDMA, copt, &cval, sizeof(cval)), 0);
    CHECK_EQ(rbind(l.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    CHECK_EQ(rlisten(l.lfd, 4), 0);
    socklen_t nl = sizeof(sa);
    CHECK_EQ(rgetsockname(l.lfd, (struct sockaddr *)&sa, &nl), 0);
    pthread_t at;
    pthread_create(&at, NULL, accept_one, &l);
    CHECK_EQ(rconnect(p->cfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    pthread_join(at, NULL);
    p->sfd = l.fd;
    CHECK(p->sfd >= 0);
    return p->sfd >= 0;
}

static void close_pair(struct pair *p)
{
    CHECK_EQ(rclose(p->cfd), 0);
    if (p->sfd >= 0)
        CHECK_EQ(rclose(p->sfd), 0);
    CHECK_EQ(rclose(p->lfd), 0);
}

static void case_iomap(void)
{
    printf("case riomap/riowrite\n");
    char c = 0;
    uint8_t *sb = malloc(65536), *sb2 = malloc(4096), *pat = malloc(65536);
    eng_fill(pat, 65536, 33);
    memset(sb, 0, 65536);
    memset(sb2, 0, 4096);

    /* RDMA_IOMAPSIZE: read back, rounded as the wire's 8-bit scale says */
    int s = rsocket(AF_INET, SOCK_STREAM, 0), v = 300, got = -1;
    socklen_t len = sizeof(got);
    CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &v, sizeof(v)), 0);
    CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &got, &len), 0);
    CHECK_EQ(got, 256);
    v = -1;
    CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &v, sizeof(v)), -1);
    CHECK_EQ(errno, EINVAL);
    /* a mapping needs a connection */
    CHECK_EQ(riomap(s, sb, 4096, PROT_WRITE, 0, 0), -1);
    CHECK_EQ(errno, EINVAL);
    rclose(s);

    /* the server offers 2 mappings (inherited from the listener), the
     * client 16 */
    struct pair p;
    if (!connect_pair(&p, RDMA_IOMAPSIZE, 2, RDMA_IOMAPSIZE, 16))
        goto out;
    len = sizeof(got);
    CHECK_EQ(rgetsockopt(p.sfd, SOL_RDMA, RDMA_IOMAPSIZE, &got, &len), 0);
    CHECK_EQ(got, 2);

    /* misuse */
    CHECK_EQ(riomap(p.sfd, sb, 65536, PROT_READ, 0, 0), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(riomap(p.sfd, NULL, 65536, PROT_WRITE, 0, 0), -1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(riomap(-1, sb, 65536, PROT_WRITE, 0, 0), -1);
    CHECK_EQ(errno, EBADF);

    /* the server maps sb at offset 0 and sb2 at its own address */
    CHECK_EQ(riomap(p.sfd, sb, 65536, PROT_WRITE, 0, 0), 0);
    off_t o2 = riomap(p.sfd, sb2, 4096, PROT_WRITE, 0, -1);
    CHECK_EQ(o2, (off_t)(uintptr_t)sb2);
    /* the client may map only 2 buffers at the server (its RDMA_IOMAPSIZE) */
    uint8_t cb[3][64];
    CHECK_EQ(riomap(p.cfd, cb[0], 64, PROT_WRITE, 0, 0), 0);
    CHECK_EQ(riomap(p.cfd, cb[1], 64, PROT_WRITE, 0, 64), 64);
    CHECK_EQ(riomap(p.cfd, cb[2], 64, PROT_WRITE, 0, 128), -1);
    CHECK_EQ(errno, ENOMEM);
    CHECK_EQ(riounmap(p.cfd, cb[1], 63), -1); /* not what was mapped */
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(riounmap(p.cfd, cb[1], 64), 0);
    CHECK_EQ(riomap(p.cfd, cb[2], 64, PROT_WRITE, 0, 128), 128); /* the freed slot */
    CHECK_EQ(riomap(p.cfd, cb[1], 64, PROT_NONE, 0, 0), 0);      /* local: no slot */

    /* the client does not know the server's mappings before its next send */
    errno = 0;
    CHECK_EQ(riowrite(p.cfd, pat, 100, 0, 0), (size_t)-1);
    CHECK_EQ(errno, EINVAL);
    CHECK_EQ(rsend(p.sfd, "m", 1, 0), 1);
    CHECK_EQ(rrecv(p.cfd, &c, 1, 0), 1);
    CHECK_EQ(c, 'm');

    /* 64 KiB into sb in uneven pieces, 1000 bytes into sb2 at offset o2 + 100 */
    size_t done = 0, piece = 1;
    while (done < 65536) {
        size_t n = piece < 65536 - done ? piece : 65536 - done;
        size_t w = riowrite(p.cfd, pat + done, n, (off_t)done, 0);
        CHECK_EQ(w, n);
        if (w != n)
            break;
        done += n;
        piece = piece * 3 + 1;
    }
    CHECK_EQ(riowrite(p.cfd, pat, 1000, o2 + 100, 0), 1000);
    /* a write stops at the end of a mapping */
    CHECK_EQ(riowrite(p.cfd, pat, 100, o2 + 4090, 0), 6);
    CHECK_EQ(riowrite(p.cfd, pat, 100, o2 + 4096, 0), (size_t)-1);
    CHECK_EQ(errno, EINVAL);
    /* the message sent after the writes arrives after them */
    CHECK_EQ(rsend(p.cfd, "w", 1, 0), 1);
    CHECK_EQ(rrecv(p.sfd, &c, 1, 0), 1);
    CHECK_EQ(c, 'w');
    CHECK_MEM(sb, pat, 65536);
    CHECK_MEM(sb2 + 100, pat, 1000);
    CHECK_MEM(sb2 + 4090, pat, 6);
    CHECK_EQ(sb2[99], 0);
    CHECK_EQ(sb2[1100], 0);

    /* and the other way: the client's mapping at offset 128 */
    CHECK_EQ(rsend(p.cfd, "c", 1, 0), 1); /* carries cb[0] and cb[2] */
    CHECK_EQ(rrecv(p.sfd, &c, 1, 0), 1);
    memset(cb[2], 0, 64);
    CHECK_EQ(riowrite(p.sfd, pat, 64, 128, 0), 64);
    CHECK_EQ(rsend(p.sfd, "s", 1, 0), 1);
    CHECK_EQ(rrecv(p.cfd, &c, 1, 0), 1);
    CHECK_MEM(cb[2], pat, 64);

    CHECK_EQ(riounmap(p.sfd, sb2, 4096), 0);
    /* the rest are released by rclose */
    close_pair(&p);
out:
    free(sb);
    free(sb2);
    free(pat);
}

/* Data segments sent by every TCP socket of this process. */
static uint64_t tcp_data_segs_out(void)
{
    uint64_t sum = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct tcp_info ti;
        socklen_t l = sizeof(ti);
        int type;
        socklen_t tl = sizeof(type);
        if (fd > 2 && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) == 0 && type == SOCK_STREAM &&
            getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &l) == 0)
            sum += ti.tcpi_data_segs_out;
    }
    if (d)
        closedir(d);
    return sum;
}

static void case_keepalive(bool on)
{
    printf("case keepalive %s\n", on ? "on (TCP_KEEPIDLE 1 s)" : "off");
    struct pair p;
    if (!connect_pair(&p, 0, 0, 0, 0))
        return;
    int v = 1, got = 0;
    socklen_t len = sizeof(got);
    if (on) {
        v = 0;
        CHECK_EQ(rsetsockopt(p.cfd, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)), -1);
        CHECK_EQ(errno, EINVAL);
        v = 1;
        CHECK_EQ(rsetsockopt(p.cfd, IPPROTO_TCP, TCP_KEEPIDLE, &v, sizeof(v)), 0);
        CHECK_EQ(rsetsockopt(p.cfd, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v)), 0);
        CHECK_EQ(rgetsockopt(p.cfd, SOL_SOCKET, SO_KEEPALIVE, &got, &len), 0);
        CHECK_EQ(got, 1);
        CHECK_EQ(rgetsockopt(p.cfd, IPPROTO_TCP, TCP_KEEPIDLE, &got, &len), 0);
        CHECK_EQ(got, 1);
    }
    char c = 0;
    CHECK_EQ(rsend(p.cfd, "a", 1, 0), 1); /* both sides settled */
    CHECK_EQ(rrecv(p.sfd, &c, 1, 0), 1);
    usleep(100000);
    uint64_t before = tcp_data_segs_out();
    usleep(2600000);
    uint64_t sent = tcp_data_segs_out() - before;
    printf("  data segments in 2.6 s idle: %llu\n", (unsigned long long)sent);
    if (on)
        CHECK(sent >= 2);
    else
        CHECK_EQ(sent, 0);
    /* still a working connection, both ways */
    CHECK_EQ(rsend(p.sfd, "b", 1, 0), 1);
    CHECK_EQ(rrecv(p.cfd, &c, 1, 0), 1);
    CHECK_EQ(c, 'b');
    CHECK_EQ(rsend(p.cfd, "c", 1, 0), 1);
    CHECK_EQ(rrecv(p.sfd, &c, 1, 0), 1);
    CHECK_EQ(c, 'c');
    close_pair(&p);
}

static bool have_ipv6_lo(void)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    bool ok = bind(fd, (struct sockaddr *)&s6, sizeof(s6)) == 0;
    close(fd);
    return ok;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint8_t *a2b = malloc(XFER), *b2a = malloc(XFER), *ina = malloc(XFER), *inb = malloc(XFER);
    if (!a2b || !b2a || !ina || !inb)
        return 1;
    eng_fill(a2b, XFER, 11);
    eng_fill(b2a, XFER, 22);

    /* misuse: clean errors */
    CHECK_EQ(rsocket(AF_INET, SOCK_DGRAM, 0), -1);
    CHECK_EQ(rsend(-1, "x", 1, 0), -1);
    CHECK_EQ(errno, EBADF);

    /* SOL_RDMA options before connecting: set, read back, unknown ones */
    int s = rsocket(AF_INET, SOCK_STREAM, 0);
    CHECK(s >= 0);
    if (s >= 0) {
        int v = 64, got = -1;
        socklen_t len = sizeof(got);
        CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &v, sizeof(v)), 0);
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &got, &len), 0);
        CHECK_EQ(got, 64);
        CHECK_EQ(len, sizeof(int));
        v = 8; /* below the minimum: raised to 16 */
        CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_RQSIZE, &v, sizeof(v)), 0);
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_RQSIZE, &got, &len), 0);
        CHECK_EQ(got, 16);
        v = 100;
        CHECK_EQ(rsetsockopt(s, SOL_RDMA, RDMA_INLINE, &v, sizeof(v)), 0);
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_INLINE, &got, &len), 0);
        CHECK_EQ(got, 100);
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_IOMAPSIZE, &got, &len), 0);
        CHECK_EQ(got, 0); /* no riomap areas unless asked */
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_ROUTE, &got, &len), -1);
        CHECK_EQ(errno, ENOPROTOOPT);
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, -1, &got, &len), -1);
        CHECK_EQ(errno, ENOPROTOOPT);
        len = 2;
        CHECK_EQ(rgetsockopt(s, SOL_RDMA, RDMA_SQSIZE, &got, &len), -1);
        CHECK_EQ(errno, EINVAL);
        CHECK_EQ(rclose(s), 0);
    }

    case_iomap();
    case_keepalive(true);
    case_keepalive(false);
    run_case(AF_INET, false, a2b, b2a, ina, inb);
    run_case(AF_INET, true, a2b, b2a, ina, inb);
    if (have_ipv6_lo())
        run_case(AF_INET6, false, a2b, b2a, ina, inb);
    else
        printf("case ::1 skipped: no IPv6 loopback\n");
    free(a2b);
    free(b2a);
    free(ina);
    free(inb);
    TEST_MAIN_END();
}
