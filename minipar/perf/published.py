"""Published runs the performance model is checked against: a declared FIT set and a declared TEST set, per device.

- **Fit sets**, one per device, where that device's chosen constants were picked: A100, its large-GEMM
  efficiency (``GEMM_EFF_BY_DEVICE`` in :mod:`minipar.perf.hardware`; :func:`fit_gemm_efficiency` re-runs the
  choice) on Narayanan et al. 2021 (Megatron-LM, arXiv:2104.04473) Table 1, 10 rows, A100-80GB on Selene
  (:data:`NARAYANAN_TABLE1`); H100, for PyTorch stacks, the efficiency with the memory passes and the overlap
  cost (``MEM_PASSES``, ``OVERLAP_COST``; :func:`fit_h100_pytorch`, one declared grid) on MosaicML
  llm-foundry's single-node H100 rows at s = 2048 and 4096, 11 rows (:data:`minipar.perf.foundry.H100_FIT`).
- **Test sets** (:mod:`minipar.perf.runs`, :func:`test_sets`): rows no constant was chosen on. A100:
  MegaScale (Jiang et al. 2024, arXiv:2402.15627) Table 2, Table 3's baseline and Fig. 9; Narayanan Table 2;
  llm-foundry's A100 80GB rows at s = 2048. H100: llm-foundry's multi-node and long-sequence H100 rows and its Large
  Scale table (128-512 GPUs); Llama 3 (Grattafiori et al. 2024, arXiv:2407.21783) Table 4 (405B, GQA, SwiGLU, uneven
  pipeline chunks, context parallelism at 128K); torchtitan's ``docs/performance.md`` (Llama 3.1 8B-405B on 8-512
  power-capped 96 GB H100s: FSDP, TP, PP, Float8, a custom device: :mod:`minipar.perf.torchtitan`); Mixtral 8x22B with
  ep 8 and Llama 3 8B with ``recompute_layers`` 5 (:mod:`minipar.perf.mb_archive`); fms-fsdp 7B with HSDP, A100s and
  H100s (:mod:`minipar.perf.fms`); the rest :mod:`minipar.perf.runs` lists (NeMo's long-sequence table among them:
  :mod:`minipar.perf.nemo_long`).

Everything else the GEMM and attention terms use is sourced or ASSUMED, not fitted (:mod:`minipar.perf.gemm`).
Each row states its layout and where each setting comes from (the paper, the authors' scripts, or
an assumption). ``tests/test_perf_model.py`` prints the errors of both sets per device; lesson 07 and
the README quote them.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from minipar.perf.hardware import GPUS, Device, for_framework
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.shape import UNTIED_ROPE, ModelShape

MODELS = {  # Narayanan et al. 2021 Table 1 shapes; 175B = GPT-3; 7b/13b/70b: Llama-2's (GQA 8 kv heads on 70b, SwiGLU)
    "1.7b": ModelShape(24, 2304, 24),
    "3.6b": ModelShape(30, 3072, 32),
    "7.5b": ModelShape(36, 4096, 32),
    "18b": ModelShape(40, 6144, 48),
    "39b": ModelShape(48, 8192, 64),
    "76b": ModelShape(60, 10240, 80),
    "145b": ModelShape(80, 12288, 96),
    "175b": ModelShape(96, 12288, 96),
    "310b": ModelShape(96, 16384, 128),
    "530b": ModelShape(105, 20480, 128),
    "1t": ModelShape(128, 25600, 160),
    "7b": ModelShape(32, 4096, 32, 4096, 32000, False, None, 11008, True, **UNTIED_ROPE),
    "13b": ModelShape(40, 5120, 40, 4096, 32000, False, None, 13824, True, **UNTIED_ROPE),
    "70b": ModelShape(80, 8192, 64, 4096, 32000, False, 8, 28672, True, **UNTIED_ROPE),
}

# Narayanan et al. 2021, arXiv:2104.04473, Table 1 (weak scaling on Selene, A100-80GB, s = 2048,
# V = 51200, mixed precision, full activation recomputation): params (B), heads, hidden, layers,
# TP t, PP p, GPUs n, batch B, achieved TFLOP/s per GPU (their eq. 3 FLOPs); then what the table
# does not give, from the authors' own launch script (Megatron-LM, examples/sc21/run_table_1.sh):
# micro-batch size, interleaving v (layers per stage ÷ --num-layers-per-virtual-pipeline-stage), and
# the DDP ("torch": PyTorch DDP, gradient all-reduce overlapped with the backward; "local": not).
NARAYANAN_TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1, "torch"),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1, "torch"),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1, "torch"),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1, "torch"),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1, "local"),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3, "local"),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2, "local"),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2, "local"),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3, "local"),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1, "local"),
]


def narayanan_row(row, dev: Device | None = None) -> tuple[Estimate, float]:
    """The model's estimate for one Table 1 row and the published TFLOP/s per GPU.

    From the paper (§5.1): the interleaved schedule with the scatter/gather optimization, full
    recomputation, V = 51,200, s = 2048. From the authors' script: micro-batch, v, DDP overlap.
    Assumed (stated nowhere): no ZeRO, no sequence parallelism (2021), fp32 gradient all-reduce.
    """
    _, a, h, l, t, p, n, B, pub, mb, v, ddp = row
    lay = Layout(
        dp=n // (t * p),
        tp=t,
        pp=p,
        micro_batch=mb,
        v=v,
        recompute="full",
        scatter_gather=True,
        overlap=frozenset({"dp"}) if ddp == "torch" else frozenset(),
    )
    return estimate(ModelShape(l, h, a), dev or GPUS["a100"], lay, B), pub


def errors(rows) -> list[float]:
    """Relative errors (model / published − 1) of ``[(estimate, metric, published), ...]`` rows."""
    return [getattr(e, metric) / pub - 1 for e, metric, pub in rows]


def fit_set(dev: Device | None = None) -> list[tuple[Estimate, str, float]]:
    """The fit set's rows as ``(estimate, "tflops_per_gpu", published)``."""
    return [(*narayanan_row(r, dev)[:1], "tflops_per_gpu", r[8]) for r in NARAYANAN_TABLE1]


