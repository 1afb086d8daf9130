#!/usr/bin/env bash
# The Debian packages of scripts/build-packages.sh, installed with dpkg into a throw-away
# root and removed again.
#   tests/install/deb_test.sh BUILD_PKG_DIR SOURCE_DIR
#
# Checks: the three packages and their control fields (version, Depends); that apt could
# satisfy their Depends on this system (apt-get --simulate); dpkg -i into the root; every
# file under /usr where Debian wants it; the installed programs' --version and
# libgossip.so.0 loading; the installed example config starting a daemon whose
# /metrics answers; systemd-analyze verify of the installed unit; dpkg -r and -P leaving
# nothing behind.
#
# The root starts empty, so dpkg runs the maintainer scripts on this system
# (--force-script-chrootless, with DPKG_ROOT set: postinst creates the gossipd user in
# the root's /etc/passwd, never this system's) and cannot see the Depends installed here
# (--force-depends; the simulated apt-get checks them instead).
#
# Exit status: 0 pass, 1 fail, 2 usage, 77 skipped (no dpkg, or no packages built).
# DEB_TEST_WAIT_S bounds the wait for the daemon (default 30).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_PKG_DIR SOURCE_DIR" >&2
  exit 2
fi
if [[ ! -d "$1/packages" ]]; then
  echo "SKIP: no $1/packages: run scripts/build-packages.sh (needs cpack)"
  exit 77
fi
pkgdir="$(cd "$1/packages" && pwd)"
src="$(cd "$2" && pwd)"
wait_s="${DEB_TEST_WAIT_S:-30}"
start=$SECONDS

