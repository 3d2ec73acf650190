/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Protection domains, memory regions and the STag table.
 *
 * STag = 24-bit index << 8 | 8-bit key (RFC 5040 §2.1 leaves the split to
 * the implementation; siw uses the same). The MR objects live in a
 * two-level table of slots that are allocated once and never move or get
 * freed, so the receive path looks an STag up without a lock:
 *
 *   slot  = the table position, handed out in order (fresh slots first,
 *           then a FIFO of released slots once more than REUSE_DELAY are
 *           free, so an STag is reused as slowly as possible)
 *   index = P(slot), P a keyed permutation of the 24-bit space (a 4-round
 *           Feistel network keyed from getrandom at first use), so that
 *           consecutive registrations do not give guessable indexes
 *   key   = a random byte per registration
 *
 * RFC 5042 §6.1.1: "allocate STags in such a fashion that it is difficult
 * to predict the next allocated STag number, and also ensure that STags
 * are reused at as slow a rate as possible". The slot whose index would be
 * 0 is never used, so STag 0 and siw's RTR STag 1 never name an MR.
 *
 * Lookup protocol (uiw_mr_get): increment the slot's `users`, then check
 * `valid` and the STag; deregistration clears `valid`, then waits for
 * `users` to reach 0 (both sequentially consistent, so either the lookup
 * sees valid == false or the deregistration sees the user), and only then
 * returns the slot. Fields are written before `valid` is set (under
 * tab_lock) and read only after it was seen set.
 *
 * Zero-length accesses (RFC 5041 §5.2): "The STag and TO fields MUST NOT be
 * checked for a zero-length Tagged DDP Message." uiw_mr_get and uiw_sge_get
 * therefore accept len 0 with any STag (the P2P RTR is a zero-length Write
 * to STag 1) and return the sentinel uiw_mr_zero, which places nothing.
 *
 * Invalidation (uiw_stag_invalidate, for Send with Invalidate and Local
 * Invalidate): allowed on an MR of the same PD that has at least one
 * IBV_ACCESS_REMOTE_* right; an MR without one was never advertised, so a
 * request naming it is refused (-EINVAL: RFC 5040 "STag cannot be
 * Invalidated"). Invalidating an already invalid STag succeeds (siw does the
 * same). An invalidated MR stays registered until ibv_dereg_mr.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define CHUNK_BITS  10
#define CHUNK       (1u << CHUNK_BITS)
#define NCHUNKS     (UIW_MAX_MR / CHUNK)
#define REUSE_DELAY 4096u
#define NO_SLOT     UINT32_MAX

_Static_assert((UIW_MAX_MR & (UIW_MAX_MR - 1)) == 0 && UIW_MAX_MR >= CHUNK,
               "UIW_MAX_MR must be a power of two >= CHUNK");
_Static_assert(UIW_MAX_MR <= (1u << 24), "slots must fit the 24-bit index");

static _Atomic(struct uiw_mr *) chunks[NCHUNKS];
static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t fresh_next; /* next never-used slot */
static uint32_t free_head = NO_SLOT, free_tail = NO_SLOT, free_count;
static uint32_t perm_key[4];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

UIW_EXPORT struct uiw_mr uiw_mr_zero; /* zero-length accesses; never valid, never counted */

static atomic_int npds;

static void random_bytes(void *p, size_t n)
{
    uint8_t *b = p;

    while (n) {
        ssize_t r = getrandom(b, n, 0);

        if (r < 0) {
            if (errno == EINTR)
                continue;
            /* no getrandom: weaker, still varies per process and call */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() ^
                         (uint64_t)(uintptr_t)b;
            for (; n; n--, x = x * 6364136223846793005ull + 1442695040888963407ull)
                *b++ = (uint8_t)(x >> 56);
            return;
        }
        b += r;
        n -= (size_t)r;
    }
}

static void tab_init(void)
{
    random_bytes(perm_key, sizeof(perm_key));
}

