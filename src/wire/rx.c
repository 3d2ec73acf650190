/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * FPDU receive parser: MPA framing (RFC 5044 §4: length, markers, pad,
 * CRC), DDP segment validation at the framing level (RFC 5041 §5-§7) and
 * RDMAP header checks (RFC 5040 §4, §7; RFC 7306 §4-§8).
 *
 * The parser is a byte-driven state machine over the stream of one
 * direction. Marker bytes (at stream offsets that are a multiple of 512)
 * are set aside before the FPDU state machine sees the stream, so every
 * field may be split by a marker and by the caller's piece boundaries.
 * Only the ULPDU_Length field and the DDP/RDMAP header (at most
 * UIW_RX_HDRBUF bytes) are buffered; payload is reported as slices of the
 * caller's input.
 */
#include "uiw_port.h"
#include "uiw_be.h"
#include "uiwarp/wire.h"

enum rx_state {
    S_LEN = 0, /* ULPDU_Length (2 bytes) */
    S_HDR,     /* DDP/RDMAP header into hdrbuf */
    S_PAYLOAD, /* ULP payload */
    S_SKIP,    /* rest of a ULPDU whose FPDU is already in error */
    S_PAD,     /* 0-3 pad bytes */
    S_CRC,     /* 4 CRC bytes */
};

static size_t min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void hash(uiw_rx *rx, const uint8_t *p, size_t n)
{
    if (rx->cfg.crc)
        rx->crc_state = uiw_crc32c_update(rx->crc_state, p, n);
}

/* Start a new FPDU. A marker that follows belongs to it (RFC 5044 §4.3,
 * §4.4 rule 2): the CRC starts here, before any such marker. */
static void fpdu_reset(uiw_rx *rx)
{
    memset(&rx->f, 0, sizeof(rx->f));
    rx->state = S_LEN;
    rx->crc_state = UIW_CRC32C_INIT;
    rx->fpdu_begin = rx->stream_off;
    rx->fpdu_off = rx->stream_off;
}

void uiw_rx_init_at(uiw_rx *rx, const uiw_rx_cfg *cfg, uint64_t stream_off)
{
    memset(rx, 0, sizeof(*rx));
    if (cfg)
        rx->cfg = *cfg;
    rx->stream_off = stream_off;
    fpdu_reset(rx);
}

void uiw_rx_init(uiw_rx *rx, const uiw_rx_cfg *cfg)
{
    uiw_rx_init_at(rx, cfg, 0);
}

/* Stream offset just past the CRC of the FPDU whose ULPDU_Length field is
 * at len_off: 2 + ULPDU + pad + CRC content bytes, with the markers that
 * fall before any of them (RFC 5044 §4.1, §4.3). */
static uint64_t fpdu_end(const uiw_rx *rx, uint64_t len_off, unsigned ulpdu)
{
    uint64_t pos = len_off;
    uint64_t left = uiw_fpdu_len(ulpdu);

    if (!rx->cfg.markers)
        return pos + left;
    while (left) {
        unsigned m = (unsigned)(pos % UIW_MARKER_INTERVAL);
        uint64_t c;
        if (m < UIW_MARKER_LEN) {
            pos += UIW_MARKER_LEN - m;
            m = UIW_MARKER_LEN;
        }
        c = UIW_MARKER_INTERVAL - m;
        if (c > left)
            c = left;
        pos += c;
        left -= c;
    }
    return pos;
}

/* Bytes of hdrbuf (length field included) that form the DDP header. */
static unsigned bad_hdr_len(const uiw_rx *rx)
{
    unsigned have = rx->f.hdr_have;
    unsigned ddp;
    if (have < UIW_MPA_LEN_FIELD)
        return 0;
    ddp = (have > UIW_MPA_LEN_FIELD && (rx->hdrbuf[2] & 0x80)) ? UIW_HDR_TAGGED_LEN
                                                               : UIW_HDR_UNTAGGED_LEN;
    if (have > UIW_MPA_LEN_FIELD + ddp)
        have = UIW_MPA_LEN_FIELD + ddp;
    return have;
}

