"""Checks for lesson 02: bucketing rules, then data-parallel training on real ranks against one device.

The model (float64): an embedding tied to the output head (one parameter used twice), a frozen
linear layer (``requires_grad=False``), and layers larger than the bucket cap. Trained 3 SGD steps
on N = 1, 3 and 4 ranks, each on its share of a 12-sequence batch, it must equal one device on
the whole batch to float64 rounding (bound 1e-12).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from exercises.checks.common import EXACT, CheckFailed, call, max_diff, run_ranks

TITLE = "data parallel"
MODULE = "ex02_data_parallel"
CAP = 1024  # bytes: 128 float64 values
BATCH, T, V, D = 12, 5, 11, 8
STEPS, LR = 3, 0.5


class Net(nn.Module):
    """Tied embedding/head, a frozen layer, a layer larger than a bucket."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.frozen = nn.Linear(D, D)
        self.frozen.requires_grad_(False)
        self.big = nn.Linear(D, 64)
        self.small = nn.Linear(64, D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, idx, targets):
        h = self.frozen(self.emb(idx))
        h = self.small(torch.tanh(self.big(h)))
        return F.cross_entropy(self.head(h).reshape(-1, V), targets.reshape(-1))


def build():
    torch.manual_seed(0)
    return Net().double()


def data():
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randint(0, V, (BATCH, T), generator=g), torch.randint(0, V, (BATCH, T), generator=g))
        for _ in range(STEPS)
    ]


def reference(lr_scale: float = 1.0):
    """One device, whole batch. ``lr_scale=N`` is what a missing ÷N gives (plain SGD)."""
    model = build()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR * lr_scale)
    for x, y in data():
        model(x, y).backward()
        opt.step()
        opt.zero_grad()
    return {k: v.clone() for k, v in model.state_dict().items()}


def train_worker(module):
    import torch.distributed as dist

    from minipar import dist as mdist

    mod = importlib.import_module(module)
    n, r = mdist.world_size(), mdist.rank()
    model = build()
    ddp = mod.BucketedDDP(model, cap_bytes=CAP)
    ready = [0]
    total = sum(1 for p in model.parameters() if p.requires_grad)
    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: ready.__setitem__(0, ready[0] + 1))
    calls, real, unwaited = [], dist.all_reduce, [0]

    class Waited:
        """The async work, recording whether wait() was called before the optimizer step."""

        def __init__(self, work):
            self.work, self.waited = work, False
            unwaited[0] += 1

        def wait(self, *a, **kw):
            if not self.waited:
                self.waited = True
                unwaited[0] -= 1
            return self.work.wait(*a, **kw)

        def __getattr__(self, name):
            return getattr(self.work, name)

    def spy(t, *a, **kw):
        calls.append((t.numel(), bool(kw.get("async_op", False)), ready[0]))
        work = real(t, *a, **kw)
        return Waited(work) if work is not None else None

    dist.all_reduce = spy
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    first_step_calls = None
    try:
        for x, y in data():
            share = BATCH // n
            ready[0] = 0
            model(x[r * share : (r + 1) * share], y[r * share : (r + 1) * share]).backward()
            first_step_calls = calls[:] if first_step_calls is None else first_step_calls
            if unwaited[0]:
                raise RuntimeError(f"{unwaited[0]} bucket all-reduce(s) were not waited for before the optimizer step")
            opt.step()
            opt.zero_grad()
    finally:
        dist.all_reduce = real
    return {
        "params": {k: v.clone() for k, v in model.state_dict().items()},
        "calls": first_step_calls,
        "total": total,
        "buckets": [sum(p.numel() for p in b) for b in ddp.buckets],
    }


