/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The ChaCha20 block function (RFC 8439 §2.3), used by mem.c as the
 * generator of STags (keyed from getrandom). Header-only so that a test can
 * check it against the RFC's test vector.
 *
 * in:  16 words: "expand 32-byte k", 8 key words, block counter, 3 nonce
 *      words (RFC 8439 §2.3; mem.c uses words 12-13 as a 64-bit counter)
 * out: 16 words of key stream
 */
#ifndef UIW_CHACHA_H
#define UIW_CHACHA_H

#include <stdint.h>

#define UIW_CHACHA_C0 0x61707865u /* "expa" */
#define UIW_CHACHA_C1 0x3320646eu /* "nd 3" */
#define UIW_CHACHA_C2 0x79622d32u /* "2-by" */
#define UIW_CHACHA_C3 0x6b206574u /* "te k" */

static inline uint32_t uiw_chacha_rotl(uint32_t x, int n)
{
    return x << n | x >> (32 - n);
}

#define UIW_CHACHA_QR(x, a, b, c, d)                                                               \
    do {                                                                                           \
        x[a] += x[b], x[d] ^= x[a], x[d] = uiw_chacha_rotl(x[d], 16);                              \
        x[c] += x[d], x[b] ^= x[c], x[b] = uiw_chacha_rotl(x[b], 12);                              \
        x[a] += x[b], x[d] ^= x[a], x[d] = uiw_chacha_rotl(x[d], 8);                               \
        x[c] += x[d], x[b] ^= x[c], x[b] = uiw_chacha_rotl(x[b], 7);                               \
    } while (0)

static inline void uiw_chacha20_block(const uint32_t in[16], uint32_t out[16])
{
    uint32_t x[16];

    for (int i = 0; i < 16; i++)
        x[i] = in[i];
    for (int i = 0; i < 10; i++) { /* 20 rounds: column and diagonal pairs */
        UIW_CHACHA_QR(x, 0, 4, 8, 12);
        UIW_CHACHA_QR(x, 1, 5, 9, 13);
        UIW_CHACHA_QR(x, 2, 6, 10, 14);
        UIW_CHACHA_QR(x, 3, 7, 11, 15);
        UIW_CHACHA_QR(x, 0, 5, 10, 15);
        UIW_CHACHA_QR(x, 1, 6, 11, 12);
        UIW_CHACHA_QR(x, 2, 7, 8, 13);
        UIW_CHACHA_QR(x, 3, 4, 9, 14);
    }
    for (int i = 0; i < 16; i++)
        out[i] = x[i] + in[i];
}

#endif
