/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Memory registration and the STag table: access flag rules, STag
 * allocation (distinct, unpredictable, never 0 or 1), uiw_mr_get checks
 * (bounds at the exact edges, TO wrap, zero length, access rights, PD,
 * invalidation), ibv_dereg_mr waiting for users, and concurrent
 * lookup/deregistration and lookup/table-growth stresses for the
 * sanitizers.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "eng_test.h"
#include "testutil.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd, *pd2;

#define LW IBV_ACCESS_LOCAL_WRITE
#define RW IBV_ACCESS_REMOTE_WRITE
#define RR IBV_ACCESS_REMOTE_READ
#define RA IBV_ACCESS_REMOTE_ATOMIC

static void test_reg_rules(void)
{
    static char buf[8192];
    struct ibv_mr *mr;

    /* remote write / atomic need local write (verbs) */
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 64, RW) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 64, RA | RR) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* windows may be bound to a region registered for it (test_dp_mw) */
    {
        struct ibv_mr *m = ibv_reg_mr(pd, buf, 64, LW | IBV_ACCESS_MW_BIND);
        CHECK(m != NULL);
        CHECK(m && (m->lkey == m->rkey));
        CHECK(!m || ibv_dereg_mr(m) == 0);
    }
    /* unsupported flags */
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 64, IBV_ACCESS_ZERO_BASED) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 64, IBV_ACCESS_ON_DEMAND) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* length 0, wrapping ranges */
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 0, LW) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr_iova(pd, buf, 4096, UINT64_MAX - 100, LW) == NULL);
    CHECK_EQ(errno, EINVAL);
    /* unmapped memory */
    long ps = sysconf(_SC_PAGESIZE);
    char *m =
        mmap(NULL, (size_t)ps * 3, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    munmap(m + ps, (size_t)ps);
    errno = 0;
    CHECK(ibv_reg_mr(pd, m + ps - 10, 20, LW) == NULL);
    CHECK_EQ(errno, EFAULT);
    mr = ibv_reg_mr(pd, m, (size_t)ps, LW);
    CHECK(mr != NULL);
    CHECK_EQ(ibv_dereg_mr(mr), 0);
    munmap(m, (size_t)ps);
    munmap(m + 2 * ps, (size_t)ps);

    /* the allowed combinations; optional flags are ignored */
    static const int ok[] = {0, LW, RR, LW | RW, LW | RA, LW | RW | RR | RA};
    for (unsigned i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        mr = ibv_reg_mr(pd, buf, sizeof(buf), ok[i]);
        CHECK(mr != NULL);
        if (!mr)
            continue;
        CHECK_EQ(mr->lkey, mr->rkey);
        CHECK(mr->addr == buf);
        CHECK_EQ(mr->length, sizeof(buf));
        CHECK(mr->pd == pd);
        CHECK(mr->context == ctx);
        CHECK_EQ(to_umr(mr)->access, (unsigned)ok[i]);
        CHECK_EQ(ibv_dereg_mr(mr), 0);
    }
    unsigned relaxed = LW | IBV_ACCESS_RELAXED_ORDERING;
    mr = ibv_reg_mr(pd, buf, 64, relaxed); /* not constant: goes through _iova2 */
    CHECK(mr != NULL);
    CHECK_EQ(to_umr(mr)->access, LW);
    CHECK_EQ(ibv_dereg_mr(mr), 0);

    /* rereg: not supported, the MR stays valid */
    mr = ibv_reg_mr(pd, buf, 64, LW);
    errno = 0;
    CHECK_EQ(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RR),
             IBV_REREG_MR_ERR_INPUT);
    CHECK_EQ(errno, EOPNOTSUPP);
    uint8_t *a;
    enum uiw_mem_err e;
    struct uiw_mr *m2 = uiw_mr_get(to_upd(pd), mr->lkey, (uintptr_t)buf, 1, LW, &a, &e);
    CHECK(m2 == to_umr(mr));
    uiw_mr_put(m2);

    /* PD in use */
    CHECK_EQ(ibv_dealloc_pd(pd), EBUSY);
    CHECK_EQ(ibv_dereg_mr(mr), 0);
    struct ibv_pd *p3 = ibv_alloc_pd(ctx);
    CHECK(p3 && p3->context == ctx);
    mr = ibv_reg_mr(p3, buf, 64, 0);
    CHECK_EQ(ibv_dealloc_pd(p3), EBUSY);
    CHECK_EQ(ibv_dereg_mr(mr), 0);
    CHECK_EQ(ibv_dealloc_pd(p3), 0);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

