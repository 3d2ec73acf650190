/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Capture reading for `uiwarp dump`: link layers, IPv4/IPv6, TCP, the
 * connection table and the libpcap reader (pcap and pcapng through
 * pcap_open_offline).
 */
#include "capture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pcap/pcap.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uiw_be.h"

#ifndef DLT_LINUX_SLL2
#define DLT_LINUX_SLL2 276
#endif
#ifndef DLT_IPV4
#define DLT_IPV4 228
#endif
#ifndef DLT_IPV6
#define DLT_IPV6 229
#endif

bool uiw_link_supported(int dlt)
{
    switch (dlt) {
    case DLT_EN10MB:
    case DLT_LINUX_SLL:
    case DLT_LINUX_SLL2:
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
    case DLT_NULL:
    case DLT_LOOP:
        return true;
    default:
        return false;
    }
}

/* TCP header (RFC 9293 §3.1). ip_len: IP payload length per the IP header;
 * avail: bytes of it present in the capture. */
static int parse_tcp(const uint8_t *p, size_t avail, size_t ip_len, uiw_pkt *pkt)
{
    if (avail < 20 || ip_len < 20)
        return UIW_FRAME_MALFORMED;
    size_t doff = (size_t)(p[12] >> 4) * 4;
    if (doff < 20 || doff > ip_len || doff > avail)
        return UIW_FRAME_MALFORMED;
    pkt->sport = uiw_get_be16(p);
    pkt->dport = uiw_get_be16(p + 2);
    pkt->seq = uiw_get_be32(p + 4);
    pkt->ack = uiw_get_be32(p + 8);
    pkt->flags = p[13];
    pkt->payload = p + doff;
    size_t want = ip_len - doff, have = avail - doff;
    if (have > want)
        have = want;
    pkt->len = (uint32_t)have;
    pkt->missing = (uint32_t)(want - have);
    pkt->sack = false;
    /* the options (RFC 9293 §3.2): kind 0 ends them, 1 is one byte, every
     * other kind has a length byte; 5 is SACK (RFC 2018 §3) */
    for (size_t i = 20; i < doff && p[i] != 0;) {
        if (p[i] == 1) {
            i++;
            continue;
        }
        if (i + 1 >= doff || p[i + 1] < 2)
            break;
        if (p[i] == 5)
            pkt->sack = true;
        i += p[i + 1];
    }
    return UIW_FRAME_TCP;
}

/* IPv4 (RFC 791 §3.1). */
static int parse_ipv4(const uint8_t *p, size_t avail, uiw_pkt *pkt)
{
    if (avail < 20 || (p[0] >> 4) != 4)
        return UIW_FRAME_MALFORMED;
    size_t ihl = (size_t)(p[0] & 0x0f) * 4;
    size_t total = uiw_get_be16(p + 2);
    if (ihl < 20 || ihl > avail)
        return UIW_FRAME_MALFORMED;
    if (total == 0) /* TCP segmentation offload on the capturing host */
        total = avail;
    if (total < ihl)
        return UIW_FRAME_MALFORMED;
    if (uiw_get_be16(p + 6) & 0x3fff) /* MF set or fragment offset != 0 */
        return UIW_FRAME_IP_FRAGMENT;
    if (p[9] != 6)
        return UIW_FRAME_NOT_TCP;
    pkt->src.family = pkt->dst.family = 4;
    memset(pkt->src.a, 0, 16);
    memset(pkt->dst.a, 0, 16);
    memcpy(pkt->src.a, p + 12, 4);
    memcpy(pkt->dst.a, p + 16, 4);
    size_t have = avail < total ? avail : total;
    return parse_tcp(p + ihl, have - ihl, total - ihl, pkt);
}

/* IPv6 (RFC 8200 §3, §4). */
static int parse_ipv6(const uint8_t *p, size_t avail, uiw_pkt *pkt)
{
    if (avail < 40 || (p[0] >> 4) != 6)
        return UIW_FRAME_MALFORMED;
    size_t plen = uiw_get_be16(p + 4);
    if (plen == 0) /* jumbogram or offload: take what is there */
        plen = avail - 40;
    uint8_t nh = p[6];
    memset(&pkt->src, 0, sizeof(pkt->src));
    memset(&pkt->dst, 0, sizeof(pkt->dst));
    pkt->src.family = pkt->dst.family = 6;
    memcpy(pkt->src.a, p + 8, 16);
    memcpy(pkt->dst.a, p + 24, 16);
    size_t off = 40, end = 40 + plen;
    size_t have = avail < end ? avail : end;
    for (int guard = 0; guard < 16; guard++) {
        switch (nh) {
        case 6:
            return parse_tcp(p + off, have - off, end - off, pkt);
        case 44:
            return UIW_FRAME_IP_FRAGMENT;
        case 0:  /* hop-by-hop */
        case 43: /* routing */
        case 60: /* destination options */
        case 51: /* AH (RFC 4302 §2.2: length in 4-octet units minus 2) */
        {
            if (off + 8 > have)
                return UIW_FRAME_MALFORMED;
            size_t len = nh == 51 ? ((size_t)p[off + 1] + 2) * 4 : ((size_t)p[off + 1] + 1) * 8;
            nh = p[off];
            off += len;
            if (off > have)
                return UIW_FRAME_MALFORMED;
            break;
        }
        default:
            return UIW_FRAME_NOT_TCP;
        }
    }
    return UIW_FRAME_MALFORMED;
}

