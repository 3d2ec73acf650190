/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Protection domains, memory regions and the STag table.
 *
 * STags (RFC 5042 §6.1.1: "allocate STags in such a fashion that it is
 * difficult to predict the next allocated STag number, and also ensure
 * that STags are reused at as slow a rate as possible"). RFC 5040 §2.1
 * leaves the meaning of the 32 bits to the implementation, so all 32 are
 * random: each registration draws its STag uniformly from the values no
 * registered MR holds, except 0 and 1 (siw's RTR is a zero-length Write to
 * STag 1, and Chelsio refuses STag 0). The draws come from ChaCha20
 * (RFC 8439, chacha.h) keyed by getrandom once per process and again in a
 * forked child; getrandom is asked with GRND_NONBLOCK (then GRND_INSECURE),
 * so registration never blocks on the kernel's entropy. A guess therefore
 * hits one of L live STags with probability about L / 2^32 whatever was
 * observed before (1000 MRs: 2^-22), and a freed STag comes back only by
 * that same chance. No STag carries an index or any other structure
 * (tests/engine/test_stag_guess measures it).
 *
 * The MR objects (struct uiw_mr) are allocated in chunks that are never
 * freed, and kept on a free list between registrations; the lookup of an
 * STag goes through a hash table of chains linked through the objects
 * (`hnext`, key `hstag`), grown by doubling when there are more MRs than
 * buckets. There is no fixed cap on the number of MRs (the previous table
 * held 2^20; now only memory and MAX_LIVE, 2^30, limit them).
 *
 * Lookup protocol (uiw_mr_get, no lock, never blocks):
 *   1. tab_find walks the chain of the STag's bucket. The structure may
 *      change under it: writers (under tab_lock) publish new links with
 *      release stores, and every unlink or rehash is wrapped in the
 *      sequence counter `tab_seq` (odd while it runs). A walk that finds
 *      the STag returns that object (the check of step 2 decides); a walk
 *      that does not find it counts only if `tab_seq` was even and the same
 *      before and after (a seqlock read), else it is retried (after a few
 *      retries, under tab_lock). Objects and retired bucket arrays are
 *      never freed, so a walk over stale links reads valid memory, and a
 *      step limit ends a walk that concurrent relinking sends in circles.
 *   2. Increment the object's `users`, then check `valid` and the STag;
 *      deregistration clears `valid`, then waits for `users` to reach 0
 *      (both sequentially consistent, so either the lookup sees valid ==
 *      false or the deregistration sees the user), and only then unlinks
 *      the object. Fields are written before `valid` is set (under
 *      tab_lock) and read only after it was seen set.
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

#include "chacha.h"
#include "engine.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

#define OBJ_CHUNK  256                  /* MR objects allocated at a time */
#define TAB_BITS0  8                    /* first bucket array: 256 buckets */
#define MAX_LIVE   ((size_t)UIW_MAX_MR) /* keeps a random draw's miss rate <= 1/4 */
#define WALK_LIMIT 4096                 /* a walk longer than this is retried */
#define STAG_MIN   2                    /* STag 0 and siw's RTR STag 1: never an MR */

struct stag_tab {
    unsigned bits; /* 2^bits buckets */
    struct stag_tab *retired;
    _Atomic(struct uiw_mr *) b[];
};

struct obj_chunk {
    struct obj_chunk *next;
    struct uiw_mr mr[OBJ_CHUNK];
};

static pthread_mutex_t tab_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(struct stag_tab *) tab; /* NULL until the first registration */
static atomic_uint tab_seq;            /* odd while an unlink or rehash runs */
static struct stag_tab *retired_tabs;  /* previous bucket arrays (never freed) */
static struct obj_chunk *obj_chunks;   /* every MR object ever made */
static struct uiw_mr *free_objs;
static uint32_t nobjs, nlive;

/* STag generator: ChaCha20 key stream, under tab_lock */
static uint32_t rng_in[16], rng_out[16];
static unsigned rng_avail;
static bool rng_seeded;
static pthread_once_t rng_once = PTHREAD_ONCE_INIT;

UIW_EXPORT struct uiw_mr uiw_mr_zero; /* zero-length accesses; never valid, never counted */

static atomic_int npds;

/* ------------------------------------------------------------------------
 * Random STags
 * ---------------------------------------------------------------------- */

static void random_bytes(void *p, size_t n)
{
    unsigned flags = GRND_NONBLOCK;
    uint8_t *b = p;

    while (n) {
        ssize_t r = getrandom(b, n, flags);

        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN && flags == GRND_NONBLOCK) {
                flags = GRND_INSECURE; /* pool not initialized yet (early boot) */
                continue;
            }
            /* no getrandom (or no GRND_INSECURE): weaker, still varies per
             * process and call */
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

/* A forked child must not repeat its parent's STags. */
static void rng_atfork_child(void)
{
    rng_seeded = false;
}

static void rng_register_atfork(void)
{
    pthread_atfork(NULL, NULL, rng_atfork_child);
}

/* tab_lock held. */
static uint32_t rng_u32(void)
{
    if (!rng_seeded) {
        rng_in[0] = UIW_CHACHA_C0, rng_in[1] = UIW_CHACHA_C1;
        rng_in[2] = UIW_CHACHA_C2, rng_in[3] = UIW_CHACHA_C3;
        random_bytes(&rng_in[4], 8 * sizeof(uint32_t));  /* key */
        rng_in[12] = rng_in[13] = 0;                     /* 64-bit block counter */
        random_bytes(&rng_in[14], 2 * sizeof(uint32_t)); /* nonce */
        rng_avail = 0;
        rng_seeded = true;
    }
    if (!rng_avail) {
        uiw_chacha20_block(rng_in, rng_out);
        if (!++rng_in[12])
            rng_in[13]++;
        rng_avail = 16;
    }
    uint32_t v = rng_out[--rng_avail];
    rng_out[rng_avail] = 0; /* a used value does not stay in memory */
    return v;
}

/* ------------------------------------------------------------------------
 * The STag hash
 * ---------------------------------------------------------------------- */

static inline size_t bucket_of(const struct stag_tab *t, uint32_t stag)
{
    /* STags are uniform already; the multiply just spreads any bits */
    return (size_t)(((uint64_t)stag * 0x9E3779B97F4A7C15ull) >> (64 - t->bits));
}

/* tab_lock held: exact. */
static struct uiw_mr *find_locked(uint32_t stag)
{
    struct stag_tab *t = atomic_load_explicit(&tab, memory_order_relaxed);

    if (!t)
        return NULL;
    for (struct uiw_mr *m = atomic_load_explicit(&t->b[bucket_of(t, stag)], memory_order_relaxed);
         m; m = atomic_load_explicit(&m->hnext, memory_order_relaxed))
        if (atomic_load_explicit(&m->hstag, memory_order_relaxed) == stag)
            return m;
    return NULL;
}

/* No lock (see the lookup protocol above). The object returned held
 * `stag` at some moment during the call; the caller checks it again. */
static struct uiw_mr *tab_find(uint32_t stag)
{
    if (stag < STAG_MIN)
        return NULL;
    for (int tries = 0; tries < 4; tries++) {
        unsigned s0 = atomic_load_explicit(&tab_seq, memory_order_acquire);
        struct stag_tab *t = atomic_load_explicit(&tab, memory_order_acquire);
        unsigned steps = 0;

        if (!t)
            return NULL;
        for (struct uiw_mr *m =
                 atomic_load_explicit(&t->b[bucket_of(t, stag)], memory_order_acquire);
             m && steps < WALK_LIMIT;
             m = atomic_load_explicit(&m->hnext, memory_order_acquire), steps++)
            if (atomic_load_explicit(&m->hstag, memory_order_acquire) == stag)
                return m;
        /* the walk's last load was an acquire load: this one comes after
         * it, and sees the increment of any writer whose (release) store
         * the walk saw */
        if (!(s0 & 1) && steps < WALK_LIMIT &&
            atomic_load_explicit(&tab_seq, memory_order_acquire) == s0)
            return NULL; /* nothing changed during the walk: a true miss */
    }
    pthread_mutex_lock(&tab_lock);
    struct uiw_mr *m = find_locked(stag);
    pthread_mutex_unlock(&tab_lock);
    return m;
}

/* tab_lock held. Writers announce unlinks and rehashes to readers. */
static void seq_begin(void)
{
    /* the stores that follow are release stores, which order this one
     * before them */
    atomic_store_explicit(&tab_seq, atomic_load_explicit(&tab_seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

static void seq_end(void)
{
    atomic_store_explicit(&tab_seq, atomic_load_explicit(&tab_seq, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* tab_lock held. Doubles the bucket array; on allocation failure the old
 * one stays (longer chains, still correct). */
static void tab_grow(void)
{
    struct stag_tab *old = atomic_load_explicit(&tab, memory_order_relaxed);
    unsigned bits = old ? old->bits + 1 : TAB_BITS0;
    struct stag_tab *t;

    if (bits > 31)
        return;
    t = calloc(1, sizeof(*t) + (sizeof(t->b[0]) << bits));
    if (!t)
        return;
    t->bits = bits;
    if (!old) {
        atomic_store_explicit(&tab, t, memory_order_release);
        return;
    }
    seq_begin();
    for (size_t i = 0; i < (size_t)1 << old->bits; i++) {
        struct uiw_mr *m = atomic_load_explicit(&old->b[i], memory_order_relaxed), *next;

        for (; m; m = next) {
            size_t j = bucket_of(t, atomic_load_explicit(&m->hstag, memory_order_relaxed));

            next = atomic_load_explicit(&m->hnext, memory_order_relaxed);
            /* release: a reader whose acquire load sees this store sees
             * seq_begin's increment too (no fences: TSan models these) */
            atomic_store_explicit(&m->hnext, atomic_load_explicit(&t->b[j], memory_order_relaxed),
                                  memory_order_release);
            atomic_store_explicit(&t->b[j], m, memory_order_release);
        }
    }
    atomic_store_explicit(&tab, t, memory_order_release);
    seq_end();
    /* readers may still be in the old array: kept, never freed (together
     * smaller than the current one) */
    old->retired = retired_tabs;
    retired_tabs = old;
}

/* tab_lock held. m->hstag set. */
static void tab_insert(struct uiw_mr *m)
{
    struct stag_tab *t = atomic_load_explicit(&tab, memory_order_relaxed);
    size_t j = bucket_of(t, atomic_load_explicit(&m->hstag, memory_order_relaxed));

    atomic_store_explicit(&m->hnext, atomic_load_explicit(&t->b[j], memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&t->b[j], m, memory_order_release); /* publishes hstag, hnext */
}

/* tab_lock held. */
static void tab_remove(struct uiw_mr *m)
{
    struct stag_tab *t = atomic_load_explicit(&tab, memory_order_relaxed);
    _Atomic(struct uiw_mr *) *link =
        &t->b[bucket_of(t, atomic_load_explicit(&m->hstag, memory_order_relaxed))];
    struct uiw_mr *x;

    while ((x = atomic_load_explicit(link, memory_order_relaxed)) != m) {
        if (!x)
            return; /* not linked (cannot happen) */
        link = &x->hnext;
    }
    seq_begin();
    atomic_store_explicit(link, atomic_load_explicit(&m->hnext, memory_order_relaxed),
                          memory_order_release);
    atomic_store_explicit(&m->hstag, 0, memory_order_release);
    seq_end();
}

/* tab_lock held: a free MR object, or NULL. */
static struct uiw_mr *obj_alloc_locked(void)
{
    struct uiw_mr *m;

    if (!free_objs) {
        struct obj_chunk *c = calloc(1, sizeof(*c));

        if (!c)
            return NULL;
        c->next = obj_chunks;
        obj_chunks = c;
        for (int i = OBJ_CHUNK - 1; i >= 0; i--) {
            c->mr[i].ibmr.handle = nobjs + (uint32_t)i;
            c->mr[i].free_next = free_objs;
            free_objs = &c->mr[i];
        }
        nobjs += OBJ_CHUNK;
    }
    m = free_objs;
    free_objs = m->free_next;
    m->free_next = NULL;
    return m;
}

/* tab_lock held: a random STag that no MR holds. */
static uint32_t stag_draw_locked(void)
{
    for (;;) {
        uint32_t s = rng_u32();

        if (s >= STAG_MIN && !find_locked(s))
            return s;
    }
}

/* tab_lock held: a free object with a fresh STag, the table grown for one
 * more entry; not linked yet. NULL: out of memory or at the limit. */
static struct uiw_mr *obj_new_locked(void)
{
    struct uiw_mr *m;

    if (nlive >= MAX_LIVE || !(m = obj_alloc_locked()))
        return NULL;
    struct stag_tab *t = atomic_load_explicit(&tab, memory_order_relaxed);
    if (!t || nlive >= (size_t)1 << t->bits)
        tab_grow();
    if (!atomic_load_explicit(&tab, memory_order_relaxed)) {
        m->free_next = free_objs;
        free_objs = m;
        return NULL;
    }
    m->stag = stag_draw_locked();
    return m;
}

/* tab_lock held: unlink m and put it back on the free list (its users
 * have been waited for). */
static void obj_free_locked(struct uiw_mr *m)
{
    tab_remove(m);
    m->stag = 0;
    m->pd = NULL;
    m->free_next = free_objs;
    free_objs = m;
    nlive--;
}

/* tab_lock held: make m findable under its STag. */
static void obj_link_locked(struct uiw_mr *m)
{
    atomic_store_explicit(&m->hstag, m->stag, memory_order_relaxed);
    tab_insert(m);
    nlive++;
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
    if (!uiw_count_take(&npds, UIW_MAX_PD))
        return NULL;
    pd = uiw_zalloc(sizeof(*pd));
    if (!pd) {
        atomic_fetch_sub(&npds, 1);
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
     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND)
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
    pthread_once(&rng_once, rng_register_atfork);

    pthread_mutex_lock(&tab_lock);
    if (!(mr = obj_new_locked())) {
        pthread_mutex_unlock(&tab_lock);
        errno = ENOMEM;
        return NULL;
    }
    uint32_t handle = mr->ibmr.handle;
    memset(&mr->ibmr, 0, sizeof(mr->ibmr));
    mr->ibmr.context = ibpd->context;
    mr->ibmr.pd = ibpd;
    mr->ibmr.addr = addr;
    mr->ibmr.length = length;
    mr->ibmr.handle = handle;
    mr->ibmr.lkey = mr->stag;
    mr->ibmr.rkey = mr->stag;
    mr->pd = pd;
    mr->iova = iova;
    mr->base = addr;
    mr->length = length;
    mr->access = access;
    atomic_fetch_add(&pd->refs, 1);
    atomic_store(&mr->valid, true); /* publishes the fields above */
    obj_link_locked(mr);
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

    if (!mr || mr->mw_type)
        return EINVAL;
    pd = mr->pd;
    /* verbs: a region with windows bound to it stays (deallocate or
     * rebind them first) */
    if (atomic_load(&mr->nwindows))
        return EBUSY;

    /* After this nothing new can be placed; queued Sends/Writes let go of
     * it (qp_tx.c); wait for placements under way. */
    atomic_store(&mr->valid, false);
    if (atomic_load(&mr->users))
        uiw_tx_revoke_mr(mr);
    wait_no_users(mr);
    pthread_mutex_lock(&tab_lock);
    uiw_dbg(2, "dereg_mr stag 0x%08x", mr->stag);
    obj_free_locked(mr);
    pthread_mutex_unlock(&tab_lock);
    atomic_fetch_sub(&pd->refs, 1);
    return 0;
}

/* ------------------------------------------------------------------------
 * Access checks (receive hot path: no lock)
 * ---------------------------------------------------------------------- */

struct uiw_mr *uiw_mr_get(struct uiw_pd *pd, uint32_t stag, uint64_t to, uint64_t len,
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
    mr = tab_find(stag);
    if (!mr) {
        *err = UIW_MEM_INVALID_STAG;
        return NULL;
    }
    atomic_fetch_add(&mr->users, 1);
    /* RFC 5041 §7.1 checks 1-5, RFC 5040 §7.1 (access rights) */
    if (!atomic_load(&mr->valid) || mr->stag != stag ||
        (mr->parent && !atomic_load(&mr->parent->valid))) {
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

void uiw_mr_put(struct uiw_mr *mr)
{
    if (mr && mr != &uiw_mr_zero)
        atomic_fetch_sub(&mr->users, 1);
}

struct uiw_mr *uiw_sge_get(struct uiw_pd *pd, const struct ibv_sge *sge, unsigned access,
                           uint8_t **addr, enum uiw_mem_err *err)
{
    struct uiw_mr *mr = uiw_mr_get(pd, sge->lkey, sge->addr, sge->length, access, addr, err);

    if (mr && mr->mw_type) { /* a window has no lkey */
        uiw_mr_put(mr);
        *err = UIW_MEM_INVALID_STAG;
        return NULL;
    }
    return mr;
}

int uiw_stag_invalidate(struct uiw_pd *pd, uint32_t stag)
{
    struct uiw_mr *mr;
    int ret = 0;

    pthread_mutex_lock(&tab_lock);
    mr = find_locked(stag);
    if (!mr || mr->stag != stag || !mr->pd)
        ret = -ENOENT;
    else if (mr->pd != pd)
        ret = -EACCES;
    else if (!(mr->access & REMOTE_ACCESS) || mr->mw_type == IBV_MW_TYPE_1)
        ret = -EINVAL; /* never advertised; a type 1 window is not invalidated */
    else
        atomic_store(&mr->valid, false);
    pthread_mutex_unlock(&tab_lock);
    uiw_dbg(2, "invalidate stag 0x%08x: %d", stag, ret);
    return ret;
}

/* ------------------------------------------------------------------------
 * Memory windows
 *
 * A window is an object of the STag table like a region, with mw_type
 * set. Unbound it is invalid; a bind (type 1: ibv_bind_mw, type 2: an
 * IBV_WR_BIND_MW work request, both executed in SQ order by qp_tx.c) gives
 * it a range of a region that has IBV_ACCESS_MW_BIND, remote rights and a
 * new STag, and makes it valid; remote accesses then go through it exactly
 * as through a region (uiw_mr_get; a window is never an lkey), and Send
 * with Invalidate or Local Invalidate invalidate a type 2 window. A region
 * cannot be deregistered while windows are bound to it (EBUSY).
 * ---------------------------------------------------------------------- */

struct uiw_mw {
    struct ibv_mw ibmw;
    struct uiw_mr *win; /* its table object */
};

static struct uiw_mw *to_umw(struct ibv_mw *mw)
{
    return (struct uiw_mw *)mw;
}

struct ibv_mw *uiw_op_alloc_mw(struct ibv_pd *ibpd, enum ibv_mw_type type)
{
    struct uiw_mw *mw;
    struct uiw_mr *w;

    if (!ibpd || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
        errno = EINVAL;
        return NULL;
    }
    mw = uiw_zalloc(sizeof(*mw));
    if (!mw)
        return NULL;
    pthread_once(&rng_once, rng_register_atfork);
    pthread_mutex_lock(&tab_lock);
    if (!(w = obj_new_locked())) {
        pthread_mutex_unlock(&tab_lock);
        free(mw);
        errno = ENOMEM;
        return NULL;
    }
    w->pd = to_upd(ibpd);
    w->mw_type = (uint8_t)type;
    w->parent = NULL;
    w->iova = 0;
    w->base = NULL;
    w->length = 0;
    w->access = 0;
    w->ibmw = &mw->ibmw;
    atomic_store(&w->valid, false); /* unbound */
    obj_link_locked(w);
    pthread_mutex_unlock(&tab_lock);
    atomic_fetch_add(&to_upd(ibpd)->refs, 1);
    mw->win = w;
    mw->ibmw.context = ibpd->context;
    mw->ibmw.pd = ibpd;
    mw->ibmw.rkey = w->stag;
    mw->ibmw.handle = w->ibmr.handle;
    mw->ibmw.type = type;
    uiw_dbg(2, "alloc_mw type %d stag 0x%08x", type, w->stag);
    return &mw->ibmw;
}

int uiw_op_dealloc_mw(struct ibv_mw *ibmw)
{
    struct uiw_mw *mw = to_umw(ibmw);
    struct uiw_mr *w;
    struct uiw_pd *pd;

    if (!mw)
        return EINVAL;
    w = mw->win;
    pd = w->pd;
    atomic_store(&w->valid, false);
    wait_no_users(w);
    pthread_mutex_lock(&tab_lock);
    if (w->parent)
        atomic_fetch_sub(&w->parent->nwindows, 1);
    w->parent = NULL;
    w->mw_type = 0;
    w->ibmw = NULL;
    obj_free_locked(w);
    pthread_mutex_unlock(&tab_lock);
    atomic_fetch_sub(&pd->refs, 1);
    free(mw);
    return 0;
}

int uiw_mw_bind(struct uiw_pd *pd, struct ibv_mw *ibmw, uint32_t new_rkey, struct ibv_mr *ibmr,
                uint64_t addr, uint64_t length, unsigned access)
{
    struct uiw_mw *mw = to_umw(ibmw);
    struct uiw_mr *w, *mr = ibmr ? to_umr(ibmr) : NULL;
    int ret = 0;

    if (!mw || access & ~(unsigned)(REMOTE_ACCESS | IBV_ACCESS_ZERO_BASED))
        return -EINVAL;
    w = mw->win;
    if (w->pd != pd)
        return -EPERM;
    /* a type 2 window is bound only when invalid (IB verbs); a new rkey
     * keeps the window's index: only its low 8 bits (the key) change */
    if (w->mw_type == IBV_MW_TYPE_2 &&
        (atomic_load(&w->valid) || (new_rkey & ~0xffu) != (w->stag & ~0xffu) ||
         new_rkey == w->stag))
        return -EINVAL;
    if (mr) {
        /* the range lies in a valid region of this PD that allows
         * windows; remote write/atomic rights need local write on it */
        if (mr->mw_type || mr->pd != pd || !atomic_load(&mr->valid) ||
            !(mr->access & IBV_ACCESS_MW_BIND))
            return -EPERM;
        if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
            !(mr->access & IBV_ACCESS_LOCAL_WRITE))
            return -EPERM;
        if (!length || length > UINT64_MAX - addr || addr < mr->iova ||
            addr - mr->iova > mr->length || length > mr->length - (addr - mr->iova))
            return -EINVAL;
    } else if (length || w->mw_type != IBV_MW_TYPE_1) {
        return -EINVAL; /* only a type 1 window unbinds with no region */
    }
    /* stop remote access through the old binding; a placement through it
     * still running on another thread is waited for, briefly */
    atomic_store(&w->valid, false);
    for (unsigned i = 0; atomic_load(&w->users); i++) {
        if (i > 100000)
            return -EBUSY;
        sched_yield();
    }
    pthread_mutex_lock(&tab_lock);
    if (new_rkey != w->stag) {
        if (new_rkey < STAG_MIN || find_locked(new_rkey)) {
            pthread_mutex_unlock(&tab_lock);
            return -EINVAL;
        }
        tab_remove(w);
        w->stag = new_rkey;
        atomic_store_explicit(&w->hstag, w->stag, memory_order_relaxed);
        tab_insert(w);
    }
    if (w->parent)
        atomic_fetch_sub(&w->parent->nwindows, 1);
    w->parent = mr;
    if (mr) {
        atomic_fetch_add(&mr->nwindows, 1);
        /* zero-based: the window's tagged offsets start at 0 */
        w->iova = (access & IBV_ACCESS_ZERO_BASED) ? 0 : addr;
        w->base = mr->base + (addr - mr->iova);
        w->length = length;
        w->access = access & REMOTE_ACCESS;
        atomic_store(&w->valid, true); /* publishes the fields above */
    }
    pthread_mutex_unlock(&tab_lock);
    ibmw->rkey = w->stag;
    uiw_dbg(2, "bind_mw stag 0x%08x len %llu access 0x%x: %d", w->stag, (unsigned long long)length,
            access, ret);
    return ret;
}

/* ibv_bind_mw (type 1): the bind is a work request on the QP's send queue,
 * with the window's next rkey (its key byte incremented, as
 * ibv_inc_rkey) set in mw->rkey when it is posted. */
int uiw_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
    struct ibv_send_wr wr, *bad = NULL;
    uint32_t next;
    int ret;

    if (!qp || !mw || !b || mw->type != IBV_MW_TYPE_1)
        return EINVAL;
    next = (mw->rkey & ~0xffu) | ((mw->rkey + 1) & 0xffu);
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = b->wr_id;
    wr.send_flags = b->send_flags;
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = next;
    wr.bind_mw.bind_info = b->bind_info;
    ret = qp->context->ops.post_send(qp, &wr, &bad);
    if (!ret)
        mw->rkey = next;
    return ret;
}
