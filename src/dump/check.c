/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The iWARP trace checker behind `uiwarp dump`.
 *
 * Per TCP connection: a direction whose stream starts with "MPA ID Req
 * Frame" is the MPA initiator (endpoint "a"), the reverse direction must
 * start with "MPA ID Rep Frame" (endpoint "b"). Both frames are decoded
 * with uiw_mpa_decode; the negotiated parameters follow from the two frames
 * as RFC 5044 §7.1.1 and RFC 6581 §9 define them (CRC if either C bit is
 * set; markers toward each side as that side's M bit asks; RFC 6581 only if
 * both frames carry S). Then every FPDU of both directions is decoded with
 * uiw_rx_feed and checked: CRC, framing and markers (by the parser), DDP
 * MSN/MO sequencing per queue, tagged-offset continuity, Read Responses
 * against outstanding Read Requests, RTR, ORD against the peer's IRD,
 * Terminate fields, versions and reserved bits.
 */
#include "check.h"

#include "capture.h"
#include "uiwarp/wire.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------------
 * Classes
 * ---------------------------------------------------------------------- */

enum vclass {
    V_MPA_FRAME = 0,
    V_MPA_REV,
    V_MPA_RESERVED,
    V_MPA_6581,
    V_MPA_ORDER,
    V_RTR,
    V_FRAMING,
    V_MARKER,
    V_CRC,
    V_PAD,
    V_VERSION,
    V_RESERVED,
    V_OPCODE,
    V_QN,
    V_MSN,
    V_MO,
    V_MESSAGE,
    V_TAGGED,
    V_READ,
    V_ORD,
    V_IMM,
    V_ATOMIC,
    V_TERM,
    V_AFTER_TERM,
    V_COUNT
};

static const struct {
    const char *name;
    const char *desc;
} vinfo[V_COUNT] = {
    [V_MPA_FRAME] = {"mpa-frame", "malformed or missing MPA Request/Reply (RFC 5044 §7.1)"},
    [V_MPA_REV] = {"mpa-rev", "MPA revision not 1 or 2 (RFC 5044 §7.1.1, RFC 6581 §6)"},
    [V_MPA_RESERVED] = {"mpa-reserved", "MPA Res bits, or R in a Request, not zero"},
    [V_MPA_6581] = {"mpa-rfc6581", "RFC 6581 S/Rev, A/B/C/D, IRD/ORD rules"},
    [V_MPA_ORDER] = {"mpa-order", "FPDU sent too early (RFC 5044 §7.1.2)"},
    [V_RTR] = {"rtr", "P2P ready-to-receive indication (RFC 6581 §9.2, §9.3)"},
    [V_FRAMING] = {"framing", "ULPDU_Length, FPDU cut by a FIN (RFC 5044 §4.1)"},
    [V_MARKER] = {"marker", "missing or wrong markers (RFC 5044 §4.3)"},
    [V_CRC] = {"crc", "MPA CRC mismatch (RFC 5044 §4.4)"},
    [V_PAD] = {"pad", "non-zero pad bytes (RFC 5044 §4.1)"},
    [V_VERSION] = {"version", "DDP or RDMAP version (RFC 5041 §4.1, RFC 5040 §4.1)"},
    [V_RESERVED] = {"reserved", "DDP/RDMAP reserved bits, Invalidate STag of other messages"},
    [V_OPCODE] = {"opcode", "undefined opcode or T flag not as the opcode requires"},
    [V_QN] = {"qn", "queue number not as the opcode requires (RFC 5040 §4.1)"},
    [V_MSN] = {"msn", "DDP MSN sequence per queue (RFC 5041 §4.3)"},
    [V_MO] = {"mo", "DDP message offset (RFC 5041 §4.3, §5.2)"},
    [V_MESSAGE] = {"message", "DDP message structure: L flag, header-only messages"},
    [V_TAGGED] = {"tagged", "STag/TO continuity in a tagged message (RFC 5041 §5.2)"},
    [V_READ] = {"read-resp", "Read Response vs. Read Request (RFC 5040 §5.2)"},
    [V_ORD] = {"ord", "more outstanding Read/Atomic Requests than the peer's IRD"},
    [V_IMM] = {"imm-data", "Immediate Data not exactly 8 bytes (RFC 7306 §6)"},
    [V_ATOMIC] = {"atomic", "Atomic Request/Response (RFC 7306 §5)"},
    [V_TERM] = {"terminate", "Terminate message fields (RFC 5040 §4.8, §5.4)"},
    [V_AFTER_TERM] = {"after-terminate", "FPDU sent after a Terminate (RFC 5040 §5.4)"},
};

int uiw_violation_count(void)
{
    return V_COUNT;
}
const char *uiw_violation_name(int v)
{
    return v >= 0 && v < V_COUNT ? vinfo[v].name : "?";
}
const char *uiw_violation_desc(int v)
{
    return v >= 0 && v < V_COUNT ? vinfo[v].desc : "?";
}

static const struct {
    const char *name;
    int cls;
    const char *desc;
} qinfo[UIW_QUIRK_COUNT] = {
    [UIW_QUIRK_SIW_PAD] =
        {"siw-pad", V_PAD,
         "non-zero pad bytes on short FPDUs (siw, docs/PEERS.md §6; RFC 5044 §4.1 "
         "says pad MUST be zero, the receiver ignores it)"},
    [UIW_QUIRK_SIW_TERM_LAYOUT] = {"siw-term-layout", V_TERM,
                                   "Terminate control word in siw's little-endian bitfield "
                                   "layout (docs/PEERS.md §5; RFC 5040 §4.8)"},
    [UIW_QUIRK_SIW_MPA_GSO] =
        {"siw-mpa-gso", V_MPA_RESERVED,
         "MPA Res bit 0x08 set (siw GSO_EXP, docs/PEERS.md §2; RFC 5044 §7.1.1 "
         "says Res MUST be zero)"},
    [UIW_QUIRK_SIW_REJECT_WORDS] = {"siw-reject-words", V_MPA_6581,
                                    "MPA Reject (R=1) whose IRD/ORD words are all zero, so A is "
                                    "not copied from the Request (siw's reject of a markers "
                                    "Request, docs/INTEROP.md; RFC 6581 §9.2)"},
    [UIW_QUIRK_RNIC_TERM_ETYPE3] = {"rnic-term-etype3", V_TERM,
                                    "MPA-layer Terminate with error type 3 (Intel irdma, "
                                    "Chelsio cxgb4: 0x23 for a CRC error; RFC 6581 §8 has "
                                    "type 0), decoded as the MPA error it names"},
    [UIW_QUIRK_SIW_EARLY_FPDU] = {"siw-early-fpdu", V_MPA_ORDER,
                                  "responder's first FPDU sent once the initiator's first FPDU "
                                  "had arrived but for its trailer (pad and CRC): a P2P siw "
                                  "responder reports ESTABLISHED on the RTR's header, and uiwarp's "
                                  "initiator holds that trailer back (docs/INTEROP.md §1, §5; "
                                  "RFC 5044 §7.1.2 rule 4)"},
};

int uiw_quirk_count(void)
{
    return UIW_QUIRK_COUNT;
}
const char *uiw_quirk_name(int q)
{
    return q >= 0 && q < UIW_QUIRK_COUNT ? qinfo[q].name : "?";
}
const char *uiw_quirk_desc(int q)
{
    return q >= 0 && q < UIW_QUIRK_COUNT ? qinfo[q].desc : "?";
}
int uiw_quirk_lookup(const char *name)
{
    for (int q = 0; q < UIW_QUIRK_COUNT; q++)
        if (strcmp(name, qinfo[q].name) == 0)
            return q;
    return -1;
}

/* Warnings: legal iWARP that hardware peers handle badly. Counted and
 * reported, not violations (the exit status does not change). */
enum wclass {
    W_FPDU_SPLIT = 0, /* an FPDU continues into the next segment although it fits in one */
    W_COUNT
};

static const struct {
    const char *name;
    const char *desc;
} winfo[W_COUNT] = {
    [W_FPDU_SPLIT] = {"fpdu-split",
                      "an FPDU does not end in the TCP segment it starts in although it is no "
                      "longer than the largest segment payload seen in its direction: legal, but "
                      "RNICs place only FPDUs aligned with segments at line rate (RFC 5044 §2 "
                      "\"FPDU Alignment\", Appendix A.1)"},
};

int uiw_warning_count(void)
{
    return W_COUNT;
}
const char *uiw_warning_name(int w)
{
    return w >= 0 && w < W_COUNT ? winfo[w].name : "?";
}
const char *uiw_warning_desc(int w)
{
    return w >= 0 && w < W_COUNT ? winfo[w].desc : "?";
}

/* Capture problems: reported, not violations. */
enum cclass {
    C_MIDSTREAM = 0, /* no SYN */
    C_GAP,           /* bytes missing from the capture */
    C_OVERFLOW,      /* reassembly buffer limit */
    C_CONFLICT,      /* retransmission with different bytes */
    C_INCOMPLETE,    /* capture ends inside an MPA frame or FPDU, or before the Reply */
    C_STOPPED,       /* decoding of a direction stopped */
    C_COUNT
};

static const char *cnames[C_COUNT] = {
    [C_MIDSTREAM] = "no-syn",      [C_GAP] = "gap",
    [C_OVERFLOW] = "buffer-limit", [C_CONFLICT] = "conflicting-retransmission",
    [C_INCOMPLETE] = "incomplete", [C_STOPPED] = "decoding-stopped",
};

typedef struct vstats {
    uint64_t v[V_COUNT];
    uint64_t q[UIW_QUIRK_COUNT];
    uint64_t c[C_COUNT];
    uint64_t w[W_COUNT];
} vstats;

typedef struct dstats {
    uint64_t fpdus, messages, payload, stream_bytes;
    uint64_t op_fpdus[16], op_msgs[16];
    uint64_t crc_good, crc_bad, crc_off, crc_off_nonzero;
    uint64_t pad_nonzero, markers;
    /* FPDU/TCP segment alignment (RFC 5044 §2 "FPDU Alignment", Appendix
     * A.1), read two ways. Per FPDU: FPDUs judged, those whose first byte is
     * the first payload byte of a segment, and FPDUs left out because the
     * segment carrying their first byte is a retransmission; seg_whole:
     * FPDUs that lie wholly in a segment that starts with an FPDU (A.1:
     * packed small FPDUs count). Per segment: seg_segs, the segments of the
     * FPDU stream judged (first transmissions whose first byte is past the
     * MPA frame); those that start with an FPDU are seg_aligned (one FPDU
     * each); seg_integral, those that also end where an FPDU ends, so hold
     * whole FPDUs only (§2's FPDU Alignment). */
    uint64_t seg_fpdus, seg_aligned, seg_retx, seg_whole;
    uint64_t seg_segs, seg_integral;
    /* After the sender's segments carried SACK blocks (uiw_seg_meta.sack:
     * they shrink the effective MSS, so TCP cuts its buffer off the FPDU
     * grid until the next buffer; RFC 5044 §5.1 names "Changes in EMSS due
     * to varying TCP options" as a reason alignment is lost, regained
     * "after a break in transmission"): emss_events, the segments judged
     * that carried them;
     * emss_segs, the segments judged from one up to the first that starts
     * with an FPDU again (emss_aligned of them start with one); emss_split,
     * FPDUs starting in those segments that do not lie whole in a segment
     * that starts with an FPDU; emss_run_max, the most such segments in a
     * row (counted where an FPDU begins inside them). */
    uint64_t emss_events, emss_segs, emss_aligned, emss_split, emss_run_max;
} dstats;

static void vstats_add(vstats *a, const vstats *b)
{
    for (int i = 0; i < V_COUNT; i++)
        a->v[i] += b->v[i];
    for (int i = 0; i < UIW_QUIRK_COUNT; i++)
        a->q[i] += b->q[i];
    for (int i = 0; i < C_COUNT; i++)
        a->c[i] += b->c[i];
    for (int i = 0; i < W_COUNT; i++)
        a->w[i] += b->w[i];
}

static void dstats_add(dstats *a, const dstats *b)
{
    a->fpdus += b->fpdus;
    a->messages += b->messages;
    a->payload += b->payload;
    a->stream_bytes += b->stream_bytes;
    for (int i = 0; i < 16; i++) {
        a->op_fpdus[i] += b->op_fpdus[i];
        a->op_msgs[i] += b->op_msgs[i];
    }
    a->crc_good += b->crc_good;
    a->crc_bad += b->crc_bad;
    a->crc_off += b->crc_off;
    a->crc_off_nonzero += b->crc_off_nonzero;
    a->pad_nonzero += b->pad_nonzero;
    a->markers += b->markers;
    a->seg_fpdus += b->seg_fpdus;
    a->seg_aligned += b->seg_aligned;
    a->seg_retx += b->seg_retx;
    a->seg_whole += b->seg_whole;
    a->seg_segs += b->seg_segs;
    a->seg_integral += b->seg_integral;
    a->emss_events += b->emss_events;
    a->emss_segs += b->emss_segs;
    a->emss_aligned += b->emss_aligned;
    a->emss_split += b->emss_split;
    if (b->emss_run_max > a->emss_run_max)
        a->emss_run_max = b->emss_run_max;
}

