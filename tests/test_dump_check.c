/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The `uiwarp dump` checker on synthetic captures: each scenario writes a
 * small pcap (frames built here, FPDUs encoded with the wire core), runs
 * the checker on it and compares the counts per violation class, tolerated
 * quirk and capture problem with what the scenario contains. Every count
 * not listed must be zero, so false positives fail too.
 */
#include "check.h"
#include "testutil.h"
#include "uiwarp/wire.h"

#include <pcap/pcap.h>
#include <stdarg.h>
#include <unistd.h>

#ifndef DLT_LINUX_SLL2
#define DLT_LINUX_SLL2 276
#endif

/* ------------------------------------------------------------------------
 * Capture writer: one TCP connection a (client, initiator) <-> b
 * ---------------------------------------------------------------------- */

typedef struct sc {
    pcap_t *dead;
    pcap_dumper_t *pd;
    int dlt, family;
    uint32_t seq[2]; /* next sequence number of side 0 (a) and 1 (b) */
    uint16_t port[2];
    uint64_t usec;
    bool sack[2]; /* this side's frames carry a SACK option (RFC 2018) */
    char path[64];
} sc;

static void put16(uint8_t *p, unsigned v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    put16(p, v >> 16);
    put16(p + 2, v & 0xffff);
}

static void sc_frame(sc *s, int side, uint8_t flags, uint32_t seq, const uint8_t *p, size_t n)
{
    static uint8_t f[70000];
    size_t off = 0;
    int v6 = s->family == 6;
    switch (s->dlt) {
    case DLT_EN10MB:
        memset(f, 0, 14);
        put16(f + 12, v6 ? 0x86dd : 0x0800);
        off = 14;
        break;
    case DLT_LINUX_SLL2:
        memset(f, 0, 20);
        put16(f, v6 ? 0x86dd : 0x0800);
        off = 20;
        break;
    case DLT_NULL: {
        uint32_t af = v6 ? 10 : 2; /* host byte order, Linux AF_INET6 */
        memcpy(f, &af, 4);
        off = 4;
        break;
    }
    default:
        off = 0;
        break;
    }
    uint8_t *ip = f + off;
    size_t iphl = v6 ? 40 : 20;
    uint8_t *tcp = ip + iphl;
    size_t th = s->sack[side] ? 32 : 20; /* NOP NOP SACK(10): one block */
    memset(ip, 0, iphl + th);
    if (v6) {
        ip[0] = 0x60;
        put16(ip + 4, (unsigned)(th + n));
        ip[6] = 6;
        ip[7] = 64;
        ip[8 + 15] = (uint8_t)(1 + side); /* ::1 / ::2 */
        ip[24 + 15] = (uint8_t)(2 - side);
    } else {
        ip[0] = 0x45;
        put16(ip + 2, (unsigned)(20 + th + n));
        ip[8] = 64;
        ip[9] = 6;
        uint8_t a[4] = {10, 0, 0, 1}, b[4] = {10, 0, 0, 2};
        memcpy(ip + 12, side ? b : a, 4);
        memcpy(ip + 16, side ? a : b, 4);
    }
    put16(tcp, s->port[side]);
    put16(tcp + 2, s->port[!side]);
    put32(tcp + 4, seq);
    put32(tcp + 8, s->seq[!side]);
    tcp[12] = (uint8_t)(th / 4) << 4;
    tcp[13] = flags;
    put16(tcp + 14, 65535);
    if (th > 20) {
        uint8_t o[12] = {1, 1, 5, 10};
        put32(o + 4, s->seq[!side] + 1000);
        put32(o + 8, s->seq[!side] + 2000);
        memcpy(tcp + 20, o, sizeof(o));
    }
    if (n)
        memcpy(tcp + th, p, n);
    size_t len = off + iphl + th + n;
    struct pcap_pkthdr h = {.caplen = (bpf_u_int32)len, .len = (bpf_u_int32)len};
    s->usec += 100;
    h.ts.tv_sec = (time_t)(1700000000 + s->usec / 1000000);
    h.ts.tv_usec = (suseconds_t)(s->usec % 1000000);
    pcap_dump((u_char *)s->pd, &h, f);
}

static void sc_open(sc *s, int dlt, int family, bool syn)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "/tmp/uiw_dump_check_XXXXXX");
    int fd = mkstemp(s->path);
    close(fd);
    s->dlt = dlt;
    s->family = family;
    s->dead = pcap_open_dead(dlt, 262144);
    s->pd = pcap_dump_open(s->dead, s->path);
    s->port[0] = 40000;
    s->port[1] = 7174;
    s->seq[0] = 0xfffff000u; /* wraps during the bigger scenarios */
    s->seq[1] = 1000;
    if (syn) {
        sc_frame(s, 0, 0x02, s->seq[0]++, NULL, 0);
        sc_frame(s, 1, 0x12, s->seq[1]++, NULL, 0);
        sc_frame(s, 0, 0x10, s->seq[0], NULL, 0);
    }
}

static void sc_send(sc *s, int side, const uint8_t *p, size_t n)
{
    sc_frame(s, side, 0x18, s->seq[side], p, n);
    s->seq[side] += (uint32_t)n;
}

/* bytes cut into segments of at most seg bytes */
static void sc_send_split(sc *s, int side, const uint8_t *p, size_t n, size_t seg)
{
    while (n) {
        size_t k = n < seg ? n : seg;
        sc_send(s, side, p, k);
        p += k;
        n -= k;
    }
}

static void sc_lose(sc *s, int side, size_t n)
{
    s->seq[side] += (uint32_t)n;
}

static void sc_fin(sc *s, int side)
{
    sc_frame(s, side, 0x11, s->seq[side]++, NULL, 0);
}

static void sc_close(sc *s)
{
    pcap_dump_close(s->pd);
    pcap_close(s->dead);
}

/* ------------------------------------------------------------------------
 * MPA frames and FPDUs
 * ---------------------------------------------------------------------- */

typedef struct mpa_opts {
    bool crc, markers, p2p, reject, enhanced;
    uint8_t rtr, rev, res;
    uint16_t ird, ord;
} mpa_opts;

static size_t mpa(uint8_t *out, int kind, const mpa_opts *o)
{
    uiw_mpa_frame f;
    memset(&f, 0, sizeof(f));
    f.kind = (uint8_t)kind;
    f.crc = o->crc;
    f.markers = o->markers;
    f.reject = o->reject;
    f.enhanced = o->enhanced;
    f.rev = o->rev ? o->rev : 2;
    f.res = o->res;
    f.p2p = o->p2p;
    f.rtr = o->rtr;
    f.ird = o->ird;
    f.ord = o->ord;
    int n = uiw_mpa_encode(&f, out, UIW_MPA_MAX_FRAME);
    CHECK(n > 0);
    return n > 0 ? (size_t)n : 0;
}

static bool g_crc; /* CRC of the current scenario */

