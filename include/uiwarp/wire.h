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
 *   crc.c      CRC32C (ISA-L)
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * CRC32C (RFC 3720 B.4 polynomial; RFC 5044 §4.4)
 * ---------------------------------------------------------------------- */

/* Incremental CRC32C. Start with UIW_CRC32C_INIT, feed pieces with
 * uiw_crc32c_update, finish with uiw_crc32c_final. The final value is the
 * conventional reflected CRC32C (0xE3069283 for "123456789"); it goes on the
 * wire as its little-endian byte image (uiw_crc32c_put). */
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
 * Constants: RDMAP opcodes (RFC 5040 §4.2, RFC 7306 §4.1, RFC 6580 §3)
 * ---------------------------------------------------------------------- */

enum uiw_opcode {
    UIW_OP_WRITE = 0x0,           /* RDMA Write, tagged */
    UIW_OP_READ_REQ = 0x1,        /* RDMA Read Request, untagged QN 1 */
    UIW_OP_READ_RESP = 0x2,       /* RDMA Read Response, tagged */
    UIW_OP_SEND = 0x3,            /* Send, QN 0 */
    UIW_OP_SEND_INV = 0x4,        /* Send with Invalidate, QN 0 */
    UIW_OP_SEND_SE = 0x5,         /* Send with Solicited Event, QN 0 */
    UIW_OP_SEND_SE_INV = 0x6,     /* Send with SE and Invalidate, QN 0 */
    UIW_OP_TERMINATE = 0x7,       /* Terminate, QN 2 */
    UIW_OP_IMM_DATA = 0x8,        /* RFC 7306 Immediate Data, QN 0, 8 bytes */
    UIW_OP_IMM_DATA_SE = 0x9,     /* RFC 7306 Immediate Data with SE, QN 0 */
    UIW_OP_ATOMIC_REQ = 0xA,      /* RFC 7306 Atomic Request, QN 1 */
    UIW_OP_ATOMIC_RESP = 0xB,     /* RFC 7306 Atomic Response, QN 3 */
};
#define UIW_OP_MAX 0xB

/* Untagged queue numbers (RFC 5040 §5.1, RFC 7306 §10.2). */
enum uiw_qn {
    UIW_QN_SEND = 0,
    UIW_QN_READ_REQ = 1, /* also Atomic Requests */
    UIW_QN_TERMINATE = 2,
    UIW_QN_ATOMIC_RESP = 3,
};
#define UIW_QN_COUNT 4

/* RFC 7306 §5.2.1 Figure 5: atomic operation codes. */
enum uiw_atomic_op {
    UIW_AOP_FETCH_ADD = 0x0,
    UIW_AOP_CMP_SWAP = 0x2,
};

/* Version fields (RFC 5040 §4.1 RV, RFC 5041 §5.1 DV). */
#define UIW_DDP_VERSION   1
#define UIW_RDMAP_VERSION 1

/* ------------------------------------------------------------------------
 * Constants: Terminate layer / error type / error code
 * (RFC 5040 §4.8 and §7, RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8,
 *  RFC 7306 §8, registries in RFC 6580)
 * ---------------------------------------------------------------------- */

enum uiw_term_layer {
    UIW_LAYER_RDMAP = 0x0,
    UIW_LAYER_DDP = 0x1,
    UIW_LAYER_LLP = 0x2, /* MPA */
};

