/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The progress thread's registrations (progress.c: uiw_progress_add, _mod,
 * _del), whose epoll_ctl runs outside the thread's lock since 2026-11-28:
 * the contract engine.h gives them, checked on socket pairs.
 *   1. an added fd's callback runs with its object and events; a second
 *      add is -EEXIST; del twice is -ENOENT;
 *   2. an add that epoll refuses (a regular file: EPERM) leaves nothing
 *      behind: the same fd number, a socket now, can be added;
 *   3. mod hands the fd to a new callback; a mod that epoll refuses
 *      (EPOLLEXCLUSIVE: EINVAL) leaves it with the old one;
 *   4. del from another thread waits for a running callback;
 *   5. del inside the fd's own callback returns at once, and the callback
 *      is not called again;
 *   6. two threads adding, firing and removing 3000 socket pairs each while
 *      the progress thread dispatches: every callback gets its own object,
 *      none runs after its del returned, none is lost;
 *   7. park takes the fd out of epoll altogether (not even the hang-up
 *      epoll always reports comes), the next mod puts it back and reports
 *      what came meanwhile; a mod that epoll refuses leaves it parked; a
 *      park that epoll refuses leaves it registered, not parked; del of a
 *      parked fd leaves nothing behind.
 * Run under ASan and TSan in CI (scripts/test.sh).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "testutil.h"

#define MAGIC 0x5eed1234u

struct obj {
    unsigned magic;
    int fd;
    atomic_int calls;
    atomic_uint last_events;
    atomic_bool removed; /* set once del returned: no call may follow */
    atomic_int late;     /* calls that came after del returned */
    atomic_bool running, done;
    int sleep_ms;      /* cb_slow */
    bool del_self;     /* cb_self */
    atomic_int del_rc; /* cb_self: what its del returned */
};

static atomic_int bad_magic;

static void drain(int fd)
{
    char b[64];
    while (recv(fd, b, sizeof(b), MSG_DONTWAIT) > 0)
        ;
}

static void cb_count(void *p, uint32_t events)
{
    struct obj *o = p;

    if (o->magic != MAGIC)
        atomic_fetch_add(&bad_magic, 1);
    if (atomic_load(&o->removed))
        atomic_fetch_add(&o->late, 1);
    atomic_store(&o->last_events, events);
    drain(o->fd);
    atomic_fetch_add(&o->calls, 1);
}

static void cb_slow(void *p, uint32_t events)
{
    struct obj *o = p;
    struct timespec ts = {0, (long)o->sleep_ms * 1000000L};

    (void)events;
    atomic_store(&o->running, true);
    nanosleep(&ts, NULL);
    drain(o->fd);
    atomic_store(&o->done, true);
    atomic_fetch_add(&o->calls, 1);
}

static void cb_self(void *p, uint32_t events)
{
    struct obj *o = p;

    (void)events;
    if (atomic_load(&o->removed))
        atomic_fetch_add(&o->late, 1);
    atomic_fetch_add(&o->calls, 1);
    if (o->del_self) {
        atomic_store(&o->del_rc, uiw_progress_del(o->fd));
        atomic_store(&o->removed, true);
    }
}

/* Wait up to ms for *v to reach at least want. */
static bool wait_for(atomic_int *v, int want, int ms)
{
    for (int i = 0; i < ms; i++) {
        if (atomic_load(v) >= want)
            return true;
        usleep(1000);
    }
    return atomic_load(v) >= want;
}

static void obj_init(struct obj *o, int fd)
{
    memset(o, 0, sizeof(*o));
    o->magic = MAGIC;
    o->fd = fd;
}

static void pair_open(int sv[2])
{
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void pair_close(int sv[2])
{
    close(sv[0]);
    close(sv[1]);
}

static void t_basic(void)
{
    int sv[2];
    struct obj o;

    pair_open(sv);
    obj_init(&o, sv[0]);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, cb_count, &o), 0);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, cb_count, &o), -EEXIST);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK(wait_for(&o.calls, 1, 2000));
    CHECK(atomic_load(&o.last_events) & EPOLLIN);
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    atomic_store(&o.removed, true);
    CHECK_EQ(uiw_progress_del(sv[0]), -ENOENT);
    CHECK_EQ(write(sv[1], "y", 1), 1);
    usleep(50000);
    CHECK_EQ(atomic_load(&o.late), 0);
    CHECK_EQ(uiw_progress_add(-1, EPOLLIN, cb_count, &o), -EINVAL);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, NULL, &o), -EINVAL);
    pair_close(sv);
}