static size_t fpdu(uint8_t *out, const uiw_hdr *h, const void *pl, size_t n)
{
    int hl = uiw_hdr_encode(h, out + 2, 256);
    CHECK(hl > 0);
    if (hl <= 0)
        return 0;
    unsigned ulpdu = (unsigned)hl + (unsigned)n;
    put16(out, ulpdu);
    if (n)
        memcpy(out + 2 + hl, pl, n);
    unsigned pad = uiw_mpa_pad(ulpdu);
    memset(out + 2 + ulpdu, 0, pad);
    size_t tot = 2 + ulpdu + pad;
    if (g_crc)
        uiw_crc32c_put(out + tot, uiw_crc32c(out, tot));
    else
        memset(out + tot, 0, 4);
    return tot + 4;
}

static uiw_hdr base(uint8_t op, bool tagged, bool last)
{
    uiw_hdr h;
    memset(&h, 0, sizeof(h));
    h.opcode = op;
    h.tagged = tagged;
    h.last = last;
    h.ddp_version = UIW_DDP_VERSION;
    h.rdmap_version = UIW_RDMAP_VERSION;
    return h;
}

static uiw_hdr h_send(uint32_t msn, uint32_t mo, bool last)
{
    uiw_hdr h = base(UIW_OP_SEND, false, last);
    h.qn = UIW_QN_SEND;
    h.msn = msn;
    h.mo = mo;
    return h;
}

static uiw_hdr h_write(uint32_t stag, uint64_t to, bool last)
{
    uiw_hdr h = base(UIW_OP_WRITE, true, last);
    h.stag = stag;
    h.to = to;
    return h;
}

static uiw_hdr h_rresp(uint32_t stag, uint64_t to, bool last)
{
    uiw_hdr h = base(UIW_OP_READ_RESP, true, last);
    h.stag = stag;
    h.to = to;
    return h;
}

static uiw_hdr h_rreq(uint32_t msn, uint32_t sink, uint64_t sto, uint32_t size)
{
    uiw_hdr h = base(UIW_OP_READ_REQ, false, true);
    h.qn = UIW_QN_READ_REQ;
    h.msn = msn;
    h.u.rreq.sink_stag = sink;
    h.u.rreq.sink_to = sto;
    h.u.rreq.read_size = size;
    h.u.rreq.src_stag = 0x5000;
    h.u.rreq.src_to = 0x9000;
    return h;
}

static uint8_t payload[65536];
static uint8_t buf[70000];

/* Send one FPDU from side in one TCP segment. */
static void put(sc *s, int side, uiw_hdr h, size_t n)
{
    size_t len = fpdu(buf, &h, payload, n);
    sc_send(s, side, buf, len);
}

static void handshake(sc *s, const mpa_opts *rq, const mpa_opts *rp)
{
    size_t n = mpa(buf, UIW_MPA_REQUEST, rq);
    sc_send(s, 0, buf, n);
    n = mpa(buf, UIW_MPA_REPLY, rp);
    sc_send(s, 1, buf, n);
}

static const mpa_opts STD = {.enhanced = true, .ird = 4, .ord = 4};

/* ------------------------------------------------------------------------
 * Running the checker
 * ---------------------------------------------------------------------- */

/* Every violation class and quirk the checker knows, the capture problems
 * and the warning classes. */
static const char *capture_names[] = {"no-syn",       "gap",
                                      "buffer-limit", "conflicting-retransmission",
                                      "incomplete",   "decoding-stopped"};
static const char *all_names[128];

static void init_names(void)
{
    int n = 0;
    for (int v = 0; v < uiw_violation_count(); v++)
        all_names[n++] = uiw_violation_name(v);
    for (int q = 0; q < uiw_quirk_count(); q++)
        all_names[n++] = uiw_quirk_name(q);
    for (size_t c = 0; c < sizeof(capture_names) / sizeof(capture_names[0]); c++)
        all_names[n++] = capture_names[c];
    for (int w = 0; w < uiw_warning_count(); w++)
        all_names[n++] = uiw_warning_name(w);
    all_names[n] = NULL;
}

/* expect: "name=count" strings, NULL-terminated; every other name must be 0 */
static void run(const char *what, sc *s, const uiw_dump_opts *opts, ...)
{
    sc_close(s);
    uiw_dump_opts o = {0};
    if (opts)
        o = *opts;
    FILE *out = tmpfile();
    uiw_dump *d = uiw_dump_new(&o, out);
    int rc = uiw_dump_file(d, s->path);
    CHECK_EQ(rc, 0);
    unsigned long before = tu_failed;
    CHECK_EQ(uiw_dump_count(d, "iwarp-connections"), 1);
    uint64_t want[128] = {0};
    va_list ap;
    va_start(ap, opts);
    for (const char *e = va_arg(ap, const char *); e; e = va_arg(ap, const char *)) {
        const char *eq = strchr(e, '=');
        bool found = false;
        for (int i = 0; all_names[i]; i++)
            if (strncmp(all_names[i], e, (size_t)(eq - e)) == 0 && all_names[i][eq - e] == '\0') {
                want[i] = strtoull(eq + 1, NULL, 10);
                found = true;
            }
        if (!found) {
            /* the alignment figures: checked when given */
            char name[64];
            snprintf(name, sizeof(name), "%.*s", (int)(eq - e), e);
            found = strncmp(name, "segment-", 8) == 0;
            if (found && uiw_dump_count(d, name) != strtoull(eq + 1, NULL, 10))
                fprintf(stderr, "%s: %s = %llu, expected %s\n", what, name,
                        (unsigned long long)uiw_dump_count(d, name), eq + 1);
            if (found)
                CHECK_EQ(uiw_dump_count(d, name), strtoull(eq + 1, NULL, 10));
        }
        if (!found)
            fprintf(stderr, "%s: unknown name in expectation %s\n", what, e);
        CHECK(found);
    }
    va_end(ap);
    for (int i = 0; all_names[i]; i++) {
        uint64_t got = uiw_dump_count(d, all_names[i]);
        if (got != want[i])
            fprintf(stderr, "%s: %s = %llu, expected %llu\n", what, all_names[i],
                    (unsigned long long)got, (unsigned long long)want[i]);
        CHECK_EQ(got, want[i]);
    }
    if (tu_failed != before || getenv("UIW_TEST_VERBOSE")) {
        fprintf(stderr, "---- %s: uiwarp dump output:\n", what);
        rewind(out);
        char line[1024];
        while (fgets(line, sizeof(line), out))
            fputs(line, stderr);
    }
    fclose(out);
    uiw_dump_free(d);
    unlink(s->path);
}

/* ------------------------------------------------------------------------
 * Scenarios
 * ---------------------------------------------------------------------- */

/* A clean client-server exchange: Sends (one in three segments), a Write in
 * two segments, a Read with a two-segment response, Send with Invalidate,
 * Immediate Data, an Atomic, a Terminate at the end; FPDUs split across and
 * packed into TCP segments. */
