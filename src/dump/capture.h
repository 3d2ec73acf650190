/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Capture reading and TCP stream reassembly for `uiwarp dump`.
 *
 * Three layers, each usable on its own:
 *   - uiw_parse_frame: one captured frame (link layer + IPv4/IPv6 + TCP) to a
 *     uiw_pkt. Pure function, no libpcap.
 *   - uiw_reasm: the byte stream of ONE direction of a TCP connection, rebuilt
 *     from segments given in any order (out of order, duplicated,
 *     overlapping, 32-bit sequence wrap). In-order bytes go to a callback;
 *     holes are reported as gaps. Takes plain segments, so tests can drive it
 *     without any capture file.
 *   - uiw_tcp_table: connection tracking (4-tuple -> two uiw_reasm), fed with
 *     uiw_pkt; plus uiw_capture, a thin libpcap reader (pcap and pcapng).
 */
#ifndef UIWARP_DUMP_CAPTURE_H
#define UIWARP_DUMP_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------
 * Frames
 * ---------------------------------------------------------------------- */

/* TCP flags (RFC 9293 §3.1) */
#define UIW_TCP_FIN 0x01
#define UIW_TCP_SYN 0x02
#define UIW_TCP_RST 0x04
#define UIW_TCP_PSH 0x08
#define UIW_TCP_ACK 0x10

typedef struct uiw_addr {
    uint8_t family; /* 4 or 6 */
    uint8_t a[16];  /* IPv4 in the first 4 bytes */
} uiw_addr;

typedef struct uiw_pkt {
    uint64_t frame; /* 1-based frame number in the capture */
    double ts;      /* seconds since the first frame of the capture */
    uiw_addr src, dst;
    uint16_t sport, dport;
    uint32_t seq, ack;
    uint8_t flags;
    const uint8_t *payload; /* TCP payload bytes present in the capture */
    uint32_t len;           /* bytes at payload */
    uint32_t missing;       /* payload bytes cut off by the snap length */
    bool sack;              /* the TCP options hold a SACK option (RFC 2018) */
} uiw_pkt;

/* Result of uiw_parse_frame. */
enum uiw_frame_kind {
    UIW_FRAME_TCP = 0,     /* a TCP segment: *pkt is valid */
    UIW_FRAME_NOT_IP,      /* ARP, LLDP, ... */
    UIW_FRAME_NOT_TCP,     /* UDP, ICMP, ... */
    UIW_FRAME_IP_FRAGMENT, /* an IPv4/IPv6 fragment: skipped */
    UIW_FRAME_MALFORMED,   /* headers cut short or inconsistent */
    UIW_FRAME_UNSUPPORTED, /* link type we do not decode */
};

/* Link types handled (libpcap DLT_ values): EN10MB (with 802.1Q/802.1ad
 * tags), LINUX_SLL, LINUX_SLL2, RAW, IPV4, IPV6, NULL, LOOP. */
bool uiw_link_supported(int dlt);
/* Decode one frame. pkt->frame/ts are left to the caller. */
int uiw_parse_frame(int dlt, const uint8_t *data, size_t caplen, size_t wirelen, uiw_pkt *pkt);

/* "10.0.2.15:7174" or "[fe80::1]:7174" into buf (>= 64 bytes). */
const char *uiw_endpoint_str(const uiw_addr *a, uint16_t port, char *buf, size_t cap);

/* ------------------------------------------------------------------------
 * One-direction reassembler
 * ---------------------------------------------------------------------- */

enum uiw_reasm_event_kind {
    UIW_RE_MIDSTREAM = 1, /* first segment was not a SYN: stream starts at off 0 = that seq */
    UIW_RE_GAP,           /* bytes [off, off+len) never seen: data after them follows */
    UIW_RE_FIN,           /* FIN reached at off (all bytes before it delivered) */
    UIW_RE_RST,           /* RST seen (at capture position off = next expected) */
    UIW_RE_OVERFLOW,      /* out-of-order buffer limit hit: a gap is forced */
    UIW_RE_CONFLICT,      /* retransmitted bytes differ from the bytes kept (len bytes) */
    UIW_RE_BEFORE_START,  /* data before the stream start dropped (len bytes) */
    UIW_RE_AFTER_FIN,     /* data beyond the FIN dropped (len bytes) */
};

