"""The PyTorch-native equivalent of lesson 04: DTensor tensor parallelism on ``minipar.model.gpt.GPT``.

``torch.distributed.tensor.parallel.parallelize_module`` replaces a module's weights by DTensors
sharded over a ``DeviceMesh`` and wraps its inputs/outputs with the redistributions that
``ColumnParallelLinear``/``RowParallelLinear`` do by hand:

- ``ColwiseParallel``: weight ``Shard(0)`` (rows of (out, in)), input Replicate → output Shard(-1);
- ``RowwiseParallel``: weight ``Shard(1)``, input Shard(-1) → output Partial → all-reduce → Replicate;
- with ``vocab_parallel``: the embedding ``RowwiseParallel`` (vocabulary rows) and the head
  ``ColwiseParallel`` keeping vocabulary-split logits, whose loss runs under ``loss_parallel()``.

One difference from minipar's layer: ``ColwiseParallel`` shards rows *contiguously*, so for the
fused ``qkv`` (rows ``[q; k; v]``) we first permute the rows to ``[q_0; k_0; v_0; q_1; ...]`` so that
rank r's contiguous block is its heads of q, k and v (what ``stride=3`` does in minipar), and tell
the attention it now has ``n_head / N`` heads (torchtitan does the same with ``n_heads``).
"""

from __future__ import annotations

import contextlib

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module

from minipar.model.gpt import GPT
from minipar.tp.gpt import check_tp_config


def _interleave_qkv(t: torch.Tensor, n: int, inverse: bool = False) -> torch.Tensor:
    """Rows ``[q; k; v]`` ↔ ``[q_0; k_0; v_0; q_1; k_1; v_1; ...]`` for ``n`` ranks."""
    rest = tuple(t.shape[1:])
    if inverse:
        return t.reshape(n, 3, -1, *rest).transpose(0, 1).reshape(t.shape)
    return t.reshape(3, n, -1, *rest).transpose(0, 1).reshape(t.shape)


def parallelize_gpt_dtensor(model: GPT, mesh, vocab_parallel: bool = False) -> GPT:
    """Tensor-parallelise ``model`` in place over the 1-D ``mesh`` with DTensor; returns it.

    The parameters left replicated (the norms, the position table and, without ``vocab_parallel``, the
    embedding and head) stay plain tensors. On CUDA, give the optimizer ``foreach=False`` (or put them in
    param groups apart from the DTensors): one foreach kernel cannot take both ("got mixed torch.Tensor and
    DTensor"). CPU optimizers do not use foreach by default.

    Raises:
        ConfigError: d_model, n_head or 4·d_model not divisible by the mesh size.
    """
    n = mesh.size()
    check_tp_config(model.cfg, n)
    for block in model.blocks:
        with torch.no_grad():
            for p in (block.attn.qkv.weight, block.attn.qkv.bias):
                if p is not None:
                    p.copy_(_interleave_qkv(p, n))
        block.attn.n_head //= n
        plan = {"attn.qkv": ColwiseParallel(), "attn.proj": RowwiseParallel()}  # heads split, then g
        plan |= {"mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}  # 4d/N hidden, then g
        parallelize_module(block, mesh, plan)
    if vocab_parallel:
        wte = RowwiseParallel(input_layouts=Replicate())  # vocabulary rows
        head = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)  # vocabulary-split logits
        parallelize_module(model, mesh, {"wte": wte, "lm_head": head})
    model.tp_degree = n
    return model


def loss_context(model: GPT):
    """``loss_parallel()`` when the head's logits are vocabulary-split DTensors, else a no-op.

    Wrap both the forward (the loss) and ``backward()`` in it.
    """
    return loss_parallel() if isinstance(model.lm_head.weight, DTensor) else contextlib.nullcontext()


@torch.no_grad()
def full_state_dict_dtensor(model: GPT, grads: bool = False) -> dict[str, torch.Tensor]:
    """Gather a DTensor-parallel ``GPT`` (or its grads) back into the single-device layout. Collective."""
    n = getattr(model, "tp_degree", 1)
    out = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        t = p.grad if grads else p
        t = (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()
        out[name] = _interleave_qkv(t, n, inverse=True) if ".attn.qkv." in name else t
    return out
