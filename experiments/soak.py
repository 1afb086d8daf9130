#!/usr/bin/env python3
"""A long run of N gossiping nodes under everything at once (issue 24's soak):
random kills and restarts, nodes that join, network partitions that heal, and one
node whose messages are corrupted. It checks what a long run breaks and a short one does not:

  - every node's trainer ends at the target accuracy (its own model, on the test set);
  - no hang: every wait is bounded, and the run ends within --minutes plus a last lap;
  - nothing leaks: no process of the run is left, no shared-memory arena of its
    daemons is left in /dev/shm (killed ones included: their successors remove them);
  - flat memory: each daemon that lived long enough ends with its resident set within
    --rss-tolerance of what it held after --warmup seconds (each the least of a
    minute's samples, so that a burst in flight is not taken for the level).

The nodes run D-PSGD (`--strategy gossip`) on a ring. Each daemon runs in a network
namespace of its own on a bridge (experiments/testbed.py; needs root); a partition
moves a random half of the nodes to a second bridge for --partition-for seconds and
back. Without the rights for namespaces the run stays on loopback and says that it
makes no partitions. Node --garble-node runs gossipd-byzantine with
GOSSIP_ATTACK=garble,honest,honest,honest: one round in four its model chunks are
corrupted (cut short, grown, moved past the model's end, an element count or a codec
that does not match); its neighbors must refuse each and train on.

--joins J nodes that no member lists join by seeds (`gossipd --join` through node 1;
node 0 assigns ids N, N + 1, ...), --join-every seconds apart from --warmup on; from
then on they are nodes like the others: killed, restarted (with --join again, which
gives them back their id), partitioned, and checked at the end.

Trainers run in laps of --lap steps (a trainer that ends is started again for the
next lap, from the node's step); a killed node's trainer comes back with its daemon.
When --minutes have passed, the chaos stops and every node runs one more lap, to the
same last step, with the learning rate annealed (gossip-train --lr-schedule cosine,
which over --steps steps is nearly 0 by then): as a training schedule ends, so that
each node's own model is judged, not the noise of a constant rate of 0.05 with
momentum 0.9 (the last 20-minute soak's nodes ended at 83.4-83.7 % on their own
models, 88 % on their average, at that rate).

    experiments/soak.py --build build --minutes 20 --out /tmp/soak

Prints one JSON line and exits 1 when a check fails.
"""

import argparse
import shlex
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import testbed  # noqa: E402
from churn import free_ports, stop_processes  # noqa: E402


