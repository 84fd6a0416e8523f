"""How context parallelism cuts a sequence: which positions each rank holds, and back.

    ranges = load_balanced_ranges(T=10, cp=2)      # [[(0, 3), (8, 10)], [(3, 6), (6, 8)]]
    x_mine = shard(x, ranges[rank], dim=1)          # this rank's tokens, in position order
    x_full = unshard([x_0, x_1], ranges, dim=1)     # the inverse, from every rank's piece

A rank's part of the sequence is a list of ``(start, end)`` ranges of global positions, in
increasing order; the ranks' ranges partition ``range(T)``. Two splits:

- **contiguous** (:func:`contiguous_ranges`): rank i holds chunk i of N. Under a causal mask
  rank i's queries see i + 1 of the N key chunks, so the last rank does about 2N − 1 times the
  first one's work (:func:`causal_pairs` counts it);
- **load balanced** (:func:`load_balanced_ranges`): the sequence is cut into 2N chunks and rank
  i holds chunks i and 2N − 1 − i, so every rank holds one early and one late chunk and the
  causal work is equal (to a few tokens). Megatron-LM's context parallelism
  (its ``get_batch_on_this_cp_rank``), Llama 3 (Dubey et al. 2024,
  arXiv:2407.21783, §3.3.2) and ``torch.distributed.tensor.experimental.context_parallel``'s
  head-tail load balancer split this way.

Lengths that do not divide. Megatron and PyTorch require T % (2N) == 0; here the chunks follow
``torch.tensor_split``'s rule (:func:`minipar.comm.collectives.chunk_bounds`: the first T mod k
chunks get one token more), so any T ≥ 1 works without padding and ranks hold up to two tokens
more than each other. Every rank can compute every rank's ranges from (T, N) alone, which is what
lets a ring of unequal blocks post receive buffers of the right size (:mod:`minipar.cp.ring`).
"""

from __future__ import annotations

import torch

from minipar.comm.collectives import chunk_bounds
from minipar.errors import ConfigError

Ranges = list[tuple[int, int]]


def _check(T: int, cp: int) -> None:
    if not isinstance(cp, int) or cp < 1:
        raise ConfigError(f"--cp {cp!r}: must be an integer >= 1")
    if not isinstance(T, int) or T < 1:
        raise ConfigError(f"sequence length {T!r}: must be an integer >= 1")


def contiguous_ranges(T: int, cp: int) -> list[Ranges]:
    """Rank i holds chunk i of ``cp`` (sizes differ by at most one). Returns one list per rank."""
    _check(T, cp)
    return [[chunk_bounds(T, cp, i)] for i in range(cp)]


def load_balanced_ranges(T: int, cp: int) -> list[Ranges]:
    """Rank i holds chunks i and 2·cp − 1 − i of 2·cp (Megatron's and Llama 3's causal split).

    Returns one list of two ``(start, end)`` per rank (one with cp = 1: the whole sequence).
    Raises ConfigError: cp < 1, or T < 2·cp (a rank would hold an empty chunk; use a shorter --cp).
    """
    _check(T, cp)
    if cp == 1:
        return [[(0, T)]]
    if T < 2 * cp:
        raise ConfigError(f"sequence length {T} < 2·cp = {2 * cp}: a rank would hold no token; use --cp <= {T // 2}")
    k = 2 * cp
    return [[chunk_bounds(T, k, i), chunk_bounds(T, k, k - 1 - i)] for i in range(cp)]


def length(ranges: Ranges) -> int:
    """Tokens a rank holds."""
    return sum(e - s for s, e in ranges)


def positions(ranges: Ranges, device=None) -> torch.Tensor:
    """The global positions a rank holds, in its local order: (length,) int64."""
    return torch.cat([torch.arange(s, e, device=device) for s, e in ranges])


def shard(x: torch.Tensor, ranges: Ranges, dim: int = 1) -> torch.Tensor:
    """This rank's tokens of a full tensor ``x`` (sequence along ``dim``), concatenated in order."""
    return torch.cat([x.narrow(dim, s, e - s) for s, e in ranges], dim=dim)


def unshard(pieces: list[torch.Tensor], ranges: list[Ranges], dim: int = 1) -> torch.Tensor:
    """The inverse of :func:`shard`: every rank's piece back into one sequence along ``dim``.

    Raises ConfigError: a piece's length differs from its ranges'.
    """
    parts = []
    for r, (p, rr) in enumerate(zip(pieces, ranges)):
        if p.shape[dim] != length(rr):
            raise ConfigError(f"rank {r}'s piece has {p.shape[dim]} tokens along dim {dim}, its ranges {length(rr)}")
        off = 0
        for s, e in rr:
            parts.append((s, p.narrow(dim, off, e - s)))
            off += e - s
    return torch.cat([t for _, t in sorted(parts, key=lambda a: a[0])], dim=dim)


def causal_pairs(q_ranges: Ranges, k_ranges: Ranges) -> int:
    """(query, key) pairs a causal mask keeps between two sets of positions: key position <= query's.

    The attention work (FLOPs ∝ pairs) of one block; summed over a rank's key blocks, its load.
    """
    n = 0
    for qs, qe in q_ranges:
        for ks, ke in k_ranges:
            for p in range(qs, qe):  # keys ks..min(ke, p+1)-1
                n += max(0, min(ke, p + 1) - ks)
    return n


def causal_work(ranges: list[Ranges]) -> list[int]:
    """Causal (query, key) pairs each rank's queries attend to (its attention FLOPs ∝ this)."""
    everything = [(0, max(e for rr in ranges for _, e in rr))]
    return [causal_pairs(rr, everything) for rr in ranges]
