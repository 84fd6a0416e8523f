"""Ring attention: causal attention over a sequence split across the ranks of a context-parallel group.

    out = ring_attention(q, k, v, ranges, group)   # q, k, v: this rank's tokens (B, h, L_r, d)

Liu, Zaharia & Abbeel 2023, "Ring Attention with Blockwise Transformers for Near-Infinite
Context", arXiv:2310.01889: the N ranks of ``group`` stand in a ring; each keeps its queries
and passes its key/value block to the right neighbour N − 1 times, so at step s rank r holds the
block of rank (r − s) mod N, attends to it (:func:`minipar.cp.blocks.block_attention`, causal
mask from global positions) and merges the result into its running (out, lse)
(:func:`minipar.cp.blocks.merge`). The transfer of the next block is posted *before* the block
compute and waited for after it, so it overlaps the compute (the paper's point: with blocks long
enough, the ring's traffic hides behind attention FLOPs).

Backward (a ring again, the paper's and FlashAttention-2's recipe): the key/value blocks make the
same N − 1 hops, and each block travels with a dK/dV accumulator for its owner that every rank adds
its share into (:func:`minipar.cp.blocks.block_grads`) before passing it on; after N hops it is
home. A rank's own share for the next block is computed while the accumulator is in flight.

Bytes per rank (:func:`ring_attention_bytes`), with e bytes per element and L_j the tokens of
rank j: forward, rank r sends the blocks of ranks r, r−1, …, r−N+2, each 2·B·h·L_j·d·e (K and V);
backward, the same N − 1 blocks plus N dK/dV accumulators of 2·B·h·L_j·d·e. With equal L = T/N:

    forward  = (N − 1) · 2·B·h·(T/N)·d·e
    backward = (2N − 1) · 2·B·h·(T/N)·d·e        (N ≥ 2; nothing at N = 1)

about 2·B·h·T·d·e per pass, independent of N (the whole K and V pass every rank once), while the
attention work per rank falls as 1/N. Every message goes through :mod:`minipar.comm.p2p`, labelled
``kv{s}`` / ``dkv{s}``, so strict mode checks the ring's order on every step.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.comm import p2p
from minipar.cp.blocks import SKIP, block_attention, block_grads, block_kind, merge
from minipar.cp.split import Ranges, length
from minipar.errors import ConfigError


def ring_of(group) -> tuple[list[int], int]:
    """(global ranks of the group in order, this rank's index)."""
    if not dist.is_initialized():
        return [0], 0
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    return ranks, ranks.index(dist.get_rank())


def pieces(t: torch.Tensor, ranges: Ranges):
    """(range, slice of t along the sequence dim -2) for each of a rank's ranges."""
    off = 0
    for s, e in ranges:
        yield (s, e), t[..., off : off + e - s, :]
        off += e - s


def _attend(q, k, v, q_ranges, k_ranges, acc, scale, trace=None, step=0):
    """Merge the attention of every (query piece, key piece) pair that is not masked into ``acc``;
    append ``(step, q range, k range)`` of each block attended to ``trace`` (a list, or None)."""
    for i, (qr, qp) in enumerate(pieces(q, q_ranges)):
        for (kr, kp), (_, vp) in zip(pieces(k, k_ranges), pieces(v, k_ranges)):
            if block_kind(qr, kr) != SKIP:
                acc[i] = merge(*acc[i], *block_attention(qp, kp, vp, qr, kr, scale))
                if trace is not None:
                    trace.append((step, qr, kr))


def _post(kind: str, t: torch.Tensor, peer: int, group, label: str):
    return (p2p.isend if kind == "send" else p2p.irecv)(t, peer, group=group, label=label)


class RingAttention(torch.autograd.Function):
    """The autograd function behind :func:`ring_attention` (forward and backward are both rings)."""

    @staticmethod
    def forward(ctx, q, k, v, ranges, group, scale, overlap=True, trace=None):
        ranks, me = ring_of(group)
        n = len(ranks)
        right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
        kv = torch.stack([k, v]).contiguous()
        acc = [(None, None)] * len(ranges[me])
        for s in range(n):
            src = (me - s) % n
            if s < n - 1:  # post the next block's transfer, then compute on this one (overlap)
                nxt = q.new_empty(2, *q.shape[:2], length(ranges[(src - 1) % n]), q.shape[-1])
                works = [_post("recv", nxt, left, group, f"kv{s}"), _post("send", kv, right, group, f"kv{s}")]
                while works and not overlap:  # the contrast: wait for the transfer, then compute
                    works.pop(0).wait()
            _attend(q, kv[0], kv[1], ranges[me], ranges[src], acc, scale, trace, s)
            if s < n - 1:
                for w in works:
                    w.wait()
                kv = nxt
        out = torch.cat([o for o, _ in acc], dim=-2)
        lse = torch.cat([m for _, m in acc], dim=-1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ranges, ctx.group, ctx.scale = ranges, group, scale
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        ranges, group, scale = ctx.ranges, ctx.group, ctx.scale
        ranks, me = ring_of(group)
        n = len(ranks)
        right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
        d_out = d_out.contiguous()
        dq = torch.zeros_like(q)
        kv = torch.stack([k, v]).contiguous()
        incoming = None  # the accumulator of the block held now, in flight from the left
        for s in range(n):
            src = (me - s) % n
            if s < n - 1:
                nxt = q.new_empty(2, *q.shape[:2], length(ranges[(src - 1) % n]), q.shape[-1])
                works = [_post("recv", nxt, left, group, f"kv{s}"), _post("send", kv, right, group, f"kv{s}")]
            dkv = torch.zeros_like(kv)  # this rank's share of block src's gradient
            mine = zip(*(pieces(t, ranges[me]) for t in (q, out, d_out, lse.unsqueeze(-1), dq)))
            for (qr, qp), (_, op), (_, gp), (_, lp), (_, dqp) in mine:
                theirs = zip(*(pieces(t, ranges[src]) for t in (kv[0], kv[1], dkv[0], dkv[1])))
                for (kr, kp), (_, vp), (_, dkp), (_, dvp) in theirs:
                    if block_kind(qr, kr) != SKIP:
                        g_q, g_k, g_v = block_grads(qp, kp, vp, op, lp.squeeze(-1), gp, qr, kr, scale)
                        dqp += g_q
                        dkp += g_k
                        dvp += g_v
            if n == 1:
                return dq, dkv[0], dkv[1], None, None, None, None, None
            if incoming is not None:  # add the accumulator that travelled here, then pass it on
                incoming[0].wait()
                dkv += incoming[1]
            send = _post("send", dkv, right, group, f"dkv{s}")
            buf = q.new_empty(2, *q.shape[:2], length(ranges[(src - 1) % n]), q.shape[-1])
            incoming = (_post("recv", buf, left, group, f"dkv{s}"), buf)
            if s < n - 1:
                for w in works:
                    w.wait()
                kv = nxt
            send.wait()
        incoming[0].wait()  # after N hops, this rank's own dK/dV is home
        dkv = incoming[1]
        return dq, dkv[0], dkv[1], None, None, None, None, None


def ring_attention(
    q,
    k,
    v,
    ranges: list[Ranges],
    group=None,
    scale: float | None = None,
    overlap: bool = True,
    trace: list | None = None,
) -> torch.Tensor:
    """Causal attention of this rank's queries to the whole sequence's keys, K/V passed round a ring.

    Args:
        q, k, v: (B, h, L_r, d) this rank's tokens, in the order of ``ranges[r]`` (:mod:`minipar.cp.split`).
        ranges: every rank's global position ranges, indexed by the rank's index in ``group``
            (from :func:`~minipar.cp.split.load_balanced_ranges` or ``contiguous_ranges``).
        group: the context-parallel process group (None: the world; a single process: N = 1).
        scale: softmax scale (default 1/√d).
        overlap: post each transfer before the block compute and wait after it (default); False waits
            for it first (the same numbers, for the timing contrast of lesson 11).
        trace: a list to record the forward's work in: one ``(step, q range, k range)`` per block this
            rank attends, in order (at ring step s it holds the keys of the rank s places to its left).
    Returns:
        (B, h, L_r, d): rows equal to full causal attention's rows at this rank's positions.
    Raises:
        ConfigError: ``ranges`` has another length than the group, or q's length differs from its ranges'.
    """
    ranks, me = ring_of(group)
    if len(ranges) != len(ranks):
        raise ConfigError(f"ranges for {len(ranges)} ranks but the context-parallel group has {len(ranks)}")
    if q.shape[-2] != length(ranges[me]) or k.shape != q.shape or v.shape != q.shape:
        raise ConfigError(
            f"rank {me}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} but its ranges hold "
            f"{length(ranges[me])} tokens; shard q, k, v with minipar.cp.split.shard(x, ranges[rank], dim=2)"
        )
    return RingAttention.apply(q, k, v, ranges, group, scale, overlap, trace)


def ring_attention_bytes(ranges: list[Ranges], rank: int, batch: int, heads: int, head_dim: int, elem_bytes: int):
    """Bytes ``rank`` sends in ring attention's forward and backward (receives: the same formula for
    the blocks it gets). Returns {"forward", "backward"}; see the module doc for the formula."""
    n = len(ranges)
    blk = [2 * batch * heads * length(rr) * head_dim * elem_bytes for rr in ranges]
    fwd = sum(blk[(rank - s) % n] for s in range(n - 1))
    dkv = sum(blk[(rank - s) % n] for s in range(n)) if n > 1 else 0  # one rank: nothing travels
    return {"forward": fwd, "backward": fwd + dkv}
