/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Devices: an IP address maps to the interface that owns it, and the
 * interface to the uiwarp device "uiw_<ifname>" (src/engine/device.c).
 * Loopback addresses (127/8, ::1) map to the first device of
 * ibv_get_device_list, the one the engine puts there to serve loopback, as
 * the kernel's rdma_cm binds a loopback connection to its first active
 * device (cma_bind_loopback); binding an id to a loopback address attaches
 * no device, as binding to the wildcard (the kernel's cma_any_addr counts
 * loopback as "any"). docs/APPS.md explains why libfabric needs both.
 * Each device is opened once per process and its context kept, with a
 * default PD, as rdma-core does for the devices its ids use; every id on
 * the device shares that ibv_context.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdmacm_int.h"
#include "uiw_sys.h"

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rcm_dev *devs;

/* ------------------------------------------------------------------------
 * Address helpers
 * ---------------------------------------------------------------------- */

socklen_t rcm_sa_len(const struct sockaddr *sa)
{
    switch (sa->sa_family) {
    case AF_INET:
        return sizeof(struct sockaddr_in);
    case AF_INET6:
        return sizeof(struct sockaddr_in6);
    default:
        return 0;
    }
}

socklen_t rcm_sa_copy(struct sockaddr_storage *ss, const struct sockaddr *sa)
{
    socklen_t len = rcm_sa_len(sa);

    memset(ss, 0, sizeof(*ss));
    memcpy(ss, sa, len);
    return len;
}

bool rcm_sa_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

bool rcm_sa_is_any(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
    if (sa->sa_family == AF_INET6)
        return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
    return false;
}

void rcm_sa_unmap(struct sockaddr_storage *ss)
{
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
        return;
    struct sockaddr_in s4;
    memset(&s4, 0, sizeof(s4));
    s4.sin_family = AF_INET;
    s4.sin_port = s6->sin6_port;
    memcpy(&s4.sin_addr, &s6->sin6_addr.s6_addr[12], 4);
    memset(ss, 0, sizeof(*ss));
    memcpy(ss, &s4, sizeof(s4));
}

uint16_t rcm_sa_port(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return ((const struct sockaddr_in *)sa)->sin_port;
    if (sa->sa_family == AF_INET6)
        return ((const struct sockaddr_in6 *)sa)->sin6_port;
    return 0;
}

void rcm_sa_set_port(struct sockaddr *sa, uint16_t port_be)
{
    if (sa->sa_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = port_be;
    else if (sa->sa_family == AF_INET6)
        ((struct sockaddr_in6 *)sa)->sin6_port = port_be;
}

/* The last few answers of rcm_route_src, each used for ROUTE_FRESH_MS (as
 * the device cache below): a client opening thousands of connections to
 * one server asks the same question each time, and the UDP socket, its
 * connect (the route lookup), getsockname and close were 4 of the ~20
 * system calls of the client's thread per connection (docs/PERFORMANCE.md,
 * 2026-11-27 (setup)). A route that changes is seen within that time.
 * Under route_cache_lock. */
#define ROUTE_CACHE    8
#define ROUTE_FRESH_MS 1000
static pthread_mutex_t route_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    struct sockaddr_storage dst, src; /* ports zeroed; dst.ss_family 0: empty */
    uint64_t at_ms;
} route_cache[ROUTE_CACHE];
static unsigned route_cache_next;

static void sa_key(const struct sockaddr *sa, struct sockaddr_storage *k)
{
    memset(k, 0, sizeof(*k));
    socklen_t len = rcm_sa_len(sa);
    if (len && len <= sizeof(*k))
        memcpy(k, sa, len);
    if (k->ss_family == AF_INET)
        ((struct sockaddr_in *)k)->sin_port = 0;
    else if (k->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)k)->sin6_port = 0;
}

