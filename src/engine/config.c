/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Environment configuration (UIWARP_*), read once per process, and the
 * engine's logging.
 *
 *   UIWARP_MPA_REV         1 | 2                              default 2
 *   UIWARP_MPA_REV1_FALLBACK 0 | 1                           default 1
 *   UIWARP_CRC             off | optional | required (0|1|2)  default optional
 *   UIWARP_MARKERS         0 | 1                              default 0
 *   UIWARP_P2P             0 | 1                              default 1
 *   UIWARP_RTR             list of write, read, send          default write,read
 *                          (separated by ',', '|', '+' or blanks)
 *   UIWARP_MPA_TIMEOUT_MS  1 .. 3600000                       default 10000
 *   UIWARP_MAX_FPDU        0 (from the MSS) | 64 .. 65535     default 0
 *   UIWARP_ZCOPY_MIN       0 .. 2^30 bytes                    default 4096
 *   UIWARP_FPDU_ALIGN      0 | 1                              default 1
 *                          (FPDUs aligned with TCP segments on links whose
 *                          MSS is at most 16384: not loopback; qp_tx.c)
 *   UIWARP_DEBUG           0 .. 3                             default 0
 *   UIWARP_PROGRESS_NICE   -20 .. 19, or off                  default off
 *   UIWARP_PROGRESS_SPIN_US 0 .. 100000                       default 200
 *   UIWARP_TX_COALESCE_US  0 (off) .. 1000                    default 2
 *   UIWARP_POLL_OWN_US     0 (off) .. 100000                  default 200
 *   UIWARP_PEER_TIMEOUT    0 (off) .. 86400 seconds            default 30
 *   UIWARP_RNR_HOLD_MS     0 (Terminate at once) .. 86400000,  default 5000
 *                          or unlimited (receiver not ready, qp_rx.c)
 *   UIWARP_FIRST_FPDU_HOLD_MS 0 (none) .. 10000                default 20
 *                          (an initiator's wake-up FPDU this long after the
 *                          MPA Reply if the peer is silent: Linux siw, qp_tx.c)
 *
 * Peer-to-peer is on by default: RFC 5044 §7.1.2 rule 4 forbids a responder
 * to send before it received an FPDU, so without an RTR (RFC 6581 §9.2) a
 * protocol whose server speaks first (perftest's -R handshake, for one)
 * would wait forever. siw responders accept it (they answer with the Write
 * RTR, which we then send as siw does: zero-length Write to STag 1); a siw
 * initiator is unaffected because this only shapes our Requests.
 *
 * A value that does not parse or is out of range is reported on stderr and
 * the default is used.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "engine.h"

#define DEF_ZCOPY_MIN          4096u
#define DEF_FIRST_FPDU_HOLD_MS 20u /* docs/INTEROP.md §1: measured against siw */

static struct uiw_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

UIW_EXPORT void uiw_log(const char *fmt, ...)
{
    char buf[1024];
    int n = snprintf(buf, sizeof(buf), "uiwarp: ");
    va_list ap;

    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(buf) - 2)
        len = sizeof(buf) - 2;
    if (len == 0 || buf[len - 1] != '\n')
        buf[len++] = '\n';
    /* one write(): lines from several threads do not interleave */
    ssize_t w = write(STDERR_FILENO, buf, len);
    (void)w;
}

static void bad_value(const char *name, const char *val, const char *expect)
{
    uiw_log("ignoring %s=\"%s\" (expected %s), using the default", name, val, expect);
}

