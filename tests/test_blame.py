"""#17.3: when one rank skips an all_reduce, the error names it and gives the advice."""

import pytest
import torch
import torch.distributed as dist

from minipar import launch
from minipar.errors import RankFailedError


def _skip_on_rank1():
    if dist.get_rank() == 1:
        return "skipped"
    t = torch.ones(4)
    dist.all_reduce(t)
    return t.sum().item()


def test_rank_that_skipped_a_collective_is_named():
    with pytest.raises(RankFailedError) as info:
        launch(_skip_on_rank1, world_size=3, timeout=10)
    msg = str(info.value)
    assert "[1]" in msg and "culprit" in msg
    assert "same collectives in the same order" in msg
    assert "MINIPAR_TIMEOUT" in msg and "TORCH_DISTRIBUTED_DEBUG=DETAIL" in msg


def _late_on_rank1():
    import time

    if dist.get_rank() == 1:
        time.sleep(30)  # busy elsewhere: never joins the all_reduce within the timeout
        return "late"
    t = torch.ones(4)
    dist.all_reduce(t)
    return t.sum().item()


def test_rank_that_never_joined_within_the_timeout_is_named():
    with pytest.raises(RankFailedError) as info:
        launch(_late_on_rank1, world_size=3, timeout=5)
    msg = str(info.value)
    assert msg.startswith("ranks [0, 2] timed out or lost a peer inside a collective; rank(s) [1] were still running")
    assert "culprit is [1]" in msg and info.value.rank == 1


def test_debug_detail_set_after_an_earlier_launch_takes_effect(monkeypatch):
    """The fork server imported torch.distributed before TORCH_DISTRIBUTED_DEBUG was set: ranks re-read it."""
    from lessons import workers_10 as w10

    launch(w10.skip_all_reduce, world_size=1)  # the fork server now runs, without DETAIL
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    got = launch(w10.mismatched, world_size=3, timeout=10, args=(True,))
    assert got[1] == (
        "I (rank 1) run collective #0 BROADCAST [4], rank 0 runs #0 ALLREDUCE [4] "
        "-> differ in: Op type: BROADCAST vs ALLREDUCE"
    )


def _extra_on_rank2():
    t = torch.ones(4)
    dist.all_reduce(t)
    if dist.get_rank() == 2:
        dist.all_reduce(t)  # one collective more than the others
    return "returned"


def test_rank_that_called_one_collective_too_many_is_named():
    with pytest.raises(RankFailedError) as info:
        launch(_extra_on_rank2, world_size=3, timeout=10)
    msg = str(info.value)
    assert "rank(s) [0, 1] returned while rank(s) [2] were still blocked" in msg
    assert "the likely culprit is [2] (it called a collective the others did not)" in msg and info.value.rank == 2


def test_two_ranks_one_each_side_claims_no_culprit():
    with pytest.raises(RankFailedError) as info:
        launch(_skip_on_rank1, world_size=2, timeout=10)
    msg = str(info.value)
    assert "either [1] skipped a collective or [0] called one the others did not (minipar cannot tell which)" in msg
    assert "culprit" not in msg
