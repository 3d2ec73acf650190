/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Send with Immediate as verbs promise it: one posted receive and one
 * completion per message, carrying byte_len and the immediate value
 * (docs/ENGINE.md "Send with Immediate"), interleaved with plain Sends and
 * RDMA Writes with Immediate, sizes 0 to 1 MiB, with and without CRC; and
 * on the wire, as a raw peer parses it: the tagged Immediate Data, then the
 * Send.
 */
#include <stdlib.h>
#include <string.h>

#include "dp_test.h"

#define MAXSZ (1u << 20)

static struct dp_ep A, B;

enum kind { K_SEND, K_SEND_IMM, K_SEND_IMM_SE, K_WRITE_IMM, K_N };

static void run(bool crc)
{
    static const uint32_t sizes[] = {0, 1, 7, 64, 4095, 4096, 65536, MAXSZ};
    const unsigned nsz = sizeof(sizes) / sizeof(sizes[0]);
    const unsigned total = nsz * K_N;
    uint8_t *src = malloc(MAXSZ), *dst = malloc(MAXSZ + 64), *wdst = malloc(MAXSZ);
    struct dp_ep_opts o = {.send_wr = 64, .recv_wr = 64};

    CHECK(src && dst && wdst);
    if (!src || !dst || !wdst)
        return;
    CHECK_EQ(dp_ep_create(&A, &o), 0);
    CHECK_EQ(dp_ep_create(&B, &o), 0);
    struct ibv_mr *smr = ibv_reg_mr(A.pd, src, MAXSZ, ENG_ACCESS_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(B.pd, dst, MAXSZ + 64, ENG_ACCESS_ALL);
    struct ibv_mr *wmr = ibv_reg_mr(B.pd, wdst, MAXSZ, ENG_ACCESS_ALL);
    CHECK(smr && dmr && wmr);
    CHECK_EQ(dp_connect(&A, &B, crc, false, 16, 16, 16, 16), 0);

    /* message i of size s, kind k; the receiver posts exactly one receive
     * per message */
    for (unsigned i = 0; i < total; i++) {
        uint32_t size = sizes[i / K_N];
        enum kind k = (enum kind)((i + i / K_N) % K_N); /* every kind at every size */
        struct ibv_sge rs = {(uintptr_t)dst, MAXSZ, dmr->lkey};
        struct ibv_recv_wr rw = {.wr_id = 1000 + i, .sg_list = &rs, .num_sge = 1}, *rbad;
        struct ibv_sge ss = {(uintptr_t)src, size, smr->lkey};
        struct ibv_send_wr sw, *sbad;
        struct ibv_wc wc;
        uint32_t imm = htobe32(0xC0DE0000u + i);

        eng_fill(src, size, i);
        memset(dst, 0xA5, MAXSZ + 64);
        CHECK_EQ(ibv_post_recv(B.qp, &rw, &rbad), 0);
        memset(&sw, 0, sizeof(sw));
        sw.wr_id = i;
        sw.sg_list = size ? &ss : NULL;
        sw.num_sge = size ? 1 : 0;
        sw.send_flags = IBV_SEND_SIGNALED;
        sw.imm_data = imm;
        switch (k) {
        case K_SEND:
            sw.opcode = IBV_WR_SEND;
            break;
        case K_SEND_IMM_SE:
            sw.send_flags |= IBV_SEND_SOLICITED;
            /* fall through */
        case K_SEND_IMM:
            sw.opcode = IBV_WR_SEND_WITH_IMM;
            break;
        case K_WRITE_IMM:
            sw.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
            sw.wr.rdma.remote_addr = (uintptr_t)wdst;
            sw.wr.rdma.rkey = wmr->rkey;
            break;
        default:
            break;
        }
        CHECK_EQ(ibv_post_send(A.qp, &sw, &sbad), 0);
        CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.wr_id, i);
        /* exactly one completion at the receiver, for the one receive */
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.wr_id, 1000 + i);
        switch (k) {
        case K_SEND:
            CHECK_EQ(wc.opcode, IBV_WC_RECV);
            CHECK_EQ(wc.byte_len, size);
            CHECK_EQ(wc.wc_flags & IBV_WC_WITH_IMM, 0);
            break;
        case K_SEND_IMM:
        case K_SEND_IMM_SE:
            CHECK_EQ(wc.opcode, IBV_WC_RECV);
            CHECK_EQ(wc.byte_len, size);
            CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
            CHECK_EQ(wc.imm_data, imm);
            break;
        case K_WRITE_IMM:
            CHECK_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
            CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
            CHECK_EQ(wc.imm_data, imm);
            break;
        default:
            break;
        }
        CHECK(dp_quiet(B.rcq, 0));
        dp_sync(B.qp);
        if (k == K_WRITE_IMM) {
            CHECK_EQ(eng_diff(wdst, size, i), -1);
        } else {
            CHECK_EQ(eng_diff(dst, size, i), -1);
            CHECK(dp_all(dst + size, 64, 0xA5)); /* nothing past it */
        }
    }
    CHECK_EQ(dp_state(A.qp), IBV_QPS_RTS);
    CHECK_EQ(dp_state(B.qp), IBV_QPS_RTS);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    ibv_dereg_mr(wmr);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    free(dst);
    free(wdst);
}

