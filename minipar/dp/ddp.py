"""Data parallelism: every rank holds the whole model, sees 1/N of the global batch, and averages
gradients so every rank takes the same optimizer step (lesson 02).

Two versions, read top to bottom:

1. **Naive DP** — :func:`broadcast_parameters` once, then after every backward
   :func:`all_reduce_gradients`: one blocking ``all_reduce`` per parameter, after backward has
   finished. Simple and correct; communication never overlaps computation, and hundreds of
   small messages each pay the network latency.
2. **DDP** — :class:`DistributedDataParallel`, the design of PyTorch's DDP (Li et al. 2020,
   "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", VLDB,
   arXiv:2006.15704, §3.2):

   - gradients are grouped into *buckets* of about ``bucket_cap_mb`` megabytes, in **reverse**
     parameter order, because backward produces gradients roughly from the last layer to the
     first (§3.2.2 "gradient bucketing");
   - a hook on every parameter (``Tensor.register_post_accumulate_grad_hook``) copies its
     gradient into its bucket; when a bucket is full its ``all_reduce`` is launched
     *asynchronously* (``async_op=True``), so it travels while backward computes earlier layers
     (§3.2.3 "overlap computation with communication"). Buckets are launched in index order on
     every rank: collectives issued in different orders on different ranks would silently mix
     data;
   - at the end of backward (an autograd-engine callback) every bucket is waited for and the
     averaged gradients are copied back into ``p.grad``, so ``loss.backward(); opt.step()``
     reads exactly as on one device;
   - ``no_sync()`` skips communication for gradient accumulation over micro-batches (§3.2.4).

Bytes per step (ring all-reduce, Patarasuk & Yuan 2009): every rank sends and receives
2(N−1)/N · 4Ψ bytes for Ψ fp32 parameters, whatever the bucket size; buckets change how many
messages carry them (latency) and how much of that time hides behind backward.

Stepping inside ``no_sync()`` is caught: a global optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``) raises :class:`ConfigError` when
an optimizer that owns this model's parameters steps while gradients from a ``no_sync()``
backward are still un-averaged (they differ across ranks, so the replicas would drift apart).
"""

from __future__ import annotations

import contextlib
import time
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm.comm_log import label
from minipar.errors import ConfigError


def all_reduce_gradients(model: nn.Module, group=None) -> None:
    """Average ``p.grad`` over the ranks of ``group`` (in place), one ``all_reduce`` per parameter.

    After it every rank holds the gradient of the mean loss over the *global* batch, provided
    each rank's loss is the mean over its equal share. Bytes sent per rank (ring algorithm):
    2(N−1)/N · 4Ψ for Ψ fp32 parameters. A no-op for a world of one.
    """
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """Copy rank ``src``'s parameters and buffers to every rank of ``group`` (start in sync)."""
    if not dist.is_initialized() or dist.get_world_size(group) == 1:
        return
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=src, group=group)


def check_dataset(num_samples: int, global_batch: int, world_size: int) -> dict:
    """Check that ``num_samples`` can be sharded over ``world_size`` ranks in batches of ``global_batch``.

    ``DistributedSampler(drop_last=True)`` gives each rank ``num_samples // world_size`` samples,
    and the loader keeps whole batches only, so an epoch is ``num_samples // global_batch`` steps
    and the last ``num_samples % global_batch`` samples of each (shuffled) epoch are dropped on
    every layout alike: N ranks together see exactly the batches one device sees.

    Returns:
        ``{"local_batch", "steps_per_epoch", "dropped"}`` (samples per rank per step, optimizer
        steps per epoch, samples left out per epoch).
    Raises:
        ConfigError: fewer samples than ranks (every rank would get 0 samples, or — without
            ``drop_last`` — repeated padding samples), a global batch not divisible by the ranks,
            or a global batch larger than the dataset.
    """
    if world_size < 1:
        raise ConfigError(f"world_size={world_size} must be >= 1")
    if num_samples < world_size:
        raise ConfigError(
            f"the dataset has {num_samples} samples but world_size={world_size}: DistributedSampler would give "
            f"each rank {num_samples // world_size} samples (drop_last=True) or pad with repeated samples "
            f"(drop_last=False); use at most {max(1, num_samples)} ranks or a larger dataset"
        )
    if global_batch < 1 or global_batch % world_size:
        lo = global_batch // world_size * world_size
        raise ConfigError(
            f"global batch {global_batch} is not divisible by world_size={world_size}; "
            f"use {lo or world_size} or {lo + world_size}"
        )
    if global_batch > num_samples:
        raise ConfigError(
            f"global batch {global_batch} is larger than the dataset ({num_samples} samples); "
            f"use a global batch of at most {num_samples // world_size * world_size}"
        )
    return {
        "local_batch": global_batch // world_size,
        "steps_per_epoch": num_samples // global_batch,
        "dropped": num_samples % global_batch,
    }


