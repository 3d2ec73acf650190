/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * RNIC-like test peers on the wire core (test_rnic_peers.c, docs/PEERS.md
 * §11): a minimal iWARP RNIC model over plain TCP, with the MPA,
 * peer-to-peer and FPDU behaviour that ../shared/notes/rnic-mpa.md reads
 * from two Linux drivers, as a "personality":
 *
 *   irdma   Intel E810/X722 (irdma, i40iw): notes §1
 *   cxgb4   Chelsio T5/T6 (iw_cxgb4) with its module defaults: notes §2
 *   cxgb4 with mpa_rev=1 (notes §2.1)
 *
 * The model connects or accepts with MPA (frames encoded and decoded by
 * uiw_mpa_encode / uiw_mpa_decode; the negotiation rules are the
 * personality's own, not the wire core's uiw_mpa_neg, which is uiwarp's
 * policy), sends or answers the RTR, and then serves the data path with the
 * raw peer of tests/raw_peer.h: Sends, RDMA Writes into its one memory
 * region, RDMA Read Requests answered with Read Responses from it, its own
 * Sends, Writes and Read Requests, and Terminates both ways. Every FPDU it
 * receives goes through the personality's rules (rnic_on_fpdu); a broken
 * rule is counted in struct rnic_viol and, where the notes say the RNIC
 * does so, answered with a Terminate or a TCP reset.
 *
 * Where the notes mark a behaviour as firmware [fw] or say nothing, the
 * model says so in a comment and counts instead of inventing a reaction.
 * What the model cannot reproduce on a Linux socket:
 *   - TCP timestamps: both RNICs run without them (notes §1.1, §2.1), but
 *     Linux has no per-socket switch (only the net.ipv4.tcp_timestamps
 *     sysctl, per network namespace, needing privilege). The loopback MSS
 *     the model sets (TCP_MAXSEG 1460, what a 1500-byte MTU gives without
 *     timestamps) therefore becomes an effective 1448 on both sockets, and
 *     the FPDU rule is checked against the effective value.
 *   - Segment boundaries: irdma parses an MPA frame "from a single TCP
 *     segment" (notes §1.3); the model takes one recv() as the segment.
 *     FPDU alignment with segments (notes §1.7) is not checked here.
 */
#ifndef UIWARP_RNIC_PEER_H
#define UIWARP_RNIC_PEER_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "raw_peer.h"
#include "testutil.h"

enum rnic_kind { RNIC_IRDMA, RNIC_CXGB4 };

struct rnic_pers {
    const char *name;
    enum rnic_kind kind;
    /* Revision of our Request and the highest accepted. irdma: 2, not a
     * parameter (IRDMA_CM_DEFAULT_MPA_VER, notes §1.2). cxgb4: module
     * parameter mpa_rev, default 2 (notes §2.1). */
    uint8_t mpa_rev;
    /* IRD/ORD. irdma: initiator the ULP's (here 8/8), responder the
     * hardware maximum, mainline E810 127/255 (notes §1.2). cxgb4: the
     * ULP's, capped by c4iw_max_read_depth 32 (notes §2.1, §2.2). */
    uint16_t ird, ord;
    uint16_t resp_ird, resp_ord; /* as responder */
    uint16_t max_ird;            /* cxgb4's cap (32); irdma: the hardware's 127 */
    /* Largest PD_Length accepted, RFC 6581 words included: irdma 512
     * (notes §1.3), cxgb4 256 (MPA_MAX_PRIVATE_DATA, notes §2.3). */
    unsigned max_pd;
    unsigned mss; /* TCP_MAXSEG set on our sockets */
};

#define RNIC_MSS 1460 /* a 1500-byte MTU without timestamps (notes §1.1, §2.1) */

static const struct rnic_pers RNIC_P_IRDMA = {"irdma", RNIC_IRDMA, 2,   8,   8,
                                              127,     255,        127, 512, RNIC_MSS};
static const struct rnic_pers RNIC_P_CXGB4 = {"cxgb4", RNIC_CXGB4, 2,  8,   8,
                                              8,       8,          32, 256, RNIC_MSS};
static const struct rnic_pers RNIC_P_CXGB4_REV1 = {"cxgb4-rev1", RNIC_CXGB4, 1,       8, 8, 8, 8,
                                                   32,           256,        RNIC_MSS};

/* The RTR forms (notes §1.5, §2.5). */
#define IRDMA_RTR_SINK_STAG 0xabcdu
#define IRDMA_RTR_SRC_STAG  0x1234u
#define CXGB4_RTR_STAG      1u
#define CXGB4_RTR_TO        1u

/* Rules broken by what the model received. */
struct rnic_viol {
    unsigned fpdu_mss;   /* FPDU longer than the MSS (irdma: fatal, notes §1.7) */
    unsigned stag0;      /* tagged segment with STag 0 (cxgb4: fatal, notes §2.5) */
    unsigned rreq0_src0; /* zero-length Read Request with source STag 0 (cxgb4, notes §2.5) */
    unsigned rtr;        /* first FPDU not the negotiated RTR */
    unsigned trailing;   /* bytes after an MPA frame before our answer/RTR (cxgb4) */
    unsigned term_form;  /* a Terminate irdma would not accept (notes §1.6) */
    unsigned seq;        /* untagged MSN/MO out of sequence (RFC 5041 §5.1.2) */
};

