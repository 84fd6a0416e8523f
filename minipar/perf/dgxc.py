"""NVIDIA's DGX Cloud benchmarking recipes: Llama 3.1 8B, 70B and 405B on 8 to 2,304 H100s, bf16 and FP8 (TEST rows).

Source: github.com/NVIDIA/dgxc-benchmarking, tag v25.01 (143b90d), ``llama3.1/README_8b.md``, ``README_70b.md`` and
``README_405b.md`` ("Expected Performance"), each run in the ``nvcr.io/nvidia/nemo:24.09`` container (NeMo Launcher,
Megatron-Core with Transformer Engine: ``--framework megatron``). Added 2026-11-27, after the fits were chosen; a
release and a repository other than the NeMo 24.07 table the Megatron-Core efficiency was chosen on
(:mod:`minipar.perf.nemo`), and the only Megatron-Core rows in bf16.

GIVEN per table: TP, PP, CP, VP, MBS and GA; the global batch per GPU count (8B: 128 per node; 70B: 16 per node;
405B: 252, 504, 1,008 at 576, 1,152, 2,304 GPUs); the sequence, 8,192 (the READMEs' FLOP counts); the training step
time in seconds, the last step of a 50- or 100-step run, bf16 and FP8, on DGX H100 (8 GPUs per node); the shapes of
Llama 3.1 (Llama 3's); the tokenizer: Llama 3's (V = 128,256) for 8B and 70B, "GPT2BPETokenizer as a proxy" for 405B
(V = 50,257, padded as Megatron pads it to a multiple of 128 × TP: 51,200, ASSUMED). The 405B's proxy configurations
(fewer layers on 32-192 GPUs) are left out.

ASSUMED as for NeMo 24.07 (:mod:`minipar.perf.nemo`): no recomputation, the distributed optimizer (ZeRO-1), bf16
gradient reduction, TP communication overlapped for TP > 1, FP8 with delayed scaling, Megatron-Core's unfused loss,
the H100 preset's links (NDR, 400 Gb/s per GPU).

Every row's published step becomes tokens/s per GPU (8,192 × batch / step / GPUs), then an MFU in this model's own
FLOP count over the same peak, so the error is the throughput error. (The 70B bf16 table's tokens/s at 2,048 GPUs,
2,248,957, is twice its 1,024-GPU figure, not its step of 14.98 s, 2,239,919: the step is used.)
"""

from __future__ import annotations

from dataclasses import replace

from minipar.perf.hardware import GPUS, Device, for_framework
from minipar.perf.layout import Estimate
from minipar.perf.model import estimate
from minipar.perf.moe import training_flops
from minipar.perf.nemo import SHAPES, nemo_layout

SEQ = 8192
# (model, (tp, pp, cp, v), [(GPUs, global batch, bf16 step s, FP8 step s), ...]) as published
DGXC = [
    (
        "Llama3-8B",
        (1, 1, 2, 1),
        [(8, 128, 12.91, 9.67), (16, 256, 13.00, 9.73), (32, 512, 13.05, 9.75), (64, 1024, 13.08, 9.80),
         (128, 2048, 13.10, 9.82)],
    ),
    (
        "Llama3-70B",
        (4, 4, 2, 5),
        [(64, 128, 14.72, 11.01), (128, 256, 14.73, 10.93), (256, 512, 14.8, 11.16), (512, 1024, 14.89, 11.18),
         (1024, 2048, 14.92, 11.28), (2048, 4096, 14.98, 11.39)],
    ),
    ("Llama3.1-405B", (8, 9, 2, 7), [(576, 252, 17.20, 11.24), (1152, 504, 17.52, 11.31), (2304, 1008, 17.62, 12.35)]),
]  # fmt: skip
VOCAB = {"Llama3.1-405B": 51200}  # GPT-2's 50,257 padded to a multiple of 128 × TP 8 (module doc)


def dgxc_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row and precision on ``dev`` (default the H100 preset with
    Megatron-Core's efficiency): the published step time as an MFU of this model's count over the same peak."""
    dev = dev or for_framework(GPUS["h100"], "megatron")
    out = []
    for name, (tp, pp, cp, v), runs in DGXC:
        model = replace(SHAPES[name], seq=SEQ, vocab=VOCAB.get(name, SHAPES[name].vocab))
        for n, gb, *steps in runs:
            for fp8, step in zip((False, True), steps):
                row = ("DGXC 24.09", name, n, (tp, pp, cp, v, 1), 1, gb, None, fp8)
                lay = nemo_layout(row)
                tps = SEQ * gb / step / n
                mfu = tps * training_flops(model, gb) / (gb * SEQ) / dev.peak_flops
                label = f"DGXC 24.09 {name} {n:5d} H100 dp{lay.dp}·tp{tp}·pp{pp}·cp{cp}" + (f"·v{v}" if v > 1 else "")
                out.append((label + (" fp8" if fp8 else " bf16"), estimate(model, dev, lay, gb), "mfu", mfu))
    return out