/* Record an error with the current FPDU context. */
static void set_err(uiw_rx *rx, uint8_t layer, uint8_t etype, uint8_t ecode, const char *why)
{
    uiw_rx_event *e = &rx->err;
    unsigned n = bad_hdr_len(rx);

    memset(e, 0, sizeof(*e));
    e->kind = UIW_RX_ERROR;
    e->cause.layer = layer;
    e->cause.etype = etype;
    e->cause.ecode = ecode;
    e->why = why;
    e->err_off = rx->stream_off;
    e->fpdu_off = rx->f.hdr_have ? rx->fpdu_off : rx->stream_off;
    e->ulpdu_valid = rx->f.hdr_have >= UIW_MPA_LEN_FIELD;
    e->ulpdu_len = e->ulpdu_valid ? rx->f.ulpdu_len : 0;
    e->resume_off = e->ulpdu_valid ? fpdu_end(rx, rx->fpdu_off, rx->f.ulpdu_len) : 0;
    memcpy(e->bad_hdr, rx->hdrbuf, n);
    e->bad_hdr_len = (uint8_t)n;
    e->nmarkers = rx->f.nmarkers;
}

/* A malformation inside the FPDU. With CRC on and `defer`, it is held until
 * the FPDU's CRC has been checked (RFC 5044 §4.4: the CRC is checked first;
 * §8 code 3 "in the event that the CRC is valid"); the first one found is
 * kept (RFC 5040 §7.1 rule 4). Returns true when the stream dies now. */
static bool fail(uiw_rx *rx, uint8_t layer, uint8_t etype, uint8_t ecode, const char *why,
                 bool defer)
{
    if (!rx->f.err_pending)
        set_err(rx, layer, etype, ecode, why);
    if (defer && rx->cfg.crc) {
        rx->f.err_pending = true;
        return false;
    }
    rx->dead = true;
    return true;
}

static bool fail_mpa(uiw_rx *rx, uint8_t ecode, const char *why, bool defer)
{
    return fail(rx, UIW_LAYER_LLP, UIW_LLP_ET_MPA, ecode, why, defer);
}

static void enter_pad(uiw_rx *rx)
{
    rx->f.pad_len = (uint8_t)uiw_mpa_pad(rx->f.ulpdu_len);
    rx->f.pad_have = 0;
    rx->f.crc_have = 0;
    rx->state = rx->f.pad_len ? S_PAD : S_CRC;
}

/* After the header bytes of a doomed FPDU: read the rest up to the CRC. */
static void enter_skip(uiw_rx *rx)
{
    rx->f.skip_left = (uint32_t)rx->f.ulpdu_len - rx->f.hdr_want;
    if (rx->f.skip_left)
        rx->state = S_SKIP;
    else
        enter_pad(rx);
}

/* The first marker byte is at rx->stream_off. */
static void marker_begin(uiw_rx *rx)
{
    rx->marker_off = rx->stream_off;
    /* RFC 5044 §4.3: FPDUPTR 0 when the marker falls between FPDUs. */
    rx->marker_between = rx->state == S_LEN && rx->f.hdr_have == 0;
    /* RFC 5044 §4.4 rule 1: markers up to the end of the pad, and one right
     * after the pad, are covered by the CRC; one between FPDUs is covered by
     * the following FPDU's CRC (rule 2), which started at fpdu_reset. A
     * marker inside the CRC field (impossible in a stream of 4-byte
     * multiples) is not. */
    rx->marker_hashed = !(rx->state == S_CRC && rx->f.crc_have > 0);
    if (rx->f.nmarkers < UINT16_MAX)
        rx->f.nmarkers++;
}

