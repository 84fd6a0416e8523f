"""ZeRO: shard the optimizer state, the gradients, then the weights over the data-parallel ranks.

Rajbhandari et al. 2020, arXiv:1910.02054. Read in this order:

- :mod:`minipar.zero.formula`     the model-state bytes per rank of each stage (§5; no torch: the planner reads it)
- :mod:`minipar.zero.flat`        flat parameter shards, their reduce-scatter/all-gather, sharded AdamW
- :mod:`minipar.zero.stage12`     :class:`ZeroOptimizer`: stage 1 (optimizer state), stage 2 (+ gradients)
- :mod:`minipar.zero.stage3`      :class:`Zero3`: stage 3 (+ parameters, just in time) on flat units (FSDP1)
- :mod:`minipar.zero.param_shard` per-parameter dim-0 shards, their copy-in/copy-out buffers, ``MixedPrecisionPolicy``
- :mod:`minipar.zero.fully_shard` :func:`fully_shard`: stage 3 per parameter, any optimizer, mixed precision (FSDP2's)
- :mod:`minipar.zero.redundancy`  :class:`ZeroRedundancyOptimizer`: ZeRO-1 around any torch optimizer

:func:`zero` picks the stage::

    opt = zero(model, stage=2, lr=3e-3, weight_decay=0.1)    # like torch.optim.AdamW(...)
    loss.backward(); opt.step(); opt.zero_grad()

or, for stage 3 the way PyTorch users meet it (FSDP2), any optimizer on the shards::

    for block in model.blocks:
        fully_shard(block, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

Why both stage-3 designs: the flat one (:class:`Zero3`) is the paper's and FSDP1's, and its single
buffer per unit makes the byte accounting of lesson 03 one line per unit; the per-parameter one keeps
the model's modules, names and shapes, so any optimizer, frozen parameters and checkpoints by name work
— the reason PyTorch replaced FSDP1 by FSDP2.
"""

from __future__ import annotations

import importlib

from minipar.errors import ConfigError
from minipar.zero.formula import STAGES


def __getattr__(name: str):
    """``minipar.zero.stage12`` and the other submodules on first use (PEP 562): importing the package imports no
    torch, so the planner can read ZeRO's byte formula (:mod:`minipar.zero.formula`) without PyTorch."""
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":  # the submodule exists and something it imports is missing
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def zero(model, stage: int, **kwargs):
    """ZeRO optimizer for ``stage`` 1, 2 (:class:`~minipar.zero.stage12.ZeroOptimizer`)
    or 3 (:class:`~minipar.zero.stage3.Zero3`, which replaces the model's units in place by sharded ones).
    ``kwargs`` as :class:`ZeroOptimizer`.

    Raises:
        ConfigError: ``stage`` not in 1, 2, 3.
    """
    from minipar.zero import stage3, stage12

    if stage in (1, 2):
        return stage12.ZeroOptimizer(model, stage=stage, **kwargs)
    if stage == 3:
        return stage3.Zero3(model, **kwargs)
    raise ConfigError(f"ZeRO stage={stage!r} does not exist; use 1 ({STAGES[1]}), 2 ({STAGES[2]}) or 3 ({STAGES[3]})")