static bool route_cached(const struct sockaddr_storage *k, uint64_t now,
                         struct sockaddr_storage *src)
{
    bool hit = false;
    pthread_mutex_lock(&route_cache_lock);
    for (unsigned i = 0; i < ROUTE_CACHE && !hit; i++) {
        if (route_cache[i].dst.ss_family && now - route_cache[i].at_ms <= ROUTE_FRESH_MS &&
            memcmp(&route_cache[i].dst, k, sizeof(*k)) == 0) {
            *src = route_cache[i].src;
            hit = true;
        }
    }
    pthread_mutex_unlock(&route_cache_lock);
    return hit;
}

static void route_remember(const struct sockaddr_storage *k, uint64_t now,
                           const struct sockaddr_storage *src)
{
    pthread_mutex_lock(&route_cache_lock);
    unsigned i = 0;
    while (i < ROUTE_CACHE && memcmp(&route_cache[i].dst, k, sizeof(*k)) != 0)
        i++;
    if (i == ROUTE_CACHE)
        i = route_cache_next++ % ROUTE_CACHE;
    route_cache[i].dst = *k;
    route_cache[i].src = *src;
    route_cache[i].at_ms = now;
    pthread_mutex_unlock(&route_cache_lock);
}

int rcm_route_src(const struct sockaddr *dst, struct sockaddr_storage *src)
{
    struct sockaddr_storage d, k;
    socklen_t len = rcm_sa_copy(&d, dst);
    uint64_t now = rcm_now_ms();
    if (!len)
        return -EAFNOSUPPORT;
    sa_key(dst, &k);
    if (route_cached(&k, now, src))
        return 0;
    /* A UDP connect only looks the route up; the port does not matter but
     * must not be 0 for every kernel. */
    if (!rcm_sa_port((struct sockaddr *)&d))
        rcm_sa_set_port((struct sockaddr *)&d, htons(9));
    int fd = uiw_kernel_socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    int rc = 0;
    socklen_t sl = sizeof(*src);
    memset(src, 0, sizeof(*src));
    if (connect(fd, (struct sockaddr *)&d, len) < 0 ||
        getsockname(fd, (struct sockaddr *)src, &sl) < 0)
        rc = -errno;
    close(fd);
    if (rc == 0) {
        rcm_sa_set_port((struct sockaddr *)src, 0);
        route_remember(&k, now, src);
    }
    return rc;
}

/* The interface owning a local address (127/8 belongs to the loopback
 * interface as a whole, as Linux routes it). */
static int addr_ifname(const struct sockaddr *sa_in, char *ifname, size_t n)
{
    struct sockaddr_storage ss;
    if (!rcm_sa_copy(&ss, sa_in))
        return -EAFNOSUPPORT;
    rcm_sa_unmap(&ss);
    const struct sockaddr *sa = (const struct sockaddr *)&ss;

    struct ifaddrs *ifa0 = NULL;
    if (getifaddrs(&ifa0) < 0)
        return -errno;
    int rc = -EADDRNOTAVAIL;
    for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next) {
        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != sa->sa_family)
            continue;
        bool match = false;
        if (sa->sa_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
            const struct sockaddr_in *b = (const struct sockaddr_in *)ifa->ifa_addr;
            match = a->sin_addr.s_addr == b->sin_addr.s_addr ||
                    ((ifa->ifa_flags & IFF_LOOPBACK) && (ntohl(a->sin_addr.s_addr) >> 24) == 127);
        } else {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
            const struct sockaddr_in6 *b = (const struct sockaddr_in6 *)ifa->ifa_addr;
            match = IN6_ARE_ADDR_EQUAL(&a->sin6_addr, &b->sin6_addr);
            if (match && IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr) && a->sin6_scope_id &&
                a->sin6_scope_id != b->sin6_scope_id)
                match = false;
        }
        if (match) {
            snprintf(ifname, n, "%s", ifa->ifa_name);
            rc = 0;
            break;
        }
    }
    freeifaddrs(ifa0);
    return rc;
}

/* ------------------------------------------------------------------------
 * Devices
 * ---------------------------------------------------------------------- */

