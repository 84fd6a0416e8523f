"""Checks for lesson 03: the ZeRO-1 step on real ranks against ``torch.optim.AdamW`` on one device.

Each rank's gradient differs (seeded by step and rank); one device steps with their mean. Float64,
bound 1e-12. ``eps`` is large (1e-4) so that a gradient N times too large changes the step visibly
(AdamW is otherwise almost blind to the gradient's scale).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from exercises.checks.common import EXACT, CheckFailed, Lesson, max_diff, run_ranks
from exercises.checks.watch import (
    Refuse,
    Watch,
    finally_own,
    hidden_tensors,
    judge,
    kept_state_message,
    state_changed,
    state_snapshot,
    tensor_elements,
)

ZERO = "this exercise is ZeRO-1's sharded step: write it yourself"
RULES = Refuse(
    {
        "minipar.zero": ZERO + ", not minipar's",
        "minipar.job.parallelize": ZERO + ", not minipar's",
        "minipar.job.piece": ZERO + ", not minipar's",
        "torch.distributed.optim": ZERO + ", not PyTorch's ZeroRedundancyOptimizer",
        "torch.distributed.fsdp": ZERO + ", not PyTorch's FSDP",
        "torch.distributed._composable": ZERO + ", not PyTorch's FSDP",
        "torch.optim": ZERO + " (step your shard with the given adamw_update)",
    }
)

STEPS = 3
HYPER = dict(lr=0.1, betas=(0.9, 0.95), eps=1e-4, weight_decay=0.1)


def grad(numel, step, rank):
    return torch.randn(numel, generator=torch.Generator().manual_seed(1000 * step + rank), dtype=torch.float64)


def start(numel):
    return torch.randn(numel, generator=torch.Generator().manual_seed(7), dtype=torch.float64)


class _Gathered(TorchDispatchMode):
    """The input of every all-gather inside the block (the smaller tensor argument: this rank's shard)."""

    def __init__(self):
        super().__init__()
        self.inputs: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        ns, _, name = func.name().partition("::")
        if ns in ("c10d", "_c10d_functional") and name.rstrip("_") in AG:
            flat = [a for a in args if torch.is_tensor(a)]
            flat += [t for a in args if isinstance(a, (list, tuple)) for t in a if torch.is_tensor(t)]
            flat += [
                t for a in args if isinstance(a, (list, tuple)) for b in a if isinstance(b, (list, tuple)) for t in b
            ]
            if flat:
                self.inputs.append(min(flat, key=lambda t: t.numel()).detach().clone())
        return func(*args, **(kwargs or {}))


def worker(module, numel):
    from minipar.runtime import dist as mdist

    mod = importlib.import_module(module)
    p, state, seen, gathered, after = start(numel), {}, [], [], []
    before = state_snapshot(mod)
    for s in range(STEPS):
        with Watch(RULES, own=mod) as w, _Gathered() as g, shapes_in_lesson_terms(numel, mdist.world_size()):
            mod.zero1_step(p, grad(numel, s, mdist.rank()), state, **HYPER)
        seen.append(w.summary())
        gathered.append(g.inputs)
        after.append(p.clone())
    sizes = {k: tensor_elements(v) for k, v in state.items()}
    hidden = hidden_tensors(mod, skip=(p, state)) + tensor_elements(vars(p))  # and attributes set on the tensor
    changed = state_changed(before, state_snapshot(mod))
    return {
        "param": p,
        "sizes": sizes,
        "hidden": hidden,
        "changed": changed,
        "seen": seen,
        "gathered": gathered,
        "after": after,
    }


class ShapeError(ValueError):
    """A collective got buffers of the wrong shape or dtype, named in the lesson's terms."""


@contextlib.contextmanager
def shapes_in_lesson_terms(numel, n):
    """Turn the shape and dtype errors gloo raises inside a collective into the lesson's terms:
    the padded buffer (``padded`` elements, a multiple of N) and this rank's shard (``padded / N``)."""
    padded = math.ceil(numel / n) * n
    sizes = f"numel = {numel}, N = {n}: padded buffer = {padded} elements, shard = padded / N = {padded // n}"
    try:
        yield
    except RuntimeError as exc:
        text = str(exc)
        if m := re.search(r"outputShape\[0\] \* worldSize == inputShape\[0\] \((\d+) vs\. (\d+)\)", text):
            raise ShapeError(
                f"reduce-scatter of the wrong shapes (output × N = {m[1]}, input = {m[2]}): its input is this "
                f"rank's gradient padded with zeros, its output one shard ({sizes}; shard_range gives both)"
            ).with_traceback(exc.__traceback__) from None  # the learner's line
        if m := re.search(r"allgather: invalid tensor size at index \d+ \(expected \((\d+)\), got \((\d+)\)\)", text):
            raise ShapeError(
                f"all-gather of the wrong shapes (a piece of {m[1]} elements expected, {m[2]} given): its input is "
                f"this rank's updated shard, its output the padded buffer ({sizes}); copy its first numel "
                "elements back into flat_param"
            ).with_traceback(exc.__traceback__) from None  # the learner's line
        if m := re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", text):
            pair, shard = {int(m[1]), int(m[2])}, padded // n
            if pair == {numel, padded}:
                why = (
                    "the padded buffer against flat_param: pad the gradient with zeros before the reduce-scatter, "
                    "and copy only the first numel elements of the gathered buffer back into flat_param"
                )
            elif shard in pair:
                why = (
                    "a shard against a shorter slice: on the last rank(s) [lo, hi) runs past numel, so a slice of "
                    "flat_param or flat_grad there holds fewer than padded / N elements; slice the padded buffer"
                )
            else:
                why = "every buffer is either the padded one, flat_param / flat_grad (numel) or a shard (padded / N)"
            raise ShapeError(
                f"two buffers of different lengths ({m[1]} vs. {m[2]}) in one operation: {why} ({sizes})"
            ).with_traceback(exc.__traceback__) from None  # the learner's line
        if m := re.search(r"dtype\(\) == \w+\[\w+\]\.dtype\(\) \((\w+) vs\. (\w+)\)", text):
            raise ShapeError(
                f"a collective got buffers of two dtypes ({m[1]} vs. {m[2]}): make the padded buffers and the "
                "shards in the dtype of flat_param and flat_grad (float64 here)"
            ).with_traceback(exc.__traceback__) from None  # the learner's line
        raise


def reference(numel, grads):
    """One device: AdamW with the given gradient per step."""
    p = start(numel).requires_grad_()
    opt = torch.optim.AdamW([p], **HYPER)
    for g in grads:
        p.grad = g.clone()
        opt.step()
    return p.detach()


def check_zero1(mod) -> str:
    seen = []
    for n, numel in ((1, 10), (3, 10), (4, 10), (4, 2), (3, 1000)):
        what = f"zero1_step, {n} ranks, {numel} parameters"
        got = run_ranks(worker, n, (mod.__name__, numel), what)
        for r in range(n):
            for summary in got[r]["seen"]:
                judge(f"{what}: rank {r}", summary)
                seen.append((f"{what}: rank {r}", summary))
        mean = [sum(grad(numel, s, r) for r in range(n)) / n for s in range(STEPS)]
        want = reference(numel, mean)
        shard = math.ceil(numel / n)
        for r in range(n):
            sizes = got[r]["sizes"]
            if sum(sizes.values()) > 2 * shard + 1:
                raise CheckFailed(
                    f"{what}: rank {r} keeps tensors of {sizes} elements in its state (walked through every "
                    f"dict, list and object), but ZeRO-1 keeps only this rank's shard of the moments: 2 × {shard} "
                    "elements (padded numel / N each)"
                )
            gathered_input(what, r, got[r], n, numel, shard)
            if got[r]["hidden"] > 0 and n > 1:
                raise CheckFailed(
                    f"{what}: rank {r} keeps {got[r]['hidden']} tensor elements outside `state` (a global of your "
                    "module, a class attribute, a default argument, an attribute of the function or of the "
                    "parameter tensor): keep the "
                    "optimizer state in `state`, and only this rank's shard of it"
                )
            if got[r]["changed"] and n > 1:
                raise CheckFailed(
                    kept_state_message(
                        f"{what}: rank {r}",
                        got[r]["changed"],
                        "keep the optimizer state in `state` (the step count and this rank's shard of the moments)",
                    )
                )
        for r in range(n):
            p = got[r]["param"]
            if max_diff(p, want) < EXACT:
                continue
            if n > 1 and max_diff(p, reference(numel, [g * n for g in mean])) < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} stepped with the SUM of the gradients: divide the reduce-scattered "
                    f"shard by N = {n} (AdamW uses the mean gradient)"
                )
            if n > 1 and max_diff(p, reference(numel, [grad(numel, s, r) for s in range(STEPS)])) < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} stepped with its own gradient only: reduce-scatter the gradients "
                    "first (dist.reduce_scatter_single), then step the shard"
                )
            padded = shard * n
            lo, hi = r * shard, min((r + 1) * shard, numel)
            own = max_diff(p[lo:hi], want[lo:hi]) if hi > lo else 0.0
            if n > 1 and own < EXACT:
                raise CheckFailed(
                    f"{what}: rank {r} has its own shard [{lo}, {hi}) right but not the others' — "
                    "all-gather the updated shards into the full buffer (dist.all_gather_single) and "
                    "copy its first numel elements back"
                )
            k = int(((p - want).abs() >= EXACT).nonzero()[0])
            raise CheckFailed(
                f"{what}: rank {r}, element {k} is {p[k].item():.6g}, expected {want[k].item():.6g} "
                f"(float64, bound {EXACT:g}): check the padding to {padded} and the slice "
                "[rank·padded/N, (rank+1)·padded/N), and the AdamW bias correction with state['step']"
            )
        if n > 1:
            for r in range(n):
                for step, summary in enumerate(got[r]["seen"]):
                    pattern(f"{what}: rank {r}, step {step + 1}", summary["comm"], shard * n)
    finally_own(mod, ["zero1_step"], seen)
    return (
        "N = 1, 3, 4 ranks; 2, 10, 1000 parameters (padding, fewer than ranks) = torch AdamW on the mean gradient, "
        "3 steps (float64); one reduce-scatter and one all-gather per step, state = 2 shards"
    )


