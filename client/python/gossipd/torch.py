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
CUDA parameters are staged (gossipd/staging.py): re-pointed into one flat tensor on
their GPU, laid out as the arena, which crosses to the arena in one copy each way at
synchronization points, page-locked (cudaHostRegister) where the CUDA runtime allows;
CUDA IPC handles are not supported by the daemon yet.
tests/client/python_torch_cuda_test.py runs this path on a GPU, and
python_torch_staging_test.py the same code on the CPU. For the `allreduce`
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

from . import staging as _staging  # noqa: E402  (needs torch, imported above)

__all__ = ["AttachedModule", "attach_module", "CommHookState", "comm_hook", "DistributedOptimizer", "scale_lr",
           "warmup_lr"]


class AttachedModule:
    def __init__(self, client, module, model, params, arena, staging=None, buffers=(), buffer_arena=()):
        self.client = client
        self.module = module
        self.model = model      # gossipd.Model
        self.params = params    # the module's parameters, in layout order
        # Where each tensor's slot is, shaped like it: views of the arena, or with staging
        # (CUDA) of the device's flat replica, which crosses to the arena in one copy.
        self.arena = arena
        self.staging = staging  # a staging.Staging, or None: the tensors live in the arena
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

    @property
    def staged(self):
        return self.staging is not None

    def _gradients_to_slots(self):
        with torch.no_grad():
            for p, a in zip(self.params, self.arena):
                a.copy_(p.grad if p.grad is not None else torch.zeros_like(p))

    def _gradients_from_slots(self):
        """The mean into .grad (frozen parameters keep none, so that no optimizer moves them)."""
        dst, src = [], []
        for p, a in zip(self.params, self.arena):
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dst.append(p.grad)
            src.append(a)
        _staging.copy_tensors(dst, src)

    def to_arena(self):
        if self.gradient_mode:
            self._gradients_to_slots()
        if self.staging is not None:
            self.staging.to_host()  # the buffers live in the flat replica: in it too
        elif self.gradient_mode:
            with torch.no_grad():
                for b, a in zip(self.buffers, self.buffer_arena):
                    a.copy_(b)

    def from_arena(self):
        if self.staging is not None:
            self.staging.to_device()
        elif self.gradient_mode:
            with torch.no_grad():
                for b, a in zip(self.buffers, self.buffer_arena):
                    b.copy_(a)
        if self.gradient_mode:
            self._gradients_from_slots()

    def _settle(self):
        if self.staging is not None:
            self.staging.settle()

    def step(self):
        """One local step done: the client's step, with staging around synchronization points."""
        if self.buckets is not None:
            return self._step_buckets()
        sync = self.gradient_mode or self.client.next_step_syncs()
        if sync and (self.gradient_mode or self.staged):
            self.to_arena()
        self._settle()
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
            if self.staging is None:
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
        if self.staged:
            self.to_arena()
        self._settle()
        self.last = self.client.sync()
        if self.staged:
            self.from_arena()
            self._settle()  # the run is over: the copy back has landed before anything unmaps
        return self.last


class _Buckets:
    """Wait-free backpropagation (Horovod's and DDP's overlap): the parameters cut, in
    reverse order (the order backward produces their gradients), into buckets of about
    `cap` bytes, each a contiguous range of the replica; a hook on each parameter copies
    its gradient into the arena as backward computes it, and a complete bucket goes to
    the daemon at once, in bucket order, while backward computes the next. The buffers
    (and anything backward did not reach) go in one more bucket at step().

    Staged (a CUDA model): the hooks copy into the device's flat replica, a complete
    bucket's range crosses to the arena on the copy stream, and it goes to the daemon
    once it landed; each hook sends those that did, in order, without waiting for the
    others, and step() waits for the rest."""

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
            if self.attached.staging is not None:
                self.written[self.bucket_of[i]].append(self.attached.staging.written())
            self.mark_ready(i)
            self.send_ready()
            return grad
        return hook

    def send_ready(self, final=False):
        """Sends every bucket, in order, whose parameters are all in; with final, the
        buffers' bucket too, and (staged) after waiting for every copy to the arena."""
        staging = self.attached.staging
        while self.copied < len(self.ranges):
            b = self.copied
            if self.missing[b]:
                break
            if not self.members[b] and not final:
                break  # the buffers' bucket waits for step()
            offset, numel = self.ranges[b]
            self.landing.append(staging.to_host_async(offset, numel, self.written[b])
                                if staging is not None else None)
            self.copied += 1
        while self.sent < self.copied:
            token = self.landing[self.sent]
            if not final and not _staging.Staging.ready(token):
                return
            _staging.Staging.wait(token)
            offset, numel = self.ranges[self.sent]
            self.client.send_bucket(offset, numel, last=self.sent == len(self.ranges) - 1)
            self.sent_at.append(time.monotonic())
            self.sent += 1

    def mark_ready(self, i):
        self.ready[i] = True
        self.missing[self.bucket_of[i]] -= 1

    def reset(self):
        """A new step: every parameter that can have a gradient is awaited again."""
        self.ready = list(self.frozen)
        self.missing = [sum(not self.frozen[i] for i in members) for members in self.members]
        self.copied = 0     # buckets whose copy to the arena started (unstaged: is done)
        self.landing = []   # each copied bucket's Staging token
        self.written = [[] for _ in self.ranges]  # staged: each bucket's Staging.written() events
        self.sent = 0
        self.sent_at = []  # time.monotonic() of each bucket's send, this step

    def remove(self):
        for h in self.handles:
            h.remove()


