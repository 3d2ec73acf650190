/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Devices, contexts, queries and async events.
 *
 * One device per network interface that is up (loopback included), named
 * "uiw_<ifname>", as siw creates one per netdev (PEERS.md §1). Devices are
 * never freed: ibv_get_device_list rescans and reuses them by name, so a
 * pointer an application holds stays valid for the life of the process.
 *
 * The first device of the list is the one that serves loopback traffic
 * (127/8, ::1: src/rdmacm/dev.c attaches such connections to it), as the
 * kernel's rdma_cm binds a loopback connection to the first device with
 * an active port (cma_bind_loopback). It is the first non-loopback
 * interface that is running and has an IP address, else uiw_lo: libfabric's
 * verbs provider and other programs that list interfaces skip "lo", and a
 * connection to 127.0.0.1 must land on a device they know (docs/APPS.md).
 * The other devices follow in interface index order.
 *
 * Async events: a queue per context plus a pipe whose read end is
 * context->async_fd. The pipe holds exactly one byte while the queue is
 * non-empty, so poll() on async_fd works and a reader never blocks on a
 * byte another thread consumed. Per-object counts of delivered events let
 * the destroy verbs wait for ibv_ack_async_event as rdma-core does.
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "engine.h"
#include "iface/uiw_sys.h"

#undef ibv_query_port

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct uiw_device **devs; /* every device ever seen; never freed */
static unsigned ndevs, devs_cap;

/* ------------------------------------------------------------------------
 * Interfaces
 * ---------------------------------------------------------------------- */

struct if_info {
    unsigned flags;
    unsigned mtu;
    uint8_t mac[6];
    bool loopback;
    bool has_mac;
};

static int if_query(int sock, const char *ifname, struct if_info *info)
{
    struct ifreq ifr;

    memset(info, 0, sizeof(*info));
    memset(&ifr, 0, sizeof(ifr));
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
    if (ioctl(sock, SIOCGIFFLAGS, &ifr) < 0)
        return -errno;
    info->flags = (unsigned)(unsigned short)ifr.ifr_flags;
    info->loopback = (info->flags & IFF_LOOPBACK) != 0;
    if (ioctl(sock, SIOCGIFMTU, &ifr) == 0 && ifr.ifr_mtu > 0)
        info->mtu = (unsigned)ifr.ifr_mtu;
    else
        info->mtu = 1500;
    if (ioctl(sock, SIOCGIFHWADDR, &ifr) == 0) {
        unsigned fam = ifr.ifr_hwaddr.sa_family;

        if (fam == ARPHRD_LOOPBACK)
            info->loopback = true;
        if (fam == ARPHRD_ETHER || fam == ARPHRD_IEEE802) {
            memcpy(info->mac, ifr.ifr_hwaddr.sa_data, 6);
            static const uint8_t zero[6];
            info->has_mac = memcmp(info->mac, zero, 6) != 0;
        }
    }
    return 0;
}

static int if_socket(void)
{
    return uiw_kernel_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
}

/* EUI-64 from the MAC (flip the U/L bit, insert ff:fe), or, for loopback
 * and interfaces without a MAC, the interface name's bytes as siw does. */
static uint64_t make_guid(const char *ifname, const struct if_info *info)
{
    uint8_t b[8] = {0};

    if (info->has_mac && !info->loopback) {
        b[0] = info->mac[0] ^ 0x02;
        b[1] = info->mac[1];
        b[2] = info->mac[2];
        b[3] = 0xff;
        b[4] = 0xfe;
        b[5] = info->mac[3];
        b[6] = info->mac[4];
        b[7] = info->mac[5];
    } else {
        size_t n = strlen(ifname);

        memcpy(b, ifname, n < 8 ? n : 8);
    }
    uint64_t g = 0;
    for (int i = 0; i < 8; i++)
        g = g << 8 | b[i];
    return g;
}

