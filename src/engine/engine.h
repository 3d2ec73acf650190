/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp engine: a userspace iWARP RNIC behind the libibverbs API.
 *
 * Internal header shared by the engine's files: the objects, their locks
 * and the functions the files call in one another. docs/ENGINE.md
 * describes the design (threading, locking, progress, placement) and says
 * which file holds what. Other libraries and programs see only the narrow
 * interface, iface/uiw_cm.h.
 *
 * Every object embeds rdma-core's public struct first, so pointers convert
 * both ways (to_uqp() etc.).
 */
#ifndef UIWARP_ENGINE_H
#define UIWARP_ENGINE_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <uiwarp/stat.h>
#include <uiwarp/wire.h>

#include "iface/uiw_cm.h" // IWYU pragma: export

#ifdef __cplusplus
extern "C" {
#endif

#define UIW_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------
 * Limits advertised by ibv_query_device (truthful: enforced by the code).
 * ---------------------------------------------------------------------- */
#define UIW_MAX_QP       (1 << 20) /* QP numbers are 24-bit (qp.c) */
#define UIW_MAX_QP_WR    16384
#define UIW_MAX_SGE      16 /* send and receive SGEs per WR */
#define UIW_MAX_SGE_RD   16
#define UIW_MAX_INLINE   256
#define UIW_MAX_CQ       (1 << 20)
#define UIW_MAX_CQE      (1 << 20)
#define UIW_MAX_MR       (1 << 30) /* live MRs (mem.c: keeps a random STag draw's miss rate <= 1/4) */
#define UIW_MAX_PD       (1 << 20)
#define UIW_MAX_SRQ      (1 << 20)
#define UIW_MAX_SRQ_WR   16384
#define UIW_MAX_ORD      128
#define UIW_MAX_IRD      128
#define UIW_MAX_MSG_SIZE (1ull << 31)
#define UIW_VENDOR_ID    0x756977 /* "uiw" */

/* ibv_destroy_qp after rdma_disconnect waits at most this long for the
 * peer's FIN before close() (qp.c close_after_peer_fin) */
#define UIW_CLOSE_LINGER_MS 2000u

/* ------------------------------------------------------------------------
 * Configuration (config.c; documented in README, read once per process)
 * ---------------------------------------------------------------------- */
struct uiw_config {
    uint8_t mpa_rev;         /* UIWARP_MPA_REV: 1 or 2 (default 2) */
    bool mpa_rev1_fallback;  /* UIWARP_MPA_REV1_FALLBACK: an initiator whose revision 2
                              * Request is reset tries revision 1 once (default 1; cm.c) */
    uint8_t crc;             /* UIWARP_CRC: off|optional|required (default optional) */
    bool markers;            /* UIWARP_MARKERS: 0|1 (default 0) */
    bool p2p;                /* UIWARP_P2P: 0|1 (default 1) */
    uint8_t rtr;             /* UIWARP_RTR: write|read|send bits to offer (default write|read) */
    unsigned mpa_timeout_ms; /* UIWARP_MPA_TIMEOUT_MS (default 10000) */
    unsigned max_fpdu;       /* UIWARP_MAX_FPDU: 0 = derive from MSS (default) */
    bool fpdu_align;         /* UIWARP_FPDU_ALIGN: every TCP segment starts with an FPDU on
                              * links that are not loopback (qp_tx.c; default 1) */
    unsigned zcopy_min;      /* UIWARP_ZCOPY_MIN: bytes from which rx reads straight into place */
    int debug;               /* UIWARP_DEBUG: 0..3 */
    unsigned first_fpdu_hold_ms; /* UIWARP_FIRST_FPDU_HOLD_MS: an initiator's first
                                  * wake-up FPDU this long after the MPA Reply if the peer
                                  * has not spoken (0: none; docs/INTEROP.md §1) */
    int progress_nice;           /* UIWARP_PROGRESS_NICE: the progress thread's nice value */
    unsigned progress_spin_us;   /* UIWARP_PROGRESS_SPIN_US: cq.c "Waiting", progress.c "Spinning"
                                    (default 200) */
    unsigned tx_coalesce_ns;     /* UIWARP_TX_COALESCE_US (in ns): qp_tx.c coalescing, 0 = off */
    unsigned poll_own_us;        /* UIWARP_POLL_OWN_US: qp_dp.c "Poll ownership", 0 = off
                                    (default 200) */
    bool progress_nice_set;      /* false: "off", the thread keeps the process's */
    unsigned peer_timeout_s;     /* UIWARP_PEER_TIMEOUT: dead-peer detection through TCP
                                  * keepalive and TCP_USER_TIMEOUT (default 30; 0 = off) */
    unsigned rnr_hold_ms;        /* UIWARP_RNR_HOLD_MS: how long an untagged message may
                                  * wait for a posted receive (qp_rx.c "Receiver not
                                  * ready"; default 5000, 0 = Terminate at once,
                                  * UIW_RNR_UNLIMITED = no limit) */
};
#define UIW_RNR_UNLIMITED UINT_MAX
const struct uiw_config *uiw_config(void);

static inline uint64_t uiw_now_ns(void) /* CLOCK_MONOTONIC */
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The locks the application's thread and the progress thread both take for
 * a few microseconds per message (a QP's, a CQ's) spin briefly before
 * sleeping (glibc's adaptive mutex). A plain mutex puts the loser to sleep
 * in the kernel and makes the holder pay a futex wake when it unlocks; the
 * sleeper then waits for a wake-up, which on a machine whose CPUs are all
 * busy (a program spinning on memory, as perftest's write_lat) may only
 * come at the next scheduler tick. docs/ENGINE.md "Threads, locks,
 * progress" has the figures. */
static inline void uiw_mutex_init_adaptive(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;

    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

/* A zeroed object of size bytes for a verb that returns a pointer: NULL
 * with errno ENOMEM if there is no memory. */
static inline void *uiw_zalloc(size_t size)
{
    void *p = calloc(1, size);

    if (!p)
        errno = ENOMEM;
    return p;
}

/* Room for one more element in the array arr of *cap elements of size
 * bytes, n of them used: arr itself, or when it is full arr grown to twice
 * *cap (first when empty) and *cap updated; NULL if that fails (arr and
 * *cap unchanged). */
static inline void *uiw_room(void *arr, unsigned n, unsigned *cap, unsigned first, size_t size)
{
    if (n < *cap)
        return arr;
    unsigned c = *cap ? *cap * 2 : first;
    void *grown = realloc(arr, (size_t)c * size);
    if (grown)
        *cap = c;
    return grown;
}

/* Count one more object in *n, of which there may be max: false, with
 * errno ENOMEM and *n unchanged, when max are counted already. */
static inline bool uiw_count_take(atomic_int *n, int max)
{
    if (atomic_fetch_add(n, 1) >= max) {
        atomic_fetch_sub(n, 1);
        errno = ENOMEM;
        return false;
    }
    return true;
}

/* uiw_log, uiw_dbg: iface/uiw_cm.h */

/* The object an async event names in its element (device.c). */
enum uiw_ev_obj { UIW_EV_NONE, UIW_EV_QP, UIW_EV_CQ, UIW_EV_SRQ, UIW_EV_WQ };
enum uiw_ev_obj uiw_event_obj(enum ibv_event_type t);

/* ------------------------------------------------------------------------
 * Device and context (device.c)
 * ---------------------------------------------------------------------- */
struct uiw_device {
    struct ibv_device ibdev; /* first: what apps see (rdma-core's struct
                              * verbs_device is not in the public headers) */
    char ifname[64];
    unsigned ifindex;
    uint8_t mac[6];
    uint64_t guid; /* EUI-64 from the MAC, or from the name for loopback */
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
    int async_wr_fd; /* write end; vctx.context.async_fd is the read end */
};

/* Queue an async event (QP fatal, access error, SRQ limit, CQ error...).
 * Safe from any thread, with any engine lock held. */
void uiw_async_event(struct uiw_context *ctx, enum ibv_event_type type, void *obj);
/* Drop queued, not yet delivered async events about obj (destroy paths). */
void uiw_async_purge(struct uiw_context *ctx, const void *obj);
/* Destroying obj, a QP or SRQ: purge its queued events, then wait until
 * the application acked every one handed out (*reported, ctx->async_lock)
 * on rdma-core's mutex, cond and acked count of the verbs object. */
void uiw_async_settle(struct uiw_context *ctx, const void *obj, const uint32_t *reported,
                      pthread_mutex_t *mutex, pthread_cond_t *cond, const uint32_t *completed);

/* The context's op tables: verbs.c fills ibv_context_ops and verbs_context
 * (every slot non-NULL; unsupported ones fail with EOPNOTSUPP) with: */
void uiw_verbs_init_ops(struct uiw_context *ctx);
int uiw_op_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
                      size_t attr_size); /* device.c */
int uiw_op_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t attr_size); /* device.c */
int uiw_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);               /* cq.c */
int uiw_op_req_notify_cq(struct ibv_cq *cq, int solicited_only);               /* cq.c */
int uiw_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                     struct ibv_send_wr **bad); /* qp.c */
int uiw_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                     struct ibv_recv_wr **bad); /* qp.c */
int uiw_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
                         struct ibv_recv_wr **bad); /* qp.c */
