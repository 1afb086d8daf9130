#!/usr/bin/env python3
"""Trains Fashion-MNIST on N gossiping nodes while killing and restarting nodes.

Runs the cluster twice with the same seed: undisturbed, then with churn. During the
churn run, every --kill-every seconds a random node's daemon and trainer get SIGKILL;
--down seconds later both are started again with the same arguments, and the node
takes the model and step of a live neighbor (gossipd's join). Kills stop when the
undisturbed run's wall time times --churn-fraction has passed, so that restarted
trainers have steps left to train.

With --no-restart a killed node stays down (an elastic ring, --strategy local-sgd
--elastic on, goes on over the others), and the nodes that finished are the ones
averaged.

With --joins J, J nodes that no member lists join the churn run, --first-join seconds
in (once every member has run a round) and --kill-every apart: `gossipd --join` through node 1 (--join-through; the coordinator, node 0,
assigns ids N, N + 1, ...), and a trainer that starts from the members' model and step
and trains to --steps like the others. They are averaged with the others.

Both runs end with every (finishing) node's saved model; their average is scored on
the test set by gossip-train --evaluate. The script prints one JSON line:

    {"undisturbed": {...}, "churn": {...first run}, "churn_runs": [...], "kills": K,
     "churn_mean_accuracy": A, "accuracy_gap": points}

and exits 1 if a process hangs (every wait is bounded) or a trainer fails.
"unlogged" lists the kills no neighbor's log noticed and the restarts without a join.

    experiments/churn.py --build build --out /tmp/churn
"""

