/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * UIWARP_PCAP: the process's connections as a pcapng file (pcap_out.h).
 *
 * pcapng blocks (draft-ietf-opsawg-pcapng): a Section Header Block, one
 * Interface Description Block (LINKTYPE_ETHERNET, microsecond timestamps),
 * then one Enhanced Packet Block per synthesized segment. Frames: Ethernet
 * II with locally administered MACs, IPv4 (header checksum computed) or
 * IPv6, TCP without options; the TCP checksum is left 0 (tools do not check
 * it by default and it would cost a pass over every payload byte).
 */
#include "pcap_out.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "uiw_be.h"

/* ------------------------------------------------------------------------
 * Blocks (no I/O)
 * ---------------------------------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
} /* host order: pcapng */
static void put32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}
size_t uiw_pcapng_header(uint8_t *buf, size_t cap)
{
    if (cap < 48)
        return 0;
    /* Section Header Block: type, length, byte-order magic, version 1.0,
     * section length unknown (-1), no options, length again. */
    put32(buf + 0, 0x0A0D0D0A);
    put32(buf + 4, 28);
    put32(buf + 8, 0x1A2B3C4D);
    put16(buf + 12, 1);
    put16(buf + 14, 0);
    put32(buf + 16, 0xffffffff);
    put32(buf + 20, 0xffffffff);
    put32(buf + 24, 28);
    /* Interface Description Block: LINKTYPE_ETHERNET (1), snaplen 0
     * (unlimited), no options (if_tsresol defaults to microseconds). */
    put32(buf + 28, 1);
    put32(buf + 32, 20);
    put16(buf + 36, 1);
    put16(buf + 38, 0);
    put32(buf + 40, 0);
    put32(buf + 44, 20);
    return 48;
}

static uint16_t ip_csum(const uint8_t *p, size_t n)
{
    uint32_t s = 0;
    for (size_t i = 0; i + 1 < n; i += 2)
        s += (uint32_t)p[i] << 8 | p[i + 1];
    while (s >> 16)
        s = (s & 0xffff) + (s >> 16);
    return (uint16_t)~s;
}

static void addr_port(const struct sockaddr_storage *ss, const uint8_t **a, size_t *alen,
                      uint16_t *port)
{
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        *a = s6->sin6_addr.s6_addr;
        *alen = 16;
        *port = ntohs(s6->sin6_port);
    } else {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        *a = (const uint8_t *)&s4->sin_addr.s_addr;
        *alen = 4;
        *port = ntohs(s4->sin_port);
    }
}

