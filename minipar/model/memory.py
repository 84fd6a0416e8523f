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
    d = (
        dict(params=2 * p, grads=2 * p, optimizer=12 * p)
        if mixed_precision
        else dict(params=4 * p, grads=4 * p, optimizer=8 * p)
    )
    d["total"] = sum(d.values())
    return d


def _nbytes(t: torch.Tensor) -> int:
    t = t.to_local() if hasattr(t, "to_local") else t  # a DTensor (PyTorch's fully_shard, TP): its local piece
    return t.numel() * t.element_size()


def state_bytes(model: nn.Module | None, optimizer: torch.optim.Optimizer | None = None) -> dict[str, int]:
    """Bytes held on this rank right now by parameters, their ``.grad`` and the optimizer's state tensors.

    Shards count as what this rank holds: a DTensor (PyTorch's ``fully_shard``, DTensor TP) by its local
    piece; minipar's per-parameter ``fully_shard`` and TP layers hold only their shard as the parameter
    anyway. A ZeRO optimizer whose flat shards live outside the model (``minipar.zero.zero``: it has
    ``held_bytes()``) answers for itself. Shared (tied) parameters are counted once; ``model=None``
    counts the optimizer alone. Optimizer scalars (AdamW's ``step``) are left out.
    Returns ``{"params", "grads", "optimizer", "total"}``.
    """
    if hasattr(optimizer, "held_bytes"):
        return optimizer.held_bytes()
    params = {id(p): p for p in (model.parameters() if model is not None else ())}.values()
    out = dict(
        params=sum(_nbytes(p) for p in params),
        grads=sum(_nbytes(p.grad) for p in params if p.grad is not None),
        optimizer=0,
    )
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


class SavedTensorMeter:
    """Live and peak bytes of the tensors autograd holds for backward, counted exactly (lesson 08).

    ``with SavedTensorMeter(exclude=model) as m: <forward + backward ...>`` then ``m.peak`` (bytes).
    Each saved tensor is wrapped at pack time; when autograd frees it (after its backward, or when
    the graph is dropped) the wrapper dies and its storage's bytes leave ``m.live``. Storages are
    counted once however many views are saved; parameters of ``exclude`` are not counted. Tensors
    saved by a recomputation *during* backward are counted too, so ``peak`` is the real high-water
    mark of a step with checkpointing. Deterministic (CPython frees on the last reference), so it
    may be printed exactly — unlike RSS.
    """

    def __init__(self, exclude: nn.Module | None = None):
        self.skip = {p.untyped_storage().data_ptr() for p in exclude.parameters()} if exclude is not None else set()
        self.refs: dict[int, list[int]] = {}  # storage ptr -> [wrappers alive, nbytes]
        self.live = self.peak = 0
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    class _Held:
        __slots__ = ("t", "ptr", "meter")

        def __init__(self, meter: "SavedTensorMeter", t: torch.Tensor, ptr: int):
            self.t, self.ptr, self.meter = t, ptr, meter

        def __del__(self):
            m, r = self.meter, self.meter.refs[self.ptr]
            r[0] -= 1
            if r[0] == 0:
                m.live -= r[1]
                del m.refs[self.ptr]

    def _pack(self, t: torch.Tensor):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in self.skip or t.device.type == "meta":
            return t
        r = self.refs.setdefault(ptr, [0, st.nbytes()])
        if r[0] == 0:
            self.live += r[1]
            self.peak = max(self.peak, self.live)
        r[0] += 1
        return SavedTensorMeter._Held(self, t, ptr)

    @staticmethod
    def _unpack(h):
        return h.t if isinstance(h, SavedTensorMeter._Held) else h

    def __enter__(self) -> "SavedTensorMeter":
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)


def _proc_status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def rss_bytes() -> int:
    """Resident set size of this process now, bytes (Linux; 0 elsewhere)."""
    return _proc_status_bytes("VmRSS") if os.path.exists("/proc/self/status") else 0


def release_freed_memory() -> bool:
    """Make glibc ``malloc`` hand every freed block of 64 KiB or more back to the OS at once.

    By default glibc keeps freed blocks (its mmap threshold adapts up to 32 MiB) in the heap for
    reuse, so after one training step the resident set stops growing and a peak-RSS measurement
    of the next step reads ~0. ``mallopt(M_MMAP_THRESHOLD, 64 KiB)`` makes every large block
    ``mmap``-ed and ``munmap``-ed, so RSS follows tensor lifetimes — at the price of page faults
    (steps get slower: measure time and memory in separate runs). Affects the whole process and
    cannot be undone: call it in a process started for the measurement (e.g. by
    ``minipar.launch``). A GPU needs none of this: its allocator counts tensor bytes.

    Returns True where it took effect (Linux with glibc), False elsewhere.
    """
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    return bool(libc.mallopt(-3, 64 * 1024))  # M_MMAP_THRESHOLD = -3 in <malloc.h>


