/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The engine's data path through the verbs API: two QPs of uiw_lo in one
 * process, connected over a socketpair by uiw_qp_attach_socket with a
 * synthetic MPA result (no CM), CRC off and on, markers, small FPDUs:
 *   - every operation (Send, Send SE, Send with Invalidate, Write, Write
 *     with Imm, Send with Imm, Read, FetchAdd, CmpSwap, Local Invalidate)
 *     x sizes 0, 1, 3, 4095, 4096, 65537, 16 MiB (atomics: 8) x 1..6
 *     SGEs, data compared byte for byte, guard bytes around every
 *     destination, every completion field checked;
 *   - one-sided operations complete while the target makes no call (the
 *     target's CQs are never polled: its progress thread serves them);
 *   - several outstanding Reads, limited by the ORD;
 *   - inline, unsignaled / sq_sig_all, fence, solicited notification, SRQ,
 *     local errors (LOC_PROT_ERR, LOC_LEN_ERR) and their flush.
 * UIWARP_DP_QUICK=1 leaves out the 16 MiB cases (slow sanitizer builds).
 */
#include <endian.h>
#include <stdlib.h>

#include "dp_test.h"

#define GUARD 64
#define BIG   (16u << 20)
#define SLACK 13

enum op {
    OP_SEND,
    OP_SEND_SE,
    OP_SEND_INV,
    OP_WRITE,
    OP_WRITE_IMM,
    OP_SEND_IMM,
    OP_READ,
    OP_FADD,
    OP_CSWAP,
    OP_LINV,
    OP_N
};
static const char *const op_name[OP_N] = {"Send",      "Send SE",  "Send Inv", "Write",
                                          "Write Imm", "Send Imm", "Read",     "FetchAdd",
                                          "CmpSwap",   "Local Inv"};

static const uint32_t sizes[] = {0, 1, 3, 4095, 4096, 65537, BIG};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/* results: [op][size index] = cases passed / run */
static unsigned res_ok[OP_N][NSIZES + 1], res_run[OP_N][NSIZES + 1];

struct bufs {
    uint8_t *a_src, *a_dst, *b_src, *b_dst; /* each GUARD + BIG + SLACK + GUARD */
    struct ibv_mr *a_src_mr, *a_dst_mr, *b_src_mr, *b_dst_mr;
};
#define BUFSZ (GUARD + BIG + SLACK + GUARD + 64)

static struct dp_ep A, B;
static struct bufs bf;
static uint64_t wrid = 1000;

static void split(uint32_t size, int n, uint32_t *lens)
{
    uint32_t left = size;
    for (int i = 0; i < n - 1; i++) {
        uint32_t l = left ? (uint32_t)(dp_rnd() % (left / 2 + 1)) : 0;
        lens[i] = l;
        left -= l;
    }
    lens[n - 1] = left;
}

static void sges(struct ibv_sge *s, int n, uint8_t *base, struct ibv_mr *mr, uint32_t size)
{
    uint32_t lens[6], off = 0;
    split(size, n, lens);
    for (int i = 0; i < n; i++) {
        s[i].addr = (uintptr_t)(base + off);
        s[i].length = lens[i];
        s[i].lkey = mr->lkey;
        off += lens[i];
    }
}

static int post_send1(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(qp, wr, &bad);
}

static int post_recv1(struct ibv_qp *qp, uint64_t id, struct ibv_sge *s, int n)
{
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.sg_list = s;
    wr.num_sge = n;
    return ibv_post_recv(qp, &wr, &bad);
}

/* Wait until B has processed everything A sent so far: a zero-length Read
 * is answered only after B handled what came before it (RFC 5040 §5.5
 * rule 12). */
static bool barrier(void)
{
    struct ibv_send_wr wr;
    struct ibv_wc wc;
    uint64_t id = ++wrid;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.rkey = bf.b_src_mr->rkey;
    wr.wr.rdma.remote_addr = (uintptr_t)bf.b_src;
    if (post_send1(A.qp, &wr))
        return false;
    if (dp_poll(A.scq, &wc, DP_TIMEOUT_MS) != 1)
        return false;
    dp_sync(B.qp);
    return wc.wr_id == id && wc.status == IBV_WC_SUCCESS;
}

static bool wc_ok(const struct ibv_wc *wc, uint64_t id, enum ibv_wc_opcode op, uint32_t len,
                  unsigned flags)
{
    bool ok = wc->wr_id == id && wc->status == IBV_WC_SUCCESS && wc->opcode == op &&
              wc->byte_len == len && wc->wc_flags == flags;
    if (!ok)
        fprintf(stderr, "  wc: wr_id %llu/%llu status %s opcode %d/%d len %u/%u flags 0x%x/0x%x\n",
                (unsigned long long)wc->wr_id, (unsigned long long)id,
                ibv_wc_status_str(wc->status), wc->opcode, op, wc->byte_len, len, wc->wc_flags,
                flags);
    return ok;
}

/* One operation of `size` bytes with `n` SGEs; true if everything matched. */
static bool run_case(enum op op, uint32_t size, int n)
{
    struct ibv_send_wr wr;
    struct ibv_sge s[6], r[6];
    struct ibv_wc wc;
    uint64_t id = ++wrid, rid = ++wrid;
    uint8_t *src, *dst;
    bool ok = true;
    unsigned long before = tu_failed;
    uint32_t imm = (uint32_t)dp_rnd();
    struct ibv_mr *extra = NULL;
    uint8_t *extra_buf = NULL;

    memset(&wr, 0, sizeof(wr));
    wr.wr_id = id;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = s;
    wr.num_sge = n;
    /* the previous case's last accesses to these buffers were made by the
     * progress thread under the QPs' locks (ordered only through the socket,
     * which sanitizers cannot see) */
    dp_sync(A.qp);
    dp_sync(B.qp);

    switch (op) {
    case OP_SEND:
    case OP_SEND_SE:
    case OP_SEND_INV:
    case OP_SEND_IMM: {
        uint32_t cap = size + SLACK;
        src = bf.a_src + GUARD;
        dst = bf.b_dst + GUARD;
        dp_fill(src, size);
        memset(bf.b_dst, 0xA5, GUARD + cap + GUARD);
        sges(s, n, src, bf.a_src_mr, size);
        sges(r, n, dst, bf.b_dst_mr, cap);
        /* one receive per message, Send with Immediate included */
        CHECK_EQ(post_recv1(B.qp, rid, r, n), 0);
        wr.opcode = op == OP_SEND_INV   ? IBV_WR_SEND_WITH_INV
                    : op == OP_SEND_IMM ? IBV_WR_SEND_WITH_IMM
                                        : IBV_WR_SEND;
        if (op == OP_SEND_SE)
            wr.send_flags |= IBV_SEND_SOLICITED;
        if (op == OP_SEND_IMM)
            wr.imm_data = imm;
        if (op == OP_SEND_INV) {
            extra_buf = malloc(4096);
            extra =
                ibv_reg_mr(B.pd, extra_buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            CHECK(extra != NULL);
            wr.invalidate_rkey = extra ? extra->rkey : 0;
        }
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, id, IBV_WC_SEND, size, 0));
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        if (op == OP_SEND_INV) {
            CHECK(wc_ok(&wc, rid, IBV_WC_RECV, size, IBV_WC_WITH_INV));
            CHECK_EQ(wc.invalidated_rkey, extra ? extra->rkey : 0);
            CHECK(extra && !atomic_load(&to_umr(extra)->valid));
        } else if (op == OP_SEND_IMM) {
            /* one completion: the data's length and the immediate */
            CHECK(wc_ok(&wc, rid, IBV_WC_RECV, size, IBV_WC_WITH_IMM));
            CHECK_EQ(wc.imm_data, imm);
        } else {
            CHECK(wc_ok(&wc, rid, IBV_WC_RECV, size, 0));
        }
        CHECK(dp_quiet(B.rcq, 0)); /* and nothing more */
        dp_sync(B.qp);
        CHECK_MEM(dst, src, size);
        CHECK(dp_all(bf.b_dst, GUARD, 0xA5));
        CHECK(dp_all(dst + size, SLACK + GUARD, 0xA5));
        break;
    }
    case OP_WRITE:
    case OP_WRITE_IMM:
        src = bf.a_src + GUARD;
        dst = bf.b_dst + GUARD;
        dp_fill(src, size);
        memset(bf.b_dst, 0xA5, GUARD + size + GUARD);
        dp_sync(B.qp);
        sges(s, n, src, bf.a_src_mr, size);
        wr.opcode = op == OP_WRITE ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.wr.rdma.remote_addr = (uintptr_t)dst;
        wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
        if (op == OP_WRITE_IMM) {
            wr.imm_data = imm;
            CHECK_EQ(post_recv1(B.qp, rid, NULL, 0), 0);
        }
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, id, IBV_WC_RDMA_WRITE, size, 0));
        if (op == OP_WRITE_IMM) {
            CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
            CHECK(wc_ok(&wc, rid, IBV_WC_RECV_RDMA_WITH_IMM, 0, IBV_WC_WITH_IMM));
            CHECK_EQ(wc.imm_data, imm);
        } else {
            CHECK(barrier()); /* B makes no call: its progress thread placed it */
        }
        dp_sync(B.qp);
        CHECK_MEM(dst, src, size);
        CHECK(dp_all(bf.b_dst, GUARD, 0xA5));
        CHECK(dp_all(dst + size, GUARD, 0xA5));
        break;
    case OP_READ:
        src = bf.b_src + GUARD;
        dst = bf.a_dst + GUARD;
        dp_fill(src, size);
        dp_sync(B.qp);
        memset(bf.a_dst, 0xA5, GUARD + size + GUARD);
        sges(s, n, dst, bf.a_dst_mr, size);
        wr.opcode = IBV_WR_RDMA_READ;
        wr.wr.rdma.remote_addr = (uintptr_t)src;
        wr.wr.rdma.rkey = bf.b_src_mr->rkey;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, id, IBV_WC_RDMA_READ, size, 0));
        CHECK_MEM(dst, src, size);
        CHECK(dp_all(bf.a_dst, GUARD, 0xA5));
        CHECK(dp_all(dst + size, GUARD, 0xA5));
        break;
    case OP_FADD:
    case OP_CSWAP: {
        uint64_t v0 = dp_rnd(), arg = dp_rnd(), sw = dp_rnd(), got, now;
        bool match = (n & 1) != 0;
        dst = bf.b_dst + GUARD; /* 64-byte aligned */
        memset(bf.b_dst, 0xA5, GUARD + 8 + GUARD);
        memcpy(dst, &v0, 8);
        dp_sync(B.qp);
        memset(bf.a_dst, 0xA5, GUARD + 8 + GUARD);
        sges(s, n, bf.a_dst + GUARD, bf.a_dst_mr, 8);
        wr.opcode = op == OP_FADD ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
        wr.wr.atomic.remote_addr = (uintptr_t)dst;
        wr.wr.atomic.rkey = bf.b_dst_mr->rkey;
        wr.wr.atomic.compare_add = op == OP_FADD ? arg : (match ? v0 : v0 ^ 1);
        wr.wr.atomic.swap = sw;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, id, op == OP_FADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP, 8, 0));
        memcpy(&got, bf.a_dst + GUARD, 8);
        CHECK_EQ(got, v0);
        dp_sync(B.qp);
        memcpy(&now, dst, 8);
        CHECK_EQ(now, op == OP_FADD ? v0 + arg : (match ? sw : v0));
        CHECK(dp_all(bf.b_dst, GUARD, 0xA5));
        CHECK(dp_all(dst + 8, GUARD, 0xA5));
        CHECK(dp_all(bf.a_dst, GUARD, 0xA5));
        CHECK(dp_all(bf.a_dst + GUARD + 8, GUARD, 0xA5));
        break;
    }
    case OP_LINV:
        extra_buf = malloc(4096);
        extra = ibv_reg_mr(A.pd, extra_buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        CHECK(extra != NULL);
        wr.opcode = IBV_WR_LOCAL_INV;
        wr.invalidate_rkey = extra ? extra->rkey : 0;
        wr.num_sge = 0;
        wr.sg_list = NULL;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, id, IBV_WC_LOCAL_INV, 0, 0));
        CHECK(extra && !atomic_load(&to_umr(extra)->valid));
        break;
    default:
        break;
    }
    if (extra)
        CHECK_EQ(ibv_dereg_mr(extra), 0);
    free(extra_buf);
    ok = tu_failed == before;
    if (!ok)
        fprintf(stderr, "  FAILED: %s size %u sges %d\n", op_name[op], size, n);
    return ok;
}

