"""minipar.perf (a MODEL) against published runs, a declared fit set and test set per device, and its own consistency.

Fit sets (one chosen constant per device and framework, its large-GEMM efficiency: ``published.fit_gemm_efficiency``):
A100 on Narayanan et al. 2021 Table 1; H100 on llm-foundry's single-node H100 rows (s = 2048, 4096); H100 under
Megatron-Core (``--framework megatron``) on NeMo 24.07's DGX-H100 table (``minipar.perf.nemo.NEMO_FIT``).
Test sets: ``minipar.perf.runs`` (MegaScale Table 2, Table 3's baseline, Fig. 9; Narayanan Table 2;
llm-foundry's A100 rows; Llama 3 Table 4 and llm-foundry's other H100 rows), not tuned on. Every row's
error is printed (``pytest -s``), per device; the target is 15 % per row and a median within 7 %.
Known misses, by a rule on the row's layout, stay in the test set and are held to what they measure
today, so that a change that makes them worse fails: DeepSpeed's ZeRO-3 rows of Narayanan Table 2
(+25 … +43 %: DeepSpeed's real overlap is not first principles); llm-foundry's ``MISS:comm`` rows
(FULL_SHARD across nodes with <= 2 sequences per micro-batch: -36 … -63 %, the model's inter-node ring),
``MISS:seen`` rows (30b at s = 8192 on both devices, +21 %, and the A100's 13b there, -16 %: labels written after
their errors were seen, ``minipar.perf.foundry.miss_reason``; until 2026-11-27 ``MISS:attn``, the long rows while
they ran at FlashAttention-2's rate instead of their Triton kernel's, and ``MISS:ckpt``, activation checkpointing,
-8 … -25 %:
their FSDP collectives were not hidden on the H100,
``test_llm_foundry_checkpointed_rows_read_low_from_unhidden_communication``, now charged by the H100's overlap
cost). The rows for recompute_layers and hsdp (``minipar.perf.mb_archive``, ``minipar.perf.fms``): ``MISS:provenance``
and ``MISS:compile``, with their bands. Three labels written after their errors were seen are gone: Llama 3's rows
(``MISS:scale``) and Megatron-Bridge's Llama 3 70B rows (``MISS:last-stage``) since the H100's attention core runs at
its measured rate (``minipar.perf.gemm.ATTN_EFF_H100``); the Mixtral rows (``MISS:moe``) since the run's expert TP of
1 is modelled (``Layout.etp``: its EP groups inside a node).
"""

from dataclasses import replace

import pytest

from minipar import ConfigError
from minipar.comm.cost import all_reduce_time
from minipar.model.gpt import GPT, GPTConfig
from minipar.perf.hardware import GPUS, cpu_device, for_framework
from minipar.perf.layout import Layout
from minipar.perf.memory import held_layers
from minipar.perf.model import (
    _simulated,
    activation_bytes_per_layer,
    dp_time,
    estimate,
    gpt_flops_per_token,
    group_link,
    memory_per_gpu,
    pipeline_makespan,
    stage_params,
)
from minipar.perf.published import (
    MODELS,
    NARAYANAN_TABLE1,
    fit_gemm_efficiency,
    fit_sets,
    narayanan_row,
    summary,
)
from minipar.perf.published import (
    test_sets as held_out_sets,
)
from minipar.perf.runs import (
    LLAMA3_405B,
    LLAMA3_TABLE4,
    MS_175B,
    llama3_row,
    megascale_layout,
)
from minipar.perf.search import CP_MIN_TOKENS, cp_degrees, plan, rank_correlation
from minipar.perf.shape import ModelShape, shape_of
from minipar.perf.sharding import collectives, links, stage_psi
from minipar.plan import main
from minipar.pp.schedules import bubble_formula, make_schedule, one_f_one_b, simulate
from minipar.runtime.mesh import divisors
from minipar.zero.flat import zero_bytes_formula

TOL = 0.15


@pytest.mark.parametrize("row", NARAYANAN_TABLE1, ids=[f"{r[0]}B" for r in NARAYANAN_TABLE1])
def test_fit_set_narayanan_table1_row(row):
    """Fit set: Narayanan et al. 2021 (arXiv:2104.04473) Table 1, one row: (t, p, d), batch as published;
    micro-batch, v and DDP from the authors' examples/sc21/run_table_1.sh."""
    e, published = narayanan_row(row)
    assert e.fits, f"{row[0]}B should fit on 80 GiB as it did on Selene: {e.mem['total'] / 2**30:.1f} GiB"
    err = (e.tflops_per_gpu - published) / published
    assert abs(err) <= TOL, f"{row[0]}B: model {e.tflops_per_gpu:.1f} vs published {published} TFLOP/s ({err:+.1%})"


@pytest.mark.parametrize("device, framework", [("a100", "pytorch"), ("h100", "pytorch"), ("h100", "megatron")])
def test_the_chosen_constant_is_the_fit_sets_best(device, framework):
    """Each device's GEMM efficiency is the grid point with the smallest median |error| on ITS fit set (chosen
    there, not on the tests): A100 0.68 on Narayanan Table 1, H100 0.64 on llm-foundry's single-node rows (with
    its memory passes and overlap cost: ``test_the_h100s_three_constants_are_chosen_together``), H100 under
    Megatron-Core 0.60 on NeMo 24.07's table."""
    grid = fit_gemm_efficiency(device, framework=framework)
    assert min(grid, key=grid.get) == for_framework(GPUS[device], framework).gemm_efficiency, grid
    fit = fit_sets()[device.upper() + ("" if framework == "pytorch" else f" {framework}")]
    s = summary([getattr(e, m) / p - 1 for _, e, m, p in fit])
    assert s["median"] <= 0.07 and abs(s["worst"]) <= 0.15, s


def test_the_h100s_three_constants_are_chosen_together():
    """The H100's PyTorch-stack constants (memory passes, overlap cost, large-GEMM efficiency) are the minimum of
    the declared grid on its fit set (``published.fit_h100_pytorch``, ``pytest -s`` prints the best five), the
    efficiency at most the isolated GEMM rate measured on an H100 (0.75); the one-constant model read 8.0 %."""
    from minipar.perf.hardware import GEMM_EFF_BY_DEVICE, MEM_PASSES, OVERLAP_COST
    from minipar.perf.published import fit_h100_pytorch

    grid = fit_h100_pytorch()
    for k in sorted(grid, key=grid.get)[:5]:
        print(f"mem_passes {k[0]:g}, overlap_cost {k[1]:g}, gemm_efficiency {k[2]:.2f}: median |error| {grid[k]:.1%}")
    best = min(grid, key=grid.get)
    assert best == (MEM_PASSES["H100"], OVERLAP_COST["H100"], GEMM_EFF_BY_DEVICE["H100"]), best
    assert best[2] <= 0.75 and grid[best] <= 0.025, grid[best]  # 2.1 % (1.9 % before each unit paid its latency)
    h = GPUS["h100"]
    assert (h.mem_passes, h.overlap_cost) == best[:2] and for_framework(h, "megatron").overlap_cost == 0.0


# known misses by reason: (lowest, highest) error measured today (module doc)
MISS_BANDS = {  # the first key a label holds
    # minipar.perf.mb_archive: GPT-OSS 120B, MISS:seen (+49 … +53 %) and 25.11's MISS:provenance (+50 %); Qwen3 30B-A3B
    # on PP 2 · VP 12 · EP 8: 26.02's MISS:seen (+70 %; MISS:release until 2026-11-29) and 25.11's MISS:provenance
    # (+65 %); 25.09's at micro-batch 2 (MISS:provenance: the table's VP 24, the recipe's 12): +41 %
    "GPT-OSS-120B": (0.40, 0.65),
    "MB 25.09 Qwen3-30B-A3B   16 H100 dp8·pp2·v12·ep8": (0.30, 0.55),
    "Qwen3-30B-A3B   16 H100 dp8·pp2·v12·ep8": (0.55, 0.85),
    "zero3": (0.30, 3.40),
    # foundry 30b at s = 8192 +21 % (both devices), A100 13b -16 %; Megatron-LM 32B -26 %; BLOOM prequel +20 … +27 %;
    # nanotron -16 %, +18 … +27 %
    "MISS:seen": (-0.27, 0.30),
    "MISS:compile": (-0.20, 0.15),  # torchtitan -11 … -7 %, fms-fsdp -3 %, OLMo-core -10 … +6 %
    # minipar.perf.mb_archive: Llama 3 8B, recompute_layers 5, fp8 (-12 %); minipar.perf.moe_zoo: its FSDP row as the
    # table says (TP 2: -21 %; the launch line's TP 1 reads +4 %), its "A2A" row (+25 %)
    "MISS:provenance": (-0.25, 0.30),
    "MISS:step": (0.50, 1.80),  # minipar.perf.nanotron: three 64-node rows, 80B on 4 nodes (+60 … +168 %)
}


