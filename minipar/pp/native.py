"""The same pipeline with PyTorch's own ``torch.distributed.pipelining`` (for comparison).

    sched = native_schedule("1f1b", stages, n_stages=S, m=8)     # stages from build_stages
    loss = native_step(sched, stages, S, x, y, optimizer)         # one optimizer step

``PipelineStage`` wraps each of this rank's stage modules (shapes are inferred from the first
micro-batch by a metadata exchange); ``ScheduleGPipe`` / ``Schedule1F1B`` /
``ScheduleInterleaved1F1B`` split the batch into m micro-batches, run the schedule with
``batch_isend_irecv`` and scale gradients by 1/m (``scale_grads=True``), so the result is the
gradient of the mean loss — the same number minipar's :class:`~minipar.pp.executor.PipelineExecutor`
computes.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.errors import ConfigError
from minipar.model.gpt import GPT
from minipar.pp.schedules import Action, Overlap
from minipar.runtime import dist as mdist


def native_schedule(name: str, stages: dict[int, nn.Module], n_stages: int, m: int, loss_fn=GPT.loss, group=None):
    """A ``torch.distributed.pipelining`` schedule object for ``name`` in gpipe / 1f1b / interleaved.

    Raises:
        ConfigError: an unknown name; several stages on a rank for a one-stage schedule.
    """
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B}
    if name not in classes:
        raise ConfigError(f"schedule {name!r} is unknown; use one of {sorted(classes)}")
    pstages = [PipelineStage(mod, s, n_stages, mdist.device(), group=group) for s, mod in sorted(stages.items())]
    if name == "interleaved":
        return classes[name](pstages, n_microbatches=m, loss_fn=loss_fn)
    if len(pstages) != 1:
        raise ConfigError(f"schedule {name!r} runs one stage per rank, this rank has {len(pstages)}; use 'interleaved'")
    return classes[name](pstages[0], n_microbatches=m, loss_fn=loss_fn)


def native_step(
    sched,
    stages: dict[int, nn.Module],
    n_stages: int,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: torch.optim.Optimizer | None = None,
) -> float | None:
    """One training step with a ``torch.distributed.pipelining`` schedule; returns the mean loss on
    the rank of the last stage (None elsewhere). ``x``, ``y``: the global batch (B, T) int64."""
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    first, last = 0 in stages, n_stages - 1 in stages
    losses: list[torch.Tensor] = []
    args = (x.to(mdist.device()),) if first else ()
    kwargs = dict(target=y.to(mdist.device()), losses=losses) if last else {}
    sched.step(*args, **kwargs)
    if optimizer is not None:
        optimizer.step()
    return torch.stack(losses).mean().item() if last else None


def v_shape(p: int):
    """``place(stage) -> rank`` of the V schedules (ZBV, DualPipeV): rank r holds stages r and 2p−1−r,
    so the first and the last stage share rank 0 (``generate_stage_to_rank_mapping(style="v")``)."""
    return lambda s: s if s < p else 2 * p - 1 - s


def torch_pipeline_order(name: str, p: int, m: int, fused: bool = False) -> list[list[Action]]:
    """The per-rank action lists of ``torch.distributed.pipelining``'s ``"zb-h1"`` (ScheduleInterleavedZeroBubble
    with one stage per rank), ``"zbv"`` (ScheduleZBVZeroBubble) or ``"dualpipev"`` (ScheduleDualPipeV; these
    two: 2 stages per rank, V placement) for p ranks and m micro-batches, read from ``pipeline_order``
    without processes (the constructor only needs stage metadata). An
    OVERLAP_F_B action (DualPipe's overlapped forward and backward chunk) becomes its two actions in
    order, or with ``fused=True`` one :class:`~minipar.pp.simulation.Overlap` (a pair that ends
    together); idle slots (None) are dropped. Feed to ``simulate(..., place=v_shape(p))`` (V schedules).

    Raises:
        ConfigError: an unknown name; ``m < 2p`` for DualPipeV (PyTorch needs m ≥ stages).
    """
    from torch.distributed.pipelining import schedules as ts

    classes = {
        "zb-h1": ts.ScheduleInterleavedZeroBubble,
        "zbv": ts.ScheduleZBVZeroBubble,
        "dualpipev": ts.ScheduleDualPipeV,
    }
    S = p if name == "zb-h1" else 2 * p
    if name not in classes:
        raise ConfigError(f"schedule {name!r} is unknown; use one of {sorted(classes)}")
    if name == "dualpipev" and m < 2 * p:
        raise ConfigError(f"DualPipeV needs m >= 2p = {2 * p} micro-batches (PyTorch's check), got m={m}")

    class _Meta:  # what the schedule constructors read of a PipelineStage
        def __init__(self, index: int):
            self.stage_index, self.num_stages, self.group_size, self.group_rank = index, S, p, 0
            self.is_first, self.is_last, self.submod = index == 0, index == S - 1, nn.Identity()

    metas = [_Meta(0)] if S == p else [_Meta(0), _Meta(S - 1)]
    sched = classes[name](metas, n_microbatches=m, loss_fn=lambda out, y: out)
    out = []
    for r in range(p):
        acts = []
        for a in sched.pipeline_order[r]:
            if a is None:  # an idle slot
                continue
            subs = [Action(x.stage_index, x.computation_type.value, x.microbatch_index) for x in a.sub_actions or (a,)]
            acts += [Overlap(*sorted(subs, key=lambda x: x.kind != "F"))] if fused and len(subs) == 2 else subs
        out.append(acts)
    return out
