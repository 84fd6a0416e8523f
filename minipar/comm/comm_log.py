"""Communication accounting: record every collective and point-to-point call a rank makes.

    from minipar.comm.comm_log import CommLog
    with CommLog() as log:
        ...                                    # any torch.distributed calls, minipar's or yours
    log.total("sent"), log.by_op(), log.records

How calls are seen, and only inside the block: the outermost open ``CommLog`` subscribes a
recording listener to :mod:`minipar.comm.intercept` (torch.distributed's one interception; read its
module doc for which calls are seen, and why wrappers and not PyTorch's dispatcher); the last one
to close unsubscribes it, also when the block raises. Logs nest: an inner log shares the outer
one's listener, and every record made while a log is open goes to every open log. Only the
outermost call is recorded when one intercepted function calls another. A record names the call
the program made, its group's ranks and its peer. Opened inside a cluster clock
(:class:`minipar.clock.ClusterClock`), a log sees the program's calls exactly; opened outside
one, what the clock sends (every point-to-point message 16 bytes larger).

What a record counts, per rank, for a message of ``S`` bytes in a group of ``N`` ranks:

- point-to-point (``send``/``isend``: sent = S; ``recv``/``irecv``: received = S) — exact;
- ``all_reduce``: sent = received = 2(N−1)/N · S, the ring algorithm's per-rank volume
  (Patarasuk & Yuan 2009; the "bus bytes" of nccl-tests' PERFORMANCE.md;
  :func:`minipar.comm.cost.all_reduce_bytes`);
- ``all_gather`` (S = output bytes), ``reduce_scatter`` (S = input bytes), ``all_to_all``:
  (N−1)/N · S each way (:func:`minipar.comm.cost.ring_bytes`); ``all_to_all_single`` exactly
  (uneven splits: all rows but this rank's own);
- rooted ``broadcast``/``scatter`` (root sends), ``reduce``/``gather`` (root receives):
  counted as direct transfers, root ↔ each other rank, s = one rank's share;
- ``barrier``: 0 bytes.

So the numbers are the *algorithmic* volume of the bandwidth-optimal algorithm, a property of
the call, not a sniff of the wire (gloo may pick another algorithm for small messages).

minipar's own collectives (``minipar.comm.collectives.ring_all_reduce``, ...) open a
:func:`collective` scope: the call is one record (``op="ring_all_reduce"``) whose ``sent`` and
``recv`` are the *measured* sums of the point-to-point calls made inside it, which are kept, in
order, in ``record.parts`` (so ``total()`` counts every byte once).
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from minipar.comm import intercept
from minipar.comm.cost import all_reduce_bytes, ring_bytes

_active: list["CommLog"] = []  # the open logs, outermost first; _record_call listens while non-empty
_lock = threading.Lock()  # entering and leaving logs from several threads
_state = threading.local()  # .inside: in a recorded call or unrecorded(); .parent: in a collective()
_labels: list[str] = []


@dataclass
class Record:
    op: str  # e.g. "all_reduce", "isend"
    group_size: int  # N
    bytes: int  # S: the tensor payload the call is about (see module doc)
    sent: float  # bytes this rank sends (model above)
    recv: float  # bytes this rank receives
    peer: int | None = None  # global rank of the other side, for point-to-point
    label: str = ""  # innermost active :func:`label`, e.g. "bucket 3" or "forward"
    dtype: str = ""
    group_ranks: tuple = field(default_factory=tuple)
    parts: list = field(default_factory=list)  # calls made inside a minipar collective (see collective())


def tensor_bytes(t) -> int:
    """Bytes of a tensor, or of every tensor in a list/tuple (anything else: 0)."""
    if isinstance(t, (list, tuple)):
        return sum(tensor_bytes(x) for x in t)
    return t.numel() * t.element_size() if torch.is_tensor(t) else 0


def _arg(args, kwargs, i, name, default=None):
    return args[i] if len(args) > i else kwargs.get(name, default)


def _group_of(op, args, kwargs):
    pos = {
        "all_reduce": 2,
        "broadcast": 2,
        "reduce": 3,
        "all_gather": 2,
        "all_gather_into_tensor": 2,
        "all_gather_single": 2,
        "reduce_scatter": 3,
        "reduce_scatter_tensor": 3,
        "reduce_scatter_single": 3,
        "all_to_all": 2,
        "all_to_all_single": 4,
        "scatter": 3,
        "gather": 3,
        "send": 2,
        "recv": 2,
        "isend": 2,
        "irecv": 2,
        "barrier": 0,
    }[op]
    return _arg(args, kwargs, pos, "group")


def _moved(t, splits, g: int, n: int) -> float:
    """Bytes of an all-to-all buffer that cross the wire: every row but the block group rank ``g`` keeps."""
    return (b := tensor_bytes(t)) - (b * splits[g] // max(1, t.shape[0]) if splits else b / n)


def _record(op: str, args, kwargs) -> Record:
    group = _group_of(op, args, kwargs)
    n = dist.get_world_size(group)
    me = dist.get_rank()
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(n))
    first = _arg(args, kwargs, 0, "tensor")
    dtype = str(getattr(first if torch.is_tensor(first) else (first[0] if first else None), "dtype", ""))
    sent = recv = 0.0
    peer = None
    if op in ("send", "isend", "recv", "irecv"):
        S = tensor_bytes(first)
        peer = _arg(args, kwargs, 1, "dst" if "send" in op else "src")
        if peer is None and kwargs.get("group_dst" if "send" in op else "group_src") is not None:
            peer = ranks[kwargs.get("group_dst" if "send" in op else "group_src")]
        if "send" in op:
            sent = S
        else:
            recv = S
    elif op == "all_reduce":
        S = tensor_bytes(first)
        sent = recv = all_reduce_bytes(n, S)
    elif op == "all_to_all_single":  # exact with uneven splits
        S, inp = tensor_bytes(first), _arg(args, kwargs, 1, "input")
        sent = _moved(inp, _arg(args, kwargs, 3, "input_split_sizes"), ranks.index(me), n)
        recv = _moved(first, _arg(args, kwargs, 2, "output_split_sizes"), ranks.index(me), n)
    elif op in ("all_gather", "all_gather_into_tensor", "all_gather_single", "all_to_all"):
        S = tensor_bytes(first)  # output list / output tensor
        sent = recv = ring_bytes(n, S)
    elif op in ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single"):
        S = tensor_bytes(_arg(args, kwargs, 1, "input" if op != "reduce_scatter" else "input_list"))
        sent = recv = ring_bytes(n, S)
    elif op in ("broadcast", "reduce", "scatter", "gather"):
        S = tensor_bytes(first)  # one rank's share
        root_key = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst"}[op]
        root = _arg(args, kwargs, 2 if op in ("reduce", "scatter", "gather") else 1, root_key)
        if root is None:
            g_root = kwargs.get("group_src" if root_key == "src" else "group_dst", 0)
            root = ranks[g_root]
        is_root = me == root
        if op in ("broadcast", "scatter"):
            sent, recv = ((n - 1) * S, 0) if is_root else (0, S)
        else:
            sent, recv = (0, (n - 1) * S) if is_root else (S, 0)
    else:  # barrier
        S = 0
    return Record(op, n, S, sent, recv, peer, _labels[-1] if _labels else "", dtype, ranks)


def _record_call(op: str, call, args, kwargs):
    """The log's listener on :mod:`minipar.comm.intercept`: record the call in every open log (or in
    the enclosing :func:`collective`'s record), unless it is made inside a recorded call or
    :func:`unrecorded`; then make it."""
    if getattr(_state, "inside", False) or not _active:
        return call(*args, **kwargs)
    rec = _record(op, args, kwargs)
    parent = getattr(_state, "parent", None)
    if parent is not None:  # inside a minipar collective: a part of its record
        parent.parts.append(rec)
        parent.sent += rec.sent
        parent.recv += rec.recv
    else:
        for log in _active:
            log.records.append(rec)
    _state.inside = True
    try:
        return call(*args, **kwargs)
    finally:
        _state.inside = False


class CommLog:
    """Context manager recording this rank's communication inside its block (see the module doc).

    The log's listener is subscribed to :mod:`minipar.comm.intercept` from ``__enter__`` of the
    outermost open log to ``__exit__`` of the last one; torch.distributed is exactly as before
    afterwards (when no other listener is left), also after an exception. A log can be
    entered again after it is closed (its records are kept), not while it is open.

    Attributes:
        records: list of :class:`Record`, in call order.
    """

    def __init__(self):
        self.records: list[Record] = []

    def __enter__(self) -> "CommLog":
        with _lock:
            if any(log is self for log in _active):
                raise RuntimeError("this CommLog is already open; open a new CommLog() to nest one")
            if not _active:
                intercept.subscribe(_record_call)
            _active.append(self)
        return self

    def __exit__(self, *exc) -> None:
        with _lock:
            for i, log in enumerate(_active):
                if log is self:
                    del _active[i]
                    break
            if not _active:
                intercept.unsubscribe(_record_call)

    def total(self, what: str = "sent", op: str | None = None, label: str | None = None) -> float:
        """Sum of ``what`` (``"sent"``, ``"recv"`` or ``"bytes"``) over records, optionally one op/label."""
        return sum(
            getattr(r, what) for r in self.records if (op is None or r.op == op) and (label is None or r.label == label)
        )

    def by_op(self) -> dict[str, dict[str, float]]:
        """``{op: {"calls", "bytes", "sent", "recv"}}`` summed over records."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: dict(calls=0, bytes=0, sent=0.0, recv=0.0))
        for r in self.records:
            d = out[r.op]
            d["calls"] += 1
            d["bytes"] += r.bytes
            d["sent"] += r.sent
            d["recv"] += r.recv
        return dict(out)

    def count(self, op: str | None = None, label: str | None = None) -> int:
        return sum(1 for r in self.records if (op is None or r.op == op) and (label is None or r.label == label))

    def clear(self) -> None:
        self.records.clear()


