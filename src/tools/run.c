/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `uiwarp run PROGRAM [ARGS...]`: run an unmodified RDMA program over
 * uiwarp. The dynamic loader is pointed at uiwarp's libibverbs.so.1 and
 * librdmacm.so.1 by prepending their folder to LD_LIBRARY_PATH; nothing else
 * changes, so UIWARP_* settings pass through. The folder is found relative
 * to this tool: ../lib/uiwarp (installed: the private directory that keeps
 * them from shadowing rdma-core's) or ../lib (the build tree).
 *
 * Socket programs run over uiwarp's rsockets through rdma-core's
 * librspreload.so (docs/RSOCKETS.md): `uiwarp run --rsockets PROGRAM`
 * preloads it, or the user sets LD_PRELOAD to it. Either way
 * libuiwarp-rspreload.so from the same folder is preloaded after it: the
 * accept4() and ioctl(FIONBIO) that rdma-core 44's preload lacks
 * (src/rdmacm/rspreload_compat.c).
 */
#include "run.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void uiw_run_usage(FILE *out)
{
    fprintf(out, "usage: uiwarp run [--rsockets] PROGRAM [ARGS...]\n\n"
                 "Run PROGRAM with uiwarp's libibverbs.so.1 and librdmacm.so.1 in place of\n"
                 "rdma-core's (LD_LIBRARY_PATH gets their folder: ../lib/uiwarp or ../lib\n"
                 "relative to this tool), e.g.\n"
                 "  uiwarp run rping -s -a 127.0.0.1 -v -C 10\n"
                 "--rsockets: run a TCP socket program over uiwarp's rsockets: preload\n"
                 "rdma-core's librspreload.so (UIWARP_RSPRELOAD, or the distribution's\n"
                 "rsocket/librspreload.so), e.g.\n"
                 "  uiwarp run --rsockets iperf3 -s\n"
                 "With librspreload.so in LD_PRELOAD (given or added), uiwarp's\n"
                 "libuiwarp-rspreload.so is preloaded after it (accept4, ioctl FIONBIO, epoll).\n"
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

/* rdma-core's librspreload.so: $UIWARP_RSPRELOAD, or where distributions
 * put it (Debian: /usr/lib/<multiarch>/rsocket/, Fedora: /usr/lib64/rsocket/). */
static int find_rspreload(char *out, size_t cap)
{
    const char *env = getenv("UIWARP_RSPRELOAD");
    if (env && *env) {
        if (access(env, R_OK) != 0)
            return -errno;
        snprintf(out, cap, "%s", env);
        return 0;
    }
    static const char *const dirs[] = {
#ifdef UIW_MULTIARCH
        "/usr/lib/" UIW_MULTIARCH "/rsocket",
#endif
        "/usr/lib64/rsocket", "/usr/lib/rsocket", "/usr/local/lib/rsocket"};
    static const char *const names[] = {"librspreload.so", "librspreload.so.1"};
    for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
        for (size_t j = 0; j < sizeof(names) / sizeof(names[0]); j++) {
            int w = snprintf(out, cap, "%s/%s", dirs[i], names[j]);
            if (w > 0 && (size_t)w < cap && access(out, R_OK) == 0)
                return 0;
        }
    return -ENOENT;
}

/* Whether the colon/space separated LD_PRELOAD list has an entry whose
 * file name starts with name. */
static bool preload_has(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ": ");
        const char *base = p;
        for (const char *q = p; q < p + len; q++)
            if (*q == '/')
                base = q + 1;
        if ((size_t)(p + len - base) >= n && strncmp(base, name, n) == 0)
            return true;
        p += len;
        p += strspn(p, ": ");
    }
    return false;
}

/* LD_PRELOAD for rsockets: librspreload.so first when asked (--rsockets),
 * then, whenever librspreload is in the list, our companion. 0 or 2. */
static int set_preload(const char *dir, bool rsockets)
{
    const char *old = getenv("LD_PRELOAD");
    char rsp[PATH_MAX] = "";
    if (rsockets && !(old && preload_has(old, "librspreload.so"))) {
        int rc = find_rspreload(rsp, sizeof(rsp));
        if (rc) {
            fprintf(stderr,
                    "uiwarp run: --rsockets: rdma-core's librspreload.so not found (%s); "
                    "install librdmacm1 or set UIWARP_RSPRELOAD\n",
                    strerror(-rc));
            return 2;
        }
    }
    bool with_rsp = *rsp || (old && preload_has(old, "librspreload.so"));
    bool with_ours = old && preload_has(old, "libuiwarp-rspreload.so");
    const char *fs = getenv("RDMAV_FORK_SAFE");
    if (with_rsp && fs && *fs && strcmp(fs, "0") != 0) {
        /* rsockets' fork mode (rsocket(7)) moves an accepted TCP connection
         * to an rsocket listening on the same port as the program's TCP
         * listener: uiwarp's listeners are kernel TCP sockets, that bind
         * fails (EADDRINUSE) and the preload's client and server then wait
         * for each other for ever (docs/RSOCKETS.md) */
        fprintf(stderr, "uiwarp run: RDMAV_FORK_SAFE with librspreload.so: rsockets' fork mode "
                        "cannot work over uiwarp (its rsocket listener would need the port the "
                        "program's TCP listener holds, and the connection would hang); unset "
                        "RDMAV_FORK_SAFE\n");
        return 2;
    }
    if (!*rsp && (!with_rsp || with_ours))
        return 0; /* nothing to add */
    char ours[PATH_MAX + 32] = "";
    if (with_rsp && !with_ours)
        snprintf(ours, sizeof(ours), "%s/libuiwarp-rspreload.so", dir);
    size_t len = strlen(rsp) + (old ? strlen(old) : 0) + strlen(ours) + 3;
    char *val = malloc(len);
    if (!val)
        return 2;
    /* the user's list first: a preload given there keeps its place */
    snprintf(val, len, "%s%s%s%s%s", old && *old ? old : "", old && *old && *rsp ? ":" : "", rsp,
             *ours ? ":" : "", ours);
    setenv("LD_PRELOAD", val[0] == ':' ? val + 1 : val, 1);
    free(val);
    return 0;
}

int uiw_run_main(int argc, char **argv)
{
    bool rsockets = argc >= 2 && strcmp(argv[1], "--rsockets") == 0;
    if (rsockets) {
        argv++;
        argc--;
    }
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
    if (set_preload(dir, rsockets))
        return 2;
    execvp(argv[1], argv + 1);
    fprintf(stderr, "uiwarp run: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
