/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp_ibv_probe: what scripts/kernel.sh test runs in the VM against
 * the module's device through rdma-core's libibverbs and the provider
 * plugin (libuiwarp-rdmav34.so). docs/KERNEL.md "Seen by rdma-core".
 *
 *   uiwarp_ibv_probe DEV        open DEV, query the device and port 1,
 *                               then verbs the provider does not offer
 *                               (ibv_alloc_pd, ibv_create_cq) must fail
 *                               with EOPNOTSUPP; exit 0 when all is so
 *   uiwarp_ibv_probe DEV hold F open DEV, create the file F, then query
 *                               port 1 every 0.1 s until that fails (the
 *                               device removed under the open context:
 *                               disassociated, EIO expected) or 60 s
 *                               pass; close; exit 0 on EIO
 * One line per step on stdout ("probe: ...").
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

static struct ibv_context *open_dev(const char *name)
{
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = NULL;
    int found = 0;

    if (!list) {
        printf("probe: ibv_get_device_list: %s\n", strerror(errno));
        return NULL;
    }
    for (struct ibv_device **d = list; *d; d++) {
        if (strcmp(ibv_get_device_name(*d), name) == 0) {
            found = 1;
            ctx = ibv_open_device(*d);
            if (!ctx)
                printf("probe: ibv_open_device %s: %s\n", name, strerror(errno));
            break;
        }
    }
    if (!found)
        printf("probe: no device %s in rdma-core's list\n", name);
    ibv_free_device_list(list);
    return ctx;
}

/* the verb must fail with EOPNOTSUPP; 1 when it does */
static int expect_eopnotsupp(const char *what, void *obj)
{
    int e = errno;

    if (obj) {
        printf("probe: %s succeeded; the provider offers no such verb\n", what);
        return 0;
    }
    printf("probe: %s: errno %d (%s)\n", what, e, strerror(e));
    return e == EOPNOTSUPP;
}

static int probe(struct ibv_context *ctx)
{
    struct ibv_device_attr_ex dev;
    struct ibv_port_attr port;
    int ok = 1, rc;

    rc = ibv_query_device_ex(ctx, NULL, &dev);
    if (rc) {
        printf("probe: ibv_query_device_ex: %s\n", strerror(rc));
        ok = 0;
    } else {
        printf("probe: device max_qp %d max_cqe %d max_mr %d atomic_cap %d\n", dev.orig_attr.max_qp,
               dev.orig_attr.max_cqe, dev.orig_attr.max_mr, (int)dev.orig_attr.atomic_cap);
    }
    rc = ibv_query_port(ctx, 1, &port);
    if (rc) {
        printf("probe: ibv_query_port: %s\n", strerror(rc));
        ok = 0;
    } else {
        printf("probe: port 1 %s\n", ibv_port_state_str(port.state));
    }
    errno = 0;
    ok &= expect_eopnotsupp("ibv_alloc_pd", ibv_alloc_pd(ctx));
    errno = 0;
    ok &= expect_eopnotsupp("ibv_create_cq", ibv_create_cq(ctx, 16, NULL, NULL, 0));
    return ok;
}

static int hold(struct ibv_context *ctx, const char *file)
{
    struct timespec tick = {.tv_nsec = 100 * 1000 * 1000};
    struct ibv_port_attr port;
    FILE *f = fopen(file, "w");
    int rc = 0;

    if (!f) {
        printf("probe: %s: %s\n", file, strerror(errno));
        return 0;
    }
    fclose(f);
    printf("probe: holding the device open\n");
    fflush(stdout);
    for (int i = 0; i < 600 && rc == 0; i++) {
        nanosleep(&tick, NULL);
        rc = ibv_query_port(ctx, 1, &port);
    }
    if (rc == 0) {
        printf("probe: the device is still there after 60 s\n");
        return 0;
    }
    printf("probe: after the removal: ibv_query_port: errno %d (%s)\n", rc, strerror(rc));
    return rc == EIO;
}

int main(int argc, char **argv)
{
    struct ibv_context *ctx;
    int ok;

    if (argc != 2 && !(argc == 4 && strcmp(argv[2], "hold") == 0)) {
        fprintf(stderr, "usage: uiwarp_ibv_probe DEV [hold FILE]\n");
        return 2;
    }
    ctx = open_dev(argv[1]);
    if (!ctx)
        return 1;
    ok = argc == 4 ? hold(ctx, argv[3]) : probe(ctx);
    if (ibv_close_device(ctx)) {
        printf("probe: ibv_close_device: %s\n", strerror(errno));
        ok = 0;
    }
    printf("probe: %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
