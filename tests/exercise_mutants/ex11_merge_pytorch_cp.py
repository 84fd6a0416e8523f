"""The merge delegated to PyTorch's context-parallel SDPA merger."""

from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403


def merge(out_a, lse_a, out_b, lse_b):
    m = _SDPAMerger(convert_to_f32=False, seq_dim=2)
    m.step(out_a, lse_a, False)
    m.step(out_b, lse_b, False)
    return m.results()
