"""PyTorch on gossipd: a module's parameters in the node's shared-memory arena, and an
optimizer wrapper whose step() also steps the client.

    import gossipd, gossipd.torch
    client = gossipd.Client(endpoint)
    attached = gossipd.torch.attach_module(client, model)     # CPU params now live in the arena
    opt = gossipd.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), attached)
    step = attached.model.start_step    # the node's step: a restarted trainer goes on there
    while step < steps:                   # and an elastic ring may move it (StepResult.step)
        loss = ...; opt.zero_grad(); loss.backward(); opt.step(); step = opt.last.step  # + client.step()
    opt.finish()                                                     # the end-of-run synchronization

At attach every node starts from node 0's module (Client.start(); initial="own" keeps
this trainer's). CPU parameters are re-pointed at the arena, so nothing is copied.
CUDA parameters are staged: copied to the arena before a synchronization point and
back after it, with the arena's pages page-locked for the GPU (cudaHostRegister) where
the CUDA runtime allows; CUDA IPC handles are not supported by the daemon yet.
tests/client/python_torch_cuda_test.py runs this path on a GPU. For the `allreduce`
strategy the arena carries gradients instead: hooks hand them to the daemon in
buckets as backward produces them (wait-free backpropagation), the daemon averages
each while backward goes on, and the optimizer then steps on the mean, as Horovod's
DistributedOptimizer does. comm_hook gives DDP users the same through
DistributedDataParallel.register_comm_hook.
"""

import math
import time

try:
    import torch
except ImportError as e:
    raise ImportError(f"gossipd.torch needs PyTorch ({e}): Debian's python3-torch, or the package's "
                      "'torch' extra (gossipd-client[torch])") from e

__all__ = ["AttachedModule", "attach_module", "CommHookState", "comm_hook", "DistributedOptimizer", "scale_lr",
           "warmup_lr"]


class AttachedModule:
    def __init__(self, client, module, model, params, arena, staged, buffers=(), buffer_arena=()):
        self.client = client
        self.module = module
        self.model = model      # gossipd.Model
        self.params = params    # the module's parameters, in layout order
        self.arena = arena      # torch views of the arena, shaped like params
        self.staged = staged    # True: params are elsewhere (CUDA) and copied through the arena
        # Floating-point buffers (BatchNorm's running statistics, ...), after the
        # parameters in the layout: averaged with them. In gradient mode the arena's
        # other slots carry gradients, and these carry the buffers' values.
        self.buffers = list(buffers)
        self.buffer_arena = list(buffer_arena)
        self.last = None        # the last step's result
        self.buckets = None     # gradient mode with buckets: _Buckets

    @property
    def gradient_mode(self):
        return self.model.gradients

    def to_arena(self):
        with torch.no_grad():
            if self.gradient_mode:
                for p, a in zip(self.params, self.arena):
                    a.copy_(p.grad if p.grad is not None else torch.zeros_like(p))
            elif self.staged:
                for p, a in zip(self.params, self.arena):
                    a.copy_(p.detach())
            if self.gradient_mode or self.staged:
                for b, a in zip(self.buffers, self.buffer_arena):
                    a.copy_(b)

    def from_arena(self):
        with torch.no_grad():
            if self.gradient_mode:
                for p, a in zip(self.params, self.arena):
                    if not p.requires_grad:
                        continue  # frozen: no gradient, so that no optimizer moves it
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    p.grad.copy_(a)
            elif self.staged:
                for p, a in zip(self.params, self.arena):
                    p.copy_(a)
            if self.gradient_mode or self.staged:
                for b, a in zip(self.buffers, self.buffer_arena):
                    b.copy_(a)

    def step(self):
        """One local step done: the client's step, with staging around synchronization points."""
        if self.buckets is not None:
            return self._step_buckets()
        sync = self.gradient_mode or self.client.next_step_syncs()
        if sync:
            self.to_arena()
        r = self.client.step()
        if r.synced or self.gradient_mode:
            self.from_arena()
        self.last = r
        return r

    def _step_buckets(self):
        """Backward handed in the buckets as it produced them (wait-free backpropagation);
        what it did not (parameters without a gradient this step, the buffers) goes now."""
        b = self.buckets
        with torch.no_grad():
            for i, p in enumerate(self.params):
                if not b.ready[i]:
                    self.arena[i].copy_(p.grad if p.grad is not None else torch.zeros_like(p))
                    b.mark_ready(i)
            for buf, a in zip(self.buffers, self.buffer_arena):
                a.copy_(buf)
        b.send_ready(final=True)
        r = self.client.wait_buckets()
        b.reset()
        self.from_arena()
        self.last = r
        return r

    def finish(self):
        """After the last step(): a synchronization unless that step was one of the whole
        model (gossip-train ends the same way), so every node holds the same model.
        Nothing in gradient mode, where every step synchronizes."""
        whole = self.model.fragments == 1 and self.model.overlap == 0
        if self.gradient_mode or (self.last is not None and self.last.synced and whole):
            return self.last
        self.to_arena()
        self.last = self.client.sync()
        self.from_arena()
        return self.last


