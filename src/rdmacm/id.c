/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rdma_cm ids over the engine's connection manager.
 *
 * Addresses and ports. rdma_bind_addr reserves the TCP address/port with a
 * bound socket (SO_REUSEADDR), so port 0 gets its real port at once and a
 * port in use fails with EADDRINUSE; rdma_resolve_addr binds implicitly to
 * the source address the route lookup picks, as the kernel's rdma_cm does.
 * The engine's listening or connecting socket then binds the same
 * address/port (also SO_REUSEADDR) and the reservation is closed.
 *
 * iWARP specifics (the kernel's iw_cm + siw are the model): route
 * resolution is immediate; private data goes to the peer unchanged;
 * rdma_disconnect is an orderly TCP close (the engine flushes the QP);
 * CONNECT_RESPONSE never happens, so rdma_establish has nothing to do.
 * The QP reaches RTS when the engine attaches the connected socket.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm_int.h"
#include "uiw_sys.h"

/* ------------------------------------------------------------------------
 * Allocation
 * ---------------------------------------------------------------------- */

int rcm_id_alloc(struct rcm_channel *ch, void *context, enum rdma_port_space ps,
                 enum ibv_qp_type qpt, struct rcm_id **out)
{
    struct rcm_id *x = calloc(1, sizeof(*x));
    if (!x)
        return -ENOMEM;
    bool sync = ch == NULL;
    if (sync) {
        ch = rcm_channel_new();
        if (!ch) {
            int e = errno;
            free(x);
            return -e;
        }
    }
    pthread_mutex_init(&x->lock, NULL);
    pthread_cond_init(&x->cond, NULL);
    x->ch = ch;
    x->sync = sync;
    x->resv_fd = -1;
    x->state = RCM_IDLE;
    x->id.channel = &ch->pub;
    x->id.context = context;
    x->id.ps = ps;
    x->id.qp_type = qpt;
    *out = x;
    return 0;
}

void rcm_id_attach_dev(struct rcm_id *x, struct rcm_dev *dev)
{
    x->dev = dev;
    x->id.verbs = dev->verbs;
    x->id.port_num = 1;
    if (!x->id.pd)
        x->id.pd = dev->pd;
    x->id.route.addr.addr.ibaddr.sgid = dev->gid;
}

UIW_EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id,
                              void *context, enum rdma_port_space ps)
{
    if (!id)
        return rcm_err(EINVAL);
    int rc = rcm_init();
    if (rc < 0)
        return rcm_err(-rc);
    /* iWARP is connected TCP only: no UD port spaces, no AF_IB. */
    if (ps != RDMA_PS_TCP)
        return rcm_err(EOPNOTSUPP);
    struct rcm_id *x;
    rc = rcm_id_alloc(channel ? to_rch(channel) : NULL, context, ps, IBV_QPT_RC, &x);
    if (rc < 0)
        return rcm_err(-rc);
    *id = &x->id;
    return 0;
}

UIW_EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);

    /* An rdma_connect still returning on another thread: its connection's
     * events (ESTABLISHED, UNREACHABLE) may already have reached the
     * program, which may destroy the id on them; the call still uses the
     * id and the connection until it returns. */
    pthread_mutex_lock(&x->lock);
    while (x->calls)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);
    /* Engine objects first, under the route lock: afterwards no engine
     * event can name this id any more. */
    pthread_mutex_lock(&rcm_route_lock);
    pthread_mutex_lock(&x->lock);
    struct uiw_listener *l = x->listener;
    struct uiw_conn *c = x->conn;
    x->listener = NULL;
    x->conn = NULL;
    x->state = RCM_DEAD;
    pthread_mutex_unlock(&x->lock);
    rcm_retry_cancel(x);
    rcm_held_cancel(x);
    if (l)
        uiw_cm_listener_destroy(l);
    if (c)
        uiw_cm_conn_destroy(c);
    pthread_mutex_unlock(&rcm_route_lock);

    rcm_purge_id(x);
    if (id->event) {
        rdma_ack_cm_event(id->event);
        id->event = NULL;
    }
    /* As rdma-core: wait until the application acknowledged every event
     * it got for this id. */
    pthread_mutex_lock(&x->lock);
    while (x->ev_acked != x->ev_reported)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);

    if (x->resv_fd >= 0)
        close(x->resv_fd);
    free(x->qp_init_attr);
    if (x->sync)
        rcm_channel_free(x->ch);
    pthread_cond_destroy(&x->cond);
    pthread_mutex_destroy(&x->lock);
    free(x);
    return 0;
}

