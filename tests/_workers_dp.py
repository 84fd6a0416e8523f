"""Data-parallel training loops the tests run on 1..4 ranks (importable by child processes).

``train_gpt(mode, ...)`` trains a small GPT for a few AdamW steps on the built-in corpus and
returns the losses and final parameters; ``mode="single"`` is the one-device reference (run in
the test process), the others run under ``minipar.launch``.
"""
import contextlib

import torch
import torch.distributed as dist

import minipar.dist as md
from minipar.data import CharCorpus, load_text, make_loader
from minipar.data_parallel import DistributedDataParallel, all_reduce_gradients, broadcast_parameters
from minipar.models import GPT, GPTConfig

CFG = dict(n_layer=2, n_head=2, d_model=32, block_size=32)
_CORPUS = None


def corpus():
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = CharCorpus(load_text())
    return _CORPUS


def build(seed=0):
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=corpus().vocab_size, **CFG))
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)


def train_gpt(mode="ddp", steps=4, global_batch=8, micro=1, bucket_cap_mb=0.02, seed=0, overlap=True):
    """Train ``steps`` AdamW steps; each rank's share of the global batch is cut into ``micro`` micro-batches.

    Returns ``{"losses": [global mean loss per step], "params": {name: tensor}}``.
    """
    rank, world = (0, 1) if mode == "single" else (md.rank(), md.world_size())
    loader = make_loader(corpus().split("train", CFG["block_size"]), global_batch, rank, world, seed=seed)
    model, opt = build(seed)
    if mode == "ddp":
        net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, overlap=overlap)
    elif mode == "torch":
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    else:
        net = model
        if mode == "naive":
            broadcast_parameters(model)
    losses = []
    for _ in range(steps):
        x, y = next(loader)
        total = torch.zeros(())
        for k, (xm, ym) in enumerate(zip(x.chunk(micro), y.chunk(micro))):
            last = k == micro - 1
            ctx = net.no_sync() if mode in ("ddp", "torch") and not last else contextlib.nullcontext()
            with ctx:
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
    return {"losses": losses, "params": {n: p.detach().clone() for n, p in model.named_parameters()}}


def train_variants(steps=4, global_batch=8):
    """The DP variants the equivalence test compares, in one launch: ``{name: train_gpt(...)}``."""
    return {"ddp": train_gpt("ddp", steps, global_batch),
            "ddp_accum": train_gpt("ddp", steps, global_batch, micro=2),
            "ddp_no_overlap": train_gpt("ddp", steps, global_batch, overlap=False),
            "naive": train_gpt("naive", steps, global_batch),
            "torch": train_gpt("torch", steps, global_batch, micro=2)}


def one_step_trace(bucket_cap_mb=0.02, overlap=True):
    """One DDP training step (after a warm-up step) under a CommLog: what was sent, and when."""
    from minipar.accounting import CommLog
    model, opt = build()
    net = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb, overlap=overlap)
    x = torch.randint(0, corpus().vocab_size, (2, CFG["block_size"]))
    for _ in range(2):
        with CommLog() as log:
            _, loss = net(x, x)
            loss.backward()
        opt.step()
        opt.zero_grad()
    return {"records": [(r.op, r.bytes, r.sent, r.label) for r in log.records],
            "buckets": [b.nbytes for b in net.buckets], "step": net.last_step, "times": net.last_times,
            "numel": sum(p.numel() for p in model.parameters())}


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
    x = torch.randint(0, corpus().vocab_size, (2, CFG["block_size"]))
    with net.no_sync():
        _, loss = net(x, x)
        loss.backward()
        if not outside:
            opt.step()
    opt.step()
