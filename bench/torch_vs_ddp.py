#!/usr/bin/python3
"""What a PyTorch user pays for gossipd against what they would pick instead: two
trainers (one process each, started together, sharing the machine's GPU or its cores)
train a torchvision ResNet on synthetic batches, and each row times their steps:

    plain            no communication at all (the floor)
    ddp-gloo         torch DistributedDataParallel, gloo backend (CUDA tensors too)
    ddp-nccl         the same on NCCL, where each rank has a GPU of its own
    allreduce        gossipd --strategy allreduce (gradient buckets during backward)
    local-sgd        gossipd --strategy local-sgd --period 8
    local-sgd-topk   the same with the top-k chain (topk:0.01+quant:2+idx:auto+ef)

Each gossipd row runs two real daemons on loopback, each trainer attached to its own
through gossipd.torch (attach_module + DistributedOptimizer), as the README shows.
A step is forward, backward and the optimizer's step (with the synchronization it
implies), timed to the end of its GPU work; the mean and median are over every step
after --warmup of both trainers. At the end each trainer hashes its parameters and
buffers (after DistributedOptimizer.finish()): "one model" says whether the two
parameter hashes are equal (bit-identical models), and whether the buffers are too.

    /usr/bin/python3 bench/torch_vs_ddp.py [--model resnet18|resnet50|small] [--batch 128]
        [--steps 40] [--warmup 8] [--rows plain,ddp-gloo,...] [--device auto|cpu|cuda]
        [--staging auto|always] [--build build] [--json FILE] [--check]

--check exits 1 when a row fails, does not train (its parameters did not move or its
loss did not fall), or must end with one model (ddp, allreduce, local SGD without a
codec; gossipd's with the same BatchNorm statistics too) and does not: the suite's
smoke runs use it with --model small. The ratios are this run's; the command and the machine go with them.
"""

import argparse
import hashlib
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

from churn import free_ports, stop_processes  # noqa: E402  ports below the ephemeral range

CHAIN = "topk:0.01+quant:2+idx:auto+ef"
ROWS = {
    "plain": None,
    "ddp-gloo": None,
    "ddp-nccl": None,
    "allreduce": ["--strategy", "allreduce"],
    "local-sgd": ["--strategy", "local-sgd", "--period", "8"],
    "local-sgd-topk": ["--strategy", "local-sgd", "--period", "8", "--codec", CHAIN],
}
ONE_MODEL = {"ddp-gloo", "ddp-nccl", "allreduce", "local-sgd"}  # --check: these must


def build_model(name):
    import torch.nn as nn
    if name == "small":  # the smoke run's: BatchNorm and convolutions, 0.1M parameters
        return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    import torchvision
    return getattr(torchvision.models, name)(num_classes=10)


def digest(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().view(-1).float().numpy().tobytes())
    return h.hexdigest()[:16]


