# SPDX-License-Identifier: BSD-3-Clause
#
# Helpers shared by the scripts that run unmodified Debian programs over
# uiwarp (test_rdmacm_apps.sh, test_libfabric_apps.sh); sourced, not run.
# Before sourcing, set APPS_NAME (the temporary directory's name).
#
# Cases are REQUIRED (must pass) or KNOWN (fail today for a reason given
# with them: XFAIL, or XPASS once fixed). run_case runs a server and a
# client, run_one a single command; both count into pass/fail/xfail/xpass,
# skip_case into skip, and print a PASS/FAIL/XFAIL/XPASS/SKIP line.

tmp=$(mktemp -d "/tmp/uiwarp-${APPS_NAME:-apps}.XXXXXX")
# procs/reap (what is left of the programs started), have, free_port [4|6],
# wait_listen PORT [SECONDS]
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
cleanup() { reap_and_remove "$tmp"; }
trap cleanup EXIT

pass=0 fail=0 xfail=0 xpass=0 skip=0
failed_names=()

have_ipv6() {
    python3 -c 'import socket; s=socket.socket(socket.AF_INET6); s.bind(("::1",0))' 2>/dev/null
}

# Crashes leave evidence: every program runs with core dumps on, in a
# directory of its own under $tmp (the kernel's default core_pattern,
# "core", writes the core there), and a failed case prints the backtrace of
# each core its programs left (gdb; a crash that happens once in CI is
# otherwise a bare "rc=139"). run_dir NAME: that directory, made.
run_dir() {
    mkdir -p "$tmp/run.$1" && echo "$tmp/run.$1"
}
in_dir() { # DIR CMD...: the shell line that runs CMD in DIR with cores on
    echo "cd '$1' && { ulimit -c unlimited 2>/dev/null || true; } && $2"
}
backtraces() { # DIR...: every core in the DIRs, with all threads' stacks
    local d c exe
    for d in "$@"; do
        for c in "$d"/core*; do
            [ -f "$c" ] || continue
            if ! have gdb; then
                echo "    --- core $c (no gdb installed for its backtrace)"
                continue
            fi
            exe=$(gdb -batch -c "$c" -ex 'info auxv' 2>/dev/null |
                awk '/AT_EXECFN/ { gsub(/"/, "", $NF); print $NF; exit }')
            echo "    --- backtrace of $c (${exe:-program unknown})"
            gdb -batch -ex 'set pagination off' -ex 'thread apply all bt 24' \
                ${exe:+"$exe"} -c "$c" 2>/dev/null |
                grep -E '^(#|Thread |Program terminated)' | head -n 120 | sed 's/^/    | /'
        done
    done
}

# run_case NAME KIND REASON TIMEOUT SERVER_CMD CLIENT_CMD [CHECK_REGEX_BAD]
# The case passes when both programs exit 0 and neither output matches the
# (optional) regular expression of failure messages.
run_case() {
    local name=$1 kind=$2 reason=$3 t=$4 scmd=$5 ccmd=$6 bad=${7:-}
    local sout=$tmp/$name.server cout=$tmp/$name.client spid cpid src=0 crc=0 ok=1
    local sdir cdir
    sdir=$(run_dir "$name.server") && cdir=$(run_dir "$name.client") || return
    # Each program runs in its own session (setsid in place: the process
    # keeps its pid, which is then its process group), so whatever it
    # forked is killed with it afterwards.
    setsid bash -c "$(in_dir "$sdir" "exec timeout -k 3 $t $scmd")" >"$sout" 2>&1 &
    spid=$!
    procs+=("$spid")
    if ! wait_listen "$port" 10; then
        echo "server did not listen on port $port" >>"$sout"
        ok=0
    else
        setsid bash -c "$(in_dir "$cdir" "exec timeout -k 3 $t $ccmd")" >"$cout" 2>&1 &
        cpid=$!
        procs+=("$cpid")
        wait "$cpid" 2>/dev/null || crc=$?
    fi
    [ $ok = 0 ] && kill -TERM "$spid" 2>/dev/null
    wait "$spid" 2>/dev/null || src=$?
    reap
    [ "$crc" = 0 ] && [ "$src" = 0 ] || ok=0
    if [ -n "$bad" ] && grep -Eq "$bad" "$sout" "$cout" 2>/dev/null; then
        ok=0
    fi
    report "$name" "$kind" "$reason" "$ok" "server rc=$src client rc=$crc" "$sout" "$cout"
}

report() { # NAME KIND REASON OK DETAIL SERVER_OUT CLIENT_OUT
    local name=$1 kind=$2 reason=$3 ok=$4 detail=$5
    if [ "$kind" = REQUIRED ]; then
        if [ "$ok" = 1 ]; then
            pass=$((pass + 1))
            echo "PASS   $name"
        else
            fail=$((fail + 1))
            failed_names+=("$name")
            echo "FAIL   $name ($detail)"
            show "$6" "$7"
            backtraces "$tmp/run.$name".*
        fi
    else
        if [ "$ok" = 1 ]; then
            xpass=$((xpass + 1))
            echo "XPASS  $name (was known to fail: $reason)"
        else
            xfail=$((xfail + 1))
            echo "XFAIL  $name ($detail) -- $reason"
            [ "${RDMACM_APPS_VERBOSE:-0}" = 1 ] && show "$6" "$7"
        fi
    fi
}

show() {
    local f
    for f in "$@"; do
        [ -s "$f" ] || continue
        echo "    --- $(basename "$f")"
        tail -n 15 "$f" | sed 's/^/    | /'
    done
}

skip_case() {
    skip=$((skip + 1))
    echo "SKIP   $1 ($2)"
}

# run_one NAME KIND REASON TIMEOUT CMD [CHECK_REGEX_BAD]
# The case passes when the command exits 0 and its output does not match
# the (optional) regular expression of failure messages.
run_one() {
    local name=$1 kind=$2 reason=$3 t=$4 cmd=$5 bad=${6:-}
    local out=$tmp/$name.out pid rc=0 ok=1 dir
    dir=$(run_dir "$name.one") || return
    setsid bash -c "$(in_dir "$dir" "exec timeout -k 3 $t $cmd")" >"$out" 2>&1 &
    pid=$!
    procs+=("$pid")
    wait "$pid" 2>/dev/null || rc=$?
    reap
    [ "$rc" = 0 ] || ok=0
    if [ -n "$bad" ] && grep -Eq "$bad" "$out" 2>/dev/null; then
        ok=0
    fi
    report "$name" "$kind" "$reason" "$ok" "rc=$rc" "$out" ""
}

# finish LABEL: the summary line; exit 1 if a REQUIRED case failed, 77
# (skipped) if nothing ran, else 0.
finish() {
    echo
    echo "$1: $pass passed, $fail failed, $xfail known failures, $xpass known failures now passing, $skip skipped"
    if [ $fail -gt 0 ]; then
        echo "failed: ${failed_names[*]}"
        exit 1
    fi
    if [ $((pass + xfail + xpass)) -eq 0 ]; then
        exit 77
    fi
    exit 0
}
