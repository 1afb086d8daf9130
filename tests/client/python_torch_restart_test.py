#!/usr/bin/python3
"""Issue 22's second "done when": a node's trainer and daemon are killed (SIGKILL) in
the middle of a PyTorch run and restarted. Three daemons run local SGD with DiLoCo's outer
Nesterov momentum on an elastic ring with top-k + error feedback, each checkpointing every round; each trainer saves DistributedOptimizer.state_dict() (SGD's momentum buffers,
the node's step) at every synchronization. After the restart:
  - the trainer's optimizer holds exactly the momentum buffers and step it saved;
  - the daemon, which takes the running nodes' model to rejoin the ring, keeps its own
    error-feedback residual: its CRC-32 equals the one of the last checkpoint it wrote
    before it was killed (the daemons' log lines), and takes the members' outer momentum
    with their model, so that its outer steps stay theirs;
  - every node trains on to the target accuracy, and all end with one model.
On the real Fashion-MNIST, real processes on loopback. Exit code 77 without torch.

    /usr/bin/python3 tests/client/python_torch_restart_test.py --build build
"""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "client" / "python"))
sys.path.insert(0, str(ROOT / "experiments"))

import python_client_test as harness  # noqa: E402

SKIP = harness.SKIP
NODES = 3
STEPS = 600
KILL_AT = 150  # the killed node's step when it is killed
KILLED = NODES - 1


