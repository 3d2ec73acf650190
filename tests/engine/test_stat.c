/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Live counters (include/uiwarp/stat.h) and `uiwarp stat`: two QPs of this
 * process connected over a loopback TCP connection do a known transfer (4
 * Sends of 1000 B, 2 RDMA Writes of 100000 B, 3 RDMA Reads of 3000 B), then
 * `uiwarp stat --json PID` must show both QPs with their addresses, roles,
 * negotiated options and exact message and byte counts per opcode each way,
 * every FPDU sent counted as received by the other side, and the payload
 * received in place plus copied equal to what was placed. The text output
 * names both QPs; a destroyed QP disappears; the file goes at exit.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "dp_test.h"

static struct dp_ep A, B;

/* A connected loopback TCP pair: *a is the connecting side. */
static int tcp_pair(int *a, int *b, struct sockaddr_in *sa_a, struct sockaddr_in *sa_b)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(sin);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (ls < 0 || bind(ls, (struct sockaddr *)&sin, sizeof(sin)) || listen(ls, 1) ||
        getsockname(ls, (struct sockaddr *)&sin, &l))
        return -1;
    *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*a < 0 || connect(*a, (struct sockaddr *)&sin, sizeof(sin)))
        return -1;
    *b = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
    close(ls);
    l = sizeof(*sa_a);
    getsockname(*a, (struct sockaddr *)sa_a, &l);
    l = sizeof(*sa_b);
    getsockname(*b, (struct sockaddr *)sa_b, &l);
    return *b < 0 ? -1 : 0;
}

/* `uiwarp stat --json PID`, flattened by python3 into "path=value" lines. */
static char *stat_json_flat(void)
{
    const char *bin = getenv("UIWARP_BIN");
    char cmd[1024];
    static char out[1 << 16];
    size_t n = 0;

    snprintf(cmd, sizeof(cmd),
             "'%s' stat --json %ld | python3 -c '"
             "import json,sys\n"
             "def f(p,v):\n"
             "  if isinstance(v,dict):\n"
             "    [f(p+\".\"+k if p else k,x) for k,x in v.items()]\n"
             "  elif isinstance(v,list):\n"
             "    [f(p+\".\"+str(x.get(\"qp_num\",i)) if isinstance(x,dict) else p+\".\"+str(i),x) "
             "for i,x in enumerate(v)]\n"
             "  else:\n"
             "    print(p+\"=\"+json.dumps(v))\n"
             "d=json.load(sys.stdin)\n"
             "f(\"\",{\"n\":len(d[\"processes\"]),\"p\":d[\"processes\"][0] if d[\"processes\"] "
             "else {}})'",
             bin, (long)getpid());
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    while (n + 1 < sizeof(out)) {
        size_t r = fread(out + n, 1, sizeof(out) - 1 - n, p);
        if (!r)
            break;
        n += r;
    }
    out[n] = '\0';
    CHECK_EQ(pclose(p), 0);
    return out;
}

/* The value of "key=" in flat, as a string (static), or "" */
static const char *val(const char *flat, const char *key)
{
    static char v[256];
    char pat[300];
    const char *p;

    snprintf(pat, sizeof(pat), "\n%s=", key);
    p = strstr(flat, pat);
    if (!p && strncmp(flat, pat + 1, strlen(pat + 1)) == 0)
        p = flat - 1;
    v[0] = '\0';
    if (p) {
        p += strlen(pat);
        size_t i = 0;
        while (p[i] && p[i] != '\n' && i + 1 < sizeof(v)) {
            v[i] = p[i];
            i++;
        }
        v[i] = '\0';
    }
    return v;
}

static unsigned long long num(const char *flat, const char *fmt, unsigned qpn, const char *rest)
{
    char key[256];
    snprintf(key, sizeof(key), fmt, qpn, rest);
    const char *v = val(flat, key);
    if (!*v) {
        fprintf(stderr, "missing %s\n", key);
        return ~0ull;
    }
    return strtoull(v, NULL, 10);
}

#define Q(flat, qpn, rest) num(flat, "p.qps.%u.%s", qpn, rest)

