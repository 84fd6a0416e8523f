"""Experiment drivers for lesson 02 (data parallelism). They only call minipar and torch.

Child processes import them by name, so they live here and not in the notebook.
"""

import contextlib
import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.data import builtin_corpus, make_loader, random_tokens
from minipar.dp.ddp import DistributedDataParallel
from minipar.dp.sync import all_reduce_gradients, broadcast_parameters
from minipar.errors import ConfigError
from minipar.model.presets import (
    MEDIUM,
    SMALL,
    seeded_gpt,
)  # SMALL: the equivalence proof; MEDIUM: timelines, throughput

# The bounds of the equivalence proof (float64, lr 3e-3, 5 AdamW steps), derived, not fitted:
# reordering a float64 sum moves a gradient by δ ≤ n·2⁻⁵³·Σ|terms| ≲ 1e-13 here; AdamW's update
# lr·m̂/(sqrt(v̂)+eps) changes by at most lr·δ/eps per step (eps = 1e-8), i.e. ≤ 5·3e-3·1e-13/1e-8
# = 1.5e-7 after 5 steps even for a near-zero gradient; a real bug (a missing average, a skipped
# micro-batch) moves weights by ~lr = 3e-3 per step and losses by > 1e-3.
PARAM_BOUND = 1e-6
LOSS_BOUND = 1e-6


def build(cfg=SMALL, seed=0, dtype=torch.float32):
    """The GPT (parameters in ``dtype``) and its AdamW, seeded: every rank (and the single device) starts
    from the same weights (initialised in fp32, then cast, so fp32 and fp64 models start alike)."""
    model = seeded_gpt(cfg, dtype, seed)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def ddp_pair(bucket_cap_mb: float) -> dict:
    """``{overlap: (minipar DDP of the MEDIUM GPT, its AdamW)}`` for overlap off and on: two copies, same weights."""
    return {
        ov: (DistributedDataParallel(m, bucket_cap_mb=bucket_cap_mb, overlap=ov), o)
        for ov in (False, True)
        for m, o in [build(MEDIUM)]
    }


def _torch_hook(state, bucket):
    """A Python DDP comm hook (divide, then all-reduce-sum), so CommLog can see PyTorch DDP's traffic."""
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def train(mode="ddp", steps=5, global_batch=8, micro=1, bucket_cap_mb=0.02, seed=0, overlap=True, dtype=torch.float64):
    """``steps`` AdamW steps on the global batch; ``micro`` micro-batches per rank (``no_sync`` for all but the last).

    ``dtype`` defaults to float64: this is the equivalence proof, and in float64 summing the same
    numbers in another order (N ranks, micro-batches, another CPU's kernels) moves a result by
    ~1e-16 relative, while a real bug moves weights by ~lr per step (see :data:`PARAM_BOUND`).

    mode: ``"single"`` (one device, no process group), ``"ddp"`` (minipar), ``"naive"``
    (``all_reduce_gradients``), ``"torch"`` (``torch.nn.parallel.DistributedDataParallel``);
    ``overlap`` is passed to minipar's DDP.
    Returns ``{"losses", "params", "sent"}``: global mean loss per step, final parameters, and
    the bytes this rank sent in the last step (CommLog; 0 on one device).
    """
    rank, world = (0, 1) if mode == "single" else (md.rank(), md.world_size())
    loader = make_loader(builtin_corpus().split("train", SMALL["block_size"]), global_batch, rank, world, seed=seed)
    model, opt = build(SMALL, seed, dtype)
    net = model
    if mode == "ddp":
        net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, overlap=overlap)
    elif mode == "torch":
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        net.register_comm_hook(None, _torch_hook)
    elif mode == "naive":
        broadcast_parameters(model)
    losses = []
    for _ in range(steps):
        x, y = next(loader)
        total = torch.zeros((), dtype=dtype)
        with CommLog() as log:
            for k, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
                local = mode in ("ddp", "torch") and k < micro - 1
                with net.no_sync() if local else contextlib.nullcontext():
                    _, loss = net(xm, ym)
                    (loss / micro).backward()
                total += loss.detach() / micro
            if mode == "naive":
                all_reduce_gradients(model)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if world > 1:
            dist.all_reduce(total, op=dist.ReduceOp.AVG)
        losses.append(total.item())
    return {
        "losses": losses,
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "sent": log.total("sent"),
    }


