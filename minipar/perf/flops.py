"""What one block computes and keeps, counted from its shape: FLOPs, activation bytes, parameters per stage.

Pure arithmetic on a :class:`~minipar.perf.shape.ModelShape` (no devices, no time): the counts
:mod:`minipar.perf.model` turns into seconds and bytes. Sources per function. Units: FLOPs, bytes,
parameters. b micro-batch, s sequence, h hidden, a heads, q = a·head_dim the queries' width (h unless
``kv_channels``), h_kv = kv_heads·head_dim, f the MLP width, l layers, V vocabulary, t tensor-parallel degree.
"""

from __future__ import annotations

import functools

from minipar.errors import ConfigError
from minipar.perf.layout import RECOMPUTE
from minipar.perf.shape import ModelShape


def layer_gemm_flops(model: ModelShape, b: float, s: int | None = None) -> float:
    """Forward FLOPs of one block's weight GEMMs for b sequences of s tokens (default the model's):
    2·b·s·(matrix weights) = 24·b·s·h² for a GPT (Narayanan et al. 2021, arXiv:2104.04473, App. A)."""
    return 2 * b * (s or model.seq) * model.layer_matrix_params


def attention_core_flops(
    model: ModelShape, b: float, s_q: int | None = None, s_k: int | None = None, window: bool = True
) -> float:
    """Forward FLOPs of QKᵀ and attention·V for b sequences, s_q queries against s_k keys (default s, s), averaged over
    the blocks: 4·b·s_q·s_k·q, the whole square as Megatron-LM counts it (App. A: 4·b·s²·h; q = h unless
    ``kv_channels``; with MLA q·2 is a·(d_qk + d_v), :attr:`~minipar.perf.shape.ModelShape.core_width`), s_k being
    :func:`attention_keys` with a sliding window (``window=False``: every block's whole square, what an unfused
    kernel computes before it masks)."""
    s = model.seq
    return 4 * b * (s_q or s) * (attention_keys(model, s_k or s) if window else s_k or s) * model.core_width


def attention_keys(model: ModelShape, s_k: int) -> float:
    """Keys a query is counted against, averaged over the blocks, in :func:`attention_core_flops`' whole-square count:
    s_k in a block of full attention; min(s_k, 2w) in one with a window of w (``ModelShape.window_size``): the square
    counts twice the causal triangle, so the causal half FlashAttention computes is the w keys a query sees. With
    ``window_attn_skip_freq`` N every N-th block is full, l // N of the l (Megatron-Core's pattern), else none."""
    w, n, l = model.window_size, model.window_attn_skip_freq, model.layers
    if not w:
        return s_k
    full = l // n if n else 0
    return (full * s_k + (l - full) * min(s_k, 2 * w)) / l


def attention_share(model: ModelShape) -> float:
    """The attention core's share of one block's forward FLOPs (:func:`attention_core_flops` over it plus
    :func:`layer_gemm_flops` and, with experts, :func:`expert_extra_flops`): 4·s·q / (2·weights + 4·s·q), 1/(1 + 6h/s)
    for a GPT; it grows with the sequence."""
    core = gemm = 0.0
    for view, n in model.block_kinds():  # every kind of block by its count (dense_layers)
        core += n * attention_core_flops(view, 1)
        gemm += n * (layer_gemm_flops(view, 1) + expert_extra_flops(view, 1))
    return core / (core + gemm)


def expert_extra_flops(model: ModelShape, b: float) -> float:
    """Forward FLOPs of one block for b sequences that a mixture of experts adds to the dense block's
    (:func:`layer_gemm_flops`, one MLP): k − 1 more MLPs per token, the router and the shared experts' MLP (width
    f_s), 2·b·s·((3 if gated else 2)·h·((k − 1)·f + f_s) + E·h); 0 for a dense model."""
    if not model.experts:
        return 0.0
    widths = (model.top_k - 1) * model.f + (model.shared_ffn or 0)
    return 2 * b * model.seq * ((3 if model.gated else 2) * model.hidden * widths + model.experts * model.hidden)


def logit_flops(model: ModelShape, b: float) -> float:
    """Forward FLOPs of the logit layer for b sequences: 2·b·s·h·V (App. A)."""
    return 2 * b * model.seq * model.hidden * model.vocab


