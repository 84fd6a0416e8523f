"""Experiment drivers for lesson 02 (data parallelism): child processes import them by name."""

import contextlib
import functools
import json
import pathlib
import time

import torch
import torch.distributed as dist

import minipar.runtime.dist as md
from minipar.comm.comm_log import CommLog
from minipar.course.capture import quiet_fds, raised
from minipar.course.clock_runs import fastest_on_clock, slowest_rank
from minipar.course.loop import corpus_batches
from minipar.course.schematic import Span
from minipar.data import builtin_corpus, random_tokens
from minipar.dp.ddp import DistributedDataParallel
from minipar.dp.sync import all_reduce_gradients, broadcast_parameters
from minipar.errors import ConfigError
from minipar.model.presets import MEDIUM, SMALL, seeded_gpt  # SMALL: the equivalence proof; MEDIUM: timings

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


def _torch_hook(state, bucket):
    """A Python DDP comm hook (divide, then all-reduce-sum), so CommLog can see PyTorch DDP's traffic."""
    buf = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])


def train(mode="ddp", steps=5, global_batch=8, micro=1, bucket_cap_mb=0.02, seed=0, overlap=True, dtype=torch.float64):
    """``steps`` AdamW steps on the global batch, ``micro`` micro-batches per rank (``no_sync`` for all but the last);
    mode ``"single"``, ``"ddp"`` (minipar), ``"naive"`` (``all_reduce_gradients``) or ``"torch"`` (PyTorch's DDP).
    float64 by default (the proof, see :data:`PARAM_BOUND`). Returns the global mean ``losses``, the final ``params``
    and the bytes ``sent`` in the last step (CommLog)."""
    rank, world = (0, 1) if mode == "single" else (md.rank(), md.world_size())
    dev = torch.device("cpu") if mode == "single" else md.device()  # cuda:LOCAL_RANK on NCCL
    model, opt = build(SMALL, seed, dtype)
    model.to(dev)
    net = model
    if mode == "ddp":
        net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, overlap=overlap)
    elif mode == "torch":
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
        net.register_comm_hook(None, _torch_hook)
    elif mode == "naive":
        broadcast_parameters(model)
    losses = []
    for x, y in corpus_batches(SMALL["block_size"], global_batch, steps, rank, world, seed):
        x, y, total = x.to(dev), y.to(dev), torch.zeros((), dtype=dtype, device=dev)
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
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"losses": losses, "params": params, "sent": log.total("sent"), "device": dev.type}


def prove(steps=5, global_batch=8):
    """Every variant on this world size, for the equivalence table."""
    return {
        "minipar DDP": train("ddp", steps, global_batch),
        "minipar DDP, 2 micro-batches": train("ddp", steps, global_batch, micro=2),
        "naive DP": train("naive", steps, global_batch),
        "torch DDP, 2 micro-batches": train("torch", steps, global_batch, micro=2),
    }


def throughput(local_batch=4, steps=8, warmup=2, bucket_cap_mb=1.0):
    """Samples per second of minipar DDP training (all ranks together), fixed batch per rank: ``{"samples_per_s",
    "cpu_s", "wall_s", "samples"}``; ``cpu_s``: the CPU time of all ranks (``time.process_time``), summed."""
    model, opt = build(MEDIUM)
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    x = torch.randint(0, builtin_corpus().vocab_size, (local_batch, MEDIUM["block_size"]))
    for i in range(warmup + steps):
        if i == warmup:
            dist.barrier()
            t0, c0 = time.perf_counter(), time.process_time()
        labelled_step(net, opt, x)
    seconds = slowest_rank(time.perf_counter() - t0)  # the slowest rank sets the pace
    cpu = torch.tensor([time.process_time() - c0], dtype=torch.float64)
    dist.all_reduce(cpu)  # CPU time of all ranks together
    samples = local_batch * md.world_size() * steps
    return {"samples_per_s": samples / seconds, "cpu_s": cpu.item(), "wall_s": seconds, "samples": samples}


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
    error = functools.partial(raised, catch=ConfigError, with_type=False)  # the ConfigError's message
    model, opt = build(SMALL, seed=md.rank())  # rank 1 seeds differently
    msgs = {"parameters differ, init_sync=False": error(lambda: DistributedDataParallel(model, init_sync=False))}
    net = DistributedDataParallel(model)  # init_sync=True: rank 0's copy wins
    msgs["init_sync=True fixed"] = f"{len(net.differed_at_start)} parameters differed and were copied from rank 0"
    x = torch.randint(0, builtin_corpus().vocab_size, (2, SMALL["block_size"]))

    def step_inside_no_sync():
        with net.no_sync():
            _, loss = net(x, x)
            loss.backward()
            opt.step()

    msgs["step() inside no_sync()"] = error(step_inside_no_sync)
    msgs["bucket_cap_mb=0"] = error(lambda: DistributedDataParallel(model, bucket_cap_mb=0))
    return msgs


