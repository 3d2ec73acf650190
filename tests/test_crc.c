/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * CRC32C (RFC 5044 §4.4): the RFC 3720 B.4 vectors (../shared/refs/
 * crc32c-vectors.txt), the catalogue check value, the two annotated FPDUs
 * of RFC 5044 §4.4 Figures 5 and 6, incremental feeding in every split,
 * wire byte order, and a > INT_MAX input.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "testutil.h"
#include "uiwarp/wire.h"

/* Bit-at-a-time reflected CRC32C (poly 0x82F63B78), the definition the
 * vectors file states; an independent reference for the ISA-L path. */
static uint32_t ref_crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++)
            c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    }
    return c ^ 0xFFFFFFFFu;
}

struct vec {
    const char *name;
    uint8_t data[48];
    size_t len;
    uint32_t crc;    /* uiw_crc32c value */
    uint8_t wire[4]; /* bytes on the wire, as listed in the RFC */
};

static struct vec vecs[8];
static int nvecs;

static void build_vectors(void)
{
    struct vec *v;

    /* RFC 3720 B.4: 32 bytes of zeroes -> aa 36 91 8a */
    v = &vecs[nvecs++];
    v->name = "32 x 00";
    v->len = 32;
    memset(v->data, 0, 32);
    v->crc = 0x8A9136AAu;
    memcpy(v->wire, "\xaa\x36\x91\x8a", 4);

    /* 32 bytes of ones -> 43 ab a8 62 */
    v = &vecs[nvecs++];
    v->name = "32 x ff";
    v->len = 32;
    memset(v->data, 0xff, 32);
    v->crc = 0x62A8AB43u;
    memcpy(v->wire, "\x43\xab\xa8\x62", 4);

    /* incrementing 00..1f -> 4e 79 dd 46 */
    v = &vecs[nvecs++];
    v->name = "00..1f";
    v->len = 32;
    for (int i = 0; i < 32; i++)
        v->data[i] = (uint8_t)i;
    v->crc = 0x46DD794Eu;
    memcpy(v->wire, "\x4e\x79\xdd\x46", 4);

    /* decrementing 1f..00 -> 5c db 3f 11 */
    v = &vecs[nvecs++];
    v->name = "1f..00";
    v->len = 32;
    for (int i = 0; i < 32; i++)
        v->data[i] = (uint8_t)(31 - i);
    v->crc = 0x113FDB5Cu;
    memcpy(v->wire, "\x5c\xdb\x3f\x11", 4);

    /* iSCSI SCSI Read (10) command PDU -> 56 3a 96 d9 */
    static const uint8_t scsi[48] = {
        0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
        0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18, 0x28, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    v = &vecs[nvecs++];
    v->name = "SCSI Read (10) PDU";
    v->len = 48;
    memcpy(v->data, scsi, 48);
    v->crc = 0xD9963A56u;
    memcpy(v->wire, "\x56\x3a\x96\xd9", 4);

    /* catalogue check value (not in the RFC) */
    v = &vecs[nvecs++];
    v->name = "123456789";
    v->len = 9;
    memcpy(v->data, "123456789", 9);
    v->crc = 0xE3069283u;
    memcpy(v->wire, "\x83\x92\x06\xe3", 4);

    /* RFC 5044 §4.4 Figure 5: first FPDU of a stream, leading marker,
     * Send (0x4143) to QN 0 MSN 1 with 24 zero bytes; CRC 52 23 99 83 */
    v = &vecs[nvecs++];
    v->name = "RFC 5044 Figure 5 FPDU";
    v->len = 48;
    memset(v->data, 0, 48);
    v->data[5] = 0x2a; /* ULPDU_Length 42 */
    v->data[6] = 0x41; /* DDP/RDMAP control: Send, L */
    v->data[7] = 0x43;
    v->data[19] = 0x01; /* MSN 1 */
    v->crc = 0x83992352u;
    memcpy(v->wire, "\x52\x23\x99\x83", 4);

    /* RFC 5044 §4.4 Figure 6: FPDU at stream offset 0x1ec, MSN 2, a
     * marker (FPDUPTR 0x14) at 0x200 inside the payload; CRC 84 92 58 98 */
    v = &vecs[nvecs++];
    v->name = "RFC 5044 Figure 6 FPDU";
    v->len = 48;
    memset(v->data, 0, 48);
    v->data[1] = 0x2a;
    v->data[2] = 0x41;
    v->data[3] = 0x43;
    v->data[15] = 0x02; /* MSN 2 */
    v->data[23] = 0x14; /* marker FPDUPTR 0x0014 at offset 0x200 */
    v->crc = 0x98589284u;
    memcpy(v->wire, "\x84\x92\x58\x98", 4);
}

static void test_vectors(void)
{
    for (int i = 0; i < nvecs; i++) {
        const struct vec *v = &vecs[i];
        uint8_t out[4];

        CHECK_EQ(uiw_crc32c(v->data, v->len), v->crc);
        CHECK_EQ(ref_crc32c(v->data, v->len), v->crc);
        uiw_crc32c_put(out, uiw_crc32c(v->data, v->len));
        CHECK_MEM(out, v->wire, 4);
        CHECK_EQ(uiw_crc32c_get(v->wire), v->crc);
        if (uiw_crc32c(v->data, v->len) != v->crc)
            fprintf(stderr, "  vector %s: got 0x%08x\n", v->name,
                    (unsigned)uiw_crc32c(v->data, v->len));
    }
}

/* Feed each vector cut in two and in three at every possible place, byte
 * by byte, and with empty pieces (NULL included) in between. */
static void test_incremental(void)
{
    for (int i = 0; i < nvecs; i++) {
        const struct vec *v = &vecs[i];
        const uint8_t *d = v->data;
        size_t n = v->len;
        unsigned long bad = 0, tried = 0;

        for (size_t a = 0; a <= n; a++) {
            for (size_t b = a; b <= n; b++) {
                uint32_t s = UIW_CRC32C_INIT;
                s = uiw_crc32c_update(s, d, a);
                s = uiw_crc32c_update(s, d + a, b - a);
                s = uiw_crc32c_update(s, d + b, n - b);
                tried++;
                if (uiw_crc32c_final(s) != v->crc)
                    bad++;
            }
        }
        CHECK_EQ(bad, 0);
        CHECK(tried == (n + 1) * (n + 2) / 2);

        uint32_t s = UIW_CRC32C_INIT;
        for (size_t k = 0; k < n; k++) {
            s = uiw_crc32c_update(s, NULL, 0);
            s = uiw_crc32c_update(s, d + k, 1);
        }
        CHECK_EQ(uiw_crc32c_final(s), v->crc);
    }
    /* empty input: the CRC of nothing is 0 */
    CHECK_EQ(uiw_crc32c(NULL, 0), 0);
    CHECK_EQ(uiw_crc32c_update(0x12345678u, NULL, 0), 0x12345678u);
}

/* Lengths 0..1100 at every alignment 0..15 against the bitwise reference
 * (exercises the library's head/tail handling), and random splits. */
static void test_against_reference(void)
{
    static uint8_t buf[1200];
    uint32_t x = 0x2545F491u;
    unsigned long bad = 0;

    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        buf[i] = (uint8_t)x;
    }
    for (size_t align = 0; align < 16; align++)
        for (size_t n = 0; n + align <= 1100; n += (n < 300 ? 1 : 37))
            if (uiw_crc32c(buf + align, n) != ref_crc32c(buf + align, n))
                bad++;
    CHECK_EQ(bad, 0);

    bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = 1 + (size_t)(x % 1100), off = 0;
        uint32_t s = UIW_CRC32C_INIT;
        while (off < n) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            size_t piece = x % 97;
            if (piece > n - off)
                piece = n - off;
            s = uiw_crc32c_update(s, buf + off, piece);
            off += piece;
        }
        if (uiw_crc32c_final(s) != ref_crc32c(buf, n))
            bad++;
    }
    CHECK_EQ(bad, 0);
}

