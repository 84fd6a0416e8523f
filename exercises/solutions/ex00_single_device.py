"""Lesson 00 · one device: a backward pass and an optimizer step, written by hand.

Exercises (run ``make check LESSON=00``):

1. :func:`layer_norm_backward` — the gradients of LayerNorm (Ba, Kiros, Hinton 2016, arXiv:1607.06450).
2. :func:`cross_entropy_backward` — the gradient of softmax + cross-entropy on logits.
3. :func:`adamw_step` — one AdamW update (Loshchilov & Hutter 2019, arXiv:1711.05101, Algorithm 2),
   equal to ``torch.optim.AdamW`` to float64 rounding.

All three are checked in float64 against autograd / ``torch.optim.AdamW`` on one device: no process
group, no collective. Each docstring states the contract (inputs, outputs, shapes); the lesson's
"What you need to build it" shows every tool they need.
"""

from __future__ import annotations

import math

import torch


def layer_norm_backward(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward of ``y = (x − mean) / sqrt(var + eps) · weight + bias`` over the last dimension.

    Shapes: ``grad_out``, ``x``: (..., D), any number of leading (batch, sequence) dimensions;
    ``weight``: (D,). ``var`` is the *biased* variance (divide by D), as ``torch.nn.functional.layer_norm``.
    No autograd: the gradients are computed with tensor operations.

    Returns:
        ``(grad_x, grad_weight, grad_bias)`` of shapes (..., D), (D,), (D,): what autograd gives
        for ``F.layer_norm(x, (D,), weight, bias, eps)``.

    Invariant: ``grad_x`` sums to zero over the last dimension (shifting x changes nothing) and,
    up to ``eps``, is orthogonal to the normalised input over it (scaling x changes nothing either).

    Hint: lesson 00, "What you need to build it" (the chain rule, keepdim, sums over leading
    dimensions): x reaches y three ways (directly, through the mean, through the variance); derive
    each term, and the two invariants check you.
    """
    mean = x.mean(-1, keepdim=True)
    rstd = (x.var(-1, unbiased=False, keepdim=True) + eps).rsqrt()
    xhat = (x - mean) * rstd
    g = grad_out * weight
    grad_x = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    lead = tuple(range(x.dim() - 1))
    return grad_x, (grad_out * xhat).sum(lead), grad_out.sum(lead)


def cross_entropy_backward(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Gradient of ``F.cross_entropy(logits, targets)`` (mean over the N rows) w.r.t. ``logits``.

    Shapes: ``logits`` (N, V) float, N rows of V class scores; ``targets`` (N,) int64 in [0, V).
    No autograd.

    Returns:
        (N, V): d(mean loss)/d(logits), what autograd gives for ``F.cross_entropy(logits, targets)``.

    Invariant: every row sums to zero; the result does not change when a row of ``logits`` is
    shifted by a constant (compute the softmax with the row maximum subtracted: large logits
    must not overflow).

    Hint: lesson 00, "What you need to build it" (the table's cross-entropy row): differentiate
    −log softmax(z)[y] for one row z, then account
    for the mean over the N rows.
    """
    p = torch.softmax(logits, dim=-1)
    p[torch.arange(logits.shape[0]), targets] -= 1
    return p / logits.shape[0]


@torch.no_grad()
def adamw_step(
    param: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    step: int,
    lr: float = 1e-3,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.01,
) -> None:
    """One AdamW update of ``param`` in place (and of its moments ``exp_avg``, ``exp_avg_sq``).

    Shapes: all four tensors the same shape. ``step`` counts updates from 1 (the first call has
    ``step=1``), used for the bias correction.

    Must equal ``torch.optim.AdamW(lr, betas, eps, weight_decay)`` to float64 rounding: the weight
    decay decoupled from the gradient (Loshchilov & Hutter 2019, arXiv:1711.05101, Algorithm 2),
    both moments bias-corrected (Kingma & Ba 2015, arXiv:1412.6980, Algorithm 1), in PyTorch's
    order of operations (its documentation of ``torch.optim.AdamW`` lists them).

    Returns nothing: ``param``, ``exp_avg`` and ``exp_avg_sq`` are the optimizer's tensors, updated in place.

    Hint: lesson 00, "What you need to build it", 3 and 4 (in-place updates, the AdamW update). Forgetting the bias
    correction makes the first step ~3× too large (up to ~6.6× around step 12); eps goes *after* the
    bias-corrected sqrt.
    """
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1**step))
