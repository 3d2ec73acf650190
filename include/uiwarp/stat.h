/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Live counters: the layout of the file through which a process using
 * uiwarp publishes its QPs to `uiwarp stat` (like the kernel's
 * /proc/net/tcp for `ss`).
 *
 * Each process that creates a QP makes /dev/shm/uiwarp-stat.PID (mode 0600:
 * its user and root read it) and removes it at exit; `uiwarp stat` removes
 * files whose process is gone. The file is a header followed by chunks of
 * UIW_STAT_CHUNK slots, one slot per QP. The library only appends chunks, so
 * a reader maps the file's current size. Counters are plain 64-bit words
 * updated by the QP's owner under the QP's lock; a reader sees each word
 * whole (aligned 64-bit stores), not a consistent snapshot of all of them.
 *
 * Counting: an FPDU is counted when it is built for sending (tx) or when
 * its header has been received (rx); a message when its last FPDU (L=1) is
 * counted; bytes are payload (ULPDU payload, not headers, markers or CRC).
 */
#ifndef UIWARP_STAT_H
#define UIWARP_STAT_H

#include <stdint.h>

#define UIW_STAT_MAGIC   0x54535755u /* "UWST" */
#define UIW_STAT_VERSION 1u
#define UIW_STAT_CHUNK   64u /* slots per chunk */
#define UIW_STAT_NOPS    16u /* RDMAP opcodes 0..15 (RFC 5040 §4.2, RFC 7306 §8) */
#define UIW_STAT_DIR     "/dev/shm"
#define UIW_STAT_PREFIX  "uiwarp-stat."

struct uiw_stat_hdr {
    uint32_t magic, version;
    uint32_t pid;
    uint32_t slot_size;  /* sizeof(struct uiw_stat_qp) */
    uint32_t hdr_size;   /* offset of the first chunk */
    uint32_t chunk_size; /* UIW_STAT_CHUNK * slot_size rounded to the page */
    uint64_t start_ns;   /* CLOCK_REALTIME at creation */
    char comm[16];       /* the process's name */
};

enum uiw_stat_slot_state {
    UIW_STAT_FREE = 0,
    UIW_STAT_USED = 1,
};

struct uiw_stat_dir_counters {
    uint64_t msgs[UIW_STAT_NOPS];  /* messages per RDMAP opcode */
    uint64_t bytes[UIW_STAT_NOPS]; /* payload bytes per RDMAP opcode */
    uint64_t fpdus;
};

struct uiw_stat_qp {
    uint32_t slot_state; /* enum uiw_stat_slot_state */
    uint32_t qp_num;
    uint32_t qp_state; /* enum ibv_qp_state */
    uint32_t connected;
    char dev[64]; /* device name (IBV_SYSFS_NAME_MAX) */
    /* addresses once connected: family 4 or 6, address in network order
     * (IPv4 in the first 4 bytes), port in host order */
    uint8_t family;
    uint8_t mpa_rev;
    uint8_t crc;     /* MPA CRC in use */
    uint8_t markers; /* bit 0: we send markers, bit 1: the peer does */
    uint8_t p2p;     /* RFC 6581 peer-to-peer mode */
    uint8_t rtr;     /* RTR type used: 0 none, else UIW_RTR_* of wire.h */
    uint8_t active;  /* 1: we initiated the connection */
    uint8_t pad0;
    uint16_t local_port, peer_port;
    uint8_t local_addr[16], peer_addr[16];
    uint32_t ird, ord;
    struct uiw_stat_dir_counters tx, rx;
    uint64_t rx_in_place;   /* payload bytes received straight into place */
    uint64_t rx_copied;     /* payload bytes received through staging */
    uint64_t crc_errors;    /* FPDUs received with a bad CRC */
    uint64_t term_sent;     /* Terminates sent */
    uint64_t term_received; /* Terminates received */
    uint64_t rnr_holds;     /* times an untagged message found no posted receive
                             * and the QP stopped reading its socket until one
                             * was posted (receiver not ready, docs/ENGINE.md) */
    uint64_t tx_sends;      /* sendmsg calls that handed bytes to TCP (several
                             * FPDUs each when coalesced, docs/ENGINE.md) */
    uint64_t reserved[6];
};

#endif
