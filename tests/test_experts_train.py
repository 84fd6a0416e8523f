"""Lesson 12: the main job with experts (``--moe-experts 4 --ep 2``) equals one device and trains on text.

Bound (float64, as tests/test_train.py derives it): EP and DP add the same numbers in another order
(an expert's rows arrive grouped by source rank; gradients are averaged over ranks instead of over
one batch), which moves a float64 gradient by δ ≲ 1e-13; AdamW (eps 1e-8, lr 3e-3) turns that into
at most lr·δ/eps ≈ 3e-8 per weight per step, and the losses of ~3-4 nats move far less than 1e-5
over these few steps. A real bug moves them past it: an expert gradient divided by dp/ep instead of dp
moves them by ~9e-5 (``test_wrong_expert_divisor_moves_the_losses_past_the_bound`` introduces it).
Routing is a discrete choice: a weight difference of 1e-8 could flip a token whose two best
experts tie within 1e-8; the seeded runs here have no such token (a flip would fail the bound).

Micro-batches, recomputation and checkpoints (issue #25) are proven the same way: against the plainest
one-device loop accumulating the same micro-batches (``moe_job_reference``: the aux loss is per
micro-batch, so the reference must split the batch the same way), against the job on one device, and
against a run without a stop.
"""

import pytest

from minipar import ConfigError, launch
from minipar.job.config import TrainConfig, check
from minipar.train import main
from tests import _workers_moe as wm
from tests import _workers_train as wt

LOSS_BOUND = 1e-5
MOE = dict(
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
    moe_experts=4,
    moe_top_k=2,
)


def _losses(h):
    return [(r["step"], k, r[k]) for r in h for k in ("loss", "val_loss") if k in r]


@pytest.mark.parametrize("world,ep", [(2, 2), (4, 2)])
def test_expert_parallel_job_equals_one_device(world, ep):
    one = wt.train_float64(TrainConfig(**MOE, out=None))
    many = launch(wt.train_float64, world_size=world, args=(TrainConfig(**MOE, dp=world, ep=ep, out=None),))
    assert _losses(many[0]) == _losses(many[-1])  # every rank logs the same all-reduced loss
    for (s, k, a), (s2, k2, b) in zip(_losses(one), _losses(many[0]), strict=True):
        assert (s, k) == (s2, k2) and abs(a - b) < LOSS_BOUND, (s, k, a, b)


def _train_with_wrong_expert_divisor(cfg):
    """The mutant of lesson 12's claim: experts' gradients divided by dp/ep instead of dp (× ep after the
    correct average), patched into this rank's ``minipar.job.piece`` before it trains."""
    import minipar.job.piece as piece

    correct = piece.average_grads_

    def mutant(module, mesh, compressor=None):
        correct(module, mesh, compressor)
        for name, p in module.named_parameters():
            if piece.is_expert(name):
                p.grad.mul_(mesh.ep_size)

    piece.average_grads_ = mutant
    return wt.train_float64(cfg)


def test_wrong_expert_divisor_moves_the_losses_past_the_bound():
    """The bound 1e-5 is not blind to the bug it is meant to catch: with the experts' gradients divided by
    dp/ep = 1 instead of dp = 2 (dp2·ep2), some logged loss moves by more than 5× the bound from one
    device's (about 9e-5 in float64 on this seed)."""
    one = wt.train_float64(TrainConfig(**MOE, out=None))
    bad = launch(_train_with_wrong_expert_divisor, world_size=2, args=(TrainConfig(**MOE, dp=2, ep=2, out=None),))
    moved = max(abs(a - b) for (_, _, a), (_, _, b) in zip(_losses(one), _losses(bad[0]), strict=True))
    assert moved > 5 * LOSS_BOUND, moved


def test_cli_trains_on_text(tmp_path, capsys):
    flags = ["--moe-experts", "4", "--moe-top-k", "2", "--ep", "2", "--dp", "2", "--steps", "20"]
    flags += ["--batch-size", "8", "--block-size", "32", "--n-layer", "2", "--d-model", "32", "--n-head", "2"]
    flags += ["--eval-every", "10", "--eval-batches", "2", "--sample-chars", "20", "--out", str(tmp_path)]
    assert main(flags) == 0
    first, last = capsys.readouterr().out.split("val loss ")[1].split(" -> ")
    assert float(last.split()[0]) < float(first.split()[0]) - 0.3
    assert len((tmp_path / "sample.txt").read_text()) >= 20


