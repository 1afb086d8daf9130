#!/usr/bin/python3
"""A torchvision model (ResNet-18 by default; Debian's python3-torchvision) on
Fashion-MNIST through gossipd, with BatchNorm's statistics averaged and every node
starting from node 0's weights. One process per node under the launcher:

    gossipctl run --id 0 --listen tcp://0.0.0.0:7000 --peer 1=tcp://host1:7000 \\
        --strategy allreduce -- /usr/bin/python3 examples/torchvision_fashion_mnist.py
    gossipctl run --id 1 --listen tcp://0.0.0.0:7000 --peer 0=tcp://host0:7000 \\
        --strategy allreduce -- /usr/bin/python3 examples/torchvision_fashion_mnist.py

The 28x28 grey images go in as they are: the model's first convolution takes one
channel, and its stem does not downsample (a 7x7 stride-2 convolution and a max-pool
would leave 7x7 pixels before the first block).
"""

import argparse
import os
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client" / "python"))  # a source checkout
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gossipd  # noqa: E402
import gossipd.torch  # noqa: E402
from cnn_fashion_mnist import load  # noqa: E402


def model(name):
    net = getattr(torchvision.models, name)(num_classes=10)
    if name.startswith("resnet"):
        net.conv1 = nn.Conv2d(1, 64, 3, padding=1, bias=False)
        net.maxpool = nn.Identity()
    elif name.startswith("mobilenet"):
        first = net.features[0][0]
        net.features[0][0] = nn.Conv2d(1, first.out_channels, 3, stride=1, padding=1, bias=False)
    else:
        raise SystemExit(f"--model {name}: this example adapts resnet* and mobilenet* to 28x28 grey images")
    return net


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet18")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--test-images", type=int, default=10000)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    o = p.parse_args()
    rank, world = int(os.environ.get("GOSSIP_RANK", 0)), int(os.environ.get("GOSSIP_WORLD_SIZE", 1))
    endpoint = os.environ.get("GOSSIP_ENDPOINT")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))

    train_x, train_y = load(o.data_dir, "train")
    test_x, test_y = load(o.data_dir, "test")
    test_x, test_y = test_x[:o.test_images], test_y[:o.test_images]
    shard = torch.arange(rank, len(train_x), world)
    net = model(o.model)
    opt = torch.optim.SGD(net.parameters(), lr=o.lr, momentum=0.9, weight_decay=5e-4)
    step = 0
    if endpoint:
        client = gossipd.Client(endpoint, trainer=f"{o.model}-{rank}")
        attached = gossipd.torch.attach_module(client, net)
        opt = gossipd.torch.DistributedOptimizer(opt, attached)
        step = attached.model.start_step
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=o.lr, total_steps=o.steps)
    gen = torch.Generator().manual_seed(rank)
    net.train()
    while step < o.steps:
        idx = shard[torch.randint(len(shard), (o.batch,), generator=gen)]
        loss = F.cross_entropy(net(train_x[idx]), train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step = opt.last.step if endpoint else step + 1
        if step % 50 == 0:
            print(f"node {rank} step {step} loss {loss.item():.3f}", file=sys.stderr)
    if endpoint:
        opt.finish()
    net.eval()
    with torch.no_grad():
        correct = sum((net(test_x[i:i + 500]).argmax(1) == test_y[i:i + 500]).sum().item()
                      for i in range(0, len(test_x), 500))
    print(f"node {rank} of {world}: {o.model} test accuracy {correct / len(test_x):.4f} after {o.steps} steps")


if __name__ == "__main__":
    main()
