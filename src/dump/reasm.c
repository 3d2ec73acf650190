/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * One-direction TCP stream reassembly (RFC 9293 §3.4 sequence numbers).
 *
 * Stream offsets are 64-bit: offset 0 is the first byte after the SYN (the
 * SYN occupies sequence number ISN, RFC 9293 §3.4.1), or the first sequence
 * number seen when the capture has no SYN. A 32-bit sequence number maps to
 * the offset nearest to the delivery point, which handles wrap-around and
 * streams longer than 4 GiB.
 *
 * Segments ahead of the delivery point are copied into a sorted list of
 * non-overlapping pieces; where a segment overlaps bytes already held or
 * delivered, the bytes seen first are kept and the rest trimmed (counted
 * as duplicates; differing bytes are reported as a conflict).
 */
#include "capture.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct uiw_reasm_seg {
    uiw_reasm_seg *next;
    uint64_t off;
    uint32_t len;
    uiw_seg_meta m;
    uint8_t data[];
};

#define REASM_DEFAULT_LIMIT (8u << 20)

void uiw_reasm_init(uiw_reasm *r, const uiw_reasm_ops *ops, void *ctx, int dir, size_t limit)
{
    memset(r, 0, sizeof(*r));
    r->ops = ops;
    r->ctx = ctx;
    r->dir = dir;
    r->limit = limit ? limit : REASM_DEFAULT_LIMIT;
}

void uiw_reasm_free(uiw_reasm *r)
{
    uiw_reasm_seg *s = r->head;
    while (s) {
        uiw_reasm_seg *n = s->next;
        free(s);
        s = n;
    }
    r->head = NULL;
    r->buffered = 0;
}

static void emit(uiw_reasm *r, uint8_t kind, uint64_t off, uint64_t len, uint64_t frame, double ts)
{
    uiw_reasm_event ev = {.kind = kind, .off = off, .len = len, .frame = frame, .ts = ts};
    if (r->ops && r->ops->event)
        r->ops->event(r->ctx, r->dir, &ev);
}

static void deliver(uiw_reasm *r, const uint8_t *p, size_t n, const uiw_seg_meta *m)
{
    if (n == 0)
        return;
    uint64_t off = r->next;
    r->next += n;
    r->st.bytes += n;
    if (r->ops && r->ops->data)
        r->ops->data(r->ctx, r->dir, off, p, n, m);
}

/* Signed stream offset of a sequence number, relative to the delivery point. */
static int64_t seq_to_off(const uiw_reasm *r, uint32_t seq)
{
    uint32_t rel = seq - r->base_seq;
    int32_t delta = (int32_t)(rel - (uint32_t)r->next);
    return (int64_t)r->next + delta;
}

uint64_t uiw_reasm_offset(const uiw_reasm *r, uint32_t seq)
{
    int64_t off = seq_to_off(r, seq);
    return off < 0 ? 0 : (uint64_t)off;
}

static void check_fin(uiw_reasm *r, uint64_t frame, double ts)
{
    if (r->fin_seen && !r->fin_done && r->next >= r->fin_off) {
        r->fin_done = true;
        emit(r, UIW_RE_FIN, r->fin_off, 0, frame, ts);
    }
}

/* Deliver buffered pieces that have become contiguous. */
static void drain(uiw_reasm *r)
{
    while (r->head && r->head->off <= r->next) {
        uiw_reasm_seg *s = r->head;
        r->head = s->next;
        r->buffered -= s->len;
        uint64_t end = s->off + s->len;
        if (end > r->next) {
            size_t skip = (size_t)(r->next - s->off);
            r->st.dup_bytes += skip;
            deliver(r, s->data + skip, s->len - skip, &s->m);
        } else {
            r->st.dup_bytes += s->len;
        }
        free(s);
    }
}

/* Declare the hole before the first buffered piece lost and move on. */
static void skip_hole(uiw_reasm *r)
{
    if (!r->head)
        return;
    uint64_t hole = r->head->off - r->next;
    if (hole) {
        r->st.gaps++;
        r->st.gap_bytes += hole;
        emit(r, UIW_RE_GAP, r->next, hole, r->head->m.frame, r->head->m.ts);
        r->next = r->head->off;
    }
    drain(r);
}

static uint64_t count_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t d = 0;
    for (size_t i = 0; i < n; i++)
        d += a[i] != b[i];
    return d;
}

