/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The connection manager (iw_cm callbacks) and the data path of a uiwarp
 * device (docs/KERNEL.md, phase 3), on kernel TCP sockets, with the wire
 * core's MPA negotiation (uiw_mpa_neg_*), transmit segmenter (uiw_tx_*)
 * and receive parser (uiw_rx_feed).
 *
 * One endpoint (struct uiw_ep) per listening socket and per connection.
 * Everything an endpoint does runs in its work item on the module's
 * workqueue, under ep->mu: the socket callbacks (sk_data_ready,
 * sk_write_space, sk_state_change) and the verbs (post_send, post_recv,
 * modify_qp to SQD or ERR) only queue it, so nothing runs while a
 * connection is idle. Sockets are non-blocking (the active side's
 * connect() too, bounded by connect_timeout_ms), except for the MPA
 * frames, which the work item sends whole. Every connection socket has TCP
 * keepalive and a user timeout (peer_timeout_ms, sock_dead_peer): a peer
 * gone silent fails it with ETIMEDOUT, which ends the connection.
 *
 * Wire choices as the userspace engine's (docs/ENGINE.md "Connections",
 * "Operations and their wire mapping"): MPA revision 2 with the RFC 6581
 * IRD/ORD words, CRC when either side asks (module parameter mpa_crc:
 * 0 never ask, 1 = the default: use it if the peer asks, 2 ask), no
 * markers, peer-to-peer as initiator (RFC 6581: A with the Write and Read
 * RTR offered, module parameters mpa_p2p and mpa_rtr; the zero-length RTR
 * the responder chose goes out first), either mode as responder (the
 * responder sends no FPDU before the initiator's first, RFC 5044 §7.1.2).
 * Send / Send with Invalidate on QN 0,
 * RDMA Write tagged, RDMA Read as a Read Request on QN 1 answered by a
 * tagged Read Response to the requester's sink STag.
 *
 * References on an endpoint (ep->ref): its socket's callbacks (until they
 * are restored), each queued work item, the QP it is attached to
 * (qp->ep), iw_cm's CONNECT_REQUEST (provider_data) until accept or
 * reject, the waiters list of the QP's SRQ while a Send waits there for a
 * receive, and the listener a child was accepted from.
 *
 * Locks: ep->mu (a mutex: the work item, accept, reject, destroy_listen,
 * destroy_qp), then qp->lock, then cq->lock / the device's mr_lock.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/in.h>
#include <linux/in6.h>
#include <linux/module.h>
#include <linux/net.h>
#include <linux/slab.h>
#include <linux/tcp.h>
#include <linux/workqueue.h>
#include <net/sock.h>
#include <net/tcp.h>
#include <rdma/iw_cm.h>

#include "uiw_dev.h"
#include "uiwarp/wire.h"

static unsigned int mpa_crc = UIW_CRC_OPTIONAL;
module_param(mpa_crc, uint, 0644);
MODULE_PARM_DESC(mpa_crc, "MPA CRC: 0 never ask, 1 if the peer asks (default), 2 ask");

static unsigned int mpa_rev = 2;
module_param(mpa_rev, uint, 0644);
MODULE_PARM_DESC(mpa_rev, "MPA revision sent: 1 or 2 (default, RFC 6581 IRD/ORD)");

static bool mpa_rev1_fallback = true;
module_param(mpa_rev1_fallback, bool, 0644);
MODULE_PARM_DESC(mpa_rev1_fallback, "initiator: a revision 2 Request reset before any byte of "
                                    "the Reply is tried once more at revision 1 (default 1)");

static unsigned int max_fpdu;
module_param(max_fpdu, uint, 0644);
MODULE_PARM_DESC(max_fpdu, "largest FPDU sent (0: the connection's TCP MSS, one FPDU a segment)");

static bool mpa_markers;
module_param(mpa_markers, bool, 0644);
MODULE_PARM_DESC(mpa_markers, "MPA markers (RFC 5044 §4.3): ask for them toward us and insert "
                              "them when the peer asks (default 0: neither; a Request asking "
                              "for them is rejected)");

static bool mpa_p2p = true;
module_param(mpa_p2p, bool, 0644);
MODULE_PARM_DESC(mpa_p2p, "initiator: ask for peer-to-peer mode, an RTR (RFC 6581; default 1)");

static unsigned int mpa_rtr = UIW_RTR_WRITE | UIW_RTR_READ;
module_param(mpa_rtr, uint, 0644);
MODULE_PARM_DESC(mpa_rtr, "RTR types offered (initiator) and supported (responder): "
                          "2 Write, 4 Read, 6 both (default)");

static unsigned int first_hold_ms = 20;
module_param(first_hold_ms, uint, 0644);
MODULE_PARM_DESC(first_hold_ms,
                 "initiator, siw's first-FPDU race (its responder misses bytes that come "
                 "before it watches its socket): nothing is held, and this many ms after the MPA "
                 "Reply, if no whole FPDU came from the peer (client-server: and we sent "
                 "something), a wake-up (a zero-length Write, STag 1, TO 0) goes, one more 10 "
                 "times as late; "
                 "0 neither (default 20, the library's UIWARP_FIRST_FPDU_HOLD_MS)");

static unsigned int mpa_timeout_ms = 10000;
module_param(mpa_timeout_ms, uint, 0644);
MODULE_PARM_DESC(mpa_timeout_ms,
                 "ms an initiator waits for the MPA Reply and a responder for the Request "
                 "before closing (default 10000, as the library's UIWARP_MPA_TIMEOUT_MS)");

static unsigned int connect_timeout_ms = 30000;
module_param(connect_timeout_ms, uint, 0644);
MODULE_PARM_DESC(connect_timeout_ms,
                 "ms an initiator waits for its TCP connection before the connect fails with "
                 "-ETIMEDOUT (default 30000, the library's dead-peer timeout UIWARP_PEER_TIMEOUT)");

static unsigned int accept_timeout_ms = 8000;
module_param(accept_timeout_ms, uint, 0644);
MODULE_PARM_DESC(accept_timeout_ms,
                 "ms a connect request waits for the ULP's accept or reject before it is "
                 "rejected and closed (default 8000: below the initiator's MPA Reply timer, "
                 "10000 here and in the library, so that it hears the Reject)");

static unsigned int close_timeout_ms = 10000;
module_param(close_timeout_ms, uint, 0644);
MODULE_PARM_DESC(close_timeout_ms,
                 "ms an orderly close waits for the peer's FIN after ours before the "
                 "connection is closed (default 10000, the library's orderly-close timer)");

static unsigned int peer_timeout_ms = 30000;
module_param(peer_timeout_ms, uint, 0644);
MODULE_PARM_DESC(peer_timeout_ms,
                 "dead-peer bound T on every connection socket, as the library's "
                 "UIWARP_PEER_TIMEOUT: TCP_USER_TIMEOUT T, keepalive after T/2 s (at least 1) "
                 "every T/10 s (at least 1), 5 probes; a silent peer ends the connection "
                 "after about T ms (default 30000, 0 off; for sockets made after a change)");

/* How many times a Send found its QP's SRQ empty and its connection began
 * to wait for a post (read-only; the VM test checks that a wait costs one,
 * not one a jiffy as when the wait polled) */
static atomic_t srq_waits = ATOMIC_INIT(0);

static int srq_waits_get(char *buf, const struct kernel_param *kp)
{
    return scnprintf(buf, PAGE_SIZE, "%d\n", atomic_read(&srq_waits));
}

static int srq_waits_set(const char *val, const struct kernel_param *kp)
{
    return -EPERM;
}

static const struct kernel_param_ops srq_waits_ops = {.set = srq_waits_set, .get = srq_waits_get};
module_param_cb(srq_waits, &srq_waits_ops, NULL, 0444);
MODULE_PARM_DESC(srq_waits, "read-only: Sends that found their SRQ empty and waited for a post");

static struct workqueue_struct *uiw_wq;
static atomic_t uiw_neps = ATOMIC_INIT(0); /* endpoints alive, checked at unload */

#define RXBUF_LEN (64 * 1024)
#define TXIOV_MAX (UIW_MAX_SGE * (UIW_MAX_FR_PAGES + 1) + 1)
#define IRQ_LEN   32 /* inbound Read Requests (IRD at most 16) */
#define ORQ_LEN   UIW_MPA_DEFAULT_ORD
#define ORQ_RTR   U32_MAX /* an orq entry: the Read RTR, no send queue slot */

enum ep_state {
    EP_IDLE,
    EP_LISTEN,
    EP_CONNECTING,  /* active: connect() from the work item */
    EP_WAIT_REP,    /* active: Request sent */
    EP_WAIT_REQ,    /* passive: reading the Request */
    EP_REQ_PENDING, /* passive: CONNECT_REQUEST upcalled, the ULP decides */
    EP_RDMA,        /* FPDU mode, the QP in RTS */
    EP_CLOSED,
};

/* bits of ep->flags, set from any context */
enum { EPF_ABORT, EPF_MPA_TIMEOUT, EPF_WAKE };

/* the initiator's wake-ups (ep_wake) */
#define WAKE_COUNT  2  /* at most */
#define WAKE_FACTOR 10 /* the second one's delay, in first_hold_ms */

/* what the current received segment is for */
enum seg_kind {
    SEG_NONE,
    SEG_TAGGED,
    SEG_SEND,
    SEG_TERM,
    SEG_RREQ,
    SEG_IMM_ATTACHED,
    SEG_AREQ,
    SEG_ARESP
};

/* what the current transmitted message is */
enum msg_kind { MSG_NONE, MSG_SQE, MSG_RRESP, MSG_TERM, MSG_RTR };

struct uiw_ep {
    struct kref ref;
    struct mutex mu;
    struct work_struct work;
    struct delayed_work hold; /* the initiator's next wake-up (ep_wake) */
    bool hold_armed;
    /* initiator: the wake-ups still to send while the peer sends nothing
     * (ep_wake), and the first one's delay (first_hold_ms) */
    u8 wakes;
    unsigned int wake_ms;
    bool rx_whole;                 /* a whole FPDU came from the peer */
    struct delayed_work mpa_timer; /* the MPA Request or Reply must come in time */
    bool mpa_armed;
    /* on the QP's SRQ's waiters (srq->lock) while a Send waits for a
     * receive there, with a reference; empty (self-linked) otherwise */
    struct list_head srq_node;
    unsigned long flags;
    struct uiw_dev *dev;
    struct socket *sock;
    void (*old_data_ready)(struct sock *sk);
    void (*old_write_space)(struct sock *sk);
    void (*old_state_change)(struct sock *sk);
    enum ep_state state;
    bool active;
    bool rev1;              /* initiator: the revision 1 retry (mpa_rev1_fallback) */
    bool tcp_started;       /* initiator: connect() under way (EP_CONNECTING) */
    bool ulp_late;          /* passive: the ULP did not answer in accept_timeout_ms */
    struct iw_cm_id *cm_id; /* a reference (cm_id->add_ref) while set */
    struct uiw_ep *listener;
    struct uiw_qp *qp;
    struct sockaddr_storage laddr, raddr;
    u16 ird, ord;
    /* MPA */
    uiw_mpa_neg neg;
    u8 mpabuf[UIW_MPA_MAX_FRAME];
    u16 mpa_have;
    u8 pd[UIW_MPA_MAX_PD];
    u16 pd_len;
    /* FPDU mode */
    bool tx_hold;  /* responder: no FPDU before the initiator's first */
    u8 rtr_send;   /* initiator: the RTR to send first (UIW_RTR_*), 0 none */
    u8 rtr_expect; /* responder: the RTR negotiated, until the first FPDU */
    /* RFC 7306 immediate data (docs/ENGINE.md "Send with Immediate") */
    bool imm_attached; /* rx: an attached Immediate Data came; its Send is next */
    u8 imm_val[4];     /* ... and its value */
    bool last_write;   /* rx: the last message was an RDMA Write (a Write with
                        * Immediate when Immediate Data follows, RFC 7306 §6) */
    bool imm_next;     /* tx: the second message of the current SQE is next */
    uiw_hdr imm_hdr;   /* ... its header */
    int imm_niov;      /* ... its gather list (txiov) */
    u64 imm_total;
    bool fin_sent; /* graceful close: our FIN is out */
    u8 *rxb;
    u32 rx_have, rx_off;
    uiw_rx rx;
    uiw_useq useq[4]; /* QN 0 (Sends), 1 (Read and Atomic Requests), 3 (Atomic Responses) */
    struct {
        enum seg_kind kind;
        uiw_hdr h;
        u32 payload_len;
        u16 hdr_len;   /* DDP + RDMAP header bytes (the ULPDU's others are payload) */
        bool need_rqe; /* a Send waits for a posted receive */
        bool rqe_valid;
        bool inv_failed;    /* its Send with Invalidate named a bad STag */
        struct uiw_rqe rqe; /* the receive the current Send fills */
        u32 rqe_len;
    } seg;
    struct {
        uiw_rreq r;
        bool atomic; /* an Atomic Request, executed: aresp is its answer */
        uiw_atomic_resp aresp;
    } irq[IRQ_LEN]; /* Read and Atomic Requests to answer, in order */
    u32 irq_head, irq_count;
    struct {
        u32 slot; /* send queue slot (ORQ_RTR: the Read RTR) */
        bool atomic;
        u32 req_id;
    } orq[ORQ_LEN]; /* Reads and Atomics in flight, in order */
    u32 orq_head, orq_count;
    u32 msn_send, msn_read, msn_aresp, atomic_id;
    uiw_tx tx;
    uiw_tx_msg msg;
    enum msg_kind msg_kind;
    u32 msg_slot, msg_gen; /* MSG_SQE: the send queue slot and generation */
    struct iovec *txiov;
    uiw_fpdu *fpdu;
    bool fpdu_busy;
    int fpdu_idx; /* first iovec not wholly sent */
    bool term_pending, term_sent;
    uiw_hdr term_hdr;
};

static const char *ep_name(const struct uiw_ep *ep)
{
    return ep->dev ? dev_name(&ep->dev->ibdev.dev) : "uiwarp";
}

/* ------------------------------------------------------------------------
 * Endpoints
 * ---------------------------------------------------------------------- */

static void ep_work(struct work_struct *w);
static void ep_put(struct uiw_ep *ep);

static void ep_free(struct kref *k)
{
    struct uiw_ep *ep = container_of(k, struct uiw_ep, ref);

    WARN_ON_ONCE(!list_empty(&ep->srq_node)); /* the list holds a reference */
    if (ep->listener)
        ep_put(ep->listener);
    kvfree(ep->rxb);
    kvfree(ep->txiov);
    kvfree(ep->fpdu);
    kfree(ep);
    atomic_dec(&uiw_neps);
}

static void ep_put(struct uiw_ep *ep)
{
    kref_put(&ep->ref, ep_free);
}

static void ep_queue(struct uiw_ep *ep);

static void ep_hold_fn(struct work_struct *w)
{
    struct uiw_ep *ep = container_of(to_delayed_work(w), struct uiw_ep, hold);

    set_bit(EPF_WAKE, &ep->flags); /* looked at only while ep->wakes */
    ep_queue(ep);
    ep_put(ep); /* the reference taken when it was armed */
}

/* ep->mu held (or the ep not yet shared): ep->hold in delay jiffies */
static void ep_hold_arm(struct uiw_ep *ep, unsigned long delay)
{
    ep->hold_armed = true;
    kref_get(&ep->ref);
    if (!queue_delayed_work(uiw_wq, &ep->hold, delay))
        ep_put(ep); /* already pending: it has its reference */
}

