/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Shared helpers of uiwarp-demo and bench_rdma: a connected RC QP over the
 * uiwarp engine (device uiw_lo, the engine's uiw_cm_* connection API),
 * registered buffers, post/poll helpers that never wait forever, the raw
 * TCP equivalent, an out-of-band control channel between the two processes,
 * data patterns and timing.
 *
 * Every wait is bounded: a function that waits takes a timeout in
 * milliseconds, prints a one-line error naming what it waited for when it
 * expires, and returns -ETIMEDOUT. Errors are negative errnos.
 */
#ifndef UIWARP_DEMO_RDMA_UTIL_H
#define UIWARP_DEMO_RDMA_UTIL_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "uiw_cm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The engine's loopback device. */
#define RU_DEVICE "uiw_lo"

/* ---------------------------------------------------------------- time */
static inline uint64_t ru_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Absolute CLOCK_MONOTONIC deadline `ms` from now. */
static inline uint64_t ru_deadline(int ms)
{
    return ru_now_ns() + (uint64_t)ms * 1000000ull;
}
/* Milliseconds left until `deadline` (0 when past), for poll(2). */
int ru_ms_left(uint64_t deadline);

/* Waiting policy of the busy-polling waits (CQ polls, TCP round trips):
 * after ru_spin_ns without progress, sleep until woken (the CQ's
 * completion channel / poll(2) on the socket). The default never sleeps:
 * pinned to their own CPUs (ru_pin_cpus), spinning processes measure best.
 * A bounded spin between two processes that share a CPU costs the whole
 * budget per hand-over (round trips grow by more than twice the budget). */
extern uint64_t ru_spin_ns; /* default UINT64_MAX: busy-poll only */
/* ru_run_pair pins the client and the server to two different CPUs (the
 * first two the process may use) when there are at least two. */
extern bool ru_pin_cpus; /* default true */

/* Who is talking, for messages ("client", "server"). */
extern const char *ru_role;
/* Error line on stderr, prefixed with the role. */
void ru_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------- patterns */
/* Byte i of the pattern with `seed`: a hash of (seed, i), not periodic over
 * small ranges, so shifted, truncated or stale data does not match. */
static inline uint8_t ru_pat(uint32_t seed, uint64_t i)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)seed * 0xC2B2AE3D27D4EB4Full;
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    return (uint8_t)(x >> 32);
}
void ru_fill(void *buf, size_t len, uint32_t seed);
/* Compare buf[0..len) with the pattern; returns -1 if equal, else the
 * offset of the first differing byte. */
long ru_check(const void *buf, size_t len, uint32_t seed);
/* Latency messages carry a 64-bit stamp in their first and last 8 bytes
 * (one word for an 8-byte message); the rest is the pattern. */
void ru_stamp(void *buf, size_t len, uint64_t stamp);
void ru_unstamp(void *buf, size_t len, uint32_t seed); /* put the pattern back */
uint64_t ru_tail_stamp(const volatile void *buf, size_t len);
/* The stamps only of a stamped message: -1 if both are stamp, else the
 * offset of the first bad one. */
static inline long ru_check_stamps(const void *buf, size_t len, uint64_t stamp)
{
    uint64_t head, tail;
    memcpy(&head, buf, 8);
    memcpy(&tail, (const uint8_t *)buf + len - 8, 8);
    if (head != stamp)
        return 0;
    if (tail != stamp)
        return (long)(len - 8);
    return -1;
}
/* Full check of a stamped message; -1 if good, else first bad offset. */
long ru_check_stamped(const void *buf, size_t len, uint32_t seed, uint64_t stamp);

/* -------------------------------------------------------------- control */
/* Out-of-band control messages between the two processes (AF_UNIX
 * socketpair made before fork): test parameters, buffer addresses and
 * keys, ready/done/result. Not part of anything measured on the data path
 * except where a test says so. */
struct ru_msg {
    uint32_t type;
    int32_t status;
    uint64_t a, b, c, d, e, f;
};
int ru_ctl_send(int fd, const struct ru_msg *m);
/* Waits at most timeout_ms; -EPIPE when the peer process is gone. */
int ru_ctl_recv(int fd, struct ru_msg *m, int timeout_ms);
/* Receive a message of an expected type (anything else is an error). */
int ru_ctl_expect(int fd, uint32_t type, struct ru_msg *m, int timeout_ms);

/* Fork a server and a client process joined by a control socketpair, run
 * fn(ctl_fd, arg) in each (role "server" / "client"), and wait at most
 * timeout_s for both; children still running then are killed. Returns 0
 * if both exited with status 0. The engine must not have been touched in
 * the calling process (each child opens its own device). */
int ru_run_pair(int (*server)(int ctl, void *arg), int (*client)(int ctl, void *arg), void *arg,
                int timeout_s);

/* --------------------------------------------------------------- RDMA */
struct ru_params {
    unsigned sq_depth; /* max_send_wr */
    unsigned rq_depth; /* max_recv_wr */
    unsigned ird, ord; /* inbound / outbound Read+atomic depth */
    int timeout_ms;    /* for connection setup and teardown */
};

struct ru_conn {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *scc, *rcc; /* one completion channel per CQ */
    struct ibv_cq *scq, *rcq;
    struct ibv_qp *qp;
    struct uiw_cm_channel *cm;
    struct uiw_listener *lis;
    struct uiw_conn *conn;
    unsigned sq_depth, rq_depth, ird, ord;
    int timeout_ms;
    unsigned peer_ird, peer_ord;
    char desc[160]; /* "127.0.0.1:x -> 127.0.0.1:y" once connected */
};

