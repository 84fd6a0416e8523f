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


def timeline(bucket_cap_mb=0.5, local_batch=4, steps=9):
    """Time the phases of training steps with and without overlap (``time.perf_counter``, seconds).

    Both modes do the same work (same model, same input on each rank) and alternate step by step
    (two model copies), so a busy moment of the machine hits both; compare medians over the steps
    after the first, with their spread. Returns ``{overlap: [trace of each step]}`` with a trace ``{"t0": forward start,
    "t": {phase: time}, "buckets": [...], "labels": [(bucket label, bytes sent)], "sent": bytes,
    "step": seconds}`` (times relative to ``t0``; ``perf_counter`` is the machine's monotonic clock,
    so ``t0`` compares across ranks), and ``"params"``: the parameter count.
    """
    x = random_tokens(local_batch, MEDIUM["block_size"], md.rank())
    runs, traces = ddp_pair(bucket_cap_mb), {False: [], True: []}
    for _ in range(steps):
        for overlap, (net, opt) in runs.items():
            dist.barrier()
            with CommLog() as log:
                _, loss = net(x, x)
                t_bwd = time.perf_counter()
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t_opt = time.perf_counter()
            t, t0 = net.last_times, net.last_times["forward_start"]
            phases = dict(
                forward_end=t["forward_end"],
                backward_start=t_bwd,
                backward_end=t["backward_end"],
                sync_end=t["sync_end"],
                step_end=t_opt,
            )
            traces[overlap].append(
                {
                    "t": {k: v - t0 for k, v in phases.items()},
                    "buckets": [{**b, **{k: b[k] - t0 for k in ("ready", "launch", "done")}} for b in net.last_step],
                    "labels": [(r.label, r.sent) for r in log.records],
                    "sent": log.total("sent"),
                    "step": t_opt - t0,
                    "t0": t0,
                }
            )
    out = dict(traces)
    out["params"] = sum(p.numel() for p in runs[True][0].module.parameters())
    return out


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

    Returns, per overlap mode, the fastest step's virtual seconds (the last rank to finish) and this
    rank's clock timeline of it (labels forward / backward / optimizer), plus ``t_here``, ``t_there``
    and the links used.
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
                best[overlap] = (v.item(), [tuple(s) for s in clk.timeline])
    return dict(
        {ov: dict(virtual_s=b[0], timeline=b[1]) for ov, b in best.items()},
        t_here=here,
        t_there=t_there,
        links=(intra, inter),
        params=psi,
    )


def draw_wall_timeline(tl: dict) -> None:
    """The wall-clock timeline of lesson 02 (``tl[overlap]``: the median step of :func:`timeline` on
    rank 0, with ``"rank1"``): compute lanes of both ranks and rank 0's all-reduce lane, per mode."""
    import matplotlib.pyplot as plt

    def compute_lane(ax, y, t, bks, shift=0.0):
        ms = lambda s: 1e3 * (s + shift)  # noqa: E731
        ax.barh(y, 1e3 * t["forward_end"], left=ms(0), color="tab:blue", label="forward" if y == 1 else None)
        edges = [t["backward_start"]] + [b["ready"] for b in bks]
        for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
            ax.barh(y, 1e3 * (b - a), left=ms(a), color="tab:orange" if i % 2 == 0 else "navajowhite",
                    edgecolor="white", label="backward (per bucket)" if i == 0 and y == 1 else None)  # fmt: skip
        ax.barh(y, 1e3 * (t["sync_end"] - t["backward_end"]), left=ms(t["backward_end"]), color="lightgrey",
                label="wait for all-reduce" if y == 1 else None)  # fmt: skip
        ax.barh(y, 1e3 * (t["step_end"] - t["sync_end"]), left=ms(t["sync_end"]), color="tab:green",
                label="optimizer" if y == 1 else None)  # fmt: skip

    fig, axes = plt.subplots(2, 1, figsize=(10, 3.8), sharex=True)
    for ax, overlap in zip(axes, (False, True)):
        r0, r1 = tl[overlap], tl[overlap]["rank1"]
        compute_lane(ax, 1, r0["t"], r0["buckets"])
        compute_lane(ax, 2, r1["t"], r1["buckets"], shift=r1["t0"] - r0["t0"])
        prev_done = 0.0
        for b in r0["buckets"]:  # a bar starts at the bucket's launch, or when the one before it completed
            start = max(b["launch"], prev_done)
            ax.barh(0, 1e3 * max(b["done"] - start, 2e-4), left=1e3 * start,
                    color=plt.cm.tab10.colors[b["bucket"] % 10], edgecolor="black", linewidth=0.3)  # fmt: skip
            if 1e3 * (b["done"] - start) > 3:
                ax.text(1e3 * (start + b["done"]) / 2, 0, str(b["bucket"]), fontsize=7, ha="center", va="center")
            prev_done = max(prev_done, b["done"])
        ax.set_yticks([0, 1, 2], ["all-reduce\n(rank 0)", "rank 0", "rank 1"])
        what = "overlap: each bucket launched when full" if overlap else "no overlap: all buckets after backward"
        ax.set_title(f"WALL CLOCK of this machine — {what}")
    axes[0].legend(loc="upper center", bbox_to_anchor=(0.5, 1.6), fontsize=8, ncol=4)
    axes[1].set_xlabel("ms since the forward started (rank 0)")
    plt.tight_layout()
    plt.show()