/* Feistel round function on 12-bit halves. */
static uint32_t feistel_f(uint32_t r, uint32_t k)
{
    uint32_t x = r * 0x9E3779B1u + k;

    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x & 0xfff;
}

static uint32_t perm(uint32_t x)
{
    uint32_t l = x >> 12 & 0xfff, r = x & 0xfff;

    for (int i = 0; i < 4; i++) {
        uint32_t t = r;

        r = l ^ feistel_f(r, perm_key[i]);
        l = t;
    }
    return l << 12 | r;
}

static uint32_t unperm(uint32_t y)
{
    uint32_t l = y >> 12 & 0xfff, r = y & 0xfff;

    for (int i = 3; i >= 0; i--) {
        uint32_t t = l;

        l = r ^ feistel_f(l, perm_key[i]);
        r = t;
    }
    return l << 12 | r;
}

static struct uiw_mr *slot_mr(uint32_t slot)
{
    struct uiw_mr *c = atomic_load_explicit(&chunks[slot >> CHUNK_BITS], memory_order_acquire);

    return c ? &c[slot & (CHUNK - 1)] : NULL;
}

/* The slot an STag names, or NULL. */
static struct uiw_mr *stag_slot(uint32_t stag)
{
    uint32_t idx = stag >> 8, slot;

    if (idx == 0)
        return NULL;
    pthread_once(&tab_once, tab_init);
    slot = unperm(idx);
    if (slot >= UIW_MAX_MR)
        return NULL;
    return slot_mr(slot);
}

/* tab_lock held. */
static int slot_alloc_locked(uint32_t *out)
{
    if (free_count > REUSE_DELAY || fresh_next >= UIW_MAX_MR) {
        if (!free_count)
            return -ENOMEM;
        uint32_t s = free_head;
        struct uiw_mr *mr = slot_mr(s);

        free_head = mr->free_next;
        if (free_head == NO_SLOT)
            free_tail = NO_SLOT;
        free_count--;
        *out = s;
        return 0;
    }
    for (;;) {
        uint32_t s = fresh_next;

        if (s >= UIW_MAX_MR)
            return free_count ? slot_alloc_locked(out) : -ENOMEM;
        if (!atomic_load_explicit(&chunks[s >> CHUNK_BITS], memory_order_relaxed)) {
            struct uiw_mr *c = calloc(CHUNK, sizeof(*c));

            if (!c)
                return -ENOMEM;
            atomic_store_explicit(&chunks[s >> CHUNK_BITS], c, memory_order_release);
        }
        fresh_next++;
        if (perm(s) == 0)
            continue; /* would give STags 0..255, among them 0 and 1 */
        *out = s;
        return 0;
    }
}

/* tab_lock held. */
static void slot_free_locked(uint32_t slot)
{
    struct uiw_mr *mr = slot_mr(slot);

    mr->free_next = NO_SLOT;
    if (free_tail == NO_SLOT)
        free_head = slot;
    else
        slot_mr(free_tail)->free_next = slot;
    free_tail = slot;
    free_count++;
}

/* ------------------------------------------------------------------------
 * Protection domains
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    static atomic_uint handles;
    struct uiw_pd *pd;

    if (!context) {
        errno = EINVAL;
        return NULL;
    }
    if (atomic_fetch_add(&npds, 1) >= UIW_MAX_PD) {
        atomic_fetch_sub(&npds, 1);
        errno = ENOMEM;
        return NULL;
    }
    pd = calloc(1, sizeof(*pd));
    if (!pd) {
        atomic_fetch_sub(&npds, 1);
        errno = ENOMEM;
        return NULL;
    }
    pd->ibpd.context = context;
    pd->ibpd.handle = atomic_fetch_add(&handles, 1);
    atomic_init(&pd->refs, 0);
    return &pd->ibpd;
}

UIW_EXPORT int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
    struct uiw_pd *pd = to_upd(ibpd);

    if (!pd)
        return EINVAL;
    if (atomic_load(&pd->refs) > 0)
        return EBUSY;
    free(pd);
    atomic_fetch_sub(&npds, 1);
    return 0;
}

/* ------------------------------------------------------------------------
 * Memory regions
 * ---------------------------------------------------------------------- */

