#!/usr/bin/env python3
"""The rate-limited testbed (experiments/testbed.py): namespaces on a bridge whose
links carry at most the configured rate, torn down afterwards, and a gossipd cluster
whose daemons run inside them. Skips, with the reason, where this machine does not
let us make network namespaces (no root, or a kernel without them).

    /usr/bin/python3 tests/experiments/testbed_test.py --build build
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import testbed as tb  # noqa: E402

BUILD = ROOT / "build"

try:
    tb.check_rights()
    SKIP = ""
except tb.TestbedError as e:
    SKIP = str(e)

RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5599)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20)
n = 0; t0 = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    if t0 is None: t0 = time.monotonic()
    n += len(b)
print(n, time.monotonic() - t0)
"""

SENDER = """
import socket, sys, time
for _ in range(100):
    try:
        c = socket.create_connection((sys.argv[1], 5599), timeout=5); break
    except OSError: time.sleep(0.05)
c.sendall(b"x" * int(sys.argv[2])); c.close()
"""


def names():
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return ns, links


@unittest.skipIf(SKIP, SKIP)
class Testbed(unittest.TestCase):
    def test_links_carry_the_rate_and_everything_goes_afterwards(self):
        rate_mbit = 40
        with tb.Testbed(2, f"{rate_mbit}mbit") as bed:
            a, b = bed.hosts()
            ns, links = names()
            self.assertIn(f"{bed.prefix}0", ns)
            self.assertIn(bed.bridge, links)
            recv = subprocess.Popen(["ip", "netns", "exec", f"{bed.prefix}1", sys.executable, "-c", RECEIVER, b],
                                    stdout=subprocess.PIPE, text=True)
            size = 3_000_000
            subprocess.run(["ip", "netns", "exec", f"{bed.prefix}0", sys.executable, "-c", SENDER, b, str(size)],
                           check=True, timeout=30)
            out, _ = recv.communicate(timeout=30)
            got, seconds = out.split()
            self.assertEqual(int(got), size)
            mbit = int(got) * 8 / float(seconds) / 1e6
            # The token bucket lets its burst through at once, then holds the rate.
            self.assertLess(mbit, rate_mbit * 1.35, f"{mbit:.1f} Mbit/s through a {rate_mbit} Mbit/s link")
            self.assertGreater(mbit, rate_mbit * 0.5, f"{mbit:.1f} Mbit/s through a {rate_mbit} Mbit/s link")
            prefix, bridge = bed.prefix, bed.bridge
        ns, links = names()
        self.assertNotIn(prefix, ns)
        self.assertNotIn(bridge, links)
        self.assertNotIn(f"{prefix}0a", links)

    def test_a_failed_build_leaves_nothing(self):
        bed = tb.Testbed(2, "10mbit", net=77)
        bed.hosts = lambda: ["10.77.0.1", "not-an-address"]  # the second node's address fails
        with self.assertRaises(tb.TestbedError):
            with bed:
                pass
        ns, links = names()
        self.assertNotIn(bed.prefix, ns)
        self.assertNotIn(bed.bridge, links)

    def test_bad_rates_are_refused_by_name(self):
        with self.assertRaisesRegex(tb.TestbedError, "rate '100 mbps'"):
            tb.Testbed(2, "100 mbps")

    def test_a_cluster_trains_with_its_daemons_in_the_namespaces(self):
        gossipctl = BUILD / "bin" / "gossipctl"
        if not gossipctl.exists():
            self.skipTest(f"{gossipctl} is not built")
        with tb.Testbed(3, "200mbit") as bed, tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run(
                [str(gossipctl), "cluster", "--nodes", "3", "--strategy", "local-sgd", "--period", "4",
                 "--steps", "120", "--hosts", ",".join(bed.hosts()), "--netns", bed.prefix, "--json",
                 "--out", tmp, "--timeout", "120"],
                capture_output=True, text=True, timeout=180)
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            summary = json.loads(done.stdout.strip().splitlines()[-1])
            self.assertTrue(summary["ok"])
            self.assertGreater(summary["bytes_sent_total"], 0)
            self.assertGreater(summary["accuracy_average_model"], 0.7)
            log = (pathlib.Path(tmp) / "gossipd-1.log").read_text()
            self.assertIn(bed.hosts()[1], log, "daemon 1 listens on its namespace's address")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD))
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build)
    if SKIP:  # ctest reports exit code 77 as skipped (SKIP_RETURN_CODE)
        print(f"skipped: {SKIP}")
        sys.exit(77)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/: ctest_unittest
    import ctest_unittest
    ctest_unittest.run([sys.argv[0]] + rest)
