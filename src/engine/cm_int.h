/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Connection manager internals shared by cm.c and cm_channel.c. The API and
 * the locking rules are in engine.h ("Connections").
 */
#ifndef UIWARP_CM_INT_H
#define UIWARP_CM_INT_H

#include "engine.h"

/* Connection states (struct uiw_conn.state). */
enum uiw_conn_state {
    UIW_CS_CONNECTING = 1, /* active: TCP connect in progress (EPOLLOUT) */
    UIW_CS_WAIT_REP,       /* active: Request sent, reading the Reply */
    UIW_CS_WAIT_REQ,       /* passive: reading the Request */
    UIW_CS_REQ_RCVD,       /* passive: CONNECT_REQUEST raised, the ULP decides */
    UIW_CS_ACCEPTING,      /* passive: accept/reject in progress (caller's thread) */
    UIW_CS_WAIT_RTR,       /* passive P2P: attached, waiting for the first FPDU */
    UIW_CS_ESTABLISHED,
    UIW_CS_DISCONNECTING, /* our FIN sent, waiting for the peer's */
    UIW_CS_REJECTED,      /* passive: Reject sent, waiting for the initiator to close */
    UIW_CS_CLOSED,        /* over; the object waits for uiw_cm_conn_destroy */
    UIW_CS_DEAD,          /* being destroyed */
};

struct uiw_cm_ev_node {
    struct uiw_cm_event ev;
    struct uiw_cm_ev_node *next;
};

struct uiw_cm_channel {
    pthread_mutex_t lock;
    int rd, wr; /* pipe: one byte in it exactly while the queue is non-empty */
    struct uiw_cm_ev_node *head, *tail;
    uiw_cm_sink_fn sink; /* uiw_cm_channel_set_sink */
    void *sink_arg;
};

struct uiw_listener {
    int fd;
    bool reg; /* registered with the progress thread */
    bool dying;
    struct uiw_cm_channel *ch;
    struct uiw_context *ctx;
    void *user;
    struct sockaddr_storage addr;
    struct uiw_conn *conns; /* passive connections not yet handed to the ULP (cm_list_lock) */
    struct uiw_timer timer; /* re-arms fd after a resource failure of accept4 */
    unsigned backoff_ms;    /* progress thread only */
};

/* What a connection needs only until it is established: the MPA
 * negotiation, both frames and our private data (3.7 KiB of the 4.3 KiB a
 * connection took). Freed when ESTABLISHED is posted, so a live connection
 * keeps 0.6 KiB and the next setup reuses the block from malloc instead of
 * touching new pages (docs/PERFORMANCE.md, 2026-11-27 (setup3)). */
struct uiw_conn_mpa {
    uiw_mpa_neg neg;
    uint8_t pd[UIW_MPA_MAX_PD];         /* our private data (neg keeps a pointer) */
    uint8_t txframe[UIW_MPA_MAX_FRAME]; /* active: our Request, sent once TCP is up */
    uint8_t rbuf[UIW_MPA_MAX_FRAME];    /* the peer's frame, read exactly */
    uiw_mpa_frame req;                  /* passive: the decoded Request */
};

struct uiw_conn {
    pthread_mutex_t lock;
    pthread_cond_t idle; /* signalled when busy drops to 0 */
    atomic_int refs;
    unsigned busy; /* operations running without the lock (attach, abort...) */
    uint8_t state; /* enum uiw_conn_state */
    bool active;
    bool fd_reg;          /* fd registered with the progress thread by cm.c */
    bool timer_on;        /* timer armed and not yet acted on (c->lock) */
    bool posted;          /* passive: CONNECT_REQUEST queued: the ULP owns c */
    bool attached;        /* fd handed to qp (uiw_qp_attach_socket succeeded) */
    bool had_qp;          /* a QP was given to connect/accept */
    bool pcap_tried;      /* UIWARP_PCAP handle looked for (conn_cap) */
    uint64_t born_ns;     /* passive: accepted at (uiw_now_ns; evict_waiting) */
    struct uiw_cap *pcap; /* UIWARP_PCAP handle until the QP takes the socket */
    /* channel lock */
    bool ev_dead;           /* no more events may be queued (destroy) */
    bool popped;            /* its CONNECT_REQUEST was retrieved: the ULP owns it */
    int fd;                 /* the socket while cm.c owns it, else -1 */
    struct uiw_timer timer; /* MPA / RTR / disconnect timeouts (progress.c's heap) */
    unsigned timeout_ms;
    struct uiw_cm_channel *ch;
    void *user;
    struct uiw_context *ctx;
    struct uiw_qp *qp; /* with a uiw_qp_get reference */
    /* cm_list_lock */
    struct uiw_listener *listener;
    struct uiw_conn *lnext, **lpprev; /* lpprev: the pointer to us (O(1) unlink) */
    struct sockaddr_storage local, peer;
    /* negotiation */
    struct uiw_conn_mpa *m; /* until ESTABLISHED is posted (conn_mpa_done), then NULL */
    uint16_t pd_len;
    uint16_t txframe_len;
    /* active: what a revision 1 retry needs (active_rev1_retry) */
    struct uiw_conn_param param; /* private_data: NULL (pd above) */
    bool rev1_tried;             /* the Request went out again at revision 1 */
    bool early_close;            /* the data path reported EOF while we were attaching */
    int early_err;
    uint16_t rhave;
};

/* cm_channel.c */
/* Queue a copy of ev for ev->conn (dropped if the connection is being
 * destroyed). 0, or -ENOMEM (nothing queued). Takes ch->lock. */
int uiw_cm_queue(struct uiw_cm_channel *ch, const struct uiw_cm_event *ev);
/* Drop every queued event of c and refuse new ones. Returns true when c was
 * already retrieved through a CONNECT_REQUEST (c->popped). Takes ch->lock. */
bool uiw_cm_purge(struct uiw_cm_channel *ch, struct uiw_conn *c);
/* Listener teardown: true (and c marked ev_dead, its events dropped) when
 * the ULP has not retrieved c's CONNECT_REQUEST, so the listener destroys
 * it; false when the ULP owns c. Takes ch->lock. */
bool uiw_cm_claim_unpopped(struct uiw_cm_channel *ch, struct uiw_conn *c);

#endif
