// SPDX-License-Identifier: BSD-3-Clause
/*
 * krnic_peer: an RNIC-like peer (tests/rnic/rnic_peer.h: the irdma and
 * cxgb4 personalities, docs/PEERS.md §11) for the kernel module's rping
 * test modes (kernel/uiw_ktest.c, scripts/kernel.sh test, docs/KERNEL.md
 * "Against RNIC-like peers"). It runs on the host; the guest's
 * uiwarp_ktest.ko reaches it through qemu's user network.
 *
 *   krnic_peer -P irdma|cxgb4|cxgb4-rev1 -m server -p PORT [-n COUNT]
 *       the rping server (the module is the initiator: rping_dst=10.0.2.2
 *       rping_port=PORT): listens on 127.0.0.1:PORT, accepts as the
 *       personality's responder; per round the module's Send advertises
 *       its start_buf, which we Read (checked byte for byte against the
 *       module's pattern), our Send answers, the module's second Send
 *       advertises its rdma_buf, which we Write with what we Read, our Send
 *       answers (the module compares). Then an RDMA Write to an STag the
 *       module never gave out: the module must answer with a Terminate
 *       (DDP / tagged buffer / invalid STag, RFC 5041 §7.2) in the form
 *       irdma accepts (notes §1.6), then close.
 *   krnic_peer -P irdma|cxgb4|cxgb4-rev1 -m client -p PORT [-n COUNT] [-s SIZE]
 *       the rping client (the module is the responder: rping_listen=,
 *       reached through qemu's forwarding of 127.0.0.1:PORT): connects as
 *       the personality's initiator (RTR, revision 1 retry on a reset);
 *       per round advertises its start_buf ("rdma-ping-N: " and rping's
 *       pattern), which the module Reads (we serve the Read Response),
 *       then its rdma_buf, which the module Writes; we compare the two.
 *       Then our Terminate (0x23 / 0x02, an MPA CRC error as both RNICs
 *       code it): the module must close.
 *
 * With -e (server only), the module is expected to send FPDUs over the MSS
 * (kernel.sh sets its max_fpdu to 8192): the Read Response of the first
 * round breaks the rule, we Terminate (irdma: 0x23 / 0x02) and the module
 * must close.
 *
 * cxgb4-rev1 (cxgb4 with mpa_rev=1): as responder it resets the module's
 * revision 2 Request and takes its retry at revision 1 (client-server);
 * as initiator it sends a revision 1 Request and its Read RTR anyway.
 *
 * In both: every FPDU the module sends goes through the personality's
 * rules (rnic_on_fpdu: no FPDU above the MSS, no tagged STag 0, the RTR
 * first, DDP sequencing) and carries a good CRC (the peer always asks for
 * CRC, so it is on); the module's MPA frame's private data stays within the
 * personality's limit (irdma 512, cxgb4 256, reset otherwise) and, for
 * cxgb4, nothing follows it before our answer or RTR. The MSS checked is
 * the personality's 1460: the module's TCP connection ends at qemu's user
 * network (no timestamps), not at our loopback socket.
 * Exit 0 when every check passed.
 */

#include <getopt.h>
#include <stdarg.h>

#include "rnic_peer.h"

#define SRV_SIZE_MAX (128u * 1024) /* start_buf / rdma_buf in our region */
#define CLI_RDMA_OFF (128u * 1024) /* the client's rdma_buf in our region */
#define BAD_STAG_XOR 0x5a5a5a00u   /* an index the module never gave out */

struct rping_info {
    uint64_t buf;
    uint32_t rkey;
    uint32_t size;
} __attribute__((packed));

static int fails, passes;
static const uint8_t nopd[1]; /* no ULP private data */
static const char *pname;

