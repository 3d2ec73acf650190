/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Names of RDMAP opcodes and Terminate layer / error type / error code
 * values, in the wording of RFC 5040 §4.1 Figure 4 and §4.8 Figure 9,
 * RFC 5041 §7.2, RFC 5044 §8, RFC 6581 §8, RFC 7306 §4.1 Figure 2 and the
 * RFC 6580 registries, shortened and lower-cased so that callers can join
 * them: "DDP" / "untagged buffer" / "invalid MSN - no buffer available".
 */
#include "uiw_port.h"
#include "uiwarp/wire.h"

/* Undefined values: "unknown(0xNN)" in a small per-thread ring, so that a
 * few of them can appear in one printf. The kernel has no thread-local
 * storage, and a shared ring could be rewritten by another CPU while a
 * caller reads it: there the value is left out (callers print it). */
#ifdef UIW_PORT_HAVE_TLS
#define NAME_RING 8
#define NAME_LEN  24

static const char *unknown(unsigned v)
{
    static _Thread_local char ring[NAME_RING][NAME_LEN];
    static _Thread_local unsigned next;
    char *buf = ring[next++ % NAME_RING];

    snprintf(buf, NAME_LEN, "unknown(0x%02x)", v);
    return buf;
}
#else
static const char *unknown(unsigned v)
{
    (void)v;
    return "unknown";
}
#endif

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *lookup(const char *const *tab, size_t n, unsigned v)
{
    return v < n && tab[v] ? tab[v] : unknown(v);
}

/* RFC 5040 §4.1 Figure 4, RFC 7306 §4.1 Figure 2, RFC 6580 §3.4 */
static const char *const opcode_names[16] = {
    [UIW_OP_WRITE] = "RDMA Write",
    [UIW_OP_READ_REQ] = "RDMA Read Request",
    [UIW_OP_READ_RESP] = "RDMA Read Response",
    [UIW_OP_SEND] = "Send",
    [UIW_OP_SEND_INV] = "Send with Invalidate",
    [UIW_OP_SEND_SE] = "Send with SE",
    [UIW_OP_SEND_SE_INV] = "Send with SE and Invalidate",
    [UIW_OP_TERMINATE] = "Terminate",
    [UIW_OP_IMM_DATA] = "Immediate Data",
    [UIW_OP_IMM_DATA_SE] = "Immediate Data with SE",
    [UIW_OP_ATOMIC_REQ] = "Atomic Request",
    [UIW_OP_ATOMIC_RESP] = "Atomic Response",
    [UIW_OP_EXPERIMENTAL] = "reserved (experimental)",
};

const char *uiw_opcode_name(unsigned opcode)
{
    return lookup(opcode_names, NELEM(opcode_names), opcode);
}

/* RFC 5040 §4.8 Figure 9 */
static const char *const layer_names[] = {
    [UIW_LAYER_RDMAP] = "RDMAP",
    [UIW_LAYER_DDP] = "DDP",
    [UIW_LAYER_LLP] = "LLP",
};

const char *uiw_term_layer_name(unsigned layer)
{
    return lookup(layer_names, NELEM(layer_names), layer);
}

/* RFC 5040 §4.8 Figure 9 */
static const char *const rdmap_etype_names[] = {
    [UIW_RDMAP_ET_CATASTROPHIC] = "local catastrophic",
    [UIW_RDMAP_ET_REMOTE_PROT] = "remote protection",
    [UIW_RDMAP_ET_REMOTE_OP] = "remote operation",
};

/* RFC 5041 §7.2 */
static const char *const ddp_etype_names[] = {
    [UIW_DDP_ET_CATASTROPHIC] = "local catastrophic",
    [UIW_DDP_ET_TAGGED] = "tagged buffer",
    [UIW_DDP_ET_UNTAGGED] = "untagged buffer",
    [UIW_DDP_ET_RSVD] = "reserved for the LLP",
};

/* RFC 6581 §8: Layer 0x2, Error Type 0x0 - MPA */
static const char *const llp_etype_names[] = {
    [UIW_LLP_ET_MPA] = "MPA",
    [UIW_LLP_ET_RNIC] = "MPA (error type 3, as irdma and cxgb4 send it)",
};

const char *uiw_term_etype_name(unsigned layer, unsigned etype)
{
    switch (layer) {
    case UIW_LAYER_RDMAP:
        return lookup(rdmap_etype_names, NELEM(rdmap_etype_names), etype);
    case UIW_LAYER_DDP:
        return lookup(ddp_etype_names, NELEM(ddp_etype_names), etype);
    case UIW_LAYER_LLP:
        return lookup(llp_etype_names, NELEM(llp_etype_names), etype);
    default:
        return unknown(etype);
    }
}

/* RFC 5040 §4.8 Figure 9, RFC 6580 §3.1. 0x09 and 0xFF appear under both
 * remote error types. */
