"""Tensor parallelism: how each parameter is split, written on the parameter itself, and what reads it.

One definition of "which parameters are TP-sharded" (Megatron-LM ``tensor_parallel/layers.py``:
``set_tensor_model_parallel_attributes``): the layer that creates a parameter
(:mod:`minipar.tp.layers`) marks it with

- ``param.tensor_model_parallel``: True if this rank holds one piece (absent/False: replicated, the
  same on every TP rank: LayerNorms, position embedding, row-parallel biases);
- ``param.partition_dim``: the dimension split over the N ranks of the TP group;
- ``param.partition_stride``: the full tensor is this many stacked blocks along that dimension
  and each rank holds its slice of every block (3 for the fused ``[q; k; v]``: whole heads);
- ``param.full_size``: the single-device length along that dimension (a vocabulary padded to a
  multiple of N has padding rows past it).

Everything else is derived from the marks: :func:`shard_of` (this rank's piece of a full tensor),
:func:`gather_full` / :func:`gather_state_dict` (the full tensors back: how a TP model is proven
equal to one device, and how the 3D job assembles its model), :func:`param_is_not_tensor_parallel_duplicate`
(a whole-model gradient norm counts a replicated tensor once: :mod:`minipar.optim.clip_grads`), the
checkpoint's logical tensors (:mod:`minipar.checkpoint.dcp`) and the 3D job's ZeRO-1 clipping masks
(:mod:`minipar.job.parallelize`). The marks survive ``.to()`` (PyTorch keeps the ``Parameter`` object).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.tp.mappings import _all_gather, tp_rank, tp_size


def set_tensor_model_parallel_attributes(
    param: torch.Tensor, is_parallel: bool, dim: int, stride: int = 1, full_size: int | None = None
) -> None:
    """Mark ``param`` as split along ``dim`` over the TP group (Megatron-LM's function of this name).

    Args:
        is_parallel: True: this rank holds one piece (False: replicated, the same on every TP rank).
        dim: the split dimension; ``stride``: the full tensor is ``stride`` stacked blocks along
            ``dim`` (3 for ``[q; k; v]``) and each rank holds its slice of every block.
        full_size: the single-device length along ``dim`` (default: N times the local one); the
            rows past it are padding (a vocabulary padded to a multiple of N).
    """
    param.tensor_model_parallel = is_parallel
    param.partition_dim = dim
    param.partition_stride = stride
    param.full_size = full_size


def param_is_tensor_parallel(param: torch.Tensor) -> bool:
    """True if ``param`` is split over the TP group (marked by :func:`set_tensor_model_parallel_attributes`)."""
    return getattr(param, "tensor_model_parallel", False)


def param_is_not_tensor_parallel_duplicate(param: torch.Tensor, tp_rank: int) -> bool:
    """True if this rank should count ``param`` in a whole-model sum (a gradient norm): a split
    parameter on every rank, a replicated one only on TP rank 0 (Megatron-LM's function of this name)."""
    return param_is_tensor_parallel(param) or tp_rank == 0


def _blocks_shape(param: torch.Tensor, n: int) -> tuple[int, int, int]:
    """(stride, N, rows per block and rank) of ``param``'s split dimension."""
    s = param.partition_stride
    return s, n, param.shape[param.partition_dim] // s


def shard_of(param: torch.Tensor, full: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's piece of the single-device tensor ``full``, shaped like ``param``.

    ``full`` is zero-padded along ``param.partition_dim`` to N times the local size, cut into
    ``partition_stride`` blocks, and this rank takes its 1/N of every block. No communication.
    Shapes: ``full`` (..., full_size, ...) -> ``param.shape``.
    """
    d = param.partition_dim
    x = full.movedim(d, 0)
    s, n, per = _blocks_shape(param, tp_size(group))
    if x.shape[0] < s * n * per:
        x = torch.cat([x, x.new_zeros((s * n * per - x.shape[0],) + tuple(x.shape[1:]))])
    blocks = x.reshape(s, n, per, *x.shape[1:])
    return blocks[:, tp_rank(group)].reshape(-1, *x.shape[1:]).movedim(0, d)


def gather_full(local: torch.Tensor, param: torch.Tensor, group=None) -> torch.Tensor:
    """The single-device tensor assembled from every rank's ``local`` (shaped like ``param``: the
    parameter, its gradient, an optimizer moment). Collective over ``group``: one all-gather.
    Shapes: ``param.shape`` -> (..., full_size, ...) with the padding dropped."""
    d = param.partition_dim
    x = local.movedim(d, 0).contiguous()
    s, n, per = _blocks_shape(param, tp_size(group))
    g = _all_gather(x, 0, group)  # (N·local, ...) rank-major
    g = g.reshape(n, s, per, *x.shape[1:]).transpose(0, 1).reshape(-1, *x.shape[1:])
    return g[: param.full_size or g.shape[0]].movedim(0, d)


@torch.no_grad()
def gather_state_dict(module: nn.Module, group=None, grads: bool = False) -> dict[str, torch.Tensor]:
    """``{name: single-device tensor}`` of ``module``'s parameters (or of their ``.grad``), split ones
    gathered over the TP ``group``, replicated ones copied. Tied parameters appear under every name.
    Collective: one all-gather per split parameter."""
    out = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        t = (p.grad if grads else p).detach()
        out[name] = (gather_full(t, p, group) if param_is_tensor_parallel(p) else t).clone()
    return out
