/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * FPDU transmit segmenter: DDP segmentation (RFC 5041 §5.2) into MPA FPDUs
 * (RFC 5044 §4.1) with markers (§4.3), pad and CRC32C (§4.4), described as
 * an iovec list. Payload is only referenced (and read once for the CRC);
 * the length field, header, markers, pad and CRC live in uiw_fpdu.scratch.
 */
#include "uiw_port.h"
#include "uiwarp/wire.h"

/* scratch layout */
#define SC_HDR  0                                               /* ULPDU_Length + header */
#define SC_MARK UIW_RX_HDRBUF                                   /* markers, 4 bytes each */
#define SC_TAIL (SC_MARK + UIW_MARKER_LEN * UIW_TX_MAX_MARKERS) /* 3 zero pad bytes + CRC */
_Static_assert(SC_TAIL + 3 + UIW_MPA_CRC_LEN <= UIW_TX_SCRATCH, "scratch too small");

/* iovecs that may follow the payload: pad, a marker, the CRC. */
#define TAIL_IOV 3

/* Lays an FPDU out in stream order, inserting markers. With out == NULL it
 * only counts (dry run). */
struct lay {
    uiw_fpdu *out;
    bool markers, crc;
    bool overflow;    /* more markers than scratch holds (cannot happen) */
    uint64_t pos;     /* stream offset of the next byte */
    uint64_t len_off; /* stream offset of the ULPDU_Length field */
    int iovcnt;
    uint16_t nmarkers;
    uint32_t crc_state;
};

static void add_iov(struct lay *l, const uint8_t *p, size_t n)
{
    if (l->out) {
        struct iovec *v = l->out->iov;
        if (l->iovcnt >= UIW_TX_MAX_IOV) { /* cannot happen: planned */
            l->overflow = true;
            return;
        }
        if (l->iovcnt > 0 &&
            (const uint8_t *)v[l->iovcnt - 1].iov_base + v[l->iovcnt - 1].iov_len == p) {
            v[l->iovcnt - 1].iov_len += n; /* contiguous: merge */
            return;
        }
        v[l->iovcnt].iov_base = (void *)p;
        v[l->iovcnt].iov_len = n;
    }
    l->iovcnt++;
}

static void hash(struct lay *l, const uint8_t *p, size_t n)
{
    if (l->out && l->crc)
        l->crc_state = uiw_crc32c_update(l->crc_state, p, n);
}

/* RFC 5044 §4.2: RESERVED zero, FPDUPTR = octets from the ULPDU_Length
 * field to the marker (0 when the marker precedes the length field). */
static void put_marker(struct lay *l, uint16_t ptr, bool covered)
{
    uint8_t tmp[UIW_MARKER_LEN];
    uint8_t *m = tmp;

    if (l->nmarkers >= UIW_TX_MAX_MARKERS) {
        l->overflow = true;
        return;
    }
    if (l->out)
        m = l->out->scratch + SC_MARK + UIW_MARKER_LEN * l->nmarkers;
    m[0] = 0;
    m[1] = 0;
    m[2] = (uint8_t)(ptr >> 8);
    m[3] = (uint8_t)ptr;
    /* RFC 5044 §4.3: markers are covered by the containing FPDU's CRC. */
    if (covered)
        hash(l, m, UIW_MARKER_LEN);
    add_iov(l, m, UIW_MARKER_LEN);
    l->nmarkers++;
    l->pos += UIW_MARKER_LEN;
}

/* Lay n content bytes out, splitting them where the stream offset hits a
 * multiple of 512 (RFC 5044 §4.3). `covered` bytes go into the CRC; a
 * marker right before an uncovered field (the CRC) is still covered
 * (RFC 5044 §4.4 rule 1: "a Marker immediately following the PAD"). */
static void put(struct lay *l, const uint8_t *p, size_t n, bool covered)
{
    bool first = true;

    while (n) {
        size_t c = n;
        if (l->markers) {
            unsigned m = (unsigned)(l->pos % UIW_MARKER_INTERVAL);
            if (m == 0)
                put_marker(l, (uint16_t)(l->pos - l->len_off), covered || first);
            else if (c > UIW_MARKER_INTERVAL - m)
                c = UIW_MARKER_INTERVAL - m;
            if (m == 0 && c > UIW_MARKER_INTERVAL - UIW_MARKER_LEN)
                c = UIW_MARKER_INTERVAL - UIW_MARKER_LEN;
        }
        if (covered)
            hash(l, p, c);
        add_iov(l, p, c);
        p += c;
        n -= c;
        l->pos += c;
        first = false;
    }
}

