/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * rsockets: stream sockets over RDMA (rsocket.h), on the public rdma_cm and
 * verbs API only. See rsocket_int.h for the protocol and docs/RSOCKETS.md.
 *
 * Each rsocket has its own rdma event channel; the channel's fd is the
 * number the application gets (unique in the process, pollable). All
 * event channels and completion channels are O_NONBLOCK: blocking calls
 * wait in poll() with the socket's lock released, so a thread sending and
 * another receiving on the same socket both make progress.
 */
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "rdmacm_int.h"
#include "rsocket_int.h"

#define RS_TAB_SIZE 65536
static struct rs_sock *rs_tab[RS_TAB_SIZE];
static pthread_mutex_t rs_tab_lock = PTHREAD_MUTEX_INITIALIZER;

/* Work request ids: bit 63 receive (low 32 bits: message slot); sends:
 * kind in bits 32..39, data in the low 32 bits. */
#define WR_RECV (1ull << 63)
enum { WR_DATA_WRITE = 1, WR_DATA_MSG = 2, WR_CTRL = 3 };
static uint64_t wr_id(unsigned kind, uint32_t data)
{
    return ((uint64_t)kind << 32) | data;
}

static struct rs_sock *rs_lookup(int fd)
{
    if (fd < 0 || fd >= RS_TAB_SIZE)
        return NULL;
    return __atomic_load_n(&rs_tab[fd], __ATOMIC_ACQUIRE);
}

static bool host_is_net(void)
{
    return htobe32(1) == 1;
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* How long a waiting call (rs_wait, rpoll) spins before it sleeps: 20 us,
 * or, while the socket made progress within the last two long spins, the
 * engine's UIWARP_PROGRESS_SPIN_US (default 200 us, as ibv_get_cq_event's
 * waiters spin). With 20 us alone, a ping-pong whose one side slept once
 * (a wake-up here takes about 25 us) made the other side's next wait
 * outlast its spin too, and the two went on sleeping by turns: rstream
 * -T b 4 KiB ran at 6 or at 13-20 us per transfer from run to run (4,005
 * sleeps in 20,000 transfers in a slow run, about 500 in a fast one). */
#define RS_SPIN_NS 20000u
/* The spin for a wait starting at now (lock held) */
static uint64_t rs_spin_ns(const struct rs_sock *rs, uint64_t now)
{
    uint64_t l = (uint64_t)uiw_progress_spin_us() * 1000u; /* the engine's config */
    if (l > RS_SPIN_NS && rs->progress_ns &&
        (rs->progress_ns >= now || now - rs->progress_ns < 2 * l))
        return l;
    return RS_SPIN_NS;
}

/* The kernel's TCP keepalive idle time (seconds): what rsockets wait
 * before the first keepalive, as TCP sockets do. */
static int rs_default_keepidle(void)
{
    int v = 7200;
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_keepalive_time", "r");
    if (f) {
        if (fscanf(f, "%d", &v) != 1 || v <= 0)
            v = 7200;
        fclose(f);
    }
    return v;
}

static void rs_ka_remove(struct rs_sock *rs);

/* ------------------------------------------------------------------------
 * Allocation
 * ---------------------------------------------------------------------- */

static struct rs_sock *rs_new(int domain, const struct rs_sock *parent)
{
    struct rs_sock *rs = calloc(1, sizeof(*rs));
    if (!rs)
        return NULL;
    rs->domain = domain;
    rs->index = -1;
    pthread_mutex_init(&rs->lock, NULL);
    pthread_cond_init(&rs->cond, NULL);
    rs->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (rs->wake_fd < 0) {
        pthread_cond_destroy(&rs->cond);
        pthread_mutex_destroy(&rs->lock);
        free(rs);
        return NULL;
    }
    if (parent) {
        rs->sbuf_size = parent->sbuf_size;
        rs->rbuf_size = parent->rbuf_size;
        rs->sq_size = parent->sq_size;
        rs->rq_size = parent->rq_size;
        rs->sq_inline = parent->sq_inline;
        rs->nodelay = parent->nodelay;
        rs->keepalive = parent->keepalive;
        rs->keepidle = parent->keepidle;
        rs->keepintvl = parent->keepintvl;
        rs->keepcnt = parent->keepcnt;
        rs->iomap_size = parent->iomap_size;
    } else {
        rs->sbuf_size = 1 << 17;
        rs->rbuf_size = 1 << 17;
        rs->sq_size = 384;
        rs->rq_size = 384;
        rs->sq_inline = 64;
        rs->keepidle = rs_default_keepidle();
        rs->keepintvl = 75;
        rs->keepcnt = 9;
    }
    rs->ch = rdma_create_event_channel();
    if (!rs->ch) {
        close(rs->wake_fd);
        pthread_cond_destroy(&rs->cond);
        pthread_mutex_destroy(&rs->lock);
        free(rs);
        return NULL;
    }
    set_nonblock(rs->ch->fd);
    return rs;
}

static int rs_insert(struct rs_sock *rs)
{
    int fd = rs->ch->fd;
    if (fd >= RS_TAB_SIZE)
        return rcm_err(EMFILE);
    pthread_mutex_lock(&rs_tab_lock);
    rs->index = fd;
    __atomic_store_n(&rs_tab[fd], rs, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&rs_tab_lock);
    return fd;
}

static void rs_free(struct rs_sock *rs)
{
    rs_ka_remove(rs);
    if (rs->index >= 0) {
        pthread_mutex_lock(&rs_tab_lock);
        __atomic_store_n(&rs_tab[rs->index], NULL, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&rs_tab_lock);
    }
    if (rs->id && rs->id->qp)
        rdma_destroy_qp(rs->id);
    if (rs->cq)
        ibv_destroy_cq(rs->cq);
    if (rs->cch)
        ibv_destroy_comp_channel(rs->cch);
    while (rs->iomaps) {
        struct rs_iomr *m = rs->iomaps;
        rs->iomaps = m->next;
        ibv_dereg_mr(m->mr);
        free(m);
    }
    struct ibv_mr *mrs[] = {rs->smr, rs->rmr, rs->target_mr};
    for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
        if (mrs[i])
            ibv_dereg_mr(mrs[i]);
    free(rs->sbuf);
    free(rs->rbuf);
    free(rs->target_sgl);
    free(rs->rmsg);
    if (rs->id)
        rdma_destroy_id(rs->id);
    if (rs->ch)
        rdma_destroy_event_channel(rs->ch);
    close(rs->wake_fd);
    pthread_cond_destroy(&rs->cond);
    pthread_mutex_destroy(&rs->lock);
    free(rs);
}

/* ------------------------------------------------------------------------
 * Endpoint: CQ, QP, buffers, receives
 * ---------------------------------------------------------------------- */

/* Receives (and 4-byte message slots) of a socket. */
static int rs_nrecv(const struct rs_sock *rs)
{
    return rs->rq_size + RS_RECV_EXTRA;
}

static int rs_post_recv(struct rs_sock *rs)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(rs->rbuf + rs->rbuf_size + (size_t)rs->rmsg_slot * RS_MSG_BYTES),
        .length = RS_MSG_BYTES,
        .lkey = rs->rmr->lkey,
    };
    struct ibv_recv_wr wr = {
        .wr_id = WR_RECV | (uint32_t)rs->rmsg_slot, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    if (++rs->rmsg_slot == rs_nrecv(rs))
        rs->rmsg_slot = 0;
    int r = ibv_post_recv(rs->id->qp, &wr, &bad);
    return r ? rcm_err(r) : 0;
}

static int rs_create_ep(struct rs_sock *rs)
{
    struct rdma_cm_id *id = rs->id;
    if (id->verbs->device->transport_type != IBV_TRANSPORT_IWARP)
        return rcm_err(EOPNOTSUPP); /* we only speak the iWARP (Send) form */
    if (rs->sq_size < 16)
        rs->sq_size = 16;
    if (rs->rq_size < 16)
        rs->rq_size = 16;
    if (rs->sbuf_size < 2 * RS_SNDLOWAT)
        rs->sbuf_size = 2 * RS_SNDLOWAT;
    if (rs->rbuf_size < 2 * RS_SNDLOWAT)
        rs->rbuf_size = 2 * RS_SNDLOWAT;
    rs->rbuf_size &= ~1u;

    rs->cch = ibv_create_comp_channel(id->verbs);
    if (!rs->cch)
        return -1;
    set_nonblock(rs->cch->fd);
    rs->cq = ibv_create_cq(id->verbs, rs->sq_size + rs_nrecv(rs), rs, rs->cch, 0);
    if (!rs->cq)
        return -1;

    struct ibv_qp_init_attr qa = {0};
    qa.qp_context = rs;
    qa.send_cq = rs->cq;
    qa.recv_cq = rs->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 1;
    qa.cap.max_send_wr = rs->sq_size;
    qa.cap.max_recv_wr = (uint32_t)rs_nrecv(rs);
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    /* control messages (4 B), grants (16 B) and iomap entries (24 B)
     * always go inline */
    qa.cap.max_inline_data =
        rs->sq_inline > sizeof(struct rs_wire_iomap) ? rs->sq_inline : sizeof(struct rs_wire_iomap);
    if (rdma_create_qp(id, NULL, &qa))
        return -1;
    if (qa.cap.max_inline_data < sizeof(struct rs_wire_iomap))
        return rcm_err(EOPNOTSUPP);
    if (rs->sq_inline > qa.cap.max_inline_data)
        rs->sq_inline = (uint16_t)qa.cap.max_inline_data;

    struct ibv_pd *pd = id->qp->pd;
    int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    rs->sbuf = malloc(rs->sbuf_size);
    rs->rbuf = calloc(1, rs->rbuf_size + (size_t)rs_nrecv(rs) * RS_MSG_BYTES);
    /* the target SGL, then the iomap array the peer writes its mappings to */
    size_t tlen = RS_WIRE_SGL_SIZE * sizeof(struct rs_wire_sge) +
                  (size_t)rs->iomap_size * sizeof(struct rs_wire_iomap);
    rs->target_sgl = calloc(1, tlen);
    rs->rmsg = calloc(rs->rq_size + 1u, sizeof(uint32_t));
    if (!rs->sbuf || !rs->rbuf || !rs->target_sgl || !rs->rmsg)
        return rcm_err(ENOMEM);
    rs->smr = ibv_reg_mr(pd, rs->sbuf, rs->sbuf_size, IBV_ACCESS_LOCAL_WRITE);
    rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size + (size_t)rs_nrecv(rs) * RS_MSG_BYTES, rw);
    rs->target_mr = ibv_reg_mr(pd, rs->target_sgl, tlen, rw);
    if (!rs->smr || !rs->rmr || !rs->target_mr)
        return -1;
    rs->target_iomap =
        rs->iomap_size ? (struct rs_wire_iomap *)(rs->target_sgl + RS_WIRE_SGL_SIZE) : NULL;

    rs->sbuf_avail = rs->sbuf_size;
    rs->sbuf_head = 0;
    rs->rbuf_free_offset = rs->rbuf_size / 2;
    rs->rbuf_bytes_avail = rs->rbuf_size / 2;
    rs->rmsg_limit = (uint16_t)rs->rq_size; /* the credits rs_format_conn gives */
    rs->ctrl_seqno = 0;
    rs->ctrl_max_seqno = RS_CTRL_SLOTS;
    rs->sqe_avail = rs->sq_size - RS_CTRL_SLOTS;
    rs->rseq_comp = rs->rq_size / 2;
    for (int i = 0; i < rs_nrecv(rs); i++)
        if (rs_post_recv(rs))
            return -1;
    return 0;
}