#define NREG 10000

static void test_stags(void)
{
    static char buf[256];
    static struct ibv_mr *mrs[NREG];
    static uint32_t stag[NREG], sorted[NREG];
    unsigned keys[256] = {0}, nkeys = 0, seq_idx = 0, seq_diff = 0, dup = 0;

    /* a released STag's index is not handed out again at once */
    struct ibv_mr *a = ibv_reg_mr(pd, buf, 16, LW);
    uint32_t sa = a->lkey;
    CHECK_EQ(ibv_dereg_mr(a), 0);
    struct ibv_mr *b = ibv_reg_mr(pd, buf, 16, LW);
    CHECK(b->lkey != sa);
    CHECK_EQ(ibv_dereg_mr(b), 0);

    for (int i = 0; i < NREG; i++) {
        mrs[i] = ibv_reg_mr(pd, buf, sizeof(buf), LW | RW);
        CHECK(mrs[i] != NULL);
        if (!mrs[i])
            return;
        stag[i] = mrs[i]->rkey;
        sorted[i] = stag[i];
        if (!keys[stag[i] & 0xff]++)
            nkeys++;
    }
    qsort(sorted, NREG, sizeof(sorted[0]), cmp_u32);
    for (int i = 1; i < NREG; i++)
        dup += sorted[i] == sorted[i - 1];
    CHECK_EQ(dup, 0);
    CHECK(sorted[0] > 1); /* never STag 0 or 1 (siw's RTR STag) */
    for (int i = 2; i < NREG; i++) {
        uint32_t i0 = stag[i - 2] >> 8, i1 = stag[i - 1] >> 8, i2 = stag[i] >> 8;
        seq_idx += i2 == i1 + 1;
        seq_diff += i2 - i1 == i1 - i0;
    }
    /* random 32-bit STags: consecutive or evenly spaced upper 24 bits are rare */
    CHECK(seq_idx < 10);
    CHECK(seq_diff < 10);
    CHECK(nkeys > 200); /* keys spread over the 8 bits */
    /* they spread over the 32-bit space (test_stag_guess checks more) */
    CHECK(sorted[0] >> 8 < (1u << 24) / 100);
    CHECK(sorted[NREG - 1] >> 8 > (1u << 24) - (1u << 24) / 100);
    /* every one resolves to its own MR */
    unsigned found = 0;
    for (int i = 0; i < NREG; i++) {
        uint8_t *addr;
        enum uiw_mem_err e;
        struct uiw_mr *m = uiw_mr_get(to_upd(pd), stag[i], (uintptr_t)buf, 8, RW, &addr, &e);
        found += m == to_umr(mrs[i]) && addr == (uint8_t *)buf;
        uiw_mr_put(m);
    }
    CHECK_EQ(found, NREG);
    for (int i = 0; i < NREG; i++)
        CHECK_EQ(ibv_dereg_mr(mrs[i]), 0);
    /* and none after deregistration */
    unsigned stale = 0;
    for (int i = 0; i < NREG; i++) {
        uint8_t *addr;
        enum uiw_mem_err e = UIW_MEM_OK;
        stale += uiw_mr_get(to_upd(pd), stag[i], (uintptr_t)buf, 8, 0, &addr, &e) != NULL;
        stale += e != UIW_MEM_INVALID_STAG;
    }
    CHECK_EQ(stale, 0);
}

#define GET(stag_, to_, len_, acc_)                                                                \
    uiw_mr_get(to_upd(pd), (stag_), (to_), (len_), (acc_), &addr, &err)

