"""DeepSeek-V3's DualPipe (arXiv:2412.19437 §3.2.1, Figure 5, Table 2), SIMULATED: the generator's
per-rank programs are valid (every dependency met, each (stage, micro-batch) once), reproduce Figure 5
(8 ranks, 20 micro-batches), and their simulated idle time per rank is Table 2's DualPipe row
``(PP/2−1)(F&B+B−3W)``; parameters 2×, activations PP+1 micro-batches per rank, as the paper says.

The assumptions under which the formula is exact (found by the simulator, the paper states none):
an overlapped pair costs ``F&B = F + B`` (then every rank idles exactly the formula) or less, down to
``max(F, B)`` (then the rank that idles most does); the backward's input part takes as long as a forward (``I = B − W =
F``) and ``W ≤ F``. With ``I > F`` the simulated idle is below the formula, with ``I < F`` above.
"""

import itertools

import pytest

from minipar import ConfigError
from minipar.pp.dualpipe import dualpipe, idle_per_rank, route, table2_bubble
from minipar.pp.native import torch_pipeline_order, v_shape
from minipar.pp.schedules import Action, one_f_one_b, simulate, unpack, zb_h1

CASES = [(2, 4), (2, 6), (4, 8), (4, 10), (4, 12), (6, 12), (6, 14), (8, 16), (8, 20), (10, 20)]


def _sim(p, m, f=1.0, i=1.0, w=1.0, fb=None):
    """DualPipe simulated with forward f, input gradient i, weight gradient w, full backward B = i + w."""
    full = lambda a: i + w if a.kind == "B" else i  # noqa: E731
    return simulate(dualpipe(p, m), f, full, t_w=w, place=v_shape(p), route=route(p, m), t_fb=fb)


@pytest.mark.parametrize("p, m", [(3, 6), (0, 4), (4, 7), (4, 6), (4, 2)])
def test_bad_sizes_raise_one_line_naming_the_fix(p, m):
    with pytest.raises(ConfigError, match=r"DualPipe needs .* got .*; use ") as e:
        dualpipe(p, m)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("p, m", CASES)
def test_every_action_once_and_every_dependency_met(p, m):
    """Each micro-batch runs one F and one B (or one I and one W) on each stage of its direction's
    route, on the stage's rank (stage r and 2p−1−r on rank r); in the simulated timeline a forward
    starts after the previous stage's, a backward after its own forward and the next stage's
    backward, a W after its I; rank r and rank p−1−r run mirror images."""
    sched, half = dualpipe(p, m), m // 2
    flat = [[a for e in acts for a in unpack(e)] for acts in sched]
    for r, acts in enumerate(flat):
        assert {a.stage for a in acts} == {r, 2 * p - 1 - r}
        assert len(acts) == len(set(acts))
    every = {a for acts in flat for a in acts}
    for mb in range(m):
        for s in route(p, m)(mb):
            kinds = sorted(a.kind for a in every if a.stage == s and a.mb == mb)
            assert kinds in (["B", "F"], ["F", "I", "W"]), (s, mb, kinds)
    sim = _sim(p, m)  # raises on a missing/repeated action, a wrong rank or a deadlock
    t = {a: (t0, t1) for tl in sim.timeline for e, t0, t1 in tl for a in unpack(e)}
    for a, (t0, _) in t.items():
        rt = list(route(p, m)(a.mb))
        k = rt.index(a.stage)
        if a.kind == "F" and k > 0:
            assert t0 >= t[Action(rt[k - 1], "F", a.mb)][1]
        if a.kind in "BI":
            assert t0 >= t[Action(a.stage, "F", a.mb)][1]
            if k < len(rt) - 1:
                up = next(x for x in (Action(rt[k + 1], kd, a.mb) for kd in "BI") if x in t)
                assert t0 >= t[up][1]
        if a.kind == "W":
            assert t0 >= t[Action(a.stage, "I", a.mb)][1]
    mirror = lambda a: Action((a.stage + p) % (2 * p), a.kind, (a.mb + half) % m)  # noqa: E731
    for r in range(p):
        assert [mirror(a) for a in flat[r]] == flat[p - 1 - r]


