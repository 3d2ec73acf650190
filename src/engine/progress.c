/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The process-wide progress thread and poll-driven progress (docs/ENGINE.md
 * "Threads, locks, progress").
 *
 * One thread, started on first use, sleeps in epoll_wait on:
 *   - every registered fd (the data path registers connected sockets with
 *     edge-triggered EPOLLIN, EPOLLOUT only while transmission is blocked;
 *     the CM registers its handshake and listening sockets),
 *   - an eventfd that wakes it when a timer is added from another thread,
 * with the timeout of the earliest timer (the timer heap, below). It never polls: with nothing
 * registered and no timer it blocks indefinitely.
 *
 * Registrations. Each uiw_progress_add creates a registration object with
 * a generation number; the epoll key is (generation << 32 | fd), so an
 * event that was already returned by epoll_wait for a registration that
 * has since been removed (or replaced by a new one for the same fd number)
 * is recognised and dropped. A callback runs with pg.lock released and the
 * registration marked busy:
 *   - uiw_progress_del from another thread waits until it is no longer
 *     busy, so on return no callback for the fd runs or will run (the
 *     caller must not hold a lock the callback takes);
 *   - uiw_progress_del from the progress thread (inside any callback, also
 *     the fd's own) cannot wait for itself: it marks the registration dead
 *     and returns at once; the dispatcher frees it when the callback
 *     returns, and never calls it again. The same fd may be added again at
 *     once (a new registration, new generation).
 * Lock order: object locks (qp->lock, connection locks) -> pg.lock; the
 * dispatcher never holds pg.lock while calling out.
 *
 * Timers: one binary min-heap on the deadline (CLOCK_MONOTONIC) drives
 * epoll_wait's timeout; no timerfd. A timer is a struct uiw_timer embedded
 * in its object (uiw_timer_init reserves its heap slot, so arming cannot
 * fail), or a one-shot uiw_progress_timer. uiw_timer_fini and
 * uiw_progress_timer_cancel from another thread wait for a running
 * callback of that timer, with the same locking rule as uiw_progress_del.
 * O(log n) arm/disarm with thousands of connections.
 *
 * uiw_cq_drive: ibv_poll_cq on an empty CQ tries each QP of the CQ with
 * pthread_mutex_trylock and runs its receive (and transmit) processing.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

#define PG_MAX_EVENTS 64
#define PG_WAKE_KEY   UINT64_MAX
#define PG_DM_KEY     (UINT64_MAX - 1)

struct preg {
    int fd;
    uint32_t gen;
    uint32_t events;
    uiw_progress_cb cb;
    void *obj;
    bool dead;   /* removed: never called again */
    bool busy;   /* its callback is running */
    bool orphan; /* removed while busy on the progress thread: dispatcher frees */
    bool parked; /* out of the kernel's epoll set, kept here (uiw_progress_park) */
};

/* uiw_progress_timer's one-shot timers: allocated, freed after firing */
struct ptimer {
    struct uiw_timer t; /* first */
    void (*cb)(void *);
    void *obj;
};

static struct {
    pthread_once_t once;
    int init_err;
    pthread_mutex_t lock;
    pthread_cond_t idle; /* a callback (fd or timer) returned */
    int epfd, wakefd;
    pthread_t thread;
    struct preg **regs; /* indexed by fd */
    unsigned nregs;
    uint32_t gen;
    /* Timers: a binary min-heap on deadline_ns. Every initialised timer
     * has a slot reserved (heap_reserved <= heap_cap), so arming never
     * allocates and cannot fail. */
    struct uiw_timer **heap;
    unsigned heap_n, heap_cap, heap_reserved;
    uint64_t next_timer_id;
    const struct uiw_timer *timer_running; /* whose callback runs, NULL = none */
    uint64_t timer_running_id;             /* its id (uiw_progress_timer), else 0 */
} pg = {
    .once = PTHREAD_ONCE_INIT,
    /* adaptive, as the QP and CQ locks (engine.h uiw_mutex_init_adaptive):
     * the application's threads take it for registrations and timers while
     * the progress thread takes it per event; a loser slept in the kernel
     * (docs/PERFORMANCE.md, 2026-11-28 "stop 33") */
    .lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP,
    .idle = PTHREAD_COND_INITIALIZER,
    .epfd = -1,
    .wakefd = -1,
};

/* ThreadSanitizer does not see epoll_pwait2 (GCC 12's runtime intercepts
 * epoll_wait and epoll_pwait only), so it misses the order epoll gives: an
 * fd's ADD or MOD happens before the wait that reports it, hence before its
 * callback, which may close the fd. With epoll_ctl outside pg.lock the lock
 * no longer orders them either. So, as TSan models epoll_wait: released
 * before each ADD and MOD, acquired after each wait that returned events.
 * The interceptor of epoll_ctl itself would record a read of the fd after
 * that release, racing (for TSan) with a callback's close while the call
 * is still returning; the kernel holds its own reference on the file
 * meanwhile, so in TSan builds the call goes to the kernel directly. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define PG_EPOLL_ACQUIRE() __tsan_acquire(&pg.epfd)
static int pg_epoll_ctl(int op, int fd, struct epoll_event *ev)
{
    __tsan_release(&pg.epfd);
    return (int)syscall(SYS_epoll_ctl, pg.epfd, op, fd, ev);
}
#else
#define PG_EPOLL_ACQUIRE() ((void)0)
static int pg_epoll_ctl(int op, int fd, struct epoll_event *ev)
{
    return epoll_ctl(pg.epfd, op, fd, ev);
}
#endif

static _Thread_local bool on_progress_thread;

static uint64_t key_of(const struct preg *r)
{
    return (uint64_t)r->gen << 32 | (uint32_t)r->fd;
}

/* Wake the thread so it recomputes its timeout. */
static void wake(void)
{
    uint64_t one = 1;
    ssize_t w;

    if (pg.wakefd < 0 || on_progress_thread)
        return;
    w = write(pg.wakefd, &one, sizeof(one));
    (void)w; /* a full counter still wakes the thread */
}

/* epoll_pwait2 timeout: ns until the earliest timer; -1 if none. pg.lock held. */
static int64_t timeout_ns_locked(void)
{
    uint64_t now, d;

    if (!pg.heap_n)
        return -1;
    now = uiw_now_ns();
    if (pg.heap[0]->deadline_ns <= now)
        return 0;
    d = pg.heap[0]->deadline_ns - now;
    return d > 3600000000000ull ? 3600000000000ll : (int64_t)d;
}

/* epoll_wait with a ns timeout (timers of microseconds: qp_tx.c); kernels
 * before 5.11 lack epoll_pwait2: ms, rounded up */
static int wait_ns(struct epoll_event *evs, int max, int64_t tmo)
{
    static bool no_pwait2;
    struct timespec ts;

    if (!no_pwait2) {
        int n;

        ts.tv_sec = tmo < 0 ? 0 : tmo / 1000000000;
        ts.tv_nsec = tmo < 0 ? 0 : tmo % 1000000000;
        n = epoll_pwait2(pg.epfd, evs, max, tmo < 0 ? NULL : &ts, NULL);
        if (n > 0)
            PG_EPOLL_ACQUIRE();
        if (n >= 0 || errno != ENOSYS)
            return n;
        no_pwait2 = true;
    }
    return epoll_wait(pg.epfd, evs, max, tmo < 0 ? -1 : (int)((tmo + 999999) / 1000000));
}

/* ---- the timer heap (pg.lock held) ---- */

static void heap_set(unsigned i, struct uiw_timer *t)
{
    pg.heap[i] = t;
    t->idx = i + 1;
}

static void heap_up(unsigned i)
{
    struct uiw_timer *t = pg.heap[i];

    while (i > 0) {
        unsigned p = (i - 1) / 2;
        if (pg.heap[p]->deadline_ns <= t->deadline_ns)
            break;
        heap_set(i, pg.heap[p]);
        i = p;
    }
    heap_set(i, t);
}

static void heap_down(unsigned i)
{
    struct uiw_timer *t = pg.heap[i];

    for (;;) {
        unsigned c = 2 * i + 1;
        if (c >= pg.heap_n)
            break;
        if (c + 1 < pg.heap_n && pg.heap[c + 1]->deadline_ns < pg.heap[c]->deadline_ns)
            c++;
        if (t->deadline_ns <= pg.heap[c]->deadline_ns)
            break;
        heap_set(i, pg.heap[c]);
        i = c;
    }
    heap_set(i, t);
}

static void heap_remove(struct uiw_timer *t)
{
    unsigned i = t->idx - 1;
    struct uiw_timer *last = pg.heap[--pg.heap_n];

    t->idx = 0;
    if (last == t)
        return;
    heap_set(i, last);
    heap_down(i);
    heap_up(last->idx - 1);
}

/* Run every due timer; pg.lock held on entry and exit. */
static void run_timers_locked(void)
{
    for (;;) {
        struct uiw_timer *t = pg.heap_n ? pg.heap[0] : NULL;
        void (*cb)(void *);
        void *obj;

        if (!t || t->deadline_ns > uiw_now_ns())
            return;
        heap_remove(t);
        pg.timer_running = t;
        pg.timer_running_id = t->id;
        cb = t->cb;
        obj = t->obj;
        pthread_mutex_unlock(&pg.lock);
        cb(obj); /* may free t (uiw_timer_fini on this thread does not wait) */
        pthread_mutex_lock(&pg.lock);
        pg.timer_running = NULL;
        pg.timer_running_id = 0;
        pthread_cond_broadcast(&pg.idle);
    }
}

static void dispatch(const struct epoll_event *ev)
{
    int fd = (int)(uint32_t)ev->data.u64;
    uint32_t gen = (uint32_t)(ev->data.u64 >> 32);
    struct preg *r;
    uiw_progress_cb cb;
    void *obj;

    pthread_mutex_lock(&pg.lock);
    r = (fd >= 0 && (unsigned)fd < pg.nregs) ? pg.regs[fd] : NULL;
    if (!r || r->gen != gen || r->dead) {
        /* stale: removed (or replaced) after epoll_wait returned it */
        pthread_mutex_unlock(&pg.lock);
        return;
    }
    r->busy = true;
    cb = r->cb;
    obj = r->obj;
    pthread_mutex_unlock(&pg.lock);

    cb(obj, ev->events);

    pthread_mutex_lock(&pg.lock);
    r->busy = false;
    if (r->orphan)
        free(r);
    pthread_cond_broadcast(&pg.idle);
    pthread_mutex_unlock(&pg.lock);
}

/* UIWARP_PROGRESS_NICE: the progress thread places data that programs may
 * wait for by spinning on memory (perftest's write_lat), and with spinning
 * threads on every CPU it waits up to a scheduler slice for its turn; a
 * better nice value than theirs makes the scheduler run it at once, but
 * then it also preempts a sender on every message it receives (docs/ENGINE.md
 * "Threads, locks, progress"). Off by default. Lowering needs CAP_SYS_NICE
 * (or RLIMIT_NICE); without, the thread keeps the process's value. */
static void set_nice(void)
{
    const struct uiw_config *c = uiw_config();
    pid_t tid = (pid_t)syscall(SYS_gettid);

    if (!c->progress_nice_set)
        return;
    /* on Linux, PRIO_PROCESS with a thread id sets that thread's nice value */
    if (setpriority(PRIO_PROCESS, (id_t)tid, c->progress_nice) < 0)
        uiw_dbg(1, "progress thread: nice %d: %s (kept %d)", c->progress_nice, strerror(errno),
                getpriority(PRIO_PROCESS, (id_t)tid));
}

/*
 * Spinning (UIWARP_PROGRESS_SPIN_US, default 200 us). A program waiting in
 * ibv_get_cq_event (qperf's default, rping, fio) is woken by this thread,
 * which itself must first be woken by the socket: two wake-ups in a row per
 * message, each a cross-CPU IPI (on a VM, an exit). While some CQ with a
 * completion channel was armed lately (someone waits for events: a
 * ping-pong program re-arms after each event this thread delivers), and the
 * last time a QP's socket reported data to it is at most that long ago,
 * the thread polls epoll without sleeping, with sched_yield between polls
 * so that a woken application thread on the same CPU runs first: the data
 * finds it awake. Also while a thread busy-polling an empty CQ yields (cq.c
 * uiw_last_yield_ns): it gives the CPU away anyway, and the QPs it does not
 * poll (perftest's data QP beside the control QP it polls) are served
 * without a wake-up per segment. And while it answers Read or Atomic
 * Requests (a passive responder: the requester waits for each answer).
 * Not otherwise: a program that
 * spins on memory (ib_write_lat) would keep a runnable-but-yielding thread
 * waiting a whole time slice.
 * What it buys is measured in docs/ENGINE.md ("Threads, locks, progress").
 */
static uint64_t spin_ns;
static uint64_t last_data_ns; /* the progress thread's own */

void uiw_progress_data_seen(void)
{
    if (spin_ns && on_progress_thread)
        last_data_ns = uiw_now_ns();
}

static uint64_t last_resp_ns; /* the progress thread's own */

void uiw_progress_responder_seen(void)
{
    if (spin_ns && on_progress_thread)
        last_resp_ns = uiw_now_ns();
}

static bool should_spin(void)
{
    uint64_t now;

    if (!spin_ns)
        return false;
    now = uiw_now_ns();
    if (now - last_data_ns >= spin_ns)
        return false;
    /* a program waiting for events drives its CQs itself (cq.c, "Waiting") */
    if (atomic_load_explicit(&uiw_event_spinners, memory_order_relaxed))
        return false;
    if (now - atomic_load_explicit(&uiw_last_yield_ns, memory_order_relaxed) < 2 * spin_ns)
        return true;
    /* it answers Reads or Atomics: nobody else does (the requester waits) */
    if (now - last_resp_ns < 2 * spin_ns)
        return true;
    return now - atomic_load_explicit(&uiw_last_arm_ns, memory_order_relaxed) < 2 * spin_ns;
}

/* The dead man's switch (engine.h uiw_progress_deadman): a timerfd made
 * with the thread, so that it is there before any connection (one fd per
 * process, counted in every program's baseline). */
static int dm_fd = -1;
static void (*dm_cb)(void);
static int progress_start(void);

int uiw_progress_deadman(void (*cb)(void))
{
    int r = progress_start();

    if (r)
        return r;
    if (dm_fd < 0)
        return -ENOSYS;
    pthread_mutex_lock(&pg.lock);
    dm_cb = cb;
    pthread_mutex_unlock(&pg.lock);
    return 0;
}

void uiw_progress_deadman_arm(uint64_t ns)
{
    struct itimerspec it = {
        .it_value = {.tv_sec = (time_t)(ns / 1000000000u), .tv_nsec = (long)(ns % 1000000000u)}};

    if (dm_fd >= 0)
        (void)timerfd_settime(dm_fd, 0, &it, NULL);
}

static void deadman_fired(void)
{
    void (*cb)(void);
    uint64_t v;
    ssize_t rd = read(dm_fd, &v, sizeof(v)); /* clears the expiry */

    (void)rd;
    pthread_mutex_lock(&pg.lock);
    cb = dm_cb;
    pthread_mutex_unlock(&pg.lock);
    if (cb)
        cb();
}

/* The thread's first malloc or free maps its glibc arena (mmap, munmap).
 * libfabric's memory monitor (memhooks) rewrites mmap, munmap, madvise, brk
 * and others in place in libc's text when a program opens its first domain;
 * a thread inside one of those calls then returns into half-written
 * instructions (fi_pingpong -e rdm: SIGSEGV in munmap under the progress
 * thread's first free, a one-shot timer's, docs/APPS.md). So the thread
 * takes its arena before progress_start returns, while no program code runs
 * beside it; afterwards its small allocations use it without system calls. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool ready;
} pg_start = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};

static void *progress_main(void *arg)
{
    struct epoll_event evs[PG_MAX_EVENTS];
    bool spinning;
    void *volatile warm = malloc(64);

    (void)arg;
    free(warm);
    pthread_mutex_lock(&pg_start.lock);
    pg_start.ready = true;
    pthread_cond_broadcast(&pg_start.cond);
    pthread_mutex_unlock(&pg_start.lock);
    on_progress_thread = true;
    set_nice();
    spin_ns = (uint64_t)uiw_config()->progress_spin_us * 1000u;
    for (;;) {
        int n;
        int64_t tmo;

        pthread_mutex_lock(&pg.lock);
        run_timers_locked();
        tmo = timeout_ns_locked();
        pthread_mutex_unlock(&pg.lock);

        spinning = tmo != 0 && should_spin();
        if (spinning)
            tmo = 0;
        n = wait_ns(evs, PG_MAX_EVENTS, tmo);
        if (n == 0 && spinning)
            sched_yield(); /* a thread woken on this CPU (the application) goes first */
        if (n < 0) {
            if (errno == EINTR)
                continue;
            uiw_log("progress: epoll_wait: %s", strerror(errno));
            struct timespec ts = {0, 10000000}; /* should not happen; do not spin */
            nanosleep(&ts, NULL);
            continue;
        }
        for (int i = 0; i < n; i++) {
            if (evs[i].data.u64 == PG_DM_KEY) {
                deadman_fired();
                continue;
            }
            if (evs[i].data.u64 == PG_WAKE_KEY) {
                uint64_t v;
                ssize_t rd = read(pg.wakefd, &v, sizeof(v));
                (void)rd;
                continue;
            }
            dispatch(&evs[i]);
        }
    }
    return NULL;
}

