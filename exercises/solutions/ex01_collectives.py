"""Lesson 01 · collectives: the ring reduce-scatter and all-gather, from send and receive only.

Exercises (run ``make check LESSON=01``):

1. :func:`ring_reduce_scatter` — N−1 steps; afterwards rank i holds chunk i summed over the group.
2. :func:`ring_all_gather` — N−1 steps; afterwards every rank holds every chunk.

Together they are the ring all-reduce (Patarasuk & Yuan 2009, J. Parallel Distrib. Comput.
69(2), §3). Use only point-to-point messages: ``dist.isend`` / ``dist.irecv`` (or ``send`` /
``recv``), never ``dist.reduce_scatter`` or ``dist.all_gather``. The chunks are
:func:`minipar.comm.collectives.chunk_bounds` (sizes differ by at most one, some are empty when the
tensor has fewer elements than ranks). Messages go to *global* ranks, also on a sub-group:
:func:`ring_neighbours` lists the group's ranks in ring order. A message and the buffer it is received
into must have the same size (gloo aborts the rank otherwise). The checker runs N = 1, 3 and 4 ranks,
sizes that do not divide by N, and a sub-group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.comm.collectives import chunk_bounds


def ring_neighbours(group=None) -> tuple[list[int], int]:
    """``(ranks, i)``: the *global* ranks of ``group`` in ring order, and this rank's index among them.

    Given (not an exercise): ``dist.isend(t, dst=...)`` takes a global rank even with ``group=``.
    """
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    return ranks, dist.get_rank(group)


def ring_reduce_scatter(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks of ``group``; return this rank's chunk of the sum.

    Args:
        tensor: contiguous, any shape, the same shape and dtype on every rank of the group. It is
            the workspace: its chunks are overwritten with partial sums.
        group: a process group (default: the world). Ranks outside it do not call this.

    Returns:
        ``tensor.view(-1)[start:end]`` with ``(start, end) = chunk_bounds(numel, N, i)`` and i this
        rank's index in the group: the sum over the group of that chunk. Shape ``(end − start,)``.

    Invariant: sends and receives (N−1) messages of one chunk each; N = 1 returns the whole tensor.

    Hint: lesson 01, "The ring, chunk by chunk" and "What you need to build it". Each rank sends only to the
    next rank of the ring and receives only from the previous one; a chunk picks up one more rank's
    contribution at each hop, so work out which chunk each rank must send first for the chunk that
    arrives last (complete) to be its own. Post the receive and the send together: if every rank
    first blocks in ``send``, nobody is receiving.
    """
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    for s in range(n - 1):
        a, b = chunk_bounds(flat.numel(), n, (i - s - 1) % n)
        c, d = chunk_bounds(flat.numel(), n, (i - s - 2) % n)
        buf = torch.empty(d - c, dtype=flat.dtype)
        reqs = [dist.irecv(buf, src=left, group=group), dist.isend(flat[a:b].clone(), dst=right, group=group)]
        for r in reqs:
            r.wait()
        flat[c:d] += buf
    a, b = chunk_bounds(flat.numel(), n, i)
    return flat[a:b]


def ring_all_gather(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Fill every chunk of ``tensor`` with its owner's data, in place; return ``tensor``.

    Args:
        tensor: contiguous, the full size, same shape and dtype on every rank of the group. On
            entry chunk i (``chunk_bounds(numel, N, i)`` of ``tensor.view(-1)``) of rank i holds that
            rank's data; the other chunks hold anything and are overwritten.
        group: a process group (default: the world).

    Returns:
        ``tensor``: every rank's chunk j now equals rank j's chunk j.

    Invariant: N−1 steps, one chunk sent to the next rank and one received from the previous per
    step; what a rank received at one step is what it forwards at the next.

    Hint: lesson 01, "The ring, chunk by chunk": the same ring as the reduce-scatter, with copies instead of sums,
    received straight into place.
    """
    ranks, i = ring_neighbours(group)
    n, flat = len(ranks), tensor.view(-1)
    right, left = ranks[(i + 1) % n], ranks[(i - 1) % n]
    for s in range(n - 1):
        a, b = chunk_bounds(flat.numel(), n, (i - s) % n)
        c, d = chunk_bounds(flat.numel(), n, (i - s - 1) % n)
        buf = torch.empty(d - c, dtype=flat.dtype)
        reqs = [dist.irecv(buf, src=left, group=group), dist.isend(flat[a:b].clone(), dst=right, group=group)]
        for r in reqs:
            r.wait()
        flat[c:d] = buf
    return tensor
