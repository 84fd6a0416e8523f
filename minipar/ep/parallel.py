"""``ExpertParallelMoE``: a MoE layer's experts sharded over an expert-parallel (EP) group.

Each of the ``ep`` ranks of the group holds E/ep whole experts (rank r: experts
``[r·E/ep, (r+1)·E/ep)``) and a full copy of the router; each routes its *own* tokens. One forward
(GShard, Lepikhin et al. 2020, arXiv:2006.16668; Megatron-LM's ``MoEAlltoAllTokenDispatcher``):

1. route and plan locally (:func:`~minipar.model.moe.dispatch.make_plan`): rows sorted by expert, so
   the rows for rank j's experts are one contiguous block;
2. exchange the counts: an all-to-all of E integers, so each rank learns how many rows each
   source sends to each of its local experts (the splits of the next call);
3. **dispatch**: all-to-all with uneven splits (:func:`minipar.comm.all_to_all.all_to_all`);
   the received rows arrive grouped by source rank, then expert: permute them to expert-major;
4. run the local experts; permute back;
5. **combine**: the reverse all-to-all, then the gate-weighted sum per token, as on one device.

Backward runs the two all-to-alls in reverse, so an expert's gradient already sums the
contributions of every rank's tokens in the group; the router's gradient is local (its
parameters are replicated: reduce them with the data-parallel group, see :mod:`minipar.job.piece`).

Bytes per rank and all-to-all, rows of d elements of b bytes: d·b · (rows sent to other ranks);
with k choices per token and balanced routing, (ep−1)/ep · T·k·d·b. A training step makes four
per layer (dispatch, combine and their two backward mirrors) plus the small count exchange.
Drop-free (``capacity_factor=None``) the result equals :class:`~minipar.model.moe.layer.MoE` on one
device on the concatenation of the ranks' tokens (tests/test_experts.py, float64). With a capacity
factor each rank drops its own choices past C = ceil(cf · T_local · k / E) before sending (Switch's
per-device capacity), so an expert gets at most ep·C rows and the drops differ from one device's.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.comm.all_to_all import all_to_all
from minipar.model.moe.capacity import check_moe
from minipar.model.moe.dispatch import combine, dispatch
from minipar.model.moe.layer import MoE


def expert_major(counts: torch.Tensor) -> torch.Tensor:
    """Permutation taking rows grouped (source, expert) to (expert, source).

    Args:
        counts: (ep, E_local) int64, rows from each source rank for each local expert, in the
            received order (source-major). Returns (Σ counts,) int64 indices into the received rows.
    """
    starts = (counts.reshape(-1).cumsum(0) - counts.reshape(-1)).view_as(counts)
    dev = counts.device
    blocks = [
        torch.arange(s, s + c, device=dev) for e in range(counts.shape[1]) for s, c in zip(starts[:, e], counts[:, e])
    ]
    return torch.cat(blocks) if blocks else torch.zeros(0, dtype=torch.int64, device=dev)


class ExpertParallelMoE(nn.Module):
    """A :class:`~minipar.model.moe.layer.MoE` with its experts split over ``group``.

    Args:
        moe: the full layer (same on every rank of the group: built from the same seed); this rank
            keeps a copy of its router and its block of experts (values copied, nothing drawn).
        group: the EP process group (ep = its size must divide E); default: the world.
        balance_group: if given, the load-balancing loss uses the routed counts summed over this
            group (an all-reduce of E integers, no gradient): f of the whole batch, so the mean of
            the ranks' aux losses equals the one-device aux loss on all their tokens.
    Shapes: x (..., d) -> (..., d), as ``MoE``. Sets ``aux_loss`` and ``stats`` as ``MoE``, plus
        ``stats["a2a_rows"] = (rows sent per rank, rows received per rank)`` of the dispatch.
    Raises:
        ConfigError: E not divisible by ep.
    """

    def __init__(self, moe: MoE, group=None, balance_group=None):
        super().__init__()
        self.group, self.balance_group = group, balance_group
        self.ep, self.ep_rank = dist.get_world_size(group), dist.get_rank(group)
        check_moe(moe.n_experts, moe.top_k, moe.capacity_factor, self.ep)
        self.n_experts, self.top_k = moe.n_experts, moe.top_k
        self.local = moe.n_experts // self.ep
        self.first_expert = self.ep_rank * self.local
        self.capacity_factor, self.aux_loss_coef = moe.capacity_factor, moe.aux_loss_coef
        self.router = copy.deepcopy(moe.router)
        self.experts = moe.experts.shard(self.ep_rank, self.ep)
        self.aux_loss, self.stats = None, {}

    def _global_counts(self, routed: torch.Tensor) -> torch.Tensor:
        total = routed.clone()
        dist.all_reduce(total, group=self.balance_group)
        return total

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape, x = x.shape, x.reshape(-1, x.shape[-1])
        plan = MoE.route(self, x, self._global_counts if self.balance_group is not None else None)
        send = plan.tokens_per_expert  # (E,) rows for every expert, in expert order
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=self.group)  # (ep·E_local,): rows from each source, per expert
        recv = recv.view(self.ep, self.local)
        in_splits = send.view(self.ep, self.local).sum(1).tolist()
        out_splits = recv.sum(1).tolist()
        rows = all_to_all(dispatch(x, plan), out_splits, in_splits, self.group)  # dispatch
        perm = expert_major(recv)
        y = self.experts(rows.index_select(0, perm), recv.sum(0).tolist())
        y = y.index_select(0, torch.argsort(perm))  # back to (source, expert) order
        back = all_to_all(y, in_splits, out_splits, self.group)  # combine
        self.stats["a2a_rows"] = (sum(in_splits) - in_splits[self.ep_rank], sum(out_splits) - out_splits[self.ep_rank])
        return combine(back, plan, x.shape[0]).view(shape)


def is_expert(name: str) -> bool:
    """True for an expert's parameter (``blocks.i.mlp.experts.*``), sharded over EP."""
    return ".experts." in name


@torch.no_grad()
def gather_experts(mesh, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` (shaped like this rank's parameters) with every expert tensor all-gathered over the EP
    group of ``mesh`` (a :class:`~minipar.runtime.mesh.Mesh`): (E/ep, ...) -> (E, ...), EP rank r's rows at
    ``[r·E/ep, (r+1)·E/ep)``. Collective when ep > 1."""
    out = {}
    for n, t in tensors.items():
        if is_expert(n) and mesh.ep_size > 1:
            parts = [torch.empty_like(t) for _ in range(mesh.ep_size)]
            dist.all_gather(parts, t.contiguous(), group=mesh.ep_group)
            t = torch.cat(parts)
        out[n] = t
    return out
