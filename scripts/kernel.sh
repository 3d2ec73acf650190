#!/usr/bin/env bash
# The kernel module (docs/KERNEL.md):
#   bash scripts/kernel.sh build   build/kernel/uiwarp.ko, an out-of-tree
#                                  module for the siw rig's kernel (Debian 12,
#                                  6.1.0-56-amd64), against that kernel's
#                                  headers as the rig extracted them
#   bash scripts/kernel.sh test [--loops N] [--live N] [--nvme-mib M] [--no-nvme-siw]
#                                  build, then boot the rig's VM: insmod (the
#                                  wire self-test's PASS line in dmesg), rmmod,
#                                  selftest=0, the device (rdma link add/
#                                  show/delete uiw0 on eth0, rmmod with it),
#                                  N more load/unload rounds (default 20; a
#                                  device on every other one), an interface
#                                  removed under a device, port events
#                                  (eth0 down/up), rdma-core's view with
#                                  the provider plugin ($UIWARP_BUILD/lib/
#                                  libuiwarp-rdmav34.so or build/lib's;
#                                  skipped without it: uiw0's uverbs node,
#                                  ibv_devices, ibv_devinfo, EOPNOTSUPP
#                                  for other verbs, rdma link delete and
#                                  rmmod with uiw0 open in a process),
#                                  a kernel verbs consumer
#                                  (uiwarp_ktest.ko: PD, CQ, QP, MR,
#                                  REG_MR/LOCAL_INV, flush, drain; no
#                                  object left), a hostile peer (44
#                                  classes: Terminates, bad MPA
#                                  Requests and Replies, silent peers,
#                                  damaged streams), the initiator's
#                                  first-FPDU guard (first_hold_ms=500:
#                                  nothing held, wake-ups to a silent
#                                  raw responder (Write RTR, Read RTR,
#                                  client-server) and none after it
#                                  spoke),
#                                  siw interop, dead peers (siw's rping
#                                  -s made silent by a blackhole route:
#                                  peer_timeout_ms=3000, idle and
#                                  sending), interop with uiwarp's
#                                  userspace library on the host (rping
#                                  both ways through qemu's user network,
#                                  each library capture under uiwarp
#                                  dump --strict; build/bin/uiwarp or
#                                  $UIWARP_BUILD/bin/uiwarp, skipped
#                                  without it), RNIC-like peers on the
#                                  host (tests/rnic/krnic_peer, irdma,
#                                  cxgb4, cxgb4-rev1: the module's rping client
#                                  and server, Terminates both ways, the
#                                  personality's rules; skipped without
#                                  it), NVMe-oF on uiw0 and on
#                                  siw0 (--nvme-mib, default 32;
#                                  --no-nvme-siw), rmmod with NVMe-oF
#                                  connected (--live rounds, default 4),
#                                  no kernel warnings
#   bash scripts/kernel.sh test-pair [--nvme-mib M] [--keep-pcaps]
#                                  build, then two VMs at once through the
#                                  host (as the rig's siw-vm-pair): one with
#                                  siw only (siw0), one with the module only
#                                  (uiw0); NVMe-oF both ways (nvmet-rdma on
#                                  one, nvme-rdma on the other: M MiB,
#                                  default 32, read, written, read back,
#                                  compared; the cm_ids on the right device;
#                                  rmmod uiwarp clean); both NICs captured
#                                  and checked with uiwarp dump --strict
#                                  (build/kernel/pair/)
#   bash scripts/kernel.sh clean   remove build/kernel
# Environment: UIWARP_SHARED (../shared) or SIW_PEER (the rig's folder),
# SIW_RIG_CACHE / SIW_RIG_OUT (the rig's, /var/cache/siw-peer/{cache,out}),
# UIWARP_KABI (the kernel ABI; default: the one the rig's VM boots).
# Headers: the rig's siw-vm-build extracts linux-headers-<abi> and
# linux-kbuild into $SIW_RIG_CACHE/kbuild/<abi>; when they are missing this
# script runs siw-vm-build once (root; it downloads Debian's packages).
# Exit status 0 on success; 1 with an "kernel.sh: error: ..." line otherwise.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

die() {
    echo "kernel.sh: error: $*" >&2
    exit 1
}
say() { echo "kernel.sh: $*"; }

SHARED=${UIWARP_SHARED:-$(cd "$repo/.." && pwd)/shared}
SIW_PEER=${SIW_PEER:-}
for d in "$SIW_PEER" "$SHARED/siw-peer" /work/shared/siw-peer; do
    if [ -n "$d" ] && [ -x "$d/siw-vm-run" ]; then
        SIW_PEER=$(cd "$d" && pwd)
        break
    fi
done
CACHE=${SIW_RIG_CACHE:-/var/cache/siw-peer/cache}
OUT=${SIW_RIG_OUT:-/var/cache/siw-peer/out}
KABI=${UIWARP_KABI:-$(cat "$OUT/kabi" 2>/dev/null || echo 6.1.0-56-amd64)}
KB=$CACHE/kbuild/$KABI
KDIR=$KB/usr/src/linux-headers-$KABI
B=$repo/build/kernel

rig_build() { # run the rig's idempotent builder (headers, VM images)
    [ -n "$SIW_PEER" ] || die "the siw peer rig (\$UIWARP_SHARED/siw-peer) is not there; set SIW_PEER"
    [ "$(id -u)" = 0 ] || die "$1 missing and siw-vm-build needs root: run '$SIW_PEER/siw-vm-build' as root"
    local log=${TMPDIR:-/tmp}/uiwarp-kernel-siw-vm-build.log
    say "$1 missing: running $SIW_PEER/siw-vm-build (log: $log)"
    SIW_RIG_CACHE=$CACHE SIW_RIG_OUT=$OUT SIW_RIG_KABI=$KABI "$SIW_PEER/siw-vm-build" >"$log" 2>&1 || {
        tail -20 "$log" >&2
        die "siw-vm-build failed"
    }
}

# Link the sources into build/kernel: the kernel's make writes its objects
# beside them, and none may land in src/.
stage_sources() {
    mkdir -p "$B/wire" "$B/include/uiwarp"
    find "$B" -type l -delete
    ln -s "$repo/kernel/Kbuild" "$B/Kbuild"
    local f
    for f in "$repo"/kernel/*.c "$repo"/kernel/*.h; do
        ln -s "$f" "$B/$(basename "$f")"
    done
    for f in "$repo"/src/wire/*.c "$repo"/src/wire/*.h; do
        ln -s "$f" "$B/wire/$(basename "$f")"
    done
    ln -s "$repo/include/uiwarp/wire.h" "$B/include/uiwarp/wire.h"
}

# Every symbol the module leaves undefined must be exported by the kernel
# or one of its modules (Module.symvers): no libc call may remain.
check_symbols() {
    local ko=$1 missing=() s
    while read -r s; do
        grep -qP "^0x[0-9a-f]+\t\Q$s\E\t" "$KDIR/Module.symvers" || missing+=("$s")
    done < <(nm -u "$ko" | awk '{print $2}')
    [ ${#missing[@]} -eq 0 ] || die "$ko: undefined symbols the kernel does not export: ${missing[*]}"
    say "undefined symbols, all exported by $KABI: $(nm -u "$ko" | awk '{print $2}' | grep -v '^__' | tr '\n' ' ')"
}

build() {
    local t0=$SECONDS
    [ -e "$KB/.done" ] && [ -f "$KDIR/Makefile" ] || rig_build "kernel headers for $KABI ($KB)"
    [ -f "$KDIR/Makefile" ] || die "no kernel build tree at $KDIR after siw-vm-build"
    [ -f "$KDIR/Module.symvers" ] || die "$KDIR/Module.symvers missing"
    local t
    for t in make gcc nm; do
        command -v $t >/dev/null || die "$t missing (apt-get install make gcc binutils)"
    done
    stage_sources
    local log=$B/build.log
    if ! make -C "$KDIR" M="$B" -j"$(nproc)" modules >"$log" 2>&1; then
        cat "$log" >&2
        die "module build failed (log: $log)"
    fi
    if grep -E 'warning:|WARNING:' "$log" >&2; then
        die "the module build gave warnings (log: $log)"
    fi
    [ -f "$B/uiwarp.ko" ] || die "make succeeded but $B/uiwarp.ko is missing"
    check_symbols "$B/uiwarp.ko"
    [ -f "$B/uiwarp_ktest.ko" ] || die "make succeeded but $B/uiwarp_ktest.ko is missing"
    check_symbols "$B/uiwarp_ktest.ko"
    local vm
    vm=$(modinfo -F vermagic "$B/uiwarp.ko" 2>/dev/null || true)
    case $vm in "$KABI "*) ;; *) die "uiwarp.ko has vermagic '$vm', not $KABI" ;; esac
    say "built $B/uiwarp.ko ($(stat -c %s "$B/uiwarp.ko") bytes, vermagic $vm) in $((SECONDS - t0)) s"
}

# dummy.ko from the rig's cached linux-image .deb (the VM's initramfs holds
# only what siw needs): an interface the test can remove. Extracted once
# into build/kernel/mods (about 30 s); without the .deb that check is
# skipped.
guest_modules() {
    local deb
    deb=$(ls "$CACHE/debs/linux-image-${KABI}_"*.deb 2>/dev/null | sort -V | tail -1 || true)
    mkdir -p "$B/mods"
    [ -n "$deb" ] || return 0
    local m
    for m in drivers/net/dummy drivers/net/veth $NVME_MODS; do
        [ ! -f "$B/mods/${m##*/}.ko" ] || continue
        say "extracting ${m##*/}.ko from $(basename "$deb")"
        dpkg-deb --fsys-tarfile "$deb" | tar -xO "./lib/modules/$KABI/kernel/$m.ko" \
            >"$B/mods/${m##*/}.ko.tmp" || die "cannot extract $m.ko from $deb"
        mv "$B/mods/${m##*/}.ko.tmp" "$B/mods/${m##*/}.ko"
    done
}

# NVMe over Fabrics (nvme-rdma host, nvmet-rdma target) and what they need,
# in load order; the VM's initramfs has none of them
NVME_MODS="crypto/crct10dif_common crypto/crct10dif_generic lib/crc-t10dif lib/crc64
  crypto/crc64_rocksoft_generic lib/crc64-rocksoft block/t10-pi drivers/nvme/host/nvme-core
  drivers/nvme/host/nvme-fabrics drivers/nvme/host/nvme-rdma drivers/nvme/target/nvmet
  drivers/nvme/target/nvmet-rdma"

# The guest side of the test: busybox sh in the rig's VM, the module in /x.
guest_script() {
    cat <<EOF
loops=$1 nvmib=$2 nvsiw=$3 live=$4
pass=0 fail=0
ok() { echo "KTEST ok   \$*"; pass=\$((pass + 1)); }
bad() { echo "KTEST FAIL \$*"; fail=\$((fail + 1)); }
# rdma-core's rping exits 255 when its CM thread calls rdma_get_cm_event on
# the channel main() has just destroyed, after a complete run (fixed
# upstream in rdma-core PR #1622, 2025; Debian 12's rping is older): rc 0,
# or 255 with nothing but that perror and the normal end of a run in the
# output. \$1: the output, \$2: rping's exit status.
rping_done() {
  [ "\$2" = 0 ] && return 0
  [ "\$2" = 255 ] && [ "\$(tail -1 \$1)" = "rdma_get_cm_event: Bad file descriptor" ] &&
    ! grep -v -e '^rdma_get_cm_event: Bad file descriptor\$' -e '^server DISCONNECT EVENT\.\.\.\$' \
      -e '^wait for RDMA_READ_ADV state 10\$' \$1 | grep -q . &&
    echo "KTEST note rping exited 255 after a complete run: its CM thread read the destroyed channel (rdma-core PR #1622)"
}
# dmesg is cleared between checks: keep any kernel warning seen before
kwarn=
kclr() { dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|kmemleak|refcount_t' && kwarn=1; dmesg -c >/dev/null; }
# after a uiwarp_ktest run on uiw0: unload it, no object left (rdma res),
# then the device and the driver removed with none of its own counts left
kdone() {
  rmmod uiwarp_ktest || bad "rmmod uiwarp_ktest"
  res=\$(rdma res show uiw0)
  case "\$res" in *"pd 0 cq 0 qp 0 "*"mr 0 "*"srq 0"*) ok "\$1: no objects left (rdma res)";; *) bad "\$1: objects left: \$res";; esac
  rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' || bad "removal after the \$1 test"
}
modprobe libcrc32c || bad "modprobe libcrc32c"
kclr
if insmod /x/uiwarp.ko; then ok "insmod"; else bad "insmod (\$?)"; fi
line=\$(dmesg | grep 'uiwarp: wire self-test:' | tail -1)
echo "dmesg: \$line"
case "\$line" in *"wire self-test: PASS"*) ok "self-test";; *) bad "self-test: \${line:-no summary line}";; esac
grep -q '^uiwarp ' /proc/modules && ok "loaded" || bad "not in /proc/modules"
if rmmod uiwarp; then ok "rmmod"; else bad "rmmod (\$?)"; fi
grep -q '^uiwarp ' /proc/modules && bad "still loaded after rmmod" || ok "unloaded"
kclr
insmod /x/uiwarp.ko selftest=0 && rmmod uiwarp
dmesg | grep -q 'uiwarp: wire self-test: skipped' && ok "selftest=0 skips" || bad "selftest=0: no 'skipped' line"
# the device: rdma link add, shown by rdma link / rdma dev and sysfs, one
# per interface, rdma link delete, and a device left at rmmod
if insmod /x/uiwarp.ko selftest=0; then ok "insmod selftest=0"; else bad "insmod selftest=0"; fi
if rdma link add uiw0 type uiwarp netdev eth0; then ok "rdma link add"; else bad "rdma link add"; fi
rdma link show uiw0/1
rdma link show uiw0/1 | grep -q 'state ACTIVE.*netdev eth0' && ok "rdma link: uiw0/1 ACTIVE on eth0" || bad "rdma link: no ACTIVE uiw0/1 on eth0"
rdma dev show uiw0
rdma dev show uiw0 | grep -q 'node_type rnic' && ok "rdma dev: uiw0 is an RNIC" || bad "rdma dev: uiw0 is not an rnic"
cat /sys/class/infiniband/uiw0/ports/1/link_layer /sys/class/infiniband/uiw0/ports/1/gids/0 2>&1
grep -qi ethernet /sys/class/infiniband/uiw0/ports/1/link_layer && ok "sysfs: Ethernet link layer" || bad "sysfs: link_layer"
# port events: the interface down and up again (carrier changes take the
# same path); the port's state as rdma link and sysfs show it, and the
# driver's line for each dispatched IB_EVENT_PORT_ERR/ACTIVE
kclr
wait_port() { # \$1: ACTIVE or DOWN; up to 5 s
  i=0
  while ! grep -q "\$1" /sys/class/infiniband/uiw0/ports/1/state && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done
  grep -q "\$1" /sys/class/infiniband/uiw0/ports/1/state
}
ip link set eth0 down
wait_port DOWN && rdma link show uiw0/1 | grep -q 'state DOWN' && dmesg | grep -q 'uiw0: port 1 DOWN (eth0)' &&
  ok "eth0 down: port DOWN, event dispatched" || bad "eth0 down: \$(cat /sys/class/infiniband/uiw0/ports/1/state)"
