"""The shapes of the models in NVIDIA's published Megatron-Core runs (:mod:`minipar.perf.nemo` and
:mod:`minipar.perf.mb_archive`, whose module docs give each one's source: NeMo's and Megatron-Bridge's configs, the
models' Hugging Face configs and cards)."""

from __future__ import annotations

from minipar.perf.shape import UNTIED_ROPE, ModelShape

# Shapes: (layers, hidden, heads, seq, vocab, bias, kv heads, FFN, gated, dropout); module doc for the sources.
SHAPES = {
    "Mixtral-8x22B": ModelShape(
        56, 6144, 48, 4096, 32000, False, 8, 16384, True, False, experts=8, top_k=2, **UNTIED_ROPE
    ),
    "Llama3-8B": ModelShape(32, 4096, 32, 8192, 128256, False, 8, 14336, True, False, **UNTIED_ROPE),
    "Llama3-70B": ModelShape(80, 8192, 64, 8192, 128256, False, 8, 28672, True, False, **UNTIED_ROPE),
    "Llama3.1-405B": ModelShape(126, 16384, 128, 8192, 128256, False, 8, 53248, True, False, **UNTIED_ROPE),
    "GPT3-5B": ModelShape(24, 4096, 32, 2048, 51200, True, None, 16384, False, False),
    "GPT3-20B": ModelShape(44, 6144, 48, 2048, 51200, True, None, 24576, False, False),
    "GPT3-175B": ModelShape(96, 12288, 96, 2048, 51200, True, None, 49152, False, False),
    "Llama2-7B": ModelShape(32, 4096, 32, 4096, 32000, False, None, 11008, True, False, **UNTIED_ROPE),
    "Llama2-13B": ModelShape(40, 5120, 40, 4096, 32000, False, None, 13824, True, False, **UNTIED_ROPE),
    "Llama2-70B": ModelShape(80, 8192, 64, 4096, 32000, False, 8, 28672, True, False, **UNTIED_ROPE),
    "Nemotron-8B": ModelShape(32, 4096, 32, 4096, 256000, False, None, 16384, False, False, **UNTIED_ROPE),
    "Nemotron-22B": ModelShape(40, 6144, 48, 4096, 256000, False, None, 24576, False, False, **UNTIED_ROPE),
    "Nemotron-340B": ModelShape(96, 18432, 96, 4096, 256000, False, 8, 73728, False, False, **UNTIED_ROPE),
    # minipar.perf.dgxc's rows: Nemotron-4 15B (Parmar et al. 2024, arXiv:2402.16819, Table 1; squared ReLU, FFN 4h);
    # Llama 3.1 405B on GPT-2's tokenizer, 50,257 padded to a multiple of 128 × TP 8 (ASSUMED; minipar.perf.dgxc)
    "Nemotron4-15B": ModelShape(32, 6144, 48, 4096, 256000, False, 8, 24576, False, False, **UNTIED_ROPE),
    # DGX Cloud's Grok-1 314B (minipar.perf.dgxc, grok1/grok1_314b.yaml at v25.01): 8 experts, top 2, GeGLU, Llama 3's
    # tokenizer (the YAML's meta-llama/Meta-Llama-3-70B), sequence 8,192 (configure.sh)
    "Grok1-314B": ModelShape(
        64, 6144, 48, 8192, 128256, False, 8, 32768, True, False, experts=8, top_k=2, **UNTIED_ROPE
    ),
    "Llama3.1-405B-gpt2v": ModelShape(126, 16384, 128, 8192, 51200, False, 8, 53248, True, False, **UNTIED_ROPE),
    # Qwen3 30B-A3B (its Hugging Face config): 128 experts of FFN 768, top-8, heads of 128 on h = 2,048 (kv_channels)
    "Qwen3-30B-A3B": ModelShape(
        48, 2048, 32, 4096, 151936, False, 4, 768, True, False, experts=128, top_k=8, kv_channels=128, **UNTIED_ROPE
    ),
    # Qwen3 235B-A22B (its Hugging Face config): 94 blocks, h 4,096, 64 heads of 128, 4 kv heads, 128 experts of 1,536
    "Qwen3-235B-A22B": ModelShape(
        94, 4096, 64, 4096, 151936, False, 4, 1536, True, False, experts=128, top_k=8, kv_channels=128, **UNTIED_ROPE
    ),
    # DeepSeek-V3 (its Hugging Face config): MLA, the first 3 blocks dense, 256 experts of 2,048 and a shared one,
    # MTP 1, node-limited routing (n_group 8, topk_group 4)
    "DeepSeek-V3": ModelShape(
        61,
        7168,
        128,
        4096,
        129280,
        False,
        None,
        18432,
        True,
        False,
        experts=256,
        top_k=8,
        shared_ffn=2048,
        moe_ffn=2048,
        dense_layers=3,
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_head_dim=128,
        qk_pos_emb_head_dim=64,
        v_head_dim=128,
        mtp_num_layers=1,
        moe_router_num_groups=8,
        moe_router_group_topk=4,
        **UNTIED_ROPE,
    ),  # fmt: skip
    # GPT-OSS 120B (Megatron-Bridge's GPTOSSProvider120B): 64 heads of 64 on h = 2,880, a 128-token window in every
    # other block
    "GPT-OSS-120B": ModelShape(
        36,
        2880,
        64,
        4096,
        201088,
        True,
        8,
        2880,
        True,
        False,
        experts=128,
        top_k=4,
        kv_channels=64,
        window_size=128,
        window_attn_skip_freq=2,
        **UNTIED_ROPE,
    ),  # fmt: skip
}
