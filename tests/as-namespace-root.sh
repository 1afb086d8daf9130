#!/usr/bin/env bash
# Runs a test that makes network namespaces, veth pairs and tc qdiscs (the testbed, the
# partition, the StatefulSet's pods): as it is where the caller is root; otherwise as
# root of a user namespace of its own (unshare -Urnm), where those need no privilege:
# a network namespace with loopback up, and a mount namespace whose /run is a tmpfs of
# its own, for `ip netns`. Where neither is allowed, or a step of that fails (no `ip`,
# a mount refused), the test runs as it is and skips (77), saying what it lacks.
#
#   tests/as-namespace-root.sh COMMAND [ARG...]
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: as-namespace-root.sh COMMAND [ARG...]" >&2; exit 2; }
if [[ $(id -u) -eq 0 ]] || ! command -v unshare >/dev/null ||
   ! unshare -Urnm true 2>/dev/null; then
  exec "$@"
fi
# shellcheck disable=SC2016  # expanded by the inner shell
exec unshare -Urnm --propagation private /bin/sh -c \
  'mount -t tmpfs -o mode=755 tmpfs /run && mkdir /run/netns; ip link set lo up 2>/dev/null; exec "$@"' \
  as-namespace-root "$@"