@pytest.mark.parametrize(
    "kw, text",
    [
        (dict(moe_experts=0, ep=2), "--ep 2 needs experts"),
        (dict(moe_experts=3, ep=2, dp=2), "--ep 2 must divide --moe-experts 3 .*use --ep 1, 3"),
        (dict(moe_experts=4, ep=2, dp=3), "--ep 2 must divide the 3 data-parallel ranks.*use --ep 1, 3"),
        (dict(moe_experts=4, moe_top_k=5), "--moe-top-k 5: at most --moe-experts 4 experts per token"),
        (dict(moe_experts=4, tp=2), "drop --tp"),
        (dict(moe_experts=4, zero=3), r"drop --zero 3 \(use --zero 1\)"),
        (dict(moe_experts=4, pp=2, grad_compression="bf16"), "drop --pp, --grad-compression"),
    ],
)
def test_bad_moe_settings_are_one_line(kw, text):
    with pytest.raises(ConfigError, match=text):
        check(TrainConfig(**{**MOE, **kw}), world_size=kw.get("dp", 1))  # before any rank starts


def test_ep_must_divide_the_ranks_left_to_dp(capsys):
    assert main(["--moe-experts", "4", "--ep", "2", "--nproc", "3", "--steps", "1", "--out", ""]) == 2
    assert "--ep 2 must divide the 3 data-parallel ranks" in capsys.readouterr().err


def _train_losses(h):
    return [(r["step"], r["loss"]) for r in h if "loss" in r]


def _close(got, want, what):
    assert [s for s, _ in got] == [s for s, _ in want], what
    worst = max(abs(a - b) for (_, a), (_, b) in zip(got, want))
    assert worst < LOSS_BOUND, (what, worst, got, want)


@pytest.mark.parametrize("world,ep", [(2, 2), (4, 2)])
def test_microbatches_equal_one_device_accumulating_the_same_microbatches(world, ep):
    """--microbatches 2 with experts: equal to the plainest one-device loop over x.chunk(2) (aux per
    micro-batch) and to the job on one device; the ranks' micro-batch j together is one device's j
    (the loader strides rows over ranks). Accumulating
    the whole batch instead (aux over 8 rows, not 4) moves the losses by ~8e-5: the bound sees it."""
    cfg = dict(MOE, microbatches=2, out=None)
    ref = wm.moe_job_reference(TrainConfig(**cfg))
    one = _train_losses(wt.train_float64(TrainConfig(**cfg)))
    many = launch(wt.train_float64, world_size=world, args=(TrainConfig(**cfg, dp=world, ep=ep),))
    _close(one, ref, "one device vs the reference loop")
    _close(_train_losses(many[0]), ref, f"dp{world}·ep{ep} vs the reference loop")
    whole = wm.moe_job_reference(TrainConfig(**{**cfg, "microbatches": 1}))
    assert max(abs(a - b) for (_, a), (_, b) in zip(whole, ref)) > 5 * LOSS_BOUND  # the split matters


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_recompute_equals_one_device(mode):
    """--recompute with experts on dp2·ep2: the same losses as one device without recomputation (full
    recomputation re-runs the all-to-alls in backward and keeps the aux loss's gradient)."""
    one = wt.train_float64(TrainConfig(**MOE, out=None))
    many = launch(wt.train_float64, world_size=2, args=(TrainConfig(**MOE, dp=2, ep=2, recompute=mode, out=None),))
    for (s, k, a), (s2, k2, b) in zip(_losses(one), _losses(many[0]), strict=True):
        assert (s, k) == (s2, k2) and abs(a - b) < LOSS_BOUND, (mode, s, k, a, b)


