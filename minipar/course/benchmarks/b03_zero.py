"""Lesson 03 (ZeRO): ZeRO-3 step time (flat units, and per parameter in fp32 and under a bf16
MixedPrecisionPolicy) against PyTorch FSDP2's ``fully_shard`` with the same policy, minipar's
ZeroRedundancyOptimizer.step() against PyTorch's, and ZeRO-1/2/3 bytes per rank against the
formulas of Rajbhandari et al. 2020 (arXiv:1910.02054, §5; fp32 AdamW: 8Ψ + 8Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N).

Both timed strategies run in the same launch, one step of each in turn, so a busy machine slows them
alike; a step's time is the slowest rank's (barriers around it), and the ratio is of the medians.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from minipar.course.bench import Row
from minipar.course.zero_strategies import apply_strategy
from minipar.model.gpt import GPT, GPTConfig, num_params
from minipar.model.memory import tensor_memory_tracker
from minipar.runtime import dist as md
from minipar.runtime.launch import launch
from minipar.zero.flat import zero_bytes_formula

CFG = dict(vocab_size=96, block_size=64, n_layer=4, n_head=4, d_model=128)
N = 2


BF16 = (torch.bfloat16, torch.float32)  # (param_dtype, reduce_dtype), FSDP2's usual mixed-precision policy
TIMED = {"zero3": None, "fsdp2": None, "zero3pp": None, "zero3pp-bf16": BF16, "fsdp2-bf16": BF16}


def _build(strategy: str):
    """``zero1``..``zero3`` (flat units), ``zero3pp`` (minipar's per-parameter fully_shard) or ``fsdp2``
    (PyTorch's), ``-bf16`` for the bf16/fp32 policy (:func:`minipar.course.zero_strategies.apply_strategy`)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG))
    adamw = lambda m: torch.optim.AdamW(m.parameters(), lr=1e-3)  # noqa: E731
    return model, apply_strategy(model, strategy.split("-")[0], adamw, TIMED.get(strategy), lr=1e-3)


def _timed_step(model, opt, xy) -> float:
    dist.barrier()
    t = time.perf_counter()
    model(xy[:, :-1], xy[:, 1:])[1].backward()
    opt.step()
    opt.zero_grad()
    dist.barrier()
    return time.perf_counter() - t


def job(steps: int) -> dict:
    """On every rank: held bytes of ZeRO-1/2/3 after backward; then the :data:`TIMED` steps, interleaved."""
    g = torch.Generator().manual_seed(0)
    xy = torch.randint(0, CFG["vocab_size"], (8, CFG["block_size"] + 1), generator=g, device="cpu").chunk(
        md.world_size()
    )[md.rank()]
    import warnings

    held, peak = {}, {}
    for s in ("zero1", "zero2", "zero3"):
        model, opt = _build(s)
        for _ in range(2):  # the second step finds the optimizer state allocated: measure it
            tracker = tensor_memory_tracker(model, opt)
            with warnings.catch_warnings(), tracker:
                warnings.simplefilter("ignore", UserWarning)
                model(xy[:, :-1], xy[:, 1:])[1].backward()
                held[s] = opt.held_bytes()["total"]
                opt.step()
                opt.zero_grad()
        peak[s] = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
    runs = {s: _build(s) for s in TIMED}
    times = {s: [] for s in runs}
    for i in range(steps + 1):
        for s, (model, opt) in runs.items():
            t = _timed_step(model, opt, xy)
            if i:  # the first step of each is a warm-up
                times[s].append(t)
    return dict(held=held, peak=peak, times=times)


def zero_redundancy_job(steps: int) -> dict:
    """On every rank: ``opt.step()`` of minipar's and PyTorch's ZeroRedundancyOptimizer around
    torch.optim.AdamW on the same model and averaged gradients, interleaved; seconds per step."""
    from torch.distributed.optim import ZeroRedundancyOptimizer as TorchZeRO

    from minipar.zero.redundancy import ZeroRedundancyOptimizer

    g = torch.Generator().manual_seed(0)
    xy = torch.randint(0, CFG["vocab_size"], (8, CFG["block_size"] + 1), generator=g, device="cpu").chunk(
        md.world_size()
    )[md.rank()]
    runs = {}
    for name, cls in (("minipar", ZeroRedundancyOptimizer), ("torch", TorchZeRO)):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**CFG))
        runs[name] = (model, cls(model.parameters(), torch.optim.AdamW, lr=1e-3))
    times = {s: [] for s in runs}
    for i in range(steps + 1):
        for s, (model, opt) in runs.items():
            model(xy[:, :-1], xy[:, 1:])[1].backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            dist.barrier()
            t = time.perf_counter()
            opt.step()
            dist.barrier()
            if i:  # the first step of each allocates the optimizer state: a warm-up
                times[s].append(time.perf_counter() - t)
            opt.zero_grad()
    return times