/* All 4 marker bytes are in rx->marker. Returns true if the stream dies. */
static bool marker_end(uiw_rx *rx)
{
    uint16_t rsvd = uiw_get_be16(rx->marker);
    uint16_t ptr = uiw_get_be16(rx->marker + 2);
    uint64_t expect = rx->marker_between ? 0 : rx->marker_off - rx->fpdu_off;

    /* RFC 5044 §4.2: RESERVED is ignored on receive; reported only. */
    if (rsvd)
        rx->f.marker_rsvd = true;
    /* RFC 5044 §4.2/§4.3: FPDUPTR = octets from the ULPDU_Length field to
     * the marker, low two bits treated as zero; 16-bit arithmetic as the
     * pointer itself (an FPDU longer than 64 KiB cannot be described). */
    if ((ptr & 0xFFFCu) != ((uint16_t)expect & 0xFFFCu))
        return fail_mpa(rx, UIW_MPA_EC_MARKER,
                        rx->marker_between ? "marker between FPDUs has non-zero FPDUPTR"
                                           : "marker FPDUPTR does not point to the FPDU start",
                        true);
    return false;
}

/* The checks of a complete DDP/RDMAP header: hl bytes at h (the bytes
 * after the length field, hl as hdr_want gives it) of a ULPDU of ulpdu
 * bytes. Decodes into *hdr. Returns NULL with *hlen = the header's length
 * (the ULPDU's bytes before its payload), or the reason with *cause. Pure:
 * the slow path (header_done) and the whole-FPDU fast path share it. */
static const char *hdr_check(const uint8_t *h, size_t hl, unsigned ulpdu, uiw_hdr *hdr,
                             uiw_term_cause *cause, uint16_t *hlen)
{
    bool tagged = h[0] & 0x80;
    unsigned opcode = h[1] & 0x0F;
    int r;

    *cause = (uiw_term_cause){0, 0, 0};
    r = uiw_hdr_decode(h, hl, hdr, cause);

    if (r == -EPROTO && cause->layer == UIW_LAYER_DDP) {
        /* DDP checks come before RDMAP ones: DDP validates the segment
         * before RDMAP sees it (RFC 5040 §7.2 item 1). DDP version is
         * uiw_hdr_decode's (RFC 5041 §4.1, §7.2). */
        return "DDP header rejected";
    }
    if (!tagged && hl >= 10 && uiw_get_be32(h + 6) >= UIW_QN_COUNT) {
        /* RFC 5041 §7.1 (1) "The QN is valid for this stream": only QNs
         * 0-3 are defined (RFC 5040 §5.1, RFC 7306 §10.2). */
        *cause = (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_QN};
        return "untagged QN > 3";
    }
    if (r == -EPROTO) {
        /* RDMAP version, reserved opcode, ... (RFC 5040 §7.2 items 2-3) */
        return "RDMAP header rejected";
    }
    if (!tagged && opcode == UIW_OP_TERMINATE && ulpdu > UIW_TERM_MAX_ULPDU) {
        /* RFC 5041 §7.1 (4): longer than any Terminate buffer. */
        *cause = (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG};
        return "Terminate longer than UIW_TERM_MAX_ULPDU";
    }
    if (r < 0 || (size_t)r > ulpdu) {
        /* RFC 5044 §8 code 3: the ULPDU_Length does not hold the header
         * its T flag and opcode require. */
        *cause = (uiw_term_cause){UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_MARKER};
        return "ULPDU_Length too small for the header";
    }
    if (tagged != (opcode == UIW_OP_WRITE || opcode == UIW_OP_READ_RESP)) {
        /* RFC 5040 §4.1 Figure 4, RFC 7306 §4.1 Figure 2: Write and Read
         * Response are tagged, every other message untagged. */
        *cause = (uiw_term_cause){UIW_LAYER_RDMAP, UIW_RDMAP_ET_REMOTE_OP,
                                  UIW_RDMAP_EC_UNEXPECTED_OPCODE};
        return "T flag does not match the opcode";
    }
    if (uiw_op_hdr_only(opcode)) {
        /* One message = one segment whose ULPDU is exactly the header
         * (RFC 5040 §4.2 / RFC 7306 §4.2 "ULP Message allowed: No", RFC
         * 7306 §6.3 "exactly 8 bytes"). A Terminate's length is what the
         * sender says (its attached headers vary, RFC 5040 §4.8), so its
         * bytes up to UIW_TERM_MAX_ULPDU are all Terminate header. */
        if (hdr->mo != 0) {
            /* RFC 5041 §7.1 (3) */
            *cause = (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_INVALID_MO};
            return "header-only message with MO != 0";
        }
        if (!hdr->last) {
            /* RFC 5041 §7.1 (4): the message continues past its buffer */
            *cause =
                (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG};
            return "header-only message without L";
        }
        if (opcode != UIW_OP_TERMINATE && (size_t)r != ulpdu) {
            *cause =
                (uiw_term_cause){UIW_LAYER_DDP, UIW_DDP_ET_UNTAGGED, UIW_DDP_EC_U_MSG_TOO_LONG};
            return opcode == UIW_OP_READ_REQ ? "Read Request carries payload"
                                             : "header-only message carries payload";
        }
        if (opcode == UIW_OP_TERMINATE)
            r = (int)ulpdu;
    }
    *hlen = (uint16_t)r;
    return NULL;
}