ip link set eth0 up
wait_port ACTIVE && rdma link show uiw0/1 | grep -q 'state ACTIVE' && dmesg | grep -q 'uiw0: port 1 ACTIVE (eth0)' &&
  ok "eth0 up: port ACTIVE, event dispatched" || bad "eth0 up: \$(cat /sys/class/infiniband/uiw0/ports/1/state)"
rdma link add uiw1 type uiwarp netdev eth0 2>/dev/null && bad "a second device on eth0 was accepted" || ok "a second device on eth0 is refused"
if rdma link delete uiw0; then ok "rdma link delete"; else bad "rdma link delete"; fi
rdma link show 2>/dev/null | grep -q uiw0 && bad "uiw0 still shown after delete" || ok "uiw0 gone after delete"
rdma link add uiw0 type uiwarp netdev eth0 && rmmod uiwarp && ok "rmmod with a device" || bad "rmmod with a device"
[ -e /sys/class/infiniband/uiw0 ] && bad "uiw0 still in sysfs after rmmod" || ok "uiw0 gone after rmmod"
# rdma-core sees the device (docs/KERNEL.md "Seen by rdma-core"): the
# module's uverbs context gives uiw0 a uverbs node; with the provider
# plugin (kernel/provider, libuiwarp-rdmav34.so, shipped in /x) named in
# /etc/libibverbs.d, Debian's ibv_devices lists it and ibv_devinfo queries
# it; verbs the provider does not offer fail with EOPNOTSUPP
# (uiwarp_ibv_probe); the module unloads while a process holds the device
# open (disassociated: the process's next query fails with EIO). The
# plugin stays installed for the rest of the run.
if [ -f /x/libuiwarp-rdmav34.so ] && [ -x /x/uiwarp_ibv_probe ]; then
  if insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev eth0; then
    grep -qx uiw0 /sys/class/infiniband_verbs/uverbs*/ibdev 2>/dev/null && ok "uverbs node for uiw0" || bad "no uverbs node for uiw0"
    mkdir -p /etc/libibverbs.d && echo 'driver /x/libuiwarp' >/etc/libibverbs.d/uiwarp.driver
    ibv_devices >/tmp/ibvd.out 2>&1; cat /tmp/ibvd.out
    grep -q '^ *uiw0 ' /tmp/ibvd.out && ok "ibv_devices lists uiw0" || bad "ibv_devices does not list uiw0"
    ibv_devinfo -d uiw0 >/tmp/ibvi.out 2>&1; rc=\$?; cat /tmp/ibvi.out
    [ \$rc = 0 ] && grep -q 'transport:.*iWARP' /tmp/ibvi.out && grep -q 'state:.*PORT_ACTIVE' /tmp/ibvi.out &&
      ok "ibv_devinfo -d uiw0: iWARP, port 1 ACTIVE" || bad "ibv_devinfo -d uiw0 (rc \$rc)"
    ibv_devinfo -v -d uiw0 >/tmp/ibvi.out 2>&1; rc=\$?
    [ \$rc = 0 ] && grep -q 'max_qp:.*1024\$' /tmp/ibvi.out && grep -q 'max_cqe:.*4096\$' /tmp/ibvi.out &&
      ok "ibv_devinfo -v: the module's limits" || { cat /tmp/ibvi.out; bad "ibv_devinfo -v -d uiw0 (rc \$rc)"; }
    /x/uiwarp_ibv_probe uiw0 >/tmp/probe.out 2>&1; rc=\$?; cat /tmp/probe.out
    [ \$rc = 0 ] && grep -q 'ibv_alloc_pd: errno 95 ' /tmp/probe.out && grep -q 'ibv_create_cq: errno 95 ' /tmp/probe.out &&
      ok "verbs the provider does not offer: EOPNOTSUPP" || bad "uiwarp_ibv_probe (rc \$rc)"
    held() { # a process with uiw0 open; \$1: what removes the device
      rm -f /tmp/held; /x/uiwarp_ibv_probe uiw0 hold /tmp/held >/tmp/probe.out 2>&1 & pp=\$!
      i=0
      while [ ! -e /tmp/held ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
      if eval "\$1" && [ ! -e /sys/class/infiniband/uiw0 ]; then ok "\$1 with uiw0 open in a process"; else bad "\$1 with uiw0 open in a process"; fi
      wait \$pp; rc=\$?; cat /tmp/probe.out
      [ \$rc = 0 ] && grep -q 'errno 5 ' /tmp/probe.out && ok "\$1: the process gets EIO, closes cleanly" || bad "\$1: the holding process (rc \$rc)"
    }
    held "rdma link delete uiw0"
    rdma link add uiw0 type uiwarp netdev eth0 || bad "rdma link add after the delete"
    held "rmmod uiwarp"
    grep -q '^uiwarp ' /proc/modules && bad "uiwarp still loaded"
  else
    bad "rdma-core: insmod/rdma link add"
  fi
  grep -q '^uiwarp ' /proc/modules && { rdma link delete uiw0; rmmod uiwarp; }
else
  echo "KTEST skip rdma-core provider (no libuiwarp-rdmav34.so or uiwarp_ibv_probe in /x)"
fi
# the interface going away takes its device along (a hang here ends in
# siw-vm-run's timeout)
if [ -f /x/dummy.ko ]; then
  insmod /x/dummy.ko && insmod /x/uiwarp.ko selftest=0 && ip link add d0 type dummy && ip link set d0 up &&
    rdma link add uiwd type uiwarp netdev d0 && [ -e /sys/class/infiniband/uiwd ] && ip link del d0 &&
    ok "interface removed under a device" || bad "interface removed under a device"
  i=0
  while [ -e /sys/class/infiniband/uiwd ] && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done
  [ -e /sys/class/infiniband/uiwd ] && bad "uiwd still there after its interface" || ok "uiwd gone with its interface"
  rmmod uiwarp && rmmod dummy || bad "rmmod after the interface test"
else
  echo "KTEST skip interface removal (no dummy.ko)"
fi
# a kernel consumer (uiwarp_ktest.ko, kernel/uiw_ktest.c) goes through
# PD, CQ, QP, fast-register MR, REG_MR/LOCAL_INV, misuse, flush and
# ib_drain_qp on uiw0; then every object is gone (rdma res, the driver's
# own counts at removal)
kclr
if insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev eth0 && insmod /x/uiwarp_ktest.ko; then
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  dmesg | grep -E 'Terminate' | head -4
  case "\$line" in *"verbs test: PASS"*) ok "kernel verbs consumer";; *) dmesg | grep uiwarp_ktest; bad "kernel verbs consumer: \${line:-no summary line}";; esac
  dmesg | grep -q 'Terminate DDP/tagged buffer/invalid STag' && dmesg | grep -q 'Terminate received: DDP/tagged buffer/invalid STag' &&
    ok "the bad Write: Terminate sent and received" || bad "the bad Write: no Terminate in dmesg"
  # the SRQ connection's two Sends that found the SRQ empty: one wait
  # each (no polling), the first woken by the post, the second ended by
  # its QP's destruction (the driver's read-only srq_waits counter)
  sw=\$(cat /sys/module/uiwarp/parameters/srq_waits 2>/dev/null)
  dmesg | grep 'srq: the waiting Send completed'
  [ "\$sw" = 2 ] && dmesg | grep -q 'srq: the waiting Send completed' &&
    ok "SRQ: 2 Sends waited on an empty SRQ, one wait each (srq_waits \$sw), the post woke the first" ||
    bad "SRQ: srq_waits \$sw, want 2"
  rmmod uiwarp_ktest || bad "rmmod uiwarp_ktest"
  res=\$(rdma res show uiw0)
  echo "rdma res: \$res"
  case "\$res" in *"pd 0 cq 0 qp 0 "*"mr 0 "*"srq 0"*) ok "no objects left (rdma res)";; *) bad "objects left: \$res";; esac
  rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' && ok "removal: the driver counts no object" ||
    bad "removal after the consumer"
else
  bad "kernel verbs consumer: insmod/rdma link add"
  rmmod uiwarp_ktest 2>/dev/null; rmmod uiwarp 2>/dev/null
fi
# a hostile peer: a raw TCP socket in uiwarp_ktest.ko speaks MPA to a QP
# on uiw0, then sends one malformed or forbidden FPDU per connection (22
# Terminate classes: bad CRC, DDP and RDMAP versions, invalid STag, bounds, TO
# wrap, MSN, QN, MO, oversize Send, ULPDU_Length 1, reserved opcode,
# Read Requests beyond IRD, Read sources out of bounds or unregistered,
# a Write after a remote invalidate, a bad Invalidate STag, a Write
# without remote write, an unsolicited Read Response), 3 bad MPA
# Requests (not MPA, PD_Length 65535, markers), 3 bad MPA Replies to the
# driver's initiator (A not mirrored, ORD beyond its IRD: Terminates
# LLP/MPA/7 and /6; a bad key: none), the revision 1 fallback after a
# reset Request, a silent responder and a silent initiator (the MPA
# timer, mpa_timeout_ms=2000), 5 RFC 7306 classes (an Atomic Request
# without remote atomic rights, misaligned, to an unregistered STag, with
# the reserved AOpCode; Immediate Data of 12 bytes), the connection
# bounds and the close timer (short connect_timeout_ms, accept_timeout_ms
# and close_timeout_ms: ktimers), then 500 randomly damaged streams;
# each checked in the module: the Terminate's bytes, EOF, that QP in ERR
# with its receives completed in error, guard pages intact, a second QP
# still carrying Sends; then no object left
kclr
ktimers="connect_timeout_ms=2000 accept_timeout_ms=1000 close_timeout_ms=2000"
if insmod /x/uiwarp.ko selftest=0 mpa_timeout_ms=2000 \$ktimers && rdma link add uiw0 type uiwarp netdev eth0 && insmod /x/uiwarp_ktest.ko hostile=1 mpa_timeout_ms=2000 \$ktimers; then
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  dmesg | grep 'hostile peer:'
  case "\$line" in *"verbs test: PASS"*) dmesg | grep -q 'hostile peer: 44 classes' && ok "hostile peer: 44 classes, damaged streams" || bad "hostile peer: not all classes ran";; *) dmesg | grep -E 'uiwarp' | tail -30; bad "hostile peer: \${line:-no summary line}";; esac
  # the driver's own lines for the Reply classes and the timers
  nt=\$(dmesg | grep 'MPA Reply refused.*: Terminate LLP/MPA/.* sent\$' | grep -vc 'not sent\$')
  if [ "\$nt" = 2 ] && dmesg | grep -q 'no MPA Reply in 2000 ms' && dmesg | grep -q 'no MPA Request in 2000 ms' &&
     dmesg | grep -q 'reset the MPA revision 2 Request: trying revision 1'; then
    ok "hostile peer: the driver's Terminates for 2 bad Replies, its MPA timers, the revision 1 retry"
  else
    dmesg | grep -E 'MPA|revision' | tail; bad "hostile peer: the driver's lines for the MPA classes (\$nt Terminates)"
  fi
  # the connection bounds (uiwarp_ktest.ko t_timers): a TCP connect whose
  # SYNs are dropped fails after connect_timeout_ms, two connect requests
  # the ULP never answers are rejected after accept_timeout_ms (the late
  # accept and reject fail), an orderly close toward a peer that never
  # closes ends after close_timeout_ms
  dmesg | grep -E 'uiwarp_ktest: timers:|no TCP connection|not answered in|no FIN from'
  na=\$(dmesg | grep -c 'connect request from .* not answered in 1000 ms: rejected\$')
  if dmesg | grep -q 'uiwarp_ktest: timers: done' && dmesg | grep -q 'no TCP connection to .* in 2000 ms: connect failed' && [ "\$na" = 2 ]; then
    ok "connection bounds: a connect whose SYNs are dropped fails in 2000 ms, 2 unanswered connect requests rejected in 1000 ms, the late answers fail"
  else
    bad "connection bounds: the driver's lines (\$na requests rejected)"
  fi
  dmesg | grep -q 'uiwarp_ktest: timers: done' && dmesg | grep -q 'no FIN from .* in 2000 ms after ours: connection closed' &&
    ok "close timer: a peer that never answers our FIN, closed after 2000 ms" || bad "close timer: no driver line"
  kdone "hostile peer"
else
  bad "hostile peer: insmod/rdma link add"
  rmmod uiwarp_ktest 2>/dev/null; rmmod uiwarp 2>/dev/null
fi
# the initiator's guard against siw's first-FPDU race (docs/KERNEL.md
# "The first FPDU and siw"), first_hold_ms=500 against a raw responder
# (uiwarp_ktest.ko wake=1): with the Write RTR, with the Read RTR and
# client-server (revision 1) the RTR and the first Send come at once, a
# silent responder gets a wake-up 500 ms after the Reply and one more
# 5000 ms later, then none, one that sent an FPDU (the Read RTR's Read
# Response) none; then no object left
kclr
if insmod /x/uiwarp.ko selftest=0 first_hold_ms=500 && rdma link add uiw0 type uiwarp netdev eth0 &&
  { echo 'module uiwarp +p' >/proc/dynamic_debug/control; true; } && insmod /x/uiwarp_ktest.ko wake=1 wake_hold_ms=500; then
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  dmesg | grep 'first FPDU guard:'
  case "\$line" in *"verbs test: PASS"*) ok "first FPDU guard: nothing held (Write RTR, Read RTR, client-server), 2 wake-ups to a silent peer, none after the peer sent";; *) dmesg | grep -E 'uiwarp' | tail -30; bad "first FPDU guard: \${line:-no summary line}";; esac
  nw=\$(dmesg | grep -c 'no FPDU from the peer yet: a wake-up')
  [ "\$nw" = 6 ] && ok "first FPDU guard: the driver's lines for 6 wake-ups (2 each: Write RTR, Read RTR, client-server)" || bad "first FPDU guard: \$nw wake-up lines, want 6"
  kdone "first FPDU guard"
