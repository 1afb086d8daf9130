#!/usr/bin/env bash
# The long end-to-end runs that CI runs one short case of, all of them, by hand:
#   - experiments/churn.py's three churn runs (tests/experiments/churn_test.py --long);
#   - a node joining under each of seven strategies (join_test.py --long);
#   - the partition that heals under three strategies (partition_heal_test.py --long;
#     skipped without root);
#   - every fuzz target for a minute (fuzz/run.sh --seconds 60).
# On build/ (scripts/build.sh first). Two cores, 2026-11-28: the three took 121, 78 and 76 s
# with --long; the fuzzing takes 7 minutes and its clang build.
#
#   scripts/long-tests.sh [--build DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
[[ "${1:-}" == --build && -n "${2:-}" ]] && build="$(cd "$2" && pwd)"
[[ -x "$build/bin/gossipd" ]] ||
  { echo "long-tests.sh: no gossipd in $build: run scripts/build.sh first" >&2; exit 2; }
python=/usr/bin/python3  # Debian's, as the suite's Python tests use
failed=()
run() {
  local name=$1; shift
  local start=$SECONDS rc=0
  echo "long-tests.sh: $name"
  "$@" || rc=$?
  case $rc in
    0) echo "long-tests.sh: $name passed ($((SECONDS - start)) s)" ;;
    77) echo "long-tests.sh: $name skipped ($((SECONDS - start)) s)" ;;
    *) echo "long-tests.sh: $name FAILED ($((SECONDS - start)) s)"; failed+=("$name") ;;
  esac
}
run churn "$python" "$root/tests/experiments/churn_test.py" --build "$build" --long
run joins "$python" "$root/tests/experiments/join_test.py" --build "$build" --long
run partitions "$python" "$root/tests/experiments/partition_heal_test.py" --build "$build" --long
run fuzz "$root/fuzz/run.sh" --seconds 60
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "long-tests.sh: failed: ${failed[*]}"
  exit 1
fi
echo "long-tests.sh: every long run passed or was skipped, saying why"