static void setup_bufs(void)
{
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
              IBV_ACCESS_REMOTE_ATOMIC;
    bf.a_src = dp_alloc(64, BUFSZ);
    bf.a_dst = dp_alloc(64, BUFSZ);
    bf.b_src = dp_alloc(64, BUFSZ);
    bf.b_dst = dp_alloc(64, BUFSZ);
    memset(bf.a_src, 0, BUFSZ);
    memset(bf.a_dst, 0, BUFSZ);
    memset(bf.b_src, 0, BUFSZ);
    memset(bf.b_dst, 0, BUFSZ);
    bf.a_src_mr = ibv_reg_mr(A.pd, bf.a_src, BUFSZ, acc);
    bf.a_dst_mr = ibv_reg_mr(A.pd, bf.a_dst, BUFSZ, acc);
    bf.b_src_mr = ibv_reg_mr(B.pd, bf.b_src, BUFSZ, acc);
    bf.b_dst_mr = ibv_reg_mr(B.pd, bf.b_dst, BUFSZ, acc);
    CHECK(bf.a_src_mr && bf.a_dst_mr && bf.b_src_mr && bf.b_dst_mr);
}

static void teardown_bufs(void)
{
    CHECK_EQ(ibv_dereg_mr(bf.a_src_mr), 0);
    CHECK_EQ(ibv_dereg_mr(bf.a_dst_mr), 0);
    CHECK_EQ(ibv_dereg_mr(bf.b_src_mr), 0);
    CHECK_EQ(ibv_dereg_mr(bf.b_dst_mr), 0);
    free(bf.a_src);
    free(bf.a_dst);
    free(bf.b_src);
    free(bf.b_dst);
}

