"""Bad settings of the main job fail at once, in one line that names the flag, the value and the fix,
before any rank starts or any file is touched (issue: nothing lost, nothing silent, items 1, 2, 6, 8).

Each case failed before: ``--ckpt-every -1`` saved every step, ``--ckpt-every 5 --out ''`` saved
nothing and said nothing, ``--lr inf`` trained, ``--threads -2`` gave a traceback, ``--tp -1`` blamed
``--nproc`` (a flag never given) and ``--n-layer 0`` suggested ``--pp <= 0``.
"""

import pytest

from minipar.job.cli import parse_args
from minipar.train import main

CASES = [
    (["--ckpt-every", "-1"], "--ckpt-every -1: must be an integer >= 0"),
    (["--ckpt-every", "5", "--out", ""], "--ckpt-every 5 has nowhere to save"),
    (["--lr", "inf"], "--lr inf: must be a finite number > 0"),
    (["--lr", "nan"], "--lr nan: must be a finite number > 0"),
    (["--grad-clip", "inf"], "--grad-clip inf: must be a finite number >= 0"),
    (["--min-lr-frac", "2"], "--min-lr-frac 2.0: must be in [0, 1]"),
    (["--weight-decay", "-1"], "--weight-decay -1.0: must be a finite number >= 0"),
    (["--threads", "-2"], "--threads -2: must be an integer >= 1"),
    (["--threads", "100000"], "--threads 100000: more intra-op threads per rank than this machine's"),
    (["--nproc", "0"], "--nproc 0: must be an integer >= 1"),
    (["--tp", "-1"], "--tp -1: must be an integer >= 1"),
    (["--pp", "0"], "--pp 0: must be an integer >= 1"),
    (["--dp", "0"], "--dp 0: must be an integer >= 1"),
    (["--n-layer", "0"], "--n-layer 0: must be an integer >= 1"),
    (["--d-model", "-8"], "--d-model -8: must be an integer >= 1"),
    (["--sample-chars", "-1"], "--sample-chars -1: must be an integer >= 0"),
    (["--ep", "0"], "--ep 0: must be an integer >= 1"),
    (["--moe-experts", "4", "--ep", "2", "--dp", "3"], "--ep 2 must divide the 3 data-parallel ranks"),
    (["--moe-experts", "4", "--zero", "3"], "--moe-experts 4 runs with data, expert and context"),
    (["--moe-experts", "4", "--tp", "2", "--cp", "2"], "--moe-experts 4 runs with data, expert and context"),
    (
        ["--sample-chars", "1000000000"],
        "--sample-chars 1000000000: must be an integer <= 10000; use --sample-chars 10000 or less",
    ),
    (["--seed", "100000000000000000000000"], "--seed 100000000000000000000000: must be an integer <= 4294967295"),
    (["--seed", "-1"], "--seed -1: must be an integer >= 0 and <= 4294967295"),
    (["--moe-experts", "4", "--moe-top-k", "5"], "--moe-top-k 5: at most --moe-experts 4 experts per token"),
    (["--moe-experts", "4", "--ep", "3", "--nproc", "3"], "--ep 3 must divide --moe-experts 4 (whole experts per"),
    (["--d-model", "128", "--tp", "3", "--nproc", "3"], "--tp 3 must divide --n-head 4 and --d-model 128 (whole"),
    (["--cp", "2", "--zero", "3", "--dp", "2"], "--zero 3 with --tp 1 --pp 1 --cp 2: the main job shards ZeRO-3"),
]


