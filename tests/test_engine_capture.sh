#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The engine's traffic on the wire: a two-process uiwarp run
# (tests/engine/test_twoproc.c --once: Send, RDMA Write, RDMA Read, atomics
# over one uiw_cm connection on 127.0.0.1) captured on lo with dumpcap, then
# checked by `uiwarp dump`: exit 0, zero violations, no capture problems,
# one iWARP connection, every operation present, CRC as negotiated.
# Runs: UIWARP_CRC=optional (no CRC), UIWARP_CRC=required (CRC on every
# FPDU), UIWARP_CRC=required + UIWARP_MARKERS=1.
#
# The server listens on port 0 and writes the port to a file; dumpcap starts
# with a filter on that port; only then is the client let go (--go-file).
# Capturing on lo needs root (or dumpcap's capabilities): if dumpcap cannot
# capture, the reason is printed and the test fails.
set -u
BIN=${UIWARP_BIN:?UIWARP_BIN not set}
BUILD=${UIWARP_BUILD:?UIWARP_BUILD not set}
PROG=$BUILD/bin/test_twoproc

if [ ! -x "$PROG" ]; then
    echo "FAIL $PROG missing"
    exit 1
fi
DUMPCAP=$(command -v dumpcap || true)
if [ -z "$DUMPCAP" ]; then
    echo "FAIL: dumpcap not found (scripts/deps.sh installs tshark, which brings it)"
    exit 1
fi

