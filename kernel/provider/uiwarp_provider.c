/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libuiwarp-rdmav34.so: an rdma-core provider plugin for the kernel
 * module's devices (uiw0, ...), so that rdma-core's device list
 * (ibv_get_device_list, ibv_devices) shows them and ibv_devinfo can query
 * them. docs/KERNEL.md "Seen by rdma-core".
 *
 * It offers the queries only: query_device_ex and query_port through the
 * kernel's standard uverbs commands (ibv_cmd_*), and free_context. Every
 * other verb stays libibverbs' default, which fails with EOPNOTSUPP (the
 * module refuses userspace objects too; the userspace data path is
 * uiwarp's own library).
 *
 * rdma-core's provider interface (libibverbs/driver.h) is private and not
 * installed by Debian's libibverbs-dev, so the few structures a provider
 * shares with libibverbs are declared here, for one version: rdma-core 44
 * (Debian 12, libibverbs.so.1.14.44.0), private ABI IBVERBS_PRIVATE_34
 * (the "34" in the file name and in verbs_register_driver_34). The
 * layouts below were checked against that library's code (the offsets
 * verbs_set_ops reads and the ones it writes into struct verbs_context,
 * the offset of ibdev_path that ibv_read_ibdev_sysfs_file reads) and are
 * pinned by the static_asserts. Another private ABI needs another build:
 * libibverbs loads only files named -rdmav<PABI>.so, and the linker binds
 * the functions below to the IBVERBS_PRIVATE_34 version node.
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <infiniband/verbs.h>
#include <rdma/ib_user_verbs.h>

#include "../uiw_uabi.h"

/* ------------------------------------------------------------------------
 * rdma-core 44's private provider ABI (IBVERBS_PRIVATE_34), as much as a
 * query-only provider touches
 * ---------------------------------------------------------------------- */

struct uiwp_list_node { /* ccan/list.h's struct list_node */
    struct uiwp_list_node *next, *prev;
};

/* One device libibverbs found (sysfs and netlink): what match_device is
 * given. Only driver_id is read here (and the structure is
 * handed back to ibv_read_ibdev_sysfs_file). */
struct uiwp_sysfs_dev {
    struct uiwp_list_node entry;
    void *provider_data;
    const void *match; /* const struct verbs_match_ent * */
    unsigned int flags;
    char sysfs_name[IBV_SYSFS_NAME_MAX];
    dev_t sysfs_cdev;
    char ibdev_name[IBV_SYSFS_NAME_MAX];
    char ibdev_path[IBV_SYSFS_PATH_MAX];
    char modalias[512];
    uint64_t node_guid;
    uint32_t driver_id;
    enum ibv_node_type node_type;
    int ibdev_idx;
    uint32_t abi_ver;
    struct timespec time_created;
};
/* in 44.0: ibv_read_ibdev_sysfs_file reads ibdev_path at 0xb0; the
 * device list writes and match_driver_id reads driver_id at 0x3b8 */
static_assert(offsetof(struct uiwp_sysfs_dev, ibdev_path) == 176, "rdma-core 44 verbs_sysfs_dev");
static_assert(offsetof(struct uiwp_sysfs_dev, driver_id) == 952, "rdma-core 44 verbs_sysfs_dev");

struct uiwp_verbs_device;

struct uiwp_device_ops { /* struct verbs_device_ops */
    const char *name;
    uint32_t match_min_abi_version;
    uint32_t match_max_abi_version;
    const void *match_table; /* const struct verbs_match_ent * */
    const struct uiwp_device_ops **static_providers;
    bool (*match_device)(struct uiwp_sysfs_dev *sysfs_dev);
    struct verbs_context *(*alloc_context)(struct ibv_device *device, int cmd_fd,
                                           void *private_data);
    struct verbs_context *(*import_context)(struct ibv_device *device, int cmd_fd);
    struct uiwp_verbs_device *(*alloc_device)(struct uiwp_sysfs_dev *sysfs_dev);
    void (*uninit_device)(struct uiwp_verbs_device *device);
};
/* try_driver calls alloc_device at 0x38, uninit_device at 0x40 */
static_assert(offsetof(struct uiwp_device_ops, alloc_device) == 0x38, "rdma-core 44");
static_assert(offsetof(struct uiwp_device_ops, uninit_device) == 0x40, "rdma-core 44");

struct uiwp_verbs_device {    /* struct verbs_device; libibverbs fills it */
    struct ibv_device device; /* first */
    const struct uiwp_device_ops *ops;
    atomic_int refcount;
    struct uiwp_list_node entry;
    struct uiwp_sysfs_dev *sysfs;
    uint64_t core_support;
};

/* struct verbs_context_ops of 44: every op a provider may supply, sorted
 * by name, 76 pointers; verbs_set_ops copies the non-NULL ones. Only the
 * ones set here have their prototypes; the rest are placeholders of the
 * same size. */
