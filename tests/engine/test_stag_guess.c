/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * STags are hard to predict (RFC 5042 §6.1.1; issue 12 item 4).
 *
 * The attack of the issue: a client of a server that shares one PD among
 * its clients watches the STags the server hands it (registration and
 * deregistration, many times) and guesses the STags of other clients' live
 * MRs. Here one PD holds 1000 live "victim" MRs, registered among 100,000
 * registrations and deregistrations whose STags the attacker records.
 *
 *  1. The generator: ChaCha20 (src/engine/chacha.h) against RFC 8439's
 *     test vector.
 *  2. Statistics of the 100,000 observed STags: every bit and every bit of
 *     the XOR of consecutive STags balanced (within 6 sigma), each byte
 *     position uniform (chi-square between its 1e-7 quantiles, which also
 *     rejects a counter: too uniform), no difference between consecutive
 *     STags frequent, repeats no more than chance allows, never 0 or 1.
 *  3. About 1.5 million guesses built from the observed history (next and
 *     previous value, same upper 24 bits with another low byte, +-256,
 *     linear extrapolation, XOR patterns, single bit flips, the freed
 *     values themselves, the most frequent difference and XOR) looked up
 *     with the receive path's check (uiw_mr_get) against the 1000 live
 *     STags: each miss must give UIW_MEM_INVALID_STAG, and the hits no more
 *     than chance allows. With uniform 32-bit STags a guess hits with
 *     probability 1000 / 2^32 = 2^-22, so 1.5e6 guesses expect 0.35 hits by
 *     chance (at least one in about 30% of runs): zero cannot be asserted,
 *     at most 5 is (chance of more: 2e-6). The previous scheme (24-bit slot
 *     index reused first-in-first-out, 8-bit random key) failed this test
 *     with 177 hits, 4074 repeated STags and byte chi-square up to 6459.
 *  4. End to end: the attacker's QP writes to its best guess of the next
 *     STag; the Write fails with IBV_WC_REM_ACCESS_ERR, the server's QP
 *     gets a Terminate (async QP_ACCESS_ERR), no victim byte changes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "chacha.h"
#include "dp_test.h"

#define NLIVE 1000
#define NOBS  100000
#define LW    IBV_ACCESS_LOCAL_WRITE
#define RW    IBV_ACCESS_REMOTE_WRITE

static struct dp_ep A, B; /* attacker (client), server */
static uint8_t victim_buf[NLIVE][64];
static struct ibv_mr *victims[NLIVE];
static uint32_t live[NLIVE], obs[NOBS];

static void test_chacha_vector(void)
{
    /* RFC 8439 §2.3.2: key 00..1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00,
     * block counter 1 */
    static const uint32_t want[16] = {
        0xe4e7f110, 0x15593bd1, 0x1fdd0f50, 0xc47120a3, 0xc7f4d1c7, 0x0368c033,
        0x9aaa2204, 0x4e6cd4c3, 0x466482d2, 0x09aa9f07, 0x05d7c214, 0xa2028bd9,
        0xd19c12b5, 0xb94e16de, 0xe883d0cb, 0x4e3c50a2,
    };
    uint32_t in[16] = {UIW_CHACHA_C0, UIW_CHACHA_C1, UIW_CHACHA_C2, UIW_CHACHA_C3}, out[16];

    for (uint32_t i = 0; i < 8; i++)
        in[4 + i] = 4 * i | (4 * i + 1) << 8 | (4 * i + 2) << 16 | (4 * i + 3) << 24;
    in[12] = 1;
    in[13] = 0x09000000;
    in[14] = 0x4a000000;
    in[15] = 0;
    uiw_chacha20_block(in, out);
    CHECK_MEM(out, want, sizeof(want));
}

/* 100,000 registrations and deregistrations observed; a victim MR is
 * registered after every 100th, so victims' STags are interleaved in time
 * with the observed ones. */
