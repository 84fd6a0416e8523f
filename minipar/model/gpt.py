"""The course's models: a small GPT and an MLP, written to be split later.

GPT (Radford et al. 2019, nanoGPT layout): token + position embedding, ``n_layer`` pre-LN
blocks ``x + attn(ln_1(x))``, ``x + mlp(ln_2(x))``, a final LayerNorm and a linear head.
How later lessons cut it:

- pipeline (lessons 05-06): ``embed`` | ``blocks[i:j]`` | ``head`` + ``loss`` are separate
  methods, so a stage is "some of these, in order";
- tensor parallel (lesson 04): attention's fused ``qkv`` weight is laid out ``[q; k; v]``,
  each ``(n_head * head_dim, d_model)``, so a rank takes whole heads from each of the three;
  ``mlp.fc`` splits by output column, ``attn.proj``/``mlp.proj`` by input row (Megatron);
  :mod:`minipar.tp.gpt` swaps these layers for parallel ones and keeps every forward here;
- ZeRO/FSDP (lesson 03): every block is one module, the natural unit to gather and free.

Shapes: ``idx`` (B, T) int64 -> hidden ``x`` (B, T, d_model) -> logits (B, T, vocab_size).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.errors import ConfigError
from minipar.model.moe.capacity import check_moe
from minipar.model.moe.layer import MoE
from minipar.model.recompute import checkpoint


@dataclass
class GPTConfig:
    vocab_size: int = 128
    block_size: int = 128  # T, the longest context
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0  # 0 keeps runs bit-comparable across layouts
    bias: bool = True
    tie_weights: bool = False  # tie the head to the token embedding (GPT-2 does; pipelines must sync it)
    attention: str = "sdpa"  # "sdpa" (fused, nothing s×s kept) | "explicit" (Megatron's unfused core, lesson 08)
    moe_experts: int = 0  # > 0: every block's MLP is a mixture of this many experts (minipar.model.moe, lesson 12)
    moe_top_k: int = 1  # experts per token
    moe_capacity_factor: float | None = None  # None: drop-free; else C = ceil(cf·T·k/E) tokens per expert
    moe_aux_loss_coef: float = 0.01  # α of the Switch load-balancing loss, added to the loss

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"GPTConfig.{name}={v!r} must be an integer >= 1")
        if self.moe_experts:
            check_moe(self.moe_experts, self.moe_top_k, self.moe_capacity_factor)
        if self.attention not in ("sdpa", "explicit"):
            raise ConfigError(f"GPTConfig.attention={self.attention!r}: use 'sdpa' or 'explicit'")
        if self.d_model % self.n_head:
            near = range(max(1, self.n_head - 8), min(self.d_model, self.n_head + 8) + 1)  # not 1..d_model: any size
            ok = [h for h in near if self.d_model % h == 0] or [1]  # 1 divides every --d-model
            raise ConfigError(  # the names of python -m minipar.train's flags, which set these two fields
                f"--d-model {self.d_model} is not divisible by --n-head {self.n_head} (each head gets d_model / n_head "
                f"columns); use --n-head {', '.join(map(str, ok))}, or a --d-model divisible by {self.n_head}"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


def attention_core(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, explicit: bool = False
) -> torch.Tensor:
    """The attention core softmax(QKᵀ/√d_head + causal mask) · V, dropout on the probabilities.

    Shapes: q, k, v (B, a, T, d_head) -> (B, a, T, d_head). ``explicit=False`` calls the fused
    ``F.scaled_dot_product_attention`` (keeps no (T × T) tensor for backward on CPU/flash);
    ``explicit=True`` is Megatron's unfused core, which keeps the scores' softmax (2·a·s²·b bytes
    in 16 bits), the dropout mask (a·s²·b) and its output (2·a·s²·b): the 5as²b term of
    Korthikanti et al. 2022, arXiv:2205.05198, §4.1 — what selective recomputation (§5) drops.
    """
    if not explicit:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout_p)
    T = q.shape[-2]
    mask = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)  # added: nothing saved
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return F.dropout(att.softmax(dim=-1), dropout_p) @ v


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention. ``qkv``: (3·d, d) weight laid out [q; k; v].

    ``recompute_core = True`` (set by :func:`minipar.model.recompute.set_recompute`, mode "selective")
    runs the attention core under :func:`minipar.model.recompute.checkpoint`: only q, k, v are kept.
    ``context_parallel``: None, or a function ``(q, k, v) -> y`` that replaces the core — ring attention
    over the cp group, installed once by :meth:`minipar.cp.model.ContextParallel.apply` (called by
    :func:`minipar.job.parallelize.parallelize` for --cp > 1, lesson 11): x then holds this rank's tokens
    only (no attention dropout).
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.dropout, self.explicit, self.recompute_core = cfg.dropout, cfg.attention == "explicit", False
        self.context_parallel = None  # (q, k, v) -> y: ring attention over the cp group (lesson 11)
        # Megatron also drops out the projection's output (sbh mask bytes); kept to the explicit layout
        self.resid_drop = nn.Dropout(cfg.dropout) if self.explicit else nn.Identity()

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """:func:`attention_core` with this layer's dropout (0 in eval mode), or ring attention under --cp."""
        if self.context_parallel is not None:
            return self.context_parallel(q, k, v)
        return attention_core(q, k, v, self.dropout if self.training else 0.0, self.explicit)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)  # (B, T, 3·d); tensor parallel: this rank's heads, T gathered under sequence parallelism
        B, T, _ = qkv.shape
        q, k, v = qkv.split(self.n_head * self.head_dim, dim=2)
        q, k, v = (t.view(B, T, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))  # (B, h, T, hd)
        if self.recompute_core and torch.is_grad_enabled():
            y = checkpoint(self.core, q, k, v)  # selective recomputation (Korthikanti §5)
        else:
            y = self.core(q, k, v)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(B, T, -1)))


