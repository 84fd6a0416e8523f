"""Will the run fit in this machine's memory? Estimated before any rank starts, refused with the setting that fits.

A hostile or careless setting (``--block-size 46512 --batch-size 4``, ``--n-layer 100000``, ``--dp 64`` on a
laptop) would otherwise start its ranks and grow until the machine swaps or the kernel kills a rank.
:func:`check_memory` counts what each rank of this machine will hold, from the model's shape alone (no
model is built, so the estimate itself costs nothing), and compares the sum with the memory available now:

- **state**: weights, gradients and AdamW's two moments, 4 + 4 + 8 = 16 bytes per parameter in fp32
  (+ 2 for autocast's bf16 copies), the moments divided over dp with ``--zero`` ≥ 1, all of it with
  ``--zero 3`` (Rajbhandari et al. 2019, arXiv:1910.02054, §5); a rank holds ⌈L/pp⌉ blocks, split by tp,
  and the embedding and head;
- **activations**: :func:`minipar.model.memory.activation_bytes_formula` (checked against measured saved
  tensors in lesson 00) for one micro-batch of ``batch/(dp·microbatches)`` sequences of ``block/cp`` tokens,
  times the micro-batches a schedule keeps in flight (GPipe all, 1F1B up to pp), only the block inputs
  with ``--recompute full``;
- **runtime**: the interpreter, torch and the communication buffers of one rank (:data:`RANK_OVERHEAD`).

It is an estimate for refusing what cannot fit, not a planner: it errs on the large side (the tp split is
applied only to the sharded activations, the embedding is not split), and the limit is 90 % of what the
system reports available (``MemAvailable`` in ``/proc/meminfo``), so a run it lets through can still be
tight. CUDA runs are not checked here (the GPU's memory is the planner's, ``python -m minipar.plan``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from types import SimpleNamespace

from minipar.errors import ConfigError
from minipar.model.memory import activation_bytes_formula

RANK_OVERHEAD = 400 * 2**20  # bytes: a rank's interpreter + torch + gloo buffers (about 330 MiB measured, 2-core CPU)
LIMIT = 0.9  # of the available memory


def available_bytes() -> int | None:
    """Memory the system can give now (``MemAvailable``), in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def rank_bytes(cfg, dp: int) -> dict[str, int]:
    """Bytes one rank of the run ``cfg`` (a :class:`~minipar.job.config.TrainConfig`) holds at its peak, with
    ``dp`` data-parallel ranks (the layout's, which ``cfg.dp`` may leave to the world size).

    Returns ``{"state", "activations", "runtime", "total"}``; the vocabulary is taken as 256 (bytes),
    an upper bound for the character corpus.
    """
    h, L, V, s = cfg.d_model, cfg.n_layer, 256, cfg.block_size
    mlp = 8 * h * h + 5 * h
    block = 4 * h * h + 4 * h + 4 * h + (cfg.moe_experts * mlp + h * cfg.moe_experts if cfg.moe_experts else mlp)
    params = math.ceil(L / cfg.pp) * block / cfg.tp + 2 * V * h + s * h
    per_param = 16 + (2 if cfg.dtype != "fp32" else 0)
    if cfg.zero >= 3:
        per_param /= dp
    elif cfg.zero >= 1:
        per_param -= 8 - 8 / dp
    micro = max(1, cfg.batch_size // (dp * cfg.microbatches))
    gpt = SimpleNamespace(  # one rank's slice of the model, as activation_bytes_formula reads a GPTConfig
        vocab_size=V, block_size=max(1, s // cfg.cp), n_layer=math.ceil(L / cfg.pp), n_head=cfg.n_head, d_model=h
    )
    act = activation_bytes_formula(gpt, micro)
    per_layer = act["per_layer"] * (4 + 12 / cfg.tp) / 16
    if cfg.recompute == "full":
        per_layer = 4 * micro * gpt.block_size * h
    inflight = cfg.microbatches if cfg.schedule == "gpipe" else min(cfg.pp, cfg.microbatches)
    activations = inflight * (gpt.n_layer * per_layer + act["embed_head"]) + act["per_layer"]
    state = int(params * per_param)
    return dict(
        state=state, activations=int(activations), runtime=RANK_OVERHEAD, total=int(state + activations + RANK_OVERHEAD)
    )


def _largest(cfg, dp: int, flag: str, ranks: int, limit: float, step: int, low: int) -> int | None:
    """The largest value of ``flag`` (a multiple of ``step``, ≥ ``low``) with which ``cfg`` fits, or None."""
    name = flag[2:].replace("-", "_")
    hi = getattr(cfg, name)
    if ranks * rank_bytes(dataclasses.replace(cfg, **{name: low}), dp)["total"] > limit:
        return None
    lo = low
    while hi - lo > step:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2 // step * step
        if mid <= lo:
            break
        fits = ranks * rank_bytes(dataclasses.replace(cfg, **{name: mid}), dp)["total"] <= limit
        lo, hi = (mid, hi) if fits else (lo, mid)
    return lo


def check_memory(cfg, dp: int, world_size: int, device_type: str = "cpu") -> None:
    """Raise :class:`ConfigError` when the ranks of this machine would need more than 90 % of its free memory.

    ``world_size`` ranks run here, or ``LOCAL_WORLD_SIZE`` of them under torchrun. The message names the
    estimate, what is available and the largest ``--batch-size``, ``--block-size`` or ``--n-layer`` that fits.
    """
    avail = available_bytes()
    if device_type == "cuda" or not avail:
        return
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    need = rank_bytes(cfg, dp)
    limit = LIMIT * avail
    if ranks * need["total"] <= limit:
        return
    fixes = []
    unit = dp * cfg.microbatches
    for flag, step, low in (("--batch-size", unit, unit), ("--block-size", 1, 1), ("--n-layer", 1, cfg.pp)):
        best = _largest(cfg, dp, flag, ranks, limit, step, low)
        if best is not None and best < getattr(cfg, flag[2:].replace("-", "_")):
            fixes.append(f"{flag} {best} or less")
    gib = 2**30
    raise ConfigError(
        f"this run needs about {ranks * need['total'] / gib:.1f} GiB of memory ({ranks} rank(s) × "
        f"{need['total'] / gib:.1f} GiB: {need['state'] / gib:.1f} state, {need['activations'] / gib:.1f} "
        f"activations) but {avail / gib:.1f} GiB is available; use "
        + (", or ".join(fixes) if fixes else "fewer ranks or a smaller model")
        + " (--microbatches and --recompute full also cut activations)"
    )
