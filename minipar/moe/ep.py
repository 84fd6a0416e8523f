"""The main job's expert parallelism: EP groups carved out of the data-parallel ranks.

    piece = build_moe_piece(cfg, mesh, ep=2, lr=3e-3, ...)    # cfg.moe_experts > 0; tp = pp = 1
    loss = piece.step(x, y, lr)                                # x, y: this dp rank's share

Layout (Megatron-LM's expert parallelism; DeepSpeed-MoE's "expert + data parallelism", Rajbhandari
et al. 2022, arXiv:2201.05596): the dp ranks ``[r0, r1, ...]`` are cut into runs of ``ep``
consecutive ranks; each run is an **EP group** that holds all E experts once (E/ep per rank) and
exchanges tokens with all-to-alls. The ranks holding the *same* experts in different runs form an
**expert-data-parallel group** (stride ``ep``, size dp/ep). Every rank still trains on its own
1/dp of the batch. With dp = 4, ep = 2: EP groups [0,1] [2,3], expert-dp groups [0,2] [1,3].

Gradients, for the global loss L = (1/dp) Σ_r L_r (each L_r the mean over rank r's tokens):

- dense parameters (attention, LayerNorms, embeddings, the routers) are replicated on all dp
  ranks: average them over the dp group, as without experts;
- an expert's gradient on rank r already sums ∂L_r'/∂W over the ranks r' of its EP group (the
  backward of the all-to-alls brings every token's gradient home); summing over the expert-dp
  group adds the other EP groups, so Σ over all dp ranks: **sum over expert-dp, divide by dp**.

The load-balancing loss uses f counted over the whole dp batch (an all-reduce of E integers per
layer; Megatron-LM's global-batch balancing): the ranks' aux losses then average to the one-device
aux loss on the whole batch, and the job equals one device (tests/test_experts_train.py).
Logged and evaluated losses are the cross-entropy alone; the aux loss is trained, not logged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar import dist as mdist
from minipar.clip_grads import clip_grad_norm_
from minipar.errors import ConfigError
from minipar.mesh import Mesh
from minipar.models import GPT, GPTConfig, adamw_groups
from minipar.moe.dispatch import check_moe
from minipar.moe.parallel import ExpertParallelMoE


def expert_groups(dp_ranks: list[int], ep: int) -> tuple[list[list[int]], list[list[int]]]:
    """``(EP groups, expert-dp groups)`` of a dp group's global ranks: runs of ``ep``, and stride ``ep``.

    Raises:
        ConfigError: ``ep`` does not divide the dp size.
    """
    if ep < 1 or len(dp_ranks) % ep:
        raise ConfigError(f"--ep {ep} must divide --dp {len(dp_ranks)}: expert parallelism is carved out of dp")
    runs = [dp_ranks[i : i + ep] for i in range(0, len(dp_ranks), ep)]
    return runs, [dp_ranks[j::ep] for j in range(ep)]


def is_expert(name: str) -> bool:
    """True for an expert's parameter (``blocks.i.mlp.experts.*``), sharded over EP."""
    return ".experts." in name