class MLP(nn.Module):
    """d -> 4d -> GELU -> d."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model, bias=cfg.bias)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model, bias=cfg.bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


def moe_mlp(cfg: GPTConfig) -> MoE:
    """The MLP's mixture-of-experts replacement: ``moe_experts`` MLPs of the same d -> 4d -> d shape."""
    return MoE(
        cfg.d_model,
        cfg.moe_experts,
        cfg.moe_top_k,
        4 * cfg.d_model,
        cfg.moe_capacity_factor,
        cfg.moe_aux_loss_coef,
        0.02 / math.sqrt(2 * cfg.n_layer),
        cfg.bias,
    )


class Block(nn.Module):
    """Pre-LN transformer block: ``x + attn(ln_1(x))`` then ``x + mlp(ln_2(x))``.

    ``recompute = "full"`` (:func:`minipar.model.recompute.set_recompute`) keeps only the block's input
    for backward and re-runs the block there (Korthikanti et al. 2022, §4.3). A mixture of experts sets
    ``mlp.aux_loss`` as a side effect, which a no-grad forward would leave without a graph: the recomputed
    function returns it as a second output, so its gradient survives.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.mlp = MLP(cfg) if not cfg.moe_experts else moe_mlp(cfg)
        self.recompute = "none"

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute != "full" or not torch.is_grad_enabled():
            return self._forward(x)
        if isinstance(self.mlp, MLP):
            return checkpoint(self._forward, x)
        out, self.mlp.aux_loss = checkpoint(lambda h: (self._forward(h), self.mlp.aux_loss), x)  # experts
        return out


class GPT(nn.Module):
    """A small GPT. ``forward(idx, targets=None) -> (logits, loss)``; ``loss`` is None without targets.

    Args:
        cfg: a :class:`GPTConfig`.
    Shapes:
        idx, targets: (B, T) int64 with T <= cfg.block_size; logits: (B, T, vocab_size) float.
    Raises:
        ConfigError: a sequence longer than ``cfg.block_size``.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2: scale residual projections by 1/sqrt(2L)
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    # The three pieces a pipeline stage is made of.
    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, d_model) hidden."""
        T = idx.shape[1]
        if T > self.cfg.block_size:
            raise ConfigError(
                f"sequence length {T} > block_size={self.cfg.block_size}; "
                f"crop the input or build the model with block_size >= {T}"
            )
        pos = torch.arange(T, device=idx.device)  # --cp: a hook on wpe reads the global ones (minipar.cp.model)
        return self.drop(self.wte(idx) + self.wpe(pos))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d_model) hidden -> (B, T, vocab_size) logits."""
        return self.lm_head(self.ln_f(x))

    @staticmethod
    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over all B·T positions (a scalar)."""
        return F.cross_entropy(
            logits.reshape(-1, logits.size(-1)).to(torch.promote_types(logits.dtype, torch.float32)),
            targets.reshape(-1),
        )  # fp32 at least (bf16 autocast), float64 stays float64

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.head(x)
        if targets is None:
            return logits, None
        aux = [b.mlp.aux_loss for b in self.blocks] if self.cfg.moe_experts else []  # load balancing
        return logits, self.loss(logits, targets) + sum(aux)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Sample ``max_new_tokens`` more ids after ``idx`` (B, T0) -> (B, T0 + max_new_tokens).

        ``generator`` may live on another device than the model (the main job passes a CPU one): the
        probabilities then move to it for the draw, so a seed gives the same text on a CPU and a GPU.
        """
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.cfg.block_size :])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            if generator is not None and generator.device != probs.device:
                probs = probs.float().cpu()  # a CPU generator draws the same sample on a CPU and a GPU run
            nxt = torch.multinomial(probs, 1, generator=generator).to(idx.device)
            idx = torch.cat([idx, nxt], dim=1)
        return idx

    def flops_per_token(self, T: int | None = None) -> float:
        """Training FLOPs per token: 6·N (matmuls, forward + backward) + 12·L·d·T (attention scores).

        N counts the non-embedding parameters (Kaplan et al. 2020, arXiv:2001.08361, Table 1;
        the attention term as in PaLM, Chowdhery et al. 2022, arXiv:2204.02311, App. B); with
        experts, the *active* ones (router + k of E experts per block).
        """
        T = self.cfg.block_size if T is None else T
        n = num_params(self) - self.wpe.weight.numel() - (0 if self.cfg.tie_weights else self.wte.weight.numel())
        n -= sum(num_params(b.mlp) - b.mlp.active_params() for b in self.blocks) if self.cfg.moe_experts else 0
        return 6 * n + 12 * self.cfg.n_layer * self.cfg.d_model * T