/*
 * MPA timer (docs/ENGINE.md "Timers", "Hostile peers"): RFC 5044 §7.1 sets
 * no bound on the exchange, so a responder whose peer never sends the
 * Request, or an initiator whose peer never replies, would hold the socket
 * for ever. Both give up after mpa_timeout_ms, as the library does.
 */
static void ep_mpa_timer_fn(struct work_struct *w)
{
    struct uiw_ep *ep = container_of(to_delayed_work(w), struct uiw_ep, mpa_timer);

    set_bit(EPF_MPA_TIMEOUT, &ep->flags);
    ep_queue(ep);
    ep_put(ep); /* the reference taken when it was armed */
}

/*
 * One timer per endpoint, for whichever bound its state has (RFC 5044 and
 * RFC 793 set none): the TCP connect (connect_timeout_ms), the MPA Request
 * or Reply (mpa_timeout_ms), the ULP's answer to a connect request
 * (accept_timeout_ms), the peer's FIN after ours (close_timeout_ms). Its
 * expiry sets EPF_MPA_TIMEOUT and runs the work item, which acts on it in
 * the state it armed it for. ep->mu held (or the ep not yet shared).
 */
static void ep_timer_arm(struct uiw_ep *ep, unsigned int ms)
{
    clear_bit(EPF_MPA_TIMEOUT, &ep->flags);
    kref_get(&ep->ref);
    ep->mpa_armed = true;
    if (!queue_delayed_work(uiw_wq, &ep->mpa_timer, msecs_to_jiffies(max_t(unsigned int, ms, 1))))
        ep_put(ep); /* already pending: it has its reference */
}

static void ep_mpa_arm(struct uiw_ep *ep)
{
    ep_timer_arm(ep, mpa_timeout_ms);
}

/* Process context, ep->mu held. Waits for an expiry under way, so that no
 * stale EPF_MPA_TIMEOUT can be set after it (the timer's function takes
 * no lock of ours). */
static void ep_mpa_disarm(struct uiw_ep *ep)
{
    if (ep->mpa_armed && cancel_delayed_work_sync(&ep->mpa_timer))
        ep_put(ep);
    ep->mpa_armed = false;
    clear_bit(EPF_MPA_TIMEOUT, &ep->flags);
}

static struct uiw_ep *ep_new(struct uiw_dev *d)
{
    struct uiw_ep *ep = kzalloc(sizeof(*ep), GFP_KERNEL);

    if (!ep)
        return NULL;
    atomic_inc(&uiw_neps);
    kref_init(&ep->ref);
    mutex_init(&ep->mu);
    INIT_WORK(&ep->work, ep_work);
    INIT_DELAYED_WORK(&ep->hold, ep_hold_fn);
    INIT_DELAYED_WORK(&ep->mpa_timer, ep_mpa_timer_fn);
    INIT_LIST_HEAD(&ep->srq_node);
    ep->dev = d;
    return ep;
}

/* Any context: run the work item (once more). */
static void ep_queue(struct uiw_ep *ep)
{
    kref_get(&ep->ref);
    if (!queue_work(uiw_wq, &ep->work))
        kref_put(&ep->ref, ep_free); /* already queued: never the last */
}

static struct uiw_ep *sk_ep(struct sock *sk)
{
    return (struct uiw_ep *)((uintptr_t)sk->sk_user_data & SK_USER_DATA_PTRMASK);
}

static void sk_cb(struct sock *sk)
{
    struct uiw_ep *ep;

    read_lock_bh(&sk->sk_callback_lock);
    ep = sk_ep(sk);
    if (ep)
        ep_queue(ep);
    read_unlock_bh(&sk->sk_callback_lock);
}

/* The socket's callbacks queue the work item. NOCOPY: a socket accepted
 * from a listener does not inherit the pointer. */
static void sock_attach(struct uiw_ep *ep)
{
    struct sock *sk = ep->sock->sk;

    kref_get(&ep->ref);
    write_lock_bh(&sk->sk_callback_lock);
    sk->sk_user_data = (void *)((uintptr_t)ep | SK_USER_DATA_NOCOPY);
    ep->old_data_ready = sk->sk_data_ready;
    ep->old_write_space = sk->sk_write_space;
    ep->old_state_change = sk->sk_state_change;
    sk->sk_data_ready = sk_cb;
    sk->sk_write_space = sk_cb;
    sk->sk_state_change = sk_cb;
    write_unlock_bh(&sk->sk_callback_lock);
}

/* Restores the callbacks and releases the socket. */
static void sock_close(struct uiw_ep *ep)
{
    struct socket *s = ep->sock;
    struct sock *sk;
    bool attached;

    if (!s)
        return;
    sk = s->sk;
    write_lock_bh(&sk->sk_callback_lock);
    attached = sk_ep(sk) == ep;
    if (attached) {
        sk->sk_user_data = NULL;
        sk->sk_data_ready = ep->old_data_ready;
        sk->sk_write_space = ep->old_write_space;
        sk->sk_state_change = ep->old_state_change;
    }
    write_unlock_bh(&sk->sk_callback_lock);
    kernel_sock_shutdown(s, SHUT_RDWR);
    sock_release(s);
    ep->sock = NULL;
    if (attached)
        ep_put(ep);
}

/*
 * Dead peers (docs/ENGINE.md "Dead peers", the library's set_dead_peer): a
 * peer that vanished without FIN or RST (host gone, link cut, a drop
 * rule) is found by TCP itself. TCP_USER_TIMEOUT bounds sent data left
 * unacknowledged (a sender); keepalive probes an idle connection (a
 * receiver), and with TCP_USER_TIMEOUT set Linux ends a probing connection
 * once T passed since the last ACK, so either way the socket fails with
 * ETIMEDOUT after about T (RFC 1122 §4.2.3.6 allows keepalive, off by
 * default, an application's choice; RFC 5482 the user timeout). Set on
 * every connection socket, both sides, and on the listener (its accepted
 * sockets inherit it; they are set again, for a value changed since).
 */
static void sock_dead_peer(struct sock *sk)
{
    unsigned int t = READ_ONCE(peer_timeout_ms), s = t / 1000;

    if (!t)
        return; /* a new socket has neither */
    sock_set_keepalive(sk);
    tcp_sock_set_keepidle(sk, max(1u, s / 2));
    tcp_sock_set_keepintvl(sk, max(1u, s / 10));
    tcp_sock_set_keepcnt(sk, 5);
    tcp_sock_set_user_timeout(sk, t);
}

static int sock_send_all(struct socket *s, const void *buf, size_t len)
{
    struct kvec v = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr m = {.msg_flags = MSG_NOSIGNAL};
    int rc = kernel_sendmsg(s, &m, &v, 1, len);

    if (rc < 0)
        return rc;
    return rc == (int)len ? 0 : -EIO;
}

static int sock_recv(struct socket *s, void *buf, size_t len)
{
    struct kvec v = {.iov_base = buf, .iov_len = len};
    struct msghdr m = {.msg_flags = MSG_DONTWAIT};

    return kernel_recvmsg(s, &m, &v, 1, len, MSG_DONTWAIT);
}

static void make_policy(uiw_mpa_policy *pol, unsigned int ird, unsigned int ord, const u8 *pd,
                        u16 pd_len)
{
    uiw_mpa_policy_default(pol);
    pol->rev = mpa_rev == 1 ? 1 : 2;
    pol->crc = mpa_crc <= UIW_CRC_REQUIRED ? mpa_crc : UIW_CRC_OPTIONAL;
    pol->ird = min_t(unsigned int, ird, UIW_MPA_DEFAULT_IRD);
    pol->ord = min_t(unsigned int, ord, UIW_MPA_DEFAULT_ORD);
    pol->max_ird = UIW_MPA_DEFAULT_IRD;
    pol->min_ord = 0;
    /* RFC 6581 §9.2: the initiator asks for peer-to-peer (A) with the
     * RTR types it can send (C Write, D Read), as the library's default;
     * a responder mirrors A and picks one of those it supports. No
     * zero-length Send RTR: it would take one of the peer's receives. */
    pol->rtr_offer = mpa_rtr & (UIW_RTR_WRITE | UIW_RTR_READ);
    if (!pol->rtr_offer)
        pol->rtr_offer = UIW_RTR_WRITE | UIW_RTR_READ;
    pol->p2p = mpa_p2p && pol->rev == 2;
    /* RFC 5044 §7.1.1 M: markers toward us when asked for, and sent
     * toward a peer that asks, both only with mpa_markers (the library's
     * UIWARP_MARKERS); max_fpdu counts them (the wire core's tx) */
    pol->markers = mpa_markers;
    pol->accept_markers = mpa_markers;
    pol->ulp_pd = pd_len ? pd : NULL;
    pol->ulp_pd_len = pd_len;
}

static void upcall(struct uiw_ep *ep, struct iw_cm_id *id, enum iw_cm_event_type type, int status,
                   const u8 *pd, u16 pd_len, void *provider_data)
{
    struct iw_cm_event ev = {
        .event = type,
        .status = status,
        .local_addr = ep->laddr,
        .remote_addr = ep->raddr,
        .private_data = (void *)pd,
        .private_data_len = pd_len,
        .provider_data = provider_data,
        .ird = ep->ird,
        .ord = ep->ord,
    };

    if (!id || !id->event_handler)
        return;
    if (type != IW_CM_EVENT_CONNECT_REQUEST && type != IW_CM_EVENT_CONNECT_REPLY) {
        ev.private_data = NULL;
        ev.private_data_len = 0;
    }
    pr_debug("%s: cm event %d status %d\n", ep_name(ep), type, status);
    id->event_handler(id, &ev);
}

/* ------------------------------------------------------------------------
 * Attaching the stream to the QP, and tearing it down
 * ---------------------------------------------------------------------- */

/* The largest FPDU: the connection's current effective MSS (mss_cache:
 * path MTU, IP and TCP headers and options such as timestamps taken off),
 * so that an FPDU fits one TCP segment (RFC 5044 §8: the sender SHOULD
 * align FPDUs with segments), rounded down to 4 (RFC 5044 §4.5 without
 * markers: MULPDU = EMSS - 6 - EMSS mod 4, and the FPDU is MULPDU + 6),
 * as the library's pick_max_fpdu; or the max_fpdu parameter. Read again
 * at every message (an MSS can shrink: path MTU discovery, §4.5). */
static u16 fpdu_size(struct uiw_ep *ep)
{
    unsigned int m = max_fpdu;

    if (!m)
        m = READ_ONCE(tcp_sk(ep->sock->sk)->mss_cache);
    m = clamp(m, (unsigned int)UIW_TX_MIN_FPDU * 4, 65532u);
    return (u16)(m & ~3u);
}

