/* SPDX-License-Identifier: BSD-3-Clause */
#ifndef UIWARP_TOOLS_RUN_H
#define UIWARP_TOOLS_RUN_H
#include <stdio.h>
int uiw_run_main(int argc, char **argv);
void uiw_run_usage(FILE *out);
#endif
