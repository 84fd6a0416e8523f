"""NCCL's point-to-point matching rule, checked on CPU (issue #14): ``minipar.comm.p2p`` strict mode.

NCCL matches the messages between two ranks in the order they are posted (no tags); gloo matches
by tag and hides a wrong order. ``tests/conftest.py`` sets ``MINIPAR_P2P_ORDER=strict`` for the
whole suite, so every pipeline/3D/collective test also runs under the check; this file shows
(1) every schedule at every lookahead passes it on real ranks, (2) the static per-pair order of
every schedule generator matches, (3) a deliberately reordered schedule is caught, with both
sequences in the message and without hanging (the executor's receive timeout bounds it).
"""

import os

import pytest

from minipar import ConfigError, launch
from minipar.comm.p2p import P2POrderError
from minipar.pp.p2p_order import check_p2p_order, p2p_order
from minipar.pp.schedules import gpipe, make_schedule, parse
from tests import _workers_pp as W


def _cases(p):  # every (schedule, m, v) of tests/test_pipeline.py
    out = [(name, m, 1) for name in ("gpipe", "1f1b") for m in range(1, 9)]
    return out + [("interleaved", m, 2) for m in range(p, 9, p)]


def test_strict_mode_is_on_in_the_tests():
    assert os.environ.get("MINIPAR_P2P_ORDER") == "strict"


@pytest.mark.parametrize("p", [2, 4])
def test_every_schedule_and_lookahead_respects_the_order(p):
    """GPipe, 1F1B (m = 1..8, so m < p too) and interleaved 1F1B (v = 2), lookahead 0..3:
    one step each on p real ranks under strict mode; any order violation would raise."""
    cases = _cases(p)
    runs = launch(W.strict_sweep, world_size=p, args=(cases,))
    assert runs == [4 * len(cases)] * p


def test_generators_are_nccl_safe_by_construction():
    """The same property without ranks, over a wider range: p = 1..8, m = 1..16, v = 2..4."""
    n = 0
    for p in range(1, 9):
        for m in range(1, 17):
            for name, vs in (("gpipe", [1]), ("1f1b", [1]), ("interleaved", [2, 3, 4])):
                for v in vs:
                    if name == "interleaved" and m % p:
                        continue
                    check_p2p_order(make_schedule(name, p, m, v))
                    n += 1
    assert n > 300
    sends, recvs = p2p_order(make_schedule("1f1b", 2, 2))[(1, 0)]
    assert sends == recvs == ["0B0", "0B1"]


def test_reordered_schedule_is_caught_statically():
    sched = gpipe(2, 2)
    sched[1] = [parse(a) for a in ("1F1", "1F0", "1B1", "1B0")]
    with pytest.raises(
        ConfigError,
        match=r"\['1F0', '1F1'\] but rank 1 posts its receives from rank 0 "
        r"in the order \['1F1', '1F0'\]",
    ):
        check_p2p_order(sched)


def test_reordered_schedule_is_caught_on_real_ranks():
    """Rank 1 runs 1F1 before 1F0; rank 0 sends 1F0 first. gloo would deliver by tag (correct
    here, wrong on NCCL); strict mode raises on rank 1 with both sequences, and the job ends
    (the peer's receive is bounded by the executor timeout; pytest's timeout backs it up)."""
    with pytest.raises(P2POrderError) as info:
        launch(W.reordered_gpipe, world_size=2, args=(10,))
    msg = str(info.value)
    assert "receive #0 from rank 0 expects 1F1 but rank 0's send #0 to rank 1 is 1F0" in msg, msg
    assert "sends    posted by rank 0 to rank 1:   [1F0]" in msg, msg
    assert "receives posted by rank 1 from rank 0: [1F1]" in msg, msg


def test_swapped_labels_gloo_hides_strict_catches(monkeypatch):
    """Without strict mode gloo matches by tag and both values arrive right (NCCL would swap
    them); with strict mode the first wait raises."""
    monkeypatch.setenv("MINIPAR_P2P_ORDER", "off")
    assert launch(W.swapped_labels, world_size=2)[1] == (1.0, 2.0)
    monkeypatch.setenv("MINIPAR_P2P_ORDER", "strict")
    with pytest.raises(P2POrderError, match=r"expects b but rank 0's send #0 to rank 1 is a"):
        launch(W.swapped_labels, world_size=2)


def test_a_send_that_never_comes_times_out_with_both_sequences():
    """The order NCCL would hang on: strict mode raises after the timeout instead, naming the
    position and both sequences (launch blames the rank that returned: rank 0 skipped a send)."""
    with pytest.raises(RuntimeError) as info:
        launch(W.missing_send, world_size=2, args=(3.0,))
    tb = str(info.value.__cause__)
    assert "receive #1 from rank 0 (b) got no message: rank 0 never posted its send #1" in tb, tb
    assert (
        "sends    posted by rank 0 to rank 1:   [a]" in tb and "receives posted by rank 1 from rank 0: [a, b]" in tb
    ), tb
