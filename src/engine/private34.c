/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * IBVERBS_PRIVATE_34: rdma-core 44's provider interface, exported because
 * Debian's programs load providers' "direct verbs" libraries: perftest
 * (ib_*_bw/lat, raw_ethernet_*) links libmlx5.so.1 and libefa.so.1, which
 * are linked with BIND_NOW, so every one of their IBVERBS_PRIVATE_34
 * imports must resolve when they are loaded (and their constructors call
 * verbs_register_driver_34); rdma-core's ibv_devinfo imports
 * ibv_query_gid_type itself.
 *
 * No rdma-core provider ever drives a device here: the devices are
 * uiwarp's, so none of this is reached for one (libmlx5's mlx5dv_* calls
 * check the device's provider first). Registration is ignored; the kernel
 * command wrappers (ibv_cmd_*, execute_ioctl: there is no uverbs device)
 * fail with EOPNOTSUPP; creating a provider context fails with NULL and
 * errno EOPNOTSUPP; logging and ops-table setters do nothing. Only
 * ibv_query_gid_type is a real implementation.
 *
 * The prototypes are rdma-core's (libibverbs/driver.h, not installed),
 * with its private structs as opaque pointers.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>

#include "engine.h"

/* Kernel command wrappers, all "int f(...)" returning 0 or an errno;
 * their arguments are never looked at. */
#define CMD_STUB(name)                                                                             \
    int name(void);                                                                                \
    int name(void)                                                                                 \
    {                                                                                              \
        uiw_dbg(1, "%s: rdma-core provider interface, not available", #name);                      \
        return EOPNOTSUPP;                                                                         \
    }

CMD_STUB(ibv_cmd_advise_mr)
CMD_STUB(ibv_cmd_alloc_dm)
CMD_STUB(ibv_cmd_alloc_mw)
CMD_STUB(ibv_cmd_alloc_pd)
CMD_STUB(ibv_cmd_attach_mcast)
CMD_STUB(ibv_cmd_close_xrcd)
CMD_STUB(ibv_cmd_create_ah)
CMD_STUB(ibv_cmd_create_counters)
CMD_STUB(ibv_cmd_create_cq)
CMD_STUB(ibv_cmd_create_cq_ex)
CMD_STUB(ibv_cmd_create_flow)
CMD_STUB(ibv_cmd_create_flow_action_esp)
CMD_STUB(ibv_cmd_create_qp)
CMD_STUB(ibv_cmd_create_qp_ex)
CMD_STUB(ibv_cmd_create_qp_ex2)
CMD_STUB(ibv_cmd_create_rwq_ind_table)
CMD_STUB(ibv_cmd_create_srq)
CMD_STUB(ibv_cmd_create_srq_ex)
CMD_STUB(ibv_cmd_create_wq)
CMD_STUB(ibv_cmd_dealloc_mw)
CMD_STUB(ibv_cmd_dealloc_pd)
CMD_STUB(ibv_cmd_dereg_mr)
CMD_STUB(ibv_cmd_destroy_ah)
CMD_STUB(ibv_cmd_destroy_counters)
CMD_STUB(ibv_cmd_destroy_cq)
CMD_STUB(ibv_cmd_destroy_flow)
CMD_STUB(ibv_cmd_destroy_flow_action)
CMD_STUB(ibv_cmd_destroy_qp)
CMD_STUB(ibv_cmd_destroy_rwq_ind_table)
CMD_STUB(ibv_cmd_destroy_srq)
CMD_STUB(ibv_cmd_destroy_wq)
CMD_STUB(ibv_cmd_detach_mcast)
CMD_STUB(ibv_cmd_free_dm)
CMD_STUB(ibv_cmd_get_context)
CMD_STUB(ibv_cmd_modify_cq)
CMD_STUB(ibv_cmd_modify_flow_action_esp)
CMD_STUB(ibv_cmd_modify_qp)
CMD_STUB(ibv_cmd_modify_qp_ex)
CMD_STUB(ibv_cmd_modify_srq)
CMD_STUB(ibv_cmd_modify_wq)
CMD_STUB(ibv_cmd_open_qp)
CMD_STUB(ibv_cmd_open_xrcd)
CMD_STUB(ibv_cmd_poll_cq)
CMD_STUB(ibv_cmd_post_recv)
CMD_STUB(ibv_cmd_post_send)
CMD_STUB(ibv_cmd_post_srq_recv)
CMD_STUB(ibv_cmd_query_context)
CMD_STUB(ibv_cmd_query_device_any)
CMD_STUB(ibv_cmd_query_mr)
CMD_STUB(ibv_cmd_query_port)
CMD_STUB(ibv_cmd_query_qp)
CMD_STUB(ibv_cmd_query_srq)
CMD_STUB(ibv_cmd_read_counters)
CMD_STUB(ibv_cmd_reg_dm_mr)
CMD_STUB(ibv_cmd_reg_dmabuf_mr)
CMD_STUB(ibv_cmd_reg_mr)
CMD_STUB(ibv_cmd_req_notify_cq)
CMD_STUB(ibv_cmd_rereg_mr)
CMD_STUB(ibv_cmd_resize_cq)
CMD_STUB(execute_ioctl)

struct verbs_device_ops;
struct verbs_context_ops;
struct verbs_sysfs_dev;
struct ibv_command_buffer;

void verbs_register_driver_34(const struct verbs_device_ops *ops);
void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops);
void verbs_uninit_context(struct verbs_context *context);
void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
                   void *cq_context);
