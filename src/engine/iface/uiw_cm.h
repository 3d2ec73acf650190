/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The narrow interface of the engine (libibverbs.so.1) for uiwarp's other
 * libraries and programs: librdmacm.so.1 (src/rdmacm), the demo and
 * bench_rdma. It is everything libibverbs.so.1 exports beyond rdma-core's
 * ibv_* ABI (version UIWARP_PRIVATE_1, src/engine/libibverbs.map;
 * tests/test_abi_symbols.sh checks the list). Engine objects are opaque
 * here: verbs objects are rdma-core's public types, and connections,
 * listeners and channels are handles. Nothing in here is installed for
 * other programs.
 *
 * Connections: TCP + MPA connection setup (RFC 5044 §7.1, RFC 6581), RTR,
 * teardown, shaped after rdma_cm events; the implementation and its
 * threading rules are in src/engine/cm.c and engine.h. Policy comes from
 * the UIWARP_* variables (docs/man/uiwarp.7); IRD/ORD from the ULP's
 * uiw_conn_param, clamped to the device's max_qp_rd_atom /
 * max_qp_init_rd_atom.
 */
#ifndef UIWARP_IFACE_UIW_CM_H
#define UIWARP_IFACE_UIW_CM_H

#include <infiniband/verbs.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef UIW_EXPORT
#define UIW_EXPORT __attribute__((visibility("default")))
#endif

/* Largest ULP private data in an MPA frame (RFC 5044 §7.1), and the
 * RFC 6581 IRD/ORD value meaning "left to the ULP". */
#define UIW_CM_PD_MAX       512
#define UIW_CM_IRD_ORD_AUTO 0x3FFF
/* ULP private data that fits an MPA frame of revision rev (RFC 6581's 4
 * IRD/ORD bytes are part of it with Rev 2). Linux siw accepts only 256
 * including those 4 bytes: send it at most 252. */
#define UIW_CM_MAX_PD(rev) ((rev) >= 2 ? UIW_CM_PD_MAX - 4 : UIW_CM_PD_MAX)

enum uiw_cm_event_type {
    UIW_CM_CONNECT_REQUEST = 1, /* passive: a peer's MPA Request arrived; ev.conn is new
                                 * and must be accepted, rejected or destroyed */
    UIW_CM_ESTABLISHED,         /* both sides: QP in RTS (passive P2P: after the first FPDU);
                                 * active: carries the Reply's private data */
    UIW_CM_REJECTED,            /* active: peer rejected (R=1): -ECONNREFUSED, private data
                                 * and IRD/ORD of the Reject */
    UIW_CM_UNREACHABLE,         /* active: TCP connect failed (-ECONNREFUSED, -ETIMEDOUT,
                                 * -ENETUNREACH, ...) */
    UIW_CM_CONNECT_ERROR,       /* MPA failure: -ETIMEDOUT (no Reply, passive P2P: no RTR
                                 * within the timeout), -EPROTO (malformed frame, wrong key,
                                 * revision), -EOPNOTSUPP (markers, RTR), -ENOBUFS (IRD),
                                 * -ECONNRESET (peer closed during setup), -ENODEV (QP
                                 * destroyed during setup), or the QP's attach error */
    UIW_CM_DISCONNECTED,        /* peer closed (FIN: status 0; RST: -ECONNRESET), our orderly
                                 * close completed (0; -ETIMEDOUT: no FIN within the MPA
                                 * timeout), the QP was destroyed (-ECONNABORTED) */
};

struct uiw_conn; /* a connection (opaque) */

struct uiw_conn_param {
    const void *private_data;
    uint16_t private_data_len; /* <= UIW_CM_MAX_PD(rev) */
    uint16_t ird;              /* responder_resources */
    uint16_t ord;              /* initiator_depth */
    /* Dead-peer timeout of this connection's socket in ms (docs/ENGINE.md
     * "Dead peers"): 0 = UIWARP_PEER_TIMEOUT, UIW_PEER_TIMEOUT_OFF = none
     * (rdma_set_option RDMA_OPTION_ID_ACK_TIMEOUT sets it). */
    unsigned peer_timeout_ms;
    /* rdma_set_option RDMA_OPTION_ID_TOS: the socket's IP_TOS (IPv4) or
     * IPV6_TCLASS (IPv6), when tos_set */
    bool tos_set;
    uint8_t tos;
    /* uiw_cm_connect only, optional: called once on the calling thread,
     * with user and the connection, after the socket's connect() and
     * before the first moment the connection can raise an event (no lock
     * of cm.c held). rdmacm gives the id its connection there, so that
     * events find it without a lock held around the whole call. Should
     * uiw_cm_connect then fail (return < 0), the connection is gone and
     * nothing was posted. */
    void (*before_events)(void *user, struct uiw_conn *c);
};
#define UIW_PEER_TIMEOUT_OFF UINT_MAX

