"""How the cluster clock sees communication: scoped wrappers around torch.distributed's functions.

The same approach as :mod:`minipar.comm.comm_log` (read its module doc for why wrappers and not a
dispatch mode): :func:`install` saves each function of :data:`COLLECTIVES` and :data:`P2P` from
``torch.distributed.distributed_c10d`` and ``torch.distributed`` and puts a clocking wrapper in
its place in both; :func:`uninstall` puts the saved ones back wherever the wrapper is still in
place (code that replaced it meanwhile keeps its own). The wrappers are closures over ONE
:class:`~minipar.clock.clock.ClusterClock`: nothing is kept at module level.

Every wrapped collective runs asynchronously underneath (``async_op=True``) and returns a
:class:`ClockedWork` (a blocking call waits for it at once); its start-time exchange is one more
``all_gather`` made through the saved function inside :func:`minipar.comm.comm_log.unrecorded`.
A point-to-point message carries its time stamp IN the message: 16 bytes (two float64) before
the data, one transfer instead of two (a second gloo message per message cost more than the
clock's 1.15× budget on a pipeline step); the receiver's tensor is filled from it in ``wait()``
(``isend``/``irecv`` return a :class:`ClockedWork`). Every rank of the program must run the clock.

With ``CommLog``: a log opened INSIDE the clock sees the program's calls exactly; a log opened
outside it sees what the clock sends: the collectives exactly (the exchange is unrecorded), each
point-to-point message 16 bytes larger.
"""

from __future__ import annotations

import functools
import inspect
import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from minipar.comm.comm_log import tensor_bytes, unrecorded
from minipar.comm.p2p import HEADER_TAG
from minipar.errors import ConfigError

# name -> (algorithm of minipar.clock.clock.collective_time, argument holding the full buffer, × group size)
COLLECTIVES = {
    "all_reduce": ("allreduce", "tensor", False),
    "barrier": ("allreduce", None, False),
    "broadcast": ("chain", "tensor", False),
    "reduce": ("chain", "tensor", False),
    "all_gather": ("ring", "tensor_list", False),
    "all_gather_into_tensor": ("ring", "output_tensor", False),
    "all_gather_single": ("ring", "output_tensor", False),
    "reduce_scatter": ("ring", "input_list", False),
    "reduce_scatter_tensor": ("ring", "input", False),
    "reduce_scatter_single": ("ring", "input", False),
    "all_to_all": ("ring", "input_tensor_list", False),
    "all_to_all_single": ("ring", "input", False),
    "scatter": ("ring", "tensor", True),
    "gather": ("ring", "tensor", True),
}
P2P = ("send", "recv", "isend", "irecv")
_STAMP = 16  # bytes of a point-to-point message's time stamp: (start, end) as two float64
_MARK = "_minipar_cluster_clock"


def _first_tensor(t):
    if isinstance(t, (list, tuple)):
        return next((x for x in t if torch.is_tensor(x)), None)
    return t if torch.is_tensor(t) else None


class ClockedWork:
    """The work of a clocked call: ``wait()`` waits for the real works, then advances the clock
    (once). Other attributes (``get_future``, ``result``, ...) are the main work's."""

    def __init__(self, clock, works: list, finish, deliver=None):
        self._clock, self._works, self._finish, self._deliver = clock, works, finish, deliver
        self._done = self._delivered = False

    def wait(self, timeout=None) -> bool:
        mine = self._clock._owner == threading.get_ident()
        outer = mine and not self._clock._inside  # not the wait of a blocking call's own wrapper
        if outer:
            self._clock._tick()
        for w in self._works:
            w.wait(timeout) if timeout is not None else w.wait()
        if self._deliver is not None and not self._delivered:
            self._delivered = True
            self._deliver()
        if mine and not self._done:
            self._done = True
            self._finish()
        if outer:
            self._clock._resume()
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def __getattr__(self, name):
        return getattr(self._works[0], name)


def _ranks(group) -> list[int]:
    return dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))


