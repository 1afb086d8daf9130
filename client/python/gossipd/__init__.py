"""gossipd: attach a Python training loop to its node's gossipd.

Loads the C ABI (libgossip.so, client/include/gossip/gossip.h) through ctypes, so
there is nothing to compile per Python version. The same operations as the C++
client: connect, attach a list of tensors, step, sync, detach. The tensors live in
the daemon's shared-memory arena; `attach` hands back zero-copy views of them.

    import gossipd
    client = gossipd.Client("ipc:///run/gossipd/gossipd-0.sock", trainer="my-trainer")
    model = client.attach([("fc1.weight", 256 * 784), ("fc1.bias", 256)])
    # model.buffers[i]: a ctypes float array inside the arena (memoryview-able)
    result = client.step()

Errors from the daemon are raised as gossipd.GossipError with the daemon's message.
`gossipd.torch` wires a torch.nn.Module and an optimizer to a Client (it needs torch;
this module does not). The distribution is `gossipd-client` (client/python/pyproject.toml);
`import gossip`, the old name, still works in the source tree but is deprecated.
"""

import ctypes
import ctypes.util
import os
import pathlib
import re
from dataclasses import dataclass

from ._version import __version__

__all__ = ["Client", "GossipError", "Model", "StepResult", "load_library", "library_path", "library_version",
           "__version__"]

OK, EINVAL, EIO, ETIMEOUT, EREFUSED, ECLOSED = 0, -1, -2, -3, -4, -5
_CODE_NAMES = {EINVAL: "invalid argument", EIO: "I/O error", ETIMEOUT: "timed out",
               EREFUSED: "refused by the daemon", ECLOSED: "the daemon shut down"}


class GossipError(RuntimeError):
    """A failed call; `code` is the GOSSIP_E* code, the message the daemon's or the client's."""

    def __init__(self, code, message):
        super().__init__(f"{message} ({_CODE_NAMES.get(code, code)})")
        self.code = code
        self.message = message


class _StepResult(ctypes.Structure):
    _fields_ = [("step", ctypes.c_uint64), ("synced", ctypes.c_int), ("round", ctypes.c_uint64),
                ("payload_sent", ctypes.c_uint64), ("payload_recv", ctypes.c_uint64),
                ("wire_sent", ctypes.c_uint64), ("wire_recv", ctypes.c_uint64)]


class _ModelInfo(ctypes.Structure):
    _fields_ = [("node", ctypes.c_uint32), ("nodes", ctypes.c_uint32), ("start_step", ctypes.c_uint64),
                ("initialized", ctypes.c_int), ("strategy", ctypes.c_char * 32), ("gradients", ctypes.c_int)]


@dataclass
class StepResult:
    step: int
    synced: bool
    round: int
    payload_sent: int
    payload_recv: int
    wire_sent: int
    wire_recv: int


@dataclass
class Model:
    names: list
    buffers: list          # ctypes arrays inside the arena, one per tensor (c_float; c_uint16 for bf16, f16)
    initialized: bool      # the arena already held the node's model: do not overwrite it
    node: int
    nodes: int
    start_step: int        # the node's step at attach (a late trainer starts there)
    strategy: str          # the node's strategy, for logs
    gradients: bool        # the buffers carry gradients, averaged every step (synchronous SGD)
    offsets: list = None   # each tensor's element offset in the replica (send_bucket's unit)
    dtype: str = "f32"     # the replica's element type: f32, bf16 or f16
    fragments: int = 1     # streamed syncs: a step's sync covers one of these fragments, sync() all
    overlap: int = 0       # overlapped syncs: a sync's result reaches the replica this many steps later


_lib = None
_lib_path = None

# The library's installed name (its SONAME: client/CMakeLists.txt, SOVERSION 0).
_SONAME = "libgossip.so.0"


def _source_checkout_library():
    """<checkout>/build/lib/libgossip.so when this package is imported from a source
    checkout (client/python/gossipd/ beside client/include/gossip/gossip.h), else None."""
    root = pathlib.Path(__file__).resolve().parent.parent.parent.parent
    if not (root / "client" / "include" / "gossip" / "gossip.h").is_file():
        return None
    return str(root / "build" / "lib" / "libgossip.so")


