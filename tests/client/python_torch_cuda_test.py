#!/usr/bin/python3
"""gossipd.torch with a CUDA model (issue 22, part 4; shared/GPU-CHECKLIST.md, item 5): the
parameters stay on the GPU and are staged through the page-locked arena at
synchronization points only (every `period` steps under local SGD; the gradients at
every step under allreduce). Local SGD and allreduce train the MLP of
python_torch_dtype_test.py, in float32 and in bfloat16, to within 1 pt of the same loop
with CPU tensors, and every node ends with one model; the time per step of both is
printed. Real daemons on loopback, the real Fashion-MNIST.

Exit code 77 (ctest: skipped) where torch cannot use a CUDA device: that is every
machine without a GPU, and Debian's python3-torch, which is built without CUDA.

    /usr/bin/python3 tests/client/python_torch_cuda_test.py --build build
"""

import pathlib
import sys
import threading
import unittest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import python_client_test as harness  # noqa: E402
import python_torch_dtype_test as dtype_test  # noqa: E402  its trainer and data

if not harness.SKIP:
    import torch
    if not torch.cuda.is_available():
        harness.SKIP = (f"no CUDA device for torch {torch.__version__} (torch.cuda.is_available() is False; "
                        f"built with CUDA {torch.version.cuda})")


@unittest.skipIf(harness.SKIP, harness.SKIP)
class CudaModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import torch_fashion_mnist as fm
        torch.set_num_threads(1)
        train_x, train_y = fm.load(fm.DATA_DIR, "train")
        test_x, test_y = fm.load(fm.DATA_DIR, "test")
        cls.data = (train_x, train_y, test_x[:2000], test_y[:2000])

    def run_cluster(self, flags, device, dtype):
        out, errors = {}, []
        with harness.Cluster(2, flags) as c:
            ts = [threading.Thread(target=dtype_test.train,
                                   args=(c.endpoint(i), i, 2, self.data, out, errors, dtype, device))
                  for i in range(2)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(240)
            self.assertFalse(any(t.is_alive() for t in ts), "a trainer hung:\n" + c.logs())
            self.assertEqual(errors, [], c.logs())
        for a, b in zip(out[0]["params"], out[1]["params"]):
            self.assertTrue(torch.equal(a, b), f"{device}: the nodes end with one model")
        return out[0]

    def check(self, flags, dtype):
        gpu = self.run_cluster(flags, "cuda", dtype)
        cpu = self.run_cluster(flags, "cpu", dtype)
        print(f"\n{flags} {dtype}: cuda {gpu['accuracy']:.4f} in {1e3 * gpu['seconds_per_step']:.2f} ms/step, "
              f"cpu {cpu['accuracy']:.4f} in {1e3 * cpu['seconds_per_step']:.2f} ms/step "
              f"({torch.cuda.get_device_name(0)})", file=sys.stderr)
        # An absolute floor as well as the CPU run's, which could fail along with it: the
        # floor python_torch_dtype_test.py sets for the same trainer and data.
        self.assertGreater(gpu["accuracy"], 0.75)
        self.assertGreater(gpu["accuracy"], cpu["accuracy"] - 0.01)

    def test_local_sgd(self):
        for dtype in (torch.float32, torch.bfloat16):
            self.check(["--strategy", "local-sgd", "--period", "4"], dtype)

    def test_allreduce(self):
        for dtype in (torch.float32, torch.bfloat16):
            self.check(["--strategy", "allreduce"], dtype)


if __name__ == "__main__":
    harness.main()
