#!/usr/bin/env python3
"""deploy/k8s/ run as a kubelet would, on one machine, with the built programs.
    tests/deploy/statefulset_test.py BIN_DIR SOURCE_DIR

Each pod is a network namespace on a bridge (in a hub namespace of its own), with its
own host name (gossip-N) and /etc/hosts standing in for the headless service's DNS; each
container has a pid namespace of its own unless the pod sets shareProcessNamespace. Each container runs its
command and args with the manifest's environment ($(VAR) and the pod-index label
expanded) as the pod's runAsUser; the paths of the ConfigMap and run volumes are mapped
to folders here, /dev/shm is this machine's. Passes when every liveness probe's GET
answers on its pod's address and every trainer finishes (exit 0) within the bound, its
average model at least STATEFULSET_TEST_MIN_ACCURACY % on the test set (default 80).

First checks what the manifest must keep consistent (ports, replicas and peer range,
run dir and mount, one uid, shared pid namespace). Exit status: 0 pass, 1 fail,
2 usage, 77 skipped (not root, no `ip netns`, PyYAML or the data set missing).
STATEFULSET_TEST_WAIT_S bounds the run (default 120); STATEFULSET_TEST_STEPS replaces the
trainer's --steps (a sanitizer build trains ten times slower)."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(SKIP)


def fail(why):
    print(f"FAIL: {why}")
    sys.exit(1)


def container(pod_spec, name):
    return next(c for c in pod_spec["containers"] if c["name"] == name)


def env_of(c, index):
    """The container's variables as the kubelet sets them: in order, $(VAR) expanded."""
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path != "metadata.labels['apps.kubernetes.io/pod-index']":
                fail(f"{c['name']}: {e['name']} from {path}, which this test cannot supply")
            env[e["name"]] = str(index)
    return env


def expand(words, env):
    return [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), w) for w in words]