/* Parse an unsigned decimal in [lo, hi]; true on success. */
static bool parse_uint(const char *s, unsigned long lo, unsigned long hi, unsigned long *out)
{
    char *end;

    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s))
        return false;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno)
        return false;
    while (isspace((unsigned char)*end))
        end++;
    if (*end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void env_uint(const char *name, unsigned long lo, unsigned long hi, unsigned *dst)
{
    const char *v = getenv(name);
    unsigned long x;
    char expect[64];

    if (!v)
        return;
    if (parse_uint(v, lo, hi, &x)) {
        *dst = (unsigned)x;
        return;
    }
    snprintf(expect, sizeof(expect), "%lu..%lu", lo, hi);
    bad_value(name, v, expect);
}

/* UIWARP_PROGRESS_NICE: a signed nice value, or "off" (leave it alone) */
static void env_nice(void)
{
    const char *v = getenv("UIWARP_PROGRESS_NICE");
    unsigned long x;
    bool neg;

    if (!v)
        return;
    if (strcasecmp(v, "off") == 0) {
        cfg.progress_nice_set = false;
        return;
    }
    while (isspace((unsigned char)*v))
        v++;
    neg = *v == '-';
    if (parse_uint(v + (neg || *v == '+'), 0, neg ? 20 : 19, &x)) {
        cfg.progress_nice = neg ? -(int)x : (int)x;
        cfg.progress_nice_set = true;
        return;
    }
    bad_value("UIWARP_PROGRESS_NICE", getenv("UIWARP_PROGRESS_NICE"), "-20..19 or off");
}

static void env_bool(const char *name, bool *dst)
{
    const char *v = getenv(name);
    unsigned long x;

    if (!v)
        return;
    if (parse_uint(v, 0, 1, &x))
        *dst = x != 0;
    else
        bad_value(name, v, "0 or 1");
}

static void env_crc(void)
{
    static const char *const names[] = {"off", "optional", "required"};
    const char *v = getenv("UIWARP_CRC");
    unsigned long x;

    if (!v)
        return;
    for (unsigned i = 0; i < 3; i++) {
        if (strcasecmp(v, names[i]) == 0) {
            cfg.crc = (uint8_t)i;
            return;
        }
    }
    if (parse_uint(v, 0, 2, &x)) {
        cfg.crc = (uint8_t)x;
        return;
    }
    bad_value("UIWARP_CRC", v, "off, optional or required");
}

static void env_rtr(void)
{
    const char *v = getenv("UIWARP_RTR");
    char tok[16];
    uint8_t bits = 0;
    const char *p;

    if (!v)
        return;
    for (p = v; *p;) {
        size_t n = 0;

        while (*p && (strchr(",|+", *p) || isspace((unsigned char)*p)))
            p++;
        if (!*p)
            break;
        while (p[n] && !strchr(",|+", p[n]) && !isspace((unsigned char)p[n]))
            n++;
        if (n >= sizeof(tok))
            goto bad;
        memcpy(tok, p, n);
        tok[n] = 0;
        p += n;
        if (strcasecmp(tok, "write") == 0)
            bits |= UIW_RTR_WRITE;
        else if (strcasecmp(tok, "read") == 0)
            bits |= UIW_RTR_READ;
        else if (strcasecmp(tok, "send") == 0)
            bits |= UIW_RTR_SEND;
        else
            goto bad;
    }
    if (!bits)
        goto bad;
    cfg.rtr = bits;
    return;
bad:
    bad_value("UIWARP_RTR", v, "a list of write, read, send");
}

static void config_load(void)
{
    unsigned u;

    cfg.mpa_rev = 2;
    cfg.mpa_rev1_fallback = true; /* docs/ENGINE.md "MPA revision 1 fallback" */
    cfg.crc = UIW_CRC_OPTIONAL;
    cfg.markers = false;
    cfg.p2p = true;
    cfg.rtr = UIW_RTR_WRITE | UIW_RTR_READ;
    cfg.mpa_timeout_ms = 10000;
    cfg.max_fpdu = 0;
    cfg.zcopy_min = DEF_ZCOPY_MIN;
    cfg.fpdu_align = true; /* docs/ENGINE.md "Transmit" */
    cfg.debug = 0;
    cfg.first_fpdu_hold_ms = DEF_FIRST_FPDU_HOLD_MS; /* docs/INTEROP.md §1 */
    cfg.progress_spin_us = 200;
    cfg.tx_coalesce_ns = 2000; /* docs/ENGINE.md "Transmit" */
    cfg.poll_own_us = 200;     /* docs/ENGINE.md "Poll-driven progress" */
    cfg.progress_nice = 0;
    cfg.progress_nice_set = false; /* off: docs/ENGINE.md on the trade-off */
    cfg.peer_timeout_s = 30;       /* docs/ENGINE.md "Dead peers" */
    cfg.rnr_hold_ms = 5000;        /* docs/ENGINE.md "Receiver not ready" */

    u = cfg.mpa_rev;
    env_uint("UIWARP_MPA_REV", 1, 2, &u);
    cfg.mpa_rev = (uint8_t)u;
    env_crc();
    env_bool("UIWARP_MARKERS", &cfg.markers);
    env_bool("UIWARP_P2P", &cfg.p2p);
    env_bool("UIWARP_MPA_REV1_FALLBACK", &cfg.mpa_rev1_fallback);
    env_rtr();
    /* RFC 6581 peer-to-peer (the RTR) needs MPA revision 2 (RFC 6581 §4):
     * a revision 1 initiator is client-server. Quietly so when P2P is
     * only the default; said when both were asked for. */
    if (cfg.mpa_rev == 1 && cfg.p2p) {
        if (getenv("UIWARP_P2P"))
            uiw_log("UIWARP_P2P=1 needs MPA revision 2; UIWARP_MPA_REV=1 connects client-server");
        cfg.p2p = false;
    }
    env_uint("UIWARP_MPA_TIMEOUT_MS", 1, 3600000, &cfg.mpa_timeout_ms);
    {
        const char *v = getenv("UIWARP_MAX_FPDU");
        unsigned long x;

        if (v) {
            if (parse_uint(v, 0, 65535, &x) && (x == 0 || x >= UIW_TX_MIN_FPDU))
                cfg.max_fpdu = (unsigned)x;
            else
                bad_value("UIWARP_MAX_FPDU", v, "0 or 64..65535");
        }
    }
    env_uint("UIWARP_ZCOPY_MIN", 0, 1ul << 30, &cfg.zcopy_min);
    env_bool("UIWARP_FPDU_ALIGN", &cfg.fpdu_align);
    env_uint("UIWARP_FIRST_FPDU_HOLD_MS", 0, 10000, &cfg.first_fpdu_hold_ms);
    env_nice();
    env_uint("UIWARP_PROGRESS_SPIN_US", 0, 100000, &cfg.progress_spin_us);
    u = cfg.tx_coalesce_ns / 1000;
    env_uint("UIWARP_TX_COALESCE_US", 0, 1000, &u);
    cfg.tx_coalesce_ns = u * 1000;
    env_uint("UIWARP_POLL_OWN_US", 0, 100000, &cfg.poll_own_us);
    env_uint("UIWARP_PEER_TIMEOUT", 0, 86400, &cfg.peer_timeout_s);
    {
        const char *v = getenv("UIWARP_RNR_HOLD_MS");
        unsigned long x;

        if (v) {
            if (!strcasecmp(v, "unlimited") || !strcasecmp(v, "inf"))
                cfg.rnr_hold_ms = UIW_RNR_UNLIMITED;
            else if (parse_uint(v, 0, 86400000, &x))
                cfg.rnr_hold_ms = (unsigned)x;
            else
                bad_value("UIWARP_RNR_HOLD_MS", v, "0..86400000 or unlimited");
        }
    }
    u = 0;
    env_uint("UIWARP_DEBUG", 0, 3, &u);
    cfg.debug = (int)u;
}

UIW_EXPORT int uiw_debug_level(void)
{
    return uiw_config()->debug;
}

UIW_EXPORT unsigned uiw_progress_spin_us(void)
{
    return uiw_config()->progress_spin_us;
}

const struct uiw_config *uiw_config(void)
{
    pthread_once(&cfg_once, config_load);
    return &cfg;
}