static void progress_init(void)
{
    struct epoll_event ev;
    sigset_t all, old;
    pthread_attr_t attr;
    int err;

    pg.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (pg.epfd < 0) {
        pg.init_err = -errno;
        return;
    }
    pg.wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pg.wakefd < 0) {
        pg.init_err = -errno;
        close(pg.epfd);
        pg.epfd = -1;
        return;
    }
    memset(&ev, 0, sizeof(ev));
    ev.events = EPOLLIN;
    ev.data.u64 = PG_WAKE_KEY;
    if (epoll_ctl(pg.epfd, EPOLL_CTL_ADD, pg.wakefd, &ev) < 0) {
        pg.init_err = -errno;
        goto fail;
    }
    /* without it, nobody owns sockets (qp_dp.c): not fatal */
    dm_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (dm_fd >= 0) {
        ev.events = EPOLLIN;
        ev.data.u64 = PG_DM_KEY;
        if (epoll_ctl(pg.epfd, EPOLL_CTL_ADD, dm_fd, &ev) < 0) {
            close(dm_fd);
            dm_fd = -1;
        }
    }
    /* The application's signal handlers must not run on our thread. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    err = pthread_create(&pg.thread, &attr, progress_main, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        pg.init_err = -err;
        goto fail;
    }
    pthread_setname_np(pg.thread, "uiw-progress");
    pthread_mutex_lock(&pg_start.lock);
    while (!pg_start.ready)
        pthread_cond_wait(&pg_start.cond, &pg_start.lock);
    pthread_mutex_unlock(&pg_start.lock);
    return;
fail:
    close(pg.wakefd);
    close(pg.epfd);
    pg.wakefd = pg.epfd = -1;
}

static int progress_start(void)
{
    pthread_once(&pg.once, progress_init);
    return pg.init_err;
}

/* pg.lock held */
static int regs_grow_locked(int fd)
{
    unsigned n;
    struct preg **nr;

    if ((unsigned)fd < pg.nregs)
        return 0;
    n = pg.nregs ? pg.nregs : 64;
    while (n <= (unsigned)fd)
        n *= 2;
    nr = realloc(pg.regs, n * sizeof(*nr));
    if (!nr)
        return -ENOMEM;
    memset(nr + pg.nregs, 0, (n - pg.nregs) * sizeof(*nr));
    pg.regs = nr;
    pg.nregs = n;
    return 0;
}

