"""Experiment drivers for lesson 09 (communication is the bottleneck). They only call minipar and torch;
child processes import them by name, so they live here and not in the notebook."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.course.bench import median_time, median_times
from minipar.course.loop import corpus_batches, train_steps
from minipar.course.verify import same_run
from minipar.data import builtin_corpus, make_loader, random_tokens
from minipar.dp.compression import BF16Compression, make_compressor
from minipar.dp.ddp import DistributedDataParallel
from minipar.dp.param_server import flat_params
from minipar.model.gpt import GPT
from minipar.model.presets import MEDIUM, SMALL, seeded_gpt  # SMALL: proofs (float64); MEDIUM: timings
from minipar.tp.overlap import allgather_matmul, matmul_reducescatter

# ---- 1. why: compute vs communication, a model and a measurement -------------------------------
# The ratio T_comm / T_compute from FLOPs and the α–β model of lesson 01 (bandwidth term only).


def dp_ratio(k: float, F: float, beta: float, n: int = 64) -> float:
    """DP: ring all-reduce of 2Ψ bf16 bytes (2(n−1)/n · 2Ψ/β) over 6Ψk FLOPs at F FLOP/s; Ψ cancels."""
    return 2 * (n - 1) / n * 2 / beta / (6 * k / F)


def dp_break_even(F: float, beta: float, n: int = 64) -> float:
    """Tokens per GPU per step where :func:`dp_ratio` = 1."""
    return 2 * (n - 1) / n * 2 * F / (6 * beta)


def tp_ratio(t: int, h: int, F: float, beta: float) -> float:
    """Megatron TP per layer: 4 all-reduces of b·s·h bf16 activations over 72·b·s·h²/t FLOPs = 2(t−1)F/(9hβ)."""
    return 2 * (t - 1) * F / (9 * h * beta)


def tp_break_even(t: int, F: float, beta: float) -> float:
    """Hidden size where :func:`tp_ratio` = 1."""
    return 2 * (t - 1) * F / (9 * beta)


def dp_step_split(repeats: int = 5, local_batch: int = 4) -> dict:
    """On every rank: median seconds of forward+backward and of the gradient all-reduce (one flat buffer)."""
    model = seeded_gpt(MEDIUM, torch.float32)
    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())

    def forward_backward():
        model.zero_grad(set_to_none=True)
        model(x, x)[1].backward()

    compute = median_time(forward_backward, repeats, barrier=True)
    flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    comm = median_time(lambda: dist.all_reduce(flat), repeats, barrier=True) if md.world_size() > 1 else 0.0
    return {"compute": compute, "comm": comm, "params": sum(p.numel() for p in model.parameters())}


# ---- 2. overlap: real traces ---------------------------------------------------------------------
def ddp_bucket_trace(bucket_cap_mb: float = 0.5, local_batch: int = 4, steps: int = 3) -> dict:
    """minipar DDP (lesson 02), overlap on: per bucket (ready, launch, done) and the backward span of the last step,
    in seconds from the start of its backward (``perf_counter``)."""
    model = seeded_gpt(MEDIUM, torch.float32)
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    for _ in range(steps):
        dist.barrier()
        _, loss = net(x, x)
        t0 = time.perf_counter()
        loss.backward()
        model.zero_grad(set_to_none=True)
    b_end = net.last_times["backward_end"] - t0
    buckets = [(b["bucket"], b["ready"] - t0, b["launch"] - t0, b["done"] - t0) for b in net.last_step]
    return {"backward_end": b_end, "sync_end": net.last_times["sync_end"] - t0, "buckets": buckets}


# ZeRO-3 forward prefetch, traced
def zero3_prefetch_trace(local_batch: int = 4, steps: int = 3) -> dict:
    """minipar ZeRO-3 (lesson 03) without and with forward prefetch (``False``/``True``): the last step's forward
    timeline ``[(row, unit, t0, t1)]`` in seconds from its start; ``same``: losses and parameters bit-identical;
    ``early``: with prefetch, every unit's gather issued before the previous unit computed. MEDIUM, fp32."""
    from minipar.zero import zero

    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    out, results = {}, {}
    for prefetch in (False, True):
        model = seeded_gpt(MEDIUM, torch.float32)
        timeline: list = []
        opt = zero(model, 3, lr=1e-3, prefetch=prefetch, timeline=timeline)
        losses = []
        for _ in range(steps):
            dist.barrier()
            timeline.clear()
            t0 = time.perf_counter()
            _, loss = model(x, x)
            fwd = [(row, u, a - t0, b - t0) for row, u, a, b in timeline]
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        out[prefetch] = fwd
        results[prefetch] = (losses, opt.full_state_dict())
    same = same_run(results[False], results[True])
    gathers = {u: a for row, u, a, _ in out[True] if row == "all-gather"}
    computes = [(u, a) for row, u, a, _ in out[True] if row == "compute"]
    early = all(gathers[nxt] < a for (_, a), (nxt, _) in zip(computes, computes[1:]))
    return {"same": same, "early": early, False: out[False], True: out[True]}


