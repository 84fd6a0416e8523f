"""Checks for lesson 08: a hand-written recompute Function against a plain transformer block (float64,
dropout on: outputs, gradients, bytes kept, the caller's RNG stream), and one step of dynamic loss
scaling against ``minipar.amp.DynamicLossScaler``. In one process; no timings."""

from __future__ import annotations

import torch

from exercises.checks.common import CheckFailed, call, expect_close

TITLE = "when memory runs short"
MODULE = "ex08_memory"


def _block():
    from minipar.models import Block, GPTConfig

    torch.manual_seed(0)
    return Block(GPTConfig(d_model=32, n_head=4, dropout=0.1, attention="explicit", block_size=16)).double()


def _run(blk, x, go, fn_wrap, learner=False):
    """Forward from seed 5, 3 more random draws, backward, then one draw: what a training loop sees."""
    for p in blk.parameters():
        p.grad = None
    x = x.detach().clone().requires_grad_()
    torch.manual_seed(5)
    y = fn_wrap(blk._forward, x)
    between = torch.rand(3, dtype=torch.float64)  # the caller's RNG moves on before backward
    if learner:
        call(
            "backward through Checkpoint (Checkpoint.backward; it returns None for fn, then one gradient per input)",
            y.backward,
            go,
        )
    else:
        y.backward(go)
    after = torch.rand(3, dtype=torch.float64)
    return y.detach(), x.grad, [p.grad.clone() for p in blk.parameters()], between, after


def check_checkpoint(mod) -> str:
    from minipar.memory import SavedTensorMeter

    blk = _block()
    x = torch.randn(2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    go = torch.randn(2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    want = _run(blk, x, go, lambda fn, t: fn(t))
    got = _run(blk, x, go, lambda fn, t: call("checkpoint (Checkpoint.forward)", mod.checkpoint, fn, t), learner=True)
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
    return (
        "a float64 transformer block with dropout: output, input and parameter gradients, RNG stream, "
        "bytes kept = the input"
    )


def check_loss_scale(mod) -> str:
    from minipar.amp import DynamicLossScaler

    pattern = [1, 1, 0, 1, 1, 1, 1, "nan", 1, 1, 1, 1, 1, 1]  # 0: an inf gradient
    ref = DynamicLossScaler(init_scale=2.0**10, growth_interval=3)
    scale, clean = 2.0**10, 0
    for step, kind in enumerate(pattern):
        g = torch.full((5,), 3.0, dtype=torch.float64) * ref.scale
        if kind == 0:
            g[2] = float("inf")
        elif kind == "nan":
            g[4] = float("nan")
        g_ref, g_got = g.clone(), g.clone()
        ok_ref = ref.unscale_and_check([g_ref])
        ref.update(ok_ref)
        got = call("loss_scale_step", mod.loss_scale_step, [g_got], scale, clean, 3)
        if not isinstance(got, tuple) or len(got) != 3:
            raise CheckFailed("loss_scale_step must return (step, new_scale, new_clean)")
        ok, scale, clean = got
        what = f"step {step} ({'inf' if kind == 0 else kind if kind == 'nan' else 'finite'} gradients)"
        if bool(ok) != ok_ref:
            raise CheckFailed(f"{what}: step={ok}, expected {ok_ref}: any inf or nan gradient skips the step")
        if (
            not ok_ref
            and not torch.equal(g_got.isnan(), g.isnan())
            or not ok_ref
            and not torch.equal(torch.nan_to_num(g_got), torch.nan_to_num(g))
        ):
            raise CheckFailed(
                f"{what}: the gradients were changed on a skipped step: check every gradient first, "
                "unscale only when all are finite"
            )
        if scale != ref.scale:
            raise CheckFailed(
                f"{what}: scale {scale:g}, expected {ref.scale:g}: halve on overflow and reset the "
                "clean count to 0; double after growth_interval clean steps in a row"
            )
        if ok_ref:
            expect_close(
                f"{what}: unscaled gradient", g_got, g_ref, hint="divide every gradient by the scale, in place"
            )
    return f"{len(pattern)} steps with inf and nan: skips, scales and unscaled gradients = DynamicLossScaler"


CHECKS = [("Checkpoint", check_checkpoint), ("loss_scale_step", check_loss_scale)]
