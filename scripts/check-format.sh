#!/usr/bin/env bash
# Fails when a C++ or CUDA source is not formatted by .clang-format (clang-format from
# Debian's package, the version CI has). `scripts/check-format.sh --fix` formats them.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
# A hundred files per clang-format, one process at a time (two interleave their
# messages mid-line): one process per file took 50 s of CI's time (2026-12-06), most of
# it starting clang-format 409 times; this takes 3 s. xargs exits 123 when a batch
# found unformatted code; anything else (a crash, a signal, no clang-format) is shown.
rc=0
out=$(printf '%s\0' "${files[@]}" | xargs -0 -n 100 clang-format --dry-run --Werror 2>&1) || rc=$?
mapfile -t bad < <(grep -oE '^[^:]+:[0-9]+:[0-9]+: error: code should be clang-formatted' <<< "$out" |
                   cut -d: -f1 | sort -u)
if [[ $rc -ne 0 && ( $rc -ne 123 || ${#bad[@]} -eq 0 ) ]]; then
  echo "check-format: clang-format failed (xargs exit $rc):" >&2
  echo "$out" >&2
  exit 1
fi
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "check-format: ${#bad[@]} file(s) not formatted by .clang-format (scripts/check-format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