size_t uiw_pcapng_packet(uint8_t *buf, size_t cap, struct uiw_pcap_flow *f, bool out, uint8_t flags,
                         const struct iovec *iov, int iovcnt, size_t skip, size_t len,
                         uint64_t ts_us)
{
    const struct sockaddr_storage *src = out ? &f->local : &f->peer;
    const struct sockaddr_storage *dst = out ? &f->peer : &f->local;
    const uint8_t *sa, *da;
    size_t salen, dalen;
    uint16_t sport, dport;
    bool v6 = f->local.ss_family == AF_INET6;
    size_t iph = v6 ? 40 : 20, frame = 14 + iph + 20 + len;
    size_t block = 28 + ((frame + 3) & ~(size_t)3) + 4;

    if (len > UIW_PCAP_SEG || block > cap)
        return 0;
    addr_port(src, &sa, &salen, &sport);
    addr_port(dst, &da, &dalen, &dport);

    /* Enhanced Packet Block header */
    put32(buf + 0, 6);
    put32(buf + 4, (uint32_t)block);
    put32(buf + 8, 0); /* interface 0 */
    put32(buf + 12, (uint32_t)(ts_us >> 32));
    put32(buf + 16, (uint32_t)ts_us);
    put32(buf + 20, (uint32_t)frame);
    put32(buf + 24, (uint32_t)frame);
    uint8_t *e = buf + 28;

    /* Ethernet: 02:00:00:00:00:01 is the local side, ...:02 the peer */
    static const uint8_t mac_local[6] = {2, 0, 0, 0, 0, 1}, mac_peer[6] = {2, 0, 0, 0, 0, 2};
    memcpy(e, out ? mac_peer : mac_local, 6);
    memcpy(e + 6, out ? mac_local : mac_peer, 6);
    uiw_put_be16(e + 12, v6 ? 0x86dd : 0x0800);
    uint8_t *ip = e + 14;
    if (v6) {
        uiw_put_be32(ip, 0x60000000);
        uiw_put_be16(ip + 4, (uint16_t)(20 + len));
        ip[6] = IPPROTO_TCP;
        ip[7] = 64;
        memcpy(ip + 8, sa, 16);
        memcpy(ip + 24, da, 16);
    } else {
        ip[0] = 0x45;
        ip[1] = 0;
        uiw_put_be16(ip + 2, (uint16_t)(20 + 20 + len));
        uiw_put_be16(ip + 4, 0);
        uiw_put_be16(ip + 6, 0x4000); /* DF */
        ip[8] = 64;
        ip[9] = IPPROTO_TCP;
        uiw_put_be16(ip + 10, 0);
        memcpy(ip + 12, sa, 4);
        memcpy(ip + 16, da, 4);
        uiw_put_be16(ip + 10, ip_csum(ip, 20));
    }
    uint8_t *t = ip + iph;
    uint32_t *seq = out ? &f->seq_out : &f->seq_in;
    uint32_t ack = out ? f->seq_in : f->seq_out;
    uiw_put_be16(t, sport);
    uiw_put_be16(t + 2, dport);
    uiw_put_be32(t + 4, *seq);
    uiw_put_be32(t + 8, (flags & 0x10) ? ack : 0);
    t[12] = 5 << 4;
    t[13] = flags;
    uiw_put_be16(t + 14, 65535);
    uiw_put_be16(t + 16, 0); /* checksum: not computed */
    uiw_put_be16(t + 18, 0);
    uint8_t *p = t + 20;
    size_t left = len;
    for (int i = 0; i < iovcnt && left; i++) {
        size_t l = iov[i].iov_len;
        if (skip >= l) {
            skip -= l;
            continue;
        }
        l -= skip;
        if (l > left)
            l = left;
        memcpy(p, (const uint8_t *)iov[i].iov_base + skip, l);
        p += l;
        left -= l;
        skip = 0;
    }
    if (left) /* fewer bytes in iov than len */
        return 0;
    *seq += (uint32_t)len + ((flags & 0x03) ? 1u : 0u); /* SYN and FIN take one */
    memset(p, 0, (size_t)(buf + block - 4 - p));        /* pad */
    put32(buf + block - 4, (uint32_t)block);
    return block;
}

/* ------------------------------------------------------------------------
 * The file
 * ---------------------------------------------------------------------- */

struct uiw_cap {
    struct uiw_pcap_flow flow;
};

static pthread_once_t cap_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static int cap_fd = -1;
static uint64_t cap_size, cap_max;
static bool cap_full;
static uint8_t *cap_buf; /* UIW_PCAP_BLOCK_MAX, under cap_lock */

static uint64_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        break;
    case '\0':
        break;
    default:
        return 0;
    }
    return v;
}

static void cap_init(void)
{
    const char *path = getenv("UIWARP_PCAP");
    char name[4096];
    size_t n = 0;

    if (!path || !*path)
        return;
    /* "%p" -> pid, "%%" -> "%" */
    for (const char *s = path; *s && n + 24 < sizeof(name); s++) {
        if (s[0] == '%' && s[1] == 'p') {
            n += (size_t)snprintf(name + n, sizeof(name) - n, "%ld", (long)getpid());
            s++;
        } else if (s[0] == '%' && s[1] == '%') {
            name[n++] = '%';
            s++;
        } else {
            name[n++] = *s;
        }
    }
    name[n] = '\0';
    cap_max = 1ull << 30;
    const char *m = getenv("UIWARP_PCAP_MAX");
    if (m && *m) {
        uint64_t v = parse_size(m);
        if (v >= 4096)
            cap_max = v;
        else
            uiw_log("ignoring UIWARP_PCAP_MAX=\"%s\" (expected a size of 4096 bytes or more, "
                    "suffix k, M or G), using 1G",
                    m);
    }
    cap_buf = malloc(UIW_PCAP_BLOCK_MAX);
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !cap_buf) {
        uiw_log("UIWARP_PCAP: cannot write %s: %s; capture off", name,
                strerror(fd < 0 ? errno : ENOMEM));
        if (fd >= 0)
            close(fd);
        free(cap_buf);
        cap_buf = NULL;
        return;
    }
    uint8_t hdr[64];
    size_t h = uiw_pcapng_header(hdr, sizeof(hdr));
    if (write(fd, hdr, h) != (ssize_t)h) {
        uiw_log("UIWARP_PCAP: cannot write %s: %s; capture off", name, strerror(errno));
        close(fd);
        free(cap_buf);
        cap_buf = NULL;
        return;
    }
    cap_size = h;
    cap_fd = fd;
    uiw_dbg(1, "capturing connections to %s (limit %llu bytes)", name, (unsigned long long)cap_max);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* One segment, under cap_lock. */
