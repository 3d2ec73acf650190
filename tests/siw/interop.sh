#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# uiwarp <-> Linux kernel siw interoperability matrix.
#
# The siw peer is the VM of ../shared/siw-peer (Debian's kernel + siw built
# out of tree in several variants + rdma-core's tools, under qemu TCG). Each
# "boot" is one VM run with one siw variant and one direction:
#   h2v  uiwarp client (host, 127.0.0.1:H) -> siw server (guest 10.0.2.15:G,
#        forwarded by qemu's slirp)
#   v2h  siw client (guest, dials 10.0.2.2:H) -> uiwarp server (host 127.0.0.1:H)
# and runs a list of cases one after the other. uiwarp's side is always the
# unmodified Debian program (rping, ib_*_bw; rstream, riostream and rcopy:
# rsockets on both sides) run through `uiwarp run`, except the fault cases,
# which use tests/siw/rping_fault.c (an rping peer that hands out or uses an
# invalid rkey), and rcopy's server, run by tests/siw/rcopy-server.sh.
# Every boot's host-side capture of the guest NIC (siw-vm-run -c) must pass
# `uiwarp dump` with zero violations, and every RDMA Write of an rsocket
# connection in it must lie inside what its receiver advertised
# (rsocket_bounds.py).
#
# usage: interop.sh [--ci | --full] [--variants "default crc ..."]
#                   [--dirs "h2v v2h"] [--out DIR]
#   --ci    the CI subset: default, crc, p2p and p2p-readrtr in both
#           directions, with the fault cases, the markers policy and the
#           Read RTR forced from our side (UIWARP_RTR=read) (the default)
#   --full  every variant (default crc p2p p2p-crc p2p-readrtr rev1), both
#           directions, all sizes and policies
# Environment: SIW_ONLY (regex: only the cases whose name matches),
# SIW_RIO_REPEAT (N more riostream-a-65536 cases per default boot),
# UIWARP_BUILD (default ../../build), SIW_PEER (default
# ../shared/siw-peer beside the repository), SIW_RIG_OUT (the VM images).
# Results: a table on stdout and in OUT/results.md; per case the outputs of
# both sides, per boot the capture, its `uiwarp dump`, and the VM console.
# Exit status: 0 when every REQUIRED/EXPECT case passed and every capture is
# clean; 1 otherwise; 77 when the siw peer cannot run here.
set -u

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${UIWARP_BUILD:-$repo/build}
BUILD=$(cd "$BUILD" && pwd)
UIWARP=$BUILD/bin/uiwarp
FAULT=$BUILD/bin/rping_fault

mode=ci variants="" dirs="h2v v2h" out=""
while [ $# -gt 0 ]; do
    case $1 in
    --ci) mode=ci ;;
    --full) mode=full ;;
    --variants) variants=$2; shift ;;
    --dirs) dirs=$2; shift ;;
    --out) out=$2; shift ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
    esac
    shift
done
if [ -z "$variants" ]; then
    if [ $mode = full ]; then variants="default crc p2p p2p-crc p2p-readrtr rev1"
    else variants="default crc p2p p2p-readrtr"; fi
fi

SIW_PEER=${SIW_PEER:-}
for d in "$SIW_PEER" "$repo/../shared/siw-peer" /work/shared/siw-peer; do
    if [ -n "$d" ] && [ -x "$d/siw-vm-run" ]; then SIW_PEER=$(cd "$d" && pwd); break; fi
done
if [ -z "$SIW_PEER" ] || [ ! -x "$SIW_PEER/siw-vm-run" ]; then
    echo "SKIP: the siw peer rig (../shared/siw-peer) is not there"
    exit 77
fi
for f in "$UIWARP" "$FAULT" "$BUILD/lib/libibverbs.so.1" "$BUILD/lib/librdmacm.so.1"; do
    [ -e "$f" ] || { echo "interop: $f missing (build first)"; exit 1; }
done
if grep -Eq 'lib(asan|tsan|ubsan)' <<<"$(ldd "$BUILD/lib/libibverbs.so.1" 2>/dev/null)"; then
    echo "SKIP: $BUILD holds sanitizer builds, which the distribution's programs cannot load"
    exit 77
fi

# The VM images: siw-vm-build is idempotent (seconds when up to date); on a
# fresh machine it installs qemu and builds siw (about 2 minutes).
echo "== siw-vm-build"
if ! "$SIW_PEER/siw-vm-build" >"${TMPDIR:-/tmp}/uiwarp-siw-vm-build.log" 2>&1; then
    tail -20 "${TMPDIR:-/tmp}/uiwarp-siw-vm-build.log"
    echo "interop: siw-vm-build failed"
    exit 1
fi
tail -1 "${TMPDIR:-/tmp}/uiwarp-siw-vm-build.log"