static void pair_up(const struct dp_ep_opts *oa, const struct dp_ep_opts *ob, bool crc,
                    bool markers, uint16_t ird, uint16_t ord)
{
    CHECK_EQ(dp_ep_create(&A, oa), 0);
    CHECK_EQ(dp_ep_create(&B, ob), 0);
    CHECK_EQ(dp_connect(&A, &B, crc, markers, ird, ord, ird, ord), 0);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    setup_bufs();
}

static void pair_down(void)
{
    teardown_bufs();
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
}

/* The matrix under one wire configuration. */
static void matrix(bool crc, bool markers, unsigned max_fpdu, bool big)
{
    uint64_t t0 = dp_now_ms();
    unsigned cases = 0, bad = 0;

    pair_up(NULL, NULL, crc, markers, 16, 16);
    if (max_fpdu) {
        pthread_mutex_lock(&to_uqp(A.qp)->lock);
        to_uqp(A.qp)->tx.cfg.max_fpdu = (uint16_t)max_fpdu;
        pthread_mutex_unlock(&to_uqp(A.qp)->lock);
        pthread_mutex_lock(&to_uqp(B.qp)->lock);
        to_uqp(B.qp)->tx.cfg.max_fpdu = (uint16_t)max_fpdu;
        pthread_mutex_unlock(&to_uqp(B.qp)->lock);
    }
    for (int op = 0; op < OP_N; op++) {
        for (unsigned si = 0; si < NSIZES; si++) {
            uint32_t size = sizes[si];
            unsigned col = si;
            if (op == OP_FADD || op == OP_CSWAP) {
                if (si)
                    continue;
                size = 8;
                col = NSIZES;
            }
            if (op == OP_LINV && si)
                continue;
            if (size == BIG && !big)
                continue;
            for (int n = 1; n <= 6; n++) {
                bool ok = run_case((enum op)op, size, n);
                res_run[op][col]++;
                res_ok[op][col] += ok;
                cases++;
                bad += !ok;
                if (!ok && dp_state(A.qp) != IBV_QPS_RTS) {
                    fprintf(stderr, "  QP left RTS, stopping this configuration\n");
                    goto out;
                }
            }
        }
    }
out:
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    printf("matrix crc=%d markers=%d max_fpdu=%u: %u cases, %u failed, %llu ms\n", crc, markers,
           max_fpdu, cases, bad, (unsigned long long)(dp_now_ms() - t0));
    pair_down();
}

static void print_table(void)
{
    printf("%-10s", "op\\size");
    for (unsigned si = 0; si < NSIZES; si++)
        printf(" %9u", sizes[si]);
    printf(" %9s\n", "8 (atom)");
    for (int op = 0; op < OP_N; op++) {
        printf("%-10s", op_name[op]);
        for (unsigned c = 0; c <= NSIZES; c++) {
            if (!res_run[op][c])
                printf(" %9s", "-");
            else
                printf(" %4u/%-4u", res_ok[op][c], res_run[op][c]);
        }
        printf("\n");
    }
}

/* ------------------------------------------------------------------------
 * Feature tests
 * ---------------------------------------------------------------------- */

/* Up to ORD Reads outstanding; more wait in the SQ (RFC 5040 §6.1). B's
 * IRD equals A's ORD, so one Read too many would make B terminate. */
static void test_outstanding_reads(void)
{
    enum { NR = 48, RSZ = 65536, ORD = 4 };
    struct ibv_send_wr wr[NR];
    struct ibv_sge s[NR];
    struct ibv_send_wr *bad;
    unsigned maxorq = 0, got = 0;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    CHECK_EQ(dp_connect(&A, &B, true, false, ORD, ORD, ORD, ORD), 0);
    setup_bufs();
    dp_fill(bf.b_src, (size_t)NR * RSZ);
    memset(bf.a_dst, 0, (size_t)NR * RSZ);
    memset(wr, 0, sizeof(wr));
    for (int i = 0; i < NR; i++) {
        s[i].addr = (uintptr_t)(bf.a_dst + (size_t)i * RSZ);
        s[i].length = RSZ;
        s[i].lkey = bf.a_dst_mr->lkey;
        wr[i].wr_id = 500 + (uint64_t)i;
        wr[i].opcode = IBV_WR_RDMA_READ;
        wr[i].send_flags = IBV_SEND_SIGNALED;
        wr[i].sg_list = &s[i];
        wr[i].num_sge = 1;
        wr[i].wr.rdma.remote_addr = (uintptr_t)(bf.b_src + (size_t)(NR - 1 - i) * RSZ);
        wr[i].wr.rdma.rkey = bf.b_src_mr->rkey;
        wr[i].next = i + 1 < NR ? &wr[i + 1] : NULL;
    }
    /* B cannot answer while we hold its lock: A sends exactly ORD Reads */
    pthread_mutex_lock(&to_uqp(B.qp)->lock);
    CHECK_EQ(ibv_post_send(A.qp, wr, &bad), 0);
    pthread_mutex_lock(&to_uqp(A.qp)->lock);
    maxorq = to_uqp(A.qp)->orq_count;
    CHECK_EQ(to_uqp(A.qp)->orq_count, ORD);
    CHECK_EQ(to_uqp(A.qp)->tx_msn[UIW_QN_READ_REQ], ORD);
    pthread_mutex_unlock(&to_uqp(A.qp)->lock);
    pthread_mutex_unlock(&to_uqp(B.qp)->lock);
    {
        uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
        while (got < NR && dp_now_ms() < end) {
            struct ibv_wc wc;
            unsigned o;
            pthread_mutex_lock(&to_uqp(A.qp)->lock);
            o = to_uqp(A.qp)->orq_count;
            pthread_mutex_unlock(&to_uqp(A.qp)->lock);
            if (o > maxorq)
                maxorq = o;
            if (ibv_poll_cq(A.scq, 1, &wc) == 1) {
                CHECK_EQ(wc.status, IBV_WC_SUCCESS);
                CHECK_EQ(wc.wr_id, 500 + got); /* completed in order */
                CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
                CHECK_EQ(wc.byte_len, RSZ);
                got++;
            }
        }
    }
    CHECK_EQ(got, NR);
    CHECK(maxorq <= ORD);
    for (int i = 0; i < NR; i++)
        CHECK_MEM(bf.a_dst + (size_t)i * RSZ, bf.b_src + (size_t)(NR - 1 - i) * RSZ, RSZ);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    printf("outstanding reads: %d x %d bytes, max ORQ seen %u (ORD %d)\n", NR, RSZ, maxorq, ORD);
    pair_down();
}

