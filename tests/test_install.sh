#!/usr/bin/env bash
# Install and package (issue 14):
#  - `cmake --install BUILD --prefix P` puts the tool in P/bin, the drop-in
#    libraries in the private P/lib/uiwarp/ (nothing in P/lib itself), and
#    the man pages uiwarp(1) and uiwarp(7);
#  - nothing installed refers to the build tree, and the installed
#    `uiwarp run` works with the build tree hidden (as root: a private mount
#    namespace with an empty tmpfs over BUILD): ibv_devices lists uiw_lo,
#    rping moves verified data;
#  - the man pages document every UIWARP_ variable the code reads and every
#    subcommand of the tool;
#  - `cpack -G DEB` makes uiwarp_VERSION_ARCH.deb with exactly the expected
#    files under /usr and complete Depends.
set -uo pipefail
build=${UIWARP_BUILD:?}
src=${UIWARP_SRC:?}
# free_port (its ok/bad below, counting into passed/failed, replace the library's)
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix

if [ ! -e "$build/lib/libibverbs.so.1" ]; then
    echo "SKIP: the engine is not built in $build"
    exit 0
fi

if cmake --install "$build" --prefix "$P" >"$tmp/install.log" 2>&1; then
    ok "cmake --install --prefix"
else
    cat "$tmp/install.log"
    bad "cmake --install"
fi
want="bin/uiwarp
lib/uiwarp/libibverbs.so.1
lib/uiwarp/libibverbs.so.1.14.44.0
lib/uiwarp/librdmacm.so.1
lib/uiwarp/librdmacm.so.1.3.44.0
lib/uiwarp/libuiwarp-rspreload.so
share/doc/uiwarp/APPS.md
share/doc/uiwarp/ENGINE.md
share/doc/uiwarp/INTEROP.md
share/doc/uiwarp/README.md
share/man/man1/uiwarp.1
share/man/man7/uiwarp.7"
got=$(cd "$P" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort)
if [ "$got" = "$want" ]; then
    ok "installed files: exactly the expected $(echo "$want" | wc -l)"
else
    diff <(echo "$want") <(echo "$got")
    bad "installed files differ"
fi
if ls "$P"/lib/lib*.so* >/dev/null 2>&1; then
    bad "libraries directly in PREFIX/lib would shadow rdma-core's"
else
    ok "no library directly in PREFIX/lib"
fi
if readelf -d "$P/bin/uiwarp" "$P"/lib/uiwarp/lib*.so.1 2>/dev/null | grep -E 'R(UN)?PATH' | grep -q "$build"; then
    bad "an installed file has the build tree in its RPATH/RUNPATH"
else
    ok "no RPATH/RUNPATH into the build tree"
fi

# The man pages cover every variable and every subcommand.
vars=$(grep -rhoE '"UIWARP_[A-Z0-9_]+' "$src/src" | tr -d '"' | sort -u)
miss=
for v in $vars; do
    grep -q "^\.BR $v " "$P/share/man/man7/uiwarp.7" || miss="$miss $v"
done
[ -z "$miss" ] && ok "uiwarp(7) documents all $(echo "$vars" | wc -l) UIWARP_ variables" ||
    bad "uiwarp(7) lacks:$miss"
subs=$("$P/bin/uiwarp" --help | awk '/^commands:/{c=1; next} c && NF {print $1}')
miss=
for c in $subs; do
    grep -q "^\.SS uiwarp $c" "$P/share/man/man1/uiwarp.1" || miss="$miss $c"
done
[ -n "$subs" ] && [ -z "$miss" ] && ok "uiwarp(1) documents every subcommand ($(echo $subs))" ||
    bad "uiwarp(1) lacks:$miss"
if command -v man >/dev/null; then
    for m in "$P/share/man/man1/uiwarp.1" "$P/share/man/man7/uiwarp.7"; do
        w=$(MANWIDTH=80 man --warnings -l "$m" 2>&1 >/dev/null)
        [ -z "$w" ] && ok "$(basename "$m") renders without warnings" || bad "$(basename "$m"): $w"
    done
