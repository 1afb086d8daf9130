#!/usr/bin/env bash
# cmake --install of BUILD into a throw-away root (DESTDIR, prefix /usr), then a
# trainer's own project built against it twice, with find_package(gossipd) (C++) and
# with pkg-config (C), both run against the installed gossipd.
#   tests/install/install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
tmp="$(mktemp -d /tmp/gossipd-install.XXXXXX)"
daemon=""
cleanup() {
  [[ -n "$daemon" ]] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
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
cc -std=c11 -Wall -Werror "$src/tests/install/consumer/consumer.c" $flags -o "$tmp/c_consumer"

# The installed daemon, one node; the consumers wait for its socket.
"$prefix/bin/gossipd" --version
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
mkdir "$tmp/run"
timeout 60 "$prefix/bin/gossipd" --id 0 --listen "tcp://127.0.0.1:$port" --run-dir "$tmp/run" \
  --period 1 > "$tmp/gossipd.log" 2>&1 &
daemon=$!
endpoint="ipc://$tmp/run/gossipd-0.sock"
LD_LIBRARY_PATH="$lib" timeout 30 "$tmp/cxx/cxx_consumer" "$endpoint" || { cat "$tmp/gossipd.log"; exit 1; }
LD_LIBRARY_PATH="$lib" GOSSIP_STARTUP_TIMEOUT=10 timeout 30 "$tmp/c_consumer" "$endpoint" \
  || { cat "$tmp/gossipd.log"; exit 1; }
echo "install test: both consumers built and ran against the installed gossipd"
