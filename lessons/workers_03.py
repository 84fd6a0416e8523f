"""Experiment drivers for lesson 03 (ZeRO), run on every rank: child processes import them by name."""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.checkpoint.full_state import full_state_dict
from minipar.comm.comm_log import CommLog
from minipar.course.loop import train_steps
from minipar.course.zero_strategies import apply_strategy
from minipar.model.gpt import GPT, GPTConfig, adamw_groups
from minipar.model.memory import state_bytes, tensor_memory_tracker
from minipar.zero import zero


def make_optimizer(model, adamw: dict, optim: str = "adamw"):
    """``torch.optim.AdamW`` with minipar's decay groups, or ``torch.optim.SGD(lr, momentum=0.9)`` (``optim="sgd"``)."""
    if optim == "sgd":
        return torch.optim.SGD(model.parameters(), lr=adamw["lr"], momentum=0.9)
    return torch.optim.AdamW(adamw_groups(model, adamw["weight_decay"]), lr=adamw["lr"], betas=adamw["betas"])


def build(strategy: str, cfg: GPTConfig, adamw: dict, trace=None, dtype=torch.float32, optim="adamw", mp=None):
    """The model (seed 0 on every rank, cast to ``dtype``) and its optimizer for one strategy (:func:`apply_strategy`):
    ``optim`` "adamw" or "sgd" (single, dp, zero3pp, fsdp2); ``mp``: ``(param_dtype, reduce_dtype)`` for the two
    per-parameter ZeRO-3s (minipar's and PyTorch's ``MixedPrecisionPolicy``)."""
    torch.manual_seed(0)
    dev = torch.device("cpu") if strategy == "single" else md.device()  # cuda:LOCAL_RANK on NCCL
    model = GPT(cfg).to(device=dev, dtype=dtype)
    kw = dict(trace=trace) if strategy == "zero3" else {}
    return model, apply_strategy(model, strategy, lambda m: make_optimizer(m, adamw, optim), mp, **adamw, **kw)


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


def run(strategies, cfg: GPTConfig, adamw: dict, batches: list, track_peak: bool = False, **build_kw) -> dict:
    """Train each strategy on this rank's rows of the same global ``batches``, one after another; ``build_kw``
    (``dtype``: float32 for the byte measurements, float64 for the equivalence proofs; ``optim``, ``mp``): as
    :func:`build`. Returns ``{strategy: {"losses" (mean over ranks), "params" (full), "held" (bytes after the
    backward of step 1), "comm" ({op: bytes sent} in step 1), "trace", "peak" (tensor bytes, ``track_peak``)}}``.
    """
    n, r = md.world_size(), md.rank()
    out = {}
    for s in strategies:
        trace = []
        model, opt = build(s, cfg, adamw, trace if s == "zero3" else None, **build_kw)
        losses, rec = [], {}
        for step, xy in enumerate(batches):
            xy = xy.chunk(n)[r].to(md.device())
            measure = step == 1  # step 0 warms up: buffers, AdamW's state
            if measure:
                trace.clear()
            tracker = tensor_memory_tracker(model, opt) if measure and track_peak else contextlib.nullcontext()
            with CommLog() as log, tracker, warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                loss = model(xy[:, :-1], xy[:, 1:])[1]
                loss.backward()
                if measure:
                    rec["held"] = state_bytes(model, opt)
                finish_step(s, model, opt, adamw)
            if measure:
                rec.update(comm={op: d["sent"] for op, d in log.by_op().items()}, trace=list(trace))
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
    clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), adamw["max_norm"])  # noqa: E731
    xys = [(xy[:, :-1], xy[:, 1:]) for xy in batches]
    losses = train_steps(model, opt, xys, before_step=clip if adamw.get("max_norm") else None)
    return dict(losses=losses, params=full_state_dict(model))


def different_start(cfg: GPTConfig, stage: int) -> None:
    """A mistake on purpose: every rank seeds its own model, so the ranks start from different weights."""
    torch.manual_seed(md.rank())
    zero(GPT(cfg), stage)


def toy_collectives(numel: int) -> dict:
    """The toy before "Your turn": x_r = arange(numel) + 100·r, zero-padded to a multiple of N, reduce-scattered
    (rank r: the sums of its shard) and all-gathered again; ``all_reduce`` of the unpadded x_r to compare."""
    n, r = md.world_size(), md.rank()
    x = torch.zeros(-(-numel // n) * n, dtype=torch.float64)
    x[:numel] = torch.arange(numel) + 100.0 * r
    shard, full, summed = x.new_empty(x.numel() // n), torch.empty_like(x), x[:numel].clone()
    dist.reduce_scatter_single(shard, x)
    dist.all_gather_single(full, shard)
    dist.all_reduce(summed)
    return dict(x=x, shard=shard, full=full, all_reduce=summed)


def zero_redundancy(cfg: GPTConfig, batches: list, sgd: dict) -> dict:
    """minipar's and PyTorch's ZeroRedundancyOptimizer around ``torch.optim.SGD(**sgd)``, float64, on this rank's
    rows: both runs' parameters, the elements this rank owns and the bytes of optimizer state (momentum) it holds."""
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
            finish_step("dp", model, opt, {})  # average the gradients; opt.step() steps and broadcasts its own
        out[name] = full_state_dict(model)
        if name == "minipar":
            out["owned"] = opt.owned_numel()
            out["state_bytes"] = state_bytes(None, opt.optim)["optimizer"]
    return out


def per_param_layout(cfg: GPTConfig) -> list:
    """On every rank: fully_shard on the units and the root, then walk ``named_modules()`` as any code
    would. Returns ``[(name, module type, local shape, full shape)]`` for every Linear/Embedding weight."""
    model, _ = build("zero3pp", cfg, dict(lr=1e-3, betas=(0.9, 0.95), weight_decay=0.0))
    return [
        (f"{name}.weight", type(m).__name__, tuple(m.weight.shape), tuple(m.weight.shard_spec.full_shape))
        for name, m in model.named_modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
    ]