/* Post one signaled WR of one SGE and wait for its successful completion. */
static void post_wait(struct dp_ep *e, enum ibv_wr_opcode op, void *laddr, uint32_t len,
                      uint32_t lkey, void *raddr, uint32_t rkey, uint64_t wr_id)
{
    struct ibv_wc wc;
    CHECK_EQ(eng_post(e->qp, op, laddr, len, lkey, (uintptr_t)raddr, rkey, wr_id, true), 0);
    CHECK_EQ(dp_poll(e->scq, &wc, DP_TIMEOUT_MS), 1);
    CHECK_EQ(wc.status, IBV_WC_SUCCESS);
}

int main(void)
{
    int fa = -1, fb = -1;
    struct sockaddr_in sa, sb;
    char want[64];

    dp_ctx = dp_open();
    CHECK(dp_ctx != NULL);
    if (!dp_ctx)
        return 1;
    CHECK_EQ(dp_ep_create(&A, NULL), 0);
    CHECK_EQ(dp_ep_create(&B, NULL), 0);
    unsigned qa = A.qp->qp_num, qb = B.qp->qp_num;

    /* before connecting: listed, INIT (eng_qp_init), not connected */
    char *flat = stat_json_flat();
    CHECK(flat != NULL);
    if (!flat)
        return 1;
    CHECK_EQ(strtol(val(flat, "n"), NULL, 10), 1);
    snprintf(want, sizeof(want), "p.qps.%u.state", qa);
    CHECK_STR(val(flat, want), "\"INIT\"");
    snprintf(want, sizeof(want), "p.qps.%u.connected", qb);
    CHECK_STR(val(flat, want), "false");

    CHECK_EQ(tcp_pair(&fa, &fb, &sa, &sb), 0);
    uiw_mpa_result ma = dp_mpa(true, false, 4, 4), mb = dp_mpa(true, false, 4, 4);
    mb.await_rtr = true; /* B is the responder */
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(A.qp), fa, &ma), 0);
    CHECK_EQ(uiw_qp_attach_socket(to_uqp(B.qp), fb, &mb), 0);

    size_t big = 100000;
    uint8_t *sbuf = dp_alloc(4096, 4 * 1000 + 2 * big + 3 * 3000);
    uint8_t *rbuf = dp_alloc(4096, 4 * 1000 + 2 * big + 3 * 3000);
    dp_fill(sbuf, 4 * 1000 + 2 * big + 3 * 3000);
    memset(rbuf, 0, 4 * 1000 + 2 * big + 3 * 3000);
    struct ibv_mr *ma_mr = ibv_reg_mr(A.pd, sbuf, 4 * 1000 + 2 * big + 3 * 3000, ENG_ACCESS_ALL);
    struct ibv_mr *mb_mr = ibv_reg_mr(B.pd, rbuf, 4 * 1000 + 2 * big + 3 * 3000, ENG_ACCESS_ALL);
    CHECK(ma_mr && mb_mr);

    /* 4 Sends of 1000 B; the 4th finds no receive posted yet: B holds it
     * (receiver not ready, counted in rnr_holds) until the receive comes */
    for (unsigned i = 0; i < 3; i++)
        CHECK_EQ(eng_post_recv(B.qp, rbuf + i * 1000, 1000, mb_mr->lkey, i), 0);
    for (unsigned i = 0; i < 4; i++)
        post_wait(&A, IBV_WR_SEND, sbuf + i * 1000, 1000, ma_mr->lkey, NULL, 0, i);
    {
        uint64_t holds = 0;
        for (uint64_t end = dp_now_ms() + DP_TIMEOUT_MS; !holds && dp_now_ms() < end;) {
            pthread_mutex_lock(&to_uqp(B.qp)->lock);
            holds = to_uqp(B.qp)->st->rnr_holds;
            pthread_mutex_unlock(&to_uqp(B.qp)->lock);
            dp_msleep(1);
        }
        CHECK_EQ(holds, 1);
        CHECK_EQ(eng_post_recv(B.qp, rbuf + 3 * 1000, 1000, mb_mr->lkey, 3), 0);
    }
    for (unsigned i = 0; i < 4; i++) {
        struct ibv_wc wc;
        CHECK_EQ(dp_poll(B.rcq, &wc, DP_TIMEOUT_MS), 1);
        CHECK_EQ(wc.status, IBV_WC_SUCCESS);
        CHECK_EQ(wc.byte_len, 1000);
    }
    /* 2 Writes of 100000 B */
    for (unsigned i = 0; i < 2; i++) {
        size_t off = 4000 + i * big;
        post_wait(&A, IBV_WR_RDMA_WRITE, sbuf + off, (uint32_t)big, ma_mr->lkey, rbuf + off,
                  mb_mr->rkey, 0);
    }
    /* 3 Reads of 3000 B: A reads B's buffer (filled by the test) */
    size_t roff = 4000 + 2 * big;
    dp_fill(rbuf + roff, 9000);
    for (unsigned i = 0; i < 3; i++)
        post_wait(&A, IBV_WR_RDMA_READ, sbuf + roff + i * 3000, 3000, ma_mr->lkey,
                  rbuf + roff + i * 3000, mb_mr->rkey, 0);
    /* the Writes' last bytes are placed before the Read Responses left B */
    dp_sync(B.qp);
    dp_sync(A.qp);
    CHECK(memcmp(sbuf, rbuf, 4000 + 2 * big) == 0);
    CHECK(memcmp(sbuf + roff, rbuf + roff, 9000) == 0);

    flat = stat_json_flat();
    if (!flat)
        return 1;
    /* identity, role, options */
    snprintf(want, sizeof(want), "p.qps.%u.state", qa);
    CHECK_STR(val(flat, want), "\"RTS\"");
    snprintf(want, sizeof(want), "p.qps.%u.initiator", qa);
    CHECK_STR(val(flat, want), "true");
    snprintf(want, sizeof(want), "p.qps.%u.initiator", qb);
    CHECK_STR(val(flat, want), "false");
    {
        char key[64], addr[64];
        snprintf(key, sizeof(key), "p.qps.%u.local", qa);
        snprintf(addr, sizeof(addr), "\"127.0.0.1:%u\"", ntohs(sa.sin_port));
        CHECK_STR(val(flat, key), addr);
        snprintf(key, sizeof(key), "p.qps.%u.peer", qa);
        snprintf(addr, sizeof(addr), "\"127.0.0.1:%u\"", ntohs(sb.sin_port));
        CHECK_STR(val(flat, key), addr);
        snprintf(key, sizeof(key), "p.qps.%u.mpa.crc", qb);
        CHECK_STR(val(flat, key), "true");
        snprintf(key, sizeof(key), "p.qps.%u.device", qa);
        CHECK(strstr(val(flat, key), "uiw_") != NULL);
    }
    CHECK_EQ(Q(flat, qa, "ird"), 4);
    CHECK_EQ(Q(flat, qa, "ord"), 4);
    /* A -> B */
    CHECK_EQ(Q(flat, qa, "tx.messages.send"), 4);
    CHECK_EQ(Q(flat, qa, "tx.bytes.send"), 4000);
    CHECK_EQ(Q(flat, qa, "tx.messages.write"), 2);
    CHECK_EQ(Q(flat, qa, "tx.bytes.write"), 2 * big);
    CHECK_EQ(Q(flat, qa, "tx.messages.read_request"), 3);
    CHECK_EQ(Q(flat, qa, "tx.bytes.read_request"), 0);
    CHECK_EQ(Q(flat, qa, "tx.messages.read_response"), 0);
    CHECK_EQ(Q(flat, qb, "rx.messages.send"), 4);
    CHECK_EQ(Q(flat, qb, "rx.bytes.send"), 4000);
    CHECK_EQ(Q(flat, qb, "rx.messages.write"), 2);
    CHECK_EQ(Q(flat, qb, "rx.bytes.write"), 2 * big);
    CHECK_EQ(Q(flat, qb, "rx.messages.read_request"), 3);
    /* B -> A */
    CHECK_EQ(Q(flat, qb, "tx.messages.read_response"), 3);
    CHECK_EQ(Q(flat, qb, "tx.bytes.read_response"), 9000);
    CHECK_EQ(Q(flat, qb, "tx.messages.send"), 0);
    CHECK_EQ(Q(flat, qa, "rx.messages.read_response"), 3);
    CHECK_EQ(Q(flat, qa, "rx.bytes.read_response"), 9000);
    /* every FPDU sent was received; large Writes took several */
    unsigned long long fa_tx = Q(flat, qa, "tx.fpdus"), fb_rx = Q(flat, qb, "rx.fpdus");
    CHECK_EQ(fa_tx, fb_rx);
    CHECK(fa_tx >= 4 + 2 * 2 + 3);
    CHECK_EQ(Q(flat, qb, "tx.fpdus"), Q(flat, qa, "rx.fpdus"));
    CHECK_EQ(Q(flat, qb, "rx_in_place_bytes") + Q(flat, qb, "rx_copied_bytes"), 4000 + 2 * big);
    CHECK_EQ(Q(flat, qa, "rx_in_place_bytes") + Q(flat, qa, "rx_copied_bytes"), 9000);
    CHECK_EQ(Q(flat, qa, "crc_errors"), 0);
    CHECK_EQ(Q(flat, qa, "terminates_sent"), 0);
    CHECK_EQ(Q(flat, qb, "terminates_received"), 0);
    CHECK_EQ(Q(flat, qb, "rnr_holds"), 1);
    CHECK_EQ(Q(flat, qa, "rnr_holds"), 0);
    /* sendmsg calls: at least one, at most one per FPDU */
    CHECK(Q(flat, qa, "tx_sends") >= 1 && Q(flat, qa, "tx_sends") <= fa_tx);

    /* the text output names both QPs */
    {
        char cmd[512], line[512];
        snprintf(cmd, sizeof(cmd), "'%s' stat %ld", getenv("UIWARP_BIN"), (long)getpid());
        FILE *p = popen(cmd, "r");
        int seen = 0;
        char qa_s[32], qb_s[32];
        snprintf(qa_s, sizeof(qa_s), "QP %u ", qa);
        snprintf(qb_s, sizeof(qb_s), "QP %u ", qb);
        while (p && fgets(line, sizeof(line), p))
            seen |= (strstr(line, qa_s) ? 1 : 0) | (strstr(line, qb_s) ? 2 : 0) |
                    (strstr(line, "receive-not-ready holds 1; sendmsg calls ") ? 4 : 0);
        CHECK(p && pclose(p) == 0);
        CHECK_EQ(seen, 7);
    }

    /* a destroyed QP is no longer listed */
    CHECK_EQ(ibv_dereg_mr(ma_mr), 0);
    dp_ep_destroy(&A);
    flat = stat_json_flat();
    if (flat) {
        snprintf(want, sizeof(want), "p.qps.%u.qp_num", qa);
        CHECK_STR(val(flat, want), "");
        snprintf(want, sizeof(want), "p.qps.%u.qp_num", qb);
        CHECK_EQ(strtoul(val(flat, want), NULL, 10), qb);
    }
    CHECK_EQ(ibv_dereg_mr(mb_mr), 0);
    dp_ep_destroy(&B);
    free(sbuf);
    free(rbuf);
    CHECK_EQ(ibv_close_device(dp_ctx), 0);

    /* the file goes with the process */
    {
        char path[128];
        snprintf(path, sizeof(path), "%s/%s%ld", UIW_STAT_DIR, UIW_STAT_PREFIX, (long)getpid());
        CHECK_EQ(access(path, F_OK), 0);
        pid_t c = fork();
        if (c == 0) {
            /* a child's QP gets a file of the child's own, removed at its exit */
            dp_ctx = dp_open();
            struct dp_ep E;
            int ok = dp_ep_create(&E, NULL) == 0;
            snprintf(path, sizeof(path), "%s/%s%ld", UIW_STAT_DIR, UIW_STAT_PREFIX, (long)getpid());
            ok = ok && access(path, F_OK) == 0;
            exit(ok ? 0 : 3);
        }
        int st;
        CHECK_EQ(waitpid(c, &st, 0), c);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        snprintf(path, sizeof(path), "%s/%s%ld", UIW_STAT_DIR, UIW_STAT_PREFIX, (long)c);
        CHECK(access(path, F_OK) != 0);
    }
    TEST_MAIN_END();
}