static uint64_t vsum(const vstats *s)
{
    uint64_t n = 0;
    for (int i = 0; i < V_COUNT; i++)
        n += s->v[i];
    return n;
}

/* ------------------------------------------------------------------------
 * State
 * ---------------------------------------------------------------------- */

enum phase {
    PH_START = 0, /* nothing seen */
    PH_MPA,       /* collecting the MPA frame */
    PH_PENDING,   /* frame done, waiting for the peer's frame */
    PH_FPDU,      /* decoding FPDUs */
    PH_STOPPED,   /* gave up (reason printed) */
    PH_NOT_MPA,   /* stream does not start with an MPA key */
    PH_REJECTED,  /* the Reply rejected: TCP left to the ULP */
};

enum role { ROLE_NONE = 0, ROLE_INIT, ROLE_RESP };

#define PREVIEW_MAX 64
#define FIFO_MAX    65536
#define MAX_ERR_RUN 3 /* consecutive bad FPDUs before a direction is given up */
#define MAX_RESYNCS 1000

typedef struct chunk {
    uint64_t off; /* TCP stream offset of the first byte */
    uiw_seg_meta m;
} chunk;

typedef struct req_ent {
    uint32_t stag; /* Read: sink STag; Atomic: Request Identifier */
    uint64_t to;
    uint32_t size;
    uint64_t frame;
} req_ent;

typedef struct fifo {
    req_ent *e;
    size_t head, n, cap;
} fifo;

typedef struct cur_fpdu {
    bool active;
    uiw_hdr hdr;
    uint16_t ulpdu_len, hdr_len;
    uint32_t payload_len, payload_seen;
    uint64_t tcp_off;
    uint64_t begin;   /* TCP offset of the FPDU's first byte (its leading marker, if any) */
    uiw_seg_meta seg; /* the segment that carried that byte */
    uint64_t frame, end_frame;
    double ts;
    bool has_ack; /* the segment carrying the first byte acknowledged ... */
    uint32_t ack; /* ... up to this sequence number of the other direction */
    uint8_t preview[PREVIEW_MAX];
    uint32_t npreview;
} cur_fpdu;

/* An untagged queue of one direction (RFC 5041 §4.3). */
typedef struct qstate {
    bool open; /* a message without L seen */
    uint32_t next_msn, msn, mo_next;
    uint8_t opcode;
} qstate;

/* A tagged message in progress (RFC 5041 §5.2). */
typedef struct tstate {
    bool open, matched;
    uint32_t stag;
    uint64_t to_next, bytes;
    req_ent rr; /* the Read Request a Read Response answers */
} tstate;

typedef struct iw_dir {
    int phase;
    int role;
    uint8_t mpa[UIW_MPA_MAX_FRAME];
    size_t mpa_have;
    uint64_t mpa_frame, mpa_end_frame;
    double mpa_ts, mpa_end_ts;
    uiw_mpa_frame f;
    bool f_ok;
    size_t f_len;
    uint8_t *pend;
    size_t pend_len, pend_cap;
    chunk *map;
    size_t map_head, map_n, map_cap;
    uiw_rx rx;
    uint64_t rx_base, skip_to;
    int resyncs, err_run;
    uint64_t cur_frame;
    double cur_ts;
    uint64_t cur_end; /* TCP offset after the bytes fed so far */
    cur_fpdu cur;
    qstate q[UIW_QN_COUNT];
    tstate t[2];         /* 0: RDMA Write, 1: RDMA Read Response */
    fifo reads, atomics; /* requests sent by this side, not yet answered */
    bool ird_known;
    uint16_t peer_ird;
    bool any_fpdu;
    uint64_t first_start_frame, first_end_frame;
    uint64_t first_end_off; /* TCP offset just after the first FPDU */
    uint32_t first_trailer; /* its pad and CRC bytes */
    bool first_has_ack;     /* first FPDU's segment carried an ACK */
    uint32_t first_ack;
    bool terminated;
    bool fin, gap;
    bool lost; /* decoding stopped or resynchronised: messages may be missing */
    dstats st;
    FILE *sfp;
    uint64_t lead_frame; /* the last segment seen to start with an FPDU (seg_align) */
    bool lead_valid;
    uint64_t seg_frame; /* the last segment counted in st.seg_segs (seg_count) */
    bool seg_counted;
    /* a segment carried SACK blocks and no segment without them has started
     * with an FPDU since (dstats.emss_*): from stream offset emss_from, the
     * first byte of the segment that showed them (a segment with SACK blocks
     * does not end the window by starting with an FPDU: its FPDU is cut
     * short; the FPDUs are judged when whole, so after later segments were
     * counted) */
    bool emss_win;
    uint64_t emss_from;
    uint64_t emss_run, emss_run_frame; /* dstats.emss_run_max: the current run, its last segment */
} iw_dir;

typedef struct iw_conn {
    uiw_tcp_conn *tcp;
    int init_ep; /* endpoint index of the initiator, -1 unknown */
    bool mpa;    /* an MPA frame was seen */
    bool announced;
    bool negotiated, rejected;
    bool crc, enhanced, p2p;
    bool markers[2]; /* markers in the stream sent by endpoint d */
    uint8_t rtr_common;
    bool order_checked;
    bool any_payload;
    vstats vs;
    iw_dir d[2];
    struct iw_conn *next;
} iw_conn;

typedef struct totals {
    uint64_t files, frames, tcp_conns, iw_conns, undecodable;
    uint64_t fragments, truncated, malformed;
    dstats st;
    vstats vs;
} totals;

struct uiw_dump {
    uiw_dump_opts o;
    FILE *out;
    uint32_t next_conn_id;
    iw_conn *conns, *conns_tail; /* of the current file */
    totals file, all;
    const char *path;
    bool mute; /* checks of an FPDU whose CRC failed: update state, report nothing */
};

/* ------------------------------------------------------------------------
 * Output helpers
 * ---------------------------------------------------------------------- */

static bool loud(const uiw_dump *d)
{
    return !d->o.quiet;
}

static const char *dlabel(const iw_conn *ic, int dir)
{
    if (ic->init_ep >= 0)
        return dir == ic->init_ep ? "a>b" : "b>a";
    return dir == 0 ? "a>b" : "b>a";
}

static void prefix(uiw_dump *d, const iw_conn *ic, int dir, uint64_t frame, double ts)
{
    fprintf(d->out, "%6" PRIu64 " %10.6f c%u %s ", frame, ts, ic->tcp->id, dlabel(ic, dir));
}

static void vline(uiw_dump *d, const char *mark, const char *cls, const char *fmt, va_list ap)
{
    fprintf(d->out, "                        %s %s: ", mark, cls);
    vfprintf(d->out, fmt, ap);
    fputc('\n', d->out);
}

__attribute__((format(printf, 4, 5))) static void violation(uiw_dump *d, iw_conn *ic, int cls,
                                                            const char *fmt, ...)
{
    if (d->mute)
        return;
    ic->vs.v[cls]++;
    if (!loud(d))
        return;
    va_list ap;
    va_start(ap, fmt);
    vline(d, "!", vinfo[cls].name, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 4, 5))) static void quirk(uiw_dump *d, iw_conn *ic, int q,
                                                        const char *fmt, ...)
{
    if (d->mute)
        return;
    bool strict = d->o.strict_mask & (1u << q);
    if (strict)
        ic->vs.v[qinfo[q].cls]++;
    else
        ic->vs.q[q]++;
    if (!loud(d))
        return;
    char cls[96];
    if (strict)
        snprintf(cls, sizeof(cls), "%s [%s not tolerated]", vinfo[qinfo[q].cls].name,
                 qinfo[q].name);
    else
        snprintf(cls, sizeof(cls), "tolerated %s", qinfo[q].name);
    va_list ap;
    va_start(ap, fmt);
    vline(d, strict ? "!" : "~", cls, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 4, 5))) static void warning(uiw_dump *d, iw_conn *ic, int cls,
                                                          const char *fmt, ...)
{
    ic->vs.w[cls]++;
    if (!loud(d))
        return;
    char name[64];
    snprintf(name, sizeof(name), "warning %s", winfo[cls].name);
    va_list ap;
    va_start(ap, fmt);
    vline(d, "*", name, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 4, 5))) static void cproblem(uiw_dump *d, iw_conn *ic, int cls,
                                                           const char *fmt, ...)
{
    ic->vs.c[cls]++;
    if (!loud(d))
        return;
    char name[64];
    snprintf(name, sizeof(name), "capture %s", cnames[cls]);
    va_list ap;
    va_start(ap, fmt);
    vline(d, "?", name, fmt, ap);
    va_end(ap);
}

__attribute__((format(printf, 3, 4))) static void note(uiw_dump *d, iw_conn *ic, const char *fmt,
                                                       ...)
{
    (void)ic;
    if (!loud(d))
        return;
    va_list ap;
    va_start(ap, fmt);
    vline(d, "-", "note", fmt, ap);
    va_end(ap);
}

static void hexdump(FILE *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%s%02x", i ? " " : "", p[i]);
}

static const char *ep_str(const iw_conn *ic, int ep, char *buf, size_t cap)
{
    return uiw_endpoint_str(&ic->tcp->addr[ep], ic->tcp->port[ep], buf, cap);
}

static void announce(uiw_dump *d, iw_conn *ic)
{
    if (ic->announced)
        return;
    ic->announced = true;
    if (!loud(d))
        return;
    char a[80], b[80];
    int ia = ic->init_ep >= 0 ? ic->init_ep : 0;
    fprintf(d->out, "-- c%u: a=%s (MPA initiator) b=%s (responder), TCP %s\n", ic->tcp->id,
            ep_str(ic, ia, a, sizeof(a)), ep_str(ic, !ia, b, sizeof(b)),
            ic->tcp->syn[0] || ic->tcp->syn[1] ? "from its SYN" : "without SYN (mid-stream)");
}

static const char *rtr_str(uint8_t rtr, char *buf, size_t cap)
{
    if (!rtr) {
        snprintf(buf, cap, "none");
        return buf;
    }
    snprintf(buf, cap, "%s%s%s%s%s", rtr & UIW_RTR_SEND ? "send" : "",
             (rtr & UIW_RTR_SEND) && (rtr & (UIW_RTR_WRITE | UIW_RTR_READ)) ? "," : "",
             rtr & UIW_RTR_WRITE ? "write" : "",
             (rtr & UIW_RTR_WRITE) && (rtr & UIW_RTR_READ) ? "," : "",
             rtr & UIW_RTR_READ ? "read" : "");
    return buf;
}

static bool name_undefined(const char *n)
{
    return strncmp(n, "unknown", 7) == 0;
}

/* ------------------------------------------------------------------------
 * Small containers
 * ---------------------------------------------------------------------- */

static bool fifo_push(fifo *f, const req_ent *e)
{
    if (f->n == f->cap) {
        if (f->cap >= FIFO_MAX)
            return false;
        size_t nc = f->cap ? f->cap * 2 : 16;
        req_ent *ne = malloc(nc * sizeof(*ne));
        if (!ne)
            return false;
        for (size_t i = 0; i < f->n; i++)
            ne[i] = f->e[(f->head + i) % f->cap];
        free(f->e);
        f->e = ne;
        f->cap = nc;
        f->head = 0;
    }
    f->e[(f->head + f->n) % f->cap] = *e;
    f->n++;
    return true;
}

static const req_ent *fifo_front(const fifo *f)
{
    return f->n ? &f->e[f->head] : NULL;
}

static void fifo_pop(fifo *f)
{
    if (!f->n)
        return;
    f->head = (f->head + 1) % f->cap;
    f->n--;
}

static void map_add(iw_dir *D, uint64_t off, const uiw_seg_meta *m)
{
    if (D->map_n && D->map[D->map_head + D->map_n - 1].m.frame == m->frame)
        return;
    if (D->map_head + D->map_n == D->map_cap) {
        if (D->map_head > D->map_cap / 2) {
            memmove(D->map, D->map + D->map_head, D->map_n * sizeof(chunk));
            D->map_head = 0;
        } else {
            size_t nc = D->map_cap ? D->map_cap * 2 : 64;
            chunk *nm = realloc(D->map, nc * sizeof(chunk));
            if (!nm)
                return;
            D->map = nm;
            D->map_cap = nc;
        }
    }
    D->map[D->map_head + D->map_n++] = (chunk){off, *m};
}

/* The segment that carried the byte at TCP offset off; drops older
 * entries. */
static uiw_seg_meta map_lookup(iw_dir *D, uint64_t off)
{
    uiw_seg_meta r = {.frame = D->cur_frame, .ts = D->cur_ts};
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < D->map_n; i++) {
        if (D->map[D->map_head + i].off <= off)
            best = i;
        else
            break;
    }
    if (best == SIZE_MAX)
        return r;
    r = D->map[D->map_head + best].m;
    D->map_head += best;
    D->map_n -= best;
    return r;
}

