/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp engine: a userspace iWARP RNIC behind the libibverbs API.
 *
 * Internal header shared by the engine's files; see docs/ENGINE.md for the
 * design (threading, locking, progress, placement). Files by concern:
 *   device.c    device list (one per network interface), context, queries,
 *               async events
 *   mem.c       PD, MR table (STags), access/bounds checks, invalidation
 *   cq.c        CQ ring, completion channels, notification
 *   qp.c        QP/SRQ objects, the QP state machine, flush
 *   qp_tx.c     send queue processing, FPDU transmission, Read/atomic
 *               responses, Terminate transmission
 *   qp_rx.c     receive processing, placement, Read/atomic responder,
 *               Terminate reception
 *   progress.c  the background progress thread (epoll), poll-driven progress
 *   cm.c        connections: TCP + MPA (active/passive), RTR, teardown
 *   config.c    environment configuration (UIWARP_*)
 *   verbs.c     the exported ibv_* functions and the context ops table
 *
 * Every object embeds rdma-core's public struct first, so pointers convert
 * both ways (to_uqp() etc.).
 */
#ifndef UIWARP_ENGINE_H
#define UIWARP_ENGINE_H

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uiwarp/wire.h>

#ifdef __cplusplus
extern "C" {
#endif

#define UIW_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------
 * Limits advertised by ibv_query_device (truthful: enforced by the code).
 * ---------------------------------------------------------------------- */
#define UIW_MAX_QP          4096
#define UIW_MAX_QP_WR       16384
#define UIW_MAX_SGE         16     /* send and receive SGEs per WR */
#define UIW_MAX_SGE_RD      16
#define UIW_MAX_INLINE      256
#define UIW_MAX_CQ          4096
#define UIW_MAX_CQE         (1 << 20)
#define UIW_MAX_MR          (1 << 20)
#define UIW_MAX_PD          4096
#define UIW_MAX_SRQ         1024
#define UIW_MAX_SRQ_WR      16384
#define UIW_MAX_ORD         128
#define UIW_MAX_IRD         128
#define UIW_MAX_MSG_SIZE    (1ull << 31)
#define UIW_VENDOR_ID       0x756977 /* "uiw" */

/* ------------------------------------------------------------------------
 * Configuration (config.c; documented in README, read once per process)
 * ---------------------------------------------------------------------- */
struct uiw_config {
    uint8_t mpa_rev;        /* UIWARP_MPA_REV: 1 or 2 (default 2) */
    uint8_t crc;            /* UIWARP_CRC: off|optional|required (default optional) */
    bool markers;           /* UIWARP_MARKERS: 0|1 (default 0) */
    bool p2p;               /* UIWARP_P2P: 0|1 (default 0) */
    uint8_t rtr;            /* UIWARP_RTR: write|read|send bits to offer (default write|read) */
    unsigned mpa_timeout_ms; /* UIWARP_MPA_TIMEOUT_MS (default 10000) */
    unsigned max_fpdu;      /* UIWARP_MAX_FPDU: 0 = derive from MSS (default) */
    unsigned zcopy_min;     /* UIWARP_ZCOPY_MIN: bytes from which rx reads straight into place */
    int debug;              /* UIWARP_DEBUG: 0..3 */
};
const struct uiw_config *uiw_config(void);

#define uiw_dbg(level, ...)                                                                        \
    do {                                                                                           \
        if (uiw_config()->debug >= (level))                                                       \
            uiw_log(__VA_ARGS__);                                                                  \
    } while (0)
void uiw_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------------------
 * Device and context (device.c)
 * ---------------------------------------------------------------------- */
struct uiw_device {
    struct verbs_device vdev; /* ibv_device first, as rdma-core does */
    char ifname[64];
    unsigned ifindex;
    uint8_t mac[6];
    uint64_t guid;      /* EUI-64 from the MAC, or from the name for loopback */
    unsigned mtu;
    bool loopback;
};

/* An async event queued for ibv_get_async_event. */
struct uiw_async_ev {
    struct ibv_async_event ev;
    struct uiw_async_ev *next;
};

struct uiw_context {
    struct verbs_context vctx; /* the ibv_context is vctx.context */
    struct uiw_device *dev;
    pthread_mutex_t async_lock;
    struct uiw_async_ev *async_head, *async_tail;
    int async_wr_fd;  /* write end; vctx.context.async_fd is the read end */
};

/* Queue an async event (QP fatal, access error, SRQ limit, CQ error...).
 * Safe from any thread, with any engine lock held. */
void uiw_async_event(struct uiw_context *ctx, enum ibv_event_type type, void *obj);

/* ------------------------------------------------------------------------
 * Memory (mem.c): PDs, MRs and the STag table
 * ---------------------------------------------------------------------- */
struct uiw_pd {
    struct ibv_pd ibpd;
    atomic_int refs; /* MRs, QPs, SRQs using it */
};

/* A registered region. STag = index << 8 | key (RFC 5040 §2.1 allows any
 * split; siw uses 24+8): the index is random-started and the key random,
 * so a peer cannot predict valid STags (RFC 5042 §5.1). */
struct uiw_mr {
    struct ibv_mr ibmr;   /* lkey == rkey == STag */
    struct uiw_pd *pd;
    uint64_t iova;        /* tagged offset of the first byte */
    uint8_t *base;        /* host address of the first byte */
    uint64_t length;
    unsigned access;      /* IBV_ACCESS_* */
    uint32_t stag;
    atomic_bool valid;    /* cleared by invalidation / deregistration */
    atomic_int users;     /* placements in progress (see uiw_mr_get) */
};

/* Result of a tagged-buffer check: 0 or the RFC error for a Terminate. */
enum uiw_mem_err {
    UIW_MEM_OK = 0,
    UIW_MEM_INVALID_STAG,  /* unknown STag, key mismatch, invalidated */
    UIW_MEM_BASE_BOUNDS,   /* TO/length outside the region (overflow-safe) */
    UIW_MEM_ACCESS,        /* missing access right */
    UIW_MEM_PD,            /* STag not associated with this QP's PD */
};

/* Look up stag for an access of len bytes at tagged offset `to` with the
 * given IBV_ACCESS_* right (0 for local read). On success returns the MR
 * with users incremented and sets *addr; the caller must uiw_mr_put() it
 * as soon as the access is done (never across a wait for the network).
 * Overflow-safe: to + len may not wrap. */
struct uiw_mr *uiw_mr_get(struct uiw_pd *pd, uint32_t stag, uint64_t to, uint64_t len,
                          unsigned access, uint8_t **addr, enum uiw_mem_err *err);
void uiw_mr_put(struct uiw_mr *mr);
/* Local check of an SGE (lkey) for length bytes; same contract. */
struct uiw_mr *uiw_sge_get(struct uiw_pd *pd, const struct ibv_sge *sge, unsigned access,
                           uint8_t **addr, enum uiw_mem_err *err);
/* Invalidate an STag (Send with Invalidate, Local Invalidate). Returns 0,
 * -ENOENT (unknown), -EACCES (PD mismatch) or -EINVAL (not invalidatable:
 * RFC 5040 §6.2 — here: MRs registered through ibv_reg_mr may be invalidated
 * only when IBV_ACCESS_... see mem.c). */
int uiw_stag_invalidate(struct uiw_pd *pd, uint32_t stag);

/* ------------------------------------------------------------------------
 * Completion queues and channels (cq.c)
 * ---------------------------------------------------------------------- */
struct uiw_comp_channel {
    struct ibv_comp_channel ch; /* ch.fd: read end of a pipe */
    int wr_fd;
    pthread_mutex_t lock;
    struct uiw_cq **pending; /* CQs with an undelivered event, FIFO */
    unsigned npending, cap;
};

struct uiw_qp;

struct uiw_cq {
    struct ibv_cq ibcq;
    pthread_mutex_t lock;
    struct ibv_wc *ring;
    unsigned cap, head, count;
    uint8_t armed;     /* 0, UIW_CQ_ARM_ALL, UIW_CQ_ARM_SOLICITED */
    bool overflow;     /* a completion was lost: CQ in error (async event raised) */
    /* QPs whose completions land here, for poll-driven progress */
    struct uiw_qp **qps;
    unsigned nqps, qps_cap;
};
#define UIW_CQ_ARM_ALL       1
#define UIW_CQ_ARM_SOLICITED 2

/* Add a completion; signals the channel if armed (solicited: only when
 * `solicited`). Called with the producing QP's lock held; takes cq->lock. */
void uiw_cq_push(struct uiw_cq *cq, const struct ibv_wc *wc, bool solicited);

/* ------------------------------------------------------------------------
 * Queue pairs (qp.c, qp_tx.c, qp_rx.c)
 * ---------------------------------------------------------------------- */

/* A send work request as queued (copied from ibv_send_wr). */
struct uiw_sqe {
    uint64_t wr_id;
    enum ibv_wr_opcode opcode;
    unsigned flags;       /* IBV_SEND_* */
    uint32_t imm_or_inv;  /* imm_data (network order) or invalidate rkey */
    uint64_t remote_addr;
    uint32_t rkey;
    uint64_t compare_add, swap;
    int num_sge;
    struct ibv_sge sge[UIW_MAX_SGE];
    uint8_t *inline_data; /* points into the QP's inline buffer slot, if inline */
    uint64_t length;      /* total payload */
    /* progress */
    uint64_t sent;        /* payload bytes handed to TCP */
    bool immediate_pending; /* Write/Send with Imm: the Immediate Data message follows */
    uint8_t state;        /* see qp_tx.c */
};

struct uiw_rqe {
    uint64_t wr_id;
    int num_sge;
    struct ibv_sge sge[UIW_MAX_SGE];
    uint64_t length;
};

/* An outbound Read / Atomic waiting for its response (ORQ entry). */
struct uiw_orqe {
    struct uiw_sqe *sqe;  /* the requesting WR (stays in the SQ until done) */
    uint32_t sink_stag;   /* Read: the local STag the response targets */
    uint64_t sink_to;
    uint32_t size;
    uint32_t req_id;      /* Atomic request identifier */
    bool atomic;
};

/* An inbound Read / Atomic to serve (IRQ entry). */
struct uiw_irqe {
    uint8_t opcode;       /* UIW_OP_READ_REQ or UIW_OP_ATOMIC_REQ */
    uiw_rreq rreq;
    uiw_atomic_resp aresp; /* computed result for atomics */
    uint32_t msn;         /* for error reports */
    uint64_t sent;
};

struct uiw_srq {
    struct ibv_srq ibsrq;
    struct uiw_pd *pd;
    pthread_mutex_t lock;
    struct uiw_rqe *ring;
    unsigned cap, head, count;
    unsigned max_sge;
    unsigned limit;       /* 0 = not armed */
    struct uiw_context *ctx;
};

struct uiw_conn; /* cm.c */

struct uiw_qp {
    struct ibv_qp ibqp;
    struct uiw_context *ctx;
    struct uiw_pd *pd;
    struct uiw_cq *scq, *rcq;
    struct uiw_srq *srq;
    pthread_mutex_t lock;  /* protects everything below */
    atomic_int refs;
    enum ibv_qp_state state;
    bool sq_sig_all;
    struct ibv_qp_cap cap;

    /* send queue: ring of cap.max_send_wr entries */
    struct uiw_sqe *sq;
    unsigned sq_cap, sq_head, sq_count;
    uint8_t *inline_buf;   /* sq_cap * UIW_MAX_INLINE */
    /* receive queue (unless srq) */
    struct uiw_rqe *rq;
    unsigned rq_cap, rq_head, rq_count;

    /* negotiated connection parameters */
    struct uiw_conn *conn;
    int fd;                /* the TCP socket once connected, else -1 */
    uiw_mpa_result mpa;
    unsigned ord, ird;

    /* outbound reads/atomics and inbound requests */
    struct uiw_orqe *orq;
    unsigned orq_head, orq_count;
    struct uiw_irqe *irq;
    unsigned irq_head, irq_count;

    /* wire state (qp_rx.c / qp_tx.c) */
    uiw_rx rx;
    uiw_tx tx;
    uint32_t tx_msn[UIW_QN_COUNT]; /* last MSN sent per untagged queue */
    uint32_t rx_msn[UIW_QN_COUNT]; /* last MSN received per untagged queue */
    void *rx_state;        /* qp_rx.c private state (current message, staging buffer) */
    void *tx_state;        /* qp_tx.c private state (current FPDU batch) */
    bool want_write;       /* transmission blocked: EPOLLOUT armed */

    /* Terminate / error */
    bool term_sent, term_received;
    uiw_term_cause term;
};

static inline struct uiw_qp *to_uqp(struct ibv_qp *q)
{
    return (struct uiw_qp *)q;
}
static inline struct uiw_cq *to_ucq(struct ibv_cq *c)
{
    return (struct uiw_cq *)c;
}
static inline struct uiw_pd *to_upd(struct ibv_pd *p)
{
    return (struct uiw_pd *)p;
}
static inline struct uiw_mr *to_umr(struct ibv_mr *m)
{
    return (struct uiw_mr *)m;
}
static inline struct uiw_srq *to_usrq(struct ibv_srq *s)
{
    return (struct uiw_srq *)s;
}
static inline struct uiw_context *to_uctx(struct ibv_context *c)
{
    return (struct uiw_context *)((char *)c - offsetof(struct uiw_context, vctx.context));
}

void uiw_qp_get(struct uiw_qp *qp);
void uiw_qp_put(struct uiw_qp *qp);

/* State machine (qp.c). Called with qp->lock held. Moving to ERR flushes
 * every outstanding SQ/RQ entry with IBV_WC_WR_FLUSH_ERR (RQ entries of an
 * SRQ stay in the SRQ). */
int uiw_qp_modify_locked(struct uiw_qp *qp, struct ibv_qp_attr *attr, int mask);
void uiw_qp_to_error_locked(struct uiw_qp *qp);

/* A protocol error detected locally: send the Terminate for `cause`
 * (attaching hdr bytes when the RFC says so), move the QP to ERR, flush,
 * raise `async` on the context. qp->lock held. */
void uiw_qp_terminate_locked(struct uiw_qp *qp, uiw_term_cause cause, const uint8_t *bad_hdr,
                             unsigned bad_hdr_len, enum ibv_event_type async);

/* Data path entry points. All are called with qp->lock held, never block,
 * and return 0 or a negative errno. */
int uiw_qp_tx_progress(struct uiw_qp *qp);      /* push queued FPDUs until EAGAIN */
int uiw_qp_rx_progress(struct uiw_qp *qp);      /* read and process until EAGAIN */
int uiw_qp_post_send_locked(struct uiw_qp *qp, struct ibv_send_wr *wr,
                            struct ibv_send_wr **bad);
int uiw_qp_post_recv_locked(struct uiw_qp *qp, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad);
/* Connection established (cm.c, after MPA): attach the socket and the
 * negotiated parameters, move to RTS, start progress. */
int uiw_qp_attach_socket(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa);
/* The socket reported EOF/RST: flush and move to ERR (or close cleanly if
 * we were disconnecting). qp->lock held. */
void uiw_qp_llp_closed_locked(struct uiw_qp *qp, int err);

/* ------------------------------------------------------------------------
 * Progress (progress.c)
 * ---------------------------------------------------------------------- */
/* Register fd with the process-wide progress thread (started on first use).
 * cb runs on the progress thread with the given events (EPOLLIN/OUT/ERR/HUP)
 * and must take the object's lock itself (blocking lock is fine there). */
typedef void (*uiw_progress_cb)(void *obj, uint32_t events);
int uiw_progress_add(int fd, uint32_t events, uiw_progress_cb cb, void *obj);
int uiw_progress_mod(int fd, uint32_t events, uiw_progress_cb cb, void *obj);
/* Removes fd; on return no callback for obj is running or will run. */
int uiw_progress_del(int fd);
/* Run cb(obj) on the progress thread after ms milliseconds (timeouts). */
int uiw_progress_timer(unsigned ms, void (*cb)(void *), void *obj, uint64_t *id);
void uiw_progress_timer_cancel(uint64_t id);
/* Poll-driven progress: called by ibv_poll_cq when its CQ is empty; tries
 * each attached QP (trylock) so a polling application needs no thread
 * hand-off. */
void uiw_cq_drive(struct uiw_cq *cq);

/* ------------------------------------------------------------------------
 * Connections (cm.c): the internal API librdmacm and the tests use.
 * ---------------------------------------------------------------------- */
enum uiw_cm_event_type {
    UIW_CM_CONNECT_REQUEST = 1, /* passive: a peer's MPA Request arrived */
    UIW_CM_ESTABLISHED,         /* both sides: QP in RTS (after RTR if p2p) */
    UIW_CM_REJECTED,            /* active: peer rejected (private data kept) */
    UIW_CM_UNREACHABLE,         /* active: TCP connect failed */
    UIW_CM_CONNECT_ERROR,       /* MPA protocol error or timeout (status) */
    UIW_CM_DISCONNECTED,        /* peer closed / we disconnected */
};

struct uiw_conn_param {
    const void *private_data;
    uint16_t private_data_len;
    uint16_t ird;  /* responder_resources */
    uint16_t ord;  /* initiator_depth */
};

struct uiw_cm_event {
    enum uiw_cm_event_type type;
    int status;               /* 0 or negative errno (-ETIMEDOUT, -ECONNREFUSED, -EPROTO) */
    struct uiw_conn *conn;    /* CONNECT_REQUEST: the new connection to accept/reject */
    struct uiw_listener *listener;
    void *user;               /* the user pointer given to connect/listen */
    uint16_t peer_ird, peer_ord;
    uint16_t private_data_len;
    uint8_t private_data[UIW_MPA_MAX_PD];
    struct sockaddr_storage local, peer;
};

/* Events are delivered through a channel: a pollable fd plus a queue. */
struct uiw_cm_channel;
struct uiw_cm_channel *uiw_cm_channel_create(void);
void uiw_cm_channel_destroy(struct uiw_cm_channel *ch);
int uiw_cm_channel_fd(const struct uiw_cm_channel *ch);
/* Blocks unless the fd is non-blocking (then -EAGAIN). */
int uiw_cm_get_event(struct uiw_cm_channel *ch, struct uiw_cm_event *ev);

struct uiw_listener;
int uiw_cm_listen(struct uiw_context *ctx, const struct sockaddr *addr, int backlog,
                  struct uiw_cm_channel *ch, void *user, struct uiw_listener **out);
int uiw_cm_listener_addr(const struct uiw_listener *l, struct sockaddr_storage *addr);
void uiw_cm_listener_destroy(struct uiw_listener *l);

/* Active side: TCP connect, MPA Request (policy from uiw_config), attach
 * qp on success. Asynchronous: ESTABLISHED / REJECTED / UNREACHABLE /
 * CONNECT_ERROR follow on ch. */
int uiw_cm_connect(struct uiw_qp *qp, const struct sockaddr *src, const struct sockaddr *dst,
                   const struct uiw_conn_param *p, struct uiw_cm_channel *ch, void *user,
                   struct uiw_conn **out);
/* Passive side, after CONNECT_REQUEST. */
int uiw_cm_accept(struct uiw_conn *c, struct uiw_qp *qp, const struct uiw_conn_param *p,
                  void *user);
int uiw_cm_reject(struct uiw_conn *c, const void *pd, uint16_t pd_len);
/* Orderly close (RFC 5040 §5.4 / siw: SQD then TCP FIN). */
int uiw_cm_disconnect(struct uiw_conn *c);
void uiw_cm_conn_destroy(struct uiw_conn *c);

#ifdef __cplusplus
}
#endif
#endif /* UIWARP_ENGINE_H */
