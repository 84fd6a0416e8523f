"""minipar: a small, real library for learning distributed training (the course's package).

Modules, one concept each (read them top to bottom):

- ``minipar.dist``    process groups: ``init(backend="auto")``, ``rank()``, ``world_size()``, ...
- ``minipar.launch``  run a function on N local ranks from a notebook or script
- ``minipar.data``    character-level text corpus, (B, T) batches sharded over data-parallel ranks
- ``minipar.models``  a small GPT (and an MLP) built to be split by layer, head and column
- ``minipar.accounting`` record bytes sent/received by every collective and send/recv (``CommLog``)
- ``minipar.data_parallel`` data parallelism (all-reduce of gradients)
- ``minipar.memory``  bytes of weights, gradients, optimizer state and activations; measured peak
- ``minipar.train``   the main job: ``python -m minipar.train``
- ``minipar.bench``   ``python -m minipar.bench``: minipar vs PyTorch-native, measured ratios
"""
from .errors import ConfigError, RankFailedError
from .launch import launch

__version__ = "0.1.0"
__all__ = ["launch", "ConfigError", "RankFailedError", "__version__"]