typedef struct uiw_reasm_event {
    uint8_t kind;
    uint64_t off;
    uint64_t len;
    uint64_t frame; /* frame that caused the event */
    double ts;
} uiw_reasm_event;

/* Where delivered bytes came from: the segment that carried them. */
typedef struct uiw_seg_meta {
    uint64_t frame;
    double ts;
    bool has_ack; /* ACK flag set: ack is valid */
    uint32_t ack; /* the segment's acknowledgment number (the other direction) */
    /* The segment as captured: stream offset of its first payload byte and
     * its payload length (bytes present in the capture); retx when any of
     * its bytes had been seen before (delivered or held), or lay before the
     * stream start: a retransmission, whose cut says nothing about how the
     * sender first segmented the stream. */
    uint64_t seg_off;
    uint32_t seg_len;
    bool retx;
    /* This segment, or a segment of this direction since the last first
     * transmission (a retransmission, a pure ACK), carried SACK blocks
     * (RFC 2018): the sender's
     * effective MSS was that much below the one it cuts segments with
     * otherwise ("Changes in EMSS due to varying TCP options", RFC 5044
     * §5.1), which moves TCP's cuts off an FPDU grid until a buffer starts
     * afresh. Known only where the caller set uiw_reasm.seg_sack. */
    bool sack;
} uiw_seg_meta;

typedef struct uiw_reasm_ops {
    /* In-order bytes: off is the stream offset of p[0] (0 = first byte after
     * the SYN, or the first byte seen). Every byte is delivered once. */
    void (*data)(void *ctx, int dir, uint64_t off, const uint8_t *p, size_t n,
                 const uiw_seg_meta *m);
    void (*event)(void *ctx, int dir, const uiw_reasm_event *ev);
} uiw_reasm_ops;

typedef struct uiw_reasm_seg uiw_reasm_seg;

typedef struct uiw_reasm_stats {
    uint64_t segments;       /* segments given (with or without payload) */
    uint64_t bytes;          /* bytes delivered */
    uint64_t dup_segments;   /* segments that carried only already-seen bytes */
    uint64_t dup_bytes;      /* bytes trimmed as retransmitted/overlapping */
    uint64_t ooo_segments;   /* segments that arrived ahead of a hole */
    uint64_t gaps;           /* holes declared */
    uint64_t gap_bytes;      /* bytes in those holes */
    uint64_t overflows;      /* times the buffer limit forced a gap */
    uint64_t conflict_bytes; /* overlapping bytes that differed */
    uint64_t peak_buffered;  /* largest out-of-order buffer */
    uint64_t acked_unseen;   /* gap bytes found through the peer's ACKs */
    uint32_t max_seg;        /* largest segment payload given (the effective MSS as captured) */
} uiw_reasm_stats;

typedef struct uiw_reasm {
    const uiw_reasm_ops *ops;
    void *ctx;
    int dir;      /* passed to the callbacks */
    size_t limit; /* max bytes held out of order (0 = 8 MiB) */
    bool started; /* base_seq known */
    bool syn_seen;
    bool fin_seen; /* FIN sequence known */
    bool fin_done; /* FIN reached */
    bool rst_seen;
    uint32_t base_seq; /* sequence number of stream offset 0 */
    uint64_t next;     /* next stream offset to deliver */
    uint64_t fin_off;
    uiw_reasm_seg *head; /* out-of-order segments, sorted, non-overlapping */
    size_t buffered;
    uiw_reasm_stats st;
    /* seg_sack: the segment passed next to uiw_reasm_segment carries a SACK
     * option, set by the caller (reset by each call); sack_since: one did
     * since the last first transmission (uiw_seg_meta.sack) */
    bool seg_sack, sack_since;
} uiw_reasm;

void uiw_reasm_init(uiw_reasm *r, const uiw_reasm_ops *ops, void *ctx, int dir, size_t limit);
/* One TCP segment of this direction (flags UIW_TCP_*; ack is its
 * acknowledgment number, used only as information passed on with the
 * bytes). data/len are the payload bytes; the reassembler copies what it
 * has to keep. Returns 0, or -ENOMEM. */
int uiw_reasm_segment(uiw_reasm *r, uint32_t seq, uint32_t ack, uint8_t flags, const uint8_t *data,
                      size_t len, uint64_t frame, double ts);
