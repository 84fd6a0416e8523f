"""Experiment drivers for lesson 03 (ZeRO): they only call minipar and torch, on every rank.

Child processes import this module by name, so the notebook's workers live here, not in a cell.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.checkpoint.full_state import full_state_dict
from minipar.comm.comm_log import CommLog
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.memory import state_bytes
from minipar.zero import zero
from minipar.zero.fully_shard import MixedPrecisionPolicy, fully_shard

STRATEGIES = ("dp", "zero1", "zero2", "zero3", "zero3pp", "fsdp2")
# zero3: flat units (FSDP1's design, minipar.zero.stage3); zero3pp: per parameter (FSDP2's design,
# minipar.zero.fully_shard); fsdp2: PyTorch's torch.distributed.fsdp.fully_shard.


def units(model: GPT) -> list:
    """The modules every ZeRO-3 here shards on their own (then the root): the flat units of stage 3."""
    return [model.wte, model.wpe, *model.blocks, model.ln_f, model.lm_head]


def make_optimizer(model, adamw: dict, optim: str = "adamw"):
    """``torch.optim.AdamW`` with minipar's decay groups, or ``torch.optim.SGD(lr, momentum=0.9)`` (``optim="sgd"``)."""
    if optim == "sgd":
        return torch.optim.SGD(model.parameters(), lr=adamw["lr"], momentum=0.9)
    return torch.optim.AdamW(adamw_groups(model, adamw["weight_decay"]), lr=adamw["lr"], betas=adamw["betas"])


def build(strategy: str, cfg: GPTConfig, adamw: dict, trace=None, dtype=torch.float32, optim="adamw", mp=None):
    """The model (seed 0 on every rank, then cast to ``dtype``) and its optimizer for one strategy.

    ``optim``: "adamw" or "sgd" (single, dp, zero3pp, fsdp2). ``mp``: ``(param_dtype, reduce_dtype)``
    for the two per-parameter ZeRO-3s, given to minipar's and PyTorch's ``MixedPrecisionPolicy``.
    """
    torch.manual_seed(0)
    model = GPT(cfg).to(dtype)
    if strategy in ("dp", "single"):
        opt = make_optimizer(model, adamw, optim)
    elif strategy == "zero3pp":
        policy = MixedPrecisionPolicy(*mp) if mp else None
        for m in units(model):
            fully_shard(m, mp_policy=policy)
        fully_shard(model, mp_policy=policy)
        opt = make_optimizer(model, adamw, optim)
    elif strategy == "fsdp2":
        from torch.distributed import fsdp
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (md.world_size(),))
        policy = fsdp.MixedPrecisionPolicy(*mp) if mp else fsdp.MixedPrecisionPolicy()
        for m in units(model):
            fsdp.fully_shard(m, mesh=mesh, mp_policy=policy)
        fsdp.fully_shard(model, mesh=mesh, mp_policy=policy)
        opt = make_optimizer(model, adamw, optim)
    else:
        kw = dict(trace=trace) if strategy == "zero3" else {}
        opt = zero(model, int(strategy[-1]), **adamw, **kw)
    return model, opt


def finish_step(strategy: str, model, opt, adamw: dict) -> None:
    """After backward: (dp) all-reduce gradients, clip if ``adamw["max_norm"]``, step, zero the gradients.
    ZeRO does its own communication and clipping inside ``opt.step()``."""
    if strategy == "dp":
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    if adamw.get("max_norm") and strategy in ("dp", "single", "fsdp2", "zero3pp"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), adamw["max_norm"])
    opt.step()
    opt.zero_grad()


