"""Checks for lesson 01: ring reduce-scatter and ring all-gather on real ranks (N = 1, 3, 4; a sub-group).

Inputs are integers in float64, so sums are exact and every value says where it came from:
rank r contributes ``(j + 1) · 2**r`` at flat position j. A wrong chunk, a missing step or a
message from the wrong neighbour gives a value that names the chunk and the ranks it holds.
"""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import CheckFailed, Lesson, run_ranks
from exercises.checks.watch import Refuse, Watch, finally_own, judge
from minipar.comm.collectives import chunk_bounds

RING = "this exercise is the ring: write it yourself from send and recv"
RULES = Refuse(
    {"minipar.comm": RING, "torch.distributed._functional_collectives": RING},
    allow=["minipar.comm.collectives:chunk_bounds"],
)
NAMES = {  # c10d op -> the torch.distributed call that issues it
    "allreduce": "all_reduce",
    "_allgather_base": "all_gather_into_tensor",
    "allgather": "all_gather",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall_base": "all_to_all_single",
    "alltoall": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
}

CASES = [(1, 10, None), (3, 10, None), (4, 1000, None), (4, 2, None), (4, 7, [1, 2, 3])]  # (world, numel, sub-group)


def _group(members):
    import minipar.runtime.dist
    from minipar.runtime import dist as mdist

    if members is None:
        return None, True
    g = minipar.runtime.dist.new_group(members)
    return g, mdist.rank() in members


def rs_worker(module, numel, members):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    group, inside = _group(members)
    if not inside:
        return None
    r = mdist.rank()
    x = torch.arange(1, numel + 1, dtype=torch.float64) * 2.0**r
    with Watch(RULES, own=mod) as w:
        out = mod.ring_reduce_scatter(x.view(-1), group)
    return {"out": None if out is None else torch.as_tensor(out).detach().clone().reshape(-1), "seen": w.summary()}


def ag_worker(module, numel, members):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    group, inside = _group(members)
    if not inside:
        return None
    ranks = members or list(range(mdist.world_size()))
    n, i = len(ranks), ranks.index(mdist.rank())
    x = torch.full((numel,), -1.0, dtype=torch.float64)
    a, b = chunk_bounds(numel, n, i)
    x[a:b] = torch.arange(a + 1, b + 1, dtype=torch.float64)
    with Watch(RULES, own=mod) as w:
        out = mod.ring_all_gather(x, group)
    return {"out": torch.as_tensor(x if out is None else out).detach().clone().reshape(-1), "seen": w.summary()}


def _run(worker, world, args, what) -> list:
    """``run_ranks``, with gloo's abort on a message of the wrong size named in the lesson's terms."""
    try:
        return run_ranks(worker, world, args, what)
    except CheckFailed as exc:
        if "signal 6" not in str(exc):
            raise
        raise CheckFailed(
            f"{what}: a rank was aborted by gloo (signal 6, 'Received data size doesn't match expected size'): "
            "a message and the buffer its neighbour receives it into had different sizes. At step s rank i "
            "sends a chunk and rank i + 1 receives that same chunk: size the send and the receive buffer from "
            "chunk_bounds of that one chunk (chunks differ by one element when N does not divide the size)"
        ) from None


def _owner(numel, n, pos):
    return next(c for c in range(n) if chunk_bounds(numel, n, c)[0] <= pos < chunk_bounds(numel, n, c)[1])


def _where_ranks(members, world):
    return members or list(range(world))


