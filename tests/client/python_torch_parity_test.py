#!/usr/bin/python3
"""Issue 22's first "done when": a model with BatchNorm, under OneCycleLR (local SGD) and
CosineAnnealingLR (allreduce), every forward pass in torch.autocast(bfloat16) on the
CPU, trained by two real daemons on loopback on the real Fashion-MNIST, reaches within
1 pt of one process that trains the same recipe on the same total batch (the union
of the two nodes' batches, step for step), and ends with the same parameters and
running statistics on both nodes. Every replica starts from node 0's model (each
trainer seeds differently). Exit code 77 where python3-torch is missing.

    /usr/bin/python3 tests/client/python_torch_parity_test.py --build build
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

NODES = 2
BATCH = 32      # per node; the single process takes NODES * BATCH
STEPS = 500     # 32,000 images, half an epoch for the two nodes together
LR = 0.1
INIT_LOCK = threading.Lock()


def bn_net():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.BatchNorm1d(128), nn.ReLU(),
                         nn.Linear(128, 10))


def schedule(opt, kind):
    if kind == "onecycle":
        return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=LR, total_steps=STEPS)
    return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)


def batches(train_len, node):
    """Node `node`'s batches, step after step: the same indices in both runs."""
    gen = torch.Generator().manual_seed(100 + node)
    shard = torch.arange(node, train_len, NODES)
    while True:
        yield shard[torch.randint(len(shard), (BATCH,), generator=gen)]


def loss_of(net, x, y):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(x)
    if logits.dtype != torch.bfloat16:  # autocast really ran the layers in bf16
        raise AssertionError(f"autocast gave {logits.dtype} logits")
    return F.cross_entropy(logits.float(), y)


def evaluate(net, x, y):
    net.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return (net(x).argmax(1) == y).float().mean().item()


def single_process(data, sched_kind):
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(1)  # node 0's seed: the model the cluster starts from
    net = bn_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    sched = schedule(opt, sched_kind)
    streams = [batches(len(train_x), i) for i in range(NODES)]
    for _ in range(STEPS):
        idx = torch.cat([next(s) for s in streams])
        opt.zero_grad(set_to_none=True)
        loss_of(net, train_x[idx], train_y[idx]).backward()
        opt.step()
        sched.step()
    return evaluate(net, test_x, test_y)


def node(endpoint, i, data, sched_kind, out, errors):
    try:
        import gossipd
        import gossipd.torch
        train_x, train_y, test_x, test_y = data
        with INIT_LOCK:
            torch.manual_seed(1 + i)  # a seed of its own: the start-up gives it node 0's model
            net = bn_net()
        client = gossipd.Client(endpoint, trainer=f"parity-{i}", timeout=120)
        attached = gossipd.torch.attach_module(client, net)
        opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9),
                                                 attached)
        sched = schedule(opt, sched_kind)
        stream = batches(len(train_x), i)
        step = attached.model.start_step
        while step < STEPS:
            idx = next(stream)
            opt.zero_grad(set_to_none=True)
            loss_of(net, train_x[idx], train_y[idx]).backward()
            opt.step()
            sched.step()
            step = opt.last.step
        opt.finish()
        out[i] = {"params": [p.detach().clone() for p in net.parameters()],
                  "mean": net[2].running_mean.clone(), "var": net[2].running_var.clone(),
                  "accuracy": evaluate(net, test_x, test_y)}
        client.detach()
        client.close()
    except Exception as e:  # reported by the test, with its node
        import traceback
        errors.append(f"node {i}: {e}\n{traceback.format_exc()}")


@unittest.skipIf(SKIP, SKIP)
class TorchMatchesASingleProcess(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        cls.data = (train_x, train_y, test_x, test_y)

    def run_and_compare(self, flags, sched_kind):
        reference = single_process(self.data, sched_kind)
        out, errors = {}, []
        with harness.Cluster(NODES, flags) as c:
            ts = [threading.Thread(target=node, args=(c.endpoint(i), i, self.data, sched_kind, out, errors))
                  for i in range(NODES)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(400)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
        print(f"\n{flags} {sched_kind}: single process {reference:.4f}, nodes "
              f"{[round(out[i]['accuracy'], 4) for i in range(NODES)]}", file=sys.stderr)
        for a, b in zip(out[0]["params"], out[1]["params"]):
            self.assertTrue(torch.allclose(a, b, atol=1e-6), "the parameters differ after the last sync")
        self.assertTrue(torch.allclose(out[0]["mean"], out[1]["mean"], atol=1e-6))
        self.assertTrue(torch.allclose(out[0]["var"], out[1]["var"], atol=1e-6))
        self.assertGreater(out[0]["mean"].abs().max().item(), 0.01, "the running mean never moved")
        self.assertGreater(reference, 0.80, "the single-process recipe itself does not train")
        for i in range(NODES):
            self.assertGreater(out[i]["accuracy"], reference - 0.01,
                               f"node {i}: {out[i]['accuracy']:.4f} against the single process's {reference:.4f}")

    def test_local_sgd_under_onecycle_with_bf16_autocast(self):
        self.run_and_compare(["--strategy", "local-sgd", "--period", "4"], "onecycle")

    def test_allreduce_under_cosine_with_bf16_autocast(self):
        self.run_and_compare(["--strategy", "allreduce"], "cosine")


if __name__ == "__main__":
    harness.main()
