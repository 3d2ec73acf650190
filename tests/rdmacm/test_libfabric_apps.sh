#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# libfabric 1.17 and Open MPI 4.1 from Debian (libfabric1, libfabric-bin,
# openmpi-bin, libopenmpi-dev) over uiwarp, as a user runs them: through
# `uiwarp run` (which puts uiwarp's libibverbs.so.1 and librdmacm.so.1
# first), with no environment variables, choosing nothing but the provider.
# Both ends run on this host; what reaches the verbs provider depends on
# the device layout of docs/APPS.md (the device serving loopback is a
# non-loopback interface's).
#
#   fi_info        -p verbs lists a uiw_ domain (FI_EP_MSG, iWARP);
#                  -p "verbs;ofi_rxm" lists FI_EP_RDM on it
#   fi_pingpong    verbs msg, verbs;ofi_rxm rdm (msg and tagged), all sizes,
#                  -c: every byte of every message checked; over 127.0.0.1,
#                  ::1 and the host's own address
#   fi_check       our libfabric program (tests/rdmacm/fabric/fi_check.c,
#                  built when libfabric-dev is installed): tagged messages,
#                  RMA write and read, atomics over verbs;ofi_rxm
#   mpi_check      our MPI program (tests/rdmacm/fabric/mpi_check.c, built
#                  here with mpicc): ping-pong 1 B .. 4 MiB, bandwidth,
#                  allreduce, every byte checked, with --mca pml cm
#                  --mca mtl ofi and the verbs;ofi_rxm provider
#   mpi_wide       our wider MPI program (tests/rdmacm/fabric/mpi_wide.c):
#                  4 ranks (every pair connected) and 2, point-to-point
#                  patterns, collectives 1 element .. 4 MiB, one-sided
#                  (osc pt2pt over the same path), every byte checked;
#                  what Open MPI 4.1 / libfabric 1.17 cannot do on any
#                  iWARP device is left out (docs/APPS.md)
#
# Programs that are not installed are skipped. Exit status: 1 if a REQUIRED
# case failed, 77 if nothing could run, else 0.
#
# Environment: UIWARP_BUILD (default: ../../build), RDMACM_APPS_VERBOSE=1
# prints the programs' output of failed KNOWN cases.
set -u

here=$(cd "$(dirname "$0")" && pwd)
BUILD=${UIWARP_BUILD:-$here/../../build}
RUN=$BUILD/bin/uiwarp
LIB=$BUILD/lib
if [ ! -x "$RUN" ] || [ ! -e "$LIB/librdmacm.so.1" ] || [ ! -e "$LIB/libibverbs.so.1" ]; then
    echo "SKIP: uiwarp (bin/uiwarp, lib/librdmacm.so.1, lib/libibverbs.so.1) not found in $BUILD"
    exit 77
fi
if grep -Eq 'lib(asan|tsan|ubsan)' <<<"$(ldd "$LIB/libibverbs.so.1" 2>/dev/null)"; then
    echo "SKIP: $LIB holds sanitizer builds, which the distribution's programs cannot load"
    exit 77
fi

# libfabric's verbs provider ignores the interface named lo (docs/APPS.md):
# without another interface with an address there is nothing to test.
if ! ip -o addr show scope global 2>/dev/null | awk '$2 != "lo" { f = 1 } END { exit !f }'; then
    echo "SKIP: no non-loopback interface with an address (libfabric's verbs provider skips lo)"
    exit 77
fi

APPS_NAME=libfabric-apps
# shellcheck source=apps_common.sh
. "$here/apps_common.sh"

RXM='verbs;ofi_rxm'
export RUN RXM

# ------------------------------------------------------------------------
# fi_info
# ------------------------------------------------------------------------
# fi_info_lists PROVIDER EP_TYPE: fi_info succeeds and lists a uiwarp
# domain for the endpoint type, and never uiw_lo (libfabric cannot use it).
fi_info_lists() {
    local out rc
    out=$("$RUN" run fi_info -p "$1" 2>&1)
    rc=$?
    echo "$out"
    [ $rc = 0 ] || return 1
    awk -v t="$2" '/domain: uiw_/ { d = 1 } d && $0 ~ "type: " t { f = 1 } /^provider:/ { d = 0 }
        END { exit !f }' <<<"$out" || { echo "no uiw_ domain with $2"; return 1; }
    grep -q 'domain: uiw_lo' <<<"$out" && { echo "uiw_lo listed"; return 1; }
    return 0
}
export -f fi_info_lists

