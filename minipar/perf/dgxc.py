"""NVIDIA's DGX Cloud benchmarking recipes: Llama 3.1 8B/70B/405B, GPT-3 175B and Nemotron-4 15B/340B on 8 to 2,304
H100s, bf16 and FP8 (TEST rows).

Source: github.com/NVIDIA/dgxc-benchmarking, tag v25.01 (143b90d), "Expected Performance" of ``llama3.1/README_8b.md``,
``README_70b.md``, ``README_405b.md`` (tables labelled 24.09: the ``nvcr.io/nvidia/nemo:24.09`` container),
``nemo_megatron/README_175b.md``, ``nemotron/README_15b.md`` and ``README_340b.md`` (tables labelled 24.11): NeMo
Launcher, Megatron-Core with Transformer Engine (``--framework megatron``). Added 2026-11-27, after the fits were
chosen; a repository and releases other than the NeMo 24.07 table the Megatron-Core efficiency was chosen on
(:mod:`minipar.perf.nemo`), and the only Megatron-Core rows in bf16.

GIVEN per table: TP, PP, CP, VP, MBS and GA; the global batch per GPU count (per node: 8B 128, 70B 16, 175B 16, 15B
32, 340B 2; 405B: 252, 504, 1,008 at 576, 1,152, 2,304 GPUs); the sequence (the READMEs' FLOP counts: 8,192 for Llama
3.1, 2,048 for GPT-3, 4,096 for Nemotron-4); the training step time in seconds (the last step of a 50- or 100-step
run), bf16 and FP8, on DGX H100 (8 GPUs per node); the shapes (Llama 3.1's are Llama 3's; GPT-3 175B and Nemotron-4
340B as in :data:`~.nemo_shapes.SHAPES`; Nemotron-4 15B by its paper) and vocabularies (the READMEs' FLOP counts:
GPT-3 51,200, Nemotron-4 256,000; Llama 3's tokenizer, 128,256, for 8B and 70B); for 405B "GPT2BPETokenizer as a
proxy" (V = 50,257, padded as Megatron pads it to a multiple of 128 × TP: 51,200, ASSUMED;
``SHAPES["Llama3.1-405B-gpt2v"]``). The 405B's proxy configurations (fewer layers on 32-192 GPUs) are left out.

GIVEN by the runs' configs at v25.01 (:data:`SETTINGS`; each model's YAML, ``<dir>/configure.sh`` and ``launch.sh``),
READ 2026-11-29, after every error had been seen (until then ASSUMED as for NeMo 24.07: the unfused loss, cuDNN's
attention, TP overlapped, no recomputation): ``cross_entropy_loss_fusion: true`` (a fused loss) for Llama 3.1 and
Nemotron-4, none for GPT-3; ``NVTE_FUSED_ATTN=1`` (cuDNN's attention, Megatron-Core's default here) for Llama 3.1 and
Nemotron-4 15B, ``=0`` (FlashAttention-2) for GPT-3 175B and Nemotron-4 340B; ``ub_tp_comm_overlap: true`` for Llama 3.1
70B/405B, GPT-3 175B and Nemotron-4 15B, ``False`` for Nemotron-4 340B, whose YAML also sets
``activations_checkpoint_granularity: selective`` (the attention core's forward run again in the backward: Megatron-Core
does, even at FlashAttention's, :mod:`minipar.perf.recompute_modules`); gradients reduced in bf16 (``grad_sync_dtype:
bf16``, all). Their effect: Llama 3 8B -10 … -8 % → -8 … -6 %, 70B -4 … +2 % → -3 … +3 %, GPT-3 175B +3 … +15 % → +1 …
+12 %, Nemotron-4 15B -2 … +3 % → +1 … +6 %; Nemotron-4 340B +2 … +4 % (bf16), -2 … +1 % (FP8) → -13 … -12 % and -21 …
-18 %, labelled ``MISS:seen`` (after seen): with its TP all-gathers and reduce-scatters exposed, as its YAML says, the
model's TP time is 0.64 s of the 3.16 s the 128-GPU FP8 step took, where its compute alone is 3.1 s; either the TP
traffic was hidden after all (its ``configure.sh`` sets userbuffers' ``NVTE_UB_SPLIT_AG``) or the model's compute is a
fifth too slow there, unresolved. ASSUMED still: the distributed optimizer (ZeRO-1), FP8 with delayed scaling, the H100
preset's links (NDR, 400 Gb/s per GPU).

Every row's published step becomes tokens/s per GPU (sequence × batch / step / GPUs), then an MFU in this model's own
FLOP count over the same peak, so the error is the throughput error. (The 70B bf16 table's tokens/s at 2,048 GPUs,
2,248,957, is twice its 1,024-GPU figure, not its step of 14.98 s, 2,239,919: the step is used. The 175B FP8 steps
are not monotone in the GPU count, 5.92 to 6.72 s and back to 6.24.)
"""

