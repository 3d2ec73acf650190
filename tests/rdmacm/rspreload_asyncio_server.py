#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""asyncio server for test_rspreload_apps.sh (run through librspreload).

usage: rspreload_asyncio_server.py PORT NBYTES
The protocol of rspreload_sha_server.py with asyncio streams (epoll: the
listening socket and the connection wait in the event loop): one
connection on 127.0.0.1:PORT; reads an 8-byte length, that many bytes and
their SHA-256 and checks it; sends NBYTES random bytes and their SHA-256,
then closes its writing side. Exit 0 only if every check passed."""
import asyncio
import hashlib
import os
import sys


async def main():
    port, nbytes = int(sys.argv[1]), int(sys.argv[2])
    done = asyncio.get_running_loop().create_future()

    async def serve(r, w):
        try:
            n = int.from_bytes(await r.readexactly(8), "big")
            body = await r.readexactly(n)
            if hashlib.sha256(body).digest() != await r.readexactly(32):
                raise SystemExit(f"server: SHA-256 mismatch over {n} bytes received")
            print(f"server: received {n} bytes, SHA-256 OK", flush=True)
            data = os.urandom(nbytes)
            w.write(data + hashlib.sha256(data).digest())
            await w.drain()
            w.write_eof()
            if await r.read() != b"":
                raise SystemExit("server: data after the client's end of stream")
            w.close()
            print(f"server: sent {nbytes} bytes", flush=True)
            done.set_result(0)
        except BaseException as e:  # the check's outcome, whatever it is
            done.set_exception(e)

    srv = await asyncio.start_server(serve, "127.0.0.1", port)
    async with srv:
        await done


if __name__ == "__main__":
    asyncio.run(main())
