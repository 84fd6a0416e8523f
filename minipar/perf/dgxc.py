"""NVIDIA's DGX Cloud benchmarking recipes: Llama 3.1 8B/70B/405B, GPT-3 175B, Nemotron-4 15B/340B, Grok-1 314B and
DeepSeek-V3 on 8 to 2,304 H100s, bf16 and FP8, three tags of the repository (TEST rows).

Source: github.com/NVIDIA/dgxc-benchmarking, tag v25.01 (143b90d), "Expected Performance" of ``llama3.1/README_8b.md``,
``README_70b.md``, ``README_405b.md`` (tables labelled 24.09: the ``nvcr.io/nvidia/nemo:24.09`` container),
``nemo_megatron/README_175b.md``, ``nemotron/README_15b.md`` and ``README_340b.md`` (tables labelled 24.11) and
``grok1/README_314b.md`` ("Grok 1 314b Dev": a NeMo development container, ``nemo+dev.sqsh``): NeMo Launcher,
Megatron-Core with Transformer Engine (``--framework megatron``). Also tag v25.04 (741c886, the ``nemo:24.12``
container): ``nemo_megatron/README_175b.md`` (GPT-3 175B at VP 6) and ``grok1/README_314b.md``, whose configs are
still NeMo Launcher's; and (the ``nemo:25.02.01`` container, NeMo 2.0's recipes) ``llama3.1/README.md`` (Llama 3.1 8B,
70B, 405B with Llama 3's tokenizer, the 405B at TP 8 · PP 8 · VP 8 · CP 2, the 70B's FP8 run at PP 8 without CP) and
``nemotron/README.md`` (Nemotron-4 15B at TP 2 and micro-batch 2; 340B, whose table says VP "NA" where its
``launch.sh`` and NeMo's ``model_configs_h100.csv`` say 12: modelled at 12, ``MISS:provenance`` by the rule of
:mod:`minipar.perf.mb_archive`, set before its error was computed).
Added 2026-11-27 (Grok-1 and tag v25.04 2026-11-29, their settings below written down before their errors were
computed), after the fits were chosen; a repository and releases other than the NeMo 24.07 table the Megatron-Core
efficiency was chosen on (:mod:`minipar.perf.nemo`), and the only Megatron-Core rows in bf16.

GIVEN per table: TP, PP, CP, VP, EP, MBS and GA (v25.04's 175B table prints a global batch of 1,204 at 512 GPUs: its
tokens/s and its ``configure.sh``, 16 per node, say 1,024); the global batch per GPU count (per node: 8B 128, 70B 16,
175B 16, 15B 32, 340B 2, Grok-1 16; 405B: 252, 504, 1,008 at 576, 1,152, 2,304 GPUs); the sequence (the READMEs' FLOP
counts: 8,192 for Llama 3.1 and Grok-1, 2,048 for GPT-3, 4,096 for Nemotron-4); the training step time in seconds (the
last step of a 50- or 100-step run), bf16 and FP8, on DGX H100 (8 GPUs per node); the shapes (Llama 3.1's are Llama 3's;
GPT-3 175B and Nemotron-4 340B as in :data:`~.nemo_shapes.SHAPES`; Nemotron-4 15B by its paper; Grok-1 by its YAML: 64
blocks, h 6,144, 48 heads, 8 KV heads, 8 experts of FFN 32,768, top 2, GeGLU) and vocabularies (the READMEs' FLOP
counts: GPT-3 51,200, Nemotron-4 256,000; Llama 3's tokenizer, 128,256, for 8B, 70B and Grok-1, whose YAML names it);
for 405B "GPT2BPETokenizer as a proxy" (V = 50,257, padded as Megatron pads it to a multiple of 128 × TP: 51,200,
ASSUMED; ``SHAPES["Llama3.1-405B-gpt2v"]``). The proxy configurations (405B on 32-192 GPUs, Grok-1 on 8-256: fewer
layers, "not realistic", the README says) are left out. Grok-1's table has a DP column of 1, 2, 4 at 512, 1,024, 2,048
GPUs: the expert-data-parallel size, GPUs / (TP·PP·CP·EP); its GA of 128 (GBS / (MBS·dp)) says dp = GPUs / (TP·PP·CP) =
8, 16, 32, as the layout has it.

GIVEN by the runs' configs at v25.01 (:data:`SETTINGS`; each model's YAML, overridden by ``<dir>/configure.sh``'s
``CONFIG_OVERRIDES`` on the command line), READ 2026-11-29, after every error had been seen (until then ASSUMED as for
NeMo 24.07: the unfused loss, cuDNN's attention, TP overlapped, no recomputation): ``cross_entropy_loss_fusion: true``
(a fused loss) for Llama 3.1 and Nemotron-4, none for GPT-3 and Grok-1; ``NVTE_FUSED_ATTN=1`` (cuDNN's attention,
Megatron-Core's default here) for Llama 3.1 and Nemotron-4 15B, ``=0`` (FlashAttention-2) for GPT-3 175B, Nemotron-4
340B and Grok-1 (at v25.04 ``=1``, cuDNN's, for GPT-3 175B); TP overlap (userbuffers) for every TP > 1 run (Llama 3.1's
and GPT-3's YAMLs set ``ub_tp_comm_overlap: true``; Nemotron-4's and Grok-1's ``configure.sh`` pass
``model.ub_tp_comm_overlap=True``, overriding their YAMLs' ``False``); Nemotron-4 340B's
``activations_checkpoint_granularity: selective`` (the attention core's forward run again in the backward: Megatron-Core
does, even at FlashAttention's, :mod:`minipar.perf.recompute_modules`); gradients reduced in bf16 (``grad_sync_dtype:
bf16``, all); Grok-1's all-to-all dispatcher (``moe_token_dispatcher_type: alltoall``, not overlapped), its experts
padded to a capacity of 1.0 (exactly balanced), no recomputation, expert TP = TP (Megatron-Core's default then). Their
effect: Llama 3 8B -10 … -8 % → -8 … -6 %, 70B -4 … +2 % → -3 … +3 %, GPT-3 175B +3 … +15 % → +1 … +12 %, Nemotron-4 15B
-2 … +3 % → +1 … +6 %, Nemotron-4 340B +2 … +4 % (bf16), -2 … +1 % (FP8) → -2 … 0 % and -7 … -3 %. (The 340B's YAML was
first read without its ``configure.sh``: with its TP traffic exposed its rows read -13 … -12 % and -21 … -18 %, labelled
``MISS:seen`` until the override was read the same day.) Grok-1: -2 … -1 % (bf16), +3 … +6 % (FP8). At v25.04: GPT-3
175B -3 … +1 %, Grok-1 -2 … 0 % (bf16), +5 … +7 % (FP8).

GIVEN by v25.04's NeMo 2.0 runs (``llama3.1/pretrain_llama31.py`` and ``llama31_utils.py``, ``nemotron/launch.sh``; NeMo
at d2b2155 as their ``setup.sh`` pins it, its ``scripts/performance`` and ``nemo/collections/llm/recipes``): a fused
loss (``GPTConfig.cross_entropy_loss_fusion = True``), cuDNN's attention (``NVTE_FUSED_ATTN=1``), TP overlap
(``MegatronCommOverlapCallback(tp_comm_overlap=True)`` for every TP > 1 recipe), gradients reduced in bf16
(``grad_reduce_in_fp32 = False``), no recomputation, no CUDA graphs (the CSV's ``cuda_graphs`` 0), FP8 as
``bf16_with_fp8_mixed`` (delayed scaling, FP8 weights). Read: Llama 3.1 8B -12 … -9 %, 70B -4 % (bf16) and -11 … -8 %
(FP8), 405B -1 % and -8 %, Nemotron-4 15B -5 … +2 %, 340B -5 … -3 % and -8 … -7 % (FP8 weights modelled, below). Newer
releases run faster than the model, whose Megatron-Core efficiency was chosen on NeMo 24.07: the 8B's layout, unchanged,
took 12.91 s in 24.09 and 12.27 s in 25.02 (bf16); Megatron-Bridge's later 70B FP8 rows, on this 70B FP8 layout, read
-10 … -8 % (:mod:`~.mb_archive`).

Tag v25.05 (68eaf7e, the ``nemo:25.04.01`` container): ``deepseek_v3/pretraining/README.md``'s one H100 row, DeepSeek-V3
in bf16 on 1,024 H100s (TP 2, PP 16, EP 64, expert TP 1, no VP, micro-batch 1, global batch 8,192: 52.04 s a step).
GIVEN by its ``launch.sh`` and NeMo at 7a8f1cc as its ``setup.sh`` pins it (``scripts/performance/llm/
pretrain_deepseek_v3.py``, ``recipes/deepseek_v3.py``, ``gpt/model/deepseek.py``): 3 blocks on the first stage, 2 and
the MTP block on the last, 4 on the others; NCCL's all-to-all (``moe_token_dispatcher_type="alltoall"``), token dropping
at capacity 1.0, padded (balanced), no all-to-all overlap (the shared expert's, ``moe_shared_expert_overlap``, not
modelled), no TP overlap (``tp_comm_overlap=False``), ``mla_up_proj`` recomputed, TE's fused loss, gradients reduced in
fp32 (``bf16_mixed``'s ``grad_reduce_in_fp32``), the distributed optimizer's states in fp32, cuDNN's attention. It reads
+20 % (43.5 s modelled, 16.2 s of it the all-to-all), ``MISS:seen``, labelled after seen: it and Megatron-Bridge 25.09's
Qwen3 235B-A22B (NCCL's all-to-all over 4 nodes, not overlapped: +13.7 %, :mod:`~.mb_archive`) would match with NCCL's
cross-node all-to-all 1.5 and 1.2 times slower than the model's rate (DeepEP's measured one); Grok-1's rows (above: the
same kind, the all-to-all an eighth of their step) read -2 … +7 %, and the rows that overlap NCCL's all-to-all read -10
… -3 %. No one rate fits them all: at 1.5 times slower DeepSeek-V3 reads -4 %, 25.09's Qwen3 -15 %, Grok-1 -8 … 0 %, the
overlapped Qwen3 rows -34 … -29 %. Nothing was chosen on them; ``python -m minipar.plan`` quotes them under a plan of
that kind (:mod:`minipar.perf.plan_notes`).

ASSUMED for every row: the distributed optimizer (ZeRO-1), FP8 with delayed scaling, the H100 preset's links (NDR, 400
Gb/s per GPU); GPT-3 175B's
YAML sets dropout 0.1 (hidden and attention), the shape none: the model times dropout as fused into its neighbours, so
only its masks' memory (2·s·b·h bytes a block) is left out. GIVEN for every FP8 run: FP8 weights (``fp8_params``:
v25.01's and v25.04's ``configure.sh`` pass ``model.fp8_params=$FP8_ENABLED``, the GPT-3 YAML sets it, NeMo 2.0's
``bf16_with_fp8_mixed`` too; ``Layout.fp8_params``): not modelled until 2026-11-29, after the errors were seen, when
the model learned Transformer Engine's FP8 weights (:func:`minipar.perf.memory.fp8_weight_bytes`, ZeRO's all-gather in
1 byte a weight): the FP8 rows moved by 0 to +3 points (GPT-3 175B's to +1 … +13 %, Nemotron-4 340B's to -4 … 0 % at
v25.01 and -8 … -7 % at v25.04, Llama 3.1 405B's to -6 … +2 % and -8 %), their memory not at all.

Every row's published step becomes tokens/s per GPU (sequence × batch / step / GPUs), then an MFU in this model's own
FLOP count over the same peak, so the error is the throughput error. (The 70B bf16 table's tokens/s at 2,048 GPUs,
2,248,957, is twice its 1,024-GPU figure, not its step of 14.98 s, 2,239,919: the step is used. The 175B FP8 steps
are not monotone in the GPU count, 5.92 to 6.72 s and back to 6.24.)
"""

