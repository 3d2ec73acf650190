#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
#
# tests/siw/rsocket_bounds.py on a decoded capture (`uiwarp dump -x 24`, the
# start of an rdma-core riostream client over siw against uiwarp's rsocket
# server, from the siw interop rig): the Writes inside what each side
# advertised pass; the same trace with one riowrite segment moved 64 KiB up
# (past the riomap'd buffer's end), or the client's first data Write moved
# across the end of the receive buffer's first half, fails, naming the Write
# and what was advertised with its key.
set -u
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/good.txt" <<'TRACE'
## capture.pcap (Ethernet)
-- c1: a=10.0.2.15:45738 (MPA initiator) b=10.0.2.2:14737 (responder), TCP from its SYN
     9   1.274427 c1 a>b MPA Request rev=2 M=0 C=0 R=0 S=1 res=0x0 flags=0x10 pd_len=44 IRD=0 ORD=1 A(p2p)=0 B(send-rtr)=0 C(write-rtr)=0 D(read-rtr)=0 words=00000001 ulp_pd=0102018000000001000055a84da400004afdd5000000000200007f8b2cd3700088fa120000080000 (64 bytes)
    11   1.275146 c1 b>a MPA Reply   rev=2 M=0 C=0 R=0 S=1 res=0x0 flags=0x10 pd_len=44 IRD=1 ORD=0 A(p2p)=0 B(send-rtr)=0 C(write-rtr)=0 D(read-rtr)=0 words=00010000 ulp_pd=01020180000000010000555ab647b210d23a35aa0000000200007f5239205010858f8b0200080000 (64 bytes)
    11   1.275146 c1     negotiated: rev 2/2, RFC 6581 enhanced, CRC off, markers a>b off b>a off, a IRD/ORD 0/1, b IRD/ORD 1/0, client-server (no RTR)
    13   1.279522 c1 a>b RDMA Write          T=1 L=1 STag=0xd23a35aa TO=0x555ab647b220 ulpdu=30 payload=16 crc=off
                        payload: 00 70 db 2c 8b 7f 00 00 00 12 fa 88 00 00 08 00
    15   1.279624 c1 b>a RDMA Write          T=1 L=1 STag=0x4afdd500 TO=0x55a84da40010 ulpdu=30 payload=16 crc=off
                        payload: 10 50 28 39 52 7f 00 00 02 8b 8f 85 00 00 08 00
    15   1.279624 c1 b>a Send                T=0 L=1 QN=0 MSN=1 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 80 01 00 80
    16   1.280189 c1 a>b Send                T=0 L=1 QN=0 MSN=1 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 80 01 00 80
    17   1.281518 c1 a>b RDMA Write          T=1 L=1 STag=0xd23a35aa TO=0x555ab647b230 ulpdu=38 payload=24 crc=off
                        payload: 00 00 00 00 00 00 00 00 10 e8 a1 4d a8 55 00 00 00 fa 4b 98 00 00 01 00
    19   1.281643 c1 a>b Send                T=0 L=1 QN=0 MSN=2 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 00 00 00 c0
    21   1.284087 c1 a>b RDMA Write          T=1 L=1 STag=0x858f8b02 TO=0x7f5239205010 ulpdu=30 payload=16 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    23   1.284188 c1 a>b Send                T=0 L=1 QN=0 MSN=3 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 10 00 00 00
    25   1.284219 c1 b>a RDMA Write          T=1 L=1 STag=0x4afdd500 TO=0x55a84da40020 ulpdu=38 payload=24 crc=off
                        payload: 00 00 00 00 00 00 00 00 a0 72 46 b6 5a 55 00 00 27 24 93 7e 00 00 01 00
    25   1.284219 c1 b>a Send                T=0 L=1 QN=0 MSN=2 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 00 00 00 c0
    26   1.284237 c1 b>a RDMA Write          T=1 L=1 STag=0x88fa1200 TO=0x7f8b2cd37000 ulpdu=30 payload=16 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    26   1.284237 c1 b>a Send                T=0 L=1 QN=0 MSN=3 MO=0 ulpdu=22 payload=4 crc=off
                        payload: 10 00 00 00
    28   1.290555 c1 a>b RDMA Write          T=1 L=0 STag=0x7e932427 TO=0x555ab64672a0 ulpdu=1450 payload=1436 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ...
    30   1.290686 c1 a>b RDMA Write          T=1 L=1 STag=0x7e932427 TO=0x555ab646783c ulpdu=626 payload=612 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ...
    32   1.290714 c1 a>b RDMA Write          T=1 L=0 STag=0x7e932427 TO=0x555ab6467aa0 ulpdu=1450 payload=1436 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ...
    34   1.290730 c1 a>b RDMA Write          T=1 L=0 STag=0x7e932427 TO=0x555ab646803c ulpdu=1450 payload=1436 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ...
    36   1.291637 c1 a>b RDMA Write          T=1 L=1 STag=0x7e932427 TO=0x555ab64685d8 ulpdu=1238 payload=1224 crc=off
                        payload: 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 ...
    38   1.291673 c1 a>b RDMA Write          T=1 L=0 STag=0x7e932427 TO=0x555ab6468aa0 ulpdu=1450 payload=1436 crc=off
TRACE
fail=0
out=$(python3 "$here/rsocket_bounds.py" "$tmp/good.txt") ||
    { echo "FAIL: the recorded trace: $out"; fail=1; }
grep -q '1 rsocket connections, 1[0-9] Write segments checked, 0 outside' <<<"$out" ||
    { echo "FAIL: unexpected summary: $out"; fail=1; }
# a riowrite segment past the end of the 64 KiB riomap'd buffer
sed 's/STag=0x7e932427 TO=0x555ab6467aa0/STag=0x7e932427 TO=0x555ab6477aa0/' "$tmp/good.txt" >"$tmp/bad1.txt"
if out=$(python3 "$here/rsocket_bounds.py" "$tmp/bad1.txt"); then
    echo "FAIL: a Write past the iomap entry passed: $out"; fail=1
fi
grep -q 'OUTSIDE .* Write STag 0x7e932427 TO 0x555ab6477aa0 len 1436; advertised with that key: iomap entry: key 0x7e932427 \[0x555ab64672a0, 0x555ab64772a0)' <<<"$out" ||
    { echo "FAIL: bad1 not reported as expected: $out"; fail=1; }
# the 16-byte data Write into the server's receive buffer moved across the
# end of the first half (private data) into the granted second half
sed 's/STag=0x858f8b02 TO=0x7f5239205010/STag=0x858f8b02 TO=0x7f5239285008/' "$tmp/good.txt" >"$tmp/bad2.txt"
if out=$(python3 "$here/rsocket_bounds.py" "$tmp/bad2.txt"); then
    echo "FAIL: a Write past the receive buffer passed: $out"; fail=1
fi
grep -q 'OUTSIDE .* STag 0x858f8b02 TO 0x7f5239285008 len 16' <<<"$out" ||
    { echo "FAIL: bad2 not reported as expected: $out"; fail=1; }
[ $fail = 0 ] && echo "PASS: rsocket_bounds.py"
exit $fail