#define SUPPORTED_ACCESS                                                                           \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)
#define REMOTE_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

/* The range must be mapped (the kernel's pinning fails with EFAULT
 * otherwise); checked with mincore, page by page in batches. Write
 * permission of the mapping is not checked. */
static int probe_range(const void *addr, size_t length)
{
    long pagesz = sysconf(_SC_PAGESIZE);
    unsigned char vec[4096];

    uintptr_t ps = pagesz > 0 ? (uintptr_t)pagesz : 4096;
    uintptr_t start = (uintptr_t)addr & ~(ps - 1);
    uintptr_t end = ((uintptr_t)addr + length - 1) | (ps - 1); /* last byte */

    for (uintptr_t p = start;;) {
        uintptr_t pages = (end - p) / ps + 1;
        if (pages > sizeof(vec))
            pages = sizeof(vec);
        if (mincore((void *)p, pages * ps, vec) < 0)
            return errno == ENOMEM ? -EFAULT : -errno;
        if (end - p < pages * ps)
            break;
        p += pages * ps;
    }
    return 0;
}

static struct ibv_mr *reg_mr(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
                             unsigned access)
{
    struct uiw_pd *pd = to_upd(ibpd);
    struct uiw_mr *mr;
    uint32_t slot;
    uint8_t key;
    int ret;

    access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE; /* optional: may be ignored */
    if (!ibpd || access & ~(unsigned)SUPPORTED_ACCESS) {
        errno = EINVAL;
        return NULL;
    }
    /* IB verbs: remote write or atomic access requires local write */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    /* the host range may not wrap; nor may iova + length (RFC 5041 §7.1
     * check 5 refuses any access whose TO + length wraps 64 bits) */
    if (length == 0 || (uintptr_t)addr + length - 1 < (uintptr_t)addr ||
        length > UINT64_MAX - iova) {
        errno = EINVAL;
        return NULL;
    }
    ret = probe_range(addr, length);
    if (ret) {
        errno = -ret;
        return NULL;
    }
    pthread_once(&tab_once, tab_init);
    random_bytes(&key, 1);

    pthread_mutex_lock(&tab_lock);
    ret = slot_alloc_locked(&slot);
    if (ret) {
        pthread_mutex_unlock(&tab_lock);
        errno = -ret;
        return NULL;
    }
    mr = slot_mr(slot);
    mr->stag = perm(slot) << 8 | key;
    memset(&mr->ibmr, 0, sizeof(mr->ibmr));
    mr->ibmr.context = ibpd->context;
    mr->ibmr.pd = ibpd;
    mr->ibmr.addr = addr;
    mr->ibmr.length = length;
    mr->ibmr.handle = slot;
    mr->ibmr.lkey = mr->stag;
    mr->ibmr.rkey = mr->stag;
    mr->pd = pd;
    mr->iova = iova;
    mr->base = addr;
    mr->length = length;
    mr->access = access;
    mr->free_next = NO_SLOT;
    atomic_fetch_add(&pd->refs, 1);
    atomic_store(&mr->valid, true); /* publishes the fields above */
    pthread_mutex_unlock(&tab_lock);
    uiw_dbg(2, "reg_mr stag 0x%08x addr %p len %zu access 0x%x", mr->stag, addr, length, access);
    return &mr->ibmr;
}

UIW_EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return reg_mr(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

UIW_EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length,
                                          uint64_t iova, int access)
{
    return reg_mr(pd, addr, length, iova, (unsigned)access);
}

UIW_EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                           uint64_t iova, unsigned int access)
{
    return reg_mr(pd, addr, length, iova, access);
}