/* ------------------------------------------------------------------------
 * Addresses
 * ---------------------------------------------------------------------- */

/* Reserve addr (port 0: any) with a bound TCP socket; sets route.addr.src.
 * x->lock held. */
static int reserve(struct rcm_id *x, const struct sockaddr *addr)
{
    socklen_t len = rcm_sa_len(addr);
    int fd = uiw_kernel_socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (bind(fd, addr, len) < 0 || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    if (x->resv_fd >= 0)
        close(x->resv_fd);
    x->resv_fd = fd;
    memset(&x->id.route.addr.src_storage, 0, sizeof(x->id.route.addr.src_storage));
    memcpy(&x->id.route.addr.src_storage, &ss, sl);
    x->bound = true;
    return 0;
}

/* After a connect with port 0: the port connect() chose (uiw_cm_connect
 * wrote it into conn_src) becomes the id's. x->lock held. */
static void rcm_id_set_src_port(struct rcm_id *x)
{
    if (x->conn_src_auto)
        rcm_sa_set_port(&x->id.route.addr.src_addr, rcm_sa_port((struct sockaddr *)&x->conn_src));
}

/* x->lock held. */
static int do_bind(struct rcm_id *x, const struct sockaddr *addr)
{
    if (!addr)
        return -EINVAL;
    if (!rcm_sa_len(addr))
        return -EAFNOSUPPORT;
    if (x->state != RCM_IDLE)
        return -EINVAL;
    struct rcm_dev *dev = NULL;
    /* As the kernel (cma_any_addr): a loopback address is bound like the
     * wildcard, without a device; the connection's id gets one. */
    if (!rcm_sa_is_any(addr) && !rcm_sa_is_loopback(addr)) {
        int rc = rcm_dev_for_addr(addr, &dev);
        if (rc < 0)
            return rc;
    }
    int rc = reserve(x, addr);
    if (rc < 0)
        return rc;
    if (dev)
        rcm_id_attach_dev(x, dev);
    x->state = RCM_BOUND;
    return 0;
}

/* rdma_resolve_addr's source address with port 0 (libfabric's verbs
 * provider and `rdma_create_ep` pass the local address so): the address is
 * checked as a bind would (a device's, or loopback) but no port is
 * reserved. The connection's socket binds it with IP_BIND_ADDRESS_NO_PORT
 * and connect() picks the port, as for an id resolved without a source
 * ("Source ports" in docs/ENGINE.md): a bind() to port 0 here searched for
 * a port no socket holds at all, 1.8 ms per connection with 15,000
 * TIME_WAIT sockets on the machine, and made those ports unusable to later
 * connect() port choices. rdma_get_src_port() is 0 until rdma_connect
 * returns. The wildcard address is no choice: the routing table picks.
 * x->lock held. */
static int name_src(struct rcm_id *x, const struct sockaddr *addr)
{
    socklen_t len = rcm_sa_len(addr);
    if (!len)
        return -EAFNOSUPPORT;
    if (rcm_sa_is_any(addr))
        return 0;
    struct rcm_dev *dev = NULL;
    if (!rcm_sa_is_loopback(addr)) {
        int rc = rcm_dev_for_addr(addr, &dev);
        if (rc < 0)
            return rc;
    }
    memset(&x->id.route.addr.src_storage, 0, sizeof(x->id.route.addr.src_storage));
    memcpy(&x->id.route.addr.src_storage, addr, len);
    x->bound = true;
    if (dev)
        rcm_id_attach_dev(x, dev);
    x->state = RCM_BOUND;
    return 0;
}

UIW_EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
    if (!id || !addr)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    pthread_mutex_lock(&x->lock);
    int rc = do_bind(x, addr);
    pthread_mutex_unlock(&x->lock);
    return rc < 0 ? rcm_err(-rc) : 0;
}

