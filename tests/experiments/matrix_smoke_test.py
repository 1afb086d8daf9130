#!/usr/bin/env python3
"""The experiment matrix's smoke version, end to end: two strategies on 4 nodes
training Fashion-MNIST for 200 steps on loopback, through experiments/matrix.py.
Checks that runs.csv, the plots and the table exist and agree with each other and
with the byte counters the daemons log at shutdown.

    /usr/bin/python3 tests/experiments/matrix_smoke_test.py --build build
"""

import argparse
import csv
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"


class MatrixSmoke(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="matrix-smoke-")
        cls.out = pathlib.Path(cls.tmp.name) / "results"
        done = subprocess.run(
            [sys.executable, str(ROOT / "experiments" / "matrix.py"), "--matrix", "smoke", "--out", str(cls.out),
             "--build", str(BUILD), "--run-timeout", "240"],
            capture_output=True, text=True, timeout=600)
        cls.log = done.stderr
        if done.returncode != 0:
            raise AssertionError(f"matrix.py exited {done.returncode}:\n{done.stderr[-3000:]}")
        with open(cls.out / "runs.csv", newline="") as f:
            cls.rows = list(csv.DictReader(f))
        cls.summaries = [json.loads(l) for l in (cls.out / "runs.jsonl").read_text().splitlines() if l.strip()]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def runs(self):
        out = {}
        for r in self.rows:
            out.setdefault(r["run"], []).append(r)
        return out

    def test_every_run_has_its_evaluations_in_order(self):
        runs = self.runs()
        self.assertEqual(sorted(runs), ["gossip-ring", "local-sgd-T4"])
        for name, rows in runs.items():
            steps = [int(r["step"]) for r in rows]
            self.assertEqual(steps, [50, 100, 150, 200], name)
            sent = [int(r["payload_sent_total"]) for r in rows]
            self.assertTrue(all(a < b for a, b in zip(sent, sent[1:])), f"{name}: bytes must grow: {sent}")
            walls = [float(r["wall_seconds"]) for r in rows]
            self.assertTrue(all(a <= b for a, b in zip(walls, walls[1:])), f"{name}: {walls}")
            for r in rows:
                self.assertEqual(int(r["payload_sent_per_node"]), round(int(r["payload_sent_total"]) / 4))
                self.assertGreater(float(r["accuracy_average_model"]), 0.6, f"{name} step {r['step']}")
                self.assertGreaterEqual(float(r["consensus_distance"]), 0.0)
            # 800 samples per node of real Fashion-MNIST: well past chance (10 %).
            self.assertGreater(float(rows[-1]["accuracy_average_model"]), 0.78, name)

    def test_bytes_agree_with_the_daemons_counters(self):
        self.assertEqual(len(self.summaries), 2)
        for s in self.summaries:
            final = [r for r in self.runs()[s["run"]] if int(r["step"]) == 200][0]
            self.assertIsNotNone(s["daemon_payload_sent"], f"{s['run']}: a daemon log lacks its traffic line")
            self.assertEqual(int(final["payload_sent_total"]), s["daemon_payload_sent"], s["run"])
            self.assertEqual(int(final["payload_sent_total"]), s["payload_bytes_sent_total"], s["run"])
            self.assertEqual(int(final["wire_sent_total"]), s["bytes_sent_total"], s["run"])
            self.assertAlmostEqual(float(final["accuracy_average_model"]), s["accuracy_average_model"], places=4)

    def test_plots_and_table_are_written(self):
        for kind in ("accuracy-vs-bytes", "accuracy-vs-time", "consensus"):
            png = self.out / f"loopback-iid-{kind}.png"
            self.assertTrue(png.exists(), png)
            data = png.read_bytes()
            self.assertEqual(data[:8], b"\x89PNG\r\n\x1a\n", png)
            self.assertGreater(len(data), 5000, f"{png} looks empty")
        table = (self.out / "results.md").read_text()
        lines = [l for l in table.splitlines() if l.startswith("| loopback |")]
        self.assertEqual(len(lines), 2, table)
        for s in self.summaries:
            row = [l for l in lines if f"| {s['run']} |" in l]
            self.assertEqual(len(row), 1, s["run"])
            self.assertIn(f"{s['accuracy_average_model']:.2%}", row[0])

    def test_local_sgd_sends_less_than_gossip(self):
        # Averaging every 4 steps over the ring against a gossip round every step.
        runs = self.runs()
        local = int(runs["local-sgd-T4"][-1]["payload_sent_total"])
        gossip = int(runs["gossip-ring"][-1]["payload_sent_total"])
        self.assertLess(local * 3, gossip)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD))
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/: ctest_unittest
    import ctest_unittest
    ctest_unittest.run([sys.argv[0]] + rest)