struct verbs_context *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
                                                    size_t alloc_size,
                                                    struct verbs_context *context_offset,
                                                    uint32_t driver_id);
struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data);
void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...);
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link);
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
                              const char *fnfmt, ...);
enum uiw_gid_type_sysfs { UIW_GID_TYPE_SYSFS_IB_ROCE_V1, UIW_GID_TYPE_SYSFS_ROCE_V2 };
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                       enum uiw_gid_type_sysfs *type);

/* rdma-core: whether destroy verbs may succeed on a disassociated device
 * (providers read it) */
bool verbs_allow_disassociate_destroy;

/* A provider library's constructor registers its driver: nothing to do,
 * no provider is ever matched with a device. */
void verbs_register_driver_34(const struct verbs_device_ops *ops)
{
    (void)ops;
}

void verbs_set_ops(struct verbs_context *vctx, const struct verbs_context_ops *ops)
{
    (void)vctx, (void)ops;
}

void verbs_uninit_context(struct verbs_context *context)
{
    (void)context;
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *context, struct ibv_comp_channel *channel,
                   void *cq_context)
{
    (void)cq, (void)context, (void)channel, (void)cq_context;
}

struct verbs_context *_verbs_init_and_alloc_context(struct ibv_device *device, int cmd_fd,
                                                    size_t alloc_size,
                                                    struct verbs_context *context_offset,
                                                    uint32_t driver_id)
{
    (void)device, (void)cmd_fd, (void)alloc_size, (void)context_offset, (void)driver_id;
    errno = EOPNOTSUPP;
    return NULL;
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
    (void)device, (void)private_data;
    errno = EOPNOTSUPP;
    return NULL;
}

void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
    (void)ctx, (void)level, (void)fmt;
}

/* Sizes an ioctl attribute buffer: the count as given, nothing linked. */
unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *link)
{
    (void)link;
    return num_attrs;
}

/* There is no /sys/class/infiniband device behind ours. */
int ibv_read_ibdev_sysfs_file(char *buf, size_t size, struct verbs_sysfs_dev *sysfs_dev,
                              const char *fnfmt, ...)
{
    (void)buf, (void)size, (void)sysfs_dev, (void)fnfmt;
    errno = ENOENT;
    return -1;
}

/* The sysfs-style GID type of a GID table entry: ours is an IB-type GID
 * (what the kernel reports for iWARP). An empty entry reads as IB/RoCE v1,
 * as in rdma-core. */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
                       enum uiw_gid_type_sysfs *type)
{
    struct ibv_gid_entry e;
    int ret;

    if (!type) {
        errno = EINVAL;
        return -1;
    }
    ret = _ibv_query_gid_ex(context, port_num, index, &e, 0, sizeof(e));
    if (ret == ENODATA) {
        *type = UIW_GID_TYPE_SYSFS_IB_ROCE_V1;
        return 0;
    }
    if (ret) {
        errno = ret;
        return -1;
    }
    *type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? UIW_GID_TYPE_SYSFS_ROCE_V2
                                               : UIW_GID_TYPE_SYSFS_IB_ROCE_V1;
    return 0;
}
