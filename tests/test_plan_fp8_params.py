"""Issue #38 item 2, "memory of FP8 weights as the recipe keeps them": Transformer Engine's FP8 copies of the blocks'
weights (:func:`minipar.perf.memory.fp8_weight_bytes`) and ``--fp8-param-gather`` (``Layout.fp8_params``: FP8 weights,
ZeRO's all-gather of them in 1 byte each, :func:`minipar.perf.sharding.gather_bytes`)."""

import json
from dataclasses import replace

import pytest

from minipar.comm.cost import ring_time
from minipar.errors import ConfigError
from minipar.perf.dgxc import dgxc_rows
from minipar.perf.flops import head_params, stage_params
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.layout_checks import check_layout
from minipar.perf.memory import FP8_WEIGHT_BYTES, memory_per_gpu
from minipar.perf.model import estimate
from minipar.perf.nemo import NEMO_FIT, nemo_rows, shape
from minipar.perf.published import MODELS
from minipar.perf.search import plan
from minipar.perf.sharding import gather_bytes, links
from minipar.plan import main, parser

LLAMA70B = ["--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--swiglu"]
LLAMA70B += ["--vocab", "128256", "--seq", "8192", "--gpu", "h100", "--global-batch", "2048"]
FIXED = ["--tp", "8", "--pp", "8", "--dp", "16", "--zero", "1", "--recompute", "selective", "--sp"]
FIXED += ["--flash-attention", "--json", "--framework", "megatron", "--precision", "fp8"]
MEGATRON = for_framework(GPUS["h100"], "megatron")


def _run(argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_the_flag_is_in_help_and_json(capsys):
    assert "--fp8-param-gather" in parser().format_help()
    plain = _run([*LLAMA70B, *FIXED], capsys)
    kept = _run([*LLAMA70B, *FIXED, "--fp8-param-gather"], capsys)
    assert plain["fp8_param_gather"] is False and kept["fp8_param_gather"] is True
    assert kept["layout"].count("·fp8(params)") == 1 and "(params)" not in plain["layout"]
    assert kept["mem_gb"] < plain["mem_gb"] and kept["time_s"]["dp"] <= plain["time_s"]["dp"]


def test_te_keeps_two_bytes_per_fp8_weight_beside_or_instead_of_the_bf16_one():
    """One stage (pp 1): the weights' bytes are 2·Ψ in bf16; FP8 adds 2 bytes per block weight (its FP8 data and their
    transpose), the embedding and output layer excepted; with FP8 weights those 2 bytes replace the bf16 ones."""
    model, lay = MODELS["70b"], Layout(8, 8, 1, zero=1, recompute="selective", seq_parallel=True, flash_attention=True)
    psi, head = stage_params(model, 1, 8)[0], head_params(model, 1, 8)[0]
    bf16, fp8, kept = (
        memory_per_gpu(model, MEGATRON, replace(lay, **kw), 8)
        for kw in ({}, {"fp8": True}, {"fp8": True, "fp8_params": True})
    )
    assert bf16["params"] == 2 * psi and FP8_WEIGHT_BYTES == 2
    assert fp8["params"] == pytest.approx(2 * psi + 2 * (psi - head), rel=1e-12)
    assert kept["params"] == pytest.approx(2 * psi, rel=1e-12)
    zero3 = replace(lay, fp8=True, zero=3)  # ZeRO-3: the cached copies shard over dp as the weights do
    z3 = (
        memory_per_gpu(model, MEGATRON, zero3, 8)["params"]
        - memory_per_gpu(model, MEGATRON, replace(zero3, fp8=False), 8)["params"]
    )
    assert z3 == pytest.approx(2 * (psi - head) / 8, rel=1e-12)
    torchao = memory_per_gpu(model, GPUS["h100"], replace(lay, fp8=True), 8)  # PyTorch stacks: no cached copy
    assert torchao["params"] == memory_per_gpu(model, GPUS["h100"], lay, 8)["params"]


def test_fp8_weights_are_gathered_in_one_byte():
    """ZeRO-1 over 16 ranks, nothing hidden: the weights' all-gather moves 1 byte per block weight, 2 per embedding and
    output-layer weight, and the step's DP time falls by exactly the difference of the two ring all-gathers."""
    model = MODELS["70b"]
    lay = Layout(16, 8, 1, zero=1, recompute="selective", seq_parallel=True, flash_attention=True, fp8=True)
    psi, head = stage_params(model, 1, 8)[0], head_params(model, 1, 8)[0]
    assert gather_bytes(model, MEGATRON, lay) == (2 * psi, 0.0)
    kept = replace(lay, fp8_params=True)
    assert gather_bytes(model, MEGATRON, kept) == (2 * head + psi - head, 0.0)
    link, n = links(MEGATRON, lay)["dp"], 16
    saved = ring_time(n, 2 * psi, link) - ring_time(n, psi + head, link)
    a, b = estimate(model, MEGATRON, lay, 128), estimate(model, MEGATRON, kept, 128)
    assert a.time["dp"] - b.time["dp"] == pytest.approx(saved, rel=1e-9) and saved > 0


CASES = [
    ([*LLAMA70B, *FIXED[:-2], "--fp8-param-gather"], "--fp8-param-gather with --precision bf16: it keeps FP8 weights"),
    ([*LLAMA70B, *FIXED, "--fp8-param-gather", "--zero", "0"], "--fp8-param-gather with --zero 0: Megatron-LM gathers"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=["no fp8", "zero 0"])
def test_contradictions_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith(f"error: {message}") and cap.err.count("\n") == 1, cap.err


def test_the_layout_refuses_what_megatron_refuses():
    model = MODELS["70b"]
    with pytest.raises(ConfigError, match="fp8_params=True keeps the blocks' weights in FP8: needs fp8=True"):
        check_layout(model, Layout(8, 8, 1, zero=1, fp8_params=True), 64)
    with pytest.raises(ConfigError, match="fp8_params=True with zero=0 over 8 ranks"):
        check_layout(model, Layout(8, 8, 1, fp8=True, fp8_params=True), 64)
    assert check_layout(model, Layout(1, 8, 1, fp8=True, fp8_params=True), 64) == 64  # one rank: ZeRO 0 is ZeRO 1


def test_the_search_keeps_a_distributed_optimizer():
    rows = plan(MODELS["70b"], MEGATRON, 64, 128, flash_attention=True, fp8=True, fp8_params=True)
    assert rows and all(e.layout.fp8_params for e, _ in rows)
    assert all(e.layout.zero >= 1 for e, _ in rows if e.layout.dp * e.layout.cp > 1)


def test_published_rows_keep_fp8_weights_as_their_recipes_say():
    """DGX Cloud's FP8 runs set ``fp8_params`` (v25.01's configure.sh, v25.04's NeMo 2.0 recipes); NeMo 24.07's
    launcher YAMLs leave it off. Nemotron-4 340B's fit row is ASSUMED on: off, the model's count exceeds its 80 GiB."""
    fp8 = [(label, e) for label, e, *_ in dgxc_rows() if e.layout.fp8]
    assert fp8 and all(e.layout.fp8_params for _, e in fp8)
    for label, e, *_ in nemo_rows(None, NEMO_FIT):
        assert e.layout.fp8_params == ("Nemotron-340B" in label), label
        if "Nemotron-340B" in label:
            off = memory_per_gpu(shape("Nemotron-340B"), MEGATRON, replace(e.layout, fp8_params=False), e.m)
            assert e.mem["total"] < 0.95 * 80 * 2**30 < 1.01 * 80 * 2**30 < off["total"]