static void test_checks(void)
{
    static uint8_t buf[4096];
    const uint64_t iova = 0x10000;
    struct ibv_mr *mr = ibv_reg_mr_iova(pd, buf, sizeof(buf), iova, LW | RW);
    struct uiw_mr *m;
    uint8_t *addr;
    enum uiw_mem_err err;
    uint32_t st = mr->rkey;

    CHECK(mr != NULL);
    /* exact edges */
    m = GET(st, iova, 4096, RW);
    CHECK(m == to_umr(mr));
    CHECK(addr == buf);
    CHECK_EQ(err, UIW_MEM_OK);
    CHECK_EQ(atomic_load(&m->users), 1);
    uiw_mr_put(m);
    CHECK_EQ(atomic_load(&to_umr(mr)->users), 0);
    m = GET(st, iova + 4095, 1, RW);
    CHECK(m && addr == buf + 4095);
    uiw_mr_put(m);
    m = GET(st, iova + 1, 4095, RW);
    CHECK(m && addr == buf + 1);
    uiw_mr_put(m);
    CHECK(GET(st, iova, 4097, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, iova + 1, 4096, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, iova + 4096, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, iova - 1, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, iova - 1, 2, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, 0, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    /* huge lengths / TOs: no arithmetic wrap lets them through */
    CHECK(GET(st, iova + 8, UINT64_MAX - iova - 7, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_TO_WRAP);
    CHECK(GET(st, iova + 8, UINT64_MAX - iova - 8, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, UINT64_MAX, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_TO_WRAP);
    CHECK(GET(st, UINT64_MAX - 1, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    CHECK(GET(st, iova, UINT64_MAX, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_TO_WRAP);
    CHECK_EQ(atomic_load(&to_umr(mr)->users), 0);

    /* an MR at the top of the TO space: TO + len may reach 2^64 - 1 only */
    struct ibv_mr *top = ibv_reg_mr_iova(pd, buf, 4096, UINT64_MAX - 4096, LW);
    CHECK(top != NULL);
    m = GET(top->lkey, UINT64_MAX - 1, 1, LW);
    CHECK(m && addr == buf + 4095);
    uiw_mr_put(m);
    m = GET(top->lkey, UINT64_MAX - 4096, 4096, LW);
    CHECK(m && addr == buf);
    uiw_mr_put(m);
    CHECK(GET(top->lkey, UINT64_MAX, 1, LW) == NULL);
    CHECK_EQ(err, UIW_MEM_TO_WRAP);
    CHECK_EQ(ibv_dereg_mr(top), 0);

    /* zero length: STag and TO are not checked (RFC 5041 §5.2) */
    m = GET(1, 0, 0, RW); /* the P2P RTR: zero-length Write to STag 1 */
    CHECK(m == &uiw_mr_zero);
    CHECK(addr == NULL);
    CHECK_EQ(err, UIW_MEM_OK);
    uiw_mr_put(m);
    m = GET(0xdeadbeef, UINT64_MAX, 0, RW);
    CHECK(m == &uiw_mr_zero);
    uiw_mr_put(m);
    m = uiw_mr_get(to_upd(pd2), st, iova, 0, RW, &addr, &err); /* other PD, len 0 */
    CHECK(m == &uiw_mr_zero);
    uiw_mr_put(m);
    CHECK_EQ(atomic_load(&uiw_mr_zero.users), 0);

    /* invalid STags */
    CHECK(GET(st ^ 0x01, iova, 1, RW) == NULL); /* wrong key */
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    CHECK(GET(st ^ 0x100, iova, 1, RW) == NULL); /* wrong index */
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    CHECK(GET(0, iova, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    CHECK(GET(1, iova, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    CHECK(GET(0xffffffff, iova, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);

    /* PD */
    CHECK(uiw_mr_get(to_upd(pd2), st, iova, 1, RW, &addr, &err) == NULL);
    CHECK_EQ(err, UIW_MEM_PD);

    /* access rights */
    CHECK(GET(st, iova, 1, RR) == NULL);
    CHECK_EQ(err, UIW_MEM_ACCESS);
    CHECK(GET(st, iova, 1, RA) == NULL);
    CHECK_EQ(err, UIW_MEM_ACCESS);
    m = GET(st, iova, 1, 0); /* local read: always */
    CHECK(m != NULL);
    uiw_mr_put(m);
    m = GET(st, iova, 1, LW);
    CHECK(m != NULL);
    uiw_mr_put(m);
    struct ibv_mr *ro = ibv_reg_mr(pd, buf, 128, RR);
    CHECK(uiw_mr_get(to_upd(pd), ro->rkey, (uintptr_t)buf, 8, LW, &addr, &err) == NULL);
    CHECK_EQ(err, UIW_MEM_ACCESS);
    CHECK(uiw_mr_get(to_upd(pd), ro->rkey, (uintptr_t)buf, 8, RW, &addr, &err) == NULL);
    CHECK_EQ(err, UIW_MEM_ACCESS);
    m = uiw_mr_get(to_upd(pd), ro->rkey, (uintptr_t)buf, 8, RR, &addr, &err);
    CHECK(m != NULL);
    uiw_mr_put(m);

    /* local SGEs */
    struct ibv_sge sge = {.addr = iova + 100, .length = 200, .lkey = st};
    m = uiw_sge_get(to_upd(pd), &sge, LW, &addr, &err);
    CHECK(m && addr == buf + 100);
    uiw_mr_put(m);
    sge.length = 4000;
    CHECK(uiw_sge_get(to_upd(pd), &sge, LW, &addr, &err) == NULL);
    CHECK_EQ(err, UIW_MEM_BASE_BOUNDS);
    sge.length = 0;
    sge.lkey = 12345;
    CHECK(uiw_sge_get(to_upd(pd), &sge, LW, &addr, &err) == &uiw_mr_zero);

    /* invalidation */
    struct ibv_mr *local = ibv_reg_mr(pd, buf, 128, LW);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), local->lkey), -EINVAL); /* never advertised */
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd2), st), -EACCES);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), st ^ 0x01), -ENOENT);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), 0), -ENOENT);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), 1), -ENOENT);
    m = GET(st, iova, 1, RW);
    CHECK(m != NULL);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), st), 0);
    uiw_mr_put(m); /* an access under way finishes */
    CHECK(GET(st, iova, 1, RW) == NULL);
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    CHECK(GET(st, iova, 1, 0) == NULL);               /* the lkey too: same STag */
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), st), 0); /* again: fine */
    CHECK_EQ(ibv_dereg_mr(mr), 0);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), st), -ENOENT);
    CHECK_EQ(uiw_stag_invalidate(to_upd(pd), ro->rkey), 0);
    CHECK_EQ(ibv_dereg_mr(ro), 0);
    CHECK_EQ(ibv_dereg_mr(local), 0);
}