static void rs_format_conn(const struct rs_sock *rs, struct rs_wire_conn *c)
{
    memset(c, 0, sizeof(*c));
    c->version = RS_WIRE_VERSION;
    c->flags = RS_WIRE_FLAG_IOMAP | (host_is_net() ? RS_WIRE_FLAG_NET : 0);
    c->credits = htobe16(rs->rq_size);
    c->target_iomap_size = rs_iomap_scale(rs->iomap_size);
    c->target_sgl.addr = htobe64((uintptr_t)rs->target_sgl);
    c->target_sgl.length = htobe32(RS_WIRE_SGL_SIZE);
    c->target_sgl.key = htobe32(rs->target_mr->rkey);
    c->data_buf.addr = htobe64((uintptr_t)rs->rbuf);
    c->data_buf.length = htobe32(rs->rbuf_size / 2);
    c->data_buf.key = htobe32(rs->rmr->rkey);
}

static int rs_save_conn(struct rs_sock *rs, const void *pd, uint8_t len)
{
    struct rs_wire_conn c;
    if (!pd || len < sizeof(c))
        return rcm_err(EPROTO);
    memcpy(&c, pd, sizeof(c));
    if (c.version != RS_WIRE_VERSION)
        return rcm_err(EPROTO);
    rs->remote_sgl.addr = be64toh(c.target_sgl.addr);
    rs->remote_sgl.length = be32toh(c.target_sgl.length);
    rs->remote_sgl.key = be32toh(c.target_sgl.key);
    if (!rs->remote_sgl.length)
        return rcm_err(EPROTO);
    rs->remote_sge = 1 % rs->remote_sgl.length;
    rs->swap_sgl = !!(c.flags & RS_WIRE_FLAG_NET) != host_is_net();
    rs->remote_iomap = (struct rs_wire_sge){0};
    if (c.flags & RS_WIRE_FLAG_IOMAP) {
        /* the peer's iomap array follows its target SGL, same key */
        rs->remote_iomap.addr =
            rs->remote_sgl.addr + (uint64_t)rs->remote_sgl.length * sizeof(struct rs_wire_sge);
        rs->remote_iomap.key = rs->remote_sgl.key;
        rs->remote_iomap.length = rs_iomap_unscale(c.target_iomap_size);
    }
    volatile struct rs_wire_sge *t = rs->target_sgl;
    t[0].addr = be64toh(c.data_buf.addr);
    t[0].key = be32toh(c.data_buf.key);
    t[0].length = be32toh(c.data_buf.length);
    rs->target_sge = 0;
    rs->sseq_no = 0;
    rs->sseq_comp = be16toh(c.credits);
    return 0;
}

/* ------------------------------------------------------------------------
 * Posting
 * ---------------------------------------------------------------------- */

static int rs_post_msg(struct rs_sock *rs, uint32_t msg)
{
    struct ibv_sge sge = {.addr = (uintptr_t)&msg, .length = RS_MSG_BYTES};
    struct ibv_send_wr wr = {.wr_id = wr_id(WR_CTRL, msg),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_INLINE};
    struct ibv_send_wr *bad;
    int r = ibv_post_send(rs->id->qp, &wr, &bad);
    return r ? rcm_err(r) : 0;
}

/* An RDMA Write of sgl to (addr, rkey), then the 4-byte message Send. */
static int rs_post_write_msg(struct rs_sock *rs, struct ibv_sge *sgl, int nsge, uint32_t len,
                             int flags, uint64_t addr, uint32_t rkey, uint32_t msg, unsigned kind_w,
                             unsigned kind_m)
{
    struct ibv_sge msge = {.addr = (uintptr_t)&msg, .length = RS_MSG_BYTES};
    struct ibv_send_wr send = {.wr_id = wr_id(kind_m, 0),
                               .sg_list = &msge,
                               .num_sge = 1,
                               .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_INLINE};
    struct ibv_send_wr write = {.wr_id = wr_id(kind_w, len),
                                .next = &send,
                                .sg_list = sgl,
                                .num_sge = nsge,
                                .opcode = IBV_WR_RDMA_WRITE,
                                .send_flags = (unsigned)flags};
    write.wr.rdma.remote_addr = addr;
    write.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad;
    int r = ibv_post_send(rs->id->qp, &write, &bad);
    return r ? rcm_err(r) : 0;
}

static bool rs_live(const struct rs_sock *rs)
{
    return (rs->state & RS_ST_CONNECTED) && !(rs->state & (RS_ST_DISCONNECTED | RS_ST_ERROR));
}

static void rs_set_error(struct rs_sock *rs, int e)
{
    if (!(rs->state & RS_ST_ERROR)) {
        rs->state |= RS_ST_ERROR;
        rs->state &= ~(RS_ST_READABLE | RS_ST_WRITABLE);
        rs->err = e;
    }
}

/* Grant credits (and the next half of the receive buffer if it is free). */
static void rs_update_credits(struct rs_sock *rs)
{
    uint32_t half = rs->rbuf_size / 2;
    if (!rs_live(rs) || (int)(rs->ctrl_max_seqno - rs->ctrl_seqno) < 2)
        return;
    if (!(rs->rbuf_bytes_avail >= half || (int16_t)(rs->rseq_no - rs->rseq_comp) >= 0))
        return;
    uint32_t msg = rs_msg(RS_MSG_SGL, (uint32_t)rs->rseq_no + rs->rq_size);
    rs->rmsg_limit = (uint16_t)(rs->rseq_no + rs->rq_size);
    rs->rseq_comp = (uint16_t)(rs->rseq_no + rs->rq_size / 2);
    int r;
    if (rs->rbuf_bytes_avail >= half) {
        struct rs_wire_sge g = {.addr = (uintptr_t)(rs->rbuf + rs->rbuf_free_offset),
                                .key = rs->rmr->rkey,
                                .length = half};
        if (rs->swap_sgl) {
            g.addr = bswap_64(g.addr);
            g.key = bswap_32(g.key);
            g.length = bswap_32(g.length);
        }
        struct ibv_sge sge = {.addr = (uintptr_t)&g, .length = sizeof(g)};
        rs->ctrl_seqno += 2;
        r = rs_post_write_msg(rs, &sge, 1, 0, IBV_SEND_INLINE,
                              rs->remote_sgl.addr + (uint64_t)rs->remote_sge * sizeof(g),
                              rs->remote_sgl.key, msg, WR_CTRL, WR_CTRL);
        rs->rbuf_bytes_avail -= half;
        rs->rbuf_free_offset += half;
        if (rs->rbuf_free_offset >= rs->rbuf_size)
            rs->rbuf_free_offset = 0;
        if (++rs->remote_sge == (int)rs->remote_sgl.length)
            rs->remote_sge = 0;
    } else {
        rs->ctrl_seqno++;
        r = rs_post_msg(rs, msg);
    }
    if (r)
        rs_set_error(rs, errno);
}

/* ------------------------------------------------------------------------
 * Completions and connection events
 * ---------------------------------------------------------------------- */

static void rs_peer_gone(struct rs_sock *rs)
{
    if (rs->state & RS_ST_CONNECTED) {
        rs->state |= RS_ST_DISCONNECTED;
        rs->state &= ~(RS_ST_READABLE | RS_ST_WRITABLE);
    }
}

/* The peer broke the protocol (rs_poll_cq): the socket fails with
 * EPROTO and the connection is closed; nothing it announced is read. */
static void rs_violation(struct rs_sock *rs, uint32_t n)
{
    if (!rs_live(rs))
        return;
    uiw_log("rsocket: the peer sent more data messages than its credits or announced "
            "more bytes (%u) than it was granted: connection closed",
            n);
    rs_set_error(rs, EPROTO);
    rs->rerr = EPROTO;
    rs->state |= RS_ST_DISCONNECTED;
    rdma_disconnect(rs->id);
}