static void clean_traffic(sc *s)
{
    put(s, 0, h_send(1, 0, true), 100);
    put(s, 1, h_send(1, 0, true), 7);
    /* a 3-segment Send: MO 0, 1000, 2000 */
    put(s, 0, h_send(2, 0, false), 1000);
    put(s, 0, h_send(2, 1000, false), 1000);
    put(s, 0, h_send(2, 2000, true), 123);
    /* a 2-segment Write */
    put(s, 1, h_write(0x1234, 0x10000, false), 1200);
    put(s, 1, h_write(0x1234, 0x10000 + 1200, true), 33);
    /* Read of 2000 bytes, response in two segments, packed into one TCP
     * segment with a Send after it */
    put(s, 0, h_rreq(1, 0xabc, 0x7000, 2000), 0);
    size_t n;
    uiw_hdr r1 = h_rresp(0xabc, 0x7000, false), r2 = h_rresp(0xabc, 0x7000 + 1500, true);
    n = fpdu(buf, &r1, payload, 1500);
    n += fpdu(buf + n, &r2, payload, 500);
    uiw_hdr s2 = h_send(2, 0, true);
    n += fpdu(buf + n, &s2, payload, 10);
    sc_send_split(s, 1, buf, n, 700); /* FPDUs cut across segments */
    /* Send with Invalidate */
    uiw_hdr si = base(UIW_OP_SEND_INV, false, true);
    si.qn = 0;
    si.msn = 3;
    si.inv_stag = 0x77;
    put(s, 0, si, 5);
    /* Immediate Data (8 bytes in the header) */
    uiw_hdr im = base(UIW_OP_IMM_DATA, false, true);
    im.qn = 0;
    im.msn = 4;
    memcpy(im.u.imm, "12345678", 8);
    put(s, 0, im, 0);
    /* Atomic FetchAdd and its response */
    uiw_hdr ar = base(UIW_OP_ATOMIC_REQ, false, true);
    ar.qn = UIW_QN_READ_REQ;
    ar.msn = 2;
    ar.u.atomic_req.aop = UIW_AOP_FETCH_ADD;
    ar.u.atomic_req.req_id = 0x42;
    ar.u.atomic_req.stag = 0x99;
    ar.u.atomic_req.to = 0x1000;
    ar.u.atomic_req.add_swap = 1;
    put(s, 0, ar, 0);
    uiw_hdr aresp = base(UIW_OP_ATOMIC_RESP, false, true);
    aresp.qn = UIW_QN_ATOMIC_RESP;
    aresp.msn = 1;
    aresp.u.atomic_resp.req_id = 0x42;
    aresp.u.atomic_resp.orig_value = 5;
    put(s, 1, aresp, 0);
    /* a Terminate from b: RDMAP catastrophic, no attachments */
    uiw_hdr t = base(UIW_OP_TERMINATE, false, true);
    t.qn = UIW_QN_TERMINATE;
    t.msn = 1;
    t.u.term.cause = (uiw_term_cause){UIW_LAYER_RDMAP, UIW_RDMAP_ET_CATASTROPHIC, 0};
    put(s, 1, t, 0);
    sc_fin(s, 0);
    sc_fin(s, 1);
}

static void test_clean(void)
{
    int dlts[] = {DLT_EN10MB, DLT_LINUX_SLL2, DLT_NULL, DLT_RAW};
    for (int i = 0; i < 4; i++) {
        for (int fam = 4; fam <= 6; fam += 2) {
            for (int crc = 0; crc < 2; crc++) {
                sc s;
                sc_open(&s, dlts[i], fam, true);
                mpa_opts rq = STD, rp = STD;
                rq.crc = crc;
                g_crc = crc;
                handshake(&s, &rq, &rp);
                clean_traffic(&s);
                char what[64];
                snprintf(what, sizeof(what), "clean dlt %d IPv%d crc %d", dlts[i], fam, crc);
                run(what, &s, NULL, NULL);
            }
        }
    }
    g_crc = false;
}

/* Markers both ways, CRC on: FPDUs built by the wire core's segmenter.
 * With flip, one payload byte of the third message is corrupted on the wire:
 * exactly one CRC violation, and decoding resumes at the next FPDU with the
 * marker grid intact (uiw_rx_init_at), so nothing else is reported. */
static void markers_run(bool flip)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD, rp = STD;
    rq.markers = rp.markers = true;
    rq.crc = true;
    handshake(&s, &rq, &rp);
    /* FPDU/segment alignment worked out here from the FPDUs the segmenter
     * builds (markers included, a leading one counted in its FPDU): starts
     * of a 1460-byte cut, and FPDUs crossing one although no longer than
     * the largest segment so far (the 24/28-byte MPA frames, then the
     * message segments) */
    unsigned aligned = 0, nfpdu = 0, split = 0, leading = 0;
    size_t maxseg[2] = {mpa(buf, UIW_MPA_REQUEST, &rq), mpa(buf, UIW_MPA_REPLY, &rp)};
    uiw_tx tx[2];
    uiw_tx_cfg cfg = {.crc = true, .markers = true, .max_fpdu = 1000};
    CHECK_EQ(uiw_tx_init(&tx[0], &cfg), 0);
    CHECK_EQ(uiw_tx_init(&tx[1], &cfg), 0);
    for (int m = 0; m < 6; m++) {
        int side = m & 1;
        uiw_hdr h = h_send((uint32_t)(m / 2 + 1), 0, true);
        struct iovec iov = {payload, (size_t)(700 + 900 * m)};
        uiw_tx_msg msg;
        CHECK_EQ(uiw_tx_msg_init(&msg, &h, &iov, 1, iov.iov_len), 0);
        static uiw_fpdu f;
        size_t n = 0;
        size_t fb[64], fl[64];
        int nf = 0;
        while (uiw_tx_next(&tx[side], &msg, &f) == 1) {
            CHECK(nf < 64);
            fb[nf] = n;
            fl[nf++] = f.bytes;
            leading += f.stream_off % UIW_MARKER_INTERVAL == 0;
            for (int i = 0; i < f.iovcnt; i++) {
                memcpy(buf + n, f.iov[i].iov_base, f.iov[i].iov_len);
                n += f.iov[i].iov_len;
            }
        }
        for (int i = 0; i < nf; i++) {
            size_t first = fb[i] / 1460, last = (fb[i] + fl[i] - 1) / 1460;
            for (size_t k = 0; k <= last; k++) { /* segments given by the FPDU's end */
                size_t len = n - k * 1460 < 1460 ? n - k * 1460 : 1460;
                if (len > maxseg[side])
                    maxseg[side] = len;
            }
            nfpdu++;
            aligned += fb[i] % 1460 == 0;
            split += last != first && fl[i] <= maxseg[side];
        }
        if (flip && m == 2)
            buf[n / 2] ^= 0x01;
        sc_send_split(&s, side, buf, n, 1460);
    }
    sc_fin(&s, 0);
    sc_fin(&s, 1);
    CHECK(leading >= 2); /* FPDUs that start with a marker (FPDUPTR 0) are in it */
    CHECK(split >= 1);
    CHECK(aligned < nfpdu);
    char sp[32], al[32], nn[32];
    snprintf(sp, sizeof(sp), "fpdu-split=%u", split);
    snprintf(al, sizeof(al), "segment-aligned=%u", aligned);
    snprintf(nn, sizeof(nn), "segment-fpdus=%u", nfpdu);
    if (flip)
        run("markers+crc, one byte flipped", &s, NULL, "crc=1", sp, al, nn, NULL);
    else
        run("markers+crc", &s, NULL, sp, al, nn, NULL);
}