from __future__ import annotations

from minipar.perf.hardware import Device
from minipar.perf.layout import Estimate
from minipar.perf.nemo import SHAPES, nemo_rows

# (release, model, (tp, pp, cp, v, ep), micro-batch, [(GPUs, global batch, bf16 step s, FP8 step s), ...]) as published
DGXC = [
    ("24.09", "Llama3-8B", (1, 1, 2, 1, 1), 1,
     [(8, 128, 12.91, 9.67), (16, 256, 13.00, 9.73), (32, 512, 13.05, 9.75), (64, 1024, 13.08, 9.80),
      (128, 2048, 13.10, 9.82)]),
    ("24.09", "Llama3-70B", (4, 4, 2, 5, 1), 1,
     [(64, 128, 14.72, 11.01), (128, 256, 14.73, 10.93), (256, 512, 14.8, 11.16), (512, 1024, 14.89, 11.18),
      (1024, 2048, 14.92, 11.28), (2048, 4096, 14.98, 11.39)]),
    ("24.09", "Llama3.1-405B-gpt2v", (8, 9, 2, 7, 1), 1,
     [(576, 252, 17.20, 11.24), (1152, 504, 17.52, 11.31), (2304, 1008, 17.62, 12.35)]),
    ("24.11", "GPT3-175B", (4, 8, 1, 12, 1), 1,
     [(128, 256, 8.91, 5.92), (256, 512, 8.95, 5.96), (512, 1024, 9.09, 6.44), (1024, 2048, 9.01, 6.72),
      (2048, 4096, 9.02, 6.24)]),
    ("24.11", "Nemotron4-15B", (4, 1, 1, 1, 1), 4,
     [(16, 64, 2.83, 2.08), (32, 128, 2.86, 2.07), (64, 256, 2.86, 2.09), (128, 512, 2.89, 2.08),
      (256, 1024, 2.88, 2.1), (512, 2048, 2.92, 2.12), (1024, 4096, 2.92, 2.12), (2048, 8192, 2.96, 2.18)]),
    ("24.11", "Nemotron-340B", (8, 8, 1, 12, 1), 1,
     [(128, 32, 4.61, 3.16), (256, 64, 4.67, 3.21), (512, 128, 4.7, 3.26), (1024, 256, 4.73, 3.34),
      (2048, 512, 4.84, 3.49)]),
    ("dev", "Grok1-314B", (4, 8, 2, 8, 8), 1,
     [(512, 1024, 20.83, 16.69), (1024, 2048, 21.0, 16.89), (2048, 4096, 21.09, 17.04)]),
    # tag v25.04 (NeMo 24.12): GPT-3 175B at VP 6 on cuDNN's attention; Grok-1 as before
    ("24.12", "GPT3-175B", (4, 8, 1, 6, 1), 1,
     [(128, 256, 8.309, 5.626), (256, 512, 8.408, 5.725), (512, 1024, 8.42, 5.774), (1024, 2048, 8.453, 5.82),
      (2048, 4096, 8.49, 5.96)]),
    ("24.12", "Grok1-314B", (4, 8, 2, 8, 8), 1,
     [(512, 1024, 21.01, 16.9), (1024, 2048, 21.2, 17.01), (2048, 4096, 21.29, 17.3)]),
    # tag v25.04 (NeMo 25.02.01, NeMo 2.0's recipes): Llama 3.1 and Nemotron-4; the 70B's FP8 run has its own layout
    ("25.02", "Llama3-8B", (1, 1, 2, 1, 1), 1,
     [(8, 128, 12.27, 9.33), (16, 256, 12.3, 9.36), (32, 512, 12.32, 9.43), (64, 1024, 12.33, 9.48),
      (128, 2048, 12.33, 9.54)]),
    ("25.02", "Llama3-70B", (4, 4, 2, 5, 1), 1,
     [(64, 128, 14.66, None), (128, 256, 14.67, None), (256, 512, 14.68, None), (512, 1024, 14.67, None),
      (1024, 2048, 14.65, None), (2048, 4096, 14.66, None)]),
    ("25.02", "Llama3-70B", (4, 8, 1, 5, 1), 1,
     [(64, 128, None, 9.86), (128, 256, None, 9.95), (256, 512, None, 10.0), (512, 1024, None, 10.07),
      (1024, 2048, None, 10.08), (2048, 4096, None, 10.15)]),
    ("25.02", "Llama3.1-405B", (8, 8, 2, 8, 1), 1,
     [(512, 256, 19.78, 12.37), (1024, 512, 19.84, 12.42), (2048, 1024, 19.87, 12.56)]),
    ("25.02", "Nemotron4-15B", (2, 1, 1, 1, 1), 2,
     [(16, 64, 2.66, 1.98), (32, 128, 2.66, 1.98), (64, 256, 2.67, 1.98), (128, 512, 2.67, 1.99),
      (256, 1024, 2.68, 2.0), (512, 2048, 2.71, 2.02), (1024, 4096, 2.74, 2.03), (2048, 8192, 2.78, 2.09)]),
    ("25.02", "Nemotron-340B", (8, 8, 1, 12, 1), 1,
     [(256, 64, 4.36, 2.93), (512, 128, 4.39, 2.97), (1024, 256, 4.41, 3.0), (2048, 512, 4.43, 3.05)]),
    # tag v25.05 (NeMo 25.04.01): DeepSeek-V3 in bf16 (FP8 "not currently supported")
    ("25.04", "DeepSeek-V3", (2, 16, 1, 1, 64), 1, [(1024, 8192, 52.04, None)]),
]  # fmt: skip


