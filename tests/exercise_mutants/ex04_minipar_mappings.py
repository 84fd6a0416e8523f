"""f delegated to minipar's own Megatron mapping."""

from exercises.solutions.ex04_tensor_parallel import *  # noqa: F401,F403
from minipar.tp import mappings as _m


class CopyToTP(_m._CopyToTP):
    pass
