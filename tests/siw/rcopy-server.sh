#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
#
# rcopy's server for tests/siw/interop.sh, on either side (POSIX sh: the
# guest's busybox, or the host's sh under `uiwarp run`):
#   sh rcopy-server.sh PORT DEST REFERENCE
# rcopy's server never exits: it serves one connection after the other.
# This runs it in the background, waits until it has closed the file of
# its first connection ("closing...done"), stops it, and compares DEST with
# REFERENCE byte for byte. Exit status: cmp's (0 = identical); killed by
# the harness's timeout if no transfer ends.
port=$1 dest=$2 ref=$3
log=$dest.server.log
rm -f "$dest" "$log"
rcopy -p "$port" >"$log" 2>&1 &
p=$!
until grep -q 'closing\.\.\.done' "$log" 2>/dev/null; do
    if ! kill -0 "$p" 2>/dev/null; then
        cat "$log"
        echo
        echo "rcopy-server: no transfer, rcopy's server ended"
        exit 1
    fi
    sleep 0.1
done
kill "$p" 2>/dev/null
wait "$p" 2>/dev/null
cat "$log"
echo # rcopy's last line ("waiting for connection...") has no newline
if cmp "$dest" "$ref"; then
    echo "rcopy-server: identical ($(wc -c <"$dest") bytes)"
    rm -f "$dest"
    exit 0
fi
echo "rcopy-server: $dest and $ref differ"
exit 1