else
  bad "first FPDU guard: insmod/rdma link add"
  rmmod uiwarp_ktest 2>/dev/null; rmmod uiwarp 2>/dev/null
fi
# the connection test again with MPA CRC asked for (mpa_crc=2),
# 1000-byte FPDUs (max_fpdu) and only the Read RTR (mpa_rtr=4: the
# initiator offers it, the responder supports it): the same data over
# CRC-protected, many-FPDU streams after a zero-length Read RTR
kclr
if insmod /x/uiwarp.ko selftest=0 mpa_crc=2 max_fpdu=1000 mpa_rtr=4 && rdma link add uiw0 type uiwarp netdev eth0 &&
  { echo 'module uiwarp +p' >/proc/dynamic_debug/control; true; } && insmod /x/uiwarp_ktest.ko verbs=0; then
  dmesg | grep -q 'in RTS (CRC 1, FPDU 1000, RTR read,' && ! dmesg | grep 'in RTS' | grep -qv 'RTR read' && ok "CRC negotiated, 1000-byte FPDUs, Read RTR" || bad "no 'in RTS (CRC 1, FPDU 1000, RTR read,' line"
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  case "\$line" in *"verbs test: PASS"*) ok "connection test with CRC, 1000-byte FPDUs";; *) dmesg | grep uiwarp_ktest; bad "connection test with CRC: \${line:-no summary line}";; esac
  rmmod uiwarp_ktest || bad "rmmod uiwarp_ktest"
  rdma link delete uiw0 && rmmod uiwarp || bad "removal after the CRC test"
else
  bad "connection test with CRC: insmod/rdma link add"
  rmmod uiwarp_ktest 2>/dev/null; rmmod uiwarp 2>/dev/null
fi
# interop with siw: a veth pair, v0 (10.0.4.1) here with uiw0 on it, v1
# (10.0.4.2) in a network namespace "peer" with siw0 on it (two devices in
# one namespace would talk over loopback, and rdma_cm would bind both ends
# to the destination's device); rdma-core's rping server on siw0 in the
# namespace, uiwarp_ktest.ko's rping client on uiw0: 3 rounds of 65000
# bytes that siw Reads from the module's memory and Writes back, compared
# byte for byte
if [ -f /x/veth.ko ] && modprobe siw 2>/dev/null; then
  kclr
  insmod /x/veth.ko 2>/dev/null
  unshare -n sleep 300 &
  peer=\$!
  sleep 0.2
  ip link add v0 type veth peer name v1 2>/dev/null || ip link add v0 type veth
  v1=\$(ip -o link show | sed -n 's/^[0-9]*: \\([a-z0-9]*\\)@v0.*/\\1/p' | head -1)
  { [ -n "\$v1" ] && ip link set "\$v1" netns \$peer && ip addr add 10.0.4.1/24 dev v0 && ip link set v0 up &&
    nsenter -t \$peer -n sh -c "ip link set \$v1 name v1; ip addr add 10.0.4.2/24 dev v1 && ip link set v1 up && ip link set lo up && rdma link add siw0 type siw netdev v1" &&
    true; } || { ip -o link show; bad "siw interop: setup"; }
  # pass 1: siw's default variant (no P2P as initiator), the module's
  # initiator offers both RTRs (siw picks Write); pass 2: siw's p2p variant
  # (its initiator offers both RTRs) and the module offering and supporting
  # only the Read RTR (mpa_rtr=4): Read RTRs both ways
  # the ktest's rping server on uiw0 (10.0.4.1:\$1), siw0's rping -c -V
  # against it; \$2 names the checks; the ktest's summary line in \$line
  siw_cli() {
    insmod /x/uiwarp_ktest.ko dev=uiw0 rping_listen=10.0.4.1 rping_port=\$1 &
    kt=\$!
    i=0
    while ! ss -ltn 2>/dev/null | grep -q ":\$1 " && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
    nsenter -t \$peer -n rping -c -a 10.0.4.1 -p \$1 -C 3 -S 65000 -V >/tmp/rpc.log 2>&1; rc=\$?
    rping_done /tmp/rpc.log \$rc && ok "\$2: rping -c -V on siw0 against a uiw0 server" || { cat /tmp/rpc.log; bad "\$2: rping -c on siw0: rc \$rc"; }
    wait \$kt
    line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
    echo "dmesg: \$line"
  }
  for crc in 1 2; do
  rtr=6 want=write swant=none
  if [ \$crc = 2 ] && [ -f /lib/siw-variants/p2p/siw.ko ]; then
    rtr=4 want=read swant=read
    nsenter -t \$peer -n rdma link delete siw0; rmmod siw
    insmod /lib/siw-variants/p2p/siw.ko && nsenter -t \$peer -n rdma link add siw0 type siw netdev v1 || bad "siw interop: siw's p2p variant"
  fi
  insmod /x/uiwarp.ko selftest=0 mpa_crc=\$crc mpa_rtr=\$rtr && rdma link add uiw0 type uiwarp netdev v0 || bad "siw interop: uiw0 on v0"
  echo 'module uiwarp +p' >/proc/dynamic_debug/control
  rm -f /tmp/rping.out /tmp/rping.rc
  (nsenter -t \$peer -n rping -s -a 10.0.4.2 -p 7174 -C 3 -S 65000 >/tmp/rping.out 2>&1; echo "rping rc=\$?" >/tmp/rping.rc) &
  i=0
  while ! nsenter -t \$peer -n ss -ltn 2>/dev/null | grep -q ':7174 ' && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done
  insmod /x/uiwarp_ktest.ko dev=uiw0 rping_dst=10.0.4.2 rping_size=65000
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  i=0
  while [ ! -s /tmp/rping.rc ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
  cat /tmp/rping.out /tmp/rping.rc
  dmesg | grep 'in RTS' | tail -1
  dmesg | grep 'rping client: ESTABLISHED' | sed "s/^.*rping client/siw interop (mpa_crc=\$crc) timing: rping client/"
  case "\$line" in *"verbs test: PASS"*) ok "interop (mpa_crc=\$crc): rping client on uiw0, rping -s on siw0";; *) dmesg | grep -E 'uiwarp|siw' | tail -20; bad "interop with siw (mpa_crc=\$crc): \${line:-no summary line}";; esac
  rc=\$(sed -n 's/^rping rc=//p' /tmp/rping.rc 2>/dev/null)
  rping_done /tmp/rping.out "\${rc:-none}" && ok "interop (mpa_crc=\$crc): siw's rping server exits 0" || bad "interop: siw's rping server: rc \${rc:-none}, \$(tail -1 /tmp/rping.out)"
  # siw asks for no CRC: it is on only when we ask (mpa_crc=2)
  dmesg | grep -q "in RTS (CRC \$((crc - 1))" && ok "interop (mpa_crc=\$crc): CRC \$((crc - 1)) negotiated" || bad "interop (mpa_crc=\$crc): CRC not as negotiated"
  # RFC 6581: the module's initiator asked for P2P, siw's responder chose
  # the RTR (Write when offered), the module sent it first
  dmesg | grep 'in RTS' | tail -1 | grep -q "RTR \$want," && ok "interop (mpa_crc=\$crc): the uiw0 client sent the \$want RTR siw chose" || bad "interop (mpa_crc=\$crc): not RTR \$want: \$(dmesg | grep 'in RTS' | tail -1)"
  rmmod uiwarp_ktest
  # the other way: rping -c -V on siw0 against the ktest's rping server on
  # uiw0 (it Reads the client's buffer and Writes it back; rping validates)
  kclr
  siw_cli 7175 "interop (mpa_crc=\$crc)"
  case "\$line" in *"verbs test: PASS"*) ok "interop (mpa_crc=\$crc): the uiw0 rping server";; *) dmesg | grep -E 'uiwarp|siw' | tail -20; bad "interop (mpa_crc=\$crc): the uiw0 rping server: \${line:-no summary line}";; esac
  dmesg | grep 'in RTS' | tail -1 | grep -q "RTR \$swant," && ok "interop (mpa_crc=\$crc): the uiw0 server's RTR: \$swant" || bad "interop (mpa_crc=\$crc): the uiw0 server, not RTR \$swant: \$(dmesg | grep 'in RTS' | tail -1)"
  # the dead-peer options on the passive side's accepted socket, read
  # back at RTS: the default T = 30000 ms (T/2 = 15 s, T/10 = 3 s)
  dmesg | grep 'dead peer: keepalive' | tail -1 | grep -q 'keepalive 1, idle 15 s, interval 3 s, 5 probes, user timeout 30000 ms' && ok "interop (mpa_crc=\$crc): the uiw0 server's socket: keepalive 15 s/3 s/5, user timeout 30000 ms" || bad "interop (mpa_crc=\$crc): the uiw0 server's socket options: \$(dmesg | grep 'dead peer: keepalive' | tail -1)"
  rmmod uiwarp_ktest
  rdma link delete uiw0; rmmod uiwarp || bad "interop: rmmod uiwarp"
  kclr
  done
  # dead peers (peer_timeout_ms, the library's UIWARP_PEER_TIMEOUT; T =
  # 3000 ms here): the ktest's rping client on uiw0 connected to siw's
  # rping -s, idle 1.5 T with the peer alive (its TCP answers the
  # keepalive probes), then the peer's TCP made silent by a blackhole route
  # to 10.0.4.1 in its namespace (what it sends is dropped: no ACK, no
  # reset, no ICMP, a peer gone without a word; a stopped process would
  # not do, its kernel still ACKs), /tmp/uiw-deadpeer-cut created when it
  # is in; the ktest checks DISCONNECTED within T plus 3 s of it, the QP
  # in ERR, the receive flushed. Mode 1 an idle connection (keepalive),
  # mode 2 a Send that is never acknowledged (TCP_USER_TIMEOUT)
  for dp in 1 2; do
  kclr
  dpn=idle; [ \$dp = 2 ] && dpn=sender
  insmod /x/uiwarp.ko selftest=0 peer_timeout_ms=3000 && rdma link add uiw0 type uiwarp netdev v0 || bad "dead peer (\$dpn): uiw0 on v0"
  echo 'module uiwarp +p' >/proc/dynamic_debug/control
  rm -f /tmp/uiw-deadpeer-cut
  nsenter -t \$peer -n rping -s -a 10.0.4.2 -p \$((7176 + dp)) -C 1 -S 65000 >/tmp/rping.dead 2>&1 &
  rp=\$!
  i=0
  while ! nsenter -t \$peer -n ss -ltn 2>/dev/null | grep -q ":\$((7176 + dp)) " && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done
  insmod /x/uiwarp_ktest.ko dev=uiw0 rping_dst=10.0.4.2 rping_port=\$((7176 + dp)) rping_deadpeer=\$dp &
  kt=\$!
  i=0
  while ! dmesg | grep -q 'silence the peer now' && [ \$i -lt 300 ]; do sleep 0.1; i=\$((i + 1)); done
  nsenter -t \$peer -n ip route add blackhole 10.0.4.1/32 && touch /tmp/uiw-deadpeer-cut || bad "dead peer (\$dpn): the blackhole route"
  wait \$kt
  line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
  echo "dmesg: \$line"
  dmesg | grep -E 'dead peer|not answering'
  case "\$line" in *"verbs test: PASS"*) ok "dead peer (\$dpn): idle 4.5 s with siw's rping -s alive, then silent: DISCONNECTED within 3 s + 3 s, QP in ERR, the receive flushed";; *) dmesg | grep -E 'uiwarp|siw' | tail -20; bad "dead peer (\$dpn): \${line:-no summary line}";; esac
  dmesg | grep -q "uiw0: peer 10.0.4.2:\$((7176 + dp)) not answering (TCP timed out, peer_timeout_ms 3000): connection closed" && ok "dead peer (\$dpn): the driver's line names the peer" || bad "dead peer (\$dpn): no driver line for 10.0.4.2:\$((7176 + dp))"
  # the options read back from the connection's socket (T/2 s = 1, T/10 s
  # at least 1, 5 probes, T ms)
  dmesg | grep 'dead peer: keepalive' | tail -1 | grep -q 'keepalive 1, idle 1 s, interval 1 s, 5 probes, user timeout 3000 ms' && ok "dead peer (\$dpn): keepalive 1/1 s/5 and the user timeout on the socket" || bad "dead peer (\$dpn): socket options: \$(dmesg | grep 'dead peer: keepalive' | tail -1)"
  kill \$rp 2>/dev/null; wait \$rp 2>/dev/null
  nsenter -t \$peer -n ip route del blackhole 10.0.4.1/32
  rm -f /tmp/uiw-deadpeer-cut
  rmmod uiwarp_ktest
  rdma link delete uiw0; rmmod uiwarp || bad "dead peer (\$dpn): rmmod uiwarp"
  dmesg | grep -q 'objects left at unload' && bad "dead peer (\$dpn): \$(dmesg | grep 'objects left at unload')" || ok "dead peer (\$dpn): no endpoint left at unload"
  kclr
  done
  # siw's rev1 variant (MPA revision 1: no IRD/ORD words, no P2P) as
  # initiator: its rping -c -V against the ktest's rping server on uiw0,
  # which answers at revision 1 and Reads the client's buffer
  if [ -f /lib/siw-variants/rev1/siw.ko ]; then
    nsenter -t \$peer -n rdma link delete siw0; rmmod siw
    insmod /lib/siw-variants/rev1/siw.ko && nsenter -t \$peer -n rdma link add siw0 type siw netdev v1 || bad "siw interop: siw's rev1 variant"
    insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev v0 || bad "siw interop (rev1): uiw0 on v0"
    echo 'module uiwarp +p' >/proc/dynamic_debug/control
    siw_cli 7176 "interop (siw rev1)"
    dmesg | grep 'MPA Request revision' | tail -1
    case "\$line" in *"verbs test: PASS"*) dmesg | grep -q 'MPA Request revision 1, answered at revision 1' && ok "interop (siw rev1): the uiw0 rping server, MPA revision 1" || bad "interop (siw rev1): not revision 1";; *) dmesg | grep -E 'uiwarp|siw' | tail -20; bad "interop (siw rev1): the uiw0 rping server: \${line:-no summary line}";; esac
    rmmod uiwarp_ktest
    rdma link delete uiw0; rmmod uiwarp || bad "interop (siw rev1): rmmod uiwarp"
    # the siw the rest of the run used before (the p2p variant when built)
    nsenter -t \$peer -n rdma link delete siw0; rmmod siw
    { [ -f /lib/siw-variants/p2p/siw.ko ] && insmod /lib/siw-variants/p2p/siw.ko; } || modprobe siw
    nsenter -t \$peer -n rdma link add siw0 type siw netdev v1
    kclr
  fi
  nsenter -t \$peer -n rdma link delete siw0; ip link del v0; kill \$peer