def _band(label):
    return next((b for k, b in MISS_BANDS.items() if k in label), None)


def test_fit_and_test_sets_per_device():
    """Both sets per device, printed row by row (``pytest -s``; the README and lesson 07 quote them). Fit
    sets: every A100 row within 15 %, every H100 row within 21 %. Test sets: every row but the known misses
    within 15 %, the misses inside their band; medians per device over the rows that are not known misses
    within 7 %; the Megatron-LM and MegaScale rows within 10 %; the H100 rows that are not known misses no longer
    optimistic as a set (signed median within ±7 %; all H100 rows: +23 % with one A100-chosen efficiency for every
    device, -0.6 % now)."""
    for kind, sets in (("FIT", fit_sets()), ("TEST", held_out_sets())):
        for device, rows in sets.items():
            errs, hit = [], []
            for label, e, metric, pub in rows:
                err = getattr(e, metric) / pub - 1
                errs.append(err)
                val = getattr(e, metric)
                print(f"{kind:4s} {device} {label:52s} {metric:14s} published {pub:8.3f} model {val:8.3f} {err:+6.1%}")
                # runs that ran: the model's memory may read above the usable 90 % (not above the 80 GiB + 1 %)
                assert e.fits or (
                    label.startswith(("Llama3", "NeMo", "MB", "DGXC", "MoE-Zoo")) and e.mem["total"] < 1.01 * 80 * 2**30
                ), label
                band = _band(label) if kind == "TEST" else None
                if band:
                    assert band[0] <= err <= band[1], f"{label}: {err:+.1%} (a known miss, now outside {band})"
                else:
                    hit.append(err)
                    assert abs(err) <= TOL, f"{label}: {err:+.1%}"
                if label.startswith(("MegaScale", "Megatron-LM README")) or label.endswith(" ptd"):
                    assert abs(err) <= 0.10, f"{label}: {err:+.1%} (Megatron-LM / MegaScale)"
            s, h = summary(errs), summary(hit)
            print(
                f"{kind} {device}: {s['rows']} rows, median |error| {s['median']:.1%}, worst {s['worst']:+.1%}, "
                f"{s['within_15']} within 15 %; without the known misses: {h['rows']} rows, median {h['median']:.1%}, "
                f"worst {h['worst']:+.1%}"
            )
            assert h["median"] <= 0.07, (kind, device, h)
            if kind == "TEST" and device == "H100":
                assert abs(sorted(hit)[len(hit) // 2]) <= 0.07, "the H100 rows, as a set, are not biased one way"


# One Llama 3 block in eager bf16 PyTorch on one H100 SXM, forward + backward at micro-batch 1, fresh gradients,
# FlashAttention-2 (SDPA's "flash" backend), measured with examples/attention_rate.py on 2026-11-27 (PyTorch 2.11,
# CUDA 13.0; examples/h100_2026-11-27/probe3.jsonl): (model, s) -> (seconds, profiler's kernel seconds by kind).
H100_BLOCKS = {
    ("8B", 8192): (27.34e-3, {"gemm": 13.41e-3, "attn": 6.67e-3, "other": 5.92e-3}),
    ("70B", 4096): (38.77e-3, {"gemm": 27.69e-3, "attn": 4.18e-3, "other": 5.99e-3}),
    ("70B", 8192): (84.60e-3, {"gemm": 56.76e-3, "attn": 15.60e-3, "other": 11.81e-3}),
}


# One MPT block as llm-foundry's code runs it (bf16 LayerNorm, fused QKV, GELU MLP), eager bf16, FlashAttention-2,
# forward + backward at a micro-batch of llm-foundry's H100 table, one H100 SXM, 2026-11-27 (examples/attention_rate.py
# --mpt; examples/h100_2026-11-27/mpt.jsonl): (model, micro-batch, s) -> (seconds, kernel seconds by kind).
H100_MPT_BLOCKS = {
    ("1b", 14, 2048): (17.31e-3, {"gemm": 10.73e-3, "attn": 3.30e-3, "other": 2.24e-3}),
    ("1b", 2, 16384): (40.95e-3, {"gemm": 12.43e-3, "attn": 26.54e-3, "other": 2.61e-3}),
    ("3b", 5, 4096): (20.99e-3, {"gemm": 12.89e-3, "attn": 6.15e-3, "other": 2.06e-3}),
    ("7b", 6, 2048): (25.84e-3, {"gemm": 19.75e-3, "attn": 3.33e-3, "other": 2.01e-3}),
    ("13b", 2, 2048): (13.29e-3, {"gemm": 10.59e-3, "attn": 1.51e-3, "other": 0.89e-3}),
    ("30b", 3, 2048): (36.46e-3, {"gemm": 34.10e-3, "attn": 3.91e-3, "other": 1.90e-3}),
}


def _block(shape, b, split):
    """(model's seconds for one block's forward + backward, measured memory-bound passes) on the H100 preset, FA2."""
    from minipar.perf.flops import activation_bytes_per_layer
    from minipar.perf.model import _pipeline_megatron

    dev = replace(GPUS["h100"], attention="flash")
    lay = Layout(dp=1, tp=1, pp=1, micro_batch=b, flash_attention=True, recompute="none")
    one, two = (_pipeline_megatron(replace(shape, layers=n), dev, lay, 1)["compute"] for n in (1, 2))
    act = activation_bytes_per_layer(shape, b, 1, "none", False, 2, True)
    return two - one, split["other"] / (3 * act / dev.hbm_bw)


def test_eager_blocks_measured_on_an_h100():
    """The H100's PyTorch-stack constants against a device (chosen on llm-foundry's rows, held to blocks they were not
    chosen on). Measured: a Llama 3 block in torchtitan's eager code crosses HBM 4.5-5.5 times per activation byte in
    its memory-bound kernels, an MPT block in llm-foundry's code 1.0-1.5 times, its GEMMs at 0.67-0.82 of the peak;
    the gap between the two stacks' blocks is ``GATED_EAGER_PASSES`` (3.8) within 0.1, and the fit's ``mem_passes``
    lies between them. llm-foundry's published step is 1.3-1.7 times its layers × its block measured (× 4/3 when
    checkpointed): its runs lose a third of their time outside the blocks, which the fit's constants carry, so the
    model times every block, of both stacks, 10-40 % above the measured one (+15 … +39 %)."""
    from statistics import mean

    from minipar.perf.foundry import H100_FIT, H100_TEST, MPT, foundry_row, mpt_shape
    from minipar.perf.hardware import GATED_EAGER_PASSES
    from minipar.perf.torchtitan import LLAMA31

    passes, over = {"llama": [], "mpt": []}, []
    for (name, s), (measured, split) in H100_BLOCKS.items():
        model, p = _block(replace(LLAMA31[name], seq=s), 1, split)
        print(f"Llama 3 {name} block, s={s}: measured {measured * 1e3:.1f} ms, model {model * 1e3:.1f} ms "
              f"({model / measured - 1:+.1%}); memory-bound kernels {p:.1f} passes")  # fmt: skip
        assert 4.5 <= p <= 5.5, (name, s, p)
        passes["llama"].append(p)
        over.append(model / measured - 1)
    rows = {(r[0], r[4], r[1]): r for r in H100_FIT + H100_TEST}
    for (name, b, s), (measured, split) in H100_MPT_BLOCKS.items():
        shape = mpt_shape(name, s)
        model, p = _block(shape, b, split)
        l, h = MPT[name][:2]
        gemm = 6 * b * s * 12 * h * h / split["gemm"] / GPUS["h100"].peak_flops
        row = rows[name, b, s]
        e = foundry_row(row, GPUS["h100"])
        outside = e.time["total"] * e.mfu / (row[3] / 100) / e.m / (l * measured * (4 / 3 if row[8] else 1))
        print(f"MPT {name} block, b={b}, s={s}: measured {measured * 1e3:.1f} ms, model {model * 1e3:.1f} ms "
              f"({model / measured - 1:+.1%}); {p:.2f} passes; GEMMs at {gemm:.2f} of the peak; published step "
              f"{outside:.2f} x the blocks")  # fmt: skip
        assert 1.0 <= p <= 1.5 and 0.65 <= gemm <= 0.85 and 1.3 <= outside <= 1.7, (name, s)
        passes["mpt"].append(p)
        over.append(model / measured - 1)
    assert abs(mean(passes["llama"]) - mean(passes["mpt"]) - GATED_EAGER_PASSES) <= 0.1
    assert max(passes["mpt"]) < GPUS["h100"].mem_passes < min(passes["llama"])
    assert 0.10 <= min(over) and max(over) <= 0.40, over


# A whole MPT-1B step on one H100 SXM, 2026-11-27 (examples/attention_rate.py --mpt-step; mpt_step.jsonl there): fp32
# master weights under bf16 autocast, fused AdamW, FA2: (b, s) -> seconds of (the step, the step without the
# optimizer, the 24 blocks alone under the same autocast).
H100_MPT1B_STEPS = {(4, 2048): (170.95e-3, 160.65e-3, 141.57e-3), (8, 2048): (317.57e-3, 305.68e-3, 273.49e-3)}


def test_a_whole_mpt_step_measured_on_an_h100():
    """Where llm-foundry's steps spend the 1.3-1.7x beyond their bf16 blocks (``test_eager_blocks_measured_on_an_h100``)
    on one H100: its blocks under autocast over fp32 weights are 1.15-1.2x the bf16 blocks (the weights' casts), the
    embedding, logit layer and loss add 12-14 % of the blocks, the optimizer 4-7 %; the whole step is 1.34-1.44x the
    bf16 blocks, and llm-foundry's published 1B step on 8 GPUs 1.05-1.15x the one-GPU step per sequence (FSDP's
    collectives, the host). None of these has its own term in the model: the fit's constants carry them."""
    from minipar.perf.foundry import H100_FIT, foundry_row

    block = H100_MPT_BLOCKS["1b", 14, 2048][0] / 14  # one bf16 block, seconds per sequence
    row = next(r for r in H100_FIT if r[:2] == ("1b", 2048))
    e = foundry_row(row, GPUS["h100"])
    published = e.time["total"] * e.mfu / (row[3] / 100) / e.m / row[4]  # seconds per sequence
    for (b, _), (step, no_opt, blocks) in H100_MPT1B_STEPS.items():
        cast = blocks / (24 * b) / block
        around, optimizer, whole = no_opt / blocks - 1, (step - no_opt) / blocks, step / b / (24 * block)
        print(f"MPT-1B step, b={b}: blocks under autocast {cast:.2f}x bf16's; embedding, logits and loss "
              f"+{around:.0%}, optimizer +{optimizer:.0%}; step {whole:.2f}x the bf16 blocks; published "
              f"{published / (step / b):.2f}x this step")  # fmt: skip
        assert 1.12 <= cast <= 1.22 and 0.10 <= around <= 0.15 and 0.03 <= optimizer <= 0.08, (b, cast, around)
        assert 1.3 <= whole <= 1.5 and 1.0 <= published / (step / b) <= 1.2, (b, whole, published)


def test_llm_foundry_checkpointed_rows_read_low_from_unhidden_communication():
    """Why ``MISS:ckpt`` read low (``foundry.compute_only_hfu``, ``pytest -s`` prints it per size): on the H100,
    with the model's FSDP collectives counted as exposed, a model size's checkpointed and non-checkpointed rows
    agree (7b, 13b: medians within 0.04 of the peak, where their raw HFU differs by more than 0.07), and the
    utilisation rises with the model; on the A100 the same reading passes 0.8 of the peak (its collectives
    were hidden). s <= 4096 only (the longer rows test the attention kernel)."""
    from statistics import median

    from minipar.perf.foundry import A100_TEST, H100_FIT, H100_LARGE, H100_TEST, MPT, compute_only_hfu

    for gpu, rows in (("h100", H100_FIT + H100_TEST + H100_LARGE), ("a100", A100_TEST)):
        by = {}
        for r in (r for r in rows if r[1] <= 4096):
            raw = r[3] / 100 * (4 / 3 if r[8] else 1.0)
            by.setdefault(r[0], {}).setdefault(r[8], []).append((raw, compute_only_hfu(r, GPUS[gpu])))
        sizes = [k for k in MPT if k in by]
        for k in sizes:
            for ck, xs in sorted(by[k].items()):
                raw, exp = [x[0] for x in xs], [x[1] for x in xs]
                lo, hi = min(exp), max(exp)
                print(f"{gpu} {k:>4s} ckpt={ck!s:5s} HFU {min(raw):.2f}-{max(raw):.2f}  comm exposed {lo:.2f}-{hi:.2f}")
        if gpu == "a100":
            assert max(x[1] for k in sizes for xs in by[k].values() for x in xs) > 0.8
            continue
        for k in ("7b", "13b"):
            (r0, e0), (r1, e1) = [[median(x[i] for x in by[k][ck]) for i in (0, 1)] for ck in (False, True)]
            assert abs(e1 - e0) <= 0.04 and abs(r1 - r0) > 0.07, (k, r0, r1, e0, e1)
        meds = [median(x[1] for xs in by[k].values() for x in xs) for k in sizes]
        assert meds == sorted(meds), dict(zip(sizes, meds))


def test_megascale_uses_the_papers_settings():
    """MegaScale §6.1 / Table 1: v = 6 for 175B, V = 64,000, 128 heads, s = 2048; the paper's MFU trend
    (falling with more GPUs at a fixed batch) is reproduced by the model, if less steeply."""
    lay = megascale_layout(12288, "megascale")
    assert (lay.tp, lay.pp, lay.v, lay.dp) == (8, 8, 6, 192)
    assert (MS_175B.heads, MS_175B.vocab, MS_175B.seq, MS_175B.layers, MS_175B.hidden) == (128, 64000, 2048, 96, 12288)
    mfu = [estimate(MS_175B, GPUS["a100"], megascale_layout(n, "megatron"), 768).mfu for n in (256, 512, 768, 1024)]
    assert mfu == sorted(mfu, reverse=True) and mfu[0] - mfu[-1] > 0.02, mfu


def test_tp_straddling_nodes_is_costed_on_the_inter_node_link():
    """Before: tp_link checked only t <= gpus_per_node, so tp 3, 5, 6, 7 on 8-GPU nodes were NVLink."""
    dev = GPUS["a100"]
    for t in (3, 5, 6, 7):
        assert group_link(dev, t, 1)[1] < dev.intra[1] and group_link(dev, t, 1)[0] > dev.intra[0], t
    for t in (1, 2, 4, 8):
        assert group_link(dev, t, 1) == dev.intra, t
    assert group_link(dev, 2, 4) == dev.intra  # dp over tp-strided ranks, inside a node
    # across nodes: the inter-node rate times the group's fewest ranks on a node (its rails), capped by NVLink
    assert group_link(dev, 3, 2) == dev.inter  # ranks 6, 8, 10: one of them on the first node
    # the ring's latency per step: of every k steps, k - 1 on NVLink and one across the network (NCCL's tuning model)
    mixed = lambda k: ((k - 1) * dev.intra[0] + dev.inter[0]) / k  # noqa: E731
    assert group_link(dev, 6, 1) == (mixed(2), 2 * dev.inter[1])  # tp 6: ranks 6, 7 | 8 .. 11: two on a node
    assert group_link(dev, 16, 1) == (mixed(8), min(8 * dev.inter[1], dev.intra[1]))  # FSDP over 2 nodes
    assert group_link(dev, 16, 8) == dev.inter  # dp beside tp 8: one rank of the group per node
    assert group_link(dev, 2, 8, collective=False) == dev.inter  # a pipeline send: one NIC
    model = ModelShape(24, 6144, 48)
    e6 = estimate(model, dev, Layout(dp=1, tp=6, pp=1), 8)
    e4 = estimate(model, dev, Layout(dp=1, tp=4, pp=1), 8)
    assert e6.tp_across_nodes and not e4.tp_across_nodes
    assert e6.time["tp"] > 3 * e4.time["tp"]  # the inter-node link is ~10x slower; tp6 also sends more
    best = [e for e, why in plan(MODELS["145b"], dev, 1536, 2304) if not why][0]
    assert dev.gpus_per_node % best.layout.tp == 0, best.layout


def test_80_gb_cards_are_80_gib():
    """Before: 80e9 bytes, so the 90 % fit limit was 7 % too tight."""
    for name in ("a100", "h100"):
        assert GPUS[name].mem_bytes == 80 * 2**30
    assert GPUS["a100-40gb"].mem_bytes == 40 * 2**30


def test_each_collective_pays_its_own_ring_latency():
    """Before: one ring latency per pass over all of a stage's parameters, so llm-foundry's FSDP rows at 128, 256 and
    512 H100s grew optimistic with the GPU count (1b ZeRO-2: +3, +7, +14 %; 7b ZeRO-3: +3, +6, +11 %). FSDP issues one
    all-gather and one reduce-scatter per unit (a block, and the root), Megatron-Core one per bucket of
    max(40M, 1M·dp) parameters, and each pays the ring's latency: the drift is halved (1b +1, +3, +6 %; 7b +2, +4,
    +5 %)."""
    from minipar.perf.foundry import H100_LARGE, foundry_row

    model, h100 = MODELS["70b"], GPUS["h100"]
    fsdp = Layout(dp=64, tp=1, pp=1, zero=3)
    assert collectives(model, h100, fsdp, 1e9) == model.layers + 1
    meg = Layout(dp=64, tp=8, pp=1, zero=1, overlap=frozenset({"dp"}))
    assert (
        collectives(model, h100, meg, 8.7e9) == 136
        and collectives(model, h100, replace(meg, overlap=frozenset()), 8.7e9) == 1
    )
    by_model = {}
    for row in H100_LARGE:
        e = foundry_row(row, h100)
        by_model.setdefault(row[0], []).append(e.mfu / (row[3] / 100) - 1)
    for name, errs in by_model.items():
        assert max(errs) - min(errs) < 0.06, (name, errs)  # 7b and 1b drifted by 8 and 10 points before; 3 and 5 now


def test_deepspeed_2021_zero3_rows_are_not_explained_by_latency_alone():
    """The runs module's account of DeepSpeed's ZeRO-3 rows (Narayanan Table 2): each parameter gathered on its own,
    serialized (4 weight matrices per block, gathered for the forward, the recomputation and the backward; 12 tensors
    reduce-scattered), at this model's ring latency, still reads +11 … +84 %."""
    from minipar.comm.cost import ring_time
    from minipar.perf.runs import GPT3, N_530B, NARAYANAN_TABLE2, narayanan_table2_row

    dev, errs = GPUS["a100"], []
    for row in NARAYANAN_TABLE2[:6]:
        e, model = narayanan_table2_row(row), GPT3 if row[0] == "175b" else N_530B
        n, link = e.layout.dp, links(dev, e.layout)["dp"]
        psi, lat = stage_psi(model, dev, e.layout)[0], ring_time(e.layout.dp, 0.0, link)
        gather, reduce = ring_time(n, 2 * psi, link), ring_time(n, 2 * psi, link)
        comm = 3 * (gather + (4 * model.layers - 1) * lat) + reduce + (12 * model.layers - 1) * lat
        step = e.time["compute"] + e.time["optimizer"] + comm
        errs.append(e.tflops_per_gpu * e.time["total"] / step / row[6] - 1)
    assert 0.10 < min(errs) < 0.12 and 0.83 < max(errs) < 0.85, errs


def test_dp_overlap_hides_only_behind_the_last_micro_batchs_backward():
    """Before: the DP all-reduce hid behind 0.9 × every micro-batch's compute. Under gradient accumulation
    the gradients are final only in the last backward: with many micro-batches the hidden part must
    not grow with m."""
    model, dev = MODELS["18b"], GPUS["a100"]
    lay = Layout(dp=32, tp=8, pp=1, micro_batch=1, recompute="full", overlap=frozenset({"dp"}))
    plain = Layout(dp=32, tp=8, pp=1, micro_batch=1, recompute="full")
    e1, e64 = estimate(model, dev, lay, 32), estimate(model, dev, lay, 32 * 64)
    full = estimate(model, dev, plain, 32).time["dp"]
    assert e1.time["dp"] == pytest.approx(e64.time["dp"], rel=1e-9)  # the same last backward hides it
    assert 0 < e1.time["dp"] < full
    # nothing to hide behind: all exposed; each of Megatron's buckets pays its own latency (one bucket without overlap)
    k, link = collectives(model, dev, lay, stage_psi(model, dev, lay)[0]), links(dev, lay)["dp"]
    assert k > 1 and collectives(model, dev, plain, 1e9) == 1
    assert dp_time(model, dev, lay, 64, 0.0, 0.0) == pytest.approx(full + (k - 1) * all_reduce_time(32, 0.0, link))


def test_gqa_swiglu_flash_cp_and_uneven_stages():
    """Today's dense runs: GQA and SwiGLU change FLOPs and parameters by their formulas; FlashAttention
    drops the s² scores from memory and the memory-bound time; context parallelism splits the sequence;
    uneven first/last stages are accepted (Megatron's 126 layers on 16 stages) and balance the logits."""
    llama = MODELS["70b"]
    assert llama.layer_matrix_params == 8192 * (8192 + 2 * 1024) + 8192**2 + 3 * 8192 * 28672
    assert 68e9 < llama.params < 70e9
    m, dev = ModelShape(32, 4096, 32, 8192), GPUS["h100"]
    a = activation_bytes_per_layer(m, 1, 8, "none", True)
    f = activation_bytes_per_layer(m, 1, 8, "none", True, flash_attention=True)
    assert a - f == pytest.approx(5 * 32 * 8192 * 8192 / 8)
    slow = estimate(m, dev, Layout(dp=8, tp=8, pp=1, recompute="none", seq_parallel=True), 64)
    fast = estimate(m, dev, Layout(dp=8, tp=8, pp=1, recompute="none", seq_parallel=True, flash_attention=True), 64)
    # FlashAttention's core runs at FA2's 35 % of an H100's peak, the unfused core at the GEMMs' 46 %: the gain
    # is the s² scores' HBM traffic and the causal half (1.50×; it was 1.5× and more at one efficiency for both)
    assert fast.mfu > 1.45 * slow.mfu and fast.mem["activations"] < slow.mem["activations"]
    cp = estimate(m, dev, Layout(dp=4, tp=8, pp=1, cp=2, recompute="none", seq_parallel=True, flash_attention=True), 64)
    assert cp.layout.gpus == 64 and cp.mem["activations"] < fast.mem["activations"] and cp.time["cp"] >= 0
    odd = ModelShape(126, 16384, 128, 8192, 128256, False, 8, 53248, True)  # Llama 3 405B
    with pytest.raises(ConfigError, match="not divisible by pp·v"):
        estimate(odd, dev, Layout(dp=1, tp=8, pp=16, zero=1), 16)
    e = estimate(odd, dev, Layout(dp=1, tp=8, pp=16, zero=1, first_stage_layers=7, last_stage_layers=7), 16)
    assert e.layout.stage_layers(126) == [7] + [8] * 14 + [7]
    with pytest.raises(ConfigError, match="share the remaining"):
        estimate(odd, dev, Layout(dp=1, tp=8, pp=16, first_stage_layers=6, last_stage_layers=7), 16)


def test_uneven_first_and_last_chunks_with_interleaving():
    """Before: first/last_stage_layers with v > 1 raised ("v = 1 only"). Under v > 1 they are the first and
    last MODEL CHUNK's blocks (Llama 3, arXiv:2407.21783, §3.3.2: 126 layers on pp 16, the first chunk
    only the embedding, the last only the output layer): the schedule, the time and the memory see
    each chunk's own blocks."""
    dev = GPUS["h100"]
    lay = Layout(dp=1, tp=8, pp=16, v=8, zero=1, recompute="none", seq_parallel=True, flash_attention=True)
    odd = replace(lay, first_stage_layers=0, last_stage_layers=0)
    assert odd.chunk_layers(126) == [0] + [1] * 126 + [0]
    assert odd.stage_layers(126) == [7] + [8] * 14 + [7]
    assert replace(odd, v=2, first_stage_layers=3, last_stage_layers=3).chunk_layers(126) == [3] + [4] * 30 + [3]
    with pytest.raises(ConfigError, match="share the remaining"):
        estimate(LLAMA3_405B, dev, replace(odd, v=2, first_stage_layers=3, last_stage_layers=4), 16)
    e = estimate(LLAMA3_405B, dev, odd, 16)
    even = estimate(replace(LLAMA3_405B, layers=128), dev, lay, 16)
    assert e.time["compute"] < even.time["compute"]  # the last rank: 7 blocks and the logits, not 8
    assert e.mem["activations"] == even.mem["activations"]  # rank 1 (all chunks full) is the busiest in both
    uneven, uniform = (
        held_layers(16, 16, 8, "1f1b", tuple(x.chunk_layers(126 if x is odd else 128))) for x in (odd, lay)
    )
    assert uneven[0] < uniform[0] and uneven[1] == uniform[1]  # rank 0's first chunk holds nothing


def test_the_search_splits_odd_layer_counts_as_megatron_core_does():
    """Before, the search skipped every pp·v that does not divide the layers, so it could not find Llama 3's 126 blocks
    on 16 stages (7 + 14·8 + 7) nor Megatron-Bridge's Qwen3 235B-A22B (94 blocks on pp 8 · v 4). Now it tries
    Megatron-Core's split with the embedding and / or the loss counted as a block (``get_num_layers_to_build``): the
    first / last chunk builds one block fewer; a GPU only (minipar's CPU counts keep even stages)."""
    from minipar.perf.search import edge_splits

    assert edge_splits(126, 16, 1, "megatron") == [(7, 7)]
    assert edge_splits(126, 16, 8, "megatron") == [(0, 0)]  # the first chunk only the embedding, the last the loss
    assert edge_splits(94, 8, 4, "megatron") == [(2, 2)]  # the 235B recipe's chunks: 2 + 30·3 + 2
    assert edge_splits(80, 3, 1, "megatron") == [(26, None), (None, 26)]  # one of the two counted: 81 = 3·27
    assert edge_splits(80, 8, 2, "megatron") == [(None, None)]  # even chunks
    assert edge_splits(80, 7, 1, "megatron") == [] and edge_splits(126, 16, 1, "minipar") == []
    dev = GPUS["h100"]
    rows = plan(LLAMA3_405B, dev, 1024, 128, micro_batches=(1,), recomputes=("full",), zeros=(1,), vs=(1,), cps=(1,))
    found = [e for e, _ in rows if (e.layout.tp, e.layout.pp) == (8, 16)]
    assert [(e.layout.first_stage_layers, e.layout.last_stage_layers) for e in found] == [(7, 7)]
    given = Layout(dp=8, tp=8, pp=16, zero=1, recompute="full", seq_parallel=True, first_stage_layers=7,
                   last_stage_layers=7)  # fmt: skip
    assert found[0].mfu == estimate(LLAMA3_405B, dev, given, 128).mfu


def test_held_layers_follow_the_schedule():
    """Uniform chunks give Narayanan et al. 2021 §4.2.3: min(p − i, m)·l/p under 1F1B, l·(1 + (p−1)/(p·v)) on
    rank 0 interleaved; the cap at m = 3p changes nothing (the peak is in the warm-up)."""
    assert held_layers(8, 32, 1, "1f1b", (12.0,) * 8) == tuple(min(8 - i, 32) * 12.0 for i in range(8))
    assert held_layers(8, 32, 4, "1f1b", (3.0,) * 32)[0] == pytest.approx(96 * (1 + 7 / 32))
    assert held_layers(4, 6, 1, "gpipe", (2.0,) * 4) == (12.0,) * 4
    chunks = (1.0, 3.0, 2.0, 2.0, 2.0, 2.0, 3.0, 1.0)
    full = []
    for acts in make_schedule("interleaved", 4, 40, 2):  # no cap
        held = peak = 0.0
        for a in acts:
            held += chunks[a.stage] if a.kind == "F" else -chunks[a.stage]
            peak = max(peak, held)
        full.append(peak)
    assert held_layers(4, 40, 2, "1f1b", chunks) == tuple(full)


def test_llama3_rows_use_the_papers_layout():
    """Llama 3 Table 4: tp 8, pp 16, cp 1/16, 16M tokens per step, 126 blocks of h 16,384 (Table 3)."""
    assert 400e9 < LLAMA3_405B.params < 410e9 and LLAMA3_405B.gated and not LLAMA3_405B.dropout
    for row in LLAMA3_TABLE4:
        e = llama3_row(row)
        lay = e.layout
        assert (lay.gpus, lay.tp, lay.cp, lay.pp, lay.dp) == row[:5]
        assert lay.dp * row[6] * row[5] == 16 * 2**20  # tokens per batch: 16M
        assert lay.stage_layers(126) == [7] + [8] * 14 + [7]
        assert e.time["cp"] > 0 if lay.cp > 1 else e.time["cp"] == 0


def test_bloom_row_uses_the_runs_own_settings():
    """BLOOM-176B (minipar.perf.bloom): the run's layout, 176B parameters, and the logged step's two numbers agree
    by Narayanan's eq. 3 (Megatron-DeepSpeed's count, recomputation included): 104.70 s and 149.77 TFLOP/s on 384."""
    from minipar.perf.bloom import BLOOM_176B, GLOBAL_BATCH, GPUS_USED, STEP_S, bloom_layout, bloom_rows

    m, lay = BLOOM_176B, bloom_layout()
    assert 176.0e9 < m.params < 176.5e9 and not m.gated and m.dropout
    assert (lay.gpus, lay.dp, lay.tp, lay.pp, lay.micro_batch, lay.zero) == (GPUS_USED, 8, 4, 12, 2, 1)
    assert lay.stage_layers(70) == [5] + [6] * 10 + [5]
    l, h, s, V, B = m.layers, m.hidden, m.seq, m.vocab, GLOBAL_BATCH
    eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert abs(eq3 / (STEP_S * GPUS_USED) / 1e12 - 149.77) < 0.05  # the log's "TFLOPs: 149.77"
    label, e, metric, pub = bloom_rows()[0]
    assert metric == "mfu" and abs(pub - e.mfu * e.time["total"] / STEP_S) < 1e-9  # one FLOP count, two step times
    assert e.time["bubble"] > 0 and e.time["tp"] > 0 and e.fits


# chronicles-prequel.md, "Rebalancing layers": each row's TFLOPs column, in the order of minipar.perf.bloom.PREQUEL
PREQUEL_TFLOPS = [149.75, 146.90, 143.73, 145.01, 117.91, 136.20, 141.76, 151.71, 128.10, 145.68, 151.18, 146.12,
                  128.92, 153.68, 150.05, 148.08, 153.33]  # fmt: skip


def test_bloom_prequel_rows_are_read_as_published():
    """The trials' step times (minipar.perf.bloom.PREQUEL) agree with their own TFLOPs column by eq. 3 (to 0.02), so
    the shapes, the 384 GPUs and V = 250,880 are read right; the embeddings take a pipeline slot each, so every stage
    holds (layers + 2)/PP slots; the labels mark exactly the three rows the module names."""
    from minipar.perf.bloom import GLOBAL_BATCH, GPUS_USED, PREQUEL, bloom_rows, prequel_layout, prequel_shape

    assert len(PREQUEL) == len(PREQUEL_TFLOPS) == 17
    for row, tflops in zip(PREQUEL, PREQUEL_TFLOPS):
        m, lay = prequel_shape(row), prequel_layout(row)
        l, h, s, V, B = m.layers, m.hidden, m.seq, m.vocab, GLOBAL_BATCH
        eq3 = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
        assert abs(eq3 / (row[-1] * GPUS_USED) / 1e12 - tflops) < 0.02, row
        slots = (l + 2) // lay.pp
        assert (l + 2) % lay.pp == 0 and lay.stage_layers(l) == [slots - 1] + [slots] * (lay.pp - 2) + [slots - 1]
        assert lay.gpus == GPUS_USED and B % (lay.dp * lay.micro_batch) == 0
    seen = [lab for lab, *_ in bloom_rows() if "MISS:seen" in lab]
    assert len(seen) == 3 and all("tp8" in x and x.endswith("b2 MISS:seen") or " a104 " in x for x in seen), seen


def test_tinyllama_row_uses_the_runs_own_settings():
    """TinyLlama-1.1B (minipar.perf.tinyllama): the README's layout, its 24k tokens/s agree with its GPU-hour table
    (3,456 A100 hours for 300B tokens) and, by this model's count, with its "56% model flops utilization"."""
    from minipar.perf.tinyllama import GLOBAL_BATCH, TINYLLAMA, TOKENS_PER_S, tinyllama_layout, tinyllama_rows

    m, lay = TINYLLAMA, tinyllama_layout()
    assert 0 < m.params - 1_100_048_384 < 1e-3 * m.params and m.gated and m.kv == 4 and not m.dropout  # its 1.1B
    assert (lay.gpus, lay.micro_batch, lay.zero, lay.recompute) == (16, 8, 3, "none")
    assert lay.micro_batch * m.seq == 16384 and GLOBAL_BATCH * m.seq == 2048 * 1024  # "16k tokens", "2048 * 1024"
    assert abs(300e9 / (3456 * 3600) / TOKENS_PER_S - 1) < 0.01  # the GPU-hour table: 24,113 tokens/s/GPU
    label, e, metric, pub = tinyllama_rows()[0]
    assert metric == "mfu" and abs(pub - 0.56) < 0.01 and e.fits  # the README's 56 %, this model's FLOP count
    assert e.time["dp"] < 0.01 * e.time["total"]  # FSDP's traffic hides: the unnamed network hardly matters


def test_nanotron_rows_use_the_figures_settings():
    """nanotron (minipar.perf.nanotron): the script's shapes are the figure's sizes; every cell is 256 sequences on
    8 GPUs a node; nanotron's FLOP count is this model's (so the published MFU is the figure's, over the same peak);
    its cost-balanced split as ``models/base.py`` computes it; the figure's memory above the model's in every cell
    (the model leaves out nanotron's fp32 accumulation buffers, the fp32 logits, the allocator's slack)."""
    from minipar.perf import nanotron as nt
    from minipar.perf.flops import model_flops

    assert [round(nt.params(s) / 1e9, 2) for s in nt.SHAPES] == [1.34, 3.57, 8.86, 79.99]  # the figure's 80.0
    for size in nt.SHAPES:
        m = nt.shape(size)
        assert model_flops(m, 1) / m.seq == pytest.approx(nt.nanotron_flops_per_token(size), rel=1e-12)
    assert nt.nanotron_split("8.86B", 4) == (9, 9, 8, 6) and nt.nanotron_split("1.34B", 2) == (11, 5)
    assert nt.nanotron_split("80.0B", 16) == (6, *[5] * 13, 6, 3)
    rows, cells = nt.nanotron_rows(), [(n, s, c) for n, cs in nt.FIGURE.items() for s, c in zip(nt.SHAPES, cs)]
    mems = [g for v in nt.MEMORY_GB.values() for g in v]
    assert len(rows) == 26 == len(mems)
    for (label, e, _, pub), (nodes, size, cell), mem in zip(rows, cells, mems):
        lay = nt.nanotron_layout(size, cell)
        assert lay.gpus == 8 * nodes and lay.dp * cell[3] * cell[4] == 256 == e.m * lay.dp * lay.micro_batch
        assert pub == pytest.approx(cell[6] / 100 * nt.PEAK / GPUS["h100"].peak_flops, rel=1e-9), label
        assert 1.09 < mem * 2**30 / e.mem["total"] < 1.76, (label, mem, e.mem["total"] / 2**30)


def test_olmo_core_rows_use_the_scripts_settings():
    """OLMo-core (minipar.perf.olmo): the scripts' shapes (their parameter counts, the output layer untied), one node
    of 8, FSDP2 with fp32 reduction, the micro-batches per step (16 to 256), and the TPS read as MFU by this model's
    count agree with the MFU column of the README's September 2024 table for the same sizes at the same TPS (7B
    47-48 %, 13B 41-42 %)."""
    from minipar.perf.olmo import OLMO_CORE, TABLE, olmo_layout, olmo_rows

    size = {"OLMo2-1B": 1.34e9, "OLMo2-7B": 7.32e9, "Llama3-8B": 7.82e9, "OLMo2-13B": 13.74e9}  # untied output layer
    for name, (m, mb, _) in OLMO_CORE.items():
        assert abs(m.params / size[name] - 1) < 0.01, (name, m.params)
        assert m.gated and not m.bias and not m.dropout
        lay = olmo_layout(name, False)
        assert (lay.gpus, lay.zero, lay.grad_bytes, lay.recompute, lay.micro_batch) == (8, 3, 4, "none", mb)
    rows = olmo_rows()
    assert [r[0].split()[1] for r in rows] == [t[0] for t in TABLE] and all("MISS:compile" in r[0] for r in rows)
    assert [r[1].m for r in rows[::2]] == [16, 64, 64, 256]
    pub = {r[0].split()[1]: r[3] for r in rows if "bf16" in r[0]}
    assert abs(pub["OLMo2-7B"] - 0.475) < 0.01 and abs(pub["OLMo2-13B"] - 0.415) < 0.01, pub
    assert all(r[1].fits for r in rows)


def test_megatron_lm_rows_use_the_readmes_table():
    """Megatron-LM's H100 weak scaling (minipar.perf.megatron_lm): each row's MFU column is its TFLOP/s over 989, its
    size the GPT's parameters with untied embeddings, and Megatron-LM's FLOP count at core_v0.8.0
    (12·B·s·l·h²·(1 + g/a + s/h + f/h + V/(2lh)), full attention square) is this model's; DP is 48, batch 4·PP·DP."""
    from minipar.perf.flops import model_flops
    from minipar.perf.megatron_lm import DP, TABLE, VOCAB, gpt_shape, megatron_lm_layout, megatron_lm_rows

    mfu = {"1.7B": 41, "7.1B": 47, "16B": 49, "32B": 46, "70B": 42, "119B": 43, "177B": 44, "314B": 48, "462B": 47}
    for row, (label, e, metric, pub) in zip(TABLE, megatron_lm_rows(), strict=True):
        size, a, h, l, tp, pp, gpus, B, tflops = row
        m, lay = gpt_shape(row), megatron_lm_layout(row)
        assert metric == "mfu" and m.heads == a
        assert round(tflops / 989 * 100) == mfu[size] and abs(pub - tflops / 989) < 1e-12, label
        untied = 12 * l * h * h + 13 * l * h + 2 * VOCAB * h + m.seq * h
        assert abs(untied / 1e9 / float(size[:-1]) - 1) < 0.04 and m.params == untied, (size, untied)
        megatron = 12 * B * m.seq * l * h * h * (1 + 1 + m.seq / h + 4 + VOCAB / (2 * l * h))
        assert abs(model_flops(m, B) / megatron - 1) < 1e-9, size
        assert (lay.dp, lay.tp, lay.pp, lay.gpus, B) == (DP, tp, pp, gpus, 4 * pp * DP) and lay.zero == 1, size
        assert e.fits and ("MISS" in label) == (size == "32B")


def test_dgxc_rows_use_the_readmes_tables():
    """NVIDIA's DGX Cloud recipes (minipar.perf.dgxc): each step time gives the README's own tokens/s (sequence × batch
    / step, within its rounding) and, in the README's own FLOP count per sequence, its MFU column (bf16 over 989, FP8
    over 1,979 TFLOP/s); each layout is the table's (tp, pp, cp, v, micro-batch, GA); the 405B runs on GPT-2's
    vocabulary, padded; Grok-1's layout is the table's with its DP column read as the expert-data-parallel size (its GA
    of 128 says dp = GPUs / (TP·PP·CP)). Every row within 15 %, none a known miss; the configs' kernels are the rows'
    (``dgxc.SETTINGS``: a fused loss for Llama 3.1 and Nemotron-4, FlashAttention-2 for GPT-3 175B at v25.01,
    Nemotron-4 340B and Grok-1; cuDNN's for GPT-3 175B at v25.04 and v25.04's NeMo 2.0 runs); v25.04's Nemotron-4 340B
    is ``MISS:provenance`` (its table's VP "NA", its launch script's 12)."""
    from minipar.perf.dgxc import DGXC, dgxc_rows
    from minipar.perf.nemo import SHAPES

    tokens = {("24.09", "Llama3-8B", 8): (81222, 108436), ("24.09", "Llama3-70B", 1024): (1124478, 1487342)}
    tokens |= {("24.09", "Llama3.1-405B-gpt2v", 1152): (235660, 365055)}
    tokens |= {("24.11", "Nemotron4-15B", 2048): (11335957, 15391941), ("dev", "Grok1-314B", 2048): (1591011, 1969157)}
    tokens |= {("24.12", "GPT3-175B", 512): (249068, 363206), ("24.12", "Grok1-314B", 2048): (1576065, 1939562)}
    tokens |= {("25.02", "Llama3-8B", 8): (85459, 112388), ("25.02", "Nemotron-340B", 256): (60125, 89469)}
    tokens |= {("25.04", "DeepSeek-V3", 1024): (644781.55, None)}
    readme_mfu = {  # (release, model, GPUs): (FLOPs per sequence, bf16 MFU, FP8 MFU) as each README prints them
        ("24.09", "Llama3-70B", 64): (3.94e15, 0.5410, 0.3617),
        ("24.09", "Llama3.1-405B-gpt2v", 576): (2.17e16, 0.5578, 0.4271),
        ("24.11", "GPT3-175B", 128): (2.20e15, 0.4993, 0.3756),
        ("24.11", "Nemotron4-15B", 16): (434.5e12, 0.6210, 0.4222),
        ("24.11", "Nemotron-340B", 128): (1.01e16, 0.5538, 0.4038),
        ("dev", "Grok1-314B", 512): (4.27e15, 0.415, 0.259),
        ("24.12", "GPT3-175B", 128): (2.20e15, 0.5354, 0.3952),
        ("24.12", "Grok1-314B", 512): (4.27e15, 0.4109, 0.2553),
        ("25.02", "Llama3.1-405B", 512): (2.17e16, 0.5547, 0.4435),
        ("25.02", "Nemotron4-15B", 64): (434.5e12, 0.6582, 0.4435),
    }
    ga = {
        "Llama3-8B": 32,
        "Llama3-70B": 64,
        "Llama3.1-405B-gpt2v": 63,
        "Llama3.1-405B": 64,
        "GPT3-175B": 64,
        "Nemotron4-15B": 4,
        "Nemotron-340B": 16,
        "Grok1-314B": 128,
        "DeepSeek-V3": 256,
    }
    rows = iter(dgxc_rows())
    for release, name, (tp, pp, cp, v, ep), mb, runs in DGXC:
        for n, gb, *steps in runs:
            for i, step in enumerate(steps):
                if step is None:  # v25.04's Llama 3.1 70B: bf16 and FP8 on two layouts
                    continue
                label, e, metric, pub = next(rows)
                seq, key = SHAPES[name].seq, (release, name, n)
                if key in tokens:
                    assert abs(seq * gb / step / tokens[key][i] - 1) < 0.002, key
                if key in readme_mfu:
                    f, *mfu = readme_mfu[key]
                    assert abs(gb * f / step / n / (989e12, 1979e12)[i] - mfu[i]) < 6e-4, (key, i)
                lay = e.layout
                assert (lay.tp, lay.pp, lay.cp, lay.v, lay.ep, lay.micro_batch, lay.gpus, e.m, lay.fp8) == (
                    tp, pp, cp, v, ep, mb, n, ga[name], i == 1
                ), label  # fmt: skip
                # runs that ran: the model's memory may read above the usable 90 % (Nemotron-4 340B at dp 2: 79.4 GiB)
                assert (abs(e.mfu / pub - 1) <= 0.15 or "MISS:seen" in label) and e.mem["total"] < 1.01 * 80 * 2**30
                # v25.04's Nemotron-4 340B: its table says VP "NA", its launch.sh and NeMo's configs VP 12; v25.05's
                # DeepSeek-V3 (NCCL's all-to-all across 8 nodes, not overlapped) +20 %, labelled after seen
                miss = {("25.02", "Nemotron-340B"): "MISS:provenance", ("25.04", "DeepSeek-V3"): "MISS:seen"}
                assert ("MISS" in label) == ((release, name) in miss) and miss.get((release, name), "") in label
    assert next(rows, None) is None
    from minipar.perf.dgxc import SETTINGS
    from minipar.perf.nemo import recipe

    for release, name, *_ in DGXC:
        src = f"DGXC {release}"
        r = recipe(src, name, SETTINGS)
        assert r["fused_loss"] == name.startswith(("Llama", "Nemotron", "DeepSeek")), name
        flash = name == "Grok1-314B" or (src, name) in {("DGXC 24.11", "GPT3-175B"), ("DGXC 24.11", "Nemotron-340B")}
        assert r["attention"] == ("flash" if flash else None), name
        # every configure.sh sets model.ub_tp_comm_overlap=True (340B's YAML: False); DeepSeek-V3's script: False
        assert r["tp_overlap"] == (name != "DeepSeek-V3"), name


def test_nemo_long_sequence_rows_and_the_two_readings():
    """NeMo's long-sequence table (minipar.perf.nemo_long): each layout is the table's (tp, pp, dp, cp, 4M tokens per
    step, FP8), on FlashAttention-2 (the launcher's NVTE_FUSED_ATTN=0); the 4K row in NeMo's count within 2 % of NeMo
    24.07's Llama 2 7B tokens/s, in the causal half 5.8 % above it; the attention core 39 % of that count at 16K, 98 %
    at 1M; every row within 15 % (-14 … +3 %), none labelled; the module doc's other readings: at cuDNN's rate -4 and
    +3 % at 4K and 8K, +22 … +72 % from 16K up (what the model read before the kernel was read); the causal half at
    cuDNN's rate -2 … -13 %."""
    from minipar.perf.nemo import NEMO_FIT, shape
    from minipar.perf.nemo_long import LONG, _rows, nemo_flops_per_token, nemo_long_rows, what_if

    got = nemo_long_rows()
    assert len(got) == len(LONG) == 9
    errs = []
    for (k, n, gb, tp, pp, dp, cp, _), (label, e, _, pub) in zip(LONG, got):
        lay, err = e.layout, e.mfu / pub - 1
        assert (lay.tp, lay.pp, lay.dp, lay.cp, lay.gpus, lay.fp8, gb * k * 1024) == (tp, pp, dp, cp, n, True, 2**22)
        assert e.fits and "MISS" not in label, label
        errs.append(err)
    assert (round(100 * min(errs)), round(100 * max(errs))) == (-14, 3), errs
    nemo_2407 = next(r[-1] for r in NEMO_FIT if r[1] == "Llama2-7B")  # 16,934 tokens/s per GPU
    assert abs(_rows()[0][-1] / nemo_2407 - 1) < 0.02 and abs(_rows(True)[0][-1] / nemo_2407 - 1.058) < 0.001
    core = lambda k: (lambda m: 12 * m.layers * m.hidden * m.seq / nemo_flops_per_token(m))(shape(f"Llama2-7B s={k}"))
    assert (round(core(16384), 2), round(core(2**20), 2)) == (0.39, 0.98)  # the attention core's share of the count
    readings = what_if()
    cudnn = [round(100 * x) for x in readings["cudnn"]]
    assert cudnn[:2] == [-4, 3] and (min(cudnn[2:]), max(cudnn[2:])) == (22, 72), cudnn
    half = [round(100 * x) for x in readings["causal_half"]]
    assert (min(half), max(half)) == (-13, -2), half


def test_megatron_readme_2021_row():
    """Megatron-LM's README of January 2021: GPT-3 175B on 1,024 A100s, "around 32 seconds" per step of 1,536 × 2,048
    tokens "resulting in 138 teraFLOPs per GPU": its eq.-3 count (recomputation included) over 32 s and 1,024 GPUs
    is 138; the script's layout (tp 8, pp 16, micro-batch 1, full recomputation); within 15 %, and the step ~32 s."""
    from minipar.perf.runs import GPT3, MEGATRON_README_175B, megatron_readme_row

    n, batch, tflops = MEGATRON_README_175B
    l, h, s, v = GPT3.layers, GPT3.hidden, GPT3.seq, GPT3.vocab
    eq3 = 96 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    assert round(eq3 / 32 / n / 1e12) == tflops
    e = megatron_readme_row()
    assert (e.layout.tp, e.layout.pp, e.layout.dp, e.m, e.layout.recompute) == (8, 16, 8, 192, "full")
    assert abs(e.tflops_per_gpu / tflops - 1) <= 0.15 and 30 < e.time["total"] < 34 and e.fits


def test_the_loss_moves_its_bytes_on_the_last_stage():
    """Device.loss_bytes (minipar.perf.hardware.LOSS_BYTES): per micro-batch the last stage's loss moves
    loss_bytes · b · s · V / t bytes through HBM; the H100's unfused losses (52 Megatron-LM, 48 PyTorch), a fused
    kernel 6; the A100's constants carry it (0)."""
    from minipar.perf.hardware import FUSED_LOSS_BYTES, LOSS_BYTES

    h, meg = GPUS["h100"], for_framework(GPUS["h100"], "megatron")
    assert (h.loss_bytes, meg.loss_bytes, GPUS["a100"].loss_bytes) == (LOSS_BYTES["pytorch"], LOSS_BYTES["megatron"], 0)
    model = ModelShape(24, 2048, 16, 4096, 131072, True, None, None, False, False)
    lay = Layout(dp=8, tp=2, pp=1, micro_batch=2, zero=1, recompute="none", flash_attention=True)
    unfused, none = (estimate(model, replace(meg, loss_bytes=x), lay, 64) for x in (52.0, 0.0))
    m = 64 // (8 * 2)
    assert abs(unfused.time["compute"] - none.time["compute"] - m * 52 * 2 * 4096 * 131072 / 2 / meg.hbm_bw) < 1e-9
    fused = estimate(model, replace(meg, loss_bytes=FUSED_LOSS_BYTES), lay, 64)
    assert none.time["total"] < fused.time["total"] < unfused.time["total"]


def test_memory_below_what_torchtitan_reserved():
    """The model's peak memory per GPU for torchtitan's rows, against the tables' Memory(GiB): what PyTorch's
    allocator reserved (minipar.perf.torchtitan.TORCHTITAN_MEMORY_GIB), so an upper bound. Printed with ``-s``; the
    model counts tensors only (no allocator cache, no transient fp32 copies of the logits, no FSDP buffers)."""
    from minipar.perf.torchtitan import TORCHTITAN_MEMORY_GIB, torchtitan_rows

    for (label, e, _, _), pub in zip(torchtitan_rows(), TORCHTITAN_MEMORY_GIB, strict=True):
        mine = e.mem["total"] / 2**30
        print(f"MEM {label:52s} reserved {pub:5.1f} GiB, model {mine:5.1f} GiB ({mine / pub:.0%})")
        assert e.fits and mine <= pub, (label, mine, pub)


def test_search_tries_context_parallelism():
    """cp degrees join the search where each rank keeps >= CP_MIN_TOKENS and the sequence splits into 2·cp chunks."""
    dev = GPUS["h100"]
    assert cp_degrees(MODELS["70b"], dev, 64) == [1]  # s = 4096: no room for cp
    long = replace(MODELS["70b"], seq=131072)
    assert cp_degrees(long, dev, 256) == [1, 2, 4, 8, 16, 32]
    assert all(131072 // c >= CP_MIN_TOKENS for c in cp_degrees(long, dev, 256))
    assert cp_degrees(long, cpu_device(1e9), 8) == [1]


def test_pipeline_time_is_the_simulated_schedule():
    """The bubble comes from minipar.pp.schedules.simulate: the extension for large m equals the full
    simulation, and uniform 1F1B's idle fraction is (p−1)/(m+p−1) (Narayanan §2.2)."""
    for p, m, v, r in [(8, 96, 1, 3.0), (8, 64, 4, 2.1), (4, 50, 1, 2.0), (4, 40, 2, 2.35)]:
        f, b = (1.0,) * (p * v), (r,) * (p * v)
        assert pipeline_makespan(p, m, v, 1.0, r) == pytest.approx(_simulated(p, m, v, f, b), rel=1e-9)
        f, b = (0.9,) + (1.0,) * (p * v - 2) + (1.2,), (1.8,) + (r,) * (p * v - 2) + (2.6,)  # uneven stages
        assert pipeline_makespan(p, m, v, f, b) == pytest.approx(_simulated(p, m, v, f, b), rel=1e-9)
    sim = simulate(one_f_one_b(8, 32), 1.0, 2.0)
    assert sim.bubble == pytest.approx(bubble_formula(8, 32), rel=1e-12)
    model = ModelShape(48, 8192, 64)
    e = estimate(model, GPUS["a100"], Layout(dp=1, tp=8, pp=8, micro_batch=1, recompute="full"), 16)
    assert e.time["bubble"] / e.time["total"] == pytest.approx(7 / (16 + 7), rel=0.05)  # p2p adds a little


def test_memory_uses_the_course_formulas():
    model, dev = MODELS["175b"], GPUS["a100"]
    lay = Layout(dp=4, tp=8, pp=8, micro_batch=1, zero=1, recompute="selective", seq_parallel=True)
    assert model.params == 12 * 96 * 12288**2 + 13 * 96 * 12288 + (51200 + 2048) * 12288  # Narayanan eq. 2
    mem = memory_per_gpu(model, dev, lay, 32)
    z = zero_bytes_formula(max(stage_params(model, 8, 8)), 1, 4, mixed_precision=True)
    assert mem["params"] == z["params"] and mem["optimizer"] == z["optimizer"]
    # Megatron-LM README, "Distributed Optimizer": bf16 params with fp32 gradients take 18 bytes per parameter, and
    # 6 + 12/d with the distributed optimizer (ZeRO-1); with bf16 gradient reduction ZeRO's 16 and 4 + 12/d
    psi = max(stage_params(model, 8, 8))
    for zero, grad_bytes, per_param in ((0, 4, 18), (1, 4, 6 + 12 / 4), (0, 2, 16), (1, 2, 4 + 12 / 4)):
        m = memory_per_gpu(model, dev, replace(lay, zero=zero, grad_bytes=grad_bytes), 32)
        assert m["params"] + m["grads"] + m["optimizer"] == pytest.approx(per_param * psi)
    # Korthikanti et al. 2022, §4.2.2 and §5: sequence parallel + selective = 34·s·b·h/t per layer
    s, h = model.seq, model.hidden
    assert activation_bytes_per_layer(model, 1, 8, "selective", True) == pytest.approx(34 * s * h / 8)
    assert mem["activations"] == pytest.approx(96 // 8 * 8 * 34 * s * h / 8)  # l/p layers × p micro-batches
    off = memory_per_gpu(model, dev, Layout(dp=4, tp=8, pp=8, offload=True), 32)
    assert off["optimizer"] == 0
    acts = [
        memory_per_gpu(model, dev, Layout(dp=4, tp=8, pp=8, recompute=rc), 32)["activations"]
        for rc in ("none", "selective", "full")
    ]
    assert acts[0] > acts[1] > acts[2]


def test_bad_layouts_raise_config_error():
    with pytest.raises(ConfigError, match="tp=5 must divide"):
        estimate(MODELS["175b"], GPUS["a100"], Layout(dp=1, tp=5, pp=1), 8)
    with pytest.raises(ConfigError, match="not divisible by dp·micro_batch"):
        estimate(MODELS["175b"], GPUS["a100"], Layout(dp=3, tp=8, pp=1), 8)
    with pytest.raises(ConfigError, match="hsdp=3 must divide dp=2"):  # (zero=3 with pp > 1 is valid: FSDP2's)
        estimate(MODELS["175b"], GPUS["a100"], Layout(dp=2, tp=8, pp=2, zero=3, hsdp=3), 8)
    with pytest.raises(ConfigError, match="recompute='some'"):
        estimate(MODELS["175b"], GPUS["a100"], Layout(dp=1, tp=8, pp=1, recompute="some"), 8)
    with pytest.raises(ConfigError, match="v=2 with pp=1"):
        estimate(MODELS["175b"], GPUS["a100"], Layout(dp=1, tp=8, pp=1, v=2), 8)
    with pytest.raises(ConfigError, match="kv_heads=5 must divide heads=96"):
        ModelShape(96, 12288, 96, kv_heads=5)


def test_plan_cli_prints_top_layouts_and_rejections(capsys):
    assert (
        main(
            ["--model", "70b", "--gpus", "64", "--gpu", "h100", "--seq", "4096", "--global-batch", "1024", "--top", "3"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "MFU" in out and "mem/GPU GB" in out and "rejected:" in out
    assert "does not fit" in out and "TP across nodes" in out
    assert len([ln for ln in out.splitlines() if ln.startswith("dp")]) == 3


def test_plan_cli_names_the_bubble():
    """A small global batch leaves few micro-batches per pipeline: deep pipelines are rejected for their bubble."""
    rows = plan(MODELS["175b"], GPUS["a100"], 64, 16)
    assert any(why.startswith("bubble") for _, why in rows)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tie", [True, False])
def test_minipar_counts_match_the_real_gpt(bias, tie):
    """The minipar counts read minipar's GPT: the shape's FLOPs per token are the model's (tied or not),
    and the stages' parameters (tp = 1, with biases) sum to the untied model's parameter count."""
    import torch

    cfg = GPTConfig(vocab_size=67, block_size=16, n_layer=3, n_head=2, d_model=32, bias=bias, tie_weights=tie)
    with torch.device("meta"):
        gpt = GPT(cfg)
    assert gpt_flops_per_token(shape_of(cfg)) == gpt.flops_per_token()
    if bias and not tie:
        assert sum(stage_params(shape_of(cfg), 2, 1, "minipar")) == sum(p.numel() for p in gpt.parameters())


def test_one_model_two_devices():
    """The same layout on this CPU (minipar counts, fp32) and on an A100 preset (megatron counts)."""
    shape, lay = shape_of(GPTConfig(vocab_size=64, block_size=16, n_layer=4, n_head=4, d_model=32)), Layout(2, 2, 2)
    cpu = estimate(shape, cpu_device(5e10, 2.5e-4, 5e7, 1e-3, ranks=8, cores=2), lay, 16)
    gpu = estimate(shape, GPUS["a100"], lay, 16)
    assert cpu.time["total"] > 10 * gpu.time["total"]  # α dominates this tiny model on the GPUs' links
    assert cpu.mem["params"] == 4 * max(stage_params(shape, 2, 2, "minipar"))  # fp32 on the CPU
    assert gpu.mem["params"] == 2 * max(stage_params(shape, 2, 2))  # bf16 weights on the GPU
    rows = plan(shape, cpu_device(5e10, ranks=8), 8, 16, microbatches=(1, 2), recomputes=("none",), zeros=(0,), vs=(1,))
    assert rows and all(e.layout.gpus == 8 for e, _ in rows)
    with pytest.raises(ConfigError, match="counts"):
        cpu_device(1e9, counts="exact")


def test_divisors_and_rank_correlation():
    assert divisors(12) == [1, 2, 3, 4, 6, 12] and divisors(1) == [1]
    assert rank_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 1], [1, 2]) == 0.0
