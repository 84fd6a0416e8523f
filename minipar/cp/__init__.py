"""Context parallelism: attention over a sequence split across ranks (lesson 11). Read in this order:

- :mod:`minipar.cp.split`      which positions each rank holds: contiguous, or load balanced (chunks i
  and 2N − 1 − i of 2N, Megatron's and Llama 3's causal split), for any length; shard and unshard
- :mod:`minipar.cp.blocks`     one block's attention with its log-sum-exp, the exact online-softmax
  merge of two blocks, and a block's gradients (FlashAttention-2's backward)
- :mod:`minipar.cp.ring`       ring attention (Liu et al. 2023, arXiv:2310.01889): K/V passed round
  the ring with the transfer overlapped with the block compute, backward a ring too; its bytes
- :mod:`minipar.cp.all_gather` the variant Llama 3 used (Dubey et al. 2024, arXiv:2407.21783,
  §3.3.2): all-gather K and V, then attend locally; its bytes
"""
