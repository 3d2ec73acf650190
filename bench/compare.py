#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Two or more runs of bench_apps.sh side by side: one Markdown row per
program, mode, size and metric, with each run's value and its ratio to the
TCP figure measured in that same run (the ratio is what compares across
runs: loopback TCP itself moves from run to run).

usage: bench/compare.py NAME=CSV [NAME=CSV ...]
  e.g. bench/compare.py before=/tmp/b.csv after1=/tmp/a1.csv after2=/tmp/a2.csv
Standard library only."""
import csv
import sys


def load(path):
    rows = {}
    order = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            key = (r["program"], r["mode"], r["size"], r["metric"])
            if key not in rows:
                order.append(key)
            rows[key] = r
    return rows, order


def main():
    runs = []
    for arg in sys.argv[1:]:
        if "=" not in arg:
            print(__doc__)
            return 2
        name, path = arg.split("=", 1)
        runs.append((name, *load(path)))
    if not runs:
        print(__doc__)
        return 2
    keys = []
    for _, _, order in runs:
        for k in order:
            if k not in keys:
                keys.append(k)
    head = ["program", "mode", "size (B)", "metric", "unit"]
    for name, _, _ in runs:
        head += [name, f"{name} / TCP"]
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join(["---"] * 4 + ["---"] + ["---:"] * (2 * len(runs))) + " |")
    for k in keys:
        unit = ""
        cells = []
        for _, rows, _ in runs:
            r = rows.get(k)
            if not r:
                cells += ["", ""]
                continue
            unit = r["unit"] or unit
            v = r["value"] if r["result"] == "PASS" else "FAIL"
            cells += [v, r["ratio"] if r["ratio"] not in ("", "-") else "-"]
        print("| " + " | ".join(list(k) + [unit] + cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
