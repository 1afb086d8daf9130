#!/usr/bin/python3
"""A CNN with BatchNorm on Fashion-MNIST, data-parallel through gossipd: the file to
copy. One process per node, started by the launcher, which starts the node's daemon
and hands the process its endpoint, rank and world size:

    gossipctl run --id 0 --listen tcp://0.0.0.0:7000 --peer 1=tcp://host1:7000 \\
        --strategy local-sgd --period 4 -- /usr/bin/python3 examples/cnn_fashion_mnist.py
    gossipctl run --id 1 --listen tcp://0.0.0.0:7000 --peer 0=tcp://host0:7000 \\
        --strategy local-sgd --period 4 -- /usr/bin/python3 examples/cnn_fashion_mnist.py

Any strategy works unchanged (--strategy allreduce averages the gradients at every
step, with backward overlapped). Without a launcher it trains alone.
"""

import argparse
import gzip
import os
import pathlib
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client" / "python"))  # a source checkout
import gossipd  # noqa: E402
import gossipd.torch  # noqa: E402


def load(data_dir, split):
    """Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist): images in [0, 1], labels."""
    def idx(name):
        with gzip.open(f"{data_dir}/{name}", "rb") as f:
            data = f.read()
        dims = data[3]
        shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
        return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).view(*shape)
    prefix = "train" if split == "train" else "t10k"
    images = idx(f"{prefix}-images-idx3-ubyte.gz").float().div_(255).unsqueeze(1)
    return images, idx(f"{prefix}-labels-idx1-ubyte.gz").long()


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--test-images", type=int, default=10000, help="evaluate on the first N test images")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    o = p.parse_args()
    rank, world = int(os.environ.get("GOSSIP_RANK", 0)), int(os.environ.get("GOSSIP_WORLD_SIZE", 1))
    endpoint = os.environ.get("GOSSIP_ENDPOINT")  # set by gossipctl run
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 1)))

    train_x, train_y = load(o.data_dir, "train")
    test_x, test_y = load(o.data_dir, "test")
    test_x, test_y = test_x[:o.test_images], test_y[:o.test_images]
    shard = torch.arange(rank, len(train_x), world)  # this node's share of the data
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=0.9, weight_decay=5e-4)
    step = 0
    if endpoint:
        client = gossipd.Client(endpoint, trainer=f"cnn-{rank}")
        attached = gossipd.torch.attach_module(client, model)  # every node starts from node 0's model
        opt = gossipd.torch.DistributedOptimizer(opt, attached)
        step = attached.model.start_step  # a restarted node goes on where its node is
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=o.steps)
    gen = torch.Generator().manual_seed(rank)
    model.train()
    while step < o.steps:
        idx = shard[torch.randint(len(shard), (o.batch,), generator=gen)]
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        step = opt.last.step if endpoint else step + 1
        if step % 200 == 0:
            print(f"node {rank} step {step} loss {loss.item():.3f}", file=sys.stderr)
    if endpoint:
        opt.finish()  # the last synchronization: every node ends with the same model
    model.eval()
    with torch.no_grad():
        correct = sum((model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
                      for i in range(0, len(test_x), 1000))
    print(f"node {rank} of {world}: test accuracy {correct / len(test_x):.4f} after {o.steps} steps "
          f"({len(test_x)} test images)")


if __name__ == "__main__":
    main()