UIW_EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
                                 struct sockaddr *dst_addr, int timeout_ms)
{
    (void)timeout_ms; /* resolution is immediate */
    if (!id || !dst_addr)
        return rcm_err(EINVAL);
    socklen_t dlen = rcm_sa_len(dst_addr);
    if (!dlen)
        return rcm_err(EAFNOSUPPORT);
    struct rcm_id *x = to_rid(id);
    struct sockaddr *bsrc = &x->id.route.addr.src_addr;
    struct sockaddr_storage src;
    int rc = 0;

    pthread_mutex_lock(&x->lock);
    if (x->state == RCM_IDLE && src_addr && src_addr->sa_family != AF_UNSPEC) {
        if (src_addr->sa_family != dst_addr->sa_family)
            rc = -EINVAL;
        else if (rcm_sa_port(src_addr))
            rc = do_bind(x, src_addr);
        else
            rc = name_src(x, src_addr);
    }
    if (!rc && x->state != RCM_IDLE && x->state != RCM_BOUND)
        rc = -EINVAL;
    if (!rc && x->bound && bsrc->sa_family != dst_addr->sa_family)
        rc = -EINVAL;
    if (!rc) {
        if (x->bound && !rcm_sa_is_any(bsrc)) {
            rcm_sa_copy(&src, bsrc);
        } else {
            /* Source selection: what the routing table picks for dst. */
            rc = rcm_route_src(dst_addr, &src);
            if (!rc && x->bound)
                rcm_sa_set_port((struct sockaddr *)&src, rcm_sa_port(bsrc));
        }
    }
    if (rc) {
        pthread_mutex_unlock(&x->lock);
        return rcm_err(-rc);
    }
    int st = 0;
    struct rcm_dev *dev = x->dev;
    if (!dev)
        st = rcm_dev_for_addr((struct sockaddr *)&src, &dev);
    /* An unbound id gets its port when it connects (connect()'s own port
     * choice, which may reuse a port that TIME_WAIT sockets hold towards
     * other peers), not here: a bind() to port 0 searches for a port no
     * socket holds at all, which with thousands of TIME_WAIT sockets costs
     * more than the rest of the connection setup (docs/ENGINE.md, "Source
     * ports"). rdma_get_src_port() is 0 until rdma_connect returns. */
    if (!st) {
        memcpy(&x->id.route.addr.src_storage, &src, sizeof(src));
        rcm_id_attach_dev(x, dev);
        memset(&x->id.route.addr.dst_storage, 0, sizeof(x->id.route.addr.dst_storage));
        memcpy(&x->id.route.addr.dst_storage, dst_addr, dlen);
        x->state = RCM_ADDR_RESOLVED;
    }
    pthread_mutex_unlock(&x->lock);
    if (st)
        uiw_dbg(1, "rdmacm: address resolution failed: %d", st);
    rcm_queue_local(x, st ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED, st);
    return rcm_complete(x);
}

UIW_EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
    (void)timeout_ms;
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    pthread_mutex_lock(&x->lock);
    if (x->state != RCM_ADDR_RESOLVED) {
        pthread_mutex_unlock(&x->lock);
        return rcm_err(EINVAL);
    }
    /* iWARP: TCP/IP routes the connection; nothing to look up. */
    x->state = RCM_ROUTE_RESOLVED;
    pthread_mutex_unlock(&x->lock);
    rcm_queue_local(x, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
    return rcm_complete(x);
}

UIW_EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id)
{
    if (!id) {
        errno = EINVAL;
        return 0;
    }
    return rcm_sa_port(&id->route.addr.src_addr);
}

UIW_EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
    if (!id) {
        errno = EINVAL;
        return 0;
    }
    return rcm_sa_port(&id->route.addr.dst_addr);
}

