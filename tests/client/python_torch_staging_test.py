#!/usr/bin/python3
"""The staged path of gossipd.torch (a CUDA model's: gossipd/staging.py) on host memory
(issue 42): with attach_module(staging="always") a CPU module's tensors are re-pointed
into one flat replica outside the arena, which crosses to the arena in one copy each
way, and gradient buckets cross as ranges while backward goes on. Two real daemons on
loopback train the MLP with BatchNorm of python_torch_dtype_test.py on the real
Fashion-MNIST under local SGD, allreduce with buckets and allreduce without, once with
the tensors in the arena and once staged: each node's parameters and running
statistics are bit-identical between the two, the nodes end with one model, and the
model trains; every node starts from node 0's BatchNorm statistics. Also: a module on
two devices is refused, naming both. Exit code 77
where python3-torch is missing.

    /usr/bin/python3 tests/client/python_torch_staging_test.py --build build
"""

import ctypes
import pathlib
import sys
import threading
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import python_client_test as harness  # noqa: E402  the Cluster of real daemons
import python_torch_dtype_test as dtype_test  # noqa: E402  its MLP

SKIP = harness.SKIP
if not SKIP:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

STEPS = 120


def train(endpoint, node, data, staging, bucket_cap_mb, out, errors):
    try:
        import gossipd
        import gossipd.torch
        train_x, train_y, test_x, test_y = data
        net = dtype_test.mlp(10 + node, torch.float32)
        if node == 0:  # statistics of node 0's own, which every node must start from
            net[2].running_mean.fill_(0.25)
            net[2].running_var.fill_(2.0)
        client = gossipd.Client(endpoint, trainer=f"staging-{node}", timeout=60)
        attached = gossipd.torch.attach_module(client, net, staging=staging, bucket_cap_mb=bucket_cap_mb)
        started = (net[2].running_mean.clone(), net[2].running_var.clone())
        arena = [ctypes.addressof(b) for b in attached.model.buffers]
        if staging == "always":  # re-pointed into the flat replica, at the arena's offsets
            flat = attached.staging.flat
            where = [flat.data_ptr() + 4 * o for o in attached.model.offsets]
        else:
            where = arena
        tensors = list(net.parameters()) + [net[2].running_mean, net[2].running_var]
        pointed = [t.data_ptr() for t in tensors]
        gradients = attached.model.gradients
        # In gradient mode the parameters stay where they are (their slots carry gradients);
        # the buffers too with the arena (copied each step), not staged (in the flat replica).
        moved = [not gradients or (staging == "always" and i >= len(attached.params)) for i in range(len(where))]
        expect = [w if m else p for w, p, m in zip(where, pointed, moved)]
        opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9), attached)
        gen = torch.Generator().manual_seed(100 + node)
        shard = torch.arange(node, len(train_x), 2)
        step = attached.model.start_step
        while step < STEPS:
            idx = shard[torch.randint(len(shard), (64,), generator=gen)]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(train_x[idx]), train_y[idx]).backward()
            opt.step()
            step = opt.last.step
        opt.finish()
        net.eval()
        with torch.no_grad():
            acc = (net(test_x).argmax(1) == test_y).float().mean().item()
        out[node] = {"state": [t.detach().clone() for t in tensors], "accuracy": acc, "started": started,
                     "pointed": pointed, "expect": expect, "staged": attached.staged,
                     "buckets": None if attached.buckets is None else len(attached.buckets.ranges)}
        client.detach()
        client.close()
    except Exception as e:  # reported by the test, with its node
        import traceback
        errors.append(f"node {node}: {e}\n{traceback.format_exc()}")


@unittest.skipIf(SKIP, SKIP)
class StagedReplicas(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        cls.data = (train_x, train_y, test_x[:2000], test_y[:2000])

    def run_cluster(self, flags, staging, bucket_cap_mb=25):
        out, errors = {}, []
        with harness.Cluster(2, flags) as c:
            ts = [threading.Thread(target=train,
                                   args=(c.endpoint(i), i, self.data, staging, bucket_cap_mb, out, errors))
                  for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(240)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
        for node in (0, 1):
            mean, var = out[node]["started"]
            self.assertTrue(bool((mean == 0.25).all() and (var == 2.0).all()),
                            f"{flags} {staging}: node {node} starts from node 0's BatchNorm statistics")
            self.assertEqual(out[node]["staged"], staging == "always")
            self.assertEqual(out[node]["pointed"], out[node]["expect"], f"{staging}: where the tensors live")
        for a, b in zip(out[0]["state"], out[1]["state"]):
            self.assertTrue(torch.equal(a, b), f"{flags} {staging}: the nodes end with one model")
        return out

    def check(self, flags, bucket_cap_mb=25):
        arena = self.run_cluster(flags, "auto", bucket_cap_mb)
        staged = self.run_cluster(flags, "always", bucket_cap_mb)
        for node in (0, 1):
            for i, (a, b) in enumerate(zip(arena[node]["state"], staged[node]["state"])):
                self.assertTrue(torch.equal(a, b), f"{flags}: node {node}'s tensor {i} differs when staged "
                                f"(largest difference {(a - b).abs().max().item()})")
            self.assertEqual(arena[node]["buckets"], staged[node]["buckets"])
        print(f"\n{flags} buckets={staged[0]['buckets']}: accuracy {staged[0]['accuracy']:.4f} "
              "in the arena and staged alike", file=sys.stderr)
        # 120 steps of batch 64 with momentum: about 0.80 (0.10 is chance).
        self.assertGreater(staged[0]["accuracy"], 0.72)

    def test_local_sgd(self):
        self.check(["--strategy", "local-sgd", "--period", "4"])

    def test_allreduce_with_buckets(self):
        # 1 KiB buckets: the MLP in two, and the buffers in a third.
        self.check(["--strategy", "allreduce"], bucket_cap_mb=1 / 1024)

    def test_allreduce_without_buckets(self):
        self.check(["--strategy", "allreduce"], bucket_cap_mb=None)

    def test_two_devices_are_refused(self):
        import gossipd.torch
        net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2, device="meta"))
        with self.assertRaises(ValueError) as e:
            gossipd.torch.attach_module(client=None, module=net)
        self.assertIn("several devices", str(e.exception))
        self.assertIn("0.weight on cpu", str(e.exception))
        self.assertIn("1.weight on meta", str(e.exception))


if __name__ == "__main__":
    harness.main()
