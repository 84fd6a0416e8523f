"""Lesson 12 · Mixture of experts: route tokens, balance the load, and move them to their experts.

Exercises (run ``make check LESSON=12``):

1. :func:`router_with_aux_loss` — top-k softmax gating and the Switch Transformer load-balancing
   loss (Fedus, Zoph & Shazeer 2021, arXiv:2101.03961, §2.2, eqs. 4-6).
2. :func:`expert_parallel_forward` — on real ranks: the dispatch/combine bookkeeping of expert
   parallelism. Sort the choices by expert, exchange counts, send each row to the rank that owns
   its expert (an all-to-all with uneven splits), run the local experts, send the results back,
   and add them up with their gates (GShard, Lepikhin et al. 2020, arXiv:2006.16668).

Both are what ``minipar.model.moe.router``, ``minipar.model.moe.dispatch`` and ``minipar.ep.parallel``
do; the checker compares yours with one device in float64 and watches which collectives you call and
how many rows move.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def router_with_aux_loss(logits: torch.Tensor, top_k: int):
    """Top-k gating and the load-balancing loss for one batch of router logits.

    Args:
        logits: (T, E) router logits. top_k: k, 1 <= k <= E.
    Returns:
        ``(expert, gate, aux)``: expert (T, k) int64, each token's k experts by decreasing
        probability p = softmax(logits); gate (T, k) their probabilities, divided by their sum
        when k > 1 (k = 1: the probability itself, so the router still gets a gradient);
        aux = E · Σ_i f_i · P_i (scalar, differentiable through P) with f_i = (choices of
        expert i) / (T·k) and P_i = mean over tokens of p_i. Perfect balance gives 1.

    Hint: lesson 12, "Your turn". ``softmax``, ``topk``, ``bincount(minlength=E)``; f is a count.
    """
    raise NotImplementedError("not implemented yet: router_with_aux_loss")


def expert_parallel_forward(x: torch.Tensor, expert: torch.Tensor, gate: torch.Tensor, local_experts, group=None):
    """One drop-free expert-parallel MoE forward (no autograd needed) on every rank of ``group``.

    Args:
        x: (T, d) this rank's tokens (T may differ between ranks).
        expert: (T, k) int64 global expert ids in 0..E-1; gate: (T, k) their weights.
        local_experts: this rank's E/N experts, callables (rows (n, d)) -> (n, d); group rank r
            owns global experts r·E/N ... (r+1)·E/N − 1, so E = N · len(local_experts).
    Returns:
        (T, d): ``out[t] = Σ_j gate[t, j] · expert_{expert[t, j]}(x[t])``, equal to one device.

    Steps: (1) sort the T·k choices by expert (rows for rank r's experts are then contiguous);
    (2) all-to-all the per-expert counts (E integers) so each rank learns how many rows it gets
    from each source for each of its experts; (3) all-to-all the rows with uneven splits; (4) the
    received rows are grouped (source, expert): run each local expert on its rows from every
    source; (5) all-to-all the results back with the splits swapped; (6) out.index_add_ with the
    gates. Exactly three ``all_to_all_single`` calls; each expert sees exactly the rows routed to it.

    Hint: lesson 12, "Your turn". ``torch.argsort(..., stable=True)``, ``dist.all_to_all_single``
    with ``output_split_sizes``/``input_split_sizes``.
    """
    raise NotImplementedError("not implemented yet: expert_parallel_forward")
