#!/usr/bin/env bash
# Builds the Debian packages gossipd, libgossip0 and libgossip-dev (cmake/Packaging.cmake)
# into DIR/packages/ and prints their paths.
# Usage: scripts/build-packages.sh [--dir DIR] [extra cmake -D flags...]
#   --dir DIR          build into DIR instead of build-pkg/ (the configure log is DIR.cmake.log)
#   NO_INSTALL=1       skip scripts/install-deps.sh --build (the packages are there already)
#   GOSSIP_JOBS=N      parallel compile jobs (default: every core)
#   GOSSIP_NO_CCACHE=1 no ccache
#
# A build of its own, configured for the packages: prefix /usr (so that GNUInstallDirs
# picks Debian's lib/<multiarch>), no tests or benchmarks, and no CUDA: the nccl
# transport would link a libnccl that no Debian package provides, which dpkg-shlibdeps
# cannot turn into a dependency (pass -DGOSSIP_WITH_CUDA=ON to try anyway).
# Release at Debian's -O2, with the line tables (-g1) that cpack strips: the same
# compile lines as scripts/build.sh, so ccache serves what build/ compiled already,
# but for the reference trainer, which build.sh compiles for this machine's CPU and the
# packages for any x86-64 (GOSSIP_TRAINER_FOR_THIS_CPU=OFF, experiments/trainer/).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-pkg
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) dir=${2:?"--dir needs a directory"}; shift 2 ;;
    *) break ;;
  esac
done
[[ -n "${NO_INSTALL:-}" ]] || bash scripts/install-deps.sh --build
jobs=${GOSSIP_JOBS:-$(nproc 2>/dev/null || echo 2)}
flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr
       -DGOSSIP_BUILD_TESTS=OFF -DGOSSIP_BUILD_BENCH=OFF -DGOSSIP_WITH_CUDA=OFF
       -DGOSSIP_TRAINER_FOR_THIS_CPU=OFF
       -DCMAKE_CXX_FLAGS_RELEASE="-O2 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O2 -g1 -DNDEBUG")
# The unity build of scripts/build.sh, for the same reason and the same ccache entries.
flags+=(-DCMAKE_UNITY_BUILD="$([[ "${GOSSIP_UNITY:-1}" == 0 ]] && echo OFF || echo ON)")
if [[ -z "${GOSSIP_NO_CCACHE:-}" ]] && command -v ccache >/dev/null; then
  flags+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
else
  flags+=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER)
fi
cmake -S . -B "$dir" -G Ninja "${flags[@]}" "$@" >"$dir.cmake.log" 2>&1 || {
  cat "$dir.cmake.log" >&2; exit 1; }
cmake --build "$dir" -j "$jobs"
rm -f "$dir"/packages/*.deb
(cd "$dir" && cpack -G DEB)
find "$(cd "$dir/packages" && pwd)" -maxdepth 1 -name '*.deb' | sort
