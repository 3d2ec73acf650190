#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Benchmark: unmodified Debian RDMA programs (perftest -R, qperf -cm1, fio's
# rdma engine, rping) run through uiwarp's libibverbs.so.1 / librdmacm.so.1
# (LD_LIBRARY_PATH=$UIWARP_BUILD/lib) over 127.0.0.1, beside qperf's tcp_bw /
# tcp_lat at the same message size measured in the same run. Prints a
# Markdown table: program x mode x size, pass/fail, the figure the program
# itself reports, the TCP figure and the ratio (uiwarp / TCP; for latencies
# above 1 means slower than TCP).
#
# A benchmark, not a test: not registered with ctest; the exit status is 0
# unless nothing could run. Programs that are not installed are skipped.
#
# Usage: bench/bench_apps.sh [--csv FILE] [--svg FILE] [--quick]
# --svg draws the ratios (bench/plot.py). Progress goes to stderr.
# Environment: UIWARP_BUILD (default: ../build relative to this script).
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../build}
LIB=$BUILD/lib
csv=
svg=
quick=0
while [ $# -gt 0 ]; do
    case $1 in
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
        shift
        ;;
    -h | --help)
        sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "unknown option: $1" >&2
        exit 2
        ;;
    esac
done
if [ ! -e "$LIB/librdmacm.so.1" ] || [ ! -e "$LIB/libibverbs.so.1" ]; then
    echo "uiwarp's librdmacm.so.1 / libibverbs.so.1 not found in $LIB (set UIWARP_BUILD)" >&2
    exit 77
fi
if ldd "$LIB/libibverbs.so.1" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
    echo "$LIB holds sanitizer builds, which the distribution's programs cannot load" >&2
    exit 77
fi
UIW_LD=$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

