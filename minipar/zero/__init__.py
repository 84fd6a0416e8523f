"""ZeRO: shard the optimizer state, the gradients, then the weights over the data-parallel ranks.

Rajbhandari et al. 2020, arXiv:1910.02054. Read in this order:

- :mod:`minipar.zero.flat`        flat parameter shards, their reduce-scatter/all-gather, sharded AdamW
- :mod:`minipar.zero.stage12`     :class:`ZeroOptimizer`: stage 1 (optimizer state), stage 2 (+ gradients)
- :mod:`minipar.zero.stage3`      :class:`Zero3`: stage 3 (+ parameters, gathered just in time; FSDP)
- :mod:`minipar.zero.redundancy`  :class:`ZeroRedundancyOptimizer`: ZeRO-1 around any torch optimizer

:func:`zero` picks the stage::

    opt = zero(model, stage=2, lr=3e-3, weight_decay=0.1)    # like torch.optim.AdamW(...)
    loss.backward(); opt.step(); opt.zero_grad()
"""

from __future__ import annotations

import torch.nn as nn

from minipar.errors import ConfigError
from minipar.zero import stage3, stage12
from minipar.zero.flat import STAGES


def zero(model: nn.Module, stage: int, **kwargs):
    """ZeRO optimizer for ``stage`` 1, 2 (:class:`~minipar.zero.stage12.ZeroOptimizer`)
    or 3 (:class:`~minipar.zero.stage3.Zero3`, which replaces the model's units in place by sharded ones).
    ``kwargs`` as :class:`ZeroOptimizer`.

    Raises:
        ConfigError: ``stage`` not in 1, 2, 3.
    """
    if stage in (1, 2):
        return stage12.ZeroOptimizer(model, stage=stage, **kwargs)
    if stage == 3:
        return stage3.Zero3(model, **kwargs)
    raise ConfigError(f"ZeRO stage={stage!r} does not exist; use 1 ({STAGES[1]}), 2 ({STAGES[2]}) or 3 ({STAGES[3]})")
