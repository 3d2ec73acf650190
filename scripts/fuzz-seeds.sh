#!/usr/bin/env bash
# Seed the fuzz corpora from the reference captures:
#   scripts/fuzz-seeds.sh UIWARP_TOOL CORPUS_DIR [FUZZ_ENGINE_RX]
# fuzz_mpa gets every MPA Request/Reply frame, fuzz_rx every post-MPA FPDU
# stream (each prefixed by the one-byte configuration the target reads:
# bit 0 = CRC, bit 1 = markers), as `uiwarp dump --streams` extracts them.
# fuzz_engine_rx gets the same streams with its two configuration bytes
# and, given its binary, the valid streams it writes itself for its MRs
# (UIWARP_FUZZ_SEED_DIR, see fuzz/fuzz_engine_rx.c).
set -euo pipefail
tool=$1
out=$2
shared=${UIWARP_SHARED:-../shared}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
engine_rx=${3:-}
mkdir -p "$out/fuzz_mpa" "$out/fuzz_rx" "$out/fuzz_engine_rx"
i=0
for p in "$shared"/siw-peer/pcaps/*.pcap; do
    i=$((i + 1))
    mkdir -p "$tmp/$i"
    "$tool" dump -q --streams "$tmp/$i" "$p" >/dev/null || true
    for f in "$tmp/$i"/*-mpa.bin; do
        [ -e "$f" ] && cp "$f" "$out/fuzz_mpa/$i-$(basename "$f")"
    done
    for f in "$tmp/$i"/*-fpdu.bin; do
        [ -e "$f" ] || continue
        # CRC-negotiated captures have "crc" in their name.
        case "$p" in *crc*) cfg='\x01' ;; *) cfg='\x00' ;; esac
        { printf "$cfg"; head -c 65536 "$f"; } >"$out/fuzz_rx/$i-$(basename "$f")"
        { printf "$cfg\x00"; head -c 65536 "$f"; } >"$out/fuzz_engine_rx/$i-$(basename "$f")"
    done
done
if [ -n "$engine_rx" ] && [ -x "$engine_rx" ]; then
    mkdir -p "$tmp/none"
    UIWARP_FUZZ_SEED_DIR="$out/fuzz_engine_rx" "$engine_rx" -runs=0 "$tmp/none" >/dev/null 2>&1
fi
echo "fuzz seeds: $(ls "$out/fuzz_mpa" | wc -l) MPA frames, $(ls "$out/fuzz_rx" | wc -l) FPDU streams," \
    "$(ls "$out/fuzz_engine_rx" | wc -l) engine streams"
