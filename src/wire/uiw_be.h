/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Big-endian (network order) loads and stores of 16, 32 and 64 bits at any
 * alignment: the one copy used by the wire core, uiwarp dump's capture
 * reader and the engine's capture writer. Internal: not part of
 * include/uiwarp/wire.h.
 */
#ifndef UIWARP_UIW_BE_H
#define UIWARP_UIW_BE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

static inline uint16_t uiw_get_be16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t uiw_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t uiw_get_be64(const uint8_t *p)
{
    return (uint64_t)uiw_get_be32(p) << 32 | uiw_get_be32(p + 4);
}

static inline void uiw_put_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void uiw_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void uiw_put_be64(uint8_t *p, uint64_t v)
{
    uiw_put_be32(p, (uint32_t)(v >> 32));
    uiw_put_be32(p + 4, (uint32_t)v);
}

#endif