def labelled_step(net, opt, x, label=lambda phase: contextlib.nullcontext()) -> None:
    """One training step on ``(x, x)``: its forward, backward and optimizer each inside ``label(phase)`` (if given)."""
    with label("forward"):
        _, loss = net(x, x)
    with label("backward"):
        loss.backward()
    with label("optimizer"):
        opt.step()
        opt.zero_grad(set_to_none=True)


def ddp_on_clock(ib: bool = False, tokens_there: int = 32768, local_batch: int = 4, steps: int = 5) -> dict:
    """minipar DDP steps of the MEDIUM GPT on the cluster clock, overlap on and off alternating; NVLink 4 and IB NDR
    slowed by ``t_here / t_there`` (this CPU's compute / an H100's on ``tokens_there`` tokens), so the all-reduce
    keeps its ratio to compute. ``ib``: one rank per node. Per overlap mode, the fastest step's ``virtual_s`` and
    this rank's clock record of it; plus ``t_here``, ``t_there``, the ``links`` and ``params``."""
    from minipar.clock import compute_seconds, slow_motion
    from minipar.comm.links import IB_NDR, NVLINK4
    from minipar.course.presets import h100_seconds

    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    model, opt = build(MEDIUM)
    runs = {ov: (DistributedDataParallel(model, bucket_cap_mb=0.5, overlap=ov), opt) for ov in (False, True)}
    net = runs[True][0]

    def fwd_bwd(i):  # calibration: compute only (no_sync: no all-reduce)
        with net.no_sync():
            net(x, x)[1].backward()
        net.module.zero_grad(set_to_none=True)

    here = compute_seconds(fwd_bwd, 3)  # one value on every rank: the links must be the same
    psi = sum(p.numel() for p in net.module.parameters())
    t_there = h100_seconds(psi, tokens_there)
    intra, inter = (slow_motion(link, here, t_there) for link in (NVLINK4, IB_NDR))

    out = {}
    step = lambda overlap, clk: labelled_step(*runs[overlap], x, clk.label)  # noqa: E731
    best = fastest_on_clock(step, runs, steps, (intra, inter), node_of=1 if ib else None)
    for ov, (v, clk) in best.items():  # events, durations, compute_s: what minipar.clock.replay needs
        durations = [end - start for _, start, end in clk.collectives]
        timeline = [tuple(s) for s in clk.timeline]
        out[ov] = dict(virtual_s=v, timeline=timeline, events=clk.events, durations=durations, compute_s=clk.compute_s)
    return dict(out, t_here=here, t_there=t_there, links=(intra, inter), params=psi)


def profile_step(out_dir: str, bucket_cap_mb: float = 0.5, local_batch: int = 4) -> dict:
    """One minipar DDP step of the MEDIUM GPT under ``torch.profiler`` (after 2 warm-up steps); each rank
    exports its Chrome trace to ``out_dir/rank{r}.json`` (open it in ui.perfetto.dev). Returns the step's
    bytes sent (CommLog), its per-bucket ``labels`` and the parameter count."""
    from torch.profiler import ProfilerActivity, profile, record_function

    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    model, opt = build(MEDIUM)
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    for _ in range(2):  # warm-up: buffers, AdamW's state
        labelled_step(net, opt, x, record_function)
    dist.barrier()
    with quiet_fds(), CommLog() as log, profile(activities=[ProfilerActivity.CPU]) as prof:
        labelled_step(net, opt, x, record_function)
    pathlib.Path(out_dir).mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(pathlib.Path(out_dir) / f"rank{md.rank()}.json"))
    labels = [(r.label, r.sent) for r in log.records]
    return {"sent": log.total("sent"), "labels": labels, "params": sum(p.numel() for p in model.parameters())}


def trace_lanes(path) -> dict:
    """The lanes of one rank's ``torch.profiler`` Chrome trace, in ms from the forward's start, as
    ``minipar.course.schematic`` spans: the step's phases (record_function) and gloo's all-reduces."""
    ev = [e for e in json.load(open(path, encoding="utf-8"))["traceEvents"] if e.get("ph") == "X"]
    phases = {e["name"]: e for e in ev if e["name"] in ("forward", "backward", "optimizer")}
    t0 = phases["forward"]["ts"]
    ms = lambda e: ((e["ts"] - t0) / 1e3, (e["ts"] + e["dur"] - t0) / 1e3)  # noqa: E731
    compute = [Span(*ms(e), "", name) for name, e in phases.items()]
    gloo = sorted((e for e in ev if e["name"] == "gloo:all_reduce"), key=lambda e: e["ts"])
    return {"compute": compute, "gloo": [Span(*ms(e), str(k), "comm") for k, e in enumerate(gloo)]}
