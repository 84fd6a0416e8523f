"""Issue #38 item 2 ("every knob a real run sets"): shared experts, Megatron-Core's
``--moe-shared-expert-intermediate-size`` (``ModelShape.shared_ffn``).

Beside its k routed experts every token also passes through the shared experts (DeepSeekMoE, Dai et al. 2024,
arXiv:2401.06066, §3.2; Qwen2-MoE, DeepSeek-V2/V3, Llama 4). Megatron-Core builds them as one dense MLP of their summed
width, split over TP like a dense MLP (``SharedExpertMLP``). Each count below moves by exactly that MLP; nothing moves
without it."""

import json
from dataclasses import replace

import pytest

from minipar.comm.cost import all_reduce_time
from minipar.errors import ConfigError
from minipar.perf.flops import expert_extra_flops, megatron_flops_per_token, mlp_params, moe_flops_per_token, moe_params
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.model import _links, estimate
from minipar.perf.moe import moe_activation_bytes, moe_block_times, moe_gemm_shapes, moe_stage_params
from minipar.perf.recompute_modules import freed_bytes
from minipar.perf.shape import UNTIED_ROPE, ModelShape
from minipar.plan import main

# Qwen2-57B-A14B (its Hugging Face config.json): 28 blocks, h 3,584, 28 heads, 4 kv heads, 64 experts of FFN 2,560,
# top-8, a shared expert of 20,480, V 151,936, untied, rotary, QKV biases (counted here on every linear: < 0.01 %)
QWEN2_57B = ModelShape(28, 3584, 28, 4096, 151936, True, 4, 2560, True, False, experts=64, top_k=8,
                       shared_ffn=20480, **UNTIED_ROPE)  # fmt: skip
NONE = replace(QWEN2_57B, shared_ffn=None)


def test_qwen2_57b_counts_match_its_report():
    """57B parameters, 14B activated (Yang et al. 2024, "Qwen2 Technical Report", arXiv:2407.10671, Table 1); without
    the shared expert the active count would miss 28 blocks × 3·h·20,480 = 6.2B of them."""
    total, active = moe_params(QWEN2_57B, 64, 8)
    assert 57.0e9 < total < 57.5e9 and 14.0e9 < active < 14.5e9, (total, active)
    assert moe_params(QWEN2_57B, 64, 8)[1] - moe_params(NONE, 64, 8)[1] == 28 * mlp_params(QWEN2_57B, 20480)
    assert mlp_params(QWEN2_57B, 20480) == 3 * 3584 * 20480 + 2 * 20480 + 3584


def test_every_count_moves_by_the_shared_mlp():
    h, fs, s, b, t = 3584, 20480, 4096, 2, 4
    assert expert_extra_flops(QWEN2_57B, b) - expert_extra_flops(NONE, b) == 2 * b * s * 3 * h * fs
    assert moe_flops_per_token(QWEN2_57B, 64, 8) - moe_flops_per_token(NONE, 64, 8) == 6 * 28 * mlp_params(
        QWEN2_57B, fs
    )
    assert megatron_flops_per_token(QWEN2_57B) - megatron_flops_per_token(NONE) == 18 * 28 * h * fs
    dense, expert = moe_gemm_shapes(QWEN2_57B, b * s, t, 8)
    assert dense[-2:] == [(b * s, 2 * fs / t, h), (b * s, h, fs / t)]  # a dense MLP's, split over t
    assert (dense[:-2], expert) == moe_gemm_shapes(NONE, b * s, t, 8)
    bytes_ = moe_activation_bytes(QWEN2_57B, b, t, "none", True, 2, True, 1) - moe_activation_bytes(
        NONE, b, t, "none", True, 2, True, 1
    )
    assert bytes_ == 2 * fs * 3 * s * b / t  # its up, gate and down inputs, bf16
    assert moe_activation_bytes(QWEN2_57B, b, t, "full", True, 2, True, 1) == moe_activation_bytes(
        NONE, b, t, "full", True, 2, True, 1
    )  # full recomputation keeps the block's input only
    # Megatron-Core's "moe" recompute module re-runs the whole MoE layer, the shared MLP in it: it frees that too
    freed = freed_bytes(QWEN2_57B, b, t, True, 2, 1, False, ("moe",)) - freed_bytes(
        NONE, b, t, True, 2, 1, False, ("moe",)
    )
    assert freed == bytes_ and freed_bytes(QWEN2_57B, b, t, True, 2, 1, False, ("moe_act",)) == freed_bytes(
        NONE, b, t, True, 2, 1, False, ("moe_act",)
    )  # moe_act: the routed experts' activation only
    lay = Layout(dp=8, tp=t, pp=2, zero=1, ep=8, seq_parallel=True, flash_attention=True)
    for (d1, e1), (d0, e0), n in zip(moe_stage_params(QWEN2_57B, lay, [14, 14]), moe_stage_params(NONE, lay, [14, 14]),
                                     (14, 14)):  # fmt: skip
        assert e1 == e0 and d1 - d0 == pytest.approx(n * mlp_params(QWEN2_57B, fs) / t, rel=1e-12)
    dev = for_framework(GPUS["h100"], "megatron")
    links = _links(dev, lay)
    one, zero = moe_block_times(QWEN2_57B, dev, lay, b * s, links), moe_block_times(NONE, dev, lay, b * s, links)
    assert one["tp_mlp"] - zero["tp_mlp"] == pytest.approx(all_reduce_time(t, b * s * h * 2, links["tp"]))
    assert one["f"] > zero["f"] and one["a2a"] == zero["a2a"]


def test_the_step_pays_for_it():
    dev = for_framework(GPUS["h100"], "megatron")
    lay = Layout(dp=16, tp=2, pp=2, zero=1, ep=8, etp=1, seq_parallel=True, flash_attention=True, recompute="none")
    one, zero = estimate(QWEN2_57B, dev, lay, 512), estimate(NONE, dev, lay, 512)
    assert one.time["total"] > zero.time["total"] and one.mem["total"] > zero.mem["total"]
    assert one.mfu > 0.2  # its active FLOPs counted (the MFU's numerator grows with them)


def test_modelshape_and_flags_refuse_shared_experts_without_routed_ones(capsys):
    with pytest.raises(ConfigError, match="shared_ffn=2048"):
        replace(NONE, experts=None, shared_ffn=2048)
    for argv, words in (
        ("--model 70b --moe-shared-expert-intermediate-size 2048", ("2048", "--moe-experts")),
        ("--model 7b --moe-experts 8 --moe-shared-expert-intermediate-size 0", ("size 0", ">= 1")),
    ):
        assert main(argv.split()) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and all(w in err for w in words), err


def test_json_carries_it(capsys):
    argv = (
        "--layers 28 --hidden 3584 --heads 28 --kv-heads 4 --ffn 2560 --swiglu --vocab 151936 --seq 4096 "
        "--moe-experts 64 --moe-top-k 8 --moe-shared-expert-intermediate-size 20480 --gpu h100 --framework "
        "megatron --tp 2 --pp 2 --dp 16 --ep 8 --expert-tp 1 --zero 1 --sp --flash-attention --json"
    ).split()
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["shared_ffn"] == 20480 and row["experts"] == 64
    assert main(argv[: argv.index("--moe-shared-expert-intermediate-size")] + argv[argv.index("--gpu") :]) == 0
    assert "shared_ffn" not in json.loads(capsys.readouterr().out.strip().splitlines()[-1])