def published_mfu(model: ModelShape, global_batch: int, tokens_per_s: float, peak_flops: float) -> float:
    """A run's published tokens/s per GPU as an MFU of this model's count (:func:`model_flops`, no recomputation)
    over ``peak_flops`` (FLOP/s): the same count and peak the model's own MFU uses, so its error is the tokens/s
    error, whatever FLOPs the run's authors counted."""
    return tokens_per_s * (model_flops(model, global_batch, "none") / (global_batch * model.seq)) / peak_flops


def model_flops(
    model: ModelShape,
    global_batch: int,
    recompute: str = "none",
    flash_attention: bool = False,
    recomputed_layers: int | None = None,
) -> float:
    """FLOPs of one step. ``recompute="none"``: the model's FLOPs, 3 × forward (MegaScale's and PaLM's MFU
    count): 72·B·s·l·h²(1 + s/6h) + 6·B·s·h·V for a GPT. Executed FLOPs (Narayanan's TFLOP/s count):
    full recomputation adds a forward of every block (eq. 3: 96·B·s·l·h²(1 + s/6h + V/16lh)), or of
    ``recomputed_layers`` blocks only (Megatron-LM's ``--recompute-num-layers``); selective
    adds the attention core 4·B·s²·h·l (Korthikanti et al. 2022, arXiv:2205.05198, §5); FlashAttention's
    backward recomputes QKᵀ, + 2·B·s²·h·l (Dao et al. 2022, arXiv:2205.14135, §3.1), which also covers
    selective recomputation. ``"op"`` (torchtitan's per-op selective checkpointing) adds the forward FLOPs of
    :func:`op_recomputed_matmuls`."""
    B, l, n = global_batch, model.layers, model.mtp_num_layers
    layer = layer_gemm_flops(model, B) + attention_core_flops(model, B)
    base = 3 * l * layer + 3 * logit_flops(model, B)
    if n:  # multi-token prediction: n more blocks, their 2h → h projections and passes through the output layer
        base += 3 * n * (layer + 2 * B * model.seq * 2 * model.hidden**2 + logit_flops(model, B))
    if recompute == "op":
        base += l * sum(2 * B * model.seq * k * n for k, n, _ in op_recomputed_matmuls(model))
    if recompute == "full":
        base += (l if recomputed_layers is None else recomputed_layers) * layer
    core = attention_core_flops(model, B) * l
    if flash_attention:
        base += core / 2
    elif recompute == "selective":
        base += core
    return base


def op_recomputed_matmuls(model: ModelShape) -> list[tuple[int, int, bool]]:
    """The weight matmuls torchtitan's per-op selective activation checkpointing (``--recompute op``) recomputes in
    one block's backward, as ``(in, out, column_parallel)``: its policy saves every compute op's output "except
    every second mm/linear", counted in forward order inside each checkpointed block (torchtitan,
    ``torchtitan/distributed/activation_checkpoint.py``, ``SelectiveAC``; ``_get_default_save_ops`` keeps the
    attention kernel's output too), so of Q, K, V, O, then W1, W3, W2 (SwiGLU) or up, down, the 2nd, 4th and 6th:
    K, O and W3 (gated) or down. The memory-bound operators (norms, activations, residual adds) are not on the
    save list: they run again as well."""
    h, f = model.hidden, model.f
    return [(h, model.kv_width, True), (model.q_width, h, False), (h, f, True) if model.gated else (f, h, False)]


def op_saved_values(model: ModelShape, t: int, seq_parallel: bool) -> float:
    """Values per token one block keeps under torchtitan's per-op selective checkpointing (``--recompute op``),
    read from its policy (torchtitan at 9dec370, ``parallelize_llama.py``: ``_save_list`` = mm, the SDPA kernels,
    ``reduce_scatter_tensor``, abs, max; every second mm not saved; every other op recomputed): the block's input
    (h, ÷t with sequence parallelism), the outputs of the 1st, 3rd, 5th and 7th matmul, Q (h/t), V (h_kv/t), the
    MLP's first (f/t) and, gated, its down projection (h: a row-parallel matmul's output is the full partial sum),
    the attention kernel's output (h/t) and its fp32 log-sum-exp (2·a/t value-equivalents), and with sequence
    parallelism the two reduce-scatters' outputs (2h/t). Norms, RoPE, activations and residual adds: none kept.
    Counted to the byte at t = 1 by PyTorch's selective checkpointing under that policy (tests/test_op_ac_memory.py)."""
    h, a, f, q = model.hidden, model.heads, model.f, model.q_width
    x = h / t if seq_parallel else h
    kept = x + (q + model.kv_width + q + 2 * a + f) / t + (h if model.gated else 0)
    return kept + (2 * h / t if seq_parallel and t > 1 else 0)


