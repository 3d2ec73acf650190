/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rsockets (rsocket.h) for uiwarp's librdmacm.so.1, built only on the
 * public rdma_cm and verbs calls. Stream sockets, wire-compatible with
 * rdma-core's rsockets on iWARP (docs/RSOCKETS.md has the protocol):
 *
 *  - connection private data: struct rs_wire_conn (40 bytes, fields in
 *    network order): version 1, flags, credits (receive queue depth),
 *    iomap size, the target SGL (where the peer writes our receive-buffer
 *    grants: RS_WIRE_SGL_SIZE entries of struct rs_wire_sge) and the first
 *    grant of our receive buffer (its first half);
 *  - data: RDMA Write into the granted buffer, then a 4-byte Send (the
 *    "message": op in bits 31..29, data in bits 28..0, in the sender's
 *    byte order, little endian on x86) as iWARP has no Write with Immediate;
 *  - credits: the receiver grants the next half of its buffer by writing a
 *    struct rs_wire_sge into the sender's target SGL followed by an SGL
 *    message carrying its receive sequence limit (data messages);
 *  - riomap: the target SGL is followed by target_iomap_size (scaled, see
 *    rs_iomap_scale) struct rs_wire_iomap entries in the same registration;
 *    a side that maps a buffer for remote writes (riomap, PROT_WRITE) RDMA
 *    Writes its entry, in the peer's byte order, into a free slot of the
 *    peer's array and sends an IOMAP_SGL message with the slot's index
 *    (counted as a data message); riowrite is then a plain RDMA Write into
 *    the mapped buffer, with no message.
 */
#ifndef UIWARP_RSOCKET_INT_H
#define UIWARP_RSOCKET_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <sys/socket.h>

#define RS_WIRE_VERSION    1
#define RS_WIRE_FLAG_NET   (1 << 0) /* sender is big endian */
#define RS_WIRE_FLAG_IOMAP (1 << 1) /* iomap area follows the target SGL */
#define RS_WIRE_SGL_SIZE   2

/* One buffer grant: address, rkey, length (the peer's byte order unless
 * RS_WIRE_FLAG_NET says otherwise). */
struct rs_wire_sge {
    uint64_t addr;
    uint32_t key;
    uint32_t length;
};

/* One remote IO mapping: the offset the mapping answers to, and where it
 * is (the byte order of the side whose array it is written into). */
struct rs_wire_iomap {
    uint64_t offset;
    struct rs_wire_sge sge;
};

_Static_assert(sizeof(struct rs_wire_iomap) == 24, "rs_wire_iomap is 24 bytes on the wire");

struct rs_wire_conn {
    uint8_t version;
    uint8_t flags;
    uint16_t credits; /* network order */
    uint8_t reserved[3];
    uint8_t target_iomap_size;
    struct rs_wire_sge target_sgl; /* network order; length = entries */
    struct rs_wire_sge data_buf;   /* network order */
};

_Static_assert(sizeof(struct rs_wire_conn) == 40, "rs_wire_conn is 40 bytes on the wire");

/* Message ops (bits 31..29 of a message). */
enum {
    RS_MSG_DATA = 0,
    RS_MSG_WRITE = 2, /* local only (riowrite), never sent */
    RS_MSG_SGL = 4,
    RS_MSG_IOMAP_SGL = 6,
    RS_MSG_CTRL = 7,
};
enum { RS_CTRL_DISCONNECT = 0, RS_CTRL_KEEPALIVE = 1, RS_CTRL_SHUTDOWN = 2 };

static inline uint32_t rs_msg(uint32_t op, uint32_t data)
{
    return (op << 29) | (data & 0x1fffffffu);
}
static inline uint32_t rs_msg_op(uint32_t m)
{
    return m >> 29;
}
static inline uint32_t rs_msg_data(uint32_t m)
{
    return m & 0x1fffffffu;
}

/* target_iomap_size on the wire: n up to 128 as is, larger counts as
 * 0x80 | n >> 8 (so 256-entry steps, up to 32512). */
static inline uint8_t rs_iomap_scale(uint32_t n)
{
    return (uint8_t)(n <= 128 ? n : 0x80u | ((n >> 8) & 0x7fu));
}
static inline uint32_t rs_iomap_unscale(uint8_t v)
{
    return v <= 128 ? v : (uint32_t)(v & 0x7fu) << 8;
}

#define RS_MSG_BYTES 4
#define RS_SNDLOWAT  2048
/* Bytes per data transfer (one RDMA Write and its message), within the
 * granted space and the free send buffer. rdma-core starts at 2 KiB and
 * doubles up to 64 KiB within each call, so that on an RNIC the first
 * bytes go out while the rest is copied; here a transfer is a Write, a
 * Send and two completions of software work, and the data goes out at
 * the post anyway: one transfer for up to 256 KiB (rstream 64 KiB sends
 * were six transfers each). Receivers take any length (29 bits). */
