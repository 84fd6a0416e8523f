"""minipar.checkpoint.full_state: one ``full_state_dict`` gathers the single-device weights and gradients of
every sharding the course builds (data parallel, flat ZeRO-1/2/3, per-parameter ZeRO-3, PyTorch's FSDP2,
tensor parallelism); ``gather_stages`` merges pipeline stages; ``state_bytes`` counts what a rank holds; ring
attention's ``trace`` records the blocks it attends."""

import pytest
import torch

from minipar import launch
from minipar.cp.blocks import SKIP, block_kind
from minipar.cp.ring import ring_attention
from tests import _workers_full_state as w

# float64: the sharded runs sum the same gradient terms in another order (~1e-16 relative); a gather that
# put a block in the wrong place, or a missing average, moves an entry by O(1e-2) or more.
TOL = 1e-12


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def ref():
    return w.one_device()


@pytest.mark.parametrize("strategy", ["dp", "zero1", "zero3", "zero3pp", "fsdp2", "tp"])
def test_full_state_dict_gathers_every_sharding(ref, strategy):
    res = launch(w.sharded, world_size=2, args=(strategy,))
    for r in res:
        assert max_diff(r["params"], ref["params"]) == 0.0  # weights are moved, never summed: exact
    if strategy == "zero3":
        assert all("flat ZeRO-3" in r["grads_error"] for r in res)
        assert all(r["bytes"] == r["held"] for r in res)  # a ZeRO optimizer answers for itself
        return
    if strategy == "zero1":  # ZeRO-1/2 keep their averaged gradients in flat shards, not in .grad
        return
    if strategy == "dp":  # gradients of each rank's own rows: their mean is the whole batch's
        mean = {k: (res[0]["grads"][k] + res[1]["grads"][k]) / 2 for k in ref["grads"]}
        assert max_diff(mean, ref["grads"]) < TOL
    else:
        for r in res:
            assert max_diff(r["grads"], ref["grads"]) < TOL
    if strategy == "fsdp2":  # a DTensor counts as its local piece
        assert all(r["bytes"]["params"] == r["local_param_bytes"] for r in res)


def test_gather_stages_merges_each_stage_on_dst():
    res = launch(w.stages, world_size=2)
    assert res[1] is None
    assert {k: v.item() for k, v in res[0].items()} == {"stage0": 0.0, "stage1": 1.0}


def test_ring_attention_trace_lists_the_blocks_each_step_attends():
    res = launch(w.ring_trace, world_size=2)
    n = len(res)
    for r, out in enumerate(res):
        assert torch.equal(out["traced"], out["plain"])  # tracing changes nothing
        ranges = out["ranges"]
        want = [
            (s, qr, kr)
            for s in range(n)
            for qr in ranges[r]
            for kr in ranges[(r - s) % n]
            if block_kind(qr, kr) != SKIP
        ]
        assert out["trace"] == want


def test_ring_attention_trace_on_one_process():
    q = torch.randn(1, 1, 5, 4)
    seen = []
    ring_attention(q, q, q, [[(0, 5)]], trace=seen)
    assert seen == [(0, (0, 5), (0, 5))]
