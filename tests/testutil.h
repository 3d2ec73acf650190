/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Minimal test harness: every CHECK counts; a failed one prints where and
 * why and the program exits non-zero at the end (TEST_MAIN_END).
 */
#ifndef UIWARP_TESTUTIL_H
#define UIWARP_TESTUTIL_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long tu_checks, tu_failed;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (!(cond)) {                                                                             \
            tu_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long tu_a = (long long)(a), tu_b = (long long)(b);                                    \
        tu_checks++;                                                                               \
        if (tu_a != tu_b) {                                                                        \
            tu_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld != %lld, 0x%llx != 0x%llx)\n", \
                    __FILE__, __LINE__, #a, #b, tu_a, tu_b, (unsigned long long)tu_a,              \
                    (unsigned long long)tu_b);                                                     \
        }                                                                                          \
    } while (0)

#define CHECK_MEM(a, b, n)                                                                         \
    do {                                                                                           \
        tu_checks++;                                                                               \
        if (memcmp((a), (b), (n)) != 0) {                                                          \
            tu_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK_MEM failed: %s vs %s (%zu bytes)\n", __FILE__, __LINE__, \
                    #a, #b, (size_t)(n));                                                          \
        }                                                                                          \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *tu_sa = (a), *tu_sb = (b);                                                     \
        tu_checks++;                                                                               \
        if (!tu_sa || !tu_sb || strcmp(tu_sa, tu_sb) != 0) {                                       \
            tu_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK_STR failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__,     \
                    tu_sa ? tu_sa : "(null)", tu_sb ? tu_sb : "(null)");                           \
        }                                                                                          \
    } while (0)

/* Path below the shared reference folder (UIWARP_SHARED, else ../shared). */
static inline const char *tu_shared(const char *rel)
{
    static char buf[4096];
    const char *base = getenv("UIWARP_SHARED");
    snprintf(buf, sizeof(buf), "%s/%s", base ? base : "../shared", rel);
    return buf;
}

#define TEST_MAIN_END()                                                                            \
    do {                                                                                           \
        printf("%s: %lu checks, %lu failed\n", __FILE__, tu_checks, tu_failed);                    \
        return tu_failed ? 1 : 0;                                                                  \
    } while (0)

#endif
