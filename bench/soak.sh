#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Soak benchmark (issue 12; not part of CI): bench_soak for N minutes —
# 64 QPs of verified Send/Recv, Write, Read and atomics between two processes
# over loopback through uiwarp, with random faults (server killed and
# restarted, QPs destroyed by either side mid-transfer, disconnects) — then
# an SVG plot of fds, RSS, throughput and errors over time.
#
#   bench/soak.sh [--minutes N] [--qps N] [--build DIR] [--out DIR] [--seed N]
#                 [--sample S]
#
# Defaults: 30 minutes, 64 QPs, build/, out dir soak-YYYYmmdd-HHMMSS/ in the
# current directory, a sample every 2 s. Writes OUT/soak.csv, OUT/soak.svg,
# OUT/summary.txt (bench_soak's summary) and OUT/log.txt (stderr of both
# processes). Exit status: bench_soak's (0: no verify error, no stall).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
minutes=30 qps=64 build=$src/build out= seed= sample=2
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) minutes=$2; shift 2 ;;
    --qps) qps=$2; shift 2 ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --sample) sample=$2; shift 2 ;;
    -h|--help) sed -n '3,15p' "$0"; exit 0 ;;
    *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
bin=$build/bin/bench_soak
if [ ! -x "$bin" ]; then
  cmake --build "$build" -j2 --target bench_soak
fi
out=${out:-soak-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
seconds=$(python3 -c "print(float('$minutes') * 60)")
args=(--seconds "$seconds" --qps "$qps" --csv "$out/soak.csv" --sample "$sample")
[ -n "$seed" ] && args+=(--seed "$seed")
echo "soak: $minutes min, $qps QPs -> $out/"
rc=0
"$bin" "${args[@]}" >"$out/summary.txt" 2>"$out/log.txt" || rc=$?
python3 "$src/bench/soak_plot.py" "$out/soak.csv" "$out/soak.svg"
cat "$out/summary.txt"
echo "soak: plot $out/soak.svg, samples $out/soak.csv, exit status $rc"
exit $rc