# siw's responder sends its MPA Reply before installing the callback that
# reads FPDUs; a first FPDU arriving in between is not noticed until more data
# comes (docs/INTEROP.md §1). uiwarp's initiator holds back the pad and CRC of
# its first FPDU by default (UIWARP_FIRST_FPDU_HOLD_MS, 20 ms): the stage runs
# without the variable, as a user would; set it to try other values.
# perftest's server closes its listener after the first connection and
# listens again for the data connection; slirp accepts our connect meanwhile
# and closes it when the guest refuses. librdmacm retries such a connect for
# UIWARP_RDMACM_RETRY_MS (default 1 s, too short for a TCG guest).
export UIWARP_RDMACM_RETRY_MS=${UIWARP_RDMACM_RETRY_MS:-3000}

out=${out:-$(mktemp -d /tmp/uiwarp-siw-interop.XXXXXX)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "== results in $out"

# free_port, wait_listen PORT SECONDS (the host side)
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
is_signal() { [ "$1" = 124 ] || { [ "$1" -gt 128 ] && [ "$1" -lt 160 ]; }; }
vm_pid="" # the running VM: waiting for its files ends when it is gone
wait_file() { # FILE SECONDS: until FILE exists and is not empty
    local deadline=$((SECONDS + $2))
    while [ ! -s "$1" ]; do
        [ $SECONDS -ge $deadline ] && return 1
        if [ -n "$vm_pid" ] && ! kill -0 "$vm_pid" 2>/dev/null; then
            [ -s "$1" ] # written just before the end
            return
        fi
        sleep 0.1
    done
}

# ---------------------------------------------------------------------------
# Case lists. add_case NAME KIND SIDE TIMEOUT HOST_ENV HOST_CMD GUEST_CMD [CHECK]
#   [GRACE]
#   KIND: REQUIRED  both programs exit 0
#         REJECT    the connection must fail cleanly: the side named by
#                   CHECK ("host" or "guest") exits non-zero before its
#                   timeout; nothing may hang or crash
#         FAULT     rping_fault (host) exits 0 and its output matches CHECK
#                   (the Terminate decoded or sent); the siw program must
#                   end (any status) before its timeout
#         KNOWN:why fails because of siw itself (why); XFAIL, XPASS once not
#   SIDE: which side is the server: guest (h2v) or host (v2h)
#   GRACE: seconds a guest server gets to end by itself once the host's
#   client is done, before it is stopped (default 3)
# HOST_CMD / GUEST_CMD may use @H (host port), @G (guest port) and @R (the
# boot's run directory on the host, /rig in the guest); HOST_CMD @X (this
# directory, /x in the guest).
# ---------------------------------------------------------------------------
C_NAME=() C_KIND=() C_SIDE=() C_T=() C_ENV=() C_HCMD=() C_GCMD=() C_CHECK=() C_GRACE=()
add_case() {
    # SIW_ONLY=REGEX runs only the cases whose name matches (debugging)
    if [ -n "${SIW_ONLY:-}" ] && ! [[ $1 =~ $SIW_ONLY ]]; then return; fi
    C_NAME+=("$1") C_KIND+=("$2") C_SIDE+=("$3") C_T+=("$4") C_ENV+=("$5")
    C_HCMD+=("$6") C_GCMD+=("$7") C_CHECK+=("${8:-}") C_GRACE+=("${9:-3}")
}

# rping -V verifies every iteration; its largest buffer is 64 KiB - 1
# (RPING_BUFSIZE), so sizes above 64 KiB are covered by perftest.
# rping's status RC with output FILE: 0, or the exit 255 of rdma-core's
# teardown race (rping's CM thread reads the event channel main() has just
# destroyed: perror, exit(-1)) with nothing else in the output but the
# normal end of a server's run
rping_race() { # RC FILE
    [ "$1" = 0 ] && return 0
    [ "$1" = 255 ] && [ "$(tail -1 "$2" 2>/dev/null)" = "rdma_get_cm_event: Bad file descriptor" ] &&
        ! grep -v -e '^rdma_get_cm_event: Bad file descriptor$' -e '^server DISCONNECT EVENT\.\.\.$' \
            -e '^wait for RDMA_READ_ADV state 10$' "$2" | grep -q .
}
rping_case() { # DIR KIND SIZE COUNT [ENV] [NAME-SUFFIX]
    local dir=$1 kind=$2 sz=$3 n=$4 env=${5:-} sfx=${6:-}
    if [ "$dir" = h2v ]; then
        add_case "rping-$sz$sfx" "$kind" guest 120 "$env" \
            "rping -c -a 127.0.0.1 -p @H -C $n -S $sz -V" \
            "rping -s -a 10.0.2.15 -p @G -C $n -S $sz -V" host
    else
        add_case "rping-$sz$sfx" "$kind" host 120 "$env" \
            "rping -s -a 127.0.0.1 -p @H -C $n -S $sz -V" \
            "rping -c -a 10.0.2.2 -p @H -C $n -S $sz -V" guest
    fi
}
perf_case() { # DIR KIND TEST SIZE ITERS [ENV] [NAME-SUFFIX]
    local dir=$1 kind=$2 t=$3 sz=$4 n=$5 env=${6:-} sfx=${7:-}
    if [ "$dir" = h2v ]; then
        add_case "ib_${t}_bw-$sz$sfx" "$kind" guest 180 "$env" \
            "ib_${t}_bw -R -F -s $sz -n $n -p @H 127.0.0.1" \
            "ib_${t}_bw -R -d siw0 -F -s $sz -n $n -p @G" host
    else
        add_case "ib_${t}_bw-$sz$sfx" "$kind" host 180 "$env" \
            "ib_${t}_bw -R -F -s $sz -n $n -p @H" \
            "ib_${t}_bw -R -d siw0 -F -s $sz -n $n -p @H 10.0.2.2" guest
    fi
}
# rdma-core's rsockets (librdmacm in the VM, over siw) against uiwarp's
# (src/rdmacm/rsocket.c): Debian's rstream on both sides, the receiver
# checking every byte (-T v). MODE b: blocking calls, n: nonblocking
# (rstream's default). rstream's client sends COUNT transfers of SIZE bytes,
# then its server sends as many back. docs/RSOCKETS.md "Interop".
rstream_case() { # DIR KIND SIZE COUNT MODE [MORE-OPTIONS] [NAME-SUFFIX]
    local dir=$1 kind=$2 sz=$3 n=$4 m=$5 more=${6:-} sfx=${7:-} opts
    opts="-S $sz -C $n -T $m -T v${more:+ $more}"
    if [ "$dir" = h2v ]; then
        add_case "rstream-$m-$sz$sfx" "$kind" guest 120 "" \
            "rstream -s 127.0.0.1 -p @H $opts" \
            "rstream -b 10.0.2.15 -p @G $opts" host
    else
        add_case "rstream-$m-$sz$sfx" "$kind" host 120 "" \
            "rstream -b 127.0.0.1 -p @H $opts" \
            "rstream -s 10.0.2.2 -p @H $opts" guest
    fi
}
rstream_cases() { # DIR
    local dir=$1 m
    if [ "$dir" = v2h ]; then
        # the siw client writes first, the uiwarp server answers and closes
        for m in b n; do
            rstream_case v2h REQUIRED 64 500 $m
            rstream_case v2h REQUIRED 4096 200 $m
            rstream_case v2h REQUIRED 65536 40 $m
            rstream_case v2h REQUIRED 1048576 4 $m
        done
        # keepalive (-k 1: SO_KEEPALIVE, TCP_KEEPIDLE 1 s) on both sides
        # during a run of several seconds: rdma-core's zero-length RDMA
        # Write to STag 0 and uiwarp's to the peer's target SGL; run_boot
        # checks the capture for both. 1500 round trips took 3 s, then 1 s
        # once uiwarp's small messages got faster (2026-11-27), too short
        # for a 1 s idle time: 6000 (about 4 s now)
        rstream_case v2h REQUIRED 4096 6000 b "-k 1" -keepalive
        return
    fi
    # h2v: the siw server sends last, then shuts down and closes at once.
    # rdma-core's close loses the end of its own stream when the reader's
    # credit grants arrive after it (siw stops reading the socket, the
    # guest's TCP answers them with an RST that drops what it has not sent
    # yet; siw to siw too: docs/RSOCKETS.md "Interop"). The REQUIRED cases
    # stay where the reader grants nothing during the server's part: under
    # half of the receive buffer (rstream asks 512 KiB, i.e. 1 MiB, halves
    # of 512 KiB) and under half the queue (192 of 384 messages). 1 MiB
    # transfers use -B 4 MiB (8 MiB buffers, halves of 4 MiB).
    for m in b n; do
        rstream_case h2v REQUIRED 64 150 $m
        rstream_case h2v REQUIRED 4096 60 $m
        rstream_case h2v REQUIRED 65536 6 $m
        rstream_case h2v REQUIRED 1048576 3 $m "-B 4194304"
    done
    rstream_case h2v "KNOWN:rdma-core's rsocket close (siw server) resets the connection when credit grants arrive after it, losing its unsent data" \
        4096 500 b "" -close-race
}
# riostream: riomap'd buffers (RDMA_IOMAPSIZE 1 on both sides, the buffer
# mapped at offset 0), two 16-byte rsend/rrecv messages (which carry the
# pending iomap entry and its IOMAP_SGL message first), then riowrite
# straight into the peer's mapped buffer; the receiver spins on the last
# byte, then checks the rest (-T v). The client writes COUNT transfers,
# the server as many back, ITERS times. Each side spins while it waits: a
# spinning guest under TCG is slow, so the counts stay small.
riostream_case() { # DIR KIND SIZE COUNT ITERS MODE [NAME-SUFFIX]
    local dir=$1 kind=$2 sz=$3 n=$4 it=$5 m=$6 sfx=${7:-} opts
    opts="-S $sz -C $n -I $it -T $m -T v"
    if [ "$dir" = h2v ]; then
        add_case "riostream-$m-$sz$sfx" "$kind" guest 90 "" \
            "riostream -s 127.0.0.1 -p @H $opts" \
            "riostream -b 10.0.2.15 -p @G $opts" host
    else
        add_case "riostream-$m-$sz$sfx" "$kind" host 90 "" \
            "riostream -b 127.0.0.1 -p @H $opts" \
            "riostream -s 10.0.2.2 -p @H $opts" guest
    fi
}
riostream_cases() { # DIR
    local m
    for m in b n; do
        riostream_case "$1" REQUIRED 64 10 10 $m
        riostream_case "$1" REQUIRED 4096 10 5 $m
        riostream_case "$1" REQUIRED 65536 4 3 $m
        riostream_case "$1" REQUIRED 1048576 2 2 $m
    done
    # async (rpoll before each call): two sizes
    riostream_case "$1" REQUIRED 64 10 10 a
    riostream_case "$1" REQUIRED 65536 4 3 a
    # SIW_RIO_REPEAT=N: the async 64 KiB case N more times (a rare failure)
    local k
    for ((k = 1; k <= ${SIW_RIO_REPEAT:-0}; k++)); do
        riostream_case "$1" REQUIRED 65536 4 3 a "-r$k"
    done
}
# rcopy of a random file (@R/rcopy.src, made by run_boot), compared byte
# for byte by the server's side (rcopy-server.sh: rcopy's server never
# exits; the script stops it once the file is closed, then runs cmp).
# h2v: uiwarp's client writes to rdma-core's server; v2h: the reverse.
rcopy_case() { # DIR
    if [ "$1" = h2v ]; then
        # (busybox's cmp of 8 MiB, one file over 9p, takes 1.5 s under TCG)
        add_case rcopy-8MiB REQUIRED guest 90 "" \
            "rcopy @R/rcopy.src 127.0.0.1:/tmp/rcopy.dst -p @H" \
            "sh /x/rcopy-server.sh @G /tmp/rcopy.dst /rig/rcopy.src" host 15
    else
        add_case rcopy-8MiB REQUIRED host 90 "" \
            "sh @X/rcopy-server.sh @H @R/rcopy.dst @R/rcopy.src" \
            "sh -c 'cp /rig/rcopy.src /tmp/rcopy.src && rcopy /tmp/rcopy.src 10.0.2.2:@R/rcopy.dst -p @H'" guest
    fi
}
fault_cases() { # DIR
    # h2v: the siw rping server accesses uiwarp's memory through an rkey we
    # made invalid; we detect it and send the Terminate.
    # v2h: uiwarp's server accesses the siw client's memory with an invalid
    # rkey; siw sends the Terminate, we decode it.
    if [ "$1" = h2v ]; then
        add_case fault-siw-reads-bad-stag FAULT guest 60 "" \
            "$FAULT -c -a 127.0.0.1 -p @H -m read -S 1000 -t 30" \
            "rping -s -a 10.0.2.15 -p @G -C 1 -S 1000 -V" \
            'sending Terminate RDMAP / remote protection / invalid STag'
        add_case fault-siw-writes-bad-stag FAULT guest 60 "" \
            "$FAULT -c -a 127.0.0.1 -p @H -m write -S 1000 -t 30" \
            "rping -s -a 10.0.2.15 -p @G -C 1 -S 1000 -V" \
            'sending Terminate DDP / tagged buffer / invalid STag'
    else
        add_case fault-uiwarp-reads-bad-stag FAULT host 60 "" \
            "$FAULT -s -a 127.0.0.1 -p @H -m read -S 1000 -t 30" \
            "rping -c -a 10.0.2.2 -p @H -C 1 -S 1000 -V" \
            'Terminate received: RDMAP / remote protection / invalid STag .*ddp \[[0-9a-f ]+\] rdma \[[0-9a-f ]+\]'
        add_case fault-uiwarp-writes-bad-stag FAULT host 60 "" \
            "$FAULT -s -a 127.0.0.1 -p @H -m write -S 1000 -t 30" \
            "rping -c -a 10.0.2.2 -p @H -C 1 -S 1000 -V" \
            'Terminate received: DDP / tagged buffer / invalid STag .*ddp \[[0-9a-f ]+\]'
    fi
}

# The cases of one boot.
plan_boot() { # VARIANT DIR
    local v=$1 dir=$2 rk=REQUIRED
    C_NAME=() C_KIND=() C_SIDE=() C_T=() C_ENV=() C_HCMD=() C_GCMD=() C_CHECK=() C_GRACE=()
    # (rev1 v2h: siw's rev 1 initiator with a uiwarp responder works, although
    # rping over rev 1 fails siw-to-siw: the siw responder's IRD=ORD=0.)
    if [ $mode = full ]; then
        rping_case "$dir" "$rk" 64 50
        rping_case "$dir" "$rk" 4096 50
        rping_case "$dir" "$rk" 65535 20
        for t in write read send; do
            perf_case "$dir" REQUIRED $t 65536 20
            perf_case "$dir" REQUIRED $t 1048576 8
        done
    else
        rping_case "$dir" "$rk" 64 20
        rping_case "$dir" "$rk" 65535 10
        for t in write read send; do perf_case "$dir" REQUIRED $t 262144 10; done
    fi
    if [ "$v" = default ]; then
        fault_cases "$dir"
        rstream_cases "$dir"
        riostream_cases "$dir"
        rcopy_case "$dir"
        if [ "$dir" = h2v ]; then
            # uiwarp's initiator policies against a siw responder
            rping_case h2v REQUIRED 4096 10 "UIWARP_P2P=0" -client-server
            rping_case h2v REQUIRED 4096 10 "UIWARP_CRC=required" -crc-required
            # siw rejects a request with M=1 (RFC 5044 §7.1.2 reply with R)
            add_case rping-markers REJECT guest 40 "UIWARP_MARKERS=1" \
                "rping -c -a 127.0.0.1 -p @H -C 1 -S 64 -V" \
                "rping -s -a 10.0.2.15 -p @G -C 1 -S 64 -V" host
        else
            # uiwarp's responder policies against a siw initiator
            rping_case v2h REQUIRED 4096 10 "UIWARP_CRC=required" -crc-required
            add_case rping-markers REJECT host 40 "UIWARP_MARKERS=1" \
                "rping -s -a 127.0.0.1 -p @H -C 1 -S 64 -V" \
                "rping -c -a 10.0.2.2 -p @H -C 1 -S 64 -V" guest
        fi
    fi
    if [ "$v" = p2p ] && [ "$dir" = h2v ]; then
        # the zero-length Read RTR that RNIC responders force (irdma and cxgb4
        # pick Read; notes/rnic-mpa.md), from our initiator: offering only
        # Read makes the siw responder choose it
        rping_case h2v REQUIRED 4096 10 "UIWARP_RTR=read" -rtr-read
        perf_case h2v REQUIRED read 65536 10 "UIWARP_RTR=read" -rtr-read
    fi
    if [ "$v" = rev1 ] && [ "$dir" = h2v ]; then
        # uiwarp as a rev 1 initiator: the siw responder answers rev 1 with
        # IRD=ORD=0, and the siw rping server's RDMA Read fails
        rping_case h2v "KNOWN:siw MPA rev 1 responder runs with IRD=ORD=0, its rping server cannot RDMA Read" \
            4096 10 "UIWARP_MPA_REV=1" -uiwarp-rev1
        # rping then waits forever for the siw server's go-ahead
        [[ ${C_NAME[-1]:-} == *-uiwarp-rev1 ]] && C_T[-1]=30
        perf_case h2v REQUIRED write 65536 10 "UIWARP_MPA_REV=1" -uiwarp-rev1
    fi
}

# ---------------------------------------------------------------------------
RES=() npass=0 nfail=0 nxfail=0 nxpass=0 ncap=0
record() { # VARIANT DIR NAME KIND STATUS SECONDS DETAIL
    RES+=("| $1 | $2 | $3 | ${4%%:*} | $5 | $6 | $7 |")
    case $5 in
    PASS) npass=$((npass + 1)) ;;
    XFAIL) nxfail=$((nxfail + 1)) ;;
    XPASS) nxpass=$((nxpass + 1)) ;;
    *) nfail=$((nfail + 1)) ;;
    esac
    printf '%-6s %-8s %-4s %-32s %5ss  %s\n' "$5" "$1" "$2" "$3" "$6" "$7"
}