static int parse_ethertype(unsigned type, const uint8_t *p, size_t avail, uiw_pkt *pkt)
{
    if (type == 0x0800)
        return parse_ipv4(p, avail, pkt);
    if (type == 0x86dd)
        return parse_ipv6(p, avail, pkt);
    return UIW_FRAME_NOT_IP;
}

static int parse_raw_ip(const uint8_t *p, size_t avail, uiw_pkt *pkt)
{
    if (avail < 1)
        return UIW_FRAME_MALFORMED;
    if ((p[0] >> 4) == 4)
        return parse_ipv4(p, avail, pkt);
    if ((p[0] >> 4) == 6)
        return parse_ipv6(p, avail, pkt);
    return UIW_FRAME_NOT_IP;
}

/* BSD loopback: the address family of the capturing host (NULL: host byte
 * order, LOOP: network byte order). AF_INET is 2 everywhere; AF_INET6 is 10
 * (Linux), 24 (NetBSD/OpenBSD), 28 (FreeBSD), 30 (macOS). */
static int parse_null(const uint8_t *p, size_t avail, uiw_pkt *pkt, bool network_order)
{
    if (avail < 4)
        return UIW_FRAME_MALFORMED;
    uint32_t be = uiw_get_be32(p), le = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                                        (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    uint32_t fam = network_order ? be : (be < le ? be : le);
    switch (fam) {
    case 2:
        return parse_ipv4(p + 4, avail - 4, pkt);
    case 10:
    case 24:
    case 28:
    case 30:
        return parse_ipv6(p + 4, avail - 4, pkt);
    default:
        return UIW_FRAME_NOT_IP;
    }
}

int uiw_parse_frame(int dlt, const uint8_t *p, size_t caplen, size_t wirelen, uiw_pkt *pkt)
{
    (void)wirelen;
    switch (dlt) {
    case DLT_EN10MB: {
        if (caplen < 14)
            return UIW_FRAME_MALFORMED;
        size_t off = 12;
        unsigned type = uiw_get_be16(p + off);
        /* 802.1Q / 802.1ad / old QinQ tags */
        while ((type == 0x8100 || type == 0x88a8 || type == 0x9100) && off + 6 <= caplen) {
            off += 4;
            type = uiw_get_be16(p + off);
        }
        off += 2;
        if (off > caplen)
            return UIW_FRAME_MALFORMED;
        return parse_ethertype(type, p + off, caplen - off, pkt);
    }
    case DLT_LINUX_SLL: /* 16-byte cooked header, protocol at 14 */
        if (caplen < 16)
            return UIW_FRAME_MALFORMED;
        return parse_ethertype(uiw_get_be16(p + 14), p + 16, caplen - 16, pkt);
    case DLT_LINUX_SLL2: /* 20-byte cooked header, protocol at 0 */
        if (caplen < 20)
            return UIW_FRAME_MALFORMED;
        return parse_ethertype(uiw_get_be16(p), p + 20, caplen - 20, pkt);
    case DLT_RAW:
    case DLT_IPV4:
    case DLT_IPV6:
        return parse_raw_ip(p, caplen, pkt);
    case DLT_NULL:
        return parse_null(p, caplen, pkt, false);
    case DLT_LOOP:
        return parse_null(p, caplen, pkt, true);
    default:
        return UIW_FRAME_UNSUPPORTED;
    }
}

const char *uiw_endpoint_str(const uiw_addr *a, uint16_t port, char *buf, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (a->family == 4)
        inet_ntop(AF_INET, a->a, ip, sizeof(ip));
    else if (a->family == 6)
        inet_ntop(AF_INET6, a->a, ip, sizeof(ip));
    if (a->family == 6)
        snprintf(buf, cap, "[%s]:%u", ip, port);
    else
        snprintf(buf, cap, "%s:%u", ip, port);
    return buf;
}

/* ------------------------------------------------------------------------
 * Connection table
 * ---------------------------------------------------------------------- */

static bool addr_eq(const uiw_addr *a, const uiw_addr *b)
{
    return a->family == b->family && memcmp(a->a, b->a, 16) == 0;
}

static unsigned tuple_hash(const uiw_addr *a, uint16_t pa, const uiw_addr *b, uint16_t pb)
{
    /* symmetric: both directions land in the same bucket */
    uint32_t h1 = 2166136261u, h2 = 2166136261u;
    for (int i = 0; i < 16; i++) {
        h1 = (h1 ^ a->a[i]) * 16777619u;
        h2 = (h2 ^ b->a[i]) * 16777619u;
    }
    h1 = (h1 ^ pa) * 16777619u;
    h2 = (h2 ^ pb) * 16777619u;
    return (h1 ^ h2) % UIW_TCP_HASH;
}

static void table_data(void *ctx, int dir, uint64_t off, const uint8_t *p, size_t n,
                       const uiw_seg_meta *m)
{
    uiw_tcp_conn *c = ctx;
    if (c->table->ops->data)
        c->table->ops->data(c->table->ctx, c, dir, off, p, n, m);
}

static void table_event(void *ctx, int dir, const uiw_reasm_event *ev)
{
    uiw_tcp_conn *c = ctx;
    if (c->table->ops->event)
        c->table->ops->event(c->table->ctx, c, dir, ev);
}

static const uiw_reasm_ops table_reasm_ops = {.data = table_data, .event = table_event};

void uiw_tcp_table_init(uiw_tcp_table *t, const uiw_tcp_ops *ops, void *ctx, size_t limit,
                        uint32_t first_id)
{
    memset(t, 0, sizeof(*t));
    t->ops = ops;
    t->ctx = ctx;
    t->limit = limit;
    t->next_id = first_id ? first_id : 1;
}

static void conn_finish(uiw_tcp_table *t, uiw_tcp_conn *c)
{
    if (c->finished)
        return;
    uiw_reasm_flush(&c->half[0]);
    uiw_reasm_flush(&c->half[1]);
    c->finished = true;
    if (t->ops->conn_end)
        t->ops->conn_end(t->ctx, c);
    uiw_reasm_free(&c->half[0]);
    uiw_reasm_free(&c->half[1]);
}

static void unhash(uiw_tcp_table *t, uiw_tcp_conn *c)
{
    unsigned h = tuple_hash(&c->addr[0], c->port[0], &c->addr[1], c->port[1]);
    for (uiw_tcp_conn **pp = &t->hash[h]; *pp; pp = &(*pp)->hnext) {
        if (*pp == c) {
            *pp = c->hnext;
            return;
        }
    }
}

int uiw_tcp_table_packet(uiw_tcp_table *t, const uiw_pkt *pkt)
{
    unsigned h = tuple_hash(&pkt->src, pkt->sport, &pkt->dst, pkt->dport);
    uiw_tcp_conn *c = NULL;
    int dir = 0;
    for (uiw_tcp_conn *x = t->hash[h]; x; x = x->hnext) {
        if (addr_eq(&x->addr[0], &pkt->src) && x->port[0] == pkt->sport &&
            addr_eq(&x->addr[1], &pkt->dst) && x->port[1] == pkt->dport) {
            c = x;
            dir = 0;
            break;
        }
        if (addr_eq(&x->addr[1], &pkt->src) && x->port[1] == pkt->sport &&
            addr_eq(&x->addr[0], &pkt->dst) && x->port[0] == pkt->dport) {
            c = x;
            dir = 1;
            break;
        }
    }
    bool syn_only = (pkt->flags & (UIW_TCP_SYN | UIW_TCP_ACK)) == UIW_TCP_SYN;
    if (c && syn_only && !(c->syn[dir] && c->isn[dir] == pkt->seq)) {
        /* A fresh SYN on a known 4-tuple: the old connection is over. */
        unhash(t, c);
        conn_finish(t, c);
        c = NULL;
    }
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c)
            return -ENOMEM;
        c->table = t;
        c->id = t->next_id++;
        /* endpoint 0 is the client: the SYN sender, or the receiver of a
         * SYN-ACK seen first, else the first sender */
        bool synack = (pkt->flags & (UIW_TCP_SYN | UIW_TCP_ACK)) == (UIW_TCP_SYN | UIW_TCP_ACK);
        int s = synack ? 1 : 0;
        c->addr[s] = pkt->src;
        c->port[s] = pkt->sport;
        c->addr[!s] = pkt->dst;
        c->port[!s] = pkt->dport;
        dir = s;
        c->first_frame = pkt->frame;
        c->first_ts = pkt->ts;
        uiw_reasm_init(&c->half[0], &table_reasm_ops, c, 0, t->limit);
        uiw_reasm_init(&c->half[1], &table_reasm_ops, c, 1, t->limit);
        c->hnext = t->hash[h];
        t->hash[h] = c;
        if (t->all_tail)
            t->all_tail->next = c;
        else
            t->all = c;
        t->all_tail = c;
        if (t->ops->conn_new)
            t->ops->conn_new(t->ctx, c);
    }
    if (pkt->flags & UIW_TCP_SYN) {
        c->syn[dir] = true;
        c->isn[dir] = pkt->seq;
    }
    c->packets[dir]++;
    c->last_frame = pkt->frame;
    c->last_ts = pkt->ts;
    /* The ACK first: the bytes it covers were sent before this segment. */
    if ((pkt->flags & UIW_TCP_ACK) && !(pkt->flags & UIW_TCP_RST))
        uiw_reasm_ack(&c->half[!dir], pkt->ack, pkt->frame, pkt->ts);
    c->half[dir].seg_sack = pkt->sack;
    return uiw_reasm_segment(&c->half[dir], pkt->seq, pkt->ack, pkt->flags, pkt->payload, pkt->len,
                             pkt->frame, pkt->ts);
}