@contextlib.contextmanager
def collective(op: str, tensor=None, group=None):
    """Record the block as one call of minipar's own collective ``op`` (e.g. ``"ring_all_reduce"``).

    ``tensor``: the payload (``Record.bytes`` = its bytes, ``dtype`` from it); ``group``: the process
    group (default: world). Inside the block the intercepted ``torch.distributed`` calls become
    ``record.parts`` and their bytes are summed into ``record.sent``/``record.recv``. Yields the
    record, or None when no log is open or the block runs inside another recorded call (then the
    outer record gets the parts).
    """
    if (
        not _active
        or not dist.is_initialized()
        or getattr(_state, "parent", None) is not None
        or getattr(_state, "inside", False)
    ):
        yield None
        return
    n = dist.get_world_size(group)
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(n))
    rec = Record(
        op,
        n,
        tensor_bytes(tensor),
        0.0,
        0.0,
        None,
        _labels[-1] if _labels else "",
        str(getattr(tensor, "dtype", "")),
        ranks,
    )
    for log in _active:
        log.records.append(rec)
    _state.parent = rec
    try:
        yield rec
    finally:
        _state.parent = None


@contextlib.contextmanager
def label(name: str):
    """Tag every record made inside this block with ``name`` (innermost label wins)."""
    _labels.append(name)
    try:
        yield
    finally:
        _labels.pop()


@contextlib.contextmanager
def unrecorded():
    """Calls made inside the block are not recorded (e.g. ``minipar.comm.p2p``'s strict-mode headers,
    a checking overhead that is not the program's traffic)."""
    before = getattr(_state, "inside", False)
    _state.inside = True
    try:
        yield
    finally:
        _state.inside = before
