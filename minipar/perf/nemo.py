"""NVIDIA's published Megatron-Core H100 runs: the FIT set of the H100's Megatron-Core GEMM efficiency, and how a
row becomes a layout (its TEST rows: :mod:`minipar.perf.mb_archive`).

The framework matters on an H100: Megatron-Core with Transformer Engine (fused norms, activations and FP8 casts
around its GEMMs, communication overlapped by userbuffers) reaches a larger fraction of the peak than the
PyTorch-native FSDP stacks the H100's default efficiency was chosen on (llm-foundry), so each framework has its
own efficiency, chosen on its own runs (:data:`minipar.perf.hardware.GEMM_EFF_MEGATRON`, ``--framework megatron``).

Sources (read in the repositories, commit named):

- **FIT: NeMo 24.07** (github.com/NVIDIA/NeMo, ``docs/source/performance/performance_summary.md`` at 8e3d65d,
  2024-09-09, the table's last version: "Pretraining", Container NeMo24.07, System DGX-H100, FP8): all 12 rows
  (GPT3 5B / 20B / 175B ×2, Llama 2 7B / 13B / 70B, Nemotron 8B / 22B / 340B, Llama 3 8B / 70B): #GPUs, GBS,
  MBS, sequence, TP, PP, CP, VP and tokens/s/GPU as published; chosen as the fit set before any error was seen
  (the largest single table of one release, ten models). Shapes as NeMo's own configs state them
  (``nemo/collections/llm/gpt/model/*.py``: GPT3, Llama 2 / 3, Nemotron-3 8B / 22B (squared ReLU, MHA) and Nemotron-4
  340B; GPT3 with a learned position table and a tied output layer, the others rotary and untied, as
  NeMo-Framework-Launcher's ``conf/training`` YAMLs of that era set them too); vocabularies of the perf scripts (GPT3
  51,200, Nemotron 256,000, Llama 3 128,256; Llama 2 32,000). ASSUMED: the table's "Nemotron-8B/22B/340B" are Nemotron-3
  8B / 22B and Nemotron-4 340B; no recomputation, no dropout; the distributed optimizer (ZeRO-1); TP communication
  overlapped for TP > 1 (NeMo's H100 recipes set ``tp_comm_overlap``; the table does not say); FP8 with delayed scaling
  as ``Layout.fp8``. FP8 weights (``Layout.fp8_params``) off: the launcher's YAMLs leave NeMo's ``fp8_params`` at its
  default, False (given for GPT-3, Llama and Nemotron-3; the NeMo 24.03 rows, :mod:`minipar.perf.nemo_long`, alike);
  ASSUMED on for Nemotron-4 340B, which has no YAML: without it the model counts 82.7 GiB per GPU on an 80 GiB H100
  (the FP8 copies Transformer Engine keeps beside the bf16 weights, :func:`minipar.perf.memory.fp8_weight_bytes`),
  73.1 GiB with it (set 2026-11-29, after its error was seen; its ZeRO all-gather then moves 1 byte a weight: -0.1 →
  +1.8 %; the efficiency's rule still chooses 0.60). Every later release's FP8
  recipe keeps FP8 weights (Megatron-Bridge's ``fp8_param_gather=True`` but for blockwise scaling, MoE-Zoo's
  ``--fp8-param-gather``, NeMo 2.0's and DGX Cloud's ``fp8_params``): :func:`recipe`.
- **TEST**: Megatron-Bridge's performance archive (25.09-26.06), Megatron-MoE-ModelZoo's Mixtral 8x22B and the
  known misses among them: :mod:`minipar.perf.mb_archive`, every setting given or ASSUMED there.

The loss: Megatron-Core's unfused default for Megatron-LM and MoE-Zoo (no fusion flag in their scripts: given), a fused
kernel for Megatron-Bridge (Transformer Engine's or Megatron-Core's native one, given: :mod:`minipar.perf.mb_archive`)
and for NeMo 24.07's Llama 2 7B-70B, Llama 3 8B/70B and Nemotron 8B/22B (:data:`LAUNCHER`: NeMo-Framework-Launcher at
tag 24.09, the release whose default container is the table's ``nemo:24.07``, sets ``cross_entropy_loss_fusion: true``
in their ``conf/training`` YAMLs, added 2024-06-27 in "perf patch"; its GPT-3 YAMLs set none, and it has no Nemotron
340B YAML: unfused, ASSUMED for that one). READ 2026-11-29, after every error was seen: until then all twelve were
ASSUMED unfused. The efficiency's rule still chooses 0.60 (median 2.9 % there, 3.2 % at 0.62, 3.6 % since the 340B's FP8
weights; 2.5 % before); the rows
moved by up to 7 points (Nemotron 8B +6.2 → +12.4 %, 22B -2.1 → +5.2 %).

Every row's published tokens/s per GPU becomes an MFU in this model's own FLOP count over the same peak, so the
error is the throughput error. ASSUMED for all: the H100 preset's links (NDR, 400 Gb/s per GPU); the gradient
reduction in fp32 for Megatron-LM (MoE-Zoo: its default under bf16), in bf16 for NeMo and Megatron-Bridge (the
25.11 recipe sets ``grad_reduce_in_fp32=False``; NeMo 24.07 the same); the interleaved schedule's sends overlapped
(Megatron's default with VP); the Mixtral run's expert tensor parallelism 1 (given: ``Layout.etp``, the experts'
mesh folded, its EP groups inside a node); balanced routing (forced balancing: given); Mixtral's all-to-all not
overlapped (no ``A2A_OVERLAP``: given).
"""

