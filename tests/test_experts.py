"""Lesson 12: mixture of experts — the router's loss, capacity dropping, and expert parallelism == one device.

Bound for the equivalence (float64, drop-free): EP adds the same terms as one device in another
order (an expert's rows arrive grouped by source rank; the router's gradient is a sum over ranks).
A float64 sum of n terms moves by at most ~n·ε·Σ|terms|, ε = 1.1e-16; here n ≤ 10² and the terms
are ≤ 10, so < 1e-12. A real bug (a row sent to the wrong expert, a gate applied twice, a missing
1/N, the reverse all-to-all with unswapped splits) changes outputs or gradients by ≥ 1e-3.
"""

import math

import pytest
import torch

from minipar import ConfigError, launch
from minipar.course.verify import check_close
from minipar.ep.parallel import expert_major
from minipar.model.moe.capacity import expert_capacity
from minipar.model.moe.dispatch import combine, dispatch, make_plan
from minipar.model.moe.layer import MoE
from minipar.model.moe.router import load_balancing_loss, route
from tests import _workers_moe as w

BOUND = 1e-12


def test_load_balancing_loss_by_hand():
    """Switch eq. 4-6 on a 4-token, 2-expert batch computed by hand; balance gives 1, collapse gives E."""
    logits = torch.tensor([[2.0, 0.0], [1.0, 0.0], [0.0, 3.0], [0.5, 0.0]], dtype=torch.float64)
    probs, expert, gate = route(logits, 1)
    assert expert.squeeze(1).tolist() == [0, 0, 1, 0]
    f = [3 / 4, 1 / 4]
    P = probs.mean(0).tolist()
    want = 2 * (f[0] * P[0] + f[1] * P[1])
    got = load_balancing_loss(probs, torch.bincount(expert.view(-1), minlength=2))
    check_close("aux loss vs hand", got, torch.tensor(want, dtype=torch.float64), 1e-15, "float64")
    check_close("gate = p of the chosen expert (k=1)", gate.squeeze(1), probs.max(1).values, 1e-15)
    uniform = torch.full((6, 3), 1 / 3, dtype=torch.float64)
    assert load_balancing_loss(uniform, torch.tensor([2, 2, 2])).item() == pytest.approx(1.0)
    onehot = torch.tensor([[1.0, 0.0, 0.0]] * 6, dtype=torch.float64)
    assert load_balancing_loss(onehot, torch.tensor([6, 0, 0])).item() == pytest.approx(3.0)
    _, _, g2 = route(torch.randn(5, 4), 2)
    check_close("top-2 gates renormalised to 1", g2.sum(1), torch.ones(5), 1e-6)


def test_capacity_drops_in_gshard_order():
    """C = ceil(cf·T·k/E); first choices beat second choices, earlier tokens beat later ones."""
    assert expert_capacity(10, 4, 2, 1.0) == 5 and expert_capacity(10, 4, 1, 1.25) == 4
    assert expert_capacity(10, 4, 2, None) is None
    with pytest.raises(ConfigError, match="capacity_factor=0"):
        expert_capacity(10, 4, 1, 0)
    expert = torch.tensor([[0, 1], [0, 2], [0, 1], [1, 0]])  # T=4, k=2, E=3
    gate = torch.arange(8, dtype=torch.float64).view(4, 2)
    plan = make_plan(expert, gate, 3, capacity=2)
    # expert 0 queue: t0, t1, t2 (first choices) then t3 (second): keeps t0, t1
    # expert 1 queue: t3 (first choice), then t0, t2 (second): keeps t3, t0; expert 2: t1 (second)
    assert plan.token.tolist() == [0, 1, 3, 0, 1]
    assert plan.tokens_per_expert.tolist() == [2, 2, 1] and plan.routed.tolist() == [4, 3, 1]
    assert plan.dropped == 3 and plan.gate.tolist() == [0.0, 2.0, 6.0, 1.0, 3.0]
    free = make_plan(expert, gate, 3, None)
    assert free.dropped == 0 and free.tokens_per_expert.tolist() == [4, 3, 1]
    x = torch.randn(4, 2, dtype=torch.float64)
    y = combine(dispatch(x, free), free, 4)  # identity experts: out[t] = x[t] · Σ its gates
    check_close("combine of identity experts", y, x * gate.sum(1, keepdim=True), 1e-13)


