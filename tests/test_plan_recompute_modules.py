"""Megatron-Core's selective recomputation by module (``--recompute-modules``, ``Layout.recompute_modules``,
minipar.perf.recompute_modules): what each module frees and re-runs, by hand; the command line's one-line errors;
the published runs that set it (Megatron-MoE-ModelZoo's Qwen3 235B-A22B, minipar.perf.moe_zoo)."""

import json
from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.gemm import block_gemms, gemms_time, mla_up_gemms
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.memory import memory_per_gpu
from minipar.perf.model import estimate
from minipar.perf.moe import a2a_seconds, training_flops
from minipar.perf.recompute_modules import extra_flops, extra_seconds, freed_bytes
from minipar.perf.shape import ModelShape
from minipar.plan import main

MEG = for_framework(GPUS["h100"], "megatron")
MOE = ModelShape(8, 4096, 32, 4096, 32000, kv_heads=8, ffn=1536, gated=True, dropout=False, experts=64, top_k=8)
DENSE = replace(MOE, experts=0, top_k=1, ffn=14336)
LAY = Layout(dp=8, tp=2, pp=1, zero=1, recompute="selective", seq_parallel=True, flash_attention=True, ep=8, etp=1)
SHAPE = ["--layers", "8", "--hidden", "4096", "--heads", "32", "--kv-heads", "8", "--ffn", "1536", "--swiglu",
         "--vocab", "32000", "--seq", "4096", "--no-dropout", "--gpu", "h100", "--framework", "megatron",
         "--global-batch", "64"]  # fmt: skip
FIXED = ["--moe-experts", "64", "--moe-top-k", "8", "--tp", "2", "--pp", "1", "--dp", "8", "--ep", "8", "--sp"]


def test_freed_bytes_by_hand():
    """Per block and micro-batch of 1 × 4,096 tokens at tp 2 with sequence parallelism, bf16: layernorm frees the two
    norm outputs (2·s·h/2 values of 2 bytes), moe_act the activation's output (k·s·f/2), moe the k copies of the MLP's
    tensors and the k dispatched rows; under FP8 the GEMM inputs it frees are the 1-byte copies."""
    s, h, f, k = 4096, 4096, 1536, 8
    assert freed_bytes(MOE, 1, 2, True, 2, 1, False, ("layernorm",)) == 2 * (s * h / 2) * 2
    assert freed_bytes(MOE, 1, 2, True, 2, 1, False, ("moe_act",)) == k * s * f / 2 * 2
    mlp = 2 * f * 3 * s / 2
    assert freed_bytes(MOE, 1, 2, True, 2, 1, False, ("moe",)) == k * mlp + 2 * k * s * h
    assert freed_bytes(MOE, 1, 2, True, 2, 1, False, ("moe", "moe_act")) == k * mlp + 2 * k * s * h  # moe covers it
    assert freed_bytes(MOE, 1, 2, True, 2, 1, True, ("moe_act",)) == k * s * f / 2  # FP8: a 1-byte input
    assert freed_bytes(MOE, 1, 2, True, 2, 1, True, ("layernorm",)) == (s * h / 2) * (1 + 2)  # the router's in bf16
    assert freed_bytes(DENSE, 1, 2, True, 2, 1, False, ("core_attn",)) == 0


def test_what_each_module_runs_again():
    """layernorm: two norms read and write s·b·h/t at HBM bandwidth; moe: the router and experts' forward GEMMs, the
    activation and both all-to-alls again: the estimate's ep term grows by one dispatch and one combine per block and
    micro-batch, the executed FLOPs (TFLOP/s count) by the experts' and router's forward, the MFU's count not."""
    sec, n, tp = extra_seconds(MOE, MEG, replace(LAY, recompute_modules=("layernorm",)), 4096)
    assert (n, tp, sec) == (0, 0, pytest.approx(2 * 2 * 4096 * 4096 / 2 * 2 / MEG.hbm_bw, rel=1e-12))
    assert extra_seconds(MOE, MEG, LAY, 4096) == (0.0, 0, 0)  # core_attn only: the model's "selective"
    moe = replace(LAY, recompute_modules=("moe",))
    assert extra_seconds(MOE, MEG, moe, 4096)[1:] == (2, 0)
    base, more = estimate(MOE, MEG, replace(LAY, recompute_modules=("core_attn",)), 64), estimate(MOE, MEG, moe, 64)
    a2a = 2 * a2a_seconds(MOE, 4096, moe, MEG, MEG.bytes_per_value)
    assert more.time["ep"] - base.time["ep"] == pytest.approx(more.m * MOE.layers * a2a, rel=1e-9)
    assert more.time["compute"] > base.time["compute"] and more.mfu < base.mfu
    assert base.time == estimate(MOE, MEG, LAY, 64).time  # ("core_attn",) is the default
    flops = extra_flops(MOE, 64, moe)
    assert flops == MOE.layers * 2 * 64 * 4096 * (8 * 3 * 4096 * 1536 + 64 * 4096)
    assert more.tflops_per_gpu * more.time["total"] == pytest.approx(
        (training_flops(MOE, 64, "selective", True) + flops) / 1e12 / 16, rel=1e-9
    )


