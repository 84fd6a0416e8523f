"""Data-parallel jobs the tests run on 1..4 ranks (importable: child processes find them by name).

The training loop itself is the lesson's driver, ``lessons/workers_02.train`` (one device,
minipar DDP, naive DP or PyTorch DDP, with micro-batches), so the tests check what the notebook
shows.
"""

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from lessons.workers_02 import LOSS_BOUND, PARAM_BOUND, build, train
from minipar.data import builtin_corpus
from minipar.dp.ddp import DistributedDataParallel
from minipar.model.presets import SMALL

__all__ = [
    "LOSS_BOUND",
    "PARAM_BOUND",
    "build",
    "train",
    "train_variants",
    "one_step_trace",
    "start_unequal",
    "step_inside_no_sync",
    "unused_parameter",
    "step_hook_lifetime",
]


def train_variants(steps=4, global_batch=8):
    """The DP variants the equivalence test compares, in one launch: ``{name: train(...)}``."""
    return {
        "ddp": train("ddp", steps, global_batch),
        "ddp_accum": train("ddp", steps, global_batch, micro=2),
        "ddp_no_overlap": train("ddp", steps, global_batch, overlap=False),
        "naive": train("naive", steps, global_batch),
        "torch": train("torch", steps, global_batch, micro=2),
    }


def one_step_trace(bucket_cap_mb=0.02, overlap=True):
    """One DDP training step (after a warm-up step) under a CommLog: what was sent, and when."""
    from minipar.comm.comm_log import CommLog

    model, opt = build()
    net = DistributedDataParallel(model.to(md.device()), bucket_cap_mb=bucket_cap_mb, overlap=overlap)
    x = torch.randint(0, builtin_corpus().vocab_size, (2, SMALL["block_size"])).to(md.device())
    for _ in range(2):
        with CommLog() as log:
            _, loss = net(x, x)
            loss.backward()
        opt.step()
        opt.zero_grad()
    return {
        "records": [(r.op, r.bytes, r.sent, r.label) for r in log.records],
        "buckets": [b.nbytes for b in net.buckets],
        "step": net.last_step,
        "times": net.last_times,
        "numel": sum(p.numel() for p in model.parameters()),
    }


def start_unequal(init_sync):
    """Rank 1 builds its model with another seed: detected (and fixed, with ``init_sync=True``)."""
    model, _ = build(seed=md.rank())
    net = DistributedDataParallel(model, init_sync=init_sync)
    w = model.wte.weight.detach().clone()
    dist.broadcast(w, src=0)
    return {"differed": net.differed_at_start, "equal_now": bool(torch.equal(w, model.wte.weight))}


def step_inside_no_sync(outside=False):
    """The mistake: ``opt.step()`` while the micro-batch gradients are still local."""
    model, opt = build()
    net = DistributedDataParallel(model)
    x = torch.randint(0, builtin_corpus().vocab_size, (2, SMALL["block_size"]))
    with net.no_sync():
        _, loss = net(x, x)
        loss.backward()
        if not outside:
            opt.step()
    opt.step()


def unused_parameter():
    """A parameter that gets no gradient: its bucket is still sent at the end of backward (no hang)."""
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 4), "unused": torch.nn.Linear(4, 4)})
    DistributedDataParallel(model, bucket_cap_mb=1e-4)  # ~100 bytes a bucket: one per parameter; its hooks keep it
    x = torch.full((2, 4), float(md.rank() + 1))
    model["used"](x).sum().backward()
    return {"grad": model["used"].weight.grad.clone(), "unused_grad": model["unused"].weight.grad}


def grads_as_bucket_views():
    """Two backward passes, no zero_grad between: both layers used, then only "used". After each, the
    gradients (views of the buckets) and a plain replica's (inputs averaged over the ranks: the same mean)."""
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 4), "sometimes": torch.nn.Linear(4, 4)}).double()
    torch.manual_seed(0)
    plain = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 4), "sometimes": torch.nn.Linear(4, 4)}).double()
    net = DistributedDataParallel(model, bucket_cap_mb=1e-4)  # one bucket per parameter
    n, out = md.world_size(), []
    for both in (True, False):
        for m, inputs in ((model, [float(md.rank() + 1)]), (plain, [float(r + 1) for r in range(n)])):
            for v in inputs:  # the plain replica: every rank's input, each loss / N (the mean's gradient)
                h = m["used"](torch.full((2, 4), v, dtype=torch.float64))
                (m["sometimes"](h) if both else h).sum().div(n if m is plain else 1).backward()
        out.append(
            {k: (p.grad.clone(), q.grad.clone()) for (k, p), q in zip(model.named_parameters(), plain.parameters())}
        )
    return {"steps": out, "is_view": model["used"].weight.grad._base is not None, "net": net is not None}


def step_hook_lifetime():
    """The no_sync() step check belongs to its DDP. Global optimizer step pre-hooks beyond those before:
    with two DDPs, after the first one's ``remove_hooks()``, after the second one's, and after a DDP
    with no parameters (no parameter hook keeps it alive) is dropped and collected."""
    import gc

    from torch.optim.optimizer import _global_optimizer_pre_hooks as hooks

    before = len(hooks)
    a, b = DistributedDataParallel(torch.nn.Linear(4, 4)), DistributedDataParallel(torch.nn.Linear(4, 4))
    counts = [len(hooks) - before]
    a.remove_hooks()
    counts.append(len(hooks) - before)
    b.remove_hooks()
    counts.append(len(hooks) - before)
    c = DistributedDataParallel(torch.nn.ReLU())
    counts.append(len(hooks) - before)
    del c
    gc.collect()
    counts.append(len(hooks) - before)
    return counts