static int new_piece(uiw_reasm *r, uiw_reasm_seg **link, uint64_t off, const uint8_t *p, size_t n,
                     const uiw_seg_meta *m)
{
    uiw_reasm_seg *s = malloc(sizeof(*s) + n);
    if (!s)
        return -ENOMEM;
    s->off = off;
    s->len = (uint32_t)n;
    s->m = *m;
    memcpy(s->data, p, n);
    s->next = *link;
    *link = s;
    r->buffered += n;
    if (r->buffered > r->st.peak_buffered)
        r->st.peak_buffered = r->buffered;
    return 0;
}

/* Hold [off, off+n) (off > next), splitting it around pieces already held. */
static int hold(uiw_reasm *r, uint64_t off, const uint8_t *p, size_t n, const uiw_seg_meta *m)
{
    uint64_t end = off + n, cur = off;
    uiw_reasm_seg **link = &r->head;
    bool added = false;
    uint64_t conflicts = 0;
    while (cur < end) {
        while (*link && (*link)->off + (*link)->len <= cur)
            link = &(*link)->next;
        uiw_reasm_seg *x = *link;
        if (!x || x->off >= end) {
            if (new_piece(r, link, cur, p + (cur - off), (size_t)(end - cur), m) < 0)
                return -ENOMEM;
            added = true;
            break;
        }
        if (x->off > cur) {
            if (new_piece(r, link, cur, p + (cur - off), (size_t)(x->off - cur), m) < 0)
                return -ENOMEM;
            added = true;
            link = &(*link)->next; /* now points at x again */
            cur = x->off;
        }
        uint64_t ov_end = end < x->off + x->len ? end : x->off + x->len;
        conflicts += count_diff(p + (cur - off), x->data + (cur - x->off), (size_t)(ov_end - cur));
        r->st.dup_bytes += ov_end - cur;
        cur = ov_end;
    }
    if (added)
        r->st.ooo_segments++;
    else
        r->st.dup_segments++;
    if (conflicts) {
        r->st.conflict_bytes += conflicts;
        emit(r, UIW_RE_CONFLICT, off, conflicts, m->frame, m->ts);
    }
    return 0;
}

static int add_data(uiw_reasm *r, uint64_t off, const uint8_t *p, size_t n, const uiw_seg_meta *m)
{
    uint64_t end = off + n;
    if (end <= r->next) {
        r->st.dup_segments++;
        r->st.dup_bytes += n;
        return 0;
    }
    if (off < r->next) {
        size_t trim = (size_t)(r->next - off);
        r->st.dup_bytes += trim;
        p += trim;
        n -= trim;
        off = r->next;
    }
    if (off > r->next) {
        int rc = hold(r, off, p, n, m);
        if (rc < 0)
            return rc;
        while (r->buffered > r->limit && r->head) {
            r->st.overflows++;
            emit(r, UIW_RE_OVERFLOW, r->next, r->buffered, m->frame, m->ts);
            skip_hole(r);
        }
        return 0;
    }
    /* In order. Compare with held pieces it overlaps before they are trimmed. */
    uint64_t conflicts = 0;
    for (uiw_reasm_seg *x = r->head; x && x->off < end; x = x->next) {
        uint64_t a = x->off, b = x->off + x->len < end ? x->off + x->len : end;
        conflicts += count_diff(p + (a - off), x->data, (size_t)(b - a));
    }
    if (conflicts) {
        r->st.conflict_bytes += conflicts;
        emit(r, UIW_RE_CONFLICT, off, conflicts, m->frame, m->ts);
    }
    deliver(r, p, n, m);
    drain(r);
    return 0;
}

/* Does [off, end) overlap a held piece? */
static bool overlaps_held(const uiw_reasm *r, uint64_t off, uint64_t end)
{
    for (const uiw_reasm_seg *x = r->head; x && x->off < end; x = x->next)
        if (x->off + x->len > off)
            return true;
    return false;
}

