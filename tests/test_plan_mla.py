"""Issue #38 item 2 ("every knob a real run sets"): multi-latent attention (MLA; DeepSeek-AI 2024, DeepSeek-V2,
arXiv:2405.04434, §2.1), Megatron-Core's ``--multi-latent-attention`` with ``--q-lora-rank --kv-lora-rank
--qk-head-dim --qk-pos-emb-head-dim --v-head-dim``. With the dense first blocks, the experts' own width and the shared
expert, DeepSeek-V3's shape is expressible: its 671B / 37B parameters, Megatron-LM's FLOP count, the GEMMs one TP rank
runs (the down projections whole on each rank, over its own tokens), the bytes a block keeps and a ring step sends."""

import json
from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.block_time import cp_block_bytes
from minipar.perf.flops import (
    activation_bytes_per_layer,
    attention_core_flops,
    layer_gemm_flops,
    megatron_flops_per_token,
    moe_params,
)
from minipar.perf.gemm import attention_gemms, block_gemms
from minipar.perf.layout import Layout
from minipar.perf.layout_checks import check_layout
from minipar.perf.shape import UNTIED_ROPE, ModelShape
from minipar.plan import main

# DeepSeek-V3 (its Hugging Face config.json): 61 blocks, h 7,168, 128 heads, MLA (r_q 1,536, r_kv 512, heads of 128 + 64
# rotary for QKᵀ, 128 for V), the first 3 blocks dense (FFN 18,432), then 256 experts of 2,048, top-8, one shared
DSV3 = ModelShape(61, 7168, 128, 4096, 129280, False, None, 18432, True, False, experts=256, top_k=8, shared_ffn=2048,
                  moe_ffn=2048, dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128,
                  qk_pos_emb_head_dim=64, v_head_dim=128, **UNTIED_ROPE)  # fmt: skip
FLAGS = ("--layers 61 --hidden 7168 --heads 128 --ffn 18432 --swiglu --vocab 129280 --seq 4096 --no-dropout "
         "--untie-embeddings-and-output-weights --position-embedding-type rope --q-lora-rank 1536 --kv-lora-rank 512 "
         "--qk-head-dim 128 --qk-pos-emb-head-dim 64 --v-head-dim 128 --moe-experts 256 --moe-top-k 8 "
         "--moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048").split() + [
    "--moe-layer-freq", "([0]*3+[1]*58)"]  # fmt: skip


def test_deepseek_v3_counts_match_its_report():
    """ "671B total parameters with 37B activated for each token" (DeepSeek-V3 Technical Report, arXiv:2412.19437,
    abstract and §4.2; the MTP module's 14B apart): the count here holds both V×h matrices among the active ones."""
    total, active = moe_params(DSV3, 256, 8)
    assert abs(total / 671e9 - 1) < 0.002, total
    assert 36.5e9 < active - DSV3.vocab * DSV3.hidden < 37.5e9, active
    h, a = 7168, 128
    assert DSV3.attn_matrix_params == h * 1536 + 1536 * a * 192 + h * (512 + 64) + 512 * a * 256 + a * 128 * h
    assert (DSV3.qk_dim, DSV3.v_dim, DSV3.core_width) == (192, 128, a * (192 + 128) / 2)


def megatron_mla_reference(m: ModelShape) -> float:
    """Megatron-LM's ``num_floating_point_operations`` for this shape, written out from its MLA and MoE branches
    (megatron/training/training.py, ``transformer_flops``: fwd+bwd 3, FMA 2), per token, without MTP."""
    h, a, s, l = m.hidden, m.heads, m.seq, m.layers
    q_term = m.q_lora_rank * (h + a * (m.qk_head_dim + m.qk_pos_emb_head_dim) + 1)
    attn = 6 * (q_term + m.kv_lora_rank * (h + a * (m.qk_head_dim + m.v_head_dim) + 1) + h * m.qk_pos_emb_head_dim
                + a * m.v_head_dim * h)  # fmt: skip
    core = 6 * (a * (m.qk_head_dim + m.qk_pos_emb_head_dim) / 2 + a * m.v_head_dim / 2) * s
    dense_mlp = 6 * 2 * h * m.ffn * 1.5
    moe_mlp = 6 * 2 * h * (m.moe_ffn * m.top_k + m.shared_ffn) * 1.5
    return l * (attn + core) + m.dense_layers * dense_mlp + (l - m.dense_layers) * moe_mlp + 6 * h * m.vocab


def test_megatrons_count():
    assert megatron_flops_per_token(DSV3) == pytest.approx(megatron_mla_reference(DSV3), rel=1e-12)


