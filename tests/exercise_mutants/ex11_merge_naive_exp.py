"""merge with log(exp(lse_a) + exp(lse_b)): right on small scores, inf/nan when scores reach ~1000."""

import torch

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403


def merge(out_a, lse_a, out_b, lse_b):
    lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse
