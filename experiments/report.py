#!/usr/bin/env python3
"""The results table and plots of experiments/matrix.py, from its runs.csv.

    /usr/bin/python3 experiments/report.py [DIR]     # DIR defaults to docs/results

Writes DIR/results.md (one row per run: final accuracy, traffic, bytes and time to
the target accuracy, traffic reduction against the all-reduce baseline of the same
testbed and data split) and PNG plots: test accuracy against total bytes and against
wall time, and the consensus distance against the step, per testbed and data split.
"""

import csv
import json
import math
import pathlib
import sys

META = ["testbed", "run", "strategy", "partition", "period", "codec", "topology", "nodes", "model"]
EVAL = ["step", "wall_seconds", "payload_sent_total", "payload_sent_per_node", "wire_sent_total",
        "train_loss", "accuracy_nodes_mean", "accuracy_average_model", "consensus_distance"]


def _key(row):
    return (row["testbed"], row["run"])


def store_run(out, meta, rows, summary):
    """Adds one run's evaluations to out/runs.csv and its summary to out/runs.jsonl,
    replacing what an earlier run of the same name on the same testbed left."""
    out = pathlib.Path(out)
    path = out / "runs.csv"
    kept = [r for r in read_runs(out) if _key(r) != _key(meta)] if path.exists() else []
    for r in rows:
        kept.append({**meta, **{k: r[k] for k in EVAL}})
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=META + EVAL)
        w.writeheader()
        w.writerows(kept)
    jpath = out / "runs.jsonl"
    lines = []
    if jpath.exists():
        lines = [json.loads(l) for l in jpath.read_text().splitlines() if l.strip()]
        lines = [l for l in lines if (l.get("testbed"), l.get("run")) != _key(meta)]
    lines.append({**meta, **summary})
    jpath.write_text("".join(json.dumps(l, sort_keys=True) + "\n" for l in lines))


def read_runs(out):
    with open(pathlib.Path(out) / "runs.csv", newline="") as f:
        return list(csv.DictReader(f))


def read_waits(out):
    """Per (testbed, run): the fraction of their training time the trainers waited for
    a sync (gossipctl's trainer_wait_fraction, from gossipd_trainer_wait_seconds_total),
    where runs.jsonl has it."""
    path = pathlib.Path(out) / "runs.jsonl"
    if not path.exists():
        return {}
    waits = {}
    for line in path.read_text().splitlines():
        if line.strip():
            s = json.loads(line)
            if s.get("trainer_wait_fraction") is not None:
                waits[(s.get("testbed"), s.get("run"))] = s["trainer_wait_fraction"]
    return waits


def by_run(rows):
    runs = {}
    for r in rows:
        runs.setdefault(_key(r), []).append(r)
    for v in runs.values():
        v.sort(key=lambda r: int(r["step"]))
    return runs


def _f(r, k):
    try:
        return float(r[k])
    except (TypeError, ValueError):
        return math.nan


def first_reaching(evals, target):
    """The first evaluation whose average model reaches the target, or None."""
    for r in evals:
        if _f(r, "accuracy_average_model") >= target:
            return r
    return None


def _model(row):
    return row.get("model") or "mlp"  # rows from before the CNN have no model


def _baseline(ev):
    """The plain all-reduce run (no codec, its default algorithm) of a testbed and data
    split: the anchor of the traffic and time ratios."""
    return ev[0]["strategy"] == "allreduce" and ev[0]["codec"] == "none"


