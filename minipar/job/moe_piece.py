"""The main job's expert parallelism: EP groups carved out of the data-parallel ranks.

    piece = build_moe_piece(cfg, mesh, lr=3e-3, ...)          # cfg.moe_experts > 0; tp = pp = 1; mesh.ep_size
    loss = piece.step(x, y, lr)                                # x, y: this dp rank's share

Layout (Megatron-LM's expert parallelism; DeepSpeed-MoE's "expert + data parallelism", Rajbhandari
et al. 2022, arXiv:2201.05596): the dp ranks ``[r0, r1, ...]`` are cut into runs of ``ep``
consecutive ranks; each run is an **EP group** that holds all E experts once (E/ep per rank) and
exchanges tokens with all-to-alls. The ranks holding the *same* experts in different runs form an
**expert-data-parallel group** (stride ``ep``, size dp/ep). Every rank still trains on its own
1/dp of the batch. With dp = 4, ep = 2: EP groups [0,1] [2,3], expert-dp groups [0,2] [1,3]. Both
are the :class:`~minipar.runtime.mesh.Mesh`'s (``mesh.ep_group``, ``mesh.edp_group``; built by
:func:`minipar.runtime.mesh.init_mesh` with ``ep``), the one place where groups are made.

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

With ``microbatches`` = m (gradient accumulation) each rank runs ``x.chunk(m)``; the loader gives
rank r the global rows r, r + dp, r + 2dp, ... so micro-batch j of all ranks together is micro-batch
j of one device (``x.chunk(m)`` of the global batch): the aux loss is per micro-batch, f counted over
the ranks' micro-batch j, and the job equals one device accumulating the same m micro-batches.
With ``--cp`` (lesson 11) each rank runs its 2 chunks of every sequence (:func:`minipar.cp.model.enter_batch`:
ring attention, global positions, the loss weight cp·L_r/T, also on the aux loss); EP groups are cut from
each cp index's dp group (:class:`~minipar.runtime.mesh.Mesh`), the balancing counts summed over dp × cp, dense
gradients averaged over dp × cp, and an expert's summed over expert-dp and cp and divided by dp·cp.
``zero=1``: ZeRO-1 with the dense shards over dp (× cp) and the experts' over expert-dp (× cp)
(:mod:`minipar.ep.zero`).
``recompute``: "selective" re-runs the attention core (the MoE layer untouched); "full" re-runs each
block in backward, its all-to-alls included, with the aux loss returned as a second output of the
recomputed function so its gradient survives (:func:`_full_recompute`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.cp.model import enter_batch, weighted_loss
from minipar.ep.parallel import ExpertParallelMoE, gather_experts, is_expert
from minipar.ep.zero import MoEZero1
from minipar.errors import ConfigError
from minipar.job.parallelize import broadcast_from
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.recompute import checkpoint, set_recompute
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.runtime import dist as mdist
from minipar.runtime.mesh import Mesh


@dataclass
class MoEPiece:
    """This rank's MoE GPT (experts sharded over ``mesh.ep_group``) and AdamW. ``stage`` is the model
    (the main job's name for "what this rank runs"); ``microbatches``: gradient-accumulation steps."""

    cfg: GPTConfig
    mesh: Mesh
    stage: nn.Module
    optimizer: torch.optim.Optimizer
    grad_clip: float
    microbatches: int = 1
    zero: int = 0  # 1: ZeRO-1, dense over dp and experts over expert-dp (minipar.ep.zero.MoEZero1)

    owns_loss = True

    @property
    def ep(self) -> int:
        return self.mesh.ep_size

    @property
    def loss_rank(self) -> int:
        return self.mesh.loss_rank

    def _forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.stage(x)
        aux = sum(b.mlp.aux_loss for b in self.stage.blocks) * getattr(self.stage, "cp_weight", 1.0)
        return weighted_loss(self.stage, logits, y), aux  # --cp: weights cp·L_r/T (minipar.cp.model)

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One AdamW step on this dp rank's (B/dp, T) int64 share ``x``, ``y`` (with cp: this rank's 2 chunks
        of each sequence are cut here), accumulated over ``x.chunk(microbatches)`` (each micro-batch adds
        the gradient of (its mean cross-entropy + its aux loss) / m); returns the global batch's mean
        cross-entropy in nats (0-d, the same on every rank)."""
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        m, dev = self.microbatches, mdist.device()
        loss = torch.zeros((), device=dev)
        x, y = enter_batch(self.stage, x, y, self.mesh)  # --cp: this rank's tokens, ring attention (lesson 11)
        for xm, ym in zip(x.to(dev).chunk(m), y.to(dev).chunk(m)):
            ce, aux = self._forward(xm, ym)
            ((ce + aux) / m).backward()
            loss += ce.detach() / m
        if self.zero:  # reduce-scatter, global clip, sharded AdamW, all-gather: MoEZero1.step
            return self._finish(loss)
        named = [(n, p) for n, p in self.stage.named_parameters() if p.grad is not None]
        mesh, n = self.mesh, self.mesh.dp_size * self.mesh.cp_size  # n: the ranks that share the batch
        if n > 1:
            with torch.no_grad():
                dense = [p.grad for name, p in named if not is_expert(name)]
                flat = torch.cat([g.reshape(-1) for g in dense])
                dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=mesh.dp_cp_group)
                for g, part in zip(dense, flat.split([g.numel() for g in dense])):
                    g.copy_(part.view_as(g))
                for name, p in named:  # the same experts: expert-dp × cp ranks; sum there, / (dp·cp)
                    if is_expert(name):
                        for size, group in ((mesh.edp_size, mesh.edp_group), (mesh.cp_size, mesh.cp_group)):
                            if size > 1:
                                dist.all_reduce(p.grad, group=group)
                        p.grad.div_(n)
        if self.grad_clip:  # dense counted on EP rank 0 of each EP group, experts on all: each element n/ep times
            count = [is_expert(name) or mesh.ep_rank == 0 for name, _ in named]
            clip_grad_norm_([p.grad for _, p in named], self.grad_clip, count=count, replicas=n // self.ep)
        return self._finish(loss)

    def _finish(self, loss: torch.Tensor) -> torch.Tensor:
        self.optimizer.step()
        if self.mesh.dp_size * self.mesh.cp_size > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.mesh.dp_cp_group)
        return broadcast_from(loss, self.loss_rank)

    @torch.no_grad()
    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of (B, T) ``x``, ``y``: every rank runs the same windows, rank ``loss_rank``'s
        value is broadcast (an expert sees a rank's rows in another order on each rank: the last bits differ)."""
        x, y = enter_batch(self.stage, x, y, self.mesh)
        loss = self._forward(x.to(mdist.device()), y.to(mdist.device()))[0]
        if self.mesh.cp_size > 1:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.mesh.cp_group)
        return broadcast_from(loss, self.loss_rank)


