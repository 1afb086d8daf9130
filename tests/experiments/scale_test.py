#!/usr/bin/env python3
"""experiments/scale.py as docs/results/scale.md runs it, on 16 nodes: the sweep runs
gossipctl simulate, fits each graph's consensus rate, and writes its CSV and plots; the
ring, the torus and the exponential graph contract at the spectral gap's rate, the
one-peer exponential graph averages exactly in log2(16) = 4 rounds, and gossip's bytes
per node are its degree's models."""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = None


class ScaleSweep(unittest.TestCase):
    def test_sixteen_nodes_follow_their_spectral_gap(self):
        if not os.path.exists(os.path.join(BUILD, "bin", "gossipctl")):
            self.skipTest("no gossipctl in the build")
        with tempfile.TemporaryDirectory() as out:
            p = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "scale.py"),
                                "--build", BUILD, "--out", out, "--sizes", "16", "--topologies",
                                "ring,torus,exponential,one-peer-exponential"],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            with open(os.path.join(out, "scale.csv")) as f:
                rows = list(csv.DictReader(f))
            for png in ("scale-consensus.png", "scale-bytes.png", "scale-time.png"):
                self.assertGreater(os.path.getsize(os.path.join(out, png)), 1000, png)
        cons = {r["topology"]: r for r in rows if r["kind"] == "consensus"}
        self.assertEqual(set(cons), {"ring", "torus:4x4", "exponential", "one-peer-exponential"})
        for t in ("ring", "torus:4x4", "exponential"):
            self.assertAlmostEqual(float(cons[t]["log_ratio"]), 1.0, delta=0.03, msg=cons[t])
        self.assertEqual(float(cons["one-peer-exponential"]["rounds_to_1e-8"]) + 1, 4.0)
        traffic = {(r["strategy"], r["topology"]): r for r in rows if r["kind"] == "traffic"}
        model = 10000 * 4
        ring = float(traffic[("gossip", "ring")]["bytes_per_node_round"])
        self.assertGreater(ring, 2 * model)
        self.assertLess(ring, 2.05 * model, "two models a round, and little else")
        push = float(traffic[("push-sum", "default")]["bytes_per_node_round"])
        self.assertGreater(push, model)
        self.assertLess(push, 1.05 * model)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    args, rest = parser.parse_known_args()
    BUILD = os.path.abspath(args.build)
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False).result
    if result.skipped and result.wasSuccessful() and not result.failures:
        sys.exit(77)
    sys.exit(0 if result.wasSuccessful() else 1)
