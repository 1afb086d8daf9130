#!/usr/bin/env python3
"""Runs gossipd's experiment matrix on Fashion-MNIST and writes what docs/results.md shows.

Each run is one `gossipctl cluster` (N daemons and N reference trainers) with
--evaluations, so that every evaluation records the step, wall time, bytes sent, the
training loss, the nodes' mean test accuracy, the average model's test accuracy and
the consensus distance. Every run of a matrix processes the same number of samples
per node (same steps, batch and seed).

    experiments/run.sh                                   # the default matrix, loopback
    experiments/run.sh --matrix smoke --out /tmp/smoke   # 2 strategies, 4 nodes, seconds
    sudo experiments/run.sh --matrix bandwidth --testbed netns --rate 100mbit

Results go to --out (default docs/results): runs.csv (one row per run and evaluation;
rows of a run are replaced when it is run again), runs.jsonl (gossipctl's summary of
each run), and the table and plots of experiments/report.py.
"""

import argparse
import csv
import dataclasses
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import report  # noqa: E402
import testbed as tb  # noqa: E402


@dataclasses.dataclass
class Run:
    name: str
    strategy: str
    partition: str = "iid"
    period: int = 1
    codec: str = "none"
    topology: str = ""
    extra: tuple = ()

    def args(self):
        a = ["--strategy", self.strategy, "--period", str(self.period), "--partition",
             self.partition, "--codec", self.codec]
        if self.topology:
            a += ["--topology", self.topology]
        return a + list(self.extra)


STRAGGLER = ("--straggler", "3:4")
DILOCO = ("--outer-optimizer", "nesterov", "--outer-lr", "0.7", "--outer-momentum", "0.9")
# Issue 23's composed codec: top 1 %, values in 2 bits, indices packed (a sparse
# reduce-scatter from 3 nodes on).
CHAIN = "topk:0.01+quant:2+idx:auto+ef"
STREAMED = ("--fragments", "4", "--overlap-steps", "2")
CNN = ("--model", "cnn")
TUNE = ("--tune", "auto")


def low_bandwidth_runs():
    """Issue 23: the codecs and schedules for slow links, against the same baseline."""
    return [
        Run("local-sgd-T4-chain", "local-sgd", period=4, codec=CHAIN),
        Run("local-sgd-T8-chain", "local-sgd", period=8, codec=CHAIN),
        Run("streamed-T8-chain", "local-sgd", period=8, codec=CHAIN, extra=STREAMED),
        Run("local-sgd-T16-chain", "local-sgd", period=16, codec=CHAIN),
        Run("diloco-T16-chain", "local-sgd", period=16, codec=CHAIN, extra=DILOCO),
        # Issue 23's --tune auto: the period (from 1 on) and the chain's ratio from what
        # the rounds measure, not told the network.
        Run("local-sgd-auto-chain", "local-sgd", period=1, codec=CHAIN, extra=TUNE),
    ]


def tune_runs():
    """--tune auto against the hand-picked periods around it, the chain at 1 %."""
    return [
        Run("local-sgd-T2-chain", "local-sgd", period=2, codec=CHAIN),
        Run("local-sgd-T4-chain", "local-sgd", period=4, codec=CHAIN),
        Run("local-sgd-T8-chain", "local-sgd", period=8, codec=CHAIN),
        Run("local-sgd-auto-chain", "local-sgd", period=1, codec=CHAIN, extra=TUNE),
    ]


def iid_runs():
    return [
        Run("allreduce", "allreduce"),
        Run("allreduce-int8", "allreduce", codec="int8"),
        Run("local-sgd-T4", "local-sgd", period=4),
        Run("local-sgd-T16", "local-sgd", period=16),
        Run("local-sgd-T64", "local-sgd", period=64),
        Run("diloco-T16", "local-sgd", period=16, extra=DILOCO),
        Run("local-sgd-T4-fp16", "local-sgd", period=4, codec="fp16"),
        Run("local-sgd-T4-int8", "local-sgd", period=4, codec="int8"),
        Run("local-sgd-T4-topk", "local-sgd", period=4, codec="topk:0.01+ef"),
        Run("local-sgd-T16-topk", "local-sgd", period=16, codec="topk:0.01+ef"),
        Run("gossip-ring", "gossip", topology="ring"),
        Run("gossip-exponential", "gossip", topology="exponential"),
        Run("gossip-one-peer-exp", "gossip", topology="one-peer-exponential"),
        Run("choco-topk", "choco", codec="topk:0.01", topology="ring"),
        Run("choco-sign", "choco", codec="sign", topology="ring"),
        Run("push-sum", "push-sum"),
        Run("gossip-ring-straggler", "gossip", topology="ring", extra=STRAGGLER),
        Run("async-gossip-straggler", "async-gossip", topology="ring", extra=STRAGGLER),
    ]


def skewed_runs(alpha):
    p = f"dirichlet:{alpha}"
    return [
        Run(f"allreduce-dir{alpha}", "allreduce", partition=p),
        Run(f"local-sgd-T16-dir{alpha}", "local-sgd", partition=p, period=16),
        Run(f"gossip-ring-dir{alpha}", "gossip", partition=p, topology="ring"),
        Run(f"gossip-exponential-dir{alpha}", "gossip", partition=p, topology="exponential"),
        Run(f"push-sum-dir{alpha}", "push-sum", partition=p),
    ]