fi

# The installed tool with the build tree out of sight.
run_installed() { # script
    if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
        unshare -m bash -c "mount --make-rprivate / && mount -t tmpfs none '$build' && $1"
    else
        bash -c "$1"
    fi
}
hidden=no
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null && hidden=yes
# Debian's programs cannot load sanitizer builds of the libraries (the
# runtime must come first): the run checks need a plain build.
if grep -Eq 'lib(asan|tsan|ubsan)' <<<"$(ldd "$P/lib/uiwarp/libibverbs.so.1" 2>/dev/null)"; then
    echo "installed run checks skipped: a sanitizer build"
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
fi
out=$(run_installed "'$P/bin/uiwarp' run env" 2>&1 | grep '^LD_LIBRARY_PATH=')
if [ "$out" = "LD_LIBRARY_PATH=$(cd "$P/lib/uiwarp" && pwd -P)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ]; then
    ok "installed uiwarp run points the loader at PREFIX/lib/uiwarp (build hidden: $hidden)"
else
    bad "installed uiwarp run: $out"
fi
if command -v ibv_devices >/dev/null; then
    if run_installed "'$P/bin/uiwarp' run ibv_devices" 2>&1 | grep -q uiw_lo; then
        ok "installed uiwarp run ibv_devices lists uiw_lo (build hidden: $hidden)"
    else
        bad "installed uiwarp run ibv_devices"
    fi
fi
if command -v rping >/dev/null; then
    rc=1
    for attempt in 1 2 3; do # a port taken between choosing and binding: another
        port=$(free_port)
        script="'$P/bin/uiwarp' run rping -s -a 127.0.0.1 -p $port -C 20 -S 1024 -V >'$tmp/s.log' 2>&1 &
            srv=\$!; c=1
            for i in \$(seq 100); do
                if timeout 60 '$P/bin/uiwarp' run rping -c -a 127.0.0.1 -p $port -C 20 -S 1024 -V >'$tmp/c.log' 2>&1; then
                    c=0; break
                fi
                kill -0 \$srv 2>/dev/null || break
                sleep 0.1
            done; wait \$srv; s=\$?; exit \$((c || s))"
        run_installed "$script" && rc=0 && break
        grep -q 'Address already in use' "$tmp/s.log" || break
    done
    if [ $rc = 0 ]; then
        ok "installed uiwarp run rping -C 20 -V (build hidden: $hidden)"
    else
        tail -n 5 "$tmp/c.log" "$tmp/s.log"
        bad "installed uiwarp run rping"
    fi
fi

# The Debian package.
if command -v cpack >/dev/null && command -v dpkg-deb >/dev/null; then
    if (cd "$build" && cpack -G DEB -B "$tmp/pkg") >"$tmp/cpack.log" 2>&1; then
        deb=$(ls "$tmp"/pkg/uiwarp_*.deb 2>/dev/null | head -1)
    else
        deb=
        cat "$tmp/cpack.log"
    fi
    if [ -n "$deb" ]; then
        ok "cpack -G DEB: $(basename "$deb")"
        got=$(dpkg-deb -c "$deb" | awk '{print $6}' | grep -v '/$' | sed 's|^\./usr/||' | sort)
        if [ "$got" = "$want" ]; then
            ok ".deb holds exactly the installed files, under /usr"
        else
            diff <(echo "$want") <(echo "$got")
            bad ".deb contents"
        fi
        dep=$(dpkg-deb -f "$deb" Depends)
        for d in libc6 libisal2 libpcap0.8; do
            echo "$dep" | grep -q "$d" && ok ".deb Depends on $d" || bad ".deb Depends lacks $d: $dep"
        done
        echo "$dep" | grep -q libibverbs && bad ".deb must not depend on rdma-core's libibverbs1" ||
            ok ".deb does not depend on rdma-core's libraries"
    else
        bad "cpack made no .deb"
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
