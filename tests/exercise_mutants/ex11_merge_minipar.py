"""merge delegated to minipar's own (right numbers: only the call gives it away)."""

from exercises.solutions.ex11_context_parallel import *  # noqa: F401,F403
from minipar.cp.blocks import merge as _minipar_merge


def merge(out_a, lse_a, out_b, lse_b):
    return _minipar_merge(out_a, lse_a, out_b, lse_b)