def summary(errs: list[float]) -> dict:
    """``{"median": median |error|, "worst": the error largest in size, "within_15": rows within 15 %, "rows": n}``."""
    return {
        "median": statistics.median(abs(x) for x in errs),
        "worst": max(errs, key=abs),
        "within_15": sum(abs(x) <= 0.15 for x in errs),
        "rows": len(errs),
    }


def fit_gemm_efficiency(device: str = "a100", grid=None, framework: str = "pytorch") -> dict[float, float]:
    """The choice of a device's large-GEMM efficiency, re-run: median |error| on its fit set (A100: Narayanan
    Table 1; H100: llm-foundry's single-node rows; H100 with ``framework`` "megatron": NeMo 24.07's table,
    :data:`minipar.perf.nemo.NEMO_FIT`) for each candidate (default grid: 0.60-0.80 for the A100, 0.40-0.74
    for the H100 at its chosen memory passes and overlap cost, :func:`fit_h100_pytorch`; 0.50-0.80 for the H100
    under Megatron-Core; steps of 0.02)."""
    if device == "h100" and framework == "megatron":
        from minipar.perf.nemo import NEMO_FIT, nemo_rows

        grid = grid or tuple(x / 100 for x in range(50, 82, 2))
        at = lambda g: nemo_rows(replace(for_framework(GPUS["h100"], "megatron"), gemm_efficiency=g), NEMO_FIT)  # noqa: E731
        return {g: summary([e.mfu / p - 1 for _, e, _, p in at(g)])["median"] for g in grid}
    if device == "h100":  # the joint choice's slice at the chosen memory passes and overlap cost
        h = GPUS["h100"]
        got = fit_h100_pytorch(((h.mem_passes,), (h.overlap_cost,), grid or FIT_GRID_H100[2]))
        return {g: err for (_, _, g), err in got.items()}
    grid = grid or tuple(x / 100 for x in range(60, 82, 2))
    return {g: summary(errors(fit_set(replace(GPUS["a100"], gemm_efficiency=g))))["median"] for g in grid}


