#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Benchmark: FPDU/TCP segment alignment (RFC 5044 §4.5, Appendix A.1;
# docs/ENGINE.md "Transmit") against bandwidth, with the aligned sender
# (default) and the batched sender it replaced (UIWARP_FPDU_ALIGN=0),
# measured in the same run over a veth pair between two network namespaces.
# Debian's perftest over uiwarp: ib_write_bw -R 64 KiB and 1 MiB,
# ib_send_bw -R 200 B and 4 KiB, ib_read_bw -R 64 KiB. Per link:
#   ts0    MTU 1500, TCP timestamps off (as RNICs run: MSS 1460)
#   ts1    MTU 1500, timestamps on (MSS 1448)
#   j9000  MTU 9000, timestamps off (MSS 8960)
# Alignment: one short run per program and sender (200 iterations, 2000 for
# messages up to 4 KiB), captured on the veth
# with gso_max_segs 1 (the capture sees the segments a wire carries) and
# read by `uiwarp dump`: "start" = FPDUs that start a TCP segment,
# "whole" = FPDUs that lie wholly in a segment that starts with an FPDU
# (Appendix A.1; packed small FPDUs count), both directions, both of
# perftest's connections.
# Bandwidth: ROUNDS runs of each sender, alternating which goes first,
# DURATION seconds each (perftest -D), perftest's average MB/s; printed as
# median (min-max) and the ratio of the medians aligned / batched. GSO/TSO
# on the veth as created (a NIC's TSO), unless -g (gso_max_segs 1).
#
# A benchmark, not a test (the test is tests/rdmacm/test_fpdu_align_apps.sh).
# Needs root, ip, dumpcap and perftest.
#
# With -b DIR, the aligned sender of another build (DIR: its build
# directory, e.g. main's: "before") runs in the same rounds, in rotating
# order, and the table gives, per round, the ratios aligned / batched of
# both builds (median, min-max over the rounds), and its alignment beside.
# "segs" = TCP segments that start with an FPDU (RFC 5044 §2 "FPDU
# Alignment"; uiwarp dump's "segment starts"), both directions.
#
# Usage: bench/bench_align.sh [-r ROUNDS] [-d SECONDS] [-l "ts0 ts1 j9000"] [-g] [-A]
#                              [-c "PROGRAM:SIZE ..."] [-e VAR=VALUE]... [-b DIR]
#   -A: bandwidth only (no capture); -c: these cases only (ib_send_bw:200);
#   -e: an environment setting for the aligned runs (variants)
# Environment: UIWARP_BUILD (default: ../build relative to this script).
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../build}
LIB=$BUILD/lib
# shellcheck source=../tests/lib.sh
. "$here/../tests/lib.sh"
rounds=3
dur=2
links="ts0 ts1 j9000"
gso1=0
align=1
aenv=()
only=
before=
while getopts "r:d:l:gAe:c:b:h" o; do
    case $o in
    r) rounds=$OPTARG ;;
    d) dur=$OPTARG ;;
    l) links=$OPTARG ;;
    g) gso1=1 ;;
    A) align=0 ;;
    e) aenv+=("$OPTARG") ;;
    c) only=$OPTARG ;;
    b) before=$(cd "$OPTARG" && pwd) ;;
    *)
        sed -n '3,38s/^# \{0,1\}//p' "$0"
        exit 0
        ;;
    esac
done
if [ "$(id -u)" -ne 0 ] || ! command -v ib_write_bw >/dev/null; then
    echo "needs root and perftest" >&2
    exit 1
fi

veth_names b
tmp=$(mktemp -d)
cap=
cleanup() {
    [ -n "$cap" ] && kill -INT "$cap" 2>/dev/null
    veth_del
    rm -rf "$tmp"
}
trap cleanup EXIT

link() { # MTU TIMESTAMPS
    veth_link "$na" "$nb" "$va" "$vb" 10.232.0 "$1" "$2"
}
gso() { # N
    veth_gso "$na" "$nb" "$va" "$vb" "$1"
}

port=20000
# perf ALIGN PROGRAM ARGS...: prints perftest's average MB/s (or "fail")
# (ALIGN "b": the aligned sender of the -b build)
perf() {
    local a=$1 prog=$2 e=() lib=$LIB
    shift 2
    port=$((port + 1))
    [ "$a" = 1 ] && e=("${aenv[@]}")
    if [ "$a" = b ]; then
        a=1
        lib=$before/lib
    fi
    ip netns exec "$na" env LD_LIBRARY_PATH="$lib" UIWARP_FPDU_ALIGN="$a" "${e[@]}" timeout 60 \
        "$prog" -R -F -p $port "$@" >"$tmp/s.out" 2>&1 &
    local sp=$!
    sleep 0.3
    ip netns exec "$nb" env LD_LIBRARY_PATH="$lib" UIWARP_FPDU_ALIGN="$a" "${e[@]}" timeout 60 \
        "$prog" -R -F -p $port "$@" 10.232.0.1 >"$tmp/c.out" 2>&1
    local rc=$? src
    wait $sp
    src=$?
    if [ $rc -ne 0 ] || [ $src -ne 0 ]; then
        echo fail
        return
    fi
    awk '$1 ~ /^[0-9]+$/ && NF >= 5 {v = $4} END {print v == "" ? "fail" : v}' "$tmp/c.out"
}

