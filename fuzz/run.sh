#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and fuzzes each for a while.
#
#   fuzz/run.sh [--seconds N] [--target NAME] [--jobs J] [--build-only]
#
#   --seconds N   time per target (default 60); ctest's Fuzz.Short uses 10
#   --target NAME one of: wire_header codec_decode ipc_message config state_transfer initial_model
#                 (default: all)
#   --jobs J      parallel compile jobs (default 2)
#   --build-only  build the targets and stop (scripts/test.sh, ahead of Fuzz.Short)
#
# Each target starts from fuzz/corpus/<target>/ and fuzz/regressions/<target>/ (read
# only) and keeps what it finds in build-fuzz/fuzz-corpus/<target>/. A crash, a
# sanitizer report, an invariant violation (a trap), a timeout or running out of
# memory is saved under fuzz/crashes/<target>/ and fails the run; the log of every
# target is in build-fuzz/fuzz-logs/<target>.log.
#
# Exit: 0 nothing found, 1 a target failed (or the build did), 2 bad arguments,
# 77 no clang or no libFuzzer here (Debian: clang and libclang-rt-14-dev).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all_targets=(wire_header codec_decode ipc_message inspect_report config state_transfer initial_model)
seconds=60
jobs=2
targets=()
build_only=""

usage() { sed -n '4,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) [ $# -ge 2 ] || usage; seconds="$2"; shift 2 ;;
    --target) [ $# -ge 2 ] || usage; targets+=("$2"); shift 2 ;;
    --jobs) [ $# -ge 2 ] || usage; jobs="$2"; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) usage ;;
    *) echo "fuzz/run.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/run.sh: --seconds needs a whole number >= 1" >&2; exit 2; }
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz/run.sh: --jobs needs a whole number >= 1" >&2; exit 2; }
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "fuzz/run.sh: unknown target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
done

# clang with libFuzzer and the sanitizer runtimes, or skip (77, as ctest expects).
cc="${CLANG:-clang}"
cxx="${CLANGXX:-clang++}"
if ! command -v "$cxx" >/dev/null || ! command -v "$cc" >/dev/null; then
  echo "fuzz/run.sh: $cxx not found: install clang and libclang-rt-14-dev (scripts/install-deps.sh); skipped"
  exit 77
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' >"$probe/p.cc"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" 2>"$probe/err"; then
  echo "fuzz/run.sh: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer missing: install libclang-rt-14-dev); skipped"
  sed 's/^/  /' "$probe/err" | head -5
  exit 77
fi

build="$root/build-fuzz"
start=$SECONDS
# ccache as in scripts/build.sh (shared across clones), where it is installed.
launcher=()
if [[ -z "${GOSSIP_NO_CCACHE:-}" ]] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
fi
# -O1 and line tables only: a third faster to build than -O2 -g, as fast to fuzz;
# no NDEBUG, so that assertions stay on.
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DGOSSIP_FUZZ=ON -DGOSSIP_SANITIZE=ON \
  -DGOSSIP_BUILD_TESTS=OFF -DGOSSIP_BUILD_BENCH=OFF -DGOSSIP_WITH_CUDA=OFF "${launcher[@]}" \
  >"$probe/cmake.log" 2>&1 ||
  { cat "$probe/cmake.log"; echo "fuzz/run.sh: configuring $build failed"; exit 1; }
ninja_targets=()
for t in "${targets[@]}"; do ninja_targets+=("${t}_fuzzer"); done
if ! ninja -C "$build" -j "$jobs" "${ninja_targets[@]}" >"$probe/build.log" 2>&1; then
  tail -50 "$probe/build.log"
  echo "fuzz/run.sh: building the fuzz targets failed"
  exit 1
fi
echo "fuzz/run.sh: built ${ninja_targets[*]} in $((SECONDS - start)) s"
[[ -z "$build_only" ]] || exit 0

mkdir -p "$build/fuzz-logs"
# Leaks count as findings; UBSan stops at the first report (GOSSIP_SANITIZE builds with
# -fno-sanitize-recover) and prints a stack.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
for t in "${targets[@]}"; do
  work="$build/fuzz-corpus/$t"
  crashes="$root/fuzz/crashes/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$work" "$crashes"
  seeds=("$root/fuzz/corpus/$t")
  [ -d "$root/fuzz/regressions/$t" ] && seeds+=("$root/fuzz/regressions/$t")
  dict=()
  [ -f "$root/fuzz/dict/$t.dict" ] && dict=("-dict=$root/fuzz/dict/$t.dict")
  # libFuzzer exits 77 on a crash by default, which ctest would read as "skipped":
  # -error_exitcode=1, and any failure below becomes 1.
  if "$build/bin/${t}_fuzzer" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 \
      -error_exitcode=1 -print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" \
      "$work" "${seeds[@]}" >"$log" 2>&1; then
    stats="$(grep -E '^stat::(number_of_executed_units|new_units_added)' "$log" | awk '{printf "%s ", $2}')"
    echo "fuzz/run.sh: $t: ${seconds} s, no crash (executions, new units: ${stats% })"
  else
    failed+=("$t")
    echo "fuzz/run.sh: $t FAILED; the end of $log:"
    tail -40 "$log" | sed 's/^/  /'
    echo "fuzz/run.sh: the input is under fuzz/crashes/$t/ (README.md: turning it into a regression)"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz/run.sh: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz/run.sh: all of ${targets[*]} ran ${seconds} s each without a finding ($((SECONDS - start)) s in all)"
