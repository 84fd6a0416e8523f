"""The command line's model-shape flags (``python -m minipar.plan --model 70b`` or ``--layers L --hidden H --heads A``
with ``--kv-heads --ffn --vocab --seq --kv-channels --window-size --window-attn-skip-freq``, MLA's ``--q-lora-rank
--kv-lora-rank --qk-head-dim --qk-pos-emb-head-dim --v-head-dim``, ``--mtp-num-layers``, ``--swiglu --no-dropout
--untie-embeddings-and-output-weights --position-embedding-type``): the :class:`~minipar.perf.shape.ModelShape` a run
is planned for, Megatron-LM's flag names."""

from __future__ import annotations

from dataclasses import replace

from minipar.errors import ConfigError
from minipar.perf.published import MODELS
from minipar.perf.shape import MLA, POSITIONS, ModelShape

# every one an integer flag, None unless given
SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq", "kv_channels", "window_size",
         "window_attn_skip_freq", *MLA, "mtp_num_layers")  # fmt: skip
SHAPE_HELP = {
    "kv_channels": "one attention head's width (Megatron-LM's; default hidden/heads)",
    "window_size": "sliding-window attention: a query sees the W tokens before it (Megatron-Core's window_size)",
    "window_attn_skip_freq": "with --window-size: every N-th block attends to all tokens (GPT-OSS: 2, alternating)",
    "q_lora_rank": "multi-latent attention (MLA): Q's latent width (DeepSeek-V3: 1536; optional)",
    "kv_lora_rank": "MLA: K and V's latent width (DeepSeek-V3: 512); with the three head widths below",
    "qk_head_dim": "MLA: a head's width in QKᵀ without its rotary part (DeepSeek-V3: 128)",
    "qk_pos_emb_head_dim": "MLA: a head's rotary part in QKᵀ (DeepSeek-V3: 64)",
    "v_head_dim": "MLA: a head's width of V (DeepSeek-V3: 128)",
    "mtp_num_layers": "multi-token prediction: its blocks on the last stage, each one more pass through the output "
    "layer (DeepSeek-V3: 1)",
}


def add_shape_flags(p) -> None:
    """The shape's flags (module doc) on the argparse parser ``p``, ``--model`` among the presets :data:`MODELS`."""
    p.add_argument("--model", default="70b", choices=sorted(MODELS), help="a preset shape (unless --layers ...)")
    for f in SHAPE:
        p.add_argument(f"--{f.replace('_', '-')}", type=int, default=None, help=f"custom shape: {SHAPE_HELP.get(f, f)}")
    p.add_argument("--swiglu", action="store_true", help="gated MLP (three h×ffn matrices)")
    p.add_argument("--no-dropout", action="store_true", help="no dropout masks kept (Llama): activation memory")
    p.add_argument(
        "--untie-embeddings-and-output-weights", action="store_true", help="an output layer of its own (Llama)"
    )
    p.add_argument("--position-embedding-type", choices=POSITIONS, help="learned_absolute: an s×h table (GPT; default)")


def check_shape_flags(a) -> None:
    """Raise :class:`ConfigError` (one line) for a shape the flags cannot give: a size below 1, a custom shape
    without all of --layers, --hidden, --heads, a --window-attn-skip-freq without --window-size."""
    for f in SHAPE:
        if getattr(a, f) is not None and getattr(a, f) < 1:
            raise ConfigError(f"--{f.replace('_', '-')} {getattr(a, f)}: must be an integer >= 1")
    custom = [f for f in ("layers", "hidden", "heads") if getattr(a, f) is not None]
    if custom and len(custom) < 3:
        missing = sorted({"layers", "hidden", "heads"} - set(custom))
        raise ConfigError(f"a custom shape needs --layers, --hidden and --heads: add --{' --'.join(missing)}")
    if a.window_attn_skip_freq is not None and a.window_size is None:
        raise ConfigError(
            f"--window-attn-skip-freq {a.window_attn_skip_freq}: says which blocks skip the sliding window; give "
            "--window-size W (the window's tokens) too"
        )


def model_shape(a) -> tuple[str, ModelShape]:
    """(name, shape) of the flags: the custom shape (sequence 2,048 and vocabulary 51,200 unless given) or the preset
    ``--model`` with the flags given over it; Megatron-LM's embedding flags applied
    (:meth:`~minipar.perf.shape.ModelShape.with_embeddings`)."""
    emb = (a.untie_embeddings_and_output_weights, a.position_embedding_type)  # Megatron-LM's flags, when given
    over = {k: getattr(a, k) for k in SHAPE[3:] if getattr(a, k) is not None}  # all but layers, hidden, heads
    if a.layers is not None:
        shape = ModelShape(a.layers, a.hidden, a.heads, **{"seq": 2048, "vocab": 51200, **over}, gated=a.swiglu,
                           dropout=not a.no_dropout)  # fmt: skip
        return f"custom l{a.layers}·h{a.hidden}·a{a.heads}", shape.with_embeddings(*emb)
    base = MODELS[a.model]
    shape = replace(base, **over, gated=base.gated or a.swiglu, dropout=base.dropout and not a.no_dropout)
    return a.model, shape.with_embeddings(*emb)


def window_note(model: ModelShape) -> str:
    """``", a W-token window in n of l blocks"`` for a shape with sliding-window attention (the plan's header), else
    ``""``."""
    w, n, l = model.window_size, model.window_attn_skip_freq, model.layers
    return f", a {w}-token window in {l - (l // n if n else 0)} of {l} blocks" if w else ""
