"""Experiment drivers for lesson 02 (data parallelism). They only call minipar and torch.

Child processes import them by name, so they live here and not in the notebook.
"""

import contextlib
import time

import torch
import torch.distributed as dist

import minipar.dist as md
from minipar.comm.comm_log import CommLog
from minipar.data import builtin_corpus, make_loader
from minipar.dp.ddp import DistributedDataParallel
from minipar.dp.sync import all_reduce_gradients, broadcast_parameters
from minipar.errors import ConfigError
from minipar.models import GPT, GPTConfig
from minipar.presets import MEDIUM, SMALL  # SMALL: the equivalence proof; MEDIUM: timelines, throughput

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
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=builtin_corpus().vocab_size, **cfg)).to(dtype)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


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
    x = torch.randint(
        0,
        builtin_corpus().vocab_size,
        (local_batch, MEDIUM["block_size"]),
        generator=torch.Generator().manual_seed(md.rank()),
    )
    runs, traces = {}, {False: [], True: []}
    for overlap in (False, True):
        model, opt = build(MEDIUM)
        runs[overlap] = (DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, overlap=overlap), opt)
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