from __future__ import annotations

from dataclasses import replace

from minipar.errors import ConfigError
from minipar.perf.flops import megatron_flops_per_token
from minipar.perf.hardware import GPUS, Device, for_framework, with_fused_loss
from minipar.perf.layout import Estimate, Layout
from minipar.perf.layout_checks import edge_splits
from minipar.perf.mb_archive import A2A_OVERLAP, FLEX, NEMO, PROVENANCE, RECIPES, SETTINGS
from minipar.perf.model import estimate
from minipar.perf.moe import training_flops
from minipar.perf.nemo_shapes import SHAPES
from minipar.perf.pp_layout import parse_layout
from minipar.perf.shape import ModelShape

# (source, model, GPUs, (tp, pp, cp, v, ep), micro-batch, global batch, recompute layers, fp8, metric, published);
# dp = GPUs / (tp·pp·cp); metric "tps" (tokens/s/GPU) or "tflops" (Megatron-LM's count).
# The fit rows' loss as NeMo-Framework-Launcher's configs of the fit set's container set it (module doc: given, read
# 2026-11-29): ``cross_entropy_loss_fusion: true`` (Megatron-Core's fused vocab-parallel cross-entropy)
LAUNCHER = {
    ("NeMo 24.07", name): {"fused_loss": True}
    for name in ("Llama2-7B", "Llama2-13B", "Llama2-70B", "Llama3-8B", "Llama3-70B", "Nemotron-8B", "Nemotron-22B")
}
LAUNCHER[("NeMo 24.07", "Nemotron-340B")] = {"fp8_params": True}  # ASSUMED (module doc): 82.7 GiB without it
NEMO_FIT = [  # NeMo 24.07, DGX-H100, FP8 (module doc)
    ("NeMo 24.07", "GPT3-5B", 64, (1, 1, 1, 1, 1), 4, 2048, None, True, "tps", 23406),
    ("NeMo 24.07", "GPT3-20B", 64, (2, 1, 1, 1, 1), 2, 256, None, True, "tps", 5851),
    ("NeMo 24.07", "GPT3-175B", 128, (4, 8, 1, 6, 1), 1, 256, None, True, "tps", 716),
    ("NeMo 24.07", "GPT3-175B", 512, (4, 8, 1, 6, 1), 2, 2048, None, True, "tps", 825),
    ("NeMo 24.07", "Llama2-7B", 8, (1, 1, 1, 1, 1), 1, 128, None, True, "tps", 16934),
    ("NeMo 24.07", "Llama2-13B", 16, (1, 4, 1, 10, 1), 1, 128, None, True, "tps", 8715),
    ("NeMo 24.07", "Llama2-70B", 64, (4, 4, 1, 20, 1), 1, 128, None, True, "tps", 1728),
    ("NeMo 24.07", "Nemotron-8B", 64, (2, 1, 1, 1, 1), 4, 256, None, True, "tps", 12507),
    ("NeMo 24.07", "Nemotron-22B", 64, (2, 4, 1, 10, 1), 2, 256, None, True, "tps", 4312),
    ("NeMo 24.07", "Nemotron-340B", 128, (8, 8, 1, 12, 1), 1, 32, None, True, "tps", 326),
    ("NeMo 24.07", "Llama3-8B", 8, (1, 1, 2, 1, 1), 1, 128, None, True, "tps", 12273),
    ("NeMo 24.07", "Llama3-70B", 64, (4, 4, 2, 5, 1), 1, 128, None, True, "tps", 1524),
]