def rows(quick: bool) -> list[Row]:
    zr = launch(zero_redundancy_job, world_size=N, args=(3 if quick else 15,), prefix=False)
    zstep = {s: statistics.median(max(r[s][i] for r in zr) for i in range(len(zr[0][s]))) for s in ("minipar", "torch")}
    zratio = zstep["minipar"] / zstep["torch"]
    out = launch(job, world_size=N, args=(3 if quick else 15,), prefix=False)
    psi = num_params(GPT(GPTConfig(**CFG)))
    step = {
        s: statistics.median(max(r["times"][s][i] for r in out) for i in range(len(out[0]["times"][s]))) for s in TIMED
    }
    model = f"GPT 4x{CFG['d_model']}, T={CFG['block_size']}, {N} ranks"
    pairs = [
        ("zero3", "fsdp2", f"ZeRO-3 (flat units) step vs FSDP2 fully_shard ({model})"),
        ("zero3pp", "fsdp2", f"ZeRO-3 per parameter (minipar fully_shard) step vs FSDP2, fp32 ({model})"),
        ("zero3pp-bf16", "fsdp2-bf16", f"minipar fully_shard vs FSDP2, MixedPrecisionPolicy(bf16, fp32) ({model})"),
    ]
    res = [
        Row(
            "03",
            title,
            step[a] / step[b],
            target="<= 1.3",
            ok=step[a] / step[b] <= 1.3,
            note=f"{step[a] * 1e3:.0f} ms vs {step[b] * 1e3:.0f} ms per step",
        )
        for a, b, title in pairs
    ] + [
        Row(
            "03",
            f"ZeroRedundancyOptimizer(AdamW).step() vs torch.distributed.optim's (GPT 4x{CFG['d_model']}, {N} ranks)",
            zratio,
            target="<= 1.5",
            ok=zratio <= 1.5,
            note=f"{zstep['minipar'] * 1e3:.1f} ms vs {zstep['torch'] * 1e3:.1f} ms per step() (median, slowest rank)",
        ),
    ]
    formulas = {1: "8Ψ+8Ψ/N", 2: "4Ψ+12Ψ/N", 3: "16Ψ/N"}
    for stage in (1, 2, 3):
        f = zero_bytes_formula(psi, stage, N)["total"]
        worst = max(r["held"][f"zero{stage}"] for r in out)
        res.append(
            Row(
                "03",
                f"ZeRO-{stage} model-state bytes per rank / formula {formulas[stage]} (fp32 AdamW)",
                worst / f,
                unit="",
                target="0.9 to 1.1",
                ok=0.9 <= worst / f <= 1.1,
                note=f"{worst:,} B held vs {f:,.0f} B (Ψ = {psi:,}, N = {N}); peak of all tensors in a "
                f"step (MemTracker, activations included) "
                f"{max(r['peak'][f'zero{stage}'] for r in out) / f:.2f}× formula",
            )
        )
    return res