static void test_markers(void)
{
    markers_run(false);
    markers_run(true);
}

/* Markers asked for by the responder (Reply M=1) but not inserted by the
 * initiator. */
static void test_markers_missing(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rp = STD;
    rp.markers = true;
    handshake(&s, &STD, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    put(&s, 1, h_send(1, 0, true), 10);
    run("markers missing", &s, NULL, "marker=1", "decoding-stopped=1", NULL);
}

static void test_msn_mo(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    put(&s, 0, h_send(3, 0, true), 10);   /* MSN 2 skipped */
    put(&s, 0, h_send(4, 0, false), 100); /* 2 segments, wrong MO on the second */
    put(&s, 0, h_send(4, 90, true), 10);
    put(&s, 1, h_send(1, 5, true), 10);  /* first segment with MO 5 */
    put(&s, 1, h_send(2, 0, false), 10); /* no L ... */
    put(&s, 1, h_send(3, 0, true), 10);  /* ... and the next message starts */
    run("msn/mo", &s, NULL, "msn=1", "mo=2", "message=1", NULL);
}

static void test_tagged(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    put(&s, 1, h_write(0x10, 0x1000, false), 100);
    put(&s, 1, h_write(0x10, 0x1000 + 200, false), 100); /* TO jump */
    put(&s, 1, h_write(0x11, 0x1000 + 300, true), 100);  /* STag change */
    run("tagged", &s, NULL, "tagged=2", NULL);
}

static void test_read(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    put(&s, 1, h_rresp(0x20, 0x100, true), 10); /* unsolicited */
    put(&s, 1, h_rreq(1, 0x30, 0x3000, 100), 0);
    put(&s, 0, h_rresp(0x31, 0x3000, true), 100); /* wrong sink STag */
    put(&s, 1, h_rreq(2, 0x30, 0x3000, 100), 0);
    put(&s, 0, h_rresp(0x30, 0x3000, true), 60); /* too short */
    put(&s, 1, h_rreq(3, 0x30, 0x3000, 0), 0);   /* zero-length: STag/TO unchecked */
    put(&s, 0, h_rresp(0xdead, 0xbeef, true), 0);
    run("read responses", &s, NULL, "read-resp=3", NULL);
}

static void test_ord(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD, rp = STD;
    rq.ird = 1;
    rq.ord = 1;
    rp.ird = 1;
    rp.ord = 1;
    handshake(&s, &rq, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    put(&s, 0, h_rreq(1, 0x30, 0x3000, 10), 0);
    put(&s, 0, h_rreq(2, 0x30, 0x3000, 10), 0); /* 2 outstanding, b's IRD is 1 */
    put(&s, 1, h_rresp(0x30, 0x3000, true), 10);
    put(&s, 1, h_rresp(0x30, 0x3000, true), 10);
    put(&s, 0, h_rreq(3, 0x30, 0x3000, 10), 0); /* 1 outstanding: fine */
    put(&s, 1, h_rresp(0x30, 0x3000, true), 10);
    run("ord", &s, NULL, "ord=1", NULL);
}

static void test_p2p(void)
{
    /* Write RTR negotiated, the initiator sends a Read RTR, then the
     * responder sends before ... no: the responder waits. */
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD, rp = STD;
    rq.p2p = rp.p2p = true;
    rq.rtr = UIW_RTR_WRITE | UIW_RTR_READ;
    rp.rtr = UIW_RTR_WRITE;
    handshake(&s, &rq, &rp);
    put(&s, 0, h_rreq(1, 0, 0, 0), 0); /* Read RTR: not the negotiated type */
    put(&s, 1, h_rresp(0, 0, true), 0);
    run("p2p wrong rtr", &s, NULL, "rtr=1", NULL);

    /* the right RTR */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &rq, &rp);
    put(&s, 0, h_write(1, 0, true), 0);
    put(&s, 1, h_send(1, 0, true), 10);
    run("p2p write rtr", &s, NULL, NULL);

    /* no RTR at all: a Send with data first */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &rq, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    run("p2p no rtr", &s, NULL, "rtr=1", NULL);

    /* no common RTR type: the initiator must terminate (LLP/MPA/7) */
    sc_open(&s, DLT_EN10MB, 4, true);
    rq.rtr = UIW_RTR_READ;
    rp.rtr = UIW_RTR_WRITE;
    handshake(&s, &rq, &rp);
    uiw_hdr t = base(UIW_OP_TERMINATE, false, true);
    t.qn = UIW_QN_TERMINATE;
    t.msn = 1;
    t.u.term.cause = (uiw_term_cause){UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_NO_MATCHING_RTR};
    put(&s, 0, t, 0);
    run("p2p no common rtr, terminate", &s, NULL, NULL);

    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &rq, &rp);
    put(&s, 0, h_write(1, 0, true), 0);
    run("p2p no common rtr, write anyway", &s, NULL, "rtr=1", NULL);
}

static void test_order(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 1, h_send(1, 0, true), 10); /* responder first */
    put(&s, 0, h_send(1, 0, true), 10);
    run("responder first", &s, NULL, "mpa-order=1", NULL);

    /* initiator sends an FPDU before the Reply */
    sc_open(&s, DLT_EN10MB, 4, true);
    size_t n = mpa(buf, UIW_MPA_REQUEST, &STD);
    sc_send(&s, 0, buf, n);
    put(&s, 0, h_send(1, 0, true), 10);
    n = mpa(buf, UIW_MPA_REPLY, &STD);
    sc_send(&s, 1, buf, n);
    put(&s, 1, h_send(1, 0, true), 10);
    run("initiator before reply", &s, NULL, "mpa-order=1", NULL);

    /* the responder's first FPDU after all of the initiator's first FPDU but
     * its trailer (pad and CRC: 6 bytes here): tolerated as siw-early-fpdu
     * (a siw responder and uiwarp's held trailer), a violation with
     * --strict; one byte more missing is a violation */
    for (int strict = 0; strict < 3; strict++) {
        uiw_hdr h = h_send(1, 0, true);
        uint8_t f[64];
        size_t len = fpdu(f, &h, payload, 10), cut = len - 6 - (strict == 2);
        sc_open(&s, DLT_EN10MB, 4, true);
        handshake(&s, &STD, &STD);
        sc_send(&s, 0, f, cut);
        put(&s, 1, h_send(1, 0, true), 10);
        sc_send(&s, 0, f + cut, len - cut);
        uiw_dump_opts o = {.strict_mask = strict == 1 ? ~0u : 0};
        if (strict == 0)
            run("responder before the initiator's trailer", &s, &o, "siw-early-fpdu=1", NULL);
        else if (strict == 1)
            run("responder before the initiator's trailer, strict", &s, &o, "mpa-order=1", NULL);
        else
            run("responder before the initiator's trailer and more", &s, &o, "mpa-order=1", NULL);
    }
}

