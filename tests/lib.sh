# SPDX-License-Identifier: BSD-3-Clause
# shellcheck shell=bash
# Shell helpers shared by the test and benchmark scripts (tests/test_*.sh,
# tests/rdmacm/*.sh, tests/siw/interop.sh, bench/bench_apps.sh); sourced,
# not run. Defines functions only, plus the counters and the process list
# they use; sets no options and no traps.

# ---------------------------------------------------------------- checks
# ok/bad count into checks and failed; expect runs a command as a check.
checks=0
failed=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); failed=$((failed + 1)); echo "FAIL $*"; }
expect() { # expect DESCRIPTION COMMAND...
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}

have() { command -v "$1" >/dev/null 2>&1; }

# wait_for SECONDS COMMAND...: until COMMAND succeeds (polled every 50 ms)
wait_for() {
    local n=$(($1 * 20))
    shift
    while [ $n -gt 0 ]; do
        "$@" && return 0
        sleep 0.05
        n=$((n - 1))
    done
    return 1
}

# ------------------------------------------------------------- processes
# Programs started in their own session add their pid to procs; reap kills
# what is left of them (their process groups).
procs=()
reap() {
    local pid
    for pid in "${procs[@]}"; do
        kill -KILL -- "-$pid" 2>/dev/null
    done
    procs=()
}
# reap_and_remove DIR: reap, wait for the children, remove DIR (an EXIT trap)
reap_and_remove() {
    reap
    wait 2>/dev/null
    rm -rf "$1"
}

# ------------------------------------------------------------------ ports
# A TCP port free right now on the loopback address of the family (default 4).
# A TCP port nothing uses now, chosen at random below the ephemeral range
# (so no outgoing connection takes it meanwhile). Not bind(0): Linux hands
# the same free port to consecutive callers, and a caller that picks
# several before binding any (qemu's forwards) got duplicates.
free_port() { # [4|6]
    python3 - "${1:-4}" <<'PY'
import random, socket, sys
fam, host = (socket.AF_INET6, "::1") if sys.argv[1] == "6" else (socket.AF_INET, "127.0.0.1")
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(500):
    p = random.randint(10000, max(lo - 1, 10001))
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.bind((host, p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    sys.exit(0)
s = socket.socket(fam, socket.SOCK_STREAM)
s.bind((host, 0))
print(s.getsockname()[1])
PY
}

# Wait until something listens on TCP port $1 (IPv4 or IPv6), up to $2 s.
wait_listen() {
    local hex deadline
    hex=$(printf '%04X' "$1")
    deadline=$((SECONDS + ${2:-10}))
    while [ $SECONDS -lt $deadline ]; do
        if awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' \
            /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    return 1
}

# ---------------------------------------------------------------- links
# veth_names PREFIX: names for a pair of namespaces and their veth ends,
# unique to this process: sets na nb (PREFIX a/b) and va vb; veth_del
# removes the namespaces (and with them the pair) again.
veth_names() {
    na=uiw${1}a$$ nb=uiw${1}b$$ va=uv${1}a$$ vb=uv${1}b$$
}
veth_del() {
    ip netns del "$na" 2>/dev/null
    ip netns del "$nb" 2>/dev/null
}

# veth_link NA NB VA VB NET MTU TIMESTAMPS: (re)make the network namespaces
# NA and NB joined by the veth pair VA (NET.1, in NA) and VB (NET.2, in NB)
# with that MTU and net.ipv4.tcp_timestamps (as RNICs run: 0) in both.
# The pair is made inside the namespaces, never in the host's for a
# moment: tests running beside this one list the host's interfaces
# (uiwarp's devices, libfabric's verbs provider).
veth_link() {
    local na=$1 nb=$2 va=$3 vb=$4 net=$5 mtu=$6 ts=$7
    ip netns del "$na" 2>/dev/null
    ip netns del "$nb" 2>/dev/null
    ip netns add "$na" && ip netns add "$nb" &&
        ip -n "$na" link add "$va" type veth peer name "$vb" netns "$nb" &&
        ip -n "$na" addr add "$net.1/24" dev "$va" && ip -n "$nb" addr add "$net.2/24" dev "$vb" &&
        ip -n "$na" link set "$va" mtu "$mtu" up && ip -n "$nb" link set "$vb" mtu "$mtu" up &&
        ip -n "$na" link set lo up && ip -n "$nb" link set lo up &&
        ip netns exec "$na" sysctl -qw net.ipv4.tcp_timestamps="$ts" &&
        ip netns exec "$nb" sysctl -qw net.ipv4.tcp_timestamps="$ts"
}

# veth_gso NA NB VA VB N: gso_max_segs N on both ends (1: the segments a
# capture on the pair sees are the ones a NIC would send)
veth_gso() {
    ip -n "$1" link set "$3" gso_max_segs "$5" && ip -n "$2" link set "$4" gso_max_segs "$5"
}
