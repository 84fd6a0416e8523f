"""NeMo's long-sequence table: Llama 2 7B in FP8 on 4 to 1,024 H100s at 4K to 1M tokens, context parallelism (TEST).

Source: github.com/NVIDIA/NeMo, ``docs/source/performance/performance_long_sequence.md`` at b39e679 (2024-10-21),
"LLAMA2-7B (FP8) - H100": container NeMo24.03.01.framework, DGX-H100. GIVEN per row: the sequence ("SeqLen (K)",
4 ... 1,024; K read as 1,024 tokens), the GPUs, the batch size (4M tokens per step in every row), TP, PP, DP, CP and
TFLOP/s per GPU of the run "with CP" (its CP is 1 up to 16K). The "without CP" column is left out: its layouts are
not published ("the most performant model- and data-parallel configurations without CP"). The shape: Llama 2 7B
(:data:`minipar.perf.nemo.SHAPES`). Added 2026-11-28, after every fit was chosen.

ASSUMED: the TFLOP/s are NeMo's own count, :func:`nemo_flops_per_token` (the ``llama2`` formula of NeMo's
``nemo/utils/flops_formulas.py``, added 2025-01; NeMo's auto-configurator counts a GPT block's attention the same way,
``calculate_tflops``: 4·B·s²·h per block forward, the full s² square). Checked on the 4K row: its 768 TFLOP/s are 16,665
tokens/s per GPU under this count, 1.6 % below NeMo 24.07's Llama 2 7B FP8 row (16,934 on 8 GPUs,
:data:`minipar.perf.nemo.NEMO_FIT`); under the causal half of the square (Megatron-LM's count today) they would be
17,917, 5.8 % above a container four months newer. The attention kernel: Transformer Engine picks its FusedAttention
(cuDNN) over flash-attn on an H100 when both can run, context parallelism included (TE v1.4 of 2024-03-07, ASSUMED the
container's; v1.3 and v1.5 choose the same; ``DotProductAttention.forward``: "Select FusedAttention on sm90 and
FlashAttention on others for performance"), so the rows run at Megatron-Core's kernel ("cudnn",
:data:`minipar.perf.gemm.ATTN_EFF_H100`). As for NeMo 24.07 (:mod:`minipar.perf.nemo`): micro-batch 1, no recomputation,
the distributed optimizer (ZeRO-1), bf16 gradient reduction, TP communication overlapped with sequence parallelism, no
interleaving (the PP 2 row), the unfused loss, the H100 preset's links.

Known misses, labelled AFTER their errors were seen (``MISS:attn``): from 16K tokens up the model reads +22 to +72 %,
optimistic, the more the larger the attention core's share (39 % of the FLOPs at 16K, 98 % at 1M). The 4K and 8K
rows read -4 and +3 %. Two readings fit every row within 15 %, and neither is sourced: (a) the attention core ran at
FlashAttention-2's measured rate (``--attention-kernel flash``): 16K and up -3 to +3 %, 4K and 8K -14 and -13 %;
(b) the count is the causal half, at cuDNN's rate: all nine -2 to -14 %. The "cudnn" rates are a 2026 measurement
(PyTorch 2.11's cuDNN); a March 2024 container's kernel at 16K-1M tokens was not measured. :func:`what_if` computes
both readings (``tests/test_perf_model.py`` checks the figures above).
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.hardware import GPUS, Device, for_framework
from minipar.perf.layout import Estimate, ModelShape
from minipar.perf.nemo import LONG_SEQ_SEEN, megatron_flops_per_token, nemo_rows, shape

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
SEEN = LONG_SEQ_SEEN // 1024  # MISS:attn from this many K tokens up (module doc; nemo.miss_reason labels them)


def nemo_flops_per_token(model: ModelShape, causal_half: bool = False) -> float:
    """NeMo's training FLOPs per token for a Llama 2 shape (``flops_formulas.llama2``): l·h²·(12 + 12·g/a + 18·f/h
    + 12·s/h + 6·V/(l·h)), the attention core as the full s² square: Megatron-LM's count
    (:func:`~minipar.perf.nemo.megatron_flops_per_token`, the causal half) + 6·l·h·s; ``causal_half``: that count
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
    """``(label, estimate, "mfu", published)`` per row on ``dev`` (default the H100 preset with Megatron-Core's
    efficiency and kernel), read by :func:`minipar.perf.nemo.nemo_rows` as NVIDIA's other Megatron-Core rows; rows
    from :data:`SEEN` K tokens up labelled ``MISS:attn`` (module doc) by :func:`minipar.perf.nemo.miss_reason`."""
    return nemo_rows(dev or for_framework(GPUS["h100"], "megatron"), _rows(causal_half))


def what_if() -> dict[str, list[float]]:
    """The module doc's two readings, errors per row (model / published − 1): ``"flash"``, the attention core at
    FlashAttention-2's measured rate; ``"causal_half"``, the published TFLOP/s read as the causal-half count."""
    flash = replace(for_framework(GPUS["h100"], "megatron"), attention="flash")
    return {
        "flash": [e.mfu / pub - 1 for _, e, _, pub in nemo_long_rows(flash)],
        "causal_half": [e.mfu / pub - 1 for _, e, _, pub in nemo_long_rows(causal_half=True)],
    }
