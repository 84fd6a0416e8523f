"""Tensor parallelism, part 5: overlap the sequence-parallel all-gather with the GEMM that needs it.

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
Forward only: a teaching kernel, not wired into :class:`~minipar.tp.layers.ColumnParallelLinear`.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from minipar.comm import p2p
from minipar.tp.mappings import _all_gather, tp_rank, tp_size


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