class MLPNet(nn.Module):
    """A plain MLP for the early lessons: ``d_in -> [d_hidden -> ReLU] x n_hidden -> d_out``.

    Shapes: (B, d_in) float -> (B, d_out). ``forward(x, targets=None) -> (out, mse_loss or None)``.
    """

    def __init__(self, d_in: int = 32, d_hidden: int = 64, n_hidden: int = 2, d_out: int = 8):
        super().__init__()
        dims = [d_in] + [d_hidden] * n_hidden
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.append(nn.Linear(dims[-1], d_out))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None):
        out = self.net(x)
        return out, (None if targets is None else F.mse_loss(out, targets))


def num_params(model: nn.Module) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen, n = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            n += p.numel()
    return n


def adamw_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups as in GPT-2: decay matrices (dim >= 2), not vectors (biases, LayerNorm),
    nor a parameter marked ``no_weight_decay`` (the experts' stacked biases, (E, f), are biases).

    The one definition every optimizer in the course uses (``minipar.job.config.build``, the 3D job,
    :func:`minipar.zero.zero`), so their updates match exactly.
    """
    ps = list(model.parameters())
    return [
        {"params": [p for p in ps if decays(p)], "weight_decay": weight_decay},
        {"params": [p for p in ps if not decays(p)], "weight_decay": 0.0},
    ]


def decays(p: torch.Tensor) -> bool:
    """:func:`adamw_groups`' rule for one parameter: a matrix (dim >= 2) not marked ``no_weight_decay``."""
    return p.dim() >= 2 and not getattr(p, "no_weight_decay", False)
