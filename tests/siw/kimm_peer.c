// SPDX-License-Identifier: BSD-3-Clause
/*
 * kimm_peer: the host side of the kernel module's immediate-data interop
 * case (docs/KERNEL.md, scripts/kernel.sh test): an rdma_cm server on
 * uiwarp's libraries that meets uiwarp_ktest.ko's imm_dst= client.
 *
 * The client's MPA Request carries {be64 addr, be32 rkey, be32 len} of a
 * buffer it lets us Write; our accept carries the same for ours. Then:
 *   - the client posts a Send with Immediate (3001 bytes, pattern 1, value
 *     0x11223344) and an RDMA Write with Immediate (5000 bytes of pattern 2
 *     into our buffer, value 0x55667788); we check both receives: the
 *     first IBV_WC_RECV with IBV_WC_WITH_IMM, its length, value and bytes,
 *     the second IBV_WC_RECV_RDMA_WITH_IMM with the value, byte_len 0, and
 *     the Written bytes;
 *   - we answer with the same two operations (2000 bytes of pattern 3,
 *     0x99aabbcc; 4000 bytes of pattern 4 into the client's buffer,
 *     0xddeeff00), which the client checks;
 *   - the client does a Fetch and Add (234) and a Compare and Swap (1234 ->
 *     0xdeadbeefcafef00d) on a word of our buffer (8192 bytes past its
 *     start, 1000 at first) and checks the originals; we do the same on
 *     a word of its buffer (2000: add 345, then 2345 -> 0x0123456789abcdef)
 *     and check the originals, then Send 1 byte, after which the client
 *     checks its word;
 *   - the client disconnects; our word must be 0xdeadbeefcafef00d.
 * Exit 0 when every check passed.
 */

#include <endian.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define BUF_LEN 65536
#define RECV_A  0
#define RECV_B  16384
#define TARGET  32768
#define SRC     49152
#define WORD    8192 /* past TARGET, in both buffers */

struct adv {
    uint64_t addr;
    uint32_t rkey;
    uint32_t len;
} __attribute__((packed));

static int fails;

static void check(bool ok, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("kimm_peer: %s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    if (!ok)
        fails++;
}

/* the test's byte patterns (uiw_ktest.c imm_pat: the same formula) */
static uint8_t pat(size_t i, unsigned k)
{
    return (uint8_t)(i * 7 + k * 31 + (i >> 9));
}

static bool pat_ok(const uint8_t *p, size_t n, unsigned k)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(i, k)) {
            printf("kimm_peer: byte %zu of %zu: 0x%02x, want 0x%02x\n", i, n, p[i], pat(i, k));
            return false;
        }
    return true;
}

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, int want, int ms)
{
    struct pollfd p = {.fd = ch->fd, .events = POLLIN};
    struct rdma_cm_event *ev;

    if (poll(&p, 1, ms) != 1) {
        check(false, "no %s within %d ms", rdma_event_str(want), ms);
        return NULL;
    }
    if (rdma_get_cm_event(ch, &ev)) {
        check(false, "rdma_get_cm_event");
        return NULL;
    }
    if ((int)ev->event != want) {
        check(false, "event %s (status %d), want %s", rdma_event_str(ev->event), ev->status,
              rdma_event_str(want));
        rdma_ack_cm_event(ev);
        return NULL;
    }
    return ev;
}

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
    struct timespec t0, t;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int n = ibv_poll_cq(cq, 1, wc);

        if (n)
            return n;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
            return 0;
        usleep(500);
    }
}

static int post_imm(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf, size_t off, uint32_t len,
                    bool write, const struct adv *to, uint32_t imm, uint64_t id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(buf + off), .length = len, .lkey = mr->lkey};
    struct ibv_send_wr w = {.wr_id = id,
                            .sg_list = &sge,
                            .num_sge = 1,
                            .opcode = write ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND_WITH_IMM,
                            .send_flags = IBV_SEND_SIGNALED,
                            .imm_data = htobe32(imm)};
    struct ibv_send_wr *bad;

    if (write) {
        w.wr.rdma.remote_addr = be64toh(to->addr);
        w.wr.rdma.rkey = be32toh(to->rkey);
    }
    return ibv_post_send(qp, &w, &bad);
}

