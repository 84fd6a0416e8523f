"""Issue #38 item 2 ("every knob a real run sets"): multi-token prediction (DeepSeek-V3, arXiv:2412.19437, §2.2;
Megatron-Core's ``--mtp-num-layers``). Each MTP module is one more block of the model's last kind, a 2h → h
projection and one more pass through the shared output layer and loss, on the last pipeline stage. With it DeepSeek-V3's
whole shape meets a published number: Megatron-Bridge's 25.09 table gives its run 338 "Model TFLOP / sec / GPU" at
1,297 tokens/s/GPU, 260.6 GFLOP per token in its count; this shape's Megatron-LM count reads 259.4."""

import json
from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.flops import logit_flops, megatron_flops_per_token, mlp_params, moe_params
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.model import estimate
from minipar.perf.moe import training_flops
from minipar.plan import main
from tests.test_plan_mla import DSV3, FLAGS

MTP = replace(DSV3, mtp_num_layers=1)


def test_parameters_and_megatrons_count():
    """The MTP module: one more MoE block, its projection and norms (the embedding and output layer shared), 11.6B:
    with the copies of the embedding and the head its checkpoint stores (2·V·h = 1.85B), the 685B the Hugging Face
    model card gives for main model and MTP module together."""
    (t1, a1), (t0, a0) = moe_params(MTP, 256, 8), moe_params(DSV3, 256, 8)
    h = 7168
    assert t1 - t0 == a1 - a0 + 248 * mlp_params(DSV3.block_kinds()[-1][0])  # the experts a token skips: 248 of 256
    assert abs((t1 + 2 * 129280 * h) / 685e9 - 1) < 0.002, t1
    per_token = megatron_flops_per_token(MTP)
    assert abs(per_token / (338e12 / 1297) - 1) < 0.01, per_token  # the published count (rounded to 3 digits)
    one_more_block = megatron_flops_per_token(replace(DSV3, layers=62)) - megatron_flops_per_token(DSV3)
    assert per_token - megatron_flops_per_token(DSV3) == pytest.approx(one_more_block + 6 * h * 129280, rel=1e-12)


def test_a_step_pays_for_it_on_the_last_stage():
    dev = for_framework(GPUS["h100"], "megatron")
    lay = Layout(dp=64, tp=2, pp=8, zero=1, ep=64, etp=1, seq_parallel=True, flash_attention=True, fp8=True,
                 recompute="selective", first_stage_layers=7, last_stage_layers=6)  # fmt: skip
    with_mtp, without = estimate(MTP, dev, lay, 8192), estimate(DSV3, dev, lay, 8192)
    assert with_mtp.time["total"] > without.time["total"]  # its last stage the slowest, and at least as full
    assert with_mtp.mem["total"] >= without.mem["total"]
    B = 4  # three passes of the block, the projection and the output layer more
    extra = training_flops(MTP, B) - training_flops(DSV3, B)
    assert extra > 3 * logit_flops(DSV3, B)
    assert Layout(dp=1, tp=1, pp=2).chunk_kinds(replace(MTP, experts=None, moe_ffn=None, shared_ffn=None,
                  dense_layers=0, layers=4))[-1][1] == [2, 3]  # fmt: skip


def test_cli(capsys):
    fixed = ("--gpu h100 --framework megatron --precision fp8 --global-batch 8192 --tp 2 --pp 8 --dp 64 --ep 64 "
             "--expert-tp 1 --zero 1 --sp --flash-attention --recompute selective --first-stage-layers 7 "
             "--last-stage-layers 6 --json").split()  # fmt: skip
    assert main([*FLAGS, "--mtp-num-layers", "1", *fixed]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["mtp_num_layers"] == 1
    assert main([*FLAGS, "--mtp-num-layers", "0", *fixed]) == 2
    assert "--mtp-num-layers 0: must be an integer >= 1" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="mtp_num_layers=-1"):
        replace(DSV3, mtp_num_layers=-1)


def test_the_readme_example_is_the_test_row(capsys):
    """The README's DeepSeek-V3 command (Megatron-Bridge's 25.09 recipe, :mod:`minipar.perf.mb_archive`) gives the test
    row's step and tokens/s: the flags and the row are one shape, one layout."""
    import re
    from pathlib import Path

    from minipar.perf.nemo import NEMO, nemo_rows

    readme = Path(__file__).resolve().parents[1].joinpath("README.md").read_text(encoding="utf-8")
    command = re.search(r"python -m minipar\.plan --layers 61 .*?--grad-reduce-dtype bf16", readme, re.S)[0]
    argv = [a.strip('"') for a in command.replace("\\\n", " ").split()[3:]]
    assert main([*argv, "--json"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    ((_, e, _, _),) = nemo_rows(rows=[r for r in NEMO if r[1] == "DeepSeek-V3"])
    assert row["step_s"] == round(e.time["total"], 4) and row["tokens_per_s_per_gpu"] == 1285
    assert "1,285 tokens/s per\n# GPU, 52.1 GB per GPU" in readme and abs(row["mem_gb"] - 52.1) < 0.05


def test_the_search_reaches_the_recipes_pipeline_layout():
    """DeepSeek-V3's 61 blocks split on no pp · v that Megatron-Core's even or account-for-embedding/loss rule
    allows at 8 · 4, so the search tries the balanced flexible layouts too
    (:func:`minipar.perf.layout_checks.flexible_splits`): the recipe's ``Et|(tt|)*30mL`` (1 + 30·2 + 0 blocks, the MTP
    block on the last chunk) is among them and models as the test row does (the row reads the recipe's string:
    ``Layout.stage_split``)."""
    from minipar.perf.hardware import with_fused_loss
    from minipar.perf.layout_checks import edge_splits, flexible_splits
    from minipar.perf.nemo import NEMO, nemo_layout, shape
    from minipar.perf.search import plan, stage_ends

    row = next(r for r in NEMO if r[1] == "DeepSeek-V3")
    model, given = shape(row[1]), nemo_layout(row)
    dev = with_fused_loss(for_framework(GPUS["h100"], "megatron"))
    assert edge_splits(61, 8, 4, "megatron") == [] and flexible_splits(61, 8, 4, "megatron", 1) == [(1, 0)]
    assert stage_ends(model, dev, 8, 4) == [(1, 0)] and given.stage_split == (1, *[2] * 30, 0)  # "Et|(tt|)*30mL"
    assert flexible_splits(61, 8, 4, "minipar", 1) == [] and flexible_splits(60, 2, 1, "megatron") == []
    assert flexible_splits(80, 8, 2, "megatron") == []  # even chunks: edge_splits' (None, None)
    assert flexible_splits(60, 4, 1, "megatron", 1) == [(14, 14), (15, 13)]  # 14 + 2·16 + 14 and the MTP block
    found = [
        e
        for e, _ in plan(model, dev, 1024, 8192, micro_batches=(1,), recomputes=("selective",), zeros=(1,), vs=(4,),
                         overlap=given.overlap, flash_attention=True, grad_bytes=2, fp8=True, eps=(64,), cps=(1,),
                         etp=1, dispatcher="flex", optimizer_dtypes=given.optimizer_dtypes)
        if replace(e.layout, first_stage_layers=None, last_stage_layers=None, stage_split=given.stage_split) == given
    ]  # fmt: skip
    assert (found[0].layout.first_stage_layers, found[0].layout.last_stage_layers) == (1, 0)
    assert len(found) == 1 and found[0].mfu == estimate(model, dev, given, 8192).mfu