int uiw_progress_add(int fd, uint32_t events, uiw_progress_cb cb, void *obj)
{
    struct epoll_event ev;
    struct preg *r;
    int ret;

    if (fd < 0 || !cb)
        return -EINVAL;
    ret = progress_start();
    if (ret)
        return ret;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    pthread_mutex_lock(&pg.lock);
    ret = regs_grow_locked(fd);
    if (!ret && pg.regs[fd])
        ret = -EEXIST;
    if (ret) {
        pthread_mutex_unlock(&pg.lock);
        free(r);
        return ret;
    }
    r->fd = fd;
    r->gen = ++pg.gen;
    r->events = events;
    r->cb = cb;
    r->obj = obj;
    pg.regs[fd] = r;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.u64 = key_of(r);
    pthread_mutex_unlock(&pg.lock);
    /* epoll_ctl outside pg.lock (also in _mod and _del): the progress
     * thread takes pg.lock for every event, and a holder inside a system
     * call (or preempted in it) sent it to sleep on the lock; in connection
     * setup, where both threads register sockets, that was a futex sleep
     * and wake-up per connection (docs/PERFORMANCE.md, 2026-11-28 "stop
     * 33"). The registration is in place first, so the first event finds
     * it. The fd's owner serialises add, mod and del of its fd, and removes
     * it before closing it, so no other call for this fd number runs in
     * between. */
    if (pg_epoll_ctl(EPOLL_CTL_ADD, fd, &ev) < 0) {
        ret = -errno;
        pthread_mutex_lock(&pg.lock);
        if (pg.regs[fd] == r) { /* never in epoll: no callback ran */
            pg.regs[fd] = NULL;
            free(r);
        }
        pthread_mutex_unlock(&pg.lock);
        return ret;
    }
    return 0;
}

