/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `uiwarp stat [PID] [--json] [-w SECONDS]`: the processes using uiwarp and
 * their QPs, read from the files the library publishes in /dev/shm
 * (include/uiwarp/stat.h): state, addresses, negotiated MPA options and
 * counters. Plain text by default, like ss and rdma stat.
 */
#include "stat.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uiwarp/stat.h>
#include <uiwarp/wire.h>

void uiw_stat_usage(FILE *out)
{
    fprintf(out,
            "usage: uiwarp stat [PID] [--json] [-w SECONDS]\n\n"
            "List the processes using uiwarp (or the one with PID) and their QPs: state,\n"
            "local and peer address, negotiated MPA options (revision, CRC, markers,\n"
            "peer-to-peer RTR, IRD/ORD) and counters each way: messages and payload bytes\n"
            "per RDMAP opcode, FPDUs, payload received in place or copied, CRC errors,\n"
            "Terminates sent and received.\n\n"
            "options:\n"
            "  --json         one JSON object: {\"processes\": [...]}\n"
            "  -w, --watch=S  print again every S seconds (default 1) until interrupted\n"
            "  -h, --help     this text\n\n"
            "Each process publishes %s/%sPID (readable by its user and root).\n"
            "exit status: 0, 1 when PID is given and does not use uiwarp, 2 usage error\n",
            UIW_STAT_DIR, UIW_STAT_PREFIX);
}

/* JSON keys of the RDMAP opcodes (RFC 5040 §4.2, RFC 7306 §8). */
static const char *const op_key[UIW_STAT_NOPS] = {
    "write",    "read_request", "read_response",  "send",
    "send_inv", "send_se",      "send_se_inv",    "terminate",
    "imm_data", "imm_data_se",  "atomic_request", "atomic_response",
    "op12",     "op13",         "op14",           "op15"};

static const char *qp_state_name(uint32_t s)
{
    static const char *const n[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return s < sizeof(n) / sizeof(n[0]) ? n[s] : "?";
}

static const char *rtr_name(uint8_t r)
{
    switch (r) {
    case UIW_RTR_SEND:
        return "send";
    case UIW_RTR_WRITE:
        return "write";
    case UIW_RTR_READ:
        return "read";
    default:
        return "none";
    }
}

static void addr_str(uint8_t fam, const uint8_t *a, uint16_t port, char *out, size_t cap)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    if (fam == 4) {
        inet_ntop(AF_INET, a, ip, sizeof(ip));
        snprintf(out, cap, "%s:%u", ip, port);
    } else if (fam == 6) {
        inet_ntop(AF_INET6, a, ip, sizeof(ip));
        snprintf(out, cap, "[%s]:%u", ip, port);
    } else {
        snprintf(out, cap, "-");
    }
}

/* One process's file, mapped. */
struct proc {
    pid_t pid;
    void *map;
    size_t len;
    const struct uiw_stat_hdr *h;
};

static bool pid_alive(pid_t pid)
{
    return kill(pid, 0) == 0 || errno == EPERM;
}

/* Map the file of pid; stale files (process gone) are removed. */
static int proc_open(pid_t pid, struct proc *p)
{
    char path[128];
    struct stat sb;
    int fd;

    snprintf(path, sizeof(path), "%s/%s%ld", UIW_STAT_DIR, UIW_STAT_PREFIX, (long)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -errno;
    if (!pid_alive(pid)) {
        close(fd);
        unlink(path);
        return -ESRCH;
    }
    if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(struct uiw_stat_hdr)) {
        close(fd);
        return -EINVAL;
    }
    p->len = (size_t)sb.st_size;
    p->map = mmap(NULL, p->len, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p->map == MAP_FAILED)
        return -errno;
    p->h = p->map;
    p->pid = pid;
    if (__atomic_load_n(&p->h->magic, __ATOMIC_ACQUIRE) != UIW_STAT_MAGIC ||
        p->h->version != UIW_STAT_VERSION || p->h->slot_size != sizeof(struct uiw_stat_qp) ||
        p->h->hdr_size == 0 || p->h->chunk_size < UIW_STAT_CHUNK * p->h->slot_size ||
        p->h->pid != (uint32_t)pid) {
        munmap(p->map, p->len);
        return -EPROTO;
    }
    return 0;
}

/* The used slots of p, in file order: calls fn for each (a snapshot copy). */
static void proc_slots(const struct proc *p, void (*fn)(const struct uiw_stat_qp *, void *),
                       void *arg)
{
    for (size_t off = p->h->hdr_size; off + p->h->chunk_size <= p->len; off += p->h->chunk_size) {
        for (unsigned i = 0; i < UIW_STAT_CHUNK; i++) {
            const struct uiw_stat_qp *s = (const struct uiw_stat_qp *)((const char *)p->map + off +
                                                                       (size_t)i * p->h->slot_size);
            if (__atomic_load_n(&s->slot_state, __ATOMIC_ACQUIRE) != UIW_STAT_USED)
                continue;
            struct uiw_stat_qp copy;
            memcpy(&copy, s, sizeof(copy));
            copy.dev[sizeof(copy.dev) - 1] = '\0';
            fn(&copy, arg);
        }
    }
}

