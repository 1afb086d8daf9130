#!/usr/bin/env bash
# The main job on a fresh machine: installs the packages, builds only the three
# programs it runs (gossipd, gossipctl, gossip-train and what they link: no tests,
# benchmarks, fuzzers or CUDA kernels; scripts/test.sh builds everything into the same
# build/), and trains a 4-node local cluster on Fashion-MNIST with local SGD on
# loopback, then prints what it achieved. Extra arguments go to `gossipctl cluster`
# (e.g. --period 16 --json).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
echo "demo: [1/3] packages (scripts/install-deps.sh)" >&2
bash scripts/install-deps.sh --build
echo "demo: [2/3] building gossipd, gossipctl and gossip-train into build/ ($((SECONDS - start)) s so far)" >&2
NO_INSTALL=1 bash scripts/build.sh --target gossipd --target gossipctl --target gossip-train
echo "demo: [3/3] a 4-node cluster on loopback, 1,200 steps ($((SECONDS - start)) s so far)" >&2
exec build/bin/gossipctl cluster --nodes 4 --strategy local-sgd --period 4 --steps 1200 --seed 1 "$@"
