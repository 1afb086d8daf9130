#!/usr/bin/env bash
# A real Prometheus scraping a 3-node gossipd cluster on loopback.
#   tests/deploy/prometheus_test.sh BIN_DIR SOURCE_DIR
#
# Starts 3 gossipd (local SGD, --metrics-port each) with one gossip-train each, writes a
# prometheus.yml with a 1 s scrape interval and one static job (a `node` label per
# target, as in docs/monitoring.md), starts prometheus on 127.0.0.1, and waits, bounded,
# until through Prometheus' HTTP API: every target is up (no scrape error: Prometheus
# accepted the exposition), every node has up, gossipd_build_info, gossipd_info (whose
# node label agrees with the target's), gossipd_trainers >= 1, gossipd_rounds_total and
# gossipd_bytes_sent_total, and both counters changed between two scrapes (training ran)
# without a reset. Then checks docs/monitoring.md against the code and the scrape: every
# gossipd_* name it writes exists in the source, every family scraped is in it.
#
# Exit status: 0 pass, 1 fail, 2 usage, 77 skipped (prometheus or the data set missing).
# PROMETHEUS_TEST_WAIT_S bounds the wait for Prometheus' view (default 60).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BIN_DIR SOURCE_DIR" >&2
  exit 2
fi
bin="$(cd "$1" && pwd)"
src="$(cd "$2" && pwd)"

prometheus="$(command -v prometheus || true)"
[[ -z "$prometheus" && -x /usr/bin/prometheus ]] && prometheus=/usr/bin/prometheus
if [[ -z "$prometheus" ]]; then
  echo "SKIP: prometheus is not installed (scripts/install-deps.sh installs it)"
  exit 77
fi
data_dir="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
if [[ ! -f "$data_dir/train-images-idx3-ubyte.gz" ]]; then
  echo "SKIP: Fashion-MNIST is not in $data_dir (scripts/install-deps.sh installs dataset-fashion-mnist)"
  exit 77
fi
for p in gossipd gossip-train; do
  [[ -x "$bin/$p" ]] || { echo "FAIL: $bin/$p is not an executable"; exit 1; }
done
python=/usr/bin/python3
[[ -x "$python" ]] || python="$(command -v python3)"
have_curl=0
command -v curl > /dev/null && have_curl=1

readonly nodes=3
readonly wait_s="${PROMETHEUS_TEST_WAIT_S:-60}"
readonly lifetime_s=$((wait_s + 120))  # every process dies by itself after this, whatever happens
tmp="$(mktemp -d /tmp/gossipd-prometheus.XXXXXX)"
pids=()
started=$SECONDS
passed=0

log() { printf '[%3ds] %s\n' $((SECONDS - started)) "$*"; }