def check_manifest(sts, svc, cm):
    """What the pieces must agree on; returns (replicas, peer port)."""
    spec, pod = sts["spec"], sts["spec"]["template"]["spec"]
    daemon, trainer = container(pod, "gossipd"), container(pod, "trainer")
    denv = env_of(daemon, 0)
    for c, env, names in ((daemon, denv, ("GOSSIPD_PEERS_FROM", "GOSSIPD_RUN_DIR", "GOSSIPD_METRICS_PORT")),
                          (trainer, env_of(trainer, 0), ("GOSSIP_ENDPOINT",))):
        for n in names:
            if n not in env:
                fail(f"deploy/k8s: container {c['name']} does not set {n}")
    m = re.fullmatch(r"dns:(\w+)-\{0\.\.(\d+)\}\.(\w+):(\d+)", denv["GOSSIPD_PEERS_FROM"])
    if not m:
        fail(f"GOSSIPD_PEERS_FROM {denv['GOSSIPD_PEERS_FROM']} is not dns:NAME-{{0..N}}.SERVICE:PORT")
    name, last, service, port = m.group(1), int(m.group(2)), m.group(3), int(m.group(4))
    checks = [
        (name == sts["metadata"]["name"], "the peer names are not the StatefulSet's pods"),
        (service == spec["serviceName"] == svc["metadata"]["name"], "the names' service is not the headless one"),
        (last + 1 == spec["replicas"], "the peer range does not cover the replicas"),
        (spec.get("podManagementPolicy") == "Parallel", "pods start one by one"),
        (svc["spec"].get("clusterIP") == "None", "the service is not headless"),
        (svc["spec"].get("publishNotReadyAddresses") is True, "names wait for readiness"),
        (any(p["port"] == port for p in svc["spec"]["ports"]), "the service lacks the peer port"),
        (pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"], "runAsUser != fsGroup"),
        (not any("runAsUser" in c.get("securityContext", {}) for c in pod["containers"]), "a container's own uid"),
        (f"--nodes {spec['replicas']}" in " ".join(trainer["args"]), "the trainer's --nodes is not replicas"),
        (str(daemon["livenessProbe"]["httpGet"]["port"]) in ("metrics", denv["GOSSIPD_METRICS_PORT"]),
         "the probe is not on the metrics port"),
        ("gossipd.toml" in cm["data"], "the ConfigMap has no gossipd.toml"),
    ]
    mounts = {c["name"]: {v["name"]: v["mountPath"] for v in c["volumeMounts"]} for c in pod["containers"]}
    # The run dir is in a volume both containers mount at the same place.
    inside = lambda path, mount: path == mount or path.startswith(mount.rstrip("/") + "/")
    run_volume = next((v for v, p in mounts["gossipd"].items() if inside(denv["GOSSIPD_RUN_DIR"], p)), None)
    checks += [
        (run_volume is not None and mounts["trainer"].get(run_volume) == mounts["gossipd"][run_volume],
         "the run dir is not in one volume mounted alike in both containers"),
        (mounts["gossipd"].get("shm") == mounts["trainer"].get("shm") == "/dev/shm", "/dev/shm is not shared"),
        (next(v for v in pod["volumes"] if v["name"] == "shm")["emptyDir"].get("medium") == "Memory",
         "/dev/shm is not in memory"),
        (env_of(trainer, 1)["GOSSIP_ENDPOINT"] == f"ipc://{denv['GOSSIPD_RUN_DIR']}/gossipd-1.sock",
         "the trainer's endpoint is not its daemon's socket"),
    ]
    for ok, why in checks:
        if not ok:
            fail(f"deploy/k8s: {why}")
    return spec["replicas"], port


def run(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, timeout=30, **kw)


def main():
    if len(sys.argv) != 3:
        print(__doc__.splitlines()[1], file=sys.stderr)
        return 2
    bin_dir, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    try:
        import yaml
    except ImportError:
        skip("PyYAML is missing (Debian: python3-yaml)")
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("setpriv"):
        skip("needs root, iproute2 and setpriv (network and pid namespaces)")
    if not os.path.isdir("/usr/share/datasets/fashion-mnist"):
        skip("dataset-fashion-mnist is not installed")
    k8s = os.path.join(src, "deploy", "k8s")
    load = lambda f: yaml.safe_load(open(os.path.join(k8s, f)))
    sts, svc, cm = load("statefulset.yaml"), load("service.yaml"), load("configmap.yaml")
    replicas, _ = check_manifest(sts, svc, cm)
    pod = sts["spec"]["template"]["spec"]
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"].get("runAsGroup", 0)
    wait_s = float(os.environ.get("STATEFULSET_TEST_WAIT_S", "120"))
    steps = os.environ.get("STATEFULSET_TEST_STEPS")  # the trainer's --steps, for slow builds

    shm_before = set(os.listdir("/dev/shm"))
    tag = f"gst{os.getpid() % 100000}"
    tmp = tempfile.mkdtemp(prefix="gossipd-sts.")
    os.chmod(tmp, 0o755)
    namespaces, pods = [], []
    try:
        if subprocess.run(["ip", "netns", "add", f"{tag}hub"], capture_output=True).returncode != 0:
            skip("cannot create network namespaces here")
        namespaces.append(f"{tag}hub")
        run(["ip", "-n", f"{tag}hub", "link", "add", "name", "sbr", "type", "bridge"])
        run(["ip", "-n", f"{tag}hub", "link", "set", "sbr", "up"])
        hosts = ["127.0.0.1 localhost"]
        for i in range(replicas):
            ns, ip = f"{tag}p{i}", f"10.231.0.{i + 1}"
            run(["ip", "netns", "add", ns])
            namespaces.append(ns)
            run(["ip", "-n", f"{tag}hub", "link", "add", "name", f"v{i}", "type", "veth", "peer", "name", "eth0",
                 "netns", ns])
            run(["ip", "-n", f"{tag}hub", "link", "set", f"v{i}", "master", "sbr", "up"])
            run(["ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            svc_name, name = svc["metadata"]["name"], f"{sts['metadata']['name']}-{i}"
            hosts.append(f"{ip} {name}.{svc_name}.default.svc.cluster.local {name}.{svc_name}")
        with open(os.path.join(tmp, "hosts"), "w") as f:
            f.write("\n".join(hosts) + "\n")

        config_volume = next(v for v in pod["volumes"] if "configMap" in v)["name"]
        for i in range(replicas):
            # Volumes: the ConfigMap's files and the run dir, each a folder here.
            paths = {}
            for c in pod["containers"]:
                for m in c["volumeMounts"]:
                    if m["mountPath"] == "/dev/shm":
                        continue
                    host = os.path.join(tmp, f"pod{i}", m["name"])
                    if not os.path.isdir(host):
                        os.makedirs(host)
                        if m["name"] == config_volume:
                            os.chown(host, uid, gid)
                        else:  # an emptyDir, as the kubelet makes it: everyone's, the fsGroup's
                            os.chown(host, 0, pod["securityContext"].get("fsGroup", gid))
                            os.chmod(host, 0o2777)
                        if m["name"] == config_volume:
                            for key, text in cm["data"].items():
                                with open(os.path.join(host, key), "w") as f:
                                    f.write(text)
                    paths[m["mountPath"]] = host
            remap = lambda s: next((s.replace(p, h) for p, h in paths.items() if p in s), s)
            script = [f"hostname {sts['metadata']['name']}-{i}", f"mount --bind {tmp}/hosts /etc/hosts"]
            # A pid namespace per container unless the pod shares one; the program is then
            # its namespace's pid 1, as in a container, and gets SIGTERM as one does.
            own_pids = [] if pod.get("shareProcessNamespace") else \
                ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"]
            for c in pod["containers"]:
                env = env_of(c, i)
                argv = expand(c["command"] + c.get("args", []), env)
                if steps and "--steps" in argv:
                    argv[argv.index("--steps") + 1] = steps
                argv[0] = os.path.join(bin_dir, argv[0])
                env_words = [f"{k}={remap(v)}" for k, v in env.items()]
                words = own_pids + ["env", "-i", "PATH=/usr/bin:/bin"] + env_words + \
                        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"] + [remap(a) for a in argv]
                log = os.path.join(tmp, f"pod{i}-{c['name']}.log")
                script.append(shlex.join(words) + f" > {shlex.quote(log)} 2>&1 &")
                script.append(f"{'trainer' if c['name'] == 'trainer' else 'daemon'}=$!")
            # The trainer's end, then the kubelet's stop: SIGTERM, and the daemon cleans up.
            script.append("wait $trainer; echo $? > " + shlex.quote(os.path.join(tmp, f"pod{i}-trainer.rc")))
            stop = "$(cat /proc/$daemon/task/$daemon/children)" if own_pids else "$daemon"
            script.append(f"kill -TERM {stop}; wait $daemon; echo $? > "
                          + shlex.quote(os.path.join(tmp, f"pod{i}-gossipd.rc")))
            pods.append(subprocess.Popen(
                ["ip", "netns", "exec", f"{tag}p{i}", "unshare", "--uts", "--mount", "--pid", "--fork",
                 "--mount-proc", "sh", "-c", "\n".join(script)], start_new_session=True))

        # The liveness probe of each pod, once, while the trainers run.
        probe = container(pod, "gossipd")["livenessProbe"]["httpGet"]
        port = env_of(container(pod, "gossipd"), 0)["GOSSIPD_METRICS_PORT"]
        deadline = time.time() + wait_s
        for i in range(replicas):
            while True:
                try:
                    got = subprocess.run(["ip", "netns", "exec", f"{tag}p{i}", sys.executable, "-c",
                                          "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], "
                                          "timeout=2).status)", f"http://10.231.0.{i + 1}:{port}{probe['path']}"],
                                         capture_output=True, text=True, timeout=10)
                    if got.stdout.strip() == "200":
                        break
                except subprocess.TimeoutExpired:
                    pass
                if time.time() > deadline:
                    fail(f"pod {i}: the liveness probe's GET got no answer")
                time.sleep(0.5)
        print(f"liveness: GET {probe['path']} answered on all {replicas} pods")
        for i, p in enumerate(pods):
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                fail(f"pod {i}: the trainer did not finish within {wait_s:.0f}s")
        accuracies = []
        for i in range(replicas):
            rc_file = os.path.join(tmp, f"pod{i}-trainer.rc")
            rc = open(rc_file).read().strip() if os.path.exists(rc_file) else "none"
            trainer_log = open(os.path.join(tmp, f"pod{i}-trainer.log")).read()
            print(f"pod {i}: trainer exit {rc}: {trainer_log.strip().splitlines()[-1] if trainer_log else ''}")
            if rc != "0":
                print(trainer_log[-2000:])
                print(open(os.path.join(tmp, f"pod{i}-gossipd.log")).read()[-3000:])
                fail(f"pod {i}: the trainer failed")
            # What the pods trained: the average model's test accuracy (the trainer's last
            # line; 84.69 % on each pod for 400 steps here) and that each received from
            # its peers (62.7 MB), which a pod training alone would not.
            summary = re.search(r"test accuracy ([0-9.]+)% .* received ([0-9.]+) ?([kMG]?B)",
                                trainer_log.strip().splitlines()[-1])
            if not summary:
                fail(f"pod {i}: no summary line from the trainer")
            accuracies.append(float(summary.group(1)))
            if float(summary.group(2)) == 0:
                fail(f"pod {i}: the trainer received nothing from its peers")
            rc = open(os.path.join(tmp, f"pod{i}-gossipd.rc")).read().strip()
            if rc != "0":
                print(open(os.path.join(tmp, f"pod{i}-gossipd.log")).read()[-3000:])
                fail(f"pod {i}: gossipd exited {rc} on SIGTERM")
        floor = float(os.environ.get("STATEFULSET_TEST_MIN_ACCURACY", "80"))
        print(f"test accuracy of the pods' average model: {accuracies} (floor {floor}%)")
        if min(accuracies) < floor:
            fail(f"the pods' average model reached {min(accuracies):.2f}%, under {floor}%")
        left = set(os.listdir("/dev/shm")) - shm_before
        if any(n.startswith(f"gossipd-{uid}-") for n in left):
            fail(f"arenas left in /dev/shm after SIGTERM: {sorted(left)}")
        print("statefulset test: passed (the daemons stopped on SIGTERM and removed their arenas)")
        return 0
    finally:
        for p in pods:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        for ns in namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