typedef void (*uiwp_op)(void);
struct uiwp_context_ops {
    uiwp_op advise_mr, alloc_dm, alloc_mw, alloc_null_mr, alloc_parent_domain, alloc_pd, alloc_td,
        async_event, attach_counters_point_flow, attach_mcast, bind_mw, close_xrcd, cq_event,
        create_ah, create_counters, create_cq, create_cq_ex, create_flow, create_flow_action_esp,
        create_qp, create_qp_ex, create_rwq_ind_table, create_srq, create_srq_ex, create_wq,
        dealloc_mw, dealloc_pd, dealloc_td, dereg_mr, destroy_ah, destroy_counters, destroy_cq,
        destroy_flow, destroy_flow_action, destroy_qp, destroy_rwq_ind_table, destroy_srq,
        destroy_wq, detach_mcast;
    void (*free_context)(struct ibv_context *context);
    uiwp_op free_dm, get_srq_num, import_dm, import_mr, import_pd, modify_cq,
        modify_flow_action_esp, modify_qp, modify_qp_rate_limit, modify_srq, modify_wq, open_qp,
        open_xrcd, poll_cq, post_recv, post_send, post_srq_ops, post_srq_recv;
    int (*query_device_ex)(struct ibv_context *context,
                           const struct ibv_query_device_ex_input *input,
                           struct ibv_device_attr_ex *attr, size_t attr_size);
    uiwp_op query_ece;
    int (*query_port)(struct ibv_context *context, uint8_t port_num,
                      struct ibv_port_attr *port_attr);
    uiwp_op query_qp, query_qp_data_in_order, query_rt_values, query_srq, read_counters, reg_dm_mr,
        reg_dmabuf_mr, reg_mr, req_notify_cq, rereg_mr, resize_cq, set_ece, unimport_dm,
        unimport_mr, unimport_pd;
};
/* verbs_set_ops of 44 reads offsets 0 to 600; query_device_ex (0x1d0)
 * goes to verbs_context's query_device_ex, poll_cq (0x1a8) to
 * context.ops.poll_cq */
static_assert(sizeof(struct uiwp_context_ops) == 76 * sizeof(void *), "rdma-core 44");
static_assert(offsetof(struct uiwp_context_ops, free_context) == 39 * 8, "rdma-core 44");
static_assert(offsetof(struct uiwp_context_ops, poll_cq) == 0x1a8, "rdma-core 44");
static_assert(offsetof(struct uiwp_context_ops, query_device_ex) == 0x1d0, "rdma-core 44");
static_assert(offsetof(struct uiwp_context_ops, query_port) == 0x1e0, "rdma-core 44");

/* The commands with their uverbs header, as rdma-core's kern-abi.h makes
 * them (struct ibv_get_context, struct ibv_query_port): the header, then
 * the kernel's command structure; no driver data follows. */
struct uiwp_get_context_cmd {
    struct ib_uverbs_cmd_hdr hdr;
    struct ib_uverbs_get_context core;
};
struct uiwp_query_port_cmd {
    struct ib_uverbs_cmd_hdr hdr;
    struct ib_uverbs_query_port core;
};
static_assert(sizeof(struct uiwp_get_context_cmd) == 16, "uverbs GET_CONTEXT");
static_assert(sizeof(struct uiwp_query_port_cmd) == 24, "uverbs QUERY_PORT");

/* libibverbs.so.1's provider functions, version IBVERBS_PRIVATE_34 */
void verbs_register_driver_34(const struct uiwp_device_ops *ops);
void *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd, size_t alloc_size,
                                    struct verbs_context *context_offset, uint32_t driver_id);
void verbs_uninit_context(struct verbs_context *context);
void verbs_set_ops(struct verbs_context *vctx, const struct uiwp_context_ops *ops);
int ibv_cmd_get_context(struct verbs_context *context, struct uiwp_get_context_cmd *cmd,
                        size_t cmd_size, struct ib_uverbs_get_context_resp *resp, size_t resp_size);
int ibv_cmd_query_device_any(struct ibv_context *context,
                             const struct ibv_query_device_ex_input *input,
                             struct ibv_device_attr_ex *attr, size_t attr_size,
                             struct ib_uverbs_ex_query_device_resp *resp, size_t *resp_size);
int ibv_cmd_query_port(struct ibv_context *context, uint8_t port_num,
                       struct ibv_port_attr *port_attr, struct uiwp_query_port_cmd *cmd,
                       size_t cmd_size);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct uiwp_sysfs_dev *sysfs_dev,
                              const char *fnfmt, ...) __attribute__((format(printf, 4, 5)));

/* The kernel's enum rdma_driver_id: RDMA_DRIVER_UNKNOWN */
#define UIWP_DRIVER_UNKNOWN 0