static void test_mpa_fields(void)
{
    sc s;
    /* responder ORD above initiator IRD; Res bit 0x08 (siw GSO) tolerated */
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD, rp = STD;
    rq.ird = 2;
    rp.ord = 3;
    rp.res = 0x08;
    handshake(&s, &rq, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    run("mpa ird/ord + gso", &s, NULL, "mpa-rfc6581=1", "siw-mpa-gso=1", NULL);

    /* the same with --strict: the quirk becomes an mpa-reserved violation */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &rq, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    uiw_dump_opts strict = {.strict_mask = ~0u};
    run("mpa gso strict", &s, &strict, "mpa-rfc6581=1", "mpa-reserved=1", NULL);

    /* Res bit 0x01 in the Request, Rev 3 in the Reply, A/B/C/D rules */
    sc_open(&s, DLT_EN10MB, 4, true);
    rq = STD;
    rp = STD;
    rq.res = 0x01;
    rp.rev = 3;
    rq.rtr = UIW_RTR_SEND; /* B without A */
    rp.p2p = true;         /* A in the Reply, not in the Request */
    rp.rtr = UIW_RTR_WRITE;
    handshake(&s, &rq, &rp);
    put(&s, 0, h_send(1, 0, true), 10);
    run("mpa res/rev/flags", &s, NULL, "mpa-reserved=1", "mpa-rev=1", "mpa-rfc6581=2", NULL);

    /* enhanced Reply to a Rev 1 Request */
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts r1 = {.rev = 1};
    handshake(&s, &r1, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    run("mpa enhanced reply to rev 1", &s, NULL, "mpa-rfc6581=1", NULL);

    /* a rejected connection: no FPDUs decoded, no violation */
    sc_open(&s, DLT_EN10MB, 4, true);
    rp = STD;
    rp.reject = true;
    handshake(&s, &STD, &rp);
    sc_fin(&s, 1);
    run("mpa reject", &s, NULL, NULL);

    /* siw's Reject of a markers Request: R=1 with the RFC 6581 words all
     * zero, so A is not copied (docs/INTEROP.md): a tolerated quirk, a
     * violation with --strict; a Reject that drops A but keeps IRD/ORD
     * words stays a violation */
    sc_open(&s, DLT_EN10MB, 4, true);
    rq = STD;
    rq.markers = rq.p2p = true;
    rq.rtr = UIW_RTR_WRITE | UIW_RTR_READ;
    rp = (mpa_opts){.enhanced = true, .reject = true};
    handshake(&s, &rq, &rp);
    sc_fin(&s, 1);
    run("mpa siw reject words", &s, NULL, "siw-reject-words=1", NULL);
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &rq, &rp);
    sc_fin(&s, 1);
    run("mpa siw reject words strict", &s, &strict, "mpa-rfc6581=1", NULL);
    sc_open(&s, DLT_EN10MB, 4, true);
    rp.ird = rp.ord = 1;
    handshake(&s, &rq, &rp);
    sc_fin(&s, 1);
    run("mpa reject without A", &s, NULL, "mpa-rfc6581=1", NULL);

    /* the responder answers with something that is not an MPA Reply */
    sc_open(&s, DLT_EN10MB, 4, true);
    size_t n = mpa(buf, UIW_MPA_REQUEST, &STD);
    sc_send(&s, 0, buf, n);
    sc_send(&s, 1, (const uint8_t *)"HTTP/1.1 400 Bad Request\r\n", 26);
    run("not a reply", &s, NULL, "mpa-frame=1", NULL);
}

/* A new capture: handshake, a Send a>b, then Terminate t b>a. */
static void term_after_send(sc *s, uiw_hdr t)
{
    sc_open(s, DLT_EN10MB, 4, true);
    handshake(s, &STD, &STD);
    put(s, 0, h_send(1, 0, true), 10);
    put(s, 1, t, 0);
}

static void test_terminate(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    /* DDP/untagged/invalid MSN range with the failing header attached, in
     * siw's bit layout; then another FPDU after it */
    uiw_hdr t = base(UIW_OP_TERMINATE, false, true);
    t.qn = UIW_QN_TERMINATE;
    t.msn = 1;
    t.u.term.cause =
        (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MSN_RANGE};
    t.u.term.hdr_mpa = t.u.term.hdr_ddp = true;
    t.u.term.siw_layout = true;
    uiw_hdr bad = h_send(7, 0, true);
    uint8_t tmp[64];
    int hl = uiw_hdr_encode(&bad, tmp + 2, sizeof(tmp) - 2);
    put16(tmp, (unsigned)hl + 10);
    t.u.term.ddp_hdr_len = (uint8_t)(2 + hl);
    memcpy(t.u.term.ddp_hdr, tmp, t.u.term.ddp_hdr_len);
    put(&s, 1, t, 0);
    put(&s, 1, h_send(1, 0, true), 10);
    run("terminate siw layout + after", &s, NULL, "siw-term-layout=1", "after-terminate=1", NULL);

    /* the same control word strictly: a terminate violation */
    term_after_send(&s, t);
    uiw_dump_opts o = {0};
    o.strict_mask = 1u << UIW_QUIRK_SIW_TERM_LAYOUT;
    run("terminate siw layout strict", &s, &o, "terminate=1", NULL);

    /* an RNIC's MPA-layer Terminate: error type 3 (irdma, cxgb4), no
     * headers: the named quirk, a violation with --strict */
    uiw_hdr rt = base(UIW_OP_TERMINATE, false, true);
    rt.qn = UIW_QN_TERMINATE;
    rt.msn = 1;
    rt.u.term.cause = (uiw_term_cause){UIW_LAYER_LLP, UIW_LLP_ET_RNIC, UIW_MPA_EC_CRC};
    term_after_send(&s, rt);
    run("terminate rnic etype 3", &s, NULL, "rnic-term-etype3=1", NULL);
    term_after_send(&s, rt);
    uiw_dump_opts ro = {0};
    ro.strict_mask = 1u << UIW_QUIRK_RNIC_TERM_ETYPE3;
    run("terminate rnic etype 3 strict", &s, &ro, "terminate=1", NULL);

    /* Terminate with MSN 2 */
    t.msn = 2;
    t.u.term.siw_layout = false;
    term_after_send(&s, t);
    run("terminate msn", &s, NULL, "msn=1", NULL);
}

static void test_reserved_versions(void)
{
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    uiw_hdr h = h_send(1, 0, true);
    h.inv_stag = 0x1234; /* on a plain Send */
    put(&s, 0, h, 10);
    h = h_send(2, 0, true);
    h.ddp_rsvd = 0x2;
    put(&s, 0, h, 10);
    h = h_send(3, 0, true);
    h.rdmap_rsvd = 0x1;
    put(&s, 0, h, 10);
    h = h_send(4, 0, true);
    h.rdmap_version = 0; /* RDMAC */
    put(&s, 0, h, 10);
    run("reserved/version", &s, NULL, "reserved=3", "version=1", NULL);
}

static void test_rx_errors(void)
{
    /* a reserved opcode (hand-made: the encoder refuses it), then a clean
     * FPDU: the checker resynchronises on the ULPDU_Length */
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    size_t n = fpdu(
        buf,
        &(uiw_hdr){
            .opcode = UIW_OP_SEND, .ddp_version = 1, .rdmap_version = 1, .last = true, .msn = 2},
        payload, 10);
    buf[3] = (uint8_t)((buf[3] & 0xf0) | 0x0c); /* opcode 0xC */
    sc_send(&s, 0, buf, n);
    put(&s, 0, h_send(2, 0, true), 10);
    run("reserved opcode", &s, NULL, "opcode=1", NULL);

    /* Immediate Data with 12 bytes */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    uiw_hdr im = base(UIW_OP_IMM_DATA, false, true);
    im.msn = 1;
    n = fpdu(buf, &im, payload, 4);
    sc_send(&s, 0, buf, n);
    run("imm data 12 bytes", &s, NULL, "imm-data=1", NULL);

    /* CRC on, one payload byte changed: crc violation, decoding goes on */
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD;
    rq.crc = true;
    g_crc = true;
    handshake(&s, &rq, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    uiw_hdr h2 = h_send(2, 0, true);
    n = fpdu(buf, &h2, payload, 40);
    buf[30] ^= 1;
    sc_send(&s, 0, buf, n);
    put(&s, 0, h_send(3, 0, true), 10);
    put(&s, 0, h_send(5, 0, true), 10); /* and an MSN error after it is still found */
    run("crc", &s, NULL, "crc=1", "msn=1", NULL);
    g_crc = false;

    /* non-zero pad (siw's short-FPDU path) */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    uiw_hdr hp = h_send(1, 0, true);
    n = fpdu(buf, &hp, payload, 3); /* ULPDU 21: 1 pad byte */
    buf[2 + 21] = 0xee;
    sc_send(&s, 0, buf, n);
    run("pad", &s, NULL, "siw-pad=1", NULL);

    /* FIN in the middle of an FPDU */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    uiw_hdr hf = h_send(2, 0, true);
    n = fpdu(buf, &hf, payload, 100);
    sc_send(&s, 0, buf, 50);
    sc_fin(&s, 0);
    run("fin inside fpdu", &s, NULL, "framing=1", NULL);
}

static void test_capture_problems(void)
{
    /* a lost segment: gap reported, that direction stops, no violation */
    sc s;
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    uiw_hdr h = h_send(2, 0, true);
    size_t n = fpdu(buf, &h, payload, 3000);
    sc_send(&s, 0, buf, 1000);
    sc_lose(&s, 0, 1000);
    sc_send(&s, 0, buf + 2000, n - 2000);
    put(&s, 0, h_send(3, 0, true), 10);
    put(&s, 1, h_send(1, 0, true), 10);
    run("gap", &s, NULL, "gap=1", "decoding-stopped=1", NULL);

    /* the capture ends inside an FPDU */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    n = fpdu(buf, &h, payload, 3000);
    sc_send(&s, 0, buf, 1000);
    run("capture ends in fpdu", &s, NULL, "incomplete=1", NULL);

    /* no SYN, but the capture still starts at the MPA Request */
    sc_open(&s, DLT_EN10MB, 4, false);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    run("no syn", &s, NULL, "no-syn=2", NULL);

    /* a segment delivered twice and two swapped: nothing to report */
    sc_open(&s, DLT_EN10MB, 6, true);
    handshake(&s, &STD, &STD);
    put(&s, 0, h_send(1, 0, true), 10);
    h = h_send(2, 0, true);
    n = fpdu(buf, &h, payload, 3000);
    uint32_t seq0 = s.seq[0];
    sc_frame(&s, 0, 0x18, seq0 + 1000, buf + 1000, 1000); /* 2nd before 1st */
    sc_frame(&s, 0, 0x18, seq0, buf, 1000);
    sc_frame(&s, 0, 0x18, seq0, buf, 1500); /* overlapping retransmission */
    sc_frame(&s, 0, 0x18, seq0 + 2000, buf + 2000, n - 2000);
    s.seq[0] = seq0 + (uint32_t)n;
    put(&s, 0, h_send(3, 0, true), 10);
    run("reordered", &s, NULL, NULL);
}

/* FPDU/TCP segment alignment (RFC 5044 §8): the summary lines, per
 * direction and in the total, and the fpdu-split warning, in the full
 * output and with -q. want: a>b aligned, a>b judged, b>a aligned, b>a
 * judged, FPDUs left out as first carried by a retransmission (a>b),
 * fpdu-split warnings. */
static void run_align(const char *what, sc *s, unsigned ab_a, unsigned ab_n, unsigned ba_a,
                      unsigned ba_n, unsigned retx, unsigned split)
{
    sc_close(s);
    char sum[2][8192];
    for (int quiet = 0; quiet < 2; quiet++) {
        uiw_dump_opts o = {.quiet = quiet};
        FILE *out = tmpfile();
        uiw_dump *d = uiw_dump_new(&o, out);
        CHECK_EQ(uiw_dump_file(d, s->path), 0);
        unsigned long before = tu_failed;
        CHECK_EQ(uiw_dump_count(d, "iwarp-connections"), 1);
        CHECK_EQ(uiw_dump_violations(d), 0);
        CHECK_EQ(uiw_dump_count(d, "segment-aligned"), ab_a + ba_a);
        CHECK_EQ(uiw_dump_count(d, "segment-fpdus"), ab_n + ba_n);
        CHECK_EQ(uiw_dump_count(d, "segment-retransmitted"), retx);
        CHECK_EQ(uiw_dump_count(d, "fpdu-split"), split);
        for (int i = 0; all_names[i]; i++)
            if (strcmp(all_names[i], "fpdu-split") != 0)
                CHECK_EQ(uiw_dump_count(d, all_names[i]), 0);
        rewind(out);
        char line[1024];
        unsigned got[2][2] = {{~0u, ~0u}, {~0u, ~0u}}, tot[2] = {~0u, ~0u}, wlines = 0;
        unsigned tot_retx = 0, conn_retx = 0;
        bool in_total = false, in_sum = false, wsum = false, wtot = false;
        size_t sl = 0;
        sum[quiet][0] = '\0';
        while (fgets(line, sizeof(line), out)) {
            if (strncmp(line, "== ", 3) == 0)
                in_sum = true;
            if (in_sum && sl + strlen(line) < sizeof(sum[0])) {
                strcpy(sum[quiet] + sl, line);
                sl += strlen(line);
            }
            if (strncmp(line, "== total", 8) == 0)
                in_total = true;
            unsigned a, n;
            const char *r = strstr(line, " FPDUs first carried by a retransmission not counted");
            unsigned rx = 0;
            if (r) {
                const char *p = r;
                while (p > line && p[-1] != '(')
                    p--;
                rx = (unsigned)strtoul(p, NULL, 10);
            }
            if (sscanf(line, "   a>b segment alignment: %u of %u FPDUs start a TCP segment", &a,
                       &n) == 2) {
                got[0][0] = a;
                got[0][1] = n;
                conn_retx += rx;
            } else if (sscanf(line, "   b>a segment alignment: %u of %u FPDUs start a TCP segment",
                              &a, &n) == 2) {
                got[1][0] = a;
                got[1][1] = n;
                conn_retx += rx;
            } else if (in_total &&
                       sscanf(line, "   segment alignment: %u of %u FPDUs start a TCP segment", &a,
                              &n) == 2) {
                tot[0] = a;
                tot[1] = n;
                tot_retx = rx;
            }
            if (strstr(line, "* warning fpdu-split: "))
                wlines++;
            char want[64];
            if (split)
                snprintf(want, sizeof(want), "   warnings: fpdu-split %u\n", split);
            else
                snprintf(want, sizeof(want), "   warnings: none\n");
            if (strcmp(line, want) == 0)
                *(in_total ? &wtot : &wsum) = true;
        }
        CHECK_EQ(got[0][0], ab_a);
        CHECK_EQ(got[0][1], ab_n);
        CHECK_EQ(got[1][0], ba_a);
        CHECK_EQ(got[1][1], ba_n);
        CHECK_EQ(tot[0], ab_a + ba_a);
        CHECK_EQ(tot[1], ab_n + ba_n);
        CHECK_EQ(conn_retx, retx);
        CHECK_EQ(tot_retx, retx);
        CHECK_EQ(wlines, quiet ? 0 : split);
        CHECK(wsum);
        CHECK(wtot);
        if (tu_failed != before || getenv("UIW_TEST_VERBOSE")) {
            fprintf(stderr, "---- %s%s: uiwarp dump output:\n", what, quiet ? " (-q)" : "");
            rewind(out);
            while (fgets(line, sizeof(line), out))
                fputs(line, stderr);
        }
        fclose(out);
        uiw_dump_free(d);
    }
    CHECK_STR(sum[0], sum[1]); /* -q prints the same summaries */
    unlink(s->path);
}

/* Send FPDUs of a>b: fpdu_len(n) wire bytes for n payload bytes. */
static size_t send_fpdu(uint8_t *out, uint32_t msn, size_t n)
{
    uiw_hdr h = h_send(msn, 0, true);
    return fpdu(out, &h, payload, n);
}

/* The per-segment reading (RFC 5044 §2 "FPDU Alignment"): TCP segments of
 * the FPDU stream, those that start with an FPDU ("segment-aligned": one
 * FPDU each), and those that also hold whole FPDUs only. */
static void test_segment_starts(void)
{
    static uint8_t b2[9000];
    sc s;
    size_t n;

    /* six small FPDUs packed three and three in two segments: 2 of 2 start
     * with an FPDU and hold whole ones only, 2 of 6 FPDUs start a segment */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = 0;
    for (uint32_t m = 1; m <= 6; m++)
        n += send_fpdu(b2 + n, m, 200);
    CHECK_EQ(n, 6 * 224u);
    sc_send(&s, 0, b2, 3 * 224);
    sc_send(&s, 0, b2 + 3 * 224, 3 * 224);
    run("starts: packed", &s, NULL, "segment-segments=2", "segment-aligned=2", "segment-integral=2",
        "segment-fpdus=6", "segment-whole=6", NULL);

    /* A (624) and 400 bytes of B in one segment, B's rest in the next: the
     * second segment does not start with an FPDU, the first starts with one
     * but does not end on an FPDU's end */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 600);
    n += send_fpdu(b2 + n, 2, 600);
    sc_send(&s, 0, b2, 1024);
    sc_send(&s, 0, b2 + 1024, n - 1024);
    run("starts: split", &s, NULL, "segment-segments=2", "segment-aligned=1", "segment-integral=0",
        "segment-fpdus=2", "segment-whole=1", "fpdu-split=1", NULL);

    /* a 3024-byte FPDU in 1460/1460/104 and a 124-byte one after it in the
     * last segment: 1 of 3 segments starts with an FPDU; a retransmission
     * of the first segment is not counted */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 3000);
    n += send_fpdu(b2 + n, 2, 100);
    uint32_t seq0 = s.seq[0];
    sc_send_split(&s, 0, b2, n, 1460);
    sc_frame(&s, 0, 0x18, seq0, b2, 1460);
    run("starts: large FPDU", &s, NULL, "segment-segments=3", "segment-aligned=1",
        "segment-integral=0", "segment-fpdus=2", "segment-whole=0", NULL);

    /* RFC 5044 §5.1, "Changes in EMSS due to varying TCP options": six
     * 1460-byte FPDUs on a 1460-byte grid; the second segment carries a
     * SACK block and is 12 bytes short, and TCP cuts the rest of its buffer
     * 12 bytes off the grid (1460, 1460, then the buffer's 12-byte tail);
     * the next buffer starts on it again. The three segments off the grid
     * and the three FPDUs that begin in the window are counted apart; the
     * run counts segments where an FPDU begins (two: the 12-byte tail holds
     * none). Then the same with the SACK block on a pure ACK of
     * that side before the short segment, which carries none; then with
     * SACK blocks on two segments in a row, 1448 bytes each (the first
     * starts with an FPDU that is judged only when the second has been
     * counted: it must not end the count). */
    for (int pure = 0; pure < 3; pure++) {
        static const size_t cuts[2][7] = {{1460, 1448, 1460, 1460, 12, 1460, 1460},
                                          {1460, 1448, 1448, 1460, 24, 1460, 1460}};
        const size_t *cut = cuts[pure == 2];
        sc_open(&s, DLT_EN10MB, 4, true);
        handshake(&s, &STD, &STD);
        n = 0;
        for (uint32_t m = 1; m <= 6; m++)
            n += send_fpdu(b2 + n, m, 1460 - 24);
        CHECK_EQ(n, 6 * 1460u);
        size_t at = 0;
        for (size_t i = 0; i < 7; i++) {
            if (i == 1 && pure == 1) {
                s.sack[0] = true;
                sc_frame(&s, 0, 0x10, s.seq[0], NULL, 0);
                s.sack[0] = false;
            }
            s.sack[0] = (i == 1 && pure != 1) || (i == 2 && pure == 2);
            sc_send(&s, 0, b2 + at, cut[i]);
            s.sack[0] = false;
            at += cut[i];
        }
        CHECK_EQ(at, n);
        run(pure == 2   ? "starts: SACK on two segments"
            : pure == 1 ? "starts: SACK on a pure ACK"
                        : "starts: SACK",
            &s, NULL, "segment-segments=7", "segment-aligned=4", "segment-fpdus=6",
            "segment-whole=3", pure == 2 ? "segment-emss-changes=2" : "segment-emss-changes=1",
            "segment-emss-unaligned=3", "segment-emss-split=3", "segment-emss-run=2",
            "fpdu-split=3", NULL);
    }
}

