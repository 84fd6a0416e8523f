"""Mixture of experts and expert parallelism (lesson 12).

- ``minipar.moe.router``    top-k softmax router and the Switch/GShard load-balancing loss
- ``minipar.moe.dispatch``  capacity, token dropping, and the index bookkeeping of dispatch/combine
- ``minipar.moe.experts``   E feed-forward experts held as stacked weights
- ``minipar.moe.layer``     ``MoE``: the layer on one device (what ``GPTConfig(moe_experts=E)`` uses)
- ``minipar.moe.parallel``  ``ExpertParallelMoE``: experts sharded over an EP group, all-to-all dispatch/combine
- ``minipar.moe.ep``        the main job's EP (the Mesh's ep/edp groups): gradients of experts vs dense parameters,
                            micro-batches, recomputation
- ``minipar.moe.zero``      ZeRO-1 of the MoE job: dense moments sharded over dp, experts' over expert-dp
- ``minipar.moe.checkpoint`` the MoE job's checkpoints: whole expert tensors, resumable under any ep
"""
