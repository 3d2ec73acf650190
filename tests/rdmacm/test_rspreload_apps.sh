#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# Unmodified TCP socket programs over uiwarp's rsockets through rdma-core's
# librspreload.so (docs/RSOCKETS.md), server and client both through
# `uiwarp run`, over 127.0.0.1 on ports picked free at run time:
#
#   python-sha256   a Python socket server and client (rspreload_sha_*.py,
#                   /usr/bin/python3) moving 16 MiB each way, each side
#                   checking the SHA-256 of what arrived; the server runs
#                   as a user would write it (LD_PRELOAD=librspreload.so
#                   uiwarp run ...), the client with `uiwarp run --rsockets`
#   iperf3          iperf3 -s / -c for 3 s (and -R, -P 2); the JSON of both
#                   sides: bytes received > 0, equal on both, no error
#   http-curl       python3 -m http.server serving a 16 MiB random file,
#                   curl fetching it twice (two connections), cmp; over
#                   127.0.0.1 and ::1
#   python-asyncio-client, python-asyncio-server: the same with asyncio
#                   (epoll, emulated for rsockets by libuiwarp-rspreload.so)
#   epoll-edges     rspreload_epoll.c: one-shot, ADD/MOD/DEL errors, a
#                   kernel pipe beside rsockets, maxevents 1, closed rsockets
#   KNOWN: python-fork-server (an rsocket does not survive the parent's
#   close after fork)
#
# Every program records its uiwarp connections (UIWARP_PCAP) and the case
# passes only if `uiwarp dump` finds in the client's capture as many MPA
# (iWARP) connections as the program makes and at least the data moved as
# RDMA payload, with no violation: librspreload falls back to plain TCP when
# an rsocket cannot connect, and such a run must not pass.
#
# Exit status: 1 if a REQUIRED case failed, 77 if nothing could run, else 0.
# Environment: UIWARP_BUILD (default: ../../build), RDMACM_APPS_VERBOSE=1.
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../../build}
RUN=$BUILD/bin/uiwarp

# --check-capture FILE_GLOB CONNECTIONS MIN_PAYLOAD_BYTES: the proof that
# the traffic went over uiwarp (run by the client side of each case).
if [ "${1:-}" = --check-capture ]; then
    # shellcheck disable=SC2086 # $2 is a glob
    files=$(ls $2 2>/dev/null)
    if [ -z "$files" ]; then
        echo "capture check: no capture $2: the program made no uiwarp connection"
        exit 1
    fi
    # shellcheck disable=SC2086
    out=$("$RUN" dump -q $files 2>&1)
    tot=$(echo "$out" | grep '^== total' | tail -1)
    conns=$(echo "$tot" | sed -n 's/.* \([0-9]*\) iWARP connections.*/\1/p')
    bytes=$(echo "$tot" | sed -n 's/.* \([0-9]*\) payload bytes.*/\1/p')
    viol=$(echo "$out" | sed -n '/^== total/,$p' | sed -n 's/^ *violations: \([0-9]*\).*/\1/p' | tail -1)
    echo "capture check: $conns iWARP connections (want $3), $bytes RDMA payload bytes (want >= $4), violations ${viol:-?}"
    [ "${conns:-0}" -eq "$3" ] && [ "${bytes:-0}" -ge "$4" ] && [ "${viol:-1}" = 0 ]
    exit
fi

if [ ! -x "$RUN" ] || [ ! -e "$BUILD/lib/librdmacm.so.1" ] || [ ! -e "$BUILD/lib/libuiwarp-rspreload.so" ]; then
    echo "SKIP: uiwarp (bin/uiwarp, lib/librdmacm.so.1, lib/libuiwarp-rspreload.so) not found in $BUILD"
    exit 77
fi
if ldd "$BUILD/lib/libibverbs.so.1" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
    echo "SKIP: $BUILD/lib holds sanitizer builds, which the distribution's programs cannot load"
    exit 77
