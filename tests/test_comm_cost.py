"""minipar.comm.links and minipar.comm.cost: one link table, one α–β cost family (no process group needed)."""

import numpy as np
import pytest

from minipar.comm.cost import (
    all_reduce_bytes,
    all_reduce_time,
    chain_time,
    collective_time,
    p2p_time,
    ring_bytes,
    ring_time,
)
from minipar.comm.links import IB_NDR, NETWORKS, NVLINK4, NVLINK_GBPS, Link
from minipar.errors import ConfigError
from minipar.perf.hardware import GPUS, IB_EFF, NVLINK_EFF


def test_ring_formulas_on_a_link_or_a_pair():
    link, pair = Link("l", 1e-3, 1e9), (1e-3, 1e9)
    for f in (all_reduce_time, ring_time, chain_time):
        assert f(4, 8e6, link) == f(4, 8e6, pair)
        assert f(1, 8e6, link) == 0.0  # one rank: nothing moves
    assert all_reduce_time(4, 8e6, link) == pytest.approx(6e-3 + 1.5 * 8e-3, rel=1e-12)  # 2(n-1)α + 2(n-1)/n·S/β
    assert ring_time(4, 8e6, link) == all_reduce_time(4, 8e6, link) / 2  # half, exactly
    assert chain_time(4, 8e6, link) == pytest.approx(3e-3 + 8e-3, rel=1e-12)
    assert all_reduce_bytes(4, 8e6) == 2 * ring_bytes(4, 8e6) == 1.2e7
    assert p2p_time(2**20, NVLINK4) == NVLINK4.time(2**20) == NVLINK4.alpha_s + 2**20 / NVLINK4.beta_bytes_per_s
    assert collective_time("ring", 4, 8e6, link) == ring_time(4, 8e6, link)
    with pytest.raises(ConfigError, match="use 'allreduce'"):
        collective_time("tree", 4, 8e6, link)
    sizes = np.array([1e3, 1e6])  # lesson 01 draws the formula over a grid of sizes
    assert np.allclose(all_reduce_time(2, sizes, pair), [all_reduce_time(2, s, pair) for s in sizes], rtol=0)


def test_one_link_table_read_by_the_clock_and_the_planner():
    assert NVLINK4.beta_bytes_per_s == NVLINK_GBPS[4] / 8 * 1e9 == 450e9
    assert IB_NDR.beta_bytes_per_s == NETWORKS["ndr"][0] / 8 * 1e9 == 50e9
    h100 = GPUS["h100"]  # the planner: the same datasheet rates times the fraction NCCL's rings achieve
    assert h100.intra[1] == NVLINK_EFF * NVLINK_GBPS[4] / 8 * 1e9
    assert h100.inter[1] == IB_EFF * NETWORKS["ndr"][0] / 8 * 1e9


def test_fit_all_reduce_recovers_alpha_and_beta_from_the_model_itself():
    from minipar.comm.cost import all_reduce_time, fit_all_reduce, misfit

    sizes = [2**10 * 4**k for k in range(8)]
    times = [all_reduce_time(4, s, (50e-6, 2e9)) for s in sizes]
    alpha, beta = fit_all_reduce(sizes, times, 4)
    assert abs(alpha - 50e-6) < 1e-9 and abs(beta / 2e9 - 1) < 1e-9
    assert misfit(sizes, times, 4, (alpha, beta)).endswith("8 of 8 within ×1.5")