def peak_tracker(model, opt):
    """PyTorch's ``MemTracker`` (``torch.distributed._tools.mem_tracker``): it sees every tensor
    allocation and free through a dispatch mode, so its peak is an exact count of live tensor bytes
    (activations and temporaries included), the CPU analogue of ``torch.cuda.max_memory_allocated``."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    with warnings.catch_warnings():  # it warns about optimizer parameters whose .grad is None
        warnings.simplefilter("ignore", UserWarning)
        tracker.track_external(model, getattr(opt, "optimizer", opt))
    return tracker


def run(
    strategies,
    cfg: GPTConfig,
    adamw: dict,
    batches: list,
    measure_step: int = 1,
    track_peak: bool = False,
    dtype=torch.float32,
    optim: str = "adamw",
    mp=None,
) -> dict:
    """Train each strategy on this rank's rows of the same global ``batches``, one after another.

    ``optim``, ``mp``: as :func:`build` (``mp`` reaches only zero3pp and fsdp2).

    ``dtype``: float32 for the byte measurements (the formulas are fp32 AdamW's), float64 for the
    equivalence proofs (reordered sums then differ by ~1e-16 relative on every CPU).

    Returns ``{strategy: {"losses" (mean over ranks), "params" (full), "held" (bytes after the
    backward of step ``measure_step``), "comm" ({op: bytes sent} in that step), "trace",
    "peak" (peak tensor bytes during that step, with ``track_peak``)}}``.
    """
    n, r = md.world_size(), md.rank()
    out = {}
    for s in strategies:
        trace = []
        pp_mp = mp if s in ("zero3pp", "fsdp2") else None
        model, opt = build(s, cfg, adamw, trace if s == "zero3" else None, dtype, optim=optim, mp=pp_mp)
        losses, rec = [], {}
        for step, xy in enumerate(batches):
            xy = xy.chunk(n)[r]
            if step == measure_step:
                trace.clear()
            measure = step == measure_step
            tracker = peak_tracker(model, opt) if measure and track_peak else contextlib.nullcontext()
            with CommLog() as log, tracker, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                loss = model(xy[:, :-1], xy[:, 1:])[1]
                loss.backward()
                if step == measure_step:
                    rec["held"] = state_bytes(model, opt)
                finish_step(s, model, opt, adamw)
            if step == measure_step:
                rec["comm"] = {op: d["sent"] for op, d in log.by_op().items()}
                rec["trace"] = list(trace)
                if track_peak:
                    rec["peak"] = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
            t = loss.detach().clone()
            dist.all_reduce(t)
            losses.append(t.item() / n)
        out[s] = dict(rec, losses=losses, params=full_state_dict(model, optimizer=opt))
    return out


def single_device(cfg: GPTConfig, adamw: dict, batches: list, dtype=torch.float32, optim: str = "adamw") -> dict:
    """The reference: one process, the whole global batch, torch.optim.AdamW or SGD (model in ``dtype``)."""
    model, opt = build("single", cfg, adamw, dtype=dtype, optim=optim)
    losses = []
    for xy in batches:
        loss = model(xy[:, :-1], xy[:, 1:])[1]
        loss.backward()
        finish_step("single", model, opt, adamw)
        losses.append(loss.item())
    return dict(losses=losses, params=full_state_dict(model))


def different_start(cfg: GPTConfig, stage: int) -> None:
    """A mistake on purpose: every rank seeds its own model, so the ranks start from different weights."""
    torch.manual_seed(md.rank())
    zero(GPT(cfg), stage)


def single_device_sgd(cfg: GPTConfig, batches: list, sgd: dict) -> dict:
    """One process, the whole batch, ``torch.optim.SGD(**sgd)``, in float64: the reference for
    :func:`zero_redundancy`."""
    torch.manual_seed(0)
    model = GPT(cfg).to(torch.float64)
    opt = torch.optim.SGD(model.parameters(), **sgd)
    for xy in batches:
        model(xy[:, :-1], xy[:, 1:])[1].backward()
        opt.step()
        opt.zero_grad()
    return full_state_dict(model)


def zero_redundancy(cfg: GPTConfig, batches: list, sgd: dict) -> dict:
    """minipar's and PyTorch's ZeroRedundancyOptimizer around ``torch.optim.SGD(**sgd)``, float64.

    Each rank takes its rows of every global batch; the gradients are averaged with one all-reduce
    per parameter (what DDP does), then ``opt.step()`` steps this rank's parameters and broadcasts
    every parameter from its owner. Returns both runs' parameters, the elements each rank owns and
    the bytes of optimizer state (momentum) this rank holds.
    """
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZeRO

    from minipar.zero.redundancy import ZeroRedundancyOptimizer

    n, r = md.world_size(), md.rank()
    out = {}
    for name, cls in (("minipar", ZeroRedundancyOptimizer), ("torch", TorchZeRO)):
        torch.manual_seed(0)
        model = GPT(cfg).to(torch.float64)
        opt = cls(model.parameters(), torch.optim.SGD, **sgd)
        for xy in batches:
            xy = xy.chunk(n)[r]
            model(xy[:, :-1], xy[:, 1:])[1].backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            opt.step()
            opt.zero_grad()
        out[name] = full_state_dict(model)
        if name == "minipar":
            out["owned"] = opt.owned_numel()
            out["state_bytes"] = state_bytes(None, opt.optim)["optimizer"]
    return out


def per_param_layout(cfg: GPTConfig) -> list:
    """On every rank: fully_shard on the units and the root, then walk ``named_modules()`` as any code
    would. Returns ``[(name, module type, local shape, full shape)]`` for every Linear/Embedding weight."""
    import torch.nn as nn

    model, _ = build("zero3pp", cfg, dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0))
    return [
        (f"{name}.weight", type(m).__name__, tuple(m.weight.shape), tuple(m.weight.shard_spec.full_shape))
        for name, m in model.named_modules()
        if isinstance(m, (nn.Linear, nn.Embedding))
    ]
