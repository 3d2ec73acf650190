#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Instructions per rsocket round trip (issue 16), counted by callgrind in
# bench_rsocket_pp (both ends of one connection in one thread, MSG_DONTWAIT
# ping-pong over 127.0.0.1): the whole process, progress thread included,
# ITERS3 round trips less ITERS1 (setup and teardown cancel out), less the
# spin turns (receives that found nothing yet: their number varies from run
# to run) at the cost of one, measured by a third run whose EMPTY extra
# rrecv calls find nothing. Deterministic to about +-0.5% at 64 B and 4 KiB;
# at 64 KiB the runs spread by a few percent (memcpy is 84% of it).
#
# Usage: bench/bench_rsocket_insns.sh [SIZE...]   (default 64 4096 65536)
# Environment: UIWARP_BUILD (default: ../build relative to this script).
set -u
here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../build}
PP=$BUILD/bin/bench_rsocket_pp
if [ ! -x "$PP" ] || ! command -v valgrind >/dev/null; then
    echo "bench_rsocket_pp (in $BUILD/bin) or valgrind not found" >&2
    exit 77
fi
tmp=$(mktemp -d /tmp/uiwarp-bench-rsi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
port=$((24000 + RANDOM % 1000))
ITERS1=1000 ITERS3=3000 EMPTY=20000

# run ITERS EMPTY -> "spins instructions"
run() {
    port=$((port + 1))
    "$BUILD/bin/uiwarp" run valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" \
        "$PP" "$size" "$1" "$port" "$2" 2>&1 |
        awk '/spins/ { s = $6 } /Collected/ { c = $4; gsub(",", "", c) } END { print s, c }'
}
[ $# -gt 0 ] || set -- 64 4096 65536
for size in "$@"; do
    read -r s1 t1 <<<"$(run $ITERS1 0)"
    read -r s3 t3 <<<"$(run $ITERS3 0)"
    read -r _ te <<<"$(run $ITERS1 $EMPTY)"
    if [ -z "${t1:-}" ] || [ -z "${t3:-}" ] || [ -z "${te:-}" ]; then
        echo "size $size: a run failed" >&2
        continue
    fi
    awk -v size="$size" -v s1="$s1" -v s3="$s3" -v t1="$t1" -v t3="$t3" -v te="$te" \
        -v i1=$ITERS1 -v i3=$ITERS3 -v e=$EMPTY 'BEGIN {
        spin = (te - t1) / e
        net = (t3 - t1 - spin * (s3 - s1)) / (i3 - i1)
        printf "size %d: %.0f instructions per round trip net of spin turns (raw %.0f; spin turns per round trip %.2f/%.2f at %.0f instructions each)\n",
            size, net, (t3 - t1) / (i3 - i1), s1 / i1, s3 / i3, spin }'
done
