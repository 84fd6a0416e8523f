"""Lesson 04: tensor parallelism (minipar.tp.mappings, minipar.tp.layers, minipar.tp.gpt, minipar.tp.dtensor).

The core claim: TP = 1, 2, 4 training — with and without sequence parallelism, and PyTorch's
DTensor TP — equals single-device training of ``minipar.model.gpt.GPT`` from the same seed on the
same batches of the built-in corpus (vocabulary 103, padded to 104 on 2 and 4 ranks).
"""

import pytest
import torch

from minipar import ConfigError, launch
from minipar.model.gpt import GPTConfig
from minipar.tp.gpt import TensorParallelGPT, check_tp_config
from minipar.tp.mappings import check_divisible, new_tp_group
from tests import _workers_tp as w

STEPS = 3
# Tolerances (absolute), derived rather than fitted to one CPU: every equivalence run is float64 (model,
# activations, gradients, AdamW state; 3 AdamW steps at lr 3e-3). A row-parallel layer adds N partial
# sums and then all-reduces them, so each matmul rounds in another order than on one device: ~1e-16
# relative, whatever kernels the CPU picks (AVX2, AVX-512, MKL). AdamW's 1/(sqrt(v) + eps) amplifies
# that only for near-zero gradients, leaving parameters ~1e-14 apart, while a real bug (a missing
# all-reduce, a wrong shard, an unsynced SP gradient) moves a gradient by ~1e-2 and a parameter by ~lr.
# 1e-9 sits five orders from both. (In fp32 the same reordering gave 6e-6 here and more on AVX-512.)
LOSS_TOL = 1e-9
GRAD_TOL = 1e-9
PARAM_TOL = 1e-9


@pytest.fixture(scope="module")
def reference():
    return w.train_steps(STEPS)


