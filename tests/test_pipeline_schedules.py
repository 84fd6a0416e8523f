"""minipar.pp.schedules: every generated schedule is valid, and the SIMULATION predicts the
bubble and the activation memory the papers give. Pure Python, no ranks."""

import pytest

from minipar import ConfigError
from minipar.pp.schedules import (
    Action,
    DeadlockError,
    bubble_formula,
    gpipe,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
    parse,
    simulate,
)
from minipar.pp.stages import partition_layers

CASES = [
    (name, p, m, v)
    for name, vs in (("gpipe", [1]), ("1f1b", [1]), ("interleaved", [2, 3]))
    for p in (1, 2, 3, 4, 8)
    for m in range(1, 17)
    for v in vs
    if name != "interleaved" or m % p == 0
]


def test_notation_is_pytorchs():
    assert str(Action(1, "F", 3)) == "1F3" and parse("12B7") == Action(12, "B", 7)
    assert [str(a) for a in gpipe(2, 2)[1]] == ["1F0", "1F1", "1B1", "1B0"]
    assert [str(a) for a in one_f_one_b(2, 3)[0]] == ["0F0", "0F1", "0B0", "0F2", "0B1", "0B2"]
    assert [str(a) for a in interleaved_1f1b(2, 2, 2)[1]] == ["1F0", "1F1", "3F0", "3B0", "3F1", "3B1", "1B0", "1B1"]


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_schedule_is_valid_and_matches_bubble_formula(name, p, m, v):
    """simulate() checks: each action once on rank stage % p, no backward before its forward,
    no deadlock. Bubble (forward 1, backward 2 time units per stage, per chunk for interleaved)
    equals (p-1)/(v·m + p-1) exactly (arXiv:2104.04473 §2.2)."""
    sim = simulate(make_schedule(name, p, m, v), t_f=1, t_b=2)
    assert sim.bubble == pytest.approx(bubble_formula(p, m, v), abs=1e-12)
    for _what, src, dst, t_send, t_recv in sim.messages:  # every receive happens after its send
        assert t_recv >= t_send and src != dst


@pytest.mark.parametrize("p, m", [(2, 8), (4, 8), (4, 16), (4, 2), (8, 8)])
def test_peak_activations(p, m):
    """GPipe holds all m micro-batches on every rank; 1F1B at most min(p - r, m) on rank r
    (arXiv:2104.04473 §2.2.1); interleaved holds more than 1F1B on rank 0, in whole-stage units."""
    assert simulate(gpipe(p, m)).peak_inflight == [m] * p
    assert simulate(one_f_one_b(p, m)).peak_inflight == [min(p - r, m) for r in range(p)]
    if m % p == 0:
        assert simulate(interleaved_1f1b(p, m, 2)).peak_inflight[0] >= min(p, m)


def test_1f1b_with_fewer_microbatches_than_stages_is_gpipe():
    """m < p: the warm-up already holds every micro-batch, so 1F1B's timing is GPipe's."""
    a, b = simulate(one_f_one_b(4, 2)), simulate(gpipe(4, 2))
    assert a.makespan == b.makespan and a.peak_inflight == [2, 2, 2, 1] and b.peak_inflight == [2, 2, 2, 2]
    assert a.bubble == pytest.approx(3 / 5)


def test_simulator_finds_bad_schedules():
    s = one_f_one_b(2, 2)
    s[1] = [Action(1, "B", 0), Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 1)]
    with pytest.raises(ConfigError, match="backward 1B0 is listed before its forward 1F0"):
        simulate(s)
    s = gpipe(2, 2)
    s[0] = [Action(0, "F", 0), Action(0, "B", 0), Action(0, "F", 1), Action(0, "B", 1)]  # waits for 1B0 ...
    s[1] = [Action(1, "F", 1), Action(1, "F", 0), Action(1, "B", 0), Action(1, "B", 1)]  # ... which waits for 0F1
    with pytest.raises(DeadlockError, match="deadlock"):
        simulate(s)
    s = gpipe(2, 2)
    s[1] = s[1][:-1]
    with pytest.raises(ConfigError, match="misses 1 action"):
        simulate(s)
    s = gpipe(2, 2)
    s[0], s[1] = s[1], s[0]
    with pytest.raises(ConfigError, match="lives on rank"):
        simulate(s)


