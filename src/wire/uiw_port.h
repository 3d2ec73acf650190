/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the wire core's sources take from their environment, in one place,
 * so that the same src/wire sources compile in userspace (C17 + libc + ISA-L)
 * and in the Linux kernel module (kernel/, built by scripts/kernel.sh):
 *   - types, bool, size_t, struct iovec: through uiwarp/wire.h, which picks
 *     <linux/types.h> + <linux/uio.h> or <stdint.h> + <sys/uio.h>;
 *   - memcpy/memset/memcmp, snprintf, offsetof, negative errno values,
 *     *_MAX limits;
 *   - the bare CRC32C register update (RFC 3720 B.4 polynomial, reflected,
 *     no inversion of the input state or of the result; crc.c adds the
 *     RFC 5044 §4.4 conventions): ISA-L's crc32_iscsi in userspace, the
 *     kernel's crc32c library (libcrc32c) in the module;
 *   - UIW_PORT_HAVE_TLS: thread-local storage exists (userspace only).
 * Internal to src/wire: the engine, the tools and the tests use libc
 * directly.
 */
#ifndef UIWARP_UIW_PORT_H
#define UIWARP_UIW_PORT_H

#ifdef __KERNEL__

#include <linux/crc32c.h>
#include <linux/errno.h>
#include <linux/limits.h>
#include <linux/stddef.h>
#include <linux/string.h>
#include <linux/types.h>

/* <stdint.h>'s limits under the kernel's names */
#ifndef UINT16_MAX
#define UINT16_MAX U16_MAX
#endif
#ifndef UINT32_MAX
#define UINT32_MAX U32_MAX
#endif
#ifndef UINT64_MAX
#define UINT64_MAX U64_MAX
#endif

/* libcrc32c's crc32c(crc, p, len) is the bare register update: the caller
 * seeds ~0 and inverts the result, as iSCSI does. len is unsigned int. */
static inline uint32_t uiw_port_crc32c(uint32_t state, const void *buf, size_t len)
{
    return crc32c(state, buf, (unsigned int)len);
}
#define UIW_PORT_CRC_MAX_CHUNK ((size_t)1 << 30)

#else /* userspace */

#include <errno.h>
#include <isa-l/crc.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define UIW_PORT_HAVE_TLS      1

/* crc32_iscsi(buf, len, init) neither inverts init nor the result. Its
 * buffer parameter is not const-qualified but the function only reads it;
 * its length is an int, so callers feed at most UIW_PORT_CRC_MAX_CHUNK. */
static inline uint32_t uiw_port_crc32c(uint32_t state, const void *buf, size_t len)
{
    return crc32_iscsi((unsigned char *)(uintptr_t)buf, (int)len, state);
}
#define UIW_PORT_CRC_MAX_CHUNK ((size_t)1 << 30)

#endif

_Static_assert(UIW_PORT_CRC_MAX_CHUNK <= INT_MAX, "a CRC chunk must fit an int length");

#endif
