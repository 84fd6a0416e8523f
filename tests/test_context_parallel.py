"""Lesson 11: context parallelism (minipar.cp) — ring attention and Llama 3's all-gather K/V variant.

The core claim: on N = 1..4 real ranks, with sequences that do not split evenly (T = 11, 13 over
2N chunks), every rank's attention output and its q, k, v gradients equal full causal attention's
rows at its positions, for the contiguous and the load-balanced split; each rank sends exactly the
bytes of the formula; every message passes the strict point-to-point order check (conftest).
"""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.cp.all_gather import all_gather_attention_bytes
from minipar.cp.blocks import block_attention, merge
from minipar.cp.ring import ring_attention_bytes
from minipar.cp.split import causal_work, contiguous_ranges, load_balanced_ranges, positions, shard, unshard
from minipar.model.gpt import attention_core
from tests import _workers_cp as w

# Bound (absolute), derived: float64 throughout; a block merge rescales by exp(lse_a − lse) and adds, so
# an output differs from one fused softmax by a few ε = 1.1e-16 relative per merge (at most 2N − 1 merges
# of values ~1), and a gradient sums N block shares instead of one matmul: ~1e-15 here. A wrong mask,
# a block attended twice or a lost dK share moves a value by ~1e-1. 1e-12 sits three orders from both.
TOL = 1e-12


def _reference(T):
    q, k, v, g = w.inputs(T)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    out = attention_core(q, k, v)
    out.backward(g)
    return dict(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad)


def _check(results, T):
    ref = _reference(T)
    ranges = results[0]["ranges"]
    for key in ("out", "dq", "dk", "dv"):
        got = unshard([res[key] for res in results], ranges, dim=2)
        assert (got - ref[key]).abs().max().item() < TOL, key


CASES = [(n, 13, "balanced", "ring") for n in (1, 2, 3, 4)]
CASES += [
    (n, 11, split, variant) for n in (2, 3) for split, variant in (("contiguous", "ring"), ("balanced", "all_gather"))
]


@pytest.fixture(scope="module")
def runs():
    """Every case on real ranks, in one launch of 4 (case n runs on the sub-group of ranks 0..n−1)."""
    res = launch(w.attend_cases, world_size=4, args=(CASES,))
    return {case: [res[r][case] for r in range(case[0])] for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[f"N{n}-T{T}-{s}-{v}" for n, T, s, v in CASES])
def test_forward_and_gradients_equal_full_attention(runs, case):
    """Forward and q, k, v gradients: ring attention (load-balanced, T = 13, N = 1..4; contiguous,
    T = 11) and Llama 3's all-gather K/V (T = 11): T not a multiple of 2N for N >= 2."""
    _check(runs[case], case[1])


def test_bytes_equal_the_formula(runs):
    """Each rank's sent bytes (CommLog, strict headers excluded) equal ring_attention_bytes and
    all_gather_attention_bytes with unequal blocks; every ring message goes to the right neighbour."""
    B, H, D = 2, 2, 4
    for (n, T, split, variant), ring in runs.items():
        for r, res in enumerate(ring):
            if variant == "ring":
                want = ring_attention_bytes(res["ranges"], r, B, H, D, 8)
                assert {peer for op, peer, _ in res["p2p"] if op == "isend"} <= {(r + 1) % n}
                assert {peer for op, peer, _ in res["p2p"] if op == "irecv"} <= {(r - 1) % n}
            else:
                want = all_gather_attention_bytes(res["ranges"], B, H, D, 8)
            assert res["sent"] == (want["forward"], want["backward"]), (n, T, split, variant, r)
        assert sum(sum(res["recv"]) for res in ring) == sum(sum(res["sent"]) for res in ring)


def test_even_split_formula():
    """With T = 2N·c the ring's bytes are (N − 1) and (2N − 1) blocks of 2·B·h·(T/N)·d·e."""
    T, B, H, D, e = 32, 2, 4, 8, 4
    for n in (2, 4):
        b = ring_attention_bytes(load_balanced_ranges(T, n), 0, B, H, D, e)
        blk = 2 * B * H * (T // n) * D * e
        assert b == {"forward": (n - 1) * blk, "backward": (2 * n - 1) * blk}


def test_merge_of_two_blocks_is_softmax_over_both():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    full, lse = block_attention(q, k, v, (10, 15), (0, 5))  # all keys before the queries
    a = block_attention(q, k[..., :2, :], v[..., :2, :], (10, 15), (0, 2))
    b = block_attention(q, k[..., 2:, :], v[..., 2:, :], (10, 15), (2, 5))
    out, lse2 = merge(*a, *b)
    assert (out - full).abs().max() < TOL and (lse2 - lse).abs().max() < TOL
    assert merge(None, None, *a)[0] is a[0]


def test_splits():
    assert load_balanced_ranges(10, 2) == [[(0, 3), (8, 10)], [(3, 6), (6, 8)]]
    assert contiguous_ranges(7, 2) == [[(0, 4)], [(4, 7)]]
    for T, n in ((13, 3), (16, 4), (9, 4)):
        rr = load_balanced_ranges(T, n)
        assert sorted(torch.cat([positions(r) for r in rr]).tolist()) == list(range(T))
        x = torch.arange(T).view(1, T)
        assert torch.equal(unshard([shard(x, r) for r in rr], rr), x)
    work_c, work_b = causal_work(contiguous_ranges(64, 4)), causal_work(load_balanced_ranges(64, 4))
    assert max(work_c) / min(work_c) > 6 and max(work_b) == min(work_b)
    with pytest.raises(ConfigError, match="--cp"):
        load_balanced_ranges(5, 3)
    with pytest.raises(ConfigError, match="--cp"):
        contiguous_ranges(5, 0)


def test_the_planner_counts_the_ring_s_messages():
    """minipar.perf.model's ring-attention message (python -m minipar.plan --cp) is the block of
    ring_attention_bytes: GQA heads split over TP, bf16, T a multiple of 2·cp."""
    from minipar.perf.block_time import cp_block_bytes
    from minipar.perf.layout import ModelShape

    shape = ModelShape(layers=2, hidden=1024, heads=16, kv_heads=4, ffn=4096, vocab=1000, seq=4096)
    for c, t in ((2, 1), (4, 2), (8, 8)):
        fwd = ring_attention_bytes(load_balanced_ranges(4096, c), 0, 2, max(1, 4 // t), 64, 2)["forward"]
        assert cp_block_bytes(shape, 2, 4096 // c, t, 2) * (c - 1) == fwd