/* ep->mu held; the negotiation is done. The QP goes to RTS. */
static int stream_start(struct uiw_ep *ep, struct uiw_qp *qp)
{
    const uiw_mpa_result *r = &ep->neg.result;
    uiw_rx_cfg rc = {.crc = r->crc, .markers = r->markers_rx};
    uiw_tx_cfg tc = {.crc = r->crc, .markers = r->markers_tx};
    unsigned int hold_ms = READ_ONCE(first_hold_ms);
    unsigned long fl;
    int rv = 0;

    if (!ep->rxb)
        ep->rxb = kvmalloc(RXBUF_LEN, GFP_KERNEL);
    if (!ep->txiov)
        ep->txiov = kvmalloc_array(TXIOV_MAX, sizeof(*ep->txiov), GFP_KERNEL);
    if (!ep->fpdu)
        ep->fpdu = kvmalloc(sizeof(*ep->fpdu), GFP_KERNEL);
    if (!ep->rxb || !ep->txiov || !ep->fpdu)
        return -ENOMEM;
    tc.max_fpdu = fpdu_size(ep);
    uiw_rx_init(&ep->rx, &rc);
    if (uiw_tx_init(&ep->tx, &tc))
        return -EINVAL;
    uiw_useq_init(&ep->useq[0]);
    uiw_useq_init(&ep->useq[1]);
    uiw_useq_init(&ep->useq[2]);
    uiw_useq_init(&ep->useq[3]);
    ep->msn_send = ep->msn_read = ep->msn_aresp = 1;
    ep->rx_have = ep->rx_off = 0;
    ep->tx_hold = !ep->active && r->await_rtr;
    ep->rtr_send = ep->active && r->send_rtr ? r->rtr : 0;
    ep->rtr_expect = !ep->active && r->p2p ? r->rtr : 0;
    ep->wakes = 0;
    ep->rx_whole = false;
    ep->ird = r->ird;
    ep->ord = r->ord;

    spin_lock_irqsave(&qp->lock, fl);
    if ((qp->ep && qp->ep != ep) || (qp->state != IB_QPS_INIT && qp->state != IB_QPS_RTR)) {
        rv = -EINVAL;
    } else {
        if (!qp->ep) {
            kref_get(&ep->ref);
            qp->ep = ep;
        }
        qp->state = IB_QPS_RTS;
        qp->sq_sent = 0;
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    if (rv)
        return rv;
    kref_get(&qp->ref);
    ep->qp = qp;
    ep->state = EP_RDMA;
    tcp_sock_set_nodelay(ep->sock->sk);
    pr_debug("%s: QP %u in RTS (CRC %d, FPDU %u, RTR %s, markers %d/%d)\n", ep_name(ep),
             qp->base.qp_num, r->crc, tc.max_fpdu,
             r->rtr == UIW_RTR_WRITE  ? "write"
             : r->rtr == UIW_RTR_READ ? "read"
                                      : "none",
             r->markers_rx, r->markers_tx);
    {
        /* read back from the socket: what TCP will do with a dead peer */
        struct sock *sk = ep->sock->sk;
        const struct tcp_sock *tp = tcp_sk(sk);

        pr_debug("%s: QP %u dead peer: keepalive %d, idle %d s, interval %d s, %d probes, user "
                 "timeout %u ms\n",
                 ep_name(ep), qp->base.qp_num, sock_flag(sk, SOCK_KEEPOPEN) ? 1 : 0,
                 keepalive_time_when(tp) / HZ, keepalive_intvl_when(tp) / HZ, keepalive_probes(tp),
                 READ_ONCE(inet_csk(sk)->icsk_user_timeout));
    }
    if (ep->active && hold_ms) {
        /* siw's first-FPDU race (ep_wake): nothing held, a wake-up
         * timer */
        ep->wakes = WAKE_COUNT;
        ep->wake_ms = hold_ms;
        clear_bit(EPF_WAKE, &ep->flags);
        ep_hold_arm(ep, msecs_to_jiffies(hold_ms));
        pr_debug("%s: QP %u: a wake-up in %u ms unless the peer sends\n", ep_name(ep),
                 qp->base.qp_num, hold_ms);
    }
    return 0;
}

/* qp->lock held: the receive a Send was being placed into, taken off the
 * receive queue, completes with status (it is no longer on the queue that
 * uiw_qp_error_locked flushes) */
static void rqe_abort_locked(struct uiw_ep *ep, struct uiw_qp *qp, enum ib_wc_status status,
                             struct uiw_after *af)
{
    struct ib_wc wc = {
        .wr_id = ep->seg.rqe.wr_id,
        .status = status,
        .opcode = IB_WC_RECV,
        .qp = &qp->base,
    };

    if (!ep->seg.rqe_valid)
        return;
    ep->seg.rqe_valid = false;
    uiw_cq_add(to_ucq(qp->base.recv_cq), &wc, af);
}

/* ep->mu held: the QP lets go of the connection; the QP to ERR (flush) if
 * it is not there already. */
static void qp_unlink(struct uiw_ep *ep, enum ib_event_type ev)
{
    struct uiw_qp *qp = ep->qp;
    struct uiw_after af = AFTER_INIT;
    unsigned long fl;
    bool had = false;

    if (!qp)
        return;
    if (qp->base.srq) {
        /* off the SRQ's waiters while the QP (so the SRQ, which the core
         * keeps while a QP uses it) is certainly there */
        struct uiw_srq *srq = container_of(qp->base.srq, struct uiw_srq, base);
        bool listed;

        spin_lock_irqsave(&srq->lock, fl);
        listed = !list_empty(&ep->srq_node);
        list_del_init(&ep->srq_node);
        spin_unlock_irqrestore(&srq->lock, fl);
        if (listed)
            ep_put(ep); /* the caller holds another: never the last */
    }
    spin_lock_irqsave(&qp->lock, fl);
    if (qp->ep == ep) {
        qp->ep = NULL;
        had = true;
        rqe_abort_locked(ep, qp, IB_WC_WR_FLUSH_ERR, &af);
    }
    /* a connected QP goes to ERR (a failed connect leaves it as it was) */
    if (had && (qp->state == IB_QPS_RTS || qp->state == IB_QPS_SQD)) {
        if ((int)ev >= 0)
            uiw_after_qp_event(&af, ev);
        uiw_qp_error_locked(qp, &af);
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    uiw_after_run(qp, &af);
    ep->qp = NULL;
    uiw_qp_put(qp);
    if (had)
        ep_put(ep);
}

/* ep->mu held: the end of a connection. The socket goes, the QP to ERR,
 * and iw_cm hears CLOSE (after DISCONNECT when the peer closed first) for
 * a connection that was established, then lets go of its cm_id. */
static void ep_teardown(struct uiw_ep *ep, bool peer_closed, enum ib_event_type qp_ev)
{
    bool was_rdma = ep->state == EP_RDMA;
    bool connecting = ep->active && (ep->state == EP_CONNECTING || ep->state == EP_WAIT_REP);
    struct iw_cm_id *id = ep->cm_id;

    if (ep->hold_armed && cancel_delayed_work(&ep->hold))
        ep_put(ep);
    ep->hold_armed = false;
    ep_mpa_disarm(ep);
    sock_close(ep);
    qp_unlink(ep, qp_ev);
    ep->state = EP_CLOSED;
    if (id) {
        if (was_rdma) {
            if (peer_closed)
                upcall(ep, id, IW_CM_EVENT_DISCONNECT, 0, NULL, 0, NULL);
            upcall(ep, id, IW_CM_EVENT_CLOSE, 0, NULL, 0, NULL);
        } else if (connecting) {
            /* iw_cm waits for the reply of a connect (its destroy too) */
            upcall(ep, id, IW_CM_EVENT_CONNECT_REPLY, -ECONNRESET, NULL, 0, NULL);
        }
        ep->cm_id = NULL;
        id->provider_data = NULL;
        id->rem_ref(id);
    }
}

/* ------------------------------------------------------------------------
 * The data path: completions
 * ---------------------------------------------------------------------- */

static int wc_op(u8 opcode)
{
    switch (opcode) {
    case IB_WR_RDMA_WRITE:
    case IB_WR_RDMA_WRITE_WITH_IMM:
        return IB_WC_RDMA_WRITE;
    case IB_WR_RDMA_READ:
    case IB_WR_RDMA_READ_WITH_INV:
        return IB_WC_RDMA_READ;
    case IB_WR_ATOMIC_CMP_AND_SWP:
        return IB_WC_COMP_SWAP;
    case IB_WR_ATOMIC_FETCH_AND_ADD:
        return IB_WC_FETCH_ADD;
    default:
        return IB_WC_SEND;
    }
}

static bool is_atomic(u8 op)
{
    return op == IB_WR_ATOMIC_CMP_AND_SWP || op == IB_WR_ATOMIC_FETCH_AND_ADD;
}

/* a WR answered by the peer (Read Response, Atomic Response): it takes
 * ORD credit and completes at its response */
static bool is_read(u8 op)
{
    return op == IB_WR_RDMA_READ || op == IB_WR_RDMA_READ_WITH_INV || is_atomic(op);
}

static void local_inv(struct uiw_qp *qp, u32 stag);

/* ep->mu held: marks a send queue slot done and completes the queue's
 * head entries that are, in order. */
static void sq_done(struct uiw_ep *ep, u32 slot, u32 gen)
{
    struct uiw_qp *qp = ep->qp;
    struct uiw_cq *scq = to_ucq(qp->base.send_cq);
    struct uiw_after af = AFTER_INIT;
    unsigned long fl;

    spin_lock_irqsave(&qp->lock, fl);
    if (qp->sq_gen == gen && qp->state != IB_QPS_ERR) {
        /* Read with Invalidate (what rdma_rw posts on iWARP): the sink's
         * STag is invalid once the data is there. The sink is the SGE's
         * lkey, as siw takes it: rdma_rw bumps the MR's key at post time,
         * after it filled in ex.invalidate_rkey with the old one. */
        if (qp->sq[slot].opcode == IB_WR_RDMA_READ_WITH_INV && qp->sq[slot].num_sge)
            local_inv(qp, qp->sq[slot].sge[0].lkey);
        qp->sq[slot].done = true;
        while (qp->sq_count && qp->sq[qp->sq_head].done) {
            struct uiw_sqe *e = &qp->sq[qp->sq_head];

            if (e->signaled) {
                struct ib_wc wc = {
                    .wr_id = e->wr_id,
                    .status = IB_WC_SUCCESS,
                    .opcode = wc_op(e->opcode),
                    .qp = &qp->base,
                };

                if (is_read(e->opcode))
                    wc.byte_len = e->num_sge ? e->sge[0].length : 0; /* atomics: 8 */
                uiw_cq_add(scq, &wc, &af);
            }
            qp->sq_head = (qp->sq_head + 1) % qp->cap.max_send_wr;
            qp->sq_count--;
            qp->sq_sent--;
        }
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    uiw_after_run(qp, &af);
}

/* ------------------------------------------------------------------------
 * The data path: memory
 * ---------------------------------------------------------------------- */

/* mr_lock held. The MR an STag names for this QP with these rights over
 * [addr, addr + len), or NULL with *cause set (RFC 5040 §7.2, RFC 5041
 * §7.2: DDP tagged errors for the STag and bounds, RDMAP for rights). */
static struct uiw_mr *mr_check(struct uiw_qp *qp, u32 stag, int access, u64 addr, u64 len,
                               uiw_term_cause *cause)
{
    struct uiw_dev *d = to_udev(qp->base.device);
    struct uiw_mr *mr = xa_load(&d->mrs, stag >> 8);

    if (cause) {
        cause->layer = UIW_LAYER_DDP;
        cause->etype = UIW_DDP_ET_TAGGED;
    }
    if (!mr || mr->stag != stag || !mr->valid) {
        if (cause)
            cause->ecode = UIW_DDP_EC_T_INVALID_STAG;
        return NULL;
    }
    if (mr->base.pd != qp->base.pd) {
        if (cause)
            cause->ecode = UIW_DDP_EC_T_STAG_NOT_ASSOC;
        return NULL;
    }
    if (access && !(mr->access & access)) {
        if (cause) {
            cause->layer = UIW_LAYER_RDMAP;
            cause->etype = UIW_RDMAP_ET_REMOTE_PROT;
            cause->ecode = UIW_RDMAP_EC_ACCESS_RIGHTS;
        }
        return NULL;
    }
    if (len && addr > U64_MAX - (len - 1)) {
        /* RFC 5041 §7.1 check 5, §7.2: TO + length wraps 2^64 */
        if (cause)
            cause->ecode = UIW_DDP_EC_T_TO_WRAP;
        return NULL;
    }
    if (addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len) {
        if (cause)
            cause->ecode = UIW_DDP_EC_T_BASE_BOUNDS;
        return NULL;
    }
    return mr;
}

/* The kernel address of addr in a checked MR and how many bytes are
 * contiguous from there (up to len). */
static void *mr_ptr(struct uiw_mr *mr, u64 addr, u64 len, u64 *contig)
{
    u64 pos, ps;
    u32 idx;

    if (mr->base.type != IB_MR_TYPE_MEM_REG) {
        *contig = len; /* the DMA MR: kernel virtual addresses */
        return (void *)(uintptr_t)addr;
    }
    ps = mr->page_size;
    pos = addr - mr->iova + mr->reg_fbo;
    idx = pos / ps;
    if (idx >= mr->reg_npages) {
        *contig = 0;
        return NULL;
    }
    *contig = min(len, ps - pos % ps);
    return (void *)(uintptr_t)(mr->reg_pages[idx] + pos % ps);
}

/* Copies len bytes to addr in the MR named by stag (checked again under
 * mr_lock, so a concurrent dereg or invalidate cannot free it meanwhile). */
static int place(struct uiw_qp *qp, u32 stag, int access, u64 addr, const u8 *src, u32 len,
                 uiw_term_cause *cause)
{
    struct uiw_dev *d = to_udev(qp->base.device);
    struct uiw_mr *mr;
    unsigned long fl;
    int rc = 0;

    spin_lock_irqsave(&d->mr_lock, fl);
    mr = mr_check(qp, stag, access, addr, len, cause);
    if (!mr) {
        rc = -EACCES;
    } else {
        while (len) {
            u64 n;
            void *p = mr_ptr(mr, addr, len, &n);

            if (!p || !n) {
                rc = -EFAULT;
                break;
            }
            memcpy(p, src, n);
            src += n;
            addr += n;
            len -= n;
        }
    }
    spin_unlock_irqrestore(&d->mr_lock, fl);
    return rc;
}

/* Appends iovecs for [addr, addr + len) of the MR stag names to txiov. */
static int gather(struct uiw_ep *ep, int *niov, u32 stag, int access, u64 addr, u64 len,
                  uiw_term_cause *cause)
{
    struct uiw_qp *qp = ep->qp;
    struct uiw_dev *d = to_udev(qp->base.device);
    struct uiw_mr *mr;
    unsigned long fl;
    int rc = 0;

    if (!len)
        return 0;
    spin_lock_irqsave(&d->mr_lock, fl);
    mr = mr_check(qp, stag, access, addr, len, cause);
    if (!mr)
        rc = -EACCES;
    while (mr && len) {
        u64 n;
        void *p = mr_ptr(mr, addr, len, &n);

        if (!p || !n || *niov == TXIOV_MAX) {
            rc = -EFAULT;
            break;
        }
        ep->txiov[*niov].iov_base = (void __user *)p;
        ep->txiov[*niov].iov_len = n;
        (*niov)++;
        addr += n;
        len -= n;
    }
    spin_unlock_irqrestore(&d->mr_lock, fl);
    return rc;
}

/* ------------------------------------------------------------------------
 * The data path: transmit
 * ---------------------------------------------------------------------- */

/* A Terminate (RFC 5040 §4.8) for cause, with what Figure 10 attaches;
 * the QP goes to ERR at once, the socket after the Terminate is out. */
static void terminate(struct uiw_ep *ep, uiw_term_cause cause, const u8 *bad, unsigned int badlen,
                      const char *why)
{
    struct uiw_qp *qp = ep->qp;

    if (ep->term_pending || ep->term_sent)
        return;
    pr_info_ratelimited("%s: QP %u: Terminate %s/%s/%s: %s\n", ep_name(ep),
                        qp ? qp->base.qp_num : 0, uiw_term_layer_name(cause.layer),
                        uiw_term_etype_name(cause.layer, cause.etype),
                        uiw_term_ecode_name(cause.layer, cause.etype, cause.ecode), why);
    uiw_hdr_init_untagged(&ep->term_hdr, UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1);
    uiw_term_attach(&ep->term_hdr.u.term, cause, bad, badlen);
    ep->term_pending = true;
    if (qp) {
        struct uiw_after af = AFTER_INIT;
        unsigned long fl;

        /* the receive of the Send in progress first, the oldest: a Send
         * longer than it is the receive's length error, a bad Invalidate
         * STag a remote invalidate request error (IB_WC_LOC_LEN_ERR,
         * IB_WC_REM_INV_REQ_ERR, as the engine), any other cause flushes
         * it */
        enum ib_wc_status st = IB_WC_WR_FLUSH_ERR;

        if (cause.layer == UIW_LAYER_DDP && cause.etype == UIW_DDP_ET_UNTAGGED &&
            cause.ecode == UIW_DDP_EC_U_MSG_TOO_LONG)
            st = IB_WC_LOC_LEN_ERR;
        else if (ep->seg.inv_failed)
            st = IB_WC_REM_INV_REQ_ERR;
        spin_lock_irqsave(&qp->lock, fl);
        rqe_abort_locked(ep, qp, st, &af);
        if (qp->state != IB_QPS_ERR) {
            uiw_after_qp_event(&af, IB_EVENT_QP_FATAL);
            uiw_qp_error_locked(qp, &af);
        }
        spin_unlock_irqrestore(&qp->lock, fl);
        uiw_after_run(qp, &af);
    }
}

/* Starts the next message: a Terminate, a Read Response, or the next
 * send queue entry. 1 started, 0 nothing to send. */
static int tx_start(struct uiw_ep *ep)
{
    struct uiw_qp *qp = ep->qp;
    uiw_term_cause cause;
    struct uiw_sqe e;
    unsigned long fl;
    uiw_hdr h;
    u64 total = 0;
    int niov = 0, rc;
    u32 i;
    enum ib_wc_status lerr = IB_WC_LOC_PROT_ERR; /* local_err's status */

    if (ep->sock)
        ep->tx.cfg.max_fpdu = fpdu_size(ep); /* read per FPDU by the wire core */
    if (ep->term_pending) {
        ep->term_pending = false;
        if (uiw_tx_msg_init(&ep->msg, &ep->term_hdr, NULL, 0, 0))
            return 0;
        ep->msg_kind = MSG_TERM;
        return 1;
    }
    if (ep->term_sent || !qp || ep->tx_hold)
        return 0;
    if (ep->imm_next) {
        /* the second message of a Send or RDMA Write with Immediate, at
         * once after the first (its gather list is in txiov) */
        bool live;

        ep->imm_next = false;
        spin_lock_irqsave(&qp->lock, fl);
        live = qp->sq_gen == ep->msg_gen && qp->state != IB_QPS_ERR;
        spin_unlock_irqrestore(&qp->lock, fl);
        if (live &&
            !uiw_tx_msg_init(&ep->msg, &ep->imm_hdr, ep->txiov, ep->imm_niov, ep->imm_total)) {
            ep->msg_kind = MSG_SQE;
            return 1;
        }
    }
    if (ep->rtr_send) {
        /* RFC 6581 §3, §9.2: the initiator's first FPDU is the RTR the
         * responder chose, zero-length. A Write to STag 1, TO 0, and a
         * Read Request of nothing from source STag 1 into sink STag 0,
         * as the library and siw send them (STag 0 would be refused by
         * Chelsio's hardware). The Read takes one ORD credit (the
         * negotiation raised ORD to 1 for it) until its zero-length
         * response arrives; neither completes on the send queue. */
        if (ep->rtr_send == UIW_RTR_READ) {
            uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, ep->msn_read++);
            h.u.rreq.src_stag = 1;
            ep->orq[(ep->orq_head + ep->orq_count) % ORQ_LEN].slot = ORQ_RTR;
            ep->orq[(ep->orq_head + ep->orq_count) % ORQ_LEN].atomic = false;
            ep->orq_count++;
        } else {
            uiw_hdr_init(&h, true, UIW_OP_WRITE);
            h.stag = 1;
            h.to = 0;
        }
        ep->rtr_send = 0;
        if (uiw_tx_msg_init(&ep->msg, &h, NULL, 0, 0))
            return 0;
        ep->msg_kind = MSG_RTR;
        return 1;
    }
    if (ep->irq_count && ep->irq[ep->irq_head].atomic) {
        /* RFC 7306 §5.2.2: the Atomic Response on QN 3, in request order
         * with the Read Responses */
        uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_RESP, UIW_QN_ATOMIC_RESP, ep->msn_aresp++);
        h.u.atomic_resp = ep->irq[ep->irq_head].aresp;
        if (uiw_tx_msg_init(&ep->msg, &h, NULL, 0, 0))
            return 0;
        ep->msg_kind = MSG_RRESP;
        return 1;
    }
    if (ep->irq_count) {
        const uiw_rreq *r = &ep->irq[ep->irq_head].r;

        rc = gather(ep, &niov, r->src_stag, IB_ACCESS_REMOTE_READ, r->src_to, r->read_size, &cause);
        if (rc) {
            terminate(ep, cause, NULL, 0, "Read Request source");
            return ep->term_pending;
        }
        uiw_hdr_init(&h, true, UIW_OP_READ_RESP);
        h.stag = r->sink_stag;
        h.to = r->sink_to;
        if (uiw_tx_msg_init(&ep->msg, &h, ep->txiov, niov, r->read_size))
            return 0;
        ep->msg_kind = MSG_RRESP;
        return 1;
    }
    spin_lock_irqsave(&qp->lock, fl);
    if ((qp->state != IB_QPS_RTS && qp->state != IB_QPS_SQD) || qp->sq_sent == qp->sq_count) {
        spin_unlock_irqrestore(&qp->lock, fl);
        return 0;
    }
    ep->msg_slot = (qp->sq_head + qp->sq_sent) % qp->cap.max_send_wr;
    e = qp->sq[ep->msg_slot];
    if (is_read(e.opcode) && ep->ord && ep->orq_count == min_t(u32, ORQ_LEN, ep->ord)) {
        spin_unlock_irqrestore(&qp->lock, fl);
        return 0; /* ORD Reads in flight: wait for a response */
    }
    qp->sq_sent++;
    ep->msg_gen = qp->sq_gen;
    spin_unlock_irqrestore(&qp->lock, fl);
    if (is_read(e.opcode) && !ep->ord) {
        /* no Read credit negotiated (ORD 0: the peer's IRD, RFC 6581 §7.1
         * of the MPA exchange): nothing goes out; the WR fails with a
         * local QP operation error, as the library's (qp_tx.c) */
        lerr = IB_WC_LOC_QP_OP_ERR;
        goto local_err;
    }

    if (!is_read(e.opcode)) {
        for (i = 0; i < e.num_sge; i++) {
            rc = gather(ep, &niov, e.sge[i].lkey, 0, e.sge[i].addr, e.sge[i].length, NULL);
            if (rc)
                goto local_err;
            total += e.sge[i].length;
        }
    }
    switch (e.opcode) {
    case IB_WR_SEND_WITH_IMM:
        /* uiwarp's Send with Immediate (docs/ENGINE.md): an RFC 7306
         * Immediate Data message (§6) whose 8 bytes are the value and
         * the tag "uiwS", then the Send on the next MSN, so that the
         * peer consumes one receive and completes it with the value (an
         * RFC 7306 receiver that is not uiwarp sees the Immediate Data
         * as a message of its own) */
        uiw_hdr_init_untagged(&h, UIW_OP_IMM_DATA, UIW_QN_SEND, ep->msn_send++);
        memcpy(h.u.imm, &e.imm, 4);
        memcpy(h.u.imm + 4, UIW_IMM_ATTACH_TAG, 4);
        uiw_hdr_init_untagged(&ep->imm_hdr, e.solicited ? UIW_OP_SEND_SE : UIW_OP_SEND, UIW_QN_SEND,
                              ep->msn_send++);
        ep->imm_niov = niov;
        ep->imm_total = total;
        if (uiw_tx_msg_init(&ep->msg, &h, NULL, 0, 0))
            goto local_err;
        ep->imm_next = true;
        ep->msg_kind = MSG_SQE;
        return 1;
    case IB_WR_RDMA_WRITE_WITH_IMM:
        /* RFC 7306 §6: the RDMA Write, then Immediate Data (QN 0) with
         * the value in its first 4 bytes, zeros after (Solicited Event
         * when asked): it consumes the peer's receive */
        uiw_hdr_init_untagged(&ep->imm_hdr, e.solicited ? UIW_OP_IMM_DATA_SE : UIW_OP_IMM_DATA,
                              UIW_QN_SEND, ep->msn_send++);
        memcpy(ep->imm_hdr.u.imm, &e.imm, 4);
        memset(ep->imm_hdr.u.imm + 4, 0, 4);
        ep->imm_niov = 0;
        ep->imm_total = 0;
        uiw_hdr_init(&h, true, UIW_OP_WRITE);
        h.stag = e.rkey;
        h.to = e.raddr;
        if (uiw_tx_msg_init(&ep->msg, &h, ep->txiov, niov, total))
            goto local_err;
        ep->imm_next = true;
        ep->msg_kind = MSG_SQE;
        return 1;
    case IB_WR_ATOMIC_FETCH_AND_ADD:
    case IB_WR_ATOMIC_CMP_AND_SWP: {
        /* RFC 7306 §5.2.1: an Atomic Request on QN 1 (sharing MSNs and
         * ORD with the Read Requests), as the library maps verbs atomics:
         * FetchAdd with Add Mask 0 (one 64-bit add, §5.1.1), CmpSwap with
         * all-ones masks (the whole word, §5.1.2) */
        uiw_atomic_req *a = &h.u.atomic_req;
        u32 at = (ep->orq_head + ep->orq_count) % ORQ_LEN;

        uiw_hdr_init_untagged(&h, UIW_OP_ATOMIC_REQ, UIW_QN_READ_REQ, ep->msn_read++);
        a->req_id = ++ep->atomic_id;
        a->stag = e.rkey;
        a->to = e.raddr;
        if (e.opcode == IB_WR_ATOMIC_FETCH_AND_ADD) {
            a->aop = UIW_AOP_FETCH_ADD;
            a->add_swap = e.compare_add;
            a->add_swap_mask = 0;
            a->compare = 0;
            a->compare_mask = U64_MAX;
        } else {
            a->aop = UIW_AOP_CMP_SWAP;
            a->add_swap = e.swap;
            a->add_swap_mask = U64_MAX;
            a->compare = e.compare_add;
            a->compare_mask = U64_MAX;
        }
        ep->orq[at].slot = ep->msg_slot;
        ep->orq[at].atomic = true;
        ep->orq[at].req_id = a->req_id;
        ep->orq_count++;
        break;
    }
    case IB_WR_SEND:
    case IB_WR_SEND_WITH_INV:
        if (e.opcode == IB_WR_SEND)
            uiw_hdr_init_untagged(&h, e.solicited ? UIW_OP_SEND_SE : UIW_OP_SEND, UIW_QN_SEND,
                                  ep->msn_send++);
        else
            uiw_hdr_init_untagged(&h, e.solicited ? UIW_OP_SEND_SE_INV : UIW_OP_SEND_INV,
                                  UIW_QN_SEND, ep->msn_send++);
        h.inv_stag = e.inv_rkey;
        break;
    case IB_WR_RDMA_WRITE:
        uiw_hdr_init(&h, true, UIW_OP_WRITE);
        h.stag = e.rkey;
        h.to = e.raddr;
        break;
    default: /* IB_WR_RDMA_READ, IB_WR_RDMA_READ_WITH_INV */
        uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, ep->msn_read++);
        h.u.rreq.sink_stag = e.num_sge ? e.sge[0].lkey : 0;
        h.u.rreq.sink_to = e.num_sge ? e.sge[0].addr : 0;
        h.u.rreq.read_size = e.num_sge ? e.sge[0].length : 0;
        h.u.rreq.src_stag = e.rkey;
        h.u.rreq.src_to = e.raddr;
        ep->orq[(ep->orq_head + ep->orq_count) % ORQ_LEN].slot = ep->msg_slot;
        ep->orq[(ep->orq_head + ep->orq_count) % ORQ_LEN].atomic = false;
        ep->orq_count++;
        break;
    }
    if (uiw_tx_msg_init(&ep->msg, &h, ep->txiov, niov, total))
        goto local_err;
    ep->msg_kind = MSG_SQE;
    return 1;

local_err : {
    /* a bad local SGE (a local protection error), or a Read without Read
     * credit (lerr): the WR completes with that status, the QP goes to ERR
     * (flushing the rest) */
    struct uiw_after af = AFTER_INIT;

    spin_lock_irqsave(&qp->lock, fl);
    if (qp->sq_gen == ep->msg_gen && qp->state != IB_QPS_ERR) {
        /* the flush completes it with this status, in order */
        qp->sq[ep->msg_slot].err_status = lerr;
        uiw_after_qp_event(&af,
                           lerr == IB_WC_LOC_PROT_ERR ? IB_EVENT_QP_ACCESS_ERR : IB_EVENT_QP_FATAL);
        uiw_qp_error_locked(qp, &af);
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    uiw_after_run(qp, &af);
    ep_teardown(ep, false, -1);
    return 0;
}
}

/* The current message is on the wire. */
static void tx_msg_done(struct uiw_ep *ep)
{
    enum msg_kind k = ep->msg_kind;

    ep->msg_kind = MSG_NONE;
    if (k == MSG_TERM) {
        ep->term_sent = true;
    } else if (k == MSG_RRESP) {
        ep->irq_head = (ep->irq_head + 1) % IRQ_LEN;
        ep->irq_count--;
    } else if (k == MSG_SQE && ep->qp) {
        u8 op = ep->qp->sq[ep->msg_slot].opcode;

        if (ep->imm_next)
            return; /* its second message completes it */

        if (!is_read(op)) /* a Read completes at its response */
            sq_done(ep, ep->msg_slot, ep->msg_gen);
    }
}

/* Sends what the socket takes: 1 progress, 0 blocked/idle, <0 error. */
static int stream_tx(struct uiw_ep *ep)
{
    int progress = 0;

    for (;;) {
        if (ep->fpdu_busy) {
            uiw_fpdu *f = ep->fpdu;
            /* One FPDU a sendmsg, ended with MSG_EOR: TCP appends no later
             * bytes to the buffer that holds it, so the next FPDU starts a
             * new buffer, and with FPDUs no larger than the MSS
             * (fpdu_size) every FPDU starts a TCP segment and lies whole
             * in it (RFC 5044 §8, Appendix A.1), as siw sends. Without it
             * TCP filled its buffers across FPDUs and cut them at MSS
             * multiples: 5% of the FPDUs started a segment. A partial
             * send (socket full) is resumed with the FPDU's rest, also
             * ended with MSG_EOR. */
            struct msghdr m = {.msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL | MSG_EOR};
            size_t left = 0;
            int i, n;

            for (i = ep->fpdu_idx; i < f->iovcnt; i++)
                left += f->iov[i].iov_len;
            n = kernel_sendmsg(ep->sock, &m, (struct kvec *)&f->iov[ep->fpdu_idx],
                               f->iovcnt - ep->fpdu_idx, left);
            if (n == -EAGAIN)
                return progress;
            if (n < 0)
                return n;
            progress = 1;
            /* skip what went */
            while (n > 0) {
                struct iovec *v = &f->iov[ep->fpdu_idx];

                if ((size_t)n >= v->iov_len) {
                    n -= v->iov_len;
                    ep->fpdu_idx++;
                } else {
                    v->iov_base = (u8 __user *)v->iov_base + n;
                    v->iov_len -= n;
                    n = 0;
                }
            }
            if (ep->fpdu_idx < f->iovcnt)
                continue;
            ep->fpdu_busy = false;
        }
        if (ep->msg_kind != MSG_NONE) {
            int rc;

            if (ep->term_pending && ep->msg_kind != MSG_TERM) {
                ep->msg_kind = MSG_NONE; /* the rest of it is not sent */
                continue;
            }
            rc = uiw_tx_next(&ep->tx, &ep->msg, ep->fpdu);
            if (rc < 0)
                return rc;
            if (rc == 1) {
                ep->fpdu_busy = true;
                ep->fpdu_idx = 0;
                continue;
            }
            tx_msg_done(ep);
            progress = 1;
            if (ep->state != EP_RDMA)
                return progress;
            continue;
        }
        if (!tx_start(ep))
            return progress;
        if (ep->state != EP_RDMA)
            return progress;
    }
}

/* ------------------------------------------------------------------------
 * The data path: receive
 * ---------------------------------------------------------------------- */

static bool rqe_pop(struct uiw_ep *ep)
{
    struct uiw_qp *qp = ep->qp;
    unsigned long fl;
    bool got = false;
    u32 i;

    if (qp->base.srq) {
        bool queued = false;

        /* "Receiver not ready" on a shared queue: no post names this QP,
         * so the connection joins the SRQ's waiters (with a reference,
         * taken first: a post may wake it before uiw_srq_pop returns) and
         * the post wakes it; nothing runs meanwhile */
        kref_get(&ep->ref);
        got = uiw_srq_pop(container_of(qp->base.srq, struct uiw_srq, base), &ep->seg.rqe,
                          &ep->srq_node, &queued);
        if (queued)
            atomic_inc(&srq_waits);
        else
            ep_put(ep); /* the work item holds another */
        goto out;
    }
    spin_lock_irqsave(&qp->lock, fl);
    if (qp->rq && qp->rq_count) {
        ep->seg.rqe = qp->rq[qp->rq_head];
        qp->rq_head = (qp->rq_head + 1) % qp->cap.max_recv_wr;
        qp->rq_count--;
        got = true;
    }
    spin_unlock_irqrestore(&qp->lock, fl);
out:
    if (got) {
        ep->seg.rqe_valid = true;
        ep->seg.rqe_len = 0;
        for (i = 0; i < ep->seg.rqe.num_sge; i++)
            ep->seg.rqe_len += ep->seg.rqe.sge[i].length;
    }
    return got;
}

/* A Read Request's source checked when it arrives, so that the Terminate
 * carries its headers (RFC 5040 §4.8 Figure 10: D and R): the source
 * STag is the RDMA header's, an RDMAP Remote Protection error (RFC 5040
 * §7.2) with the code of the DDP tagged check that failed. A zero-length
 * Read (siw's RTR, to STag 1) names no memory. It is checked again when
 * the response is built. */
static bool rreq_src_ok(struct uiw_ep *ep, const uiw_rreq *r, uiw_term_cause *cause)
{
    struct uiw_dev *d = to_udev(ep->qp->base.device);
    unsigned long fl;
    bool ok;

    if (!r->read_size)
        return true;
    spin_lock_irqsave(&d->mr_lock, fl);
    ok = mr_check(ep->qp, r->src_stag, IB_ACCESS_REMOTE_READ, r->src_to, r->read_size, cause);
    spin_unlock_irqrestore(&d->mr_lock, fl);
    if (ok || cause->layer != UIW_LAYER_DDP)
        return ok;
    cause->layer = UIW_LAYER_RDMAP;
    cause->etype = UIW_RDMAP_ET_REMOTE_PROT;
    switch (cause->ecode) {
    case UIW_DDP_EC_T_BASE_BOUNDS:
        cause->ecode = UIW_RDMAP_EC_BASE_BOUNDS;
        break;
    case UIW_DDP_EC_T_STAG_NOT_ASSOC:
        cause->ecode = UIW_RDMAP_EC_STAG_NOT_ASSOC;
        break;
    case UIW_DDP_EC_T_TO_WRAP:
        cause->ecode = UIW_RDMAP_EC_TO_WRAP;
        break;
    default:
        cause->ecode = UIW_RDMAP_EC_INVALID_STAG;
        break;
    }
    return false;
}

static void term_on(struct uiw_ep *ep, uiw_term_cause cause, const char *why)
{
    u8 img[UIW_TERM_HDR_IMAGE_MAX];
    /* RFC 5040 §4.8: the DDP Segment Length is the ULPDU_Length of the
     * segment, its header (tagged, untagged, with a Read Request's RDMA
     * header) and payload */
    unsigned int n =
        uiw_term_hdr_image(&ep->seg.h, ep->seg.hdr_len + ep->seg.payload_len, true, img);

    terminate(ep, cause, img, n, why);
}

/* A segment's header. Returns false when the Send waits for a receive. */
static bool rx_hdr(struct uiw_ep *ep, const uiw_rx_event *ev)
{
    const uiw_hdr *h = ev->hdr;
    struct uiw_qp *qp = ep->qp;
    uiw_term_cause cause = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                            UIW_RDMAP_EC_UNEXPECTED_OPCODE};
    int qaccess = qp->attr.qp_access_flags;

    ep->seg.h = *h;
    ep->seg.payload_len = ev->payload_len;
    ep->seg.hdr_len = ev->hdr_len;
    ep->seg.inv_failed = false;
    ep->seg.kind = SEG_NONE;
    if (ep->rtr_expect) {
        /* the initiator's first FPDU after a peer-to-peer negotiation: the
         * zero-length RTR it chose (RFC 6581 §9.2) names no memory, so it
         * needs no remote access rights on the QP; anything else is taken
         * as any FPDU would be (as siw: the first FPDU counts) */
        u8 rtr = ep->rtr_expect;

        ep->rtr_expect = 0;
        if (!ev->payload_len && h->tagged && h->opcode == UIW_OP_WRITE && rtr == UIW_RTR_WRITE) {
            ep->seg.kind = SEG_NONE; /* not a Write a Write with Immediate ends */
            return true;
        }
        if (!h->tagged && h->qn == UIW_QN_READ_REQ && h->opcode == UIW_OP_READ_REQ &&
            !h->u.rreq.read_size && rtr == UIW_RTR_READ)
            qaccess |= IB_ACCESS_REMOTE_READ;
    }
    if (h->tagged) {
        struct uiw_dev *d = to_udev(qp->base.device);
        unsigned long fl;
        bool ok;

        if (h->opcode == UIW_OP_READ_RESP && (!ep->orq_count || ep->orq[ep->orq_head].atomic)) {
            term_on(ep, cause, "Read Response without a Read Request");
            return true;
        }
        /* RFC 5041 §7.1: a zero-length tagged segment is not validated
         * (an initiator's wake-up after the RTR is one, ep_wake) */
        if (h->opcode == UIW_OP_WRITE && ev->payload_len && !(qaccess & IB_ACCESS_REMOTE_WRITE)) {
            cause.etype = UIW_RDMAP_ET_REMOTE_PROT;
            cause.ecode = UIW_RDMAP_EC_ACCESS_RIGHTS;
            term_on(ep, cause, "RDMA Write to a QP without remote write");
            return true;
        }
        if (ev->payload_len) {
            spin_lock_irqsave(&d->mr_lock, fl);
            ok =
                mr_check(qp, h->stag,
                         h->opcode == UIW_OP_WRITE ? IB_ACCESS_REMOTE_WRITE : IB_ACCESS_LOCAL_WRITE,
                         h->to, ev->payload_len, &cause) != NULL;
            spin_unlock_irqrestore(&d->mr_lock, fl);
            if (!ok) {
                term_on(ep, cause, "tagged buffer");
                return true;
            }
        }
        ep->seg.kind = SEG_TAGGED;
        return true;
    }
    if (h->qn == UIW_QN_SEND || h->qn == UIW_QN_READ_REQ || h->qn == UIW_QN_ATOMIC_RESP) {
        uiw_useq *q = &ep->useq[h->qn];
        bool imm = h->opcode == UIW_OP_IMM_DATA || h->opcode == UIW_OP_IMM_DATA_SE;
        bool areq = h->opcode == UIW_OP_ATOMIC_REQ;

        if (!uiw_useq_check(q, h, &cause)) {
            term_on(ep, cause, "untagged sequence");
            return true;
        }
        if (h->qn == UIW_QN_ATOMIC_RESP) {
            /* RFC 7306 §5.2.2: answers the oldest request in flight, which
             * must be an Atomic with its Request Identifier */
            if (h->opcode != UIW_OP_ATOMIC_RESP || !ep->orq_count ||
                !ep->orq[ep->orq_head].atomic) {
                term_on(ep, cause, "Atomic Response without an Atomic Request");
                return true;
            }
            if (h->u.atomic_resp.req_id != ep->orq[ep->orq_head].req_id) {
                cause.ecode = UIW_RDMAP_EC_UNSPECIFIED_OTHER;
                term_on(ep, cause, "Atomic Response for another request");
                return true;
            }
            uiw_useq_accept(q, h, ev->payload_len);
            ep->seg.kind = SEG_ARESP;
            return true;
        }
        if (h->qn == UIW_QN_READ_REQ) {
            if (h->opcode != UIW_OP_READ_REQ && !areq) {
                term_on(ep, cause, "opcode on QN 1");
                return true;
            }
            /* an Atomic Request needs the target MR's remote atomic
             * right (atomic_req), not the QP's: iw_cm gives iWARP QPs
             * remote read and write only */
            if ((!areq && !(qaccess & IB_ACCESS_REMOTE_READ)) || ep->irq_count == IRQ_LEN) {
                cause.layer = UIW_LAYER_DDP;
                cause.etype = UIW_DDP_ET_UNTAGGED;
                cause.ecode = UIW_DDP_EC_U_INVALID_MSN_NOBUF;
                term_on(ep, cause, "no room for the Read Request");
                return true;
            }
            if (ep->irq_count >= max_t(u32, ep->ird, 1)) {
                /* RFC 5040 §6.1 (the peer keeps at most IRD Read
                 * Requests outstanding, RFC 6581 §7.1 negotiated it):
                 * as the engine, Remote Operation, catastrophic error
                 * localized to the stream, with the request's headers */
                cause.layer = UIW_LAYER_RDMAP;
                cause.etype = UIW_RDMAP_ET_REMOTE_OP;
                cause.ecode = UIW_RDMAP_EC_CATASTROPHIC_STREAM;
                term_on(ep, cause, "Read Requests beyond IRD");
                return true;
            }
            if (!areq && !rreq_src_ok(ep, &h->u.rreq, &cause)) {
                term_on(ep, cause, "Read Request source");
                return true;
            }
            /* queued for its response (an Atomic executed) at the FPDU's
             * end, once MPA has its CRC (rx_end) */
            uiw_useq_accept(q, h, ev->payload_len);
            ep->seg.kind = areq ? SEG_AREQ : SEG_RREQ;
            return true;
        }
        if (!imm && (h->opcode < UIW_OP_SEND || h->opcode > UIW_OP_SEND_SE_INV)) {
            term_on(ep, cause, "unsupported opcode on QN 0");
            return true;
        }
        if (!q->open && !ep->seg.rqe_valid) {
            /* uiwarp's Send with Immediate: the attached Immediate Data
             * takes no receive, the Send after it must follow
             * (docs/ENGINE.md; as the library's receiver) */
            if (imm && uiw_imm_is_attached(h->u.imm) && !ep->imm_attached) {
                uiw_useq_accept(q, h, ev->payload_len);
                ep->seg.kind = SEG_IMM_ATTACHED;
                return true;
            }
            if (ep->imm_attached && h->opcode != UIW_OP_SEND && h->opcode != UIW_OP_SEND_SE) {
                term_on(ep, cause, "attached Immediate Data without its Send");
                return true;
            }
        }
        if (!q->open && !ep->seg.rqe_valid) {
            if (!rqe_pop(ep)) {
                ep->seg.need_rqe = true; /* "Receiver not ready": wait */
                return false;
            }
        }
        if ((u64)h->mo + ev->payload_len > ep->seg.rqe_len) {
            cause.layer = UIW_LAYER_DDP;
            cause.etype = UIW_DDP_ET_UNTAGGED;
            cause.ecode = UIW_DDP_EC_U_MSG_TOO_LONG;
            term_on(ep, cause, "Send longer than the receive");
            return true;
        }
        uiw_useq_accept(q, h, ev->payload_len);
        ep->seg.kind = SEG_SEND;
        return true;
    }
    if (h->qn == UIW_QN_TERMINATE) {
        ep->seg.kind = SEG_TERM;
        return true;
    }
    term_on(ep, cause, "unsupported message");
    return true;
}

