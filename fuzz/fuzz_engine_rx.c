/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libFuzzer target for the engine's receive path (src/engine/qp_rx.c and
 * everything it calls): the fuzz input is the byte stream a peer sends to
 * a connected QP, after the MPA exchange.
 *
 * Set up once: the uiw_lo context, two PDs, two CQs and an arena at a fixed
 * address holding MRs separated by guard areas (poisoned for ASan):
 *   RW    remote write/read/atomic            contents may change
 *   WO    remote write, at an odd address     contents may change
 *   RO    remote read only                    must not change
 *   PD2   all remote rights, but another PD   must not change
 *   DEREG registered, then deregistered       must not change
 *   RECV  local write only: receive buffers   only the posted SGEs may change
 *   SINK  local write only: Read/atomic sinks only the posted SGEs may change
 *   SRC   local write only: Send source       must not change
 * The STags are the same in every process (getrandom, which seeds the STag
 * permutation and keys, is deterministic while the MRs are registered), and
 * so are the addresses (= tagged offsets), so corpus entries stay valid.
 *
 * Per input: a QP (on an SRQ or not) is attached to one end of a socketpair
 * with a synthetic MPA result (uiw_qp_attach_socket, as the data path tests
 * do) and taken off the progress thread; receives are posted (and outbound
 * WRs, so that Read Responses and Atomic Responses have something to
 * answer); the input is written to the other end, in chunks, while this
 * thread drives the QP (uiw_qp_rx_progress under its lock) and parses
 * everything the QP sends (it must be well-formed FPDUs). Then FIN, ERR,
 * flush, and the checks: nothing outside the places the peer may write
 * changed, every completion names a posted WR at most once (exactly once
 * for the send queue and the QP's own receive queue), successful receives
 * fit their buffers, async events name this QP and at most one error event
 * is raised. Any violation aborts.
 *
 * Input: two configuration bytes, then the peer's byte stream.
 *   byte 0  bit 0 CRC, bit 1 markers, bit 2 receives on an SRQ,
 *           bit 3 post a Read, a Fetch-and-Add, a Read and a Send first,
 *           bit 4 responder awaiting the RFC 6581 RTR (P2P),
 *           bit 5 initiator sending the RTR (bit 6: Read, else Write),
 *           bit 7 no FIN after the stream
 *   byte 1  0: written at once; else in pieces of byte1^2 bytes (at
 *           least 1/512 of the stream)
 * With UIWARP_FUZZ_SEED_DIR set, LLVMFuzzerInitialize writes valid seed
 * streams (Sends, Writes, Reads, atomics, responses to the outbound WRs,
 * Terminate) there (scripts/fuzz-seeds.sh).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "engine.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION(p, n)
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#endif
#endif
#ifndef POISON
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define REQUIRE(c)                                                                                 \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "fuzz_engine_rx: %s:%d: %s\n", __FILE__, __LINE__, #c);                \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------
 * Deterministic getrandom while the MRs are registered (mem.c keys the
 * STag permutation and each STag's key byte with it)
 * ---------------------------------------------------------------------- */

static bool fixed_random;
static uint64_t fixed_state = 0x9E3779B97F4A7C15ull;

ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    uint8_t *b = buf;

    if (!fixed_random)
        return syscall(SYS_getrandom, buf, len, flags);
    for (size_t i = 0; i < len; i++) {
        fixed_state = fixed_state * 6364136223846793005ull + 1442695040888963407ull;
        b[i] = (uint8_t)(fixed_state >> 56);
    }
    return (ssize_t)len;
}

/* ------------------------------------------------------------------------
 * The arena
 * ---------------------------------------------------------------------- */

#define ARENA_ADDR ((void *)0x500000000000ull)
#define ARENA_LEN  (64u * 1024)
#define GUARD      256u

enum { R_RW, R_WO, R_RO, R_PD2, R_DEREG, R_RECV, R_SINK, R_SRC, R_COUNT };

static const struct {
    uint32_t len;
    uint32_t misalign;
    int access; /* -1: deregistered */
    bool pd2;
    bool writable; /* the whole region may change */
} reg_def[R_COUNT] = {
    [R_RW] = {4096, 0,
              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                  IBV_ACCESS_REMOTE_ATOMIC,
              false, true},
    [R_WO] = {100, 3, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, false, true},
    [R_RO] = {512, 0, IBV_ACCESS_REMOTE_READ, false, false},
    [R_PD2] = {256, 0,
               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                   IBV_ACCESS_REMOTE_ATOMIC,
               true, false},
    [R_DEREG] = {256, 0, -1, false, false},
    [R_RECV] = {2048, 0, IBV_ACCESS_LOCAL_WRITE, false, false},
    [R_SINK] = {512, 0, IBV_ACCESS_LOCAL_WRITE, false, false},
    [R_SRC] = {256, 0, IBV_ACCESS_LOCAL_WRITE, false, false},
};

static uint8_t *arena;
static uint8_t expect[ARENA_LEN]; /* the arena as set up */
static uint32_t reg_off[R_COUNT];
static struct ibv_mr *reg_mr[R_COUNT];
static uint32_t reg_stag[R_COUNT];

/* Ranges of the arena the peer may legitimately write. */
struct range {
    uint32_t off, len;
};
static struct range writable[32];
static unsigned nwritable;

static void add_writable(uint32_t off, uint32_t len)
{
    REQUIRE(nwritable < sizeof(writable) / sizeof(writable[0]));
    writable[nwritable++] = (struct range){off, len};
}

static uint8_t *reg_ptr(int r, uint32_t off)
{
    return arena + reg_off[r] + off;
}

/* ------------------------------------------------------------------------
 * Verbs objects
 * ---------------------------------------------------------------------- */

static struct ibv_context *ctx;
static struct ibv_pd *pd, *pd2;
static struct ibv_cq *scq, *rcq;

/* Receive WRs: SGEs as (region offset, length) in R_RECV. */
#define NRECV 4
static const struct {
    int nsge;
    uint32_t off[3], len[3];
} recv_def[NRECV] = {
    {1, {0}, {64}},
    {2, {100, 200}, {32, 100}},
    {0, {0}, {0}},
    {3, {400, 1000, 1100}, {500, 16, 900}},
};

/* Outbound WRs (cfg bit 3): the Read sinks and the atomic result in
 * R_SINK. */
#define NSEND        4
#define READ1_LEN    128
#define READ2_LEN    40
#define FADD_SINK    256
#define READ2_SINK   300
#define SEND_LEN     32
#define REMOTE_STAG  0x12345678u
#define REMOTE_TO    0x1000u
#define WRID_RECV(i) (1000u + (i))
#define WRID_SEND(i) (2000u + (i))

static void poison_guards(void);
static void fixed_runs_init(void);

static struct ibv_context *open_lo(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *c = NULL;

    for (int i = 0; list && i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), "uiw_lo") == 0)
            c = ibv_open_device(list[i]);
    if (!c && list && n > 0)
        c = ibv_open_device(list[0]);
    if (list)
        ibv_free_device_list(list);
    return c;
}

