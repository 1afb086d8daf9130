#!/usr/bin/env bash
# Time per synchronization round between 2 gossipd on loopback, against a memcpy of
# the same size. Starts 2 daemons and 2 sync_trainer (one per node), prints node 0's
# JSON line and a one-line summary. Binaries come from ${BUILD_DIR:-build}/bin.
#
#   bench/sync_bench.sh [--numel N] [--rounds R] [--warmup W] [--tensors K]
#                       [--chunk-bytes B] [--log-level L] [--timeout S] [--keep] [--verbose]
#
# --keep leaves the run directory (daemon logs, trainer outputs) in place for reading;
# --verbose prints the trainers' per-phase and per-sync times on stderr.
set -euo pipefail

numel=100000000
rounds=10
warmup=2
tensors=1
chunk_bytes=""
log_level=warn
timeout_s=900  # bound on the whole trainer run
keep=0
verbose=()

usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --numel) numel="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --tensors) tensors="$2"; shift 2 ;;
    --chunk-bytes) chunk_bytes="$2"; shift 2 ;;
    --log-level) log_level="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --verbose) verbose=(--verbose); shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sync_bench: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

bin_dir="${BUILD_DIR:-build}/bin"
gossipd="$bin_dir/gossipd"
trainer="$bin_dir/sync_trainer"
for b in "$gossipd" "$trainer"; do
  [[ -x "$b" ]] || { echo "sync_bench: $b not found (build it, or set BUILD_DIR)" >&2; exit 2; }
done

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/sync_bench.XXXXXX")"
daemon_pids=()
trainer_pids=()

cleanup() {
  local rc=$?
  set +e
  for p in "${trainer_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${daemon_pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  # Bounded wait: a daemon gets 10 s to shut down cleanly (unlink its arena), then -9.
  for _ in $(seq 100); do
    local alive=0
    for p in "${daemon_pids[@]}" "${trainer_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for p in "${daemon_pids[@]}" "${trainer_pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      echo "sync_bench: pid $p did not stop; killing it" >&2
      kill -KILL "$p" 2>/dev/null
    fi
  done
  wait 2>/dev/null
  if [[ $keep -eq 1 ]]; then
    echo "sync_bench: run directory kept: $run_dir" >&2
  else
    rm -rf "$run_dir"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Prints the daemon logs and trainer errors, then exits 1.
die() {
  echo "sync_bench: $*" >&2
  for f in "$run_dir"/gossipd-*.log "$run_dir"/trainer-*.err; do
    [[ -s "$f" ]] || continue
    echo "--- $(basename "$f") (last 20 lines)" >&2
    tail -n 20 "$f" >&2
  done
  exit 1
}

# A port that was free a moment ago (the kernel picks it).
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ports=("$(free_port)" "$(free_port)")
while [[ "${ports[0]}" == "${ports[1]}" ]]; do ports[1]="$(free_port)"; done

for i in 0 1; do
  j=$((1 - i))
  args=(--id "$i" --listen "tcp://127.0.0.1:${ports[$i]}" --run-dir "$run_dir"
        --peer "$j=tcp://127.0.0.1:${ports[$j]}" --period 1 --round-timeout 120
        --log-level "$log_level")
  [[ -n "$chunk_bytes" ]] && args+=(--chunk-bytes "$chunk_bytes")
  "$gossipd" "${args[@]}" >"$run_dir/gossipd-$i.log" 2>&1 &
  daemon_pids+=("$!")
done

for i in 0 1; do
  sock="$run_dir/gossipd-$i.sock"
  for _ in $(seq 300); do  # 30 s
    [[ -S "$sock" ]] && break
    kill -0 "${daemon_pids[$i]}" 2>/dev/null || die "gossipd $i exited before creating $sock"
    sleep 0.1
  done
  [[ -S "$sock" ]] || die "gossipd $i did not create $sock within 30 s"
done

for i in 0 1; do
  timeout --kill-after=10 "$timeout_s" "$trainer" --endpoint "ipc://$run_dir/gossipd-$i.sock" \
    --numel "$numel" --tensors "$tensors" --rounds "$rounds" --warmup "$warmup" "${verbose[@]}" \
    >"$run_dir/trainer-$i.json" 2>"$run_dir/trainer-$i.err" &
  trainer_pids+=("$!")
done

for i in 0 1; do
  if wait "${trainer_pids[$i]}"; then rc=0; else rc=$?; fi
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    die "trainer $i did not finish within $timeout_s s"
  elif [[ $rc -ne 0 ]]; then
    die "trainer $i failed (exit $rc)"
  fi
done
trainer_pids=()
if [[ ${#verbose[@]} -gt 0 ]]; then cat "$run_dir"/trainer-*.err >&2; fi

line="$(head -n 1 "$run_dir/trainer-0.json")"
[[ -n "$line" ]] || die "trainer 0 printed nothing"
echo "$line"

field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" <<<"$line"; }
awk -v numel="$(field numel)" -v bytes="$(field bytes)" -v sync="$(field sync_median_s)" \
    -v copy="$(field memcpy_median_s)" -v ratio="$(field ratio_sync_over_memcpy)" 'BEGIN {
  if (numel >= 1e9) n = sprintf("%gG", numel / 1e9);
  else if (numel >= 1e6) n = sprintf("%gM", numel / 1e6);
  else if (numel >= 1e3) n = sprintf("%gK", numel / 1e3);
  else n = numel;
  printf "%s params (%g MB): sync median %.3g s (%.3g GB/s of model per node), memcpy %.3g s, ratio %s\n",
         n, bytes / 1e6, sync, bytes / sync / 1e9, copy, ratio
}'