static void test_byte_order(void)
{
    uint8_t out[4];

    uiw_crc32c_put(out, 0x11223344u);
    CHECK_MEM(out, "\x44\x33\x22\x11", 4);
    CHECK_EQ(uiw_crc32c_get(out), 0x11223344u);
    uiw_crc32c_put(out, 0xFFFFFFFFu);
    CHECK_EQ(uiw_crc32c_get(out), 0xFFFFFFFFu);
    for (uint32_t v = 1; v != 0; v <<= 1) {
        uiw_crc32c_put(out, v);
        CHECK_EQ(uiw_crc32c_get(out), v);
    }
}

/* One update over more than INT_MAX bytes must equal feeding the same
 * bytes in pieces that each fit an int (crc32_iscsi's length type). The
 * input is one 1 MiB memfd of pseudo-random bytes mapped over and over into
 * a reserved range: little RAM, and page faults served 16 pages at a time
 * by the kernel's fault-around for shared file mappings. */
static void test_huge(void)
{
    const size_t piece_map = (size_t)1 << 20;
    const size_t n = (size_t)INT_MAX + 4096 + 3;
    const size_t span = (n + piece_map - 1) / piece_map * piece_map;
    int fd = memfd_create("uiw_crc_huge", 0);
    uint8_t *pat = NULL, *p = MAP_FAILED;
    bool ok = fd >= 0 && ftruncate(fd, (off_t)piece_map) == 0;

    if (ok) {
        pat = mmap(NULL, piece_map, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ok = pat != MAP_FAILED;
    }
    if (ok) {
        uint32_t x = 0x9E3779B9u;
        for (size_t i = 0; i < piece_map; i++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            pat[i] = (uint8_t)x;
        }
        p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        ok = p != MAP_FAILED;
    }
    for (size_t off = 0; ok && off < span; off += piece_map)
        ok = mmap(p + off, piece_map, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED;
    if (!ok) {
        printf("test_huge: could not map %zu bytes, skipped\n", n);
    } else {
        uint32_t one = uiw_crc32c_update(UIW_CRC32C_INIT, p, n);
        uint32_t s = UIW_CRC32C_INIT;
        const size_t piece = 700u * 1000u * 1000u; /* not a multiple of the chunk */
        for (size_t off = 0; off < n; off += piece)
            s = uiw_crc32c_update(s, p + off, n - off < piece ? n - off : piece);
        /* equal only if the 1 GiB chunking neither drops nor repeats a
         * byte: the pieces (700 MB each) cut the input elsewhere */
        CHECK_EQ(one, s);
    }
    if (p != MAP_FAILED)
        munmap(p, span);
    if (pat && pat != MAP_FAILED)
        munmap(pat, piece_map);
    if (fd >= 0)
        close(fd);
}

int main(void)
{
    build_vectors();
    test_vectors();
    test_incremental();
    test_against_reference();
    test_byte_order();
    test_huge();
    TEST_MAIN_END();
}