#define RNIC_MEM_LEN  (256u * 1024)
#define RNIC_STAG     0x00c0de01u
#define RNIC_TO_BASE  0x00007f0000001000ull
#define RNIC_RST      5 /* rnic_accept / rnic_connect: we reset the connection */
#define RNIC_AGAIN    2 /* rnic_connect_step: nothing decided yet */
#define RNIC_REJECTED 3 /* the other side rejected */

struct rnic {
    const struct rnic_pers *p;
    bool initiator;
    int fd; /* during the MPA exchange; then raw.fd */
    struct dp_raw raw;
    bool up; /* MPA done, FPDU mode */
    /* negotiated */
    uint8_t rev;
    bool crc, enhanced, p2p;
    uint8_t rtr; /* enum uiw_rtr bit, or UIW_RTR_NONE */
    uint16_t ird, ord;
    bool tried_rev1; /* initiator: the retry at revision 1 was made */
    uint8_t req_rev; /* initiator: revision of the current Request */
    /* what the other side sent */
    uiw_mpa_frame peer;
    uint8_t frame[UIW_MPA_MAX_FRAME + 64];
    size_t frame_have;
    /* counts */
    unsigned conns;  /* TCP connections made or accepted */
    unsigned resets; /* connections we reset during MPA */
    unsigned frames_rev[3];
    unsigned mss;   /* FPDU limit: min(personality MSS, TCP_MAXSEG of the socket) */
    unsigned fpdus; /* FPDUs received */
    unsigned max_fpdu;
    bool rtr_seen;
    struct rnic_viol v;
    /* the data path */
    uint8_t *mem;
    uint32_t msn[UIW_QN_COUNT];                /* next MSN we send per queue */
    uiw_useq rxq[UIW_QN_COUNT];                /* what we receive */
    bool fatal;                                /* a rule that ends the stream was broken */
    uiw_term_cause fatal_cause;                /* what to terminate with */
    uint8_t fatal_img[UIW_TERM_HDR_IMAGE_MAX]; /* the offending headers */
    unsigned fatal_img_len;
    bool term_sent, term_got;
    uiw_term_cause sent_cause;
    uiw_hdr term; /* the Terminate received */
};

/* ------------------------------------------------------------------------
 * Sockets
 * ---------------------------------------------------------------------- */

static inline void rnic_sockopts(const struct rnic_pers *p, int fd)
{
    int mss = (int)p->mss, one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
    if (p->kind == RNIC_CXGB4) /* hardware keepalive on (KEEP_ALIVE_F, notes §2.1) */
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    /* irdma's offloaded TCP uses Nagle (no_nagle = false, notes §1.1), and
     * cxgb4 delayed ACKs (dack_mode 1); Linux's default (Nagle on) is kept
     * for both. */
}

/* A listener on 127.0.0.1 (port in *port) whose connections get the
 * personality's MSS. */
static inline int rnic_listen(const struct rnic_pers *p, uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct sockaddr_in a = eng_loop4(0);
    socklen_t al = sizeof(a);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    rnic_sockopts(p, fd); /* inherited by accepted sockets; sets the SYN-ACK's MSS */
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) < 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static inline struct rnic *rnic_new(const struct rnic_pers *p, bool initiator)
{
    struct rnic *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    r->p = p;
    r->initiator = initiator;
    r->fd = -1;
    r->raw.fd = -1;
    r->mem = calloc(1, RNIC_MEM_LEN);
    if (!r->mem)
        abort();
    return r;
}

static inline void rnic_close(struct rnic *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    dp_raw_fini(&r->raw);
    r->up = false;
}

static inline void rnic_free(struct rnic *r)
{
    rnic_close(r);
    free(r->mem);
    free(r);
}

/* Reset the connection being set up (SO_LINGER 0): what both drivers do on
 * an MPA error (irdma_*_open_err(…, true) notes §1.3; cxgb4 abort, §2.3). */
static inline void rnic_reset(struct rnic *r, const char *why)
{
    if (r->resets < 2) /* not every one of a client's many tries */
        printf("  %s %s: reset (%s)\n", r->p->name, r->initiator ? "initiator" : "responder", why);
    if (r->fd >= 0)
        eng_rst_close(r->fd);
    r->fd = -1;
    r->resets++;
}

/* Bytes within ms into r->frame (appended); the count, 0 on timeout,
 * -1 on EOF, -ECONNRESET on a reset. */
static inline int rnic_read_some(struct rnic *r, int ms)
{
    struct pollfd pf = {.fd = r->fd, .events = POLLIN};
    if (poll(&pf, 1, ms) <= 0)
        return 0;
    ssize_t n = recv(r->fd, r->frame + r->frame_have, sizeof(r->frame) - r->frame_have, 0);
    if (n == 0)
        return -1;
    if (n < 0)
        return errno == ECONNRESET ? -ECONNRESET : -1;
    r->frame_have += (size_t)n;
    return (int)n;
}

/* Read the other side's MPA frame (RFC 5044 §7.1: 20 bytes, then
 * PD_Length ≤ 512 bytes of private data) as the personality does. 1: a frame in
 * r->peer; RNIC_RST: reset (rule broken); -ETIMEDOUT; -ECONNRESET (reset
 * by the other side); -1 EOF. */
