"""The cluster clock: an EMULATOR of a GPU cluster's time on this machine. Compute is measured, links are modelled.

    from minipar.clock import ClusterClock, cluster_links
    intra, inter = cluster_links()                          # once, in the parent; pass to the ranks
    with ClusterClock(intra, inter, node_of=4, straggler={3: 2.0}) as clk:   # on every rank
        with clk.label("forward"):
            y = model(x)
        dist.all_reduce(g)                                  # any torch.distributed call in the block
    clk.now, clk.timeline                                   # virtual seconds; Spans for a Gantt chart

Every rank keeps a virtual time ``now`` (seconds since it entered the block):

- **Compute** advances it by the CPU time of the rank's own thread (``time.thread_time``; run ranks
  with one intra-op thread, as :func:`minipar.runtime.launch.launch` does) between two communication
  calls, times the rank's ``straggler`` factor. Other processes that TIME-SHARE the cores
  stretch wall time, not a thread's CPU time. A load that slows each instruction (a busy SMT
  sibling, a VM whose host core is shared: 1.8× seen in CI with two busy loops) stretches CPU
  time too, every rank's alike: read the clock's RATIOS (bubble, overlap, speed-up), which the
  lessons' verdicts do and ``tests/test_cluster_clock.py`` checks on a loaded machine.
- **Collectives** (``all_reduce``, ``all_gather_into_tensor``/``all_gather_single``/``all_gather``,
  ``reduce_scatter_tensor``/``..._single``/``reduce_scatter``, ``broadcast``, ``reduce``,
  ``all_to_all_single``/``all_to_all``, ``scatter``, ``gather``, ``barrier``): the group's post
  times (and payload sizes) are exchanged by one extra ``all_gather`` of two float64 per rank, made
  with the clock paused (it costs no virtual time and is not in a ``CommLog``). The collective
  starts at the LATEST post time of its group, or when the previous operation of the group
  finished (one group = one NCCL stream: its operations queue), and lasts its algorithm's α–β time
  (:func:`minipar.comm.cost.collective_time`) on the group's link: the slowest link between two of its ranks
  (``intra`` when all are on one node, else ``inter``).
- **Point-to-point** (``send``/``isend``/``recv``/``irecv``): the sender's transfer starts at its
  post time, or when its previous send to the same peer ends (one direction of a link queues),
  and ends ``α + n/β`` later; both times travel in the message (16 bytes before the data, not
  counted in n). A receive completes at ``max(own time at wait, arrival)``; the transfer starts
  once both sides have posted (NCCL's rendezvous): a receive posted after the sender's post moves
  the arrival to its own post time + ``α + n/β`` (the sender's side keeps its own end: it cannot
  know the receiver's post without a reply). Its tensor is filled in ``wait()``.
- **async_op=True** operations complete in the background: the clock advances only in
  ``work.wait()``, to ``max(now, completion)``, so compute done in between overlaps them.

Not clocked (passed through unchanged): calls from another thread than the one that entered
the block; ``minipar.comm.p2p``'s strict-mode order headers (its reserved tag); calls that
bypass Python (the C++ reducer of ``torch.nn.parallel.DistributedDataParallel``); a group this
rank is not in. How calls are seen: :mod:`minipar.clock.hooks`, a listener on
:mod:`minipar.comm.intercept` (scoped, as ``CommLog``'s).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from typing import NamedTuple

import torch
import torch.distributed as dist

from minipar.clock import hooks
from minipar.comm.comm_log import unrecorded
from minipar.comm.cost import collective_time
from minipar.comm.links import IB_NDR, NVLINK4, Link
from minipar.errors import ConfigError


class Span(NamedTuple):
    """One box of the timeline: ``kind`` "compute" or "comm", ``label``, virtual seconds ``t0``–``t1``."""

    kind: str
    label: str
    t0: float
    t1: float


def compute_seconds(fn, repeats: int = 3, group=None) -> float:
    """What the clock would count as compute for ``fn(i)``: thread CPU seconds, the fastest of
    ``repeats`` calls (``i`` = 0, 1, ...) on each rank, then the slowest rank's, so every rank of
    ``group`` gets one value and links scaled from it are the same everywhere (as
    :class:`ClusterClock` checks). Call it outside a clock (it all-reduces)."""
    best = float("inf")
    for i in range(repeats):
        c0 = time.thread_time()
        fn(i)
        best = min(best, time.thread_time() - c0)
    t = torch.tensor([best], dtype=torch.float64, device=hooks.group_device(group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def _node_fn(node_of):
    if node_of is None:
        return lambda r: 0
    if isinstance(node_of, int):
        if node_of < 1:
            raise ConfigError(f"node_of={node_of!r}: ranks per node must be >= 1")
        return lambda r: r // node_of
    if callable(node_of):
        return node_of
    return node_of.__getitem__  # a list or dict rank -> node


class _Collective:
    """A posted collective: resolved (start, end) once its start-time exchange is read."""

    def __init__(self, label, key, algo, ranks, link, exchange, buf, index):
        self.label, self.key, self.algo, self.ranks, self.link, self.index = label, key, algo, ranks, link, index
        self.exchange, self.buf = exchange, buf
        self.start: float | None = None
        self.end: float | None = None


class ClusterClock:
    """A per-rank virtual clock over a ``with`` block (see the module doc).

    Args:
        intra: link between two ranks on one node (default :data:`~minipar.comm.links.NVLINK4`,
            unscaled: pass :func:`~minipar.clock.scaling.cluster_links` to emulate on this CPU).
        inter: link between nodes (default :data:`~minipar.comm.links.IB_NDR`).
        node_of: global rank → node: None (one node), an int k (k ranks per node), a list/dict, or a function.
        straggler: ``{global rank: factor}``; that rank's compute counts ``factor`` times its CPU time.
        enabled: False: the block runs untouched (nothing patched; ``now`` stays 0, no timeline).

    Attributes:
        timeline: list of :class:`Span`, in this rank's order (adjacent compute of one label merged).
        compute_s: this rank's compute seconds so far (``now`` less the time spent waiting).
        events: ``("post" | "wait", k, compute_s)`` for the k-th collective this rank posted, in order:
            when (in its own compute seconds) it posted and waited on it (for :mod:`minipar.clock.replay`).
        collectives: ``(label, start, end)`` virtual seconds of the k-th collective, once resolved.

    Raises (on entry): ConfigError when torch.distributed is not initialized, a straggler factor is
    not > 0, the ranks were given different links, or a clock is already open on this rank.
    """

    def __init__(self, intra: Link = NVLINK4, inter: Link = IB_NDR, node_of=None, straggler=None, enabled=True):
        self.intra, self.inter, self.enabled = intra, inter, enabled
        self.straggler = dict(straggler or {})
        bad = {r: f for r, f in self.straggler.items() if not f > 0}
        if bad:
            raise ConfigError(f"straggler={bad}: a slowdown factor must be > 0 (2.0 = computes half as fast)")
        self._node = _node_fn(node_of)
        self.timeline: list[Span] = []
        self.compute_s = 0.0
        self.events: list[tuple[str, int, float]] = []
        self.collectives: list[tuple[str, float, float] | None] = []
        self._now = 0.0
        self._mark = 0.0
        self._labels: list[str] = []
        self._streams: dict[tuple, deque] = {}
        self._free: dict[tuple, float] = {}
        self._owner = None
        self._inside = False  # in a clocked call: the calls it makes itself are not clocked again
        self._hooks = None
        self.rank, self.factor = None, 1.0

    # -- entering and leaving ------------------------------------------------------------------
    def __enter__(self) -> "ClusterClock":
        if not self.enabled:
            return self
        if not dist.is_initialized():
            raise ConfigError(
                "ClusterClock needs an initialized process group: enter it on every rank, inside launch()"
            )
        self.rank = dist.get_rank()
        self.factor = float(self.straggler.get(self.rank, 1.0))
        self._hooks = hooks.install(self)  # raises if a clock is open; passes calls through until _owner is set
        try:
            self._check_same_links()
        except BaseException:
            hooks.uninstall(self._hooks)
            self._hooks = None
            raise
        self._owner = threading.get_ident()
        self._now, self._mark, self.compute_s = 0.0, time.thread_time(), 0.0
        return self

    def __exit__(self, *exc) -> None:
        if self._hooks is None:
            return
        self._tick()
        self._owner = None
        hooks.uninstall(self._hooks)
        self._hooks = None

    def _check_same_links(self) -> None:
        mine = torch.tensor(
            [self.intra.alpha_s, self.intra.beta_bytes_per_s, self.inter.alpha_s, self.inter.beta_bytes_per_s],
            dtype=torch.float64,
            device=hooks.group_device(None),
        )
        every = torch.empty(dist.get_world_size() * 4, dtype=torch.float64, device=mine.device)
        with unrecorded():  # not the program's traffic
            (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(every, mine)
        if not torch.equal(every.view(-1, 4), mine.expand(dist.get_world_size(), 4)):
            raise ConfigError(
                "ClusterClock: the ranks were given different links "
                f"({every.view(-1, 4).tolist()}); scale the links once, in the parent, and pass them to every rank"
            )

    # -- compute ---------------------------------------------------------------------------------
    @property
    def now(self) -> float:
        """This rank's virtual time in seconds (the compute up to this call included)."""
        if self._owner == threading.get_ident():
            self._tick()
        return self._now

    @contextlib.contextmanager
    def label(self, name: str):
        """Compute inside the block is labelled ``name`` in the timeline (innermost label wins)."""
        self.now  # noqa: B018 (close the compute before the block under the outer label)
        self._labels.append(name)
        try:
            yield
        finally:
            self.now  # noqa: B018
            self._labels.pop()

    @contextlib.contextmanager
    def off_the_clock(self):
        """The emulator's own bookkeeping (e.g. a server learning when messages *would* arrive):
        calls inside the block are neither clocked nor in a ``CommLog``, and their CPU time is not
        compute. Nothing of the program's work belongs here."""
        self.now  # noqa: B018 (close the compute before the block)
        before, self._inside = self._inside, True
        try:
            with unrecorded():
                yield
        finally:
            self._inside = before
            self._resume()

    def _tick(self) -> float:
        """Add the CPU time since the last mark (× straggler factor) as compute; returns ``now``."""
        c = time.thread_time()
        dt, self._mark = (c - self._mark) * self.factor, c
        if dt > 0:
            lab = self._labels[-1] if self._labels else ""
            last = self.timeline[-1] if self.timeline else None
            if last is not None and last.kind == "compute" and last.label == lab and last.t1 == self._now:
                self.timeline[-1] = last._replace(t1=self._now + dt)
            else:
                self.timeline.append(Span("compute", lab, self._now, self._now + dt))
            self._now += dt
            self.compute_s += dt
        return self._now

    def _resume(self) -> None:
        """Start measuring compute again (after a call whose CPU time is communication)."""
        self._mark = time.thread_time()

    # -- links -----------------------------------------------------------------------------------
    def link(self, ranks) -> Link:
        """The link a group of global ranks communicates over: ``intra`` if all share a node, else ``inter``."""
        return self.intra if len({self._node(r) for r in ranks}) <= 1 else self.inter

    def _advance(self, kind: str, label: str, t0: float, t1: float) -> None:
        self.timeline.append(Span(kind, label, t0, t1))
        self._now = max(self._now, t1)

    # -- collectives -----------------------------------------------------------------------------
    def _post_collective(self, label, ranks, algo, exchange, buf) -> _Collective:
        key = ("group", tuple(ranks))
        op = _Collective(label, key, algo, tuple(ranks), self.link(ranks), exchange, buf, len(self.collectives))
        self._streams.setdefault(key, deque()).append(op)
        self.collectives.append(None)
        self.events.append(("post", op.index, self.compute_s))
        return op

    def _finish_collective(self, op: _Collective) -> None:
        """Resolve ``op`` and the operations queued before it on its stream; advance ``now`` to its end."""
        queue = self._streams[op.key]
        while op.end is None:
            first = queue.popleft()
            first.exchange.wait()
            starts = first.buf.view(-1, 2)
            t0 = max(float(starts[:, 0].max()), self._free.get(first.key, 0.0))
            first.end = t0 + collective_time(first.algo, len(first.ranks), float(starts[:, 1].max()), first.link)
            self._free[first.key] = first.end
            first.start = t0
            self.collectives[first.index] = (first.label, first.start, first.end)
        self.events.append(("wait", op.index, self.compute_s))
        self._advance("comm", op.label, op.start, op.end)

    # -- point-to-point --------------------------------------------------------------------------
    def _post_send(self, peer: int, nbytes: int) -> tuple[float, float]:
        """(start, end) of a send posted now: after this rank's previous send to ``peer``."""
        key = ("send", peer)
        t0 = max(self._now, self._free.get(key, 0.0))
        t1 = t0 + self.link((self.rank, peer)).time(nbytes)
        self._free[key] = t1
        return t0, t1

    def _finish_p2p(self, label: str, t0: float, t1: float) -> None:
        self._advance("comm", label, t0, t1)
