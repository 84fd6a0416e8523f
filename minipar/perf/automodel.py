"""NVIDIA NeMo AutoModel's published H100 runs (PyTorch backend: FSDP2, ``torch.distributed.pipelining``, DeepEP):
TEST rows, a PyTorch-native stack running mixtures of experts with FSDP, expert and pipeline parallelism at once.

Source: NVIDIA-NeMo/Automodel, ``docs/performance-summary.md`` (the "Pre-Training Performance" table, "System:
DGX-H100, Precision: BF16", added at 89e3a9fdd, 2025-10-06; Qwen3 MoE 30B's row as updated at 8d9bfb90e, 2025-10-08,
and unchanged since): #GPUs, GBS, MBS, LBS (sequences per data-parallel rank per gradient-accumulation step), GA,
sequence, TP, PP, CP, EP, VP, FSDP and tokens/s per GPU, GIVEN. Settings, GIVEN by the benchmark configs the table
names (``examples/benchmark/configs/*_te_deepep.yaml`` at 89e3a9fdd) and the code at that commit
(``nemo_automodel/components/moe/parallelizer.py``, ``components/distributed/pipelining/functional.py``,
``recipes/llm/benchmark.py`` and ``train_ft.py``):

- every block checkpointed whole (``activation_checkpointing: true``: ``ptd_checkpoint_wrapper`` on each block):
  ``recompute="full"``;
- FSDP2 (ZeRO-3, ``--fsdp2``) over the data-parallel ranks, its gradients reduced in fp32 (``MixedPrecisionPolicy(...,
  reduce_dtype=torch.float32)``), ``reshard_after_forward = not pp_enabled`` (with PP the weights stay gathered through
  a pipeline step, :func:`minipar.perf.sharding.dp_time`); the experts sharded over the data-parallel ranks that hold
  the same experts (``ep_shard``: ``Layout.expert_shard``);
- DeepEP's dispatcher (``enable_deepep: true``: ``"flex"``), no all-to-all overlap; a balanced router
  (``fake_balanced_gate: true``, below; DeepSeek-V3's own node-limited routing is off); expert TP 1 (no TP);
- Transformer Engine's attention (cuDNN's fused kernel, ``attn: te``), linear layers and RMSNorm (``linear: te``,
  ``rms_norm: te``), the experts' SwiGLU Megatron-Core's fused ``weighted_bias_swiglu_impl`` and their GEMMs
  fanshiqing's ``grouped_gemm``: the blocks' elementwise operators fused (``--fused-kernels``, ``Device.compiled``);
- the pipeline ``interleaved1f1b`` with micro-batches of one sequence (``pp_microbatch_size: 1``), the blocks in
  chunks of ``layers_per_stage: 2``: ⌈61/2⌉ + 1 = 32 stages (VP 8 at PP 4, 4 at PP 8, as the table says), the first
  61 mod 32 = 29 of two blocks, the last three of one, the embedding on the first, the output layer on the last
  (``generate_hf_model_fqn_per_model_part``: ``Layout.stage_split``); each gradient-accumulation step is one call of
  the schedule (``schedule.step`` per local batch), a pipeline flush of its own with its own FSDP reduction, so a
  step of GA > 1 is modelled as GA steps of GBS/GA (the optimizer counted GA times: ASSUMED negligible); without PP
  the gradients are reduced once per step (``get_sync_ctx``: FSDP2's gradient sync only for the last local batch),
  where the model's ZeRO-3 reduces them after every micro-batch: GA − 1 reduce-scatters too many, ASSUMED as
  modelled (they hide behind the backward; a quarter of them stays, the overlap cost);
- ``torch.optim.Adam`` (its moments in the parameters' dtype: below), no ``torch.compile``.

ASSUMED: the H100 preset under the PyTorch stack's constants (``--framework pytorch``: the FSDP stacks' efficiency,
memory passes and overlap cost, chosen on llm-foundry), each hidden collective as FSDP2 prefetches it (``"dp"``) and
the pipeline's sends asynchronous (``"pp"``), PyTorch's unfused loss; DeepSeek-V3 without its multi-token prediction
block (AutoModel's ``DeepseekV3ForCausalLM`` at 89e3a9fdd builds none). Shapes: DeepSeek-V3 as
:data:`minipar.perf.nemo_shapes.SHAPES`; Kimi K2, its Hugging Face config (``kimi_k2``: 61 blocks, h 7,168, 64 heads,
MLA at DeepSeek-V3's ranks and head widths, the first block dense of FFN 18,432, then 384 experts of 2,048, top 8, one
shared expert, one expert group, vocabulary 163,840, untied, no MTP); Qwen3 30B-A3B as Megatron-Bridge's rows.

Left out: GPT-OSS 20B and 120B (the table's EP column is empty while its kernels column names DeepEP: the layout is
not published); Nemotron V3 (hybrid Mamba blocks, not modelled). Kept as a known miss by the rule torchtitan's rows
set (``MISS:compile``): Llama 3 70B (added 2026-04-10; ``custom_llama3_1_70b_pretrain_benchmark_8nodes.yaml``:
``enable_compile: True``, FSDP2 over 32 ranks, CP 2, every block checkpointed, SDPA attention; ASSUMED: cuDNN's kernel,
CP as an all-gather of K and V, ``cp_allgather``, fp32 optimizer states).

These settings were written down before any row's error was computed (2026-11-29). Read after: two more GIVEN by the
code, each moving what the first computation had ASSUMED. (1) The balanced gate is not random: ``FakeBalancedGate``
gives token i the experts 8i … 8i + 7 mod E (``torch.arange(tokens · k).view(-1, k) % E``), k consecutive experts, one
EP rank or two of one node; so DeepEP sends a token over the network to one node, not to the ~5 of uniform routing:
modelled as group-limited routing, E/k groups of k consecutive experts, one group a token
(``moe_router_num_groups`` E/8, ``moe_router_group_topk`` 1; :func:`minipar.perf.moe.node_hit`). Read with uniform
routing the rows were DeepSeek-V3 -16 % (1,024 GPUs) and -27 % (256), Kimi K2 -8 %; Qwen3 30B-A3B's all-to-all stays
in one node. (2) The MoE models are built in bf16 (``DeepseekV3ForCausalLM.init_weights``: ``self.to(dtype)``, the
config's ``torch_dtype``): no fp32 master weights, Adam's moments bf16; modelled as the precision-aware optimizer's
bf16 states (``optimizer_dtypes``, 6 bytes a parameter where AutoModel keeps 4: ASSUMED), memory only. Kimi K2 had
read 83.0 GiB on its 80 GiB GPUs with fp32 states.

Read so: DeepSeek-V3 on 256 GPUs +8.3 %, Qwen3 30B-A3B +14.7 %, DeepSeek-V3 on 1,024 GPUs +24.4 % and Kimi K2 +16.1 %,
the last two ``MISS:seen`` (labelled after seen). The model times a gradient-accumulation step of DeepSeek-V3 alike on
256 and 1,024 GPUs (7.6 s; only FSDP's groups grow, 64 to 256 ranks), where the table's take 8.18 s and 37.87/4 = 9.47
s: what the larger run adds is in no term here. Llama 3 70B, compiled: -13.5 % (``MISS:compile``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from minipar.perf.flops import published_mfu
from minipar.perf.hardware import GPUS
from minipar.perf.layout import Estimate, Layout
from minipar.perf.model import estimate
from minipar.perf.nemo_shapes import SHAPES
from minipar.perf.shape import UNTIED_ROPE, ModelShape
from minipar.perf.torchtitan import LLAMA31

KIMI_K2 = ModelShape(
    61, 7168, 64, 4096, 163840, False, None, 18432, True, False, experts=384, top_k=8, shared_ffn=2048, moe_ffn=2048,
    dense_layers=1, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
    **UNTIED_ROPE,
)  # fmt: skip
FAKE_GATE = {"moe_router_group_topk": 1}  # each token's k experts: one group of k consecutive ones (module doc)
SHAPES_AM = {
    "DeepSeek-V3": replace(SHAPES["DeepSeek-V3"], mtp_num_layers=0, moe_router_num_groups=256 // 8, **FAKE_GATE),
    "Kimi-K2": replace(KIMI_K2, moe_router_num_groups=384 // 8, **FAKE_GATE),
    "Qwen3-30B-A3B": SHAPES["Qwen3-30B-A3B"],
    "Llama3-70B": LLAMA31["70B"],
}  # fmt: skip
# (model, GPUs, GBS, MBS, LBS, GA, (tp, pp, cp, ep, v), FSDP, compiled, tokens/s per GPU): the table's rows
AUTOMODEL = [
    ("DeepSeek-V3", 1024, 8192, 1, 8, 4, (1, 4, 1, 64, 8), 256, False, 865),
    ("DeepSeek-V3", 256, 512, 1, 8, 1, (1, 4, 1, 64, 8), 64, False, 1002),
    ("Kimi-K2", 256, 512, 1, 8, 2, (1, 8, 1, 32, 4), 32, False, 924),
    ("Qwen3-30B-A3B", 8, 512, 4, 4, 16, (1, 1, 1, 8, 1), 8, False, 12040),
    ("Llama3-70B", 64, 128, 1, 1, 4, (1, 1, 2, 1, 1), 32, True, 866.77),
]


def stage_split(layers: int, layers_per_stage: int, pp: int) -> tuple:
    """Blocks per pipeline stage (model chunk) 0 .. S−1 as AutoModel splits them: S = ⌈layers/layers_per_stage⌉ + 1
    stages rounded down to a multiple of pp (``round_virtual_stages_to_pp_multiple: down``;
    ``calculate_virtual_stages``), the first layers mod S of them one block more
    (``generate_hf_model_fqn_per_model_part``); v = S/pp."""
    stages = math.ceil(layers / layers_per_stage) + 1
    stages -= stages % pp
    base, extra = divmod(layers, stages)
    return tuple(base + (i < extra) for i in range(stages))


LAYERS_PER_STAGE = 2  # the configs' layers_per_stage
# labelled after their errors were seen (module doc): outside 15 %, no setting left to read
MISSES = {("DeepSeek-V3", 1024): "seen", ("Kimi-K2", 256): "seen"}


def automodel_layout(row) -> Layout:
    """The row's layout (module doc: GIVEN and ASSUMED), for one gradient-accumulation step of LBS sequences."""
    name, _, _, mb, _, _, (tp, pp, cp, ep, v), fsdp, *_ = row
    split = stage_split(SHAPES_AM[name].layers, LAYERS_PER_STAGE, pp) if pp > 1 else None
    return Layout(
        dp=fsdp, tp=tp, pp=pp, micro_batch=mb, v=v, zero=3, recompute="full", flash_attention=True,
        overlap=frozenset({"dp", "pp"} if pp > 1 else {"dp"}), grad_bytes=4, cp=cp, stage_split=split, ep=ep,
        etp=1 if ep > 1 else None, dispatcher="flex" if ep > 1 else "alltoall",
        cp_allgather=cp > 1, optimizer_dtypes=("bf16", "bf16", "bf16") if ep > 1 else None,
    )  # fmt: skip


