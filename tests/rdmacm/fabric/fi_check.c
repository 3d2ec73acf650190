/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libfabric RDM endpoints over uiwarp (run by
 * tests/rdmacm/test_libfabric_apps.sh through `uiwarp run`, provider
 * "verbs;ofi_rxm" by default). The process forks: the parent is the
 * target, the child the initiator; they swap endpoint names, memory keys
 * and step markers over a socketpair, and every byte moved through the
 * fabric is checked:
 *
 *   tagged   fi_tsend of 1 B .. 4 MiB (and neighbours), each with its own
 *            tag; the target posts the receives in reverse order, so tag
 *            matching, not arrival order, pairs them; then messages sent
 *            before their receive is posted (unexpected), matched with
 *            ignore bits; completion tag, length and bytes checked.
 *   write    fi_write of 1 B .. 4 MiB at several offsets into the target's
 *            buffer; the target checks the written ranges and that the
 *            bytes around them kept their guard pattern.
 *   read     fi_read of 1 B .. 4 MiB from the target's pattern.
 *   atomics  fi_atomic FI_SUM, fi_fetch_atomic FI_SUM and FI_ATOMIC_READ,
 *            fi_compare_atomic FI_CSWAP on uint64 and uint32 arrays; the
 *            fetched old values and the final target words are compared
 *            with what the operations must produce.
 *
 * Usage: fi_check [provider]. Exit 0 when everything matched, 1 on a
 * mismatch or a libfabric error, 77 when the provider is not available.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE  (4u << 20)
#define GUARD     4096u /* bytes after BUF_SIZE that must stay untouched */
#define TIMEOUT_S 60

static const char *who = "?";
static int sock = -1; /* the socketpair end of this process */
static long failures;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "%s: ", who);                                                              \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        failures++;                                                                                \
    } while (0)

