#!/usr/bin/env python3
"""Scale in virtual time (issue 45): `gossipctl simulate` swept over graphs and sizes,
each figure beside its theory. Writes DIR/scale.csv (one row per run) and three plots:

  consensus: the per-round factor by which the replicas' squared distance shrinks
    under consensus alone (--model mixing), measured over the rounds after the fast
    modes fade (a ring above 512 nodes starts in its slowest mode, --start-mode 1),
    against (1 - spectral gap)^2 of the same graph (gossipctl simulate
    prints it: dense up to 512 nodes; above, the circulants' closed form and the random
    graphs' power iteration).
    The ratio of their logarithms is 1.0 when the
    measured rate is the predicted one.
  bytes: bytes each node sends per round against n, for gossip on a ring and on the
    exponential graph, push-sum, local SGD over gossipd's ring all-reduce (2(n-1)/n of
    the model) and over the all-gather (n - 1 models).
  time: virtual time per round against n under 1 Gbit/s, 1 ms links, gossip against
    local SGD over the ring (whose 2(n-1) steps each pay the latency) and the all-gather.
  joins: nodes joining by seeds (gossipctl simulate --joins): messages per join against
    n, beside the protocol's 7 a member (two ping rounds, the promise, the adds), and
    the time until every member lists the joiner; then, at the largest n, joins through
    two partitions with the majority's promise and with --join-quorum any (ids given
    twice).

    experiments/scale.py --build build --out /tmp/scale [--sizes 16,64,256]

Prints the table; the plots go to DIR/scale-*.png.
"""
import argparse
import csv
import math
import os
import re
import subprocess
import sys
import tempfile
import time