else
  echo "KTEST skip siw interop (no veth.ko or siw.ko)"
fi
# interop with uiwarp's userspace library on the host (Debian's rping
# through uiwarp run), across qemu's user network: the host's rping
# servers listen on 127.0.0.1:2718N, 10.0.2.2 here; the module's rping
# client on uiw0 (eth0) connects to each, its start buffer Read by the
# library and Written back, compared byte for byte; then the reverse: the
# module's rping server on 10.0.2.15:7190 (the host's 127.0.0.1:27190
# forwarded to it) and the host's rping -c -V. A case is a size, with a
# "c" after it when the module asks for CRC (mpa_crc=2; else mpa_crc=1:
# CRC only when the peer asks, and the library does not by default).
# Host and guest hand over through files in /rig: srv.C.rc (a host
# server's exit status), kready.C (the module listens), cli.C.rc (the
# host client's exit status)
if [ -f /rig/libcases ]; then
  kcrc=
  kload() { # \$1: mpa_crc, \$2: mpa_p2p, \$3: mpa_markers (default 0); uiwarp.ko with uiw0 on eth0, reloaded when they change
    [ "\$kcrc" = "\$1 \$2 \${3:-0}" ] && return 0
    [ -z "\$kcrc" ] || { rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' || bad "lib interop: removal"; }
    kcrc="\$1 \$2 \${3:-0}"
    insmod /x/uiwarp.ko selftest=0 mpa_crc=\$1 mpa_p2p=\$2 mpa_markers=\${3:-0} && rdma link add uiw0 type uiwarp netdev eth0 || bad "lib interop: uiw0 on eth0"
    echo 'module uiwarp +p' >/proc/dynamic_debug/control
  }
  waitf() { i=0; while [ ! -s "\$1" ] && [ \$i -lt \$((\$2 * 10)) ]; do sleep 0.1; i=\$((i + 1)); done; [ -s "\$1" ]; }
  # the negotiated CRC in the driver's debug line: 1 when the module asked
  crcchk() { # \$1: the case
    want=0; case \$1 in *[cL]*) want=1;; esac
    dmesg | grep -q "in RTS (CRC \$want" && ok "lib interop \$1: CRC \$want negotiated" || bad "lib interop \$1: \$(dmesg | grep 'in RTS' | tail -1)"
    # m: both sides ask for markers (RFC 5044 §4.3), both ways
    case \$1 in *m*) dmesg | grep 'in RTS' | tail -1 | grep -q 'markers 1/1)' && ok "lib interop \$1: markers both ways" || bad "lib interop \$1: markers not both ways: \$(dmesg | grep 'in RTS' | tail -1)";; esac
  }
  # the RTR (RFC 6581): none in client-server (p: neither initiator asks
  # for P2P), Read where the library offers or supports only Read (r),
  # else Write (both initiators offer both, both responders prefer Write)
  rtrchk() { # \$1: the case, \$2: client or server
    want=write; case \$1 in *[pv]*) want=none;; *r*) want=read;; esac
    dmesg | grep 'in RTS' | tail -1 | grep -q "RTR \$want," && ok "lib interop \$1: the module's \$2, RTR \$want" || bad "lib interop \$1 (\$2): not RTR \$want: \$(dmesg | grep 'in RTS' | tail -1)"
  }
  n=0
  for cs in \$(cat /rig/libcases); do
    n=\$((n + 1)) s=\${cs%%[!0-9]*} crc=1 p2p=1 mk=0
    case \$cs in *c*) crc=2;; esac
    case \$cs in *p*) p2p=0;; esac
    case \$cs in *m*) mk=1;; esac
    kclr
    kload \$crc \$p2p \$mk
    insmod /x/uiwarp_ktest.ko dev=uiw0 rping_dst=10.0.2.2 rping_port=\$((27180 + n)) rping_size=\$s rping_count=\$(cat /rig/libcount)
    line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
    echo "dmesg: \$line"
    dmesg | grep 'in RTS' | tail -1
    dmesg | grep 'rping client: ESTABLISHED' | sed "s/^.*rping client/lib interop \$cs timing: rping client/"
    case "\$line" in *"verbs test: PASS"*) ok "lib interop \$cs: the module's rping client (\$s B) against the host's uiwarp rping -s, data compared";; *) dmesg | grep -E 'uiwarp' | tail -20; bad "lib interop \$cs: the module's rping client: \${line:-no summary line}";; esac
    crcchk \$cs
    rtrchk \$cs client
    # v: the library runs MPA revision 1 and resets the module's revision
    # 2 Request; the module tries revision 1 (mpa_rev1_fallback)
    case \$cs in *v*) dmesg | grep -q 'reset the MPA revision 2 Request: trying revision 1' && ok "lib interop \$cs: the module's client fell back to MPA revision 1" || bad "lib interop \$cs: no revision 1 fallback";; esac
    rmmod uiwarp_ktest
    waitf /rig/srv.\$cs.rc 20 && [ "\$(cat /rig/srv.\$cs.rc)" = 0 ] && ok "lib interop \$cs: the host's rping -s exits 0" ||
      bad "lib interop \$cs: the host's rping -s: rc '\$(cat /rig/srv.\$cs.rc 2>/dev/null)'"
  done
  for cs in \$(cat /rig/libcases); do
    crc=1 p2p=1 mk=0
    case \$cs in *c*) crc=2;; esac
    case \$cs in *p*) p2p=0;; esac
    case \$cs in *m*) mk=1;; esac
    kclr
    kload \$crc \$p2p \$mk
    insmod /x/uiwarp_ktest.ko dev=uiw0 rping_listen=10.0.2.15 rping_port=7190 rping_count=\$(cat /rig/libcount) &
    kt=\$!
    i=0
    while ! ss -ltn 2>/dev/null | grep -q ':7190 ' && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
    echo ready >/rig/kready.\$cs
    wait \$kt
    line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
    echo "dmesg: \$line"
    dmesg | grep 'in RTS' | tail -1
    case "\$line" in *"verbs test: PASS"*) ok "lib interop \$cs: the module's rping server, the host's uiwarp rping -c -V";; *) dmesg | grep -E 'uiwarp' | tail -20; bad "lib interop \$cs: the module's rping server: \${line:-no summary line}";; esac
    crcchk \$cs
    rtrchk \$cs server
    case \$cs in *v*) dmesg | grep -q 'MPA Request revision 1, answered at revision 1' && ok "lib interop \$cs: the module's server answered MPA revision 1" || bad "lib interop \$cs: not revision 1: \$(dmesg | grep 'MPA Request revision' | tail -1)";; esac
    rmmod uiwarp_ktest
    waitf /rig/cli.\$cs.rc 30 && [ "\$(cat /rig/cli.\$cs.rc)" = 0 ] && ok "lib interop \$cs: the host's rping -c -V exits 0" ||
      bad "lib interop \$cs: the host's rping -c -V: rc '\$(cat /rig/cli.\$cs.rc 2>/dev/null)'"
  done
  # RFC 7306 immediate data and atomics against the library: the host's kimm_peer
  # (tests/siw/kimm_peer.c) listens on /rig/kimm's port; the module's
  # client Sends and Writes with Immediate and does a Fetch and Add and a
  # Compare and Swap on the host's word, the host checks and answers with
  # the same, the module checks
  if [ -f /rig/kimm ]; then
    kclr
    kload 1 1
    insmod /x/uiwarp_ktest.ko dev=uiw0 imm_dst=10.0.2.2 imm_port=\$(cat /rig/kimm)
    line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
    echo "dmesg: \$line"
    case "\$line" in *"verbs test: PASS"*) ok "lib interop imm: Send and RDMA Write with Immediate, Fetch and Add and Compare and Swap, module to library and back, values and data compared";; *) dmesg | grep -E 'uiwarp' | tail -20; bad "lib interop imm: \${line:-no summary line}";; esac
    rmmod uiwarp_ktest
    waitf /rig/kimm.rc 20 && [ "\$(cat /rig/kimm.rc)" = 0 ] && ok "lib interop imm: the host's kimm_peer checks pass" ||
      bad "lib interop imm: the host's kimm_peer: rc '\$(cat /rig/kimm.rc 2>/dev/null)'"
  fi
  # RNIC-like peers (tests/rnic/krnic_peer.c, the irdma, cxgb4 and
  # cxgb4-rev1 personalities of tests/rnic/rnic_peer.h, docs/PEERS.md §11): /rig/krnic
  # lists NAME:PORT:GPORT; the host's krnic_peer -m server listens on PORT
  # (the module's rping client, initiator, then a Write of the peer's to a
  # bad STag: the module's Terminate, which the client waits for before its
  # disconnect, rping_term=1), the host's krnic_peer -m client
  # connects to GPORT through qemu's forwarding (the module's rping server,
  # responder, then the peer's Terminate). The peer checks the data and its
  # personality's rules; here: the test's PASS, CRC, the RTR, the Terminates
  # krnic_role NAME ROLE RTR PORT: the module's rping ROLE (client:
  # initiator against the host's krnic_peer -m server on PORT, which ends
  # with a Write to a bad STag; server: responder on PORT, forwarded from
  # the host, whose krnic_peer -m client ends with its own Terminate), then
  # the checks both roles make: the test's PASS, CRC and the RTR, the MPA
  # revision 1 path (cxgb4-rev1), the Terminate, the host peer's verdict
  krnic_role() {
    local pn=\$1 role=\$2 rtr=\$3 port=\$4 what rev1 rev1_ok term term_ok rc line kt i
    case \$role in
    client)
      what="rping client (initiator) against the \$pn personality, 3 x 60000 B Read and Written back, compared"
      rev1='reset the MPA revision 2 Request: trying revision 1' rev1_ok="fell back to MPA revision 1"
      term='Terminate DDP/tagged buffer/invalid STag' term_ok="the module's Terminate for the peer's Write to a bad STag"
      rc=/rig/krnic.srv.\$pn.rc
      insmod /x/uiwarp_ktest.ko dev=uiw0 rping_dst=10.0.2.2 rping_port=\$port rping_size=60000 rping_count=3 rping_term=1
      ;;
    server)
      what="rping server (responder) against the \$pn personality"
      rev1='MPA Request revision 1, answered at revision 1' rev1_ok="answered MPA revision 1"
      term='Terminate received: LLP/' term_ok="the module took the peer's Terminate"
      rc=/rig/krnic.cli.\$pn.rc
      insmod /x/uiwarp_ktest.ko dev=uiw0 rping_listen=10.0.2.15 rping_port=\$port rping_count=3 &
      kt=\$!
      i=0
      while ! ss -ltn 2>/dev/null | grep -q ":\$port " && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
      echo ready >/rig/krready.\$pn
      wait \$kt
      ;;
    esac
    line=\$(dmesg | grep 'uiwarp_ktest: verbs test:' | tail -1)
    echo "dmesg: \$line"
    dmesg | grep -E 'in RTS|Terminate' | tail -3
    case "\$line" in *"verbs test: PASS"*) ok "rnic \$pn: the module's \$what";; *) dmesg | grep -E 'uiwarp' | tail -20; bad "rnic \$pn: the module's rping \$role: \${line:-no summary line}";; esac
    dmesg | grep 'in RTS' | tail -1 | grep -q "CRC 1, .*RTR \$rtr," && ok "rnic \$pn: the module's \$role: CRC on, RTR \$rtr" || bad "rnic \$pn (\$role): not CRC 1 / RTR \$rtr: \$(dmesg | grep 'in RTS' | tail -1)"
    [ \$pn != cxgb4-rev1 ] || { dmesg | grep -q "\$rev1" && ok "rnic \$pn: the module's \$role \$rev1_ok" || bad "rnic \$pn: the module's \$role: no '\$rev1': \$(dmesg | grep 'revision' | tail -1)"; }
    dmesg | grep -q "\$term" && ok "rnic \$pn: \$term_ok" || bad "rnic \$pn: no '\$term' from the module: \$(dmesg | grep Terminate | tail -1)"
    rmmod uiwarp_ktest
    waitf \$rc 30 && [ "\$(cat \$rc)" = 0 ] && ok "rnic \$pn: the host's krnic_peer (against the module's \$role) checks pass" ||
      bad "rnic \$pn: the host's krnic_peer against the module's \$role: rc '\$(cat \$rc 2>/dev/null)'"
  }
  if [ -f /rig/krnic ]; then
    for pp in \$(cat /rig/krnic); do
      pn=\${pp%%:*} pt=\${pp#*:} gp=\${pp##*:}
      pt=\${pt%%:*}
      # the RTR each side picks: irdma's responder Read whenever offered,
      # cxgb4's Replies name Read; the module's responder prefers Write,
      # cxgb4's initiator offers only Read; cxgb4-rev1 (mpa_rev=1) resets
      # the module's revision 2 Request and sends revision 1: client-server
      wc=read ws=write
      case \$pn in cxgb4) ws=read;; cxgb4-rev1) wc=none ws=none;; esac
      kclr
      kload 1 1
      krnic_role \$pn client \$wc \$pt
      kclr
      krnic_role \$pn server \$ws \$gp
    done
  fi
  # the rule's proof: the module at max_fpdu=8192 (above the 1460-byte
  # MSS) against irdma's server (krnic_peer -e on /rig/krmss's port):
  # irdma's Terminate 0x23 / 0x02 for the first Read Response, the
  # module's client fails, its QP closes
  if [ -f /rig/krmss ]; then
    kclr
    kload 1 1
    echo 8192 >/sys/module/uiwarp/parameters/max_fpdu
    insmod /x/uiwarp_ktest.ko dev=uiw0 rping_dst=10.0.2.2 rping_port=\$(cat /rig/krmss) rping_size=60000 rping_count=1
    echo 0 >/sys/module/uiwarp/parameters/max_fpdu
    dmesg | grep -E 'in RTS|Terminate|verbs test:' | tail -3
    dmesg | grep 'in RTS' | tail -1 | grep -q 'FPDU 8192,' && dmesg | grep -q 'Terminate received: LLP/MPA.*/MPA CRC error' &&
      ok "rnic irdma: the module at max_fpdu=8192 gets irdma's Terminate 0x23 / 0x02 (FPDUs over the MSS)" ||
      bad "rnic irdma: max_fpdu=8192: \$(dmesg | grep -E 'in RTS|Terminate' | tail -2 | paste -sd';')"
    rmmod uiwarp_ktest
    waitf /rig/krnic.srv.mss.rc 20 && [ "\$(cat /rig/krnic.srv.mss.rc)" = 0 ] && ok "rnic irdma: the host's krnic_peer -e checks pass" ||
      bad "rnic irdma: the host's krnic_peer -e: rc '\$(cat /rig/krnic.srv.mss.rc 2>/dev/null)'"
  fi
  rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' && ok "lib interop: removal, the driver counts no object" ||
    bad "lib interop: removal"
  kclr
