#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# UIWARP_PCAP: capture from inside the library, no root and no dumpcap.
# The two-process engine run (tests/engine/test_twoproc.c --once: Send, RDMA
# Write, RDMA Read, atomics over one connection on 127.0.0.1) with
# UIWARP_PCAP=DIR/cap-%p.pcapng writes one pcapng file per process; each must
# pass `uiwarp dump` (exit 0, zero violations, no capture problems, one iWARP
# connection, every operation present, CRC as negotiated and every CRC
# good), both files must show the same FPDUs and bytes, and tshark (Wireshark's
# iWARP dissectors) must decode DDP/RDMAP in them without malformed frames
# (with the RPC-over-RDMA heuristic off: the test's Send payloads are not
# RPC, and that dissector flags them).
# Then: UIWARP_PCAP_MAX stops a capture at its limit with a valid file and one
# message; an unwritable UIWARP_PCAP is reported and the run still works.
set -u
BIN=${UIWARP_BIN:?UIWARP_BIN not set}
BUILD=${UIWARP_BUILD:?UIWARP_BUILD not set}
PROG=$BUILD/bin/test_twoproc
if [ ! -x "$PROG" ]; then
    echo "SKIP: $PROG not built"
    exit 0
fi
TMP=$(mktemp -d /tmp/uiw_test_pcap.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# checks, failed, ok, bad, expect (and wait_for, free_port, wait_listen)
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# summary FILE: "FPDUs payload-bytes" of the dump total line
summary() {
    sed -n 's/^== total .*iWARP connections*, \([0-9]*\) FPDUs, [0-9]* messages, \([0-9]*\) payload bytes.*/\1 \2/p' "$1"
}

pcap_run() { # NAME CRC
    local name=$1 crc=$2 d=$TMP/$1
    mkdir -p "$d"
    echo "--- $name: UIWARP_CRC=$crc"
    UIWARP_PCAP="$d/cap-%p.pcapng" UIWARP_CRC=$crc timeout 120 "$PROG" --once >"$d/prog.out" 2>&1
    local rc=$?
    expect "$name: two-process run passed (exit $rc)" [ $rc -eq 0 ]
    [ $rc -eq 0 ] || cat "$d/prog.out"
    local files
    files=$(ls "$d"/cap-*.pcapng 2>/dev/null)
    expect "$name: one capture per process (got $(echo "$files" | grep -c .))" \
        [ "$(echo "$files" | grep -c .)" = 2 ]
    local f sums=()
    for f in $files; do
        local b
        b=$(basename "$f")
        "$BIN" dump "$f" >"$f.dump" 2>&1
        rc=$?
        expect "$name/$b: uiwarp dump exit 0 (got $rc)" [ $rc -eq 0 ]
        local tot
        tot=$(sed -n '/^== total/,$p' "$f.dump")
        expect "$name/$b: violations 0" bash -c "echo \"\$1\" | grep -q '^   violations: 0$'" _ "$tot"
        expect "$name/$b: no capture problems (SYN, FIN, no gaps)" \
            bash -c "echo \"\$1\" | grep -q '^   capture problems: none'" _ "$tot"
        expect "$name/$b: one iWARP connection" \
            bash -c "echo \"\$1\" | grep -q ' 1 iWARP connections*,'" _ "$tot"
        local ops op
        ops=$(echo "$tot" | sed -n 's/^   opcodes: //p')
        for op in "Send" "RDMA Write" "RDMA Read Request" "RDMA Read Response" \
            "Atomic Request" "Atomic Response"; do
            expect "$name/$b: $op present" bash -c "echo \"\$1\" | grep -Eq '(^|, )$op [0-9]+'" _ "$ops"
        done
        local crcl good badc notneg
        crcl=$(echo "$tot" | sed -n 's/^   CRC: //p')
        good=$(echo "$crcl" | sed -n 's/^good \([0-9]*\),.*/\1/p')
        badc=$(echo "$crcl" | sed -n 's/.*bad \([0-9]*\),.*/\1/p')
        notneg=$(echo "$crcl" | sed -n 's/.*not negotiated \([0-9]*\).*/\1/p')
        expect "$name/$b: no bad CRC" [ "${badc:-x}" = 0 ]
        if [ "$crc" = required ]; then
            expect "$name/$b: every FPDU's CRC good (good ${good:-0})" \
                [ "${good:-0}" -gt 0 -a "${notneg:-x}" = 0 ]
        else
            expect "$name/$b: CRC not negotiated" grep -q 'negotiated: .*CRC off' "$f.dump"
        fi
        sums+=("$(summary "$f.dump")")
        if command -v tshark >/dev/null; then
            local n mal
            n=$(tshark --disable-protocol rpcordma -r "$f" -Y iwarp_ddp_rdmap 2>/dev/null | wc -l)
            mal=$(tshark --disable-protocol rpcordma -r "$f" -Y _ws.malformed 2>/dev/null | wc -l)
            expect "$name/$b: tshark decodes DDP/RDMAP ($n frames), none malformed ($mal)" \
                [ "$n" -gt 0 -a "$mal" = 0 ]
        fi
    done
    expect "$name: both processes captured the same FPDUs and bytes (${sums[*]})" \
        [ "${#sums[@]}" = 2 -a -n "${sums[0]:-}" -a "${sums[0]:-}" = "${sums[1]:-x}" ]
}

pcap_run nocrc optional
pcap_run crc required

# The size limit: the file stops growing at UIWARP_PCAP_MAX, stays readable.
d=$TMP/limit
mkdir -p "$d"
UIWARP_PCAP="$d/cap-%p.pcapng" UIWARP_PCAP_MAX=16k timeout 120 "$PROG" --once >"$d/prog.out" 2>&1
rc=$?
expect "limit: run passed with a tiny UIWARP_PCAP_MAX (exit $rc)" [ $rc -eq 0 ]
for f in "$d"/cap-*.pcapng; do
    sz=$(stat -c %s "$f")
    expect "limit: $(basename "$f") is $sz <= 16384 bytes" [ "$sz" -le 16384 -a "$sz" -gt 0 ]
    "$BIN" dump -q "$f" >"$f.dump" 2>&1
    expect "limit: $(basename "$f") still reads as pcapng (dump exit $?)" \
        grep -q '^== total' "$f.dump"
done
expect "limit: the stop is said once per process" \
    [ "$(grep -c 'UIWARP_PCAP: size limit' "$d/prog.out")" = 2 ]

# An unwritable path: said, and nothing else changes.
d=$TMP/nowrite
mkdir -p "$d"
UIWARP_PCAP=/nonexistent-dir/cap.pcapng timeout 120 "$PROG" --once >"$d/prog.out" 2>&1
rc=$?
expect "unwritable: run passed (exit $rc)" [ $rc -eq 0 ]
expect "unwritable: the reason is printed" grep -q 'UIWARP_PCAP: cannot write /nonexistent-dir/cap.pcapng' "$d/prog.out"

echo "test_pcap.sh: $checks checks, $failed failed"
[ $failed -eq 0 ]
