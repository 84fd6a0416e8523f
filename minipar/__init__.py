"""minipar: a small, real library for learning distributed training (the course's package).

Modules, one concept each (read them top to bottom; the lesson that teaches each is in brackets):

- ``minipar.dist``            process groups: ``init(backend="auto")``, ``rank()``, ``world_size()``, ...
- ``minipar.launch``          run a function on N local ranks from a notebook or script
- ``minipar.rank_process``    one launched rank: its body in the fork-server child, its log and result files
- ``minipar.root_cause``      which rank of a failed launch failed on its own (the others saw it go)
- ``minipar.errors``          ``ConfigError`` (bad settings, with the fix) and ``RankFailedError``
- ``minipar.data``            character-level corpus, (B, T) batches sharded over data-parallel ranks
- ``minipar.presets``         named GPT sizes the lessons share (``SMALL``, ``MEDIUM``)
- ``minipar.models``          a small GPT (and an MLP) built to be split by layer, head and column [00]
- ``minipar.memory``          bytes of weights, gradients, optimizer state, activations; measured peak [00]
- ``minipar.reference``       the plain single-device loop every layout is tested against [00]
- ``minipar.comm.comm_log``  ``CommLog``: bytes sent/received by every collective and send/recv [01]
- ``minipar.comm.p2p``       isend/irecv/send/recv with NCCL's per-pair order checked on CPU
  (``MINIPAR_P2P_ORDER=strict``, on in the tests) [06]
- ``minipar.comm.collectives`` ring reduce-scatter / all-gather / all-reduce from send/recv [01]
- ``minipar.dp.sync``         naive DP (one ``all_reduce`` per gradient); replicas start from rank 0's weights [02]
- ``minipar.dp.buckets``      gradient buckets in reverse parameter order, one flat buffer each [02]
- ``minipar.dp.ddp``          ``DistributedDataParallel``: bucketed all-reduces overlapped with backward [02]
- ``minipar.zero``            ZeRO stages 1, 2 and 3 over flat parameter shards (``flat``, ``stage12``,
  ``stage3``); stage 3 per parameter, any optimizer, mixed precision (``param_shard``, ``fully_shard``:
  FSDP2's design); ZeRO-1 around any torch optimizer (``redundancy``) [03]
- ``minipar.tp``              Megatron TP: ``mappings`` (f, g), ``partition`` (how each parameter is split,
  marked on it), ``layers``, ``gpt``, ``dtensor`` [04], ``overlap`` [09]
- ``minipar.pp``              pipelines: ``schedules`` (GPipe, 1F1B, interleaved, and a labelled
  simulator), ``stages`` (the GPT cut into stages), ``executor`` (real ranks), ``p2p_order`` (the
  message order NCCL needs), ``trace``, ``native`` [05, 06]
- ``minipar.moe``             mixture of experts: ``router`` (top-k, load-balancing loss), ``dispatch`` (capacity,
  dropping, the dispatch/combine plan), ``experts``, ``layer`` (``MoE``), ``parallel`` (``ExpertParallelMoE``:
  all-to-all dispatch/combine), ``ep`` (the main job's EP groups carved out of dp) [12]
- ``minipar.cp``              context parallelism: ``split`` (load-balanced chunks i and 2N−1−i, any length),
  ``blocks`` (block attention + online-softmax merge), ``ring`` (ring attention, forward and backward rings),
  ``all_gather`` (Llama 3's K/V all-gather), ``model`` (the main job's ``--cp``) [11]
- ``minipar.clip_grads``      gradient clipping by the global norm over ZeRO shards and TP/PP/DP ranks [03, 07]
- ``minipar.mesh``            the layout: (pp, dp, [cp,] tp) degrees checked once, Megatron's rank order, groups [07]
- ``minipar.parallel3d``      one rank's piece of the 3D job: TP inside a stage, PP across, DP/ZeRO over both [07]
- ``minipar.checkpoint``      sharded checkpoints with torch.distributed.checkpoint, any layout [07]
- ``minipar.perf``            a MODEL of step time, MFU and memory per layout: ``hardware`` (GPU presets, this CPU
  measured), ``layout``, ``flops``, ``model``, ``factors``, ``search`` (rank layouts), ``published`` (the fit
  set: Megatron-LM Table 1), ``runs`` (the declared test set: MegaScale, Narayanan Table 2) [07],
  ``timeline`` (simulated communication/computation overlap) [09]
- ``minipar.plan``            ``python -m minipar.plan``: the best layouts for N GPUs and a model [07]
- ``minipar.recompute``       activation recomputation by hand: full and selective (``set_recompute``),
  Korthikanti bytes per layer [08]
- ``minipar.amp``             mixed precision: fp32 master weights (``MixedPrecisionAdamW``), dynamic loss scaling [08]
- ``minipar.offload``         ZeRO-Offload: master weights and AdamW state on the host (``OffloadedAdamW``), bytes [08]
- ``minipar.dp.compression`` gradient compression: bf16, top-k with error feedback, PowerSGD [09]
- ``minipar.dp.param_server`` a parameter server: synchronous, and asynchronous with bounded staleness [09]
- ``minipar.config``          ``TrainConfig``: a run's settings, their checks, the command line made from them [00]
- ``minipar.train``           the main job: ``python -m minipar.train`` [00, 07]
- ``minipar.run_log``         its progress bar, metrics.jsonl, loss plot and text sample (replaced together, at the end)
- ``minipar.outdir``          its folders: checked before any rank starts, one run at a time (a lock), atomic writes
- ``minipar.resume_check``    which checkpoint ``--resume`` loads (the newest undamaged) and whether it fits the run
- ``minipar.clock``           the cluster clock, an EMULATOR: per-rank virtual time, compute measured (CPU time),
  links modelled (NVLink 4, InfiniBand NDR, PCIe presets, scaled to this CPU) [library only so far: #21]
- ``minipar.bench``           ``python -m minipar.bench``: minipar vs PyTorch-native, measured ratios
- ``minipar.verify``          proofs that read the same on every CPU: a verdict against a derived bound

Folders group a family: ``comm`` (communication), ``dp`` (data parallelism), ``zero``, ``tp``, ``pp``
(one per parallelism, as picotron has), ``perf`` (the performance model) and ``clock`` (the cluster
clock); the core stays flat.
Imports point one way: config/train/parallel3d -> strategies (dp, zero, tp, pp) -> comm -> dist
(``tests/test_imports.py`` checks there is no circle; ``tests/test_package_shape.py`` that no module
is over 350 lines; ``test_imports`` that no moved module left an alias behind).
"""

from minipar.errors import ConfigError, RankFailedError
from minipar.launch import launch

__version__ = "0.1.0"
__all__ = ["launch", "ConfigError", "RankFailedError", "__version__"]
