#!/usr/bin/env bash
# `srun -n 4 gossipctl run --peers-from slurm -- gossip-train ...` under a real Slurm
# (Debian's slurm-wlm, started on loopback by scripts/slurm-local.sh) trains
# Fashion-MNIST with 4 nodes and reaches the accuracy `gossipctl cluster` reaches with
# the same settings. Exits 77 with the reason where Slurm cannot be started.
#
# Usage: tests/deploy/slurm_test.sh BIN_DIR SOURCE_DIR
#   KEEP=1  leave the work directory (srun.log, the results) for a look afterwards
set -euo pipefail
bin=${1:?BIN_DIR}
src=${2:?SOURCE_DIR}
steps=600
seed=3
settings=(--strategy local-sgd --period 8 --seed "$seed")

work=$(mktemp -d /tmp/gossip-slurm-XXXXXX)
started=0
cleanup() {
  [[ $started == 1 ]] && "$src/scripts/slurm-local.sh" stop "$work/slurm" >/dev/null 2>&1 || true
  [[ -n "${KEEP:-}" ]] || rm -rf "$work"
}
trap cleanup EXIT

if [[ ! -d /usr/share/datasets/fashion-mnist ]]; then
  echo "SKIP: dataset-fashion-mnist is not installed (scripts/install-deps.sh installs it)" >&2
  exit 77
fi

set +e
exports=$("$src/scripts/slurm-local.sh" start "$work/slurm" 2>"$work/slurm-start.err")
rc=$?
set -e
if [[ $rc == 77 ]]; then
  echo "SKIP: $(tail -n 1 "$work/slurm-start.err")" >&2
  exit 77
fi
if [[ $rc != 0 ]]; then
  echo "FAIL: Slurm did not start:" >&2
  cat "$work/slurm-start.err" >&2
  exit 1
fi
started=1
eval "$exports"

# Four consecutive free ports: node k listens on base + SLURM_LOCALID.
base=$(/usr/bin/python3 - <<'EOF'
import random, socket
for _ in range(200):
    base = random.randrange(30000, 60000)
    try:
        socks = []
        for p in range(base, base + 4):
            s = socket.socket(); s.bind(("0.0.0.0", p)); socks.append(s)
        print(base); break
    except OSError:
        pass
    finally:
        for s in socks: s.close()
EOF
)

start=$SECONDS
# The whole job step: every task is one node, its daemon and its trainer. The trainers'
# results go to per-task files; srun -K ends the step when one task fails.
timeout -k 10 240 srun -n 4 -K --export=ALL \
  "$bin/gossipctl" run --peers-from "slurm:$base" "${settings[@]}" \
  -- /bin/sh -c "exec '$bin/gossip-train' --steps $steps --seed $seed --eval-every 0 \
  --result '$work/result.'\$GOSSIP_NODE" >"$work/srun.log" 2>&1 || {
  echo "FAIL: srun exited with $?:" >&2
  tail -n 60 "$work/srun.log" >&2
  exit 1
}
srun_s=$((SECONDS - start))

# Every task wrote its result; each node sees 4 nodes, named after the Slurm host.
host=$(hostname -s)
for k in 0 1 2 3; do
  grep -q "node $k ($host:$((base + k))) of 4 listening" "$work/srun.log" || {
    echo "FAIL: no daemon for task $k named $host:$((base + k)) in the log:" >&2
    grep -E "listening on|error" "$work/srun.log" >&2 || true
    exit 1
  }
done

accuracy_run=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["accuracy_average"])' "$work/result.0")
for k in 1 2 3; do [[ -s "$work/result.$k" ]] || { echo "FAIL: task $k wrote no result" >&2; exit 1; }; done

cluster_json=$(timeout -k 10 240 "$bin/gossipctl" cluster --nodes 4 --steps "$steps" "${settings[@]}" --json)
accuracy_cluster=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["accuracy_average_model"])' "$cluster_json")

echo "srun -n 4 gossipctl run: accuracy $accuracy_run in ${srun_s} s; gossipctl cluster: $accuracy_cluster"
/usr/bin/python3 - "$accuracy_run" "$accuracy_cluster" <<'EOF'
import sys
run, cluster = map(float, sys.argv[1:])
if run < 0.75:
    sys.exit(f"FAIL: the Slurm run reached {run:.4f}, below 0.75")
if abs(run - cluster) > 0.01:
    sys.exit(f"FAIL: the Slurm run reached {run:.4f}, gossipctl cluster {cluster:.4f}: more than a point apart")
print("PASS")
EOF
