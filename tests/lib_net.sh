# SPDX-License-Identifier: BSD-3-Clause
# Port helpers for the scripts that run programs on loopback
# (tests/rdmacm/apps_common.sh, bench/bench_apps.sh); sourced, not run.

# A TCP port free right now on the loopback address of the family (default 4).
free_port() { # [4|6]
    python3 - "${1:-4}" <<'PY'
import socket, sys
fam, host = (socket.AF_INET6, "::1") if sys.argv[1] == "6" else (socket.AF_INET, "127.0.0.1")
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