/* The whole header (hdr_want bytes after the length field) is in hdrbuf.
 * Returns true with *ev set when an event (HDR or ERROR) is ready. */
static bool header_done(uiw_rx *rx, uiw_rx_event *ev)
{
    uiw_term_cause cause;
    uint16_t hlen = 0;
    const char *why;

    if (rx->f.err_pending) { /* already doomed: no HDR, read on to the CRC */
        enter_skip(rx);
        return false;
    }

    why = hdr_check(rx->hdrbuf + UIW_MPA_LEN_FIELD, rx->f.hdr_want, rx->f.ulpdu_len, &rx->hdr,
                    &cause, &hlen);
    if (why) {
        if (fail(rx, cause.layer, cause.etype, cause.ecode, why, true)) {
            *ev = rx->err;
            return true;
        }
        enter_skip(rx);
        return false;
    }

    rx->f.hdr_len = hlen;
    rx->f.payload_len = (uint32_t)rx->f.ulpdu_len - hlen;
    rx->f.payload_done = 0;
    ev->kind = UIW_RX_HDR;
    ev->fpdu_off = rx->fpdu_off;
    ev->ulpdu_len = rx->f.ulpdu_len;
    ev->hdr = &rx->hdr;
    ev->hdr_len = rx->f.hdr_len;
    ev->payload_len = rx->f.payload_len;
    ev->nmarkers = rx->f.nmarkers;
    if (rx->f.payload_len)
        rx->state = S_PAYLOAD;
    else
        enter_pad(rx);
    return true;
}

/* How many header bytes (after the length field) to collect for a ULPDU
 * of ulpdu bytes whose 2-byte DDP/RDMAP control field is at h. */
static unsigned hdr_want_for(const uint8_t *h, unsigned ulpdu)
{
    bool tagged = h[0] & 0x80;
    unsigned opcode = h[1] & 0x0F;
    unsigned base = tagged ? UIW_HDR_TAGGED_LEN : UIW_HDR_UNTAGGED_LEN;
    unsigned want;

    if (!tagged && opcode == UIW_OP_TERMINATE) {
        /* RFC 5040 §4.8: the Terminate header is variable; take the whole
         * ULPDU if it fits (checked in hdr_check otherwise). */
        want = ulpdu <= UIW_TERM_MAX_ULPDU ? ulpdu : base;
    } else {
        int hl = uiw_hdr_len(tagged, opcode);
        want = (hl > 0 && (size_t)hl <= UIW_RX_HDRBUF - UIW_MPA_LEN_FIELD) ? (unsigned)hl : base;
    }
    if (want > ulpdu)
        want = ulpdu;
    if (want < 2)
        want = 2;
    return want;
}