/* Device uiw_lo, PD, send and receive CQs (each with its completion
 * channel), an RC QP moved to INIT with remote access rights. */
int ru_open(struct ru_conn *c, const struct ru_params *p);
/* Server: listen on 127.0.0.1 port 0; *port is the port chosen. */
int ru_listen(struct ru_conn *c, uint16_t *port);
/* Server: wait for the connection request, accept it on c->qp, wait until
 * established. */
int ru_accept(struct ru_conn *c);
/* Client: connect c->qp to 127.0.0.1:port and wait until established. */
int ru_connect(struct ru_conn *c, uint16_t port);
/* Orderly disconnect (initiate or answer), wait for DISCONNECTED at most
 * timeout_ms; returns -ETIMEDOUT (after printing) if it did not come. */
int ru_disconnect(struct ru_conn *c, bool initiate, int timeout_ms);
/* Destroy everything (safe on a partly opened c). */
void ru_close(struct ru_conn *c);

/* A page-aligned buffer of len bytes, registered with access. */
struct ibv_mr *ru_reg(struct ru_conn *c, size_t len, int access);
void ru_dereg(struct ibv_mr *mr);
#define RU_ACCESS_ALL                                                                              \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

/* A peer's buffer as advertised over the control channel. */
struct ru_remote {
    uint64_t addr;
    uint32_t rkey;
    uint64_t len;
};

/* Posting. mr/off/len is the local SGE. flags: IBV_SEND_*. */
int ru_post_send(struct ru_conn *c, enum ibv_wr_opcode op, struct ibv_mr *mr, size_t off,
                 size_t len, const struct ru_remote *rem, uint64_t roff, uint64_t wr_id,
                 unsigned flags);
int ru_post_recv(struct ru_conn *c, struct ibv_mr *mr, size_t off, size_t len, uint64_t wr_id);
/* Fetch-and-Add (swap ignored) or Compare-and-Swap; the original 64-bit
 * value lands in mr at off. */
int ru_post_atomic(struct ru_conn *c, enum ibv_wr_opcode op, struct ibv_mr *mr, size_t off,
                   const struct ru_remote *rem, uint64_t roff, uint64_t compare_add, uint64_t swap,
                   uint64_t wr_id);

/* Poll cq (spin; after ru_spin_ns sleep on its channel) until n
 * completions are in wc[] (n <= wc array size) or the deadline passes.
 * Every completion must be IBV_WC_SUCCESS; anything else is printed
 * (status, opcode, wr_id) and gives -EIO. what names the wait in the
 * timeout message. Returns n. */
int ru_poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n, uint64_t deadline, const char *what);
/* Non-blocking: reap whatever is there (up to max), same status check.
 * Returns the count (>= 0) or -EIO. */
int ru_poll_some(struct ibv_cq *cq, struct ibv_wc *wc, int max);
/* Wait for one completion on cq through its completion channel only (arm,
 * re-poll, sleep in poll(2) on the channel fd); at most timeout_ms. */
int ru_wait_cq(struct ru_conn *c, struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms,
               const char *what);

/* For loops that poll by themselves: call ru_idle() each time a pass made
 * no progress, ru_idle_reset() when it did. With a cq: spins during
 * ru_spin_ns, then arms the cq (returns at once: poll once more), then
 * sleeps on its channel until an event or the deadline. Without (memory
 * polling): spins, then yields the CPU on each call. Returns 0, or
 * -ETIMEDOUT once the deadline has passed (the caller reports it). */
struct ru_idle {
    uint64_t since;
    bool armed;
};
static inline void ru_idle_reset(struct ru_idle *s)
{
    s->since = 0;
}
int ru_idle(struct ibv_cq *cq, struct ru_idle *s, uint64_t deadline);

/* ---------------------------------------------------------------- TCP */
/* Raw TCP over loopback with TCP_NODELAY, non-blocking sockets. */
int ru_tcp_listen(uint16_t *port); /* 127.0.0.1:0 */
int ru_tcp_accept(int lfd, int timeout_ms);
int ru_tcp_connect(uint16_t port, int timeout_ms);
/* Move exactly len bytes with MSG_DONTWAIT; when the socket is full or
 * empty: spin (then poll(2) after ru_spin_ns), or with spin false sleep in
 * poll(2) at once, as a streaming application does. Bounded by deadline. */
int ru_tcp_send_all(int fd, const void *buf, size_t len, bool spin, uint64_t deadline);
int ru_tcp_recv_all(int fd, void *buf, size_t len, bool spin, uint64_t deadline);

/* -------------------------------------------------------------- stats */
/* Sort samples (ns) and return the p-th percentile (0..100), in ns. */
double ru_percentile(uint64_t *samples, size_t n, double p);
/* GB/s with 2 decimals, or 3 significant digits below 0.1 */
const char *ru_gbps_str(double gbps, char *buf, size_t cap);
/* "8 B", "4 KiB", "1 MiB" */
const char *ru_size_str(size_t size, char *buf, size_t cap);
/* Parse "64", "4k", "4KiB", "1M", "1MiB" (case-insensitive); 0 on error. */
size_t ru_parse_size(const char *s);

#ifdef __cplusplus
}
#endif
#endif