/* ------------------------------------------------------------------------
 * Listen
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    int rc = 0;
    pthread_mutex_lock(&x->lock);
    if (x->state == RCM_IDLE) {
        /* as the kernel: an unbound id listens on 0.0.0.0, any port */
        struct sockaddr_in any = {.sin_family = AF_INET};
        rc = do_bind(x, (struct sockaddr *)&any);
    }
    if (!rc && x->state != RCM_BOUND)
        rc = -EINVAL;
    if (rc) {
        pthread_mutex_unlock(&x->lock);
        return rcm_err(-rc);
    }
    struct sockaddr_storage src;
    memcpy(&src, &x->id.route.addr.src_storage, sizeof(src));
    struct ibv_context *ctx = x->dev ? x->dev->verbs : NULL;
    x->state = RCM_LISTEN;
    pthread_mutex_unlock(&x->lock);

    struct uiw_listener *l = NULL;
    pthread_mutex_lock(&rcm_route_lock);
    rc = uiw_cm_listen_af(ctx, (struct sockaddr *)&src, backlog, x->afonly_set ? x->afonly : -1,
                          rcm_uch, x, &l);
    pthread_mutex_lock(&x->lock);
    if (rc == 0) {
        x->listener = l;
        struct sockaddr_storage ss;
        if (uiw_cm_listener_addr(l, &ss) == 0)
            memcpy(&x->id.route.addr.src_storage, &ss, sizeof(ss));
        if (x->resv_fd >= 0) {
            close(x->resv_fd); /* the listening socket holds the port now */
            x->resv_fd = -1;
        }
    } else {
        x->state = RCM_BOUND;
    }
    pthread_mutex_unlock(&x->lock);
    pthread_mutex_unlock(&rcm_route_lock);
    return rc < 0 ? rcm_err(-rc) : 0;
}

/* ------------------------------------------------------------------------
 * Connection parameters
 * ---------------------------------------------------------------------- */

/* rdma-core's checks: a connected id needs a QP or parameters; depths
 * above the device's limits are invalid unless they are the "maximum"
 * sentinels. x->lock held. */
static int check_param(struct rcm_id *x, const struct rdma_conn_param *p)
{
    if (!x->id.qp && !p)
        return -EINVAL;
    if (!p)
        return 0;
    if (p->responder_resources != RDMA_MAX_RESP_RES &&
        p->responder_resources > x->dev->max_resp_res)
        return -EINVAL;
    if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > x->dev->max_init_depth)
        return -EINVAL;
    if (p->private_data_len && !p->private_data)
        return -EINVAL;
    return 0;
}

/* The QP to attach: the id's, else the one of the id's device numbered
 * qp_num (an external QP, as the kernel's iWARP CM finds it; returned
 * with a reference the caller drops once the engine took its own; no
 * such QP: EINVAL, as iw_cm_connect), else none (MPA only, no FPDUs). */
static int pick_qp(struct rcm_id *x, const struct rdma_conn_param *p, struct ibv_qp **qp, bool *ext)
{
    *qp = NULL;
    *ext = false;
    if (x->id.qp) {
        if (x->id.qp->context != x->id.verbs)
            return -EINVAL;
        *qp = x->id.qp;
        return 0;
    }
    if (p && p->qp_num) {
        *qp = x->id.verbs ? uiw_cm_qp_by_num(x->id.verbs, p->qp_num) : NULL;
        if (!*qp)
            return -EINVAL;
        *ext = true;
    }
    return 0;
}

/* The start of rdma_connect and rdma_accept: lock x and check that it is
 * in the state want (with need_conn, holding the request's connection),
 * that p is acceptable and that there is a QP to use (*qp, *ext: pick_qp).
 * 0 with x->lock held; otherwise x is unlocked and a negative errno
 * returned. */
static int conn_begin(struct rcm_id *x, enum rcm_state want, bool need_conn,
                      const struct rdma_conn_param *p, struct ibv_qp **qp, bool *ext)
{
    pthread_mutex_lock(&x->lock);
    int rc = x->state == want && (!need_conn || x->conn) ? 0 : -EINVAL;
    if (!rc)
        rc = check_param(x, p);
    if (!rc)
        rc = pick_qp(x, p, qp, ext);
    if (rc)
        pthread_mutex_unlock(&x->lock);
    return rc;
}

