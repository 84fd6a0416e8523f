"""Expert parallelism that splits the received rows as if they were grouped by expert (they arrive
grouped by source rank, then expert)."""

import torch
import torch.distributed as dist

from exercises.solutions.ex12_experts import *  # noqa: F401,F403


def expert_parallel_forward(x, expert, gate, local_experts, group=None):
    n, per = dist.get_world_size(group), len(local_experts)
    E, (T, k) = n * per, expert.shape
    flat = expert.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // k
    send = torch.bincount(flat, minlength=E)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    recv = recv.view(n, per)
    in_splits, out_splits = send.view(n, per).sum(1).tolist(), recv.sum(1).tolist()
    rows = x.new_empty((sum(out_splits), x.shape[1]))
    dist.all_to_all_single(rows, x[token].contiguous(), out_splits, in_splits, group=group)
    y = torch.cat([f(r) for f, r in zip(local_experts, rows.split(recv.sum(0).tolist()))])
    back = x.new_empty((T * k, x.shape[1]))
    dist.all_to_all_single(back, y, in_splits, out_splits, group=group)
    return torch.zeros_like(x).index_add_(0, token, back * gate.reshape(-1)[order][:, None])