static struct uiw_device *dev_find_locked(const char *ifname)
{
    for (unsigned i = 0; i < ndevs; i++)
        if (strcmp(devs[i]->ifname, ifname) == 0)
            return devs[i];
    return NULL;
}

static struct uiw_device *dev_add_locked(const char *ifname, unsigned ifindex,
                                         const struct if_info *info)
{
    struct uiw_device *d = dev_find_locked(ifname);

    if (!d) {
        struct uiw_device **n = uiw_room(devs, ndevs, &devs_cap, 8, sizeof(*n));

        if (!n)
            return NULL;
        devs = n;
        d = calloc(1, sizeof(*d));
        if (!d)
            return NULL;
        snprintf(d->ifname, sizeof(d->ifname), "%s", ifname);
        d->ibdev.node_type = IBV_NODE_RNIC;
        d->ibdev.transport_type = IBV_TRANSPORT_IWARP;
        /* "uiw_" + at most IFNAMSIZ-1 characters always fits in 64 */
        snprintf(d->ibdev.name, sizeof(d->ibdev.name), "uiw_%.*s", (int)(sizeof(d->ibdev.name) - 5),
                 ifname);
        snprintf(d->ibdev.dev_name, sizeof(d->ibdev.dev_name), "%s", d->ibdev.name);
        d->guid = make_guid(ifname, info);
        devs[ndevs++] = d;
    }
    d->ifindex = ifindex;
    memcpy(d->mac, info->mac, 6);
    d->mtu = info->mtu;
    d->loopback = info->loopback;
    return d;
}

/* Interfaces that have an IPv4 or IPv6 address: a bitmap by interface
 * index (indexes beyond it count as addressed: never a reason to skip). */
struct addressed {
    uint64_t bits[16];
};

static void addressed_scan(struct addressed *a)
{
    struct ifaddrs *ifa0 = NULL;

    memset(a, 0, sizeof(*a));
    if (getifaddrs(&ifa0) < 0)
        return;
    for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next) {
        unsigned idx;

        if (!ifa->ifa_addr ||
            (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6))
            continue;
        idx = if_nametoindex(ifa->ifa_name);
        if (idx && idx < 64 * 16)
            a->bits[idx / 64] |= 1ull << (idx % 64);
    }
    freeifaddrs(ifa0);
}

static bool addressed_has(const struct addressed *a, unsigned idx)
{
    return idx >= 64 * 16 || (a->bits[idx / 64] >> (idx % 64) & 1);
}

static bool is_our_device(struct ibv_device *ibdev)
{
    bool found = false;

    pthread_mutex_lock(&dev_lock);
    for (unsigned i = 0; i < ndevs && !found; i++)
        found = &devs[i]->ibdev == ibdev;
    pthread_mutex_unlock(&dev_lock);
    return found;
}

static struct uiw_device *to_udev(struct ibv_device *d)
{
    return (struct uiw_device *)d;
}

UIW_EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
    struct if_nameindex *names = NULL;
    struct ibv_device **list = NULL;
    unsigned n = 0, cap;
    int sock, err = 0;

    if (num_devices)
        *num_devices = 0;
    sock = if_socket();
    if (sock < 0)
        return NULL;
    names = if_nameindex();
    if (!names) {
        err = errno;
        close(sock);
        errno = err;
        return NULL;
    }
    for (cap = 0; names[cap].if_index; cap++)
        ;
    list = calloc(cap + 1, sizeof(*list));
    if (!list) {
        err = ENOMEM;
        goto out;
    }
    struct addressed addr;
    unsigned lo_serving = UINT_MAX; /* index in list of the loopback-serving device */

    addressed_scan(&addr);
    pthread_mutex_lock(&dev_lock);
    for (unsigned i = 0; i < cap; i++) {
        struct if_info info;
        struct uiw_device *d;

        if (if_query(sock, names[i].if_name, &info) < 0 || !(info.flags & IFF_UP))
            continue;
        d = dev_add_locked(names[i].if_name, names[i].if_index, &info);
        if (!d) {
            err = ENOMEM;
            break;
        }
        if (lo_serving == UINT_MAX && !info.loopback && (info.flags & IFF_RUNNING) &&
            addressed_has(&addr, names[i].if_index))
            lo_serving = n;
        list[n++] = &d->ibdev;
    }
    pthread_mutex_unlock(&dev_lock);
    if (!err && lo_serving != UINT_MAX && lo_serving > 0) {
        /* to the front; the others keep their order */
        struct ibv_device *first = list[lo_serving];

        memmove(&list[1], &list[0], lo_serving * sizeof(*list));
        list[0] = first;
    }
    if (err) {
        free(list);
        list = NULL;
    } else if (num_devices) {
        *num_devices = (int)n;
    }