/* Take the completions; returns how many. */
static int rs_poll_cq(struct rs_sock *rs)
{
    struct ibv_wc wc[16];
    int n, reposts = 0, total = 0;
    if (!rs->cq)
        return 0;
    while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
        total += n;
        for (int i = 0; i < n; i++) {
            struct ibv_wc *w = &wc[i];
            if (w->wr_id & WR_RECV) {
                if (w->status != IBV_WC_SUCCESS) {
                    rs_peer_gone(rs);
                    continue;
                }
                reposts++;
                uint32_t msg;
                memcpy(&msg, rs->rbuf + rs->rbuf_size + (size_t)(uint32_t)w->wr_id * RS_MSG_BYTES,
                       sizeof(msg));
                if (w->wc_flags & IBV_WC_WITH_IMM)
                    msg = be32toh(w->imm_data);
                switch (rs_msg_op(msg)) {
                case RS_MSG_IOMAP_SGL:
                    /* the peer wrote a mapping into target_iomap (read when
                     * riowrite looks for one); our sender counts it as a
                     * data message, so its credit comes back with the next
                     * grant (rdma-core's receiver gives none back: its
                     * sender may not count it, so it is not counted
                     * against the limit below) */
                    rs->rseq_no++;
                    break;
                case RS_MSG_DATA: {
                    /* never more data messages than we allowed */
                    if ((int16_t)(rs->rmsg_in - rs->rmsg_limit) >= 0) {
                        rs_violation(rs, rs_msg_data(msg));
                        break;
                    }
                    rs->rmsg_in++;
                    uint32_t n = rs_msg_data(msg);
                    int next = rs->rmsg_tail + 1 == rs->rq_size + 1 ? 0 : rs->rmsg_tail + 1;
                    /* A peer announces only bytes it wrote into buffer
                     * space we granted and have not read back, and no
                     * more data messages than its credits: anything else
                     * would make rrecv return stale bytes of the buffer
                     * or overrun the queue. The socket fails (EPROTO) and
                     * the connection is closed. */
                    if (n == 0 && next != rs->rmsg_head) {
                        /* an empty transfer (rsockets never send one):
                         * its credit back at once; queued, it would end
                         * an rrecv with 0, which reads as end of stream */
                        rs->rseq_no++;
                        break;
                    }
                    if (next == rs->rmsg_head ||
                        rs->rdata_queued + n > (uint64_t)rs->rbuf_size - rs->rbuf_bytes_avail) {
                        rs_violation(rs, n);
                        break;
                    }
                    rs->rmsg[rs->rmsg_tail] = n;
                    rs->rmsg_tail = next;
                    rs->rdata_queued += n;
                    break;
                }
                case RS_MSG_SGL:
                    rs->sseq_comp = (uint16_t)rs_msg_data(msg);
                    break;
                case RS_MSG_CTRL:
                    if (rs_msg_data(msg) == RS_CTRL_DISCONNECT) {
                        rs_peer_gone(rs);
                    } else if (rs_msg_data(msg) == RS_CTRL_SHUTDOWN) {
                        if (rs->state & RS_ST_WRITABLE)
                            rs->state &= ~RS_ST_READABLE;
                        else
                            rs_peer_gone(rs);
                    } /* KEEPALIVE: nothing to do */
                    break;
                default: /* reserved ops: ignored */
                    break;
                }
            } else {
                unsigned kind = (unsigned)(w->wr_id >> 32) & 0xff;
                if (kind == WR_DATA_WRITE) {
                    rs->sqe_avail++;
                    rs->sbuf_avail += (uint32_t)w->wr_id;
                } else if (kind == WR_DATA_MSG) {
                    rs->sqe_avail++;
                } else {
                    rs->ctrl_max_seqno++;
                }
                if (w->status != IBV_WC_SUCCESS && rs_live(rs))
                    rs_set_error(rs, ECONNRESET);
            }
        }
    }
    if (rs_live(rs))
        while (reposts--)
            if (rs_post_recv(rs)) {
                rs_set_error(rs, errno);
                break;
            }
    return total;
}

static void rs_conn_fail(struct rs_sock *rs, int e)
{
    rs->state = RS_ST_CONN_ERROR;
    rs->err = e;
}

static void rs_start_connect(struct rs_sock *rs)
{
    struct rs_wire_conn c;
    if (rs_create_ep(rs)) {
        rs_conn_fail(rs, errno);
        return;
    }
    rs_format_conn(rs, &c);
    struct rdma_conn_param p = {0};
    p.private_data = &c;
    p.private_data_len = sizeof(c);
    p.flow_control = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    p.initiator_depth = 1; /* as rdma-core's rsockets ask on iWARP */
    if (rdma_connect(rs->id, &p))
        rs_conn_fail(rs, errno);
}

static void rs_handle_cm(struct rs_sock *rs, struct rdma_cm_event *ev)
{
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (rdma_resolve_route(rs->id, 2000))
            rs_conn_fail(rs, errno);
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        rs_start_connect(rs);
        break;
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
        rs_conn_fail(rs, EHOSTUNREACH);
        break;
    case RDMA_CM_EVENT_UNREACHABLE:
        rs_conn_fail(rs, ev->status == -ETIMEDOUT ? ETIMEDOUT : ECONNREFUSED);
        break;
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        rs_conn_fail(rs, ECONNREFUSED);
        break;
    case RDMA_CM_EVENT_ESTABLISHED:
        if (rs->state & RS_ST_CONNECTING) {
            if (rs_save_conn(rs, ev->param.conn.private_data, ev->param.conn.private_data_len)) {
                rs_conn_fail(rs, errno);
                rdma_disconnect(rs->id);
                break;
            }
            rs->state = RS_ST_CONNECTED | RS_ST_READABLE | RS_ST_WRITABLE;
        }
        rs->state &= ~RS_ST_ACCEPTING;
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        rs_poll_cq(rs); /* data that arrived before the close first */
        rs_peer_gone(rs);
        rs->state &= ~RS_ST_ACCEPTING;
        break;
    default:
        break;
    }
}

/* Take every pending connection event of a non-listening socket. */
static int rs_cm_poll(struct rs_sock *rs)
{
    struct rdma_cm_event *ev;
    int n = 0;
    if (rs->state & RS_ST_LISTEN)
        return 0;
    /* the common case, nothing queued, without rdma_get_cm_event's
     * fcntl(F_GETFL): this runs on every turn of a waiting loop */
    if (!rcm_channel_pending(to_rch(rs->ch)))
        return 0;
    while (rdma_get_cm_event(rs->ch, &ev) == 0) {
        rs_handle_cm(rs, ev);
        rdma_ack_cm_event(ev);
        n++;
    }
    return n;
}

/* Wake the threads waiting on rs (lock held): they look again. */
static void rs_wake(struct rs_sock *rs)
{
    rs->gen++;
    pthread_cond_broadcast(&rs->cond);
    if (rs->sleepers) {
        uint64_t one = 1;
        if (write(rs->wake_fd, &one, sizeof(one)) < 0) {
            /* the counter is full: it is readable, which is all we need */
        }
    }
}

static void rs_drain_wake(struct rs_sock *rs)
{
    uint64_t v;
    if (read(rs->wake_fd, &v, sizeof(v)) < 0) {
        /* EAGAIN: nothing pending */
    }
}

static void rs_progress(struct rs_sock *rs)
{
    int n = rs_cm_poll(rs);
    n += rs_poll_cq(rs);
    rs_update_credits(rs);
    if (n) {
        rs->progress_ns = now_ns(); /* rs_spin_ns */
        rs_wake(rs);
    }
}

static void rs_take_cq_event(struct rs_sock *rs)
{
    struct ibv_cq *cq;
    void *ctx;
    if (rs->cch && ibv_get_cq_event(rs->cch, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        rs->cq_armed = 0;
    }
}

/* Wait (lock held on entry and exit) until test(rs) holds: 0, or -1 with
 * EAGAIN (nonblock) / ETIMEDOUT (timeout_ms >= 0 passed). */
static int rs_wait(struct rs_sock *rs, bool (*test)(struct rs_sock *), bool nonblock,
                   int timeout_ms)
{
    uint64_t start = now_ns(), spin = rs_spin_ns(rs, start);
    for (;;) {
        rs_progress(rs);
        if (test(rs))
            return 0;
        if (nonblock)
            return rcm_err(EAGAIN);
        uint64_t el = now_ns() - start;
        if (timeout_ms >= 0 && el >= (uint64_t)timeout_ms * 1000000ull)
            return rcm_err(ETIMEDOUT);
        if (el < spin)
            continue; /* spin: latency */
        if (rs->cq && !rs->cq_armed) {
            ibv_req_notify_cq(rs->cq, 0);
            rs->cq_armed = 1;
            continue; /* poll again: no completion is lost */
        }
        if (rs->polling) {
            /* another thread polls the channels: wait for its news */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 200000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&rs->cond, &rs->lock, &ts);
            continue;
        }
        struct pollfd pf[3] = {{.fd = rs->wake_fd, .events = POLLIN},
                               {.fd = rs->ch->fd, .events = POLLIN}};
        int n = 2;
        if (rs->cch)
            pf[n++] = (struct pollfd){.fd = rs->cch->fd, .events = POLLIN};
        rs->polling = 1;
        rs->sleepers++;
        pthread_mutex_unlock(&rs->lock);
        poll(pf, (nfds_t)n, timeout_ms >= 0 ? 50 : 1000);
        pthread_mutex_lock(&rs->lock);
        rs->polling = 0;
        rs->sleepers--;
        if (pf[0].revents & POLLIN)
            rs_drain_wake(rs);
        if (n > 2 && (pf[2].revents & POLLIN))
            rs_take_cq_event(rs);
        pthread_cond_broadcast(&rs->cond); /* the next waiter may poll */
    }
}

/* ------------------------------------------------------------------------
 * Keepalive (SO_KEEPALIVE)
 *
 * One service thread for the process (started by the first socket that
 * turns SO_KEEPALIVE on) sends each listed, connected socket a keepalive
 * every TCP_KEEPIDLE seconds (default: the kernel's tcp_keepalive_time),
 * as rdma-core's rsockets do: a zero-length RDMA Write, which the peer
 * neither receives nor answers, so any rsockets peer takes it. Ours goes to
 * the peer's target SGL registration (a valid STag: hardware that refuses
 * STag 0 even on empty segments takes it too). A peer that is gone makes
 * the write fail, or the engine's dead-peer timer (UIWARP_PEER_TIMEOUT)
 * fire on the unacknowledged bytes: the socket then reports the error.
 * ---------------------------------------------------------------------- */

