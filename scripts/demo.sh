#!/usr/bin/env bash
# The demo: build uiwarp, then
#  1. build/bin/uiwarp-demo: a server and a client process on this machine
#     doing RDMA over uiwarp (its libibverbs.so.1, TCP loopback): Send/Recv,
#     RDMA Write, RDMA Read, Fetch-and-Add and Compare-and-Swap with every
#     byte and value checked, then latency and bandwidth beside raw TCP
#     measured in the same run (about 20 s);
#  2. `uiwarp dump` on a real Linux siw capture (CRC-negotiated rping: Send,
#     Read, Write, every CRC verified).
# Fails if anything in either part is wrong.
#   scripts/demo.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
bash scripts/deps.sh build
bash scripts/build.sh "$dir"

echo
echo "=== 1. RDMA over uiwarp: $dir/bin/uiwarp-demo ==="
echo
"$dir"/bin/uiwarp-demo

shared=${UIWARP_SHARED:-../shared}
echo
echo "=== 2. A Linux siw capture checked by uiwarp dump: rping with CRC ==="
echo
exec "$dir"/bin/uiwarp dump "$shared/siw-peer/pcaps/rping-crc.pcap"