def shape(name: str) -> ModelShape:
    """A row's model: ``SHAPES[name]``, or ``"<name> s=<tokens>"``: that shape at another sequence length
    (:mod:`minipar.perf.nemo_long`)."""
    base, _, seq = name.partition(" s=")
    return replace(SHAPES[base], seq=int(seq)) if seq else SHAPES[base]


def recipe(src: str, name: str, settings: dict | None = None) -> dict:
    """What a row's run set beyond its table (module doc): ``tp_overlap`` (``tp_comm_overlap``: given for
    Megatron-Bridge, ASSUMED for NeMo, not in MoE-Zoo's launch), ``a2a_overlap`` (``moe_a2a_overlap``), ``etp`` (expert
    TP; None: tp), ``flex`` (DeepEP / HybridEP's dispatcher), ``modules`` (Megatron-Core's recomputed modules),
    ``dp_overlap`` (``overlap_grad_reduce``), ``cuda_graphs`` (``cuda_graph_scope``), ``optimizer_dtypes`` (the
    precision-aware optimizer's main params, exp_avg, exp_avg_sq), ``zero`` (1: the distributed optimizer; 3:
    Megatron-FSDP), ``fused_loss`` (a fused cross-entropy, ``--fused-loss``), ``attention`` (the attention kernel; None:
    the framework's), ``miss`` (a row's known-miss label, else :func:`miss_reason`'s), ``layout`` (Megatron-Core's
    ``pipeline_model_parallel_layout`` string, :func:`minipar.perf.pp_layout.parse_layout`; None: Megatron-Core's
    split), ``grad_bytes`` (the gradients' reduction dtype, bytes: fp32 for MoE-Zoo, else bf16, unless a row says),
    ``fp8_params`` (FP8 weights with FP8, ``Layout.fp8_params``: off for NeMo 1.0's rows, on for the rest); by
    release (:data:`FLEX`, :data:`A2A_OVERLAP`), then by model (:data:`RECIPES`), then by row
    (:data:`~minipar.perf.mb_archive.SETTINGS`, :data:`LAUNCHER`, then ``settings[(src, name)]``: one run's recipe,
    :mod:`minipar.perf.mb_cards`, :mod:`minipar.perf.dgxc`)."""
    zoo = src == "MoE-Zoo"
    release = {"tp_overlap": not zoo, "a2a_overlap": src in A2A_OVERLAP, "etp": 1 if zoo else None, "flex": src in FLEX}
    release["grad_bytes"] = 4 if zoo else 2  # Megatron-LM: fp32 under bf16; NeMo, Megatron-Bridge: bf16
    release["fp8_params"] = not src.startswith("NeMo")  # FP8 weights with FP8: all but NeMo 1.0's YAMLs (module doc)
    key = (src, name)
    row = {**SETTINGS.get(key, {}), **LAUNCHER.get(key, {}), **(settings or {}).get(key, {})}
    defaults = {"modules": None, "dp_overlap": True, "layout": None, "cuda_graphs": None, "optimizer_dtypes": None}
    stack = {"zero": 1, "fused_loss": src.startswith("MB"), "attention": None, "miss": None}  # MB: TE's fused loss
    return {**release, **defaults, **stack, **RECIPES.get(name, {}), **row}


def nemo_layout(row, settings: dict | None = None) -> Layout:
    """The row's layout (module doc: given and ASSUMED), its recipe's settings by :func:`recipe`."""
    return _layout(row, recipe(row[0], row[1], settings))


def _layout(row, r: dict) -> Layout:
    """:func:`nemo_layout` for a row whose recipe ``r`` is already read."""
    src, name, n, (tp, pp, cp, v, ep), mb, _, rl, fp8, *_ = row
    overlap = ({"dp"} if r["dp_overlap"] else set()) | ({"pp"} if pp > 1 else set())
    overlap |= {"tp"} if tp > 1 and r["tp_overlap"] else set()  # userbuffers
    overlap |= {"ep"} if ep > 1 and r["a2a_overlap"] else set()
    # 405B's 126 blocks on 64 chunks: the embedding and the loss count as a block each (given: the recipe's
    # account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split), so the first and last
    # model chunks hold one block fewer
    model, split, (first, last) = shape(name), None, (None, None)
    if r["layout"]:  # the recipe's own pipeline_model_parallel_layout string: every chunk's blocks
        v_layout, split = parse_layout(r["layout"], pp, model.layers, model.mtp_num_layers)
        if v_layout != v:
            raise ConfigError(f"{name}: the recipe's layout {r['layout']} is v={v_layout}, the table's v={v}")
    else:
        (first, last), *_ = edge_splits(model.layers, pp, v, "megatron")
    return Layout(
        dp=n // (tp * pp * cp),
        tp=tp,
        pp=pp,
        micro_batch=mb,
        v=v,
        zero=r["zero"],
        recompute="full" if rl else "selective" if r["modules"] else "none",
        recompute_layers=rl,
        recompute_modules=r["modules"],
        seq_parallel=tp > 1,
        overlap=frozenset(overlap),
        grad_bytes=r["grad_bytes"],
        flash_attention=True,
        fp8=fp8,
        fp8_params=fp8 and r["fp8_params"],
        ep=ep,
        etp=r["etp"],
        dispatcher="flex" if r["flex"] and ep > 1 else "alltoall",
        cuda_graphs=r["cuda_graphs"],
        optimizer_dtypes=r["optimizer_dtypes"],
        cp=cp,
        first_stage_layers=first,
        last_stage_layers=last,
        stage_split=split,
    )


