/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp's librdmacm.so.1: the rdma_cm API of rdma-core (RDMACM_1.0 ... 1.3)
 * on top of the engine's connection manager (uiw_cm_*, the engine's
 * narrow interface src/engine/iface/uiw_cm.h), for programs built
 * against Debian's librdmacm-dev.
 *
 * Files:
 *   event.c     event channels, the event router thread, rdma_get_cm_event,
 *               rdma_ack_cm_event, translation of engine events
 *   id.c        ids: create/destroy, bind, resolve, listen, connect,
 *               accept, reject, disconnect, migrate, options
 *   dev.c       address -> interface -> uiwarp device, one verbs context
 *               and default PD per device per process, rdma_get_devices
 *   qp.c        rdma_create_qp(_ex), rdma_destroy_qp, SRQs,
 *               rdma_init_qp_attr
 *   ep.c        rdma_create_ep, rdma_destroy_ep, rdma_get_request
 *   addrinfo.c  rdma_getaddrinfo, rdma_freeaddrinfo
 *   unsupported.c  multicast, ECE, rsockets: clean failures
 *
 * Events. The engine queues its events (uiw_cm_event) on one process-wide
 * engine channel. A router thread moves each to the rdma event channel of
 * the id it belongs to (the `user` pointer given to the engine is the
 * rcm_id), so every rdma_event_channel's fd is readable exactly while that
 * channel has events, ids can migrate between channels, and the library's
 * own events (ADDR_RESOLVED, ROUTE_RESOLVED, ADDR_ERROR) share the same
 * queue. Engine events are translated to rdma_cm events when the
 * application takes them (rdma_get_cm_event); a CONNECT_REQUEST creates
 * the new id then, as rdma-core does. CONNECT_REQUEST, ESTABLISHED and
 * REJECTED usually skip the router: the engine channel's sink
 * (route_direct) puts them on the id's channel from the engine thread
 * that raises them, when the engine queue is empty and every lock it
 * needs is free (trylock), which keeps the order.
 *
 * Locks. rcm_route_lock serialises the router with the calls that create
 * or destroy engine objects of an id (connect, listen, destroy) and with
 * migration, so an engine event never names an id that is gone: destroy
 * tears down the engine object (which drops its queued engine events)
 * under the lock, then drops the id's events from its rdma channel.
 * Order: rcm_route_lock -> channel lock -> id lock. Engine calls may be
 * made with any of them held (the engine never calls back into us).
 */
#ifndef UIWARP_RDMACM_INT_H
#define UIWARP_RDMACM_INT_H

#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdbool.h>
#include <stdint.h>

#include "uiw_cm.h"

/* Return -1 with errno set, as every rdma_* call reports failure. */
static inline int rcm_err(int e)
{
    errno = e;
    return -1;
}

/* ------------------------------------------------------------------------
 * Devices (dev.c)
 * ---------------------------------------------------------------------- */
struct rcm_dev {
    struct ibv_device *ibdev;
    struct ibv_context *verbs; /* opened once, kept for the process */
    struct ibv_pd *pd;         /* default PD (rdma_create_qp/ep without one) */
    uint8_t max_resp_res;      /* max_qp_rd_atom: our IRD */
    uint8_t max_init_depth;    /* max_qp_init_rd_atom: our ORD */
    union ibv_gid gid;
    struct rcm_dev *next;
};

/* The device serving a local address: 0, -EADDRNOTAVAIL (not an address
 * of this host) or -ENODEV (no uiwarp device for its interface), -errno. */
int rcm_dev_for_addr(const struct sockaddr *sa, struct rcm_dev **out);
/* The source address the host would use to reach dst (port 0). */
int rcm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src);
/* The device of an opened context of ours (NULL if none). */
struct rcm_dev *rcm_dev_of_verbs(const struct ibv_context *verbs);

/* Address helpers */
socklen_t rcm_sa_len(const struct sockaddr *sa);
/* *ss = *sa, the rest zero: its length, or 0 (ss all zero) when sa is not
 * IPv4 or IPv6. */