out:
    if_freenameindex(names);
    close(sock);
    if (err)
        errno = err;
    return list;
}

UIW_EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

UIW_EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    if (!device) {
        errno = EINVAL;
        return NULL;
    }
    return device->name;
}

UIW_EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
    if (!device) {
        errno = EINVAL;
        return 0;
    }
    return htobe64(to_udev(device)->guid);
}

UIW_EXPORT int ibv_get_device_index(struct ibv_device *device)
{
    int idx;

    if (!device) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&dev_lock); /* a rescan may update it */
    idx = (int)to_udev(device)->ifindex;
    pthread_mutex_unlock(&dev_lock);
    return idx;
}

/* ------------------------------------------------------------------------
 * Context
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct uiw_context *ctx;
    int fds[2];

    if (!device || !is_our_device(device)) {
        errno = ENODEV;
        return NULL;
    }
    ctx = uiw_zalloc(sizeof(*ctx));
    if (!ctx)
        return NULL;
    if (pipe2(fds, O_CLOEXEC) < 0) {
        int e = errno;

        free(ctx);
        errno = e;
        return NULL;
    }
    /* the write end never blocks: it holds at most one byte */
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ctx->dev = to_udev(device);
    ctx->async_wr_fd = fds[1];
    pthread_mutex_init(&ctx->async_lock, NULL);

    struct ibv_context *c = &ctx->vctx.context;
    c->device = device;
    c->cmd_fd = -1;
    c->async_fd = fds[0];
    c->num_comp_vectors = 1;
    pthread_mutex_init(&c->mutex, NULL);
    /* PEERS.md §10: what verbs_get_ctx() / verbs_get_ctx_op() check */
    c->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->vctx.sz = sizeof(struct verbs_context);
    uiw_verbs_init_ops(ctx);
    uiw_dbg(1, "opened %s", device->name);
    return c;
}

UIW_EXPORT int ibv_close_device(struct ibv_context *context)
{
    struct uiw_context *ctx;
    struct uiw_async_ev *e, *n;

    if (!context)
        return EINVAL;
    ctx = to_uctx(context);

    for (e = ctx->async_head; e; e = n) {
        n = e->next;
        free(e);
    }
    close(context->async_fd);
    close(ctx->async_wr_fd);
    pthread_mutex_destroy(&ctx->async_lock);
    pthread_mutex_destroy(&context->mutex);
    free(ctx);
    return 0;
}

/* ------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------- */

