"""minipar.mesh: Megatron's rank order, equal to torch's init_device_mesh, and clear layout errors."""

import pytest

from minipar import ConfigError, launch
from minipar.mesh import coords_of, factorizations, group_ranks, rank_of, validate
from tests import _workers_mesh as w


def test_megatron_16_gpu_example():
    shape = (4, 2, 2)  # pp4 · dp2 · tp2
    assert group_ranks(shape, "tp")[:2] == [[0, 1], [2, 3]]
    assert group_ranks(shape, "dp")[:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_ranks(shape, "pp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert all(rank_of(coords_of(r, shape), shape) == r for r in range(16))


def test_factorizations_and_errors():
    assert len(factorizations(8)) == 10 and (2, 2, 2) in factorizations(8)
    assert validate(8, pp=2, tp=2) == (2, 2, 2)
    with pytest.raises(ConfigError, match=r"not divisible by tp·pp = 3·1 = 3.*pp1·dp2·tp4"):
        validate(8, tp=3)
    with pytest.raises(ConfigError, match=r"pp·dp·tp = 2·2·1 = 4 but world_size=8"):
        validate(8, pp=2, dp=2, tp=1)
    with pytest.raises(ConfigError, match="tp=0"):
        validate(8, tp=0)


def test_groups_match_init_device_mesh_on_8_ranks():
    out = launch(w.mesh_vs_torch, world_size=8, args=(2, 2, 2))
    assert all(o["same_as_torch"] for o in out)
    assert out[5]["coords"] == {"pp": 1, "dp": 0, "tp": 1}
    assert out[5]["ranks"] == {"pp": [1, 5], "dp": [5, 7], "tp": [4, 5]}
    assert [o["tp_sum"] for o in out] == [1, 1, 5, 5, 9, 9, 13, 13]