/* ------------------------------------------------------------------------
 * The provider
 * ---------------------------------------------------------------------- */

struct uiwp_device {
    struct uiwp_verbs_device base;
};

struct uiwp_context {
    struct verbs_context base;
};

/* Ours: an iWARP node (RNIC) of unknown driver whose node_desc is the
 * module's (a device of any other driver has its driver id, or another
 * description). Read from sysfs: libibverbs has read the device's
 * abi_version and driver id before asking. */
static bool uiwp_sysfs_is(struct uiwp_sysfs_dev *sd, const char *file, const char *want)
{
    char buf[IBV_SYSFS_NAME_MAX];

    if (ibv_read_ibdev_sysfs_file(buf, sizeof(buf), sd, "%s", file) <= 0)
        return false;
    buf[strcspn(buf, "\n")] = '\0';
    return strcmp(buf, want) == 0;
}

static bool uiwp_match_device(struct uiwp_sysfs_dev *sd)
{
    return sd->driver_id == UIWP_DRIVER_UNKNOWN && uiwp_sysfs_is(sd, "node_type", "4: RNIC") &&
           uiwp_sysfs_is(sd, "node_desc", UIW_NODE_DESC);
}

static int uiwp_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
                                struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ib_uverbs_ex_query_device_resp resp;
    size_t resp_size = sizeof(resp);
    uint64_t fw;
    int rc;

    rc = ibv_cmd_query_device_any(ctx, in, attr, attr_size, &resp, &resp_size);
    if (rc)
        return rc;
    /* the kernel reports a 64-bit firmware version (the module's is 0);
     * the string is the provider's to make */
    fw = resp.base.fw_ver;
    snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver), "%u.%u.%u",
             (unsigned int)(fw >> 32), (unsigned int)(fw >> 16) & 0xffff,
             (unsigned int)fw & 0xffff);
    return 0;
}

static int uiwp_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    struct uiwp_query_port_cmd cmd;

    memset(&cmd, 0, sizeof(cmd));
    return ibv_cmd_query_port(ctx, port, attr, &cmd, sizeof(cmd));
}

static void uiwp_free_context(struct ibv_context *ibctx)
{
    struct uiwp_context *ctx =
        (struct uiwp_context *)((char *)ibctx - offsetof(struct uiwp_context, base.context));

    verbs_uninit_context(&ctx->base);
    free(ctx);
}

static const struct uiwp_context_ops uiwp_ctx_ops = {
    .free_context = uiwp_free_context,
    .query_device_ex = uiwp_query_device_ex,
    .query_port = uiwp_query_port,
};

static struct verbs_context *uiwp_alloc_context(struct ibv_device *ibdev, int cmd_fd,
                                                void *private_data)
{
    struct uiwp_get_context_cmd cmd;
    struct ib_uverbs_get_context_resp resp;
    struct uiwp_context *ctx;

    (void)private_data;
    ctx = _verbs_init_and_alloc_context(ibdev, cmd_fd, sizeof(*ctx),
                                        &((struct uiwp_context *)NULL)->base, UIWP_DRIVER_UNKNOWN);
    if (!ctx)
        return NULL;
    memset(&cmd, 0, sizeof(cmd));
    memset(&resp, 0, sizeof(resp));
    if (ibv_cmd_get_context(&ctx->base, &cmd, sizeof(cmd), &resp, sizeof(resp))) {
        int e = errno;

        verbs_uninit_context(&ctx->base);
        free(ctx);
        errno = e;
        return NULL;
    }
    verbs_set_ops(&ctx->base, &uiwp_ctx_ops);
    return &ctx->base;
}

static struct uiwp_verbs_device *uiwp_alloc_device(struct uiwp_sysfs_dev *sd)
{
    struct uiwp_device *d = calloc(1, sizeof(*d));

    (void)sd;
    return d ? &d->base : NULL;
}

static void uiwp_uninit_device(struct uiwp_verbs_device *vd)
{
    free((struct uiwp_device *)vd);
}

static const struct uiwp_device_ops uiwp_dev_ops = {
    .name = "uiwarp",
    .match_min_abi_version = UIW_UVERBS_ABI_VERSION,
    .match_max_abi_version = UIW_UVERBS_ABI_VERSION,
    .match_device = uiwp_match_device,
    .alloc_context = uiwp_alloc_context,
    .alloc_device = uiwp_alloc_device,
    .uninit_device = uiwp_uninit_device,
};

/* libibverbs dlopens the file named by /etc/libibverbs.d/uiwarp.driver;
 * registering is this constructor's call (rdma-core's PROVIDER_DRIVER). */
__attribute__((constructor)) static void uiwp_register(void)
{
    verbs_register_driver_34(&uiwp_dev_ops);
}