/* ---- text ---- */

static void fmt_bytes(uint64_t b, char *out, size_t cap)
{
    if (b >= 10ull << 30)
        snprintf(out, cap, "%.1f GiB", (double)b / (1ull << 30));
    else if (b >= 10ull << 20)
        snprintf(out, cap, "%.1f MiB", (double)b / (1ull << 20));
    else if (b >= 10ull << 10)
        snprintf(out, cap, "%.1f KiB", (double)b / (1ull << 10));
    else
        snprintf(out, cap, "%llu B", (unsigned long long)b);
}

static void text_dir(const char *name, const struct uiw_stat_dir_counters *c)
{
    char b[32];
    printf("    %s: %llu FPDUs", name, (unsigned long long)c->fpdus);
    for (unsigned op = 0; op < UIW_STAT_NOPS; op++) {
        if (!c->msgs[op] && !c->bytes[op])
            continue;
        fmt_bytes(c->bytes[op], b, sizeof(b));
        printf("; %s %llu (%s)", uiw_opcode_name(op), (unsigned long long)c->msgs[op], b);
    }
    printf("\n");
}

static void text_qp(const struct uiw_stat_qp *s, void *arg)
{
    char l[64], r[64], a[32], c[32];
    (void)arg;
    printf("  QP %u  %s  %s", s->qp_num, s->dev, qp_state_name(s->qp_state));
    if (s->connected) {
        addr_str(s->family, s->local_addr, s->local_port, l, sizeof(l));
        addr_str(s->family, s->peer_addr, s->peer_port, r, sizeof(r));
        printf("  %s %s %s (%s)\n", l, s->active ? "->" : "<-", r,
               s->active ? "initiator" : "responder");
        printf("    MPA rev %u, CRC %s, markers %s/%s, %s%s%s, IRD/ORD %u/%u\n", s->mpa_rev,
               s->crc ? "on" : "off", (s->markers & 1) ? "on" : "off",
               (s->markers & 2) ? "on" : "off", s->p2p ? "peer-to-peer, RTR " : "client-server",
               s->p2p ? rtr_name(s->rtr) : "", "", s->ird, s->ord);
    } else {
        printf("  not connected\n");
    }
    text_dir("tx", &s->tx);
    text_dir("rx", &s->rx);
    fmt_bytes(s->rx_in_place, a, sizeof(a));
    fmt_bytes(s->rx_copied, c, sizeof(c));
    uint64_t tot = s->rx_in_place + s->rx_copied;
    printf("    received in place %s (%.0f%%), copied %s; CRC errors %llu; Terminates sent %llu, "
           "received %llu; receive-not-ready holds %llu; sendmsg calls %llu\n",
           a, tot ? 100.0 * (double)s->rx_in_place / (double)tot : 0.0, c,
           (unsigned long long)s->crc_errors, (unsigned long long)s->term_sent,
           (unsigned long long)s->term_received, (unsigned long long)s->rnr_holds,
           (unsigned long long)s->tx_sends);
}

