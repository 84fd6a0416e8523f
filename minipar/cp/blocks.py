"""Attention one block at a time: a block's output with its log-sum-exp, and the exact merge of two blocks.

Softmax over keys split into blocks A and B (Milakov & Gimelshein 2018, arXiv:1805.02867, the
"online softmax"; FlashAttention, Dao et al. 2022, arXiv:2205.14135, §3.1). For one query row
with scores s, write ``lse_X = log Σ_{j∈X} exp(s_j)`` and ``o_X = Σ_{j∈X} softmax_X(s)_j · v_j``.
Then, exactly,

    lse = log(exp(lse_A) + exp(lse_B))                  (torch.logaddexp: no overflow)
    o   = exp(lse_A − lse) · o_A + exp(lse_B − lse) · o_B

so attention over a sequence whose keys live on N ranks is N block attentions merged in any
order: what ring attention (Liu et al. 2023, arXiv:2310.01889) computes while the key/value
blocks travel. The backward of a block needs only the final ``lse`` and the final output
(FlashAttention-2, Dao 2023, arXiv:2307.08691, Algorithm 2): ``P = exp(S − lse)``,
``dV = Pᵀ·dO``, ``dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O))``, ``dQ = dS·K·scale``, ``dK = dSᵀ·Q·scale``
(:func:`block_grads`).

Which part of a block a causal mask keeps is decided from the global positions of its queries
and keys (:func:`block_kind`): all of it (keys before queries), none (keys after), or the lower
triangle of positions (the diagonal block).

Shapes: q (B, h, Lq, d), k and v (B, h, Lk, d), out (B, h, Lq, d), lse (B, h, Lq).
"""

from __future__ import annotations

import math

import torch

FULL, CAUSAL, SKIP = "full", "causal", "skip"


def block_kind(q_range: tuple[int, int], k_range: tuple[int, int]) -> str:
    """``"full"`` if every key position <= every query position, ``"skip"`` if every key comes after
    every query, else ``"causal"`` (mask key position > query position)."""
    (qs, qe), (ks, ke) = q_range, k_range
    if ke - 1 <= qs:
        return FULL
    if ks > qe - 1:
        return SKIP
    return CAUSAL


def _mask(q_range, k_range, device) -> torch.Tensor:
    """(Lq, Lk) bool: True where the key comes after the query (masked)."""
    qp = torch.arange(*q_range, device=device)
    kp = torch.arange(*k_range, device=device)
    return kp[None, :] > qp[:, None]


def scores(q, k, q_range, k_range, scale: float | None = None) -> torch.Tensor:
    """QKᵀ·scale (default 1/√d) with the causal mask of the positions applied (−inf): (B, h, Lq, Lk)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q @ k.transpose(-2, -1)) * scale
    if block_kind(q_range, k_range) == CAUSAL:
        s = s.masked_fill(_mask(q_range, k_range, q.device), float("-inf"))
    return s


def block_attention(q, k, v, q_range, k_range, scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of queries at positions ``q_range`` to keys at ``k_range``: (out, lse).

    The block must keep at least one key per query (not ``"skip"``; a diagonal block always does).
    On CPU, outside autograd, a full block or a diagonal one (``q_range == k_range``) goes to
    PyTorch's fused CPU attention kernel (``aten._scaled_dot_product_flash_attention_for_cpu``, the
    kernel ``F.scaled_dot_product_attention`` uses), which returns the same (out, lse) without
    holding the (Lq, Lk) scores in memory; any other block, or one that needs autograd, is computed
    as written below (scores, log-sum-exp, softmax times V).
    Raises ValueError on a ``"skip"`` block.
    """
    kind = block_kind(q_range, k_range)
    if kind == SKIP:
        raise ValueError(f"block q{q_range} k{k_range} is fully masked: skip it instead of attending")
    fused = q.device.type == "cpu" and (kind == FULL or q_range == k_range)
    if fused and not (torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, kind == CAUSAL, scale=scale)
        return out, lse
    s = scores(q, k, q_range, k_range, scale)
    lse = torch.logsumexp(s, dim=-1)
    return torch.exp(s - lse.unsqueeze(-1)) @ v, lse


def merge(out_a, lse_a, out_b, lse_b) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact softmax merge of two blocks' (out, lse) over disjoint keys (see module doc).

    ``out_a is None`` means "no block yet" and returns (out_b, lse_b).
    """
    if out_a is None:
        return out_b, lse_b
    lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b
    return out, lse


def block_grads(q, k, v, out, lse, d_out, q_range, k_range, scale: float | None = None):
    """One block's share of the gradients, from the *final* out and lse: (dq, dk, dv).

    FlashAttention-2's backward (Dao 2023, arXiv:2307.08691, Algorithm 2); summing dq over every
    key block, and dk, dv over every query block, gives full attention's gradients.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    p = torch.exp(scores(q, k, q_range, k_range, scale) - lse.unsqueeze(-1))
    dv = p.transpose(-2, -1) @ d_out
    dp = d_out @ v.transpose(-2, -1)
    ds = p * (dp - (d_out * out).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(-2, -1) @ q) * scale, dv