@pytest.mark.parametrize("argv,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_flag_is_refused_in_one_line(argv, message, capsys):
    """The command line's own checks (parse_args: types, choices, launch flags) or the settings' (check(),
    once, before any rank starts): one line on stderr, exit code 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1, err


def test_main_reports_it_without_touching_out(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["--tp", "-1", "--out", str(out)]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tp -1" in err[0] and "--nproc" not in err[0]
    assert not out.exists()


def test_good_settings_pass():
    cfg, _ = parse_args(["--dp", "2", "--ckpt-every", "5", "--out", "x", "--warmup", "0", "--sample-chars", "0"])
    assert (cfg.dp, cfg.ckpt_every, cfg.ckpt_dir) == (2, 5, "x/ckpt")


PLAN_CASES = [
    (["--seq", "-5"], "--seq -5: must be an integer >= 1"),
    (["--seq", "0"], "--seq 0: must be an integer >= 1"),
    (["--gpus", "0"], "--gpus 0: must be an integer >= 1"),
    (["--gpus", "-8"], "--gpus -8: must be an integer >= 1"),
    (["--gpus-per-node", "0"], "--gpus-per-node 0: must be an integer >= 1"),
    (["--global-batch", "0"], "--global-batch 0: must be an integer >= 1"),
    (["--top", "-3"], "--top -3: must be an integer >= 1"),
    (["--overlap", "foo"], "--overlap foo: foo is not one of dp, grad_reduce, pp, tp"),
]


@pytest.mark.parametrize("argv,message", PLAN_CASES, ids=[" ".join(a) for a, _ in PLAN_CASES])
def test_planner_refuses_impossible_input(argv, message, capsys):
    """Before: --seq -5 printed an MFU of 2970 % and negative step times, exit 0 (issue item 5)."""
    from minipar.plan import main as plan_main

    assert plan_main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith(f"error: {message}") and cap.err.count("\n") == 1


def test_planner_explains_an_empty_result(capsys):
    """Before: --gpus 7 printed "(none: ... see below)" with nothing below. (70B's 80 blocks on 7 stages are a valid
    flexible pipeline layout now, 10 + 5·12 + 10, so a 4-block model here: pp = 7 has too few blocks, tp = 7 does not
    divide its 16 heads.)"""
    from minipar.plan import main as plan_main

    assert plan_main(["--gpus", "7", "--layers", "4", "--hidden", "1024", "--heads", "16"]) == 0
    assert "no layout of 7 GPUs is valid here: tp must divide the heads" in capsys.readouterr().out


TINY_RUN = ["--steps", "6", "--batch-size", "4", "--block-size", "16", "--n-layer", "1", "--n-head", "2"]
TINY_RUN += ["--d-model", "16", "--eval-every", "100", "--eval-batches", "1", "--sample-chars", "5", "--log-every", "1"]


def test_a_non_finite_loss_stops_the_run_at_once(tmp_path, capsys):
    """Before: --lr 10 went NaN and trained on to a traceback (issue item 6). Now the step it happens,
    the last finite loss and the fix, in one line; nothing after it is logged (in the failed run's
    live log: its outputs never replace a previous run's, see tests/test_out_folder.py)."""
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--lr", "1e30", "--grad-clip", "0", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the training loss is" in err[0] and "lower --lr (now 1e+30)" in err[0]
    steps = [line for line in (out / "metrics.jsonl.partial").read_text().splitlines() if '"loss"' in line]
    assert len(steps) < 6  # stopped before the end, the bad step not logged
    assert not (out / "metrics.jsonl").exists()


def test_a_text_without_a_newline_trains_and_samples(tmp_path):
    """Before: the sample started from "\\n", so a text without one failed after the whole run."""
    data = tmp_path / "t.txt"
    data.write_text("abcdefghij" * 300)
    out = tmp_path / "run"
    assert main(TINY_RUN + ["--steps", "2", "--data", str(data), "--out", str(out), "--threads", "1"]) == 0
    assert (out / "sample.txt").read_text().strip()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--moe-experts", "6", "--ep", "3", "--nproc", "4"], "--ep 3 must divide the 4 data-parallel ranks"),
        (["--moe-experts", "4", "--ep", "4", "--nproc", "8", "--pp", "2"], "--moe-experts 4 runs with data"),
    ],
)
def test_bad_expert_layout_stops_before_any_rank(tmp_path, capsys, argv, message):
    """--ep is checked with the layout (minipar.runtime.mesh.Mesh folds it into dp), before a rank starts:
    one line, exit 2."""
    out = tmp_path / "run"
    assert main([*argv, "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()