def load_library(path=None):
    """Loads libgossip (once; an explicit `path` loads that one). Where from, in order:
    `path`; $GOSSIP_LIBRARY (or its old name $GOSSIP_LIB); the build tree of the source
    checkout this package was imported from (<checkout>/build/lib/libgossip.so); the
    installed library (ctypes.util.find_library("gossip"), else libgossip.so.0 on the
    dynamic linker's search path). An explicit path (argument or environment) that cannot
    be loaded is an error, not a reason to take another library. The error when nothing
    loads names every place tried."""
    if _lib is not None and path is None:
        return _lib
    explicit = [(path, "the path argument"), (os.environ.get("GOSSIP_LIBRARY"), "$GOSSIP_LIBRARY"),
                (os.environ.get("GOSSIP_LIB"), "$GOSSIP_LIB")]
    for value, what in explicit:
        if value:
            lib = _try_load(value)
            if isinstance(lib, str):
                raise GossipError(EIO, f"cannot load libgossip from {what} ({value}): {lib}")
            return _use(lib, value)
    tried = []
    checkout = _source_checkout_library()
    if checkout is None:
        tried.append("the build tree (not imported from a source checkout)")
    else:
        lib = _try_load(checkout) if os.path.exists(checkout) else "not found"
        if not isinstance(lib, str):
            return _use(lib, checkout)
        tried.append(f"the build tree: {checkout} ({lib})")
    found = ctypes.util.find_library("gossip")
    if not found:
        tried.append('ctypes.util.find_library("gossip") (found none)')
    for name in ([found] if found else []) + ([_SONAME] if found != _SONAME else []):
        lib = _try_load(name)
        if not isinstance(lib, str):
            return _use(lib, name)
        tried.append(f"the installed library: {name} ({lib})")
    raise GossipError(EIO, "cannot find libgossip (build gossipd, install its library, or set GOSSIP_LIBRARY "
                      "to libgossip.so's path); tried: " + "; ".join(tried))


def _try_load(name):
    """The loaded library, or why it could not be loaded (a str)."""
    try:
        lib = ctypes.CDLL(name)
    except OSError as e:
        return str(e)
    if not hasattr(lib, "gossip_connect"):
        return "not libgossip (no gossip_connect)"
    return lib