/* A full window of small Reads arriving together: the responder copies
 * each small Response whole and lets its source MR go at once, while the
 * larger ones among them keep theirs until sent. Sizes cycle through 1..300
 * bytes (either side of the whole-copy limit, 256) and 4 KiB, so held and
 * released sources interleave in one batch; every byte is checked, the
 * completions come in order, and a second window follows on the same QPs. */
static void test_small_reads_window(void)
{
    enum { NR = 128, SLOT = 4096 };
    static const uint32_t sizes[] = {1, 7, 64, 255, 256, 257, 300, 4096, 2, 128};
    struct ibv_send_wr wr[NR];
    struct ibv_sge s[NR];
    struct ibv_send_wr *bad;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    CHECK_EQ(dp_connect(&A, &B, true, false, NR, NR, NR, NR), 0);
    setup_bufs();
    dp_fill(bf.b_src, (size_t)NR * SLOT);
    for (int round = 0; round < 2; round++) {
        unsigned got = 0;

        memset(bf.a_dst, 0, (size_t)NR * SLOT);
        memset(wr, 0, sizeof(wr));
        for (int i = 0; i < NR; i++) {
            uint32_t len = sizes[(i + round) % (sizeof(sizes) / sizeof(sizes[0]))];

            s[i].addr = (uintptr_t)(bf.a_dst + (size_t)i * SLOT);
            s[i].length = len;
            s[i].lkey = bf.a_dst_mr->lkey;
            wr[i].wr_id = 9000 + (uint64_t)i;
            wr[i].opcode = IBV_WR_RDMA_READ;
            wr[i].send_flags = IBV_SEND_SIGNALED;
            wr[i].sg_list = &s[i];
            wr[i].num_sge = 1;
            /* from the far end of B's buffer, at odd offsets */
            wr[i].wr.rdma.remote_addr =
                (uintptr_t)(bf.b_src + (size_t)(NR - 1 - i) * SLOT + (unsigned)i % 3);
            wr[i].wr.rdma.rkey = bf.b_src_mr->rkey;
            wr[i].next = i + 1 < NR ? &wr[i + 1] : NULL;
        }
        /* B's lock held: the whole window is in its socket before it reads */
        pthread_mutex_lock(&to_uqp(B.qp)->lock);
        CHECK_EQ(ibv_post_send(A.qp, wr, &bad), 0);
        usleep(20000);
        pthread_mutex_unlock(&to_uqp(B.qp)->lock);
        uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
        while (got < NR && dp_now_ms() < end) {
            struct ibv_wc wc;

            if (ibv_poll_cq(A.scq, 1, &wc) == 1) {
                CHECK_EQ(wc.status, IBV_WC_SUCCESS);
                CHECK_EQ(wc.wr_id, 9000 + got);
                CHECK_EQ(wc.opcode, IBV_WC_RDMA_READ);
                CHECK_EQ(wc.byte_len, s[got].length);
                got++;
            }
        }
        CHECK_EQ(got, NR);
        for (int i = 0; i < NR; i++) {
            uint8_t *d = bf.a_dst + (size_t)i * SLOT;

            CHECK_MEM(d, bf.b_src + (size_t)(NR - 1 - i) * SLOT + (unsigned)i % 3, s[i].length);
            if (s[i].length < SLOT) /* nothing past the requested length */
                CHECK_EQ(d[s[i].length], 0);
        }
    }
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    printf("small reads: 2 windows of %d (1 B - 4 KiB) verified\n", NR);
    pair_down();
}

/* Inline data is copied at post time; the lkey is not used. */
static void test_inline(void)
{
    uint8_t msg[200], want[200];
    struct ibv_sge s = {(uintptr_t)msg, sizeof(msg), 0x12345};
    struct ibv_sge r = {0, 256, 0};
    struct ibv_send_wr wr;
    struct ibv_wc wc;

    pair_up(NULL, NULL, true, false, 16, 16);
    r.addr = (uintptr_t)(bf.b_dst + GUARD);
    r.lkey = bf.b_dst_mr->lkey;
    dp_fill(msg, sizeof(msg));
    memcpy(want, msg, sizeof(msg));
    CHECK_EQ(post_recv1(B.qp, 77, &r, 1), 0);
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 78;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    memset(msg, 0, sizeof(msg)); /* the WR does not depend on it any more */
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK(wc_ok(&wc, 78, IBV_WC_SEND, sizeof(msg), 0));
    CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK(wc_ok(&wc, 77, IBV_WC_RECV, sizeof(msg), 0));
    dp_sync(B.qp);
    CHECK_MEM(bf.b_dst + GUARD, want, sizeof(want));

    /* inline Write, 3 SGEs from the stack */
    {
        uint8_t p1[10], p2[0 + 1], p3[50];
        struct ibv_sge ss[3] = {
            {(uintptr_t)p1, 10, 0}, {(uintptr_t)p2, 1, 0}, {(uintptr_t)p3, 50, 0}};
        dp_fill(p1, 10);
        dp_fill(p2, 1);
        dp_fill(p3, 50);
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 79;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
        wr.sg_list = ss;
        wr.num_sge = 3;
        wr.wr.rdma.remote_addr = (uintptr_t)(bf.b_dst + GUARD + 1000);
        wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, 79, IBV_WC_RDMA_WRITE, 61, 0));
        CHECK(barrier());
        CHECK_MEM(bf.b_dst + GUARD + 1000, p1, 10);
        CHECK_MEM(bf.b_dst + GUARD + 1010, p2, 1);
        CHECK_MEM(bf.b_dst + GUARD + 1011, p3, 50);
    }
    /* too long for inline: refused at post time */
    {
        static uint8_t big[300];
        struct ibv_sge sb = {(uintptr_t)big, sizeof(big), 0};
        struct ibv_send_wr *bad = NULL;
        memset(&wr, 0, sizeof(wr));
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_INLINE;
        wr.sg_list = &sb;
        wr.num_sge = 1;
        CHECK_EQ(ibv_post_send(A.qp, &wr, &bad), EINVAL);
        CHECK(bad == &wr);
    }
    pair_down();
}