static void fill_device_attr(struct uiw_context *ctx, struct ibv_device_attr *a)
{
    struct uiw_device *d = ctx->dev;
    long page = sysconf(_SC_PAGESIZE);

    /* what is not named is 0: vendor_part_id, hw_ver, local_ca_ack_delay */
    *a = (struct ibv_device_attr){
        .node_guid = htobe64(d->guid),
        .sys_image_guid = htobe64(d->guid),
        .max_mr_size = UINT64_MAX, /* any range that does not wrap */
        .page_size_cap = page > 0 ? (uint64_t)page : 4096,
        .vendor_id = UIW_VENDOR_ID,
        .max_qp = UIW_MAX_QP,
        .max_qp_wr = UIW_MAX_QP_WR,
        /* cur_qp_state is honoured by ibv_modify_qp; SRQs can be resized */
        .device_cap_flags = IBV_DEVICE_CURR_QP_STATE_MOD | IBV_DEVICE_SRQ_RESIZE |
                            IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B,
        .max_mw = UIW_MAX_MR, /* windows share the STag table with regions */
        .max_sge = UIW_MAX_SGE,
        .max_sge_rd = UIW_MAX_SGE_RD,
        .max_cq = UIW_MAX_CQ,
        .max_cqe = UIW_MAX_CQE,
        .max_mr = UIW_MAX_MR,
        .max_pd = UIW_MAX_PD,
        .max_qp_rd_atom = UIW_MAX_ORD,
        .max_qp_init_rd_atom = UIW_MAX_IRD,
        .max_res_rd_atom = UIW_MAX_QP * UIW_MAX_IRD,
        .atomic_cap = IBV_ATOMIC_HCA, /* RFC 7306 atomics, __atomic on the target word */
        .max_srq = UIW_MAX_SRQ,
        .max_srq_wr = UIW_MAX_SRQ_WR,
        .max_srq_sge = UIW_MAX_SGE,
        .max_pkeys = 1,
        .phys_port_cnt = 1,
    };
    snprintf(a->fw_ver, sizeof(a->fw_ver), "uiwarp 0.1");
}

UIW_EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr)
{
    if (!context || !attr)
        return EINVAL;
    fill_device_attr(to_uctx(context), attr);
    return 0;
}

int uiw_op_query_device_ex(struct ibv_context *c, const struct ibv_query_device_ex_input *in,
                           struct ibv_device_attr_ex *attr, size_t attr_size)
{
    struct ibv_device_attr_ex ex;

    if (in && in->comp_mask)
        return EINVAL;
    if (!attr || attr_size < sizeof(attr->orig_attr))
        return EINVAL;
    memset(&ex, 0, sizeof(ex));
    fill_device_attr(to_uctx(c), &ex.orig_attr);
    /* the extended flags repeat the basic ones (their low 32 bits); no
     * ODP, timestamps, TSO, RSS, packet pacing, TM, CQ moderation, DM */
    ex.device_cap_flags_ex = ex.orig_attr.device_cap_flags;
    ex.phys_port_cnt_ex = 1;
    memset(attr, 0, attr_size); /* a caller's larger (newer) struct too */
    memcpy(attr, &ex, attr_size < sizeof(ex) ? attr_size : sizeof(ex));
    return 0;
}

static enum ibv_mtu mtu_enum(unsigned mtu)
{
    if (mtu >= 4096)
        return IBV_MTU_4096;
    if (mtu >= 2048)
        return IBV_MTU_2048;
    if (mtu >= 1024)
        return IBV_MTU_1024;
    if (mtu >= 512)
        return IBV_MTU_512;
    return IBV_MTU_256;
}

/* Link speed in IB terms from the Ethernet speed (Mb/s), as the kernel
 * reports Ethernet-based RDMA ports. Unknown (loopback): 10G. */
static void eth_speed(const char *ifname, uint8_t *width, uint8_t *speed)
{
    char path[128];
    long mbps = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
    f = fopen(path, "re");
    if (f) {
        if (fscanf(f, "%ld", &mbps) != 1)
            mbps = -1;
        fclose(f);
    }
    if (mbps <= 0)
        mbps = 10000;
    /* width: 1 = 1X, 2 = 4X; speed: 1 SDR, 2 DDR, 8 FDR10, 32 EDR, 64 HDR, 128 NDR */
    if (mbps <= 2500) {
        *width = 1, *speed = 1;
    } else if (mbps <= 10000) {
        *width = 1, *speed = 8;
    } else if (mbps <= 20000) {
        *width = 2, *speed = 2;
    } else if (mbps <= 25000) {
        *width = 1, *speed = 32;
    } else if (mbps <= 40000) {
        *width = 2, *speed = 8;
    } else if (mbps <= 50000) {
        *width = 1, *speed = 64;
    } else if (mbps <= 100000) {
        *width = 2, *speed = 32;
    } else if (mbps <= 200000) {
        *width = 2, *speed = 64;
    } else {
        *width = 2, *speed = 128;
    }
}

