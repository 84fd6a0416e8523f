"""Issue #38 item 2 ("every knob a real run sets"): blocks of two kinds. DeepSeek-V3, Kimi K2 and GLM-4.5 keep a dense
MLP in their first blocks and put experts of another width in the rest (Hugging Face's ``first_k_dense_replace``,
Megatron-Core's ``--moe-layer-freq ([0]*K+[1]*M)`` and ``--moe-ffn-hidden-size``; ``ModelShape.dense_layers`` and
``moe_ffn``). Each kind is counted as a model of that block alone (``ModelShape.block_kinds``), placed on the model
chunks that hold it (``Layout.chunk_kinds``): parameters, FLOPs, each chunk's seconds and bytes. Without them every
count is what it was, to the last bit (the test set's 338 rows were compared when the kinds came in)."""

import json
from dataclasses import replace

import pytest

from minipar.errors import ConfigError
from minipar.perf.flops import attention_core_flops, layer_gemm_flops, megatron_flops_per_token, mlp_params, moe_params
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.model import estimate
from minipar.perf.moe import expert_extra_flops, moe_gemm_shapes, moe_stage_params, training_flops
from minipar.perf.moe_flags import dense_layers
from minipar.perf.shape import UNTIED_ROPE, ModelShape
from minipar.plan import main

# a DeepSeek-like shape without MLA: 3 dense blocks of FFN 18,432, then experts of 2,048, one shared of 2,048, top-8
BASE = ModelShape(16, 4096, 32, 4096, 32000, False, 8, 18432, True, False, experts=64, top_k=8, **UNTIED_ROPE)
MIXED = replace(BASE, moe_ffn=2048, shared_ffn=2048, dense_layers=3)
DEV = for_framework(GPUS["h100"], "megatron")


def test_block_kinds_and_their_chunks():
    (dense, n_d), (moe, n_m) = MIXED.block_kinds()
    assert (n_d, n_m) == (3, 13) and dense.experts is None and dense.f == 18432 and dense.shared_ffn is None
    assert moe.experts == 64 and moe.f == 2048 and moe.shared_ffn == 2048 and moe.layers == 16
    assert BASE.block_kinds() == [(BASE, 16)]  # every block alike: the model itself
    assert replace(BASE, moe_ffn=2048).block_kinds() == [(replace(BASE, ffn=2048), 16)]
    # 16 blocks on pp 2 · v 2: chunks of 4, in model order chunk 0 (rank 0) holds the 3 dense blocks and one more
    kinds = Layout(dp=1, tp=1, pp=2, v=2).chunk_kinds(MIXED)
    assert [counts for _, counts in kinds] == [[3, 0, 0, 0], [1, 4, 4, 4]]
    kinds = Layout(dp=1, tp=1, pp=4, first_stage_layers=2, last_stage_layers=2).chunk_kinds(MIXED)
    assert [counts for _, counts in kinds] == [[2, 1, 0, 0], [0, 5, 6, 2]]


def test_parameters_and_flops_by_hand():
    h, E, k = 4096, 64, 8
    moe_block = replace(BASE, ffn=2048, dense_layers=0).layer_params + (E - 1) * mlp_params(BASE, 2048) + E * h
    moe_block += mlp_params(BASE, 2048)  # the shared expert
    total, active = moe_params(MIXED, E, k)
    assert total == MIXED.embedding_params + 3 * BASE.layer_params + 13 * moe_block
    assert active == total - 13 * (E - k) * mlp_params(BASE, 2048)
    # Megatron-LM's count: 18·h·(f) for a dense block, 18·h·(k·f_e + f_s) for one with experts
    mlp = 18 * h * (3 * 18432 + 13 * (8 * 2048 + 2048))
    assert megatron_flops_per_token(MIXED) - megatron_flops_per_token(replace(MIXED, experts=None, moe_ffn=None,
           shared_ffn=None, dense_layers=0, top_k=1)) == pytest.approx(mlp - 18 * h * 16 * 18432)  # fmt: skip
    # a step's FLOPs: each kind's blocks at their own (3 passes each, no recomputation)
    B, (dense, _), (moe, _) = 4, *MIXED.block_kinds()
    per_block = lambda v: layer_gemm_flops(v, B) + attention_core_flops(v, B) + expert_extra_flops(v, B)  # noqa: E731
    logits = 2 * B * 4096 * h * 32000
    assert training_flops(MIXED, B) == pytest.approx(3 * (3 * per_block(dense) + 13 * per_block(moe) + logits))


