"""Where the bytes go: weights, gradients, optimizer state and activations — counted and measured.

Three ways to get a number, from exact to real:

1. By formula, from the parameter count Ψ (ZeRO paper: Rajbhandari et al. 2020,
   arXiv:1910.02054, §3.1): fp32 AdamW keeps 4Ψ (weights) + 4Ψ (grads) + 8Ψ (two moments)
   = 16Ψ bytes; mixed-precision AdamW keeps 2Ψ (fp16/bf16 weights) + 2Ψ (grads) + 12Ψ (fp32
   master weights, momentum, variance) = 16Ψ bytes as well — mixed precision saves
   *activation* memory and time, not model-state memory.
2. By counting the tensors that exist: :func:`state_bytes` (parameters, ``.grad``, optimizer
   state) and :func:`saved_activation_bytes` (what autograd saved for backward, via
   ``torch.autograd.graph.saved_tensors_hooks``).
3. By measuring the process: :func:`measure_peak` runs a function and reports the peak memory
   above the level before it — ``torch.cuda.max_memory_allocated`` on a GPU; on CPU the peak
   resident set size (Linux ``VmHWM``, reset through ``/proc/self/clear_refs``). The CPU
   number includes allocator slack, so it is a little above the tensor count.
"""
from __future__ import annotations

import os
import re
from typing import Callable

import torch
import torch.nn as nn


def adam_bytes_formula(num_params: int, mixed_precision: bool = False) -> dict[str, int]:
    """Model-state bytes of AdamW training for ``num_params`` = Ψ (ZeRO §3.1).

    Returns ``{"params", "grads", "optimizer", "total"}`` in bytes: fp32 4Ψ/4Ψ/8Ψ; mixed precision
    2Ψ/2Ψ/12Ψ (K = 12: fp32 master copy, momentum, variance). Both total 16Ψ.
    """
    p = num_params
    d = dict(params=2 * p, grads=2 * p, optimizer=12 * p) if mixed_precision else dict(params=4 * p, grads=4 * p, optimizer=8 * p)
    d["total"] = sum(d.values())
    return d


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes held right now by parameters, their ``.grad`` and the optimizer's state tensors.

    Shared (tied) parameters are counted once. Returns ``{"params", "grads", "optimizer", "total"}``.
    """
    params = {id(p): p for p in model.parameters()}.values()
    out = dict(params=sum(_nbytes(p) for p in params),
               grads=sum(_nbytes(p.grad) for p in params if p.grad is not None), optimizer=0)
    if optimizer is not None:
        for st in optimizer.state.values():
            out["optimizer"] += sum(_nbytes(v) for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    out["total"] = out["params"] + out["grads"] + out["optimizer"]
    return out


def saved_activation_bytes(fn: Callable[[], object], exclude: nn.Module | None = None) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs (e.g. a forward pass).

    Each storage is counted once (views share it); parameters of ``exclude`` are not activations
    and are left out. Returns bytes.
    """
    skip = {p.untyped_storage().data_ptr() for p in exclude.parameters()} if exclude is not None else set()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def rss_bytes() -> int:
    """Resident set size of this process now, bytes (Linux; 0 elsewhere)."""
    return _proc_status_bytes("VmRSS") if os.path.exists("/proc/self/status") else 0


def measure_peak(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Run ``fn()`` and return its peak memory above the level before it, in bytes.

    GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``. CPU (Linux): the
    peak RSS (``VmHWM``) after resetting it with ``/proc/self/clear_refs``, minus the RSS before.
    Call it on a warmed-up step (the first step also allocates gradients and optimizer state).

    Raises:
        RuntimeError: on a CPU platform without ``/proc`` (not Linux).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    if not os.path.exists("/proc/self/clear_refs"):
        raise RuntimeError("measure_peak on CPU needs Linux /proc (VmHWM); use a GPU or Linux")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS ("high water mark") to the current RSS
    base = rss_bytes()
    fn()
    return max(0, _proc_status_bytes("VmHWM") - base)
