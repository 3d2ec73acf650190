/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The iWARP ib_device, attached to a network interface the way siw is:
 *   rdma link add uiw0 type uiwarp netdev eth0
 *   rdma link delete uiw0
 * (rdma_link_ops, "rdma-link-uiwarp"); removed too when the interface goes
 * away. This file: the device, its one port (events on the interface's
 * up/carrier changes) and its queries; the verbs objects (PD, CQ, QP, MR)
 * are in uiw_verbs.c (docs/KERNEL.md).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <net/addrconf.h>
#include <rdma/ib_verbs.h>
#include <rdma/iw_cm.h>
#include <rdma/rdma_netlink.h>

#include "uiw_dev.h"
#include "uiw_kmod.h"
#include "uiw_uabi.h"
#include "uiwarp/wire.h"

static LIST_HEAD(uiw_devs);
static DEFINE_MUTEX(uiw_devs_lock);

static int uiw_query_device(struct ib_device *ibdev, struct ib_device_attr *a,
                            struct ib_udata *udata)
{
    struct uiw_dev *d = to_udev(ibdev);

    if (udata && (udata->inlen || udata->outlen))
        return -EINVAL;
    memset(a, 0, sizeof(*a));
    /* What uiw_verbs.c enforces. No memory windows. */
    a->max_mr_size = ~0ull;
    a->page_size_cap = PAGE_SIZE;
    a->vendor_id = 0;
    a->max_qp = UIW_MAX_QP;
    a->max_qp_wr = UIW_MAX_QP_WR;
    a->max_send_sge = UIW_MAX_SGE;
    a->max_recv_sge = UIW_MAX_SGE;
    a->max_sge_rd = UIW_MAX_SGE;
    a->max_cq = UIW_MAX_CQ;
    a->max_cqe = UIW_MAX_CQE;
    a->max_mr = UIW_MAX_MR;
    a->max_pd = UIW_MAX_PD;
    a->max_srq = UIW_MAX_SRQ;
    a->max_srq_wr = UIW_MAX_SRQ_WR;
    a->max_srq_sge = UIW_MAX_SGE;
    /* RFC 6581 §9.1 IRD/ORD, the wire core's defaults (siw's limit 128);
     * modify_qp checks against them; the CM will negotiate them */
    a->max_qp_rd_atom = UIW_MPA_DEFAULT_IRD;
    a->max_qp_init_rd_atom = UIW_MPA_DEFAULT_ORD;
    a->max_res_rd_atom = a->max_qp * a->max_qp_rd_atom;
    /* RFC 7306 atomics, executed with the CPU's 64-bit compare-and-swap
     * on the target word: atomic against other QPs and the CPUs */
    a->atomic_cap = IB_ATOMIC_HCA;
    /* Fast Register and Local Invalidate (IB_WR_REG_MR, IB_WR_LOCAL_INV) */
    a->device_cap_flags = IB_DEVICE_MEM_MGT_EXTENSIONS | IB_DEVICE_SRQ_RESIZE;
    a->max_fast_reg_page_list_len = UIW_MAX_FR_PAGES;
    a->max_pkeys = 1;
    /* rdma link delete may remove it (the core refuses otherwise) */
    a->kernel_cap_flags = IBK_ALLOW_USER_UNREG;
    addrconf_addr_eui48((u8 *)&a->sys_image_guid, d->netdev->dev_addr);
    return 0;
}

/* The port is ACTIVE while the interface is up with a carrier: iWARP's
 * LLP is TCP over it (RFC 5044 §1), and nothing else gates it. */
static bool uiw_netdev_up(struct net_device *nd)
{
    return netif_running(nd) && netif_carrier_ok(nd);
}

static int uiw_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *a)
{
    struct net_device *nd = to_udev(ibdev)->netdev;
    bool up = uiw_netdev_up(nd);
    int rc;

    memset(a, 0, sizeof(*a));
    rc = ib_get_eth_speed(ibdev, port, &a->active_speed, &a->active_width);
    if (rc)
        return rc;
    a->state = up ? IB_PORT_ACTIVE : IB_PORT_DOWN;
    a->phys_state = up ? IB_PORT_PHYS_STATE_LINK_UP : IB_PORT_PHYS_STATE_DISABLED;
    a->max_mtu = ib_mtu_int_to_enum(nd->mtu);
    a->active_mtu = a->max_mtu;
    a->gid_tbl_len = 1;
    a->pkey_tbl_len = 1;
    /* RFC 5041 §5.2: a message's length fits 32 bits */
    a->max_msg_sz = 0x80000000u;
    a->port_cap_flags = IB_PORT_CM_SUP | IB_PORT_DEVICE_MGMT_SUP;
    return 0;
}

static int uiw_get_port_immutable(struct ib_device *ibdev, u32 port, struct ib_port_immutable *im)
{
    im->core_cap_flags = RDMA_CORE_PORT_IWARP;
    im->gid_tbl_len = 1;
    im->pkey_tbl_len = 1;
    return 0;
}