TMP=$(mktemp -d /tmp/uiw_test_ecap.XXXXXX)
cap_pid=
prog_pid=
cleanup() {
    [ -n "$cap_pid" ] && kill "$cap_pid" 2>/dev/null
    [ -n "$prog_pid" ] && kill "$prog_pid" 2>/dev/null
    [ -n "${KEEP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

# checks, failed, ok, bad, expect wait_for (and free_port, wait_listen)
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# probe_seen FILE PORT: send one UDP datagram to 127.0.0.1:PORT; true once
# FILE has grown past the size it first had (dumpcap writes its section and
# interface blocks at once, then packets, flushed about twice a second)
probe_seen() {
    local sz
    echo probe >"/dev/udp/127.0.0.1/$2" 2>/dev/null
    sz=$(stat -c %s "$1" 2>/dev/null || echo 0)
    [ "$sz" -gt 0 ] || return 1
    [ -n "$probe_first" ] || probe_first=$sz
    [ "$sz" -gt "$probe_first" ]
}

# capture_run NAME CRC MARKERS
capture_run() {
    local name=$1 crc=$2 markers=$3 d=$TMP/$1
    mkdir -p "$d"
    echo "--- $name: UIWARP_CRC=$crc UIWARP_MARKERS=$markers"
    UIWARP_CRC=$crc UIWARP_MARKERS=$markers timeout 120 "$PROG" --once \
        --port-file "$d/port" --go-file "$d/go" >"$d/prog.out" 2>&1 &
    prog_pid=$!
    if ! wait_for 30 test -s "$d/port"; then
        bad "$name: the server did not report its port"
        cat "$d/prog.out"
        kill $prog_pid 2>/dev/null
        wait $prog_pid 2>/dev/null
        prog_pid=
        return
    fi
    local port
    port=$(head -1 "$d/port")
    # UDP probes to the same port number (nobody listens; `uiwarp dump`
    # ignores non-TCP frames) show when the filter really captures: dumpcap
    # says "Capturing on" before, and on a fresh machine its first packets
    # arrive up to a second later (seen: an empty capture of the whole run).
    probe_first=
    "$DUMPCAP" -i lo -B 256 -s 0 -f "tcp port $port or (udp dst port $port)" \
        -w "$d/cap.pcapng" >"$d/dumpcap.out" 2>&1 &
    cap_pid=$!
    if ! wait_for 15 grep -q "^File: \|Capturing on" "$d/dumpcap.out" ||
        ! wait_for 15 probe_seen "$d/cap.pcapng" "$port" ||
        ! kill -0 $cap_pid 2>/dev/null; then
        bad "$name: dumpcap did not start capturing on lo, or no probe reached the file (uid $(id -u); root or CAP_NET_RAW needed):"
        sed 's/^/     /' "$d/dumpcap.out"
        touch "$d/go" # let the run finish
        wait $prog_pid 2>/dev/null
        prog_pid=
        kill $cap_pid 2>/dev/null
        wait $cap_pid 2>/dev/null
        cap_pid=
        return
    fi
    touch "$d/go"
    wait $prog_pid
    local rc=$?
    prog_pid=
    expect "$name: two-process run passed (exit $rc)" [ $rc -eq 0 ]
    [ $rc -eq 0 ] || cat "$d/prog.out"
    sleep 0.5
    kill -INT $cap_pid
    wait $cap_pid
    cap_pid=
    expect "$name: capture written" test -s "$d/cap.pcapng"

    "$BIN" dump "$d/cap.pcapng" >"$d/dump.out" 2>"$d/dump.err"
    rc=$?
    expect "$name: uiwarp dump exit 0 (got $rc)" [ $rc -eq 0 ]
    local tot
    tot=$(sed -n '/^== total/,$p' "$d/dump.out")
    local v
    v=$(echo "$tot" | sed -n 's/^   violations: \([0-9]*\).*/\1/p')
    expect "$name: violations = 0 (got ${v:-none})" [ "${v:-x}" = 0 ]
    expect "$name: no violation lines" bash -c "! grep -q '^ *! ' '$d/dump.out'"
    expect "$name: no capture problems" bash -c "echo \"\$1\" | grep -q '^   capture problems: none'" _ "$tot"
    expect "$name: one iWARP connection" bash -c "echo \"\$1\" | grep -q ' 1 iWARP connections*,'" _ "$tot"
    local ops
    ops=$(echo "$tot" | sed -n 's/^   opcodes: //p')
    local op
    for op in "Send" "RDMA Write" "RDMA Read Request" "RDMA Read Response" "Atomic Request" \
        "Atomic Response"; do
        expect "$name: $op in the capture" bash -c "echo \"\$1\" | grep -Eq '(^|, )$op [0-9]+'" _ "$ops"
    done
    expect "$name: no Terminate" bash -c "! echo \"\$1\" | grep -q Terminate" _ "$ops"
    # 100 pipelined FetchAdds + 2 CmpSwaps, each answered
    local areq aresp
    areq=$(echo "$ops" | sed -n 's/.*Atomic Request \([0-9]*\).*/\1/p')
    aresp=$(echo "$ops" | sed -n 's/.*Atomic Response \([0-9]*\).*/\1/p')
    expect "$name: 102 Atomic Requests and Responses (got ${areq:-0}/${aresp:-0})" \
        [ "${areq:-0}" = 102 -a "${aresp:-0}" = 102 ]
    local crcl good badc notneg
    crcl=$(echo "$tot" | sed -n 's/^   CRC: //p')
    good=$(echo "$crcl" | sed -n 's/^good \([0-9]*\),.*/\1/p')
    badc=$(echo "$crcl" | sed -n 's/.*bad \([0-9]*\),.*/\1/p')
    notneg=$(echo "$crcl" | sed -n 's/.*not negotiated \([0-9]*\).*/\1/p')
    expect "$name: no bad CRC (got ${badc:-none})" [ "${badc:-x}" = 0 ]
    if [ "$crc" = required ]; then
        expect "$name: CRC negotiated" grep -q 'negotiated: .*CRC on' "$d/dump.out"
        expect "$name: every FPDU with a good CRC (good ${good:-0}, not negotiated ${notneg:-?})" \
            [ "${good:-0}" -gt 0 -a "${notneg:-x}" = 0 ]
    else
        expect "$name: CRC not negotiated" grep -q 'negotiated: .*CRC off' "$d/dump.out"
        expect "$name: no FPDU with CRC (good ${good:-?}, not negotiated ${notneg:-0})" \
            [ "${good:-x}" = 0 -a "${notneg:-0}" -gt 0 ]
    fi
    if [ "$markers" = 1 ]; then
        expect "$name: markers negotiated" grep -q 'negotiated: .*markers a>b on b>a on' "$d/dump.out"
    fi
    if [ $failed -gt 0 ]; then
        echo "     dump summary:"
        echo "$tot" | sed 's/^/     /'
    fi
}

capture_run nocrc optional 0
capture_run crc required 0
capture_run crc-markers required 1

echo "test_engine_capture.sh: $checks checks, $failed failed"
[ $failed -eq 0 ]