def textbook_runs():
    """Issue 19's architectures against the ring, on the same 8 nodes and data."""
    algorithm = lambda a: ("--allreduce-algorithm", a)
    ps = lambda mode: ("--servers", "2", "--ps-mode", mode)
    return [
        Run("allreduce-ring", "allreduce", extra=algorithm("ring")),
        Run("allreduce-tree", "allreduce", extra=algorithm("tree")),
        Run("allreduce-butterfly", "allreduce", extra=algorithm("butterfly")),
        Run("allreduce-master", "allreduce", extra=algorithm("master")),
        Run("ps-bsp", "ps", extra=ps("bsp")),
        Run("ps-async", "ps", extra=ps("async")),
        Run("ps-ssp1", "ps", extra=ps("ssp:1")),
        Run("ps-ssp4", "ps", extra=ps("ssp:4")),
        Run("ps-ssp16", "ps", extra=ps("ssp:16")),
        Run("sma-1", "sma", extra=("--learners-per-device", "1")),
        Run("sma-2", "sma", extra=("--learners-per-device", "2")),
        Run("sma-4", "sma", extra=("--learners-per-device", "4")),
    ]


MATRICES = {
    # Under 30 minutes on 2 cores: 28 runs of 8 nodes x 600 steps (13 minutes here).
    "default": lambda: iid_runs() + skewed_runs(0.1) + skewed_runs(1.0),
    "iid": iid_runs,
    # Parameter servers, the all-reduce family and SMA (issue 19), period 1.
    "textbook": textbook_runs,
    "skew": lambda: skewed_runs(0.1) + skewed_runs(1.0),
    # For rate-limited links: the baseline against the strategies that save traffic.
    "bandwidth": lambda: [
        Run("allreduce", "allreduce"),
        Run("local-sgd-T16", "local-sgd", period=16),
        Run("local-sgd-T4-topk", "local-sgd", period=4, codec="topk:0.01+ef"),
        Run("gossip-ring", "gossip", topology="ring"),
        Run("choco-topk", "choco", codec="topk:0.01", topology="ring"),
    ] + low_bandwidth_runs(),
    "low-bandwidth": lambda: [Run("allreduce", "allreduce")] + low_bandwidth_runs(),
    # --tune auto against the best hand-picked schedules; the baseline runs in
    # "low-bandwidth" (or use --only to add it).
    "tune": tune_runs,
    # Issue 23's workload where the network matters: the 3.2M-parameter CNN (13 MB a
    # model), 300 steps (CNN_DEFAULTS).
    "cnn": lambda: [
        Run("cnn-allreduce", "allreduce", extra=CNN),
        Run("cnn-local-sgd-T16-chain", "local-sgd", period=16, codec=CHAIN, extra=CNN),
        Run("cnn-streamed-T8-chain", "local-sgd", period=8, codec=CHAIN, extra=CNN + STREAMED),
        Run("cnn-diloco-T16-chain", "local-sgd", period=16, codec=CHAIN, extra=CNN + DILOCO),
        Run("cnn-local-sgd-auto-chain", "local-sgd", period=1, codec=CHAIN, extra=CNN + TUNE),
    ],
    # The test suite's: seconds, not minutes.
    "smoke": lambda: [
        Run("local-sgd-T4", "local-sgd", period=4),
        Run("gossip-ring", "gossip", topology="ring"),
    ],
}

SMOKE_DEFAULTS = {"nodes": 4, "steps": 200, "eval_every": 50}
CNN_DEFAULTS = {"nodes": 8, "steps": 300, "eval_every": 30}


class Interrupted(Exception):
    pass


def _on_sigterm(signum, frame):
    raise Interrupted(f"signal {signum}")