@pytest.mark.parametrize(
    "saver, resumers",
    [
        (dict(ep=2), [dict(ep=2), dict(ep=4), dict(ep=1)]),
        (dict(ep=2, zero=1), [dict(ep=2, zero=1), dict(ep=4), dict(ep=1, zero=1)]),
    ],
)
def test_checkpoint_resumes_under_another_ep(tmp_path, saver, resumers):
    """Saved by dp4·ep2 (with or without ZeRO-1) at step 3 (of 6); resumed with ep 2, 4 and 1 (with and
    without ZeRO-1), and on one device: steps 3-5 and the final val loss equal the uninterrupted run's
    (the checkpoint holds whole expert tensors and whole moments)."""
    d = str(tmp_path / "ck")
    out = launch(wm.moe_save_and_resume, world_size=4, args=(dict(MOE, out=None), d, 6, 3, saver, resumers))[0]
    assert out["files"] == ["step_00000003"]
    full = [r for r in _losses(out["full"]) if r[0] >= 3]
    single = wt.train_float64(TrainConfig(**MOE, out=None, ckpt_dir=d, resume=True))
    for name, h in [*zip(map(str, resumers), out["resumed"]), ("one device", single)]:
        got = [r for r in _losses(h) if r[0] >= 3]
        assert [r[:2] for r in got] == [r[:2] for r in full], name
        assert max(abs(a[2] - b[2]) for a, b in zip(got, full)) < LOSS_BOUND, name


@pytest.mark.parametrize("world,ep,m", [(2, 2, 1), (4, 2, 2)])
def test_zero1_equals_one_device(world, ep, m):
    """--zero 1 with experts: AdamW moments of the dense parameters sharded over dp, of the experts over
    expert-dp (dp4·ep2: 2 ranks per expert); clipped by the whole model's norm: the one-device losses."""
    one = wt.train_float64(TrainConfig(**MOE, microbatches=m, out=None))
    cfg = TrainConfig(**MOE, dp=world, ep=ep, zero=1, microbatches=m, out=None)
    many = launch(wt.train_float64, world_size=world, args=(cfg,))
    for (s, k, a), (s2, k2, b) in zip(_losses(one), _losses(many[0]), strict=True):
        assert (s, k) == (s2, k2) and abs(a - b) < LOSS_BOUND, (world, ep, m, s, k, a, b)


def test_cli_zero1_microbatches_checkpoint_then_resume_with_another_ep(tmp_path, capsys):
    """The command line: dp2·ep2 --zero 1 --microbatches 2 --recompute full saving every 4 steps, then
    --resume from step 4 with --ep 1 and no ZeRO (the checkpoint's layout is written beside it)."""
    import json
    import shutil

    out = tmp_path / "run"
    flags = ["--moe-experts", "4", "--moe-top-k", "2", "--dp", "2", "--steps", "8", "--batch-size", "8"]
    flags += ["--block-size", "16", "--n-layer", "2", "--d-model", "16", "--n-head", "2", "--eval-every", "4"]
    flags += ["--eval-batches", "1", "--sample-chars", "0", "--out", str(out)]
    first = ["--ep", "2", "--zero", "1", "--microbatches", "2", "--recompute", "full", "--ckpt-every", "4"]
    assert main(flags + first) == 0
    meta = json.loads((out / "ckpt" / "step_00000004" / "minipar.json").read_text())
    assert meta["layout"] == "dp2·ep2 zero1" and meta["moe_experts"] == 4
    shutil.rmtree(out / "ckpt" / "step_00000008")
    capsys.readouterr()
    assert main(flags + ["--ep", "1", "--resume"]) == 0
    assert "resumed at step 4: val loss" in capsys.readouterr().out


@pytest.mark.parametrize(
    "world,kw",
    [
        (2, dict(cp=2, microbatches=2)),
        (4, dict(dp=2, cp=2, ep=2, recompute="full")),
        (4, dict(dp=2, cp=2, ep=2, zero=1)),
        (4, dict(dp=2, cp=2, ep=1, zero=1)),
    ],
)
def test_context_parallel_equals_one_device(world, kw):
    """--cp with experts: every rank runs its 2 chunks of each sequence (ring attention), the aux loss
    weighted like the cross-entropy (cp·L_r/T) and balanced over dp × cp, experts' gradients summed over
    expert-dp × cp: the one-device losses (with 2 micro-batches, the one device accumulates the same 2).
    With --zero 1 the dense shards span dp × cp and the experts' expert-dp × cp (Mesh.edp_cp_group)."""
    one = wt.train_float64(TrainConfig(**MOE, microbatches=kw.get("microbatches", 1), out=None))
    many = launch(wt.train_float64, world_size=world, args=(TrainConfig(**{**MOE, **kw}, out=None),))
    assert _losses(many[0]) == _losses(many[-1])
    for (s, k, a), (s2, k2, b) in zip(_losses(one), _losses(many[0]), strict=True):
        assert (s, k) == (s2, k2) and abs(a - b) < LOSS_BOUND, (kw, s, k, a, b)