static void test_alignment(void)
{
    static uint8_t b2[70000];
    sc s;
    size_t n, k;

    /* three FPDUs each in its own segment; one from b */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    for (uint32_t m = 1; m <= 3; m++)
        put(&s, 0, h_send(m, 0, true), 100);
    put(&s, 1, h_send(1, 0, true), 10);
    run_align("align: 3 in 3 segments", &s, 3, 3, 1, 1, 0, 0);

    /* two FPDUs packed in one segment: the second does not start one, but
     * it ends in the segment: no warning */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 100);
    n += send_fpdu(b2 + n, 2, 100);
    sc_send(&s, 0, b2, n);
    run_align("align: 2 in 1 segment", &s, 1, 2, 0, 0, 0, 0);

    /* A (624 bytes) and the first 400 bytes of B (624) in a 1024-byte
     * segment, the rest of B in the next: B fits in 1024 but crosses */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 600);
    CHECK_EQ(n, 624);
    n += send_fpdu(b2 + n, 2, 600);
    sc_send(&s, 0, b2, 1024);
    sc_send(&s, 0, b2 + 1024, n - 1024);
    run_align("align: split that fits", &s, 1, 2, 0, 0, 0, 1);

    /* the same FPDU pair cut so that B starts a segment but is itself cut
     * in two: B (624) in 500 + 124 after A alone: the largest segment is
     * 624 (A's), so B crosses a segment it could have fitted in */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    sc_send(&s, 0, b2, 624);
    sc_send(&s, 0, b2 + 624, 500);
    sc_send(&s, 0, b2 + 1124, 124);
    run_align("align: aligned but cut", &s, 2, 2, 0, 0, 0, 1);

    /* an FPDU longer than any segment (3024 bytes in 1460/1460/104): no
     * warning; a 124-byte FPDU after it in its last segment: not aligned,
     * fits (no warning); then one in its own segment */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 3000);
    CHECK_EQ(n, 3024);
    n += send_fpdu(b2 + n, 2, 100);
    sc_send_split(&s, 0, b2, n, 1460);
    put(&s, 0, h_send(3, 0, true), 100);
    run_align("align: FPDU larger than the MSS", &s, 2, 3, 0, 0, 0, 0);

    /* the big FPDU cut 1000/1000/1024, then 1460 bytes of the next message:
     * the largest segment (1460) is seen only after the big FPDU ended: the
     * checker judges with what it has seen by the FPDU's end (1024 < 3024) */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    n = send_fpdu(b2, 1, 3000);
    sc_send_split(&s, 0, b2, n, 1000);
    put(&s, 0, h_send(2, 0, true), 1400);
    run_align("align: large FPDU, MSS seen later", &s, 2, 2, 0, 0, 0, 0);

    /* retransmissions: A, B each in a segment; B again (whole), A+B again
     * (overlapping): nothing counted twice; then a segment B+C (B again, C
     * new): C is first carried by a retransmission, left out; then D */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    size_t la = send_fpdu(b2, 1, 100);
    size_t lb = send_fpdu(b2 + la, 2, 100);
    size_t lc = send_fpdu(b2 + la + lb, 3, 100);
    uint32_t s0 = s.seq[0];
    sc_frame(&s, 0, 0x18, s0, b2, la);
    sc_frame(&s, 0, 0x18, s0 + (uint32_t)la, b2 + la, lb);
    sc_frame(&s, 0, 0x18, s0 + (uint32_t)la, b2 + la, lb);
    sc_frame(&s, 0, 0x18, s0, b2, la + lb);
    sc_frame(&s, 0, 0x18, s0 + (uint32_t)la, b2 + la, lb + lc);
    s.seq[0] = s0 + (uint32_t)(la + lb + lc);
    put(&s, 0, h_send(4, 0, true), 100);
    run_align("align: retransmissions", &s, 3, 3, 0, 0, 1, 0);

    /* a retransmission that arrives before the original is lost from the
     * capture's view: out of order, the original segment after it is
     * trimmed; the FPDU in the held segment counts once */
    sc_open(&s, DLT_EN10MB, 4, true);
    handshake(&s, &STD, &STD);
    la = send_fpdu(b2, 1, 100);
    lb = send_fpdu(b2 + la, 2, 100);
    s0 = s.seq[0];
    sc_frame(&s, 0, 0x18, s0 + (uint32_t)la, b2 + la, lb); /* B ahead of A */
    sc_frame(&s, 0, 0x18, s0, b2, la);
    sc_frame(&s, 0, 0x18, s0 + (uint32_t)la, b2 + la, lb); /* B again */
    s.seq[0] = s0 + (uint32_t)(la + lb);
    run_align("align: out of order", &s, 2, 2, 0, 0, 0, 0);

    /* markers: each FPDU in its own segment; the segmenter's 512-byte
     * FPDUs each start with a marker (FPDUPTR 0), which belongs to the FPDU
     * after it (RFC 5044 §4.3): such an FPDU starts its segment; then
     * 600-byte FPDUs, most without a leading marker */
    sc_open(&s, DLT_EN10MB, 4, true);
    mpa_opts rq = STD, rp = STD;
    rq.markers = rp.markers = true;
    handshake(&s, &rq, &rp);
    uiw_tx tx;
    uiw_tx_cfg cfg = {.markers = true, .max_fpdu = 512};
    CHECK_EQ(uiw_tx_init(&tx, &cfg), 0);
    static uiw_fpdu f;
    unsigned nf = 0, lead = 0;
    for (uint32_t m = 1; m <= 2; m++) {
        uiw_hdr h = h_send(m, 0, true);
        struct iovec iov = {payload, 3000};
        uiw_tx_msg msg;
        CHECK_EQ(uiw_tx_msg_init(&msg, &h, &iov, 1, iov.iov_len), 0);
        tx.cfg.max_fpdu = m == 1 ? 512 : 600;
        while (uiw_tx_next(&tx, &msg, &f) == 1) {
            k = 0;
            for (int i = 0; i < f.iovcnt; i++) {
                memcpy(b2 + k, f.iov[i].iov_base, f.iov[i].iov_len);
                k += f.iov[i].iov_len;
            }
            lead += f.stream_off % UIW_MARKER_INTERVAL == 0;
            nf++;
            sc_send(&s, 0, b2, k);
        }
    }
    CHECK(lead >= 5 && lead < nf);
    run_align("align: markers, FPDU per segment", &s, nf, nf, 0, 0, 0, 0);
}

