# Guest side of tests/siw/interop.sh: sourced by the scenario that runs in
# the siw peer VM (busybox sh, cwd /rig = the host's run directory). The host
# and the guest hand each case over through files in /rig:
#   guest server: ready.I (listening), host writes h.I.done when its client
#                 has finished; the guest then gives its server 3 s (or the
#                 scenario's $grace) and stops it
#   guest client: host writes go.I when its server listens
# The guest writes g.I.out (output) and g.I.rc (exit status).

# wait_listen PORT: until a TCP listener is on PORT (max ~20 s)
# put_rc I STATUS: g.I.rc appears complete (the host polls for it: a file
# written in place can be seen empty, which failed a case in the full matrix)
put_rc() {
    echo "$2" >"/rig/g.$1.rc.tmp"
    mv -f "/rig/g.$1.rc.tmp" "/rig/g.$1.rc"
}

wait_listen() {
    n=0
    until ss -ltnH 2>/dev/null | grep -q ":$1 "; do
        sleep 0.2
        n=$((n + 1))
        [ $n -gt 100 ] && return 1
    done
    return 0
}

# warm: one siw-to-siw rping over lo. The first rdma_cm connection after
# boot runs through code that TCG has not translated yet, which widens a
# race in siw's accept path (docs/INTEROP.md, "lost first FPDU"); this
# connection takes that hit instead of the first case.
warm() {
    timeout 60 rping -s -a 10.0.2.15 -p 7000 -C 1 >/dev/null 2>&1 &
    wait_listen 7000
    timeout 60 rping -c -a 10.0.2.15 -p 7000 -C 1 -V
    echo "[guest] warm-up rping rc=$?"
    wait
}

# gsrv I PORT TIMEOUT CMD...: run a server for case I; it gets $grace
# seconds (default 3) to end by itself once the host side is done
gsrv() {
    i=$1 port=$2 t=$3
    shift 3
    echo "[guest] case $i server: $*"
    timeout "$t" "$@" >"/rig/g.$i.out" 2>&1 &
    tp=$!
    wait_listen "$port" || echo "[guest] nothing listens on $port" >>"/rig/g.$i.out"
    echo ready >"/rig/ready.$i"
    dl=""
    while kill -0 "$tp" 2>/dev/null; do
        if [ -z "$dl" ] && [ -e "/rig/h.$i.done" ]; then
            dl=$(($(date +%s) + ${grace:-3}))
        fi
        if [ -n "$dl" ] && [ "$(date +%s)" -ge "$dl" ]; then
            echo "[guest] case $i: stopping the server (host side done)" >>"/rig/g.$i.out"
            kill -TERM "$tp" 2>/dev/null
            sleep 1
            kill -KILL "$tp" 2>/dev/null
            break
        fi
        sleep 0.2
    done
    wait "$tp"
    put_rc "$i" $?
}

# gcli I TIMEOUT CMD...: run a client for case I once the host says go
gcli() {
    i=$1 t=$2
    shift 2
    n=0
    while [ ! -e "/rig/go.$i" ]; do
        sleep 0.2
        n=$((n + 1))
        if [ $n -gt 600 ]; then
            echo "[guest] case $i: no go from the host" >"/rig/g.$i.out"
            put_rc "$i" 125
            return
        fi
    done
    echo "[guest] case $i client: $*"
    timeout "$t" "$@" >"/rig/g.$i.out" 2>&1
    put_rc "$i" $?
}