/* Unsignaled WRs produce no completion; sq_sig_all makes every WR signal. */
static void test_signaling(void)
{
    struct ibv_send_wr wr[11], *bad;
    struct ibv_sge s = {0, 100, 0};
    struct ibv_wc wc;
    struct dp_ep_opts all = {.sig_all = true};

    for (int pass = 0; pass < 2; pass++) {
        pair_up(pass ? &all : NULL, NULL, false, false, 16, 16);
        s.addr = (uintptr_t)bf.a_src;
        s.lkey = bf.a_src_mr->lkey;
        memset(wr, 0, sizeof(wr));
        for (int i = 0; i < 11; i++) {
            wr[i].wr_id = 900 + (uint64_t)i;
            wr[i].opcode = IBV_WR_RDMA_WRITE;
            wr[i].sg_list = &s;
            wr[i].num_sge = 1;
            wr[i].wr.rdma.remote_addr = (uintptr_t)bf.b_dst + 128u * (unsigned)i;
            wr[i].wr.rdma.rkey = bf.b_dst_mr->rkey;
            wr[i].next = i < 10 ? &wr[i + 1] : NULL;
        }
        wr[10].send_flags = IBV_SEND_SIGNALED;
        CHECK_EQ(ibv_post_send(A.qp, wr, &bad), 0);
        if (!pass) {
            CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
            CHECK(wc_ok(&wc, 910, IBV_WC_RDMA_WRITE, 100, 0));
        } else {
            for (int i = 0; i < 11; i++) {
                CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
                CHECK(wc_ok(&wc, 900 + (uint64_t)i, IBV_WC_RDMA_WRITE, 100, 0));
            }
        }
        CHECK(dp_quiet(A.scq, 50));
        /* the SQ ring recycled the unsignaled entries */
        pthread_mutex_lock(&to_uqp(A.qp)->lock);
        CHECK_EQ(to_uqp(A.qp)->sq_count, 0);
        pthread_mutex_unlock(&to_uqp(A.qp)->lock);
        pair_down();
    }
}

/* A fenced Write waits for the preceding Read: the Read returns the old
 * data even though the Write targets the same remote bytes. */
static void test_fence(void)
{
    enum { SZ = 4u << 20 };
    struct ibv_send_wr rd, wrt, *bad;
    struct ibv_sge s_rd, s_wr;
    struct ibv_wc wc;

    for (int fenced = 0; fenced < 2; fenced++) {
        pair_up(NULL, NULL, false, false, 16, 16);
        dp_fill(bf.b_dst, SZ); /* old data, a copy in b_src */
        memcpy(bf.b_src, bf.b_dst, SZ);
        memset(bf.a_src, 0x5A, SZ); /* new data */
        dp_sync(B.qp);
        s_rd = (struct ibv_sge){(uintptr_t)bf.a_dst, SZ, bf.a_dst_mr->lkey};
        s_wr = (struct ibv_sge){(uintptr_t)bf.a_src, SZ, bf.a_src_mr->lkey};
        memset(&rd, 0, sizeof(rd));
        memset(&wrt, 0, sizeof(wrt));
        rd.wr_id = 1;
        rd.opcode = IBV_WR_RDMA_READ;
        rd.send_flags = IBV_SEND_SIGNALED;
        rd.sg_list = &s_rd;
        rd.num_sge = 1;
        rd.wr.rdma.remote_addr = (uintptr_t)bf.b_dst;
        rd.wr.rdma.rkey = bf.b_dst_mr->rkey;
        rd.next = &wrt;
        wrt.wr_id = 2;
        wrt.opcode = IBV_WR_RDMA_WRITE;
        wrt.send_flags = IBV_SEND_SIGNALED | (fenced ? IBV_SEND_FENCE : 0);
        wrt.sg_list = &s_wr;
        wrt.num_sge = 1;
        wrt.wr.rdma.remote_addr = (uintptr_t)bf.b_dst;
        wrt.wr.rdma.rkey = bf.b_dst_mr->rkey;
        CHECK_EQ(ibv_post_send(A.qp, &rd, &bad), 0);
        if (fenced) {
            /* the Write has not started while the Read is outstanding */
            struct uiw_qp *q = to_uqp(A.qp);
            pthread_mutex_lock(&q->lock);
            if (q->sq_count == 2 && q->sq[q->sq_head].wr_id == 1 && q->orq_count == 1)
                CHECK_EQ(q->sq[(q->sq_head + 1) % q->sq_cap].state, 0);
            pthread_mutex_unlock(&q->lock);
        }
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 2);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK(barrier());
        if (fenced) {
            CHECK_MEM(bf.a_dst, bf.b_src, SZ); /* the old data came back */
        } else {
            printf("fence: the unfenced Read saw %s data\n",
                   memcmp(bf.a_dst, bf.b_src, SZ) == 0 ? "the old" : "new/mixed");
        }
        CHECK(dp_all(bf.b_dst, SZ, 0x5A)); /* the Write landed */
        pair_down();
    }
}

/* Solicited-only notification fires for Send SE and Immediate Data SE,
 * not for a plain Send (RFC 5040 §5.3, RFC 7306 §6). */
