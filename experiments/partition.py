#!/usr/bin/env python3
"""A network partition that heals (issue 24): N nodes train Fashion-MNIST, each daemon in
a network namespace of its own on one bridge (experiments/testbed.py; needs root). When
every node has passed step --cut-at, nodes --side.. move to a second bridge: two groups
that reach nothing of each other (packets dropped, connections not reset, as a failed
switch does). Each group must keep training on its own. When every node has passed
--heal-at, the nodes go back on one bridge, and the two groups must merge into one
model again.

The trainers write their parameters at every --eval-every steps (gossip-train
--snapshot), so the script measures, at the step before the cut, at the step before the
heal and at the end:

  - the groups' distance: |mean_A - mean_B| / |mean|, the two groups' average models
    apart, relative to the size of the model;
  - the spread within each group: the largest |x_i - mean_group| / |mean|;
  - each group's average model's test accuracy and loss (gossip-train --evaluate).

Both groups keep training when each group's test loss falls between the cut and the
heal; they merge when, at the end, the groups' distance has fallen back well below its
value at the heal. Under D-PSGD and push-sum the merge is the mixing itself: each node
weighs its neighbors as the topology says, so the consensus both groups move to is
their average weighted by size. Under local SGD on an elastic ring, each group re-forms
a ring of its own when cut; healed, the rings merge into one (sgd/membership/ring_membership.h),
whose first round averages the models themselves, node by node, so weighted by size.

    experiments/partition.py --build build --out /tmp/part -- --strategy gossip --topology ring
    experiments/partition.py --build build --out /tmp/part -- --strategy local-sgd --elastic on

Prints one JSON line; exits 1 when a group stalls or a process fails, 77 (with the
reason) where this machine cannot make network namespaces.
"""

import argparse
import array
import json
import math
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import testbed  # noqa: E402
from churn import read_model, stop_processes  # noqa: E402


def log(msg):
    print(f"[partition {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mean(models):
    out = [0.0] * len(models[0])
    for m in models:
        for k, v in enumerate(m):
            out[k] += v
    return [v / len(models) for v in out]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def dist(a, b):
    return math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)))