/* TCP offset of the first byte of the FPDU whose ULPDU_Length field is at
 * rx stream offset len_off: with markers, a marker right before the length
 * field sits between FPDUs and belongs to the FPDU after it (RFC 5044 §4.3:
 * FPDUPTR 0), so the FPDU starts with that marker. */
static uint64_t fpdu_begin(const iw_conn *ic, int dir, uint64_t len_off)
{
    const iw_dir *D = &ic->d[dir];
    uint64_t b = D->rx_base + len_off;
    if (ic->markers[dir] && len_off >= UIW_MARKER_LEN &&
        len_off % UIW_MARKER_INTERVAL == UIW_MARKER_LEN)
        b -= UIW_MARKER_LEN;
    return b;
}

/* Offset in the stream of the other direction that an ACK number stands
 * for; false when that stream has not started. */
static bool ack_offset(const iw_conn *ic, int dir, uint32_t ack, uint64_t *off)
{
    const uiw_reasm *r = &ic->tcp->half[!dir];
    if (!r->started)
        return false;
    *off = uiw_reasm_offset(r, ack);
    return true;
}

static void stream_write(iw_dir *D, const uint8_t *p, size_t n)
{
    if (D->sfp && n)
        fwrite(p, 1, n, D->sfp);
}

static void stream_close(iw_dir *D)
{
    if (D->sfp) {
        fclose(D->sfp);
        D->sfp = NULL;
    }
}

/* ------------------------------------------------------------------------
 * MPA frames and negotiation
 * ---------------------------------------------------------------------- */

static void print_mpa(uiw_dump *d, iw_conn *ic, int dir)
{
    iw_dir *D = &ic->d[dir];
    const uiw_mpa_frame *f = &D->f;
    uint8_t flags = D->mpa[16];
    prefix(d, ic, dir, D->mpa_frame, D->mpa_ts);
    fprintf(d->out, "MPA %-7s rev=%u M=%d C=%d R=%d S=%d res=0x%x flags=0x%02x pd_len=%u",
            f->kind == UIW_MPA_REQUEST ? "Request" : "Reply", f->rev, !!(flags & UIW_MPA_FLAG_M),
            !!(flags & UIW_MPA_FLAG_C), !!(flags & UIW_MPA_FLAG_R), !!(flags & UIW_MPA_FLAG_S),
            flags & UIW_MPA_FLAG_RES, flags, f->pd_len);
    if (f->enhanced) {
        const uint8_t *w = D->mpa + UIW_MPA_HDR_LEN;
        fprintf(d->out,
                " IRD=%u ORD=%u A(p2p)=%d B(send-rtr)=%d C(write-rtr)=%d D(read-rtr)=%d "
                "words=%02x%02x%02x%02x",
                f->ird, f->ord, f->p2p, !!(f->rtr & UIW_RTR_SEND), !!(f->rtr & UIW_RTR_WRITE),
                !!(f->rtr & UIW_RTR_READ), w[0], w[1], w[2], w[3]);
    }
    fprintf(d->out, " ulp_pd=");
    if (f->ulp_pd_len)
        for (unsigned i = 0; i < f->ulp_pd_len; i++)
            fprintf(d->out, "%02x", f->ulp_pd[i]);
    else
        fprintf(d->out, "(none)");
    fprintf(d->out, " (%zu bytes)\n", D->f_len);
}

/* Checks of one frame on its own. */
static void check_mpa_frame(uiw_dump *d, iw_conn *ic, int dir)
{
    iw_dir *D = &ic->d[dir];
    const uiw_mpa_frame *f = &D->f;
    uint8_t flags = D->mpa[16], rev = D->mpa[17];
    if (rev != 1 && rev != 2)
        violation(d, ic, V_MPA_REV,
                  "Rev %u (RFC 5044 §7.1.1 defines 1, RFC 6581 §6 adds 2 for the enhanced "
                  "setup)",
                  rev);
    if ((flags & UIW_MPA_FLAG_S) && rev < 2)
        violation(d, ic, V_MPA_6581,
                  "S/0x10 set with Rev %u: enhanced setup needs Rev 2 (RFC 6581 §6); in Rev 1 "
                  "the bit is Res and MUST be zero (RFC 5044 §7.1.1)",
                  rev);
    if (flags & 0x08)
        quirk(d, ic, UIW_QUIRK_SIW_MPA_GSO, "MPA Res bit 0x08 set (flags 0x%02x)", flags);
    if (flags & 0x07)
        violation(d, ic, V_MPA_RESERVED, "Res bits 0x%x set (RFC 5044 §7.1.1: MUST be zero)",
                  flags & 0x07);
    if (f->kind == UIW_MPA_REQUEST && (flags & UIW_MPA_FLAG_R))
        violation(d, ic, V_MPA_RESERVED,
                  "R set in a Request (RFC 5044 §7.1.1: set to zero in the Request)");
    if (f->enhanced && !f->p2p && f->rtr)
        violation(d, ic, V_MPA_6581,
                  "RTR flags B/C/D set (IRD/ORD words %02x%02x%02x%02x) without A: they MUST be "
                  "0 (RFC 6581 §9.2)",
                  D->mpa[20], D->mpa[21], D->mpa[22], D->mpa[23]);
    if (f->kind == UIW_MPA_REQUEST && f->enhanced && f->p2p && !f->rtr)
        violation(d, ic, V_MPA_6581,
                  "P2P Request (A=1) offers no RTR type B/C/D (RFC 6581 §9.2: the initiator "
                  "MUST set one for each option it supports)");
}

static void write_stream_files(uiw_dump *d, iw_conn *ic, int dir)
{
    iw_dir *D = &ic->d[dir];
    const char *lab = D->f.kind == UIW_MPA_REQUEST ? "ab" : "ba";
    char path[4096];
    snprintf(path, sizeof(path), "%s/c%u-%s-mpa.bin", d->o.streams_dir, ic->tcp->id, lab);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "uiwarp dump: %s: %s\n", path, strerror(errno));
        return;
    }
    fwrite(D->mpa, 1, D->f_len, f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/c%u-%s-fpdu.bin", d->o.streams_dir, ic->tcp->id, lab);
    D->sfp = fopen(path, "wb");
    if (!D->sfp)
        fprintf(stderr, "uiwarp dump: %s: %s\n", path, strerror(errno));
}

static void feed(uiw_dump *d, iw_conn *ic, int dir, uint64_t off, const uint8_t *p, size_t n);

static void negotiate(uiw_dump *d, iw_conn *ic)
{
    int a = ic->init_ep, b = !a;
    const uiw_mpa_frame *rq = &ic->d[a].f, *rp = &ic->d[b].f;
    ic->negotiated = true;
    /* RFC 5044 §7.1.1 C: '1' in either frame: CRCs in both directions. */
    ic->crc = rq->crc || rp->crc;
    /* RFC 5044 §7.1.1 M: the Request's M asks for markers from the
     * Responder, the Reply's M for markers from the Initiator. */
    ic->markers[b] = rq->markers;
    ic->markers[a] = rp->markers;
    /* RFC 6581 §10: the enhanced setup is in use when both frames have S. */
    ic->enhanced = rq->enhanced && rp->enhanced;
    ic->p2p = ic->enhanced && rq->p2p && rp->p2p;
    ic->rtr_common = ic->p2p ? (uint8_t)(rq->rtr & rp->rtr) : 0;
    ic->rejected = rp->reject;

    if (loud(d)) {
        char o1[32], o2[32], o3[32];
        fprintf(d->out, "%6" PRIu64 " %10.6f c%u     negotiated: ", ic->d[b].mpa_end_frame,
                ic->d[b].mpa_end_ts, ic->tcp->id);
        if (ic->rejected)
            fprintf(d->out, "REJECTED by the responder (R=1); ");
        fprintf(d->out, "rev %u/%u, %s, CRC %s, markers a>b %s b>a %s", rq->rev, rp->rev,
                ic->enhanced ? "RFC 6581 enhanced" : "not enhanced", ic->crc ? "on" : "off",
                ic->markers[a] ? "on" : "off", ic->markers[b] ? "on" : "off");
        if (ic->enhanced)
            fprintf(d->out, ", a IRD/ORD %u/%u, b IRD/ORD %u/%u", rq->ird, rq->ord, rp->ird,
                    rp->ord);
        if (ic->p2p)
            fprintf(d->out, ", P2P RTR offered %s, supported %s, usable %s",
                    rtr_str(rq->rtr, o1, sizeof(o1)), rtr_str(rp->rtr, o2, sizeof(o2)),
                    rtr_str(ic->rtr_common, o3, sizeof(o3)));
        else if (ic->enhanced)
            fprintf(d->out, ", client-server (no RTR)");
        fputc('\n', d->out);
    }

    /* Pair checks. */
    if (!rq->enhanced && rp->enhanced)
        violation(d, ic, V_MPA_6581,
                  "enhanced Reply (S=1) to an unenhanced Request: the responder MUST answer "
                  "unenhanced (RFC 6581 §10)");
    if (rq->enhanced && !rp->enhanced)
        violation(d, ic, V_MPA_6581,
                  "unenhanced Reply to an enhanced Request (S=1): an enhanced responder MUST "
                  "answer enhanced, others close the connection (RFC 6581 §10)");
    if (ic->enhanced) {
        if (rq->p2p != rp->p2p && rp->reject && !rp->p2p && !rp->rtr && !rp->ird && !rp->ord)
            quirk(d, ic, UIW_QUIRK_SIW_REJECT_WORDS,
                  "Reject with IRD/ORD words 0x00000000: A=0 but Request A=1");
        else if (rq->p2p != rp->p2p)
            violation(d, ic, V_MPA_6581,
                      "Reply A=%d but Request A=%d: the responder MUST copy A (RFC 6581 §9.2)",
                      rp->p2p, rq->p2p);
        if (rq->p2p && rp->p2p && !rp->rtr && !rp->reject)
            violation(d, ic, V_MPA_6581,
                      "P2P Reply sets no RTR type (RFC 6581 §9.2: the responder MUST set at "
                      "least one)");
        const uint16_t AUTO = UIW_MPA_IRD_ORD_AUTO;
        if (rq->ord == AUTO && rp->ird != AUTO)
            violation(d, ic, V_MPA_6581,
                      "Request ORD 0x3FFF needs Reply IRD 0x3FFF, got %u (RFC 6581 §9.1)", rp->ird);
        if (rq->ird == AUTO && rp->ord != AUTO)
            violation(d, ic, V_MPA_6581,
                      "Request IRD 0x3FFF needs Reply ORD 0x3FFF, got %u (RFC 6581 §9.1)", rp->ord);
        if (rq->ird != AUTO && rp->ord != AUTO && rp->ord > rq->ird)
            violation(d, ic, V_MPA_6581,
                      "responder ORD %u > initiator IRD %u (RFC 6581 §9.1: the responder MUST "
                      "set its ORD at most to the initiator IRD)",
                      rp->ord, rq->ird);
        if (rq->ord != AUTO && rp->ird != AUTO && rp->ird < rq->ord && !rp->reject)
            note(d, ic,
                 "responder IRD %u < initiator ORD %u: the initiator must lower its ORD to %u "
                 "(RFC 6581 §9.1)",
                 rp->ird, rq->ord, rp->ird);
        /* Outstanding requests from each side are bounded by the peer's IRD. */
        if (rp->ird != AUTO) {
            ic->d[a].ird_known = true;
            ic->d[a].peer_ird = rp->ird;
        }
        if (rq->ird != AUTO) {
            ic->d[b].ird_known = true;
            ic->d[b].peer_ird = rq->ird;
        }
    }

    for (int e = 0; e < 2; e++) {
        int x = e == 0 ? a : b;
        iw_dir *D = &ic->d[x];
        if (ic->rejected) {
            D->phase = PH_REJECTED;
            if (D->pend_len)
                note(d, ic,
                     "%s: %zu bytes after the MPA frames of a rejected connection not "
                     "decoded (RFC 5044 §7.1.2: MPA is exited)",
                     dlabel(ic, x), D->pend_len);
            continue;
        }
        uiw_rx_cfg cfg = {.crc = ic->crc, .markers = ic->markers[x]};
        uiw_rx_init(&D->rx, &cfg);
        D->rx_base = D->f_len;
        D->phase = PH_FPDU;
    }
    if (ic->rejected)
        return;
    /* Bytes that arrived before the negotiation was known. */
    for (int e = 0; e < 2; e++) {
        int x = e == 0 ? a : b;
        iw_dir *D = &ic->d[x];
        if (D->pend_len) {
            uint8_t *p = D->pend;
            size_t n = D->pend_len;
            D->pend = NULL;
            D->pend_len = D->pend_cap = 0;
            feed(d, ic, x, D->f_len, p, n);
            free(p);
        }
    }
}