struct uiw_listener; /* a listening socket (opaque) */

struct uiw_cm_event {
    enum uiw_cm_event_type type;
    int status;                    /* 0 or negative errno (see the types above) */
    struct uiw_conn *conn;         /* the connection (CONNECT_REQUEST: the new one) */
    struct uiw_listener *listener; /* CONNECT_REQUEST: the listener it came to */
    void *user;                    /* CONNECT_REQUEST: the listener's user pointer; else the one
                                    * given to uiw_cm_connect / uiw_cm_accept */
    /* The peer's RFC 6581 IRD/ORD words (14 bits, as sent;
     * UIW_CM_IRD_ORD_AUTO = "left to the ULP"), valid when `enhanced`.
     * rdma_cm terms, from our side: initiator_depth <= peer_ird,
     * responder_resources >= peer_ord. */
    bool enhanced;
    uint16_t peer_ird, peer_ord;
    /* CONNECT_REQUEST: what the Request asks for. ESTABLISHED: what is in
     * use (ird/ord = our values after negotiation). */
    uint8_t mpa_rev;
    bool crc;                    /* CONNECT_REQUEST: C of the Request */
    bool markers_rx, markers_tx; /* CONNECT_REQUEST: markers_tx = M of the Request */
    bool p2p;
    uint8_t rtr; /* RTR types (write 1, read 2, send 4); CONNECT_REQUEST: those offered */
    uint16_t ird, ord;
    /* CONNECT_REQUEST: the Request's, ESTABLISHED (active): the Reply's,
     * REJECTED: the Reject's ULP private data (RFC 6581 words removed) */
    uint16_t private_data_len;
    uint8_t private_data[UIW_CM_PD_MAX];
    struct sockaddr_storage local, peer;
};

/* Events are delivered through a channel: a pollable fd plus a queue. The
 * fd is readable exactly while an event is queued. */
struct uiw_cm_channel;
struct uiw_cm_channel *uiw_cm_channel_create(void);
/* Destroy listeners and connections that use the channel first; events
 * still queued are dropped. */
void uiw_cm_channel_destroy(struct uiw_cm_channel *ch);
int uiw_cm_channel_fd(const struct uiw_cm_channel *ch);
/* 0 with *ev filled, or -EAGAIN when the channel fd is O_NONBLOCK and no
 * event is queued (else it blocks), -EINTR, -EINVAL. */
int uiw_cm_get_event(struct uiw_cm_channel *ch, struct uiw_cm_event *ev);
/* A sink takes events straight from the thread that raises them (the
 * progress thread, or the caller of uiw_cm_accept/connect), without a
 * trip through the queue and its fd, when the queue is empty (so events
 * keep their order). It is called with the channel's lock and possibly the
 * connection's held: it must not block on a lock (trylock only), call into
 * the engine, or keep ev. It returns true when it took ev (a
 * CONNECT_REQUEST's connection then belongs to the taker, as if popped by
 * uiw_cm_get_event), false to have it queued as usual. NULL: no sink. Set
 * it before the channel is used. */
typedef bool (*uiw_cm_sink_fn)(const struct uiw_cm_event *ev, void *arg);
void uiw_cm_channel_set_sink(struct uiw_cm_channel *ch, uiw_cm_sink_fn fn, void *arg);

/* Listen on addr (IPv4 or IPv6, wildcard and port 0 allowed; SO_REUSEADDR).
 * ctx (a uiwarp context) may be NULL. Incoming connections are accepted by
 * the progress thread; one whose Request does not arrive within the MPA
 * timeout, is malformed or is followed by early bytes is closed silently
 * (as siw); one the MPA layer must refuse (markers we cannot send, no RTR
 * type) gets a Reject (R=1) without bothering the ULP. Every other Request
 * raises CONNECT_REQUEST. */
int uiw_cm_listen(struct ibv_context *ctx, const struct sockaddr *addr, int backlog,
                  struct uiw_cm_channel *ch, void *user, struct uiw_listener **out);
/* uiw_cm_listen with rdma_set_option RDMA_OPTION_ID_AFONLY: v6only 1 or 0
 * sets IPV6_V6ONLY on an IPv6 listener (-1: the system's default). */
int uiw_cm_listen_af(struct ibv_context *ctx, const struct sockaddr *addr, int backlog, int v6only,
                     struct uiw_cm_channel *ch, void *user, struct uiw_listener **out);
/* The bound address (the port chosen when addr had port 0). */
int uiw_cm_listener_addr(const struct uiw_listener *l, struct sockaddr_storage *addr);
/* Also destroys connections whose CONNECT_REQUEST was not yet retrieved. */
void uiw_cm_listener_destroy(struct uiw_listener *l);