def label(row) -> str:
    """``AutoModel <model> <GPUs> H100 <layout> bf16`` [``MISS:compile``, or :data:`MISSES`' ``MISS:<why>``]."""
    name, n, _, _, _, ga, (_, pp, cp, ep, v), fsdp, compiled, _ = row
    lay = f"fsdp{fsdp}" + (f"·pp{pp}·v{v}" if pp > 1 else "") + (f"·cp{cp}" if cp > 1 else "")
    lay += (f"·ep{ep}" if ep > 1 else "") + f"·ga{ga}"
    why = "compile" if compiled else MISSES.get((name, n))
    return f"AutoModel {name:13s} {n:4d} H100 {lay:24s} bf16" + (f" MISS:{why}" if why else "")


def automodel_rows() -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row: the estimate of one gradient-accumulation step (GBS/GA
    sequences), its MFU the step's; the published tokens/s as an MFU of this model's count over the same peak."""
    dev = replace(GPUS["h100"], attention="cudnn", compiled=True, fsdp2=True)  # TE's kernels; FSDP2
    out = []
    for row in AUTOMODEL:
        name, _, gbs, _, _, ga, *_, tps = row
        model = SHAPES_AM[name]
        e = estimate(model, dev, automodel_layout(row), gbs // ga)
        out.append((label(row), e, "mfu", published_mfu(model, gbs, tps, dev.peak_flops)))
    return out
