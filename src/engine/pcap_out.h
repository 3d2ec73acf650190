/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Capture from inside the library: UIWARP_PCAP=FILE makes the process write
 * every connection's TCP byte stream, MPA exchange included, as pcapng with
 * synthesized Ethernet/IPv4-or-IPv6/TCP framing (a SYN handshake when the
 * connection is captured, data segments of at most 64000 bytes, FIN or RST
 * at the end), so that Wireshark, tshark and `uiwarp dump` read it. No root,
 * no dumpcap, works inside containers.
 *
 *   UIWARP_PCAP       FILE ("%p" becomes the process id); unset: off
 *   UIWARP_PCAP_MAX   size limit in bytes (suffix k, M, G; default 1G):
 *                     when the next packet would pass it, capture stops
 *                     (said once on stderr) and the file stays valid
 *
 * Cheap when off: a connection without a capture handle costs one NULL test
 * per send/receive call.
 *
 * Two layers: uiw_pcapng_* build blocks into a caller's buffer (no I/O,
 * unit-tested by reading them back with src/dump's frame parser); uiw_cap_*
 * own the file (one per process, a mutex around writes).
 */
#ifndef UIWARP_ENGINE_PCAP_OUT_H
#define UIWARP_ENGINE_PCAP_OUT_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

/* Largest TCP payload per synthesized segment (keeps IPv4/IPv6 lengths in
 * 16 bits). */
#define UIW_PCAP_SEG 64000u

/* One endpoint pair of a synthesized TCP connection. */
struct uiw_pcap_flow {
    struct sockaddr_storage local, peer; /* AF_INET or AF_INET6 */
    uint32_t seq_out, seq_in;            /* next sequence number each way */
};

/* pcapng Section Header Block + Interface Description Block (Ethernet).
 * Returns the bytes written to buf (cap >= 64), or 0. */
size_t uiw_pcapng_header(uint8_t *buf, size_t cap);

/* One Enhanced Packet Block carrying an Ethernet/IP/TCP frame of flow f in
 * direction out (local -> peer) or in, with flags (UIW_TCP_* values of
 * src/dump/capture.h: FIN 1, SYN 2, RST 4, PSH 8, ACK 16) and len payload
 * bytes gathered from iov (len <= UIW_PCAP_SEG), at time ts_us
 * (microseconds since the epoch). Sequence numbers are taken from and
 * advanced in f. Returns the block's size, or 0 if cap is too small. */
size_t uiw_pcapng_packet(uint8_t *buf, size_t cap, struct uiw_pcap_flow *f, bool out, uint8_t flags,
                         const struct iovec *iov, int iovcnt, size_t skip, size_t len,
                         uint64_t ts_us);

/* Buffer size that always holds one packet block of UIW_PCAP_SEG bytes. */
#define UIW_PCAP_BLOCK_MAX (UIW_PCAP_SEG + 256u)

/* ---- the process's capture file ---- */
struct uiw_cap; /* per connection */

/* A capture handle for the connected socket fd, or NULL when capture is off
 * (or the file could not be opened, said once). Writes the SYN handshake
 * (the local side as the initiator when active). */
struct uiw_cap *uiw_cap_conn(int fd, bool active);
/* Bytes that went out (handed to TCP) or came in (read from TCP):
 * the first len bytes of iov. */
void uiw_cap_data(struct uiw_cap *c, bool out, const struct iovec *iov, int iovcnt, size_t len);
void uiw_cap_bytes(struct uiw_cap *c, bool out, const void *buf, size_t len);
/* The end of the connection (FIN from us, or RST when reset) and the
 * handle's release. NULL is allowed. */
void uiw_cap_close(struct uiw_cap *c, bool reset);

#endif
