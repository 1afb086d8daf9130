"""A rate-limited network testbed on one machine: one network namespace per node,
a veth pair from each to a shared bridge, and each node's egress shaped with tc's
token bucket filter (this kernel has no netem, so there is bandwidth but no added
latency). gossipctl runs daemon i inside namespace <prefix><i> (--netns) listening
on 10.<net>.0.<i+1> (--hosts); the trainers stay outside and attach through the
daemons' ipc:// sockets and shared memory, which namespaces do not separate.

Needs root (CAP_NET_ADMIN) and iproute2. Everything made is torn down by close(),
which the context manager calls on exceptions and Ctrl-C alike; names carry the
pid, so a crashed run's leftovers never clash with a new one's (and
`teardown_stale()` removes them).
"""

import os
import re
import shutil
import subprocess


class TestbedError(RuntimeError):
    pass


def _run(args, check=True):
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise TestbedError(f"`{' '.join(args)}` failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def check_rights():
    """Raises TestbedError with what is missing, before anything is made."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        raise TestbedError("the testbed needs iproute2 (`ip` and `tc`); install it with "
                           "scripts/install-deps.sh")
    if os.geteuid() != 0:
        raise TestbedError("the testbed makes network namespaces, veth pairs and tc qdiscs, "
                           "which needs root (CAP_NET_ADMIN): run as root, or as root of a user "
                           "namespace (tests/as-namespace-root.sh), or use --testbed loopback")
    # Everything the testbed needs, tried inside a namespace of its own (deleting it
    # deletes whatever was made in it): a kernel or container may lack any one of them.
    probe = f"gdprobe{os.getpid()}"
    done = _run(["ip", "netns", "add", probe], check=False)
    if done.returncode != 0:
        raise TestbedError(f"cannot create a network namespace here: {done.stderr.strip()}")
    try:
        for what, args in (
                ("a bridge", ["ip", "-n", probe, "link", "add", "pbr", "type", "bridge"]),
                ("a veth pair", ["ip", "-n", probe, "link", "add", "pa", "type", "veth", "peer", "name", "pb"]),
                ("tc's token bucket filter (sch_tbf)",
                 ["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "1mbit",
                  "burst", "32kb", "latency", "50ms"])):
            done = _run(args, check=False)
            if done.returncode != 0:
                raise TestbedError(f"this machine cannot make {what}: {done.stderr.strip()}")
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def parse_rate(rate):
    """'100mbit', '1gbit', '500kbit' -> the same string, validated for tc."""
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(kbit|mbit|gbit)", rate):
        raise TestbedError(f"rate '{rate}': expected a number with kbit, mbit or gbit (e.g. 100mbit)")
    return rate


def parse_rates(rates, nodes):
    """'100mbit' (every node) or a comma-separated list, node i taking the i-th rate and
    the nodes past its end the last one: '10mbit,100mbit' is one 10 Mbit/s node among
    100 Mbit/s ones (issue 23's heterogeneous profile)."""
    listed = [parse_rate(r.strip()) for r in rates.split(",")]
    if len(listed) > nodes:
        raise TestbedError(f"{len(listed)} rates for {nodes} nodes")
    return [listed[min(i, len(listed) - 1)] for i in range(nodes)]


class Testbed:
    """n namespaces on a bridge, each node's egress limited to its rate (parse_rates)."""

    def __init__(self, nodes, rate, net=77):
        self.nodes = nodes
        self.rates = parse_rates(rate, nodes)
        tag = os.getpid() % 100000
        self.prefix = f"gd{tag}n"
        self.bridge = f"gd{tag}br"
        self.net = net
        self._made = []  # (kind, name) in creation order, removed in reverse

    def hosts(self):
        return [f"10.{self.net}.0.{i + 1}" for i in range(self.nodes)]

    def __enter__(self):
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _build(self):
        check_rights()
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._made.append(("link", self.bridge))
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, host in enumerate(self.hosts()):
            ns = f"{self.prefix}{i}"
            outside, inside = f"{self.prefix}{i}a", f"{self.prefix}{i}b"
            _run(["ip", "netns", "add", ns])
            self._made.append(("netns", ns))
            _run(["ip", "link", "add", outside, "type", "veth", "peer", "name", inside])
            self._made.append(("link", outside))
            _run(["ip", "link", "set", inside, "netns", ns])
            _run(["ip", "link", "set", outside, "master", self.bridge, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{host}/24", "dev", inside])
            _run(["ip", "-n", ns, "link", "set", inside, "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            # A burst of ~10 ms at the rate (at least 64 KiB, one loopback-sized segment).
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", inside, "root", "tbf",
                  "rate", self.rates[i], "burst", "256kb", "latency", "100ms"])

    def partition(self, side):
        """Cuts the nodes in `side` off from the others: their veths move to a second
        bridge, so each side still reaches its own members and nothing of the other's
        (packets are dropped, connections are not reset: as a failed switch does)."""
        other = self.bridge + "p"
        if ("link", other) not in self._made:
            _run(["ip", "link", "add", other, "type", "bridge"])
            self._made.append(("link", other))
            _run(["ip", "link", "set", other, "up"])
        for i in side:
            _run(["ip", "link", "set", f"{self.prefix}{i}a", "master", other])

    def heal(self):
        """Every node back on the one bridge."""
        for i in range(self.nodes):
            _run(["ip", "link", "set", f"{self.prefix}{i}a", "master", self.bridge])

    def close(self):
        for kind, name in reversed(self._made):
            if kind == "netns":
                _run(["ip", "netns", "del", name], check=False)
            else:
                _run(["ip", "link", "del", name], check=False)
        self._made = []


def teardown_stale():
    """Removes namespaces and links left by runs that were killed (names gd<pid>...)."""
    names = _run(["ip", "netns", "list"], check=False).stdout.split()
    for name in names:
        if re.fullmatch(r"gd[0-9]+n[0-9]+", name):
            _run(["ip", "netns", "del", name], check=False)
    links = _run(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
    for line in links:
        m = re.match(r"[0-9]+: (gd[0-9]+(brp?|n[0-9]+a))[@:]", line)
        if m:
            _run(["ip", "link", "del", m.group(1)], check=False)