def summarize(runs, target):
    out = []
    baselines, goals = {}, {}
    for (testbed, name), ev in runs.items():
        key = (testbed, ev[0]["partition"], _model(ev[0]))
        if _baseline(ev) and (name.endswith("allreduce") or key not in goals):
            baselines[key] = int(ev[-1]["payload_sent_total"])
            # Issue 23's yardstick: the traffic to reach the all-reduce's final accuracy
            # minus 1 pt, and the all-reduce's own time to the target.
            goal = _f(ev[-1], "accuracy_average_model") - 0.01
            hit = first_reaching(ev, goal)
            hit85 = first_reaching(ev, target)
            goals[key] = (goal, int(hit["payload_sent_total"]) if hit else None,
                          _f(hit85, "wall_seconds") if hit85 else None)
    for (testbed, name), ev in runs.items():
        last = ev[-1]
        hit = first_reaching(ev, target)
        total = int(last["payload_sent_total"])
        key = (testbed, last["partition"], _model(last))
        base = baselines.get(key)
        goal, goal_bytes, base_time = goals.get(key, (None, None, None))
        to_goal = first_reaching(ev, goal) if goal is not None else None
        run_goal_bytes = int(to_goal["payload_sent_total"]) if to_goal else None
        time = _f(hit, "wall_seconds") if hit else None
        out.append({
            "goal_reduction": (goal_bytes / run_goal_bytes) if goal_bytes and run_goal_bytes else None,
            "speedup": (base_time / time) if base_time and time else None,
            "testbed": testbed, "run": name, "partition": last["partition"],
            "accuracy": _f(last, "accuracy_average_model"), "nodes_mean": _f(last, "accuracy_nodes_mean"),
            "bytes": total, "wall": _f(last, "wall_seconds"),
            "bytes_to_target": int(hit["payload_sent_total"]) if hit else None,
            "time_to_target": _f(hit, "wall_seconds") if hit else None,
            "reduction": (base / total) if base and total else None,
            "consensus": _f(last, "consensus_distance"),
        })
    order = {"iid": 0}
    out.sort(key=lambda s: (s["testbed"], order.get(s["partition"], 1), s["partition"], -(s["bytes"])))
    return out


def _bytes(n):
    if n is None:
        return "—"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _percent(x):
    return "—" if x is None else f"{x:.1%}"