class _Buckets:
    """Wait-free backpropagation (Horovod's and DDP's overlap): the parameters cut, in
    reverse order (the order backward produces their gradients), into buckets of about
    `cap` bytes, each a contiguous range of the replica; a hook on each parameter copies
    its gradient into the arena as backward computes it, and a complete bucket goes to
    the daemon at once, in bucket order, while backward computes the next. The buffers
    (and anything backward did not reach) go in one more bucket at step()."""

    # As DDP: the first bucket is small, so that averaging starts early in backward.
    FIRST_BUCKET_BYTES = 1 << 20

    def __init__(self, attached, cap_bytes):
        self.attached = attached
        self.client = attached.client
        params = attached.params
        offsets = attached.model.offsets
        self.ranges = []        # (offset, numel) of each bucket in the replica
        self.members = []       # the parameter indices of each bucket
        current, size = [], 0
        limit = min(cap_bytes, self.FIRST_BUCKET_BYTES)
        for i in reversed(range(len(params))):
            current.append(i)
            size += params[i].numel() * params[i].element_size()
            if size >= limit:
                self._close(current, offsets)
                current, size, limit = [], 0, cap_bytes
        if current:
            self._close(current, offsets)
        if attached.buffers:  # the buffers' values, after every parameter in the layout
            first = len(params)
            last = len(offsets) - 1
            self.ranges.append((offsets[first], offsets[last] + attached.buffer_arena[-1].numel() - offsets[first]))
            self.members.append([])
        # Frozen parameters have no gradient to wait for: zeros, ready from the start.
        self.frozen = [not p.requires_grad for p in params]
        with torch.no_grad():
            for i, frozen in enumerate(self.frozen):
                if frozen:
                    attached.arena[i].zero_()
        self.bucket_of = [0] * len(params)
        for b, members in enumerate(self.members):
            for i in members:
                self.bucket_of[i] = b
        self.reset()
        self.handles = [p.register_hook(self._hook(i)) for i, p in enumerate(params) if p.requires_grad]

    def _close(self, members, offsets):
        lo, hi = min(members), max(members)
        numel = offsets[hi] + self.attached.params[hi].numel() - offsets[lo]
        self.ranges.append((offsets[lo], numel))
        self.members.append(members)

    def _hook(self, i):
        arena = self.attached.arena[i]

        def hook(grad):
            if self.ready[i]:  # a second backward before step(): the first one's buckets are out
                raise RuntimeError("gossipd: a second backward() before step() with gradient buckets; "
                                   "accumulate with bucket_cap_mb=None")
            with torch.no_grad():
                arena.copy_(grad)
            self.mark_ready(i)
            self.send_ready()
            return grad
        return hook

    def send_ready(self, final=False):
        """Sends every bucket, in order, whose parameters are all in; with final, the
        buffers' bucket too."""
        while self.sent < len(self.ranges):
            b = self.sent
            if self.missing[b]:
                return
            if not self.members[b] and not final:
                return  # the buffers' bucket waits for step()
            offset, numel = self.ranges[b]
            self.client.send_bucket(offset, numel, last=b == len(self.ranges) - 1)
            self.sent_at.append(time.monotonic())
            self.sent += 1

    def mark_ready(self, i):
        self.ready[i] = True
        self.missing[self.bucket_of[i]] -= 1

    def reset(self):
        """A new step: every parameter that can have a gradient is awaited again."""
        self.ready = list(self.frozen)
        self.missing = [sum(not self.frozen[i] for i in members) for members in self.members]
        self.sent = 0
        self.sent_at = []  # time.monotonic() of each bucket's send, this step

    def remove(self):
        for h in self.handles:
            h.remove()


