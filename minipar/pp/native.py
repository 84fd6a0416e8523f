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

from minipar import dist as mdist
from minipar.errors import ConfigError
from minipar.models import GPT


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
