"""ZeRO-1 for the MoE job: dense parameters sharded over dp, experts over the expert-data-parallel group.

    opt = MoEZero1(model, mesh, lr=3e-3, weight_decay=0.1, max_norm=1.0)   # model: the MoE GPT with EP layers
    loss.backward(); opt.step(); opt.zero_grad()                           # like torch.optim.AdamW

ZeRO stage 1 (Rajbhandari et al. 2020, arXiv:1910.02054, §5.1: P_os) keeps on each rank the AdamW
moments of 1/N of the parameters, N the ranks that hold the same copy. In the MoE job two sets of
ranks hold copies: every dp rank holds the dense parameters (attention, LayerNorms, embeddings, routers),
but only the dp/ep ranks of an expert-data-parallel group hold the same experts. So, as Megatron-LM's
distributed optimizer does with its separate expert-data-parallel buffers, two
:class:`~minipar.zero.stage12.ZeroOptimizer` s: the dense units over ``mesh.dp_cp_group`` (N = dp·cp), the
``blocks.i.mlp.experts`` units over ``mesh.edp_cp_group`` (N = dp·cp/ep; with cp = 1, dp and expert-dp).

Gradients (see :mod:`minipar.job.piece`): dense = mean over dp·cp, which the dense reduce-scatter gives;
experts = (sum over expert-dp × cp) / (dp·cp) = (mean there) / ep, so the expert shards are divided
by ep after their reduce-scatter. Clipping uses the whole model's norm: each dense element lies in one
rank's shard and each expert element in one rank's shard (its EP block, its slice), so one all-reduce
over dp × cp of every rank's squared shard norms counts every element once. The AdamW groups
are ``adamw_groups``' (the experts' stacked biases, (E/ep, f), not decayed): the same update as
without ZeRO, tests/test_experts_train.py.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.model.gpt import decays
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.runtime.mesh import Mesh
from minipar.zero.flat import all_gather_units, default_units
from minipar.zero.stage12 import ZeroOptimizer


def moe_units(model: nn.Module) -> tuple[list, list]:
    """``(dense units, expert units)`` of a MoE GPT for ZeRO: :func:`~minipar.zero.flat.default_units`,
    each block opened into ``ln_1``, ``attn``, ``ln_2``, ``mlp.router`` (dense) and ``mlp.experts``."""
    dense, experts = [], []
    for name, m in default_units(model):
        if not hasattr(m, "mlp") or not hasattr(m.mlp, "experts"):
            dense.append((name, m))
            continue
        for sub, child in m.named_children():
            if sub == "mlp":
                dense.append((f"{name}.mlp.router", child.router))
                experts.append((f"{name}.mlp.experts", child.experts))
            elif any(True for _ in child.parameters()):
                dense.append((f"{name}.{sub}", child))
    return dense, experts


def _regroup(opt: ZeroOptimizer, weight_decay: float) -> None:
    """Rebuild ``opt``'s AdamW groups with :func:`minipar.model.gpt.adamw_groups`' rule
    (:func:`~minipar.model.gpt.decays`),
    which the flat shards' shapes alone cannot tell (a stacked bias is 2-D)."""
    decay, no_decay, k = [], [], 0
    for j, u in enumerate(opt.units):
        for i, _a, _b in u.segments():
            p, v = opt.params[j][i], opt.pieces[k][3]
            k += 1
            (decay if decays(p) else no_decay).append(v)
    old = opt.optimizer.param_groups[0]
    groups = [
        g
        for g in ({"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0})
        if g["params"]
    ]
    if groups:
        opt.optimizer = torch.optim.AdamW(groups, lr=old["lr"], betas=old["betas"], eps=old["eps"], weight_decay=0.0)


class MoEZero1:
    """ZeRO-1 of the MoE job (module doc). ``step()``, ``zero_grad()``, ``param_groups`` as AdamW;
    ``parts``: the (dense, experts) :class:`~minipar.zero.stage12.ZeroOptimizer` s.

    Raises:
        ConfigError: as ZeroOptimizer (ranks starting from different weights, tied parameters).
    """

    def __init__(self, model: nn.Module, mesh: Mesh, *, lr: float, weight_decay: float, max_norm: float | None):
        dense, experts = moe_units(model)
        kw = dict(stage=1, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay, max_norm=None)
        self.parts = (
            ZeroOptimizer(model, units=dense, group=mesh.dp_cp_group, **kw),
            ZeroOptimizer(model, units=experts, group=mesh.edp_cp_group, **kw),
        )
        for opt in self.parts:
            _regroup(opt, weight_decay)
        self.mesh, self.max_norm = mesh, max_norm

    @property
    def param_groups(self) -> list[dict]:
        return [g for opt in self.parts for g in opt.param_groups]

    @torch.no_grad()
    def step(self) -> None:
        """Reduce-scatter (dense: mean over dp; experts: mean over expert-dp, / ep), clip by the whole
        model's norm (one all-reduce over dp), AdamW on this rank's shards, all-gather the weights."""
        dense, experts = (opt._grad_shards() for opt in self.parts)
        for g in experts:
            g.div_(self.mesh.ep_size)
        if self.max_norm:
            clip_grad_norm_(dense + experts, self.max_norm, group=self.mesh.dp_cp_group)
        for opt, grads in zip(self.parts, (dense, experts)):
            opt._adamw_step(grads)
            all_gather_units(opt.flats, opt.shards, opt.group)
            opt.grad_shards = [None] * len(opt.units)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.parts:
            opt.zero_grad(set_to_none)
