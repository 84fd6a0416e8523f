"""FP8 training, emulated: scale, clamp, cast to float8, cast back, unscale; the GEMMs then run in float32.

Two 8-bit formats (Micikevicius et al. 2022, "FP8 Formats for Deep Learning", arXiv:2209.05433, §2-3):
``torch.float8_e4m3fn`` (4 exponent, 3 mantissa bits, max 448) for weights and activations, and
``torch.float8_e5m2`` (5 exponent, 2 mantissa bits, max 57,344) for gradients, whose range is wider.
Round to nearest keeps a normal value within a relative 2^-(m+1) (1/16 for e4m3, 1/8 for e5m2).

Their range is narrow (e4m3: 448 / 2^-6, about 2^15 between the largest and the smallest normal), so each
tensor is multiplied by a *scale* before the cast that puts its largest magnitude (its amax) at the format's
max, and divided by it after:

- per-tensor, *current* scaling: the amax of this tensor now (:func:`quantize_tensor`);
- per-tensor, *delayed* scaling: the largest amax of the previous steps (:class:`AmaxHistory`; Transformer
  Engine's ``DelayedScaling``, arXiv:2209.05433 §4): no extra pass over the tensor before the GEMM;
- *block* scaling (DeepSeek-V3, arXiv:2412.19437 §3.3): one scale per 1×128 tile of an activation and per
  128×128 block of a weight (:func:`quantize_blocks`), so one outlier spoils only its own tile.

DeepSeek-V3 also accumulates the GEMMs in higher precision (promotion to FP32 every 128 products, §3.3.2):
here every GEMM runs in float32 on the dequantized values, which is that accumulation exactly.
:class:`FP8Linear` puts it together: forward GEMM in e4m3, the gradients of the output in e5m2
(:func:`to_fp8` swaps a model's ``nn.Linear``\\ s). Nothing here needs FP8 hardware.
"""

from __future__ import annotations

import math

import torch

from minipar.errors import ConfigError

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
RECIPES = ("tensor", "delayed", "block")


def fp8_range(dtype: torch.dtype) -> dict[str, float]:
    """The numbers of a float8 format, from ``torch.finfo``: ``max``, ``smallest_normal``, ``mantissa_bits``,
    ``subnormal_step`` (the spacing below the smallest normal, smallest_normal · 2^-m) and ``rel_error``
    (2^-(m+1): the largest relative rounding error of a normal value, round to nearest).

    Raises:
        ConfigError: ``dtype`` is not one of the two float8 formats.
    """
    if dtype not in (E4M3, E5M2):
        raise ConfigError(f"{dtype} is not an FP8 format: use torch.float8_e4m3fn or torch.float8_e5m2")
    f = torch.finfo(dtype)
    m = round(-math.log2(f.eps))
    return {
        "max": f.max,
        "smallest_normal": f.smallest_normal,
        "mantissa_bits": m,
        "subnormal_step": f.smallest_normal * f.eps,
        "rel_error": 2.0 ** -(m + 1),
    }


def scale_for(amax: torch.Tensor, dtype: torch.dtype = E4M3, margin: int = 0) -> torch.Tensor:
    """``fmax / amax / 2^margin`` elementwise (Transformer Engine's scale), 1 where amax is 0 or not finite.
    ``amax``: a tensor of any shape (one per tensor, tile or block)."""
    fmax = fp8_range(dtype)["max"]
    ok = torch.isfinite(amax) & (amax > 0)
    return torch.where(ok, fmax / amax.clamp_min(torch.finfo(amax.dtype).tiny) / 2.0**margin, torch.ones_like(amax))


def quantize(x: torch.Tensor, scale: torch.Tensor | float, dtype: torch.dtype = E4M3) -> torch.Tensor:
    """Emulated FP8 round trip: ``cast(clamp(x · scale, ±max), dtype) / scale`` in ``x``'s dtype.

    ``scale`` broadcasts against ``x`` (a scalar for per-tensor scaling, a tensor per tile or block). Values
    beyond the range saturate at ±max (Transformer Engine's behaviour), values below the smallest subnormal
    flush to 0. Returns a tensor of ``x``'s shape and dtype: the values the FP8 GEMM would see."""
    fmax = fp8_range(dtype)["max"]
    s = torch.as_tensor(scale, dtype=x.dtype, device=x.device)
    return (x * s).clamp(-fmax, fmax).to(dtype).to(x.dtype) / s