@dataclass
class MoEPiece:
    """This rank's MoE GPT (experts sharded), its groups and AdamW. ``stage`` is the model (the main
    job's name for "what this rank runs")."""

    cfg: GPTConfig
    mesh: Mesh
    stage: nn.Module
    optimizer: torch.optim.Optimizer
    grad_clip: float
    ep: int
    ep_group: object = None
    edp_group: object = None

    owns_loss = True

    @property
    def loss_rank(self) -> int:
        return self.mesh.loss_rank

    def _forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.stage(x)
        aux = sum(b.mlp.aux_loss for b in self.stage.blocks)
        return GPT.loss(logits, y), aux

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One AdamW step on this dp rank's (B/dp, T) share; returns the global batch's mean cross-entropy."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        ce, aux = self._forward(x.to(mdist.device()), y.to(mdist.device()))
        (ce + aux).backward()
        named = [(n, p) for n, p in self.stage.named_parameters() if p.grad is not None]
        dp = self.mesh.dp_size
        if dp > 1:
            with torch.no_grad():
                dense = [p.grad for n, p in named if not is_expert(n)]
                flat = torch.cat([g.reshape(-1) for g in dense])
                dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=self.mesh.dp_group)
                for g, part in zip(dense, flat.split([g.numel() for g in dense])):
                    g.copy_(part.view_as(g))
                for n, p in named:
                    if is_expert(n):
                        if dp > self.ep:
                            dist.all_reduce(p.grad, group=self.edp_group)
                        p.grad.div_(dp)
        if self.grad_clip:  # dense counted on EP rank 0 of each EP group, experts on all: every element dp/ep times
            first = dist.get_rank(self.ep_group) == 0 if self.ep_group is not None else True
            count = [is_expert(n) or first for n, _ in named]
            clip_grad_norm_([p.grad for _, p in named], self.grad_clip, count=count, replicas=dp // self.ep)
        self.optimizer.step()
        loss = ce.detach().clone()
        if dp > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.mesh.dp_group)
        return self._from_loss_rank(loss)

    @torch.no_grad()
    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of (B, T) ``x``, ``y``: every rank runs the same windows, rank ``loss_rank``'s
        value is broadcast (an expert sees a rank's rows in another order on each rank: the last bits differ)."""
        return self._from_loss_rank(self._forward(x.to(mdist.device()), y.to(mdist.device()))[0])

    def _from_loss_rank(self, t: torch.Tensor) -> torch.Tensor:
        if dist.is_initialized() and mdist.world_size() > 1:
            dist.broadcast(t, self.loss_rank)
        return t


def build_moe_piece(
    cfg: GPTConfig, mesh: Mesh, *, ep: int = 1, lr: float, weight_decay: float, grad_clip: float, seed: int, **dense
) -> MoEPiece:
    """This rank's piece: ``torch.manual_seed(seed); GPT(cfg)`` on every rank (one device's weights),
    each block's MoE replaced by an :class:`~minipar.moe.parallel.ExpertParallelMoE` over its EP group
    (its E/ep experts kept), AdamW over what it holds. A collective (creates every EP and expert-dp group).
    ``dense``: the dense job's other settings (schedule, zero, ...), which :func:`check_moe_job` has
    already required to be their defaults.

    Raises:
        ConfigError: no experts in ``cfg``; tp or pp > 1; ep not dividing dp or E.
    """
    if not cfg.moe_experts or mesh.tp_size * mesh.pp_size > 1:
        raise ConfigError(f"--moe-experts {cfg.moe_experts} on tp{mesh.tp_size}·pp{mesh.pp_size}: use --tp 1 --pp 1")
    if cfg.moe_experts % ep:
        raise ConfigError(f"--ep {ep} must divide --moe-experts {cfg.moe_experts}: each EP rank holds E/ep experts")
    torch.manual_seed(seed)
    model = GPT(cfg).to(mdist.device())
    piece_groups = [None, None]
    if dist.is_initialized() and mdist.world_size() > 1:
        runs, strides = expert_groups(mesh.ranks["dp"], ep)
        for i, ranks in enumerate([*runs, *strides]):  # every rank creates every group, in the same order
            g = mdist.new_group(ranks)
            if mesh.rank in ranks:
                piece_groups[0 if i < len(runs) else 1] = g
        for b in model.blocks:
            b.mlp = ExpertParallelMoE(b.mlp, group=piece_groups[0], balance_group=mesh.dp_group)
    elif ep > 1:
        raise ConfigError(f"--ep {ep} needs {ep} ranks or more; run with --dp >= {ep}")
    opt = torch.optim.AdamW(adamw_groups(model, weight_decay), lr=lr, betas=(0.9, 0.95))
    return MoEPiece(cfg, mesh, model, opt, grad_clip, ep, *piece_groups)


@torch.no_grad()
def moe_full_model(piece: MoEPiece, dst: int) -> GPT | None:
    """The whole GPT on rank ``dst`` (experts all-gathered over its EP group), None elsewhere. Collective."""
    if piece.ep_group is None:
        return piece.stage if mdist.rank() == dst else None
    state = {}
    for n, p in piece.stage.state_dict().items():
        if is_expert(n):
            parts = [torch.empty_like(p) for _ in range(piece.ep)]
            dist.all_gather(parts, p.contiguous(), group=piece.ep_group)
            p = torch.cat(parts)
        state[n] = p
    if mdist.rank() != dst:
        return None
    model = GPT(piece.cfg).to(p.device)
    model.load_state_dict(state)
    return model


def check_moe_job(experts: int, top_k: int, ep: int, dp: int | None, cfg) -> None:
    """The main job's MoE rules, one line each (``cfg``: the TrainConfig, for the other settings).

    Raises:
        ConfigError: ``--ep`` without experts; E, k or ep inconsistent (ep must divide E and dp);
            a setting the MoE job does not combine with (tp, pp, cp, ZeRO, compression, micro-batches,
            recomputation, checkpoints).
    """
    if ep > 1 and not experts:
        raise ConfigError(f"--ep {ep} needs experts to shard: add --moe-experts E (a multiple of {ep})")
    check_moe(experts, top_k, None, ep)
    if dp is not None and dp % ep:
        raise ConfigError(f"--ep {ep} must divide --dp {dp}: expert parallelism is carved out of the dp ranks")
    clash = {
        "--tp": cfg.tp > 1,
        "--pp": cfg.pp > 1,
        "--cp": getattr(cfg, "cp", 1) > 1,  # Megatron carves EP out of dp·cp; minipar's EP uses dp only
        "--zero": cfg.zero != 0,
        "--grad-compression": cfg.grad_compression != "none",
        "--microbatches": cfg.microbatches > 1,
        "--recompute": cfg.recompute != "none",
        "--ckpt-every/--resume": bool(cfg.ckpt_every or cfg.resume),
    }
    bad = [k for k, v in clash.items() if v]
    if bad:
        raise ConfigError(f"--moe-experts {experts} runs with data and expert parallelism only: drop {', '.join(bad)}")