static pthread_mutex_t ka_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ka_cond;
static struct rs_sock *ka_list; /* linked through ka_next; ka_lock */
static bool ka_running, ka_atfork;

/* Lock held: post one keepalive if the connection is up and a control
 * slot is free (one is, unless grants are in flight: then skip a turn). */
static void rs_send_keepalive(struct rs_sock *rs)
{
    if (!rs_live(rs) || (rs->state & RS_ST_ACCEPTING) || rs->ctrl_seqno == rs->ctrl_max_seqno ||
        !rs->remote_sgl.length)
        return;
    struct ibv_send_wr wr = {.wr_id = wr_id(WR_CTRL, rs_msg(RS_MSG_CTRL, RS_CTRL_KEEPALIVE)),
                             .opcode = IBV_WR_RDMA_WRITE};
    wr.wr.rdma.remote_addr = rs->remote_sgl.addr;
    wr.wr.rdma.rkey = rs->remote_sgl.key;
    struct ibv_send_wr *bad;
    rs->ctrl_seqno++;
    int r = ibv_post_send(rs->id->qp, &wr, &bad);
    if (r) {
        rs->ctrl_seqno--;
        rs_set_error(rs, r);
        rs_wake(rs);
    }
}

static void *ka_run(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&ka_lock);
    for (;;) {
        uint64_t now = now_ns(), next = UINT64_MAX;
        for (struct rs_sock *rs = ka_list; rs; rs = rs->ka_next) {
            if (rs->keepalive_due_ns <= now) {
                /* never wait for a socket's lock here (its owner may be
                 * adding or removing it): try again shortly */
                if (pthread_mutex_trylock(&rs->lock) == 0) {
                    rs_send_keepalive(rs);
                    rs->keepalive_due_ns = now + (uint64_t)rs->keepidle * 1000000000ull;
                    pthread_mutex_unlock(&rs->lock);
                } else {
                    rs->keepalive_due_ns = now + 10000000ull;
                }
            }
            if (rs->keepalive_due_ns < next)
                next = rs->keepalive_due_ns;
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&ka_cond, &ka_lock);
        } else {
            struct timespec ts = {.tv_sec = (time_t)(next / 1000000000ull),
                                  .tv_nsec = (long)(next % 1000000000ull)};
            pthread_cond_timedwait(&ka_cond, &ka_lock, &ts);
        }
    }
    return NULL;
}

static void ka_child(void)
{
    /* the thread is not in the child; neither are usable connections */
    pthread_mutex_init(&ka_lock, NULL);
    ka_list = NULL;
    ka_running = false;
}

/* List rs (or restart its period: TCP_KEEPIDLE changed). rs->lock held. */
static void rs_ka_add(struct rs_sock *rs)
{
    pthread_mutex_lock(&ka_lock);
    if (!ka_atfork) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ka_cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_atfork(NULL, NULL, ka_child);
        ka_atfork = true;
    }
    if (!rs->ka_listed) {
        rs->ka_next = ka_list;
        ka_list = rs;
        rs->ka_listed = true;
    }
    rs->keepalive_due_ns = now_ns() + (uint64_t)rs->keepidle * 1000000000ull;
    if (!ka_running) {
        pthread_attr_t a;
        pthread_t t;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        ka_running = pthread_create(&t, &a, ka_run, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    pthread_cond_signal(&ka_cond);
    pthread_mutex_unlock(&ka_lock);
}

static void rs_ka_remove(struct rs_sock *rs)
{
    pthread_mutex_lock(&ka_lock);
    if (rs->ka_listed) {
        struct rs_sock **pp = &ka_list;
        while (*pp != rs)
            pp = &(*pp)->ka_next;
        *pp = rs->ka_next;
        rs->ka_listed = false;
    }
    pthread_mutex_unlock(&ka_lock);
}

/* ------------------------------------------------------------------------
 * Socket calls
 * ---------------------------------------------------------------------- */

UIW_EXPORT int rsocket(int domain, int type, int protocol)
{
    if ((domain != AF_INET && domain != AF_INET6) ||
        (type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM ||
        (protocol && protocol != IPPROTO_TCP))
        return rcm_err(EOPNOTSUPP);
    struct rs_sock *rs = rs_new(domain, NULL);
    if (!rs)
        return -1;
    if (rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP)) {
        int e = errno;
        rs_free(rs);
        return rcm_err(e);
    }
    if (type & SOCK_NONBLOCK)
        rs->fd_flags |= O_NONBLOCK;
    int fd = rs_insert(rs);
    if (fd < 0) {
        int e = errno;
        rs_free(rs);
        return rcm_err(e);
    }
    return fd;
}

#define RS_GET(rs, fd)                                                                             \
    struct rs_sock *rs = rs_lookup(fd);                                                            \
    if (!rs)                                                                                       \
    return rcm_err(EBADF)

UIW_EXPORT int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    RS_GET(rs, socket);
    if (!addr || addrlen < sizeof(struct sockaddr_in))
        return rcm_err(EINVAL);
    pthread_mutex_lock(&rs->lock);
    int r =
        rs->state != RS_ST_INIT ? rcm_err(EINVAL) : rdma_bind_addr(rs->id, (struct sockaddr *)addr);
    if (!r)
        rs->state = RS_ST_BOUND;
    pthread_mutex_unlock(&rs->lock);
    return r;
}

UIW_EXPORT int rlisten(int socket, int backlog)
{
    RS_GET(rs, socket);
    pthread_mutex_lock(&rs->lock);
    int r = 0;
    if (!(rs->state & RS_ST_LISTEN)) {
        r = rdma_listen(rs->id, backlog);
        if (!r)
            rs->state = RS_ST_LISTEN;
    }
    pthread_mutex_unlock(&rs->lock);
    return r;
}

static void rs_copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
    socklen_t sz =
        src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (*len)
        memcpy(dst, src, *len < sz ? *len : sz);
    *len = sz;
}

/* getsockname/getpeername's arguments: like the kernel, a null address is
 * fine with a length of 0 (librspreload asks for the length alone to learn
 * the family when it falls back to a TCP socket). */
static bool rs_addr_args_ok(const struct sockaddr *addr, const socklen_t *addrlen)
{
    return addrlen && (addr || *addrlen == 0);
}

UIW_EXPORT int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_GET(ls, socket);
    if (!(ls->state & RS_ST_LISTEN))
        return rcm_err(EINVAL);
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ls->ch, &ev)) {
            if (errno != EAGAIN)
                return -1;
            if (ls->fd_flags & O_NONBLOCK)
                return rcm_err(EAGAIN);
            struct pollfd pf = {.fd = ls->ch->fd, .events = POLLIN};
            if (poll(&pf, 1, -1) < 0 && errno == EINTR)
                return rcm_err(EINTR);
            continue;
        }
        if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdma_ack_cm_event(ev);
            continue;
        }
        struct rdma_cm_id *cid = ev->id;
        struct rdma_conn_param req = ev->param.conn;
        uint8_t pdata[256];
        uint8_t plen = req.private_data_len;
        if (req.private_data && plen)
            memcpy(pdata, req.private_data, plen);
        rdma_ack_cm_event(ev);

        struct rs_sock *rs = rs_new(ls->domain, ls);
        if (!rs) {
            rdma_reject(cid, NULL, 0);
            rdma_destroy_id(cid);
            return rcm_err(ENOMEM);
        }
        if (rdma_migrate_id(cid, rs->ch)) {
            int e = errno;
            rdma_reject(cid, NULL, 0);
            rdma_destroy_id(cid);
            rs_free(rs);
            return rcm_err(e);
        }
        cid->context = rs;
        rs->id = cid;
        if (plen < sizeof(struct rs_wire_conn) || pdata[0] != RS_WIRE_VERSION || rs_create_ep(rs) ||
            rs_save_conn(rs, pdata, plen)) {
            /* not an rsocket peer, or no resources: refuse it, keep listening */
            rdma_reject(cid, NULL, 0);
            rs_free(rs);
            continue;
        }
        struct rs_wire_conn c;
        rs_format_conn(rs, &c);
        struct rdma_conn_param p = req;
        p.private_data = &c;
        p.private_data_len = sizeof(c);
        if (rdma_accept(cid, &p)) {
            int e = errno;
            rs_free(rs);
            return rcm_err(e);
        }
        rs->state = RS_ST_CONNECTED | RS_ST_READABLE | RS_ST_WRITABLE | RS_ST_ACCEPTING;
        int fd = rs_insert(rs);
        if (fd < 0) {
            int e = errno;
            rdma_disconnect(cid);
            rs_free(rs);
            return rcm_err(e);
        }
        if (rs->keepalive) {
            pthread_mutex_lock(&rs->lock);
            rs_ka_add(rs);
            pthread_mutex_unlock(&rs->lock);
        }
        if (addr && addrlen)
            rs_copy_addr(addr, addrlen, rdma_get_peer_addr(cid));
        return fd;
    }
}

static bool rs_connect_done(struct rs_sock *rs)
{
    return !(rs->state & RS_ST_CONNECTING);
}

/* Drive a connect; lock held. */
static int rs_do_connect(struct rs_sock *rs, bool nonblock)
{
    if (rs_wait(rs, rs_connect_done, nonblock, -1))
        return rcm_err(errno == EAGAIN ? EINPROGRESS : errno);
    if (rs->state & RS_ST_CONN_ERROR)
        return rcm_err(rs->err);
    return 0;
}