#define RS_XFER       (256u << 10)
#define RS_CTRL_SLOTS 4 /* send-queue entries kept for control messages */
/* Receives posted beyond the credits we advertise (rq_size): a peer's
 * control messages (grants, shutdown, keepalive; up to RS_CTRL_SLOTS of
 * them, two entries per grant) take receives too, and credits only bound
 * its data messages. */
#define RS_RECV_EXTRA (2 * RS_CTRL_SLOTS)

/* Socket states (bit set). */
enum {
    RS_ST_INIT = 0,
    RS_ST_BOUND = 1 << 0,
    RS_ST_LISTEN = 1 << 1,
    RS_ST_CONNECTING = 1 << 2, /* resolving / waiting for ESTABLISHED */
    RS_ST_ACCEPTING = 1 << 3,  /* accepted, ESTABLISHED not yet seen */
    RS_ST_CONNECTED = 1 << 4,
    RS_ST_READABLE = 1 << 5,
    RS_ST_WRITABLE = 1 << 6,
    RS_ST_CONN_ERROR = 1 << 7, /* connect failed (err) */
    RS_ST_DISCONNECTED = 1 << 8,
    RS_ST_ERROR = 1 << 9,
};

/* A buffer given to riomap. */
struct rs_iomr {
    struct rs_iomr *next;
    uint64_t offset;
    struct ibv_mr *mr;
    int index; /* slot in the peer's iomap array (PROT_WRITE), else -1 */
    bool sent; /* the peer was told (PROT_WRITE) */
};

struct rs_sock {
    int index; /* = the fd of ch, the number the application sees */
    int domain;
    pthread_mutex_t lock;
    /* Waiting: one thread at a time sleeps in poll() on the channels (the
     * poller); other threads of rs_wait sleep on cond. Progress made by any
     * thread broadcasts cond and, while someone sleeps in poll() (sleepers:
     * the poller and rpoll callers), writes wake_fd, which they poll too. */
    pthread_cond_t cond;
    int polling;
    int sleepers;
    int wake_fd;
    unsigned gen;         /* counts rs_wake calls: progress an rpoll may have missed */
    uint64_t progress_ns; /* the last rs_progress that took anything (rs_spin_ns) */
    struct rdma_event_channel *ch;
    struct rdma_cm_id *id;
    struct ibv_comp_channel *cch;
    struct ibv_cq *cq;
    int cq_armed;
    unsigned unacked_cq_events;

    int state;
    int err;      /* connect error / fatal error (errno) */
    int fd_flags; /* O_NONBLOCK */
    int swap_sgl; /* peer's byte order differs */
    int reuseaddr, keepalive, nodelay, v6only;
    int keepidle, keepintvl, keepcnt; /* seconds, seconds, count */
    struct linger linger;

    /* sizes (settable before connect) */
    uint32_t sbuf_size, rbuf_size;
    uint16_t sq_size, rq_size, sq_inline;
    uint16_t iomap_size; /* remote IO mappings we offer (RDMA_IOMAPSIZE) */

    /* send side */
    uint8_t *sbuf;
    struct ibv_mr *smr;
    uint32_t sbuf_head; /* next byte to fill */
    uint32_t sbuf_avail;
    int sqe_avail;
    uint32_t ctrl_seqno, ctrl_max_seqno;
    uint16_t sseq_no, sseq_comp;
    struct rs_wire_sge *target_sgl; /* written by the peer */
    struct ibv_mr *target_mr;
    int target_sge;
    struct rs_wire_sge remote_sgl; /* the peer's target SGL */
    int remote_sge;
    uint8_t ctrl_buf[RS_CTRL_SLOTS][sizeof(struct rs_wire_sge)];

    /* riomap: our mappings, and the peer's mapping array */
    struct rs_iomr *iomaps;
    bool iomap_pending;                 /* a PROT_WRITE mapping not yet sent */
    struct rs_wire_iomap *target_iomap; /* iomap_size entries, written by the peer */
    struct rs_wire_sge remote_iomap;    /* the peer's array; length = entries */

    /* keepalive (SO_KEEPALIVE): next due time, and the service list */
    uint64_t keepalive_due_ns;
    struct rs_sock *ka_next;
    bool ka_listed;

    /* receive side */
    uint8_t *rbuf; /* rbuf_size data + rq_size message slots */
    struct ibv_mr *rmr;
    uint32_t rbuf_offset;      /* next byte to read */
    uint32_t rbuf_free_offset; /* start of the next half to grant */
    uint32_t rbuf_bytes_avail; /* consumed, not yet granted */
    uint16_t rseq_no, rseq_comp;
    int rmsg_slot;  /* next receive slot to post */
    uint32_t *rmsg; /* queued data message lengths, rq_size + 1 ring */
    int rmsg_head, rmsg_tail;
    uint64_t rdata_queued; /* bytes the queued data messages announce */
    uint16_t rmsg_in;      /* data messages received */
    uint16_t rmsg_limit;   /* how many we allowed: the credits of the connect,
                            * then the last SGL message's limit */
    int rerr;              /* the peer broke the protocol (EPROTO): what rrecv
                            * reports once the data before it is read */
};

#endif
