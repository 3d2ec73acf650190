#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Helpers for tests/test_dump*.sh (standard library only).

  dump_tools.py compare DUMP_OUTPUT TSHARK_TXT
      Compare `uiwarp dump` output with a siw-pcap-decode .txt file: per TCP
      direction the opcode sequence of the FPDUs (tshark may show several
      FPDUs in one frame, or an FPDU at the frame where it completes), the
      MPA Request/Reply fields, and the CRC good count.
  dump_tools.py flip IN.pcap OUT.pcap
      Copy a classic pcap, flipping one ULP payload byte inside the first
      FPDU that carries at least 16 payload bytes after the MPA exchange.
      Prints the frame number changed.
  dump_tools.py reorder IN.pcap OUT.pcap
      Copy a classic pcap with one TCP data segment duplicated and the first
      two consecutive data segments of one direction swapped. Prints the
      frame numbers involved.
  dump_tools.py CMD ARGS -- CMD ARGS -- ...
      Several commands in one run; each one's output follows a line
      "@@ CMD FIRST_ARG"; the exit status is the worst one.
"""
import re
import struct
import sys

# ---------------------------------------------------------------------------
# pcap (classic) reading/writing

def read_pcap(path):
    data = open(path, "rb").read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise SystemExit(f"{path}: not a classic pcap file")
    hdr = data[:24]
    linktype = struct.unpack(e + "I", data[20:24])[0]
    recs = []
    off = 24
    while off + 16 <= len(data):
        ts_s, ts_u, incl, orig = struct.unpack(e + "IIII", data[off:off + 16])
        recs.append([data[off:off + 16], bytearray(data[off + 16:off + 16 + incl])])
        off += 16 + incl
    return hdr, linktype, recs


def write_pcap(path, hdr, recs):
    with open(path, "wb") as f:
        f.write(hdr)
        for rh, body in recs:
            f.write(rh)
            f.write(bytes(body))


def tcp_of(linktype, frame):
    """(payload offset, payload length, src, dst, seq) of an Ethernet/IPv4 TCP frame."""
    if linktype != 1 or len(frame) < 54:
        return None
    if frame[12:14] != b"\x08\x00":
        return None
    ip = 14
    ihl = (frame[ip] & 0x0F) * 4
    total = struct.unpack(">H", frame[ip + 2:ip + 4])[0]
    if frame[ip + 9] != 6:
        return None
    tcp = ip + ihl
    doff = (frame[tcp + 12] >> 4) * 4
    pay = tcp + doff
    plen = ip + total - pay
    src = (bytes(frame[ip + 12:ip + 16]), frame[tcp:tcp + 2])
    dst = (bytes(frame[ip + 16:ip + 20]), frame[tcp + 2:tcp + 4])
    seq = struct.unpack(">I", frame[tcp + 4:tcp + 8])[0]
    return pay, plen, bytes(src[0]) + bytes(src[1]), bytes(dst[0]) + bytes(dst[1]), seq


def flip(inp, out):
    hdr, lt, recs = read_pcap(inp)
    for i, (rh, body) in enumerate(recs):
        t = tcp_of(lt, body)
        if not t:
            continue
        pay, plen, _, _, _ = t
        p = bytes(body[pay:pay + plen])
        if plen < 40 or p.startswith(b"MPA ID Re"):
            continue
        ulpdu = struct.unpack(">H", p[0:2])[0]
        ctrl = p[2]
        hlen = 14 if ctrl & 0x80 else 18
        payload = ulpdu - hlen
        if ulpdu + 6 > plen or payload < 16:
            continue
        pos = pay + 2 + hlen + payload // 2
        body[pos] ^= 0x5A
        write_pcap(out, hdr, recs)
        print(i + 1)
        return
    raise SystemExit("no suitable FPDU found")


def reorder(inp, out):
    hdr, lt, recs = read_pcap(inp)
    data = []
    for i, (rh, body) in enumerate(recs):
        t = tcp_of(lt, body)
        if t and t[1] > 0:
            data.append((i, t[2]))
    # first pair of adjacent frames that are both data from the same sender
    pair = None
    for k in range(len(data) - 1):
        i, s = data[k]
        j, s2 = data[k + 1]
        if j == i + 1 and s == s2 and k > 2:
            pair = (i, j)
            break
    if not pair:
        raise SystemExit("no adjacent same-direction data segments")
    i, j = pair
    recs[i], recs[j] = recs[j], recs[i]
    # duplicate a data segment (a retransmission) a few frames later
    dup_src = data[len(data) // 2][0]
    if dup_src in (i, j):
        dup_src = data[len(data) // 2 + 1][0]
    rec = [recs[dup_src][0], bytearray(recs[dup_src][1])]
    recs.insert(min(dup_src + 3, len(recs)), rec)
    write_pcap(out, hdr, recs)
    print(f"swapped {i + 1} {j + 1} duplicated {dup_src + 1}")


# ---------------------------------------------------------------------------
# comparison with siw-pcap-decode output

OPS = [
    ("read response", 2), ("read request", 1), ("write", 0),
    ("send with se and invalidate", 6), ("send with solicited event and invalidate", 6),
    ("send with se", 5), ("send with solicited event", 5), ("send with invalidate", 4),
    ("send", 3), ("terminate", 7),
    ("immediate data with se", 9), ("immediate data", 8),
    ("atomic request", 10), ("atomic response", 11),
]


def opnum(name):
    n = name.lower().replace("rdma ", "").strip()
    for key, v in OPS:
        if n == key:
            return v
    for key, v in OPS:
        if n.startswith(key):
            return v
    raise SystemExit(f"unknown opcode name {name!r}")


TS_FPDU = re.compile(
    r"(\d+) > (\d+) (Write|Read Request|Read Response|Send with SE and Invalidate|"
    r"Send with SE|Send with Invalidate|Send|Terminate) \[(?:last|more) DDP segments?\]")
TS_MPA = re.compile(
    r"^frame (\d+) (REQUEST|REPLY)\s+(\d+)->(\d+) rev=(\d+) M=(\d) C=(\d) R=(\d) "
    r"res=0x([0-9a-f]+) enhanced\(0x10\)=(\d) pd_len=(\d+) pd=(\S+)")
TS_6581 = re.compile(
    r"RFC6581: IRD=(\d+) ORD=(\d+)\s+P2P\(ird&0x8000\)=(\d) ZLEN-RTR\(ird&0x4000\)=(\d)\s+"
    r"WRITE-RTR\(ord&0x8000\)=(\d) READ-RTR\(ord&0x4000\)=(\d)")
TS_CRC = re.compile(r"FPDUs=(\d+) good=(\d+) bad=(\d+)")

DU_CONN = re.compile(r"^-- c(\d+): a=\S+:(\d+) \(MPA initiator\) b=\S+:(\d+)")
DU_FPDU = re.compile(r"^\s*(\d+)\s+[\d.]+ c(\d+) (a>b|b>a) (.+?)\s+T=(\d) L=(\d)")
DU_MPA = re.compile(
    r"^\s*(\d+)\s+[\d.]+ c(\d+) (a>b|b>a) MPA (Request|Reply)\s+rev=(\d+) M=(\d) C=(\d) "
    r"R=(\d) S=(\d) res=0x([0-9a-f]+) flags=0x([0-9a-f]+) pd_len=(\d+)(.*)")
DU_WORDS = re.compile(
    r"IRD=(\d+) ORD=(\d+) A\(p2p\)=(\d) B\(send-rtr\)=(\d) C\(write-rtr\)=(\d) "
    r"D\(read-rtr\)=(\d)")
DU_CRC = re.compile(r"^\s+CRC: good (\d+), bad (\d+), not negotiated (\d+)")


def parse_tshark(path):
    seqs, mpas, crc = {}, [], None
    section = None
    last_mpa = None
    for line in open(path, encoding="utf-8", errors="replace"):
        if line.startswith("== "):
            section = line.strip()
            continue
        if section and section.startswith("== iWARP frames"):
            for sp, dp, op in TS_FPDU.findall(line):
                seqs.setdefault((int(sp), int(dp)), []).append(opnum(op))
        elif section and section.startswith("== MPA"):
            m = TS_MPA.match(line.strip())
            if m:
                last_mpa = {
                    "kind": m.group(2).lower(), "sport": int(m.group(3)),
                    "dport": int(m.group(4)), "rev": int(m.group(5)), "M": int(m.group(6)),
                    "C": int(m.group(7)), "R": int(m.group(8)),
                    "S": int(m.group(10)), "pd_len": int(m.group(11)),
                }
                mpas.append(last_mpa)
                continue
            m = TS_6581.search(line)
            if m and last_mpa:
                last_mpa.update({"IRD": int(m.group(1)), "ORD": int(m.group(2)),
                                 "A": int(m.group(3)), "B": int(m.group(4)),
                                 "Cw": int(m.group(5)), "D": int(m.group(6))})
        elif section and section.startswith("== CRC"):
            m = TS_CRC.search(line)
            if m:
                crc = {"fpdus": int(m.group(1)), "good": int(m.group(2)),
                       "bad": int(m.group(3))}
    return seqs, mpas, crc


def parse_dump(path):
    conns, seqs, mpas = {}, {}, []
    crc_good = crc_bad = None
    in_total = False
    for line in open(path, encoding="utf-8", errors="replace"):
        m = DU_CONN.match(line)
        if m:
            conns[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
            continue
        m = DU_MPA.match(line)
        if m:
            c = int(m.group(2))
            a, b = conns[c]
            sp, dp = (a, b) if m.group(3) == "a>b" else (b, a)
            e = {"kind": "request" if m.group(4) == "Request" else "reply", "sport": sp,
                 "dport": dp, "rev": int(m.group(5)), "M": int(m.group(6)),
                 "C": int(m.group(7)), "R": int(m.group(8)), "S": int(m.group(9)),
                 "pd_len": int(m.group(12))}
            w = DU_WORDS.search(m.group(13))
            if w:
                e.update({"IRD": int(w.group(1)), "ORD": int(w.group(2)), "A": int(w.group(3)),
                          "B": int(w.group(4)), "Cw": int(w.group(5)), "D": int(w.group(6))})
            mpas.append(e)
            continue
        m = DU_FPDU.match(line)
        if m and "MPA " not in m.group(4) and "bad FPDU" not in m.group(4):
            c = int(m.group(2))
            a, b = conns[c]
            key = (a, b) if m.group(3) == "a>b" else (b, a)
            seqs.setdefault(key, []).append(opnum(m.group(4)))
            continue
        if line.startswith("== total"):
            in_total = True
        m = DU_CRC.match(line)
        if m and in_total:
            crc_good, crc_bad = int(m.group(1)), int(m.group(2))
    return seqs, mpas, crc_good, crc_bad


def compare(dump_out, txt):
    tseqs, tmpas, tcrc = parse_tshark(txt)
    dseqs, dmpas, dgood, dbad = parse_dump(dump_out)
    errors = []
    # FPDU opcode sequences per direction
    if set(tseqs) != set(dseqs):
        errors.append(f"directions differ: tshark {sorted(tseqs)} dump {sorted(dseqs)}")
    nf = 0
    for key in sorted(set(tseqs) | set(dseqs)):
        t, d = tseqs.get(key, []), dseqs.get(key, [])
        nf += len(d)
        if t != d:
            errors.append(f"{key[0]}>{key[1]}: opcode sequence differs:\n  tshark {t}\n  dump   {d}")
    # MPA frames (both lists are in capture order)
    if len(tmpas) != len(dmpas):
        errors.append(f"MPA frames: tshark {len(tmpas)}, dump {len(dmpas)}")
    for t, d in zip(tmpas, dmpas):
        for k, v in t.items():
            if d.get(k) != v:
                errors.append(f"MPA {t['kind']} {t['sport']}->{t['dport']}: {k} tshark {v} "
                              f"dump {d.get(k)}")
    # CRC verdicts
    if tcrc is None or dgood is None:
        errors.append("CRC summary missing")
    else:
        if tcrc["good"] != dgood:
            errors.append(f"CRC good: tshark {tcrc['good']}, dump {dgood}")
        if tcrc["bad"] != dbad:
            errors.append(f"CRC bad: tshark {tcrc['bad']}, dump {dbad}")
        if tcrc["fpdus"] != nf:
            errors.append(f"FPDU count: tshark {tcrc['fpdus']}, dump {nf}")
    for e in errors:
        print("MISMATCH " + e)
    print(f"compared: {nf} FPDUs in {len(dseqs)} directions, {len(dmpas)} MPA frames, "
          f"CRC good {dgood}: {'OK' if not errors else 'FAILED'}")
    return 1 if errors else 0


def run_one(args):
    if len(args) == 3 and args[0] == "compare":
        return compare(args[1], args[2])
    if len(args) == 3 and args[0] == "flip":
        flip(args[1], args[2])
        return 0
    if len(args) == 3 and args[0] == "reorder":
        reorder(args[1], args[2])
        return 0
    print(__doc__)
    return 2


def main():
    # Several commands in one process (python starts slowly): separate them
    # with "--"; each prints "@@ <command> <output file or dump output>" first.
    cmds, cur = [], []
    for a in sys.argv[1:]:
        if a == "--":
            cmds.append(cur)
            cur = []
        else:
            cur.append(a)
    cmds.append(cur)
    rc = 0
    for c in cmds:
        if len(cmds) > 1:
            print("@@ " + " ".join(c[:2]), flush=True)
        try:
            rc = max(rc, run_one(c))
        except SystemExit as e:
            print(f"ERROR {e}")
            rc = max(rc, 1)
    sys.exit(rc)


if __name__ == "__main__":
    main()
