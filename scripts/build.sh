#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds gossipd into build/.
# Usage: scripts/build.sh [extra cmake -D flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >build.cmake.log 2>&1 || {
  cat build.cmake.log >&2; exit 1; }
cmake --build build -j "$jobs"