/* Start an FPDU at l->pos: a marker due here precedes the length field and
 * has FPDUPTR 0 (RFC 5044 §4.3); it is covered by this FPDU's CRC (§4.4
 * rule 2). */
static void lay_begin(struct lay *l)
{
    l->len_off = l->pos;
    if (l->markers && l->pos % UIW_MARKER_INTERVAL == 0) {
        put_marker(l, 0, true);
        l->len_off = l->pos;
    }
}

/* Multiples of 512 in [a, b). */
static uint64_t marker_slots(uint64_t a, uint64_t b)
{
    return (b + UIW_MARKER_INTERVAL - 1) / UIW_MARKER_INTERVAL -
           (a + UIW_MARKER_INTERVAL - 1) / UIW_MARKER_INTERVAL;
}

/* How many of the next `want` payload bytes fit in the iovec budget when
 * laid out from l (a dry-run copy positioned after the header). */
static uint32_t plan_payload(const uiw_tx_msg *msg, struct lay l, uint32_t want)
{
    int idx = msg->sge_idx;
    size_t off = msg->sge_off;
    uint32_t p = 0;
    const uint8_t *prev_end = NULL; /* add_iov merges a piece that starts here */

    while (p < want && idx < msg->nsge) {
        size_t avail = msg->sgl[idx].iov_len - off;
        const uint8_t *src;
        size_t c;
        int need;
        if (!avail) {
            idx++;
            off = 0;
            continue;
        }
        src = (const uint8_t *)msg->sgl[idx].iov_base + off;
        need = src == prev_end ? 0 : 1;
        c = avail < (size_t)(want - p) ? avail : (size_t)(want - p);
        if (l.markers) {
            unsigned m = (unsigned)(l.pos % UIW_MARKER_INTERVAL);
            if (m == 0) {
                need = 2;
                m = UIW_MARKER_LEN;
                l.pos += UIW_MARKER_LEN;
            }
            if (c > UIW_MARKER_INTERVAL - m)
                c = UIW_MARKER_INTERVAL - m;
        }
        if (l.iovcnt + need + TAIL_IOV > UIW_TX_MAX_IOV)
            break;
        l.iovcnt += need;
        prev_end = src + c;
        l.pos += c;
        p += (uint32_t)c;
        off += c;
        if (off == msg->sgl[idx].iov_len) {
            idx++;
            off = 0;
        }
    }
    return p;
}

int uiw_tx_init(uiw_tx *tx, const uiw_tx_cfg *cfg)
{
    memset(tx, 0, sizeof(*tx));
    if (!cfg || cfg->max_fpdu < UIW_TX_MIN_FPDU)
        return -EINVAL;
    tx->cfg = *cfg;
    return 0;
}

int uiw_tx_msg_init(uiw_tx_msg *msg, const uiw_hdr *hdr, const struct iovec *sgl, int nsge,
                    uint64_t total)
{
    uint64_t sum = 0;
    unsigned op;

    if (!msg || !hdr || nsge < 0 || (nsge > 0 && !sgl))
        return -EINVAL;
    for (int i = 0; i < nsge; i++) {
        if (sgl[i].iov_len && !sgl[i].iov_base)
            return -EINVAL;
        if (sum + sgl[i].iov_len < sum)
            return -EINVAL;
        sum += sgl[i].iov_len;
    }
    if (sum != total)
        return -EINVAL;
    /* RFC 5041 §5.2: "The ULP Message Length MUST be less than 2^32." */
    if (total > UINT32_MAX)
        return -EINVAL;
    op = hdr->opcode;
    if (op > UIW_OP_MAX)
        return -EINVAL;
    /* RFC 5040 §4.1 Figure 4, RFC 7306 §4.1 Figure 2 */
    if (hdr->tagged != (op == UIW_OP_WRITE || op == UIW_OP_READ_RESP))
        return -EINVAL;
    /* RFC 5040 §4.2, RFC 7306 §4.2: no ULP payload in these messages. */
    if (uiw_op_hdr_only(op) && total)
        return -EINVAL;
    /* RFC 5041 §7.1 tagged (5): TO + length must not wrap; untagged MO is
     * 32 bits. */
    if (total && hdr->tagged && hdr->to > UINT64_MAX - (total - 1))
        return -EINVAL;
    if (total && !hdr->tagged && (uint64_t)hdr->mo + (total - 1) > UINT32_MAX)
        return -EINVAL;

    {
        /* everything uiw_hdr_encode refuses (versions, QN per opcode, MO 0
         * of a header-only message, Terminate attachments, ...) is refused
         * here rather than halfway through the message; the bytes are the
         * first segment's header when it is the last (uiw_tx_next) */
        uint8_t tmp[sizeof(msg->hdr0)] = {0};
        uiw_hdr h = *hdr;
        int hl;

        h.last = true;
        hl = uiw_hdr_encode(&h, tmp, sizeof(tmp));
        if (hl < 2)
            return -EINVAL;
        memset(msg, 0, offsetof(uiw_tx_msg, hdr0));
        memcpy(msg->hdr0, tmp, sizeof(tmp)); /* fixed size: no rep movs */
        msg->hl0 = (uint8_t)hl;
    }
    msg->hdr = *hdr;
    msg->sgl = sgl;
    msg->nsge = nsge;
    msg->total = total;
    return 0;
}