class Run:
    def __init__(self, o, bed):
        self.o, self.bed = o, bed
        self.out = pathlib.Path(o.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.hosts = bed.hosts()
        self.daemons, self.trainers = [], []
        self.t0 = time.monotonic()
        self.events = []

    def event(self, what, **kw):
        self.events.append({"t": round(time.monotonic() - self.t0, 1), "event": what, **kw})
        log(f"{what} {kw if kw else ''}")

    def endpoint(self, i):
        return f"tcp://{self.hosts[i]}:{self.o.port}"

    def socket_path(self, i):
        return self.out / f"gossipd-{i}.sock"

    def spawn(self, argv, logname):
        f = open(self.out / logname, "ab")
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self):
        o = self.o
        for i in range(o.nodes):
            argv = ["ip", "netns", "exec", f"{self.bed.prefix}{i}", str(o.bin / "gossipd"),
                    "--id", str(i), "--listen", self.endpoint(i), "--run-dir", str(self.out),
                    "--seed", str(o.seed), "--heartbeat", "0.3", "--dead-after", str(o.dead_after),
                    "--patience", "5", *o.daemon_args]
            for j in range(o.nodes):
                if j != i:
                    argv += ["--peer", f"{j}={self.endpoint(j)}"]
            self.daemons.append(self.spawn(argv, f"gossipd-{i}.log"))
        end = time.monotonic() + 20
        for i in range(o.nodes):
            while not self.socket_path(i).exists():
                if self.daemons[i].poll() is not None:
                    raise RuntimeError(f"gossipd {i} exited with {self.daemons[i].returncode}; "
                                       f"see {self.out}/gossipd-{i}.log")
                if time.monotonic() > end:
                    raise RuntimeError(f"gossipd {i} did not create its socket within 20 s")
                time.sleep(0.02)
        for i in range(o.nodes):
            (self.out / f"snap-{i}").mkdir(exist_ok=True)
            self.trainers.append(self.spawn(
                [str(o.bin / "gossip-train"), "--endpoint", f"ipc://{self.socket_path(i)}",
                 "--node", str(i), "--nodes", str(o.nodes), "--steps", str(o.steps),
                 "--seed", str(o.seed), "--batch", "64", "--lr", str(o.lr),
                 "--eval-every", str(o.eval_every), "--csv", str(self.out / f"node-{i}.csv"),
                 "--snapshot", str(self.out / f"snap-{i}" / "step-"),
                 "--save-model", str(self.out / f"node-{i}.model"),
                 "--result", str(self.out / f"node-{i}.json"), "--timeout-s", "60"],
                f"trainer-{i}.log"))

    def step(self, i):
        """Node i's last evaluated step (its csv's last row), 0 before the first."""
        try:
            rows = (self.out / f"node-{i}.csv").read_text().strip().splitlines()
            return int(rows[-1].split(",")[0]) if len(rows) > 1 else 0
        except (OSError, ValueError):
            return 0

    def wait_steps(self, nodes, at_least, timeout, what):
        end = time.monotonic() + timeout
        while True:
            steps = {i: self.step(i) for i in nodes}
            if min(steps.values()) >= at_least:
                return steps
            for i in nodes:
                if self.trainers[i].poll() is not None and self.trainers[i].returncode != 0:
                    raise RuntimeError(f"trainer {i} failed ({self.trainers[i].returncode}) {what}; "
                                       f"see {self.out}/trainer-{i}.log")
            if time.monotonic() > end:
                raise RuntimeError(f"{what}: the nodes' steps {steps} did not all reach {at_least} "
                                   f"within {timeout:.0f} s (a group stalled)")
            time.sleep(0.05)

    def run(self):
        o = self.o
        a, b = list(range(o.side)), list(range(o.side, o.nodes))
        self.start()
        self.wait_steps(a + b, o.cut_at, o.timeout, "before the cut")
        self.bed.partition(b)
        self.event("cut", side=b)
        steps = self.wait_steps(a + b, o.heal_at, o.timeout, "during the partition")
        self.event("heal", steps=steps)
        self.bed.heal()
        end = time.monotonic() + o.timeout
        for i, t in enumerate(self.trainers):
            rc = t.wait(max(1.0, end - time.monotonic()))
            if rc != 0:
                raise RuntimeError(f"trainer {i} exited with {rc}; see {self.out}/trainer-{i}.log")
        self.event("done")

    def stop(self):
        stop_processes([self.trainers, self.daemons])

    def evaluate(self, model, name):
        path = self.out / f"{name}.model"
        with open(path, "wb") as f:
            array.array("f", model).tofile(f)
        result = self.out / f"{name}.json"
        subprocess.run([str(self.o.bin / "gossip-train"), "--evaluate", str(path), "--result", str(result)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        r = json.loads(result.read_text().splitlines()[0])
        return round(r["accuracy_local"], 4), round(r["test_loss"], 4)

    def measure(self, label, paths):
        """The groups' distance, the spread within them and their accuracies at one point."""
        o = self.o
        models = [read_model(p) for p in paths]
        groups = [models[:o.side], models[o.side:]]
        means = [mean(g) for g in groups]
        scale = norm(mean(models))
        spread = max(dist(m, means[k]) / scale for k, g in enumerate(groups) for m in g)
        scores = [self.evaluate(means[k], f"{label}-group{k}") for k in range(2)]
        return {"at": label, "groups_apart": round(dist(means[0], means[1]) / scale, 6),
                "spread_within": round(spread, 6), "accuracy": [a for a, _ in scores],
                "test_loss": [l for _, l in scores]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--out", required=True)
    p.add_argument("--nodes", type=int, default=6)
    p.add_argument("--side", type=int, default=3, help="nodes 0..side-1 on one side, the rest on the other")
    p.add_argument("--steps", type=int, default=1200)
    p.add_argument("--cut-at", type=int, default=300)
    p.add_argument("--heal-at", type=int, default=700)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--dead-after", type=float, default=1.5)
    p.add_argument("--port", type=int, default=7100)
    p.add_argument("--timeout", type=float, default=180, help="bound on each phase, in seconds")
    p.add_argument("daemon_args", nargs="*", help="gossipd's strategy options (after --)")
    o = p.parse_args(argv)
    o.bin = pathlib.Path(o.build) / "bin"
    for s in ("cut_at", "heal_at", "steps"):
        if getattr(o, s) % o.eval_every:
            p.error(f"--{s.replace('_', '-')} must be a multiple of --eval-every (snapshots come at evaluations)")
    if not 0 < o.cut_at < o.heal_at < o.steps or not 0 < o.side < o.nodes:
        p.error("needs 0 < --cut-at < --heal-at < --steps and 0 < --side < --nodes")
    try:
        testbed.check_rights()
    except testbed.TestbedError as e:
        print(f"partition: no network namespaces here ({e})", file=sys.stderr)
        return 77
    run = None
    try:
        with testbed.Testbed(o.nodes, "10gbit", net=79) as bed:
            run = Run(o, bed)
            try:
                run.run()
            finally:
                run.stop()
    except (RuntimeError, subprocess.SubprocessError) as e:
        log(f"failed: {e}")
        print(json.dumps({"error": str(e), "events": run.events if run else []}))
        return 1
    snap = lambda s: [run.out / f"snap-{i}" / f"step-{s}.model" for i in range(o.nodes)]  # noqa: E731
    points = [run.measure("before-cut", snap(o.cut_at)), run.measure("before-heal", snap(o.heal_at)),
              run.measure("end", [run.out / f"node-{i}.model" for i in range(o.nodes)])]
    nodes = [json.loads((run.out / f"node-{i}.json").read_text().splitlines()[0]) for i in range(o.nodes)]
    report = {"nodes": o.nodes, "side": o.side, "daemon_args": o.daemon_args, "steps": o.steps,
              "cut_at": o.cut_at, "heal_at": o.heal_at,
              "events": run.events, "points": points,
              "node_accuracy": [round(n["accuracy_local"], 4) for n in nodes],
              "wall_s": round(time.monotonic() - run.t0, 1)}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
