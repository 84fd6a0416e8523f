"""The runtime: processes, their groups and their layout — the bottom layer every other one stands on.

- ``minipar.runtime.dist``          process groups: ``init(backend="auto")``, ``rank()``, ``world_size()``,
  ``new_group`` (bounded timeouts), ``device()``; NCCL on GPUs, gloo on CPU
- ``minipar.runtime.launch``        run a function on N local ranks from a notebook or script (``minipar.launch``)
- ``minipar.runtime.rank_process``  one launched rank: its body in the fork-server child, its log and result files
- ``minipar.runtime.root_cause``    which rank of a failed launch failed on its own (the others saw it go)
- ``minipar.runtime.mesh``          ``Mesh``: the (pp, dp, [cp,] tp) layout in Megatron's rank order, ep borrowed
  from dp (the experts' view (pp, edp, ep, [cp,] tp)), every rank's groups (torchtitan's ``ParallelDims``);
  pure layout, no model [07, 12]
"""