import argparse
import array
import json
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def free_ports(n):
    """n free loopback ports below the kernel's ephemeral range, as gossipctl picks
    them: bind(0) (a daemon's ring listener) and outgoing connections never take a port
    there, so one stays free for its daemon across a kill and restart too."""
    import random
    try:
        low = int(pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    socks, ports = [], []
    for _ in range(1000):
        if len(ports) == n:
            break
        port = random.randrange(10000, low)
        if port in ports:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(port)
    for s in socks:
        s.close()
    if len(ports) < n:
        raise RuntimeError(f"found {len(ports)} free loopback ports below {low}, not {n}")
    return ports


def stop_processes(groups, grace=10.0):
    """SIGTERM to each group's live processes (trainers before daemons), then SIGKILL to
    those still there after `grace` s. Returns the ones that had to be killed."""
    stuck = []
    for group in groups:
        for p in group:
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in group:
            if p:
                try:
                    p.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    stuck.append(p)
                    p.kill()
                    p.wait()
    return stuck


def log(msg):
    print(f"[churn {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Cluster:
    def __init__(self, opts, out):
        self.o = opts
        self.out = out
        self.out.mkdir(parents=True, exist_ok=True)
        self.total = opts.nodes + opts.joins
        self.ports = free_ports(self.total)
        self.daemons = [None] * self.total
        self.trainers = [None] * self.total
        self.events = []
        self.dead = set()  # killed and not restarted (--no-restart)

    def endpoint(self, i):
        return f"tcp://127.0.0.1:{self.ports[i]}"

    def socket_path(self, i):
        return self.out / f"gossipd-{i}.sock"

    def daemon_argv(self, i):
        """Node i's gossipd: a member with the peer list, or (i >= --nodes) a joiner."""
        o = self.o
        who = ["--id", str(i)] if i < o.nodes else ["--join", self.endpoint(o.join_through % o.nodes)]
        argv = [str(o.bin / "gossipd"), *who, "--listen", self.endpoint(i),
                "--run-dir", str(self.out), "--strategy", o.strategy, "--seed", str(o.seed),
                "--heartbeat", str(o.heartbeat), "--dead-after", str(o.dead_after),
                "--patience", str(o.patience), "--round-timeout", str(o.round_timeout)]
        # The strategy's own options, only those given: gossipd knows each strategy's
        # defaults and refuses an option its strategy does not take (naming both), so
        # this script names no strategy.
        for flag in STRATEGY_FLAGS:
            value = getattr(o, flag[2:].replace("-", "_"))
            if value is not None:
                argv += [flag, str(value)]
        for j in range(o.nodes):
            if j != i and i < o.nodes:
                argv += ["--peer", f"{j}={self.endpoint(j)}"]
        return argv

    def trainer_argv(self, i):
        o = self.o
        return [str(o.bin / "gossip-train"), "--endpoint", f"ipc://{self.socket_path(i)}",
                "--node", str(i), "--nodes", str(max(o.nodes, i + 1)), "--steps", str(o.steps),
                "--seed", str(o.seed), "--batch", str(o.batch), "--lr", str(o.lr),
                "--lr-schedule", o.lr_schedule,
                "--eval-every", "0", "--save-model", str(self.out / f"node-{i}.model"),
                "--result", str(self.out / f"node-{i}.json"), "--timeout-s", str(o.timeout)]

    def _spawn(self, argv, logname):
        f = open(self.out / logname, "ab")
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)

    def start_node(self, i):
        self.daemons[i] = self._spawn(self.daemon_argv(i), f"gossipd-{i}.log")
        end = time.monotonic() + (75 if i >= self.o.nodes else 15)  # a join may try for 60 s
        while not self.socket_path(i).exists():
            if self.daemons[i].poll() is not None:
                log = (self.out / f"gossipd-{i}.log").read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"gossipd {i} exited with {self.daemons[i].returncode}: " + " | ".join(log))
            if time.monotonic() > end:
                raise RuntimeError(f"gossipd {i} did not create its socket within 15 s")
            time.sleep(0.02)
        self.trainers[i] = self._spawn(self.trainer_argv(i), f"trainer-{i}.log")

    def kill_node(self, i):
        for p in (self.trainers[i], self.daemons[i]):
            if p and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)
        # A killed daemon leaves its socket file; the next one removes it, but the
        # wait in start_node must not mistake it for the new daemon's.
        self.socket_path(i).unlink(missing_ok=True)

    def stop(self):
        stop_processes((self.trainers, self.daemons))

    def round_of(self, i):
        """Node i's round, by `gossipctl status` (None while it does not answer)."""
        try:
            out = subprocess.run([str(self.o.bin / "gossipctl"), "status", "--node",
                                  f"ipc://{self.socket_path(i)}", "--json", "--timeout", "2"],
                                 capture_output=True, text=True, timeout=10)
            return json.loads(out.stdout)["round"] if out.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError, KeyError):
            return None

    def start_all(self):
        """Every member, daemon and trainer. The ports are found free and bound a moment
        later: another process (a ring's listener, an outgoing connection) can take one
        meanwhile, and that daemon exits with "Address already in use". Then the cluster
        starts again on new ports, at most 3 times (as the C++ tests' harness does)."""
        for attempt in range(3):
            try:
                for i in range(self.o.nodes):
                    self.start_node(i)
                return
            except RuntimeError:
                text = (self.out / f"gossipd-{i}.log").read_text(errors="replace")
                if attempt == 2 or "Address already in use" not in text:
                    raise
                log(f"gossipd {i}: its port was taken meanwhile: the cluster starts again on new ports")
                self.stop()
                self.ports = free_ports(self.total)
                for s in self.out.glob("gossipd-*.sock"):
                    s.unlink(missing_ok=True)

    def run(self, kills=0, kill_every=0.0, joins=0):
        rng = random.Random(self.o.seed * 7919 + 1)
        t0 = time.monotonic()
        self.start_all()
        joined = 0
        next_join = t0 + (self.o.first_join or 0.0)  # set before any run with joins
        # The first kill once training runs (a node killed while the cluster starts
        # has no state to rejoin with), the others `kill_every` after each restart.
        # Runs: every node past its first round, by its daemon. A fixed delay alone
        # was not enough: beside another build the 8 nodes were still starting at
        # 3 s, so the kill and the restart happened before any round and no log
        # could name them (CI, 2026-11-29).
        # Joins wait for it too: a joiner that comes before any round finds no state
        # newer than round 0 and takes the initial model, as a member does, so no log
        # can say it took a member's state. 30 % of a 3.6 s undisturbed run came 1.1 s
        # in, before the members' trainers had attached (CI, 2026-12-07).
        next_kill = t0 + max(kill_every, self.o.first_kill)
        training, next_look = kills == 0 and joins == 0, t0
        killed = 0
        down = None  # (node, restart time)
        deadline = t0 + self.o.timeout
        try:
            while True:
                now = time.monotonic()
                if now > deadline:
                    raise RuntimeError(f"the run did not finish within {self.o.timeout} s")
                if down and not self.o.restart:
                    down = None  # it stays down
                    next_kill = now + kill_every
                if down and now >= down[1]:
                    i = down[0]
                    self.events.append({"t": round(now - t0, 2), "event": "restart", "node": i})
                    log(f"restart node {i}")
                    self.start_node(i)
                    down = None
                    next_kill = now + kill_every
                if training and joined < joins and now >= next_join:
                    i = self.o.nodes + joined
                    self.events.append({"t": round(now - t0, 2), "event": "join", "node": i})
                    log(f"node {i} joins through node {self.o.join_through % self.o.nodes}")
                    self.start_node(i)
                    joined += 1
                    next_join = now + kill_every
                if not training and now >= next_look:
                    training = all((self.round_of(i) or 0) >= 1 for i in range(self.o.nodes))
                    next_look = now + 0.5
                    # A strategy whose status shows no round (or a node that never
                    # answers) is not waited for past 30 s more: the kills still come.
                    if not training and now > next_kill + 30:
                        log("no round seen on every node 30 s past the first kill's time: "
                            "killing and joining anyway")
                        training = True
                if training and killed < kills and down is None and now >= next_kill:
                    alive = [i for i in range(self.total)
                             if self.trainers[i] and self.trainers[i].poll() is None]
                    if alive:
                        i = rng.choice(alive)
                        self.events.append({"t": round(now - t0, 2), "event": "kill", "node": i})
                        log(f"kill node {i} (daemon and trainer, SIGKILL)")
                        self.kill_node(i)
                        killed += 1
                        if not self.o.restart:
                            self.dead.add(i)
                        down = (i, now + self.o.down)
                for i, p in enumerate(self.trainers):
                    if i in self.dead:
                        continue
                    if p and p.poll() not in (None, 0) and not (down and down[0] == i):
                        # The logs go with the run's directory, often a temporary
                        # one: their ends travel in the error, so a failure in CI
                        # can be read afterwards.
                        tails = "".join(
                            f"\n--- {name} (last lines)\n" + "\n".join(
                                (self.out / name).read_text(errors="replace").splitlines()[-12:])
                            for name in (f"trainer-{i}.log", f"gossipd-{i}.log")
                            if (self.out / name).exists())
                        raise RuntimeError(f"trainer {i} failed with {p.returncode}; see "
                                           f"{self.out / f'trainer-{i}.log'}{tails}")
                if down is None and joined == joins and all(
                        p and p.poll() == 0 for i, p in enumerate(self.trainers[:self.o.nodes + joins])
                        if i not in self.dead):
                    break
                time.sleep(0.05)
        finally:
            wall = time.monotonic() - t0
            self.stop()
        return wall


