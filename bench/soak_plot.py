#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Plot bench_soak's CSV as an SVG (no plotting library: plain SVG).

usage: soak_plot.py SOAK.csv OUT.svg

Four panels sharing the time axis: fds of both processes, RSS of both
processes (MiB), operations per second with the connected QPs, and the
cumulative error counts (completions in error and connections lost after
faults, verify errors, stalls) with a tick per fault (kills in red).
"""
import csv
import sys
from html import escape

W, PANEL_H, LEFT, RIGHT, TOP, GAP = 900, 170, 70, 150, 40, 45
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]


def nice_max(v):
    if v <= 0:
        return 1.0
    m = 1.0
    while m < v:
        for f in (1, 2, 5):
            if m * f >= v:
                return m * f
        m *= 10
    return m


def panel(out, y0, title, t, series, tmax, ymin=0.0, marks=()):
    """series: list of (label, values). Draws axes, grid, lines, legend."""
    vals = [v for _, vs in series for v in vs if v is not None]
    ymax = nice_max(max(vals) if vals else 1)
    if ymin >= ymax:
        ymin = 0.0
    pw = W - LEFT - RIGHT

    def X(x):
        return LEFT + pw * x / tmax

    def Y(y):
        return y0 + PANEL_H - PANEL_H * (y - ymin) / (ymax - ymin)

    out.append(f'<text x="{LEFT}" y="{y0 - 8}" font-weight="bold">{escape(title)}</text>')
    out.append(f'<rect x="{LEFT}" y="{y0}" width="{pw}" height="{PANEL_H}" '
               'fill="none" stroke="#888"/>')
    for i in range(5):
        yv = ymin + (ymax - ymin) * i / 4
        yy = Y(yv)
        out.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{LEFT + pw}" y2="{yy:.1f}" '
                   'stroke="#ddd"/>')
        label = f"{yv:.0f}" if ymax - ymin >= 8 else f"{yv:.2g}"
        out.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" '
                   f'font-size="11">{label}</text>')
    for x, color in marks:
        out.append(f'<line x1="{X(x):.1f}" y1="{y0}" x2="{X(x):.1f}" y2="{y0 + PANEL_H}" '
                   f'stroke="{color}" stroke-opacity="0.35"/>')
    for k, (label, vs) in enumerate(series):
        pts = " ".join(f"{X(x):.1f},{Y(v):.1f}" for x, v in zip(t, vs) if v is not None)
        c = COLORS[k % len(COLORS)]
        out.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        ly = y0 + 14 + 16 * k
        out.append(f'<line x1="{LEFT + pw + 10}" y1="{ly - 4}" x2="{LEFT + pw + 28}" '
                   f'y2="{ly - 4}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + pw + 32}" y="{ly}" font-size="11">{escape(label)}</text>')


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("soak_plot: no samples")

    def col(name, scale=1.0):
        out = []
        for r in rows:
            v = float(r[name])
            out.append(None if v < 0 else v * scale)
        return out

    t = col("t_s")
    tmax = max(t[-1], 1.0)
    faults, kills = col("faults"), col("kills")
    marks = []
    for i in range(1, len(rows)):
        if kills[i] > kills[i - 1]:
            marks.append((t[i], "#d62728"))
        elif faults[i] > faults[i - 1]:
            marks.append((t[i], "#999"))

    out = []
    panels = [
        ("Open file descriptors", [("driver", col("client_fds")), ("server", col("server_fds"))]),
        ("Resident memory (MiB)", [("driver", col("client_rss_kb", 1 / 1024)),
                                   ("server", col("server_rss_kb", 1 / 1024))]),
        ("Operations per second (connected QPs x 1000)",
         [("ops/s", col("ops_per_s")), ("QPs up x1000", col("connected", 1000))]),
        ("Errors (cumulative)", [("completions in error", col("wc_errors")),
                                 ("connections lost", col("lost")),
                                 ("verify errors", col("verify_errors")),
                                 ("stalls", col("stalls"))]),
    ]
    h = TOP + len(panels) * (PANEL_H + GAP) + 30
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
               'font-family="sans-serif" font-size="12">')
    out.append(f'<rect width="{W}" height="{h}" fill="white"/>')
    last = rows[-1]
    out.append(f'<text x="{LEFT}" y="18" font-size="14">uiwarp soak: {t[-1]:.0f} s, '
               f'{last["faults"]} faults ({last["kills"]} server kills, red), '
               f'{last["verify_errors"]} verify errors, {last["stalls"]} stalls</text>')
    for i, (title, series) in enumerate(panels):
        panel(out, TOP + 10 + i * (PANEL_H + GAP), title, t, series, tmax, marks=marks)
    pw = W - LEFT - RIGHT
    yb = TOP + 10 + len(panels) * (PANEL_H + GAP) - GAP + 16
    for i in range(6):
        x = tmax * i / 5
        out.append(f'<text x="{LEFT + pw * i / 5:.1f}" y="{yb}" text-anchor="middle" '
                   f'font-size="11">{x:.0f} s</text>')
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