/* fd's registration with pg.lock taken, or NULL (lock not held). */
static struct preg *reg_lock(int fd)
{
    struct preg *r;

    pthread_mutex_lock(&pg.lock);
    r = (unsigned)fd < pg.nregs ? pg.regs[fd] : NULL;
    if (!r)
        pthread_mutex_unlock(&pg.lock);
    return r;
}

int uiw_progress_mod(int fd, uint32_t events, uiw_progress_cb cb, void *obj)
{
    struct epoll_event ev;
    struct preg *r;
    uiw_progress_cb ocb;
    void *oobj;
    uint32_t oevents, gen;
    bool parked;

    if (fd < 0 || !cb)
        return -EINVAL;
    if (!(r = reg_lock(fd)))
        return -ENOENT;
    /* the new callback first (an event epoll already returned may reach
     * it), epoll_ctl outside pg.lock (uiw_progress_add) */
    ocb = r->cb;
    oobj = r->obj;
    oevents = r->events;
    gen = r->gen;
    parked = r->parked;
    r->events = events;
    r->cb = cb;
    r->obj = obj;
    r->parked = false;
    memset(&ev, 0, sizeof(ev));
    ev.events = events;
    ev.data.u64 = key_of(r);
    pthread_mutex_unlock(&pg.lock);
    /* With EPOLLET, a MOD re-checks readiness and reports a ready fd again:
     * this is also how a callback that stopped early re-arms itself. A
     * parked fd goes back in with an ADD, which reports it the same way. */
    if (pg_epoll_ctl(parked ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    int ret = -errno;
    /* the registration keeps its owner (a failed hand-over) */
    pthread_mutex_lock(&pg.lock);
    r = pg.regs[fd];
    if (r && r->gen == gen && r->cb == cb && r->obj == obj) {
        r->cb = ocb;
        r->obj = oobj;
        r->events = oevents;
        r->parked = parked;
    }
    pthread_mutex_unlock(&pg.lock);
    return ret;
}

int uiw_progress_park(int fd)
{
    struct preg *r;
    uint32_t gen;

    if (fd < 0)
        return -EINVAL;
    if (!(r = reg_lock(fd)))
        return -ENOENT;
    if (r->parked) {
        pthread_mutex_unlock(&pg.lock);
        return 0;
    }
    r->parked = true;
    gen = r->gen;
    pthread_mutex_unlock(&pg.lock);
    /* out of epoll: the socket's wait queue loses epoll's entry, so data
     * that arrives no longer runs epoll's callback (and its locks) in the
     * sender's sendmsg (docs/ENGINE.md "Poll ownership") */
    if (pg_epoll_ctl(EPOLL_CTL_DEL, fd, NULL) == 0)
        return 0;
    int ret = -errno;
    pthread_mutex_lock(&pg.lock);
    r = pg.regs[fd];
    if (r && r->gen == gen)
        r->parked = false; /* still in epoll as it was */
    pthread_mutex_unlock(&pg.lock);
    return ret;
}

int uiw_progress_del(int fd)
{
    struct preg *r;

    if (fd < 0)
        return -EINVAL;
    if (!(r = reg_lock(fd)))
        return -ENOENT;
    pg.regs[fd] = NULL;
    r->dead = true;
    pthread_mutex_unlock(&pg.lock);
    /* outside pg.lock (uiw_progress_add); an event returned meanwhile finds
     * no registration and is dropped. EBADF/ENOENT if the fd was closed
     * already: nothing left to remove */
    (void)epoll_ctl(pg.epfd, EPOLL_CTL_DEL, fd, NULL);
    pthread_mutex_lock(&pg.lock);
    if (r->busy) {
        if (on_progress_thread) {
            /* inside a callback on this very thread (its own fd or another
             * one running is impossible: one callback at a time) */
            r->orphan = true;
            pthread_mutex_unlock(&pg.lock);
            return 0;
        }
        while (r->busy)
            pthread_cond_wait(&pg.idle, &pg.lock);
    }
    free(r);
    pthread_mutex_unlock(&pg.lock);
    return 0;
}

int uiw_timer_init(struct uiw_timer *t, void (*cb)(void *), void *obj)
{
    int ret;

    if (!t || !cb)
        return -EINVAL;
    memset(t, 0, sizeof(*t));
    ret = progress_start();
    if (ret)
        return ret;
    pthread_mutex_lock(&pg.lock);
    struct uiw_timer **heap = uiw_room(pg.heap, pg.heap_reserved, &pg.heap_cap, 64, sizeof(*heap));
    if (!heap) {
        pthread_mutex_unlock(&pg.lock);
        return -ENOMEM;
    }
    pg.heap = heap;
    pg.heap_reserved++;
    t->reserved = true;
    t->cb = cb;
    t->obj = obj;
    pthread_mutex_unlock(&pg.lock);
    return 0;
}

static void timer_arm_ns(struct uiw_timer *t, uint64_t ns)
{
    bool first;

    if (!t)
        return;
    pthread_mutex_lock(&pg.lock);
    if (!t->reserved) { /* never initialised, or finished */
        pthread_mutex_unlock(&pg.lock);
        return;
    }
    t->deadline_ns = uiw_now_ns() + ns;
    if (t->idx) {
        heap_down(t->idx - 1);
        heap_up(t->idx - 1);
    } else {
        pg.heap[pg.heap_n++] = t; /* room: a slot is reserved for every timer */
        heap_up(pg.heap_n - 1);
    }
    first = pg.heap[0] == t;
    pthread_mutex_unlock(&pg.lock);
    if (first)
        wake();
}

void uiw_timer_arm(struct uiw_timer *t, unsigned ms)
{
    timer_arm_ns(t, (uint64_t)ms * 1000000u);
}

void uiw_timer_arm_us(struct uiw_timer *t, uint64_t us)
{
    timer_arm_ns(t, us * 1000u);
}

void uiw_timer_disarm(struct uiw_timer *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&pg.lock);
    if (t->idx)
        heap_remove(t);
    pthread_mutex_unlock(&pg.lock);
}

bool uiw_timer_pending(struct uiw_timer *t)
{
    bool q;

    if (!t)
        return false;
    pthread_mutex_lock(&pg.lock);
    q = t->idx != 0;
    pthread_mutex_unlock(&pg.lock);
    return q;
}

void uiw_timer_fini(struct uiw_timer *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&pg.lock);
    if (!t->reserved) {
        pthread_mutex_unlock(&pg.lock);
        return;
    }
    if (t->idx)
        heap_remove(t);
    if (!on_progress_thread)
        while (pg.timer_running == t)
            pthread_cond_wait(&pg.idle, &pg.lock);
    t->reserved = false;
    pg.heap_reserved--;
    pthread_mutex_unlock(&pg.lock);
}