static void test_solicited(void)
{
    struct dp_ep_opts ch = {.channel = true};
    struct ibv_send_wr wr;
    struct ibv_sge s, r;
    struct ibv_wc wc;
    struct ibv_cq *evcq;
    void *evctx;

    pair_up(NULL, &ch, false, false, 16, 16);
    s = (struct ibv_sge){(uintptr_t)bf.a_src, 16, bf.a_src_mr->lkey};
    r = (struct ibv_sge){(uintptr_t)bf.b_dst, 64, bf.b_dst_mr->lkey};
    fcntl(B.ch->fd, F_SETFL, fcntl(B.ch->fd, F_GETFL) | O_NONBLOCK);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(post_recv1(B.qp, 40 + (uint64_t)i, &r, 1), 0);
    CHECK_EQ(ibv_req_notify_cq(B.rcq, 1), 0);

    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &s;
    wr.num_sge = 1;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    CHECK(barrier());
    CHECK_EQ(ibv_get_cq_event(B.ch, &evcq, &evctx), -1); /* plain Send: no event */
    wr.send_flags = IBV_SEND_SOLICITED;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    {
        struct pollfd p = {.fd = B.ch->fd, .events = POLLIN};
        CHECK_EQ(poll(&p, 1, DP_TIMEOUT_MS), 1);
    }
    CHECK_EQ(ibv_get_cq_event(B.ch, &evcq, &evctx), 0);
    CHECK(evcq == B.rcq);
    ibv_ack_cq_events(B.rcq, 1);
    /* Write with Imm + SOLICITED -> Immediate Data with SE */
    CHECK_EQ(ibv_req_notify_cq(B.rcq, 1), 0);
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SOLICITED;
    wr.imm_data = htobe32(0xfeedbeef);
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = (uintptr_t)bf.b_dst + 4096;
    wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    {
        struct pollfd p = {.fd = B.ch->fd, .events = POLLIN};
        CHECK_EQ(poll(&p, 1, DP_TIMEOUT_MS), 1);
    }
    CHECK_EQ(ibv_get_cq_event(B.ch, &evcq, &evctx), 0);
    ibv_ack_cq_events(B.rcq, 1);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 40 + (uint64_t)i);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
    }
    CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK_EQ(wc.imm_data, htobe32(0xfeedbeef));
    pair_down();
}

/* Sends land in SRQ receives. */
static void test_srq(void)
{
    struct dp_ep_opts so = {.srq = true};
    struct ibv_wc wc;

    pair_up(NULL, &so, true, false, 16, 16);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(eng_post_srq_recv(B.srq, bf.b_dst + 8192u * (unsigned)i, 8192, bf.b_dst_mr->lkey,
                                   60 + (uint64_t)i),
                 0);
    for (int i = 0; i < 4; i++) {
        dp_fill(bf.a_src + 8192u * (unsigned)i, 5000);
        CHECK_EQ(eng_post(A.qp, IBV_WR_SEND, bf.a_src + 8192u * (unsigned)i, 5000,
                          bf.a_src_mr->lkey, 0, 0, 0, false),
                 0);
    }
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, 60 + (uint64_t)i, IBV_WC_RECV, 5000, 0));
    }
    dp_sync(B.qp);
    for (int i = 0; i < 4; i++)
        CHECK_MEM(bf.b_dst + 8192u * (unsigned)i, bf.a_src + 8192u * (unsigned)i, 5000);
    pair_down();
}

/* Local errors complete the WR with the verbs status, the QP goes to ERR
 * (Terminate "Local Catastrophic" to the peer, RFC 5040 §7.1 case 1) and
 * the rest is flushed. */
static void test_local_errors(void)
{
    for (int kind = 0; kind < 3; kind++) {
        struct ibv_send_wr wr[2], *bad;
        struct ibv_sge s;
        struct ibv_wc wc;
        struct ibv_mr *ro = NULL;
        enum ibv_wc_status want = IBV_WC_LOC_PROT_ERR;

        pair_up(NULL, NULL, false, false, 16, 16);
        CHECK_EQ(post_recv1(B.qp, 11, NULL, 0), 0);
        memset(wr, 0, sizeof(wr));
        wr[0].wr_id = 1;
        wr[0].sg_list = &s;
        wr[0].num_sge = 1;
        wr[0].next = &wr[1];
        wr[1].wr_id = 2;
        wr[1].opcode = IBV_WR_RDMA_WRITE;
        wr[1].wr.rdma.remote_addr = (uintptr_t)bf.b_dst;
        wr[1].wr.rdma.rkey = bf.b_dst_mr->rkey;
        switch (kind) {
        case 0: /* Send from a bad lkey */
            s = (struct ibv_sge){(uintptr_t)bf.a_src, 100, bf.a_src_mr->lkey ^ 0x55};
            wr[0].opcode = IBV_WR_SEND;
            break;
        case 1: /* Read into a region without LOCAL_WRITE */
            ro = ibv_reg_mr(A.pd, bf.a_dst, 4096, IBV_ACCESS_REMOTE_READ);
            CHECK(ro != NULL);
            s = (struct ibv_sge){(uintptr_t)bf.a_dst, 100, ro ? ro->lkey : 0};
            wr[0].opcode = IBV_WR_RDMA_READ;
            wr[0].wr.rdma.remote_addr = (uintptr_t)bf.b_src;
            wr[0].wr.rdma.rkey = bf.b_src_mr->rkey;
            break;
        default: /* Atomic with a 4-byte result buffer */
            s = (struct ibv_sge){(uintptr_t)bf.a_dst, 4, bf.a_dst_mr->lkey};
            wr[0].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr[0].wr.atomic.remote_addr = (uintptr_t)bf.b_dst;
            wr[0].wr.atomic.rkey = bf.b_dst_mr->rkey;
            want = IBV_WC_LOC_LEN_ERR;
            break;
        }
        dp_async_drain();
        CHECK_EQ(ibv_post_send(A.qp, wr, &bad), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 1);
        CHECK_EQ(wc.status, want);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 2);
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
        /* the peer got our Terminate: its receive is flushed, it is in ERR */
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 11);
        CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
        CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_FATAL);
        CHECK_EQ(dp_state(B.qp), IBV_QPS_ERR);
        CHECK(to_uqp(B.qp)->term_received);
        CHECK_EQ(to_uqp(B.qp)->term.layer, UIW_LAYER_RDMAP);
        CHECK_EQ(to_uqp(B.qp)->term.etype, UIW_RDMAP_ET_CATASTROPHIC);
        if (ro)
            CHECK_EQ(ibv_dereg_mr(ro), 0);
        pair_down();
    }
}

