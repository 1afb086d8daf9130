#!/usr/bin/env bash
# The unit and integration tests under AddressSanitizer + UndefinedBehaviorSanitizer
# (LeakSanitizer included), built into build-asan/. scripts/test.sh runs this first,
# then the tests that need the optimized build; it also runs alone.
#   NO_INSTALL=1  skip scripts/install-deps.sh
#
# Any report fails the stage. ASan and LeakSanitizer reports go to files, printed at the
# end, so that one from a gossipd or gossip-train whose log its test deleted (say, a leak
# found when a daemon exits after the test's checks) is not lost. UBSan's go to stderr
# (GCC's runtime ignores log_path for them when ASan is linked too): a test binary's into
# the ctest output, a daemon's into its log, and the daemon stops there (halt_on_error).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

# RelWithDebInfo at -Og without NDEBUG: faster to run than -O0 under ASan, with line
# numbers in the stacks (line tables only, -g1: a third faster to build than -g) and the
# assertions on. -Og rather than -O1: the cold build takes 406 s instead of 481 s on two
# cores (daemon.cc alone 16 s -> 7 s), and the stage's tests ran in the same 194 s.
# GCC's flow-based warnings misfire on code instrumented by the sanitizers (in
# libstdc++'s <regex> and vector::resize, msgpack's zone allocator), so they are off
# here; the main build keeps them as errors. No CUDA (no GPU in CI, and nvcc costs
# minutes), no benchmarks.
# lld links the 150 instrumented test programs in a fifth of GNU ld's time. The programs
# are not position-independent (-no-pie): an instrumented test program is some 100 MB,
# and the dynamic loader's relocation of a PIE that size (and the page faults of its
# writes) was a third of the 0.3 s each of the stage's thousands of processes took to
# start and stop; 0.2 s without (2026-12-07). Only this build's: the packages and build/
# keep PIE.
quiet="-Wno-maybe-uninitialized -Wno-stringop-overflow -Wno-array-bounds -Wno-mismatched-new-delete"
linker=(-DCMAKE_EXE_LINKER_FLAGS=-no-pie)
if command -v ld.lld >/dev/null; then
  linker=("-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -no-pie" -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
fi
bash scripts/build.sh --dir build-asan -DGOSSIP_SANITIZE=ON -DGOSSIP_TSAN=OFF \
  -DGOSSIP_WITH_CUDA=OFF -DGOSSIP_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-Og -g1" \
  "-DCMAKE_CXX_FLAGS=$quiet" "-DCMAKE_C_FLAGS=$quiet" "${linker[@]}"
built=$SECONDS
# scripts/test.sh's tests beside this stage wait for this build (it says why).
[[ -z "${GOSSIP_SANITIZER_BUILT:-}" ]] || touch "$GOSSIP_SANITIZER_BUILT"

reports=$(mktemp -d -t gossip-sanitizers-XXXXXX)
trap 'rm -rf "$reports"' EXIT

# LeakSanitizer stops the world with ptrace; where a container forbids that it dies with a
# fatal error in every process, so leaks are then not checked (and the stage says so).
leaks=1
probe=$(ASAN_OPTIONS=detect_leaks=1 build-asan/bin/layout_test --gtest_filter=-* 2>&1 || true)
if [[ "$probe" == *"LeakSanitizer has encountered a fatal error"* ]]; then
  echo "test-sanitizers: LeakSanitizer cannot run here (no ptrace?): leaks are not checked" >&2
  leaks=0
fi
export ASAN_OPTIONS="detect_leaks=$leaks:halt_on_error=1:log_path=$reports/report:log_exe_name=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
# libzmq's own leaks at shutdown, and nothing else (scripts/lsan.supp says why).
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"

# Every test except the optimized build's own (scripts/optimized-tests.sh says which and why).
source scripts/optimized-tests.sh
exclude=$optimized_tests

rc=0
# Four at a time on two cores: these tests mostly wait (on sockets, deadlines and
# daemons): at -j 2 the cores were 48 % busy through the stage (sampled every 5 s,
# 2026-11-28), at -j 4 79 %, and the stage took 163 s instead of 194 at -j 3; the tests
# that time a run are in the optimized stage, each alone (PROCESSORS 2).
bash scripts/seed-test-costs.sh build-asan
(cd build-asan && ctest --output-on-failure -j 4 --timeout 600 -E "$exclude") || rc=$?
tested=$SECONDS

shopt -s nullglob
found=("$reports"/report*)
if [[ ${#found[@]} -gt 0 ]]; then
  echo "test-sanitizers: ${#found[@]} sanitizer report(s):" >&2
  for f in "${found[@]}"; do
    echo "----- ${f##*/}" >&2
    cat "$f" >&2
  done
  rc=1
fi
echo "test-sanitizers: build $((built - start)) s, tests $((tested - built)) s"
exit "$rc"
