"""Optimizer helpers that any parallelism uses (lessons 03, 08).

- ``minipar.optim.clip_grads``  gradient clipping by the global norm over shards and replicas [03, 07]
- ``minipar.optim.amp``         mixed precision: ``autocast`` (the job's ``--dtype``), fp32 master weights
  (``MixedPrecisionAdamW``), dynamic loss scaling [08]
- ``minipar.optim.fp8``         FP8 emulated by casts: e4m3/e5m2, per-tensor (current, delayed) and block scaling,
  ``FP8Linear`` / ``to_fp8`` [08]
- ``minipar.optim.offload``     ZeRO-Offload: master weights and AdamW state on the host (``OffloadedAdamW``) [08]
"""
