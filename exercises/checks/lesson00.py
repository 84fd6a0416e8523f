"""Checks for lesson 00 (one device): LayerNorm and cross-entropy backward against autograd, AdamW
against ``torch.optim.AdamW``. Float64, bound 1e-12 (relative to the values' size ~1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from exercises.checks.common import CheckFailed, Lesson, expect_close, max_diff
from exercises.checks.watch import Refuse, finally_own, kept_state_message, state_changed, state_snapshot, watched

BY_HAND = "this exercise is the backward pass by hand: derive the gradient and compute it with tensor operations"
AUTOGRAD = Refuse(
    {
        "torch.autograd:grad": BY_HAND + ", without autograd",
        "torch.autograd:backward": BY_HAND + ", without autograd",
        "torch._tensor:Tensor.backward": BY_HAND + ", without autograd",
        "torch.autograd.functional": BY_HAND + ", without autograd",
        "torch.autograd.forward_ad": BY_HAND + ", without autograd",
        "torch._functorch": BY_HAND + ", without torch.func",
        "torch.func": BY_HAND + ", without torch.func",
    },
    c_names={"run_backward": BY_HAND + ", without the autograd engine"},
)
OPTIM = Refuse(
    {
        "torch.optim": "this exercise is the AdamW update: write its arithmetic yourself, not torch.optim",
        "minipar.optim.amp": "this exercise is the AdamW update: write its arithmetic yourself, not minipar's",
        "minipar.optim.offload": "this exercise is the AdamW update: write its arithmetic yourself, not minipar's",
    }
)


# PyTorch's words for a shape error, and what each exercise's shape errors mean in the lesson's terms
SHAPE_WORDS = ("must match the size", "cannot be multiplied", "is invalid for input of size", "Dimension out of range")
SHAPES = {
    "layer_norm_backward": "A shape error inside your code. x is (..., D) with any number of leading (batch, sequence) "
    "dimensions: take the statistics over the last dimension (-1) with keepdim=True, shape (..., 1), so they "
    "broadcast back against (..., D) (lesson 00, What you need to build it, 2)",
    "cross_entropy_backward": "A shape error inside your code. logits are (N, V), N rows of V class scores, and "
    "targets (N,) class indices: the row maximum and the row sums keep their dimension (keepdim=True, (N, 1)); "
    "the one-hot of the targets is (N, V) (F.one_hot(targets, V))",
    "adamw_step": "A shape error inside your code. param, grad, exp_avg and exp_avg_sq all have the same shape, "
    "one value per weight; step is a Python int, the same for all of them",
}


def _by_hand(mod, seen, what, rules, fn, *args, **kw):
    """The learner's call, watched: no refused function, no PyTorch backward/fused-optimizer kernel; a shape
    error PyTorch raised inside it is explained in the lesson's terms."""
    try:
        out, summary = watched(what, rules, mod, fn, *args, op_words=("backward", "_fused_adam"), **kw)
    except CheckFailed as exc:
        if any(w in str(exc) for w in SHAPE_WORDS):
            raise CheckFailed(f"{SHAPES[what]}. PyTorch said: {exc}") from None
        raise
    seen.append((what, summary))
    if summary["ops"]:
        op = next(iter(summary["ops"]))
        raise CheckFailed(
            f"{what}: your code ran PyTorch's own kernel aten::{op}: "
            + ("write the update's arithmetic yourself" if "adam" in op else BY_HAND)
        )
    return out


