#!/usr/bin/env bash
# clang-tidy with the project's .clang-tidy over build/'s compile commands (run
# scripts/build.sh first). By hand, not in CI: on two cores it takes as long as a build.
# Usage: scripts/tidy.sh [FILE-REGEX]   (default: every source of ours)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -f build/compile_commands.json ]] || { echo "tidy: no build/compile_commands.json; run scripts/build.sh" >&2; exit 1; }
command -v run-clang-tidy >/dev/null || { echo "tidy: run-clang-tidy not found (Debian: clang-tidy)" >&2; exit 1; }
run-clang-tidy -quiet -p build "${1:-/(proto|peers|sgd|daemon|client|cli|compression|experiments)/.*\.cc$}"
