#!/usr/bin/env bash
# cmake --install of BUILD into a throw-away root (DESTDIR, prefix /usr), then a
# trainer's own project built against it twice, with find_package(gossipd) (C++) and
# with pkg-config (C), both run against two installed gossipd nodes and checked to get
# the mean of what they wrote.
#   tests/install/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
tmp="$(mktemp -d /tmp/gossipd-install.XXXXXX)"
daemon=""
cleanup() {
  # shellcheck disable=SC2086  # the daemons' pids
  [[ -n "$daemon" ]] && kill $daemon 2>/dev/null && wait $daemon 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

root="$tmp/root"
for component in runtime dev daemon; do
  DESTDIR="$root" cmake --install "$build" --prefix /usr --component "$component" > /dev/null
done
prefix="$root/usr"
lib="$(find "$prefix" -name libgossip.so.0 -printf '%h\n')"
[[ -n "$lib" ]] || { echo "no libgossip.so.0 under $prefix"; exit 1; }
echo "installed:"; (cd "$root" && find . -type f -o -type l | sort | sed 's/^/  /')

# C++: find_package(gossipd CONFIG) and the target gossipd::client.
cmake -S "$src/tests/install/consumer" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$tmp/cxx-configure.log" || { cat "$tmp/cxx-configure.log"; exit 1; }
cmake --build "$tmp/cxx" > "$tmp/cxx-build.log" || { cat "$tmp/cxx-build.log"; exit 1; }

# C: pkg-config (the .pc file finds its prefix from where it lies).
export PKG_CONFIG_PATH="$lib/pkgconfig"
flags="$(pkg-config --cflags --libs gossipd)"
echo "pkg-config --cflags --libs gossipd: $flags (version $(pkg-config --modversion gossipd))"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror "$src/tests/install/consumer/consumer.c" $flags -lm -o "$tmp/c_consumer"

# The installed daemon, two nodes averaging every step: the C++ consumer on node 0 writes
# 1, the C one on node 1 writes 3, and each must get back their mean, 2, after its step.
"$prefix/bin/gossipd" --version
read -r port0 port1 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
daemons=()
for id in 0 1; do
  mkdir "$tmp/run$id"
  timeout 60 "$prefix/bin/gossipd" --id "$id" --listen "tcp://127.0.0.1:$([[ $id == 0 ]] && echo "$port0" || echo "$port1")" \
    --peer "0=tcp://127.0.0.1:$port0" --peer "1=tcp://127.0.0.1:$port1" --run-dir "$tmp/run$id" \
    --period 1 > "$tmp/gossipd$id.log" 2>&1 &
  daemons+=($!)
done
daemon="${daemons[*]}"
LD_LIBRARY_PATH="$lib" timeout 30 "$tmp/cxx/cxx_consumer" "ipc://$tmp/run0/gossipd-0.sock" 1 2 &
cxx=$!
rc=0
LD_LIBRARY_PATH="$lib" GOSSIP_STARTUP_TIMEOUT=10 timeout 30 "$tmp/c_consumer" \
  "ipc://$tmp/run1/gossipd-1.sock" 3 2 || rc=1
wait "$cxx" || rc=1
if [[ $rc != 0 ]]; then
  tail -n 20 "$tmp/gossipd0.log" "$tmp/gossipd1.log"
  exit 1
fi
echo "install test: both consumers built, ran against the installed gossipd and got the mean"