/* ------------------------------------------------------------------------ */

struct holder {
    uint32_t stag;
    atomic_int phase; /* 1: holding, 2: release now */
    atomic_bool dereg_done;
    struct ibv_mr *mr;
};

static void *hold_thread(void *arg)
{
    struct holder *h = arg;
    uint8_t *addr;
    enum uiw_mem_err err;
    struct uiw_mr *m = uiw_mr_get(to_upd(pd), h->stag, (uintptr_t)h->mr->addr, 16,
                                  IBV_ACCESS_REMOTE_WRITE, &addr, &err);

    CHECK(m != NULL);
    atomic_store(&h->phase, 1);
    while (atomic_load(&h->phase) != 2)
        eng_msleep(1);
    /* still ours: deregistration has not returned */
    CHECK(!atomic_load(&h->dereg_done));
    memset(addr, 0x5a, 16); /* a placement in progress */
    uiw_mr_put(m);
    return NULL;
}

static void *dereg_thread(void *arg)
{
    struct holder *h = arg;
    CHECK_EQ(ibv_dereg_mr(h->mr), 0);
    atomic_store(&h->dereg_done, true);
    return NULL;
}

static void test_dereg_waits(void)
{
    static uint8_t buf[64];
    struct holder h = {0};
    pthread_t th, td;
    uint8_t *addr;
    enum uiw_mem_err err;

    h.mr = ibv_reg_mr(pd, buf, sizeof(buf), LW | RW);
    h.stag = h.mr->rkey;
    pthread_create(&th, NULL, hold_thread, &h);
    while (atomic_load(&h.phase) != 1)
        eng_msleep(1);
    pthread_create(&td, NULL, dereg_thread, &h);
    eng_msleep(100);
    CHECK(!atomic_load(&h.dereg_done));
    /* no new access once deregistration started */
    CHECK(uiw_mr_get(to_upd(pd), h.stag, (uintptr_t)buf, 1, 0, &addr, &err) == NULL);
    CHECK_EQ(err, UIW_MEM_INVALID_STAG);
    atomic_store(&h.phase, 2);
    pthread_join(th, NULL);
    pthread_join(td, NULL);
    CHECK(atomic_load(&h.dereg_done));
    CHECK_EQ(buf[0], 0x5a);
}

