#!/usr/bin/env bash
# Install the Debian packages uiwarp needs, only those missing.
#   scripts/deps.sh [build|test|all|fresh]   (default: all)
# build: compile the library and the tool; test: also what the test suite
# and the fuzzers use; fresh: what scripts/fresh-check.sh needs on the host
# (debootstrap). Runs apt-get only when something is absent.
set -euo pipefail

want=${1:-all}
# libibverbs-dev, librdmacm-dev: rdma-core's headers define the ABIs the
# drop-in libraries implement (both are needed to build them).
pkgs=(build-essential cmake pkg-config libisal-dev libpcap-dev libibverbs-dev librdmacm-dev)
if [ "$want" = fresh ]; then
    pkgs=(debootstrap)
elif [ "$want" != build ]; then
    # clang + compiler-rt: libFuzzer targets; tshark: independent wire check;
    # python3: small test helpers.
    pkgs+=(clang libclang-rt-14-dev tshark python3)
    # The unmodified RDMA programs the drop-in libraries are tested with.
    pkgs+=(rdmacm-utils perftest ibverbs-utils qperf fio)
    # Socket programs over rsockets through rdma-core's librspreload.so
    # (librdmacm1, tests/rdmacm/test_rspreload_apps.sh): iperf3, curl.
    # iperf3 asks a debconf question (start a daemon?): noninteractive below.
    pkgs+=(librdmacm1 iperf3 curl)
    # libfabric and Open MPI over uiwarp (tests/rdmacm/test_libfabric_apps.sh):
    # fi_info/fi_pingpong, libfabric's headers for fabric/fi_check.c, mpirun
    # and mpicc; iproute2 (ip) finds the host's address.
    pkgs+=(libfabric1 libfabric-bin libfabric-dev openmpi-bin libopenmpi-dev iproute2)
    # the fault suites (tests/faults): network namespaces, veth, nftables.
    pkgs+=(nftables)
    # gdb: the backtrace of a program that crashed in an application test
    # (tests/rdmacm/apps_common.sh prints it from the core).
    pkgs+=(gdb)
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
