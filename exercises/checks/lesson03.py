"""Checks for lesson 03: the ZeRO-1 step on real ranks against ``torch.optim.AdamW`` on one device.

Each rank's gradient differs (seeded by step and rank); one device steps with their mean. Float64,
bound 1e-12. ``eps`` is large (1e-4) so that a gradient N times too large changes the step visibly
(AdamW is otherwise almost blind to the gradient's scale).
"""

from __future__ import annotations

import importlib
import math

import torch

from exercises.checks.common import EXACT, CheckFailed, max_diff, run_ranks

TITLE = "ZeRO"
MODULE = "ex03_zero"
STEPS = 3
HYPER = dict(lr=0.1, betas=(0.9, 0.95), eps=1e-4, weight_decay=0.1)


def grad(numel, step, rank):
    return torch.randn(numel, generator=torch.Generator().manual_seed(1000 * step + rank), dtype=torch.float64)


def start(numel):
    return torch.randn(numel, generator=torch.Generator().manual_seed(7), dtype=torch.float64)


def worker(module, numel):
    from minipar import dist as mdist

    mod = importlib.import_module(module)
    p, state = start(numel), {}
    for s in range(STEPS):
        mod.zero1_step(p, grad(numel, s, mdist.rank()), state, **HYPER)
    sizes = {k: (v.numel() if torch.is_tensor(v) else None) for k, v in state.items()}
    return {"param": p, "sizes": sizes}


def reference(numel, grads):
    """One device: AdamW with the given gradient per step."""
    p = start(numel).requires_grad_()
    opt = torch.optim.AdamW([p], **HYPER)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach()


def check_zero1(mod) -> str:
    for n, numel in ((1, 10), (3, 10), (4, 10), (4, 2), (3, 1000)):
        what = f"zero1_step, {n} ranks, {numel} parameters"
        got = run_ranks(worker, n, (mod.__name__, numel), what)
        mean = [sum(grad(numel, s, r) for r in range(n)) / n for s in range(STEPS)]
        want = reference(numel, mean)
        shard = math.ceil(numel / n)
        for r in range(n):
            sizes = got[r]["sizes"]
            big = {k: v for k, v in sizes.items() if v is not None and v > shard}
            if big:
                raise CheckFailed(
                    f"{what}: rank {r} keeps state {big} (elements), but ZeRO-1 keeps only this rank's "
                    f"shard of the moments: {shard} elements (padded numel / N)"
                )
        for r in range(n):
            p = got[r]["param"]
            if max_diff(p, want) < EXACT:
                continue
            if n > 1 and max_diff(p, reference(numel, [g * n for g in mean])) < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} stepped with the SUM of the gradients: divide the reduce-scattered "
                    f"shard by N = {n} (AdamW uses the mean gradient)"
                )
            if n > 1 and max_diff(p, reference(numel, [grad(numel, s, r) for s in range(STEPS)])) < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} stepped with its own gradient only: reduce-scatter the gradients "
                    "first (dist.reduce_scatter_single), then step the shard"
                )
            padded = shard * n
            lo, hi = r * shard, min((r + 1) * shard, numel)
            own = max_diff(p[lo:hi], want[lo:hi]) if hi > lo else 0.0
            if n > 1 and own < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} has its own shard [{lo}, {hi}) right but not the others' — "
                    "all-gather the updated shards into the full buffer (dist.all_gather_single) and "
                    "copy its first numel elements back"
                )
            k = int(((p - want).abs() >= EXACT).nonzero()[0])
            raise CheckFailed(
                f"{what}: rank {r}, element {k} is {p[k].item():.6g}, expected {want[k].item():.6g} "
                f"(float64, bound {EXACT:g}): check the padding to {padded} and the slice "
                "[rank·padded/N, (rank+1)·padded/N), and the AdamW bias correction with state['step']"
            )
    return (
        "N = 1, 3, 4 ranks; 2, 10, 1000 parameters (padding, fewer than ranks) = torch AdamW on the mean gradient, "
        "3 steps (float64)"
    )


CHECKS = [("zero1_step", check_zero1)]
