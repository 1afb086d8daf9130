#!/usr/bin/python3
"""The Python client as a distribution (client/python/pyproject.toml): pip builds and
installs gossipd-client offline (--no-build-isolation --no-deps, Debian's setuptools)
into a throw-away --target, and a fresh interpreter outside the checkout imports
`gossipd` from there: its version is CMakeLists.txt's project version, it loads
libgossip from $GOSSIP_LIBRARY, from a path argument, or as the installed
libgossip.so.0 on the linker's path, and says everywhere it looked when there is none.
The distribution ships `gossipd` only (PyPI's `gossip` is another package), while the
source tree's `import gossip` still works, forwarding to gossipd with a
DeprecationWarning. Exit code 77 (ctest: skipped) only where pip, setuptools or wheel
cannot be imported (Debian's python3-pip brings all three).

    /usr/bin/python3 tests/client/python_package_test.py --build build
"""

import argparse
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCE = ROOT / "client" / "python"
BUILD = ROOT / "build"
LIBRARY = None  # main(): --build's lib/libgossip.so, or $GOSSIP_LIBRARY

MISSING = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m) is None]
SKIP = (f"{', '.join(MISSING)} cannot be imported; Debian's python3-pip installs them" if MISSING else "")


def cmake_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*gossipd\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", text)
    if not m:
        raise AssertionError("no project(gossipd VERSION x.y.z) in CMakeLists.txt")
    return m.group(1)


