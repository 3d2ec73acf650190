/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `uiwarp dump [options] FILE...`
 */
#include "dump.h"

#include "check.h"

#include <errno.h>
#include <stdbool.h>
#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* "  NAME  description" with the description wrapped at 79 columns. */
static void item(FILE *out, const char *name, const char *desc)
{
    enum { INDENT = 19, WIDTH = 79 };
    int col = fprintf(out, "  %-16s", name);
    bool first = true;
    for (const char *p = desc; *p;) {
        while (*p == ' ')
            p++;
        int w = (int)strcspn(p, " ");
        if (!w)
            break;
        if (!first && col + 1 + w > WIDTH)
            col = fprintf(out, "\n%*s", INDENT - 1, "") - 1;
        col += fprintf(out, " %.*s", w, p);
        first = false;
        p += w;
    }
    fputc('\n', out);
}

void uiw_dump_usage(FILE *out)
{
    fprintf(out,
            "usage: uiwarp dump [options] FILE...\n"
            "\n"
            "Check iWARP traffic (MPA RFC 5044/6581, DDP RFC 5041, RDMAP RFC 5040/7306) in\n"
            "pcap/pcapng captures (Ethernet, Linux cooked SLL/SLL2, raw IP, BSD loopback;\n"
            "IPv4/IPv6). Each TCP connection is reassembled per direction; a direction that\n"
            "starts with \"MPA ID Req Frame\" (endpoint a) and the reverse one starting with\n"
            "\"MPA ID Rep Frame\" (endpoint b) form an iWARP connection on any port.\n"
            "\n"
            "Output: one line per MPA frame and per FPDU (frame where it starts, time,\n"
            "connection cN, direction a>b or b>a, fields, CRC verdict), violations below the\n"
            "line they concern (\"!\"), tolerated quirks (\"~\"), capture problems (\"?\"),\n"
            "warnings (\"*\"), then a summary per connection and a total per file. The\n"
            "summaries count, per direction, how many FPDUs start a TCP segment as captured\n"
            "(\"segment alignment: A of N FPDUs start a TCP segment\"; FPDUs first carried by\n"
            "a retransmission are left out), and how many lie wholly in a segment that starts\n"
            "with an FPDU (\"segment packing\", RFC 5044 Appendix A.1), and per segment how\n"
            "many TCP segments start with an FPDU and how many of those hold whole FPDUs\n"
            "only (\"segment starts\", RFC 5044 §2 \"FPDU Alignment\"): RNICs place data at\n"
            "line rate only when every segment starts with an FPDU (Appendix A.1); after SACK\n"
            "blocks, which shorten the sender's segments (RFC 5044 §5.1), the segments and\n"
            "FPDUs off the grid until a segment starts with an FPDU again (\"segment EMSS\n"
            "changes\"). Where TSO/GSO or GRO act (loopback, veth, most NICs) the capture\n"
            "sees larger segments than a wire carries: see uiwarp(1).\n"
            "\n"
            "options:\n"
            "  -q, --quiet            print only the summaries\n"
            "  --strict               treat every known peer quirk as a violation\n"
            "  --no-lenient=NAME[,..] treat these quirks as violations\n"
            "  --lenient=NAME[,..]    tolerate these quirks again (after --strict)\n"
            "  --streams=DIR          write per MPA connection direction the MPA frame\n"
            "                         (DIR/c<N>-<ab|ba>-mpa.bin) and the FPDU byte stream after\n"
            "                         it (DIR/c<N>-<ab|ba>-fpdu.bin); ab = a>b (initiator)\n"
            "  -x, --hex=N            show the first N (<= 64) payload bytes of each FPDU\n"
            "  --max-buffer=BYTES     per-stream limit for out-of-order data (default 8M;\n"
            "                         suffixes k, M, G)\n"
            "  -h, --help             this text\n"
            "\n"
            "quirks (default: tolerated, counted as \"tolerated: NAME\"):\n");
    for (int q = 0; q < uiw_quirk_count(); q++)
        item(out, uiw_quirk_name(q), uiw_quirk_desc(q));
    fprintf(out, "\nviolation classes:\n");
    for (int v = 0; v < uiw_violation_count(); v++)
        item(out, uiw_violation_name(v), uiw_violation_desc(v));
    fprintf(out, "\nwarning classes (counted as \"warnings: NAME\", exit status unchanged):\n");
    for (int w = 0; w < uiw_warning_count(); w++)
        item(out, uiw_warning_name(w), uiw_warning_desc(w));
    fprintf(out, "\nNot violations: the CRC field when CRC is not negotiated (RFC 5044 §4.1:\n"
                 "it \"may contain any value\"). Capture problems (no-syn, gap, buffer-limit,\n"
                 "conflicting-retransmission, incomplete, decoding-stopped) and warnings\n"
                 "are reported separately and do not change the exit status.\n"
                 "\n"
                 "exit status: 0 no violation, 1 violations found, 2 usage or read error\n");
}