def measure_peak(fn: Callable[[], object], device: torch.device | str = "cpu") -> int:
    """Run ``fn()`` and return its peak memory above the level before it, in bytes.

    GPU: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``. CPU (Linux): the
    peak RSS (``VmHWM``) after resetting it with ``/proc/self/clear_refs``, minus the RSS before.
    Call it on a warmed-up step (the first step also allocates gradients and optimizer state).
    On CPU, call :func:`release_freed_memory` first (once per process): otherwise glibc reuses
    the blocks a warm-up step freed without the RSS growing, and the peak reads ~0.

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


def activation_bytes_formula(cfg, batch_size: int, seq_len: int | None = None) -> dict[str, int]:
    """Bytes autograd saves for backward in one fp32 forward of :class:`minipar.model.gpt.GPT`.

    ``cfg`` is a ``GPTConfig``; b = ``batch_size``, s = ``seq_len`` (default ``cfg.block_size``),
    h = ``d_model``, a = ``n_head``, V = ``vocab_size``, L = ``n_layer``. Per block, counted as in
    Korthikanti et al. 2022 (arXiv:2205.05198, §4.1, which finds 34·sbh + 5·a·s²·b bytes per
    layer for fp16 activations with dropout), but for our model: 16·sbh fp32 elements, i.e.
    64·sbh bytes —

    - attention 6·sbh: ``ln_1`` output (input of ``qkv``), q, k, v (3·sbh), the attention
      output (input of ``proj``; the CPU kernel's output layout makes the reshape a view);
    - MLP 9·sbh: ``fc`` input, GELU input (4·sbh), ``proj`` input (4·sbh);
    - LayerNorm 2·sbh: the inputs of ``ln_1`` and ``ln_2`` (the residual stream);

    plus 4·4·bs for the two LayerNorms' mean and 1/std and 4·a·bs for the attention's
    log-sum-exp. Korthikanti's other terms are absent here: no dropout masks (dropout = 0), and
    ``scaled_dot_product_attention`` (flash / memory-efficient kernels) recomputes the (s × s)
    score matrix in backward instead of storing it, so there is no 5·a·s²·b term.
    Outside the blocks: the token ids and targets (8·bs each, int64), the positions (8·s),
    ``ln_f`` input and stats, the head's input (4·sbh) and the log-softmax of the logits (4·bsV),
    and the loss's 4-byte total weight.

    Returns ``{"per_layer", "layers", "embed_head", "total"}`` in bytes. Exact for fp32 on CPU
    (checked against :func:`saved_activation_bytes` in ``tests/test_lesson00_memory.py``); under
    bf16 autocast the matmul inputs are bf16 and autocast's bf16 weight copies are saved too,
    so count those with :func:`saved_activation_bytes` instead.
    """
    b, s = batch_size, cfg.block_size if seq_len is None else seq_len
    h, a, V, L = cfg.d_model, cfg.n_head, cfg.vocab_size, cfg.n_layer
    per_layer = 4 * 16 * s * b * h + 4 * 4 * b * s + 4 * a * b * s
    embed_head = 8 * b * s + 8 * s + 4 * 2 * s * b * h + 4 * 2 * b * s + 4 * b * s * V + 8 * b * s + 4
    return dict(per_layer=per_layer, layers=L * per_layer, embed_head=embed_head, total=L * per_layer + embed_head)


def tensor_memory_tracker(model: nn.Module, optimizer: torch.optim.Optimizer):
    """PyTorch's ``MemTracker`` (``torch.distributed._tools.mem_tracker``) attached to ``model`` and its
    optimizer (a wrapper's inner ``.optimizer``, as ZeRO's, is used): inside ``with tracker:`` it sees every
    tensor allocation and free through a dispatch mode, so ``tracker.get_tracker_snapshot("peak")`` is an
    exact count of live tensor bytes (activations and temporaries included), the CPU analogue of
    ``torch.cuda.max_memory_allocated``. Its warnings about parameters whose ``.grad`` is None are silenced."""
    import warnings

    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tracker.track_external(model, getattr(optimizer, "optimizer", optimizer))
    return tracker
