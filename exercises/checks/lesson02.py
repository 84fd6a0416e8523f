"""Checks for lesson 02: bucketing rules, then data-parallel training on real ranks against one device.

The model (float64): an embedding tied to the output head (one parameter used twice), a frozen
linear layer (``requires_grad=False``), and layers larger than the bucket cap. Trained 3 SGD steps
on N = 1, 3 and 4 ranks, each on its share of a 12-sequence batch, it must equal one device on
the whole batch to float64 rounding (bound 1e-12).
"""

from __future__ import annotations

import importlib
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from exercises.checks.common import EXACT, CheckFailed, Lesson, max_diff, run_ranks
from exercises.checks.watch import Refuse, Watch, finally_own, judge, watched

CAP = 1024  # bytes: 128 float64 values
BATCH, T, V, D = 12, 5, 11, 8
STEPS, LR = 3, 0.5
# what torch says when a gradient meets a slot of the wrong size (copy_, view_as, reshape, slicing)
SHAPE_ERROR = re.compile(r"size of tensor|must match the size|invalid for input of size|expanded size|shape mismatch")
DDP = "this exercise is DDP's bucketing and overlap: write it yourself"
RULES = Refuse(
    {"minipar.dp": DDP + ", not minipar's", "torch.nn.parallel": DDP + ", not PyTorch's"},
    c_names={"_compute_bucket_assignment_by_size": DDP + ", not PyTorch's"},
)


class Net(nn.Module):
    """Tied embedding/head, a frozen layer, a layer larger than a bucket, and a layer registered first
    but used last (``post``): its bucket is the last one, yet it fills first in backward."""

    def __init__(self):
        super().__init__()
        self.post = nn.Linear(D, D)
        self.emb = nn.Embedding(V, D)
        self.frozen = nn.Linear(D, D)
        self.frozen.requires_grad_(False)
        self.big = nn.Linear(D, 64)
        self.small = nn.Linear(64, D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.emb.weight  # tied

    def forward(self, idx, targets):
        h = self.frozen(self.emb(idx))
        h = self.post(self.small(torch.tanh(self.big(h))))
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

    from minipar.comm import intercept
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    n, r = mdist.world_size(), mdist.rank()
    model = build()
    with Watch(RULES, own=mod) as w:
        ddp = mod.BucketedDDP(model, cap_bytes=CAP)
    seen = [w.summary()]
    ready = [0]
    order: list[int] = []  # id(p) in the order their gradients became final (the checker's own hooks)
    total = sum(1 for p in model.parameters() if p.requires_grad)

    def mark(p):
        ready[0] += 1
        order.append(id(p))

    for p in model.parameters():
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(mark)
    calls, waits, real, unwaited = [], [], dist.all_reduce, [0]

    class Waited:
        """The async work, recording when wait() was called (how many gradients were ready then)."""

        def __init__(self, work):
            self.work, self.waited = work, False
            unwaited[0] += 1

        def wait(self, *a, **kw):
            waits.append(ready[0])
            if not self.waited:
                self.waited = True
                unwaited[0] -= 1
            return self.work.wait(*a, **kw)

        def get_future(self):
            waits.append(ready[0])
            return self.work.get_future()

        def __getattr__(self, name):
            return getattr(self.work, name)

    def spy(op, call, args, kwargs):  # a listener of minipar.comm.intercept: the one interception of c10d
        if op != "all_reduce":
            return call(*args, **kwargs)
        t = args[0] if args else kwargs["tensor"]
        calls.append((t.numel(), bool(kwargs.get("async_op", False)), ready[0]))
        work = call(*args, **kwargs)
        return Waited(work) if work is not None else None

    own = [k for k, v in vars(mod).items() if v is real]  # from torch.distributed import all_reduce
    listening = intercept.listening(spy)
    listening.__enter__()
    for k in own:  # the learner's own name for it goes through the interception too
        setattr(mod, k, dist.all_reduce)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=LR)
    first = None
    try:
        for x, y in data():
            share = BATCH // n
            ready[0] = 0
            order.clear()
            del calls[:], waits[:]
            with Watch(RULES, own=mod) as w:
                try:
                    model(x[r * share : (r + 1) * share], y[r * share : (r + 1) * share]).backward()
                except RuntimeError as exc:
                    if not SHAPE_ERROR.search(str(exc)):
                        raise
                    raise RuntimeError(
                        "a gradient and its slot of the bucket buffer differ in size: p's slot is the p.numel() "
                        "elements buffers[k][off : off + p.numel()] with (k, off) = where[id(p)]; copy "
                        "p.grad.reshape(-1) into it in grad_ready, and the slot .view_as(p) back into p.grad in "
                        f"finish (torch said: {str(exc).splitlines()[0][:100]})"
                    ) from None
            seen.append(w.summary())
            first = first or {"calls": calls[:], "waits": waits[:], "order": order[:], "comm": w.comm[:]}
            if unwaited[0]:
                raise RuntimeError(f"{unwaited[0]} bucket all-reduce(s) were not waited for before the optimizer step")
            opt.step()
            opt.zero_grad()
    finally:
        for k in own:
            setattr(mod, k, real)
        listening.__exit__(None, None, None)
    pos = {i: k for k, i in enumerate(first["order"])}
    return {
        "params": {k: v.clone() for k, v in model.state_dict().items()},
        "first": first,
        "total": total,
        "buckets": [sum(p.numel() for p in b) for b in ddp.buckets],
        "full_at": [1 + max(pos.get(id(p), total) for p in b) for b in ddp.buckets],
        "seen": seen,
    }


