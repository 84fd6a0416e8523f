"""This rank's piece of the main job and its one training step, for every layout: :class:`Piece`.

    piece = parallelize(model, mesh, cfg)       # minipar.job.parallelize: dense or experts, cp or not
    loss = piece.step(x, y, lr)                 # x, y: this dp rank's share (B/dp, T); the global mean loss

One step, top to bottom, the same code for a dense GPT on any (pp, dp, cp, tp) layout and for a mixture
of experts over (dp, ep, cp): [with --cp, this rank's tokens of every sequence] → the pipeline schedule
runs forward and backward of every micro-batch (:class:`~minipar.pp.executor.PipelineExecutor`; with
pp = 1, gradient accumulation) → gradients averaged over the dp × cp ranks that hold this piece
(:func:`average_grads_`; ZeRO-1 reduce-scatters inside its step, ZeRO-3 during backward) → clipped by
the whole model's norm (:func:`clip_global_`) → AdamW → the loss averaged and broadcast from the loss rank.

The loss of a micro-batch (:meth:`Piece.loss`) is the mean cross-entropy over this rank's tokens times
the context-parallel weight (:class:`~minipar.cp.model.ContextParallel`, 1 without --cp); with experts,
plus every block's load-balancing loss (same weight), added with value 0 (``aux - aux.detach()``) so it
is trained but the logged loss is the cross-entropy alone.

**Experts** (lesson 12; Megatron-LM's expert parallelism, DeepSpeed-MoE's "expert + data parallelism",
Rajbhandari et al. 2022, arXiv:2201.05596). The dp ranks are cut into runs of ``ep`` consecutive ranks;
each run is an **EP group** holding all E experts once (E/ep per rank, tokens exchanged by all-to-all);
the ranks holding the *same* experts form an **expert-data-parallel group** (stride ``ep``, size dp/ep):
with dp = 4, ep = 2, EP groups [0,1] [2,3], expert-dp groups [0,2] [1,3] (the
:class:`~minipar.runtime.mesh.Mesh`'s ``ep_group``, ``edp_group``). For the global loss
L = (1/dp) Σ_r L_r: dense parameters (attention, LayerNorms, embeddings, routers) are replicated on every
dp rank, so their gradients are averaged over dp, as without experts; an expert's gradient on rank r
already sums ∂L_r'/∂W over its EP group's ranks r' (the all-to-alls' backward brings every token's
gradient home), so summing over expert-dp adds the other EP groups: **sum over expert-dp, divide by dp**
(with cp: over expert-dp and cp, divided by dp·cp). The load-balancing loss counts f over the whole
dp × cp batch (an all-reduce of E integers per layer, Megatron-LM's global-batch balancing), so the
ranks' aux losses average to the one-device aux loss; with micro-batches, micro-batch j of all ranks
together is micro-batch j of one device (the loader gives rank r the rows r, r + dp, ...), and the job
equals one device (tests/test_experts_train.py). ZeRO-1 shards the dense moments over dp (× cp) and
the experts' over expert-dp (× cp) (:mod:`minipar.ep.zero`); full recomputation re-runs each block,
its all-to-alls included (``Block.forward`` keeps the aux loss's gradient).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.checkpoint.full_state import gather_stages
from minipar.comm import p2p
from minipar.cp.model import ContextParallel
from minipar.ep.parallel import gather_experts, is_expert
from minipar.model.gpt import GPT, GPTConfig
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.pp.executor import PipelineExecutor
from minipar.pp.stages import GPTStage
from minipar.runtime import dist as mdist
from minipar.runtime.mesh import Mesh
from minipar.tp.partition import gather_state_dict, param_is_not_tensor_parallel_duplicate
from minipar.zero.fully_shard import clip_grad_norm_ as clip_sharded_
from minipar.zero.fully_shard import full_state_dict


@dataclass
class Piece:
    """This rank's part of the job: its mesh (and groups), stage (with pp = 1, the whole model), optimizer
    and executor (set by :func:`~minipar.job.parallelize.parallelize`, whose loss function is :meth:`loss`)."""

    cfg: GPTConfig
    mesh: Mesh
    stage: GPTStage
    optimizer: object
    zero: int
    grad_clip: float
    compressor: object = None  # a minipar.dp.compression compressor for the dp all-reduce (None: plain)
    cp: ContextParallel | None = None  # --cp: the split of every sequence over mesh.cp_group
    executor: PipelineExecutor | None = None
    last: object = None  # the executor's StepResult of the last step (trace, activation bytes)

    @property
    def owns_loss(self) -> bool:
        """True on the pipeline's last stage (these ranks compute the loss)."""
        return self.stage.is_last

    @property
    def loss_rank(self) -> int:
        """The one global rank that logs: last pipeline stage, dp rank 0, tp rank 0."""
        return self.mesh.loss_rank

    @functools.cached_property
    def tp_device_mesh(self):
        """A 1-D ``DeviceMesh`` over the tp group, for DTensor checkpoints (None when tp = 1); built
        from the existing group on first use (every tp rank uses it at the same point: a checkpoint)."""
        if self.mesh.tp_size == 1:
            return None
        from torch.distributed.device_mesh import DeviceMesh

        return DeviceMesh.from_group(self.mesh.tp_group, mdist.device().type)

    def cross_entropy(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The stage's mean cross-entropy over this rank's tokens, times the --cp weight ``cp · L_r / T``."""
        return self.stage.loss(logits, y) * (self.cp.loss_weight if self.cp is not None else 1.0)

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """What a micro-batch trains on: :meth:`cross_entropy`, plus with experts the blocks' load-balancing
        loss (same weight), whose value is added as 0 so that the logged loss stays the cross-entropy."""
        ce = self.cross_entropy(logits, y)
        if not self.cfg.moe_experts:
            return ce
        aux = sum(b.mlp.aux_loss for b in self.stage.blocks.values()) * (self.cp.loss_weight if self.cp else 1.0)
        return ce + (aux - aux.detach())

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One optimizer step on this dp rank's share ``x``, ``y`` (B/dp, T) int64.

        Returns the mean loss over the *global* batch (a 0-d tensor) on every rank (broadcast
        from the loss rank; one 4-byte broadcast per step).
        """
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        if self.cp is not None:  # --cp: this rank's tokens of every sequence (lesson 11)
            x, y = self.cp.shard(x, y)
        res = self.last = self.executor.step(x, y)  # forward + backward of all micro-batches
        loss = torch.tensor(res.loss if res.loss is not None else 0.0, device=mdist.device())
        group, n = self.mesh.dp_cp_group, self.mesh.dp_size * self.mesh.cp_size  # dp × cp hold this piece
        if not self.zero:  # ZeRO-1 reduce-scatters inside its step, ZeRO-3 in backward
            average_grads_(self.stage, self.mesh, self.compressor)
        if self.grad_clip and self.zero == 0:  # the whole model's norm (ZeRO-1 clips inside its step)
            clip_global_(self.stage, self.grad_clip, self.mesh)
        elif self.grad_clip and self.zero == 3:
            clip_sharded_(self.stage, self.grad_clip, group=self.mesh.dp_group)
        self.optimizer.step()
        if n > 1 and self.owns_loss:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=group)
        return broadcast_from(loss, self.loss_rank)

    @torch.no_grad()
    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward only through the pipeline (blocking send/recv): mean cross-entropy of (B, T) ``x``, ``y``
        on every rank (the loss rank's value: with experts, a rank's rows reach an expert in another order)."""
        dev, pp, me = mdist.device(), self.mesh.pp_size, self.mesh.pp_rank
        if self.cp is not None:
            x, y = self.cp.shard(x, y)
        h = x.to(dev)
        if me > 0:
            h = torch.empty(x.shape[0], x.shape[1], self.cfg.d_model, device=dev)
            p2p.recv(h, self.mesh.ranks["pp"][me - 1], group=self.mesh.pp_group, label=f"eval {me}")
        out = self.stage(h)
        if me < pp - 1:
            p2p.send(out.contiguous(), self.mesh.ranks["pp"][me + 1], group=self.mesh.pp_group, label=f"eval {me + 1}")
            loss = torch.zeros((), device=dev)
        else:
            loss = self.cross_entropy(out, y.to(dev))
            if self.mesh.cp_size > 1:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.mesh.cp_group)
        return broadcast_from(loss, self.loss_rank)


@torch.no_grad()
def average_grads_(module: nn.Module, mesh: Mesh, compressor=None) -> None:
    """Average every ``p.grad`` of ``module`` over the dp × cp ranks that hold it (``mesh.dp_cp_group``).

    Dense parameters: ONE all-reduce of a flat buffer (a single bucket, lesson 02: one latency instead of
    one per tensor; the same bytes, 2(n−1)/n · 4Φ per rank), or a :mod:`minipar.dp.compression`
    ``compressor``'s all-reduce (lesson 09). An expert's gradient on rank r already sums its EP group's
    tokens (the all-to-alls' backward): summed over expert-dp and cp, divided by dp·cp (lesson 12).
    A missing gradient counts as zeros.
    """
    named = list(module.named_parameters())
    for _, p in named:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    n = mesh.dp_size * mesh.cp_size
    if n == 1:
        return
    dense = [p.grad for name, p in named if not is_expert(name)]
    if compressor is not None:
        compressor.all_reduce_(dense, mesh.dp_cp_group)
    else:
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


@torch.no_grad()
def clip_global_(stage: nn.Module, max_norm: float, mesh: Mesh) -> torch.Tensor:
    """Scale every gradient by ``min(1, max_norm / (‖g‖ + 1e-6))`` with ‖g‖ the whole model's norm.

    Called after :func:`average_grads_`, so the dp × cp replicas hold equal gradients: each element is
    counted on one tp rank (a TP-replicated tensor on tp rank 0 only) and, unless it is an expert's, on
    EP rank 0 only; the world sum is then divided by the dp·cp/ep replicas. Returns the norm.
    """
    named = [(n, p) for n, p in stage.named_parameters() if p.grad is not None]
    count = [
        param_is_not_tensor_parallel_duplicate(p, mesh.tp_rank) and (is_expert(n) or mesh.ep_rank == 0)
        for n, p in named
    ]
    replicas = mesh.dp_size * mesh.cp_size // mesh.ep_size
    return clip_grad_norm_([p.grad for _, p in named], max_norm, count=count, replicas=replicas)


def broadcast_from(t: torch.Tensor, src: int) -> torch.Tensor:
    """``t`` broadcast from global rank ``src`` (in place; nothing to do on one process). Returns ``t``."""
    if mdist.world_size() > 1:
        dist.broadcast(t, src)
    return t


@torch.no_grad()
def gather_full_state(piece: Piece, dst: int) -> dict[str, torch.Tensor] | None:
    """The single-device ``GPT`` state dict, assembled on global rank ``dst`` (None elsewhere). Collective.

    TP slices are all-gathered inside each tp group (:func:`~minipar.tp.partition.gather_state_dict`; with
    ZeRO-3 the per-parameter shards over dp), experts over each EP group (:func:`~minipar.ep.parallel.gather_experts`),
    then every stage's tensors are gathered to ``dst`` (:func:`~minipar.checkpoint.full_state.gather_stages`).
    """
    if piece.zero == 3:  # per-parameter shards: all-gathered over dp (tp = pp = 1)
        sd = full_state_dict(piece.stage)
    else:
        sd = gather_state_dict(piece.stage, piece.mesh.tp_group)
    sd = {k: v.cpu() for k, v in gather_experts(piece.mesh, sd).items()}
    return gather_stages(sd, piece.mesh, dst)  # every stage's dict to rank dst


def full_model(piece: Piece, dst: int) -> GPT | None:
    """A single-device ``GPT`` with the trained weights on rank ``dst`` (None elsewhere). Collective."""
    sd = gather_full_state(piece, dst)
    if sd is None:
        return None
    with torch.random.fork_rng():
        model = GPT(piece.cfg)
    model.load_state_dict(sd)
    return model.to(mdist.device())