static int fill_port_attr(struct uiw_context *ctx, uint8_t port, struct ibv_port_attr *a)
{
    struct uiw_device *d = ctx->dev;
    struct if_info info;
    bool up = false;
    int sock;

    if (port != 1)
        return EINVAL;
    sock = if_socket();
    if (sock >= 0) {
        if (if_query(sock, d->ifname, &info) == 0) {
            up = (info.flags & IFF_UP) && (info.flags & IFF_RUNNING);
            pthread_mutex_lock(&dev_lock);
            d->mtu = info.mtu;
            if (info.has_mac)
                memcpy(d->mac, info.mac, 6);
            pthread_mutex_unlock(&dev_lock);
        }
        close(sock);
    }
    pthread_mutex_lock(&dev_lock);
    enum ibv_mtu active_mtu = mtu_enum(d->mtu);
    pthread_mutex_unlock(&dev_lock);
    /* what is not named is 0: lid, sm_lid, lmc, init_type_reply */
    *a = (struct ibv_port_attr){
        .state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN,
        .max_mtu = IBV_MTU_4096,
        .active_mtu = active_mtu,
        .gid_tbl_len = 1,
        .port_cap_flags = IBV_PORT_CM_SUP,
        .max_msg_sz = (uint32_t)UIW_MAX_MSG_SIZE,
        .pkey_tbl_len = 1,
        .max_vl_num = 1,
        .phys_state = up ? 5 /* LinkUp */ : 3 /* Disabled */,
        .link_layer = IBV_LINK_LAYER_ETHERNET,
    };
    eth_speed(d->ifname, &a->active_width, &a->active_speed);
    return 0;
}

int uiw_op_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *attr,
                      size_t attr_size)
{
    struct ibv_port_attr pa;
    int ret;

    if (!c || !attr)
        return EINVAL;
    ret = fill_port_attr(to_uctx(c), port, &pa);
    if (ret)
        return ret;
    memcpy(attr, &pa, attr_size < sizeof(pa) ? attr_size : sizeof(pa));
    return 0;
}

/* The exported symbol takes rdma-core's older struct, which ends before
 * port_cap_flags2. */
UIW_EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port_num,
                              struct _compat_ibv_port_attr *port_attr)
{
    return uiw_op_query_port(context, port_num, (struct ibv_port_attr *)port_attr,
                             offsetof(struct ibv_port_attr, port_cap_flags2));
}

static void fill_gid(struct uiw_context *ctx, union ibv_gid *gid)
{
    memset(gid, 0, sizeof(*gid));
    pthread_mutex_lock(&dev_lock);
    memcpy(gid->raw, ctx->dev->mac, 6); /* as siw: the MAC, rest zero */
    pthread_mutex_unlock(&dev_lock);
}

UIW_EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index,
                             union ibv_gid *gid)
{
    if (!context || port_num != 1 || index != 0 || !gid) {
        errno = EINVAL;
        return -1;
    }
    fill_gid(to_uctx(context), gid);
    return 0;
}

static void fill_gid_entry(struct uiw_context *ctx, struct ibv_gid_entry *e, size_t size)
{
    struct ibv_gid_entry full;

    memset(&full, 0, sizeof(full));
    fill_gid(ctx, &full.gid);
    full.gid_index = 0;
    full.port_num = 1;
    full.gid_type = IBV_GID_TYPE_IB; /* what the kernel reports for iWARP */
    pthread_mutex_lock(&dev_lock);
    full.ndev_ifindex = ctx->dev->ifindex;
    pthread_mutex_unlock(&dev_lock);
    memcpy(e, &full, size < sizeof(full) ? size : sizeof(full));
}

