#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""A plain Python socket ping-pong: blocking sockets, TCP_NODELAY, the
client sends SIZE bytes and waits for them back (MSG_WAITALL), ITERS times
after 1000 warm-up round trips, checking every byte, and prints the mean
microseconds per round trip. Run it over the kernel's TCP, then through
rsockets with `uiwarp run --rsockets` on both sides (docs/RSOCKETS.md):
what a socket program gets from librspreload.so over uiwarp.

usage: rspreload_pingpong.py server PORT [SIZE]
       rspreload_pingpong.py client PORT [SIZE] [ITERS]
"""
import socket
import sys
import time


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("server", "client"):
        print("\n".join(__doc__.strip().splitlines()[-2:]), file=sys.stderr)
        return 2
    port = int(sys.argv[2])
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    iters = int(sys.argv[4]) if len(sys.argv) > 4 else 20000
    if sys.argv[1] == "server":
        lst = socket.socket()
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind(("127.0.0.1", port))
        lst.listen(1)
        c, _ = lst.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(size, socket.MSG_WAITALL)
            if not b:
                return 0
            c.sendall(b)
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = bytes(i & 0xFF for i in range(size))
    for _ in range(1000):
        c.sendall(msg)
        c.recv(size, socket.MSG_WAITALL)
    t = time.perf_counter()
    for _ in range(iters):
        c.sendall(msg)
        if c.recv(size, socket.MSG_WAITALL) != msg:
            print("data mismatch", file=sys.stderr)
            return 1
    print("%d bytes: %.2f us per round trip" % (size, (time.perf_counter() - t) / iters * 1e6))
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