/* The engine's parameters for p: rdma-core's "maximum" sentinels (and no
 * parameters) mean ord_max and ird_max; the id's options. */
static struct uiw_conn_param conn_param_of(const struct rcm_id *x, const struct rdma_conn_param *p,
                                           uint8_t ord_max, uint8_t ird_max,
                                           const void *private_data, uint16_t private_data_len)
{
    return (struct uiw_conn_param){
        .ord = (!p || p->initiator_depth == RDMA_MAX_INIT_DEPTH) ? ord_max : p->initiator_depth,
        .ird =
            (!p || p->responder_resources == RDMA_MAX_RESP_RES) ? ird_max : p->responder_resources,
        .private_data = private_data,
        .private_data_len = private_data_len,
        .peer_timeout_ms = x->peer_timeout_ms,
        .tos_set = x->tos_set,
        .tos = x->tos,
    };
}

/* ------------------------------------------------------------------------
 * Active side
 * ---------------------------------------------------------------------- */

/* uiw_conn_param.before_events of rdma_connect's uiw_cm_connect: the
 * calling thread, no engine lock held, before the connection can raise an
 * event. The id learns its connection (and the port connect() chose) here,
 * so every event of the connection finds it, whichever thread routes it. */
static void connect_set_conn(void *user, struct uiw_conn *c)
{
    struct rcm_id *x = user;
    pthread_mutex_lock(&x->lock);
    x->conn = c;
    rcm_id_set_src_port(x);
    if (x->resv_fd >= 0) {
        /* the connection's socket holds the port now; before any event, so
         * that a refused attempt tried again (event.c) finds it free */
        close(x->resv_fd);
        x->resv_fd = -1;
    }
    pthread_mutex_unlock(&x->lock);
}

UIW_EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    struct ibv_qp *qp = NULL;
    bool ext = false;
    int rc = conn_begin(x, RCM_ROUTE_RESOLVED, false, conn_param, &qp, &ext);
    if (rc)
        return rcm_err(-rc);
    const struct rdma_conn_param *p = conn_param;
    /* Kept in the id: a refused attempt may be repeated (event.c). */
    uint16_t pd_len = p ? p->private_data_len : 0;
    if (pd_len)
        memcpy(x->conn_pd, p->private_data, pd_len);
    x->conn_param = conn_param_of(x, p, x->dev->max_init_depth, x->dev->max_resp_res,
                                  pd_len ? x->conn_pd : NULL, pd_len);
    x->conn_qp = qp;
    /* An external QP is the application's to destroy with ibv_destroy_qp,
     * which rdma_destroy_qp does not see: its refused attempts are not
     * tried again (a retry holds the QP). */
    x->conn_qp_gone = ext;
    memcpy(&x->conn_src, &x->id.route.addr.src_storage, sizeof(x->conn_src));
    x->conn_src_auto = !rcm_sa_port((struct sockaddr *)&x->conn_src);
    memcpy(&x->conn_dst, &x->id.route.addr.dst_storage, sizeof(x->conn_dst));
    x->connect_ms = rcm_now_ms();
    x->retry_delay_ms = 0;
    x->state = RCM_CONNECTING;
    x->calls++; /* the connection's events may reach the program before we return */
    pthread_mutex_unlock(&x->lock);

    /* The outcome may be posted before uiw_cm_connect returns: it reaches
     * the id because connect_set_conn gave the id its connection first.
     * No rcm_route_lock around the call: held from the connect() to the
     * end (the MPA Request's send included), it made the events of other
     * connections that found it taken go through the router thread (a
     * wake-up more each), and the router sleep on it (docs/PERFORMANCE.md,
     * 2026-11-27 (setup3) and 2026-11-28 "stop 33"). x->calls keeps
     * rdma_destroy_id, which that lock used to hold off, waiting until this
     * call is done with the id. */
    struct uiw_conn *c = NULL;
    struct uiw_conn_param cp = x->conn_param; /* a retry (event.c) runs without the hook */
    cp.before_events = connect_set_conn;
    rc = uiw_cm_connect(qp, (struct sockaddr *)&x->conn_src, (struct sockaddr *)&x->conn_dst, &cp,
                        rcm_uch, x, &c);
    if (ext)
        uiw_cm_qp_release(qp); /* the connection holds its own */
    pthread_mutex_lock(&x->lock);
    if (rc < 0) {
        if (x->conn) { /* failed after connect_set_conn: nothing was posted */
            x->conn = NULL;
            if (x->conn_src_auto)
                rcm_sa_set_port(&x->id.route.addr.src_addr, 0);
        }
        x->state = RCM_ROUTE_RESOLVED;
    }
    if (--x->calls == 0)
        pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    if (rc < 0)
        return rcm_err(rc == -EMSGSIZE ? EINVAL : -rc);
    return rcm_complete(x);
}

