#!/usr/bin/python3
"""Step time of synchronous SGD (--strategy allreduce) with the gradients handed to
gossipd in buckets as backward produces them (wait-free backpropagation) against all
at once after backward, the anchor: N daemons and N PyTorch trainers (one process
each, one thread each) training a CNN of 1.8M parameters on Fashion-MNIST, on loopback
or on the rate-limited testbed of network namespaces (experiments/testbed.py, root).

    /usr/bin/python3 bench/overlap_bench.py [--nodes 4] [--steps 30] [--batch 32]
                                            [--testbed loopback|netns] [--rate 100mbit] [--build build]

Prints one JSON line per mode and the ratio; the step time is the mean over every
node of its steps after the first --warmup.
"""

import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT / "client" / "python"))


def trainer(endpoint, node, nodes, steps, warmup, buckets, batch, out):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import gossipd
    import gossipd.torch
    import torch_fashion_mnist as fm
    torch.set_num_threads(1)
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(1, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(64, 128, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(128 * 7 * 7, 256), nn.ReLU(), nn.Linear(256, 10))
    x_all, y_all = fm.load(fm.DATA_DIR, "train")
    client = gossipd.Client(endpoint, trainer=f"overlap-{node}", timeout=300)
    attached = gossipd.torch.attach_module(client, net, bucket_cap_mb=25 if buckets else None)
    opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9), attached)
    gen = torch.Generator().manual_seed(node)
    times, backward = [], []
    for step in range(steps):
        idx = torch.randint(len(x_all), (batch,), generator=gen)
        t0 = time.monotonic()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x_all[idx].unsqueeze(1)), y_all[idx])
        b0 = time.monotonic()
        loss.backward()
        b1 = time.monotonic()
        opt.step()
        if step >= warmup:
            times.append(time.monotonic() - t0)
            backward.append(b1 - b0)
    pathlib.Path(out).write_text(json.dumps({"step_s": sum(times) / len(times),
                                             "backward_s": sum(backward) / len(backward),
                                             "buckets": len(attached.buckets.ranges) if attached.buckets else 1}))
    client.detach()
    client.close()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_mode(opts, buckets, hosts, netns):
    build = pathlib.Path(opts.build).resolve()
    work = pathlib.Path(tempfile.mkdtemp(prefix="gossip-overlap-"))
    ports = free_ports(opts.nodes) if netns is None else [7100 + i for i in range(opts.nodes)]
    daemons, trainers = [], []
    try:
        for i in range(opts.nodes):
            peer = lambda j: f"tcp://{hosts[j]}:{ports[j]}"  # noqa: E731
            cmd = [str(build / "bin" / "gossipd"), "--id", str(i), "--listen", peer(i), "--run-dir", str(work),
                   "--strategy", "allreduce", "--log-level", "warn"]
            for j in range(opts.nodes):
                if j != i:
                    cmd += ["--peer", f"{j}={peer(j)}"]
            if netns is not None:
                cmd = ["ip", "netns", "exec", f"{netns}{i}"] + cmd
            daemons.append(subprocess.Popen(cmd, stdout=open(work / f"gossipd-{i}.log", "w"),
                                            stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 20
        while not all((work / f"gossipd-{i}.sock").exists() for i in range(opts.nodes)):
            if time.monotonic() > deadline:
                raise RuntimeError("the daemons did not start: see " + str(work))
            time.sleep(0.05)
        env = dict(os.environ, GOSSIP_LIBRARY=str(build / "lib" / "libgossip.so"))
        for i in range(opts.nodes):
            trainers.append(subprocess.Popen(
                [sys.executable, __file__, "--trainer", f"ipc://{work}/gossipd-{i}.sock", str(i), str(opts.nodes),
                 str(opts.steps), str(opts.warmup), "1" if buckets else "0", str(opts.batch),
                 str(work / f"t{i}.json")], env=env))
        for t in trainers:
            if t.wait(timeout=1800) != 0:
                raise RuntimeError(f"a trainer failed; logs in {work}")
        rows = [json.loads((work / f"t{i}.json").read_text()) for i in range(opts.nodes)]
        shutil.rmtree(work, ignore_errors=True)
        return {"mode": "buckets" if buckets else "after-backward", "buckets": rows[0]["buckets"],
                "step_s": sum(r["step_s"] for r in rows) / len(rows),
                "backward_s": sum(r["backward_s"] for r in rows) / len(rows)}
    finally:
        for p in trainers:
            if p.poll() is None:
                p.kill()
        for p in daemons:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="per trainer: more compute per byte sent")
    p.add_argument("--testbed", choices=["loopback", "netns"], default="loopback")
    p.add_argument("--rate", default="100mbit")
    p.add_argument("--build", default=str(ROOT / "build"))
    opts = p.parse_args()
    hosts, netns, bed = ["127.0.0.1"] * opts.nodes, None, None
    if opts.testbed == "netns":
        import testbed as tb
        tb.check_rights()
        tb.teardown_stale()
        bed = tb.Testbed(opts.nodes, opts.rate).__enter__()
        hosts, netns = bed.hosts(), bed.prefix
    label = opts.testbed if bed is None else f"netns-{opts.rate}"
    try:
        results = {}
        for buckets in (False, True):
            r = run_mode(opts, buckets, hosts, netns)
            r.update({"testbed": label, "nodes": opts.nodes, "steps": opts.steps, "batch": opts.batch})
            print(json.dumps(r), flush=True)
            results[buckets] = r
        ratio = results[False]["step_s"] / results[True]["step_s"]
        print(f"{label}, {opts.nodes} nodes, batch {opts.batch}: step {results[False]['step_s'] * 1000:.0f} ms after backward, "
              f"{results[True]['step_s'] * 1000:.0f} ms with {results[True]['buckets']} buckets: "
              f"{ratio:.2f}x", flush=True)
    finally:
        if bed is not None:
            bed.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trainer":
        a = sys.argv[2:]
        trainer(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), a[5] == "1", int(a[6]), a[7])
    else:
        main()
