/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The kernel module's wire self-test (kernel/uiw_selftest.c) run in
 * userspace, so that ctest keeps it passing without a VM
 * (scripts/kernel.sh test runs it in the module).
 */
#include <stdio.h>

#include "uiw_kmod.h"

int main(void)
{
    struct uiw_selftest_result r;

    uiw_selftest_run(&r);
    printf("wire self-test: %u passed, %u failed\n", r.passed, r.failed);
    return r.failed == 0 && r.passed > 0 ? 0 : 1;
}