/* Not supported yet: the old MR stays valid (IBV_REREG_MR_ERR_INPUT). */
UIW_EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                            size_t length, int access)
{
    (void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_INPUT;
}

static void wait_no_users(struct uiw_mr *mr)
{
    for (unsigned i = 0; atomic_load(&mr->users) != 0; i++) {
        if (i < 64) {
            continue;
        } else if (i < 256) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

UIW_EXPORT int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    struct uiw_mr *mr = to_umr(ibmr);
    struct uiw_pd *pd;

    if (!mr)
        return EINVAL;
    pd = mr->pd;

    /* After this nothing new can be placed; queued Sends/Writes let go of
     * it (qp_tx.c); wait for placements under way. */
    atomic_store(&mr->valid, false);
    if (atomic_load(&mr->users))
        uiw_tx_revoke_mr(mr);
    wait_no_users(mr);
    pthread_mutex_lock(&tab_lock);
    uiw_dbg(2, "dereg_mr stag 0x%08x", mr->stag);
    mr->stag = 0;
    mr->pd = NULL;
    slot_free_locked((uint32_t)ibmr->handle);
    pthread_mutex_unlock(&tab_lock);
    atomic_fetch_sub(&pd->refs, 1);
    return 0;
}

/* ------------------------------------------------------------------------
 * Access checks (receive hot path: no lock)
 * ---------------------------------------------------------------------- */

UIW_EXPORT struct uiw_mr *uiw_mr_get(struct uiw_pd *pd, uint32_t stag, uint64_t to, uint64_t len,
                                     unsigned access, uint8_t **addr, enum uiw_mem_err *err)
{
    struct uiw_mr *mr;
    enum uiw_mem_err e;
    uint64_t off;

    if (len == 0) {
        /* RFC 5041 §5.2: STag and TO of a zero-length message are not checked */
        *addr = NULL;
        *err = UIW_MEM_OK;
        return &uiw_mr_zero;
    }
    mr = stag_slot(stag);
    if (!mr) {
        *err = UIW_MEM_INVALID_STAG;
        return NULL;
    }
    atomic_fetch_add(&mr->users, 1);
    /* RFC 5041 §7.1 checks 1-5, RFC 5040 §7.1 (access rights) */
    if (!atomic_load(&mr->valid) || mr->stag != stag) {
        e = UIW_MEM_INVALID_STAG;
        goto fail;
    }
    if (mr->pd != pd) {
        e = UIW_MEM_PD;
        goto fail;
    }
    if ((mr->access & access) != access) {
        e = UIW_MEM_ACCESS;
        goto fail;
    }
    if (len > UINT64_MAX - to) {
        e = UIW_MEM_TO_WRAP;
        goto fail;
    }
    off = to - mr->iova;
    if (to < mr->iova || off >= mr->length || len > mr->length - off) {
        e = UIW_MEM_BASE_BOUNDS;
        goto fail;
    }
    *addr = mr->base + off;
    *err = UIW_MEM_OK;
    return mr;
fail:
    atomic_fetch_sub(&mr->users, 1);
    *err = e;
    return NULL;
}

UIW_EXPORT void uiw_mr_put(struct uiw_mr *mr)
{
    if (mr && mr != &uiw_mr_zero)
        atomic_fetch_sub(&mr->users, 1);
}

UIW_EXPORT struct uiw_mr *uiw_sge_get(struct uiw_pd *pd, const struct ibv_sge *sge, unsigned access,
                                      uint8_t **addr, enum uiw_mem_err *err)
{
    return uiw_mr_get(pd, sge->lkey, sge->addr, sge->length, access, addr, err);
}

UIW_EXPORT int uiw_stag_invalidate(struct uiw_pd *pd, uint32_t stag)
{
    struct uiw_mr *mr = stag_slot(stag);
    int ret = 0;

    if (!mr)
        return -ENOENT;
    pthread_mutex_lock(&tab_lock);
    if (mr->stag != stag || !mr->pd)
        ret = -ENOENT;
    else if (mr->pd != pd)
        ret = -EACCES;
    else if (!(mr->access & REMOTE_ACCESS))
        ret = -EINVAL;
    else
        atomic_store(&mr->valid, false);
    pthread_mutex_unlock(&tab_lock);
    uiw_dbg(2, "invalidate stag 0x%08x: %d", stag, ret);
    return ret;
}
