"""Mixture of experts on one device (lesson 12); its parallel forms live in :mod:`minipar.ep`.

- ``minipar.model.moe.router``    top-k softmax router and the Switch/GShard load-balancing loss
- ``minipar.model.moe.capacity``  how many tokens an expert takes, and which settings cannot work (no torch)
- ``minipar.model.moe.dispatch``  token dropping and the index bookkeeping of dispatch/combine
- ``minipar.model.moe.experts``   E feed-forward experts held as stacked weights
- ``minipar.model.moe.layer``     ``MoE``: the layer on one device (what ``GPTConfig(moe_experts=E)`` uses)
- ``minipar.ep.parallel``  ``ExpertParallelMoE``: experts sharded over an EP group, all-to-all dispatch/combine
- ``minipar.job.piece``      the main job's EP (the Mesh's ep/edp groups): gradients of experts vs dense
  parameters, micro-batches, recomputation (the one training step, :class:`~minipar.job.piece.Piece`)
- ``minipar.ep.zero``      ZeRO-1 of the MoE job: dense moments sharded over dp, experts' over expert-dp
- ``minipar.checkpoint.moe`` the MoE job's checkpoints: whole expert tensors, resumable under any ep
"""