static void rx_payload(struct uiw_ep *ep, const uiw_rx_event *ev)
{
    const uiw_hdr *h = &ep->seg.h;
    uiw_term_cause cause;
    u32 i;

    if (ep->term_pending || ep->term_sent)
        return;
    if (ep->seg.kind == SEG_TAGGED) {
        if (place(ep->qp, h->stag,
                  h->opcode == UIW_OP_WRITE ? IB_ACCESS_REMOTE_WRITE : IB_ACCESS_LOCAL_WRITE,
                  h->to + ev->offset, ev->data, ev->len, &cause))
            term_on(ep, cause, "tagged buffer (changed)");
    } else if (ep->seg.kind == SEG_SEND) {
        u64 off = (u64)h->mo + ev->offset;
        const u8 *src = ev->data;
        u32 len = ev->len;

        for (i = 0; i < ep->seg.rqe.num_sge && len; i++) {
            const struct ib_sge *s = &ep->seg.rqe.sge[i];
            u32 n;

            if (off >= s->length) {
                off -= s->length;
                continue;
            }
            n = min_t(u64, len, s->length - off);
            if (place(ep->qp, s->lkey, IB_ACCESS_LOCAL_WRITE, s->addr + off, src, n, &cause)) {
                cause.layer = UIW_LAYER_RDMAP;
                cause.etype = UIW_RDMAP_ET_CATASTROPHIC;
                cause.ecode = UIW_RDMAP_EC_UNSPECIFIED;
                term_on(ep, cause, "receive buffer");
                return;
            }
            src += n;
            len -= n;
            off = 0;
        }
    }
}