else
  echo "KTEST skip lib interop (no uiwarp build on the host)"
fi
# NVMe over Fabrics: nvmet-rdma exports a file of $nvmib MiB (default
# 32), nvme-rdma connects to it over eth0's own address (rdma_rw: Fast
# Register, Read with Invalidate, Send with Invalidate); the whole device
# read and written with O_DIRECT in 1 MiB requests, compared with the file,
# each timed (NVMEPERF lines: MB/s, 10^6 bytes); no error recovery; the
# controller deleted and the target removed. nvme_on DEV runs it on DEV
# (uiw0, then siw0 on eth0 for comparison: the same test, the same VM).
nvme_target() { # \$1: the backing file's MiB; the subsystem t1, no port
  dd if=/dev/urandom of=/tmp/nvback bs=1M count=\$1 2>/dev/null
  mkdir \$c/subsystems/t1 && echo 1 >\$c/subsystems/t1/attr_allow_any_host &&
    mkdir \$c/subsystems/t1/namespaces/1 && echo /tmp/nvback >\$c/subsystems/t1/namespaces/1/device_path &&
    echo 1 >\$c/subsystems/t1/namespaces/1/buffered_io && echo 1 >\$c/subsystems/t1/namespaces/1/enable
}
nvme_target_rm() {
  echo 0 >\$c/subsystems/t1/namespaces/1/enable
  rmdir \$c/subsystems/t1/namespaces/1 \$c/subsystems/t1
  rm -f /tmp/nvback
}
nvme_port() { # the port on 10.0.2.15:4420, then the host connects (\$1: more options)
  mkdir \$c/ports/1 && echo rdma >\$c/ports/1/addr_trtype && echo ipv4 >\$c/ports/1/addr_adrfam &&
    echo 10.0.2.15 >\$c/ports/1/addr_traddr && echo 4420 >\$c/ports/1/addr_trsvcid &&
    ln -s \$c/subsystems/t1 \$c/ports/1/subsystems/t1 &&
    echo "transport=rdma,traddr=10.0.2.15,trsvcid=4420,nqn=t1\$1" >/dev/nvme-fabrics &&
    { i=0; while [ ! -b /dev/nvme0n1 ] && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done; [ -b /dev/nvme0n1 ]; }
}
nvme_port_rm() {
  rm -f \$c/ports/1/subsystems/t1; rmdir \$c/ports/1
}
now() { cut -d' ' -f1 /proc/uptime; }
rate() { awk "BEGIN { d = \$2 - \$1; if (d <= 0) d = 0.01; printf \"%.1f\", \$3 * 1.048576 / d }"; }
nvme_on() {
  d=\$1
  nvme_target \$nvmib
  tc0=\$(now)
  nvme_port && ok "NVMe-oF on \$d: nvme-rdma connected to nvmet-rdma" || bad "NVMe-oF on \$d: setup or connect"
  echo "NVMe-oF on \$d timing: port and connect \$(awk "BEGIN { printf \\"%.2f\\", \$(now) - \$tc0 }") s"
  t0=\$(now)
  dd if=/dev/nvme0n1 of=/tmp/nvr bs=1M count=\$nvmib iflag=direct 2>/dev/null; r=\$?
  t1=\$(now)
  [ \$r = 0 ] && cmp /tmp/nvr /tmp/nvback && ok "NVMe-oF on \$d: \$nvmib MiB read, the file's bytes" || bad "NVMe-oF on \$d: read"
  rm -f /tmp/nvr
  dd if=/dev/urandom of=/tmp/nvw bs=1M count=\$nvmib 2>/dev/null
  t2=\$(now)
  dd if=/tmp/nvw of=/dev/nvme0n1 bs=1M oflag=direct 2>/dev/null; r=\$?
  t3=\$(now)
  [ \$r = 0 ] && cmp /tmp/nvw /tmp/nvback && ok "NVMe-oF on \$d: \$nvmib MiB written, in the file" || bad "NVMe-oF on \$d: write"
  rm -f /tmp/nvw
  # nvme-rdma's default: one I/O queue per CPU (nothing in the connect
  # string asks otherwise); a reader on each CPU at once, each its half
  nq=\$(dmesg | sed -n 's/.*nvme0: creating \([0-9]*\) I\/O queues.*/\1/p' | tail -1)
  [ "\${nq:-0}" = "\$(nproc)" ] && ok "NVMe-oF on \$d: \$nq I/O queues (one per CPU)" || bad "NVMe-oF on \$d: \${nq:-no} I/O queues for \$(nproc) CPUs"
  h=\$((nvmib / 2)); r=0
  taskset -c 0 dd if=/dev/nvme0n1 of=/tmp/nvq0 bs=256k count=\$((h * 4)) iflag=direct 2>/dev/null & p0=\$!
  taskset -c 1 dd if=/dev/nvme0n1 of=/tmp/nvq1 bs=256k skip=\$((h * 4)) count=\$((h * 4)) iflag=direct 2>/dev/null & p1=\$!
  wait \$p0 || r=1; wait \$p1 || r=1
  dd if=/tmp/nvback of=/tmp/nvh0 bs=1M count=\$h 2>/dev/null; dd if=/tmp/nvback of=/tmp/nvh1 bs=1M skip=\$h count=\$h 2>/dev/null
  [ \$r = 0 ] && cmp /tmp/nvq0 /tmp/nvh0 && cmp /tmp/nvq1 /tmp/nvh1 && ok "NVMe-oF on \$d: two readers, one per CPU, each half the file's bytes" || bad "NVMe-oF on \$d: two readers at once"
  rm -f /tmp/nvq0 /tmp/nvq1 /tmp/nvh0 /tmp/nvh1
  echo "NVMEPERF \$d \$nvmib MiB: read \$(rate \$t0 \$t1 \$nvmib) MB/s, write \$(rate \$t2 \$t3 \$nvmib) MB/s"
  dmesg | grep -E 'error recovery|Reconnecting|QP event|Terminate' && bad "NVMe-oF on \$d: errors in dmesg" || ok "NVMe-oF on \$d: no error recovery"
  echo 1 >/sys/class/nvme/nvme0/delete_controller
  nvme_port_rm
  nvme_target_rm
}
c=/sys/kernel/config/nvmet
if [ -f /x/nv/nvmet-rdma.ko ]; then
  kclr
  for m in crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft t10-pi nvme-core nvme-fabrics nvme-rdma nvmet nvmet-rdma; do
    grep -q "^\$(echo \$m | tr - _) " /proc/modules || insmod /x/nv/\$m.ko || echo "insmod \$m failed"
  done
  grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config
  insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev eth0
  nvme_on uiw0
  rmmod nvme_rdma nvmet_rdma
  # nvmet-rdma with use_srq=1: its receives come from SRQs (one per
  # completion vector), shared by the queues; 8 MiB read and written
  insmod /x/nv/nvme-rdma.ko; insmod /x/nv/nvmet-rdma.ko use_srq=1
  kclr
  nvme_target 8
  if nvme_port; then
    res=\$(rdma res show uiw0)
    case "\$res" in *" srq 0"*) bad "NVMe-oF use_srq=1: no SRQ in use: \$res";; *" srq "*) ok "NVMe-oF use_srq=1: the target's SRQs (\$(echo "\$res" | grep -o 'srq [0-9]*'))";; *) bad "NVMe-oF use_srq=1: \$res";; esac
    dd if=/dev/nvme0n1 of=/tmp/nvr bs=1M count=8 iflag=direct 2>/dev/null && cmp /tmp/nvr /tmp/nvback &&
      dd if=/dev/urandom of=/tmp/nvw bs=1M count=8 2>/dev/null && dd if=/tmp/nvw of=/dev/nvme0n1 bs=1M oflag=direct 2>/dev/null &&
      cmp /tmp/nvw /tmp/nvback && ok "NVMe-oF use_srq=1: 8 MiB read and written, the file's bytes" || bad "NVMe-oF use_srq=1: read/write"
    rm -f /tmp/nvr /tmp/nvw
    dmesg | grep -E 'error recovery|Reconnecting|QP event|Terminate' && bad "NVMe-oF use_srq=1: errors in dmesg" || ok "NVMe-oF use_srq=1: no error recovery"
    echo 1 >/sys/class/nvme/nvme0/delete_controller
  else
    dmesg | tail -20; bad "NVMe-oF use_srq=1: setup or connect"
  fi
  nvme_port_rm
  nvme_target_rm
  rmmod nvme_rdma nvmet_rdma
  res=\$(rdma res show uiw0)
  echo "rdma res: \$res"
  # the core's CQ pool (ib_cq_pool_get) keeps its CQs until the device goes
  case "\$res" in *"pd 0 cq "*" qp 0 "*"mr 0 "*"srq 0"*) ok "NVMe-oF: no PD, QP or MR left (rdma res)";; *) bad "NVMe-oF: objects left: \$res";; esac
  rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' && ok "NVMe-oF: removal, the driver counts no object" ||
    bad "NVMe-oF: removal"
  # the same over siw on eth0, for the throughput beside uiw0's
  if [ \$nvsiw = 1 ]; then
    kclr
    if insmod /x/nv/nvme-rdma.ko && insmod /x/nv/nvmet-rdma.ko && modprobe siw && rdma link add siw0 type siw netdev eth0; then
      nvme_on siw0
      rdma link delete siw0
    else
      bad "NVMe-oF on siw0: setup"
    fi
  fi
  # rmmod uiwarp with NVMe-oF connected over uiw0, \$live rounds, every
  # other one with reads in flight: refused or clean (it is clean: the
  # core's device removal makes nvme-rdma delete its controller and
  # nvmet-rdma its queues); then the rdma modules' reference counts,
  # TCP sockets and the kernel's slab total back where they were
  kclr
  grep -q '^nvme_rdma ' /proc/modules || insmod /x/nv/nvme-rdma.ko
  grep -q '^nvmet_rdma ' /proc/modules || insmod /x/nv/nvmet-rdma.ko
  mods0=\$(grep -E '^(ib_core|iw_cm|rdma_cm|nvme_rdma|nvmet_rdma) ' /proc/modules | awk '{print \$1, \$3}')
  tcp0=\$(grep '^TCP:' /proc/net/sockstat | awk '{print \$3, \$9}')
  slab0=\$(awk '/^Slab:/ {print \$2}' /proc/meminfo)
  # A controller in error recovery when the device goes (nvmet-rdma's
  # disconnect can come first) is not found by nvme-rdma's device removal
  # (its queues and device reference are already gone): it then tries to
  # reconnect until ctrl_loss_tmo (600 s by default) with its I/O
  # requeued; 3 s here, and such rounds are counted as late.
  nvme_target 8
  r=0 lf=0 refused=0 late=0
  while [ \$r -lt \$live ]; do
    insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev eth0 &&
      nvme_port ",reconnect_delay=1,ctrl_loss_tmo=3" || lf=\$((lf + 1))
    tr=
    if [ \$((r % 2)) = 1 ]; then
      (while dd if=/dev/nvme0n1 of=/dev/null bs=1M iflag=direct 2>/dev/null; do :; done) &
      tr=\$!
      sleep 0.3
    fi
    if ! rmmod uiwarp; then
      refused=\$((refused + 1))
      echo 1 >/sys/class/nvme/nvme0/delete_controller
      rmmod uiwarp || lf=\$((lf + 1))
    fi
    i=0
    while [ -e /sys/class/nvme/nvme0 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
    [ \$i -gt 20 ] && { echo "round \$r: nvme0 gone after \${i}00 ms"; late=\$((late + 1)); }
    [ -e /sys/class/nvme/nvme0 ] && { echo "round \$r: nvme0 still there"; lf=\$((lf + 1)); }
    grep -q '^uiwarp ' /proc/modules && { echo "round \$r: uiwarp still loaded"; lf=\$((lf + 1)); }
    [ -n "\$tr" ] && { kill \$tr 2>/dev/null; wait \$tr; }
    # the unload says nothing about eth0 (no replayed port DOWN or
    # "going away" from the netdevice notifier's removal)
    dmesg | grep -E 'uiw0: (port 1 DOWN|eth0 is going away)' && { echo "round \$r: notifier replay"; lf=\$((lf + 1)); }
    kclr
    nvme_port_rm
    r=\$((r + 1))
  done
  nvme_target_rm
  [ \$lf = 0 ] && ok "\$live rounds: rmmod uiwarp with NVMe-oF connected (every other one reading): clean (\$refused refused, \$late late)" ||
    bad "rmmod with NVMe-oF connected: \$lf failures in \$live rounds"
  rmmod nvme_rdma nvmet_rdma; insmod /x/nv/nvme-rdma.ko; insmod /x/nv/nvmet-rdma.ko
  mods1=\$(grep -E '^(ib_core|iw_cm|rdma_cm|nvme_rdma|nvmet_rdma) ' /proc/modules | awk '{print \$1, \$3}')
  i=0
  while [ "\$(grep '^TCP:' /proc/net/sockstat | awk '{print \$3, \$9}')" != "\$tcp0" ] && [ \$i -lt 50 ]; do sleep 0.1; i=\$((i + 1)); done
  tcp1=\$(grep '^TCP:' /proc/net/sockstat | awk '{print \$3, \$9}')
  slab1=\$(awk '/^Slab:/ {print \$2}' /proc/meminfo)
  echo "LIVE: module refs before: \$(echo \$mods0); after: \$(echo \$mods1); TCP inuse/alloc \$tcp0 -> \$tcp1; Slab \$slab0 kB -> \$slab1 kB"
  [ "\$mods0" = "\$mods1" ] && [ "\$tcp0" = "\$tcp1" ] && ok "after the rounds: module references and TCP sockets as before" ||
    bad "after the rounds: modules '\$mods0' -> '\$mods1', TCP '\$tcp0' -> '\$tcp1'"
else
  echo "KTEST skip NVMe-oF (no nvmet-rdma.ko)"
fi
# load/unload rounds, with a device on every other one
i=0 lf=0
while [ \$i -lt \$loops ]; do
  insmod /x/uiwarp.ko || lf=\$((lf + 1))
  if [ \$((i % 2)) = 1 ]; then rdma link add uiw0 type uiwarp netdev eth0 || lf=\$((lf + 1)); fi
  rmmod uiwarp || lf=\$((lf + 1))
  i=\$((i + 1))
done
n=\$(dmesg | grep -c 'uiwarp: wire self-test: PASS')
[ \$lf -eq 0 ] && [ \$n -eq \$loops ] && ok "\$loops load/unload rounds" || bad "load/unload: \$lf failures in \$loops rounds, \$n PASS lines"
if dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|kmemleak|refcount_t' || [ -n "\$kwarn" ]; then bad "kernel warnings"; else ok "no kernel warnings (the whole run)"; fi
echo "KTEST: \$pass passed, \$fail failed"
[ \$fail -eq 0 ]
EOF
}