/* iWARP has no GID table: the one GID is the interface's MAC address. */
static int uiw_query_gid(struct ib_device *ibdev, u32 port, int idx, union ib_gid *gid)
{
    struct net_device *nd = to_udev(ibdev)->netdev;

    memset(gid, 0, sizeof(*gid));
    memcpy(gid->raw, nd->dev_addr, min_t(unsigned int, nd->addr_len, sizeof(gid->raw)));
    return 0;
}

static int uiw_query_pkey(struct ib_device *ibdev, u32 port, u16 idx, u16 *pkey)
{
    *pkey = 0xffff; /* the default partition; iWARP has none */
    return 0;
}

/* The uverbs user context (docs/KERNEL.md "Seen by rdma-core"): with
 * alloc_ucontext among its ops the core's ib_uverbs gives the device a
 * character device (/dev/infiniband/uverbsN), which rdma-core's device
 * list requires. Nothing else is offered to userspace: every verb that
 * would make an object from it (alloc_pd, create_cq, create_qp,
 * create_srq, reg_user_mr) refuses a udata with -EOPNOTSUPP, so a context
 * owns no objects and maps nothing. The queries (query_device,
 * query_port, the GID table) answer as for the kernel's consumers. */
struct uiw_ucontext {
    struct ib_ucontext base;
};

static int uiw_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata)
{
    /* no driver data either way: the provider's GET_CONTEXT carries the
     * core's command only (kernel/provider/uiwarp_provider.c) */
    if (udata->inlen || udata->outlen)
        return -EINVAL;
    return 0;
}

static void uiw_dealloc_ucontext(struct ib_ucontext *uctx) {}

/* Device removal (rdma link delete, the interface going away, rmmod)
 * while a process holds the uverbs file open: with this op the core
 * destroys the process's objects (none here) and its context and goes on
 * removing; the process's later commands fail with EIO. Without it the
 * core would wait for the file to be closed (and hold the module). There
 * is nothing mapped into the process to take back. */
static void uiw_disassociate_ucontext(struct ib_ucontext *uctx) {}

/* Called by the core from ib_dealloc_device: after an unregistration,
 * whoever asked for it (rdma link delete, the interface going away, module
 * unload), and when newlink gives up; the core frees the struct after. */
static void uiw_dealloc_driver(struct ib_device *ibdev)
{
    struct uiw_dev *d = to_udev(ibdev);

    mutex_lock(&uiw_devs_lock);
    list_del_init(&d->list); /* on the list or not (newlink's errors) */
    mutex_unlock(&uiw_devs_lock);
    uiw_verbs_dev_fini(d);
}

static const struct ib_device_ops uiw_dev_ops = {
    .owner = THIS_MODULE,
    .driver_id = RDMA_DRIVER_UNKNOWN,
    /* the uverbs ABI of the device's driver data: none (version 1; the
     * provider accepts 1 only) */
    .uverbs_abi_ver = UIW_UVERBS_ABI_VERSION,
    .dealloc_driver = uiw_dealloc_driver,
    .alloc_ucontext = uiw_alloc_ucontext,
    .dealloc_ucontext = uiw_dealloc_ucontext,
    .disassociate_ucontext = uiw_disassociate_ucontext,
    .query_device = uiw_query_device,
    .query_port = uiw_query_port,
    .get_port_immutable = uiw_get_port_immutable,
    .query_gid = uiw_query_gid,
    .query_pkey = uiw_query_pkey,
    INIT_RDMA_OBJ_SIZE(ib_ucontext, uiw_ucontext, base),
};

static int uiw_newlink(const char *name, struct net_device *nd)
{
    struct ib_device *other;
    struct uiw_dev *d;
    int rc;

    other = ib_device_get_by_netdev(nd, RDMA_DRIVER_UNKNOWN);
    if (other) {
        bool ours = other->ops.dealloc_driver == uiw_dealloc_driver;

        ib_device_put(other);
        if (ours)
            return -EEXIST;
    }
    d = ib_alloc_device(uiw_dev, ibdev);
    if (!d)
        return -ENOMEM;
    d->netdev = nd;
    d->port_active = uiw_netdev_up(nd);
    INIT_LIST_HEAD(&d->list);
    uiw_verbs_dev_init(d);
    ib_set_device_ops(&d->ibdev, &uiw_dev_ops);
    ib_set_device_ops(&d->ibdev, &uiw_verbs_ops);
    ib_set_device_ops(&d->ibdev, &uiw_cm_ops);
    d->ibdev.node_type = RDMA_NODE_RNIC;
    d->ibdev.phys_port_cnt = 1;
    /* one completion vector per CPU, as siw reports: nvme-rdma makes
     * min(CPUs, vectors) I/O queues. Completions are delivered from the
     * unbound workqueue and the socket callbacks whatever the vector. */
    d->ibdev.num_comp_vectors = num_possible_cpus();
    strscpy(d->ibdev.node_desc, UIW_NODE_DESC, sizeof(d->ibdev.node_desc));
    addrconf_addr_eui48((u8 *)&d->ibdev.node_guid, nd->dev_addr);
    /* iw_cm: the interface's name; no iwpmd port mapping */
    memcpy(d->ibdev.iw_ifname, nd->name, sizeof(d->ibdev.iw_ifname));
    d->ibdev.iw_driver_flags = IW_F_NO_PORT_MAP;
    rc = ib_device_set_netdev(&d->ibdev, nd, 1);
    if (rc)
        goto err;
    mutex_lock(&uiw_devs_lock);
    list_add_tail(&d->list, &uiw_devs);
    mutex_unlock(&uiw_devs_lock);
    /* NULL DMA device: the core uses kernel virtual addresses, as for the
     * other software devices */
    rc = ib_register_device(&d->ibdev, name, NULL);
    if (rc)
        goto err;
    pr_info("%s: iWARP device on %s\n", dev_name(&d->ibdev.dev), nd->name);
    return 0;
err:
    pr_err("rdma link add %s on %s: %d\n", name, nd->name, rc);
    ib_dealloc_device(&d->ibdev); /* calls uiw_dealloc_driver */
    return rc;
}