static void mpa_done(uiw_dump *d, iw_conn *ic, int dir)
{
    iw_dir *D = &ic->d[dir];
    iw_dir *P = &ic->d[!dir];
    D->f_ok = true;
    ic->mpa = true;
    if (D->f.kind == UIW_MPA_REQUEST) {
        D->role = ROLE_INIT;
        if (ic->init_ep < 0)
            ic->init_ep = dir;
    } else {
        D->role = ROLE_RESP;
        if (ic->init_ep < 0)
            ic->init_ep = !dir;
    }
    announce(d, ic);
    if (loud(d))
        print_mpa(d, ic, dir);
    check_mpa_frame(d, ic, dir);
    if (D->role == ROLE_INIT && P->role == ROLE_INIT)
        violation(d, ic, V_MPA_FRAME,
                  "both sides sent an MPA Request: Initiator/Initiator startup (RFC 5044 §7.1.2 "
                  "rule 8)");
    if (D->role == ROLE_RESP && P->role == ROLE_RESP)
        violation(d, ic, V_MPA_FRAME, "both sides sent an MPA Reply");
    if (D->role == ROLE_INIT && P->phase == PH_NOT_MPA)
        violation(d, ic, V_MPA_FRAME,
                  "the responder's stream does not start with an MPA Reply (RFC 5044 §7.1.2 "
                  "rule 2)");
    if (d->o.streams_dir)
        write_stream_files(d, ic, dir);
    D->phase = PH_PENDING;
    if (P->f_ok && D->role != P->role && !ic->negotiated)
        negotiate(d, ic);
}

static void mpa_bad(uiw_dump *d, iw_conn *ic, int dir, int rc)
{
    iw_dir *D = &ic->d[dir];
    iw_dir *P = &ic->d[!dir];
    bool key = D->mpa_have >= UIW_MPA_KEY_LEN && memcmp(D->mpa, "MPA ID Re", 9) == 0 &&
               (D->mpa[9] == 'q' || D->mpa[9] == 'p') && memcmp(D->mpa + 10, " Frame", 6) == 0;
    if (!key) {
        D->phase = PH_NOT_MPA;
        if (P->role == ROLE_INIT) {
            announce(d, ic);
            if (loud(d)) {
                prefix(d, ic, dir, D->mpa_frame, D->mpa_ts);
                fprintf(d->out, "not an MPA Reply: ");
                hexdump(d->out, D->mpa, D->mpa_have < 16 ? D->mpa_have : 16);
                fputc('\n', d->out);
            }
            violation(d, ic, V_MPA_FRAME,
                      "the responder's stream does not start with \"MPA ID Rep Frame\" (RFC "
                      "5044 §7.1.2 rule 5)");
        }
        return;
    }
    ic->mpa = true;
    if (ic->init_ep < 0)
        ic->init_ep = D->mpa[9] == 'q' ? dir : !dir;
    announce(d, ic);
    if (loud(d)) {
        prefix(d, ic, dir, D->mpa_frame, D->mpa_ts);
        fprintf(d->out, "MPA %s malformed (%d): ", D->mpa[9] == 'q' ? "Request" : "Reply", rc);
        hexdump(d->out, D->mpa, D->mpa_have < 24 ? D->mpa_have : 24);
        fputc('\n', d->out);
    }
    unsigned pd = D->mpa_have >= 20 ? (unsigned)(D->mpa[18] << 8 | D->mpa[19]) : 0;
    violation(d, ic, V_MPA_FRAME,
              "improperly formatted MPA frame (PD_Length %u; RFC 5044 §7.1.1: at most 512; RFC "
              "6581 §6: S needs 4) - connection not decoded further",
              pd);
    D->phase = PH_STOPPED;
}

/* ------------------------------------------------------------------------
 * FPDUs
 * ---------------------------------------------------------------------- */

static const char *op_name(unsigned op)
{
    return uiw_opcode_name(op);
}

static void print_term(uiw_dump *d, const uiw_term *t)
{
    const char *ln = uiw_term_layer_name(t->cause.layer);
    const char *en = uiw_term_etype_name(t->cause.layer, t->cause.etype);
    const char *cn = uiw_term_ecode_name(t->cause.layer, t->cause.etype, t->cause.ecode);
    fprintf(d->out,
            "                        terminate: layer=0x%x (%s) etype=0x%x (%s) ecode=0x%02x "
            "(%s) M=%d D=%d R=%d control=%02x %02x %02x %02x (layout: %s)\n",
            t->cause.layer, ln, t->cause.etype, en, t->cause.ecode, cn, t->hdr_mpa, t->hdr_ddp,
            t->hdr_rdma, t->raw_ctrl[0], t->raw_ctrl[1], t->raw_ctrl[2], t->raw_ctrl[3],
            t->siw_layout ? "siw's little-endian bitfield" : "RFC 5040 §4.8");
    if (t->ddp_hdr_len) {
        fprintf(d->out,
                "                        terminated DDP segment length + header (%u "
                "bytes): ",
                t->ddp_hdr_len);
        hexdump(d->out, t->ddp_hdr, t->ddp_hdr_len);
        fputc('\n', d->out);
        if (t->ddp_hdr_len > UIW_TERM_DDP_SEGLEN_LEN) {
            uiw_hdr h;
            uiw_term_cause c;
            int rc = uiw_hdr_decode(t->ddp_hdr + UIW_TERM_DDP_SEGLEN_LEN,
                                    t->ddp_hdr_len - UIW_TERM_DDP_SEGLEN_LEN, &h, &c);
            if (rc >= 0 || rc == -EAGAIN) {
                unsigned seglen = (unsigned)(t->ddp_hdr[0] << 8 | t->ddp_hdr[1]);
                fprintf(d->out, "                          = %s", op_name(h.opcode));
                if (h.tagged)
                    fprintf(d->out, " T=1 L=%d STag=0x%08x TO=0x%" PRIx64, h.last, h.stag, h.to);
                else
                    fprintf(d->out, " T=0 L=%d QN=%u MSN=%u MO=%u", h.last, h.qn, h.msn, h.mo);
                fprintf(d->out, " segment length %u\n", seglen);
            }
        }
    }
    if (t->rdma_hdr_len) {
        fprintf(d->out,
                "                        terminated RDMA header (%u bytes): ", t->rdma_hdr_len);
        hexdump(d->out, t->rdma_hdr, t->rdma_hdr_len);
        fputc('\n', d->out);
    }
}

static void print_fpdu(uiw_dump *d, iw_conn *ic, int dir, const cur_fpdu *F, const char *crc,
                       const char *tag, uint16_t nmarkers)
{
    const uiw_hdr *h = &F->hdr;
    prefix(d, ic, dir, F->frame, F->ts);
    fprintf(d->out, "%-19s", op_name(h->opcode));
    if (h->tagged)
        fprintf(d->out, " T=1 L=%d STag=0x%08x TO=0x%" PRIx64, h->last, h->stag, h->to);
    else
        fprintf(d->out, " T=0 L=%d QN=%u MSN=%u MO=%u", h->last, h->qn, h->msn, h->mo);
    fprintf(d->out, " ulpdu=%u payload=%u crc=%s", F->ulpdu_len, F->payload_len, crc);
    if (ic->markers[dir])
        fprintf(d->out, " markers=%u", nmarkers);
    switch (h->opcode) {
    case UIW_OP_READ_REQ:
        fprintf(d->out, " sink=0x%08x@0x%" PRIx64 " size=%u src=0x%08x@0x%" PRIx64,
                h->u.rreq.sink_stag, h->u.rreq.sink_to, h->u.rreq.read_size, h->u.rreq.src_stag,
                h->u.rreq.src_to);
        break;
    case UIW_OP_SEND_INV:
    case UIW_OP_SEND_SE_INV:
        fprintf(d->out, " inv_stag=0x%08x", h->inv_stag);
        break;
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        fprintf(d->out, " imm=");
        for (int i = 0; i < UIW_IMM_DATA_LEN; i++)
            fprintf(d->out, "%02x", h->u.imm[i]);
        break;
    case UIW_OP_ATOMIC_REQ: {
        const uiw_atomic_req *a = &h->u.atomic_req;
        fprintf(d->out,
                " aop=%s id=0x%08x stag=0x%08x to=0x%" PRIx64 " add_swap=0x%" PRIx64
                " add_swap_mask=0x%" PRIx64 " compare=0x%" PRIx64 " compare_mask=0x%" PRIx64,
                a->aop == UIW_AOP_FETCH_ADD  ? "FetchAdd"
                : a->aop == UIW_AOP_CMP_SWAP ? "CmpSwap"
                                             : "?",
                a->req_id, a->stag, a->to, a->add_swap, a->add_swap_mask, a->compare,
                a->compare_mask);
        break;
    }
    case UIW_OP_ATOMIC_RESP:
        fprintf(d->out, " id=0x%08x orig=0x%" PRIx64, h->u.atomic_resp.req_id,
                h->u.atomic_resp.orig_value);
        break;
    default:
        break;
    }
    if (tag)
        fprintf(d->out, " [%s]", tag);
    fputc('\n', d->out);
    if (d->o.hex && F->npreview) {
        fprintf(d->out, "                        payload: ");
        hexdump(d->out, F->preview, F->npreview);
        fprintf(d->out, "%s\n", F->payload_len > F->npreview ? " ..." : "");
    }
    if (h->opcode == UIW_OP_TERMINATE)
        print_term(d, &h->u.term);
}

/* First-FPDU ordering (RFC 5044 §7.1.2 rule 4): the responder sends no
 * FPDU before it has received the initiator's first FPDU. */
static void check_order(uiw_dump *d, iw_conn *ic, bool at_end)
{
    if (ic->order_checked || ic->init_ep < 0)
        return;
    iw_dir *A = &ic->d[ic->init_ep], *B = &ic->d[!ic->init_ep];
    if (!B->any_fpdu)
        return;
    if (!A->any_fpdu && !at_end)
        return;
    ic->order_checked = true;
    if (A->lost || B->lost)
        return;
    uint64_t acked;
    if (!A->any_fpdu)
        violation(d, ic, V_MPA_ORDER,
                  "responder sent FPDUs (first in frame %" PRIu64
                  ") but the initiator sent none (RFC 5044 §7.1.2 rule 4)",
                  B->first_start_frame);
    else if (B->first_has_ack && ack_offset(ic, !ic->init_ep, B->first_ack, &acked)) {
        /* What the responder had received when it sent: its ACK. */
        if (acked < A->first_end_off && acked + A->first_trailer >= A->first_end_off)
            quirk(d, ic, UIW_QUIRK_SIW_EARLY_FPDU,
                  "responder's first FPDU (frame %" PRIu64 ") acknowledges the initiator's "
                  "stream up to byte %" PRIu64 ": all of the initiator's first FPDU but its "
                  "%" PRIu32 "-byte trailer (ends at byte %" PRIu64 ", frame %" PRIu64 ")",
                  B->first_start_frame, acked, A->first_trailer, A->first_end_off,
                  A->first_end_frame);
        else if (acked < A->first_end_off)
            violation(d, ic, V_MPA_ORDER,
                      "responder's first FPDU (frame %" PRIu64 ") acknowledges the initiator's "
                      "stream up to byte %" PRIu64 ", before the end of the initiator's first "
                      "FPDU (byte %" PRIu64 ", frame %" PRIu64
                      ") (RFC 5044 §7.1.2 rule 4: receive one FPDU before sending)",
                      B->first_start_frame, acked, A->first_end_off, A->first_end_frame);
    } else if (B->first_start_frame < A->first_end_frame)
        violation(d, ic, V_MPA_ORDER,
                  "responder's first FPDU (frame %" PRIu64
                  ") precedes the end of the initiator's first FPDU (frame %" PRIu64
                  ") (RFC 5044 §7.1.2 rule 4: receive one FPDU before sending)",
                  B->first_start_frame, A->first_end_frame);
}

static int rtr_type(const cur_fpdu *F)
{
    const uiw_hdr *h = &F->hdr;
    if (h->opcode == UIW_OP_WRITE && h->tagged && h->last && F->payload_len == 0)
        return UIW_RTR_WRITE;
    if (h->opcode == UIW_OP_READ_REQ && h->u.rreq.read_size == 0)
        return UIW_RTR_READ;
    if (h->opcode == UIW_OP_SEND && h->last && h->mo == 0 && F->payload_len == 0)
        return UIW_RTR_SEND;
    return 0;
}

/* DDP/RDMAP checks of a complete FPDU. silent: update state only (the
 * FPDU failed its CRC, its fields are not to be trusted). */
