"""Tensor parallelism (Megatron-LM: Shoeybi et al. 2019, arXiv:1909.08053; sequence parallelism:
Korthikanti et al. 2022, arXiv:2205.05198). Read in this order:

- :mod:`minipar.tp.mappings`  the communication operators f and g (and the sequence-parallel ones)
  as autograd functions; the tensor-parallel group and its divisibility checks
- :mod:`minipar.tp.partition` how each parameter is split, marked on the parameter (Megatron's attributes),
  and what reads the marks: shard, gather, "count a replicated tensor once"
- :mod:`minipar.tp.layers`    ``ColumnParallelLinear``, ``RowParallelLinear``, ``VocabParallelEmbedding``,
  the vocabulary-parallel cross-entropy
- :mod:`minipar.tp.gpt`       the course's GPT with its layers swapped for parallel ones (one forward: model.gpt's)
- :mod:`minipar.tp.dtensor`   the same model with PyTorch's DTensor TP (the native equivalent)
- :mod:`minipar.tp.overlap`   the sequence-parallel all-gather overlapped with its GEMM (lesson 09)
"""