def gathered_input(what, r, got, n, numel, shard) -> None:
    """Each step's all-gather sends this rank's shard of the *updated parameters* (what the step just
    computed), not a gradient or an update: ZeRO-1 steps only its shard, then gathers the parameters."""
    lo, hi = r * shard, min((r + 1) * shard, numel)
    if n == 1 or hi <= lo:
        return
    for step, (inputs, p) in enumerate(zip(got["gathered"], got["after"])):
        want = p[lo:hi]
        if not inputs:
            return  # no all-gather: pattern() names it
        sent = inputs[0].reshape(-1)[: hi - lo].double()
        if sent.numel() != hi - lo or max_diff(sent, want) >= EXACT:
            raise CheckFailed(
                f"{what}: rank {r}, step {step + 1}: the all-gather's input is not this rank's updated shard of the "
                f"parameters [{lo}, {hi}) (element 0 is {sent[0].item() if sent.numel() else float('nan'):.6g}, "
                f"the updated parameter {want[0].item():.6g}): step only your shard with adamw_update, then "
                "all-gather the updated parameter shards — gathering the averaged gradient (or an update) means "
                "every rank steps the whole parameter and keeps whole moments, which ZeRO-1 exists to avoid"
            )


RS = ("_reduce_scatter_base", "reduce_scatter", "reduce_scatter_tensor_coalesced", "reduce_scatter_tensor")
AG = ("_allgather_base", "allgather", "allgather_into_tensor_coalesced", "all_gather_into_tensor")