def simulate(build, args):
    """Runs gossipctl simulate; returns (the summary's fields with the real seconds, the
    rows of rounds.csv)."""
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        p = subprocess.run([os.path.join(build, "bin", "gossipctl"), "simulate", *args,
                            "--out", out], capture_output=True, text=True, timeout=3600)
        real = time.monotonic() - start
        if p.returncode != 0:
            sys.exit(f"scale.py: gossipctl simulate {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        with open(os.path.join(out, "rounds.csv")) as f:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    s = {"real_s": real}
    if m := re.search(r"virtual time ([\d.]+) s", p.stdout):
        s["virtual_s"] = float(m.group(1))
    if m := re.search(r"sent (\d+) bytes per node \((\d+) per round\), (\d+) messages", p.stdout):
        s["bytes_per_node_round"] = float(m.group(2))
        s["messages"] = int(m.group(3))
    if m := re.search(r"spectral gap ([\d.e+-]+): consensus shrinks by about ([\d.e+-]+)",
                      p.stdout):
        s["predicted"] = float(m.group(2))
    return s, rows


def measured_rate(rows):
    """The per-round factor of the consensus distance, fitted (least squares on the log)
    over the second half of the rounds that stay above float rounding's floor (1e-11 of
    the first round's distance: fp32 values)."""
    floor = 1e-11 * rows[0]["consensus"]
    pts = [(r["round"], math.log(r["consensus"])) for r in rows if r["consensus"] > floor]
    pts = pts[len(pts) // 2:]
    if len(pts) < 4:
        return float("nan")
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return math.exp(slope)


def consensus_runs(build, sizes, topologies, seed):
    out = []
    for topology in topologies:
        for n in sizes:
            # A ring's slowest mode dominates a random start only after some n^2/5
            # rounds (200,000 at 1,024 nodes, over two hours here): above 512 nodes the
            # replicas start in it (--start-mode 1, an eigenvector of the ring's W), and
            # 400 rounds measure its rate.
            mode_start = ["--start-mode", "1"] if n > 512 and topology == "ring" else []
            if topology.startswith("torus"):
                side = int(math.isqrt(n))
                if side * side != n:
                    continue
                spec = f"torus:{side}x{side}"
            else:
                spec = topology
            # Enough rounds for the slowest mode to dominate: a ring needs about n^2/5.
            rounds = 400 if mode_start else \
                max(60, min(n * n // 5, 12000 * max(1, n // 256) ** 2)) \
                if topology == "ring" else \
                min(3000, max(60, 4 * n)) if topology.startswith("torus") else 60
            s, rows = simulate(build, ["--nodes", str(n), "--topology", spec, "--model", "mixing",
                                       "--numel", "16", "--rounds", str(rounds), "--seed",
                                       str(seed)] + mode_start)
            rate = measured_rate(rows)
            pred = s.get("predicted", float("nan"))
            # Rounds until the distance is 1e-8 of the first round's: measured, and as
            # the prediction has it (the one-peer exponential graph on 2^k nodes averages
            # exactly after k rounds: a gap of 1, no rate to compare).
            reached = next((r["round"] for r in rows
                            if r["consensus"] < 1e-8 * rows[0]["consensus"]), float("nan"))
            predicted_rounds = (math.log(1e-8) / math.log(pred) if 0 < pred < 1 else
                                math.log2(n) if pred <= 1e-12 else float("nan"))
            out.append({"kind": "consensus", "strategy": "gossip", "topology": spec, "nodes": n,
                        "rounds": rounds, "measured_rate": rate, "predicted_rate": pred,
                        "log_ratio": math.log(rate) / math.log(pred) if 0 < pred < 1 else
                        float("nan"), "rounds_to_1e-8": reached,
                        "predicted_rounds_to_1e-8": predicted_rounds, "real_s": s["real_s"],
                        "start": "slowest mode" if mode_start else "random"})
            print(f"consensus {spec:>22} n={n:5}: x{rate:.5f} a round, predicted x{pred:.5f}, "
                  f"log ratio {out[-1]['log_ratio']:.3f}; 1e-8 after {reached} rounds, "
                  f"predicted {predicted_rounds:.1f} ({s['real_s']:.1f} s)", flush=True)
    return out


def traffic_runs(build, sizes, seed):
    out = []
    # (name, topology, options): local SGD over the ring and over the all-gather send
    # n^2 messages a round in all (each of the ring's 2(n-1) steps is a message a node);
    # auto picks the tree for this model (its table's row above 8 ranks, below 256 KiB).
    cases = [("gossip", "ring", []), ("gossip", "exponential", []), ("push-sum", "", []),
             ("local-sgd ring", "", ["--transport", "tcp", "--allreduce-algorithm", "ring"]),
             ("local-sgd auto", "", ["--transport", "tcp", "--allreduce-algorithm", "auto"]),
             ("local-sgd all-gather", "", ["--transport", "allgather"])]
    for strategy, topology, extra in cases:
        for n in sizes:
            if strategy.startswith("local-sgd") and n > (256 if "gather" in strategy else 1024):
                continue
            args = ["--nodes", str(n), "--strategy", strategy.split()[0], "--model",
                    "quadratic", "--numel", "10000", "--rounds", "10", "--step-time-ms", "100",
                    "--links", "latency=1ms,bandwidth=1Gbit", "--seed", str(seed), *extra]
            if topology:
                args += ["--topology", topology]
            s, rows = simulate(build, args)
            per_round = [b - a for a, b in zip([r["time_s"] for r in rows],
                                               [r["time_s"] for r in rows][1:])]
            out.append({"kind": "traffic", "strategy": strategy, "topology": topology or "default",
                        "nodes": n, "rounds": 10,
                        "bytes_per_node_round": s["bytes_per_node_round"],
                        "messages": s["messages"],
                        "time_per_round_s": sum(per_round) / len(per_round),
                        "real_s": s["real_s"]})
            print(f"traffic {strategy:>9} {topology or 'default':>12} n={n:5}: "
                  f"{s['bytes_per_node_round']:.0f} B/node/round, "
                  f"{out[-1]['time_per_round_s'] * 1e3:.1f} ms/round, {s['messages']} messages "
                  f"({s['real_s']:.1f} s)", flush=True)
    return out


def death_runs(build, sizes, seed):
    """An elastic ring (local SGD, auto's all-reduce) losing one node: what the event
    costs (the messages and bytes beyond an undisturbed run's) and how long the members
    take to agree on the ring without it (the round's time beyond a normal round's)."""
    out = []
    for n in sizes:
        args = ["--nodes", str(n), "--strategy", "local-sgd", "--elastic", "on", "--model",
                "quadratic", "--numel", "1000", "--rounds", "6", "--step-time-ms", "100",
                "--links", "latency=1ms,bandwidth=1Gbit", "--seed", str(seed)]
        calm, calm_rows = simulate(build, args)
        hit, hit_rows = simulate(build, args + ["--kill", "1@3"])
        normal = calm_rows[3]["time_s"] - calm_rows[2]["time_s"]
        reform = hit_rows[3]["time_s"] - hit_rows[2]["time_s"] - normal
        # Round 3's bytes beyond the undisturbed run's, per node.
        extra_bytes = (hit_rows[3]["wire_bytes_per_node"] - hit_rows[2]["wire_bytes_per_node"]) - \
                      (calm_rows[3]["wire_bytes_per_node"] - calm_rows[2]["wire_bytes_per_node"])
        out.append({"kind": "death", "strategy": "local-sgd elastic", "topology": "auto",
                    "nodes": n, "rounds": 6, "messages": hit["messages"] - calm["messages"],
                    "bytes_per_node_round": extra_bytes, "time_per_round_s": reform,
                    "real_s": hit["real_s"]})
        print(f"death n={n:5}: {out[-1]['messages']} more messages, {extra_bytes:.0f} more bytes "
              f"a node, the ring re-formed in {reform:.3f} s ({hit['real_s']:.1f} s)", flush=True)
    return out


def simulate_joins(build, args):
    """Runs gossipctl simulate --joins; returns (the summary's fields, joins.csv's rows).
    Exit 1 (an id given twice, a joiner without one) is a result here, not a failure."""
    with tempfile.TemporaryDirectory() as out:
        start = time.monotonic()
        p = subprocess.run([os.path.join(build, "bin", "gossipctl"), "simulate", *args,
                            "--out", out], capture_output=True, text=True, timeout=3600)
        real = time.monotonic() - start
        if p.returncode not in (0, 1) or not os.path.exists(os.path.join(out, "joins.csv")):
            sys.exit(f"scale.py: gossipctl simulate {' '.join(args)} failed:\n{p.stdout}{p.stderr}")
        with open(os.path.join(out, "joins.csv")) as f:
            rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(f)]
    s = {"real_s": real, "duplicates": 0}
    if m := re.search(r"ids given twice: (\d+)", p.stdout):
        s["duplicates"] = int(m.group(1))
    return s, rows


def join_runs(build, sizes, seed, joins=20):
    """Joins by seeds at each n (one every 2 s, 1 Gbit/s 1 ms links), then at the largest
    n 100 joins, one a second, through two partitions of 40 % of the members each."""
    links = "latency=1ms,bandwidth=1Gbit"
    out = []

    def row(case, n, s, rows):
        got = [r for r in rows if r["answered_s"] >= 0]
        known = [r for r in got if r["all_knew_s"] >= 0]
        out.append({"kind": "joins", "strategy": case, "topology": "", "nodes": n,
                    "rounds": len(rows), "messages": sum(r["messages"] for r in rows),
                    # Of the nodes that were members when each came.
                    "messages_per_join_member": sum(r["messages"] / (r["should_know"] or n)
                                                    for r in rows) / len(rows),
                    "answered": len(got), "known": len(known), "duplicates": s["duplicates"],
                    "worst_answer_s": max((r["answered_s"] - r["asked_s"] for r in got),
                                          default=float("nan")),
                    "worst_known_s": max((r["all_knew_s"] - r["asked_s"] for r in known),
                                         default=float("nan")),
                    "real_s": s["real_s"]})
        r = out[-1]
        print(f"joins {case:>9} n={n:5}: {r['answered']}/{len(rows)} got an id (at most "
              f"{r['worst_answer_s']:.3f} s), {r['known']} known to all (at most "
              f"{r['worst_known_s']:.3f} s), {r['messages_per_join_member']:.2f} messages a "
              f"member a join, {r['duplicates']} ids given twice ({s['real_s']:.1f} s)",
              flush=True)

    for n in sizes:
        s, rows = simulate_joins(build, ["--nodes", str(n), "--joins", str(joins), "--links",
                                         links, "--seed", str(seed)])
        row("calm", n, s, rows)
    n = max(sizes)
    cut = ["--partition", f"0-{2 * n // 5 - 1}@20-50",
           "--partition", f"{3 * n // 5}-{n - 1}@60-90"]
    for quorum in ("majority", "any"):
        s, rows = simulate_joins(build, ["--nodes", str(n), "--joins", "100", "--join-every", "1",
                                         "--links", links, "--seed", str(seed), *cut,
                                         "--join-quorum", quorum])
        row(f"cut {quorum}", n, s, rows)
    return out


def plots(rows, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cons = [r for r in rows if r["kind"] == "consensus"]
    if cons:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        topologies = sorted({r["topology"].split(":")[0] for r in cons})
        colors = {t: f"C{i}" for i, t in enumerate(topologies)}  # the same in both panels
        for topology in topologies:
            pts = sorted((r["nodes"], r["measured_rate"], r["predicted_rate"],
                          r["rounds_to_1e-8"], r["predicted_rounds_to_1e-8"]) for r in cons
                         if r["topology"].split(":")[0] == topology)
            rated = [p for p in pts if 0 < p[2] < 1 and p[1] == p[1]]
            if rated:
                left.plot([p[0] for p in rated], [1 - p[1] for p in rated], "o",
                          color=colors[topology], label=topology)
                left.plot([p[0] for p in rated], [1 - p[2] for p in rated], "-",
                          color=colors[topology])
            reached = [p for p in pts if p[3] == p[3] and p[4] == p[4]]
            if reached:
                right.plot([p[0] for p in reached], [p[3] + 1 for p in reached], "o",
                           color=colors[topology], label=topology)
                right.plot([p[0] for p in reached], [p[4] for p in reached], "-",
                           color=colors[topology])
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("nodes")
            ax.legend(fontsize=8)
        left.set_ylabel("1 - per-round factor of the consensus distance")
        left.set_title("rate: measured (dots), 1 - (1 - gap)^2 (lines)", fontsize=9)
        right.set_ylabel("rounds until 1e-8 of the first distance")
        right.set_title("rounds: measured (dots), from the gap (lines)", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "scale-consensus.png"))

    traffic = [r for r in rows if r["kind"] == "traffic"]
    for key, name, label in ([] if not traffic else [("bytes_per_node_round", "scale-bytes.png", "bytes per node per round"),
                             ("time_per_round_s", "scale-time.png", "virtual seconds per round")]):
        fig, ax = plt.subplots(figsize=(6, 4))
        for case in sorted({(r["strategy"], r["topology"]) for r in traffic}):
            pts = sorted((r["nodes"], r[key]) for r in traffic
                         if (r["strategy"], r["topology"]) == case)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                    label=" ".join(c for c in case if c != "default"))
        model = 10000 * 4
        ns = sorted({r["nodes"] for r in traffic})
        if key == "bytes_per_node_round":
            ax.plot(ns, [2 * model for _ in ns], ":", color="gray", label="2 models (ring degree)")
            ax.plot(ns, [2 * (n - 1) / n * model for n in ns], "--", color="black",
                    label="ring all-reduce 2(n-1)/n model")
        else:
            # The ring's cost model: 2(n-1) steps of a segment on the uplink plus the latency.
            ax.plot(ns, [0.1 + 2 * (n - 1) * (1e-3 + model / n / 125e6) for n in ns], "--",
                    color="black", label="100 ms + 2(n-1)(1 ms + M/(n B))")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nodes")
        ax.set_ylabel(label)
        ax.legend(fontsize=8, loc="upper left")
        fig.tight_layout()
        fig.savefig(os.path.join(out, name))

    joins = sorted((r["nodes"], r["messages_per_join_member"], r["worst_known_s"])
                   for r in rows if r["kind"] == "joins" and r["strategy"] == "calm")
    if joins:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        ns = [j[0] for j in joins]
        left.plot(ns, [j[1] for j in joins], "o", label="measured")
        left.plot(ns, [7 for n in ns], "--", color="black",
                  label="7: two ping rounds, the promise, the adds")
        left.set_ylabel("messages per join, per member")
        right.plot(ns, [j[2] * 1e3 for j in joins], "o", label="measured")
        # A redirect, then the coordinator's ping round and its promise (2 round trips
        # of 1 ms links each, plus the first seed's): the answer and the adds go out
        # together.
        right.plot(ns, [10 for _ in ns], "--", color="black",
                   label="5 round trips of 2 ms (and n pings on an uplink)")
        right.set_ylabel("ms until every member lists the joiner")
        for ax in (left, right):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("members")
            ax.legend(fontsize=8)
        left.set_ylim(0, 12)
        right.set_ylim(0, 15)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "scale-joins.png"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--out", required=True)
    p.add_argument("--sizes", default="16,64,256")
    p.add_argument("--topologies", default="ring,torus,exponential,one-peer-exponential,"
                                           "random-regular:4")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--skip", default="", help="consensus, traffic, deaths and/or joins")
    p.add_argument("--plot", nargs="*", metavar="CSV",
                   help="no runs: plot these scale.csv files (of earlier runs) together")
    o = p.parse_args()
    os.makedirs(o.out, exist_ok=True)
    if o.plot:
        rows = []
        for path in o.plot:
            with open(path) as f:
                for r in csv.DictReader(f):
                    rows.append({k: (v if k in ("kind", "strategy", "topology", "start") else
                                     float(v) if v != "" else float("nan"))
                                 for k, v in r.items()})
        # A case run in several files: the last file's row.
        unique = {(r["kind"], r["strategy"], r["topology"], r["nodes"]): r for r in rows}
        plots(list(unique.values()), o.out)
        return
    sizes = [int(s) for s in o.sizes.split(",")]
    rows = []
    if "consensus" not in o.skip:
        rows += consensus_runs(o.build, sizes, o.topologies.split(","), o.seed)
    if "traffic" not in o.skip:
        rows += traffic_runs(o.build, sizes, o.seed)
    if "deaths" not in o.skip:
        rows += death_runs(o.build, sizes, o.seed)
    if "joins" not in o.skip:
        rows += join_runs(o.build, sizes, o.seed)
    keys = sorted({k for r in rows for k in r})
    with open(os.path.join(o.out, "scale.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    plots(rows, o.out)


if __name__ == "__main__":
    main()