# The arena's element types and their torch dtypes.
_ARENA_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


def attach_module(client, module, names=None, buffers="average", initial="node0", bucket_cap_mb=25,
                  staging="auto"):
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
    that averaging overlaps backward; None hands them all in at step().

    Tensors on a GPU are staged: re-pointed into one flat replica on their device, laid
    out as the arena, which crosses to the page-locked arena in one copy each way at
    synchronization points (gradient buckets as backward produces them, on a copy
    stream). staging="always" stages CPU tensors too (one copy each way instead of
    none: for tests of that path, or tensors that must not move into shared memory)."""
    if buffers not in ("average", "none"):
        raise ValueError(f"buffers='{buffers}': 'average' or 'none'")
    if initial not in ("node0", "own"):
        raise ValueError(f"initial='{initial}': 'node0' or 'own'")
    if staging not in ("auto", "always"):
        raise ValueError(f"staging='{staging}': 'auto' or 'always'")
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
    tensors = params + [b for _, b in shared]
    devices = {t.device for t in tensors}
    staged = staging == "always" or any(d.type != "cpu" for d in devices)
    if staged and len(devices) > 1:
        where = {}
        for n, t in zip(order + [f"buffer:{n}" for n, _ in shared], tensors):
            where.setdefault(t.device, n)
        raise ValueError("the module's tensors are on several devices (" +
                         ", ".join(f"{n} on {d}" for d, n in where.items()) + "): one device per trainer")
    model = client.attach(layout, dtype=_ARENA_DTYPES[dtype])
    if staged:
        stage = _staging.Staging(client, model, tensors, dtype, devices.pop())
        views = stage.views
    else:
        stage = None
        views = [torch.frombuffer(buf, dtype=dtype).view(t.shape) for buf, t in zip(model.buffers, tensors)]
    arena, buffer_arena = views[:len(params)], views[len(params):]
    with torch.no_grad():
        if stage is not None and model.initialized:
            stage.to_device()  # the node's model, into every slot at once
        for i, (t, a) in enumerate(zip(tensors, views)):
            if model.gradients and i < len(params):
                continue  # the arena carries gradients; the parameters stay where they are
            if model.initialized and not model.gradients:
                if stage is None:
                    t.copy_(a)  # the node's model wins over this trainer's init
            else:
                a.copy_(t.detach())  # buffer slots carry values, whatever the mode
            if stage is not None or not model.gradients:
                t.data = a  # zero copy (staged: one copy each way) from now on
        if stage is not None and (model.gradients or not model.initialized):
            stage.to_host()  # not over a node's model that its round may be writing
    if not model.initialized and initial == "node0":
        _start_from_node0(client, model, params, arena, stage, [b for _, b in shared], buffer_arena)
    attached = AttachedModule(client, module, model, params, arena, stage,
                              [b for _, b in shared], buffer_arena)
    if stage is not None and stage.cuda and not stage.pinned and bucket_cap_mb is not None:
        # Without page-locked memory a bucket's copy would block backward's thread in its
        # hook until the GPU caught up: the gradients go at step(), in one copy.
        import warnings
        warnings.warn("gossipd: the arena could not be page-locked for CUDA (cudaHostRegister "
                      "refused), so gradient buckets are off and copies are synchronous")
        bucket_cap_mb = None
    if model.gradients and bucket_cap_mb is not None:
        attached.buckets = _Buckets(attached, bucket_cap_mb * 1024 * 1024)
    return attached


def _start_from_node0(client, model, params, arena, stage, buffers, buffer_arena):
    """The arena's slots get this module's values (in gradient mode they carry
    gradients later, so the parameters pass through them once), then node 0's: the
    parameters and buffers that live in the arena (or the staged replica) have them
    already; the others are copied back."""
    with torch.no_grad():
        if model.gradients:
            for p, a in zip(params, arena):
                a.copy_(p.detach())
        if stage is not None:
            stage.to_host()
        client.start()
        if stage is not None:
            stage.to_device()
            stage.settle()
        if model.gradients:
            for p, a in zip(params, arena):
                p.copy_(a)
            if stage is None:  # gradient mode leaves the buffers outside the arena
                for b, a in zip(buffers, buffer_arena):
                    b.copy_(a)


class DistributedOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer around any other: step() runs it, then steps the client
    (local SGD, gossip, ...); with the allreduce strategy the gradients are averaged
    across the nodes first and the optimizer steps on the mean.

    It shares the inner optimizer's param_groups (the same dicts) and state, so LR
    schedulers, zero_grad(set_to_none=True) and closures work as on the inner one.
    step() returns the closure's loss, as every optimizer does, and reports it to the
    daemon's divergence watch (without a closure, report_loss(loss)); `last` is the client's
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

    def report_loss(self, loss):
        """This step's training loss for the daemon's divergence watch (step(closure)
        reports the closure's by itself); see Client.report_loss."""
        self.attached.client.report_loss(loss.detach() if isinstance(loss, torch.Tensor) else loss)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            # A closure may return anything; a scalar is a loss.
            if isinstance(loss, (int, float)) or (isinstance(loss, torch.Tensor) and loss.numel() == 1):
                self.report_loss(loss)
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