def check_make_buckets(mod) -> str:
    from minipar.dp.buckets import make_buckets as ref_make

    net = build()
    params = list(net.parameters())
    names = {id(p): n for n, p in net.named_parameters()}
    for cap in (CAP, 10**9, 8):
        got = call("make_buckets", mod.make_buckets, params, cap)
        want = [
            b.params
            for b in ref_make([(n, p) for n, p in net.named_parameters() if p.requires_grad][::-1], cap / 2**20)
        ]
        show = lambda bs: [[names.get(id(p), "?") for p in b] for b in bs]  # noqa: E731
        if any(not p.requires_grad for b in got for p in b):
            raise CheckFailed(
                f"make_buckets(cap_bytes={cap}) put a frozen parameter (requires_grad=False) in a bucket: "
                f"{show(got)}; it never gets a gradient, so its bucket would never be full — skip it"
            )
        if show(got) == show([b[::-1] for b in want[::-1]]) and len(want) > 1:
            raise CheckFailed(
                f"make_buckets(cap_bytes={cap}) filled the buckets in model order {show(got)}; fill them "
                "in reverse (last layer first): backward produces the last layer's gradient first"
            )
        if show(got) != show(want):
            raise CheckFailed(
                f"make_buckets(cap_bytes={cap}) gave {show(got)}, expected {show(want)}: a new bucket "
                "starts when the next parameter would take the current one past the cap; a parameter "
                "larger than the cap gets a bucket of its own (never an empty bucket)"
            )
    return "reverse order, frozen parameter skipped, parameter larger than the cap alone, caps 8 B / 1 KiB / 1 GB"


def check_training(mod) -> str:
    want = reference()
    for n in (1, 3, 4):
        what = f"BucketedDDP, {n} ranks"
        try:
            got = run_ranks(train_worker, n, (mod.__name__,), what)
        except CheckFailed as exc:
            if "not waited for" in str(exc):
                raise CheckFailed(
                    f"{what}: a bucket's all-reduce was not waited for before the optimizer step: call "
                    "work.wait() on every bucket in finish() before reading its buffer"
                ) from None
            raise
        for r in range(1, n):
            for k in want:
                if max_diff(got[r]["params"][k], got[0]["params"][k]) > 0:
                    raise CheckFailed(
                        f"{what}: after {STEPS} steps rank {r}'s {k} differs from rank 0's: the replicas "
                        "drifted apart, so some gradient was not all-reduced (is every bucket launched "
                        "and waited for in finish()?)"
                    )
        p0 = got[0]["params"]
        if n > 1 and max(max_diff(p0[k], v) for k, v in reference(lr_scale=n).items()) < EXACT:
            raise CheckFailed(
                f"{what}: the parameters are those of one device with {n}× the gradient: divide the "
                f"all-reduced sum by the world size ({n}) in finish()"
            )
        for k, v in want.items():
            d = max_diff(p0[k], v)
            if not d < EXACT:
                hint = (
                    "the frozen layer changed: it must get no gradient and stay out of the buckets"
                    if k.startswith("frozen")
                    else "check that every slot is copied into its bucket at its offset, and back into p.grad "
                    "after wait() (an un-waited buffer may still be being written)"
                )
                raise CheckFailed(
                    f"{what}: after {STEPS} SGD steps {k} differs from one device by {d:.3g} "
                    f"(bound {EXACT:g}, float64): {hint}"
                )
        calls = got[0]["calls"]
        if n > 1:
            if not calls:
                raise CheckFailed(
                    f"{what}: no dist.all_reduce during backward; launch each full bucket with "
                    "dist.all_reduce(buffer, group=self.group, async_op=True)"
                )
            if not all(a for _, a, _ in calls):
                raise CheckFailed(
                    f"{what}: a bucket's all_reduce was blocking (async_op=False): launch it with "
                    "async_op=True so it travels while backward computes earlier layers, and wait() in finish()"
                )
            sizes = [c[0] for c in calls]
            if sizes != got[0]["buckets"]:
                raise CheckFailed(
                    f"{what}: buckets were launched with sizes {sizes} (elements), expected {got[0]['buckets']}"
                    " in bucket order: launch bucket self.next only, and move on while the next is full"
                )
            if len(calls) > 1 and calls[0][2] >= got[0]["total"]:
                raise CheckFailed(
                    f"{what}: every all_reduce started after the last gradient was ready: launch a bucket "
                    "in grad_ready() as soon as it is full, so communication overlaps backward"
                )
    return (
        f"N = 1, 3, 4 ranks = one device after {STEPS} steps (float64, < 1e-12); tied weights, frozen layer, "
        "parameter larger than a bucket; async launch in bucket order during backward"
    )


CHECKS = [("make_buckets", check_make_buckets), ("BucketedDDP", check_training)]
