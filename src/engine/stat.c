/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Live counters for `uiwarp stat` (layout: include/uiwarp/stat.h).
 *
 * The first QP of a process creates /dev/shm/uiwarp-stat.PID; every QP gets
 * a slot there (chunks of UIW_STAT_CHUNK slots appended to the file and
 * mapped one by one, so a slot never moves) and keeps it until it is
 * destroyed. Without /dev/shm (or if the file cannot be made) slots come
 * from the heap: counting goes on, nobody sees it. The file is unlinked at
 * exit; a forked child starts a file of its own on its first QP.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"

static pthread_mutex_t st_lock = PTHREAD_MUTEX_INITIALIZER;
/* st_fd: 0 once the file exists, -1 if not (yet); the file is opened only
 * while it is made or grows, so a process keeps no fd for it */
static int st_fd = -1;
static bool st_tried;                /* made or failed once in this process */
static pid_t st_pid;                 /* the process that owns st_fd */
static char st_path[64];             /* its name, for unlinking at exit */
static uint64_t st_size;             /* bytes of the file */
static uint32_t st_chunk_bytes;      /* one chunk, page-rounded */
static struct uiw_stat_qp **st_free; /* free slots of the file (a stack) */
static size_t st_nfree, st_free_cap;

static void st_unlink(void)
{
    if (st_fd >= 0 && st_pid == getpid())
        unlink(st_path);
}

static void st_atfork_child(void)
{
    /* the parent's file and slots stay the parent's; the child's QPs (if it
     * makes any) get a file of the child's own */
    st_fd = -1;
    st_tried = false;
    st_nfree = 0;
    pthread_mutex_init(&st_lock, NULL);
}

static void st_once(void)
{
    pthread_atfork(NULL, NULL, st_atfork_child);
    atexit(st_unlink);
}

/* Remove the files of our user's processes that are gone (killed, or left
 * through _exit without atexit handlers), so /dev/shm does not fill up. */
static void st_sweep(void)
{
    DIR *d = opendir(UIW_STAT_DIR);
    struct dirent *e;
    size_t plen = strlen(UIW_STAT_PREFIX);

    if (!d)
        return;
    while ((e = readdir(d))) {
        char *end;
        struct stat sb;
        if (strncmp(e->d_name, UIW_STAT_PREFIX, plen) != 0)
            continue;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || sb.st_uid != geteuid())
            continue;
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH)
            (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* Make the file: header page only. st_lock held. */
static void st_create_locked(void)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t slot = sizeof(struct uiw_stat_qp);
    struct uiw_stat_hdr *h;
    int fd;

    st_tried = true;
    st_sweep();
    if (page <= 0)
        page = 4096;
    snprintf(st_path, sizeof(st_path), "%s/%s%ld", UIW_STAT_DIR, UIW_STAT_PREFIX, (long)getpid());
    fd = open(st_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        uiw_dbg(1, "stat: cannot create %s: %s (uiwarp stat will not see this process)", st_path,
                strerror(errno));
        return;
    }
    if (ftruncate(fd, page) != 0) {
        uiw_dbg(1, "stat: %s: %s", st_path, strerror(errno));
        close(fd);
        unlink(st_path);
        return;
    }
    h = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        close(fd);
        unlink(st_path);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(h, 0, sizeof(*h));
    h->version = UIW_STAT_VERSION;
    h->pid = (uint32_t)getpid();
    h->slot_size = (uint32_t)slot;
    h->hdr_size = (uint32_t)page;
    st_chunk_bytes =
        (uint32_t)(((UIW_STAT_CHUNK * slot) + (size_t)page - 1) / (size_t)page * (size_t)page);
    h->chunk_size = st_chunk_bytes;
    h->start_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    (void)prctl(PR_GET_NAME, h->comm, 0, 0, 0);
    h->comm[sizeof(h->comm) - 1] = '\0';
    __atomic_store_n(&h->magic, UIW_STAT_MAGIC, __ATOMIC_RELEASE); /* last: the file is valid */
    munmap(h, (size_t)page);
    close(fd);
    st_fd = 0;
    st_pid = getpid();
    st_size = (uint64_t)page;
}

