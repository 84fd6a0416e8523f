"""Expert parallelism without all-to-all: every rank computes its experts' share of every rank's
tokens, summed with one all-reduce per source rank (right values, every token moves to every rank)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex12_experts import *  # noqa: F401,F403


def expert_parallel_forward(x, expert, gate, local_experts, group=None):
    n, me, per = dist.get_world_size(group), dist.get_rank(group), len(local_experts)
    sizes = torch.zeros(n, dtype=torch.int64)
    sizes[me] = x.shape[0]
    dist.all_reduce(sizes, group=group)
    out = None
    for src in range(n):
        T = int(sizes[src])
        xs, es, gs = (
            torch.zeros(T, x.shape[1], dtype=x.dtype),
            torch.zeros(T, expert.shape[1], dtype=torch.int64),
            torch.zeros(T, expert.shape[1], dtype=gate.dtype),
        )
        if src == me:
            xs, es, gs = x.clone(), expert.clone(), gate.clone()
        for t in (xs, es, gs):
            dist.all_reduce(t, group=group)
        part = torch.zeros_like(xs)
        for i, f in enumerate(local_experts):
            mask = es == me * per + i
            tok = mask.any(1).nonzero().squeeze(1)
            if tok.numel():
                part[tok] += (gs * mask)[tok].sum(1, keepdim=True) * f(xs[tok])
        dist.all_reduce(part, group=group)
        if src == me:
            out = part
    return out