from __future__ import annotations

from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate
from minipar.perf.nemo import SHAPES, nemo_rows

# (release, model, (tp, pp, cp, v), micro-batch, [(GPUs, global batch, bf16 step s, FP8 step s), ...]) as published
DGXC = [
    ("24.09", "Llama3-8B", (1, 1, 2, 1), 1,
     [(8, 128, 12.91, 9.67), (16, 256, 13.00, 9.73), (32, 512, 13.05, 9.75), (64, 1024, 13.08, 9.80),
      (128, 2048, 13.10, 9.82)]),
    ("24.09", "Llama3-70B", (4, 4, 2, 5), 1,
     [(64, 128, 14.72, 11.01), (128, 256, 14.73, 10.93), (256, 512, 14.8, 11.16), (512, 1024, 14.89, 11.18),
      (1024, 2048, 14.92, 11.28), (2048, 4096, 14.98, 11.39)]),
    ("24.09", "Llama3.1-405B-gpt2v", (8, 9, 2, 7), 1,
     [(576, 252, 17.20, 11.24), (1152, 504, 17.52, 11.31), (2304, 1008, 17.62, 12.35)]),
    ("24.11", "GPT3-175B", (4, 8, 1, 12), 1,
     [(128, 256, 8.91, 5.92), (256, 512, 8.95, 5.96), (512, 1024, 9.09, 6.44), (1024, 2048, 9.01, 6.72),
      (2048, 4096, 9.02, 6.24)]),
    ("24.11", "Nemotron4-15B", (4, 1, 1, 1), 4,
     [(16, 64, 2.83, 2.08), (32, 128, 2.86, 2.07), (64, 256, 2.86, 2.09), (128, 512, 2.89, 2.08),
      (256, 1024, 2.88, 2.1), (512, 2048, 2.92, 2.12), (1024, 4096, 2.92, 2.12), (2048, 8192, 2.96, 2.18)]),
    ("24.11", "Nemotron-340B", (8, 8, 1, 12), 1,
     [(128, 32, 4.61, 3.16), (256, 64, 4.67, 3.21), (512, 128, 4.7, 3.26), (1024, 256, 4.73, 3.34),
      (2048, 512, 4.84, 3.49)]),
]  # fmt: skip


# What each model's run set beyond its table (module doc: given, read 2026-11-29 in v25.01's configs): the loss kernel
# (cross_entropy_loss_fusion), the attention kernel (NVTE_FUSED_ATTN=0: FlashAttention-2), TP overlap, recomputation
SETTINGS = {
    ("DGXC 24.09", "Llama3-8B"): {"fused_loss": True},
    ("DGXC 24.09", "Llama3-70B"): {"fused_loss": True},
    ("DGXC 24.09", "Llama3.1-405B-gpt2v"): {"fused_loss": True},
    ("DGXC 24.11", "GPT3-175B"): {"attention": "flash"},
    ("DGXC 24.11", "Nemotron4-15B"): {"fused_loss": True},
    ("DGXC 24.11", "Nemotron-340B"): {
        "fused_loss": True,
        "attention": "flash",
        "tp_overlap": False,
        "modules": ("core_attn",),
        "miss": "seen",  # module doc: with TP exposed, as its yaml says, -13 … -12 % and -21 … -18 %
    },
}


def dgxc_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row and precision on ``dev`` (default the H100 preset with
    Megatron-Core's efficiency): each published step as tokens/s per GPU, read by :func:`minipar.perf.nemo.nemo_rows`
    (the same layouts and the same conversion to this model's MFU as NVIDIA's other Megatron-Core rows)."""
    rows = [
        (f"DGXC {release}", name, n, (tp, pp, cp, v, 1), mb, gb, None, fp8, "tps", SHAPES[name].seq * gb / step / n)
        for release, name, (tp, pp, cp, v), mb, runs in DGXC
        for n, gb, *steps in runs
        for fp8, step in zip((False, True), steps)
    ]
    return nemo_rows(dev, rows, SETTINGS)