def _use(lib, name):
    global _lib, _lib_path
    _declare(lib)
    _lib = lib
    _lib_path = _file_of(lib, name)
    return lib


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _file_of(lib, name):
    """The file the dynamic linker loaded `lib` from (dladdr), else `name`."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        if dladdr(ctypes.cast(lib.gossip_connect, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return name


def library_path():
    """The file libgossip was loaded from (loads it if needed)."""
    load_library()
    return _lib_path


def library_version():
    """The loaded libgossip's version (loads it if needed): gossip_version() where the
    C ABI has it, else the version in the library's real file name (libgossip.so.X.Y.Z,
    as CMake names it), else None."""
    lib = load_library()
    fn = getattr(lib, "gossip_version", None)
    if fn is not None:
        fn.argtypes = []
        fn.restype = ctypes.c_char_p
        v = fn()
        return v.decode() if v else None
    m = re.search(r"\.so\.(\d+\.\d+\.\d+)$", os.path.realpath(_lib_path or ""))
    return m.group(1) if m else None


def _declare(lib):
    P = ctypes.c_void_p
    lib.gossip_connect.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int,
                                   ctypes.POINTER(P)]
    lib.gossip_attach.argtypes = [P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                  ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
                                  ctypes.POINTER(ctypes.c_int)]
    lib.gossip_model.argtypes = [P, ctypes.POINTER(_ModelInfo)]
    lib.gossip_next_step_syncs.argtypes = [P]
    lib.gossip_step.argtypes = [P, ctypes.POINTER(_StepResult)]
    lib.gossip_sync.argtypes = [P, ctypes.POINTER(_StepResult)]
    if hasattr(lib, "gossip_start"):  # absent from libraries before 0.1's start-up broadcast
        lib.gossip_start.argtypes = [P, ctypes.POINTER(_StepResult)]
        lib.gossip_start.restype = ctypes.c_int
    if hasattr(lib, "gossip_model_schedule"):  # and before streamed syncs
        lib.gossip_model_schedule.argtypes = [P, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64)]
        lib.gossip_model_schedule.restype = ctypes.c_int
    if hasattr(lib, "gossip_attach_dtype"):  # and before 16-bit arenas
        lib.gossip_attach_dtype.argtypes = [P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                            ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                                            ctypes.POINTER(P), ctypes.POINTER(ctypes.c_int)]
        lib.gossip_attach_dtype.restype = ctypes.c_int
    if hasattr(lib, "gossip_send_bucket"):  # and before its buckets
        lib.gossip_send_bucket.argtypes = [P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
        lib.gossip_buckets_answered.argtypes = [P, ctypes.POINTER(ctypes.c_uint64)]
        lib.gossip_wait_buckets.argtypes = [P, ctypes.POINTER(_StepResult)]
        for f in ("gossip_send_bucket", "gossip_buckets_answered", "gossip_wait_buckets"):
            getattr(lib, f).restype = ctypes.c_int
    if hasattr(lib, "gossip_report_loss"):  # and before the daemon watched the loss
        lib.gossip_report_loss.argtypes = [P, ctypes.c_double]
        lib.gossip_report_loss.restype = ctypes.c_int
    lib.gossip_detach.argtypes = [P]
    lib.gossip_close.argtypes = [P]
    lib.gossip_close.restype = None
    lib.gossip_last_error.argtypes = [P]
    lib.gossip_last_error.restype = ctypes.c_char_p
    for f in ("gossip_connect", "gossip_attach", "gossip_model", "gossip_next_step_syncs", "gossip_step",
              "gossip_sync", "gossip_detach"):
        getattr(lib, f).restype = ctypes.c_int


class Client:
    """One trainer's connection to its node's daemon (not thread-safe: one per thread)."""

    def __init__(self, endpoint, trainer="python", local_rank=0, timeout=120.0, library=None):
        self._lib = load_library(library)
        self._c = ctypes.c_void_p()
        rc = self._lib.gossip_connect(endpoint.encode(), trainer.encode(), local_rank, int(timeout * 1000),
                                      ctypes.byref(self._c))
        if rc != OK:
            raise GossipError(rc, self._lib.gossip_last_error(None).decode(errors="replace"))
        self.model = None
        # Called before the arena is unmapped (detach, close): whoever registered its
        # pages elsewhere (gossipd.torch with CUDA) lets go of them there first.
        self.before_unmap = []

    def _check(self, rc):
        if rc < 0:
            raise GossipError(rc, self._lib.gossip_last_error(self._c).decode(errors="replace"))
        return rc

    def attach(self, layout, dtype="f32"):
        """layout: [(name, numel), ...] in the node's order; dtype: the replica's element
        type, f32, bf16 or f16, one for the whole model (the daemon averages in fp32 and
        rounds back to it). Fails with the daemon's message when it differs from the
        layout the node already has."""
        if self.model is not None:
            raise GossipError(EINVAL, "already attached")
        n = len(layout)
        if n == 0:
            raise GossipError(EINVAL, "attach: the layout is empty")
        element = {"f32": ctypes.c_float, "bf16": ctypes.c_uint16, "f16": ctypes.c_uint16}.get(dtype)
        if element is None:
            raise GossipError(EINVAL, f"attach: dtype '{dtype}' (valid: f32, bf16, f16)")
        names = (ctypes.c_char_p * n)(*[name.encode() for name, _ in layout])
        numels = (ctypes.c_uint64 * n)(*[int(numel) for _, numel in layout])
        initialized = ctypes.c_int(0)
        if hasattr(self._lib, "gossip_attach_dtype"):
            ptrs = (ctypes.c_void_p * n)()
            self._check(self._lib.gossip_attach_dtype(self._c, n, names, numels, dtype.encode(), ptrs,
                                                      ctypes.byref(initialized)))
            addresses = [ptrs[i] for i in range(n)]
        elif dtype == "f32":
            ptrs = (ctypes.POINTER(ctypes.c_float) * n)()
            self._check(self._lib.gossip_attach(self._c, n, names, numels, ptrs, ctypes.byref(initialized)))
            addresses = [ctypes.addressof(ptrs[i].contents) for i in range(n)]
        else:
            raise GossipError(EINVAL, f"attach: this libgossip ({library_version()}) has f32 arenas only")
        info = _ModelInfo()
        self._check(self._lib.gossip_model(self._c, ctypes.byref(info)))
        fragments, overlap = ctypes.c_uint64(1), ctypes.c_uint64(0)
        if hasattr(self._lib, "gossip_model_schedule"):
            self._check(self._lib.gossip_model_schedule(self._c, ctypes.byref(fragments), ctypes.byref(overlap)))
        buffers = [(element * int(numel)).from_address(addresses[i]) for i, (_, numel) in enumerate(layout)]
        base = addresses[0]  # the replica's first tensor is at its start
        offsets = [(a - base) // ctypes.sizeof(element) for a in addresses]
        self.model = Model([name for name, _ in layout], buffers, bool(initialized.value), info.node, info.nodes,
                           info.start_step, info.strategy.decode(), bool(info.gradients), offsets, dtype,
                           int(fragments.value), int(overlap.value))
        return self.model

    def next_step_syncs(self):
        return bool(self._check(self._lib.gossip_next_step_syncs(self._c)))

    def _result(self, call):
        r = _StepResult()
        self._check(call(self._c, ctypes.byref(r)))
        return StepResult(r.step, bool(r.synced), r.round, r.payload_sent, r.payload_recv, r.wire_sent, r.wire_recv)

    def report_loss(self, loss):
        """A step's training loss (a float or a one-element tensor) for the daemon's
        divergence watch: a NaN, an Inf or a loss ten times its first is an error there
        (and fails the syncs under --on-divergence stop). The next synchronization carries
        the mean of the losses reported since the last one. Optional."""
        if hasattr(self._lib, "gossip_report_loss"):
            self._check(self._lib.gossip_report_loss(self._c, float(loss)))

    def step(self):
        """Counts one local step; at synchronization points it blocks until the daemon
        has written the synchronized model into the buffers."""
        return self._result(self._lib.gossip_step)

    def sync(self):
        """A synchronization round now; collective (every trainer of every node)."""
        return self._result(self._lib.gossip_sync)

    def start(self):
        """Once after attach() when model.initialized is False and the buffers hold this
        trainer's initial model: blocks until they hold node 0's instead (node 0's
        trainer publishes its own), so that every replica starts from one model."""
        if not hasattr(self._lib, "gossip_start"):
            raise GossipError(EINVAL, f"the loaded libgossip ({_lib_path}) has no gossip_start: "
                              "it is older than this package")
        return self._result(self._lib.gossip_start)

    def _need(self, fn):
        if not hasattr(self._lib, fn):
            raise GossipError(EINVAL, f"the loaded libgossip ({_lib_path}) has no {fn}: it is older than this "
                              "package")

    def send_bucket(self, offset, numel, last):
        """Gradient strategies: this step's gradients in elements [offset, offset + numel)
        of the buffers (as one flat replica) are ready; the daemon averages them while
        backward goes on. `last` on the step's final bucket, then wait_buckets()."""
        self._need("gossip_send_bucket")
        self._check(self._lib.gossip_send_bucket(self._c, int(offset), int(numel), 1 if last else 0))

    def buckets_answered(self):
        """How many of this step's buckets the daemon has averaged already (no blocking)."""
        self._need("gossip_buckets_answered")
        n = ctypes.c_uint64(0)
        self._check(self._lib.gossip_buckets_answered(self._c, ctypes.byref(n)))
        return n.value

    def wait_buckets(self):
        """Blocks until every bucket of the step is averaged; counts the step."""
        self._need("gossip_wait_buckets")
        return self._result(self._lib.gossip_wait_buckets)

    def last_step(self):
        """The run's last step() (call it instead): the step, then a synchronization
        unless that step was one, as every trainer of a cluster ends (gossip-train
        too), so that all end with the model every node holds."""
        r = self.step()
        return r if r.synced else self.sync()

    def _unmapping(self):
        hooks, self.before_unmap = getattr(self, "before_unmap", []), []
        for hook in reversed(hooks):
            hook()

    def detach(self):
        if self.model is not None:
            self._unmapping()
            self.model = None  # the buffers die with the mapping
            self._check(self._lib.gossip_detach(self._c))

    def close(self):
        if self._c:
            self._unmapping()
            self._lib.gossip_close(self._c)
            self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