/* qp->lock held: a local invalidation (mr_lock nests inside) */
static void local_inv(struct uiw_qp *qp, u32 stag)
{
    struct uiw_dev *d = to_udev(qp->base.device);
    struct uiw_mr *mr;

    spin_lock(&d->mr_lock);
    mr = xa_load(&d->mrs, stag >> 8);
    if (mr && mr->stag == stag && mr->base.pd == qp->base.pd && mr->base.type == IB_MR_TYPE_MEM_REG)
        mr->valid = false;
    spin_unlock(&d->mr_lock);
}

/* Remote invalidation (Send with Invalidate, RFC 5040 §5.3). True, or
 * false with *code the RDMAP Remote Protection code of the Terminate
 * (§7.2 items 4 and 5):
 * an STag that names no MR is invalid (as the engine); one of another PD
 * (not associated with this stream) or one that is not a fast-register
 * MR (the DMA MR) cannot be invalidated. */
static bool remote_inv(struct uiw_ep *ep, u32 stag, u8 *code)
{
    struct uiw_dev *d = to_udev(ep->qp->base.device);
    struct uiw_mr *mr;
    unsigned long fl;
    bool ok = false;

    spin_lock_irqsave(&d->mr_lock, fl);
    mr = xa_load(&d->mrs, stag >> 8);
    if (!mr || mr->stag != stag) {
        *code = UIW_RDMAP_EC_INVALID_STAG;
    } else if (mr->base.pd != ep->qp->base.pd || mr->base.type != IB_MR_TYPE_MEM_REG) {
        *code = UIW_RDMAP_EC_CANT_INVALIDATE;
    } else {
        mr->valid = false;
        ok = true;
    }
    spin_unlock_irqrestore(&d->mr_lock, fl);
    return ok;
}

/* RFC 7306 §5.1: FetchAdd adds Add Data to the target; with an Add Mask,
 * the masked bits are the ends of independent fields, so no carry
 * crosses out of them (each field's sum bit, without its carry) */
static u64 masked_add(u64 v, u64 add, u64 mask)
{
    return ((v & ~mask) + (add & ~mask)) ^ ((v ^ add) & mask);
}

/* Executes an Atomic Request on the aligned 64-bit word p (RFC 7306 §5.1,
 * §5.3: atomic against every other access, through the CPU's 64-bit
 * compare-and-swap); returns the original value. */
static u64 atomic_exec(u64 *p, const uiw_atomic_req *a)
{
    u64 old = READ_ONCE(*p), nv, cur;

    for (;;) {
        if (a->aop == UIW_AOP_FETCH_ADD) {
            nv = masked_add(old, a->add_swap, a->add_swap_mask);
        } else {
            /* CmpSwap: the masked bits swapped if the masked compare
             * matches, else the word unchanged */
            if ((a->compare ^ old) & a->compare_mask)
                return old;
            nv = (old & ~a->add_swap_mask) | (a->add_swap & a->add_swap_mask);
        }
        cur = cmpxchg64(p, old, nv);
        if (cur == old)
            return old;
        old = cur;
    }
}

/* An Atomic Request whose FPDU is complete: its target checked (RFC 7306
 * §8: an invalid STag, bounds or rights a Remote Protection error, a
 * target not 64-bit aligned a Remote Operation error, catastrophic for
 * the stream), executed, and its response queued in request order. */
