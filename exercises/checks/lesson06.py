"""Checks for lesson 06: 1F1B (and, stretch, interleaved 1F1B) against minipar's reference order; stretch: a
linear layer's backward split into I and W (zero bubble) against autograd."""

from __future__ import annotations

import importlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from exercises.checks.common import EXACT, CheckFailed, Lesson, expect_close, max_diff, run_ranks
from exercises.checks.schedules import CASES, RULES, first_difference, validate
from exercises.checks.watch import (
    Refuse,
    finally_own,
    kept_state_message,
    state_changed,
    state_snapshot,
    tensor_elements,
    watched,
)


def _tiny_gpt():
    from minipar.model.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=3, n_head=2, d_model=8))


def _batch(m):
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, 17, (2 * m, 8), generator=g), torch.randint(0, 17, (2 * m, 8), generator=g)


def run_worker(module, m):
    """Run the learner's schedule with minipar's executor (float64); return this rank's gradients."""
    from minipar.pp.executor import PipelineExecutor
    from minipar.pp.stages import build_stages
    from minipar.runtime import dist as mdist

    torch.set_default_dtype(torch.float64)  # the executor's receive buffers follow the default dtype
    mod = importlib.import_module(module)
    p, me = mdist.world_size(), mdist.rank()
    sched = mod.one_f_one_b(p, m)
    model = _tiny_gpt()
    stages = build_stages(model, p, [me])
    x, y = _batch(m)
    PipelineExecutor(stages, sched).step(x, y)
    mine = {id(q) for s in stages.values() for q in s.parameters()}
    return {k: q.grad.clone() for k, q in model.named_parameters() if id(q) in mine and q.grad is not None}


def one_device(m):
    torch.set_default_dtype(torch.float64)
    try:
        model = _tiny_gpt()
        x, y = _batch(m)
        model(x, y)[1].backward()
        return {k: q.grad.clone() for k, q in model.named_parameters()}
    finally:
        torch.set_default_dtype(torch.float32)


def check_1f1b(mod) -> str:
    from minipar.pp.schedules import one_f_one_b

    seen = []
    for p, m in CASES:
        what = f"one_f_one_b({p}, {m})"
        sched, summary = watched(what, RULES, mod, mod.one_f_one_b, p, m)
        seen.append((what, summary))
        sim = validate(what, sched, p, m)
        for r in range(p):
            if sim.peak_inflight[r] > min(p - r, m):
                raise CheckFailed(
                    f"{what}: rank {r} holds {sim.peak_inflight[r]:g} micro-batches at once, 1F1B at most "
                    f"min(p − r, m) = {min(p - r, m)}: after the warm-up, run a backward after each forward"
                )
        diff = first_difference(sched, one_f_one_b(p, m))
        if diff:
            r, i, a, b = diff
            raise CheckFailed(
                f"{what}: rank {r}, action {i} is {a}, expected {b}. Rank r runs min(p − r − 1, m) = "
                f"{min(p - r - 1, m)} warm-up forwards, then F, B pairs, then the remaining backwards"
            )
    for p, m in ((3, 2), (3, 4)):
        what = f"one_f_one_b({p}, {m}) run by minipar's executor on {p} ranks"
        got = run_ranks(run_worker, p, (mod.__name__, m), what)
        want = one_device(m)
        for r, grads in enumerate(got):
            for k, g in grads.items():
                if not max_diff(g, want[k]) < EXACT:
                    raise CheckFailed(
                        f"{what}: rank {r}'s gradient of {k} differs from one device (float64, bound "
                        f"{EXACT:g}): every micro-batch's forward and backward must run exactly once"
                    )
    finally_own(mod, ["one_f_one_b"], seen)
    return (
        "p = 1, 3, 4; m = 1, 2, 4, 8 (m < p too): valid (simulated), ≤ p − r in flight, the reference order; "
        "run on 3 real ranks = one device's gradients (float64)"
    )