/* RDMAP error types (layer 0) */
enum uiw_rdmap_etype {
    UIW_RDMAP_ET_CATASTROPHIC = 0x0,
    UIW_RDMAP_ET_REMOTE_PROT = 0x1, /* Remote Protection Error */
    UIW_RDMAP_ET_REMOTE_OP = 0x2,   /* Remote Operation Error */
};
/* RDMAP error codes */
enum uiw_rdmap_ecode {
    /* with ET_CATASTROPHIC */
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
    UIW_RDMAP_EC_CANT_INVALIDATE = 0x09,
    UIW_RDMAP_EC_UNSPECIFIED_OTHER = 0xFF,
    /* RFC 7306 §8 / RFC 6580 registry additions (remote protection/op) */
    UIW_RDMAP_EC_UNSUPPORTED_AOP = 0x0A, /* see hdr.c comment for source */
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
enum uiw_mpa_ecode {
    UIW_MPA_EC_TCP_CLOSED = 0x01,      /* TCP connection closed, terminated or lost */
    UIW_MPA_EC_CRC = 0x02,             /* received MPA CRC does not match */
    UIW_MPA_EC_MARKER = 0x03,          /* received marker or ULPDU_Length invalid */
    UIW_MPA_EC_INVALID_REQ = 0x04,     /* invalid MPA Request/Reply frame */
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

/* Human-readable names ("DDP/untagged/invalid MSN - no buffer available").
 * Never NULL; unknown values give "unknown(0x..)" from a static buffer
 * per-thread. */
const char *uiw_opcode_name(unsigned opcode);
const char *uiw_term_layer_name(unsigned layer);
const char *uiw_term_etype_name(unsigned layer, unsigned etype);
const char *uiw_term_ecode_name(unsigned layer, unsigned etype, unsigned ecode);

/* ------------------------------------------------------------------------
 * DDP / RDMAP headers (RFC 5041 §5, RFC 5040 §4, RFC 7306 §5-6)
 *
 * Sizes count from the DDP control field (after the 2-byte MPA ULPDU_Length)
 * so that ULPDU_Length = header size + payload length.
 * ---------------------------------------------------------------------- */

#define UIW_HDR_TAGGED_LEN    14 /* ctrl(2) stag(4) to(8) */
#define UIW_HDR_UNTAGGED_LEN  18 /* ctrl(2) inv/rsvd(4) qn(4) msn(4) mo(4) */
#define UIW_RREQ_LEN          28 /* RDMAP Read Request header, RFC 5040 §4.4 */
#define UIW_ATOMIC_REQ_LEN    52 /* RFC 7306 §5.2.1 Figure 4 */
#define UIW_ATOMIC_RESP_LEN   12 /* RFC 7306 §5.2.2 Figure 6 */
#define UIW_IMM_DATA_LEN      8  /* RFC 7306 §6.2 */
#define UIW_TERM_CTRL_LEN     4  /* RFC 5040 §4.8 Terminate Control */
/* Terminated DDP header as attached to a Terminate: RFC 5040 §4.8 keeps the
 * whole DDP header of the offending segment (tagged 14 or untagged 18 bytes)
 * preceded by its MPA ULPDU_Length (2) in practice as siw does; we store up
 * to UIW_TERM_MAX_DDP_HDR bytes. */
#define UIW_TERM_MAX_DDP_HDR  (2 + UIW_HDR_UNTAGGED_LEN)
#define UIW_TERM_MAX_RDMA_HDR UIW_RREQ_LEN
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

/* RFC 7306 §5.2.1 */
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

/* RFC 5040 §4.8 Terminate message (what follows the untagged DDP header). */
typedef struct uiw_term {
    uiw_term_cause cause;
    bool hdr_ddp;  /* M? no: "D" flag: DDP segment header attached */
    bool hdr_rdma; /* "R" flag: RDMAP header (Read Request) attached */
    bool hdr_mpa;  /* "M" flag: ULPDU_Length of the terminated FPDU valid */
    uint8_t ddp_hdr_len;
    uint8_t rdma_hdr_len;
    uint8_t ddp_hdr[UIW_TERM_MAX_DDP_HDR];   /* incl. 2-byte ULPDU_Length */
    uint8_t rdma_hdr[UIW_TERM_MAX_RDMA_HDR]; /* Read Request header */
    uint8_t raw_ctrl[UIW_TERM_CTRL_LEN];     /* the control word as received */
    bool siw_layout; /* decoded with siw's nibble-swapped bit layout */
} uiw_term;

/* A decoded DDP segment header with the RDMAP fields it carries. */
typedef struct uiw_hdr {
    /* DDP control (RFC 5041 §5.1) */
    bool tagged; /* T */
    bool last;   /* L */
    uint8_t ddp_rsvd;  /* Resrv bits, must be 0 */
    uint8_t ddp_version;
    /* RDMAP control (RFC 5040 §4.1) */
    uint8_t rdmap_version;
    uint8_t rdmap_rsvd; /* Rsv bits, must be 0 */
    uint8_t opcode;     /* enum uiw_opcode */
    /* tagged: RFC 5041 §5.2 */
    uint32_t stag;
    uint64_t to;
    /* untagged: RFC 5041 §5.3 */
    uint32_t inv_stag; /* "Reserved for ULP" word: Invalidate STag for Send w/ Inv */
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
 * ULP payload for a message of this opcode/tagging, or -EPROTO for opcodes
 * whose header is variable (Terminate: use uiw_term_encoded_len). */
int uiw_hdr_len(bool tagged, unsigned opcode);

/* Encode hdr at out (no MPA length). Returns bytes written or -EMSGSIZE /
 * -EINVAL. Terminate: the control word plus attached headers. */
int uiw_hdr_encode(const uiw_hdr *hdr, uint8_t *out, size_t cap);

/* Decode the DDP/RDMAP header at in (no MPA length). Returns the header
 * length consumed, -EAGAIN if more bytes are needed (len too small), or
 * -EPROTO with *cause set to the Terminate cause that a receiver must send
 * (version, reserved opcode, etc.). `len` may be the whole ULPDU. */
int uiw_hdr_decode(const uint8_t *in, size_t len, uiw_hdr *hdr, uiw_term_cause *cause);

/* Terminate Control word (RFC 5040 §4.8): layer(4) etype(4) ecode(8) M D R
 * rsvd(13), big-endian. uiw_term_ctrl_decode_siw decodes the layout Linux
 * siw emits on little-endian hosts (layer/etype nibbles swapped, M/D/R in the
 * low bits of byte 2); see ../shared/notes/siw-and-rdma-core.md §2.4. */
void uiw_term_ctrl_encode(const uiw_term *t, uint8_t out[4]);
void uiw_term_ctrl_decode(const uint8_t in[4], uiw_term *t);
void uiw_term_ctrl_decode_siw(const uint8_t in[4], uiw_term *t);
/* Heuristic: does this control word look like siw's layout rather than the
 * RFC's? (Only one of the two decodes to a defined layer/etype/code.) */
bool uiw_term_ctrl_looks_siw(const uint8_t in[4]);

/* ------------------------------------------------------------------------
 * MPA Request / Reply / Reject frames (RFC 5044 §7.1, RFC 6581 §6, §9)
 * ---------------------------------------------------------------------- */

#define UIW_MPA_KEY_LEN      16
#define UIW_MPA_HDR_LEN      20 /* key(16) flags(1) rev(1) pd_len(2) */
#define UIW_MPA_MAX_PD       512 /* RFC 5044 §7.1 */
#define UIW_MPA_RFC6581_LEN  4  /* IRD/ORD words */
#define UIW_MPA_MAX_FRAME    (UIW_MPA_HDR_LEN + UIW_MPA_MAX_PD)
#define UIW_MPA_IRD_ORD_MASK 0x3FFF
#define UIW_MPA_IRD_ORD_AUTO 0x3FFF /* RFC 6581 §9.1: ULP negotiates itself */

/* flag bits of byte 16 */
#define UIW_MPA_FLAG_M       0x80
#define UIW_MPA_FLAG_C       0x40
#define UIW_MPA_FLAG_R       0x20
#define UIW_MPA_FLAG_S       0x10 /* RFC 6581: private data begins with IRD/ORD */
#define UIW_MPA_FLAG_RES     0x0F
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
    uint8_t kind; /* enum uiw_mpa_kind */
    bool markers; /* M */
    bool crc;     /* C */
    bool reject;  /* R (Reply only) */
    bool enhanced; /* S: RFC 6581 IRD/ORD words present */
    uint8_t res;  /* remaining reserved bits as received */
    uint8_t rev;
    uint16_t pd_len; /* total private data incl. the 4 RFC 6581 bytes */
    /* RFC 6581 words, valid when enhanced */
    bool p2p;      /* A */
    uint8_t rtr;   /* enum uiw_rtr bits: B, C, D */
    uint16_t ird;  /* 14 bits */
    uint16_t ord;  /* 14 bits */
    /* ULP private data (after the RFC 6581 words when enhanced) */
    uint16_t ulp_pd_len;
    uint8_t ulp_pd[UIW_MPA_MAX_PD];
} uiw_mpa_frame;

/* Encode; returns bytes written (20 + pd_len) or -EMSGSIZE/-EINVAL. */
int uiw_mpa_encode(const uiw_mpa_frame *f, uint8_t *out, size_t cap);
/* Decode from a byte stream prefix. Returns the frame length once the whole
 * frame is present, -EAGAIN if more bytes are needed (never reads past len),
 * -EPROTO for a malformed frame (bad key, pd_len > 512, S with pd_len < 4,
 * wrong key for the expected kind). expect_kind 0 accepts either key. */
int uiw_mpa_decode(const uint8_t *in, size_t len, unsigned expect_kind, uiw_mpa_frame *f);

/* ------------------------------------------------------------------------
 * MPA negotiation (RFC 5044 §7.1, RFC 6581 §9) as a pure state machine.
 * ---------------------------------------------------------------------- */

enum uiw_crc_policy {
    UIW_CRC_OFF = 0,      /* never ask; accept the peer's request (RFC 5044 §7.1 C) */
    UIW_CRC_OPTIONAL = 1, /* do not ask; use it if the peer asks */
    UIW_CRC_REQUIRED = 2, /* ask; reject a peer that refuses */
};

typedef struct uiw_mpa_policy {
    uint8_t rev;             /* revision we send: 1 or 2 */
    uint8_t crc;             /* enum uiw_crc_policy */
    bool markers;            /* we want to receive markers */
    bool accept_markers;     /* we are able to send markers if the peer asks */
    bool p2p;                /* peer-to-peer: negotiate an RTR (rev 2 only) */
    uint8_t rtr_offer;       /* initiator: RTR types offered; responder: supported */
    uint16_t ird;            /* our inbound read queue depth (max we can serve) */
    uint16_t ord;            /* our outbound read depth (wanted) */
    uint16_t max_ird;        /* largest IRD we can raise to */
    const uint8_t *ulp_pd;   /* private data to send */
    uint16_t ulp_pd_len;
    bool responder_rejects;  /* responder: the ULP rejects (uses ulp_pd) */
} uiw_mpa_policy;

/* Result of a completed negotiation. */
typedef struct uiw_mpa_result {
    bool crc;           /* CRC in use, both directions */
    bool markers_rx;    /* peer inserts markers toward us */
    bool markers_tx;    /* we insert markers toward the peer */
    uint8_t rev;        /* revision in use */
    bool enhanced;      /* RFC 6581 IRD/ORD exchanged */
    uint16_t ird, ord;  /* local values after negotiation */
    uint16_t peer_ird, peer_ord; /* as the peer sent them (for the ULP) */
    bool p2p;
    uint8_t rtr;        /* chosen RTR type (one bit), UIW_RTR_NONE if not p2p */
    bool send_rtr;      /* initiator: must send an RTR before any FPDU */
    bool await_rtr;     /* responder: must receive the first FPDU before sending */
    uint16_t peer_pd_len;
    uint8_t peer_pd[UIW_MPA_MAX_PD]; /* peer's ULP private data */
} uiw_mpa_result;

enum uiw_mpa_state {
    UIW_MPA_S_IDLE = 0,
    UIW_MPA_S_WAIT_REQ,   /* responder: waiting for the Request */
    UIW_MPA_S_WAIT_REP,   /* initiator: Request sent, waiting for the Reply */
    UIW_MPA_S_DONE,       /* negotiated; FPDU mode */
    UIW_MPA_S_REJECTED,   /* a Reject was sent or received */
    UIW_MPA_S_FAILED,     /* protocol error; see term / error */
};

typedef struct uiw_mpa_neg {
    uint8_t state;   /* enum uiw_mpa_state */
    bool initiator;
    uiw_mpa_policy pol;
    uint8_t buf[UIW_MPA_MAX_FRAME]; /* assembly of the peer's frame */
    uint16_t have;
    uiw_mpa_frame peer;      /* the peer's frame once decoded */
    uiw_mpa_result result;
    int error;               /* -ECONNREFUSED (rejected), -EPROTO, ... */
    bool term_valid;         /* a Terminate must be sent (LLP/MPA/code) */
    uiw_term_cause term;
    const char *why;         /* static text explaining error/reject */
} uiw_mpa_neg;

/* Initiator: fills out with the Request frame; returns its length. */
int uiw_mpa_neg_start_initiator(uiw_mpa_neg *n, const uiw_mpa_policy *pol, uint8_t *out,
                                size_t cap);
/* Responder: prepares to receive the Request. */
void uiw_mpa_neg_start_responder(uiw_mpa_neg *n, const uiw_mpa_policy *pol);
/* Feed peer bytes. Returns the number of bytes consumed (never more than the
 * frame: bytes after the frame belong to the FPDU stream and are left to the
 * caller), or a negative error. When the peer's frame is complete the state
 * moves on; a responder then has its Reply (accept or reject) in out with
 * *out_len set. Check n->state after each call. */
int uiw_mpa_neg_feed(uiw_mpa_neg *n, const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                     size_t *out_len);

/* ------------------------------------------------------------------------
 * FPDU framing constants (RFC 5044 §4)
 * ---------------------------------------------------------------------- */

#define UIW_MPA_LEN_FIELD     2
#define UIW_MPA_CRC_LEN       4
#define UIW_MARKER_LEN        4
#define UIW_MARKER_INTERVAL   512
/* Pad so that (2 + ulpdu_len + pad) is a multiple of 4 (RFC 5044 §4.1). */
static inline unsigned uiw_mpa_pad(unsigned ulpdu_len)
{
    return (unsigned)(-(int)(UIW_MPA_LEN_FIELD + ulpdu_len)) & 3u;
}

/* ------------------------------------------------------------------------
 * Receive parser
 * ---------------------------------------------------------------------- */

typedef struct uiw_rx_cfg {
    bool crc;           /* CRC negotiated: verify it */
    bool markers;       /* peer inserts markers (stream offset 0 = first marker) */
    uint16_t max_ulpdu; /* largest ULPDU_Length accepted; 0 = 65535 */
    bool lenient_pad;   /* accept non-zero pad bytes (siw quirk); default true */
} uiw_rx_cfg;

enum uiw_rx_event_kind {
    UIW_RX_NONE = 0, /* all input consumed, need more bytes */
    UIW_RX_HDR,      /* a DDP segment header was decoded: ev.hdr, ev.payload_len */
    UIW_RX_PAYLOAD,  /* a slice of ULP payload: ev.data/ev.len at ev.offset */
    UIW_RX_END,      /* end of the FPDU: ev.crc_ok / crc_checked */
    UIW_RX_ERROR,    /* malformation: ev.cause; the stream is dead after this */
};

typedef struct uiw_rx_event {
    uint8_t kind; /* enum uiw_rx_event_kind */
    /* UIW_RX_HDR */
    const uiw_hdr *hdr;   /* points into the parser; valid until next feed */
    uint32_t payload_len; /* ULP payload bytes in this segment */
    uint16_t ulpdu_len;
    uint64_t fpdu_off;    /* stream offset of this FPDU's ULPDU_Length field */
    /* UIW_RX_PAYLOAD */
    const uint8_t *data;  /* points into the caller's input buffer */
    uint32_t len;
    uint32_t offset;      /* offset of data within this segment's payload */
    /* UIW_RX_END */
    bool crc_checked;
    bool crc_ok;
    uint32_t crc_recv, crc_calc;
    bool pad_nonzero;     /* pad bytes were not zero (reported, lenient) */
    /* UIW_RX_ERROR */
    uiw_term_cause cause;
    const char *why; /* static text */
    /* header bytes of the offending segment (for the Terminate's attached
     * DDP header), with the 2-byte ULPDU_Length first */
    uint8_t bad_hdr[UIW_TERM_MAX_DDP_HDR];
    uint8_t bad_hdr_len;
} uiw_rx_event;

typedef struct uiw_rx {
    uiw_rx_cfg cfg;
    uint64_t stream_off; /* bytes consumed so far (markers included) */
    uint8_t state;
    uint32_t crc_state;
    uint16_t ulpdu_len;
    uint32_t need;    /* bytes still expected in the current field */
    uint32_t hdr_have;
    uint8_t hdrbuf[2 + UIW_TERM_MAX_ULPDU];
    uint32_t payload_done;
    uint32_t payload_len;
    uint8_t pad[3];
    uint8_t trailer[4];
    uint8_t marker[4];
    uint8_t marker_have;
    uint64_t fpdu_start;
    uint16_t hdr_len;
    bool dead;
    uiw_hdr hdr;
    uiw_rx_event pending; /* an event formed but not yet returned */
    bool has_pending;
} uiw_rx;

void uiw_rx_init(uiw_rx *rx, const uiw_rx_cfg *cfg);
/* Feed bytes. Consumes a prefix of in and reports at most one event in *ev
 * (ev->kind = UIW_RX_NONE when it consumed everything without an event).
 * Returns the number of bytes consumed. Call again with the rest. Payload
 * events point into `in`; payload never spans a marker. After UIW_RX_ERROR
 * every call returns 0 with UIW_RX_ERROR again. */
size_t uiw_rx_feed(uiw_rx *rx, const uint8_t *in, size_t len, uiw_rx_event *ev);
/* Zero-copy hint: if the parser is inside payload, the number of payload
 * bytes it can take next without crossing a marker or the end of the
 * segment (the caller may receive exactly that many straight into the
 * destination and then feed that buffer); 0 if it expects header/trailer. */
uint32_t uiw_rx_payload_room(const uiw_rx *rx);

/* ------------------------------------------------------------------------
 * Transmit segmenter
 * ---------------------------------------------------------------------- */

typedef struct uiw_tx_cfg {
    bool crc;
    bool markers;        /* insert markers (stream offset 0 = first marker) */
    uint16_t max_fpdu;   /* largest FPDU on the wire incl. markers/pad/CRC, >= 64 */
} uiw_tx_cfg;

typedef struct uiw_tx {
    uiw_tx_cfg cfg;
    uint64_t stream_off; /* bytes emitted so far (markers included) */
} uiw_tx;

/* A message to segment. For tagged messages hdr->to is the TO of the first
 * byte; for untagged ones hdr->mo is the MO of the first byte (normally 0).
 * The segmenter sets last/to/mo per FPDU. */
typedef struct uiw_tx_msg {
    uiw_hdr hdr;
    const struct iovec *sgl;
    int nsge;
    uint64_t total;   /* payload bytes (sum of the sgl) */
    /* progress */
    uint64_t done;
    int sge_idx;
    size_t sge_off;
    bool started;
} uiw_tx_msg;

#define UIW_TX_MAX_IOV   64
#define UIW_TX_SCRATCH   (2 + UIW_TERM_MAX_ULPDU + 3 + 4 + 4 * 130)

/* One FPDU ready for writev(): iov covers header, payload pieces (pointing
 * into the message's buffers), markers, pad and CRC, in stream order. */
typedef struct uiw_fpdu {
    struct iovec iov[UIW_TX_MAX_IOV];
    int iovcnt;
    size_t bytes;           /* total bytes on the wire */
    uint32_t payload;       /* payload bytes carried */
    bool last;
    uint8_t scratch[UIW_TX_SCRATCH];
} uiw_fpdu;

void uiw_tx_init(uiw_tx *tx, const uiw_tx_cfg *cfg);
/* Prepare msg for segmentation (validates the gather list). */
int uiw_tx_msg_init(uiw_tx_msg *msg, const uiw_hdr *hdr, const struct iovec *sgl, int nsge);
/* Build the next FPDU of msg into out. Returns 1 if an FPDU was produced,
 * 0 if the message is complete, negative on error. A zero-length message
 * produces exactly one FPDU. The caller must put out->bytes on the wire
 * before building the next FPDU (markers depend on the stream offset). */
int uiw_tx_next(uiw_tx *tx, uiw_tx_msg *msg, uiw_fpdu *out);

#ifdef __cplusplus
}
#endif
#endif /* UIWARP_WIRE_H */