def _src(group) -> int:
    return 0 if group is None else dist.get_process_group_ranks(group)[0]


@torch.no_grad()
def sync_parameters(module: nn.Module, group=None, init_sync: bool = True) -> list[str]:
    """Make every rank start from rank 0's parameters, or prove they already do.

    1. Shapes: ``all_gather_object`` of every parameter's shape; a mismatch would make the
       broadcast fail or mix tensors, so it raises.
    2. Values: rank 0's parameters are broadcast into scratch copies and compared.
       ``init_sync=True`` (PyTorch's default) then copies them in (buffers too);
       ``init_sync=False`` raises if any parameter differs.

    Returns:
        the names of the parameters that differed from rank 0's on this group (before the copy).
    Raises:
        ConfigError: different parameter names/shapes across ranks; with ``init_sync=False``,
            different values (message: first parameter, its largest difference, and the fix).
    """
    named = list(module.named_parameters())
    n = dist.get_world_size(group) if dist.is_initialized() else 1
    if n == 1:
        return []
    shapes = [(name, tuple(p.shape)) for name, p in named]
    every = [None] * n
    dist.all_gather_object(every, shapes, group=group)
    for r, theirs in enumerate(every):
        if theirs != shapes:
            bad = next(((a, b) for a, b in zip(shapes, theirs) if a != b), None)
            what = (
                f"parameter {bad[0][0]!r} has shape {bad[0][1]} here but {bad[1][0]!r} {bad[1][1]} on rank {r}"
                if bad
                else f"{len(shapes)} parameters here but {len(theirs)} on rank {r}"
            )
            raise ConfigError(
                f"the model differs across ranks: {what}; build the same model (same config and "
                "vocabulary) on every rank before wrapping it in DistributedDataParallel"
            )
    diff = torch.zeros(len(named), dtype=torch.float64, device=named[0][1].device if named else None)
    rank0 = []
    for i, (_, p) in enumerate(named):
        t = p.detach().clone()
        dist.broadcast(t, src=_src(group), group=group)
        diff[i] = (t - p).abs().max().double() if p.numel() else 0.0
        rank0.append(t)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX, group=group)
    differ = [named[i][0] for i in range(len(named)) if diff[i] > 0]
    if differ and not init_sync:
        i = int(diff.argmax())
        raise ConfigError(
            f"parameters differ across ranks at start: {named[i][0]!r} by up to {diff[i].item():.3g} from rank 0's"
            f"{f', and {len(differ) - 1} more' if len(differ) > 1 else ''}; seed every rank the same "
            "(torch.manual_seed(seed) before building the model) or pass init_sync=True to copy rank 0's parameters"
        )
    for (_, p), t in zip(named, rank0):
        p.copy_(t)
    for b in module.buffers():
        dist.broadcast(b, src=_src(group), group=group)
    return differ


class Bucket:
    """A group of parameters whose gradients travel in one ``all_reduce``.

    Attributes:
        index: position in launch order (0 = the last layers, whose gradients are ready first).
        params, names: the parameters (reverse model order) and their names.
        buffer: flat tensor, shape ``(sum of numel,)``, the parameters' dtype; gradients are
            copied in by the hooks and the averaged result copied back after the wait.
        nbytes: size of ``buffer`` in bytes.
        t_ready, t_launch, t_done: ``time.perf_counter()`` seconds when its last gradient
            arrived, when its all-reduce was launched, and when it completed (this step).
    """

    def __init__(self, index: int, named: list[tuple[str, nn.Parameter]]):
        self.index = index
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.offsets, total = [], 0
        for p in self.params:
            self.offsets.append(total)
            total += p.numel()
        self.buffer = torch.zeros(total, dtype=self.params[0].dtype, device=self.params[0].device)
        self.nbytes = total * self.buffer.element_size()
        self.reset()

    def reset(self) -> None:
        self.ready: set[int] = set()  # positions in self.params whose gradient is in the buffer
        self.work = self.future = None
        self.t_ready = self.t_launch = self.t_done = None

    def slice(self, i: int) -> torch.Tensor:
        return self.buffer[self.offsets[i] : self.offsets[i] + self.params[i].numel()]


