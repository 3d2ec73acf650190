#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plain-socket server for test_rspreload_apps.sh (run through librspreload).

usage: rspreload_sha_server.py [--fork] PORT NBYTES
Accepts one connection on 127.0.0.1:PORT. Reads an 8-byte length, that many
bytes and their SHA-256 (32 bytes) and checks the digest; then sends NBYTES
random bytes in random-sized pieces, their SHA-256, and shuts down its
writing side (the client reads to end of stream). Exit 0 only if every
check passed. --fork: a child process serves the connection, as in
socketserver.ForkingTCPServer."""
import hashlib
import os
import random
import socket
import sys


def recv_exact(c, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = c.recv_into(view[got:], min(n - got, random.randint(1, 1 << 18)))
        if k == 0:
            raise SystemExit(f"server: end of stream after {got} of {n} bytes")
        got += k
    return bytes(buf)


def main():
    fork = sys.argv[1:2] == ["--fork"]
    port, nbytes = int(sys.argv[1 + fork]), int(sys.argv[2 + fork])
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(4)
    c, peer = s.accept()
    if fork:
        # as socketserver.ForkingTCPServer: the child serves, the parent
        # closes its copy of the connection
        pid = os.fork()
        if pid:
            c.close()
            _, status = os.waitpid(pid, 0)
            raise SystemExit(os.waitstatus_to_exitcode(status))
        s.close()
    print(f"server: accepted {peer}, local {c.getsockname()}, peer {c.getpeername()}", flush=True)
    if c.getpeername() != peer or c.getsockname() != ("127.0.0.1", port):
        raise SystemExit("server: getpeername/getsockname disagree with accept")
    n = int.from_bytes(recv_exact(c, 8), "big")
    h = hashlib.sha256()
    left = n
    while left:
        chunk = recv_exact(c, min(left, 1 << 20))
        h.update(chunk)
        left -= len(chunk)
    want = recv_exact(c, 32)
    if h.digest() != want:
        raise SystemExit(f"server: SHA-256 mismatch over {n} bytes received")
    print(f"server: received {n} bytes, SHA-256 {h.hexdigest()} OK", flush=True)

    data = os.urandom(nbytes)
    off = 0
    while off < nbytes:
        k = min(nbytes - off, random.randint(1, 1 << 18))
        c.sendall(data[off:off + k])
        off += k
    c.sendall(hashlib.sha256(data).digest())
    c.shutdown(socket.SHUT_WR)
    print(f"server: sent {nbytes} bytes, SHA-256 {hashlib.sha256(data).hexdigest()}", flush=True)
    # the client closes once it has everything: end of stream here
    if c.recv(1) != b"":
        raise SystemExit("server: data after the client's end of stream")
    c.close()
    s.close()


if __name__ == "__main__":
    main()