def check_make_buckets(mod) -> str:
    seen = []
    from minipar.dp.buckets import make_buckets as ref_make

    net = build()
    params = list(net.parameters())
    names = {id(p): n for n, p in net.named_parameters()}
    for cap in (CAP, 10**9, 8):
        got, summary = watched("make_buckets", RULES, mod, mod.make_buckets, params, cap)
        seen.append(("make_buckets", summary))
        want = [
            b.params
            for b in ref_make([(n, p) for n, p in net.named_parameters() if p.requires_grad][::-1], cap / 2**20)
        ]
        if not isinstance(got, (list, tuple)) or not all(isinstance(b, (list, tuple)) and b for b in got):
            raise CheckFailed(
                f"make_buckets(cap_bytes={cap}) returned {type(got).__name__} {str(got)[:80]}: return a list of "
                "buckets, each a non-empty list of parameters ([[p, ...], ...], bucket 0 = the last parameters)"
            )
        show = lambda bs: [[names.get(id(p), "?") for p in b] for b in bs]  # noqa: E731
        if any(not p.requires_grad for b in got for p in b):
            raise CheckFailed(
                f"make_buckets(cap_bytes={cap}) put a frozen parameter (requires_grad=False) in a bucket: "
                f"{show(got)}; it never gets a gradient, so its bucket would never be full — skip it"
            )
        forward = [names[id(p)] for p in params if p.requires_grad]
        first = show(got)[0] if got else []
        if forward[0] in first and forward[-1] not in first and len(want) > 1:
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
    finally_own(mod, ["make_buckets"], seen)
    return "reverse order, frozen parameter skipped, parameter larger than the cap alone, caps 8 B / 1 KiB / 1 GB"


def check_training(mod) -> str:
    want = reference()
    seen = []
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
        for r in range(n):
            for summary in got[r]["seen"]:
                judge(f"{what}: rank {r}", summary)
                seen.append((f"{what}: rank {r}", summary))
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
        if n > 1:
            overlap(what, got[0])
    finally_own(mod, ["BucketedDDP.grad_ready", "BucketedDDP.finish"], seen)
    return (
        f"N = 1, 3, 4 ranks = one device after {STEPS} steps (float64, < 1e-12); tied weights, frozen layer, "
        "parameter larger than a bucket; one async all-reduce per bucket, in bucket order, launched as soon as "
        "it can be (a bucket that fills out of order too) and waited for after backward"
    )


def overlap(what, got) -> None:
    """Rank 0's first step: one async ``dist.all_reduce`` per bucket, in bucket order, each launched in
    the hook that made it launchable (bucket k and all before it full), none waited for during backward."""
    first, total, sizes_want = got["first"], got["total"], got["buckets"]
    calls = first["calls"]
    other = [op for op, *_ in first["comm"] if op != "allreduce"]
    if other:
        raise CheckFailed(
            f"{what}: backward issued c10d::{other[0]}: DDP averages gradients with one all_reduce per bucket, "
            "nothing else"
        )
    if len(first["comm"]) != len(calls):
        raise CheckFailed(
            f"{what}: {len(first['comm'])} all-reduce(s) reached the process group but {len(calls)} went through "
            "dist.all_reduce: launch each bucket with dist.all_reduce(buffer, group=self.group, async_op=True)"
        )
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
    if sizes != sizes_want:
        raise CheckFailed(
            f"{what}: buckets were launched with sizes {sizes} (elements), expected {sizes_want}"
            " in bucket order: launch bucket self.next only, and move on while the next is full "
            "(a later bucket may fill first: it waits for the ones before it)"
        )
    if len(calls) > 1 and calls[0][2] >= total:
        raise CheckFailed(
            f"{what}: every all_reduce started after the last gradient was ready: launch a bucket "
            "in grad_ready() as soon as it is full, so communication overlaps backward"
        )
    launchable = 0
    for k, ((_, _, at), full) in enumerate(zip(calls, got["full_at"])):
        launchable = max(launchable, full)
        if at >= launchable:  # the learner's hooks run before the checker's: launch at launchable − 1
            raise CheckFailed(
                f"{what}: bucket {k} could be launched in the hook of gradient {launchable} of {total} (it and "
                f"every bucket before it full then) but was launched {'in finish()' if at >= total else 'later'}: "
                "in grad_ready(), launch every bucket that is full and next in order (a while loop), so each "
                "overlaps the rest of backward"
            )
    early = [c for c in first["waits"] if c < total]
    if early:
        raise CheckFailed(
            f"{what}: a bucket's all-reduce was waited for during backward (after {early[0]} of {total} "
            "gradients): wait() blocks backward until the sum arrives, so nothing overlaps — wait for every "
            "bucket in finish(), once backward is done"
        )


LESSON = Lesson(
    number="02",
    title="data parallel",
    module="ex02_data_parallel",
    checks=(
        ("make_buckets", check_make_buckets),
        ("BucketedDDP", check_training),
    ),
    rules=(RULES,),
)
