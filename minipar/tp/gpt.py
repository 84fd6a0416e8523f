"""Tensor parallelism, part 3: the course's GPT (``minipar.models.GPT``) built from parallel layers.

Per transformer block (Shoeybi et al. 2019, arXiv:1909.08053, §3, Fig. 3-4):

- attention: ``qkv`` column-parallel with ``stride=3`` (rank r holds heads ``r·h/N ...`` of q, of k
  and of v), attention on its own ``h/N`` heads, ``proj`` row-parallel → one all-reduce;
- MLP: ``fc`` column-parallel (d → 4d/N), GELU, ``proj`` row-parallel (4d/N → d) → one all-reduce;
- LayerNorms and residual adds replicated (or, with sequence parallelism, sharded along T:
  Korthikanti et al. 2022, arXiv:2205.05198, §4.2.2).

So a block costs 2 all-reduces forward (``g``) and 2 backward (``f``) of a (B, T, d) tensor; with
sequence parallelism 2 all-gathers + 2 reduce-scatters each way instead (plus 2 all-gathers in
backward that recompute the gathered input, so it need not be stored).

:class:`TensorParallelGPT` mirrors ``GPT``'s ``embed`` / ``blocks`` / ``head`` / ``loss`` split, so a
pipeline stage can still be "some of these, in order" (lesson 07). ``head`` returns this rank's
slice of the (padded) vocabulary's logits; ``loss`` is :func:`vocab_parallel_cross_entropy`.

Same seed, same model: ``torch.manual_seed(s); TensorParallelGPT(cfg)`` builds the full
``GPT(cfg)`` from the same random stream on every rank and keeps each rank's slice, so it starts
equal to ``torch.manual_seed(s); GPT(cfg)``. :meth:`TensorParallelGPT.full_state_dict` gathers the
slices back into a ``GPT`` state dict (same keys).

Dropout: the equivalence is for ``dropout=0`` (``GPTConfig``'s default). With dropout, every rank
draws its masks from the same seeded stream — right for replicated regions, but the head-split
and sequence-split regions then reuse one mask pattern on every rank; Megatron forks a per-rank
RNG there (``get_cuda_rng_tracker``), which minipar does not.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from minipar.errors import ConfigError
from minipar.models import GPT, Block, GPTConfig, attention_core
from minipar.recompute import checkpoint
from minipar.tp.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    _mark_sequence_parallel,
    vocab_parallel_cross_entropy,
)
from minipar.tp.mappings import check_divisible, scatter_to_sequence_parallel_region, tp_size

_TP_LAYERS = (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding)


def check_tp_config(cfg: GPTConfig, tp: int) -> None:
    """Raise :class:`ConfigError` if hidden size, heads or FFN size do not divide by ``tp``.

    The suggested ``tp`` values divide all three (i.e. divide gcd(d_model, n_head, 4·d_model)).
    """
    ok = math.gcd(cfg.d_model, cfg.n_head, 4 * cfg.d_model)
    check_divisible("hidden size d_model", cfg.d_model, tp, ok)
    check_divisible("number of heads n_head", cfg.n_head, tp, ok)
    check_divisible("FFN size 4*d_model", 4 * cfg.d_model, tp, ok)


class ParallelMLP(nn.Module):
    """d → 4d/N (column-parallel) → GELU → d (row-parallel). (B, T, d) → (B, T, d); T/N with SP."""

    def __init__(self, cfg: GPTConfig, group=None, sequence_parallel: bool = False):
        super().__init__()
        d = cfg.d_model
        self.fc = ColumnParallelLinear(
            d, 4 * d, cfg.bias, group=group, sequence_parallel=sequence_parallel, what="FFN size 4*d_model"
        )
        self.proj = RowParallelLinear(
            4 * d,
            d,
            cfg.bias,
            input_is_parallel=True,
            group=group,
            sequence_parallel=sequence_parallel,
            what="FFN size 4*d_model",
        )
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class ParallelCausalSelfAttention(nn.Module):
    """Causal self-attention with the heads split over the group: each rank runs ``n_head/N`` heads.

    Shapes: (B, T, d) → (B, T, d); with sequence parallelism (B, T/N, d) → (B, T/N, d).
    """

    def __init__(self, cfg: GPTConfig, group=None, sequence_parallel: bool = False):
        super().__init__()
        n = tp_size(group)
        self.n_head = check_divisible("number of heads n_head", cfg.n_head, n)  # heads on this rank
        self.head_dim = cfg.head_dim
        self.qkv = ColumnParallelLinear(
            cfg.d_model,
            3 * cfg.d_model,
            cfg.bias,
            group=group,
            stride=3,
            sequence_parallel=sequence_parallel,
            what="hidden size d_model",
        )
        self.proj = RowParallelLinear(
            cfg.d_model,
            cfg.d_model,
            cfg.bias,
            input_is_parallel=True,
            group=group,
            sequence_parallel=sequence_parallel,
            what="hidden size d_model",
        )
        self.dropout, self.explicit, self.recompute_core = cfg.dropout, cfg.attention == "explicit", False
        self.resid_drop = nn.Dropout(cfg.dropout) if self.explicit else nn.Identity()

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:func:`minipar.models.attention_core` on this rank's heads."""
        return attention_core(q, k, v, self.dropout if self.training else 0.0, self.explicit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)  # (B, T, 3·d/N): [q_r; k_r; v_r]
        B, T, _ = qkv.shape
        q, k, v = qkv.split(self.n_head * self.head_dim, dim=2)
        q, k, v = (t.view(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if self.recompute_core and torch.is_grad_enabled():
            y = checkpoint(self.core, q, k, v)  # selective recomputation (lesson 08)
        else:
            y = self.core(q, k, v)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, -1)))


