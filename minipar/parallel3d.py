"""3D parallelism: this rank's piece of the GPT on a (pp, dp, tp) mesh, and one training step.

    mesh = init_mesh(pp=2, dp=2, tp=2)                      # minipar.mesh, Megatron's rank order
    piece = build_piece(cfg, mesh, schedule="1f1b", microbatches=4, zero=1, lr=3e-3, ...)
    loss = piece.step(x, y, lr)     # x, y: this dp rank's share (B/dp, T); loss on the last stage

How the three dimensions compose (Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM", arXiv:2104.04473, §2-3; PTD-P):

1. **TP** (lesson 04) — every rank builds the *whole* GPT from the seed, then keeps its tensor-parallel
   slice (:class:`~minipar.tp.gpt.TensorParallelGPT` over the ``tp`` group), so every layout
   starts from the single device's weights.
2. **PP** (lessons 05-06) — of that TP model it keeps only the layers of its pipeline stage
   (:class:`Stage3D`: [embed] → blocks[lo:hi] → [ln_f, lm_head]; parameter names stay the full
   GPT's, e.g. ``blocks.3.mlp.fc.weight``, which is what checkpoints are keyed by). The
   :class:`~minipar.pp.executor.PipelineExecutor` runs the schedule over the ``pp`` group; each
   forward/backward inside it runs the TP collectives of the ``tp`` group.
3. **DP** (lessons 01-03) — after the schedule, gradients are averaged over the ``dp`` group: a
   plain all-reduce, or ZeRO-1 (:class:`~minipar.zero.stage12.ZeroOptimizer` over the ``dp`` group: the
   AdamW moments sharded, reduce-scatter + all-gather).

Gradient clipping needs the norm of the *whole* model's gradient: the sum of squares over the
TP shards and the PP stages, counting a TP-replicated tensor (LayerNorm, row-parallel bias,
position embedding) once, not ``tp`` times (:func:`global_grad_norm`; Megatron-LM's
``clip_grad_norm_fp32`` does the same with its ``param_is_not_tensor_parallel_duplicate``).

A size-1 dimension still gets a group (of one rank), because minipar's TP layers and the
executor read ``group=None`` as "the whole world".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar import dist as mdist
from minipar.comm import p2p
from minipar.dp.compression import make_compressor
from minipar.errors import ConfigError
from minipar.mesh import DIMS, Mesh, rank_of
from minipar.models import GPT, GPTConfig, adamw_groups
from minipar.pp.executor import PipelineExecutor, partition_layers
from minipar.pp.schedules import make_schedule
from minipar.recompute import MODES as RECOMPUTE_MODES
from minipar.recompute import set_recompute
from minipar.tp.gpt import TensorParallelGPT
from minipar.tp.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding
from minipar.zero.stage12 import ZeroOptimizer

SCHEDULES_3D = ("gpipe", "1f1b")


def mesh_groups(mesh: Mesh) -> dict[str, object]:
    """``{"pp", "dp", "tp"}`` -> a process group for every dimension, a 1-rank group where the size is 1.

    Collective when some dimension has size 1 in a world > 1 (every rank creates every 1-rank group).
    """
    groups = dict(mesh.groups)
    if mdist.world_size() > 1 and any(groups.get(d) is None for d in DIMS):
        singles = [mdist.new_group([r]) for r in range(mdist.world_size())]
        for d in DIMS:
            if groups.get(d) is None:
                groups[d] = singles[mesh.rank]
    return {d: groups.get(d) for d in DIMS}


class Stage3D(nn.Module):
    """Pipeline stage ``index`` of a :class:`TensorParallelGPT`: [embed] → blocks[lo:hi] → [ln_f, lm_head].

    Parameter names are the full GPT's (``wte.weight``, ``blocks.{i}.…`` with the *global* i,
    ``lm_head.weight``). Shapes: stage 0 takes ids (B, T) int64, the others hidden (B, T, d); the
    last returns this TP rank's vocabulary slice of the logits (B, T, V'/tp), the others (B, T, d).
    """

    def __init__(self, tp_model: TensorParallelGPT, index: int, n_stages: int, lo: int, hi: int):
        super().__init__()
        self.cfg, self.index, self.n_stages, self.lo, self.hi = tp_model.cfg, index, n_stages, lo, hi
        self.is_first, self.is_last = index == 0, index == n_stages - 1
        self.__dict__["tp"] = tp_model  # not a submodule: only the pieces below are mine
        if self.is_first:
            self.wte, self.wpe = tp_model.wte, tp_model.wpe
        self.blocks = nn.ModuleDict({str(i): tp_model.blocks[i] for i in range(lo, hi)})
        if self.is_last:
            self.ln_f, self.lm_head = tp_model.ln_f, tp_model.lm_head
        for i in range(tp_model.cfg.n_layer):  # free what other stages hold
            if not lo <= i < hi:
                tp_model.blocks[i] = nn.Identity()
        if not self.is_first:
            tp_model.wte = tp_model.wpe = None
        if not self.is_last:
            tp_model.ln_f = tp_model.lm_head = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.is_first:
            x = self.tp.embed(x)
        for block in self.blocks.values():
            x = block(x)
        return self.tp.head(x) if self.is_last else x

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy from vocabulary-split logits (the same scalar on every TP rank)."""
        return self.tp.loss(logits, targets)