/* hdrbuf holds the 2-byte DDP/RDMAP control field: decide how many header
 * bytes to collect. */
static void size_header(uiw_rx *rx)
{
    rx->f.hdr_want = (uint16_t)hdr_want_for(rx->hdrbuf + UIW_MPA_LEN_FIELD, rx->f.ulpdu_len);
    rx->f.hdr_sized = true;
}

/* Add up to avail bytes at p to the header buffer, until it holds end
 * bytes; *used = what was taken. True once it holds end bytes. */
static bool hdr_fill(uiw_rx *rx, const uint8_t *p, size_t avail, size_t end, size_t *used)
{
    size_t take = min_sz(avail, end - rx->f.hdr_have);

    memcpy(rx->hdrbuf + rx->f.hdr_have, p, take);
    hash(rx, p, take);
    rx->f.hdr_have += (uint16_t)take;
    rx->stream_off += take;
    *used = take;
    return rx->f.hdr_have >= end;
}

/* The FPDU's CRC field is in: report the pending error (*ev) with what the
 * CRC check found, and stop. */
static bool crc_err(uiw_rx *rx, bool checked, bool ok, uint32_t recv, uint32_t calc,
                    uiw_rx_event *ev)
{
    rx->err.crc_checked = checked;
    rx->err.crc_ok = ok;
    rx->err.crc_recv = recv;
    rx->err.crc_calc = calc;
    rx->err.fpdu_bytes = (uint32_t)(rx->stream_off - rx->fpdu_begin);
    rx->dead = true;
    *ev = rx->err;
    return true;
}

/* Process up to avail (>0) bytes of FPDU content (no marker inside).
 * Sets *used; returns true with *ev set when an event is ready. */
