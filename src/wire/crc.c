/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC32C for MPA FPDUs (RFC 5044 §4.4), computed by ISA-L in userspace and
 * by the kernel's crc32c library in the module (uiw_port_crc32c, uiw_port.h).
 *
 * RFC 5044 §4.4 uses the iSCSI CRC (RFC 3720 §12.1, polynomial 0x1EDC6F41)
 * over the whole FPDU up to the CRC field. Conventions, checked against the
 * RFC 3720 B.4 vectors (written into tests/test_crc.c):
 *  - ISA-L's crc32_iscsi(buf, len, init) is the bare reflected CRC register
 *    update: it neither inverts init nor the result
 *    (crc32_iscsi("123456789", 9, 0xFFFFFFFF) == 0x1CF96D7C == ~0xE3069283).
 *    So the running state is the register itself: start at 0xFFFFFFFF
 *    (UIW_CRC32C_INIT), feed pieces through crc32_iscsi, and invert once at
 *    the end (uiw_crc32c_final). Any split of the input gives the same
 *    register value, which makes the update incremental. The kernel's
 *    crc32c(crc, p, len) follows the same convention (iSCSI seeds ~0 and
 *    inverts the result itself).
 *  - The final value goes on the wire as its little-endian byte image: the
 *    RFC 3720 B.4 "CRC" bytes, e.g. aa 36 91 8a for 32 zero bytes
 *    (0x8A9136AA).
 */
#include "uiw_port.h"
#include "uiwarp/wire.h"

uint32_t uiw_crc32c_update(uint32_t state, const void *buf, size_t len)
{
    const unsigned char *p = buf;

    /* Both backends take a narrower length than size_t: at most
     * UIW_PORT_CRC_MAX_CHUNK (1 GiB) per call. */
    while (len > 0) {
        size_t n = len < UIW_PORT_CRC_MAX_CHUNK ? len : UIW_PORT_CRC_MAX_CHUNK;
        state = uiw_port_crc32c(state, p, n);
        p += n;
        len -= n;
    }
    return state;
}

uint32_t uiw_crc32c(const void *buf, size_t len)
{
    return uiw_crc32c_final(uiw_crc32c_update(UIW_CRC32C_INIT, buf, len));
}

/* RFC 5044 §4.4 transmits the CRC so that the RFC 3720 B.4 byte listing
 * appears on the wire: least significant byte of the reflected value first. */
void uiw_crc32c_put(uint8_t out[4], uint32_t crc)
{
    out[0] = (uint8_t)crc;
    out[1] = (uint8_t)(crc >> 8);
    out[2] = (uint8_t)(crc >> 16);
    out[3] = (uint8_t)(crc >> 24);
}

uint32_t uiw_crc32c_get(const uint8_t in[4])
{
    return (uint32_t)in[0] | (uint32_t)in[1] << 8 | (uint32_t)in[2] << 16 | (uint32_t)in[3] << 24;
}