static inline int rnic_read_frame(struct rnic *r, unsigned kind, int ms)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    r->frame_have = 0;
    for (;;) {
        int64_t left = (int64_t)(end - eng_now_ms());
        if (left <= 0)
            return -ETIMEDOUT;
        int n = rnic_read_some(r, (int)left);
        if (n < 0)
            return n;
        if (n == 0)
            continue;
        if (r->p->kind == RNIC_IRDMA) {
            /* irdma_parse_mpa: the frame comes from the one segment
             * received, no reassembly (notes §1.3): < 20 bytes, PD_Length
             * > 512, 20 + PD_Length beyond the segment, a segment over
             * 544 bytes (IRDMA_MAX_CM_BUF) are errors; bytes after the
             * frame are ignored. */
            if (r->frame_have < UIW_MPA_HDR_LEN) {
                rnic_reset(r, "frame shorter than 20 bytes in its segment");
                return RNIC_RST;
            }
            unsigned pd = (unsigned)r->frame[18] << 8 | r->frame[19];
            if (pd > r->p->max_pd || UIW_MPA_HDR_LEN + pd > r->frame_have || r->frame_have > 544) {
                rnic_reset(r, "MPA frame not within one segment / PD_Length");
                return RNIC_RST;
            }
            r->frame_have = UIW_MPA_HDR_LEN + pd;
        } else {
            /* cxgb4 accumulates the frame across segments (rx_data, notes
             * §2.3, §2.4); PD_Length over 256 aborts. */
            if (r->frame_have < UIW_MPA_HDR_LEN)
                continue;
            unsigned pd = (unsigned)r->frame[18] << 8 | r->frame[19];
            if (pd > r->p->max_pd) {
                rnic_reset(r, "PD_Length over MPA_MAX_PRIVATE_DATA (256)");
                return RNIC_RST;
            }
            if (r->frame_have < UIW_MPA_HDR_LEN + pd)
                continue;
            /* "any byte beyond the frame in what has been received so
             * far" aborts (notes §2.3, §2.4); the model also waits 20 ms
             * for bytes sent right behind the frame. */
            if (r->frame_have == UIW_MPA_HDR_LEN + pd)
                (void)rnic_read_some(r, 20);
            if (r->frame_have > UIW_MPA_HDR_LEN + pd) {
                r->v.trailing++;
                rnic_reset(r, "bytes after the MPA frame");
                return RNIC_RST;
            }
        }
        uiw_mpa_frame f;
        int d = uiw_mpa_decode(r->frame, r->frame_have, kind, &f);
        if (d <= 0) {
            rnic_reset(r, "not an MPA frame of the expected kind");
            return RNIC_RST;
        }
        r->peer = f;
        r->frames_rev[f.rev < 3 ? f.rev : 0]++;
        return 1;
    }
}

/* The personality's FPDU limit on this socket. */
static inline void rnic_set_mss(struct rnic *r)
{
    int mss = 0;
    socklen_t l = sizeof(mss);
    r->mss = r->p->mss;
    if (getsockopt(r->fd, IPPROTO_TCP, TCP_MAXSEG, &mss, &l) == 0 && mss > 0 &&
        (unsigned)mss < r->mss)
        r->mss = (unsigned)mss;
}

static void rnic_on_fpdu(void *arg, const uiw_rx_event *ev);

/* MPA is done: the byte stream becomes FPDUs (RFC 5044 §7.1.2). CRC is
 * always on with both personalities: irdma always sets C and never turns
 * CRC reception off (notes §1.2), cxgb4 crc_enabled=1 (§2.1) and CRC is on
 * if either side sets C (RFC 5044 §7.1.1). Our FPDUs are sized to the MSS
 * (irdma: ≤ MTU − 40, notes §1.7; cxgb4: to the effective MSS, §2.7). */
static inline void rnic_fpdu_mode(struct rnic *r)
{
    rnic_set_mss(r);
    dp_raw_init(&r->raw, r->fd, true, false, r->mss & ~7u);
    r->fd = -1;
    r->raw.on_fpdu = rnic_on_fpdu;
    r->raw.on_fpdu_arg = r;
    for (unsigned q = 0; q < UIW_QN_COUNT; q++) {
        r->msn[q] = 1;
        uiw_useq_init(&r->rxq[q]);
    }
    r->up = true;
    r->rtr_seen = false;
}

static inline int rnic_send_frame(struct rnic *r, const uiw_mpa_frame *f)
{
    uint8_t out[UIW_MPA_MAX_FRAME];
    int n = uiw_mpa_encode(f, out, sizeof(out));
    if (n < 0)
        return n;
    /* one write: irdma sends a frame in one segment (notes §1.2) */
    return eng_send_all(r->fd, out, (size_t)n);
}

/* ------------------------------------------------------------------------
 * Responder
 * ---------------------------------------------------------------------- */