# stats VALUES...: "median (min-max)"; median VALUES...: the median alone
median() {
    printf '%s\n' "$@" | grep -v fail | sort -g |
        awk '{v[NR] = $1} END {if (!NR) print 0; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}
stats() {
    local s
    s=$(printf '%s\n' "$@" | grep -v fail | sort -g)
    if [ -z "$s" ]; then
        echo "fail"
        return
    fi
    echo "$(median "$@") ($(head -1 <<<"$s")-$(tail -1 <<<"$s"))"
}

# alignment ALIGN PROGRAM ARGS...: "start% whole% segs%" of one captured short run
alignment() {
    local a=$1 pcap=$tmp/a.pcapng
    shift
    rm -f "$pcap"
    ip netns exec "$na" dumpcap -q -B 64 -i "$va" -w "$pcap" >/dev/null 2>&1 &
    cap=$!
    for _ in $(seq 50); do
        [ -s "$pcap" ] && break
        sleep 0.1
    done
    perf "$a" "$@" >/dev/null
    sleep 0.2
    kill -INT $cap 2>/dev/null
    wait $cap 2>/dev/null
    cap=
    "$BUILD/bin/uiwarp" dump -q "$pcap" 2>/dev/null | awk '
        /segment alignment:/ && !/^   segment/ {a += $4; n += $6}
        /segment packing:/ && !/^   segment/ {w += $4}
        /segment starts:/ && !/^   segment/ {s += $4; m += $6}
        END {if (n) printf "%.1f%% %.1f%% %.1f%%", 100 * a / n, 100 * w / n, m ? 100 * s / m : 0;
             else printf "? ? ?"}'
}

# ratios A B: per-round ratios A[i]/B[i] as "median (min-max)"
ratios() {
    local -n ra=$1 rb=$2
    local rv=() i
    for i in "${!ra[@]}"; do
        rv+=("$(awk -v a="${ra[$i]}" -v b="${rb[$i]}" 'BEGIN {if (a + 0 > 0 && b + 0 > 0) printf "%.3f", a / b; else print "fail"}')")
    done
    stats "${rv[@]}"
}

cases=(
    "ib_write_bw -s 65536"
    "ib_write_bw -s 1048576"
    "ib_send_bw -s 200"
    "ib_send_bw -s 4096"
    "ib_read_bw -s 65536"
)
if [ -n "$before" ]; then
    echo "| link | program | size | segs: batched / before / after | start: batched / before / after | MB/s batched | MB/s before | MB/s after | before / batched | after / batched |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
else
    echo "| link | program | size | start: batched / aligned | whole (A.1): batched / aligned | segs: batched / aligned | MB/s batched | MB/s aligned | aligned / batched |"
    echo "|---|---|---|---|---|---|---|---|---|"
fi
for l in $links; do
    case $l in
    ts0) link 1500 0 ;;
    ts1) link 1500 1 ;;
    j9000) link 9000 0 ;;
    *)
        echo "unknown link $l" >&2
        continue
        ;;
    esac || {
        echo "cannot make the namespaces" >&2
        exit 1
    }
    for c in "${cases[@]}"; do
        # shellcheck disable=SC2086
        set -- $c
        if [ -n "$only" ] && ! grep -qw -- "$1:$3" <<<"$only"; then
            continue
        fi
        al0="- - -" al1="- - -" alb="- - -"
        if [ $align = 1 ]; then
            gso 1
            ni=200 # small messages: 2000, so that connection setup weighs less
            [ "$3" -le 4096 ] && ni=2000
            # shellcheck disable=SC2086
            al0=$(alignment 0 $c -n $ni)
            # shellcheck disable=SC2086
            al1=$(alignment 1 $c -n $ni)
            # shellcheck disable=SC2086
            [ -n "$before" ] && alb=$(alignment b $c -n $ni)
        fi
        if [ $gso1 = 1 ]; then gso 1; else gso 65535; fi
        b0=() b1=() bb=()
        order=(0 1)
        [ -n "$before" ] && order=(0 b 1)
        for r in $(seq "$rounds"); do
            echo "$l $c round $r" >&2
            # rotate which sender goes first
            k=$(((r - 1) % ${#order[@]}))
            for x in "${order[@]:$k}" "${order[@]:0:$k}"; do
                # shellcheck disable=SC2086
                v=$(perf "$x" $c -D "$dur")
                case $x in
                0) b0+=("$v") ;;
                1) b1+=("$v") ;;
                b) bb+=("$v") ;;
                esac
            done
        done
        s0=$(stats "${b0[@]}")
        m0=$(median "${b0[@]}")
        s1=$(stats "${b1[@]}")
        m1=$(median "${b1[@]}")
        ratio=$(awk -v a="$m1" -v b="$m0" 'BEGIN {if (b > 0) printf "%.3f", a / b; else print "-"}')
        read -r st0 wh0 sg0 <<<"$al0"
        read -r st1 wh1 sg1 <<<"$al1"
        read -r stb _ sgb <<<"$alb"
        if [ -n "$before" ]; then
            echo "| $l | $1 | $3 | $sg0 / $sgb / $sg1 | $st0 / $stb / $st1 | $s0 | $(stats "${bb[@]}") | $s1 | $(ratios bb b0) | $(ratios b1 b0) |"
        else
            echo "| $l | $1 | $3 | $st0 / $st1 | $wh0 / $wh1 | $sg0 / $sg1 | $s0 | $s1 | $ratio ($(ratios b1 b0)) |"
        fi
    done
done