def pattern(what, comm, padded) -> None:
    """ZeRO-1's communication per step: one reduce-scatter of the padded gradient, one all-gather of
    the padded parameters, nothing else (no all-reduce: a rank never receives the whole summed gradient)."""
    ops = [op for op, *_ in comm]
    other = [op for op in ops if op not in RS + AG]
    if other:
        raise CheckFailed(
            f"{what}: called c10d::{other[0]}: ZeRO-1 communicates with one reduce-scatter (each rank receives "
            "only the sum of its shard of the gradient) and one all-gather (the updated shards), nothing else — "
            + (
                "an all_reduce sends every rank the whole gradient, then most of it is thrown away"
                if other[0] == "allreduce"
                else "no other collective"
            )
        )
    rs, ag = [c for c in comm if c[0] in RS], [c for c in comm if c[0] in AG]
    if len(rs) != 1 or len(ag) != 1:
        raise CheckFailed(
            f"{what}: {len(rs)} reduce-scatter(s) and {len(ag)} all-gather(s), expected one of each per step: "
            "reduce-scatter the padded gradient once, all-gather the padded parameters once"
        )
    full = max(rs[0][1], rs[0][2]), max(ag[0][1], ag[0][2])
    if full != (padded, padded):
        raise CheckFailed(
            f"{what}: the reduce-scatter moved {full[0]} and the all-gather {full[1]} elements, expected the padded "
            f"buffer of {padded} each (numel padded to a multiple of N, shard_range)"
        )


LESSON = Lesson(
    number="03",
    title="ZeRO",
    module="ex03_zero",
    checks=(("zero1_step", check_zero1),),
    rules=(RULES,),
)
