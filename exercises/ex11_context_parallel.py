"""Lesson 11 · context parallelism: the online-softmax merge of two attention blocks, and one ring step.

Exercises (run ``make check LESSON=11``):

1. :func:`merge` — two blocks' attention outputs and log-sum-exps over disjoint keys -> the attention
   over all their keys, exactly (the online softmax of FlashAttention and ring attention).
2. :func:`ring_step` — one step of ring attention's K/V rotation: send this rank's block to the right
   neighbour while receiving the left neighbour's block, with point-to-point messages only.

Ring attention (Liu et al. 2023, arXiv:2310.01889) is N − 1 ring steps with a block attention and a
merge between them. The checker compares :func:`merge` with the softmax over both blocks in float64
(scores up to 1000, where exp overflows), and runs :func:`ring_step` on 1, 2, 3 and 4 ranks and on a
sub-group with blocks of *different* lengths (sequences that do not split evenly), watching which
messages go where and how many bytes they carry.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def ring_neighbours(group=None) -> tuple[list[int], int]:
    """``(ranks, i)``: the *global* ranks of ``group`` in ring order, and this rank's index among them.

    Given (not an exercise): ``dist.isend(t, dst=...)`` takes a global rank even with ``group=``.
    """
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(dist.get_world_size()))
    return ranks, dist.get_rank(group)


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor):
    """Merge two attention blocks over disjoint key sets into the attention over their union.

    Args:
        out_a, out_b: (B, h, L, d) each block's softmax-weighted values (softmax over its own keys).
        lse_a, lse_b: (B, h, L) each block's log-sum-exp of the scores, ``log Σ_j exp(s_j)``.
    Returns:
        ``(out, lse)``: (B, h, L, d) and (B, h, L), what one softmax over both blocks' keys gives.

    Invariant: ``exp(lse) = exp(lse_a) + exp(lse_b)``, and each block's output is re-weighted by its
    share of the total mass, ``exp(lse_a − lse)``.

    Hint: lesson 11, "Your turn". Scores of 1000 make ``exp(lse_a)`` overflow to inf: compute
    ``lse`` with ``torch.logaddexp`` (or subtract the larger of the two first), then the weights
    ``exp(lse_a − lse)`` are at most 1. The weights have shape (B, h, L): add a last axis to scale out.
    """
    raise NotImplementedError("not implemented yet: merge")


def ring_step(send: torch.Tensor, recv: torch.Tensor, group=None) -> torch.Tensor:
    """One ring step: send ``send`` to the next rank of ``group``, receive the previous rank's block into ``recv``.

    Args:
        send: this rank's block (any shape, contiguous).
        recv: a buffer shaped like the *left* neighbour's block (blocks may differ in length when the
            sequence does not split evenly); filled in place.
        group: a process group (default: the world). Ranks outside it do not call this.
    Returns:
        ``recv``, holding the block of the rank before this one in the ring (index i − 1 mod N).
        With N = 1 there is nobody else: no message, and ``send`` is returned.

    Invariant: exactly one message to rank i + 1 (``send.numel()`` elements) and one from rank i − 1,
    both posted before either is waited for (every rank sends at once: blocking sends would deadlock).

    Hint: lesson 11, "Your turn". ``ring_neighbours(group)`` gives the global ranks; post
    ``dist.irecv(recv, src=left, group=group)`` and ``dist.isend(send, dst=right, group=group)``,
    then ``wait()`` both.
    """
    raise NotImplementedError("not implemented yet: ring_step")
