#!/usr/bin/env bash
# Installs, builds, and runs the whole test suite (unit, multi-process integration,
# and training on Fashion-MNIST), then the unit and integration tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer (scripts/test-sanitizers.sh, build-asan/).
# This is what CI runs.
#   GOSSIP_SKIP_SANITIZERS=1  stop after the main suite (a quick local run)
#   NO_INSTALL=1              skip scripts/install-deps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Tests that time a training run or start many processes are marked RUN_SERIAL.
(cd build && ctest --output-on-failure -j 2 --timeout 600)
if [[ "${GOSSIP_SKIP_SANITIZERS:-}" == 1 ]]; then
  echo "test.sh: GOSSIP_SKIP_SANITIZERS=1: the sanitizer stage is skipped"
  exit 0
fi
bash scripts/test-sanitizers.sh
