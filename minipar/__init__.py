"""minipar: a small, real library for learning distributed training (the course's package).

The folders are the architecture, bottom to top; a folder imports only from folders below it
(``tests/test_imports.py`` checks the order and that no two folders import each other in a circle):

    errors, data                 ConfigError and friends; the character corpus and its (B, T) batches
    runtime/   processes and layout: dist (groups), launch, rank_process, root_cause, mesh (Mesh)
    comm/      communication: collectives (ring all-reduce ...), p2p, all_to_all, links (the link table),
               cost (α–β times), intercept (the one interception of torch.distributed), comm_log (CommLog)
    model/     what one device trains: gpt (GPT), presets, recompute, memory, moe (the MoE layer)
    optim/     optimizer helpers: clip_grads, amp (mixed precision), offload (ZeRO-Offload)
    dp/ zero/ tp/ pp/ cp/ ep/    one folder per parallelism, each applying itself to a model
    checkpoint/ logical single-device state: full_state (any sharding), dcp (any layout), moe, resume
    perf/      a MODEL of step time and memory per layout (the planner's)
    clock/     the cluster clock, an EMULATOR: compute measured, links modelled
    job/       the main job's parts: config (TrainConfig), cli, parallelize, piece, outdir, run_log, reference
    train, plan                  the commands: python -m minipar.train, python -m minipar.plan
    course/    beside the library, imported by nothing in it: verify, bench + benchmarks/, gpu_check,
               pipeline_trace, the lessons' tools (presets, zero_strategies, capture, clock_view, ...)

Modules, one concept each (the lesson that teaches each is in brackets):

- ``minipar.runtime``  ``dist`` [01], ``launch``, ``rank_process``, ``root_cause``, ``mesh`` [07]
- ``minipar.data``     character-level corpus, (B, T) batches sharded over data-parallel ranks [00]
- ``minipar.model``    ``gpt`` [00], ``presets``, ``memory`` [00, 08], ``recompute`` [08], ``moe`` [12]
- ``minipar.comm``     ``collectives``, ``cost``, ``intercept`` and ``comm_log`` [01], ``p2p`` [06], ``links`` [05, 10],
  ``all_to_all`` [12]
- ``minipar.dp``       ``sync`` (naive DP), ``buckets``, ``ddp`` (bucketed, overlapped) [02];
  ``compression``, ``param_server`` [09]
- ``minipar.zero``     ZeRO stages 1, 2 and 3: ``formula``, ``flat``, ``stage12``, ``stage3``, ``param_shard``,
  ``fully_shard`` (FSDP2's design), ``redundancy`` (ZeRO-1 around any optimizer) [03]
- ``minipar.tp``       Megatron TP: ``mappings`` (f, g), ``partition``, ``layers``, ``gpt``, ``dtensor`` [04],
  ``overlap`` [09]
- ``minipar.pp``       pipelines: ``schedules``, ``stages``, ``executor``, ``p2p_order``, ``zero_bubble``,
  ``simulation``, ``dualpipe``, ``native`` [05, 06]
- ``minipar.cp``       context parallelism: ``split``, ``blocks``, ``ring``, ``all_gather``, ``model`` [11]
- ``minipar.ep``       expert parallelism: ``parallel`` (``ExpertParallelMoE``), ``zero`` [12]
- ``minipar.optim``    ``clip_grads`` [03, 07], ``amp``, ``offload`` [08]
- ``minipar.checkpoint`` ``full_state`` [03, 04, 07], ``dcp``, ``moe``, ``resume`` [07, 12]
- ``minipar.perf``     ``hardware``, ``layout``, ``flops``, ``model``, ``memory``, ``search``, ``published``,
  ``runs`` [07], ``timeline`` [09]
- ``minipar.clock``    ``scaling``, ``clock`` (``ClusterClock``), ``hooks`` [02, 05, 06, 07, 09, 11]
- ``minipar.job``      ``config``, ``cli``, ``parallelize``, ``piece``, ``outdir``, ``run_log``, ``reference`` [00, 07]
- ``minipar.train``    the main job, top to bottom: ``python -m minipar.train`` [00, 07]
- ``minipar.plan``     ``python -m minipar.plan``: the best layouts for N GPUs and a model [07]
- ``minipar.course``   ``verify``, ``bench``, ``benchmarks``, ``gpu_check``, ``pipeline_trace``; the lessons' tools:
  ``presets``, ``zero_strategies``, ``capture``, ``clock_view``, ``memory_timeline``, ``autograd_graph``

No module is over 350 lines (``tests/test_package_shape.py``); a moved module leaves no alias behind.
"""

from minipar.errors import ConfigError, RankFailedError
from minipar.runtime.launch import launch

__version__ = "0.1.0"
__all__ = ["launch", "ConfigError", "RankFailedError", "__version__"]
