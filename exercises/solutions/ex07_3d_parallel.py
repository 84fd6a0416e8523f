"""Lesson 07 · 3D parallelism: the (pp, dp, tp) device mesh — coordinates and process groups.

Exercises (run ``make check LESSON=07``):

1. :func:`coords_of` — global rank -> (pp, dp, tp) coordinates, in Megatron-LM's order.
2. :func:`group_ranks` — every group along one dimension, as lists of global ranks.
3. :func:`build_groups` — on real ranks: create every group, return this rank's three.

Megatron-LM's order (``megatron/core/parallel_state.py``; Narayanan et al. 2021, arXiv:2104.04473
§3): tensor-parallel ranks are adjacent, then data-parallel, then pipeline:
``rank = pp_rank·(dp·tp) + dp_rank·tp + tp_rank`` — the row-major order of a (pp, dp, tp) array,
as ``minipar.runtime.mesh`` and ``init_device_mesh(..., (pp, dp, tp))``.
"""

from __future__ import annotations

DIMS = ("pp", "dp", "tp")


def coords_of(rank: int, shape: tuple[int, int, int]) -> dict[str, int]:
    """``{"pp": i, "dp": j, "tp": k}`` of global ``rank`` in a mesh of ``shape = (pp, dp, tp)``.

    Invariant: ``rank == i·(dp·tp) + j·tp + k`` with ``0 <= k < tp`` etc.

    Hint: lesson 07, "The idea: one rank, three groups". tp varies fastest.
    """
    _, dp, tp = shape
    return {"pp": rank // (dp * tp), "dp": rank // tp % dp, "tp": rank % tp}


def group_ranks(shape: tuple[int, int, int], dim: str) -> list[list[int]]:
    """Every group along ``dim`` (``"pp"``, ``"dp"`` or ``"tp"``): the ranks that differ only in that coordinate.

    Returns:
        a sorted list of groups, each a list of global ranks in increasing coordinate along ``dim``
        (so also in increasing rank). E.g. shape (4, 2, 2), ``"dp"``: ``[[0, 2], [1, 3], [4, 6], ...]``.

    Hint: lesson 07, "The idea". Group all ranks by their two *other* coordinates.
    """
    world = shape[0] * shape[1] * shape[2]
    groups: dict[tuple, list[int]] = {}
    for r in range(world):
        c = coords_of(r, shape)
        groups.setdefault(tuple(c[d] for d in DIMS if d != dim), []).append(r)
    return sorted(groups.values())


def build_groups(pp: int, dp: int, tp: int) -> dict[str, tuple[object, list[int]]]:
    """On every rank (a collective): create every pp, dp and tp group; return this rank's.

    Returns:
        ``{"pp": (group, ranks), "dp": (group, ranks), "tp": (group, ranks)}`` for this rank.

    Rules: ``minipar.runtime.dist.new_group(ranks)`` is collective — *every* rank calls it for *every*
    group, in the same order, even for groups it is not in (else the ranks wait on each other).
    Create real groups even of size 1 (``group=None`` would mean the whole world).

    Hint: lesson 07, "The idea" (``minipar.runtime.mesh.init_mesh``). Use :func:`group_ranks`.
    """
    from minipar.runtime import dist as mdist

    me, out = mdist.rank(), {}
    for dim in DIMS:
        for ranks in group_ranks((pp, dp, tp), dim):
            g = mdist.new_group(ranks)
            if me in ranks:
                out[dim] = (g, ranks)
    return out
