"""The sharding strategies lesson 03 compares, applied to one GPT in place (lesson 03 and its benchmark).

    torch.manual_seed(0); model = GPT(cfg)
    opt = apply_strategy(model, "zero3pp", lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3))

- ``dp``: the model untouched (its gradients all-reduced by the caller); ``single``: one device;
- ``zero1``, ``zero2``, ``zero3``: minipar's flat units (:func:`minipar.zero.zero`; stage 3 is FSDP1's design);
- ``zero3pp``: minipar's per-parameter ZeRO-3 (:func:`minipar.zero.fully_shard.fully_shard`, FSDP2's design);
- ``fsdp2``: PyTorch's ``torch.distributed.fsdp.fully_shard``.

Both per-parameter ZeRO-3s shard the same units, then the root: :func:`units`.
"""

from __future__ import annotations

from typing import Callable

import torch

from minipar.model.gpt import GPT
from minipar.runtime import dist as md
from minipar.zero import zero
from minipar.zero.fully_shard import MixedPrecisionPolicy, fully_shard

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "zero3pp", "fsdp2")


def units(model: GPT) -> list:
    """The modules every ZeRO-3 here shards on their own (then the root): the flat units of stage 3."""
    return [model.wte, model.wpe, *model.blocks, model.ln_f, model.lm_head]


def apply_strategy(
    model: GPT, strategy: str, make_optimizer: Callable[[GPT], torch.optim.Optimizer], mp=None, **zero_kw
):
    """Shard ``model`` in place for ``strategy`` (:data:`STRATEGIES` or ``"single"``) and return its optimizer.

    ``make_optimizer(model)`` builds the optimizer of the strategies that keep PyTorch's (single, dp,
    zero3pp, fsdp2), after sharding; the flat ZeRO stages build their own AdamW from ``zero_kw`` (lr,
    betas, weight_decay, max_norm, trace, ...). ``mp``: ``(param_dtype, reduce_dtype)`` for the two
    per-parameter ZeRO-3s, given to minipar's and PyTorch's ``MixedPrecisionPolicy``.
    Collective for every strategy but single and dp: every rank calls it.
    """
    if strategy in ("dp", "single"):
        return make_optimizer(model)
    if strategy == "zero3pp":
        policy = MixedPrecisionPolicy(*mp) if mp else None
        for m in units(model):
            fully_shard(m, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        return make_optimizer(model)
    if strategy == "fsdp2":
        from torch.distributed import fsdp
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(md.device().type, (md.world_size(),))
        policy = fsdp.MixedPrecisionPolicy(*mp) if mp else fsdp.MixedPrecisionPolicy()
        for m in units(model):
            fsdp.fully_shard(m, mesh=mesh, mp_policy=policy)
        fsdp.fully_shard(model, mesh=mesh, mp_policy=policy)
        return make_optimizer(model)
    return zero(model, int(strategy[-1]), **zero_kw)