def ring_pattern(what, g, i, n, numel, comm, kind) -> None:
    """Rank ``g`` (index ``i`` of ``n``) made the ring's messages: send/recv only, at most N − 1 each way,
    each at most one chunk, all sends to one neighbour and all receives from the other, and in all the
    bytes of a ring: every chunk but one sent (reduce-scatter) or received (all-gather) once."""
    other = [op for op, *_ in comm if op not in ("send", "recv")]
    if other:
        name = NAMES.get(other[0], other[0])
        raise CheckFailed(
            f"{what}: rank {g} called the collective {name} (c10d::{other[0]}): {RING} — only point-to-point "
            "messages (dist.isend / dist.irecv) between ring neighbours, no collective"
        )
    sends = [(a, peer) for op, a, _, peer in comm if op == "send"]
    recvs = [(a, peer) for op, a, _, peer in comm if op == "recv"]
    biggest = max(b - a for a, b in (chunk_bounds(numel, n, c) for c in range(n)))
    a, b = chunk_bounds(numel, n, i)
    if len(sends) > n - 1 or len(recvs) > n - 1:
        raise CheckFailed(
            f"{what}: rank {g} sent {len(sends)} and received {len(recvs)} messages, a ring {kind} makes N − 1 = "
            f"{n - 1} of each (one chunk per step to the next rank, one from the previous)"
        )
    big = [s for s, _ in sends + recvs if s > biggest]
    if big:
        raise CheckFailed(
            f"{what}: rank {g} sent or received a message of {big[0]} elements, more than one chunk "
            f"({biggest}): in a ring each step moves one chunk (chunk_bounds), never the whole tensor"
        )
    right, left = (i + 1) % n, (i - 1) % n
    to, frm = {p for _, p in sends}, {p for _, p in recvs}
    if n > 1 and (sends or recvs) and not ({right} >= to and {left} >= frm or {left} >= to and {right} >= frm):
        raise CheckFailed(
            f"{what}: rank {g} (index {i} of {n}) sent to group ranks {sorted(to)} and received from {sorted(frm)}: "
            f"in a ring every rank sends to one neighbour ({right}) and receives from the other ({left})"
        )
    moved = sum(s for s, _ in (sends if kind == "reduce-scatter" else recvs))
    if moved != numel - (b - a):
        raise CheckFailed(
            f"{what}: rank {g} {'sent' if kind == 'reduce-scatter' else 'received'} {moved} elements in all, a "
            f"ring {kind} moves every chunk but its own once: {numel - (b - a)}"
        )


def check_reduce_scatter(mod) -> str:
    seen = []
    for world, numel, members in CASES:
        ranks = _where_ranks(members, world)
        n = len(ranks)
        what = f"ring_reduce_scatter, {world} ranks, {numel} elements" + (f", sub-group {members}" if members else "")
        res = _run(rs_worker, world, (mod.__name__, numel, members), what)
        for g in ranks:
            judge(f"{what}: rank {g}", res[g]["seen"])
            seen.append((f"{what}: rank {g}", res[g]["seen"]))
        got = [None if v is None else v["out"] for v in res]
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
        for i, g in enumerate(ranks):
            ring_pattern(what, g, i, n, numel, res[g]["seen"]["comm"], "reduce-scatter")
    finally_own(mod, ["ring_reduce_scatter"], seen)
    return (
        "N = 1, 3, 4 ranks; 2, 7, 10, 1000 elements (uneven chunks, empty chunks); sub-group [1, 2, 3]: exact; "
        "send/recv only, N − 1 messages of one chunk to one neighbour"
    )


def check_all_gather(mod) -> str:
    seen = []
    for world, numel, members in CASES:
        ranks = _where_ranks(members, world)
        n = len(ranks)
        what = f"ring_all_gather, {world} ranks, {numel} elements" + (f", sub-group {members}" if members else "")
        res = _run(ag_worker, world, (mod.__name__, numel, members), what)
        for g in ranks:
            judge(f"{what}: rank {g}", res[g]["seen"])
            seen.append((f"{what}: rank {g}", res[g]["seen"]))
        got = [None if v is None else v["out"] for v in res]
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
        for i, g in enumerate(ranks):
            ring_pattern(what, g, i, n, numel, res[g]["seen"]["comm"], "all-gather")
    finally_own(mod, ["ring_all_gather"], seen)
    return (
        "N = 1, 3, 4 ranks; 2, 7, 10, 1000 elements; sub-group [1, 2, 3]: exact; send/recv only, N − 1 messages "
        "of one chunk to one neighbour"
    )


LESSON = Lesson(
    number="01",
    title="collectives",
    module="ex01_collectives",
    checks=(
        ("ring_reduce_scatter", check_reduce_scatter),
        ("ring_all_gather", check_all_gather),
    ),
    rules=(RULES,),
)
