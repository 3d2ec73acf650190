#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""asyncio client for test_rspreload_apps.sh (run through librspreload).

usage: rspreload_asyncio_client.py PORT NBYTES
The protocol of rspreload_sha_client.py with asyncio streams (epoll)."""
import asyncio
import hashlib
import os
import sys


async def main():
    port, nbytes = int(sys.argv[1]), int(sys.argv[2])
    r, w = await asyncio.open_connection("127.0.0.1", port)
    data = os.urandom(nbytes)
    w.write(nbytes.to_bytes(8, "big") + data + hashlib.sha256(data).digest())
    await w.drain()
    got = await r.read()
    body, digest = got[:-32], got[-32:]
    if len(got) < 32 or hashlib.sha256(body).digest() != digest:
        raise SystemExit(f"client: SHA-256 mismatch over {len(body)} bytes received")
    print(f"client: received {len(body)} bytes, SHA-256 OK", flush=True)
    w.close()
    await w.wait_closed()


if __name__ == "__main__":
    asyncio.run(main())