static void t_failed_add(void)
{
    char path[] = "/tmp/uiw_progress_XXXXXX";
    int f = mkstemp(path), sv[2];
    struct obj o;

    CHECK(f >= 0);
    unlink(path);
    pair_open(sv);
    obj_init(&o, f);
    /* epoll takes no regular files */
    CHECK_EQ(uiw_progress_add(f, EPOLLIN, cb_count, &o), -EPERM);
    /* the same number, now a socket: nothing was left registered */
    CHECK_EQ(dup2(sv[0], f), f);
    CHECK_EQ(uiw_progress_add(f, EPOLLIN, cb_count, &o), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK(wait_for(&o.calls, 1, 2000));
    CHECK_EQ(uiw_progress_del(f), 0);
    close(f);
    pair_close(sv);
}

static void t_mod(void)
{
    int sv[2];
    struct obj a, b;

    pair_open(sv);
    obj_init(&a, sv[0]);
    obj_init(&b, sv[0]);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN | EPOLLET, cb_count, &a), 0);
    /* handed over: b gets the next event */
    CHECK_EQ(uiw_progress_mod(sv[0], EPOLLIN | EPOLLET, cb_count, &b), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK(wait_for(&b.calls, 1, 2000));
    CHECK_EQ(atomic_load(&a.calls), 0);
    /* refused by epoll (EPOLLEXCLUSIVE is ADD only): b keeps it */
    CHECK_EQ(uiw_progress_mod(sv[0], EPOLLIN | EPOLLEXCLUSIVE, cb_count, &a), -EINVAL);
    CHECK_EQ(write(sv[1], "y", 1), 1);
    CHECK(wait_for(&b.calls, 2, 2000));
    CHECK_EQ(atomic_load(&a.calls), 0);
    CHECK_EQ(uiw_progress_mod(sv[1], EPOLLIN, cb_count, &a), -ENOENT);
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    pair_close(sv);
}

static void t_park(void)
{
    int sv[2];
    struct obj a, b;

    CHECK_EQ(uiw_progress_park(-1), -EINVAL);
    pair_open(sv);
    obj_init(&a, sv[0]);
    obj_init(&b, sv[0]);
    CHECK_EQ(uiw_progress_park(sv[0]), -ENOENT);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN | EPOLLET, cb_count, &a), 0);
    CHECK_EQ(uiw_progress_park(sv[0]), 0);
    CHECK_EQ(uiw_progress_park(sv[0]), 0); /* parked already */
    CHECK_EQ(write(sv[1], "x", 1), 1);
    usleep(50000);
    CHECK_EQ(atomic_load(&a.calls), 0);
    /* back, to b: the byte that came while parked is reported */
    CHECK_EQ(uiw_progress_mod(sv[0], EPOLLIN | EPOLLET, cb_count, &b), 0);
    CHECK(wait_for(&b.calls, 1, 2000));
    CHECK_EQ(atomic_load(&a.calls), 0);
    /* parked again; a mod that epoll refuses (EPOLLEXCLUSIVE with
     * EPOLLONESHOT: EINVAL on the ADD) leaves it parked and with b */
    CHECK_EQ(uiw_progress_park(sv[0]), 0);
    CHECK_EQ(uiw_progress_mod(sv[0], EPOLLIN | EPOLLEXCLUSIVE | EPOLLONESHOT, cb_count, &a),
             -EINVAL);
    /* out of epoll: even the hang-up (which epoll reports whatever the
     * events asked) does not come */
    close(sv[1]);
    usleep(50000);
    CHECK_EQ(atomic_load(&a.calls), 0);
    CHECK_EQ(atomic_load(&b.calls), 1);
    CHECK_EQ(uiw_progress_mod(sv[0], EPOLLIN | EPOLLRDHUP | EPOLLET, cb_count, &b), 0);
    CHECK(wait_for(&b.calls, 2, 2000));
    CHECK(atomic_load(&b.last_events) & (EPOLLHUP | EPOLLRDHUP));
    CHECK_EQ(atomic_load(&a.calls), 0);
    /* del of a parked fd: nothing left in epoll, the number can be added */
    CHECK_EQ(uiw_progress_park(sv[0]), 0);
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    CHECK_EQ(uiw_progress_park(sv[0]), -ENOENT);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, cb_count, &a), 0);
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    close(sv[0]);

    /* a park that epoll refuses (the fd closed behind the registration's
     * back: EBADF) says so and leaves the registration as it was, not
     * parked; del still removes it. A fresh, quiet pair: no event comes */
    pair_open(sv);
    obj_init(&a, sv[0]);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN | EPOLLET, cb_count, &a), 0);
    close(sv[0]);
    CHECK_EQ(uiw_progress_park(sv[0]), -EBADF);
    CHECK_EQ(uiw_progress_park(sv[0]), -EBADF); /* not marked parked */
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    CHECK_EQ(uiw_progress_park(sv[0]), -ENOENT);
    close(sv[1]);
}

