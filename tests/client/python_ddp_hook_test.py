#!/usr/bin/python3
"""Issue 22's DDP communication hook: gossipd.torch.comm_hook under a real
DistributedDataParallel (two processes, a gloo group on loopback, two gossipd
daemons): without a codec it gives the gradients of DDP's default hook (allclose,
step after step), with fp16 the same within fp16's rounding, and with top-k (10%) +
error feedback, which changes what each step sends, it trains on the real
Fashion-MNIST to within 1 pt of DDP's own all-reduce. Exit code 77 where python3-torch
is missing.

    /usr/bin/python3 tests/client/python_ddp_hook_test.py --build build
"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

import python_client_test as harness  # noqa: E402  the Cluster of real daemons

SKIP = harness.SKIP

WORLD = 2
BATCH = 32
STEPS = 1500  # top-k + EF needs the longer run to catch up (README: 1% and 3% fall short)
LR = 0.1


# How far the hook's gradient may be from DDP's, per mode of "compare": exact but for
# the order of the sum without a codec; with fp16 each rank's value is rounded to 11
# significant bits before the mean, so an element may be off by about 2^-11 of the
# tensor's largest (a wrong bucket, a sum for a mean or a stale step is off by ~100 %).
# Per mode: rtol, and atol as an absolute part plus a part of the tensor's max |g|.
TOLERANCE = {"compare": (1e-5, 1e-7, 0.0), "compare-fp16": (2e-3, 0.0, 1e-3)}


def worker(rank, pg_port, endpoint, mode, out_path):
    """One DDP rank (a process of its own, as DDP wants)."""
    import datetime
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    import gossipd
    import gossipd.torch
    import torch_fashion_mnist as fm

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{pg_port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    train_x, train_y = fm.load(fm.DATA_DIR, "train")
    gen = torch.Generator().manual_seed(100 + rank)
    shard = torch.arange(rank, len(train_x), WORLD)

    def net():
        torch.manual_seed(1 + rank)  # DDP broadcasts rank 0's at construction
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))

    def batch():
        idx = shard[torch.randint(len(shard), (BATCH,), generator=gen)]
        return train_x[idx], train_y[idx]

    def with_hook(model):
        ddp = DDP(model, bucket_cap_mb=0.1)  # several buckets for a model of 100k parameters
        client = gossipd.Client(endpoint, trainer=f"ddp-{rank}", timeout=60)
        ddp.register_comm_hook(gossipd.torch.CommHookState(client, model), gossipd.torch.comm_hook)
        return ddp

    result = {}
    if mode in TOLERANCE:
        rtol, atol, atol_of_max = TOLERANCE[mode]
        a = DDP(net(), bucket_cap_mb=0.1)  # DDP's default hook over gloo
        b = with_hook(net())
        opt_a = torch.optim.SGD(a.parameters(), lr=LR)
        worst = 0.0
        for _ in range(20):
            # Both at DDP's parameters, so that each step compares one gradient, not
            # two runs that a lossy codec lets drift apart.
            b.module.load_state_dict(a.module.state_dict())
            x, y = batch()
            for model in (a, b):
                model.zero_grad()
                F.cross_entropy(model(x), y).backward()
            for pa, pb in zip(a.parameters(), b.parameters()):
                bound = atol + atol_of_max * pa.grad.abs().max().item()
                if not torch.allclose(pa.grad, pb.grad, rtol=rtol, atol=bound):
                    raise AssertionError(f"rank {rank} ({mode}): the hook's gradients differ from DDP's by "
                                         f"{(pa.grad - pb.grad).abs().max().item()}")
                worst = max(worst, (pa.grad - pb.grad).abs().max().item())
            opt_a.step()
        result["worst"] = worst
    else:
        model = net()
        ddp = DDP(model, bucket_cap_mb=0.1) if mode == "ddp" else with_hook(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=0.9)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS)
        for _ in range(STEPS):
            x, y = batch()
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
            sched.step()
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        with torch.no_grad():
            result["accuracy"] = (model(test_x).argmax(1) == test_y).float().mean().item()
        result["params"] = float(sum(p.double().sum() for p in model.parameters()))
    dist.destroy_process_group()
    pathlib.Path(out_path).write_text(json.dumps(result))


@unittest.skipIf(SKIP, SKIP)
class DdpCommHook(unittest.TestCase):
    def run_ranks(self, mode, flags=None):
        """Both ranks of `mode`, with a gossipd cluster of `flags` when given."""
        cluster = harness.Cluster(WORLD, flags) if flags is not None else None
        try:
            with tempfile.TemporaryDirectory(prefix="gossip-ddp-") as tmp:
                port = harness.free_ports(1)[0]
                env = dict(os.environ, GOSSIP_LIBRARY=str(harness.BUILD / "lib" / "libgossip.so"))
                procs = []
                for rank in range(WORLD):
                    endpoint = cluster.endpoint(rank) if cluster else ""
                    procs.append(subprocess.Popen(
                        [sys.executable, __file__, "--worker", str(rank), str(port), endpoint, mode,
                         f"{tmp}/{rank}.json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                        text=True))
                outs = []
                for p in procs:
                    try:
                        outs.append(p.communicate(timeout=240)[0])
                    except subprocess.TimeoutExpired:
                        for q in procs:
                            q.kill()
                        self.fail(f"a rank hung in mode {mode}:\n" + (cluster.logs() if cluster else ""))
                for rank, (p, out) in enumerate(zip(procs, outs)):
                    self.assertEqual(p.returncode, 0, f"rank {rank} ({mode}):\n{out[-3000:]}\n"
                                     + (cluster.logs() if cluster else ""))
                return [json.loads(pathlib.Path(f"{tmp}/{rank}.json").read_text()) for rank in range(WORLD)]
        finally:
            if cluster:
                cluster.close()

    def test_without_a_codec_the_gradients_are_ddps(self):
        results = self.run_ranks("compare", ["--strategy", "allreduce"])
        print(f"\nlargest difference from DDP's gradients: {max(r['worst'] for r in results):.2e}", file=sys.stderr)

    def test_with_fp16_the_gradients_are_ddps_within_its_rounding(self):
        # Step by step rather than a training run of 1,500 steps (20 s of CI): a
        # gradient that is DDP's to fp16's precision at every step trains as DDP does.
        results = self.run_ranks("compare-fp16", ["--strategy", "allreduce", "--codec", "fp16"])
        worst = max(r["worst"] for r in results)
        print(f"\nfp16: largest difference from DDP's gradients: {worst:.2e}", file=sys.stderr)
        self.assertGreater(worst, 0.0, "fp16 changed nothing: was the codec applied?")

    def test_topk_with_error_feedback_trains_within_a_point_of_ddp(self):
        reference = self.run_ranks("ddp")
        self.assertGreater(reference[0]["accuracy"], 0.80, "DDP's own run does not train")
        codec = "topk:0.1+ef"
        results = self.run_ranks("train", ["--strategy", "allreduce", "--codec", codec])
        print(f"\n{codec}: {results[0]['accuracy']:.4f} against DDP's {reference[0]['accuracy']:.4f}",
              file=sys.stderr)
        self.assertAlmostEqual(results[0]["params"], results[1]["params"], places=3,
                               msg="the ranks' models differ")
        self.assertGreater(results[0]["accuracy"], reference[0]["accuracy"] - 0.01, codec)

    def test_a_strategy_other_than_allreduce_is_refused_with_the_reason(self):
        import gossipd
        import gossipd.torch
        import torch
        with harness.Cluster(1, ["--strategy", "local-sgd"]) as c:
            client = gossipd.Client(c.endpoint(0), trainer="hook", timeout=30)
            with self.assertRaisesRegex(ValueError, "needs --strategy allreduce"):
                gossipd.torch.CommHookState(client, torch.nn.Linear(3, 2))
            client.close()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        rank, port, endpoint, mode, out = sys.argv[2:7]
        worker(int(rank), int(port), endpoint, mode, out)
    else:
        harness.main()