int main(int argc, char **argv)
{
    const char *addr = "127.0.0.1";
    int port = 0, opt, n;
    struct rdma_event_channel *ch;
    struct rdma_cm_id *lid, *cid = NULL;
    struct rdma_cm_event *ev;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    struct ibv_pd *pd = NULL;
    struct ibv_cq *cq = NULL;
    struct ibv_mr *mr = NULL;
    struct adv peer = {0}, mine;
    struct ibv_wc wc;
    uint8_t *buf;

    while ((opt = getopt(argc, argv, "a:p:")) != -1) {
        if (opt == 'a')
            addr = optarg;
        else if (opt == 'p')
            port = atoi(optarg);
        else
            return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    sin.sin_port = htons((uint16_t)port);
    if (!port || inet_pton(AF_INET, addr, &sin.sin_addr) != 1)
        return 2;
    buf = aligned_alloc(4096, BUF_LEN);
    ch = rdma_create_event_channel();
    if (!buf || !ch || rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(lid, (struct sockaddr *)&sin) || rdma_listen(lid, 1)) {
        check(false, "listen on %s:%d", addr, port);
        return 1;
    }
    memset(buf, 0, BUF_LEN);
    *(uint64_t *)(buf + TARGET + WORD) = 1000;
    printf("kimm_peer: listening on %s:%d\n", addr, port);
    ev = next_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 250000);
    if (!ev)
        return 1;
    cid = ev->id;
    check(ev->param.conn.private_data_len >= sizeof(peer),
          "the client's buffer in its Request (%u bytes)", ev->param.conn.private_data_len);
    if (ev->param.conn.private_data_len >= sizeof(peer))
        memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
    rdma_ack_cm_event(ev);
    {
        struct ibv_qp_init_attr qa = {
            .qp_type = IBV_QPT_RC,
            .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
        struct ibv_sge rs[2] = {{.addr = (uintptr_t)(buf + RECV_A), .length = 16384},
                                {.addr = (uintptr_t)(buf + RECV_B), .length = 16384}};
        struct ibv_recv_wr rw[2] = {{.wr_id = 1, .sg_list = &rs[0], .num_sge = 1, .next = &rw[1]},
                                    {.wr_id = 2, .sg_list = &rs[1], .num_sge = 1}};
        struct ibv_recv_wr *bad;
        struct rdma_conn_param cp = {.responder_resources = 1,
                                     .initiator_depth = 1,
                                     .private_data = &mine,
                                     .private_data_len = sizeof(mine)};

        pd = ibv_alloc_pd(cid->verbs);
        cq = pd ? ibv_create_cq(cid->verbs, 16, NULL, NULL, 0) : NULL;
        mr = cq ? ibv_reg_mr(pd, buf, BUF_LEN,
                             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
                : NULL;
        qa.send_cq = qa.recv_cq = cq;
        if (!mr || rdma_create_qp(cid, pd, &qa)) {
            check(false, "PD, CQ, MR, QP");
            return 1;
        }
        rs[0].lkey = rs[1].lkey = mr->lkey;
        mine.addr = htobe64((uintptr_t)(buf + TARGET));
        mine.rkey = htobe32(mr->rkey);
        mine.len = htobe32(16384);
        if (ibv_post_recv(cid->qp, rw, &bad) || rdma_accept(cid, &cp)) {
            check(false, "post_recv, accept");
            return 1;
        }
    }
    ev = next_event(ch, RDMA_CM_EVENT_ESTABLISHED, 20000);
    if (!ev)
        return 1;
    rdma_ack_cm_event(ev);

    /* the client's Send with Immediate, then its Write with Immediate
     * (each polled before its check: the check's arguments print it) */
    memset(&wc, 0, sizeof(wc));
    n = poll_one(cq, &wc, 20000);
    check(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.opcode == IBV_WC_RECV &&
              (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0x11223344) &&
              wc.byte_len == 3001,
          "Send with Immediate from the module: status %d id %lu opcode %d flags 0x%x imm 0x%08x "
          "len %u",
          wc.status, (unsigned long)wc.wr_id, wc.opcode, wc.wc_flags, be32toh(wc.imm_data),
          wc.byte_len);
    check(pat_ok(buf + RECV_A, 3001, 1), "Send with Immediate from the module: 3001 bytes");
    memset(&wc, 0, sizeof(wc));
    n = poll_one(cq, &wc, 20000);
    check(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 &&
              wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
              wc.imm_data == htobe32(0x55667788) && wc.byte_len == 0,
          "RDMA Write with Immediate from the module: status %d id %lu opcode %d flags 0x%x imm "
          "0x%08x len %u",
          wc.status, (unsigned long)wc.wr_id, wc.opcode, wc.wc_flags, be32toh(wc.imm_data),
          wc.byte_len);
    check(pat_ok(buf + TARGET, 5000, 2) && buf[TARGET + 5000] == 0,
          "RDMA Write with Immediate from the module: 5000 bytes, nothing past them");

    /* ours: a Send with Immediate, a Write with Immediate */
    for (size_t i = 0; i < 2000; i++)
        buf[SRC + i] = pat(i, 3);
    for (size_t i = 0; i < 4000; i++)
        buf[SRC + 4096 + i] = pat(i, 4);
    check(post_imm(cid->qp, mr, buf, SRC, 2000, false, NULL, 0x99aabbcc, 11) == 0 &&
              post_imm(cid->qp, mr, buf, SRC + 4096, 4000, true, &peer, 0xddeeff00, 12) == 0,
          "post a Send and a Write with Immediate");
    for (int k = 0; k < 2; k++) {
        memset(&wc, 0, sizeof(wc));
        n = poll_one(cq, &wc, 20000);
        check(n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(11 + k) &&
                  wc.opcode == (k ? IBV_WC_RDMA_WRITE : IBV_WC_SEND),
              "our %s with Immediate completes: status %d opcode %d", k ? "Write" : "Send",
              wc.status, wc.opcode);
    }
    /* our atomics on the client's word, then a Send that says they are done */
    {
        static const struct {
            enum ibv_wr_opcode op;
            uint64_t cmp_add, swap, orig;
        } at[] = {{IBV_WR_ATOMIC_FETCH_AND_ADD, 345, 0, 2000},
                  {IBV_WR_ATOMIC_CMP_AND_SWP, 2345, 0x0123456789abcdefull, 2345}};
        uint64_t *res = (uint64_t *)(buf + SRC + 8192);
        struct ibv_sge sge = {.addr = (uintptr_t)res, .length = 8, .lkey = mr->lkey};
        struct ibv_send_wr *bad;

        for (int k = 0; k < 2; k++) {
            struct ibv_send_wr w = {.wr_id = 20 + k,
                                    .sg_list = &sge,
                                    .num_sge = 1,
                                    .opcode = at[k].op,
                                    .send_flags = IBV_SEND_SIGNALED};

            w.wr.atomic.remote_addr = be64toh(peer.addr) + WORD;
            w.wr.atomic.rkey = be32toh(peer.rkey);
            w.wr.atomic.compare_add = at[k].cmp_add;
            w.wr.atomic.swap = at[k].swap;
            *res = 0;
            memset(&wc, 0, sizeof(wc));
            n = ibv_post_send(cid->qp, &w, &bad) ? 0 : poll_one(cq, &wc, 20000);
            check(n == 1 && wc.status == IBV_WC_SUCCESS && *res == at[k].orig,
                  "our atomic %d on the module's word: status %d original %llu (want %llu)", k,
                  wc.status, (unsigned long long)*res, (unsigned long long)at[k].orig);
        }
        sge.length = 1;
        {
            struct ibv_send_wr w = {.wr_id = 30,
                                    .sg_list = &sge,
                                    .num_sge = 1,
                                    .opcode = IBV_WR_SEND,
                                    .send_flags = IBV_SEND_SIGNALED};

            memset(&wc, 0, sizeof(wc));
            n = ibv_post_send(cid->qp, &w, &bad) ? 0 : poll_one(cq, &wc, 20000);
            check(n == 1 && wc.status == IBV_WC_SUCCESS, "the done Send: status %d", wc.status);
        }
    }
    ev = next_event(ch, RDMA_CM_EVENT_DISCONNECTED, 30000);
    check(ev != NULL, "the module disconnects");
    if (ev)
        rdma_ack_cm_event(ev);
    check(*(uint64_t *)(buf + TARGET + WORD) == 0xdeadbeefcafef00dull,
          "the module's atomics on our word: 0x%llx (want 0xdeadbeefcafef00d)",
          (unsigned long long)*(uint64_t *)(buf + TARGET + WORD));
    rdma_destroy_qp(cid);
    ibv_dereg_mr(mr);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    rdma_destroy_id(cid);
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(ch);
    free(buf);
    printf("kimm_peer: %s\n", fails ? "FAIL" : "PASS");
    return fails ? 1 : 0;
}