def _full_recompute(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``block(x)`` keeping only ``x``: no graph in forward, re-run in backward
    (:func:`minipar.model.recompute.checkpoint`).

    The block's MoE sets ``mlp.aux_loss`` as a side effect, which a no-grad forward would leave without a
    graph; returning it as a second output of the recomputed function keeps its gradient path.
    """
    if not torch.is_grad_enabled():
        return block._forward(x)
    out, aux = checkpoint(lambda h: (block._forward(h), block.mlp.aux_loss), x)
    block.mlp.aux_loss = aux
    return out


def build_moe_piece(
    cfg: GPTConfig,
    mesh: Mesh,
    *,
    microbatches: int = 1,
    recompute: str = "none",
    zero: int = 0,
    lr: float,
    weight_decay: float,
    grad_clip: float,
    seed: int,
    **dense,
) -> MoEPiece:
    """This rank's piece: ``torch.manual_seed(seed); GPT(cfg)`` on every rank (one device's weights),
    each block's MoE replaced by an :class:`~minipar.ep.parallel.ExpertParallelMoE` over ``mesh.ep_group``
    (its E/ep experts kept, load balanced over ``mesh.dp_cp_group``), AdamW over what it holds.
    ``recompute``: none / selective / full (see the module doc); ``zero``: 0, or 1 for
    :class:`~minipar.ep.zero.MoEZero1`. ``dense``: the dense job's other settings (schedule, ...), which
    :func:`minipar.job.config.check_moe_job` has already required to be their defaults.

    Raises:
        ConfigError: no experts in ``cfg``; tp or pp > 1; ep not dividing E; ep > 1 without a process
            group; zero not 0 or 1.
    """
    if zero not in (0, 1):
        raise ConfigError(f"--zero {zero} with --moe-experts: use --zero 1 (or 0); ZeRO-3 is dense-only here")
    ep = mesh.ep_size
    if not cfg.moe_experts or mesh.tp_size * mesh.pp_size > 1:
        raise ConfigError(f"--moe-experts {cfg.moe_experts} on tp{mesh.tp_size}·pp{mesh.pp_size}: use --tp 1 --pp 1")
    if cfg.moe_experts % ep:
        raise ConfigError(f"--ep {ep} must divide --moe-experts {cfg.moe_experts}: each EP rank holds E/ep experts")
    torch.manual_seed(seed)
    model = GPT(cfg).to(mdist.device())
    if ep > 1 and mesh.ep_group is None:
        raise ConfigError(f"--ep {ep} needs {ep} ranks or more (a process group); run with --dp >= {ep}")
    if dist.is_initialized() and mdist.world_size() > 1:
        group = mesh.ep_group if ep > 1 else mesh.groups["tp"]  # ep = 1: a one-rank group (None is the world)
        for b in model.blocks:
            b.mlp = ExpertParallelMoE(b.mlp, group=group, balance_group=mesh.dp_cp_group)
    set_recompute(model, "selective" if recompute == "selective" else "none")
    if recompute == "full":
        for b in model.blocks:
            b.forward = functools.partial(_full_recompute, b)
    if zero == 1:
        opt = MoEZero1(model, mesh, lr=lr, weight_decay=weight_decay, max_norm=grad_clip or None)
    else:
        opt = torch.optim.AdamW(adamw_groups(model, weight_decay), lr=lr, betas=(0.9, 0.95))
    return MoEPiece(cfg, mesh, model, opt, grad_clip, microbatches, zero)


@torch.no_grad()
def moe_full_model(piece: MoEPiece, dst: int) -> GPT | None:
    """The whole GPT on rank ``dst`` (experts all-gathered over its EP group), None elsewhere. Collective."""
    if mdist.world_size() == 1:
        return piece.stage if mdist.rank() == dst else None  # (with --cp the stage runs ring attention: not this)
    state = gather_experts(piece.mesh, piece.stage.state_dict())
    if mdist.rank() != dst:
        return None
    model = GPT(piece.cfg).to(mdist.device())
    model.load_state_dict(state)
    return model