static void emit_locked(struct uiw_cap *c, bool out, uint8_t flags, const struct iovec *iov,
                        int iovcnt, size_t skip, size_t len)
{
    if (cap_full)
        return;
    size_t b = uiw_pcapng_packet(cap_buf, UIW_PCAP_BLOCK_MAX, &c->flow, out, flags, iov, iovcnt,
                                 skip, len, now_us());
    if (!b)
        return;
    if (cap_size + b > cap_max) {
        cap_full = true;
        uiw_log("UIWARP_PCAP: size limit of %llu bytes reached, capture stopped "
                "(UIWARP_PCAP_MAX)",
                (unsigned long long)cap_max);
        return;
    }
    size_t off = 0;
    while (off < b) {
        ssize_t w = write(cap_fd, cap_buf + off, b - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            cap_full = true;
            uiw_log("UIWARP_PCAP: write failed: %s; capture stopped", strerror(errno));
            return;
        }
        off += (size_t)w;
    }
    cap_size += b;
}

struct uiw_cap *uiw_cap_conn(int fd, bool active)
{
    pthread_once(&cap_once, cap_init);
    if (cap_fd < 0)
        return NULL;
    struct uiw_cap *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    socklen_t l1 = sizeof(c->flow.local), l2 = sizeof(c->flow.peer);
    if (getsockname(fd, (struct sockaddr *)&c->flow.local, &l1) != 0 ||
        getpeername(fd, (struct sockaddr *)&c->flow.peer, &l2) != 0 ||
        (c->flow.local.ss_family != AF_INET && c->flow.local.ss_family != AF_INET6) ||
        c->flow.local.ss_family != c->flow.peer.ss_family) {
        free(c);
        return NULL;
    }
    uint32_t isn[2] = {0x1000, 0x2000};
    if (getrandom(isn, sizeof(isn), GRND_NONBLOCK) != sizeof(isn)) {
        isn[0] = 0x1000;
        isn[1] = 0x2000;
    }
    c->flow.seq_out = isn[0];
    c->flow.seq_in = isn[1];
    pthread_mutex_lock(&cap_lock);
    /* the three-way handshake, the initiator first (RFC 9293 §3.5) */
    emit_locked(c, active, 0x02, NULL, 0, 0, 0);
    emit_locked(c, !active, 0x12, NULL, 0, 0, 0);
    emit_locked(c, active, 0x10, NULL, 0, 0, 0);
    pthread_mutex_unlock(&cap_lock);
    return c;
}

void uiw_cap_data(struct uiw_cap *c, bool out, const struct iovec *iov, int iovcnt, size_t len)
{
    if (!c || !len)
        return;
    pthread_mutex_lock(&cap_lock);
    for (size_t off = 0; off < len;) {
        size_t n = len - off < UIW_PCAP_SEG ? len - off : UIW_PCAP_SEG;
        emit_locked(c, out, 0x18, iov, iovcnt, off, n); /* PSH ACK */
        off += n;
    }
    pthread_mutex_unlock(&cap_lock);
}

void uiw_cap_bytes(struct uiw_cap *c, bool out, const void *buf, size_t len)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    uiw_cap_data(c, out, &iov, 1, len);
}

void uiw_cap_close(struct uiw_cap *c, bool reset)
{
    if (!c)
        return;
    pthread_mutex_lock(&cap_lock);
    emit_locked(c, true, reset ? 0x14 : 0x11, NULL, 0, 0, 0); /* RST ACK / FIN ACK */
    pthread_mutex_unlock(&cap_lock);
    free(c);
}