static void ddp_checks(uiw_dump *d, iw_conn *ic, int dir, const cur_fpdu *F, bool silent)
{
    iw_dir *D = &ic->d[dir], *P = &ic->d[!dir];
    const uiw_hdr *h = &F->hdr;
    d->mute = silent;

    if (D->terminated)
        violation(d, ic, V_AFTER_TERM,
                  "FPDU after this side's Terminate (RFC 5040 §5.4: no more messages)");
    if (h->ddp_version != UIW_DDP_VERSION)
        violation(d, ic, V_VERSION, "DDP version %u (RFC 5041 §4.1: MUST be 1)", h->ddp_version);
    if (h->rdmap_version != UIW_RDMAP_VERSION)
        violation(d, ic, V_VERSION,
                  "RDMAP version %u: 00b is the RDMA Consortium's protocol, not RFC 5040 on MPA "
                  "rev %u (RFC 5040 §4.1)",
                  h->rdmap_version, ic->d[ic->init_ep].f.rev);
    if (h->ddp_rsvd)
        violation(d, ic, V_RESERVED, "DDP Rsvd bits 0x%x (RFC 5041 §4.1: MUST be zero)",
                  h->ddp_rsvd);
    if (h->rdmap_rsvd)
        violation(d, ic, V_RESERVED, "RDMAP Rsv bits 0x%x (RFC 5040 §4.1: MUST be zero)",
                  h->rdmap_rsvd);
    if (!h->tagged && h->inv_stag && h->opcode != UIW_OP_SEND_INV &&
        h->opcode != UIW_OP_SEND_SE_INV)
        violation(d, ic, V_RESERVED,
                  "Invalidate STag field 0x%08x in a %s (RFC 5040 §4.1, RFC 7306 §4.1: MUST be "
                  "zero)",
                  h->inv_stag, op_name(h->opcode));

    if (!h->tagged) {
        uint32_t qn = h->qn;
        if (qn < UIW_QN_COUNT) {
            qstate *Q = &D->q[qn];
            /* The engine's rules (the wire core's sequencer, also what
             * qp_rx.c enforces); a segment that breaks them is diagnosed:
             * every rule it breaks is reported. */
            uiw_useq seq = {.next_msn = Q->next_msn,
                            .open = Q->open,
                            .msn = Q->msn,
                            .opcode = Q->opcode,
                            .mo_next = Q->mo_next};
            uiw_term_cause cause;
            if (uiw_useq_check(&seq, h, &cause)) {
                /* in sequence */
            } else if (!Q->open) {
                if (h->msn != Q->next_msn)
                    violation(d, ic, V_MSN,
                              "QN %u: expected MSN %u, got %u (RFC 5041 §4.3: starts at 1, +1 "
                              "per message)",
                              qn, Q->next_msn, h->msn);
                if (h->mo != 0)
                    violation(d, ic, V_MO,
                              "first segment of a message (QN %u MSN %u) has MO %u, not 0 (RFC "
                              "5041 §4.3)",
                              qn, h->msn, h->mo);
            } else {
                if (h->msn != Q->msn) {
                    violation(d, ic, V_MESSAGE,
                              "QN %u: MSN %u starts while message MSN %u has not ended (no L "
                              "flag; RFC 5041 §4.1)",
                              qn, h->msn, Q->msn);
                    if (h->msn != Q->msn + 1)
                        violation(d, ic, V_MSN, "QN %u: expected MSN %u, got %u", qn, Q->msn + 1,
                                  h->msn);
                } else {
                    if (h->opcode != Q->opcode)
                        violation(d, ic, V_MESSAGE,
                                  "opcode changed within message QN %u MSN %u (%s, then %s)", qn,
                                  h->msn, op_name(Q->opcode), op_name(h->opcode));
                    if (h->mo != Q->mo_next)
                        violation(d, ic, V_MO,
                                  "QN %u MSN %u: expected MO %u (bytes so far), got %u (RFC 5041 "
                                  "§5.2)",
                                  qn, h->msn, Q->mo_next, h->mo);
                }
            }
            /* then follow the stream as it goes on */
            uiw_useq_accept(&seq, h, F->payload_len);
            Q->open = seq.open;
            Q->msn = seq.msn;
            Q->opcode = seq.opcode;
            Q->mo_next = seq.mo_next;
            Q->next_msn = seq.next_msn;
        }
    } else {
        int k = h->opcode == UIW_OP_READ_RESP ? 1 : 0;
        tstate *T = &D->t[k];
        if (!T->open) {
            T->open = true;
            T->stag = h->stag;
            T->to_next = h->to;
            T->bytes = 0;
            T->matched = false;
            if (k == 1) {
                const req_ent *r = fifo_front(&P->reads);
                if (!r && P->lost) {
                    /* the Read Request may be in what the other side lost */
                } else if (!r) {
                    violation(d, ic, V_READ,
                              "Read Response (STag 0x%08x TO 0x%" PRIx64
                              ") without an outstanding Read Request from the other side (RFC "
                              "5040 §5.2.2)",
                              h->stag, h->to);
                } else {
                    T->matched = true;
                    T->rr = *r;
                    bool zero = r->size == 0 && h->last && F->payload_len == 0;
                    /* RFC 5041 §5.2: STag and TO of a zero-length tagged
                     * message MUST NOT be checked. */
                    if (!zero && (h->stag != r->stag || h->to != r->to))
                        violation(d, ic, V_READ,
                                  "Read Response to 0x%08x@0x%" PRIx64
                                  ", the Read Request (frame %" PRIu64
                                  ") asked for sink 0x%08x@0x%" PRIx64 " (RFC 5040 §5.2.2)",
                                  h->stag, h->to, r->frame, r->stag, r->to);
                }
            }
        } else {
            if (h->stag != T->stag)
                violation(d, ic, V_TAGGED,
                          "STag changed within a %s message: 0x%08x, then 0x%08x (RFC 5041 "
                          "§5.2)",
                          op_name(h->opcode), T->stag, h->stag);
            else if (h->to != T->to_next)
                violation(d, ic, V_TAGGED,
                          "%s segment TO 0x%" PRIx64 ", expected 0x%" PRIx64
                          " (previous TO + payload; RFC 5041 §5.2)",
                          op_name(h->opcode), h->to, T->to_next);
            T->stag = h->stag;
        }
        T->to_next = h->to + F->payload_len;
        T->bytes += F->payload_len;
        if (h->last) {
            T->open = false;
            if (k == 1 && T->matched) {
                if (T->bytes != T->rr.size)
                    violation(d, ic, V_READ,
                              "Read Response carried %" PRIu64
                              " bytes, the Read Request (frame %" PRIu64 ") asked for %u (RFC "
                              "5040 §5.2.1)",
                              T->bytes, T->rr.frame, T->rr.size);
                fifo_pop(&P->reads);
            }
        }
    }

    switch (h->opcode) {
    case UIW_OP_READ_REQ:
    case UIW_OP_ATOMIC_REQ: {
        req_ent e = {.frame = F->frame};
        if (h->opcode == UIW_OP_READ_REQ) {
            e.stag = h->u.rreq.sink_stag;
            e.to = h->u.rreq.sink_to;
            e.size = h->u.rreq.read_size;
            fifo_push(&D->reads, &e);
        } else {
            e.stag = h->u.atomic_req.req_id;
            fifo_push(&D->atomics, &e);
        }
        size_t out = D->reads.n + D->atomics.n;
        if (D->ird_known && out > D->peer_ird && !P->lost)
            violation(d, ic, V_ORD,
                      "%zu Read/Atomic Requests outstanding, the peer's IRD is %u (RFC 6581 "
                      "§9.1; RFC 5040 §5.2.2)",
                      out, D->peer_ird);
        break;
    }
    case UIW_OP_ATOMIC_RESP: {
        const req_ent *r = fifo_front(&P->atomics);
        if (!r && P->lost) {
            /* the request may be in what the other side lost */
        } else if (!r)
            violation(d, ic, V_ATOMIC,
                      "Atomic Response (id 0x%08x) without an outstanding Atomic Request (RFC "
                      "7306 §5.2.2)",
                      h->u.atomic_resp.req_id);
        else {
            if (r->stag != h->u.atomic_resp.req_id)
                violation(d, ic, V_ATOMIC,
                          "Atomic Response id 0x%08x, the oldest Atomic Request (frame %" PRIu64
                          ") has id 0x%08x (RFC 7306 §5.2.2)",
                          h->u.atomic_resp.req_id, r->frame, r->stag);
            fifo_pop(&P->atomics);
        }
        break;
    }
    case UIW_OP_IMM_DATA:
    case UIW_OP_IMM_DATA_SE:
        if (F->ulpdu_len != UIW_HDR_UNTAGGED_LEN + UIW_IMM_DATA_LEN || F->payload_len)
            violation(d, ic, V_IMM,
                      "Immediate Data ULPDU %u bytes: the header plus exactly 8 bytes (%u) (RFC "
                      "7306 §6)",
                      F->ulpdu_len, UIW_HDR_UNTAGGED_LEN + UIW_IMM_DATA_LEN);
        break;
    case UIW_OP_TERMINATE: {
        const uiw_term *t = &h->u.term;
        D->terminated = true;
        if (t->siw_layout)
            quirk(d, ic, UIW_QUIRK_SIW_TERM_LAYOUT,
                  "control word %02x %02x %02x %02x decoded with siw's layout", t->raw_ctrl[0],
                  t->raw_ctrl[1], t->raw_ctrl[2], t->raw_ctrl[3]);
        if (t->cause.layer == UIW_LAYER_LLP && t->cause.etype == UIW_LLP_ET_RNIC)
            quirk(d, ic, UIW_QUIRK_RNIC_TERM_ETYPE3, "Terminate LLP/type 3/0x%02x (%s)",
                  t->cause.ecode,
                  uiw_term_ecode_name(t->cause.layer, t->cause.etype, t->cause.ecode));
        if (name_undefined(uiw_term_ecode_name(t->cause.layer, t->cause.etype, t->cause.ecode)))
            violation(d, ic, V_TERM,
                      "undefined Terminate layer/type/code 0x%x/0x%x/0x%02x (RFC 5040 §4.8, "
                      "RFC 6580)",
                      t->cause.layer, t->cause.etype, t->cause.ecode);
        if (h->mo != 0)
            violation(d, ic, V_TERM, "Terminate MO %u, not 0", h->mo);
        break;
    }
    default:
        break;
    }

    d->mute = false;
}

/* FPDU/TCP segment alignment (RFC 5044 §8, Appendix A.1) of an FPDU whose
 * bytes are [begin, begin + bytes) of the TCP stream, m the segment that
 * carried its first byte. An FPDU first carried by a retransmission is left
 * out: how a retransmission is cut says nothing of the first transmission. */
static void seg_align(uiw_dump *d, iw_conn *ic, int dir, uint64_t begin, uint32_t bytes,
                      const uiw_seg_meta *m)
{
    iw_dir *D = &ic->d[dir];
    if (!m->seg_len || begin < m->seg_off || begin >= m->seg_off + m->seg_len)
        return; /* not found (cannot happen with bytes delivered by the reassembler) */
    if (m->retx) {
        D->st.seg_retx++;
        return;
    }
    D->st.seg_fpdus++;
    bool win = D->emss_win && begin >= D->emss_from;
    if (m->seg_off == begin) {
        D->st.seg_aligned++;
        D->lead_frame = m->frame;
        D->lead_valid = true;
        if (win) {
            D->st.emss_aligned++;
            D->emss_run = 0;
            if (!m->sack)
                D->emss_win = win = false; /* alignment regained */
        }
    } else if (win && D->emss_run_frame != m->frame && D->lead_frame != m->frame) {
        /* the first FPDU that begins in this segment, not at its start */
        D->emss_run_frame = m->frame;
        if (++D->emss_run > D->st.emss_run_max)
            D->st.emss_run_max = D->emss_run;
    }
    uint64_t seg_end = m->seg_off + m->seg_len;
    /* Appendix A.1: "Multiple FPDUs may be packed into a single TCP segment
     * as long as they are entirely contained in the TCP segment" */
    if (begin + bytes <= seg_end && D->lead_valid && D->lead_frame == m->frame) {
        D->st.seg_whole++;
        if (begin + bytes == seg_end)
            D->st.seg_integral++; /* the segment ends with this FPDU */
    } else if (win) {
        D->st.emss_split++;
    }
    uint32_t mss = ic->tcp->half[dir].st.max_seg;
    if (begin + bytes > seg_end && bytes <= mss)
        warning(d, ic, W_FPDU_SPLIT,
                "%s: this %u-byte FPDU starts at byte %" PRIu64 " of the %u-byte segment in "
                "frame %" PRIu64 " and continues past its end, although it fits in the largest "
                "segment payload seen in this direction (%u bytes)",
                dlabel(ic, dir), bytes, begin - m->seg_off, m->seg_len, m->frame, mss);
}