static void ptimer_fire(void *obj)
{
    struct ptimer *p = obj;

    p->cb(p->obj);
    uiw_timer_fini(&p->t); /* on this thread: does not wait */
    free(p);
}

UIW_EXPORT int uiw_progress_timer(unsigned ms, void (*cb)(void *), void *obj, uint64_t *id)
{
    struct ptimer *p;
    int ret;

    if (!cb)
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    ret = uiw_timer_init(&p->t, ptimer_fire, p);
    if (ret) {
        free(p);
        return ret;
    }
    p->cb = cb;
    p->obj = obj;
    pthread_mutex_lock(&pg.lock);
    p->t.id = ++pg.next_timer_id;
    if (id)
        *id = p->t.id;
    pthread_mutex_unlock(&pg.lock);
    uiw_timer_arm(&p->t, ms);
    return 0;
}

void uiw_progress_timer_cancel(uint64_t id)
{
    if (!id)
        return;
    pthread_mutex_lock(&pg.lock);
    for (unsigned i = 0; i < pg.heap_n; i++) {
        struct uiw_timer *t = pg.heap[i];

        if (t->id == id) {
            heap_remove(t);
            t->reserved = false;
            pg.heap_reserved--;
            pthread_mutex_unlock(&pg.lock);
            free((struct ptimer *)t);
            return;
        }
    }
    /* not queued: fired already, or firing right now */
    if (!on_progress_thread)
        while (pg.timer_running_id == id)
            pthread_cond_wait(&pg.idle, &pg.lock);
    pthread_mutex_unlock(&pg.lock);
}