struct uiw_qp;
/* ibv_post_send's work with qp->lock held (qp.c): by QP state, post
 * (RTS), flush at once (ERR, SQE), or fail (EINVAL in RESET, else
 * ENOTCONN). Returns 0 or a positive errno, *bad set on failure. */
int uiw_qp_post_send_any_locked(struct uiw_qp *qp, struct ibv_send_wr *wr,
                                struct ibv_send_wr **bad);
/* Extended verbs (verbs_ex.c) */
struct ibv_cq_ex *uiw_op_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr);
struct ibv_qp *uiw_op_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr);
struct ibv_srq *uiw_op_create_srq_ex(struct ibv_context *c, struct ibv_srq_init_attr_ex *attr);
void uiw_qpx_free(struct uiw_qp *qp); /* ibv_destroy_qp: the ibv_wr_* builder */

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
    struct ibv_mr ibmr; /* lkey == rkey == STag */
    struct uiw_pd *pd;
    uint64_t iova; /* tagged offset of the first byte */
    uint8_t *base; /* host address of the first byte */
    uint64_t length;
    unsigned access; /* IBV_ACCESS_* */
    uint32_t stag;
    atomic_bool valid; /* cleared by invalidation / deregistration */
    atomic_int users;  /* placements in progress (see uiw_mr_get) */
    /* Memory windows (RFC 5040 §2.1 "Memory Window", verbs ibv_alloc_mw):
     * a window is an object of this table too, with mw_type set; bound,
     * it has its own STag, range and remote rights inside `parent`. */
    uint8_t mw_type;       /* 0: a memory region; IBV_MW_TYPE_1 / _2 */
    struct uiw_mr *parent; /* a bound window: the region it is bound to */
    atomic_int nwindows;   /* a region: windows bound to it */
    struct ibv_mw *ibmw;   /* a window: the application's handle */
    /* mem.c: the STag hash (chains walked without a lock) and free list */
    _Atomic(struct uiw_mr *) hnext;
    _Atomic uint32_t hstag; /* the STag this object is linked under, 0: none */
    struct uiw_mr *free_next;
};

/* Result of a tagged-buffer check: 0 or the RFC error for a Terminate. */
enum uiw_mem_err {
    UIW_MEM_OK = 0,
    UIW_MEM_INVALID_STAG, /* unknown STag, key mismatch, invalidated */
    UIW_MEM_BASE_BOUNDS,  /* TO/length outside the region (overflow-safe) */
    UIW_MEM_ACCESS,       /* missing access right */
    UIW_MEM_PD,           /* STag not associated with this QP's PD */
    UIW_MEM_TO_WRAP,      /* TO + len wraps 64 bits (RFC 5041 §7.1 check 5) */
};