static void finish_fpdu(uiw_dump *d, iw_conn *ic, int dir, const uiw_rx_event *ev, bool crc_bad)
{
    iw_dir *D = &ic->d[dir];
    cur_fpdu *F = &D->cur;
    const uiw_hdr *h = &F->hdr;
    F->end_frame = D->cur_frame;
    F->active = false;
    D->err_run = crc_bad ? D->err_run + 1 : 0;

    D->st.fpdus++;
    D->st.payload += F->payload_len;
    D->st.op_fpdus[h->opcode & 15]++;
    if (h->last) {
        D->st.op_msgs[h->opcode & 15]++;
        D->st.messages++;
    }
    D->st.markers += ev->nmarkers;
    char crc[64];
    if (!ic->crc) {
        D->st.crc_off++;
        if (ev->crc_recv) {
            D->st.crc_off_nonzero++;
            snprintf(crc, sizeof(crc), "off(field 0x%08x)", ev->crc_recv);
        } else {
            snprintf(crc, sizeof(crc), "off");
        }
    } else if (!crc_bad) {
        D->st.crc_good++;
        snprintf(crc, sizeof(crc), "good");
    } else {
        D->st.crc_bad++;
        snprintf(crc, sizeof(crc), "BAD(field 0x%08x computed 0x%08x)", ev->crc_recv, ev->crc_calc);
    }

    /* P2P: the initiator's first FPDU is the RTR (RFC 6581 §5, §9.3). */
    const char *tag = NULL;
    bool rtr_first = ic->p2p && dir == ic->init_ep && !D->any_fpdu;
    int rt = rtr_first ? rtr_type(F) : 0;
    if (rtr_first && !crc_bad && rt && (rt & ic->rtr_common))
        tag = "RTR";

    if (loud(d))
        print_fpdu(d, ic, dir, F, crc, tag, ev->nmarkers);

    if (crc_bad)
        violation(d, ic, V_CRC,
                  "CRC field 0x%08x, computed 0x%08x over the FPDU (RFC 5044 §4.4; the receiver "
                  "sends Terminate LLP/MPA/0x02 and closes)",
                  ev->crc_recv, ev->crc_calc);
    if (!crc_bad && ev->pad_nonzero)
        quirk(d, ic, UIW_QUIRK_SIW_PAD, "pad bytes after a %u-byte ULPDU are not zero",
              F->ulpdu_len);
    if (!crc_bad && ev->marker_rsvd)
        violation(d, ic, V_MARKER, "marker RESERVED field not zero (RFC 5044 §4.3)");
    seg_align(d, ic, dir, F->begin, ev->fpdu_bytes, &F->seg);

    if (rtr_first && !crc_bad) {
        char o1[32], o2[32], o3[32];
        const uiw_mpa_frame *rq = &ic->d[ic->init_ep].f, *rp = &ic->d[!ic->init_ep].f;
        if (h->opcode == UIW_OP_TERMINATE) {
            /* RFC 6581 §9.1/§9.2: an initiator that cannot go on terminates. */
        } else if (!ic->rtr_common) {
            violation(d, ic, V_RTR,
                      "no RTR type in common (Request %s, Reply %s): the initiator MUST send "
                      "Terminate LLP/MPA/0x07 instead of %s (RFC 6581 §9.2)",
                      rtr_str(rq->rtr, o1, sizeof(o1)), rtr_str(rp->rtr, o2, sizeof(o2)),
                      op_name(h->opcode));
        } else if (rt && !(rt & ic->rtr_common)) {
            violation(
                d, ic, V_RTR, "zero-length %s RTR was not negotiated (usable: %s) (RFC 6581 §9.2)",
                rtr_str((uint8_t)rt, o1, sizeof(o1)), rtr_str(ic->rtr_common, o3, sizeof(o3)));
        } else if (!rt) {
            violation(d, ic, V_RTR,
                      "first FPDU of the P2P initiator is a %s with %u payload bytes, not a "
                      "zero-length %s RTR (RFC 6581 §5, §9.3)",
                      op_name(h->opcode), F->payload_len, rtr_str(ic->rtr_common, o3, sizeof(o3)));
        }
    }

    if (!D->any_fpdu) {
        D->any_fpdu = true;
        D->first_start_frame = F->frame;
        D->first_end_frame = F->end_frame;
        D->first_end_off = D->cur_end;
        D->first_trailer = (4u - (2u + F->ulpdu_len) % 4u) % 4u + 4u;
        D->first_has_ack = F->has_ack;
        D->first_ack = F->ack;
        iw_dir *P = &ic->d[!dir];
        uint64_t acked;
        if (dir == ic->init_ep && !P->lost) {
            /* RFC 5044 §7.1.2: FPDUs only once the Reply is received. */
            if (F->has_ack && ack_offset(ic, dir, F->ack, &acked)) {
                if (acked < P->f_len)
                    violation(d, ic, V_MPA_ORDER,
                              "initiator's first FPDU (frame %" PRIu64 ") acknowledges %" PRIu64
                              " of the %zu bytes of the MPA Reply: sent before the Reply was "
                              "received (RFC 5044 §7.1.2 rule 3)",
                              F->frame, acked, P->f_len);
            } else if (F->frame < P->mpa_end_frame) {
                violation(d, ic, V_MPA_ORDER,
                          "initiator's first FPDU (frame %" PRIu64
                          ") before the MPA Reply completed (frame %" PRIu64
                          ") (RFC 5044 §7.1.2 rule 3)",
                          F->frame, P->mpa_end_frame);
            }
        }
        check_order(d, ic, false);
    }

    ddp_checks(d, ic, dir, F, crc_bad);
}

static int error_class(const uiw_rx_event *ev)
{
    const uiw_term_cause *c = &ev->cause;
    int op = ev->bad_hdr_len >= 4 ? (ev->bad_hdr[3] & 0x0f) : -1;
    if (c->layer == UIW_LAYER_LLP) {
        if (c->ecode == UIW_MPA_EC_CRC)
            return V_CRC;
        if (ev->why && strstr(ev->why, "marker"))
            return V_MARKER;
        if (op == UIW_OP_IMM_DATA || op == UIW_OP_IMM_DATA_SE)
            return V_IMM;
        return V_FRAMING;
    }
    if (c->layer == UIW_LAYER_DDP) {
        if ((c->etype == UIW_DDP_ET_TAGGED && c->ecode == UIW_DDP_EC_T_INVALID_VERSION) ||
            (c->etype == UIW_DDP_ET_UNTAGGED && c->ecode == UIW_DDP_EC_U_INVALID_VERSION))
            return V_VERSION;
        if (c->etype == UIW_DDP_ET_UNTAGGED) {
            switch (c->ecode) {
            case UIW_DDP_EC_U_INVALID_QN:
                return V_QN;
            case UIW_DDP_EC_U_INVALID_MO:
                return op == UIW_OP_TERMINATE ? V_TERM : V_MO;
            case UIW_DDP_EC_U_MSG_TOO_LONG:
                if (op == UIW_OP_IMM_DATA || op == UIW_OP_IMM_DATA_SE)
                    return V_IMM;
                if (op == UIW_OP_TERMINATE)
                    return V_TERM;
                if (op == UIW_OP_ATOMIC_REQ || op == UIW_OP_ATOMIC_RESP)
                    return V_ATOMIC;
                return V_MESSAGE;
            default:
                break;
            }
        }
        return V_MESSAGE;
    }
    if (c->layer == UIW_LAYER_RDMAP && c->etype == UIW_RDMAP_ET_REMOTE_OP) {
        if (c->ecode == UIW_RDMAP_EC_INVALID_VERSION)
            return V_VERSION;
        if (c->ecode == UIW_RDMAP_EC_UNEXPECTED_OPCODE)
            return V_OPCODE;
        if (op == UIW_OP_ATOMIC_REQ)
            return V_ATOMIC;
    }
    return V_FRAMING;
}

static void stop_dir(uiw_dump *d, iw_conn *ic, int dir, const char *why)
{
    iw_dir *D = &ic->d[dir];
    D->phase = PH_STOPPED;
    D->lost = true;
    cproblem(d, ic, C_STOPPED, "%s: decoding stopped: %s", dlabel(ic, dir), why);
}

static void on_error(uiw_dump *d, iw_conn *ic, int dir, const uiw_rx_event *ev)
{
    iw_dir *D = &ic->d[dir];
    bool crc = ev->cause.layer == UIW_LAYER_LLP && ev->cause.ecode == UIW_MPA_EC_CRC;
    if (D->cur.active && crc) {
        finish_fpdu(d, ic, dir, ev, true);
    } else {
        D->err_run++;
        D->st.fpdus++;
        int cls = error_class(ev);
        /* an error reported at the FPDU's CRC: the FPDU is delimited */
        uint64_t begin = fpdu_begin(ic, dir, ev->fpdu_off);
        uiw_seg_meta seg = {0};
        if (ev->fpdu_bytes)
            seg = D->cur.active && D->cur.begin == begin ? D->cur.seg : map_lookup(D, begin);
        uiw_seg_meta m = map_lookup(D, D->rx_base + ev->fpdu_off);
        uint64_t frame = m.frame;
        double ts = m.ts;
        if (loud(d)) {
            prefix(d, ic, dir, frame, ts);
            fprintf(d->out, "bad FPDU at stream offset %" PRIu64, D->rx_base + ev->fpdu_off);
            if (ev->ulpdu_valid)
                fprintf(d->out, " ulpdu=%u", ev->ulpdu_len);
            if (ev->bad_hdr_len) {
                fprintf(d->out, " header: ");
                hexdump(d->out, ev->bad_hdr, ev->bad_hdr_len);
            }
            fputc('\n', d->out);
        }
        violation(d, ic, cls, "%s (receiver's Terminate: %s/%s/%s)", ev->why ? ev->why : "?",
                  uiw_term_layer_name(ev->cause.layer),
                  uiw_term_etype_name(ev->cause.layer, ev->cause.etype),
                  uiw_term_ecode_name(ev->cause.layer, ev->cause.etype, ev->cause.ecode));
        if (ev->fpdu_bytes)
            seg_align(d, ic, dir, begin, ev->fpdu_bytes, &seg);
        D->cur.active = false;
    }
    /* Resynchronise at the next FPDU when the length can be trusted. */
    bool len_ok = ev->ulpdu_valid && ev->ulpdu_len >= 2;
    if (!len_ok) {
        stop_dir(d, ic, dir, "ULPDU_Length unusable, FPDU boundaries lost");
        return;
    }
    if (D->err_run >= MAX_ERR_RUN || ++D->resyncs > MAX_RESYNCS) {
        stop_dir(d, ic, dir, "too many consecutive bad FPDUs, framing presumably lost");
        return;
    }
    /* resume_off counts markers, so the marker grid stays right. */
    if (!crc)
        D->lost = true; /* a message was not understood */
    D->skip_to = D->rx_base + ev->resume_off;
    uiw_rx_cfg cfg = {.crc = ic->crc, .markers = ic->markers[dir]};
    uiw_rx_init_at(&D->rx, &cfg, ev->resume_off);
}

static void feed(uiw_dump *d, iw_conn *ic, int dir, uint64_t off, const uint8_t *p, size_t n)
{
    iw_dir *D = &ic->d[dir];
    while (n && D->phase == PH_FPDU) {
        if (D->skip_to > off) {
            uint64_t s = D->skip_to - off;
            if (s > n)
                s = n;
            off += s;
            p += s;
            n -= (size_t)s;
            continue;
        }
        uiw_rx_event ev;
        size_t used = uiw_rx_feed(&D->rx, p, n, &ev);
        off += used;
        p += used;
        n -= used;
        D->cur_end = off;
        switch (ev.kind) {
        case UIW_RX_HDR: {
            cur_fpdu *F = &D->cur;
            memset(F, 0, sizeof(*F));
            F->active = true;
            F->hdr = *ev.hdr;
            F->ulpdu_len = ev.ulpdu_len;
            F->hdr_len = ev.hdr_len;
            F->payload_len = ev.payload_len;
            F->tcp_off = D->rx_base + ev.fpdu_off;
            F->begin = fpdu_begin(ic, dir, ev.fpdu_off);
            F->seg = map_lookup(D, F->begin);
            uiw_seg_meta m = map_lookup(D, F->tcp_off);
            F->frame = m.frame;
            F->ts = m.ts;
            F->has_ack = m.has_ack;
            F->ack = m.ack;
            break;
        }
        case UIW_RX_PAYLOAD: {
            cur_fpdu *F = &D->cur;
            if (F->npreview < PREVIEW_MAX && d->o.hex) {
                uint32_t room = d->o.hex < PREVIEW_MAX ? d->o.hex : PREVIEW_MAX;
                uint32_t take = room > F->npreview ? room - F->npreview : 0;
                if (take > ev.len)
                    take = ev.len;
                memcpy(F->preview + F->npreview, ev.data, take);
                F->npreview += take;
            }
            F->payload_seen += ev.len;
            break;
        }
        case UIW_RX_END:
            finish_fpdu(d, ic, dir, &ev, false);
            break;
        case UIW_RX_ERROR:
            on_error(d, ic, dir, &ev);
            break;
        default:
            break;
        }
        if (used == 0 && ev.kind == UIW_RX_NONE)
            break;
    }
}

/* ------------------------------------------------------------------------
 * TCP callbacks
 * ---------------------------------------------------------------------- */

static void pend_append(uiw_dump *d, iw_conn *ic, int dir, const uint8_t *p, size_t n)
{
    iw_dir *D = &ic->d[dir];
    size_t limit = d->o.max_buffer ? d->o.max_buffer : (8u << 20);
    if (D->pend_len + n > limit) {
        free(D->pend);
        D->pend = NULL;
        D->pend_len = D->pend_cap = 0;
        stop_dir(d, ic, dir, "too many bytes before the MPA negotiation completed");
        return;
    }
    if (D->pend_len + n > D->pend_cap) {
        size_t nc = D->pend_cap ? D->pend_cap : 4096;
        while (nc < D->pend_len + n)
            nc *= 2;
        uint8_t *np = realloc(D->pend, nc);
        if (!np)
            return;
        D->pend = np;
        D->pend_cap = nc;
    }
    memcpy(D->pend + D->pend_len, p, n);
    D->pend_len += n;
}

