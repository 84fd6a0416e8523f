"""Checks for lesson 08: a hand-written recompute Function against a plain transformer block (float64,
dropout on: outputs, gradients, bytes kept, the caller's RNG stream), and one step of dynamic loss
scaling against ``minipar.optim.amp.DynamicLossScaler``. In one process; no timings."""

from __future__ import annotations

import torch

from exercises.checks.common import CheckFailed, Lesson, call, expect_close
from exercises.checks.watch import Refuse, Watch, expect_no_state, finally_own, judge, state_snapshot, watched

RECOMPUTE = "this exercise is recomputation by hand: write the autograd Function yourself"
SCALING = "this exercise is dynamic loss scaling: write it yourself"
RULES = Refuse(
    {
        "torch.utils.checkpoint": RECOMPUTE + ", not torch.utils.checkpoint",
        "minipar.model.recompute": RECOMPUTE + ", not minipar's",
        "minipar.optim.amp": SCALING + ", not minipar's DynamicLossScaler",
        "torch.amp": SCALING + ", not torch.amp.GradScaler",
    }
)


class Counted:
    """``fn`` that records, per call, whether grad was enabled (a recompute runs it twice: no grad, then grad)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args):
        self.calls.append(torch.is_grad_enabled())
        return self.fn(*args)


def _calls_ok(what, counted, phase, want) -> None:
    if counted.calls != want:
        raise CheckFailed(
            f"{what}: {phase} ran fn {len(counted.calls)} time(s) with grad {counted.calls} (True = enabled), "
            f"expected {want}: a recompute runs fn once in forward under torch.no_grad() (nothing kept but the "
            "inputs) and once more in backward with grad, back-propagating through that re-run"
        )


def _block():
    from minipar.model.gpt import Block, GPTConfig

    torch.manual_seed(0)
    return Block(GPTConfig(d_model=32, n_head=4, dropout=0.1, attention="explicit", block_size=16)).double()


def _run(blk, x, go, fn_wrap, learner=None):
    """Forward from seed 5, 3 more random draws, backward, then one draw: what a training loop sees."""
    for p in blk.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(5)
    fn = Counted(blk._forward)
    with Watch(RULES, own=learner) as w:
        y = fn_wrap(fn, x)
    forward_calls, fn.calls = fn.calls, []
    between = torch.rand(3, dtype=torch.float64)  # the caller's RNG moves on before backward
    if learner is not None:
        judge("checkpoint(block, x), forward", w.summary())
        if forward_calls != [False]:
            fn.calls = forward_calls
            _calls_ok("checkpoint(block, x)", fn, "forward", [False])
        with Watch(RULES, own=learner) as w:
            call(
                "backward through Checkpoint (Checkpoint.backward; it returns None for fn, then one gradient "
                "per input)",
                y.backward,
                go,
            )
        judge("checkpoint(block, x), backward", w.summary())
        _calls_ok("checkpoint(block, x)", fn, "backward", [True])
    else:
        y.backward(go)
    after = torch.rand(3, dtype=torch.float64)
    return y.detach(), x.grad, [p.grad.clone() for p in blk.parameters()], between, after


def check_checkpoint(mod) -> str:
    from minipar.model.memory import SavedTensorMeter

    blk = _block()
    x = torch.randn(2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    go = torch.randn(2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    want = _run(blk, x, go, lambda fn, t: fn(t))
    before = state_snapshot(mod)
    got = _run(blk, x, go, lambda fn, t: call("checkpoint (Checkpoint.forward)", mod.checkpoint, fn, t), learner=mod)
    expect_no_state(
        "checkpoint(block, x)", mod, before, "what backward needs travels on ctx (ctx.save_for_backward, ctx.rng)"
    )
    expect_close("output of checkpoint(block, x)", got[0], want[0], hint="forward must return fn(*inputs)")
    expect_close(
        "grad of x",
        got[1],
        want[1],
        hint="the re-run must draw the same dropout masks: restore the RNG state saved in forward "
        "(torch.set_rng_state(ctx.rng)) before calling fn again",
    )
    for i, (g, w) in enumerate(zip(got[2], want[2])):
        expect_close(
            f"grad of block parameter {i}", g, w, hint="restore the RNG state saved in forward before the re-run"
        )
    expect_close(
        "the caller's random numbers after backward",
        got[4],
        want[4],
        hint="backward must leave the caller's RNG stream as it was: wrap the re-run in torch.random.fork_rng()",
    )
    x1 = x.clone().requires_grad_()
    with SavedTensorMeter(exclude=blk) as meter:
        y = mod.checkpoint(blk._forward, x1)  # the graph (and what it saved) lives while y does
        kept = meter.live
    del y
    if kept != x1.numel() * 8:
        raise CheckFailed(
            f"forward kept {kept:,} bytes for backward, expected {x1.numel() * 8:,} (the input only): "
            "run fn under torch.no_grad() and ctx.save_for_backward only the inputs"
        )
    y = call("checkpoint (Checkpoint.forward)", mod.checkpoint, blk._forward, x1)
    saved = getattr(y.grad_fn, "saved_tensors", None) or ()
    if saved and not any(t.untyped_storage().data_ptr() == x1.untyped_storage().data_ptr() for t in saved):
        raise CheckFailed(
            "forward saved a copy of the input, not the input itself: ctx.save_for_backward(*inputs) keeps a "
            "reference to the tensor the caller already holds (no extra memory); a copy doubles it"
        )
    del y
    _several_inputs(mod, blk)
    finally_own(mod, ["Checkpoint.forward", "Checkpoint.backward"])
    return (
        "a float64 transformer block with dropout: output, input and parameter gradients, RNG stream, "
        "bytes kept = the input, fn run once without grad then once with; three inputs, one without grad"
    )


def _several_inputs(mod, blk) -> None:
    """``checkpoint(fn, a, b, c)``: gradients for a and b (through the block, with dropout), None for c."""
    g = torch.Generator().manual_seed(3)
    a, b, c = (torch.randn(2, 16, 32, dtype=torch.float64, generator=g) for _ in range(3))
    go = torch.randn(2, 16, 32, dtype=torch.float64, generator=g)

    def fn(a, b, c):
        return blk._forward(a + torch.tanh(b) * c)

    res = []
    for wrap in (lambda f, *t: f(*t), lambda f, *t: call("checkpoint(fn, a, b, c)", mod.checkpoint, f, *t)):
        ins = [a.clone().requires_grad_(), b.clone().requires_grad_(), c.clone()]
        torch.manual_seed(7)
        y = wrap(fn, *ins)
        call("backward through Checkpoint with three inputs", y.backward, go)
        res.append([t.grad for t in ins])
    want, got = res
    for name, gw, gg in zip("ab", want[:2], got[:2]):
        if gg is None:
            raise CheckFailed(
                f"checkpoint(fn, a, b, c), three inputs: input {name} got no gradient: return one gradient per input "
                "(after None for fn), for every input that requires grad — not only the first"
            )
        expect_close(f"checkpoint(fn, a, b, c): grad of input {name}", gg, gw, hint="one gradient per input")
    if got[2] is not None:
        raise CheckFailed("checkpoint(fn, a, b, c): input c has requires_grad=False but got a gradient: return None")


def check_loss_scale(mod) -> str:
    from minipar.optim.amp import DynamicLossScaler

    seen = []
    pattern = [1, 1, 0, 1, 1, 1, 1, "nan", 1, 1, 1, 1, 1, 1]  # 0: an inf gradient
    configs = [  # (tensors, growth_interval, keyword arguments): defaults, then several tensors and other factors
        (1, 3, {}),
        (3, 2, {"growth": 3.0, "backoff": 0.25}),
    ]
    before = state_snapshot(mod)
    for n_tensors, interval, kw in configs:
        ref = DynamicLossScaler(init_scale=2.0**10, growth_interval=interval, **kw)
        scale, clean = 2.0**10, 0
        for step, kind in enumerate(pattern):
            gs = [torch.full((5,), 3.0 + i, dtype=torch.float64) * ref.scale for i in range(n_tensors)]
            bad = gs[-1]  # the overflow is in the last tensor: every gradient must be looked at
            if kind == 0:
                bad[2] = float("inf")
            elif kind == "nan":
                bad[4] = float("nan")
            g_ref, g_got = [g.clone() for g in gs], [g.clone() for g in gs]
            ok_ref = ref.unscale_and_check(g_ref)
            ref.update(ok_ref)
            what = (
                f"loss_scale_step with {n_tensors} gradient tensor(s)"
                + (f", growth_interval={interval}, growth={kw['growth']}, backoff={kw['backoff']}" if kw else "")
                + f", step {step} ({'inf' if kind == 0 else kind if kind == 'nan' else 'finite'} gradients"
                + (" in the last tensor)" if n_tensors > 1 and kind != 1 else ")")
            )
            got, summary = watched(what, RULES, mod, mod.loss_scale_step, g_got, scale, clean, interval, **kw)
            seen.append((what, summary))
            if not isinstance(got, tuple) or len(got) != 3:
                raise CheckFailed("loss_scale_step must return (step, new_scale, new_clean)")
            ok, scale, clean = got
            if bool(ok) != ok_ref:
                raise CheckFailed(
                    f"{what}: step={ok}, expected {ok_ref}: any inf or nan in any gradient skips the step (check "
                    "every tensor of the list)"
                )
            if not ok_ref and any(
                not torch.equal(a.isnan(), b.isnan()) or not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
                for a, b in zip(g_got, gs)
            ):
                raise CheckFailed(
                    f"{what}: the gradients were changed on a skipped step: check every gradient first, "
                    "unscale only when all are finite"
                )
            if scale != ref.scale:
                raise CheckFailed(
                    f"{what}: scale {scale:g}, expected {ref.scale:g}: on overflow multiply by backoff and reset the "
                    "clean count to 0; after growth_interval clean steps in a row multiply by growth (use the "
                    "arguments, not 2 and 0.5)"
                )
            if ok_ref:
                for i, (a, b) in enumerate(zip(g_got, g_ref)):
                    expect_close(
                        f"{what}: unscaled gradient tensor {i}",
                        a,
                        b,
                        hint="divide every gradient by the scale, in place",
                    )
            expect_no_state(what, mod, before, "the scaler's state is scale and clean, given and returned")
    finally_own(mod, ["loss_scale_step"], seen)
    return (
        f"{len(pattern)} steps with inf and nan, 1 and 3 tensors (overflow in the last), default and other "
        "growth/backoff: skips, scales and unscaled gradients = DynamicLossScaler"
    )


LESSON = Lesson(
    number="08",
    title="when memory runs short",
    module="ex08_memory",
    checks=(
        ("Checkpoint", check_checkpoint),
        ("loss_scale_step", check_loss_scale),
    ),
    rules=(RULES,),
)
