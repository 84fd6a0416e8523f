"""Right results, but each call leaves its routing on the function (state kept between calls)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex12_experts import *  # noqa: F401,F403


def expert_parallel_forward(x, expert, gate, local_experts, group=None):
    expert_parallel_forward.last_routing = expert.clone()  # kept for the next call
    n = dist.get_world_size(group)
    per = len(local_experts)
    E = n * per
    T, k = expert.shape
    flat = expert.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // k
    send_counts = torch.bincount(flat, minlength=E)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts, group=group)
    recv_counts = recv_counts.view(n, per)
    in_splits = send_counts.view(n, per).sum(1).tolist()
    out_splits = recv_counts.sum(1).tolist()
    rows = x.new_empty((sum(out_splits), x.shape[1]))
    dist.all_to_all_single(rows, x[token].contiguous(), out_splits, in_splits, group=group)
    starts = (recv_counts.reshape(-1).cumsum(0) - recv_counts.reshape(-1)).view(n, per)
    y = torch.empty_like(rows)
    for e in range(per):
        idx = torch.cat([torch.arange(int(starts[s, e]), int(starts[s, e] + recv_counts[s, e])) for s in range(n)])
        y[idx] = local_experts[e](rows[idx])
    back = x.new_empty((T * k, x.shape[1]))
    dist.all_to_all_single(back, y, in_splits, out_splits, group=group)
    out = torch.zeros_like(x)
    out.index_add_(0, token, back * gate.reshape(-1)[order][:, None])
    return out
