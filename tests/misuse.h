/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Table-driven misuse tests (tests/engine/test_misuse.c,
 * tests/rdmacm/test_rdmacm_misuse.c): each row calls one function that
 * misuses the API and names what must come back:
 *   K_RET  the return value is `want`
 *   K_NEG  -1 with errno `want`
 *   K_PTR  NULL (0) with errno `want`
 * MISUSE_FORK=1 in the environment runs each row in a child instead and
 * says which rows crash (diagnosis only).
 */
#ifndef UIWARP_MISUSE_H
#define UIWARP_MISUSE_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

enum kind { K_RET, K_NEG, K_PTR };
struct row {
    const char *name;
    enum kind kind;
    int want; /* the return value (K_RET) or errno */
    intptr_t (*fn)(void);
};

#define ROW(kind, want, name)                                                                      \
    {                                                                                              \
#name, kind, want, name                                                                    \
    }

/* With MISUSE_FORK set: every row in a child of its own (5 s each), the
 * rows that crash printed; true (the caller then exits 0). */
static inline bool misuse_fork_diag(const struct row *rows, unsigned n)
{
    if (!getenv("MISUSE_FORK"))
        return false;
    for (unsigned i = 0; i < n; i++) {
        pid_t pid = fork();
        int st = 0;
        if (pid == 0) {
            alarm(5);
            rows[i].fn();
            _exit(0);
        }
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st))
            printf("row %u %s: crashed (%d)\n", i, rows[i].name, st);
    }
    return true;
}

/* Every row, checked; a failed row is printed with what it got, and the
 * total as "LABEL: N rows, F failed". */
static inline void misuse_run(const struct row *rows, unsigned n, const char *label)
{
    unsigned failed = 0;

    for (unsigned i = 0; i < n; i++) {
        const struct row *r = &rows[i];
        unsigned long before = tu_failed;
        intptr_t v;
        int e;

        errno = 0;
        v = r->fn();
        e = errno;
        switch (r->kind) {
        case K_RET:
            CHECK_EQ(v, r->want);
            break;
        case K_NEG:
            CHECK_EQ(v, -1);
            CHECK_EQ(e, r->want);
            break;
        case K_PTR:
            CHECK_EQ(v, 0);
            CHECK_EQ(e, r->want);
            break;
        }
        if (tu_failed != before) {
            failed++;
            fprintf(stderr, "  row %u %s: got %ld errno %d (%s), want %d\n", i, r->name, (long)v, e,
                    strerror(e), r->want);
        }
    }
    printf("%s: %u rows, %u failed\n", label, n, failed);
}

#endif