static void atomic_req(struct uiw_ep *ep)
{
    const uiw_atomic_req *a = &ep->seg.h.u.atomic_req;
    struct uiw_dev *d = to_udev(ep->qp->base.device);
    uiw_term_cause cause;
    struct uiw_mr *mr;
    unsigned long fl;
    u64 n = 0, orig = 0;
    u8 *p = NULL;
    u32 at;

    spin_lock_irqsave(&d->mr_lock, fl);
    mr = mr_check(ep->qp, a->stag, IB_ACCESS_REMOTE_ATOMIC, a->to, 8, &cause);
    if (mr)
        p = mr_ptr(mr, a->to, 8, &n);
    if (p && n == 8 && !((uintptr_t)p & 7))
        orig = atomic_exec((u64 *)p, a);
    spin_unlock_irqrestore(&d->mr_lock, fl);
    if (!mr) {
        if (cause.layer == UIW_LAYER_DDP) {
            cause.layer = UIW_LAYER_RDMAP;
            cause.etype = UIW_RDMAP_ET_REMOTE_PROT;
            cause.ecode = cause.ecode == UIW_DDP_EC_T_BASE_BOUNDS      ? UIW_RDMAP_EC_BASE_BOUNDS
                          : cause.ecode == UIW_DDP_EC_T_STAG_NOT_ASSOC ? UIW_RDMAP_EC_STAG_NOT_ASSOC
                          : cause.ecode == UIW_DDP_EC_T_TO_WRAP        ? UIW_RDMAP_EC_TO_WRAP
                                                                       : UIW_RDMAP_EC_INVALID_STAG;
        }
        term_on(ep, cause, "Atomic Request target");
        return;
    }
    if (!p || n != 8 || ((uintptr_t)p & 7)) {
        cause.layer = UIW_LAYER_RDMAP;
        cause.etype = UIW_RDMAP_ET_REMOTE_OP;
        cause.ecode = UIW_RDMAP_EC_CATASTROPHIC_STREAM;
        term_on(ep, cause, "Atomic Request target not 64-bit aligned");
        return;
    }
    at = (ep->irq_head + ep->irq_count) % IRQ_LEN;
    ep->irq[at].atomic = true;
    ep->irq[at].aresp.req_id = a->req_id;
    ep->irq[at].aresp.orig_value = orig;
    ep->irq_count++;
}

/* An Atomic Response: the original value, a native 64-bit word, into the
 * request's 8-byte SGE (as the library), then its completion. */
static void atomic_resp(struct uiw_ep *ep)
{
    struct uiw_qp *qp = ep->qp;
    u32 slot = ep->orq[ep->orq_head].slot;
    u64 v = ep->seg.h.u.atomic_resp.orig_value;
    uiw_term_cause cause;
    struct ib_sge sge = {};
    unsigned long fl;
    bool live;

    spin_lock_irqsave(&qp->lock, fl);
    live = qp->state != IB_QPS_ERR && qp->sq[slot].num_sge == 1;
    if (live)
        sge = qp->sq[slot].sge[0];
    spin_unlock_irqrestore(&qp->lock, fl);
    ep->orq_head = (ep->orq_head + 1) % ORQ_LEN;
    ep->orq_count--;
    if (!live)
        return;
    if (place(qp, sge.lkey, IB_ACCESS_LOCAL_WRITE, sge.addr, (const u8 *)&v, 8, &cause)) {
        cause.layer = UIW_LAYER_RDMAP;
        cause.etype = UIW_RDMAP_ET_CATASTROPHIC;
        cause.ecode = UIW_RDMAP_EC_UNSPECIFIED;
        term_on(ep, cause, "Atomic Response sink");
        return;
    }
    sq_done(ep, slot, qp->sq_gen);
}

static void rx_end(struct uiw_ep *ep)
{
    const uiw_hdr *h = &ep->seg.h;
    struct uiw_qp *qp = ep->qp;

    /* A responder sends nothing before the initiator's first FPDU (the
     * wire core sets await_rtr on every accept, P2P or not):
     * it "MUST receive and validate at least one FPDU before sending any
     * FPDUs" (RFC 5044 §7.1.2 item 4), so all of it, its CRC checked,
     * not its header (the uiwarp library's initiator, with the Read RTR
     * or client-server, sends its first FPDU's trailer up to 20 ms after
     * the rest: answering at the header put our first FPDU before the
     * end of its RTR). */
    ep->tx_hold = false;
    ep->rx_whole = true; /* no wake-up needed (ep_wake) */
    if (ep->term_pending || ep->term_sent)
        return;
    /* A Read Request is answered only once its FPDU is complete and its
     * CRC good (RFC 5044 §4.4, §8 code 2: MPA passes no FPDU that fails
     * the CRC; RFC 5041 §4.1 L bit: a message is Delivered once all of
     * it is placed): answering at the header sent memory for a request
     * whose CRC was still to come. */
    if (ep->seg.kind == SEG_RREQ) {
        u32 at = (ep->irq_head + ep->irq_count) % IRQ_LEN;

        ep->irq[at].r = h->u.rreq;
        ep->irq[at].atomic = false;
        ep->irq_count++;
        return;
    }
    if (ep->seg.kind == SEG_AREQ) {
        atomic_req(ep);
        return;
    }
    if (ep->seg.kind == SEG_ARESP) {
        atomic_resp(ep);
        return;
    }
    if (!h->last)
        return;
    if (ep->seg.kind == SEG_IMM_ATTACHED) {
        memcpy(ep->imm_val, h->u.imm, sizeof(ep->imm_val));
        ep->imm_attached = true;
        return;
    }
    if (ep->seg.kind == SEG_TAGGED && h->opcode == UIW_OP_WRITE) {
        ep->last_write = true;
        return;
    }
    if (ep->seg.kind == SEG_TAGGED && h->opcode == UIW_OP_READ_RESP) {
        u32 slot = ep->orq[ep->orq_head].slot;

        ep->orq_head = (ep->orq_head + 1) % ORQ_LEN;
        ep->orq_count--;
        if (slot != ORQ_RTR) /* the Read RTR's response completes nothing */
            sq_done(ep, slot, qp->sq_gen);
    } else if (ep->seg.kind == SEG_SEND) {
        struct uiw_cq *rcq = to_ucq(qp->base.recv_cq);
        struct uiw_after af = AFTER_INIT;
        bool inv = h->opcode == UIW_OP_SEND_INV || h->opcode == UIW_OP_SEND_SE_INV;
        bool imm = h->opcode == UIW_OP_IMM_DATA || h->opcode == UIW_OP_IMM_DATA_SE;
        bool se = h->opcode == UIW_OP_SEND_SE || h->opcode == UIW_OP_SEND_SE_INV ||
                  h->opcode == UIW_OP_IMM_DATA_SE;
        struct ib_wc wc = {
            .wr_id = ep->seg.rqe.wr_id,
            .status = IB_WC_SUCCESS,
            .opcode = IB_WC_RECV,
            .byte_len = h->mo + ep->seg.payload_len,
            .qp = &qp->base,
        };
        bool notify = false;
        unsigned long fl;

        if (inv) {
            u8 code;

            if (!remote_inv(ep, h->inv_stag, &code)) {
                uiw_term_cause c = {UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, code};

                /* its receive: a remote invalidate request error */
                ep->seg.inv_failed = true;
                term_on(ep, c, "Send with Invalidate");
                return;
            }
            wc.wc_flags |= IB_WC_WITH_INVALIDATE;
            wc.ex.invalidate_rkey = h->inv_stag;
        }
        if (imm) {
            /* RFC 7306 §6: after an RDMA Write it completes the Write
             * with Immediate; on its own a receive with immediate data,
             * no bytes (as the library) */
            wc.opcode = ep->last_write ? IB_WC_RECV_RDMA_WITH_IMM : IB_WC_RECV;
            wc.wc_flags |= IB_WC_WITH_IMM;
            memcpy(&wc.ex.imm_data, h->u.imm, 4);
            wc.byte_len = 0;
        } else if (ep->imm_attached) {
            /* the Send of a Send with Immediate */
            wc.wc_flags |= IB_WC_WITH_IMM;
            memcpy(&wc.ex.imm_data, ep->imm_val, 4);
            ep->imm_attached = false;
        }
        ep->last_write = false;
        ep->seg.rqe_valid = false;
        spin_lock_irqsave(&qp->lock, fl);
        if (qp->state != IB_QPS_ERR) {
            spin_lock(&rcq->lock);
            if (uiw_cq_push_locked(rcq, &wc, se, &notify))
                uiw_after_add(af.overflow, rcq);
            spin_unlock(&rcq->lock);
            if (notify)
                uiw_after_add(af.notify, rcq);
        }
        spin_unlock_irqrestore(&qp->lock, fl);
        uiw_after_run(qp, &af);
    } else if (ep->seg.kind == SEG_TERM) {
        const uiw_term *t = &h->u.term;

        pr_info_ratelimited("%s: QP %u: Terminate received: %s/%s/%s\n", ep_name(ep),
                            qp->base.qp_num, uiw_term_layer_name(t->cause.layer),
                            uiw_term_etype_name(t->cause.layer, t->cause.etype),
                            uiw_term_ecode_name(t->cause.layer, t->cause.etype, t->cause.ecode));
        ep->term_sent = true; /* nothing more to send: close */
        qp_unlink(ep, IB_EVENT_QP_FATAL);
    }
}

/* Reads and parses what the socket has: 1 progress, 0 nothing, -EPIPE
 * the peer closed, <0 error. */
static int stream_rx(struct uiw_ep *ep)
{
    int progress = 0;
    u32 budget = 4 * RXBUF_LEN;

    while (ep->qp && !ep->term_sent && budget) {
        uiw_rx_event ev;
        size_t used;

        if (ep->seg.need_rqe) {
            if (!rqe_pop(ep))
                return progress;
            ep->seg.need_rqe = false;
            /* the header again, now with its receive */
            ev.hdr = &ep->seg.h;
            ev.payload_len = ep->seg.payload_len;
            ev.hdr_len = ep->seg.hdr_len;
            if (!rx_hdr(ep, &ev))
                return progress;
            progress = 1;
        }
        if (ep->rx_off == ep->rx_have) {
            int n = sock_recv(ep->sock, ep->rxb, RXBUF_LEN);

            ep->rx_off = ep->rx_have = 0;
            if (n == -EAGAIN)
                return progress;
            if (n < 0)
                return n;
            if (n == 0)
                return -EPIPE;
            ep->rx_have = n;
            budget -= min_t(u32, budget, n);
            progress = 1;
        }
        used = uiw_rx_feed(&ep->rx, ep->rxb + ep->rx_off, ep->rx_have - ep->rx_off, &ev);
        ep->rx_off += used;
        switch (ev.kind) {
        case UIW_RX_HDR:
            if (!rx_hdr(ep, &ev))
                return progress;
            break;
        case UIW_RX_PAYLOAD:
            rx_payload(ep, &ev);
            break;
        case UIW_RX_END:
            rx_end(ep);
            break;
        case UIW_RX_ERROR:
            terminate(ep, ev.cause, ev.bad_hdr, ev.bad_hdr_len, ev.why ? ev.why : "parser");
            ep->rx_off = ep->rx_have; /* MPA delivers nothing after (RFC 5044 §8) */
            return 1;
        default:
            break;
        }
        if (ep->term_pending)
            return 1;
    }
    if (!budget)
        ep_queue(ep); /* let others run; come back */
    return progress;
}

/* ep->mu held: the socket failed (a reset, or ETIMEDOUT: a dead peer,
 * sock_dead_peer, or TCP's own retransmission limit). The connection
 * ends as on a reset: the QP to ERR with IB_EVENT_QP_FATAL, its work
 * requests flushed, CLOSE to iw_cm (rdma_cm: DISCONNECTED). */
static void ep_sock_failed(struct uiw_ep *ep, int rc)
{
    if (rc == -ETIMEDOUT)
        pr_info("%s: peer %pISpc not answering (TCP timed out, peer_timeout_ms %u): connection "
                "closed\n",
                ep_name(ep), &ep->raddr, READ_ONCE(peer_timeout_ms));
    ep_teardown(ep, false, IB_EVENT_QP_FATAL);
}

/*
 * siw's first-FPDU race (docs/INTEROP.md §1, docs/KERNEL.md "The first
 * FPDU and siw"): Linux siw's responder sends its MPA Reply before it
 * installs the socket callback that reads FPDUs, and bytes that arrive in
 * between are not looked at until more bytes come. Nothing is held: the
 * RTR (peer-to-peer, RFC 6581 §9) and the ULP's messages go at once.
 * first_hold_ms after the attach (stream_start), if no whole FPDU came
 * from the peer, one more zero-length RDMA Write in the Write RTR's form
 * (STag 1, TO 0) goes, which RFC 5041 §7.1 leaves unvalidated: its arrival
 * wakes siw's callback, which then reads everything. A second one goes
 * WAKE_FACTOR times as late if the peer is still silent, then none; a
 * Terminate, ERR or a disconnect ends them. With the Write RTR a P2P
 * responder sends nothing before it took the RTR; with the Read RTR
 * (irdma's and cxgb4's pick) its answer, a zero-length Read Response, is
 * such an FPDU, so only a responder that missed the RTR gets a wake-up.
 * Client-server (no RTR) only when we sent something the peer could have
 * missed, so that a wake-up is never the stream's first FPDU (RFC 5044
 * §7.1.2). Until stop 35 (2026-11-28) the Read RTR and client-server held the first
 * FPDU first_hold_ms instead.
 * ep->mu held, FPDU mode.
 */
static void ep_wake(struct uiw_ep *ep)
{
    enum ib_qp_state st;
    unsigned long fl;

    if (!ep->wakes || !test_and_clear_bit(EPF_WAKE, &ep->flags))
        return;
    ep->hold_armed = false; /* it ran; ep_hold_fn dropped its reference */
    spin_lock_irqsave(&ep->qp->lock, fl);
    st = ep->qp->state;
    spin_unlock_irqrestore(&ep->qp->lock, fl);
    if (ep->rx_whole || st != IB_QPS_RTS || ep->term_pending || ep->term_sent || ep->fin_sent ||
        (!ep->neg.result.p2p && !ep->tx.stream_off)) {
        /* the peer spoke, the connection is ending, or (client-server) we
         * sent nothing it could have missed */
        ep->wakes = 0;
        return;
    }
    ep->wakes--;
    /* the Write RTR's form, next between messages; an RTR that has not
     * gone yet wakes the peer itself */
    if (!ep->rtr_send)
        ep->rtr_send = UIW_RTR_WRITE;
    pr_debug("%s: QP %u: no FPDU from the peer yet: a wake-up (zero-length Write)\n", ep_name(ep),
             ep->qp->base.qp_num);
    if (ep->wakes)
        ep_hold_arm(ep, msecs_to_jiffies(ep->wake_ms * WAKE_FACTOR));
}

