#!/usr/bin/env bash
# Installs, builds, and runs the whole test suite (unit, multi-process integration,
# and training on Fashion-MNIST). This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
# Tests that time a training run or start many processes are marked RUN_SERIAL.
ctest --output-on-failure -j 2 --timeout 600