static void test_midstream_undecodable(void)
{
    /* capture starts mid-connection: no SYN, no MPA frame */
    sc s;
    sc_open(&s, DLT_EN10MB, 4, false);
    put(&s, 0, h_send(7, 0, true), 10);
    put(&s, 1, h_send(9, 0, true), 10);
    sc_close(&s);
    uiw_dump_opts o = {.quiet = true};
    FILE *out = tmpfile();
    uiw_dump *d = uiw_dump_new(&o, out);
    CHECK_EQ(uiw_dump_file(d, s.path), 0);
    CHECK_EQ(uiw_dump_count(d, "iwarp-connections"), 0);
    CHECK_EQ(uiw_dump_count(d, "undecodable"), 1);
    CHECK_EQ(uiw_dump_violations(d), 0);
    rewind(out);
    char line[512];
    bool said = false;
    while (fgets(line, sizeof(line), out))
        said |= strstr(line, "could not be decoded from its start") != NULL;
    CHECK(said);
    fclose(out);
    uiw_dump_free(d);
    unlink(s.path);
}

int main(void)
{
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = (uint8_t)(i * 7 + 3);
    init_names();
    test_clean();
    test_markers();
    test_markers_missing();
    test_msn_mo();
    test_tagged();
    test_read();
    test_ord();
    test_p2p();
    test_order();
    test_mpa_fields();
    test_terminate();
    test_reserved_versions();
    test_rx_errors();
    test_capture_problems();
    test_alignment();
    test_segment_starts();
    test_midstream_undecodable();
    TEST_MAIN_END();
}
