"""Device descriptions for the performance model: what a device can compute and how fast it talks.

This module will hold both the GPU presets (datasheet figures, each with its source) and the
description of *this* machine, measured (:func:`measured_peak_flops`).
"""

from __future__ import annotations

import time

import torch


def measured_peak_flops(
    device: torch.device, dtype: torch.dtype = torch.float32, n: int = 512, repeats: int = 5
) -> float:
    """This device's achievable matmul FLOP/s, *measured*: best of ``repeats`` (n×n)@(n×n) products.

    2n³ FLOPs per product. Used as the denominator of MFU (model-FLOPs utilisation, Chowdhery et
    al. 2022, PaLM, arXiv:2204.02311, App. B) instead of a vendor's datasheet figure.
    """
    g = torch.Generator(device).manual_seed(0)  # a private generator: the training RNG is untouched
    a, b = (torch.randn(n, n, device=device, dtype=dtype, generator=g) for _ in range(2))
    best = float("inf")
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best