/* The Reply the personality sends to r->peer's Request, or RNIC_RST. */
static inline int rnic_answer_request(struct rnic *r, const uint8_t *pd, uint16_t pd_len)
{
    const uiw_mpa_frame *q = &r->peer;
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = UIW_MPA_REPLY;
    f.crc = true; /* irdma: C always (§1.2); cxgb4: crc_enabled (§2.3) */
    if (q->markers) {
        /* irdma would send markers if asked (§1.3), cxgb4 too (§2.3);
         * uiwarp never asks by default: not modelled */
        rnic_reset(r, "markers requested (not modelled)");
        return RNIC_RST;
    }
    if (q->rev > r->p->mpa_rev || q->rev < 1) {
        /* irdma: a revision above its own, or not 1/2 (§1.3); cxgb4:
         * above mpa_rev (§2.3) */
        rnic_reset(r, q->rev > r->p->mpa_rev ? "revision above ours" : "revision");
        return RNIC_RST;
    }
    f.rev = q->rev; /* both adopt the initiator's revision (§1.3, §2.3) */
    r->rev = q->rev;
    r->rtr = UIW_RTR_NONE;
    r->p2p = false;
    r->ird = r->p->resp_ird;
    r->ord = r->p->resp_ord;
    if (q->rev == 2 && r->p->kind == RNIC_IRDMA) {
        /* irdma takes revision 2 to mean the IRD/ORD words are there and
         * never checks S (§1.3); A=0 → -EOPNOTSUPP → reset (§1.3, §1.4) */
        if (q->pd_len < UIW_MPA_RFC6581_LEN) {
            rnic_reset(r, "revision 2 without the IRD/ORD words");
            return RNIC_RST;
        }
        uint16_t ird_w = (uint16_t)(r->frame[20] << 8 | r->frame[21]);
        uint16_t ord_w = (uint16_t)(r->frame[22] << 8 | r->frame[23]);
        uint16_t p_ird = ird_w & UIW_MPA_IRD_ORD_MASK, p_ord = ord_w & UIW_MPA_IRD_ORD_MASK;
        if (!(ird_w & UIW_MPA_IRD_A_P2P)) {
            rnic_reset(r, "revision 2 frame without the peer-to-peer bit (A)");
            return RNIC_RST;
        }
        /* Read wins whenever D is there, else Write; neither is an error
         * (irdma_negotiate_mpa_v2_ird_ord, §1.4) */
        if (ord_w & UIW_MPA_ORD_D_READ0)
            r->rtr = UIW_RTR_READ;
        else if (ord_w & UIW_MPA_ORD_C_WRITE0)
            r->rtr = UIW_RTR_WRITE;
        else {
            rnic_reset(r, "no RTR type offered");
            return RNIC_RST;
        }
        if (p_ird == UIW_MPA_IRD_ORD_AUTO || p_ord == UIW_MPA_IRD_ORD_AUTO) {
            r->ird = r->ord = UIW_MPA_IRD_ORD_AUTO;
        } else {
            if (p_ord == 0 && r->rtr == UIW_RTR_READ && r->ird == 0)
                r->ird = 1;
            r->ord = r->ord < p_ird ? r->ord : p_ird;
        }
        r->p2p = true;
        r->enhanced = true;
        f.enhanced = true;
        f.p2p = true; /* A in every revision 2 frame (§1.2) */
        f.rtr = r->rtr;
        f.ird = r->ird; /* the hardware maximum (§1.2) */
        f.ord = r->ord;
    } else if (q->rev == 2 && q->enhanced) {
        /* cxgb4 (§2.3): the peer's IRD/ORD capped at cur_max_read_depth;
         * relaxed IRD negotiation in c4iw_accept_cr */
        uint16_t p_ird = q->ird > r->p->max_ird ? r->p->max_ird : q->ird;
        uint16_t p_ord = q->ord > r->p->max_ird ? r->p->max_ird : q->ord;
        if (r->ord > p_ird)
            r->ord = p_ird;
        if (r->ird < p_ord)
            r->ird = p_ord;
        uint8_t negotiated = UIW_RTR_NONE;
        if (q->p2p) {
            /* Write preferred when both are offered, else Read (§2.3) */
            negotiated = (q->rtr & UIW_RTR_WRITE)  ? UIW_RTR_WRITE
                         : (q->rtr & UIW_RTR_READ) ? UIW_RTR_READ
                                                   : UIW_RTR_NONE;
        }
        r->enhanced = true;
        f.enhanced = true;
        if (negotiated) {
            /* IRD forced to 1 with the module type Read (§2.3) */
            if (r->ird < 1)
                r->ird = 1;
            r->p2p = true;
            /* the Reply names the module's p2p_type (Read), not the type
             * just negotiated (send_mpa_reply, §2.3); which RTR the
             * firmware then expects is [fw] (§5): the model takes either */
            r->rtr = negotiated;
            f.p2p = true;
            f.rtr = UIW_RTR_READ;
        }
        f.ird = r->ird;
        f.ord = r->ord;
    }
    /* revision 1: no words; cxgb4 with peer2peer takes the module type
     * (§2.3), irdma has no negotiation. Which first FPDU the RNIC then
     * waits for is not in the notes: the model takes any. */
    if (pd_len)
        memcpy(f.ulp_pd, pd, pd_len);
    f.ulp_pd_len = pd_len;
    r->crc = true;
    if (rnic_send_frame(r, &f) < 0)
        return -1;
    return 0;
}

/* Accept one connection on lfd within ms and run the responder's side: the
 * Request, our Reply (private data pd), then the first FPDU (the RTR when
 * P2P; answered when it is a Read). 0: connected (FPDU mode); RNIC_RST:
 * reset by a rule; -ETIMEDOUT: no connection; other negative: failure. */
static inline int rnic_accept(struct rnic *r, int lfd, int ms, const uint8_t *pd, uint16_t pd_len);

/* ------------------------------------------------------------------------
 * Initiator
 * ---------------------------------------------------------------------- */

