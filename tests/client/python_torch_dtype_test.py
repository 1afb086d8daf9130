#!/usr/bin/python3
"""gossipd.torch with bfloat16 and float16 models (issue 22, part 3): a module.to(bfloat16)
model lives in a bf16 arena (half the bytes of fp32, zero copy on the CPU), trains on the
real Fashion-MNIST under local SGD and under allreduce with gradient buckets, and ends
with one model on every node; a float16 module's replicas hold the fp32 mean rounded to
float16 (torch on the CPU cannot train in float16, so that one is averaged, not
trained); a model of two dtypes is refused with both. Real daemons on loopback; exit
code 77 where python3-torch is missing.

    /usr/bin/python3 tests/client/python_torch_dtype_test.py --build build
"""

import pathlib
import sys
import threading
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

STEPS = 300
INIT_LOCK = threading.Lock()


def mlp(seed, dtype, device="cpu"):
    with INIT_LOCK:  # the global generator: one thread's seed and draws at a time
        torch.manual_seed(seed)
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.BatchNorm1d(64), nn.ReLU(),
                             nn.Linear(64, 10)).to(device=device, dtype=dtype)


def train(endpoint, node, nodes, data, out, errors, dtype=None, device="cpu"):
    """One node's trainer: an MLP with BatchNorm (bf16 by default), plain SGD, batch 64.
    Also python_torch_cuda_test.py's, with a CUDA model."""
    try:
        import time
        import gossipd
        import gossipd.torch
        dtype = dtype or torch.bfloat16
        train_x, train_y, test_x, test_y = (t.to(device) for t in data)
        net = mlp(10 + node, dtype, device)
        client = gossipd.Client(endpoint, trainer=f"mlp-{node}", timeout=60)
        attached = gossipd.torch.attach_module(client, net)
        arena_bytes = sum(memoryview(b).nbytes for b in attached.model.buffers)
        in_arena = all(p.data_ptr() == a.data_ptr() for p, a in zip(net.parameters(), attached.arena))
        opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), attached)
        gen = torch.Generator().manual_seed(100 + node)
        shard = torch.arange(node, len(train_x), nodes)
        step = attached.model.start_step
        t0 = time.monotonic()
        while step < STEPS:
            idx = shard[torch.randint(len(shard), (64,), generator=gen)].to(device)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(train_x[idx].to(dtype)).float(), train_y[idx]).backward()
            opt.step()
            step = opt.last.step
        opt.finish()
        seconds_per_step = (time.monotonic() - t0) / STEPS
        net.eval()
        with torch.no_grad():
            acc = (net(test_x.to(dtype)).argmax(1) == test_y).float().mean().item()
        out[node] = {"params": [p.detach().cpu().clone() for p in net.parameters()],
                     "mean": net[2].running_mean.cpu().clone(), "accuracy": acc, "dtype": attached.model.dtype,
                     "seconds_per_step": seconds_per_step,
                     "arena_bytes": arena_bytes, "in_arena": in_arena,
                     "numel": sum(p.numel() for p in net.parameters()) + 2 * 64,
                     "buckets": attached.buckets is not None}
        client.detach()
        client.close()
    except Exception as e:  # reported by the test, with its node
        import traceback
        errors.append(f"node {node}: {e}\n{traceback.format_exc()}")


@unittest.skipIf(SKIP, SKIP)
class SixteenBitModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        cls.data = (train_x, train_y, test_x[:2000], test_y[:2000])

    def run_cluster(self, flags):
        out, errors = {}, []
        with harness.Cluster(2, flags) as c:
            ts = [threading.Thread(target=train, args=(c.endpoint(i), i, 2, self.data, out, errors))
                  for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(240)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
            self.assertIn("parameters (bf16)", c.logs())
        for node in (0, 1):
            r = out[node]
            self.assertEqual(r["dtype"], "bf16")
            # 2 bytes an element (each tensor padded to 64 bytes at most).
            self.assertLess(r["arena_bytes"], 2 * r["numel"] + 64 * 8, r)
            self.assertGreater(r["accuracy"], 0.75, f"node {node}: {r['accuracy']}")
        for a, b in zip(out[0]["params"], out[1]["params"]):
            self.assertEqual(a.dtype, torch.bfloat16)
            self.assertTrue(torch.equal(a, b), "the nodes end with one model")
        self.assertTrue(torch.equal(out[0]["mean"], out[1]["mean"]), "and one BatchNorm running mean")
        print(f"\n{flags}: accuracies {[round(out[i]['accuracy'], 4) for i in (0, 1)]}", file=sys.stderr)
        return out

    def test_local_sgd_trains_a_bf16_model_in_place(self):
        out = self.run_cluster(["--strategy", "local-sgd", "--period", "4"])
        self.assertTrue(out[0]["in_arena"], "the parameters are the arena's bf16 elements (no copy)")

    def test_allreduce_with_buckets_trains_a_bf16_model(self):
        out = self.run_cluster(["--strategy", "allreduce"])
        self.assertTrue(out[0]["buckets"], "gradients went in buckets as backward produced them")

    def test_a_float16_model_holds_the_rounded_mean(self):
        import gossipd
        import gossipd.torch
        with harness.Cluster(2, ["--strategy", "local-sgd", "--period", "1"]) as c:
            nets, atts, errors = [], [], []
            for i in range(2):
                net = nn.Linear(40, 3).to(torch.float16)
                with torch.no_grad():
                    # Values whose mean needs rounding: 1/3 steps apart, in float16.
                    net.weight.copy_(torch.arange(120, dtype=torch.float32).view(3, 40) / (3 + i))
                    net.bias.fill_(i + 0.1)
                nets.append(net)
                atts.append(gossipd.torch.attach_module(gossipd.Client(c.endpoint(i), trainer=f"f16-{i}"), net,
                                                        initial="own"))
            means = [(a.detach().float() + b.detach().float()) / 2
                     for a, b in zip(nets[0].parameters(), nets[1].parameters())]
            expected = [m.to(torch.float16) for m in means]
            ts = [threading.Thread(target=lambda a=a: errors.append(a.finish() is None)) for a in atts]
            for t in ts:
                t.start()
            for t in ts:
                t.join(60)
            self.assertEqual(errors, [False, False], "both synchronized:\n" + c.logs())
            self.assertEqual(atts[0].model.dtype, "f16")
            for net in nets:
                for p, e in zip(net.parameters(), expected):
                    self.assertEqual(p.dtype, torch.float16)
                    self.assertTrue(torch.equal(p.detach(), e), (p, e))
            self.assertGreater((means[0] != expected[0].float()).sum().item(), 10, "the means needed rounding")
            for a in atts:
                a.client.detach()
                a.client.close()

    def test_a_model_of_two_dtypes_is_refused_with_both(self):
        import gossipd
        import gossipd.torch
        with harness.Cluster(1, []) as c:
            net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
            net[1].to(torch.bfloat16)
            client = gossipd.Client(c.endpoint(0), trainer="mixed")
            with self.assertRaisesRegex(ValueError, r"parameter 1.weight is torch.bfloat16 and 0.weight "
                                                    r"torch.float32: one dtype for the whole model"):
                gossipd.torch.attach_module(client, net)
            with self.assertRaisesRegex(ValueError, "float32, bfloat16 or float16"):
                gossipd.torch.attach_module(client, nn.Linear(2, 2).to(torch.float64))
            with self.assertRaisesRegex(gossipd.GossipError, "dtype 'f64'"):
                client.attach([("w", 4)], dtype="f64")
            client.close()


if __name__ == "__main__":
    harness.main()
