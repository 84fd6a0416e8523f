"""Checks for lesson 07: mesh coordinates and groups against ``minipar.runtime.mesh``, then real groups on 4 ranks."""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import CheckFailed, Lesson, run_ranks
from exercises.checks.watch import Refuse, Watch, finally_own, judge, watched

MESH = "this exercise is the device mesh: write it yourself"
RULES = Refuse(
    {
        "minipar.runtime.mesh": MESH + ", not minipar's",
        "torch.distributed.device_mesh": MESH + ", not init_device_mesh",
    }
)

DIMS = ("pp", "dp", "tp")


def shapes():
    from minipar.runtime.mesh import factorizations

    return [s for w in (1, 4, 8, 12) for s in factorizations(w)]


def check_coords(mod) -> str:
    from minipar.runtime.mesh import coords_of

    seen = []
    for shape in shapes():
        for r in range(shape[0] * shape[1] * shape[2]):
            got, summary = watched(f"coords_of({r}, {shape})", RULES, mod, mod.coords_of, r, shape)
            seen.append((f"coords_of({r}, {shape})", summary))
            want = coords_of(r, shape)
            if dict(got) != want:
                raise CheckFailed(
                    f"coords_of({r}, shape (pp, dp, tp) = {shape}) = {dict(got)}, expected {want}: "
                    "rank = pp·(dp·tp) + dp·tp + tp — tp varies fastest, pp slowest"
                )
    finally_own(mod, ["coords_of"], seen)
    return f"{len(shapes())} shapes of 1, 4, 8, 12 ranks: every rank's (pp, dp, tp) = minipar.runtime.mesh"


def check_group_ranks(mod) -> str:
    from minipar.runtime.mesh import group_ranks

    seen = []
    for shape in shapes():
        for dim in DIMS:
            got, summary = watched(f"group_ranks({shape}, {dim!r})", RULES, mod, mod.group_ranks, shape, dim)
            seen.append((f"group_ranks({shape}, {dim!r})", summary))
            want = group_ranks(shape, dim)
            if [list(g) for g in got] != want:
                raise CheckFailed(
                    f"group_ranks({shape}, {dim!r}) = {got}, expected {want}: a {dim} group holds the "
                    f"ranks whose other two coordinates are equal (sorted)"
                )
    finally_own(mod, ["group_ranks"], seen)
    return f"{len(shapes())} shapes × pp, dp, tp: = minipar.runtime.mesh.group_ranks"


def groups_worker(module, shape):
    import torch.distributed as dist

    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    with Watch(RULES, own=mod, ops=False) as w:
        out = mod.build_groups(*shape)
    res = {"seen": w.summary()}
    for dim in DIMS:
        g, ranks = out[dim]
        t = torch.tensor([float(mdist.rank())])
        dist.all_reduce(t, group=g)  # sum of the global ranks in my group
        res[dim] = (list(ranks), t.item(), dist.get_world_size(g))
    return res


def check_build_groups(mod) -> str:
    from minipar.runtime.mesh import coords_of, group_ranks

    layouts = [(1, 1, 1), (1, 2, 2), (2, 2, 1), (2, 1, 2), (4, 1, 1)]
    seen = []
    for shape in layouts:
        world = shape[0] * shape[1] * shape[2]
        what = f"build_groups{shape} on {world} ranks"
        got = run_ranks(groups_worker, world, (mod.__name__, shape), what)
        for r, res in enumerate(got):
            judge(f"{what}: rank {r}", res["seen"])
            seen.append((f"{what}: rank {r}", res["seen"]))
        for r, res in enumerate(got):
            for dim in DIMS:
                want = next(g for g in group_ranks(shape, dim) if r in g)
                ranks, total, size = res[dim]
                if ranks != want or size != len(want) or total != sum(want):
                    raise CheckFailed(
                        f"{what}: rank {r} (coords {coords_of(r, shape)}) has a {dim} group of size {size} whose "
                        f"all-reduce summed the ranks to {total:g}, expected the group {want} (sum {sum(want)})"
                        + (
                            ": a size-1 dimension still needs a real one-rank group (group=None is the whole world)"
                            if size != len(want)
                            else ": new_group is collective, so every rank must make the same calls in the same "
                            "order — create every group of every dimension on every rank, keep the ones you are in"
                        )
                    )
    finally_own(mod, ["build_groups"], seen)
    return "layouts (1,1,1), (1,2,2), (2,2,1), (2,1,2), (4,1,1): every rank's groups all-reduce over the right ranks"


LESSON = Lesson(
    number="07",
    title="3D parallel",
    module="ex07_3d_parallel",
    checks=(
        ("coords_of", check_coords),
        ("group_ranks", check_group_ranks),
        ("build_groups", check_build_groups),
    ),
    rules=(RULES,),
)