def _collective(clock, name: str, fn, saved: dict):
    algo, buf_arg, times_n = COLLECTIVES[name]
    sig = inspect.signature(fn)
    gather = saved["all_gather_single" if "all_gather_single" in saved else "all_gather_into_tensor"][0]

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if clock._inside or clock._owner != threading.get_ident():
            return fn(*args, **kwargs)  # a call made by a clocked call (torch's own nesting), or another thread
        t_post = clock._tick()  # the compute up to here; the wrapper's own CPU time is not compute
        clock._inside = True
        try:
            a = sig.bind(*args, **kwargs).arguments
            group = a.get("group")
            if group is not None and dist.get_rank(group) < 0:
                return fn(*args, **kwargs)  # not a member: torch returns at once
            return _clocked_collective(a, group, t_post)
        finally:
            clock._inside = False
            clock._resume()

    def _clocked_collective(a, group, t_post):
        ranks = _ranks(group)
        payload = a.get(buf_arg) if buf_arg else None
        n = tensor_bytes(payload) * (len(ranks) if times_n else 1)
        first = _first_tensor(payload)
        device = first.device if first is not None else group_device(group)
        mine = torch.tensor([t_post, float(n)], dtype=torch.float64, device=device)
        buf = torch.empty(2 * len(ranks), dtype=torch.float64, device=device)
        with unrecorded():  # the clock's bookkeeping is not the program's traffic
            exchange = gather(buf, mine, group=group, async_op=True)
        work = fn(**{**a, "async_op": True})
        op = clock._post_collective(name, ranks, algo, exchange, buf)
        clocked = ClockedWork(clock, [work, exchange], lambda: clock._finish_collective(op))
        if a.get("async_op", False):
            return clocked
        clocked.wait()
        return None

    return wrapper


def _peer(a: dict, side: str) -> int:
    group, peer = a.get("group"), a.get("dst" if side == "send" else "src")
    if peer is not None:
        return peer
    group_peer = a.get("group_dst" if side == "send" else "group_src")
    if group_peer is None:
        raise ConfigError(
            "a receive from any source (src=None) cannot be clocked: the cluster clock needs the sender; pass src="
        )
    return dist.get_global_rank(group, group_peer) if group is not None else group_peer


def _p2p(clock, name: str, fn, saved: dict):
    side = "send" if "send" in name else "recv"
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if clock._inside or clock._owner != threading.get_ident():
            return fn(*args, **kwargs)
        clock._tick()
        clock._inside = True
        try:
            a = sig.bind(*args, **kwargs).arguments
            if a.get("tag", 0) == HEADER_TAG:
                return fn(*args, **kwargs)  # minipar.comm.p2p's strict-mode header: not the program's traffic
            return _clocked_p2p(a)
        finally:
            clock._inside = False
            clock._resume()

    def _clocked_p2p(a):
        peer, tensor = _peer(a, side), a["tensor"]
        if not tensor.is_contiguous():
            raise ConfigError(f"{name}: the cluster clock sends and receives contiguous tensors; pass .contiguous()")
        label = f"send to {peer}" if side == "send" else f"recv from {peer}"
        raw = tensor.view(-1).view(torch.uint8)
        if side == "send":  # the message: the time stamp (start, end) as 16 bytes, then the data
            stamp = torch.tensor(clock._post_send(peer, raw.numel()), dtype=torch.float64, device=tensor.device)
            packed = torch.cat([stamp.view(torch.uint8), raw])
        else:
            packed = torch.empty(_STAMP + raw.numel(), dtype=torch.uint8, device=tensor.device)

        def deliver():
            if side == "recv":
                raw.copy_(packed[_STAMP:])

        posted = clock._now  # a transfer starts once both sides have posted (NCCL's rendezvous)

        def finish():
            t0, t1 = packed[:_STAMP].view(torch.float64).tolist()
            if side == "recv" and posted > t0:  # posted after the sender: the data moves from then on
                t0, t1 = posted, posted + (t1 - t0)
            clock._finish_p2p(label, t0, t1)

        out = fn(**{**a, "tensor": packed})
        if not name.startswith("i"):  # blocking: done
            deliver()
            finish()
            return out
        if out is None:  # inside a coalescing batch (NCCL's batch_isend_irecv): not clocked
            raise ConfigError("batch_isend_irecv on a coalescing backend (NCCL) is not supported by the cluster clock")
        return ClockedWork(clock, [out], finish, deliver)

    return wrapper


def group_device(group) -> torch.device:
    """Where a group's small clock tensors live: the current CUDA device on NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def install(clock) -> dict:
    """Put ``clock``'s wrappers in place; returns what :func:`uninstall` needs.

    Raises ConfigError when a cluster clock is already open on this rank.
    """
    if getattr(c10d.all_reduce, _MARK, None) is not None:
        raise ConfigError("a ClusterClock is already open on this rank: clocks do not nest")
    names = [n for n in (*COLLECTIVES, *P2P) if hasattr(c10d, n)]
    saved = {n: (getattr(c10d, n), getattr(dist, n)) for n in names}
    installed = {}
    for n in names:
        w = (_collective if n in COLLECTIVES else _p2p)(clock, n, saved[n][0], saved)
        setattr(w, _MARK, clock)
        installed[n] = (*saved[n], w)
        setattr(c10d, n, w)
        setattr(dist, n, w)
    return installed


def uninstall(installed: dict) -> None:
    """Put the saved functions back where ``clock``'s wrapper is still in place."""
    for n, (orig, orig_dist, w) in installed.items():
        if getattr(c10d, n) is w:
            setattr(c10d, n, orig)
        if getattr(dist, n) is w:
            setattr(dist, n, orig_dist)
