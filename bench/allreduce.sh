#!/usr/bin/env bash
# Our TCP all-reduces (ring, tree, butterfly, master, and auto's choice) against
# OpenMPI and Gloo, on loopback, one process per rank; see bench/allreduce/README.md.
#
#   bench/allreduce.sh                                   # 2, 3, 4, 8 ranks, 4K..256M, 3 runs
#   bench/allreduce.sh --ranks 2 --sizes 1M,16M --runs 1 # a quick look
#   bench/allreduce.sh --algorithms ring,auto            # only these of ours
#   bench/allreduce.sh --algorithms ring,ring-sealed --only-ours   # the cost of sealing (CURVE)
#   bench/allreduce.sh --algorithms auto,auto-spin20 --only-ours    # waits that busy-poll 20 us
#   bench/allreduce.sh --write-table FILE                # auto's table from this run (--allreduce-table)
#   NO_INSTALL=1 NO_BUILD=1 BUILD_DIR=build-bench bench/allreduce.sh   # no apt-get, no ninja
#
# Installs openmpi-bin, libopenmpi-dev, libgloo-dev and iperf3 with apt-get when
# they are missing (NO_INSTALL=1 to skip), builds ring_bench in ${BUILD_DIR:-build}
# (configured here if it is not yet; NO_BUILD=1 to use the binary there) and
# mpi_bench / gloo_bench beside it with mpicxx / g++ when stale, then runs every
# (ranks, run, implementation) in turn, all sizes per
# launch. Each cell of the table is the median over runs of rank 0's median call;
# bus bandwidth is 2(n-1)/n * bytes / time (nccl-tests). iperf3 gives the loopback
# TCP bound. Every process is bounded by `timeout` and killed on exit. A launch that
# fails (a rank's exit status, a connect that did not happen) is named, and the script
# exits 1 after the table.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
[[ "$build" = /* ]] || build="$root/$build"
ranks="2,3,4,8"
sizes="4K,64K,1M,16M,64M,256M"
reps="200,100,50,15,6,3"     # timed calls per size: fewer for the big ones
warmup="20,10,5,2,1,1"
algorithms="ring,tree,butterfly,master,auto"
write_table=""
runs=3
chunk_bytes=1048576       # ring_bench's pipeline chunk (see README: 1 MiB measured best)
keep=""
only_ours=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --chunk-bytes) chunk_bytes="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;   # directory to keep the raw JSON lines and logs in
    --only-ours) only_ours=1; shift ;;  # no OpenMPI, Gloo or iperf3 (nothing installed)
    --algorithms) algorithms="$2"; shift 2 ;;
    --write-table) write_table="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

tmp="$(mktemp -d /tmp/allreduce-bench.XXXXXX)"
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  sleep 0.5
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  if [[ -n "$keep" ]]; then mkdir -p "$keep" && cp -r "$tmp"/. "$keep"/; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- install -------------------------------------------------------------------------
if [[ -z "${NO_INSTALL:-}" && -z "$only_ours" ]]; then
  need=()
  command -v mpicxx >/dev/null || need+=(openmpi-bin libopenmpi-dev)
  [[ -f /usr/include/gloo/allreduce.h ]] || need+=(libgloo-dev)
  command -v iperf3 >/dev/null || need+=(iperf3)
  if [[ ${#need[@]} -gt 0 ]]; then
    echo "# apt-get install ${need[*]}" >&2
    timeout 300 apt-get update -qq >&2 || true
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y --no-install-recommends "${need[@]}" >&2
  fi
fi

# --- build ---------------------------------------------------------------------------
bin="$build/bin"
if [[ -z "${NO_BUILD:-}" ]]; then
  if [[ ! -f "$build/build.ninja" ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DGOSSIP_WITH_CUDA=OFF -DGOSSIP_BUILD_TESTS=OFF >&2
  fi
  ninja -C "$build" -j2 ring_bench >&2
fi
[[ -x "$bin/ring_bench" ]] || { echo "no $bin/ring_bench (build it, or unset NO_BUILD)" >&2; exit 1; }
mkdir -p "$bin"
# mpi_bench and gloo_bench take seconds: rebuilt whenever a source is newer. -O2 like
# the RelWithDebInfo build of ring_bench.
stale() { [[ ! -x "$1" || "$here/allreduce/$2" -nt "$1" || "$here/allreduce/bench_loop.h" -nt "$1" ]]; }
if [[ -z "$only_ours" ]] && stale "$bin/mpi_bench" mpi_bench.cc; then
  mpicxx -std=c++20 -O2 -g -DOMPI_SKIP_MPICXX -Wall -Wextra -I"$root" \
    "$here/allreduce/mpi_bench.cc" -o "$bin/mpi_bench" >&2
fi
if [[ -z "$only_ours" ]] && stale "$bin/gloo_bench" gloo_bench.cc; then
  g++ -std=c++20 -O2 -g -I"$root" "$here/allreduce/gloo_bench.cc" -o "$bin/gloo_bench" \
    -lgloo -pthread >&2
fi

# --- run -----------------------------------------------------------------------------
results="$tmp/results.jsonl"
: > "$results"
launch_timeout=300   # seconds for one launch of all sizes
failed=0             # launches that failed: the table shows what the others measured

# Starts n ranks of a file-rendezvous bench ($1 = ring_bench or gloo_bench), waits;
# $4: ring_bench's algorithm.
run_ranks() {
  local prog="$1" n="$2" tag="$3" algorithm="${4:-}" r
  local dir="$tmp/rdv-$tag"
  mkdir -p "$dir"
  local mine=()
  for ((r = 0; r < n; r++)); do
    # ALGORITHM[-sealed][-spinUS]: sealed links; waits that busy-poll US microseconds.
    local extra=() base="$algorithm"
    if [[ "$base" == *-spin* ]]; then extra+=(--busy-poll-us "${base##*-spin}"); base="${base%-spin*}"; fi
    if [[ "$base" == *-sealed ]]; then extra+=(--sealed); base="${base%-sealed}"; fi
    [[ "$prog" == ring_bench ]] && extra+=(--chunk-bytes "$chunk_bytes" --algorithm "$base")
    if [[ $r -eq 0 ]]; then
      timeout -k 5 "$launch_timeout" "$bin/$prog" --rank "$r" --size "$n" --dir "$dir" \
        --sizes "$sizes" --reps "$reps" --warmup "$warmup" "${extra[@]}" \
        >> "$results" 2> "$tmp/$tag.rank$r.log" &
    else
      timeout -k 5 "$launch_timeout" "$bin/$prog" --rank "$r" --size "$n" --dir "$dir" \
        --sizes "$sizes" --reps "$reps" --warmup "$warmup" "${extra[@]}" \
        > /dev/null 2> "$tmp/$tag.rank$r.log" &
    fi
    pids+=($!)
    mine+=($!)
  done
  local rc=0 pid
  for pid in "${mine[@]}"; do wait "$pid" || rc=$?; done
  if [[ $rc -ne 0 ]]; then
    failed=$((failed + 1))
    echo "# $tag failed (exit $rc); rank logs:" >&2
    tail -n 3 "$tmp/$tag".rank*.log >&2 || true
  fi
}

run_mpi() {
  local n="$1" tag="$2"
  timeout -k 5 "$launch_timeout" mpirun --oversubscribe --allow-run-as-root \
    --mca btl tcp,self --mca btl_tcp_if_include lo -np "$n" \
    "$bin/mpi_bench" --sizes "$sizes" --reps "$reps" --warmup "$warmup" \
    >> "$results" 2> "$tmp/$tag.log" &
  pids+=($!)
  local rc=0
  wait $! || rc=$?
  if [[ $rc -ne 0 ]]; then
    failed=$((failed + 1))
    echo "# $tag failed (exit $rc):" >&2
    tail -n 5 "$tmp/$tag.log" >&2
  fi
}

echo "# $(date -u +%FT%TZ) $(nproc) cores, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "# ranks=$ranks sizes=$sizes reps=$reps warmup=$warmup runs=$runs chunk=$chunk_bytes" >&2
start=$SECONDS
IFS=',' read -r -a rank_list <<< "$ranks"
for n in "${rank_list[@]}"; do
  for ((run = 1; run <= runs; run++)); do
    # The three in turn, so that background load falls on all of them alike.
    echo "# n=$n run $run/$runs: ours ($algorithms), openmpi, gloo ($((SECONDS - start)) s)" >&2
    IFS=',' read -r -a algorithm_list <<< "$algorithms"
    for algorithm in "${algorithm_list[@]}"; do
      run_ranks ring_bench "$n" "$algorithm-n$n-r$run" "$algorithm"
    done
    [[ -n "$only_ours" ]] && continue
    run_mpi "$n" "mpi-n$n-r$run"
    run_ranks gloo_bench "$n" "gloo-n$n-r$run"
  done
done

# --- loopback TCP bound ----------------------------------------------------------------
iperf_json="$tmp/iperf.json"
iperf_bidir_json="$tmp/iperf-bidir.json"
port=$((20000 + RANDOM % 20000))
if [[ -z "$only_ours" ]] && command -v iperf3 >/dev/null; then
  timeout -k 2 40 iperf3 -s -B 127.0.0.1 -p "$port" > "$tmp/iperf-server.log" 2>&1 &
  pids+=($!)
  server=$!
  sleep 0.5
  timeout -k 2 15 iperf3 -c 127.0.0.1 -p "$port" -t 5 -J > "$iperf_json" 2>/dev/null || true
  timeout -k 2 15 iperf3 -c 127.0.0.1 -p "$port" -t 5 --bidir -J > "$iperf_bidir_json" 2>/dev/null || true
  kill "$server" 2>/dev/null || true
fi
echo "# done in $((SECONDS - start)) s, load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# --- table ---------------------------------------------------------------------------
# A table from a run with failed launches would pick from what happened to finish.
if ((failed > 0)) && [[ -n "$write_table" ]]; then
  echo "# not writing $write_table: $failed launch(es) failed" >&2
  write_table=""
fi
python3 - "$results" "$iperf_json" "$iperf_bidir_json" "$algorithms" "$write_table" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = sys.argv[4].split(",")
table_out = sys.argv[5]
def iperf(path, key):
    try:
        j = json.load(open(path))
        return j["end"][key]["bits_per_second"] / 8e9
    except Exception:
        return None
uni = iperf(sys.argv[2], "sum_received")
bidir = iperf(sys.argv[3], "sum_received")  # the client's receive direction of --bidir
cells = {}
for r in rows:
    cells.setdefault((r["impl"], r["ranks"], r["bytes"]), []).append(r["median_s"])
def t(impl, n, b):
    v = cells.get((impl, n, b))
    return statistics.median(v) if v else None
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
def ms(s):
    return "—" if s is None else (f"{s * 1e3:.3f} ms" if s < 0.01 else f"{s * 1e3:.1f} ms")
runs = max((len(v) for v in cells.values()), default=0)
FIXED = {"ring", "tree", "butterfly", "master"}  # ours without variants: --write-table's choices
head = " | ".join(ours)
print(f"\n| size | ranks | {head} | OpenMPI | Gloo | fastest fixed | auto / best of MPI, Gloo |")
print("| --- | --- | " + " | ".join("---" for _ in ours) + " | --- | --- | --- | --- |")
choices = {}
for n in sorted({k[1] for k in cells}):
    for b in sorted({k[2] for k in cells if k[1] == n}):
        mine = {a: t("gossipd-" + a, n, b) for a in ours}
        m, g = t("openmpi", n, b), t("gloo", n, b)
        fastest = min(((v, a) for a, v in mine.items() if v and a in FIXED), default=(None, None))
        if fastest[1]:
            choices.setdefault(n, []).append((b, fastest[1]))
        best = min([x for x in (m, g) if x is not None], default=None)
        auto = mine.get("auto")
        ratio = "—"
        if auto and best:
            goal = 1.3 if b >= 64 << 20 else 1.0
            ratio = f"{best / auto:.2f}x " + ("✓" if best / auto >= goal else "✗")
        cols = " | ".join(("**" + ms(v) + "**") if a == fastest[1] else ms(v) for a, v in mine.items())
        print(f"| {size(b)} | {n} | {cols} | {ms(m)} | {ms(g)} | {fastest[1] or '—'} | {ratio} |")
print(f"\nEach cell: median over {runs} run(s) of rank 0's median call; bold and 'fastest fixed': our fastest of ring, tree, butterfly and master (what --write-table records).")
sealed = [a for a in ours if a.endswith("-sealed") and a[:-len("-sealed")] in ours]
if sealed:
    print("\n| size | ranks | " + " | ".join(f"{a} bandwidth lost" for a in sealed) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in sealed) + " |")
    for n in sorted({k[1] for k in cells}):
        for b in sorted({k[2] for k in cells if k[1] == n}):
            cols = []
            for a in sealed:
                plain, sealed_t = t("gossipd-" + a[:-len("-sealed")], n, b), t("gossipd-" + a, n, b)
                cols.append("—" if not plain or not sealed_t else f"{(1 - plain / sealed_t) * 100:.0f} %")
            print(f"| {size(b)} | {n} | " + " | ".join(cols) + " |")
    print("\nBandwidth lost: 1 - plain time / sealed time (goal: under 15 % at 64 MiB).")
print("auto / best: the better of OpenMPI and Gloo's time over auto's (goal: >= 1.0x, and >= 1.3x at 64 MiB and above).")
if uni:
    print(f"iperf3 loopback TCP, one stream: {uni:.2f} GB/s" + (f"; --bidir: {bidir:.2f} GB/s each way" if bidir else "") + ".")
    for n in sorted({k[1] for k in cells}):
        ring = t("gossipd-ring", n, 64 << 20)
        if ring:
            bus = 2 * (n - 1) / n * (64 << 20) / ring / 1e9
            print(f"The ring at 64 MiB, {n} ranks: {bus:.2f} GB/s of bus bandwidth, {bus / uni * 100:.0f} % of one iperf3 stream (goal: 60 %).")
# Where rank 0's call goes (ring_bench's channel counters), the run of median time.
probes = {}
for r in rows:
    if "per_call_us" in r:
        probes.setdefault((r["impl"], r["ranks"], r["bytes"]), []).append(r)
if probes:
    print("\n| ours | size | ranks | call | asleep | spinning | in sendmsg | in recv | the rest | sendmsg / recv (empty) / ppoll / spin probes per call |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    def us(v):
        return f"{v:.0f} µs" if v >= 100 else f"{v:.1f} µs"
    for (impl, n, b) in sorted(probes, key=lambda k: (k[0], k[1], k[2])):
        runs_of = sorted(probes[(impl, n, b)], key=lambda r: r["median_s"])
        p = runs_of[len(runs_of) // 2]
        c, k = p["per_call_us"], p["syscalls_per_call"]
        print(f"| {impl[len('gossipd-'):]} | {size(b)} | {n} | {us(c['wall'])} | {us(c['sleep'])} | {us(c['spin'])} | {us(c['send'])} | {us(c['recv'])} | {us(c['other'])} | {k['sendmsg']:.1f} / {k['recv']:.1f} ({k['recv_empty']:.1f}) / {k['ppoll']:.1f} / {k.get('spin_probes', 0):.0f} |")
    print("\nPer call, rank 0, mean over the timed calls, in wall time (preemption included): asleep in ppoll (waiting for a peer or the kernel), in busy-poll probes that found nothing, in the system calls that move bytes, and the rest (reducing, copying, sealing, bookkeeping, the busy-poll's loop).")
if table_out:
    with open(table_out, "w") as f:
        f.write("# --allreduce-table: RANKS BYTES ALGORITHM, first row that bounds both wins\n")
        f.write("# measured by bench/allreduce.sh: our fastest algorithm per (ranks, size)\n")
        for n in sorted(choices):
            picks = sorted(choices[n])
            merged = []
            for i, (b, a) in enumerate(picks):
                # up to halfway (geometrically) to the next measured size
                limit = int((b * picks[i + 1][0]) ** 0.5) if i + 1 < len(picks) else 2**64 - 1
                if merged and merged[-1][1] == a:
                    merged[-1] = (limit, a)
                else:
                    merged.append((limit, a))
            for limit, a in merged:
                f.write(f"{n} {limit} {a}\n")
    print(f"auto's table written to {table_out}")
PY
if ((failed > 0)); then
  echo "# $failed launch(es) failed (above): exit 1" >&2
  exit 1
fi
