#!/usr/bin/python3
"""The examples a user copies (examples/), each run as the README says: one
`gossipctl run` per node, on loopback, on the real Fashion-MNIST. The CNN trains to
a real accuracy (on 2,000 of the test images: the 10,000 take a CPU core 12 s per
node); the torchvision model (Debian's python3-torchvision; skipped with the
reason where it is missing) runs three steps of batch 8 end to end, since ResNet-18
on two CPU cores takes minutes per hundred steps (batch 64: 5 s more for nothing more
checked). Exit code 77 where python3-torch is missing.

    /usr/bin/python3 tests/client/python_examples_test.py --build build
"""

import pathlib
import re
import sys
import tempfile
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

import python_client_test as harness  # noqa: E402

SKIP = harness.SKIP
# 83.5 % on both nodes (200 steps gave 88 % in twice the time): the bound below is 80.
CNN_STEPS = 100


def run_example(flags, script_args, timeout):
    """Two nodes, each `gossipctl run FLAGS -- python3 SCRIPT_ARGS`; their outputs."""
    with tempfile.TemporaryDirectory(prefix="gossip-examples-") as tmp:
        return harness.run_under_launcher(tmp, flags, lambda i: script_args, timeout)


def accuracies(outs):
    return [float(m.group(1)) for out in outs for m in [re.search(r"test accuracy ([0-9.]+)", out)] if m]


@unittest.skipIf(SKIP, SKIP)
class Examples(unittest.TestCase):
    def test_the_cnn_trains_under_the_launcher(self):
        codes, outs = run_example(["--strategy", "local-sgd", "--period", "4"],
                                  [str(ROOT / "examples" / "cnn_fashion_mnist.py"), "--steps", str(CNN_STEPS),
                                   "--test-images", "2000"], 300)
        self.assertEqual(codes, [0, 0], "\n".join(o[-3000:] for o in outs))
        acc = accuracies(outs)
        self.assertEqual(len(acc), 2, outs)
        print(f"\ncnn example, {CNN_STEPS} steps: {acc}", file=sys.stderr)
        self.assertEqual(acc[0], acc[1], "the nodes end with one model")
        self.assertGreater(acc[0], 0.80)

    def test_the_torchvision_example_runs_end_to_end(self):
        try:
            import torchvision  # noqa: F401
        except ImportError as e:
            self.skipTest(f"python3-torchvision is missing ({e})")
        codes, outs = run_example(["--strategy", "allreduce"],
                                  [str(ROOT / "examples" / "torchvision_fashion_mnist.py"), "--steps", "3",
                                   "--batch", "8", "--test-images", "100"], 300)
        self.assertEqual(codes, [0, 0], "\n".join(o[-3000:] for o in outs))
        acc = accuracies(outs)
        self.assertEqual(len(acc), 2, outs)
        self.assertEqual(acc[0], acc[1], "allreduce keeps the replicas equal")


if __name__ == "__main__":
    harness.main()
