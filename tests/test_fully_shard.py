"""minipar.zero.fully_shard: per-parameter ZeRO-3 (FSDP2's design) equals one device for any optimizer,
keeps the model's modules and names, moves the bytes ZeRO §7.2.2 says, and matches PyTorch's
``fully_shard`` (with and without a bf16 ``MixedPrecisionPolicy``)."""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.model.gpt import GPT
from minipar.zero.fully_shard import MixedPrecisionPolicy
from tests import _workers_fully_shard as w
from tests import _workers_zero as wz

# float64 everywhere an equality is claimed: the sharded runs average N per-rank mean gradients
# (reduce-scatter, then / N) instead of one mean over the global batch — the same numbers summed in
# another order, ~1e-16 relative on any CPU; AdamW's 1/(sqrt(v)+eps) amplifies that to ~1e-14 for
# near-zero gradients. A real bug (a missing reduce-scatter, a wrong 1/N, a padding row stepped, a
# frozen parameter moved) moves a parameter by ~lr = 1e-2 … 1e-1. 1e-9 sits five orders from both.
TOL = 1e-9


def batches(steps=4, batch=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, w.V, (batch, 9), generator=g) for _ in range(steps)]


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
@pytest.mark.parametrize("n", [2, 4])
def test_any_optimizer_equals_one_device(opt, n):
    """Tied head, a (3, 8) weight and (3,) bias on 4 ranks (one rank holds 0 rows), a frozen bias, a root
    parameter: torch.optim.SGD / AdamW on the shards = the same optimizer on one device."""
    ref = w.train(opt, batches())
    out = launch(w.sharded, world_size=n, args=(opt, batches()))
    for o in out:
        assert (o["losses"] - ref["losses"]).abs().max().item() < TOL
        assert max_diff(o["params"], ref["params"]) < TOL
        assert sorted(o["kinds"].items()) == sorted(ref["kinds"].items())  # the module tree is unchanged
    full = {k: v[0] for k, v in ref["shapes"].items()}
    for r, o in enumerate(out):  # every parameter keeps its name and holds its torch.chunk(·, n)[r] rows
        assert o["shapes"].keys() == ref["shapes"].keys()
        for k, shape in o["shapes"].items():
            chunk = -(-full[k] // n)
            assert shape[0] == max(0, min(chunk, full[k] - r * chunk)) and shape[1:] == ref["shapes"][k][1:], k
    assert out[-1]["shapes"]["mid.weight"][0] == (0 if n == 4 else 1)
    torch.manual_seed(0)
    start = w.Toy().to(torch.float64).up.bias
    assert torch.equal(out[0]["params"]["up.bias"], start.detach())  # frozen: never moved


@pytest.mark.parametrize("kw", [dict(accumulate=2), dict(prefetch=False), dict(replicate=True)])
def test_accumulation_prefetch_and_replicated_params(kw):
    """Two micro-batches accumulated, prefetch off, or the root's ``gain`` replicated (all-reduced):
    still one device on the global batch."""
    ref = w.train("adamw", batches())
    out = launch(w.train_options, world_size=4, args=("adamw", batches()), kwargs=kw)
    for o in out:
        assert max_diff(o["params"], ref["params"]) < TOL
        assert o["gain_shape"] == ((8,) if kw.get("replicate") else (2,))


def test_named_modules_find_sharded_linear_and_embedding():
    """Walking ``named_modules()`` finds the original nn.Linear / nn.Embedding, each weight an
    nn.Parameter of ⌈d0/N⌉ rows (or fewer) that records its full shape."""
    cfg = wz.CFG
    found = launch(w.gpt_layout, world_size=4, args=(cfg,))
    one = {
        f"{m}.{p}" if m else p: t for m, mod in GPT(cfg).named_modules() for p, t in mod.named_parameters(recurse=False)
    }
    for r, rows in enumerate(found):
        kinds = {kind for _, kind, *_ in rows}
        assert kinds == {"Linear", "Embedding"}
        assert len(rows) == sum(1 for k in one if k.endswith(("weight", "bias")) and ("ln" not in k))
        for name, _, shape, full, cls in rows:
            assert cls is torch.nn.Parameter and full == tuple(one[name].shape), name
            chunk = -(-full[0] // 4)
            assert shape == (max(0, min(chunk, full[0] - r * chunk)), *full[1:]), name


def test_bf16_policy_matches_torch_and_halves_gather_bytes():
    """MixedPrecisionPolicy(bf16, fp32): the same losses and parameters as PyTorch's fully_shard with its
    policy (bit for bit: the same casts, the same collectives), fp32 shards as the master copy, and the
    all-gathers move half the fp32 bytes (2 instead of 4 per element) while the fp32 reduce-scatter does not."""
    bf = (torch.bfloat16, torch.float32)
    adamw = wz.ADAMW
    run = lambda mp: launch(
        wz.workers_03.run, world_size=4, args=(("zero3pp", "fsdp2"), wz.CFG, adamw, wz.batches(3)), kwargs=dict(mp=mp)
    )[0]
    half, full = run(bf), run(None)
    a, t = half["zero3pp"], half["fsdp2"]
    assert a["losses"] == t["losses"] and max_diff(a["params"], t["params"]) == 0.0
    assert all(v.dtype == torch.float32 for v in a["params"].values())
    assert a["held"] == t["held"]  # the same shards, gradients and AdamW state, byte for byte
    assert a["comm"]["all_gather_single"] * 2 == full["zero3pp"]["comm"]["all_gather_single"]
    assert a["comm"]["reduce_scatter_single"] == full["zero3pp"]["comm"]["reduce_scatter_single"]
    assert MixedPrecisionPolicy(*bf).param_dtype is torch.bfloat16


@pytest.mark.parametrize(
    "fn, n, words",
    [
        (w.double_wrap, 1, "already sharded"),
        (w.tied_across_calls, 1, "shared with a module"),
        (w.different_start, 2, "differ between rank 0"),
    ],
)
def test_bad_use_fails_in_one_line(fn, n, words):
    with pytest.raises(ConfigError, match=words):
        launch(fn, world_size=n)
