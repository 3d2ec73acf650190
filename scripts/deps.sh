#!/usr/bin/env bash
# Install the Debian packages uiwarp needs, only those missing.
#   scripts/deps.sh [build|test|all]   (default: all)
# build: compile the library and the tool; test: also what the test suite
# and the fuzzers use. Runs apt-get only when something is absent.
set -euo pipefail

want=${1:-all}
# libibverbs-dev: rdma-core's headers define the ABI the engine implements.
pkgs=(build-essential cmake pkg-config libisal-dev libpcap-dev libibverbs-dev)
if [ "$want" != build ]; then
    # clang + compiler-rt: libFuzzer targets; tshark: independent wire check;
    # python3: small test helpers.
    pkgs+=(clang libclang-rt-14-dev tshark python3)
    # librdmacm-dev: the rdma_cm ABI; the rest are the unmodified RDMA
    # programs the drop-in libraries are tested with.
    pkgs+=(librdmacm-dev rdmacm-utils perftest ibverbs-utils qperf fio)
    # the fault suites (tests/faults): network namespaces, veth, nftables.
    pkgs+=(iproute2 nftables)
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "deps: need root (or sudo) for apt-get" >&2; exit 1; }
    SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
