"""Experiment drivers for lesson 10 (NCCL in practice). They only call minipar and torch; child processes
import them by name, so they live here and not in the notebook."""

import pathlib
import runpy
import time
from itertools import islice
from types import SimpleNamespace

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.course.capture import fingerprint_summary
from minipar.data import make_loader
from minipar.dp.ddp import DistributedDataParallel
from minipar.runtime import dist as md

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "ddp_plain.py"


def minipar_ddp() -> dict:
    """The plain script's training (same data, model, batch, SGD, epochs; minipar's loader is the same
    DistributedSampler, seed 0, ``set_epoch`` each epoch) with minipar's DDP instead of PyTorch's:
    ``{"losses": [this rank's loss per step], "params": {name: tensor}}``."""
    s = SimpleNamespace(**runpy.run_path(str(SCRIPT)))  # the script's data set, model, constants; not its main()
    loader = make_loader(s.make_dataset(), s.BATCH_PER_RANK * md.world_size(), md.rank(), md.world_size(), seed=0)
    model = s.make_model().to(md.device())
    net = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=s.LR)
    losses = []
    for x, y in islice(loader, s.EPOCHS * loader.steps_per_epoch):
        loss = nn.functional.mse_loss(net(x.to(md.device())), y.to(md.device()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "params": {k: v.detach().cpu() for k, v in model.state_dict().items()}}


# ----------------------------------------------------------------------------- hangs, on purpose
def skip_all_reduce() -> str:
    """Rank 1 skips the all-reduce (e.g. an ``if rank == 0 ...`` around code that holds a collective)."""
    if md.rank() == 1:
        return "rank 1 skipped the all_reduce and returned"
    t = torch.ones(4, device=md.device())
    dist.all_reduce(t)
    return "never printed: the all_reduce cannot complete"


def busy_rank() -> str:
    """Rank 1 never reaches the all-reduce in time (a slow data loader, a deadlock of its own...)."""
    if md.rank() == 1:
        time.sleep(60)  # stopped by launch long before this ends
    t = torch.ones(4, device=md.device())
    dist.all_reduce(t)
    return "never printed"


def extra_all_reduce() -> str:
    """Rank 2 calls one all-reduce more than the others (for the "Your turn" exercise)."""
    t = torch.ones(4, device=md.device())
    dist.all_reduce(t)
    if md.rank() == 2:
        dist.all_reduce(t)  # e.g. a logging all-reduce only rank 2 does
    return "returned"


def mismatched(catch: bool = False) -> str:
    """Rank 1 calls ``broadcast`` where the others call ``all_reduce``: the same tensor, another collective.
    ``catch=True``: each rank returns a one-line summary of its error (``TORCH_DISTRIBUTED_DEBUG=DETAIL``'s check)."""
    t = torch.ones(4, device=md.device())
    try:
        if md.rank() == 1:
            dist.broadcast(t, src=0)
        else:
            dist.all_reduce(t)
    except RuntimeError as exc:
        if not catch:
            raise
        return fingerprint_summary(str(exc))
    return "no error: the collectives completed (and mixed their data)"
