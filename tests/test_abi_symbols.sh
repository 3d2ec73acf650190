#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# ABI check of uiwarp's drop-in libibverbs.so.1 against Debian's
# (rdma-core 44):
#  1. every IBVERBS_* symbol@version that Debian's RDMA programs and
#     libraries import (perftest, rping, ucmatose, rdma_*, qperf,
#     ibv_devinfo, fio, ...) is exported by ours at that version, and the
#     dynamic loader agrees (ldd -r with LD_LIBRARY_PATH=<build>/lib);
#  2. our public export set equals Debian's, name by name and version by
#     version, default (@@) and compat (@) alike, with the same version
#     nodes and parents; Debian's IBVERBS_PRIVATE_34 (the provider
#     interface) is listed as a deliberate omission, except what a real
#     program imports (ibv_query_gid_type, for ibv_devinfo).
# Environment: UIWARP_BUILD (build dir; default: build next to the sources).
set -u

here=$(cd "$(dirname "$0")" && pwd)
build=${UIWARP_BUILD:-$here/../build}
ours=$build/lib/libibverbs.so.1
debian=${UIWARP_DEBIAN_LIBIBVERBS:-/usr/lib/x86_64-linux-gnu/libibverbs.so.1}
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

say() { printf '%s\n' "$*"; }
bad() {
    say "FAIL: $*"
    fail=1
}

if ! command -v readelf >/dev/null; then
    say "SKIP: readelf not installed"
    exit 0
fi
if [ ! -e "$ours" ]; then
    say "FAIL: $ours not built"
    exit 1
fi

# Defined symbols with a version: "name@VER" (compat) or "name@@VER" (default).
exports() {
    readelf --dyn-syms --wide "$1" | awk '$7 != "UND" && $8 ~ /@/ { print $8 }' | sort -u
}
# Version definitions with their parents: "NAME" or "NAME<PARENT".
verdefs() {
    readelf -V --wide "$1" | sed -n '/Version definition/,/Version needs/p' | awk '
        /Flags: BASE/ { next }
        /Name:/ { if (n != "") print n; n = $NF }
        /Parent 1:/ { n = n "<" $NF }
        END { if (n != "") print n }'
}
# IBVERBS_* imports of a binary: "name@VER".
imports() {
    readelf --dyn-syms --wide "$1" | awk '$7 == "UND" && $8 ~ /@IBVERBS_/ { print $8 }' | sort -u
}

exports "$ours" >"$tmp/ours"
# a versioned reference binds to a default or a compat definition alike
sed 's/@@/@/' "$tmp/ours" | sort -u >"$tmp/ours.any"

# --- 0. SONAME ------------------------------------------------------------
soname=$(readelf -d "$ours" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libibverbs.so.1 ] || bad "SONAME is '$soname', want libibverbs.so.1"

# --- 1. what Debian's consumers import ------------------------------------
consumers="ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat
ib_atomic_lat raw_ethernet_bw raw_ethernet_lat raw_ethernet_burst_lat raw_ethernet_fs_rate rping
ucmatose udaddy mckey cmtime rdma_server rdma_client rdma_xserver rdma_xclient riostream rstream
rcopy qperf ibv_devinfo ibv_devices ibv_asyncwatch ibv_rc_pingpong ibv_srq_pingpong
ibv_uc_pingpong ibv_ud_pingpong ibv_xsrq_pingpong fio"
paths=""
for b in $consumers; do
    p=/usr/bin/$b
    [ -x "$p" ] || p=$(command -v "$b" 2>/dev/null || true)
    if [ -z "$p" ] || [ ! -e "$p" ]; then
        say "SKIP: $b not installed"
        continue
    fi
    paths="$paths $p"
done
# fio's RDMA engine when it is a plugin; librdmacm (when Debian's is loaded)
for p in /usr/lib/x86_64-linux-gnu/fio/fio-rdma.so /usr/lib/x86_64-linux-gnu/librdmacm.so.1; do
    [ -e "$p" ] && paths="$paths $p"
done

nbin=0
for p in $paths; do
    nbin=$((nbin + 1))
    imports "$p" >"$tmp/imp"
    n=$(wc -l <"$tmp/imp")
    comm -23 "$tmp/imp" "$tmp/ours.any" >"$tmp/missing"
    if [ -s "$tmp/missing" ]; then
        bad "$p imports $(wc -l <"$tmp/missing") of its $n IBVERBS symbols that we do not export:"
        sed 's/^/    /' "$tmp/missing"
    else
        say "ok: $(basename "$p"): all $n IBVERBS imports resolve ($(awk -F@ '{print $2}' "$tmp/imp" | sort | uniq -c | awk '{printf "%s%s x%s", s, $2, $1; s=", "}'))"
    fi
    # the loader's view (only libibverbs' part: librdmacm is another drop-in)
    if command -v ldd >/dev/null; then
        LD_LIBRARY_PATH=$build/lib ldd -r "$p" >"$tmp/ldd" 2>&1
        if ! grep -q "$build/lib/libibverbs.so.1\|=> $(cd "$build/lib" && pwd)/libibverbs.so.1" "$tmp/ldd"; then
            bad "$p: the loader did not pick $ours:"
            sed 's/^/    /' "$tmp/ldd"
        fi
        if grep -E "IBVERBS|libibverbs" "$tmp/ldd" | grep -E "not found|undefined symbol" >"$tmp/ldderr"; then
            bad "$p: ldd -r reports:"
            sed 's/^/    /' "$tmp/ldderr"
        fi
    fi
done
say "checked $nbin Debian binaries/libraries"