static void observe(void)
{
    static uint8_t mine[64];
    unsigned nv = 0;

    for (unsigned i = 0; i < NOBS; i++) {
        struct ibv_mr *m = ibv_reg_mr(B.pd, mine, sizeof(mine), LW | RW);
        CHECK(m != NULL);
        if (!m)
            return;
        obs[i] = m->rkey;
        CHECK_EQ(ibv_dereg_mr(m), 0);
        if (i % (NOBS / NLIVE) == NOBS / NLIVE / 2 && nv < NLIVE) {
            victims[nv] = ibv_reg_mr(B.pd, victim_buf[nv], 64, LW | RW);
            CHECK(victims[nv] != NULL);
            if (!victims[nv])
                return;
            live[nv] = victims[nv]->rkey;
            nv++;
        }
    }
    CHECK_EQ(nv, NLIVE);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Chi-square quantile (Wilson-Hilferty), z standard deviations. */
static double chi2_q(double df, double z)
{
    double c = 2.0 / (9.0 * df);
    return df * pow(1.0 - c + z * sqrt(c), 3);
}

/* Each of the 32 bits of v[0..n) set in half of them, within 6 sigma
 * (a 2e-9 chance per bit for random values). Returns the largest
 * deviation in sigmas. */
static double bit_balance(const uint32_t *v, size_t n, const char *what)
{
    double worst = 0, sigma = sqrt((double)n) / 2;

    for (int b = 0; b < 32; b++) {
        size_t ones = 0;
        for (size_t i = 0; i < n; i++)
            ones += v[i] >> b & 1;
        double dev = fabs((double)ones - (double)n / 2) / sigma;
        if (dev > worst)
            worst = dev;
        if (dev > 6) {
            fprintf(stderr, "%s: bit %d set in %zu of %zu\n", what, b, ones, n);
            CHECK(dev <= 6);
        }
    }
    return worst;
}

static void test_statistics(void)
{
    static uint32_t x[NOBS], sorted[NOBS + NLIVE];
    static uint64_t vi[NOBS];
    const double lo = chi2_q(255, -5.2), hi = chi2_q(255, 5.2); /* 1e-7 each side */

    unsigned small = 0;
    for (int i = 0; i < NOBS; i++)
        small += obs[i] < 2;
    CHECK_EQ(small, 0);

    double w1 = bit_balance(obs, NOBS, "STag bits");
    for (int i = 1; i < NOBS; i++)
        x[i - 1] = obs[i] ^ obs[i - 1];
    double w2 = bit_balance(x, NOBS - 1, "XOR of consecutive STags");

    /* each byte position: 256 bins of 390.6 expected */
    double chi[4];
    for (int byte = 0; byte < 4; byte++) {
        unsigned cnt[256] = {0};
        double e = (double)NOBS / 256, c2 = 0;
        for (int i = 0; i < NOBS; i++)
            cnt[obs[i] >> (8 * byte) & 0xff]++;
        for (int k = 0; k < 256; k++)
            c2 += ((double)cnt[k] - e) * ((double)cnt[k] - e) / e;
        chi[byte] = c2;
        CHECK(c2 > lo && c2 < hi);
    }

    /* differences of consecutive STags: none frequent (a counter or fixed
     * stride would repeat one); chance gives about 1.2 equal pairs */
    for (int i = 1; i < NOBS; i++)
        x[i - 1] = obs[i] - obs[i - 1];
    qsort(x, NOBS - 1, sizeof(x[0]), cmp_u32);
    unsigned run = 1, maxrun = 1;
    for (int i = 1; i < NOBS - 1; i++) {
        run = x[i] == x[i - 1] ? run + 1 : 1;
        if (run > maxrun)
            maxrun = run;
    }
    CHECK(maxrun <= 4);

    /* repeats over all 101,000 STags (chance: 101000^2 / 2^33 = 1.19), and
     * within any 1000 consecutive registrations (chance: 0.023) */
    memcpy(sorted, obs, sizeof(obs));
    memcpy(sorted + NOBS, live, sizeof(live));
    qsort(sorted, NOBS + NLIVE, sizeof(sorted[0]), cmp_u32);
    unsigned rep = 0, rep_win = 0;
    for (int i = 1; i < NOBS + NLIVE; i++)
        rep += sorted[i] == sorted[i - 1];
    for (int i = 0; i < NOBS; i++)
        vi[i] = (uint64_t)obs[i] << 32 | (uint32_t)i;
    qsort(vi, NOBS, sizeof(vi[0]), cmp_u64);
    for (int i = 1; i < NOBS; i++)
        rep_win += vi[i] >> 32 == vi[i - 1] >> 32 && (uint32_t)vi[i] - (uint32_t)vi[i - 1] <= 1000;
    CHECK(rep <= 10);
    CHECK(rep_win <= 2);
    /* no live STag is held twice */
    memcpy(sorted, live, sizeof(live));
    qsort(sorted, NLIVE, sizeof(sorted[0]), cmp_u32);
    unsigned dup_live = 0;
    for (int i = 1; i < NLIVE; i++)
        dup_live += sorted[i] == sorted[i - 1];
    CHECK_EQ(dup_live, 0);

    printf("observed %d STags: worst bit imbalance %.2f sigma, of consecutive XOR %.2f sigma; "
           "byte chi2 %.0f %.0f %.0f %.0f (df 255, allowed %.0f..%.0f); most frequent "
           "difference x%u; repeats %u overall (chance 1.19), %u within 1000 (chance 0.023)\n",
           NOBS, w1, w2, chi[0], chi[1], chi[2], chi[3], lo, hi, maxrun, rep, rep_win);
}

/* ------------------------------------------------------------------------
 * Guesses against the live STags through the receive path's lookup.
 * ---------------------------------------------------------------------- */

static unsigned long n_guess, n_hit, n_wrong_err;

static void guess(uint32_t stag)
{
    uint8_t *addr = NULL;
    enum uiw_mem_err e = UIW_MEM_OK;
    /* a 1-byte Write at the MR's start: any STag that names a live MR of
     * this PD passes or fails a later check (bounds), not the STag check */
    struct uiw_mr *m = uiw_mr_get(to_upd(B.pd), stag, (uintptr_t)victim_buf[0], 1, RW, &addr, &e);

    n_guess++;
    if (m || e != UIW_MEM_INVALID_STAG) {
        /* only a live victim can be hit (the attacker holds nothing now) */
        n_hit++;
        if (!bsearch(&stag, live, NLIVE, sizeof(live[0]), cmp_u32))
            n_wrong_err++;
    }
    uiw_mr_put(m);
}

struct strategy {
    const char *name;
    unsigned long guesses, hits;
};

static void test_guesses(void)
{
    struct strategy s[10] = {
        {"next/previous value (+-1)", 0, 0},
        {"same upper 24 bits, another low byte", 0, 0},
        {"next/previous index (+-256)", 0, 0},
        {"linear extrapolation 2*s[i]-s[i-1]", 0, 0},
        {"XOR pattern s[i]^s[i-1]^s[i-2]", 0, 0},
        {"single bit flips", 0, 0},
        {"freed values themselves", 0, 0},
        {"upper 24 bits of a freed value, random low byte", 0, 0},
        {"most frequent difference / XOR applied", 0, 0},
        {"uniformly random (baseline)", 0, 0},
    };
    uint64_t r = 0x9E3779B97F4A7C15ull;

    qsort(live, NLIVE, sizeof(live[0]), cmp_u32); /* for bsearch */
    for (int k = 0; k < 10; k++) {
        unsigned long g0 = n_guess, h0 = n_hit;

        switch (k) {
        case 0:
            for (int i = 0; i < NOBS; i++)
                guess(obs[i] + 1), guess(obs[i] - 1);
            break;
        case 1:
            for (int i = NOBS - 1000; i < NOBS; i++)
                for (uint32_t b = 0; b < 256; b++)
                    if (b != (obs[i] & 0xff))
                        guess((obs[i] & ~0xffu) | b);
            break;
        case 2:
            for (int i = 0; i < NOBS; i++)
                guess(obs[i] + 256), guess(obs[i] - 256);
            break;
        case 3:
            for (int i = 1; i < NOBS; i++)
                guess(2 * obs[i] - obs[i - 1]);
            break;
        case 4:
            for (int i = 2; i < NOBS; i++)
                guess(obs[i] ^ obs[i - 1] ^ obs[i - 2]);
            break;
        case 5:
            for (int i = NOBS - 1000; i < NOBS; i++)
                for (int b = 0; b < 32; b++)
                    guess(obs[i] ^ 1u << b);
            break;
        case 6:
            for (int i = 0; i < NOBS; i++)
                guess(obs[i]);
            break;
        case 7:
            for (int i = 0; i < NOBS; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                guess((obs[i] & ~0xffu) | (uint32_t)(r & 0xff));
            }
            break;
        case 8: {
            /* the most frequent difference and XOR of consecutive STags
             * (by a vote over the last 4096), applied to every observed one */
            static uint32_t d[4096], x[4096];
            uint32_t bd = 0, bx = 0;
            unsigned run, best;
            for (int i = 0; i < 4096; i++) {
                d[i] = obs[NOBS - 4096 + i] - obs[NOBS - 4097 + i];
                x[i] = obs[NOBS - 4096 + i] ^ obs[NOBS - 4097 + i];
            }
            qsort(d, 4096, sizeof(d[0]), cmp_u32);
            qsort(x, 4096, sizeof(x[0]), cmp_u32);
            run = best = 0;
            for (int i = 0; i < 4096; i++) {
                run = i && d[i] == d[i - 1] ? run + 1 : 1;
                if (run > best)
                    best = run, bd = d[i];
            }
            run = best = 0;
            for (int i = 0; i < 4096; i++) {
                run = i && x[i] == x[i - 1] ? run + 1 : 1;
                if (run > best)
                    best = run, bx = x[i];
            }
            for (int i = 0; i < NOBS; i++)
                guess(obs[i] + bd), guess(obs[i] ^ bx);
            break;
        }
        case 9:
            for (int i = 0; i < 200000; i++) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                guess((uint32_t)(r >> 32));
            }
            break;
        }
        s[k].guesses = n_guess - g0;
        s[k].hits = n_hit - h0;
    }
    /* the live set was in the table the whole time */
    unsigned found = 0;
    for (int i = 0; i < NLIVE; i++) {
        uint8_t *addr;
        enum uiw_mem_err e;
        struct uiw_mr *m =
            uiw_mr_get(to_upd(B.pd), victims[i]->rkey, (uintptr_t)victim_buf[i], 64, RW, &addr, &e);
        found += m == to_umr(victims[i]) && addr == victim_buf[i];
        uiw_mr_put(m);
    }
    CHECK_EQ(found, NLIVE);

    double p = (double)NLIVE / (4294967296.0 - 2 - NLIVE);
    for (int k = 0; k < 10; k++)
        printf("  %-48s %8lu guesses, %lu hits\n", s[k].name, s[k].guesses, s[k].hits);
    printf("%lu guesses against %d live STags: %lu hits (chance expects %.2f); per-guess "
           "probability for uniform STags %.3g = 2^%.2f\n",
           n_guess, NLIVE, n_hit, (double)n_guess * p, p, log2(p));
    CHECK(n_guess >= 1000000);
    CHECK(n_hit <= 5);
    CHECK_EQ(n_wrong_err, 0); /* every miss: UIW_MEM_INVALID_STAG */
    CHECK(p <= 1.0 / (1 << 20));
}