def is_tp_sharded(stage: nn.Module) -> dict[str, bool]:
    """``{param name: True if TP-sharded}``; False = replicated over the TP group (same on every tp rank)."""
    out = {}
    for mname, m in stage.named_modules():
        for pname, _ in m.named_parameters(recurse=False):
            sharded = isinstance(m, (ColumnParallelLinear, VocabParallelEmbedding)) or (
                isinstance(m, RowParallelLinear) and pname == "weight"
            )
            out[f"{mname}.{pname}" if mname else pname] = sharded
    return out


def global_grad_norm_sq(sq_terms: torch.Tensor) -> torch.Tensor:
    """Sum this rank's squared-norm contribution over the whole world (one 4-byte all-reduce)."""
    if mdist.world_size() > 1:
        dist.all_reduce(sq_terms)
    return sq_terms


class Zero1Over3D(ZeroOptimizer):
    """ZeRO-1 over the ``dp`` group whose gradient clipping uses the *global* 3D norm.

    Each rank's gradient shards partition its (pp, tp) piece over dp, so summing squares over the
    world counts every element once — except TP-replicated tensors, which only tp rank 0 counts.
    """

    def __init__(self, stage: Stage3D, tp_rank: int, **kw):
        super().__init__(stage, stage=1, units=_units(stage), **kw)
        sharded = is_tp_sharded(stage)
        self._count = []  # per unit: (S,) 1.0 where this rank counts the element
        for u, (uname, _) in zip(self.units, _units(stage)):
            w = torch.zeros(u.shard_size)  # device-ok: CPU mask, moved with w.to(g.device) in clip_
            for i, a, b in u.segments():
                w[a:b] = float(sharded[f"{uname}.{u.names[i]}"] or tp_rank == 0)
            self._count.append(w)

    def clip_(self, grads: list[torch.Tensor]) -> torch.Tensor:
        sq = torch.stack([(g.pow(2) * w.to(g.device)).sum() for g, w in zip(grads, self._count)]).sum()
        norm = global_grad_norm_sq(sq).sqrt()
        coef = torch.clamp(self.max_norm / (norm + 1e-6), max=1.0)
        for g in grads:
            g.mul_(coef)
        return norm


def _units(stage: Stage3D) -> list[tuple[str, nn.Module]]:
    """ZeRO units of a stage: embeddings, each block, ln_f, lm_head (names as in the stage)."""
    out = []
    for name, m in stage.named_children():
        out += [(f"blocks.{k}", b) for k, b in m.items()] if name == "blocks" else [(name, m)]
    return out