def test_the_gemms_one_tp_rank_runs():
    """The down projections are ``duplicated`` (TELinear), over this rank's own tokens: all of them without sequence
    parallelism (each rank does the same work), 1/t with it (then the FLOPs per rank are the block's over t)."""
    T, t = 4096, 4
    q_down, q_up, kv_down, kv_up, proj = attention_gemms(DSV3, T, t, sp=True)
    assert q_down == (T / t, 1536, 7168) and kv_down == (T / t, 512 + 64, 7168)
    assert q_up == (T, 128 * 192 / t, 1536) and kv_up == (T, 128 * 256 / t, 512) and proj == (T, 7168, 128 * 128 / t)
    assert attention_gemms(DSV3, T, t)[0] == (T, 1536, 7168)  # no sequence parallelism: every token on every rank
    dense = DSV3.block_kinds()[0][0]
    flops = sum(2 * m * n * k for m, n, k in block_gemms(dense, T, t, sp=True))
    assert flops == pytest.approx(layer_gemm_flops(dense, 1, T) / t)
    no_q_lora = replace(DSV3, q_lora_rank=None)  # DeepSeek-V2-Lite: Q straight from h
    assert attention_gemms(no_q_lora, T, t)[0] == (T, 128 * 192 / t, 7168)


def test_attention_core_bytes_and_ring_messages():
    b, s, t = 1, 4096, 8
    assert attention_core_flops(DSV3, b) == 4 * b * s * s * 128 * (192 + 128) / 2  # 2·a·d_qk + 2·a·d_v per pair
    dense = DSV3.block_kinds()[0][0]
    split = (8 * dense.core_width + 2 * 18432 * 3) * s * b  # Q, K (d_qk), V, the output (d_v); the MLP's three
    rep = 8 * s * b * 7168 + 4 * (1536 + 512) * s * b  # LayerNorm, QKV and MLP inputs; the two latents, before and
    assert activation_bytes_per_layer(dense, b, t, "none", True, 2, True) == (rep + split) / t  # after their norms
    assert cp_block_bytes(DSV3, b, s, t, 2) == b * s * 128 * (192 + 128) / t * 2  # every head its own K and V


def test_one_line_errors(capsys):
    with pytest.raises(ConfigError, match="needs kv_lora_rank, qk_head_dim, qk_pos_emb_head_dim, v_head_dim"):
        replace(DSV3, v_head_dim=None)
    with pytest.raises(ConfigError, match="a K and V per head"):
        replace(DSV3, kv_heads=8)
    with pytest.raises(ConfigError, match="GPU counts only"):
        check_layout(replace(DSV3, experts=None, moe_ffn=None, shared_ffn=None, dense_layers=0, layers=2), Layout(
            dp=2, tp=1, pp=1), 4, counts="minipar")  # fmt: skip
    with pytest.raises(ConfigError, match="MLA"):
        check_layout(replace(DSV3, experts=None, moe_ffn=None, shared_ffn=None, dense_layers=0), Layout(
            dp=8, tp=1, pp=1, recompute="op"), 8)  # fmt: skip
    assert main([*FLAGS[: FLAGS.index("--qk-head-dim")], "--gpu", "h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "multi-latent attention needs" in err, err


def test_deepseek_v3_from_the_command_line(capsys):
    """The flags give DeepSeek-V3's shape (a fixed layout: TP 2, PP 8 as 7 + 6·8 + 6 blocks, EP 64 over 1,024
    H100s): the header's 671.2B, a step, and the JSON carries every MLA width."""
    fixed = ("--gpu h100 --framework megatron --precision fp8 --global-batch 8192 --tp 2 --pp 8 --dp 64 --ep 64 "
             "--expert-tp 1 --zero 1 --sp --flash-attention --recompute selective --first-stage-layers 7 "
             "--last-stage-layers 6 --json").split()  # fmt: skip
    assert main([*FLAGS, *fixed]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["kv_lora_rank"] == 512 and row["q_lora_rank"] == 1536 and row["dense_layers"] == 3
    assert (row["qk_head_dim"], row["qk_pos_emb_head_dim"], row["v_head_dim"]) == (128, 64, 128)
    assert "kv_channels" not in row  # hidden/heads (56) is no head's width here
    assert 0.05 < row["mfu"] < 0.6 and row["step_s"] > 0
    assert main([*FLAGS, *fixed[:-1], "--top", "1"]) == 0
    assert "671.2B params" in capsys.readouterr().out
