#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Every RDMA Write of an rsocket connection inside what its peer advertised.

Reads `uiwarp dump -x 24 CAPTURE` (or its saved output) and, for each iWARP
connection whose MPA private data is rsocket connection data (version 1,
docs/RSOCKETS.md "Wire format"), collects what each side advertised to the
other:
  - in its private data: the target area (target SGL slots, then the iomap
    array; one key) and the first half of its receive buffer;
  - SGL grants: 16-byte Writes {addr, key, length} into the other side's
    target SGL slots;
  - iomap entries: 24-byte Writes {offset, addr, key, length} into the other
    side's iomap array (riomap'd buffers);
then checks each tagged Write segment (STag, TO, payload length) against the
regions its receiver had advertised before it: same key, and TO..TO+len
inside. Byte order: little-endian hosts on both sides (the rsocket "NET"
flag clear), as in the siw interop rig.

Output: one line per connection checked, every Write outside ("OUTSIDE"),
a total. Exit status 1 if a Write lay outside, else 0.
Usage: rsocket_bounds.py [--dump UIWARP] CAPTURE|DUMP.txt ...
"""
import re
import struct
import subprocess
import sys

HDR = re.compile(r'^\s*(\d+)\s+\S+\s+(c\d+) (a>b|b>a) ')
PD = re.compile(r' (c\d+) (a>b|b>a) MPA (Request|Reply)\s.*ulp_pd=([0-9a-f]+)')
WR = re.compile(r' (c\d+) (a>b|b>a) RDMA Write\s+T=1 L=(\d) STag=(0x[0-9a-f]+) '
                r'TO=(0x[0-9a-f]+) ulpdu=\d+ payload=(\d+)')
PAY = re.compile(r'^\s+payload: ([0-9a-f ]+)$')


def unscale(v):  # the wire's 8-bit iomap size (rdma-core rs_scale_to_value)
    return v if v <= 128 else (v & 0x7f) << 8


def rev(d):
    return 'b>a' if d == 'a>b' else 'a>b'


def lines_of(path, dump):
    if path.endswith('.txt'):
        with open(path, errors='replace') as f:
            yield from f
        return
    p = subprocess.Popen([dump, 'dump', '-x', '24', path], stdout=subprocess.PIPE, text=True,
                         errors='replace')
    yield from p.stdout
    p.wait()


def check(path, dump):
    conns = {}  # cN -> {'pd': {dir: (...)}, 'regions': {dir: [...]}, 'writes': n}
    bad = 0
    pending = None  # a Write whose payload line may follow
    for line in lines_of(path, dump):
        m = PAY.match(line)
        if m and pending:
            c, d, stag, to, n = pending
            pending = None
            advert(conns[c], d, stag, to, n, bytes.fromhex(m.group(1).replace(' ', '')))
            continue
        pending = None
        m = PD.search(line)
        if m:
            c, d, pd = m.group(1), m.group(2), bytes.fromhex(m.group(4))
            st = conns.setdefault(c, {'pd': {}, 'regions': {'a>b': [], 'b>a': []},
                                      'writes': 0, 'rs': True})
            if len(pd) < 40 or pd[0] != 1:
                st['rs'] = False
                continue
            iomap = pd[7]  # version, flags, credits, reserved, then this
            ta, tk, tl, da, dk, dl = struct.unpack_from('>QII QII', pd, 8)
            st['pd'][d] = (ta, tk, tl, unscale(iomap))
            # what side d advertised: regions the other side may write
            st['regions'][d] += [(tk, ta, ta + 16 * tl + 24 * unscale(iomap), 'target area'),
                                 (dk, da, da + dl, 'receive buffer')]
            continue
        m = WR.search(line)
        if m:
            c, d = m.group(1), m.group(2)
            st = conns.get(c)
            if not st or not st['rs'] or len(st['pd']) < 2:
                continue
            stag, to, n = int(m.group(4), 16), int(m.group(5), 16), int(m.group(6))
            pending = (c, d, stag, to, n)
            if n == 0:
                continue
            st['writes'] += 1
            ok = any(k == stag and lo <= to and to + n <= hi for k, lo, hi, _ in
                     st['regions'][rev(d)])
            if not ok:
                bad += 1
                near = [f'{w}: key 0x{k:08x} [0x{lo:x}, 0x{hi:x})'
                        for k, lo, hi, w in st['regions'][rev(d)] if k == stag]
                print(f'OUTSIDE {path} frame {HDR.match(line).group(1) if HDR.match(line) else "?"}'
                      f' {c} {d} Write STag 0x{stag:08x} TO 0x{to:x} len {n}; advertised with'
                      f' that key: {"; ".join(near) or "none"}')
    n = sum(1 for st in conns.values() if st['rs'] and len(st['pd']) == 2)
    print(f'{path}: {n} rsocket connections, '
          f'{sum(st["writes"] for st in conns.values() if st["rs"])} Write segments checked, '
          f'{bad} outside')
    return bad


def advert(st, d, stag, to, n, pay):
    """A Write by side d into the other side's target area: a grant or an
    iomap entry of side d (regions the other side may write into d)."""
    if not st['rs'] or len(st['pd']) < 2:
        return
    ta, tk, tl, im = st['pd'][rev(d)]  # the receiver's (rev(d)) target area
    if stag != tk or len(pay) < n:
        return
    if n == 16 and ta <= to < ta + 16 * tl:
        addr, key, length = struct.unpack('<QII', pay)
        st['regions'][d].append((key, addr, addr + length, 'SGL grant'))
    elif n == 24 and ta + 16 * tl <= to < ta + 16 * tl + 24 * im:
        off, addr, key, length = struct.unpack('<QQII', pay)
        st['regions'][d].append((key, addr, addr + length, 'iomap entry'))


def main(argv):
    dump = 'uiwarp'
    if len(argv) > 2 and argv[1] == '--dump':
        dump = argv[2]
        argv = argv[2:]
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1])
        return 2
    return 1 if sum(check(p, dump) for p in argv[1:]) else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
