"""NeMo's long-sequence table: Llama 2 7B in FP8 on 4 to 1,024 H100s at 4K to 1M tokens, context parallelism (TEST).

Source: github.com/NVIDIA/NeMo, ``docs/source/performance/performance_long_sequence.md`` at b39e679 (2024-10-21),
"LLAMA2-7B (FP8) - H100": container NeMo24.03.01.framework, DGX-H100. GIVEN per row: the sequence ("SeqLen (K)",
4 ... 1,024; K read as 1,024 tokens), the GPUs, the batch size (4M tokens per step in every row), TP, PP, DP, CP and
TFLOP/s per GPU of the run "with CP" (its CP is 1 up to 16K). The "without CP" column is left out: its layouts are
not published ("the most performant model- and data-parallel configurations without CP"). The shape: Llama 2 7B
(:data:`minipar.perf.nemo_shapes.SHAPES`). Added 2026-11-28, after every fit was chosen.

ASSUMED: the TFLOP/s are NeMo's own count, :func:`nemo_flops_per_token` (the ``llama2`` formula of NeMo's
``nemo/utils/flops_formulas.py``, added 2025-01; NeMo's auto-configurator counts a GPT block's attention the same way,
``calculate_tflops``: 4·B·s²·h per block forward, the full s² square). Checked on the 4K row: its 768 TFLOP/s are 16,665
tokens/s per GPU under this count, 1.6 % below NeMo 24.07's Llama 2 7B FP8 row (16,934 on 8 GPUs,
:data:`minipar.perf.nemo.NEMO_FIT`); under the causal half of the square (Megatron-LM's count today) they would be
17,917, 5.8 % above a container four months newer. As for NeMo 24.07 (:mod:`minipar.perf.nemo`): micro-batch 1, no
recomputation, the distributed optimizer (ZeRO-1), bf16 gradient reduction, TP communication overlapped with sequence
parallelism, no interleaving (the PP 2 row), the unfused loss, the H100 preset's links.

The attention kernel: FlashAttention-2 (flash-attn), GIVEN by NeMo-Framework-Launcher at tag 24.05 (2024-05-28), the
first release whose default container is the table's (``launcher_scripts/conf/config.yaml``: ``container:
nvcr.io/nvidia/nemo:24.03.01.framework`` and, under ``env_vars``, ``NVTE_FUSED_ATTN: 0 # Disable cudnn FA until we've
tested it more``; the line came in 562dcb4, 2024-02-13, and went in 04b8d09, 2024-08-29, "enable fused attention": at
tag 24.09, whose container is the fit set's NeMo 24.07, it is gone). With it Transformer Engine runs flash-attn,
context parallelism included: its choice of cuDNN's FusedAttention on an H100 applies only when both backends are on
(``transformer_engine/pytorch/attention.py`` at v1.4, ``DotProductAttention.forward``: ``NVTE_FUSED_ATTN`` read at lines
2427-2430, "Select FusedAttention on sm90 and FlashAttention on others for performance" at 2834-2839; v1.3 and v1.5
alike, the container's own version not published). The attention core stays bf16 (FP8 attention came in TE v1.6). So
the rows run at the "flash" kernel's measured rate (:data:`minipar.perf.gemm.ATTN_EFF_H100`): -14 … +3 %, every row
within 15 % (printed by ``tests/test_perf_model.py``). READ 2026-11-29, AFTER the errors were seen: until then the rows
ran at Megatron-Core's kernel of today ("cudnn", a 2026 measurement) and read -4 and +3 % at 4K and 8K, +22 to +72 %
from 16K up, the more the larger the attention core's share (39 % of the FLOPs at 16K, 98 % at 1M), labelled
``MISS:attn``. :func:`what_if` computes that reading and the other one then considered, the count as the causal half
at cuDNN's rate (-2 to -13 %).
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.flops import megatron_flops_per_token
from minipar.perf.hardware import GPUS, Device, for_framework
from minipar.perf.layout import Estimate
from minipar.perf.nemo import nemo_rows, shape
from minipar.perf.shape import ModelShape

# (sequence in K tokens, GPUs, batch, TP, PP, DP, CP, TFLOP/s per GPU with CP): "LLAMA2-7B (FP8) - H100"
LONG = [
    (4, 4, 1024, 1, 1, 4, 1, 768),
    (8, 8, 512, 1, 2, 4, 1, 730),
    (16, 16, 256, 2, 1, 8, 1, 660),
    (32, 32, 128, 2, 1, 8, 2, 610),
    (64, 64, 64, 4, 1, 8, 2, 574),
    (128, 128, 32, 4, 1, 8, 4, 555),
    (256, 256, 16, 4, 1, 8, 8, 549),
    (512, 512, 8, 8, 1, 4, 16, 549),
    (1024, 1024, 4, 8, 1, 4, 32, 536),
]


def nemo_flops_per_token(model: ModelShape, causal_half: bool = False) -> float:
    """NeMo's training FLOPs per token for a Llama 2 shape (``flops_formulas.llama2``): l·h²·(12 + 12·g/a + 18·f/h
    + 12·s/h + 6·V/(l·h)), the attention core as the full s² square: Megatron-LM's count
    (:func:`~minipar.perf.flops.megatron_flops_per_token`, the causal half) + 6·l·h·s; ``causal_half``: that count
    itself (what-if (b))."""
    half = megatron_flops_per_token(model)
    return half if causal_half else half + 6 * model.layers * model.hidden * model.seq


def _rows(causal_half: bool = False) -> list[tuple]:
    """The table as :func:`minipar.perf.nemo.nemo_rows` reads it: TFLOP/s turned into tokens/s per GPU."""
    out = []
    for k, n, gb, tp, pp, dp, cp, tflops in LONG:
        assert tp * pp * dp * cp == n, (k, n)
        name = f"Llama2-7B s={k * 1024}"
        tps = tflops * 1e12 / nemo_flops_per_token(shape(name), causal_half)
        out.append(("NeMo 24.03", name, n, (tp, pp, cp, 1, 1), 1, gb, None, True, "tps", tps))
    return out


def nemo_long_rows(dev: Device | None = None, causal_half: bool = False) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row on ``dev`` (default :func:`device`), read by
    :func:`minipar.perf.nemo.nemo_rows` as NVIDIA's other Megatron-Core rows."""
    return nemo_rows(dev or device(), _rows(causal_half))


def device(kernel: str = "flash") -> Device:
    """The H100 preset with Megatron-Core's efficiency and, as the runs had it, FlashAttention-2 (module doc)."""
    return replace(for_framework(GPUS["h100"], "megatron"), attention=kernel)


def what_if() -> dict[str, list[float]]:
    """The module doc's other readings, errors per row (model / published − 1): ``"cudnn"``, the attention core at
    cuDNN's measured rate (Megatron-Core's kernel today; the model until 2026-11-29); ``"causal_half"``, the published
    TFLOP/s read as the causal-half count, at cuDNN's rate."""
    return {
        "cudnn": [e.mfu / pub - 1 for _, e, _, pub in nemo_long_rows(device("cudnn"))],
        "causal_half": [e.mfu / pub - 1 for _, e, _, pub in nemo_long_rows(device("cudnn"), causal_half=True)],
    }