def prove(steps=5, global_batch=8):
    """Every variant on this world size, for the equivalence table."""
    return {
        "minipar DDP": train("ddp", steps, global_batch),
        "minipar DDP, 2 micro-batches": train("ddp", steps, global_batch, micro=2),
        "naive DP": train("naive", steps, global_batch),
        "torch DDP, 2 micro-batches": train("torch", steps, global_batch, micro=2),
    }


def throughput(local_batch=4, steps=8, warmup=2, bucket_cap_mb=1.0):
    """Samples per second of minipar DDP training (all ranks together), fixed batch per rank.

    Returns ``{"samples_per_s", "cpu_s", "wall_s", "samples"}``: ``cpu_s`` is the CPU time all ranks
    used (``time.process_time``, every thread of each process, summed over ranks), so
    ``cpu_s / wall_s`` is how many cores the job got and ``samples / cpu_s`` the work per CPU-second.
    """
    model, opt = build(MEDIUM)
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    x = torch.randint(0, builtin_corpus().vocab_size, (local_batch, MEDIUM["block_size"]))
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
        _, loss = net(x, x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    cpu = torch.tensor([time.process_time() - c0], dtype=torch.float64)
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    dist.all_reduce(cpu)  # CPU time of all ranks together
    samples = local_batch * md.world_size() * steps
    return {
        "samples_per_s": samples / seconds.item(),
        "cpu_s": cpu.item(),
        "wall_s": seconds.item(),
        "samples": samples,
    }


def toy_async() -> list[str]:
    """Two async all-reduces on every rank: ``async_op=True`` returns a ``Work`` at once, ``wait()`` gives the sum."""
    r = md.rank()
    a, b = torch.full((3,), float(r + 1)), torch.full((2,), 10.0 * (r + 1))
    works = [dist.all_reduce(t, async_op=True) for t in (a, b)]  # issued in the same order on every rank
    lines = [f"rank {r}: dist.all_reduce(t, async_op=True) returned {type(works[0]).__name__} handles at once"]
    for work in works:
        work.wait()  # only now do a and b hold the sums
    return lines + [f"after wait(): a = {a.tolist()} (1 + 2 on every element), b = {b.tolist()} (10 + 20)"]


def bad_inputs():
    """Each mistake of the lesson on real ranks; returns the error messages (rank 0's)."""
    msgs = {}
    model, opt = build(SMALL, seed=md.rank())  # rank 1 seeds differently
    try:
        DistributedDataParallel(model, init_sync=False)
    except ConfigError as e:
        msgs["parameters differ, init_sync=False"] = str(e)
    net = DistributedDataParallel(model)  # init_sync=True: rank 0's copy wins
    msgs["init_sync=True fixed"] = f"{len(net.differed_at_start)} parameters differed and were copied from rank 0"
    x = torch.randint(0, builtin_corpus().vocab_size, (2, SMALL["block_size"]))
    try:
        with net.no_sync():
            _, loss = net(x, x)
            loss.backward()
            opt.step()
    except ConfigError as e:
        msgs["step() inside no_sync()"] = str(e)
    try:
        DistributedDataParallel(model, bucket_cap_mb=0)
    except ConfigError as e:
        msgs["bucket_cap_mb=0"] = str(e)
    return msgs


def ddp_on_clock(
    ib: bool = False, tokens_there: int = 32768, local_batch: int = 4, steps: int = 5, bucket_cap_mb: float = 0.5
) -> dict:
    """minipar DDP steps of the MEDIUM GPT on the cluster clock (``minipar.clock``), overlap on and off
    alternating step by step, links in slow motion: each rank's step stands for an H100's step on
    ``tokens_there`` tokens of this model (989 TFLOP/s bf16 at an assumed 50 %; 6·Ψ·tokens FLOPs,
    Kaplan et al. 2020, arXiv:2001.08361 §2.1), ``t_there`` seconds; here it takes ``t_here`` CPU
    seconds (the slowest rank's fastest of 3 calibration steps without communication); NVLink 4 and
    IB NDR are slowed by ``t_here / t_there``, so the Ψ gradients' all-reduce keeps the ratio to
    compute it has on the cluster at that many tokens per GPU.
    ``ib``: one rank per node (every all-reduce crosses InfiniBand), else one node (NVLink).

    Returns, per overlap mode, the fastest step's virtual seconds (the last rank to finish), this
    rank's clock timeline of it (labels forward / backward / optimizer) and what
    :func:`minipar.clock.replay` needs (its events, the all-reduces' durations, its compute seconds),
    plus ``t_here``, ``t_there`` and the links used.
    """
    from minipar.clock import ClusterClock, compute_seconds, slow_motion
    from minipar.comm.links import IB_NDR, NVLINK4
    from minipar.course.presets import h100_seconds

    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    runs = ddp_pair(bucket_cap_mb)
    net = runs[True][0]

    def fwd_bwd(i):  # calibration: compute only (no_sync: no all-reduce)
        with net.no_sync():
            net(x, x)[1].backward()
        net.module.zero_grad(set_to_none=True)

    here = compute_seconds(fwd_bwd, 3)  # one value on every rank: the links must be the same
    psi = sum(p.numel() for p in net.module.parameters())
    t_there = h100_seconds(psi, tokens_there)
    intra, inter = (slow_motion(link, here, t_there) for link in (NVLINK4, IB_NDR))
    best: dict = {}
    for i in range(steps + 1):
        for overlap, (ddp, opt) in runs.items():
            with ClusterClock(intra, inter, node_of=1 if ib else None) as clk:
                with clk.label("forward"):
                    _, loss = ddp(x, x)
                with clk.label("backward"):
                    loss.backward()
                with clk.label("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            v = torch.tensor([clk.now], dtype=torch.float64)
            dist.all_reduce(v, op=dist.ReduceOp.MAX)
            if i > 0 and v.item() < best.get(overlap, (float("inf"),))[0]:
                durations = [end - start for _, start, end in clk.collectives]
                best[overlap] = (v.item(), [tuple(s) for s in clk.timeline], clk.events, durations, clk.compute_s)
    keys = ("virtual_s", "timeline", "events", "durations", "compute_s")  # the last three: for minipar.clock.replay
    return dict(
        {ov: dict(zip(keys, b)) for ov, b in best.items()},
        t_here=here,
        t_there=t_there,
        links=(intra, inter),
        params=psi,
    )


@contextlib.contextmanager
def _quiet():
    """Silence the C++ profiler's start/stop log lines (they carry a timestamp) on this process's stdout/stderr."""
    import os
    import sys

    sys.stdout.flush(), sys.stderr.flush()
    saved, null = [os.dup(fd) for fd in (1, 2)], os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            os.dup2(null, fd)
        yield
    finally:
        for fd, s in zip((1, 2), saved):
            os.dup2(s, fd)
            os.close(s)
        os.close(null)


def profile_step(out_dir: str, bucket_cap_mb: float = 0.5, local_batch: int = 4) -> dict:
    """One minipar DDP step of the MEDIUM GPT under ``torch.profiler`` (after 2 warm-up steps); each rank
    exports its Chrome trace to ``out_dir/rank{r}.json`` (open it in ui.perfetto.dev). Returns the step's
    bytes sent (CommLog), its per-bucket ``labels`` and the parameter count."""
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile, record_function

    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    model, opt = build(MEDIUM)
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    for i in range(3):
        dist.barrier()
        with (
            _quiet() if i == 2 else contextlib.nullcontext(),
            CommLog() as log,
            profile(activities=[ProfilerActivity.CPU]) if i == 2 else contextlib.nullcontext() as prof,
        ):
            for phase in ("forward", "backward", "optimizer"):
                with record_function(phase):
                    if phase == "forward":
                        _, loss = net(x, x)
                    elif phase == "backward":
                        loss.backward()
                    else:
                        opt.step()
                        opt.zero_grad(set_to_none=True)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(Path(out_dir) / f"rank{md.rank()}.json"))
    return {"sent": log.total("sent"), "labels": [(r.label, r.sent) for r in log.records],
            "params": sum(p.numel() for p in model.parameters())}  # fmt: skip


def trace_lanes(path) -> dict:
    """The lanes of one rank's ``torch.profiler`` Chrome trace, in ms from the forward's start, as
    ``minipar.course.schematic`` spans: the step's phases (record_function) and gloo's all-reduces."""
    import json

    from minipar.course.schematic import Span

    ev = [e for e in json.load(open(path, encoding="utf-8"))["traceEvents"] if e.get("ph") == "X"]
    phases = {e["name"]: e for e in ev if e["name"] in ("forward", "backward", "optimizer")}
    t0 = phases["forward"]["ts"]
    ms = lambda e: ((e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3)  # noqa: E731
    compute = [Span(*ms(e), "", name) for name, e in phases.items()]
    gloo = sorted((e for e in ev if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    return {"compute": compute, "gloo": [Span(*ms(e), str(k), "comm") for k, e in enumerate(gloo)]}