#define FI_CHECK(call)                                                                             \
    do {                                                                                           \
        int rc_ = (int)(call);                                                                     \
        if (rc_) {                                                                                 \
            FAIL("%s: %d (%s)", #call, rc_, fi_strerror(-rc_));                                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

struct fab {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_mr *mr;
    uint8_t *buf; /* BUF_SIZE + GUARD, registered */
    void *desc;
    fi_addr_t peer;
    uint64_t peer_addr, peer_key; /* the peer's buffer */
    uint8_t *notify;              /* 1-byte messages: registered, after the guard */
};

/* What the peers tell each other over the socketpair. */
struct hello {
    uint64_t addr, key;
    size_t namelen;
    char name[256];
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint8_t pat(size_t i, unsigned seed)
{
    return (uint8_t)(i * 167u + seed * 59u + (i >> 9) + 3u);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = pat(i, seed);
}

/* First index where b differs from the pattern, or n. */
static size_t mismatch(const uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(i, seed))
            return i;
    return n;
}

static void sock_write(const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = write(sock, b, n);
        if (w <= 0) {
            FAIL("socketpair write: %s", strerror(errno));
            exit(1);
        }
        b += w;
        n -= (size_t)w;
    }
}

/* Reads n bytes from the peer; meanwhile reads the CQ so that a provider
 * that progresses in fi_cq_read (rxm's software atomics, rendezvous) keeps
 * serving the peer. */
static void sock_read(struct fab *f, void *p, size_t n)
{
    uint8_t *b = p;
    double end = now() + TIMEOUT_S;
    while (n) {
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        if (poll(&pfd, 1, f ? 1 : 1000) > 0) {
            ssize_t r = read(sock, b, n);
            if (r <= 0) {
                FAIL("peer gone (socketpair read %zd)", r);
                exit(1);
            }
            b += r;
            n -= (size_t)r;
            continue;
        }
        if (f) {
            struct fi_cq_tagged_entry e;
            ssize_t r = fi_cq_read(f->cq, &e, 1);
            if (r > 0)
                FAIL("unexpected completion while waiting (flags 0x%" PRIx64 ")", e.flags);
        }
        if (now() > end) {
            FAIL("timeout waiting for the peer");
            exit(1);
        }
    }
}

static void step_send(char c)
{
    sock_write(&c, 1);
}

static void step_wait(struct fab *f, char want)
{
    char c = 0;
    sock_read(f, &c, 1);
    if (c != want) {
        FAIL("out of step: got '%c', expected '%c'", c, want);
        exit(1);
    }
}

/* Wait for n completions; returns them in out (may be NULL). */
static void wait_cq(struct fab *f, size_t n, struct fi_cq_tagged_entry *out, const char *what)
{
    double end = now() + TIMEOUT_S;
    size_t got = 0;
    while (got < n) {
        struct fi_cq_tagged_entry e[16];
        size_t want = n - got < 16 ? n - got : 16;
        ssize_t r = fi_cq_read(f->cq, e, want);
        if (r > 0) {
            if (out)
                memcpy(&out[got], e, (size_t)r * sizeof(*e));
            got += (size_t)r;
            continue;
        }
        if (r == -FI_EAVAIL) {
            struct fi_cq_err_entry err;
            memset(&err, 0, sizeof(err));
            fi_cq_readerr(f->cq, &err, 0);
            FAIL("%s: completion error %d (%s), provider %s", what, err.err, fi_strerror(err.err),
                 fi_cq_strerror(f->cq, err.prov_errno, err.err_data, NULL, 0));
            exit(1);
        }
        if (r != -FI_EAGAIN) {
            FAIL("%s: fi_cq_read: %zd (%s)", what, r, fi_strerror((int)-r));
            exit(1);
        }
        if (now() > end) {
            FAIL("%s: timeout, %zu of %zu completions", what, got, n);
            exit(1);
        }
    }
}

/* Post an operation, retrying on FI_EAGAIN while reading the CQ into a
 * small backlog would lose completions: callers post at most a window the
 * provider accepts, so EAGAIN only needs progress (fi_cq_read of 0). */
#define POST(f, call)                                                                              \
    do {                                                                                           \
        ssize_t r_;                                                                                \
        double end_ = now() + TIMEOUT_S;                                                           \
        while ((r_ = (call)) == -FI_EAGAIN) {                                                      \
            (void)fi_cq_read((f)->cq, NULL, 0);                                                    \
            if (now() > end_) {                                                                    \
                FAIL("%s: EAGAIN for %d s", #call, TIMEOUT_S);                                     \
                exit(1);                                                                           \
            }                                                                                      \
        }                                                                                          \
        if (r_) {                                                                                  \
            FAIL("%s: %zd (%s)", #call, r_, fi_strerror((int)-r_));                                \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void setup(struct fab *f, const char *prov)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        exit(1);
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_TAGGED | FI_RMA | FI_ATOMIC;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->fabric_attr->prov_name = strdup(prov);
    int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &f->info);
    fi_freeinfo(hints);
    if (rc) {
        fprintf(stderr, "%s: fi_getinfo(%s): %d (%s)\n", who, prov, rc, fi_strerror(-rc));
        exit(77);
    }
    fprintf(stderr, "%s: provider %s, domain %s\n", who, f->info->fabric_attr->prov_name,
            f->info->domain_attr->name);
    FI_CHECK(fi_fabric(f->info->fabric_attr, &f->fabric, NULL));
    FI_CHECK(fi_domain(f->fabric, f->info, &f->domain, NULL));
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_TAGGED, .size = 1024};
    FI_CHECK(fi_cq_open(f->domain, &cqa, &f->cq, NULL));
    struct fi_av_attr ava = {.type = FI_AV_TABLE, .count = 4};
    FI_CHECK(fi_av_open(f->domain, &ava, &f->av, NULL));
    FI_CHECK(fi_endpoint(f->domain, f->info, &f->ep, NULL));
    FI_CHECK(fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV));
    FI_CHECK(fi_ep_bind(f->ep, &f->av->fid, 0));
    FI_CHECK(fi_enable(f->ep));

    f->buf = aligned_alloc(4096, BUF_SIZE + GUARD + 4096);
    if (!f->buf)
        exit(1);
    memset(f->buf, 0, BUF_SIZE + GUARD + 4096);
    f->notify = f->buf + BUF_SIZE + GUARD;
    uint64_t access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    FI_CHECK(fi_mr_reg(f->domain, f->buf, BUF_SIZE + GUARD + 4096, access, 0, 0, 0, &f->mr, NULL));
    if (f->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        FI_CHECK(fi_mr_bind(f->mr, &f->ep->fid, 0));
        FI_CHECK(fi_mr_enable(f->mr));
    }
    f->desc = fi_mr_desc(f->mr);

    /* swap names and keys */
    struct hello me, peer;
    memset(&me, 0, sizeof(me));
    me.namelen = sizeof(me.name);
    FI_CHECK(fi_getname(&f->ep->fid, me.name, &me.namelen));
    me.key = fi_mr_key(f->mr);
    me.addr = (f->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)f->buf : 0;
    sock_write(&me, sizeof(me));
    sock_read(NULL, &peer, sizeof(peer));
    if (fi_av_insert(f->av, peer.name, 1, &f->peer, 0, NULL) != 1) {
        FAIL("fi_av_insert failed");
        exit(1);
    }
    f->peer_addr = peer.addr;
    f->peer_key = peer.key;
}

static void teardown(struct fab *f)
{
    fi_close(&f->mr->fid);
    fi_close(&f->ep->fid);
    fi_close(&f->av->fid);
    fi_close(&f->cq->fid);
    fi_close(&f->domain->fid);
    fi_close(&f->fabric->fid);
    fi_freeinfo(f->info);
    free(f->buf);
}

/* The message sizes: 1 B .. 4 MiB, powers of two and some neighbours. */
static size_t sizes[64];
static unsigned nsizes;

static void make_sizes(void)
{
    for (size_t s = 1; s <= BUF_SIZE; s *= 2) {
        if (s > 2)
            sizes[nsizes++] = s - 1;
        sizes[nsizes++] = s;
        if (s >= 4096 && s < BUF_SIZE)
            sizes[nsizes++] = s + 3;
    }
}

/* ------------------------------------------------------------------------
 * Tagged messages
 * ---------------------------------------------------------------------- */

#define TAG(i)     ((uint64_t)0x5a00000000 | (uint64_t)(i) << 8 | 0x11)
#define TAG_NOTIFY ((uint64_t)0x7700000000)

/* Each message in its own slice of the buffer: sizes[] sums beyond 4 MiB,
 * so the tagged test goes in rounds whose sizes fit. */
static void tagged_round(struct fab *f, bool target, unsigned first, unsigned last)
{
    struct fi_context ctx[64];
    size_t off[64], o = 0;
    for (unsigned i = first; i < last; i++) {
        off[i] = o;
        o += (sizes[i] + 63) & ~(size_t)63;
    }
    if (target) {
        memset(f->buf, 0, o);
        /* receives in reverse order: the tags must pair them */
        for (unsigned i = last; i-- > first;)
            POST(f,
                 fi_trecv(f->ep, f->buf + off[i], sizes[i], f->desc, f->peer, TAG(i), 0, &ctx[i]));
        step_send('R');
        struct fi_cq_tagged_entry e[64];
        wait_cq(f, last - first, e, "trecv");
        for (unsigned k = 0; k < last - first; k++) {
            unsigned i = (unsigned)((struct fi_context *)e[k].op_context - ctx);
            if (i < first || i >= last) {
                FAIL("trecv: completion with an unknown context");
                continue;
            }
            if (e[k].tag != TAG(i) || e[k].len != sizes[i] || !(e[k].flags & FI_TAGGED))
                FAIL("trecv %u: tag 0x%" PRIx64 " len %zu flags 0x%" PRIx64
                     ", expected tag 0x%" PRIx64 " len %zu",
                     i, e[k].tag, e[k].len, e[k].flags, TAG(i), sizes[i]);
        }
        for (unsigned i = first; i < last; i++) {
            size_t m = mismatch(f->buf + off[i], sizes[i], i);
            if (m != sizes[i])
                FAIL("tagged %zu B (tag %u): byte %zu is %02x, expected %02x", sizes[i], i, m,
                     f->buf[off[i] + m], pat(m, i));
        }
        step_send('T');
    } else {
        for (unsigned i = first; i < last; i++)
            fill(f->buf + off[i], sizes[i], i);
        step_wait(f, 'R');
        for (unsigned i = first; i < last; i++)
            POST(f, fi_tsend(f->ep, f->buf + off[i], sizes[i], f->desc, f->peer, TAG(i), &ctx[i]));
        wait_cq(f, last - first, NULL, "tsend");
        step_wait(f, 'T');
    }
}

static void test_tagged(struct fab *f, bool target)
{
    unsigned first = 0;
    while (first < nsizes) {
        size_t sum = 0;
        unsigned last = first;
        while (last < nsizes && last - first < 64 &&
               sum + ((sizes[last] + 63) & ~(size_t)63) <= BUF_SIZE)
            sum += (sizes[last++] + 63) & ~(size_t)63;
        tagged_round(f, target, first, last);
        first = last;
    }

    /* Unexpected messages: sent before any receive is posted, then matched
     * by receives that ignore the low tag byte. */
    enum { N = 8, SZ = 3000 };
    struct fi_context ctx[N];
    if (target) {
        step_wait(f, 'U'); /* the sends are on their way */
        memset(f->buf, 0, N * 4096);
        for (unsigned i = 0; i < N; i++)
            POST(f, fi_trecv(f->ep, f->buf + i * 4096, SZ, f->desc, f->peer,
                             TAG(100 + i) & ~0xffull, 0xff, &ctx[i]));
        struct fi_cq_tagged_entry e[N];
        wait_cq(f, N, e, "trecv unexpected");
        for (unsigned k = 0; k < N; k++) {
            unsigned i = (unsigned)((struct fi_context *)e[k].op_context - ctx);
            if (i >= N || e[k].tag != TAG(100 + i) || e[k].len != SZ)
                FAIL("unexpected %u: tag 0x%" PRIx64 " len %zu", i, e[k].tag, e[k].len);
            else if (mismatch(f->buf + i * 4096, SZ, 100 + i) != SZ)
                FAIL("unexpected message %u: data differs", i);
        }
        step_send('V');
    } else {
        for (unsigned i = 0; i < N; i++) {
            fill(f->buf + i * 4096, SZ, 100 + i);
            POST(f,
                 fi_tsend(f->ep, f->buf + i * 4096, SZ, f->desc, f->peer, TAG(100 + i), &ctx[i]));
        }
        step_send('U');
        wait_cq(f, N, NULL, "tsend unexpected");
        step_wait(f, 'V');
    }
    if (!target)
        printf("tagged: %u sizes 1 B .. %u B, reverse-posted receives; %d unexpected: %s\n", nsizes,
               BUF_SIZE, N, failures ? "FAIL" : "ok");
}

/* ------------------------------------------------------------------------
 * RMA
 * ---------------------------------------------------------------------- */

static const size_t offsets[] = {0, 1, 4093};

static void test_write(struct fab *f, bool target)
{
    unsigned n = 0;
    for (unsigned s = 0; s < nsizes; s++) {
        for (unsigned k = 0; k < sizeof(offsets) / sizeof(offsets[0]); k++) {
            size_t off = offsets[k], len = sizes[s];
            unsigned seed = s * 8 + k;
            if (off + len > BUF_SIZE)
                continue;
            n++;
            if (target) {
                memset(f->buf, 0xEE, BUF_SIZE + GUARD); /* guard pattern */
                /* The initiator's completion only says its buffer may be
                 * reused (iWARP: RFC 5040 §5.5, no delivery complete); a
                 * message sent after the Write arrives after its data is
                 * placed (Send after Write order), so that is the signal. */
                struct fi_context rctx;
                POST(f, fi_trecv(f->ep, f->notify, 1, f->desc, f->peer, TAG_NOTIFY, 0, &rctx));
                step_send('W');
                wait_cq(f, 1, NULL, "write notification");
                size_t m = mismatch(f->buf + off, len, seed);
                if (m != len)
                    FAIL("write %zu B at %zu: byte %zu is %02x, expected %02x", len, off, m,
                         f->buf[off + m], pat(m, seed));
                for (size_t i = 0; i < off; i++)
                    if (f->buf[i] != 0xEE) {
                        FAIL("write %zu B at %zu: byte %zu before it changed", len, off, i);
                        break;
                    }
                for (size_t i = off + len; i < BUF_SIZE + GUARD; i++)
                    if (f->buf[i] != 0xEE) {
                        FAIL("write %zu B at %zu: byte %zu after it changed", len, off, i);
                        break;
                    }
            } else {
                fill(f->buf, len, seed);
                step_wait(f, 'W');
                struct fi_context ctx;
                POST(f, fi_write(f->ep, f->buf, len, f->desc, f->peer, f->peer_addr + off,
                                 f->peer_key, &ctx));
                wait_cq(f, 1, NULL, "write");
                *f->notify = 'w';
                POST(f, fi_tsend(f->ep, f->notify, 1, f->desc, f->peer, TAG_NOTIFY, &ctx));
                wait_cq(f, 1, NULL, "write notification");
            }
        }
    }
    if (!target)
        printf("write: %u transfers 1 B .. %u B at offsets 0, 1, 4093: %s\n", n, BUF_SIZE,
               failures ? "FAIL" : "ok");
}

static void test_read(struct fab *f, bool target)
{
    unsigned n = 0;
    if (target) {
        fill(f->buf, BUF_SIZE, 777);
        step_send('P');
        step_wait(f, 'p');
        return;
    }
    step_wait(f, 'P');
    for (unsigned s = 0; s < nsizes; s++) {
        for (unsigned k = 0; k < sizeof(offsets) / sizeof(offsets[0]); k++) {
            size_t off = offsets[k], len = sizes[s];
            if (off + len > BUF_SIZE)
                continue;
            n++;
            memset(f->buf, 0xEE, BUF_SIZE + GUARD);
            struct fi_context ctx;
            POST(f, fi_read(f->ep, f->buf, len, f->desc, f->peer, f->peer_addr + off, f->peer_key,
                            &ctx));
            wait_cq(f, 1, NULL, "read");
            for (size_t i = 0; i < len; i++)
                if (f->buf[i] != pat(off + i, 777)) {
                    FAIL("read %zu B at %zu: byte %zu is %02x, expected %02x", len, off, i,
                         f->buf[i], pat(off + i, 777));
                    break;
                }
            for (size_t i = len; i < BUF_SIZE + GUARD; i++)
                if (f->buf[i] != 0xEE) {
                    FAIL("read %zu B at %zu: byte %zu beyond it changed", len, off, i);
                    break;
                }
        }
    }
    step_send('p');
    printf("read: %u transfers 1 B .. %u B at offsets 0, 1, 4093: %s\n", n, BUF_SIZE,
           failures ? "FAIL" : "ok");
}

/* ------------------------------------------------------------------------
 * Atomics
 * ---------------------------------------------------------------------- */

static size_t atomic_count(struct fab *f, enum fi_datatype dt, enum fi_op op, int kind)
{
    size_t count = 0;
    int rc = kind == 0   ? fi_atomicvalid(f->ep, dt, op, &count)
             : kind == 1 ? fi_fetch_atomicvalid(f->ep, dt, op, &count)
                         : fi_compare_atomicvalid(f->ep, dt, op, &count);
    if (rc) {
        FAIL("atomic datatype %d op %d (kind %d) not valid: %d (%s)", dt, op, kind, rc,
             fi_strerror(-rc));
        return 0;
    }
    return count;
}

/* Target layout: uint64 words at 0, uint32 words at 64 KiB. */
#define A64 0
#define A32 65536

static void test_atomics(struct fab *f, bool target)
{
    enum { ROUNDS = 5 };
    if (target) {
        uint64_t *w = (uint64_t *)(f->buf + A64);
        uint32_t *v = (uint32_t *)(f->buf + A32);
        for (unsigned i = 0; i < 512; i++) {
            w[i] = 1000000007ull * i + 5;
            v[i] = 7919u * i + 3;
        }
        step_send('A');
        step_wait(f, 'a'); /* everything done at the initiator */
        /* final values, from the operations the initiator made */
        for (unsigned i = 0; i < 64; i++) {
            uint64_t want = 1000000007ull * i + 5;
            for (unsigned r = 0; r < ROUNDS; r++)
                want += (uint64_t)(r + 1) * 0x100000001ull + i; /* fi_atomic SUM */
            want += 0xdeadbeefull * (i + 1);                    /* fetch SUM */
            want = ~want ^ i;                                   /* CSWAP */
            if (w[i] != want)
                FAIL("atomic uint64 word %u is 0x%016" PRIx64 ", expected 0x%016" PRIx64, i, w[i],
                     want);
            uint32_t want32 = 7919u * i + 3;
            for (unsigned r = 0; r < ROUNDS; r++)
                want32 += (uint32_t)(r + 1) * 3u + i;
            if (i % 2 == 0)
                want32 = 0xabcdef00u + i; /* CSWAP matched on even words */
            if (v[i] != want32)
                FAIL("atomic uint32 word %u is 0x%08x, expected 0x%08x", i, v[i], want32);
        }
        step_send('B');
        return;
    }

    step_wait(f, 'A');
    size_t c64 = atomic_count(f, FI_UINT64, FI_SUM, 0);
    size_t cf = atomic_count(f, FI_UINT64, FI_SUM, 1);
    size_t cc = atomic_count(f, FI_UINT64, FI_CSWAP, 2);
    size_t c32 = atomic_count(f, FI_UINT32, FI_CSWAP, 2);
    size_t n = 64;
    if (c64 < n || cf < n || cc < n || c32 < n) {
        FAIL("atomic counts too small: %zu %zu %zu %zu", c64, cf, cc, c32);
        exit(1);
    }
    /* operands, results and compare values live in our registered buffer */
    uint64_t *op = (uint64_t *)(f->buf), *res = (uint64_t *)(f->buf + 4096),
             *cmp = (uint64_t *)(f->buf + 8192);
    uint32_t *op32 = (uint32_t *)(f->buf + 12288), *res32 = (uint32_t *)(f->buf + 16384),
             *cmp32 = (uint32_t *)(f->buf + 20480);
    struct fi_context ctx;
    uint64_t expect[64];
    uint32_t expect32[64];
    for (unsigned i = 0; i < n; i++) {
        expect[i] = 1000000007ull * i + 5;
        expect32[i] = 7919u * i + 3;
    }
    /* fi_atomic SUM, several rounds, both widths */
    for (unsigned r = 0; r < ROUNDS; r++) {
        for (unsigned i = 0; i < n; i++) {
            op[i] = (uint64_t)(r + 1) * 0x100000001ull + i;
            op32[i] = (uint32_t)(r + 1) * 3u + i;
            expect[i] += op[i];
            expect32[i] += op32[i];
        }
        POST(f, fi_atomic(f->ep, op, n, f->desc, f->peer, f->peer_addr + A64, f->peer_key,
                          FI_UINT64, FI_SUM, &ctx));
        wait_cq(f, 1, NULL, "atomic sum64");
        POST(f, fi_atomic(f->ep, op32, n, f->desc, f->peer, f->peer_addr + A32, f->peer_key,
                          FI_UINT32, FI_SUM, &ctx));
        wait_cq(f, 1, NULL, "atomic sum32");
    }
    /* fetch SUM: the old values come back */
    for (unsigned i = 0; i < n; i++)
        op[i] = 0xdeadbeefull * (i + 1);
    memset(res, 0, n * 8);
    POST(f, fi_fetch_atomic(f->ep, op, n, f->desc, res, f->desc, f->peer, f->peer_addr + A64,
                            f->peer_key, FI_UINT64, FI_SUM, &ctx));
    wait_cq(f, 1, NULL, "fetch sum64");
    for (unsigned i = 0; i < n; i++) {
        if (res[i] != expect[i])
            FAIL("fetch_atomic SUM word %u returned 0x%" PRIx64 ", expected 0x%" PRIx64, i, res[i],
                 expect[i]);
        expect[i] += op[i];
    }
    /* ATOMIC_READ sees the sum */
    memset(res, 0, n * 8);
    POST(f, fi_fetch_atomic(f->ep, op, n, f->desc, res, f->desc, f->peer, f->peer_addr + A64,
                            f->peer_key, FI_UINT64, FI_ATOMIC_READ, &ctx));
    wait_cq(f, 1, NULL, "atomic read64");
    for (unsigned i = 0; i < n; i++)
        if (res[i] != expect[i])
            FAIL("ATOMIC_READ word %u returned 0x%" PRIx64 ", expected 0x%" PRIx64, i, res[i],
                 expect[i]);
    /* CSWAP uint64: every compare matches */
    for (unsigned i = 0; i < n; i++) {
        cmp[i] = expect[i];
        op[i] = ~expect[i] ^ i;
    }
    memset(res, 0, n * 8);
    POST(f, fi_compare_atomic(f->ep, op, n, f->desc, cmp, f->desc, res, f->desc, f->peer,
                              f->peer_addr + A64, f->peer_key, FI_UINT64, FI_CSWAP, &ctx));
    wait_cq(f, 1, NULL, "cswap64");
    for (unsigned i = 0; i < n; i++)
        if (res[i] != expect[i])
            FAIL("CSWAP word %u returned 0x%" PRIx64 ", expected 0x%" PRIx64, i, res[i], expect[i]);
    /* CSWAP uint32: even words match, odd ones do not and stay */
    for (unsigned i = 0; i < n; i++) {
        cmp32[i] = i % 2 == 0 ? expect32[i] : expect32[i] + 1;
        op32[i] = 0xabcdef00u + i;
    }
    memset(res32, 0, n * 4);
    POST(f, fi_compare_atomic(f->ep, op32, n, f->desc, cmp32, f->desc, res32, f->desc, f->peer,
                              f->peer_addr + A32, f->peer_key, FI_UINT32, FI_CSWAP, &ctx));
    wait_cq(f, 1, NULL, "cswap32");
    for (unsigned i = 0; i < n; i++)
        if (res32[i] != expect32[i])
            FAIL("CSWAP32 word %u returned 0x%08x, expected 0x%08x", i, res32[i], expect32[i]);
    step_send('a');
    step_wait(f, 'B');
    printf("atomics: SUM x%d, fetch SUM, ATOMIC_READ, CSWAP on %zu uint64 and uint32 words: %s\n",
           ROUNDS, n, failures ? "FAIL" : "ok");
}

static int run(bool target, const char *prov)
{
    struct fab f;
    memset(&f, 0, sizeof(f));
    who = target ? "target" : "initiator";
    setup(&f, prov);
    test_tagged(&f, target);
    test_write(&f, target);
    test_read(&f, target);
    test_atomics(&f, target);
    /* both sides done before either closes its endpoint */
    if (target) {
        step_send('Z');
        step_wait(&f, 'z');
    } else {
        step_wait(&f, 'Z');
        step_send('z');
    }
    teardown(&f);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *prov = argc > 1 ? argv[1] : "verbs;ofi_rxm";
    int sv[2];
    make_sizes();
    setvbuf(stdout, NULL, _IONBF, 0);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        close(sv[0]);
        sock = sv[1];
        _exit(run(false, prov));
    }
    close(sv[1]);
    sock = sv[0];
    int rc = run(true, prov);
    int st = 0;
    if (waitpid(pid, &st, 0) < 0)
        return 1;
    int crc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (crc == 77 || rc == 77)
        return 77;
    if (rc || crc) {
        fprintf(stderr, "FAIL: target %d, initiator %d\n", rc, crc);
        return 1;
    }
    printf("OK\n");
    return 0;
}