@dataclass
class Piece:
    """This rank's part of a 3D job: its mesh, groups, stage, executor and optimizer."""

    cfg: GPTConfig
    mesh: Mesh
    groups: dict
    stage: Stage3D
    executor: PipelineExecutor
    optimizer: object
    zero: int
    grad_clip: float
    last: object = None  # the executor's StepResult of the last step (trace, activation bytes)
    compressor: object = None  # a minipar.dp.compression compressor for the dp all-reduce (None: plain)

    def stage_device(self) -> torch.device:
        return mdist.device()

    @property
    def owns_loss(self) -> bool:
        """True on the pipeline's last stage (these ranks compute the loss)."""
        return self.stage.is_last

    @property
    def loss_rank(self) -> int:
        """The one global rank that logs: last pipeline stage, dp rank 0, tp rank 0."""
        return rank_of((self.mesh.shape[0] - 1, 0, 0), self.mesh.shape)

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
        """One optimizer step on this dp rank's share ``x``, ``y`` (B/dp, T) int64.

        Returns the mean loss over the *global* batch (a 0-d tensor) on every rank (broadcast
        from the loss rank; one 4-byte broadcast per step).
        """
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        res = self.last = self.executor.step(x, y)  # forward + backward of all micro-batches
        loss = torch.tensor(res.loss if res.loss is not None else 0.0, device=mdist.device())
        if self.zero:  # ZeRO-1: reduce-scatter, clip, AdamW, all-gather
            self.optimizer.step()
        else:
            if self.compressor is None:
                all_reduce_grads_flat(self.stage, self.groups["dp"], self.mesh.dp_size)
            else:  # lesson 09: bf16 / PowerSGD all-reduce
                compressed_all_reduce_grads(self.stage, self.compressor, self.groups["dp"], self.mesh.dp_size)
            if self.grad_clip:
                clip_global_(self.stage, self.grad_clip, self.mesh)
            self.optimizer.step()
        if self.mesh.dp_size > 1 and self.owns_loss:
            dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=self.groups["dp"])
        return broadcast_from(loss, self.loss_rank)

    @torch.no_grad()
    def forward_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward only through the pipeline (blocking send/recv): mean loss of (B, T) ``x``, ``y`` on every rank."""
        dev, pp, me = mdist.device(), self.mesh.pp_size, self.mesh.pp_rank
        h = x.to(dev)
        if me > 0:
            h = torch.empty(x.shape[0], x.shape[1], self.cfg.d_model, device=dev)
            p2p.recv(h, self.mesh.ranks["pp"][me - 1], group=self.groups["pp"], label=f"eval {me}")
        out = self.stage(h)
        if me < pp - 1:
            p2p.send(out.contiguous(), self.mesh.ranks["pp"][me + 1], group=self.groups["pp"], label=f"eval {me + 1}")
            loss = torch.zeros((), device=dev)
        else:
            loss = self.stage.loss(out, y.to(dev))
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
def clip_global_(stage: Stage3D, max_norm: float, mesh: Mesh) -> torch.Tensor:
    """Scale every gradient by ``min(1, max_norm / (‖g‖ + 1e-6))`` with ‖g‖ the whole 3D model's norm.

    Same rule as ``torch.nn.utils.clip_grad_norm_``. Called after the dp all-reduce, so the dp
    replicas hold equal gradients: the world sum is divided by dp. Returns the norm.
    """
    sharded = is_tp_sharded(stage)
    named = [(n, p) for n, p in stage.named_parameters() if p.grad is not None]
    terms = [p.grad.pow(2).sum() for n, p in named if sharded[n] or mesh.tp_rank == 0]
    sq = torch.stack(terms).sum() if terms else torch.zeros((), device=mdist.device())
    norm = (global_grad_norm_sq(sq) / mesh.dp_size).sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for _, p in named:
        p.grad.mul_(coef)
    return norm


GRAD_COMPRESSION = ("none", "bf16", "powersgd")


def check_grad_compression(method: str, zero: int) -> None:
    """Raise ConfigError unless ``method`` is one of :data:`GRAD_COMPRESSION` and usable with ``zero``.

    Compression replaces the dp *all-reduce*; ZeRO-1 reduce-scatters sharded flat gradients
    instead (PowerSGD needs whole matrices on every rank), so the two do not combine here.
    """
    if method not in GRAD_COMPRESSION:
        raise ConfigError(f"--grad-compression {method}: use one of {', '.join(GRAD_COMPRESSION)}")
    if method != "none" and zero:
        raise ConfigError(
            f"--grad-compression {method} with --zero {zero}: ZeRO reduce-scatters flat gradient "
            "shards, so there is no all-reduce to compress; use --zero 0, or --grad-compression none"
        )


def build_piece(
    cfg: GPTConfig,
    mesh: Mesh,
    *,
    schedule: str = "1f1b",
    microbatches: int = 1,
    zero: int = 0,
    grad_compression: str = "none",
    lr: float = 3e-3,
    weight_decay: float = 0.1,
    betas=(0.9, 0.95),
    grad_clip: float = 1.0,
    seed: int = 0,
    count_memory: bool = False,
    recompute: str = "none",
) -> Piece:
    """Build this rank's piece of the 3D job. Collective (creates 1-rank groups where needed).

    The model is ``torch.manual_seed(seed); GPT(cfg)`` sliced for (tp rank, pp stage), so every
    layout starts from the same weights as one device.

    Raises:
        ConfigError: tp not dividing d_model/n_head; more stages than layers; an unknown schedule;
        ``zero`` not 0 or 1; ``recompute`` not none/selective/full.

    ``recompute`` ("none" | "selective" | "full", lesson 08) is set on every block of this stage
    (:func:`minipar.recompute.set_recompute`): the same numbers, fewer saved activations.
    """
    if recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"--recompute {recompute}: use one of {', '.join(RECOMPUTE_MODES)}")
    if schedule not in SCHEDULES_3D:
        raise ConfigError(f"--schedule {schedule}: the 3D job runs one stage per rank; use one of {list(SCHEDULES_3D)}")
    if zero not in (0, 1):
        raise ConfigError(f"--zero {zero}: the 3D job supports 0 (all-reduce) or 1 (ZeRO-1 over the dp group)")
    check_grad_compression(grad_compression, zero)
    pp = mesh.pp_size
    if pp > cfg.n_layer:
        raise ConfigError(
            f"--pp {pp} stages but the model has only --n-layer {cfg.n_layer} blocks; "
            f"use --pp <= {cfg.n_layer} or --n-layer >= {pp}"
        )
    groups = mesh_groups(mesh)
    torch.manual_seed(seed)
    tp_model = TensorParallelGPT(cfg, group=groups["tp"]).to(mdist.device())
    lo, hi = partition_layers(cfg.n_layer, pp)[mesh.pp_rank]
    stage = Stage3D(tp_model, mesh.pp_rank, pp, lo, hi)
    set_recompute(stage, recompute)
    executor = PipelineExecutor(
        {mesh.pp_rank: stage},
        make_schedule(schedule, pp, microbatches),
        loss_fn=stage.loss,
        group=groups["pp"],
        pipe_ranks=mesh.ranks.get("pp", [mesh.rank]),
        hidden_size=cfg.d_model,
        count_memory=count_memory,
    )
    if zero:
        opt = Zero1Over3D(
            stage,
            mesh.tp_rank,
            lr=lr,
            betas=betas,
            weight_decay=weight_decay,
            max_norm=grad_clip or None,
            group=groups["dp"],
        )
    else:
        opt = torch.optim.AdamW(adamw_groups(stage, weight_decay), lr=lr, betas=betas)
    comp = make_compressor(grad_compression) if grad_compression != "none" else None
    return Piece(cfg, mesh, groups, stage, executor, opt, zero, grad_clip, compressor=comp)


@torch.no_grad()
def gather_full_state(piece: Piece, dst: int) -> dict[str, torch.Tensor] | None:
    """The single-device ``GPT`` state dict, assembled on global rank ``dst`` (None elsewhere). Collective.

    TP slices are all-gathered inside each tp group (:meth:`TensorParallelGPT.full_state_dict`),
    then every stage's tensors are gathered to ``dst`` as Python objects (fine for course-sized models).
    """
    sd = {k: v.cpu() for k, v in piece.stage.tp.full_state_dict().items()}
    if mdist.world_size() == 1:
        return sd
    box = [None] * mdist.world_size() if mdist.rank() == dst else None
    dist.gather_object(sd if piece.mesh.dp_rank == 0 and piece.mesh.tp_rank == 0 else {}, box, dst=dst)
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
