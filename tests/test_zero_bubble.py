"""Zero-bubble pipelining (ZB-H1, Qi et al. 2024, arXiv:2401.10241 §2.1): the backward split into I
(input gradient) and W (weight gradient). The schedule is valid and NCCL-safe, its simulated bubble
is the paper's (p−1)(T_F+T_B−T_W), the split linear computes the same gradients as autograd, and
ZB-H1 on 2-4 real ranks (strict p2p order on, see tests/conftest.py) equals one device in float64.
"""

import functools

import pytest
import torch
import torch.nn as nn

from minipar import ConfigError, launch
from minipar.course.pipeline_trace import RunSpec, traced_run
from minipar.pp.native import torch_pipeline_order, v_shape
from minipar.pp.p2p_order import check_p2p_order, p2p_order
from minipar.pp.schedules import Action, make_schedule, one_f_one_b, parse, simulate
from minipar.pp.zero_bubble import WeightGradStore, split_linears, zb_h1, zb_h1_bubble
from tests import _workers_pp as W

# float64 on both sides: the bound is derived in tests/test_pipeline.py (rounding ~1e-16, amplified
# at most ~1e3x by AdamW, against ~lr = 1e-3 for a real bug such as a lost or doubled W)
TOL = 1e-9


@functools.lru_cache(maxsize=None)
def _reference(m, n_layer):
    torch.set_num_threads(1)
    return W.reference(m, n_layer)


def test_notation_is_pytorchs():
    """I = BACKWARD_INPUT, W = BACKWARD_WEIGHT, as torch.distributed.pipelining writes them."""
    assert parse("2I5") == Action(2, "I", 5) and str(Action(0, "W", 1)) == "0W1"
    assert [str(a) for a in zb_h1(2, 3)[1]] == ["1F0", "1I0", "1F1", "1I1", "1W0", "1F2", "1I2", "1W1", "1W2"]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_schedule_is_valid_and_bubble_is_the_papers(p):
    """Every F before its I, every I before its W on the same rank, I waits for the next stage's I
    (simulate checks all and raises on a deadlock); bubble = (p−1)(T_F+T_B−T_W) per rank exactly for
    m ≥ p with equal and unequal durations (T_W ≤ min(T_F, T_B)); never above 1F1B's."""
    for m in range(1, 17):
        sched = zb_h1(p, m)
        for acts in sched:
            pos = {a: i for i, a in enumerate(acts)}
            for a in acts:
                if a.kind == "I":
                    assert pos[Action(a.stage, "F", a.mb)] < pos[a]
                if a.kind == "W":
                    assert pos[Action(a.stage, "I", a.mb)] < pos[a]
        for t_f, t_b, t_w in ((1, 1, 1), (1, 1.5, 0.5), (2, 1, 1), (1, 2, 1)):
            sim = simulate(sched, t_f, t_b, t_w=t_w)
            base = simulate(one_f_one_b(p, m), t_f, t_b + t_w)
            assert sim.bubble <= base.bubble + 1e-12
            if m >= p:
                assert sim.bubble == pytest.approx(zb_h1_bubble(p, m, t_f, t_b, t_w), abs=1e-12)
        if m >= p and p > 1:  # equal times: a third of 1F1B's bubble time
            zb, ofob = simulate(sched, 1, 1, t_w=1), simulate(one_f_one_b(p, m), 1, 2)
            assert (zb.makespan - 3 * m) * 3 == pytest.approx(ofob.makespan - 3 * m)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 16), (8, 8)])
def test_memory_like_1f1b(p, m):
    """Micro-batches held until their W: at most p on every rank (1F1B's rank 0 holds p); held until
    their I (what B needs): p − r on rank r, exactly 1F1B's."""
    sim = simulate(zb_h1(p, m), 1, 1, t_w=1)
    assert sim.peak_inflight == [p] * p == [max(simulate(one_f_one_b(p, m)).peak_inflight)] * p
    for r, acts in enumerate(zb_h1(p, m)):
        held, peak = 0, 0
        for a in acts:
            held += {"F": 1, "I": -1}.get(a.kind, 0)
            peak = max(peak, held)
        assert peak == min(p - r, m)


def test_nccl_safe_by_construction():
    """The sends of every pair come in the order of the peer's receives; W sends nothing."""
    for p in range(1, 9):
        for m in range(1, 17):
            check_p2p_order(zb_h1(p, m))
    sends, recvs = p2p_order(zb_h1(2, 2))[(1, 0)]
    assert sends == recvs == ["0I0", "0I1"]


def test_bad_schedules_and_settings():
    sched = zb_h1(2, 2)
    sched[0] = [a for a in sched[0] if a.kind != "W"]
    with pytest.raises(ConfigError, match="misses"):
        simulate(sched)
    sched = zb_h1(2, 2)
    sched[1] = [parse(x) for x in ("1F0", "1W0", "1I0", "1F1", "1I1", "1W1")]
    with pytest.raises(ConfigError, match="weight gradient 1W0 is listed before its input gradient 1I0"):
        simulate(sched)
    mixed = zb_h1(2, 2)
    mixed[0] = one_f_one_b(2, 2)[0]
    assert simulate(mixed, 1, 1, t_w=1).makespan > 0  # valid data flow (B on stage 0, I/W on stage 1) ...
    with pytest.raises(ConfigError, match="NCCL matches them in posting order"):
        check_p2p_order(mixed)  # ... but the gradient sent as 0I0 is received as 0B0: the executor refuses it
    with pytest.raises(ConfigError, match="m >= 4"):
        zb_h1_bubble(4, 2)
    assert make_schedule("zb-h1", 3, 5) == zb_h1(3, 5)