def test_stage_params_put_the_dense_blocks_on_the_first_stage():
    lay = Layout(dp=8, tp=2, pp=2, zero=1, ep=8, etp=1, seq_parallel=True)
    (d0, e0), (d1, e1) = moe_stage_params(MIXED, lay, [8, 8])
    assert e0 == 5 * (64 // 8) * mlp_params(BASE, 2048) and e1 == 8 * (64 // 8) * mlp_params(BASE, 2048)
    # stage 0's 3 dense blocks keep their 18,432-wide MLP (÷ tp); each expert block a router and the shared MLP ÷ tp
    dense_mlp = mlp_params(BASE) / 2
    assert d0 - d1 == pytest.approx(3 * (dense_mlp - 64 * 4096 - mlp_params(BASE, 2048) / 2))


def test_each_chunk_at_its_own_blocks():
    lay = Layout(dp=8, tp=2, pp=2, zero=1, ep=8, etp=1, seq_parallel=True, flash_attention=True, recompute="none")
    mixed, moe_only = estimate(MIXED, DEV, lay, 256), estimate(replace(MIXED, dense_layers=0), DEV, lay, 256)
    assert mixed.time["total"] != moe_only.time["total"] and mixed.mem["total"] != moe_only.mem["total"]
    assert mixed.time["ep"] <= moe_only.time["ep"]  # the busiest rank's blocks with experts: as many, or fewer
    # the experts' GEMMs at their own width, the dense blocks' at ffn
    dense, expert = moe_gemm_shapes(MIXED.block_kinds()[1][0], 4096, 2, 8, etp=1)
    assert expert[0][1] == 2 * 2048 and dense[-1] == (4096, 4096, 2048 / 2)


def test_moe_layer_freq_is_read_never_run():
    assert dense_layers(None, 61) == 0 and dense_layers("1", 61) == 0
    assert dense_layers("([0]*3+[1]*58)", 61) == 3 and dense_layers("[0]*1 + [1]*60", 61) == 1
    for bad, words in (("([0]*3+[1]*57)", "3 + 57 blocks, the model has 61"), ("[1,0]*30", "not modelled"),
                       ("__import__('os').system('x')", "not modelled"), ("2", "not modelled")):  # fmt: skip
        with pytest.raises(ConfigError, match=words.replace("+", r"\+").replace("(", r"\(")):
            dense_layers(bad, 61)
    with pytest.raises(ConfigError, match="dense_layers=16"):
        replace(MIXED, dense_layers=16)
    with pytest.raises(ConfigError, match="moe_ffn=2048"):
        replace(BASE, experts=None, moe_ffn=2048)


def test_cli_flags_one_line_errors_and_json(capsys):
    shape = ("--layers 16 --hidden 4096 --heads 32 --kv-heads 8 --ffn 18432 --swiglu --vocab 32000 --seq 4096 "
             "--no-dropout --untie-embeddings-and-output-weights --position-embedding-type rope --moe-experts 64 "
             "--moe-top-k 8").split()  # fmt: skip
    fixed = "--gpu h100 --framework megatron --tp 2 --pp 2 --dp 8 --ep 8 --expert-tp 1 --zero 1 --sp --flash-attention"
    argv = [*shape, "--moe-ffn-hidden-size", "2048", "--moe-shared-expert-intermediate-size", "2048",
            "--moe-layer-freq", "([0]*3+[1]*13)", *fixed.split(), "--global-batch", "256", "--json"]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (row["moe_ffn"], row["dense_layers"], row["shared_ffn"]) == (2048, 3, 2048)
    e = estimate(MIXED, DEV, Layout(dp=8, tp=2, pp=2, zero=1, ep=8, etp=1, seq_parallel=True, flash_attention=True,
                                    recompute="selective"), 256)  # fmt: skip
    assert row["step_s"] == round(e.time["total"], 4)
    for bad, words in (
        ("--model 70b --moe-layer-freq ([0]*3+[1]*77)", ("--moe-layer-freq", "--moe-experts")),
        ("--model 70b --moe-ffn-hidden-size 2048", ("--moe-ffn-hidden-size 2048", "--moe-experts")),
        (" ".join([*shape, "--moe-ffn-hidden-size", "0"]), ("--moe-ffn-hidden-size 0", ">= 1")),
        (" ".join([*shape, "--moe-layer-freq", "[0]*2+[1]*2"]), ("2 + 2 blocks", "16")),
    ):
        assert main(bad.split()) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and all(w in err for w in words), err
