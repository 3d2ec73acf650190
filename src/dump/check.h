/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The iWARP trace checker behind `uiwarp dump`: finds MPA connections in
 * reassembled TCP streams, decodes the MPA Request/Reply and every FPDU in
 * both directions with the wire core, prints them, checks what the RFCs
 * require, and sums up per connection and in total.
 */
#ifndef UIWARP_DUMP_CHECK_H
#define UIWARP_DUMP_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Known peer quirks the checker can tolerate (counted as "tolerated"). */
enum uiw_quirk {
    UIW_QUIRK_SIW_PAD = 0,      /* non-zero pad bytes on short FPDUs */
    UIW_QUIRK_SIW_TERM_LAYOUT,  /* Terminate control word in siw's bitfield layout */
    UIW_QUIRK_SIW_MPA_GSO,      /* MPA Res bit 0x08 (siw GSO_EXP) */
    UIW_QUIRK_SIW_REJECT_WORDS, /* MPA Reject with zeroed IRD/ORD words (A not copied) */
    UIW_QUIRK_RNIC_TERM_ETYPE3, /* MPA-layer Terminate with error type 3 (irdma, cxgb4) */
    UIW_QUIRK_SIW_EARLY_FPDU,   /* responder's first FPDU before the initiator's first trailer */
    UIW_QUIRK_COUNT
};

int uiw_quirk_count(void);
const char *uiw_quirk_name(int q);
const char *uiw_quirk_desc(int q);
/* -1 when unknown */
int uiw_quirk_lookup(const char *name);

/* Violation classes (exit status 1 when any is counted). */
int uiw_violation_count(void);
const char *uiw_violation_name(int v);
const char *uiw_violation_desc(int v);

/* Warning classes: legal iWARP that hardware RNICs handle badly (counted,
 * reported with "*", no effect on the exit status). */
int uiw_warning_count(void);
const char *uiw_warning_name(int w);
const char *uiw_warning_desc(int w);

typedef struct uiw_dump_opts {
    bool quiet;              /* -q: summary only */
    unsigned strict_mask;    /* bit q set: quirk q is a violation */
    const char *streams_dir; /* --streams DIR */
    size_t max_buffer;       /* per-stream out-of-order / pending limit (0: 8 MiB) */
    unsigned hex;            /* -x N: payload bytes shown per FPDU */
} uiw_dump_opts;

typedef struct uiw_dump uiw_dump;

uiw_dump *uiw_dump_new(const uiw_dump_opts *opts, FILE *out);
/* Check one capture file. 0, or -1 when it cannot be read (message on
 * stderr). */
int uiw_dump_file(uiw_dump *d, const char *path);
/* Print the grand total (for more than one file). */
void uiw_dump_grand_total(uiw_dump *d);
/* Totals over every file so far. */
uint64_t uiw_dump_violations(const uiw_dump *d);
uint64_t uiw_dump_fpdus(const uiw_dump *d);
/* Count over every file so far of a violation class ("crc"), a tolerated
 * quirk ("siw-pad"), a capture problem ("gap", "no-syn", ...), a warning
 * class ("fpdu-split"), or one of "iwarp-connections", "undecodable",
 * "crc-good", "crc-bad", "segment-fpdus" (FPDUs judged for segment
 * alignment), "segment-aligned" (of those, FPDUs that start a TCP
 * segment), "segment-whole" (of those, FPDUs that lie wholly in a TCP
 * segment that starts with an FPDU, RFC 5044 Appendix A.1: packed ones
 * count), "segment-retransmitted" (FPDUs left out: first carried by a
 * retransmission), "segment-segments" (TCP segments of the FPDU streams
 * judged, retransmissions left out: "segment-aligned" of them start with
 * an FPDU), "segment-integral" (of those, segments that hold whole FPDUs
 * only: RFC 5044 §2 "FPDU Alignment"), "segment-emss-changes" (segments
 * judged that carried SACK blocks, which shrink the EMSS: RFC 5044 §5.1),
 * "segment-emss-unaligned" and "segment-emss-split" (segments that did not
 * start with an FPDU, and FPDUs not whole in one that did, from such a
 * change up to the next segment that starts with an FPDU),
 * "segment-emss-run" (the most of those segments in a row); 0 for unknown
 * names. */
uint64_t uiw_dump_count(const uiw_dump *d, const char *name);
void uiw_dump_free(uiw_dump *d);

#endif /* UIWARP_DUMP_CHECK_H */
