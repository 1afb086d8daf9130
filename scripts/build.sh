#!/usr/bin/env bash
# Installs the dependencies (Debian packages) and builds gossipd into build/.
# Usage: scripts/build.sh [--dir DIR] [--target T]... [extra cmake -D flags...]
#   --dir DIR     build into DIR instead of build/ (the configure log is DIR.cmake.log)
#   --target T    build only T (and what it needs); repeatable; default: everything
#   NO_INSTALL=1  skip scripts/install-deps.sh --build (the packages are there already)
#   GOSSIP_UNITY=0  one object per source file (for editing: a change recompiles one file)
#
# RelWithDebInfo with line tables only (-g1): stacks and sanitizer reports keep their
# file:line, and the build takes about a third less time than with full debug info.
# A -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=... of the caller's replaces it.
#
# A unity build (CMake's UNITY_BUILD, 8 sources per object): the headers every file of a
# library includes (Asio, msgpack, spdlog, the standard library) are parsed and their
# templates compiled once per batch instead of once per file. The libraries under the
# sanitizer build's flags took 335 s of compile time in unity batches against 620 s file
# by file (2026-11-29, two cores). A file that cannot share a translation unit says so in
# its CMakeLists.txt (SKIP_UNITY_BUILD_INCLUSION); one that compiles only in a batch,
# leaning on an include of the file before it, is a bug that GOSSIP_UNITY=0 shows.
#
# With ccache (installed by install-deps), compilations are cached across builds and
# across clones in other folders (paths under the checkout are hashed relative to it),
# so a second CI run on the same machine recompiles only what changed. GOSSIP_NO_CCACHE=1
# turns it off.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=${2:?"--dir needs a directory"}; shift 2 ;;
    --target) targets+=(--target "${2:?"--target needs a target"}"); shift 2 ;;
    *) break ;;
  esac
done
[[ -n "${NO_INSTALL:-}" ]] || bash scripts/install-deps.sh --build
jobs=$(nproc 2>/dev/null || echo 2)
flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
# The trainer's kernels for this machine's CPU (experiments/trainer/CMakeLists.txt): what
# build.sh builds runs here; the packages (build-packages.sh) stay portable.
flags+=(-DGOSSIP_TRAINER_FOR_THIS_CPU=ON)
flags+=(-DCMAKE_UNITY_BUILD="$([[ "${GOSSIP_UNITY:-1}" == 0 ]] && echo OFF || echo ON)")
if [[ -z "${GOSSIP_NO_CCACHE:-}" ]] && command -v ccache >/dev/null; then
  flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
else
  flags+=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER)
fi
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" "$@" >"$dir.cmake.log" 2>&1 || {
  cat "$dir.cmake.log" >&2; exit 1; }
cmake --build "$dir" -j "$jobs" "${targets[@]}"