/* Look up stag for an access of len bytes at tagged offset `to` with the
 * given IBV_ACCESS_* right (0 for local read). On success returns the MR
 * with users incremented and sets *addr; the caller must uiw_mr_put() it
 * as soon as the access is done (never across a wait for the network).
 * Overflow-safe: to + len may not wrap. len == 0 is not checked at all
 * (RFC 5041 §5.2: STag and TO of a zero-length tagged message MUST NOT be
 * checked; e.g. the P2P RTR Write to STag 1): returns &uiw_mr_zero with
 * *addr = NULL; uiw_mr_put() ignores it. */
struct uiw_mr *uiw_mr_get(struct uiw_pd *pd, uint32_t stag, uint64_t to, uint64_t len,
                          unsigned access, uint8_t **addr, enum uiw_mem_err *err);
void uiw_mr_put(struct uiw_mr *mr);
extern struct uiw_mr uiw_mr_zero;
/* Local check of an SGE (lkey) for length bytes; same contract. */
struct uiw_mr *uiw_sge_get(struct uiw_pd *pd, const struct ibv_sge *sge, unsigned access,
                           uint8_t **addr, enum uiw_mem_err *err);
/* Invalidate an STag (Send with Invalidate, Local Invalidate). Returns 0
 * (also when already invalid), -ENOENT (unknown), -EACCES (PD mismatch) or
 * -EINVAL (not invalidatable: an MR with no IBV_ACCESS_REMOTE_* right was
 * never advertised, see mem.c; Terminate "STag cannot be Invalidated"). */
int uiw_stag_invalidate(struct uiw_pd *pd, uint32_t stag);
/* Memory windows (mem.c): the context ops, and the bind a BIND_MW work
 * request executes in SQ order (0 or a negative errno: the WR then
 * completes with IBV_WC_MW_BIND_ERR). */
struct ibv_mw *uiw_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int uiw_op_dealloc_mw(struct ibv_mw *mw);
int uiw_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind);
int uiw_mw_bind(struct uiw_pd *pd, struct ibv_mw *mw, uint32_t new_rkey, struct ibv_mr *mr,
                uint64_t addr, uint64_t length, unsigned access);

/* ------------------------------------------------------------------------
 * Completion queues and channels (cq.c)
 * ---------------------------------------------------------------------- */
struct uiw_comp_channel {
    struct ibv_comp_channel ch; /* ch.fd: read end of a pipe */
    int wr_fd;
    pthread_mutex_t lock;
    struct uiw_cq **pending; /* CQs with an undelivered event, FIFO */
    unsigned npending, cap;
    /* The CQs using this channel, for a thread waiting in ibv_get_cq_event
     * that drives them itself (cq.c, "Waiting"). drive_lock guards the list
     * and is held by that thread while it drives them (trylock), so
     * ibv_destroy_cq takes it to unlink its CQ. Order: drive_lock -> qp ->
     * cq -> lock. */
    pthread_mutex_t drive_lock;
    struct uiw_cq **cqs;
    unsigned ncqs, cqs_cap;
    _Atomic uint64_t last_event_ns; /* the latest event handed out */
    /* Under lock: threads spinning in ibv_get_cq_event (cq.c "Waiting"),
     * and whether the queue's first event was posted without its byte
     * because one of them takes it at once. */
    unsigned spinners;
    bool byte_owed;
};

struct uiw_qp;

struct uiw_cq {
    union {
        struct ibv_cq ibcq;
        struct ibv_cq_ex ibcqx; /* ibv_cq is its prefix (ibv_cq_ex_to_cq) */
    };
    /* ibv_create_cq_ex (verbs_ex.c): the completion start/next_poll popped,
     * read by the ibv_wc_read_* callbacks */
    struct ibv_wc ex_wc;
    uint32_t ex_create_flags; /* IBV_CREATE_CQ_ATTR_* */
    pthread_mutex_t ex_lock;  /* held from a successful start_poll to end_poll */
    pthread_mutex_t lock;
    struct ibv_wc *ring;
    unsigned cap, head, count;
    uint8_t armed;           /* 0, UIW_CQ_ARM_ALL, UIW_CQ_ARM_SOLICITED */
    bool overflow;           /* a completion was lost: CQ in error (async event raised) */
    uint32_t comp_reported;  /* events handed out by ibv_get_cq_event (channel lock) */
    uint32_t async_reported; /* async events handed out (ctx->async_lock) */
    /* QPs whose completions land here, for poll-driven progress */
    struct uiw_qp **qps;
    unsigned nqps, qps_cap;
    bool last_poll_got; /* the latest ibv_poll_cq returned completions */
    /* attached QPs whose posted WRs wait for the transmitter (coalescing,
     * qp_tx.c): ibv_poll_cq and ibv_req_notify_cq hand them over */
    atomic_uint tx_deferred;
    /* Poll-driven progress with many QPs (progress.c, uiw_cq_drive): an
     * epoll set of the attached QPs' sockets (edge-triggered EPOLLIN, key:
     * the QP), made when a poll first finds more than UIW_CQ_DRIVE_SCAN
     * QPs attached, so an empty poll costs one epoll_wait, not a read per
     * QP. drivers: threads using keys from it (cq_del_qp waits for 0). */
    int drive_ep;
    unsigned drivers;
    pthread_cond_t drive_cv;
};
#define UIW_CQ_DRIVE_SCAN    1
#define UIW_CQ_ARM_ALL       1
#define UIW_CQ_ARM_SOLICITED 2

/* Add a completion; signals the channel if armed (solicited: only when
 * `solicited`). Called with the producing QP's lock held; takes cq->lock. */
void uiw_cq_push(struct uiw_cq *cq, const struct ibv_wc *wc, bool solicited);
/* Remove the completions of QP qp_num (destroyed) from the CQ, as RNIC
 * providers clean their CQs in ibv_destroy_qp (rdma-core's mlx4/mlx5):
 * programs free a QP's contexts with it (libfabric's rxm reposts receive
 * buffers on the endpoint a completion names). keep_recv: leave receive
 * completions (their WQEs came from an SRQ, which outlives the QP). */
void uiw_cq_clean(struct uiw_cq *cq, uint32_t qp_num, bool keep_recv);
/* Whether the CQ holds a successful completion of QP qp_num not polled yet. */
bool uiw_cq_holds_success(struct uiw_cq *cq, uint32_t qp_num);