static bool step(uiw_rx *rx, const uint8_t *p, size_t avail, size_t *used, uiw_rx_event *ev)
{
    size_t take;

    switch (rx->state) {
    case S_LEN:
        if (rx->f.hdr_have == 0)
            rx->fpdu_off = rx->stream_off;
        if (!hdr_fill(rx, p, avail, UIW_MPA_LEN_FIELD, used))
            return false;
        rx->f.ulpdu_len = uiw_get_be16(rx->hdrbuf);
        /* RFC 5044 §8 code 3: a ULPDU_Length that cannot hold a DDP control
         * field, or exceeds the MULPDU we accept, cannot be followed. */
        if (rx->f.ulpdu_len < 2) {
            fail_mpa(rx, UIW_MPA_EC_MARKER, "ULPDU_Length < 2", false);
            *ev = rx->err;
            return true;
        }
        if (rx->f.ulpdu_len > (rx->cfg.max_ulpdu ? rx->cfg.max_ulpdu : 65535u)) {
            fail_mpa(rx, UIW_MPA_EC_MARKER, "ULPDU_Length > max_ulpdu", false);
            *ev = rx->err;
            return true;
        }
        rx->state = S_HDR;
        rx->f.hdr_want = 2;
        rx->f.hdr_sized = false;
        return false;

    case S_HDR:
        if (!hdr_fill(rx, p, avail, (size_t)UIW_MPA_LEN_FIELD + rx->f.hdr_want, used))
            return false;
        if (!rx->f.hdr_sized) {
            size_header(rx);
            if (rx->f.hdr_have < UIW_MPA_LEN_FIELD + rx->f.hdr_want)
                return false;
        }
        return header_done(rx, ev);

    case S_PAYLOAD:
        take = min_sz(avail, rx->f.payload_len - rx->f.payload_done);
        hash(rx, p, take);
        *used = take;
        if (!rx->f.err_pending) {
            ev->kind = UIW_RX_PAYLOAD;
            ev->data = p;
            ev->len = (uint32_t)take;
            ev->offset = rx->f.payload_done;
            ev->data_off = rx->stream_off;
        }
        rx->stream_off += take;
        rx->f.payload_done += (uint32_t)take;
        if (rx->f.payload_done == rx->f.payload_len)
            enter_pad(rx);
        return ev->kind == UIW_RX_PAYLOAD;

    case S_SKIP:
        take = min_sz(avail, rx->f.skip_left);
        hash(rx, p, take);
        rx->stream_off += take;
        rx->f.skip_left -= (uint32_t)take;
        *used = take;
        if (!rx->f.skip_left)
            enter_pad(rx);
        return false;

    case S_PAD:
        take = min_sz(avail, (size_t)(rx->f.pad_len - rx->f.pad_have));
        for (size_t k = 0; k < take; k++)
            if (p[k])
                rx->f.pad_nonzero = true;
        hash(rx, p, take);
        rx->stream_off += take;
        rx->f.pad_have += (uint8_t)take;
        *used = take;
        if (rx->f.pad_have < rx->f.pad_len)
            return false;
        rx->state = S_CRC;
        rx->f.crc_have = 0;
        /* RFC 5044 §4.1: pad "MUST be set to zero by the sender and
         * ignored by the receiver"; strict_pad reports the sender. */
        if (rx->f.pad_nonzero && rx->cfg.strict_pad &&
            fail_mpa(rx, UIW_MPA_EC_MARKER, "non-zero pad (strict_pad)", true)) {
            *ev = rx->err;
            return true;
        }
        return false;

    case S_CRC: {
        uint32_t recv, calc;
        take = min_sz(avail, (size_t)(UIW_MPA_CRC_LEN - rx->f.crc_have));
        memcpy(rx->crcbuf + rx->f.crc_have, p, take);
        rx->f.crc_have += (uint8_t)take;
        rx->stream_off += take;
        *used = take;
        if (rx->f.crc_have < UIW_MPA_CRC_LEN)
            return false;
        /* RFC 5044 §4.1: without CRC the field "may contain any value, and
         * MUST NOT be checked". */
        recv = uiw_crc32c_get(rx->crcbuf);
        calc = rx->cfg.crc ? uiw_crc32c_final(rx->crc_state) : 0;
        if (rx->cfg.crc && recv != calc) {
            /* RFC 5044 §4.4, §8 code 2; overrides anything found inside. */
            set_err(rx, UIW_LAYER_LLP, UIW_LLP_ET_MPA, UIW_MPA_EC_CRC, "CRC mismatch");
            return crc_err(rx, true, false, recv, calc, ev);
        }
        if (rx->f.err_pending)
            return crc_err(rx, rx->cfg.crc, true, recv, calc, ev);
        ev->kind = UIW_RX_END;
        ev->fpdu_off = rx->fpdu_off;
        ev->ulpdu_len = rx->f.ulpdu_len;
        ev->hdr_len = rx->f.hdr_len;
        ev->payload_len = rx->f.payload_len;
        ev->crc_checked = rx->cfg.crc;
        ev->crc_ok = true;
        ev->crc_recv = recv;
        ev->crc_calc = calc;
        ev->pad_nonzero = rx->f.pad_nonzero;
        ev->marker_rsvd = rx->f.marker_rsvd;
        ev->nmarkers = rx->f.nmarkers;
        ev->fpdu_bytes = (uint32_t)(rx->stream_off - rx->fpdu_begin);
        fpdu_reset(rx);
        return true;
    }
    }
    *used = 0;
    return false;
}

/* The whole-FPDU fast path (cfg.fpdu_events): at an FPDU boundary (state
 * S_LEN, nothing buffered, no markers) with the whole FPDU in the input
 * (RFC 5044 §4.1: ULPDU_Length, ULPDU, pad, CRC), the slow path's checks
 * in one go: ULPDU_Length bounds (RFC 5044 §8 code 3), hdr_check, pad
 * (strict_pad) and the CRC over the same bytes the slow path hashes (RFC
 * 5044 §4.4: length field, ULPDU, pad). Returns the FPDU's bytes with *ev
 * a UIW_RX_FPDU event, or 0 with nothing changed but rx->hdr (which the
 * slow path decodes again from the same bytes): then the slow path takes
 * the input, so that anything short of a valid FPDU gets exactly its
 * verdict. Reads only in[0, fpdu length), which is within len. */
