"""Issue #38: Megatron-Bridge's model verification cards (:mod:`minipar.perf.mb_cards`), node-limited routing
(DeepSeek-V3, arXiv:2412.19437, §2.1.2; Megatron-Core's ``moe_router_num_groups`` / ``moe_router_group_topk``) and
Megatron-Core's per-layer CUDA graphs (``--cuda-graph-scope``) over the host's floor under a MoE block."""

import json
import math
from dataclasses import replace

import pytest
import torch

from minipar.errors import ConfigError
from minipar.perf.hardware import GPUS, for_framework
from minipar.perf.layout import Layout
from minipar.perf.mb_cards import CARDS, GRAPHS_FIT, SETTINGS, card_rows
from minipar.perf.moe import MOE_HOST_S, a2a_seconds, host_floor, node_hit
from minipar.perf.nemo import SHAPES, nemo_layout
from minipar.plan import main
from tests.test_plan_mla import FLAGS

DSV3 = SHAPES["DeepSeek-V3"]


def _route(T: int, E: int, G: int, M: int, k: int, seed: int = 0) -> torch.Tensor:
    """Megatron-Core's group-limited top-k (``moe_utils.group_limited_topk``: a group's score the sum of its best two
    experts', the M best groups, then the k best experts in them) on forced balancing's random logits
    (``RandomSTE``: normal draws) through DeepSeek-V3's sigmoid scores: the [T, G] mask of groups hit."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, E, generator=g).sigmoid().view(T, G, E // G)
    chosen = x.topk(2, dim=-1).values.sum(-1).topk(M, dim=-1).indices
    keep = torch.zeros(T, G, dtype=torch.bool).scatter_(1, chosen, True)
    experts = x.masked_fill(~keep[:, :, None], -1.0).view(T, E).topk(k, dim=-1).indices
    return torch.zeros(T, G).scatter_(1, experts // (E // G), 1.0)


def test_node_limited_routing_reaches_half_the_nodes():
    """DeepSeek-V3 on 8 nodes (one group per node, 4 of 8 groups per token): the chance a node receives a token is
    the chance its group is chosen, 0.5, not uniform routing's 1 − C(224, 8)/C(256, 8) = 0.66; a simulation of the
    router on random logits agrees within 0.01 (a chosen group nearly always receives one of the k experts)."""
    uniform = 1 - math.comb(224, 8) / math.comb(256, 8)
    assert node_hit(DSV3, 8) == pytest.approx(0.5) and node_hit(replace(DSV3, **_no_groups()), 8) == pytest.approx(
        uniform
    )
    hits = _route(20000, 256, 8, 4, 8)
    assert abs(hits.mean().item() - node_hit(DSV3, 8)) < 0.01 and hits.sum(1).max() <= 4  # at most M nodes
    uni = lambda n: 1 - math.comb(256 - 256 // n, 8) / math.comb(256, 8)  # noqa: E731
    assert node_hit(DSV3, 2) == pytest.approx(1 - 1 / math.comb(8, 4)) and node_hit(DSV3, 2) < uni(2)  # 4 groups a node
    assert node_hit(DSV3, 3) == pytest.approx(uni(3))  # groups that do not align with nodes: uniform
    assert node_hit(DSV3, 16) == pytest.approx(uni(16)) and uni(16) < 4 / 8  # half a group a node: uniform is tighter


def _no_groups():
    return {"moe_router_num_groups": None, "moe_router_group_topk": None}


def test_the_flex_all_to_all_moves_fewer_bytes_across_the_network_and_nccls_the_same():
    dev = for_framework(GPUS["h100"], "megatron")
    flex = Layout(dp=64, tp=2, pp=8, ep=64, etp=1, dispatcher="flex")
    plain = replace(DSV3, **_no_groups())
    assert a2a_seconds(DSV3, 4096, flex, dev) < a2a_seconds(plain, 4096, flex, dev)
    nccl = replace(flex, dispatcher="alltoall")  # every copy to every expert's rank: the groups change nothing
    assert a2a_seconds(DSV3, 4096, nccl, dev) == a2a_seconds(plain, 4096, nccl, dev)


def test_the_deepseek_card_is_a_test_row_as_its_recipe_says():
    """The card's recipe (module doc, declared before its error was computed): BF16, no all-to-all overlap, HybridEP
    (flex), no grad-reduce overlap, the layout string and the two recomputed modules; within 15 %."""
    ((label, e, _, pub),) = card_rows()
    lay = nemo_layout(CARDS[0], SETTINGS)
    assert not lay.fp8 and lay.overlap == frozenset({"pp"}) and lay.dispatcher == "flex" and lay.cuda_graphs is None
    assert lay.stage_split == (1, *[2] * 30, 0) and lay.recompute_modules == ("mla_up_proj", "mlp")
    assert "bf16" in label and "MISS" not in label
    assert abs(e.mfu / pub - 1) < 0.15, e.mfu / pub - 1


def test_cuda_graphs_lift_the_host_floor_chosen_on_the_qwen3_card():
    """Qwen3 30B-A3B on 16 H100s in BF16 with the router and preprocessing graphed: −31 % with the host's floor,
    within 5 % without it (the fit, :data:`minipar.perf.mb_cards.GRAPHS_FIT`); its 6.6 ms per block and micro-batch
    bound what floor is left."""
    dev = for_framework(GPUS["h100"], "megatron")
    ((_, graphed, _, pub),) = card_rows(rows=GRAPHS_FIT)
    eager = {k: {**v, "cuda_graphs": None} for k, v in SETTINGS.items()}
    from minipar.perf.nemo import nemo_rows

    ((_, e, _, _),) = nemo_rows(None, GRAPHS_FIT, eager)
    assert abs(graphed.mfu / pub - 1) < 0.05 and e.mfu / pub - 1 < -0.25
    assert 1024 * 4096 / 16 / 13011.378 / (64 * 48) < 6.6e-3 < MOE_HOST_S["megatron"]
    lay = Layout(dp=16, tp=1, pp=1, ep=16)
    assert host_floor(dev, lay) == MOE_HOST_S["megatron"] == host_floor(dev, replace(lay, cuda_graphs=("attn",)))
    assert host_floor(dev, replace(lay, cuda_graphs=("moe_router",))) == MOE_HOST_S["megatron"]
    assert host_floor(dev, replace(lay, cuda_graphs=("moe_router", "moe_preprocess"))) == 0.0
    assert host_floor(dev, replace(lay, cuda_graphs=("moe",))) == 0.0
    assert host_floor(GPUS["h100"], lay) == 0.0  # the floor is Megatron-Core's (minipar.perf.moe.MOE_HOST_S)


FIXED = ("--gpu h100 --framework megatron --precision fp8 --global-batch 8192 --tp 2 --pp 8 --dp 64 --ep 64 "
         "--expert-tp 1 --zero 1 --sp --flash-attention --recompute selective --first-stage-layers 7 "
         "--last-stage-layers 6 --moe-dispatcher flex --json").split()  # fmt: skip


def test_cli_json_and_help(capsys):
    groups = ["--moe-router-num-groups", "8", "--moe-router-group-topk", "4"]
    assert main([*FLAGS, *groups, *FIXED, "--cuda-graph-scope", "attn,moe_preprocess,moe_router"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["moe_router_num_groups"] == 8 and row["moe_router_group_topk"] == 4
    assert row["cuda_graph_scope"] == ["attn", "moe_router", "moe_preprocess"] and "graphs(" in row["layout"]
    assert main([*FLAGS, *FIXED]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "cuda_graph_scope" not in plain and "moe_router_num_groups" not in plain
    assert plain["tokens_per_s_per_gpu"] < row["tokens_per_s_per_gpu"]  # fewer bytes across the network
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "--cuda-graph-scope" in out and "--moe-router-num-groups" in out and "--moe-router-group-topk" in out


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--cuda-graph-scope", "moe_preprocess"], "moe_preprocess must be used together with moe_router"),
        (["--cuda-graph-scope", "mamba"], "mamba is not a scope"),
        (["--cuda-graph-scope", ","], "(empty) is not a scope"),
        (["--moe-router-num-groups", "8"], "group-limited routing needs both"),
        (["--moe-router-num-groups", "7", "--moe-router-group-topk", "4"], "must divide experts=256"),
        (["--moe-router-num-groups", "8", "--moe-router-group-topk", "9"], "moe_router_group_topk=9"),
        (["--moe-router-num-groups", "64", "--moe-router-group-topk", "1"], "moe_router_group_topk=1"),
    ],
)
def test_contradictions_are_one_line(extra, message, capsys):
    assert main([*FLAGS, *FIXED, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "70b", "--cuda-graph-scope", "attn"], "add --framework megatron"),
        (["--model", "70b", "--framework", "megatron", "--cuda-graph-scope", "moe_router"], "add --moe-experts E"),
        (["--model", "70b", "--moe-router-num-groups", "8"], "add --moe-experts E"),
    ],
)
def test_flags_that_need_another(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_shape_checks():
    with pytest.raises(ConfigError, match="needs both"):
        replace(DSV3, moe_router_group_topk=None)
    with pytest.raises(ConfigError, match="needs both"):
        replace(DSV3, experts=None, moe_ffn=None, shared_ffn=None, dense_layers=0)
    assert [k.moe_router_num_groups for k, _ in DSV3.block_kinds()] == [None, 8]  # the dense view has no router


def test_a_folded_expert_mesh_keeps_its_own_dispatched_rows():
    """Megatron-Core's dispatcher gathers the routed tokens over the experts' TP group only (``expt_tp``): with expert
    TP 1 under TP 2 a rank keeps the k·(s/2)·b rows of its own sequence-parallel share, half of what expert TP 2 keeps;
    memory and the block's memory-bound time follow (DeepSeek-V3's BF16 card then fits in an H100, as it ran)."""
    from minipar.perf.moe import dispatched_rows, moe_activation_bytes

    qwen = SHAPES["Qwen3-235B-A22B"]
    assert dispatched_rows(qwen, 1, 2, 1, 1) == 8 * 4096 / 2 and dispatched_rows(qwen, 1, 2, 1) == 8 * 4096
    assert dispatched_rows(qwen, 2, 4, 2, 2) == 8 * 2048 * 2 * 2 / 4
    folded = moe_activation_bytes(qwen, 1, 2, "none", True, 2, True, 1, 1)
    assert moe_activation_bytes(qwen, 1, 2, "none", True, 2, True, 1) - folded == 8 * 4096 / 2 * 4096 * 2
    ((_, e, _, _),) = card_rows()
    assert e.fits and e.mem["total"] / 2**30 < 65


def test_the_precision_aware_optimizer_keeps_its_states_in_their_dtypes(capsys):
    """Megatron-Core's ``--use-precision-aware-optimizer``: fp32 master weights and bf16 moments hold 8 bytes per
    parameter where Adam's fp32 states hold 12 (ZeRO's K), sharded as before; only with its distributed optimizer."""
    from minipar.perf.memory import memory_per_gpu

    dev = for_framework(GPUS["h100"], "megatron")
    lay = nemo_layout(CARDS[0], SETTINGS)
    assert lay.optimizer_dtypes == ("fp32", "bf16", "bf16") and lay.optimizer_bytes == 8
    assert replace(lay, optimizer_dtypes=None).optimizer_bytes == 12
    assert replace(lay, optimizer_dtypes=("fp16", "fp8", "bf16")).optimizer_bytes == 5
    small = memory_per_gpu(DSV3, dev, lay, 256)
    full = memory_per_gpu(DSV3, dev, replace(lay, optimizer_dtypes=None), 256)
    assert small["optimizer"] == pytest.approx(full["optimizer"] * 8 / 12, rel=1e-12)
    assert small["params"] == full["params"] and small["activations"] == full["activations"]
    pao = ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    fixed = [*FIXED[: FIXED.index("--zero")], "--zero", "1", *FIXED[FIXED.index("--zero") + 2 :]]
    assert main([*FLAGS, *fixed, *pao]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["optimizer_dtypes"] == ["fp32", "bf16", "bf16"] and "adam(fp32/bf16/bf16)" in row["layout"]
    assert main(["--model", "7b", "--gpus", "16", "--framework", "megatron", "--use-precision-aware-optimizer",
                 "--top", "50", "--json"]) == 0  # fmt: skip
    rows = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert rows and all("zero1" in r["layout"] or "zero2" in r["layout"] or "dp1·" in r["layout"] for r in rows)


PAO_FIXED = "--model 7b --framework megatron --use-precision-aware-optimizer --tp 1 --pp 1 --dp 8".split()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "7b", "--exp-avg-dtype", "bf16"], "add --use-precision-aware-optimizer"),
        (["--model", "7b", "--use-precision-aware-optimizer"], "add --framework megatron"),
        (PAO_FIXED, "--use-precision-aware-optimizer with --zero 0"),
        ([*PAO_FIXED, "--zero", "3"], "use --zero 1 (or 2)"),
        (["--model", "7b", "--main-params-dtype", "bf16"], "invalid choice"),
    ],
)
def test_optimizer_dtype_contradictions(argv, message, capsys):
    if message == "invalid choice":
        with pytest.raises(SystemExit):
            main(argv)
    else:
        assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_routing_odds_stay_cheap_for_hostile_counts():
    """A million experts, 10⁵ per token: the chance a node is hit is log-gamma arithmetic, not a 10⁵-digit binomial
    (math.comb took 0.8 s, and 11 s with a million groups, per layout of a search)."""
    from minipar.perf.moe import _none_of

    huge = replace(DSV3, experts=10**6, top_k=10**5, moe_router_num_groups=10**6, moe_router_group_topk=5 * 10**5)
    assert node_hit(huge, 8) == 1.0 and _none_of(10, 5, 6) == 0.0
    assert _none_of(256, 32, 8) == pytest.approx(math.comb(224, 8) / math.comb(256, 8), rel=1e-12)
