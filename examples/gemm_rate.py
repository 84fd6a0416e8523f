"""Measure this GPU's bf16 (and FP8, where the GPU has it) GEMM rate at a training step's shapes, beside what
``minipar.perf.gemm`` models for them: the check of the planner's compute term on a real device.

    python examples/gemm_rate.py            # needs a CUDA GPU; prints one row per shape

Shapes: one large square GEMM, and the four weight GEMMs of a Llama 3 70B block on one TP rank (t = 8,
4,096 tokens: QKV, output projection, MLP up (gate and up together), MLP down; Megatron-LM's column/row
split). Each is timed with CUDA events, the median of 20 after 5 warm-ups. "of peak" divides by the
device preset's dense peak (989 TFLOP/s bf16, 1,979 FP8 on an H100 SXM); "waves" is the model's tile and
wave quantisation for that output shape, so measured / (peak · waves) is the GEMM efficiency the GPU
reaches on that shape in isolation (the planner's per-device efficiency, chosen on whole training runs,
also absorbs what a run adds around its GEMMs).
"""

from __future__ import annotations

import statistics
import sys

import torch

from minipar.perf.gemm import SMS, family, wave_efficiency
from minipar.perf.hardware import GPUS


def time_gemm(m: int, n: int, k: int, fp8: bool, reps: int = 20) -> float:
    """Median seconds of one (m×k)@(k×n) GEMM on the current GPU (bf16, or FP8 e4m3 via ``torch._scaled_mm``)."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if fp8:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        fn = lambda: torch._scaled_mm(a8, b8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
    else:
        fn = lambda: a @ b.t()  # noqa: E731
    return cuda_time(fn, reps)


def cuda_time(fn, reps: int = 20, warm: int = 5) -> float:
    """Median seconds of ``fn()`` on the current GPU: CUDA events around each of ``reps`` calls after ``warm``."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    return statistics.median(times)


def main() -> int:
    if not torch.cuda.is_available():
        print("error: no CUDA GPU here; run this on a GPU node", file=sys.stderr)
        return 3
    name = torch.cuda.get_device_name()
    fam = family(name.replace("NVIDIA ", ""))
    dev = GPUS.get((fam or "").lower())
    if dev is None:
        print(f"error: no minipar preset for {name!r}; presets: {sorted(GPUS)}", file=sys.stderr)
        return 2
    h, f, kv, t, T = 8192, 28672, 1024, 8, 4096
    shapes = [("square 8192³", 8192, 8192, 8192), ("70B QKV, t=8", T, (h + 2 * kv) // t, h),
              ("70B out-proj, t=8", T, h, h // t), ("70B MLP up, t=8", T, 2 * f // t, h),
              ("70B MLP down, t=8", T, h, f // t)]  # fmt: skip
    fp8_ok = hasattr(torch, "_scaled_mm") and torch.cuda.get_device_capability() >= (8, 9) and dev.fp8_flops
    print(f"{name}, torch {torch.__version__}; model: {dev.name}, eff_large {dev.gemm_efficiency:.2f}")
    print(f"{'shape':18} {'m':>5} {'n':>6} {'k':>5} {'dtype':>5} {'TFLOP/s':>8} {'of peak':>8} {'waves':>6} {'eff':>6}")
    for label, m, n, k in shapes:
        for fp8 in (False, True) if fp8_ok else (False,):
            sec = time_gemm(m, n, k, fp8)
            rate = 2 * m * n * k / sec
            peak = dev.fp8_flops if fp8 else dev.peak_flops
            waves = wave_efficiency(m, n, SMS[fam])
            print(f"{label:18} {m:5d} {n:6d} {k:5d} {'fp8' if fp8 else 'bf16':>5} {rate / 1e12:8.0f} "
                  f"{rate / peak:8.2f} {waves:6.2f} {rate / peak / waves:6.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
