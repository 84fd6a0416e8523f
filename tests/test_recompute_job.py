"""The main job's ``--recompute {none,selective,full}`` (lesson 08): same losses on every layout, clear errors."""

import pytest
import torch

from minipar import launch
from minipar.errors import ConfigError
from minipar.job.cli import parse_args
from minipar.job.config import TrainConfig, check
from minipar.model.gpt import GPT, GPTConfig
from minipar.model.memory import SavedTensorMeter
from minipar.model.recompute import set_recompute
from tests import _workers_train as wt

SMALL = dict(
    steps=6,
    batch_size=8,
    block_size=16,
    n_layer=2,
    n_head=2,
    d_model=16,
    eval_every=3,
    log_every=1,
    eval_batches=1,
    sample_chars=0,
    out=None,
)


def _losses(hist):
    return [(r.get("loss"), r.get("val_loss")) for r in hist]


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict()])
def test_two_ranks_recompute_full_equals_none(layout):
    """Recomputation re-runs the same float64 ops on the same inputs (dropout is 0 in the main job):
    the losses are bit-equal; a wrong recompute (stale input, missing gradient) moves them by > 1e-3."""
    base = launch(wt.train_float64, world_size=2, args=(TrainConfig(**SMALL, **layout),))[0]
    full = launch(wt.train_float64, world_size=2, args=(TrainConfig(**SMALL, **layout, recompute="full"),))[0]
    assert _losses(full) == _losses(base)


def test_selective_single_rank_equals_none():
    base = wt.train_float64(TrainConfig(**SMALL))
    sel = wt.train_float64(TrainConfig(**SMALL, recompute="selective"))
    assert _losses(sel) == _losses(base)


def test_bad_recompute_is_config_error():
    with pytest.raises(ConfigError, match="--recompute half"):
        check(TrainConfig(**{**SMALL, "recompute": "half"}))
    with pytest.raises(ConfigError, match="no transformer blocks"):
        set_recompute(torch.nn.Linear(2, 2), "full")
    cfg, _ = parse_args(["--recompute", "full"])
    assert cfg.recompute == "full"


def _blocks_meter(m: GPT) -> SavedTensorMeter:
    """The bytes ``m``'s blocks save in forward for a (2, 16, 16) input (fp32)."""
    x = torch.randn(2, 16, 16, requires_grad=True)
    with SavedTensorMeter(exclude=m) as meter:
        h = x
        for blk in m.blocks:
            h = blk(h)
    return meter


def test_full_keeps_only_block_inputs():
    """Forward-saved bytes of the blocks with full recompute = L · B·T·d · 4 (fp32), exactly."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=16, block_size=16, n_layer=3, n_head=2, d_model=16))
    set_recompute(m, "full")
    meter = _blocks_meter(m)
    assert meter.peak == 3 * 2 * 16 * 16 * 4


def test_planner_accounts_for_recompute_and_offload():
    """The performance model's kept activations with full recompute equal the count on the real blocks;
    selective drops exactly the attention-core term; offload moves AdamW's 8Φ to the host."""
    from minipar.perf.hardware import cpu_device
    from minipar.perf.layout import Layout, shape_of
    from minipar.perf.model import activation_bytes_per_layer, estimate

    cfg = GPTConfig(vocab_size=16, block_size=16, n_layer=3, n_head=2, d_model=16)
    torch.manual_seed(0)
    m = GPT(cfg)
    set_recompute(m, "full")
    meter = _blocks_meter(m)
    shape = shape_of(cfg)
    assert cfg.n_layer * activation_bytes_per_layer(shape, 2, 1, recompute="full", bytes_per_value=4) == meter.peak
    s, b, hd, a = 16, 2, 16, 2
    none = activation_bytes_per_layer(shape, b, 1, bytes_per_value=2)
    sel = activation_bytes_per_layer(shape, b, 1, bytes_per_value=2, recompute="selective")
    assert none - sel == 5 * a * s * s * b and sel == 34 * s * b * hd
    cpu = cpu_device(peak_flops=1e9, mem_bytes=1e9)
    plain = estimate(shape, cpu, Layout(dp=1, tp=1, pp=1, micro_batch=4, recompute="none"), 4)
    off = estimate(shape, cpu, Layout(dp=1, tp=1, pp=1, micro_batch=4, recompute="full", offload=True), 4)
    assert off.mem["host"] == plain.mem["optimizer"] and off.mem["optimizer"] == 0
    assert off.mem["activations"] < plain.mem["activations"] and off.time["compute"] > plain.time["compute"]
    with pytest.raises(ConfigError):
        activation_bytes_per_layer(shape, 2, 1, recompute="half")


def test_full_recompute_peak_is_inputs_plus_one_layer():
    """Lesson 08's "predict" answer: with full recompute the step's peak of saved bytes is the L block
    inputs, plus one block recomputed in full (its input counted once), plus the embedding's tensors."""
    from minipar.model.memory import saved_activation_bytes

    cfg = GPTConfig(vocab_size=50, block_size=32, n_layer=3, n_head=4, d_model=32, dropout=0.1, attention="explicit")
    torch.manual_seed(0)
    m = GPT(cfg)
    idx = torch.randint(0, 50, (2, 32), generator=torch.Generator().manual_seed(0))
    set_recompute(m, "full")
    with SavedTensorMeter(exclude=m) as meter:
        m(idx, idx)[1].backward()
    set_recompute(m, "none")
    x = torch.randn(2, 32, 32, requires_grad=True)
    layer = saved_activation_bytes(lambda: m.blocks[0](x), exclude=m)
    embed = saved_activation_bytes(lambda: m.embed(idx), exclude=m)
    inp = 2 * 32 * 32 * 4
    assert meter.peak == cfg.n_layer * inp + (layer - inp) + embed