socklen_t rcm_sa_copy(struct sockaddr_storage *ss, const struct sockaddr *sa);
bool rcm_sa_is_any(const struct sockaddr *sa);
bool rcm_sa_is_loopback(const struct sockaddr *sa);
/* Turn an IPv4-mapped IPv6 address into AF_INET (in place). */
void rcm_sa_unmap(struct sockaddr_storage *ss);
uint16_t rcm_sa_port(const struct sockaddr *sa); /* network order */
void rcm_sa_set_port(struct sockaddr *sa, uint16_t port_be);

/* ------------------------------------------------------------------------
 * Channels and events (event.c)
 * ---------------------------------------------------------------------- */
struct rcm_id;

/* A queued event: the library's own (type/status) or an engine event. */
struct rcm_qev {
    struct rcm_qev *next;
    struct rcm_id *id; /* the id it is for (CONNECT_REQUEST: the listener) */
    bool engine;
    enum rdma_cm_event_type type; /* !engine */
    int status;                   /* !engine */
    struct uiw_cm_event uev;      /* engine */
    uint64_t due_ms;              /* a held-back DISCONNECTED: deliver by then */
};

struct rcm_channel {
    struct rdma_event_channel pub; /* fd: readable while events are queued (event.c) */
    int wr;                        /* the other end of pub.fd's socket pair */
    pthread_mutex_t lock;
    struct rcm_qev *head, *tail;
    bool armed;                /* the wake-up byte is in the socket */
    unsigned waiters;          /* threads blocked in rdma_get_cm_event */
    bool dead;                 /* destroyed (rdma_destroy_event_channel) */
    bool dead_nonblock;        /* O_NONBLOCK was set on fd when it was destroyed */
    struct rcm_channel *grave; /* the list of destroyed channels kept (event.c) */
};

static inline struct rcm_channel *to_rch(struct rdma_event_channel *c)
{
    return (struct rcm_channel *)c;
}

/* An event handed to the application. */
struct rcm_event {
    struct rdma_cm_event ev;
    struct rcm_id *owner; /* whose ack count it bumps (CONNECT_REQUEST: the listener) */
    uint8_t private_data[UIW_CM_PD_MAX];
};

extern pthread_mutex_t rcm_route_lock;
extern struct uiw_cm_channel *rcm_uch; /* the engine channel every id uses */

/* Start the engine channel and the router thread (once). 0 or -errno. */
int rcm_init(void);
struct rcm_channel *rcm_channel_new(void);
void rcm_channel_free(struct rcm_channel *ch);
/* Whether events are queued on ch (no system call: rsockets' poll loop). */
bool rcm_channel_pending(struct rcm_channel *ch);
/* Queue one of the library's own events for id (takes the locks). */
void rcm_queue_local(struct rcm_id *id, enum rdma_cm_event_type type, int status);
/* Drop every event queued for id on its channel (destroy). Engine
 * connections of CONNECT_REQUESTs still queued for a listener are
 * destroyed. */
void rcm_purge_id(struct rcm_id *id);
/* Move id's queued events to `to` and make it id's channel (migrate);
 * called with rcm_route_lock held. */
void rcm_move_events(struct rcm_id *id, struct rcm_channel *to);
/* Refused connects. A server that publishes its port before rdma_listen
 * (qperf does) races its client; the kernel's CM loses that race rarely
 * because every call is a system call, uiwarp's client is fast enough to
 * lose it often. So a connect refused by TCP (RST: nobody listening yet)
 * within UIWARP_RDMACM_RETRY_MS (default 100, 0 = never) of rdma_connect
 * is tried again after 1, 2, 4 ... 16 ms before UNREACHABLE is reported.
 * Both under rcm_route_lock: */
/* Drop the DISCONNECTED events held back for x (destroy; rcm_route_lock). */
void rcm_held_cancel(struct rcm_id *x);
/* Forget a pending retry of x (destroy); drops the QP reference. */
void rcm_retry_cancel(struct rcm_id *x);
/* The QP a pending retry of x would use is being destroyed: stop trying
 * and report the refusal the retry stood for (the attempt ends). */