/* dev_lock held. */
static struct rcm_dev *dev_get_locked(struct ibv_device *ibdev, int *err)
{
    for (struct rcm_dev *d = devs; d; d = d->next)
        if (d->ibdev == ibdev)
            return d;
    struct rcm_dev *d = calloc(1, sizeof(*d));
    if (!d) {
        *err = -ENOMEM;
        return NULL;
    }
    d->ibdev = ibdev;
    d->verbs = ibv_open_device(ibdev);
    if (!d->verbs) {
        *err = errno ? -errno : -ENODEV;
        free(d);
        return NULL;
    }
    struct ibv_device_attr attr;
    memset(&attr, 0, sizeof(attr));
    int qrc = ibv_query_device(d->verbs, &attr);
    if (qrc) {
        *err = -qrc;
        ibv_close_device(d->verbs);
        free(d);
        return NULL;
    }
    d->max_resp_res = (uint8_t)(attr.max_qp_rd_atom > 0xFE ? 0xFE : attr.max_qp_rd_atom);
    d->max_init_depth =
        (uint8_t)(attr.max_qp_init_rd_atom > 0xFE ? 0xFE : attr.max_qp_init_rd_atom);
    (void)ibv_query_gid(d->verbs, 1, 0, &d->gid);
    d->pd = ibv_alloc_pd(d->verbs);
    if (!d->pd) {
        *err = errno ? -errno : -ENOMEM;
        ibv_close_device(d->verbs);
        free(d);
        return NULL;
    }
    d->next = devs;
    devs = d;
    return d;
}