def run_one(run, opts, hosts, netns, work):
    """Runs one cluster; returns (summary JSON, evaluation rows)."""
    run_dir = pathlib.Path(work) / run.name
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [str(opts.gossipctl), "cluster", "--nodes", str(opts.nodes), "--steps", str(opts.steps),
           "--seed", str(opts.seed), "--batch", str(opts.batch), "--lr", str(opts.lr),
           "--eval-every", str(opts.eval_every), "--out", str(run_dir), "--evaluations", "--json",
           "--timeout", str(opts.run_timeout)] + run.args()
    if hosts:
        cmd += ["--hosts", ",".join(hosts), "--netns", netns]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=opts.run_timeout + 60)
    except BaseException:
        proc.send_signal(signal.SIGINT)  # gossipctl stops its daemons and trainers
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        raise
    try:
        summary = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except json.JSONDecodeError:
        summary = {}
    if proc.returncode != 0 or not summary.get("ok"):
        why = summary.get("error") or err.strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
        raise RuntimeError(f"run {run.name} failed: {why} (run directory {run_dir})")
    with open(run_dir / "evaluations.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    summary["daemon_payload_sent"] = daemon_payload_sent(run_dir, opts.nodes)
    return summary, rows


def daemon_payload_sent(run_dir, nodes):
    """The payload bytes the daemons logged at shutdown, summed (None if a log lacks it)."""
    total = 0
    for i in range(nodes):
        found = None
        with open(run_dir / f"gossipd-{i}.log", errors="replace") as f:
            for line in f:
                if "traffic: payload sent " in line:
                    found = int(line.split("traffic: payload sent ")[1].split()[0])
        if found is None:
            return None
        total += found
    return total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--matrix", choices=sorted(MATRICES), default="default")
    p.add_argument("--only", default="", help="comma-separated run names to run from the matrix")
    p.add_argument("--testbed", choices=["loopback", "netns"], default="loopback")
    p.add_argument("--rate", default="100mbit",
                   help="netns: each node's egress rate (tc tbf), or a comma-separated list, node i "
                        "taking the i-th and the rest the last (10mbit,100mbit: one slow node)")
    p.add_argument("--nodes", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--eval-every", type=int)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--target", type=float, default=0.85, help="test accuracy the table measures time and bytes to")
    p.add_argument("--run-timeout", type=int, default=900, help="seconds per run")
    p.add_argument("--out", default=str(ROOT / "docs" / "results"))
    p.add_argument("--build", default=str(ROOT / "build"), help="build directory with bin/gossipctl")
    p.add_argument("--keep-runs", help="keep each run's directory (logs, CSVs) under this directory")
    opts = p.parse_args(argv)

    defaults = {"smoke": SMOKE_DEFAULTS, "cnn": CNN_DEFAULTS}.get(
        opts.matrix, {"nodes": 8, "steps": 600, "eval_every": 30})
    for k, v in defaults.items():
        if getattr(opts, k) is None:
            setattr(opts, k, v)
    opts.gossipctl = pathlib.Path(opts.build) / "bin" / "gossipctl"
    if not opts.gossipctl.exists():
        p.error(f"{opts.gossipctl} does not exist: build first (scripts/build.sh), or pass --build")

    runs = MATRICES[opts.matrix]()
    if opts.only:
        wanted = set(opts.only.split(","))
        unknown = wanted - {r.name for r in runs}
        if unknown:
            p.error(f"--only: not in the {opts.matrix} matrix: {', '.join(sorted(unknown))}")
        runs = [r for r in runs if r.name in wanted]
    label = "loopback" if opts.testbed == "loopback" else f"netns-{opts.rate.replace(',', '+')}"

    out = pathlib.Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _on_sigterm)
    work = opts.keep_runs or tempfile.mkdtemp(prefix="gossipd-matrix-")
    bed = None
    failed = []
    try:
        hosts, netns = [], ""
        if opts.testbed == "netns":
            tb.teardown_stale()
            bed = tb.Testbed(opts.nodes, opts.rate).__enter__()
            hosts, netns = bed.hosts(), bed.prefix
        started = time.monotonic()
        for i, run in enumerate(runs):
            t0 = time.monotonic()
            print(f"[{i + 1}/{len(runs)}] {label} {run.name}: {' '.join(run.args())}", file=sys.stderr, flush=True)
            try:
                summary, rows = run_one(run, opts, hosts, netns, work)
            except RuntimeError as e:  # one failed run does not cost the others
                print(f"    FAILED: {e}", file=sys.stderr, flush=True)
                failed.append(run.name)
                continue
            meta = {"testbed": label, "run": run.name, "strategy": run.strategy, "partition": run.partition,
                    "period": run.period, "codec": run.codec, "topology": summary.get("topology", run.topology),
                    "nodes": opts.nodes, "model": summary.get("model", "mlp")}
            report.store_run(out, meta, rows, summary)
            last = rows[-1]
            print(f"    accuracy {float(last['accuracy_average_model']):.4f}, "
                  f"{int(last['payload_sent_total']) / 1e9:.3f} GB, {time.monotonic() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            if not opts.keep_runs:
                shutil.rmtree(pathlib.Path(work) / run.name, ignore_errors=True)
        print(f"{len(runs)} runs in {time.monotonic() - started:.0f} s", file=sys.stderr)
    except (KeyboardInterrupt, Interrupted) as e:
        print(f"interrupted ({e or 'Ctrl-C'}): stopping", file=sys.stderr)
        return 130
    except tb.TestbedError as e:
        print(f"matrix: {e}", file=sys.stderr)
        return 1
    finally:
        if bed is not None:
            bed.close()
        if not opts.keep_runs:
            shutil.rmtree(work, ignore_errors=True)
    if (out / "runs.csv").exists():
        # The results page (docs/results.md) shows the default results directory's table and plots.
        default_out = (ROOT / "docs" / "results").resolve()
        report.write_report(out, opts.target, readme=ROOT / "docs" / "results.md" if out.resolve() == default_out else None)
        print(f"results in {out}: runs.csv, results.md, *.png", file=sys.stderr)
    if failed:
        print(f"matrix: {len(failed)} run(s) failed: {', '.join(failed)} (--keep-runs DIR keeps their logs)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