def test_memory_frees_all_blocks_but_the_one_recomputed():
    """Every held block frees what its modules free; the one being recomputed holds it again (as full recomputation's
    block does); without core_attn and without FlashAttention the s² scores stay."""
    m = 64 // 8
    for mods in (("layernorm",), ("moe_act",), ("moe",), ("layernorm", "moe")):
        lay = replace(LAY, recompute_modules=mods)
        freed = freed_bytes(MOE, 1, 2, True, 2, 1, False, mods, lay.expert_tp)
        got = memory_per_gpu(MOE, MEG, lay, m)["activations"]
        base = memory_per_gpu(MOE, MEG, LAY, m)["activations"]
        assert base - got == pytest.approx((MOE.layers - 1) * freed, rel=1e-12), mods
    eager = replace(LAY, flash_attention=False)
    kept = memory_per_gpu(DENSE, MEG, replace(eager, ep=1, etp=None, recompute_modules=("layernorm",)), m)
    assert kept["activations"] > memory_per_gpu(DENSE, MEG, replace(eager, ep=1, etp=None), m)["activations"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--recompute", "full", "--recompute-modules", "moe"], "use --recompute selective, not --recompute full"),
        (["--recompute-modules", "attn"], "recompute_modules=attn: use one or more of core_attn, layernorm"),
        (["--recompute-modules", ""], "use one or more of core_attn"),
    ],
)
def test_contradictions_are_one_line(extra, message, capsys):
    assert main([*SHAPE, *FIXED, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_modules_need_a_fixed_layout_and_experts(capsys):
    assert main([*SHAPE, "--moe-experts", "64", "--moe-top-k", "8", "--gpus", "16", "--recompute-modules", "moe"]) == 2
    assert "modifies a fixed layout" in capsys.readouterr().err
    dense = ["--tp", "2", "--pp", "1", "--dp", "8", "--sp", "--recompute-modules", "layernorm,moe_act"]
    assert main([*SHAPE, *dense]) == 2
    assert "moe and moe_act recompute experts; the model has none" in capsys.readouterr().err
    assert main(["--model", "7b", "--gpu", "a100", "--tp", "1", "--pp", "1", "--dp", "1", "--recompute-modules",
                 "core_attn", "--global-batch", "8", "--json"]) == 0  # fmt: skip
    capsys.readouterr()


def test_json_and_the_table_show_the_modules(capsys):
    assert main([*SHAPE, *FIXED, "--recompute-modules", "layernorm,moe", "--flash-attention", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["recompute_modules"] == ["layernorm", "moe"] and "sel-rc(layernorm+moe)" in r["layout"]
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--recompute-modules" in capsys.readouterr().out


def test_cpu_counts_refuse_modules():
    from minipar.perf.layout_checks import check_layout

    with pytest.raises(ConfigError, match="GPUs only"):
        check_layout(DENSE, Layout(1, 1, 1, recompute="selective", recompute_modules=("layernorm",)), 8, "minipar")


def test_the_long_context_runs_check_cudnn_attention_at_16k_to_128k():
    """Megatron-MoE-ModelZoo's long-context Qwen3 235B-A22B rows (16K-128K tokens, CP 1-8, layernorm and moe
    recomputed, Megatron-Core's cuDNN attention): each within 5 % (-1.9 … +2.4 %); the attention core is most of a
    block's FLOPs there, so these are the rows that check cuDNN's measured rate at long sequences."""
    from minipar.perf.flops import attention_core_flops, layer_gemm_flops
    from minipar.perf.moe_zoo import LONG, zoo_rows
    from minipar.perf.nemo import shape

    rows = [r for r in zoo_rows() if " s=" in r[0]]
    assert len(rows) == len(LONG) == 4
    for label, e, metric, pub in rows:
        assert abs(getattr(e, metric) / pub - 1) < 0.05, label
        assert e.layout.recompute_modules == ("layernorm", "moe") and e.fits
    big = shape("Qwen3-235B-A22B s=131072")
    assert attention_core_flops(big, 1) > layer_gemm_flops(big, 1)  # at 128K the core outweighs the dense GEMMs


def test_the_search_tries_the_moe_module_sets_under_megatron_core():
    """With experts under Megatron-Core, "selective" is tried with Megatron-Core's default (core_attn) and with
    search.MOE_MODULE_SETS; a dense model, or a PyTorch stack, only with the default."""
    from minipar.perf.search import MOE_MODULE_SETS, plan, recompute_choices

    assert recompute_choices(MOE, MEG, ("none", "selective", "full")) == [
        ("none", None), ("selective", None), ("full", None), *(("selective", m) for m in MOE_MODULE_SETS)
    ]  # fmt: skip
    assert recompute_choices(DENSE, MEG, ("selective",)) == [("selective", None)]
    assert recompute_choices(MOE, GPUS["h100"], ("selective",)) == [("selective", None)]  # framework "pytorch"
    assert recompute_choices(MOE, MEG, ("full",)) == [("full", None)]
    rows = plan(MOE, MEG, 16, 64, micro_batches=(1,), recomputes=("selective",), zeros=(1,), eps=(8,), etp=1)
    assert {e.layout.recompute_modules for e, _ in rows} == {None, *MOE_MODULE_SETS}


# MLA (small), one dense first block, experts of 512 and a shared one of 512: DeepSeek-V3's kinds at a small size
MLA = replace(MOE, heads=16, kv_heads=None, q_lora_rank=512, kv_lora_rank=256, qk_head_dim=64, qk_pos_emb_head_dim=32,
              v_head_dim=64, ffn=8192, moe_ffn=512, shared_ffn=512, dense_layers=1)  # fmt: skip


def test_mla_up_proj_mlp_and_shared_experts_by_hand():
    """Per block and micro-batch of 4,096 tokens at tp 2 (sequence parallelism, bf16 unless FP8): ``mla_up_proj`` frees
    Q, K, V (a·(2·d_qk + d_v) values ÷ t) and runs both up projections and their copies again; ``mlp`` (dense blocks)
    and ``shared_experts`` (MoE blocks) free the MLP's up/gate outputs and the activation's output and run its GEMMs,
    the activation and one TP collective again; under FP8 ``mlp`` keeps its input in bf16 where FP8 kept 1 byte."""
    (dense, _), (moe, _) = MLA.block_kinds()
    s, t, a, h = 4096, 2, 16, 4096
    qkv = a * (2 * 96 + 64) * s / t * 2
    assert freed_bytes(moe, 1, t, True, 2, 1, False, ("mla_up_proj",)) == qkv
    assert freed_bytes(dense, 1, t, True, 2, 1, False, ("mlp",)) == (2 * 2 + 2) * 8192 * s / t
    assert freed_bytes(dense, 1, t, True, 2, 1, True, ("mlp",)) == (2 * 2 + 1) * 8192 * s / t - s * h / t * (2 - 1)
    assert freed_bytes(moe, 1, t, True, 2, 1, False, ("mlp",)) == 0  # a MoE block has no dense MLP
    assert freed_bytes(moe, 1, t, True, 2, 1, False, ("shared_experts",)) == (2 * 2 + 2) * 512 * s / t
    both = freed_bytes(moe, 1, t, True, 2, 1, False, ("moe", "shared_experts"))
    assert both == freed_bytes(moe, 1, t, True, 2, 1, False, ("moe",))  # moe re-runs the shared MLP already
    lay = replace(LAY, recompute_modules=("mla_up_proj",))
    sec = gemms_time(MEG, mla_up_gemms(moe, s, t), False) + 2 * s * a * (2 * 96 + 64) / t * 2 / MEG.hbm_bw
    assert extra_seconds(moe, MEG, lay, s) == (pytest.approx(sec, rel=1e-12), 0, 0)
    lay = replace(LAY, recompute_modules=("mlp",))
    sec = gemms_time(MEG, block_gemms(dense, s, t)[-2:], False) + 3 * s * 8192 / t * 2 / MEG.hbm_bw
    assert extra_seconds(dense, MEG, lay, s) == (pytest.approx(sec, rel=1e-12), 0, 1)
    assert extra_seconds(dense, MEG, replace(lay, tp=1, seq_parallel=False), s)[2] == 0  # no TP collective at tp 1
    assert extra_seconds(moe, MEG, replace(LAY, recompute_modules=("moe",)), s)[1:] == (2, 1)  # the shared MLP's too
    assert extra_seconds(MOE, MEG, replace(LAY, recompute_modules=("moe",)), s)[1:] == (2, 0)  # no shared expert
    up = sum(n * k for _, n, k in mla_up_gemms(MLA, 1, 1))
    rows = 2 * 64 * 4096
    flops = extra_flops(MLA, 64, replace(LAY, recompute_modules=("mla_up_proj", "mlp", "shared_experts")))
    assert flops == MLA.layers * rows * up + rows * 3 * h * 8192 + (MLA.layers - 1) * rows * 3 * h * 512


def test_the_modules_free_memory_and_cost_time_in_the_estimate():
    """The estimate with DeepSeek-V3's recipe's modules keeps less and runs longer than without: compute (the re-run
    GEMMs) and the exposed TP time (the dense MLP's collective again) grow, the activations shrink."""
    lay = replace(LAY, ep=4, dp=4, pp=1)
    base = estimate(MLA, MEG, lay, 64)
    more = estimate(MLA, MEG, replace(lay, recompute_modules=("mla_up_proj", "mlp", "shared_experts")), 64)
    assert more.time["compute"] > base.time["compute"] and more.time["tp"] > base.time["tp"]
    assert more.mem["activations"] < base.mem["activations"] and more.mfu < base.mfu


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--recompute-modules", "mla_up_proj"], "mla_up_proj recomputes MLA's up projections; give --kv-lora-rank"),
        (["--recompute-modules", "mlp"], "mlp recomputes a dense MLP; every block has experts (drop mlp)"),
        (["--recompute-modules", "shared_experts"], "shared_experts needs a shared expert"),
    ],
)
def test_modules_the_model_does_not_have_are_one_line(flags, message, capsys):
    assert main([*SHAPE, *FIXED, "--recompute", "selective", *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_the_search_tries_deepseeks_modules_with_mla():
    """An MLA model under Megatron-Core: the search adds DeepSeek-V3's recipe's modules, ``mla_up_proj`` and (with dense
    first blocks) ``mlp``."""
    from minipar.perf.search import MOE_MODULE_SETS, recompute_choices

    mla = [("selective", None), *(("selective", m) for m in MOE_MODULE_SETS), ("selective", ("mla_up_proj", "mlp"))]
    assert recompute_choices(MLA, MEG, ("selective",)) == mla
    assert recompute_choices(replace(MLA, dense_layers=0), MEG, ("selective",))[-1] == ("selective", ("mla_up_proj",))


def test_lesson_08_quotes_the_deepseek_recipes_modules_as_modelled():
    """Lesson 08's sentence on DeepSeek-V3's recomputed modules (``mla_up_proj mlp``) quotes the model: the test row's
    memory with them, the same layout's without, and the step time they add."""
    from pathlib import Path

    from minipar.perf.hardware import with_fused_loss
    from minipar.perf.nemo import NEMO, nemo_layout, shape

    row = next(r for r in NEMO if r[1] == "DeepSeek-V3")
    model, given = shape(row[1]), nemo_layout(row)
    dev = with_fused_loss(for_framework(GPUS["h100"], "megatron"))
    with_mods = estimate(model, dev, given, row[5])
    without = estimate(model, dev, replace(given, recompute="none", recompute_modules=None), row[5])
    text = Path(__file__).resolve().parents[1].joinpath("lessons", "08_memory.ipynb").read_text(encoding="utf-8")
    more = with_mods.time["total"] / without.time["total"] - 1
    quoted = f"{with_mods.mem['total'] / 2**30:.1f} GiB", f"{without.mem['total'] / 2**30:.1f} GiB", f"{more:.1%}"
    assert quoted == ("48.6 GiB", "65.7 GiB", "1.6%")
    assert all(q.replace("%", " %") in text or q in text for q in quoted)


def test_core_attn_under_flash_costs_its_forward_on_megatron_only():
    """Megatron-Core wraps the attention core in a checkpoint whenever ``core_attn`` is a recomputed module, whatever
    the backend (``attention.py``: ``checkpoint_core_attention``), so under FlashAttention the backward runs the core's
    forward again though no scores were dropped; Megatron-LM's legacy path and the PyTorch stacks skip it. The step
    under ``--framework megatron`` grows by one core forward per block and micro-batch; under pytorch it does not."""
    from minipar.perf.block_time import block_terms
    from minipar.perf.flops import attention_core_flops
    from minipar.perf.gemm import attention_rate

    model = ModelShape(8, 4096, 32, 8192, 32000, True, 8, 14336, True)
    base = Layout(dp=8, tp=1, pp=1, micro_batch=1, zero=1, recompute="none", flash_attention=True)
    sel = replace(base, recompute="selective", recompute_modules=("core_attn",))
    for fw, charged in (("megatron", True), ("pytorch", False)):
        dev = for_framework(GPUS["h100"], fw)
        grown = block_terms(model, dev, sel)["b0"] - block_terms(model, dev, base)["b0"]
        core = attention_core_flops(model, 1, 8192, 8192, True) / attention_rate(dev, True, 32, 8192) * 0.5
        assert grown == pytest.approx(core if charged else 0.0, rel=1e-9, abs=1e-12), fw
