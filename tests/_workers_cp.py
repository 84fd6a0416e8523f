"""Functions the context-parallel tests run on several ranks (importable by child processes)."""

from __future__ import annotations

import torch

import minipar.dist as md
from minipar.comm.comm_log import CommLog
from minipar.cp.all_gather import all_gather_attention
from minipar.cp.ring import ring_attention
from minipar.cp.split import contiguous_ranges, load_balanced_ranges, shard


def inputs(T: int, B: int = 2, H: int = 2, D: int = 4, seed: int = 0):
    """The same full q, k, v and output gradient on every rank (float64)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, T, D, dtype=torch.float64, generator=g) for _ in range(4)]


def attend(T: int, split: str = "balanced", variant: str = "ring", seed: int = 0) -> dict:
    """This rank's output and q/k/v gradients for a sequence of T tokens, with the bytes it sent."""
    n, r = md.world_size(), md.rank()
    ranges = (load_balanced_ranges if split == "balanced" else contiguous_ranges)(T, n)
    q, k, v, g = (shard(t, ranges[r], dim=2) for t in inputs(T, seed=seed))
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    fn = ring_attention if variant == "ring" else all_gather_attention
    with CommLog() as fwd:
        out = fn(q, k, v, ranges, None)
    with CommLog() as bwd:
        out.backward(g)
    return dict(
        ranges=ranges,
        out=out.detach(),
        dq=q.grad,
        dk=k.grad,
        dv=v.grad,
        sent=(fwd.total("sent"), bwd.total("sent")),
        recv=(fwd.total("recv"), bwd.total("recv")),
        p2p=[(rec.op, rec.peer, rec.bytes) for rec in fwd.records + bwd.records],
    )
