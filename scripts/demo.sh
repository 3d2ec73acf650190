#!/usr/bin/env bash
# The demo: build uiwarp, then check a real Linux siw capture with
# `uiwarp dump` (CRC-negotiated rping: Send, Read, Write, all CRCs verified).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh build
bash scripts/build.sh build
shared=${UIWARP_SHARED:-../shared}
exec build/bin/uiwarp dump "$shared/siw-peer/pcaps/rping-crc.pcap"
