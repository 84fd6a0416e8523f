"""Issue #38 item 2 ("every knob a real run sets"): sliding-window attention, Megatron-Core's ``window_size`` and
``window_attn_skip_freq`` (``--window-size``, ``--window-attn-skip-freq``).

GPT-OSS 120B attends to the 128 tokens before each query in every other block (``window_size=(128, 0)``,
``window_attn_skip_freq=2``: Megatron-Bridge's ``GPTOSSProvider``). A query of such a block computes against 128 keys,
not s; counted as the rest of the model counts attention (the whole s² square, FlashAttention's causal half executed),
a windowed block's core is the band of 2w keys per query. Nothing moves without a window."""

import json
from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.flops import attention_core_flops, attention_keys, attention_share, moe_flops_per_token, moe_params
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.model import estimate
from minipar.perf.nemo import SHAPES
from minipar.plan import main

OSS = SHAPES["GPT-OSS-120B"]
# GPT-OSS 120B as the planner's flags give it (Megatron-Bridge's provider; module doc of minipar.perf.mb_archive)
FLAGS = ("--layers 36 --hidden 2880 --heads 64 --kv-heads 8 --kv-channels 64 --ffn 2880 --swiglu --vocab 201088 "
         "--seq 4096 --untie-embeddings-and-output-weights --position-embedding-type rope --no-dropout "
         "--moe-experts 128 --moe-top-k 4 --window-size 128 --window-attn-skip-freq 2").split()  # fmt: skip
FIXED = "--framework megatron --gpu h100 --tp 1 --pp 4 --dp 16 --ep 8 --zero 1 --flash-attention --global-batch 1280"


def test_gpt_oss_counts_match_its_model_card():
    """116.8B parameters in total, 5.1B active (OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card",
    arXiv:2508.10925, §2); this count's active figure holds both V×h matrices (untied), the card's one."""
    total, active = moe_params(OSS, OSS.experts, OSS.top_k)
    assert abs(total / 116.8e9 - 1) < 0.005, total
    assert abs((active - OSS.vocab * OSS.hidden) / 5.1e9 - 1) < 0.01, active


def test_keys_per_query_by_hand():
    """18 full blocks at 4,096 keys, 18 windowed at 2·128: (18·4,096 + 18·256) / 36 = 2,176; every block windowed
    without a skip frequency; l // N full blocks when N does not divide l; a window of s/2 or more: the full square."""
    assert attention_keys(OSS, 4096) == (18 * 4096 + 18 * 256) / 36 == 2176
    every = replace(OSS, window_attn_skip_freq=None)
    assert attention_keys(every, 4096) == 256 and attention_keys(every, 100) == 100
    odd = replace(OSS, layers=5)  # blocks 2 and 4 full
    assert attention_keys(odd, 4096) == (2 * 4096 + 3 * 256) / 5
    assert attention_keys(replace(OSS, window_size=2048), 4096) == 4096
    full = replace(OSS, window_size=None, window_attn_skip_freq=None)
    assert attention_core_flops(OSS, 2) == attention_core_flops(full, 2) * 2176 / 4096
    assert attention_core_flops(OSS, 2, window=False) == attention_core_flops(full, 2)  # an unfused kernel's square
    assert attention_share(OSS) < attention_share(full)
    # per token, the attention core of 12·l·q·s becomes 12·l·q·2,176
    assert moe_flops_per_token(full, 128, 4) - moe_flops_per_token(OSS, 128, 4) == 12 * 36 * 4096 * (4096 - 2176)


def test_the_window_shortens_the_step_and_nothing_else_moves():
    dev = for_framework(GPUS["h100"], "megatron")
    lay = Layout(dp=16, tp=1, pp=4, zero=1, recompute="none", flash_attention=True, ep=8, etp=1)
    full = replace(OSS, window_size=None, window_attn_skip_freq=None)
    win, ful = estimate(OSS, dev, lay, 1280), estimate(full, dev, lay, 1280)
    assert win.time["compute"] < ful.time["compute"] and win.time["ep"] == ful.time["ep"]
    assert win.mem["total"] == ful.mem["total"]  # FlashAttention keeps no s² scores either way
    assert 1.0 < ful.time["total"] / win.time["total"] < 1.1  # attention is ~10 % of GPT-OSS's FLOPs


@pytest.mark.parametrize(
    "argv, words",
    [
        ("--model 70b --window-attn-skip-freq 2", ("--window-attn-skip-freq 2", "--window-size")),
        ("--model 70b --window-size 0", ("--window-size 0", ">= 1")),
        (f"{' '.join(FLAGS)} --gpu h100 --tp 1 --pp 1 --dp 8 --cp 2", ("cp=2", "window_size=128", "cp=1")),
    ],
)
def test_one_line_errors(argv, words, capsys):
    assert main(argv.split()) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err


def test_minipar_counts_refuse_a_window():
    """minipar's own GPT (the CPU's counts, lessons) attends to every earlier token: no window to model."""
    from minipar.perf.layout_checks import check_layout

    tiny = replace(OSS, layers=2, hidden=64, heads=4, kv_heads=None, kv_channels=None, experts=None, seq=64)
    with pytest.raises(ConfigError, match="window_size=128.*GPU counts only"):
        check_layout(tiny, Layout(dp=2, tp=1, pp=1), 4, counts="minipar")


def test_modelshape_refuses_a_skip_without_a_window():
    with pytest.raises(ConfigError, match="window_size"):
        replace(OSS, window_size=None)
    with pytest.raises(ConfigError, match="window_size=0"):
        replace(OSS, window_size=0)


def test_json_carries_the_window_and_equals_the_test_row(capsys):
    """The CLI's fixed GPT-OSS layout (Megatron-Bridge's recipe, module doc of :mod:`minipar.perf.mb_archive`) gives the
    test row's step: the flags and the row are one shape."""
    from minipar.perf.nemo import NEMO, nemo_layout, shape

    argv = [*FLAGS, *FIXED.split(), "--recompute", "selective", "--recompute-modules", "layernorm,moe_act",
            "--overlap", "dp,pp", "--grad-reduce-dtype", "bf16", "--fused-loss", "--json"]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (row["window_size"], row["window_attn_skip_freq"]) == (128, 2)
    test_row = next(r for r in NEMO if r[1] == "GPT-OSS-120B" and r[0] == "MB 26.04")
    assert shape(test_row[1]) == OSS
    dev = for_framework(GPUS["h100"], "megatron")
    from minipar.perf.hardware import with_fused_loss

    e = estimate(OSS, with_fused_loss(dev), nemo_layout(test_row), 1280)
    assert row["step_s"] == round(e.time["total"], 4)
    assert "window_size" not in json.loads(_plan_json(["--model", "70b", "--tp", "8", "--pp", "1", "--dp", "8"]))


def _plan_json(argv):
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*argv, "--gpu", "h100", "--json"]) == 0
    return out.getvalue().strip().splitlines()[-1]


def test_the_table_names_the_window(capsys):
    """The plan's header says which blocks are windowed (18 of GPT-OSS's 36; every block without a skip frequency)."""
    argv = [*FLAGS, "--gpus", "64", "--gpu", "h100", "--framework", "megatron", "--global-batch", "1280", "--top", "1"]
    assert main(argv) == 0
    assert "seq 4096, a 128-token window in 18 of 36 blocks)" in capsys.readouterr().out
    skip = argv.index("--window-attn-skip-freq")
    assert main(argv[:skip] + argv[skip + 2 :]) == 0
    assert "a 128-token window in 36 of 36 blocks" in capsys.readouterr().out
