#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plain-socket client for test_rspreload_apps.sh (run through librspreload).

usage: rspreload_sha_client.py PORT NBYTES
Connects to 127.0.0.1:PORT, sends an 8-byte length, NBYTES random bytes in
random-sized pieces and their SHA-256; then reads to end of stream and
checks that the last 32 bytes are the SHA-256 of the rest; first a
nonblocking recv with nothing to read must fail with EAGAIN, and the
transfer runs with a timeout (poll, then nonblocking calls). Exit 0 only if
every check passed."""
import hashlib
import os
import random
import socket
import sys


def main():
    port, nbytes = int(sys.argv[1]), int(sys.argv[2])
    c = socket.create_connection(("127.0.0.1", port))
    print(f"client: connected, local {c.getsockname()}, peer {c.getpeername()}", flush=True)
    # nonblocking (ioctl FIONBIO in Python): nothing to read yet -> EAGAIN
    c.setblocking(False)
    try:
        c.recv(1)
        raise SystemExit("client: recv on an empty nonblocking socket did not fail with EAGAIN")
    except BlockingIOError:
        pass
    # the rest with a timeout: poll, then nonblocking send/recv
    c.settimeout(60)
    data = os.urandom(nbytes)
    c.sendall(nbytes.to_bytes(8, "big"))
    off = 0
    while off < nbytes:
        k = min(nbytes - off, random.randint(1, 1 << 18))
        c.sendall(data[off:off + k])
        off += k
    c.sendall(hashlib.sha256(data).digest())
    print(f"client: sent {nbytes} bytes, SHA-256 {hashlib.sha256(data).hexdigest()}", flush=True)

    got = bytearray()
    while True:
        b = c.recv(random.randint(1, 1 << 18))
        if not b:
            break
        got += b
    if len(got) < 32:
        raise SystemExit(f"client: only {len(got)} bytes before end of stream")
    body, digest = bytes(got[:-32]), bytes(got[-32:])
    if hashlib.sha256(body).digest() != digest:
        raise SystemExit(f"client: SHA-256 mismatch over {len(body)} bytes received")
    print(f"client: received {len(body)} bytes, SHA-256 {hashlib.sha256(body).hexdigest()} OK",
          flush=True)
    c.close()


if __name__ == "__main__":
    main()