/* Active side: non-blocking TCP connect (bound to src's address when
 * given; with port 0 connect() picks the port, without the port search of
 * bind(), and it is written back into *src before this returns), MPA
 * Request with p, Reply within the MPA timeout, attach qp (a uiwarp RC QP).
 * Returns 0 (then exactly one of ESTABLISHED / REJECTED / UNREACHABLE /
 * CONNECT_ERROR follows on ch) or -EINVAL, -EAFNOSUPPORT, -EMSGSIZE
 * (private data), -EBUSY (qp already has a connection), -errno of
 * socket/bind. qp may be NULL (MPA only, for tests and tools; not with
 * UIWARP_P2P): the connection then carries no FPDUs, bytes received after
 * the Reply are discarded. A failed Reply check that RFC 6581 §9 wants
 * reported (insufficient IRD, no matching RTR) sends an LLP/MPA Terminate
 * before the close. */
int uiw_cm_connect(struct ibv_qp *qp, struct sockaddr *src, const struct sockaddr *dst,
                   const struct uiw_conn_param *p, struct uiw_cm_channel *ch, void *user,
                   struct uiw_conn **out);
/* Passive side, after CONNECT_REQUEST: send the Reply (IRD/ORD from p) and
 * attach qp (NULL: MPA only, refused with -EINVAL for a P2P Request).
 * ESTABLISHED follows at once, or with P2P after the initiator's first
 * FPDU (CONNECT_ERROR -ETIMEDOUT if it does not come within the MPA
 * timeout). Returns 0, -EINVAL (wrong state), -EMSGSIZE, -EBUSY, -EPROTO
 * (initiator sent bytes before our Reply), -ECONNRESET (peer gone), or the
 * QP's attach error (the connection is then closed). */
int uiw_cm_accept(struct uiw_conn *c, struct ibv_qp *qp, const struct uiw_conn_param *p,
                  void *user);
/* Passive side, after CONNECT_REQUEST: Reject (R=1) carrying pd, then
 * close once the initiator has closed (or after the MPA timeout). No
 * further event. */
int uiw_cm_reject(struct uiw_conn *c, const void *pd, uint16_t pd_len);
/* Orderly close: TCP FIN (shutdown SHUT_WR), the QP moved to ERR
 * (outstanding WRs flushed); DISCONNECTED when the data path reports EOF
 * (the peer's FIN: status 0; RST: -ECONNRESET) or after the MPA timeout
 * (-ETIMEDOUT, then RST). The peer, on our FIN, gets DISCONNECTED and
 * answers with its own FIN at once. No Terminate (as siw). 0 also when
 * already closed; -ENOTCONN before ESTABLISHED (destroy cancels). */
int uiw_cm_disconnect(struct uiw_conn *c);
/* Free the connection: queued events for it are dropped; if the
 * connection was still up the TCP connection is aborted (RST) and the QP
 * moved to ERR; the QP (if any) is let go (the socket stays the QP's until
 * ibv_destroy_qp). */
void uiw_cm_conn_destroy(struct uiw_conn *c);
/* Whether the connection's QP (if still attached) has successful
 * completions its application has not polled yet (src/rdmacm/event.c holds
 * DISCONNECTED back for them). */
bool uiw_cm_conn_unpolled(struct uiw_conn *c);

/* Keep a uiwarp QP's memory alive past ibv_destroy_qp (a reference), and
 * let it go. */
void uiw_cm_qp_hold(struct ibv_qp *qp);
/* The QP numbered qp_num in context ctx, held (uiw_cm_qp_release), or
 * NULL: an external QP (rdma_connect/rdma_accept with qp_num and no QP on
 * the id, as the kernel's iWARP CM finds it by number). */
struct ibv_qp *uiw_cm_qp_by_num(struct ibv_context *ctx, uint32_t qp_num);
void uiw_cm_qp_release(struct ibv_qp *qp);

/* A one-shot timer on the engine's progress thread: cb(obj) in ms
 * milliseconds; *id identifies it for uiw_progress_timer_cancel. 0 or a
 * negative errno. */
int uiw_progress_timer(unsigned ms, void (*cb)(void *), void *obj, uint64_t *id);

/* The engine's log (stderr, "uiwarp: " prefix) and its UIWARP_DEBUG level. */
void uiw_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int uiw_debug_level(void);
/* UIWARP_PROGRESS_SPIN_US as the engine read it (default 200): how long a
 * waiter spins before it sleeps (rsockets' waits follow it). */
unsigned uiw_progress_spin_us(void);
#define uiw_dbg(level, ...)                                                                        \
    do {                                                                                           \
        if (uiw_debug_level() >= (level))                                                          \
            uiw_log(__VA_ARGS__);                                                                  \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif /* UIWARP_IFACE_UIW_CM_H */