static const char *const rdmap_prot_names[256] = {
    [UIW_RDMAP_EC_INVALID_STAG] = "invalid STag",
    [UIW_RDMAP_EC_BASE_BOUNDS] = "base or bounds violation",
    [UIW_RDMAP_EC_ACCESS_RIGHTS] = "access rights violation",
    [UIW_RDMAP_EC_STAG_NOT_ASSOC] = "STag not associated with RDMAP stream",
    [UIW_RDMAP_EC_TO_WRAP] = "TO wrap",
    [UIW_RDMAP_EC_CANT_INVALIDATE] = "STag cannot be invalidated",
    [UIW_RDMAP_EC_UNSPECIFIED_OTHER] = "unspecified error",
};

static const char *const rdmap_op_names[256] = {
    [UIW_RDMAP_EC_INVALID_VERSION] = "invalid RDMAP version",
    [UIW_RDMAP_EC_UNEXPECTED_OPCODE] = "unexpected opcode",
    [UIW_RDMAP_EC_CATASTROPHIC_STREAM] = "catastrophic error, localized to RDMAP stream",
    [UIW_RDMAP_EC_CATASTROPHIC_GLOBAL] = "catastrophic error, global",
    [UIW_RDMAP_EC_CANT_INVALIDATE] = "STag cannot be invalidated",
    [UIW_RDMAP_EC_UNSPECIFIED_OTHER] = "unspecified error",
};

/* RFC 5041 §7.2 */
static const char *const ddp_cat_names[] = {
    [UIW_DDP_EC_CATASTROPHIC] = "local catastrophic",
};

static const char *const ddp_tagged_names[] = {
    [UIW_DDP_EC_T_INVALID_STAG] = "invalid STag",
    [UIW_DDP_EC_T_BASE_BOUNDS] = "base or bounds violation",
    [UIW_DDP_EC_T_STAG_NOT_ASSOC] = "STag not associated with DDP stream",
    [UIW_DDP_EC_T_TO_WRAP] = "TO wrap",
    [UIW_DDP_EC_T_INVALID_VERSION] = "invalid DDP version",
};

static const char *const ddp_untagged_names[] = {
    [UIW_DDP_EC_U_INVALID_QN] = "invalid QN",
    [UIW_DDP_EC_U_INVALID_MSN_NOBUF] = "invalid MSN - no buffer available",
    [UIW_DDP_EC_U_INVALID_MSN_RANGE] = "invalid MSN - MSN range is not valid",
    [UIW_DDP_EC_U_INVALID_MO] = "invalid MO",
    [UIW_DDP_EC_U_MSG_TOO_LONG] = "DDP message too long for available buffer",
    [UIW_DDP_EC_U_INVALID_VERSION] = "invalid DDP version",
};

/* RFC 5044 §8 codes 1-4, RFC 6581 §8 codes 5-7 */
static const char *const mpa_names[] = {
    [UIW_MPA_EC_TCP_CLOSED] = "TCP connection closed, terminated, or lost",
    [UIW_MPA_EC_CRC] = "MPA CRC error",
    [UIW_MPA_EC_MARKER] = "MPA marker and ULPDU length field mismatch",
    [UIW_MPA_EC_INVALID_REQ] = "invalid MPA request or reply frame",
    [UIW_MPA_EC_LOCAL_CATASTROPHIC] = "local catastrophic error",
    [UIW_MPA_EC_INSUFFICIENT_IRD] = "insufficient IRD resources",
    [UIW_MPA_EC_NO_MATCHING_RTR] = "no matching RTR option",
};

const char *uiw_term_ecode_name(unsigned layer, unsigned etype, unsigned ecode)
{
    switch (layer) {
    case UIW_LAYER_RDMAP:
        switch (etype) {
        case UIW_RDMAP_ET_CATASTROPHIC:
            /* RFC 5040 Figure 9: "This error type does not have an error
             * code. Any value in this field is acceptable." */
            return "none";
        case UIW_RDMAP_ET_REMOTE_PROT:
            return lookup(rdmap_prot_names, NELEM(rdmap_prot_names), ecode);
        case UIW_RDMAP_ET_REMOTE_OP:
            return lookup(rdmap_op_names, NELEM(rdmap_op_names), ecode);
        }
        break;
    case UIW_LAYER_DDP:
        switch (etype) {
        case UIW_DDP_ET_CATASTROPHIC:
            return lookup(ddp_cat_names, NELEM(ddp_cat_names), ecode);
        case UIW_DDP_ET_TAGGED:
            return lookup(ddp_tagged_names, NELEM(ddp_tagged_names), ecode);
        case UIW_DDP_ET_UNTAGGED:
            return lookup(ddp_untagged_names, NELEM(ddp_untagged_names), ecode);
        case UIW_DDP_ET_RSVD:
            /* RFC 6580 §3.2 "0x1/0x3/ALL": any code, defined by the LLP */
            return "LLP-defined";
        }
        break;
    case UIW_LAYER_LLP:
        if (etype == UIW_LLP_ET_MPA || etype == UIW_LLP_ET_RNIC)
            return lookup(mpa_names, NELEM(mpa_names), ecode);
        break;
    }
    return unknown(ecode);
}
