/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp wire core: the sans-I/O iWARP protocol library.
 *
 * MPA (RFC 5044, enhanced by RFC 6581), DDP (RFC 5041) and RDMAP (RFC 5040,
 * extended by RFC 7306) as codecs and state machines that take bytes and
 * return bytes and events. No sockets, no threads, no allocation: every
 * object is a plain struct the caller owns.
 *
 * One header for the whole core; one source file per concern under src/wire:
 *   crc.c      CRC32C (ISA-L; the kernel's crc32c in the module)
 *   hdr.c      DDP/RDMAP header encode/decode, Terminate control word
 *   names.c    names of opcodes, layers, error types and codes
 *   mpa.c      MPA Request/Reply/Reject frames, RFC 6581 words
 *   negotiate.c  the MPA negotiation as a pure state machine
 *   rx.c       the FPDU receive parser (markers, CRC, headers, payload)
 *   tx.c       the FPDU transmit segmenter (markers, pad, CRC, gather list)
 *
 * Conventions: functions return 0 or a positive count on success and a
 * negative errno-style value (-EINVAL, -EPROTO, -EMSGSIZE, -EAGAIN) on
 * failure unless documented otherwise. All multi-byte wire fields are
 * big-endian except the CRC, which is sent as the little-endian image of the
 * reflected CRC32C value (see ../shared/refs/crc32c-vectors.txt).
 */
#ifndef UIWARP_WIRE_H
#define UIWARP_WIRE_H

#ifdef __KERNEL__ /* the module (kernel/): the same types from the kernel */
#include <linux/types.h>
#include <linux/uio.h>
#else
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * CRC32C (RFC 3720 B.4 polynomial; RFC 5044 §4.4)
 * ---------------------------------------------------------------------- */

/* Incremental CRC32C. Start with UIW_CRC32C_INIT, feed pieces with
 * uiw_crc32c_update, finish with uiw_crc32c_final. The final value is the
 * conventional reflected CRC32C (0xE3069283 for "123456789"); it goes on the
 * wire as its little-endian byte image (uiw_crc32c_put). Pieces may have any
 * size, including 0 and more than INT_MAX bytes. */
#define UIW_CRC32C_INIT 0xFFFFFFFFu
uint32_t uiw_crc32c_update(uint32_t state, const void *buf, size_t len);
static inline uint32_t uiw_crc32c_final(uint32_t state)
{
    return state ^ 0xFFFFFFFFu;
}
/* One-shot convenience. */
uint32_t uiw_crc32c(const void *buf, size_t len);
/* Store / load the CRC in wire byte order. */
void uiw_crc32c_put(uint8_t out[4], uint32_t crc);
uint32_t uiw_crc32c_get(const uint8_t in[4]);

/* ------------------------------------------------------------------------
 * Constants: RDMAP opcodes (RFC 5040 §4.1 Figure 4, RFC 7306 §4.1 Figure 2,
 * RFC 6580 §3.4 registry)
 * ---------------------------------------------------------------------- */

enum uiw_opcode {
    UIW_OP_WRITE = 0x0,       /* RDMA Write, tagged */
    UIW_OP_READ_REQ = 0x1,    /* RDMA Read Request, untagged QN 1 */
    UIW_OP_READ_RESP = 0x2,   /* RDMA Read Response, tagged */
    UIW_OP_SEND = 0x3,        /* Send, QN 0 */
    UIW_OP_SEND_INV = 0x4,    /* Send with Invalidate, QN 0 */
    UIW_OP_SEND_SE = 0x5,     /* Send with Solicited Event, QN 0 */
    UIW_OP_SEND_SE_INV = 0x6, /* Send with SE and Invalidate, QN 0 */
    UIW_OP_TERMINATE = 0x7,   /* Terminate, QN 2 */
    UIW_OP_IMM_DATA = 0x8,    /* RFC 7306 Immediate Data, QN 0, 8 bytes */
    UIW_OP_IMM_DATA_SE = 0x9, /* RFC 7306 Immediate Data with SE, QN 0 */
    UIW_OP_ATOMIC_REQ = 0xA,  /* RFC 7306 Atomic Request, QN 1 */
    UIW_OP_ATOMIC_RESP = 0xB, /* RFC 7306 Atomic Response, QN 3 */
    /* 0xC-0xE unassigned; 0xF "Reserved (Experimental)" (RFC 6580 §3.4).
     * Both are "Unexpected OpCode" to uiw_hdr_decode. */
    UIW_OP_EXPERIMENTAL = 0xF,
};
#define UIW_OP_MAX 0xB /* highest defined opcode */

/* Untagged queue numbers (RFC 5040 §4.1 Figure 4, RFC 7306 §10.2). */
enum uiw_qn {
    UIW_QN_SEND = 0,     /* Send variants, Immediate Data */
    UIW_QN_READ_REQ = 1, /* also Atomic Requests */
    UIW_QN_TERMINATE = 2,
    UIW_QN_ATOMIC_RESP = 3,
};
#define UIW_QN_COUNT 4

/* RFC 7306 §5.2.1 Figure 5 and §10.1: atomic operation codes (0x1 is
 * reserved, 0x3-0xF unassigned). */
enum uiw_atomic_op {
    UIW_AOP_FETCH_ADD = 0x0,
    UIW_AOP_CMP_SWAP = 0x2,
};

/* Version fields (RFC 5041 §4.1 DV, RFC 5040 §4.1 RV).
 * DV MUST be 1. RV: RFC 5040 §4.1 says 01b (this RFC) and 00b (the RDMA
 * Consortium's RDMAC specification) are "both valid", interoperability
 * depending on the MPA version negotiated; RFC 7306 §4.1 requires 01b for
 * its opcodes. Rule: uiw_hdr_decode accepts RV 00b for opcodes 0x0-0x7
 * (and reports it in uiw_hdr.rdmap_version) and rejects it for 0x8-0xB;
 * RV 10b/11b are invalid. We always send 01b; whether a stream tolerates
 * 00b (only an MPA revision 0 / RDMAC peer would send it) is the caller's
 * policy. */
#define UIW_DDP_VERSION         1
#define UIW_RDMAP_VERSION       1
#define UIW_RDMAP_VERSION_RDMAC 0

/* ------------------------------------------------------------------------
 * Constants: Terminate layer / error type / error code
 * (RFC 5040 §4.8 Figure 9, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8;
 *  registries in RFC 6580 §3.1-3.3. RFC 7306 §8 adds no error codes: it
 *  reuses RFC 5040's, e.g. a misaligned atomic target is RDMAP / Remote
 *  Operation / Catastrophic error localized to RDMAP Stream.)
 * ---------------------------------------------------------------------- */

enum uiw_term_layer {
    UIW_LAYER_RDMAP = 0x0,
    UIW_LAYER_DDP = 0x1,
    UIW_LAYER_LLP = 0x2, /* MPA */
};

/* RDMAP error types (layer 0) */
enum uiw_rdmap_etype {
    UIW_RDMAP_ET_CATASTROPHIC = 0x0, /* Local Catastrophic Error */
    UIW_RDMAP_ET_REMOTE_PROT = 0x1,  /* Remote Protection Error */
    UIW_RDMAP_ET_REMOTE_OP = 0x2,    /* Remote Operation Error */
};
/* RDMAP error codes */
enum uiw_rdmap_ecode {
    /* with ET_CATASTROPHIC: the error type has no error code, any value is
     * acceptable (RFC 5040 Figure 9, RFC 6580 "0x0/0x0/ALL"); we send 0 */
    UIW_RDMAP_EC_UNSPECIFIED = 0x00,
    /* with ET_REMOTE_PROT */
    UIW_RDMAP_EC_INVALID_STAG = 0x00,
    UIW_RDMAP_EC_BASE_BOUNDS = 0x01,
    UIW_RDMAP_EC_ACCESS_RIGHTS = 0x02,
    UIW_RDMAP_EC_STAG_NOT_ASSOC = 0x03,
    UIW_RDMAP_EC_TO_WRAP = 0x04,
    /* with ET_REMOTE_OP */
    UIW_RDMAP_EC_INVALID_VERSION = 0x05,
    UIW_RDMAP_EC_UNEXPECTED_OPCODE = 0x06,
    UIW_RDMAP_EC_CATASTROPHIC_STREAM = 0x07,
    UIW_RDMAP_EC_CATASTROPHIC_GLOBAL = 0x08,
    /* with ET_REMOTE_PROT or ET_REMOTE_OP */
    UIW_RDMAP_EC_CANT_INVALIDATE = 0x09,   /* STag cannot be Invalidated */
    UIW_RDMAP_EC_UNSPECIFIED_OTHER = 0xFF, /* Unspecified Error */
};

/* DDP error types (layer 1) */
enum uiw_ddp_etype {
    UIW_DDP_ET_CATASTROPHIC = 0x0,
    UIW_DDP_ET_TAGGED = 0x1,
    UIW_DDP_ET_UNTAGGED = 0x2,
    UIW_DDP_ET_RSVD = 0x3, /* reserved for use by the LLP, RFC 5041 §7.2 */
};
/* DDP error codes */
enum uiw_ddp_ecode {
    /* with ET_CATASTROPHIC */
    UIW_DDP_EC_CATASTROPHIC = 0x00,
    /* with ET_TAGGED */
    UIW_DDP_EC_T_INVALID_STAG = 0x00,
    UIW_DDP_EC_T_BASE_BOUNDS = 0x01,
    UIW_DDP_EC_T_STAG_NOT_ASSOC = 0x02,
    UIW_DDP_EC_T_TO_WRAP = 0x03,
    UIW_DDP_EC_T_INVALID_VERSION = 0x04,
    /* with ET_UNTAGGED */
    UIW_DDP_EC_U_INVALID_QN = 0x01,
    UIW_DDP_EC_U_INVALID_MSN_NOBUF = 0x02,
    UIW_DDP_EC_U_INVALID_MSN_RANGE = 0x03,
    UIW_DDP_EC_U_INVALID_MO = 0x04,
    UIW_DDP_EC_U_MSG_TOO_LONG = 0x05,
    UIW_DDP_EC_U_INVALID_VERSION = 0x06,
};

/* LLP (MPA) error type and codes (layer 2; RFC 5044 §8, RFC 6581 §8) */
#define UIW_LLP_ET_MPA 0x0
/* The same codes under error type 3, as Intel's irdma and Chelsio's cxgb4
 * send MPA-layer Terminates (byte 0x23 for a CRC error; RFC 6581 §8 has
 * type 0): decoded as MPA errors, named by `uiwarp dump` (rnic-term-etype3) */
#define UIW_LLP_ET_RNIC 0x3
enum uiw_mpa_ecode {
    UIW_MPA_EC_TCP_CLOSED = 0x01,         /* TCP connection closed, terminated or lost */
    UIW_MPA_EC_CRC = 0x02,                /* received MPA CRC does not match */
    UIW_MPA_EC_MARKER = 0x03,             /* received marker or ULPDU_Length invalid */
    UIW_MPA_EC_INVALID_REQ = 0x04,        /* invalid MPA Request/Reply frame */
    UIW_MPA_EC_LOCAL_CATASTROPHIC = 0x05, /* RFC 6581 */
    UIW_MPA_EC_INSUFFICIENT_IRD = 0x06,   /* RFC 6581 */
    UIW_MPA_EC_NO_MATCHING_RTR = 0x07,    /* RFC 6581 */
};

/* A Terminate cause: what a receiver puts in the Terminate Control field. */
typedef struct uiw_term_cause {
    uint8_t layer; /* enum uiw_term_layer, 4 bits */
    uint8_t etype; /* 4 bits */
    uint8_t ecode; /* 8 bits */
} uiw_term_cause;

/* Short names in the RFCs' wording, e.g. "DDP", "untagged buffer",
 * "invalid MSN - no buffer available" (callers join them with '/'). Never
 * NULL; an undefined value gives "unknown(0xNN)" in a thread-local buffer
 * that stays valid for the next 7 unknown-value calls of the same thread. */
const char *uiw_opcode_name(unsigned opcode);
const char *uiw_term_layer_name(unsigned layer);
const char *uiw_term_etype_name(unsigned layer, unsigned etype);
const char *uiw_term_ecode_name(unsigned layer, unsigned etype, unsigned ecode);

/* ------------------------------------------------------------------------
 * DDP / RDMAP headers (RFC 5041 §4, RFC 5040 §4, RFC 7306 §4-6)
 *
 * Sizes count from the DDP control field (after the 2-byte MPA ULPDU_Length)
 * so that ULPDU_Length = header size + payload length.
 * ---------------------------------------------------------------------- */

#define UIW_HDR_TAGGED_LEN   14 /* ctrl(2) stag(4) to(8) */
#define UIW_HDR_UNTAGGED_LEN 18 /* ctrl(2) inv/rsvd(4) qn(4) msn(4) mo(4) */
#define UIW_RREQ_LEN         28 /* RDMAP Read Request header, RFC 5040 §4.4 */
#define UIW_ATOMIC_REQ_LEN   52 /* RFC 7306 §5.2.1 Figure 4 */
/* RFC 7306 §5.2.2 Figure 6: 32 + 64 bits. (The "32 bytes" in RFC 7306 §4
 * contradicts the figure and Appendix A.2; the figure wins.) */
#define UIW_ATOMIC_RESP_LEN 12
#define UIW_IMM_DATA_LEN    8 /* RFC 7306 §6.2 */
#define UIW_TERM_CTRL_LEN   4 /* RFC 5040 §4.8: Terminate Control(19) + Reserved(13) */
/* Terminate attachments (RFC 5040 §4.8 Figure 7): the 16-bit DDP Segment
 * Length followed by the terminated DDP header (112 bits tagged, 144
 * untagged). The two together sit where the offending FPDU had its MPA
 * ULPDU_Length and DDP header, hence 16 or 20 bytes, as siw sends them
 * (notes §2.8). Then the terminated RDMA header (a Read Request header,
 * 224 bits). */
#define UIW_TERM_DDP_SEGLEN_LEN 2
#define UIW_TERM_MAX_DDP_HDR    (UIW_TERM_DDP_SEGLEN_LEN + UIW_HDR_UNTAGGED_LEN)
#define UIW_TERM_MAX_RDMA_HDR   UIW_RREQ_LEN
/* Largest header the receive parser assembles before it emits UIW_RX_HDR
 * (untagged DDP header + Atomic Request header). */
#define UIW_HDR_MAX_LEN (UIW_HDR_UNTAGGED_LEN + UIW_ATOMIC_REQ_LEN)
/* Largest Terminate message ULPDU we accept (untagged hdr + ctrl + headers). */
#define UIW_TERM_MAX_ULPDU                                                                         \
    (UIW_HDR_UNTAGGED_LEN + UIW_TERM_CTRL_LEN + UIW_TERM_MAX_DDP_HDR + UIW_TERM_MAX_RDMA_HDR)

/* RFC 5040 §4.4 RDMA Read Request header */
typedef struct uiw_rreq {
    uint32_t sink_stag;
    uint64_t sink_to;
    uint32_t read_size;
    uint32_t src_stag;
    uint64_t src_to;
} uiw_rreq;

/* RFC 7306 §5.2.1 (the 28 reserved bits before AOpCode are sent as zero
 * and ignored on receive, so they are not kept) */
typedef struct uiw_atomic_req {
    uint8_t aop; /* enum uiw_atomic_op, low 4 bits of the first word */
    uint32_t req_id;
    uint32_t stag;
    uint64_t to;
    uint64_t add_swap;
    uint64_t add_swap_mask;
    uint64_t compare;
    uint64_t compare_mask;
} uiw_atomic_req;

/* RFC 7306 §5.2.2 */
typedef struct uiw_atomic_resp {
    uint32_t req_id;
    uint64_t orig_value;
} uiw_atomic_resp;

/* RFC 5040 §4.8 Terminate header (what follows the untagged DDP header):
 *   Terminate Control + Reserved              4 bytes, always
 *   DDP Segment Length                        2 bytes, if M or D
 *   Terminated DDP header                     14/18 bytes (by its T bit), if D
 *   Terminated RDMA header (Read Request)     28 bytes, if R
 * Each part is present exactly when its flag says so (§4.8: the length
 * "MUST be valid if the M bit is set" and "MUST be present when the D bit
 * is set"; the headers "MUST be present if" D / R is set) and absent
 * otherwise, which is what siw sends (notes §2.8: M+D with 16/20 bytes,
 * M+D+R with 48 bytes, nothing for version/opcode/catastrophic errors).
 * RFC 5040 §7.1 case 1 says the headers are "set to zero" for errors not
 * tied to an incoming message; we send them absent (flags clear). */
typedef struct uiw_term {
    uiw_term_cause cause;
    bool hdr_ddp;                            /* D: terminated DDP header attached */
    bool hdr_rdma;                           /* R: terminated RDMA (Read Request) header attached */
    bool hdr_mpa;                            /* M: DDP Segment Length valid */
    uint8_t ddp_hdr_len;                     /* 0; 2 (M without D); 16 or 20 (D) */
    uint8_t rdma_hdr_len;                    /* 0 or UIW_RREQ_LEN (R) */
    uint8_t ddp_hdr[UIW_TERM_MAX_DDP_HDR];   /* DDP Segment Length(2) + DDP header */
    uint8_t rdma_hdr[UIW_TERM_MAX_RDMA_HDR]; /* Read Request header */
    uint8_t raw_ctrl[UIW_TERM_CTRL_LEN];     /* the control word as received */
    /* decode: the control word was in siw's layout; encode: write it in
     * siw's layout (only for a peer known to be siw; see notes §2.4) */
    bool siw_layout;
} uiw_term;

/* A decoded DDP segment header with the RDMAP fields it carries. */
typedef struct uiw_hdr {
    /* DDP control (RFC 5041 §4.1) */
    bool tagged;      /* T */
    bool last;        /* L */
    uint8_t ddp_rsvd; /* Resrv bits: sent as 0, not checked on receive */
    uint8_t ddp_version;
    /* RDMAP control (RFC 5040 §4.1) */
    uint8_t rdmap_version;
    uint8_t rdmap_rsvd; /* Rsv bits: sent as 0, ignored on receive */
    uint8_t opcode;     /* enum uiw_opcode */
    /* tagged: RFC 5041 §4.2 */
    uint32_t stag;
    uint64_t to;
    /* untagged: RFC 5041 §4.3 */
    uint32_t inv_stag; /* RsvdULP[8:39]: Invalidate STag for Send w/ Inv, else 0 */
    uint32_t qn;
    uint32_t msn;
    uint32_t mo;
    /* RDMAP header carried in the DDP payload of some untagged messages;
     * valid according to opcode. */
    union {
        uiw_rreq rreq;
        uiw_atomic_req atomic_req;
        uiw_atomic_resp atomic_resp;
        uint8_t imm[UIW_IMM_DATA_LEN]; /* raw 8 bytes of immediate data */
        uiw_term term;
    } u;
} uiw_hdr;

/* Length of the header bytes (from the DDP control field) that precede
 * ULP payload for a message of this opcode/tagging: 14 (Write, Read
 * Response), 18 (Sends), 46 (Read Request), 26 (Immediate Data), 70 (Atomic
 * Request), 30 (Atomic Response). -EPROTO for Terminate (variable: see
 * uiw_term_encoded_len / uiw_hdr_decode) and for an undefined opcode or a
 * T flag the opcode does not allow (uiw_hdr_decode gives the cause). */
int uiw_hdr_len(bool tagged, unsigned opcode);

/* Whole header length of a Terminate message from the DDP control field:
 * 18 + 4 + attachments; -EINVAL if the flags and lengths in t disagree. */
int uiw_term_encoded_len(const uiw_term *t);

/* Encode hdr at out (no MPA length). Returns bytes written or -EMSGSIZE /
 * -EINVAL. Terminate: the untagged DDP header, the control word and the
 * attachments flagged in hdr->u.term. Every field is written as given
 * (reserved bits, Invalidate STag of non-Invalidate messages, QN, MSN, MO
 * included), but -EINVAL for anything uiw_hdr_decode would reject (wrong
 * versions, undefined opcode, T/opcode or QN/opcode mismatch, header-only
 * message without L or with MO != 0, undefined AOpCode) or a field wider
 * than its bits. */
int uiw_hdr_encode(const uiw_hdr *hdr, uint8_t *out, size_t cap);

/* Decode the DDP/RDMAP header at in (no MPA length). Returns the header
 * length consumed, -EAGAIN if more bytes are needed (len too small), or
 * -EPROTO with *cause (may be NULL) set to the Terminate cause a receiver
 * must send. `len` may be the whole ULPDU: bytes after the header are left
 * to the caller (they are ULP payload, or an error for uiw_op_hdr_only
 * opcodes). Never reads in[len] or beyond. *hdr is zeroed, then filled as
 * far as decoded (also on -EPROTO).
 *
 * Checks, in wire order, each made as soon as its bytes are in `len` (so a
 * longer prefix never changes a verdict already given):
 *   DV != 1                        DDP / tagged / invalid DDP version (0x04)
 *                                  or DDP / untagged / invalid version (0x06)
 *                                                      RFC 5041 §4.1, §7.2
 *   RV 10b/11b, or 00b with an     RDMAP / remote op / invalid version (0x05)
 *     RFC 7306 opcode                                  RFC 5040 §4.1, §7.2
 *   opcode 0xC-0xF                 RDMAP / remote op / unexpected opcode (0x06)
 *   T not as Figure 4 / Figure 2   RDMAP / remote op / unexpected opcode
 *     (Send with T=1, Write with T=0, ...)             RFC 5040 §4.1, §7.2
 *   header-only opcode             DDP / untagged / message too long (0x05)
 *     (uiw_op_hdr_only) with L=0     RFC 5040 Figure 5 / RFC 7306 Figure 3:
 *                                    the message is its header, one segment
 *   QN not the opcode's            DDP / untagged / invalid QN (0x01)
 *                                                      RFC 5041 §7.1 (1)
 *   header-only opcode with MO!=0  DDP / untagged / invalid MO (0x04)
 *   Atomic Request AOpCode not     RDMAP / remote op / unspecified (0xFF):
 *     FetchAdd or CmpSwap            RFC 7306 §5.2.1 (4) says an error MUST
 *                                    be surfaced but defines no code
 * Reserved fields (DDP Resrv, RDMAP Rsv, the Invalidate STag of other
 * messages, the 28 bits before AOpCode, the Terminate reserved bits) are
 * not checked (RFC 5041 §4.1, RFC 5040 §4.1, RFC 7306 §5.2.1). A received
 * Terminate is never rejected for its contents: its control word is
 * decoded in siw's layout when uiw_term_ctrl_looks_siw says so, in the RFC
 * layout otherwise, and the attachments its M/D/R flags announce are
 * copied. */
int uiw_hdr_decode(const uint8_t *in, size_t len, uiw_hdr *hdr, uiw_term_cause *cause);

/* Terminate Control word (RFC 5040 §4.8 Figure 8): layer(4) etype(4)
 * ecode(8) M D R rsvd(13), bit 0 first, big-endian: layer 2, etype 1,
 * ecode 0x33, M is 21 33 80 00. Linux siw on little-endian hosts writes it
 * through a C bitfield: layer in the low nibble of byte 0, etype in the high
 * nibble, M/D/R in bits 0/1/2 of byte 2 (12 33 01 00 for the same values;
 * notes §2.4). uiw_term_ctrl_encode writes the RFC layout, or siw's when
 * t->siw_layout. The decoders set cause, M/D/R, raw_ctrl and siw_layout and
 * leave the attachment fields alone. */
void uiw_term_ctrl_encode(const uiw_term *t, uint8_t out[4]);
void uiw_term_ctrl_decode(const uint8_t in[4], uiw_term *t);
void uiw_term_ctrl_decode_siw(const uint8_t in[4], uiw_term *t);
/* Heuristic: is this control word in siw's layout rather than the RFC's?
 * Each reading is plausible when its reserved bits are zero and its
 * layer/etype/ecode is defined (RFC 6580 registries). True when only the
 * siw reading is plausible, or when neither is but the flag bits sit only
 * where siw puts them. When both are plausible (possible only with no
 * flags, e.g. 20 06 00 00 = RFC LLP/MPA/insufficient IRD = siw RDMAP/
 * remote op/unexpected opcode) it says false: the RFC layout wins. */
bool uiw_term_ctrl_looks_siw(const uint8_t in[4]);

/* Header initialisers: a whole (L=1) message's DDP/RDMAP header with the
 * current versions (DDP 1, RDMAP 1) and everything else 0; the untagged
 * form also sets QN and MSN (MO 0). */
void uiw_hdr_init(uiw_hdr *h, bool tagged, unsigned opcode);
void uiw_hdr_init_untagged(uiw_hdr *h, unsigned opcode, unsigned qn, uint32_t msn);

/* The image of a received segment's headers that a Terminate reporting an
 * error on it carries (RFC 5040 §4.8): the DDP Segment Length (the
 * ULPDU_Length, ulpdu_len) and the segment's DDP header, then, when
 * with_rreq and h is a Read Request, its RDMA header. Writes at most
 * UIW_TERM_HDR_IMAGE_MAX bytes; returns their count, 0 for a Terminate
 * (never reported on) or a header that does not encode. */
#define UIW_TERM_HDR_IMAGE_MAX (UIW_TERM_DDP_SEGLEN_LEN + UIW_HDR_UNTAGGED_LEN + UIW_RREQ_LEN)
unsigned uiw_term_hdr_image(const uiw_hdr *h, unsigned ulpdu_len, bool with_rreq, uint8_t *out);
/* Fill a Terminate for cause from such an image (bad, len bytes; may be
 * NULL/0) with what RFC 5040 §4.8 Figure 10 says to attach: nothing for
 * LLP errors and Local Catastrophic errors (RDMAP error type 0); else the
 * DDP Segment Length (M) and, when the image holds it, the DDP header (D);
 * for RDMAP errors on a Read Request also its RDMA header (R). */
void uiw_term_attach(uiw_term *t, uiw_term_cause cause, const uint8_t *bad, unsigned len);
/* QN and MSN of the untagged DDP header a received Terminate carries
 * (D set, untagged): true and *qn, *msn set; false otherwise. */
bool uiw_term_untagged_qn_msn(const uiw_term *t, uint32_t *qn, uint32_t *msn);

/* uiwarp's Send with Immediate (docs/ENGINE.md "Send with Immediate"):
 * an Immediate Data message whose last 4 bytes of Immediate Data are this
 * tag carries the immediate value (its first 4 bytes) of the Send that
 * follows it on QN 0, instead of being a message of its own. RFC 7306
 * §4.3 leaves the 8 bytes to the ULP; verbs use only 4. */
#define UIW_IMM_ATTACH_TAG "uiwS"
static inline bool uiw_imm_is_attached(const uint8_t imm[8])
{
    return imm[4] == 'u' && imm[5] == 'i' && imm[6] == 'w' && imm[7] == 'S';
}

/* The DDP sequencing rules of one untagged queue (RFC 5041 §5.1.2, §5.2,
 * §7.1 checks 3 and 5), shared by the engine's receiver and `uiwarp dump`'s
 * checker so that both enforce the same rules. The state is the caller's:
 * the next message's MSN, and for a message in progress (a segment without
 * L was accepted) its MSN, opcode and the MO its next segment must carry.
 * uiw_useq_check says whether an untagged segment header h fits; if not,
 * *cause is what the receiver must Terminate with:
 *   new message, MSN != next_msn        DDP/untagged/Invalid MSN - MSN range
 *   new message, MO != 0                DDP/untagged/Invalid MO
 *   continuation, MSN != the message's  DDP/untagged/Invalid MSN - MSN range
 *   continuation, other opcode          RDMAP/remote op/Unexpected OpCode
 *   continuation, MO != bytes so far    DDP/untagged/Invalid MO
 * uiw_useq_accept then records an accepted segment of payload_len bytes
 * (L ends the message: next_msn = MSN + 1). */
typedef struct uiw_useq {
    uint32_t next_msn; /* the next message's MSN: 1 on a new stream */
    bool open;         /* a message is in progress */
    uint32_t msn;      /* open: its MSN */
    uint8_t opcode;    /* open: its RDMAP opcode */
    uint32_t mo_next;  /* open: MO of its next segment */
} uiw_useq;
void uiw_useq_init(uiw_useq *q);
bool uiw_useq_check(const uiw_useq *q, const uiw_hdr *h, uiw_term_cause *cause);
void uiw_useq_accept(uiw_useq *q, const uiw_hdr *h, uint32_t payload_len);

/* ------------------------------------------------------------------------
 * MPA Request / Reply / Reject frames (RFC 5044 §7.1, RFC 6581 §6, §9)
 * ---------------------------------------------------------------------- */

#define UIW_MPA_KEY_LEN      16
#define UIW_MPA_HDR_LEN      20  /* key(16) flags(1) rev(1) pd_len(2) */
#define UIW_MPA_MAX_PD       512 /* RFC 5044 §7.1 */
#define UIW_MPA_RFC6581_LEN  4   /* IRD/ORD words */
#define UIW_MPA_MAX_FRAME    (UIW_MPA_HDR_LEN + UIW_MPA_MAX_PD)
#define UIW_MPA_IRD_ORD_MASK 0x3FFF
#define UIW_MPA_IRD_ORD_AUTO 0x3FFF /* RFC 6581 §9.1: ULP negotiates itself */

/* flag bits of byte 16 */
#define UIW_MPA_FLAG_M   0x80
#define UIW_MPA_FLAG_C   0x40
#define UIW_MPA_FLAG_R   0x20
#define UIW_MPA_FLAG_S   0x10 /* RFC 6581: private data begins with IRD/ORD */
#define UIW_MPA_FLAG_RES 0x0F
/* RFC 6581 §9 control flags */
#define UIW_MPA_IRD_A_P2P    0x8000
#define UIW_MPA_IRD_B_SEND0  0x4000 /* zero-length Send RTR */
#define UIW_MPA_ORD_C_WRITE0 0x8000 /* zero-length Write RTR */
#define UIW_MPA_ORD_D_READ0  0x4000 /* zero-length Read RTR */

enum uiw_mpa_kind { UIW_MPA_REQUEST = 1, UIW_MPA_REPLY = 2 };

/* RTR types as a bit set (RFC 6581 §9.2 flags B, C, D). */
enum uiw_rtr {
    UIW_RTR_NONE = 0,
    UIW_RTR_SEND = 1u << 0,
    UIW_RTR_WRITE = 1u << 1,
    UIW_RTR_READ = 1u << 2,
};

typedef struct uiw_mpa_frame {
    uint8_t kind;  /* enum uiw_mpa_kind (from the key) */
    bool markers;  /* M */
    bool crc;      /* C */
    bool reject;   /* R: Reject in a Reply. In a Request it is reported as
                    * received and must be ignored ("not checked on
                    * reception", RFC 5044 §7.1.1). */
    bool enhanced; /* S: RFC 6581 IRD/ORD words present. Only from Rev 2 on
                    * (RFC 6581 §6); below Rev 2 bit 0x10 is part of Res. */
    uint8_t res;   /* Res bits as received: 0x0F, or 0x1F below Rev 2. MUST
                    * be 0 on send, never checked on receive (RFC 5044 §7.1.1,
                    * RFC 6581 §6); siw may set 0x08 (its GSO_EXP bit). */
    uint8_t rev;
    uint16_t pd_len; /* total private data incl. the 4 RFC 6581 bytes (set by
                      * decode; encode computes it and ignores this field) */
    /* RFC 6581 words, valid when enhanced (B/C/D as received even if A=0) */
    bool p2p;     /* A */
    uint8_t rtr;  /* enum uiw_rtr bits: B, C, D */
    uint16_t ird; /* 14 bits */
    uint16_t ord; /* 14 bits */
    /* ULP private data (after the RFC 6581 words when enhanced) */
    uint16_t ulp_pd_len;
    uint8_t ulp_pd[UIW_MPA_MAX_PD];
} uiw_mpa_frame;

/* Encode; returns bytes written (20 + pd_len), -EMSGSIZE (cap too small, or
 * ULP private data over 512 minus the RFC 6581 words) or -EINVAL (bad kind,
 * enhanced below Rev 2, IRD/ORD over 14 bits, bits in res outside Res).
 * decode followed by encode reproduces the frame byte for byte. */
int uiw_mpa_encode(const uiw_mpa_frame *f, uint8_t *out, size_t cap);
/* Decode from a byte stream prefix. Returns the frame length once the whole
 * frame is present, -EAGAIN if more bytes are needed (never reads past len),
 * -EPROTO for a malformed frame (bad key, pd_len > 512, S with pd_len < 4,
 * wrong key for the expected kind). expect_kind 0 accepts either key. The
 * key is checked on whatever prefix is there: a stream that cannot become
 * an MPA frame fails at once. f is written only on success. */
int uiw_mpa_decode(const uint8_t *in, size_t len, unsigned expect_kind, uiw_mpa_frame *f);
/* How many bytes of an MPA frame to read before it can be decoded, given
 * the first `have` bytes at in: the header while fewer than
 * UIW_MPA_HDR_LEN are there, then the header plus its PD_Length (RFC 5044
 * §7.1; clamped to UIW_MPA_MAX_PD, which uiw_mpa_decode enforces). */
size_t uiw_mpa_frame_want(const uint8_t *in, size_t have);

/* ------------------------------------------------------------------------
 * MPA negotiation (RFC 5044 §7.1, RFC 6581 §9) as a pure state machine.
 * The rules, with their RFC sections, are in src/wire/negotiate.c.
 *
 * Interop defaults (uiw_mpa_policy_default), what Linux siw expects and
 * what the rest of uiwarp uses: revision 2 with the RFC 6581 IRD/ORD words
 * (S), CRC only when the peer asks (UIW_CRC_OPTIONAL; siw's default C=0;
 * RFC 5044 §4.4 (2a) allows this as a configured preference), no markers in
 * either direction (siw rejects M), client-server as initiator (no RTR), and
 * as responder Write or Read RTR supported, Write preferred (as siw).
 * Do not send more than 256 bytes of private data to siw (notes §1.3).
 * ---------------------------------------------------------------------- */

enum uiw_crc_policy {
    /* RFC 5044 §7.1.1 C: C=1 in either frame turns CRC on for both, so a
     * peer's C=0 is never a refusal and its C=1 cannot be declined. OFF and
     * OPTIONAL therefore behave the same; REQUIRED never needs to reject. */
    UIW_CRC_OFF = 0,      /* never ask; accept the peer's request (RFC 5044 §7.1 C) */
    UIW_CRC_OPTIONAL = 1, /* do not ask; use it if the peer asks */
    UIW_CRC_REQUIRED = 2, /* ask (C=1): CRC is then on whatever the peer says */
};

#define UIW_MPA_DEFAULT_IRD     16
#define UIW_MPA_DEFAULT_ORD     16
#define UIW_MPA_DEFAULT_MAX_IRD 128 /* siw's limit */

typedef struct uiw_mpa_policy {
    uint8_t rev;            /* revision we send: 1 or 2 (2 = RFC 6581 words, S) */
    uint8_t crc;            /* enum uiw_crc_policy */
    bool markers;           /* we want to receive markers */
    bool accept_markers;    /* we are able to send markers if the peer asks */
    bool p2p;               /* initiator: peer-to-peer, negotiate an RTR (rev 2
                             * only); responder: ignored, the Request's A rules */
    uint8_t rtr_offer;      /* initiator: RTR types offered; responder: supported */
    uint16_t ird;           /* our inbound read queue depth (max we can serve) */
    uint16_t ord;           /* our outbound read depth (wanted) */
    uint16_t max_ird;       /* largest IRD we can raise to (below ird: = ird) */
    uint16_t min_ord;       /* responder: ORD the ULP needs; an initiator IRD
                             * below it is rejected with min_ord in the
                             * Reject's ORD (RFC 6581 §9.1). 0: clamp (siw). */
    const uint8_t *ulp_pd;  /* private data to send; must stay valid until the
                             * peer's frame has been fed */
    uint16_t ulp_pd_len;    /* <= 508 with Rev 2 (512 - RFC 6581 words) */
    bool responder_rejects; /* responder: the ULP rejects (uses ulp_pd) */
} uiw_mpa_policy;

/* Fill pol with the interop defaults described above. */
void uiw_mpa_policy_default(uiw_mpa_policy *pol);

/* Result of a negotiation. Complete in UIW_MPA_S_DONE; in REJECTED and
 * FAILED what was known is filled in (peer private data and IRD/ORD always,
 * RFC 6581 §9.1; crc/markers when a Terminate is to be sent). */
typedef struct uiw_mpa_result {
    bool crc;                    /* CRC in use, both directions */
    bool markers_rx;             /* peer inserts markers toward us */
    bool markers_tx;             /* we insert markers toward the peer */
    uint8_t rev;                 /* revision in use */
    bool enhanced;               /* RFC 6581 IRD/ORD exchanged (both frames had S) */
    uint16_t ird, ord;           /* local values after negotiation (the policy's when
                                  * not enhanced; 0x3FFF: left to the ULP) */
    uint16_t peer_ird, peer_ord; /* as the peer sent them, 14 bits (for the ULP) */
    bool p2p;
    uint8_t rtr;    /* chosen RTR type (one bit), UIW_RTR_NONE if not p2p */
    bool send_rtr;  /* initiator: must send an RTR before any FPDU */
    bool await_rtr; /* responder: must receive the first FPDU before sending
                     * (RFC 5044 §7.1.2 rule 4: every accept, p2p or not) */
    uint16_t peer_pd_len;
    uint8_t peer_pd[UIW_MPA_MAX_PD]; /* peer's ULP private data */
} uiw_mpa_result;

enum uiw_mpa_state {
    UIW_MPA_S_IDLE = 0,
    UIW_MPA_S_WAIT_REQ, /* responder: waiting for the Request */
    UIW_MPA_S_WAIT_REP, /* initiator: Request sent, waiting for the Reply */
    UIW_MPA_S_DONE,     /* negotiated; FPDU mode */
    UIW_MPA_S_REJECTED, /* a Reject was sent or received */
    UIW_MPA_S_FAILED,   /* protocol error; see term / error */
};

typedef struct uiw_mpa_neg {
    uint8_t state; /* enum uiw_mpa_state */
    bool initiator;
    uiw_mpa_policy pol;
    uint8_t buf[UIW_MPA_MAX_FRAME]; /* assembly of the peer's frame */
    uint16_t have;
    uiw_mpa_frame peer; /* the peer's frame once decoded */
    uiw_mpa_result result;
    /* REJECTED: -ECONNREFUSED (ULP reject, sent or received), -EOPNOTSUPP
     * (markers, no RTR type), -ENOBUFS (initiator IRD too small).
     * FAILED: -EPROTO (malformed, wrong key, revision, S to a Rev 1 policy),
     * -EOPNOTSUPP (markers, RTR), -ENOBUFS (IRD), -EINVAL (policy),
     * -EMSGSIZE (our private data). */
    int error;
    bool term_valid; /* term holds the LLP/MPA error code of the outcome
                      * (RFC 5044 §8, RFC 6581 §8) */
    bool term_send;  /* ... and a Terminate with it must be sent before
                      * closing (initiator only: RFC 6581 §9.1 code 6,
                      * §9.2 code 7; framed with result.crc/markers).
                      * Code 4 closes at once (RFC 5044 §8): false. */
    uiw_term_cause term;
    const char *why; /* static text explaining error/reject */
} uiw_mpa_neg;

/* Initiator: fills out with the Request frame; returns its length, or
 * -EINVAL (policy: rev not 1/2, IRD/ORD > 0x3FFF, p2p without Rev 2 or
 * without an RTR type, ...) / -EMSGSIZE. */
int uiw_mpa_neg_start_initiator(uiw_mpa_neg *n, const uiw_mpa_policy *pol, uint8_t *out,
                                size_t cap);
/* Responder: prepares to receive the Request (state FAILED with -EINVAL if
 * the policy is invalid). */
void uiw_mpa_neg_start_responder(uiw_mpa_neg *n, const uiw_mpa_policy *pol);
/* Feed peer bytes, in pieces of any size. Returns the number of bytes
 * consumed (never more than the frame: bytes after the frame belong to the
 * FPDU stream and are left to the caller), or a negative error. When the
 * peer's frame is complete the state moves on; a responder then has its
 * Reply (accept or reject) in out with *out_len set (a responder needs
 * cap >= 24 + pol.ulp_pd_len; UIW_MPA_MAX_FRAME always suffices, else
 * -EMSGSIZE with nothing consumed). Check n->state after each call.
 * Negative returns: the peer's bytes are not a frame we can use (FAILED,
 * n->error, no Reply: close TCP), or misuse (-EINVAL, -EMSGSIZE). Every
 * other outcome, reject and Terminate-worthy failures included, returns the
 * bytes consumed. In DONE, REJECTED and FAILED it consumes nothing. */
int uiw_mpa_neg_feed(uiw_mpa_neg *n, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                     size_t *out_len);

/* ------------------------------------------------------------------------
 * FPDU framing (RFC 5044 §4)
 *
 *   [marker?][ULPDU_Length(2)][ULPDU = DDP/RDMAP header + payload][pad 0-3][CRC(4)]
 *
 * with, when markers are negotiated, a 4-byte marker (RESERVED(2),
 * FPDUPTR(2)) at every stream offset that is a multiple of 512, offset 0
 * being the first byte after the MPA Request/Reply frame (RFC 5044 §4.3).
 * Stream offsets in this API count every byte on the wire, markers
 * included. Every FPDU is a multiple of 4 bytes, so with markers every
 * FPDU starts on a 4-byte boundary and a marker can only precede the
 * length field, split the ULPDU on a 4-byte boundary, or sit between the
 * pad and the CRC.
 * ---------------------------------------------------------------------- */

#define UIW_MPA_LEN_FIELD   2
#define UIW_MPA_CRC_LEN     4
#define UIW_MARKER_LEN      4
#define UIW_MARKER_INTERVAL 512
/* Pad so that (2 + ulpdu_len + pad) is a multiple of 4 (RFC 5044 §4.1). */
static inline unsigned uiw_mpa_pad(unsigned ulpdu_len)
{
    return (unsigned)(-(int)(UIW_MPA_LEN_FIELD + ulpdu_len)) & 3u;
}
/* Wire size of an FPDU carrying ulpdu_len bytes, markers not counted. */
static inline unsigned uiw_fpdu_len(unsigned ulpdu_len)
{
    return UIW_MPA_LEN_FIELD + ulpdu_len + uiw_mpa_pad(ulpdu_len) + UIW_MPA_CRC_LEN;
}
/* Opcodes whose message is an RDMAP header and nothing else: one DDP
 * segment, L set, MO 0, ULPDU_Length = DDP header + RDMAP header exactly
 * (RFC 5040 §4.2, §4.4, §4.8; RFC 7306 §4.2, §5.2, §6.2). */
static inline bool uiw_op_hdr_only(unsigned opcode)
{
    return opcode == UIW_OP_READ_REQ || opcode == UIW_OP_TERMINATE ||
           (opcode >= UIW_OP_IMM_DATA && opcode <= UIW_OP_ATOMIC_RESP);
}

/* ------------------------------------------------------------------------
 * Receive parser
 *
 * Takes the post-negotiation byte stream of one direction in pieces of any
 * size and reports, one per call, HDR -> PAYLOAD* -> END for every FPDU,
 * or ERROR. It never reads outside [in, in+len), never copies payload and
 * never allocates.
 *
 * Error timing. RFC 5044 §4.4 makes the CRC the first check on an FPDU and
 * §8 (code 3) only blames markers/ULPDU_Length "in the event that the CRC
 * is valid". So, with CRC on, a malformation found inside an FPDU (bad
 * marker, header that fails DDP/RDMAP checks, non-zero pad with strict_pad)
 * stops HDR/PAYLOAD events for the rest of that FPDU, and the parser reads
 * on to the CRC: a CRC mismatch is reported as LLP/MPA/CRC, otherwise the
 * first malformation found. With CRC off it is reported at once. A
 * ULPDU_Length that cannot be followed (< 2 or > max_ulpdu) is reported at
 * once either way. One error per stream: after ERROR the parser is dead.
 *
 * Causes (cause.layer/etype/ecode):
 *   CRC mismatch                         LLP/MPA/0x02            RFC 5044 §8 code 2
 *   marker FPDUPTR wrong; ULPDU_Length  LLP/MPA/0x03            RFC 5044 §8 code 3
 *     < 2, > max_ulpdu, or smaller than
 *     the header its T/opcode needs;
 *     non-zero pad with strict_pad
 *   DDP version != 1                     DDP/tagged/0x04 or      uiw_hdr_decode,
 *                                        DDP/untagged/0x06       RFC 5041 §7.2
 *   untagged QN > 3 (uiw_hdr_decode:     DDP/untagged/0x01       RFC 5041 §7.1 (1)
 *     any QN not the opcode's)
 *   RDMAP version (not 1; 0 ok <= 7)     RDMAP/remote op/0x05    RFC 5040 §7.2 (3)
 *   reserved opcode; T flag not the      RDMAP/remote op/0x06    RFC 5040 §7.2 (2),
 *     opcode's                                                   §4.1 Figure 4
 *   unsupported atomic AOpCode           RDMAP/remote op/0xFF    uiw_hdr_decode
 *   header-only message (uiw_op_hdr_only)
 *     with payload after its header,    DDP/untagged/0x05       RFC 5041 §7.1 (4):
 *     without L, or a Terminate longer                          longer than the
 *     than UIW_TERM_MAX_ULPDU                                   one-message buffer
 *     with MO != 0                       DDP/untagged/0x04       RFC 5041 §7.1 (3)
 * ---------------------------------------------------------------------- */

typedef struct uiw_rx_cfg {
    bool crc;           /* CRC negotiated: verify it */
    bool markers;       /* peer inserts markers (stream offset 0 = first marker) */
    uint16_t max_ulpdu; /* largest ULPDU_Length accepted; 0 = 65535 */
    bool strict_pad;    /* non-zero pad is an error (LLP/MPA/0x03). Default
                         * (false): accepted and flagged in END, as RFC 5044
                         * §4.1 says the receiver ignores pad (siw sends
                         * non-zero pad on short FPDUs). */
    bool fpdu_events;   /* whole-FPDU fast path: a valid FPDU that the input
                         * holds in full, starting at an FPDU boundary, comes
                         * as one UIW_RX_FPDU event instead of HDR, PAYLOAD,
                         * END (never with markers). Off: the three events
                         * only, as before. */
} uiw_rx_cfg;

enum uiw_rx_event_kind {
    UIW_RX_NONE = 0, /* all input consumed, need more bytes */
    UIW_RX_HDR,      /* a DDP segment header was decoded and checked */
    UIW_RX_PAYLOAD,  /* a slice of this segment's ULP payload */
    UIW_RX_END,      /* end of the FPDU: CRC verdict */
    UIW_RX_ERROR,    /* malformation: cause; the stream is dead after this */
    /* cfg.fpdu_events only: one whole, valid FPDU, exactly what HDR, one
     * PAYLOAD (when payload_len > 0) and END would have said, with the
     * fields of all three (data/len the whole payload, offset 0); the
     * ERROR fields are zero. Anything the parser would reject, or an FPDU
     * not wholly in the input, takes the HDR/PAYLOAD/END path, so verdicts
     * never differ (tests/test_rxtx.c compares both). */
    UIW_RX_FPDU,
};

typedef struct uiw_rx_event {
    uint8_t kind; /* enum uiw_rx_event_kind */
    /* HDR, END, ERROR: stream offset of the FPDU's ULPDU_Length field (for
     * an ERROR before any length byte: offset of the next length field) */
    uint64_t fpdu_off;
    uint16_t ulpdu_len; /* HDR, END; ERROR when ulpdu_valid */
    /* UIW_RX_HDR */
    const uiw_hdr *hdr;   /* points into the parser; stays valid through this
                           * segment's PAYLOAD and END events */
    uint16_t hdr_len;     /* DDP + RDMAP header bytes (ulpdu_len = hdr_len + payload_len) */
    uint32_t payload_len; /* ULP payload bytes in this segment */
    /* UIW_RX_PAYLOAD (never spans a marker; 1..payload_len bytes) */
    const uint8_t *data; /* points into the caller's input buffer */
    uint32_t len;
    uint32_t offset;   /* offset of data within this segment's payload */
    uint64_t data_off; /* stream offset of data[0] */
    /* UIW_RX_END (crc_* also set on a CRC-mismatch ERROR) */
    bool crc_checked;            /* cfg.crc */
    bool crc_ok;                 /* checked and equal (true when not checked) */
    uint32_t crc_recv, crc_calc; /* uiw_crc32c_get() of the field / computed */
    bool pad_nonzero;            /* pad bytes were not zero (accepted unless strict_pad) */
    bool marker_rsvd;            /* a marker in this FPDU had non-zero RESERVED (ignored) */
    uint16_t nmarkers;           /* markers in this FPDU, a leading one (FPDUPTR 0) included */
    uint32_t fpdu_bytes;         /* wire bytes of this FPDU: markers, length, ULPDU, pad, CRC */
    /* UIW_RX_ERROR */
    uiw_term_cause cause;
    const char *why;  /* static text */
    bool ulpdu_valid; /* ulpdu_len holds the received ULPDU_Length (Terminate M) */
    uint64_t err_off; /* stream offset just past the byte that decided the error */
    /* when ulpdu_valid: stream offset just past this FPDU's CRC (markers
     * counted), i.e. where the next FPDU would begin if the ULPDU_Length is
     * right. MPA delivers nothing after an error (RFC 5044 §8); a
     * diagnostic tool may uiw_rx_init_at() there to look further. */
    uint64_t resume_off;
    /* header bytes of the offending segment for the Terminate's attached DDP
     * header: the 2-byte ULPDU_Length then as much of the DDP header (14
     * tagged / 18 untagged bytes) as the ULPDU holds; 0 when no length
     * field was read. */
    uint8_t bad_hdr[UIW_TERM_MAX_DDP_HDR];
    uint8_t bad_hdr_len;
} uiw_rx_event;

/* Header bytes the parser collects: the largest fixed header or a whole
 * Terminate ULPDU. */
#define UIW_RX_HDRBUF                                                                              \
    (UIW_MPA_LEN_FIELD +                                                                           \
     (UIW_HDR_MAX_LEN > UIW_TERM_MAX_ULPDU ? UIW_HDR_MAX_LEN : UIW_TERM_MAX_ULPDU))

/* Parser state: caller-owned, fields private to rx.c. */
typedef struct uiw_rx {
    uiw_rx_cfg cfg;
    uint64_t stream_off; /* bytes consumed so far (markers included) */
    uint8_t state;
    bool dead;
    bool marker_between; /* current marker sits between FPDUs */
    bool marker_hashed;  /* current marker is covered by the CRC */
    uint8_t marker[UIW_MARKER_LEN];
    uint8_t crcbuf[UIW_MPA_CRC_LEN];
    uint32_t crc_state;
    struct {              /* the current FPDU's progress, zeroed at its start */
        bool err_pending; /* error found inside the FPDU, reported at its CRC */
        bool pad_nonzero;
        bool marker_rsvd;
        bool hdr_sized; /* hdr_want is final (control field seen) */
        uint8_t pad_have;
        uint8_t pad_len;
        uint8_t crc_have;
        uint16_t nmarkers;
        uint16_t ulpdu_len;
        uint16_t hdr_want; /* header bytes to collect (after the length field) */
        uint16_t hdr_have;
        uint16_t hdr_len;
        uint32_t payload_len;
        uint32_t payload_done;
        uint32_t skip_left;
    } f;
    uint64_t fpdu_begin; /* offset where the current FPDU began (its leading marker) */
    uint64_t fpdu_off;   /* offset of the current FPDU's ULPDU_Length field */
    uint64_t marker_off;
    uint8_t hdrbuf[UIW_RX_HDRBUF]; /* ULPDU_Length + header */
    bool fpdu_last;                /* the last event was UIW_RX_FPDU (uiw_rx_fpdu_rewind) */
    uiw_hdr hdr;
    uiw_rx_event err; /* the error, replayed after death */
} uiw_rx;

void uiw_rx_init(uiw_rx *rx, const uiw_rx_cfg *cfg);
/* Start at an FPDU boundary at this stream offset (counted from the first
 * byte after the MPA frames, as the marker grid is): for a tool resuming
 * after an error or starting mid-stream. uiw_rx_init = uiw_rx_init_at 0. */
void uiw_rx_init_at(uiw_rx *rx, const uiw_rx_cfg *cfg, uint64_t stream_off);
/* Feed bytes. Consumes a prefix of in and reports at most one event in *ev
 * (ev->kind = UIW_RX_NONE when it consumed everything without an event).
 * Returns the number of bytes consumed; call again with the rest. An event
 * may come with fewer bytes consumed than given, never with zero consumed
 * except after death. After UIW_RX_ERROR every call returns 0 with the
 * same UIW_RX_ERROR again. */
size_t uiw_rx_feed(uiw_rx *rx, const uint8_t *in, size_t len, uiw_rx_event *ev);
/* Right after a UIW_RX_FPDU event (no feed in between): put the parser
 * back where it would be after that FPDU's UIW_RX_HDR event (its payload,
 * pad and CRC not yet consumed) and return how many bytes that gives back:
 * the caller feeds the FPDU's last that-many bytes again (a receiver that
 * must stop after a header, e.g. to wait for a posted receive). 0 (and no
 * change) at any other time. */
size_t uiw_rx_fpdu_rewind(uiw_rx *rx);
/* Zero-copy hint. If the next stream bytes are ULP payload of the current
 * segment, returns how many (up to the next marker or the segment's end)
 * and sets *offset (may be NULL) to the payload offset of the first one;
 * else 0 (header, marker, pad, CRC, or payload of an FPDU already in
 * error). Feeding n <= room bytes then yields exactly one UIW_RX_PAYLOAD
 * with data == in, len == n, consuming all n. */
uint32_t uiw_rx_payload_room(const uiw_rx *rx, uint32_t *offset);
/* True between FPDUs (no partial FPDU or marker buffered): a TCP FIN here
 * is a clean end of stream. */
bool uiw_rx_idle(const uiw_rx *rx);

/* ------------------------------------------------------------------------
 * Transmit segmenter
 *
 * Cuts a message (header + gather list) into FPDUs described by iovecs: the
 * payload is never copied, only read once for the CRC. Layout of one FPDU:
 *   [marker][len+hdr][payload pieces, split by markers][pad][marker][CRC]
 * with markers (RFC 5044 §4.3) wherever the stream offset is a multiple of
 * 512, FPDUPTR 0 for one that precedes the length field; CRC32C over all of
 * it up to the CRC field, markers included (RFC 5044 §4.4), zero when CRC
 * is off (RFC 5044 §4.1 "still present").
 *
 * Sizing (like siw, notes §2.6): with M = max_fpdu rounded down to a
 * multiple of 4, a non-last FPDU carries the largest payload that is a
 * multiple of 4 and keeps the FPDU, markers included, <= M; as DDP headers
 * plus the length field are 16 or 20 bytes it needs no pad and fills M
 * exactly (M - 4 when a marker slot would fall on its last word). The last
 * FPDU carries the rest, has L set and is padded. TO (tagged) or MO
 * (untagged) of each FPDU = initial value + payload bytes already sent
 * (RFC 5041 §5.2); every other header field is sent as given. A zero-length
 * message is one FPDU (RFC 5041 §5.2); a uiw_op_hdr_only message is one
 * FPDU with L set, even if it exceeds a max_fpdu below its size (<= 80
 * bytes). If the gather list would need more than UIW_TX_MAX_IOV iovecs the
 * FPDU ends early (payload still a multiple of 4).
 * ---------------------------------------------------------------------- */

#define UIW_TX_MIN_FPDU 64

typedef struct uiw_tx_cfg {
    bool crc;
    bool markers;      /* insert markers (stream offset 0 = first marker) */
    uint16_t max_fpdu; /* largest FPDU on the wire incl. markers/pad/CRC, >= 64;
                        * may be changed between FPDUs (MSS changes) */
} uiw_tx_cfg;

typedef struct uiw_tx {
    uiw_tx_cfg cfg;
    uint64_t stream_off; /* bytes emitted so far (markers included) */
} uiw_tx;

/* A message to segment. For tagged messages hdr.to is the TO of the first
 * byte; for untagged ones hdr.mo is the MO of the first byte (normally 0).
 * The segmenter sets last/to/mo per FPDU. Fields private to tx.c. */
typedef struct uiw_tx_msg {
    uiw_hdr hdr;
    const struct iovec *sgl; /* must stay valid until the last FPDU is sent */
    int nsge;
    uint64_t total; /* payload bytes (sum of the sgl) */
    /* progress */
    uint64_t done;
    int sge_idx;
    size_t sge_off;
    bool started;
    /* the first segment's header with L set, as uiw_tx_msg_init encoded it
     * while checking it (reused by uiw_tx_next: one encoding per
     * single-FPDU message instead of three) */
    uint8_t hl0;
    uint8_t hdr0[UIW_RX_HDRBUF - UIW_MPA_LEN_FIELD];
} uiw_tx_msg;

/* Markers one FPDU can hold: a 65532-byte FPDU starting on a 4-byte
 * boundary meets at most 128 multiples of 512. */
#define UIW_TX_MAX_MARKERS 129
/* iovecs per FPDU: header (2: split by a marker), 2 per marker (the marker
 * and the payload piece after it), pad+CRC, plus room for gather lists. */
#define UIW_TX_MAX_IOV 320
#define UIW_TX_SCRATCH (UIW_RX_HDRBUF + UIW_MARKER_LEN * UIW_TX_MAX_MARKERS + 8)

/* One FPDU ready for writev(): iov covers markers, header, payload pieces
 * (pointing into the message's buffers), pad and CRC, in stream order. The
 * iovecs point into scratch: do not copy or move the struct before it is
 * sent. */
typedef struct uiw_fpdu {
    struct iovec iov[UIW_TX_MAX_IOV];
    int iovcnt;
    size_t bytes;        /* total bytes on the wire */
    uint32_t payload;    /* payload bytes carried */
    bool last;           /* L set */
    uint16_t ulpdu_len;  /* ULPDU_Length sent */
    uint16_t nmarkers;   /* markers inside iov */
    uint64_t stream_off; /* stream offset of the FPDU's first byte */
    uint32_t crc;        /* CRC sent (uiw_crc32c_final value; 0 when off) */
    uint8_t scratch[UIW_TX_SCRATCH];
} uiw_fpdu;

/* -EINVAL when cfg->max_fpdu < UIW_TX_MIN_FPDU. */
int uiw_tx_init(uiw_tx *tx, const uiw_tx_cfg *cfg);
/* Prepare msg for segmentation. -EINVAL when the gather list does not sum
 * to total (or has a NULL base with a non-zero length, or nsge < 0), when
 * total >= 2^32 (RFC 5041 §5.2), when TO + total wraps 64 bits or MO +
 * total 32 bits, when T does not match the opcode (RFC 5040 §4.1 Figure 4,
 * RFC 7306 Figure 2), when the opcode is reserved, or when a header-only
 * opcode has payload. */
int uiw_tx_msg_init(uiw_tx_msg *msg, const uiw_hdr *hdr, const struct iovec *sgl, int nsge,
                    uint64_t total);
/* Build the next FPDU of msg into out. Returns 1 if an FPDU was produced,
 * 0 if the message is complete, negative on error (-EINVAL: bad max_fpdu;
 * -EMSGSIZE: the header does not encode). The caller must put out->bytes
 * on the wire before building the next FPDU of any message on this tx
 * (markers depend on the stream offset, which advances by out->bytes). */
int uiw_tx_next(uiw_tx *tx, uiw_tx_msg *msg, uiw_fpdu *out);
/* The fast path for small messages: the whole message as one FPDU, laid
 * out contiguously in out (ULPDU_Length, header, the payload copied from
 * the gather list, pad, CRC; RFC 5044 §4.1), exactly the bytes uiw_tx_next
 * would describe. msg must come from uiw_tx_msg_init and not be started;
 * afterwards it is done, as after its last uiw_tx_next. Returns the FPDU's
 * length; 0 (nothing done) when the message does not qualify: markers on
 * (RFC 5044 §4.3), more than one FPDU needed, or more than cap bytes. */
int uiw_tx_whole(uiw_tx *tx, uiw_tx_msg *msg, uint8_t *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* UIWARP_WIRE_H */