tmp=$(mktemp -d /tmp/uiwarp-bench-apps.XXXXXX)
# procs/reap (what is left of the programs started), have, free_port [4|6],
# wait_listen PORT [SECONDS]
# shellcheck source=../tests/lib.sh
source "$here/../tests/lib.sh"
cleanup() { reap_and_remove "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# pair NAME TIMEOUT LD SERVER_CMD CLIENT_CMD: run a server and a client, each
# in its own session under timeout -k (what either forks dies with it).
# Output in $tmp/NAME.server / .client; sets pair_ok (1: both exited 0) and
# pair_secs (the client's wall time).
pair() {
    local name=$1 t=$2 ld=$3 scmd=$4 ccmd=$5 spid cpid src=0 crc=0 t0 t1
    pair_ok=1
    pair_secs=0
    LD_LIBRARY_PATH=$ld setsid bash -c "exec timeout -k 3 $t $scmd" >"$tmp/$name.server" 2>&1 &
    spid=$!
    procs+=("$spid")
    if ! wait_listen "$port" 10; then
        echo "server did not listen on port $port" >>"$tmp/$name.server"
        kill -TERM "$spid" 2>/dev/null
        pair_ok=0
    else
        t0=$(date +%s.%N)
        LD_LIBRARY_PATH=$ld setsid bash -c "exec timeout -k 3 $t $ccmd" >"$tmp/$name.client" 2>&1 &
        cpid=$!
        procs+=("$cpid")
        wait "$cpid" 2>/dev/null || crc=$?
        t1=$(date +%s.%N)
        pair_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
    fi
    wait "$spid" 2>/dev/null || src=$?
    reap
    [ "$crc" = 0 ] && [ "$src" = 0 ] || pair_ok=0
    return 0
}

rows=()
# row PROGRAM MODE SIZE STATUS METRIC VALUE UNIT EXTRA KIND
#   KIND: bw (compare with tcp_bw, MB/s), lat (tcp_lat, us: one way, half
#   a round trip, as perftest's send/write latency and qperf's rc_lat),
#   rtt (2 x tcp_lat: a whole round trip, as a Read's latency), rate
#   (messages/s against tcp_bw / size: TCP's rate of messages of that
#   size), cost (qperf send_cost, ms/GB, against tcp_bw's), rr (against
#   bench_tcp_rr -p at that size: TCP request/response with one in flight,
#   the ceiling of qperf's Reads, which keep one in flight), ref (against
#   REF_VAL, named REF_NAME: the same program over its own TCP transport),
#   none
row() {
    local prog=$1 mode=$2 size=$3 status=$4 metric=$5 value=$6 unit=$7 extra=$8 kind=$9
    local tname=- tval=- ratio=-
    if [ "$kind" = bw ] || [ "$kind" = lat ] || [ "$kind" = rtt ] || [ "$kind" = rate ] || [ "$kind" = cost ] ||
        [ "$kind" = ref ] || [ "$kind" = rr ]; then
        if [ "$kind" = bw ]; then
            tname=tcp_bw
            tval=${tcp_bw[$size]:-}
        elif [ "$kind" = rr ]; then
            tname="TCP request/response (bench_tcp_rr -p)"
            tval=${tcp_rr[$size]:-}
        elif [ "$kind" = rate ]; then
            # TCP's message rate: tcp_bw (MB/s) / size (B) = M messages/s
            tname="tcp_bw / size"
            tval=${tcp_bw[$size]:-}
            [ -n "$tval" ] && tval=$(awk -v a="$tval" -v s="$size" 'BEGIN { printf "%.4f", a / s }')
        elif [ "$kind" = cost ]; then
            tname="tcp_bw send_cost"
            tval=${tcp_cost[$size]:-}
        elif [ "$kind" = ref ]; then
            # the same program over another transport, measured just before
            tname=$REF_NAME
            tval=$REF_VAL
        elif [ "$kind" = lat ]; then
            tname=tcp_lat
            tval=${tcp_lat[$size]:-}
        else
            tname="2 x tcp_lat"
            tval=${tcp_lat[$size]:-}
            [ -n "$tval" ] && tval=$(awk -v a="$tval" 'BEGIN { printf "%.1f", 2 * a }')
        fi
        if [ -n "$tval" ] && [ "$value" != - ] && [ -n "$value" ]; then
            ratio=$(awk -v a="$value" -v b="$tval" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        fi
        [ -n "$tval" ] || tval=-
    fi
    rows+=("$prog|$mode|$size|$status|$metric|$value|$unit|$extra|$tname|$tval|$ratio")
    printf '[%4ds] %-22s %-22s %8s %-4s %-14s %10s %-5s %s\n' "$SECONDS" "$prog" "$mode" "$size" "$status" "$metric" "$value" "$unit" "$extra" >&2
}

# The result line after perftest's "#bytes" header, each field cut to its
# leading number (the library's stderr may end up on the same line).
perftest_line() { # FILE
    awk '/#bytes/ { getline; for (i = 1; i <= NF; i++) { if (match($i, /^[0-9.]+/)) printf "%s ", substr($i, 1, RLENGTH); else exit } exit }' "$1"
}

# qperf's "name = number unit" to MB/s or us.
qperf_val() { # FILE FIELD -> number in MB/s (bw) / us (latency) / K/s (msg_rate) / ms/GB (cost)
    awk -v f="$2" '
        $1 == f && $2 == "=" {
            v = $3; u = $4
            if (u == "GB/sec") v *= 1000; else if (u == "KB/sec") v /= 1000; else if (u == "bytes/sec") v /= 1e6
            if (u == "ms") v *= 1000; else if (u == "ns") v /= 1000; else if (u == "sec") v *= 1e6
            if (u == "M/sec") v *= 1000; else if (u == "/sec") v /= 1000
            # qperf scales its costs too: 1.02 sec/GB is 1020 ms/GB
            if (u == "sec/GB") v *= 1000; else if (u == "us/GB") v /= 1000; else if (u == "ns/GB") v /= 1e6
            printf (v >= 100 ? "%.0f\n" : "%.3g\n"), v; exit
        }' "$1"
}

# ------------------------------------------------------------------------
# TCP reference: qperf tcp_bw / tcp_lat at every size used below
# ------------------------------------------------------------------------
declare -A tcp_bw tcp_lat tcp_cost tcp_rr
qt=2
[ $quick = 1 ] && qt=1
sizes_bw="64 4096 65536 1048576"
sizes_lat="8 64 4096 65536"
if have qperf; then
    port=$(free_port)
    setsid bash -c "exec timeout -k 3 300 qperf -lp $port" >"$tmp/tcp.server" 2>&1 &
    tpid=$!
    procs+=("$tpid")
    if wait_listen "$port" 10; then
        for s in $sizes_bw 8; do
            timeout 30 qperf 127.0.0.1 -lp "$port" -t $qt -m "$s" -v tcp_bw >"$tmp/tcp_bw.$s" 2>&1
            tcp_bw[$s]=$(qperf_val "$tmp/tcp_bw.$s" bw)
            tcp_cost[$s]=$(qperf_val "$tmp/tcp_bw.$s" send_cost)
        done
        for s in $sizes_lat 1048576; do
            timeout 30 qperf 127.0.0.1 -lp "$port" -t $qt -m "$s" tcp_lat >"$tmp/tcp_lat.$s" 2>&1
            tcp_lat[$s]=$(qperf_val "$tmp/tcp_lat.$s" latency)
        done
        timeout 10 qperf 127.0.0.1 -lp "$port" quit >/dev/null 2>&1
    fi
    wait "$tpid" 2>/dev/null
    reap
fi
# TCP request/response with one request in flight, both sides busy-polling
# (a Read Request's 52 bytes out, SIZE bytes back): what qperf's Reads,
# one in flight, could reach at most over this TCP (docs/PERFORMANCE.md)
if [ -x "$BUILD/bin/bench_tcp_rr" ]; then
    for s in 4096 65536; do
        tcp_rr[$s]=$(timeout 60 "$BUILD/bin/bench_tcp_rr" -p -r 1 -t "$qt" -s "$s" 2>/dev/null |
            awk -F'|' '$2 + 0 == 1 { gsub(/ /, "", $8); print $8 }')
    done
fi

# ------------------------------------------------------------------------
# perftest, rdma_cm mode (-R)
# ------------------------------------------------------------------------
# Bandwidth and message rate over a fixed time (perftest -D), not a fixed
# count: 50,000 small messages are over in 50 ms, mostly start-up (the
# coalescing backstop's back-off, poll ownership) rather than the steady
# state a streaming program sees.
bw_dur() {
    if [ $quick = 1 ]; then echo 1; else echo 2; fi
}
perftest_bw() { # PROG SIZE [EXTRA ARGS]
    local p=$1 s=$2 extra=${3:-} d name line
    d=$(bw_dur)
    name=$p-$s
    port=$(free_port)
    pair "$name" 120 "$UIW_LD" "$p -R -p $port -s $s -D $d $extra" "$p -R -p $port -s $s -D $d $extra 127.0.0.1"
    # "#bytes #iterations BW peak BW average MsgRate"
    line=$(perftest_line "$tmp/$name.client")
    set -- $line
    if [ $pair_ok = 1 ] && [ $# -ge 5 ] && [ "$s" -le 64 ]; then
        row "$p -R" "message rate" "$s" PASS MsgRate "$5" Mpps "BW average $4 MB/s" rate
    elif [ $pair_ok = 1 ] && [ $# -ge 5 ]; then
        row "$p -R" bw "$s" PASS "BW average" "$4" MB/s "$(printf '%.4f Mpps' "$5")" bw
    else
        row "$p -R" bw "$s" FAIL "BW average" - MB/s "" bw
    fi
}
perftest_lat() { # PROG SIZE [ENV]: ENV (VAR=VALUE) for both sides, named in the mode
    local p=$1 s=$2 e=${3:-} n=20000 name line mode=lat kind=lat
    [ "$s" -ge 65536 ] && n=5000
    [ $quick = 1 ] && n=$((n / 5))
    # perftest's read latency is a whole round trip; send/write ping-pong half of one
    [ "$p" = ib_read_lat ] && kind=rtt
    name=$p-$s${e:+-${e//[^A-Za-z0-9]/_}}
    [ -n "$e" ] && mode="lat, $e"
    port=$(free_port)
    pair "$name" 120 "$UIW_LD" "env $e $p -R -p $port -s $s -n $n" "env $e $p -R -p $port -s $s -n $n 127.0.0.1"
    # "#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%"
    line=$(perftest_line "$tmp/$name.client")
    set -- $line
    if [ $pair_ok = 1 ] && [ $# -ge 6 ]; then
        row "$p -R" "$mode" "$s" PASS t_typical "$5" us "avg $6, 99% ${8:-?}, 99.9% ${9:-?}" $kind
    else
        row "$p -R" "$mode" "$s" FAIL t_typical - us "" $kind
    fi
}

ran=0
for p in ib_send_bw ib_write_bw ib_read_bw; do
    have $p || continue
    for s in $sizes_bw; do
        perftest_bw $p "$s"
        ran=1
    done
done
if have ib_read_bw; then
    perftest_bw ib_read_bw 8
fi
if have ib_atomic_bw; then
    port=$(free_port)
    d=$(bw_dur)
    pair ib_atomic_bw 120 "$UIW_LD" "ib_atomic_bw -R -p $port -D $d" "ib_atomic_bw -R -p $port -D $d 127.0.0.1"
    line=$(perftest_line "$tmp/ib_atomic_bw.client")
    set -- $line
    if [ $pair_ok = 1 ] && [ $# -ge 5 ]; then
        row "ib_atomic_bw -R" "bw (fetch&add)" 8 PASS MsgRate "$5" Mpps "BW avg $4 MB/s" none
    else
        row "ib_atomic_bw -R" "bw (fetch&add)" 8 FAIL MsgRate - Mpps "" none
    fi
    ran=1
fi
for p in ib_send_lat ib_write_lat ib_read_lat; do
    have $p || continue
    for s in 8 4096 65536; do
        perftest_lat $p "$s"
        ran=1
    done
done
# ib_write_lat waits by spinning on memory: the progress thread at a better
# nice value places its data at once (docs/ENGINE.md; needs CAP_SYS_NICE)
if have ib_write_lat; then
    for s in 8 4096; do
        perftest_lat ib_write_lat "$s" UIWARP_PROGRESS_NICE=-20
    done
fi

# ------------------------------------------------------------------------
# qperf -cm1
# ------------------------------------------------------------------------
qperf_case() { # TEST SIZE FIELD KIND [OPTIONS [ENV]]: ENV (VAR=VALUE) for both sides
    local t=$1 s=$2 f=$3 kind=$4 o=${5:-} e=${6:-} v unit m="" c
    local name=qperf-$1-$2${5:+-P}${e:+-${e//[^A-Za-z0-9]/_}}
    [ "$s" != - ] && m="-m $s"
    port=$(free_port)
    pair "$name" 60 "$UIW_LD" "env $e qperf -lp $port" \
        "env $e bash -c 'qperf 127.0.0.1 -lp $port -cm1 -t $qt -v $o $m $t; rc=\$?; qperf 127.0.0.1 -lp $port quit; exit \$rc'"
    v=$(qperf_val "$tmp/$name.client" "$f")
    case $f in bw) unit=MB/s ;; latency) unit=us ;; *) unit=K/s ;; esac
    if grep -Eq 'failed|unexpected|timed out|error' "$tmp/$name.client" "$tmp/$name.server"; then
        pair_ok=0
    fi
    if [ $pair_ok = 1 ] && [ -n "$v" ]; then
        row "qperf -cm1${o:+ $o}${e:+ $e}" "$t" "$s" PASS "$f" "$v" "$unit" "" "$kind"
        c=$(qperf_val "$tmp/$name.client" send_cost)
        if [ "$kind" = bw ] && [ -n "$c" ] && { [ "$s" = 65536 ] || [ "$s" = 1048576 ]; }; then
            row "qperf -cm1${o:+ $o}${e:+ $e}" "$t" "$s" PASS send_cost "$c" ms/GB "" cost
        fi
        if [ "$t" = rc_rdma_read_bw ] && [ -n "${tcp_rr[$s]:-}" ]; then
            row "qperf -cm1${o:+ $o}${e:+ $e}" "$t" "$s" PASS "bw, one in flight" "$v" "$unit" "" rr
        fi
    else
        row "qperf -cm1${o:+ $o}${e:+ $e}" "$t" "$s" FAIL "$f" - "$unit" "" "$kind"
    fi
}
if have qperf; then
    for s in 8 64 4096 65536; do
        qperf_case rc_lat "$s" latency lat
        qperf_case rc_rdma_write_lat "$s" latency lat
        qperf_case rc_rdma_read_lat "$s" latency rtt
    done
    # MPA CRC required on both sides
    qperf_case rc_lat 65536 latency lat "" UIWARP_CRC=required
    # qperf waits for completion events by default; -P 1 polls the CQ
    qperf_case rc_lat 64 latency lat "-P 1"
    qperf_case rc_rdma_read_lat 64 latency rtt "-P 1"
    for s in $sizes_bw; do
        qperf_case rc_rdma_write_bw "$s" bw bw
        qperf_case rc_bw "$s" bw bw
        qperf_case rc_rdma_read_bw "$s" bw bw
    done
    qperf_case rc_compare_swap_mr - msg_rate none
    qperf_case rc_fetch_add_mr - msg_rate none
    ran=1
fi

# ------------------------------------------------------------------------
# fio's rdma engine (server rw=read, client rw=write; --thread)
# ------------------------------------------------------------------------
if have fio && fio --enghelp 2>/dev/null | grep -qw rdma; then
    fsize=2g
    [ $quick = 1 ] && fsize=256m
    for verb in write read; do
        name=fio-$verb
        port=$(free_port)
        pair "$name" 120 "$UIW_LD" \
            "fio --thread --name=srv --ioengine=rdma --port=$port --bs=64k --size=$fsize --rw=read --iodepth=16" \
            "fio --thread --name=cli --ioengine=rdma --hostname=127.0.0.1 --port=$port --verb=$verb --bs=64k --size=$fsize --rw=write --iodepth=16"
        # "  WRITE: bw=1234MiB/s (1294MB/s), ..." -> the decimal MB/s
        v=$(sed -n 's/.*WRITE: bw=[^(]*(\([0-9.]*\)\([kMG]\)B\/s).*/\1 \2/p' "$tmp/$name.client" | head -1 |
            awk '{ v = $1; if ($2 == "k") v /= 1000; else if ($2 == "G") v *= 1000; print v }')
        if grep -Eq 'err= *[1-9]|fio: .*(fail|error)' "$tmp/$name.client" "$tmp/$name.server"; then
            pair_ok=0
        fi
        if [ $pair_ok = 1 ] && [ -n "$v" ]; then
            row fio "rdma_$verb iodepth 16" 65536 PASS bw "$v" MB/s "" bw
        else
            row fio "rdma_$verb iodepth 16" 65536 FAIL bw - MB/s "" bw
        fi
        ran=1
    done
fi

# ------------------------------------------------------------------------
# rping: wall time of N ping-pong iterations (client side)
# ------------------------------------------------------------------------
if have rping; then
    iters=2000
    [ $quick = 1 ] && iters=400
    for s in 64 4096; do
        name=rping-$s
        port=$(free_port)
        pair "$name" 120 "$UIW_LD" "rping -s -a 127.0.0.1 -p $port -C $iters -S $s" \
            "rping -c -a 127.0.0.1 -p $port -C $iters -S $s"
        if [ $pair_ok = 1 ]; then
            us=$(awk -v t="$pair_secs" -v n="$iters" 'BEGIN { printf "%.1f", t * 1e6 / n }')
            row rping "$iters iterations" "$s" PASS "us/iteration" "$us" us "$(printf 'client wall time %.2f s incl. setup' "$pair_secs")" lat
        else
            row rping "$iters iterations" "$s" FAIL "us/iteration" - us "" lat
        fi
        ran=1
    done
fi

# ------------------------------------------------------------------------
# Open MPI (cm PML, ofi MTL, verbs;ofi_rxm over uiwarp) beside Open MPI's
# own TCP transport (ob1 PML, tcp BTL); libfabric's fi_pingpong on the
# verbs provider beside libfabric's tcp provider
# ------------------------------------------------------------------------
if have mpirun && have mpicc &&
    mpicc -std=gnu17 -O2 -o "$tmp/mpi_bench" "$here/mpi_bench.c" >"$tmp/mpicc.log" 2>&1; then
    mpi_base=(--oversubscribe -np 2)
    [ "$(id -u)" = 0 ] && mpi_base=(--allow-run-as-root "${mpi_base[@]}")
    q=
    [ $quick = 1 ] && q=--quick
    timeout 300 mpirun "${mpi_base[@]}" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$tmp/mpi_bench" $q >"$tmp/mpi.tcp" 2>&1
    timeout 300 "$BUILD/bin/uiwarp" run mpirun "${mpi_base[@]}" --mca pml cm --mca mtl ofi \
        --mca mtl_ofi_provider_include 'verbs;ofi_rxm' "$tmp/mpi_bench" $q >"$tmp/mpi.uiw" 2>&1
    for k in "lat 1" "lat 4096" "bw 65536" "bw 1048576"; do
        set -- $k
        REF_NAME="Open MPI btl tcp ($1)"
        REF_VAL=$(awk -v k="$1" -v s="$2" '$1 == k && $2 == s { print $3 }' "$tmp/mpi.tcp")
        v=$(awk -v k="$1" -v s="$2" '$1 == k && $2 == s { print $3 }' "$tmp/mpi.uiw")
        [ -n "$REF_VAL" ] || REF_VAL=-
        unit=us
        [ "$1" = bw ] && unit=MB/s
        if [ -n "$v" ] && grep -q '^OK: 0 bad' "$tmp/mpi.uiw"; then
            row "Open MPI mtl ofi verbs;ofi_rxm" "$1" "$2" PASS "$1" "$v" $unit "" ref
        else
            row "Open MPI mtl ofi verbs;ofi_rxm" "$1" "$2" FAIL "$1" - $unit "" ref
        fi
    done
    ran=1
fi
if have fi_pingpong; then
    n=20000
    [ $quick = 1 ] && n=4000
    for prov in tcp verbs; do
        port=$(free_port)
        ld=
        [ $prov = verbs ] && ld=$UIW_LD
        pair "fi_pingpong-$prov" 60 "$ld" "fi_pingpong -p $prov -e msg -B $port -I $n -S 64" \
            "fi_pingpong -p $prov -e msg -P $port -I $n -S 64 127.0.0.1"
        # "bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec"
        v=$(awk '$1 == 64 { print $7 }' "$tmp/fi_pingpong-$prov.client")
        if [ $prov = tcp ]; then
            REF_NAME="fi_pingpong -p tcp (lat)"
            REF_VAL=${v:--}
        elif [ $pair_ok = 1 ] && [ -n "$v" ]; then
            row "fi_pingpong -p verbs -e msg" "usec/xfer" 64 PASS "usec/xfer" "$v" us "" ref
        else
            row "fi_pingpong -p verbs -e msg" "usec/xfer" 64 FAIL "usec/xfer" - us "" ref
        fi
    done
    ran=1
fi

# ------------------------------------------------------------------------
# An empty ibv_poll_cq on a CQ shared by N QPs (bench_cq, the engine's
# static build)
# ------------------------------------------------------------------------
# rdmacm-utils' cmtime: N connections started at once (setup in bursts;
# bench/bench_scale compares connection setup with TCP's)
if have cmtime; then
    n=2000
    [ $quick = 1 ] && n=200
    port=$(free_port)
    # the server does not exit by itself: stopped once the client is done
    LD_LIBRARY_PATH=$UIW_LD setsid bash -c "exec timeout -k 3 120 cmtime -p $port -c $n" \
        >"$tmp/cmtime.server" 2>&1 &
    spid=$!
    procs+=("$spid")
    crc=1
    if wait_listen "$port" 10; then
        LD_LIBRARY_PATH=$UIW_LD timeout -k 3 120 cmtime -s 127.0.0.1 -p "$port" -c "$n" \
            >"$tmp/cmtime.client" 2>&1
        crc=$?
    fi
    kill -TERM "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null
    reap
    # "step total ms max ms min us us / conn"
    v=$(awk '$1 == "connect" && $2 == ":" { print $3 }' "$tmp/cmtime.client" 2>/dev/null)
    if [ "$crc" = 0 ] && [ -n "$v" ]; then
        row cmtime "connect, $n at once" - PASS "total ms" "$v" ms \
            "slowest $(awk '$1 == "connect" && $2 == ":" { print $4 }' "$tmp/cmtime.client") ms" none
    else
        row cmtime "connect, $n at once" - FAIL "total ms" - ms "" none
    fi
    ran=1
fi
if [ -x "$BUILD/bin/bench_cq" ]; then
    for n in 1 100 2000; do
        v=$("$BUILD/bin/bench_cq" "$n" 2>/dev/null | awk '/ns per empty/ { print $3 }')
        if [ -n "$v" ]; then
            row bench_cq "empty ibv_poll_cq, $n QPs" - PASS "ns per poll" "$v" ns "" none
        else
            row bench_cq "empty ibv_poll_cq, $n QPs" - FAIL "ns per poll" - ns "" none
        fi
    done
fi

[ $ran = 1 ] || {
    echo "none of the programs is installed" >&2
    exit 77
}

# ------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------
echo
echo "uiwarp ($LIB) vs TCP on 127.0.0.1, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "TCP: qperf tcp_bw (bandwidth rows) or tcp_lat (latency rows) at the row's size, same run; ratio = value / TCP value"
echo
echo "| program | mode | size (B) | result | metric | value | unit | also reported | TCP | TCP value | ratio |"
echo "| --- | --- | ---: | --- | --- | ---: | --- | --- | --- | ---: | ---: |"
for r in "${rows[@]}"; do
    IFS='|' read -r a b c d e f g h i j k <<<"$r"
    echo "| $a | $b | $c | $d | $e | $f | $g | $h | $i | $j | $k |"
done
[ -n "$svg" ] && [ -z "$csv" ] && csv=$tmp/rows.csv
if [ -n "$csv" ]; then
    {
        echo "program,mode,size,result,metric,value,unit,also_reported,tcp_metric,tcp_value,ratio"
        for r in "${rows[@]}"; do
            IFS='|' read -r a b c d e f g h i j k <<<"$r"
            printf '"%s","%s",%s,%s,"%s",%s,%s,"%s",%s,%s,%s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i" "$j" "$k"
        done
    } >"$csv"
    [ "$csv" != "$tmp/rows.csv" ] && echo && echo "CSV written to $csv"
fi
if [ -n "$svg" ]; then
    python3 "$here/plot.py" "$csv" "$svg" --title "uiwarp / TCP, $(date -u +%Y-%m-%d)" &&
        echo "SVG written to $svg"
fi
exit 0
