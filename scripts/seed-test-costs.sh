#!/usr/bin/env bash
# Gives a build directory that has not run its tests yet ctest's cost data from
# tests/ctest-costs.txt, so that ctest -j starts the longest tests first: in a fresh
# clone it otherwise starts them in declaration order, and a minute-long test started
# last runs alone at the end of the stage. A directory with cost data of its own
# (measured by an earlier run) keeps it.
#   scripts/seed-test-costs.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$1/Testing/Temporary"
[[ -f "$dir/CTestCostData.txt" ]] && exit 0
mkdir -p "$dir"
# ctest's format: NAME RUNS AVERAGE_SECONDS per line, then "---" and the failed tests.
awk '!/^#/ && NF == 2 { print $1, 1, $2 } END { print "---" }' tests/ctest-costs.txt \
  > "$dir/CTestCostData.txt"
