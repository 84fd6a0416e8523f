"""Checks for lesson 04: f and g on their own, then a column-then-row MLP against one device.

Float64, bound 1e-12: output, input gradient, and each rank's slice of the weight gradients.
Sizes d = 6, hidden = 12 (divisible by 1, 2, 3, 4). Layouts: N = 1, 3, 4 over the world, and
4 ranks as two tensor-parallel groups [0, 1] and [2, 3] (the operators must use their group).
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from exercises.checks.common import EXACT, CheckFailed, Lesson, max_diff, run_ranks
from exercises.checks.watch import Refuse, Watch, finally_own, hidden_tensors, judge, tensor_elements

TP = "this exercise is Megatron's tensor parallelism: write it yourself"
RULES = Refuse({"minipar.tp": TP + ", not minipar's", "torch.distributed.tensor": TP + ", not DTensor's"})

D, H = 6, 12
LAYOUTS = [(1, 1), (3, 3), (4, 4), (4, 2)]  # (world size, tensor-parallel group size)


def _group(tp):
    from minipar.runtime import dist as mdist

    world, me = mdist.world_size(), mdist.rank()
    if tp == world:
        return None, list(range(world))
    mine = None
    for s in range(0, world, tp):
        g = mdist.new_group(list(range(s, s + tp)))
        if s <= me < s + tp:
            mine, ranks = g, list(range(s, s + tp))
    return mine, ranks


def fg_worker(module, tp):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    group, ranks = _group(tp)
    r = mdist.rank()
    w = torch.arange(4, dtype=torch.float64) + 10.0**r  # this rank's loss weights
    x = torch.ones(4, dtype=torch.float64, requires_grad=True)
    x2 = (torch.arange(4, dtype=torch.float64) * (r + 1)).requires_grad_()
    seen = {}
    with Watch(RULES, own=mod) as seen["f forward"]:
        y = mod.CopyToTP.apply(x, group)
    with Watch(RULES, own=mod) as seen["f backward"]:
        (y * w).sum().backward()
    with Watch(RULES, own=mod) as seen["g forward"]:
        z = mod.ReduceFromTP.apply(x2, group)
    with Watch(RULES, own=mod) as seen["g backward"]:
        (z * w).sum().backward()
    return {
        "f_out": y.detach(),
        "f_grad": x.grad,
        "g_out": z.detach(),
        "g_grad": x2.grad,
        "x2": x2.detach(),
        "ranks": ranks,
        "seen": {k: v.summary() for k, v in seen.items()},
    }


def full():
    g = torch.Generator().manual_seed(3)
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    return dict(x=rnd(2, 3, D), w1=rnd(H, D), b1=rnd(H), w2=rnd(D, H), b2=rnd(D), c=rnd(2, 3, D))


SPLIT = {  # what each layer holds and computes, in the lesson's terms: a size mismatch is named with these
    "column": "column-parallel keeps the rows weight[r·out/N:(r+1)·out/N, :] of the (out, in) weight, shape "
    "(out/N, in), and bias[r·out/N:(r+1)·out/N]",
    "row": "row-parallel keeps the columns weight[:, r·in/N:(r+1)·in/N] of the (out, in) weight, shape (out, in/N), "
    "and the whole (out,) bias",
    "column forward": "column-parallel maps the full (…, in) input to this rank's (…, out/N) output features",
    "row forward": "row-parallel maps this rank's (…, in/N) slice (the column layer's output) to a (…, out) partial "
    "sum, then g sums it over the group",
}


def _named(fn, what, split, shapes=None):
    """Run ``fn``; a size or shape mismatch from PyTorch becomes a CheckFailed that says which split was meant
    (``shapes()``: the tensors involved, named in the lesson's terms)."""
    try:
        return fn()
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        if not any(w in first for w in ("size", "shape", "match", "mat1")):
            raise
        here = f" ({shapes()})" if shapes else ""
        # keep the learner's frames: the checker's report then points at their line, not at this one
        raise CheckFailed(f"{what}: a shape mismatch: {split}{here}; PyTorch said: {first[:120]}").with_traceback(
            exc.__traceback__
        ) from None


def _shard_shapes(layer, name, want, split, n):
    """``layer``'s weight and bias have this rank's shard shapes ``want`` after ``load_full_``, or a CheckFailed
    naming the split (a learner may replace the Parameters instead of filling them)."""
    got = tuple(tuple(getattr(layer, k).shape) for k in ("weight", "bias"))
    if got != want:
        raise CheckFailed(
            f"{name}.load_full_ left weight {got[0]} and bias {got[1]} in a group of {n} ranks, expected "
            f"{want[0]} and {want[1]}: {split}"
        )


def mlp_worker(module, tp):
    mod = importlib.import_module(module)
    group, ranks = _group(tp)
    t = full()
    col, row = mod.ColumnParallelLinear(D, H, group), mod.RowParallelLinear(H, D, group)
    _named(lambda: col.load_full_(t["w1"], t["b1"]), "ColumnParallelLinear.load_full_", SPLIT["column"])
    _named(lambda: row.load_full_(t["w2"], t["b2"]), "RowParallelLinear.load_full_", SPLIT["row"])
    _shard_shapes(col, "ColumnParallelLinear", ((H // tp, D), (H // tp,)), SPLIT["column"], tp)
    _shard_shapes(row, "RowParallelLinear", ((D, H // tp), (D,)), SPLIT["row"], tp)
    loaded = [
        col.weight.detach().clone(),
        col.bias.detach().clone(),
        row.weight.detach().clone(),
        row.bias.detach().clone(),
    ]
    held = [tensor_elements(col), tensor_elements(row), hidden_tensors(mod)]  # globals, class attributes too
    x = t["x"].clone().requires_grad_()
    seen = {}
    with Watch(RULES, own=mod) as seen["forward"]:
        h = _named(
            lambda: col(x),
            "ColumnParallelLinear.forward",
            SPLIT["column forward"],
            lambda: (
                f"here x is {tuple(x.shape)} and this rank's weight {tuple(col.weight.shape)}, (out/N, in) in "
                "nn.Linear's layout: y = x·Wᵀ + b, F.linear"
            ),
        )
        y = _named(
            lambda: row(F.gelu(h)),
            "RowParallelLinear.forward",
            SPLIT["row forward"],
            lambda: (
                f"here x is {tuple(h.shape)} and this rank's weight {tuple(row.weight.shape)}, (out, in/N) in "
                "nn.Linear's layout: the partial sum is x·Wᵀ, F.linear"
            ),
        )
    with Watch(RULES, own=mod) as seen["backward"]:
        (y * t["c"]).sum().backward()
    return {
        "held": held,
        "seen": {k: v.summary() for k, v in seen.items()},
        "loaded": loaded,
        "y": y.detach(),
        "x_grad": x.grad,
        "grads": [col.weight.grad, col.bias.grad, row.weight.grad, row.bias.grad],
        "ranks": ranks,
    }


EXPECT_FG = {"f forward": 0, "f backward": 1, "g forward": 1, "g backward": 0}  # all-reduces of 4 elements


def comm_of(what, r, seen, expect, numel, role) -> None:
    """Rank ``r`` ran ``expect[phase]`` all-reduces of ``numel`` elements in each phase, nothing else."""
    for phase, n_ar in expect.items():
        comm = seen[phase]["comm"]
        other = [op for op, *_ in comm if op != "allreduce"]
        if other:
            raise CheckFailed(
                f"{what}: rank {r}'s {phase} called c10d::{other[0]}: Megatron's tensor parallelism communicates "
                "only with all-reduces (g in forward, f in backward), each rank keeping its shard of the weights"
            )
        sizes = [a for _, a, _, _ in comm]
        if len(sizes) != n_ar or any(a != numel for a in sizes):
            raise CheckFailed(
                f"{what}: rank {r}'s {phase} ran {len(sizes)} all-reduce(s) of {sizes} elements, expected "
                f"{n_ar} of {numel} (the activation's size): {role}"
            )


def check_f_g(mod) -> str:
    seen, runs = [], []
    for world, tp in LAYOUTS:
        what = f"f and g, {world} ranks, groups of {tp}"
        got = run_ranks(fg_worker, world, (mod.__name__, tp), what)
        runs.append((what, tp, got))
        for r, v in enumerate(got):
            for phase, summary in v["seen"].items():
                judge(f"{what}: rank {r}, {phase}", summary)
                seen.append((f"{what}: rank {r}, {phase}", summary))
        for r, v in enumerate(got):
            ranks = v["ranks"]
            ws = [torch.arange(4, dtype=torch.float64) + 10.0**q for q in ranks]
            if max_diff(v["f_out"], torch.ones(4)) > 0:
                raise CheckFailed(f"{what}: rank {r}: f's forward must be the identity, got {v['f_out'].tolist()}")
            want = sum(ws)
            if v["f_grad"] is None or max_diff(v["f_grad"], want) > 0:
                own = v["f_grad"] is not None and max_diff(v["f_grad"], ws[ranks.index(r)]) == 0
                raise CheckFailed(
                    f"{what}: rank {r}: f's backward gave {None if v['f_grad'] is None else v['f_grad'].tolist()}, "
                    f"expected the sum over the group {ranks}: {want.tolist()}"
                    + (
                        ": it is this rank's own gradient — all-reduce it"
                        if own
                        else ": all-reduce (sum) over ctx.group, the group given to forward"
                    )
                )
            gsum = sum(torch.arange(4, dtype=torch.float64) * (q + 1) for q in ranks)
            if max_diff(v["g_out"], gsum) > 0:
                raise CheckFailed(
                    f"{what}: rank {r}: g's forward gave {v['g_out'].tolist()}, expected the sum over the "
                    f"group {ranks}: {gsum.tolist()}"
                )
            if max_diff(v["x2"], torch.arange(4, dtype=torch.float64) * (r + 1)) > 0:
                raise CheckFailed(f"{what}: rank {r}: g changed its input in place; all-reduce a copy")
            if v["g_grad"] is None or max_diff(v["g_grad"], ws[ranks.index(r)]) > 0:
                raise CheckFailed(
                    f"{what}: rank {r}: g's backward gave {None if v['g_grad'] is None else v['g_grad'].tolist()}, "
                    f"expected the identity {ws[ranks.index(r)].tolist()} (no communication backward)"
                )
    for what, tp, got in runs:  # the communication, once every value is right
        for r, v in enumerate(got):
            if tp > 1:
                comm_of(
                    what,
                    r,
                    v["seen"],
                    EXPECT_FG,
                    4,
                    "f is the identity forward and one all-reduce of the gradient backward; g one all-reduce "
                    "forward and the identity backward",
                )
    finally_own(mod, ["CopyToTP.forward", "CopyToTP.backward", "ReduceFromTP.forward", "ReduceFromTP.backward"], seen)
    return "N = 1, 3, 4 and two groups of 2: f = identity / all-reduce, g = all-reduce / identity, exact"


def check_layers(mod) -> str:
    t = full()
    x = t["x"].clone().requires_grad_()
    ps = [t[k].clone().requires_grad_() for k in ("w1", "b1", "w2", "b2")]
    y = F.linear(F.gelu(F.linear(x, ps[0], ps[1])), ps[2], ps[3])
    (y * t["c"]).sum().backward()
    names = ["column weight", "column bias", "row weight", "row bias"]
    seen, runs = [], []
    for world, tp in LAYOUTS:
        what = f"ColumnParallelLinear → RowParallelLinear, {world} ranks, groups of {tp}"
        got = run_ranks(mlp_worker, world, (mod.__name__, tp), what)
        runs.append((what, tp, got))
        for r, v in enumerate(got):
            for phase, summary in v["seen"].items():
                judge(f"{what}: rank {r}, {phase}", summary)
                seen.append((f"{what}: rank {r}, {phase}", summary))
        for r, v in enumerate(got):
            i = v["ranks"].index(r)
            k = H // tp
            slices = [
                lambda a: a[i * k : (i + 1) * k],
                lambda a: a[i * k : (i + 1) * k],
                lambda a: a[:, i * k : (i + 1) * k],
                lambda a: a,
            ]
            for name, sl, got_p, full_p in zip(names, slices, v["loaded"], (t["w1"], t["b1"], t["w2"], t["b2"])):
                if max_diff(got_p, sl(full_p)) > 0:
                    raise CheckFailed(
                        f"{what}: rank {r} (index {i} in its group) loaded the wrong slice of the {name}: "
                        + (
                            "keep rows [i·out/N, (i+1)·out/N)"
                            if "column" in name
                            else "keep columns [i·in/N, (i+1)·in/N) of the weight and the whole bias"
                        )
                    )
            if max_diff(v["y"], y) >= EXACT:
                extra = max_diff(v["y"], y.detach() + (tp - 1) * t["b2"]) < EXACT
                raise CheckFailed(
                    f"{what}: rank {r}'s output differs from one device"
                    + (
                        f": the row bias was added {tp} times — add it after g, once"
                        if extra
                        else ": the row layer's partial sums must go through g (all-reduce over the group)"
                    )
                )
            if max_diff(v["x_grad"], x.grad) >= EXACT:
                scaled = tp > 1 and max_diff(v["x_grad"], tp * x.grad) < EXACT
                raise CheckFailed(
                    f"{what}: rank {r}'s input gradient differs from one device"
                    + (
                        f" by a factor {tp}: g's backward must be the identity"
                        if scaled
                        else ": f must sit on the column layer's input (its backward sums the ranks' parts)"
                    )
                )
            for name, sl, g, p in zip(names, slices, v["grads"], ps):
                if g is None or max_diff(g, sl(p.grad)) >= EXACT:
                    raise CheckFailed(
                        f"{what}: rank {r}'s {name} gradient differs from its slice of one device's "
                        "(float64, bound 1e-12): check f/g's backward and where the bias is added"
                    )
            k = H // tp
            for name, held, want in zip(
                ("ColumnParallelLinear", "RowParallelLinear"), v["held"], (k * D + k, D * k + D)
            ):
                if held > want:
                    raise CheckFailed(
                        f"{what}: rank {r}'s {name} holds {held} tensor elements, its shard is {want}: keep only "
                        "this rank's slice of the weight (no full copy, not even outside the Parameters)"
                    )
            if v["held"][2] > 0:
                raise CheckFailed(
                    f"{what}: rank {r}: your module keeps {v['held'][2]} tensor elements in its globals or class "
                    "attributes: keep only "
                    "this rank's slice of the weights, in the layer"
                )
    for what, tp, got in runs:  # the communication, once every value is right
        for r, v in enumerate(got):
            if tp > 1:
                comm_of(
                    what,
                    r,
                    v["seen"],
                    {"forward": 1, "backward": 1},
                    x.numel(),
                    "forward: the row layer's g sums the partial outputs; backward: the column layer's f sums the "
                    "input gradient — and nothing else travels (each rank multiplies by its own shard only)",
                )
    finally_own(
        mod,
        [
            "ColumnParallelLinear.load_full_",
            "ColumnParallelLinear.forward",
            "RowParallelLinear.load_full_",
            "RowParallelLinear.forward",
        ],
        seen,
    )
    return (
        "N = 1, 3, 4 and two groups of 2: output, input and weight gradients = one device (float64, < 1e-12); "
        "each rank holds its shard; one all-reduce forward (g), one backward (f)"
    )


LESSON = Lesson(
    number="04",
    title="tensor parallel",
    module="ex04_tensor_parallel",
    checks=(
        ("f and g", check_f_g),
        ("Column/RowParallelLinear", check_layers),
    ),
    rules=(RULES,),
)
