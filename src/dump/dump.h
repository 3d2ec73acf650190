/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * `uiwarp dump` command line: options, files, exit status.
 */
#ifndef UIWARP_DUMP_DUMP_H
#define UIWARP_DUMP_DUMP_H

#include <stdio.h>

/* argv[0] is "dump". Returns the exit status: 0 no violation, 1 violations
 * found, 2 usage or read error. */
int uiw_dump_main(int argc, char **argv);
/* The `uiwarp dump --help` text. */
void uiw_dump_usage(FILE *out);

#endif /* UIWARP_DUMP_DUMP_H */