UIW_EXPORT int rdma_establish(struct rdma_cm_id *id)
{
    /* Only after CONNECT_RESPONSE, which iWARP never reports: the engine
     * brings the QP to RTS and reports ESTABLISHED itself. */
    (void)id;
    return rcm_err(EINVAL);
}

/* ------------------------------------------------------------------------
 * Passive side
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    struct ibv_qp *qp = NULL;
    bool ext = false;
    int rc = conn_begin(x, RCM_REQ, true, conn_param, &qp, &ext);
    if (rc)
        return rcm_err(-rc);
    const struct rdma_conn_param *p = conn_param;
    /* rdma-core: the "maximum" sentinels (and no parameters) mean what
     * the request asked for, bounded by the device. */
    uint8_t ord_max =
        x->req_init_depth < x->dev->max_init_depth ? x->req_init_depth : x->dev->max_init_depth;
    uint8_t ird_max =
        x->req_resp_res < x->dev->max_resp_res ? x->req_resp_res : x->dev->max_resp_res;
    struct uiw_conn_param cp = conn_param_of(x, p, ord_max, ird_max, p ? p->private_data : NULL,
                                             p ? p->private_data_len : 0);
    struct uiw_conn *c = x->conn;
    x->state = RCM_ACCEPTING;
    pthread_mutex_unlock(&x->lock);

    rc = uiw_cm_accept(c, qp, &cp, x);
    if (ext)
        uiw_cm_qp_release(qp); /* the connection holds its own */
    if (rc < 0) {
        uiw_dbg(1, "rdmacm: accept failed: %d", rc);
        pthread_mutex_lock(&x->lock);
        x->state = rc == -EINVAL || rc == -EBUSY || rc == -EMSGSIZE ? RCM_REQ : RCM_FAILED;
        pthread_mutex_unlock(&x->lock);
        if (x->id.qp && rc != -EBUSY) {
            struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
            (void)ibv_modify_qp(x->id.qp, &a, IBV_QP_STATE);
        }
        return rcm_err(rc == -EMSGSIZE ? EINVAL : -rc);
    }
    return rcm_complete(x);
}

UIW_EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data,
                           uint8_t private_data_len)
{
    if (!id || (private_data_len && !private_data))
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    pthread_mutex_lock(&x->lock);
    if (x->state != RCM_REQ || !x->conn) {
        pthread_mutex_unlock(&x->lock);
        return rcm_err(EINVAL);
    }
    struct uiw_conn *c = x->conn;
    x->state = RCM_ACCEPTING;
    pthread_mutex_unlock(&x->lock);
    int rc = uiw_cm_reject(c, private_data, private_data_len);
    pthread_mutex_lock(&x->lock);
    x->state = rc == 0 ? RCM_REJECTED : RCM_FAILED;
    pthread_mutex_unlock(&x->lock);
    return rc < 0 ? rcm_err(-rc) : 0;
}

UIW_EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    pthread_mutex_lock(&x->lock);
    struct uiw_conn *c = x->conn;
    pthread_mutex_unlock(&x->lock);
    if (!c)
        return rcm_err(EINVAL);
    int rc = uiw_cm_disconnect(c);
    if (rc < 0)
        return rcm_err(rc == -ENOTCONN ? EINVAL : -rc);
    return rcm_complete(x);
}

