/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `uiwarp run PROGRAM [ARGS...]`: run an unmodified RDMA program over
 * uiwarp. The dynamic loader is pointed at uiwarp's libibverbs.so.1 and
 * librdmacm.so.1 by prepending their folder to LD_LIBRARY_PATH; nothing else
 * changes, so UIWARP_* settings pass through. The folder is found relative
 * to this tool: ../lib/uiwarp (installed: the private directory that keeps
 * them from shadowing rdma-core's) or ../lib (the build tree).
 */
#include "run.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void uiw_run_usage(FILE *out)
{
    fprintf(out, "usage: uiwarp run PROGRAM [ARGS...]\n\n"
                 "Run PROGRAM with uiwarp's libibverbs.so.1 and librdmacm.so.1 in place of\n"
                 "rdma-core's (LD_LIBRARY_PATH gets their folder: ../lib/uiwarp or ../lib\n"
                 "relative to this tool), e.g.\n"
                 "  uiwarp run rping -s -a 127.0.0.1 -v -C 10\n"
                 "Engine settings (UIWARP_CRC, UIWARP_P2P, ...) are read from the\n"
                 "environment as usual; see README.md.\n");
}

/* <dir of /proc/self/exe>/REL, if it holds our libibverbs.so.1. */
static int lib_dir_at(const char *rel, char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return -errno;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return -ENOENT;
    *slash = '\0';
    int w = snprintf(out, cap, "%s/%s", exe, rel);
    if (w < 0 || (size_t)w >= cap)
        return -ENAMETOOLONG;
    char probe[PATH_MAX + 32];
    snprintf(probe, sizeof(probe), "%s/libibverbs.so.1", out);
    if (access(probe, R_OK) != 0)
        return -ENOENT;
    char *real = realpath(out, NULL);
    if (real) {
        snprintf(out, cap, "%s", real);
        free(real);
    }
    return 0;
}

static int lib_dir(char *out, size_t cap)
{
    int rc = lib_dir_at("../lib/uiwarp", out, cap); /* installed */
    if (rc == -ENOENT)
        rc = lib_dir_at("../lib", out, cap); /* build tree */
    return rc;
}

int uiw_run_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        uiw_run_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    char dir[PATH_MAX];
    int rc = lib_dir(dir, sizeof(dir));
    if (rc) {
        fprintf(stderr, "uiwarp run: uiwarp's libibverbs.so.1 not found beside the tool (%s)\n",
                strerror(-rc));
        return 2;
    }
    const char *old = getenv("LD_LIBRARY_PATH");
    size_t len = strlen(dir) + (old ? strlen(old) + 1 : 0) + 1;
    char *val = malloc(len);
    if (!val)
        return 2;
    snprintf(val, len, "%s%s%s", dir, old && *old ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", val, 1);
    free(val);
    execvp(argv[1], argv + 1);
    fprintf(stderr, "uiwarp run: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
