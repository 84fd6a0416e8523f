"""minipar.zero / minipar.zero.stage3: ZeRO stages 1-3 equal single-device AdamW, hold the bytes the
paper's formulas say, and move the bytes §7 says (Rajbhandari et al. 2020, arXiv:1910.02054)."""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.data import CharCorpus, make_loader
from minipar.model.gpt import GPT, GPTConfig, num_params
from minipar.zero import zero
from minipar.zero.flat import default_units, zero_bytes_formula
from minipar.zero.stage3 import ShardedUnit
from tests import _workers_zero as w

STEPS = 3
ZERO = ("zero1", "zero2", "zero3")
F64 = torch.float64
# Every equivalence here runs in float64 (model, gradients, AdamW state): reordered sums (n per-rank
# means averaged instead of one global mean, two half-batch backward passes instead of one) then
# differ by ~1e-16 relative whatever kernels the CPU picks (AVX2, AVX-512, MKL). AdamW divides by
# sqrt(v) + eps, which amplifies that only for near-zero gradients, leaving parameter differences
# ~1e-14 (measured 2e-14), while a real bug (a missing reduce-scatter, a wrong 1/N, a shard stepped
# twice) moves a parameter by ~lr = 1e-2. 1e-9 sits five orders from both, on any CPU. (In fp32 the
# same reordering reached 2e-5, and a tolerance fitted to one CPU is not portable.)
LOSS_TOL = 1e-9
PARAM_TOL = 1e-9
BYTES = 8  # float64 element: the fp32 formulas' bytes scale by BYTES / 4


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def reference():
    return w.workers_03.single_device(w.CFG, w.ADAMW, w.batches(STEPS), dtype=F64)


def test_one_rank_equals_one_device(reference):
    """Every strategy on one rank (its tensors on ``minipar.runtime.dist.device()``: ``make gpu-check`` runs this
    on NCCL with one GPU) = one device, within the same derived bounds (a GPU's float64 kernels may sum in
    another order)."""
    strategies = ZERO + ("dp", "fsdp2")
    out = launch(
        w.workers_03.run, world_size=1, args=(strategies, w.CFG, w.ADAMW, w.batches(STEPS)), kwargs=dict(dtype=F64)
    )
    for s, o in out[0].items():
        assert max(abs(a - b) for a, b in zip(o["losses"], reference["losses"])) < LOSS_TOL, s
        assert max_diff(o["params"], reference["params"]) < PARAM_TOL, s


@pytest.mark.parametrize("n", [2, 4])
def test_stages_equal_single_device_and_measure_formulas(n, reference):
    """ZeRO-1/2/3 (and FSDP2, and plain DP) on n ranks = one device on the same global batch.

    float64 throughout; tolerances 1e-9 on losses (values ~3.7) and parameters after 3 AdamW steps
    at lr 1e-2, derived above (LOSS_TOL, PARAM_TOL): the parallel runs average n per-rank mean
    gradients instead of one global mean, the same numbers summed in another order. Between the
    three ZeRO stages the arithmetic is the same operations in the same order: bit for bit equal.
    Bytes: the fp32 formulas times BYTES / 4 (every state tensor is float64 here).
    """
    out = launch(
        w.workers_03.run,
        world_size=n,
        args=(ZERO + ("dp", "fsdp2"), w.CFG, w.ADAMW, w.batches(STEPS)),
        kwargs=dict(dtype=F64),
    )
    r0 = out[0]
    for s, o in r0.items():
        assert max(abs(a - b) for a, b in zip(o["losses"], reference["losses"])) < LOSS_TOL, s
        assert max_diff(o["params"], reference["params"]) < PARAM_TOL, s
    for s in ZERO[1:]:
        assert r0[s]["losses"] == r0["zero1"]["losses"] and max_diff(r0[s]["params"], r0["zero1"]["params"]) == 0

    psi = num_params(GPT(w.CFG))
    units = default_units(GPT(w.CFG))
    pad = BYTES * (n - 1) * len(units)  # at most n-1 padding elements per unit
    for stage, s in enumerate(ZERO, start=1):  # bytes held per rank vs the formula, exact up to padding
        f = {k: v * BYTES / 4 for k, v in zero_bytes_formula(psi, stage, n).items()}
        for r in range(n):
            for key in ("params", "grads", "optimizer"):
                assert abs(out[r][s]["held"][key] - f[key]) <= pad, (s, r, key)
        assert sum(out[r][s]["held"]["optimizer"] for r in range(n)) == 2 * BYTES * psi  # AdamW moments: each once
    ring = 2 * (n - 1) / n * BYTES * psi  # data parallelism: one ring all-reduce of Ψ elements per rank
    assert r0["dp"]["comm"]["all_reduce"] == ring
    for s in ("zero1", "zero2"):  # §7.2.1: reduce-scatter + all-gather = the same 2Ψ
        assert abs(sum(r0[s]["comm"].values()) - ring) <= pad
    emb = BYTES * (n - 1) / n * sum(m.weight.numel() for m in (GPT(w.CFG).wte, GPT(w.CFG).wpe))
    z3 = r0["zero3"]["comm"]  # §7.2.2: 3Ψ, less the embeddings, which backward never re-gathers
    assert abs(z3["reduce_scatter_single"] - ring / 2) <= pad
    assert abs(z3["all_gather_single"] - (ring - emb)) <= 2 * pad
    assert abs(sum(r0["fsdp2"]["comm"].values()) - 1.5 * ring) <= 3 * pad  # FSDP2 re-gathers them