stop_all() {
  # TERM, up to 5 s to exit, then KILL; every process is a `timeout` wrapper, which
  # passes the TERM on to its child.
  local pid alive
  ((${#pids[@]})) || return 0
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2> /dev/null || true; done
  for _ in $(seq 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2> /dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2> /dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2> /dev/null || true; done
  pids=()
}

show_logs() {
  local f
  for f in "$tmp"/*.log; do
    [[ -f "$f" ]] || continue
    echo "--- last lines of $(basename "$f")"
    tail -n 15 "$f"
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  trap '' PIPE  # a closed stdout must not stop the clean-up
  set +e
  stop_all
  ((passed)) || show_logs
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# GET URL [name=value ...] (the pairs form-encoded as the query string) to stdout.
http_get() {
  local url="$1"
  shift
  if ((have_curl)); then
    local args=()
    for kv in "$@"; do args+=(--data-urlencode "$kv"); done
    curl -fsS --max-time 5 -G "${args[@]}" "$url"
  else
    "$python" - "$url" "$@" << 'EOF'
import sys, urllib.parse, urllib.request
url, pairs = sys.argv[1], [tuple(a.split("=", 1)) for a in sys.argv[2:]]
if pairs:
    url += "?" + urllib.parse.urlencode(pairs)
with urllib.request.urlopen(url, timeout=5) as r:
    sys.stdout.write(r.read().decode())
EOF
  fi
}

# Free loopback ports, all bound at once so they differ (the kernel picks them).
free_ports() {
  "$python" -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()' "$1"
}

mkdir -p "$tmp/run" "$tmp/api"
log "prometheus: $("$prometheus" --version 2>&1 | head -n 1)"
log "gossipd: $("$bin/gossipd" --version 2>&1 | head -n 1)"

# --- the cluster: 3 daemons with metrics, one trainer each --------------------------------
# A port picked here can, rarely, be taken before gossipd binds it (another process, or
# a daemon's own ring listener on an ephemeral port): then the cluster starts again.
start_cluster() {
  local ports i j peers
  read -r -a ports <<< "$(free_ports $((2 * nodes)))"
  peer_ports=("${ports[@]:0:nodes}")
  metrics_ports=("${ports[@]:nodes:nodes}")
  for ((i = 0; i < nodes; ++i)); do
    peers=()
    for ((j = 0; j < nodes; ++j)); do
      ((j == i)) || peers+=(--peer "$j=tcp://127.0.0.1:${peer_ports[j]}")
    done
    timeout -k 5 "$lifetime_s" "$bin/gossipd" --id "$i" --listen "tcp://127.0.0.1:${peer_ports[i]}" \
      --run-dir "$tmp/run" --metrics-port "${metrics_ports[i]}" --strategy local-sgd \
      --transport tcp --period 4 --seed 1 "${peers[@]}" > "$tmp/gossipd-$i.log" 2>&1 &
    pids+=($!)
  done
  # Each daemon answers /metrics (bounded), or the attempt fails.
  local deadline=$((SECONDS + 20)) up
  while :; do
    up=0
    for ((i = 0; i < nodes; ++i)); do
      kill -0 "${pids[i]}" 2> /dev/null || return 1
      http_get "http://127.0.0.1:${metrics_ports[i]}/metrics" > /dev/null 2>&1 && up=$((up + 1))
    done
    ((up == nodes)) && break
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
  for ((i = 0; i < nodes; ++i)); do
    timeout -k 5 "$lifetime_s" "$bin/gossip-train" --endpoint "ipc://$tmp/run/gossipd-$i.sock" \
      --node "$i" --nodes "$nodes" --steps 100000000 --eval-every 0 --seed 1 \
      --data-dir "$data_dir" --startup-timeout-s 30 --timeout-s 60 > "$tmp/gossip-train-$i.log" 2>&1 &
    pids+=($!)
  done
}

for attempt in 1 2 3; do
  if start_cluster; then break; fi
  if ((attempt == 3)) || ! grep -qi "in use" "$tmp"/gossipd-*.log; then
    fail "the cluster did not start: a gossipd exited or did not serve /metrics within 20 s"
  fi
  log "a port was taken before gossipd bound it; starting the cluster again"
  stop_all
done
log "cluster up: peers on 127.0.0.1:{${peer_ports[*]}}, metrics on 127.0.0.1:{${metrics_ports[*]}}"

# Informational: promtool's lint of one node's exposition (Prometheus' own parse is the test).
if command -v promtool > /dev/null; then
  http_get "http://127.0.0.1:${metrics_ports[0]}/metrics" > "$tmp/node0.prom"
  if lint="$(promtool check metrics < "$tmp/node0.prom" 2>&1)"; then
    log "promtool check metrics (node 0): no problems"
  else
    log "promtool check metrics (node 0) says (not a failure):"
    printf '  %s\n' "$lint"
  fi
fi

# --- Prometheus ---------------------------------------------------------------------------
prom_port="$(free_ports 1)"
{
  echo "# Written by tests/deploy/prometheus_test.sh; see docs/monitoring.md."
  echo "global:"
  echo "  scrape_interval: 1s"
  echo "  scrape_timeout: 1s"
  echo "  evaluation_interval: 1s"
  echo "scrape_configs:"
  echo "  - job_name: gossipd"
  echo "    metrics_path: /metrics"
  echo "    static_configs:"
  for ((i = 0; i < nodes; ++i)); do
    echo "      - targets: ['127.0.0.1:${metrics_ports[i]}']"
    echo "        labels:"
    echo "          node: '$i'"
  done
} > "$tmp/prometheus.yml"
if command -v promtool > /dev/null; then
  promtool check config "$tmp/prometheus.yml" > "$tmp/promtool-config.out" 2>&1 ||
    { cat "$tmp/promtool-config.out"; fail "promtool rejects the generated prometheus.yml"; }
fi
timeout -k 5 "$lifetime_s" "$prometheus" --config.file="$tmp/prometheus.yml" \
  --storage.tsdb.path="$tmp/tsdb" --web.listen-address="127.0.0.1:$prom_port" \
  > "$tmp/prometheus.log" 2>&1 &
pids+=($!)
prom_pid=$!
api="http://127.0.0.1:$prom_port"

deadline=$((SECONDS + wait_s))
until http_get "$api/-/ready" > /dev/null 2>&1; do
  kill -0 "$prom_pid" 2> /dev/null || fail "prometheus exited at start (its log is below)"
  ((SECONDS < deadline)) || fail "prometheus was not ready at $api within ${wait_s} s"
  sleep 0.2
done
log "prometheus ready at $api"

# The queries whose answers decide; the evaluator below reads them from $tmp/api.
declare -A queries=(
  [up]='up{job="gossipd"}'
  [build_info]='gossipd_build_info{job="gossipd"}'
  [info]='gossipd_info{job="gossipd"}'
  [trainers]='gossipd_trainers{job="gossipd"}'
  [rounds]='gossipd_rounds_total{job="gossipd"}'
  [bytes]='sum by (node) (gossipd_bytes_sent_total{job="gossipd"})'
  [rounds_changes]='changes(gossipd_rounds_total{job="gossipd"}[1m])'
  [bytes_changes]='sum by (node) (changes(gossipd_bytes_sent_total{job="gossipd"}[1m]))'
  [rounds_resets]='resets(gossipd_rounds_total{job="gossipd"}[1m])'
)

cat > "$tmp/evaluate.py" << 'EOF'
# Reads $tmp/api/*.json (Prometheus API answers); prints what is still missing, one
# line each, or nothing when every node has everything.
import json, os, sys

api, nodes = sys.argv[1], [str(i) for i in range(int(sys.argv[2]))]
missing = []

def load(name):
    try:
        with open(os.path.join(api, name + ".json")) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        missing.append(f"{name}: no answer from the API ({e})")
        return None
    if doc.get("status") != "success":
        missing.append(f"{name}: {doc.get('errorType')}: {doc.get('error')}")
        return None
    return doc["data"]

down = set()  # nodes whose target is not up: their series are not listed as missing too
targets = load("targets")
if targets is not None:
    active = [t for t in targets.get("activeTargets", []) if t["labels"].get("job") == "gossipd"]
    seen = {t["labels"].get("node"): t for t in active}
    for n in nodes:
        t = seen.get(n)
        if t is None or t["health"] != "up":
            down.add(n)
        if t is None:
            missing.append(f"node {n}: no active target")
        elif t["health"] != "up":
            err = t.get("lastError") or "not scraped yet"
            missing.append(f"node {n}: target {t['scrapeUrl']} is {t['health']}: {err}")

def by_node(name):
    data = load(name)
    out = {}
    for r in (data or {}).get("result", []):
        out.setdefault(r["metric"].get("node"), []).append((r["metric"], float(r["value"][1])))
    return out, data is not None

checks = [
    ("up", "up == 1", lambda m, v: v == 1),
    ("build_info", "gossipd_build_info present", lambda m, v: v == 1 and m.get("version")),
    ("info", "gossipd_info present, its node label (exported_node) = the target's",
     lambda m, v: v == 1 and m.get("exported_node") == m.get("node")),
    ("trainers", "gossipd_trainers >= 1 (a trainer attached)", lambda m, v: v >= 1),
    ("rounds", "gossipd_rounds_total present", lambda m, v: True),
    ("bytes", "gossipd_bytes_sent_total present", lambda m, v: True),
    ("rounds_changes", "gossipd_rounds_total increased between two scrapes", lambda m, v: v >= 1),
    ("bytes_changes", "gossipd_bytes_sent_total increased between two scrapes", lambda m, v: v >= 1),
    ("rounds_resets", "gossipd_rounds_total never went down", lambda m, v: v == 0),
]
for name, what, ok in checks:
    series, answered = by_node(name)
    if not answered:
        continue
    for n in nodes:
        rows = series.get(n, [])
        if n in down:
            continue
        if not rows:
            missing.append(f"node {n}: {what}: no series")
        elif not all(ok(m, v) for m, v in rows):
            missing.append(f"node {n}: {what}: got {[v for _, v in rows]} "
                           f"{[m for m, _ in rows] if name == 'info' else ''}".rstrip())
print("\n".join(missing))
EOF

poll() {
  rm -f "$tmp"/api/*.json
  http_get "$api/api/v1/targets" state=active > "$tmp/api/targets.json" 2> /dev/null || true
  local q
  for q in "${!queries[@]}"; do
    http_get "$api/api/v1/query" "query=${queries[$q]}" > "$tmp/api/$q.json" 2> /dev/null || true
  done
  "$python" "$tmp/evaluate.py" "$tmp/api" "$nodes"
}

prom_start=$SECONDS
while :; do
  missing="$(poll)"
  [[ -z "$missing" ]] && break
  kill -0 "$prom_pid" 2> /dev/null || fail "prometheus exited (its log is below)"
  for ((i = 0; i < nodes; ++i)); do
    kill -0 "${pids[i]}" 2> /dev/null || fail "gossipd $i exited (its log is below)"
  done
  if ((SECONDS >= deadline)); then
    echo "FAIL: after ${wait_s} s, Prometheus still lacks:"
    while IFS= read -r line; do echo "  $line"; done <<< "$missing"
    exit 1
  fi
  sleep 1
done
log "Prometheus has every node's series, and their counters moved ($((SECONDS - prom_start)) s after it started)"
"$python" - "$tmp/api" << 'EOF'
import json, sys
def rows(name):
    with open(f"{sys.argv[1]}/{name}.json") as f:
        return {r["metric"]["node"]: r["value"][1] for r in json.load(f)["data"]["result"]}
rounds, changes, sent = rows("rounds"), rows("rounds_changes"), rows("bytes")
for n in sorted(rounds):
    print(f"  node {n}: gossipd_rounds_total {rounds[n]} (changed {changes.get(n)} times in 1m), "
          f"gossipd_bytes_sent_total {float(sent.get(n, 0)):.0f}")
EOF

# --- docs/monitoring.md against the code and the scrape -----------------------------------
doc="$src/docs/monitoring.md"
[[ -f "$doc" ]] || fail "$doc is missing"
http_get "$api/api/v1/label/__name__/values" 'match[]={job="gossipd"}' > "$tmp/api/names.json" ||
  fail "cannot list the metric names from $api"
doc_problems="$("$python" - "$doc" "$src" "$tmp/api/names.json" << 'EOF'
import json, pathlib, re, sys
doc, src, names = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
word = re.compile(r"\bgossipd_[a-z0-9_]+")
# Names the code exports: metrics_text.cc, the strategies' gauges and the tuner's.
code = set()
for f in [src / "daemon/metrics_text.cc", src / "daemon/tuner.cc",
          *sorted((src / "sgd").rglob("*.cc"))]:
    code |= {m for m in word.findall(f.read_text()) if not m.endswith("_")}
in_doc = set(word.findall(doc.read_text()))
scraped = {n for n in json.load(open(names))["data"] if n.startswith("gossipd_")}
for n in sorted(in_doc - code):
    print(f"docs/monitoring.md names {n}, which the code does not export")
for n in sorted(scraped - in_doc):
    print(f"Prometheus scraped {n}, which docs/monitoring.md does not mention")
EOF
)"
[[ -z "$doc_problems" ]] || fail "$(printf '\n  %s' "$doc_problems")"
log "docs/monitoring.md: every gossipd_* name exists in the code; every scraped family is documented"

passed=1
log "PASS: Prometheus scraped all $nodes nodes"