def test_figure_5_eight_ranks_twenty_micro_batches():
    """Figure 5 (F = I = W = one cell, a full B two, an overlapped pair three), read off the
    figure: device 0 runs forwards 0-6, then three (F, I, W) of the reverse direction and one F,
    the pair with forward 7 at cell 17, idles three cells, ends with I, W of 6, 7, 8, 9; device 7
    is its mirror; the step is 66 cells. Only the middle ranks run one F and B un-overlapped."""
    sim = _sim(8, 20)
    assert sim.makespan == 66
    tl0 = [(str(e), t0) for e, t0, _ in sim.timeline[0]]
    assert tl0[:7] == [(f"0F{i}", float(i)) for i in range(7)]
    assert [k for k, _ in tl0[7:17]] == ["15F10", "15I10", "15W10", "15F11", "15I11", "15W11"] + [
        "15F12",
        "15I12",
        "15W12",
        "15F13",
    ]
    assert tl0[17] == ("0F7&15B13", 17.0) and tl0[18] == ("15F14&0B0", 23.0)
    assert [k for k, _ in tl0[-8:]] == [f"0{k}{i}" for i in range(6, 10) for k in "IW"]
    plain = lambda acts: any(
        isinstance(x, Action) and isinstance(y, Action) and x.kind + y.kind == "FB" for x, y in zip(acts, acts[1:])
    )  # noqa: E731
    assert [r for r, acts in enumerate(dualpipe(8, 20)) if plain(acts)] == [3, 4]


@pytest.mark.parametrize("p, m", CASES)
def test_bubble_is_table_2s_dualpipe_row(p, m):
    """Idle per rank = (PP/2−1)(F&B+B−3W): on every rank with F&B = F + B, on the rank that idles
    most with max(F, B) ≤ F&B < F + B (I = F, W ≤ F; sums of binary fractions: exact). Below ZB-H1's and 1F1B's
    idle on the same work (same p stages, m micro-batches)."""
    for f, w, frac in itertools.product((1.0, 2.0, 1.5), (0.25, 0.5, 1.0, 1.5), (1.0, 0.875, 0.75)):
        if w > f:
            continue
        fb = (2 * f + w) * frac
        idle = idle_per_rank(_sim(p, m, f, f, w, fb))
        assert max(idle) == table2_bubble(p, f, f + w, w, fb), (f, w, frac, idle)
        if frac == 1.0:
            assert min(idle) == max(idle)
    dp = max(idle_per_rank(_sim(p, m)))
    assert dp == p - 2  # F = I = W = 1: (p/2 − 1)(3 + 2 − 3)
    assert (
        dp
        < max(idle_per_rank(simulate(zb_h1(p, m), 1, 1, t_w=1)))
        < max(idle_per_rank(simulate(one_f_one_b(p, m), 1, 2)))
    )


def test_where_the_formula_is_not_exact():
    """The formula assumes I = F: with I > F the simulated idle is below it, with I < F above."""
    for p, m in ((4, 8), (8, 20)):
        assert max(idle_per_rank(_sim(p, m, 1, 2, 1))) < table2_bubble(p, 1, 3, 1)
        assert max(idle_per_rank(_sim(p, m, 2, 1, 1))) > table2_bubble(p, 2, 2, 1)


@pytest.mark.parametrize("p, m", CASES)
def test_memory_parameters_2x_activations_pp_plus_1(p, m):
    """Parameters: each model chunk (stage s of either direction is layers s mod p) sits on 2 ranks,
    every rank holds 2 chunks of 1/p of the model: 2× 1F1B's. Activations: every rank's peak is
    p + 1 micro-batches of one stage (F run, B or W not yet), Table 2's PP+1; 1F1B's rank 0 holds p."""
    sched = dualpipe(p, m)
    holders = {
        c: {r for r, acts in enumerate(sched) for e in acts for a in unpack(e) if a.stage % p == c} for c in range(p)
    }
    assert all(len(h) == 2 for h in holders.values())
    assert _sim(p, m).peak_inflight == [p + 1.0] * p
    assert simulate(one_f_one_b(p, m), 1, 2).peak_inflight[0] == p


@pytest.mark.parametrize("p, m", [(2, 4), (2, 8), (3, 6), (3, 12), (4, 8), (4, 20)])
def test_pytorch_dualpipev_is_dualpipe_cut_in_half(p, m):
    """PyTorch's ScheduleDualPipeV on p ranks = PP = 2p stages of 1/PP of the model, one copy of the
    weights, its OVERLAP_F_B pairs fused: the same idle per rank, (PP/2−1)(F&B+B−3W), and the same
    PP+1 activations (in stages of 1/PP: the simulator's chunks of ½ times 2) as DualPipe on PP ranks."""
    full = lambda a: 2.0 if a.kind == "B" else 1.0  # noqa: E731
    sim = simulate(torch_pipeline_order("dualpipev", p, m, fused=True), 1, full, t_w=1, place=v_shape(p))
    assert idle_per_rank(sim) == [table2_bubble(2 * p, 1, 2, 1)] * p
    assert [2 * x for x in sim.peak_inflight] == [2 * p + 1.0] * p
    if m >= 4 * p:  # DualPipe on 2p ranks needs m ≥ 4p
        assert idle_per_rank(_sim(2 * p, m))[0] == idle_per_rank(sim)[0]
