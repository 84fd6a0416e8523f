"""How the cluster clock sees communication: its listener on minipar.comm.intercept.

:func:`install` subscribes a :class:`ClockListener` over ONE :class:`~minipar.clock.clock.ClusterClock`
to :mod:`minipar.comm.intercept` (torch.distributed's one interception: read its module doc for
which calls are seen, and why wrappers and not PyTorch's dispatcher); :func:`uninstall`
unsubscribes it. Nothing is kept at module level.

Every clocked collective runs asynchronously underneath (``async_op=True``) and returns a
:class:`ClockedWork` (a blocking call waits for it at once); its start-time exchange is one more
``all_gather`` made with torch's own function (:func:`minipar.comm.intercept.original`: no
listener sees it). A point-to-point message carries its time stamp IN the message: 16 bytes (two
float64) before the data, one transfer instead of two (a second gloo message per message cost
more than the clock's 1.15× budget on a pipeline step); the receiver's tensor is filled from it in
``wait()`` (``isend``/``irecv`` return a :class:`ClockedWork`). Every rank of the program must run the clock.

With ``CommLog``: a log opened INSIDE the clock (its listener subscribed later: it sees the call
first) sees the program's calls exactly; a log opened outside it sees what the clock sends: the
collectives exactly (the exchange is not seen), each point-to-point message 16 bytes larger.
"""

from __future__ import annotations

import inspect
import threading

import torch
import torch.distributed as dist

from minipar.comm import intercept
from minipar.comm.comm_log import tensor_bytes
from minipar.comm.p2p import HEADER_TAG
from minipar.errors import ConfigError

# name -> (algorithm of minipar.comm.cost.collective_time, argument holding the full buffer, × group size)
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
        outer = mine and not self._clock._inside  # not the wait of a blocking call's own listener
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


class ClockListener:
    """``clock``'s listener on :mod:`minipar.comm.intercept`: calls of the thread that entered the
    clock, not made from inside a clocked call, are clocked (:data:`COLLECTIVES`, :data:`P2P`); the
    others go through unchanged."""

    def __init__(self, clock):
        self.clock = clock
        self._signatures: dict[str, inspect.Signature] = {}

    def __call__(self, op: str, call, args: tuple, kwargs: dict):
        clock = self.clock
        if clock._inside or clock._owner != threading.get_ident() or (op not in COLLECTIVES and op not in P2P):
            return call(*args, **kwargs)  # a call made by a clocked call (torch's own nesting), or another thread
        t_post = clock._tick()  # the compute up to here; the listener's own CPU time is not compute
        clock._inside = True
        try:
            if op not in self._signatures:
                self._signatures[op] = inspect.signature(intercept.original(op))
            a = self._signatures[op].bind(*args, **kwargs).arguments
            if op in COLLECTIVES:
                group = a.get("group")
                if group is not None and dist.get_rank(group) < 0:
                    return call(*args, **kwargs)  # not a member: torch returns at once
                return self._collective(op, call, a, group, t_post)
            if a.get("tag", 0) == HEADER_TAG:
                return call(*args, **kwargs)  # minipar.comm.p2p's strict-mode header: not the program's traffic
            return self._p2p(op, call, a)
        finally:
            clock._inside = False
            clock._resume()

    def _collective(self, op: str, call, a: dict, group, t_post: float):
        clock = self.clock
        algo, buf_arg, times_n = COLLECTIVES[op]
        ranks = _ranks(group)
        payload = a.get(buf_arg) if buf_arg else None
        n = tensor_bytes(payload) * (len(ranks) if times_n else 1)
        first = _first_tensor(payload)
        device = first.device if first is not None else group_device(group)
        mine = torch.tensor([t_post, float(n)], dtype=torch.float64, device=device)
        buf = torch.empty(2 * len(ranks), dtype=torch.float64, device=device)
        gather = intercept.original(
            "all_gather_single" if "all_gather_single" in intercept.OPS else "all_gather_into_tensor"
        )
        exchange = gather(buf, mine, group=group, async_op=True)  # the clock's bookkeeping: no listener sees it
        work = call(**{**a, "async_op": True})
        posted = clock._post_collective(op, ranks, algo, exchange, buf)
        clocked = ClockedWork(clock, [work, exchange], lambda: clock._finish_collective(posted))
        if a.get("async_op", False):
            return clocked
        clocked.wait()
        return None

    def _p2p(self, op: str, call, a: dict):
        clock = self.clock
        side = "send" if "send" in op else "recv"
        peer, tensor = _peer(a, side), a["tensor"]
        if not tensor.is_contiguous():
            raise ConfigError(f"{op}: the cluster clock sends and receives contiguous tensors; pass .contiguous()")
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

        out = call(**{**a, "tensor": packed})
        if not op.startswith("i"):  # blocking: done
            deliver()
            finish()
            return out
        if out is None:  # inside a coalescing batch (NCCL's batch_isend_irecv): not clocked
            raise ConfigError("batch_isend_irecv on a coalescing backend (NCCL) is not supported by the cluster clock")
        return ClockedWork(clock, [out], finish, deliver)


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


def group_device(group) -> torch.device:
    """Where a group's small clock tensors live: the current CUDA device on NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def install(clock) -> ClockListener:
    """Subscribe ``clock``'s listener to :mod:`minipar.comm.intercept`; returns it, for :func:`uninstall`.

    Raises ConfigError when a cluster clock is already open on this rank.
    """
    if any(isinstance(x, ClockListener) for x in intercept.listeners()):
        raise ConfigError("a ClusterClock is already open on this rank: clocks do not nest")
    listener = ClockListener(clock)
    intercept.subscribe(listener)
    return listener


def uninstall(listener: ClockListener) -> None:
    """Unsubscribe ``listener`` (the calls made after this go through unclocked)."""
    intercept.unsubscribe(listener)
