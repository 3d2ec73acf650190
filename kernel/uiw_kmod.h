/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The uiwarp kernel module's internal header (docs/KERNEL.md).
 *
 * uiw_selftest.c also builds as a userspace program (tests/CMakeLists.txt,
 * test_kmod_selftest) so that the module's self-test is checked by ctest
 * without a VM: the few environment calls it makes are the macros below.
 */
#ifndef UIWARP_UIW_KMOD_H
#define UIWARP_UIW_KMOD_H

#ifdef __KERNEL__
#include <linux/printk.h>
#include <linux/slab.h>
#define uiw_st_zalloc(n) kzalloc((n), GFP_KERNEL)
#define uiw_st_free(p)   kfree(p)
#define uiw_st_err(...)  pr_err(__VA_ARGS__)

/* uiw_dev.c: the ib_device behind `rdma link add NAME type uiwarp` */
int uiw_dev_init(void);
void uiw_dev_exit(void);
#else
#include <stdio.h>
#include <stdlib.h>
#define uiw_st_zalloc(n) calloc(1, (n))
#define uiw_st_free(p)   free(p)
#define uiw_st_err(...)  fprintf(stderr, __VA_ARGS__)
#endif

struct uiw_selftest_result {
    unsigned passed;
    unsigned failed;
};

/* Runs the wire core's self-test (CRC32C vectors, MPA frames and
 * negotiation, DDP/RDMAP header round trips, the receive parser on valid
 * and malformed FPDUs), counting checks in *res (an allocation that fails
 * counts as a failed check). Logs each failed check. Returns 0. */
int uiw_selftest_run(struct uiw_selftest_result *res);

#endif