int uiw_tx_next(uiw_tx *tx, uiw_tx_msg *msg, uiw_fpdu *out)
{
    uiw_hdr h;
    struct lay l;
    uint64_t remain;
    uint32_t m4, pmax, p;
    bool last;
    int hl;

    if (msg->started && msg->done >= msg->total)
        return 0;
    if (tx->cfg.max_fpdu < UIW_TX_MIN_FPDU)
        return -EINVAL;

    /* RFC 5041 §5.2: TO (tagged) / MO (untagged) of a segment = that of the
     * message's first byte + the payload already sent. */
    h = msg->hdr;
    if (h.tagged)
        h.to = msg->hdr.to + msg->done;
    else
        h.mo = msg->hdr.mo + (uint32_t)msg->done;
    h.last = true; /* provisional: the header length does not depend on L */
    if (msg->done == 0 && msg->hl0) {
        /* the first segment: uiw_tx_msg_init encoded exactly this */
        hl = msg->hl0;
        memcpy(out->scratch + SC_HDR + UIW_MPA_LEN_FIELD, msg->hdr0, sizeof(msg->hdr0));
    } else {
        hl = uiw_hdr_encode(&h, out->scratch + SC_HDR + UIW_MPA_LEN_FIELD,
                            UIW_RX_HDRBUF - UIW_MPA_LEN_FIELD);
        if (hl < 0)
            return hl;
        if (hl < 2)
            return -EINVAL;
    }

    remain = msg->total - msg->done;
    m4 = tx->cfg.max_fpdu & ~3u;
    if (uiw_op_hdr_only(h.opcode)) {
        pmax = 0; /* one FPDU, whatever max_fpdu says (RFC 5040 §4.2) */
    } else {
        /* Content (length, ULPDU, pad, CRC) that fits in m4 bytes of stream
         * from here, after the marker slots in that range. */
        uint64_t content = m4;
        if (tx->cfg.markers)
            content -= UIW_MARKER_LEN * marker_slots(tx->stream_off, tx->stream_off + m4);
        if (content < (uint64_t)UIW_MPA_LEN_FIELD + (uint64_t)hl + UIW_MPA_CRC_LEN + 4)
            return -EINVAL;
        pmax = (uint32_t)(content - UIW_MPA_LEN_FIELD - (uint64_t)hl - UIW_MPA_CRC_LEN);
    }
    if (remain <= pmax) {
        p = (uint32_t)remain;
        last = true;
    } else {
        /* Non-last: a multiple of 4, so no pad and the FPDU fills m4. */
        p = pmax & ~3u;
        last = false;
    }

    memset(&l, 0, sizeof(l));
    l.markers = tx->cfg.markers;
    l.crc = tx->cfg.crc;
    l.pos = tx->stream_off;
    l.crc_state = UIW_CRC32C_INIT;

    /* Dry run up to the payload, then check the iovec budget: needed only
     * with markers or a gather list long enough to come near it (without
     * markers the header is at most 2 iovecs, each SGE piece 1, the tail
     * TAIL_IOV) */
    lay_begin(&l);
    put(&l, out->scratch, UIW_MPA_LEN_FIELD + (size_t)hl, true);
    if (p && (l.markers || 2 + (msg->nsge - msg->sge_idx) + TAIL_IOV > UIW_TX_MAX_IOV)) {
        uint32_t q = plan_payload(msg, l, p);
        if (q < p) {
            p = q & ~3u;
            last = false;
            if (!p)
                return -EMSGSIZE;
        }
    }

    /* The real layout. */
    h.last = last; /* RFC 5041 §4.1: L on the last segment only */
    if (!last && uiw_hdr_encode(&h, out->scratch + SC_HDR + UIW_MPA_LEN_FIELD,
                                UIW_RX_HDRBUF - UIW_MPA_LEN_FIELD) != hl)
        return -EINVAL; /* (with L set the provisional bytes are final) */
    {
        /* RFC 5044 §4.1: ULPDU_Length = DDP/RDMAP header + payload. */
        unsigned ulpdu = (unsigned)hl + p;
        unsigned pad = uiw_mpa_pad(ulpdu);
        uint8_t *tail = out->scratch + SC_TAIL;
        int idx = msg->sge_idx;
        size_t off = msg->sge_off;
        uint32_t left = p;
        uint32_t crc = 0;

        out->scratch[SC_HDR] = (uint8_t)(ulpdu >> 8);
        out->scratch[SC_HDR + 1] = (uint8_t)ulpdu;

        memset(&l, 0, sizeof(l));
        l.out = out;
        l.markers = tx->cfg.markers;
        l.crc = tx->cfg.crc;
        l.pos = tx->stream_off;
        l.crc_state = UIW_CRC32C_INIT;

        lay_begin(&l);
        put(&l, out->scratch + SC_HDR, UIW_MPA_LEN_FIELD + (size_t)hl, true);
        while (left) {
            size_t avail = msg->sgl[idx].iov_len - off;
            size_t c = avail < left ? avail : left;
            if (c)
                put(&l, (const uint8_t *)msg->sgl[idx].iov_base + off, c, true);
            off += c;
            left -= (uint32_t)c;
            if (off == msg->sgl[idx].iov_len) {
                idx++;
                off = 0;
            }
        }
        /* skip exhausted / empty SGEs so the cursor rests on data */
        while (idx < msg->nsge && off == msg->sgl[idx].iov_len) {
            idx++;
            off = 0;
        }
        /* RFC 5044 §4.1: pad of zeros, covered by the CRC; then the CRC. */
        tail[0] = tail[1] = tail[2] = 0;
        put(&l, tail + 3 - pad, pad, true);
        put(&l, tail + 3, UIW_MPA_CRC_LEN, false);
        if (l.overflow || l.iovcnt > UIW_TX_MAX_IOV)
            return -EMSGSIZE;
        /* RFC 5044 §4.4; RFC 5044 §4.1: the field is present (zero) when
         * CRC is off. */
        if (tx->cfg.crc)
            crc = uiw_crc32c_final(l.crc_state);
        uiw_crc32c_put(tail + 3, crc);

        out->iovcnt = l.iovcnt;
        out->bytes = (size_t)(l.pos - tx->stream_off);
        out->payload = p;
        out->last = last;
        out->ulpdu_len = (uint16_t)ulpdu;
        out->nmarkers = l.nmarkers;
        out->stream_off = tx->stream_off;
        out->crc = crc;

        msg->sge_idx = idx;
        msg->sge_off = off;
    }
    msg->done += p;
    msg->started = true;
    tx->stream_off += out->bytes;
    return 1;
}