/* c->user: NULL until the connection carries data, then an iw_conn, or
 * &not_iwarp once a direction is seen not to start with an MPA frame while
 * no MPA frame was seen at all (its state is dropped). */
static char not_iwarp;
/* ... or &start_lost when the first bytes of a direction are missing from
 * the capture before any MPA frame was seen. */
static char start_lost;

static iw_conn *conn_state(uiw_dump *d, uiw_tcp_conn *c)
{
    if (c->user == &not_iwarp || c->user == &start_lost)
        return NULL;
    if (c->user)
        return c->user;
    iw_conn *ic = calloc(1, sizeof(*ic));
    if (!ic)
        return NULL;
    ic->tcp = c;
    ic->init_ep = -1;
    for (int x = 0; x < 2; x++)
        for (int q = 0; q < UIW_QN_COUNT; q++)
            ic->d[x].q[q].next_msn = 1; /* RFC 5041 §4.3: the initial MSN is one */
    c->user = ic;
    if (d->conns_tail)
        d->conns_tail->next = ic;
    else
        d->conns = ic;
    d->conns_tail = ic;
    return ic;
}

static void drop_state(uiw_dump *d, iw_conn *ic)
{
    for (iw_conn **pp = &d->conns; *pp; pp = &(*pp)->next) {
        if (*pp == ic) {
            *pp = ic->next;
            if (d->conns_tail == ic) {
                d->conns_tail = NULL;
                for (iw_conn *x = d->conns; x; x = x->next)
                    d->conns_tail = x;
            }
            break;
        }
    }
    ic->tcp->user = &not_iwarp;
    free(ic);
}

static iw_conn *state_of(uiw_tcp_conn *c)
{
    return c->user == &not_iwarp || c->user == &start_lost ? NULL : c->user;
}

/* A segment of the FPDU stream, for the per-segment reading of alignment
 * (dstats.seg_segs): counted once, when its first byte is delivered in the
 * FPDU phase; retransmissions are left out, as in seg_align. */
static void seg_count(iw_dir *D, uint64_t off, const uiw_seg_meta *m)
{
    if (m->retx || !m->seg_len || off != m->seg_off || (D->seg_counted && D->seg_frame == m->frame))
        return;
    D->seg_counted = true;
    D->seg_frame = m->frame;
    D->st.seg_segs++;
    if (m->sack) {
        D->st.emss_events++;
        if (!D->emss_win)
            D->emss_from = m->seg_off;
        D->emss_win = true;
    }
    if (D->emss_win)
        D->st.emss_segs++;
}

static void on_data(void *ctx, uiw_tcp_conn *c, int dir, uint64_t off, const uint8_t *p, size_t n,
                    const uiw_seg_meta *m)
{
    uint64_t frame = m->frame;
    double ts = m->ts;
    uiw_dump *d = ctx;
    iw_conn *ic = conn_state(d, c);
    if (!ic)
        return;
    iw_dir *D = &ic->d[dir];
    ic->any_payload = true;
    D->cur_frame = frame;
    D->cur_ts = ts;
    while (n) {
        switch (D->phase) {
        case PH_START:
            if (off != 0 && !ic->mpa) {
                /* the start of this direction is not in the capture */
                drop_state(d, ic);
                c->user = &start_lost;
                return;
            }
            D->mpa_frame = frame;
            D->mpa_ts = ts;
            D->phase = PH_MPA;
            /* fall through */
        case PH_MPA: {
            size_t before = D->mpa_have, room = sizeof(D->mpa) - before;
            size_t take = n < room ? n : room;
            memcpy(D->mpa + before, p, take);
            D->mpa_have += take;
            uiw_mpa_frame f;
            int rc = uiw_mpa_decode(D->mpa, D->mpa_have, 0, &f);
            if (rc == -EAGAIN) {
                p += take;
                n -= take;
                off += take;
                continue;
            }
            if (rc < 0) {
                mpa_bad(d, ic, dir, rc);
                if (D->phase == PH_NOT_MPA && !ic->mpa)
                    drop_state(d, ic);
                return;
            }
            D->f = f;
            D->f_len = (size_t)rc;
            D->mpa_end_frame = frame;
            D->mpa_end_ts = ts;
            size_t used = (size_t)rc - before;
            p += used;
            n -= used;
            off += used;
            mpa_done(d, ic, dir);
            continue;
        }
        case PH_PENDING:
            D->st.stream_bytes += n;
            map_add(D, off, m);
            seg_count(D, off, m);
            stream_write(D, p, n);
            pend_append(d, ic, dir, p, n);
            return;
        case PH_FPDU:
            D->st.stream_bytes += n;
            map_add(D, off, m);
            seg_count(D, off, m);
            stream_write(D, p, n);
            feed(d, ic, dir, off, p, n);
            return;
        case PH_STOPPED:
            stream_write(D, p, n); /* closed after a gap */
            return;
        default:
            return;
        }
    }
}

static void on_event(void *ctx, uiw_tcp_conn *c, int dir, const uiw_reasm_event *ev)
{
    uiw_dump *d = ctx;
    iw_conn *ic = state_of(c);
    if (!ic)
        return;
    iw_dir *D = &ic->d[dir];
    bool active = D->phase == PH_MPA || D->phase == PH_PENDING || D->phase == PH_FPDU;
    switch (ev->kind) {
    case UIW_RE_GAP:
        D->gap = true;
        if (active || (D->phase == PH_START && ic->mpa)) {
            if (loud(d)) {
                prefix(d, ic, dir, ev->frame, ev->ts);
                fprintf(d->out,
                        "TCP bytes %" PRIu64 "-%" PRIu64
                        " missing from the capture (lost by the capture, or acknowledged "
                        "before they appear)\n",
                        ev->off, ev->off + ev->len - 1);
            }
            cproblem(d, ic, C_GAP, "%" PRIu64 " bytes lost at stream offset %" PRIu64, ev->len,
                     ev->off);
            stream_close(D);
            if (D->phase == PH_START) {
                D->phase = PH_STOPPED;
                D->lost = true;
                cproblem(d, ic, C_STOPPED, "%s: the start of the stream is missing",
                         dlabel(ic, dir));
            } else {
                stop_dir(d, ic, dir, "bytes missing from the capture");
            }
        }
        break;
    case UIW_RE_OVERFLOW:
        if (ic->mpa)
            cproblem(d, ic, C_OVERFLOW,
                     "%s: %" PRIu64 " bytes held out of order exceed the limit; forcing a gap",
                     dlabel(ic, dir), ev->len);
        break;
    case UIW_RE_CONFLICT:
        if (ic->mpa)
            cproblem(d, ic, C_CONFLICT,
                     "%s: retransmitted segment (frame %" PRIu64 ") differs from the first copy "
                     "in %" PRIu64 " bytes; the first copy is used",
                     dlabel(ic, dir), ev->frame, ev->len);
        break;
    case UIW_RE_FIN:
        D->fin = true;
        if (D->phase == PH_FPDU && !uiw_rx_idle(&D->rx) && D->skip_to <= ev->off) {
            if (loud(d)) {
                prefix(d, ic, dir, ev->frame, ev->ts);
                fprintf(d->out, "FIN\n");
            }
            violation(d, ic, V_FRAMING,
                      "%s: TCP FIN inside an FPDU (the stream ends with a partial FPDU)",
                      dlabel(ic, dir));
        } else if (D->phase == PH_MPA) {
            violation(d, ic, V_MPA_FRAME, "%s: TCP FIN inside the MPA frame (%zu bytes)",
                      dlabel(ic, dir), D->mpa_have);
            D->phase = PH_STOPPED;
        }
        break;
    case UIW_RE_RST:
        if (active && loud(d) && ic->mpa) {
            prefix(d, ic, dir, ev->frame, ev->ts);
            fprintf(d->out, "TCP RST\n");
        }
        break;
    default:
        break;
    }
}

static void on_conn_end(void *ctx, uiw_tcp_conn *c)
{
    uiw_dump *d = ctx;
    iw_conn *ic = state_of(c);
    if (!ic)
        return;
    if (ic->mpa) {
        check_order(d, ic, true);
        for (int x = 0; x < 2; x++) {
            iw_dir *D = &ic->d[x];
            if (D->phase == PH_FPDU && !uiw_rx_idle(&D->rx) && !D->fin)
                cproblem(d, ic, C_INCOMPLETE, "%s: the capture ends inside an FPDU", dlabel(ic, x));
            if (D->phase == PH_MPA && !D->fin)
                cproblem(d, ic, C_INCOMPLETE, "%s: the capture ends inside the MPA frame",
                         dlabel(ic, x));
            if (D->phase == PH_PENDING && D->pend_len && ic->d[!x].phase != PH_NOT_MPA)
                cproblem(d, ic, C_INCOMPLETE,
                         "%s: %zu bytes not decoded: the peer's MPA frame was not seen",
                         dlabel(ic, x), D->pend_len);
            if (!c->half[x].syn_seen)
                cproblem(d, ic, C_MIDSTREAM, "%s: no SYN seen (capture started mid-connection)",
                         dlabel(ic, x));
        }
        if (!ic->negotiated && ic->init_ep >= 0 && !ic->d[!ic->init_ep].f_ok &&
            ic->d[!ic->init_ep].phase != PH_NOT_MPA)
            cproblem(d, ic, C_INCOMPLETE, "no MPA Reply in the capture");
    }
    for (int x = 0; x < 2; x++) {
        iw_dir *D = &ic->d[x];
        stream_close(D);
        free(D->pend);
        D->pend = NULL;
        free(D->map);
        D->map = NULL;
        free(D->reads.e);
        free(D->atomics.e);
        D->reads.e = D->atomics.e = NULL;
    }
}

static const uiw_tcp_ops tcp_ops = {.data = on_data, .event = on_event, .conn_end = on_conn_end};

/* ------------------------------------------------------------------------
 * Summaries
 * ---------------------------------------------------------------------- */

static void print_ops(uiw_dump *d, const dstats *s)
{
    bool first = true;
    for (int op = 0; op < 16; op++) {
        if (!s->op_fpdus[op])
            continue;
        fprintf(d->out, "%s%s %" PRIu64, first ? "" : ", ", op_name((unsigned)op), s->op_fpdus[op]);
        if (s->op_msgs[op] != s->op_fpdus[op])
            fprintf(d->out, " (%" PRIu64 " msgs)", s->op_msgs[op]);
        first = false;
    }
    if (first)
        fprintf(d->out, "none");
}

static void print_vstats(uiw_dump *d, const char *indent, const vstats *vs)
{
    uint64_t n = vsum(vs);
    fprintf(d->out, "%sviolations: %" PRIu64, indent, n);
    if (n) {
        fprintf(d->out, " (");
        bool first = true;
        for (int i = 0; i < V_COUNT; i++)
            if (vs->v[i]) {
                fprintf(d->out, "%s%s %" PRIu64, first ? "" : ", ", vinfo[i].name, vs->v[i]);
                first = false;
            }
        fprintf(d->out, ")");
    }
    fprintf(d->out, "\n%stolerated: ", indent);
    bool any = false;
    for (int q = 0; q < UIW_QUIRK_COUNT; q++)
        if (vs->q[q]) {
            fprintf(d->out, "%s%s %" PRIu64, any ? ", " : "", qinfo[q].name, vs->q[q]);
            any = true;
        }
    if (!any)
        fprintf(d->out, "none");
    fprintf(d->out, "\n%scapture problems: ", indent);
    any = false;
    for (int i = 0; i < C_COUNT; i++)
        if (vs->c[i]) {
            fprintf(d->out, "%s%s %" PRIu64, any ? ", " : "", cnames[i], vs->c[i]);
            any = true;
        }
    if (!any)
        fprintf(d->out, "none");
    fprintf(d->out, "\n%swarnings: ", indent);
    any = false;
    for (int i = 0; i < W_COUNT; i++)
        if (vs->w[i]) {
            fprintf(d->out, "%s%s %" PRIu64, any ? ", " : "", winfo[i].name, vs->w[i]);
            any = true;
        }
    if (!any)
        fprintf(d->out, "none");
    fputc('\n', d->out);
}