void rcm_retry_end(struct rcm_id *x);
uint64_t rcm_now_ms(void);

/* Synchronous ids: wait for the id's next event (kept in id->event until
 * the next call) and turn a failure into -1/errno, as rdma-core. */
int rcm_complete(struct rcm_id *id);

/* ------------------------------------------------------------------------
 * Ids (id.c)
 * ---------------------------------------------------------------------- */
enum rcm_state {
    RCM_IDLE = 0,
    RCM_BOUND,
    RCM_ADDR_RESOLVED,
    RCM_ROUTE_RESOLVED,
    RCM_LISTEN,
    RCM_CONNECTING, /* active: uiw_cm_connect done, waiting for the outcome */
    RCM_REQ,        /* passive: CONNECT_REQUEST delivered, accept/reject pending */
    RCM_ACCEPTING,
    RCM_CONNECTED,
    RCM_DISCONNECTED,
    RCM_REJECTED,
    RCM_FAILED, /* unreachable, connect error, rejected by the peer */
    RCM_DEAD,
};

struct rcm_id {
    struct rdma_cm_id id; /* first: what applications see */
    pthread_mutex_t lock; /* state and the fields below */
    pthread_cond_t cond;  /* ev_acked moved, calls dropped */
    struct rcm_channel *ch;
    bool sync; /* created without a channel: ch is private */
    enum rcm_state state;
    unsigned ev_reported, ev_acked;
    unsigned calls; /* rdma_connect calls past their first event (x->lock): destroy waits */
    struct rcm_dev *dev;
    int resv_fd;      /* TCP socket reserving the bound address/port, or -1 */
    unsigned nqueued; /* events for it on its channel's queue (that channel's lock) */
    bool bound;       /* route.addr.src is set */
    struct uiw_listener *listener;
    struct uiw_conn *conn;
    /* passive: the request's values in rdma_cm terms (defaults for accept) */
    uint8_t req_init_depth, req_resp_res;
    struct ibv_qp_init_attr *qp_init_attr; /* passive rdma_create_ep */
    /* options */
    bool reuseaddr;
    bool afonly_set, afonly; /* RDMA_OPTION_ID_AFONLY */
    bool tos_set;
    uint8_t tos;
    unsigned peer_timeout_ms; /* RDMA_OPTION_ID_ACK_TIMEOUT (0: UIWARP_PEER_TIMEOUT) */
    /* active: what rdma_connect asked for, to try again when the first
     * attempts are refused (see rcm_retry_refused) */
    struct ibv_qp *conn_qp;
    bool conn_qp_gone; /* rcm_route_lock: destroyed since; no more tries */
    struct uiw_conn_param conn_param;
    uint8_t conn_pd[0xFF];
    struct sockaddr_storage conn_src, conn_dst;
    bool conn_src_auto;  /* conn_src's port 0 at rdma_connect: connect() picks one */
    uint64_t connect_ms; /* when rdma_connect was called */
    /* rcm_route_lock: a refused connect waiting to be tried again */
    bool retry_pending;
    uint64_t retry_due_ms;
    unsigned retry_delay_ms;
    enum rdma_cm_event_type retry_event; /* the refusal being retried */
    int retry_status;
    struct rcm_id *retry_next;
};

static inline struct rcm_id *to_rid(struct rdma_cm_id *id)
{
    return (struct rcm_id *)id;
}

/* Allocate an id on ch (NULL: a private channel, sync). */
int rcm_id_alloc(struct rcm_channel *ch, void *context, enum rdma_port_space ps,
                 enum ibv_qp_type qpt, struct rcm_id **out);
/* Give the id a device (verbs, port, default PD). id->lock held or the id
 * not yet shared. */
void rcm_id_attach_dev(struct rcm_id *x, struct rcm_dev *dev);

#endif
