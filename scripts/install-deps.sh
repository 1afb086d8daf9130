#!/usr/bin/env bash
# Installs everything gossipd needs from Debian's packages. Idempotent: packages
# already present are skipped, so a second run costs one dpkg query.
set -euo pipefail
# Usage: scripts/install-deps.sh [--build]
#   --build  only what building gossipd and running the demo need (scripts/demo.sh,
#            scripts/build.sh): a fresh machine gets to the demo without the test
#            tools' downloads (torch, clang, Slurm, Prometheus, mkdocs), which were most
#            of the install's time. Without it: everything, for scripts/test.sh.

# The build's packages (CMakeLists.txt's find_package and pkg_check_modules; GoogleTest
# and python3 too, because build/ is configured with its tests, and rdma-core's headers,
# because the ring's RDMA transport is compiled in when they are found) and the demo's
# data set.
build_packages=(
  # file: cpack's Debian generator reads the programs' dependencies with it
  # (cmake/Packaging.cmake's SHLIBDEPS); a minimal Debian has none.
  build-essential cmake pkg-config ninja-build ccache file
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libsodium-dev libssl-dev
  libboost-dev libboost-system-dev
  libibverbs-dev librdmacm-dev
  libgtest-dev libgmock-dev python3
  libcli11-dev libspdlog-dev libfmt-dev libtomlplusplus-dev nlohmann-json3-dev
  libeigen3-dev zlib1g-dev libdeflate-dev
  dataset-fashion-mnist
)
# What the tests, the sanitizer build (lld, clang's fuzzers), the docs site and the
# experiments' plots add.
test_packages=(
  lld
  python3-matplotlib python3-torch python3-torchvision python3-pip iproute2
  # Debian's torch does its matrix products through libblas.so.3, which without this is
  # the reference BLAS: an MLP step of batch 512 took 157 ms, with OpenBLAS 10 ms. Not
  # the serial build: it is not safe to call from two threads at once, and a test that
  # trains two nodes in threads of one process got different weights in 4 runs of 6.
  libopenblas0-pthread
  libnss-wrapper prometheus slurmctld slurmd slurm-client munge
  clang libclang-rt-14-dev llvm clang-format clang-tidy
  mkdocs mkdocs-material
)
case "${1:-}" in
  --build) packages=("${build_packages[@]}") ;;
  "") packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--build])" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Some of these packages are services (prometheus, munge, slurmctld, slurmd): the tests
# start their own, on loopback, from the repo's scripts. A policy-rc.d that answers 101
# keeps their postinst from starting the system's copies (or failing where there is no
# config for them); one the machine already has is left alone.
policy=/usr/sbin/policy-rc.d
added_policy=""
log=""
cleanup() {
  if [ -n "$added_policy" ]; then $sudo rm -f "$policy"; fi
  if [ -n "$log" ]; then rm -f "$log"; fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
  $sudo chmod 755 "$policy"
  added_policy=1
fi
# apt's and dpkg's lines go to a log, shown whole only when the install fails: dpkg
# prints several per package, hundreds in all, above the demo's own output.
# DEBIAN_FRONTEND through env: sudo resets the environment, and a debconf question
# would wait unseen, its prompt in the log.
log=$(mktemp -t gossip-install-XXXXXX)
started=$SECONDS
apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get)
{ "${apt[@]}" update -qq && "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1 || {
  cat "$log" >&2; echo "install-deps: apt-get failed (its output above)" >&2; exit 1; }
echo "install-deps: installed ${#missing[@]} packages and what they need in $((SECONDS - started)) s"