def make_buckets(named: list[tuple[str, nn.Parameter]], bucket_cap_mb: float) -> list[Bucket]:
    """Split ``named`` (already in reverse order) into buckets of at most ``bucket_cap_mb`` MiB each.

    A parameter larger than the cap gets a bucket of its own; a dtype or device change starts a
    new bucket (one flat buffer holds one dtype).
    """
    cap = bucket_cap_mb * 2**20
    groups: list[list] = []
    size = 0
    for name, p in named:
        nbytes = p.numel() * p.element_size()
        new = (
            not groups
            or size + nbytes > cap
            and size > 0
            or groups[-1][-1][1].dtype != p.dtype
            or groups[-1][-1][1].device != p.device
        )
        if new:
            groups.append([])
            size = 0
        groups[-1].append((name, p))
        size += nbytes
    return [Bucket(i, g) for i, g in enumerate(groups)]


class DistributedDataParallel(nn.Module):
    """Wrap ``module`` so ``loss.backward()`` leaves gradients averaged over the data-parallel ranks.

    Mirrors ``torch.nn.parallel.DistributedDataParallel``: ``ddp.module`` is the wrapped model,
    ``ddp(x)`` calls ``module(x)``, ``no_sync()`` accumulates locally. Use::

        model = DistributedDataParallel(GPT(cfg), bucket_cap_mb=1)
        for x, y in loader:                          # x, y: this rank's (B/N, T) share
            _, loss = model(x, y); loss.backward()   # gradients all-reduced, overlapped
            opt.step(); opt.zero_grad()

    Args:
        module: the model, identical on every rank (built from the same config).
        bucket_cap_mb: bucket size in MiB (> 0; PyTorch's default is 25).
        process_group: the data-parallel group (default: the world).
        init_sync: copy rank 0's parameters to every rank at construction (default, as PyTorch);
            ``False``: check they are already equal and raise if not.
        overlap: launch each bucket's all-reduce as soon as it is full (default); ``False``
            launches them all after backward — the no-overlap baseline of the lesson.

    Attributes:
        buckets: the :class:`Bucket` list, launch order.
        differed_at_start: names of parameters that differed from rank 0's before ``init_sync``.
        last_step: per bucket of the last synchronised backward, ``{"bucket", "bytes",
            "params", "ready", "launch", "done"}`` (``perf_counter`` seconds), plus
            ``backward_end`` / ``sync_end`` in :attr:`last_times`.

    Raises:
        ConfigError: ``bucket_cap_mb`` <= 0 or not a number; models that differ across ranks
            (see :func:`sync_parameters`); ``optimizer.step()`` on un-averaged ``no_sync()``
            gradients.
    """

    def __init__(
        self,
        module: nn.Module,
        bucket_cap_mb: float = 25.0,
        process_group=None,
        init_sync: bool = True,
        overlap: bool = True,
    ):
        super().__init__()
        if isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float)) or not bucket_cap_mb > 0:
            raise ConfigError(
                f"bucket_cap_mb={bucket_cap_mb!r} must be a number of MiB > 0; use e.g. "
                "bucket_cap_mb=25 (PyTorch's default) or 1 for a small model"
            )
        if not dist.is_initialized():
            raise ConfigError(
                "DistributedDataParallel needs a process group; run inside minipar.launch or torchrun "
                "(or call minipar.dist.init() for a one-process world)"
            )
        self.module = module
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.overlap = overlap
        self.require_backward_grad_sync = True
        self.differed_at_start = sync_parameters(module, process_group, init_sync)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.buckets = make_buckets(named[::-1], self.bucket_cap_mb)
        self._where = {id(p): (b, i) for b in self.buckets for i, p in enumerate(b.params)}
        self._next = 0  # next bucket to launch (launch order = index order)
        self._callback_queued = False
        self.unsynced_backwards = 0  # backward passes run under no_sync() since the last sync
        self.last_step: list[dict] = []
        self.last_times: dict = {}
        self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for _, p in named]
        _install_step_check()
        _INSTANCES.add(self)

    def forward(self, *args, **kwargs):
        self.last_times = {"forward_start": time.perf_counter()}
        out = self.module(*args, **kwargs)
        self.last_times["forward_end"] = time.perf_counter()
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside this block accumulate gradients locally, without communication.

        Run the *last* micro-batch's backward outside it: that one all-reduces the accumulated
        sum. Stepping the optimizer before that raises :class:`ConfigError`.
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # ---- during backward -------------------------------------------------------------------
    def _grad_ready(self, p: torch.Tensor) -> None:
        """Hook: ``p.grad`` now holds this backward's (accumulated) gradient."""
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_of_backward)
        if not self.require_backward_grad_sync:
            return
        bucket, i = self._where[id(p)]
        bucket.slice(i).copy_(p.grad.reshape(-1))
        bucket.ready.add(i)
        if len(bucket.ready) == len(bucket.params):
            bucket.t_ready = time.perf_counter()
            if self.overlap:
                self._launch_ready()

    def _launch(self, bucket: Bucket) -> None:
        bucket.buffer.div_(self.world_size)  # exact for N a power of two; then sum = mean
        with label(f"bucket {bucket.index}"):
            bucket.work = dist.all_reduce(bucket.buffer, op=dist.ReduceOp.SUM, group=self.process_group, async_op=True)
        bucket.t_launch = time.perf_counter()
        bucket.future = bucket.work.get_future().then(lambda f, b=bucket: setattr(b, "t_done", time.perf_counter()))
        self._next += 1

    def _launch_ready(self) -> None:
        """Launch every full bucket from ``self._next`` on, stopping at the first one not full."""
        while self._next < len(self.buckets) and self.buckets[self._next].t_ready is not None:
            self._launch(self.buckets[self._next])

    def _end_of_backward(self) -> None:
        """Autograd callback after the last gradient: wait for every bucket, write ``p.grad``."""
        self._callback_queued = False
        t_end = time.perf_counter()
        if not self.require_backward_grad_sync:
            self.unsynced_backwards += 1
            return
        for b in self.buckets[self._next :]:  # no-overlap mode, or parameters that got no gradient
            for i in set(range(len(b.params))) - b.ready:
                b.slice(i).zero_()
            b.t_ready = b.t_ready or t_end
        self._launch_ready()
        for b in self.buckets:
            b.work.wait()
            b.future.wait()
            for i in b.ready:
                b.params[i].grad.copy_(b.slice(i).view_as(b.params[i]))
        self.last_times.update(backward_end=t_end, sync_end=time.perf_counter())
        self.last_step = [
            {
                "bucket": b.index,
                "bytes": b.nbytes,
                "params": len(b.params),
                "ready": b.t_ready,
                "launch": b.t_launch,
                "done": b.t_done,
            }
            for b in self.buckets
        ]
        for b in self.buckets:
            b.reset()
        self._next = 0
        self.unsynced_backwards = 0

    def check_synchronized(self) -> None:
        """Raise :class:`ConfigError` if gradients from ``no_sync()`` backward passes are not averaged yet.

        Called automatically before ``step()`` of any ``torch.optim`` optimizer that holds this
        model's parameters.
        """
        if not self.unsynced_backwards:
            return
        where = (
            "inside DistributedDataParallel.no_sync()"
            if not self.require_backward_grad_sync
            else "after no_sync() without a synchronising backward"
        )
        raise ConfigError(
            f"optimizer.step() was called {where}: the gradients of {self.unsynced_backwards} backward pass(es) "
            f"on this rank are not averaged over the {self.world_size} ranks, so the replicas would drift apart; "
            "run the last micro-batch's backward outside `with model.no_sync():`, then call step()"
        )

    def remove_hooks(self) -> None:
        """Detach from the parameters (the module works on its own again)."""
        for h in self._handles:
            h.remove()
        self._handles = []
        _INSTANCES.discard(self)


_INSTANCES: "weakref.WeakSet[DistributedDataParallel]" = weakref.WeakSet()
_STEP_HOOK = None


def _check_before_step(optimizer, args, kwargs) -> None:
    ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for ddp in list(_INSTANCES):
        if ddp.unsynced_backwards and not ids.isdisjoint(ddp._where):
            ddp.check_synchronized()


def _install_step_check() -> None:
    global _STEP_HOOK
    if _STEP_HOOK is None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        _STEP_HOOK = register_optimizer_step_pre_hook(_check_before_step)
