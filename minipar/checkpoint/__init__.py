"""Checkpoints that hold logical single-device tensors, so a run saved under one layout resumes under any other.

- ``minipar.checkpoint.full_state``  the single-device state dict (or gradients) of any sharding: ``full_state_dict``,
  ``gather_stages`` [03, 04, 07]
- ``minipar.checkpoint.dcp``     sharded checkpoints with ``torch.distributed.checkpoint`` (DCP), any (pp, dp, tp) [07]
- ``minipar.checkpoint.moe``     the MoE job's: whole expert tensors, resumable under any ep [12]
- ``minipar.checkpoint.resume``  which checkpoint ``--resume`` loads (the newest undamaged) and whether it fits the run
  (its run id, model shape, seed, batch, text); a fresh run refused another run's checkpoints
- ``minipar.checkpoint.manifest``  the size and SHA-256 of a checkpoint's files, recorded at save, checked at resume
"""