UIW_EXPORT int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)
{
    RS_GET(rs, socket);
    if (!addr || addrlen < sizeof(struct sockaddr_in))
        return rcm_err(EINVAL);
    pthread_mutex_lock(&rs->lock);
    int r;
    bool nb = rs->fd_flags & O_NONBLOCK;
    if (rs->state & RS_ST_CONNECTING) {
        r = rs_do_connect(rs, nb);
        if (r && errno == EINPROGRESS)
            errno = EALREADY;
    } else if (rs->state & RS_ST_CONNECTED) {
        r = rcm_err(EISCONN);
    } else if (rs->state & (RS_ST_LISTEN | RS_ST_CONN_ERROR)) {
        r = rcm_err(EINVAL);
    } else {
        rs->state = RS_ST_CONNECTING;
        if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, 2000)) {
            rs_conn_fail(rs, errno);
            r = rcm_err(rs->err);
        } else {
            r = rs_do_connect(rs, nb);
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return r;
}

/* For send/recv on a socket still connecting (nonblocking connect). */
static int rs_check_connected(struct rs_sock *rs, bool nonblock)
{
    if (rs->state & RS_ST_CONNECTING) {
        if (rs_do_connect(rs, nonblock))
            return rcm_err(errno == EINPROGRESS ? EAGAIN : errno);
    }
    if (!(rs->state & RS_ST_CONNECTED))
        return rcm_err((rs->state & RS_ST_CONN_ERROR) ? rs->err : ENOTCONN);
    return 0;
}

/* ------------------------------------------------------------------------
 * Data
 * ---------------------------------------------------------------------- */

static bool rs_can_send(struct rs_sock *rs)
{
    volatile struct rs_wire_sge *t = rs->target_sgl;
    return rs_live(rs) && (rs->state & RS_ST_WRITABLE) && !(rs->state & RS_ST_ACCEPTING) &&
           rs->sqe_avail >= 2 && rs->sbuf_avail >= RS_SNDLOWAT && rs->sseq_no != rs->sseq_comp &&
           t[rs->target_sge].length != 0;
}

static bool rs_send_ready(struct rs_sock *rs)
{
    return rs_can_send(rs) || !(rs->state & RS_ST_WRITABLE);
}

static bool rs_have_rdata(struct rs_sock *rs)
{
    return rs->rmsg_head != rs->rmsg_tail;
}

static bool rs_recv_ready(struct rs_sock *rs)
{
    return rs_have_rdata(rs) || !(rs->state & RS_ST_READABLE);
}

/* Copy len bytes from the iovec cursor into the send buffer at sbuf_head. */
static void rs_copy_in(struct rs_sock *rs, const struct iovec **iov, size_t *off, uint32_t len,
                       struct ibv_sge sge[2], int *nsge)
{
    uint32_t first = rs->sbuf_size - rs->sbuf_head;
    if (first > len)
        first = len;
    sge[0] = (struct ibv_sge){
        .addr = (uintptr_t)(rs->sbuf + rs->sbuf_head), .length = first, .lkey = rs->smr->lkey};
    *nsge = 1;
    if (first < len) {
        sge[1] = (struct ibv_sge){
            .addr = (uintptr_t)rs->sbuf, .length = len - first, .lkey = rs->smr->lkey};
        *nsge = 2;
    }
    for (int s = 0; s < *nsge; s++) {
        uint8_t *dst = (uint8_t *)(uintptr_t)sge[s].addr;
        uint32_t want = sge[s].length;
        while (want) {
            size_t have = (*iov)->iov_len - *off;
            size_t n = have < want ? have : want;
            memcpy(dst, (uint8_t *)(*iov)->iov_base + *off, n);
            dst += n;
            want -= (uint32_t)n;
            *off += n;
            if (*off == (*iov)->iov_len) {
                (*iov)++;
                *off = 0;
            }
        }
    }
    rs->sbuf_head = (rs->sbuf_head + len) % rs->sbuf_size;
}

static int rs_send_iomaps(struct rs_sock *rs, bool nonblock);

static ssize_t rs_sendv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
    RS_GET(rs, socket);
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    /* skip leading empty vectors so the cursor never sits on one */
    while (iovcnt && !iov->iov_len)
        iov++, iovcnt--;
    pthread_mutex_lock(&rs->lock);
    bool nb = (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
    int r = rs_check_connected(rs, nb);
    if (!r && rs->iomap_pending)
        r = rs_send_iomaps(rs, nb); /* mappings reach the peer before our data */
    size_t left = len, off = 0;
    while (!r && left) {
        if (!rs_can_send(rs)) {
            r = rs_wait(rs, rs_send_ready, nb, -1);
            if (r)
                break;
            if (!(rs->state & RS_ST_WRITABLE)) {
                r = rcm_err((rs->state & RS_ST_ERROR) ? rs->err : EPIPE);
                break;
            }
        }
        volatile struct rs_wire_sge *t = &rs->target_sgl[rs->target_sge];
        uint32_t x = left < RS_XFER ? (uint32_t)left : RS_XFER;
        if (x > rs->sbuf_avail)
            x = rs->sbuf_avail;
        if (x > t->length)
            x = t->length;
        struct ibv_sge sge[2];
        int nsge;
        rs_copy_in(rs, &iov, &off, x, sge, &nsge);
        uint64_t raddr = t->addr;
        uint32_t rkey = t->key;
        t->addr = t->addr + x;
        t->length = t->length - x;
        if (!t->length && ++rs->target_sge == RS_WIRE_SGL_SIZE)
            rs->target_sge = 0;
        rs->sseq_no++;
        rs->sqe_avail -= 2;
        rs->sbuf_avail -= x;
        r = rs_post_write_msg(rs, sge, nsge, x, x <= rs->sq_inline ? IBV_SEND_INLINE : 0, raddr,
                              rkey, rs_msg(RS_MSG_DATA, x), WR_DATA_WRITE, WR_DATA_MSG);
        if (r) {
            rs_set_error(rs, errno);
            break;
        }
        left -= x;
    }
    pthread_mutex_unlock(&rs->lock);
    if (left < len)
        return (ssize_t)(len - left);
    /* no SIGPIPE is raised on EPIPE: rsockets never did */
    return r ? -1 : 0;
}

static ssize_t rs_recvv(int socket, const struct iovec *iov, int iovcnt, int flags)
{
    RS_GET(rs, socket);
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    pthread_mutex_lock(&rs->lock);
    bool nb = (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
    int r = rs_check_connected(rs, nb);
    size_t got = 0;
    int vi = 0;
    size_t voff = 0;
    while (!r && got < len) {
        if (!rs_have_rdata(rs)) {
            if (got && !(flags & MSG_WAITALL))
                break;
            r = rs_wait(rs, rs_recv_ready, nb, -1);
            if (r || !rs_have_rdata(rs))
                break; /* error, or end of stream */
        }
        int head = rs->rmsg_head;
        uint32_t roff = rs->rbuf_offset;
        bool peek = flags & MSG_PEEK;
        while (got < len && head != rs->rmsg_tail) {
            uint32_t m = rs->rmsg[head];
            size_t take = len - got < m ? len - got : m;
            size_t done = 0;
            while (done < take) {
                size_t seg = rs->rbuf_size - roff;
                size_t vroom = iov[vi].iov_len - voff;
                size_t n = take - done;
                if (n > seg)
                    n = seg;
                if (n > vroom)
                    n = vroom;
                memcpy((uint8_t *)iov[vi].iov_base + voff, rs->rbuf + roff, n);
                done += n;
                voff += n;
                roff = (uint32_t)((roff + n) % rs->rbuf_size);
                if (voff == iov[vi].iov_len && vi + 1 < iovcnt) {
                    vi++;
                    voff = 0;
                }
            }
            got += take;
            if (!peek) {
                rs->rbuf_bytes_avail += (uint32_t)take;
                rs->rdata_queued -= take;
                if (take == m) {
                    rs->rseq_no++;
                    if (++head == rs->rq_size + 1)
                        head = 0;
                } else {
                    rs->rmsg[head] = m - (uint32_t)take;
                }
            } else if (++head == rs->rq_size + 1) {
                head = 0;
            }
        }
        if (peek)
            break;
        rs->rmsg_head = head;
        rs->rbuf_offset = roff;
        rs_update_credits(rs);
        if (!(flags & MSG_WAITALL))
            break;
    }
    if (!got && !r && len && rs->rerr && !rs_have_rdata(rs))
        r = rcm_err(rs->rerr); /* not an end of stream */
    pthread_mutex_unlock(&rs->lock);
    /* End of stream: 0, and errno no longer the EAGAIN of an earlier call
     * (rstream, nonblocking, retries while errno is EAGAIN even on 0 and
     * spun for ever once its peer had died). */
    if (!got && !r && len)
        errno = 0;
    if (got || !r)
        return (ssize_t)got;
    return -1;
}

/* ------------------------------------------------------------------------
 * riomap, riounmap, riowrite
 * ---------------------------------------------------------------------- */

/* Tell the peer about our new PROT_WRITE mappings (lock held): each entry
 * is RDMA-Written, in the peer's byte order, into its slot of the peer's
 * iomap array, then an IOMAP_SGL message names the slot. Like a data
 * message it takes a credit and two send-queue entries. */
static int rs_send_iomaps(struct rs_sock *rs, bool nonblock)
{
    for (struct rs_iomr *m = rs->iomaps; m; m = m->next) {
        if (m->index < 0 || m->sent)
            continue;
        if (!rs_can_send(rs)) {
            if (rs_wait(rs, rs_send_ready, nonblock, -1))
                return -1;
            if (!(rs->state & RS_ST_WRITABLE))
                return rcm_err((rs->state & RS_ST_ERROR) ? rs->err : EPIPE);
        }
        struct rs_wire_iomap e = {.offset = m->offset,
                                  .sge = {.addr = (uintptr_t)m->mr->addr,
                                          .key = m->mr->rkey,
                                          .length = (uint32_t)m->mr->length}};
        if (rs->swap_sgl) {
            e.offset = bswap_64(e.offset);
            e.sge.addr = bswap_64(e.sge.addr);
            e.sge.key = bswap_32(e.sge.key);
            e.sge.length = bswap_32(e.sge.length);
        }
        struct ibv_sge sge = {.addr = (uintptr_t)&e, .length = sizeof(e)};
        rs->sseq_no++;
        rs->sqe_avail -= 2;
        if (rs_post_write_msg(rs, &sge, 1, 0, IBV_SEND_INLINE,
                              rs->remote_iomap.addr + (uint64_t)m->index * sizeof(e),
                              rs->remote_iomap.key, rs_msg(RS_MSG_IOMAP_SGL, (uint32_t)m->index),
                              WR_DATA_WRITE, WR_DATA_MSG)) {
            rs_set_error(rs, errno);
            return -1;
        }
        m->sent = true;
    }
    rs->iomap_pending = false;
    return 0;
}

UIW_EXPORT off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)
{
    (void)flags; /* reserved (rdma-core ignores it too) */
    RS_GET(rs, socket);
    if (!buf || !len || len > UINT32_MAX || (prot & ~PROT_WRITE) || offset < -1)
        return rcm_err(EINVAL);
    pthread_mutex_lock(&rs->lock);
    off_t r;
    struct rs_iomr *m = NULL;
    if (!rs->id || !rs->id->qp || !(rs->state & RS_ST_CONNECTED)) {
        r = rcm_err(EINVAL); /* the mapping belongs to a connection */
        goto out;
    }
    int index = -1;
    if (prot & PROT_WRITE) {
        /* the lowest slot of the peer's array no mapping of ours holds */
        for (uint32_t i = 0; i < rs->remote_iomap.length && index < 0; i++) {
            bool used = false;
            for (struct rs_iomr *o = rs->iomaps; o && !used; o = o->next)
                used = o->index == (int)i;
            if (!used)
                index = (int)i;
        }
        if (index < 0) {
            /* the peer offers no (more) mappings: RDMA_IOMAPSIZE */
            r = rcm_err(ENOMEM);
            goto out;
        }
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        r = rcm_err(ENOMEM);
        goto out;
    }
    int access = IBV_ACCESS_LOCAL_WRITE | ((prot & PROT_WRITE) ? IBV_ACCESS_REMOTE_WRITE : 0);
    m->mr = ibv_reg_mr(rs->id->qp->pd, buf, len, access);
    if (!m->mr) {
        free(m);
        r = -1;
        goto out;
    }
    m->offset = offset == -1 ? (uint64_t)(uintptr_t)buf : (uint64_t)offset;
    m->index = index;
    m->next = rs->iomaps;
    rs->iomaps = m;
    if (index >= 0)
        rs->iomap_pending = true; /* sent with our next rsend or riowrite */
    r = (off_t)m->offset;
out:
    pthread_mutex_unlock(&rs->lock);
    return r;
}

