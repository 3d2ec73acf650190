/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp: the command-line tool. One subcommand per verb; `uiwarp --help`
 * lists them.
 */
#include "dump.h"
#include "run.h"
#include "stat.h"

#include <stdio.h>
#include <string.h>

typedef struct subcommand {
    const char *name;
    const char *summary;
    int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
    void (*usage)(FILE *out);
} subcommand;

static const subcommand subcommands[] = {
    {"dump", "check iWARP traffic in pcap/pcapng captures", uiw_dump_main, uiw_dump_usage},
    {"run", "run an unmodified RDMA program over uiwarp", uiw_run_main, uiw_run_usage},
    {"stat", "list processes using uiwarp, their QPs and counters", uiw_stat_main, uiw_stat_usage},
};

#define NSUB (sizeof(subcommands) / sizeof(subcommands[0]))

static void usage(FILE *out)
{
    fprintf(out, "usage: uiwarp COMMAND [options] [args]\n"
                 "       uiwarp help COMMAND | uiwarp COMMAND --help\n\ncommands:\n");
    for (size_t i = 0; i < NSUB; i++)
        fprintf(out, "  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
}

static const subcommand *find(const char *name)
{
    for (size_t i = 0; i < NSUB; i++)
        if (strcmp(subcommands[i].name, name) == 0)
            return &subcommands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return 0;
        }
        const subcommand *s = find(argv[2]);
        if (!s) {
            fprintf(stderr, "uiwarp: unknown command '%s'\n", argv[2]);
            return 2;
        }
        s->usage(stdout);
        return 0;
    }
    const subcommand *s = find(cmd);
    if (!s) {
        fprintf(stderr, "uiwarp: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    return s->main(argc - 1, argv + 1);
}
