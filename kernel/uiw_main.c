/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * uiwarp.ko: the kernel half of uiwarp (docs/KERNEL.md, issue 17).
 *
 * Phase 1: the module carries the sans-I/O wire core (src/wire, built
 * unchanged through src/wire/uiw_port.h) and, at load, runs its self-test
 * (uiw_selftest.c) and logs one line:
 *   uiwarp: wire self-test: PASS (N checks)
 *   uiwarp: wire self-test: FAIL (N of M checks failed)
 * A failed self-test refuses the load (-EPROTO). selftest=0 skips it.
 * Then the "uiwarp" RDMA link type is registered (uiw_dev.c).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>

#include "uiw_dev.h"
#include "uiw_kmod.h"

static bool selftest = true;
module_param(selftest, bool, 0444);
MODULE_PARM_DESC(selftest, "run the wire core self-test at load (default 1)");

static int __init uiw_init(void)
{
    struct uiw_selftest_result r;
    int rc;

    if (!selftest) {
        pr_info("wire self-test: skipped (selftest=0)\n");
    } else {
        uiw_selftest_run(&r);
        if (r.failed) {
            pr_err("wire self-test: FAIL (%u of %u checks failed)\n", r.failed,
                   r.passed + r.failed);
            return -EPROTO;
        }
        pr_info("wire self-test: PASS (%u checks)\n", r.passed);
    }
    rc = uiw_cm_init();
    if (rc)
        return rc;
    rc = uiw_dev_init();
    if (rc) {
        uiw_cm_exit();
        return rc;
    }
    pr_info("loaded: rdma link add NAME type uiwarp netdev IFACE\n");
    return 0;
}

static void __exit uiw_exit(void)
{
    uiw_dev_exit();
    uiw_cm_exit();
    pr_info("unloaded\n");
}

module_init(uiw_init);
module_exit(uiw_exit);

MODULE_DESCRIPTION("uiwarp: software iWARP (RDMAP/DDP/MPA over TCP)");
MODULE_AUTHOR("uiwarp");
/* The sources are BSD-3-Clause. A GPL-compatible declaration keeps the
 * kernel untainted by the license and lets the later datapath use the
 * GPL-only exports it needs (alloc_workqueue among them). */
MODULE_LICENSE("Dual BSD/GPL");