def test_split_linear_equals_autograd_and_hooks_fire_in_w():
    """I computes the input gradient and leaves every linear's weight gradient for W; W's
    grad_yᵀ·x equals autograd's. Post-accumulate-grad hooks (what DDP listens to): LayerNorm's fire
    in I with its gradient; the linears' fire in I with NO gradient (autograd visits them, adds
    nothing) and again in W with it — a hook that reduces on its first call would send nothing."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.GELU(), nn.Linear(7, 3, bias=False)).double()
    ref = [torch.zeros_like(q) for q in net.parameters()]
    x = torch.randn(4, 6, 5, dtype=torch.float64, requires_grad=True)
    net(x).square().sum().backward()
    gx, ref = x.grad.clone(), [q.grad.clone() for q in net.parameters()]
    net.zero_grad(set_to_none=True)
    x.grad = None
    fired, phase = [], ["I"]
    for name, q in net.named_parameters():
        q.register_post_accumulate_grad_hook(lambda _q, name=name: fired.append((phase[0], name, _q.grad is None)))
    store = WeightGradStore()
    with split_linears([net], store):
        with store.collect((0, 0)):
            net(x).square().sum().backward()
        assert net[0].weight.grad is None and net[3].weight.grad is None and net[1].weight.grad is not None
        assert store.nbytes((0, 0)) == (4 * 6 * (5 + 7) + 4 * 6 * (7 + 3)) * 8
        phase[0] = "W"
        store.flush((0, 0))
    assert "forward" not in vars(net[0])  # restored
    torch.testing.assert_close(x.grad, gx, rtol=0, atol=1e-12)
    for q, r in zip(net.parameters(), ref):
        torch.testing.assert_close(q.grad, r, rtol=0, atol=1e-12)
    with_grad = sorted((ph, n) for ph, n, empty in fired if not empty)
    assert with_grad == [("I", "1.bias"), ("I", "1.weight"), ("W", "0.bias"), ("W", "0.weight"), ("W", "3.weight")]
    assert sorted(n for ph, n, empty in fired if empty) == ["0.bias", "0.weight", "3.weight"]
    with pytest.raises(ConfigError, match="no I before it"):
        store.flush((0, 0))


@pytest.mark.parametrize("p", [2, 3, 4])
def test_zb_h1_equals_single_device(p):
    """ZB-H1 on p real ranks (strict p2p order), m = p and 2p (and m < p at p = 4): losses and
    parameters after 2 AdamW steps equal one device, float64, bound 1e-9 (see TOL)."""
    cases = [("zb-h1", m, 1, p) for m in sorted({p, 2 * p, 2})]
    results = launch(W.pipeline_train, world_size=p, args=(cases,))
    for i, (name, m, _v, n_layer) in enumerate(cases):
        ref_losses, ref_params = _reference(m, n_layer)
        assert max(abs(a - b) for a, b in zip(results[-1][i][0], ref_losses)) < TOL, (name, m)
        seen = set()
        for r in range(p):
            for k, t in results[r][i][1].items():
                seen.add(k)
                assert (t - ref_params[k]).abs().max().item() < TOL, (m, r, k)
        assert seen == set(ref_params)


def test_strict_order_every_lookahead_and_memory_on_real_ranks():
    """Strict p2p order at lookahead 0..3 (p = 2, m = 1..4); and on 4 ranks, measured bytes: rank 0
    holds exactly as much as under 1F1B (p micro-batches' activations, W never delayed there); every
    later rank holds more than under 1F1B: the x and grad_y its delayed W's still need."""
    assert launch(W.strict_sweep, world_size=2, args=([("zb-h1", m, 1) for m in range(1, 5)],)) == [16, 16]
    peaks = {}
    for name in ("1f1b", "zb-h1"):
        spec = RunSpec(name, m=4, n_layer=4, d_model=16, T=16, B=8, steps=1)
        peaks[name] = [o["peak_act_bytes"] for o in launch(traced_run, world_size=4, args=(spec,))]
    assert peaks["zb-h1"][0] == peaks["1f1b"][0], peaks
    assert all(z > o for z, o in zip(peaks["zb-h1"][1:], peaks["1f1b"][1:])), peaks


def test_same_orders_as_torch_pipelining():
    """minipar's ZB-H1 is PyTorch's ScheduleInterleavedZeroBubble with one stage per rank, action for
    action; PyTorch's V schedules (ZBV, DualPipeV: 2 stages per rank, stages r and 2p−1−r on rank r)
    pass minipar's simulator (every dependency met, no deadlock) with less bubble than ZB-H1 at equal
    F = I = W (their chunk is half a ZB-H1 stage)."""
    for p, m in ((2, 4), (3, 6), (4, 8), (4, 12)):
        assert torch_pipeline_order("zb-h1", p, m) == zb_h1(p, m)
    full = lambda a: 2.0 if a.kind == "B" else 1.0  # noqa: E731 — B = I + W
    for name in ("zbv", "dualpipev"):
        for p, m in ((2, 4), (4, 8)):
            sim = simulate(torch_pipeline_order(name, p, m), 1, full, t_w=1, place=v_shape(p))
            assert sim.bubble < simulate(zb_h1(p, m), 1, 1, t_w=1).bubble
    with pytest.raises(ConfigError, match="m >= 2p = 8"):
        torch_pipeline_order("dualpipev", 4, 4)
