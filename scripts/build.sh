#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds gossipd into build/.
# Usage: scripts/build.sh [--dir DIR] [extra cmake -D flags...]
#   --dir DIR     build into DIR instead of build/ (the configure log is DIR.cmake.log)
#   NO_INSTALL=1  skip scripts/install-deps.sh (the packages are there already)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
if [[ "${1:-}" == --dir ]]; then
  dir=${2:?"--dir needs a directory"}
  shift 2
fi
[[ -n "${NO_INSTALL:-}" ]] || bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$dir.cmake.log" 2>&1 || {
  cat "$dir.cmake.log" >&2; exit 1; }
cmake --build "$dir" -j "$jobs"
