"""Returns group=None for a dimension of size 1: None is the whole world."""

from exercises.solutions import ex07_3d_parallel as _sol
from exercises.solutions.ex07_3d_parallel import *  # noqa: F401,F403


def build_groups(pp, dp, tp):
    out = _sol.build_groups(pp, dp, tp)
    return {d: ((None, r) if len(r) == 1 else (g, r)) for d, (g, r) in out.items()}
