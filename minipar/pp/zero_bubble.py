"""Zero-bubble pipelining: the backward split into I (input gradient) and W (weight gradient).

Qi, Wan, Huang & Lin 2024, "Zero Bubble Pipeline Parallelism", arXiv:2401.10241 (ICLR 2024). The
paper calls the two halves B (gradient of the stage input, which the previous stage waits for) and
W (gradient of the weights, which nobody waits for); minipar writes them as PyTorch's
``torch.distributed.pipelining`` does: ``"1I3"`` (BACKWARD_INPUT) and ``"1W3"`` (BACKWARD_WEIGHT),
keeping ``"B"`` for the whole backward of GPipe/1F1B. Only I sits on the critical path between
stages, so W can be moved into the slots where 1F1B idles.

- :func:`zb_h1` — the paper's ZB-H1 ("memory efficient schedule", §2.1, Figure 3 top): 1F1B's
  order of F and I, with rank r's W passes delayed by r slots, so every rank holds at most p
  micro-batches' activations (1F1B's rank 0 holds p) and the delayed W's fill the cool-down.
  Bubble ``(p−1)(T_F + T_I − T_W)`` per rank against 1F1B's ``(p−1)(T_F + T_I + T_W)`` (§2, where the
  paper writes T_B for minipar's T_I; :func:`zb_h1_bubble`); with T_F = T_I = T_W one third of 1F1B's.
- :class:`WeightGradStore` and :func:`split_linears` — how minipar splits a real backward. Every
  ``nn.Linear`` of the stage runs through :class:`SplitLinear`, whose backward, while a store is
  collecting (the I pass), computes only ``grad_x = grad_y · Wᵀ`` and stores what W needs
  (``x`` and ``grad_y``); W later computes ``grad_W = grad_yᵀ · x`` and ``grad_b = Σ grad_y`` and
  accumulates them with ``torch.autograd.backward`` on the parameters (so gradient hooks, e.g.
  DDP's, fire in W). Why this and not two ``torch.autograd.grad`` calls (inputs, then weights)?
  A second autograd call from the stage output to the weights walks the whole graph again,
  recomputing every input gradient on the way: W would cost as much as I. Storing (x, grad_y) per
  linear makes W exactly the weight matmuls — the same choice as the paper's Megatron-LM
  implementation. Parameters outside ``nn.Linear`` (LayerNorm, embeddings) get their gradients
  in I: small vectors, a tiny share of the backward FLOPs.

The schedule runs on :class:`~minipar.pp.executor.PipelineExecutor` like any other: the
simulator (:func:`~minipar.pp.schedules.simulate`, ``t_w=``) times it, the p2p order check
(:mod:`minipar.pp.p2p_order`) sees only F and I messages (W sends nothing).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.errors import ConfigError
from minipar.pp.schedules import _check_pm, zb_h1  # noqa: F401 (zb_h1 lives with the other schedules)


def zb_h1_bubble(p: int, m: int, t_f: float = 1.0, t_b: float = 1.0, t_w: float = 1.0) -> float:
    """Idle fraction of the step under ZB-H1: bubble time ``(p−1)(T_F + T_I − T_W)`` per rank
    (arXiv:2401.10241 §2; ``t_b`` is T_I, the input-gradient pass, which the paper calls B) over the step
    ``m(T_F + T_I + T_W) + bubble``. The simulator reaches it for m ≥ p and T_W ≤ min(T_F, T_I).

    Raises:
        ConfigError: m < p (the warm-up then holds every micro-batch; the formula does not apply).
    """
    _check_pm(p, m)
    if m < p:
        raise ConfigError(f"the ZB-H1 bubble formula needs m >= p, got m={m}, p={p}; use m >= {p}")
    bubble = (p - 1) * (t_f + t_b - t_w)
    return bubble / (bubble + m * (t_f + t_b + t_w))


class WeightGradStore:
    """The W passes a rank owes: per key (``(stage, micro-batch)``), the weight-gradient work its I
    pass left. ``with store.collect(key): backward(...)`` records; ``store.flush(key)`` runs them."""

    def __init__(self):
        self.pending: dict[tuple, list[tuple]] = {}
        self.current: tuple | None = None

    @contextlib.contextmanager
    def collect(self, key: tuple):
        if key in self.pending:
            raise ConfigError(f"W of {key} is still pending: run its W before the next I of the same micro-batch")
        self.pending[key], self.current = [], key
        try:
            yield
        finally:
            self.current = None

    def put(self, linear: nn.Linear, x: torch.Tensor, grad_y: torch.Tensor) -> None:
        self.pending[self.current].append((linear, x, grad_y))

    def nbytes(self, key: tuple) -> int:
        """Bytes held for the W of ``key`` (the x and grad_y of every linear; 0 once flushed)."""
        return sum(x.nbytes + g.nbytes for _, x, g in self.pending.get(key, []))

    def flush(self, key: tuple) -> None:
        """Run the W of ``key``: ``grad_W += grad_yᵀ·x``, ``grad_b += Σ grad_y``, accumulated
        through autograd (post-accumulate-grad hooks fire here). Raises ConfigError if no I ran."""
        if key not in self.pending:
            raise ConfigError(f"W of {key} has no I before it: schedule I before W for each (stage, micro-batch)")
        params, grads = [], []
        for lin, x, g in self.pending.pop(key):
            g2, x2 = g.reshape(-1, g.shape[-1]), x.reshape(-1, x.shape[-1])
            params.append(lin.weight)
            grads.append(g2.t() @ x2)  # (out, in)
            if lin.bias is not None:
                params.append(lin.bias)
                grads.append(g2.sum(0))
        if params:
            torch.autograd.backward(params, grads)


class SplitLinear(torch.autograd.Function):
    """``y = x·Wᵀ + b`` whose backward defers the weight gradient to ``store`` while it collects."""

    @staticmethod
    def forward(ctx, x, weight, bias, linear, store):
        ctx.save_for_backward(x, weight)
        ctx.linear, ctx.store, ctx.has_bias = linear, store, bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        grad_x = grad_y @ weight  # (..., in): the input gradient, needed now by the previous stage
        if ctx.store.current is not None:  # I pass: W's share waits in the store
            ctx.store.put(ctx.linear, x, grad_y)
            return grad_x, None, None, None, None
        g2, x2 = grad_y.reshape(-1, grad_y.shape[-1]), x.reshape(-1, x.shape[-1])
        return grad_x, g2.t() @ x2, g2.sum(0) if ctx.has_bias else None, None, None


@contextlib.contextmanager
def split_linears(modules, store: WeightGradStore):
    """Inside the block, every ``nn.Linear`` in ``modules`` computes through :class:`SplitLinear`
    (same forward, same gradients outside ``store.collect``); restored afterwards."""
    linears = [mod for top in modules for mod in top.modules() if isinstance(mod, nn.Linear)]
    for lin in linears:
        lin.forward = lambda x, lin=lin: SplitLinear.apply(x, lin.weight, lin.bias, lin, store)
    try:
        yield linears
    finally:
        for lin in linears:
            del lin.forward