static void check(bool ok, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    printf("krnic_peer %s: %s ", pname, ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
    if (ok)
        passes++;
    else
        fails++;
}

static const char *rtr_name(uint8_t rtr)
{
    return rtr == UIW_RTR_READ ? "Read" : rtr == UIW_RTR_WRITE ? "Write" : "none";
}

static void info_put(uint8_t *out, uint64_t addr, uint32_t rkey, uint32_t size)
{
    struct rping_info i = {htobe64(addr), htobe32(rkey), htobe32(size)};

    memcpy(out, &i, sizeof(i));
}

static bool info_get(const struct rnic *r, struct rping_info *i)
{
    if (r->raw.pay_len != sizeof(*i))
        return false;
    memcpy(i, r->raw.pay, sizeof(*i));
    i->buf = be64toh(i->buf);
    i->rkey = be32toh(i->rkey);
    i->size = be32toh(i->size);
    return true;
}

/* The rules checked on everything the module sent. */
static void rules(struct rnic *r, const char *role)
{
    check(r->fpdus > 0 && r->max_fpdu <= r->mss && r->v.fpdu_mss == 0,
          "the module as %s: %u FPDUs, the longest %u bytes, none above the MSS %u", role, r->fpdus,
          r->max_fpdu, r->mss);
    check(r->crc, "CRC on (every FPDU's CRC checked by the parser)");
    check(r->v.stag0 == 0, "no tagged segment with STag 0 (%u)", r->v.stag0);
    check(r->v.rtr == 0, "the RTR first (%u violations)", r->v.rtr);
    check(r->v.seq == 0, "DDP sequencing (%u violations)", r->v.seq);
    check(r->v.trailing == 0 && r->v.rreq0_src0 == 0,
          "no bytes after the MPA frame (%u), no zero-length Read with source STag 0 (%u)",
          r->v.trailing, r->v.rreq0_src0);
    check(r->peer.ulp_pd_len + (r->peer.enhanced ? UIW_MPA_RFC6581_LEN : 0u) <= r->p->max_pd,
          "the module's private data: %u bytes (+ %u of IRD/ORD), limit %u", r->peer.ulp_pd_len,
          r->peer.enhanced ? UIW_MPA_RFC6581_LEN : 0u, r->p->max_pd);
}

static int listen_on(const struct rnic_pers *p, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = eng_loop4(port);

    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    rnic_sockopts(p, fd);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The module's rping client against our server. */
/* -e: the module runs with max_fpdu above the MSS (kernel.sh sets it):
 * our Read's Response comes in FPDUs over the MSS, and irdma terminates
 * (0x23 / 0x02, its IEQ's "bad fpdu len", notes §1.7): the rule is shown to
 * fire on the module's path. */
static void expect_fpdu_term(struct rnic *r, int rc)
{
    uiw_hdr h;

    check(rc == -2 && r->v.fpdu_mss > 0,
          "the module's FPDUs over the MSS: %u of them, the longest %u bytes (rc %d)",
          r->v.fpdu_mss, r->max_fpdu, rc);
    check(r->term_sent && r->sent_cause.layer == UIW_LAYER_LLP &&
              r->sent_cause.etype == UIW_LLP_ET_RNIC && r->sent_cause.ecode == UIW_MPA_EC_CRC,
          "our Terminate 0x23 / 0x02 for them");
    rc = rnic_serve(r, -2, 20000, &h);
    check(rc == -1, "the module closes after our Terminate (rc %d)", rc);
}

static bool expect_big;

static void run_server(struct rnic *r, uint16_t port, unsigned count, int wait_ms)
{
    int lfd = listen_on(r->p, port), rc;
    uiw_hdr h;
    uint8_t msg[sizeof(struct rping_info)];

    if (lfd < 0) {
        check(false, "listen on 127.0.0.1:%u", port);
        return;
    }
    printf("krnic_peer %s: listening on 127.0.0.1:%u\n", pname, port);
    rc = rnic_accept(r, lfd, wait_ms, nopd, 0);
    if (rc == RNIC_RST && r->p->mpa_rev == 1) {
        /* cxgb4-rev1 resets the module's revision 2 Request (notes §2.3);
         * the module's initiator tries once more at revision 1 */
        check(r->frames_rev[2] == 1, "the module's revision 2 Request reset");
        rc = rnic_accept(r, lfd, 20000, nopd, 0);
    }
    close(lfd);
    /* cxgb4's Reply names Read whatever it negotiated (notes §2.3) */
    check(rc == 0, "the module's Request accepted (rc %d): revision %u, CRC, RTR %s negotiated", rc,
          r->rev, rtr_name(r->rtr));
    if (rc)
        return;
    r->mss = r->p->mss;
    if (r->p->mpa_rev == 1)
        check(r->rev == 1 && !r->p2p && r->conns == 2,
              "revision 1 (the module's retry: %u connections), client-server", r->conns);
    else
        check(r->rev == 2 && r->p2p && r->conns == 1, "revision 2, peer-to-peer, one connection");
    for (unsigned i = 0; i < count; i++) {
        struct rping_info ci;
        uint32_t len = 0;

        for (int step = 0; step < 2; step++) {
            rc = rnic_serve(r, -1, 20000, &h);
            if (rc != 1 || !info_get(r, &ci)) {
                check(false, "round %u.%d: the module's Send (rc %d, %zu bytes)", i, step, rc,
                      r->raw.pay_len);
                return;
            }
            if (step == 0) {
                len = ci.size;
                if (len < 2 || len > SRV_SIZE_MAX) {
                    check(false, "round %u: size %u", i, len);
                    return;
                }
                memset(r->mem, 0, len);
                rc = rnic_read(r, ci.rkey, ci.buf, len, 0);
                rc = rc < 0 ? rc : rnic_serve(r, UIW_OP_READ_RESP, 20000, &h);
                if (expect_big) {
                    expect_fpdu_term(r, rc);
                    return;
                }
                bool same = rc == 1 && r->mem[len - 1] == 0;

                for (uint32_t j = 0; same && j < len - 1; j++)
                    same = r->mem[j] == (uint8_t)(0x21 + (j + i) % 94);
                check(same,
                      "round %u: our RDMA Read of the module's %u bytes (rc %d), each byte "
                      "the module's pattern",
                      i, len, rc);
                if (!same)
                    return;
            } else {
                if (ci.size != len) {
                    check(false, "round %u: rdma_buf size %u, want %u", i, ci.size, len);
                    return;
                }
                if (rnic_write(r, ci.rkey, ci.buf, r->mem, len) < 0) {
                    check(false, "round %u: our RDMA Write", i);
                    return;
                }
            }
            info_put(msg, RNIC_TO_BASE, RNIC_STAG, len);
            if (rnic_send(r, msg, sizeof(msg)) < 0) {
                check(false, "round %u.%d: our Send", i, step);
                return;
            }
        }
    }
    check(true, "%u rounds: the module's Sends, our RDMA Reads and Writes, our Sends", count);
    /* a Write to an STag the module never gave out: its Terminate */
    {
        static const uint8_t junk[64];
        uint32_t bad = RNIC_STAG ^ BAD_STAG_XOR;

        rc = rnic_write(r, bad, 0x1000, junk, sizeof(junk));
        rc = rc < 0 ? rc : rnic_serve(r, UIW_OP_TERMINATE, 20000, &h);
        check(rc == 1 && r->term_got, "the module's Terminate for our Write to STag 0x%08x (rc %d)",
              bad, rc);
        if (rc == 1) {
            const uiw_term *t = &r->term.u.term;

            check(t->cause.layer == UIW_LAYER_DDP && t->cause.etype == UIW_DDP_ET_TAGGED &&
                      t->cause.ecode == UIW_DDP_EC_T_INVALID_STAG,
                  "its cause DDP / tagged / invalid STag: %u/%u/%u", t->cause.layer, t->cause.etype,
                  t->cause.ecode);
            check(rnic_term_form_ok(&r->term) && r->v.term_form == 0,
                  "its form as irdma checks it (T 0, L 1, QN 2, MSN 1, MO 0, versions 1)");
            rc = rnic_serve(r, -2, 20000, &h);
            check(rc == -1, "the module closes after its Terminate (rc %d)", rc);
        }
    }
    rules(r, "initiator");
}

/* The module's rping server against our client. */
static void run_client(struct rnic *r, uint16_t port, unsigned count, uint32_t size)
{
    uint64_t end = eng_now_ms() + 30000;
    uint8_t msg[sizeof(struct rping_info)];
    uiw_hdr h;
    int rc;

    if (size < 16 || size > SRV_SIZE_MAX || size > 65536) {
        check(false, "size %u", size);
        return;
    }
    rc = rnic_connect_start(r, port, nopd, 0);
    while (rc >= 0 && eng_now_ms() < end) {
        rc = rnic_connect_step(r, port, nopd, 0, 1000);
        if (rc == RNIC_AGAIN || rc == RNIC_RETRIED) {
            rc = 0;
            continue;
        }
        break;
    }
    check(rc == 0 && r->up, "connected to the module (rc %d): revision %u, RTR %s sent", rc, r->rev,
          rtr_name(r->rtr));
    if (rc || !r->up)
        return;
    r->mss = r->p->mss;
    if (r->p->mpa_rev == 1) /* the Read RTR is sent in revision 1 too (notes §2.4) */
        check(r->rev == 1 && r->conns == 1,
              "revision 1 answered at revision 1, the Read RTR served");
    else
        check(r->rev == 2 && r->p2p && !r->tried_rev1, "revision 2, peer-to-peer, no retry");
    for (unsigned i = 0; i < count; i++) {
        int n = snprintf((char *)r->mem, size, "rdma-ping-%u: ", i);

        for (uint32_t j = (uint32_t)n; j < size - 1; j++)
            r->mem[j] = (uint8_t)(0x41 + (j - (uint32_t)n + i) % 62);
        r->mem[size - 1] = 0;
        memset(r->mem + CLI_RDMA_OFF, 0, size);
        for (int step = 0; step < 2; step++) {
            info_put(msg, RNIC_TO_BASE + (step ? CLI_RDMA_OFF : 0), RNIC_STAG, size);
            rc = rnic_send(r, msg, sizeof(msg));
            /* the module Reads (answered in rnic_serve) or Writes, then Sends */
            rc = rc < 0 ? rc : rnic_serve(r, -1, 20000, &h);
            if (rc != 1) {
                check(false, "round %u.%d: the module's Send (rc %d)", i, step, rc);
                return;
            }
        }
        check(!memcmp(r->mem, r->mem + CLI_RDMA_OFF, size),
              "round %u: the module Read our %u bytes and Wrote them back, byte for byte", i, size);
    }
    rc = rnic_send_term(r, RNIC_TERM_MPA(UIW_MPA_EC_CRC), NULL, 0);
    check(rc >= 0, "our Terminate 0x23 / 0x02 sent");
    rc = rnic_serve(r, -2, 20000, &h);
    check(rc == -1, "the module closes after our Terminate (rc %d)", rc);
    rules(r, "responder");
}

int main(int argc, char **argv)
{
    const struct rnic_pers *p = NULL;
    const char *mode = NULL;
    unsigned port = 0, count = 3, size = 60000;
    int opt, wait_ms = 250000;
    struct rnic *r;

    while ((opt = getopt(argc, argv, "P:m:p:n:s:w:e")) != -1) {
        switch (opt) {
        case 'P':
            p = !strcmp(optarg, "irdma")        ? &RNIC_P_IRDMA
                : !strcmp(optarg, "cxgb4")      ? &RNIC_P_CXGB4
                : !strcmp(optarg, "cxgb4-rev1") ? &RNIC_P_CXGB4_REV1
                                                : NULL;
            break;
        case 'm':
            mode = optarg;
            break;
        case 'p':
            port = (unsigned)atoi(optarg);
            break;
        case 'n':
            count = (unsigned)atoi(optarg);
            break;
        case 's':
            size = (unsigned)atoi(optarg);
            break;
        case 'e':
            expect_big = true;
            break;
        case 'w':
            wait_ms = atoi(optarg);
            break;
        default:
            return 2;
        }
    }
    if (!p || !mode || !port || port > 65535 ||
        (strcmp(mode, "server") && strcmp(mode, "client"))) {
        fprintf(stderr,
                "usage: krnic_peer -P irdma|cxgb4|cxgb4-rev1 -m server|client -p PORT [-n COUNT] "
                "[-s SIZE] [-w MS] [-e]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    pname = p->name;
    r = rnic_new(p, !strcmp(mode, "client"));
    if (r->initiator)
        run_client(r, (uint16_t)port, count, size);
    else
        run_server(r, (uint16_t)port, count, wait_ms);
    rnic_free(r);
    printf("krnic_peer %s: %s (%d checks, %d failed)\n", pname, fails ? "FAIL" : "PASS",
           passes + fails, fails);
    return fails ? 1 : 0;
}
