#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# `uiwarp dump` against the reference siw captures:
#  - every capture: exit 0, zero violations, FPDU opcode sequence per
#    direction, MPA Request/Reply fields and CRC verdicts equal to the
#    tshark decode next to it (siw-pcap-decode .txt);
#  - a CRC-negotiated capture with one payload byte flipped: exit 1, CRC
#    violation;
#  - a capture with one TCP segment duplicated and two swapped: still clean
#    and still equal to the tshark decode;
#  - FPDU/TCP segment alignment: per direction and in the total, N = the
#    FPDUs, A = N where siw sent the segments (FPDU by FPDU), no fpdu-split
#    warning; the same figures with a duplicated and two swapped segments;
#  - -q prints only the summaries; --strict / --no-lenient turn the siw pad
#    quirk into a violation; --streams writes the MPA frame and FPDU stream;
#  - usage and read errors exit 2.
# Skipped (exit 77, ctest SKIP_RETURN_CODE) when the reference folder with
# the captures is not beside the checkout.
set -u
BIN=${UIWARP_BIN:?UIWARP_BIN not set}
SHARED=${UIWARP_SHARED:?UIWARP_SHARED not set}
SRC=${UIWARP_SRC:-$(cd "$(dirname "$0")/.." && pwd)}
TOOLS="$SRC/tests/dump_tools.py"
PCAPS="$SHARED/siw-peer/pcaps"
if [ ! -d "$PCAPS" ]; then
    echo "SKIP: no reference captures: $PCAPS is absent (the reference folder ../shared, or UIWARP_SHARED)"
    exit 77