static void text_proc(const struct proc *p)
{
    time_t t = (time_t)(p->h->start_ns / 1000000000u);
    struct tm tm;
    char when[32] = "?";
    char comm[17];

    memcpy(comm, p->h->comm, 16);
    comm[16] = '\0';
    if (localtime_r(&t, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    printf("pid %ld %s (uiwarp since %s)\n", (long)p->pid, comm, when);
    proc_slots(p, text_qp, NULL);
}

/* ---- JSON ---- */

struct json_ctx {
    bool first;
};

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void json_dir(const char *name, const struct uiw_stat_dir_counters *c)
{
    printf("\"%s\": {\"fpdus\": %llu, \"messages\": {", name, (unsigned long long)c->fpdus);
    for (unsigned op = 0; op <= UIW_OP_MAX; op++)
        printf("%s\"%s\": %llu", op ? ", " : "", op_key[op], (unsigned long long)c->msgs[op]);
    printf("}, \"bytes\": {");
    for (unsigned op = 0; op <= UIW_OP_MAX; op++)
        printf("%s\"%s\": %llu", op ? ", " : "", op_key[op], (unsigned long long)c->bytes[op]);
    printf("}}");
}

static void json_qp(const struct uiw_stat_qp *s, void *arg)
{
    struct json_ctx *j = arg;
    char l[64], r[64];

    printf("%s{\"qp_num\": %u, \"device\": ", j->first ? "" : ", ", s->qp_num);
    json_str(s->dev);
    printf(", \"state\": \"%s\", \"connected\": %s", qp_state_name(s->qp_state),
           s->connected ? "true" : "false");
    if (s->connected) {
        addr_str(s->family, s->local_addr, s->local_port, l, sizeof(l));
        addr_str(s->family, s->peer_addr, s->peer_port, r, sizeof(r));
        printf(", \"local\": \"%s\", \"peer\": \"%s\", \"initiator\": %s", l, r,
               s->active ? "true" : "false");
        printf(", \"mpa\": {\"rev\": %u, \"crc\": %s, \"markers_tx\": %s, \"markers_rx\": %s, "
               "\"p2p\": %s, \"rtr\": \"%s\"}, \"ird\": %u, \"ord\": %u",
               s->mpa_rev, s->crc ? "true" : "false", (s->markers & 1) ? "true" : "false",
               (s->markers & 2) ? "true" : "false", s->p2p ? "true" : "false", rtr_name(s->rtr),
               s->ird, s->ord);
    }
    printf(", ");
    json_dir("tx", &s->tx);
    printf(", ");
    json_dir("rx", &s->rx);
    printf(", \"rx_in_place_bytes\": %llu, \"rx_copied_bytes\": %llu, \"crc_errors\": %llu, "
           "\"terminates_sent\": %llu, \"terminates_received\": %llu, \"rnr_holds\": %llu, "
           "\"tx_sends\": %llu}",
           (unsigned long long)s->rx_in_place, (unsigned long long)s->rx_copied,
           (unsigned long long)s->crc_errors, (unsigned long long)s->term_sent,
           (unsigned long long)s->term_received, (unsigned long long)s->rnr_holds,
           (unsigned long long)s->tx_sends);
    j->first = false;
}

static void json_proc(const struct proc *p, bool first)
{
    char comm[17];
    struct json_ctx j = {.first = true};

    memcpy(comm, p->h->comm, 16);
    comm[16] = '\0';
    printf("%s{\"pid\": %ld, \"comm\": ", first ? "" : ", ", (long)p->pid);
    json_str(comm);
    printf(", \"start_ns\": %llu, \"qps\": [", (unsigned long long)p->h->start_ns);
    proc_slots(p, json_qp, &j);
    printf("]}");
}

/* ---- main ---- */

static int cmp_pid(const void *a, const void *b)
{
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

/* The pids with a stat file, sorted. */
static size_t list_pids(pid_t **out)
{
    DIR *d = opendir(UIW_STAT_DIR);
    size_t n = 0, cap = 0;
    pid_t *v = NULL;
    struct dirent *e;
    size_t plen = strlen(UIW_STAT_PREFIX);

    if (!d)
        return 0;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, UIW_STAT_PREFIX, plen) != 0)
            continue;
        char *end;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (*end || pid <= 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            pid_t *nv = realloc(v, cap * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        v[n++] = (pid_t)pid;
    }
    closedir(d);
    qsort(v, n, sizeof(*v), cmp_pid);
    *out = v;
    return n;
}

static int show(pid_t only, bool json)
{
    pid_t *pids = NULL;
    size_t n = only ? 1 : list_pids(&pids);
    bool first = true;
    int found = 0;

    if (json)
        printf("{\"processes\": [");
    for (size_t i = 0; i < n; i++) {
        struct proc p = {0};
        pid_t pid = only ? only : pids[i];
        if (proc_open(pid, &p) != 0)
            continue;
        found++;
        if (json)
            json_proc(&p, first);
        else
            text_proc(&p);
        first = false;
        munmap(p.map, p.len);
    }
    if (json)
        printf("]}\n");
    else if (!found)
        printf(only ? "pid %ld does not use uiwarp\n" : "no process uses uiwarp\n", (long)only);
    free(pids);
    fflush(stdout);
    return only && !found ? 1 : 0;
}

int uiw_stat_main(int argc, char **argv)
{
    bool json = false;
    double watch = 0;
    pid_t only = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            uiw_stat_usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "-w") == 0 || strcmp(a, "--watch") == 0) {
            watch = 1;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9')
                watch = atof(argv[++i]);
        } else if (strncmp(a, "--watch=", 8) == 0) {
            watch = atof(a + 8);
        } else if (a[0] >= '1' && a[0] <= '9' && !only) {
            char *end;
            long v = strtol(a, &end, 10);
            if (*end || v <= 0) {
                uiw_stat_usage(stderr);
                return 2;
            }
            only = (pid_t)v;
        } else {
            fprintf(stderr, "uiwarp stat: unknown argument '%s'\n", a);
            uiw_stat_usage(stderr);
            return 2;
        }
    }
    if (watch < 0 || (watch > 0 && watch < 0.05)) {
        fprintf(stderr, "uiwarp stat: -w needs a period of at least 0.05 s\n");
        return 2;
    }
    if (!watch)
        return show(only, json);
    for (;;) {
        if (!json)
            printf("\033[H\033[J"); /* clear the terminal, like watch(1) */
        show(only, json);
        struct timespec ts = {(time_t)watch, (long)((watch - (double)(time_t)watch) * 1e9)};
        nanosleep(&ts, NULL);
    }
}
