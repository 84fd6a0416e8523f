"""minipar.runtime.mesh: Megatron's rank order, equal to torch's init_device_mesh, and clear layout errors."""

import pytest

from minipar import ConfigError, launch
from minipar.job.config import check_model_fits
from minipar.model.gpt import GPTConfig
from minipar.runtime.mesh import Mesh, coords_of, expert_group_ranks, factorizations, group_ranks, rank_of
from tests import _workers_mesh as w
from tests import _workers_moe as wm


def test_megatron_16_gpu_example():
    shape = (4, 2, 2)  # pp4 · dp2 · tp2
    assert group_ranks(shape, "tp")[:2] == [[0, 1], [2, 3]]
    assert group_ranks(shape, "dp")[:4] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_ranks(shape, "pp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]
    assert all(rank_of(coords_of(r, shape), shape) == r for r in range(16))


def test_factorizations_and_errors():
    assert len(factorizations(8)) == 10 and (2, 2, 2) in factorizations(8)
    assert Mesh(8, pp=2, tp=2).shape == (2, 2, 2)
    with pytest.raises(ConfigError, match=r"not divisible by tp·pp = 3·1 = 3.*pp1·dp2·tp4"):
        Mesh(8, tp=3)
    with pytest.raises(ConfigError, match=r"pp·dp·tp = 2·2·1 = 4 but there are 8 ranks"):
        Mesh(8, pp=2, dp=2, tp=1)
    with pytest.raises(ConfigError, match="--tp 0: must be an integer >= 1"):
        Mesh(8, tp=0)


def test_layout_names_sizes_and_model_checks():
    """The layout object: Megatron's parallel_state names, explicit (no __getattr__), and the model checks."""
    m = Mesh(16, pp=4, tp=2, rank=5)  # dp filled in: 16 / (4·2)
    assert (m.pp_size, m.dp_size, m.tp_size) == (m.size("pp"), m.size("dp"), m.size("tp")) == (4, 2, 2)
    assert m.coords == {"pp": 1, "dp": 0, "tp": 1} == {"pp": m.pp_rank, "dp": m.dp_rank, "tp": m.tp_rank}
    assert m.loss_rank == 12 and rank_of((3, 0, 0), m.shape) == 12
    assert all(isinstance(getattr(Mesh, f"{d}_{k}"), property) for d in ("pp", "dp", "tp") for k in ("rank", "size"))
    assert (m.cp_rank, m.cp_size, m.cp_group) == (0, 1, None)  # no --cp: the 3-D shape, no ring
    with pytest.raises(ConfigError, match="--pp 3 stages but the model has only --n-layer 2 blocks; use --pp <= 2"):
        check_model_fits(GPTConfig(n_layer=2, n_head=2, d_model=32), pp=3, tp=1)
    with pytest.raises(ConfigError, match="--tp 4 must divide --n-head 2 and --d-model 32"):
        check_model_fits(GPTConfig(n_layer=2, n_head=2, d_model=32), pp=1, tp=4)


def test_groups_match_init_device_mesh_on_8_ranks():
    out = launch(w.mesh_vs_torch, world_size=8, args=(2, 2, 2))
    assert all(o["same_as_torch"] for o in out)
    assert out[5]["coords"] == {"pp": 1, "dp": 0, "tp": 1}
    assert out[5]["ranks"] == {"pp": [1, 5], "dp": [5, 7], "tp": [4, 5]}
    assert [o["tp_sum"] for o in out] == [1, 1, 5, 5, 9, 9, 13, 13]


def test_size_one_dimensions_get_real_one_rank_groups():
    """pp = tp = 1 in a world of 4: the pp and tp groups are one-rank groups, never None (= the world)."""
    out = launch(w.size_one_groups, world_size=4, args=(1, 4, 1))
    assert [o["tp"] for o in out] == [[r] for r in range(4)] == [o["pp"] for o in out]
    assert all(o["real"] and o["dp"] == [0, 1, 2, 3] for o in out)


def test_context_parallel_dimension():
    """--cp (lesson 11): Megatron's order tp, cp, dp, pp (tp fastest); the dp × cp group holds one model piece."""
    m = Mesh(16, pp=2, cp=2, tp=2, rank=5)  # dp = 16 / (2·2·2)
    assert m.shape == (2, 2, 2, 2) and m.dims == ("pp", "dp", "cp", "tp")
    assert m.coords == {"pp": 0, "dp": 1, "cp": 0, "tp": 1} and m.cp_rank == 0 and m.loss_rank == 8
    assert group_ranks(m.shape, "cp")[:2] == [[0, 2], [1, 3]]
    assert group_ranks(m.shape, ("dp", "cp"))[:2] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert rank_of(coords_of(13, m.shape), m.shape) == 13
    with pytest.raises(ConfigError, match="pp·dp·cp·tp = 1·2·2·1 = 4 but there are 8 ranks"):
        Mesh(8, dp=2, cp=2)
    with pytest.raises(ConfigError, match="--cp 4 needs sequences of at least 2·cp = 8 tokens"):
        check_model_fits(GPTConfig(block_size=6, n_layer=2, n_head=2, d_model=32), pp=1, tp=1, cp=4)


def test_expert_parallel_folds_into_dp():
    """ep (lesson 12) adds no ranks: each dp group splits as edp · ep, ep fastest (torchtitan's
    dp_shard_mod_ep · dp_shard_in_ep). dp4·ep2: EP groups [0,1] [2,3], expert-dp groups [0,2] [1,3]."""
    assert expert_group_ranks((1, 4, 1), 2) == ([[0, 1], [2, 3]], [[0, 2], [1, 3]])
    assert expert_group_ranks((1, 8, 1), 4) == ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 4], [1, 5], [2, 6], [3, 7]])
    # with tp = 2 and pp = 2 the dp groups stride by tp, and the EP groups are cut from each of them
    assert expert_group_ranks((2, 2, 2), 2)[0] == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert expert_group_ranks((1, 4, 1), 1) == ([[0], [1], [2], [3]], [[0, 1, 2, 3]])
    m = Mesh(8, ep=2, rank=5)  # dp = 8
    assert m.shape == (1, 8, 1) and (m.ep_size, m.edp_size, m.ep_rank, m.edp_rank) == (2, 4, 1, 2)
    assert Mesh(8, ep=1).ep_group is None  # no expert parallelism: no group, edp_group is the dp group