for tool in dpkg dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is missing (not a Debian system)"; exit 77; }
done
shopt -s nullglob
debs=("$pkgdir"/gossipd_*.deb "$pkgdir"/libgossip0_*.deb "$pkgdir"/libgossip-dev_*.deb)
if [[ ${#debs[@]} -ne 3 ]]; then
  echo "SKIP: expected the 3 packages in $pkgdir, found ${#debs[@]}: run scripts/build-packages.sh (needs cpack)"
  exit 77
fi

tmp="$(mktemp -d /tmp/gossipd-deb.XXXXXX)"
daemon=""
cleanup() {
  if [[ -n "$daemon" ]]; then kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Control fields. The version is project()'s, with the Debian revision cpack adds.
version="$(sed -n 's/^project(gossipd VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
[[ -n "$version" ]] || fail "no project(gossipd VERSION ...) in $src/CMakeLists.txt"
field() { dpkg-deb -f "$1" "$2"; }
for deb in "${debs[@]}"; do
  echo "== $(basename "$deb")"
  dpkg-deb -f "$deb" Package Version Architecture Section Depends Suggests | sed 's/^/  /'
  [[ "$(field "$deb" Version)" == "$version"-* ]] || fail "$deb: version is not $version-*"
done
[[ "$(field "${debs[0]}" Depends)" == *libzmq5* ]] || fail "gossipd does not depend on libzmq5"
[[ "$(field "${debs[1]}" Depends)" == *libzmq5* ]] || fail "libgossip0 does not depend on libzmq5"
[[ "$(field "${debs[2]}" Depends)" == *"libgossip0 (= $(field "${debs[1]}" Version))"* ]] \
  || fail "libgossip-dev does not depend on its libgossip0"

# Could apt install them here? --simulate resolves the Depends against this system's
# packages and indexes, without installing or downloading anything.
if command -v apt-get >/dev/null; then
  timeout 120 apt-get install --simulate --no-install-recommends "${debs[@]}" > "$tmp/apt.log" 2>&1 \
    || { cat "$tmp/apt.log"; fail "apt-get cannot satisfy the packages' Depends"; }
  echo "apt-get --simulate: Depends resolvable ($(grep -c '^Inst ' "$tmp/apt.log") packages to install)"
fi

root="$tmp/root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status" "$root/var/lib/dpkg/available"
mkdir "$root/etc"  # as any root has: postinst adds the gossipd user to its passwd
# dpkg sets DPKG_ROOT for the chrootless maintainer scripts.
dpkg_root() { timeout 120 dpkg --root="$root" --log=/dev/null --force-script-chrootless "$@"; }
echo "== dpkg -i"
# The Depends are all missing from the empty root: dpkg's list of them is left out.
dpkg_root --force-depends -i "${debs[@]}" 2>&1 \
  | grep -v -e ' depends on ' -e ' is not installed\.' -e '^ *$' | sed 's/^/  /'
for p in gossipd libgossip0 libgossip-dev; do
  [[ "$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Status}' "$p")" == "install ok installed" ]] \
    || fail "$p is not installed in the root"
done
grep -q '^gossipd:' "$root/etc/passwd" 2>/dev/null && echo "postinst: user $(grep '^gossipd:' "$root/etc/passwd")" \
  || echo "postinst: no gossipd user in the root (systemd-sysusers is missing here)"

# Where the files land. Only /usr: the packages own nothing in /etc, /var or /run.
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)"
lib="$root/usr/lib/$multiarch"
for f in usr/bin/gossipd usr/bin/gossipctl usr/bin/gossip-train \
         "usr/lib/$multiarch/libgossip.so.0" "usr/lib/$multiarch/libgossip.so.$version" \
         "usr/lib/$multiarch/libgossip.so" usr/include/gossip/gossip.h usr/include/gossip/client.h \
         usr/include/gossip/status.h "usr/lib/$multiarch/cmake/gossipd/gossipdConfig.cmake" \
         "usr/lib/$multiarch/cmake/gossipd/gossipdTargets.cmake" "usr/lib/$multiarch/pkgconfig/gossipd.pc" \
         usr/lib/systemd/system/gossipd@.service usr/lib/sysusers.d/gossipd.conf \
         usr/lib/tmpfiles.d/gossipd.conf usr/share/doc/gossipd/examples/node.toml; do
  [[ -e "$root/$f" ]] || fail "/$f is not installed"
done
outside="$(dpkg-query --admindir="$root/var/lib/dpkg" -L gossipd libgossip0 libgossip-dev \
           | grep -v -e '^/usr' -e '^/\.$' -e '^$' || true)"
[[ -z "$outside" ]] || fail "files outside /usr: $outside"
echo "files: under /usr, lib/$multiarch ($(dpkg-query --admindir="$root/var/lib/dpkg" -L gossipd libgossip0 \
  libgossip-dev | wc -l) paths)"

# The installed programs and library, from the root (the libraries they need are this
# system's, which apt-get --simulate found installed or installable).
export LD_LIBRARY_PATH="$lib"
for prog in gossipd gossipctl gossip-train; do
  out="$(timeout 10 "$root/usr/bin/$prog" --version)"
  echo "$prog --version: $out"
  [[ "$out" == *"$version"* ]] || fail "$prog --version does not print $version"
done
if command -v python3 >/dev/null; then
  python3 -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$lib/libgossip.so.0" \
    || fail "libgossip.so.0 does not load"
  echo "libgossip.so.0: loads"
fi

# The packaged example config starts a node. Addresses, peers, run dir and checkpoint are
# overridden (this machine is not 10.0.0.1 and has no /run/gossipd of ours); the rest,
# metrics_port and the strategy included, is the file's.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())' "$1"; }
if command -v python3 >/dev/null; then
  port="$(free_port)"; mport="$(free_port)"
  mkdir "$tmp/run"
  timeout $((wait_s + 30)) "$root/usr/bin/gossipd" --config "$root/usr/share/doc/gossipd/examples/node.toml" \
    --listen "tcp://127.0.0.1:$port" --peer "1=tcp://127.0.0.1:$(free_port)" --run-dir "$tmp/run" \
    --checkpoint "$tmp/node.ckpt" --metrics-port "$mport" > "$tmp/gossipd.log" 2>&1 &
  daemon=$!
  deadline=$((SECONDS + wait_s))
  until [[ -S "$tmp/run/gossipd-0.sock" ]] && get "http://127.0.0.1:$mport/metrics" > "$tmp/metrics" 2>/dev/null; do
    kill -0 "$daemon" 2>/dev/null || { cat "$tmp/gossipd.log"; fail "gossipd exited on the example config"; }
    ((SECONDS < deadline)) || { cat "$tmp/gossipd.log"; fail "gossipd not up within ${wait_s}s"; }
    sleep 0.2
  done
  grep -q '^gossipd_info' "$tmp/metrics" || fail "/metrics has no gossipd_info"
  kill "$daemon"; wait "$daemon" || true; daemon=""
  echo "example config: gossipd started, socket and /metrics up"
fi

# The unit as systemd reads it. verify checks that ExecStart's program exists on this
# system (--root would need a whole systemd tree in the root), so a copy whose ExecStart
# names the root's gossipd is verified; verify instantiates the template itself. It
# exits 0 on unknown keys and bad values and only prints them, so any output fails.
if command -v systemd-analyze >/dev/null; then
  mkdir "$tmp/units"
  sed "s|^ExecStart=/usr/bin/gossipd |ExecStart=$root/usr/bin/gossipd |" \
    "$root/usr/lib/systemd/system/gossipd@.service" > "$tmp/units/gossipd@.service"
  grep -q "^ExecStart=$root/" "$tmp/units/gossipd@.service" || fail "the unit's ExecStart is not /usr/bin/gossipd"
  timeout 60 systemd-analyze verify --man=no "$tmp/units/gossipd@.service" > "$tmp/verify.log" 2>&1 \
    || { cat "$tmp/verify.log"; fail "systemd-analyze verify"; }
  [[ ! -s "$tmp/verify.log" ]] || { cat "$tmp/verify.log"; fail "systemd-analyze verify complains"; }
  echo "systemd-analyze verify gossipd@.service: ok, nothing printed"
else
  echo "systemd-analyze missing: the unit is not verified"
fi

echo "== dpkg -r, -P"
dpkg_root -r libgossip-dev gossipd libgossip0 2>&1 | sed 's/^/  /'
dpkg_root -P libgossip-dev gossipd libgossip0 2>&1 | sed 's/^/  /'
left="$(find "$root/usr" \( -type f -o -type l \) 2>/dev/null || true)"
[[ -z "$left" ]] || fail "left after dpkg -r: $left"
for p in gossipd libgossip0 libgossip-dev; do
  status="$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)"
  [[ -z "$status" || "$status" == not-installed ]] || fail "$p is still $status"
done
echo "deb test: passed in $((SECONDS - start)) s"
