"""Overlapped data parallelism: :class:`DistributedDataParallel`, the design of PyTorch's DDP
(Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
VLDB, arXiv:2006.15704, §3.2), lesson 02's second version (the first, naive DP, is
:mod:`minipar.dp.sync`):

- gradients are grouped into *buckets* of about ``bucket_cap_mb`` megabytes, in **reverse**
  parameter order (:mod:`minipar.dp.buckets`, §3.2.2 "gradient bucketing");
- a hook on every parameter (``Tensor.register_post_accumulate_grad_hook``) writes its gradient
  divided by N into its bucket, in one pass (``torch.div(..., out=)``, as PyTorch's reducer does with
  ``at::mul_out``: a copy and then a division of the bucket read and wrote it twice; N is a 0-dim
  tensor, since a Python number is wrapped into a new one on every call); when a bucket is full its
  ``all_reduce`` (a sum of the divided gradients: the mean) is launched
  *asynchronously* (``async_op=True``), so it travels while backward computes earlier layers
  (§3.2.3 "overlap computation with communication"). Buckets are launched in index order on
  every rank: collectives issued in different orders on different ranks would silently mix
  data. When each finished is polled from the hooks (``Work.is_completed()``), not reported by a
  Python callback on its future: such a callback runs on gloo's thread, which must then wait for
  the GIL, held by backward's Python code, before it starts the next bucket;
- at the end of backward (an autograd-engine callback) every bucket is waited for and each
  ``p.grad`` becomes its view of the bucket, which holds the average (no copy back: PyTorch's
  ``gradient_as_bucket_view=True``), so ``loss.backward(); opt.step()`` reads exactly as on
  one device;
- ``no_sync()`` skips communication for gradient accumulation over micro-batches (§3.2.4).

Bytes per step (ring all-reduce, Patarasuk & Yuan 2009): every rank sends and receives
2(N−1)/N · 4Ψ bytes for Ψ fp32 parameters, whatever the bucket size; buckets change how many
messages carry them (latency) and how much of that time hides behind backward.

Stepping inside ``no_sync()`` is caught: each instance registers an optimizer step pre-hook
(``torch.optim.optimizer.register_optimizer_step_pre_hook``, which sees every optimizer) that
raises :class:`ConfigError` when an optimizer that owns this model's parameters steps while
gradients from a ``no_sync()`` backward are still un-averaged (they differ across ranks, so the
replicas would drift apart). The hook belongs to the instance, like its gradient hooks: it holds
only a weak reference to it and is removed with them by :meth:`DistributedDataParallel.remove_hooks`,
or when the instance is garbage-collected (the gradient hooks keep an instance alive while its
parameters live, so a wrapper that is not kept still averages gradients, as a learner expects).
"""

from __future__ import annotations

import contextlib
import functools
import time
import weakref

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from minipar.comm.comm_log import label
from minipar.dp.buckets import Bucket, make_buckets
from minipar.dp.sync import sync_parameters
from minipar.errors import ConfigError


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
                "(or call minipar.runtime.dist.init() for a one-process world)"
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
        # the divisor N, 0-dim (module doc); on the CPU: a 0-dim CPU tensor is a scalar to any device's kernels
        self._world = torch.tensor(float(self.world_size), device="cpu")
        self._next = 0  # next bucket to launch (launch order = index order)
        self._done = 0  # next launched bucket not yet seen finished
        self._callback_queued = False
        self.unsynced_backwards = 0  # backward passes run under no_sync() since the last sync
        self.last_step: list[dict] = []
        self.last_times: dict = {}
        self._handles = [p.register_post_accumulate_grad_hook(self._grad_ready) for _, p in named]
        # Owned by this instance: a weak reference (the hook does not keep it alive), removed with
        # the other hooks (remove_hooks) or when the instance is collected (finalize).
        step_hook = register_optimizer_step_pre_hook(functools.partial(_check_before_step, weakref.ref(self)))
        self._handles.append(step_hook)
        weakref.finalize(self, step_hook.remove)

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
        self._note_done()
        bucket, i = self._where[id(p)]
        torch.div(p.grad, self._world, out=bucket.views[i])  # into the bucket, divided by N (p.grad may be this view)
        bucket.ready.add(i)
        if len(bucket.ready) == len(bucket.params):
            bucket.t_ready = time.perf_counter()
            if self.overlap:
                self._launch_ready()

    def _launch(self, bucket: Bucket) -> None:
        with label(f"bucket {bucket.index}"):
            bucket.work = dist.all_reduce(bucket.buffer, op=dist.ReduceOp.SUM, group=self.process_group, async_op=True)
        bucket.t_launch = time.perf_counter()
        self._next += 1

    def _note_done(self) -> None:
        """Record when launched all-reduces finished, polled on this thread in launch order (a bucket is
        noted once every bucket before it is)."""
        while self._done < self._next and self.buckets[self._done].work.is_completed():
            self.buckets[self._done].t_done = time.perf_counter()
            self._done += 1

    def _launch_ready(self) -> None:
        """Launch every full bucket from ``self._next`` on, stopping at the first one not full."""
        while self._next < len(self.buckets) and self.buckets[self._next].t_ready is not None:
            self._launch(self.buckets[self._next])

    def _end_of_backward(self) -> None:
        """Autograd callback after the last gradient: wait for every bucket; ``p.grad`` becomes its view of it."""
        self._callback_queued = False
        t_end = time.perf_counter()
        if not self.require_backward_grad_sync:
            self.unsynced_backwards += 1
            return
        for b in self.buckets[self._next :]:  # no-overlap mode, or parameters that got no gradient
            for i in set(range(len(b.params))) - b.ready:
                p = b.params[i]
                if p.grad is not None and p.grad.data_ptr() == b.views[i].data_ptr():
                    p.grad = p.grad.clone()  # an unused parameter keeps its gradient, as on one device
                b.views[i].zero_()
            b.t_ready = b.t_ready or t_end
        self._launch_ready()
        self._note_done()
        for b in self.buckets:
            b.work.wait()
            b.t_done = b.t_done or time.perf_counter()
            for i in b.ready:
                b.params[i].grad = b.views[i]  # the average, in place: nothing is copied back
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
        self._next = self._done = 0
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
        """Detach from the parameters and the optimizers (the module works on its own again)."""
        for h in self._handles:
            h.remove()
        self._handles = []


def _check_before_step(ddp_ref, optimizer, args, kwargs) -> None:
    """Optimizer step pre-hook of one instance: raise if ``optimizer`` steps on its un-averaged gradients."""
    ddp = ddp_ref()
    if ddp is None or not ddp.unsynced_backwards:
        return
    if not {id(p) for g in optimizer.param_groups for p in g["params"]}.isdisjoint(ddp._where):
        ddp.check_synchronized()
