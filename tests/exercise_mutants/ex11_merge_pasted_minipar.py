"""minipar's merge pasted in verbatim (its body token for token)."""

import torch

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403


def merge(out_a, lse_a, out_b, lse_b):
    if out_a is None:
        return out_b, lse_b
    lse = torch.logaddexp(lse_a, lse_b)
    out = torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b
    return out, lse