/* What goes on the wire: the Immediate Data (QN 0, MSN n, tagged
 * "attached", the value in its first 4 bytes), then the Send (MSN n + 1)
 * carrying the SE when solicited. */
static void wire(void)
{
    struct dp_raw p;
    uiw_mpa_result m = dp_mpa(false, false, 4, 4);
    uint8_t buf[100];
    uiw_hdr h;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    struct ibv_mr *mr = ibv_reg_mr(A.pd, buf, sizeof(buf), ENG_ACCESS_ALL);
    CHECK(mr != NULL);
    CHECK_EQ(dp_connect_raw(&A, &p, &m), 0);
    eng_fill(buf, sizeof(buf), 9);
    struct ibv_sge s = {(uintptr_t)buf, sizeof(buf), mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1,
                             .sg_list = &s,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
                             .imm_data = htobe32(0x01020304)},
                       *bad;
    CHECK_EQ(ibv_post_send(A.qp, &wr, &bad), 0);
    CHECK_EQ(dp_raw_recv(&p, &h, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(h.opcode, UIW_OP_IMM_DATA);
    CHECK_EQ(h.qn, UIW_QN_SEND);
    CHECK_EQ(h.msn, 1);
    CHECK(uiw_imm_is_attached(h.u.imm));
    CHECK_EQ(h.u.imm[0], 1);
    CHECK_EQ(h.u.imm[3], 4);
    CHECK_EQ(dp_raw_recv(&p, &h, DP_TIMEOUT_MS, NULL), 1);
    CHECK_EQ(h.opcode, UIW_OP_SEND_SE);
    CHECK_EQ(h.msn, 2);
    CHECK(h.last);
    dp_raw_fini(&p);
    ibv_dereg_mr(mr);
    dp_ep_destroy(&A);
}

/* The receiver's side of the encoding: a tagged Immediate Data takes no
 * receive and must be followed by its Send; anything else on QN 0 is a
 * protocol error (Terminate RDMAP / Remote Operation / Unexpected OpCode),
 * the QP goes to ERR and the receive stays unconsumed (flushed). */
static void orphan_imm(bool second_attached)
{
    struct dp_raw p;
    uiw_mpa_result m = dp_mpa(false, false, 4, 4);
    uint8_t buf[64];
    uiw_hdr h;
    struct ibv_wc wc;

    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    struct ibv_mr *mr = ibv_reg_mr(A.pd, buf, sizeof(buf), ENG_ACCESS_ALL);
    CHECK(mr != NULL);
    struct ibv_sge s = {(uintptr_t)buf, sizeof(buf), mr ? mr->lkey : 0};
    struct ibv_recv_wr rw = {.wr_id = 5, .sg_list = &s, .num_sge = 1}, *rbad;
    CHECK_EQ(ibv_post_recv(A.qp, &rw, &rbad), 0);
    CHECK_EQ(dp_connect_raw(&A, &p, &m), 0);
    dp_hdr_u(&h, UIW_OP_IMM_DATA, UIW_QN_SEND, 1);
    static const uint8_t tagged1[8] = {1, 2, 3, 4, 'u', 'i', 'w', 'S'};
    static const uint8_t tagged2[8] = {5, 6, 7, 8, 'u', 'i', 'w', 'S'};
    static const uint8_t plain[8] = {5, 6, 7, 8, 'a', 'b', 'c', 'd'};
    memcpy(h.u.imm, tagged1, 8);
    CHECK_EQ(dp_raw_send(&p, &h, NULL, 0), 0);
    /* then, instead of the Send: another Immediate Data */
    dp_hdr_u(&h, UIW_OP_IMM_DATA, UIW_QN_SEND, 2);
    memcpy(h.u.imm, second_attached ? tagged2 : plain, 8);
    CHECK_EQ(dp_raw_send(&p, &h, NULL, 0), 0);
    CHECK_EQ(dp_raw_term(&p, &h, DP_TIMEOUT_MS), 1);
    CHECK_EQ(h.u.term.cause.layer, UIW_LAYER_RDMAP);
    CHECK_EQ(h.u.term.cause.etype, UIW_RDMAP_ET_REMOTE_OP);
    CHECK_EQ(h.u.term.cause.ecode, UIW_RDMAP_EC_UNEXPECTED_OPCODE);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
    CHECK_EQ(dp_poll(A.rcq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 5);
    CHECK_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
    dp_raw_fini(&p);
    ibv_dereg_mr(mr);
    dp_ep_destroy(&A);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    run(false);
    run(true);
    wire();
    orphan_imm(false);
    orphan_imm(true);
    TEST_MAIN_END();
}