/* The i-th QP of cq with a reference (uiw_qp_put), taken under cq->lock
 * and returned with it released; NULL past the last one. */
static struct uiw_qp *cq_qp_get(struct uiw_cq *cq, unsigned i)
{
    struct uiw_qp *qp = NULL;

    pthread_mutex_lock(&cq->lock);
    if (i < cq->nqps) {
        qp = cq->qps[i];
        uiw_qp_get(qp);
    }
    pthread_mutex_unlock(&cq->lock);
    return qp;
}

unsigned uiw_cq_qps_get(struct uiw_cq *cq, struct uiw_qp **out, unsigned max)
{
    unsigned n;

    pthread_mutex_lock(&cq->lock);
    n = cq->nqps;
    if (n <= max)
        for (unsigned i = 0; i < n; i++) {
            out[i] = cq->qps[i];
            uiw_qp_get(out[i]);
        }
    pthread_mutex_unlock(&cq->lock);
    return n;
}

/* Read qp's socket if its lock is free (lock order qp -> cq: only a
 * trylock, with cq->lock released): false if it is busy, its holder (or
 * the progress thread, which got the readiness edge) draining it. */
static bool qp_try_rx(struct uiw_qp *qp, bool drain, bool own, bool *read)
{
    if (pthread_mutex_trylock(&qp->lock) != 0)
        return false;
    if (qp->fd >= 0) {
        if (drain) {
            if (uiw_qp_rx_wait_drive(qp))
                *read = true;
        } else {
            uiw_qp_poll_own(qp, own); /* before the read: what comes after is ours */
            if (uiw_qp_rx_poll(qp))
                *read = true;
        }
    }
    pthread_mutex_unlock(&qp->lock);
    return true;
}

