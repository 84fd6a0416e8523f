"""Checks for lesson 01: ring reduce-scatter and ring all-gather on real ranks (N = 1, 3, 4; a sub-group).

Inputs are integers in float64, so sums are exact and every value says where it came from:
rank r contributes ``(j + 1) · 2**r`` at flat position j. A wrong chunk, a missing step or a
message from the wrong neighbour gives a value that names the chunk and the ranks it holds.
"""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import CheckFailed, run_ranks
from minipar.comm.collectives import chunk_bounds

TITLE = "collectives"
MODULE = "ex01_collectives"
CASES = [(1, 10, None), (3, 10, None), (4, 1000, None), (4, 2, None), (4, 7, [1, 2, 3])]  # (world, numel, sub-group)


def _group(members):
    import minipar.dist
    from minipar import dist as mdist

    if members is None:
        return None, True
    g = minipar.dist.new_group(members)
    return g, mdist.rank() in members


def rs_worker(module, numel, members):
    from minipar import dist as mdist

    mod = importlib.import_module(module)
    group, inside = _group(members)
    if not inside:
        return None
    r = mdist.rank()
    x = torch.arange(1, numel + 1, dtype=torch.float64) * 2.0**r
    out = mod.ring_reduce_scatter(x.view(-1), group)
    return None if out is None else torch.as_tensor(out).detach().clone().reshape(-1)


def ag_worker(module, numel, members):
    from minipar import dist as mdist

    mod = importlib.import_module(module)
    group, inside = _group(members)
    if not inside:
        return None
    ranks = members or list(range(mdist.world_size()))
    n, i = len(ranks), ranks.index(mdist.rank())
    x = torch.full((numel,), -1.0, dtype=torch.float64)
    a, b = chunk_bounds(numel, n, i)
    x[a:b] = torch.arange(a + 1, b + 1, dtype=torch.float64)
    out = mod.ring_all_gather(x, group)
    return torch.as_tensor(x if out is None else out).detach().clone().reshape(-1)


def _owner(numel, n, pos):
    return next(c for c in range(n) if chunk_bounds(numel, n, c)[0] <= pos < chunk_bounds(numel, n, c)[1])


def _where_ranks(members, world):
    return members or list(range(world))


def check_reduce_scatter(mod) -> str:
    for world, numel, members in CASES:
        ranks = _where_ranks(members, world)
        n = len(ranks)
        what = f"ring_reduce_scatter, {world} ranks, {numel} elements" + (f", sub-group {members}" if members else "")
        got = run_ranks(rs_worker, world, (mod.__name__, numel, members), what)
        total = (2.0 ** torch.arange(world)[ranks].double()).sum().item()
        for i, g in enumerate(ranks):
            a, b = chunk_bounds(numel, n, i)
            out = got[g]
            if out is None:
                raise CheckFailed(f"{what}: rank {g} returned None; return tensor.view(-1)[start:end] (its chunk)")
            for q in range(n):
                c, d = chunk_bounds(numel, n, q)
                if q != i and d > c and torch.equal(out, torch.arange(c + 1, d + 1, dtype=torch.float64) * total):
                    raise CheckFailed(
                        f"{what}: rank {g} got the reduce-scatter chunk of rank {ranks[q]} (chunk {q}, "
                        f"expected chunk {i}): check which chunk you send at step s — rank i sends "
                        "(i − s − 1) mod N and receives (i − s − 2) mod N"
                    )
            if out.numel() != b - a:
                raise CheckFailed(
                    f"{what}: rank {g} returned {out.numel()} elements, expected chunk {i} of "
                    f"chunk_bounds({numel}, {n}, {i}) = ({a}, {b}): {b - a} elements. Sizes differ by "
                    "at most one and the first numel % N chunks are the larger ones"
                )
            want = torch.arange(a + 1, b + 1, dtype=torch.float64) * total
            if torch.equal(out, want):
                continue
            k = int(((out - want).abs() > 0).nonzero()[0])
            val, pos = out[k].item(), a + k
            # which position and which ranks does the value come from?
            for q in range(n):
                c, d = chunk_bounds(numel, n, q)
                if (
                    q != i
                    and d - c == b - a
                    and torch.equal(out, torch.arange(c + 1, d + 1, dtype=torch.float64) * total)
                ):
                    raise CheckFailed(
                        f"{what}: rank {g} got the reduce-scatter chunk of rank {ranks[q]} (chunk {q}, "
                        f"expected chunk {i}): check which chunk you send at step s — rank i sends "
                        "(i − s − 1) mod N and receives (i − s − 2) mod N"
                    )
            ratio = val / (pos + 1)
            holders = [ranks[r] for r in range(n) if int(round(ratio)) >> ranks[r] & 1] if ratio == round(ratio) else []
            if holders and len(holders) < n:
                raise CheckFailed(
                    f"{what}: rank {g}, element {pos} holds the sum over rank(s) {holders} only, expected "
                    f"all {n} ranks of the group {ranks}: at each of the N−1 steps add what you receive "
                    "into your copy, and send the chunk you just reduced (the partial sum travels on)"
                )
            raise CheckFailed(
                f"{what}: rank {g}, element {pos} is {val:g}, expected {want[k].item():g} (float64, exact "
                "integers): check the chunk bounds (minipar.comm.collectives.chunk_bounds) and that you add, "
                "not overwrite, what you receive"
            )
    return "N = 1, 3, 4 ranks; 2, 7, 10, 1000 elements (uneven chunks, empty chunks); sub-group [1, 2, 3]: exact"


def check_all_gather(mod) -> str:
    for world, numel, members in CASES:
        ranks = _where_ranks(members, world)
        n = len(ranks)
        what = f"ring_all_gather, {world} ranks, {numel} elements" + (f", sub-group {members}" if members else "")
        got = run_ranks(ag_worker, world, (mod.__name__, numel, members), what)
        want = torch.arange(1, numel + 1, dtype=torch.float64)
        for _i, g in enumerate(ranks):
            out = got[g]
            if out.numel() != numel:
                raise CheckFailed(f"{what}: rank {g} returned {out.numel()} elements, expected the full {numel}")
            if torch.equal(out, want):
                continue
            k = int(((out - want).abs() > 0).nonzero()[0])
            q = _owner(numel, n, k)
            val = out[k].item()
            if val == -1:
                raise CheckFailed(
                    f"{what}: rank {g} never received chunk {q} (from rank {ranks[q]}): element {k} still "
                    "holds its initial value. Check the number of steps (N − 1) and which chunk you "
                    "receive at step s: (i − s − 1) mod N"
                )
            src = _owner(numel, n, int(val) - 1) if val == int(val) and 1 <= val <= numel else None
            if src is not None:
                raise CheckFailed(
                    f"{what}: rank {g} wrote chunk {src}'s data into chunk {q}'s place (element {k}): "
                    "receive into the chunk that the left neighbour sends at that step — at step s rank "
                    "i sends chunk (i − s) mod N and receives (i − s − 1) mod N"
                )
            raise CheckFailed(f"{what}: rank {g}, element {k} is {val:g}, expected {want[k].item():g}")
    return "N = 1, 3, 4 ranks; 2, 7, 10, 1000 elements; sub-group [1, 2, 3]: exact"


CHECKS = [("ring_reduce_scatter", check_reduce_scatter), ("ring_all_gather", check_all_gather)]
