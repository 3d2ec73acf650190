#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""iperf3 JSON check for test_rspreload_apps.sh.

usage: rspreload_iperf_check.py CLIENT.json SERVER.json
Both runs ended without an error, data moved, and the server's own count
is the client's summary of it."""
import json
import sys


def load(path):
    with open(path) as f:
        j = json.load(f)
    if "error" in j:
        raise SystemExit(f"{path}: iperf3 error: {j['error']}")
    return j["end"]


def main():
    c, s = load(sys.argv[1]), load(sys.argv[2])
    if c["sum_received"]["bytes"] <= 0 or c["sum_sent"]["bytes"] <= 0:
        raise SystemExit("client: nothing sent or received")
    # the server reports its own side only: what it received (or, with -R,
    # sent) is what the client's summary says the receiver got
    srv_recv, srv_sent = s["sum_received"]["bytes"], s["sum_sent"]["bytes"]
    if max(srv_recv, srv_sent) <= 0:
        raise SystemExit("server: nothing sent or received")
    if srv_recv != c["sum_received"]["bytes"] and srv_sent != c["sum_sent"]["bytes"]:
        raise SystemExit(f"client and server disagree: client {c['sum_sent']['bytes']} sent "
                         f"{c['sum_received']['bytes']} received, server {srv_sent} sent "
                         f"{srv_recv} received")
    r = c["sum_received"]
    print(f"iperf3: {r['bytes']} bytes received in {r['seconds']:.2f} s, "
          f"{r['bits_per_second'] / 1e9:.2f} Gb/s, {len(c['streams'])} stream(s), both ends clean")


if __name__ == "__main__":
    main()
