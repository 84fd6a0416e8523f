"""Gates renormalised also for k = 1: every gate is 1 and the router gets no gradient from the output."""

import torch

from exercises.solutions.ex12_experts import *  # noqa: F401,F403


def router_with_aux_loss(logits, top_k):
    T, E = logits.shape
    probs = logits.softmax(dim=-1)
    gate, expert = probs.topk(top_k, dim=-1)
    gate = gate / gate.sum(dim=-1, keepdim=True)
    f = torch.bincount(expert.reshape(-1), minlength=E).to(probs.dtype) / (T * top_k)
    return expert, gate, E * (f * probs.mean(dim=0)).sum()