static int set_quirks(const char *list, unsigned *mask, int on)
{
    char *dup = strdup(list), *save = NULL;
    if (!dup)
        return -1;
    int rc = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int q = uiw_quirk_lookup(tok);
        if (q < 0) {
            fprintf(stderr, "uiwarp dump: unknown quirk '%s' (see uiwarp dump --help)\n", tok);
            rc = -1;
            break;
        }
        if (on)
            *mask |= 1u << q;
        else
            *mask &= ~(1u << q);
    }
    free(dup);
    return rc;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    switch (*end) {
    case 'k':
    case 'K':
        v <<= 10;
        end++;
        break;
    case 'm':
    case 'M':
        v <<= 20;
        end++;
        break;
    case 'g':
    case 'G':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end || v == 0 || v > SIZE_MAX)
        return -1;
    *out = (size_t)v;
    return 0;
}

int uiw_dump_main(int argc, char **argv)
{
    enum { O_STRICT = 256, O_NO_LENIENT, O_LENIENT, O_STREAMS, O_MAXBUF };
    static const struct option longopts[] = {
        {"quiet", no_argument, NULL, 'q'},
        {"strict", no_argument, NULL, O_STRICT},
        {"no-lenient", required_argument, NULL, O_NO_LENIENT},
        {"lenient", required_argument, NULL, O_LENIENT},
        {"streams", required_argument, NULL, O_STREAMS},
        {"hex", required_argument, NULL, 'x'},
        {"max-buffer", required_argument, NULL, O_MAXBUF},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uiw_dump_opts o = {0};
    optind = 1;
    opterr = 1;
    int c;
    while ((c = getopt_long(argc, argv, "qx:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'q':
            o.quiet = true;
            break;
        case O_STRICT:
            o.strict_mask = (1u << uiw_quirk_count()) - 1;
            break;
        case O_NO_LENIENT:
            if (set_quirks(optarg, &o.strict_mask, 1) < 0)
                return 2;
            break;
        case O_LENIENT:
            if (set_quirks(optarg, &o.strict_mask, 0) < 0)
                return 2;
            break;
        case O_STREAMS:
            o.streams_dir = optarg;
            break;
        case 'x': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*end || n < 0 || n > 64) {
                fprintf(stderr, "uiwarp dump: --hex wants 0..64\n");
                return 2;
            }
            o.hex = (unsigned)n;
            break;
        }
        case O_MAXBUF:
            if (parse_size(optarg, &o.max_buffer) < 0) {
                fprintf(stderr, "uiwarp dump: bad --max-buffer '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            uiw_dump_usage(stdout);
            return 0;
        default:
            fprintf(stderr, "try 'uiwarp dump --help'\n");
            return 2;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "uiwarp dump: no capture file given\n");
        uiw_dump_usage(stderr);
        return 2;
    }
    uiw_dump *d = uiw_dump_new(&o, stdout);
    if (!d)
        return 2;
    int read_errors = 0, files = 0;
    for (int i = optind; i < argc; i++) {
        if (uiw_dump_file(d, argv[i]) < 0)
            read_errors++;
        files++;
    }
    if (files > 1)
        uiw_dump_grand_total(d);
    uint64_t v = uiw_dump_violations(d);
    uiw_dump_free(d);
    fflush(stdout);
    if (read_errors)
        return 2;
    return v ? 1 : 0;
}
