"""Tensor parallelism, part 5: overlap the sequence-parallel all-gather (and reduce-scatter) with its GEMM.

With sequence parallelism (:mod:`minipar.tp.mappings`) a column-parallel layer's input arrives
sharded along the sequence, x_r (B, T/N, d) on rank r, and must be all-gathered before the GEMM
Y = [x_0; …; x_{N−1}] · Wᵀ_r. Done naively the GEMM waits for the whole all-gather. But the GEMM
is row-separable: Y's rows from x_k need only x_k. So decompose (Wang et al. 2023, "Overlap
Communication with Dependent Computation via Decomposition in Large Deep Learning Models",
ASPLOS '23; MegaScale, Jiang et al. 2024, arXiv:2402.15627 §3.2): run the all-gather as N − 1
ring steps, and at step k multiply the chunk already here while the next one travels:

    step k = 0 .. N−1:  post send(cur → right), recv(nxt ← left)   (batch_isend_irecv, async)
                        Y[rows of chunk (r − k) mod N] = cur · Wᵀ_r   (overlaps the transfer)
                        wait; cur = nxt

Same bytes as the all-gather ((N−1)/N · B·T·d elements received per rank), same result bit for
bit (each row is one GEMM either way; only *when* it runs changes). On a GPU the transfer uses
the NIC/NVLink while the SMs multiply; on 2 CPU cores both compete for the same cores, which is
why lesson 09 draws the simulated timeline (:mod:`minipar.perf.timeline`) beside the measured one.
The mirror image sits at the end of the block: a row-parallel layer's partial product
x·Wᵀ_r (B, T, d) is reduce-scattered along the sequence (:func:`matmul_reducescatter`). Decomposed,
the partial sums travel round the ring while the next chunk's GEMM runs — MegaScale §3.2 fuses
GEMM + reduce-scatter the same way:

    step k = 0 .. N−1:  acc = x[rows of chunk (r − k − 1) mod N] · Wᵀ_r (+ what came from the left)
                        k < N−1: post send(acc → right), recv(← left); the next GEMM overlaps it

and rank r ends with chunk r summed over all N ranks: a ring reduce-scatter's bytes ((N−1)/N ·
B·T·d elements sent per rank), the GEMM split in N row blocks.
Forward only: teaching kernels, not wired into :class:`~minipar.tp.layers.ColumnParallelLinear` /
``RowParallelLinear``.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from minipar.comm import p2p
from minipar.tp.mappings import _all_gather, _reduce_scatter, tp_rank, tp_size


@torch.no_grad()
def allgather_matmul(
    x_shard: torch.Tensor, weight: torch.Tensor, group=None, overlap: bool = True, trace: list | None = None
) -> torch.Tensor:
    """``all_gather(x_shard, dim=1) @ weight.T``, optionally decomposed so communication overlaps the GEMM.

    Args:
        x_shard: (B, T/N, d_in) this rank's sequence chunk (rank order along T).
        weight: (d_out_local, d_in) this rank's rows of a column-parallel weight.
        group: the tensor-parallel group (default: the world).
        overlap: False = all-gather first, then one GEMM (the baseline).
        trace: if a list, gets ``(stream, k, start, end)`` tuples (``perf_counter`` seconds):
            "compute" per chunk GEMM, "comm" per ring step (post to wait).
    Returns:
        (B, T, d_out_local).
    """
    n, me = tp_size(group), tp_rank(group)
    clock = time.perf_counter
    if not overlap or n == 1:
        t0 = clock()
        full = _all_gather(x_shard, 1, group)
        t1 = clock()
        y = full @ weight.t()
        if trace is not None:
            trace += [("comm", 0, t0, t1), ("compute", 0, t1, clock())]
        return y
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(n))
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    B, Tl, _ = x_shard.shape
    out = torch.empty(B, n * Tl, weight.shape[0], dtype=x_shard.dtype, device=x_shard.device)
    cur = x_shard.contiguous()
    for k in range(n):
        src = (me - k) % n  # whose chunk `cur` is
        reqs, t0 = [], clock()
        if k < n - 1:
            nxt = torch.empty_like(cur)
            send = p2p.P2P("send", cur, right, group, label=f"chunk {src}")
            reqs = p2p.batch_isend_irecv([send, p2p.P2P("recv", nxt, left, group, label=f"chunk {(src - 1) % n}")])
        g0 = clock()
        out[:, src * Tl : (src + 1) * Tl] = cur @ weight.t()
        g1 = clock()
        for r in reqs:
            r.wait()
        if trace is not None:
            trace.append(("compute", k, g0, g1))
            if reqs:
                trace.append(("comm", k, t0, clock()))
        if k < n - 1:
            cur = nxt
    return out


@torch.no_grad()
def matmul_reducescatter(x: torch.Tensor, weight: torch.Tensor, group=None, overlap: bool = True) -> torch.Tensor:
    """``reduce_scatter(x @ weight.T, dim=1)`` (sum over the group), optionally decomposed into a ring
    whose transfers overlap the next chunk's GEMM (see the module doc).

    Args:
        x: (B, T, d_in_local) this rank's slice of a row-parallel layer's input (all T rows).
        weight: (d_out, d_in_local) this rank's columns of the row-parallel weight.
        group: the tensor-parallel group (default: the world).
        overlap: False = one GEMM, then one reduce-scatter (the baseline).
    Returns:
        (B, T/N, d_out): rows ``[r·T/N, (r+1)·T/N)`` of Σ_ranks x·Wᵀ, on rank r.
    Raises:
        ValueError: T not divisible by the group size.
    """
    n, me = tp_size(group), tp_rank(group)
    B, T, _ = x.shape
    if T % n:
        raise ValueError(f"matmul_reducescatter: T={T} rows do not split over {n} ranks; pad T to a multiple of {n}")
    if not overlap or n == 1:
        return _reduce_scatter(x @ weight.t(), 1, group)
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(n))
    right, left = ranks[(me + 1) % n], ranks[(me - 1) % n]
    Tl, reqs, got, sent = T // n, [], None, None  # `sent`: the buffer in flight, alive until its wait
    for k in range(n):
        c = (me - k - 1) % n  # the chunk whose partial sum this rank adds to at step k
        acc = x[:, c * Tl : (c + 1) * Tl] @ weight.t()  # overlaps the transfer posted at step k − 1
        for r in reqs:
            r.wait()
        if got is not None:
            acc += got
        if k == n - 1:
            return acc
        got, sent = torch.empty_like(acc), acc
        reqs = p2p.batch_isend_irecv(
            [p2p.P2P("send", sent, right, group, label=f"partial {c}"),
             p2p.P2P("recv", got, left, group, label=f"partial {(c - 1) % n}")]
        )  # fmt: skip