def check_interleaved(mod) -> str:
    from minipar.pp.schedules import interleaved_1f1b

    seen = []
    cases = [(1, 2, 2), (2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (3, 6, 3)]
    for p, m, v in cases:
        what = f"interleaved_1f1b({p}, {m}, v={v}) (stretch goal)"
        sched, summary = watched(what, RULES, mod, mod.interleaved_1f1b, p, m, v)
        seen.append((what, summary))
        validate(what, sched, p, m, v)
        diff = first_difference(sched, interleaved_1f1b(p, m, v))
        if diff:
            r, i, a, b = diff
            raise CheckFailed(
                f"{what}: rank {r}, action {i} is {a}, expected {b}: check the chunk of the k-th forward, "
                "(k mod p·v) // p, the reversed chunk order of backwards, and the warm-up "
                "min((p − r − 1)·2 + (v − 1)·p, m·v)"
            )
    finally_own(mod, ["interleaved_1f1b"], seen)
    return "p = 1, 2, 3, 4; v = 2, 3: valid (simulated) and Megatron-LM's order"


SPLIT = "this exercise is the backward of a linear layer: write its two matmuls yourself"
SPLIT_RULES = Refuse(
    {
        "torch.autograd:grad": SPLIT + ", without autograd",
        "torch.autograd:backward": SPLIT + ", without autograd",
        "torch._tensor:Tensor.backward": SPLIT + ", without autograd",
        "torch.autograd.functional": SPLIT + ", without autograd",
        "torch._functorch": SPLIT + ", without torch.func",
        "torch.func": SPLIT + ", without torch.func",
        "minipar.pp": SPLIT + ", not minipar's SplitLinear",
    },
    c_names={"run_backward": SPLIT + ", without the autograd engine"},
)
# (x shape, out): non-square weights (a transpose shows), 2-D and 3-D/4-D inputs, one row, one output
SPLIT_CASES = [((4, 5), 3), ((2, 6, 5), 7), ((1, 1, 5), 2), ((3, 4), 1), ((3, 2, 4, 6), 2)]


COPIES = ("clone", "_to_copy", "copy", "contiguous", "lift_fresh", "lift_fresh_copy")  # a copy of x: named below
MATMULS = ("mm", "bmm", "addmm", "addbmm", "baddbmm", "mv", "dot", "vdot", "matmul", "outer", "ger", "addr", "_addmm")


class _FromX(TorchDispatchMode):
    """The tensors computed from ``x`` (or from a tensor computed from it) inside the block: their
    shapes, and the products (matmuls) among the ops that made them. dL/dx = dL/dy · W never touches x,
    so I computes nothing from x; W's dL/dW = (dL/dy)ᵀ · x is the one x-derived product of out·in elements."""

    def __init__(self, *xs):
        super().__init__()
        self.derived, self.shapes, self.products = {x.data_ptr() for x in xs}, [], []
        self.storages, self.computed = {x.untyped_storage().data_ptr() for x in xs}, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = [a for a in args if torch.is_tensor(a)] + [t for a in args if isinstance(a, (list, tuple)) for t in a]
        if any(torch.is_tensor(a) and a.data_ptr() in self.derived for a in flat):
            name = func.name().partition("::")[2].split(".")[0].rstrip("_")
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if torch.is_tensor(t):
                    self.derived.add(t.data_ptr())
                    self.shapes.append(tuple(t.shape))
                    if name in MATMULS:
                        self.products.append((name, tuple(t.shape)))
                    if name not in COPIES and t.untyped_storage().data_ptr() not in self.storages:  # new numbers
                        self.computed.append((name, tuple(t.shape)))
        return out


def _storages(obj, depth=0) -> set:
    """Storage addresses of every tensor in ``obj`` (nested lists, tuples, dicts)."""
    if torch.is_tensor(obj):
        return {obj.untyped_storage().data_ptr()}
    if depth > 4:
        return set()
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return set().union(*(_storages(v, depth + 1) for v in items)) if items else set()


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _autograd_reference(x, w, b, g):
    x, w, b = (t.detach().clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.linear(x, w, b).backward(g)
    return x.grad, w.grad, b.grad


def check_split(mod) -> str:
    seen = []
    gen = torch.Generator().manual_seed(6)
    for xs, out in SPLIT_CASES:
        what = f"linear layer x {xs}, weight ({out}, {xs[-1]}) (stretch goal)"
        rand = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)  # noqa: E731
        items = [(rand(*xs), rand(*xs[:-1], out)) for _ in range(2)]  # two micro-batches
        w, b = rand(out, xs[-1]), rand(out)
        stash: list = []
        before = state_snapshot(mod)
        for k, (x, g) in enumerate(items):  # I of both micro-batches first, then their W's: a queue
            with _FromX(x) as seen_ops:
                gx, summary = watched(f"{what}: I", SPLIT_RULES, mod, mod.linear_backward_input, x, w, g, stash)
            seen.append((what, summary))
            big = [s for s in seen_ops.shapes if _numel(s) == w.numel()]
            if w.shape in seen_ops.shapes or big or seen_ops.products:
                shape = tuple(w.shape) if w.shape in seen_ops.shapes else (big or [seen_ops.products[0][1]])[0]
                raise CheckFailed(
                    f"{what}: linear_backward_input computed a tensor of shape {shape} from x"
                    + (f" ({w.numel()} = out·in elements, the weight gradient's size)" if big else "")
                    + ": the weight gradient belongs in W (linear_backward_weight), in whatever shape or "
                    "layout; I computes nothing from x and returns only dL/dx = dL/dy · W"
                )
            if seen_ops.computed:
                op, shape = seen_ops.computed[0]
                raise CheckFailed(
                    f"{what}: linear_backward_input computed aten::{op} of shape {shape} from x: I computes nothing "
                    "from x (dL/dx = dL/dy · W never touches it); the weight gradient, in whole or in pieces, "
                    "belongs in W, and the stash keeps x itself"
                )
            held = tensor_elements(stash)
            if held > (x.numel() + g.numel()) * (k + 1):
                raise CheckFailed(f"{what}: the stash holds {held} numbers after I; W needs only x and dL/dy")
            kept = _storages(stash)
            for name, t in (("x", x), ("dL/dy", g)):
                if t.untyped_storage().data_ptr() not in kept:
                    raise CheckFailed(
                        f"{what}: after I, no tensor in the stash shares {name}'s storage: the stash keeps "
                        f"references to x and dL/dy (no copies: a copy doubles the activation memory the split "
                        "is meant to hold only until W)"
                    )
            place = state_changed(before, state_snapshot(mod))
            if place:
                raise CheckFailed(
                    kept_state_message(
                        f"{what}: I", place, "everything W needs travels in the stash (x and dL/dy), nothing else"
                    )
                )
            expect_close(
                f"{what}: dL/dx of micro-batch {k}",
                gx,
                _autograd_reference(x, w, b, g)[0],
                hint="y = x·Wᵀ + b, so dL/dx = dL/dy · W (shape of x)",
            )
        for k, (x, g) in enumerate(items):
            with _FromX(*(x for x, _ in items)) as seen_ops:  # W of the wrong entry is named below
                res, summary = watched(f"{what}: W", SPLIT_RULES, mod, mod.linear_backward_weight, stash)
            seen.append((what, summary))
            if not any(_numel(s) == w.numel() for s in seen_ops.shapes):
                raise CheckFailed(
                    f"{what}: linear_backward_weight of micro-batch {k} computed no product of x and dL/dy of "
                    f"out·in = {w.numel()} elements: W itself runs dL/dW = (dL/dy)ᵀ · x from the stash's x "
                    "(that matmul is the work the split defers)"
                )
            _, want_w, want_b = _autograd_reference(x, w, b, g)
            if not (isinstance(res, tuple) and len(res) == 2 and tuple(res[0].shape) == tuple(w.shape)):
                got = tuple(res[0].shape) if isinstance(res, tuple) and torch.is_tensor(res[0]) else type(res).__name__
                raise CheckFailed(
                    f"{what}: linear_backward_weight must return (dL/dW, dL/db) with dL/dW of the weight's shape "
                    f"{tuple(w.shape)}, got {got}: dL/dW = (dL/dy)ᵀ · x over all rows"
                )
            expect_close(
                f"{what}: dL/dW of micro-batch {k} (W runs in the order I ran: oldest first)",
                res[0],
                want_w,
                hint="flatten to rows; dL/dW = (dL/dy)ᵀ · x; pop the OLDEST stash entry",
            )
            expect_close(f"{what}: dL/db of micro-batch {k}", res[1], want_b, hint="dL/db sums dL/dy over all rows")
        if stash:
            raise CheckFailed(f"{what}: {len(stash)} stash entries left after both W's: W must remove what it used")
    finally_own(mod, ["linear_backward_input", "linear_backward_weight"], seen)
    return (
        "2-D to 4-D inputs, one-row and one-output layers, two micro-batches in a queue: = autograd "
        "(float64); no weight-shaped work in I, no autograd"
    )


LESSON = Lesson(
    number="06",
    title="1F1B",
    module="ex06_1f1b",
    checks=(
        ("one_f_one_b", check_1f1b),
        ("interleaved_1f1b (stretch)", check_interleaved),
        ("linear_backward_* (stretch)", check_split),
    ),
    rules=(RULES, SPLIT_RULES),
)