# The arena's element types and their torch dtypes.
_ARENA_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def attach_module(client, module, names=None, buffers="average", initial="node0", bucket_cap_mb=25):
    """Attaches `module`'s parameters (in named_parameters() order, or in the order of
    `names`) and, with buffers="average" (the default), its floating-point buffers
    (BatchNorm's running mean and variance, anything registered with register_buffer),
    which are averaged with the parameters; buffers="none" leaves them local. Integer
    buffers (num_batches_tracked) are never sent: every replica counts the same steps.
    On CPU the tensors are re-pointed at the arena.

    The parameters are float32, bfloat16 or float16, one dtype for all of them (and for
    the buffers): the arena holds the replica in it (a module.to(torch.bfloat16) model
    takes half the memory and copies of a float32 one), the daemon averages in float32
    and rounds back to it, to nearest even.

    Where the model starts: a node that already trains (another trainer of it, a
    restart that took a peer's state, a checkpoint) hands its model to the module.
    Otherwise, with initial="node0" (the default, as DDP broadcasts rank 0's
    parameters), every node starts from node 0's module, buffers included: load a
    checkpoint into node 0's module before attaching to start the cluster from it.
    initial="own" keeps this module's values (every node must then seed alike).

    With a gradient strategy (allreduce), bucket_cap_mb (25 MB, DDP's default) cuts the
    gradients into buckets that backward hands to the daemon as it produces them, so
    that averaging overlaps backward; None hands them all in at step()."""
    if buffers not in ("average", "none"):
        raise ValueError(f"buffers='{buffers}': 'average' or 'none'")
    if initial not in ("node0", "own"):
        raise ValueError(f"initial='{initial}': 'node0' or 'own'")
    named = dict(module.named_parameters())
    order = list(names) if names is not None else list(named)
    missing = [n for n in order if n not in named]
    if missing:
        raise ValueError(f"the module has no parameter(s) {missing}")
    params = [named[n] for n in order]
    dtype = params[0].dtype if params else torch.float32
    for n, p in zip(order, params):
        if p.dtype not in _ARENA_DTYPES:
            raise ValueError(f"parameter {n} is {p.dtype}; gossipd's arenas hold float32, bfloat16 or float16")
        if p.dtype != dtype:
            raise ValueError(f"parameter {n} is {p.dtype} and {order[0]} {dtype}: one dtype for the whole "
                             "model (module.to(dtype))")
    shared = []
    if buffers == "average":
        shared = [(n, b) for n, b in module.named_buffers() if b.dtype == dtype]
        other = [f"{n} ({b.dtype})" for n, b in module.named_buffers()
                 if b.is_floating_point() and b.dtype != dtype]
        if other:
            raise ValueError(f"buffer(s) {other} are not {dtype} as the parameters are: one dtype for the "
                             "whole model (module.to(dtype), or pass buffers='none')")
    layout = [(n, p.numel()) for n, p in zip(order, params)] + [(f"buffer:{n}", b.numel()) for n, b in shared]
    model = client.attach(layout, dtype=_ARENA_DTYPES[dtype])
    views = [torch.frombuffer(buf, dtype=dtype) for buf in model.buffers]
    tensors = params + [b for _, b in shared]
    views = [v.view(t.shape) for v, t in zip(views, tensors)]
    arena, buffer_arena = views[:len(params)], views[len(params):]
    staged = any(t.device.type != "cpu" for t in tensors)
    if staged:
        _pin(client, model.buffers)
    with torch.no_grad():
        for i, (t, a) in enumerate(zip(tensors, views)):
            if model.gradients:
                if i >= len(params):
                    a.copy_(t)  # buffer slots carry values, whatever the mode
                continue  # the arena carries gradients; the parameters stay where they are
            if model.initialized:
                t.copy_(a)  # the node's model wins over this trainer's init
            else:
                a.copy_(t.detach())
            if not staged:
                t.data = a  # zero copy from now on
    if not model.initialized and initial == "node0":
        _start_from_node0(client, model, tensors, views, staged)
    attached = AttachedModule(client, module, model, params, arena, staged,
                              [b for _, b in shared], buffer_arena)
    if model.gradients and bucket_cap_mb is not None and not staged:
        attached.buckets = _Buckets(attached, bucket_cap_mb * 1024 * 1024)
    return attached


def _start_from_node0(client, model, tensors, views, staged):
    """The arena's slots get this module's values (in gradient mode they carry
    gradients later, so the parameters pass through them once), then node 0's."""
    with torch.no_grad():
        if model.gradients:
            for t, a in zip(tensors, views):
                a.copy_(t.detach())
        client.start()
        if model.gradients or staged:
            for t, a in zip(tensors, views):
                t.copy_(a)


