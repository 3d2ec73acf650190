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
# socket programs over rsockets (docs/RSOCKETS.md): librspreload.so, then ours
ours="$lib/libuiwarp-rspreload.so"
rsp=$(ls /usr/lib/*/rsocket/librspreload.so /usr/lib64/rsocket/librspreload.so 2>/dev/null | head -1)
if [ -n "$rsp" ]; then
    pre=$("$bin" run --rsockets sh -c 'echo "$LD_PRELOAD"' 2>&1)
    ok "--rsockets preloads librspreload.so, then libuiwarp-rspreload.so" '[ "$pre" = "$rsp:$ours" ]'
fi
pre=$(LD_PRELOAD=/x/librspreload.so "$bin" run sh -c 'echo "$LD_PRELOAD"' 2>/dev/null)
ok "a librspreload.so in LD_PRELOAD gets libuiwarp-rspreload.so after it" '[ "$pre" = "/x/librspreload.so:$ours" ]'
pre=$(LD_PRELOAD="/x/librspreload.so:$ours" "$bin" run sh -c 'echo "$LD_PRELOAD"' 2>/dev/null)
ok "... once" '[ "$pre" = "/x/librspreload.so:$ours" ]'
pre=$("$bin" run sh -c 'echo "${LD_PRELOAD-unset}"' 2>&1)
ok "no preload added otherwise" '[ "$pre" = unset ]'
UIWARP_RSPRELOAD=/nonexistent/librspreload.so "$bin" run --rsockets true >/dev/null 2>&1
ok "--rsockets without librspreload.so: exit 2" '[ $? -eq 2 ]'
msg=$(LD_PRELOAD=/x/librspreload.so RDMAV_FORK_SAFE=1 "$bin" run true 2>&1)
ok "rsockets' fork mode (RDMAV_FORK_SAFE) refused with a reason: exit 2" '[ $? -eq 2 ] && [[ "$msg" == *"fork mode"* ]]'
LD_PRELOAD=/x/librspreload.so RDMAV_FORK_SAFE=0 "$bin" run true 2>/dev/null
ok "RDMAV_FORK_SAFE=0 is not the fork mode" '[ $? -eq 0 ]'
RDMAV_FORK_SAFE=1 "$bin" run true 2>/dev/null
ok "RDMAV_FORK_SAFE without rsockets is none of our business" '[ $? -eq 0 ]'
nm -D --defined-only "$ours" 2>/dev/null | awk '{print $3}' | grep -qx accept4
ok "libuiwarp-rspreload.so defines accept4" '[ $? -eq 0 ]'
"$bin" run /nonexistent/program >/dev/null 2>&1
ok "missing program: exit 127" '[ $? -eq 127 ]'
"$bin" run >/dev/null 2>&1
ok "no program: usage, exit 2" '[ $? -eq 2 ]'
echo "$0: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