def trainer(endpoint, node, state_path, progress_path, result_path):
    """One node's trainer (a process of its own, so that it can be killed)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import gossipd
    import gossipd.torch
    import torch_fashion_mnist as fm
    torch.set_num_threads(1)
    torch.manual_seed(1)
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    train_x, train_y = fm.load(fm.DATA_DIR, "train")
    client = gossipd.Client(endpoint, trainer=f"restart-{node}", timeout=60)
    attached = gossipd.torch.attach_module(client, net)
    opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9), attached)
    result = {"resumed": False}
    state_path = pathlib.Path(state_path)
    if state_path.exists():  # a restart: the optimizer's state as it was saved
        saved = torch.load(state_path)
        opt.load_state_dict(saved)
        now = opt.state_dict()
        result["resumed"] = True
        result["saved_step"] = saved["gossipd"]["step"]
        result["start_step"] = attached.model.start_step
        result["momentum_equal"] = all(
            torch.equal(now["optimizer"]["state"][k]["momentum_buffer"], v["momentum_buffer"])
            for k, v in saved["optimizer"]["state"].items()) and len(saved["optimizer"]["state"]) == 4
        result["step_equal"] = now["gossipd"]["step"] == saved["gossipd"]["step"] or \
            now["gossipd"]["step"] == attached.model.start_step
    gen = torch.Generator().manual_seed(100 * node + attached.model.start_step)
    shard = torch.arange(node, len(train_x), NODES)
    step = attached.model.start_step
    while step < STEPS:
        idx = shard[torch.randint(len(shard), (32,), generator=gen)]
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(net(train_x[idx]), train_y[idx]).backward()
        opt.step()
        step = opt.last.step
        if opt.last.synced:
            tmp = state_path.with_suffix(".tmp")
            torch.save(opt.state_dict(), tmp)
            os.replace(tmp, state_path)
            pathlib.Path(progress_path + ".tmp").write_text(str(step))
            os.replace(progress_path + ".tmp", progress_path)  # the test reads it meanwhile
        time.sleep(0.01)  # slower trainers: the others are still running when the killed node is back
    opt.finish()
    test_x, test_y = fm.load(fm.DATA_DIR, "test")
    with torch.no_grad():
        result["accuracy"] = (net(test_x).argmax(1) == test_y).float().mean().item()
    result["checksum"] = float(sum(p.double().sum() for p in net.parameters()))
    pathlib.Path(result_path).write_text(json.dumps(result))
    client.detach()
    client.close()


@unittest.skipIf(SKIP, SKIP)
class KillAndRestart(unittest.TestCase):
    def test_a_killed_node_resumes_its_optimizer_and_error_feedback_state(self):
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="gossip-restart-"))
        ports = harness.free_ports(NODES)
        peer = lambda i: f"tcp://127.0.0.1:{ports[i]}"  # noqa: E731
        env = dict(os.environ, GOSSIP_LIBRARY=str(harness.BUILD / "lib" / "libgossip.so"))
        procs = {}

        def daemon(i):
            log = open(tmp / f"gossipd-{i}.log", "a")
            peers = [a for j in range(NODES) if j != i for a in ("--peer", f"{j}={peer(j)}")]
            procs[f"d{i}"] = subprocess.Popen(
                [str(harness.BUILD / "bin" / "gossipd"), "--id", str(i), "--listen", peer(i)] + peers +
                ["--run-dir", str(tmp / f"run{i}"), "--strategy", "local-sgd",
                 "--period", "4", "--elastic", "on", "--codec", "topk:0.05+ef",
                 "--outer-optimizer", "nesterov", "--outer-lr", "0.5", "--outer-momentum", "0.5",
                 "--checkpoint", str(tmp / f"node{i}.ckpt"), "--checkpoint-every", "1",
                 "--round-timeout", "20", "--dead-after", "2"], stdout=log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 10
            while not (tmp / f"run{i}" / f"gossipd-{i}.sock").exists():
                self.assertLess(time.monotonic(), deadline, "daemon did not start")
                time.sleep(0.02)

        def train(i):
            procs[f"t{i}"] = subprocess.Popen(
                [sys.executable, __file__, "--trainer", f"ipc://{tmp}/run{i}/gossipd-{i}.sock", str(i),
                 str(tmp / f"opt{i}.pt"), str(tmp / f"progress{i}"), str(tmp / f"result{i}.json")], env=env,
                stdout=open(tmp / f"trainer-{i}.log", "a"), stderr=subprocess.STDOUT)

        def logs():
            return "\n".join(p.read_text()[-2500:] for p in sorted(tmp.glob("*.log")))
        try:
            for i in range(NODES):
                (tmp / f"run{i}").mkdir()
                daemon(i)
            for i in range(NODES):
                train(i)
            k = KILLED
            progress = tmp / f"progress{k}"
            deadline = time.monotonic() + 120
            while int(progress.read_text() if progress.exists() else 0) < KILL_AT:
                self.assertLess(time.monotonic(), deadline, f"node {k} never reached the kill step:\n" + logs())
                self.assertIsNone(procs[f"t{k}"].poll(), logs())
                time.sleep(0.05)
            procs[f"t{k}"].send_signal(signal.SIGKILL)
            procs[f"d{k}"].send_signal(signal.SIGKILL)
            procs[f"t{k}"].wait(10)
            procs[f"d{k}"].wait(10)
            log_k = (tmp / f"gossipd-{k}.log").read_text()
            written = re.findall(r"checkpoint \S+: round \d+, step \d+, .*; state: (.*)", log_k)
            self.assertTrue(written, log_k[-3000:])
            time.sleep(4.0)  # the others re-form the ring without it (--dead-after 2) and go on
            daemon(k)
            train(k)
            for i in range(NODES):
                self.assertEqual(procs[f"t{i}"].wait(300), 0, f"trainer {i} failed:\n" + logs())
            log_k = (tmp / f"gossipd-{k}.log").read_text()
            kept = re.findall(r"kept the checkpoint's own state after taking peer \d+'s model: (.*)", log_k)
            self.assertEqual(len(kept), 1, "the restarted daemon rejoined from a member keeping its state:\n"
                             + log_k[-4000:])
            # Its residual is exactly that of its last checkpoint (the model, and so
            # local_sgd.previous, is the members').
            def tensors(line):
                return dict(re.findall(r"(\S+) (\d+ crc [0-9a-f]{8})", line))
            saved, now = tensors(written[-1]), tensors(kept[0])
            self.assertEqual(sorted(now), ["local_sgd.residual"], kept[0])
            self.assertNotIn("without the members' outer momentum", log_k)
            for name, digest in now.items():
                self.assertEqual(digest, saved[name], f"{name}: saved {written[-1]}, kept {kept[0]}")
            results = [json.loads((tmp / f"result{i}.json").read_text()) for i in range(NODES)]
            r1 = results[k]
            self.assertTrue(r1["resumed"], r1)
            self.assertTrue(r1["momentum_equal"], "SGD's momentum buffers came back as saved")
            self.assertTrue(r1["step_equal"], r1)
            self.assertGreaterEqual(r1["start_step"], r1["saved_step"], r1)
            print(f"\nnode {k} killed at step {r1['saved_step']}, back at step {r1['start_step']}; "
                  f"accuracies {[round(r['accuracy'], 4) for r in results]}", file=sys.stderr)
            for r in results:
                self.assertGreater(r["accuracy"], 0.80, results)
            for r in results[1:]:
                self.assertAlmostEqual(results[0]["checksum"], r["checksum"], places=3,
                                       msg="the nodes end with one model")
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait()
            import shutil
            if os.environ.get("KEEP") != "1":
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--trainer":
        a = sys.argv[2:]
        trainer(a[0], int(a[1]), a[2], a[3], a[4])
    else:
        harness.main()
