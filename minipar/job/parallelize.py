"""Apply the run's parallelisms to the model, once: :func:`parallelize` (torchtitan's ``parallelize_llama``).

    torch.manual_seed(cfg.seed); model = GPT(gpt_cfg)        # the single-device model, on every rank
    mesh = init_groups(job.mesh)                              # minipar.runtime.mesh, Megatron's rank order
    piece = parallelize(model, mesh, cfg)                     # this rank's piece: minipar.job.piece.Piece
    loss = piece.step(x, y, lr)                               # the one training step, every layout

Every rank builds the *whole* GPT from the seed, so every layout starts from the single device's
weights; then, in this order (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM", arXiv:2104.04473, §2-3, PTD-P; lessons 01-12):

1. **TP** (lesson 04) — a dense model keeps its tensor-parallel slice (:func:`~minipar.tp.gpt.parallelize_gpt_`
   over the ``tp`` group: parallel layers and the vocabulary-parallel loss). **EP** (lesson 12) — a mixture of
   experts (tp = 1) gets every block's MoE replaced by an :class:`~minipar.ep.parallel.ExpertParallelMoE`
   over ``mesh.ep_group`` (its E/ep experts kept, load balanced over ``mesh.dp_cp_group``).
2. **Recompute** (lesson 08) — every block set to none / selective / full
   (:func:`~minipar.model.recompute.set_recompute`).
3. **PP** (lessons 05-06) — only the layers of this rank's pipeline stage are kept
   (:class:`~minipar.pp.stages.GPTStage`: [embed] → blocks[lo:hi] → [ln_f, lm_head]; parameter names stay
   the full GPT's, e.g. ``blocks.3.mlp.fc.weight``, which is what checkpoints are keyed by); the rest of the
   model is dropped, not edited. With pp = 1 the stage is the whole model. The
   :class:`~minipar.pp.executor.PipelineExecutor` runs the schedule over the ``pp`` group.
4. **CP** (lesson 11) — with cp > 1, ring attention in every attention and the global positions, installed
   once on the stage (:meth:`minipar.cp.model.ContextParallel.apply`); each batch is then cut to this rank's tokens.
5. **DP** (lessons 01-03, 09) — gradients averaged over the dp × cp group after the schedule (a flat
   all-reduce, or a compressed one), or ZeRO-1 (:class:`Zero1Over3D` over ``mesh.dp_cp_group``; with
   experts :class:`~minipar.ep.zero.MoEZero1`), or — with tp = pp = cp = 1 — ZeRO-3 per parameter
   (:func:`~minipar.zero.fully_shard.fully_shard` on every block and the stage, any ``param_dtype``).

Nothing here checks the settings: :func:`minipar.job.config.check` did, once. The groups are the mesh's
(``mesh.tp_group`` ...): a size-1 dimension has a group of one rank, because minipar's TP layers and the
executor read ``group=None`` as "the whole world".
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.cp.model import ContextParallel
from minipar.dp.compression import make_compressor
from minipar.ep.parallel import ExpertParallelMoE
from minipar.ep.zero import MoEZero1
from minipar.job.config import BETAS, TrainConfig
from minipar.job.piece import Piece
from minipar.model.gpt import GPT, adamw_groups
from minipar.model.recompute import set_recompute
from minipar.optim.clip_grads import clip_grad_norm_
from minipar.pp.executor import PipelineExecutor
from minipar.pp.schedules import make_schedule
from minipar.pp.stages import GPTStage, partition_layers
from minipar.runtime import dist as mdist
from minipar.runtime.mesh import Mesh
from minipar.tp.gpt import parallelize_gpt_
from minipar.tp.partition import param_is_not_tensor_parallel_duplicate
from minipar.zero.flat import default_units
from minipar.zero.fully_shard import MixedPrecisionPolicy, fully_shard
from minipar.zero.stage12 import ZeroOptimizer


def parallelize(model: GPT, mesh: Mesh, cfg: TrainConfig) -> Piece:
    """This rank's :class:`~minipar.job.piece.Piece` of ``model`` on ``mesh`` (with its groups), the settings
    from ``cfg`` (already checked by :func:`minipar.job.config.check`): the model, the pipeline stage, the
    executor and the optimizer, built in the order of the module doc. ``model``: ``GPT(gpt_cfg)`` built from
    ``cfg.seed`` on every rank (changed in place; the piece keeps only this rank's part of it).
    """
    gpt = model.cfg
    if gpt.moe_experts:  # experts over the EP group (a one-rank group at ep = 1: None is the world)
        if dist.is_initialized() and mdist.world_size() > 1:
            group = mesh.ep_group if mesh.ep_size > 1 else mesh.groups["tp"]
            for b in model.blocks:
                b.mlp = ExpertParallelMoE(b.mlp, group=group, balance_group=mesh.dp_cp_group)
    else:
        parallelize_gpt_(model, mesh.tp_group)
    set_recompute(model, cfg.recompute)
    lo, hi = partition_layers(gpt.n_layer, mesh.pp_size)[mesh.pp_rank]
    stage = GPTStage(model, mesh.pp_rank, mesh.pp_size, lo, hi).to(mdist.device())
    cp = ContextParallel(gpt.block_size, mesh) if mesh.cp_size > 1 else None
    if cp is not None:  # ring attention and the global positions, once
        cp.apply(stage)
    if cfg.zero == 3:
        param_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.dtype)
        policy = MixedPrecisionPolicy(param_dtype, torch.float32 if param_dtype else None)
        for block in [*stage.blocks.values(), stage]:  # each block, then the stage takes the rest
            fully_shard(block, group=mesh.dp_group, mp_policy=policy)
    max_norm = cfg.grad_clip or None
    if cfg.zero == 1 and gpt.moe_experts:
        opt = MoEZero1(stage, mesh, lr=cfg.lr, weight_decay=cfg.weight_decay, max_norm=max_norm)
    elif cfg.zero == 1:
        opt = Zero1Over3D(
            stage,
            mesh.tp_rank,
            lr=cfg.lr,
            betas=BETAS,
            weight_decay=cfg.weight_decay,
            max_norm=max_norm,
            group=mesh.dp_cp_group,
        )
    else:
        opt = torch.optim.AdamW(adamw_groups(stage, cfg.weight_decay), lr=cfg.lr, betas=BETAS)
    comp = make_compressor(cfg.grad_compression) if cfg.grad_compression != "none" else None
    piece = Piece(gpt, mesh, stage, opt, cfg.zero, cfg.grad_clip, compressor=comp, cp=cp)
    piece.executor = PipelineExecutor(
        {mesh.pp_rank: stage},
        make_schedule(cfg.schedule, mesh.pp_size, cfg.microbatches),
        loss_fn=piece.loss,
        group=mesh.pp_group,
        pipe_ranks=mesh.ranks.get("pp", [mesh.rank]),
        hidden_size=gpt.d_model,
        count_memory=False,
    )
    return piece


class Zero1Over3D(ZeroOptimizer):
    """ZeRO-1 over the ``dp`` (× cp) group whose gradient clipping uses the *global* 3D norm.

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