/* ------------------------------------------------------------------------
 * End to end: an RDMA Write to the guessed next STag.
 * ---------------------------------------------------------------------- */

static void test_end_to_end(void)
{
    static uint8_t src[64];
    static uint8_t before[NLIVE][64];
    struct ibv_mr *smr = ibv_reg_mr(A.pd, src, sizeof(src), LW);
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge = {.addr = (uintptr_t)src, .length = sizeof(src), .lkey = smr->lkey};
    struct ibv_wc wc;

    CHECK_EQ(dp_connect(&A, &B, true, false, 8, 8, 8, 8), 0);
    for (int i = 0; i < NLIVE; i++)
        dp_fill(victim_buf[i], 64);
    memcpy(before, victim_buf, sizeof(before));
    memset(src, 0xEE, sizeof(src));
    /* the old scheme's best guess: the next index with the last key */
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = 77;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.rkey = obs[NOBS - 1] + 256;
    wr.wr.rdma.remote_addr = (uintptr_t)victim_buf[NLIVE - 1];
    CHECK(!bsearch(&wr.wr.rdma.rkey, live, NLIVE, sizeof(live[0]), cmp_u32) ||
          !"guess happened to be live (chance 2^-22)");
    CHECK_EQ(ibv_post_send(A.qp, &wr, &bad), 0);
    CHECK_EQ(dp_poll(A.scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.wr_id, 77);
    /* an RDMA Write completes once sent (RFC 5040 §5.1: no response);
     * the server's Terminate then ends the attacker's connection */
    CHECK(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_REM_ACCESS_ERR);
    CHECK_EQ(dp_async_wait(B.qp, DP_TIMEOUT_MS), IBV_EVENT_QP_ACCESS_ERR);
    uint64_t end = dp_now_ms() + DP_TIMEOUT_MS;
    while (dp_state(A.qp) != IBV_QPS_ERR && dp_now_ms() < end)
        dp_msleep(5);
    CHECK_EQ(dp_state(A.qp), IBV_QPS_ERR);
    dp_sync(B.qp);
    CHECK_MEM(victim_buf, before, sizeof(before));
    CHECK_EQ(ibv_dereg_mr(smr), 0);
}

int main(void)
{
    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        TEST_MAIN_END();
    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    test_chacha_vector();
    observe();
    test_statistics();
    test_guesses();
    test_end_to_end();
    for (int i = 0; i < NLIVE; i++)
        if (victims[i])
            CHECK_EQ(ibv_dereg_mr(victims[i]), 0);
    dp_ep_destroy(&A);
    dp_ep_destroy(&B);
    CHECK_EQ(ibv_close_device(dp_ctx), 0);
    TEST_MAIN_END();
}
