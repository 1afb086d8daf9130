#!/usr/bin/python3
"""Large batches on Fashion-MNIST: does an eight times larger batch keep the accuracy of
the default one, trained for the same number of epochs (one eighth of the steps)?

    /usr/bin/python3 experiments/large_batch.py [--epochs 3] [--seeds 3]

The reference trainer's MLP and the PyTorch example's recipe (SGD, momentum 0.9, lr
0.05 at batch 64) against batch 512 with: SGD and the linear scaling rule (lr x 8),
SGD and the square-root rule (lr x sqrt 8), both with a linear warm-up over the first
tenth of the steps (Goyal et al. 2017); LARS and LAMB (gossipd.optim) with the same
warm-up. Prints one row per recipe: the test accuracy, mean and spread over the seeds,
and the gap to the small batch.
"""

import argparse
import math
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torch_fashion_mnist as fm  # noqa: E402
from gossipd.optim import LAMB, LARS  # noqa: E402
from gossipd.torch import warmup_lr  # noqa: E402

SMALL, LARGE = 64, 512


def recipes():
    scale = LARGE / SMALL
    return [
        ("SGD, batch 64 (the reference)", SMALL, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9), False),
        ("SGD, batch 512, linear rule", LARGE, lambda p: torch.optim.SGD(p, lr=0.05 * scale, momentum=0.9), True),
        ("SGD, batch 512, sqrt rule", LARGE,
         lambda p: torch.optim.SGD(p, lr=0.05 * math.sqrt(scale), momentum=0.9), True),
        ("LARS, batch 512", LARGE, lambda p: LARS(p, lr=1.0, momentum=0.9, weight_decay=5e-4, eta=0.01), True),
        ("LAMB, batch 512", LARGE, lambda p: LAMB(p, lr=0.02, weight_decay=0.01), True),
    ]


def train(make, batch, warm, steps, seed, data):
    train_x, train_y, test_x, test_y = data
    torch.manual_seed(seed)
    net = fm.Mlp()
    opt = make(net.parameters())
    base = [g["lr"] for g in opt.param_groups]
    gen = torch.Generator().manual_seed(seed)
    warmup = steps // 10 if warm else 0
    for step in range(steps):
        for g, lr in zip(opt.param_groups, base):
            g["lr"] = warmup_lr(lr, step, warmup)
        idx = torch.randint(len(train_x), (batch,), generator=gen)
        opt.zero_grad()
        F.cross_entropy(net(train_x[idx]), train_y[idx]).backward()
        opt.step()
    return fm.accuracy(net, test_x, test_y)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--data-dir", default=fm.DATA_DIR)
    o = p.parse_args(argv)
    torch.set_num_threads(1)
    train_x, train_y = fm.load(o.data_dir, "train")
    test_x, test_y = fm.load(o.data_dir, "test")
    data = (train_x, train_y, test_x, test_y)
    reference = None
    print(f"{o.epochs:g} epochs, {o.seeds} seeds; test accuracy on all 10,000 test images")
    for name, batch, make, warm in recipes():
        steps = int(o.epochs * len(train_x) / batch)
        accs = [train(make, batch, warm, steps, seed, data) for seed in range(o.seeds)]
        mean = statistics.mean(accs)
        spread = max(accs) - min(accs)
        reference = mean if reference is None else reference
        print(f"{name:32s} {steps:5d} steps  {100 * mean:6.2f} % (spread {100 * spread:.2f})  "
              f"{100 * (mean - reference):+6.2f} pt", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