/* Both directions at once, many messages in flight, CRC on. */
static void test_bidirectional(void)
{
    enum { N = 200, SZ = 30000 };
    struct ibv_send_wr wa, wb;
    struct ibv_sge sa, sb, ra, rb;
    struct ibv_wc wc;
    int got_a = 0, got_b = 0, sent_a = 0, sent_b = 0;
    uint64_t end;

    pair_up(NULL, NULL, true, false, 16, 16);
    dp_fill(bf.a_src, SZ);
    dp_fill(bf.b_src, SZ);
    for (int i = 0; i < N; i++) {
        ra = (struct ibv_sge){(uintptr_t)(bf.a_dst + (size_t)(i % 64) * SZ), SZ, bf.a_dst_mr->lkey};
        rb = (struct ibv_sge){(uintptr_t)(bf.b_dst + (size_t)(i % 64) * SZ), SZ, bf.b_dst_mr->lkey};
        if (i < 200) {
            CHECK_EQ(post_recv1(A.qp, (uint64_t)i, &ra, 1), 0);
            CHECK_EQ(post_recv1(B.qp, (uint64_t)i, &rb, 1), 0);
        }
    }
    sa = (struct ibv_sge){(uintptr_t)bf.a_src, SZ, bf.a_src_mr->lkey};
    sb = (struct ibv_sge){(uintptr_t)bf.b_src, SZ, bf.b_src_mr->lkey};
    memset(&wa, 0, sizeof(wa));
    wa.opcode = IBV_WR_SEND;
    wa.sg_list = &sa;
    wa.num_sge = 1;
    wb = wa;
    wb.sg_list = &sb;
    end = dp_now_ms() + DP_TIMEOUT_MS;
    while ((got_a < N || got_b < N) && dp_now_ms() < end) {
        if (sent_a < N && sent_a - got_b < 100 && post_send1(A.qp, &wa) == 0)
            sent_a++;
        if (sent_b < N && sent_b - got_a < 100 && post_send1(B.qp, &wb) == 0)
            sent_b++;
        if (ibv_poll_cq(A.rcq, 1, &wc) == 1) {
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
            CHECK_EQ(wc.byte_len, SZ);
            got_a++;
        }
        if (ibv_poll_cq(B.rcq, 1, &wc) == 1) {
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
            CHECK_EQ(wc.byte_len, SZ);
            got_b++;
        }
    }
    CHECK_EQ(got_a, N);
    CHECK_EQ(got_b, N);
    dp_sync(A.qp);
    dp_sync(B.qp);
    CHECK_MEM(bf.a_dst, bf.b_src, SZ);
    CHECK_MEM(bf.b_dst, bf.a_src, SZ);
    pair_down();
}

/* One-sided operations while the target makes no call at all (not even a
 * lock): Write, then Read it back, FetchAdd, CmpSwap, all served by the
 * target's progress thread; checked from the initiator's side only. */
static void test_idle_target(void)
{
    enum { SZ = 1u << 20 };
    struct ibv_send_wr wr;
    struct ibv_sge s;
    struct ibv_wc wc;
    uint64_t v;

    pair_up(NULL, NULL, true, false, 16, 16);
    memset(bf.b_dst, 0, 64); /* before the first operation: ordered by the connect */
    dp_fill(bf.a_src, SZ);
    s = (struct ibv_sge){(uintptr_t)bf.a_src, SZ, bf.a_src_mr->lkey};
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = (uintptr_t)bf.b_dst + 64;
    wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    s = (struct ibv_sge){(uintptr_t)bf.a_dst, SZ, bf.a_dst_mr->lkey};
    wr.wr_id = 2;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK(wc_ok(&wc, 2, IBV_WC_RDMA_READ, SZ, 0));
    CHECK_MEM(bf.a_dst, bf.a_src, SZ); /* RFC 5040 §5.5 rule 12: the Read saw the Write */
    for (int i = 0; i < 100; i++) {
        s = (struct ibv_sge){(uintptr_t)bf.a_dst, 8, bf.a_dst_mr->lkey};
        wr.wr_id = 10 + (uint64_t)i;
        wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
        wr.wr.atomic.remote_addr = (uintptr_t)bf.b_dst;
        wr.wr.atomic.rkey = bf.b_dst_mr->rkey;
        wr.wr.atomic.compare_add = 3;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK(wc_ok(&wc, 10 + (uint64_t)i, IBV_WC_FETCH_ADD, 8, 0));
        memcpy(&v, bf.a_dst, 8);
        CHECK_EQ(v, 3u * (unsigned)i);
    }
    wr.wr_id = 200;
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = 300;
    wr.wr.atomic.swap = 7;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK(wc_ok(&wc, 200, IBV_WC_COMP_SWAP, 8, 0));
    memcpy(&v, bf.a_dst, 8);
    CHECK_EQ(v, 300);
    s = (struct ibv_sge){(uintptr_t)bf.a_dst, 8, bf.a_dst_mr->lkey};
    wr.wr_id = 201;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.wr.rdma.remote_addr = (uintptr_t)bf.b_dst;
    wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
    CHECK_EQ(post_send1(A.qp, &wr), 0);
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    memcpy(&v, bf.a_dst, 8);
    CHECK_EQ(v, 7);
    pair_down();
}

/* Deregistering a Read's source while its response is being sent: after
 * ibv_dereg_mr returns, no byte of the region may reach the wire (the
 * region is overwritten with 0xEE then). The Read either completes with
 * the original data, or fails with a remote access error (RFC 5040 §4.8:
 * Terminate Remote Protection / invalid STag). */
static void test_dereg_race(void)
{
    enum { SZ = 16u << 20 };
    unsigned ok = 0, failed = 0;

    for (int it = 0; it < 6; it++) {
        struct ibv_send_wr wr;
        struct ibv_sge s;
        struct ibv_wc wc;
        uint8_t *src = dp_alloc(4096, SZ), *copy = malloc(SZ);
        struct ibv_mr *m;
        uint64_t t0;

        pair_up(NULL, NULL, it & 1, false, 16, 16);
        dp_fill(src, SZ);
        memcpy(copy, src, SZ);
        m = ibv_reg_mr(B.pd, src, SZ, IBV_ACCESS_REMOTE_READ);
        memset(bf.a_dst, 0, SZ);
        s = (struct ibv_sge){(uintptr_t)bf.a_dst, SZ, bf.a_dst_mr->lkey};
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 5;
        wr.opcode = IBV_WR_RDMA_READ;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &s;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = (uintptr_t)src;
        wr.wr.rdma.rkey = m->rkey;
        CHECK_EQ(post_send1(A.qp, &wr), 0);
        dp_msleep("\x00\x02\x05\x0a\x1e\x64"[it]); /* before, during or after the response */
        t0 = dp_now_ms();
        CHECK_EQ(ibv_dereg_mr(m), 0);
        CHECK(dp_now_ms() - t0 < 2000); /* never waits for the network */
        memset(src, 0xEE, SZ);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.wr_id, 5);
        if (wc.status == IBV_WC_SUCCESS) {
            ok++;
            CHECK_MEM(bf.a_dst, copy, SZ);
        } else {
            failed++;
            CHECK_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
            /* what did arrive is original data, never the overwritten bytes */
            for (size_t i = 0; i < SZ; i += 4096)
                if (bf.a_dst[i] != 0 && bf.a_dst[i] != copy[i]) {
                    CHECK(bf.a_dst[i] == copy[i]);
                    break;
                }
            CHECK(to_uqp(A.qp)->term_received);
            CHECK_EQ(to_uqp(A.qp)->term.layer, UIW_LAYER_RDMAP);
            CHECK_EQ(to_uqp(A.qp)->term.etype, UIW_RDMAP_ET_REMOTE_PROT);
            CHECK_EQ(to_uqp(A.qp)->term.ecode, UIW_RDMAP_EC_INVALID_STAG);
        }
        pair_down();
        free(src);
        free(copy);
    }
    printf("dereg race: %u Reads completed, %u terminated\n", ok, failed);
}

