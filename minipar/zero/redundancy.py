"""ZeRO-1 around any torch optimizer: each rank keeps the optimizer state of its own parameters only.

Rajbhandari, Rasley, Ruwase, He 2020, "ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", arXiv:1910.02054, §5.1 (stage 1, P_os: partition the optimizer states).

:class:`~minipar.zero.stage12.ZeroOptimizer` shards flat fp32 buffers element by element and runs
AdamW; this is the form PyTorch users know from ``torch.distributed.optim.ZeroRedundancyOptimizer``
(the same constructor, partition and state-dict rules), written out:

1. the parameters are *partitioned whole* over the N ranks, greedily by size: largest first, each to
   the rank that owns the fewest elements so far (the rule of ``torch.distributed.optim``), so rank r
   owns Ψ_r ≈ Ψ/N elements (off by at most the largest parameter);
2. each rank builds ``optimizer_class`` over its own parameters only: its state (SGD momentum: 1
   tensor per parameter, Adam/AdamW: 2) is Ψ_r instead of Ψ elements;
3. ``step()``: every rank steps its own parameters with the (already averaged) gradients, then each
   parameter is broadcast from its owner: (N−1)/N·Ψ elements received per rank, like the all-gather
   of ZeRO-1.

Gradients must be averaged over the ranks before ``step()`` (DDP, or an all-reduce per gradient), as
for PyTorch's class. ``consolidate_state_dict(to=0)`` then ``state_dict()`` on rank 0 gives the
unsharded optimizer's state dict. A usage sketch::

    opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
    loss.backward(); all_reduce_gradients(model); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.errors import ConfigError
from minipar.runtime import dist as mdist


def partition_by_size(param_groups: list[dict], world_size: int) -> list[list[list[torch.Tensor]]]:
    """``out[rank][group]``: the parameters of each group that ``rank`` owns.

    Greedy, as ``torch.distributed.optim.ZeroRedundancyOptimizer``: group by group, largest
    parameter first, each to the rank with the fewest elements so far (lowest rank on ties). The
    counts carry over from one group to the next, so the ranks stay balanced over all groups.
    """
    sizes = [0] * world_size
    out = [[[] for _ in param_groups] for _ in range(world_size)]
    for i, g in enumerate(param_groups):
        for p in sorted(g["params"], key=lambda t: t.numel(), reverse=True):
            r = sizes.index(min(sizes))
            out[r][i].append(p)
            sizes[r] += p.numel()
    return out


class ZeroRedundancyOptimizer(torch.optim.Optimizer):
    """``optimizer_class`` over this rank's partition of ``params``; parameters broadcast after each step.

    Args:
        params: an iterable of tensors (a list, or a generator: consumed once) or of param-group
            dicts, as for any ``torch.optim.Optimizer``; every rank passes the same parameters in
            the same order (same shapes).
        optimizer_class: any ``torch.optim.Optimizer`` subclass (``torch.optim.SGD``, ``AdamW``...).
        group: the data-parallel process group (default: the world).
        **defaults: the optimizer's hyperparameters (``lr=...``, ``momentum=...``).
    Attributes:
        param_groups: all parameters, as for a torch optimizer (set ``g["lr"]`` here; it reaches
            the local optimizer at the next ``step``).
        optim: the local ``optimizer_class`` over this rank's parameters (None if it owns none).
        partition: ``partition[rank][group]``, the parameters each rank owns.
    Bytes per rank: parameters and gradients stay whole (stage 1); the optimizer state is
    K·Ψ_r·(element size) instead of K·Ψ·(element size), K = 1 for SGD with momentum, 2 for
    Adam/AdamW, with Ψ_r = :meth:`owned_numel` ≈ Ψ/N. ``step()`` broadcasts Ψ elements in total.
    Raises:
        ConfigError: ``optimizer_class`` is not an Optimizer subclass; ``state_dict()`` before
            ``consolidate_state_dict(to=this rank)``; ``load_state_dict`` with other group sizes.
        ValueError: an empty parameter list (raised by ``torch.optim.Optimizer``, as in torch).
    """

    def __init__(self, params, optimizer_class, group=None, **defaults):
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise ConfigError(
                f"optimizer_class={optimizer_class!r} is not a torch.optim.Optimizer subclass; "
                "pass the class itself, e.g. ZeroRedundancyOptimizer(params, torch.optim.SGD, lr=0.1)"
            )
        self._ready = False
        self.optimizer_class, self.group = optimizer_class, group
        self.rank, self.world_size = mdist.rank(group), mdist.world_size(group)
        self.optim = None
        self._consolidated = None
        self._kwargs = dict(defaults)  # what optimizer_class(...) accepts
        # the groups carry every hyperparameter of optimizer_class (SGD's dampening...), not just those given
        probe = torch.nn.Parameter(torch.zeros(0))  # device-ok: a throwaway, only to read the class's defaults
        defaults = optimizer_class([probe], **defaults).defaults
        super().__init__(params, defaults)  # a generator is consumed here, once; groups get the defaults
        self._ready = True
        self._repartition()
        self.optim = self._new_local([{**self._hyper(g), "params": ps} for g, ps in zip(self.param_groups, self._mine)])

    # -- the partition --------------------------------------------------------------------------
    @staticmethod
    def _hyper(g: dict) -> dict:
        return {k: v for k, v in g.items() if k != "params"}

    def _repartition(self) -> None:
        self.partition = partition_by_size(self.param_groups, self.world_size)
        self._mine = self.partition[self.rank]
        self._owner = {p: r for r, groups in enumerate(self.partition) for ps in groups for p in ps}
        self._src = [r if self.group is None else dist.get_global_rank(self.group, r) for r in range(self.world_size)]

    def _new_local(self, groups: list[dict]):
        if not any(g["params"] for g in groups):
            return None  # this rank owns nothing (more ranks than parameters)
        return self.optimizer_class(groups, **self._kwargs)

    def owned_numel(self, rank: int | None = None) -> int:
        """Elements of the parameters ``rank`` (default: this rank) owns: Ψ_r ≈ Ψ/N."""
        return sum(p.numel() for ps in self.partition[self.rank if rank is None else rank] for p in ps)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group, as ``torch.optim.Optimizer.add_param_group``; its parameters are partitioned
        (the older groups keep their owners) and this rank's share joins the local optimizer."""
        super().add_param_group(param_group)
        if not self._ready:
            return  # called by Optimizer.__init__: partitioned at its end
        self._repartition()
        mine = {**self._hyper(self.param_groups[-1]), "params": self._mine[-1]}
        if self.optim is None:
            groups = [{**self._hyper(g), "params": ps} for g, ps in zip(self.param_groups, self._mine)]
            self.optim = self._new_local(groups)
        else:
            self.optim.add_param_group(mine)

    # -- the step -------------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        """Step this rank's parameters with ``optimizer_class``, then broadcast every parameter from
        its owner (one broadcast per parameter, all in flight at once). Returns the closure's loss."""
        loss = None
        if self.optim is not None:
            for g, local in zip(self.param_groups, self.optim.param_groups):  # lr schedules set on self
                local.update(self._hyper(g))
            loss = self.optim.step(closure)
        elif closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self.world_size > 1:
            works = [
                dist.broadcast(p.data, src=self._src[self._owner[p]], group=self.group, async_op=True)
                for g in self.param_groups
                for p in g["params"]
            ]
            for w in works:
                w.wait()
        return loss

    # -- state dicts ----------------------------------------------------------------------------
    def _global_index(self) -> dict:
        order = [p for g in self.param_groups for p in g["params"]]
        return {p: i for i, p in enumerate(order)}

    def _local_state(self) -> dict:
        """``{global parameter index: state}`` of this rank's parameters (tensors on CPU)."""
        if self.optim is None:
            return {}
        index = self._global_index()
        return {
            index[p]: {k: (v.detach().cpu().clone() if torch.is_tensor(v) else v) for k, v in st.items()}
            for p, st in self.optim.state.items()
        }

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's optimizer state on rank ``to`` (a collective: call it on every rank).

        Then ``state_dict()`` on rank ``to`` returns the state of the *unsharded* optimizer: the same
        format as ``optimizer_class(all params).state_dict()``, loadable into either.
        """
        mine = self._local_state()
        if self.world_size == 1:
            parts = [mine]
        else:
            parts = [None] * self.world_size if self.rank == to else None
            dst = to if self.group is None else dist.get_global_rank(self.group, to)
            dist.gather_object(mine, parts, dst=dst, group=self.group)
        if self.rank != to:
            self._consolidated = None
            return
        state = {}
        for part in parts:
            state.update(part)
        index = self._global_index()
        groups = [{**self._hyper(g), "params": [index[p] for p in g["params"]]} for g in self.param_groups]
        self._consolidated = {"state": dict(sorted(state.items())), "param_groups": groups}

    def state_dict(self) -> dict:
        """The consolidated state (see :meth:`consolidate_state_dict`). Raises ConfigError if this
        rank did not receive it (world of 1: no consolidation needed)."""
        if self.world_size == 1 and self._consolidated is None:
            self.consolidate_state_dict(to=self.rank)
        if self._consolidated is None:
            raise ConfigError(
                f"state_dict() on rank {self.rank}: the state is sharded; call "
                f"consolidate_state_dict(to={self.rank}) on every rank first "
                "(torch.distributed.optim.ZeroRedundancyOptimizer has the same rule)"
            )
        return self._consolidated

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a consolidated (unsharded-format) state dict on every rank: each rank keeps the state
        of its own parameters. Raises ConfigError if the groups' sizes differ."""
        groups = state_dict["param_groups"]
        if [len(g["params"]) for g in groups] != [len(g["params"]) for g in self.param_groups]:
            raise ConfigError(
                f"state_dict has groups of {[len(g['params']) for g in groups]} parameters, this "
                f"optimizer {[len(g['params']) for g in self.param_groups]}: build it over the same params"
            )
        for g, saved in zip(self.param_groups, groups):
            g.update(self._hyper(saved))
        self._consolidated = None
        if self.optim is None:
            return
        index = self._global_index()
        state = {int(k): v for k, v in state_dict["state"].items()}
        local_state, local_groups, j = {}, [], 0
        for g, ps in zip(self.param_groups, self._mine):
            ids = []
            for p in ps:
                if index[p] in state:
                    local_state[j] = {
                        k: (v.clone() if torch.is_tensor(v) else v)  # never alias the caller's dict
                        for k, v in state[index[p]].items()
                    }
                ids.append(j)
                j += 1
            local_groups.append({**self._hyper(g), "params": ids})
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})
