/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The measurements shared by uiwarp-demo and bench_rdma: a server process
 * and a client process, one RC QP over the uiwarp engine and one raw TCP
 * connection between them (both over 127.0.0.1), and a control socket.
 * The client drives: for each test it sends the parameters on the control
 * socket, the server prepares (clears its buffer, posts receives) and says
 * READY, both run, and the server reports whether the data it received
 * was right.
 *
 * Method (the same for uiwarp and raw TCP):
 *  - timing with CLOCK_MONOTONIC; warm-up iterations are run and discarded;
 *  - both processes busy-poll (the CQ for uiwarp; send/recv with
 *    MSG_DONTWAIT for TCP round trips up to 64 KiB, see below), each pinned
 *    to its own CPU (ru_run_pair): two spinning processes on one CPU would
 *    measure the scheduler. ru_spin_ns can bound the spinning (then sleep
 *    on the completion channel / in poll(2)); the default spins;
 *  - uiwarp and TCP are measured alternately (perf_lat_set, perf_bw_set),
 *    so that load from elsewhere weighs on both alike;
 *  - latency: one sample per round trip, median and p99 of the samples;
 *  - bandwidth: time from the first post until the receiver has everything
 *    (an 8-byte message comes back after the last one), median of the
 *    repetitions after one warm-up repetition; uiwarp keeps `window` WRs in
 *    flight (polling the CQ), TCP streams with one send() per message and
 *    sleeps in poll(2) when the socket is full or empty, as a streaming
 *    application does. Busy-polling a large TCP transfer was slower and
 *    erratic on loopback (streams and round trips of 1 MiB and more), so
 *    TCP round trips above 64 KiB sleep too: the TCP side always gets the
 *    faster way;
 *  - data: every message of a latency test carries a stamp (its iteration)
 *    in its first and last 8 bytes, checked on every iteration; the whole
 *    message is compared byte for byte, into a buffer cleared beforehand,
 *    on the first and the last iteration; bandwidth tests clear the target
 *    buffer before and compare it after each repetition.
 */
#ifndef UIWARP_DEMO_PERF_H
#define UIWARP_DEMO_PERF_H

#include "rdma_util.h"

#ifdef __cplusplus
extern "C" {
#endif

enum perf_test {
    PT_LAT_SEND = 1, /* Send ping-pong */
    PT_LAT_WRITE,    /* RDMA Write ping-pong, completion seen by polling memory */
    PT_LAT_READ,     /* RDMA Read round trip */
    PT_LAT_TCP,      /* raw TCP ping-pong, same size both ways */
    PT_LAT_TCP_RR,   /* raw TCP 16-byte request, size-byte response (Read's equivalent) */
    PT_BW_SEND,
    PT_BW_WRITE,
    PT_BW_READ,
    PT_BW_TCP,
    PT_USER = 100, /* first test number a program may handle itself */
};
const char *perf_test_name(int t);

/* Control message types. */
enum { PM_HELLO = 1, PM_BUFS, PM_TEST, PM_READY, PM_FINISH, PM_RESULT, PM_QUIT };

struct perf_opts {
    size_t max_size;       /* largest message (buffers are this big); multiple of 8 */
    unsigned window;       /* WRs in flight in bandwidth tests */
    unsigned max_bw_iters; /* messages per bandwidth repetition, at most */
    int timeout_ms;        /* any single wait */
};

/* Buffer layout of `small` (both sides, 4 KiB, all access rights). */
#define PERF_SMALL_ATOMIC 0    /* server: the atomic target word */
#define PERF_SMALL_RESULT 0    /* client: 8 result words for atomics */
#define PERF_SMALL_RECV   1024 /* receive slot for done/ack messages */
#define PERF_SMALL_SEND   2048 /* source of done/ack messages */
#define PERF_SMALL_SIZE   4096

struct perf {
    int ctl;
    bool server;
    struct ru_conn rc;
    int tcp;
    struct ibv_mr *src, *dst, *small;
    struct ru_remote peer_src, peer_dst, peer_small;
    uint32_t my_seed, peer_seed;
    struct perf_opts o;
    uint16_t rdma_port, tcp_port;
    uint32_t serial; /* test counter: part of every stamp */
};

/* Seeds of the two sides' data patterns. */
#define PERF_SEED_SERVER 0x5e5e0001u
#define PERF_SEED_CLIENT 0xc1c10002u

/* Both sides: open, connect (RDMA and raw TCP), register, exchange buffers. */
int perf_setup(struct perf *p, int ctl, bool server, const struct perf_opts *o);
/* Client: QUIT, disconnect, close. Server: after perf_serve, close. */
int perf_teardown(struct perf *p);

/* Server: answer the client's tests until QUIT. Tests >= PT_USER go to
 * `user` (may be NULL), which must call perf_ready() once prepared and
 * perf_wait_finish() before returning; it fills res (status, a..f). */
typedef int (*perf_user_fn)(struct perf *p, const struct ru_msg *cmd, struct ru_msg *res);
int perf_serve(struct perf *p, perf_user_fn user);
int perf_ready(struct perf *p);
int perf_wait_finish(struct perf *p);

/* Client: announce a test and wait for READY; then finish it and get the
 * server's result (res->status: 0, or -EBADMSG with a = byte offset and
 * b = iteration of the first wrong byte, or another negative errno). */
int perf_begin(struct perf *p, int test, uint64_t size, uint64_t iters, uint64_t warmup,
               uint64_t extra);
int perf_end(struct perf *p, struct ru_msg *res);

struct lat_result {
    double med_us, p99_us, min_us;
    unsigned iters, rounds;
};
struct bw_result {
    double gbps; /* median of the repetitions, 1e9 bytes/s */
    double min_gbps, max_gbps;
    unsigned iters, reps, window;
};

/* Client: run one latency test (PT_LAT_*) of `iters` timed round trips
 * after `warmup` untimed ones. 0, -EBADMSG (data wrong; printed) or error. */
int perf_lat(struct perf *p, int test, size_t size, unsigned iters, unsigned warmup,
             struct lat_result *r);
/* Client: run one bandwidth test (PT_BW_*): 1 warm-up + reps repetitions
 * of `iters` messages. */
int perf_bw(struct perf *p, int test, size_t size, unsigned iters, unsigned reps,
            struct bw_result *r);

/* The same for several tests compared with each other (uiwarp and TCP):
 * latency in `rounds` rounds, bandwidth run by run, alternating between the
 * tests in a rotating order, so that whatever else the machine does at
 * some moment weighs on all of them alike. Results in r[0..ntests). */
int perf_lat_set(struct perf *p, const int *tests, unsigned ntests, size_t size, unsigned iters,
                 unsigned warmup, unsigned rounds, struct lat_result *r);
int perf_bw_set(struct perf *p, const int *tests, unsigned ntests, size_t size, unsigned iters,
                unsigned reps, struct bw_result *r);

#ifdef __cplusplus
}
#endif
#endif