static size_t fpdu_fast(uiw_rx *rx, const uint8_t *in, size_t len, uiw_rx_event *ev)
{
    const uint8_t *h = in + UIW_MPA_LEN_FIELD;
    unsigned ulpdu, want, pad;
    size_t total;
    uint16_t hlen = 0;
    uiw_term_cause cause;
    uint32_t recv, calc = 0;
    bool pad_nonzero = false;

    if (len < UIW_MPA_LEN_FIELD)
        return 0;
    ulpdu = uiw_get_be16(in);
    if (ulpdu < 2 || ulpdu > (rx->cfg.max_ulpdu ? rx->cfg.max_ulpdu : 65535u))
        return 0;
    total = uiw_fpdu_len(ulpdu);
    if (total > len)
        return 0;
    want = hdr_want_for(h, ulpdu);
    /* the slow path consumes hdr_want bytes as header; its payload starts
     * there, so hdr_len == hdr_want on success (checked, not assumed) */
    if (hdr_check(h, want, ulpdu, &rx->hdr, &cause, &hlen) || hlen != want)
        return 0;
    pad = uiw_mpa_pad(ulpdu);
    for (unsigned k = 0; k < pad; k++)
        if (h[ulpdu + k])
            pad_nonzero = true;
    if (pad_nonzero && rx->cfg.strict_pad)
        return 0;
    recv = uiw_crc32c_get(in + total - UIW_MPA_CRC_LEN);
    if (rx->cfg.crc) {
        calc = uiw_crc32c_final(uiw_crc32c_update(UIW_CRC32C_INIT, in, total - UIW_MPA_CRC_LEN));
        if (calc != recv)
            return 0;
    }

    /* valid: commit. rx->f is already zero (fpdu_reset, nothing buffered);
     * hdrbuf keeps the header for uiw_rx_fpdu_rewind. */
    memcpy(rx->hdrbuf, in, UIW_MPA_LEN_FIELD + want);
    ev->kind = UIW_RX_FPDU;
    ev->fpdu_off = rx->stream_off;
    ev->ulpdu_len = (uint16_t)ulpdu;
    ev->hdr = &rx->hdr;
    ev->hdr_len = hlen;
    ev->payload_len = ulpdu - hlen;
    ev->data = h + hlen;
    ev->len = ulpdu - hlen;
    ev->offset = 0;
    ev->data_off = rx->stream_off + UIW_MPA_LEN_FIELD + hlen;
    ev->crc_checked = rx->cfg.crc;
    ev->crc_ok = true;
    ev->crc_recv = recv;
    ev->crc_calc = calc;
    ev->pad_nonzero = pad_nonzero;
    ev->marker_rsvd = false;
    ev->nmarkers = 0;
    ev->fpdu_bytes = (uint32_t)total;
    /* the ERROR fields: zero (bad_hdr_len 0: bad_hdr holds nothing) */
    ev->cause = (uiw_term_cause){0, 0, 0};
    ev->why = NULL;
    ev->ulpdu_valid = false;
    ev->err_off = 0;
    ev->resume_off = 0;
    ev->bad_hdr_len = 0;

    rx->stream_off += total;
    rx->fpdu_begin = rx->stream_off;
    rx->fpdu_off = rx->stream_off;
    rx->fpdu_last = true;
    return total;
}