/* Throughput of large Writes and Reads on the socketpair (informational). */
static void measure(void)
{
    enum { SZ = 8u << 20, N = 16 };
    struct ibv_send_wr wr;
    struct ibv_sge s;
    struct ibv_wc wc;

    for (int crc = 0; crc < 2; crc++) {
        for (int rd = 0; rd < 2; rd++) {
            uint64_t t0;
            int ok = 0;
            pair_up(NULL, NULL, crc, false, 16, 16);
            s = (struct ibv_sge){(uintptr_t)(rd ? bf.a_dst : bf.a_src), SZ,
                                 rd ? bf.a_dst_mr->lkey : bf.a_src_mr->lkey};
            memset(&wr, 0, sizeof(wr));
            wr.opcode = rd ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.sg_list = &s;
            wr.num_sge = 1;
            wr.wr.rdma.remote_addr = (uintptr_t)(rd ? bf.b_src : bf.b_dst);
            wr.wr.rdma.rkey = rd ? bf.b_src_mr->rkey : bf.b_dst_mr->rkey;
            t0 = dp_now_ms();
            for (int i = 0; i < N; i++) {
                if (post_send1(A.qp, &wr) == 0 && dp_poll(A.scq, &wc, DP_TIMEOUT_MS) == 1 &&
                    wc.status == IBV_WC_SUCCESS)
                    ok++;
            }
            if (!rd)
                CHECK(barrier());
            {
                uint64_t ms = dp_now_ms() - t0;
                printf("measure: %s crc=%d: %d x %u MiB in %llu ms = %.0f MB/s\n",
                       rd ? "Read " : "Write", crc, ok, SZ >> 20, (unsigned long long)ms,
                       ms ? (double)ok * SZ / 1e3 / (double)ms : 0.0);
            }
            CHECK_EQ(ok, N);
            pair_down();
        }
    }
}

/* Large messages are received straight into their destination, not
 * through the staging buffer (docs/ENGINE.md "Receive"): of 8 x 4 MiB
 * Writes, Reads and Sends each, at least 90% of the payload bytes are read
 * in place (the rest: the bytes read together with each FPDU header). */
static void test_in_place(void)
{
    enum { N = 8, SZ = 4u << 20 };
    struct ibv_send_wr wr;
    struct ibv_sge s, r;
    struct ibv_wc wc;
    uint64_t zc0, cp0, rd0, zc, cp, rd;

    pair_up(NULL, NULL, false, false, 16, 16);
    for (int op = 0; op < 3; op++) {
        /* the receiving side: B for Write and Send, A (the Read's sink) for Read */
        struct uiw_qp *rx = to_uqp(op == 1 ? A.qp : B.qp);
        uint8_t *src = op == 1 ? bf.b_src : bf.a_src, *dst = op == 1 ? bf.a_dst : bf.b_dst;

        dp_fill(src, SZ);
        memset(dst, 0, SZ);
        uiw_qp_rx_stats(rx, &zc0, &cp0, &rd0);
        for (int i = 0; i < N; i++) {
            memset(&wr, 0, sizeof(wr));
            wr.wr_id = ++wrid;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.sg_list = &s;
            wr.num_sge = 1;
            if (op == 0) {
                s = (struct ibv_sge){(uintptr_t)src, SZ, bf.a_src_mr->lkey};
                wr.opcode = IBV_WR_RDMA_WRITE;
                wr.wr.rdma.rkey = bf.b_dst_mr->rkey;
                wr.wr.rdma.remote_addr = (uintptr_t)dst;
            } else if (op == 1) {
                s = (struct ibv_sge){(uintptr_t)dst, SZ, bf.a_dst_mr->lkey};
                wr.opcode = IBV_WR_RDMA_READ;
                wr.wr.rdma.rkey = bf.b_src_mr->rkey;
                wr.wr.rdma.remote_addr = (uintptr_t)src;
            } else {
                r = (struct ibv_sge){(uintptr_t)dst, SZ, bf.b_dst_mr->lkey};
                CHECK_EQ(post_recv1(B.qp, wrid, &r, 1), 0);
                s = (struct ibv_sge){(uintptr_t)src, SZ, bf.a_src_mr->lkey};
                wr.opcode = IBV_WR_SEND;
            }
            CHECK_EQ(post_send1(A.qp, &wr), 0);
            CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
            if (op == 2) {
                CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
                CHECK_EQ(wc.status, IBV_WC_SUCCESS);
                CHECK_EQ(wc.byte_len, SZ);
            }
        }
        CHECK(barrier());
        CHECK_MEM(dst, src, SZ);
        uiw_qp_rx_stats(rx, &zc, &cp, &rd);
        zc -= zc0;
        cp -= cp0;
        rd -= rd0;
        printf("in place: %s %d x %u B: %llu bytes in place, %llu copied, %llu reads\n",
               op == 0   ? "Write"
               : op == 1 ? "Read"
                         : "Send",
               N, SZ, (unsigned long long)zc, (unsigned long long)cp, (unsigned long long)rd);
        CHECK(zc + cp >= (uint64_t)N * SZ);
        CHECK(zc >= (uint64_t)N * SZ / 10 * 9);
    }
    pair_down();
}

int main(void)
{
    bool quick = getenv("UIWARP_DP_QUICK") && atoi(getenv("UIWARP_DP_QUICK"));

    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();

    matrix(false, false, 0, !quick);
    matrix(true, false, 0, !quick);
    matrix(true, true, 0, false);
    matrix(true, false, 256, false);
    matrix(false, true, 100, false);
    print_table();

    test_outstanding_reads();
    test_small_reads_window();
    test_inline();
    test_signaling();
    test_fence();
    test_solicited();
    test_srq();
    test_local_errors();
    test_bidirectional();
    test_idle_target();
    test_dereg_race();
    test_in_place();
    if (!quick)
        measure();

    ibv_close_device(dp_ctx);
    TEST_MAIN_END();
}
