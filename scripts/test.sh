#!/usr/bin/env bash
# Installs, builds, and runs the whole test suite. This is what CI runs.
#   0. scripts/check-format.sh: every C++ source formatted by .clang-format; the docs site
#      (mkdocs.yml) builds with --strict and every page in its nav;
#   1. scripts/test-sanitizers.sh: build-asan/ (AddressSanitizer + UndefinedBehaviorSanitizer
#      + LeakSanitizer) and every unit and integration test under it;
#   2. build/ (optimized), only what the rest needs, and build-pkg/ (the Debian packages),
#      both built beside stage 1 at the lowest priority, in the CPU time it leaves idle,
#      and the optimized build's tests that time nothing run there too; then the timed
#      training runs, the experiments, the Python client, the deployment and package
#      tests on them (scripts/optimized-tests.sh).
# Each test runs once, so the suite fits CI's time on two cores.
#   GOSSIP_SKIP_SANITIZERS=1  a quick local run instead: build/ in full and every test on it
#   NO_INSTALL=1              skip scripts/install-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
[[ -n "${NO_INSTALL:-}" ]] || bash scripts/install-deps.sh
export NO_INSTALL=1
# One OpenBLAS thread per process (torch's matrix products, install-deps.sh): the tests
# run many trainers on two cores, and each would otherwise start a second, spinning one.
export OPENBLAS_NUM_THREADS=1
bash scripts/check-format.sh
# The documentation site (mkdocs.yml): --strict fails on a broken link; a page left out
# of the nav is only an INFO line in Debian's mkdocs 1.4, so that is checked here.
site=$(mktemp -d -t gossip-docs-XXXXXX)
docs_log=$(mkdocs build --strict -d "$site" 2>&1) || { echo "$docs_log" >&2; rm -rf "$site"; exit 1; }
rm -rf "$site"
if grep -q 'not included in the "nav"' <<< "$docs_log"; then echo "$docs_log" >&2; exit 1; fi
source scripts/optimized-tests.sh
# ctest -j 2 counts the tests that keep both cores busy (clusters, torch) as two
# (PROCESSORS 2), so each of them runs alone and the one-core tests pair up.
if [[ "${GOSSIP_SKIP_SANITIZERS:-}" == 1 ]]; then
  echo "test.sh: GOSSIP_SKIP_SANITIZERS=1: every test on the optimized build, none under the sanitizers"
  bash scripts/build.sh
  bash scripts/seed-test-costs.sh build
  (cd build && ctest --output-on-failure -j 2 --timeout 600)
  exit 0
fi
# Both stages' ctest lines, for the one count at the end.
log=$(mktemp -t gossip-test-XXXXXX)
built_log=$(mktemp -t gossip-build-XXXXXX)
# The optimized build and the packages' build go on beside the sanitizer stage at the
# lowest priority, so that they take only the CPU the stage leaves idle: its tests wait
# on sockets and deadlines a fifth of the time (docs/testing.md, "Time"), and so does
# its build while it links. A process group of their own, stopped by the trap if this
# script stops, and by their own watch of it if it is killed outright.
targets=()
for t in "${optimized_targets[@]}"; do targets+=(--target "$t"); done
builder=""
trap '[[ -z "$builder" ]] || kill -- -"$builder" 2>/dev/null || true
      rm -f "$log" "$built_log" "$log.built"' EXIT
# Fuzz.Short's clang build too (fuzz/run.sh skips with 77 where there is no clang). Then,
# once the sanitizer build is done (test-sanitizers.sh touches GOSSIP_SANITIZER_BUILT:
# beside a cold compile at the lowest priority they would get no CPU for minutes, and
# their ctest timeouts count wall time), the optimized stage's tests that time nothing
# (background_tests), in the CPU the sanitizer tests leave idle.
export GOSSIP_BACKGROUND_TESTS=$background_tests
export GOSSIP_SANITIZER_BUILT=$log.built
setsid nice -n 19 bash -c '
  parent=$1; shift
  (while kill -0 "$parent" 2>/dev/null; do sleep 2; done; kill -- -$$) &
  bash scripts/build.sh "$@" && bash scripts/build-packages.sh &&
    { bash fuzz/run.sh --build-only --target wire_header || [[ $? == 77 ]]; } &&
    bash scripts/seed-test-costs.sh build &&
    until [[ -e "$GOSSIP_SANITIZER_BUILT" ]]; do sleep 2; done &&
    { cd build && ctest --output-on-failure --no-tests=error -j 2 --timeout 600 \
      -R "$GOSSIP_BACKGROUND_TESTS"; }' \
  build $$ "${targets[@]}" >"$built_log" 2>&1 &
builder=$!
bash scripts/test-sanitizers.sh | tee "$log"
sanitized=$SECONDS
# The Debian packages are for Install.DebianPackagesInstallAndRemove: the same compile
# lines as build/, so ccache serves nearly every object and they cost the links and cpack.
wait "$builder" || {
  cat "$built_log" >&2
  echo "test.sh: the optimized build, the packages', Fuzz.Short's or a test beside the" \
    "sanitizer stage failed (above)" >&2
  exit 1
}
builder=""
echo "test.sh: beside the sanitizer stage, on the optimized build:"
sed -n '/Test project/,$p' "$built_log" | tee -a "$log"
built=$SECONDS
(cd build && ctest --output-on-failure -j 2 --timeout 600 -R "$optimized_tests" \
  -E "$background_tests") | tee -a "$log"
echo "test.sh: sanitizer stage $((sanitized - start)) s (install included), optimized build" \
  "$((built - sanitized)) s more, its tests $((SECONDS - built)) s, in all $((SECONDS - start)) s"
# A failure stops the script above (pipefail), so what is left passed or was skipped.
passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed ' "$log" || true)
skipped=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped ' "$log" || true)
echo "suite: $passed passed, 0 failed, $skipped skipped"
