"""Lesson 09 · Communication is the bottleneck: compress what you send.

Exercises (run ``make check LESSON=09``):

1. :func:`topk_with_error_feedback` — keep the k largest entries of gradient + error, remember the
   rest for the next step (Stich et al. 2018, arXiv:1809.07599; Lin et al. 2018 "Deep Gradient
   Compression", arXiv:1712.01887 §3).
2. :func:`powersgd_round` — one rank-r PowerSGD round on real ranks: two small all-reduces instead
   of one of the whole matrix (Vogels et al. 2019, arXiv:1905.13727, Algorithm 1).

Both are what ``minipar.dp.compression`` does inside ``TopKCompression`` and ``PowerSGDCompression``;
the checker compares yours with one device in float64.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def orthogonalize(p: torch.Tensor) -> torch.Tensor:
    """Orthonormal columns spanning the columns of ``p`` (n, r) (given: Gram–Schmidt via QR)."""
    return torch.linalg.qr(p).Q


def topk_with_error_feedback(grad: torch.Tensor, error: torch.Tensor, k: int):
    """Top-k sparsification with error feedback, for one flat gradient.

    Args:
        grad: (n,) this step's gradient. error: (n,) what earlier steps did not send (zeros at first).
        k: entries to send, 1 <= k <= n.
    Returns:
        ``(values, indices, new_error)``: values (k,) and int64 indices (k,) of the k entries of
        ``a = grad + error`` with the largest ``|a|``; new_error (n,) = ``a`` with those k entries set
        to 0. Invariant: ``new_error + scatter(values, indices) == grad + error`` exactly — nothing
        is lost, only delayed.

    Hint: lesson 09, "Compress: send fewer bytes" (top-k with error feedback). ``Tensor.topk`` on ``a.abs()``.
    """
    a = grad + error
    idx = a.abs().topk(k).indices
    new_error = a.clone()
    new_error[idx] = 0
    return a[idx], idx, new_error


def powersgd_round(m: torch.Tensor, q: torch.Tensor, group=None):
    """One PowerSGD round on every rank of ``group``: a rank-r estimate of the MEAN of the ranks' ``m``.

    Args:
        m: (n, k) this rank's gradient matrix (error already added). q: (k, r) the same on every rank.
    Returns:
        ``(approx, new_q)``: approx (n, k) = P̂·Qᵀ, identical on every rank; new_q (k, r) = Q, the
        mean of the ranks' ``mᵀ·P̂`` (kept for the next step's warm start).

    Communication: two all-reduces, of n·r and then k·r elements — never the whole n·k matrix.
    Invariant: P and Q are linear in m, so averaging them over the ranks gives one device's round on
    the mean matrix (what the checker tests) — as long as every rank orthogonalizes the same P.

    Hint: lesson 09, "Compress: send fewer bytes" (PowerSGD; Vogels et al. 2019, arXiv:1905.13727, Algorithm 1).
    """
    n_ranks = dist.get_world_size(group)
    p = m @ q
    dist.all_reduce(p, group=group)
    p = orthogonalize(p / n_ranks)
    new_q = m.t() @ p
    dist.all_reduce(new_q, group=group)
    new_q /= n_ranks
    return p @ new_q.t(), new_q
