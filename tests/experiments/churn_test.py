#!/usr/bin/env python3
"""Issue 8's churn test, end to end through experiments/churn.py: 8 nodes gossip on a
ring training Fashion-MNIST; a random node (daemon and trainer) is killed with SIGKILL
every few seconds and restarted, twice. Training must finish on every node, the
average model must be within 1 point of an undisturbed run with the same seed (on the
mean of the two churn runs), and the
daemons' logs must name every death and every rejoin. Then the same with local SGD
over an elastic TCP ring (--elastic on): two nodes are killed for good, and the ring
re-forms over the six others, whose trainers finish; and with restarts, where each
restarted node (and any live one a re-forming left out) must be taken back into the
ring at the members' step, or the run ends on different rounds and hangs.

CI runs the last case alone (an elastic ring whose killed nodes restart and are taken
back): seven runs of 8 nodes take two minutes on two cores. The restarting gossip
ring's kills are covered in CI by the daemon tests (Churn.*) and the in-process world
(InProcessWorld.ADeadNode...); --long, or scripts/long-tests.sh, runs all three here.

    /usr/bin/python3 tests/experiments/churn_test.py --build build [--long]
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import run_logs  # noqa: E402
BUILD = ROOT / "build"


class ChurnRun(unittest.TestCase):
    """Runs experiments/churn.py once for the class with ARGS; self.report is its JSON."""
    ARGS = []

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="churn-")
        done = subprocess.run(
            [sys.executable, str(ROOT / "experiments" / "churn.py"), "--build", str(BUILD), "--out",
             cls.tmp.name, "--timeout", "240", *cls.ARGS],
            capture_output=True, text=True, timeout=600)
        cls.log = done.stderr
        if done.returncode != 0:
            raise AssertionError(f"churn.py exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
        cls.report = json.loads(done.stdout.strip().splitlines()[-1])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def evidence(self, run="churn"):
        """What a failed accuracy bound shows: each node's own final accuracy and the
        daemons' warnings and errors of the run, in time order (CI keeps only the output)."""
        out = pathlib.Path(self.tmp.name) / run
        nodes = {}
        for f in sorted(out.glob("node-*.json")):
            try:
                nodes[f.stem] = json.loads(f.read_text()).get("accuracy_local")
            except (OSError, ValueError) as e:
                nodes[f.stem] = f"unreadable: {e}"
        return f"\nthe nodes' own accuracies: {nodes}\n" + run_logs.merged_warnings(out)


class Churn(ChurnRun):
    # Two churn runs: one run's accuracy varies with the timing of the kills (standard
    # deviation 0.53 points over 9 runs here, one of them 1.14 below), so the bound is
    # on their mean.
    ARGS = ["--repeats", "2"]

    def test_nodes_were_killed_and_every_trainer_finished(self):
        # The report names the run's walls and events, the log the kills' times: a
        # failure on CI, where only a tail of the output is kept, must say which.
        self.assertEqual(len(self.report["churn_runs"]), 2, self.report)
        for run in self.report["churn_runs"]:
            self.assertGreaterEqual(run["kills"], 3, f"{self.report}\n{self.log[-2000:]}")
            self.assertEqual(run["node_steps"], [1000] * 8, self.report)
            restarts = [e for e in run["events"] if e["event"] == "restart"]
            self.assertEqual(len(restarts), run["kills"], self.report)

    def test_average_model_is_within_one_point_of_the_undisturbed_run(self):
        self.assertGreater(self.report["undisturbed"]["average_accuracy"], 0.84)
        self.assertLessEqual(self.report["accuracy_gap"], 1.0, self.report)

    def test_logs_name_every_death_and_rejoin(self):
        self.assertEqual(self.report["unlogged"], [], self.log)


class ElasticRingChurn(ChurnRun):
    ARGS = ["--strategy", "local-sgd", "--transport", "tcp", "--elastic", "on", "--period", "4", "--kills", "2",
            "--no-restart"]

    def test_the_survivors_finish_and_every_death_is_logged(self):
        self.assertEqual(self.report["kills"], 2, self.report)
        self.assertEqual(len(self.report["churn_runs"]), 1, self.report)
        self.assertEqual(len(self.report["churn"]["finished"]), 6, self.report)
        self.assertEqual(self.report["churn"]["node_steps"], [1000] * 6, self.report)
        self.assertEqual(self.report["unlogged"], [], self.log)

    def test_the_survivors_average_stays_close_to_the_undisturbed_run(self):
        # The survivors lose the two dead nodes' data shards as well, hence 2 points
        # rather than the 1 of the restarting gossip run.
        self.assertGreater(self.report["undisturbed"]["average_accuracy"], 0.84)
        self.assertLessEqual(self.report["accuracy_gap"], 2.0, self.report)
        # A stall until the round timeout (10 s) per kill would show here.
        self.assertLess(self.report["churn"]["wall_s"], self.report["undisturbed"]["wall_s"] + 15, self.report)


class ElasticRingRestartChurn(ChurnRun):
    # A cosine schedule: at a constant learning rate the last step's test accuracy
    # moves by a point between steps 50 apart, and where the kills fall (the load of
    # the machine) moved the churn run's last step with it: gaps of 0.22 to 0.74 over
    # five first-kill times with one core busy, 1.01 and 1.04 in two CI runs. With the
    # rate decayed to 0 the same five gave -0.04 to 0.05 (2026-12-06): the gap is the
    # churn's, not SGD's noise.
    ARGS = ["--strategy", "local-sgd", "--transport", "tcp", "--elastic", "on", "--period", "4",
            "--lr-schedule", "cosine"]

    def test_restarted_nodes_rejoin_and_every_trainer_finishes(self):
        self.assertGreaterEqual(self.report["kills"], 3, f"{self.report}\n{self.log[-2000:]}")
        run = self.report["churn"]
        self.assertEqual(run["node_steps"], [1000] * 8, self.report)
        self.assertEqual(len([e for e in run["events"] if e["event"] == "restart"]), self.report["kills"], self.report)
        self.assertEqual(self.report["unlogged"], [], self.log)

    def test_average_model_is_within_one_point_of_the_undisturbed_run(self):
        # The evidence (each node's accuracy, the daemons' warnings) only on a failure.
        self.assertGreater(self.report["undisturbed"]["average_accuracy"], 0.84)
        gap = self.report["accuracy_gap"]
        if gap > 1.0:  # the evidence reads every daemon's log: only for a failure
            self.fail(f"accuracy gap {gap} > 1.0: {self.report}{self.evidence()}")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD))
    p.add_argument("--long", action="store_true", help="every case, not only CI's")
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build)
    if not args.long and not any(not a.startswith("-") for a in rest):
        rest.append("ElasticRingRestartChurn")
    import ctest_unittest  # tests/, on the path above
    ctest_unittest.run([sys.argv[0]] + rest)