/* ------------------------------------------------------------------------
 * Queue pairs (qp.c, qp_tx.c, qp_rx.c)
 * ---------------------------------------------------------------------- */

/* A send work request as queued (copied from ibv_send_wr). */
struct uiw_sqe {
    uint64_t wr_id;
    enum ibv_wr_opcode opcode;
    unsigned flags;      /* IBV_SEND_* */
    uint32_t imm_or_inv; /* imm_data (network order) or invalidate rkey */
    uint64_t remote_addr;
    uint32_t rkey;
    uint64_t compare_add, swap;
    int num_sge;
    struct ibv_sge sge[UIW_MAX_SGE];
    uint8_t *inline_data; /* points into the QP's inline buffer slot, if inline */
    uint64_t length;      /* total payload */
    /* progress */
    uint64_t sent;          /* payload bytes handed to TCP */
    bool immediate_pending; /* Write/Send with Imm: the Immediate Data message follows */
    uint8_t state;          /* enum dp_sqe_state (dp_int.h) */
    uint8_t status;         /* enum ibv_wc_status once state is done (qp_tx.c) */
    /* Source MRs of a Send/Write, held (users count) from the moment the
     * WR starts until its last byte was handed to TCP or it is flushed
     * (qp_tx.c): ibv_dereg_mr in between revokes them (uiw_tx_revoke_mr) */
    /* IBV_WR_BIND_MW: the window, its new rkey (in rkey), the region and
     * range (remote_addr, length) and rights */
    struct ibv_mw *bind_mw;
    struct ibv_mr *bind_mr;
    unsigned bind_access;
    bool revoked;                   /* a source MR was deregistered mid-message */
    uint8_t nmr;                    /* entries of mr[] in use (NULL: revoked) */
    struct uiw_mr *mr[UIW_MAX_SGE]; /* held source MRs */
};

/* Release the source MRs an SQE holds (any path that ends the WR). */
static inline void uiw_sqe_put_mrs(struct uiw_sqe *e)
{
    for (unsigned i = 0; i < e->nmr; i++)
        uiw_mr_put(e->mr[i]);
    e->nmr = 0;
}

struct uiw_rqe {
    uint64_t wr_id;
    int num_sge;
    struct ibv_sge sge[UIW_MAX_SGE];
    uint64_t length;
};

/* An outbound Read / Atomic waiting for its response (ORQ entry). */
struct uiw_orqe {
    struct uiw_sqe *sqe; /* the requesting WR (stays in the SQ until done) */
    uint32_t sink_stag;  /* Read: the local STag the response targets */
    uint64_t sink_to;
    uint32_t size;
    uint32_t req_id; /* Atomic request identifier */
    bool atomic;
    uint32_t msn; /* MSN of the request on QN 1 (matches a Terminate's header) */
};

/* An inbound Read / Atomic to serve (IRQ entry). */
struct uiw_irqe {
    uint8_t opcode; /* UIW_OP_READ_REQ or UIW_OP_ATOMIC_REQ */
    uiw_rreq rreq;
    uiw_atomic_resp aresp; /* computed result for atomics */
    uint32_t msn;          /* for error reports */
    uint64_t sent;
};

/* A progress-thread timer (progress.c; the API is under "Progress"). */
struct uiw_timer {
    uint64_t deadline_ns;
    unsigned idx;  /* heap position + 1; 0: not queued */
    bool reserved; /* between init and fini */
    uint64_t id;   /* uiw_progress_timer's one-shot timers; 0 otherwise */
    void (*cb)(void *obj);
    void *obj;
};

struct uiw_srq {
    struct ibv_srq ibsrq;
    struct uiw_pd *pd;
    pthread_mutex_t lock;
    struct uiw_rqe *ring;
    unsigned cap, head, count;
    unsigned max_sge;
    unsigned limit; /* 0 = not armed */
    /* QPs whose receive path waits for a receive (receiver not ready,
     * qp_rx.c): a post kicks each and empties the list (under lock) */
    struct uiw_qp *hold_head;
    struct uiw_context *ctx;
    atomic_int refs;         /* QPs using it */
    uint32_t async_reported; /* async events handed out (ctx->async_lock) */
};

/* Take the next receive from an SRQ (data path, qp->lock held; takes
 * srq->lock). Raises IBV_EVENT_SRQ_LIMIT_REACHED (and disarms) when the
 * count drops below an armed limit. False when the SRQ is empty; then, if
 * waiter is given, it is put on the SRQ's hold list: the next
 * ibv_post_srq_recv kicks it (uiw_qp_rnr_kick). */
bool uiw_srq_take(struct uiw_srq *srq, struct uiw_rqe *out, struct uiw_qp *waiter);
/* Take qp off its SRQ's hold list (qp->lock held, or the QP being
 * destroyed); no-op if it is not on it. */
void uiw_srq_unhold(struct uiw_qp *qp);

struct uiw_conn; /* cm.c */

struct uiw_qpx;

struct uiw_qp {
    union {
        struct ibv_qp ibqp;
        struct ibv_qp_ex ibqpx; /* qp_base is ibqp (ibv_qp_to_qp_ex) */
    };
    struct uiw_qpx *qpx; /* ibv_wr_* builder (verbs_ex.c); NULL unless created by
                          * ibv_create_qp_ex with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
                          * freed by ibv_destroy_qp */
    struct uiw_context *ctx;
    struct uiw_pd *pd;
    struct uiw_cq *scq, *rcq;
    /* this QP's index in scq->qps ([0]) and rcq->qps ([1], when rcq is not
     * scq), each under that CQ's lock: destroying a QP of a CQ shared by
     * N QPs is O(1), not a search (N destroys were O(N^2)) */
    unsigned cq_slot[2];
    struct uiw_srq *srq;
    pthread_mutex_t lock; /* protects everything below */
    atomic_int refs;      /* 1 = the application's; uiw_qp_get() for any other
                           * holder (e.g. uiw_cq_drive, under cq->lock while
                           * the QP is on cq->qps); ibv_destroy_qp waits until
                           * only its own is left */
    enum ibv_qp_state state;
    bool sq_sig_all;
    struct ibv_qp_cap cap;
    struct ibv_qp_attr attr; /* attributes set by ibv_modify_qp (access flags,
                              * en_sqd_async_notify, port, IB-only values kept
                              * for ibv_query_qp) */
    uint32_t async_reported; /* async events handed out (ctx->async_lock) */

