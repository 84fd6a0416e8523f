"""Context parallelism the way Llama 3 trained it: all-gather K and V, then attend locally.

    out = all_gather_attention(q, k, v, ranges, group)   # same arguments and result as ring_attention

Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, §3.3.2 ("Context
parallelism"): with the load-balanced split (each rank holds chunks i and 2N − 1 − i), Llama 3
all-gathers the key and value tensors and computes attention for its local query chunks, rather
than passing K/V round a ring. The paper's reasons: an all-gather is easy to combine with
attention masks other than causal (documents), and with grouped-query attention K and V are much
smaller than Q, so the exposed all-gather latency is small next to the attention compute.

Here the all-gather and, in backward, the reduce-scatter of dK/dV are minipar's ring collectives
(:func:`minipar.comm.collectives.ring_all_gather`, ``ring_reduce_scatter``). Those cut a flat
tensor into equal chunks, so each rank's K/V block is padded to the longest rank's length
L_max (at most two tokens more when T is not a multiple of 2N) and unpadded after.

Bytes per rank (:func:`all_gather_attention_bytes`): forward (N − 1) · 2·B·h·L_max·d·e for the
all-gather, backward the same for the reduce-scatter — the ring's forward volume (each rank still
receives the whole K and V once), but in one collective before the compute instead of N − 1
transfers hidden behind it, and every rank then holds the full K and V (T tokens, not T/N).
"""

from __future__ import annotations

import torch

from minipar.comm.collectives import ring_all_gather, ring_reduce_scatter
from minipar.cp.blocks import block_attention
from minipar.cp.ring import pieces, ring_of
from minipar.cp.split import Ranges, length, shard, unshard
from minipar.errors import ConfigError


class GatherKV(torch.autograd.Function):
    """(2, B, h, L_r, d) local [K; V] -> (2, B, h, T, d) full, in position order; backward: reduce-scatter."""

    @staticmethod
    def forward(ctx, kv, ranges, group):
        ranks, me = ring_of(group)
        n, lmax = len(ranks), max(length(rr) for rr in ranges)
        buf = kv.new_zeros(n, *kv.shape[:-2], lmax, kv.shape[-1])
        buf[me, ..., : kv.shape[-2], :] = kv
        if n > 1:
            ring_all_gather(buf, group, check=False)  # shapes follow from (T, N): equal on every rank
        ctx.ranges, ctx.group = ranges, group
        return unshard([buf[r, ..., : length(ranges[r]), :] for r in range(n)], ranges, dim=-2)

    @staticmethod
    def backward(ctx, g):
        ranges, group = ctx.ranges, ctx.group
        ranks, me = ring_of(group)
        n, lmax = len(ranks), max(length(rr) for rr in ranges)
        buf = g.new_zeros(n, *g.shape[:-2], lmax, g.shape[-1])
        for r in range(n):
            buf[r, ..., : length(ranges[r]), :] = shard(g, ranges[r], dim=-2)
        if n > 1:
            ring_reduce_scatter(buf, group=group, check=False)
        return buf[me, ..., : length(ranges[me]), :].clone(), None, None


def all_gather_attention(q, k, v, ranges: list[Ranges], group=None, scale: float | None = None) -> torch.Tensor:
    """Causal attention of this rank's queries to the all-gathered keys and values (Llama 3's CP).

    Args, returns, raises: as :func:`minipar.cp.ring.ring_attention` (the same numbers).
    """
    ranks, me = ring_of(group)
    if len(ranges) != len(ranks) or q.shape[-2] != length(ranges[me]) or k.shape != q.shape or v.shape != q.shape:
        raise ConfigError(
            f"rank {me}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} and ranges for {len(ranges)} "
            f"ranks do not fit a group of {len(ranks)} (this rank holds {length(ranges[me])} tokens)"
        )
    kv = GatherKV.apply(torch.stack([k, v]), ranges, group)
    T = kv.shape[-2]
    outs = [block_attention(qp, kv[0], kv[1], qr, (0, T), scale)[0] for qr, qp in pieces(q, ranges[me])]
    return torch.cat(outs, dim=-2)


def all_gather_attention_bytes(ranges: list[Ranges], batch: int, heads: int, head_dim: int, elem_bytes: int):
    """Bytes each rank sends: {"forward": the all-gather, "backward": the reduce-scatter}, padded blocks."""
    n, lmax = len(ranges), max(length(rr) for rr in ranges)
    b = (n - 1) * 2 * batch * heads * lmax * head_dim * elem_bytes
    return {"forward": b, "backward": b}
