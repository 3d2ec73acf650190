/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the module and its rdma-core provider (kernel/provider/) agree on,
 * included by both (no kernel or libc header here). docs/KERNEL.md "Seen
 * by rdma-core".
 */
#ifndef UIW_UABI_H
#define UIW_UABI_H

/* The device's uverbs ABI version (sysfs abi_version of its uverbs
 * node): no driver data in any command or response. The provider accepts
 * this version only. */
#define UIW_UVERBS_ABI_VERSION 1

/* The device's node description (sysfs node_desc), set at rdma link add
 * and read-only (the module has no modify_device). The module keeps
 * driver_id RDMA_DRIVER_UNKNOWN (an id is an entry in the kernel's uapi
 * enum rdma_driver_id, which an out-of-tree module cannot add and must
 * not borrow), so the provider recognises the device by this string, on
 * an iWARP node (RNIC) of unknown driver. */
#define UIW_NODE_DESC "uiwarp"

#endif
