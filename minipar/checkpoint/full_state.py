"""The single-device state dict of a model sharded any way minipar (or PyTorch) shards it.

    sd = full_state_dict(model)                          # weights, every rank gets them all
    g = full_state_dict(stage, grads=True, group=tp)     # gradients, TP slices gathered
    sd = gather_stages(sd, mesh, dst=0)                  # + every pipeline stage, on rank 0

One function for every sharding the course builds, chosen per parameter:

- minipar's per-parameter ZeRO-3 (:func:`minipar.zero.fully_shard.fully_shard`, FSDP2's design): a
  parameter with a ``shard_spec`` is all-gathered over its group
  (:func:`minipar.zero.param_shard.gather_full`);
- minipar's tensor parallelism (:mod:`minipar.tp`): a split parameter is all-gathered over ``group``
  and its blocks put back in single-device order (:func:`minipar.tp.partition.gather_full`);
- PyTorch's DTensor (``torch.distributed.fsdp.fully_shard``): ``full_tensor()``; a GPT parallelized with
  DTensor TP (:func:`minipar.tp.dtensor.parallelize_gpt_dtensor`) also has its q/k/v rows put back
  (:func:`minipar.tp.dtensor.full_state_dict_dtensor`);
- flat ZeRO-3 units (:func:`minipar.zero.zero` with stage 3, FSDP1's design): the model holds no
  weights between steps; the optimizer that owns the shards gathers them (``optimizer=``);
- replicated parameters (DDP, ZeRO-1/2, one device): a copy.

Every call is a collective over the groups involved: every rank of them calls it and gets the whole
dict. Gradients (``grads=True``) are gathered like the weights they belong to, through the same code,
with a parameter that has no ``.grad`` read as zeros.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor

from minipar.errors import ConfigError
from minipar.runtime import dist as mdist
from minipar.runtime.mesh import Mesh
from minipar.tp import partition
from minipar.tp.dtensor import full_state_dict_dtensor
from minipar.zero import param_shard


@torch.no_grad()
def full_state_dict(
    module: nn.Module,
    grads: bool = False,
    *,
    group=None,
    optimizer: torch.optim.Optimizer | None = None,
    remove_duplicate: bool = True,
) -> dict[str, torch.Tensor]:
    """``{name: single-device tensor}`` of ``module``'s parameters (``grads=True``: of their gradients).

    Args:
        module: the (possibly sharded) model, or one pipeline stage of it.
        grads: gather ``.grad`` instead of the weights (a missing ``.grad`` reads as zeros).
        group: the tensor-parallel group of minipar's TP layers (None: the world).
        optimizer: for flat ZeRO-3 units, the ``minipar.zero.zero`` optimizer that holds the shards;
            ignored by every other sharding.
        remove_duplicate: as ``nn.Module.named_parameters``: False lists a tied parameter under
            every name (what a single-device ``state_dict`` does).
    Returns:
        New tensors, each the full single-device shape, on every rank. Collective.
    Raises:
        ConfigError: ``grads=True`` with flat ZeRO-3 units (their gradients exist only as shards).
    """
    if hasattr(optimizer, "full_state_dict"):  # flat ZeRO-3: the shards are the optimizer's
        if grads:
            raise ConfigError("flat ZeRO-3 units keep only gradient shards; gather weights, or use fully_shard")
        return optimizer.full_state_dict()
    if getattr(module, "tp_degree", 1) > 1:  # DTensor TP: its q/k/v rows are interleaved per rank
        return full_state_dict_dtensor(module, grads)
    out = {}
    for name, p in module.named_parameters(remove_duplicate=remove_duplicate):
        t = (p.grad if p.grad is not None else torch.zeros_like(p)) if grads else p
        t = t.detach()
        if hasattr(p, "shard_spec"):
            out[name] = param_shard.gather_full(t, p.shard_spec)
        elif partition.param_is_tensor_parallel(p):
            out[name] = partition.gather_full(t, p, group).clone()
        elif isinstance(t, DTensor):
            out[name] = t.full_tensor().clone()
        else:
            out[name] = t.clone()
    return out


def gather_stages(state: dict[str, torch.Tensor], mesh: Mesh, dst: int) -> dict[str, torch.Tensor] | None:
    """Every pipeline stage's :func:`full_state_dict` merged on global rank ``dst`` (None elsewhere).

    ``state``: this rank's stage, already whole within its stage (TP gathered). One rank per stage
    (dp, cp and tp rank 0) contributes; the dicts travel as Python objects (``gather_object``: fine
    for course-sized models, and it works with any backend). Collective over the world.
    """
    if mdist.world_size() == 1:
        return state
    box = [None] * mdist.world_size() if mdist.rank() == dst else None
    first = mesh.dp_rank == 0 and mesh.cp_rank == 0 and mesh.tp_rank == 0
    dist.gather_object({k: v.cpu() for k, v in state.items()} if first else {}, box, dst=dst)
    if mdist.rank() != dst:
        return None
    return {k: v for part in box for k, v in part.items()}