UIW_EXPORT int riounmap(int socket, void *buf, size_t len)
{
    RS_GET(rs, socket);
    pthread_mutex_lock(&rs->lock);
    int r = rcm_err(EINVAL);
    for (struct rs_iomr **pp = &rs->iomaps; *pp; pp = &(*pp)->next) {
        struct rs_iomr *m = *pp;
        if (m->mr->addr == buf && m->mr->length == len) {
            *pp = m->next;
            ibv_dereg_mr(m->mr);
            free(m);
            r = 0;
            break;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return r;
}

/* The peer's mapping covering offset (it wrote them into target_iomap). */
static bool rs_find_iomap(struct rs_sock *rs, uint64_t offset, struct rs_wire_iomap *out)
{
    for (uint32_t i = 0; i < rs->iomap_size; i++) {
        struct rs_wire_iomap e;
        memcpy(&e, (const void *)&rs->target_iomap[i], sizeof(e));
        if (e.sge.length && offset >= e.offset && offset - e.offset < e.sge.length) {
            *out = e;
            return true;
        }
    }
    return false;
}

static bool rs_can_iowrite(struct rs_sock *rs)
{
    return rs_live(rs) && (rs->state & RS_ST_WRITABLE) && !(rs->state & RS_ST_ACCEPTING) &&
           rs->sqe_avail >= 1 && rs->sbuf_avail >= RS_SNDLOWAT;
}

static bool rs_iowrite_ready(struct rs_sock *rs)
{
    return rs_can_iowrite(rs) || !(rs->state & RS_ST_WRITABLE);
}

UIW_EXPORT size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)
{
    struct rs_sock *rs = rs_lookup(socket);
    if (!rs) {
        errno = EBADF;
        return (size_t)-1;
    }
    if (offset < 0 || (!buf && count)) {
        errno = EINVAL;
        return (size_t)-1;
    }
    pthread_mutex_lock(&rs->lock);
    bool nb = (rs->fd_flags & O_NONBLOCK) || (flags & MSG_DONTWAIT);
    int r = rs_check_connected(rs, nb);
    if (!r && rs->iomap_pending)
        r = rs_send_iomaps(rs, nb);
    struct iovec v = {.iov_base = (void *)buf, .iov_len = count};
    const struct iovec *iov = &v;
    size_t left = count, off = 0;
    uint64_t pos = (uint64_t)offset;
    struct rs_wire_iomap e = {0};
    bool have = false;
    while (!r && left) {
        if (!have || pos < e.offset || pos - e.offset >= e.sge.length) {
            have = rs_find_iomap(rs, pos, &e);
            if (!have) {
                /* no mapping of the peer covers this offset (yet) */
                r = rcm_err(EINVAL);
                break;
            }
        }
        if (!rs_can_iowrite(rs)) {
            r = rs_wait(rs, rs_iowrite_ready, nb, -1);
            if (r)
                break;
            if (!(rs->state & RS_ST_WRITABLE)) {
                r = rcm_err((rs->state & RS_ST_ERROR) ? rs->err : EPIPE);
                break;
            }
        }
        uint32_t x = left < RS_XFER ? (uint32_t)left : RS_XFER;
        if (x > rs->sbuf_avail)
            x = rs->sbuf_avail;
        if (x > e.sge.length - (pos - e.offset))
            x = (uint32_t)(e.sge.length - (pos - e.offset));
        struct ibv_sge sge[2];
        int nsge;
        rs_copy_in(rs, &iov, &off, x, sge, &nsge);
        struct ibv_send_wr wr = {.wr_id = wr_id(WR_DATA_WRITE, x),
                                 .sg_list = sge,
                                 .num_sge = nsge,
                                 .opcode = IBV_WR_RDMA_WRITE,
                                 .send_flags = x <= rs->sq_inline ? IBV_SEND_INLINE : 0};
        wr.wr.rdma.remote_addr = e.sge.addr + (pos - e.offset);
        wr.wr.rdma.rkey = e.sge.key;
        struct ibv_send_wr *bad;
        rs->sqe_avail--;
        rs->sbuf_avail -= x;
        int pr = ibv_post_send(rs->id->qp, &wr, &bad);
        if (pr) {
            r = rcm_err(pr);
            rs_set_error(rs, pr);
            break;
        }
        left -= x;
        pos += x;
    }
    pthread_mutex_unlock(&rs->lock);
    if (left < count)
        return count - left;
    return r ? (size_t)-1 : 0;
}

UIW_EXPORT ssize_t rsend(int socket, const void *buf, size_t len, int flags)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    return rs_sendv(socket, &v, 1, flags);
}

UIW_EXPORT ssize_t rsendto(int socket, const void *buf, size_t len, int flags,
                           const struct sockaddr *dest_addr, socklen_t addrlen)
{
    if (dest_addr || addrlen)
        return rcm_err(EISCONN);
    return rsend(socket, buf, len, flags);
}

UIW_EXPORT ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)
{
    if (msg->msg_control && msg->msg_controllen)
        return rcm_err(EOPNOTSUPP);
    return rs_sendv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

UIW_EXPORT ssize_t rwrite(int socket, const void *buf, size_t count)
{
    return rsend(socket, buf, count, 0);
}

UIW_EXPORT ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)
{
    return rs_sendv(socket, iov, iovcnt, 0);
}

UIW_EXPORT ssize_t rrecv(int socket, void *buf, size_t len, int flags)
{
    struct iovec v = {.iov_base = buf, .iov_len = len};
    return rs_recvv(socket, &v, 1, flags);
}

UIW_EXPORT ssize_t rrecvfrom(int socket, void *buf, size_t len, int flags,
                             struct sockaddr *src_addr, socklen_t *addrlen)
{
    ssize_t r = rrecv(socket, buf, len, flags);
    if (r >= 0 && src_addr && addrlen)
        rgetpeername(socket, src_addr, addrlen);
    return r;
}

