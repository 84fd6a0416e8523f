"""minipar.zero.redundancy.ZeroRedundancyOptimizer: ZeRO-1 (arXiv:1910.02054 §5.1, P_os) around any
torch optimizer equals the unsharded optimizer on one device and PyTorch's own
``torch.distributed.optim.ZeroRedundancyOptimizer``, on 2 and 3 real gloo ranks.

Bounds (absolute, every run in float64, derived rather than fitted to one CPU):

- vs PyTorch's ZeroRedundancyOptimizer: both step the same parameters with the same all-reduced
  gradients through the same elementwise optimizer code, so they agree bit for bit in practice;
  1e-12 leaves room for a different kernel order and is still 1e8 below one step (lr ~ 1e-2).
- vs one device, SGD with momentum: the data-parallel gradient is the mean of N per-rank means
  instead of one mean over the batch, the same numbers summed in another order: ~1e-16 relative.
  SGD is linear in the gradient, so after 3 steps parameters differ by ~lr·1e-16·(1 + μ + μ²),
  far below 1e-12, while a real bug (a parameter never broadcast, stepped by two ranks or none)
  moves one by ~lr·|g| ~ 1e-3.
- vs one device, AdamW: AdamW divides by sqrt(v) + eps, which amplifies the same ~1e-16 rounding
  only for near-zero gradients (measured ~1e-14 on parameters); 1e-9 is five orders above that
  and seven below a real bug (~lr = 1e-2).
"""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.course.verify import max_abs_diff
from minipar.zero.redundancy import ZeroRedundancyOptimizer, partition_by_size
from tests import _workers_zero_redundancy as w

EXACT = 1e-12
VS_ONE_DEVICE = {"sgd": 1e-12, "adamw": 1e-9}


@pytest.fixture(scope="module")
def single():
    torch.set_num_threads(1)
    return {(opt, groups): w.single_device(opt, groups) for opt in w.OPTS for groups in (False, True)}


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_equals_one_device_and_torch_zero(n, opt, single):
    out = launch(w.compare, world_size=n, args=(opt,))
    ref, ref_groups = single[(opt, False)], single[(opt, True)]
    psi = sum(v.numel() for v in ref.values())  # named_parameters: the tied weight once
    for r, o in enumerate(out):
        assert max_abs_diff(o["minipar"], ref) < VS_ONE_DEVICE[opt], (r, "vs one device")
        assert max_abs_diff(o["minipar"], o["torch"]) < EXACT, (r, "vs torch ZeroRedundancyOptimizer")
        assert max_abs_diff(o["generator"], o["minipar"]) < EXACT, (r, "generator params")
        assert max_abs_diff(o["minipar_groups"], ref_groups) < VS_ONE_DEVICE[opt], (r, "add_param_group vs one device")
        assert max_abs_diff(o["minipar_groups"], o["torch_groups"]) < EXACT, (r, "add_param_group vs torch")
        assert o["groups"] == [len(ref)]  # one group, the tied weight once
        # every element owned by exactly one rank; this rank's state covers only its own elements
        assert sum(o["owned"]) == psi
        per_param_states = 1 if opt == "sgd" else 2  # momentum; exp_avg and exp_avg_sq
        assert o["state_numel"] == per_param_states * o["owned"][r]
    assert out[0]["owned"] == out[-1]["owned"]


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_state_dict_round_trip(opt):
    """consolidate_state_dict(to=0) + state_dict() gives the unsharded optimizer's state (same
    format, same values as one device to the bounds above); loading it into a fresh optimizer on
    every rank resumes training exactly; state_dict() on a rank that did not receive it raises."""
    out = launch(w.round_trip, world_size=3, args=(opt,))
    for o in out:
        assert max_abs_diff(o["resumed"], o["uninterrupted"]) < EXACT
    sd, plain = out[0]["state_dict"], w.single_state_dict(opt)
    assert [{k: v for k, v in g.items()} for g in sd["param_groups"]] == plain["param_groups"]
    assert sd["state"].keys() == plain["state"].keys()
    for i, st in plain["state"].items():
        assert st.keys() == sd["state"][i].keys()
        assert (
            max_abs_diff(
                {k: v for k, v in st.items() if v.dim() > 0}, {k: v for k, v in sd["state"][i].items() if v.dim() > 0}
            )
            < VS_ONE_DEVICE[opt]
        )
    kind, text = out[1]["not_consolidated"]
    assert kind == "ConfigError" and "consolidate_state_dict(to=1)" in text
    model = w.model64()  # and the plain optimizer loads it
    o = w.make("single", opt, list(model.parameters()))
    o.load_state_dict(sd)


def test_partition_is_torchs_greedy_rule():
    """Largest first, each to the least-loaded rank, balance carried across groups."""
    ps = [torch.zeros(k) for k in (5, 9, 1, 7, 3)]
    out = partition_by_size([{"params": ps[:3]}, {"params": ps[3:]}], 2)
    assert [[[p.numel() for p in g] for g in r] for r in out] == [[[9], [3]], [[5, 1], [7]]]


def test_world_of_one_and_bad_input():
    model = w.model64()
    o = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
    assert o.state_dict()["param_groups"][0]["lr"] == 0.1  # world of 1: nothing to consolidate
    o.param_groups[0]["lr"] = 0.0  # a schedule sets lr on the wrapper:
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    xy = w.batches(1)[0]
    model(xy[:, :-1], xy[:, 1:])[1].backward()
    o.step()  # it reaches the local optimizer
    assert max_abs_diff({k: v.detach() for k, v in model.named_parameters()}, before) == 0.0
    assert o.optim.param_groups[0]["lr"] == 0.0 and o.param_groups[0]["dampening"] == 0  # all SGD's keys
    with pytest.raises(ConfigError, match="not a torch.optim.Optimizer subclass.*torch.optim.SGD"):
        ZeroRedundancyOptimizer(model.parameters(), "sgd", lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        ZeroRedundancyOptimizer([], torch.optim.SGD, lr=0.1)