# TP all-gather + GEMM
def tp_overlap(T_local: int = 256, d_in: int = 512, d_out: int = 512, repeats: int = 5) -> dict:
    """Overlapped vs gather-then-GEMM on this rank: the largest difference from the full GEMM (float64), and the
    median wall-clock seconds of each (float32, their runs interleaved, a barrier before each)."""
    n, me = md.world_size(), md.rank()
    g = torch.Generator().manual_seed(0)
    full64 = torch.randn(2, n * T_local, d_in, generator=g, dtype=torch.float64)
    w64 = torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    x64 = full64[:, me * T_local : (me + 1) * T_local]
    diff = {ov: (allgather_matmul(x64, w64, overlap=ov) - full64 @ w64.t()).abs().max().item() for ov in (True, False)}
    x, w = x64.float(), w64.float()
    fns = {ov: (lambda ov=ov: allgather_matmul(x, w, overlap=ov)) for ov in (False, True)}
    return {"diff": diff, "time": median_times(fns, repeats, barrier=True)}


def tp_reducescatter(T_local: int = 64, d_in_local: int = 32, d_out: int = 48) -> dict:
    """GEMM + reduce-scatter (minipar.tp.overlap.matmul_reducescatter), both modes, float64: the largest
    difference from this rank's rows of the full Σ x·Wᵀ, and the elements it sent (CommLog)."""
    n, me = md.world_size(), md.rank()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, n * T_local, n * d_in_local, generator=g, dtype=torch.float64)
    w = torch.randn(d_out, n * d_in_local, generator=g, dtype=torch.float64)
    cols, ref = slice(me * d_in_local, (me + 1) * d_in_local), (x @ w.t())[:, me * T_local : (me + 1) * T_local]
    out = {}
    for ov in (True, False):
        with CommLog() as log:
            y = matmul_reducescatter(x[..., cols].contiguous(), w[:, cols].contiguous(), overlap=ov)
        out[ov] = {"diff": (y - ref).abs().max().item(), "sent": log.total("sent") // 8}
    return out | {"formula": (n - 1) * 2 * T_local * d_out}


# ---- 3. compression -----------------------------------------------------------------------------
def main_job_losses(method: str, steps: int = 200) -> dict:
    """The main job's training loop on this dp group with ``--grad-compression method``: losses per step."""
    from minipar.course.presets import tiny_train_config
    from minipar.train import train

    cfg = tiny_train_config(
        steps, block_size=64, d_model=64, lr=3e-3, warmup=10, eval_every=10 * steps, grad_compression=method
    )
    t = time.perf_counter()
    losses = [r["loss"] for r in train(cfg, progress="none") if "loss" in r]
    return {"losses": losses, "seconds": time.perf_counter() - t}


def bytes_per_step(ratio: float = 0.01, rank: int = 4) -> dict:
    """Bytes each compressor hands to the collectives for the main job's default GPT (one step), measured."""
    from minipar.job.config import TrainConfig

    torch.manual_seed(0)
    model = GPT(TrainConfig().gpt(builtin_corpus().vocab_size)).to(torch.float32)  # the main job's defaults
    out = {}
    for method, kw in [("none", {}), ("bf16", {}), ("topk", {"ratio": ratio}), ("powersgd", {"rank": rank})]:
        grads = [torch.randn_like(p) for p in model.parameters()]
        with CommLog() as log:
            extra = {"start_iter": 0} if method == "powersgd" else {}  # past the exact warm-up steps
            handed = make_compressor(method, **kw, **extra).all_reduce_(grads)
        out[method] = {"handed": handed, "sent": log.total("sent")}
    out["shapes"] = [tuple(p.shape) for p in model.parameters()]
    return out


def native_fp16_hook(steps: int = 3) -> list[torch.Tensor]:
    """torch DDP + ``fp16_compress_hook`` vs minipar's BF16Compression(float16) after local backward."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

    batches = corpus_batches(SMALL["block_size"], 8, steps, md.rank(), md.world_size())
    out = []
    for native in (True, False):
        model = seeded_gpt(SMALL, torch.float32)
        net = torch.nn.parallel.DistributedDataParallel(model) if native else model
        if native:
            net.register_comm_hook(None, fp16_compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        comp = BF16Compression(torch.float16)
        hook = None if native else lambda: comp.all_reduce_([p.grad for p in model.parameters()])
        train_steps(net, opt, batches, before_step=hook)
        out.append(flat_params(model))
    return out


def native_powersgd(steps: int = 200, rank: int = 4) -> dict:
    """Losses of the same small GPT trained with torch DDP + ``powerSGD_hook`` and with minipar's PowerSGD."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    cfg = {**SMALL, "d_model": 64, "block_size": 64}  # SMALL, twice as wide and with twice the context
    batches = corpus_batches(cfg["block_size"], 8, steps, md.rank(), md.world_size())
    out = {}
    for kind in ("torch", "minipar", "none"):
        model = seeded_gpt(cfg, torch.float32)
        # ONE bucket: powerSGD_hook issues its P and Q all-reduces from future callbacks; with several
        # buckets on gloo two ranks can issue them in different orders and hang (seen here: a 45 s timeout)
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100) if kind == "torch" else model
        if kind == "torch":
            # error feedback and warm start (minipar's PowerSGD does both) are PowerSGDState's defaults
            state = psgd.PowerSGDState(
                None, matrix_approximation_rank=rank, start_powerSGD_iter=2, min_compression_rate=0
            )
            net.register_comm_hook(state, psgd.powerSGD_hook)
        kw = {"rank": rank, "start_iter": 2} if kind == "minipar" else {}
        comp = make_compressor("powersgd" if kind == "minipar" else "none", **kw)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
        hook = None if kind == "torch" else lambda: comp.all_reduce_([p.grad for p in model.parameters()])
        out[kind] = train_steps(net, opt, batches, before_step=hook, mean_over_ranks=True)
    return out