FIT_GRID_H100 = (  # the declared grid of fit_h100_pytorch: memory passes, overlap cost, large-GEMM efficiency
    (2.0, 3.0, 4.0, 5.0, 6.0),
    (0.0, 0.25, 0.5, 0.75, 1.0),
    tuple(x / 100 for x in range(40, 76, 2)),  # at most 0.75: the isolated bf16 GEMM rate measured on an H100 SXM
)


def fit_h100_pytorch(grid=FIT_GRID_H100) -> dict[tuple[float, float, float], float]:
    """The H100's three PyTorch-stack constants, chosen together on its fit set (llm-foundry's single-node H100
    rows, :data:`minipar.perf.foundry.H100_FIT`): median |error| for each ``(mem_passes, overlap_cost,
    gemm_efficiency)`` of ``grid`` (:data:`FIT_GRID_H100`, 450 points, about 3 s); the chosen triple,
    :data:`minipar.perf.hardware.MEM_PASSES` / ``OVERLAP_COST`` / ``GEMM_EFF_BY_DEVICE``, is its minimum."""
    from minipar.perf.foundry import H100_FIT, foundry_row

    out = {}
    for passes in grid[0]:
        for cost in grid[1]:
            for g in grid[2]:
                dev = replace(GPUS["h100"], mem_passes=passes, overlap_cost=cost, gemm_efficiency=g)
                out[passes, cost, g] = summary([foundry_row(r, dev).mfu / (r[3] / 100) - 1 for r in H100_FIT])["median"]
    return out


def fit_sets() -> dict[str, list[tuple[str, Estimate, str, float]]]:
    """The fit sets, ``{"A100": rows, "H100": rows, "H100 megatron": rows}``, each row ``(label, estimate, metric,
    published)``: the third is Megatron-Core's (``--framework megatron``), NeMo 24.07's H100 table, the row that chose
    the host's floor under a MoE block (:data:`minipar.perf.mb_archive.MOE_HOST_FIT`) and the one that chose the share
    of the all-to-all its overlap hides (:data:`minipar.perf.moe_zoo.EP_OVERLAP_FIT`), and the one that chose what CUDA
    graphs do to that floor (:data:`minipar.perf.mb_cards.GRAPHS_FIT`)."""
    from minipar.perf.foundry import H100_FIT, foundry_rows
    from minipar.perf.mb_archive import MOE_HOST_FIT
    from minipar.perf.mb_cards import GRAPHS_FIT, card_rows
    from minipar.perf.moe_zoo import EP_OVERLAP_FIT, zoo_rows
    from minipar.perf.nemo import NEMO_FIT, nemo_rows

    lab = lambda r: f"Narayanan T1 {r[0]:6.1f}B t{r[4]} p{r[5]:<2d} {r[6]:4d} A100"  # noqa: E731
    a100 = [(lab(r), *x) for r, x in zip(NARAYANAN_TABLE1, fit_set())]
    megatron = nemo_rows(rows=NEMO_FIT + MOE_HOST_FIT) + zoo_rows(rows=EP_OVERLAP_FIT) + card_rows(rows=GRAPHS_FIT)
    return {"A100": a100, "H100": foundry_rows(H100_FIT, "h100"), "H100 megatron": megatron}


def test_sets() -> dict[str, list[tuple[str, Estimate, str, float]]]:
    """The test set (:func:`minipar.perf.runs.out_of_sample`) split by device: ``{"A100": rows, "H100": rows}``."""
    from minipar.perf.runs import out_of_sample

    rows = out_of_sample()
    return {d: [r for r in rows if ("H100" in r[0]) == (d == "H100")] for d in ("A100", "H100")}
