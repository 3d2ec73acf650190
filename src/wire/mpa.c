/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * MPA Request / Reply / Reject frames: RFC 5044 §7.1.1, enhanced by
 * RFC 6581 §6 (S bit) and §9 (IRD/ORD words with the A/B/C/D flags).
 *
 *   0-15  Key "MPA ID Req Frame" | "MPA ID Rep Frame"   (RFC 5044 §7.1.1)
 *   16    M C R S Res(4)   (S only from Rev 2 on: RFC 6581 §6)
 *   17    Rev
 *   18-19 PD_Length, big-endian, <= 512, includes the RFC 6581 words
 *   20-   Private Data: [A B IRD(14)] [C D ORD(14)] when S, then ULP data
 *
 * Pure codec: no state, no allocation, never reads past the given length.
 */
#include "uiw_port.h"
#include "uiw_be.h"
#include "uiwarp/wire.h"

/* RFC 5044 §7.1.1: the two keys differ only in byte 9 ('q' vs 'p'). */
static const uint8_t key_req[UIW_MPA_KEY_LEN] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
                                                 'e', 'q', ' ', 'F', 'r', 'a', 'm', 'e'};
static const uint8_t key_rep[UIW_MPA_KEY_LEN] = {'M', 'P', 'A', ' ', 'I', 'D', ' ', 'R',
                                                 'e', 'p', ' ', 'F', 'r', 'a', 'm', 'e'};

/* Reserved bits of the flags byte. Up to Rev 1 the bit that RFC 6581 calls
 * S is still part of Res (RFC 5044 §7.1.1): RFC 6581 §6 says enhanced
 * features need Rev >= 2, so a Rev 0/1 frame's 0x10 bit is "Res", reported
 * and not checked. */
static inline uint8_t res_mask(unsigned rev)
{
    return rev >= 2 ? UIW_MPA_FLAG_RES : (uint8_t)(UIW_MPA_FLAG_RES | UIW_MPA_FLAG_S);
}

/* Which kind(s) the first n (<= 16) key bytes can still become:
 * bit 0 = Request, bit 1 = Reply. */
static unsigned key_match(const uint8_t *in, size_t n)
{
    unsigned m = 3;
    if (n == 0)
        return m;
    if (n > UIW_MPA_KEY_LEN)
        n = UIW_MPA_KEY_LEN;
    if (memcmp(in, key_req, n) != 0)
        m &= ~1u;
    if (memcmp(in, key_rep, n) != 0)
        m &= ~2u;
    return m;
}

int uiw_mpa_encode(const uiw_mpa_frame *f, uint8_t *out, size_t cap)
{
    if (!f || (!out && cap))
        return -EINVAL;
    if (f->kind != UIW_MPA_REQUEST && f->kind != UIW_MPA_REPLY)
        return -EINVAL;
    /* RFC 6581 §6: the enhanced format needs Rev >= 2. */
    if (f->enhanced && f->rev < 2)
        return -EINVAL;
    /* RFC 5044 §7.1.1: Res MUST be zero when sending. The codec writes what
     * it is given (so that a received frame re-encodes byte for byte);
     * the negotiation always passes 0. Bits outside Res are an error. */
    if (f->res & ~res_mask(f->rev))
        return -EINVAL;
    if (f->enhanced) {
        /* RFC 6581 §9: IRD and ORD are 14-bit unsigned integers. */
        if (f->ird > UIW_MPA_IRD_ORD_MASK || f->ord > UIW_MPA_IRD_ORD_MASK)
            return -EINVAL;
        if (f->rtr & ~(unsigned)(UIW_RTR_SEND | UIW_RTR_WRITE | UIW_RTR_READ))
            return -EINVAL;
    }
    size_t words = f->enhanced ? UIW_MPA_RFC6581_LEN : 0;
    /* RFC 5044 §7.1.1: Private Data 0..512 octets; RFC 6581 §9: the IRD/ORD
     * words count against it. */
    if (f->ulp_pd_len > UIW_MPA_MAX_PD - words)
        return -EMSGSIZE;
    size_t pd_len = words + f->ulp_pd_len;
    size_t total = UIW_MPA_HDR_LEN + pd_len;
    if (cap < total)
        return -EMSGSIZE;

    memcpy(out, f->kind == UIW_MPA_REQUEST ? key_req : key_rep, UIW_MPA_KEY_LEN);
    uint8_t flags = f->res;
    if (f->markers)
        flags |= UIW_MPA_FLAG_M;
    if (f->crc)
        flags |= UIW_MPA_FLAG_C;
    if (f->reject)
        flags |= UIW_MPA_FLAG_R;
    if (f->enhanced)
        flags |= UIW_MPA_FLAG_S;
    out[16] = flags;
    out[17] = f->rev;
    uiw_put_be16(out + 18, (unsigned)pd_len);
    uint8_t *p = out + UIW_MPA_HDR_LEN;
    if (f->enhanced) {
        /* RFC 6581 §9: |A|B| IRD(14) |C|D| ORD(14)|, network byte order. */
        unsigned ird = f->ird, ord = f->ord;
        if (f->p2p)
            ird |= UIW_MPA_IRD_A_P2P;
        if (f->rtr & UIW_RTR_SEND)
            ird |= UIW_MPA_IRD_B_SEND0;
        if (f->rtr & UIW_RTR_WRITE)
            ord |= UIW_MPA_ORD_C_WRITE0;
        if (f->rtr & UIW_RTR_READ)
            ord |= UIW_MPA_ORD_D_READ0;
        uiw_put_be16(p, ird);
        uiw_put_be16(p + 2, ord);
        p += UIW_MPA_RFC6581_LEN;
    }
    if (f->ulp_pd_len)
        memcpy(p, f->ulp_pd, f->ulp_pd_len);
    return (int)total;
}