int uiw_tx_whole(uiw_tx *tx, uiw_tx_msg *msg, uint8_t *out, size_t cap)
{
    unsigned hl = msg->hl0, ulpdu, pad;
    size_t bytes;
    uint8_t *p;
    uint32_t crc = 0;

    /* (the total check first: it keeps hl + total below 2^16, no wrap) */
    if (msg->started || !hl || tx->cfg.markers || msg->total > tx->cfg.max_fpdu)
        return 0;
    /* uiw_tx_next's single-FPDU condition: length field, header, payload
     * and CRC within max_fpdu & ~3 (the pad then fits too: the sum is
     * rounded up to a multiple of 4, and so is the limit) */
    ulpdu = hl + (unsigned)msg->total;
    pad = uiw_mpa_pad(ulpdu);
    bytes = UIW_MPA_LEN_FIELD + (size_t)ulpdu + pad + UIW_MPA_CRC_LEN;
    if (bytes > (tx->cfg.max_fpdu & ~3u) || bytes > cap)
        return 0;
    out[0] = (uint8_t)(ulpdu >> 8);
    out[1] = (uint8_t)ulpdu;
    memcpy(out + UIW_MPA_LEN_FIELD, msg->hdr0, hl);
    p = out + UIW_MPA_LEN_FIELD + hl;
    for (int i = 0; i < msg->nsge; i++) {
        if (msg->sgl[i].iov_len)
            memcpy(p, msg->sgl[i].iov_base, msg->sgl[i].iov_len);
        p += msg->sgl[i].iov_len;
    }
    for (unsigned i = 0; i < pad; i++)
        *p++ = 0;
    /* RFC 5044 §4.4: the CRC covers everything before it (the field is
     * present, zero, when CRC is off) */
    if (tx->cfg.crc)
        crc = uiw_crc32c_final(uiw_crc32c_update(UIW_CRC32C_INIT, out, bytes - UIW_MPA_CRC_LEN));
    uiw_crc32c_put(p, crc);

    msg->done = msg->total;
    msg->started = true;
    msg->sge_idx = msg->nsge;
    msg->sge_off = 0;
    tx->stream_off += bytes;
    return (int)bytes;
}