UIW_EXPORT ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)
{
    if (msg->msg_control && msg->msg_controllen)
        return rcm_err(EOPNOTSUPP);
    return rs_recvv(socket, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

UIW_EXPORT ssize_t rread(int socket, void *buf, size_t count)
{
    return rrecv(socket, buf, count, 0);
}

UIW_EXPORT ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)
{
    return rs_recvv(socket, iov, iovcnt, 0);
}

/* ------------------------------------------------------------------------
 * poll / select
 * ---------------------------------------------------------------------- */

/* Readiness of one rsocket now (lock taken here); *spin raised to its
 * spin for a wait that started at start. */
static short rs_revents(struct rs_sock *rs, short events, unsigned *gen, uint64_t start,
                        uint64_t *spin)
{
    short rev = 0;
    pthread_mutex_lock(&rs->lock);
    *gen = rs->gen;
    uint64_t sp = rs_spin_ns(rs, start);
    if (sp > *spin)
        *spin = sp;
    if (rs->state & RS_ST_LISTEN) {
        struct pollfd pf = {.fd = rs->ch->fd, .events = POLLIN};
        poll(&pf, 1, 0);
        rev = (short)(pf.revents & events & POLLIN);
    } else {
        rs_progress(rs);
        if (rs->state & RS_ST_CONN_ERROR) {
            rev = (short)((events & (POLLIN | POLLOUT)) | POLLERR);
        } else if (rs->state & RS_ST_CONNECTED) {
            if ((events & POLLIN) && rs_recv_ready(rs))
                rev |= POLLIN;
            if ((events & POLLOUT) && rs_can_send(rs))
                rev |= POLLOUT;
            /* hang-up once the data that came before it is read: like
             * TCP, and programs that stop at POLLHUP (rstream -T a) get
             * the end of the stream */
            if ((rs->state & RS_ST_DISCONNECTED) && !rs_have_rdata(rs))
                rev |= POLLHUP;
            if (rs->state & RS_ST_ERROR)
                rev |= POLLERR;
        }
    }
    pthread_mutex_unlock(&rs->lock);
    return rev;
}

UIW_EXPORT int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
    uint64_t start = now_ns();
    struct pollfd *pf = NULL;
    unsigned gen_local[16], *gen = gen_local;
    int ret;
    if (nfds > 16) {
        gen = calloc(nfds, sizeof(*gen));
        if (!gen)
            return rcm_err(ENOMEM);
    }
    uint64_t spin = RS_SPIN_NS;
    for (;;) {
        int cnt = 0;
        for (nfds_t i = 0; i < nfds; i++) {
            struct rs_sock *rs = rs_lookup(fds[i].fd);
            if (rs) {
                fds[i].revents = rs_revents(rs, fds[i].events, &gen[i], start, &spin);
            } else {
                fds[i].revents = 0;
                if (fds[i].fd >= 0)
                    poll(&fds[i], 1, 0);
            }
            if (fds[i].revents)
                cnt++;
        }
        int left = -1;
        if (timeout >= 0) {
            uint64_t el = (now_ns() - start) / 1000000u;
            left = el >= (uint64_t)timeout ? 0 : timeout - (int)el;
        }
        if (cnt || left == 0) {
            ret = cnt;
            break;
        }
        if (now_ns() - start < spin)
            continue; /* spin: latency (rs_spin_ns) */
        if (!pf) {
            pf = calloc(3 * nfds + 1, sizeof(*pf));
            if (!pf) {
                ret = rcm_err(ENOMEM);
                break;
            }
        }
        /* arm, then poll the channels behind the rsockets */
        nfds_t n = 0;
        bool ready = false;
        for (nfds_t i = 0; i < nfds; i++) {
            struct rs_sock *rs = rs_lookup(fds[i].fd);
            if (!rs) {
                pf[n++] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
                continue;
            }
            pthread_mutex_lock(&rs->lock);
            if (rs->gen != gen[i])
                ready = true; /* another thread made progress meanwhile */
            rs->sleepers++;
            pf[n++] = (struct pollfd){.fd = rs->wake_fd, .events = POLLIN};
            pf[n++] = (struct pollfd){.fd = rs->ch->fd, .events = POLLIN};
            if (rs->cq) {
                if (!rs->cq_armed) {
                    ibv_req_notify_cq(rs->cq, 0);
                    rs->cq_armed = 1;
                    ready = true; /* look once more after arming */
                }
                pf[n++] = (struct pollfd){.fd = rs->cch->fd, .events = POLLIN};
            }
            pthread_mutex_unlock(&rs->lock);
        }
        int pr = ready ? 0 : poll(pf, n, left < 0 || left > 1000 ? 1000 : left);
        int perr = errno;
        for (nfds_t i = 0; i < nfds; i++) {
            struct rs_sock *rs = rs_lookup(fds[i].fd);
            if (rs) {
                pthread_mutex_lock(&rs->lock);
                rs->sleepers--;
                if (!ready)
                    rs_drain_wake(rs);
                if (rs->cch)
                    rs_take_cq_event(rs);
                pthread_mutex_unlock(&rs->lock);
            }
        }
        if (pr < 0) {
            ret = rcm_err(perr);
            break;
        }
    }
    free(pf);
    if (gen != gen_local)
        free(gen);
    return ret;
}

UIW_EXPORT int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
                       struct timeval *timeout)
{
    struct pollfd *pf = calloc((size_t)(nfds > 0 ? nfds : 1), sizeof(*pf));
    if (!pf)
        return rcm_err(ENOMEM);
    int n = 0;
    for (int fd = 0; fd < nfds; fd++) {
        short ev = 0;
        bool any = false;
        if (readfds && FD_ISSET(fd, readfds))
            ev |= POLLIN, any = true;
        if (writefds && FD_ISSET(fd, writefds))
            ev |= POLLOUT, any = true;
        if (exceptfds && FD_ISSET(fd, exceptfds))
            ev |= POLLPRI, any = true;
        if (any)
            pf[n++] = (struct pollfd){.fd = fd, .events = ev};
    }
    int to = timeout ? (int)(timeout->tv_sec * 1000 + timeout->tv_usec / 1000) : -1;
    int r = rpoll(pf, (nfds_t)n, to);
    if (readfds)
        FD_ZERO(readfds);
    if (writefds)
        FD_ZERO(writefds);
    if (exceptfds)
        FD_ZERO(exceptfds);
    if (r > 0) {
        r = 0;
        for (int i = 0; i < n; i++) {
            if (readfds && (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) &&
                (pf[i].events & POLLIN))
                FD_SET(pf[i].fd, readfds), r++;
            if (writefds && (pf[i].revents & (POLLOUT | POLLERR)) && (pf[i].events & POLLOUT))
                FD_SET(pf[i].fd, writefds), r++;
            if (exceptfds && (pf[i].revents & POLLPRI))
                FD_SET(pf[i].fd, exceptfds), r++;
        }
    }
    free(pf);
    return r;
}

/* ------------------------------------------------------------------------
 * Shutdown, close, names, options
 * ---------------------------------------------------------------------- */

static bool rs_ctrl_ready(struct rs_sock *rs)
{
    return rs->ctrl_seqno != rs->ctrl_max_seqno || !rs_live(rs);
}

static bool rs_sends_done(struct rs_sock *rs)
{
    return (int)(rs->ctrl_max_seqno - rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size ||
           !rs_live(rs);
}

static int rs_shutdown_locked(struct rs_sock *rs, int how)
{
    if (!(rs->state & RS_ST_CONNECTED))
        return rcm_err(ENOTCONN);
    int ctrl;
    if (how == SHUT_RDWR) {
        ctrl = RS_CTRL_DISCONNECT;
        rs->state &= ~(RS_ST_READABLE | RS_ST_WRITABLE);
    } else if (how == SHUT_WR) {
        rs->state &= ~RS_ST_WRITABLE;
        ctrl = (rs->state & RS_ST_READABLE) ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
    } else if (how == SHUT_RD) {
        rs->state &= ~RS_ST_READABLE;
        if (rs->state & RS_ST_WRITABLE)
            return 0;
        ctrl = RS_CTRL_DISCONNECT;
    } else {
        return rcm_err(EINVAL);
    }
    if (rs_live(rs) && !rs_wait(rs, rs_ctrl_ready, false, 5000) && rs_live(rs)) {
        rs->ctrl_seqno++;
        if (rs_post_msg(rs, rs_msg(RS_MSG_CTRL, (uint32_t)ctrl)))
            rs_set_error(rs, errno);
    }
    if (rs_live(rs))
        rs_wait(rs, rs_sends_done, false, 5000);
    if (ctrl == RS_CTRL_DISCONNECT) {
        rs->state |= RS_ST_DISCONNECTED;
        rdma_disconnect(rs->id);
    }
    return 0;
}

UIW_EXPORT int rshutdown(int socket, int how)
{
    RS_GET(rs, socket);
    pthread_mutex_lock(&rs->lock);
    int r = rs_shutdown_locked(rs, how);
    pthread_mutex_unlock(&rs->lock);
    return r;
}

UIW_EXPORT int rclose(int socket)
{
    RS_GET(rs, socket);
    pthread_mutex_lock(&rs->lock);
    if ((rs->state & RS_ST_CONNECTED) && !(rs->state & RS_ST_DISCONNECTED))
        rs_shutdown_locked(rs, SHUT_RDWR);
    else if (rs->state & RS_ST_CONNECTED)
        rdma_disconnect(rs->id);
    if (rs->state & RS_ST_LISTEN) {
        /* refuse the requests nobody accepted */
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(rs->ch, &ev) == 0) {
            struct rdma_cm_id *cid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
            rdma_ack_cm_event(ev);
            if (cid) {
                rdma_reject(cid, NULL, 0);
                rdma_destroy_id(cid);
            }
        }
    } else {
        rs_cm_poll(rs);
    }
    pthread_mutex_unlock(&rs->lock);
    rs_free(rs);
    return 0;
}

UIW_EXPORT int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_GET(rs, socket);
    if (!rs_addr_args_ok(addr, addrlen))
        return rcm_err(EFAULT);
    if (!(rs->state & RS_ST_CONNECTED))
        return rcm_err(ENOTCONN);
    rs_copy_addr(addr, addrlen, rdma_get_peer_addr(rs->id));
    return 0;
}

UIW_EXPORT int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)
{
    RS_GET(rs, socket);
    if (!rs_addr_args_ok(addr, addrlen))
        return rcm_err(EFAULT);
    struct sockaddr *sa = rdma_get_local_addr(rs->id);
    if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) {
        struct sockaddr_storage ss = {0};
        ss.ss_family = (sa_family_t)rs->domain;
        rs_copy_addr(addr, addrlen, (struct sockaddr *)&ss);
    } else {
        rs_copy_addr(addr, addrlen, sa);
    }
    return 0;
}

static int opt_int(const void *v, socklen_t len, int *out)
{
    if (!v || len < sizeof(int))
        return rcm_err(EINVAL);
    memcpy(out, v, sizeof(int));
    return 0;
}

