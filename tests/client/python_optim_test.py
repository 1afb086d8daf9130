#!/usr/bin/python3
"""gossipd.optim's LARS and LAMB (issue 22, part 7): one step of each against the
papers' formulas worked out by hand, the exclusion of biases and norms, the contract
of a torch optimizer, and a short large-batch run on the real Fashion-MNIST. Exit code
77 where python3-torch is missing.

    /usr/bin/python3 tests/client/python_optim_test.py
"""

import math
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

try:
    import torch
    import torch.nn.functional as F
    from gossipd.optim import LAMB, LARS
    SKIP = ""
except ImportError as e:
    SKIP = f"python3-torch cannot be imported ({e}); scripts/install-deps.sh installs it"


def norm(values):
    return math.sqrt(sum(v * v for v in values))


@unittest.skipIf(SKIP, SKIP)
class LargeBatchOptimizers(unittest.TestCase):
    def test_lars_step_is_the_papers(self):
        w = torch.tensor([[3.0, 4.0]], requires_grad=True)   # ||w|| = 5
        b = torch.tensor([1.0], requires_grad=True)
        w.grad = torch.tensor([[0.6, 0.8]])                    # ||g|| = 1
        b.grad = torch.tensor([0.5])
        opt = LARS([w, b], lr=2.0, momentum=0.9, weight_decay=0.1, eta=0.01)
        opt.step()
        ratio = 0.01 * 5 / (1 + 0.1 * 5)
        expected = [3 - 2 * ratio * (0.6 + 0.1 * 3), 4 - 2 * ratio * (0.8 + 0.1 * 4)]
        self.assertTrue(torch.allclose(w.detach(), torch.tensor([expected]), atol=1e-6), w)
        # The bias: no weight decay, no trust ratio: plain SGD's first step.
        self.assertAlmostEqual(b.item(), 1 - 2 * 0.5, places=6)
        # Second step: momentum carries the first update.
        first = torch.tensor([[3.0, 4.0]]) - w.detach()
        w.grad = torch.tensor([[0.6, 0.8]])
        w_norm = norm(w.detach().flatten().tolist())
        ratio2 = 0.01 * w_norm / (1 + 0.1 * w_norm)
        update2 = 2 * ratio2 * (torch.tensor([[0.6, 0.8]]) + 0.1 * w.detach())
        before = w.detach().clone()
        opt.step()
        self.assertTrue(torch.allclose(before - w.detach(), 0.9 * first + update2, atol=1e-6))

    def test_lamb_step_is_the_papers(self):
        w = torch.tensor([[3.0, 4.0]], requires_grad=True)
        w.grad = torch.tensor([[0.6, -0.8]])
        opt = LAMB([w], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
        opt.step()
        # First step: bias-corrected moments are g and g^2, so Adam's step is sign(g).
        adam = [0.6 / (0.6 + 1e-6), -0.8 / (0.8 + 1e-6)]
        u = [adam[0] + 0.01 * 3, adam[1] + 0.01 * 4]
        ratio = 5 / norm(u)
        expected = [3 - 0.1 * ratio * u[0], 4 - 0.1 * ratio * u[1]]
        self.assertTrue(torch.allclose(w.detach(), torch.tensor([expected]), atol=1e-5), w)

    def test_every_tensor_adapted_when_asked(self):
        b = torch.tensor([2.0], requires_grad=True)
        b.grad = torch.tensor([1.0])
        LARS([b], lr=1.0, momentum=0.0, eta=0.5, exclude=lambda p: False).step()
        self.assertAlmostEqual(b.item(), 2 - 0.5 * 2 / 1 * 1, places=6)

    def test_a_torch_optimizer(self):
        w = torch.zeros(3, 3, requires_grad=True)
        for opt in (LARS([w], lr=1.0), LAMB([w], lr=0.01)):
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
            loss = opt.step(lambda: (w.sum() ** 2))
            self.assertTrue(torch.is_tensor(loss))
            sched.step()
            self.assertAlmostEqual(opt.param_groups[0]["lr"], opt.defaults["lr"] / 2)
            opt.load_state_dict(opt.state_dict())
        with self.assertRaises(ValueError):
            LARS([w], lr=-1)
        with self.assertRaises(ValueError):
            LAMB([w], lr=0.1, betas=(1.0, 0.9))

    def test_large_batches_train_on_fashion_mnist(self):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        for name, make in (("LARS", lambda p: LARS(p, lr=1.0, momentum=0.9, weight_decay=5e-4, eta=0.01)),
                           ("LAMB", lambda p: LAMB(p, lr=0.02, weight_decay=0.01))):
            torch.manual_seed(0)
            net = fm.Mlp()
            opt = make(net.parameters())
            gen = torch.Generator().manual_seed(0)
            for _ in range(60):  # batch 512, eight times the default
                idx = torch.randint(len(train_x), (512,), generator=gen)
                opt.zero_grad()
                F.cross_entropy(net(train_x[idx]), train_y[idx]).backward()
                opt.step()
            acc = fm.accuracy(net, test_x[:2000], test_y[:2000])
            self.assertGreater(acc, 0.74, f"{name} reached {acc:.3f} in 60 steps of 512")


if __name__ == "__main__":
    if SKIP:
        print(f"skipped: {SKIP}")
        sys.exit(77)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/: ctest_unittest
    import ctest_unittest
    ctest_unittest.run(sys.argv)