# The host's side of the library interop cases (docs/KERNEL.md): Debian's
# rping through uiwarp's libraries, each connection captured by the library
# itself (UIWARP_PCAP). The servers (one per size, ports LIB_SPORT+1..)
# listen before the VM boots; a client runs when the guest's module
# listens (kready.S) on the port qemu forwards from LIB_HPORT. Exit
# statuses go to the share (srv.S.rc, cli.S.rc) for the guest's checks.
UIWARP_BIN=${UIWARP_BUILD:-$repo/build}/bin/uiwarp
KIMM_BIN=${UIWARP_BUILD:-$repo/build}/bin/kimm_peer LIB_IMM_PORT=27179
LIB_CASES=${UIWARP_KLIB_CASES:-"64 4096 60000 60000c 4096r 60000Lr 4096p 4096v 60000mc"} LIB_COUNT=5 LIB_SPORT=27180 LIB_HPORT=27190
# a case's letters after its size: c the module asks for CRC (mpa_crc=2);
# L the library asks for it (UIWARP_CRC=required); r the library's
# initiator offers, and its responder supports, only the Read RTR
# (UIWARP_RTR=read); p neither initiator asks for P2P (UIWARP_P2P=0, the
# module's mpa_p2p=0); v the library runs MPA revision 1 (UIWARP_MPA_REV=1:
# it resets a revision 2 Request, the module falls back to revision 1);
# m both ask for markers (UIWARP_MARKERS=1, the module's mpa_markers=1)
# the RNIC-like peers (tests/rnic/krnic_peer.c, docs/KERNEL.md "Against
# RNIC-like peers"): personality k (1, 2, ...) serves the module's rping
# client on KRNIC_SPORT+k and reaches the module's rping server through
# KRNIC_HPORT+k, forwarded to the guest's port 7190+k
KRNIC_BIN=${UIWARP_BUILD:-$repo/build}/bin/krnic_peer KRNIC_PERS="irdma cxgb4 cxgb4-rev1" KRNIC_SPORT=27200 KRNIC_HPORT=27210 KRNIC_MSS_PORT=27209
krnic_fw() { # siw-vm-run's forwardings for the module's servers
    local k=0 pn
    [ -x "$KRNIC_BIN" ] || return 0
    for pn in $KRNIC_PERS; do
        k=$((k + 1))
        echo "-p $((KRNIC_HPORT + k)):$((7190 + k))"
    done
}
# The host's side: the servers listen before the VM boots (their ports and
# the guest's in /rig/krnic), a client runs when the module listens
# (krready.NAME); exit statuses in krnic.srv.NAME.rc, krnic.cli.NAME.rc
krnic_start() {
    local d=$1 k=0 pn l=
    [ -x "$KRNIC_BIN" ] || return 0
    for pn in $KRNIC_PERS; do
        k=$((k + 1))
        (
            timeout 280 "$KRNIC_BIN" -P "$pn" -m server -p $((KRNIC_SPORT + k)) >"$d/krnic.srv.$pn.log" 2>&1 &
            echo $! >"$d/krnic.srv.$pn.pid"
            wait $!
            echo $? >"$d/krnic.srv.$pn.rc.tmp" && mv "$d/krnic.srv.$pn.rc.tmp" "$d/krnic.srv.$pn.rc"
        ) &
        while ! grep -q listening "$d/krnic.srv.$pn.log" 2>/dev/null && [ ! -e "$d/krnic.srv.$pn.rc" ]; do sleep 0.1; done
        l="$l $pn:$((KRNIC_SPORT + k)):$((7190 + k))"
    done
    echo "$l" >"$d/krnic"
    # the rule's proof: irdma's server against the module at max_fpdu=8192
    (
        timeout 280 "$KRNIC_BIN" -P irdma -m server -e -p $KRNIC_MSS_PORT >"$d/krnic.srv.mss.log" 2>&1 &
        echo $! >"$d/krnic.srv.mss.pid"
        wait $!
        echo $? >"$d/krnic.srv.mss.rc.tmp" && mv "$d/krnic.srv.mss.rc.tmp" "$d/krnic.srv.mss.rc"
    ) &
    while ! grep -q listening "$d/krnic.srv.mss.log" 2>/dev/null && [ ! -e "$d/krnic.srv.mss.rc" ]; do sleep 0.1; done
    [ -e "$d/krnic.srv.mss.rc" ] || echo $KRNIC_MSS_PORT >"$d/krmss"
}
krnic_clients() {
    local d=$1 k=0 pn
    [ -x "$KRNIC_BIN" ] || return 0
    for pn in $KRNIC_PERS; do
        k=$((k + 1))
        while [ ! -e "$d/krready.$pn" ] && [ ! -e "$d/vm.done" ]; do sleep 0.1; done
        [ -e "$d/krready.$pn" ] || break
        timeout 60 "$KRNIC_BIN" -P "$pn" -m client -p $((KRNIC_HPORT + k)) -s 60000 >"$d/krnic.cli.$pn.log" 2>&1
        echo $? >"$d/krnic.cli.$pn.rc.tmp" && mv "$d/krnic.cli.$pn.rc.tmp" "$d/krnic.cli.$pn.rc"
    done
    while [ ! -e "$d/vm.done" ]; do sleep 0.2; done
    for pn in $KRNIC_PERS mss; do
        [ ! -e "$d/krnic.srv.$pn.pid" ] || [ -e "$d/krnic.srv.$pn.rc" ] || kill "$(cat "$d/krnic.srv.$pn.pid")" 2>/dev/null || true
    done
}
lib_env() {
    local e=UIWARP_RDMACM_RETRY_MS=3000
    case $1 in *L*) e="$e UIWARP_CRC=required" ;; esac
    case $1 in *r*) e="$e UIWARP_RTR=read" ;; esac
    case $1 in *p*) e="$e UIWARP_P2P=0" ;; esac
    case $1 in *v*) e="$e UIWARP_MPA_REV=1" ;; esac
    case $1 in *m*) e="$e UIWARP_MARKERS=1" ;; esac
    echo "$e"
}
lib_host() {
    local d=$1 s n=0 kimm=
    echo "$LIB_CASES" >"$d/libcases"
    echo "$LIB_COUNT" >"$d/libcount"
    if [ -x "$KIMM_BIN" ]; then
        (
            UIWARP_PCAP=$d/kimm.pcap timeout 280 "$KIMM_BIN" -a 127.0.0.1 -p $LIB_IMM_PORT >"$d/kimm.log" 2>&1 &
            echo $! >"$d/kimm.pid"
            wait $!
            echo $? >"$d/kimm.rc.tmp" && mv "$d/kimm.rc.tmp" "$d/kimm.rc"
        ) &
        kimm=1
        while ! grep -q listening "$d/kimm.log" 2>/dev/null && [ ! -e "$d/kimm.rc" ]; do sleep 0.1; done
        [ -e "$d/kimm.rc" ] || echo $LIB_IMM_PORT >"$d/kimm"
    fi
    krnic_start "$d"
    for s in $LIB_CASES; do
        n=$((n + 1))
        (
            env $(lib_env "$s") UIWARP_PCAP=$d/srv.$s.pcap timeout 280 "$UIWARP_BIN" run rping -s -a 127.0.0.1 \
                -p $((LIB_SPORT + n)) -C $LIB_COUNT -V -S "${s%%[!0-9]*}" >"$d/srv.$s.log" 2>&1 &
            echo $! >"$d/srv.$s.pid"
            wait $!
            echo $? >"$d/srv.$s.rc.tmp" && mv "$d/srv.$s.rc.tmp" "$d/srv.$s.rc"
        ) &
    done
    for s in $LIB_CASES; do
        while [ ! -e "$d/kready.$s" ] && [ ! -e "$d/vm.done" ]; do sleep 0.1; done
        [ -e "$d/kready.$s" ] || break
        env $(lib_env "$s") UIWARP_PCAP=$d/cli.$s.pcap timeout 60 "$UIWARP_BIN" run rping -c -a 127.0.0.1 \
            -p $LIB_HPORT -C $LIB_COUNT -V -S "${s%%[!0-9]*}" >"$d/cli.$s.log" 2>&1
        echo $? >"$d/cli.$s.rc.tmp" && mv "$d/cli.$s.rc.tmp" "$d/cli.$s.rc"
    done
    krnic_clients "$d"
    while [ ! -e "$d/vm.done" ]; do sleep 0.2; done
    # a server the module never reached (its timeout passes the TERM on)
    for s in $LIB_CASES; do
        [ -e "$d/srv.$s.rc" ] || kill "$(cat "$d/srv.$s.pid")" 2>/dev/null || true
    done
    [ -z "$kimm" ] || [ -e "$d/kimm.rc" ] || kill "$(cat "$d/kimm.pid")" 2>/dev/null || true
    wait
}
# "A N": of the N FPDUs the guest (10.0.2.15) sent in the connections of
# a uiwarp dump, A start a TCP segment (its "segment alignment" lines)
guest_align() { # $2: a connection's endpoint to leave out (address:port)
    awk -v ex="${2:-none} " '/^== c[0-9]/ { s = ""; if (index($0, ex)) next; if ($3 ~ /^10\.0\.2\.15:/) s = "a>b"; else if ($7 ~ /^10\.0\.2\.15:/) s = "b>a" }
        s != "" && $1 == s && $2 == "segment" && $3 == "alignment:" { a += $4; n += $6 }
        END { printf "%d %d", a, n }' "$1"
}
# "A N M" for the guest's side of the connections of a uiwarp dump with
# endpoint $2 (address:port): FPDUs starting a TCP segment, FPDUs, the
# largest segment payload
guest_align_ep() {
    awk -v ep="$2 " '/^== c[0-9]/ { s = ""; if (index($0, ep)) { if ($3 ~ /^10\.0\.2\.15:/) s = "a>b"; else if ($7 ~ /^10\.0\.2\.15:/) s = "b>a" } }
        s != "" && $1 == s && $2 == "segment" && $3 == "alignment:" { a += $4; n += $6; if ($(NF - 1) + 0 > m) m = $(NF - 1) + 0 }
        END { printf "%d %d %d", a, n, m }' "$1"
}
# the RNIC-like peers' results on the host: each krnic_peer's verdict,
# and on the guest's NIC (before slirp re-segments), per personality and
# role, every FPDU of the module starting a TCP segment and no segment
# above the 1460-byte MSS
krnic_dump() {
    local d=$1 k=0 pn m ep al
    [ -e "$d/krnic" ] || return 0
    if [ -e "$d/krmss" ]; then
        if [ "$(cat "$d/krnic.srv.mss.rc" 2>/dev/null)" = 0 ]; then
            echo "KTEST ok   host: krnic_peer irdma -e (the module at max_fpdu=8192): $(grep 'over the MSS' "$d/krnic.srv.mss.log" | sed 's/^.*ok   //'), terminated"
        else
            echo "KTEST FAIL host: krnic_peer irdma -e: rc '$(cat "$d/krnic.srv.mss.rc" 2>/dev/null)': $(grep -m3 FAIL "$d/krnic.srv.mss.log" | paste -sd';')"
        fi
    fi
    for pn in $KRNIC_PERS; do
        k=$((k + 1))
        for m in srv cli; do
            if [ "$(cat "$d/krnic.$m.$pn.rc" 2>/dev/null)" = 0 ]; then
                echo "KTEST ok   host: krnic_peer $pn ($m): $(tail -1 "$d/krnic.$m.$pn.log")"
            else
                echo "KTEST FAIL host: krnic_peer $pn ($m): rc '$(cat "$d/krnic.$m.$pn.rc" 2>/dev/null)': $(grep -m3 FAIL "$d/krnic.$m.$pn.log" | paste -sd';')"
            fi
            [ -s "$d/nic.dump.txt" ] || continue
            case $m in srv) ep=10.0.2.2:$((KRNIC_SPORT + k)) ;; *) ep=10.0.2.15:$((7190 + k)) ;; esac
            al=$(guest_align_ep "$d/nic.dump.txt" "$ep")
            set -- $al
            if [ "$2" -gt 0 ] && [ "$1" = "$2" ] && [ "$3" -le 1460 ]; then
                echo "KTEST ok   host: krnic $pn ($m): the module's FPDUs on eth0: $1 of $2 start a TCP segment, largest segment $3 bytes"
            else
                echo "KTEST FAIL host: krnic $pn ($m): the module's FPDUs on eth0: $1 of $2 start a TCP segment, largest segment $3 bytes (all, <= 1460 wanted)"
            fi
        done
    done
}
# each capture the library wrote, checked by uiwarp dump --strict: no
# violation, no tolerated peer quirk
lib_dump() {
    local d=$1 f
    for f in "$d"/srv.*.pcap "$d"/cli.*.pcap; do
        [ -e "$f" ] || continue
        if "$UIWARP_BIN" dump -q --strict "$f" >"$f.dump.txt" 2>&1; then
            echo "KTEST ok   host: uiwarp dump $(basename "$f"): $(grep -m1 '^== total' "$f.dump.txt" | sed 's/^== total [^:]*: //'), $(grep -A8 '^== total' "$f.dump.txt" | grep -m1 'violations:' | sed 's/^ *//')"
        else
            echo "KTEST FAIL host: uiwarp dump $(basename "$f"): $(grep -E 'violation|problem|error' "$f.dump.txt" | head -3 | paste -sd';')"
        fi
    done
    # where the module asked for CRC: every FPDU carries a good one
    for f in "$d"/srv.*[cL]*.pcap "$d"/cli.*[cL]*.pcap; do
        [ -e "$f.dump.txt" ] || continue
        local crc
        crc=$(grep -A3 '^== total' "$f.dump.txt" | grep -m1 'CRC:' | sed 's/^ *//')
        case $crc in
        "CRC: good "[1-9]*", bad 0, not negotiated 0"*) echo "KTEST ok   host: $(basename "$f"): $crc" ;;
        *) echo "KTEST FAIL host: $(basename "$f"): ${crc:-no CRC line}" ;;
        esac
    done
    # the immediate-data connection's library capture
    if [ -e "$d/kimm.pcap" ]; then
        if "$UIWARP_BIN" dump -q --strict "$d/kimm.pcap" >"$d/kimm.pcap.dump.txt" 2>&1; then
            echo "KTEST ok   host: uiwarp dump kimm.pcap: $(grep -m1 '^== total' "$d/kimm.pcap.dump.txt" | sed 's/^== total [^:]*: //'), $(grep -A8 '^== total' "$d/kimm.pcap.dump.txt" | grep -m1 'violations:' | sed 's/^ *//')"
        else
            echo "KTEST FAIL host: uiwarp dump kimm.pcap: $(grep -E 'violation|problem|error' "$d/kimm.pcap.dump.txt" | head -3 | paste -sd';')"
        fi
    fi
    # the module's FPDUs on the guest's NIC (the capture qemu takes before
    # slirp re-segments the streams): each starts a TCP segment (RFC 5044
    # §8 SHOULD, Appendix A.1), summed over the connections where the
    # module (10.0.2.15) sends
    [ ! -s "$d/nic.pcap" ] || "$UIWARP_BIN" dump -q "$d/nic.pcap" >"$d/nic.dump.txt" 2>&1 || true
    if [ -s "$d/nic.dump.txt" ]; then
        local al
        # not the connection at max_fpdu=8192 (krnic_peer -e)
        al=$(guest_align "$d/nic.dump.txt" 10.0.2.2:$KRNIC_MSS_PORT)
        # at least 99% (all of them in every run so far; 40% before the
        # module sent one FPDU per sendmsg with MSG_EOR)
        if [ "${al#* }" -gt 0 ] && [ $((100 * ${al% *})) -ge $((99 * ${al#* })) ]; then
            echo "KTEST ok   host: the module's FPDUs on eth0: ${al% *} of ${al#* } start a TCP segment"
        else
            echo "KTEST FAIL host: the module's FPDUs on eth0: only ${al% *} of ${al#* } start a TCP segment (99% wanted)"
        fi
    else
        echo "KTEST FAIL host: no capture of the guest's NIC ($d/nic.pcap)"
    fi
    krnic_dump "$d"
    local n
    n=$(ls "$d"/srv.*.pcap "$d"/cli.*.pcap 2>/dev/null | wc -l)
    [ "$n" = $((2 * $(echo $LIB_CASES | wc -w))) ] && echo "KTEST ok   host: $n captures" ||
        echo "KTEST FAIL host: $n captures, not one per connection"
}

test_vm() {
    local loops=$1 nvmib=$2 nvsiw=$3 live=$4 t0=$SECONDS
    [ -n "$SIW_PEER" ] || die "the siw peer rig (\$UIWARP_SHARED/siw-peer) is not there; set SIW_PEER"
    [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.cpio.gz" ] || rig_build "the VM images ($OUT)"
    local vmabi
    vmabi=$(cat "$OUT/kabi" 2>/dev/null || true)
    [ "$vmabi" = "$KABI" ] || die "the rig's VM boots '$vmabi', the module is built for $KABI"
    x=$(mktemp -d "${TMPDIR:-/tmp}/uiwarp-kernel.XXXXXX") # global: the trap needs it
    trap 'rm -rf "$x"' EXIT
    guest_modules
    cp "$B/uiwarp.ko" "$B/uiwarp_ktest.ko" "$x/"
    # the rdma-core provider plugin and its probe (kernel/provider), built
    # with the library
    local pb=${UIWARP_BUILD:-$repo/build}
    if [ -f "$pb/lib/libuiwarp-rdmav34.so" ] && [ -x "$pb/bin/uiwarp_ibv_probe" ]; then
        cp "$pb/lib/libuiwarp-rdmav34.so" "$pb/bin/uiwarp_ibv_probe" "$x/"
    else
        say "no $pb/lib/libuiwarp-rdmav34.so: the rdma-core provider cases are skipped (build it: bash scripts/build.sh)"
    fi
    [ ! -f "$B/mods/dummy.ko" ] || cp "$B/mods/dummy.ko" "$x/"
    [ ! -f "$B/mods/veth.ko" ] || cp "$B/mods/veth.ko" "$x/"
    local m
    mkdir -p "$x/nv"
    for m in $NVME_MODS; do
        [ ! -f "$B/mods/${m##*/}.ko" ] || cp "$B/mods/${m##*/}.ko" "$x/nv/"
    done
    guest_script "$loops" "$nvmib" "$nvsiw" "$live" >"$x/guest.sh"
    local log=$B/test.log rc=0 share=$x/rig lib=0 fw=()
    mkdir -p "$share"
    if [ -x "$UIWARP_BIN" ]; then
        lib=1
        fw=(-d "$share" -p "$LIB_HPORT:7190" $(krnic_fw) -c "$share/nic.pcap")
        lib_host "$share" &
        libpid=$!
    else
        say "no $UIWARP_BIN: the library interop cases are skipped (build it: bash scripts/build.sh)"
    fi
    # the NVMe-oF test keeps the file and a copy in the VM's tmpfs
    local mem=1024
    [ "$nvmib" -le 64 ] || mem=$((1024 + 4 * nvmib))
    # -v none: siw is loaded by the test itself; 300 s is far above the
    # default run (about 50 s under TCG), more for longer runs
    "$SIW_PEER/siw-vm-run" -v none -m "$mem" -t $((300 + 2 * live + loops + 2 * nvmib)) -x "$x" \
        "${fw[@]}" 'sh /x/guest.sh' 2>&1 | tee "$log" || rc=$?
    local summary hp=0 hf=0
    if [ $lib = 1 ]; then
        touch "$share/vm.done"
        wait "$libpid" || true
        lib_dump "$share" | tee -a "$log"
        hp=$(grep -c '^KTEST ok   host:' "$log" || true)
        hf=$(grep -c '^KTEST FAIL host:' "$log" || true)
        rm -rf "$B/lib-interop" && mkdir -p "$B/lib-interop"
        cp "$share"/*.pcap "$share"/*.dump.txt "$share"/*.log "$B/lib-interop/" 2>/dev/null || true
    fi
    summary=$(grep '^KTEST: ' "$log" | tail -1 || true)
    [ -n "$summary" ] || die "no result from the VM (siw-vm-run rc=$rc; log: $log)"
    # the host's checks (the captures) added to the guest's count
    local gp gf
    gp=$(echo "$summary" | sed -n 's/^KTEST: \([0-9]*\) passed, \([0-9]*\) failed.*/\1/p')
    gf=$(echo "$summary" | sed -n 's/^KTEST: \([0-9]*\) passed, \([0-9]*\) failed.*/\2/p')
    summary="KTEST: $((gp + hp)) passed, $((gf + hf)) failed"
    # the whole count on a line of its own (scripts/test.sh reads the last)
    echo "$summary (guest $gp/$((gp + gf)), host $hp/$((hp + hf)))" | tee -a "$log"
    [ "$rc" = 0 ] && [ "$hf" = 0 ] || die "$summary (siw-vm-run rc=$rc; log: $log)"
    grep '^NVMEPERF\|^LIVE:' "$log" | sed 's/^/kernel.sh: /' || true
    say "$summary; VM test in $((SECONDS - t0)) s"
}

# NVMe over Fabrics across two VMs (docs/KERNEL.md, "NVMe-oF across two
# VMs"): one VM with Linux siw only (siw0), the other with the module only
# (uiw0; siw never loaded there), talking through the host as the rig's
# siw-vm-pair does: each VM's port 4420 is forwarded from a host port
# (PAIR_PORT for the siw VM, PAIR_PORT+1 for the module's) and the other
# VM dials 10.0.2.2:that port. Direction A: nvmet-rdma on siw0, nvme-rdma
# on uiw0; direction B the reverse. The two guests wait for each other
# through flag files: a guest writes /rig/f.NAME, the host copies it into
# the other guest's share as /rig/p.NAME (pair_relay).
PAIR_PORT=${UIWARP_KPAIR_PORT:-27420}
pair_guest_script() {
    cat <<EOF
role=\$1 nvmib=$1 hpa=$PAIR_PORT hpb=$((PAIR_PORT + 1))
pass=0 fail=0
case \$role in siw) tag=siw-vm dev=siw0;; *) tag=module-vm dev=uiw0;; esac
ok() { echo "KTEST ok   \$tag: \$*"; pass=\$((pass + 1)); }
bad() { echo "KTEST FAIL \$tag: \$*"; fail=\$((fail + 1)); }
kwarn=
kclr() { dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|kmemleak|refcount' && kwarn=1; dmesg -c >/dev/null; }
sig() { echo "\$2" >/rig/t.\$1 && mv /rig/t.\$1 /rig/f.\$1; } # to the other VM
waitp() { # the other VM's flag \$1, up to \$2 s (not when the other VM ended)
  i=0
  while [ ! -e /rig/p.\$1 ] && [ ! -e /rig/p.end ] && [ \$i -lt \$((\$2 * 10)) ]; do sleep 0.1; i=\$((i + 1)); done
  [ -e /rig/p.\$1 ] || sleep 1 # the other VM ended: a flag of its last moments may still be copied
  [ -e /rig/p.\$1 ] || { bad "no '\$1' from the other VM within \$2 s"; return 1; }
}
end() { sig end 1; echo "KTEST: \$pass passed, \$fail failed"; [ \$fail = 0 ]; exit; }
now() { cut -d' ' -f1 /proc/uptime; }
rate() { awk "BEGIN { d = \$2 - \$1; if (d <= 0) d = 0.01; printf \"%.1f\", \$3 * 1.048576 / d }"; }
h256() { sha256sum "\$1" | cut -d' ' -f1; }
c=/sys/kernel/config/nvmet
kclr
for m in crct10dif_common crct10dif_generic crc-t10dif crc64 crc64_rocksoft_generic crc64-rocksoft t10-pi nvme-core nvme-fabrics nvme-rdma nvmet nvmet-rdma; do
  grep -q "^\$(echo \$m | tr - _) " /proc/modules || insmod /x/nv/\$m.ko || bad "insmod \$m"
done
grep -q ' /sys/kernel/config ' /proc/mounts || mount -t configfs none /sys/kernel/config
# the driver's connection lines (dynamic debug): the first-FPDU guard's
# wake-ups toward siw are shown after the connect
uiw_up() { insmod /x/uiwarp.ko selftest=0 && rdma link add uiw0 type uiwarp netdev eth0 && { echo 'module uiwarp +p' >/proc/dynamic_debug/control; true; }; }
# one RDMA device in this VM, the right one: siw only here, the module only there
if [ \$role = module ]; then
  uiw_up || bad "insmod uiwarp, rdma link add uiw0"
  grep -q '^siw ' /proc/modules && bad "siw is loaded in the module's VM" || ok "siw not loaded"
else
  grep -q '^uiwarp ' /proc/modules && bad "uiwarp loaded in the siw VM" || ok "uiwarp not loaded"
fi
links=\$(rdma link show | awk '{print \$2}' | tr '\n' ' ')
echo "rdma link: \$links"
[ "\$links" = "\$dev/1 " ] && ok "the only RDMA device: \$dev" || bad "RDMA devices: '\$links', not \$dev alone"
# the connections' cm_ids (rdma res show cm_id): at least 2 (admin and one
# I/O queue) connected, all on \$dev, to or from the host's forwarding
cmchk() { # \$1: what, \$2: comm (nvme_rdma or nvmet_rdma), \$3: the remote address pattern
  rdma res show cm_id | tee /tmp/cm
  n=\$(grep -c "state CONNECT.*comm \[\$2\]" /tmp/cm); nd=\$(grep "state CONNECT.*comm \[\$2\]" /tmp/cm | grep -c "^link \$dev/1 .*dst-addr \$3")
  [ \$n -ge 2 ] && [ \$n = \$nd ] && ok "\$1: \$n connected cm_ids, all on \$dev" || bad "\$1: \$n connected cm_ids, \$nd on \$dev to \$3"
}
target_up() { # nvmet-rdma: a file of \$nvmib random MiB as t1's namespace, port 10.0.2.15:4420
  dd if=/dev/urandom of=/tmp/nvback bs=1M count=\$nvmib 2>/dev/null
  mkdir \$c/subsystems/t1 && echo 1 >\$c/subsystems/t1/attr_allow_any_host &&
    mkdir \$c/subsystems/t1/namespaces/1 && echo /tmp/nvback >\$c/subsystems/t1/namespaces/1/device_path &&
    echo 1 >\$c/subsystems/t1/namespaces/1/buffered_io && echo 1 >\$c/subsystems/t1/namespaces/1/enable &&
    mkdir \$c/ports/1 && echo rdma >\$c/ports/1/addr_trtype && echo ipv4 >\$c/ports/1/addr_adrfam &&
    echo 10.0.2.15 >\$c/ports/1/addr_traddr && echo 4420 >\$c/ports/1/addr_trsvcid &&
    ln -s \$c/subsystems/t1 \$c/ports/1/subsystems/t1
}
target_down() { # the port and subsystem gone; the file stays
  rm -f \$c/ports/1/subsystems/t1; rmdir \$c/ports/1
  echo 0 >\$c/subsystems/t1/namespaces/1/enable
  rmdir \$c/subsystems/t1/namespaces/1 \$c/subsystems/t1
}
# the target's side of direction \$1 (\$2: the host's comm in cm_id lines)
target() {
  D=\$1
  if target_up; then ok "\$D: nvmet-rdma target on \$dev, \$nvmib MiB"; else bad "\$D: target setup"; sig \$D.ready x; return 1; fi
  sig \$D.ready "\$(h256 /tmp/nvback)"
  waitp \$D.conn 120 && cmchk "\$D: the target" nvmet_rdma '10.0.2.2:'
  sig \$D.cm 1
  if waitp \$D.done \$((120 + 2 * nvmib)); then
    target_down
    [ "\$(h256 /tmp/nvback)" = "\$(cat /rig/p.\$D.done)" ] && ok "\$D: the target's file holds what the host wrote (sha256)" ||
      bad "\$D: the target's file is not what the host wrote"
  else
    target_down
  fi
  rm -f /tmp/nvback
  dmesg | grep -E 'error recovery|Reconnecting|QP event|Terminate' && bad "\$D: errors in the target's dmesg" || ok "\$D: no errors in the target's dmesg"
}
# the host's side of direction \$1 through host port \$2
host() {
  D=\$1
  waitp \$D.ready 120 || return 1
  sum=\$(cat /rig/p.\$D.ready)
  tc0=\$(now)
  echo "transport=rdma,traddr=10.0.2.2,trsvcid=\$2,nqn=t1" >/dev/nvme-fabrics &&
    { i=0; while [ ! -b /dev/nvme0n1 ] && [ \$i -lt 200 ]; do sleep 0.1; i=\$((i + 1)); done; [ -b /dev/nvme0n1 ]; } &&
    ok "\$D: nvme-rdma on \$dev connected to 10.0.2.2:\$2" || { bad "\$D: connect to 10.0.2.2:\$2"; dmesg | tail -20; sig \$D.conn x; sig \$D.done x; return 1; }
  echo "\$D timing: connect \$(awk "BEGIN { printf \\"%.2f\\", \$(now) - \$tc0 }") s (the block device seen, 100 ms polls)"
  dmesg | grep -E 'in RTS|wake-up|nvme0: ' | sed "s/^/\$D dmesg: /"
  sz=\$((\$(cat /sys/block/nvme0n1/size) * 512))
  [ \$sz = \$((nvmib * 1048576)) ] && ok "\$D: namespace of \$nvmib MiB" || bad "\$D: namespace of \$sz bytes"
  cmchk "\$D: the host" nvme_rdma "10.0.2.2:\$2"
  # nvme-rdma's default, one I/O queue per CPU: min(CPUs, the device's completion vectors)
  nq=\$(dmesg | sed -n 's/.*nvme0: creating \([0-9]*\) I\/O queues.*/\1/p' | tail -1)
  [ "\${nq:-0}" = "\$(nproc)" ] && ok "\$D: \$nq I/O queues (one per CPU)" || bad "\$D: \${nq:-no} I/O queues for \$(nproc) CPUs"
  sig \$D.conn 1
  t0=\$(now)
  dd if=/dev/nvme0n1 of=/tmp/nvr bs=1M count=\$nvmib iflag=direct 2>/dev/null; r=\$?
  t1=\$(now)
  [ \$r = 0 ] && [ "\$(h256 /tmp/nvr)" = "\$sum" ] && ok "\$D: \$nvmib MiB read: the target's file (sha256)" || bad "\$D: read (dd \$r)"
  rm -f /tmp/nvr
  dd if=/dev/urandom of=/tmp/nvw bs=1M count=\$nvmib 2>/dev/null
  t2=\$(now)
  dd if=/tmp/nvw of=/dev/nvme0n1 bs=1M oflag=direct 2>/dev/null; r=\$?
  t3=\$(now)
  dd if=/dev/nvme0n1 of=/tmp/nvr bs=1M count=\$nvmib iflag=direct 2>/dev/null
  [ \$r = 0 ] && cmp /tmp/nvw /tmp/nvr && ok "\$D: \$nvmib MiB written, read back byte for byte" || bad "\$D: write (dd \$r) or read back"
  wsum=\$(h256 /tmp/nvw)
  rm -f /tmp/nvr /tmp/nvw
  echo "NVMEPERF \$D (host on \$dev) \$nvmib MiB: read \$(rate \$t0 \$t1 \$nvmib) MB/s, write \$(rate \$t2 \$t3 \$nvmib) MB/s"
  waitp \$D.cm 60
  echo 1 >/sys/class/nvme/nvme0/delete_controller
  i=0; while [ -e /sys/class/nvme/nvme0 ] && [ \$i -lt 100 ]; do sleep 0.1; i=\$((i + 1)); done
  [ -e /sys/class/nvme/nvme0 ] && bad "\$D: the controller still there 10 s after delete" || ok "\$D: disconnected"
  sig \$D.done "\$wsum"
  dmesg | grep -E 'error recovery|Reconnecting|QP event|Terminate' && bad "\$D: errors in the host's dmesg" || ok "\$D: no errors in the host's dmesg"
}
nores() { # \$1: what; no PD, QP or MR left on \$dev
  res=\$(rdma res show \$dev)
  echo "rdma res: \$res"
  case "\$res" in *"pd 0 cq "*" qp 0 "*"mr 0 "*) ok "\$1: no PD, QP or MR left on \$dev";; *) bad "\$1: objects left: \$res";; esac
}
if [ \$role = siw ]; then
  target A
  kclr
  host B \$hpb
  rmmod nvme_rdma nvmet_rdma || bad "rmmod nvme_rdma nvmet_rdma"
  nores "after both directions"
else
  host A \$hpa
  # the host's side unloads the module: clean, nothing left
  rmmod nvme_rdma || bad "rmmod nvme_rdma"
  nores "A"
  rmmod uiwarp && ! grep -q '^uiwarp ' /proc/modules && ! dmesg | grep 'objects left' && ok "A: rmmod uiwarp: clean, the driver counts no object" ||
    bad "A: rmmod uiwarp"
  kclr
  uiw_up || bad "B: insmod uiwarp, rdma link add uiw0"
  target B
  rmmod nvmet_rdma || bad "rmmod nvmet_rdma"
  nores "B"
  rdma link delete uiw0 && rmmod uiwarp && ! dmesg | grep 'objects left' && ok "B: rdma link delete, rmmod uiwarp: clean, the driver counts no object" ||
    bad "B: removal"
fi
if dmesg | grep -E 'WARNING:|BUG:|Oops|Call Trace|kmemleak|refcount' || [ -n "\$kwarn" ]; then bad "kernel warnings"; else ok "no kernel warnings (the whole run)"; fi
end
EOF
}

pair_relay() { # copy each guest's f.NAME into the other's share as p.NAME
    local a=$1 b=$2 stop=$3 f n t
    while [ ! -e "$stop" ]; do
        for f in "$a"/f.* "$b"/f.*; do
            [ -e "$f" ] || continue
            n=${f##*/f.}
            case $f in "$a"/*) t=$b ;; *) t=$a ;; esac
            [ -e "$t/p.$n" ] || { cp "$f" "$t/q.$n" && mv "$t/q.$n" "$t/p.$n"; }
        done
        sleep 0.1
    done
}

test_pair() {
    local nvmib=$1 keep=$2 t0=$SECONDS
    [ -n "$SIW_PEER" ] || die "the siw peer rig (\$UIWARP_SHARED/siw-peer) is not there; set SIW_PEER"
    [ -f "$OUT/vmlinuz" ] && [ -f "$OUT/initramfs.cpio.gz" ] || rig_build "the VM images ($OUT)"
    local vmabi
    vmabi=$(cat "$OUT/kabi" 2>/dev/null || true)
    [ "$vmabi" = "$KABI" ] || die "the rig's VM boots '$vmabi', the module is built for $KABI"
    x=$(mktemp -d "${TMPDIR:-/tmp}/uiwarp-kpair.XXXXXX") # global: the trap needs it
    trap 'touch "$x/stop"; rm -rf "$x"' EXIT
    guest_modules
    mkdir -p "$x/x/nv" "$x/m" "$x/s"
    cp "$B/uiwarp.ko" "$x/x/"
    local m
    for m in $NVME_MODS; do
        [ -f "$B/mods/${m##*/}.ko" ] || die "no ${m##*/}.ko in $B/mods (the rig's linux-image .deb is missing)"
        cp "$B/mods/${m##*/}.ko" "$x/x/nv/"
    done
    pair_guest_script "$nvmib" >"$x/x/pair.sh"
    local mem=1024 tmo=$((240 + 3 * nvmib)) log=$B/pair.log out=$B/pair
    [ "$nvmib" -le 64 ] || mem=$((1024 + 4 * nvmib))
    rm -rf "$out" && mkdir -p "$out"
    pair_relay "$x/m" "$x/s" "$x/stop" &
    local relay=$! rs=0 rmo=0
    # both VMs at once (one vCPU each, as siw-vm-pair); each captures its
    # NIC; a VM that ended (p.end) stops the other's waiting
    (
        rc=0
        "$SIW_PEER/siw-vm-run" -s 1 -v default -m "$mem" -t "$tmo" -x "$x/x" -d "$x/s" -p "$PAIR_PORT:4420" \
            -c "$out/siw-vm.pcap" 'sh /x/pair.sh siw' >"$out/siw-vm.log" 2>&1 || rc=$?
        touch "$x/m/p.end"
        exit $rc
    ) &
    local spid=$!
    "$SIW_PEER/siw-vm-run" -s 1 -v none -m "$mem" -t "$tmo" -x "$x/x" -d "$x/m" -p "$((PAIR_PORT + 1)):4420" \
        -c "$out/module-vm.pcap" 'sh /x/pair.sh module' >"$out/module-vm.log" 2>&1 || rmo=$?
    touch "$x/s/p.end"
    wait "$spid" || rs=$?
    touch "$x/stop"
    wait "$relay" || true
    {
        echo "===== siw VM (siw0 only; rc $rs)"
        cat "$out/siw-vm.log"
        echo "===== module VM (uiw0 only; rc $rmo)"
        cat "$out/module-vm.log"
    } >"$log"
    cat "$log"
    local hp=0 hf=0 f
    # the wire on each VM's NIC, checked by uiwarp dump --strict (no
    # violation, no tolerated quirk; slirp re-segments the streams, dump
    # reassembles them); and in each MPA exchange the responder's ORD
    # (RFC 6581) at least 1 and at most the initiator's IRD: nvmet-rdma
    # Reads the host's data with it
    if [ -x "$UIWARP_BIN" ]; then
        for f in "$out"/siw-vm.pcap "$out"/module-vm.pcap; do
            if [ -s "$f" ] && "$UIWARP_BIN" dump -q --strict "$f" >"$f.dump.txt" 2>&1; then
                echo "KTEST ok   host: uiwarp dump --strict $(basename "$f"): $(grep -m1 '^== total' "$f.dump.txt" | sed 's/^== total [^:]*: //'), $(grep -A8 '^== total' "$f.dump.txt" | grep -m1 'violations:' | sed 's/^ *//')"
                [ "$keep" = 1 ] || rm -f "$f"
            else
                echo "KTEST FAIL host: uiwarp dump --strict $(basename "$f"): $(grep -E 'violation|problem|error|tolerated: [a-z]' "$f.dump.txt" 2>/dev/null | head -3 | paste -sd';')"
            fi
            # the FPDUs each VM sent: siw's for comparison, the module's
            # must start a TCP segment (at least 99%: RFC 5044 §8)
            local al
            al=$(guest_align "$f.dump.txt" 2>/dev/null)
            case $f in
            *module-vm.pcap)
                if [ "${al#* }" -gt 0 ] && [ $((100 * ${al% *})) -ge $((99 * ${al#* })) ]; then
                    echo "KTEST ok   host: the module's FPDUs on its NIC: ${al% *} of ${al#* } start a TCP segment"
                else
                    echo "KTEST FAIL host: the module's FPDUs on its NIC: only ${al% *} of ${al#* } start a TCP segment (99% wanted)"
                fi
                ;;
            *) echo "kernel.sh: ALIGN siw's FPDUs on its NIC: ${al% *} of ${al#* } start a TCP segment" ;;
            esac
            local ords
            ords=$(sed -n 's/.*IRD\/ORD a \([0-9]*\)\/[0-9]* b [0-9]*\/\([0-9]*\).*/\1 \2/p' "$f.dump.txt" 2>/dev/null)
            if [ "$(echo "$ords" | grep -c .)" -ge 4 ] && echo "$ords" | awk '$2 < 1 || $2 > $1 { exit 1 }'; then
                echo "KTEST ok   host: $(basename "$f"): $(echo "$ords" | grep -c .) MPA exchanges, the responder's ORD in 1..the initiator's IRD ($(echo "$ords" | tr ' \n' '/ ' | sed 's/ $//'))"
            else
                echo "KTEST FAIL host: $(basename "$f"): MPA exchanges' initiator IRD / responder ORD: $(echo "$ords" | tr '\n' ' ')"
            fi
        done | tee -a "$log"
        hp=$(grep -c '^KTEST ok   host:' "$log" || true)
        hf=$(grep -c '^KTEST FAIL host:' "$log" || true)
    else
        echo "KTEST skip host: no $UIWARP_BIN, the captures are not checked" | tee -a "$log"
    fi
    local gp=0 gf=0 s p q
    for s in siw-vm module-vm; do
        p=$(sed -n 's/^KTEST: \([0-9]*\) passed, \([0-9]*\) failed.*/\1/p' "$out/$s.log" | tail -1)
        q=$(sed -n 's/^KTEST: \([0-9]*\) passed, \([0-9]*\) failed.*/\2/p' "$out/$s.log" | tail -1)
        [ -n "$p" ] || { echo "KTEST FAIL host: no result from the $s" | tee -a "$log"; hf=$((hf + 1)); continue; }
        gp=$((gp + p)) gf=$((gf + q))
    done
    local summary="KTEST: $((gp + hp)) passed, $((gf + hf)) failed"
    echo "$summary (guests $gp/$((gp + gf)), host $hp/$((hp + hf)))" | tee -a "$log"
    grep -h '^NVMEPERF' "$out"/*.log | sed 's/^/kernel.sh: /' || true
    [ "$rs" = 0 ] && [ "$rmo" = 0 ] && [ "$((gf + hf))" = 0 ] || die "$summary (siw VM rc=$rs, module VM rc=$rmo; log: $log)"
    say "$summary; two-VM test in $((SECONDS - t0)) s"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
build) build ;;
test)
    loops=20 nvmib=32 nvsiw=1 live=4
    while [ $# -gt 0 ]; do
        case $1 in
        --loops)
            [ $# -ge 2 ] || die "--loops needs a number"
            loops=$2
            shift
            ;;
        --live)
            [ $# -ge 2 ] || die "--live needs a number"
            live=$2
            shift
            ;;
        --nvme-mib)
            [ $# -ge 2 ] || die "--nvme-mib needs a number"
            nvmib=$2
            shift
            ;;
        --no-nvme-siw) nvsiw=0 ;;
        *) die "unknown option $1" ;;
        esac
        shift
    done
    for v in "$loops" "$live" "$nvmib"; do
        case $v in '' | *[!0-9]*) die "--loops, --live and --nvme-mib want a number, not '$v'" ;; esac
    done
    [ "$nvmib" -ge 1 ] || die "--nvme-mib wants at least 1"
    build
    test_vm "$loops" "$nvmib" "$nvsiw" "$live"
    ;;
test-pair)
    nvmib=32 keep=0
    while [ $# -gt 0 ]; do
        case $1 in
        --keep-pcaps) keep=1 ;;
        --nvme-mib)
            [ $# -ge 2 ] || die "--nvme-mib needs a number"
            nvmib=$2
            shift
            ;;
        *) die "unknown option $1" ;;
        esac
        shift
    done
    case $nvmib in '' | *[!0-9]*) die "--nvme-mib wants a number, not '$nvmib'" ;; esac
    [ "$nvmib" -ge 1 ] || die "--nvme-mib wants at least 1"
    build
    test_pair "$nvmib" "$keep"
    ;;
clean) rm -rf "$B" && say "removed $B" ;;
*)
    sed -n '2,/^# Exit status/p' "$0" >&2
    exit 2
    ;;
esac
