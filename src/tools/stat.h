/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef UIWARP_TOOLS_STAT_H
#define UIWARP_TOOLS_STAT_H
#include <stdio.h>
int uiw_stat_main(int argc, char **argv);
void uiw_stat_usage(FILE *out);
#endif