def trainer(a):
    """One rank of one row; writes its JSON to a.out."""
    import torch
    import torch.nn.functional as F
    rank, row = a.rank, a.row
    if a.device == "cuda":
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", rank % gpus if row == "ddp-nccl" else 0)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)  # one initial model everywhere (DDP and gossipd broadcast rank 0's anyway)
    net = build_model(a.model).to(device)
    opt_of = lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9)  # noqa: E731
    attached, client = None, None
    if row in ("ddp-gloo", "ddp-nccl"):
        import torch.distributed as dist
        dist.init_process_group("gloo" if row == "ddp-gloo" else "nccl", init_method=f"file://{a.store}",
                                rank=rank, world_size=2)
        net = torch.nn.parallel.DistributedDataParallel(net, device_ids=[device] if device.type == "cuda" else None)
        opt = opt_of(net.parameters())
    elif row == "plain":
        opt = opt_of(net.parameters())
    else:
        import gossipd
        import gossipd.torch
        client = gossipd.Client(a.endpoint, trainer=f"bench-{rank}", timeout=600)
        attached = gossipd.torch.attach_module(client, net, staging=a.staging)
        opt = gossipd.torch.DistributedOptimizer(opt_of(net.parameters()), attached)
    gen = torch.Generator(device=device).manual_seed(100 + rank)
    x = torch.randn(a.batch, 3, 32, 32, device=device, generator=gen)
    y = torch.randint(10, (a.batch,), device=device, generator=gen)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    module = net.module if hasattr(net, "module") else net
    initial = digest(module.parameters())
    times, losses = [], []
    for step in range(a.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        sync()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        if step in (0, a.steps - 1):
            losses.append(loss.item())
    if attached is not None:
        opt.finish()
        sync()
    result = {"times": times, "digest": digest(module.parameters()), "initial": initial, "losses": losses,
              "buffers": digest(b for b in module.buffers() if b.is_floating_point()),
              "params": sum(p.numel() for p in module.parameters()),
              "staged": bool(attached is not None and attached.staged),
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "torch": torch.__version__}
    if client is not None:
        client.detach()
        client.close()
    pathlib.Path(a.out).write_text(json.dumps(result))


def run_row(opts, row, work):
    """Both ranks of one row (and their daemons); returns the row's summary."""
    build = pathlib.Path(opts.build).resolve()
    daemons, trainers = [], []
    logs = []
    try:
        if ROWS[row] is not None:
            ports = free_ports(2)
            for i in range(2):
                cmd = [str(build / "bin" / "gossipd"), "--id", str(i), "--listen", f"tcp://127.0.0.1:{ports[i]}",
                       "--peer", f"{1 - i}=tcp://127.0.0.1:{ports[1 - i]}", "--run-dir", str(work),
                       "--log-level", "warn", "--round-timeout", "300"] + ROWS[row]
                log = open(work / f"{row}-gossipd-{i}.log", "w")
                logs.append(log)
                daemons.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 30
            while not all((work / f"gossipd-{i}.sock").exists() for i in range(2)):
                if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                    raise RuntimeError(f"{row}: the daemons did not start; logs in {work}")
                time.sleep(0.05)
        env = dict(os.environ, GOSSIP_LIBRARY=str(build / "lib" / "libgossip.so"), PYTHONUNBUFFERED="1")
        store = work / f"{row}.store"
        for i in range(2):
            cmd = [sys.executable, __file__, "--trainer", "--row", row, "--rank", str(i), "--model", opts.model,
                   "--batch", str(opts.batch), "--steps", str(opts.steps), "--warmup", str(opts.warmup),
                   "--device", opts.device, "--threads", str(opts.threads), "--store", str(store),
                   "--staging", opts.staging,
                   "--endpoint", f"ipc://{work}/gossipd-{i}.sock", "--out", str(work / f"{row}-{i}.json")]
            log = open(work / f"{row}-trainer-{i}.log", "w")
            logs.append(log)
            trainers.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + opts.timeout
        for t in trainers:
            t.wait(timeout=max(1, deadline - time.monotonic()))
        failed = [i for i, t in enumerate(trainers) if t.returncode != 0]
        if failed:
            tail = (work / f"{row}-trainer-{failed[0]}.log").read_text()[-1500:]
            return {"row": row, "error": f"trainer {failed[0]} exited {trainers[failed[0]].returncode}: {tail}"}
        ranks = [json.loads((work / f"{row}-{i}.json").read_text()) for i in range(2)]
    except subprocess.TimeoutExpired:
        return {"row": row, "error": f"over {opts.timeout} s; logs in {work}"}
    finally:
        stop_processes((trainers, daemons))
        for log in logs:
            log.close()
        for i in range(2):
            (work / f"gossipd-{i}.sock").unlink(missing_ok=True)
    times = ranks[0]["times"] + ranks[1]["times"]
    return {"row": row, "mean_ms": 1e3 * statistics.fmean(times), "median_ms": 1e3 * statistics.median(times),
            "one_model": ranks[0]["digest"] == ranks[1]["digest"],
            "same_buffers": ranks[0]["buffers"] == ranks[1]["buffers"], "params": ranks[0]["params"],
            # It trained: every rank's parameters moved and its loss on its batch fell.
            "trained": all(r["digest"] != r["initial"] and r["losses"][-1] < r["losses"][0] for r in ranks),
            "staged": ranks[0]["staged"], "gpu": ranks[0]["gpu"], "torch": ranks[0]["torch"]}


def machine(opts, rows):
    gpu = next((r["gpu"] for r in rows if r.get("gpu")), None)
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    where = gpu if opts.device == "cuda" else f"CPU tensors, {opts.threads} threads per trainer"
    return f"{where}; {os.cpu_count()} cores ({cpu})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18", help="resnet18, resnet50 (torchvision) or small")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=8)
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--threads", type=int, default=0, help="CPU: torch threads per trainer (0: half the cores)")
    p.add_argument("--staging", choices=["auto", "always"], default="auto",
                   help="gossipd rows: attach_module's staging (always: CPU tensors take the CUDA path too)")
    p.add_argument("--build", default=str(ROOT / "build"))
    p.add_argument("--timeout", type=float, default=1200, help="seconds per row")
    p.add_argument("--json", help="also write the rows here")
    p.add_argument("--check", action="store_true", help="exit 1 if a row failed or lost its one model")
    opts = p.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_vs_ddp: PyTorch cannot be imported ({e}); scripts/install-deps.sh installs it", file=sys.stderr)
        return 77  # ctest's skip
    if opts.device == "auto":
        opts.device = "cuda" if torch.cuda.is_available() else "cpu"
    # Two cores left to the daemons (gloo's communication runs inside the trainers).
    opts.threads = opts.threads or max(1, ((os.cpu_count() or 2) - 2) // 2)
    rows = [r for r in opts.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        p.error(f"unknown row(s) {unknown}; the rows: {', '.join(ROWS)}")
    results, skipped = [], []
    work = pathlib.Path(tempfile.mkdtemp(prefix="gossip-vs-ddp-"))
    for row in rows:
        if row == "ddp-nccl" and (opts.device != "cuda" or torch.cuda.device_count() < 2):
            skipped.append(f"ddp-nccl: needs a GPU per rank ({torch.cuda.device_count()} here); NCCL refuses "
                           "two ranks on one GPU")
            continue
        r = run_row(opts, row, work)
        print(json.dumps(r), flush=True)
        results.append(r)
    ok = [r for r in results if "error" not in r]
    base = {r["row"]: r["mean_ms"] for r in ok}
    print(f"\n{opts.model}, batch {opts.batch}, {opts.steps} steps ({opts.warmup} warm-up), two trainers, "
          f"staging {opts.staging}; "
          f"{machine(opts, ok)}; torch {torch.__version__}")
    print("\n| row | mean ms/step | median | vs plain | vs ddp-gloo | one model |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        if "error" in r:
            print(f"| {r['row']} | failed | | | | |")
            continue
        ratio = lambda anchor: f"{r['mean_ms'] / base[anchor]:.2f}x" if anchor in base else "-"  # noqa: E731
        # DDP broadcasts rank 0's buffers before each forward, which then moves them again:
        # BatchNorm's running statistics differ at the end by design.
        one = "-" if r["row"] == "plain" else ("no" if not r["one_model"] else
                                               "yes" if r["same_buffers"] else "parameters; not BN's statistics")
        print(f"| {r['row']} | {r['mean_ms']:.1f} | {r['median_ms']:.1f} | {ratio('plain')} | {ratio('ddp-gloo')} "
              f"| {one} |")
    for s in skipped:
        print(f"skipped {s}")
    if opts.json:
        pathlib.Path(opts.json).write_text(json.dumps({"rows": results, "skipped": skipped,
                                                       "machine": machine(opts, ok)}, indent=1))
    gossipd = {r for r in ROWS if ROWS[r] is not None}
    bad = [r["row"] for r in results
           if "error" in r or not r["trained"] or (r["row"] in ONE_MODEL and not r["one_model"])
           or (r["row"] in ONE_MODEL & gossipd and not r["same_buffers"])]
    if not results:
        bad = ["(no row ran)"]
    if bad:
        print(f"torch_vs_ddp: failed or not one model: {', '.join(bad)}; logs in {work}", file=sys.stderr)
        return 1 if opts.check else 0
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if "--trainer" in sys.argv:
        tp = argparse.ArgumentParser()
        tp.add_argument("--trainer", action="store_true")
        for name in ("row", "model", "device", "store", "endpoint", "out", "staging"):
            tp.add_argument(f"--{name}")
        for name in ("rank", "batch", "steps", "warmup", "threads"):
            tp.add_argument(f"--{name}", type=int)
        trainer(tp.parse_args())
    else:
        sys.exit(main())