def table(summary, target):
    lines = [f"| testbed | data | run | test accuracy (average model) | nodes' mean | bytes sent (all nodes) "
             f"| bytes to {target:.0%} | time to {target:.0%} | traffic vs all-reduce "
             f"| traffic to all-reduce's accuracy − 1 pt | time to {target:.0%} vs all-reduce | trainers waiting "
             f"| wall time |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in summary:
        r = s["reduction"]
        # Within 1 %: the same traffic (the textbook runs all send a model per step).
        red = ("—" if not r else "1× (baseline)" if r == 1 else "1× (same)" if abs(r - 1) < 0.01
               else f"{r:.3g}× less" if r > 1 else f"{1 / r:.3g}× more")
        ttt = f"{s['time_to_target']:.1f} s" if s["time_to_target"] is not None else "not reached"
        g = s["goal_reduction"]
        goal = "not reached" if not g else f"{g:.3g}× less" if g >= 1 else f"{1 / g:.3g}× more"
        v = s["speedup"]
        sooner = "—" if not v else f"{v:.3g}× sooner" if v >= 1 else f"{1 / v:.3g}× later"
        lines.append(f"| {s['testbed']} | {s['partition']} | {s['run']} | {s['accuracy']:.2%} | {s['nodes_mean']:.2%} "
                     f"| {_bytes(s['bytes'])} | {_bytes(s['bytes_to_target'])} | {ttt} | {red} | {goal} | {sooner} "
                     f"| {_percent(s.get('wait'))} | {s['wall']:.1f} s |")
    return "\n".join(lines) + "\n"


def plots(runs, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab20")

    def style(i):  # 20 colors, then the same colors dashed
        return {"color": cmap(i % 20), "linestyle": "-" if i < 20 else "--", "marker": ".", "markersize": 4}

    written = []
    groups = {}
    for key, ev in runs.items():
        groups.setdefault((key[0], ev[0]["partition"], _model(ev[0])), []).append((key[1], ev))
    for (testbed, partition, model), members in sorted(groups.items()):
        members.sort()
        # The MLP's plots keep their names; another model's get its name too.
        slug = f"{testbed}-{partition.replace(':', '')}" + ("" if model == "mlp" else f"-{model}")
        for what, xkey, xlabel, logx in (("bytes", "payload_sent_total", "bytes sent by all nodes", True),
                                         ("time", "wall_seconds", "wall time (s)", False)):
            fig, ax = plt.subplots(figsize=(8, 5), dpi=80)
            for i, (name, ev) in enumerate(members):
                xs = [_f(r, xkey) for r in ev]
                ys = [_f(r, "accuracy_average_model") for r in ev]
                pts = [(x, y) for x, y in zip(xs, ys) if x > 0 or not logx]
                if pts:
                    ax.plot(*zip(*pts), label=name, **style(i))
            if logx:
                ax.set_xscale("log")
            ax.set_xlabel(xlabel)
            ax.set_ylabel("test accuracy of the average model")
            ax.set_ylim(0.6, 0.9)
            ax.set_title(f"Fashion-MNIST, {testbed}, {partition}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7, ncol=2, loc="lower right")
            fig.tight_layout()
            path = pathlib.Path(out) / f"{slug}-accuracy-vs-{what}.png"
            fig.savefig(path)
            plt.close(fig)
            written.append(path.name)
        fig, ax = plt.subplots(figsize=(8, 5), dpi=80)
        for i, (name, ev) in enumerate(members):
            pts = [(_f(r, "step"), _f(r, "consensus_distance")) for r in ev]
            pts = [(x, y) for x, y in pts if y > 0]
            if pts:
                ax.plot(*zip(*pts), label=name, **style(i))
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("consensus distance (1/n) Σ‖xᵢ − x̄‖²")
        ax.set_title(f"consensus, {testbed}, {partition}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        path = pathlib.Path(out) / f"{slug}-consensus.png"
        fig.savefig(path)
        plt.close(fig)
        written.append(path.name)
    return written


README_BEGIN = "<!-- experiments/report.py: results begin -->"
README_END = "<!-- experiments/report.py: results end -->"
README_PLOTS = ["loopback-iid-accuracy-vs-bytes.png", "loopback-dirichlet0.1-consensus.png",
                "netns-100mbit-iid-accuracy-vs-time.png"]


def write_report(out, target=0.85, readme=None):
    """results.md and the plots in out; with `readme` (the results page, docs/results.md),
    also the table and the main plots between its markers (README_BEGIN, README_END)."""
    out = pathlib.Path(out)
    runs = by_run(read_runs(out))
    summary = summarize(runs, target)
    waits = read_waits(out)
    for s in summary:
        s["wait"] = waits.get((s["testbed"], s["run"]))
    pngs = plots(runs, out)
    text = ["# Experiment results", "",
            "Written by `experiments/matrix.py` (through `experiments/run.sh`) from `runs.csv`; "
            "see experiments/README.md.", "",
            table(summary, target), ""]
    text += [f"![{p}]({p})" for p in pngs]
    (out / "results.md").write_text("\n".join(text) + "\n")
    if readme is not None:
        readme = pathlib.Path(readme)
        doc = readme.read_text()
        if README_BEGIN in doc and README_END in doc:
            rel = out.resolve().relative_to(readme.resolve().parent)
            shown = [p for p in README_PLOTS if (out / p).exists()]
            body = [README_BEGIN, table(summary, target)] + [f"![{p}]({rel / p})" for p in shown] + [README_END]
            head, rest = doc.split(README_BEGIN, 1)
            doc = head + "\n".join(body) + rest.split(README_END, 1)[1]
            readme.write_text(doc)
    return summary


if __name__ == "__main__":
    root = pathlib.Path(__file__).resolve().parent.parent
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "docs" / "results"
    write_report(out, readme=root / "docs" / "results.md" if out.resolve() == (root / "docs" / "results") else None)