void uiw_cq_flush_tx(struct uiw_cq *cq)
{
    if (!atomic_load_explicit(&cq->tx_deferred, memory_order_relaxed))
        return;
    struct uiw_qp *qp;

    for (unsigned i = 0; (qp = cq_qp_get(cq, i)); i++) {
        /* lock order qp -> cq, as in uiw_cq_drive; a busy QP's holder (or
         * the progress thread, which got the EPOLLOUT edge) transmits */
        if (pthread_mutex_trylock(&qp->lock) == 0) {
            if (qp->tx_deferred) {
                uiw_qp_tx_progress(qp);
                /* the stream goes on: its next post is measured from
                 * here, not from the post before this flush (qp_tx.c
                 * tx_defer), or a program that posts a burst, polls and
                 * posts again sent the first posts of every burst alone */
                qp->tx_post_ns = uiw_now_ns();
            }
            pthread_mutex_unlock(&qp->lock);
        }
        uiw_qp_put(qp);
    }
}

void uiw_cq_drive_add(struct uiw_cq *cq, struct uiw_qp *qp)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = qp};

    pthread_mutex_lock(&cq->lock);
    if (cq->drive_ep >= 0 && qp->fd >= 0)
        (void)epoll_ctl(cq->drive_ep, EPOLL_CTL_ADD, qp->fd, &ev); /* EEXIST: is in */
    pthread_mutex_unlock(&cq->lock);
}