# What each model's run set beyond its table (module doc: given, read 2026-11-29 in v25.01's configs): the loss kernel
# (cross_entropy_loss_fusion), the attention kernel (NVTE_FUSED_ATTN=0: FlashAttention-2), recomputation; TP overlap
# is every run's (configure.sh's model.ub_tp_comm_overlap=True, the recipe's default)
SETTINGS = {
    ("DGXC 24.09", "Llama3-8B"): {"fused_loss": True},
    ("DGXC 24.09", "Llama3-70B"): {"fused_loss": True},
    ("DGXC 24.09", "Llama3.1-405B-gpt2v"): {"fused_loss": True},
    ("DGXC 24.11", "GPT3-175B"): {"attention": "flash"},
    ("DGXC 24.11", "Nemotron4-15B"): {"fused_loss": True},
    ("DGXC 24.11", "Nemotron-340B"): {
        "fused_loss": True,
        "attention": "flash",
        "modules": ("core_attn",),
    },
    ("DGXC dev", "Grok1-314B"): {"attention": "flash"},
    ("DGXC 24.12", "Grok1-314B"): {"attention": "flash"},  # v25.04: GPT-3 175B on cuDNN's (NVTE_FUSED_ATTN=1)
    # v25.04's NeMo 2.0 runs: GPTConfig's cross_entropy_loss_fusion=True, cuDNN's attention, no recomputation
    ("DGXC 25.02", "Llama3-8B"): {"fused_loss": True},
    ("DGXC 25.02", "Llama3-70B"): {"fused_loss": True},
    ("DGXC 25.02", "Llama3.1-405B"): {"fused_loss": True},
    ("DGXC 25.02", "Nemotron4-15B"): {"fused_loss": True},
    ("DGXC 25.02", "Nemotron-340B"): {"fused_loss": True, "miss": "provenance"},  # table VP "NA", launch.sh 12
    # v25.05's DeepSeek-V3 (NeMo's pretrain_deepseek_v3.py, recipes at 7a8f1cc), over RECIPES["DeepSeek-V3"] (25.09's)
    ("DGXC 25.04", "DeepSeek-V3"): {
        "fused_loss": True,  # cross_entropy_fusion_impl = "te"
        "a2a_overlap": False,
        "flex": False,  # DeepSeekV3Config's moe_token_dispatcher_type "alltoall"
        "dp_overlap": True,  # the recipe's DDP config: overlap_grad_reduce, overlap_param_gather
        "layout": "Ettt|(tttt|)*14ttmL",  # num_layers_in_first_pipeline_stage 3, last 2; MTP on the last stage
        "modules": ("mla_up_proj",),  # launch.sh's RM for h100
        "optimizer_dtypes": None,  # the precision-aware optimizer at Megatron-Core's fp32 defaults
        "grad_bytes": 4,  # bf16_mixed's grad_reduce_in_fp32=True
        "miss": "seen",  # +20 %, labelled after seen (module doc): NCCL's all-to-all across 8 nodes, not overlapped
    },
}


def dgxc_rows(dev: Device | None = None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row and precision on ``dev`` (default the H100 preset with
    Megatron-Core's efficiency): each published step as tokens/s per GPU, read by :func:`minipar.perf.nemo.nemo_rows`
    (the same layouts and the same conversion to this model's MFU as NVIDIA's other Megatron-Core rows)."""
    rows = [
        (f"DGXC {release}", name, n, par, mb, gb, None, fp8, "tps", SHAPES[name].seq * gb / step / n)
        for release, name, par, mb, runs in DGXC
        for n, gb, *steps in runs
        for fp8, step in zip((False, True), steps)
        if step is not None  # v25.04's Llama 3.1 70B: bf16 and FP8 on two layouts
    ]
    return nemo_rows(dev, rows, SETTINGS)