    /* send queue: ring of cap.max_send_wr entries */
    struct uiw_sqe *sq;
    unsigned sq_cap, sq_head, sq_count;
    uint8_t *inline_buf; /* sq_cap * UIW_MAX_INLINE */
    /* receive queue (unless srq): the ring, rq_head/rq_count and rq_open are
     * under rq_lock (taken inside qp->lock, before a CQ lock), so that
     * ibv_post_recv never waits for the receive path, which holds qp->lock
     * while it drains the socket (as siw's user-mapped RQ ring) */
    struct uiw_rqe *rq;
    unsigned rq_cap, rq_head, rq_count;
    pthread_mutex_t rq_lock;
    bool rq_open; /* state is INIT..SQE: ibv_post_recv appends under rq_lock */

    /* Receiver not ready (qp_rx.c): an untagged message that found no
     * posted receive is held (the socket is not read) until one is posted
     * or the limit expires. rq_hold (under rq_lock) / srq_holding and the
     * srq_hold links (under srq->lock): the receive path waits, the next
     * post arms rnr_kick (0 ms), whose callback resumes the receive path;
     * rnr_limit fires at the limit. Both timers are initialised when the
     * socket is attached (rnr_timers) and finished by ibv_destroy_qp. */
    bool rq_hold;
    bool srq_holding;
    struct uiw_qp *srq_hold_prev, *srq_hold_next;
    bool rnr_timers; /* rnr_kick, rnr_limit initialised */
    struct uiw_timer rnr_kick, rnr_limit;
    /* The initiator's first-FPDU guard (qp_tx.c, docs/INTEROP.md §1): fires
     * when a wake-up may be due; initialised and finished with the
     * receiver-not-ready timers (rnr_timers). */
    struct uiw_timer first_hold;
    bool rnr_retry_set; /* ibv_modify_qp set IBV_QP_RNR_RETRY (qp->lock) */

    /* negotiated connection parameters */
    struct uiw_conn *conn;
    int fd; /* the TCP socket once connected, else -1; owned
             * by the QP from uiw_qp_attach_socket on:
             * ibv_destroy_qp (and a move to RESET) removes it
             * from progress and closes it; an application
             * move to ERR shuts it down (SHUT_RDWR) */
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
    void *rx_state;                /* qp_rx.c private state (current message, staging buffer) */
    void *tx_state;                /* qp_tx.c private state (current FPDU batch) */
    bool want_write;               /* transmission blocked: EPOLLOUT armed */
    uint8_t rx_muted;              /* EPOLLIN off (UIW_MUTE_*): someone else reads it */
    /* poll ownership (qp_dp.c "Poll ownership"), qp->lock */
    uint64_t rx_owned_ns; /* when a busy-polling thread last drove the QP */
    bool rx_owned_listed; /* on the owned list (its lock) */
    struct uiw_qp *rx_own_prev, *rx_own_next;
    bool close_drain; /* disconnected in order: unread bytes discarded at close (cm.c) */
    /* transmit coalescing (qp_tx.c, docs/ENGINE.md "Transmit"), qp->lock */
    uint64_t tx_post_ns;     /* when the latest ibv_post_send returned */
    unsigned tx_streak;      /* posts in a row, each within the window of the last */
    unsigned tx_defer_wrs;   /* WRs posted since the transmitter last ran */
    uint64_t tx_defer_bytes; /* and their payload bytes */
    bool tx_deferred;        /* counted in the CQs' tx_deferred, on the backstop's list */
    struct uiw_qp *tx_defer_prev, *tx_defer_next; /* that list (qp_tx.c) */

    /* Terminate / error */
    bool term_sent, term_received;
    uiw_term_cause term;

    /* live counters (stat.c, include/uiwarp/stat.h): never NULL while the
     * QP exists; updated under lock */
    struct uiw_stat_qp *st;
    pid_t st_owner;
    struct uiw_cap *pcap; /* UIWARP_PCAP handle (pcap_out.h), or NULL */

    /* the process's QP list (qp.c, uiw_qp_foreach) */
    struct uiw_qp *all_prev, *all_next;
};

/* stat.c: a zeroed slot (in the process's stat file when there is one:
 * *owner = its pid, else 0 and the slot is on the heap), NULL only when
 * out of memory; uiw_stat_publish makes it visible to readers once filled */
struct uiw_stat_qp *uiw_stat_alloc(pid_t *owner);
void uiw_stat_publish(struct uiw_stat_qp *s);
void uiw_stat_free(struct uiw_stat_qp *s, pid_t owner);
/* Fill the connection fields of qp->st (addresses, negotiated MPA). */
/* local, peer: the socket's addresses when the caller knows them (cm.c),
 * else NULL (then asked of the socket). */
void uiw_stat_connected(struct uiw_qp *qp, bool active, const struct sockaddr_storage *local,
                        const struct sockaddr_storage *peer);

/* Call fn for every QP of the process (created and not yet destroyed),
 * holding the list lock: fn may take qp->lock (lock order: QP list ->
 * qp->lock); nothing may hold a QP lock and call this. */
void uiw_qp_foreach(void (*fn)(struct uiw_qp *qp, void *arg), void *arg);
/* The QP numbered qp_num in context ctx, with a uiw_qp_get reference
 * (the caller drops it with uiw_qp_put), or NULL: librdmacm's external QP
 * (rdma_connect/rdma_accept with qp_num and no QP on the id, as the
 * kernel's iWARP CM finds it by number). */