/* Append a chunk and put its slots on the free stack. st_lock held. */
static int st_grow_locked(void)
{
    uint8_t *c;

    if (st_free_cap < st_nfree + UIW_STAT_CHUNK) {
        size_t cap = st_free_cap ? st_free_cap * 2 : 4 * UIW_STAT_CHUNK;
        struct uiw_stat_qp **n = realloc(st_free, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        st_free = n;
        st_free_cap = cap;
    }
    int fd = open(st_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    if (ftruncate(fd, (off_t)(st_size + st_chunk_bytes)) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    c = mmap(NULL, st_chunk_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)st_size);
    if (c == MAP_FAILED) {
        int e = errno;
        (void)ftruncate(fd, (off_t)st_size);
        close(fd);
        return -e;
    }
    close(fd);
    st_size += st_chunk_bytes;
    /* pushed last-first, so slots are handed out in file order */
    for (unsigned i = UIW_STAT_CHUNK; i-- > 0;)
        st_free[st_nfree++] = (struct uiw_stat_qp *)(c + (size_t)i * sizeof(struct uiw_stat_qp));
    return 0;
}

struct uiw_stat_qp *uiw_stat_alloc(pid_t *owner)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    struct uiw_stat_qp *s = NULL;

    pthread_once(&once, st_once);
    pthread_mutex_lock(&st_lock);
    if (!st_tried)
        st_create_locked();
    if (st_fd >= 0 && (st_nfree || st_grow_locked() == 0))
        s = st_free[--st_nfree];
    *owner = s ? st_pid : 0;
    pthread_mutex_unlock(&st_lock);
    if (s) {
        memset(s, 0, sizeof(*s));
        return s;
    }
    return calloc(1, sizeof(struct uiw_stat_qp)); /* counted, but not published */
}

/* Publish a slot filled by its owner (qp_num, dev): readers list it from
 * now on. */
void uiw_stat_publish(struct uiw_stat_qp *s)
{
    __atomic_store_n(&s->slot_state, UIW_STAT_USED, __ATOMIC_RELEASE);
}

void uiw_stat_free(struct uiw_stat_qp *s, pid_t owner)
{
    if (!s)
        return;
    if (!owner) {
        free(s);
        return;
    }
    __atomic_store_n(&s->slot_state, UIW_STAT_FREE, __ATOMIC_RELEASE);
    /* a slot of this process's file goes back on the stack (which has room:
     * it held every slot of the file once); a slot of a parent's file
     * (inherited across fork) is left alone */
    pthread_mutex_lock(&st_lock);
    if (owner == st_pid && st_fd >= 0 && st_nfree < st_free_cap)
        st_free[st_nfree++] = s;
    pthread_mutex_unlock(&st_lock);
}

static void st_addr(const struct sockaddr_storage *ss, uint8_t *family, uint8_t addr[16],
                    uint16_t *port)
{
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;
        *family = 6;
        memcpy(addr, s6->sin6_addr.s6_addr, 16);
        *port = ntohs(s6->sin6_port);
    } else if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
        *family = 4;
        memset(addr, 0, 16);
        memcpy(addr, &s4->sin_addr.s_addr, 4);
        *port = ntohs(s4->sin_port);
    }
}

void uiw_stat_connected(struct uiw_qp *qp, bool active, const struct sockaddr_storage *local,
                        const struct sockaddr_storage *peer)
{
    struct uiw_stat_qp *s = qp->st;
    struct sockaddr_storage a, b;
    socklen_t la = sizeof(a), lb = sizeof(b);
    uint8_t fam = 0;

    if (local && peer && local->ss_family && peer->ss_family) {
        st_addr(local, &fam, s->local_addr, &s->local_port);
        st_addr(peer, &s->family, s->peer_addr, &s->peer_port);
    } else if (getsockname(qp->fd, (struct sockaddr *)&a, &la) == 0 &&
               getpeername(qp->fd, (struct sockaddr *)&b, &lb) == 0) {
        st_addr(&a, &fam, s->local_addr, &s->local_port);
        st_addr(&b, &s->family, s->peer_addr, &s->peer_port);
    }
    s->mpa_rev = qp->mpa.rev;
    s->crc = qp->mpa.crc;
    s->markers = (uint8_t)((qp->mpa.markers_tx ? 1 : 0) | (qp->mpa.markers_rx ? 2 : 0));
    s->p2p = qp->mpa.p2p;
    s->rtr = qp->mpa.rtr;
    s->active = active;
    s->ird = qp->ird;
    s->ord = qp->ord;
    s->qp_state = qp->state;
    s->connected = 1;
}
