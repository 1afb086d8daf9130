#!/usr/bin/env bash
# Installs, builds, and runs the main job: a 4-node local cluster training
# Fashion-MNIST with local SGD on loopback, then prints what it achieved.
# Extra arguments go to `gossipctl cluster` (e.g. --period 16 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec build/bin/gossipctl cluster --nodes 4 --strategy local-sgd --period 4 --steps 1200 --seed 1 "$@"
