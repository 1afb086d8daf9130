#!/usr/bin/python3
"""gossipd.torch as a PyTorch user meets it (issue 22, parts 1 and 2): DistributedOptimizer
is a torch.optim.Optimizer (an LR scheduler takes it, closures and set_to_none work,
state_dict round-trips, add_param_group is refused), and BatchNorm's running
statistics are averaged with the parameters; the PyTorch example runs under
`gossipctl run`. Real daemons on loopback, on the real Fashion-MNIST; exit code 77
where python3-torch is missing.

    /usr/bin/python3 tests/client/python_torch_optimizer_test.py --build build
"""

import pathlib
import sys
import threading
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

import python_client_test as harness  # noqa: E402  the Cluster of real daemons

SKIP = harness.SKIP
if not SKIP:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

STEPS = 160
INIT_LOCK = threading.Lock()


def bn_net():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 48), nn.BatchNorm1d(48), nn.ReLU(), nn.Linear(48, 10))


def train(endpoint, node, nodes, seed, data, out, errors):
    """One node's trainer: a BatchNorm MLP, SGD with momentum under a cosine schedule,
    every other step through a closure."""
    try:
        import gossipd
        import gossipd.torch
        train_x, train_y, test_x, test_y = data
        with INIT_LOCK:  # the global generator: one thread's seed and draws at a time
            torch.manual_seed(seed)
            net = bn_net()
        client = gossipd.Client(endpoint, trainer=f"bn-{node}", timeout=60)
        attached = gossipd.torch.attach_module(client, net)
        opt = gossipd.torch.DistributedOptimizer(
            torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), attached)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
        gen = torch.Generator().manual_seed(100 + node)
        shard = torch.arange(node, len(train_x), nodes)
        step = attached.model.start_step
        losses = []
        while step < STEPS:
            idx = shard[torch.randint(len(shard), (32,), generator=gen)]

            def closure():
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(net(train_x[idx]), train_y[idx])
                loss.backward()
                return loss

            if step % 2:
                loss = opt.step(closure)
            else:
                loss = closure()
                opt.step()
            losses.append(float(loss))
            sched.step()
            step = opt.last.step
        opt.finish()
        net.eval()
        with torch.no_grad():
            acc = (net(test_x).argmax(1) == test_y).float().mean().item()
        out[node] = {
            "params": [p.detach().clone() for p in net.parameters()],
            "mean": net[2].running_mean.clone(), "var": net[2].running_var.clone(),
            "lr": opt.optimizer.param_groups[0]["lr"], "sched_lr": sched.get_last_lr()[0],
            "accuracy": acc, "first": sum(losses[:20]) / 20, "last": sum(losses[-20:]) / 20,
            "opt": opt,
        }
        client.detach()
        client.close()
    except Exception as e:  # reported by the test, with its node
        import traceback
        errors.append(f"node {node}: {e}\n{traceback.format_exc()}")