/* ------------------------------------------------------------------------
 * Stress: readers look STags up while the main thread re-registers them.
 * After ibv_dereg_mr returns no reader may be inside that registration.
 * ---------------------------------------------------------------------- */

#define NSLOT   8
#define NREADER 3

static _Atomic uint32_t cur_stag[NSLOT];
static atomic_int inside[NSLOT];
static atomic_bool stop;
static atomic_ulong hits, misses, wrong;
static uint8_t sbuf[NSLOT][256];

static void *reader(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg, seed = id;

    while (!atomic_load(&stop)) {
        unsigned k = (seed = seed * 1103515245u + 12345u) >> 16 & (NSLOT - 1);
        uint32_t st = atomic_load(&cur_stag[k]);
        uint8_t *addr;
        enum uiw_mem_err err;
        struct uiw_mr *m = uiw_mr_get(to_upd(pd), st, (uintptr_t)sbuf[k], 256,
                                      IBV_ACCESS_REMOTE_WRITE, &addr, &err);
        if (!m) {
            atomic_fetch_add(&misses, 1);
            continue;
        }
        atomic_fetch_add(&inside[k], 1);
        if (m->stag != st || addr != sbuf[k])
            atomic_fetch_add(&wrong, 1);
        addr[id] = (uint8_t)seed; /* a placement: each reader its own byte */
        atomic_fetch_sub(&inside[k], 1);
        uiw_mr_put(m);
        atomic_fetch_add(&hits, 1);
    }
    return NULL;
}

static void test_stress(void)
{
    struct ibv_mr *mrs[NSLOT];
    pthread_t t[NREADER];
    unsigned bad_inside = 0;

    for (int k = 0; k < NSLOT; k++) {
        mrs[k] = ibv_reg_mr(pd, sbuf[k], 256, LW | RW);
        atomic_store(&cur_stag[k], mrs[k]->rkey);
    }
    for (int i = 0; i < NREADER; i++)
        pthread_create(&t[i], NULL, reader, (void *)(uintptr_t)(i + 1));
    /* 3000 rounds, and on until the readers have both found and missed
     * (a loaded machine may not have run them yet), at most 20 s */
    uint64_t t_end = eng_now_ms() + 20000;
    for (int round = 0;
         round < 3000 || ((!atomic_load(&hits) || !atomic_load(&misses)) && eng_now_ms() < t_end);
         round++) {
        int k = round % NSLOT;
        CHECK_EQ(ibv_dereg_mr(mrs[k]), 0);
        bad_inside += atomic_load(&inside[k]) != 0;
        mrs[k] = ibv_reg_mr(pd, sbuf[k], 256, LW | RW);
        atomic_store(&cur_stag[k], mrs[k]->rkey);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < NREADER; i++)
        pthread_join(t[i], NULL);
    for (int k = 0; k < NSLOT; k++)
        CHECK_EQ(ibv_dereg_mr(mrs[k]), 0);
    CHECK_EQ(bad_inside, 0);
    CHECK(atomic_load(&hits) > 0);
    CHECK_EQ(atomic_load(&wrong), 0);
    CHECK(atomic_load(&misses) > 0); /* lookups of deregistered STags failed */
}

/* ------------------------------------------------------------------------
 * The STag hash under change: readers look up STags that stay registered
 * the whole time while the main thread registers enough MRs to make the
 * table double (twice) and deregisters them in a shuffled order. A lookup
 * of a registered STag must never miss (no false negative while chains are
 * unlinked or rehashed), and a churned STag, when found, is the right MR.
 * ---------------------------------------------------------------------- */