fi
TMP=$(mktemp -d /tmp/uiw_test_dump.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# checks, failed, ok, bad, expect (and wait_for, free_port, wait_listen)
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

shopt -s nullglob
pcaps=("$PCAPS"/*.pcap)
[ ${#pcaps[@]} -gt 0 ] || { echo "no captures in $PCAPS"; exit 1; }

# python starts slowly here: batch the helper's work ("CMD ARGS -- CMD ARGS").
# compare_results FILE: check every "@@ compare OUT" block of a batch run.
compare_results() {
    local name=
    while IFS= read -r line; do
        case $line in
        "@@ compare "*) name=$(basename "${line#@@ compare }" .out) ;;
        compared:*OK) ok "$name: matches tshark (${line#compared: })" ;;
        compared:*) bad "$name: differs from tshark" ;;
        MISMATCH*) echo "     $line" ;;
        "  "*) echo "     $line" ;;
        esac
    done <"$1"
}

# Corrupted and reordered copies, prepared in one run.
prep=()
for b in rping-crc crc-ib_write_bw; do
    [ -f "$PCAPS/$b.pcap" ] && prep+=(-- flip "$PCAPS/$b.pcap" "$TMP/$b-flip.pcap")
done
for b in vm2vm-rping-client-nic rping-p2p default-large-ib_send_bw; do
    [ -f "$PCAPS/$b.pcap" ] && prep+=(-- reorder "$PCAPS/$b.pcap" "$TMP/$b-reo.pcap")
done
python3 "$TOOLS" "${prep[@]:1}" >"$TMP/prep.out"
expect "helper prepared the corrupted/reordered copies" [ $? -eq 0 ]
# result of the prep command for file $1: the line after its "@@" line
prepared() { sed -n "\|^@@ [a-z]* $1\$|{n;p;q}" "$TMP/prep.out"; }

# 1. every reference capture: clean, and equal to the tshark decode
cmpargs=()
for p in "${pcaps[@]}"; do
    b=$(basename "$p" .pcap)
    "$BIN" dump "$p" >"$TMP/$b.out" 2>"$TMP/$b.err"
    rc=$?
    expect "$b: exit 0 (got $rc)" [ $rc -eq 0 ]
    expect "$b: zero violations" grep -q '^== total .*' "$TMP/$b.out"
    v=$(sed -n '/^== total/,$p' "$TMP/$b.out" | sed -n 's/^   violations: \([0-9]*\).*/\1/p')
    expect "$b: total violations = 0 (got ${v:-none})" [ "${v:-x}" = 0 ]
    expect "$b: no violation lines" bash -c "! grep -q '^ *! ' '$TMP/$b.out'"
    expect "$b: at least one FPDU" grep -q ' FPDUs, ' "$TMP/$b.out"
    # segment alignment: the total's N is every FPDU, the directions add up
    nf=$(sed -n 's/^== total .* \([0-9]*\) FPDUs, .*/\1/p' "$TMP/$b.out")
    al=$(sed -n '/^== total/,$p' "$TMP/$b.out" |
        sed -n 's/^   segment alignment: \([0-9]*\) of \([0-9]*\) FPDUs start a TCP segment$/\1 \2/p')
    dsum=$(sed -n 's/^   [ab]>[ab] segment alignment: \([0-9]*\) of \([0-9]*\) FPDUs start a TCP segment.*/\1 \2/p' \
        "$TMP/$b.out" | awk '{a += $1; n += $2} END {print a + 0, n + 0}')
    expect "$b: segment alignment of all $nf FPDUs in the total (got '${al:-none}')" [ "${al#* }" = "$nf" ]
    expect "$b: per-direction alignment adds up to the total ($dsum)" [ "$dsum" = "$al" ]
    expect "$b: no warning" grep -q '^   warnings: none$' <(sed -n '/^== total/,$p' "$TMP/$b.out")
    case $b in
    vm2vm-rping-client-nic)
        # b>a is re-segmented by QEMU's user-mode network (1440-byte
        # segments) before this capture: its 1456-byte FPDUs do not fit
        expect "$b: b>a 14 of 18 FPDUs start a segment (slirp's segments)" \
            grep -q '^   b>a segment alignment: 14 of 18 FPDUs start a TCP segment, largest segment payload 1440 bytes$' "$TMP/$b.out"
        expect "$b: a>b (siw) 15 of 15" grep -q '^   a>b segment alignment: 15 of 15 FPDUs' "$TMP/$b.out" ;;
    *)
        expect "$b: siw sends FPDU by FPDU: $nf of $nf start a TCP segment (got '${al:-none}')" \
            [ "$al" = "$nf $nf" ] ;;
    esac
    if [ -f "$PCAPS/$b.txt" ]; then
        cmpargs+=(-- compare "$TMP/$b.out" "$PCAPS/$b.txt")
    else
        bad "$b: no tshark decode next to it"
    fi
    # -q: the summaries only
    "$BIN" dump -q "$p" >"$TMP/$b.q"
    rc=$?
    expect "$b -q: exit 0" [ $rc -eq 0 ]
    expect "$b -q: no FPDU or MPA lines" bash -c "! grep -Eq '^ *[0-9]+ +[0-9]+\.[0-9]+ c[0-9]+ ' '$TMP/$b.q'"
    expect "$b -q: has the summaries" grep -q '^== total' "$TMP/$b.q"
    expect "$b -q: summary equals the full run's" \
        cmp -s <(sed -n '/^== /,$p' "$TMP/$b.q") <(sed -n '/^== /,$p' "$TMP/$b.out")
done

python3 "$TOOLS" "${cmpargs[@]:1}" >"$TMP/cmp.out"
compare_results "$TMP/cmp.out"