void uiw_tcp_table_finish(uiw_tcp_table *t)
{
    for (uiw_tcp_conn *c = t->all; c; c = c->next)
        conn_finish(t, c);
    memset(t->hash, 0, sizeof(t->hash));
}

void uiw_tcp_table_free(uiw_tcp_table *t)
{
    uiw_tcp_conn *c = t->all;
    while (c) {
        uiw_tcp_conn *n = c->next;
        uiw_reasm_free(&c->half[0]);
        uiw_reasm_free(&c->half[1]);
        free(c);
        c = n;
    }
    t->all = t->all_tail = NULL;
    memset(t->hash, 0, sizeof(t->hash));
}

/* ------------------------------------------------------------------------
 * libpcap reader
 * ---------------------------------------------------------------------- */

struct uiw_capture {
    pcap_t *pc;
    int dlt;
    bool have_t0;
    double t0;
    uiw_capture_stats st;
};

uiw_capture *uiw_capture_open(const char *path, char *err, size_t errlen)
{
    char ebuf[PCAP_ERRBUF_SIZE] = "";
    pcap_t *pc = pcap_open_offline(path, ebuf);
    if (!pc) {
        snprintf(err, errlen, "%s: %s", path, ebuf);
        return NULL;
    }
    uiw_capture *c = calloc(1, sizeof(*c));
    if (!c) {
        pcap_close(pc);
        snprintf(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    c->pc = pc;
    c->dlt = pcap_datalink(pc);
    if (!uiw_link_supported(c->dlt)) {
        const char *name = pcap_datalink_val_to_name(c->dlt);
        snprintf(err, errlen, "%s: unsupported link type %d (%s)", path, c->dlt, name ? name : "?");
        pcap_close(pc);
        free(c);
        return NULL;
    }
    return c;
}

int uiw_capture_dlt(const uiw_capture *c)
{
    return c->dlt;
}

const char *uiw_capture_link_name(const uiw_capture *c)
{
    const char *d = pcap_datalink_val_to_description(c->dlt);
    return d ? d : "?";
}

int uiw_capture_next(uiw_capture *c, uiw_pkt *pkt, uiw_capture_note_fn note, void *ctx, char *err,
                     size_t errlen)
{
    for (;;) {
        struct pcap_pkthdr *h;
        const u_char *data;
        int rc = pcap_next_ex(c->pc, &h, &data);
        if (rc == PCAP_ERROR_BREAK)
            return 0;
        if (rc < 0) {
            snprintf(err, errlen, "%s", pcap_geterr(c->pc));
            return -1;
        }
        if (rc == 0)
            continue;
        c->st.frames++;
        /* pcap_open_offline scales every file to microseconds */
        double t = (double)h->ts.tv_sec + (double)h->ts.tv_usec / 1e6;
        if (!c->have_t0) {
            c->have_t0 = true;
            c->t0 = t;
        }
        memset(pkt, 0, sizeof(*pkt));
        pkt->frame = c->st.frames;
        pkt->ts = t - c->t0;
        int kind = uiw_parse_frame(c->dlt, data, h->caplen, h->len, pkt);
        switch (kind) {
        case UIW_FRAME_TCP:
            c->st.tcp++;
            if (pkt->missing)
                c->st.truncated++;
            return 1;
        case UIW_FRAME_NOT_IP:
            c->st.not_ip++;
            break;
        case UIW_FRAME_NOT_TCP:
            c->st.not_tcp++;
            break;
        case UIW_FRAME_IP_FRAGMENT:
            c->st.fragments++;
            break;
        default:
            c->st.malformed++;
            break;
        }
        if (note)
            note(ctx, pkt->frame, pkt->ts, kind);
    }
}

const uiw_capture_stats *uiw_capture_get_stats(const uiw_capture *c)
{
    return &c->st;
}

void uiw_capture_close(uiw_capture *c)
{
    if (!c)
        return;
    pcap_close(c->pc);
    free(c);
}