if have fi_info; then
    run_one fi_info-verbs REQUIRED "" 30 "bash -c 'fi_info_lists verbs FI_EP_MSG'"
    run_one fi_info-verbs-rxm REQUIRED "" 30 "bash -c 'fi_info_lists \"\$RXM\" FI_EP_RDM'"
else
    skip_case fi_info "libfabric-bin not installed"
fi

# ------------------------------------------------------------------------
# fi_pingpong: -c checks every byte of every message; -S all: 1 B .. 8 MiB
# ------------------------------------------------------------------------
# The host's first non-loopback IPv4 address (the one another host would
# use), if any.
host_addr=$(ip -4 -o addr show scope global 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')

if have fi_pingpong; then
    pp() { # NAME PROVIDER EP_TYPE ITERATIONS ADDRESS [more options]
        local name=$1 p=$2 e=$3 n=$4 a=$5
        shift 5
        port=$(free_port 4)
        run_case "$name" REQUIRED "" 90 \
            "$RUN run fi_pingpong -p '$p' -e $e -B $port -c -I $n -S all $*" \
            "$RUN run fi_pingpong -p '$p' -e $e -P $port -c -I $n -S all $* $a" \
            'error|ret=-|terminated with signal'
    }
    pp fi_pingpong-verbs-msg verbs msg 10 127.0.0.1
    pp fi_pingpong-rxm-rdm "$RXM" rdm 10 127.0.0.1
    pp fi_pingpong-rxm-rdm-tagged "$RXM" rdm 5 127.0.0.1 -m tagged
    if have_ipv6; then
        pp fi_pingpong-verbs-msg-ipv6 verbs msg 3 ::1 -6
        pp fi_pingpong-rxm-rdm-ipv6 "$RXM" rdm 3 ::1 -6
    else
        skip_case fi_pingpong-ipv6 "no ::1"
    fi
    if [ -n "$host_addr" ]; then
        pp fi_pingpong-verbs-msg-hostaddr verbs msg 5 "$host_addr"
        pp fi_pingpong-rxm-rdm-hostaddr "$RXM" rdm 5 "$host_addr"
    else
        skip_case fi_pingpong-hostaddr "no non-loopback IPv4 address"
    fi
else
    skip_case fi_pingpong "libfabric-bin not installed"
fi

# ------------------------------------------------------------------------
# Our libfabric program: tagged, RMA write/read, atomics (verbs;ofi_rxm)
# ------------------------------------------------------------------------
if [ -x "$BUILD/bin/fi_check" ]; then
    run_one fi_check-rxm REQUIRED "" 90 "$RUN run $BUILD/bin/fi_check '$RXM'" 'FAIL'
else
    skip_case fi_check-rxm "not built (libfabric-dev not installed)"
fi

# ------------------------------------------------------------------------
# Open MPI, the cm PML over the ofi MTL, provider verbs;ofi_rxm
# ------------------------------------------------------------------------
if have mpirun && have mpicc; then
    if mpicc -std=gnu17 -O2 -Wall -Wextra -Werror -o "$tmp/mpi_check" \
        "$here/fabric/mpi_check.c" >"$tmp/mpicc.log" 2>&1; then
        mpi_opts=(--oversubscribe -np 2 --mca pml cm --mca mtl ofi
            --mca mtl_ofi_provider_include "$RXM" --mca mtl_base_verbose 100)
        # Open MPI refuses root without this flag (CI runs as root).
        [ "$(id -u)" = 0 ] && mpi_opts=(--allow-run-as-root "${mpi_opts[@]}")
        mpi_check() {
            local out rc
            out=$("$RUN" run mpirun "$@" 2>&1)
            rc=$?
            grep -v 'mca:base:select\|select:' <<<"$out"
            [ $rc = 0 ] || return 1
            # both ranks on a uiwarp domain of the verbs provider
            [ "$(grep -c 'mtl:ofi:provider: uiw_' <<<"$out")" = 2 ] ||
                { echo "the ofi MTL did not pick a uiwarp domain"; return 1; }
            grep -q '^OK: 0 mismatches' <<<"$out"
        }
        export -f mpi_check
        run_one mpi-mtl-ofi-rxm REQUIRED "" 120 \
            "bash -c 'mpi_check \"\$@\"' mpi_check ${mpi_opts[*]@Q} '$tmp/mpi_check'" \
            'FAIL|rank [01]:'
    else
        fail=$((fail + 1))
        failed_names+=(mpicc)
        echo "FAIL   mpicc (mpi_check.c does not compile)"
        show "$tmp/mpicc.log"
    fi
    # mpi_wide: what real MPI programs do, 4 ranks (all pairs) and 2. Left
    # out, as Open MPI 4.1.4 and libfabric 1.17 fail them on any iWARP
    # device, and the same way over libfabric's tcp;ofi_rxm forced onto the
    # same code (docs/APPS.md "Open MPI beyond ping-pong"):
    # - MPI_Ssend, and 3 ranks (whose MPI_Barrier sends synchronously):
    #   verbs gives iWARP no remote CQ data, so the ofi MTL uses the
    #   ofi_tag_1 tag layout, where a synchronous send never completes;
    # - MPI_Mprobe/MPI_Improbe of 16 KiB .. 128 KiB messages (rxm's SAR
    #   protocol): rxm's claim takes the first segment only (mpi_wide.c).
    # One-sided runs with --mca osc pt2pt, over the cm PML and so over
    # uiwarp: Debian disables pt2pt, and the osc rdma it picks instead on
    # one host runs over shared memory (btl vader), where
    # MPI_Compare_and_swap crashes without libfabric or uiwarp involved.
    if mpicc -std=gnu17 -O2 -Wall -Wextra -Werror -o "$tmp/mpi_wide" \
        "$here/fabric/mpi_wide.c" >"$tmp/mpicc-wide.log" 2>&1; then
        mpi_wide() { # NRANKS MPIRUN-OPTIONS... PROGRAM ARGS...
            local n=$1 out rc
            shift
            out=$("$RUN" run mpirun -np "$n" "$@" 2>&1)
            rc=$?
            grep -v 'mca:base:select\|select:' <<<"$out"
            [ $rc = 0 ] || return 1
            # every rank on a uiwarp domain of the verbs provider
            [ "$(grep -c 'mtl:ofi:provider: uiw_' <<<"$out")" = "$n" ] ||
                { echo "the ofi MTL did not pick a uiwarp domain on every rank"; return 1; }
            grep -q '^OK: 0 mismatches' <<<"$out"
        }
        export -f mpi_wide
        wide_opts=(--oversubscribe --mca pml cm --mca mtl ofi
            --mca mtl_ofi_provider_include "$RXM" --mca mtl_base_verbose 100
            --mca osc pt2pt)
        [ "$(id -u)" = 0 ] && wide_opts=(--allow-run-as-root "${wide_opts[@]}")
        run_one mpi-wide-4 REQUIRED "" 60 \
            "bash -c 'mpi_wide \"\$@\"' mpi_wide 4 ${wide_opts[*]@Q} '$tmp/mpi_wide' -r 5" \
            'FAIL|rank [0-9]+:'
        run_one mpi-wide-2 REQUIRED "" 60 \
            "bash -c 'mpi_wide \"\$@\"' mpi_wide 2 ${wide_opts[*]@Q} '$tmp/mpi_wide'" \
            'FAIL|rank [0-9]+:'
    else
        fail=$((fail + 1))
        failed_names+=(mpicc-wide)
        echo "FAIL   mpicc (mpi_wide.c does not compile)"
        show "$tmp/mpicc-wide.log"
    fi
else
    skip_case mpi-mtl-ofi-rxm "openmpi-bin / libopenmpi-dev not installed"
fi

finish "libfabric/MPI programs"