def quantize_tensor(
    x: torch.Tensor, dtype: torch.dtype = E4M3, amax: torch.Tensor | float | None = None
) -> torch.Tensor:
    """Per-tensor scaling: one scale for all of ``x``. ``amax=None``: current scaling (``x.abs().max()``);
    otherwise the given amax (delayed scaling: the history's, :class:`AmaxHistory`)."""
    a = x.detach().abs().amax() if amax is None else torch.as_tensor(amax, dtype=x.dtype, device=x.device)
    return quantize(x, scale_for(a, dtype), dtype)


def quantize_blocks(x: torch.Tensor, dtype: torch.dtype = E4M3, block: tuple[int, int] = (1, 128)) -> torch.Tensor:
    """Block scaling of a 2-D ``x`` (rows, cols): one current scale per ``block`` = (br, bc) tile, each
    clipped to the matrix (a dimension smaller than its block is one block). DeepSeek-V3 §3.3.1: (1, 128)
    for activations (per token, per 128 channels), (128, 128) for weights.

    Raises:
        ConfigError: ``x`` is not 2-D, or a dimension is not a multiple of its (clipped) block.
    """
    if x.dim() != 2:
        raise ConfigError(f"quantize_blocks needs a 2-D tensor, got shape {tuple(x.shape)}")
    (r, c), (br, bc) = x.shape, (min(block[0], x.shape[0]), min(block[1], x.shape[1]))
    if r % br or c % bc:
        raise ConfigError(f"shape {(r, c)} is not a multiple of the block {(br, bc)}")
    tiles = x.reshape(r // br, br, c // bc, bc)
    amax = tiles.detach().abs().amax(dim=(1, 3), keepdim=True)  # (r/br, 1, c/bc, 1): one per block
    return quantize(tiles, scale_for(amax, dtype), dtype).reshape(r, c)


class AmaxHistory:
    """Delayed scaling (Transformer Engine's ``DelayedScaling(amax_history_len, amax_compute_algo="max")``):
    the scale of this step comes from the largest amax of the last ``length`` steps, not from this tensor;
    this tensor's amax is recorded after the cast, for the next steps. The first call, with no history,
    uses the current amax. A value above the history's amax saturates at the format's max.

    ``history``: the recorded amaxes, newest last (floats, at most ``length``)."""

    def __init__(self, dtype: torch.dtype = E4M3, length: int = 16, margin: int = 0):
        if length < 1:
            raise ConfigError(f"amax history length must be >= 1, got {length}")
        self.dtype, self.length, self.margin = dtype, length, margin
        self.history: list[float] = []

    def amax(self) -> float | None:
        """The amax the next cast will scale by: the history's largest, None while it is empty."""
        return max(self.history) if self.history else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """Quantize ``x`` with the history's scale (current scale on the first call), then record its amax."""
        now = x.detach().abs().amax()
        a = now if not self.history else torch.as_tensor(self.amax(), dtype=x.dtype, device=x.device)
        out = quantize(x, scale_for(a, self.dtype, self.margin), self.dtype)
        self.history = (self.history + [float(now)])[-self.length :]
        return out


class _FP8Matmul(torch.autograd.Function):
    """``y = q_x(x) @ q_w(w)ᵀ`` in float32 on the dequantized operands; backward ``g → q_g(g)``:
    ``dx = q_g(g) @ q_w(w)``, ``dw = q_g(g)ᵀ @ q_x(x)``. x: (N, in), w: (out, in), y and g: (N, out).
    The quantized x and w are what is saved for backward (FP8 copies, as Transformer Engine keeps them)."""

    @staticmethod
    def forward(ctx, x, weight, qx, qw, qg):
        xq, wq = qx(x), qw(weight)
        ctx.save_for_backward(xq, wq)
        ctx.qg = qg
        return xq @ wq.t()

    @staticmethod
    def backward(ctx, g):
        xq, wq = ctx.saved_tensors
        gq = ctx.qg(g.contiguous())
        return gq @ wq, gq.t() @ xq, None, None, None


class FP8Linear(torch.nn.Module):
    """An ``nn.Linear`` whose GEMMs run in emulated FP8: inputs and weight in e4m3, output gradients in e5m2,
    accumulation in float32; the bias is added in the input's dtype. It shares ``linear``'s parameters
    (an optimizer built before the swap still updates them; master weights stay in their dtype).

    ``recipe``: "tensor" (per-tensor current scaling), "delayed" (per-tensor, :class:`AmaxHistory` of
    ``history`` steps for x, w and the gradient each), "block" (DeepSeek-V3: 1×``block`` tiles of x and of
    the gradient, ``block``×``block`` blocks of w). Input (..., in) → output (..., out).

    Raises:
        ConfigError: an unknown recipe (at construction); with "block", dimensions not multiples of the
            (clipped) block (at the first forward).
    """

    def __init__(self, linear: torch.nn.Linear, recipe: str = "tensor", history: int = 16, block: int = 128):
        super().__init__()
        if recipe not in RECIPES:
            raise ConfigError(f"unknown FP8 recipe {recipe!r}: one of {RECIPES}")
        self.weight, self.bias, self.recipe = linear.weight, linear.bias, recipe
        self.in_features, self.out_features = linear.in_features, linear.out_features
        if recipe == "tensor":
            self.qx = self.qw = quantize_tensor
            self.qg = lambda g: quantize_tensor(g, E5M2)
        elif recipe == "delayed":
            self.qx, self.qw, self.qg = (
                AmaxHistory(E4M3, history),
                AmaxHistory(E4M3, history),
                AmaxHistory(E5M2, history),
            )
        else:
            self.qx = lambda x: quantize_blocks(x, E4M3, (1, block))
            self.qw = lambda w: quantize_blocks(w, E4M3, (block, block))
            self.qg = lambda g: quantize_blocks(g, E5M2, (1, block))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = _FP8Matmul.apply(x.reshape(-1, self.in_features), self.weight, self.qx, self.qw, self.qg)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, recipe={self.recipe}"


def to_fp8(module: torch.nn.Module, recipe: str = "tensor", **kw) -> int:
    """Swap every ``nn.Linear`` inside ``module`` for an :class:`FP8Linear` (in place; ``kw`` goes to it).
    Pass the part that runs in FP8, e.g. ``to_fp8(gpt.blocks)``: as in torchtitan's and Transformer
    Engine's recipes, the embedding and the logit layer stay in 16 bits. Returns how many were swapped."""
    n = 0
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear):
            setattr(module, name, FP8Linear(child, recipe, **kw))
            n += 1
        else:
            n += to_fp8(child, recipe, **kw)
    return n


def gemm_error_bound(x: torch.Tensor, w: torch.Tensor, dtype: torch.dtype = E4M3) -> torch.Tensor:
    """Elementwise bound on |q(x) @ q(w)ᵀ − x @ wᵀ| for current per-tensor or block scaling of x (N, K) and
    w (M, K), accumulated in float32: each quantized value is within u·|v| + δ of v (u = 2^-(m+1), δ = half
    the subnormal step over the per-tensor scale; a block's scale is at least the tensor's, so its δ is
    smaller), hence |Δy| ≤ ((1+u)|x| + δx)((1+u)|w| + δw)ᵀ − |x||w|ᵀ, plus K·2^-24·|x||w|ᵀ for the
    float32 sums. Returns (N, M), float64."""
    r = fp8_range(dtype)
    u, x64, w64 = r["rel_error"], x.detach().double().abs(), w.detach().double().abs()
    dx, dw = (r["subnormal_step"] / 2 / scale_for(t.amax(), dtype).item() for t in (x64, w64))
    base = x64 @ w64.t()
    return ((1 + u) * x64 + dx) @ ((1 + u) * w64 + dw).t() - base + x.shape[1] * 2.0**-24 * base