/* "segment alignment: A of N FPDUs start a TCP segment" */
static void print_align(uiw_dump *d, const char *lead, const dstats *s, uint32_t max_seg)
{
    fprintf(d->out, "%ssegment alignment: %" PRIu64 " of %" PRIu64 " FPDUs start a TCP segment",
            lead, s->seg_aligned, s->seg_fpdus);
    if (max_seg)
        fprintf(d->out, ", largest segment payload %u bytes", max_seg);
    if (s->seg_retx)
        fprintf(d->out, " (%" PRIu64 " FPDUs first carried by a retransmission not counted)",
                s->seg_retx);
    fputc('\n', d->out);
    fprintf(d->out,
            "%ssegment packing: %" PRIu64 " of %" PRIu64
            " FPDUs lie whole in a TCP segment that starts with an FPDU (RFC 5044 Appendix A.1)\n",
            lead, s->seg_whole, s->seg_fpdus);
    fprintf(d->out,
            "%ssegment starts: %" PRIu64 " of %" PRIu64 " TCP segments start with an FPDU, %" PRIu64
            " of them hold whole FPDUs only (RFC 5044 §2 \"FPDU Alignment\")\n",
            lead, s->seg_aligned, s->seg_segs, s->seg_integral);
    if (s->emss_events)
        fprintf(
            d->out,
            "%ssegment EMSS changes: %" PRIu64
            " segments carried or followed SACK blocks (RFC 5044 §5.1 "
            "\"Changes in EMSS due to varying TCP options\"); until a segment started with an "
            "FPDU again, %" PRIu64 " segments did not start with one and %" PRIu64
            " FPDUs were not whole in one that did; at most %" PRIu64 " such segments in a row\n",
            lead, s->emss_events, s->emss_segs - s->emss_aligned, s->emss_split, s->emss_run_max);
}

static void print_crc(uiw_dump *d, const char *indent, const dstats *s)
{
    fprintf(d->out,
            "%sCRC: good %" PRIu64 ", bad %" PRIu64 ", not negotiated %" PRIu64
            " (of which field non-zero %" PRIu64 ")\n",
            indent, s->crc_good, s->crc_bad, s->crc_off, s->crc_off_nonzero);
}

static void conn_summary(uiw_dump *d, iw_conn *ic, uiw_tcp_conn *c)
{
    int a = ic->init_ep >= 0 ? ic->init_ep : 0, b = !a;
    char ea[80], eb[80];
    uiw_endpoint_str(&c->addr[a], c->port[a], ea, sizeof(ea));
    uiw_endpoint_str(&c->addr[b], c->port[b], eb, sizeof(eb));
    fprintf(d->out,
            "== c%u %s (a, initiator) <-> %s (b, responder), frames %" PRIu64 "-%" PRIu64 "\n",
            c->id, ea, eb, c->first_frame, c->last_frame);
    if (ic->negotiated) {
        const uiw_mpa_frame *rq = &ic->d[a].f, *rp = &ic->d[b].f;
        char o1[32];
        fprintf(d->out, "   MPA rev %u/%u, %s, CRC %s, markers a>b %s b>a %s", rq->rev, rp->rev,
                ic->enhanced ? "RFC 6581 enhanced" : "not enhanced", ic->crc ? "on" : "off",
                ic->markers[a] ? "on" : "off", ic->markers[b] ? "on" : "off");
        if (ic->enhanced)
            fprintf(d->out, ", IRD/ORD a %u/%u b %u/%u", rq->ird, rq->ord, rp->ird, rp->ord);
        if (ic->p2p)
            fprintf(d->out, ", P2P RTR usable %s", rtr_str(ic->rtr_common, o1, sizeof(o1)));
        if (ic->rejected)
            fprintf(d->out, ", REJECTED");
        fputc('\n', d->out);
    } else {
        fprintf(d->out, "   MPA negotiation not seen completely\n");
    }
    for (int e = 0; e < 2; e++) {
        int x = e == 0 ? a : b;
        const dstats *s = &ic->d[x].st;
        fprintf(d->out,
                "   %s: %" PRIu64 " FPDUs, %" PRIu64 " messages, %" PRIu64
                " payload bytes, %" PRIu64 " stream bytes: ",
                e == 0 ? "a>b" : "b>a", s->fpdus, s->messages, s->payload, s->stream_bytes);
        print_ops(d, s);
        fputc('\n', d->out);
    }
    dstats both = ic->d[0].st;
    dstats_add(&both, &ic->d[1].st);
    print_crc(d, "   ", &both);
    const uiw_reasm_stats *r0 = &c->half[0].st, *r1 = &c->half[1].st;
    fprintf(d->out,
            "   TCP: retransmitted/overlapping bytes %" PRIu64 ", out-of-order segments %" PRIu64
            ", gaps %" PRIu64 "\n",
            r0->dup_bytes + r1->dup_bytes, r0->ooo_segments + r1->ooo_segments,
            r0->gaps + r1->gaps);
    print_align(d, "   a>b ", &ic->d[a].st, c->half[a].st.max_seg);
    print_align(d, "   b>a ", &ic->d[b].st, c->half[b].st.max_seg);
    print_vstats(d, "   ", &ic->vs);
}

static void file_summary(uiw_dump *d, uiw_tcp_table *tab)
{
    totals *T = &d->file;
    for (uiw_tcp_conn *c = tab->all; c; c = c->next) {
        iw_conn *ic = state_of(c);
        T->tcp_conns++;
        if (ic && ic->mpa) {
            T->iw_conns++;
            conn_summary(d, ic, c);
            dstats_add(&T->st, &ic->d[0].st);
            dstats_add(&T->st, &ic->d[1].st);
            vstats_add(&T->vs, &ic->vs);
        } else if ((c->half[0].st.bytes || c->half[1].st.bytes) &&
                   (!c->half[0].syn_seen || !c->half[1].syn_seen || c->user == &start_lost)) {
            T->undecodable++;
            T->vs.c[C_MIDSTREAM]++;
            char e0[80], e1[80];
            fprintf(d->out,
                    "== c%u %s <-> %s: %s and no MPA frame at the start of the capture: "
                    "could not be decoded from its start (%" PRIu64 "/%" PRIu64 " bytes seen)\n",
                    c->id, uiw_endpoint_str(&c->addr[0], c->port[0], e0, sizeof(e0)),
                    uiw_endpoint_str(&c->addr[1], c->port[1], e1, sizeof(e1)),
                    c->user == &start_lost ? "the first bytes missing" : "no SYN",
                    c->half[0].st.bytes, c->half[1].st.bytes);
        }
    }
}

static void print_totals(uiw_dump *d, const char *what, const totals *T)
{
    fprintf(d->out,
            "== total %s: %" PRIu64 " frames, %" PRIu64 " TCP connections, %" PRIu64
            " iWARP connections, %" PRIu64 " FPDUs, %" PRIu64 " messages, %" PRIu64
            " payload bytes\n",
            what, T->frames, T->tcp_conns, T->iw_conns, T->st.fpdus, T->st.messages, T->st.payload);
    fprintf(d->out, "   opcodes: ");
    print_ops(d, &T->st);
    fputc('\n', d->out);
    print_crc(d, "   ", &T->st);
    print_align(d, "   ", &T->st, 0);
    if (T->fragments || T->truncated || T->malformed)
        fprintf(d->out,
                "   frames skipped: IP fragments %" PRIu64 ", malformed %" PRIu64
                "; TCP payload cut by the snap length: %" PRIu64 " frames\n",
                T->fragments, T->malformed, T->truncated);
    print_vstats(d, "   ", &T->vs);
}

/* ------------------------------------------------------------------------
 * Files
 * ---------------------------------------------------------------------- */

uiw_dump *uiw_dump_new(const uiw_dump_opts *opts, FILE *out)
{
    uiw_dump *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->o = *opts;
    d->out = out;
    d->next_conn_id = 1;
    return d;
}

static void on_note(void *ctx, uint64_t frame, double ts, int kind)
{
    uiw_dump *d = ctx;
    if (!loud(d))
        return;
    if (kind == UIW_FRAME_IP_FRAGMENT)
        fprintf(d->out, "%6" PRIu64 " %10.6f    IP fragment skipped (not reassembled)\n", frame,
                ts);
    else if (kind == UIW_FRAME_MALFORMED)
        fprintf(d->out, "%6" PRIu64 " %10.6f    malformed IP/TCP headers, frame skipped\n", frame,
                ts);
}

int uiw_dump_file(uiw_dump *d, const char *path)
{
    char err[512];
    uiw_capture *cap = uiw_capture_open(path, err, sizeof(err));
    if (!cap) {
        fprintf(stderr, "uiwarp dump: %s\n", err);
        return -1;
    }
    if (d->o.streams_dir)
        mkdir(d->o.streams_dir, 0777);
    memset(&d->file, 0, sizeof(d->file));
    d->conns = d->conns_tail = NULL;
    d->path = path;
    fprintf(d->out, "## %s (%s)\n", path, uiw_capture_link_name(cap));

    uiw_tcp_table tab;
    uiw_tcp_table_init(&tab, &tcp_ops, d, d->o.max_buffer, d->next_conn_id);
    uiw_pkt pkt;
    int rc;
    while ((rc = uiw_capture_next(cap, &pkt, on_note, d, err, sizeof(err))) == 1) {
        if (pkt.missing && loud(d))
            fprintf(d->out,
                    "%6" PRIu64 " %10.6f    TCP payload cut by the snap length (%u of %u bytes)\n",
                    pkt.frame, pkt.ts, pkt.len, pkt.len + pkt.missing);
        if (uiw_tcp_table_packet(&tab, &pkt) < 0) {
            snprintf(err, sizeof(err), "out of memory");
            rc = -1;
            break;
        }
    }
    uiw_tcp_table_finish(&tab);
    d->next_conn_id = tab.next_id;
    const uiw_capture_stats *cs = uiw_capture_get_stats(cap);
    d->file.files = 1;
    d->file.frames = cs->frames;
    d->file.fragments = cs->fragments;
    d->file.truncated = cs->truncated;
    d->file.malformed = cs->malformed;
    file_summary(d, &tab);
    print_totals(d, path, &d->file);

    /* accumulate */
    totals *A = &d->all, *F = &d->file;
    A->files++;
    A->frames += F->frames;
    A->tcp_conns += F->tcp_conns;
    A->iw_conns += F->iw_conns;
    A->undecodable += F->undecodable;
    A->fragments += F->fragments;
    A->truncated += F->truncated;
    A->malformed += F->malformed;
    dstats_add(&A->st, &F->st);
    vstats_add(&A->vs, &F->vs);

    for (iw_conn *ic = d->conns; ic;) {
        iw_conn *n = ic->next;
        free(ic);
        ic = n;
    }
    d->conns = d->conns_tail = NULL;
    for (uiw_tcp_conn *c = tab.all; c; c = c->next)
        c->user = NULL;
    uiw_tcp_table_free(&tab);
    uiw_capture_close(cap);
    if (rc < 0) {
        fprintf(stderr, "uiwarp dump: %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

void uiw_dump_grand_total(uiw_dump *d)
{
    char what[64];
    snprintf(what, sizeof(what), "(%" PRIu64 " files)", d->all.files);
    print_totals(d, what, &d->all);
}

uint64_t uiw_dump_violations(const uiw_dump *d)
{
    return vsum(&d->all.vs);
}

uint64_t uiw_dump_fpdus(const uiw_dump *d)
{
    return d->all.st.fpdus;
}

uint64_t uiw_dump_count(const uiw_dump *d, const char *name)
{
    for (int i = 0; i < V_COUNT; i++)
        if (strcmp(name, vinfo[i].name) == 0)
            return d->all.vs.v[i];
    for (int i = 0; i < UIW_QUIRK_COUNT; i++)
        if (strcmp(name, qinfo[i].name) == 0)
            return d->all.vs.q[i];
    for (int i = 0; i < C_COUNT; i++)
        if (strcmp(name, cnames[i]) == 0)
            return d->all.vs.c[i];
    for (int i = 0; i < W_COUNT; i++)
        if (strcmp(name, winfo[i].name) == 0)
            return d->all.vs.w[i];
    if (strcmp(name, "segment-fpdus") == 0)
        return d->all.st.seg_fpdus;
    if (strcmp(name, "segment-aligned") == 0)
        return d->all.st.seg_aligned;
    if (strcmp(name, "segment-whole") == 0)
        return d->all.st.seg_whole;
    if (strcmp(name, "segment-retransmitted") == 0)
        return d->all.st.seg_retx;
    if (strcmp(name, "segment-segments") == 0)
        return d->all.st.seg_segs;
    if (strcmp(name, "segment-integral") == 0)
        return d->all.st.seg_integral;
    if (strcmp(name, "segment-emss-changes") == 0)
        return d->all.st.emss_events;
    if (strcmp(name, "segment-emss-unaligned") == 0)
        return d->all.st.emss_segs - d->all.st.emss_aligned;
    if (strcmp(name, "segment-emss-split") == 0)
        return d->all.st.emss_split;
    if (strcmp(name, "segment-emss-run") == 0)
        return d->all.st.emss_run_max;
    if (strcmp(name, "iwarp-connections") == 0)
        return d->all.iw_conns;
    if (strcmp(name, "undecodable") == 0)
        return d->all.undecodable;
    if (strcmp(name, "crc-good") == 0)
        return d->all.st.crc_good;
    if (strcmp(name, "crc-bad") == 0)
        return d->all.st.crc_bad;
    return 0;
}

void uiw_dump_free(uiw_dump *d)
{
    free(d);
}