# ---- 5. the lesson 02 loop with HF Accelerate ----------------------------------------------------
def lesson02_loop(use_accelerate: bool, steps: int = 5, global_batch: int = 8) -> dict:
    """Lesson 02's loop: minipar DDP by hand, or the same loop written with ``accelerate``. float64."""
    loader = make_loader(builtin_corpus().split("train", SMALL["block_size"]), global_batch, md.rank(), md.world_size())
    batches = [next(loader) for _ in range(steps)]
    model = seeded_gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    t0 = time.perf_counter()
    if use_accelerate:
        from accelerate import Accelerator

        acc = Accelerator(cpu=True)
        net, opt = acc.prepare(model, opt)  # wraps in torch DDP on the existing process group
        backward = acc.backward
    else:
        net = DistributedDataParallel(model, bucket_cap_mb=1)
        backward = torch.Tensor.backward
    t1 = time.perf_counter()
    losses = train_steps(net, opt, batches, backward=backward, mean_over_ranks=True)
    t2 = time.perf_counter()
    info = {}
    if use_accelerate:
        info = {
            "wrapped": type(net).__name__,
            "distributed_type": str(acc.distributed_type).split(".")[-1],
            "num_processes": acc.num_processes,
        }
    return {"losses": losses, "params": flat_params(model), "setup": t1 - t0, "step": (t2 - t1) / steps, **info}
