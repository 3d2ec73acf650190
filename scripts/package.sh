#!/usr/bin/env bash
# Build the Debian package: build/uiwarp_VERSION_ARCH.deb (installs under
# /usr: the tool in /usr/bin, the drop-in libraries in /usr/lib/uiwarp/,
# man pages uiwarp(1) and uiwarp(7)).
#   scripts/package.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
bash scripts/deps.sh build
bash scripts/build.sh "$dir"
(cd "$dir" && cpack -G DEB >/dev/null)
ls "$dir"/uiwarp_*.deb