/* ep->mu held: FPDU mode. */
static void ep_stream(struct uiw_ep *ep)
{
    int i;

    for (i = 0; i < 64; i++) {
        int rx = 0, tx;
        bool closing;

        if (test_and_clear_bit(EPF_ABORT, &ep->flags) || !ep->qp) {
            ep_teardown(ep, false, -1);
            return;
        }
        /* a dead peer on an idle connection, or one whose receive side
         * is not read (a Send waits for a receive, a Terminate sent):
         * looked at without taking the error, which a read may take */
        if (READ_ONCE(ep->sock->sk->sk_err) == ETIMEDOUT) {
            ep_sock_failed(ep, -ETIMEDOUT);
            return;
        }
        ep_wake(ep);
        if (ep->fin_sent && test_and_clear_bit(EPF_MPA_TIMEOUT, &ep->flags)) {
            /* the close timer: no FIN came back (a peer that never
             * closes, or a Send held for a receive, so the FIN is not
             * read): CLOSE to iw_cm, the QP to ERR, the socket released */
            ep->mpa_armed = false;
            pr_info("%s: no FIN from %pISpc in %u ms after ours: connection closed\n", ep_name(ep),
                    &ep->raddr, close_timeout_ms);
            ep_teardown(ep, false, -1);
            return;
        }
        if (!ep->term_sent) {
            rx = stream_rx(ep);
            if (rx == -EPIPE) {
                /* the peer's FIN: DISCONNECT, then CLOSE; inside an
                 * FPDU the stream broke, a fatal error (as the library) */
                ep_teardown(ep, true, uiw_rx_idle(&ep->rx) ? -1 : IB_EVENT_QP_FATAL);
                return;
            }
            if (rx < 0) {
                ep_sock_failed(ep, rx);
                return;
            }
        }
        if (ep->state != EP_RDMA)
            return;
        tx = stream_tx(ep);
        if (tx < 0) {
            ep_sock_failed(ep, READ_ONCE(ep->sock->sk->sk_err) == ETIMEDOUT ? -ETIMEDOUT : tx);
            return;
        }
        if (ep->state != EP_RDMA)
            return;
        if (!ep->qp || (ep->term_sent && !ep->fpdu_busy)) {
            ep_teardown(ep, false, -1);
            return;
        }
        /* iw_cm's graceful disconnect (QP in SQD) or an ERR with the
         * connection up: once nothing is half sent, our FIN */
        {
            unsigned long fl;
            enum ib_qp_state st;
            bool idle;

            spin_lock_irqsave(&ep->qp->lock, fl);
            st = ep->qp->state;
            idle = ep->qp->sq_sent == ep->qp->sq_count;
            spin_unlock_irqrestore(&ep->qp->lock, fl);
            if (st == IB_QPS_ERR && !ep->term_pending && ep->msg_kind != MSG_TERM) {
                ep_teardown(ep, false, -1);
                return;
            }
            closing = st == IB_QPS_SQD && idle && ep->msg_kind == MSG_NONE && !ep->fpdu_busy;
        }
        if (closing && !ep->fin_sent) {
            ep->fin_sent = true;
            kernel_sock_shutdown(ep->sock, SHUT_WR);
            /* RFC 793 bounds no wait for the peer's FIN (FIN-WAIT-2): the
             * close timer does, as the library's orderly close */
            if (close_timeout_ms)
                ep_timer_arm(ep, close_timeout_ms);
        }
        if (!rx && !tx)
            return;
    }
    ep_queue(ep);
}

/* ------------------------------------------------------------------------
 * MPA
 * ---------------------------------------------------------------------- */

/* Reads the peer's frame into mpabuf (never a byte past it). 1 complete,
 * 0 more to come, <0 error. */
static int mpa_read(struct uiw_ep *ep, unsigned int kind)
{
    for (;;) {
        size_t want = uiw_mpa_frame_want(ep->mpabuf, ep->mpa_have);
        uiw_mpa_frame f;
        int n, rc;

        if (ep->mpa_have >= UIW_MPA_HDR_LEN) {
            rc = uiw_mpa_decode(ep->mpabuf, ep->mpa_have, kind, &f);
            if (rc > 0)
                return 1;
            if (rc != -EAGAIN)
                return rc;
        }
        if (want <= ep->mpa_have)
            return -EPROTO;
        n = sock_recv(ep->sock, ep->mpabuf + ep->mpa_have, want - ep->mpa_have);
        if (n == -EAGAIN)
            return 0;
        if (n < 0)
            return n;
        if (n == 0)
            return -ESHUTDOWN; /* an orderly close (a reset is -ECONNRESET) */
        ep->mpa_have += n;
    }
}

/*
 * Active side: connect, send the Request. The TCP connect is non-blocking:
 * the socket's callbacks are installed first, so its state change (the
 * handshake done, a reset, the kernel's own SYN retries given up) runs the
 * work item, which asks connect() again for the outcome (0 connected,
 * -EALREADY still under way, else the error). A connection still not up
 * after connect_timeout_ms ends the connect with -ETIMEDOUT (rdma_cm:
 * RDMA_CM_EVENT_UNREACHABLE), as the MPA timer does; a SYN that is never
 * answered would otherwise hold it for the kernel's SYN retries (about
 * 127 s by default), and destroy_qp with it.
 */
static void active_connect(struct uiw_ep *ep)
{
    uiw_mpa_policy pol;
    u8 out[UIW_MPA_MAX_FRAME];
    int rc, len;

    len =
        ep->raddr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (!ep->tcp_started) {
        ep->tcp_started = true;
        sock_attach(ep);
        if (connect_timeout_ms)
            ep_timer_arm(ep, connect_timeout_ms);
    } else if (test_and_clear_bit(EPF_MPA_TIMEOUT, &ep->flags)) {
        ep->mpa_armed = false;
        pr_info("%s: no TCP connection to %pISpc in %u ms: connect failed\n", ep_name(ep),
                &ep->raddr, connect_timeout_ms);
        rc = -ETIMEDOUT;
        goto fail;
    }
    rc = kernel_connect(ep->sock, (struct sockaddr *)&ep->raddr, len, O_NONBLOCK);
    if (rc == -EINPROGRESS || rc == -EALREADY)
        return; /* the socket's state change or the timer comes back */
    if (rc)
        goto fail;
    ep_mpa_disarm(ep);
    {
        struct sockaddr_storage a;

        if (kernel_getsockname(ep->sock, (struct sockaddr *)&a) > 0)
            ep->laddr = a;
    }
    make_policy(&pol, ep->ird, ep->ord, ep->pd, ep->pd_len);
    if (ep->rev1) {
        /* RFC 5044 alone: no IRD/ORD words, so no peer-to-peer mode */
        pol.rev = 1;
        pol.p2p = false;
        pol.rtr_offer = 0;
    }
    rc = uiw_mpa_neg_start_initiator(&ep->neg, &pol, out, sizeof(out));
    if (rc < 0)
        goto fail;
    ep->state = EP_WAIT_REP;
    ep_mpa_arm(ep);
    rc = sock_send_all(ep->sock, out, rc);
    if (rc)
        goto fail;
    ep_queue(ep); /* the Reply may be there already */
    return;
fail:
    pr_debug("%s: connect: %d\n", ep_name(ep), rc);
    /* rdma_cm: -ECONNREFUSED REJECTED, -ETIMEDOUT UNREACHABLE, else
     * CONNECT_ERROR */
    upcall(ep, ep->cm_id, IW_CM_EVENT_CONNECT_REPLY,
           rc == -ECONNREFUSED || rc == -ETIMEDOUT ? rc : -ECONNRESET, NULL, 0, NULL);
    ep->state = EP_IDLE;
    ep_teardown(ep, false, -1);
}

/*
 * Initiator: the Reply failed a check that RFC 6581 answers with a
 * Terminate before the close (§9.1: the responder's ORD exceeds the IRD we
 * can have, LLP / MPA / code 6 "insufficient IRD resources"; §9.2: A not
 * mirrored or no RTR type we can send, code 7 "no matching RTR model").
 * The Terminate is the first FPDU of the stream (RFC 5040 §4.8: untagged,
 * QN 2, MSN 1, MO 0, L; an LLP error carries no headers), framed as the
 * negotiation would have had it (CRC, markers: RFC 5044 §7.1.1). A
 * malformed Reply (code 4) gets none: RFC 5044 §8 closes at once.
 */
static void mpa_send_term(struct uiw_ep *ep, const uiw_mpa_neg *n)
{
    uiw_tx_cfg cfg = {.crc = n->result.crc, .markers = n->result.markers_tx, .max_fpdu = 1024};
    uiw_fpdu *f = kmalloc(sizeof(*f), GFP_KERNEL);
    struct msghdr m = {.msg_flags = MSG_NOSIGNAL | MSG_DONTWAIT | MSG_EOR};
    uiw_tx_msg msg;
    uiw_tx tx;
    uiw_hdr h;
    int rc = -ENOMEM;

    if (f) {
        uiw_hdr_init_untagged(&h, UIW_OP_TERMINATE, UIW_QN_TERMINATE, 1);
        uiw_term_attach(&h.u.term, n->term, NULL, 0);
        rc = uiw_tx_init(&tx, &cfg) ?: uiw_tx_msg_init(&msg, &h, NULL, 0, 0);
        if (!rc)
            rc = uiw_tx_next(&tx, &msg, f) == 1 ? 0 : -EINVAL;
        if (!rc) {
            rc = kernel_sendmsg(ep->sock, &m, (struct kvec *)f->iov, f->iovcnt, f->bytes);
            rc = rc == (int)f->bytes ? 0 : (rc < 0 ? rc : -EIO);
        }
        kfree(f);
    }
    pr_info(
        "%s: MPA Reply refused (%s): Terminate %s/%s/%s %s\n", ep_name(ep), n->why ? n->why : "",
        uiw_term_layer_name(n->term.layer), uiw_term_etype_name(n->term.layer, n->term.etype),
        uiw_term_ecode_name(n->term.layer, n->term.etype, n->term.ecode), rc ? "not sent" : "sent");
}

static int sock_new(struct uiw_dev *d, int family, struct socket **s);
static int addr_len(const struct sockaddr_storage *a);

/*
 * Revision 1 fallback (docs/ENGINE.md "MPA revision 1 fallback", as the
 * library): an RNIC running MPA revision 1 resets the TCP connection when
 * a revision 2 Request (RFC 6581 §10) arrives, and RNIC initiators then
 * connect once more at revision 1 (RFC 5044 §7.1: no IRD/ORD words, no
 * peer-to-peer mode). So does this one, when the reset comes before any
 * byte of a Reply: a new socket from the same address (a new port), the
 * same private data and IRD/ORD. Once per connection. True if under way.
 */
static bool active_rev1_retry(struct uiw_ep *ep, int rc)
{
    struct sockaddr_storage src = ep->laddr;

    if (rc != -ECONNRESET || ep->rev1 || !mpa_rev1_fallback || mpa_rev != 2 || ep->mpa_have)
        return false;
    pr_info("%s: the peer reset the MPA revision 2 Request: trying revision 1\n", ep_name(ep));
    ep->rev1 = true;
    sock_close(ep);
    if (src.ss_family == AF_INET6)
        ((struct sockaddr_in6 *)&src)->sin6_port = 0;
    else
        ((struct sockaddr_in *)&src)->sin_port = 0;
    if (sock_new(ep->dev, ep->raddr.ss_family, &ep->sock) ||
        kernel_bind(ep->sock, (struct sockaddr *)&src, addr_len(&src))) {
        if (ep->sock)
            sock_release(ep->sock);
        ep->sock = NULL;
        return false;
    }
    ep->state = EP_CONNECTING;
    ep->tcp_started = false;
    ep_queue(ep);
    return true;
}

static void active_reply(struct uiw_ep *ep)
{
    uiw_mpa_neg *n = &ep->neg;
    size_t olen = 0;
    int rc;

    if (test_and_clear_bit(EPF_MPA_TIMEOUT, &ep->flags)) {
        /* no (whole) Reply within mpa_timeout_ms: -ETIMEDOUT, which
         * rdma_cm reports as RDMA_CM_EVENT_UNREACHABLE */
        pr_info("%s: no MPA Reply in %u ms: connection closed\n", ep_name(ep), mpa_timeout_ms);
        ep->mpa_armed = false;
        rc = -ETIMEDOUT;
        goto fail;
    }
    rc = mpa_read(ep, UIW_MPA_REPLY);
    if (rc == 0)
        return;
    ep_mpa_disarm(ep);
    if (active_rev1_retry(ep, rc))
        return;
    if (rc == -ESHUTDOWN)
        rc = -ECONNRESET;
    if (rc > 0) {
        rc = uiw_mpa_neg_feed(n, ep->mpabuf, ep->mpa_have, NULL, 0, &olen);
        if (rc >= 0 && n->state == UIW_MPA_S_DONE) {
            rc = stream_start(ep, ep->qp);
            /* stream_start took its own reference: drop connect's */
            if (!rc) {
                uiw_qp_put(ep->qp);
                ep->ird = n->result.ird;
                ep->ord = n->result.ord;
                upcall(ep, ep->cm_id, IW_CM_EVENT_CONNECT_REPLY, 0, n->result.peer_pd,
                       n->result.peer_pd_len, NULL);
                ep_queue(ep); /* FPDUs may have come with the Reply */
                return;
            }
        } else if (rc >= 0 && n->state == UIW_MPA_S_REJECTED) {
            upcall(ep, ep->cm_id, IW_CM_EVENT_CONNECT_REPLY, -ECONNREFUSED, n->result.peer_pd,
                   n->result.peer_pd_len, NULL);
            ep->state = EP_IDLE;
            ep_teardown(ep, false, -1);
            return;
        } else if (n->state == UIW_MPA_S_FAILED) {
            if (n->term_valid && n->term_send)
                mpa_send_term(ep, n);
            /* the cause for iw_cm: -EPROTO, -EOPNOTSUPP, -ENOBUFS
             * (rdma_cm: RDMA_CM_EVENT_CONNECT_ERROR) */
            rc = n->error ? n->error : -EPROTO;
        } else {
            rc = -ECONNRESET;
        }
    }
fail:
    pr_debug("%s: MPA Reply: %d (%s)\n", ep_name(ep), rc, n->why ? n->why : "");
    upcall(ep, ep->cm_id, IW_CM_EVENT_CONNECT_REPLY, rc, NULL, 0, NULL);
    ep->state = EP_IDLE;
    ep_teardown(ep, false, -1);
}

/* Passive side: the Request, then CONNECT_REQUEST to the listener's id. */
static void passive_request(struct uiw_ep *ep)
{
    struct uiw_ep *l = ep->listener;
    uiw_mpa_policy pol;
    u8 out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;
    int rc;

    if (test_and_clear_bit(EPF_MPA_TIMEOUT, &ep->flags)) {
        /* no (whole) Request within mpa_timeout_ms: closed, the ULP
         * never hears of it */
        ep->mpa_armed = false;
        rc = -ETIMEDOUT;
        pr_info("%s: no MPA Request in %u ms: connection closed\n", ep_name(ep), mpa_timeout_ms);
        goto drop;
    }
    rc = mpa_read(ep, UIW_MPA_REQUEST);
    if (rc == 0)
        return;
    if (rc < 0)
        goto drop;
    /* a trial with the defaults: MPA-level refusals never reach the ULP */
    make_policy(&pol, UIW_MPA_DEFAULT_IRD, UIW_MPA_DEFAULT_ORD, NULL, 0);
    uiw_mpa_neg_start_responder(&ep->neg, &pol);
    (void)uiw_mpa_neg_feed(&ep->neg, ep->mpabuf, ep->mpa_have, out, sizeof(out), &olen);
    if (ep->neg.state == UIW_MPA_S_REJECTED && olen) {
        (void)sock_send_all(ep->sock, out, olen);
        goto drop;
    }
    if (ep->neg.state != UIW_MPA_S_DONE)
        goto drop;
    /*
     * The Request's own IRD and ORD, as siw and cxgb4 report them in the
     * connect request event: rdma_cm turns ird into the ULP's
     * initiator_depth (at most the peer's IRD: the Reads this end may have
     * outstanding) and ord into its responder_resources (at least the
     * peer's ORD). nvmet-rdma accepts with initiator_depth = that ird
     * capped by the device, and needs it to Read a host's data.
     */
    ep->ird = ep->neg.result.peer_ird;
    ep->ord = ep->neg.result.peer_ord;
    /* RFC 5044 alone (revision 1, or a revision 2 Request without S):
     * no IRD/ORD words, the defaults go to the ULP as the library's */
    if (!ep->neg.result.enhanced)
        ep->ird = ep->ord = UIW_MPA_DEFAULT_IRD;
    pr_debug("%s: MPA Request revision %u%s, answered at revision %u\n", ep_name(ep),
             ep->neg.peer.rev, ep->neg.result.enhanced ? " (RFC 6581)" : "", ep->neg.result.rev);
    mutex_lock_nested(&l->mu, SINGLE_DEPTH_NESTING);
    if (l->state != EP_LISTEN || !l->cm_id) {
        mutex_unlock(&l->mu);
        goto drop;
    }
    ep_mpa_disarm(ep);
    ep->state = EP_REQ_PENDING;
    /* the ULP's answer is bounded (passive_pending) */
    if (accept_timeout_ms)
        ep_timer_arm(ep, accept_timeout_ms);
    kref_get(&ep->ref); /* iw_cm's provider_data, until accept or reject */
    upcall(ep, l->cm_id, IW_CM_EVENT_CONNECT_REQUEST, 0, ep->neg.result.peer_pd,
           ep->neg.result.peer_pd_len, ep);
    mutex_unlock(&l->mu);
    return;
drop:
    pr_debug("%s: incoming connection dropped: %d (%s)\n", ep_name(ep), rc,
             ep->neg.why ? ep->neg.why : "");
    ep_teardown(ep, false, -1);
}