# --- 2. the full export set against Debian's --------------------------------
if [ ! -e "$debian" ]; then
    say "SKIP: $debian not installed: no full-set comparison"
else
    exports "$debian" | grep -E '@@?IBVERBS_' | grep -v '@IBVERBS_PRIVATE_' >"$tmp/deb.pub"
    exports "$debian" | grep '@IBVERBS_PRIVATE_' >"$tmp/deb.priv"
    grep -E '@@?IBVERBS_' "$tmp/ours" | grep -v '@IBVERBS_PRIVATE_' >"$tmp/ours.pub"
    grep '@IBVERBS_PRIVATE_' "$tmp/ours" >"$tmp/ours.priv"
    grep -vE '@@?(IBVERBS_|UIWARP_PRIVATE_)' "$tmp/ours" >"$tmp/ours.other"

    if ! diff -u "$tmp/deb.pub" "$tmp/ours.pub" >"$tmp/diff"; then
        bad "public exports differ from Debian's (- Debian only, + ours only):"
        grep '^[-+][^-+]' "$tmp/diff" | sed 's/^/    /'
    fi
    if [ -s "$tmp/ours.other" ]; then
        bad "exports under a foreign version node:"
        sed 's/^/    /' "$tmp/ours.other"
    fi
    comm -13 "$tmp/deb.priv" "$tmp/ours.priv" >"$tmp/priv.extra"
    if [ -s "$tmp/priv.extra" ]; then
        bad "IBVERBS_PRIVATE exports Debian does not have:"
        sed 's/^/    /' "$tmp/priv.extra"
    fi
    comm -23 "$tmp/deb.priv" "$tmp/ours.priv" >"$tmp/priv.omitted"

    # version nodes and their parents
    verdefs "$debian" >"$tmp/deb.v"
    verdefs "$ours" | grep -v '^UIWARP_PRIVATE_' >"$tmp/ours.v"
    if ! diff -u "$tmp/deb.v" "$tmp/ours.v" >"$tmp/vdiff"; then
        bad "version definitions differ (- Debian, + ours):"
        grep '^[-+][^-+]' "$tmp/vdiff" | sed 's/^/    /'
    fi

    say "exports per version node (ours / Debian's, default+compat):"
    cut -d'<' -f1 "$tmp/deb.v" | while read -r v; do
        o=$(grep -c "@$v\$" "$tmp/ours")
        od=$(grep -c "@@$v\$" "$tmp/ours")
        d=$(exports "$debian" | grep -c "@$v\$")
        dd=$(exports "$debian" | grep -c "@@$v\$")
        printf '    %-20s %3d (%d+%d) / %3d (%d+%d)\n' "$v" "$o" "$od" $((o - od)) "$d" "$dd" $((d - dd))
    done
    if [ -s "$tmp/priv.omitted" ]; then
        say "deliberate omissions: $(wc -l <"$tmp/priv.omitted") IBVERBS_PRIVATE symbols" \
            "(rdma-core's provider interface; no rdma-core provider is loaded):"
        sed 's/^/    /' "$tmp/priv.omitted"
    else
        say "deliberate omissions: none (IBVERBS_PRIVATE_34 is exported whole, as stubs: see" \
            "src/engine/private34.c)"
    fi

    # symbol types (a data object must stay a data object)
    types() {
        readelf --dyn-syms --wide "$1" | awk '$7 != "UND" && $8 ~ /@@?IBVERBS_/ { print $8, $4 }' | sort -u
    }
    types "$debian" >"$tmp/deb.t"
    types "$ours" >"$tmp/ours.t"
    join "$tmp/deb.t" "$tmp/ours.t" | awk '$2 != $3' >"$tmp/tdiff"
    if [ -s "$tmp/tdiff" ]; then
        bad "symbol types differ (name Debian ours):"
        sed 's/^/    /' "$tmp/tdiff"
    fi
fi

# Beyond rdma-core's ABI, exactly the engine's narrow interface
# (src/engine/iface/uiw_cm.h), versioned apart as UIWARP_PRIVATE_1.
want_private="uiw_cm_accept uiw_cm_channel_create uiw_cm_channel_destroy uiw_cm_channel_fd uiw_cm_channel_set_sink
uiw_cm_conn_destroy uiw_cm_conn_unpolled uiw_cm_connect uiw_cm_disconnect uiw_cm_get_event
uiw_cm_listen uiw_cm_listen_af uiw_cm_listener_addr uiw_cm_listener_destroy uiw_cm_qp_by_num uiw_cm_qp_hold
uiw_cm_qp_release
uiw_cm_reject uiw_debug_level uiw_log uiw_progress_spin_us uiw_progress_timer"
printf '%s\n' $want_private | sed 's/$/@@UIWARP_PRIVATE_1/' | sort >"$tmp/priv.want"
grep '@@UIWARP_PRIVATE_1$' "$tmp/ours" | sort >"$tmp/priv.ours"
if ! cmp -s "$tmp/priv.want" "$tmp/priv.ours"; then
    bad "UIWARP_PRIVATE_1 exports differ from the narrow interface (< wanted, > exported):"
    diff "$tmp/priv.want" "$tmp/priv.ours" | grep '^[<>]' | sed 's/^/    /'
fi
# and every one of them is declared in the narrow interface's header
hdr=$(dirname "$0")/../src/engine/iface/uiw_cm.h
for f in $want_private; do
    grep -q "[ *]$f(" "$hdr" || bad "$f is exported but not declared in $hdr"
done

if [ $fail -ne 0 ]; then
    say "test_abi_symbols: FAILED"
    exit 1
fi
say "test_abi_symbols: passed"