def ring_left_out(log_text):
    """The nodes an elastic ring's re-formings left out, by this daemon's log."""
    out = set()
    for m in re.finditer(r"ring re-formed at epoch \d+ over .*: left out ([0-9, ]+)", log_text):
        out.update(int(x) for x in m.group(1).split(",") if x.strip())
    return out


def unlogged_events(opts, cluster):
    """The kills, restarts and joins that the daemons' logs do not name: a kill must be
    noticed by a neighbor (presumed dead or down, or missed rounds), a restart must end in a
    join, a node that joins by seeds must get its id and take a member's state (or,
    under the parameter servers, the servers' model and clock)."""
    logs = [(cluster.out / f"gossipd-{i}.log").read_text(errors="replace")
            if (cluster.out / f"gossipd-{i}.log").exists() else "" for i in range(cluster.total)]
    missing = []
    for e in cluster.events:
        i = e["node"]
        if e["event"] == "kill":
            noticed = any(f"peer {i} silent" in logs[j] or f"peer {i} missed round" in logs[j]
                          or f"peer {i} dropped its connection" in logs[j]
                          or re.search(rf"peer {i} sent [^\n]* presumed down", logs[j])
                          or i in ring_left_out(logs[j]) for j in range(cluster.total) if j != i)
            if not noticed:
                missing.append(e)
        # A parameter servers' worker takes the servers' model and clock at its first pull.
        took = "joined: took the model of peer" in logs[i] or "ps: took the servers' model" in logs[i]
        if e["event"] == "join" and (f"joined as node {i} of" not in logs[i] or not took):
            missing.append(e)
    for i in range(opts.nodes):
        restarts = sum(1 for e in cluster.events if e["event"] == "restart" and e["node"] == i)
        if logs[i].count("joined: took the model of peer") < restarts:
            missing.append({"event": "restart without a join in the log", "node": i})
    return missing