/* TCP connect to 127.0.0.1:port and send the Request at r->req_rev. */
static inline int rnic_connect_start(struct rnic *r, uint16_t port, const uint8_t *pd,
                                     uint16_t pd_len)
{
    struct sockaddr_in a = eng_loop4(port);
    if (!r->req_rev)
        r->req_rev = r->p->mpa_rev;
    r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (r->fd < 0)
        return -1;
    rnic_sockopts(r->p, r->fd); /* before connect: the SYN carries the MSS */
    if (connect(r->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        close(r->fd);
        r->fd = -1;
        return -1;
    }
    r->conns++;
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = UIW_MPA_REQUEST;
    f.rev = r->req_rev;
    f.crc = true; /* irdma §1.2, cxgb4 §2.2 */
    if (r->req_rev == 2) {
        f.enhanced = true;
        f.p2p = true;
        f.ird = r->p->ird;
        f.ord = r->p->ord ? r->p->ord : 1; /* ORD 0 raised to 1 (§1.2, §2.2) */
        /* irdma offers Write and Read (§1.2); cxgb4 only its p2p_type,
         * Read by default (§2.2) */
        f.rtr = r->p->kind == RNIC_IRDMA ? (UIW_RTR_WRITE | UIW_RTR_READ) : UIW_RTR_READ;
    }
    if (pd_len)
        memcpy(f.ulp_pd, pd, pd_len);
    f.ulp_pd_len = pd_len;
    return rnic_send_frame(r, &f);
}

static inline int rnic_send_rtr(struct rnic *r);
static inline int rnic_send_term(struct rnic *r, uiw_term_cause c, const uint8_t *img,
                                 unsigned img_len);
static inline int rnic_serve(struct rnic *r, int want, int ms, uiw_hdr *h);

#define RNIC_TERM_MPA(code) ((uiw_term_cause){UIW_LAYER_LLP, UIW_LLP_ET_RNIC, (code)})

/* Look for the Reply for up to ms. 0: connected (RTR sent, and for a Read
 * RTR its Read Response received); RNIC_AGAIN: nothing yet; RNIC_RST: we
 * reset; RNIC_REJECTED; 4: reset by the other side and a new connection
 * with a revision 1 Request started (both RNICs, notes §1.3, §2.7);
 * -ECONNRESET: reset, no retry; -EPROTO: Terminate sent (cxgb4 RTR
 * mismatch / insufficient IRD); -1 other failure. */
#define RNIC_RETRIED 4
static inline int rnic_connect_step(struct rnic *r, uint16_t port, const uint8_t *pd,
                                    uint16_t pd_len, int ms)
{
    int n = rnic_read_frame(r, UIW_MPA_REPLY, ms);
    if (n == -ETIMEDOUT)
        return RNIC_AGAIN;
    if (n == RNIC_RST)
        return RNIC_RST;
    if (n == -ECONNRESET) {
        /* irdma_handle_rst_pkt: an RST in MPAREQ_SENT with revision 2
         * falls back to revision 1 (§1.3); cxgb4 peer_abort →
         * retry_with_mpa_v1 unless already tried or mpa_rev is 1 (§2.7) */
        close(r->fd);
        r->fd = -1;
        if (r->req_rev == 2 && !r->tried_rev1) {
            r->tried_rev1 = true;
            r->req_rev = 1;
            if (rnic_connect_start(r, port, pd, pd_len) < 0)
                return -1;
            return RNIC_RETRIED;
        }
        return -ECONNRESET;
    }
    if (n < 0) /* FIN: irdma_handle_fin_pkt aborts (§1.3); cxgb4: no retry (§2.7) */
        return -1;
    const uiw_mpa_frame *q = &r->peer;
    if (q->rev > r->req_rev || q->rev < 1) {
        rnic_reset(r, "Reply revision above ours");
        return RNIC_RST;
    }
    r->rev = q->rev;
    r->crc = true;
    r->ird = r->p->ird;
    r->ord = r->p->ord ? r->p->ord : 1;
    r->rtr = UIW_RTR_NONE;
    bool term_rtr = false, term_ird = false;
    if (r->p->kind == RNIC_IRDMA) {
        if (q->rev == 2) {
            if (q->pd_len < UIW_MPA_RFC6581_LEN) {
                rnic_reset(r, "revision 2 Reply without IRD/ORD words");
                return RNIC_RST;
            }
            uint16_t ird_w = (uint16_t)(r->frame[20] << 8 | r->frame[21]);
            uint16_t ord_w = (uint16_t)(r->frame[22] << 8 | r->frame[23]);
            uint16_t p_ird = ird_w & UIW_MPA_IRD_ORD_MASK, p_ord = ord_w & UIW_MPA_IRD_ORD_MASK;
            if (!(ird_w & UIW_MPA_IRD_A_P2P)) { /* §1.3: A=0 → RST, Reject included */
                rnic_reset(r, "revision 2 Reply without the peer-to-peer bit (A)");
                return RNIC_RST;
            }
            r->rtr = (ord_w & UIW_MPA_ORD_D_READ0)    ? UIW_RTR_READ
                     : (ord_w & UIW_MPA_ORD_C_WRITE0) ? UIW_RTR_WRITE
                                                      : UIW_RTR_NONE;
            if (r->rtr == UIW_RTR_NONE) {
                rnic_reset(r, "Reply names no RTR type");
                return RNIC_RST;
            }
            if (p_ird != UIW_MPA_IRD_ORD_AUTO && p_ord != UIW_MPA_IRD_ORD_AUTO) {
                if (p_ird == 0 && r->rtr == UIW_RTR_READ) {
                    rnic_reset(r, "Reply with IRD 0 and the Read RTR");
                    return RNIC_RST;
                }
                r->ord = r->ord < p_ird ? r->ord : p_ird;
                if (r->ird < p_ord) { /* §1.4: no Terminate, a reset */
                    rnic_reset(r, "own IRD below the responder's ORD");
                    return RNIC_RST;
                }
            }
            r->p2p = true;
            r->enhanced = true;
        } else {
            /* revision 1: the RTR WQE is posted anyway, Read by default
             * (SEND_RDMA_READ_ZERO, §1.5) */
            r->rtr = UIW_RTR_READ;
        }
        if (q->reject) /* R is evaluated after the words (§1.3) */
            return RNIC_REJECTED;
    } else {
        if (q->reject) /* R → -ECONNREFUSED (§2.4) */
            return RNIC_REJECTED;
        if (q->rev == 2) {
            uint8_t t = UIW_RTR_NONE;
            if (q->enhanced) {
                /* relaxed IRD/ORD (§2.4): our IRD becomes the responder's
                 * ORD if within the adapter's limit, else insufficient IRD */
                if (q->ord > r->p->max_ird)
                    term_ird = true;
                else if (q->ord > r->ird)
                    r->ird = q->ord;
                if (q->ird < r->ord)
                    r->ord = q->ird;
                if (q->p2p) /* the Write bit is checked first, then Read */
                    t = (q->rtr & UIW_RTR_WRITE)  ? UIW_RTR_WRITE
                        : (q->rtr & UIW_RTR_READ) ? UIW_RTR_READ
                                                  : UIW_RTR_NONE;
                r->enhanced = true;
            }
            /* rtr_mismatch: any type but the module's p2p_type (Read),
             * no A and no S included (§2.4) */
            if (t != UIW_RTR_READ)
                term_rtr = true;
            r->rtr = t;
            r->p2p = t != UIW_RTR_NONE;
        } else {
            r->rtr = UIW_RTR_READ; /* revision 1 with peer2peer: the module type, sent anyway */
        }
    }
    rnic_fpdu_mode(r);
    if (term_rtr || term_ird) {
        /* "RTR mismatch, sending TERM" (§2.4): RTS without an RTR, then a
         * Terminate LAYER_MPA|DDP_LLP (0x23) with MPA_NOMATCH_RTR 7 or
         * MPA_INSUFF_IRD 6, then disconnect */
        rnic_send_term(
            r, RNIC_TERM_MPA(term_rtr ? UIW_MPA_EC_NO_MATCHING_RTR : UIW_MPA_EC_INSUFFICIENT_IRD),
            NULL, 0);
        return -EPROTO;
    }
    if (rnic_send_rtr(r) < 0)
        return -1;
    if (r->rtr == UIW_RTR_READ) {
        uiw_hdr h;
        int rc = rnic_serve(r, UIW_OP_READ_RESP, 5000, &h);
        if (rc != 1)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * The data path
 * ---------------------------------------------------------------------- */

static inline int rnic_send_hdr(struct rnic *r, const uiw_hdr *h, const void *pay, size_t len)
{
    if (!r->up)
        return -1;
    return dp_raw_send(&r->raw, h, pay, len);
}

/* The RTR of the initiator (notes §1.5, §2.5). */
static inline int rnic_send_rtr(struct rnic *r)
{
    uiw_hdr h;
    if (r->rtr == UIW_RTR_WRITE) {
        uiw_hdr_init(&h, true, UIW_OP_WRITE);
        if (r->p->kind == RNIC_CXGB4) { /* sink STag 1, TO 1 */
            h.stag = CXGB4_RTR_STAG;
            h.to = CXGB4_RTR_TO;
        } /* irdma: STag 0, TO 0 */
        return rnic_send_hdr(r, &h, NULL, 0);
    }
    if (r->rtr == UIW_RTR_READ) {
        uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, r->msn[UIW_QN_READ_REQ]++);
        if (r->p->kind == RNIC_CXGB4) { /* sink 1/1, source 1/1 */
            h.u.rreq.sink_stag = CXGB4_RTR_STAG;
            h.u.rreq.sink_to = CXGB4_RTR_TO;
            h.u.rreq.src_stag = CXGB4_RTR_STAG;
            h.u.rreq.src_to = CXGB4_RTR_TO;
        } else { /* sink 0xabcd / TO 0, source 0x1234 / TO 0 */
            h.u.rreq.sink_stag = IRDMA_RTR_SINK_STAG;
            h.u.rreq.src_stag = IRDMA_RTR_SRC_STAG;
        }
        return rnic_send_hdr(r, &h, NULL, 0);
    }
    return 0;
}

/* A Terminate as the personality writes it (RFC 5040 §4.8 layout: irdma
 * §1.6, cxgb4 §2.6). irdma attaches the offending headers when it has
 * them, as RFC 5040 §4.8 Figure 10 says (nothing for LLP errors); cxgb4
 * sends the 4-byte control word only (hdrct 0). Then FIN. */
static inline int rnic_send_term(struct rnic *r, uiw_term_cause c, const uint8_t *img,
                                 unsigned img_len)
{
    uiw_hdr h;
    uiw_hdr_init_untagged(&h, UIW_OP_TERMINATE, UIW_QN_TERMINATE, r->msn[UIW_QN_TERMINATE]++);
    if (r->p->kind == RNIC_IRDMA)
        uiw_term_attach(&h.u.term, c, img, img_len);
    else
        h.u.term.cause = c;
    r->term_sent = true;
    r->sent_cause = c;
    int rc = rnic_send_hdr(r, &h, NULL, 0);
    if (r->raw.fd >= 0)
        shutdown(r->raw.fd, SHUT_WR);
    return rc;
}

/* Per FPDU (dp_raw's on_fpdu): the personality's receive rules. */
static void rnic_on_fpdu(void *arg, const uiw_rx_event *ev)
{
    struct rnic *r = arg;
    if (ev->kind == UIW_RX_HDR) {
        if (ev->hdr->tagged && ev->hdr->stag == 0 && r->p->kind == RNIC_CXGB4) {
            /* "the HW will fail an ingress tagged DDP message with an stag
             * of 0 regardless of the payload length" (notes §2.5,
             * zrlio/softiwarp#21). The Terminate's code is not in the
             * notes; the model sends RFC 5041 §7.2's DDP / tagged buffer /
             * invalid STag. */
            r->v.stag0++;
            if (!r->fatal) {
                r->fatal = true;
                r->fatal_cause =
                    (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_TAGGED, UIW_DDP_EC_T_INVALID_STAG};
                r->fatal_img_len = uiw_term_hdr_image(ev->hdr, ev->ulpdu_len, false, r->fatal_img);
            }
        }
        if (!ev->hdr->tagged && ev->hdr->opcode == UIW_OP_READ_REQ &&
            ev->hdr->u.rreq.read_size == 0 && ev->hdr->u.rreq.src_stag == 0 &&
            r->p->kind == RNIC_CXGB4)
            r->v.rreq0_src0++; /* counted only: the firmware fix (§2.5) is [fw] */
        if (!ev->hdr->tagged && ev->hdr->qn < UIW_QN_COUNT) {
            uiw_term_cause c;
            if (!uiw_useq_check(&r->rxq[ev->hdr->qn], ev->hdr, &c))
                r->v.seq++;
            uiw_useq_accept(&r->rxq[ev->hdr->qn], ev->hdr, ev->payload_len);
        }
        return;
    }
    r->fpdus++;
    if (ev->fpdu_bytes > r->max_fpdu)
        r->max_fpdu = ev->fpdu_bytes;
    if (ev->fpdu_bytes > r->mss) {
        r->v.fpdu_mss++;
        if (r->p->kind == RNIC_IRDMA && !r->fatal) {
            /* irdma_ieq_get_fpdu_len: "bad fpdu len", handled as a CRC
             * error: mpa_crc_err, an AE, a Terminate (notes §1.7), MPA
             * causes as layer 2 / etype 3 (§1.6): 0x23 / 0x02. cxgb4's
             * reaction to an FPDU over its MSS is [fw] (§2.7, §5): counted
             * only. */
            r->fatal = true;
            r->fatal_cause = RNIC_TERM_MPA(UIW_MPA_EC_CRC);
            r->fatal_img_len = 0;
        }
    }
}

/* irdma's check of a received Terminate (irdma_terminate_received, notes
 * §1.6): T=0 L=1 DV=1 QN=2 MSN=1 MO=0 RV=1, else it answers with its own
 * Terminate. */
static inline bool rnic_term_form_ok(const uiw_hdr *h)
{
    return !h->tagged && h->last && h->ddp_version == 1 && h->qn == UIW_QN_TERMINATE &&
           h->msn == 1 && h->mo == 0 && h->rdmap_version == 1;
}

/* Check a tagged access to our region: the offset, or -1. */
static inline long rnic_mem_off(uint32_t stag, uint64_t to, uint64_t len)
{
    if (stag != RNIC_STAG || to < RNIC_TO_BASE || to - RNIC_TO_BASE > RNIC_MEM_LEN ||
        len > RNIC_MEM_LEN - (to - RNIC_TO_BASE))
        return -1;
    return (long)(to - RNIC_TO_BASE);
}

/* Receive and handle messages until one with opcode `want` (-1: any
 * Send, -2: any message) arrives: Writes and Read Responses are placed in our region (a
 * zero-length one, an RTR or the answer to ours, is not checked: RFC 5040
 * §5.1 allows it, and §5.2.1 forbids validating a zero-length Read), Read
 * Requests answered from it. 1: got it (*h, payload in
 * r->raw.pay); 0: timeout; -1: EOF; -2: the stream broke a rule and we sent
 * a Terminate; -3: a Terminate arrived (r->term) when another was wanted. */
static inline int rnic_serve(struct rnic *r, int want, int ms, uiw_hdr *h)
{
    uint64_t end = eng_now_ms() + (uint64_t)ms;
    for (;;) {
        int64_t left = (int64_t)(end - eng_now_ms());
        uiw_rx_event err;
        if (left <= 0)
            return 0;
        int rc = dp_raw_recv(&r->raw, h, (unsigned)left, &err);
        if (rc == -2) {
            /* a CRC or framing error: MPA causes as 0x23 (irdma §1.6,
             * cxgb4 §2.6); other layers as the parser found them */
            uiw_term_cause c = err.cause;
            if (c.layer == UIW_LAYER_LLP)
                c.etype = UIW_LLP_ET_RNIC;
            rnic_send_term(r, c, err.bad_hdr, err.bad_hdr_len);
            return -2;
        }
        if (rc != 1)
            return rc;
        if (r->fatal) {
            rnic_send_term(r, r->fatal_cause, r->fatal_img, r->fatal_img_len);
            return -2;
        }
        bool first = !r->rtr_seen;
        r->rtr_seen = true;
        if (first && !r->initiator && r->p2p) {
            /* the negotiated RTR comes first: the initiator sends no
             * FULPDU before it (RFC 6581 §5, §9.2) */
            bool w = h->tagged && h->opcode == UIW_OP_WRITE && r->raw.pay_len == 0;
            bool rd = !h->tagged && h->opcode == UIW_OP_READ_REQ && h->u.rreq.read_size == 0;
            /* cxgb4 replied Read but negotiated Write (§2.3): either is taken */
            bool ok = r->p->kind == RNIC_CXGB4 ? (w || rd) : r->rtr == UIW_RTR_WRITE ? w : rd;
            if (!ok)
                r->v.rtr++;
        }
        if (h->tagged) {
            size_t len = r->raw.pay_len;
            if (len) {
                long off = rnic_mem_off(h->stag, h->to, len);
                if (off < 0) {
                    uint8_t img[UIW_TERM_HDR_IMAGE_MAX];
                    unsigned n =
                        uiw_term_hdr_image(h, (unsigned)(UIW_HDR_TAGGED_LEN + len), false, img);
                    rnic_send_term(r,
                                   (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_TAGGED,
                                                    UIW_DDP_EC_T_INVALID_STAG},
                                   img, n);
                    return -2;
                }
                memcpy(r->mem + off, r->raw.pay, len);
            }
        } else if (h->opcode == UIW_OP_READ_REQ) {
            const uiw_rreq *q = &h->u.rreq;
            uiw_hdr o;
            long off = 0;
            /* RFC 5040 §5.2.1: a zero-length Read's source STag and TO
             * are not validated; it gets a zero-length Read Response */
            if (q->read_size) {
                off = rnic_mem_off(q->src_stag, q->src_to, q->read_size);
                if (off < 0) { /* RFC 5040 §7.4.1 Remote Protection */
                    uint8_t img[UIW_TERM_HDR_IMAGE_MAX];
                    unsigned n =
                        uiw_term_hdr_image(h, UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN, true, img);
                    rnic_send_term(r,
                                   (uiw_term_cause){UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_PROT,
                                                    UIW_RDMAP_EC_INVALID_STAG},
                                   img, n);
                    return -2;
                }
            }
            uiw_hdr_init(&o, true, UIW_OP_READ_RESP); /* RFC 5040 §4.5 */
            o.stag = q->sink_stag;
            o.to = q->sink_to;
            if (rnic_send_hdr(r, &o, r->mem + off, q->read_size) < 0)
                return -1;
        } else if (h->opcode == UIW_OP_TERMINATE) {
            r->term_got = true;
            r->term = *h;
            if (!rnic_term_form_ok(h))
                r->v.term_form++;
            if (want != UIW_OP_TERMINATE)
                return -3;
        }
        bool is_send =
            !h->tagged && (h->opcode == UIW_OP_SEND || h->opcode == UIW_OP_SEND_SE ||
                           h->opcode == UIW_OP_SEND_INV || h->opcode == UIW_OP_SEND_SE_INV);
        if (want == -2 || h->opcode == want || (want == -1 && is_send))
            return 1;
    }
}

static inline int rnic_send(struct rnic *r, const void *buf, size_t len)
{
    uiw_hdr h;
    uiw_hdr_init_untagged(&h, UIW_OP_SEND, UIW_QN_SEND, r->msn[UIW_QN_SEND]++);
    return rnic_send_hdr(r, &h, buf, len);
}

static inline int rnic_write(struct rnic *r, uint32_t stag, uint64_t to, const void *buf,
                             size_t len)
{
    uiw_hdr h;
    uiw_hdr_init(&h, true, UIW_OP_WRITE);
    h.stag = stag;
    h.to = to;
    return rnic_send_hdr(r, &h, buf, len);
}

/* Read len bytes of (stag, to) into our region at offset off. */
static inline int rnic_read(struct rnic *r, uint32_t stag, uint64_t to, uint32_t len, size_t off)
{
    uiw_hdr h;
    uiw_hdr_init_untagged(&h, UIW_OP_READ_REQ, UIW_QN_READ_REQ, r->msn[UIW_QN_READ_REQ]++);
    h.u.rreq.sink_stag = RNIC_STAG;
    h.u.rreq.sink_to = RNIC_TO_BASE + off;
    h.u.rreq.read_size = len;
    h.u.rreq.src_stag = stag;
    h.u.rreq.src_to = to;
    return rnic_send_hdr(r, &h, NULL, 0);
}

/* Receive the RTR as responder (RFC 6581 §9.2: a zero-length Write or
 * Read Request, the latter answered by rnic_serve). */
static inline int rnic_await_rtr(struct rnic *r, int ms)
{
    uiw_hdr h;
    int rc = rnic_serve(r, -2, ms, &h); /* its type is checked there */
    if (rc == 1 || (rc == 0 && r->rtr_seen))
        return 0;
    return rc < 0 ? rc : -ETIMEDOUT;
}

static inline int rnic_accept(struct rnic *r, int lfd, int ms, const uint8_t *pd, uint16_t pd_len)
{
    struct pollfd pf = {.fd = lfd, .events = POLLIN};
    if (poll(&pf, 1, ms) <= 0)
        return -ETIMEDOUT;
    r->fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (r->fd < 0)
        return -1;
    r->conns++;
    int n = rnic_read_frame(r, UIW_MPA_REQUEST, ms);
    if (n != 1) {
        if (n != RNIC_RST)
            rnic_close(r);
        return n;
    }
    n = rnic_answer_request(r, pd, pd_len);
    if (n)
        return n;
    rnic_fpdu_mode(r);
    /* With P2P the first FPDU is the RTR. Without (revision 1), nothing
     * is awaited here: we send nothing before the initiator's first FPDU
     * (RFC 5044 §7.1.2), which the test's first operation provides. */
    return r->p2p ? rnic_await_rtr(r, ms) : 0;
}

#endif
