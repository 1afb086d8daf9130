"""The replica of a trainer whose tensors do not live in the arena (a CUDA model, or
attach_module(staging="always")): one flat tensor on the trainer's device, laid out as
the arena is (each tensor at its offset, the padding between them included), into
which the module's tensors are re-pointed. A synchronization then crosses between the
device and the arena in one copy each way, page-locked where CUDA allows, instead of
one per tensor from Python; gradient buckets cross as contiguous ranges on a copy
stream of their own while backward goes on, and reach the daemon once they landed.

On the CPU the same code runs with plain copies and nothing asynchronous, which is how
the suite tests it without a GPU (tests/client/python_torch_staging_test.py)."""

import ctypes

import torch

_ELEMENT_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


class Staging:
    """The flat replica on `device` and the arena's replica seen as one host tensor.

    Contract: the arena is written by the daemon only inside client calls (step, sync,
    start) and, with gradient buckets, after a bucket is sent; callers settle() before
    any of them, so that a device copy still reading the arena has finished."""

    def __init__(self, client, model, tensors, dtype, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        last = len(tensors) - 1
        total = model.offsets[last] + tensors[last].numel()
        base = ctypes.addressof(model.buffers[0])  # the replica's first tensor is at its start
        region = (ctypes.c_char * (total * _ELEMENT_BYTES[model.dtype])).from_address(base)
        self.host = torch.frombuffer(region, dtype=dtype)
        self.flat = torch.zeros(total, dtype=dtype, device=self.device)
        self.views = [self.flat[o:o + t.numel()].view(t.shape) for o, t in zip(model.offsets, tensors)]
        self.pinned = self.cuda and _pin(client, region, total * _ELEMENT_BYTES[model.dtype])
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.inbound = None  # the event after the last copy from the arena, while it may read it
        if self.cuda:
            # Hooks run last first: no copy may read or write the arena once it is
            # unregistered and unmapped (a detach right after finish(), a failed step).
            client.before_unmap.append(self.quiesce)

    def quiesce(self):
        """Returns once no copy of ours touches the arena."""
        self.settle()
        if self.copy_stream is not None:
            self.copy_stream.synchronize()

    def written(self):
        """What a copy into the flat replica on the current stream is known by: the copy
        of its bucket to the arena waits for it (the hooks of one bucket may run on
        different streams). None on the CPU."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def to_host(self, offset=0, numel=None):
        """The arena's range [offset, offset + numel) gets the device's; returns once it has."""
        self.settle()
        end = self.flat.numel() if numel is None else offset + numel
        with torch.no_grad():
            self.host[offset:end].copy_(self.flat[offset:end])
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()

    def to_host_async(self, offset, numel, written=()):
        """Starts the copy of a range to the arena after the copies into it that `written`
        holds (written() of each) and what the current stream has queued; returns what
        ready() and wait() take."""
        if not self.cuda:
            self.to_host(offset, numel)
            return None
        self.settle()
        for event in list(written) + [self.written()]:
            if event is not None:
                self.copy_stream.wait_event(event)
        with torch.no_grad(), torch.cuda.stream(self.copy_stream):
            self.host[offset:offset + numel].copy_(self.flat[offset:offset + numel], non_blocking=self.pinned)
        landed = torch.cuda.Event()
        landed.record(self.copy_stream)
        return landed

    @staticmethod
    def ready(token):
        return token is None or token.query()

    @staticmethod
    def wait(token):
        if token is not None:
            token.synchronize()

    def to_device(self):
        """The device's replica gets the arena's. Asynchronous from page-locked memory:
        the current stream orders it before the kernels that read the tensors next."""
        with torch.no_grad():
            self.flat.copy_(self.host, non_blocking=self.pinned)
        if self.pinned:
            self.inbound = torch.cuda.Event()
            self.inbound.record(torch.cuda.current_stream(self.device))

    def settle(self):
        """Returns once no copy reads the arena any more (before the daemon may write it)."""
        if self.inbound is not None:
            self.inbound.synchronize()
            self.inbound = None


def copy_tensors(dst, src):
    """dst[i] <- src[i], in one call where torch has it (2.1 and later)."""
    if not dst:
        return
    with torch.no_grad():
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(dst, src)
        else:
            for d, s in zip(dst, src):
                d.copy_(s)


def _cudart():
    """The CUDA runtime library this process's torch uses (ctypes), or None. Its own
    cudaGetLastError is needed: a failed cudaHostRegister leaves an error behind that
    torch's next kernel launch check would raise as its own."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
        for path in sorted(paths):
            lib = ctypes.CDLL(path)
            for name in ("cudaHostRegister", "cudaHostUnregister", "cudaGetLastError"):
                getattr(lib, name).restype = ctypes.c_int
            lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
            lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
            return lib
    except (OSError, AttributeError):
        pass
    return None


def _pin(client, region, nbytes):
    """Page-locks the arena's replica for CUDA (cudaHostRegister), so that the staging
    copies are DMA transfers from shared memory, without a bounce buffer, and may be
    asynchronous. Unregistered before the arena is unmapped (Client.before_unmap): a
    registration outliving its mapping would pin pages that a later mapping at the same
    address does not own. Best effort: returns False where the runtime refuses, and the
    copies go unpinned (synchronous, slower)."""
    import mmap
    torch.cuda.init()  # the runtime torch uses is loaded (and its context made)
    cudart = _cudart()
    if cudart is None or nbytes == 0:
        return False
    page = mmap.PAGESIZE
    lo = ctypes.addressof(region) // page * page
    hi = -(-(ctypes.addressof(region) + nbytes) // page) * page
    if cudart.cudaHostRegister(lo, hi - lo, 0) != 0:
        cudart.cudaGetLastError()  # not sticky: cleared, and the copies go unpinned
        return False
    client.before_unmap.append(lambda: (cudart.cudaHostUnregister(lo), cudart.cudaGetLastError()))
    return True