@pytest.mark.parametrize(
    "call, text",
    [
        (lambda: interleaved_1f1b(4, 6, 2), "multiple of p=4, got m=6; use m=4 or m=8"),
        (lambda: make_schedule("zb", 2, 4), "unknown"),
        (lambda: make_schedule("1f1b", 2, 4, v=2), "use 'interleaved'"),
        (lambda: gpipe(0, 4), "p=0"),
        (lambda: partition_layers(2, 4), "only n_layer=2 blocks; use at most 2 stages"),
        (lambda: partition_layers(4, 2, [1, 2]), "summing to n_layer=4"),
        (lambda: partition_layers(4, 2, [4]), "1 entries for 2 stages"),
    ],
)
def test_bad_input_names_value_and_fix(call, text):
    with pytest.raises(ConfigError, match=text.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_partition():
    assert partition_layers(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert partition_layers(5, 2) == [(0, 3), (3, 5)]
    assert partition_layers(5, 2, [2, 3]) == [(0, 2), (2, 5)]


def test_trace_analysis_agrees_with_the_simulation():
    """The measurement code (pipeline_trace) applied to a simulated timeline gives the simulator's
    own bubble, and feeding durations back reproduces the timeline."""
    from minipar.course.pipeline_trace import from_simulation, measured_bubble, measured_durations

    sim = simulate(interleaved_1f1b(4, 8, 2), t_f=lambda a: 1 + a.stage % 3, t_b=2)
    tr = from_simulation(sim)
    assert measured_bubble(tr) == pytest.approx(sim.bubble, abs=1e-12)
    d_f, d_b = measured_durations(tr)
    again = simulate(interleaved_1f1b(4, 8, 2), t_f=d_f.__getitem__, t_b=d_b.__getitem__)
    assert again.makespan == pytest.approx(sim.makespan)


def test_cpu_time_bubble_and_stage_medians():
    """``cpu=True`` reads TraceEvent.cpu (equal to the span for a simulation); the simulator fed
    with per-stage medians of a balanced run gives exactly the formula, and never less (GPipe)."""
    from minipar.course.pipeline_trace import from_simulation, measured_bubble, stage_durations
    from minipar.pp.schedules import bubble_formula

    for m in (1, 2, 4, 8):
        sim = simulate(gpipe(3, m), t_f=1, t_b=2)
        tr = from_simulation(sim)
        assert measured_bubble(tr, cpu=True) == pytest.approx(sim.bubble, abs=1e-12)
        again = simulate(gpipe(3, m), *stage_durations(tr))
        assert again.bubble == pytest.approx(bubble_formula(3, m), abs=1e-12)
        skewed = simulate(gpipe(3, m), t_f=lambda a: 1 + a.stage, t_b=lambda a: 2 + a.stage % 2)
        assert skewed.bubble >= bubble_formula(3, m) - 1e-12


def test_coupled_send_receive_is_never_faster():
    """The COUPLED model (blocking sends, receives posted when needed) equals the decoupled one
    without communication, and is slower as soon as messages cost time."""
    for name, v in (("gpipe", 1), ("1f1b", 1), ("interleaved", 2)):
        s = make_schedule(name, 4, 8, v)
        assert simulate(s, 1, 2, 0.0, decoupled=False).makespan == simulate(s, 1, 2, 0.0).makespan
        for t_comm in (0.05, 0.3):
            assert simulate(s, 1, 2, t_comm, decoupled=False).makespan > simulate(s, 1, 2, t_comm).makespan
