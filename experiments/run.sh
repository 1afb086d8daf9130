#!/usr/bin/env bash
# Installs, builds, and runs the experiment matrix (experiments/matrix.py), then
# writes docs/results/results.md and its plots. Arguments go to matrix.py:
#   experiments/run.sh                                     # default matrix, loopback, ~25 min on 2 cores
#   experiments/run.sh --matrix smoke --out /tmp/smoke     # a minute
#   sudo experiments/run.sh --matrix bandwidth --testbed netns --rate 100mbit
# Debian's python3 (with python3-matplotlib) runs the scripts, whatever python3 is first on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n "${NO_BUILD:-}" ]] || bash scripts/build.sh
exec /usr/bin/python3 experiments/matrix.py "$@"