def activation_bytes_per_layer(
    model: ModelShape,
    b: float,
    tp: int,
    recompute: str = "none",
    seq_parallel: bool = False,
    bytes_per_value: int = 2,
    flash_attention: bool = False,
    cp: int = 1,
) -> float:
    """Bytes one layer keeps for backward for one micro-batch of ``b`` sequences (Korthikanti et al. 2022,
    arXiv:2205.05198): for a GPT none s·b·h·(10 + 24/t + 5·a·s/(h·t)) (eq. 2), with sequence parallelism
    s·b·h·(34/t + 5·a·s/(h·t)) (§4.2.2); selective and FlashAttention drop the 5·a·s/(h·t) scores (§5);
    full keeps the layer's input, 2·s·b·h (÷t with sequence parallelism, §4.3). The 24 generalised from
    the paper's terms: Q 2·q/h, K and V 2·h_kv/h each, the output projection's input 2·q/h, the MLP's 2·f/h per
    kept (b, s, f) tensor (2 for GELU: its input and output; 3 gated: gate, up, product). cp divides s.
    The 10 replicated: two LayerNorm inputs 4, the QKV and MLP inputs 2 each, two dropout masks 1 each
    (8 without dropout, ``model.dropout`` False).
    ``"op"`` (:func:`op_recomputed_matmuls`): what torchtitan's policy saves, :func:`op_saved_values`.
    Written for 2-byte values, scaled by bytes_per_value/2. Raises ConfigError for another ``recompute``."""
    if recompute not in RECOMPUTE:
        raise ConfigError(f"recompute={recompute!r}: use one of {', '.join(RECOMPUTE)}")
    s, h, a, t = model.seq // cp, model.hidden, model.heads, tp
    sbh = s * b * h
    if recompute == "full":
        x = 2 * sbh / (t if seq_parallel else 1)
    elif recompute == "op":
        x = 2 * op_saved_values(model, t, seq_parallel) * s * b
    else:  # the replicated part (LayerNorms, dropouts: 10sbh) and the part TP splits, kept apart so that
        # integer sizes give the exact integer count (lesson 08 checks it byte for byte)
        attn = 8 * model.core_width if model.mla else 4 * model.q_width + 4 * model.kv_width  # Q, K, V, the output
        split = (attn + 2 * model.f * (3 if model.gated else 2)) * s * b
        core = 0 if recompute in ("selective", "op") or flash_attention else 5 * a * s * model.seq * b
        rep = (10 if model.dropout else 8) * sbh + mla_latents(model) * s * b
        x = (rep + split + core) / t if seq_parallel else rep + (split + core) / t
    return x * bytes_per_value / 2


def mla_latents(model: ModelShape) -> int:
    """MLA's latents one block keeps per token, in :func:`activation_bytes_per_layer`'s 2-byte units: each of Q's and
    K/V's latents (r_q, r_kv) before its norm and after it (the up projection's input), 2·2·(r_q + r_kv); replicated
    over TP (Megatron-Core's down projections are ``duplicated``, each rank's own tokens); 0 without MLA."""
    return 4 * ((model.q_lora_rank or 0) + model.kv_lora_rank) if model.mla else 0


def fp8_saved_bytes(
    model: ModelShape, b: float, tp: int, recompute: str = "none", seq_parallel: bool = False, cp: int = 1
):
    """Bytes per layer and micro-batch that FP8 training saves when each weight GEMM keeps its input for the
    weight gradient in FP8 (1 byte, not bf16's 2), as Transformer Engine's ``Linear`` does (NVIDIA/TransformerEngine,
    ``transformer_engine/pytorch/module/linear.py``, ``_Linear.forward``: "Cached input tensor", the quantized
    input): the QKV and the MLP-up inputs, s·b·h each (replicated unless sequence parallelism), the output
    projection's, s·b·q, and the MLP-down's, s·b·f (÷t); 0 with full recomputation (only the block's bf16 input is
    kept). torchao's ``Float8Linear`` keeps its inputs in high precision (``matmul_with_hp_or_float8_args.forward``:
    ``ctx.save_for_backward(input_hp, ...)``): no saving there."""
    if recompute == "full":
        return 0.0
    s, h, t = model.seq // cp, model.hidden, tp
    out = model.heads * model.v_dim if model.mla else model.q_width  # the output projection's input width
    rep, split = 2 * s * b * h + mla_latents(model) * s * b / 4, (out + model.f) * s * b
    return (rep + split) / t if seq_parallel else rep + split / t


