"""Rank workers for tests/test_experts.py (expert parallelism vs one device)."""

import torch
import torch.distributed as dist

from minipar.comm.comm_log import CommLog
from minipar.moe.layer import MoE
from minipar.moe.parallel import ExpertParallelMoE

D, T_RANK = 8, 24  # model width; tokens per rank


def build(E, k, world, seed=0, cf=None):
    """The same float64 MoE and the same (world·T_RANK, D) tokens and loss weights on every rank."""
    torch.manual_seed(seed)
    moe = MoE(D, E, k, d_ff=16, capacity_factor=cf, aux_loss_coef=0.1).double()
    x = torch.randn(world * T_RANK, D, dtype=torch.float64)
    w = torch.randn(world * T_RANK, D, dtype=torch.float64)
    return moe, x, w


def one_device(E, k, world):
    """L = (1/N) Σ (y · w) + aux over all N·T_RANK tokens: output, loss, and every gradient (x's too)."""
    moe, x, w = build(E, k, world)
    x.requires_grad_(True)
    y = moe(x)
    loss = (y * w).sum() / world + moe.aux_loss
    loss.backward()
    grads = {n: p.grad for n, p in moe.named_parameters()}
    return dict(y=y.detach(), loss=loss.detach(), x_grad=x.grad, grads=grads, routed=moe.stats["routed"])


def ep_rank(E, k):
    """This rank's T_RANK tokens through ExpertParallelMoE over the world, loss (y_r · w_r).sum()/N + aux_r/N.

    Returns this rank's output, the all-reduced loss, router gradient summed over ranks, its experts'
    gradients, and the dispatch/combine all-to-alls seen by CommLog next to the bytes the plan predicts.
    """
    N, r = dist.get_world_size(), dist.get_rank()
    moe, x, w = build(E, k, N)
    ep = ExpertParallelMoE(moe, group=None, balance_group=dist.group.WORLD)
    xs, ws = x[r * T_RANK : (r + 1) * T_RANK].clone().requires_grad_(True), w[r * T_RANK : (r + 1) * T_RANK]
    with CommLog() as log:
        y = ep(xs)
        loss_r = ((y * ws).sum() + ep.aux_loss) / N
        loss_r.backward()
    a2a = [rec for rec in log.records if rec.op == "all_to_all_single" and rec.dtype == "torch.float64"]
    sent, recvd = ep.stats["a2a_rows"]
    router_grad = ep.router.weight.grad.clone()
    dist.all_reduce(router_grad)  # the router is replicated: its gradient is the sum over ranks
    loss = loss_r.detach().clone()
    dist.all_reduce(loss)
    return dict(
        y=y.detach(),
        x_grad=xs.grad,
        loss=loss,
        router=router_grad,
        experts={n: p.grad for n, p in ep.experts.named_parameters()},
        first=ep.first_expert,
        a2a=[(rec.sent, rec.recv) for rec in a2a],
        rows=(sent, recvd),
        counts=[rec for rec in log.records if rec.op == "all_to_all_single" and rec.dtype == "torch.int64"],
    )
