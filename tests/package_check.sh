#!/usr/bin/env bash
# The Debian package on a fresh Debian 12 (run by scripts/fresh-check.sh in a
# fresh root, as root): install it with apt (its Depends must be complete),
# run rping over it from PATH with every byte verified, check that its
# libraries shadow nothing, then purge it and check nothing is left.
#   tests/package_check.sh PATH/uiwarp_VERSION_ARCH.deb
set -uo pipefail
deb=$(realpath "$1")
passed=0 failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }

export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
# the package alone first: its Depends must bring everything it needs
if apt-get install -y -q --no-install-recommends "$deb" >/tmp/pkg-install.log 2>&1; then
    ok "apt-get install $(basename "$deb")"
else
    tail -20 /tmp/pkg-install.log
    bad "apt-get install $(basename "$deb")"
    echo "total: $passed passed, $failed failed"
    exit 1
fi
command -v uiwarp >/dev/null && ok "uiwarp on PATH ($(command -v uiwarp))" || bad "uiwarp not on PATH"
uiwarp --help | grep -q '^  run ' && ok "uiwarp --help lists run" || bad "uiwarp --help"
for m in /usr/share/man/man1/uiwarp.1 /usr/share/man/man7/uiwarp.7; do
    [ -s "$m" ] || [ -s "$m.gz" ] && ok "man page $m" || bad "man page $m missing"
done
# the programs it is used with (rdma-core's libraries come with them)
apt-get install -y -q --no-install-recommends rdmacm-utils ibverbs-utils >/dev/null 2>&1 ||
    bad "apt-get install rdmacm-utils ibverbs-utils"

# Nothing shadowed: the loader's default path still finds rdma-core's.
if ldconfig -p | grep -E 'lib(ibverbs|rdmacm)\.so\.1 ' | grep -q /uiwarp/; then
    bad "uiwarp's libraries are in the loader's default path"
else
    ok "uiwarp's libraries are not in the loader's default path"
fi
if ibv_devices 2>&1 | grep -q uiw_; then
    bad "plain ibv_devices sees uiwarp's devices"
else
    ok "plain ibv_devices uses rdma-core's library"
fi
if uiwarp run ibv_devices 2>&1 | grep -q uiw_lo; then
    ok "uiwarp run ibv_devices lists uiw_lo"
else
    bad "uiwarp run ibv_devices does not list uiw_lo"
fi

# rping over the installed package, every byte verified (-V).
port=$((20000 + RANDOM % 20000))
uiwarp run rping -s -a 127.0.0.1 -p $port -C 100 -S 4096 -V >/tmp/rping-s.log 2>&1 &
srv=$!
rc=1
for _ in $(seq 50); do
    if timeout 60 uiwarp run rping -c -a 127.0.0.1 -p $port -C 100 -S 4096 -V >/tmp/rping-c.log 2>&1; then
        rc=0
        break
    fi
    grep -q 'rdma_connect\|REJECTED\|UNREACHABLE\|ECONNREFUSED\|Connection refused' /tmp/rping-c.log || break
    sleep 0.2
done
timeout 30 tail --pid=$srv -f /dev/null
wait $srv
src=$?
if [ $rc = 0 ] && [ $src = 0 ]; then
    ok "uiwarp run rping -C 100 -S 4096 -V (client and server exit 0)"
else
    cat /tmp/rping-c.log /tmp/rping-s.log | tail -20
    bad "rping over the installed uiwarp: client $rc, server $src"
fi

# Purge: every file of the package gone.
files=$(dpkg -L uiwarp | while read -r f; do [ -f "$f" ] || [ -L "$f" ] && echo "$f"; done)
n=$(echo "$files" | grep -c .)
if apt-get purge -y -q uiwarp >/dev/null 2>&1; then
    ok "apt-get purge uiwarp"
else
    bad "apt-get purge uiwarp"
fi
left=$(echo "$files" | while read -r f; do [ -e "$f" ] || [ -L "$f" ] && echo "$f"; done)
if [ -z "$left" ] && [ ! -e /usr/lib/uiwarp ] && ! command -v uiwarp >/dev/null; then
    ok "purged: none of its $n files left"
else
    bad "left after purge: $left"
fi
echo "total: $passed passed, $failed failed"
[ $failed = 0 ]
