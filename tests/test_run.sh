#!/usr/bin/env bash
# `uiwarp run`: unmodified Debian RDMA binaries load uiwarp's libraries.
set -u
bin=${UIWARP_BIN:?}
pass=0 fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi; }

if [ ! -e "$(dirname "$bin")/../lib/libibverbs.so.1" ]; then
    echo "FAIL: $(dirname "$bin")/../lib/libibverbs.so.1 not built"
    exit 1
fi
if ldd "$(dirname "$bin")/../lib/libibverbs.so.1" 2>/dev/null | grep -Eq 'lib(asan|tsan|ubsan)'; then
    echo "sanitizer build: the distribution's programs cannot load these libraries; skipped"
    exit 0
fi
out=$("$bin" run ibv_devices 2>&1)
ok "ibv_devices lists uiw_lo" '[[ "$out" == *uiw_lo* ]]'
libs=$("$bin" run ldd "$(command -v rping)" 2>&1)
lib=$(cd "$(dirname "$bin")/../lib" && pwd)
ok "rping resolves uiwarp's librdmacm.so.1" '[[ "$libs" == *"librdmacm.so.1 => $lib/librdmacm.so.1"* ]]'
ok "rping resolves uiwarp's libibverbs.so.1" '[[ "$libs" == *"libibverbs.so.1 => $lib/libibverbs.so.1"* ]]'
dev=$("$bin" run ibv_devinfo -d uiw_lo 2>&1)
ok "ibv_devinfo: iWARP transport" '[[ "$dev" == *"iWARP"* ]]'
"$bin" run /nonexistent/program >/dev/null 2>&1
ok "missing program: exit 127" '[ $? -eq 127 ]'
"$bin" run >/dev/null 2>&1
ok "no program: usage, exit 2" '[ $? -eq 2 ]'
echo "$0: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
