"""The layout of a job: its (pp, dp, [cp,] tp) degrees and ep carved out of dp, checked once, and every rank's groups.

One object, :class:`Mesh` (minipar's torchtitan ``ParallelDims``, ``torchtitan/distributed/
parallel_dims.py``), holds what every part of a job asks about its layout:

    layout = Mesh(world_size=8, pp=2, tp=2)      # validated here: dp = 8 / (pp·tp) = 2
    layout.shape, layout.size("dp")              # (2, 2, 2), 2 -- no process group needed
    mesh = init_groups(layout)                   # the same object, plus this rank and its groups
    mesh = init_mesh(pp=2, tp=2)                 # both at once: init_groups(Mesh(world_size, pp=2, tp=2))
    mesh.tp_group, mesh.dp_rank, mesh.pp_size    # as in Megatron's parallel_state

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

Expert parallelism (``ep``, lesson 12) adds no ranks: it borrows them from dp, split as dp = edp · ep
with ep the faster of the two, so the experts see the same ranks as the mesh (pp, edp, ep, [cp,] tp)
(:data:`EXPERT_DIMS`, :attr:`Mesh.expert_shape`): the same rank formula, dp's index written as
``edp_rank · ep + ep_rank``. Along ``ep`` lie the **EP groups** (ep consecutive dp ranks: all E experts
once, tokens traded by all-to-all), a sub-group of the data-parallel ranks; along ``edp`` the
**expert-data-parallel groups** (dp ranks at stride ep: the same experts, their gradients reduced there).
As torchtitan's ``ParallelDims`` (``torchtitan/distributed/parallel_dims.py``: its experts' mesh splits
``dp_shard = dp_shard_mod_ep · dp_shard_in_ep``, ep inner; it needs ``dp_shard·cp % ep == 0``, so its ep
may also borrow cp) and Megatron-LM's expert-model-parallel groups (``megatron/core/parallel_state.py``).
minipar's ep borrows from dp only (ep divides dp; with cp, each cp index has its own EP groups).
dp = 8, ep = 4: EP groups [0..3] [4..7], expert-dp groups [0,4] [1,5] [2,6] [3,7].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field

from minipar.errors import ConfigError

DIMS = ("pp", "dp", "cp", "tp")  # outermost first: the order of a Mesh's shape and of the rank formula
DIMS_3D = ("pp", "dp", "tp")  # a 3-tuple shape is (pp, dp, tp): cp = 1, the shape of every job without --cp
EXPERT_DIMS = ("pp", "edp", "ep", "cp", "tp")  # the same ranks as the experts see them: dp = edp · ep, ep inner


def dims_of(shape: tuple[int, ...]) -> tuple[str, ...]:
    """The dimension names of a shape: :data:`DIMS` for a 4-tuple, :data:`DIMS_3D` for a 3-tuple."""
    return DIMS if len(shape) == 4 else DIMS_3D


def divisors(n: int) -> list[int]:
    """Every positive divisor of ``n`` (>= 1), ascending: ``divisors(12) == [1, 2, 3, 4, 6, 12]``.

    O(√n) steps, so a huge ``n`` (``--gpus 1000000000``, ``--nproc 100000``) answers at once.
    """
    small, large = [], []
    d = 1
    while d * d <= n:
        if n % d == 0:
            small.append(d)
            if d * d != n:
                large.append(n // d)
        d += 1
    return small + large[::-1]


def factorizations(world_size: int) -> list[tuple[int, int, int]]:
    """All (pp, dp, tp) with pp·dp·tp = world_size, e.g. 8 -> (1,1,8), (1,2,4), ... (8,1,1).

    Built from :func:`divisors` (not a double loop over 1..world_size): fast for any world size.
    """
    return [(pp, dp, world_size // (pp * dp)) for pp in divisors(world_size) for dp in divisors(world_size // pp)]


def rank_of(coords: dict[str, int] | tuple[int, ...], shape: tuple[int, ...], dims: tuple[str, ...] = ()) -> int:
    """Global rank of (pp_rank, dp_rank, [cp_rank,] tp_rank) in a (pp, dp, [cp,] tp) mesh (row-major, tp fastest);
    ``dims``: the names of ``shape``'s dimensions when they are not :func:`dims_of`'s (e.g. the experts')."""
    c = [coords.get(d, 0) for d in dims or dims_of(shape)] if isinstance(coords, dict) else coords
    rank = 0
    for k, n in zip(c, shape):
        rank = rank * n + k
    return rank


def coords_of(rank: int, shape: tuple[int, ...], dims: tuple[str, ...] = ()) -> dict[str, int]:
    """{"pp", "dp", ["cp",] "tp"} coordinates of a global rank in a (pp, dp, [cp,] tp) mesh (``dims``: as
    :func:`rank_of`)."""
    out, dims = {}, dims or dims_of(shape)
    for d, n in reversed(list(zip(dims, shape))):
        rank, out[d] = divmod(rank, n)
    return {d: out[d] for d in dims}


def group_ranks(shape: tuple[int, ...], dim: str | tuple[str, ...], dims: tuple[str, ...] = ()) -> list[list[int]]:
    """Every group along ``dim`` (``"pp"``, ``"dp"``, ``"cp"``, ``"tp"``, or a tuple of them, e.g.
    ``("dp", "cp")``: Megatron's data-parallel group with context parallelism): lists of global ranks, sorted.
    ``dims``: as :func:`rank_of` (``group_ranks(mesh.expert_shape, "ep", mesh.expert_dims)``: the EP groups)."""
    dims, along = dims or dims_of(shape), (dim,) if isinstance(dim, str) else dim
    groups: dict[tuple, list[int]] = {}
    for r in range(math.prod(shape)):
        c = coords_of(r, shape, dims)
        groups.setdefault(tuple(c[d] for d in dims if d not in along), []).append(r)
    return sorted(groups.values())


def expert_layout(shape: tuple[int, ...], ep: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The experts' view of a (pp, dp, [cp,] tp) shape: (pp, dp/ep, ep, [cp,] tp) and its names
    (:data:`EXPERT_DIMS`, without cp for a 3-tuple). Raises ConfigError unless ep divides dp (:func:`check_ep`)."""
    dims = dims_of(shape)
    sizes = dict(zip(dims, shape))
    check_ep(ep, sizes["dp"])
    sizes.update(edp=sizes["dp"] // ep, ep=ep)
    names = tuple(d for d in EXPERT_DIMS if d in sizes)
    return tuple(sizes[d] for d in names), names


def expert_group_ranks(shape: tuple[int, ...], ep: int) -> tuple[list[list[int]], list[list[int]]]:
    """``(EP groups, expert-dp groups)`` of a (pp, dp, [cp,] tp) mesh with ``ep`` borrowed from dp: the groups
    along ``ep`` and along ``edp`` of :func:`expert_layout` (runs of ``ep`` consecutive dp ranks, and dp ranks
    at stride ``ep``); sorted. Raises ConfigError: ``ep`` does not divide dp (:func:`check_ep`)."""
    eshape, edims = expert_layout(shape, ep)
    return group_ranks(eshape, "ep", edims), group_ranks(eshape, "edp", edims)


def check_ep(ep: int, dp: int) -> None:
    """Raise :class:`ConfigError` unless ``ep`` is an integer >= 1 dividing ``dp`` (ep is carved out of dp)."""
    if not isinstance(ep, int) or ep < 1:
        raise ConfigError(f"--ep {ep!r}: must be an integer >= 1")
    if dp % ep:
        fits = ", ".join(str(d) for d in range(1, dp + 1) if dp % d == 0)
        raise ConfigError(
            f"--ep {ep} must divide the {dp} data-parallel ranks (expert parallelism is carved out of dp); "
            f"use --ep {fits}, or --dp a multiple of {ep}"
        )


def _coord(dim: str) -> property:
    return property(lambda self: self.coords[dim], doc=f"this rank's index along {dim}, 0 .. {dim}_size - 1")


def _size(dim: str) -> property:
    return property(lambda self: self.size(dim), doc=f"the {dim} degree (ranks in a {dim} group)")


def _group(dim: str) -> property:
    return property(
        lambda self: self.groups[dim], doc=f"this rank's {dim} ProcessGroup (a real one-rank group if size 1)"
    )


@dataclass(eq=False)
class Mesh:
    """A (pp, dp, tp) layout of ``world_size`` ranks, validated on construction; with :func:`init_mesh`,
    also this rank's place in it and its process groups.

    Args:
        world_size: ranks in the job. ``pp``, ``tp``: degrees (integers >= 1). ``dp``: the same, or
            None for "whatever is left", world_size / (pp·tp) (filled in).
        accepts: optional ``(pp, dp, tp) -> bool``, True for layouts the job can run; a world-size
            error lists only those. ``what`` names that job in the message.
    Attributes:
        pp, dp, tp: the degrees; ``shape`` = (pp, dp, tp); ``size(dim)``.
        rank: this process's global rank (0 until :func:`init_mesh`); ``coords``: {"pp", "dp", "tp"}.
        groups: {"pp", "dp", "tp"} -> this rank's ProcessGroup along that dimension (filled by
            :func:`init_mesh`; a real one-rank group for a size-1 dimension when world_size > 1, since
            ``group=None`` would mean the whole world; None without a process group).
        ranks: {"pp", "dp", "tp"} -> the global ranks of that group, in order.
        {pp,dp,tp}_rank, {pp,dp,tp}_size, {pp,dp,tp}_group: Megatron's ``parallel_state`` names.
        loss_rank: the rank that owns the loss and logs (last stage, dp 0, tp 0).
    Raises:
        ConfigError: a degree < 1, pp·tp not dividing
            world_size, pp·dp·tp != world_size, ep not dividing dp; each names the value and the fix.

    Context parallelism (lesson 11) is a dimension like the others, between dp and tp in the rank
    order (Megatron: tp fastest, then cp, then dp, then pp): ``cp`` > 1 makes the shape
    (pp, dp, cp, tp), adds ``cp_group`` (the ring of ring attention) and ``dp_cp_group`` (the dp × cp
    ranks that hold the same model piece and average gradients); with cp = 1 the shape stays
    (pp, dp, tp) and nothing changes.

    Expert parallelism is a dimension of the experts' view of the same ranks, (pp, edp, ep, [cp,] tp)
    (:attr:`expert_dims`, :attr:`expert_shape`): ``ep`` (default 1) borrows from dp and must divide it,
    dp = edp · ep. With ep > 1, :attr:`coords` also holds ``"edp"`` and ``"ep"`` (``ep_rank = dp_rank % ep``,
    ``edp_rank = dp_rank // ep``), ``ranks`` and ``groups`` hold ``"ep"`` (the all-to-all group), ``"edp"``
    (the experts' gradient reduction) and, with cp > 1, ``"edp_cp"``; with ep = 1 ``ep_group`` is None (no
    all-to-all) and ``edp_group`` is the dp group.
    """

    world_size: int = 1
    pp: int = 1
    dp: int | None = None
    tp: int = 1
    cp: int = 1
    ep: int = 1
    rank: int = 0
    groups: dict[str, object] = field(default_factory=dict, repr=False)
    ranks: dict[str, list[int]] = field(default_factory=dict)
    accepts: InitVar[Callable[[int, int, int], bool] | None] = None
    what: InitVar[str] = ""

    pp_rank, pp_size, pp_group = _coord("pp"), _size("pp"), _group("pp")
    dp_rank, dp_size, dp_group = _coord("dp"), _size("dp"), _group("dp")
    tp_rank, tp_size, tp_group = _coord("tp"), _size("tp"), _group("tp")
    cp_size = _size("cp")
    cp_rank = property(lambda self: self.coords.get("cp", 0), doc="index along cp, 0 .. cp_size - 1 (0 when cp = 1)")
    cp_group = property(lambda self: self.groups.get("cp"), doc="the context-parallel group (None when cp = 1)")

    @property
    def dp_cp_group(self):
        """The ranks that hold the same model piece (same pp and tp rank): dp × cp of them. Gradients are
        averaged over this group (Megatron's data-parallel group "with context parallel"); = dp_group when cp = 1."""
        return self.groups.get("dp_cp", self.groups.get("dp"))

    ep_size = _size("ep")
    ep_rank = property(lambda self: self.coords.get("ep", 0), doc="index in the EP group, dp_rank % ep")
    edp_size = property(lambda self: self.dp // self.ep, doc="ranks holding the same experts, dp / ep")
    edp_rank = property(lambda self: self.coords.get("edp", self.dp_rank), doc="index in the expert-dp group")
    ep_group = property(lambda self: self.groups.get("ep"), doc="the EP (all-to-all) group; None when ep = 1")
    edp_group = property(
        lambda self: self.groups.get("edp", self.groups.get("dp")), doc="the same experts' ranks; dp_group if ep = 1"
    )

    @property
    def edp_cp_group(self):
        """Every rank holding this rank's experts (expert-dp × cp); = edp_group when cp = 1, dp_cp_group when ep = 1."""
        return self.groups.get("edp_cp", self.edp_group if self.cp == 1 else self.dp_cp_group)

    def __post_init__(self, accepts, what) -> None:
        for d in DIMS:
            v = getattr(self, d)
            if not (v is None and d == "dp") and (not isinstance(v, int) or v < 1):
                raise ConfigError(f"--{d} {v!r}: must be an integer >= 1")
        world, pp, tp, cp = self.world_size, self.pp, self.tp * self.cp, self.cp

        def valid() -> str:  # the fix: every layout of this world (that the job accepts)
            ok = [f for f in factorizations(world) if accepts is None or accepts(*f)]
            listed = ", ".join(f"pp{a}·dp{b}·tp{c}" for a, b, c in ok) if ok else "none"
            if cp > 1:  # the layouts with this --cp: tp below is tp·cp
                listed = ", ".join(f"pp{a}·dp{b}·cp{cp}·tp{c // cp}" for a, b, c in ok if c % cp == 0) or "none"
            return f"valid layouts for {world} ranks{f' that fit {what}' if what else ''}: {listed}"

        if self.dp is None:
            if world % (pp * tp):
                prod = f"tp·cp·pp = {self.tp}·{cp}·{pp}" if cp > 1 else f"tp·pp = {tp}·{pp}"
                raise ConfigError(f"{world} ranks are not divisible by {prod} = {tp * pp}; {valid()}")
            self.dp = world // (pp * tp)
        if pp * self.dp * tp != world:
            prod = f"pp·dp·cp·tp = {pp}·{self.dp}·{cp}·{self.tp}" if cp > 1 else f"pp·dp·tp = {pp}·{self.dp}·{tp}"
            raise ConfigError(f"{prod} = {pp * self.dp * tp} but there are {world} ranks; {valid()}")
        self.expert_shape, self.expert_dims = expert_layout(self.shape, self.ep)  # checks that ep divides dp
        self.loss_rank = rank_of({"pp": self.pp - 1}, self.shape)  # last pipeline stage, dp 0, (cp 0,) tp 0

    @property
    def dims(self) -> tuple[str, ...]:
        """The dimensions of :attr:`shape`: (pp, dp, cp, tp) with context parallelism, else (pp, dp, tp)."""
        return DIMS if self.cp > 1 else DIMS_3D

    @property
    def shape(self) -> tuple[int, ...]:
        """(pp, dp, tp), or (pp, dp, cp, tp) when cp > 1, outermost first (:data:`DIMS`)."""
        return tuple(getattr(self, d) for d in self.dims)

    def size(self, dim: str) -> int:
        """The degree of ``dim`` ("pp", "dp", "cp", "tp", "ep" or "edp")."""
        return self.edp_size if dim == "edp" else getattr(self, dim)

    @property
    def coords(self) -> dict[str, int]:
        """{"pp", "dp", ["cp",] "tp"} coordinates of :attr:`rank`; with ep > 1 also "edp" and "ep"."""
        c = coords_of(self.rank, self.shape)
        if self.ep > 1:
            e = coords_of(self.rank, self.expert_shape, self.expert_dims)
            c.update(edp=e["edp"], ep=e["ep"])
        return c


def init_mesh(
    pp: int = 1,
    dp: int | None = None,
    tp: int = 1,
    *,
    cp: int = 1,
    ep: int = 1,
    group_cache: dict | None = None,
) -> Mesh:
    """The :class:`Mesh` of the current world with this rank's groups (a collective: every rank calls
    it, with the same arguments): ``init_groups(Mesh(world_size, pp, dp, tp, cp, ep))``.

    Raises:
        ConfigError: see :class:`Mesh`.
    """
    from minipar.runtime import dist as mdist  # torch: only the functions that make groups import it

    return init_groups(Mesh(mdist.world_size(), pp, dp, tp, cp, ep), group_cache=group_cache)


def init_groups(mesh: Mesh, group_cache: dict | None = None) -> Mesh:
    """Fill in ``mesh`` (a layout, e.g. the one :func:`minipar.job.config.check` built) with this rank and its
    process groups; returns it. A collective: every rank calls it, with the same layout.

    Every TP, DP and PP group is created with minipar's bounded timeout, in the same order on
    every rank (as ``new_group`` requires), including one-rank groups for size-1 dimensions; then,
    with cp > 1, the dp × cp groups, and with ep > 1 the groups along the experts' dimensions ep, edp (and
    edp × cp), from :attr:`Mesh.expert_shape`.
    Without a process group (one process), ``groups`` stay None.

    Args:
        group_cache: a dict, kept by the caller, of groups already made (key: the tuple of ranks); a
            group with the same ranks is reused instead of created (``new_group`` is a world-wide
            collective: the slow part of switching layouts in a sweep).
    Raises:
        ConfigError: the layout is for another number of ranks than the current world's.
    """
    import torch.distributed as dist  # here, not at the top: the layout arithmetic (the planner) needs no torch

    from minipar.runtime import dist as mdist

    if mesh.world_size != mdist.world_size():
        raise ConfigError(
            f"a layout of {mesh.world_size} ranks on a world of {mdist.world_size()}; "
            f"start {mesh.world_size} ranks, or build the layout for {mdist.world_size()}"
        )
    mesh.rank, cp, ep = mdist.rank(), mesh.cp, mesh.ep
    lists = [(d, group_ranks(mesh.shape, d)) for d in mesh.dims]
    if cp > 1:
        lists.append(("dp_cp", group_ranks(mesh.shape, ("dp", "cp"))))
    expert = [("ep", "ep"), ("edp", "edp")] + ([("edp_cp", ("edp", "cp"))] if cp > 1 else [])
    if ep > 1:  # the experts' dimensions: the same ranks seen as (pp, edp, ep, [cp,] tp)
        lists += [(key, group_ranks(mesh.expert_shape, along, mesh.expert_dims)) for key, along in expert]
    for key, all_ranks in lists:
        for ranks in all_ranks:
            if group_cache is not None and tuple(ranks) in group_cache:
                g = group_cache[tuple(ranks)]
            else:
                g = mdist.new_group(ranks) if dist.is_initialized() else None
                if group_cache is not None:
                    group_cache[tuple(ranks)] = g
            if mesh.rank in ranks:
                mesh.groups[key], mesh.ranks[key] = g, ranks
    return mesh