static void setup(void)
{
    uint32_t off = GUARD;
    void *a;

    /* small payloads are placed in place too (both receive paths) */
    setenv("UIWARP_ZCOPY_MIN", "64", 0);
    a = mmap(ARENA_ADDR, ARENA_LEN, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (a == MAP_FAILED) /* still works, only the seeds' offsets miss */
        a = mmap(NULL, ARENA_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(a != MAP_FAILED);
    arena = a;

    ctx = open_lo();
    REQUIRE(ctx);
    REQUIRE(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
    pd = ibv_alloc_pd(ctx);
    pd2 = ibv_alloc_pd(ctx);
    scq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    rcq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    REQUIRE(pd && pd2 && scq && rcq);

    /* the arena: guard bytes 0xA5, each region its own fill */
    memset(arena, 0xA5, ARENA_LEN);
    fixed_random = true;
    for (int r = 0; r < R_COUNT; r++) {
        off = (off + 63) / 64 * 64 + reg_def[r].misalign;
        reg_off[r] = off;
        for (uint32_t i = 0; i < reg_def[r].len; i++)
            arena[off + i] = (uint8_t)(0x10 * (r + 1) + i * 7);
        reg_mr[r] = ibv_reg_mr(reg_def[r].pd2 ? pd2 : pd, arena + off, reg_def[r].len,
                               reg_def[r].access < 0 ? IBV_ACCESS_LOCAL_WRITE : reg_def[r].access);
        REQUIRE(reg_mr[r]);
        reg_stag[r] = reg_mr[r]->rkey;
        if (reg_def[r].access < 0) {
            REQUIRE(ibv_dereg_mr(reg_mr[r]) == 0);
            reg_mr[r] = NULL;
        }
        if (reg_def[r].writable)
            add_writable(off, reg_def[r].len);
        off += reg_def[r].len + GUARD;
        REQUIRE(off <= ARENA_LEN);
    }
    fixed_random = false;
    for (int i = 0; i < NRECV; i++)
        for (int s = 0; s < recv_def[i].nsge; s++)
            add_writable(reg_off[R_RECV] + recv_def[i].off[s], recv_def[i].len[s]);
    add_writable(reg_off[R_SINK], READ1_LEN / 2);
    add_writable(reg_off[R_SINK] + 128, READ1_LEN / 2);
    add_writable(reg_off[R_SINK] + FADD_SINK, 8);
    add_writable(reg_off[R_SINK] + READ2_SINK, READ2_LEN);
    memcpy(expect, arena, ARENA_LEN);
    fixed_runs_init();
    /* ASan catches a stray write into a guard or a deregistered region at
     * once; check_arena after each input catches the rest */
    poison_guards();
}

/* The complement of the writable ranges, as runs (computed once). */
static struct range fixed_runs[64];
static unsigned nfixed;

static void poison_guards(void)
{
    for (int r = 0; r <= R_COUNT; r++) {
        uint32_t from = r ? reg_off[r - 1] + reg_def[r - 1].len : 0;
        uint32_t to = r < R_COUNT ? reg_off[r] : ARENA_LEN;
        POISON(arena + from, to - from);
    }
    POISON(reg_ptr(R_DEREG, 0), reg_def[R_DEREG].len);
}

static void fixed_runs_init(void)
{
    static bool w[ARENA_LEN];

    for (unsigned k = 0; k < nwritable; k++)
        memset(w + writable[k].off, 1, writable[k].len);
    for (uint32_t i = 0; i < ARENA_LEN;) {
        uint32_t j = i;

        while (j < ARENA_LEN && w[j] == w[i])
            j++;
        if (!w[i]) {
            REQUIRE(nfixed < sizeof(fixed_runs) / sizeof(fixed_runs[0]));
            fixed_runs[nfixed++] = (struct range){i, j - i};
        }
        i = j;
    }
}

/* Every byte outside the writable ranges is as it was set up; then the
 * writable ranges are reset for the next input. */
static void check_arena(void)
{
    UNPOISON(arena, ARENA_LEN);
    for (unsigned k = 0; k < nfixed; k++) {
        const struct range *f = &fixed_runs[k];

        if (memcmp(arena + f->off, expect + f->off, f->len) == 0)
            continue;
        for (uint32_t i = f->off; i < f->off + f->len; i++)
            if (arena[i] != expect[i]) {
                fprintf(stderr, "fuzz_engine_rx: arena byte %u (region offsets:", i);
                for (int r = 0; r < R_COUNT; r++)
                    fprintf(stderr, " %u", reg_off[r]);
                fprintf(stderr, ") changed: 0x%02x, was 0x%02x\n", arena[i], expect[i]);
                abort();
            }
    }
    for (unsigned k = 0; k < nwritable; k++)
        memcpy(arena + writable[k].off, expect + writable[k].off, writable[k].len);
    poison_guards();
}

/* ------------------------------------------------------------------------
 * One run
 * ---------------------------------------------------------------------- */

struct run {
    uint8_t cfg;
    struct ibv_srq *srq;
    struct ibv_qp *qp;
    int peer;
    uiw_rx rx;    /* parses what the QP sends */
    bool rx_dead; /* ... until the stream ends */
    unsigned recv_done[NRECV], send_done[NSEND];
    unsigned nsend;
    unsigned err_events;
};

static void post_recvs(struct run *t)
{
    for (int i = 0; i < NRECV; i++) {
        struct ibv_sge sge[3];
        struct ibv_recv_wr wr, *bad;

        for (int s = 0; s < recv_def[i].nsge; s++) {
            sge[s].addr = (uintptr_t)reg_ptr(R_RECV, recv_def[i].off[s]);
            sge[s].length = recv_def[i].len[s];
            sge[s].lkey = reg_mr[R_RECV]->lkey;
        }
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = WRID_RECV(i);
        wr.sg_list = sge;
        wr.num_sge = recv_def[i].nsge;
        if (t->srq)
            REQUIRE(ibv_post_srq_recv(t->srq, &wr, &bad) == 0);
        else
            REQUIRE(ibv_post_recv(t->qp, &wr, &bad) == 0);
    }
}

static void post_sends(struct run *t)
{
    struct ibv_sge s_read[2] = {
        {(uintptr_t)reg_ptr(R_SINK, 0), READ1_LEN / 2, reg_mr[R_SINK]->lkey},
        {(uintptr_t)reg_ptr(R_SINK, 128), READ1_LEN / 2, reg_mr[R_SINK]->lkey},
    };
    struct ibv_sge s_fadd = {(uintptr_t)reg_ptr(R_SINK, FADD_SINK), 8, reg_mr[R_SINK]->lkey};
    struct ibv_sge s_read2 = {(uintptr_t)reg_ptr(R_SINK, READ2_SINK), READ2_LEN,
                              reg_mr[R_SINK]->lkey};
    struct ibv_sge s_send = {(uintptr_t)reg_ptr(R_SRC, 0), SEND_LEN, reg_mr[R_SRC]->lkey};
    struct ibv_send_wr wr[NSEND], *bad;

    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < NSEND; i++) {
        wr[i].wr_id = WRID_SEND(i);
        wr[i].next = i + 1 < NSEND ? &wr[i + 1] : NULL;
        wr[i].send_flags = IBV_SEND_SIGNALED;
    }
    wr[0].opcode = IBV_WR_RDMA_READ;
    wr[0].sg_list = s_read;
    wr[0].num_sge = 2;
    wr[0].wr.rdma.rkey = REMOTE_STAG;
    wr[0].wr.rdma.remote_addr = REMOTE_TO;
    wr[1].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr[1].sg_list = &s_fadd;
    wr[1].num_sge = 1;
    wr[1].wr.atomic.rkey = REMOTE_STAG;
    wr[1].wr.atomic.remote_addr = REMOTE_TO;
    wr[1].wr.atomic.compare_add = 5;
    wr[2].opcode = IBV_WR_RDMA_READ;
    wr[2].sg_list = &s_read2;
    wr[2].num_sge = 1;
    wr[2].wr.rdma.rkey = REMOTE_STAG;
    wr[2].wr.rdma.remote_addr = REMOTE_TO + 0x100;
    wr[3].opcode = IBV_WR_SEND;
    wr[3].sg_list = &s_send;
    wr[3].num_sge = 1;
    REQUIRE(ibv_post_send(t->qp, wr, &bad) == 0);
    t->nsend = NSEND;
}

static uiw_mpa_result mpa_of(uint8_t cfg)
{
    uiw_mpa_result m;

    memset(&m, 0, sizeof(m));
    m.crc = cfg & 1;
    m.markers_rx = m.markers_tx = cfg & 2;
    m.rev = 2;
    m.enhanced = true;
    m.ird = m.ord = m.peer_ird = m.peer_ord = 4;
    if (cfg & 0x10) {
        m.p2p = true;
        m.rtr = UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ;
        m.await_rtr = true;
    } else if (cfg & 0x20) {
        m.p2p = true;
        m.rtr = cfg & 0x40 ? UIW_RTR_READ : UIW_RTR_WRITE;
        m.send_rtr = true;
    }
    return m;
}

/* Read and parse whatever the QP sent. True if anything came. */
static bool drain_peer(struct run *t)
{
    uint8_t buf[16384];
    bool any = false;

    for (;;) {
        ssize_t n = recv(t->peer, buf, sizeof(buf), MSG_DONTWAIT);
        size_t off = 0;

        if (n <= 0)
            return any;
        any = true;
        while (!t->rx_dead && off < (size_t)n) {
            uiw_rx_event ev;
            size_t used = uiw_rx_feed(&t->rx, buf + off, (size_t)n - off, &ev);

            off += used;
            if (ev.kind == UIW_RX_ERROR) {
                fprintf(stderr, "fuzz_engine_rx: the QP sent a malformed stream: %s\n",
                        ev.why ? ev.why : "?");
                abort();
            }
            if (ev.kind == UIW_RX_END)
                REQUIRE(ev.crc_ok);
            if (ev.kind == UIW_RX_NONE && !used)
                break;
        }
    }
}

static void drive(struct uiw_qp *q)
{
    pthread_mutex_lock(&q->lock);
    uiw_qp_rx_progress(q); /* then transmits */
    pthread_mutex_unlock(&q->lock);
}

static void check_wc(struct run *t, const struct ibv_wc *wc)
{
    REQUIRE(wc->qp_num == t->qp->qp_num);
    REQUIRE(wc->status <= IBV_WC_GENERAL_ERR);
    if (wc->wr_id >= WRID_RECV(0) && wc->wr_id < WRID_RECV(NRECV)) {
        unsigned i = (unsigned)(wc->wr_id - WRID_RECV(0));
        uint32_t room = 0;

        REQUIRE(t->recv_done[i]++ == 0);
        for (int s = 0; s < recv_def[i].nsge; s++)
            room += recv_def[i].len[s];
        if (wc->status == IBV_WC_SUCCESS) {
            REQUIRE(wc->opcode == IBV_WC_RECV || wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM);
            REQUIRE(wc->byte_len <= room);
        }
    } else {
        unsigned i;

        REQUIRE(wc->wr_id >= WRID_SEND(0) && wc->wr_id < WRID_SEND(NSEND));
        i = (unsigned)(wc->wr_id - WRID_SEND(0));
        REQUIRE(i < t->nsend);
        REQUIRE(t->send_done[i]++ == 0);
    }
}

static void poll_all(struct run *t)
{
    struct ibv_wc wc[16];
    int n;

    while ((n = ibv_poll_cq(rcq, 16, wc)) > 0)
        for (int i = 0; i < n; i++)
            check_wc(t, &wc[i]);
    REQUIRE(n == 0);
    while ((n = ibv_poll_cq(scq, 16, wc)) > 0)
        for (int i = 0; i < n; i++)
            check_wc(t, &wc[i]);
    REQUIRE(n == 0);
}

static void async_all(struct run *t)
{
    struct ibv_async_event ev;

    while (ibv_get_async_event(ctx, &ev) == 0) {
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            REQUIRE(ev.element.qp == t->qp);
            REQUIRE(++t->err_events == 1);
            break;
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            REQUIRE(ev.element.qp == t->qp && t->srq);
            break;
        default:
            fprintf(stderr, "fuzz_engine_rx: unexpected async event %d\n", (int)ev.event_type);
            abort();
        }
        ibv_ack_async_event(&ev);
    }
}

static void run_one(const uint8_t *data, size_t size)
{
    struct run t;
    struct ibv_qp_init_attr ia;
    struct ibv_qp_attr attr;
    uiw_mpa_result m;
    uiw_rx_cfg rc;
    struct uiw_qp *q;
    int sv[2];
    size_t off = 0, chunk;
    unsigned idle = 0;
    bool fin = false;

    memset(&t, 0, sizeof(t));
    t.cfg = data[0];
    chunk = data[1] ? (size_t)data[1] * data[1] : size;
    if (chunk < size / 512)
        chunk = size / 512;
    data += 2;
    size -= 2;
    m = mpa_of(t.cfg);

    if (t.cfg & 4) {
        struct ibv_srq_init_attr sa;

        memset(&sa, 0, sizeof(sa));
        sa.attr.max_wr = 16;
        sa.attr.max_sge = 4;
        t.srq = ibv_create_srq(pd, &sa);
        REQUIRE(t.srq);
    }
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = scq;
    ia.recv_cq = rcq;
    ia.srq = t.srq;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 1;
    ia.cap.max_send_wr = 16;
    ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = 4;
    ia.cap.max_recv_sge = 4;
    t.qp = ibv_create_qp(pd, &ia);
    REQUIRE(t.qp);
    q = to_uqp(t.qp);
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    REQUIRE(ibv_modify_qp(t.qp, &attr, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    post_recvs(&t);

    REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    t.peer = sv[1];
    REQUIRE(fcntl(t.peer, F_SETFL, fcntl(t.peer, F_GETFL) | O_NONBLOCK) == 0);
    memset(&rc, 0, sizeof(rc));
    rc.crc = m.crc;
    rc.markers = m.markers_tx;
    uiw_rx_init(&t.rx, &rc);
    REQUIRE(uiw_qp_attach_socket(q, sv[0], &m) == 0);
    /* this thread alone drives the QP from here on (not under q->lock: the
     * progress callback takes it) */
    (void)uiw_progress_del(q->fd);
    if (t.cfg & 8)
        post_sends(&t);

    for (unsigned iter = 0; iter < 2000; iter++) {
        bool moved = false;

        if (off < size) {
            size_t n = size - off < chunk ? size - off : chunk;
            ssize_t w = send(t.peer, data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);

            if (w > 0) {
                off += (size_t)w;
                moved = true;
            } else if (w < 0 && errno != EAGAIN) {
                off = size; /* the QP closed its end */
            }
        } else if (!fin && !(t.cfg & 0x80)) {
            shutdown(t.peer, SHUT_WR);
            fin = true;
            moved = true;
        }
        drive(q);
        moved |= drain_peer(&t);
        if (moved || off < size)
            idle = 0;
        else if (++idle >= 2)
            break;
    }

    /* ERR: everything still queued is flushed */
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(t.qp, &attr, IBV_QP_STATE) == 0);
    drive(q);
    drain_peer(&t);
    poll_all(&t);
    for (unsigned i = 0; i < t.nsend; i++)
        REQUIRE(t.send_done[i] == 1);
    if (!t.srq)
        for (unsigned i = 0; i < NRECV; i++)
            REQUIRE(t.recv_done[i] == 1);
    async_all(&t);

    REQUIRE(ibv_destroy_qp(t.qp) == 0);
    if (t.srq)
        REQUIRE(ibv_destroy_srq(t.srq) == 0);
    close(t.peer);
    async_all(&t);
    check_arena();
    /* a Send with Invalidate may have invalidated an MR: valid again for
     * the next input (nothing uses them now) */
    for (int r = 0; r < R_COUNT; r++)
        if (reg_mr[r]) {
            REQUIRE(atomic_load(&to_umr(reg_mr[r])->users) == 0);
            atomic_store(&to_umr(reg_mr[r])->valid, true);
        }
}

/* ------------------------------------------------------------------------
 * Seeds
 * ---------------------------------------------------------------------- */

struct seed {
    uint8_t buf[65536];
    size_t len;
    uiw_tx tx;
    uint32_t msn[UIW_QN_COUNT];
};

static void seed_msg(struct seed *s, const uiw_hdr *h0, const void *pay, size_t len)
{
    uiw_hdr h = *h0;
    uiw_tx_msg m;
    static uiw_fpdu f;
    struct iovec v = {(void *)(uintptr_t)pay, len};
    int r;

    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    h.last = true;
    if (!h.tagged && !h.msn)
        h.msn = ++s->msn[h.qn];
    REQUIRE(uiw_tx_msg_init(&m, &h, &v, len ? 1 : 0, len) == 0);
    while ((r = uiw_tx_next(&s->tx, &m, &f)) == 1) {
        for (int i = 0; i < f.iovcnt; i++) {
            REQUIRE(s->len + f.iov[i].iov_len <= sizeof(s->buf));
            memcpy(s->buf + s->len, f.iov[i].iov_base, f.iov[i].iov_len);
            s->len += f.iov[i].iov_len;
        }
        if (f.last)
            break;
    }
    REQUIRE(r >= 0);
}

static void seed_tagged(struct seed *s, unsigned op, int reg, uint32_t off, uint32_t len)
{
    uiw_hdr h;
    uint8_t pay[4096];

    memset(&h, 0, sizeof(h));
    h.tagged = true;
    h.opcode = (uint8_t)op;
    h.stag = reg < 0 ? REMOTE_STAG : reg_stag[reg];
    h.to = (uintptr_t)reg_ptr(reg < 0 ? R_RW : reg, off);
    for (uint32_t i = 0; i < len && i < sizeof(pay); i++)
        pay[i] = (uint8_t)(i * 13 + 1);
    seed_msg(s, &h, pay, len);
}

static void seed_send(struct seed *s, unsigned op, uint32_t len, uint32_t inv)
{
    uiw_hdr h;
    uint8_t pay[2048];

    memset(&h, 0, sizeof(h));
    h.opcode = (uint8_t)op;
    h.qn = UIW_QN_SEND;
    h.inv_stag = inv;
    for (uint32_t i = 0; i < len && i < sizeof(pay); i++)
        pay[i] = (uint8_t)(i * 5 + 3);
    seed_msg(s, &h, pay, len);
}

static void seed_rreq(struct seed *s, int reg, uint32_t off, uint32_t len)
{
    uiw_hdr h;

    memset(&h, 0, sizeof(h));
    h.opcode = UIW_OP_READ_REQ;
    h.qn = UIW_QN_READ_REQ;
    h.u.rreq.sink_stag = REMOTE_STAG;
    h.u.rreq.sink_to = REMOTE_TO;
    h.u.rreq.read_size = len;
    h.u.rreq.src_stag = reg_stag[reg];
    h.u.rreq.src_to = (uintptr_t)reg_ptr(reg, off);
    seed_msg(s, &h, NULL, 0);
}

static void seed_areq(struct seed *s, unsigned aop, int reg, uint32_t off)
{
    uiw_hdr h;

    memset(&h, 0, sizeof(h));
    h.opcode = UIW_OP_ATOMIC_REQ;
    h.qn = UIW_QN_READ_REQ;
    h.u.atomic_req.aop = (uint8_t)aop;
    h.u.atomic_req.req_id = 7;
    h.u.atomic_req.stag = reg_stag[reg];
    h.u.atomic_req.to = (uintptr_t)reg_ptr(reg, off);
    h.u.atomic_req.add_swap = 3;
    h.u.atomic_req.add_swap_mask = ~0ull;
    h.u.atomic_req.compare = 0;
    h.u.atomic_req.compare_mask = ~0ull;
    seed_msg(s, &h, NULL, 0);
}

/* Responses to the outbound WRs of cfg bit 3. */
static void seed_responses(struct seed *s)
{
    uiw_hdr h;
    uint8_t pay[READ1_LEN];

    memset(pay, 0x5A, sizeof(pay));
    memset(&h, 0, sizeof(h));
    h.tagged = true;
    h.opcode = UIW_OP_READ_RESP;
    h.stag = reg_mr[R_SINK]->lkey;
    h.to = (uintptr_t)reg_ptr(R_SINK, 0);
    seed_msg(s, &h, pay, READ1_LEN);
    memset(&h, 0, sizeof(h));
    h.opcode = UIW_OP_ATOMIC_RESP;
    h.qn = UIW_QN_ATOMIC_RESP;
    h.u.atomic_resp.req_id = 1;
    h.u.atomic_resp.orig_value = 0x1122334455667788ull;
    seed_msg(s, &h, NULL, 0);
    memset(&h, 0, sizeof(h));
    h.tagged = true;
    h.opcode = UIW_OP_READ_RESP;
    h.stag = reg_mr[R_SINK]->lkey;
    h.to = (uintptr_t)reg_ptr(R_SINK, READ2_SINK);
    seed_msg(s, &h, pay, READ2_LEN);
}

static void seed_term(struct seed *s)
{
    uiw_hdr h;

    memset(&h, 0, sizeof(h));
    h.opcode = UIW_OP_TERMINATE;
    h.qn = UIW_QN_TERMINATE;
    h.u.term.cause = (uiw_term_cause){UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT, 0};
    seed_msg(s, &h, NULL, 0);
}

static void seed_write(const char *dir, const char *name, uint8_t cfg, uint8_t chunk,
                       void (*gen)(struct seed *))
{
    static struct seed s;
    uiw_tx_cfg tc;
    char path[4096];
    FILE *f;

    memset(&s, 0, sizeof(s));
    memset(&tc, 0, sizeof(tc));
    tc.crc = cfg & 1;
    tc.markers = cfg & 2;
    tc.max_fpdu = 512;
    uiw_tx_init(&s.tx, &tc);
    s.buf[0] = cfg;
    s.buf[1] = chunk;
    s.len = 2;
    gen(&s);
    snprintf(path, sizeof(path), "%s/seed-%s-%02x-%02x", dir, name, cfg, chunk);
    f = fopen(path, "wb");
    REQUIRE(f);
    REQUIRE(fwrite(s.buf, 1, s.len, f) == s.len);
    fclose(f);
}

static void gen_sends(struct seed *s)
{
    seed_send(s, UIW_OP_SEND, 40, 0);
    seed_send(s, UIW_OP_SEND_INV, 100, reg_stag[R_WO]);
    seed_send(s, UIW_OP_SEND, 0, 0);
    seed_send(s, UIW_OP_SEND_SE, 1400, 0);
    seed_tagged(s, UIW_OP_WRITE, R_WO, 0, 8); /* invalidated: Terminate */
}

static void gen_writes(struct seed *s)
{
    uiw_hdr h;
    uint8_t imm[UIW_IMM_DATA_LEN] = {1, 2, 3, 4};

    seed_tagged(s, UIW_OP_WRITE, R_RW, 100, 200);
    seed_tagged(s, UIW_OP_WRITE, R_RW, 0, 4096);
    seed_tagged(s, UIW_OP_WRITE, R_WO, 1, 99);
    memset(&h, 0, sizeof(h));
    h.opcode = UIW_OP_IMM_DATA;
    h.qn = UIW_QN_SEND;
    memcpy(h.u.imm, imm, sizeof(imm));
    seed_msg(s, &h, NULL, 0);
    seed_tagged(s, UIW_OP_WRITE, R_RW, 4000, 200); /* out of bounds */
}

static void gen_bad_writes(struct seed *s)
{
    seed_tagged(s, UIW_OP_WRITE, R_RO, 0, 16);
}

static void gen_pd2(struct seed *s)
{
    seed_tagged(s, UIW_OP_WRITE, R_PD2, 0, 16);
}

static void gen_dereg(struct seed *s)
{
    seed_tagged(s, UIW_OP_WRITE, R_DEREG, 0, 16);
}

static void gen_recv_mr(struct seed *s)
{
    seed_tagged(s, UIW_OP_WRITE, R_RECV, 0, 16);
}

static void gen_reads(struct seed *s)
{
    /* IRD 4: the QP answers only after reading all of this */
    seed_rreq(s, R_RW, 0, 1000);
    seed_rreq(s, R_RO, 10, 500);
    seed_areq(s, UIW_AOP_FETCH_ADD, R_RW, 8);
    seed_send(s, UIW_OP_SEND, 10, 0);
    seed_areq(s, UIW_AOP_CMP_SWAP, R_WO, 16); /* no atomic right: Terminate */
}

static void gen_responses(struct seed *s)
{
    seed_responses(s);
    seed_send(s, UIW_OP_SEND, 64, 0);
}

static void gen_rtr_write(struct seed *s)
{
    seed_tagged(s, UIW_OP_WRITE, -1, 0, 0); /* zero-length Write to STag 1 style */
    seed_send(s, UIW_OP_SEND, 20, 0);
}

static void gen_term(struct seed *s)
{
    seed_send(s, UIW_OP_SEND, 20, 0);
    seed_term(s);
}

static void write_seeds(const char *dir)
{
    static const struct {
        const char *name;
        void (*gen)(struct seed *);
        uint8_t cfg;
    } gens[] = {
        {"sends", gen_sends, 0},
        {"writes", gen_writes, 0},
        {"bad-writes", gen_bad_writes, 0},
        {"pd2", gen_pd2, 0},
        {"dereg", gen_dereg, 0},
        {"recv-mr", gen_recv_mr, 0},
        {"reads", gen_reads, 0},
        {"responses", gen_responses, 8},
        {"rtr-write", gen_rtr_write, 0x10},
        {"term", gen_term, 8},
        {"srq", gen_sends, 4},
    };
    static const uint8_t variants[][2] = {{0, 0}, {1, 0}, {3, 0}, {1, 3}, {0x80, 9}};

    for (size_t g = 0; g < sizeof(gens) / sizeof(gens[0]); g++)
        for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++)
            seed_write(dir, gens[g].name, (uint8_t)(gens[g].cfg | variants[v][0]), variants[v][1],
                       gens[g].gen);
}

/* ------------------------------------------------------------------------
 * libFuzzer
 * ---------------------------------------------------------------------- */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("UIWARP_FUZZ_SEED_DIR");

    (void)argc, (void)argv;
    setup();
    if (dir && *dir)
        write_seeds(dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    run_one(data, size);
    return 0;
}
