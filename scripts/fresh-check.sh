#!/usr/bin/env bash
# Run the README's two commands, as root, on a freshly installed Debian 12:
# a root made with debootstrap from this machine's configured apt mirror
# (cached as a tarball), the checkout and shared/ copied in, each command run
# there in a chroot. This is what CI runs (.ci/run): it proves that the
# project's own scripts install everything the demo and the tests need.
#
#   scripts/fresh-check.sh [--demo] [--test] [--package] [--shell] [--keep]
#     --demo / --test  run only that command (default: all three, each on its
#                      own fresh root: demo, test command, package)
#     --package        after the test command, build the .deb there
#                      (scripts/package.sh) and install it on a third fresh
#                      root: uiwarp run rping from PATH, then purge it and
#                      check nothing is left (tests/package_check.sh)
#     --shell          an interactive shell in the fresh root instead
#     --keep           keep the root afterwards (its path is printed)
#     --run 'CMD'      run CMD (bash -c, in /work/main) instead; may repeat
#
# Environment: UIWARP_FRESH_CACHE (default /var/cache/uiwarp-fresh: the root
# tarball, apt's downloaded .debs, the siw rig's cache), UIWARP_SHARED
# (default ../shared). Passed into the root: CI, UIWARP_FUZZ_SECONDS,
# UIWARP_SIW. The last line is "total: N passed, M failed" (the demo counts
# as one result, the test command's own total is added).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
shared=${UIWARP_SHARED:-$(cd .. && pwd)/shared}
cache=${UIWARP_FRESH_CACHE:-/var/cache/uiwarp-fresh}
suite=bookworm

do_demo=0 do_test=0 do_package=0 do_shell=0 keep=0
runs=()
while [ $# -gt 0 ]; do
    case $1 in
    --demo) do_demo=1 ;;
    --test) do_test=1 ;;
    --package) do_test=1 do_package=1 ;;
    --shell) do_shell=1 ;;
    --keep) keep=1 ;;
    --run) runs+=("$2"); shift ;;
    *) echo "usage: $0 [--demo] [--test] [--package] [--shell] [--keep] [--run CMD]" >&2; exit 2 ;;
    esac
    shift
