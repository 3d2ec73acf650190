#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Debian's unmodified rdmacm-utils rsocket programs over uiwarp's rsockets
# (src/rdmacm/rsocket.c, docs/RSOCKETS.md), server and client both through
# `uiwarp run`, over 127.0.0.1 (and ::1) on ports picked free at run time:
#
#   rstream  -S all -T v (every transfer size, latency and bandwidth, the
#            receiver checking the data), blocking; nonblocking (-T n) and
#            async (-T a, rpoll) at 64 B, 4 KiB, 64 KiB and 1 MiB, checked
#   rcopy    a 64 MiB random file, compared byte for byte (cmp)
#   riostream riomap/riowrite: blocking, nonblocking and async at 64 B,
#            4 KiB, 64 KiB and 1 MiB, then -S all, the data checked (-T v)
#
# Exit status: 1 if a REQUIRED case failed, 77 if nothing could run, else 0.
# Environment: UIWARP_BUILD (default: ../../build), RDMACM_APPS_VERBOSE=1.
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../../build}
RUN=$BUILD/bin/uiwarp
LIB=$BUILD/lib
if [ ! -x "$RUN" ] || [ ! -e "$LIB/librdmacm.so.1" ] || [ ! -e "$LIB/libibverbs.so.1" ]; then
    echo "SKIP: uiwarp (bin/uiwarp, lib/librdmacm.so.1, lib/libibverbs.so.1) not found in $BUILD"
    exit 77
fi
if ldd "$LIB/libibverbs.so.1" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
    echo "SKIP: $LIB holds sanitizer builds, which the distribution's programs cannot load"
    exit 77
fi

APPS_NAME=rsocket-apps
# shellcheck source=apps_common.sh
. "$here/apps_common.sh"

# rstream prints "verify failed" / errors through perror; any of them fails.
bad='verify|failed|error|Error|rpoll:|rsend|rrecv|rconnect|raccept'

if have rstream; then
    port=$(free_port 4)
    run_case rstream-all-verify REQUIRED "" 250 \
        "$RUN run rstream -b 127.0.0.1 -p $port -S all -T v" \
        "$RUN run rstream -s 127.0.0.1 -p $port -S all -T v" "$bad"
    for mode in n a b; do
        for sz in 64 4096 65536 1048576; do
            port=$(free_port 4)
            run_case "rstream-$mode-$sz" REQUIRED "" 60 \
                "$RUN run rstream -b 127.0.0.1 -p $port -S $sz -T $mode -T v" \
                "$RUN run rstream -s 127.0.0.1 -p $port -S $sz -T $mode -T v" "$bad"
        done
    done
    if have_ipv6; then
        port=$(free_port 6)
        run_case rstream-ipv6 REQUIRED "" 60 \
            "$RUN run rstream -b ::1 -p $port -S 65536 -T v" \
            "$RUN run rstream -s ::1 -p $port -S 65536 -T v" "$bad"
    else
        skip_case rstream-ipv6 "no ::1"
    fi
else
    skip_case rstream "not installed"
fi

if have rcopy; then
    port=$(free_port 4)
    head -c $((64 << 20)) /dev/urandom >"$tmp/rcopy.src"
    # rcopy's server never exits: the client side says when it is done.
    run_case rcopy-64MiB REQUIRED "" 60 \
        "bash -c '$RUN run rcopy -p $port & p=\$!; while [ ! -e $tmp/rcopy.done ]; do sleep 0.2; done; kill \$p; wait \$p; exit 0'" \
        "bash -c '$RUN run rcopy $tmp/rcopy.src 127.0.0.1:$tmp/rcopy.dst -p $port; rc=\$?; touch $tmp/rcopy.done; [ \$rc = 0 ] && cmp $tmp/rcopy.src $tmp/rcopy.dst'"
    rm -f "$tmp/rcopy.src" "$tmp/rcopy.dst"
else
    skip_case rcopy "not installed"
fi

if have riostream; then
    # riostream: riomap'd buffers, riowrite straight into the peer's, the
    # receiver polling the last byte (the engine stores a Write's last byte
    # last); -T v checks every byte. Each mode at four sizes, then -S all.
    riobad="$bad|riomap|riowrite|riounmap"
    for mode in b n a; do
        for sz in 64 4096 65536 1048576; do
            port=$(free_port 4)
            run_case "riostream-$mode-$sz" REQUIRED "" 60 \
                "$RUN run riostream -b 127.0.0.1 -p $port -S $sz -T $mode -T v" \
                "$RUN run riostream -s 127.0.0.1 -p $port -S $sz -T $mode -T v" "$riobad"
        done
    done
    port=$(free_port 4)
    run_case riostream-all-verify REQUIRED "" 500 \
        "$RUN run riostream -b 127.0.0.1 -p $port -S all -T v" \
        "$RUN run riostream -s 127.0.0.1 -p $port -S all -T v" "$riobad"
else
    skip_case riostream "not installed"
fi

finish "rsocket programs"
