/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The last byte of an RDMA Write is visible last (docs/ENGINE.md "Receive
 * and placement"): programs learn that a Write arrived by polling its
 * final byte (ib_write_lat, rdma-core's riostream, MPI eager-RDMA
 * protocols). A reader thread spins on the final byte of the target
 * buffer, never touching the CQ, and the moment it changes checks every
 * other byte of the message; the writer sends the next Write only when the
 * reader has checked this one. Sizes around the copy paths' thresholds
 * (memcpy's vector tails, the in-place readv from UIWARP_ZCOPY_MIN,
 * several FPDUs), with CRC off (in-place readv) and on (staging, memcpy).
 * Before the fix riostream -T v failed its check at 512 B within 20,000
 * round trips.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dp_test.h"

#define MAXSZ (256u << 10)
#define ITERS 6000

static const uint32_t sizes[] = {384, 512, 1000, 4096, 5000, 65536, 200000};
#define NSZ (sizeof(sizes) / sizeof(sizes[0]))

/* each size has its own region of dst: its marker byte is written by its
 * own messages only */
static uint8_t *dst;
#define REGION(seq) (dst + (size_t)((seq) % NSZ) * MAXSZ)
static unsigned acked;  /* the reader's last checked message (atomic) */
static unsigned failed; /* messages whose bytes were not all there (atomic) */
static bool stop;

static uint8_t pat(unsigned seq, uint32_t i)
{
    return (uint8_t)(seq * 131u + i * 7u + (i >> 8));
}

/* the marker: never the previous message's at the same place */
static uint8_t mark(unsigned seq)
{
    return (uint8_t)(seq % 251u + 1u);
}

static void *reader(void *arg)
{
    (void)arg;
    for (unsigned seq = 1; seq <= ITERS && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE); seq++) {
        uint32_t size = sizes[seq % NSZ];
        uint8_t *d = REGION(seq);
        while (__atomic_load_n(&d[size - 1], __ATOMIC_ACQUIRE) != mark(seq))
            if (__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
                return NULL;
        for (uint32_t i = 0; i + 1 < size; i++)
            if (d[i] != pat(seq, i)) {
                __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
                break;
            }
        /* clear the marker for the next message of this size */
        __atomic_store_n(&d[size - 1], 0, __ATOMIC_RELAXED);
        __atomic_store_n(&acked, seq, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void run(bool crc)
{
    struct dp_ep A, B;
    struct dp_ep_opts o = {.send_wr = 64, .recv_wr = 4};
    uint8_t *src = malloc(MAXSZ);
    dst = calloc(NSZ, MAXSZ);
    CHECK(src && dst);
    if (!src || !dst)
        return;
    CHECK_EQ(dp_ep_create(&A, &o), 0);
    CHECK_EQ(dp_ep_create(&B, &o), 0);
    struct ibv_mr *smr = ibv_reg_mr(A.pd, src, MAXSZ, ENG_ACCESS_ALL);
    struct ibv_mr *dmr = ibv_reg_mr(B.pd, dst, NSZ * MAXSZ, ENG_ACCESS_ALL);
    CHECK(smr && dmr);
    CHECK_EQ(dp_connect(&A, &B, crc, false, 16, 16, 16, 16), 0);

    acked = 0;
    failed = 0;
    stop = false;
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    uint64_t t0 = dp_now_ms();
    unsigned done = 0;
    for (unsigned seq = 1; seq <= ITERS; seq++) {
        uint32_t size = sizes[seq % NSZ];
        for (uint32_t i = 0; i + 1 < size; i++)
            src[i] = pat(seq, i);
        src[size - 1] = mark(seq);
        bool sig = seq % 16 == 0;
        if (eng_post(A.qp, IBV_WR_RDMA_WRITE, src, size, smr->lkey, (uintptr_t)REGION(seq),
                     dmr->rkey, seq, sig)) {
            CHECK(0);
            break;
        }
        if (sig) {
            struct ibv_wc wc;
            CHECK_EQ(dp_poll(A.scq, &wc, 5000), 1);
            CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        }
        /* the reader checks it before the source is rewritten */
        uint64_t end = dp_now_ms() + 5000;
        while (__atomic_load_n(&acked, __ATOMIC_ACQUIRE) != seq && dp_now_ms() < end) {
            struct ibv_wc wc;
            ibv_poll_cq(A.scq, 1, &wc); /* the writer's own progress */
        }
        if (__atomic_load_n(&acked, __ATOMIC_ACQUIRE) != seq) {
            CHECK(!"the reader saw the Write's marker within 5 s");
            break;
        }
        done = seq;
    }
    __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
    pthread_join(t, NULL);
    printf("crc %s: %u Writes of %u sizes (384 B-200000 B) in %llu ms, %u seen early\n",
           crc ? "on" : "off", done, (unsigned)NSZ, (unsigned long long)(dp_now_ms() - t0), failed);
    CHECK_EQ(done, ITERS);
    CHECK_EQ(failed, 0);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    free(src);
    free(dst);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    run(false);
    run(true);
    TEST_MAIN_END();
}
