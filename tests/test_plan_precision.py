"""Issue #38 item 2: ``--precision fp8``: the blocks' weight GEMMs at the device's dense FP8 peak, the rest in bf16;
refused on a device without FP8 tensor cores."""

import json

import pytest

from minipar.errors import ConfigError
from minipar.perf.block_time import gemm_rate
from minipar.perf.flops import layer_gemm_flops
from minipar.perf.gemm import block_gemm_time
from minipar.perf.hardware import GPUS
from minipar.perf.layout import Layout
from minipar.perf.model import estimate
from minipar.perf.published import MODELS
from minipar.plan import main, parser

LLAMA70B = ["--layers", "80", "--hidden", "8192", "--heads", "64", "--kv-heads", "8", "--ffn", "28672", "--swiglu"]
LLAMA70B += ["--vocab", "128256", "--seq", "8192", "--gpu", "h100", "--global-batch", "2048"]
FIXED = ["--tp", "8", "--pp", "8", "--dp", "16", "--zero", "1", "--recompute", "selective", "--sp"]
FIXED += ["--flash-attention", "--json"]


def _run(argv, capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_fp8_is_in_help_and_json(capsys):
    text = parser().format_help()
    assert "--precision" in text and "--device-fp8-tflops" in text
    bf16 = _run([*LLAMA70B, *FIXED], capsys)
    fp8 = _run([*LLAMA70B, *FIXED, "--precision", "fp8"], capsys)
    assert "precision" not in bf16 and "fp8_tflops" not in bf16["device"]  # the default's JSON is unchanged
    assert fp8["precision"] == "fp8" and fp8["device"]["fp8_tflops"] == 1979.0 and "·fp8" in fp8["layout"]


def test_fp8_halves_only_the_weight_gemms(capsys):
    """On an H100 (1979 vs 989 dense TFLOP/s) the compute term loses half of the weight GEMMs' time and nothing else:
    the attention core, memory-bound operators and logit layer stay bf16; memory and communication are bf16's."""
    bf16 = _run([*LLAMA70B, *FIXED], capsys)
    fp8 = _run([*LLAMA70B, *FIXED, "--precision", "fp8"], capsys)
    dev = GPUS["h100"]
    assert gemm_rate(dev, Layout(1, 1, 1, fp8=True)) / gemm_rate(dev, Layout(1, 1, 1)) == pytest.approx(
        1979 / 989 * 0.79
    )
    saved = bf16["time_s"]["compute"] - fp8["time_s"]["compute"]
    assert 0 < saved < bf16["time_s"]["compute"] / 2
    assert fp8["mem_gb"] == bf16["mem_gb"] and fp8["time_s"]["tp"] == bf16["time_s"]["tp"]
    assert fp8["time_s"]["dp"] == bf16["time_s"]["dp"] and fp8["mfu"] > bf16["mfu"]


def test_the_gemm_share_of_the_saving():
    """Exactly: the saving is the weight GEMMs' time at bf16 minus at FP8, each GEMM at its own shape
    (:func:`minipar.perf.gemm.block_gemm_time`: waves, roofline), forward and backward (selective: none recomputed)."""
    model, dev = MODELS["70b"], GPUS["h100"]
    lay = Layout(dp=8, tp=8, pp=1, recompute="selective", flash_attention=True)
    bf16, fp8 = estimate(model, dev, lay, 64), estimate(model, dev, Layout(**{**lay.__dict__, "fp8": True}), 64)
    passes = lambda fp8: sum(block_gemm_time(dev, model, model.seq, 8, fp8, bwd) for bwd in (False, True))  # noqa: E731
    want = (passes(False) - passes(True)) * model.layers * 8  # per rank: m = 8 micro-batches of b = 1
    gemm = layer_gemm_flops(model, 1) / 8 * model.layers * 8  # large GEMMs: about FLOPs × (1/rate_bf16 − 1/rate_fp8)
    rough = 3 * gemm * (1 / gemm_rate(dev, lay) - 1 / gemm_rate(dev, Layout(1, 1, 1, fp8=True)))
    assert want == pytest.approx(rough, rel=0.1)
    assert bf16.time["compute"] - fp8.time["compute"] == pytest.approx(want, rel=1e-9)


CASES = [
    (
        [*LLAMA70B, *FIXED, "--gpu", "a100", "--precision", "fp8"],
        "--precision fp8: A100-SXM4-80GB has no FP8 tensor cores (the A100's datasheet: TF32, bf16/fp16, int8); use "
        "--gpu h100, h200 or b200",
    ),
    (["--gpu", "a100-40gb", "--precision", "fp8"], "--precision fp8: A100-SXM4-40GB has no FP8 tensor cores"),
    (["--device-fp8-tflops", "0"], "--device-fp8-tflops 0.0: must be a finite number > 0 (dense FP8 TFLOP/s per GPU"),
    (["--moe-experts", "8", "--precision", "fp8", "--gpu", "a100"], "--precision fp8: A100-SXM4-80GB has no FP8"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[m.split(":")[0][:40] for _, m in CASES])
def test_contradictions_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith(f"error: {message}") and cap.err.count("\n") == 1, cap.err


def test_a_custom_fp8_peak_and_the_library_refusal(capsys):
    r = _run([*LLAMA70B, *FIXED, "--gpu", "a100", "--device-fp8-tflops", "600", "--precision", "fp8"], capsys)
    assert r["device"]["fp8_tflops"] == 600.0
    with pytest.raises(ConfigError, match="fp8 on A100-SXM4-80GB: it has no FP8 tensor cores"):
        estimate(MODELS["70b"], GPUS["a100"], Layout(8, 8, 1, fp8=True), 64)
