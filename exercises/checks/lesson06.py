"""Checks for lesson 06: 1F1B (and, stretch, interleaved 1F1B) against minipar's reference order."""

from __future__ import annotations

import importlib

import torch

from exercises.checks.common import EXACT, CheckFailed, max_diff, run_ranks
from exercises.checks.schedules import CASES, RULES, first_difference, validate
from exercises.checks.watch import finally_own, watched

TITLE = "1F1B"
MODULE = "ex06_1f1b"


def _tiny_gpt():
    from minipar.models import GPT, GPTConfig

    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=3, n_head=2, d_model=8))


def _batch(m):
    g = torch.Generator().manual_seed(5)
    return torch.randint(0, 17, (2 * m, 8), generator=g), torch.randint(0, 17, (2 * m, 8), generator=g)


def run_worker(module, m):
    """Run the learner's schedule with minipar's executor (float64); return this rank's gradients."""
    from minipar import dist as mdist
    from minipar.pp.executor import PipelineExecutor
    from minipar.pp.stages import build_stages

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


CHECKS = [("one_f_one_b", check_1f1b), ("interleaved_1f1b (stretch)", check_interleaved)]