size_t uiw_rx_fpdu_rewind(uiw_rx *rx)
{
    unsigned ulpdu, want;
    uint64_t begin;

    if (!rx->fpdu_last || rx->dead)
        return 0;
    rx->fpdu_last = false;
    /* the state header_done leaves after this FPDU's header */
    ulpdu = uiw_get_be16(rx->hdrbuf);
    want = hdr_want_for(rx->hdrbuf + UIW_MPA_LEN_FIELD, ulpdu);
    begin = rx->stream_off - uiw_fpdu_len(ulpdu);
    rx->stream_off = begin;
    fpdu_reset(rx);
    rx->f.ulpdu_len = (uint16_t)ulpdu;
    rx->f.hdr_want = (uint16_t)want;
    rx->f.hdr_sized = true;
    rx->f.hdr_have = (uint16_t)(UIW_MPA_LEN_FIELD + want);
    hash(rx, rx->hdrbuf, UIW_MPA_LEN_FIELD + want);
    rx->stream_off = begin + UIW_MPA_LEN_FIELD + want;
    rx->f.hdr_len = (uint16_t)want;
    rx->f.payload_len = ulpdu - want;
    rx->f.payload_done = 0;
    if (rx->f.payload_len)
        rx->state = S_PAYLOAD;
    else
        enter_pad(rx);
    return uiw_fpdu_len(ulpdu) - UIW_MPA_LEN_FIELD - want;
}

size_t uiw_rx_feed(uiw_rx *rx, const uint8_t *in, size_t len, uiw_rx_event *ev)
{
    size_t i = 0;

    if (rx->cfg.fpdu_events && rx->state == S_LEN && rx->f.hdr_have == 0 && !rx->cfg.markers &&
        !rx->dead) {
        size_t n = fpdu_fast(rx, in, len, ev);
        if (n)
            return n;
    }
    rx->fpdu_last = false;
    memset(ev, 0, sizeof(*ev));
    if (rx->dead) {
        *ev = rx->err;
        return 0;
    }
    while (i < len) {
        size_t avail = len - i, used = 0;

        if (rx->cfg.markers) {
            /* RFC 5044 §4.3: a marker at every 512th octet, the first one
             * at stream offset 0. */
            unsigned m = (unsigned)(rx->stream_off % UIW_MARKER_INTERVAL);
            if (m < UIW_MARKER_LEN) {
                size_t take = min_sz(avail, UIW_MARKER_LEN - m);
                if (m == 0)
                    marker_begin(rx);
                memcpy(rx->marker + m, in + i, take);
                if (rx->marker_hashed)
                    hash(rx, in + i, take);
                rx->stream_off += take;
                i += take;
                if (m + take == UIW_MARKER_LEN && marker_end(rx)) {
                    *ev = rx->err;
                    return i;
                }
                continue;
            }
            avail = min_sz(avail, UIW_MARKER_INTERVAL - m);
        }
        if (step(rx, in + i, avail, &used, ev))
            return i + used;
        i += used;
    }
    return i;
}

uint32_t uiw_rx_payload_room(const uiw_rx *rx, uint32_t *offset)
{
    uint32_t room;

    if (rx->dead || rx->state != S_PAYLOAD || rx->f.err_pending)
        return 0;
    room = rx->f.payload_len - rx->f.payload_done;
    if (rx->cfg.markers) {
        unsigned m = (unsigned)(rx->stream_off % UIW_MARKER_INTERVAL);
        if (m < UIW_MARKER_LEN)
            return 0;
        if (room > UIW_MARKER_INTERVAL - m)
            room = UIW_MARKER_INTERVAL - m;
    }
    if (offset)
        *offset = rx->f.payload_done;
    return room;
}

bool uiw_rx_idle(const uiw_rx *rx)
{
    if (rx->dead || rx->state != S_LEN || rx->f.hdr_have != 0)
        return false;
    if (rx->cfg.markers) {
        unsigned m = (unsigned)(rx->stream_off % UIW_MARKER_INTERVAL);
        if (m > 0 && m < UIW_MARKER_LEN)
            return false;
    }
    return true;
}
