#!/usr/bin/python3
"""The Python client (client/python/gossipd) against real daemons: a 3-node cluster in
which nodes 0 and 1 run the C++ reference trainer and node 2 runs the PyTorch
example with the same MLP layout. After local SGD, and after gossip on a 3-node ring
(which averages all three), the three nodes hold equal parameters. Also: errors from
the daemon arrive as GossipError with its message, and the optimizer wrapper's
gradient mode (allreduce). Exit code 77 (ctest: skipped) only if Debian's
python3-torch cannot be imported.

    /usr/bin/python3 tests/client/python_client_test.py --build build
"""

import argparse
import array
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "tests"))

import ctest_unittest  # noqa: E402

try:
    import torch  # noqa: F401
    SKIP = ""
except ImportError as e:
    SKIP = f"python3-torch cannot be imported ({e}); scripts/install-deps.sh installs it"

MLP_NUMEL = 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    """n gossipd processes on loopback; everything is killed on exit."""

    def __init__(self, n, flags):
        self.n = n
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="gossip-py-"))
        self.ports = free_ports(n)
        self.procs = []
        self.logs_open = []
        for i in range(n):
            cmd = [str(BUILD / "bin" / "gossipd"), "--id", str(i), "--listen", self.peer(i), "--run-dir", str(self.dir)]
            for j in range(n):
                if j != i:
                    cmd += ["--peer", f"{j}={self.peer(j)}"]
            log = open(self.dir / f"gossipd-{i}.log", "w")
            self.logs_open.append(log)
            self.procs.append(subprocess.Popen(cmd + flags, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 10
        while not all((self.dir / f"gossipd-{i}.sock").exists() for i in range(n)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("the daemons did not start:\n" + self.logs())
            time.sleep(0.02)

    def peer(self, i):
        return f"tcp://127.0.0.1:{self.ports[i]}"

    def endpoint(self, i):
        return f"ipc://{self.dir}/gossipd-{i}.sock"

    def logs(self):
        return "\n".join((self.dir / f"gossipd-{i}.log").read_text()[-2000:] for i in range(self.n)
                         if (self.dir / f"gossipd-{i}.log").exists())

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in self.logs_open:
            log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def run_under_launcher(tmp, flags, argv_of, timeout):
    """Two nodes on loopback, each `gossipctl run FLAGS -- /usr/bin/python3 ARGV`, where
    argv_of(i) is node i's script and arguments; waits at most `timeout` s for each and
    kills what is left. Their exit codes and outputs (logs in `tmp`)."""
    ports = free_ports(2)
    procs = []
    for i in range(2):
        cmd = [str(BUILD / "bin" / "gossipctl"), "run", "--id", str(i), "--listen", f"tcp://127.0.0.1:{ports[i]}",
               "--peer", f"{1 - i}=tcp://127.0.0.1:{ports[1 - i]}"] + flags + ["--", "/usr/bin/python3"] + argv_of(i)
        log = open(f"{tmp}/node{i}.log", "w")
        procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        codes = [p.wait(timeout=timeout) for p, _ in procs]
    finally:
        for p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()
    return codes, [pathlib.Path(f"{tmp}/node{i}.log").read_text() for i in range(2)]


def read_model(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


@unittest.skipIf(SKIP, SKIP)
class MixedCluster(unittest.TestCase):
    def train(self, flags, steps):
        with Cluster(3, flags) as c:
            procs = []
            for i in (0, 1):
                procs.append(subprocess.Popen(
                    [str(BUILD / "bin" / "gossip-train"), "--endpoint", c.endpoint(i), "--node", str(i), "--nodes", "3",
                     "--steps", str(steps), "--eval-every", "0", "--save-model", str(c.dir / f"node-{i}.model")],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            procs.append(subprocess.Popen(
                [sys.executable, str(ROOT / "experiments" / "torch_fashion_mnist.py"), "--endpoint", c.endpoint(2),
                 "--node", "2", "--nodes", "3", "--model", "mlp", "--steps", str(steps),
                 "--save-model", str(c.dir / "node-2.model"), "--timeout", "60"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            outs = []
            for p in procs:
                try:
                    out, _ = p.communicate(timeout=240)
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    raise AssertionError("a trainer did not finish in 240 s:\n" + c.logs())
                outs.append(out)
            for i, (p, out) in enumerate(zip(procs, outs)):
                self.assertEqual(p.returncode, 0, f"trainer {i}:\n{out[-3000:]}\n{c.logs()}")
            return [read_model(c.dir / f"node-{i}.model") for i in range(3)], outs

    def assert_equal_models(self, models, tol):
        for m in models:
            self.assertEqual(len(m), MLP_NUMEL)
        worst = max(abs(a - b) for m in models[1:] for a, b in zip(models[0], m))
        self.assertLessEqual(worst, tol, f"the nodes' models differ by up to {worst}")
        # They trained: node 0's model, loaded into the example's MLP, classifies the real
        # test set well above chance (0.10); about 0.7 after these few dozen steps.
        sys.path.insert(0, str(ROOT / "experiments"))
        import torch_fashion_mnist as fm
        net = fm.Mlp()
        torch.nn.utils.vector_to_parameters(torch.tensor(models[0]), net.parameters())
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        accuracy = fm.accuracy(net, test_x, test_y)
        print(f"\nnode 0's model: test accuracy {accuracy:.4f}", file=sys.stderr)
        self.assertGreater(accuracy, 0.5)

    def test_local_sgd_leaves_all_three_equal(self):
        models, outs = self.train(["--strategy", "local-sgd", "--period", "4"], 40)
        self.assert_equal_models(models, 0.0)  # the ring all-reduce gives every node the same bits
        self.assertIn("after the final synchronization", outs[2])

    def test_gossip_on_three_nodes_averages_them_all(self):
        # A 3-node ring: each node's two neighbors are the others, with weight 1/3 each.
        models, _ = self.train(["--strategy", "gossip", "--topology", "ring", "--period", "1"], 30)
        self.assert_equal_models(models, 1e-5)


@unittest.skipIf(SKIP, SKIP)
class ClientApi(unittest.TestCase):
    def test_daemon_errors_are_exceptions_with_its_message(self):
        import gossipd
        import gossipd.torch
        with Cluster(1, []) as c:
            a = gossipd.Client(c.endpoint(0), trainer="first")
            a.attach([("w", 10), ("b", 2)])
            b = gossipd.Client(c.endpoint(0), trainer="second")
            with self.assertRaises(gossipd.GossipError) as e:
                b.attach([("w", 10), ("b", 3)])
            self.assertIn("b", e.exception.message)
            self.assertEqual(e.exception.code, gossipd.EREFUSED)
            a.detach()
            a.close()
            b.close()
        with self.assertRaises(gossipd.GossipError) as e:
            gossipd.Client("ipc:///nonexistent/gossipd-0.sock", timeout=1)
        self.assertIn("/nonexistent", str(e.exception))

    def test_a_module_lives_in_the_arena_and_a_second_trainer_sees_it(self):
        import gossipd
        import gossipd.torch
        with Cluster(1, ["--period", "1"]) as c:
            torch.manual_seed(0)
            m1 = torch.nn.Linear(4, 3)
            first = gossipd.torch.attach_module(gossipd.Client(c.endpoint(0), trainer="one"), m1)
            self.assertFalse(first.model.initialized)
            m2 = torch.nn.Linear(4, 3)
            second = gossipd.torch.attach_module(gossipd.Client(c.endpoint(0), trainer="two", local_rank=1), m2)
            self.assertTrue(second.model.initialized)
            # The second trainer took the node's model; both point into the arena.
            self.assertTrue(torch.equal(m1.weight, m2.weight))
            self.assertEqual(m1.weight.data_ptr(), first.arena[0].data_ptr())
            self.assertEqual(m2.weight.data_ptr(), second.arena[0].data_ptr())
            start = m2.weight.detach().clone()
            with torch.no_grad():
                m1.weight.add_(1.0)
            # Each trainer has its own replica; a step averages the node's trainers, so the
            # second sees half of the first's change (a node of one: no peer to wait for).
            errors = []

            def step(attached):
                try:
                    attached.step()
                except Exception as e:  # surfaced below
                    errors.append(e)
            ts = [threading.Thread(target=step, args=(a,)) for a in (first, second)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            self.assertEqual(errors, [])
            self.assertTrue(torch.allclose(m2.weight, start + 0.5), f"{m2.weight} after {start}")
            self.assertTrue(torch.equal(m1.weight, m2.weight))

    def test_allreduce_averages_gradients_and_the_optimizer_steps_on_the_mean(self):
        import threading
        import gossipd
        import gossipd.torch
        with Cluster(2, ["--strategy", "allreduce", "--period", "1"]) as c:
            nets, opts = [], []
            for i in range(2):
                torch.manual_seed(0)  # the same init on both nodes
                net = torch.nn.Linear(3, 1, bias=False)
                att = gossipd.torch.attach_module(gossipd.Client(c.endpoint(i), trainer=f"t{i}"), net)
                self.assertTrue(att.gradient_mode)
                nets.append(net)
                opts.append(gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1.0), att))
            before = nets[0].weight.detach().clone()
            errors = []

            def run(i):
                try:
                    opts[i].zero_grad()
                    nets[i].weight.grad = torch.full((1, 3), float(i * 2 + 1))  # 1 and 3: the mean is 2
                    opts[i].step()
                except Exception as e:  # surfaced below
                    errors.append(e)
            ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            self.assertEqual(errors, [])
            for net in nets:
                self.assertTrue(torch.allclose(net.weight.detach(), before - 2.0), net.weight)

    def test_the_closures_loss_reaches_the_daemons_divergence_watch(self):
        import gossipd
        import gossipd.torch
        with Cluster(1, ["--period", "1", "--on-divergence", "stop"]) as c:
            torch.manual_seed(0)
            net = torch.nn.Linear(3, 1)
            att = gossipd.torch.attach_module(gossipd.Client(c.endpoint(0), trainer="t"), net)
            opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.01), att)
            x = torch.ones(4, 3)
            losses = [2.0, 1.5, float("nan")]

            def closure(value):
                def run():
                    opt.zero_grad()
                    loss = net(x).sum() * 0 + value  # the loss the trainer computes, a tensor
                    loss.backward()
                    return loss
                return run
            for value in losses[:2]:
                self.assertEqual(float(opt.step(closure(value))), value)
            # The NaN goes out with this step's sync; the daemon, under --on-divergence
            # stop, fails that sync and every later one, naming the loss.
            with self.assertRaises(gossipd.GossipError) as e:
                opt.step(closure(losses[2]))
            self.assertIn("the trainers' training loss is nan", e.exception.message)
            log = (c.dir / "gossipd-0.log").read_text()
            self.assertIn("step 3: the run diverged: the trainers' training loss is nan", log)

    def test_lr_rules(self):
        import gossipd.torch
        self.assertEqual(gossipd.torch.scale_lr(0.1, 8), 0.8)
        self.assertAlmostEqual(gossipd.torch.scale_lr(0.1, 4, "sqrt"), 0.2)
        self.assertEqual(gossipd.torch.scale_lr(0.1, 4, "none"), 0.1)
        with self.assertRaises(ValueError):
            gossipd.torch.scale_lr(0.1, 4, "cubic")
        self.assertAlmostEqual(gossipd.torch.warmup_lr(1.0, 0, 10), 0.1)
        self.assertAlmostEqual(gossipd.torch.warmup_lr(1.0, 5, 10), 0.55)
        self.assertEqual(gossipd.torch.warmup_lr(1.0, 10, 10), 1.0)


def main():
    """The command line of every Python client test: --build DIR, then unittest's own
    arguments; exit code 77 (skipped) without torch."""
    global BUILD
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD))
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build)
    os.environ.setdefault("GOSSIP_LIBRARY", str(BUILD / "lib" / "libgossip.so"))
    if SKIP:
        print(f"skipped: {SKIP}")
        sys.exit(77)
    ctest_unittest.run([sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