def clean_env(**extra):
    """The environment without anything that would point the child at a library or at
    the source tree; `extra` on top."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("GOSSIP_LIBRARY", "GOSSIP_LIB", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
    env.update(PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Package(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = pathlib.Path(tempfile.mkdtemp(prefix="gossipd-pkg-"))
        # pip builds in the source folder (build/, *.egg-info): build a copy instead.
        src = cls.tmp / "src"
        shutil.copytree(SOURCE, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        cls.target = cls.tmp / "site"
        cls.away = cls.tmp / "cwd"  # the children's working directory: outside the checkout
        cls.away.mkdir()
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
               "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--target", str(cls.target), str(src)]
        r = subprocess.run(cmd, cwd=cls.away, env=clean_env(PIP_ROOT_USER_ACTION="ignore"),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        if r.returncode != 0:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-4000:]}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def child(self, code, env):
        """Runs `code` in a fresh interpreter outside the checkout; its last stdout line is
        a JSON object, returned (with stderr) when it exits 0."""
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=self.away, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, f"the child failed:\n{r.stdout}\n{r.stderr}")
        return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr

    def test_installs_gossipd_only_with_the_project_version(self):
        names = sorted(p.name for p in self.target.iterdir())
        version = cmake_version()
        self.assertIn("gossipd", names)
        self.assertNotIn("gossip", names, "the distribution must not ship PyPI's name `gossip`")
        self.assertEqual([n for n in names if n.startswith("gossipd_client-")], [f"gossipd_client-{version}.dist-info"],
                         f"client/python/gossipd/_version.py differs from CMakeLists.txt's project version {version}")
        metadata = (self.target / f"gossipd_client-{version}.dist-info" / "METADATA").read_text()
        self.assertIn("Name: gossipd-client", metadata)
        self.assertIn("Requires-Python: >=3.9", metadata)
        requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
        self.assertTrue(requires and all("extra ==" in line for line in requires),
                        f"torch must be an optional extra, not a dependency: {requires}")

        got, _ = self.child("""
            import importlib.metadata, json, gossipd
            print(json.dumps({"version": gossipd.__version__, "file": gossipd.__file__,
                              "dist": importlib.metadata.version("gossipd-client")}))
            """, clean_env(PYTHONPATH=self.target))
        self.assertEqual(got["version"], version, "gossipd/_version.py differs from CMakeLists.txt's project version")
        self.assertEqual(got["dist"], version)
        self.assertTrue(pathlib.Path(got["file"]).is_relative_to(self.target), got["file"])

    def test_loads_the_library_from_gossip_library(self):
        got, _ = self.child("""
            import json, gossipd, gossipd.torch
            print(json.dumps({"path": gossipd.library_path(), "version": gossipd.library_version(),
                              "lr": gossipd.torch.scale_lr(0.1, 4, "none")}))
            """, clean_env(PYTHONPATH=self.target, GOSSIP_LIBRARY=LIBRARY))
        self.assertEqual(got["path"], str(LIBRARY))
        self.assertEqual(got["version"], cmake_version())
        self.assertEqual(got["lr"], 0.1)

    def test_loads_the_library_from_a_path_argument(self):
        got, _ = self.child(f"""
            import json, gossipd
            gossipd.load_library({str(LIBRARY)!r})
            print(json.dumps({{"path": gossipd.library_path()}}))
            """, clean_env(PYTHONPATH=self.target))
        self.assertEqual(got["path"], str(LIBRARY))

    def test_an_explicit_library_that_does_not_load_is_an_error(self):
        got, _ = self.child("""
            import json, gossipd
            try:
                gossipd.load_library()
                print(json.dumps({"error": None}))
            except gossipd.GossipError as e:
                print(json.dumps({"error": str(e)}))
            """, clean_env(PYTHONPATH=self.target, GOSSIP_LIBRARY=self.tmp / "nonexistent" / "libgossip.so"))
        self.assertIsNotNone(got["error"])
        self.assertIn("$GOSSIP_LIBRARY", got["error"])
        self.assertIn(str(self.tmp / "nonexistent"), got["error"])

    def test_finds_the_installed_soname_and_otherwise_names_every_place_it_looked(self):
        # Not in a checkout, no $GOSSIP_LIBRARY: the installed library, here libgossip.so.0
        # in a folder on LD_LIBRARY_PATH (as /usr/lib/<multiarch> would hold it).
        real = pathlib.Path(os.path.realpath(LIBRARY))
        libdir = self.tmp / "libdir"
        libdir.mkdir(exist_ok=True)
        shutil.copy2(real, libdir / real.name)
        if real.name != "libgossip.so.0":
            (libdir / "libgossip.so.0").symlink_to(real.name)
        code = """
            import json, gossipd
            try:
                print(json.dumps({"path": gossipd.library_path(), "version": gossipd.library_version()}))
            except gossipd.GossipError as e:
                print(json.dumps({"error": str(e)}))
            """
        got, _ = self.child(code, clean_env(PYTHONPATH=self.target, LD_LIBRARY_PATH=libdir))
        self.assertEqual(got.get("path"), str(libdir / "libgossip.so.0"), got)
        self.assertEqual(got["version"], cmake_version())

        got, _ = self.child(code, clean_env(PYTHONPATH=self.target))
        if "error" not in got:
            self.skipTest(f"this machine has an installed libgossip ({got['path']}): no place left to miss")
        for place in ("the build tree", 'find_library("gossip")', "libgossip.so.0", "GOSSIP_LIBRARY"):
            self.assertIn(place, got["error"])

    def test_the_source_tree_still_imports_gossip_with_a_deprecation_warning(self):
        got, _ = self.child("""
            import json, warnings
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                import gossip, gossip.torch
            import gossipd, gossipd.torch
            print(json.dumps({
                "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
                "same": [gossip.Client is gossipd.Client, gossip.GossipError is gossipd.GossipError,
                         gossip.EREFUSED == gossipd.EREFUSED, gossip.__version__ == gossipd.__version__,
                         gossip.torch.attach_module is gossipd.torch.attach_module,
                         gossip.torch.DistributedOptimizer is gossipd.torch.DistributedOptimizer],
                "file": gossipd.__file__}))
            """, clean_env(PYTHONPATH=SOURCE))
        self.assertEqual(got["same"], [True] * 6)
        ours = [w for w in got["warnings"] if "'gossip' module" in w]  # (not torch's own, if any)
        self.assertEqual(len(ours), 1, got["warnings"])
        self.assertTrue(ours[0].startswith("DeprecationWarning") and "import gossipd" in ours[0], ours[0])
        self.assertTrue(pathlib.Path(got["file"]).is_relative_to(SOURCE), got["file"])

        # Imported by a script (__main__), the warning shows under Python's default filters,
        # attributed to the script's import line.
        script = self.tmp / "old_trainer.py"
        script.write_text(f"import sys\nsys.path.insert(0, {str(SOURCE)!r})\nimport gossip.torch\n")
        r = subprocess.run([sys.executable, str(script)], cwd=self.away, env=clean_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"{script}:3: DeprecationWarning", r.stderr)


def main():
    global BUILD, LIBRARY
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=str(BUILD), help="the build tree whose lib/libgossip.so to load")
    p.add_argument("--library", help="libgossip.so to load (default: $GOSSIP_LIBRARY, else BUILD/lib/libgossip.so)")
    args, rest = p.parse_known_args()
    BUILD = pathlib.Path(args.build).resolve()
    LIBRARY = pathlib.Path(args.library or os.environ.get("GOSSIP_LIBRARY") or BUILD / "lib" / "libgossip.so")
    LIBRARY = LIBRARY.absolute()
    if SKIP:
        print(f"skipped: {SKIP}")
        sys.exit(77)
    if not LIBRARY.exists():
        print(f"{LIBRARY} does not exist: build the target gossip first", file=sys.stderr)
        sys.exit(1)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # tests/: ctest_unittest
    import ctest_unittest
    ctest_unittest.run([sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