UIW_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
                                 struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
    if (!context || flags || !entry || entry_size < offsetof(struct ibv_gid_entry, gid_type))
        return EINVAL;
    if (port_num != 1 || gid_index != 0)
        return ENODATA;
    fill_gid_entry(to_uctx(context), entry, entry_size);
    return 0;
}

UIW_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries,
                                        size_t max_entries, uint32_t flags, size_t entry_size)
{
    if (!context || flags || !entries || entry_size < offsetof(struct ibv_gid_entry, gid_type))
        return -EINVAL;
    if (max_entries < 1)
        return -EINVAL;
    fill_gid_entry(to_uctx(context), entries, entry_size);
    return 1;
}

UIW_EXPORT int ibv_query_pkey(struct ibv_context *context, uint8_t port_num, int index,
                              __be16 *pkey)
{
    (void)context;
    if (port_num != 1 || index != 0 || !pkey) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xffff); /* the default P_Key, as siw */
    return 0;
}

UIW_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
    (void)context;
    if (port_num == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
        return 0;
    errno = EINVAL;
    return -1;
}

/* ------------------------------------------------------------------------
 * Async events
 * ---------------------------------------------------------------------- */

enum uiw_ev_obj uiw_event_obj(enum ibv_event_type t)
{
    switch (t) {
    case IBV_EVENT_CQ_ERR:
        return UIW_EV_CQ;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return UIW_EV_QP;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return UIW_EV_SRQ;
    case IBV_EVENT_WQ_FATAL:
        return UIW_EV_WQ;
    default:
        return UIW_EV_NONE;
    }
}

static const void *event_ptr(const struct ibv_async_event *ev)
{
    switch (uiw_event_obj(ev->event_type)) {
    case UIW_EV_QP:
        return ev->element.qp;
    case UIW_EV_CQ:
        return ev->element.cq;
    case UIW_EV_SRQ:
        return ev->element.srq;
    case UIW_EV_WQ:
        return ev->element.wq;
    default:
        return NULL;
    }
}

/* async_lock held. The pipe carries one byte while the queue is non-empty. */
static void async_signal_locked(struct uiw_context *ctx)
{
    static const char one = 1;
    ssize_t w = write(ctx->async_wr_fd, &one, 1);
    (void)w;
}

static void async_unsignal_locked(struct uiw_context *ctx)
{
    char b;
    ssize_t r = read(ctx->vctx.context.async_fd, &b, 1); /* present: no wait */
    (void)r;
}

void uiw_async_event(struct uiw_context *ctx, enum ibv_event_type type, void *obj)
{
    struct uiw_async_ev *e = calloc(1, sizeof(*e));

    if (!e) {
        uiw_log("async event %s lost: out of memory", ibv_event_type_str(type));
        return;
    }
    e->ev.event_type = type;
    switch (uiw_event_obj(type)) {
    case UIW_EV_QP:
        e->ev.element.qp = obj;
        break;
    case UIW_EV_CQ:
        e->ev.element.cq = obj;
        break;
    case UIW_EV_SRQ:
        e->ev.element.srq = obj;
        break;
    case UIW_EV_WQ:
        e->ev.element.wq = obj;
        break;
    default:
        e->ev.element.port_num = obj ? (int)(uintptr_t)obj : 1;
        break;
    }
    uiw_dbg(1, "async event %s", ibv_event_type_str(type));
    pthread_mutex_lock(&ctx->async_lock);
    if (ctx->async_tail)
        ctx->async_tail->next = e;
    else
        ctx->async_head = e;
    ctx->async_tail = e;
    if (ctx->async_head == e)
        async_signal_locked(ctx);
    pthread_mutex_unlock(&ctx->async_lock);
}