# 2. one flipped payload byte in CRC-negotiated captures
for b in rping-crc crc-ib_write_bw; do
    [ -f "$PCAPS/$b.pcap" ] || continue
    frame=$(prepared "$PCAPS/$b.pcap")
    "$BIN" dump "$TMP/$b-flip.pcap" >"$TMP/$b-flip.out"
    rc=$?
    expect "$b with a flipped byte (frame $frame): exit 1 (got $rc)" [ $rc -eq 1 ]
    expect "$b flipped: CRC violation reported" grep -q '^ *! crc: ' "$TMP/$b-flip.out"
    expect "$b flipped: the bad FPDU is in frame $frame" \
        grep -Eq "^ *$frame +[0-9.]+ c[0-9]+ .*crc=BAD" "$TMP/$b-flip.out"
    expect "$b flipped: total counts crc 1" grep -q '^   violations: 1 (crc 1)' \
        <(sed -n '/^== total/,$p' "$TMP/$b-flip.out")
    expect "$b flipped: decoding goes on after the bad FPDU" \
        bash -c "sed -n '/crc=BAD/,\$p' '$TMP/$b-flip.out' | grep -q 'crc=good'"
    "$BIN" dump -q "$TMP/$b-flip.pcap" >/dev/null
    expect "$b flipped -q: exit 1" [ $? -eq 1 ]
done

# 3. a duplicated and two swapped TCP segments: still clean, same decode
reo=()
for b in vm2vm-rping-client-nic rping-p2p default-large-ib_send_bw; do
    [ -f "$PCAPS/$b.pcap" ] || continue
    what=$(prepared "$PCAPS/$b.pcap")
    "$BIN" dump "$TMP/$b-reo.pcap" >"$TMP/$b-reo.out"
    rc=$?
    expect "$b ($what): exit 0 (got $rc)" [ $rc -eq 0 ]
    expect "$b reordered: no capture problem" grep -q '^   capture problems: none' \
        <(sed -n '/^== total/,$p' "$TMP/$b-reo.out")
    expect "$b reordered: out-of-order segment seen" \
        grep -Eq 'out-of-order segments [1-9]' "$TMP/$b-reo.out"
    expect "$b reordered: retransmitted bytes trimmed" \
        grep -Eq 'retransmitted/overlapping bytes [1-9]' "$TMP/$b-reo.out"
    expect "$b reordered: segment alignment as in the original capture (nothing counted twice)" \
        cmp -s <(grep 'segment alignment:' "$TMP/$b-reo.out") <(grep 'segment alignment:' "$TMP/$b.out")
    reo+=(-- compare "$TMP/$b-reo.out" "$PCAPS/$b.txt")
done
# ... still equal to the tshark decode; and the comparison must be able to
# fail (rping-default's output against rping-p2p's decode).
reo+=(-- compare "$TMP/rping-default.out" "$PCAPS/rping-p2p.txt")
python3 "$TOOLS" "${reo[@]:1}" >"$TMP/cmp2.out"
sed -n '1,/^@@ compare .*rping-default.out/p' "$TMP/cmp2.out" | sed '$d' >"$TMP/cmp2a.out"
compare_results "$TMP/cmp2a.out"
if sed -n '/^@@ compare .*rping-default.out/,$p' "$TMP/cmp2.out" | grep -q '^compared:.*FAILED'; then
    ok "compare detects a mismatch (rping-default vs rping-p2p decode)"
else
    bad "compare detects a mismatch (rping-default vs rping-p2p decode)"
fi

# 4. leniency switches (siw sends non-zero pad on short FPDUs in perftest)
p="$PCAPS/default-ib_send_bw.pcap"
if [ -f "$p" ]; then
    "$BIN" dump -q "$p" >"$TMP/len.out"
    expect "lenient default: exit 0" [ $? -eq 0 ]
    expect "lenient default: siw-pad counted as tolerated" \
        grep -Eq 'tolerated: .*siw-pad [1-9]' "$TMP/len.out"
    "$BIN" dump -q --strict "$p" >"$TMP/strict.out"
    expect "--strict: exit 1" [ $? -eq 1 ]
    expect "--strict: pad violations" grep -Eq 'violations: [1-9].*pad [1-9]' "$TMP/strict.out"
    "$BIN" dump --no-lenient=siw-pad "$p" >"$TMP/nolen.out"
    expect "--no-lenient=siw-pad: exit 1" [ $? -eq 1 ]
    expect "--no-lenient=siw-pad: names the quirk" grep -q '! pad \[siw-pad not tolerated\]' "$TMP/nolen.out"
    "$BIN" dump -q --strict --lenient=siw-pad "$p" >/dev/null
    expect "--strict --lenient=siw-pad: exit 0" [ $? -eq 0 ]
    "$BIN" dump -q --no-lenient=siw-term-layout,siw-mpa-gso "$p" >/dev/null
    expect "--no-lenient on quirks that do not occur: exit 0" [ $? -eq 0 ]