def _rand(*shape, seed=0, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * scale


def check_layer_norm(mod) -> str:
    seen = []
    for shape in ((4, 7), (2, 3, 16), (5, 1)):
        D = shape[-1]
        x = _rand(*shape, seed=1, scale=3.0).add_(2.0).requires_grad_()
        w, b = _rand(D, seed=2).requires_grad_(), _rand(D, seed=3).requires_grad_()
        go = _rand(*shape, seed=4)
        F.layer_norm(x, (D,), w, b, 1e-5).backward(go)
        got = _by_hand(
            mod, seen, "layer_norm_backward", AUTOGRAD, mod.layer_norm_backward, go, x.detach(), w.detach(), 1e-5
        )
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise CheckFailed("layer_norm_backward must return (grad_x, grad_weight, grad_bias)")
        gx, gw, gb = got
        what = f"layer_norm_backward, x of shape {shape}"
        for name, g, want, why in (
            ("grad_x", gx, shape, "an input's gradient has the input's shape"),
            ("grad_weight", gw, (D,), "one value per channel: sum over every leading (batch, sequence) dimension"),
            ("grad_bias", gb, (D,), "one value per channel: sum over every leading (batch, sequence) dimension"),
        ):
            if isinstance(g, torch.Tensor) and tuple(g.shape) != want:
                raise CheckFailed(f"{what}: {name} has shape {tuple(g.shape)}, expected {want}: {why}")
        expect_close(f"{what}: grad_bias", gb, b.grad, hint="sum grad_out over every leading dimension")
        expect_close(
            f"{what}: grad_weight",
            gw,
            w.grad,
            hint="sum grad_out · xhat over every leading dimension "
            "(xhat = (x − mean)·rstd with the biased variance, ÷D)",
        )
        expect_close(
            f"{what}: grad_x",
            gx,
            x.grad,
            bound=1e-10,
            hint="grad_x = rstd · (g − mean(g) − xhat · mean(g · xhat)) with g = grad_out · weight, biased "
            "variance (÷D), means over the last dimension",
        )
    finally_own(mod, ["layer_norm_backward"], seen)
    return "shapes (4, 7), (2, 3, 16), (5, 1): grad_x, grad_weight, grad_bias = autograd (float64), by hand"


def check_cross_entropy(mod) -> str:
    seen = []
    for n, v, scale in ((6, 5, 1.0), (3, 11, 1.0), (4, 3, 1000.0)):
        logits = _rand(n, v, seed=5, scale=scale).requires_grad_()
        t = torch.randint(0, v, (n,), generator=torch.Generator().manual_seed(6))
        F.cross_entropy(logits, t).backward()
        got = _by_hand(
            mod, seen, "cross_entropy_backward", AUTOGRAD, mod.cross_entropy_backward, logits.detach().clone(), t
        )
        what = f"cross_entropy_backward, logits ({n}, {v})" + (" of size ~1000" if scale > 1 else "")
        if isinstance(got, torch.Tensor) and tuple(got.shape) != (n, v):
            raise CheckFailed(
                f"{what}: the gradient has shape {tuple(got.shape)}, expected the logits' shape {(n, v)}: one value "
                "per row and class (N rows, V classes), not the per-row loss nor the target column alone"
            )
        if torch.as_tensor(got).isnan().any():
            raise CheckFailed(f"{what}: NaN — subtract each row's maximum before exp (softmax overflows otherwise)")
        if max_diff(got, logits.grad * n) < 1e-12 and n > 1:
            raise CheckFailed(f"{what}: N = {n} times too large: the loss is the mean over the rows, divide by N")
        expect_close(what, got, logits.grad, hint="(softmax(logits) − onehot(targets)) / N")
    finally_own(mod, ["cross_entropy_backward"], seen)
    return "(6, 5), (3, 11), and logits ~1000 (no overflow): = autograd (float64), by hand"


def check_adamw(mod) -> str:
    seen = []
    hyper = dict(lr=0.1, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    # two parameters stepped in turn: a (10 values) resumes at step 4 with moments of its own, b (7) starts
    # at step 1; only the step argument says which bias correction each update needs
    params = []
    for name, numel, first, seed in (("a", 10, 4, 7), ("b", 7, 1, 8)):
        p_ref = _rand(numel, seed=seed).requires_grad_()
        opt = torch.optim.AdamW([p_ref], **hyper)
        m, v = _rand(numel, seed=seed + 20, scale=0.1), _rand(numel, seed=seed + 40, scale=0.1).square()
        m, v = (
            (m, v) if first > 1 else (torch.zeros(numel, dtype=torch.float64), torch.zeros(numel, dtype=torch.float64))
        )
        if first > 1:
            opt.state[p_ref] = {
                "step": torch.tensor(float(first - 1), dtype=torch.float64),
                "exp_avg": m.clone(),
                "exp_avg_sq": v.clone(),
            }
        params.append((name, p_ref, opt, p_ref.detach().clone(), m, v, first))
    before = state_snapshot(mod)
    for k in range(3):
        for name, p_ref, opt, p, m, v, first in params:
            step = first + k
            g = _rand(p.numel(), seed=10 + step + (50 if name == "b" else 0))
            p_ref.grad = g.clone()
            opt.step()
            p_before = p.clone()
            _by_hand(mod, seen, "adamw_step", OPTIM, mod.adamw_step, p, g.clone(), m, v, step, **hyper)
            if torch.equal(p, p_before):
                raise CheckFailed(
                    f"adamw_step, parameter {name} at step {step}: param did not change. Update it in place "
                    "(p.mul_, p.add_/p.sub_): `param = ...` only rebinds your local name, and the caller's tensor "
                    "is the model's weight"
                )
            what = f"adamw_step, parameter {name} after step {step}" + (
                " (it resumed at step 4, stepped in turn with b)" if first > 1 else " (stepped in turn with a)"
            )
            expect_close(
                what,
                p,
                p_ref.detach(),
                hint="order: decay p ·= 1 − lr·wd; m, v moments; bias-correct both with the step argument "
                "(never a count of your own: two parameters are stepped in turn, one resumes at step 4); "
                "eps after sqrt(v̂); all in place (the moments too)",
            )
            st = opt.state[p_ref]
            for mname, got_m in (("exp_avg", m), ("exp_avg_sq", v)):
                expect_close(
                    f"adamw_step, {mname} of parameter {name} after step {step}",
                    got_m,
                    st[mname],
                    hint=f"update the moment {mname} given to you in place (it is the optimizer state between steps)",
                )
            place = state_changed(before, state_snapshot(mod))
            if place:
                raise CheckFailed(
                    kept_state_message(
                        "adamw_step",
                        place,
                        "the optimizer state is the moments and the step given to you, nothing kept on the side",
                    )
                )
    finally_own(mod, ["adamw_step"], seen)
    return "3 steps = torch.optim.AdamW (float64, < 1e-12), moments and bias correction, by hand"


LESSON = Lesson(
    number="00",
    title="one device",
    module="ex00_single_device",
    checks=(
        ("layer_norm_backward", check_layer_norm),
        ("cross_entropy_backward", check_cross_entropy),
        ("adamw_step", check_adamw),
    ),
    rules=(AUTOGRAD, OPTIM),
)