void uiw_async_purge(struct uiw_context *ctx, const void *obj)
{
    struct uiw_async_ev **pp, *e, *prev = NULL;
    bool had;

    pthread_mutex_lock(&ctx->async_lock);
    had = ctx->async_head != NULL;
    for (pp = &ctx->async_head; (e = *pp);) {
        if (event_ptr(&e->ev) == obj) {
            *pp = e->next;
            free(e);
        } else {
            prev = e;
            pp = &e->next;
        }
    }
    ctx->async_tail = prev;
    if (had && !ctx->async_head)
        async_unsignal_locked(ctx);
    pthread_mutex_unlock(&ctx->async_lock);
}

void uiw_async_settle(struct uiw_context *ctx, const void *obj, const uint32_t *reported,
                      pthread_mutex_t *mutex, pthread_cond_t *cond, const uint32_t *completed)
{
    uint32_t n;

    uiw_async_purge(ctx, obj);
    pthread_mutex_lock(&ctx->async_lock);
    n = *reported;
    pthread_mutex_unlock(&ctx->async_lock);
    pthread_mutex_lock(mutex);
    while (*completed != n)
        pthread_cond_wait(cond, mutex);
    pthread_mutex_unlock(mutex);
}

/* One more async event acked on rdma-core's mutex, cond and count. */
static void async_ack_one(pthread_mutex_t *mutex, pthread_cond_t *cond, uint32_t *completed)
{
    pthread_mutex_lock(mutex);
    (*completed)++;
    pthread_cond_broadcast(cond);
    pthread_mutex_unlock(mutex);
}

/* Wait until fd is readable, unless it is non-blocking: then EAGAIN. */
static int wait_readable(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl >= 0 && (fl & O_NONBLOCK)) {
        errno = EAGAIN;
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0 && errno != EINTR)
        return -1;
    return 0;
}

UIW_EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event)
{
    struct uiw_context *ctx;

    if (!context || !event) {
        errno = EINVAL;
        return -1;
    }
    ctx = to_uctx(context);

    for (;;) {
        struct uiw_async_ev *e;

        pthread_mutex_lock(&ctx->async_lock);
        e = ctx->async_head;
        if (e) {
            ctx->async_head = e->next;
            if (!ctx->async_head) {
                ctx->async_tail = NULL;
                async_unsignal_locked(ctx);
            }
            *event = e->ev;
            switch (uiw_event_obj(e->ev.event_type)) {
            case UIW_EV_QP:
                to_uqp(e->ev.element.qp)->async_reported++;
                break;
            case UIW_EV_CQ:
                to_ucq(e->ev.element.cq)->async_reported++;
                break;
            case UIW_EV_SRQ:
                to_usrq(e->ev.element.srq)->async_reported++;
                break;
            default:
                break;
            }
            pthread_mutex_unlock(&ctx->async_lock);
            free(e);
            return 0;
        }
        pthread_mutex_unlock(&ctx->async_lock);
        if (wait_readable(context->async_fd) < 0)
            return -1;
    }
}

UIW_EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    if (!event)
        return;
    switch (uiw_event_obj(event->event_type)) {
    case UIW_EV_QP: {
        struct ibv_qp *qp = event->element.qp;
        async_ack_one(&qp->mutex, &qp->cond, &qp->events_completed);
        break;
    }
    case UIW_EV_CQ: {
        struct ibv_cq *cq = event->element.cq;
        async_ack_one(&cq->mutex, &cq->cond, &cq->async_events_completed);
        break;
    }
    case UIW_EV_SRQ: {
        struct ibv_srq *srq = event->element.srq;
        async_ack_one(&srq->mutex, &srq->cond, &srq->events_completed);
        break;
    }
    default:
        break;
    }
}
