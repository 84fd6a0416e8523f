"""Pipeline stages: the GPT cut into consecutive pieces, one ``nn.Module`` per stage.

    stages = build_stages(model, n_stages=4, stage_ids=[rank])      # this rank's piece(s)

Stages (inter-operator parallelism, Huang et al. 2019 GPipe, arXiv:1811.06965): the GPT's layers
are cut into S consecutive stages; the embedding goes to stage 0, the final LayerNorm, the
head and the loss to stage S−1 (:func:`partition_layers`, :class:`GPTStage`). A stage is a plain
``nn.Module`` made of ``GPT.embed`` / ``blocks[i:j]`` / ``GPT.head``; the executor that runs a
schedule over the stages is :mod:`minipar.pp.executor`.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.errors import ConfigError
from minipar.model.gpt import GPT


def partition_layers(n_layer: int, n_stages: int, layers_per_stage: list[int] | None = None) -> list[tuple[int, int]]:
    """Cut ``n_layer`` blocks into ``n_stages`` consecutive ranges ``[(lo, hi), ...]``.

    Balanced default: every stage gets ``n_layer // n_stages`` blocks, the first
    ``n_layer % n_stages`` stages one more. ``layers_per_stage`` gives the counts explicitly
    (e.g. one block fewer on the last stage, which also runs the head and the loss).

    Raises:
        ConfigError: more stages than layers; counts that do not sum to ``n_layer``, of the
            wrong length, or below 1.
    """
    if not isinstance(n_stages, int) or n_stages < 1:
        raise ConfigError(f"n_stages={n_stages!r} must be an integer >= 1")
    if layers_per_stage is None:
        if n_stages > n_layer:
            raise ConfigError(
                f"{n_stages} pipeline stages but the model has only n_layer={n_layer} blocks; "
                f"use at most {n_layer} stages (p·v <= n_layer) or a model with n_layer >= {n_stages}"
            )
        q, r = divmod(n_layer, n_stages)
        layers_per_stage = [q + (1 if s < r else 0) for s in range(n_stages)]
    counts = list(layers_per_stage)
    if len(counts) != n_stages:
        raise ConfigError(
            f"layers_per_stage={counts} has {len(counts)} entries for {n_stages} stages; give one count per stage"
        )
    if sum(counts) != n_layer or min(counts) < 1:
        raise ConfigError(
            f"layers_per_stage={counts} must be counts >= 1 summing to n_layer={n_layer}; "
            f"e.g. {partition_layers(n_layer, n_stages) if n_stages <= n_layer else 'fewer stages'}"
        )
    bounds, lo = [], 0
    for c in counts:
        bounds.append((lo, lo + c))
        lo += c
    return bounds


class GPTStage(nn.Module):
    """Stage ``index`` of ``n_stages`` of a GPT: [``embed``] -> ``blocks[lo:hi]`` -> [``head``].

    The one stage class of the course: cut from a ``GPT`` (pipelines, lessons 05-06) or from a
    :class:`~minipar.tp.gpt.TensorParallelGPT` (the 3D job, lesson 07), which is a ``GPT`` with
    parallel layers. It shares its modules with the model it was cut from and leaves that model
    untouched; its forward is the model's own code (``GPT.embed``, the blocks, ``GPT.head``).
    Parameter names are the model's, with the *global* block index (``blocks.3.mlp.fc.weight`` on
    the stage holding layer 3), which is what checkpoints and ZeRO units are keyed by.

    Attributes:
        loss: the model's ``loss(logits, targets)`` (``GPT.loss``, or the vocabulary-parallel one).
    Shapes: stage 0 takes ids (B, T) int64; the others take hidden (B, T, d_model); the last returns
    logits (B, T, vocab_size) (a TP model: this rank's slice (B, T, V'/tp)), the others hidden
    (B, T, d_model) (with sequence parallelism (B, T/tp, d_model)).
    """

    def __init__(self, model: GPT, index: int, n_stages: int, lo: int, hi: int):
        super().__init__()
        self.cfg, self.index, self.n_stages, self.lo, self.hi = model.cfg, index, n_stages, lo, hi
        self.is_first, self.is_last = index == 0, index == n_stages - 1
        if self.is_first:
            self.wte, self.wpe, self.drop = model.wte, model.wpe, model.drop
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in range(lo, hi)})
        if self.is_last:
            self.ln_f, self.lm_head = model.ln_f, model.lm_head
        self.loss = model.loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_first:
            x = GPT.embed(self, x)  # the same code as the unsplit model
        for block in self.blocks.values():
            x = block(x)
        return GPT.head(self, x) if self.is_last else x

    def extra_repr(self) -> str:
        return (
            f"stage {self.index}/{self.n_stages}: blocks[{self.lo}:{self.hi}]"
            + (" + embed" if self.is_first else "")
            + (" + head" if self.is_last else "")
        )


def build_stages(
    model: GPT, n_stages: int, stage_ids, layers_per_stage: list[int] | None = None
) -> dict[int, GPTStage]:
    """``{stage index: GPTStage}`` for the stages in ``stage_ids`` (the ones this rank runs).

    Raises:
        ConfigError: see :func:`partition_layers`; tied embeddings across different stages.
    """
    bounds = partition_layers(model.cfg.n_layer, n_stages, layers_per_stage)
    if model.cfg.tie_weights and n_stages > 1:
        raise ConfigError(
            "tie_weights=True ties the head (last stage) to the embedding (stage 0); this "
            "pipeline does not synchronise their gradients: build the GPT with tie_weights=False"
        )
    return {s: GPTStage(model, s, n_stages, *bounds[s]) for s in stage_ids}