def test_dropped_tokens_contribute_nothing():
    """A MoE with capacity: dropped choices counted right; a token with both choices dropped outputs 0."""
    torch.manual_seed(0)
    moe = MoE(8, 4, 2, capacity_factor=0.5).double()
    x = torch.randn(32, 8, dtype=torch.float64)
    y = moe(x)
    s = moe.stats
    assert s["capacity"] == math.ceil(0.5 * 32 * 2 / 4) == 8
    assert int(s["kept"].sum()) + s["dropped"] == 64 and all(int(c) <= 8 for c in s["kept"])
    assert s["dropped"] == int((s["routed"] - s["routed"].clamp(max=8)).sum())
    plan = make_plan(*moe.router(x)[1:], 4, 8)
    lost = sorted(set(range(32)) - set(plan.token.tolist()))
    assert all(y[t].abs().max() == 0 for t in lost)


def test_expert_major_permutation():
    counts = torch.tensor([[2, 1], [0, 3]])  # source 0: 2 rows for e0, 1 for e1; source 1: 0, 3
    assert expert_major(counts).tolist() == [0, 1, 2, 3, 4, 5]
    counts = torch.tensor([[1, 2], [2, 1]])  # received: s0e0 [0], s0e1 [1,2], s1e0 [3,4], s1e1 [5]
    assert expert_major(counts).tolist() == [0, 3, 4, 1, 2, 5]


@pytest.mark.parametrize("world,E,k", [(2, 4, 2), (4, 4, 1), (4, 8, 2)])
def test_expert_parallel_equals_one_device(world, E, k):
    """Drop-free EP over 2 and 4 ranks == one MoE on all tokens: outputs, loss, every gradient; the
    all-to-all bytes CommLog counts equal the rows the plan sends (×D×8 bytes), four times a step."""
    ref = w.one_device(E, k, world)
    res = launch(w.ep_rank, world_size=world, args=(E, k))
    why = "float64, reordered sums (module doc)"
    for r, o in enumerate(res):
        part = slice(r * w.T_RANK, (r + 1) * w.T_RANK)
        check_close(f"rank {r} output", o["y"], ref["y"][part], BOUND, why)
        check_close(f"rank {r} input gradient", o["x_grad"], ref["x_grad"][part], BOUND, why)
        check_close(f"rank {r} loss", o["loss"], ref["loss"], BOUND, why)
        check_close(f"rank {r} router gradient", o["router"], ref["grads"]["router.weight"], BOUND, why)
        n = E // world
        mine = {name: ref["grads"][f"experts.{name}"][o["first"] : o["first"] + n] for name in o["experts"]}
        check_close(f"rank {r} expert gradients", o["experts"], mine, BOUND, why)
        sent, recv = (rows * w.D * 8 for rows in o["rows"])
        assert o["a2a"] == [(sent, recv), (recv, sent), (sent, recv), (recv, sent)]
        assert len(o["counts"]) == 1 and o["counts"][0].sent == o["counts"][0].recv == (world - 1) * n * 8
    routed = ref["routed"].tolist()
    assert sum(routed) == world * w.T_RANK * k


def test_planner_counts_moe_parameters_flops_and_all_to_all(capsys):
    """minipar.perf.flops counts what the model holds (up to the final LayerNorm, 2h, which Megatron's
    count leaves out) and what GPT.flops_per_token computes; Mixtral 8x7B's shape gives its 47B / 13B."""
    from minipar.model.gpt import GPT, GPTConfig, num_params
    from minipar.perf.flops import all_to_all_bytes, moe_flops_per_token, moe_params
    from minipar.perf.layout import shape_of
    from minipar.plan import main as plan

    cfg = GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, d_model=32, moe_experts=4, moe_top_k=2)
    m = GPT(GPTConfig(**{**cfg.__dict__, "tie_weights": True}))
    total, active = moe_params(shape_of(cfg), 4, 2)
    assert total + 2 * 32 == num_params(m)
    assert moe_flops_per_token(shape_of(cfg), 4, 2) + 6 * 2 * 32 == m.flops_per_token()
    assert all_to_all_bytes(1000, 64, 2, 4, 2) == 3 / 4 * 1000 * 2 * 64 * 2
    mixtral = "--layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ffn 14336 --swiglu --vocab 32000 --seq 4096"
    assert plan([*mixtral.split(), "--moe-experts", "8", "--moe-top-k", "2", "--ep", "8"]) == 0
    out = capsys.readouterr().out
    assert "46.6B parameters, 12.8B active per token" in out and "4 per layer per step" in out
    assert plan([*mixtral.split(), "--moe-experts", "8", "--moe-top-k", "2", "--ep", "3"]) == 2