static void t_del_waits(void)
{
    int sv[2];
    struct obj o;

    pair_open(sv);
    obj_init(&o, sv[0]);
    o.sleep_ms = 150;
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, cb_slow, &o), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    for (int i = 0; i < 2000 && !atomic_load(&o.running); i++)
        usleep(1000);
    CHECK(atomic_load(&o.running));
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    CHECK(atomic_load(&o.done)); /* del returned after the callback did */
    pair_close(sv);
}

static void t_del_self(void)
{
    int sv[2];
    struct obj o;

    pair_open(sv);
    obj_init(&o, sv[0]);
    o.del_self = true;
    /* level-triggered and never drained: only the del stops the calls */
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN, cb_self, &o), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK(wait_for(&o.calls, 1, 2000));
    usleep(50000);
    CHECK_EQ(atomic_load(&o.calls), 1);
    CHECK_EQ(atomic_load(&o.del_rc), 0);
    CHECK_EQ(atomic_load(&o.late), 0);
    /* the fd is free again */
    o.del_self = false;
    atomic_store(&o.removed, false);
    CHECK_EQ(uiw_progress_add(sv[0], EPOLLIN | EPOLLET, cb_count, &o), 0);
    CHECK_EQ(write(sv[1], "y", 1), 1);
    CHECK(wait_for(&o.calls, 2, 2000));
    CHECK_EQ(uiw_progress_del(sv[0]), 0);
    pair_close(sv);
}

#define STRESS_N 3000

struct stress {
    int fired, lost, late, errors;
};

static void *stress_thread(void *arg)
{
    struct stress *st = arg;

    for (int i = 0; i < STRESS_N; i++) {
        int sv[2];
        struct obj *o = malloc(sizeof(*o));

        if (!o || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
            st->errors++;
            free(o);
            continue;
        }
        obj_init(o, sv[0]);
        /* fired before the add half of the time: the add reports it */
        if (i & 1 && write(sv[1], "x", 1) != 1)
            st->errors++;
        if (uiw_progress_add(sv[0], EPOLLIN | EPOLLET, cb_count, o)) {
            st->errors++;
        } else {
            if (!(i & 1) && write(sv[1], "x", 1) != 1)
                st->errors++;
            if (i % 3 == 0 && uiw_progress_mod(sv[0], EPOLLIN | EPOLLET, cb_count, o))
                st->errors++;
            /* most are removed before or while their callback runs */
            if (i % 4 == 0) {
                if (wait_for(&o->calls, 1, 2000))
                    st->fired++;
                else
                    st->lost++;
            }
            if (uiw_progress_del(sv[0]))
                st->errors++;
            atomic_store(&o->removed, true);
        }
        close(sv[0]);
        close(sv[1]);
        st->late += atomic_load(&o->late);
        free(o); /* no callback may touch it any more */
    }
    return NULL;
}

static void t_stress(void)
{
    pthread_t th[2];
    struct stress st[2];

    memset(st, 0, sizeof(st));
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, stress_thread, &st[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ(st[i].errors, 0);
        CHECK_EQ(st[i].lost, 0);
        CHECK_EQ(st[i].late, 0);
        CHECK_EQ(st[i].fired, (STRESS_N + 3) / 4);
    }
}

int main(void)
{
    t_basic();
    t_failed_add();
    t_mod();
    t_park();
    t_del_waits();
    t_del_self();
    t_stress();
    CHECK_EQ(atomic_load(&bad_magic), 0);
    TEST_MAIN_END();
}
