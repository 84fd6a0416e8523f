"""Rank functions for tests/test_zero_redundancy.py (importable by child processes).

A small GPT with tied weights (``wte.weight is lm_head.weight``), in float64, trained on the same
global batches of 6 sequences (divisible by 2 and 3 ranks, so the mean of the per-rank means is the
global mean) with one optimizer three ways: minipar's ZeroRedundancyOptimizer, PyTorch's
``torch.distributed.optim.ZeroRedundancyOptimizer``, and the plain optimizer on one device.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZeRO

import minipar.runtime.dist as md
from minipar.model.gpt import GPT, GPTConfig
from minipar.zero.redundancy import ZeroRedundancyOptimizer

CFG = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, d_model=32, tie_weights=True)
OPTS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    "adamw": (torch.optim.AdamW, dict(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1)),
}
STEPS = 3


def batches(steps: int = STEPS, batch: int = 6, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, CFG.vocab_size, (batch, CFG.block_size + 1), generator=g) for _ in range(steps)]


def model64() -> GPT:
    torch.manual_seed(0)
    return GPT(CFG).to(torch.float64)


def decay_split(model) -> tuple[list, list]:
    """AdamW's usual rule: weight decay on matrices, not on vectors (two param groups)."""
    ps = list(model.parameters())  # tied weights appear once
    return [p for p in ps if p.dim() >= 2], [p for p in ps if p.dim() < 2]


def make(impl: str, opt: str, params, **kw):
    cls, hyper = OPTS[opt]
    hyper = {**hyper, **kw}
    if impl == "minipar":
        return ZeroRedundancyOptimizer(params, cls, **hyper)
    if impl == "torch":
        return TorchZeRO(params, cls, **hyper)
    return cls(params, **hyper)


def train(model, o, data, steps=None) -> None:
    n, r = md.world_size(), md.rank()
    for xy in data[:steps]:
        xy = xy.chunk(n)[r] if n > 1 else xy
        model(xy[:, :-1], xy[:, 1:])[1].backward()
        if n > 1:
            for p in model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)  # what DDP does before step()
        o.step()
        o.zero_grad()


def params_of(model) -> dict:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def single_device(opt: str, groups: bool = False) -> dict:
    """One process, the whole batch, the plain optimizer (two groups if ``groups``)."""
    model = model64()
    if groups:
        decay, rest = decay_split(model)
        o = make("single", opt, [{"params": decay}, {"params": rest, "weight_decay": 0.0}])
    else:
        o = make("single", opt, model.parameters())
    train(model, o, batches())
    return params_of(model)


def compare(opt: str) -> dict:
    """On every rank: parameters after STEPS steps with minipar's and PyTorch's ZeRO (a list of
    parameters), minipar's from a generator, and minipar's/PyTorch's with a second group added by
    ``add_param_group`` (AdamW's decay rule); plus the partition and each rank's state size."""
    out = {}
    for impl in ("minipar", "torch"):
        model = model64()
        o = make(impl, opt, list(model.parameters()))
        train(model, o, batches())
        out[impl] = params_of(model)
        if impl == "minipar":
            out["owned"] = [o.owned_numel(r) for r in range(md.world_size())]
            out["state_numel"] = sum(
                v.numel()
                for st in (o.optim.state.values() if o.optim else [])
                for v in st.values()
                if torch.is_tensor(v) and v.dim() > 0
            )
            out["groups"] = [len(g["params"]) for g in o.param_groups]
    model = model64()
    o = make("minipar", opt, (p for p in model.parameters()))  # a generator: consumed once
    train(model, o, batches())
    out["generator"] = params_of(model)
    for impl in ("minipar", "torch"):
        model = model64()
        decay, rest = decay_split(model)
        o = make(impl, opt, decay)
        o.add_param_group({"params": rest, "weight_decay": 0.0})
        train(model, o, batches())
        out[f"{impl}_groups"] = params_of(model)
    return out


def round_trip(opt: str) -> dict:
    """Train 2 steps, consolidate the state on rank 0, rebuild model + optimizer from it on every
    rank (as a restart would), train step 3; against 3 uninterrupted steps. Also returns rank 0's
    consolidated state dict (unsharded format) for comparison with the plain optimizer's."""
    data = batches()
    model = model64()
    o = make("minipar", opt, list(model.parameters()))
    train(model, o, data, steps=2)
    o.consolidate_state_dict(to=0)
    sd = o.state_dict() if md.rank() == 0 else None
    try:
        o.state_dict() if md.rank() != 0 else None
        not_consolidated = None
    except Exception as e:  # noqa: BLE001 (the test checks the type and text)
        not_consolidated = (type(e).__name__, str(e))
    box = [(sd, params_of(model))]
    dist.broadcast_object_list(box, src=0)
    sd0, weights = box[0]
    train(model, o, data[2:])  # uninterrupted: step 3
    resumed = model64()
    with torch.no_grad():
        for k, p in resumed.named_parameters():
            p.copy_(weights[k])
    o2 = make("minipar", opt, list(resumed.parameters()))
    o2.load_state_dict(sd0)
    train(resumed, o2, data[2:])
    return {
        "uninterrupted": params_of(model),
        "resumed": params_of(resumed),
        "state_dict": sd,
        "not_consolidated": not_consolidated,
    }


def single_state_dict(opt: str) -> dict:
    """The plain optimizer's state dict after 2 steps on one device."""
    model = model64()
    o = make("single", opt, list(model.parameters()))
    train(model, o, batches(), steps=2)
    return o.state_dict()
