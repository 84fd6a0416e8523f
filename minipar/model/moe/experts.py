"""E feed-forward experts, each the course's MLP (d -> d_ff -> GELU -> d), held as stacked weights.

Stacked (E, d, d_ff) tensors, as Megatron-LM's ``GroupedMLP`` and torchtitan's ``GroupedExperts``
keep them, so a rank's share under expert parallelism is a slice of the first dimension
(:meth:`Experts.shard`). ``forward`` runs expert e on its contiguous block of rows (a loop of
E small matmuls; on a GPU one grouped GEMM).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Experts(nn.Module):
    """``n`` experts: ``w_fc`` (n, d, d_ff), ``b_fc`` (n, d_ff), ``w_proj`` (n, d_ff, d), ``b_proj`` (n, d).

    Args:
        n_experts, d_model, d_ff: sizes. proj_std: init std of ``w_proj`` (GPT-2 scales it by
            1/sqrt(2·n_layer)); ``w_fc`` gets 0.02, biases 0, as the dense MLP. init: False leaves
            the weights unset (and the random stream untouched).
    """

    def __init__(
        self, n_experts: int, d_model: int, d_ff: int, proj_std: float = 0.02, bias: bool = True, init: bool = True
    ):
        super().__init__()
        # device-ok (this and the 3 below): built on CPU like every nn module here; the model moves with .to(dev)
        self.w_fc = nn.Parameter(torch.empty(n_experts, d_model, d_ff))  # device-ok
        self.w_proj = nn.Parameter(torch.empty(n_experts, d_ff, d_model))  # device-ok
        if init:  # init=False: no draw from the random stream (a shard is filled by copying)
            nn.init.normal_(self.w_fc, 0.0, 0.02)
            nn.init.normal_(self.w_proj, 0.0, proj_std)
        self.b_fc = nn.Parameter(torch.zeros(n_experts, d_ff)) if bias else None  # device-ok
        self.b_proj = nn.Parameter(torch.zeros(n_experts, d_model)) if bias else None  # device-ok
        for b in (self.b_fc, self.b_proj):
            if b is not None:
                b.no_weight_decay = True  # stacked biases are 2-D: minipar.model.gpt.adamw_groups skips them

    @property
    def n_experts(self) -> int:
        return self.w_fc.shape[0]

    def forward(self, x: torch.Tensor, tokens_per_expert: list[int]) -> torch.Tensor:
        """(M, d) rows grouped by expert, ``tokens_per_expert[e]`` rows for expert e -> (M, d)."""
        outs = []
        for e, rows in enumerate(x.split(list(tokens_per_expert))):
            h = rows @ self.w_fc[e] + (self.b_fc[e] if self.b_fc is not None else 0)
            outs.append(F.gelu(h) @ self.w_proj[e] + (self.b_proj[e] if self.b_proj is not None else 0))
        return torch.cat(outs) if outs else x[:0]

    @torch.no_grad()
    def shard(self, rank: int, n: int) -> "Experts":
        """A copy holding experts ``[rank·E/n, (rank+1)·E/n)`` (E divisible by n), same values."""
        per = self.n_experts // n
        part = Experts(per, self.w_fc.shape[1], self.w_fc.shape[2], bias=self.b_fc is not None, init=False)
        for name, p in part.named_parameters():
            p.copy_(getattr(self, name)[rank * per : (rank + 1) * per])
        return part.to(self.w_fc.dtype)