struct uiw_qp *uiw_qp_by_num(struct ibv_context *ctx, uint32_t qp_num);
/* ibv_dereg_mr (mem.c), once mr is no longer valid and still has users:
 * every QP whose queued Send/Write holds mr lets go of it (qp_tx.c). Bytes
 * already cut into FPDUs are copied and still go out; a message whose
 * rest was still to be read from mr completes with IBV_WC_LOC_PROT_ERR
 * and a Terminate (the QP goes to ERR). Never waits for the network. */
void uiw_tx_revoke_mr(struct uiw_mr *mr);

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

/* Data path entry points. All are called with qp->lock held (post_recv:
 * qp->rq_lock, see struct uiw_qp), never block,
 * and return 0 or a negative errno. */
int uiw_qp_tx_progress(struct uiw_qp *qp);   /* push queued FPDUs until EAGAIN */
int uiw_qp_rx_progress(struct uiw_qp *qp);   /* read and process until EAGAIN */
int uiw_qp_rx_poll(struct uiw_qp *qp);       /* the same, bounded: for ibv_poll_cq (uiw_cq_drive);
                                              * 0 if poll(2) found the socket empty */
int uiw_qp_rx_wait_drive(struct uiw_qp *qp); /* the same, unbounded: ibv_get_cq_event's spin */
/* the same as uiw_qp_rx_progress, for the epoll events that reported the socket */
int uiw_qp_rx_event(struct uiw_qp *qp, uint32_t events);
/* Payload bytes received straight into place, through the staging buffer,
 * and socket reads so far (zeros before the QP is connected). */