@unittest.skipIf(SKIP, SKIP)
class TorchOptimizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        cls.data = (train_x, train_y, test_x[:2000], test_y[:2000])

    def run_cluster(self, flags, seeds):
        out, errors = {}, []
        with harness.Cluster(2, flags) as c:
            ts = [threading.Thread(target=train, args=(c.endpoint(i), i, 2, seeds[i], self.data, out, errors))
                  for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(240)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
        return out

    def check_equal_and_trained(self, out):
        for a, b in zip(out[0]["params"], out[1]["params"]):
            self.assertTrue(torch.allclose(a, b, atol=1e-6), "the parameters differ after the last sync")
        # The running statistics are averaged like the parameters, and really moved
        # away from BatchNorm's start (0 and 1).
        self.assertTrue(torch.allclose(out[0]["mean"], out[1]["mean"], atol=1e-6), (out[0]["mean"], out[1]["mean"]))
        self.assertTrue(torch.allclose(out[0]["var"], out[1]["var"], atol=1e-6))
        self.assertGreater(out[0]["mean"].abs().max().item(), 0.01)
        self.assertGreater((out[0]["var"] - 1).abs().max().item(), 0.01)
        for node in (0, 1):
            r = out[node]
            # The scheduler drove the inner optimizer's learning rate down the cosine.
            self.assertAlmostEqual(r["lr"], r["sched_lr"], places=9)
            self.assertLess(r["lr"], 0.01)
            self.assertLess(r["last"], r["first"] * 0.7, f"node {node} did not learn: {r['first']} -> {r['last']}")
            self.assertGreater(r["accuracy"], 0.72, f"node {node}")

    def test_local_sgd_with_batchnorm_and_a_scheduler(self):
        out = self.run_cluster(["--strategy", "local-sgd", "--period", "4"], seeds=[1, 2])
        self.check_equal_and_trained(out)

    def test_allreduce_with_batchnorm_and_a_scheduler(self):
        # Synchronous SGD: gradients are averaged, and the buffer slots carry the running
        # statistics, averaged at every step.
        out = self.run_cluster(["--strategy", "allreduce"], seeds=[1, 1])
        self.check_equal_and_trained(out)

    def test_the_optimizer_contract(self):
        import gossipd
        import gossipd.torch
        with harness.Cluster(1, ["--strategy", "local-sgd", "--period", "1000"]) as c:
            net = bn_net()
            client = gossipd.Client(c.endpoint(0), trainer="contract", timeout=30)
            attached = gossipd.torch.attach_module(client, net)
            names = [n for n, _ in client_layout(attached)]
            self.assertIn("buffer:2.running_mean", names)
            self.assertNotIn("buffer:2.num_batches_tracked", names)
            inner = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
            opt = gossipd.torch.DistributedOptimizer(inner, attached)
            self.assertIsInstance(opt, torch.optim.Optimizer)
            self.assertIs(opt.param_groups[0], inner.param_groups[0], "one set of groups")
            with self.assertRaisesRegex(ValueError, "layout is fixed"):
                opt.add_param_group({"params": [torch.zeros(3, requires_grad=True)]})
            with self.assertRaises(TypeError):
                gossipd.torch.DistributedOptimizer(object(), attached)
            x = torch.randn(8, 1, 28, 28)
            y = torch.randint(10, (8,))
            loss = opt.step(lambda: (opt.zero_grad(), F.cross_entropy(net(x), y).backward(),
                                     F.cross_entropy(net(x), y))[2])
            self.assertTrue(torch.is_tensor(loss), "step(closure) returns the closure's loss")
            self.assertEqual(opt.last.step, 1)
            opt.zero_grad(set_to_none=True)
            self.assertTrue(all(p.grad is None for p in net.parameters()))
            state = opt.state_dict()
            self.assertEqual(state["gossipd"]["step"], 1)
            self.assertIn("momentum_buffer", state["optimizer"]["state"][0])
            opt.load_state_dict(state)
            self.assertIs(opt.param_groups, inner.param_groups, "still shared after a load")
            self.assertIs(opt.state, inner.state)
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            opt.step(lambda: F.cross_entropy(net(x), y))
            sched.step()
            self.assertAlmostEqual(inner.param_groups[0]["lr"], 0.05, msg="the scheduler reaches the inner optimizer")
            client.detach()
            client.close()


@unittest.skipIf(SKIP, SKIP)
class GradScalerPattern(unittest.TestCase):
    """synchronize() before the scaler: a node whose gradients overflow does not stall
    the others, and its Inf never reaches the network (its daemon sends zeros)."""

    def test_an_overflowing_node_is_dropped_not_waited_for(self):
        import gossipd
        import gossipd.torch
        nets, opts, out, errors = [], [], {}, []
        with harness.Cluster(2, ["--strategy", "allreduce"]) as c:
            for i in range(2):
                torch.manual_seed(0)
                net = nn.Linear(3, 1, bias=False)
                att = gossipd.torch.attach_module(gossipd.Client(c.endpoint(i), trainer=f"amp-{i}"), net)
                nets.append(net)
                opts.append(gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1.0), att))
            before = nets[0].weight.detach().clone()

            def run(i):
                try:
                    opt, net = opts[i], nets[i]
                    opt.zero_grad()
                    net.weight.grad = torch.full((1, 3), 4.0) if i == 0 else torch.tensor([[1.0, float("inf"), 2.0]])
                    opt.synchronize()
                    out[i] = net.weight.grad.clone()
                    # What GradScaler.step does: the inner step only where the gradients are finite.
                    with opt.skip_synchronize():
                        if torch.isfinite(net.weight.grad).all():
                            opt.step()
                except Exception as e:  # surfaced below
                    errors.append(e)
            ts = [threading.Thread(target=run, args=(i,)) for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            self.assertFalse(any(t.is_alive() for t in ts), "a node waited for the other")
            self.assertEqual(errors, [])
            logs = c.logs()
        # Node 1 contributed zeros: both hold node 0's gradient halved, finite, and stepped alike.
        for i in range(2):
            self.assertTrue(torch.equal(out[i], torch.full((1, 3), 2.0)), out[i])
            self.assertTrue(torch.equal(nets[i].weight.detach(), before - 2.0))
        self.assertIn("NaN/Inf", logs)


@unittest.skipIf(SKIP, SKIP)
class StartUp(unittest.TestCase):
    """Every replica starts from node 0's module, whatever each trainer's seed."""

    def attach_all(self, flags, nodes=3, initial="node0", node0_delay=0.0):
        import time
        import gossipd
        import gossipd.torch
        inits, after, errors = {}, {}, []

        def attach(c, i):
            try:
                if i == 0:
                    time.sleep(node0_delay)  # the others wait for node 0, asking again
                with INIT_LOCK:
                    torch.manual_seed(10 + i)
                    net = bn_net()
                inits[i] = [t.detach().clone() for t in net.state_dict().values()]
                client = gossipd.Client(c.endpoint(i), trainer=f"start-{i}", timeout=60)
                attached = gossipd.torch.attach_module(client, net, initial=initial)
                after[i] = [t.detach().clone() for t in net.state_dict().values()]
                # The arena holds what the module holds (CPU: they are the same memory).
                if not attached.gradient_mode:
                    for p, a in zip(attached.params, attached.arena):
                        self.assertEqual(p.data_ptr(), a.data_ptr())
                client.detach()
                client.close()
            except Exception as e:  # reported by the test, with its node
                errors.append(f"node {i}: {e!r}")
        with harness.Cluster(nodes, flags) as c:
            ts = [threading.Thread(target=attach, args=(c, i)) for i in range(nodes)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
            logs = c.logs()
        return inits, after, logs

    def assert_all_start_from_node0(self, inits, after, nodes):
        for i in range(nodes):
            for got, want in zip(after[i], inits[0]):
                self.assertTrue(torch.equal(got, want), f"node {i} did not start from node 0's model")
        for i in range(1, nodes):  # and node 0's really differed from theirs
            self.assertFalse(all(torch.equal(a, b) for a, b in zip(inits[i], inits[0])))

    def test_local_sgd_replicas_start_from_node_0_which_starts_last(self):
        inits, after, logs = self.attach_all(["--strategy", "local-sgd", "--period", "4"], node0_delay=3.0)
        self.assert_all_start_from_node0(inits, after, 3)
        self.assertIn("took node 0's initial model", logs)

    def test_allreduce_parameters_start_from_node_0_too(self):
        # Gradient mode: the arena carries gradients, and the parameters pass through it once.
        inits, after, _ = self.attach_all(["--strategy", "allreduce"], nodes=2)
        self.assert_all_start_from_node0(inits, after, 2)

    def test_gossip_replicas_start_from_node_0(self):
        inits, after, _ = self.attach_all(["--strategy", "gossip", "--topology", "ring"])
        self.assert_all_start_from_node0(inits, after, 3)

    def test_initial_own_keeps_each_trainers_model(self):
        inits, after, _ = self.attach_all(["--strategy", "local-sgd", "--period", "4"], nodes=2, initial="own")
        for i in range(2):
            for got, want in zip(after[i], inits[i]):
                self.assertTrue(torch.equal(got, want))

    def test_trainers_of_one_node_start_alike_and_a_late_one_is_refused_under_allreduce(self):
        # allreduce: the parameters live in the trainers (the arena carries gradients).
        # Two trainers that attach before the first step both start from node 0's
        # model; one that attaches after it cannot, and is told why.
        import gossipd
        import gossipd.torch
        with harness.Cluster(1, ["--strategy", "allreduce"]) as c:
            nets, opts = [], []
            for rank in range(2):
                torch.manual_seed(3 + rank)
                net = bn_net()
                if rank == 0:
                    initial = [t.detach().clone() for t in net.parameters()]
                att = gossipd.torch.attach_module(
                    gossipd.Client(c.endpoint(0), trainer=f"t{rank}", local_rank=rank, timeout=30), net)
                nets.append(net)
                opts.append(gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), att))
            for got, want in zip(nets[1].parameters(), initial):
                self.assertTrue(torch.equal(got.detach(), want), "the second trainer started from node 0's model")
            errors = []

            def step(i):
                try:
                    opts[i].zero_grad()
                    nets[i](torch.randn(8, 1, 28, 28)).sum().backward()
                    opts[i].step()
                except Exception as e:  # surfaced below
                    errors.append(e)
            ts = [threading.Thread(target=step, args=(i,)) for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            self.assertEqual(errors, [])
            late = gossipd.Client(c.endpoint(0), trainer="late", local_rank=2, timeout=30)
            with self.assertRaisesRegex(gossipd.GossipError, "attach every trainer before the first step"):
                gossipd.torch.attach_module(late, bn_net())
            late.close()

    def test_without_node_0_the_start_fails_with_the_reason(self):
        import gossipd
        import gossipd.torch
        with harness.Cluster(2, ["--strategy", "local-sgd", "--round-timeout", "2"]) as c:
            client = gossipd.Client(c.endpoint(1), trainer="alone", timeout=30)
            with self.assertRaisesRegex(gossipd.GossipError, "node 0 did not send its initial model"):
                gossipd.torch.attach_module(client, bn_net())
            client.close()


@unittest.skipIf(SKIP, SKIP)
class ExampleUnderTheLauncher(unittest.TestCase):
    def test_two_gossipctl_runs_train_the_pytorch_example(self):
        """`gossipctl run -- python3 experiments/torch_fashion_mnist.py`: the example takes
        its endpoint and shard from the launcher's variables."""
        import json
        import tempfile
        with tempfile.TemporaryDirectory(prefix="gossip-example-") as tmp:
            codes, outs = harness.run_under_launcher(
                tmp, ["--strategy", "local-sgd", "--period", "4"],
                lambda i: [str(ROOT / "experiments" / "torch_fashion_mnist.py"), "--model", "mlp", "--steps", "200",
                           "--result", f"{tmp}/r{i}.json"], 180)
            logs = "\n".join(out[-3000:] for out in outs)
            self.assertEqual(codes, [0, 0], logs)
            results = [json.loads(pathlib.Path(f"{tmp}/r{i}.json").read_text()) for i in range(2)]
            self.assertEqual([r["node"] for r in results], [0, 1], "the shards came from GOSSIP_RANK")
            self.assertEqual(results[0]["accuracy_average"], results[1]["accuracy_average"])
            self.assertGreater(results[0]["accuracy_average"], 0.75, results)


def client_layout(attached):
    return [(name, None) for name in attached.model.names]


if __name__ == "__main__":
    harness.main()
