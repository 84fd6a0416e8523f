"""Expert parallelism: the experts of a MoE layer sharded over an EP group (lesson 12).

- ``minipar.ep.parallel``  ``ExpertParallelMoE``: E/ep experts per rank, all-to-all dispatch and combine;
  ``is_expert``, ``gather_experts`` (whole expert tensors from the EP group)
- ``minipar.ep.zero``      ZeRO-1 of the MoE job: dense moments sharded over dp, experts' over expert-dp
"""