void uiw_qp_rx_stats(struct uiw_qp *qp, uint64_t *in_place, uint64_t *copied, uint64_t *reads);
int uiw_qp_post_send_locked(struct uiw_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int uiw_qp_post_recv_locked(struct uiw_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Connection established (cm.c, after MPA): attach the socket and the
 * negotiated parameters, move to RTS, start progress. */
int uiw_qp_attach_socket(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa);
/* The same for cm.c's own sockets (already non-blocking, with TCP_NODELAY:
 * not set again), and for an initiator guarding against siw's first-FPDU
 * race: wake-up FPDUs from hold_ms after the attach while the peer is
 * silent (qp_tx.c); 0: none. local, peer: the socket's addresses as cm.c
 * knows them (for uiwarp stat), or NULL. */
int uiw_qp_attach_socket_hold(struct uiw_qp *qp, int fd, const uiw_mpa_result *mpa,
                              unsigned hold_ms, const struct sockaddr_storage *local,
                              const struct sockaddr_storage *peer);
/* No more first-FPDU wake-ups (an orderly disconnect, before our FIN).
 * qp->lock held. */
void uiw_qp_tx_end_wakes_locked(struct uiw_qp *qp);
/* The socket reported EOF/RST: flush and move to ERR (or close cleanly if
 * we were disconnecting). qp->lock held. */
void uiw_qp_llp_closed_locked(struct uiw_qp *qp, int err);
/* Free the data path state (rx_state, tx_state) of a QP being destroyed
 * (qp_tx.c); after uiw_progress_del of its socket, without qp->lock. */
void uiw_qp_dp_free(struct uiw_qp *qp);

/* ------------------------------------------------------------------------
 * Progress (progress.c)
 * ---------------------------------------------------------------------- */
/* Register fd with the process-wide progress thread (started on first use).
 * cb runs on the progress thread with the given events (EPOLLIN/OUT/ERR/HUP)
 * and must take the object's lock itself (blocking lock is fine there).
 * events are passed to epoll as given (EPOLLET for edge-triggered). add:
 * -EEXIST if fd is registered. mod: with EPOLLET, a MOD reports a ready fd
 * again (a callback that stopped early re-arms itself that way). All three
 * may be called with object locks held (lock order: object -> progress). */
typedef void (*uiw_progress_cb)(void *obj, uint32_t events);
int uiw_progress_add(int fd, uint32_t events, uiw_progress_cb cb, void *obj);
int uiw_progress_mod(int fd, uint32_t events, uiw_progress_cb cb, void *obj);
/* Takes fd out of the kernel's epoll set but keeps its registration: no
 * event is reported until the next uiw_progress_mod, which puts it back
 * (and, with EPOLLET, reports what is ready by then). For a socket that
 * another thread reads for a while (qp_dp.c "Poll ownership"): while it is
 * in epoll, every arrival runs epoll's wake-up callback in the sender's
 * context, whatever the events asked. 0, -ENOENT if not registered, or
 * epoll_ctl's error (the fd then stays in epoll as it was). Same rules
 * as mod (the fd's owner serialises add, mod, park and del). */
int uiw_progress_park(int fd);
/* Removes fd; on return no callback for obj is running or will run. From
 * another thread it waits for a running callback: do not hold a lock that
 * callback takes. From the progress thread (inside any callback, the fd's
 * own included) it returns at once and the callback is not called again.
 * Call it before closing fd. */
int uiw_progress_del(int fd);
/* Timers of the progress thread: one min-heap drives epoll_wait's timeout
 * (no timerfd per object). A struct uiw_timer lives in its object; init
 * reserves its heap slot (-ENOMEM, or the progress thread's start error),
 * so arm never allocates and cannot fail. cb(obj) runs once on the progress
 * thread per expiry, with no progress lock held. arm (re)schedules ms from
 * now; disarm unqueues without waiting (a callback already started still
 * runs: check your own state under your lock, uiw_timer_pending tells
 * whether it was re-armed meanwhile); fini unqueues, waits for a running
 * callback when called from another thread (same lock rule as
 * uiw_progress_del), and releases the slot; arm after fini is ignored.
 * All may be called with object locks held except fini (from a thread
 * other than the progress thread). */
/* struct uiw_timer: defined above (embedded in struct uiw_qp) */
int uiw_timer_init(struct uiw_timer *t, void (*cb)(void *), void *obj);
void uiw_timer_arm(struct uiw_timer *t, unsigned ms);
void uiw_timer_arm_us(struct uiw_timer *t, uint64_t us);
void uiw_timer_disarm(struct uiw_timer *t);
bool uiw_timer_pending(struct uiw_timer *t);
void uiw_timer_fini(struct uiw_timer *t);
/* Run cb(obj) once on the progress thread after ms milliseconds. cancel:
 * on return cb will not start; from another thread it also waits for a cb
 * that is running (same lock rule as del). */
int uiw_progress_timer(unsigned ms, void (*cb)(void *), void *obj, uint64_t *id);
/* A QP's socket reported data to the progress thread (qp_dp.c): what its
 * spinning goes by (progress.c "Spinning"), not timers. */
void uiw_progress_data_seen(void);
/* ... and it answered a Read or Atomic Request (qp_rx.c) */
void uiw_progress_responder_seen(void);
/* One timer that a busy thread pushes later without waking the progress
 * thread (a timerfd in its epoll set, made with the thread): cb runs on the
 * progress thread when the timer expires. One user: poll ownership
 * (qp_dp.c). uiw_progress_deadman: 0, or -errno (no timerfd: no user). */
int uiw_progress_deadman(void (*cb)(void));
void uiw_progress_deadman_arm(uint64_t ns_from_now);
void uiw_progress_timer_cancel(uint64_t id);
/* Poll-driven progress: called by ibv_poll_cq when its CQ is empty; tries
 * each attached QP (trylock) so a polling application needs no thread
 * hand-off. One read per QP, or (drain: a thread waiting in
 * ibv_get_cq_event, cq.c) until the socket is empty, as the progress
 * thread does. own: the caller polls in a loop; its QPs' sockets leave the
 * progress thread's EPOLLIN while it does (qp_dp.c "Poll ownership").
 * False when it read nothing (a QP's socket was found empty without a
 * read, uiw_qp_rx_poll), so the caller need not look at the CQ again. */
bool uiw_cq_drive(struct uiw_cq *cq, bool drain, bool own);
/* Transmit coalescing: hand the work requests that attached QPs deferred
 * to the transmitter (ibv_poll_cq, ibv_req_notify_cq; trylock per QP). */
void uiw_cq_flush_tx(struct uiw_cq *cq);
/* ... of every QP of the process (ibv_get_cq_event, before it waits) */
void uiw_tx_flush_deferred(void);
/* A QP of the CQ got its socket (qp->lock held): into the CQ's readiness
 * set, if it has one. */
void uiw_cq_drive_add(struct uiw_cq *cq, struct uiw_qp *qp);
/* ... and out of it before the socket is closed (a forked child may keep
 * the socket, and with it the registration, alive) */
void uiw_cq_drive_del(struct uiw_cq *cq, struct uiw_qp *qp);
/* CLOCK_MONOTONIC ns of the last ibv_req_notify_cq on a CQ with a completion
 * channel (cq.c): someone waits for events, the progress thread spins */
extern _Atomic uint64_t uiw_last_arm_ns;
/* ... and of the last sched_yield of a thread busy-polling an empty CQ
 * (cq.c): it gives the CPU away, so the progress thread may spin too */
extern _Atomic uint64_t uiw_last_yield_ns;
/* Threads now spinning in ibv_get_cq_event, driving their channel's CQs
 * themselves (cq.c): the progress thread does not spin meanwhile. */
extern atomic_uint uiw_event_spinners;
/* Waits that ended while spinning (an event came while the waiter drove or
 * looked): for the tests. */
extern atomic_ulong uiw_event_spin_hits;
/* Tests only (test_dp_event_owed): while uiw_test_spin_hold is nonzero, a
 * waiter whose spin ended stops before it leaves the spinners (counted in
 * uiw_test_spin_held), so that events posted meanwhile are owed to it. */
extern atomic_uint uiw_test_spin_hold, uiw_test_spin_held;
/* The QPs whose completions land in cq, each with a reference (uiw_qp_put),
 * into out (at most max): how many there are (none taken if more than max). */
unsigned uiw_cq_qps_get(struct uiw_cq *cq, struct uiw_qp **out, unsigned max);
/* Take the QP's socket out of the progress thread's EPOLLIN (mute) or put
 * it back, which reports data that came meanwhile to it (qp_dp.c). */
void uiw_qp_rx_mute(struct uiw_qp *qp, bool mute);
#define UIW_MUTE_WAITER 1u /* a thread spinning in ibv_get_cq_event (cq.c "Waiting") */
#define UIW_MUTE_POLL   2u /* a thread busy-polling a CQ (qp_dp.c "Poll ownership") */
/* qp->lock held: a polling thread is about to drive the QP. One that
 * keeps polling (take) takes the socket from the progress thread, and any
 * poll keeps it, until no poll came for UIWARP_POLL_OWN_US (qp_dp.c). */
void uiw_qp_poll_own(struct uiw_qp *qp, bool take);
/* cq armed with a channel (no lock held): the QPs of cq that a poller owns
 * go back to the progress thread, which raises the event (qp_dp.c) */
void uiw_cq_unown(struct uiw_cq *cq);
/* qp->lock held: the receive path stopped with data left (its budget): a
 * CQ readiness set reports the socket again */
void uiw_cq_drive_again(struct uiw_cq *cq, struct uiw_qp *qp);

/* ------------------------------------------------------------------------
 * Connections (cm.c, cm_channel.c; private structs in cm_int.h): the
 * internal API librdmacm and the tests use. TCP + MPA connection setup
 * (RFC 5044 §7.1, RFC 6581), RTR, teardown, shaped after rdma_cm events.
 *
 * Policy comes from uiw_config() (read once per process): mpa_rev (1|2),
 * crc (enum uiw_crc_policy values), markers (we want them AND can send
 * them; 0 refuses a peer's M=1, as siw), p2p (initiator: peer-to-peer with
 * an RTR; a responder always honours a P2P Request), rtr (enum uiw_rtr
 * bits: initiator offers, responder supports), mpa_timeout_ms (0 =
 * 10000). IRD/ORD come from the ULP's uiw_conn_param, clamped to
 * UIW_MAX_IRD / UIW_MAX_ORD.
 *
 * Wire discipline. cm.c reads exactly the peer's MPA frame (its 20-byte
 * header, then PD_Length bytes), so every byte after it stays in the socket
 * for the data path: nothing has to be handed over. It sends nothing after
 * its own frame until the peer's frame arrived (siw drops peers that do):
 * the initiator attaches the QP only after the Reply, the responder only
 * after writing its Reply. A responder also drops an initiator whose bytes
 * follow its Request before the Reply was sent (siw's strict check).
 *
 * Threads and locks. Handshakes, timeouts and teardown run on the progress
 * thread (uiw_progress_add on the TCP socket, a struct uiw_timer for the
 * timeouts); accept/reject/disconnect/destroy run in the
 * caller's thread. Lock order: qp->lock -> connection lock -> listener
 * list lock -> channel lock. cm.c never holds a connection lock while it
 * takes qp->lock or calls uiw_qp_attach_socket.
 * qp->conn is written only by cm.c, under qp->lock: set when the QP is
 * given to uiw_cm_connect / uiw_cm_accept, cleared when the connection lets
 * go of it (the connection also holds a uiw_qp_get reference until then).
 *
 * What cm.c needs from the progress thread (progress.c): uiw_progress_del
 * may be called from inside a progress callback, also for the fd whose
 * callback is running (it then returns at once and that callback is not
 * called again), and the same fd may be added again right after (cm.c
 * removes its handshake registration and the data path then adds the
 * socket in uiw_qp_attach_socket, possibly inside that callback).
 * ---------------------------------------------------------------------- */
/* The connection API itself (events, channels, listen, connect, accept,
 * reject, disconnect, destroy) is the engine's narrow interface,
 * iface/uiw_cm.h. */
/* Connection objects alive in the process (tests: nothing leaks). */
int uiw_cm_conn_count(void);
/* Local and peer address of the TCP connection (either may be NULL). */
int uiw_cm_conn_addr(const struct uiw_conn *c, struct sockaddr_storage *local,
                     struct sockaddr_storage *peer);

/* --- Hooks cm.c implements for the other engine files. Each is called with
 * qp->lock held by the caller where stated and takes only the connection
 * and channel locks (never calls back into the QP). --- */

/* qp_rx.c: the first FPDU arrived on a QP attached with mpa->await_rtr
 * (every passive connection; with P2P it is the RTR). cm.c then reports
 * ESTABLISHED for a P2P responder. c = qp->conn; qp->lock held. Calling it
 * for later FPDUs or non-P2P connections is harmless (ignored). */
void uiw_cm_first_fpdu(struct uiw_conn *c);
/* qp_rx.c / qp_tx.c (from uiw_qp_llp_closed_locked): the socket of an
 * attached QP reported EOF (err 0) or an error/RST (negative errno), or the
 * data path dropped the connection after a Terminate (-EPROTO). Call after
 * the QP was flushed and moved to ERR. cm.c sends its FIN (shutdown
 * SHUT_WR) and reports DISCONNECTED (CONNECT_ERROR for a P2P responder
 * still waiting for the RTR). Idempotent. c = qp->conn; qp->lock held. */
void uiw_cm_llp_closed(struct uiw_conn *c, int err);
/* qp.c: ibv_destroy_qp of a QP with qp->conn set, called first (before it
 * waits for other references), without qp->lock. cm.c clears qp->conn,
 * sets SO_LINGER 0 on qp->fd if the connection was still up (the QP's
 * close then sends RST; DISCONNECTED is reported) or fails a pending setup
 * (CONNECT_ERROR -ENODEV), and drops its uiw_qp_get reference. */
void uiw_cm_qp_destroyed(struct uiw_qp *qp);
/* Whether the connection's QP (if still attached) has successful
 * completions its application has not polled yet (src/rdmacm/event.c holds
 * DISCONNECTED back for them). */
bool uiw_cm_conn_unpolled(struct uiw_conn *c);

/* --- What cm.c needs from the data path (qp_tx.c / qp_rx.c / progress.c),
 * in addition to uiw_qp_attach_socket and uiw_qp_llp_closed_locked. ---
 *
 * uiw_qp_attach_socket(qp, fd, mpa) is called by cm.c without qp->lock,
 * with qp->conn already set, once the MPA exchange is complete (the socket
 * then holds nothing but FPDU-stream bytes; cm.c has removed it from the
 * progress thread). On success the fd belongs to the QP (see qp->fd); on
 * failure nothing was attached and cm.c closes it. Besides attaching:
 *  - mpa->send_rtr (active P2P): the RTR is the first FPDU on the wire,
 *    before any WR can be sent: mpa->rtr == UIW_RTR_WRITE: zero-length RDMA
 *    Write, STag 1, TO 0, L; UIW_RTR_READ: Read Request on QN 1 (MSN 1, MO
 *    0) with sink STag 0 / TO 0, source STag 1 / TO 0, size 0, whose
 *    zero-length Read Response (sink STag 0) is consumed without placement;
 *    UIW_RTR_SEND: zero-length Send on QN 0 (MSN 1). The RTR uses no SQ
 *    slot, no ORQ credit visible to the ULP and produces no completion.
 *  - mpa->await_rtr (every passive connection): send nothing, Read
 *    Responses included, until the first FPDU was received and validated
 *    (RFC 5044 §7.1.2 rule 4, RFC 6581 §5), then call
 *    uiw_cm_first_fpdu(qp->conn). A received RTR is consumed silently:
 *    zero-length Write (STag not checked), zero-length Read Request
 *    (answered with a zero-length Read Response to its sink STag),
 *    zero-length Send (consumes no Receive).
 *  - qp->ird / qp->ord from mpa->ird / mpa->ord.
 * After an orderly uiw_cm_disconnect (cm.c: shutdown(qp->fd, SHUT_WR), then
 * uiw_qp_to_error_locked) the data path keeps reading until EOF or reports
 * EOF at once (a QP that shut its read side), in both cases through
 * uiw_qp_llp_closed_locked -> uiw_cm_llp_closed; cm.c falls back to its
 * timeout (DISCONNECTED -ETIMEDOUT) if that never comes. To abort, cm.c
 * sets SO_LINGER 0 and disconnects the socket (connect AF_UNSPEC: RST)
 * under qp->lock without closing it; the data path then sees an error/EOF.
 */

#ifdef __cplusplus
}
#endif
#endif /* UIWARP_ENGINE_H */
