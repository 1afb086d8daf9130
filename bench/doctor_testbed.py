#!/usr/bin/env python3
"""What `gossipctl doctor` measures on links of a known rate: n gossipd, one per network
namespace of experiments/testbed.py (each node's egress limited by tc's token bucket),
idle (no trainers), and doctor asked from node 0. Prints each link's measured bandwidth
and round trip beside the rate the testbed set, and the ratio. Needs root.

    sudo python3 bench/doctor_testbed.py --nodes 3 --rate 100mbit [--build build] [--runs 3]

Measures, never asserts (bench/README.md).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))
import testbed  # noqa: E402


def rate_bytes(rate):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if rate.endswith(suffix):
            return float(rate[: -len(suffix)]) * scale / 8
    raise ValueError(rate)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rate", default="100mbit", help="every node's egress, or a list (testbed.py)")
    ap.add_argument("--build", default=os.environ.get("BUILD_DIR", str(ROOT / "build")))
    ap.add_argument("--runs", type=int, default=3, help="doctor runs, 31 s apart (bandwidth is "
                    "measured at most every 30 s per link)")
    args = ap.parse_args()
    gossipd = pathlib.Path(args.build) / "bin" / "gossipd"
    gossipctl = pathlib.Path(args.build) / "bin" / "gossipctl"
    procs = []
    with tempfile.TemporaryDirectory(prefix="doctor-testbed-") as run_dir, \
            testbed.Testbed(args.nodes, args.rate) as bed:
        hosts = bed.hosts()
        try:
            for i in range(args.nodes):
                peers = []
                for j in range(args.nodes):
                    if j != i:
                        peers += ["--peer", f"{j}=tcp://{hosts[j]}:7000"]
                cmd = ["ip", "netns", "exec", f"{bed.prefix}{i}", str(gossipd), "--id", str(i),
                       "--listen", f"tcp://{hosts[i]}:7000", "--run-dir", run_dir,
                       "--strategy", "local-sgd", *peers]
                log = open(pathlib.Path(run_dir) / f"gossipd-{i}.log", "w")
                procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
            sock = pathlib.Path(run_dir) / "gossipd-0.sock"
            deadline = time.time() + 10
            while not all((pathlib.Path(run_dir) / f"gossipd-{i}.sock").exists()
                          for i in range(args.nodes)):
                if time.time() > deadline:
                    sys.exit("the daemons did not start")
                time.sleep(0.05)
            time.sleep(1)
            for run in range(args.runs):
                if run:
                    time.sleep(31)
                out = subprocess.run([str(gossipctl), "doctor", "--json", "--timeout", "20",
                                      "--node", str(sock)], capture_output=True, text=True,
                                     timeout=60)
                report = json.loads(out.stdout)
                rates = testbed.parse_rates(args.rate, args.nodes)
                print(f"run {run + 1}: exit {out.returncode}, {report['elapsed_s']:.1f} s, "
                      f"problems: {report['problems'] or 'none'}")
                for row in report["rows"]:
                    for link in row["links"]:
                        limit = rate_bytes(rates[row["node"]])
                        bw = link["bandwidth_bytes_per_s"]
                        print(f"  {row['node']}->{link['to']}: rate {limit / 1e6:.2f} MB/s, "
                              f"doctor {bw / 1e6 if bw else float('nan'):.2f} MB/s "
                              f"({bw / limit if bw else float('nan'):.2f}x), "
                              f"rtt {link['rtt_ms']} ms, tcp rtt {link['tcp_rtt_ms']} ms")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()


if __name__ == "__main__":
    main()
