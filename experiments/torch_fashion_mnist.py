#!/usr/bin/python3
"""A PyTorch trainer on Fashion-MNIST attached to its node's gossipd (Debian's python3-torch).

    /usr/bin/python3 experiments/torch_fashion_mnist.py --endpoint ipc:///tmp/run/gossipd-2.sock \\
        --node 2 --nodes 3 --steps 600
    /usr/bin/python3 experiments/torch_fashion_mnist.py --standalone --steps 600   # no daemon

--model cnn (default) is a small CNN; --model mlp is the reference trainer's MLP
784-256-128-10 with the same tensor names and shapes (fc1.weight [256, 784], ...), so
that it can share a cluster with gossip-train (a node refuses a trainer whose layout
differs). The end of a run follows gossip-train's protocol: a final synchronization
unless the last step was one, then --save-model writes the flat float32 parameters
in layout order (the format gossip-train --evaluate and gossipctl read).
"""

import argparse
import gzip
import json
import os
import pathlib
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "client" / "python"))
import gossipd  # noqa: E402
import gossipd.torch  # noqa: E402

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for an IDX header")
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    if magic >> 8 != 0x08 or dims not in (1, 3):
        raise ValueError(f"{path}: not an unsigned-byte IDX file (magic {magic:#x})")
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    body = data[4 + 4 * dims:]
    count = 1
    for s in shape:
        count *= s
    if len(body) != count:
        raise ValueError(f"{path}: header promises {count} bytes, file has {len(body)}")
    return torch.frombuffer(bytearray(body), dtype=torch.uint8).view(*shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").float().div_(255.0)
    labels = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").long()
    return images, labels


class Mlp(nn.Module):
    """gossip-train's model and layout."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        x = x.view(x.shape[0], -1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = x.view(x.shape[0], 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def accuracy(model, images, labels):
    model.eval()
    with torch.no_grad():
        correct = sum((model(images[i:i + 2000]).argmax(1) == labels[i:i + 2000]).sum().item()
                      for i in range(0, len(images), 2000))
    model.train()
    return correct / len(images)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Under `gossipctl run` the launcher's variables give the endpoint and the shard.
    env = os.environ
    p.add_argument("--endpoint", default=env.get("GOSSIP_ENDPOINT"),
                   help="the node's daemon: ipc://RUN_DIR/gossipd-ID.sock (default: $GOSSIP_ENDPOINT)")
    p.add_argument("--standalone", action="store_true", help="train without a daemon")
    p.add_argument("--node", type=int, default=int(env.get("GOSSIP_RANK", 0)),
                   help="this trainer's shard (default: $GOSSIP_RANK)")
    p.add_argument("--nodes", type=int, default=int(env.get("GOSSIP_WORLD_SIZE", 1)),
                   help="shards (default: $GOSSIP_WORLD_SIZE)")
    p.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=0, help="evaluate every E steps (0: at the end only)")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--save-model", help="write the final parameters (flat float32, layout order) here")
    p.add_argument("--result", help="write {node, steps, accuracy, ...} as one JSON line here")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds any wait for the daemon may take")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    o = p.parse_args(argv)
    if not o.standalone and not o.endpoint:
        p.error("--endpoint is required (or --standalone)")
    if not 0 <= o.node < o.nodes:
        p.error(f"--node {o.node} is not in 0..{o.nodes - 1}")

    torch.set_num_threads(o.threads)
    torch.manual_seed(o.seed)  # the same init on every node
    train_x, train_y = load(o.data_dir, "train")
    test_x, test_y = load(o.data_dir, "test")
    # This node's shard of a seeded permutation (iid).
    perm = torch.randperm(len(train_x), generator=torch.Generator().manual_seed(o.seed))
    shard = perm[o.node::o.nodes]
    model = Mlp() if o.model == "mlp" else SmallCnn()
    opt = torch.optim.SGD(model.parameters(), lr=o.lr, momentum=o.momentum)

    client = None
    if not o.standalone:
        client = gossipd.Client(o.endpoint, trainer=f"torch-{o.node}", timeout=o.timeout)
        attached = gossipd.torch.attach_module(client, model)
        opt = gossipd.torch.DistributedOptimizer(opt, attached)
        print(f"node {o.node}/{o.nodes}: attached {len(attached.params)} tensors, strategy "
              f"{attached.model.strategy}, arena initialized: {attached.model.initialized}", file=sys.stderr)

    gen = torch.Generator().manual_seed(o.seed * 1000 + o.node)
    t0 = time.monotonic()
    last = None
    # The node's step, not a loop counter: a late or restarted trainer starts at the
    # node's, and an elastic ring that takes the node back moves it to the members'.
    step = attached.model.start_step if client else 0
    while step < o.steps:
        idx = shard[torch.randint(len(shard), (o.batch,), generator=gen)]
        loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        last = opt.last if client else None
        step = last.step if client else step + 1
        if o.eval_every and step % o.eval_every == 0:
            sent = f", sent {last.payload_sent / 1e6:.1f} MB" if client else ""
            print(f"step {step} loss {loss.item():.4f} test accuracy {accuracy(model, test_x, test_y):.4f}{sent}",
                  file=sys.stderr)
    local = accuracy(model, test_x, test_y)
    if client:
        last = opt.finish()
    final = accuracy(model, test_x, test_y)
    wall = time.monotonic() - t0
    print(f"node {o.node}: {o.steps} steps in {wall:.1f} s, test accuracy {local:.4f} own model, "
          f"{final:.4f} after the final synchronization", file=sys.stderr)
    if o.save_model:
        with open(o.save_model, "wb") as f:
            for param in model.parameters():
                f.write(param.detach().cpu().contiguous().numpy().astype("<f4").tobytes())
    if o.result:
        result = {"node": o.node, "steps": o.steps, "accuracy_local": local, "accuracy_average": final,
                  "wall_seconds": wall, "payload_sent": last.payload_sent if client and last else 0}
        pathlib.Path(o.result).write_text(json.dumps(result) + "\n")
    if client:
        client.detach()
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