/* An MPA Reject (RFC 5044 §7.1.3: the Reply with R) with the ULP's
 * private data, for the Request in mpabuf. */
static void mpa_send_reject(struct uiw_ep *ep, const void *pd, u8 len)
{
    uiw_mpa_policy pol;
    u8 out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;

    if (len)
        memcpy(ep->pd, pd, len);
    make_policy(&pol, UIW_MPA_DEFAULT_IRD, UIW_MPA_DEFAULT_ORD, ep->pd, len);
    pol.responder_rejects = true;
    uiw_mpa_neg_start_responder(&ep->neg, &pol);
    (void)uiw_mpa_neg_feed(&ep->neg, ep->mpabuf, ep->mpa_have, out, sizeof(out), &olen);
    if (olen)
        (void)sock_send_all(ep->sock, out, olen);
}

/*
 * Passive side, the ULP holds the connect request (EP_REQ_PENDING). A ULP
 * that neither accepts nor rejects it within accept_timeout_ms would hold
 * the socket and the initiator for ever (iw_cm and rdma_cm set no bound
 * on iWARP): it is rejected (an MPA Reject without private data, so the
 * initiator hears a refusal rather than a close or a reset, which an
 * initiator may retry at revision 1) and closed. iw_cm still holds the
 * request and its reference on the endpoint: the late accept or reject
 * fails with -ETIMEDOUT and lets go of it.
 */
static void passive_pending(struct uiw_ep *ep)
{
    if (!test_and_clear_bit(EPF_MPA_TIMEOUT, &ep->flags))
        return;
    ep->mpa_armed = false;
    pr_info("%s: connect request from %pISpc not answered in %u ms: rejected\n", ep_name(ep),
            &ep->raddr, accept_timeout_ms);
    mpa_send_reject(ep, NULL, 0);
    ep->ulp_late = true;
    ep_teardown(ep, false, -1);
}

/* Listener: take every connection waiting. */
static void listen_accept(struct uiw_ep *l)
{
    for (;;) {
        struct socket *ns;
        struct uiw_ep *ep;
        int rc = kernel_accept(l->sock, &ns, O_NONBLOCK);

        if (rc)
            return;
        ep = ep_new(l->dev);
        if (!ep) {
            sock_release(ns);
            continue;
        }
        ep->sock = ns;
        sock_dead_peer(ns->sk);
        ep->state = EP_WAIT_REQ;
        kref_get(&l->ref);
        ep->listener = l;
        kernel_getsockname(ns, (struct sockaddr *)&ep->laddr);
        kernel_getpeername(ns, (struct sockaddr *)&ep->raddr);
        ep_mpa_arm(ep);
        sock_attach(ep);
        ep_queue(ep);
        ep_put(ep); /* the socket's reference keeps it */
    }
}

static void ep_work(struct work_struct *w)
{
    struct uiw_ep *ep = container_of(w, struct uiw_ep, work);

    mutex_lock(&ep->mu);
    switch (ep->state) {
    case EP_LISTEN:
        listen_accept(ep);
        break;
    case EP_CONNECTING:
        active_connect(ep);
        break;
    case EP_WAIT_REP:
        active_reply(ep);
        break;
    case EP_WAIT_REQ:
        passive_request(ep);
        break;
    case EP_REQ_PENDING:
        passive_pending(ep);
        break;
    case EP_RDMA:
        ep_stream(ep);
        break;
    default:
        break;
    }
    mutex_unlock(&ep->mu);
    ep_put(ep);
}

/* ------------------------------------------------------------------------
 * iw_cm callbacks
 * ---------------------------------------------------------------------- */

static struct uiw_qp *qp_get_ref(struct ib_device *ibdev, u32 qpn)
{
    struct uiw_dev *d = to_udev(ibdev);
    struct uiw_qp *qp;

    xa_lock(&d->qps);
    qp = xa_load(&d->qps, qpn);
    if (qp && !kref_get_unless_zero(&qp->ref))
        qp = NULL;
    xa_unlock(&d->qps);
    return qp;
}

static void uiw_iw_add_ref(struct ib_qp *ibqp)
{
    kref_get(&to_uqp(ibqp)->ref);
}

static void uiw_iw_rem_ref(struct ib_qp *ibqp)
{
    uiw_qp_put(to_uqp(ibqp));
}

static struct ib_qp *uiw_iw_get_qp(struct ib_device *ibdev, int qpn)
{
    struct uiw_qp *qp = xa_load(&to_udev(ibdev)->qps, qpn);

    return qp ? &qp->base : NULL;
}

static int sock_new(struct uiw_dev *d, int family, struct socket **s)
{
    int rc = sock_create_kern(dev_net(d->netdev), family, SOCK_STREAM, IPPROTO_TCP, s);

    if (rc)
        return rc;
    sock_set_reuseaddr((*s)->sk);
    sock_dead_peer((*s)->sk); /* the active side's and the listener's */
    return 0;
}

static int addr_len(const struct sockaddr_storage *a)
{
    return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static int uiw_iw_connect(struct iw_cm_id *id, struct iw_cm_conn_param *p)
{
    struct uiw_dev *d = to_udev(id->device);
    unsigned long fl;
    struct uiw_qp *qp;
    struct uiw_ep *ep;
    int rc;

    if (p->private_data_len > UIW_MPA_MAX_PD - UIW_MPA_RFC6581_LEN)
        return -EINVAL;
    if (id->m_remote_addr.ss_family != AF_INET && id->m_remote_addr.ss_family != AF_INET6)
        return -EAFNOSUPPORT;
    qp = qp_get_ref(id->device, p->qpn);
    if (!qp)
        return -EINVAL;
    ep = ep_new(d);
    if (!ep) {
        uiw_qp_put(qp);
        return -ENOMEM;
    }
    ep->active = true;
    ep->qp = qp; /* a reference until stream_start takes its own */
    ep->laddr = id->m_local_addr;
    ep->raddr = id->m_remote_addr;
    ep->ird = p->ird;
    ep->ord = p->ord;
    memcpy(ep->pd, p->private_data, p->private_data_len);
    ep->pd_len = p->private_data_len;
    rc = sock_new(d, ep->raddr.ss_family, &ep->sock);
    if (rc)
        goto err;
    /* the address rdma_cm chose, its port too (siw does the same) */
    rc = kernel_bind(ep->sock, (struct sockaddr *)&ep->laddr, addr_len(&ep->laddr));
    if (rc) {
        goto err;
    }
    /* attached at once: destroy_qp ends a connect in progress too */
    spin_lock_irqsave(&qp->lock, fl);
    if (qp->ep) {
        rc = -EBUSY;
    } else {
        kref_get(&ep->ref);
        qp->ep = ep;
    }
    spin_unlock_irqrestore(&qp->lock, fl);
    if (rc)
        goto err;
    id->add_ref(id);
    ep->cm_id = id;
    id->provider_data = ep;
    ep->state = EP_CONNECTING;
    ep_queue(ep);
    ep_put(ep); /* the work's reference, then the socket's, keep it */
    return 0;
err:
    if (ep->sock)
        sock_release(ep->sock);
    ep->sock = NULL;
    ep->qp = NULL;
    uiw_qp_put(qp);
    ep_put(ep);
    return rc;
}

static int uiw_iw_accept(struct iw_cm_id *id, struct iw_cm_conn_param *p)
{
    struct uiw_ep *ep = id->provider_data;
    uiw_mpa_policy pol;
    u8 out[UIW_MPA_MAX_FRAME];
    size_t olen = 0;
    struct uiw_qp *qp;
    int rc;

    if (!ep)
        return -EINVAL;
    mutex_lock(&ep->mu);
    /* iw_cm calls nothing more for a connect request whose accept failed
     * (iw_cm_accept: the id goes back to IDLE), so every failure below
     * ends the connection and lets go of provider_data */
    if (ep->state != EP_REQ_PENDING) {
        /* rejected by accept_timeout_ms (passive_pending) */
        rc = ep->ulp_late ? -ETIMEDOUT : -ECONNRESET;
        goto fail;
    }
    ep_mpa_disarm(ep); /* accept_timeout_ms */
    qp = qp_get_ref(id->device, p->qpn);
    if (!qp) {
        rc = -EINVAL;
        goto fail;
    }
    if (p->private_data_len > UIW_MPA_MAX_PD - UIW_MPA_RFC6581_LEN) {
        uiw_qp_put(qp);
        rc = -EINVAL;
        goto fail;
    }
    memcpy(ep->pd, p->private_data, p->private_data_len);
    make_policy(&pol, p->ird, p->ord, ep->pd, p->private_data_len);
    uiw_mpa_neg_start_responder(&ep->neg, &pol);
    (void)uiw_mpa_neg_feed(&ep->neg, ep->mpabuf, ep->mpa_have, out, sizeof(out), &olen);
    if (ep->neg.state != UIW_MPA_S_DONE || !olen) {
        if (olen)
            (void)sock_send_all(ep->sock, out, olen);
        uiw_qp_put(qp);
        rc = -ECONNREFUSED;
        goto fail;
    }
    id->add_ref(id);
    ep->cm_id = id;
    rc = stream_start(ep, qp);
    uiw_qp_put(qp);
    if (rc)
        goto fail;
    rc = sock_send_all(ep->sock, out, olen);
    if (rc)
        goto fail;
    upcall(ep, id, IW_CM_EVENT_ESTABLISHED, 0, NULL, 0, NULL);
    ep_queue(ep);
    mutex_unlock(&ep->mu);
    ep_put(ep); /* iw_cm's provider_data */
    return 0;
fail:
    /* iw_cm reports the failure itself: no event, let go of the id */
    if (ep->state == EP_RDMA)
        ep->state = EP_IDLE;
    ep_teardown(ep, false, -1);
    mutex_unlock(&ep->mu);
    id->provider_data = NULL;
    ep_put(ep);
    return rc;
}

static int uiw_iw_reject(struct iw_cm_id *id, const void *pdata, u8 len)
{
    struct uiw_ep *ep = id->provider_data;
    int rc = 0;

    if (!ep)
        return -EINVAL;
    mutex_lock(&ep->mu);
    if (ep->state == EP_REQ_PENDING) {
        mpa_send_reject(ep, pdata, len);
        ep_teardown(ep, false, -1);
    } else if (ep->ulp_late) {
        rc = -ETIMEDOUT; /* rejected already by accept_timeout_ms */
    }
    mutex_unlock(&ep->mu);
    id->provider_data = NULL;
    ep_put(ep); /* iw_cm's provider_data */
    return rc;
}

static int uiw_iw_create_listen(struct iw_cm_id *id, int backlog)
{
    struct uiw_dev *d = to_udev(id->device);
    struct uiw_ep *ep = ep_new(d);
    int rc;

    if (!ep)
        return -ENOMEM;
    ep->laddr = id->m_local_addr;
    rc = sock_new(d, ep->laddr.ss_family, &ep->sock);
    if (rc)
        goto err;
    rc = kernel_bind(ep->sock, (struct sockaddr *)&ep->laddr, addr_len(&ep->laddr));
    if (rc)
        goto err;
    rc = kernel_listen(ep->sock, max(backlog, 16));
    if (rc)
        goto err;
    id->add_ref(id);
    ep->cm_id = id;
    id->provider_data = ep;
    ep->state = EP_LISTEN;
    mutex_lock(&ep->mu);
    sock_attach(ep);
    mutex_unlock(&ep->mu);
    pr_debug("%s: listening on %pISpc\n", ep_name(ep), &ep->laddr);
    return 0; /* the reference from ep_new is the cm_id's */
err:
    pr_debug("%s: listen on %pISpc: %d\n", ep_name(ep), &ep->laddr, rc);
    if (ep->sock)
        sock_release(ep->sock);
    ep->sock = NULL;
    ep_put(ep);
    return rc;
}

static int uiw_iw_destroy_listen(struct iw_cm_id *id)
{
    struct uiw_ep *ep = id->provider_data;

    if (!ep)
        return 0;
    mutex_lock(&ep->mu);
    sock_close(ep);
    ep->state = EP_CLOSED;
    ep->cm_id = NULL;
    mutex_unlock(&ep->mu);
    id->provider_data = NULL;
    id->rem_ref(id);
    ep_put(ep);
    return 0;
}

void uiw_cm_srq_wake_locked(struct uiw_srq *srq)
{
    struct uiw_ep *ep, *n;

    list_for_each_entry_safe(ep, n, &srq->waiters, srq_node) {
        list_del_init(&ep->srq_node);
        /* the list's reference becomes the work's; when the work is
         * pending already it has one, so this is never the last */
        if (!queue_work(uiw_wq, &ep->work))
            kref_put(&ep->ref, ep_free);
    }
}

/* qp->lock held (any context). */
void uiw_cm_qp_kick(struct uiw_qp *qp)
{
    if (qp->ep)
        ep_queue(qp->ep);
}

/* destroy_qp (process context): the connection, if any, ends now. */
void uiw_cm_qp_detach(struct uiw_qp *qp)
{
    struct uiw_ep *ep;
    unsigned long fl;

    spin_lock_irqsave(&qp->lock, fl);
    ep = qp->ep;
    if (ep)
        kref_get(&ep->ref);
    spin_unlock_irqrestore(&qp->lock, fl);
    if (!ep)
        return;
    mutex_lock(&ep->mu);
    if (ep->qp == qp)
        ep_teardown(ep, false, -1);
    mutex_unlock(&ep->mu);
    ep_put(ep);
}

const struct ib_device_ops uiw_cm_ops = {
    .iw_add_ref = uiw_iw_add_ref,
    .iw_rem_ref = uiw_iw_rem_ref,
    .iw_get_qp = uiw_iw_get_qp,
    .iw_connect = uiw_iw_connect,
    .iw_accept = uiw_iw_accept,
    .iw_reject = uiw_iw_reject,
    .iw_create_listen = uiw_iw_create_listen,
    .iw_destroy_listen = uiw_iw_destroy_listen,
};

int uiw_cm_init(void)
{
    uiw_wq = alloc_workqueue("uiwarp", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
    return uiw_wq ? 0 : -ENOMEM;
}

void uiw_cm_exit(void)
{
    int n;

    destroy_workqueue(uiw_wq);
    n = atomic_read(&uiw_neps);
    if (n)
        pr_err("uiwarp: objects left at unload: %d connection endpoints\n", n);
}
