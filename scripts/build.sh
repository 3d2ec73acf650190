#!/usr/bin/env bash
# Configure and build uiwarp into build/ (or $1 with extra cmake args).
#   scripts/build.sh [BUILD_DIR [cmake args...]]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
