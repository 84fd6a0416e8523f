"""Collectives built from point-to-point messages: the ring all-reduce, and a naive one to compare.

    ring_all_reduce(t)                 # in place, like torch.distributed.all_reduce(t)
    mine = ring_reduce_scatter(t)      # t is the workspace; returns this rank's reduced chunk
    ring_all_gather(t)                 # fills every chunk of t from the rank that owns it

The ring (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", J. Parallel Distrib. Comput. 69(2), §3; the same algorithm as Horovod, Sergeev &
Del Balso 2018, arXiv:1802.05799, §3): the N ranks of a group stand in a ring, each sends to
its right neighbour and receives from its left one. The flattened tensor is cut into N chunks
(:func:`chunk_bounds`: sizes differ by at most one element, so any size works).

1. reduce-scatter, N−1 steps: at step s, rank i sends chunk (i−s−1) mod N and receives chunk
   (i−s−2) mod N, which it reduces into its own copy. Afterwards rank i holds chunk i reduced.
2. all-gather, N−1 steps: at step s, rank i sends chunk (i−s) mod N and receives chunk
   (i−s−1) mod N straight into place. Afterwards every rank holds every reduced chunk.

Per rank: 2(N−1) steps of S/N bytes, so sent = received = 2(N−1)/N · S for an S-byte tensor:
almost independent of N, and the least any all-reduce can send (Patarasuk & Yuan, §2). In the
α–β model (α: latency per step, B: bytes/s per link) it takes T = 2(N−1)α + 2(N−1)/N · S/B.
A step's chunk travels in segments of ``SEGMENT_BYTES`` (1 MiB), all posted at once, and each
received segment is added while the next ones are still in flight (chunk pipelining, as gloo
and NCCL do); the all-gather receives straight into place, without a copy.
:func:`naive_all_reduce` (everyone sends everything to rank 0, which sends the result back)
makes rank 0 send and receive (N−1)·S: its link is the bottleneck.

Safety. Every function first exchanges 12 integers per rank (shape, dtype, contiguity;
``check=True``: a ring all-gather of N−1 small messages, recorded by ``CommLog`` as
``isend``/``irecv`` under the label ``"shape check"``) and raises the same
:class:`~minipar.ConfigError` on every rank when they disagree: a receive buffer larger than
the message it gets is *silently* half-filled by gloo, so unchecked mismatches would give wrong
numbers. A rank outside ``group`` raises at once. A
peer that never arrives makes the others raise a RuntimeError naming the rank they waited for
after the process-group timeout (``minipar.runtime.dist.default_timeout``), never hang.

Communication accounting: each call is one ``minipar.comm.comm_log`` record (``op`` =
``"ring_all_reduce"``, ...) whose bytes are the measured sums of its sends and receives, listed
in ``record.parts``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.comm import p2p
from minipar.comm.comm_log import collective, label
from minipar.errors import ConfigError

ReduceOp = dist.ReduceOp
_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
]
_MAX_DIMS = 8
SEGMENT_BYTES = 1 << 20  # a ring step's chunk travels in segments of this size (pipelining, see _exchange)


def chunk_bounds(numel: int, n: int, i: int) -> tuple[int, int]:
    """``(start, end)`` of chunk ``i`` of ``n`` over ``numel`` flat elements.

    The first ``numel % n`` chunks get one element more (``torch.tensor_split``'s rule), so
    chunk sizes differ by at most one and some are empty when ``numel < n``.
    """
    q, r = divmod(numel, n)
    start = i * q + min(i, r)
    return start, start + q + (1 if i < r else 0)


def _reducer(op, name: str = "ring_all_reduce"):
    if op in (ReduceOp.SUM, ReduceOp.AVG):
        return torch.Tensor.add_
    if op == ReduceOp.PRODUCT:
        return torch.Tensor.mul_
    if op == ReduceOp.MAX:
        return lambda a, b: torch.maximum(a, b, out=a)
    if op == ReduceOp.MIN:
        return lambda a, b: torch.minimum(a, b, out=a)
    raise ConfigError(f"{name}: op={op!r} is not supported; use ReduceOp.SUM, AVG, PRODUCT, MAX or MIN")


def _describe(meta: list[int]) -> str:
    problem, numel, dtype_id, ndim = meta[:4]
    shape = tuple(meta[4 : 4 + min(ndim, _MAX_DIMS)])
    dtype = str(_DTYPES[dtype_id]).replace("torch.", "") if 0 <= dtype_id < len(_DTYPES) else "other dtype"
    return f"shape {shape} {dtype}" + (" non-contiguous" if problem == 1 else "")


def _ring(name: str, tensor: torch.Tensor, group, op=None, check: bool = True) -> tuple[list[int], int]:
    """Validate a call on every rank of ``group``; return ``(global ranks of the group, my group rank)``."""
    if not torch.is_tensor(tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(tensor).__name__}")
    if op is not None:
        _reducer(op, name)
        if op == ReduceOp.AVG and not (tensor.is_floating_point() or tensor.is_complex()):
            raise ConfigError(
                f"{name}: ReduceOp.AVG needs a floating-point tensor, got {tensor.dtype}; "
                "use SUM and divide, or convert with .float()"
            )
    if not dist.is_initialized() or not check:  # no process group = a world of one
        if not tensor.is_contiguous():
            raise ConfigError(
                f"{name}: the tensor of shape {tuple(tensor.shape)} is not contiguous; "
                "pass t.contiguous() (and copy the result back if you need it in t)"
            )
        if not dist.is_initialized():
            return [0], 0
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    me = dist.get_rank(group)
    if me < 0:
        raise ConfigError(
            f"{name}: global rank {dist.get_rank()} is not in the group of ranks {ranks}; "
            f"call it only on those ranks (if minipar.runtime.dist.rank() in {ranks}: ...)"
        )
    if not check:
        return ranks, me
    shape = list(tensor.shape)[:_MAX_DIMS]
    dtype_id = _DTYPES.index(tensor.dtype) if tensor.dtype in _DTYPES else len(_DTYPES)
    meta = [0 if tensor.is_contiguous() else 1, tensor.numel(), dtype_id, tensor.dim()]
    meta += shape + [-1] * (_MAX_DIMS - len(shape))
    everyone = torch.zeros(len(ranks), len(meta), dtype=torch.int64, device=tensor.device)
    everyone[me] = torch.tensor(meta, dtype=torch.int64, device=tensor.device)
    with label("shape check"):  # a ring all-gather of the rows: a missing peer is named, as below
        _all_gather_steps(everyone.view(-1), ranks, me, group, None, name)
    metas = everyone.tolist()
    bad = [f"rank {g} has {_describe(m)}" for g, m in zip(ranks, metas) if m[0] == 1]
    if bad:
        raise ConfigError(f"{name}: {'; '.join(bad)}; pass t.contiguous() (and copy the result back)")
    if any(m != metas[0] for m in metas):
        seen = "; ".join(f"rank {g}: {_describe(m)}" for g, m in zip(ranks, metas))
        raise ConfigError(f"{name}: every rank of the group must pass the same shape and dtype, got {seen}")
    return ranks, me


def _timeout_s(group) -> str:
    """The group's timeout in seconds, as text (the backend keeps it; private API, so guarded)."""
    try:
        pg = group if group is not None else dist.group.WORLD
        return f"{pg._get_backend(torch.device('cpu')).options._timeout.total_seconds():g} s"
    except Exception:  # noqa: BLE001 - only used in an error message
        return "the process-group timeout"


def _wait(reqs: list, name: str, ranks: list[int], group) -> None:
    """Wait for ``[(work, "from"/"to", peer), ...]`` (bounded by the group's timeout).

    On failure, re-raise naming the rank this one was waiting for.
    """
    for req, direction, peer in reqs:
        try:
            req.wait()
        except p2p.P2POrderError:
            raise
        except RuntimeError as exc:
            what = "got no message from" if direction == "from" else "could not deliver its message to"
            raise RuntimeError(
                f"{name}: rank {dist.get_rank()} {what} rank {peer} within {_timeout_s(group)} "
                f"(group {ranks}): rank {peer}, or a rank it waits for, did not make this call or died. "
                f"Every rank of the group must make the same calls in the same order. gloo said: {exc}"
            ) from exc


def _exchange(
    send: torch.Tensor,
    recv: torch.Tensor,
    right: int,
    left: int,
    group,
    name: str,
    ranks: list[int],
    reduce_=None,
    into: torch.Tensor | None = None,
) -> None:
    """One ring step: send ``send`` to global rank ``right`` while receiving ``recv`` from ``left``.

    Both go in segments of ``SEGMENT_BYTES``, all posted at once; with ``reduce_``, each received
    segment is reduced into ``into`` as soon as it arrives, while later segments are still in flight.
    """
    seg = max(1, SEGMENT_BYTES // max(1, send.element_size()))
    recvs = [
        (i, p2p.irecv(recv[i : i + seg], src=left, group=group, label=f"{name}@{i}"))
        for i in range(0, recv.numel(), seg)
    ]
    sends = [
        (p2p.isend(send[i : i + seg], dst=right, group=group, label=f"{name}@{i}"), "to", right)
        for i in range(0, send.numel(), seg)
    ]
    for i, req in recvs:
        _wait([(req, "from", left)], name, ranks, group)
        if reduce_ is not None:
            reduce_(into[i : i + seg], recv[i : i + seg])
    _wait(sends, name, ranks, group)


def _reduce_scatter_steps(flat, ranks, me, op, group, trace, name):
    n = len(ranks)
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    tmp = torch.empty(chunk_bounds(flat.numel(), n, 0)[1], dtype=flat.dtype, device=flat.device)
    for s in range(n - 1):
        cs, cr = (me - s - 1) % n, (me - s - 2) % n
        a, b = chunk_bounds(flat.numel(), n, cs)
        c, d = chunk_bounds(flat.numel(), n, cr)
        _exchange(flat[a:b], tmp[: d - c], right, left, group, name, ranks, _reducer(op), flat[c:d])
        if trace is not None:
            trace.append(dict(phase="reduce-scatter", step=s, send=cs, recv=cr, after=flat.clone()))
    a, b = chunk_bounds(flat.numel(), n, me)
    if op == ReduceOp.AVG:
        flat[a:b].div_(n)
    return flat[a:b]


def _all_gather_steps(flat, ranks, me, group, trace, name):
    n = len(ranks)
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for s in range(n - 1):
        cs, cr = (me - s) % n, (me - s - 1) % n
        a, b = chunk_bounds(flat.numel(), n, cs)
        c, d = chunk_bounds(flat.numel(), n, cr)
        _exchange(flat[a:b], flat[c:d], right, left, group, name, ranks)  # received straight into place
        if trace is not None:
            trace.append(dict(phase="all-gather", step=s, send=cs, recv=cr, after=flat.clone()))


def ring_reduce_scatter(
    tensor: torch.Tensor, op=ReduceOp.SUM, group=None, *, check: bool = True, trace: list | None = None
) -> torch.Tensor:
    """Ring reduce-scatter over ``group``, using ``tensor`` itself as the workspace.

    Args:
        tensor: any shape, contiguous, the same shape and dtype on every rank of ``group``
            (S bytes). It is overwritten: on return, chunk ``i`` (:func:`chunk_bounds` over
            ``tensor.view(-1)``, i = this rank's index in the group) holds the reduction over
            the group; the other chunks hold partial results. Pass ``t.clone()`` to keep ``t``.
        op: ``ReduceOp.SUM``, ``AVG`` (sum, then ÷N), ``PRODUCT``, ``MAX`` or ``MIN``.
        group: a process group (``minipar.runtime.dist.new_group``); default: the world.
        check: exchange shapes/dtypes first and raise on a mismatch (see the module doc).
        trace: if a list, one dict per step is appended (phase, step, chunk sent, chunk
            received, a copy of the flat tensor after the step), for pictures.

    Returns:
        A 1-D view of ``tensor`` of shape ``(end - start,)``: this rank's reduced chunk.
        Sends and receives (N−1)/N · S bytes in N−1 messages.

    Raises:
        ConfigError: ranks disagree on shape/dtype, a non-contiguous tensor, an unsupported op,
            this rank is not in ``group``. RuntimeError: a peer did not answer within the
            process-group timeout.
    """
    ranks, me = _ring("ring_reduce_scatter", tensor, group, op, check)
    flat = tensor.view(-1)
    with collective("ring_reduce_scatter", tensor, group):
        return _reduce_scatter_steps(flat, ranks, me, op, group, trace, "ring_reduce_scatter")


def ring_all_gather(tensor: torch.Tensor, group=None, *, check: bool = True, trace: list | None = None) -> torch.Tensor:
    """Ring all-gather over ``group``, in place.

    Args:
        tensor: the full-size tensor (S bytes, same shape and dtype on every rank, contiguous).
            On entry this rank's chunk ``i`` of ``tensor.view(-1)`` (:func:`chunk_bounds`) holds
            its data; the rest is overwritten. To gather shards ``x`` of a tensor of ``numel``
            elements: ``full.view(-1)[start:end] = x`` first.
        group, check, trace: as in :func:`ring_reduce_scatter`.

    Returns:
        ``tensor``, every chunk now holding its owner's data (like ``all_gather_single``).
        Sends and receives (N−1)/N · S bytes in N−1 messages.

    Raises:
        As :func:`ring_reduce_scatter`.
    """
    ranks, me = _ring("ring_all_gather", tensor, group, None, check)
    with collective("ring_all_gather", tensor, group):
        _all_gather_steps(tensor.view(-1), ranks, me, group, trace, "ring_all_gather")
    return tensor


def ring_all_reduce(
    tensor: torch.Tensor, op=ReduceOp.SUM, group=None, *, check: bool = True, trace: list | None = None
) -> torch.Tensor:
    """Ring all-reduce = reduce-scatter then all-gather over N chunks, in place (Patarasuk & Yuan 2009).

    Args:
        tensor: any shape, contiguous, same shape and dtype on every rank of ``group`` (S bytes);
            any number of elements (chunks differ by at most one element).
        op: ``ReduceOp.SUM`` (default), ``AVG``, ``PRODUCT``, ``MAX`` or ``MIN``.
        group, check, trace: as in :func:`ring_reduce_scatter`.

    Returns:
        ``tensor``, now holding the reduction over the group on every rank (like
        ``torch.distributed.all_reduce(tensor, op, group)``, which returns None).
        Sends and receives 2(N−1)/N · S bytes in 2(N−1) messages.

    Raises:
        As :func:`ring_reduce_scatter`.
    """
    ranks, me = _ring("ring_all_reduce", tensor, group, op, check)
    flat = tensor.view(-1)
    with collective("ring_all_reduce", tensor, group):
        _reduce_scatter_steps(flat, ranks, me, op, group, trace, "ring_all_reduce")
        _all_gather_steps(flat, ranks, me, group, trace, "ring_all_reduce")
    return tensor


def naive_all_reduce(tensor: torch.Tensor, op=ReduceOp.SUM, group=None, *, check: bool = True) -> torch.Tensor:
    """All-reduce the naive way, for contrast: everyone sends everything to the group's first rank.

    The root receives N−1 whole tensors, reduces them in rank order, and sends the result back
    to each rank. Per call the root sends and receives (N−1)·S bytes, every other rank S: the
    root's link carries N/2 times the ring's per-rank volume. Same arguments, result, in-place
    behaviour and errors as :func:`ring_all_reduce`.
    """
    ranks, me = _ring("naive_all_reduce", tensor, group, op, check)
    n, root, name = len(ranks), ranks[0], "naive_all_reduce"
    with collective(name, tensor, group):
        if me == 0:
            reduce_, tmp = _reducer(op), torch.empty_like(tensor)
            for src in ranks[1:]:
                _wait([(p2p.irecv(tmp, src=src, group=group, label=f"{name} in"), "from", src)], name, ranks, group)
                reduce_(tensor, tmp)
            if op == ReduceOp.AVG:
                tensor.div_(n)
            _wait(
                [(p2p.isend(tensor, dst=d, group=group, label=f"{name} out"), "to", d) for d in ranks[1:]],
                name,
                ranks,
                group,
            )
        elif n > 1:
            _wait([(p2p.isend(tensor, dst=root, group=group, label=f"{name} in"), "to", root)], name, ranks, group)
            _wait([(p2p.irecv(tensor, src=root, group=group, label=f"{name} out"), "from", root)], name, ranks, group)
    return tensor