def read_model(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def evaluate_average(opts, out, skip=(), nodes=None):
    finished = [i for i in range(nodes or opts.nodes) if i not in skip]
    models = [read_model(out / f"node-{i}.model") for i in finished]
    n = len(models[0])
    avg = array.array("f", [0.0] * n)
    for m in models:
        if len(m) != n:
            raise RuntimeError("the nodes saved models of different sizes")
        for k in range(n):
            avg[k] += m[k]
    for k in range(n):
        avg[k] /= len(models)
    path = out / "average.model"
    with open(path, "wb") as f:
        avg.tofile(f)
    result = out / "average.json"
    subprocess.run([str(opts.bin / "gossip-train"), "--evaluate", str(path), "--result", str(result)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    with open(result) as f:
        r = json.loads(f.readline())
    nodes = []
    for i in finished:
        with open(out / f"node-{i}.json") as f:
            nodes.append(json.loads(f.readline()))
    return r, nodes


# gossipd's strategy options that this script passes on when given.
STRATEGY_FLAGS = ("--topology", "--codec", "--period", "--ps-mode", "--servers", "--transport", "--elastic")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(ROOT / "build"), help="build directory with bin/gossipd")
    p.add_argument("--out", default="/tmp/gossip-churn", help="run directories and logs go here")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine"],
                   help="the trainers' (gossip-train --lr-schedule); cosine ends each run at a low-noise "
                        "point, so that the gap measures the churn rather than where SGD's noise left the "
                        "last step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--strategy", default="gossip")
    # Passed to gossipd only when given (its defaults otherwise); gossipd refuses one that
    # the strategy does not take.
    p.add_argument("--topology", help="gossip strategies' overlay (gossipd's default: the strategy's)")
    p.add_argument("--codec", help="compression of what crosses the network (e.g. topk:0.01 with choco)")
    p.add_argument("--period", type=int, help="local-sgd, ps: steps between averages (pushes)")
    p.add_argument("--ps-mode", help="ps: bsp, async or ssp:S")
    p.add_argument("--servers", type=int, help="ps: shards, on the lowest ids")
    p.add_argument("--transport", help="local-sgd, allreduce: the ring's transport")
    p.add_argument("--elastic", choices=["on", "off"],
                   help="local-sgd, allreduce over tcp: re-form the ring when a node dies")
    p.add_argument("--round-timeout", type=float, default=10.0,
                   help="seconds before a round gives up on the missing (gossipd's default is 60)")
    p.add_argument("--no-restart", dest="restart", action="store_false",
                   help="killed nodes stay down (for an elastic ring, which takes no node back)")
    p.add_argument("--kills", type=int, default=3, help="how many times a node is killed")
    p.add_argument("--joins", type=int, default=0, help="nodes that join the churn run by seeds")
    p.add_argument("--join-through", type=int, default=1,
                   help="the member a joiner asks first (its seed)")
    p.add_argument("--first-join", type=float, default=None,
                   help="seconds into the run of the first join, and not before every member has run "
                        "a round (default: 30 %% of the undisturbed run's wall time, at least 1 s; a "
                        "fixed 3 s came after the end of a 3.5 s local-SGD run)")
    p.add_argument("--kill-every", type=float, default=3.0,
                   help="at most this many seconds between a restart and the next kill")
    p.add_argument("--first-kill", type=float, default=3.0, help="seconds into the run of the first kill")
    p.add_argument("--down", type=float, default=3.0, help="seconds a killed node stays down")
    p.add_argument("--churn-fraction", type=float, default=0.6,
                   help="kill only during this fraction of the undisturbed run's wall time")
    p.add_argument("--heartbeat", type=float, default=0.3)
    p.add_argument("--dead-after", type=float, default=1.5)
    p.add_argument("--patience", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=300.0, help="bound on each run, seconds")
    p.add_argument("--repeats", type=int, default=1,
                   help="churn runs (same schedule); the gap is their mean accuracy's, since one "
                        "run's accuracy varies by about 0.5 points with the timing of the kills")
    opts = p.parse_args(argv)
    opts.bin = pathlib.Path(opts.build) / "bin"
    out = pathlib.Path(opts.out)

    report = {}
    try:
        log(f"undisturbed run: {opts.nodes} nodes, {opts.strategy}"
            f"{' on ' + opts.topology if opts.topology else ''}, {opts.steps} steps")
        base = Cluster(opts, out / "undisturbed")
        wall = base.run()
        acc, nodes = evaluate_average(opts, base.out)
        report["undisturbed"] = {"wall_s": round(wall, 2), "average_accuracy": acc["accuracy_average"],
                                 "node_steps": [n["steps"] for n in nodes]}
        log(f"undisturbed: {wall:.1f} s, average model {100 * acc['accuracy_average']:.2f}%")

        if opts.first_join is None:
            opts.first_join = max(1.0, 0.3 * wall)
        # Each kill costs a gap and a down time; the gap shrinks (to 0.5 s at least) so
        # that all of them fit in the churn window of a short run.
        window = opts.churn_fraction * wall
        down = opts.down if opts.restart else 0.0
        gap = min(opts.kill_every, max(0.5, window / max(opts.kills, 1) - down))
        log(f"churn run: {opts.kills} kills, {gap:.1f} s apart" +
            (f" after each restart, down {opts.down} s" if opts.restart else ", no restarts"))
        runs = []
        for k in range(opts.repeats):
            churned = Cluster(opts, out / ("churn" if k == 0 else f"churn-{k + 1}"))
            wall = churned.run(kills=opts.kills, kill_every=gap, joins=opts.joins)
            acc, nodes = evaluate_average(opts, churned.out, skip=churned.dead, nodes=churned.total)
            kills = sum(1 for e in churned.events if e["event"] == "kill")
            runs.append({"wall_s": round(wall, 2), "average_accuracy": acc["accuracy_average"],
                         "node_steps": [n["steps"] for n in nodes], "events": churned.events,
                         "finished": [i for i in range(churned.total) if i not in churned.dead],
                         "kills": kills, "unlogged": unlogged_events(opts, churned)})
            log(f"churn: {kills} kills, {wall:.1f} s, average model {100 * acc['accuracy_average']:.2f}%")
        # The first run's figures, and every run's; the gap is the mean's.
        mean = sum(r["average_accuracy"] for r in runs) / len(runs)
        report["churn"] = {k: v for k, v in runs[0].items() if k not in ("kills", "unlogged")}
        report["churn_runs"] = runs
        report["kills"] = min(r["kills"] for r in runs)
        report["unlogged"] = [e for r in runs for e in r["unlogged"]]
        report["churn_mean_accuracy"] = round(mean, 4)
        report["accuracy_gap"] = round(100 * (report["undisturbed"]["average_accuracy"] - mean), 2)
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        log(f"failed: {e}")
        print(json.dumps({"error": str(e), **report}))
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