UIW_EXPORT int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)
{
    RS_GET(rs, socket);
    int v = 0, r = 0;
    pthread_mutex_lock(&rs->lock);
    bool early = !(rs->state & (RS_ST_CONNECTED | RS_ST_CONNECTING));
    if (level == SOL_SOCKET) {
        switch (optname) {
        case SO_REUSEADDR:
            if (!(r = opt_int(optval, optlen, &v))) {
                r = rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &v,
                                    sizeof(v));
                if (!r || errno == EOPNOTSUPP || errno == ENOSYS)
                    r = 0, rs->reuseaddr = !!v;
            }
            break;
        case SO_KEEPALIVE:
            if (!(r = opt_int(optval, optlen, &v))) {
                rs->keepalive = !!v;
                if (v)
                    rs_ka_add(rs);
                else
                    rs_ka_remove(rs);
            }
            break;
        case SO_RCVBUF:
        case SO_SNDBUF:
            if (!(r = opt_int(optval, optlen, &v)) && early && v > 0) {
                uint32_t sz = (uint32_t)v << 1;
                if (optname == SO_RCVBUF)
                    rs->rbuf_size = sz;
                else
                    rs->sbuf_size = sz;
            }
            break;
        case SO_LINGER:
            if (!optval || optlen < sizeof(struct linger))
                r = rcm_err(EINVAL);
            else
                memcpy(&rs->linger, optval, sizeof(rs->linger));
            break;
        case SO_OOBINLINE:
            r = opt_int(optval, optlen, &v);
            break;
        default:
            r = rcm_err(ENOPROTOOPT);
        }
    } else if (level == IPPROTO_TCP) {
        if (optname == TCP_NODELAY) {
            if (!(r = opt_int(optval, optlen, &v)))
                rs->nodelay = !!v;
        } else if (optname == TCP_MAXSEG) {
            r = opt_int(optval, optlen, &v);
        } else if (optname == TCP_KEEPIDLE || optname == TCP_KEEPINTVL || optname == TCP_KEEPCNT) {
            /* TCP's ranges; only the idle time matters here (keepalives
             * are reliable writes: a lost one is not retried by count) */
            int max = optname == TCP_KEEPCNT ? 127 : 32767;
            if (!(r = opt_int(optval, optlen, &v)) && (v < 1 || v > max))
                r = rcm_err(EINVAL);
            if (!r && optname == TCP_KEEPIDLE) {
                rs->keepidle = v;
                if (rs->ka_listed)
                    rs_ka_add(rs); /* the new period starts now */
            } else if (!r) {
                *(optname == TCP_KEEPINTVL ? &rs->keepintvl : &rs->keepcnt) = v;
            }
        } else {
            r = rcm_err(ENOPROTOOPT);
        }
    } else if (level == IPPROTO_IPV6 && optname == IPV6_V6ONLY) {
        if (!(r = opt_int(optval, optlen, &v))) {
            r = rdma_set_option(rs->id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &v, sizeof(v));
            if (!r)
                rs->v6only = !!v;
        }
    } else if (level == SOL_RDMA) {
        if (!early) {
            r = rcm_err(EINVAL);
        } else if (optname == RDMA_ROUTE) {
            r = rcm_err(EOPNOTSUPP);
        } else if (optlen < sizeof(int) || !optval) {
            r = rcm_err(EINVAL);
        } else {
            memcpy(&v, optval, sizeof(v));
            switch (optname) {
            case RDMA_SQSIZE:
                rs->sq_size = (uint16_t)(v < 16 ? 16 : v > 0xfffe ? 0xfffe : v);
                break;
            case RDMA_RQSIZE:
                rs->rq_size = (uint16_t)(v < 16 ? 16 : v > 0xfffe ? 0xfffe : v);
                break;
            case RDMA_INLINE:
                rs->sq_inline = (uint16_t)(v < 0 ? 0 : v > 256 ? 256 : v);
                break;
            case RDMA_IOMAPSIZE:
                /* rounded to what the wire's 8-bit scale can say */
                if (v < 0)
                    r = rcm_err(EINVAL);
                else
                    rs->iomap_size =
                        (uint16_t)rs_iomap_unscale(rs_iomap_scale(v > 32512 ? 32512 : (uint32_t)v));
                break;
            default:
                r = rcm_err(ENOPROTOOPT);
            }
        }
    } else {
        r = rcm_err(ENOPROTOOPT);
    }
    pthread_mutex_unlock(&rs->lock);
    return r;
}

static int put_int(void *optval, socklen_t *optlen, int v)
{
    if (!optval || !optlen || *optlen < sizeof(int))
        return rcm_err(EINVAL);
    memcpy(optval, &v, sizeof(v));
    *optlen = sizeof(int);
    return 0;
}

/* TCP_MAXSEG: what rdma-core's rsockets report for a route without a path
 * record (iWARP). It was 64 KiB, more than any TCP MSS:
 * iperf3 warns "Ignoring nonsense TCP MSS 65536". */
#define RS_TCP_MSS 2048

/* TCP_INFO, for programs that report it (iperf3 fails its interval
 * reports without it): the state, and TCP_MAXSEG's value as the MSS; the
 * rest (RTT, window, retransmits) is the business of uiwarp's own TCP
 * connection under the rsocket and reads 0. As much as fits, like Linux. */
static int rs_tcp_info(const struct rs_sock *rs, void *optval, socklen_t *optlen)
{
    if (!optval || !optlen)
        return rcm_err(EFAULT);
    struct tcp_info ti = {0};
    if (rs->state & RS_ST_LISTEN)
        ti.tcpi_state = TCP_LISTEN;
    else if ((rs->state & RS_ST_CONNECTED) && !(rs->state & RS_ST_DISCONNECTED))
        ti.tcpi_state = TCP_ESTABLISHED;
    else if (rs->state & RS_ST_CONNECTING)
        ti.tcpi_state = TCP_SYN_SENT;
    else
        ti.tcpi_state = TCP_CLOSE;
    ti.tcpi_snd_mss = ti.tcpi_rcv_mss = RS_TCP_MSS;
    socklen_t n = *optlen < sizeof(ti) ? *optlen : (socklen_t)sizeof(ti);
    memcpy(optval, &ti, n);
    *optlen = n;
    return 0;
}

UIW_EXPORT int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)
{
    RS_GET(rs, socket);
    int r;
    pthread_mutex_lock(&rs->lock);
    if (level == SOL_SOCKET) {
        switch (optname) {
        case SO_REUSEADDR:
            r = put_int(optval, optlen, rs->reuseaddr);
            break;
        case SO_KEEPALIVE:
            r = put_int(optval, optlen, rs->keepalive);
            break;
        case SO_RCVBUF:
            r = put_int(optval, optlen, (int)rs->rbuf_size);
            break;
        case SO_SNDBUF:
            r = put_int(optval, optlen, (int)rs->sbuf_size);
            break;
        case SO_TYPE:
            r = put_int(optval, optlen, SOCK_STREAM);
            break;
        case SO_ERROR:
            r = put_int(optval, optlen,
                        (rs->state & (RS_ST_CONN_ERROR | RS_ST_ERROR)) ? rs->err : 0);
            if (!r && (rs->state & RS_ST_CONN_ERROR))
                rs->err = 0;
            break;
        case SO_LINGER:
            if (!optval || !optlen || *optlen < sizeof(struct linger)) {
                r = rcm_err(EINVAL);
            } else {
                memcpy(optval, &rs->linger, sizeof(rs->linger));
                *optlen = sizeof(rs->linger);
                r = 0;
            }
            break;
        default:
            r = rcm_err(ENOPROTOOPT);
        }
    } else if (level == IPPROTO_TCP && optname == TCP_NODELAY) {
        r = put_int(optval, optlen, rs->nodelay);
    } else if (level == IPPROTO_TCP && optname == TCP_MAXSEG) {
        r = put_int(optval, optlen, RS_TCP_MSS);
    } else if (level == IPPROTO_TCP && optname == TCP_INFO) {
        r = rs_tcp_info(rs, optval, optlen);
    } else if (level == IPPROTO_TCP && optname == TCP_KEEPIDLE) {
        r = put_int(optval, optlen, rs->keepidle);
    } else if (level == IPPROTO_TCP && optname == TCP_KEEPINTVL) {
        r = put_int(optval, optlen, rs->keepintvl);
    } else if (level == IPPROTO_TCP && optname == TCP_KEEPCNT) {
        r = put_int(optval, optlen, rs->keepcnt);
    } else if (level == IPPROTO_IPV6 && optname == IPV6_V6ONLY) {
        r = put_int(optval, optlen, rs->v6only);
    } else if (level == SOL_RDMA && optname >= RDMA_SQSIZE && optname <= RDMA_IOMAPSIZE) {
        /* in the enum's order */
        const int v[] = {rs->sq_size, rs->rq_size, rs->sq_inline, rs->iomap_size};
        r = put_int(optval, optlen, v[optname - RDMA_SQSIZE]);
    } else {
        r = rcm_err(ENOPROTOOPT);
    }
    pthread_mutex_unlock(&rs->lock);
    return r;
}

UIW_EXPORT int rfcntl(int socket, int cmd, ...)
{
    RS_GET(rs, socket);
    va_list ap;
    int r;
    va_start(ap, cmd);
    pthread_mutex_lock(&rs->lock);
    if (cmd == F_GETFL) {
        r = O_RDWR | rs->fd_flags;
    } else if (cmd == F_SETFL) {
        int arg = va_arg(ap, int);
        rs->fd_flags = arg & O_NONBLOCK;
        r = 0;
    } else if (cmd == F_GETFD) {
        r = fcntl(rs->ch->fd, F_GETFD); /* FD_CLOEXEC of the fd the application sees */
    } else if (cmd == F_SETFD) {
        r = fcntl(rs->ch->fd, F_SETFD, va_arg(ap, int));
    } else {
        r = rcm_err(EOPNOTSUPP);
    }
    pthread_mutex_unlock(&rs->lock);
    va_end(ap);
    return r;
}