class ParallelBlock(nn.Module):
    """Pre-LN block ``x + attn(ln_1(x))``, ``x + mlp(ln_2(x))`` with parallel attention and MLP."""

    def __init__(self, cfg: GPTConfig, group=None, sequence_parallel: bool = False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = ParallelCausalSelfAttention(cfg, group, sequence_parallel)
        self.ln_2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = ParallelMLP(cfg, group, sequence_parallel)
        if sequence_parallel:
            _mark_sequence_parallel(*self.ln_1.parameters(), *self.ln_2.parameters())
        self.recompute = "none"  # "full": keep only x, re-run the block in backward (lesson 08)

    # the single-device block's forward, recomputation included: only the layers differ
    _forward = Block._forward
    forward = Block.forward


class TensorParallelGPT(nn.Module):
    """``minipar.models.GPT`` split over a tensor-parallel group.

    Args:
        cfg: the *full* model's :class:`GPTConfig`.
        group: the tensor-parallel group (default: the world).
        sequence_parallel: shard LayerNorm/dropout/residual regions along T (needs T % N == 0).
        full: the single-device ``GPT`` to slice; default ``GPT(cfg)`` built now from the current
            random state (so the same seed gives the same model as on one device).
    Shapes:
        ``forward(idx, targets)``: idx (B, T) → (logits (B, T, V'/N) this rank's vocabulary slice,
        loss scalar or None). V' = vocab padded to a multiple of N.
    Raises:
        ConfigError: d_model, n_head or 4·d_model not divisible by N; T not divisible by N with
        sequence parallelism; T > block_size.
    """

    def __init__(self, cfg: GPTConfig, group=None, sequence_parallel: bool = False, full: GPT | None = None):
        super().__init__()
        n = tp_size(group)
        check_tp_config(cfg, n)
        full = GPT(cfg) if full is None else full  # first: the same random draws as on one device
        self.cfg, self.group, self.sequence_parallel = cfg, group, sequence_parallel
        self.wte = VocabParallelEmbedding(cfg.vocab_size, cfg.d_model, group)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(ParallelBlock(cfg, group, sequence_parallel) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.lm_head = ColumnParallelLinear(
            cfg.d_model,
            self.wte.padded,
            bias=False,
            group=group,
            sequence_parallel=sequence_parallel,
            what="padded vocabulary",
        )
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight  # both hold vocabulary rows r·V'/N ...
        if sequence_parallel:
            _mark_sequence_parallel(*self.ln_f.parameters())
        self.load_full_(full)

    @torch.no_grad()
    def load_full_(self, full: GPT) -> None:
        """Copy my slice of every parameter of the single-device model ``full``."""
        for name, m in self.named_modules():
            if isinstance(m, _TP_LAYERS):
                src = full.get_submodule(name)
                m.load_full_(src.weight, getattr(src, "bias", None))
        owned = {id(p) for m in self.modules() if isinstance(m, _TP_LAYERS) for p in m.parameters()}
        src = dict(full.named_parameters())
        for name, p in self.named_parameters():
            if id(p) not in owned:
                p.copy_(src[name])

    @torch.no_grad()
    def full_state_dict(self, grads: bool = False) -> dict[str, torch.Tensor]:
        """The single-device ``GPT``'s state dict (or its gradients), gathered. Collective."""
        out: dict[str, torch.Tensor] = {}
        owned = set()
        for name, m in self.named_modules():
            if isinstance(m, _TP_LAYERS):
                kw = {"true_out": self.cfg.vocab_size} if m is self.lm_head else {}
                w, b = m.full_parameters(grads=grads, **kw)
                out[f"{name}.weight"] = w.clone()  # a copy, even when tp = 1
                if b is not None:
                    out[f"{name}.bias"] = b.clone()
                owned |= {f"{name}.weight", f"{name}.bias"}
        for name, p in self.named_parameters(remove_duplicate=False):
            if name not in owned:
                out[name] = (p.grad if grads else p).detach().clone()
        return out

    # The pieces a pipeline stage is made of (as in GPT).
    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) ids → (B, T, d) hidden; (B, T/N, d) this rank's sequence slice with SP."""
        T, n = idx.shape[1], tp_size(self.group)
        if T > self.cfg.block_size:
            raise ConfigError(
                f"sequence length {T} > block_size={self.cfg.block_size}; "
                f"crop the input or build the model with block_size >= {T}"
            )
        if self.sequence_parallel and T % n:
            raise ConfigError(
                f"sequence length T={T} is not divisible by tp={n} (sequence parallelism); "
                f"use T={T // n * n or n} or {(T // n + 1) * n}"
            )
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        if self.sequence_parallel:
            x = scatter_to_sequence_parallel_region(x, self.group)
        return self.drop(x)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) hidden [(B, T/N, d) with SP] → (B, T, V'/N) this rank's vocabulary slice of the logits."""
        return self.lm_head(self.ln_f(x))

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over all B·T positions from vocabulary-split logits (a scalar)."""
        return vocab_parallel_cross_entropy(logits, targets, self.cfg.vocab_size, self.group)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)
        return logits, (None if targets is None else self.loss(logits, targets))


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
