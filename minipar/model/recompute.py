"""Activation recomputation (checkpointing), built by hand.

Full recomputation keeps only a block's input and re-runs its forward during backward;
the native equivalent is ``torch.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)``.
Selective recomputation re-runs only the attention core (``models.attention_core``).
:func:`set_recompute` switches every block of a model (the main job's ``--recompute``).
Source: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, §4 (activation memory: 34sbh + 5as²b per layer, 2sbh with full recompute,
34sbh with selective recompute of the attention core, §5).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minipar.errors import ConfigError

MODES = ("none", "selective", "full")


class _Checkpoint(torch.autograd.Function):
    """Forward under no_grad saving only the inputs and the RNG state; backward re-runs forward."""

    @staticmethod
    def forward(ctx, fn, *inputs):
        ctx.fn = fn
        ctx.cpu_rng = torch.get_rng_state()
        ctx.cuda_rng = torch.cuda.get_rng_state() if torch.cuda.is_available() else None
        ctx.save_for_backward(*inputs)
        with torch.no_grad():
            return fn(*inputs)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
        devices = [torch.cuda.current_device()] if ctx.cuda_rng is not None else []
        with torch.random.fork_rng(devices=devices):  # replay the same dropout masks
            torch.set_rng_state(ctx.cpu_rng)
            if ctx.cuda_rng is not None:
                torch.cuda.set_rng_state(ctx.cuda_rng)
            with torch.enable_grad():
                out = ctx.fn(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        torch.autograd.backward(outs, grads)
        return (None, *[x.grad if x.requires_grad else None for x in inputs])


def checkpoint(fn, *inputs):
    """Run ``fn(*inputs)`` keeping only ``inputs`` for backward (full recomputation).

    Parameters used inside ``fn`` get their gradients during the re-run. Dropout gives the same
    masks in the re-run because the RNG state at forward time is restored (and the caller's RNG
    stream is left as it was). Returns what ``fn`` returns (tensor or tuple of tensors).
    """
    return _Checkpoint.apply(fn, *inputs)


def set_recompute(model: nn.Module, mode: str) -> int:
    """Switch every transformer block of ``model`` to recomputation ``mode``; returns how many blocks.

    Blocks (``models.Block``, also in a tensor-parallel GPT) carry ``recompute`` ("full": keep only the
    block input, re-run the block in backward) and their attention ``recompute_core`` (True for
    "selective": keep q, k, v and re-run only QKᵀ, softmax, dropout, ·V). Parameter names and the
    state dict do not change. Raises ConfigError for an unknown mode, or a model with no blocks
    when the mode is not "none".
    """
    if mode not in MODES:
        raise ConfigError(f"--recompute {mode!r}: use one of {', '.join(MODES)}")
    n = 0
    for m in model.modules():
        if hasattr(m, "recompute") and hasattr(m, "attn"):
            m.recompute = "full" if mode == "full" else "none"
            m.attn.recompute_core = mode == "selective"
            n += 1
    if n == 0 and mode != "none":
        raise ConfigError(
            f"--recompute {mode}: {type(model).__name__} has no transformer blocks to recompute; use --recompute none"
        )
    return n


class CheckpointedBlock(nn.Module):
    """Wrap a transformer ``Block`` (models.Block layout) with recomputation.

    ``mode="full"``: the whole block is recomputed (only its input x, (b, s, h), is kept).
    ``mode="selective"``: only the attention core (QKᵀ, softmax, dropout, ·V) is recomputed,
    Korthikanti §5; needs ``block.attn.recompute_core`` (models.Block) — otherwise ConfigError.
    ``mode="none"``: plain block. Raises ConfigError for any other mode.
    """

    def __init__(self, block: nn.Module, mode: str = "full"):
        super().__init__()
        if mode not in MODES:
            raise ConfigError(f"recompute={mode!r} is not one of {MODES}")
        if mode == "selective":
            if not hasattr(getattr(block, "attn", None), "recompute_core"):
                raise ConfigError(
                    f"recompute='selective' needs a transformer block with attn.recompute_core; "
                    f"got {type(block).__name__}: use mode='full'"
                )
            block.attn.recompute_core = True
        self.block, self.mode = block, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "full" and torch.is_grad_enabled():
            return checkpoint(self.block, x)
        return self.block(x)


def cpu_extra_bytes(seq_len: int, batch_size: int, d_model: int, n_head: int, recompute: str = "none") -> int:
    """What a 16-bit PyTorch CPU layer keeps beyond :func:`minipar.perf.model.activation_bytes_per_layer` (bf16 run).

    Two differences from the paper's fused GPU kernels, both counted exactly: (1) PyTorch's CPU
    dropout keeps its mask in the activation's dtype (2 bytes, not 1): + a·s²·b for the attention
    dropout (none only) and + 2·s·b·h for the two residual dropouts; (2) each LayerNorm keeps its
    mean and 1/σ, (s, b) each: + 2·2·2·s·b = 8sb. Full recomputation keeps only the input: + 0.
    """
    s, b, h, a = seq_len, batch_size, d_model, n_head
    if recompute == "full":
        return 0
    return 2 * s * b * h + 8 * s * b + (a * s * s * b if recompute == "none" else 0)


def use_torch_checkpoint(model: nn.Module, reentrant: bool = False) -> nn.Module:
    """PyTorch's own full recompute, to compare with :func:`set_recompute`'s "full": every block's forward
    wrapped in ``torch.utils.checkpoint.checkpoint(block._forward, ..., use_reentrant=reentrant)``.

    ``reentrant=False`` is PyTorch's recommended form; it keeps what it saves behind saved-tensor hooks
    of its own, which hide it from an outer counter (:class:`minipar.model.memory.SavedTensorMeter`), so
    byte counts use ``reentrant=True`` (an autograd Function like :class:`_Checkpoint`; the same tensors
    kept). Returns ``model``."""
    import functools

    import torch.utils.checkpoint

    for blk in model.blocks:
        blk.forward = functools.partial(torch.utils.checkpoint.checkpoint, blk._forward, use_reentrant=reentrant)
    return model