UIW_EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
    (void)event;
    /* IB's communication-established hint; iWARP has nothing to do. */
    if (!id || !id->verbs)
        return rcm_err(EINVAL);
    return 0;
}

/* ------------------------------------------------------------------------
 * Channels and options
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
    if (!id)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    if (x->sync && !channel)
        return rcm_err(EINVAL);
    struct rcm_channel *to = channel ? to_rch(channel) : rcm_channel_new();
    if (!to)
        return -1;
    if (x->sync && id->event) {
        rdma_ack_cm_event(id->event);
        id->event = NULL;
    }
    struct rcm_channel *old = x->ch;
    bool was_sync = x->sync;
    pthread_mutex_lock(&rcm_route_lock);
    rcm_move_events(x, to);
    pthread_mutex_lock(&x->lock);
    x->sync = channel == NULL;
    pthread_mutex_unlock(&x->lock);
    pthread_mutex_unlock(&rcm_route_lock);
    if (was_sync && old != to)
        rcm_channel_free(old);
    /* As rdma-core: events already handed out must be acknowledged before
     * the id is used on its new channel. */
    pthread_mutex_lock(&x->lock);
    while (x->ev_acked != x->ev_reported)
        pthread_cond_wait(&x->cond, &x->lock);
    pthread_mutex_unlock(&x->lock);
    return 0;
}

UIW_EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval,
                               size_t optlen)
{
    if (!id || !optval)
        return rcm_err(EINVAL);
    struct rcm_id *x = to_rid(id);
    if (level != RDMA_OPTION_ID)
        return rcm_err(ENOSYS); /* RDMA_OPTION_IB_PATH: IB only */
    switch (optname) {
    case RDMA_OPTION_ID_TOS:
        if (optlen != sizeof(uint8_t))
            return rcm_err(EINVAL);
        /* The connection's IP_TOS / IPV6_TCLASS (next connect/accept). */
        pthread_mutex_lock(&x->lock);
        x->tos = *(const uint8_t *)optval;
        x->tos_set = true;
        pthread_mutex_unlock(&x->lock);
        return 0;
    case RDMA_OPTION_ID_REUSEADDR:
        if (optlen != sizeof(int))
            return rcm_err(EINVAL);
        /* Every uiwarp socket binds with SO_REUSEADDR already. */
        pthread_mutex_lock(&x->lock);
        x->reuseaddr = *(const int *)optval != 0;
        pthread_mutex_unlock(&x->lock);
        return 0;
    case RDMA_OPTION_ID_AFONLY:
        if (optlen != sizeof(int))
            return rcm_err(EINVAL);
        /* IPV6_V6ONLY of an IPv6 listener (next rdma_listen) */
        pthread_mutex_lock(&x->lock);
        x->afonly = *(const int *)optval != 0;
        x->afonly_set = true;
        pthread_mutex_unlock(&x->lock);
        return 0;
    case RDMA_OPTION_ID_ACK_TIMEOUT: {
        /* InfiniBand's local ACK timeout, 4.096 us * 2^t per try (0:
         * infinite). The connection's dead-peer timeout (TCP_USER_TIMEOUT
         * and keepalive, docs/ENGINE.md "Dead peers") becomes that times
         * the 8 tries of rdma_cm's RC retry count (7), at least 1 s; 0
         * turns detection off. Applies to the next rdma_connect/accept. */
        if (optlen != sizeof(uint8_t) || *(const uint8_t *)optval > 31)
            return rcm_err(EINVAL);
        uint8_t t = *(const uint8_t *)optval;
        uint64_t ms = t ? ((4096ull << t) * 8u + 999999u) / 1000000u : 0;
        pthread_mutex_lock(&x->lock);
        x->peer_timeout_ms = !t ? UIW_PEER_TIMEOUT_OFF : ms < 1000 ? 1000 : (unsigned)ms;
        pthread_mutex_unlock(&x->lock);
        return 0;
    }
    default:
        return rcm_err(ENOSYS);
    }
}