/* An ACK from the peer for this direction: bytes below it that the capture
 * has not delivered are declared a gap at once (the peer received them, the
 * capture missed them), so the stream does not stall until the flush or the
 * buffer limit and the other direction does not run ahead of it. ACKs more
 * than 2^30 ahead are ignored. */
void uiw_reasm_ack(uiw_reasm *r, uint32_t ack, uint64_t frame, double ts);
/* End of input: every hole before buffered data becomes a gap and the data
 * after it is delivered. */
void uiw_reasm_flush(uiw_reasm *r);
void uiw_reasm_free(uiw_reasm *r);
/* Stream offset of a sequence number (nearest to the delivery point). */
uint64_t uiw_reasm_offset(const uiw_reasm *r, uint32_t seq);

/* ------------------------------------------------------------------------
 * Connection table
 * ---------------------------------------------------------------------- */

struct uiw_tcp_table;

typedef struct uiw_tcp_conn {
    struct uiw_tcp_table *table;
    uint32_t id;      /* 1-based, in order of first appearance */
    uiw_addr addr[2]; /* endpoint 0: SYN sender if seen, else first sender */
    uint16_t port[2];
    uiw_reasm half[2]; /* half[d]: bytes sent by endpoint d */
    bool syn[2];       /* a SYN was seen from endpoint d */
    uint32_t isn[2];
    uint64_t first_frame, last_frame;
    double first_ts, last_ts;
    uint64_t packets[2];
    bool finished;
    void *user; /* owned by the table's consumer */
    struct uiw_tcp_conn *hnext, *next;
} uiw_tcp_conn;

typedef struct uiw_tcp_ops {
    void (*conn_new)(void *ctx, uiw_tcp_conn *c);
    void (*data)(void *ctx, uiw_tcp_conn *c, int dir, uint64_t off, const uint8_t *p, size_t n,
                 const uiw_seg_meta *m);
    void (*event)(void *ctx, uiw_tcp_conn *c, int dir, const uiw_reasm_event *ev);
    /* the connection is over (end of capture, or its 4-tuple is reused) */
    void (*conn_end)(void *ctx, uiw_tcp_conn *c);
} uiw_tcp_ops;

#define UIW_TCP_HASH 16384

typedef struct uiw_tcp_table {
    const uiw_tcp_ops *ops;
    void *ctx;
    size_t limit;
    uint32_t next_id;
    uiw_tcp_conn *hash[UIW_TCP_HASH];
    uiw_tcp_conn *all, *all_tail; /* in order of creation */
} uiw_tcp_table;

void uiw_tcp_table_init(uiw_tcp_table *t, const uiw_tcp_ops *ops, void *ctx, size_t limit,
                        uint32_t first_id);
int uiw_tcp_table_packet(uiw_tcp_table *t, const uiw_pkt *pkt);
/* Flush and end every connection (in creation order). */
void uiw_tcp_table_finish(uiw_tcp_table *t);
void uiw_tcp_table_free(uiw_tcp_table *t);

/* ------------------------------------------------------------------------
 * libpcap reader
 * ---------------------------------------------------------------------- */

typedef struct uiw_capture_stats {
    uint64_t frames;
    uint64_t tcp;
    uint64_t not_ip;
    uint64_t not_tcp;
    uint64_t fragments;
    uint64_t malformed;
    uint64_t truncated; /* TCP segments with payload cut by the snap length */
} uiw_capture_stats;

typedef struct uiw_capture uiw_capture;

/* Open a pcap or pcapng file. NULL with a message in err on failure. */
uiw_capture *uiw_capture_open(const char *path, char *err, size_t errlen);
int uiw_capture_dlt(const uiw_capture *c);
const char *uiw_capture_link_name(const uiw_capture *c);
/* Next TCP segment: 1 with *pkt filled (valid until the next call), 0 at
 * the end, -1 on a read error (message in err). Other frames are counted and
 * reported through note() when it is set. */
typedef void (*uiw_capture_note_fn)(void *ctx, uint64_t frame, double ts, int kind);
int uiw_capture_next(uiw_capture *c, uiw_pkt *pkt, uiw_capture_note_fn note, void *ctx, char *err,
                     size_t errlen);
const uiw_capture_stats *uiw_capture_get_stats(const uiw_capture *c);
void uiw_capture_close(uiw_capture *c);

#endif /* UIWARP_DUMP_CAPTURE_H */
