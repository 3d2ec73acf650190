#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Benchmark: rsockets over uiwarp beside plain TCP, with the same program:
# Debian's rstream (rdmacm-utils) over 127.0.0.1, server and client both
# through `uiwarp run`, once on rsockets and once with `-T s` (rstream on
# the kernel's TCP sockets), alternating, RUNS times each, at 64 B, 4 KiB,
# 64 KiB and 1 MiB:
#
#   bandwidth  rstream -S SIZE -C COUNT        (Gb/s, both directions in turn)
#   latency    rstream -S SIZE -C 1 -I ITERS   (us per transfer, ping-pong)
#   latb       the same with -T b: blocking calls (what a socket program
#              through librspreload.so makes), beside TCP's -T s -T b
#
# Prints a Markdown table: per size and test the median (and range) of each
# side and the median ratio rsockets / TCP with its range over the runs
# paired in order (for latency above 1 means slower than TCP). rstream sets
# 512 KiB socket buffers on both sides (SO_SNDBUF/SO_RCVBUF), for rsockets
# and TCP alike.
#
# A benchmark, not a test: not registered with ctest. Needs rstream.
# Usage: bench/bench_rsockets.sh [--runs N] [--csv FILE] [--svg FILE] [--quick]
# Environment: UIWARP_BUILD (default: ../build relative to this script).
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../build}
RUN=$BUILD/bin/uiwarp
runs=5
csv=
svg=
quick=0
while [ $# -gt 0 ]; do
    case $1 in
    --runs)
        runs=${2:?--runs needs a number}
        shift 2
        ;;
    --csv)
        csv=${2:?--csv needs a file}
        shift 2
        ;;
    --svg)
        svg=${2:?--svg needs a file}
        shift 2
        ;;
    --quick)
        quick=1
        runs=1
        shift
        ;;
    -h | --help)
        sed -n '3,23p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "unknown option: $1" >&2
        exit 2
        ;;
    esac
done
if [ ! -x "$RUN" ] || [ ! -e "$BUILD/lib/librdmacm.so.1" ]; then
    echo "uiwarp (bin/uiwarp, lib/librdmacm.so.1) not found in $BUILD (set UIWARP_BUILD)" >&2
    exit 77
fi
if ! command -v rstream >/dev/null; then
    echo "rstream (rdmacm-utils) not installed" >&2
    exit 77
fi

tmp=$(mktemp -d /tmp/uiwarp-bench-rs.XXXXXX)
# shellcheck source=../tests/lib.sh
source "$here/../tests/lib.sh"
cleanup() { reap_and_remove "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# one MODE(rs|tcp) TEST(bw|lat) SIZE: prints the figure (Gb/s or us) or
# nothing when the pair failed.
one() {
    local mode=$1 test=$2 size=$3 opt="" args port spid
    [ "$mode" = tcp ] && opt="-T s"
    [ "$test" = latb ] && opt="$opt -T b"
    if [ "$test" = bw ]; then
        local c=$((4000000000 / 8 / size))
        [ "$quick" = 1 ] && c=$((c / 8))
        [ $c -gt 100000 ] && c=100000
        [ $c -lt 20 ] && c=20
        args="-S $size -C $c"
    else
        local i=20000
        [ "$size" -ge 65536 ] && i=2000
        [ "$size" -ge 1048576 ] && i=200
        [ "$quick" = 1 ] && i=$((i / 10))
        args="-S $size -C 1 -I $i"
    fi
    port=$(free_port 4)
    # shellcheck disable=SC2086
    setsid timeout -k 3 120 "$RUN" run rstream -b 127.0.0.1 -p "$port" $args $opt \
        >"$tmp/server" 2>&1 &
    spid=$!
    procs+=("$spid")
    if ! wait_listen "$port" 10; then
        wait "$spid" 2>/dev/null
        return
    fi
    # shellcheck disable=SC2086
    timeout -k 3 120 "$RUN" run rstream -s 127.0.0.1 -p "$port" $args $opt >"$tmp/client" 2>&1
    local rc=$?
    wait "$spid" 2>/dev/null
    local src=$?
    [ $rc = 0 ] && [ $src = 0 ] || return
    # name bytes xfers iters total time Gb/sec usec/xfer
    if [ "$test" = bw ]; then
        awk '$1 == "custom" { print $7 }' "$tmp/client"
    else
        awk '$1 == "custom" { print $8 }' "$tmp/client"
    fi
}

sizes="64 4096 65536 1048576"
declare -A res
for test in bw lat latb; do
    for size in $sizes; do
        for r in $(seq 1 "$runs"); do
            for mode in rs tcp; do
                v=$(one "$mode" "$test" "$size")
                res[$test,$size,$mode]="${res[$test,$size,$mode]:-} ${v:-x}"
                echo "$test $size $mode run $r: ${v:-failed}" >&2
            done
        done
    done
done

# stats "v1 v2 ..." -> "median min max" (x = failed, left out)
stats() {
    echo "$1" | tr ' ' '\n' | grep -v '^x*$' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%s %s %s", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'
}
# ratios "a1 a2.." "b1 b2.." -> per-run a/b, "median min max"
ratios() {
    paste -d' ' <(echo "$1" | tr ' ' '\n' | grep -v '^$') <(echo "$2" | tr ' ' '\n' | grep -v '^$') |
        awk '$1 != "x" && $2 != "x" && $2 > 0 { printf "%.3f\n", $1 / $2 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) printf "%.2f %.2f %.2f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'
}

[ -n "$svg" ] && [ -z "$csv" ] && csv=$tmp/rows.csv
[ -n "$csv" ] && echo "program,mode,size,result,metric,value,unit,also_reported,tcp_metric,tcp_value,ratio" >"$csv"
echo "| test | size | rsockets (median, range) | TCP, rstream -T s | rsockets / TCP (median, range over $runs runs) |"
echo "|---|---|---|---|---|"
for test in bw lat latb; do
    unit="Gb/s"
    [ "$test" != bw ] && unit="us"
    for size in $sizes; do
        read -r am alo ahi <<<"$(stats "${res[$test,$size,rs]}")"
        read -r bm blo bhi <<<"$(stats "${res[$test,$size,tcp]}")"
        read -r rm rlo rhi <<<"$(ratios "${res[$test,$size,rs]}" "${res[$test,$size,tcp]}")"
        echo "| $test | $size | ${am:-fail} $unit (${alo:-}-${ahi:-}) | ${bm:-fail} $unit (${blo:-}-${bhi:-}) | ${rm:-} (${rlo:-}-${rhi:-}) |"
        if [ -n "$csv" ] && [ -n "${rm:-}" ]; then
            if [ "$test" = bw ]; then
                echo "\"rstream\",\"bw\",$size,PASS,\"Gb/s\",$am,Gb/s,\"\",\"rstream -T s (bw)\",$bm,$rm" >>"$csv"
            elif [ "$test" = lat ]; then
                echo "\"rstream\",\"lat\",$size,PASS,\"usec/xfer\",$am,us,\"\",\"rstream -T s (lat)\",$bm,$rm" >>"$csv"
            else
                echo "\"rstream -T b\",\"lat\",$size,PASS,\"usec/xfer\",$am,us,\"\",\"rstream -T s -T b (lat)\",$bm,$rm" >>"$csv"
            fi
        fi
    done
done
if [ -n "$svg" ]; then
    python3 "$here/plot.py" "$csv" "$svg" --title "rsockets over uiwarp / TCP (rstream), $(date -u +%Y-%m-%d)" &&
        echo "SVG written to $svg"
fi
exit 0