def test_ep_is_a_dimension_of_the_experts_view():
    """ep is a mesh dimension like the others (torchtitan's ParallelDims): the same ranks seen as
    (pp, edp, ep, [cp,] tp), with coords, sizes and group ranks along ep and edp, and the same rank formula."""
    m = Mesh(16, pp=2, tp=2, ep=2, rank=13)  # dp = 4 = edp 2 · ep 2
    assert (m.expert_shape, m.expert_dims) == ((2, 2, 2, 2), ("pp", "edp", "ep", "tp"))
    assert m.coords == {"pp": 1, "dp": 2, "tp": 1, "edp": 1, "ep": 0} and (m.size("edp"), m.size("ep")) == (2, 2)
    assert rank_of(m.coords, m.expert_shape, m.expert_dims) == 13 == rank_of(m.coords, m.shape)
    assert group_ranks(m.expert_shape, "ep", m.expert_dims) == expert_group_ranks(m.shape, 2)[0]
    c = Mesh(8, cp=2, ep=2)  # dp = 4, cp = 2: each cp index has its own EP groups
    assert c.expert_dims == ("pp", "edp", "ep", "cp", "tp") and c.expert_shape == (1, 2, 2, 2, 1)
    assert group_ranks(c.expert_shape, "ep", c.expert_dims) == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert group_ranks(c.expert_shape, ("edp", "cp"), c.expert_dims) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert Mesh(4).coords == {"pp": 0, "dp": 0, "tp": 0}  # ep = 1: nothing added


def test_bad_ep_is_one_line_naming_the_fix():
    with pytest.raises(ConfigError, match=r"^--ep 3 must divide the 4 data-parallel ranks .*use --ep 1, 2, 4, or --dp"):
        Mesh(4, ep=3)
    with pytest.raises(ConfigError, match=r"--ep 4 must divide the 2 data-parallel ranks"):
        Mesh(8, tp=2, pp=2, ep=4)  # dp = 2 left by tp·pp
    with pytest.raises(ConfigError, match="--ep 0: must be an integer >= 1"):
        Mesh(4, ep=0)
    with pytest.raises(ConfigError) as e:
        Mesh(6, ep=4)
    assert "\n" not in str(e.value)


def test_ep_groups_are_real_process_groups():
    """dp4·ep2 on 4 ranks: each rank's EP group and expert-dp group, all-reduced over."""
    out = launch(wm.mesh_ep_groups, world_size=4, args=(1, 1, 2))
    assert [o["ep"] for o in out] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [o["edp"] for o in out] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [(o["ep_rank"], o["edp_rank"]) for o in out] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert [o["sums"] for o in out] == [[1, 2, 2], [1, 4, 4], [5, 2, 2], [5, 4, 4]]  # edp_cp = edp at cp = 1


def test_ep_with_context_parallelism_on_4_ranks():
    """dp2·cp2·ep2 (rank = 2·dp + cp): each cp index has its own EP group ([0,2], [1,3]); the ranks holding
    the same experts are expert-dp × cp: [0,1] (ep_rank 0) and [2,3] (ep_rank 1), ZeRO-1's expert group."""
    out = launch(wm.mesh_ep_groups, world_size=4, args=(1, 1, 2, 2))
    assert [o["ep"] for o in out] == [[0, 2], [1, 3], [0, 2], [1, 3]]
    assert [o["edp"] for o in out] == [[0], [1], [2], [3]]
    assert [o["edp_cp"] for o in out] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert [o["sums"][2] for o in out] == [1, 1, 5, 5]


def test_the_parent_builds_the_mesh_once_and_the_ranks_reuse_it(monkeypatch):
    """``python -m minipar.train --dp 2 --tp 2 --pp 2``: the parent checks the settings once (one ``Mesh``) and
    hands the checked ``Job`` to the ranks, which add their groups to that layout (no second ``Mesh``)."""
    import minipar.train as job
    from minipar.job.config import Job

    built, sent = [], {}
    real = Mesh.__post_init__
    monkeypatch.setattr(Mesh, "__post_init__", lambda self, *a: (built.append(self), real(self, *a))[1])
    monkeypatch.setattr(job, "launch", lambda fn, world_size, args, **kw: sent.update(args=args) or [[]])
    assert job.main(["--dp", "2", "--tp", "2", "--pp", "2", "--steps", "1", "--out", ""]) == 0
    (the_job, _), (mesh,) = sent["args"], built
    assert isinstance(the_job, Job) and the_job.mesh is mesh and mesh.shape == (2, 2, 2)


def test_train_config_is_frozen_and_grouped_in_sections():
    import dataclasses

    from minipar.job.config import SECTIONS, TrainConfig

    cfg = TrainConfig(tp=2, lr=1e-3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.tp = 4
    assert (cfg.parallelism.tp, cfg.optimizer.lr, cfg.model.n_layer, cfg.run.steps) == (2, 1e-3, 4, 1000)
    grouped = [name for s in SECTIONS for name in vars(getattr(cfg, s))]
    assert sorted(grouped) == sorted(f.name for f in dataclasses.fields(cfg))  # every field in one section