def _max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b), set(a) ^ set(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


def _assert_matches(ref: dict, got: dict) -> None:
    assert max(abs(x - y) for x, y in zip(ref["losses"], got["losses"])) < LOSS_TOL, (ref["losses"], got["losses"])
    assert _max_diff(ref["grads"], got["grads"]) < GRAD_TOL
    assert _max_diff(ref["params"], got["params"]) < PARAM_TOL


def test_tp1_is_the_single_device_model(reference):
    """Without a process group (TP = 1) the layers hold the whole weight; only the loss differs in
    rounding (vocab_parallel_cross_entropy computes log-sum-exp in its own order)."""
    _assert_matches(reference, w.train_steps(STEPS, tp=1))


@pytest.mark.parametrize("tp", [2, 4])
def test_tp_training_equals_one_device(reference, tp):
    """TP = 2, 4, without and with sequence parallelism: losses, last grads, final params."""
    out = launch(w.equivalence_suite, world_size=tp, args=(STEPS,))
    for sp in (False, True):
        _assert_matches(reference, out[0][sp])
        for r in range(1, tp):  # every rank ends with the same full model, replicated grads agree
            assert out[r][sp]["losses"] == out[0][sp]["losses"]
            assert _max_diff(out[0][sp]["grads"], out[r][sp]["grads"]) == 0.0
    shapes, d = out[0]["shapes"], 32
    assert shapes["blocks.0.attn.qkv.weight"] == (3 * d // tp, d)  # column-parallel: rows split
    assert shapes["blocks.0.mlp.proj.weight"] == (d, 4 * d // tp)  # row-parallel: columns split
    assert shapes["blocks.0.mlp.proj.bias"] == (d,)  # replicated
    assert shapes["wte.weight"] == (104 // tp, d)  # vocabulary 103 padded to 104


def test_dtensor_tp_equals_one_device(reference):
    """PyTorch's DTensor TP (ColwiseParallel/RowwiseParallel, vocabulary-parallel head and
    loss_parallel) on 2 ranks gives the same numbers, to the same tolerances."""
    out = launch(w.train_steps_dtensor, world_size=2, args=(STEPS, True))
    _assert_matches(reference, out[0])


def test_comm_counts_per_block():
    """Per transformer block: 2 all-reduces forward + 2 backward of a (B, T, d) fp32 tensor
    (Shoeybi et al. 2019, §3); with sequence parallelism 2 all-gathers + 2 reduce-scatters each
    way, plus 2 all-gathers in backward that recompute the gathered input (Korthikanti et al.
    2022, §4.2.2), every one of B·T·d·4 bytes (the full tensor)."""
    out = launch(w.block_comm_counts, world_size=2, args=(2, 8))
    S = 2 * 8 * 32 * 4
    for recs in out:
        assert [(r[0], r[1]) for r in recs[False]] == [("forward", "all_reduce")] * 2 + [("backward", "all_reduce")] * 2
        assert all(r[2] == S and r[3] == 2 * (2 - 1) / 2 * S for r in recs[False])
        sp = {}
        for lab, op, nbytes, _ in recs[True]:
            sp[(lab, op)] = sp.get((lab, op), 0) + 1
            assert nbytes == S
        assert sp == {
            ("forward", "all_gather_single"): 2,
            ("forward", "reduce_scatter_single"): 2,
            ("backward", "reduce_scatter_single"): 2,
            ("backward", "all_gather_single"): 4,
        }


def test_conjugate_operators_on_2_ranks():
    """f/g and the scatter/gather pairs: forward values and backward gradients, exactly."""
    out = launch(w.operator_semantics, world_size=2)
    base = torch.arange(8.0).view(1, 4, 2)
    x = [base + 10 * r for r in range(2)]
    wt = lambda shape: (1 + torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float)).view(shape)  # noqa: E731
    for r, res in enumerate(out):
        exp = {
            "copy_to_tensor_parallel_region": (x[r], 2 * wt((1, 4, 2))),
            "reduce_from_tensor_parallel_region": (x[0] + x[1], wt((1, 4, 2))),
            "scatter_to_tensor_parallel_region": (x[r][..., r : r + 1], wt((1, 4, 1)).expand(1, 4, 2)),
            "gather_from_tensor_parallel_region": (torch.cat(x, -1), wt((1, 4, 4))[..., 2 * r : 2 * r + 2]),
            "scatter_to_sequence_parallel_region": (x[r][:, 2 * r : 2 * r + 2], torch.cat([wt((1, 2, 2))] * 2, 1)),
            "gather_from_sequence_parallel_region": (torch.cat(x, 1), 2 * wt((1, 8, 2))[:, 4 * r : 4 * r + 4]),
            "reduce_scatter_to_sequence_parallel_region": (
                (x[0] + x[1])[:, 2 * r : 2 * r + 2],
                torch.cat([wt((1, 2, 2))] * 2, 1),
            ),
        }
        for name, (y, g) in exp.items():
            assert torch.equal(res[name][0], y), (r, name, "forward")
            assert torch.equal(res[name][1], g), (r, name, "backward")


def test_layer_options_equal_full_linear():
    """gather_output / input_is_parallel=False: same output and input gradient as nn.Linear, to
    float64 rounding of a 2-way split sum of 8 products (values O(1): ~1e-15; bound 1e-12)."""
    for r in launch(w.layer_options, world_size=2):
        for name, (dy, dx) in r.items():
            assert dy < 1e-12 and dx < 1e-12, (name, dy, dx)


@pytest.mark.parametrize(
    "kw, text",
    [
        (dict(d_model=30, n_head=6), "hidden size d_model=30 is not divisible by tp=4; use tp in [1, 2, 3, 6]"),
        (dict(d_model=32, n_head=2), "number of heads n_head=2 is not divisible by tp=4; use tp in [1, 2]"),
        (dict(d_model=36, n_head=12), "hidden size d_model=36 is not divisible by tp=8; use tp in [1, 2, 3, 4, 6, 12]"),
    ],
)
def test_bad_sizes_name_the_value_and_the_choices(kw, text):
    tp = int(text.split("tp=")[1].split(";")[0])
    with pytest.raises(ConfigError) as e:
        check_tp_config(GPTConfig(**kw), tp)
    assert str(e.value) == text


def test_bad_ffn_and_group_sizes():
    with pytest.raises(
        ConfigError, match=r"FFN size 4\*d_model=20 is not divisible by tp=8; use tp in \[1, 2, 4, 5, 10\]"
    ):
        check_divisible("FFN size 4*d_model", 20, 8)
    with pytest.raises(ConfigError, match=r"tp=3 is not a divisor of world_size=1; use tp in \[1\]"):
        new_tp_group(3)
    with pytest.raises(ConfigError, match=r"tp=3 is not a divisor of world_size=4; use tp in \[1, 2, 4\]"):
        launch(w.make_group, world_size=4, args=(3,))


def test_sequence_parallel_needs_T_divisible():
    with pytest.raises(
        ConfigError, match=r"sequence length T=7 is not divisible by tp=2 \(sequence parallelism\); use T=6 or 8"
    ):
        launch(w.sp_bad_length, world_size=2)


def test_tied_weights_single_process():
    """A tied head/embedding loads and gathers back as one tensor (tp=1 here, tp>1 in the suite's layout)."""
    torch.manual_seed(0)
    m = TensorParallelGPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, d_model=8, tie_weights=True))
    assert m.lm_head.weight is m.wte.weight
    sd = m.full_state_dict()
    assert torch.equal(sd["lm_head.weight"], sd["wte.weight"])


def test_dtensor_tp_needs_foreach_false():
    """PyTorch's DTensor TP leaves the norms and position table plain tensors: a foreach optimizer (CUDA's
    default) refuses the mix, the per-tensor one (``foreach=False``, what ``minipar.tp.dtensor`` says) steps.
    Found by ``make gpu-check``'s probe on an H100; reproduced here by forcing foreach on the CPU."""
    assert "mixed torch.Tensor and DTensor" in launch(w.dtensor_optimizer_step, world_size=2, args=(True,))[0]
    assert launch(w.dtensor_optimizer_step, world_size=2, args=(False,)) == ["ok", "ok"]