def _cudart():
    """The CUDA runtime library this process's torch uses (ctypes), or None. Its own
    cudaGetLastError is needed: a failed cudaHostRegister leaves an error behind that
    torch's next kernel launch check would raise as its own."""
    import ctypes
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


def _pin(client, buffers):
    """Page-locks the arena's pages for CUDA (cudaHostRegister), so that the staging
    copies are DMA transfers from shared memory, without a bounce buffer. One range
    for all tensors: tensors share pages, and a page registered twice is an error.
    Unregistered before the arena is unmapped (Client.before_unmap): a registration
    outliving its mapping would pin pages that a later mapping at the same address
    does not own. Best effort: unpinned memory still works, only slower."""
    import ctypes
    import mmap
    torch.cuda.init()  # the runtime torch uses is loaded (and its context made)
    cudart = _cudart()
    if cudart is None or not buffers:
        return
    page = mmap.PAGESIZE
    lo = min(ctypes.addressof(b) for b in buffers) // page * page
    hi = -(-max(ctypes.addressof(b) + ctypes.sizeof(b) for b in buffers) // page) * page
    if cudart.cudaHostRegister(lo, hi - lo, 0) != 0:
        cudart.cudaGetLastError()  # not sticky: cleared, and the copies go unpinned
        return
    client.before_unmap.append(lambda: (cudart.cudaHostUnregister(lo), cudart.cudaGetLastError()))


class DistributedOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer around any other: step() runs it, then steps the client
    (local SGD, gossip, ...); with the allreduce strategy the gradients are averaged
    across the nodes first and the optimizer steps on the mean.

    It shares the inner optimizer's param_groups (the same dicts) and state, so LR
    schedulers, zero_grad(set_to_none=True) and closures work as on the inner one.
    step() returns the closure's loss, as every optimizer does; `last` is the client's
    StepResult of that step (the node's step, whether it synchronized, traffic).
    The arena's layout is fixed at attach: add_param_group is refused.

    Mixed precision with a GradScaler, as with Horovod: average first, so that every
    node's scaler sees the same gradients and skips (or not) the same steps, and no
    node leaves the others waiting in a round it never joins:

        scaler.scale(loss).backward()
        opt.synchronize()                 # the round: the mean is in .grad
        scaler.unscale_(opt)              # optional (clipping)
        with opt.skip_synchronize():
            scaler.step(opt)              # may skip the inner step on every node alike
        scaler.update()

    A node whose gradients overflowed (Inf or NaN) does not send them: its daemon's
    guard contributes zeros instead (--nonfinite), so the others step on a finite mean."""

    def __init__(self, optimizer, attached):
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"DistributedOptimizer wraps a torch.optim.Optimizer, not {type(optimizer).__name__}")
        self.optimizer = optimizer
        self.attached = attached
        self.last = None
        self._constructing = True
        super().__init__(optimizer.param_groups, optimizer.defaults)
        self._constructing = False
        self.state = optimizer.state
        self._skip_synchronize = False

    def __repr__(self):
        return f"DistributedOptimizer({self.optimizer!r})"

    def synchronize(self):
        """Gradient strategies: the step's round now (step() then does not run it again
        inside skip_synchronize()); the mean of every node's gradients is in .grad
        afterwards. Nothing for model strategies, which synchronize after the step."""
        if self.attached.gradient_mode:
            self.last = self.attached.step()
        return self.last

    def skip_synchronize(self):
        """A context in which step() only steps the inner optimizer (after synchronize())."""
        import contextlib

        @contextlib.contextmanager
        def skipping():
            self._skip_synchronize = True
            try:
                yield
            finally:
                self._skip_synchronize = False
        return skipping()

    def add_param_group(self, param_group):
        if self._constructing:
            return super().add_param_group(param_group)
        raise ValueError("gossipd: the arena's layout is fixed when the module attaches, so a "
                         "parameter group cannot be added now; attach a module that has every "
                         "parameter, then build the optimizer")

    def zero_grad(self, set_to_none=False):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.attached.gradient_mode:
            if not self._skip_synchronize:
                self.synchronize()  # averages the gradients (and the buffers)
            self.optimizer.step()
        else:
            self.optimizer.step()
            self.last = self.attached.step()
        return loss

    def finish(self):
        self.last = self.attached.finish()
        return self.last

    def state_dict(self):
        """The inner optimizer's state, and the node's step this trainer reached."""
        step = self.last.step if self.last is not None else self.attached.model.start_step
        return {"optimizer": self.optimizer.state_dict(),
                "gossipd": {"step": step, "strategy": self.attached.model.strategy}}

    def load_state_dict(self, state_dict):
        inner = state_dict["optimizer"] if "gossipd" in state_dict else state_dict
        self.optimizer.load_state_dict(inner)
        # load_state_dict replaces the inner optimizer's groups: share the new ones.
        self.param_groups = self.optimizer.param_groups
        self.state = self.optimizer.state


class CommHookState:
    """The state of gossipd's DDP communication hook: a client attached, in gradient mode
    (--strategy allreduce), with one flat tensor as large as the module's gradients.

        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(gossipd.torch.CommHookState(client, model), gossipd.torch.comm_hook)

    DDP keeps its buckets, its start-up broadcast and its buffers; gossipd averages the
    gradients across the nodes with its transport and the node's codec (--codec fp16,
    topk:0.01+ef, ...), as DDP's default hook does with its process group."""

    def __init__(self, client, module, name="ddp.gradients"):
        self.total = sum(p.numel() for p in module.parameters() if p.requires_grad)
        if self.total == 0:
            raise ValueError("the module has no parameter that requires a gradient")
        self.client = client
        self.model = client.attach([(name, self.total)])
        if not self.model.gradients:
            raise ValueError(f"the node's strategy is '{self.model.strategy}': the DDP hook averages gradients "
                             "at every step, which needs --strategy allreduce")
        self.arena = torch.frombuffer(self.model.buffers[0], dtype=torch.float32)
        self.pending = []   # (offset, its flat gradients, its future) of this step's buckets
        self.received = 0
        self.last = None    # the client's StepResult of the last step

    def fail(self, e):
        """DDP raises it from backward(); the step's buckets are dropped."""
        for _, _, fut in self.pending:
            fut.set_exception(e)
        self.pending, self.received = [], 0

    def complete(self):
        """The step's last bucket is out: wait for every mean, then hand each to DDP."""
        try:
            self.last = self.client.wait_buckets()
        except Exception as e:
            return self.fail(e)
        with torch.no_grad():
            for offset, buf, fut in self.pending:
                buf.copy_(self.arena[offset:offset + buf.numel()].view_as(buf))
        pending, self.pending, self.received = self.pending, [], 0
        for _, buf, fut in pending:
            fut.set_result(buf)


