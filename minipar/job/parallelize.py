"""3D parallelism: this rank's piece of the GPT on a (pp, dp, tp) mesh, and one training step.

    mesh = init_mesh(pp=2, dp=2, tp=2)                      # minipar.runtime.mesh, Megatron's rank order
    piece = build_piece(cfg, mesh, schedule="1f1b", microbatches=4, zero=1, lr=3e-3, ...)
    loss = piece.step(x, y, lr)     # x, y: this dp rank's share (B/dp, T); loss on the last stage

How the three dimensions compose (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", arXiv:2104.04473, §2-3; PTD-P):

1. **TP** (lesson 04) — every rank builds the *whole* GPT from the seed, then keeps its tensor-parallel
   slice (:class:`~minipar.tp.gpt.TensorParallelGPT` over the ``tp`` group), so every layout
   starts from the single device's weights.
2. **PP** (lessons 05-06) — of that TP model it keeps only the layers of its pipeline stage
   (:class:`~minipar.pp.stages.GPTStage`, the pipeline lessons' own stage: [embed] → blocks[lo:hi] →
   [ln_f, lm_head]; parameter names stay the full GPT's, e.g. ``blocks.3.mlp.fc.weight``, which is
   what checkpoints are keyed by); the rest of the model is dropped, not edited. The
   :class:`~minipar.pp.executor.PipelineExecutor` runs the schedule over the ``pp`` group; each
   forward/backward inside it runs the TP collectives of the ``tp`` group.
3. **DP** (lessons 01-03) — after the schedule, gradients are averaged over the ``dp`` group: a
   plain all-reduce, or ZeRO-1 (:class:`~minipar.zero.stage12.ZeroOptimizer` over the ``dp`` group: the
   AdamW moments sharded, reduce-scatter + all-gather), or — with tp = pp = 1 — ZeRO-3 per parameter
   (:func:`~minipar.zero.fully_shard.fully_shard` on every block and the stage: gradients reduce-scattered
   during backward, any ``param_dtype`` of a ``MixedPrecisionPolicy`` with fp32 reduction).

Gradient clipping needs the norm of the *whole* model's gradient: the sum of squares over the
TP shards and the PP stages, counting a TP-replicated tensor (LayerNorm, row-parallel bias,
position embedding) once, not ``tp`` times (:func:`minipar.optim.clip_grads.clip_grad_norm_` with
:func:`~minipar.tp.partition.param_is_not_tensor_parallel_duplicate`, as Megatron-LM's
``clip_grad_norm_fp32``): :func:`clip_global_` without ZeRO, :class:`Zero1Over3D` with it.

The groups are the mesh's (``mesh.tp_group`` ...): a size-1 dimension has a group of one rank,
because minipar's TP layers and the executor read ``group=None`` as "the whole world".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm import p2p
from minipar.cp.model import enter_batch, weighted_loss
from minipar.dp.compression import make_compressor
from minipar.errors import ConfigError
from minipar.job.config import SCHEDULES_3D, check_grad_compression, check_model_fits
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.recompute import MODES as RECOMPUTE_MODES
from minipar.model.recompute import set_recompute
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import make_schedule
from minipar.pp.stages import GPTStage, partition_layers
from minipar.runtime import dist as mdist
from minipar.runtime.mesh import Mesh
from minipar.tp.gpt import TensorParallelGPT
from minipar.tp.partition import gather_state_dict, param_is_not_tensor_parallel_duplicate
from minipar.zero.flat import default_units
from minipar.zero.fully_shard import MixedPrecisionPolicy, full_state_dict, fully_shard
from minipar.zero.fully_shard import clip_grad_norm_ as clip_sharded_
from minipar.zero.stage12 import ZeroOptimizer


class Zero1Over3D(ZeroOptimizer):
    """ZeRO-1 over the ``dp`` group whose gradient clipping uses the *global* 3D norm.

    Each rank's gradient shards partition its (pp, tp) piece over dp, so summing squares over the
    world counts every element once — except TP-replicated tensors, which only tp rank 0 counts
    (a 0/1 mask per unit shard, from the parameters' own TP marks).
    """

    def __init__(self, stage: GPTStage, tp_rank: int, **kw):
        super().__init__(stage, stage=1, units=default_units(stage), **kw)
        self._count = []  # per unit: (S,) 1.0 where this rank counts the element
        for u, ps in zip(self.units, self.params):
            w = torch.zeros(u.shard_size)  # device-ok: CPU mask, moved with .to(g.device) when clipping
            for i, a, b in u.segments():
                w[a:b] = float(param_is_not_tensor_parallel_duplicate(ps[i], tp_rank))
            self._count.append(w)

    def clip_(self, grads: list[torch.Tensor]) -> torch.Tensor:
        return clip_grad_norm_(grads, self.max_norm, count=self._count)


@dataclass
class Piece:
    """This rank's part of a 3D job: its mesh (and groups), stage, executor and optimizer."""

    cfg: GPTConfig
    mesh: Mesh
    stage: GPTStage
    executor: PipelineExecutor
    optimizer: object
    zero: int
    grad_clip: float
    last: object = None  # the executor's StepResult of the last step (trace, activation bytes)
    compressor: object = None  # a minipar.dp.compression compressor for the dp all-reduce (None: plain)

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

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One optimizer step on this dp rank's share ``x``, ``y`` (B/dp, T) int64.

        Returns the mean loss over the *global* batch (a 0-d tensor) on every rank (broadcast
        from the loss rank; one 4-byte broadcast per step).
        """
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        x, y = enter_batch(self.stage, x, y, self.mesh)  # --cp: this rank's tokens, ring attention (lesson 11)
        res = self.last = self.executor.step(x, y)  # forward + backward of all micro-batches
        loss = torch.tensor(res.loss if res.loss is not None else 0.0, device=mdist.device())
        group, n = self.mesh.dp_cp_group, self.mesh.dp_size * self.mesh.cp_size  # dp × cp hold this piece
        if not self.zero:  # average over dp (ZeRO-1 reduce-scatters inside its step, ZeRO-3 in backward)
            if self.compressor is None:
                all_reduce_grads_flat(self.stage, group, n)
            else:  # lesson 09: bf16 / PowerSGD all-reduce
                compressed_all_reduce_grads(self.stage, self.compressor, group, n)
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
        """Forward only through the pipeline (blocking send/recv): mean loss of (B, T) ``x``, ``y`` on every rank."""
        dev, pp, me = mdist.device(), self.mesh.pp_size, self.mesh.pp_rank
        x, y = enter_batch(self.stage, x, y, self.mesh)
        h = x.to(dev)
        if me > 0:
            h = torch.empty(x.shape[0], x.shape[1], self.cfg.d_model, device=dev)
            p2p.recv(h, self.mesh.ranks["pp"][me - 1], group=self.mesh.pp_group, label=f"eval {me}")
        out = self.stage(h)
        if me < pp - 1:
            p2p.send(out.contiguous(), self.mesh.ranks["pp"][me + 1], group=self.mesh.pp_group, label=f"eval {me + 1}")
            loss = torch.zeros((), device=dev)
        else:
            loss = weighted_loss(self.stage, out, y.to(dev))
            if self.mesh.cp_size > 1:
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.mesh.cp_group)
        return broadcast_from(loss, self.loss_rank)


@torch.no_grad()
def all_reduce_grads_flat(module: nn.Module, group, size: int) -> None:
    """Average every ``p.grad`` over ``group`` with ONE all-reduce of a flat buffer (a single bucket,
    lesson 02): one latency instead of one per tensor; the same bytes, 2(n−1)/n · 4Φ per rank."""
    params = list(module.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if size == 1:
        return
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=group)
    for p, g in zip(params, flat.split([p.numel() for p in params])):
        p.grad.copy_(g.view_as(p.grad))


@torch.no_grad()
def compressed_all_reduce_grads(module: nn.Module, compressor, group, size: int) -> None:
    """Average every ``p.grad`` over ``group`` through a :mod:`minipar.dp.compression` compressor (lesson 09)."""
    params = list(module.parameters())
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    if size > 1:
        compressor.all_reduce_([p.grad for p in params], group)


def broadcast_from(t: torch.Tensor, src: int) -> torch.Tensor:
    if mdist.world_size() > 1:
        dist.broadcast(t, src)
    return t


@torch.no_grad()
def clip_global_(stage: GPTStage, max_norm: float, mesh: Mesh) -> torch.Tensor:
    """Scale every gradient by ``min(1, max_norm / (‖g‖ + 1e-6))`` with ‖g‖ the whole 3D model's norm.

    Called after the dp all-reduce, so the dp replicas hold equal gradients: the world sum is
    divided by dp. A TP-replicated tensor counts on tp rank 0 only. Returns the norm.
    """
    params = [p for p in stage.parameters() if p.grad is not None]
    count = [param_is_not_tensor_parallel_duplicate(p, mesh.tp_rank) for p in params]
    return clip_grad_norm_([p.grad for p in params], max_norm, count=count, replicas=mesh.dp_size * mesh.cp_size)


def build_piece(
    cfg: GPTConfig,
    mesh: Mesh,
    *,
    schedule: str = "1f1b",
    microbatches: int = 1,
    zero: int = 0,
    param_dtype: torch.dtype | None = None,
    grad_compression: str = "none",
    lr: float = 3e-3,
    weight_decay: float = 0.1,
    betas=(0.9, 0.95),
    grad_clip: float = 1.0,
    seed: int = 0,
    count_memory: bool = False,
    recompute: str = "none",
) -> Piece:
    """Build this rank's piece of the 3D job on ``mesh`` (from :func:`minipar.runtime.mesh.init_mesh`).

    The model is ``torch.manual_seed(seed); GPT(cfg)`` sliced for (tp rank, pp stage), so every
    layout starts from the same weights as one device.

    Raises:
        ConfigError: tp not dividing d_model/n_head; more stages than layers; an unknown schedule;
        ``zero`` not 0, 1 or 3 (3 only with tp = pp = 1); ``recompute`` not none/selective/full.
        ``param_dtype``: ZeRO-3's gather/compute dtype (``MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32)``).

    ``recompute`` ("none" | "selective" | "full", lesson 08) is set on every block of this stage
    (:func:`minipar.model.recompute.set_recompute`): the same numbers, fewer saved activations.
    """
    if recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"--recompute {recompute}: use one of {', '.join(RECOMPUTE_MODES)}")
    if schedule not in SCHEDULES_3D:
        raise ConfigError(f"--schedule {schedule}: the 3D job runs one stage per rank; use one of {list(SCHEDULES_3D)}")
    if zero not in (0, 1, 3) or (zero == 3 and mesh.tp_size * mesh.pp_size > 1):
        raise ConfigError(
            f"--zero {zero} on tp{mesh.tp_size}·pp{mesh.pp_size}: use 0 (all-reduce), 1 (ZeRO-1 over the dp "
            "group), or 3 (ZeRO-3 per parameter, with --tp 1 --pp 1)"
        )
    check_grad_compression(grad_compression, zero)
    if mesh.cp_size > 1 and (cfg.dropout or zero == 3):
        raise ConfigError(
            f"--cp {mesh.cp_size} with --dropout {cfg.dropout} --zero {zero}: ring attention has no dropout and "
            "ZeRO-3 shards over dp only; use --dropout 0 and --zero 0 or 1"
        )
    check_model_fits(cfg, mesh.pp, mesh.tp, mesh.cp)  # pp <= n_layer; tp divides d_model, n_head, 4·d_model
    pp = mesh.pp_size
    torch.manual_seed(seed)
    lo, hi = partition_layers(cfg.n_layer, pp)[mesh.pp_rank]
    # the whole TP model, of which the stage keeps its layers; the rest is freed on return
    stage = GPTStage(TensorParallelGPT(cfg, group=mesh.tp_group), mesh.pp_rank, pp, lo, hi).to(mdist.device())
    set_recompute(stage, recompute)
    executor = PipelineExecutor(
        {mesh.pp_rank: stage},
        make_schedule(schedule, pp, microbatches),
        loss_fn=functools.partial(weighted_loss, stage),
        group=mesh.pp_group,
        pipe_ranks=mesh.ranks.get("pp", [mesh.rank]),
        hidden_size=cfg.d_model,
        count_memory=count_memory,
    )
    if zero == 3:
        policy = MixedPrecisionPolicy(param_dtype, torch.float32 if param_dtype else None)
        for block in [*stage.blocks.values(), stage]:  # each block, then the stage takes the rest
            fully_shard(block, group=mesh.dp_group, mp_policy=policy)
        opt = torch.optim.AdamW(adamw_groups(stage, weight_decay), lr=lr, betas=betas)
    elif zero:
        opt = Zero1Over3D(
            stage,
            mesh.tp_rank,
            lr=lr,
            betas=betas,
            weight_decay=weight_decay,
            max_norm=grad_clip or None,
            group=mesh.dp_cp_group,
        )
    else:
        opt = torch.optim.AdamW(adamw_groups(stage, weight_decay), lr=lr, betas=betas)
    comp = make_compressor(grad_compression) if grad_compression != "none" else None
    return Piece(cfg, mesh, stage, executor, opt, zero, grad_clip, compressor=comp)


@torch.no_grad()
def gather_full_state(piece: Piece, dst: int) -> dict[str, torch.Tensor] | None:
    """The single-device ``GPT`` state dict, assembled on global rank ``dst`` (None elsewhere). Collective.

    TP slices are all-gathered inside each tp group (:func:`~minipar.tp.partition.gather_state_dict`),
    then every stage's tensors are gathered to ``dst`` as Python objects (fine for course-sized models).
    """
    if piece.zero == 3:  # per-parameter shards: all-gathered over dp (tp = pp = 1)
        sd = {k: v.cpu() for k, v in full_state_dict(piece.stage).items()}
    else:
        sd = {k: v.cpu() for k, v in gather_state_dict(piece.stage, piece.mesh.tp_group).items()}
    if mdist.world_size() == 1:
        return sd
    box = [None] * mdist.world_size() if mdist.rank() == dst else None
    first = piece.mesh.dp_rank == 0 and piece.mesh.cp_rank == 0 and piece.mesh.tp_rank == 0
    dist.gather_object(sd if first else {}, box, dst=dst)
    if mdist.rank() != dst:
        return None
    return {k: v for part in box for k, v in part.items()}


def full_model(piece: Piece, dst: int) -> GPT | None:
    """A single-device ``GPT`` with the trained weights on rank ``dst`` (None elsewhere). Collective."""
    sd = gather_full_state(piece, dst)
    if sd is None:
        return None
    with torch.random.fork_rng():
        model = GPT(piece.cfg)
    model.load_state_dict(sd)
    return model.to(mdist.device())