def head_params(model: ModelShape, pp: int, tp: int) -> list[float]:
    """Parameters outside the blocks one rank of each pipeline stage 0 .. pp−1 holds, megatron counts (Narayanan §5.1):
    the word embedding ÷ t and the learned position table (``learned_positions``) on stage 0, the output layer ÷ t on
    the last (a tied head: Megatron-LM's copy of the embedding there when pp > 1, the embedding itself when pp = 1).
    They stay in bf16 under FP8 training (Megatron-Core's embedding and ``output_layer`` are not Transformer Engine
    modules)."""
    h, V = model.hidden, model.vocab
    out = [0.0] * pp
    out[-1] += V * h / tp
    if pp > 1 or not model.tied_embeddings:
        out[0] += V * h / tp  # the word embedding
    out[0] += model.seq * h if model.learned_positions else 0
    return out


def stage_params(model: ModelShape, pp: int, tp: int, counts: str = "megatron", stage_layers=None) -> list[float]:
    """Parameters one rank of each pipeline stage holds (its TP share), stage 0 .. pp−1.

    megatron (Narayanan §5.1): ``stage_layers[i]`` blocks (default l/p each) of
    :attr:`~minipar.perf.shape.ModelShape.layer_params` (12h² + 13h for a GPT), the word embedding ÷ t and the learned
    position table (``learned_positions``) on stage 0, the output layer ÷ t on the last stage (a tied head:
    Megatron-LM's copy of the embedding there when pp > 1, the embedding itself when pp = 1). minipar: blocks
    (12h²+7h)/t + 6h (matrices and split biases; replicated vectors), stage 0 adds ⌈V/t⌉·h + s·h (embeddings), the last
    stage ⌈V/t⌉·h + 2h (head, final LayerNorm).
    """
    h, V = model.hidden, model.vocab
    if counts == "megatron":
        layers = stage_layers or [model.layers // pp] * pp
        out = [n * model.layer_params / tp + e for n, e in zip(layers, head_params(model, pp, tp))]
        out[-1] += model.mtp_num_layers * (model.layer_params + model.mtp_projection_params) / tp  # MTP
        return out
    from minipar.pp.stages import partition_layers  # imports torch: only the minipar counts need it

    block = (12 * h * h + 7 * h) / tp + 6 * h
    out = []
    for s, (lo, hi) in enumerate(partition_layers(model.layers, pp)):
        n = (hi - lo) * block
        if s == 0:
            n += -(-V // tp) * h + model.seq * h
        if s == pp - 1:
            n += -(-V // tp) * h + 2 * h
        out.append(n)
    return out


@functools.lru_cache(maxsize=256)
def gpt_flops_per_token(model: ModelShape) -> float:
    """Training FLOPs per token of minipar's GPT of this shape: ``GPT.flops_per_token()`` itself (6·N +
    12·l·h·s; Kaplan et al. 2020, arXiv:2001.08361, Table 1; PaLM, arXiv:2204.02311, App. B), the
    model built on the meta device (no memory, no data)."""
    import torch

    from minipar.model.gpt import GPT, GPTConfig

    l, h, a, s, V = model.layers, model.hidden, model.heads, model.seq, model.vocab
    with torch.device("meta"):
        return GPT(
            GPTConfig(vocab_size=V, block_size=s, n_layer=l, n_head=a, d_model=h, bias=model.bias)
        ).flops_per_token()


def megatron_flops_per_token(model: ModelShape) -> float:
    """Megatron-LM's training FLOPs per token (``num_floating_point_operations`` ÷ tokens, at ff45bd4), the count
    published TFLOP/s use: 18·h·(f·k + f_s) per block (SwiGLU, k routed experts of f, shared f_s; a first
    ``dense_layers`` block one MLP of ``ffn``) + 12·l·h²·(1 + g/a + s/(2h))·q/h (attention, the causal half of the s²
    core; q/h its ``query_projection_to_hidden_size_ratio``, 1 unless ``kv_channels``), with MLA 6·l·(its matrices + the
    two latent norms + s·(a·d_qk + a·d_v)/2) + 6·h·V (logits); no router, no recomputation."""
    l, h, a, g, s, V = model.layers, model.hidden, model.heads, model.kv, model.seq, model.vocab
    kinds, mtp = model.block_kinds(), model.mtp_num_layers  # Megatron-LM counts MTP blocks as more of the last kind
    mlp = sum(18 * n * h * (v.f * (v.top_k if v.experts else 1) + (v.shared_ffn or 0)) for v, n in kinds)
    mlp += mtp * 18 * h * (kinds[-1][0].f * (model.top_k if model.experts else 1) + (model.shared_ffn or 0))
    if model.mla:  # Megatron-LM's MLA branch: the projections, the latent norms (+1 each), the causal core
        norms = (model.q_lora_rank or 0) + model.kv_lora_rank
        attn = 6 * (l + mtp) * (model.attn_matrix_params + norms + s * model.core_width)
    else:
        attn = 12 * (l + mtp) * h * h * (1 + g / a + s / h / 2) * model.q_width / h
    return mlp + attn + 6 * h * V * (1 + mtp)


def mlp_params(model: ModelShape, f: int | None = None) -> int:
    """Parameters of one MLP of inner width ``f`` (default the model's): (3 if gated else 2)·h·f matrices and the
    biases (2f or f, and h): an expert's, or the shared experts' with ``f = shared_ffn``."""
    h, f = model.hidden, f or model.f
    return (3 if model.gated else 2) * h * f + (2 * f if model.gated else f) + h


def moe_params(model: ModelShape, experts: int, top_k: int) -> tuple[float, float]:
    """``(total, active)`` parameters when every block's MLP becomes ``experts`` MLPs of the same shape,
    ``top_k`` of them per token, plus a router (experts × h) per block and the shared experts' MLP
    (``ModelShape.shared_ffn``) when it has one; the first ``dense_layers`` blocks keep their dense MLP
    (:meth:`~minipar.perf.shape.ModelShape.block_kinds`). A token uses the router, k experts and the shared ones: FLOPs
    follow the active count, memory the total (Mixtral 8x7B: 47B total, 13B active; Jiang et al. 2024,
    arXiv:2401.04088, §2.1)."""
    total = active = model.embedding_params
    kinds = model.block_kinds() if model.experts else [(model, model.layers)]  # a dense shape: every MLP made experts
    for view, n in [*kinds, (kinds[-1][0], model.mtp_num_layers)]:  # multi-token prediction: more of the last kind
        routed = bool(view.experts) or not model.experts
        mlp, shared = mlp_params(view), mlp_params(view, view.shared_ffn) if view.shared_ffn else 0
        beyond = (lambda k: (k - 1) * mlp + experts * view.hidden + shared) if routed else (lambda k: 0)  # noqa: E731
        total, active = (
            total + n * (view.layer_params + beyond(experts)),
            active + n * (view.layer_params + beyond(top_k)),
        )
    proj = model.mtp_num_layers * model.mtp_projection_params  # MTP's 2h → h projections and norms
    return total + proj, active + proj


def moe_flops_per_token(model: ModelShape, experts: int, top_k: int) -> float:
    """Training FLOPs per token with experts: 6·(active parameters without those a token only looks up,
    :attr:`~minipar.perf.shape.ModelShape.lookup_params`) + 12·l·q·s, as ``GPT.flops_per_token`` counts it (Kaplan
    et al. 2020, Table 1; PaLM App. B; s the keys of :func:`attention_keys` with a window): k, not E, sets it."""
    active = moe_params(model, experts, top_k)[1]
    n = model.mtp_num_layers  # multi-token prediction: n more attention cores and passes through the output layer
    core = 12 * (model.layers + n) * model.core_width * attention_keys(model, model.seq)
    return 6 * (active - model.lookup_params) + core + 6 * n * model.hidden * model.vocab


def all_to_all_bytes(tokens: float, hidden: int, top_k: int, ep: int, bytes_per_value: int = 2) -> float:
    """Bytes one rank sends (and receives) in one expert-parallel all-to-all with balanced routing:
    (ep − 1)/ep · tokens·k·h·b (each of its tokens' k rows goes to its expert's rank; 1/ep stay home).
    A training step makes four per MoE layer: dispatch and combine, and their mirrors in backward."""
    return (ep - 1) / ep * tokens * top_k * hidden * bytes_per_value