def comm_hook(state, bucket):
    """A DDP communication hook (DistributedDataParallel.register_comm_hook) that averages
    each bucket through gossipd. DDP hands the buckets over in order, as backward fills
    them; each goes to the daemon at once (its place in the flat tensor follows the
    buckets before it), so that the daemon averages it while backward computes the
    next. The futures complete when the step's last bucket is averaged."""
    buf = bucket.buffer()
    fut = torch.futures.Future()
    offset = state.received
    state.pending.append((offset, buf, fut))
    state.received += buf.numel()
    if state.received > state.total:
        state.fail(RuntimeError(f"DDP's buckets hold {state.received} gradients, the module {state.total}: "
                                "build CommHookState from the module DDP wraps"))
        return fut
    try:
        with torch.no_grad():
            state.arena[offset:offset + buf.numel()].copy_(buf.reshape(-1))
        state.client.send_bucket(offset, buf.numel(), last=state.received == state.total)
    except Exception as e:
        state.fail(e)
        return fut
    if state.received == state.total:
        state.complete()
    return fut


def scale_lr(lr, nodes, rule="linear"):
    """The learning rate for `nodes` nodes from a single-node one: 'linear' (Goyal et al.
    2017) for synchronous SGD's n-times larger global batch, 'sqrt' (Krizhevsky 2014),
    or 'none' (local SGD and gossip, where each node keeps its own batch)."""
    if rule == "linear":
        return lr * nodes
    if rule == "sqrt":
        return lr * math.sqrt(nodes)
    if rule == "none":
        return lr
    raise ValueError(f"unknown lr scaling rule '{rule}' (linear, sqrt, none)")


def warmup_lr(base_lr, step, warmup_steps, start_factor=0.1):
    """Linear warm-up from start_factor * base_lr to base_lr over warmup_steps steps."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return base_lr
    return base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)