fi
RSP=$(ls /usr/lib/*/rsocket/librspreload.so /usr/lib64/rsocket/librspreload.so 2>/dev/null | head -1)
if [ -z "$RSP" ]; then
    echo "SKIP: rdma-core's librspreload.so (Debian: librdmacm1) not installed"
    exit 77
fi
PY=/usr/bin/python3

APPS_NAME=rspreload-apps
# shellcheck source=apps_common.sh
. "$here/apps_common.sh"

# The rsocket calls librspreload makes fail with perror-style messages, or
# Python tracebacks.
bad='Traceback|Error|error|mismatch|failed'
MiB16=$((16 << 20))
# run_case, and how long the case took
timed_case() {
    local t0
    t0=$(date +%s.%N)
    run_case "$@"
    awk -v n="$1" -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "       %s: %.1f s\n", n, b - a }'
}
check="bash $here/test_rspreload_apps.sh --check-capture"

# --- a Python socket server and client, 16 MiB each way, SHA-256 --------
if [ -x "$PY" ]; then
    port=$(free_port 4)
    timed_case python-sha256 REQUIRED "" 120 \
        "env UIWARP_PCAP=$tmp/py-s-%p.pcapng LD_PRELOAD=$RSP $RUN run $PY $here/rspreload_sha_server.py $port $MiB16" \
        "bash -c 'UIWARP_PCAP=$tmp/py-c-%p.pcapng $RUN run --rsockets $PY $here/rspreload_sha_client.py $port $MiB16 && $check \"$tmp/py-c-*.pcapng\" 1 $((2 * MiB16))'" \
        "$bad"
    # asyncio: event loops wait in epoll, which rdma-core 44's librspreload
    # does not intercept (epoll_ctl on its /dev/null placeholder: EPERM);
    # libuiwarp-rspreload.so keeps the rsockets of an epoll set itself and
    # waits on them with librspreload's poll (src/rdmacm/rspreload_compat.c).
    # An asyncio client against the plain server, then an asyncio server
    # (its listening socket in the loop too) against the plain client.
    port=$(free_port 4)
    timed_case python-asyncio-client REQUIRED "" 120 \
        "$RUN run --rsockets $PY $here/rspreload_sha_server.py $port $MiB16" \
        "bash -c 'UIWARP_PCAP=$tmp/pa-c-%p.pcapng $RUN run --rsockets $PY $here/rspreload_asyncio_client.py $port $MiB16 && $check \"$tmp/pa-c-*.pcapng\" 1 $((2 * MiB16))'" \
        "$bad"
    port=$(free_port 4)
    timed_case python-asyncio-server REQUIRED "" 120 \
        "$RUN run --rsockets $PY $here/rspreload_asyncio_server.py $port $MiB16" \
        "bash -c 'UIWARP_PCAP=$tmp/ps-c-%p.pcapng $RUN run --rsockets $PY $here/rspreload_sha_client.py $port $MiB16 && $check \"$tmp/ps-c-*.pcapng\" 1 $((2 * MiB16))'" \
        "$bad"
    # --- epoll's edges: one-shot, MOD/DEL errors, a kernel pipe beside ---
    if [ -x "$BUILD/bin/rspreload_epoll" ]; then
        # one program is both ends (no server of run_case's kind); it checks
        # itself that its sockets are rsockets (librspreload's /dev/null
        # placeholders: a TCP fallback fails it)
        port=$(free_port 4)
        out=$tmp/epoll-edges.out
        timeout -k 3 60 $RUN run --rsockets "$BUILD/bin/rspreload_epoll" "$port" >"$out" 2>&1
        rc=$?
        ok=0
        [ $rc = 0 ] && grep -q "rspreload_epoll: [0-9]* checks, 0 failed" "$out" && ! grep -v "^rspreload_epoll: " "$out" | grep -Eq "$bad|CHECK failed" && ok=1
        report epoll-edges REQUIRED "" "$ok" "rc=$rc" "$out" /dev/null
    else
        skip_case epoll-edges "rspreload_epoll not built"
    fi
    # KNOWN: a forking server (socketserver.ForkingTCPServer): after fork()
    # parent and child share uiwarp's TCP socket under the accepted rsocket
    # and its engine state; both read the socket (framing errors, a
    # Terminate) and the parent's close() of its copy ends the connection.
    # rdma-core's fork mode (RDMAV_FORK_SAFE=1) skips sockets made with
    # SOCK_CLOEXEC, as Python's are.
    port=$(free_port 4)
    timed_case python-fork-server KNOWN "fork(): parent and child share the rsocket's TCP socket and engine state (both read it; the parent's close ends it)" 15 \
        "$RUN run --rsockets $PY $here/rspreload_sha_server.py --fork $port $MiB16" \
        "$RUN run --rsockets $PY $here/rspreload_sha_client.py $port $MiB16" \
        "$bad"
else
    skip_case python-sha256 "$PY not installed"
fi

# --- iperf3 ---------------------------------------------------------------
# iperf3 makes a control connection and one per stream. Its JSON goes to
# $tmp/NAME.{s,c}.json; a capture of the first 32 MiB is enough to see
# every connection's MPA exchange and data.
iperf_case() { # NAME STREAMS CLIENT_ARGS...
    local name=$1 streams=$2
    shift 2
    port=$(free_port 4)
    timed_case "$name" REQUIRED "" 60 \
        "bash -c 'UIWARP_PCAP=$tmp/$name-s-%p.pcapng UIWARP_PCAP_MAX=32M $RUN run --rsockets iperf3 -s -1 -B 127.0.0.1 -p $port -J >$tmp/$name.s.json'" \
        "bash -c 'UIWARP_PCAP=$tmp/$name-c-%p.pcapng UIWARP_PCAP_MAX=32M $RUN run --rsockets iperf3 -c 127.0.0.1 -p $port -J $* >$tmp/$name.c.json && sleep 0.5 && $PY $here/rspreload_iperf_check.py $tmp/$name.c.json $tmp/$name.s.json && $check \"$tmp/$name-c-*.pcapng\" $((streams + 1)) $((1 << 20))'" \
        "$bad"
}
if command -v iperf3 >/dev/null && [ -x "$PY" ]; then
    iperf_case iperf3 1 -t 3
    iperf_case iperf3-reverse 1 -t 2 -R
    iperf_case iperf3-parallel 2 -t 2 -P 2
else
    skip_case iperf3 "iperf3 or $PY not installed"
fi

# --- python3 -m http.server and curl ------------------------------------
http_case() { # NAME BIND_ADDRESS URL_HOST
    local name=$1 addr=$2 host=$3
    port=$(free_port 4)
    mkdir -p "$tmp/www"
    head -c $MiB16 /dev/urandom >"$tmp/www/blob.bin"
    # the server never exits: the client side says when it is done
    timed_case "$name" REQUIRED "" 60 \
        "bash -c 'cd $tmp/www && UIWARP_PCAP=$tmp/$name-s-%p.pcapng $RUN run --rsockets $PY -m http.server $port --bind $addr & p=\$!; while [ ! -e $tmp/$name.done ]; do sleep 0.2; done; kill \$p; wait \$p; exit 0'" \
        "bash -c 'UIWARP_PCAP=$tmp/$name-c-%p.pcapng $RUN run --rsockets curl -sS -g --fail -o $tmp/got1.bin -o $tmp/got2.bin http://$host:$port/blob.bin http://$host:$port/blob.bin; rc=\$?; touch $tmp/$name.done; [ \$rc = 0 ] && cmp $tmp/www/blob.bin $tmp/got1.bin && cmp $tmp/www/blob.bin $tmp/got2.bin && sha256sum $tmp/www/blob.bin $tmp/got1.bin $tmp/got2.bin && $check \"$tmp/$name-c-*.pcapng\" 2 $((2 * MiB16))'" \
        "$bad|code 4|code 5"
    rm -rf "$tmp/www" "$tmp/got1.bin" "$tmp/got2.bin"
}
if command -v curl >/dev/null && [ -x "$PY" ]; then
    http_case http-curl 127.0.0.1 127.0.0.1
    if have_ipv6; then
        http_case http-curl-ipv6 ::1 '[::1]'
    else
        skip_case http-curl-ipv6 "no ::1"
    fi
else
    skip_case http-curl "curl or $PY not installed"
fi
rm -f "$tmp"/*.pcapng

finish "socket programs through librspreload"