def miss_reason(row) -> str | None:
    """Why the model is known to miss a row (module doc), or None: ``"provenance"`` (recomputed layers: the
    table and the release's recipe disagree), ``"seen"`` (GPT-OSS; Qwen3 30B in 26.02, ``"release"`` until 2026-11-29),
    NeMo's long-sequence rows (:mod:`minipar.perf.nemo_long`) were ``"attn"`` until their kernel was read, the Qwen3
    235B-A22B rows ``"a2a"`` until the overlap's share was chosen on another run (both 2026-11-29, module doc)."""
    *_, recompute_layers, _, _, _ = row
    if recompute_layers or tuple(row[:2]) in PROVENANCE:
        return "provenance"
    return "seen" if row[1] == "GPT-OSS-120B" or (row[1].startswith("Qwen3-30B") and row[0] == "MB 26.02") else None


def label(row, given: Layout, why: str | None = None) -> str:
    """``<source> <model> <GPUs> H100 <layout> <bf16|fp8>`` [``MISS:<why>``: ``why``, else :func:`miss_reason`];
    ``given`` the row's layout (:func:`nemo_layout`)."""
    src, name, n, (tp, pp, cp, v, ep), *_, rl, fp8, _, _ = row
    lay = ("fsdp" if given.zero == 3 else "dp") + f"{given.dp}" + (f"·tp{tp}" if tp > 1 else "")
    lay += f"·pp{pp}·v{v}" if pp > 1 else ""
    lay += (f"·cp{cp}" if cp > 1 else "") + (f"·ep{ep}" if ep > 1 else "") + (f"·etp{given.etp}" if given.etp else "")
    lay += "·flex" if given.dispatcher == "flex" else ""
    lay += "·graphs" if given.cuda_graphs else ""
    lay += f"·rc{rl}" if rl else ""
    lay += "·rc:" + "+".join(given.recompute_modules) if given.recompute_modules else ""
    why = why or miss_reason(row)
    return f"{src} {name} {n:4d} H100 {lay} {'fp8' if fp8 else 'bf16'}" + (f" MISS:{why}" if why else "")


def nemo_rows(dev: Device | None = None, rows=None, settings=None) -> list[tuple[str, Estimate, str, float]]:
    """``(label, estimate, "mfu", published)`` per row of ``rows`` (default the TEST rows, :data:`NEMO`) on ``dev``
    (default the H100 preset with Megatron-Core's efficiency, :func:`~minipar.perf.hardware.for_framework`); the
    published tokens/s (or TFLOP/s, Megatron's count) per GPU as an MFU of this model's count over the same peak;
    ``settings``: per-row recipe settings (:func:`recipe`)."""
    dev = dev or for_framework(GPUS["h100"], "megatron")
    out = []
    for row in NEMO if rows is None else rows:
        model, gb, metric, pub = shape(row[1]), row[5], row[-2], row[-1]
        tps = pub * 1e12 / megatron_flops_per_token(model) if metric == "tflops" else pub
        ours = training_flops(model, gb) / (gb * model.seq)
        r = recipe(row[0], row[1], settings)  # the run's loss kernel and attention kernel (None: the framework's)
        run_dev = with_fused_loss(dev) if r["fused_loss"] else dev
        run_dev = replace(run_dev, attention=r["attention"]) if r["attention"] else run_dev
        lay = _layout(row, r)
        out.append((label(row, lay, r["miss"]), estimate(model, run_dev, lay, gb), "mfu", tps * ours / dev.peak_flops))
    return out