fi

# 5. --streams
p="$PCAPS/rping-p2p.pcap"
if [ -f "$p" ]; then
    "$BIN" dump -q --streams "$TMP/streams" "$p" >"$TMP/streams.out"
    expect "--streams: exit 0" [ $? -eq 0 ]
    for f in c1-ab-mpa.bin c1-ba-mpa.bin c1-ab-fpdu.bin c1-ba-fpdu.bin; do
        expect "--streams: $f written" [ -s "$TMP/streams/$f" ]
    done
    expect "--streams: request frame" cmp -s <(head -c 16 "$TMP/streams/c1-ab-mpa.bin") <(printf 'MPA ID Req Frame')
    expect "--streams: reply frame" cmp -s <(head -c 16 "$TMP/streams/c1-ba-mpa.bin") <(printf 'MPA ID Rep Frame')
    expect "--streams: 24-byte MPA frames" [ "$(stat -c %s "$TMP/streams/c1-ab-mpa.bin")" = 24 ]
    sb=$(sed -n 's/^   a>b: .*, \([0-9]*\) stream bytes.*/\1/p' "$TMP/streams.out")
    expect "--streams: a>b FPDU stream is $sb bytes" [ "$(stat -c %s "$TMP/streams/c1-ab-fpdu.bin")" = "$sb" ]
    # the RTR (zero-length Write, 14-byte ULPDU) opens the initiator's FPDU stream
    expect "--streams: FPDU stream starts with the RTR" \
        cmp -s <(head -c 4 "$TMP/streams/c1-ab-fpdu.bin") <(printf '\x00\x0e\xc1\x40')
fi

# 6. several files: per-file totals and a grand total; exit codes
"$BIN" dump -q "$PCAPS/rping-default.pcap" "$PCAPS/rping-p2p.pcap" >"$TMP/multi.out"
expect "two files: exit 0" [ $? -eq 0 ]
expect "two files: grand total" grep -q '^== total (2 files)' "$TMP/multi.out"
expect "two files: distinct connection numbers" grep -q '^== c2 ' "$TMP/multi.out"
"$BIN" dump -q "$TMP/flip-does-not-exist.pcap" >/dev/null 2>&1
expect "missing file: exit 2" [ $? -eq 2 ]
"$BIN" dump >/dev/null 2>&1
expect "no file: exit 2" [ $? -eq 2 ]
"$BIN" dump --bogus "$PCAPS/rping-p2p.pcap" >/dev/null 2>&1
expect "bad option: exit 2" [ $? -eq 2 ]
"$BIN" dump --no-lenient=nosuchquirk "$PCAPS/rping-p2p.pcap" >/dev/null 2>&1
expect "unknown quirk: exit 2" [ $? -eq 2 ]
printf 'not a capture' >"$TMP/garbage.pcap"
"$BIN" dump "$TMP/garbage.pcap" >/dev/null 2>&1
expect "unreadable file: exit 2" [ $? -eq 2 ]
"$BIN" dump --help >"$TMP/help.out"
expect "dump --help: exit 0" [ $? -eq 0 ]
for w in --quiet --strict --no-lenient --streams siw-pad siw-term-layout siw-mpa-gso 'exit status' \
    fpdu-split 'segment alignment'; do
    expect "dump --help mentions $w" grep -q -- "$w" "$TMP/help.out"
done
"$BIN" --help | grep -q dump
expect "uiwarp --help lists dump" [ $? -eq 0 ]

echo "$0: $checks checks, $failed failed"
[ $failed -eq 0 ]
