#!/usr/bin/env bash
# Seed the fuzz corpora:
#   scripts/fuzz-seeds.sh UIWARP_TOOL CORPUS_DIR [FUZZ_ENGINE_RX]
# Always: the corpus committed in fuzz/corpus/NAME/ (our own traffic, see
# --generate below). Then, when the reference folder is there
# (UIWARP_SHARED, else ../shared), the siw captures in siw-peer/pcaps:
# fuzz_mpa gets every MPA Request/Reply frame, fuzz_rx every post-MPA FPDU
# stream (each prefixed by the one-byte configuration the target reads:
# bit 0 = CRC, bit 1 = markers), as `uiwarp dump --streams` extracts them.
# fuzz_engine_rx gets the same streams with its two configuration bytes
# and, given its binary, the valid streams it writes itself for its MRs
# (UIWARP_FUZZ_SEED_DIR, see fuzz/fuzz_engine_rx.c).
#
#   scripts/fuzz-seeds.sh --generate BUILD_DIR
# rewrites fuzz/corpus/ from uiwarp's own traffic: BUILD_DIR/bin/test_twoproc
# --once (Send, Write, Read, atomics on 127.0.0.1) captured with UIWARP_PCAP
# without CRC, with CRC, and with CRC and markers; each stream is cut to
# $seed_max bytes so that the committed corpus stays small.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
seed_max=6144
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# add_streams DIR CFG TAG OUT: the MPA frames and FPDU streams of
# `uiwarp dump --streams` output DIR into OUT/fuzz_*, FPDU streams cut to
# LIMIT bytes (env, default 65536) and prefixed by configuration byte CFG.
add_streams() {
    local d=$1 cfg=$2 tag=$3 out=$4 f
    for f in "$d"/*-mpa.bin; do
        [ -e "$f" ] && cp "$f" "$out/fuzz_mpa/$tag-$(basename "$f")"
    done
    for f in "$d"/*-fpdu.bin; do
        [ -e "$f" ] || continue
        { printf "$cfg"; head -c "${LIMIT:-65536}" "$f"; } >"$out/fuzz_rx/$tag-$(basename "$f")"
        { printf "$cfg\x00"; head -c "${LIMIT:-65536}" "$f"; } >"$out/fuzz_engine_rx/$tag-$(basename "$f")"
    done
}

if [ "${1:-}" = --generate ]; then
    build=${2:?usage: scripts/fuzz-seeds.sh --generate BUILD_DIR}
    out=$repo/fuzz/corpus
    rm -rf "$out"
    mkdir -p "$out/fuzz_mpa" "$out/fuzz_rx" "$out/fuzz_engine_rx"
    # name UIWARP_CRC UIWARP_MARKERS configuration-byte
    for run in "nocrc optional 0 \x00" "crc required 0 \x01" "crcmark required 1 \x03"; do
        set -- $run
        mkdir -p "$tmp/$1/s"
        UIWARP_PCAP="$tmp/$1/cap-%p.pcapng" UIWARP_CRC=$2 UIWARP_MARKERS=$3 \
            timeout 120 "$build/bin/test_twoproc" --once >"$tmp/$1/out" 2>&1 ||
            { cat "$tmp/$1/out"; exit 1; }
        # both processes capture the same connection: one file is enough
        "$build/bin/uiwarp" dump -q --streams "$tmp/$1/s" "$(ls "$tmp/$1"/cap-*.pcapng | head -1)" >/dev/null
        LIMIT=$seed_max add_streams "$tmp/$1/s" "$4" "$1" "$out"
    done
    echo "fuzz/corpus: $(find "$out" -type f | wc -l) files, $(du -sk "$out" | cut -f1) KiB"
    exit 0
fi

tool=$1
out=$2
shared=${UIWARP_SHARED:-$repo/../shared}
engine_rx=${3:-}
mkdir -p "$out/fuzz_mpa" "$out/fuzz_rx" "$out/fuzz_engine_rx"
for t in fuzz_mpa fuzz_rx fuzz_engine_rx; do
    cp "$repo/fuzz/corpus/$t"/* "$out/$t/"
done
i=0
for p in "$shared"/siw-peer/pcaps/*.pcap; do
    [ -e "$p" ] || { echo "fuzz seeds: no reference captures in $shared/siw-peer/pcaps (in-repo corpus only)"; break; }
    i=$((i + 1))
    mkdir -p "$tmp/$i"
    "$tool" dump -q --streams "$tmp/$i" "$p" >/dev/null || true
    # CRC-negotiated captures have "crc" in their name.
    case "$p" in *crc*) cfg='\x01' ;; *) cfg='\x00' ;; esac
    add_streams "$tmp/$i" "$cfg" "$i" "$out"
done
if [ -n "$engine_rx" ] && [ -x "$engine_rx" ]; then
    mkdir -p "$tmp/none"
    UIWARP_FUZZ_SEED_DIR="$out/fuzz_engine_rx" "$engine_rx" -runs=0 "$tmp/none" >/dev/null 2>&1
fi
echo "fuzz seeds: $(ls "$out/fuzz_mpa" | wc -l) MPA frames, $(ls "$out/fuzz_rx" | wc -l) FPDU streams," \
    "$(ls "$out/fuzz_engine_rx" | wc -l) engine streams"
