"""Tensor parallelism, part 3: the course's GPT (``minipar.model.gpt.GPT``) with parallel layers swapped in.

Per transformer block (Shoeybi et al. 2019, arXiv:1909.08053, §3, Fig. 3-4):

- attention: ``qkv`` column-parallel with ``stride=3`` (rank r holds heads ``r·h/N ...`` of q, of k
  and of v), attention on its own ``h/N`` heads, ``proj`` row-parallel → one all-reduce;
- MLP: ``fc`` column-parallel (d → 4d/N), GELU, ``proj`` row-parallel (4d/N → d) → one all-reduce;
- LayerNorms and residual adds replicated (or, with sequence parallelism, sharded along T:
  Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2).

So a block costs 2 all-reduces forward (``g``) and 2 backward (``f``) of a (B, T, d) tensor; with
sequence parallelism 2 all-gathers + 2 reduce-scatters each way instead (plus 2 all-gathers in
backward that recompute the gathered input, so it need not be stored).

**One forward: the model is transformed, not written again.** :class:`TensorParallelGPT` *is* a
``GPT``: it builds the single-device model from the current random state, then
:func:`parallelize_gpt_` replaces each ``nn.Linear`` / ``nn.Embedding`` by its parallel layer
holding this rank's slice (picotron's ``apply_tensor_parallel`` and torchtitan's ``parallelize`` do
the same, as does :mod:`minipar.tp.dtensor` with DTensor). Every forward — attention, MLP, block,
``embed`` / ``head``, recomputation — is :mod:`minipar.model.gpt`'s, so a change to the model is made once and
a pipeline stage is cut from either model by the same :class:`~minipar.pp.stages.GPTStage`. Why not
Megatron-style ``ParallelMLP``/``ParallelAttention`` classes: they would repeat :mod:`minipar.model.gpt`'s
module structure in their constructors, a second place to change for every model option. What is
TP-specific is only *which* layer is column-, row- or vocabulary-parallel (:func:`parallelize_block_`,
:func:`parallelize_gpt_`); the layers write it on their parameters (:mod:`minipar.tp.partition`), where
gathering, clipping and checkpoints read it. Two pieces differ from one device: the loss
(:func:`vocab_parallel_cross_entropy` on this rank's vocabulary slice of the logits) and, with
sequence parallelism, the embedding's dropout, which first keeps this rank's T/N positions
(:class:`SequenceParallelDropout`, as Megatron's embedding does).

Same seed, same model: ``torch.manual_seed(s); TensorParallelGPT(cfg)`` starts equal to
``torch.manual_seed(s); GPT(cfg)``; :meth:`TensorParallelGPT.full_state_dict` gathers the slices back
into a ``GPT`` state dict (same keys). ``generate`` and ``flops_per_token`` are the single-device
model's: call them on a gathered ``GPT``.

Dropout: the equivalence is for ``dropout=0`` (``GPTConfig``'s default). With dropout, every rank
draws its masks from the same seeded stream — right for replicated regions, but the head-split
and sequence-split regions then reuse one mask pattern on every rank; Megatron forks a per-rank
RNG there (``get_cuda_rng_tracker``), which minipar does not.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.errors import ConfigError
from minipar.model.gpt import GPT, Block, GPTConfig
from minipar.tp.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    _mark_sequence_parallel,
    vocab_parallel_cross_entropy,
)
from minipar.tp.mappings import check_divisible, scatter_to_sequence_parallel_region, tp_size
from minipar.tp.partition import gather_state_dict


def check_tp_config(cfg: GPTConfig, tp: int) -> None:
    """Raise :class:`ConfigError` if hidden size, heads or FFN size do not divide by ``tp``.

    The suggested ``tp`` values divide all three (i.e. divide gcd(d_model, n_head, 4·d_model)).
    """
    ok = math.gcd(cfg.d_model, cfg.n_head, 4 * cfg.d_model)
    check_divisible("hidden size d_model", cfg.d_model, tp, ok)
    check_divisible("number of heads n_head", cfg.n_head, tp, ok)
    check_divisible("FFN size 4*d_model", 4 * cfg.d_model, tp, ok)


def _parallel(layer_cls, lin: nn.Linear, **kw) -> nn.Module:
    """A ``ColumnParallelLinear`` / ``RowParallelLinear`` of ``lin``'s sizes holding this rank's piece
    of ``lin`` (on ``lin``'s device); ``kw``: the layer's options (group, sequence_parallel, ...)."""
    layer = layer_cls(lin.in_features, lin.out_features, lin.bias is not None, device=lin.weight.device, **kw)
    layer.load_full_(lin.weight, lin.bias)
    return layer


@torch.no_grad()
def parallelize_block_(block: Block, group=None, sequence_parallel: bool = False) -> Block:
    """Split a ``models.Block`` over ``group`` in place; returns it. Its forward stays ``Block``'s.

    ``attn.qkv`` column-parallel (``stride=3``: whole heads of q, k and v), ``attn.proj`` row-parallel,
    ``mlp.fc`` column-parallel, ``mlp.proj`` row-parallel; the attention then runs ``n_head/N`` heads.
    With sequence parallelism the LayerNorms see (B, T/N, d) and are tagged ``sequence_parallel``.

    Raises:
        ConfigError: n_head, d_model or 4·d_model not divisible by N.
    """
    attn, mlp = block.attn, block.mlp
    attn.n_head = check_divisible("number of heads n_head", attn.n_head, tp_size(group))  # heads on this rank
    col = dict(group=group, sequence_parallel=sequence_parallel)
    row = dict(col, input_is_parallel=True)  # the column-parallel output is already split
    attn.qkv = _parallel(ColumnParallelLinear, attn.qkv, what="hidden size d_model", stride=3, **col)
    attn.proj = _parallel(RowParallelLinear, attn.proj, what="hidden size d_model", **row)
    mlp.fc = _parallel(ColumnParallelLinear, mlp.fc, what="FFN size 4*d_model", **col)
    mlp.proj = _parallel(RowParallelLinear, mlp.proj, what="FFN size 4*d_model", **row)
    if sequence_parallel:
        _mark_sequence_parallel(*block.ln_1.parameters(), *block.ln_2.parameters())
    return block


class SequenceParallelDropout(nn.Module):
    """The embedding's dropout on this rank's T/N positions: (B, T, d) → (B, T/N, d).

    Sequence parallelism starts here (Korthikanti et al. 2022, §4.2.2; Megatron's embedding calls
    ``scatter_to_sequence_parallel_region`` before its dropout); backward all-gathers along T.

    Raises:
        ConfigError: T not divisible by N.
    """

    def __init__(self, drop: nn.Module, group=None):
        super().__init__()
        self.drop, self.group = drop, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T, n = x.shape[1], tp_size(self.group)
        if T % n:
            raise ConfigError(
                f"sequence length T={T} is not divisible by tp={n} (sequence parallelism); "
                f"use T={T // n * n or n} or {(T // n + 1) * n}"
            )
        return self.drop(scatter_to_sequence_parallel_region(x, self.group))


@torch.no_grad()
def parallelize_gpt_(model: GPT, group=None, sequence_parallel: bool = False) -> GPT:
    """Split a single-device ``GPT`` over ``group`` in place (every rank keeps its slice); returns it.

    Every block as :func:`parallelize_block_`; ``wte`` vocabulary-parallel and ``lm_head``
    column-parallel over the vocabulary padded to a multiple of N (tied again if the model ties
    them); with sequence parallelism the embedding dropout keeps T/N positions
    (:class:`SequenceParallelDropout`) and ``ln_f`` is tagged ``sequence_parallel``. ``model.loss``
    becomes :func:`vocab_parallel_cross_entropy` over ``group`` (a plain function holding no reference
    to the model: a pipeline stage takes it along).

    Raises:
        ConfigError: d_model, n_head or 4·d_model not divisible by N.
    """
    cfg = model.cfg
    check_tp_config(cfg, tp_size(group))
    for block in model.blocks:
        parallelize_block_(block, group, sequence_parallel)
    wte = VocabParallelEmbedding(cfg.vocab_size, cfg.d_model, group, device=model.wte.weight.device)
    wte.load_full_(model.wte.weight)
    model.wte = wte
    model.lm_head = _parallel(
        ColumnParallelLinear,
        model.lm_head,
        group=group,
        sequence_parallel=sequence_parallel,
        what="padded vocabulary",
        padded_out_features=wte.padded,
    )
    if cfg.tie_weights:
        model.lm_head.weight = model.wte.weight  # both hold vocabulary rows r·V'/N ...
    if sequence_parallel:
        model.drop = SequenceParallelDropout(model.drop, group)
        _mark_sequence_parallel(*model.ln_f.parameters())
    model.loss = functools.partial(vocab_parallel_cross_entropy, vocab_size=cfg.vocab_size, group=group)
    return model


class TensorParallelGPT(GPT):
    """``minipar.model.gpt.GPT`` split over a tensor-parallel group: the same model and forward, with
    parallel layers (:func:`parallelize_gpt_`) and the vocabulary-parallel loss.

    Args:
        cfg: the *full* model's :class:`GPTConfig`.
        group: the tensor-parallel group (default: the world).
        sequence_parallel: shard LayerNorm/dropout/residual regions along T (needs T % N == 0).
    Attributes:
        loss: ``loss(logits, targets)``, :func:`vocab_parallel_cross_entropy` over ``group``; a plain
            function holding no reference to the model (a pipeline stage takes it along).
    Shapes:
        ``forward(idx, targets)``: idx (B, T) → (logits (B, T, V'/N) this rank's vocabulary slice,
        loss scalar or None). V' = vocab padded to a multiple of N.
    Raises:
        ConfigError: d_model, n_head or 4·d_model not divisible by N; T not divisible by N with
        sequence parallelism; T > block_size.
    """

    def __init__(self, cfg: GPTConfig, group=None, sequence_parallel: bool = False):
        check_tp_config(cfg, tp_size(group))  # before the random draws of the full model
        super().__init__(cfg)  # the single-device model, from the current random state
        self.group, self.sequence_parallel = group, sequence_parallel
        parallelize_gpt_(self, group, sequence_parallel)  # also sets self.loss

    def full_state_dict(self, grads: bool = False) -> dict[str, torch.Tensor]:
        """The single-device ``GPT``'s state dict (or its gradients), gathered. Collective."""
        return gather_state_dict(self, self.group, grads)


def allreduce_sequence_parallel_grads(model: nn.Module, group=None) -> int:
    """Sum over the TP group the grads of parameters tagged ``sequence_parallel``; returns how many.

    With sequence parallelism a replicated parameter (LayerNorm weight/bias, a row-parallel bias)
    sees only this rank's T/N positions, so its gradient is a partial sum (Megatron-LM's
    ``allreduce_sequence_parallel_grads``). One flat all-reduce for all of them. Call it after
    ``backward()``, before the optimizer step. A no-op on a group of one.
    """
    grads = [p.grad for p in model.parameters() if getattr(p, "sequence_parallel", False) and p.grad is not None]
    if not grads or tp_size(group) == 1:
        return len(grads)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    for g, new in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(new.view_as(g))
    return len(grads)