done
if [ $do_demo = 0 ] && [ $do_test = 0 ] && [ $do_shell = 0 ] && [ ${#runs[@]} = 0 ]; then
    do_demo=1 do_test=1 do_package=1
fi

[ "$(id -u)" = 0 ] || { echo "fresh-check: needs root (debootstrap, chroot, mounts)" >&2; exit 1; }
[ -d "$shared" ] || { echo "fresh-check: no shared/ at $shared" >&2; exit 1; }
bash scripts/deps.sh fresh

# The configured Debian mirror: the first deb URI of apt's sources.
mirror=
for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    mirror=$(awk '/^URIs:/ && $2 ~ /\/debian\/?$/ {print $2; exit}' "$f")
    [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
    mirror=$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list)
fi
mirror=${mirror:-http://deb.debian.org/debian}

# The cached fresh root: rebuilt when missing or older than 30 days.
mkdir -p "$cache/apt-archives/partial" "$cache/siw-peer"
tarball=$cache/$suite-$(dpkg --print-architecture).tar
if [ ! -s "$tarball" ] || [ -n "$(find "$tarball" -mtime +30)" ]; then
    t0=$(date +%s)
    echo "fresh-check: debootstrap $suite from $mirror (cached in $tarball)"
    tmp=$(mktemp -d /var/tmp/uiwarp-debootstrap.XXXXXX)
    if ! debootstrap --cache-dir="$cache/apt-archives" "$suite" "$tmp" "$mirror" \
        >"$cache/debootstrap.log" 2>&1; then
        tail -20 "$cache/debootstrap.log"
        rm -rf --one-file-system "$tmp"
        echo "fresh-check: debootstrap failed"
        exit 1
    fi
    tar -C "$tmp" -cf "$tarball.new" .
    mv "$tarball.new" "$tarball"
    rm -rf --one-file-system "$tmp"
    echo "fresh-check: root made in $(($(date +%s) - t0)) s"
fi

root=
mounted=()
drop_root() {
    [ -n "$root" ] || return 0
    # Processes still running in the root (a test's leftovers) go first.
    local p i
    for p in /proc/[0-9]*; do
        [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null
    done
    sleep 0.2
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" 2>/dev/null || true
    done
    mounted=()
    if [ $keep = 1 ]; then
        echo "fresh-check: root kept in $root"
    elif findmnt -rn -o TARGET | grep -q "^$root"; then
        echo "fresh-check: mounts left under $root, not removing it" >&2
    else
        rm -rf --one-file-system "$root"
    fi
    root=
}
trap drop_root EXIT
trap 'exit 130' INT TERM

mnt() { # type|bind source target [opts]
    mkdir -p "$3"
    if [ "$1" = bind ]; then
        mount --rbind "$2" "$3"
        mount --make-rslave "$3"
    else
        mount -t "$1" "$2" "$3" ${4:+-o "$4"}
    fi
    mounted+=("$3")
}

# A new fresh root with the checkout in /work/main and shared/ in
# /work/shared.
new_root() {
    drop_root
    root=$(mktemp -d /var/tmp/uiwarp-fresh.XXXXXX)
    tar -C "$root" -xf "$tarball"
    # after tar (whose "." entry carries the build dir's mode): a 0700 "/"
    # would be untraversable for every user but root
    chmod 0755 "$root"
    # "/" must be a mount point, as on a real system: ip netns and unshare
    # change its propagation
    mount --bind "$root" "$root"
    mounted+=("$root")
    # The machine's own apt configuration: same mirror, same suites.
    rm -f "$root/etc/apt/sources.list"
    local f
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
        [ -f "$f" ] && grep -q debian "$f" && cp "$f" "$root$f"
    done
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    cp /etc/hosts "$root/etc/hosts"
    # The checkout as committed plus uncommitted changes (never build dirs).
    mkdir -p "$root/work/main" "$root/work/shared"
    (cd "$src" && git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
        tar --null -T - -cf -) | tar -C "$root/work/main" -xf -
    cp -a "$shared/." "$root/work/shared/"
    mnt proc proc "$root/proc"
    mnt bind /sys "$root/sys"
    mnt bind /dev "$root/dev"
    mnt tmpfs tmpfs "$root/run" mode=755
    mnt tmpfs tmpfs "$root/tmp" mode=1777
    mnt bind "$cache/apt-archives" "$root/var/cache/apt/archives"
    mnt bind "$cache/siw-peer" "$root/var/cache/siw-peer"
}

in_root() { # command string, run with bash in /work/main
    chroot "$root" /usr/bin/env -i \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 \
        ${CI:+CI=$CI} ${UIWARP_FUZZ_SECONDS:+UIWARP_FUZZ_SECONDS=$UIWARP_FUZZ_SECONDS} \
        ${UIWARP_SIW:+UIWARP_SIW=$UIWARP_SIW} \
        /bin/bash -c "cd /work/main && $1"
}

passed=0 failed=0
result() { # name ok|fail seconds
    echo "fresh-check: $1 $2 in $3 s"
    if [ "$2" = passed ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}

if [ $do_shell = 1 ]; then
    new_root
    in_root 'exec bash -i' || true
fi
for c in "${runs[@]}"; do
    new_root
    echo "=== fresh root: $c"
    t0=$(date +%s)
    if in_root "$c"; then result "'$c'" passed $(($(date +%s) - t0)); else result "'$c'" FAILED $(($(date +%s) - t0)); fi
done

# 1. The README's first command, on its own fresh system.
if [ $do_demo = 1 ]; then
    new_root
    echo "=== fresh root: bash scripts/demo.sh"
    t0=$(date +%s)
    if in_root 'bash scripts/demo.sh'; then
        result demo passed $(($(date +%s) - t0))
    else
        result demo FAILED $(($(date +%s) - t0))
    fi
fi

# 2. The README's second command (the test command), on another.
deb=
if [ $do_test = 1 ]; then
    new_root
    echo "=== fresh root: bash scripts/test.sh"
    t0=$(date +%s)
    log=$(mktemp)
    set +e
    in_root 'bash scripts/test.sh' 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    set -e
    line=$(grep -E '^total: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    rm -f "$log"
    echo "fresh-check: test command exit $rc after $(($(date +%s) - t0)) s"
    f=0
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^total: ([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
        passed=$((passed + p))
        failed=$((failed + f))
    fi
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        failed=$((failed + 1))
    fi
    # The Debian package, built where the build dependencies now are.
    if [ $do_package = 1 ]; then
        if in_root 'bash scripts/package.sh build-package' >/dev/null 2>&1; then
            deb=$(ls "$root"/work/main/build-package/uiwarp_*.deb 2>/dev/null | head -1)
            if [ -n "$deb" ]; then
                cp "$deb" "$cache/" && deb=$cache/$(basename "$deb")
            fi
        fi
        [ -n "$deb" ] || { echo "fresh-check: scripts/package.sh made no .deb"; failed=$((failed + 1)); }
    fi
fi

# 3. The package on a third fresh system: install, use from PATH, remove.
if [ $do_package = 1 ] && [ -n "$deb" ]; then
    new_root
    echo "=== fresh root: apt-get install ./$(basename "$deb"); uiwarp run rping; apt-get purge uiwarp"
    cp "$deb" "$root/tmp/"
    t0=$(date +%s)
    if in_root "bash tests/package_check.sh /tmp/$(basename "$deb")"; then
        result package passed $(($(date +%s) - t0))
    else
        result package FAILED $(($(date +%s) - t0))
    fi
    rm -f "$deb"
fi
drop_root

echo
echo "total: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