void uiw_cq_drive_again(struct uiw_cq *cq, struct uiw_qp *qp)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = qp};

    if (!cq)
        return;
    pthread_mutex_lock(&cq->lock);
    if (cq->drive_ep >= 0 && qp->fd >= 0) /* with EPOLLET a MOD reports it again */
        (void)epoll_ctl(cq->drive_ep, EPOLL_CTL_MOD, qp->fd, &ev);
    pthread_mutex_unlock(&cq->lock);
}

void uiw_cq_drive_del(struct uiw_cq *cq, struct uiw_qp *qp)
{
    pthread_mutex_lock(&cq->lock);
    if (cq->drive_ep >= 0 && qp->fd >= 0)
        (void)epoll_ctl(cq->drive_ep, EPOLL_CTL_DEL, qp->fd, NULL);
    pthread_mutex_unlock(&cq->lock);
}

/* Make the CQ's readiness set and put the QPs attached so far in it (those
 * that get a socket later add themselves, uiw_cq_drive_add). */
static void drive_ep_make(struct uiw_cq *cq)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);

    if (ep < 0)
        return; /* scan on */
    pthread_mutex_lock(&cq->lock);
    if (cq->drive_ep >= 0) {
        pthread_mutex_unlock(&cq->lock);
        close(ep);
        return;
    }
    cq->drive_ep = ep;
    pthread_mutex_unlock(&cq->lock);
    struct uiw_qp *qp;

    for (unsigned i = 0; (qp = cq_qp_get(cq, i)); i++) {
        pthread_mutex_lock(&qp->lock); /* qp->fd; order qp -> cq */
        uiw_cq_drive_add(cq, qp);
        pthread_mutex_unlock(&qp->lock);
        uiw_qp_put(qp);
    }
}

/* The readiness set's way: only QPs whose socket got data since the last
 * look. Edge-triggered: data the progress thread (which has its own edge)
 * or an earlier poll consumed gives at most a read that finds nothing. */
static bool drive_ready(struct uiw_cq *cq, int ep, bool drain, bool own)
{
    struct epoll_event evs[16];
    bool busy = false, read = false;
    int n;

    pthread_mutex_lock(&cq->lock);
    cq->drivers++;
    pthread_mutex_unlock(&cq->lock);
    n = epoll_wait(ep, evs, 16, 0);
    for (int i = 0; i < n; i++) {
        struct uiw_qp *qp = evs[i].data.ptr; /* alive: cq_del_qp waits for drivers */

        if (!qp_try_rx(qp, drain, own, &read))
            busy = true;
    }
    pthread_mutex_lock(&cq->lock);
    if (--cq->drivers == 0)
        pthread_cond_broadcast(&cq->drive_cv);
    pthread_mutex_unlock(&cq->lock);
    if (busy)
        sched_yield();
    return read || busy;
}

bool uiw_cq_drive(struct uiw_cq *cq, bool drain, bool own)
{
    struct uiw_qp *qs[UIW_CQ_DRIVE_SCAN];
    bool busy = false, read = false;
    unsigned n, k = 0;
    int ep;

    /* one look under the CQ's lock: the readiness set, or the few QPs
     * (referenced) to try; an empty poll takes it once, not per QP */
    pthread_mutex_lock(&cq->lock);
    ep = cq->drive_ep;
    n = cq->nqps;
    if (ep < 0 && n <= UIW_CQ_DRIVE_SCAN)
        for (; k < n; k++) {
            qs[k] = cq->qps[k];
            uiw_qp_get(qs[k]);
        }
    pthread_mutex_unlock(&cq->lock);
    if (ep < 0 && n > UIW_CQ_DRIVE_SCAN) {
        drive_ep_make(cq);
        pthread_mutex_lock(&cq->lock);
        ep = cq->drive_ep;
        pthread_mutex_unlock(&cq->lock);
    }
    if (ep >= 0)
        return drive_ready(cq, ep, drain, own);
    for (unsigned i = 0; i < k; i++) {
        if (!qp_try_rx(qs[i], drain, own, &read))
            busy = true;
        uiw_qp_put(qs[i]);
    }
    /* Someone (often the progress thread) is processing a QP of this CQ.
     * A busy-polling caller sharing its CPU would otherwise keep it from
     * finishing until the end of a scheduler time slice. */
    if (busy)
        sched_yield();
    return read || busy;
}