run_boot() { # VARIANT DIR
    local v=$1 dir=$2 bdir="$out/$1-$2" n i fw="" vmpid t0 b0
    plan_boot "$v" "$dir"
    n=${#C_NAME[@]}
    rm -rf "$bdir"
    mkdir -p "$bdir"
    # rcopy's source file (both sides read it: the guest through /rig)
    if [[ " ${C_NAME[*]}" == *" rcopy-"* ]]; then
        head -c $((8 << 20)) /dev/urandom >"$bdir/rcopy.src"
    fi
    local hp=() gp=()
    for ((i = 0; i < n; i++)); do
        hp[i]=$(free_port)
        while [[ " ${hp[*]:0:i} " == *" ${hp[i]} "* ]]; do hp[i]=$(free_port); done # qemu's forwards must differ
        gp[i]=$((7201 + i))
        [ "${C_SIDE[i]}" = guest ] && fw="$fw -p ${hp[i]}:${gp[i]}"
    done
    # the guest scenario
    {
        echo ". /x/guest-lib.sh"
        echo "echo up >/rig/vm-up" # the host's sign that the scenario started
        echo "warm"
        for ((i = 0; i < n; i++)); do
            local g=${C_GCMD[i]//@H/${hp[i]}}
            g=${g//@G/${gp[i]}}
            g=${g//@R/$bdir}
            if [ "${C_SIDE[i]}" = guest ]; then
                echo "grace=${C_GRACE[i]} gsrv $i ${gp[i]} ${C_T[i]} $g"
            else
                echo "gcli $i ${C_T[i]} $g"
            fi
        done
        echo "dmesg | grep -iE 'siw|iw_cm|BUG|terminate' | tail -40 > /rig/dmesg.txt"
    } >"$bdir/scenario.sh"
    echo "== boot: siw variant $v, $dir, $n cases"
    b0=$SECONDS
    # The guest kernel's boot-time check of its timer interrupt fails when
    # TCG runs slowly on a busy host ("IO-APIC + timer doesn't work!", a
    # panic before the scenario starts): no_timer_check skips it, as cloud
    # images do. A VM that still ends before its scenario started (its
    # first line writes vm-up) is booted once more; that is the rig, not a
    # case.
    local attempt
    for attempt in 1 2; do
        # shellcheck disable=SC2086
        "$SIW_PEER/siw-vm-run" -t 1500 -v "$v" -d "$bdir" -x "$here" -c "$bdir/capture.pcap" $fw \
            -A no_timer_check -f "$bdir/scenario.sh" >"$bdir/vm.log" 2>&1 &
        vmpid=$!
        vm_pid=$vmpid
        while kill -0 "$vmpid" 2>/dev/null && [ ! -s "$bdir/vm-up" ]; do
            sleep 0.2
        done
        [ -s "$bdir/vm-up" ] && break
        echo "   the VM ended before its scenario started (boot $attempt):"
        grep -h -m3 -E 'panic|FATAL|rc=' "$bdir/console.log" "$bdir/vm.log" 2>/dev/null | sed 's/^/   | /'
        [ $attempt = 2 ] && break # vm_pid stays set: the cases fail at once
        wait "$vmpid"
        mv -f "$bdir/console.log" "$bdir/console-boot1.log" 2>/dev/null
    done
    for ((i = 0; i < n; i++)); do
        local name=${C_NAME[i]} kind=${C_KIND[i]} t=${C_T[i]} hcmd grc hrc=0 st detail ok
        hcmd=${C_HCMD[i]//@H/${hp[i]}}
        hcmd=${hcmd//@G/${gp[i]}}
        hcmd=${hcmd//@R/$bdir}
        hcmd=${hcmd//@X/$here}
        local ho="$bdir/h.$i.out"
        t0=$SECONDS
        if [ "${C_SIDE[i]}" = guest ]; then
            if ! wait_file "$bdir/ready.$i" 120; then
                echo "guest server never became ready" >"$ho"
                hrc=125
            else
                # shellcheck disable=SC2086
                env ${C_ENV[i]} timeout -k 3 "$t" "$UIWARP" run $hcmd >"$ho" 2>&1 || hrc=$?
            fi
            touch "$bdir/h.$i.done"
            wait_file "$bdir/g.$i.rc" $((t + 30)) || true
        else
            # shellcheck disable=SC2086
            setsid env ${C_ENV[i]} timeout -k 3 "$t" "$UIWARP" run $hcmd >"$ho" 2>&1 &
            local spid=$!
            if ! wait_listen "${hp[i]}" 20; then echo "host server did not listen" >>"$ho"; fi
            touch "$bdir/go.$i"
            wait_file "$bdir/g.$i.rc" $((t + 300)) || true
            # the guest client is done: give the server a moment, then stop it
            local k=0
            while kill -0 "$spid" 2>/dev/null && [ $k -lt 50 ]; do sleep 0.1; k=$((k + 1)); done
            kill -TERM -- "-$spid" 2>/dev/null
            wait "$spid" || hrc=$?
        fi
        grc=$(cat "$bdir/g.$i.rc" 2>/dev/null || echo none)
        ok=0
        detail="uiwarp rc=$hrc siw rc=$grc"
        case $kind in
        REQUIRED | KNOWN*)
            [ "$hrc" = 0 ] && [ "$grc" = 0 ] && ok=1
            # rdma-core's rping exits 255 when its CM thread calls
            # rdma_get_cm_event on the channel main() has just destroyed,
            # after a complete run (rdma-core PR #1622, 2025; Debian 12's
            # rping is older): accepted when the output holds nothing but
            # that perror and the normal end of a run
            if [ $ok = 0 ] && [[ ${C_NAME[i]} == rping-* ]] &&
                rping_race "$hrc" "$ho" && rping_race "$grc" "$bdir/g.$i.out"; then
                ok=1
                detail="$detail; rping's exit 255 after a complete run (its CM thread read the destroyed channel, rdma-core PR #1622)"
            fi
            grep -Eqi 'mismatch|bogus|error' "$ho" "$bdir/g.$i.out" 2>/dev/null && ok=0
            # rstream: each side prints its results line, and nothing of
            # perror's (rsend/rrecv/rconnect/raccept/rpoll) or its check
            # ("data verification failed byte N")
            if [[ ${C_NAME[i]} == rstream-* || ${C_NAME[i]} == riostream-* ]]; then
                grep -Eq '^custom ' "$ho" && grep -Eq '^custom ' "$bdir/g.$i.out" || ok=0
                grep -Eqi 'fail|verif|rsend|rrecv|rconnect|raccept|rpoll|rsocket|rbind|rlisten|riomap|riowrite|riounmap' \
                    "$ho" "$bdir/g.$i.out" 2>/dev/null && ok=0
            fi
            # rcopy: the client's "N bytes in S seconds" line, the server
            # script's "rcopy-server: identical", nothing of perror's or rcopy's
            # messages ("error receiving data", "rconnect failed", ...)
            if [[ ${C_NAME[i]} == rcopy-* ]]; then
                grep -Eq '^rcopy-server: identical' "$ho" "$bdir/g.$i.out" &&
                    grep -Eq '[0-9]+ bytes in [0-9.]+ seconds' "$ho" "$bdir/g.$i.out" || ok=0
                grep -Eqi 'fail|invalid|unable|cannot|differ|rcopy-server: (no|killed)' \
                    "$ho" "$bdir/g.$i.out" 2>/dev/null && ok=0
            fi
            # perftest's close: its client sends one message more than its
            # server reads, and either side closes as soon as it is done.
            # siw fails a Send whose completion is still due when the peer's
            # FIN arrives (Bad wc status 2 = IBV_WC_LOC_QP_OP_ERR): a siw
            # client after a fast uiwarp server's FIN, or a siw server after
            # a fast uiwarp client's (docs/INTEROP.md §3). The test itself
            # completed when both sides printed their results line.
            if [ $ok = 0 ] && [ "$hrc" = 0 ] && [ "$grc" = 1 ] &&
                [[ ${C_NAME[i]} == ib_* ]] &&
                grep -Eq '^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+' "$ho" &&
                grep -Eq '^[[:space:]]*[0-9]+([[:space:]]+[0-9.]+){4}[[:space:]]+Bad wc status 2' "$bdir/g.$i.out" &&
                grep -q 'Failed to close connection' "$bdir/g.$i.out" &&
                ! grep -Eqi 'mismatch|bogus' "$ho" "$bdir/g.$i.out"; then
                ok=1
                if [ "${C_SIDE[i]}" = host ]; then
                    detail="$detail; data phase complete, siw client failed perftest's extra close Send after uiwarp's FIN"
                else
                    detail="$detail; data phase complete, siw server failed its last close Send after uiwarp's FIN"
                fi
            fi
            ;;
        REJECT)
            local rside=${C_CHECK[i]} rrc
            if [ "$rside" = host ]; then rrc=$hrc; else rrc=$grc; fi
            # a clean failure: non-zero, not the timeout (124/137), no signal
            # (rping exits -1 = 255); 124/137/143 are timeout and kills,
            # 129..159 other signals (a crash)
            if [ "$rrc" != 0 ] && [ "$rrc" != none ] && ! is_signal "$rrc"; then ok=1; fi
            # and the uiwarp side did not crash (143: we stopped its server)
            if [ "$hrc" != 143 ] && is_signal "$hrc"; then ok=0; fi
            detail="$detail; $rside side must fail cleanly"
            ;;
        FAULT)
            [ "$hrc" = 0 ] && grep -Eq "${C_CHECK[i]}" "$ho" && ok=1
            [ "$grc" = 124 ] || [ "$grc" = none ] && ok=0
            local term
            term=$(grep -Eo '(sending Terminate|Terminate received): [^(]*' "$ho" | head -2 | paste -sd';')
            detail="$detail; $term"
            ;;
        esac
        if [ "${kind%%:*}" = KNOWN ]; then
            if [ $ok = 1 ]; then st=XPASS; else st=XFAIL; detail="$detail; ${kind#KNOWN:}"; fi
        elif [ $ok = 1 ]; then st=PASS; else st=FAIL; fi
        record "$v" "$dir" "$name" "$kind" "$st" $((SECONDS - t0)) "$detail"
        if [ "$st" = FAIL ]; then
            echo "   --- uiwarp side ($hcmd):"; tail -15 "$ho" | sed 's/^/   | /'
            echo "   --- siw side:"; tail -15 "$bdir/g.$i.out" 2>/dev/null | sed 's/^/   | /'
        fi
    done
    wait "$vmpid"
    local vrc=$?
    vm_pid=""
    if [ $vrc != 0 ]; then
        echo "   VM run rc=$vrc (see $bdir/vm.log, $bdir/console.log)"
    fi
    if grep -q "kernel BUG\|Oops\|WARNING:" "$bdir/console.log" 2>/dev/null; then
        echo "   the siw VM kernel reported a BUG/WARNING:"
        grep -m3 "kernel BUG\|Oops\|WARNING:" "$bdir/console.log" | sed 's/^/   | /'
    fi
    # the capture: zero violations, and what the variant negotiates
    if "$UIWARP" dump -q "$bdir/capture.pcap" >"$bdir/dump.txt" 2>&1; then
        record "$v" "$dir" "capture: uiwarp dump" CHECK PASS $((SECONDS - b0)) \
            "$(grep -m1 '^== total' "$bdir/dump.txt" | sed 's/^== total [^:]*: //')"
        "$UIWARP" dump "$bdir/capture.pcap" >"$bdir/decode.txt" 2>&1
        local crc_line nrtr want=""
        crc_line=$(grep -A3 '^== total' "$bdir/dump.txt" | grep -m1 'CRC:')
        nrtr=$(grep -c '\[RTR\]' "$bdir/decode.txt")
        case "$v-$dir" in
        crc-v2h | p2p-crc-v2h) # siw's initiator asks for CRC: every FPDU carries it
            echo "$crc_line" | grep -Eq 'good [1-9][0-9]*, bad 0, not negotiated 0' || want="CRC on every FPDU" ;;
        esac
        case "$v-$dir" in
        p2p*-v2h | *-h2v) # a P2P initiator: siw's, or uiwarp's (P2P by default)
            [ "$nrtr" -gt 0 ] || want="${want:+$want; }RTRs" ;;
        esac
        # rstream -k: each side's keepalives on that case's connection
        # (the one to the server's port), zero-length RDMA Writes that
        # are not the RTR
        for ((i = 0; i < n; i++)); do
            [[ ${C_NAME[i]} == *-keepalive ]] || continue
            local kc ka_ab ka_ba kp=${hp[i]} # the guest's port when it serves
            [ "${C_SIDE[i]}" = guest ] && kp=${gp[i]}
            kc=$(grep -E "^== c[0-9]+ .*:$kp " "$bdir/decode.txt" | head -1 | awk '{print $2}')
            ka_ab=$(grep -Ec " ${kc:-none} a>b RDMA Write .* payload=0 crc=[a-z]+\$" "$bdir/decode.txt")
            ka_ba=$(grep -Ec " ${kc:-none} b>a RDMA Write .* payload=0 crc=[a-z]+\$" "$bdir/decode.txt")
            if [ "$ka_ab" -gt 0 ] && [ "$ka_ba" -gt 0 ]; then
                record "$v" "$dir" "capture: ${C_NAME[i]}" CHECK PASS 0 "$kc: zero-length RDMA Writes a>b $ka_ab, b>a $ka_ba"
            else
                record "$v" "$dir" "capture: ${C_NAME[i]}" CHECK FAIL 0 "expected keepalives each way on ${kc:-its connection}: zero-length RDMA Writes a>b $ka_ab, b>a $ka_ba"
            fi
        done
        # rsockets: every RDMA Write inside what its receiver advertised
        # (private data, SGL grants, iomap entries; rsocket_bounds.py)
        local rb
        if rb=$(python3 "$here/rsocket_bounds.py" --dump "$UIWARP" "$bdir/capture.pcap" 2>&1); then
            grep -q ': 0 rsocket connections' <<<"$rb" ||
                record "$v" "$dir" "capture: rsocket bounds" CHECK PASS 0 "$(tail -1 <<<"$rb" | sed 's/^.*pcap: //')"
        else
            record "$v" "$dir" "capture: rsocket bounds" CHECK FAIL 0 "$(grep -m2 -E 'OUTSIDE|rror' <<<"$rb" | sed 's/^OUTSIDE [^ ]* //' | paste -sd';')"
        fi
        if [ -z "$want" ]; then
            record "$v" "$dir" "capture: negotiated" CHECK PASS 0 "$(echo "$crc_line" | sed 's/^ *//'); RTR FPDUs $nrtr"
        else
            record "$v" "$dir" "capture: negotiated" CHECK FAIL 0 "expected $want: $crc_line; RTR FPDUs $nrtr"
        fi
    else
        record "$v" "$dir" "capture: uiwarp dump" CHECK FAIL $((SECONDS - b0)) \
            "$(grep -E 'violations: [1-9]|problem' "$bdir/dump.txt" | head -3 | paste -sd';')"
        ncap=$((ncap + 1))
    fi
}

t_all=$SECONDS
for v in $variants; do
    for d in $dirs; do run_boot "$v" "$d"; done
done

{
    echo "| variant | direction | case | kind | result | s | detail |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s\n' "${RES[@]}"
    echo
    echo "siw interop: $npass passed, $nfail failed, $nxfail known siw failures, $nxpass known failures now passing ($((SECONDS - t_all)) s)"
} >"$out/results.md"
echo
cat "$out/results.md"
[ $nfail = 0 ]