def test_clipping_equals_clip_grad_norm():
    """max_norm=0.05 clips every step (gradient norms here are ~0.5-1): ZeRO's global norm from
    an all-reduce of shard norms must equal ``torch.nn.utils.clip_grad_norm_``. float64, tolerances as above."""
    adamw = dict(w.ADAMW, max_norm=0.05)
    ref = w.workers_03.single_device(w.CFG, adamw, w.batches(STEPS), dtype=F64)
    out = launch(
        w.workers_03.run,
        world_size=2,
        args=(("zero2", "zero3"), w.CFG, adamw, w.batches(STEPS)),
        kwargs=dict(dtype=F64),
    )[0]
    for _s, o in out.items():
        assert max(abs(a - b) for a, b in zip(o["losses"], ref["losses"])) < LOSS_TOL
        assert max_diff(o["params"], ref["params"]) < PARAM_TOL


def test_stage3_gathers_one_unit_at_a_time_and_frees_it():
    """One process (world of 1, no process group needed): after forward and after backward no
    gathered weights are left, and at no moment is more than one unit's weights alive."""
    torch.manual_seed(0)
    trace = []
    model = GPT(w.CFG)
    opt = zero(model, 3, trace=trace, **w.ADAMW)
    xy = w.batches(1)[0]
    loss = model(xy[:, :-1], xy[:, 1:])[1]
    assert ShardedUnit.live_bytes == 0
    loss.backward()
    assert ShardedUnit.live_bytes == 0 and all(s.grad is not None for s in opt.shards)
    biggest = max(u.padded for u in opt.units) * 4
    assert max(b for _, _, b in trace) <= biggest
    gathers = [(e, u) for e, u, _ in trace if e.startswith("gather")]
    assert gathers[0] == ("gather (forward)", "wte") and ("gather (backward)", "wte") not in gathers


def test_one_rank_is_plain_adamw(reference):
    """World of 1: every stage is single-device AdamW (same elementwise operations; float64, PARAM_TOL)."""
    for stage in (1, 2, 3):
        torch.manual_seed(0)
        model = GPT(w.CFG).to(F64)
        opt = zero(model, stage, **w.ADAMW)
        for xy in w.batches(STEPS):
            model(xy[:, :-1], xy[:, 1:])[1].backward()
            opt.step()
            opt.zero_grad()
        params = opt.full_state_dict() if stage == 3 else dict(model.named_parameters())
        assert max_diff({k: v.detach() for k, v in params.items()}, reference["params"]) < PARAM_TOL


# -- bad input: one clear ConfigError naming the value and the fix ---------------------------


def test_parameters_that_differ_across_ranks_are_detected():
    with pytest.raises(ConfigError, match=r"unit 'wte' differ between rank 0 and rank\(s\) \[1\].*manual_seed"):
        launch(w.different_start, world_size=2, args=(2,))


@pytest.mark.parametrize("stage", [0, 4, "2"])
def test_bad_stage(stage):
    with pytest.raises(ConfigError, match=f"stage={stage!r}.*use 1"):
        zero(GPT(w.CFG), stage)


def test_bad_max_norm_and_tied_weights():
    with pytest.raises(ConfigError, match=r"max_norm=0.*> 0"):
        zero(GPT(w.CFG), 1, max_norm=0)
    tied = GPTConfig(**{**w.CFG.__dict__, "tie_weights": True})
    with pytest.raises(ConfigError, match="tied weights.*tie_weights=False"):
        zero(GPT(tied), 2)


def test_dataset_smaller_than_world_size():
    """Four ranks need at least four sequences per step: the loader says so before any rank starts."""
    windows = CharCorpus("abcdefghij" * 4).split("train", 16)  # 2 windows of 16 characters
    with pytest.raises(ConfigError, match="larger than the dataset"):
        make_loader(windows, batch_size=4, dp_size=4)


def test_gradient_accumulation_equals_one_big_batch(reference):
    """Two backward passes of half the batch before each step (stage 2 and 3 add each reduce-scattered
    gradient shard to the last) = one pass over the whole batch. World of 1, float64, PARAM_TOL as for
    the multi-rank runs: two partial sums instead of one differ by float64 rounding only."""
    for stage in (1, 2, 3):
        torch.manual_seed(0)
        model = GPT(w.CFG).to(F64)
        opt = zero(model, stage, **w.ADAMW)
        for xy in w.batches(STEPS):
            for half in xy.chunk(2):
                (model(half[:, :-1], half[:, 1:])[1] / 2).backward()
            opt.step()
            opt.zero_grad()
        params = opt.full_state_dict() if stage == 3 else dict(model.named_parameters())
        assert max_diff({k: v.detach() for k, v in params.items()}, reference["params"]) < PARAM_TOL, stage