static int dev_by_name(const char *name, struct rcm_dev **out)
{
    /* Devices opened already (uiwarp never frees a device, so the
     * pointer and its name stay valid): no rescan of the interfaces. */
    pthread_mutex_lock(&dev_lock);
    for (struct rcm_dev *d = devs; d; d = d->next) {
        if (strcmp(ibv_get_device_name(d->ibdev), name) == 0) {
            *out = d;
            pthread_mutex_unlock(&dev_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&dev_lock);

    int n = 0, rc = -ENODEV;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return errno ? -errno : -ENODEV;
    pthread_mutex_lock(&dev_lock);
    for (int i = 0; i < n; i++) {
        if (strcmp(ibv_get_device_name(list[i]), name) != 0)
            continue;
        *out = dev_get_locked(list[i], &rc);
        if (*out)
            rc = 0;
        break;
    }
    pthread_mutex_unlock(&dev_lock);
    ibv_free_device_list(list);
    return rc;
}

/* The device serving loopback: the first one listed. */
static int dev_loopback(struct rcm_dev **out)
{
    int n = 0, rc = -ENODEV;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list)
        return errno ? -errno : -ENODEV;
    if (n > 0) {
        pthread_mutex_lock(&dev_lock);
        *out = dev_get_locked(list[0], &rc);
        if (*out)
            rc = 0;
        pthread_mutex_unlock(&dev_lock);
    }
    ibv_free_device_list(list);
    return rc;
}

/* The last addresses resolved. An answer younger than ADDR_FRESH_MS is
 * used as it is: the interface scan (a netlink dump of every interface and
 * address, an ioctl per interface) cost more CPU than the rest of a
 * connection's setup, and every connection's both sides resolve (its
 * source, its local address at the listener); interfaces that change are
 * seen within that time. Older answers are used only when resolving again
 * fails for want of a resource (the scan needs a descriptor: a server at
 * its descriptor limit would otherwise drop every incoming connection).
 * Devices are never freed, so the pointers stay valid. Under dev_lock. */
#define ADDR_CACHE    16
#define ADDR_FRESH_MS 1000
static struct {
    struct sockaddr_storage addr; /* ss_family 0: empty; port zeroed */
    struct rcm_dev *dev;
    uint64_t at_ms;
} addr_cache[ADDR_CACHE];
static unsigned addr_cache_next;
static struct rcm_dev *loopback_cache;
static uint64_t loopback_at_ms;

static void addr_key(const struct sockaddr *sa, struct sockaddr_storage *k)
{
    sa_key(sa, k);
}

static bool resource_err(int rc)
{
    return rc == -EMFILE || rc == -ENFILE || rc == -ENOMEM || rc == -ENOBUFS;
}

static int dev_for_addr_scan(const struct sockaddr *sa, struct rcm_dev **out)
{
    char ifname[IF_NAMESIZE + 1], name[IF_NAMESIZE + 8];
    if (rcm_sa_is_loopback(sa))
        return dev_loopback(out);
    int rc = addr_ifname(sa, ifname, sizeof(ifname));
    if (rc < 0)
        return rc;
    snprintf(name, sizeof(name), "uiw_%s", ifname);
    return dev_by_name(name, out);
}

/* A cached answer for sa (key k) at most max_age_ms old, or NULL. dev_lock held. */
static struct rcm_dev *cached_locked(bool lo, const struct sockaddr_storage *k, uint64_t now,
                                     uint64_t max_age_ms)
{
    if (lo)
        return loopback_cache && now - loopback_at_ms <= max_age_ms ? loopback_cache : NULL;
    for (unsigned i = 0; i < ADDR_CACHE; i++)
        if (addr_cache[i].dev && memcmp(&addr_cache[i].addr, k, sizeof(*k)) == 0 &&
            now - addr_cache[i].at_ms <= max_age_ms)
            return addr_cache[i].dev;
    return NULL;
}

int rcm_dev_for_addr(const struct sockaddr *sa, struct rcm_dev **out)
{
    bool lo = rcm_sa_is_loopback(sa);
    struct sockaddr_storage k;
    uint64_t now = rcm_now_ms();
    struct rcm_dev *fresh;

    addr_key(sa, &k);
    pthread_mutex_lock(&dev_lock);
    fresh = cached_locked(lo, &k, now, ADDR_FRESH_MS);
    pthread_mutex_unlock(&dev_lock);
    if (fresh) {
        *out = fresh;
        return 0;
    }

    int rc = dev_for_addr_scan(sa, out);

    pthread_mutex_lock(&dev_lock);
    if (rc == 0) {
        if (lo) {
            loopback_cache = *out;
            loopback_at_ms = now;
        } else {
            bool have = false;
            for (unsigned i = 0; i < ADDR_CACHE && !have; i++)
                if (memcmp(&addr_cache[i].addr, &k, sizeof(k)) == 0) {
                    addr_cache[i].dev = *out;
                    addr_cache[i].at_ms = now;
                    have = true;
                }
            if (!have) {
                addr_cache[addr_cache_next].addr = k;
                addr_cache[addr_cache_next].dev = *out;
                addr_cache[addr_cache_next].at_ms = now;
                addr_cache_next = (addr_cache_next + 1) % ADDR_CACHE;
            }
        }
    } else if (resource_err(rc)) {
        struct rcm_dev *d = cached_locked(lo, &k, now, UINT64_MAX);
        if (d) {
            *out = d;
            rc = 0;
        }
    }
    pthread_mutex_unlock(&dev_lock);
    return rc;
}

struct rcm_dev *rcm_dev_of_verbs(const struct ibv_context *verbs)
{
    struct rcm_dev *r = NULL;
    pthread_mutex_lock(&dev_lock);
    for (struct rcm_dev *d = devs; d && !r; d = d->next)
        if (d->verbs == verbs)
            r = d;
    pthread_mutex_unlock(&dev_lock);
    return r;
}

UIW_EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (num_devices)
        *num_devices = 0;
    if (!list)
        return NULL;
    struct ibv_context **out = calloc((size_t)n + 1, sizeof(*out));
    if (!out) {
        ibv_free_device_list(list);
        errno = ENOMEM;
        return NULL;
    }
    int k = 0, err = 0;
    pthread_mutex_lock(&dev_lock);
    for (int i = 0; i < n; i++) {
        struct rcm_dev *d = dev_get_locked(list[i], &err);
        if (d)
            out[k++] = d->verbs;
    }
    pthread_mutex_unlock(&dev_lock);
    ibv_free_device_list(list);
    if (num_devices)
        *num_devices = k;
    return out;
}

UIW_EXPORT void rdma_free_devices(struct ibv_context **list)
{
    free(list); /* the contexts stay open for the process, as rdma-core's */
}
