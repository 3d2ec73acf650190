#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plot bench_apps.sh's CSV as an SVG: one panel each for bandwidth,
message rate, latency and CPU cost rows, each a grouped bar chart of the ratio uiwarp / TCP (same
run) per program and message size, with the 1.0 line (TCP) drawn across.
For bandwidth higher is better; for latency lower is better.

usage: bench/plot.py CSV SVG [--title TEXT]
Standard library only (no plotting package needed)."""
import csv
import html
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            try:
                ratio = float(r["ratio"])
            except (KeyError, ValueError):
                continue
            if r.get("result") != "PASS":
                continue
            rows.append((r["program"] + (" " + r["mode"] if r["mode"] not in ("bw", "lat") else ""),
                         r["size"], ratio, r["tcp_metric"]))
    return rows


COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
          "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def panel(out, rows, x0, y0, w, h, title, better):
    sizes = sorted({s for _, s, _, _ in rows}, key=lambda s: int(s) if s.isdigit() else 0)
    progs = []
    for p, _, _, _ in rows:
        if p not in progs:
            progs.append(p)
    vals = {(p, s): v for p, s, v, _ in rows}
    top = max([v for v in vals.values()] + [1.2]) * 1.1
    out.append(f'<text x="{x0 + w / 2}" y="{y0 - 10}" text-anchor="middle" font-size="15" '
               f'font-weight="bold">{html.escape(title)} ({better})</text>')
    left, bottom = 50, 40
    pw, ph = w - left - 10, h - bottom
    out.append(f'<rect x="{x0 + left}" y="{y0}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
    for i in range(0, 6):
        v = top * i / 5
        y = y0 + ph - ph * v / top
        out.append(f'<line x1="{x0 + left}" y1="{y:.1f}" x2="{x0 + left + pw}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 + left - 5}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{v:.2f}</text>')
    gw = pw / max(1, len(sizes))
    bw = gw * 0.8 / max(1, len(progs))
    for gi, s in enumerate(sizes):
        gx = x0 + left + gi * gw + gw * 0.1
        for pi, p in enumerate(progs):
            v = vals.get((p, s))
            if v is None:
                continue
            bh = ph * v / top
            out.append(f'<rect x="{gx + pi * bw:.1f}" y="{y0 + ph - bh:.1f}" width="{bw * 0.9:.1f}" '
                       f'height="{bh:.1f}" fill="{COLORS[pi % len(COLORS)]}">'
                       f'<title>{html.escape(p)} {s} B: {v:.2f}</title></rect>')
        label = s if not s.isdigit() else (f"{int(s) // 1048576} MiB" if int(s) >= 1048576 else
                                           f"{int(s) // 1024} KiB" if int(s) >= 1024 else f"{s} B")
        out.append(f'<text x="{gx + gw * 0.4:.1f}" y="{y0 + ph + 16}" text-anchor="middle" '
                   f'font-size="12">{label}</text>')
    y1 = y0 + ph - ph * 1.0 / top
    out.append(f'<line x1="{x0 + left}" y1="{y1:.1f}" x2="{x0 + left + pw}" y2="{y1:.1f}" '
               f'stroke="#000" stroke-dasharray="6,3"/>')
    out.append(f'<text x="{x0 + left + pw - 4}" y="{y1 - 4:.1f}" text-anchor="end" font-size="11">TCP = 1</text>')
    for pi, p in enumerate(progs):
        lx = x0 + left + 8 + (pi % 3) * (pw / 3)
        ly = y0 + ph + 30 + (pi // 3) * 16
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{COLORS[pi % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 14:.1f}" y="{ly}" font-size="11">{html.escape(p)}</text>')
    return (len(progs) + 2) // 3 * 16


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    rows = load(sys.argv[1])
    title = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--title" else "uiwarp / TCP"
    bw = [r for r in rows if r[3] == "tcp_bw" or r[3].endswith("(bw)")]
    rate = [r for r in rows if r[3] == "tcp_bw / size"]
    cost = [r for r in rows if r[3] == "tcp_bw send_cost"]
    lat = [r for r in rows if r[3] in ("tcp_lat", "2 x tcp_lat") or r[3].endswith("(lat)")]
    W, H = 960, 360
    out = []
    y = 50
    for part, name, better in ((bw, "bandwidth", "higher is better"),
                               (rate, "message rate", "higher is better"),
                               (lat, "latency", "lower is better"),
                               (cost, "CPU cost (send_cost)", "lower is better")):
        if part:
            extra = panel(out, part, 0, y, W, H, f"{title}: {name}", better)
            y += H + extra + 70
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{y}" '
           f'font-family="sans-serif">', f'<rect width="{W}" height="{y}" fill="white"/>'] + out + ["</svg>"]
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