int uiw_reasm_segment(uiw_reasm *r, uint32_t seq, uint32_t ack, uint8_t flags, const uint8_t *data,
                      size_t len, uint64_t frame, double ts)
{
    uiw_seg_meta m = {.frame = frame, .ts = ts, .has_ack = (flags & UIW_TCP_ACK) != 0, .ack = ack};
    bool sack = r->seg_sack;
    r->seg_sack = false;
    r->st.segments++;
    if (len > r->st.max_seg)
        r->st.max_seg = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
    if (!r->started) {
        r->started = true;
        if (flags & UIW_TCP_SYN) {
            r->syn_seen = true;
            r->base_seq = seq + 1; /* the SYN occupies the ISN (RFC 9293 §3.4) */
        } else {
            r->base_seq = seq;
            emit(r, UIW_RE_MIDSTREAM, 0, 0, frame, ts);
        }
    }
    if (flags & UIW_TCP_RST) {
        if (!r->rst_seen) {
            r->rst_seen = true;
            emit(r, UIW_RE_RST, r->next, 0, frame, ts);
        }
        return 0;
    }
    /* SACK blocks on any segment of this direction, pure ACKs too: the
     * sender's buffers built meanwhile are cut to the smaller EMSS */
    r->sack_since |= sack;
    uint32_t dseq = (flags & UIW_TCP_SYN) ? seq + 1 : seq;
    int64_t off = seq_to_off(r, dseq);
    if (len > 0) {
        m.seg_off = off < 0 ? 0 : (uint64_t)off;
        m.seg_len = len > UINT32_MAX ? UINT32_MAX : (uint32_t)len;
        m.retx = off < 0 || (uint64_t)off < r->next ||
                 overlaps_held(r, (uint64_t)off, (uint64_t)off + len);
        m.sack = r->sack_since;
        if (!m.retx)
            r->sack_since = false;
        if (off < 0) {
            uint64_t before = (uint64_t)-off;
            if (before >= len) {
                emit(r, UIW_RE_BEFORE_START, 0, len, frame, ts);
                return 0;
            }
            emit(r, UIW_RE_BEFORE_START, 0, before, frame, ts);
            data += before;
            len -= (size_t)before;
            off = 0;
        }
        if (r->fin_seen && (uint64_t)off + len > r->fin_off) {
            uint64_t keep = (uint64_t)off >= r->fin_off ? 0 : r->fin_off - (uint64_t)off;
            emit(r, UIW_RE_AFTER_FIN, r->fin_off, len - keep, frame, ts);
            len = (size_t)keep;
        }
        if (len) {
            int rc = add_data(r, (uint64_t)off, data, len, &m);
            if (rc < 0)
                return rc;
        }
    }
    if ((flags & UIW_TCP_FIN) && !r->fin_seen && off >= 0) {
        r->fin_seen = true;
        r->fin_off = (uint64_t)off + len;
    }
    check_fin(r, frame, ts);
    return 0;
}

void uiw_reasm_ack(uiw_reasm *r, uint32_t ack, uint64_t frame, double ts)
{
    if (!r->started || r->rst_seen)
        return;
    int64_t target = seq_to_off(r, ack);
    /* the FIN occupies one sequence number after the data (RFC 9293 §3.4) */
    if (r->fin_seen && target > (int64_t)r->fin_off)
        target = (int64_t)r->fin_off;
    /* An ACK more than 2^30 ahead is not believable (corrupted or foreign). */
    if (target <= (int64_t)r->next || target - (int64_t)r->next > (1ll << 30))
        return;
    /* The peer has received everything below target. In a capture taken at
     * one point a segment is always captured before the ACK that covers it,
     * so what the capture does not have of it was lost by the capture (or
     * the capture is out of order across directions). */
    while (r->next < (uint64_t)target) {
        uint64_t end = r->head && r->head->off < (uint64_t)target ? r->head->off : (uint64_t)target;
        if (end > r->next) {
            r->st.gaps++;
            r->st.gap_bytes += end - r->next;
            r->st.acked_unseen += end - r->next;
            emit(r, UIW_RE_GAP, r->next, end - r->next, frame, ts);
            r->next = end;
        }
        drain(r);
    }
    check_fin(r, frame, ts);
}

void uiw_reasm_flush(uiw_reasm *r)
{
    while (r->head)
        skip_hole(r);
    if (r->fin_seen && !r->fin_done && r->next < r->fin_off) {
        uint64_t hole = r->fin_off - r->next;
        r->st.gaps++;
        r->st.gap_bytes += hole;
        emit(r, UIW_RE_GAP, r->next, hole, 0, 0);
        r->next = r->fin_off;
    }
    check_fin(r, 0, 0);
}