static struct rdma_link_ops uiw_link_ops = {
    .type = "uiwarp",
    .newlink = uiw_newlink,
};

/* The interface went up or down, or its carrier changed: tell the
 * consumers (ib_register_event_handler) once per change of the port's
 * state, as query_port reports it. Notifiers run under RTNL, so
 * port_active needs no lock of its own. */
static void uiw_port_event(struct uiw_dev *d)
{
    bool up = uiw_netdev_up(d->netdev);
    struct ib_event ev = {
        .device = &d->ibdev,
        .element.port_num = 1,
        .event = up ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR,
    };

    if (up == d->port_active)
        return;
    d->port_active = up;
    pr_info("%s: port 1 %s (%s)\n", dev_name(&d->ibdev.dev), up ? "ACTIVE" : "DOWN",
            d->netdev->name);
    ib_dispatch_event(&ev);
}

/* Carrier and up/down changes become port events. The interface under a
 * device going away removes the device first (the core holds the
 * interface until then; ib_device_set_netdev); from the notifier the
 * removal is queued. */
/* Set at module unload: unregister_netdevice_notifier replays DOWN and
 * UNREGISTER for every interface to the notifier it removes, which would
 * report the ports DOWN and every interface "going away"; uiw_dev_exit
 * removes the devices itself. */
static bool uiw_exiting;

static int uiw_netdev_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
    struct net_device *nd = netdev_notifier_info_to_dev(ptr);
    struct ib_device *ib;

    if (READ_ONCE(uiw_exiting))
        return NOTIFY_DONE;
    switch (event) {
    case NETDEV_UP:
    case NETDEV_DOWN:
    case NETDEV_CHANGE: /* carrier on/off */
    case NETDEV_UNREGISTER:
        break;
    default:
        return NOTIFY_DONE;
    }
    ib = ib_device_get_by_netdev(nd, RDMA_DRIVER_UNKNOWN);
    if (!ib)
        return NOTIFY_DONE;
    if (ib->ops.dealloc_driver != uiw_dealloc_driver) {
        ib_device_put(ib);
        return NOTIFY_DONE;
    }
    if (event == NETDEV_UNREGISTER) {
        pr_info("%s: %s is going away\n", dev_name(&ib->dev), nd->name);
        ib_unregister_device_queued(ib);
    } else {
        uiw_port_event(to_udev(ib));
    }
    ib_device_put(ib);
    return NOTIFY_OK;
}

static struct notifier_block uiw_netdev_nb = {
    .notifier_call = uiw_netdev_event,
};

int uiw_dev_init(void)
{
    int rc = register_netdevice_notifier(&uiw_netdev_nb);

    if (rc)
        return rc;
    rdma_link_register(&uiw_link_ops);
    return 0;
}

/* Unregister every device left (module unload), after no new one can come
 * (rdma_link_unregister waits for a newlink in progress). The device's
 * struct is pinned while it is on the list; ib_unregister_device on one
 * that someone else is removing (rdma link delete, the notifier's queued
 * work) waits for that removal, dealloc_driver included. */
void uiw_dev_exit(void)
{
    rdma_link_unregister(&uiw_link_ops);
    WRITE_ONCE(uiw_exiting, true);
    unregister_netdevice_notifier(&uiw_netdev_nb);
    for (;;) {
        struct uiw_dev *d;

        mutex_lock(&uiw_devs_lock);
        d = list_first_entry_or_null(&uiw_devs, struct uiw_dev, list);
        if (d)
            get_device(&d->ibdev.dev);
        mutex_unlock(&uiw_devs_lock);
        if (!d)
            break;
        ib_unregister_device(&d->ibdev);
        put_device(&d->ibdev.dev);
    }
}

MODULE_ALIAS_RDMA_LINK("uiwarp");