int uiw_mpa_decode(const uint8_t *in, size_t len, unsigned expect_kind, uiw_mpa_frame *f)
{
    if (!f || (!in && len))
        return -EINVAL;
    if (expect_kind > UIW_MPA_REPLY)
        return -EINVAL;
    unsigned want = expect_kind == UIW_MPA_REQUEST ? 1u : expect_kind == UIW_MPA_REPLY ? 2u : 3u;

    /* RFC 5044 §7.1.1 / §7.1.2 rule 5: a key other than the expected one is
     * fatal. Decide as early as the bytes allow, so that a stream that can
     * never become a valid frame fails at once instead of waiting. */
    if ((key_match(in, len) & want) == 0)
        return -EPROTO;
    if (len < UIW_MPA_HDR_LEN)
        return -EAGAIN;

    uint8_t flags = in[16];
    uint8_t rev = in[17];
    uint16_t pd_len = uiw_get_be16(in + 18);
    /* RFC 5044 §7.1.1 PD_Length / §7.1.2 rule 9: more than 512 octets is an
     * improperly formatted frame. */
    if (pd_len > UIW_MPA_MAX_PD)
        return -EPROTO;
    /* RFC 6581 §6, §9: S means Private Data begins with the 4 IRD/ORD
     * bytes; S with less than that is malformed. S exists from Rev 2 on. */
    bool enhanced = rev >= 2 && (flags & UIW_MPA_FLAG_S);
    if (enhanced && pd_len < UIW_MPA_RFC6581_LEN)
        return -EPROTO;
    if (len < (size_t)UIW_MPA_HDR_LEN + pd_len)
        return -EAGAIN;

    memset(f, 0, offsetof(uiw_mpa_frame, ulp_pd));
    f->kind = in[9] == 'q' ? UIW_MPA_REQUEST : UIW_MPA_REPLY;
    f->markers = flags & UIW_MPA_FLAG_M;
    f->crc = flags & UIW_MPA_FLAG_C;
    /* R is reported as received. In a Request it is "set to zero, and not
     * checked on reception" (RFC 5044 §7.1.1): users must ignore it there. */
    f->reject = flags & UIW_MPA_FLAG_R;
    f->enhanced = enhanced;
    /* Res: MUST NOT be checked on receive (RFC 5044 §7.1.1, RFC 6581 §6);
     * reported (siw sets 0x08 = its GSO_EXP bit in some builds). */
    f->res = flags & res_mask(rev);
    f->rev = rev;
    f->pd_len = pd_len;
    const uint8_t *p = in + UIW_MPA_HDR_LEN;
    size_t ulp = pd_len;
    if (enhanced) {
        uint16_t ird = uiw_get_be16(p), ord = uiw_get_be16(p + 2);
        f->p2p = ird & UIW_MPA_IRD_A_P2P;
        /* B, C, D as received; RFC 6581 §9.2 says they are ignored when A
         * is 0, which is the negotiation's business, not the codec's. */
        if (ird & UIW_MPA_IRD_B_SEND0)
            f->rtr |= UIW_RTR_SEND;
        if (ord & UIW_MPA_ORD_C_WRITE0)
            f->rtr |= UIW_RTR_WRITE;
        if (ord & UIW_MPA_ORD_D_READ0)
            f->rtr |= UIW_RTR_READ;
        f->ird = ird & UIW_MPA_IRD_ORD_MASK;
        f->ord = ord & UIW_MPA_IRD_ORD_MASK;
        p += UIW_MPA_RFC6581_LEN;
        ulp -= UIW_MPA_RFC6581_LEN;
    }
    f->ulp_pd_len = (uint16_t)ulp;
    if (ulp)
        memcpy(f->ulp_pd, p, ulp);
    return (int)(UIW_MPA_HDR_LEN + pd_len);
}

size_t uiw_mpa_frame_want(const uint8_t *in, size_t have)
{
    size_t pd;

    if (have < UIW_MPA_HDR_LEN)
        return UIW_MPA_HDR_LEN;
    /* RFC 5044 §7.1: PD_Length, the last 16 bits of the header */
    pd = (size_t)in[18] << 8 | in[19];
    if (pd > UIW_MPA_MAX_PD)
        pd = UIW_MPA_MAX_PD;
    return UIW_MPA_HDR_LEN + pd;
}
