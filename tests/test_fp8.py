"""minipar.optim.fp8: FP8 emulated by casts (ranges, scaling recipes, the FP8 linear's gradients)."""

from __future__ import annotations

import pytest
import torch

from minipar.errors import ConfigError
from minipar.optim.fp8 import (
    E4M3,
    E5M2,
    AmaxHistory,
    FP8Linear,
    fp8_range,
    gemm_error_bound,
    quantize_blocks,
    quantize_tensor,
    scale_for,
    to_fp8,
)


def test_ranges_are_the_formats():
    """arXiv:2209.05433 Table 1: e4m3 max 448, min normal 2^-6; e5m2 max 57344, min normal 2^-14."""
    a, b = fp8_range(E4M3), fp8_range(E5M2)
    assert (a["max"], a["smallest_normal"], a["mantissa_bits"], a["rel_error"]) == (448.0, 2.0**-6, 3, 2.0**-4)
    assert (b["max"], b["smallest_normal"], b["mantissa_bits"], b["rel_error"]) == (57344.0, 2.0**-14, 2, 2.0**-3)
    assert a["subnormal_step"] == 2.0**-9 and b["subnormal_step"] == 2.0**-16
    with pytest.raises(ConfigError):
        fp8_range(torch.bfloat16)


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_round_trip_error_from_the_mantissa_bits(dtype):
    """|q(x) − x| ≤ 2^-(m+1)|x| + (subnormal step / 2) / scale, for every element (current scaling)."""
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=torch.float64) * torch.logspace(-3, 2, 4096, dtype=torch.float64)
    r = fp8_range(dtype)
    s = scale_for(x.abs().max(), dtype).item()
    err = (quantize_tensor(x, dtype) - x).abs()
    assert (err <= r["rel_error"] * x.abs() + r["subnormal_step"] / 2 / s).all()
    assert err.max() > 0  # it does round


def test_block_scaling_beats_per_tensor_with_an_outlier_channel():
    torch.manual_seed(0)
    x = torch.randn(64, 512)
    x[:, 3] *= 1e5  # one channel far outside e4m3's ~2^15 dynamic range
    clean = torch.arange(512) >= 128  # the tiles without the outlier
    e_tensor = (quantize_tensor(x) - x)[:, clean].norm() / x[:, clean].norm()
    e_block = (quantize_blocks(x, block=(1, 128)) - x)[:, clean].norm() / x[:, clean].norm()
    assert e_block <= fp8_range(E4M3)["rel_error"] < e_tensor


def test_block_shapes_are_checked():
    with pytest.raises(ConfigError):
        quantize_blocks(torch.randn(200, 256), block=(128, 128))
    with pytest.raises(ConfigError):
        quantize_blocks(torch.randn(2, 3, 4))
    assert quantize_blocks(torch.randn(4, 64)).shape == (4, 64)  # a block larger than the matrix: clipped


def test_delayed_scaling_uses_the_history():
    h = AmaxHistory(E4M3, length=2)
    x = torch.full((8,), 1.0)
    h(x * 100)  # first call: current scale, records 100
    assert h.amax() == 100.0
    small = h(x)  # scaled by the history: 448/100, not 448/1
    assert torch.equal(small, torch.as_tensor(1.0 * 448 / 100).to(E4M3).float().expand(8) / (448 / 100))
    h(x)
    assert h.history == [1.0, 1.0] and h.amax() == 1.0  # 100 left the window of 2
    big = h(x * 1000)  # beyond the history's amax: saturates at 448 / scale = 1.0
    assert torch.equal(big, torch.full((8,), 1.0))


def test_gemm_error_bound_holds():
    torch.manual_seed(0)
    x, w = torch.randn(256, 256), torch.randn(64, 256) * 0.02
    ref = x.double() @ w.double().t()
    bound = gemm_error_bound(x, w)
    for y in (
        quantize_tensor(x) @ quantize_tensor(w).t(),
        quantize_blocks(x) @ quantize_blocks(w, block=(128, 128)).t(),
    ):
        assert ((y.double() - ref).abs() <= bound).all()


@pytest.mark.parametrize("recipe", ["tensor", "delayed", "block"])
def test_fp8_linear_gradients_close_to_fp32(recipe):
    """Gradients of L = Σ y·c: dx = q(c) q(w), dw = q(c)ᵀ q(x); each operand within u of its value, so
    |Δ| ≤ ((1+u_g)(1+u_x) − 1)·(|c||w|) elementwise (+ subnormal slack): checked normwise with u_g = 1/8, u_x = 1/16."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(256, 128)
    x = torch.randn(4, 32, 256, requires_grad=True)
    c = torch.randn(4, 32, 128)
    (lin(x) * c).sum().backward()
    gx, gw = x.grad.clone(), lin.weight.grad.clone()
    x.grad = None
    lin.weight.grad = None
    fp8 = FP8Linear(lin, recipe)
    for _ in range(2):  # delayed: the second call uses the history
        x.grad = None
        lin.weight.grad = None
        (fp8(x) * c).sum().backward()
    u = (1 + 2.0**-3) * (1 + 2.0**-4) - 1
    ax = (c.abs().reshape(-1, 128) @ lin.weight.abs()).norm()
    aw = (c.abs().reshape(-1, 128).t() @ x.detach().abs().reshape(-1, 256)).norm()
    assert (x.grad - gx).norm() <= 1.01 * u * ax
    assert (lin.weight.grad - gw).norm() <= 1.01 * u * aw
    assert (x.grad - gx).norm() > 0  # it is not fp32


def test_to_fp8_swaps_the_blocks_linears_and_keeps_the_parameters():
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(8, 4)))
    params = list(net.parameters())
    assert to_fp8(net, "delayed") == 2
    assert isinstance(net[0], FP8Linear) and isinstance(net[1][1], FP8Linear)
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    with pytest.raises(ConfigError):
        FP8Linear(torch.nn.Linear(2, 2), "int8")
