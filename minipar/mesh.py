"""A 3D device mesh: every rank's (pp, dp, tp) coordinates and its process groups, built once.

Layout (Megatron-LM's order, ``megatron/core/parallel_state.py``): tensor-parallel ranks are
adjacent, then data-parallel, then pipeline —

    rank = pp_rank · (dp · tp) + dp_rank · tp + tp_rank

so a TP group (the chattiest: all-reduces on the critical path of every layer) is a run of
consecutive ranks, which a launcher places on one node (NVLink); DP groups stride by ``tp``;
PP groups stride by ``dp · tp`` and are the only ones that must cross nodes in a large job.
Megatron's own example, 16 GPUs with tp=2, pp=4 (so dp=2):

    TP groups: [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
    DP groups: [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
    PP groups: [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]

It is the row-major order of a (pp, dp, tp) array, the same as
``torch.distributed.device_mesh.init_device_mesh(device, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist

from minipar import dist as mdist
from minipar.errors import ConfigError

DIMS = ("pp", "dp", "tp")


def factorizations(world_size: int) -> list[tuple[int, int, int]]:
    """All (pp, dp, tp) with pp·dp·tp = world_size, e.g. 8 -> (1,1,8), (1,2,4), ... (8,1,1)."""
    out = []
    for pp in range(1, world_size + 1):
        for dp in range(1, world_size + 1):
            if world_size % (pp * dp) == 0:
                out.append((pp, dp, world_size // (pp * dp)))
    return out


def validate(
    world_size: int, pp: int = 1, dp: int | None = None, tp: int = 1, accepts=None, what: str = ""
) -> tuple[int, int, int]:
    """Check (and complete) a layout. ``dp=None`` means "whatever is left": world_size / (pp·tp).

    Args:
        accepts: optional ``(pp, dp, tp) -> bool``, True for layouts the job can run (e.g. tp divides
            the heads); the error message lists only those. ``what`` names that job in the message.
    Returns:
        (pp, dp, tp).
    Raises:
        ConfigError: a degree < 1, pp·tp not dividing world_size, or pp·dp·tp != world_size;
        the message lists the valid layouts.
    """
    for name, v in (("pp", pp), ("tp", tp)) + ((("dp", dp),) if dp is not None else ()):
        if not isinstance(v, int) or v < 1:
            raise ConfigError(f"{name}={v!r} must be an integer >= 1")
    ok = [f for f in factorizations(world_size) if accepts is None or accepts(*f)]
    valid = f" that fit {what}" if what else ""
    valid += ": " + (", ".join(f"pp{a}·dp{b}·tp{c}" for a, b, c in ok) if ok else "none")
    if dp is None:
        if world_size % (pp * tp):
            raise ConfigError(
                f"world_size={world_size} is not divisible by tp·pp = {tp}·{pp} = {tp * pp}; "
                f"valid layouts for {world_size} ranks{valid}"
            )
        dp = world_size // (pp * tp)
    if pp * dp * tp != world_size:
        raise ConfigError(
            f"pp·dp·tp = {pp}·{dp}·{tp} = {pp * dp * tp} but world_size={world_size}; "
            f"valid layouts for {world_size} ranks{valid}"
        )
    return pp, dp, tp


def rank_of(coords: dict[str, int] | tuple[int, int, int], shape: tuple[int, int, int]) -> int:
    """Global rank of (pp_rank, dp_rank, tp_rank) in a (pp, dp, tp) mesh."""
    p, d, t = (coords["pp"], coords["dp"], coords["tp"]) if isinstance(coords, dict) else coords
    _, DP, TP = shape
    return (p * DP + d) * TP + t


def coords_of(rank: int, shape: tuple[int, int, int]) -> dict[str, int]:
    """{"pp", "dp", "tp"} coordinates of a global rank in a (pp, dp, tp) mesh."""
    _, DP, TP = shape
    return {"pp": rank // (DP * TP), "dp": rank // TP % DP, "tp": rank % TP}


def group_ranks(shape: tuple[int, int, int], dim: str) -> list[list[int]]:
    """Every group along ``dim`` (``"pp"``, ``"dp"`` or ``"tp"``): lists of global ranks."""
    i = DIMS.index(dim)
    others = [d for d in DIMS if d != dim]
    groups = []
    for a in range(shape[DIMS.index(others[0])]):
        for b in range(shape[DIMS.index(others[1])]):
            groups.append([rank_of({dim: k, others[0]: a, others[1]: b}, shape) for k in range(shape[i])])
    return sorted(groups)


@dataclass
class Mesh:
    """This rank's place in the (pp, dp, tp) mesh and its three process groups.

    Attributes:
        shape: (pp, dp, tp).
        rank: global rank; ``coords``: {"pp", "dp", "tp"} of this rank.
        groups: {"pp", "dp", "tp"} -> the ProcessGroup of this rank along that dimension (a real
            one-rank group for a size-1 dimension: ``group=None`` would mean the whole world).
        ranks: {"pp", "dp", "tp"} -> the global ranks of that group, in order.
    """

    shape: tuple[int, int, int]
    rank: int
    coords: dict[str, int] = field(default_factory=dict)
    groups: dict[str, object] = field(default_factory=dict)
    ranks: dict[str, list[int]] = field(default_factory=dict)

    def size(self, dim: str) -> int:
        return self.shape[DIMS.index(dim)]

    def __getattr__(self, name: str):
        # mesh.tp_rank, mesh.dp_group, mesh.pp_size ... as in Megatron's parallel_state
        for d in DIMS:
            if name == f"{d}_rank":
                return self.coords[d]
            if name == f"{d}_group":
                return self.groups[d]
            if name == f"{d}_size":
                return self.size(d)
        raise AttributeError(name)


def init_mesh(pp: int = 1, dp: int | None = None, tp: int = 1) -> Mesh:
    """Build every TP, DP and PP group of the world (a collective: every rank calls it, same args).

    Groups are created with minipar's bounded timeout, in the same order on every rank (as
    ``new_group`` requires). Without a process group, a 1×1×1 mesh is returned.

    Raises:
        ConfigError: see :func:`validate`.
    """
    world = mdist.world_size()
    shape = validate(world, pp, dp, tp)
    me = mdist.rank()
    mesh = Mesh(shape, me, coords_of(me, shape))
    for dim in DIMS:
        for ranks in group_ranks(shape, dim):
            g = mdist.new_group(ranks) if dist.is_initialized() else None
            if me in ranks:
                mesh.groups[dim], mesh.ranks[dim] = g, ranks
    return mesh