def log(msg):
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def rss_kib(pid, field="VmRSS:"):
    """A process's resident set now (VmRSS), or its peak so far (VmHWM), in KiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Soak:
    def __init__(self, o, out, bed):
        self.o = o
        self.out = out
        self.bed = bed
        n = o.nodes + o.joins
        self.hosts = bed.hosts() if bed else ["127.0.0.1"] * n
        self.ports = [7100] * n if bed else free_ports(n)
        self.daemons = [None] * n
        self.trainers = [None] * n
        self.started = [0.0] * n         # when the current daemon started
        self.next_step = [o.lap] * n     # the current lap's last step
        self.final_step = None           # once time is up: every node's last step
        self.finished = [False] * n
        self.results = [None] * n
        self.pids = []                   # every daemon pid, for the leak check
        self.rss = {}                    # pid -> [(t, node, KiB, peak KiB so far)]
        self.events = []
        self.failures = []
        self.t0 = time.monotonic()

    def now(self):
        return time.monotonic() - self.t0

    def event(self, what, **kw):
        self.events.append({"t": round(self.now(), 1), "wall": time.time(), "event": what, **kw})
        log(f"{what} {kw if kw else ''}")

    def endpoint(self, i):
        return f"tcp://{self.hosts[i]}:{self.ports[i]}"

    def socket_path(self, i):
        return self.out / f"gossipd-{i}.sock"

    def daemon_argv(self, i):
        o = self.o
        exe = "gossipd-byzantine" if i == o.garble_node else "gossipd"
        who = ["--id", str(i)] if i < o.nodes else ["--join", self.endpoint(1)]
        argv = [str(o.bin / exe), *who, "--listen", self.endpoint(i), "--run-dir", str(self.out),
                "--strategy", "gossip", "--topology", "ring", "--seed", str(o.seed),
                "--heartbeat", "0.3", "--dead-after", "1.5", "--patience", "5",
                *shlex.split(o.gossipd_args)]
        for j in range(o.nodes):
            if j != i and i < o.nodes:
                argv += ["--peer", f"{j}={self.endpoint(j)}"]
        if self.bed:
            argv = ["ip", "netns", "exec", f"{self.bed.prefix}{i}"] + argv
        return argv

    def spawn(self, argv, logname, env=None):
        f = open(self.out / logname, "ab")
        return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                env=env)

    def start_daemon(self, i):
        env = dict(os.environ)
        if i == self.o.garble_node:
            env["GOSSIP_ATTACK"] = "garble,honest,honest,honest"
        self.socket_path(i).unlink(missing_ok=True)
        p = self.spawn(self.daemon_argv(i), f"gossipd-{i}.log", env)
        end = time.monotonic() + (75 if i >= self.o.nodes else 15)  # a join may try for 60 s
        while not self.socket_path(i).exists():
            if p.poll() is not None:
                raise RuntimeError(f"gossipd {i} exited with {p.returncode}; see gossipd-{i}.log")
            if time.monotonic() > end:
                raise RuntimeError(f"gossipd {i} did not create its socket within 15 s")
            time.sleep(0.02)
        self.daemons[i] = p
        self.started[i] = self.now()
        self.pids.append(p.pid)

    def start_trainer(self, i, steps):
        o = self.o
        argv = [str(o.bin / "gossip-train"), "--endpoint", f"ipc://{self.socket_path(i)}",
                "--node", str(i), "--nodes", str(o.nodes + o.joins), "--steps", str(steps), "--seed", str(o.seed),
                "--batch", "64", "--lr", str(o.lr), "--eval-every", "0",
                "--result", str(self.out / f"node-{i}.json"), "--timeout-s", "120"]
        if self.final_step is not None:
            argv += ["--lr-schedule", "cosine"]
        (self.out / f"node-{i}.json").unlink(missing_ok=True)
        self.trainers[i] = self.spawn(argv, f"trainer-{i}.log")

    def kill_node(self, i):
        for p in (self.trainers[i], self.daemons[i]):
            if p and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)
        self.trainers[i] = self.daemons[i] = None

    def sample_rss(self):
        t = self.now()
        for i, p in enumerate(self.daemons):
            if p and p.poll() is None:
                kib, peak = rss_kib(p.pid), rss_kib(p.pid, "VmHWM:")
                if kib is not None:
                    self.rss.setdefault(p.pid, []).append((round(t, 1), i, kib, peak or kib))

    def read_result(self, i):
        try:
            with open(self.out / f"node-{i}.json") as f:
                return json.loads(f.readline())
        except (OSError, ValueError):
            return None

    def already_at(self, i):
        """The node's step when its last trainer found nothing to train, else None."""
        try:
            tail = (self.out / f"trainer-{i}.log").read_text(errors="replace")[-400:]
        except OSError:
            return None
        m = re.search(r"the node is already at step (\d+), not below --steps \d+: nothing to train\s*$",
                      tail)
        return int(m.group(1)) if m else None

    def tend_trainers(self):
        """Starts the next lap where a trainer ended; notes the ones that failed."""
        lap = self.o.lap
        for i in range(self.o.nodes + self.o.joins):
            if self.daemons[i] is None or self.finished[i]:
                continue
            p = self.trainers[i]
            if p is not None and p.poll() is None:
                continue
            if p is not None:
                r = self.read_result(i)
                ahead = self.already_at(i) if p.returncode != 0 else None
                if ahead is not None:
                    # A rejoin put the node past this lap's end (it took a neighbor's
                    # step), and gossip-train refuses to train nothing: the next lap,
                    # or after time is up one step, for its final result.
                    self.next_step[i] = (ahead // lap + 1) * lap
                    if self.final_step is not None:
                        self.next_step[i] = max(self.final_step, ahead + 1)
                elif p.returncode != 0 or r is None:
                    self.failures.append(f"trainer {i} exited with {p.returncode} at "
                                         f"{self.now():.0f} s; see trainer-{i}.log")
                    self.event("trainer failed", node=i, rc=p.returncode)
                    self.trainers[i] = None
                    continue
                else:
                    self.results[i] = r
                    if self.final_step is not None and r["steps"] >= self.final_step:
                        self.finished[i] = True
                        continue
                    # The next lap ends at the next multiple of --lap past the node's step.
                    self.next_step[i] = (r["steps"] // lap + 1) * lap
                    if self.final_step is not None:
                        self.next_step[i] = max(self.final_step, r["steps"] + 1)
            elif self.final_step is not None:
                self.next_step[i] = max(self.next_step[i], self.final_step)
            self.start_trainer(i, self.next_step[i])

    def run(self):
        o = self.o
        rng = random.Random(o.seed)
        for i in range(o.nodes):
            self.start_daemon(i)
        for i in range(o.nodes):
            self.start_trainer(i, self.next_step[i])
        # Nodes not yet joined count as finished until they join.
        for i in range(o.nodes, o.nodes + o.joins):
            self.finished[i] = True
        joined = 0
        next_join = o.warmup if o.joins else float("inf")
        end = o.minutes * 60
        next_kill = o.warmup / 2
        next_partition = o.warmup if self.bed and o.partition_every > 0 else float("inf")
        down = {}        # node -> restart time
        healed_at = None
        next_sample = 0.0
        deadline = end + o.last_lap_timeout
        try:
            while True:
                t = self.now()
                if t > deadline:
                    raise RuntimeError(f"the run did not end {o.last_lap_timeout:.0f} s after its "
                                       f"{o.minutes} minutes")
                ending = t >= end
                if ending and self.final_step is None and not down and healed_at is None:
                    # Every node to the same last step, one lap past every lap now running.
                    self.final_step = max(self.next_step) + o.lap
                    self.event("time is up", final_step=self.final_step)
                for i, at in list(down.items()):
                    if t >= at:
                        self.start_daemon(i)
                        self.event("restart", node=i)
                        del down[i]
                if healed_at is not None and t >= healed_at:
                    self.bed.heal()
                    self.event("heal")
                    healed_at = None
                    next_partition = t + o.partition_every
                if not ending and t >= next_join and joined < o.joins and not down and healed_at is None:
                    i = o.nodes + joined
                    self.start_daemon(i)
                    self.event("join", node=i)
                    self.finished[i] = False
                    self.next_step[i] = 1  # its trainer starts at the members' step
                    joined += 1
                    next_join = t + o.join_every
                if not ending and t >= next_kill and not down:
                    alive = [i for i in range(o.nodes + joined) if self.daemons[i]]
                    i = rng.choice(alive)
                    self.kill_node(i)
                    self.event("kill", node=i)
                    down[i] = t + o.down
                    next_kill = t + o.down + rng.uniform(0.5, 1.5) * o.kill_every
                if not ending and t >= next_partition and healed_at is None:
                    side = sorted(rng.sample(range(o.nodes + joined), (o.nodes + joined) // 2))
                    self.bed.partition(side)
                    self.event("partition", side=side)
                    healed_at = t + o.partition_for
                    next_partition = float("inf")
                self.tend_trainers()
                if t >= next_sample:
                    self.sample_rss()
                    next_sample = t + 10
                if self.final_step is not None and all(self.finished):
                    break
                if len(self.failures) > 3 * o.nodes:
                    raise RuntimeError("trainers keep failing: " + "; ".join(self.failures[:3]))
                time.sleep(0.1)
        finally:
            wall = self.now()
            self.stop()
        return wall

    def stop(self):
        for p in stop_processes((self.trainers, self.daemons), grace=15.0):
            self.failures.append(f"pid {p.pid} ignored SIGTERM for 15 s")

    def rss_report(self):
        """Per daemon that lived past its warm-up by --rss-window s: its resident set in
        the minute after the warm-up and in its last minute, each the minimum of the
        samples (every 10 s) then, so that a burst in flight (a round's chunks, a
        neighbor's rounds buffered after a partition) is not taken for the level."""
        rows = []
        for pid, samples in self.rss.items():
            node, start = samples[0][1], samples[0][0]
            base = [s for s in samples if self.o.warmup <= s[0] - start < self.o.warmup + 60]
            if not base or samples[-1][0] - base[0][0] < self.o.rss_window:
                continue
            end = [s for s in samples if s[0] > samples[-1][0] - 60]
            b, e = min(s[2] for s in base), min(s[2] for s in end)
            rows.append({"node": node, "pid": pid, "after_warmup_kib": b, "at_end_kib": e,
                         "peak_kib": max(s[3] for s in samples),  # VmHWM: between samples too
                         "peak_ratio": round(max(s[3] for s in samples) / max(b, e), 3),
                         "seconds": round(samples[-1][0] - base[0][0]), "ratio": round(e / b, 3)})
        return rows

    # A peer presumed dead or down (sgd/overlay/neighbor_exchange.cc: its silence, its
    # dropped connection, or no answer to an ask) that was neither down nor across a
    # partition then: what the adaptive dead-after (--dead-after-factor), the link's
    # check and the patience's ask must not do. The daemons' log times are the wall
    # clock's, as the events'.
    DEATH = re.compile(r"^(\S+ \S+) \[node (\d+)\] \[warning\] peer (\d+) "
                       r"(silent for [0-9.]+ s in round \d+ \(no heartbeat\): presumed dead"
                       r"|dropped its connection.*: presumed down|sent .* did not answer .*: presumed down)")

    def presumed_deaths(self, slack=10.0):
        down = {}  # node -> [(from, to)] wall times it was down (kill to restart, and a restart's start)
        cut = []   # (from, to, side)
        kill_at = {}
        part = None
        for e in self.events:
            if e["event"] == "kill":
                kill_at[e["node"]] = e["wall"]
            elif e["event"] == "restart" and e["node"] in kill_at:
                down.setdefault(e["node"], []).append((kill_at.pop(e["node"]), e["wall"]))
            elif e["event"] == "partition":
                part = (e["wall"], set(e["side"]))
            elif e["event"] == "heal" and part:
                cut.append((part[0], e["wall"], part[1]))
                part = None
        end = time.time()
        down = {n: spans + ([(kill_at[n], end)] if n in kill_at else []) for n, spans in down.items()}
        for n, t in kill_at.items():
            down.setdefault(n, [(t, end)])
        if part:
            cut.append((part[0], end, part[1]))

        def explained(t, observer, peer):
            for a, b in down.get(peer, []) + down.get(observer, []):
                if a - 1 <= t <= b + slack:
                    return True
            for a, b, side in cut:
                if a - 1 <= t <= b + slack and ((peer in side) != (observer in side)):
                    return True
            return False

        deaths, unexplained = 0, []
        for f in sorted(self.out.glob("gossipd-*.log")):
            for line in f.read_text(errors="replace").splitlines():
                m = self.DEATH.match(line)
                if not m:
                    continue
                t = time.mktime(time.strptime(m.group(1).split(".")[0], "%Y-%m-%d %H:%M:%S")) \
                    + float("0." + m.group(1).split(".")[1])
                deaths += 1
                if not explained(t, int(m.group(2)), int(m.group(3))):
                    unexplained.append(line[:200])
        return deaths, unexplained[:20]

    def leaks(self):
        out = str(self.out)
        procs = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            exe = os.path.basename(cmd.split(" ", 1)[0])
            if out in cmd and exe in ("gossipd", "gossipd-byzantine", "gossip-train", "ip"):
                procs.append(f"{d}: {cmd[:120]}")
        ours = set(self.pids)
        shm = []
        for name in os.listdir("/dev/shm"):
            m = re.fullmatch(r"gossipd-\d+-\d+-(\d+)(-.*)?", name)
            if m and int(m.group(1)) in ours:
                shm.append(name)
        return procs, shm

    def refusals(self):
        """Lines in the neighbors' logs that refuse the garbling node's messages."""
        g = self.o.garble_node
        count = 0
        for i in range(self.o.nodes):
            if i == g:
                continue
            text = (self.out / f"gossipd-{i}.log").read_text(errors="replace")
            count += len(re.findall(rf"(dropped|refused) [^\n]*peer {g}\b|peer {g}[^\n]*(refused|malformed)",
                                    text))
        return count


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(pathlib.Path(__file__).resolve().parent.parent / "build"))
    p.add_argument("--out", default="/tmp/gossip-soak")
    p.add_argument("--minutes", type=float, default=20.0)
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--lap", type=int, default=5000, help="steps a trainer runs before it is started again")
    p.add_argument("--kill-every", type=float, default=90.0, help="mean seconds between kills")
    p.add_argument("--down", type=float, default=5.0, help="seconds a killed node stays down")
    p.add_argument("--partition-every", type=float, default=180.0,
                   help="seconds from a heal to the next partition (0: none)")
    p.add_argument("--partition-for", type=float, default=20.0)
    p.add_argument("--garble-node", type=int, default=7, help="-1: none")
    p.add_argument("--joins", type=int, default=2, help="nodes that join by seeds during the run")
    p.add_argument("--join-every", type=float, default=240.0, help="seconds between joins")
    p.add_argument("--target", type=float, default=0.84,
                   help="every node's final test accuracy (as Training.EightNodesGossipOnARingReach84Percent)")
    p.add_argument("--warmup", type=float, default=120.0, help="seconds before the RSS baseline")
    p.add_argument("--rss-window", type=float, default=300.0,
                   help="a daemon's RSS is judged when it lived this long past its warm-up")
    p.add_argument("--rss-tolerance", type=float, default=0.10)
    p.add_argument("--last-lap-timeout", type=float, default=600.0)
    p.add_argument("--loopback", action="store_true", help="no namespaces (and so no partitions)")
    p.add_argument("--gossipd-args", default="",
                   help="more gossipd flags for every node, e.g. '--dead-after-factor 0 "
                        "--round-timeout-factor 0' (fixed timeouts; the adaptive ones are "
                        "gossip's default)")
    o = p.parse_args(argv)
    o.bin = pathlib.Path(o.build) / "bin"
    out = pathlib.Path(o.out)
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        if f.is_file() or f.is_socket():
            f.unlink()

    bed = None
    if not o.loopback:
        try:
            testbed.teardown_stale()
            bed = testbed.Testbed(o.nodes + o.joins, "10gbit", net=78).__enter__()
        except testbed.TestbedError as e:
            log(f"no network namespaces ({e}): loopback, no partitions")
    report = {"nodes": o.nodes, "joins": o.joins, "minutes": o.minutes, "partitions": bed is not None,
              "garble_node": o.garble_node}
    soak = Soak(o, out, bed)
    ok = True
    try:
        report["wall_s"] = round(soak.run())
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        report["error"] = str(e)
        ok = False
    finally:
        if bed:
            bed.close()
    results = soak.results
    report["final_step"] = soak.final_step
    report["accuracy"] = [r["accuracy_local"] if r else None for r in results]
    report["events"] = {k: sum(1 for e in soak.events if e["event"] == k)
                        for k in ("kill", "restart", "join", "partition", "heal")}
    report["trainer_failures"] = soak.failures
    deaths, unexplained = soak.presumed_deaths()
    report["presumed_dead"] = deaths
    report["presumed_dead_unexplained"] = unexplained
    rss = soak.rss_report()
    report["rss"] = rss
    procs, shm = soak.leaks()
    report["leaked_processes"] = procs
    report["leaked_shm"] = shm
    if o.garble_node >= 0:
        report["refused_from_garble_node"] = soak.refusals()
    checks = {
        "every node at the target": all(r is not None and r["accuracy_local"] >= o.target for r in results),
        "every node at the last step": all(r is not None and soak.final_step is not None
                                           and r["steps"] >= soak.final_step for r in results),
        "no trainer failed": not soak.failures,
        "no live peer presumed dead": not unexplained,
        "no leaked process": not procs,
        "no leaked shared memory": not shm,
        "flat memory": bool(rss) and all(r["ratio"] <= 1 + o.rss_tolerance for r in rss),
        "memory peaks at most 1.5x the steady state": bool(rss) and all(r["peak_ratio"] <= 1.5 for r in rss),
    }
    if o.garble_node >= 0:
        checks["corrupted messages refused"] = report["refused_from_garble_node"] > 0
    report["checks"] = checks
    ok = ok and all(checks.values())
    report["ok"] = ok
    print(json.dumps(report))
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    for k, v in checks.items():
        log(f"{'ok  ' if v else 'FAIL'} {k}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
