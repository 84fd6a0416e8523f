"""minipar: a small, real library for learning distributed training (the course's package).

Modules, one concept each (read them top to bottom; the lesson that teaches each is in brackets):

- ``minipar.dist``            process groups: ``init(backend="auto")``, ``rank()``, ``world_size()``, ...
- ``minipar.launch``          run a function on N local ranks from a notebook or script
- ``minipar.data``            character-level corpus, (B, T) batches sharded over data-parallel ranks
- ``minipar.models``          a small GPT (and an MLP) built to be split by layer, head and column [00]
- ``minipar.memory``          bytes of weights, gradients, optimizer state, activations; measured peak [00]
- ``minipar.train``           the main job: ``python -m minipar.train`` [00, 07]
- ``minipar.run_log``         its progress bar, metrics.jsonl, loss plot and text sample
- ``minipar.reference``       the plain single-device loop every layout is tested against [00]
- ``minipar.accounting``      ``CommLog``: bytes sent/received by every collective and send/recv [01]
- ``minipar.collectives``     ring reduce-scatter / all-gather / all-reduce from send/recv [01]
- ``minipar.data_parallel``   naive DP and a bucketed, overlapped ``DistributedDataParallel`` [02]
- ``minipar.zero``, ``zero3`` ZeRO stages 1-2 and 3 over flat parameter shards [03]
- ``minipar.tensor_parallel``, ``tp_layers``, ``tp_gpt``, ``tp_dtensor``  Megatron TP [04]
- ``minipar.pipeline_schedules``, ``pipeline``, ``pipeline_trace``, ``pipeline_native``  GPipe, 1F1B,
  interleaved 1F1B as data, a labelled simulator, an executor on real ranks, traces [05, 06]
- ``minipar.mesh``            the (pp, dp, tp) device mesh in Megatron order [07]
- ``minipar.checkpoint``      sharded checkpoints with torch.distributed.checkpoint [07]
- ``minipar.bench``           ``python -m minipar.bench``: minipar vs PyTorch-native, measured ratios
"""
from .errors import ConfigError, RankFailedError
from .launch import launch

__version__ = "0.1.0"
__all__ = ["launch", "ConfigError", "RankFailedError", "__version__"]