#define NSTABLE 64
#define NCHURN  40000

static uint32_t stable_stag[NSTABLE];
static struct ibv_mr *stable_mr[NSTABLE];
static _Atomic uint32_t churn_stag[NCHURN];
static atomic_ulong false_miss, churn_hit, churn_bad, lookups;
static uint8_t hbuf[64];

static void *hash_reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    uint8_t *b = hbuf;

    while (!atomic_load(&stop)) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = seed >> 8;
        uint8_t *addr;
        enum uiw_mem_err err;
        struct uiw_mr *m = uiw_mr_get(to_upd(pd), stable_stag[k % NSTABLE], (uintptr_t)b, 8,
                                      IBV_ACCESS_REMOTE_WRITE, &addr, &err);
        if (m != to_umr(stable_mr[k % NSTABLE]))
            atomic_fetch_add(&false_miss, 1);
        uiw_mr_put(m);
        uint32_t st = atomic_load(&churn_stag[k % NCHURN]);
        m = uiw_mr_get(to_upd(pd), st, (uintptr_t)b, 8, IBV_ACCESS_REMOTE_WRITE, &addr, &err);
        if (m) {
            atomic_fetch_add(&churn_hit, 1);
            if (m->stag != st || addr != b)
                atomic_fetch_add(&churn_bad, 1);
        } else if (err != UIW_MEM_INVALID_STAG) {
            atomic_fetch_add(&churn_bad, 1);
        }
        uiw_mr_put(m);
        atomic_fetch_add(&lookups, 1);
    }
    return NULL;
}

static void test_hash_stress(void)
{
    uint8_t *b = hbuf;
    static struct ibv_mr *mrs[NCHURN];
    pthread_t t[NREADER];
    unsigned seed = 7;

    for (int i = 0; i < NSTABLE; i++) {
        stable_mr[i] = ibv_reg_mr(pd, b, sizeof(hbuf), LW | RW);
        CHECK(stable_mr[i] != NULL);
        stable_stag[i] = stable_mr[i]->rkey;
    }
    atomic_store(&stop, false);
    for (int i = 0; i < NREADER; i++)
        pthread_create(&t[i], NULL, hash_reader, (void *)(uintptr_t)(i + 1));
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NCHURN; i++) {
            mrs[i] = ibv_reg_mr(pd, b, sizeof(hbuf), LW | RW);
            CHECK(mrs[i] != NULL);
            atomic_store(&churn_stag[i], mrs[i] ? mrs[i]->rkey : 0);
        }
        for (int i = NCHURN - 1; i > 0; i--) {
            int j = (int)((seed = seed * 1103515245u + 12345u) >> 8) % (i + 1);
            struct ibv_mr *x = mrs[i];
            mrs[i] = mrs[j], mrs[j] = x;
        }
        for (int i = 0; i < NCHURN; i++)
            CHECK_EQ(ibv_dereg_mr(mrs[i]), 0);
    }
    atomic_store(&stop, true);
    for (int i = 0; i < NREADER; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < NSTABLE; i++)
        CHECK_EQ(ibv_dereg_mr(stable_mr[i]), 0);
    printf("hash stress: %lu lookups, %lu churned hits, %lu false misses\n", atomic_load(&lookups),
           atomic_load(&churn_hit), atomic_load(&false_miss));
    CHECK(atomic_load(&lookups) > 0);
    CHECK_EQ(atomic_load(&false_miss), 0);
    CHECK_EQ(atomic_load(&churn_bad), 0);
}

int main(void)
{
    ctx = eng_open_lo(false);
    CHECK(ctx != NULL);
    if (!ctx)
        TEST_MAIN_END();
    pd = ibv_alloc_pd(ctx);
    pd2 = ibv_alloc_pd(ctx);
    CHECK(pd && pd2);
    test_reg_rules();
    test_stags();
    test_checks();
    test_dereg_waits();
    test_stress();
    test_hash_stress();
    CHECK_EQ(ibv_dealloc_pd(pd2), 0);
    CHECK_EQ(ibv_dealloc_pd(pd), 0);
    CHECK_EQ(ibv_close_device(ctx), 0);
    TEST_MAIN_END();
}
